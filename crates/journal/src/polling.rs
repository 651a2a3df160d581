//! Polling completion waits (the XFS journaling paper's polling, here spin-then-park): a
//! waiter for a transaction's durability first spins on an atomic for a bounded budget and
//! only then parks, so on a device where a commit is shorter than a park/unpark round trip
//! the waiter never sleeps, and a commit wakes only threads that actually parked.
//!
//! The setting is [`crate::JournalConfig::wait`]: [`WaitMode::Condvar`] parks at once (the
//! JBD2 way, and every preset's default until measurements say otherwise);
//! [`WaitMode::SpinPark`] spins first. The spin budget adapts to the log: the expected wait
//! (the log's moving averages of a commit and a flush) when that is below [`SPIN_LIMIT`], no
//! spinning at all on slower devices; and a thread spins only while fewer than all cores but
//! one are spinning, so spinners never take the last free core from the committer.
//!
//! The budget also adapts to how spins at each wait site have been paying off ([`SpinScore`],
//! in the manner of glibc's adaptive mutexes): it is cut to about twice the length of the
//! recent spins that ended the wait, and a site whose recent spins cost more CPU than the parks
//! they saved stops spinning, probing again every [`PROBE_EVERY`]th wait. On two cores under
//! 32 threads a spinner takes half the machine from runnable threads, so a spin that ends the
//! wait only half the time after most of its budget is a loss.
//!
//! Protocol: see [`Event`] (a [`Completion`] is an event and a flag), checked by a `loom`
//! model test: `RUSTFLAGS="--cfg loom" cargo test -p cjfs-journal --release --lib polling`,
//! which `scripts/test.sh` runs.
//!
//! Besides fsync callers (a transaction's [`Completion`]), handles waiting for a locked
//! transaction to switch (a transaction's `changed` event) and a serial commit waiting for
//! its predecessor to become durable wait this way, and so do starters that find no running
//! transaction: one of them is elected to open it and the others wait on the log's `opened`
//! event rather than queue on the state lock (`LogCore::open_elected`); the single-consumer
//! doorbells of `work_queue` (per-core commit requests and the flush hand-off) park their
//! consumer on an [`Event`] too.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::time::{Duration, Instant};

use crate::lock_stat::WaitSite;

/// How a thread waits for a transaction to become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Park on a condition variable at once.
    #[default]
    Condvar,
    /// Spin on the completion for a bounded budget, adapted to the device and to how recent
    /// spins at the wait site paid off, then park.
    SpinPark,
}

impl WaitMode {
    /// The setting's name (`condvar`, `spin_park`).
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Condvar => "condvar",
            WaitMode::SpinPark => "spin_park",
        }
    }
}

/// Longest spin: about a park/unpark round trip through the kernel plus a wake-up on
/// another core; waits expected to be longer park at once.
pub const SPIN_LIMIT: Duration = Duration::from_micros(50);

/// The spin budget for a wait expected to take `expected` (0: park at once).
pub fn spin_budget(mode: WaitMode, expected: Duration) -> Duration {
    match mode {
        WaitMode::SpinPark if !expected.is_zero() && expected <= SPIN_LIMIT => (expected * 2).min(SPIN_LIMIT),
        _ => Duration::ZERO,
    }
}

/// Threads spinning now, across every journal of the process.
static SPINNERS: AtomicUsize = AtomicUsize::new(0);

/// A skipped site spins on every this-many-th wait, so its score follows a changed load.
pub const PROBE_EVERY: u32 = 16;

/// Fixed-point one for [`SpinScore`]'s hit rate.
const ONE: u64 = 1024;

/// How recent spins at one wait site paid off: moving averages (weight 1/8) of the time a
/// spin took, of the share that ended the wait, and of the time those that did took.
///
/// The fields are updated by plain loads and stores, not read-modify-write: two spinners
/// finishing at once may lose one sample, which a heuristic can afford (no lock, no CAS loop
/// on a line every waiter touches).
#[derive(Debug)]
pub struct SpinScore {
    /// Average time of a spin, ns.
    avg_ns: AtomicU64,
    /// Average time of a spin that ended the wait, ns (0: none yet).
    hit_ns: AtomicU64,
    /// Share of spins that ended the wait, in 1/[`ONE`].
    hit_rate: AtomicU64,
    /// Waits since the site last spun while its score said not to (for the probe).
    skipped: AtomicU32,
}

