//! Workloads from the journaling papers, written once against [`crate::Target`].
//!
//! Every workload runs in two phases: a *setup* that builds its file set, followed by a
//! `sync_all` of the target so the measured phase starts from a clean state, and a timed
//! *run* on `threads` worker threads driven by [`run_workers`]. [`Workload`] names every
//! workload and [`run`] performs both phases.

pub mod append_fsync;
pub mod dbench;
pub mod exim;
pub mod fileserver;
pub mod fsync_tester;
pub mod fxmark;
pub mod oltp;
pub mod sqlite;
pub mod sysbench;
pub mod varmail;

use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cjfs_blockdev::DeviceStats;
use cjfs_journal::StatsSnapshot;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;

use crate::hist::{Latency, Percentiles};
use crate::target::Target;

/// Journal figures of one run (cjfs targets), the statistics of DESIGN.md.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct JournalSummary {
    /// Committed transactions.
    pub transactions: u64,
    /// Handles per transaction (coalescing degree).
    pub handles_per_tx: f64,
    /// Logged blocks per transaction.
    pub blocks_per_tx: f64,
    /// Conflicts per transaction: writers that waited for a block under I/O (JBD2, BarrierFS),
    /// or blocks needing a version beyond the limit at commit (multi-version modes).
    pub conflicts_per_tx: f64,
    /// Mean time a transaction spent Locked, µs.
    pub locked_us: f64,
    /// Mean commit latency (lock to durable), µs.
    pub commit_us: f64,
    /// Device flushes issued by the journal.
    pub flushes: u64,
    /// Device barriers issued by the journal.
    pub barriers: u64,
    /// Callers that waited for durability (fsync and friends).
    pub fsync_waits: u64,
    /// fsync and fdatasync calls, however served.
    pub fsyncs: u64,
    /// Device flushes per fsync call.
    pub flushes_per_fsync: f64,
    /// Mean transactions committing at once when a commit started.
    pub mean_in_flight: f64,
    /// Most transactions committing at once.
    pub max_in_flight: u64,
    /// Shadow copies (buffer versions) made.
    pub shadow_copies: u64,
    /// Normal-journal blocks written, at least: the logged blocks plus one descriptor and one
    /// commit block per transaction (large transactions' extra descriptors and revoke blocks
    /// are not counted).
    pub log_blocks: u64,
    /// Per-core journaling (zero with one log): the chains and their costs.
    pub per_core: PerCoreSummary,
}

/// Per-core journaling figures of one run (Z-Journal's statistics; all zero with one log).
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
pub struct PerCoreSummary {
    /// Uni-directional chain marks per committed transaction.
    pub marks_uni_per_tx: f64,
    /// Bi-directional chains per committed transaction.
    pub marks_bi_per_tx: f64,
    /// Time spent deciding validity, µs per committed transaction.
    pub validity_us_per_tx: f64,
    /// Checkpoint entries kept back because a version was not yet valid.
    pub not_valid_skips: u64,
    /// Commits forced because a durable transaction waited for an uncommitted ancestor.
    pub forced_commits: u64,
    /// Flushes a log saved by joining another log's flush (compound flush across logs).
    pub shared_flushes: u64,
    /// Handle starts that waited for log space.
    pub space_waits: u64,
    /// Time spent copying buffer versions (frozen copies and shadows), ms.
    pub copy_ms: f64,
    /// Core-aware allocation: share of block and inode allocations served from the
    /// caller's own groups (`None` without allocations).
    pub own_group_share: Option<f64>,
}

impl PerCoreSummary {
    /// Whether the run had per-core journaling at work (any chain, shared flush, space wait
    /// or forced commit).
    pub fn any(&self) -> bool {
        self.marks_uni_per_tx > 0.0
            || self.marks_bi_per_tx > 0.0
            || self.shared_flushes > 0
            || self.space_waits > 0
            || self.forced_commits > 0
            || self.not_valid_skips > 0
    }
}

