//! `cjfs bench run`: sweeps of workloads × thread counts × targets (× journal modes), with
//! interleaved repetitions and medians.
//!
//! A *target* names where a workload runs:
//!
//! * `cjfs:PRESET` — cjfs in-process on a fresh [`EmulatedSsd`] with a named preset
//!   (`cjfs:nvme-consumer`, ...), one series per `--mode` (journal preset);
//! * `cjfs:file:PATH` — cjfs in-process on a [`FileDevice`]: an image file in the directory
//!   `PATH` (or the image file `PATH`), preallocated with zeros once and made anew with
//!   `mkfs` before every run;
//! * `dir:PATH` — any mounted directory through plain system calls (kernel ext4 or XFS on a
//!   loop device, fuse2fs, ...); each run works in a fresh subdirectory removed afterwards.
//!
//! Any target may carry a label: `ext4-ordered=dir:/mnt/ext4o`.
//!
//! Repetitions are interleaved — for every (workload, threads) point each repetition runs
//! every series once, in order (A B C A B C ...) — so slow drifts of a shared machine hit
//! every series alike; a point's figure is the median over its repetitions.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{Device, EmulatedSsd, FileDevice, FileDeviceOptions, SsdPreset};
use cjfs_fs::{Fs, MkfsOptions, MountOptions, mkfs, preset};
use cjfs_journal::JournalConfig;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::hist::{Latency, Percentiles};
use crate::machine::{Machine, disk_of};
use crate::stats::{MedianCi, median, median_ci, paired_ratios};
use crate::target::{CjfsTarget, DirTarget, Target};
use crate::workloads::{self, Params, RunResult, Workload};

/// Where a series runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetKind {
    /// cjfs in-process on an emulated device.
    Emulated(SsdPreset),
    /// cjfs in-process on an image file (in this directory, or this file).
    File(PathBuf),
    /// A mounted directory, through system calls.
    Dir(PathBuf),
}

/// A `--target` argument.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    /// Label given with `LABEL=...`.
    pub label: Option<String>,
    /// What it is.
    pub kind: TargetKind,
}

/// Errors of the bench runner.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A bad target, mode, workload or thread list.
    #[error("{0}")]
    Usage(String),
    /// I/O while preparing or writing results.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

fn ioe(what: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

impl FromStr for TargetSpec {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, BenchError> {
        let (label, spec) = match s.split_once('=') {
            Some((l, r)) if !l.contains(':') && !l.contains('/') => (Some(l.to_string()), r),
            _ => (None, s),
        };
        let kind = if let Some(p) = spec.strip_prefix("cjfs:file:") {
            if p.is_empty() {
                return Err(BenchError::Usage("cjfs:file: needs a path".into()));
            }
            TargetKind::File(PathBuf::from(p))
        } else if let Some(name) = spec.strip_prefix("cjfs:") {
            let preset = SsdPreset::by_name(name).ok_or_else(|| {
                let names: Vec<&str> = SsdPreset::all().iter().map(|p| p.name).collect();
                BenchError::Usage(format!(
                    "unknown device preset {name:?} (presets: {}; or cjfs:file:PATH)",
                    names.join(", ")
                ))
            })?;
            TargetKind::Emulated(preset)
        } else if let Some(p) = spec.strip_prefix("dir:") {
            if p.is_empty() {
                return Err(BenchError::Usage("dir: needs a path".into()));
            }
            TargetKind::Dir(PathBuf::from(p))
        } else {
            return Err(BenchError::Usage(format!(
                "bad target {s:?}: expected cjfs:PRESET, cjfs:file:PATH or dir:PATH (optionally LABEL=...)"
            )));
        };
        Ok(TargetSpec { label, kind })
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(l) = &self.label {
            return write!(f, "{l}");
        }
        match &self.kind {
            TargetKind::Emulated(p) => write!(f, "cjfs:{}", p.name),
            TargetKind::File(_) => write!(f, "cjfs:file"),
            TargetKind::Dir(p) => write!(f, "dir:{}", p.display()),
        }
    }
}

/// One line of a chart: a target, with a journal mode for cjfs targets.
#[derive(Debug, Clone)]
pub struct Series {
    /// Name in tables and charts.
    pub name: String,
    /// Where it runs.
    pub kind: TargetKind,
    /// What the series' preset means for the mount (cjfs targets).
    pub options: Option<MountOptions>,
}

/// What describes a series in every output.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesInfo {
    /// Series name.
    pub name: String,
    /// Target kind and location.
    pub target: String,
    /// Journal preset, for cjfs.
    pub mode: Option<String>,
    /// Device: preset figures, image location, or the mount (device, type, options).
    pub device: String,
}

