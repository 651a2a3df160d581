//! Judging one image: every command run on it, each classified.
//!
//! On the image itself, in order, the read-only commands: `info` (stdout captured, and to
//! `/dev/full`), `ls -la /` (both ways), `ls -l` and `stat` on a few paths, `cat` of each
//! regular file (stdout read up to a limit, then the pipe is closed; directories with many
//! entries are sampled), `get` of one file to a temporary file, and `check --no-e2fsck`.
//! After each the image bytes are compared with what was written (and restored if they
//! changed). Then `recover` on a copy (and, when it replayed a journal, `ls`, `cat`,
//! `stat` and `check` on what it left, as read-only commands), one writing command on another copy (rotating among
//! `mkdir`, `put`, `rm`, `mv`, `ln`), and optionally a FUSE mount of a third copy
//! ([`crate::mount`]). `e2fsck -fn`, when installed, first classifies the image as clean or
//! not (an image needing recovery after `e2fsck -E journal_only` replayed it; not at all
//! for `journal_data` mutations, which make the journal replay corrupt metadata on
//! purpose), and judges the copies after writing commands that succeeded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::classify::{CmdKind, Outcome, base_outcome, judge};
use crate::error::{FuzzError, FuzzResult};
use crate::layout::{BS, PathEntry, PathKind};
use crate::mutate::{Mutation, Structure};
use crate::run::{RunOutput, RunSpec, StdoutMode, run, signal_name};
use crate::seeds::pattern;

/// What judging needs.
#[derive(Debug, Clone)]
pub struct JudgeEnv {
    /// The `cjfs` binary.
    pub cjfs: PathBuf,
    /// Timeout of each command.
    pub timeout: Duration,
    /// `e2fsck`, if installed.
    pub e2fsck: Option<PathBuf>,
    /// Bytes of `cat` output read before the pipe is closed.
    pub cat_limit: u64,
    /// `fusermount3`, when FUSE mounts are possible (root, `/dev/fuse`).
    pub fusermount: Option<PathBuf>,
}

/// One image to judge.
#[derive(Debug, Clone)]
pub struct Case<'a> {
    /// Printed name (`image 17`, `seed cjfs`, a corpus file name).
    pub label: String,
    /// Index in the run (None for seeds and corpus entries).
    pub index: Option<usize>,
    /// Name of the seed it was made from.
    pub seed_name: String,
    /// The image.
    pub bytes: &'a [u8],
    /// What was changed.
    pub mutations: &'a [Mutation],
    /// The primary mutated structure.
    pub structure: Structure,
    /// Paths of the (unmutated) image, for the commands' arguments.
    pub paths: &'a [PathEntry],
    /// Seeds the choice of arguments and of the writing command.
    pub choice: u64,
    /// Also run a FUSE mount workload.
    pub mount: bool,
}

/// One command run and its class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmdRecord {
    /// Short name (`info`, `info>full`, `cat`, `recover`, `mkdir`, `mount`, `fuse-ls`, ...).
    pub command: String,
    /// The command line.
    pub args: String,
    /// Read-only or writing.
    pub kind: CmdKind,
    /// Its class.
    pub outcome: Outcome,
    /// How it ended (`exit 1`, `signal 13 (SIGPIPE)`, `timeout`).
    pub exit: String,
    /// Its stderr (at most a few KiB).
    pub stderr: String,
    /// What else was seen (changed blocks, output cut, e2fsck's verdict).
    pub note: String,
    /// Wall-clock milliseconds.
    pub millis: u64,
}

/// The result of judging one image.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageResult {
    /// Printed name.
    pub label: String,
    /// Index in the run.
    pub index: Option<usize>,
    /// The seed it was made from.
    pub seed_name: String,
    /// The primary mutated structure.
    pub structure: Structure,
    /// What was changed.
    pub mutations: Vec<Mutation>,
    /// `e2fsck -fn` found the image clean before any command (None: not checked).
    pub clean_before: Option<bool>,
    /// Every command run.
    pub runs: Vec<CmdRecord>,
    /// Where the image was saved (failures only).
    pub saved: Option<String>,
    /// Wall-clock milliseconds for the whole image.
    pub millis: u64,
}

