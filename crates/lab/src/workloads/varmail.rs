//! filebench varmail: a mail server's flow over a shared file set.
//!
//! Per loop: delete a file; create a file, append (mean 16 KiB), fsync, close; open a file,
//! read it whole, append, fsync, close; open a file, read it whole, close — 13 flowops.
//! `varmail-shared`: 1000 files (gamma-distributed size, mean 16 KiB) in one directory used
//! by every thread. `varmail-split`: each thread its own directory of 100 files.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma};

use super::{RunResult, cpu_time, data_pool};
use crate::hist::Latency;
use crate::target::Target;

/// Parameters (filebench varmail defaults).
#[derive(Debug, Clone)]
pub struct VarmailConfig {
    /// Files in the shared set (shared) or per thread (split).
    pub files: usize,
    /// Mean file size at setup.
    pub mean_file_size: f64,
    /// Mean append size.
    pub mean_append: f64,
    /// Worker threads.
    pub threads: usize,
    /// Run time.
    pub duration: Duration,
    /// Each thread its own directory.
    pub split: bool,
    /// RNG seed.
    pub seed: u64,
}

impl VarmailConfig {
    /// varmail-shared with `threads` threads.
    pub fn shared(threads: usize, duration: Duration, seed: u64) -> Self {
        VarmailConfig {
            files: 1000,
            mean_file_size: 16384.0,
            mean_append: 16384.0,
            threads,
            duration,
            split: false,
            seed,
        }
    }
    /// varmail-split with `threads` threads.
    pub fn split(threads: usize, duration: Duration, seed: u64) -> Self {
        VarmailConfig { files: 100, split: true, ..Self::shared(threads, duration, seed) }
    }
}

struct Slot {
    exists: bool,
}

struct FileSet {
    dir: String,
    slots: Vec<Mutex<Slot>>,
}

impl FileSet {
    fn path(&self, i: usize) -> String {
        format!("{}/f{i:05}", self.dir)
    }
}

fn gamma(mean: f64) -> Gamma<f64> {
    match Gamma::new(1.5, mean / 1.5) {
        Ok(g) => g,
        Err(_) => unreachable!("positive parameters"),
    }
}

fn write_size(rng: &mut StdRng, g: &Gamma<f64>) -> usize {
    (g.sample(rng) as usize).clamp(1, 1 << 20)
}

/// Create the directories and files.
pub fn setup(t: &dyn Target, cfg: &VarmailConfig) -> io::Result<()> {
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0xF11E);
    let g = gamma(cfg.mean_file_size);
    let _ = t.mkdir("varmail");
    let sets = if cfg.split { cfg.threads } else { 1 };
    for s in 0..sets {
        let dir = format!("varmail/d{s}");
        let _ = t.mkdir(&dir);
        for i in 0..cfg.files {
            let fh = t.create(&format!("{dir}/f{i:05}"))?;
            let n = write_size(&mut rng, &g);
            t.write_at(fh, 0, &data_pool()[..n])?;
            t.close(fh)?;
        }
    }
    Ok(())
}

fn read_whole(t: &dyn Target, fh: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut off = 0u64;
    loop {
        let n = t.read_at(fh, off, buf)?;
        if n == 0 {
            return Ok(());
        }
        off += n as u64;
    }
}

/// Pick a slot whose `exists` equals `want`, lock it.
fn pick<'a>(
    set: &'a FileSet,
    rng: &mut StdRng,
    want: bool,
) -> Option<(usize, parking_lot::MutexGuard<'a, Slot>)> {
    for _ in 0..64 {
        let i = rng.gen_range(0..set.slots.len());
        if let Some(g) = set.slots[i].try_lock() {
            if g.exists == want {
                return Some((i, g));
            }
        }
    }
    None
}

