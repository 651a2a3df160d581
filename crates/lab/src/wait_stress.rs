//! The wait-protocol stress run (polling waits and per-core work queues, XFS journaling
//! paper): many threads commit and wait through the journal on an emulated device, with
//! random delays between their steps, until a given number of fsyncs is done; a watchdog
//! checks every 10 ms that no waiter is still waiting more than a bound after its transaction
//! became durable (a lost wake-up), and every waiter checks that its transaction is durable
//! when its wait returns (an early return).
//!
//! `cjfs bench stress --device ramdisk --threads 64 --fsyncs 1000000 --journal
//! cjfs+dispatch=per_core` runs it; the summary says whether it passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cjfs_blockdev::{Device, EmulatedSsd, SsdPreset};
use cjfs_journal::superblock::format_journal;
use cjfs_journal::{BufferCache, Journal, JournalArea, JournalConfig, TxId};
use serde::Serialize;

/// What to run.
#[derive(Debug, Clone)]
pub struct StressConfig {
    /// The emulated device.
    pub device: SsdPreset,
    /// The journal (one log: the stress run drives one journal area).
    pub journal: JournalConfig,
    /// Threads committing and waiting.
    pub threads: usize,
    /// fsyncs (commit + wait) in all.
    pub fsyncs: u64,
    /// Seed of the random delays and block choices.
    pub seed: u64,
    /// Longest a waiter may still wait after its transaction became durable.
    pub late_bound: Duration,
}

/// What happened.
#[derive(Debug, Clone, Serialize)]
pub struct StressReport {
    /// Device preset name.
    pub device: String,
    /// Journal preset (with its settings).
    pub journal: String,
    /// Threads.
    pub threads: usize,
    /// Seed.
    pub seed: u64,
    /// fsyncs completed.
    pub fsyncs: u64,
    /// Transactions committed.
    pub transactions: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Waits that returned before their transaction was durable.
    pub early_returns: u64,
    /// Waiters seen still waiting more than the bound after their transaction was durable.
    pub late_waiters: u64,
    /// Longest a waiter was seen still waiting after its transaction was durable, ms (the
    /// watchdog looks every 10 ms, so this is a lower bound of the true worst).
    pub worst_late_ms: f64,
    /// The bound, ms.
    pub late_bound_ms: f64,
    /// Polling spins, and how many ended the wait.
    pub spins: u64,
    /// Spins that ended with the wait over.
    pub spin_hits: u64,
    /// Waits that skipped their spin because spinning at their site had not been paying.
    pub spin_skips: u64,
    /// Threads parked on a transaction's completion, and for how long in all (ms).
    pub parks: u64,
    /// Time parked on completions, ms.
    pub parked_ms: f64,
    /// Process context switches per fsync.
    pub context_switches_per_fsync: f64,
    /// Process CPU seconds per 1,000 fsyncs.
    pub cpu_s_per_1000_fsyncs: f64,
}

impl StressReport {
    /// Whether the run passed: no early return and no waiter late beyond the bound.
    pub fn passed(&self) -> bool {
        self.early_returns == 0 && self.late_waiters == 0 && self.fsyncs > 0
    }
}

/// Errors of a stress run.
#[derive(Debug, thiserror::Error)]
pub enum StressError {
    /// The journal could not be set up or failed.
    #[error("stress run: journal: {0}")]
    Journal(#[from] cjfs_journal::JournalError),
    /// The configuration cannot be run.
    #[error("stress run: {0}")]
    Config(String),
}

/// Blocks each thread writes (its own, so threads never wait for each other's buffers).
const BLOCKS_PER_THREAD: u64 = 8;
/// Log area size in blocks.
const LOG_BLOCKS: u64 = 8192;

/// What a thread is waiting for, for the watchdog: the transaction id (0: not waiting) and
/// a sequence number of the wait.
struct Slot {
    tid: AtomicU64,
    seq: AtomicU64,
}

/// Run the stress test.
pub fn run(cfg: &StressConfig) -> Result<StressReport, StressError> {
    if cfg.journal.logs != cjfs_journal::Logs::One {
        return Err(StressError::Config(format!(
            "journal {} runs several logs; the stress run drives one log (name a one-log preset)",
            cfg.journal.name
        )));
    }
    if cfg.threads == 0 || cfg.fsyncs == 0 {
        return Err(StressError::Config("threads and fsyncs must be at least 1".into()));
    }
    let home = cfg.threads as u64 * BLOCKS_PER_THREAD;
    let ssd = Arc::new(EmulatedSsd::new(cfg.device, home + LOG_BLOCKS + 16));
    let dev: Device = ssd.clone();
    let area = JournalArea::contiguous(home + 16, LOG_BLOCKS);
    format_journal(&*dev, &area, [7; 16], true)?;
    let cache = Arc::new(BufferCache::new(dev.clone(), 8192));
    let j = Arc::new(Journal::open(dev, area, cache, cfg.journal.clone())?);

    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicU64::new(0));
    let slots: Arc<Vec<Slot>> =
        Arc::new((0..cfg.threads).map(|_| Slot { tid: AtomicU64::new(0), seq: AtomicU64::new(0) }).collect());
    let before_locks = cjfs_journal::lock_stat::snapshot();
    let (cs0, cpu0) = (crate::workloads::context_switches(), crate::workloads::cpu_time());
    let t0 = Instant::now();

