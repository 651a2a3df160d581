//! Per-file adaptive journaling (journaling of journal, FAST'14 §2.2), chosen automatically.
//!
//! Every transaction that touches a file uses that file's one data mode — `ordered` (data
//! written home before the commit) or data journaling (`EXT4_JOURNAL_DATA_FL`, the data in
//! the log) — so replay never puts an older journaled copy over newer data written home.
//! The paper lets the application choose the mode per file (an ioctl after each log file's
//! open); here the file system chooses at each `fsync`/`fdatasync` from what was written
//! since the previous one (the *sync window*), with no change to the application. (`chattr
//! ±j` or the `user.cjfs.journal` attribute still pin a file's mode for the mount.)
//!
//! # The cost model
//!
//! With the single-I/O commit a sync whose window must be committed anyway (the file is
//! new, grew, or had blocks allocated — what a rollback journal, a growing database or a
//! WAL being filled does) costs, for `n` blocks written:
//!
//! * ordered: the `n` data blocks home, a flush, the log write, a flush — two flushes;
//! * data journaling: one log write of `n` more blocks, one flush — and later a checkpoint
//!   write of the `n` blocks, in the background, cancelled when the file is rewritten or
//!   deleted first (a rollback journal is deleted or truncated at every transaction).
//!
//! So a small window that needs a commit goes to data journaling: one flush saved for `n`
//! extra sequential block writes. The break-even is a flush's time over a block's transfer
//! time — about 75 blocks on the emulated eMMC (2 ms flush, 150 MB/s), 120 on the SATA
//! preset, 250 on NVMe — and the background checkpoint halves it, hence
//! [`SMALL_BLOCKS`] = 64. A window that needs no commit (an overwrite, `fdatasync`) costs
//! one flush in ordered mode too, and ordered writes each block once: nothing to gain. And
//! large windows (a WAL filled by big transactions, a database checkpoint) are better
//! ordered: the log would carry every block twice.
//!
//! # Switching
//!
//! Ordered → data is free and immediate: at the sync that decides it, the window's dirty
//! blocks still waiting for the running transaction's ordered write are journaled in that
//! transaction instead (a block whose ordered write belongs to an older transaction already
//! committing is written home by it and journaled too; the newer copy wins at replay), and
//! the flag change commits with them, so that very sync is one single write.
//!
//! Data → ordered must keep every journaled copy of the file's blocks from being replayed
//! (or checkpointed) over data written home later. ext4's `chattr -j` empties the journal
//! (`jbd2_journal_flush`: a commit and a full checkpoint, every file's pending blocks written
//! home while the file waits), which the `leave=empty` setting does too. The `joj` and
//! `adaptive` presets use `leave=revoke` ([`leave_by_revoke`]): the file's committed images
//! still awaiting checkpoint become ordered writes of the switch's transaction, which
//! revokes the blocks; the log keeps the older copies until that transaction is durable
//! (`cjfs_journal`'s `unjournal.rs`). Nothing is written at the switch, and blocks the file
//! rewrites meanwhile are written home once. The policy's switch by revoke is made at the
//! sync that decides it, before its commit: the window that sync covers leaves the running
//! transaction's log for its ordered writes and is written home once, not logged first
//! (`leave=empty` switches right after that sync's commit). Either way the switch is made
//! only once staying has cost about as much:
//!
//! * windows of at least [`LARGE_BLOCKS`] blocks in a row (a WAL filled by big
//!   transactions) worth the switch's cost ([`switch_cost_blocks`]: [`LARGE_RUNS`] of them
//!   when the switch empties the journal, one by revoke), or
//! * `fdatasync` windows that would need no commit in ordered mode (overwrites in place:
//!   neither the size nor the block count changed — a WAL rewritten from its start after a
//!   checkpoint, a database updated in place), which data journaling makes pay a log write
//!   each: the blocks written in the log beyond ordered's (the window's blocks, its
//!   descriptor and commit block) are added up as the file's *debt*, and at the switch's
//!   cost — the same budget the first rule lets a file log — it goes back (ski rental: pay
//!   the switch once staying has cost as much). A
//!   window that needed a commit anyway clears the debt (data journaling saved its flush).
//!
//! The number of switches each way, the time the switches back took and how many went by
//! revoke are counted ([`AdaptiveStats`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::FsResult;
use crate::extent_tree;
use crate::fs::FsInner;
use crate::inode::{InodeState, store_inode};
use crate::ondisk::inode::EXT4_JOURNAL_DATA_FL;
use crate::tx::{ReadStore, Tx};
use crate::types::{DataMode, Ino, LeaveMode};