impl ImageResult {
    /// The runs that are failures.
    pub fn failures(&self, strict: bool) -> impl Iterator<Item = &CmdRecord> {
        self.runs.iter().filter(move |r| r.outcome.is_failure(strict))
    }
}

const STDERR_RECORD: usize = 4096;

fn clip(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Names of the superblock fields a command that should not write most often touches.
fn sb_field(off: u64) -> &'static str {
    match off {
        0x0C..=0x0F => "s_free_blocks_count",
        0x10..=0x13 => "s_free_inodes_count",
        0x2C..=0x2F => "s_mtime",
        0x30..=0x33 => "s_wtime",
        0x34..=0x35 => "s_mnt_count",
        0x3A..=0x3B => "s_state",
        0x60..=0x63 => "s_feature_incompat",
        0x88..=0xC7 => "s_last_mounted",
        0xE8..=0xEB => "s_last_orphan",
        0x178..=0x17F => "s_kbytes_written",
        _ => "",
    }
}

/// Describe how `now` differs from `want` (None: identical).
pub fn describe_change(want: &[u8], now: &[u8]) -> Option<String> {
    if want == now {
        return None;
    }
    if want.len() != now.len() {
        return Some(format!("image length changed: {} -> {} bytes", want.len(), now.len()));
    }
    let bs = BS as usize;
    let mut blocks = Vec::new();
    let mut first = None;
    for (i, (a, b)) in want.chunks(bs).zip(now.chunks(bs)).enumerate() {
        if a != b {
            if first.is_none() {
                let k = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
                first = Some(i * bs + k);
            }
            blocks.push(i);
        }
    }
    let first = first.unwrap_or(0) as u64;
    let field = if (1024..2048).contains(&first) {
        let f = sb_field(first - 1024);
        if f.is_empty() {
            format!(" (superblock +{:#x})", first - 1024)
        } else {
            format!(" (superblock {f})")
        }
    } else {
        String::new()
    };
    let shown: Vec<String> = blocks.iter().take(8).map(|b| b.to_string()).collect();
    let more = if blocks.len() > 8 { ", ..." } else { "" };
    Some(format!(
        "image changed: {} block(s) [{}{more}], first byte {first:#x}{field}",
        blocks.len(),
        shown.join(", ")
    ))
}

/// How the file at `path` differs from `want` (None: identical). Compares in chunks without
/// reading the whole file into memory unless it differs.
pub fn image_change(path: &Path, want: &[u8]) -> FuzzResult<Option<String>> {
    use std::io::Read;
    let mut f =
        std::fs::File::open(path).map_err(|e| FuzzError::io(format!("open {}", path.display()), e))?;
    let len = f.metadata().map_err(|e| FuzzError::io(format!("stat {}", path.display()), e))?.len();
    if len == want.len() as u64 {
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0usize;
        let mut same = true;
        while off < want.len() {
            let n = (want.len() - off).min(buf.len());
            f.read_exact(&mut buf[..n]).map_err(|e| FuzzError::io(format!("read {}", path.display()), e))?;
            if buf[..n] != want[off..off + n] {
                same = false;
                break;
            }
            off += n;
        }
        if same {
            return Ok(None);
        }
    }
    Ok(describe_change(want, &read_file(path)?))
}

fn read_file(path: &Path) -> FuzzResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| FuzzError::io(format!("read {}", path.display()), e))
}

fn write_file(path: &Path, data: &[u8]) -> FuzzResult<()> {
    std::fs::write(path, data).map_err(|e| FuzzError::io(format!("write {}", path.display()), e))
}

