//! `cjfs-imagefuzz`: mutate ext4 images structure by structure and judge every `cjfs`
//! command on them. Exit status: 0 without failures, 1 with failures, 2 on an error of the
//! fuzzer itself.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cjfs_imagefuzz::campaign::{Config, default_cjfs, replay_corpus, run_campaign};
use clap::Parser;

/// Structure-aware image fuzzer for the cjfs command line tool.
#[derive(Debug, Parser)]
#[command(name = "cjfs-imagefuzz", version, about, long_about = None)]
struct Args {
    /// Number of mutated images to judge.
    #[arg(long, default_value_t = 300)]
    images: usize,
    /// Seed of every random choice (seed contents, mutations, command arguments).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The cjfs binary to judge (default: the `cjfs` next to this executable).
    #[arg(long)]
    cjfs: Option<PathBuf>,
    /// Timeout of each command, in seconds (a command still running is a `hang`).
    #[arg(long, default_value_t = 20)]
    timeout: u64,
    /// Images judged in parallel.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// FUSE mount workloads to run, spread over the images (only as root with /dev/fuse).
    #[arg(long, default_value_t = 0)]
    mounts: usize,
    /// Save each failing image (NAME.img.gz + NAME.json, replayable with --corpus) here.
    #[arg(long, value_name = "DIR")]
    save_failures: Option<PathBuf>,
    /// Save every judged image, failing or not, here (to pick regression corpus entries).
    #[arg(long, value_name = "DIR")]
    save_all: Option<PathBuf>,
    /// Write JSON lines of every failure, then a summary line, to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Replay the corpus in DIR instead of making new images.
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
    /// Count multi_line_error as a failure too.
    #[arg(long)]
    strict: bool,
    /// Bytes of `cat` output read before the pipe is closed (MiB).
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    cat_limit: u64,
    /// Directory for scratch files (default: the system temp directory).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Keep the scratch directory (the seed images) after the run.
    #[arg(long)]
    keep_work: bool,
    /// Also print every command run of every image.
    #[arg(long, short)]
    verbose: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let cfg = Config {
        images: a.images,
        seed: a.seed,
        cjfs: a.cjfs.unwrap_or_else(default_cjfs),
        timeout: Duration::from_secs(a.timeout.max(1)),
        jobs: a.jobs.max(1),
        mounts: a.mounts,
        save_failures: a.save_failures,
        save_all: a.save_all,
        json: a.json,
        strict: a.strict,
        cat_limit: a.cat_limit.max(1) << 20,
        progress: !a.quiet,
        work_dir: a.work_dir,
        keep_work: a.keep_work,
    };
    let result = match &a.corpus {
        Some(dir) => replay_corpus(&cfg, dir),
        None => run_campaign(&cfg),
    };
    match result {
        Ok(report) => {
            if a.verbose {
                print!("{}", report.render_runs());
            }
            print!("{}", report.render());
            if report.failure_count() == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => {
            eprintln!("cjfs-imagefuzz: {e}");
            ExitCode::from(2)
        }
    }
}
