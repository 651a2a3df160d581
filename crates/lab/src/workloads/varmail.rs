//! filebench varmail: a mail server's flow over a shared file set.
//!
//! Per loop: delete a file; create a file, append (mean 16 KiB), fsync, close; open a file,
//! read it whole, append, fsync, close; open a file, read it whole, close — 13 flowops.
//! `varmail-shared`: 1000 files (gamma-distributed size, mean 16 KiB) in one directory used
//! by every thread. `varmail-split`: each thread its own directory of 100 files.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use rand_distr::{Distribution, Gamma};

use super::{RunResult, data_pool, read_whole, run_workers};
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

/// Pick a slot whose `exists` equals `want`, lock it.
fn pick<'a>(
    set: &'a FileSet,
    rng: &mut StdRng,
    want: bool,
) -> Option<(usize, parking_lot::MutexGuard<'a, Slot>)> {
    for _ in 0..64 {
        let i = rng.gen_range(0..set.slots.len());
        if let Some(g) = set.slots[i].try_lock()
            && g.exists == want
        {
            return Some((i, g));
        }
    }
    None
}

/// Run the flow on `threads` threads for the configured time.
pub fn run(t: Arc<dyn Target>, cfg: &VarmailConfig) -> io::Result<RunResult> {
    run_on(&*t, cfg)
}

/// [`run`] on a borrowed target.
pub fn run_on(t: &dyn Target, cfg: &VarmailConfig) -> io::Result<RunResult> {
    let sets: Vec<FileSet> = (0..if cfg.split { cfg.threads } else { 1 })
        .map(|s| FileSet {
            dir: format!("varmail/d{s}"),
            slots: (0..cfg.files).map(|_| Mutex::new(Slot { exists: true })).collect(),
        })
        .collect();
    let name = if cfg.split { "varmail-split" } else { "varmail-shared" };
    let g = gamma(cfg.mean_append);
    run_workers(t, name, cfg.threads, cfg.duration, cfg.seed, |w| {
        let set = &sets[if cfg.split { w.id } else { 0 }];
        let mut buf = vec![0u8; 1 << 20];
        while w.running() {
            // deletefile
            if let Some((i, mut s)) = pick(set, &mut w.rng, true) {
                w.op(|| t.unlink(&set.path(i)))?;
                s.exists = false;
            }
            // createfile, append, fsync, close
            if let Some((i, mut s)) = pick(set, &mut w.rng, false) {
                let fh = w.op(|| t.create(&set.path(i)))?;
                s.exists = true;
                let n = write_size(&mut w.rng, &g);
                w.op(|| t.write_at(fh, 0, &data_pool()[..n]))?;
                w.bytes += n as u64;
                w.fsync_op(|| t.fsync(fh, false))?;
                w.op(|| t.close(fh))?;
            }
            // open, read whole, append, fsync, close
            if let Some((i, _s)) = pick(set, &mut w.rng, true) {
                let fh = w.op(|| t.open(&set.path(i)))?;
                let r = w.op(|| read_whole(t, fh, &mut buf))?;
                let n = write_size(&mut w.rng, &g);
                let size = t.size(fh)?;
                w.op(|| t.write_at(fh, size, &data_pool()[..n]))?;
                w.bytes += r + n as u64;
                w.fsync_op(|| t.fsync(fh, false))?;
                w.op(|| t.close(fh))?;
            }
            // open, read whole, close
            if let Some((i, _s)) = pick(set, &mut w.rng, true) {
                let fh = w.op(|| t.open(&set.path(i)))?;
                let r = w.op(|| read_whole(t, fh, &mut buf))?;
                w.bytes += r;
                w.op(|| t.close(fh))?;
            }
        }
        Ok(())
    })
}