/// A sweep to run.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Targets, in the order they run and are listed (the first is the ratio baseline).
    pub targets: Vec<TargetSpec>,
    /// Journal presets for cjfs targets.
    pub modes: Vec<String>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Measured time per run.
    pub duration: Duration,
    /// Repetitions per point (the minimum, with `ci_bound`).
    pub reps: usize,
    /// With `ci_bound`: repetitions after which a point stops even if its intervals are
    /// still wider than the bound (the report then says so).
    pub max_reps: usize,
    /// Repeat a point (all its series, interleaved) until the 90 % interval of every ratio
    /// to the first series (of the ops/s, when there is one series) is within this relative
    /// half-width (0.05 = ±5 %), or `max_reps` is reached. `None`: exactly `reps`.
    pub ci_bound: Option<f64>,
    /// Seed.
    pub seed: u64,
    /// File-set scale (1.0 = the papers').
    pub scale: f64,
    /// dbench loadfile.
    pub dbench_loadfile: PathBuf,
    /// Fsync tester background bandwidth, MB/s.
    pub bg_mb_s: f64,
    /// Fsync tester pause between write and fsync.
    pub fsync_delay: Duration,
    /// Device (image) size, GiB, instead of each workload's own: a larger file system has
    /// more block groups, hence more group-descriptor blocks for per-core logs to split.
    pub device_gib: Option<f64>,
    /// Fsync tester background bandwidth as a share of each target's write bandwidth
    /// (emulated presets: their figure; others: [`SweepConfig::disk_mb_s`]), instead of
    /// `bg_mb_s`, so one sweep holds devices of different speeds at the same load.
    pub bg_share: Option<f64>,
    /// Write bandwidth, MB/s, of the disk under `cjfs:file:` and `dir:` targets (measured,
    /// e.g. with `dd oflag=direct`), for `bg_share`.
    pub disk_mb_s: Option<f64>,
    /// Show a progress bar.
    pub progress: bool,
    /// The command line, for the record.
    pub command: String,
}

impl SweepConfig {
    /// The fsync tester's background bandwidth for a series, MB/s.
    pub fn bg_mb_s_for(&self, kind: &TargetKind) -> Result<f64, BenchError> {
        let Some(share) = self.bg_share else { return Ok(self.bg_mb_s) };
        let bw = match kind {
            TargetKind::Emulated(p) if p.bandwidth_mb_s > 0 => p.bandwidth_mb_s as f64,
            TargetKind::Emulated(p) => {
                return Err(BenchError::Usage(format!(
                    "--bg-share: the {} preset has no bandwidth limit; use --bg-mb-s",
                    p.name
                )));
            }
            TargetKind::File(_) | TargetKind::Dir(_) => self.disk_mb_s.ok_or_else(|| {
                BenchError::Usage("--bg-share with a file or dir target needs --disk-mb-s".into())
            })?,
        };
        Ok(share * bw)
    }

