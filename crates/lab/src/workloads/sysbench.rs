//! sysbench-like random writes: every thread overwrites a random 4 KiB block of one of its
//! own 128 files and fsyncs it (the Z-Journal paper's fsync-invoking SysBench setting, with
//! the file set split per thread and an fsync after every write).

use std::io;

use rand::Rng;

use super::{Params, RunResult, run_workers, write_pool};
use crate::target::{Fh, Target};

/// Files per thread.
pub const FILES: usize = 128;
/// Size of each file (before scaling).
pub const FILE_BYTES: u64 = 128 << 10;

/// Build the files and run.
pub fn run(t: &dyn Target, p: &Params) -> io::Result<RunResult> {
    let blocks = p.scaled((FILE_BYTES / 4096) as usize, 4) as u64;
    t.mkdir("sysbench")?;
    for id in 0..p.threads {
        t.mkdir(&format!("sysbench/t{id}"))?;
        for f in 0..FILES {
            let fh = t.create(&format!("sysbench/t{id}/f{f}"))?;
            write_pool(t, fh, 0, blocks * 4096)?;
            t.close(fh)?;
        }
    }
    t.sync_all()?;
    run_workers(t, "sysbench", p.threads, p.duration, p.seed, |w| {
        let fhs: Vec<Fh> =
            (0..FILES).map(|f| t.open(&format!("sysbench/t{}/f{f}", w.id))).collect::<io::Result<_>>()?;
        let r = (|| -> io::Result<()> {
            while w.running() {
                let fh = fhs[w.rng.gen_range(0..FILES)];
                let off = w.rng.gen_range(0..blocks) * 4096;
                w.op(|| write_pool(t, fh, off, 4096))?;
                w.fsync_op(|| t.fsync(fh, false))?;
                w.bytes += 4096;
            }
            Ok(())
        })();
        for fh in fhs {
            t.close(fh)?;
        }
        r
    })
}
