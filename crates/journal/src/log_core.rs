//! One log's core: its running and committing transactions, handle admission into them,
//! commit requests, waiting for durability, its log space and checkpoint list. Its commit,
//! flush and checkpoint threads run over it (`commit.rs`, `flush.rs`, `checkpoint.rs`); what
//! every log of the journal shares is [`crate::set::Shared`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::lock_stat::{WaitCv, WaitSite};
use cjfs_blockdev::{LogId, TxId};

use crate::lock_rank::{Rank, RankedGuard, RankedMutex};

use crate::area::JournalArea;
use crate::buffer::Tid;
use crate::error::{JResult, JournalError};
use crate::handle::Handle;
use crate::log::LogState;
use crate::set::Shared;
use crate::transaction::{Transaction, TxState};

/// One log's state. Protected by [`LogCore::state`] (JBD2's j_state_lock).
pub(crate) struct LogStateLocked {
    /// The running transaction, created on demand by the first handle.
    pub running: Option<Arc<Transaction>>,
    /// Transactions past Running and not yet durable, oldest first.
    pub committing: VecDeque<Arc<Transaction>>,
    /// Id the next running transaction gets.
    pub next_tid: Tid,
    /// Highest transaction id someone asked to commit.
    pub commit_request: Tid,
    /// Every transaction up to this id is durable.
    pub durable: Tid,
    /// Set when the journal aborted (failed flush, failed log write): the cause.
    pub aborted: Option<String>,
    /// Threads must exit.
    pub shutdown: bool,
    /// The log passed its high-water mark since the checkpoint thread last looked.
    pub checkpoint_wanted: bool,
}