    /// The series: every cjfs target once per mode, every directory once.
    pub fn series(&self) -> Result<Vec<Series>, BenchError> {
        let mut modes = Vec::new();
        for m in &self.modes {
            modes.push(preset::resolve(m).map_err(|e| BenchError::Usage(e.to_string()))?);
        }
        if modes.is_empty() {
            modes.push(MountOptions { journal: JournalConfig::jbd2(), ..MountOptions::default() });
        }
        let mut out = Vec::new();
        for t in &self.targets {
            match &t.kind {
                TargetKind::Dir(_) => {
                    out.push(Series { name: t.to_string(), kind: t.kind.clone(), options: None })
                }
                _ => {
                    for j in &modes {
                        out.push(Series {
                            name: format!("{t}/{}", j.journal.name),
                            kind: t.kind.clone(),
                            options: Some(j.clone()),
                        })
                    }
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for s in &out {
            if !seen.insert(s.name.clone()) {
                return Err(BenchError::Usage(format!(
                    "two series named {:?}: label the targets (LABEL=...)",
                    s.name
                )));
            }
        }
        Ok(out)
    }
}

/// One (workload, threads, series) point.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Workload.
    pub workload: String,
    /// Threads.
    pub threads: usize,
    /// Series.
    pub series: String,
    /// Median ops/s over the repetitions that succeeded.
    pub ops_per_sec: f64,
    /// The median ops/s with its interval (`None` with fewer than two repetitions).
    pub ops_ci: Option<MedianCi>,
    /// Ratio to the first series: the median of the paired per-repetition ratios with its
    /// interval (`None` for the first series itself, or with fewer than two pairs).
    pub ratio: Option<MedianCi>,
    /// Repetitions run for this point (every series of a point runs the same number).
    pub reps: usize,
    /// With a bound: whether every interval of the point came within it.
    pub bound_met: Option<bool>,
    /// Median MB/s.
    pub mb_per_sec: f64,
    /// ops/s of every repetition, in run order.
    pub reps_ops_per_sec: Vec<f64>,
    /// The repetition with the median ops/s (its latencies and journal figures are shown).
    pub median_run: Option<RunResult>,
    /// fsync latency over every repetition's fsyncs together (a tail percentile of one
    /// run rests on few samples: p99.9 of 10 000 fsyncs is the tenth worst).
    pub fsync_pooled: Option<Percentiles>,
    /// fsync p99.9 relative to the first series: the median of the paired per-repetition
    /// ratios with its interval (`None` for the first series, or without fsyncs).
    pub fsync_p999_ratio: Option<MedianCi>,
    /// First error, if a repetition failed.
    pub error: Option<String>,
}

/// Everything a sweep measured.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    /// The machine.
    pub machine: Machine,
    /// The command that produced it.
    pub command: String,
    /// Seed.
    pub seed: u64,
    /// Seconds per run.
    pub duration_secs: f64,
    /// Repetitions per point (the minimum when `ci_bound` is set).
    pub reps: usize,
    /// Repetition limit with `ci_bound`.
    pub max_reps: usize,
    /// The bound on every interval's relative half-width, if repetitions were adaptive.
    pub ci_bound: Option<f64>,
    /// File-set scale.
    pub scale: f64,
    /// Series, in order.
    pub series: Vec<SeriesInfo>,
    /// Workloads, in order.
    pub workloads: Vec<String>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Points, by workload, threads, series.
    pub points: Vec<Point>,
}

impl SweepReport {
    /// The point for (workload, threads, series).
    pub fn point(&self, workload: &str, threads: usize, series: &str) -> Option<&Point> {
        self.points.iter().find(|p| p.workload == workload && p.threads == threads && p.series == series)
    }
}

/// Describe an emulated preset's assumed figures.
pub fn preset_line(p: &SsdPreset) -> String {
    format!("emulated {}: {}", p.name, p.figures())
}

/// The mount holding `dir`, with its options (from /proc/self/mounts).
pub fn mount_of(dir: &Path) -> String {
    let Ok(canon) = dir.canonicalize() else { return "unknown".into() };
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut best: Option<(usize, String)> = None;
    for l in mounts.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        if canon.starts_with(f[1]) && best.as_ref().is_none_or(|(n, _)| f[1].len() > *n) {
            best = Some((f[1].len(), format!("{} on {} type {} ({})", f[0], f[1], f[2], f[3])));
        }
    }
    best.map(|b| b.1).unwrap_or_else(|| "unknown".into())
}

fn info(s: &Series) -> SeriesInfo {
    let (target, device) = match &s.kind {
        TargetKind::Emulated(p) => (format!("cjfs in-process on emulated {}", p.name), preset_line(p)),
        TargetKind::File(p) => (
            format!("cjfs in-process on image file in {}", p.display()),
            format!("file device; host: {}", disk_of(p)),
        ),
        TargetKind::Dir(p) => {
            let features = crate::target::mount_source(p)
                .filter(|(_, t)| t == "ext4")
                .map(|(d, _)| crate::target::ext4_features_of(&d))
                .unwrap_or_default();
            let mount = mount_of(p);
            let device =
                if features.is_empty() { mount } else { format!("{mount}, features {}", features.join(",")) };
            (format!("directory {}", p.display()), device)
        }
    };
    SeriesInfo {
        name: s.name.clone(),
        target,
        mode: s.options.as_ref().map(|o| o.journal.name.clone()),
        device,
    }
}

