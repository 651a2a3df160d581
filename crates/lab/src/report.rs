//! Sweep outputs: a terminal table, JSON, CSV and a markdown report, each carrying the
//! machine, the device figures of every series, the seed and the command.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use crate::bench::{Point, SweepReport};
use crate::stats::CONFIDENCE;

/// One row of the table/CSV.
struct Row<'a> {
    p: &'a Point,
}

fn rows(r: &SweepReport) -> Vec<Row<'_>> {
    r.points.iter().map(|p| Row { p }).collect()
}

/// The ratio to the first series with its interval; never a bare ratio (`-` when there is
/// no interval: the first series itself, or fewer than two paired repetitions).
fn ratio_text(p: &Point) -> String {
    match (&p.ratio, &p.error) {
        (Some(c), None) => c.ratio_text(),
        _ => "-".into(),
    }
}

/// How repetitions were chosen, for the header.
fn reps_text(r: &SweepReport) -> String {
    match r.ci_bound {
        Some(b) => format!(
            "{}–{} interleaved repetitions, until every ratio's {:.0} % interval is within ±{:.1} %",
            r.reps,
            r.max_reps,
            CONFIDENCE * 100.0,
            b * 100.0
        ),
        None => format!("{} interleaved repetitions", r.reps),
    }
}

/// The header lines every output starts with.
pub fn header(r: &SweepReport) -> Vec<String> {
    let mut v = vec![
        r.machine.line(),
        format!(
            "seed {} | {:.1} s per run | {}, medians shown | file-set scale {}",
            r.seed,
            r.duration_secs,
            reps_text(r),
            r.scale
        ),
        format!(
            "vs 1st: median of the paired per-repetition ratios to the first series \
             [{:.0} % interval of that median; min–max with its lower coverage in () when \
             there were too few repetitions]",
            CONFIDENCE * 100.0
        ),
        format!("command: {}", r.command),
    ];
    let planned = r.workloads.len() * r.threads.len() * r.series.len();
    if r.points.len() < planned {
        v.push(format!(
            "partial: {} of {planned} points so far (the sweep is still running or was stopped)",
            r.points.len()
        ));
    }
    v.push("series:".to_string());
    for s in &r.series {
        v.push(format!("  {:<28} {} — {}", s.name, s.target, s.device));
    }
    v
}

fn f0(x: f64) -> String {
    if x >= 100.0 { format!("{x:.0}") } else { format!("{x:.1}") }
}

const COLUMNS: [&str; 36] = [
    "workload",
    "threads",
    "series",
    "ops_per_sec",
    "vs_first",
    "vs_first_lo",
    "vs_first_hi",
    "vs_first_coverage",
    "reps",
    "bound_met",
    "mb_per_sec",
    "reps_ops_per_sec",
    "op_p50_us",
    "op_p99_us",
    "op_p999_us",
    "fsync_p50_us",
    "fsync_p95_us",
    "fsync_p99_us",
    "fsync_p999_us",
    "fsync_mean_us",
    "cpu_s",
    "tx",
    "handles_per_tx",
    "blocks_per_tx",
    "conflicts_per_tx",
    "locked_us",
    "commit_us",
    "flushes_per_fsync",
    "in_flight",
    "wait_lock_ms",
    "fsync_p95_all_reps_us",
    "fsync_p99_all_reps_us",
    "fsync_p999_all_reps_us",
    "fsync_p999_vs_first",
    "fsync_p999_vs_first_lo",
    "fsync_p999_vs_first_hi",
];

/// The terminal table's columns: heading and the [`COLUMNS`] entry it shows (by name, so a
/// column added to the CSV cannot shift the table's labels off their figures).
const TABLE_COLUMNS: [(&str, &str); 21] = [
    ("workload", "workload"),
    ("thr", "threads"),
    ("series", "series"),
    ("ops/s", "ops_per_sec"),
    ("vs 1st [interval]", "vs_first"),
    ("reps", "reps"),
    ("MB/s", "mb_per_sec"),
    ("op p50", "op_p50_us"),
    ("op p99", "op_p99_us"),
    ("fsync p50", "fsync_p50_us"),
    ("fsync p99", "fsync_p99_us"),
    ("fsync mean", "fsync_mean_us"),
    ("cpu s", "cpu_s"),
    ("tx", "tx"),
    ("h/tx", "handles_per_tx"),
    ("blk/tx", "blocks_per_tx"),
    ("conf/tx", "conflicts_per_tx"),
    ("lock µs", "locked_us"),
    ("commit µs", "commit_us"),
    ("fl/fsync", "flushes_per_fsync"),
    ("in flight", "in_flight"),
];

