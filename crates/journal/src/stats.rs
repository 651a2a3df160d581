//! Journal statistics: always on, a handful of relaxed atomic adds per transaction.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters. Every field is an independent relaxed atomic.
#[derive(Debug, Default)]
pub struct JournalStats {
    pub(crate) transactions: AtomicU64,
    pub(crate) handles: AtomicU64,
    pub(crate) blocks_logged: AtomicU64,
    pub(crate) data_blocks: AtomicU64,
    pub(crate) revokes: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) locked_ns: AtomicU64,
    pub(crate) commit_ns: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) barriers: AtomicU64,
    pub(crate) fsync_waits: AtomicU64,
    pub(crate) fsyncs: AtomicU64,
    pub(crate) shadow_copies: AtomicU64,
    pub(crate) bytes_copied: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) checkpoint_blocks: AtomicU64,
    pub(crate) max_in_flight: AtomicU64,
    pub(crate) in_flight_sum: AtomicU64,
    pub(crate) coalesce_retries: AtomicU64,
    pub(crate) compound_groups: AtomicU64,
    pub(crate) start_wait_ns: AtomicU64,
    pub(crate) conflict_wait_ns: AtomicU64,
    pub(crate) handle_ns: AtomicU64,
    pub(crate) handles_timed: AtomicU64,
    pub(crate) flush_ns: AtomicU64,
    pub(crate) flush_queue_ns: AtomicU64,
    pub(crate) marks_uni: AtomicU64,
    pub(crate) marks_bi: AtomicU64,
    pub(crate) validity_ns: AtomicU64,
    pub(crate) not_valid_skips: AtomicU64,
    pub(crate) forced_commits: AtomicU64,
    pub(crate) copy_ns: AtomicU64,
    pub(crate) shared_flushes: AtomicU64,
    pub(crate) space_waits: AtomicU64,
    pub(crate) single_io_commits: AtomicU64,
    pub(crate) single_io_writes: AtomicU64,
    pub(crate) single_io_blocks: AtomicU64,
    pub(crate) single_io_preflushes: AtomicU64,
    pub(crate) single_io_unordered: AtomicU64,
    pub(crate) osum_commits: AtomicU64,
    pub(crate) osum_runs: AtomicU64,
    pub(crate) osum_confirm_writes: AtomicU64,
    pub(crate) checkpoint_cancelled: AtomicU64,
    pub(crate) leave_handed: AtomicU64,
    pub(crate) leave_breaks: AtomicU64,
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatsSnapshot {
    /// Committed transactions.
    pub transactions: u64,
    /// Handles started (file system operations that joined a transaction).
    pub handles: u64,
    /// Blocks written to the log (metadata copies, including journalled data).
    pub blocks_logged: u64,
    /// Ordered data blocks written home before commit blocks.
    pub data_blocks: u64,
    /// Revoke records written.
    pub revokes: u64,
    /// Transaction conflicts: writers that waited for a block whose version is in flight
    /// (JBD2, BarrierFS), or, with multi-version shadow paging, blocks a transaction needed a
    /// version of beyond `max_versions` at commit.
    pub conflicts: u64,
    /// Nanoseconds transactions spent Locked (waiting for handles to stop).
    pub locked_ns: u64,
    /// Nanoseconds from lock to durable, summed over transactions.
    pub commit_ns: u64,
    /// Device flushes issued by the journal.
    pub flushes: u64,
    /// Device barriers issued by the journal.
    pub barriers: u64,
    /// Callers that waited for a transaction to be durable (fsync and friends).
    pub fsync_waits: u64,
    /// fsync and fdatasync calls the file system made (including those served without a
    /// wait: transaction already durable, an i-transaction, a grouped caller).
    pub fsyncs: u64,
    /// Buffer versions (shadow copies) made.
    pub shadow_copies: u64,
    /// Bytes copied into versions.
    pub bytes_copied: u64,
    /// Checkpoint passes.
    pub checkpoints: u64,
    /// Blocks written home by checkpoints.
    pub checkpoint_blocks: u64,
    /// Largest number of transactions committing at once.
    pub max_in_flight: u64,
    /// Sum over commits of transactions in flight when each started (mean = / transactions).
    pub in_flight_sum: u64,
    /// Lock-ups undone by opportunistic coalescing (the transaction went back to Running).
    pub coalesce_retries: u64,
    /// Flushes that made a group of transactions durable (compound flush).
    pub compound_groups: u64,
    /// Nanoseconds handles waited in `start` for a locked transaction (lock-up cost).
    pub start_wait_ns: u64,
    /// Nanoseconds writers waited for a buffer version (conflict cost).
    pub conflict_wait_ns: u64,
    /// Nanoseconds the timed handles were open, start to stop (what a lock-up waits for).
    /// One handle in [`crate::handle::HANDLE_TIME_SAMPLE`] per thread is timed: two clock
    /// reads on every handle cost several per cent of a CPU-bound run.
    pub handle_ns: u64,
    /// Handles whose open time `handle_ns` adds up.
    pub handles_timed: u64,
    /// Nanoseconds spent in device flushes issued by the journal.
    pub flush_ns: u64,
    /// Nanoseconds committed transactions waited for the flush thread (handoff to pick-up).
    pub flush_queue_ns: u64,
    /// Per-core journaling: uni-directional chain marks made (a writer after another log's version that is not yet valid).
    pub marks_uni: u64,
    /// Per-core journaling: bi-directional chains made (a writer pinned another log's running transaction).
    pub marks_bi: u64,
    /// Per-core journaling: nanoseconds spent deciding validity.
    pub validity_ns: u64,
    /// Per-core journaling: checkpoint entries kept in a log because a version of the block was not yet valid.
    pub not_valid_skips: u64,
    /// Per-core journaling: commits asked for because a durable transaction waited for an uncommitted ancestor.
    pub forced_commits: u64,
    /// Nanoseconds spent copying buffer versions (the frozen copy).
    pub copy_ns: u64,
    /// Flushes a log saved by waiting for another log's flush that covered its writes (compound flush across logs).
    pub shared_flushes: u64,
    /// Per-core journaling: handle starts that waited for log space (admission by space).
    pub space_waits: u64,
    /// Single-I/O commits (the whole transaction in one write).
    pub single_io_commits: u64,
    /// Write commands those commits issued (one each, two where the log wrapped).
    pub single_io_writes: u64,
    /// Blocks those writes carried (revoke, descriptor, logged and commit blocks).
    pub single_io_blocks: u64,
    /// Single-I/O commits that carried ordered data and so flushed (or set a barrier) before their write.
    pub single_io_preflushes: u64,
    /// Single-I/O commits whose ordered data were all overwrites inside the durable size:
    /// written beside the log write, durable by its one flush, no preflush.
    pub single_io_unordered: u64,
    /// Ordered-data checksums (`ordered_sums.rs`): single-I/O commits whose exposed data
    /// went out with the log write under one flush, its runs summed in the commit block.
    pub osum_commits: u64,
    /// Runs of exposed data those commits summed.
    pub osum_runs: u64,
    /// Superblock writes (each with a flush) that confirmed a transaction's sums before an
    /// in-place write of a block they cover.
    pub osum_confirm_writes: u64,
    /// Committed block copies that never needed their checkpoint: superseded by a newer commit of the block, or dropped because the block was freed (JoJ §2.1).
    pub checkpoint_cancelled: u64,
    /// Committed images a file leaving data journaling handed from the checkpoint to its
    /// switch's ordered writes (`unjournal.rs`).
    pub leave_handed: u64,
    /// Times a commit short of log space wrote such blocks home itself rather than wait for
    /// the switch's commit (`unjournal.rs`).
    pub leave_breaks: u64,
}