/// A sync window of at most this many blocks that needs a commit anyway goes to data
/// journaling (see the module docs).
pub const SMALL_BLOCKS: u32 = 64;
/// A sync window of at least this many blocks counts towards going back to ordered.
pub const LARGE_BLOCKS: u32 = 256;
/// Large windows in a row that send a data-journaled file back to ordered.
pub const LARGE_RUNS: u8 = 2;
/// Blocks logged beyond ordered's by windows that needed no commit, that send a
/// data-journaled file back to ordered when the switch empties the journal (see the module
/// docs).
pub const DEBT_BLOCKS: u32 = LARGE_BLOCKS * LARGE_RUNS as u32;

/// What going back to ordered costs, in blocks' worth of log writes: the budget the policy
/// lets a data-journaled file's unfavourable windows spend before it switches (ski rental).
/// Emptying the journal costs a commit and a full checkpoint: [`DEBT_BLOCKS`], two large
/// windows. By revoke it costs at most the commit of its revokes that the file's next sync
/// makes (the handed blocks are written home once, as their checkpoint would have been):
/// one flush, 75–250 blocks' transfer on the emulated devices (see the module docs), so one
/// large window, [`LARGE_BLOCKS`].
pub fn switch_cost_blocks(leave: LeaveMode) -> u32 {
    match leave {
        LeaveMode::Empty => DEBT_BLOCKS,
        LeaveMode::Revoke => LARGE_BLOCKS,
    }
}

/// One file's writes since its last sync, and whether its mode is the policy's to change.
/// Part of the inode's state (under its lock).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Window {
    /// Blocks written since the last sync (a block written twice counts twice).
    pub blocks: u32,
    /// Large windows in a row while data-journaled.
    pub large_runs: u8,
    /// Blocks logged beyond ordered's by data-journaled windows that needed no commit,
    /// since the last window that did.
    pub debt: u32,
    /// Size and block count at the window's start: a window that changed neither needs no
    /// commit for `fdatasync` in ordered mode.
    pub start_size: u64,
    /// See `start_size`.
    pub start_blocks: u64,
    /// The mode was set explicitly (`chattr ±j`, `user.cjfs.journal`) in this mount: the
    /// policy leaves it.
    pub pinned: bool,
}

impl Window {
    /// Note a write of `blocks` blocks.
    pub fn wrote(&mut self, blocks: u64) {
        self.blocks = self.blocks.saturating_add(u32::try_from(blocks).unwrap_or(u32::MAX));
    }
}

/// What the policy decided at a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Keep the mode.
    Keep,
    /// Journal the file's data from this sync on (done before its commit).
    ToData,
    /// Go back to ordered (after this sync's commit).
    ToOrdered,
}

/// Switches the policy made and what they cost. Counters (relaxed atomics).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    to_data: AtomicU64,
    to_ordered: AtomicU64,
    blocks_moved: AtomicU64,
    flush_ns: AtomicU64,
    left_by_revoke: AtomicU64,
    blocks_handed: AtomicU64,
}

/// A snapshot of the adaptive policy's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdaptiveStats {
    /// Files switched from ordered to data journaling.
    pub to_data: u64,
    /// Files switched from data journaling back to ordered.
    pub to_ordered: u64,
    /// Dirty blocks moved from a transaction's ordered writes into its log at a switch to
    /// data journaling.
    pub blocks_moved: u64,
    /// Nanoseconds the switches back to ordered took (emptying the journal, or handing
    /// over by revoke).
    pub flush_ns: u64,
    /// Switches back to ordered (explicit or the policy's) made by revoke, without emptying
    /// the journal (`leave=revoke`).
    pub left_by_revoke: u64,
    /// Committed images those switches handed to their transaction's ordered writes.
    pub blocks_handed: u64,
}

