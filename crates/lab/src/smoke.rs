//! `cjfs bench smoke`: the quickest honest look at cjfs on this machine's disk.
//!
//! (a) single-thread fsync latency on the file device — a 4 KiB append + fsync to one file
//! (the raw side's operation, through the file system) and a create + 4 KiB write + fsync
//! — interleaved with a raw 4 KiB pwrite + fdatasync on the same disk, so all see the same
//! conditions;
//! (b) 16-thread varmail-shared throughput in-process on the file device.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{Fs, MkfsOptions, MountOptions, ROOT_INO, mkfs};
use serde::Serialize;

use crate::hist::{Latency, Percentiles};
use crate::machine::Machine;
use crate::target::{CjfsTarget, Target};
use crate::workloads::RunResult;
use crate::workloads::varmail::{self, VarmailConfig};

/// Smoke benchmark settings.
#[derive(Debug, Clone)]
pub struct SmokeConfig {
    /// Directory for the image and the raw file (must be on the disk to measure).
    pub dir: PathBuf,
    /// fsync samples per side.
    pub iterations: usize,
    /// varmail threads.
    pub threads: usize,
    /// varmail run time.
    pub duration: Duration,
    /// Seed.
    pub seed: u64,
    /// Mount options (a resolved preset, see `cjfs_fs::preset`).
    pub options: MountOptions,
}

/// What the smoke benchmark measured.
#[derive(Debug, Clone, Serialize)]
pub struct SmokeReport {
    /// Machine.
    pub machine: Machine,
    /// cjfs 4 KiB append + fsync to one file, µs.
    pub cjfs_append_fsync: Percentiles,
    /// cjfs create + 4 KiB write + fsync, µs.
    pub cjfs_fsync: Percentiles,
    /// Raw 4 KiB pwrite + fdatasync on the same disk, µs.
    pub raw_fsync: Percentiles,
    /// The bare JBD2 commit pattern on the same disk, µs: data + log pwrites, fdatasync,
    /// commit-block pwrite, fdatasync — the floor any JBD2-format fsync pays.
    pub jbd2_floor: Percentiles,
    /// cjfs append + fsync p50 / raw p50 (the same operation on both sides).
    pub ratio_p50: f64,
    /// cjfs create + write + fsync p50 / raw p50.
    pub create_ratio_p50: f64,
    /// varmail-shared result.
    pub varmail: RunResult,
    /// Journal preset.
    pub journal: String,
    /// Flushes per fsync in part (a) (both cjfs measurements).
    pub flushes_per_fsync: f64,
    /// Mean journal commit latency (lock to durable) in part (a), µs.
    pub commit_us: f64,
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Allocate `len` bytes for real by writing zeros: neither side then pays the host file
/// system's block allocation or unwritten-extent conversion inside its fdatasync.
fn preallocate(path: &Path, len: u64) -> std::io::Result<()> {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], off)?;
        off += n as u64;
    }
    f.sync_all()
}

fn mount_image(path: &Path, options: &MountOptions) -> std::io::Result<Fs> {
    let dev: Device = Arc::new(FileDevice::open(path, FileDeviceOptions::default()).map_err(io_err)?);
    mkfs(&*dev, &MkfsOptions::default()).map_err(io_err)?;
    Fs::open(dev, options.clone()).map_err(io_err)
}