/// A prepared image file for a `cjfs:file:` series, reused across its runs.
struct Image {
    path: PathBuf,
    /// Remove on drop (we created it in a directory).
    _tmp: Option<tempfile::TempDir>,
}

fn preallocate(path: &Path, len: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    if f.metadata()?.len() >= len {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], off)?;
        off += n as u64;
    }
    f.sync_all()
}

fn image_for(p: &Path, bytes: u64) -> io::Result<Image> {
    if p.is_dir() {
        let tmp = tempfile::Builder::new().prefix("cjfs-bench-").tempdir_in(p)?;
        let path = tmp.path().join("cjfs.img");
        preallocate(&path, bytes)?;
        Ok(Image { path, _tmp: Some(tmp) })
    } else {
        preallocate(p, bytes)?;
        Ok(Image { path: p.to_path_buf(), _tmp: None })
    }
}

/// A target made for one run and what undoes it.
struct Instance {
    target: Arc<dyn Target>,
    cleanup: Box<dyn FnOnce() -> io::Result<()>>,
}

fn fs_err(e: impl fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn mount_cjfs(dev: Device, options: &MountOptions, zeroed: bool, label: String) -> io::Result<Instance> {
    // Every log as large as the primary journal mke2fs would make for this device.
    let area = cjfs_fs::mkfs::default_journal_blocks(dev.num_blocks()).max(preset::LOG_AREA_BLOCKS);
    let mk = preset::mkfs_for(options, area, MkfsOptions { assume_zeroed: zeroed, ..Default::default() });
    mkfs(&*dev, &mk).map_err(fs_err)?;
    let fs = Fs::open(dev, options.clone()).map_err(fs_err)?;
    let t = Arc::new(CjfsTarget::new(fs, label));
    let t2 = t.clone();
    Ok(Instance {
        target: t,
        cleanup: Box::new(move || match Arc::try_unwrap(t2) {
            Ok(t) => t.unmount().map_err(fs_err),
            Err(_) => Err(io::Error::other("cjfs target still in use after the run")),
        }),
    })
}

fn instance(s: &Series, w: Workload, p: &Params, image: Option<&Image>, n: usize) -> io::Result<Instance> {
    let options = s.options.clone().unwrap_or_default();
    match &s.kind {
        TargetKind::Emulated(preset) => {
            let dev: Device = Arc::new(EmulatedSsd::new(*preset, w.device_blocks(p)));
            mount_cjfs(dev, &options, true, s.name.clone())
        }
        TargetKind::File(_) => {
            let img = image.ok_or_else(|| io::Error::other("image not prepared"))?;
            let dev: Device =
                Arc::new(FileDevice::open(&img.path, FileDeviceOptions::default()).map_err(fs_err)?);
            mount_cjfs(dev, &options, false, s.name.clone())
        }
        TargetKind::Dir(root) => {
            let dir = root.join(format!("cjfs-bench-{}-{n}", std::process::id()));
            std::fs::create_dir(&dir)?;
            let t = Arc::new(DirTarget::new(&dir, s.name.clone()));
            Ok(Instance {
                target: t,
                cleanup: Box::new(move || {
                    std::fs::remove_dir_all(&dir)?;
                    DirTarget::new(dir.parent().unwrap_or(Path::new("/")), "").sync_all()
                }),
            })
        }
    }
}

/// Run one workload once on a fresh instance of a series.
pub fn run_once(s: &Series, w: Workload, p: &Params, image: Option<&Path>) -> io::Result<RunResult> {
    let img = image.map(|p| Image { path: p.to_path_buf(), _tmp: None });
    let inst = instance(s, w, p, img.as_ref(), 0)?;
    let r = workloads::run(w, &inst.target, p);
    drop(inst.target);
    let c = (inst.cleanup)();
    let r = r?;
    c?;
    Ok(r)
}

/// Run a sweep.
pub fn run(cfg: &SweepConfig) -> Result<SweepReport, BenchError> {
    run_with(cfg, |_| {})
}

/// [`run`], handing the report so far to `after_point` after every (workload, threads)
/// point, so a long sweep can keep its results on disk as it goes.
pub fn run_with(
    cfg: &SweepConfig,
    mut after_point: impl FnMut(&SweepReport),
) -> Result<SweepReport, BenchError> {
    let series = cfg.series()?;
    if cfg.workloads.is_empty() || cfg.threads.is_empty() || cfg.reps == 0 {
        return Err(BenchError::Usage("need at least one workload, thread count and repetition".into()));
    }
    if cfg.threads.contains(&0) {
        return Err(BenchError::Usage("thread counts must be positive".into()));
    }
    if cfg.workloads.contains(&Workload::Dbench) && !workloads::dbench::available(&cfg.dbench_loadfile) {
        return Err(BenchError::Usage(format!(
            "dbench loadfile {} not readable: install it with `apt-get install dbench`",
            cfg.dbench_loadfile.display()
        )));
    }
    let workdir = series
        .iter()
        .find_map(|s| match &s.kind {
            TargetKind::File(p) | TargetKind::Dir(p) => Some(p.clone()),
            TargetKind::Emulated(_) => None,
        })
        .unwrap_or_else(std::env::temp_dir);
    let machine = Machine::detect(&workdir);
    let max_threads = cfg.threads.iter().copied().max().unwrap_or(1);
    let params = |threads: usize| Params {
        threads,
        duration: cfg.duration,
        seed: cfg.seed,
        scale: cfg.scale,
        dbench_loadfile: cfg.dbench_loadfile.clone(),
        bg_mb_s: cfg.bg_mb_s,
        fsync_delay: cfg.fsync_delay,
        device_blocks: cfg.device_gib.map(|g| (g * f64::from(1u32 << 18)) as u64),
    };
    // Image files, one per file series (each series keeps its own so runs never share one).
    let image_bytes = cfg
        .workloads
        .iter()
        .map(|w| w.device_blocks(&params(max_threads)) * 4096)
        .max()
        .unwrap_or(4 << 30)
        .min(16 << 30);
    let mut images: Vec<Option<Image>> = Vec::new();
    for s in &series {
        images.push(match &s.kind {
            TargetKind::File(p) => Some(
                image_for(p, image_bytes).map_err(ioe(format!("preparing an image in {}", p.display())))?,
            ),
            _ => None,
        });
    }
    let bg: Vec<f64> = if cfg.workloads.contains(&Workload::FsyncTester) {
        series.iter().map(|s| cfg.bg_mb_s_for(&s.kind)).collect::<Result<_, _>>()?
    } else {
        vec![cfg.bg_mb_s; series.len()]
    };
    let max_reps = if cfg.ci_bound.is_some() { cfg.max_reps.max(cfg.reps) } else { cfg.reps };
    let total = (cfg.workloads.len() * cfg.threads.len() * cfg.reps * series.len()) as u64;
    let pb = if cfg.progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} eta {eta} {msg}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    let report = |points: Vec<Point>| SweepReport {
        machine: machine.clone(),
        command: cfg.command.clone(),
        seed: cfg.seed,
        duration_secs: cfg.duration.as_secs_f64(),
        reps: cfg.reps,
        max_reps,
        ci_bound: cfg.ci_bound,
        scale: cfg.scale,
        series: series.iter().map(info).collect(),
        workloads: cfg.workloads.iter().map(|w| w.to_string()).collect(),
        threads: cfg.threads.clone(),
        points,
    };
    let mut points = Vec::new();
    let mut n = 0usize;
    for &w in &cfg.workloads {
        for &threads in &cfg.threads {
            let p = params(threads);
            // runs[i][r]: repetition r of series i (None if it failed), so ratios pair up.
            let mut runs: Vec<Vec<Option<RunResult>>> = vec![Vec::new(); series.len()];
            let mut errors: Vec<Option<String>> = vec![None; series.len()];
            let mut rep = 0;
            loop {
                if rep >= cfg.reps {
                    if rep >= max_reps {
                        break;
                    }
                    match cfg.ci_bound {
                        Some(bound) if !point_within(&runs, bound) => {
                            // One more interleaved round of every series.
                            pb.inc_length(series.len() as u64);
                        }
                        _ => break,
                    }
                }
                for (i, s) in series.iter().enumerate() {
                    pb.set_message(format!("{w} t={threads} {} rep {}", s.name, rep + 1));
                    n += 1;
                    let p = Params { bg_mb_s: bg[i], ..p.clone() };
                    let r = instance(s, w, &p, images[i].as_ref(), n).and_then(|inst| {
                        let r = workloads::run(w, &inst.target, &p);
                        drop(inst.target);
                        let c = (inst.cleanup)();
                        let r = r?;
                        c?;
                        Ok(r)
                    });
                    match r {
                        Ok(r) => runs[i].push(Some(r)),
                        Err(e) => {
                            pb.println(format!("{w} t={threads} {}: {e}", s.name));
                            errors[i].get_or_insert(e.to_string());
                            runs[i].push(None);
                        }
                    }
                    pb.inc(1);
                }
                rep += 1;
            }
            let bound_met = cfg.ci_bound.map(|b| point_within(&runs, b));
            let base_ops = rep_ops(&runs[0]);
            let base_p999 = rep_fsync_p999(&runs[0]);
            for (i, s) in series.iter().enumerate() {
                let per_rep = rep_ops(&runs[i]);
                let p999_ratio = if i == 0 {
                    None
                } else {
                    median_ci(&paired_ratios(&rep_fsync_p999(&runs[i]), &base_p999))
                };
                let rs: Vec<RunResult> = std::mem::take(&mut runs[i]).into_iter().flatten().collect();
                let ops: Vec<f64> = rs.iter().map(|r| r.ops_per_sec).collect();
                let med = median(&ops);
                let median_run = rs
                    .iter()
                    .min_by(|a, b| (a.ops_per_sec - med).abs().total_cmp(&(b.ops_per_sec - med).abs()))
                    .map(|r| RunResult { fsync_hist: None, ..r.clone() });
                let ratio = if i == 0 { None } else { median_ci(&paired_ratios(&per_rep, &base_ops)) };
                let fsync_pooled = pooled(rs.iter().filter_map(|r| r.fsync_hist.as_ref()));
                points.push(Point {
                    workload: w.to_string(),
                    threads,
                    series: s.name.clone(),
                    ops_per_sec: med,
                    ops_ci: median_ci(&ops),
                    ratio,
                    reps: rep,
                    bound_met,
                    mb_per_sec: median(&rs.iter().map(|r| r.mb_per_sec).collect::<Vec<_>>()),
                    reps_ops_per_sec: ops,
                    median_run,
                    fsync_pooled,
                    fsync_p999_ratio: p999_ratio,
                    error: errors[i].take(),
                });
            }
            after_point(&report(points.clone()));
        }
    }
    pb.finish_and_clear();
    Ok(report(points))
}

