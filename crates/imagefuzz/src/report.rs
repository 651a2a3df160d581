//! The run's report: a header (machine, seed, counts), tables of outcomes per command and
//! per mutated structure, failure groups (same command, class and message), and JSON lines
//! of every failure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::classify::Outcome;
use crate::judge::{CmdRecord, ImageResult};
use crate::mutate::Structure;

/// What the run was.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Header {
    /// CPUs available.
    pub nproc: usize,
    /// `uname -r`.
    pub kernel: String,
    /// The `cjfs` binary judged.
    pub cjfs: String,
    /// `git rev-parse --short HEAD` of the working directory, if any.
    pub commit: Option<String>,
    /// The run's seed (None when replaying a corpus).
    pub seed: Option<u64>,
    /// Mutated images asked for.
    pub images: usize,
    /// The seed images used.
    pub seeds: Vec<String>,
    /// Notes (skipped seeds, missing tools).
    pub notes: Vec<String>,
    /// Timeout of each command, seconds.
    pub timeout_secs: u64,
    /// Parallel jobs.
    pub jobs: usize,
    /// FUSE mounts run.
    pub mounts: usize,
    /// multi_line_error counts as a failure.
    pub strict: bool,
    /// `e2fsck` was available.
    pub e2fsck: bool,
}

/// One failure, as a JSON line.
#[derive(Debug, Clone, Serialize)]
pub struct FailureRecord {
    /// Always `failure`.
    pub record: &'static str,
    /// The run's seed.
    pub seed: Option<u64>,
    /// The image's label.
    pub image: String,
    /// Its index in the run.
    pub image_index: Option<usize>,
    /// The seed image it was made from.
    pub seed_image: String,
    /// The primary mutated structure.
    pub structure: Structure,
    /// Every mutation's description.
    pub mutations: Vec<String>,
    /// The command's short name.
    pub command: String,
    /// The command line.
    pub args: String,
    /// The class.
    pub outcome: Outcome,
    /// How it ended.
    pub exit: String,
    /// Its stderr.
    pub stderr: String,
    /// Notes.
    pub note: String,
    /// Where the image was saved.
    pub saved: Option<String>,
}

/// Failures (or other findings) with the same command, class and message.
#[derive(Debug, Clone)]
pub struct Group {
    /// The class.
    pub outcome: Outcome,
    /// The command.
    pub command: String,
    /// The normalized message.
    pub message: String,
    /// Runs in the group.
    pub count: usize,
    /// Runs per primary mutated structure.
    pub structures: BTreeMap<Structure, usize>,
    /// One example: image label, seed image, mutations, stderr, note.
    pub example: (String, String, Vec<String>, String, String),
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct Report {
    /// What the run was.
    pub header: Header,
    /// Every image judged (unmutated seeds first).
    pub results: Vec<ImageResult>,
    /// Wall-clock time.
    pub elapsed: Duration,
}

/// The message of a run for grouping: the panic location and message, or the first stderr
/// line, or the note; numbers replaced by `N`, temporary paths by `IMG`.
pub fn normalize(r: &CmdRecord) -> String {
    let lines: Vec<&str> = r.stderr.lines().collect();
    let text = if let Some(k) = lines.iter().position(|l| l.contains("panicked")) {
        let at = lines[k].split("panicked at ").nth(1).unwrap_or(lines[k]);
        let msg = lines.get(k + 1).copied().unwrap_or("");
        format!("panicked at {at} {msg}")
    } else if matches!(r.outcome, Outcome::ChangedByReadonly | Outcome::WriteLeftUnclean | Outcome::Hang)
        || lines.is_empty()
    {
        let first = lines.first().copied().unwrap_or("");
        let note = r.note.split("; ").next().unwrap_or("");
        if first.is_empty() { note.to_string() } else { format!("{first} | {note}") }
    } else {
        lines[0].to_string()
    };
    let mut out = String::new();
    for word in text.split(' ') {
        if !out.is_empty() {
            out.push(' ');
        }
        if word.contains("/cjfs-imagefuzz-") || word.contains(".img") && word.contains('/') {
            out.push_str("IMG");
            continue;
        }
        // Digit runs become N, except inside names (`e2fsck`, `jbd2`); hex numbers 0xN.
        let mut prev: Option<char> = None;
        let mut chars = word.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_ascii_digit() && !prev.is_some_and(|p| p.is_ascii_alphabetic()) {
                if c == '0' && chars.peek() == Some(&'x') {
                    chars.next();
                    while chars.peek().is_some_and(|d| d.is_ascii_hexdigit()) {
                        chars.next();
                    }
                    out.push_str("0xN");
                } else {
                    while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                        chars.next();
                    }
                    out.push('N');
                }
                prev = Some('N');
            } else {
                out.push(c);
                prev = Some(c);
            }
        }
    }
    let mut s: String = out.chars().take(160).collect();
    if out.chars().count() > 160 {
        s.push_str("...");
    }
    s
}

