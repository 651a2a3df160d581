//! Lock-wait accounting, in the spirit of the kernel's lockstat (the XFS journaling paper's
//! Table I): per lock rank, how often a lock was found held and how long its takers waited for
//! it; per condition variable, how often and how long threads were parked on it.
//!
//! The counters are process-wide atomics touched only on slow paths — a lock whose try
//! failed, a thread about to park — so they stay on in benchmarks. A contended acquisition is
//! also counted under its call site (the source line that took the lock, through
//! `#[track_caller]`), so a table can say which path queues on a lock, not only which lock. Readers take a
//! [`snapshot`] before and after and subtract ([`LockStats::since`]); with several file
//! systems in one process their waits add up.

use std::panic::Location;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, MutexGuard, WaitTimeoutResult};

use crate::lock_rank::Rank;

/// A condition variable the journal parks threads on, named for the accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WaitSite {
    /// The commit thread waiting for a commit request or its timer (`commit_cv`).
    CommitRequest = 0,
    /// Handles waiting for a locked transaction to switch (`locked_cv`).
    LockedTx = 1,
    /// The journal's own threads waiting for some transaction to become durable (`done_cv`).
    LogDurable = 2,
    /// The checkpoint thread waiting for work (`checkpoint_cv`).
    Checkpoint = 3,
    /// The lock-up waiting for a transaction's handles to stop (`updates_cv`).
    Updates = 4,
    /// The flush thread waiting for work or for a group to fill (`flush_cv`).
    FlushQueue = 5,
    /// fsync callers waiting for their transaction to become durable (a transaction's
    /// `done_cv`).
    TxDurable = 6,
    /// Writers waiting for a buffer version, and fdatasync for another's data write (a
    /// buffer's condvar).
    Buffer = 7,
    /// iJournaling fsync callers waiting for the batch that writes their records' final
    /// blocks (an ijournal area's `batch_cv`).
    RecordBatch = 8,
}

impl WaitSite {
    /// Every site, in index order.
    pub const ALL: [WaitSite; 9] = [
        WaitSite::CommitRequest,
        WaitSite::LockedTx,
        WaitSite::LogDurable,
        WaitSite::Checkpoint,
        WaitSite::Updates,
        WaitSite::FlushQueue,
        WaitSite::TxDurable,
        WaitSite::Buffer,
        WaitSite::RecordBatch,
    ];

    /// The name the tables print (the condvar's field name).
    pub fn name(self) -> &'static str {
        match self {
            WaitSite::CommitRequest => "commit_cv",
            WaitSite::LockedTx => "locked_cv",
            WaitSite::LogDurable => "done_cv",
            WaitSite::Checkpoint => "checkpoint_cv",
            WaitSite::Updates => "updates_cv",
            WaitSite::FlushQueue => "flush_cv",
            WaitSite::TxDurable => "tx.done_cv",
            WaitSite::Buffer => "buffer.cv",
            WaitSite::RecordBatch => "area.batch_cv",
        }
    }
}

/// One event count and its total time.
#[derive(Debug)]
struct Counter {
    events: AtomicU64,
    ns: AtomicU64,
}

impl Counter {
    const fn new() -> Self {
        Counter { events: AtomicU64::new(0), ns: AtomicU64::new(0) }
    }

    fn add(&self, took: Duration) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.ns.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, u64) {
        (self.events.load(Ordering::Relaxed), self.ns.load(Ordering::Relaxed))
    }
}

/// Ranks are below 64 (`Rank` is `repr(u8)`, the largest is 60).
const RANKS: usize = 64;

static LOCKS: [Counter; RANKS] = [const { Counter::new() }; RANKS];
static WAITS: [Counter; WaitSite::ALL.len()] = [const { Counter::new() }; WaitSite::ALL.len()];
/// Spins of the polling waits (`crate::polling`), and how many ended with the wait over.
static SPINS: Counter = Counter::new();
static SPIN_HITS: AtomicU64 = AtomicU64::new(0);
/// Waits that would have spun but whose site's score said spinning there does not pay.
static SPIN_SKIPS: AtomicU64 = AtomicU64::new(0);

/// Record a wait that skipped its spin on the site's score.
#[inline]
pub(crate) fn spin_skipped() {
    SPIN_SKIPS.fetch_add(1, Ordering::Relaxed);
}

/// Record a spin of `took`; `hit` when the wait was over before the budget ran out.
#[inline]
pub(crate) fn spun(took: Duration, hit: bool) {
    SPINS.add(took);
    if hit {
        SPIN_HITS.fetch_add(1, Ordering::Relaxed);
    }
}

/// One call site's contended acquisitions: claimed once (its key set from 0), then only
/// counted.
#[derive(Debug)]
struct SiteSlot {
    /// `(rank << 56) | location address`, 0 while free: one word, so a claim is one CAS.
    key: AtomicU64,
    /// The location itself, set by the thread that claimed the slot.
    loc: OnceLock<&'static Location<'static>>,
    waits: Counter,
}

/// Call sites tracked; the journal and file system take their ranked locks at fewer places
/// than this. Sites beyond it are counted under their rank only.
const SITES: usize = 256;