/// One log of the journal (JBD2's `journal_t` minus what the set shares).
///
/// Locks (see the crate's lock order): `state` (the log's transactions), `updates_lock`
/// (pairs with `updates_cv` so a stop never misses the commit thread's wait), `log` (log
/// head/tail, owned by the commit, flush and checkpoint paths), `sb_write` (serialises this
/// log's superblock writes), `checkpoint_lock` (one checkpoint at a time), `commit_lock`
/// (one commit at a time in serial modes). Everything else is immutable or atomic.
pub(crate) struct LogCore {
    /// What every log shares: device, buffer cache, configuration, statistics. Immutable.
    pub set: Arc<Shared>,
    /// This log's number in the set (0: the primary journal). Immutable.
    pub id: LogId,
    /// Where the log lives. Immutable.
    pub area: JournalArea,
    /// The log's transactions. Lock: itself.
    pub state: RankedMutex<LogStateLocked>,
    /// Wakes the commit thread (commit requests, shutdown).
    pub commit_cv: WaitCv,
    /// Wakes starters waiting for a Locked transaction to switch.
    pub locked_cv: WaitCv,
    /// Wakes the journal's own threads waiting for some transaction to become durable
    /// (callers waiting for a given transaction wait on its `done` completion).
    pub done_cv: WaitCv,
    /// Pairs with `updates_cv`.
    pub updates_lock: RankedMutex<()>,
    /// Signalled when a transaction's last handle stops.
    pub updates_cv: WaitCv,
    /// Log head/tail and transactions in the log. Lock: itself.
    pub log: RankedMutex<LogState>,
    /// Serialises journal superblock writes.
    pub sb_write: RankedMutex<()>,
    /// One checkpoint at a time.
    pub checkpoint_lock: RankedMutex<()>,
    /// Held by whoever runs a commit in serial modes (commit thread or an inline committer).
    pub commit_lock: RankedMutex<()>,
    /// Buffers with a committed version awaiting checkpoint, each with the transaction of
    /// this log that committed it (a buffer may appear several times). Lock: itself.
    pub checkpoint_list: RankedMutex<Vec<(Arc<crate::buffer::Buffer>, Tid)>>,
    /// Per-core journaling: the versions this log holds on disk, oldest first, as
    /// `(buffer, tid, stamp)`, dropped (with the buffer's `in_logs` entry) when the log
    /// releases them. Lock: itself (a leaf).
    pub in_log: RankedMutex<VecDeque<(Arc<crate::buffer::Buffer>, Tid, u64)>>,
    /// Per-core journaling: this log's transactions stamped and not yet released, as
    /// `(tid, stamp)`, oldest first (a revoke of another log waits for those stamped before
    /// it). Lock: itself (a leaf).
    pub stamped: RankedMutex<VecDeque<(Tid, u64)>>,
    /// Per-core journaling: transactions that revoked blocks, each with the other logs'
    /// transactions that must leave their logs first (see `checkpoint::hold_for_revoke`).
    /// Lock: itself (a leaf).
    pub revoke_holds: RankedMutex<Vec<(Tid, Vec<TxId>)>>,
    /// Files that left data journaling by revoke (`unjournal.rs`): the transactions from a
    /// hold's `oldest` on may not leave the log before its switch `r` is durable. Lock:
    /// itself (a leaf).
    pub leave_holds: RankedMutex<Vec<crate::unjournal::LeaveHold>>,
    /// Numbers the holds (atomic).
    pub leave_seq: AtomicU64,
    /// Ordered-data checksums: buffers whose home contents each transaction summed, oldest
    /// first, until a later transaction confirms them (`ordered_sums::release`). Lock:
    /// itself (a leaf; buffers' jstates are taken after it is released).
    pub summed: RankedMutex<crate::ordered_sums::SummedList>,
    /// The newest transaction the superblock's `osum_confirmed` names as confirmed
    /// (atomic; written under `sb_write`).
    pub osum_confirmed: AtomicU64,
    /// Work for the flush thread (a mutex and `flush_cv`, or lock-free with per-core
    /// dispatch; see `work_queue`).
    pub flush_queue: crate::work_queue::FlushQueue,
    /// Per-core commit-request slots (used with per-core dispatch). Atomics.
    pub requests: crate::work_queue::CommitRequests,
    /// Wakes the checkpoint thread.
    pub checkpoint_cv: WaitCv,
    /// The running transaction as `state.running` holds it, for the lock-free handle start
    /// (JBD2 takes its state lock shared there; a user-space mutex taken by every handle
    /// is a convoy as soon as a holder is preempted). Written only under `state`.
    pub running_fast: arc_swap::ArcSwapOption<Transaction>,
    /// `state.committing` as last changed, for waiters that look up their transaction
    /// without the state lock. Written only under `state`.
    pub committing_fast: arc_swap::ArcSwap<Vec<Arc<Transaction>>>,
    /// `state.aborted.is_some() || state.shutdown`, for the fast paths. Written under `state`.
    pub closed: AtomicBool,
    /// A starter is opening the next running transaction for the others (polling waits;
    /// see `LogCore::open_elected`). Atomic.
    pub opening: AtomicBool,
    /// Moves on when the elected starter has opened the running transaction (or found it
    /// could not). Atomic.
    pub opened: crate::polling::Event,
    /// `state.shutdown`, for the flush thread's idle checks (reading it under `state` put
    /// the flush thread in the handles' lock convoy once per empty queue). Written under `state`.
    pub shutdown_fast: AtomicBool,
    /// `state.durable`, for the fast paths. Written under `state`.
    pub durable_fast: AtomicU64,
    /// Highest transaction `request_commit` was called for (never behind `state`'s
    /// `commit_request` for those calls; the state field stays authoritative).
    pub commit_request_fast: AtomicU64,
    /// Flush and commit time estimates for commit pacing (atomics).
    pub timing: crate::coalescing::PaceTiming,
    /// Largest transaction, in blocks. Immutable.
    pub max_tx_blocks: u32,
    /// Per-core journaling: log blocks the transaction being committed may still reserve
    /// (its credits from lock-up until its log space is reserved; admission counts them).
    pub unreserved: AtomicU64,
    /// Free blocks of the log ring, as `log` last left it (per-core journaling's admission
    /// reads it without the lock). Written under `log`.
    pub free_fast: AtomicU64,
}