impl Counters {
    /// A snapshot.
    pub fn snapshot(&self) -> AdaptiveStats {
        AdaptiveStats {
            to_data: self.to_data.load(Ordering::Relaxed),
            to_ordered: self.to_ordered.load(Ordering::Relaxed),
            blocks_moved: self.blocks_moved.load(Ordering::Relaxed),
            flush_ns: self.flush_ns.load(Ordering::Relaxed),
            left_by_revoke: self.left_by_revoke.load(Ordering::Relaxed),
            blocks_handed: self.blocks_handed.load(Ordering::Relaxed),
        }
    }

    /// Count a switch back to ordered that took `ns` (emptying the journal, or by revoke).
    pub fn switched_to_ordered(&self, ns: u64) {
        self.to_ordered.fetch_add(1, Ordering::Relaxed);
        self.flush_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// The policy's decision for a sync (`datasync`: an fdatasync) of the regular file `st`
/// whose window `needs_commit`, resetting the window. Only with the `adaptive` preset on a
/// `data=ordered` mount (under `data=journal` every file's data is journaled anyway).
pub(crate) fn decide(fs: &FsInner, st: &mut InodeState, needs_commit: bool, datasync: bool) -> Decision {
    if !fs.opts.adaptive || fs.opts.data != DataMode::Ordered || !st.d.is_reg() || st.window.pinned {
        return Decision::Keep;
    }
    let w = std::mem::take(&mut st.window.blocks);
    let win = &mut st.window;
    let grew = st.d.size != win.start_size || st.d.blocks != win.start_blocks;
    (win.start_size, win.start_blocks) = (st.d.size, st.d.blocks);
    if st.d.flags & EXT4_JOURNAL_DATA_FL == 0 {
        return if needs_commit && w > 0 && w <= SMALL_BLOCKS { Decision::ToData } else { Decision::Keep };
    }
    if w == 0 {
        return Decision::Keep;
    }
    let back = |win: &mut Window| {
        (win.large_runs, win.debt) = (0, 0);
        Decision::ToOrdered
    };
    let cost = switch_cost_blocks(fs.opts.leave);
    if w >= LARGE_BLOCKS {
        win.large_runs += 1;
        if u32::from(win.large_runs) * LARGE_BLOCKS >= cost {
            return back(win);
        }
    } else {
        win.large_runs = 0;
    }
    // Ordered would write these blocks home and flush, with no commit: the log write (the
    // blocks, a descriptor and a commit block) is what data journaling adds.
    if datasync && !grew {
        win.debt = win.debt.saturating_add(w + 2);
        if win.debt >= cost {
            return back(win);
        }
    } else {
        win.debt = 0;
    }
    Decision::Keep
}

/// Switch the ordered file `ino` to data journaling now, inside the running transaction:
/// its dirty blocks waiting for that transaction's ordered write are journaled there
/// instead, and the flag change commits with them. Afterwards the file's data and metadata
/// are in that transaction (`meta_tx`, `datasync_tx`), which the caller's sync commits.
pub(crate) fn to_data(fs: &FsInner, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    let mut bufs = std::mem::take(&mut st.dirty_data);
    bufs.sort_by_key(|b| b.blocknr());
    bufs.dedup_by_key(|b| b.blocknr());
    bufs.retain(|b| b.jstate().dirty);
    let mut tx = Tx::start(fs, 8 + bufs.len() as u32)?;
    let running = tx.h.tx_id();
    let mut moved = 0u64;
    for b in &bufs {
        tx.h.get_write_access(b)?;
        tx.h.dirty_metadata(b)?;
        let mut js = b.jstate();
        // Its running transaction would write it home: the log carries it now. One of an
        // older transaction already committing is written home by that one as well.
        if js.ordered == Some(running) && js.dirty {
            js.dirty = false;
            moved += 1;
        }
    }
    st.d.flags |= EXT4_JOURNAL_DATA_FL;
    store_inode(&mut tx, ino, st)?;
    let id = tx.stop()?;
    st.meta_tx = id;
    st.datasync_tx = id;
    st.dirty_data = bufs.into_iter().filter(|b| b.jstate().dirty).collect();
    fs.adaptive.to_data.fetch_add(1, Ordering::Relaxed);
    fs.adaptive.blocks_moved.fetch_add(moved, Ordering::Relaxed);
    Ok(())
}

/// Take the regular file `ino` out of data journaling without emptying the journal (the
/// `leave=revoke` setting; see `cjfs_journal`'s `unjournal.rs`): its blocks' committed
/// images still awaiting checkpoint become ordered writes of the switch's transaction, which
/// revokes the blocks and clears the flag. Returns `false`, having changed nothing, where
/// the caller must empty the journal instead: the `empty` setting, iJournaling (an
/// i-transaction may make the file durable without the revoking commit), several logs, a
/// file without an extent tree.
///
/// `in_window`: the sync deciding the switch makes it before its commit, so that the window
/// the file wrote since the last sync leaves the running transaction's log for its ordered
/// writes (written home once, not logged first). Only the transactions before the running
/// one are waited for then; if the window's transaction is already committing, nothing is
/// changed and `false` returned (the caller commits, then switches).
pub(crate) fn leave_by_revoke(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    in_window: bool,
) -> FsResult<bool> {
    if fs.opts.leave != LeaveMode::Revoke
        || fs.ij.get().is_some()
        || fs.opts.journal.logs != cjfs_journal::Logs::One
        || !st.d.has_extents()
    {
        return Ok(false);
    }
    let j = &fs.journal;
    // Every journaled version of its blocks durable first (the inode lock keeps new ones
    // out; in the window, those of the running transaction excepted): the journal hands
    // over only committed images.
    if !in_window {
        for id in [st.meta_tx, st.datasync_tx] {
            if !j.is_durable(id) {
                j.commit_wait(id)?;
            }
        }
    }
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let maps = extent_tree::extents_in_range(&st.d.block, &mut store, st.csum, 0, u32::MAX)?;
    // Only cached buffers can have a committed image (an image pins its buffer).
    let bufs: Vec<_> = maps
        .iter()
        .flat_map(|m| m.pblk..m.pblk + u64::from(m.len))
        .filter_map(|b| fs.cache.peek(b))
        .collect();
    let revoke = !crate::planted::bugs(&fs.opts).leave_without_revoke;
    // The journal wants every transaction before the switch's durable: wait for the one
    // before the running transaction, then join it. Another thread's commit may start in
    // between (then the journal refuses): after a sync's commit, try again; in the window,
    // the window's transaction is then committing, and the caller switches after it.
    let mut attempts = if in_window { 1 } else { 3 };
    let (mut tx, handed) = loop {
        let cur = j.current_tx();
        if cur.tid > 1 {
            j.wait(cjfs_journal::TxId::new(cur.log, cur.tid - 1))?;
        }
        // Ordered data takes no log space; revoke records do (8 bytes each, several
        // hundred to a block).
        let mut tx = Tx::start(fs, 8 + (bufs.len() as u32).div_ceil(128))?;
        if let Some(handed) = tx.h.leave_data_journaling(&bufs, revoke)? {
            break (tx, handed);
        }
        drop(tx);
        attempts -= 1;
        if attempts == 0 {
            return Ok(false);
        }
    };
    st.leave_tx = tx.h.tx_id();
    st.dirty_data.extend(bufs.into_iter().filter(|b| b.jstate().dirty));
    st.d.flags &= !EXT4_JOURNAL_DATA_FL;
    st.d.ctime = crate::types::Timestamp::now();
    store_inode(&mut tx, ino, st)?;
    tx.stop()?;
    fs.adaptive.left_by_revoke.fetch_add(1, Ordering::Relaxed);
    fs.adaptive.blocks_handed.fetch_add(handed, Ordering::Relaxed);
    Ok(true)
}

/// Time a switch back to ordered: `f` makes it (by revoke, or emptying the journal) and clears the flag.
pub(crate) fn timed<T>(fs: &FsInner, f: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
    let t0 = Instant::now();
    let r = f()?;
    fs.adaptive.switched_to_ordered(t0.elapsed().as_nanos() as u64);
    Ok(r)
}