/// Run `e2fsck -fn` on `img`: Some(true) when it exits 0; None when it timed out.
pub fn fsck_clean(e2fsck: &Path, img: &Path, timeout: Duration) -> FuzzResult<(Option<bool>, String)> {
    let out = run(&RunSpec::new(e2fsck, [std::ffi::OsStr::new("-fn"), img.as_os_str()]).timeout(timeout))?;
    let verdict = match out.exit {
        crate::run::Exit::Timeout => None,
        e => Some(e == crate::run::Exit::Code(0)),
    };
    let text = out.stdout_text();
    let first_problem = text
        .lines()
        .find(|l| {
            !l.starts_with("Pass ") && !l.is_empty() && !l.contains("files (") && !l.starts_with("e2fsck ")
        })
        .unwrap_or("")
        .to_string();
    Ok((
        verdict,
        format!(
            "e2fsck -fn: {}{}",
            out.exit,
            if first_problem.is_empty() { String::new() } else { format!(": {first_problem}") }
        ),
    ))
}

/// Whether the superblock in `bytes` has the needs_recovery flag.
pub fn needs_recovery(bytes: &[u8]) -> bool {
    bytes.get(1024 + 0x60).is_some_and(|b| b & 0x4 != 0)
}

/// `e2fsck`'s verdict on the image `bytes` held in `copy` (which it may change): with the
/// needs_recovery flag, `e2fsck -E journal_only -y` first (a failed replay is unclean),
/// then `e2fsck -fn`.
pub fn fsck_baseline(
    e2fsck: &Path,
    copy: &Path,
    bytes: &[u8],
    timeout: Duration,
) -> FuzzResult<Option<bool>> {
    if needs_recovery(bytes) {
        let out = run(&RunSpec::new(
            e2fsck,
            [
                std::ffi::OsStr::new("-E"),
                std::ffi::OsStr::new("journal_only"),
                std::ffi::OsStr::new("-y"),
                copy.as_os_str(),
            ],
        )
        .timeout(timeout))?;
        match out.exit {
            crate::run::Exit::Code(0..=3) => {}
            crate::run::Exit::Timeout => return Ok(None),
            _ => return Ok(Some(false)),
        }
        // With a journal it cannot use (an invalid journal inode, a corrupt journal
        // superblock) `journal_only` clears the journal and runs a full `-y` repair: the
        // `-fn` after it then judges the repaired copy, not the image.
        if went_beyond_replay(&out.stdout_head) {
            return Ok(Some(false));
        }
    }
    Ok(fsck_clean(e2fsck, copy, timeout)?.0)
}

/// Whether the output of `e2fsck -E journal_only -y` shows more than a journal replay: a
/// check pass or an answered repair question.
fn went_beyond_replay(stdout: &[u8]) -> bool {
    let text = String::from_utf8_lossy(stdout);
    text.lines().any(|l| l.starts_with("Pass ") || l.trim_end().ends_with("? yes"))
}

/// The record of a run of `cjfs` given its final class.
pub fn record(
    command: &str,
    spec: &RunSpec,
    kind: CmdKind,
    outcome: Outcome,
    out: &RunOutput,
    note: String,
) -> CmdRecord {
    let mut notes = Vec::new();
    if !note.is_empty() {
        notes.push(note);
    }
    if out.stdout_closed_early {
        notes.push(format!("stdout closed after {} bytes", out.stdout_len));
    }
    if out.stderr_truncated {
        notes.push("stderr truncated".into());
    }
    if out.streams_incomplete {
        notes.push("a descendant kept the output pipes open".into());
    }
    if let crate::run::Exit::Signal(s) = out.exit {
        notes.push(format!("killed by {}", signal_name(s)));
    }
    CmdRecord {
        command: command.to_string(),
        args: spec.display(),
        kind,
        outcome,
        exit: out.exit.to_string(),
        stderr: clip(&out.stderr, STDERR_RECORD),
        note: notes.join("; "),
        millis: out.elapsed.as_millis() as u64,
    }
}

struct Judge<'a> {
    env: &'a JudgeEnv,
    dir: &'a Path,
    runs: Vec<CmdRecord>,
}