impl JournalStats {
    /// Take a snapshot.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            transactions: self.transactions.load(Relaxed),
            handles: self.handles.load(Relaxed),
            blocks_logged: self.blocks_logged.load(Relaxed),
            data_blocks: self.data_blocks.load(Relaxed),
            revokes: self.revokes.load(Relaxed),
            conflicts: self.conflicts.load(Relaxed),
            locked_ns: self.locked_ns.load(Relaxed),
            commit_ns: self.commit_ns.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            barriers: self.barriers.load(Relaxed),
            fsync_waits: self.fsync_waits.load(Relaxed),
            fsyncs: self.fsyncs.load(Relaxed),
            shadow_copies: self.shadow_copies.load(Relaxed),
            bytes_copied: self.bytes_copied.load(Relaxed),
            checkpoints: self.checkpoints.load(Relaxed),
            checkpoint_blocks: self.checkpoint_blocks.load(Relaxed),
            max_in_flight: self.max_in_flight.load(Relaxed),
            in_flight_sum: self.in_flight_sum.load(Relaxed),
            coalesce_retries: self.coalesce_retries.load(Relaxed),
            compound_groups: self.compound_groups.load(Relaxed),
            start_wait_ns: self.start_wait_ns.load(Relaxed),
            conflict_wait_ns: self.conflict_wait_ns.load(Relaxed),
            handle_ns: self.handle_ns.load(Relaxed),
            handles_timed: self.handles_timed.load(Relaxed),
            flush_ns: self.flush_ns.load(Relaxed),
            flush_queue_ns: self.flush_queue_ns.load(Relaxed),
            marks_uni: self.marks_uni.load(Relaxed),
            marks_bi: self.marks_bi.load(Relaxed),
            validity_ns: self.validity_ns.load(Relaxed),
            not_valid_skips: self.not_valid_skips.load(Relaxed),
            forced_commits: self.forced_commits.load(Relaxed),
            copy_ns: self.copy_ns.load(Relaxed),
            shared_flushes: self.shared_flushes.load(Relaxed),
            space_waits: self.space_waits.load(Relaxed),
            single_io_commits: self.single_io_commits.load(Relaxed),
            single_io_writes: self.single_io_writes.load(Relaxed),
            single_io_blocks: self.single_io_blocks.load(Relaxed),
            single_io_preflushes: self.single_io_preflushes.load(Relaxed),
            single_io_unordered: self.single_io_unordered.load(Relaxed),
            osum_commits: self.osum_commits.load(Relaxed),
            osum_runs: self.osum_runs.load(Relaxed),
            osum_confirm_writes: self.osum_confirm_writes.load(Relaxed),
            checkpoint_cancelled: self.checkpoint_cancelled.load(Relaxed),
            leave_handed: self.leave_handed.load(Relaxed),
            leave_breaks: self.leave_breaks.load(Relaxed),
        }
    }
}

