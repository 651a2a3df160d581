//! Transaction lock-up, with or without opportunistic coalescing (CJFS §4.3, Algorithm 1).
//!
//! The commit thread locks the running transaction and waits for its outstanding handles.
//! A transaction *conflicts* when one of its buffers already has every allowed version in
//! flight with committing transactions. With coalescing the conflicting transaction goes
//! back to Running (waking the handles blocked on the lock), the commit thread waits for the
//! preceding commit to finish, and tries again — meanwhile the transaction keeps absorbing
//! operations. Without it (JBD2, BarrierFS) the lock-up is non-preemptive: the locked
//! transaction waits for the versions while every new handle waits for it.
//!
//! The same opportunism applies before a conflict exists (`pace`): with compound flush,
//! while a committed transaction still waits for the flush thread, committing the next one
//! now would only put it in the same queue, so it stays Running and keeps absorbing
//! operations until the flush thread takes the queue; then it is committed in time to join
//! that flush group. Fewer, larger transactions are in flight, so hot buffers rarely run
//! out of versions, and no fsync waits longer for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{JResult, JournalError};
use crate::log_core::LogCore;
use crate::transaction::{Transaction, TxState};

/// Longest a paced commit waits before looking again (a backstop: the flush thread wakes it).
pub(crate) const PACE_WAIT: Duration = Duration::from_millis(2);

/// Slack for the wake-up of a paced commit thread (timer lateness).
const PACE_SLACK: Duration = Duration::from_micros(30);

/// How long the commit thread should leave the requested transaction `t` Running for now
/// (`None`: commit it now). It is paced while coalescing and compound flush are on, a
/// committed transaction is still queued for the flush thread, and `t` is not filling up,
/// until the flush in progress is about to end: then a commit started now is handed over
/// just as the flush thread takes the queue, so it joins that group without the flush
/// thread idling for it.
pub(crate) fn pace(j: &LogCore, t: &Transaction) -> Option<Duration> {
    if !(j.set.config.coalescing
        && j.set.config.dual_thread
        && j.set.config.compound_flush > 1
        && j.flush_queue.pending() > 0
        && t.credits.load(Ordering::Relaxed) < j.max_tx_blocks / 2)
    {
        return None;
    }
    let Some(end) = j.timing.flush_expected_end() else { return Some(PACE_WAIT) };
    let start_by = end.checked_sub(j.timing.commit_estimate() + PACE_SLACK)?;
    let now = Instant::now();
    if now >= start_by { None } else { Some((start_by - now).min(PACE_WAIT)) }
}

/// Running estimates of how long a flush and a commit take, and when the flush in progress
/// started, for commit pacing. All fields are atomics (no lock).
#[derive(Debug)]
pub(crate) struct PaceTiming {
    /// Reference point for the nanosecond fields.
    epoch: Instant,
    /// When the group's last flush started or is expected to start (ns since `epoch` + 1),
    /// or 0 when the flush thread is not flushing a group.
    flush_started: AtomicU64,
    /// Moving average of a device flush, in ns.
    flush_ns: AtomicU64,
    /// Moving average of a commit from lock-up to hand-over, in ns.
    commit_ns: AtomicU64,
}

impl PaceTiming {
    pub(crate) fn new() -> Self {
        PaceTiming {
            epoch: Instant::now(),
            flush_started: AtomicU64::new(0),
            flush_ns: AtomicU64::new(0),
            commit_ns: AtomicU64::new(0),
        }
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64 + 1
    }

    /// The flush thread starts the last `flushes` device flushes of a group now (2 on a
    /// device without barriers: before and after the commit blocks; 1 with a barrier).
    pub(crate) fn group_flushes_start(&self, flushes: u32) {
        let ahead = self.flush_ns.load(Ordering::Relaxed) * u64::from(flushes.saturating_sub(1));
        self.flush_started.store(self.ns(Instant::now()) + ahead, Ordering::Relaxed);
    }

    /// A device flush took `took`; `last` when it was the group's last one.
    pub(crate) fn flush_ended(&self, took: Duration, last: bool) {
        if last {
            self.flush_started.store(0, Ordering::Relaxed);
        }
        ewma(&self.flush_ns, took);
    }

    /// A commit took `took` from lock-up to hand-over.
    pub(crate) fn commit_took(&self, took: Duration) {
        ewma(&self.commit_ns, took);
    }

    /// How long a caller is expected to wait for durability: a commit and a flush.
    pub(crate) fn durable_estimate(&self) -> Duration {
        Duration::from_nanos(self.commit_ns.load(Ordering::Relaxed) + self.flush_ns.load(Ordering::Relaxed))
    }