impl Judge<'_> {
    fn spec(&self, args: &[&str], stdout: StdoutMode) -> RunSpec {
        RunSpec::new(&self.env.cjfs, args.iter().copied()).stdout(stdout).timeout(self.env.timeout)
    }

    /// Run a read-only command on `img`, compare with `want`, restore on a change.
    fn read_cmd(
        &mut self,
        name: &str,
        img: &Path,
        want: &[u8],
        args: &[&str],
        stdout: StdoutMode,
    ) -> FuzzResult<()> {
        let spec = self.spec(args, stdout);
        let out = run(&spec)?;
        let base = base_outcome(&out);
        let change = image_change(img, want)?;
        if change.is_some() {
            write_file(img, want)?;
        }
        let outcome = judge(CmdKind::Read, base, change.is_some(), None, None);
        self.runs.push(record(name, &spec, CmdKind::Read, outcome, &out, change.unwrap_or_default()));
        Ok(())
    }

    /// Run a writing command on the copy `img` of `want` and judge the copy afterwards.
    fn write_cmd(
        &mut self,
        name: &str,
        img: &Path,
        want: &[u8],
        args: &[&str],
        clean_before: Option<bool>,
    ) -> FuzzResult<()> {
        let spec = self.spec(args, StdoutMode::Capture { limit: 1 << 20 });
        let out = run(&spec)?;
        let base = base_outcome(&out);
        let change = image_change(img, want)?;
        let (clean_after, mut note) = match (&self.env.e2fsck, base, clean_before) {
            (Some(e2fsck), Outcome::Ok, Some(true)) if change.is_some() => {
                let (v, text) = fsck_clean(e2fsck, img, self.env.timeout)?;
                (v, if v == Some(false) { text } else { String::new() })
            }
            _ => (None, String::new()),
        };
        if base != Outcome::Ok
            && let Some(c) = &change
        {
            note = if note.is_empty() { c.clone() } else { format!("{c}; {note}") };
        }
        let outcome = judge(CmdKind::Write, base, change.is_some(), clean_before, clean_after);
        self.runs.push(record(name, &spec, CmdKind::Write, outcome, &out, note));
        Ok(())
    }
}

fn pick<'p>(rng: &mut StdRng, v: &[&'p PathEntry]) -> Option<&'p PathEntry> {
    v.choose(rng).copied()
}