    let watchdog = {
        let (j, slots, stop) = (j.clone(), slots.clone(), stop.clone());
        let bound = cfg.late_bound;
        std::thread::spawn(move || {
            // Per thread: the wait (seq) first seen durable, and when.
            let mut seen: Vec<Option<(u64, Instant)>> = vec![None; slots.len()];
            let (mut late, mut worst) = (0u64, Duration::ZERO);
            while !stop.load(Ordering::Acquire) {
                for (i, s) in slots.iter().enumerate() {
                    let seq = s.seq.load(Ordering::Acquire);
                    let tid = s.tid.load(Ordering::Acquire);
                    if tid == 0 || seq != s.seq.load(Ordering::Acquire) {
                        seen[i] = None;
                        continue;
                    }
                    if !j.is_durable(TxId::new(0, tid)) {
                        continue;
                    }
                    match seen[i] {
                        Some((q, since)) if q == seq => {
                            let waited = since.elapsed();
                            worst = worst.max(waited);
                            if waited > bound {
                                late += 1;
                                // Counted once per wait.
                                seen[i] = Some((q, Instant::now() + Duration::from_secs(3600)));
                            }
                        }
                        _ => seen[i] = Some((seq, Instant::now())),
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            (late, worst)
        })
    };

    let workers: Vec<_> = (0..cfg.threads)
        .map(|t| {
            let (j, done, early, slots) = (j.clone(), done.clone(), early.clone(), slots.clone());
            let target = cfg.fsyncs;
            let mut rng = cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            std::thread::spawn(move || -> Result<(), StressError> {
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                while done.load(Ordering::Relaxed) < target {
                    let blocks = 1 + next() % 3;
                    let mut h = j.start(blocks as u32 + 1)?;
                    for _ in 0..blocks {
                        let blk = t as u64 * BLOCKS_PER_THREAD + next() % BLOCKS_PER_THREAD;
                        let buf = j.cache().read(blk)?;
                        h.get_write_access(&buf)?;
                        buf.write()[..8].copy_from_slice(&next().to_le_bytes());
                        h.dirty_metadata(&buf)?;
                    }
                    let id = h.stop()?;
                    // Random delay between the handle and the fsync: none, a spin, a yield or
                    // a short sleep, so waiters arrive at every point of a commit.
                    match next() % 8 {
                        0 => std::thread::yield_now(),
                        1 => std::thread::sleep(Duration::from_micros(next() % 200)),
                        2 => {
                            let until = Instant::now() + Duration::from_micros(next() % 20);
                            while Instant::now() < until {
                                std::hint::spin_loop();
                            }
                        }
                        _ => {}
                    }
                    let s = &slots[t];
                    s.seq.fetch_add(1, Ordering::AcqRel);
                    s.tid.store(id.tid, Ordering::Release);
                    j.commit_wait(id)?;
                    s.tid.store(0, Ordering::Release);
                    if !j.is_durable(id) {
                        early.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    let mut first_err = None;
    for w in workers {
        match w.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(StressError::Config("a stress thread panicked".into()));
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Release);
    let (late, worst) = watchdog.join().unwrap_or((u64::MAX, Duration::MAX));
    let (cs, cpu) = (
        crate::workloads::context_switches().saturating_sub(cs0),
        crate::workloads::cpu_time().saturating_sub(cpu0),
    );
    let locks = cjfs_journal::lock_stat::snapshot().since(&before_locks);
    let stats = j.stats();
    j.shutdown()?;
    if let Some(e) = first_err {
        return Err(e);
    }
    let fsyncs = done.load(Ordering::Relaxed);
    let durable_site = locks.waits.iter().find(|w| w.site == cjfs_journal::lock_stat::WaitSite::TxDurable);
    Ok(StressReport {
        device: cfg.device.name.to_string(),
        journal: cfg.journal.name.clone(),
        threads: cfg.threads,
        seed: cfg.seed,
        fsyncs,
        transactions: stats.transactions,
        seconds,
        early_returns: early.load(Ordering::Relaxed),
        late_waiters: late,
        worst_late_ms: worst.as_secs_f64() * 1e3,
        late_bound_ms: cfg.late_bound.as_secs_f64() * 1e3,
        spins: locks.spins,
        spin_hits: locks.spin_hits,
        spin_skips: locks.spin_skips,
        parks: durable_site.map_or(0, |w| w.parks),
        parked_ms: durable_site.map_or(0.0, |w| w.parked_ns as f64 / 1e6),
        context_switches_per_fsync: cs as f64 / fsyncs.max(1) as f64,
        cpu_s_per_1000_fsyncs: cpu.as_secs_f64() * 1000.0 / fsyncs.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_passes_with_every_wait_mode() {
        for spec in ["cjfs-condvar", "cjfs", "cjfs+dispatch=per_core", "jbd2+wait=spin_park"] {
            let journal = cjfs_fs::preset::resolve(spec).expect("preset").journal;
            let cfg = StressConfig {
                device: SsdPreset::ramdisk(),
                journal,
                threads: 8,
                fsyncs: 2000,
                seed: 1,
                late_bound: Duration::from_secs(1),
            };
            let r = run(&cfg).expect("run");
            assert!(r.passed(), "{spec}: {r:?}");
            assert!(r.fsyncs >= 2000 && r.transactions > 0, "{spec}: {r:?}");
        }
    }

    #[test]
    fn several_logs_are_refused_with_a_reason() {
        let journal = cjfs_fs::preset::resolve("zjournal+logs=2").expect("preset").journal;
        let cfg = StressConfig {
            device: SsdPreset::ramdisk(),
            journal,
            threads: 1,
            fsyncs: 1,
            seed: 1,
            late_bound: Duration::from_secs(1),
        };
        let e = run(&cfg).expect_err("refused");
        assert!(e.to_string().contains("several logs"), "{e}");
    }
}
