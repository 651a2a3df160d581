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
//! With the journal's ordered-data checksums (`osum`, `cjfs_journal`'s `ordered_sums.rs`)
//! an ordered window that needs a commit goes out with one flush as well (its data and the
//! log write together), so data journaling saves no flush: it only moves the window's
//! blocks into the log and adds their checkpoint write. Then only a short-lived file (below)
//! goes to data journaling, whose blocks die before any checkpoint. (Measured on the SQLite
//! 1-operation cells, SATA preset: a database file kept ordered syncs 2.15 blocks in 1.9
//! writes, as without a journal, against 5 blocks in one log write journaled, and its
//! checkpoint writes no longer queue before later syncs; `docs/results/joj/`.)
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
//! `adaptive` presets use `leave=revoke` ([`leave_by_revoke`], `cjfs_journal`'s
//! `unjournal.rs`): the blocks the file logged in the switch's transaction become its
//! ordered writes and are revoked there; its other blocks keep their committed images as
//! checkpoint work, journaled again if the file rewrites them before the checkpoint has
//! written them home ([`before_in_place`], [`images_left`]), and revoked if it frees them.
//! Nothing is written at the switch. The policy's switch by revoke is made at the sync
//! that decides it, before its commit: the window that sync
//! covers leaves the running transaction's log for its ordered writes and is written home
//! once, not logged first (`leave=empty` switches right after that sync's commit). Either
//! way the switch is made
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
//! # Short-lived files
//!
//! A rollback journal is created, written, synced and deleted (or truncated to zero) at
//! every transaction — usually long before the log's checkpoint would write its blocks home.
//! Data journaling such a file costs one log write and no checkpoint (the blocks are revoked
//! when freed), so even a window far above [`SMALL_BLOCKS`] is cheaper journaled: it saves
//! ordered's second flush and writes each block once. The paper has the application say so
//! with an ioctl at each journal file's open; here the file system remembers it: a regular
//! file whose last link goes, or which is truncated to zero, while the transaction that last
//! changed it is still in the log (`Journal::in_log`) died young. Its name in its directory
//! is remembered (at most `SHORT_LIVED_NAMES`, a leaf lock) and the next file created under
//! that name starts short-lived; a file truncated young is short-lived itself. A short-lived
//! file's windows that need a commit go to data journaling up to a quarter of the largest
//! transaction ([`SHORT_LIVED_LOG_SHARE`]), and its large windows do not count towards going
//! back (their blocks are not expected to be logged twice); the debt rule still applies. A
//! file removed after its checkpoint clears its name's entry.
//!
//! The number of switches each way, the time the switches back took and how many went by
//! revoke are counted ([`AdaptiveStats`]), and the files created or truncated short-lived
//! (`short_lived`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cjfs_journal::Buffer;
use cjfs_journal::lock_rank::{Rank, RankedMutex};
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

/// A short-lived file's window goes to data journaling up to this share of the largest
/// transaction (a quarter: the window, its descriptors and the rest of the transaction fit).
pub const SHORT_LIVED_LOG_SHARE: u32 = 4;
/// Names remembered as short-lived at most (the memory is cleared past it).
const SHORT_LIVED_NAMES: usize = 4096;

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
    /// Bytes written since the last sync (written twice, counted twice); the policy
    /// counts them in blocks (what they cost to transfer, however the writes were cut).
    pub bytes: u64,
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
    /// The file's data is expected to die before its checkpoint (see "Short-lived files" in
    /// the module docs): its previous incarnation under the same name, or its own contents
    /// before a truncation to zero, was removed while still in the log.
    pub short_lived: bool,
}