impl Report {
    /// Every run that is a failure, as JSON-line records.
    pub fn failures(&self) -> Vec<FailureRecord> {
        let mut v = Vec::new();
        for img in &self.results {
            for r in img.failures(self.header.strict) {
                v.push(failure_record(self.header.seed, img, r));
            }
        }
        v
    }

    /// Number of failing runs.
    pub fn failure_count(&self) -> usize {
        self.results.iter().map(|i| i.failures(self.header.strict).count()).sum()
    }

    /// Runs of class `o`.
    pub fn count(&self, o: Outcome) -> usize {
        self.results.iter().flat_map(|i| &i.runs).filter(|r| r.outcome == o).count()
    }

    /// Runs grouped by (class, command, normalized message), for the runs `pred` accepts,
    /// largest first.
    pub fn groups(&self, pred: impl Fn(&CmdRecord) -> bool) -> Vec<Group> {
        let mut map: BTreeMap<(Outcome, String, String), Group> = BTreeMap::new();
        for img in &self.results {
            for r in img.runs.iter().filter(|r| pred(r)) {
                let msg = normalize(r);
                let g = map.entry((r.outcome, r.command.clone(), msg.clone())).or_insert_with(|| Group {
                    outcome: r.outcome,
                    command: r.command.clone(),
                    message: msg,
                    count: 0,
                    structures: BTreeMap::new(),
                    example: (
                        img.label.clone(),
                        img.seed_name.clone(),
                        img.mutations.iter().map(|m| m.desc.clone()).collect(),
                        r.stderr.clone(),
                        r.note.clone(),
                    ),
                });
                g.count += 1;
                *g.structures.entry(img.structure).or_default() += 1;
            }
        }
        let mut v: Vec<Group> = map.into_values().collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then(a.outcome.cmp(&b.outcome)));
        v
    }

    /// The JSON line closing a `--json` file: header and counts.
    pub fn summary_json(&self) -> serde_json::Value {
        let counts: BTreeMap<&str, usize> = Outcome::ALL.iter().map(|o| (o.name(), self.count(*o))).collect();
        serde_json::json!({
            "record": "summary",
            "header": self.header,
            "images_judged": self.results.len(),
            "runs": self.results.iter().map(|i| i.runs.len()).sum::<usize>(),
            "outcomes": counts,
            "failures": self.failure_count(),
            "elapsed_secs": self.elapsed.as_secs_f64(),
        })
    }

    /// The text report.
    pub fn render(&self) -> String {
        let h = &self.header;
        let mut s = String::new();
        let mutated = self.results.iter().filter(|r| r.structure != Structure::None).count();
        let _ = writeln!(s, "cjfs-imagefuzz report");
        let _ = writeln!(
            s,
            "machine: {} CPUs, kernel {}; cjfs: {}{}",
            h.nproc,
            h.kernel,
            h.cjfs,
            h.commit.as_ref().map(|c| format!(" (commit {c})")).unwrap_or_default()
        );
        let seed = h.seed.map_or("corpus replay".to_string(), |s| format!("seed {s}"));
        let _ = writeln!(
            s,
            "{seed}: {} images judged ({mutated} mutated), {} command runs; jobs {}, timeout {} s, mounts {}{}{}",
            self.results.len(),
            self.results.iter().map(|i| i.runs.len()).sum::<usize>(),
            h.jobs,
            h.timeout_secs,
            h.mounts,
            if h.strict { ", strict" } else { "" },
            if h.e2fsck { "" } else { ", no e2fsck (write_left_unclean not judged)" },
        );
        if !h.seeds.is_empty() {
            let _ = writeln!(s, "seed images: {}", h.seeds.join(", "));
        }
        for n in &h.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let secs = self.elapsed.as_secs_f64();
        let _ = writeln!(
            s,
            "time: {secs:.1} s ({:.2} s per image)",
            if self.results.is_empty() { 0.0 } else { secs / self.results.len() as f64 }
        );
        let _ = writeln!(
            s,
            "FAILURES: {} (panic {}, hang {}, changed_by_readonly {}, write_left_unclean {}{})",
            self.failure_count(),
            self.count(Outcome::Panic),
            self.count(Outcome::Hang),
            self.count(Outcome::ChangedByReadonly),
            self.count(Outcome::WriteLeftUnclean),
            if h.strict {
                format!(", multi_line_error {}", self.count(Outcome::MultiLineError))
            } else {
                String::new()
            },
        );

        let mut by_cmd: BTreeMap<String, BTreeMap<Outcome, usize>> = BTreeMap::new();
        let mut by_struct: BTreeMap<Structure, BTreeMap<Outcome, usize>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for img in &self.results {
            for r in &img.runs {
                if !order.contains(&r.command) {
                    order.push(r.command.clone());
                }
                *by_cmd.entry(r.command.clone()).or_default().entry(r.outcome).or_default() += 1;
                *by_struct.entry(img.structure).or_default().entry(r.outcome).or_default() += 1;
            }
        }
        let _ = writeln!(s, "\nruns per command and outcome:");
        let rows: Vec<(String, &BTreeMap<Outcome, usize>)> =
            order.iter().filter_map(|c| by_cmd.get(c).map(|m| (c.clone(), m))).collect();
        table(&mut s, "command", &rows);
        let _ = writeln!(s, "\nruns per mutated structure (primary mutation) and outcome:");
        let mut srows: Vec<(String, &BTreeMap<Outcome, usize>)> = Vec::new();
        let images_of = |st: Structure| self.results.iter().filter(|r| r.structure == st).count();
        for st in std::iter::once(Structure::None).chain(Structure::MUTATED) {
            if let Some(m) = by_struct.get(&st) {
                srows.push((format!("{} ({})", st.name(), images_of(st)), m));
            }
        }
        table(&mut s, "structure (images)", &srows);

        let groups = self.groups(|r| r.outcome.is_failure(h.strict));
        let _ = writeln!(s, "\nfailure groups ({}):", groups.len());
        write_groups(&mut s, &groups);
        let other = self.groups(|r| {
            !r.outcome.is_failure(h.strict)
                && (matches!(r.outcome, Outcome::MultiLineError | Outcome::KilledBySignal)
                    || r.note.contains(crate::mount::MOUNTED_WRITE_OK))
        });
        let _ = writeln!(
            s,
            "\nother findings (not failures: multi_line_error, killed_by_signal, writes on a mounted image) ({} groups):",
            other.len()
        );
        write_groups(&mut s, &other);
        s
    }
}