impl From<&StatsSnapshot> for JournalSummary {
    fn from(j: &StatsSnapshot) -> Self {
        JournalSummary {
            transactions: j.transactions,
            handles_per_tx: j.handles_per_tx(),
            blocks_per_tx: j.blocks_per_tx(),
            conflicts_per_tx: j.conflicts_per_tx(),
            locked_us: j.locked_us_per_tx(),
            commit_us: j.commit_us_per_tx(),
            flushes: j.flushes,
            barriers: j.barriers,
            fsync_waits: j.fsync_waits,
            fsyncs: j.fsyncs,
            flushes_per_fsync: j.flushes_per_fsync(),
            mean_in_flight: j.mean_in_flight(),
            max_in_flight: j.max_in_flight,
            shadow_copies: j.shadow_copies,
            log_blocks: j.blocks_logged + 2 * j.transactions,
            per_core: PerCoreSummary::from(j),
        }
    }
}

impl From<&StatsSnapshot> for PerCoreSummary {
    fn from(j: &StatsSnapshot) -> Self {
        let per_tx = |n: f64| if j.transactions > 0 { n / j.transactions as f64 } else { 0.0 };
        PerCoreSummary {
            marks_uni_per_tx: per_tx(j.marks_uni as f64),
            marks_bi_per_tx: per_tx(j.marks_bi as f64),
            validity_us_per_tx: per_tx(j.validity_ns as f64 / 1e3),
            not_valid_skips: j.not_valid_skips,
            forced_commits: j.forced_commits,
            shared_flushes: j.shared_flushes,
            space_waits: j.space_waits,
            copy_ms: j.copy_ns as f64 / 1e6,
            own_group_share: None,
        }
    }
}

/// iJournaling figures of one run (cjfs targets that use it).
#[derive(Debug, Clone, Serialize, Default)]
pub struct IjSummary {
    /// fsync and fdatasync calls.
    pub fsyncs: u64,
    /// Of them, served by i-transactions.
    #[serde(default)]
    pub served: u64,
    /// ijournal blocks written.
    #[serde(default)]
    pub blocks: u64,
    /// Share of them served by i-transactions (no normal commit).
    pub served_share: f64,
    /// Share that found nothing but data to make durable (no record, no commit).
    pub clean_share: f64,
    /// Share made durable by a concurrent fsync of the same file (no record of their own).
    #[serde(default)]
    pub grouped_share: f64,
    /// Share that committed instead.
    pub fallback_share: f64,
    /// Normal commits instead, by reason.
    pub fallbacks: Vec<(String, u64)>,
    /// i-transactions per served fsync.
    pub records_per_fsync: f64,
    /// ijournal blocks per i-transaction.
    pub blocks_per_record: f64,
    /// ijournal blocks per served fsync.
    pub blocks_per_fsync: f64,
    /// Data KiB the served fsyncs wrote, per served fsync.
    pub data_kib_per_fsync: f64,
    /// Records that wrapped around an area's end.
    pub wraps: u64,
    /// Highest area occupancy seen, in thousandths.
    pub max_fill_permille: u64,
    /// Normal commits asked for early by a half-full area.
    pub commits_kicked: u64,
    /// Served fsyncs per batch of records' final blocks (their group commit).
    pub served_per_batch: f64,
    /// Share of served fsyncs whose data their batch's one flush made durable.
    #[serde(default)]
    pub data_grouped_share: f64,
    /// Mean time a served fsync spent making its data durable, µs.
    pub data_us: f64,
    /// Mean time it spent writing its records durable, µs.
    pub record_us: f64,
}

impl From<&cjfs_fs::IjStats> for IjSummary {
    fn from(s: &cjfs_fs::IjStats) -> Self {
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        IjSummary {
            fsyncs: s.fsyncs,
            served: s.served,
            blocks: s.blocks,
            served_share: per(s.served, s.fsyncs),
            clean_share: per(s.clean, s.fsyncs),
            grouped_share: per(s.grouped, s.fsyncs),
            fallback_share: per(s.fallback_total(), s.fsyncs),
            fallbacks: s.fallbacks.clone(),
            records_per_fsync: per(s.records, s.served),
            blocks_per_record: per(s.blocks, s.records),
            blocks_per_fsync: per(s.blocks, s.served),
            data_kib_per_fsync: per(s.data_blocks * 4, s.served),
            wraps: s.wraps,
            max_fill_permille: s.max_fill_permille,
            commits_kicked: s.commits_kicked,
            served_per_batch: per(s.served, s.batches),
            data_grouped_share: per(s.data_grouped, s.served),
            data_us: per(s.data_us, s.served),
            record_us: per(s.record_us, s.served),
        }
    }
}