/// Index of the column called `name` in [`COLUMNS`] (and in [`cells`]' output).
fn column(name: &str) -> usize {
    COLUMNS.iter().position(|&c| c == name).unwrap_or_else(|| panic!("no column {name}"))
}

fn cells(row: &Row<'_>) -> Vec<String> {
    let p = row.p;
    let mut c = vec![p.workload.clone(), p.threads.to_string(), p.series.clone(), f0(p.ops_per_sec)];
    match (&p.ratio, &p.error) {
        (Some(r), None) => c.extend([
            format!("{:.3}", r.median),
            format!("{:.3}", r.lo),
            format!("{:.3}", r.hi),
            format!("{:.3}", r.coverage),
        ]),
        _ => c.extend(std::iter::repeat_n("-".to_string(), 4)),
    }
    c.extend([
        p.reps.to_string(),
        p.bound_met.map(|b| b.to_string()).unwrap_or_else(|| "-".into()),
        f0(p.mb_per_sec),
        p.reps_ops_per_sec.iter().map(|x| f0(*x)).collect::<Vec<_>>().join("/"),
    ]);
    match &p.median_run {
        Some(m) => {
            c.extend([m.op_latency.p50, m.op_latency.p99, m.op_latency.p999].map(f0));
            if m.fsync_latency.count > 0 {
                c.extend(
                    [
                        m.fsync_latency.p50,
                        m.fsync_latency.p95,
                        m.fsync_latency.p99,
                        m.fsync_latency.p999,
                        m.fsync_latency.mean,
                    ]
                    .map(f0),
                );
            } else {
                c.extend(["-", "-", "-", "-", "-"].map(String::from));
            }
            c.push(format!("{:.2}", m.cpu_secs));
            match &m.journal_summary {
                Some(j) => c.extend([
                    j.transactions.to_string(),
                    format!("{:.1}", j.handles_per_tx),
                    format!("{:.1}", j.blocks_per_tx),
                    format!("{:.3}", j.conflicts_per_tx),
                    f0(j.locked_us),
                    f0(j.commit_us),
                    format!("{:.2}", j.flushes_per_fsync),
                    format!("{:.2}", j.mean_in_flight),
                ]),
                None => c.extend(std::iter::repeat_n("-".to_string(), 8)),
            }
            c.push(m.waits.as_ref().map_or("-".into(), |w| format!("{:.1}", w.wait_lock_us() / 1e3)));
        }
        None => c.extend(std::iter::repeat_n("-".to_string(), 18)),
    }
    match &p.fsync_pooled {
        Some(f) => c.extend([f.p95, f.p99, f.p999].map(f0)),
        None => c.extend(["-", "-", "-"].map(String::from)),
    }
    match &p.fsync_p999_ratio {
        Some(r) => c.extend([r.median, r.lo, r.hi].map(|x| format!("{x:.3}"))),
        None => c.extend(std::iter::repeat_n("-".to_string(), 3)),
    }
    c
}

fn device_cells(p: &Point) -> (String, String, String) {
    match p.median_run.as_ref().and_then(|m| m.device_summary) {
        Some(d) => (format!("{:.2}", d.qd_mean), d.qd_max.to_string(), d.flushes.to_string()),
        None => ("-".into(), "-".into(), "-".into()),
    }
}