impl Report {
    /// Every run of every image, one line each (`--verbose`).
    pub fn render_runs(&self) -> String {
        let mut s = String::new();
        for img in &self.results {
            let muts: Vec<&str> = img.mutations.iter().map(|m| m.desc.as_str()).collect();
            let clean = match img.clean_before {
                Some(true) => "e2fsck clean",
                Some(false) => "e2fsck unclean",
                None => "cleanliness not judged",
            };
            let _ = writeln!(
                s,
                "{} ({}, {clean}, {} ms): {}",
                img.label,
                img.seed_name,
                img.millis,
                muts.join(" + ")
            );
            for r in &img.runs {
                let first = r.stderr.lines().next().unwrap_or("");
                let note = if r.note.is_empty() { String::new() } else { format!(" [{}]", r.note) };
                let _ = writeln!(
                    s,
                    "  {:<20} {:<12} {:>6} ms  {first}{note}",
                    r.outcome.name(),
                    r.command,
                    r.millis
                );
            }
        }
        s
    }
}

pub(crate) fn failure_record(seed: Option<u64>, img: &ImageResult, r: &CmdRecord) -> FailureRecord {
    FailureRecord {
        record: "failure",
        seed,
        image: img.label.clone(),
        image_index: img.index,
        seed_image: img.seed_name.clone(),
        structure: img.structure,
        mutations: img.mutations.iter().map(|m| m.desc.clone()).collect(),
        command: r.command.clone(),
        args: r.args.clone(),
        outcome: r.outcome,
        exit: r.exit.clone(),
        stderr: r.stderr.clone(),
        note: r.note.clone(),
        saved: img.saved.clone(),
    }
}