impl LogCore {
    /// Log `id` of the set, over `area`, with `log` read from its superblock; its next
    /// transaction continues the superblock's sequence.
    pub fn new(set: Arc<Shared>, id: LogId, area: JournalArea, log: LogState) -> LogCore {
        let first_tid = u64::from(log.sb.s_sequence.max(1));
        let flush_queue = crate::work_queue::FlushQueue::new(set.config.dispatch);
        let free = log.ring.free();
        let max_tx_blocks = match set.config.max_tx_blocks {
            Some(m) => m.min(log.ring.capacity() as u32 / 2),
            None => (log.ring.capacity() / 4) as u32,
        }
        .max(16);
        LogCore {
            set,
            id,
            area,
            state: RankedMutex::new(
                Rank::State,
                LogStateLocked {
                    running: None,
                    committing: VecDeque::new(),
                    next_tid: first_tid,
                    commit_request: first_tid - 1,
                    durable: first_tid - 1,
                    aborted: None,
                    shutdown: false,
                    checkpoint_wanted: false,
                },
            ),
            commit_cv: WaitCv::new(WaitSite::CommitRequest),
            locked_cv: WaitCv::new(WaitSite::LockedTx),
            done_cv: WaitCv::new(WaitSite::LogDurable),
            updates_lock: RankedMutex::new(Rank::Leaf, ()),
            updates_cv: WaitCv::new(WaitSite::Updates),
            log: RankedMutex::new(Rank::Log, log),
            sb_write: RankedMutex::new(Rank::SbWrite, ()),
            checkpoint_lock: RankedMutex::new(Rank::CheckpointLock, ()),
            commit_lock: RankedMutex::new(Rank::CommitLock, ()),
            checkpoint_list: RankedMutex::new(Rank::Leaf, Vec::new()),
            revoke_holds: RankedMutex::new(Rank::Leaf, Vec::new()),
            leave_holds: RankedMutex::new(Rank::Leaf, Vec::new()),
            leave_seq: AtomicU64::new(0),
            summed: RankedMutex::new(Rank::Leaf, std::collections::VecDeque::new()),
            osum_confirmed: AtomicU64::new(0),
            in_log: RankedMutex::new(Rank::Leaf, VecDeque::new()),
            stamped: RankedMutex::new(Rank::Leaf, VecDeque::new()),
            flush_queue,
            requests: crate::work_queue::CommitRequests::new(first_tid - 1),
            checkpoint_cv: WaitCv::new(WaitSite::Checkpoint),
            running_fast: arc_swap::ArcSwapOption::empty(),
            committing_fast: arc_swap::ArcSwap::from_pointee(Vec::new()),
            timing: crate::coalescing::PaceTiming::new(),
            closed: AtomicBool::new(false),
            shutdown_fast: AtomicBool::new(false),
            opening: AtomicBool::new(false),
            opened: crate::polling::Event::new(WaitSite::LockedTx),
            durable_fast: AtomicU64::new(first_tid - 1),
            free_fast: AtomicU64::new(free),
            unreserved: AtomicU64::new(0),
            commit_request_fast: AtomicU64::new(first_tid - 1),
            max_tx_blocks,
        }
    }

    /// Transaction `tid` of this log.
    pub fn tx_id(&self, tid: Tid) -> TxId {
        TxId::new(self.id, tid)
    }

    /// Whether this log's transaction `tid` is durable (with several logs: and valid).
    pub fn is_durable(&self, tid: Tid) -> bool {
        self.set.chains.valid_upto(usize::from(self.id)) >= tid
    }

    /// Wake the checkpoint thread now (another log waits for this one's tail).
    pub fn want_checkpoint(&self) {
        let mut st = self.state.lock();
        st.checkpoint_wanted = true;
        self.checkpoint_cv.notify_all();
    }

    /// Every transaction of this log up to this id has left the log on disk (released by a
    /// checkpoint, or never logged).
    pub fn released(&self) -> Tid {
        let l = self.log.lock();
        match l.ring.spans().front() {
            Some(s) => s.id - 1,
            None => self.durable_fast.load(Ordering::Acquire),
        }
    }