static SITE_TABLE: [SiteSlot; SITES] =
    [const { SiteSlot { key: AtomicU64::new(0), loc: OnceLock::new(), waits: Counter::new() } }; SITES];

/// Addresses below this fit beside a rank in a slot's key (user-space addresses on 64-bit
/// Linux are 47 or 48 bits wide).
const ADDR_LIMIT: u64 = 1 << 56;

/// The slot of `site` taking a lock of `rank` (claimed on first use), `None` if the table is
/// full or the address does not fit a key. Open addressing: lock-free, no allocation.
fn site_slot(rank: Rank, site: &'static Location<'static>) -> Option<&'static SiteSlot> {
    let addr = site as *const Location<'static> as usize as u64;
    if addr == 0 || addr >= ADDR_LIMIT {
        return None;
    }
    let key = (u64::from(rank as u8) << 56) | addr;
    let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize;
    for k in 0..SITES {
        let slot = &SITE_TABLE[(start + k) % SITES];
        match slot.key.load(Ordering::Acquire) {
            cur if cur == key => return Some(slot),
            0 => match slot.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let _ = slot.loc.set(site);
                    return Some(slot);
                }
                Err(cur) if cur == key => return Some(slot),
                Err(_) => {}
            },
            _ => {}
        }
    }
    None
}

/// Record that a lock of `rank` was found held at `site` and its taker waited `took` for it.
#[inline]
pub(crate) fn contended(rank: Rank, site: &'static Location<'static>, took: Duration) {
    LOCKS[rank as usize % RANKS].add(took);
    if let Some(slot) = site_slot(rank, site) {
        slot.waits.add(took);
    }
}

/// A condition variable whose parks are counted under its [`WaitSite`].
#[derive(Debug)]
pub struct WaitCv {
    cv: Condvar,
    site: WaitSite,
}

impl WaitCv {
    /// A condition variable counted as `site`.
    pub const fn new(site: WaitSite) -> Self {
        WaitCv { cv: Condvar::new(), site }
    }

    /// Wake every thread parked on it; returns how many there were.
    #[inline]
    pub fn notify_all(&self) -> usize {
        self.cv.notify_all()
    }

    /// Wake one parked thread; whether there was one.
    #[inline]
    pub fn notify_one(&self) -> bool {
        self.cv.notify_one()
    }

    /// Park on it, releasing `guard` meanwhile.
    #[inline]
    pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        let t0 = Instant::now();
        self.cv.wait(guard);
        WAITS[self.site as usize].add(t0.elapsed());
    }

    /// Park on it for at most `timeout`.
    #[inline]
    pub(crate) fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, timeout: Duration) -> WaitTimeoutResult {
        let t0 = Instant::now();
        let r = self.cv.wait_for(guard, timeout);
        WAITS[self.site as usize].add(t0.elapsed());
        r
    }

    /// Park on it until `deadline`.
    #[inline]
    pub(crate) fn wait_until<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        let t0 = Instant::now();
        let r = self.cv.wait_until(guard, deadline);
        WAITS[self.site as usize].add(t0.elapsed());
        r
    }
}

/// Record that a thread parked on `site` (outside a [`WaitCv`]: `polling::Event`) for `took`.
#[inline]
pub(crate) fn parked(site: WaitSite, took: Duration) {
    WAITS[site as usize].add(took);
}

/// Contention on one lock rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWaits {
    /// The locks of this rank.
    pub rank: Rank,
    /// Acquisitions that found the lock held and waited.
    pub contended: u64,
    /// Time those acquisitions waited, in nanoseconds.
    pub wait_ns: u64,
}

/// Contention at one call site: the source line that took a lock of `rank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteWaits {
    /// The lock's rank.
    pub rank: Rank,
    /// Source file of the taker.
    pub file: &'static str,
    /// Line of the taker.
    pub line: u32,
    /// Acquisitions there that found the lock held and waited.
    pub contended: u64,
    /// Time those acquisitions waited, in nanoseconds.
    pub wait_ns: u64,
}

/// Parks on one condition variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkWaits {
    /// The condition variable.
    pub site: WaitSite,
    /// Times a thread parked on it (timed waits that expired included).
    pub parks: u64,
    /// Time parked, in nanoseconds.
    pub parked_ns: u64,
}

/// Every counter at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockStats {
    /// Per lock rank, every rank listed.
    pub locks: Vec<LockWaits>,
    /// Per condition variable, every site listed.
    pub waits: Vec<ParkWaits>,
    /// Spins of polling waits.
    pub spins: u64,
    /// Spins that ended with the wait over (no park needed).
    pub spin_hits: u64,
    /// Waits that skipped their spin because spinning at their site had not been paying.
    pub spin_skips: u64,
    /// Time spun, in nanoseconds.
    pub spin_ns: u64,
    /// Per call site that ever waited for a lock (any order).
    pub sites: Vec<SiteWaits>,
}