fn table(s: &mut String, first: &str, rows: &[(String, &BTreeMap<Outcome, usize>)]) {
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(first.len()).max(5);
    let _ = write!(s, "  {first:<w0$}");
    for o in Outcome::ALL {
        let _ = write!(s, " {:>w$}", o.name(), w = o.name().len().max(5));
    }
    let _ = writeln!(s);
    let mut total: BTreeMap<Outcome, usize> = BTreeMap::new();
    for (name, m) in rows {
        let _ = write!(s, "  {name:<w0$}");
        for o in Outcome::ALL {
            let n = m.get(&o).copied().unwrap_or(0);
            *total.entry(o).or_default() += n;
            let _ = write!(s, " {:>w$}", n, w = o.name().len().max(5));
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "  {:<w0$}", "total");
    for o in Outcome::ALL {
        let _ = write!(s, " {:>w$}", total.get(&o).copied().unwrap_or(0), w = o.name().len().max(5));
    }
    let _ = writeln!(s);
}

fn write_groups(s: &mut String, groups: &[Group]) {
    for (k, g) in groups.iter().enumerate() {
        let structs: Vec<String> = g.structures.iter().map(|(st, n)| format!("{} x{n}", st.name())).collect();
        let _ = writeln!(s, "  [{}] {} x{} in `{}`: {}", k + 1, g.outcome, g.count, g.command, g.message);
        let _ = writeln!(s, "      structures: {}", structs.join(", "));
        let (label, seed, muts, stderr, note) = &g.example;
        let _ = writeln!(s, "      e.g. {label} (seed image {seed}): {}", muts.join(" + "));
        let first = stderr.lines().next().unwrap_or("");
        if !first.is_empty() {
            let _ = writeln!(s, "      stderr: {}", first.chars().take(300).collect::<String>());
        }
        if !note.is_empty() {
            let _ = writeln!(s, "      note: {}", note.chars().take(300).collect::<String>());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::CmdKind;

    #[test]
    fn messages_normalize() {
        let r = CmdRecord {
            command: "cat".into(),
            args: String::new(),
            kind: CmdKind::Read,
            outcome: Outcome::Panic,
            exit: "exit 101".into(),
            stderr: "\nthread 'main' panicked at crates/fs/src/file.rs:12:5:\nattempt to add with overflow\n"
                .into(),
            note: String::new(),
            millis: 0,
        };
        assert_eq!(normalize(&r), "panicked at crates/fs/src/file.rs:N:N: attempt to add with overflow");
        let r = CmdRecord {
            outcome: Outcome::Refused,
            stderr: "cjfs: ls: /tmp/cjfs-imagefuzz-x/img-3/image.img: bad inode 123\n".into(),
            ..r
        };
        assert_eq!(normalize(&r), "cjfs: ls: IMG bad inode N");
        let r = CmdRecord {
            outcome: Outcome::WriteLeftUnclean,
            stderr: String::new(),
            note: "e2fsck -fn: exit 8: ext2fs_open2: bad block 0x1f3 at 12".into(),
            ..r
        };
        assert_eq!(normalize(&r), "e2fsck -fn: exit N: ext2fs_open2: bad block 0xN at N");
    }
}
