//! Transactions and their state machine.
//!
//! ```text
//! Running ──lock──▶ Locked ──versions taken──▶ Committing ──log written──▶ Flushing
//!    ▲                 │                                                      │
//!    └── (coalescing: conflict, back to Running)                durable ──▶ Committed
//! ```
//! A running transaction collects handles; the commit thread locks it (no new handles),
//! waits for outstanding handles to stop, takes a version of every buffer, lets a new
//! running transaction open and writes the versions to the log; the flush step makes them
//! durable and wakes waiters, and the transaction object is done. What remains — writing
//! the blocks home and freeing the log — is per buffer (its checkpoint version) and per
//! log span ([`crate::ring::LogRing`]), not a state of the transaction (JBD2 keeps
//! checkpoint lists per transaction; here a checkpoint writes each buffer's newest durable
//! version once, whichever transaction it came from).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use crate::lock_rank::{Rank, RankedMutex};

use cjfs_blockdev::{LogId, TxId};

use crate::buffer::{Buffer, Tid};

/// Where a transaction is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum TxState {
    /// Accepting handles.
    Running = 0,
    /// No new handles; waiting for outstanding ones to stop.
    Locked = 1,
    /// Versions taken; log blocks being written.
    Committing = 2,
    /// Log blocks written; waiting for the flush and the commit record.
    Flushing = 3,
    /// Durable.
    Committed = 4,
}

impl TxState {
    fn from_u8(v: u8) -> TxState {
        match v {
            0 => TxState::Running,
            1 => TxState::Locked,
            2 => TxState::Committing,
            3 => TxState::Flushing,
            _ => TxState::Committed,
        }
    }
}

/// What a transaction carries. Protected by [`Transaction::lists`].
#[derive(Debug, Default)]
pub struct TxLists {
    /// Metadata (and journalled data) buffers to log.
    pub buffers: Vec<Arc<Buffer>>,
    /// Ordered data buffers to write home before the commit record.
    pub ordered: Vec<Arc<Buffer>>,
    /// Blocks revoked by this transaction.
    pub revokes: HashSet<u64>,
}

/// One transaction.
///
/// Locks: `state` is an atomic — Running, Locked and Committing are set under the journal
/// state lock (admission decides on them there), Flushing and Committed by the commit and
/// flush paths without it (they are reported, never decided on); `updates`, `credits` and
/// the counters are atomics; `lists` is its own mutex (rank `TxLists`).
#[derive(Debug)]
pub struct Transaction {
    /// The log that commits it.
    pub log: LogId,
    /// Transaction id in its log (JBD2 sequence number; the low 32 bits go on disk).
    pub tid: Tid,
    state: AtomicU8,
    /// Handles started and not yet stopped (JBD2's t_updates).
    pub(crate) updates: AtomicU32,
    /// Credits reserved by handles so far (bounds the transaction's log size).
    pub(crate) credits: AtomicU32,
    /// Handles that joined (coalescing degree).
    pub(crate) handles: AtomicU64,
    /// Writers that waited for a buffer version.
    pub(crate) conflicts: AtomicU64,
    /// Ordered data buffers added (to trigger a commit when large).
    pub(crate) ordered_count: AtomicU32,
    /// Ordered data buffers whose write must be durable before the commit record (see
    /// `JState::ordered_strict`); none lets a single-I/O commit skip its preflush.
    pub(crate) strict_ordered: AtomicU32,
    /// Contents. Lock: itself.
    pub(crate) lists: RankedMutex<TxLists>,
    /// When the transaction opened (for the commit timer).
    pub started: Instant,
    /// Per-core journaling: transactions of other logs this one is valid only after (the
    /// newest per log). Lock: itself (a leaf).
    pub(crate) marks: RankedMutex<Vec<TxId>>,
    /// Per-core journaling: the commit-order stamp, taken once the last handle stopped
    /// (0 until then).
    pub(crate) stamp: AtomicU64,
    /// The lock-up saw no handle left (under the log's `updates_lock`): another log's writer
    /// may no longer pin it (see `per_core::chain_to_owner`). Written under `updates_lock`.
    pub(crate) drained: AtomicBool,
    /// Set when the transaction is valid (durable, and with several logs every transaction
    /// it is chained to too); callers waiting for this transaction wait on it
    /// (spinning first with [`crate::polling::WaitMode::SpinPark`]) and never touch the log's
    /// state lock, so making a transaction durable wakes only its own waiters.
    pub(crate) done: crate::polling::Completion,
    /// Moved on at every state change (and at abort): starters waiting for a Locked or full
    /// transaction to switch wait on it with polling waits (`LogCore::wait_switch`).
    pub(crate) changed: crate::polling::Event,
    /// Starters parked or spinning on `changed` (polling waits). Changed under the log's
    /// `state`; the commit that switches this transaction out opens the next one for them
    /// when it is not zero (see `commit_one`).
    pub(crate) starters: AtomicU32,
}

impl Transaction {
    pub(crate) fn new(log: LogId, tid: Tid) -> Self {
        Transaction {
            log,
            tid,
            state: AtomicU8::new(TxState::Running as u8),
            updates: AtomicU32::new(0),
            credits: AtomicU32::new(0),
            handles: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            ordered_count: AtomicU32::new(0),
            strict_ordered: AtomicU32::new(0),
            lists: RankedMutex::new(Rank::TxLists, TxLists::default()),
            marks: RankedMutex::new(Rank::Leaf, Vec::new()),
            stamp: AtomicU64::new(0),
            drained: AtomicBool::new(false),
            started: Instant::now(),
            done: crate::polling::Completion::new(),
            changed: crate::polling::Event::new(crate::lock_stat::WaitSite::LockedTx),
            starters: AtomicU32::new(0),
        }
    }

    /// The transaction's identity (log and id).
    pub fn id(&self) -> TxId {
        TxId::new(self.log, self.tid)
    }

    /// Current state.
    pub fn state(&self) -> TxState {
        TxState::from_u8(self.state.load(Ordering::SeqCst))
    }

    /// Set the state (callers hold the journal state lock). Sequentially consistent: the
    /// lock-up stores Locked then reads `updates`, a lock-free starter adds to `updates`
    /// then reads the state, so one of the two always sees the other.
    pub(crate) fn set_state(&self, s: TxState) {
        self.state.store(s as u8, Ordering::SeqCst);
        self.changed.notify();
    }

    /// Mark durable and wake its waiters.
    pub(crate) fn set_done(&self) {
        self.done.set();
    }

    /// Wake its waiters without marking it durable (abort, shutdown: they look again).
    pub(crate) fn wake_waiters(&self) {
        self.done.wake();
    }

    /// Whether the transaction has anything to commit.
    pub fn is_empty(&self) -> bool {
        let l = self.lists.lock();
        l.buffers.is_empty() && l.ordered.is_empty() && l.revokes.is_empty()
    }
}