/// fsync p99.9 of each repetition (`None` where it failed or made no fsync).
fn rep_fsync_p999(runs: &[Option<RunResult>]) -> Vec<Option<f64>> {
    per_rep(runs, |r| (r.fsync_latency.count > 0).then_some(r.fsync_latency.p999))
}

/// `f` of each repetition (`None` where it failed or `f` has no value).
fn per_rep(runs: &[Option<RunResult>], f: impl Fn(&RunResult) -> Option<f64>) -> Vec<Option<f64>> {
    runs.iter().map(|r| r.as_ref().and_then(&f)).collect()
}

/// Percentiles of several histograms merged (`None` when they hold nothing).
fn pooled<'a>(hists: impl Iterator<Item = &'a Latency>) -> Option<Percentiles> {
    let mut all = Latency::new();
    for h in hists {
        all.merge(h);
    }
    let p = all.percentiles();
    (p.count > 0).then_some(p)
}

/// ops/s of each repetition (`None` where it failed).
fn rep_ops(runs: &[Option<RunResult>]) -> Vec<Option<f64>> {
    per_rep(runs, |r| Some(r.ops_per_sec))
}

/// Whether every interval of a point is within `bound`: each series' ratio to the first,
/// or the first series' ops/s when it is alone.
fn point_within(runs: &[Vec<Option<RunResult>>], bound: f64) -> bool {
    let Some(first) = runs.first() else { return true };
    let base = rep_ops(first);
    if runs.len() == 1 {
        let ops: Vec<f64> = base.iter().flatten().copied().collect();
        return median_ci(&ops).is_some_and(|c| c.within(bound));
    }
    runs[1..].iter().all(|r| median_ci(&paired_ratios(&rep_ops(r), &base)).is_some_and(|c| c.within(bound)))
}