    /// Id of the running transaction, or of the last one if none is running.
    pub fn current_tid(&self) -> Tid {
        if let Some(t) = self.running_fast.load().as_ref() {
            return t.tid;
        }
        let st = self.state.lock();
        match &st.running {
            Some(t) => t.tid,
            None => st.next_tid - 1,
        }
    }

    /// The abort cause, if the journal aborted.
    pub fn aborted(&self) -> Option<String> {
        // Hot (every first write access to a buffer): no state lock unless closed.
        if !self.closed.load(Ordering::Acquire) {
            return None;
        }
        self.state.lock().aborted.clone()
    }

    /// Abort the journal, every log of it: every waiter and every later operation gets the
    /// cause.
    pub fn abort(&self, cause: String) {
        self.set.abort(cause);
    }

    /// This log's part of an abort (see [`Shared::abort`]): record the cause and wake
    /// everyone who waits on this log.
    pub(crate) fn abort_log(&self, cause: &str) {
        let mut st = self.state.lock();
        if st.aborted.is_none() {
            st.aborted = Some(cause.to_string());
        }
        self.closed.store(true, Ordering::SeqCst);
        drop(st);
        self.wake_all_waiters();
        self.locked_cv.notify_all();
        self.wake_committer();
        self.flush_queue.wake();
        self.checkpoint_cv.notify_all();
    }

    pub fn updates_done(&self) {
        let _g = self.updates_lock.lock();
        self.updates_cv.notify_all();
    }

    /// Stop the log's threads' loops and wake everyone waiting on it (shutdown; the caller
    /// joins the threads).
    pub(crate) fn stop(&self) {
        {
            let mut st = self.state.lock();
            st.shutdown = true;
            self.shutdown_fast.store(true, Ordering::SeqCst);
            self.closed.store(true, Ordering::SeqCst);
        }
        self.wake_committer();
        // The flush thread checks `shutdown` and then waits with no timeout: the wake-up is
        // given under the queue's lock (or after moving its doorbell's generation on), or it
        // can fall between its check and its wait and the join hangs forever (found by the
        // crash harness: an unmount that never returned).
        self.flush_queue.wake();
        self.checkpoint_cv.notify_all();
        self.wake_all_waiters();
        self.locked_cv.notify_all();
    }

    /// Wake the commit thread to look again (a request raised under `state`, shutdown,
    /// abort, the end of a paced wait).
    pub fn wake_committer(&self) {
        self.commit_cv.notify_all();
        if self.set.config.dispatch == crate::work_queue::Dispatch::PerCore {
            self.requests.bell.ring();
        }
    }

    /// Ask for `tid` to be committed (no wait).
    pub fn request_commit(&self, tid: Tid) {
        if self.set.config.dispatch == crate::work_queue::Dispatch::PerCore {
            // In the caller's core's slot, without the state lock; the commit thread drains.
            self.requests.request(tid);
            return;
        }
        // Only the first request for a transaction takes the state lock (many fsyncs share
        // one transaction under load).
        if self.commit_request_fast.fetch_max(tid, Ordering::AcqRel) >= tid {
            return;
        }
        let mut st = self.state.lock();
        if st.commit_request < tid {
            st.commit_request = tid;
            drop(st);
            self.commit_cv.notify_all();
        }
    }

    /// Commit `tid` (if not yet) and wait until it is durable.
    pub fn commit_wait(self: &Arc<Self>, tid: Tid) -> JResult<()> {
        if !self.set.config.dual_thread
            && self.durable_fast.load(Ordering::Acquire) < tid
            && crate::commit::commit_inline(self, tid)?
        {
            self.set.stats.fsync_waits.fetch_add(1, Ordering::Relaxed);
            if self.is_durable(tid) {
                return Ok(());
            }
            // Handed to the flush thread after all (a planted bug's path).
            return self.wait(tid);
        }
        self.request_commit(tid);
        self.wait(tid)
    }

