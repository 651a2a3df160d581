//! `cjfs bench`: the benchmark lab (crate `cjfs-lab`) on the command line.
//!
//! * `cjfs bench smoke` — single-thread fsync latency against the raw disk, and 16-thread
//!   varmail-shared, on the file device in a directory;
//! * `cjfs bench device --target cjfs:PRESET|cjfs:file:PATH` — measured 4 KiB QD1 write,
//!   flush and write + flush latency;
//! * `cjfs bench run --target ... --workload ... --threads 1,2,4 --mode jbd2 --mode
//!   nojournal --reps 3 --out DIR` — sweeps with interleaved repetitions, printed as a table
//!   and written as JSON, CSV, markdown and charts.

use std::path::PathBuf;
use std::time::Duration;

use cjfs_lab::bench::{self, BenchError, SweepConfig, TargetSpec};
use cjfs_lab::workloads::{Workload, dbench};
use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult};
use crate::out::{out, outln};

/// Arguments of `cjfs bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(Debug, Subcommand)]
enum BenchCmd {
    /// Quick look: cjfs fsync latency vs the raw disk, and 16-thread varmail-shared.
    Smoke(SmokeArgs),
    /// Measure a device: 4 KiB QD1 write, flush, and write + flush latency.
    Device(DeviceArgs),
    /// Run a sweep: workloads × threads × targets × journal modes, with repetitions.
    Run(RunArgs),
    /// Stress the journal's waits: many threads commit and wait until N fsyncs are done, a
    /// watchdog checks no waiter stays parked after its transaction became durable.
    Stress(StressArgs),
    /// The journaling-of-journal paper's SQLite matrix with the SQLite library: in-process on
    /// cjfs on emulated devices (through an SQLite VFS), or through `cjfs mount` (FUSE).
    Sqlite(SqliteArgs),
}

#[derive(Debug, Args)]
struct SqliteArgs {
    /// Emulated devices, comma-separated (in-process runs).
    #[arg(long, value_delimiter = ',', default_value = "emmc,sata-ssd")]
    device: Vec<String>,
    /// Configurations, comma-separated: nojournal, ordered, data, joj, adaptive, or
    /// PRESET[/journal].
    #[arg(long, value_delimiter = ',', default_value = "nojournal,ordered,data,joj,adaptive")]
    config: Vec<String>,
    /// SQLite journal modes, comma-separated: delete, truncate, persist, wal.
    #[arg(long, value_delimiter = ',', default_value = "delete,wal")]
    modes: Vec<String>,
    /// Operations per transaction, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,1000")]
    per_txn: Vec<usize>,
    /// Records per round with 1-operation transactions (the paper: 10000).
    #[arg(long, default_value_t = 1000)]
    records_small: usize,
    /// Records per round with larger transactions (the paper: 10000).
    #[arg(long, default_value_t = 10000)]
    records_large: usize,
    /// Interleaved repetitions (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seed of the update and delete orders.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run through `cjfs mount` (FUSE) on image files made in this directory instead of
    /// in-process on emulated devices.
    #[arg(long)]
    fuse: Option<PathBuf>,
    /// With `--fuse DIR`: serve each mount from this process on a fresh in-memory image on the
    /// emulated `--device` presets (mount point in DIR) instead of image files on the host disk.
    #[arg(long, requires = "fuse")]
    fuse_emulated: bool,
    /// Write results.json, results.csv, tables.md and charts here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also record every sync of the in-process rounds (phase, transaction, file, device
    /// writes, blocks, flushes, FUA writes, time) into `sync-trace.csv` in `--out`.
    #[arg(long, requires = "out")]
    trace_syncs: bool,
}