impl Default for SpinScore {
    fn default() -> Self {
        Self::new()
    }
}

impl SpinScore {
    /// No history: spin with the device's budget.
    pub const fn new() -> Self {
        SpinScore {
            avg_ns: AtomicU64::new(0),
            hit_ns: AtomicU64::new(0),
            hit_rate: AtomicU64::new(ONE),
            skipped: AtomicU32::new(0),
        }
    }

    /// The budget to spin for out of the device's `budget`: zero when spinning here has
    /// cost more than it saved (a hit is worth one avoided park, about [`SPIN_LIMIT`]), except
    /// on a probe; otherwise at most twice a typical successful spin.
    pub fn budget(&self, budget: Duration) -> Duration {
        if budget.is_zero() {
            return budget;
        }
        let avg = self.avg_ns.load(Ordering::Relaxed);
        let worth = self.hit_rate.load(Ordering::Relaxed) * SPIN_LIMIT.as_nanos() as u64 / ONE;
        if avg > worth {
            if self.skipped.fetch_add(1, Ordering::Relaxed) + 1 < PROBE_EVERY {
                return Duration::ZERO;
            }
            self.skipped.store(0, Ordering::Relaxed);
        }
        match self.hit_ns.load(Ordering::Relaxed) {
            0 => budget,
            hit => budget.min(Duration::from_nanos(hit * 2).max(MIN_SPIN)),
        }
    }

    /// Record a spin that took `took` and ended the wait (`hit`) or ran out.
    pub fn record(&self, took: Duration, hit: bool) {
        let ns = took.as_nanos() as u64;
        ewma(&self.avg_ns, ns);
        ewma(&self.hit_rate, if hit { ONE } else { 0 });
        if hit {
            match self.hit_ns.load(Ordering::Relaxed) {
                0 => self.hit_ns.store(ns.max(1), Ordering::Relaxed),
                _ => ewma(&self.hit_ns, ns),
            }
        }
    }
}

/// Move the moving average in `a` towards `x` with weight 1/8, by a plain load and store
/// (a lost sample between two updaters is acceptable to every caller).
pub(crate) fn ewma(a: &AtomicU64, x: u64) {
    let old = a.load(Ordering::Relaxed);
    a.store(old - old / 8 + x / 8, Ordering::Relaxed);
}

/// Shortest budget the score cuts a spin to: below it a spin is all loop overhead.
const MIN_SPIN: Duration = Duration::from_micros(2);

/// Each wait site's score (the sites are few; every journal of the process shares them, as
/// it shares the spinner count).
static SCORES: [SpinScore; WaitSite::ALL.len()] = [const { SpinScore::new() }; WaitSite::ALL.len()];

/// Cores a spinner may use: all but one (the committer's), at least none.
fn spin_cores() -> usize {
    crate::per_core::cores().saturating_sub(1)
}

/// Spin until `ready()` or `budget` (as cut by `site`'s [`SpinScore`]) has passed, if a core
/// is free for it. Whether `ready()` became true.
pub fn spin_until(site: WaitSite, budget: Duration, ready: impl Fn() -> bool) -> bool {
    if budget.is_zero() {
        return false;
    }
    let score = &SCORES[site as usize];
    let budget = score.budget(budget);
    if budget.is_zero() {
        crate::lock_stat::spin_skipped();
        return false;
    }
    if SPINNERS.fetch_add(1, Ordering::AcqRel) >= spin_cores() {
        SPINNERS.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    let t0 = Instant::now();
    let mut ok = false;
    'spin: loop {
        for _ in 0..64 {
            if ready() {
                ok = true;
                break 'spin;
            }
            std::hint::spin_loop();
        }
        if t0.elapsed() >= budget {
            break;
        }
    }
    SPINNERS.fetch_sub(1, Ordering::AcqRel);
    let took = t0.elapsed();
    score.record(took, ok);
    crate::lock_stat::spun(took, ok);
    ok
}