/// Device figures of one run (cjfs targets).
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct DeviceSummary {
    /// Write requests.
    pub writes: u64,
    /// Blocks written.
    pub blocks_written: u64,
    /// Flushes.
    pub flushes: u64,
    /// Barriers.
    pub barriers: u64,
    /// Mean queue depth seen by an arriving write.
    pub qd_mean: f64,
    /// Largest queue depth (since the device was created; each run gets a fresh device).
    pub qd_max: u64,
}

impl From<&DeviceStats> for DeviceSummary {
    fn from(d: &DeviceStats) -> Self {
        DeviceSummary {
            writes: d.writes,
            blocks_written: d.blocks_written,
            flushes: d.flushes,
            barriers: d.barriers,
            qd_mean: d.inflight_mean,
            qd_max: d.inflight_max,
        }
    }
}

/// What one run of a workload measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Workload name.
    pub workload: String,
    /// Threads.
    pub threads: usize,
    /// Operations completed (filebench-style flowops, dbench loadfile lines, transactions).
    pub ops: u64,
    /// Wall time of the measured phase.
    pub secs: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Bytes read and written by the workload.
    pub bytes: u64,
    /// `bytes` per second in MB/s (10^6), dbench's throughput figure.
    pub mb_per_sec: f64,
    /// Latency of every operation, µs.
    pub op_latency: Percentiles,
    /// Latency of fsync (and fdatasync, directory fsync) calls, µs.
    pub fsync_latency: Percentiles,
    /// Operation latency CDF: `[µs, cumulative fraction]` points.
    pub op_cdf: Vec<[f64; 2]>,
    /// fsync latency CDF: `[µs, cumulative fraction]` points (empty without fsyncs).
    pub fsync_cdf: Vec<[f64; 2]>,
    /// Every fsync latency of the run, so a sweep can pool the repetitions' tails (one run's
    /// p99.9 rests on a dozen samples).
    #[serde(skip)]
    pub fsync_hist: Option<Latency>,
    /// CPU time (user + system) of the process during the run, seconds.
    pub cpu_secs: f64,
    /// Context switches of the process during the run (voluntary and involuntary).
    pub context_switches: u64,
    /// Lock contention and parked time during the run, per lock rank and condition
    /// variable (cjfs targets; the counters are the process's, see `cjfs_journal::lock_stat`).
    pub waits: Option<WaitSummary>,
    /// Journal statistics over the run (cjfs targets).
    #[serde(skip)]
    pub journal: Option<StatsSnapshot>,
    /// Device statistics over the run (cjfs targets).
    #[serde(skip)]
    pub device: Option<DeviceStats>,
    /// Journal figures (cjfs targets).
    pub journal_summary: Option<JournalSummary>,
    /// iJournaling figures (cjfs targets that use it).
    #[serde(default)]
    pub ijournal: Option<IjSummary>,
    /// The kernel's JBD2 and fast-commit counters over the run (directory targets on ext4).
    #[serde(default)]
    pub kernel_journal: Option<crate::target::KernelJournal>,
    /// Device figures (cjfs targets).
    pub device_summary: Option<DeviceSummary>,
    /// Workload-specific figures (name, value).
    pub extra: Vec<(String, f64)>,
}

/// One row of a [`WaitSummary`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitRow {
    /// The lock rank (`lock`) or condition variable (`park`).
    pub name: String,
    /// `lock`: a contended acquisition; `park`: a thread parked on a condition variable;
    /// `spin`: polling waits spinning.
    pub kind: String,
    /// How many.
    pub events: u64,
    /// Time waited, µs.
    pub wait_us: f64,
}

/// The journal's shared wait locks: the locks its condition variables pair with, which every
/// commit request, waiter and wake-up of a log takes (`state` with `commit_cv`, `locked_cv`
/// and `done_cv`; `flush_queue` with `flush_cv`) — the XFS paper's `xc_push_lock` and
/// `pool->lock`.
pub const WAIT_LOCKS: [&str; 2] = ["State", "FlushQueue"];