/// Parse a thread list such as `1,2,4,8` (ranges `1-4` allowed).
pub fn parse_threads(s: &str) -> Result<Vec<usize>, BenchError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || BenchError::Usage(format!("bad thread count {part:?}"));
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad())?);
        }
    }
    if out.is_empty() || out.contains(&0) {
        return Err(BenchError::Usage(format!("bad thread list {s:?}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_tail_counts_every_repetition() {
        // Three runs of 1 000 fsyncs, five slow ones in the first: the median run's p99.9
        // misses them, the pool (5 of 3 000, above 0.1 %) does not.
        let ms = Duration::from_millis;
        let mut runs = [Latency::new(), Latency::new(), Latency::new()];
        for (i, h) in runs.iter_mut().enumerate() {
            for k in 0..1000 {
                h.record(if i == 0 && k < 5 { ms(100) } else { ms(1) });
            }
        }
        let alone: Vec<f64> = runs.iter().map(|h| h.percentiles().p999).collect();
        assert!(alone[0] > 99_000.0 && median(&alone) < 1100.0, "per run: {alone:?}");
        let p = pooled(runs.iter()).unwrap();
        assert_eq!(p.count, 3000);
        assert!(p.p99 < 1100.0, "pooled p99: {}", p.p99);
        assert!(p.p999 > 99_000.0, "pooled p99.9: {}", p.p999);
        assert!(pooled(std::iter::empty()).is_none());
    }

    #[test]
    fn parses_targets() {
        let t: TargetSpec = "cjfs:nvme-consumer".parse().unwrap();
        assert!(matches!(t.kind, TargetKind::Emulated(p) if p.name == "nvme-consumer"));
        let t: TargetSpec = "ext4=dir:/mnt/x".parse().unwrap();
        assert_eq!(t.label.as_deref(), Some("ext4"));
        assert_eq!(t.kind, TargetKind::Dir("/mnt/x".into()));
        let t: TargetSpec = "cjfs:file:/tmp".parse().unwrap();
        assert_eq!(t.kind, TargetKind::File("/tmp".into()));
        assert!("cjfs:nope".parse::<TargetSpec>().is_err());
        assert!("x".parse::<TargetSpec>().is_err());
        assert_eq!(parse_threads("1,2-4").unwrap(), vec![1, 2, 3, 4]);
        assert!(parse_threads("0").is_err());
    }

    #[test]
    fn background_bandwidth_as_a_share_of_each_target() {
        let mut cfg = SweepConfig {
            targets: Vec::new(),
            modes: Vec::new(),
            workloads: vec![Workload::FsyncTester],
            threads: vec![1],
            duration: Duration::from_secs(1),
            reps: 1,
            max_reps: 1,
            ci_bound: None,
            seed: 1,
            scale: 1.0,
            dbench_loadfile: PathBuf::new(),
            bg_mb_s: 100.0,
            fsync_delay: Duration::ZERO,
            device_gib: None,
            bg_share: None,
            disk_mb_s: None,
            progress: false,
            command: String::new(),
        };
        let kind = |s: &str| s.parse::<TargetSpec>().unwrap().kind;
        assert_eq!(cfg.bg_mb_s_for(&kind("cjfs:emmc")).unwrap(), 100.0, "no share: the absolute figure");
        cfg.bg_share = Some(0.6);
        assert_eq!(cfg.bg_mb_s_for(&kind("cjfs:emmc")).unwrap(), 90.0);
        assert_eq!(cfg.bg_mb_s_for(&kind("cjfs:sata-ssd")).unwrap(), 300.0);
        assert!(cfg.bg_mb_s_for(&kind("cjfs:ramdisk")).is_err(), "unlimited bandwidth has no share");
        assert!(cfg.bg_mb_s_for(&kind("dir:/mnt")).is_err(), "a dir target needs the disk's figure");
        cfg.disk_mb_s = Some(400.0);
        assert_eq!(cfg.bg_mb_s_for(&kind("dir:/mnt")).unwrap(), 240.0);
    }
}