/// Judge one image (see the module docs). `dir` is a scratch directory for this image.
pub fn judge_image(env: &JudgeEnv, case: &Case<'_>, dir: &Path) -> FuzzResult<ImageResult> {
    let start = Instant::now();
    std::fs::create_dir_all(dir).map_err(|e| FuzzError::io(format!("mkdir {}", dir.display()), e))?;
    let img = dir.join("image.img");
    write_file(&img, case.bytes)?;
    let i = img.to_str().ok_or_else(|| FuzzError::io("image path", std::io::Error::other("not UTF-8")))?;
    let mut rng = StdRng::seed_from_u64(case.choice);

    // Clean or not, by e2fsck, on a copy (the image under judgement is only ever touched
    // by cjfs). An image whose journal needs recovery is judged as e2fsck would leave it
    // after replaying the journal (`-E journal_only`), which is what `recover` must match.
    // A logged copy changed with its checksums fixed (journal_data) replays corrupt metadata
    // by design (neither cjfs nor the kernel checks what it replays), so the file system it
    // leaves is not judged.
    let replays_corruption = case.mutations.iter().any(|m| m.structure == Structure::JournalData);
    let clean_before = match &env.e2fsck {
        Some(_) if replays_corruption => None,
        Some(e2fsck) => {
            let copy = dir.join("fsck.img");
            write_file(&copy, case.bytes)?;
            let v = fsck_baseline(e2fsck, &copy, case.bytes, env.timeout)?;
            let _ = std::fs::remove_file(&copy);
            v
        }
        None => None,
    };

    let mut j = Judge { env, dir, runs: Vec::new() };
    let cap = StdoutMode::Capture { limit: 1 << 20 };
    let full_ok = Path::new("/dev/full").exists();
    j.read_cmd("info", &img, case.bytes, &["info", i], cap)?;
    if full_ok {
        j.read_cmd("info>full", &img, case.bytes, &["info", i], StdoutMode::DevFull)?;
    }
    j.read_cmd("ls", &img, case.bytes, &["ls", "-la", i, "/"], cap)?;
    if full_ok {
        j.read_cmd("ls>full", &img, case.bytes, &["ls", "-la", i, "/"], StdoutMode::DevFull)?;
    }

    let all: Vec<&PathEntry> = case.paths.iter().collect();
    let files: Vec<&PathEntry> = case.paths.iter().filter(|p| p.kind == PathKind::File).collect();
    let dirs: Vec<&PathEntry> = case.paths.iter().filter(|p| p.kind == PathKind::Dir).collect();
    let links: Vec<&PathEntry> = case.paths.iter().filter(|p| p.kind == PathKind::Symlink).collect();

    let mut ls_paths: Vec<String> =
        (0..3).filter_map(|_| pick(&mut rng, &all)).map(|p| p.path.clone()).collect();
    if rng.gen_bool(0.25) {
        ls_paths.push("/no/such/path".into());
    }
    for p in &ls_paths {
        j.read_cmd("ls-path", &img, case.bytes, &["ls", "-l", i, p], cap)?;
    }
    let mut stat_paths: Vec<String> =
        (0..2).filter_map(|_| pick(&mut rng, &all)).map(|p| p.path.clone()).collect();
    if let Some(l) = pick(&mut rng, &links) {
        stat_paths.push(l.path.clone());
    }
    for p in &stat_paths {
        j.read_cmd("stat", &img, case.bytes, &["stat", i, p], cap)?;
    }
    let mut cat: Vec<&PathEntry> = files.iter().copied().filter(|p| !p.in_big_dir).take(12).collect();
    let big: Vec<&PathEntry> = files.iter().copied().filter(|p| p.in_big_dir).collect();
    cat.extend(big.choose_multiple(&mut rng, 2).copied());
    let limit = StdoutMode::Capture { limit: env.cat_limit };
    for p in &cat {
        j.read_cmd("cat", &img, case.bytes, &["cat", i, &p.path], limit)?;
    }
    if let Some(f) = pick(&mut rng, &files) {
        let local = dir.join("got.bin");
        let l = local.to_str().unwrap_or_default().to_string();
        j.read_cmd("get", &img, case.bytes, &["get", i, &f.path, &l], cap)?;
        let _ = std::fs::remove_file(&local);
    }
    j.read_cmd("check", &img, case.bytes, &["check", "--no-e2fsck", i], cap)?;

    // recover on a copy.
    let rec = dir.join("recover.img");
    write_file(&rec, case.bytes)?;
    let r = rec.to_str().unwrap_or_default().to_string();
    j.write_cmd("recover", &rec, case.bytes, &["recover", &r], clean_before)?;
    // What a successful replay left is read back: replayed (possibly corrupt) metadata
    // meets the readers here, since the image itself refuses reads until recovered.
    if needs_recovery(case.bytes) && j.runs.last().is_some_and(|x| x.outcome == Outcome::Ok) {
        let replayed = read_file(&rec)?;
        j.read_cmd("ls@recovered", &rec, &replayed, &["ls", "-la", &r, "/"], cap)?;
        for p in cat.iter().take(3) {
            j.read_cmd("cat@recovered", &rec, &replayed, &["cat", &r, &p.path], limit)?;
        }
        if let Some(p) = stat_paths.first() {
            j.read_cmd("stat@recovered", &rec, &replayed, &["stat", &r, p], cap)?;
        }
        j.read_cmd("check@recovered", &rec, &replayed, &["check", "--no-e2fsck", &r], cap)?;
    }
    let _ = std::fs::remove_file(&rec);

    // One writing command on another copy.
    let wimg = dir.join("write.img");
    write_file(&wimg, case.bytes)?;
    let w = wimg.to_str().unwrap_or_default().to_string();
    let dir_of = |p: Option<&PathEntry>| p.map_or(String::new(), |d| d.path.clone());
    let op = case.index.unwrap_or(rng.gen_range(0..5)) % 5;
    let local = dir.join("put.bin");
    let l = local.to_str().unwrap_or_default().to_string();
    let args: Vec<String> = match op {
        0 => {
            let parent = if rng.gen_bool(0.5) { dir_of(pick(&mut rng, &dirs)) } else { String::new() };
            vec!["mkdir".into(), w.clone(), format!("{parent}/fuzz-newdir")]
        }
        1 => {
            let len = *[0usize, 100, 5000, 300_000].choose(&mut rng).expect("non-empty");
            write_file(&local, &pattern(case.choice, len))?;
            let parent = if rng.gen_bool(0.5) { dir_of(pick(&mut rng, &dirs)) } else { String::new() };
            vec!["put".into(), w.clone(), l.clone(), format!("{parent}/fuzz-put.bin")]
        }
        2 => {
            let nondirs: Vec<&PathEntry> = case.paths.iter().filter(|p| p.kind != PathKind::Dir).collect();
            match (rng.gen_bool(0.3), pick(&mut rng, &dirs), pick(&mut rng, &nondirs)) {
                (true, Some(d), _) | (false, Some(d), None) => {
                    vec!["rm".into(), "-r".into(), w.clone(), d.path.clone()]
                }
                (_, _, Some(f)) => vec!["rm".into(), w.clone(), f.path.clone()],
                (_, None, None) => vec!["rm".into(), w.clone(), "/small.txt".into()],
            }
        }
        3 => {
            let from = pick(&mut rng, &all).map_or("/small.txt".to_string(), |p| p.path.clone());
            let to = format!("{}/fuzz-moved", dir_of(pick(&mut rng, &dirs)));
            vec!["mv".into(), w.clone(), from, to]
        }
        _ => {
            if rng.gen_bool(0.3) {
                vec!["ln".into(), "-s".into(), w.clone(), "fuzz/target".into(), "/fuzz-symlink".into()]
            } else {
                let target = pick(&mut rng, &files).map_or("/small.txt".to_string(), |p| p.path.clone());
                let parent = if rng.gen_bool(0.5) { dir_of(pick(&mut rng, &dirs)) } else { String::new() };
                vec!["ln".into(), w.clone(), target, format!("{parent}/fuzz-link")]
            }
        }
    };
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    j.write_cmd(argv[0], &wimg, case.bytes, &argv, clean_before)?;
    let _ = std::fs::remove_file(&wimg);
    let _ = std::fs::remove_file(&local);

    if case.mount
        && let Some(fusermount) = &env.fusermount
    {
        let mimg = dir.join("mount.img");
        write_file(&mimg, case.bytes)?;
        let first_file = files.first().map(|p| p.path.clone());
        let recs = crate::mount::mount_workload(
            env,
            fusermount,
            &mimg,
            j.dir,
            case.bytes,
            clean_before,
            first_file,
        )?;
        j.runs.extend(recs);
        let _ = std::fs::remove_file(&mimg);
    }

    Ok(ImageResult {
        label: case.label.clone(),
        index: case.index,
        seed_name: case.seed_name.clone(),
        structure: case.structure,
        mutations: case.mutations.to_vec(),
        clean_before,
        runs: j.runs,
        saved: None,
        millis: start.elapsed().as_millis() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_described() {
        let a = vec![0u8; 3 * 4096];
        assert_eq!(describe_change(&a, &a), None);
        let mut b = a.clone();
        b[1024 + 0x34] = 1;
        b[2 * 4096 + 5] = 1;
        let d = describe_change(&a, &b).expect("changed");
        assert!(d.contains("2 block(s) [0, 2]"), "{d}");
        assert!(d.contains("s_mnt_count"), "{d}");
        let d = describe_change(&a, &a[..4096]).expect("changed");
        assert!(d.contains("length"), "{d}");
    }
}
