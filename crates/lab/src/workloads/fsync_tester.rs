//! iJournaling's fsync tester: every worker thread writes 80 KiB to its file, waits
//! [`Params::fsync_delay`] (the paper's 0.1 s, so the flusher may take the data first) and
//! fsyncs it, in a loop, while one background thread writes 4 KiB blocks sequentially to
//! another file at a set bandwidth ([`Params::bg_mb_s`], like the paper's fio with `BGbw`;
//! 0 for none) without fsync. The background data lands in the same compound transaction as the fsync, which
//! is the dependency iJournaling removes; the figure of merit is the fsync latency
//! (p50/p95/p99 in [`RunResult::fsync_latency`]). Files wrap at 64 MiB (tester) and 256 MiB
//! (background).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Params, RunResult, data_pool, run_workers, write_pool};
use crate::target::Target;

/// Bytes written before each fsync.
pub const CHUNK: u64 = 80 * 1024;
const TESTER_CAP: u64 = 64 << 20;
const BG_CAP: u64 = 256 << 20;
/// The background writer's write size: sequential, and large enough that one thread can
/// reach hundreds of MB/s through the file system (the paper's fio wrote 4 KiB blocks into
/// the page cache, which the kernel wrote back in large requests).
const BG_CHUNK: usize = 256 << 10;

/// Set up and run.
pub fn run(t: &dyn Target, p: &Params) -> io::Result<RunResult> {
    t.mkdir("fsynctest")?;
    for id in 0..p.threads {
        let fh = t.create(&format!("fsynctest/f{id}"))?;
        t.close(fh)?;
    }
    let bg = t.create("fsynctest/background")?;
    t.sync_all()?;
    let stop = AtomicBool::new(false);
    let bg_bytes = AtomicU64::new(0);
    let rate = p.bg_mb_s * 1e6;
    let (res, bg_res) = std::thread::scope(|s| {
        let h = s.spawn(|| -> io::Result<()> {
            let start = Instant::now();
            let block = &data_pool()[..BG_CHUNK];
            let mut off = 0u64;
            let mut written = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if rate <= 0.0 {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let due = (start.elapsed().as_secs_f64() * rate) as u64;
                if written >= due {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                if off >= BG_CAP {
                    off = 0;
                }
                t.write_at(bg, off, block)?;
                off += BG_CHUNK as u64;
                written += BG_CHUNK as u64;
                bg_bytes.store(written, Ordering::Relaxed);
            }
            Ok(())
        });
        let res = run_workers(t, "fsync-tester", p.threads, p.duration, p.seed, |w| {
            let fh = t.open(&format!("fsynctest/f{}", w.id))?;
            let mut off = 0u64;
            while w.running() {
                if off + CHUNK > TESTER_CAP {
                    w.untimed(|| t.truncate(fh, 0))?;
                    off = 0;
                }
                write_pool(t, fh, off, CHUNK)?;
                off += CHUNK;
                w.bytes += CHUNK;
                if !p.fsync_delay.is_zero() {
                    w.untimed(|| -> io::Result<()> {
                        std::thread::sleep(p.fsync_delay);
                        Ok(())
                    })?;
                }
                w.fsync_op(|| t.fsync(fh, false))?;
            }
            t.close(fh)
        });
        stop.store(true, Ordering::Relaxed);
        let bg_res = h.join().unwrap_or_else(|_| Err(io::Error::other("background writer panicked")));
        (res, bg_res)
    });
    t.close(bg)?;
    bg_res?;
    let mut res = res?;
    let bg_mb = bg_bytes.load(Ordering::Relaxed) as f64 / 1e6;
    res.extra.push(("background_mb_s".into(), bg_mb / res.secs));
    Ok(res)
}