/// Where a run's threads waited: every lock rank that was contended and every condition
/// variable parked on, with counts and time (the lockstat view of the XFS journaling paper),
/// and the time polling waits spun.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct WaitSummary {
    /// Rows with any events, longest wait first.
    pub rows: Vec<WaitRow>,
    /// The contended lock acquisitions of `rows` again, per call site (`Rank at file:line`,
    /// kind `site`), longest wait first: which path queued on a lock.
    pub sites: Vec<WaitRow>,
}

impl WaitSummary {
    /// Time waited for the journal's shared wait locks ([`WAIT_LOCKS`]), µs.
    pub fn wait_lock_us(&self) -> f64 {
        self.rows
            .iter()
            .filter(|r| r.kind == "lock" && WAIT_LOCKS.contains(&r.name.as_str()))
            .map(|r| r.wait_us)
            .sum()
    }
}

impl From<&cjfs_journal::lock_stat::LockStats> for WaitSummary {
    fn from(s: &cjfs_journal::lock_stat::LockStats) -> Self {
        let mut rows: Vec<WaitRow> = s
            .locks
            .iter()
            .filter(|l| l.contended > 0)
            .map(|l| WaitRow {
                name: format!("{:?}", l.rank),
                kind: "lock".into(),
                events: l.contended,
                wait_us: l.wait_ns as f64 / 1e3,
            })
            .chain(s.waits.iter().filter(|w| w.parks > 0).map(|w| WaitRow {
                name: w.site.name().into(),
                kind: "park".into(),
                events: w.parks,
                wait_us: w.parked_ns as f64 / 1e3,
            }))
            .chain((s.spins + s.spin_skips > 0).then(|| WaitRow {
                name: format!(
                    "polling spins ({} ended the wait, {} skipped on the score)",
                    s.spin_hits, s.spin_skips
                ),
                kind: "spin".into(),
                events: s.spins,
                wait_us: s.spin_ns as f64 / 1e3,
            }))
            .collect();
        rows.sort_by(|a, b| b.wait_us.total_cmp(&a.wait_us));
        let mut sites: Vec<WaitRow> = s
            .sites
            .iter()
            .map(|w| WaitRow {
                name: format!(
                    "{:?} at {}:{}",
                    w.rank,
                    w.file.rsplit_once("src/").map_or(w.file, |(_, f)| f),
                    w.line
                ),
                kind: "site".into(),
                events: w.contended,
                wait_us: w.wait_ns as f64 / 1e3,
            })
            .collect();
        sites.sort_by(|a, b| b.wait_us.total_cmp(&a.wait_us));
        WaitSummary { rows, sites }
    }
}

/// Context switches of the process so far (voluntary and involuntary).
pub fn context_switches() -> u64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    (ru.ru_nvcsw + ru.ru_nivcsw).max(0) as u64
}

/// Process CPU time (user + system).
pub fn cpu_time() -> Duration {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A buffer of pseudo-random bytes to write from (so compressing devices gain nothing).
pub fn data_pool() -> &'static [u8] {
    static POOL: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..(2 << 20))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    })
}

/// Write `len` bytes from the data pool at `off`, in pieces of at most 1 MiB.
pub fn write_pool(t: &dyn Target, fh: u64, off: u64, len: u64) -> io::Result<()> {
    let pool = data_pool();
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(1 << 20) as usize;
        let start = ((off + done) % 4096) as usize;
        t.write_at(fh, off + done, &pool[start..start + n])?;
        done += n as u64;
    }
    Ok(())
}

/// Read a whole open file with `buf`-sized reads; returns bytes read.
pub fn read_whole(t: &dyn Target, fh: u64, buf: &mut [u8]) -> io::Result<u64> {
    let mut off = 0u64;
    loop {
        let n = t.read_at(fh, off, buf)?;
        if n == 0 {
            return Ok(off);
        }
        off += n as u64;
    }
}

/// One worker thread's state: its id, its RNG, and what it measured.
pub struct Worker {
    /// Thread index, `0..threads`.
    pub id: usize,
    /// Per-thread RNG seeded from the run's seed and the id.
    pub rng: StdRng,
    /// Latency of every operation.
    pub lat: Latency,
    /// Latency of fsync-like calls.
    pub fsync: Latency,
    /// Operations done.
    pub ops: u64,
    /// Bytes read and written.
    pub bytes: u64,
    /// Time spent on untimed housekeeping (refilling a file pool), left out of the rate.
    pub excluded: Duration,
    stop: Arc<AtomicBool>,
}