impl Window {
    /// Note a write of `bytes` bytes.
    pub fn wrote(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
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
    blocks_rejournaled: AtomicU64,
    short_lived: AtomicU64,
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
    /// Writes of an ordered file's blocks journaled because the block still had an image in
    /// the log from the file's data-journaled time ([`before_in_place`]).
    pub blocks_rejournaled: u64,
    /// Files that started short-lived (created under a name whose previous file died young,
    /// or truncated to zero young).
    pub short_lived: u64,
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
            blocks_rejournaled: self.blocks_rejournaled.load(Ordering::Relaxed),
            short_lived: self.short_lived.load(Ordering::Relaxed),
        }
    }

    /// Count a switch back to ordered that took `ns` (emptying the journal, or by revoke).
    pub fn switched_to_ordered(&self, ns: u64) {
        self.to_ordered.fetch_add(1, Ordering::Relaxed);
        self.flush_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// Whether the file `st`, in ordered mode, may still have images of its blocks in the log:
/// `leave_tx` (its last switch out of data journaling, or the last transaction that
/// journaled one of its rewritten blocks since) has not left the log. Such a block is
/// journaled again when the file rewrites it ([`before_in_place`]) and revoked when freed.
pub(crate) fn images_left(fs: &FsInner, st: &InodeState) -> bool {
    st.leave_tx.tid != 0 && st.d.flags & EXT4_JOURNAL_DATA_FL == 0 && fs.journal.in_log(st.leave_tx)
}

/// The ordered file `st` is about to write `buf`, `left` being [`images_left`]. Returns
/// whether the write must be journaled instead of going in place: the block still has an
/// image in the log from the file's data-journaled time (being committed, awaiting its
/// checkpoint, or logged again since), which recovery would replay, or the checkpoint
/// write, over contents written home now. Then this transaction has write access to the
/// block, the caller logs it, and the file counts as having images until this transaction
/// (`leave_tx`) leaves the log; its next sync commits it (`Fs::fsync` commits `leave_tx`),
/// which the policy does not count as the file's writes needing a commit (in ordered mode
/// they would not: it must not take it for a reason to journal the file's data). Once the
/// checkpoint has written the block's last image home, its writes go in place. (Handing
/// the image over instead — revoking the block here and writing it home as ordered data —
/// made the sync that commits the revoke wait for the new contents before it: two flushes
/// where ordered mode pays one.)
///
/// With the journal's ordered-data checksums the same holds for a block whose home contents
/// another transaction's commit block sums until that transaction is confirmed
/// (`cjfs_journal::ordered_sums`): an append into the partly written last block of a file
/// grown by the previous sync logs that block instead of writing it in place.
pub(crate) fn before_in_place(
    tx: &mut Tx<'_>,
    st: &mut InodeState,
    buf: &Arc<Buffer>,
    left: bool,
) -> FsResult<bool> {
    let summed = tx.fs.journal.sum_pending(buf, tx.h.tx_id());
    if !summed && (!left || crate::planted::bugs(&tx.fs.opts).rewrite_in_place) {
        return Ok(false);
    }
    let logged = summed || {
        let js = buf.jstate();
        // A version being committed has no checkpoint image yet; `last_version` names it.
        js.running.is_some()
            || js.checkpoint.is_some()
            || js.last_version.is_some_and(|t| tx.fs.journal.in_log(t))
    };
    if !logged {
        return Ok(false);
    }
    tx.h.get_write_access(buf)?;
    st.leave_tx = tx.h.tx_id();
    tx.fs.adaptive.blocks_rejournaled.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

/// Names in a directory whose last file died young (see "Short-lived files" in the module
/// docs). Lock: the mutex (a leaf, taken under inode locks and a handle).
pub(crate) struct YoungNames(RankedMutex<HashSet<Box<[u8]>>>);

/// The memory's key: the directory's inode number, then the name.
fn young_key(parent: Ino, name: &[u8]) -> Box<[u8]> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&u64::from(parent).to_le_bytes());
    k.extend_from_slice(name);
    k.into()
}

impl Default for YoungNames {
    fn default() -> Self {
        YoungNames(RankedMutex::new(Rank::Leaf, HashSet::new()))
    }
}

/// Whether the regular file `st`, about to lose its last link or be truncated to zero, dies
/// young: the adaptive policy runs and the transaction that last changed the file has not
/// left the log.
pub(crate) fn dies_young(fs: &FsInner, st: &InodeState) -> bool {
    fs.opts.adaptive && fs.opts.data == DataMode::Ordered && st.d.is_reg() && fs.journal.in_log(st.meta_tx)
}

/// The regular file `st` loses its last link, its name `parent/name`: remember whether it
/// died young (call before the removal changes `st.meta_tx`).
pub(crate) fn note_removed(fs: &FsInner, parent: Ino, name: &[u8], st: &InodeState) {
    if !fs.opts.adaptive || !st.d.is_reg() {
        return;
    }
    let young = dies_young(fs, st);
    let mut names = fs.young.0.lock();
    if young {
        if names.len() >= SHORT_LIVED_NAMES {
            names.clear();
        }
        names.insert(young_key(parent, name));
    } else {
        names.remove(&young_key(parent, name));
    }
}