/// Run the smoke benchmark.
pub fn run(cfg: &SmokeConfig) -> std::io::Result<SmokeReport> {
    let work = tempfile::Builder::new().prefix("cjfs-smoke-").tempdir_in(&cfg.dir)?;
    let machine = Machine::detect(work.path());
    // (a) fsync latency, interleaved with the raw baseline.
    let img = work.path().join("smoke.img");
    preallocate(&img, 512 << 20)?;
    let fs = mount_image(&img, &cfg.options)?;
    let raw_path = work.path().join("raw.bin");
    preallocate(&raw_path, (cfg.iterations as u64 + 1) * 4096 * 8)?;
    let raw = OpenOptions::new().read(true).write(true).open(&raw_path)?;
    let block = vec![0x5Au8; 4096];
    let (mut ours, mut theirs, mut floor) = (Latency::new(), Latency::new(), Latency::new());
    let mut append = Latency::new();
    let log_file = fs.create(ROOT_INO, b"log", 0o644, 0, 0).map_err(io_err)?.ino;
    let log = vec![0xA5u8; 5 * 4096];
    let floor_base = (cfg.iterations as u64 + 1) * 4096;
    let j0 = fs.journal().stats();
    for i in 0..cfg.iterations {
        let s = Instant::now();
        fs.write(log_file, i as u64 * 4096, &block).map_err(io_err)?;
        fs.fsync(log_file, false).map_err(io_err)?;
        append.record(s.elapsed());
        let s = Instant::now();
        let a = fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0).map_err(io_err)?;
        fs.write(a.ino, 0, &block).map_err(io_err)?;
        fs.fsync(a.ino, false).map_err(io_err)?;
        ours.record(s.elapsed());
        let s = Instant::now();
        raw.write_all_at(&block, i as u64 * 4096)?;
        raw.sync_data()?;
        theirs.record(s.elapsed());
        let s = Instant::now();
        let i = i as u64;
        raw.write_all_at(&block, floor_base + i * 4096)?;
        raw.write_all_at(&log, floor_base * 2 + i * 6 * 4096)?;
        raw.sync_data()?;
        raw.write_all_at(&block, floor_base * 2 + (i * 6 + 5) * 4096)?;
        raw.sync_data()?;
        floor.record(s.elapsed());
    }
    let jd = fs.journal().stats().delta(&j0);
    fs.unmount().map_err(io_err)?;
    let (cp, rp, ap) = (ours.percentiles(), theirs.percentiles(), append.percentiles());
    // (b) varmail-shared.
    let img2 = work.path().join("varmail.img");
    preallocate(&img2, 2 << 30)?;
    let fs = mount_image(&img2, &cfg.options)?;
    let target = Arc::new(CjfsTarget::new(fs, format!("cjfs:file ({})", cfg.options.journal.name)));
    let vcfg = VarmailConfig::shared(cfg.threads, cfg.duration, cfg.seed);
    varmail::setup(&*target, &vcfg)?;
    let res = varmail::run(target.clone() as Arc<dyn Target>, &vcfg)?;
    if let Ok(t) = Arc::try_unwrap(target) {
        t.unmount().map_err(io_err)?;
    }
    Ok(SmokeReport {
        machine,
        cjfs_append_fsync: ap,
        cjfs_fsync: cp,
        raw_fsync: rp,
        jbd2_floor: floor.percentiles(),
        ratio_p50: ratio(ap.p50, rp.p50),
        create_ratio_p50: ratio(cp.p50, rp.p50),
        varmail: res,
        journal: cfg.options.journal.name.clone(),
        flushes_per_fsync: jd.flushes as f64 / (2 * cfg.iterations.max(1)) as f64,
        commit_us: jd.commit_us_per_tx(),
    })
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Print a report as a table.
pub fn print(r: &SmokeReport, cfg: &SmokeConfig) {
    println!("{}", r.machine.line());
    println!(
        "device: file (image in {}), journal preset {}, seed {}",
        cfg.dir.display(),
        r.journal,
        cfg.seed
    );
    println!();
    println!("(a) single thread, {} samples each, interleaved", r.cjfs_fsync.count);
    println!("{:<44} {:>10} {:>10} {:>10}", "latency (µs)", "p50", "p95", "p99");
    let row = |label: &str, p: &Percentiles| {
        println!("{label:<44} {:>10.0} {:>10.0} {:>10.0}", p.p50, p.p95, p.p99);
    };
    row("cjfs 4 KiB append + fsync", &r.cjfs_append_fsync);
    row("cjfs create + 4 KiB write + fsync", &r.cjfs_fsync);
    row("raw 4 KiB pwrite + fdatasync (same disk)", &r.raw_fsync);
    row("raw JBD2 commit pattern (2 flushes, floor)", &r.jbd2_floor);
    println!(
        "ratio cjfs/raw at p50: append + fsync {:.2}x, create + write + fsync {:.2}x   \
         (JBD2 floor {:.2}x; device flushes per fsync: {:.2})",
        r.ratio_p50,
        r.create_ratio_p50,
        ratio(r.jbd2_floor.p50, r.raw_fsync.p50),
        r.flushes_per_fsync
    );
    println!();
    let v = &r.varmail;
    println!("(b) {} in-process, {} threads, {:.1} s", v.workload, v.threads, v.secs);
    println!(
        "throughput: {:.0} ops/s   fsync latency p50 {:.0} µs p99 {:.0} µs   cpu {:.1} s",
        v.ops_per_sec, v.fsync_latency.p50, v.fsync_latency.p99, v.cpu_secs
    );
    if let Some(j) = &v.journal {
        println!(
            "journal: {} tx, {:.1} handles/tx, {:.1} blocks/tx, {:.2} conflicts/tx, {:.2} flushes/fsync",
            j.transactions,
            j.handles_per_tx(),
            j.blocks_per_tx(),
            j.conflicts_per_tx(),
            j.flushes_per_fsync()
        );
    }
}