impl StatsSnapshot {
    /// Counters accumulated since `earlier` (maxima are kept as they are).
    pub fn delta(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            transactions: self.transactions - earlier.transactions,
            handles: self.handles - earlier.handles,
            blocks_logged: self.blocks_logged - earlier.blocks_logged,
            data_blocks: self.data_blocks - earlier.data_blocks,
            revokes: self.revokes - earlier.revokes,
            conflicts: self.conflicts - earlier.conflicts,
            locked_ns: self.locked_ns - earlier.locked_ns,
            commit_ns: self.commit_ns - earlier.commit_ns,
            flushes: self.flushes - earlier.flushes,
            barriers: self.barriers - earlier.barriers,
            fsync_waits: self.fsync_waits - earlier.fsync_waits,
            fsyncs: self.fsyncs - earlier.fsyncs,
            shadow_copies: self.shadow_copies - earlier.shadow_copies,
            bytes_copied: self.bytes_copied - earlier.bytes_copied,
            checkpoints: self.checkpoints - earlier.checkpoints,
            checkpoint_blocks: self.checkpoint_blocks - earlier.checkpoint_blocks,
            max_in_flight: self.max_in_flight,
            in_flight_sum: self.in_flight_sum - earlier.in_flight_sum,
            coalesce_retries: self.coalesce_retries - earlier.coalesce_retries,
            compound_groups: self.compound_groups - earlier.compound_groups,
            start_wait_ns: self.start_wait_ns - earlier.start_wait_ns,
            conflict_wait_ns: self.conflict_wait_ns - earlier.conflict_wait_ns,
            handle_ns: self.handle_ns - earlier.handle_ns,
            handles_timed: self.handles_timed - earlier.handles_timed,
            flush_ns: self.flush_ns - earlier.flush_ns,
            flush_queue_ns: self.flush_queue_ns - earlier.flush_queue_ns,
            marks_uni: self.marks_uni - earlier.marks_uni,
            marks_bi: self.marks_bi - earlier.marks_bi,
            validity_ns: self.validity_ns - earlier.validity_ns,
            not_valid_skips: self.not_valid_skips - earlier.not_valid_skips,
            forced_commits: self.forced_commits - earlier.forced_commits,
            copy_ns: self.copy_ns - earlier.copy_ns,
            shared_flushes: self.shared_flushes - earlier.shared_flushes,
            space_waits: self.space_waits - earlier.space_waits,
            single_io_commits: self.single_io_commits - earlier.single_io_commits,
            single_io_writes: self.single_io_writes - earlier.single_io_writes,
            single_io_blocks: self.single_io_blocks - earlier.single_io_blocks,
            single_io_preflushes: self.single_io_preflushes - earlier.single_io_preflushes,
            single_io_unordered: self.single_io_unordered - earlier.single_io_unordered,
            osum_commits: self.osum_commits - earlier.osum_commits,
            osum_runs: self.osum_runs - earlier.osum_runs,
            osum_confirm_writes: self.osum_confirm_writes - earlier.osum_confirm_writes,
            checkpoint_cancelled: self.checkpoint_cancelled - earlier.checkpoint_cancelled,
            leave_handed: self.leave_handed - earlier.leave_handed,
            leave_breaks: self.leave_breaks - earlier.leave_breaks,
        }
    }

    fn per_tx(&self, v: u64) -> f64 {
        if self.transactions == 0 { 0.0 } else { v as f64 / self.transactions as f64 }
    }
    /// Mean time a handle was open, start to stop, in µs (from the timed sample).
    pub fn handle_us_mean(&self) -> f64 {
        if self.handles_timed == 0 { 0.0 } else { self.handle_ns as f64 / self.handles_timed as f64 / 1e3 }
    }
    /// Handles per transaction (the coalescing degree).
    pub fn handles_per_tx(&self) -> f64 {
        self.per_tx(self.handles)
    }
    /// Logged blocks per transaction.
    pub fn blocks_per_tx(&self) -> f64 {
        self.per_tx(self.blocks_logged)
    }
    /// Conflicts per transaction.
    pub fn conflicts_per_tx(&self) -> f64 {
        self.per_tx(self.conflicts)
    }
    /// Mean time Locked, microseconds.
    pub fn locked_us_per_tx(&self) -> f64 {
        self.per_tx(self.locked_ns) / 1000.0
    }
    /// Mean commit latency (lock to durable), microseconds.
    pub fn commit_us_per_tx(&self) -> f64 {
        self.per_tx(self.commit_ns) / 1000.0
    }
    /// Device flushes per fsync call. Without a file system on top (nothing counted in
    /// `fsyncs`), per caller that waited for a commit.
    pub fn flushes_per_fsync(&self) -> f64 {
        let n = if self.fsyncs == 0 { self.fsync_waits } else { self.fsyncs };
        if n == 0 { 0.0 } else { self.flushes as f64 / n as f64 }
    }
    /// Transactions made durable per flush-group.
    pub fn tx_per_flush_group(&self) -> f64 {
        if self.compound_groups == 0 { 0.0 } else { self.transactions as f64 / self.compound_groups as f64 }
    }
    /// Mean committing transactions in flight when a commit started.
    pub fn mean_in_flight(&self) -> f64 {
        self.per_tx(self.in_flight_sum)
    }
}