/// A regular file `st` was made as `parent/name`: it starts short-lived if the previous file
/// of that name died young.
pub(crate) fn note_created(fs: &FsInner, parent: Ino, name: &[u8], st: &mut InodeState) {
    if fs.opts.adaptive && st.d.is_reg() && fs.young.0.lock().remove(&young_key(parent, name)) {
        st.window.short_lived = true;
        fs.adaptive.short_lived.fetch_add(1, Ordering::Relaxed);
    }
}

/// The regular file `st` is truncated to zero (call before the truncation): from now on it
/// is short-lived exactly when its old contents died young.
pub(crate) fn note_truncated_to_zero(fs: &FsInner, st: &mut InodeState) {
    // A file being deleted (its blocks freed through a truncation) was judged at its unlink.
    if !fs.opts.adaptive || !st.d.is_reg() || st.d.size == 0 || st.d.links_count == 0 {
        return;
    }
    let young = dies_young(fs, st);
    if young && !st.window.short_lived {
        fs.adaptive.short_lived.fetch_add(1, Ordering::Relaxed);
    }
    st.window.short_lived = young;
}

/// The policy's decision for a sync (`datasync`: an fdatasync) of the regular file `st`
/// whose window `needs_commit`, resetting the window. Only with the `adaptive` preset on a
/// `data=ordered` mount (under `data=journal` every file's data is journaled anyway).
pub(crate) fn decide(fs: &FsInner, st: &mut InodeState, needs_commit: bool, datasync: bool) -> Decision {
    if !fs.opts.adaptive || fs.opts.data != DataMode::Ordered || !st.d.is_reg() || st.window.pinned {
        return Decision::Keep;
    }
    let bytes = std::mem::take(&mut st.window.bytes);
    let w = u32::try_from(bytes.div_ceil(fs.geo.block_size as u64)).unwrap_or(u32::MAX);
    let win = &mut st.window;
    let grew = st.d.size != win.start_size || st.d.blocks != win.start_blocks;
    (win.start_size, win.start_blocks) = (st.d.size, st.d.blocks);
    if st.d.flags & EXT4_JOURNAL_DATA_FL == 0 {
        // With ordered-data checksums an ordered window costs one flush too: only a file
        // expected to die before its checkpoint saves anything in the log.
        let small = w <= SMALL_BLOCKS && !fs.journal.config().ordered_sums;
        let fits = small || (win.short_lived && w <= fs.journal.max_tx_blocks() / SHORT_LIVED_LOG_SHARE);
        return if needs_commit && w > 0 && fits { Decision::ToData } else { Decision::Keep };
    }
    if w == 0 {
        return Decision::Keep;
    }
    let back = |win: &mut Window| {
        (win.large_runs, win.debt) = (0, 0);
        Decision::ToOrdered
    };
    let cost = switch_cost_blocks(fs.opts.leave);
    if w >= LARGE_BLOCKS && !win.short_lived {
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
/// `leave=revoke` setting; see `cjfs_journal`'s `unjournal.rs`): the blocks it logged in the
/// switch's transaction become that transaction's ordered writes and are revoked there, the
/// flag is cleared, and its other committed images stay checkpoint work ([`images_left`]).
/// Returns `false`, having changed nothing, where the caller must empty the journal instead:
/// the `empty` setting, iJournaling (an i-transaction may make the file durable without the
/// revoking commit), several logs, a file without an extent tree.
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
    let maps = if crate::block_map::is_block_mapped(st) {
        crate::block_map::owned(&st.d.block, &mut store, fs.geo.block_size)?.runs
    } else {
        extent_tree::extents_in_range(&st.d.block, &mut store, st.csum, 0, u32::MAX)?
    };
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
    let (mut tx, handed, bufs) = loop {
        let cur = j.current_tx();
        if cur.tid > 1 {
            j.wait(cjfs_journal::TxId::new(cur.log, cur.tid - 1))?;
        }
        // Ordered data takes no log space; revoke records do (8 bytes each, several
        // hundred to a block).
        let mut tx = Tx::start(fs, 8 + (bufs.len() as u32).div_ceil(128))?;
        // Only the window's blocks, logged in this transaction, are handed over now; the
        // others keep their committed images, journaled again if the file rewrites them
        // before their checkpoint (`before_in_place`), revoked if it frees them.
        let running = tx.h.tx_id();
        let here: Vec<_> = bufs.iter().filter(|b| b.jstate().running == Some(running)).cloned().collect();
        if let Some(handed) = tx.h.leave_data_journaling(&here, revoke)? {
            break (tx, handed, here);
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