/// The terminal table.
pub fn table(r: &SweepReport) -> String {
    let mut out = String::new();
    for l in header(r) {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(out);
    let mut head: Vec<&str> = TABLE_COLUMNS.iter().map(|&(h, _)| h).collect();
    head.extend(["qd mean", "qd max"]);
    let mut lines: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for row in rows(r) {
        let c = cells(&row);
        let (qm, qx, _) = device_cells(row.p);
        let mut l: Vec<String> = TABLE_COLUMNS
            .iter()
            .map(|&(_, name)| match name {
                "vs_first" => ratio_text(row.p),
                "reps" if row.p.bound_met == Some(false) => format!("{} (wide)", c[column(name)]),
                _ => c[column(name)].clone(),
            })
            .collect();
        l.extend([qm, qx]);
        if let Some(e) = &row.p.error {
            l.push(format!("ERROR: {e}"));
        }
        lines.push(l);
    }
    let ncols = head.len();
    let widths: Vec<usize> = (0..ncols)
        .map(|i| lines.iter().map(|l| l.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0))
        .collect();
    for l in &lines {
        let mut s = String::new();
        for (i, c) in l.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i < 3 || i >= ncols {
                let _ = write!(s, "{c:<w$}  ");
            } else {
                let _ = write!(s, "{c:>w$}  ");
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// CSV: one row per point, with the machine and command as `#` comment lines first.
pub fn csv(r: &SweepReport) -> String {
    let mut out = String::new();
    for l in header(r) {
        let _ = writeln!(out, "# {l}");
    }
    let mut head: Vec<&str> = COLUMNS.to_vec();
    head.extend(["qd_mean", "qd_max", "device_flushes", "error"]);
    let _ = writeln!(out, "{}", head.join(","));
    for row in rows(r) {
        let mut c = cells(&row);
        let (qm, qx, fl) = device_cells(row.p);
        c.extend([qm, qx, fl, row.p.error.clone().unwrap_or_default()]);
        let _ = writeln!(out, "{}", c.iter().map(|s| csv_field(s)).collect::<Vec<_>>().join(","));
    }
    out
}

/// Markdown: the headline table per workload (ops/s by threads × series) and the details.
pub fn markdown(r: &SweepReport, charts: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# cjfs benchmark results\n");
    let _ = writeln!(out, "Command:\n\n```\n{}\n```\n", r.command);
    for l in header(r).iter().filter(|l| !l.starts_with("command:")) {
        let _ = writeln!(out, "    {l}");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", headline(r));
    if !charts.is_empty() {
        let _ = writeln!(out, "## Charts\n");
        for c in charts {
            let _ = writeln!(out, "![{c}]({c})\n");
        }
    }
    let _ = write!(out, "{}", journal_writes(r));
    let _ = write!(out, "{}", per_core(r));
    let _ = write!(out, "{}", waits(r));
    let _ = writeln!(
        out,
        "## All figures (medians; `vs_first` = median paired ratio to the first series, `vs_first_lo`–`vs_first_hi` its interval, covering the true median with probability `vs_first_coverage`)\n"
    );
    let _ = writeln!(out, "| {} | qd_mean | qd_max |", COLUMNS.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(COLUMNS.len() + 2));
    for row in rows(r) {
        let c = cells(&row);
        let (qm, qx, _) = device_cells(row.p);
        let _ = writeln!(out, "| {} | {qm} | {qx} |", c.join(" | "));
    }
    let errs: Vec<&Point> = r.points.iter().filter(|p| p.error.is_some()).collect();
    if !errs.is_empty() {
        let _ = writeln!(out, "\n## Errors\n");
        for p in errs {
            let _ = writeln!(
                out,
                "- {} t={} {}: {}",
                p.workload,
                p.threads,
                p.series,
                p.error.as_deref().unwrap_or("")
            );
        }
    }
    out
}

/// Where the threads of each cjfs point waited, in its median run: every contended lock rank
/// and every condition variable parked on, with the time waited, its share of all waiting
/// and (for locks) of lock waiting; and the process's context switches and CPU seconds per
/// 1,000 fsyncs. Markdown; empty when no point has wait figures (kernel targets only).
pub fn waits(r: &SweepReport) -> String {
    let mut out = String::new();
    for row in rows(r) {
        let p = row.p;
        let Some(m) = &p.median_run else { continue };
        let Some(w) = &m.waits else { continue };
        if out.is_empty() {
            let _ = writeln!(
                out,
                "## Where the threads waited (median run of each point)
"
            );
        }
        let fsyncs = m.fsync_latency.count;
        let per_k = |x: f64, prec: usize| {
            if fsyncs > 0 { format!("{:.prec$}", x * 1000.0 / fsyncs as f64) } else { "-".into() }
        };
        let _ = writeln!(
            out,
            "#### {} · {} threads · {}: {} context switches, {} CPU s per 1,000 fsyncs; {:.1} ms on the journal's wait locks ({})
",
            p.workload,
            p.threads,
            p.series,
            per_k(m.context_switches as f64, 0),
            per_k(m.cpu_secs, 3),
            w.wait_lock_us() / 1e3,
            crate::workloads::WAIT_LOCKS.join(", ")
        );
        if w.rows.is_empty() {
            let _ = writeln!(
                out,
                "No lock was contended and no thread parked.
"
            );
            continue;
        }
        let all: f64 = w.rows.iter().map(|x| x.wait_us).sum();
        let locks: f64 = w.rows.iter().filter(|x| x.kind == "lock").map(|x| x.wait_us).sum();
        let share = |x: f64, of: f64| if of > 0.0 { format!("{:.1} %", 100.0 * x / of) } else { "-".into() };
        let _ = writeln!(
            out,
            "| lock or condvar | kind | events | wait ms | share of all waits | share of lock waits |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|");
        for x in &w.rows {
            let lock_share = if x.kind == "lock" { share(x.wait_us, locks) } else { "-".into() };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {} | {lock_share} |",
                x.name,
                x.kind,
                x.events,
                x.wait_us / 1e3,
                share(x.wait_us, all)
            );
        }
        let _ = writeln!(out);
        if !w.sites.is_empty() {
            const TOP: usize = 8;
            let _ = writeln!(out, "Lock waits by call site (the {TOP} longest):\n");
            let _ = writeln!(out, "| lock at call site | events | wait ms | share of lock waits |");
            let _ = writeln!(out, "|---|---:|---:|---:|");
            for x in w.sites.iter().take(TOP) {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} | {} |",
                    x.name,
                    x.events,
                    x.wait_us / 1e3,
                    share(x.wait_us, locks)
                );
            }
            let _ = writeln!(out);
        }
    }
    out
}

/// How each point's fsyncs were made durable and what the journals wrote, in its median run:
/// for cjfs the normal commits and log blocks, the iJournaling figures (share of fsyncs served
/// by i-transactions, ijournal blocks per served fsync, fallbacks by reason); for kernel ext4
/// targets the JBD2 transactions and fast commits the kernel counted; and the fsync tester's
/// background bandwidth reached. Markdown; empty when no point has any of these.
pub fn journal_writes(r: &SweepReport) -> String {
    let mut out = String::new();
    for p in &r.points {
        let Some(m) = &p.median_run else { continue };
        if m.journal_summary.is_none() && m.kernel_journal.is_none() {
            continue;
        }
        if out.is_empty() {
            let _ = writeln!(
                out,
                "## Journal writes and fsync paths (median run of each point)\n\n\
                 `commits`: normal (JBD2) transactions; `log blk`: their blocks (cjfs: logged + \
                 descriptor + commit, at least; kernel: transactions × its mean logged blocks); \
                 `fast blk`: ijournal blocks (cjfs) or fast-commit blocks (kernel); `served`: \
                 fsyncs served by an i-transaction (cjfs; `grouped`: by a concurrent fsync of \
                 the same file) or fast commits per fsync (kernel); \
                 `fallbacks`: fsyncs that committed instead, by reason (kernel: ineligible fast \
                 commits).\n"
            );
            let _ = writeln!(
                out,
                "| workload | threads | series | fsyncs | bg MB/s | commits | log blk | fast blk | journal KiB/fsync | served | fast blk/served | fallbacks |"
            );
            let _ = writeln!(out, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        }
        let bg = m.extra.iter().find(|(k, _)| k == "background_mb_s").map_or("-".into(), |(_, v)| f0(*v));
        let fsyncs = m.ijournal.as_ref().map_or(m.fsync_latency.count, |ij| ij.fsyncs);
        let per_fsync = |blocks: u64| {
            if fsyncs > 0 { format!("{:.1}", blocks as f64 * 4.0 / fsyncs as f64) } else { "-".into() }
        };
        let (commits, log, fast, served, per_served, fallbacks) =
            match (&m.journal_summary, &m.kernel_journal) {
                (Some(j), _) => match &m.ijournal {
                    Some(ij) => (
                        j.transactions,
                        j.log_blocks,
                        ij.blocks,
                        if ij.grouped_share > 0.0 {
                            format!(
                                "{:.1} % (+{:.1} % grouped)",
                                ij.served_share * 100.0,
                                ij.grouped_share * 100.0
                            )
                        } else {
                            format!("{:.1} %", ij.served_share * 100.0)
                        },
                        format!("{:.2}", ij.blocks_per_fsync),
                        if ij.fallbacks.is_empty() {
                            "none".to_string()
                        } else {
                            ij.fallbacks
                                .iter()
                                .map(|(k, n)| format!("{k} {n}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        },
                    ),
                    None => (j.transactions, j.log_blocks, 0, "-".into(), "-".into(), "-".into()),
                },
                (None, Some(k)) => (
                    k.transactions,
                    k.transactions * k.logged_blocks_per_tx,
                    k.fc_blocks,
                    if fsyncs > 0 {
                        format!("{:.1} %", 100.0 * k.fc_commits as f64 / fsyncs as f64)
                    } else {
                        "-".into()
                    },
                    if k.fc_commits > 0 {
                        format!("{:.2}", k.fc_blocks as f64 / k.fc_commits as f64)
                    } else {
                        "-".into()
                    },
                    format!("ineligible {}", k.fc_ineligible),
                ),
                (None, None) => continue,
            };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {fsyncs} | {bg} | {commits} | {log} | {fast} | {} | {served} | {per_served} | {fallbacks} |",
            p.workload,
            p.threads,
            p.series,
            per_fsync(log + fast),
        );
    }
    if !out.is_empty() {
        let _ = writeln!(out);
    }
    out
}

/// Z-Journal's statistics for the points whose journal ran several logs, in their median
/// run: chain marks and validity time per commit, checkpoint entries kept back as not yet
/// valid, forced ancestor commits, flushes saved across logs, waits for log space, copy time,
/// and the share of allocations served from the core's own groups. Markdown; empty when no
/// point had per-core journaling at work.
pub fn per_core(r: &SweepReport) -> String {
    let mut out = String::new();
    for p in &r.points {
        let Some(m) = &p.median_run else { continue };
        let Some(j) = &m.journal_summary else { continue };
        let z = &j.per_core;
        if !z.any() {
            continue;
        }
        if out.is_empty() {
            let _ = writeln!(
                out,
                "## Per-core journaling (median run of each point)\n\n\
                 `uni`/`bi`: chain marks per commit (a write after another log's committing \
                 version / a write into another log's running transaction); `validity µs`: time \
                 deciding validity per commit; `kept back`: checkpoint entries not yet valid; \
                 `forced`: commits of an uncommitted ancestor forced by a waiter; `shared fl`: \
                 flushes saved by joining another log's flush; `space waits`: handle starts that \
                 waited for log room; `copy ms`: time copying buffer versions; `own groups`: \
                 allocations served from the core's own block groups.\n"
            );
            let _ = writeln!(
                out,
                "| workload | threads | series | commits | uni | bi | validity µs | kept back | forced | shared fl | flushes/fsync | space waits | copy ms | own groups |"
            );
            let _ = writeln!(out, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        }
        let own = z.own_group_share.map_or("-".into(), |s| format!("{:.1} %", s * 100.0));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {:.2} | {} | {:.1} | {own} |",
            p.workload,
            p.threads,
            p.series,
            j.transactions,
            z.marks_uni_per_tx,
            z.marks_bi_per_tx,
            z.validity_us_per_tx,
            z.not_valid_skips,
            z.forced_commits,
            z.shared_flushes,
            j.flushes_per_fsync,
            z.space_waits,
            z.copy_ms,
        );
    }
    if !out.is_empty() {
        let _ = writeln!(out);
    }
    out
}

/// Markdown tables of median ops/s: one per workload, threads down, series across.
pub fn headline(r: &SweepReport) -> String {
    let mut out = String::new();
    for w in &r.workloads {
        let _ = writeln!(
            out,
            "### {w} (ops/s, median; then the paired ratio to {} with its {:.0} % interval)\n",
            r.series.first().map(|s| s.name.as_str()).unwrap_or("-"),
            CONFIDENCE * 100.0
        );
        let _ = writeln!(
            out,
            "| threads | {} |",
            r.series.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(" | ")
        );
        let _ = writeln!(out, "|---:|{}", "---:|".repeat(r.series.len()));
        for &t in &r.threads {
            let cells: Vec<String> = r
                .series
                .iter()
                .map(|s| match r.point(w, t, &s.name) {
                    Some(p) if p.error.is_none() => match &p.ratio {
                        Some(c) => format!("{} ({}×)", f0(p.ops_per_sec), c.ratio_text()),
                        None => f0(p.ops_per_sec),
                    },
                    Some(_) => "error".into(),
                    None => "-".into(),
                })
                .collect();
            let _ = writeln!(out, "| {t} | {} |", cells.join(" | "));
        }
        let _ = writeln!(out);
    }
    out
}

/// Write `results.json`, `results.csv`, `README.md` (markdown) and print nothing.
pub fn write_all(r: &SweepReport, dir: &Path, charts: &[String]) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(r).map_err(io::Error::other)?;
    std::fs::write(dir.join("results.json"), json)?;
    std::fs::write(dir.join("results.csv"), csv(r))?;
    std::fs::write(dir.join("README.md"), markdown(r, charts))?;
    std::fs::write(dir.join("command.txt"), format!("{}\n", r.command))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{Point, SeriesInfo};
    use crate::hist::Percentiles;
    use crate::machine::Machine;
    use crate::workloads::RunResult;

    fn run() -> RunResult {
        RunResult {
            workload: "DWSL".into(),
            threads: 16,
            ops: 100,
            secs: 1.0,
            ops_per_sec: 100.0,
            bytes: 0,
            mb_per_sec: 0.0,
            op_latency: Percentiles::default(),
            fsync_latency: Percentiles {
                count: 100,
                p50: 1001.0,
                p95: 1002.0,
                p99: 1003.0,
                p999: 1004.0,
                mean: 1005.0,
                ..Percentiles::default()
            },
            op_cdf: Vec::new(),
            fsync_cdf: Vec::new(),
            fsync_hist: None,
            cpu_secs: 7.25,
            context_switches: 0,
            waits: None,
            journal: None,
            device: None,
            journal_summary: None,
            ijournal: None,
            kernel_journal: None,
            device_summary: None,
            extra: Vec::new(),
        }
    }

    #[test]
    fn terminal_table_labels_sit_over_their_figures() {
        let point = Point {
            workload: "DWSL".into(),
            threads: 16,
            series: "a/jbd2".into(),
            ops_per_sec: 100.0,
            ops_ci: None,
            ratio: None,
            reps: 5,
            bound_met: None,
            mb_per_sec: 0.0,
            reps_ops_per_sec: vec![100.0],
            median_run: Some(run()),
            fsync_pooled: None,
            fsync_p999_ratio: None,
            error: None,
        };
        let r = SweepReport {
            machine: Machine::fixture(),
            command: "test".into(),
            seed: 1,
            duration_secs: 1.0,
            reps: 5,
            max_reps: 5,
            ci_bound: None,
            scale: 1.0,
            series: vec![SeriesInfo {
                name: "a/jbd2".into(),
                target: String::new(),
                mode: None,
                device: String::new(),
            }],
            workloads: vec!["DWSL".into()],
            threads: vec![16],
            points: vec![point],
        };
        let t = table(&r);
        let lines: Vec<&str> =
            t.lines().filter(|l| l.starts_with("workload") || l.starts_with("DWSL")).collect();
        let head: Vec<&str> = lines[0].split("  ").map(str::trim).filter(|s| !s.is_empty()).collect();
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        let at = |h: &str| row[head.iter().position(|&x| x == h).unwrap_or_else(|| panic!("no heading {h}"))];
        assert_eq!(at("fsync p50"), "1001");
        assert_eq!(at("fsync p99"), "1003");
        assert_eq!(at("fsync mean"), "1005");
        assert_eq!(at("cpu s"), "7.25");
        assert_eq!(cells(&rows(&r)[0]).len(), COLUMNS.len());
    }
}