impl Worker {
    /// Whether the run is still on.
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
    /// Run and time one operation.
    pub fn op<T>(&mut self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let s = Instant::now();
        let r = f()?;
        self.lat.record(s.elapsed());
        self.ops += 1;
        Ok(r)
    }
    /// Run and time one fsync-like operation (recorded in both histograms).
    pub fn fsync_op<T>(&mut self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let s = Instant::now();
        let r = f()?;
        let d = s.elapsed();
        self.lat.record(d);
        self.fsync.record(d);
        self.ops += 1;
        Ok(r)
    }
    /// Time an fsync inside a larger operation (fsync histogram only, no op counted).
    pub fn inner_fsync<T>(&mut self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let s = Instant::now();
        let r = f()?;
        self.fsync.record(s.elapsed());
        Ok(r)
    }
    /// Run `f` without counting its time towards the rate.
    pub fn untimed<T>(&mut self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let s = Instant::now();
        let r = f();
        self.excluded += s.elapsed();
        r
    }
}

/// Latency CDF points of a histogram.
fn cdf(l: &Latency) -> Vec<[f64; 2]> {
    l.cdf()
}

/// Run `body` on `threads` scoped threads for `duration` and gather a [`RunResult`].
/// `body` loops while [`Worker::running`]; `extra` may add workload figures afterwards.
pub fn run_workers<F>(
    t: &dyn Target,
    name: &str,
    threads: usize,
    duration: Duration,
    seed: u64,
    body: F,
) -> io::Result<RunResult>
where
    F: Fn(&mut Worker) -> io::Result<()> + Sync,
{
    let stop = Arc::new(AtomicBool::new(false));
    let j0 = t.journal_stats();
    let d0 = t.device_stats();
    let ij0 = t.ijournal_stats();
    let a0 = t.alloc_counts();
    let k0 = t.kernel_journal();
    let cpu0 = cpu_time();
    let csw0 = context_switches();
    let waits0 = cjfs_journal::lock_stat::snapshot();
    let start = Instant::now();
    let results: Vec<io::Result<Worker>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|id| {
                let stop = stop.clone();
                let body = &body;
                s.spawn(move || -> io::Result<Worker> {
                    let mut w = Worker {
                        id,
                        rng: StdRng::seed_from_u64(
                            seed.wrapping_mul(0x9E37_79B9).wrapping_add(id as u64 * 7919),
                        ),
                        lat: Latency::new(),
                        fsync: Latency::new(),
                        ops: 0,
                        bytes: 0,
                        excluded: Duration::ZERO,
                        stop,
                    };
                    body(&mut w)?;
                    Ok(w)
                })
            })
            .collect();
        let deadline = start + duration;
        // Sleep in slices so an early failure of every worker does not wait the full time.
        while Instant::now() < deadline && !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep((deadline - Instant::now()).min(Duration::from_millis(20)));
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other(format!("{name} worker panicked")))))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = (cpu_time() - cpu0).as_secs_f64();
    let context_switches = context_switches().saturating_sub(csw0);
    let waits = cjfs_journal::lock_stat::snapshot().since(&waits0);
    let (mut lat, mut flat) = (Latency::new(), Latency::new());
    let (mut ops, mut bytes, mut excluded) = (0u64, 0u64, 0f64);
    for r in results {
        let w = r?;
        lat.merge(&w.lat);
        flat.merge(&w.fsync);
        ops += w.ops;
        bytes += w.bytes;
        excluded += w.excluded.as_secs_f64();
    }
    let journal = match (j0, t.journal_stats()) {
        (Some(a), Some(b)) => Some(b.delta(&a)),
        _ => None,
    };
    let own_group_share = match (a0, t.alloc_counts()) {
        (Some((o0, n0)), Some((o1, n1))) if n1 > n0 => Some((o1 - o0) as f64 / (n1 - n0) as f64),
        _ => None,
    };
    let device = match (d0, t.device_stats()) {
        (Some(a), Some(b)) => Some(b.delta(&a)),
        _ => None,
    };
    let ijournal = match (ij0, t.ijournal_stats()) {
        (Some(a), Some(b)) => Some(IjSummary::from(&b.since(&a))),
        _ => None,
    };
    let kernel_journal = match (k0, t.kernel_journal()) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    // Housekeeping time is per thread; take the mean off the wall time.
    let eff = (secs - excluded / threads.max(1) as f64).max(secs * 0.05);
    Ok(RunResult {
        workload: name.to_string(),
        threads,
        ops,
        secs,
        ops_per_sec: ops as f64 / eff,
        bytes,
        mb_per_sec: bytes as f64 / eff / 1e6,
        op_latency: lat.percentiles(),
        fsync_latency: flat.percentiles(),
        op_cdf: cdf(&lat),
        fsync_cdf: cdf(&flat),
        fsync_hist: Some(flat),
        cpu_secs,
        context_switches,
        waits: journal.as_ref().map(|_| WaitSummary::from(&waits)),
        journal_summary: journal.as_ref().map(|j| {
            let mut s = JournalSummary::from(j);
            s.per_core.own_group_share = own_group_share;
            s
        }),
        ijournal,
        kernel_journal,
        device_summary: device.as_ref().map(DeviceSummary::from),
        journal,
        device,
        extra: Vec::new(),
    })
}

