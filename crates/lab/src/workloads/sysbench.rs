//! sysbench-like random writes: every thread overwrites a random 4 KiB block of one of its
//! own 128 files and fsyncs it (the Z-Journal paper's fsync-invoking SysBench setting, with
//! the file set split per thread and an fsync after every write), and the paper's own
//! settings: random overwrites over one shared set of large files, without fsync (Fig. 7) or
//! with an fsync every 100 writes (Fig. 8, whose p99 fsync latency the paper reports).

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

/// The iJournaling paper's many-core sysbench (Fig. 9): every thread writes 4 KiB blocks
/// sequentially through its own 128 files (as sysbench's `seqwr` over a prepared file set:
/// file 0 from start to end, then file 1, ...; round again from file 0 at the end) and
/// fsyncs the file after each write. Every fsync makes a small metadata change durable (the
/// times), nothing else of the thread's is pending, and threads share nothing but the
/// journal: what scales is how fsyncs of different threads are made durable.
pub fn run_seq(t: &dyn Target, p: &Params) -> io::Result<RunResult> {
    let blocks = p.scaled((FILE_BYTES / 4096) as usize, 4) as u64;
    t.mkdir("sysbench-seq")?;
    for id in 0..p.threads {
        t.mkdir(&format!("sysbench-seq/t{id}"))?;
        for f in 0..FILES {
            let fh = t.create(&format!("sysbench-seq/t{id}/f{f}"))?;
            write_pool(t, fh, 0, blocks * 4096)?;
            t.close(fh)?;
        }
    }
    t.sync_all()?;
    run_workers(t, "sysbench-seq", p.threads, p.duration, p.seed, |w| {
        let fhs: Vec<Fh> =
            (0..FILES).map(|f| t.open(&format!("sysbench-seq/t{}/f{f}", w.id))).collect::<io::Result<_>>()?;
        let r = (|| -> io::Result<()> {
            let mut pos = 0u64;
            while w.running() {
                let fh = fhs[(pos / blocks) as usize % FILES];
                let off = (pos % blocks) * 4096;
                w.op(|| write_pool(t, fh, off, 4096))?;
                w.fsync_op(|| t.fsync(fh, false))?;
                w.bytes += 4096;
                pos += 1;
            }
            Ok(())
        })();
        for fh in fhs {
            t.close(fh)?;
        }
        r
    })
}

/// Files of the shared set (the paper: 80 files of 1 GiB; scaled down to what a small
/// machine's emulated device holds).
pub const SHARED_FILES: usize = 16;
/// Size of each shared file before scaling (the paper's 1 GiB / 16).
pub const SHARED_FILE_BYTES: u64 = 64 << 20;

/// Blocks of each shared file at this scale.
pub fn shared_blocks(p: &Params) -> u64 {
    p.scaled((SHARED_FILE_BYTES / 4096) as usize, 16) as u64
}

/// Z-Journal's SysBench: every thread overwrites random 4 KiB blocks of random files of one
/// shared set, and with `fsync_every` fsyncs the file it just wrote every that many writes.
pub fn run_shared(t: &dyn Target, p: &Params, fsync_every: Option<u32>) -> io::Result<RunResult> {
    let blocks = shared_blocks(p);
    t.mkdir("sysbench-shared")?;
    for f in 0..SHARED_FILES {
        let fh = t.create(&format!("sysbench-shared/f{f}"))?;
        write_pool(t, fh, 0, blocks * 4096)?;
        t.close(fh)?;
    }
    t.sync_all()?;
    let name = match fsync_every {
        None => "sysbench-shared".to_string(),
        Some(n) => format!("sysbench-shared-fsync{n}"),
    };
    run_workers(t, &name, p.threads, p.duration, p.seed, |w| {
        let fhs: Vec<Fh> =
            (0..SHARED_FILES).map(|f| t.open(&format!("sysbench-shared/f{f}"))).collect::<io::Result<_>>()?;
        let r = (|| -> io::Result<()> {
            let mut n = 0u32;
            while w.running() {
                let fh = fhs[w.rng.gen_range(0..SHARED_FILES)];
                let off = w.rng.gen_range(0..blocks) * 4096;
                w.op(|| write_pool(t, fh, off, 4096))?;
                w.bytes += 4096;
                n += 1;
                if fsync_every.is_some_and(|k| n.is_multiple_of(k)) {
                    w.fsync_op(|| t.fsync(fh, false))?;
                }
            }
            Ok(())
        })();
        for fh in fhs {
            t.close(fh)?;
        }
        r
    })
}