/// A generation counter threads wait on for "something changed" (a transaction left its
/// state, a request arrived): a waiter reads [`Event::generation`] *before* it checks its
/// condition, and [`Event::wait`] returns once the generation moved on; a notifier changes
/// the condition, then calls [`Event::notify`]. Only threads that parked are woken, and only
/// those parked on this event, not every waiter of the journal; they park keyed by the
/// event's address (`parking_lot_core`), with no mutex of their own, so a wake-up does not
/// send them one by one through a lock (a condvar's waiters retake its mutex in turn: with
/// 32 waiters of one transaction that convoy was the top lock wait).
///
/// Protocol (checked by the `loom` model test, where the parking lot's bucket lock is a
/// mutex and its queue a condvar): `notify` increments `generation`, issues a SeqCst fence and
/// reads `parked`; a parking waiter adds itself to `parked`, issues a SeqCst fence and, under
/// the bucket lock that `unpark_all` also takes, reads `generation` before it sleeps. The
/// fences order the two store-then-load pairs, so either the waiter sees the new generation,
/// or the notifier sees the registration and unparks — after the waiter queued itself.
/// (Without the fences the model finds the lost wake-up: SeqCst accesses alone do not forbid
/// store buffering in loom's model.)
#[derive(Debug)]
pub struct Event {
    generation: AtomicU64,
    parked: AtomicUsize,
    /// Where parks are counted.
    site: WaitSite,
}

impl Event {
    /// An event whose parks are counted as `site`.
    pub fn new(site: WaitSite) -> Self {
        Event { generation: AtomicU64::new(0), parked: AtomicUsize::new(0), site }
    }

    /// The current generation: read it before checking the condition waited for.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The parking key: the event's address (stable while anyone waits, who borrows it).
    fn key(&self) -> usize {
        self as *const Event as usize
    }

    /// Announce a change: wake the threads parked on it (none are woken when none parked).
    pub fn notify(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `wait` (see the type's docs).
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) > 0 {
            // SAFETY: the key is this event's address, used only as a key; no callback.
            unsafe { parking_lot_core::unpark_all(self.key(), parking_lot_core::DEFAULT_UNPARK_TOKEN) };
        }
    }

    /// Wait until the generation differs from `seen` (spinning first for `budget`) or
    /// `deadline` passes. Whether it changed.
    pub fn wait(&self, seen: u64, budget: Duration, deadline: Option<Instant>) -> bool {
        let moved = || self.generation.load(Ordering::SeqCst) != seen;
        if moved() || spin_until(self.site, budget, moved) {
            return true;
        }
        self.parked.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let t0 = Instant::now();
        let changed = loop {
            if moved() {
                break true;
            }
            // SAFETY: the key is this event's address; `validate` runs under the bucket lock
            // and only reads an atomic; the other callbacks do nothing.
            let r = unsafe {
                parking_lot_core::park(
                    self.key(),
                    || self.generation.load(Ordering::SeqCst) == seen,
                    || {},
                    |_, _| {},
                    parking_lot_core::DEFAULT_PARK_TOKEN,
                    deadline,
                )
            };
            if r == parking_lot_core::ParkResult::TimedOut {
                break moved();
            }
        };
        self.parked.fetch_sub(1, Ordering::SeqCst);
        crate::lock_stat::parked(self.site, t0.elapsed());
        changed
    }
}

/// A one-shot completion: set once (a transaction became durable), waited for by any number
/// of threads, which may also be woken without it (abort, shutdown) to look again. An
/// [`Event`] and a flag: `set` stores the flag, then notifies.
#[derive(Debug)]
pub struct Completion {
    done: AtomicBool,
    /// Parks are counted as [`WaitSite::TxDurable`].
    event: Event,
}

impl Default for Completion {
    fn default() -> Self {
        Self::new()
    }
}

impl Completion {
    /// Not yet done.
    pub fn new() -> Self {
        Completion { done: AtomicBool::new(false), event: Event::new(WaitSite::TxDurable) }
    }

    /// Whether it is done.
    #[inline]
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// Mark it done and wake the threads parked on it.
    pub fn set(&self) {
        self.done.store(true, Ordering::SeqCst);
        self.event.notify();
    }