/// Parameters common to every workload.
#[derive(Debug, Clone)]
pub struct Params {
    /// Worker threads (clients, cores).
    pub threads: usize,
    /// Length of the measured phase.
    pub duration: Duration,
    /// RNG seed.
    pub seed: u64,
    /// File-set scale: 1.0 is the papers' size; smaller runs quicker (CI smoke tests).
    pub scale: f64,
    /// dbench loadfile.
    pub dbench_loadfile: std::path::PathBuf,
    /// Background writer bandwidth of the fsync tester, MB/s.
    pub bg_mb_s: f64,
    /// The fsync tester's pause between its write and its fsync (the iJournaling paper's
    /// 0.1 s, which lets the flusher pick the data up first).
    pub fsync_delay: Duration,
    /// Device (image) size in blocks instead of the workload's own (`device_blocks`).
    pub device_blocks: Option<u64>,
}

impl Params {
    /// Defaults for `threads` threads and `duration`.
    pub fn new(threads: usize, duration: Duration, seed: u64) -> Self {
        Params {
            threads,
            duration,
            seed,
            scale: 1.0,
            dbench_loadfile: dbench::DEFAULT_LOADFILE.into(),
            bg_mb_s: 100.0,
            fsync_delay: Duration::ZERO,
            device_blocks: None,
        }
    }
    /// `n` scaled, at least `min`.
    pub fn scaled(&self, n: usize, min: usize) -> usize {
        ((n as f64 * self.scale).round() as usize).max(min)
    }
}

/// Every workload the lab runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// filebench varmail, one shared directory of 1000 files.
    VarmailShared,
    /// varmail with a directory of 100 files per thread.
    VarmailSplit,
    /// filebench fileserver defaults (no fsync).
    Fileserver,
    /// dbench loadfile replay with `--sync-dir`.
    Dbench,
    /// OLTP-insert-like table writes and fsync.
    OltpInsert,
    /// An FxMark write microbenchmark.
    Fxmark(fxmark::Fx),
    /// sysbench-like 4 KiB random write + fsync over 128 files per thread.
    Sysbench,
    /// The iJournaling paper's many-core sysbench (Fig. 9): per thread 128 files, sequential
    /// 4 KiB writes through them, an fsync after each.
    SysbenchSeq,
    /// Z-Journal's SysBench settings: random 4 KiB overwrites over one shared set of large
    /// files, with an fsync every `n` writes per thread (`None`: never; Fig. 7 and Fig. 8).
    SysbenchShared(Option<u32>),
    /// iJournaling's fsync tester with a background sequential writer.
    FsyncTester,
    /// Append 4 KiB + fsync on one small file per thread (the iJournaling unit case).
    AppendFsync,
    /// SQLite-like transactions.
    Sqlite(sqlite::Journal, u32),
    /// An exim-like mail server: shared spool, per-user mailboxes, shared log, fsync per
    /// delivery.
    Exim,
}

