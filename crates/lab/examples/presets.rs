//! Quick comparison of journal presets on an emulated device (diagnostic).
use std::sync::Arc;
use std::time::Duration;
fn main() {
    let threads: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let presets: Vec<String> = std::env::args().skip(2).collect();
    let presets =
        if presets.is_empty() { vec!["jbd2".into(), "barrierfs".into(), "cjfs".into()] } else { presets };
    for p in presets {
        let ssd = cjfs_blockdev::EmulatedSsd::new(
            cjfs_blockdev::SsdPreset::by_name("nvme-consumer").unwrap(),
            1 << 20,
        );
        let dev: cjfs_blockdev::Device = Arc::new(ssd);
        let mo = cjfs_fs::MkfsOptions { assume_zeroed: true, ..Default::default() };
        cjfs_fs::mkfs(&*dev, &mo).unwrap();
        let fs = cjfs_fs::Fs::open(
            dev,
            cjfs_fs::MountOptions {
                journal: cjfs_journal::JournalConfig::preset(&p).unwrap(),
                ..Default::default()
            },
        )
        .unwrap();
        let t = Arc::new(cjfs_lab::CjfsTarget::new(fs, p.clone()));
        let cfg = cjfs_lab::workloads::varmail::VarmailConfig::shared(threads, Duration::from_secs(4), 1);
        cjfs_lab::workloads::varmail::setup(&*t, &cfg).unwrap();
        let r = cjfs_lab::workloads::varmail::run(t.clone(), &cfg).unwrap();
        let j = r.journal.unwrap();
        let d = r.device.unwrap();
        println!(
            "{p:>20} {threads}thr cpu {:.1}s: {:>8.0} ops/s fsync p50 {:>6.0}us startwait {:.2}s confwait {:.2}s | tx {} h/tx {:.1} confl/tx {:.3} fl/fsync {:.2} tx/flush {:.2} coalesce {} inflight {:.2} qd {:.1}/{}",
            r.cpu_secs,
            r.ops_per_sec,
            r.fsync_latency.p50,
            j.start_wait_ns as f64 / 1e9,
            j.conflict_wait_ns as f64 / 1e9,
            j.transactions,
            j.handles_per_tx(),
            j.conflicts_per_tx(),
            j.flushes_per_fsync(),
            j.tx_per_flush_group(),
            j.coalesce_retries,
            j.mean_in_flight(),
            d.inflight_mean,
            d.inflight_max
        );
    }
}
