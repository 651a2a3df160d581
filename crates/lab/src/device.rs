//! `cjfs bench device`: measured 4 KiB QD1 write latency, flush latency and write + flush
//! latency of an emulated preset or a file device, so the presets can be checked against
//! the figures they claim (and a real disk against them).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cjfs_blockdev::{
    BlockDevice, Device, EmulatedSsd, FileDevice, FileDeviceOptions, WriteTag, block_from_slice,
};
use serde::Serialize;

use crate::bench::{TargetKind, TargetSpec, preset_line};
use crate::hist::{Latency, Percentiles};
use crate::machine::{Machine, disk_of};
use crate::workloads::data_pool;

/// What was measured.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// Machine.
    pub machine: Machine,
    /// Device description (and a preset's claimed figures).
    pub device: String,
    /// 4 KiB write, submitted and waited for alone (QD1), µs.
    pub write: Percentiles,
    /// Flush right after one 4 KiB write completed, µs.
    pub flush: Percentiles,
    /// 4 KiB write followed by a flush, µs.
    pub write_flush: Percentiles,
    /// What the preset claims for a 4 KiB write and for a flush of 4 KiB, µs (emulated only).
    pub claimed_write_us: Option<f64>,
    /// Claimed flush of 4 KiB dirty data, µs (emulated only).
    pub claimed_flush_us: Option<f64>,
}

/// Errors of the device check.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Not a cjfs target.
    #[error("device check needs cjfs:PRESET or cjfs:file:PATH, not {0}")]
    NotDevice(String),
    /// The device failed.
    #[error("{0}")]
    Dev(#[from] cjfs_blockdev::DevError),
    /// I/O.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Measure `iterations` samples of each figure on the target's device.
pub fn run(target: &TargetSpec, iterations: usize) -> Result<DeviceReport, DeviceError> {
    let blocks = 64 * 1024u64;
    let mut _tmp = None;
    let (dev, desc, claims, workdir): (Device, String, Option<(f64, f64)>, PathBuf) = match &target.kind {
        TargetKind::Emulated(p) => {
            let xfer = if p.bandwidth_mb_s == 0 { 0.0 } else { 4096.0 / p.bandwidth_mb_s as f64 };
            let per_mb = if p.volatile_cache {
                p.flush_per_dirty_mb_us as f64 * 4096.0 / (1 << 20) as f64
            } else {
                0.0
            };
            (
                Arc::new(EmulatedSsd::new(*p, blocks)),
                preset_line(p),
                Some((p.write_latency_us as f64 + xfer, p.flush_base_us as f64 + per_mb)),
                std::env::temp_dir(),
            )
        }
        TargetKind::File(p) => {
            let path = if p.is_dir() {
                let t = tempfile::Builder::new().prefix("cjfs-device-").tempdir_in(p)?;
                let path = t.path().join("dev.img");
                _tmp = Some(t);
                path
            } else {
                p.clone()
            };
            let opts = FileDeviceOptions { create_size: Some(blocks * 4096), ..Default::default() };
            let dev = FileDevice::open(&path, opts)?;
            // Write the area once so the host file system's block allocation is not measured.
            let z = block_from_slice(&[0u8; 4096]);
            for b in 0..1024 {
                dev.write_block(b, z.clone(), WriteTag::default())?;
            }
            dev.flush()?;
            (Arc::new(dev), format!("file device {} ({})", path.display(), disk_of(p)), None, p.clone())
        }
        TargetKind::Dir(_) => return Err(DeviceError::NotDevice(target.to_string())),
    };
    let machine = Machine::detect(&workdir);
    let buf = block_from_slice(&data_pool()[..4096]);
    let (mut w, mut f, mut wf) = (Latency::new(), Latency::new(), Latency::new());
    for i in 0..iterations as u64 {
        let b = i % 1024;
        let s = Instant::now();
        dev.write_block(b, buf.clone(), WriteTag::default())?;
        w.record(s.elapsed());
        let s = Instant::now();
        dev.flush()?;
        f.record(s.elapsed());
        let s = Instant::now();
        dev.write_block(b, buf.clone(), WriteTag::default())?;
        dev.flush()?;
        wf.record(s.elapsed());
    }
    Ok(DeviceReport {
        machine,
        device: desc,
        write: w.percentiles(),
        flush: f.percentiles(),
        write_flush: wf.percentiles(),
        claimed_write_us: claims.map(|c| c.0),
        claimed_flush_us: claims.map(|c| c.1),
    })
}

/// Print a report.
pub fn print(r: &DeviceReport) {
    println!("{}", r.machine.line());
    println!("device: {}", r.device);
    println!("{} samples each, QD1\n", r.write.count);
    println!("{:<34} {:>9} {:>9} {:>9} {:>9} {:>10}", "latency (µs)", "mean", "p50", "p95", "p99", "claimed");
    let claim = |c: Option<f64>| c.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into());
    let both = match (r.claimed_write_us, r.claimed_flush_us) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    for (name, p, c) in [
        ("4 KiB write", &r.write, claim(r.claimed_write_us)),
        ("flush (4 KiB dirty)", &r.flush, claim(r.claimed_flush_us)),
        ("4 KiB write + flush", &r.write_flush, claim(both)),
    ] {
        println!("{name:<34} {:>9.1} {:>9.0} {:>9.0} {:>9.0} {:>10}", p.mean, p.p50, p.p95, p.p99, c);
    }
}