impl Workload {
    /// Every workload, in report order.
    pub fn all() -> Vec<Workload> {
        let mut v = vec![
            Workload::VarmailShared,
            Workload::VarmailSplit,
            Workload::Fileserver,
            Workload::Dbench,
            Workload::OltpInsert,
        ];
        v.extend(fxmark::Fx::ALL.iter().map(|f| Workload::Fxmark(*f)));
        v.extend([
            Workload::Sysbench,
            Workload::SysbenchSeq,
            Workload::SysbenchShared(None),
            Workload::SysbenchShared(Some(100)),
            Workload::FsyncTester,
            Workload::AppendFsync,
            Workload::Exim,
        ]);
        for j in [sqlite::Journal::Rollback, sqlite::Journal::Wal] {
            for n in [1, 1000] {
                v.push(Workload::Sqlite(j, n));
            }
        }
        v
    }

    /// Device size (4 KiB blocks) an in-process run of this workload needs.
    pub fn device_blocks(&self, p: &Params) -> u64 {
        if let Some(n) = p.device_blocks {
            return n;
        }
        let gib = 1u64 << 18;
        let t = p.threads as u64;
        match self {
            Workload::Fileserver => (8.0 * p.scale.max(0.05)).ceil() as u64 * gib + 2 * gib,
            Workload::Sysbench | Workload::SysbenchSeq => 2 * gib + t * 128 * sysbench::FILE_BYTES / 4096,
            Workload::SysbenchShared(_) => {
                2 * gib + sysbench::shared_blocks(p) * sysbench::SHARED_FILES as u64
            }
            Workload::Dbench => 2 * gib + t * gib / 16,
            Workload::FsyncTester => 4 * gib,
            _ => 4 * gib,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::VarmailShared => write!(f, "varmail-shared"),
            Workload::VarmailSplit => write!(f, "varmail-split"),
            Workload::Fileserver => write!(f, "fileserver"),
            Workload::Dbench => write!(f, "dbench"),
            Workload::OltpInsert => write!(f, "oltp-insert"),
            Workload::Fxmark(x) => write!(f, "{}", x.name()),
            Workload::Sysbench => write!(f, "sysbench"),
            Workload::SysbenchSeq => write!(f, "sysbench-seq"),
            Workload::SysbenchShared(None) => write!(f, "sysbench-shared"),
            Workload::SysbenchShared(Some(n)) => write!(f, "sysbench-shared-fsync{n}"),
            Workload::FsyncTester => write!(f, "fsync-tester"),
            Workload::AppendFsync => write!(f, "append-fsync"),
            Workload::Sqlite(j, n) => write!(f, "sqlite-{}-{n}", j.name()),
            Workload::Exim => write!(f, "exim"),
        }
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let want = s.trim().to_ascii_lowercase();
        Workload::all().into_iter().find(|w| w.to_string().to_ascii_lowercase() == want).ok_or_else(|| {
            let names: Vec<String> = Workload::all().iter().map(|w| w.to_string()).collect();
            format!("unknown workload {s:?} (known: {})", names.join(", "))
        })
    }
}

/// Set up and run `w` on `t`: setup, `sync_all`, measured run.
pub fn run(w: Workload, t: &Arc<dyn Target>, p: &Params) -> io::Result<RunResult> {
    let t: &dyn Target = &**t;
    match w {
        Workload::VarmailShared | Workload::VarmailSplit => {
            let cfg = if w == Workload::VarmailShared {
                varmail::VarmailConfig::shared(p.threads, p.duration, p.seed)
            } else {
                varmail::VarmailConfig::split(p.threads, p.duration, p.seed)
            };
            varmail::setup(t, &cfg)?;
            t.sync_all()?;
            varmail::run_on(t, &cfg)
        }
        Workload::Fileserver => fileserver::run(t, p),
        Workload::Dbench => dbench::run(t, p, &dbench::DbenchOptions::default()),
        Workload::OltpInsert => oltp::run(t, p),
        Workload::Fxmark(x) => fxmark::run(t, p, x),
        Workload::Sysbench => sysbench::run(t, p),
        Workload::SysbenchSeq => sysbench::run_seq(t, p),
        Workload::SysbenchShared(every) => sysbench::run_shared(t, p, every),
        Workload::FsyncTester => fsync_tester::run(t, p),
        Workload::AppendFsync => append_fsync::run(t, p),
        Workload::Sqlite(j, n) => sqlite::run(t, p, j, n),
        Workload::Exim => exim::run(t, p),
    }
}