    /// How long a lock-up and the taking of versions are expected to take (a starter's wait
    /// for a Locked transaction).
    pub(crate) fn commit_estimate(&self) -> Duration {
        Duration::from_nanos(self.commit_ns.load(Ordering::Relaxed))
    }

    /// When the flush in progress is expected to end (`None` if no flush is in progress).
    fn flush_expected_end(&self) -> Option<Instant> {
        let s = self.flush_started.load(Ordering::Relaxed);
        if s == 0 {
            return None;
        }
        Some(self.epoch + Duration::from_nanos(s - 1 + self.flush_ns.load(Ordering::Relaxed)))
    }
}

/// Moving average with weight 1/8 for the new sample.
fn ewma(a: &AtomicU64, d: Duration) {
    let x = d.as_nanos() as u64;
    if a.load(Ordering::Relaxed) == 0 {
        a.store(x, Ordering::Relaxed);
    } else {
        crate::polling::ewma(a, x);
    }
}

/// How many of `tx`'s buffers need a version when none is left (a transaction conflict).
/// Counted once per transaction in the conflict statistics.
pub(crate) fn conflicts(j: &LogCore, tx: &Transaction) -> u64 {
    let max = j.set.config.max_versions.max(1);
    let bufs = tx.lists.lock().buffers.clone();
    let n = bufs
        .iter()
        .filter(|b| {
            let js = b.jstate();
            js.running == Some(tx.id()) && js.versions >= max
        })
        .count() as u64;
    if n > 0 && j.set.config.multi_version && tx.conflicts.load(Ordering::Relaxed) == 0 {
        tx.conflicts.fetch_add(n, Ordering::Relaxed);
        j.set.stats.conflicts.fetch_add(n, Ordering::Relaxed);
    }
    n
}

/// Wait until the preceding commit finishes (some transaction becomes durable) or nothing
/// is committing.
fn wait_preceding_commit(j: &LogCore) -> JResult<()> {
    let mut st = j.state.lock();
    let d0 = st.durable;
    while st.durable == d0 && !st.committing.is_empty() {
        if let Some(a) = &st.aborted {
            return Err(JournalError::Aborted(a.clone()));
        }
        if st.shutdown {
            return Err(JournalError::Shutdown);
        }
        st.wait(&j.done_cv);
    }
    Ok(())
}

fn nothing_committing(j: &LogCore) -> bool {
    j.state.lock().committing.is_empty()
}

/// Lock `tx` for commit: on return it is Locked, has no outstanding handles and (with
/// coalescing) no conflict. Time spent Locked is added to the statistics.
pub(crate) fn lock_up(j: &LogCore, tx: &Arc<Transaction>) -> JResult<()> {
    loop {
        // A transaction that already conflicts would only be put back to Running after the
        // lock-up had stalled every new handle: wait for the preceding commit unlocked. (Its
        // versions in flight only go down meanwhile, so this never misses a chance.)
        if j.set.config.coalescing && conflicts(j, tx) > 0 {
            j.set.stats.coalesce_retries.fetch_add(1, Ordering::Relaxed);
            wait_preceding_commit(j)?;
            if conflicts(j, tx) > 0 && !nothing_committing(j) {
                continue;
            }
        }
        let t0 = Instant::now();
        {
            let _st = j.state.lock();
            tx.set_state(TxState::Locked);
        }
        {
            let mut g = j.updates_lock.lock();
            while tx.updates.load(Ordering::SeqCst) > 0 {
                g.wait(&j.updates_cv);
            }
            // Under `updates_lock`: another log's writer pins only a transaction not yet
            // drained (`per_core::chain_to_owner`), so none can join from here on.
            tx.drained.store(true, Ordering::SeqCst);
        }
        // Without coalescing, a multi-version transaction's conflicts are counted here and
        // waited out in `take_versions`, still Locked.
        let conflicted = (j.set.config.coalescing || j.set.config.multi_version) && conflicts(j, tx) > 0;
        if !j.set.config.coalescing || !conflicted {
            j.set.stats.locked_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            return Ok(());
        }
        {
            let _g = j.updates_lock.lock();
            tx.drained.store(false, Ordering::SeqCst);
        }
        {
            let _st = j.state.lock();
            tx.set_state(TxState::Running);
        }
        j.locked_cv.notify_all();
        j.set.stats.locked_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        j.set.stats.coalesce_retries.fetch_add(1, Ordering::Relaxed);
        wait_preceding_commit(j)?;
    }
}