#[derive(Debug, Args)]
struct StressArgs {
    /// Emulated device preset (ramdisk, optane, nvme-consumer, sata-ssd, emmc, ...).
    #[arg(long, default_value = "ramdisk")]
    device: String,
    /// Journal preset with its settings (one log).
    #[arg(long, default_value = "cjfs+dispatch=per_core", value_parser = mode_parser())]
    journal: String,
    /// Threads.
    #[arg(long, default_value_t = 64)]
    threads: usize,
    /// fsyncs in all.
    #[arg(long, default_value_t = 1_000_000)]
    fsyncs: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Longest a waiter may still wait after its transaction became durable, ms.
    #[arg(long, default_value_t = 1000)]
    late_bound_ms: u64,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn mode_parser() -> fn(&str) -> Result<String, String> {
    crate::preset_arg
}

fn ci_pct(s: &str) -> Result<f64, String> {
    let v: f64 =
        s.trim_end_matches('%').parse().map_err(|_| format!("bad interval bound {s:?} (percent)"))?;
    if !(v > 0.0 && v < 100.0) {
        return Err(format!("interval bound {s:?} must be between 0 and 100 percent"));
    }
    Ok(v)
}

fn pct(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("bad percentage {s:?}"))?;
    if !(0.0..=100.0).contains(&v) {
        return Err(format!("percentage {s:?} out of range 0-100"));
    }
    Ok(v)
}

fn secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s.trim_end_matches('s').parse().map_err(|_| format!("bad duration {s:?} (seconds)"))?;
    if !(v > 0.0 && v < 86_400.0) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(v))
}

#[derive(Debug, Args)]
struct SmokeArgs {
    /// Directory on the disk to measure (default: the system temp directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// fsync samples per side.
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    /// varmail threads.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// varmail run time in seconds.
    #[arg(long, default_value = "5", value_parser = secs)]
    duration: Duration,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Journal mode.
    #[arg(long, default_value = "jbd2", value_parser = mode_parser())]
    mode: String,
}

#[derive(Debug, Args)]
struct DeviceArgs {
    /// `cjfs:PRESET` (emulated) or `cjfs:file:PATH` (image in directory PATH, or file PATH).
    #[arg(long)]
    target: String,
    /// Samples of each figure.
    #[arg(long, default_value_t = 500)]
    iterations: usize,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Target, repeatable: `cjfs:PRESET`, `cjfs:file:PATH` or `dir:PATH`, optionally
    /// `LABEL=...`. The first target's series is the baseline of the ratio column.
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Workloads, comma-separated or repeated (`all` for every one).
    #[arg(long = "workload", default_value = "varmail-shared", value_delimiter = ',')]
    workloads: Vec<String>,
    /// Thread counts, e.g. `1,2,4,8,16,32,64`.
    #[arg(long, default_value = "1,2,4,8,16")]
    threads: String,
    /// Journal mode for cjfs targets, repeatable (each makes a series).
    #[arg(long = "mode", value_parser = mode_parser())]
    modes: Vec<String>,
    /// Measured seconds per run.
    #[arg(long, default_value = "3", value_parser = secs)]
    duration: Duration,
    /// Interleaved repetitions per point (medians are reported); the minimum with `--ci`.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Repeat each point until the 90 % interval of every ratio to the first series is
    /// within ±PCT % of its median (e.g. `--ci 5`), or `--max-reps` is reached.
    #[arg(long, value_name = "PCT", value_parser = ci_pct)]
    ci: Option<f64>,
    /// With `--ci`: most repetitions per point.
    #[arg(long, default_value_t = 12)]
    max_reps: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// File-set scale (1.0 = the papers' sizes).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// dbench loadfile.
    #[arg(long, default_value = dbench::DEFAULT_LOADFILE)]
    dbench_loadfile: PathBuf,
    /// Background writer bandwidth of the fsync tester, MB/s (0: none).
    #[arg(long, default_value_t = 100.0)]
    bg_mb_s: f64,
    /// The fsync tester's pause between its 80 KiB write and its fsync, ms (the iJournaling
    /// paper's is 100).
    #[arg(long, default_value_t = 0.0)]
    fsync_delay_ms: f64,
    /// Size of each emulated device and image file, GiB, instead of the workload's own (FxMark
    /// and most others: 4 GiB; 16 GiB at most for image files). More space is more block
    /// groups: at 16 GiB and more, two per-core logs' groups have their descriptors in
    /// different blocks.
    #[arg(long, value_name = "GIB")]
    device_gib: Option<f64>,
    /// The fsync tester's background bandwidth as PCT % of each target's write bandwidth
    /// (emulated presets: their figure; file and dir targets: `--disk-mb-s`), instead of
    /// `--bg-mb-s`.
    #[arg(long, value_name = "PCT", value_parser = pct)]
    bg_share: Option<f64>,
    /// Write bandwidth of the disk under file and dir targets, MB/s (for `--bg-share`).
    #[arg(long, value_name = "MB_S")]
    disk_mb_s: Option<f64>,
    /// Write results.json, results.csv, README.md and charts here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Set every ratio beside the same point of this committed results.json and say whether
    /// they agree (their intervals overlap).
    #[arg(long, value_name = "RESULTS_JSON")]
    compare: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Also print where each point's threads waited (lock contention and parked time per lock
    /// and condition variable, context switches and CPU per 1,000 fsyncs); the README written
    /// with `--out` always has it.
    #[arg(long)]
    waits: bool,
}