    /// Wait until `tid` is durable (with several logs: and valid).
    pub fn wait(&self, tid: Tid) -> JResult<()> {
        self.set.stats.fsync_waits.fetch_add(1, Ordering::Relaxed);
        if self.is_durable(tid) {
            return Ok(());
        }
        // Usually the running or a committing transaction: found without the state lock.
        let found = self
            .running_fast
            .load_full()
            .filter(|t| t.tid == tid)
            .or_else(|| self.committing_fast.load().iter().find(|t| t.tid == tid).cloned());
        let tx = match found {
            Some(t) => Some(t),
            None => {
                let st = self.state.lock();
                if self.is_durable(tid) {
                    return Ok(());
                }
                self.closed_error(&st)?;
                st.committing
                    .iter()
                    .find(|t| t.tid == tid)
                    .or(st.running.as_ref().filter(|t| t.tid == tid))
                    .cloned()
            }
        };
        let Some(tx) = tx else {
            // Not a transaction we know of (not opened yet): wait on the journal's condition.
            // (Validity is published before `done_cv` is notified under `state`: no lost wake-up.)
            let mut st = self.state.lock();
            while !self.is_durable(tid) {
                self.closed_error(&st)?;
                st.wait(&self.done_cv);
            }
            return Ok(());
        };
        let budget = crate::polling::spin_budget(self.set.config.wait, self.timing.durable_estimate());
        loop {
            if tx.done.wait(budget, || self.closed.load(Ordering::SeqCst)) {
                return Ok(());
            }
            // Woken because the log closed: durable after all, or the abort's cause.
            let st = self.state.lock();
            if self.is_durable(tid) {
                return Ok(());
            }
            self.closed_error(&st)?;
        }
    }

    /// The error for an aborted or shut-down journal, if it is.
    fn closed_error(&self, st: &LogStateLocked) -> JResult<()> {
        if let Some(a) = &st.aborted {
            return Err(JournalError::Aborted(a.clone()));
        }
        if st.shutdown {
            return Err(JournalError::Shutdown);
        }
        Ok(())
    }

    /// Wake every caller waiting for a transaction (abort, shutdown). Takes `state`, then
    /// each transaction's `done`.
    pub fn wake_all_waiters(&self) {
        let txs: Vec<Arc<Transaction>> = {
            let st = self.state.lock();
            st.committing.iter().chain(st.running.iter()).cloned().collect()
        };
        for t in txs {
            t.wake_waiters();
            t.changed.notify();
        }
        self.done_cv.notify_all();
    }

    /// Per-core journaling's admission by log space (JBD2 reserves log space at handle start
    /// too): a handle joins only while the log has room for the transaction being committed
    /// (its credits, until it reserved its span) and the running one at its largest, so a transaction that may already be chained
    /// to other logs never waits for log space at commit — a wait that could close a cycle
    /// through those logs' validity (a durable transaction waiting for this one to commit,
    /// holding back the other log's checkpoint). One log needs no such rule.
    fn has_room(&self) -> bool {
        !self.set.multi_log()
            || self.free_fast.load(Ordering::Acquire)
                >= u64::from(self.max_tx_blocks) + self.unreserved.load(Ordering::Acquire) + 8
    }

    /// Publish `st.committing` for the lock-free lookup (call under `state` after changing it).
    pub(crate) fn publish_committing(&self, st: &LogStateLocked) {
        self.committing_fast.store(Arc::new(st.committing.iter().cloned().collect()));
    }

    /// Note the ring's free space after `l` changed it.
    pub(crate) fn note_free(&self, l: &LogState) {
        self.free_fast.store(l.ring.free(), Ordering::Release);
    }

