//! Quick comparison of journal presets on an emulated device (diagnostic): varmail-shared
//! throughput, journal figures and where each thread's time goes, per target call.
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cjfs_lab::{Fh, Target};

/// Target wrapper summing the wall time spent in each call.
struct Timed {
    inner: Arc<cjfs_lab::CjfsTarget>,
    ns: [AtomicU64; 8],
    n: [AtomicU64; 8],
}

const NAMES: [&str; 8] = ["create", "open", "write", "read", "fsync", "close", "unlink", "other"];

impl Timed {
    fn t<R>(&self, i: usize, f: impl FnOnce() -> R) -> R {
        let s = Instant::now();
        let r = f();
        self.ns[i].fetch_add(s.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.n[i].fetch_add(1, Ordering::Relaxed);
        r
    }
}

impl Target for Timed {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn mkdir(&self, p: &str) -> io::Result<()> {
        self.t(7, || self.inner.mkdir(p))
    }
    fn create(&self, p: &str) -> io::Result<Fh> {
        self.t(0, || self.inner.create(p))
    }
    fn open(&self, p: &str) -> io::Result<Fh> {
        self.t(1, || self.inner.open(p))
    }
    fn write_at(&self, fh: Fh, off: u64, d: &[u8]) -> io::Result<()> {
        self.t(2, || self.inner.write_at(fh, off, d))
    }
    fn read_at(&self, fh: Fh, off: u64, b: &mut [u8]) -> io::Result<usize> {
        self.t(3, || self.inner.read_at(fh, off, b))
    }
    fn size(&self, fh: Fh) -> io::Result<u64> {
        self.t(7, || self.inner.size(fh))
    }
    fn truncate(&self, fh: Fh, s: u64) -> io::Result<()> {
        self.t(7, || self.inner.truncate(fh, s))
    }
    fn fsync(&self, fh: Fh, d: bool) -> io::Result<()> {
        self.t(4, || self.inner.fsync(fh, d))
    }
    fn close(&self, fh: Fh) -> io::Result<()> {
        self.t(5, || self.inner.close(fh))
    }
    fn unlink(&self, p: &str) -> io::Result<()> {
        self.t(6, || self.inner.unlink(p))
    }
    fn rmdir(&self, p: &str) -> io::Result<()> {
        self.t(7, || self.inner.rmdir(p))
    }
    fn rename(&self, a: &str, b: &str) -> io::Result<()> {
        self.t(7, || self.inner.rename(a, b))
    }
    fn fsync_dir(&self, p: &str) -> io::Result<()> {
        self.t(4, || self.inner.fsync_dir(p))
    }
    fn exists(&self, p: &str) -> bool {
        self.inner.exists(p)
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn journal_stats(&self) -> Option<cjfs_journal::StatsSnapshot> {
        self.inner.journal_stats()
    }
    fn device_stats(&self) -> Option<cjfs_blockdev::DeviceStats> {
        self.inner.device_stats()
    }
}

fn main() {
    let threads: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let presets: Vec<String> = std::env::args().skip(2).collect();
    let presets =
        if presets.is_empty() { vec!["jbd2".into(), "barrierfs".into(), "cjfs".into()] } else { presets };
    for p in presets {
        let ssd = cjfs_blockdev::EmulatedSsd::new(
            cjfs_blockdev::SsdPreset::by_name("nvme-consumer").expect("preset"),
            1 << 20,
        );
        let dev: cjfs_blockdev::Device = Arc::new(ssd);
        let mo = cjfs_fs::MkfsOptions { assume_zeroed: true, ..Default::default() };
        cjfs_fs::mkfs(&*dev, &mo).expect("mkfs");
        let fs = cjfs_fs::Fs::open(dev, cjfs_fs::preset::resolve(&p).expect("preset")).expect("open");
        let inner = Arc::new(cjfs_lab::CjfsTarget::new(fs, p.clone()));
        let t = Arc::new(Timed { inner, ns: Default::default(), n: Default::default() });
        let cfg = cjfs_lab::workloads::varmail::VarmailConfig::shared(threads, Duration::from_secs(4), 1);
        cjfs_lab::workloads::varmail::setup(&*t, &cfg).expect("setup");
        for (ns, n) in t.ns.iter().zip(&t.n) {
            ns.store(0, Ordering::Relaxed);
            n.store(0, Ordering::Relaxed);
        }
        let before = thread_cpu();
        let r = cjfs_lab::workloads::varmail::run(t.clone(), &cfg).expect("run");
        let after = thread_cpu();
        let j = r.journal.expect("journal stats");
        let d = r.device.expect("device stats");
        let used = |name: &str| after.get(name).unwrap_or(&0.0) - before.get(name).unwrap_or(&0.0);
        let threads_cpu: Vec<String> =
            after.keys().map(|k| format!("{k} {:.2}s", used(k))).filter(|s| !s.ends_with(" 0.00s")).collect();
        println!("        thread cpu: {}", threads_cpu.join(", "));
        println!(
            "{p:>20} {threads}thr cpu {:.1}s: {:>8.0} ops/s fsync p50 {:>6.0}us mean {:>6.0}us p99 {:>6.0}us startwait {:.2}s confwait {:.2}s handle {:.0}us locked {:.0}us commit {:.0}us (queue {:.0}us flush {:.0}us) | tx {} h/tx {:.1} confl/tx {:.3} fl/fsync {:.2} tx/flush {:.2} coalesce {} inflight {:.2} qd {:.1}/{}",
            r.cpu_secs,
            r.ops_per_sec,
            r.fsync_latency.p50,
            r.fsync_latency.mean,
            r.fsync_latency.p99,
            j.start_wait_ns as f64 / 1e9,
            j.conflict_wait_ns as f64 / 1e9,
            j.handle_us_mean(),
            j.locked_us_per_tx(),
            j.commit_us_per_tx(),
            j.flush_queue_ns as f64 / j.transactions.max(1) as f64 / 1e3,
            j.flush_ns as f64 / j.flushes.max(1) as f64 / 1e3,
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
        let total: u64 = t.ns.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        let mut line = String::from("        time share:");
        for (i, name) in NAMES.iter().enumerate() {
            let ns = t.ns[i].load(Ordering::Relaxed);
            let n = t.n[i].load(Ordering::Relaxed).max(1);
            line += &format!(
                " {} {:.0}% ({:.0}us)",
                name,
                100.0 * ns as f64 / total.max(1) as f64,
                ns as f64 / n as f64 / 1e3
            );
        }
        println!("{line}");
    }
}

/// CPU seconds used so far by this process's threads, summed by thread name.
fn thread_cpu() -> std::collections::BTreeMap<String, f64> {
    let mut m = std::collections::BTreeMap::new();
    let tick = 100.0; // USER_HZ on Linux
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return m };
    for e in dir.flatten() {
        let p = e.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default().trim().to_string();
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: utime and stime are the 12th and 13th.
        let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let t = f.get(11).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
        *m.entry(name).or_insert(0.0) += t / tick;
    }
    m
}