fn usage(e: BenchError) -> CliError {
    match e {
        BenchError::Usage(m) => CliError::Usage(m),
        BenchError::Io { what, source } => CliError::Io { path: what, source },
    }
}

/// Run `cjfs bench ...`.
pub fn run(a: BenchArgs) -> CliResult<()> {
    match a.cmd {
        BenchCmd::Smoke(s) => {
            let options = cjfs_fs::preset::resolve(&s.mode).map_err(|e| CliError::Usage(e.to_string()))?;
            let cfg = cjfs_lab::smoke::SmokeConfig {
                dir: s.dir.unwrap_or_else(std::env::temp_dir),
                iterations: s.iterations,
                threads: s.threads,
                duration: s.duration,
                seed: s.seed,
                options,
            };
            let r = cjfs_lab::smoke::run(&cfg)
                .map_err(|e| CliError::Io { path: cfg.dir.display().to_string(), source: e })?;
            cjfs_lab::smoke::print(&r, &cfg);
            Ok(())
        }
        BenchCmd::Stress(s) => {
            let device = cjfs_blockdev::SsdPreset::by_name(&s.device)
                .ok_or_else(|| CliError::Usage(format!("unknown device preset {:?}", s.device)))?;
            let journal =
                cjfs_fs::preset::resolve(&s.journal).map_err(|e| CliError::Usage(e.to_string()))?.journal;
            let cfg = cjfs_lab::wait_stress::StressConfig {
                device,
                journal,
                threads: s.threads,
                fsyncs: s.fsyncs,
                seed: s.seed,
                late_bound: Duration::from_millis(s.late_bound_ms),
            };
            let machine = cjfs_lab::machine::Machine::detect(&std::env::temp_dir());
            let r = cjfs_lab::wait_stress::run(&cfg).map_err(|e| CliError::Msg(e.to_string()))?;
            outln!("{}", machine.line());
            outln!(
                "stress: device {} · journal {} · {} threads · seed {}: {} fsyncs in {:.1} s ({} transactions)",
                r.device,
                r.journal,
                r.threads,
                r.seed,
                r.fsyncs,
                r.seconds,
                r.transactions
            );
            outln!(
                "  early returns {} · waiters late > {:.0} ms: {} (worst seen {:.1} ms) · spins {} ({} ended the wait, {} skipped on the score) · parks {} ({:.0} ms) · {:.2} context switches per fsync · {:.3} CPU s per 1,000 fsyncs",
                r.early_returns,
                r.late_bound_ms,
                r.late_waiters,
                r.worst_late_ms,
                r.spins,
                r.spin_hits,
                r.spin_skips,
                r.parks,
                r.parked_ms,
                r.context_switches_per_fsync,
                r.cpu_s_per_1000_fsyncs
            );
            if let Some(path) = &s.json {
                let text = serde_json::to_string_pretty(
                    &serde_json::json!({"machine": machine.line(), "report": r}),
                )
                .map_err(|e| CliError::Msg(format!("stress summary: {e}")))?;
                std::fs::write(path, text + "\n")
                    .map_err(|e| CliError::Io { path: path.display().to_string(), source: e })?;
            }
            if r.passed() {
                outln!("  PASS");
                Ok(())
            } else {
                Err(CliError::Msg(format!(
                    "stress run failed: {} early returns, {} waiters late beyond {:.0} ms",
                    r.early_returns, r.late_waiters, r.late_bound_ms
                )))
            }
        }
        BenchCmd::Device(d) => {
            let t: TargetSpec = d.target.parse().map_err(usage)?;
            let r = cjfs_lab::device::run(&t, d.iterations.max(1)).map_err(|e| match e {
                cjfs_lab::device::DeviceError::NotDevice(_) => CliError::Usage(e.to_string()),
                e => CliError::Io { path: d.target.clone(), source: std::io::Error::other(e.to_string()) },
            })?;
            cjfs_lab::device::print(&r);
            Ok(())
        }
        BenchCmd::Sqlite(a) => sqlite(a),
        BenchCmd::Run(r) => {
            let targets =
                r.targets.iter().map(|t| t.parse()).collect::<Result<Vec<TargetSpec>, _>>().map_err(usage)?;
            let mut workloads = Vec::new();
            for w in r.workloads.iter().map(|w| w.trim()).filter(|w| !w.is_empty()) {
                if w == "all" {
                    workloads.extend(Workload::all());
                } else {
                    workloads.push(w.parse::<Workload>().map_err(CliError::Usage)?);
                }
            }
            if !(r.scale > 0.0 && r.scale <= 100.0) {
                return Err(CliError::Usage(format!("--scale {} out of range (0, 100]", r.scale)));
            }
            // Read before the sweep, so a wrong path costs nothing.
            let committed =
                match &r.compare {
                    Some(p) => Some(std::fs::read_to_string(p).map_err(|e| CliError::Io {
                        path: format!("{} (--compare)", p.display()),
                        source: e,
                    })?),
                    None => None,
                };
            let cfg = SweepConfig {
                targets,
                modes: r.modes,
                workloads,
                threads: bench::parse_threads(&r.threads).map_err(usage)?,
                duration: r.duration,
                reps: r.reps,
                max_reps: r.max_reps,
                ci_bound: r.ci.map(|p| p / 100.0),
                seed: r.seed,
                scale: r.scale,
                dbench_loadfile: r.dbench_loadfile,
                bg_mb_s: r.bg_mb_s,
                fsync_delay: Duration::from_secs_f64(r.fsync_delay_ms.max(0.0) / 1e3),
                device_gib: r.device_gib.filter(|g| *g > 0.0),
                bg_share: r.bg_share.map(|p| p / 100.0),
                disk_mb_s: r.disk_mb_s,
                progress: !r.quiet,
                command: std::env::args().collect::<Vec<_>>().join(" "),
            };
            // A long sweep keeps what it has measured on disk after every point.
            let mut partial_error = false;
            let rep = bench::run_with(&cfg, |so_far| {
                if let Some(out) = &r.out
                    && !partial_error
                    && let Err(e) = cjfs_lab::report::write_all(so_far, out, &[])
                {
                    eprintln!("cjfs: bench: partial results not written to {}: {e}", out.display());
                    partial_error = true;
                }
            })
            .map_err(usage)?;
            out!("{}", cjfs_lab::report::table(&rep));
            if r.waits {
                outln!("\n{}", cjfs_lab::report::waits(&rep));
            }
            if let Some(out) = &r.out {
                let io = |e: std::io::Error| CliError::Io { path: out.display().to_string(), source: e };
                std::fs::create_dir_all(out).map_err(io)?;
                let charts = match cjfs_lab::charts::draw_all(&rep, out) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("cjfs: bench: charts not drawn: {e}");
                        Vec::new()
                    }
                };
                cjfs_lab::report::write_all(&rep, out, &charts).map_err(io)?;
                outln!("\nresults written to {}", out.display());
            }
            if let (Some(path), Some(text)) = (&r.compare, &committed) {
                let rows = cjfs_lab::compare::compare(&rep, text, rep.ci_bound)
                    .map_err(|e| CliError::Usage(format!("cannot compare with {}: {e}", path.display())))?;
                outln!("\n{}", cjfs_lab::compare::text(&rows, &path.display().to_string(), rep.ci_bound));
            }
            Ok(())
        }
    }
}