    /// Wait, with `state` held on entry, until `tx` (the running transaction, Locked or full)
    /// changes state, or the log closes; the caller then starts again. On `locked_cv`, `state`
    /// held again on return; with polling waits the state lock is released, the caller spins,
    /// then parks on the transaction's own `changed` event (a state change wakes only that
    /// transaction's starters), and returns `None`: it tries the lock-free start before it
    /// takes `state` again, so the woken starters do not all queue on the log's state lock.
    fn wait_switch<'a>(
        &'a self,
        mut st: RankedGuard<'a, LogStateLocked>,
        tx: &Arc<Transaction>,
    ) -> Option<RankedGuard<'a, LogStateLocked>> {
        if self.set.config.wait == crate::polling::WaitMode::Condvar {
            st.wait(&self.locked_cv);
            return Some(st);
        }
        // Read under `state`, which every change to Running, Locked or Committing holds: a
        // change after this moves the generation on.
        let seen = tx.changed.generation();
        tx.starters.fetch_add(1, Ordering::SeqCst);
        drop(st);
        self.wait_for_switch(tx, seen);
        None
    }

    /// Polling wait for `tx`'s state to move on from generation `seen`, as one of its
    /// counted starters (the caller added itself to `starters`; this takes it off).
    fn wait_for_switch(&self, tx: &Transaction, seen: u64) {
        let budget = crate::polling::spin_budget(self.set.config.wait, self.timing.commit_estimate());
        tx.changed.wait(seen, budget, None);
        tx.starters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Polling waits: when the running transaction is Locked, wait for its switch without
    /// the state lock (every starter of a busy log would otherwise queue on it here), then
    /// join the next one lock-free if it is open. `None`: take the locked path.
    fn wait_locked_fast(self: &Arc<Self>, credits: u32) -> Option<Handle> {
        if self.set.config.wait == crate::polling::WaitMode::Condvar {
            return None;
        }
        let tx = self.running_fast.load_full()?;
        tx.starters.fetch_add(1, Ordering::SeqCst);
        // Generation first, then the state: a switch after the state was read moves the
        // generation on, so the wait cannot miss it.
        let seen = tx.changed.generation();
        if tx.state() == TxState::Locked && !self.closed.load(Ordering::SeqCst) {
            let t0 = Instant::now();
            self.wait_for_switch(&tx, seen);
            self.set.stats.start_wait_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        } else {
            tx.starters.fetch_sub(1, Ordering::SeqCst);
        }
        self.try_start_fast(credits)
    }

    /// Polling waits: when no transaction is running, one starter (elected by `opening`)
    /// takes `state` to open it and the others wait on `opened`, then join lock-free, instead
    /// of queueing on `state` behind it — the herd of fsync callers woken together by one
    /// commit, each starting its next handle (the largest `state` call site left with polling
    /// waits). `None`: take the locked path.
    fn open_elected(self: &Arc<Self>, credits: u32) -> Option<Handle> {
        if self.set.config.wait == crate::polling::WaitMode::Condvar
            || self.running_fast.load().is_some()
            || self.closed.load(Ordering::Acquire)
        {
            return None;
        }
        // Generation before the election: a failed election means the winner has not yet
        // cleared `opening`, so its notify comes after this read and ends the wait.
        let seen = self.opened.generation();
        if self.opening.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            {
                let mut st = self.state.lock();
                if st.running.is_none() && !st.shutdown && st.aborted.is_none() && !self.held_back() {
                    self.open_running(&mut st);
                }
            }
            self.opening.store(false, Ordering::SeqCst);
            self.opened.notify();
        } else {
            let budget = crate::polling::spin_budget(self.set.config.wait, crate::polling::SPIN_LIMIT / 4);
            self.opened.wait(seen, budget, None);
        }
        self.try_start_fast(credits)
    }

    /// Open the next running transaction (none may be running).
    pub(crate) fn open_running(&self, st: &mut LogStateLocked) {
        debug_assert!(st.running.is_none());
        let tid = st.next_tid;
        st.next_tid += 1;
        let t = Arc::new(Transaction::new(self.id, tid));
        self.running_fast.store(Some(t.clone()));
        st.running = Some(t);
    }

    /// Lock-free handle start: join the running transaction if it is Running and has room.
    /// `None` sends the caller to the locked path (no running transaction, Locked, full,
    /// closed).
    fn try_start_fast(self: &Arc<Self>, credits: u32) -> Option<Handle> {
        if self.closed.load(Ordering::Acquire) || !self.has_room() || self.held_back() {
            return None;
        }
        let tx = self.running_fast.load_full()?;
        if tx.state() != TxState::Running {
            return None;
        }
        tx.updates.fetch_add(1, Ordering::SeqCst);
        // Pairs with the lock-up's store of Locked then read of `updates` (both SeqCst):
        // either it sees this update and waits for it, or this sees Locked and backs off.
        if tx.state() != TxState::Running || self.closed.load(Ordering::SeqCst) || self.held_back() {
            self.undo_update(&tx);
            return None;
        }
        let have = tx.credits.fetch_add(credits, Ordering::AcqRel);
        if have > 0 && have + credits > self.max_tx_blocks {
            tx.credits.fetch_sub(credits, Ordering::AcqRel);
            self.undo_update(&tx);
            return None;
        }
        tx.handles.fetch_add(1, Ordering::Relaxed);
        self.set.stats.handles.fetch_add(1, Ordering::Relaxed);
        Some(Handle::new(self.clone(), tx, credits))
    }

    /// Whether new handles are held back (`Shared::updates_barrier`).
    fn held_back(&self) -> bool {
        self.set.updates_barrier.load(Ordering::SeqCst) > 0
    }

    fn undo_update(&self, tx: &Transaction) {
        if tx.updates.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.updates_done();
        }
    }

    /// Join the running transaction with `credits` reserved.
    pub fn start(self: &Arc<Self>, credits: u32) -> JResult<Handle> {
        if credits > self.max_tx_blocks {
            return Err(JournalError::TooManyCredits { wanted: credits, max: self.max_tx_blocks });
        }
        if let Some(h) = self.try_start_fast(credits) {
            return Ok(h);
        }
        if let Some(h) = self.wait_locked_fast(credits) {
            return Ok(h);
        }
        if let Some(h) = self.open_elected(credits) {
            return Ok(h);
        }
        let mut st = self.state.lock();
        loop {
            if let Some(a) = &st.aborted {
                return Err(JournalError::Aborted(a.clone()));
            }
            if st.shutdown {
                return Err(JournalError::Shutdown);
            }
            if self.held_back() {
                drop(st);
                self.set.wait_barrier();
                st = self.state.lock();
                continue;
            }
            if st.running.is_none() {
                self.open_running(&mut st);
                // The commit thread is not woken: its timed sleep, armed when nothing or an
                // older transaction was running, ends before this one is due and re-arms for
                // it. A wake-up here would cost every first handle a cross-core futex wake.
            }
            let tx = match &st.running {
                Some(t) => t.clone(),
                None => continue,
            };
            if !self.has_room() {
                // Wait for this log's checkpoint (and the others', which it may wait for).
                drop(st);
                self.set.stats.space_waits.fetch_add(1, Ordering::Relaxed);
                for l in self.set.logs_now().unwrap_or_default() {
                    l.want_checkpoint();
                }
                st = self.state.lock();
                st.wait_for(&self.done_cv, std::time::Duration::from_millis(1));
                continue;
            }
            if tx.state() != TxState::Running {
                let t0 = Instant::now();
                let held = self.wait_switch(st, &tx);
                self.set.stats.start_wait_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                st = match held {
                    Some(g) => g,
                    None => match self.try_start_fast(credits) {
                        Some(h) => return Ok(h),
                        None => self.state.lock(),
                    },
                };
                continue;
            }
            let have = tx.credits.load(Ordering::Relaxed);
            if have > 0 && have + credits > self.max_tx_blocks {
                // Full: have it committed and join the next one.
                if st.commit_request < tx.tid {
                    st.commit_request = tx.tid;
                    self.wake_committer();
                }
                st = match self.wait_switch(st, &tx) {
                    Some(g) => g,
                    None => match self.try_start_fast(credits) {
                        Some(h) => return Ok(h),
                        None => self.state.lock(),
                    },
                };
                continue;
            }
            tx.credits.fetch_add(credits, Ordering::Relaxed);
            tx.updates.fetch_add(1, Ordering::SeqCst);
            tx.handles.fetch_add(1, Ordering::Relaxed);
            drop(st);
            self.set.stats.handles.fetch_add(1, Ordering::Relaxed);
            return Ok(Handle::new(self.clone(), tx, credits));
        }
    }
}
