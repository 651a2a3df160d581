//! filebench fileserver with its defaults (no fsync).
//!
//! `fileserver.f`: 10,000 files (gamma-distributed size, mean 128 KiB, gamma 1.5) in a
//! tree of mean directory width 20, 80% preallocated; per loop each thread does
//! createfile, writewholefile (1 MiB I/Os), closefile, openfile, appendfilerand (up to
//! 16 KiB), closefile, openfile, readwholefile (1 MiB I/Os), closefile, deletefile, statfile
//! — 11 flowops. filebench's default is 50 threads; the lab sweeps the thread count.
//! [`Params::scale`] scales the number of files.

use std::io;

use parking_lot::Mutex;
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Gamma};

use super::{Params, RunResult, read_whole, run_workers, write_pool};
use crate::target::Target;

/// Files in the set (filebench default).
pub const NFILES: usize = 10_000;
/// Mean directory width.
pub const DIR_WIDTH: usize = 20;
/// Mean file size.
pub const MEAN_FILE: f64 = 131_072.0;
/// I/O size of whole-file writes and reads.
pub const IOSIZE: usize = 1 << 20;
/// Largest random append.
pub const APPEND: usize = 16 * 1024;

fn path(i: usize) -> String {
    let d = i / DIR_WIDTH;
    format!("fileserver/d{:03}/d{:02}/f{i:06}", d / DIR_WIDTH, d % DIR_WIDTH)
}

fn size(rng: &mut StdRng) -> u64 {
    let g = match Gamma::new(1.5, MEAN_FILE / 1.5) {
        Ok(g) => g,
        Err(_) => unreachable!("positive parameters"),
    };
    (g.sample(rng) as u64).clamp(1, 16 << 20)
}

/// Build the file set and run the flow.
pub fn run(t: &dyn Target, p: &Params) -> io::Result<RunResult> {
    let n = p.scaled(NFILES, 2 * DIR_WIDTH);
    let mut rng = StdRng::seed_from_u64(p.seed ^ 0xF5);
    let _ = t.mkdir("fileserver");
    let dirs = n.div_ceil(DIR_WIDTH);
    for d in 0..dirs.div_ceil(DIR_WIDTH) {
        t.mkdir(&format!("fileserver/d{d:03}"))?;
    }
    for d in 0..dirs {
        t.mkdir(&format!("fileserver/d{:03}/d{:02}", d / DIR_WIDTH, d % DIR_WIDTH))?;
    }
    let mut exists = vec![false; n];
    for (i, e) in exists.iter_mut().enumerate() {
        if rng.gen_bool(0.8) {
            let fh = t.create(&path(i))?;
            write_pool(t, fh, 0, size(&mut rng))?;
            t.close(fh)?;
            *e = true;
        }
    }
    t.sync_all()?;
    let slots: Vec<Mutex<bool>> = exists.into_iter().map(Mutex::new).collect();
    let pick = |rng: &mut StdRng, want: bool| {
        for _ in 0..256 {
            let i = rng.gen_range(0..slots.len());
            if let Some(g) = slots[i].try_lock()
                && *g == want
            {
                return Some((i, g));
            }
        }
        None
    };
    run_workers(t, "fileserver", p.threads, p.duration, p.seed, |w| {
        let mut buf = vec![0u8; IOSIZE];
        while w.running() {
            if let Some((i, mut g)) = pick(&mut w.rng, false) {
                let fh = w.op(|| t.create(&path(i)))?;
                *g = true;
                let len = size(&mut w.rng);
                w.op(|| write_pool(t, fh, 0, len))?;
                w.bytes += len;
                w.op(|| t.close(fh))?;
            }
            if let Some((i, _g)) = pick(&mut w.rng, true) {
                let fh = w.op(|| t.open(&path(i)))?;
                let len = w.rng.gen_range(1..=APPEND) as u64;
                w.op(|| {
                    let sz = t.size(fh)?;
                    write_pool(t, fh, sz, len)
                })?;
                w.bytes += len;
                w.op(|| t.close(fh))?;
            }
            if let Some((i, _g)) = pick(&mut w.rng, true) {
                let fh = w.op(|| t.open(&path(i)))?;
                let r = w.op(|| read_whole(t, fh, &mut buf))?;
                w.bytes += r;
                w.op(|| t.close(fh))?;
            }
            if let Some((i, mut g)) = pick(&mut w.rng, true) {
                w.op(|| t.unlink(&path(i)))?;
                *g = false;
            }
            if let Some((i, _g)) = pick(&mut w.rng, true) {
                w.op(|| t.stat(&path(i)))?;
            }
        }
        Ok(())
    })
}