fn sqlite(a: SqliteArgs) -> CliResult<()> {
    use cjfs_lab::sqlite::{Config, JournalMode, MatrixSpec};
    let usage = |e: String| CliError::Usage(e);
    let configs = a
        .config
        .iter()
        .map(|c| Config::parse(c).map_err(|e| usage(e.to_string())))
        .collect::<CliResult<Vec<_>>>()?;
    let modes = a
        .modes
        .iter()
        .map(|m| JournalMode::parse(m).ok_or_else(|| usage(format!("unknown SQLite journal mode {m:?}"))))
        .collect::<CliResult<Vec<_>>>()?;
    for d in &a.device {
        if cjfs_blockdev::SsdPreset::by_name(d).is_none() {
            return Err(usage(format!("unknown device preset {d:?}")));
        }
    }
    let spec = MatrixSpec {
        devices: match (&a.fuse, a.fuse_emulated) {
            (Some(_), false) => vec!["fuse-image-file".into()],
            (Some(_), true) => a.device.iter().map(|d| format!("fuse-{d}")).collect(),
            (None, _) => a.device.clone(),
        },
        configs,
        modes,
        per_txn: a.per_txn.clone(),
        records_small_txn: a.records_small,
        records_large_txn: a.records_large,
        reps: a.reps,
        seed: a.seed,
        trace_syncs: a.trace_syncs,
    };
    let workdir = a.fuse.clone().unwrap_or_else(std::env::temp_dir);
    let machine = cjfs_lab::machine::Machine::detect(&workdir);
    outln!("{}", machine.line());
    outln!(
        "SQLite {} · synchronous=FULL · records {} (1 op/txn), {} (larger) · {} repetition(s) · seed {}",
        rusqlite_version(),
        a.records_small,
        a.records_large,
        a.reps,
        a.seed
    );
    let mut progress = |what: &str| eprintln!("  {what}");
    let rows = match &a.fuse {
        None => {
            cjfs_lab::sqlite::run_matrix(&spec, &mut progress).map_err(|e| CliError::Msg(e.to_string()))?
        }
        Some(dir) if a.fuse_emulated => crate::sqlite_fuse::run_emulated(dir, &spec, &mut progress)?,
        Some(dir) => crate::sqlite_fuse::run(dir, &spec, &mut progress)?,
    };
    outln!("{}", cjfs_lab::sqlite::report::tables(&rows));
    if let Some(acc) = cjfs_lab::sqlite::report::acceptance(&rows) {
        outln!(
            "paper cells: {} · adaptive within 6% of nojournal: {} · adaptive/nojournal mean {:.3} · joj faster than data: {}",
            acc.cells,
            acc.adaptive_within_6pct,
            acc.adaptive_mean_ratio,
            acc.joj_faster_than_data
        );
    }
    if let Some(out_dir) = &a.out {
        cjfs_lab::sqlite::report::write(out_dir, &machine, &spec, &rows)
            .map_err(|e| CliError::Io { path: out_dir.display().to_string(), source: e })?;
        outln!("written to {}", out_dir.display());
    }
    Ok(())
}

fn rusqlite_version() -> String {
    cjfs_lab::sqlite::sqlite_version()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_share_is_a_percentage() {
        assert_eq!(pct("60"), Ok(60.0));
        assert_eq!(pct("0"), Ok(0.0));
        assert!(pct("101").unwrap_err().contains("out of range"));
        assert!(pct("-1").is_err());
        assert!(pct("sixty").unwrap_err().contains("bad percentage"));
    }
}