/// The counters now.
pub fn snapshot() -> LockStats {
    LockStats {
        locks: Rank::ALL
            .iter()
            .map(|&rank| {
                let (contended, wait_ns) = LOCKS[rank as usize % RANKS].read();
                LockWaits { rank, contended, wait_ns }
            })
            .collect(),
        waits: WaitSite::ALL
            .iter()
            .map(|&site| {
                let (parks, parked_ns) = WAITS[site as usize].read();
                ParkWaits { site, parks, parked_ns }
            })
            .collect(),
        spins: SPINS.read().0,
        spin_hits: SPIN_HITS.load(Ordering::Relaxed),
        spin_skips: SPIN_SKIPS.load(Ordering::Relaxed),
        spin_ns: SPINS.read().1,
        sites: SITE_TABLE
            .iter()
            .filter_map(|slot| {
                let key = slot.key.load(Ordering::Acquire);
                let loc = *slot.loc.get()?;
                let rank = Rank::ALL.iter().copied().find(|&r| u64::from(r as u8) == key >> 56)?;
                let (contended, wait_ns) = slot.waits.read();
                Some(SiteWaits { rank, file: loc.file(), line: loc.line(), contended, wait_ns })
            })
            .collect(),
    }
}

impl LockStats {
    /// What happened between `before` and `self` (both from [`snapshot`]).
    pub fn since(&self, before: &LockStats) -> LockStats {
        let lock = |r: Rank| before.locks.iter().find(|l| l.rank == r).copied();
        let wait = |s: WaitSite| before.waits.iter().find(|w| w.site == s).copied();
        LockStats {
            locks: self
                .locks
                .iter()
                .map(|l| {
                    let b = lock(l.rank).unwrap_or(LockWaits { rank: l.rank, contended: 0, wait_ns: 0 });
                    LockWaits {
                        rank: l.rank,
                        contended: l.contended.saturating_sub(b.contended),
                        wait_ns: l.wait_ns.saturating_sub(b.wait_ns),
                    }
                })
                .collect(),
            waits: self
                .waits
                .iter()
                .map(|w| {
                    let b = wait(w.site).unwrap_or(ParkWaits { site: w.site, parks: 0, parked_ns: 0 });
                    ParkWaits {
                        site: w.site,
                        parks: w.parks.saturating_sub(b.parks),
                        parked_ns: w.parked_ns.saturating_sub(b.parked_ns),
                    }
                })
                .collect(),
            spins: self.spins.saturating_sub(before.spins),
            spin_hits: self.spin_hits.saturating_sub(before.spin_hits),
            spin_skips: self.spin_skips.saturating_sub(before.spin_skips),
            spin_ns: self.spin_ns.saturating_sub(before.spin_ns),
            sites: self
                .sites
                .iter()
                .map(|s| {
                    let b =
                        before.sites.iter().find(|b| (b.rank, b.file, b.line) == (s.rank, s.file, s.line));
                    SiteWaits {
                        contended: s.contended.saturating_sub(b.map_or(0, |b| b.contended)),
                        wait_ns: s.wait_ns.saturating_sub(b.map_or(0, |b| b.wait_ns)),
                        ..*s
                    }
                })
                .filter(|s| s.contended > 0)
                .collect(),
        }
    }

    /// Time waited for locks, all ranks, in nanoseconds.
    pub fn lock_wait_ns(&self) -> u64 {
        self.locks.iter().map(|l| l.wait_ns).sum()
    }

    /// Time parked on condition variables, all sites, in nanoseconds.
    pub fn park_ns(&self) -> u64 {
        self.waits.iter().map(|w| w.parked_ns).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_rank::RankedMutex;
    use std::sync::Arc;

    #[test]
    fn contention_and_parks_are_counted() {
        let before = snapshot();
        let m = Arc::new(RankedMutex::new(Rank::Log, 0u32));
        let cv = Arc::new(WaitCv::new(WaitSite::FlushQueue));
        let g = m.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = {
            let (m, cv) = (m.clone(), cv.clone());
            std::thread::spawn(move || {
                // Finds the lock held (the main thread sleeps holding it), then parks.
                tx.send(()).expect("send");
                let mut g = m.lock();
                while *g == 0 {
                    g.wait(&cv);
                }
            })
        };
        rx.recv().expect("recv");
        std::thread::sleep(Duration::from_millis(50));
        drop(g);
        std::thread::sleep(Duration::from_millis(20));
        *m.lock() = 1;
        cv.notify_all();
        t.join().expect("thread");
        let d = snapshot().since(&before);
        let log = d.locks.iter().find(|l| l.rank == Rank::Log).expect("rank listed");
        assert!(log.contended >= 1 && log.wait_ns > 0, "{log:?}");
        let park = d.waits.iter().find(|w| w.site == WaitSite::FlushQueue).expect("site listed");
        assert!(park.parks >= 1 && park.parked_ns > 0, "{park:?}");
        assert!(d.lock_wait_ns() >= log.wait_ns && d.park_ns() >= park.parked_ns);
        // The wait is also filed under the line that took the lock (in this file).
        let site = d.sites.iter().find(|s| s.rank == Rank::Log).expect("call site listed");
        assert!(site.file.ends_with("lock_stat.rs") && site.contended >= 1 && site.wait_ns > 0, "{site:?}");
    }
}