/// Run the flow on `threads` threads for the configured time.
pub fn run(t: Arc<dyn Target>, cfg: &VarmailConfig) -> io::Result<RunResult> {
    let sets: Vec<Arc<FileSet>> = (0..if cfg.split { cfg.threads } else { 1 })
        .map(|s| {
            Arc::new(FileSet {
                dir: format!("varmail/d{s}"),
                slots: (0..cfg.files).map(|_| Mutex::new(Slot { exists: true })).collect(),
            })
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let j0 = t.journal_stats();
    let d0 = t.device_stats();
    let cpu0 = cpu_time();
    let start = Instant::now();
    let mut handles = Vec::new();
    for k in 0..cfg.threads {
        let t = t.clone();
        let set = sets[if cfg.split { k } else { 0 }].clone();
        let stop = stop.clone();
        let ops = ops.clone();
        let cfg = cfg.clone();
        handles.push(std::thread::spawn(move || -> io::Result<(Latency, Latency)> {
            let mut rng = StdRng::seed_from_u64(cfg.seed.wrapping_add(k as u64 * 7919));
            let g = gamma(cfg.mean_append);
            let mut buf = vec![0u8; 1 << 20];
            let mut lat = Latency::new();
            let mut flat = Latency::new();
            let timed = |lat: &mut Latency, f: &mut dyn FnMut() -> io::Result<()>| -> io::Result<()> {
                let s = Instant::now();
                f()?;
                lat.record(s.elapsed());
                ops.fetch_add(1, Ordering::Relaxed);
                Ok(())
            };
            while !stop.load(Ordering::Relaxed) {
                // deletefile
                if let Some((i, mut s)) = pick(&set, &mut rng, true) {
                    timed(&mut lat, &mut || t.unlink(&set.path(i)))?;
                    s.exists = false;
                }
                // createfile, append, fsync, close
                if let Some((i, mut s)) = pick(&set, &mut rng, false) {
                    let mut fh = 0;
                    timed(&mut lat, &mut || {
                        fh = t.create(&set.path(i))?;
                        Ok(())
                    })?;
                    s.exists = true;
                    let n = write_size(&mut rng, &g);
                    timed(&mut lat, &mut || t.write_at(fh, 0, &data_pool()[..n]))?;
                    let st = Instant::now();
                    timed(&mut lat, &mut || t.fsync(fh, false))?;
                    flat.record(st.elapsed());
                    timed(&mut lat, &mut || t.close(fh))?;
                }
                // open, read whole, append, fsync, close
                if let Some((i, _s)) = pick(&set, &mut rng, true) {
                    let mut fh = 0;
                    timed(&mut lat, &mut || {
                        fh = t.open(&set.path(i))?;
                        Ok(())
                    })?;
                    timed(&mut lat, &mut || read_whole(&*t, fh, &mut buf))?;
                    let n = write_size(&mut rng, &g);
                    let size = t.size(fh)?;
                    timed(&mut lat, &mut || t.write_at(fh, size, &data_pool()[..n]))?;
                    let st = Instant::now();
                    timed(&mut lat, &mut || t.fsync(fh, false))?;
                    flat.record(st.elapsed());
                    timed(&mut lat, &mut || t.close(fh))?;
                }
                // open, read whole, close
                if let Some((i, _s)) = pick(&set, &mut rng, true) {
                    let mut fh = 0;
                    timed(&mut lat, &mut || {
                        fh = t.open(&set.path(i))?;
                        Ok(())
                    })?;
                    timed(&mut lat, &mut || read_whole(&*t, fh, &mut buf))?;
                    timed(&mut lat, &mut || t.close(fh))?;
                }
            }
            Ok((lat, flat))
        }));
    }
    std::thread::sleep(cfg.duration);
    stop.store(true, Ordering::Relaxed);
    let mut lat = Latency::new();
    let mut flat = Latency::new();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok((l, f))) => {
                lat.merge(&l);
                flat.merge(&f);
            }
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => first_err = first_err.or(Some(io::Error::other("varmail worker panicked"))),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let secs = start.elapsed().as_secs_f64();
    let n = ops.load(Ordering::Relaxed);
    let journal = match (j0, t.journal_stats()) {
        (Some(a), Some(b)) => Some(b.delta(&a)),
        _ => None,
    };
    let device = match (d0, t.device_stats()) {
        (Some(a), Some(b)) => Some(b.delta(&a)),
        _ => None,
    };
    Ok(RunResult {
        workload: if cfg.split { "varmail-split".into() } else { "varmail-shared".into() },
        threads: cfg.threads,
        ops: n,
        secs,
        ops_per_sec: n as f64 / secs,
        op_latency: lat.percentiles(),
        fsync_latency: flat.percentiles(),
        cpu_secs: (cpu_time() - cpu0).as_secs_f64(),
        journal,
        device,
    })
}