    /// Wake every parked thread without marking it done (they re-check why they wait).
    pub fn wake(&self) {
        self.event.notify();
    }

    /// Wait until it is done or `stop()` says to give up (checked before parking and after
    /// every wake-up; whoever makes it true must call [`Completion::wake`]). Spins first for
    /// `budget`. Returns whether it is done.
    pub fn wait(&self, budget: Duration, stop: impl Fn() -> bool) -> bool {
        if self.is_done() || spin_until(self.event.site, budget, || self.is_done()) {
            return true;
        }
        loop {
            let seen = self.event.generation();
            if self.is_done() {
                return true;
            }
            if stop() {
                return false;
            }
            self.event.wait(seen, Duration::ZERO, None);
        }
    }
}

/// The same protocol on `loom`'s primitives, for the model test (loom explores every
/// interleaving of its own atomics and locks, so the model restates [`Event`] and
/// [`Completion`] with them).
#[cfg(all(test, loom))]
mod model {
    use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
    use loom::sync::{Condvar, Mutex};

    pub struct Event {
        generation: AtomicU64,
        parked: AtomicUsize,
        lock: Mutex<()>,
        cv: Condvar,
    }

    impl Event {
        pub fn new() -> Self {
            Event {
                generation: AtomicU64::new(0),
                parked: AtomicUsize::new(0),
                lock: Mutex::new(()),
                cv: Condvar::new(),
            }
        }

        pub fn generation(&self) -> u64 {
            self.generation.load(Ordering::SeqCst)
        }

        pub fn notify(&self) {
            self.generation.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.parked.load(Ordering::SeqCst) > 0 {
                let _g = self.lock.lock().unwrap();
                self.cv.notify_all();
            }
        }

        /// One spin probe (the model explores its interleavings), then park.
        pub fn wait(&self, seen: u64) {
            if self.generation.load(Ordering::SeqCst) != seen {
                return;
            }
            let mut g = self.lock.lock().unwrap();
            self.parked.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            while self.generation.load(Ordering::SeqCst) == seen {
                g = self.cv.wait(g).unwrap();
            }
            self.parked.fetch_sub(1, Ordering::SeqCst);
        }
    }

    pub struct Completion {
        done: AtomicBool,
        event: Event,
    }

    impl Completion {
        pub fn new() -> Self {
            Completion { done: AtomicBool::new(false), event: Event::new() }
        }

        pub fn set(&self) {
            self.done.store(true, Ordering::SeqCst);
            self.event.notify();
        }

        pub fn wait(&self) -> bool {
            loop {
                let seen = self.event.generation();
                if self.done.load(Ordering::SeqCst) {
                    return true;
                }
                self.event.wait(seen);
            }
        }
    }

