//! `cjfs crashtest`: the crash-consistency harness (see `cjfs_lab::crash`).
//!
//! Runs the crash workloads on every selected journal mode, prints a progress bar and a
//! summary table per mode (or JSON), saves failures as small files, and replays one with
//! `--replay FILE`. Exits non-zero if a crash-consistent mode had a violation; `nojournal`
//! is run too, but its violations are expected (it is not crash-consistent by design).

use std::path::PathBuf;
use std::time::Instant;

use cjfs_fs::DataMode;
use cjfs_fs::preset;
use cjfs_lab::crash::{self, CrashConfig, Suite, Summary};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{CliError, CliResult};
use crate::out::{out, outln};

/// Arguments of `cjfs crashtest`.
#[derive(Debug, Args)]
pub struct CrashtestArgs {
    /// Journal mode (preset) to test; repeat for several (default: every crash-tested preset).
    #[arg(long = "mode", visible_alias = "preset", value_name = "PRESET")]
    modes: Vec<String>,
    /// Only workloads whose name contains this (e.g. `ace1`, `ace2-0001`, `classic`, `ij-`, `mt8`).
    #[arg(long, value_name = "NAME")]
    workload: Option<String>,
    /// Seed for the seq-2/seq-3 samples, the schedules and the state sampling.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cap on crash states per workload (0 = no cap; default 400, or 3000 with `--all`).
    #[arg(long, value_name = "N")]
    max_states: Option<usize>,
    /// Threads checking crash states (default: the machine's cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// The full suite: every seq-1 workload, 5000 seq-2 and 500 seq-3 workloads, every
    /// scenario at full size (default: the fast CI subset).
    #[arg(long)]
    all: bool,
    /// Number of seeded seq-2 workloads (overrides the suite's).
    #[arg(long, value_name = "N")]
    seq2: Option<usize>,
    /// Number of seeded seq-3 workloads (overrides the suite's).
    #[arg(long, value_name = "N")]
    seq3: Option<usize>,
    /// Do the new-work step and recovery cuts on one unique state in N (default 1 = all;
    /// e2fsck always runs on every unique state).
    #[arg(long, value_name = "N", default_value_t = 1)]
    heavy_every: u32,
    /// Record on a device without a cache barrier (like an image file: only a flush orders
    /// writes), so the journal takes its barrier-less commit path.
    #[arg(long)]
    no_barrier: bool,
    /// Block size of the test images in bytes: 1024, 2048 or 4096.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    block_size: usize,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Directory for failure files.
    #[arg(long, value_name = "DIR", default_value = "crash-failures")]
    failures: PathBuf,
    /// Reproduce a saved failure file and print its operation log and differing fields.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["all", "workload", "modes", "no_barrier", "block_size"])]
    replay: Option<PathBuf>,
    /// With `--replay`: also print the device events up to the crash point, between the
    /// operations that started and returned there.
    #[arg(long, requires = "replay")]
    trace: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn cli_err(e: crash::CrashError) -> CliError {
    CliError::Msg(e.to_string())
}

/// Run `cjfs crashtest`.
pub fn run(a: CrashtestArgs, data: DataMode) -> CliResult<()> {
    let threads =
        a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
    if let Some(file) = &a.replay {
        let f = crash::replay::load(file).map_err(cli_err)?;
        let r = crash::replay::replay(&f, threads).map_err(cli_err)?;
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&r).map_err(|e| CliError::Msg(e.to_string()))?);
        } else {
            outln!(
                "replaying {} (mode {}, data={}, {}, {}-byte blocks, seed {})",
                f.workload.name,
                f.mode,
                f.data,
                if f.barrier { "device with barrier" } else { "device without barrier" },
                f.block_size,
                f.seed
            );
            if a.trace {
                outln!("device events up to the crash point:");
                for l in &r.trace {
                    outln!("{l}");
                }
            }
            out!("{}", r.text());
        }
        return if r.reproduced() {
            Err(CliError::Msg(format!("the violation reproduced ({} problem(s))", r.problems.len())))
        } else {
            Ok(())
        };
    }
    if !cjfs_blockdev::valid_block_size(a.block_size) {
        return Err(CliError::Usage(format!("--block-size {}: must be 1024, 2048 or 4096", a.block_size)));
    }
    let modes: Vec<String> = if a.modes.is_empty() {
        preset::names().iter().map(|s| s.to_string()).collect()
    } else {
        a.modes.clone()
    };
    for m in &modes {
        preset::resolve(m).map_err(|e| CliError::Usage(e.to_string()))?;
    }
    let mut suite = if a.all { Suite::all() } else { Suite::ci() };
    if a.workload.is_some() {
        // A named selection looks at every workload of the full suite.
        suite = Suite { filter: a.workload.clone(), ..Suite::all() };
    }
    if let Some(n) = a.seq2 {
        suite.seq2 = n;
    }
    if let Some(n) = a.seq3 {
        suite.seq3 = n;
    }
    if modes.iter().all(|m| suite.workloads_for(m, a.seed).is_empty()) {
        return Err(CliError::Usage("no workload matches".into()));
    }
    let t0 = Instant::now();
    let mut summaries = Vec::new();
    for m in &modes {
        let workloads = suite.workloads_for(m, a.seed);
        let mut cfg = CrashConfig::new(m);
        cfg.data = data;
        cfg.seed = a.seed;
        cfg.threads = threads;
        cfg.check.heavy_every = a.heavy_every.max(1);
        cfg.check.barrier = !a.no_barrier;
        cfg.block_size = a.block_size;
        // Default caps: 400 crash states per workload for the CI subset, 3000 for `--all`
        // (the ACE workloads stay far below either; only the 1000-create and multi-threaded
        // scenarios reach them, and then keep every persistence point first).
        cfg.states.max_states = a.max_states.unwrap_or(if a.all { 3000 } else { 400 });
        cfg.failure_dir = Some(a.failures.clone());
        let pb =
            if a.quiet || a.json { ProgressBar::hidden() } else { ProgressBar::new(workloads.len() as u64) };
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix:>10} {elapsed_precise} [{bar:30}] {pos}/{len} eta {eta} {msg}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_prefix(m.clone());
        let (summary, _) = crash::run_suite(&cfg, &workloads, &|p| {
            pb.set_position(p.done as u64);
            pb.set_message(format!("{} states, {} violations", p.states, p.violations));
        });
        pb.finish_and_clear();
        if !a.json {
            eprintln!(
                "{m}: {} workloads, {} crash states ({} unique, {} with several transactions in flight), {} violations, {:.0} s — {}",
                summary.workloads,
                summary.crash_states,
                summary.unique_states,
                summary.multi_tx_states,
                summary.violations,
                summary.seconds,
                summary.verdict()
            );
        }
        summaries.push(summary);
    }
    let summary = Summary { modes: summaries, seed: a.seed, seconds: t0.elapsed().as_secs_f64() };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&summary).map_err(|e| CliError::Msg(e.to_string()))?);
    } else {
        outln!("{}", summary.table());
        for m in &summary.modes {
            if m.violations > 0 || m.workload_errors > 0 {
                outln!("\n{} ({}):", m.mode, m.verdict());
                for p in m.first_problems.iter().take(5) {
                    outln!("  {p}");
                }
                for f in m.failure_files.iter().take(5) {
                    outln!("  replay: cjfs crashtest --replay {f}");
                }
            }
        }
    }
    if summary.passed() {
        Ok(())
    } else {
        Err(CliError::Msg("crash-consistency violations found (see the failure files)".into()))
    }
}