    /// Every interleaving with up to three preemptions (loom's usual bound: the full space
    /// of three threads retrying on a generation does not finish).
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    #[test]
    fn no_lost_wake_up_and_no_early_return() {
        model(|| {
            let c = loom::sync::Arc::new(Completion::new());
            let flag = loom::sync::Arc::new(AtomicBool::new(false));
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let (c, flag) = (c.clone(), flag.clone());
                    loom::thread::spawn(move || {
                        assert!(c.wait());
                        // No early return: what the completer published before `set` is seen.
                        assert!(flag.load(Ordering::SeqCst));
                    })
                })
                .collect();
            flag.store(true, Ordering::SeqCst);
            c.set();
            // A lost wake-up leaves a waiter parked forever: loom reports the deadlock.
            for w in waiters {
                w.join().unwrap();
            }
        });
    }

    /// The single-consumer doorbell of `work_queue`: a producer publishes work, then rings
    /// only if the consumer said it sleeps; the consumer says so, then looks for work once
    /// more before it parks. Every published request is seen.
    #[test]
    fn doorbell_never_sleeps_through_a_request() {
        model(|| {
            let ev = loom::sync::Arc::new(Event::new());
            let sleeping = loom::sync::Arc::new(AtomicBool::new(false));
            let slot = loom::sync::Arc::new(AtomicU64::new(0));
            let producer = {
                let (ev, sleeping, slot) = (ev.clone(), sleeping.clone(), slot.clone());
                loom::thread::spawn(move || {
                    slot.fetch_max(1, Ordering::SeqCst);
                    fence(Ordering::SeqCst);
                    if sleeping.load(Ordering::SeqCst) {
                        ev.notify();
                    }
                })
            };
            // The consumer: wait until the request is seen.
            loop {
                let seen = ev.generation();
                if slot.load(Ordering::SeqCst) == 1 {
                    break;
                }
                sleeping.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if slot.load(Ordering::SeqCst) == 0 {
                    ev.wait(seen);
                }
                sleeping.store(false, Ordering::SeqCst);
            }
            producer.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn budget_adapts_to_the_device() {
        assert_eq!(spin_budget(WaitMode::Condvar, Duration::from_micros(10)), Duration::ZERO);
        assert_eq!(spin_budget(WaitMode::SpinPark, Duration::from_micros(10)), Duration::from_micros(20));
        assert_eq!(spin_budget(WaitMode::SpinPark, Duration::from_micros(40)), SPIN_LIMIT);
        assert_eq!(
            spin_budget(WaitMode::SpinPark, Duration::from_micros(400)),
            Duration::ZERO,
            "slow device"
        );
        assert_eq!(spin_budget(WaitMode::SpinPark, Duration::ZERO), Duration::ZERO, "nothing measured yet");
    }

    #[test]
    fn a_site_whose_spins_do_not_pay_stops_spinning_but_probes() {
        let s = SpinScore::new();
        assert_eq!(s.budget(SPIN_LIMIT), SPIN_LIMIT, "no history: the device's budget");
        // Spins that run out their whole budget: after a few the site skips, probing every
        // PROBE_EVERY-th wait.
        for _ in 0..32 {
            s.record(SPIN_LIMIT, false);
        }
        let spun = (0..PROBE_EVERY * 4).filter(|_| !s.budget(SPIN_LIMIT).is_zero()).count();
        assert_eq!(spun, 4, "one probe per {PROBE_EVERY} waits");
        // Half the spins end the wait, but only after most of the budget: still a loss.
        for i in 0..64 {
            s.record(SPIN_LIMIT * 9 / 10, i % 2 == 0);
        }
        let spun = (0..PROBE_EVERY * 4).filter(|_| !s.budget(SPIN_LIMIT).is_zero()).count();
        assert_eq!(spun, 4, "a 50 % hit rate at 90 % of the budget does not pay");
        // The load changes: spins end the wait quickly again; the probes see it.
        for _ in 0..64 {
            s.record(Duration::from_micros(5), true);
        }
        let b = s.budget(SPIN_LIMIT);
        assert!(
            b >= Duration::from_micros(9) && b <= Duration::from_micros(11),
            "budget cut to about twice a successful spin: {b:?}"
        );
        assert_eq!(s.budget(Duration::ZERO), Duration::ZERO, "a slow device never spins");
        // Tiny successful spins: the budget keeps a floor.
        for _ in 0..64 {
            s.record(Duration::from_nanos(100), true);
        }
        assert_eq!(s.budget(SPIN_LIMIT), MIN_SPIN);
    }

    #[test]
    fn waiters_return_only_when_done_or_told_to_stop() {
        for budget in [Duration::ZERO, SPIN_LIMIT] {
            let c = Arc::new(Completion::new());
            let ts: Vec<_> = (0..4)
                .map(|_| {
                    let c = c.clone();
                    std::thread::spawn(move || c.wait(budget, || false))
                })
                .collect();
            std::thread::sleep(Duration::from_millis(20));
            assert!(ts.iter().all(|t| !t.is_finished()), "a waiter returned before the completion");
            c.set();
            for t in ts {
                assert!(t.join().expect("waiter"));
            }
            assert!(c.wait(budget, || false), "a late waiter sees it done at once");
        }
        let c = Arc::new(Completion::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = {
            let (c, stop) = (c.clone(), stop.clone());
            std::thread::spawn(move || c.wait(Duration::ZERO, || stop.load(Ordering::SeqCst)))
        };
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::SeqCst);
        c.wake();
        assert!(!t.join().expect("waiter"), "woken to stop, not done");
    }
}
