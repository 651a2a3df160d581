//! iJournaling (Park and Shin, ATC'17): fsync writes a file-level i-transaction instead of
//! committing the running transaction.
//!
//! In data=ordered an fsync that commits waits for the whole running transaction — every
//! other file's metadata and ordered data — and for the commit ahead of it. Here the fsync
//! caller writes, in its own context, a small record holding only what the fsynced file needs
//! into the ijournal area of its core, and leaves the running transaction to the periodic
//! commit: the file's data (written and waited for, this file's only), its inode, its extent
//! tree blocks changed since the last durable commit, and the entries of the file and of each
//! new directory on its path that no durable commit holds yet. Bitmaps, group descriptors
//! and counters are not logged: recovery rebuilds them from what the records describe
//! (`crate::ijournal_replay`). The format is in `crate::ondisk::ijournal`.
//!
//! # What is tracked, and when it is forgotten
//!
//! Per inode ([`IjInode`], a leaf lock, so an fsync can read a parent's without taking the
//! parent's inode lock, which the lock order forbids under the child's): the entry that
//! made it, while that transaction may not be durable (the paper's uncommitted-DE flag); a
//! hard link made (the HL flag); a change no file-level record can carry exactly, with its
//! reason; for a directory, the names removed from it. Per file (`InodeState::ij_tree`):
//! the extent tree blocks changed. Every mark names its transaction and counts until that
//! transaction is *durable*, not merely committing: an fsync during an in-flight commit must
//! still log what that commit has not yet made durable.
//!
//! # When fsync commits instead (the fallback list)
//!
//! A record is exact only for what it carries; everything else falls back to a normal
//! commit ([`Fallback`]): a directory fsync and a hard link made since the last durable
//! commit (the paper's two cases); a rename of the file, or over it, or an unlink of one of
//! its names (a record cannot remove the old name: "never both"); a rename of any directory
//! (an ancestor of the file may have moved: its record would restore the old path); a name
//! on the path that reuses a name a rename, an exchange or rmdir removed from the same
//! directory, not durably yet (recovery may still find the old entry, and dropping it would
//! lose the inode that moved away; a name freed only by unlinks is reused by the record
//! itself, [`NewEntry::replace`]); an xattr block or an EA inode changed; an orphan
//! (unlinked while open, or being freed); journaled data (data=journal, `chattr +j`); a
//! symlink whose target is in a block, while new; a record larger than its header or the
//! area; an area full even after forgetting every dead record; a change of the file's quota
//! charge (its blocks, owner or life, on `quota` images: `crate::quota`). Deletions, renames and
//! indexed directories need no fallback of their own beyond these: records carry entries
//! as names, and recovery inserts them with the directory code (htree included).
//!
//! # Grouping, and how the data is made durable
//!
//! Fsyncs of one inode run one at a time (`Inode::fsync_lock`), and concurrent ones are
//! grouped ([`FsyncGroup`]): a thread that queued behind an fsync of the same file is served
//! by the next one if that one captured the inode after the thread entered. The file's data
//! goes as FUA writes when it forms a few device requests ([`FUA_MAX_RUNS`]), else as plain
//! writes and one flush. With other fsyncs writing to the same area (setting `idata`,
//! [`IData::Grouped`], the default) the data goes as plain writes and the flush that makes
//! it durable is the one its batch of records issues before their final blocks (below),
//! shared by every fsync in the batch.
//!
//! # Per-core areas
//!
//! Each fsync writes to the area of the core it runs on (`sched_getcpu() % areas`; with more
//! areas than cores, a slot per thread), holding the area's lock only to reserve space:
//! fsyncs on different cores run in parallel. Only the sub-TxID counter is global.
//!
//! # Group commit of records
//!
//! The records' final blocks (the single form's headers, the commit form's commit blocks)
//! of the fsyncs on one area go to the device in batches ([`write_final`]): the first fsync
//! to find no batch in flight writes all queued blocks, contiguous ones as one request, while
//! the ones arriving meanwhile queue for the next batch. Each FUA request costs a device with
//! a volatile cache about a flush of its own, so at many threads per area one per fsync made
//! the device, not the journal, the limit. What reaches the disk is the same records. A
//! batch with a member whose data waits for it flushes once before its final blocks; every
//! member queued its blocks only after its own writes completed, so that flush covers them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cjfs_blockdev::{BlockBuf, BlockKind, WriteRequest, WriteTag};
use cjfs_journal::lock_rank::{Rank, RankedMutex};
use cjfs_journal::lock_stat::{WaitCv, WaitSite};
use cjfs_journal::ring::LogRing;
use cjfs_journal::{Buffer, IData, IForm, JournalArea, TxId};

use crate::error::{FsError, FsResult};
use crate::fs::FsInner;
use crate::inode::{Inode, InodeState};
use crate::ondisk::ijournal::{
    AreaHeader, Dentry, RecordCommit, RecordHeader, chain_csum, max_tags, payload_csum,
};
use crate::ondisk::inode::EXT4_JOURNAL_DATA_FL;
use crate::types::{DataMode, Ino, ROOT_INO};

/// Why an fsync committed instead of writing an i-transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// fsync of a directory (the paper: a normal commit covers its whole subtree's entries).
    Directory,
    /// A hard link was made to the file since the last durable commit (the paper's HL flag).
    HardLink,
    /// The file was renamed, renamed over or exchanged, or one of its names unlinked.
    Rename,
    /// A directory was renamed: an ancestor of the file may have moved.
    DirRename,
    /// A name on the file's path reuses a name a rename, an exchange or rmdir removed from its
    /// directory, not durably yet.
    NameReuse,
    /// The file's xattr block, or an EA inode holding one of its values, changed.
    XattrBlock,
    /// The file is an orphan (unlinked while open) or being freed.
    Orphan,
    /// The file's data is journaled (data=journal or `chattr +j`).
    JournalData,
    /// A new symlink whose target is in a block.
    SymlinkBlock,
    /// The records do not fit a header or the area.
    TooLarge,
    /// The area is full of records no durable commit has made dead yet.
    AreaFull,
    /// The file's quota charge (blocks, owner, life) changed: an i-transaction carries no
    /// quota block (`crate::quota`).
    Quota,
}

impl Fallback {
    /// Every reason, in report order.
    pub const ALL: [Fallback; 12] = [
        Fallback::Directory,
        Fallback::HardLink,
        Fallback::Rename,
        Fallback::DirRename,
        Fallback::NameReuse,
        Fallback::XattrBlock,
        Fallback::Orphan,
        Fallback::JournalData,
        Fallback::SymlinkBlock,
        Fallback::TooLarge,
        Fallback::AreaFull,
        Fallback::Quota,
    ];

    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Fallback::Directory => "directory",
            Fallback::HardLink => "hard-link",
            Fallback::Rename => "rename-unlink",
            Fallback::DirRename => "dir-rename",
            Fallback::NameReuse => "name-reuse",
            Fallback::XattrBlock => "xattr-block",
            Fallback::Orphan => "orphan",
            Fallback::JournalData => "journal-data",
            Fallback::SymlinkBlock => "symlink-block",
            Fallback::TooLarge => "too-large",
            Fallback::AreaFull => "area-full",
            Fallback::Quota => "quota",
        }
    }

    fn index(self) -> usize {
        Fallback::ALL.iter().position(|&f| f == self).unwrap_or(0)
    }
}

/// An entry no durable commit holds yet: the inode's name in its parent.
#[derive(Debug, Clone)]
pub(crate) struct NewEntry {
    pub parent: Ino,
    pub name: Box<[u8]>,
    pub ftype: u8,
    pub tx: TxId,
    /// The name reuses one unlinked from `parent` by a transaction not durable then: the
    /// record asks recovery to drop the old entry if it finds one (`FLAG_REPLACE`).
    pub replace: bool,
}

/// One inode's iJournaling marks. Protected by [`Inode::ij`] (a leaf: one at a time, nothing
/// taken under it). See the module docs.
#[derive(Debug, Default)]
pub(crate) struct IjInode {
    /// The entry that created the inode.
    pub entry: Option<NewEntry>,
    /// The latest change a record cannot carry, and why.
    pub unsafe_tx: Option<(TxId, Fallback)>,
    /// The latest hard link made to it.
    pub hard_link: Option<TxId>,
    /// A directory: names removed from it, with the latest removal's transaction and
    /// whether every removal not yet durable was an unlink of a non-directory (the only kind
    /// a record's [`NewEntry::replace`] can undo at recovery: the old inode just loses the
    /// link; a rename or exchange moved it to a name the record cannot restore).
    pub removed: HashMap<Box<[u8]>, (TxId, bool)>,
    /// A new directory: its record (as stored last), for the records of files below it.
    pub image: Option<Vec<u8>>,
}

impl IjInode {
    /// Whether anything here still matters (the inode must then stay cached).
    pub fn pending(&self) -> bool {
        self.entry.is_some()
            || self.unsafe_tx.is_some()
            || self.hard_link.is_some()
            || !self.removed.is_empty()
    }

    /// Forget the marks whose transactions are durable.
    fn prune(&mut self, fs: &FsInner) {
        let j = &fs.journal;
        if self.entry.as_ref().is_some_and(|e| j.is_durable(e.tx)) {
            self.entry = None;
            self.image = None;
        }
        if self.unsafe_tx.is_some_and(|(t, _)| j.is_durable(t)) {
            self.unsafe_tx = None;
        }
        if self.hard_link.is_some_and(|t| j.is_durable(t)) {
            self.hard_link = None;
        }
        if !self.removed.is_empty() {
            self.removed.retain(|_, (t, _)| !j.is_durable(*t));
        }
    }
}

/// Counters (relaxed atomics), see [`IjStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    fsyncs: AtomicU64,
    served: AtomicU64,
    clean: AtomicU64,
    grouped: AtomicU64,
    fallbacks: [AtomicU64; Fallback::ALL.len()],
    records: AtomicU64,
    dir_records: AtomicU64,
    blocks: AtomicU64,
    payload_blocks: AtomicU64,
    data_blocks: AtomicU64,
    flushes: AtomicU64,
    wraps: AtomicU64,
    max_fill_permille: AtomicU64,
    commits_kicked: AtomicU64,
    batches: AtomicU64,
    batch_requests: AtomicU64,
    data_grouped: AtomicU64,
    data_ns: AtomicU64,
    record_ns: AtomicU64,
}

/// iJournaling statistics since mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IjStats {
    /// Areas in use.
    pub areas: u32,
    /// fsync and fdatasync calls.
    pub fsyncs: u64,
    /// Served by i-transactions (no normal commit).
    pub served: u64,
    /// Nothing to make durable but data (no record, no commit).
    pub clean: u64,
    /// Made durable by another fsync of the same file that started after them (no record of
    /// their own, no commit).
    pub grouped: u64,
    /// Normal commits instead, by reason ([`Fallback::name`]).
    pub fallbacks: Vec<(String, u64)>,
    /// i-transactions written.
    pub records: u64,
    /// Of them, new directories' (on an fsynced file's path).
    pub dir_records: u64,
    /// ijournal blocks written (headers, extent blocks, commit blocks).
    pub blocks: u64,
    /// Extent tree blocks among them.
    pub payload_blocks: u64,
    /// Data blocks the served fsyncs wrote.
    pub data_blocks: u64,
    /// Device flushes the served fsyncs issued.
    pub flushes: u64,
    /// Times a record wrapped around the end of its area.
    pub wraps: u64,
    /// Highest area occupancy seen, in thousandths.
    pub max_fill_permille: u64,
    /// Normal commits asked for early because an area was half full.
    pub commits_kicked: u64,
    /// Batches the records' final blocks went out in (one per served fsync without
    /// grouping; fewer when concurrent fsyncs on an area share one).
    pub batches: u64,
    /// Device requests those batches took (contiguous blocks share one).
    pub batch_requests: u64,
    /// Served fsyncs whose data their batch's one flush made durable ([`IData::Grouped`]).
    pub data_grouped: u64,
    /// Time the served fsyncs spent making their data (and extent blocks) durable, µs.
    pub data_us: u64,
    /// Time they spent writing their records durable, µs.
    pub record_us: u64,
}

impl IjStats {
    /// Fallbacks in all.
    pub fn fallback_total(&self) -> u64 {
        self.fallbacks.iter().map(|(_, n)| n).sum()
    }

    /// What happened since `earlier` (the highest fill stays the later one's).
    pub fn since(&self, earlier: &IjStats) -> IjStats {
        let fallbacks = self
            .fallbacks
            .iter()
            .map(|(k, n)| {
                let before = earlier.fallbacks.iter().find(|(e, _)| e == k).map_or(0, |(_, m)| *m);
                (k.clone(), n.saturating_sub(before))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        IjStats {
            areas: self.areas,
            fsyncs: self.fsyncs.saturating_sub(earlier.fsyncs),
            served: self.served.saturating_sub(earlier.served),
            clean: self.clean.saturating_sub(earlier.clean),
            grouped: self.grouped.saturating_sub(earlier.grouped),
            fallbacks,
            records: self.records.saturating_sub(earlier.records),
            dir_records: self.dir_records.saturating_sub(earlier.dir_records),
            blocks: self.blocks.saturating_sub(earlier.blocks),
            payload_blocks: self.payload_blocks.saturating_sub(earlier.payload_blocks),
            data_blocks: self.data_blocks.saturating_sub(earlier.data_blocks),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            wraps: self.wraps.saturating_sub(earlier.wraps),
            max_fill_permille: self.max_fill_permille,
            commits_kicked: self.commits_kicked.saturating_sub(earlier.commits_kicked),
            batches: self.batches.saturating_sub(earlier.batches),
            batch_requests: self.batch_requests.saturating_sub(earlier.batch_requests),
            data_grouped: self.data_grouped.saturating_sub(earlier.data_grouped),
            data_us: self.data_us.saturating_sub(earlier.data_us),
            record_us: self.record_us.saturating_sub(earlier.record_us),
        }
    }
}

/// One area's ring of records. Protected by [`Area::ring`].
struct AreaRing {
    ring: LogRing,
    /// Id of the next span.
    next_id: u64,
    /// TxID of each span in the ring, oldest first (parallel to `ring.spans()`).
    tids: VecDeque<u64>,
}

/// One ijournal area.
pub(crate) struct Area {
    /// Where it is on the device (block 0: its header).
    pub dev_area: JournalArea,
    /// This mount's generation (records of others are dead).
    pub generation: u64,
    /// The ring. Lock: itself (a leaf, held only to reserve or release space).
    ring: RankedMutex<AreaRing>,
    /// Records' final blocks waiting for, or in, a batch. Lock: itself (a leaf, held only
    /// to queue, take or finish a batch, never across the write).
    batch: RankedMutex<Batches>,
    /// Signalled when a batch is written (or failed).
    batch_cv: WaitCv,
    /// Fsyncs between reserving space here and their record's durability (whether an
    /// fsync is alone, for [`IData::Grouped`]). Atomic.
    writers: AtomicU64,
}

/// The group commit of one area's records (see [`write_final`]). Protected by
/// [`Area::batch`].
#[derive(Debug, Default)]
struct Batches {
    /// Final blocks (device block, image) queued for the next batch.
    pending: Vec<(u64, BlockBuf)>,
    /// A fsync in the next batch left its data to the batch's flush ([`IData::Grouped`]).
    flush_first: bool,
    /// Id of the batch `pending` goes out in (ids start at 1).
    next: u64,
    /// Every batch up to this id is written or has failed.
    done: u64,
    /// A leader is writing a batch.
    writing: bool,
    /// The latest failed batches and their errors, newest last.
    failed: VecDeque<(u64, FsError)>,
}

/// Failed batches remembered for their waiters (a waiter checks right after its batch).
const FAILED_KEPT: usize = 64;

/// iJournaling's state in a mounted file system.
pub(crate) struct IJournal {
    pub areas: Vec<Area>,
    /// Checksum seed of the file system's ijournal blocks.
    pub seed: u32,
    /// Record form.
    pub form: IForm,
    /// How a served fsync's data is made durable.
    data: IData,
    /// The sub-TxID counter (global: orders records of every area).
    sub: AtomicU64,
    /// The last transaction that renamed a directory (its tid; 0: none since mount).
    dir_rename: AtomicU64,
    pub counters: Counters,
}

/// One record to write.
struct Planned {
    header: RecordHeader,
    payload: Vec<BlockBuf>,
}

impl IJournal {
    /// Set up the areas `dev_areas` of a mount that writes records: each gets a new
    /// generation (records of an earlier mount are dead from now on), durable before any
    /// record is written.
    pub fn start(
        dev: &cjfs_blockdev::Device,
        dev_areas: Vec<JournalArea>,
        uuid: &[u8; 16],
        form: IForm,
        data: IData,
    ) -> FsResult<IJournal> {
        let seed = crate::ondisk::ijournal::seed(uuid);
        let bs = dev.block_size();
        let mut areas = Vec::with_capacity(dev_areas.len());
        for (i, a) in dev_areas.into_iter().enumerate() {
            let raw = dev.read_block(a.map(0)?)?;
            let old = AreaHeader::decode(seed, &raw)?;
            let generation = old.map_or(1, |h| h.generation.wrapping_add(1));
            let h = AreaHeader { index: i as u32, len: a.len() as u32, generation, replay: None };
            dev.write_block(
                a.map(0)?,
                BlockBuf::from(h.encode(seed, bs)),
                WriteTag::kind(BlockKind::JournalSuper),
            )?;
            let ring = LogRing::new(1, a.len());
            areas.push(Area {
                dev_area: a,
                generation,
                ring: RankedMutex::new(Rank::Leaf, AreaRing { ring, next_id: 1, tids: VecDeque::new() }),
                batch: RankedMutex::new(Rank::Leaf, Batches { next: 1, ..Batches::default() }),
                batch_cv: WaitCv::new(WaitSite::RecordBatch),
                writers: AtomicU64::new(0),
            });
        }
        if !areas.is_empty() {
            dev.flush()?;
        }
        Ok(IJournal {
            areas,
            seed,
            form,
            data,
            sub: AtomicU64::new(1),
            dir_rename: AtomicU64::new(0),
            counters: Counters::default(),
        })
    }

    fn fallback(&self, why: Fallback) {
        self.counters.fallbacks[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Statistics since mount.
    pub fn stats(&self) -> IjStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IjStats {
            areas: self.areas.len() as u32,
            fsyncs: l(&c.fsyncs),
            served: l(&c.served),
            clean: l(&c.clean),
            grouped: l(&c.grouped),
            fallbacks: Fallback::ALL
                .iter()
                .map(|f| (f.name().to_string(), l(&c.fallbacks[f.index()])))
                .filter(|(_, n)| *n > 0)
                .collect(),
            records: l(&c.records),
            dir_records: l(&c.dir_records),
            blocks: l(&c.blocks),
            payload_blocks: l(&c.payload_blocks),
            data_blocks: l(&c.data_blocks),
            flushes: l(&c.flushes),
            wraps: l(&c.wraps),
            max_fill_permille: l(&c.max_fill_permille),
            commits_kicked: l(&c.commits_kicked),
            batches: l(&c.batches),
            batch_requests: l(&c.batch_requests),
            data_grouped: l(&c.data_grouped),
            data_us: l(&c.data_ns) / 1000,
            record_us: l(&c.record_ns) / 1000,
        }
    }
}

/// An inode's iJournaling marks (`Inode::ij`, shared with `InodeState::ij`).
pub(crate) type Marks = Arc<RankedMutex<IjInode>>;

/// Note that the inode of `child` got a fresh entry `name` (name-map key `key`, see
/// `crate::dir::name_key`; type `ftype`) in directory `parent` (inode `parent_ino`, marks
/// `parent`) in transaction `tx`. A name removed from
/// the directory by a transaction not yet durable is being reused: if only unlinks removed
/// it, the record carries the replacement; else fsync falls back on a commit.
pub(crate) fn note_new_entry(
    fs: &FsInner,
    child: &Marks,
    (parent_ino, parent): (Ino, &Marks),
    (name, key): (&[u8], &[u8]),
    ftype: u8,
    tx: TxId,
) {
    if fs.ij.get().is_none() {
        return;
    }
    // Removed names are keyed as the directory matches them (casefolded in a casefolded
    // directory: `Foo` reuses what `FOO`'s unlink freed).
    let reused = {
        let mut p = parent.lock();
        p.prune(fs);
        p.removed.get(key).map(|&(_, unlinks_only)| unlinks_only)
    };
    let mut c = child.lock();
    let replace = reused == Some(true);
    c.entry = Some(NewEntry { parent: parent_ino, name: name.into(), ftype, tx, replace });
    if reused == Some(false) {
        c.unsafe_tx = Some((tx, Fallback::NameReuse));
    }
}

/// Note that the name with name-map key `name` left the directory with marks `dir` in
/// transaction `tx`; `unlinked`: by
/// an unlink of a non-directory (its inode just lost the link), not by a rename, an
/// exchange or rmdir.
pub(crate) fn note_removed(fs: &FsInner, dir: &Marks, name: &[u8], tx: TxId, unlinked: bool) {
    if fs.ij.get().is_none() {
        return;
    }
    let mut d = dir.lock();
    d.prune(fs);
    let e = d.removed.entry(name.into()).or_insert((tx, true));
    *e = (tx, e.1 && unlinked);
}

/// Note a change no record can carry (`why`), in transaction `tx`.
pub(crate) fn note_unsafe(fs: &FsInner, m: &Marks, why: Fallback, tx: TxId) {
    if fs.ij.get().is_none() {
        return;
    }
    m.lock().unsafe_tx = Some((tx, why));
}

/// Note a hard link made in transaction `tx`.
pub(crate) fn note_hard_link(fs: &FsInner, m: &Marks, tx: TxId) {
    if fs.ij.get().is_none() {
        return;
    }
    m.lock().hard_link = Some(tx);
}

/// Note a directory rename in transaction `tx`.
pub(crate) fn note_dir_rename(fs: &FsInner, tx: TxId) {
    if let Some(ij) = fs.ij.get() {
        ij.dir_rename.fetch_max(tx.tid, Ordering::AcqRel);
    }
}

/// Note that `st` was stored in transaction `tx` (its record `raw`): extent tree blocks the
/// transaction changed for it (drained from the handle) join its dirty set, and a new
/// directory's record image is kept for the records of files below it.
pub(crate) fn note_stored(fs: &FsInner, st: &mut InodeState, tx: TxId, tree: Vec<(u64, bool)>, raw: &[u8]) {
    if st.d.is_dir() {
        let mut g = st.ij.lock();
        if g.entry.is_some() {
            g.image = Some(raw.to_vec());
        }
        return;
    }
    for (blk, freed) in tree {
        if freed {
            st.ij_tree.remove(&blk);
        } else {
            st.ij_tree.insert(blk, tx);
        }
    }
    if st.ij_tree.len() > 64 {
        st.ij_tree.retain(|_, t| !fs.journal.is_durable(*t));
    }
}

/// Whether an uncached copy of this inode would lose marks that still matter (see
/// `InodeCache::trim`).
pub(crate) fn must_stay(fs: &FsInner, st: &InodeState) -> bool {
    if fs.ij.get().is_none() {
        return false;
    }
    if st.ij_tree.values().any(|t| !fs.journal.is_durable(*t)) {
        return true;
    }
    st.ij.try_lock().is_none_or(|mut m| {
        m.prune(fs);
        m.pending()
    })
}

/// Make `node` durable (fsync; fdatasync with `datasync`) on a mount with iJournaling: by
/// i-transactions when the file allows one, else (the reason counted) by a normal commit.
/// `Ok(false)`: the mount does not use iJournaling, the caller commits. Every fsync of the
/// inode runs under its `fsync_lock`, the committing ones too: a data buffer an earlier fsync
/// wrote is then durable by the time a later one looks at it.
///
/// Concurrent fsyncs of one file are grouped, as JBD2 groups the handles of one commit: each
/// takes a ticket on entry (after its caller's writes), and an fsync that succeeds publishes
/// the highest ticket taken before it captured the inode. A waiter whose ticket that covers
/// returns without a record of its own, so threads queued behind one fsync of a shared file
/// are served by the next one rather than one after another.
pub(crate) fn fsync(fs: &FsInner, node: &Arc<Inode>, datasync: bool) -> FsResult<bool> {
    let Some(ij) = fs.ij.get() else { return Ok(false) };
    ij.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
    let ticket = node.fsync_tickets.fetch_add(1, Ordering::AcqRel) + 1;
    let mut group = node.fsync_lock.lock();
    if let Some((upto, e)) = &group.failed
        && ticket <= *upto
    {
        // The fsync that captured this caller's writes failed: so does this one (that
        // attempt put the data buffers back for the next fsync to write).
        return Err(e.clone());
    }
    if ticket <= group.full || (datasync && ticket <= group.data) {
        ij.counters.grouped.fetch_add(1, Ordering::Relaxed);
        return Ok(true);
    }
    // Every caller holding a ticket up to this one wrote before the capture below.
    let upto = node.fsync_tickets.load(Ordering::Acquire);
    match fsync_one(fs, ij, node, datasync) {
        Ok(()) => {
            group.data = group.data.max(upto);
            if !datasync {
                group.full = group.full.max(upto);
            }
            Ok(true)
        }
        Err(e) => {
            group.failed = Some((upto, e.clone()));
            Err(e)
        }
    }
}

/// One fsync under the inode's `fsync_lock` (see [`fsync`]).
fn fsync_one(fs: &FsInner, ij: &IJournal, node: &Arc<Inode>, datasync: bool) -> FsResult<()> {
    let j = &fs.journal;
    let mut st = node.state.write();
    let tx = if datasync { st.datasync_tx } else { st.meta_tx };
    if j.is_durable(tx) {
        let bufs = std::mem::take(&mut st.dirty_data);
        drop(st);
        ij.counters.clean.fetch_add(1, Ordering::Relaxed);
        let r = j.sync_data(&bufs).map_err(FsError::from);
        return node.keep_dirty(bufs, r);
    }
    let why = match plan(fs, ij, node, &mut st) {
        Ok(plan) => {
            let bufs = std::mem::take(&mut st.dirty_data);
            drop(st);
            match write_records(fs, ij, plan, &bufs) {
                Ok(()) => {
                    ij.counters.served.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(Written::Fallback(why)) => {
                    // The data buffers go back: the commit's data step needs them.
                    st = node.state.write();
                    st.dirty_data.extend(bufs);
                    why
                }
                Err(Written::Failed(e)) => return node.keep_dirty(bufs, Err(e)),
            }
        }
        Err(why) => why,
    };
    ij.fallback(why);
    let tx = if datasync { st.datasync_tx } else { st.meta_tx };
    let bufs = std::mem::take(&mut st.dirty_data);
    drop(st);
    let r = j.fsync(tx, &bufs);
    node.keep_dirty(bufs, r.map_err(FsError::from))
}

/// Grouping of one inode's concurrent fsyncs, kept under its `fsync_lock`: which callers'
/// writes finished fsyncs made durable, by the tickets they took on entry
/// (`Inode::fsync_tickets`).
#[derive(Debug, Default)]
pub(crate) struct FsyncGroup {
    /// Highest ticket a successful fsync covered: everything its caller wrote is durable.
    full: u64,
    /// Highest ticket a successful fdatasync or fsync covered (an fsync waiter is not
    /// covered by an fdatasync: its clean path leaves timestamps in the running transaction).
    data: u64,
    /// Highest ticket a failed fsync covered, and its error: reported to those callers too.
    failed: Option<(u64, FsError)>,
}

/// Capture the records an fsync of `node` writes (under its inode lock), or why it cannot.
fn plan(fs: &FsInner, ij: &IJournal, node: &Inode, st: &mut InodeState) -> Result<Vec<Planned>, Fallback> {
    let j = &fs.journal;
    if st.d.is_dir() {
        return Err(Fallback::Directory);
    }
    if st.orphan || st.freed || st.d.links_count == 0 {
        return Err(Fallback::Orphan);
    }
    if fs.opts.data == DataMode::Journal || st.d.flags & EXT4_JOURNAL_DATA_FL != 0 {
        return Err(Fallback::JournalData);
    }
    let renamed = ij.dir_rename.load(Ordering::Acquire);
    if renamed != 0 && !j.is_durable(TxId::new(0, renamed)) {
        return Err(Fallback::DirRename);
    }
    let txid = j.current_tx();
    let bs = fs.geo.block_size;
    let isz = fs.geo.inode_size as usize;
    let mut out = Vec::new();
    // The file's own record.
    let entry = {
        let mut m = node.ij.lock();
        m.prune(fs);
        if let Some((_, why)) = m.unsafe_tx {
            return Err(why);
        }
        if m.hard_link.is_some() {
            return Err(Fallback::HardLink);
        }
        m.entry.clone()
    };
    if entry.is_some() && st.d.is_symlink() && !crate::namei::is_fast_symlink(st) {
        return Err(Fallback::SymlinkBlock);
    }
    st.ij_tree.retain(|_, t| !j.is_durable(*t));
    if st.ij_tree.len() > max_tags(bs, isz) {
        return Err(Fallback::TooLarge);
    }
    let mut tags = Vec::with_capacity(st.ij_tree.len());
    let mut payload = Vec::with_capacity(st.ij_tree.len());
    for &blk in st.ij_tree.keys() {
        let buf = fs.cache.read(blk).map_err(|_| Fallback::TooLarge)?;
        let img = buf.snapshot();
        tags.push((blk, payload_csum(ij.seed, &img)));
        payload.push(img);
    }
    let mut raw = vec![0u8; isz];
    st.d.encode_into(&mut raw, &fs.csum, node.ino);
    let mut parent = entry.as_ref().map(|e| e.parent);
    out.push(Planned {
        header: RecordHeader {
            txid: txid.tid as u32,
            sub: ij.sub.fetch_add(1, Ordering::AcqRel),
            generation: 0,
            ino: node.ino,
            i_generation: st.d.generation,
            commit_form: ij.form == IForm::Commit,
            dir: false,
            dentry: entry.map(|e| Dentry {
                parent: e.parent,
                name: e.name.to_vec(),
                ftype: e.ftype,
                replace: e.replace,
            }),
            inode: raw,
            tags,
        },
        payload,
    });
    // Each new directory on the path, up to the first a durable commit holds.
    let mut depth = 0;
    while let Some(p) = parent.filter(|&p| p != ROOT_INO) {
        depth += 1;
        if depth > 4096 {
            return Err(Fallback::TooLarge);
        }
        let pnode = fs.inodes.get(fs, p).map_err(|_| Fallback::TooLarge)?;
        let mut m = pnode.ij.lock();
        m.prune(fs);
        let Some(e) = m.entry.clone() else { break };
        if let Some((_, why)) = m.unsafe_tx {
            return Err(why);
        }
        let Some(image) = m.image.clone() else { return Err(Fallback::TooLarge) };
        let i_generation = u32::from_le_bytes([image[0x64], image[0x65], image[0x66], image[0x67]]);
        let sub = ij.sub.fetch_add(1, Ordering::AcqRel);
        drop(m);
        if crate::planted::bugs(&fs.opts).skip_ancestor_record {
            // PLANTED BUG (test only): the new directory's record is left out, so after a
            // crash the file's entry names a directory recovery never made.
            parent = Some(e.parent);
            continue;
        }
        out.push(Planned {
            header: RecordHeader {
                txid: txid.tid as u32,
                sub,
                generation: 0,
                ino: p,
                i_generation,
                commit_form: ij.form == IForm::Commit,
                dir: true,
                dentry: Some(Dentry {
                    parent: e.parent,
                    name: e.name.to_vec(),
                    ftype: e.ftype,
                    replace: e.replace,
                }),
                inode: image,
                tags: Vec::new(),
            },
            payload: Vec::new(),
        });
        parent = Some(e.parent);
    }
    // Top-most first, as the paper writes them (recovery does not depend on it).
    out.reverse();
    Ok(out)
}

/// Why records were not written.
enum Written {
    /// Commit instead.
    Fallback(Fallback),
    /// A device error (the fsync fails).
    Failed(FsError),
}

impl From<FsError> for Written {
    fn from(e: FsError) -> Self {
        Written::Failed(e)
    }
}

impl From<cjfs_journal::JournalError> for Written {
    fn from(e: cjfs_journal::JournalError) -> Self {
        Written::Failed(e.into())
    }
}

impl From<cjfs_blockdev::DevError> for Written {
    fn from(e: cjfs_blockdev::DevError) -> Self {
        Written::Failed(e.into())
    }
}

/// Most device requests (runs of contiguous blocks) an fsync's data and extent blocks are
/// written FUA in; more go as plain writes and one flush. A FUA request costs about what a
/// flush of its own bytes costs, so a handful of them on a device's parallel channels beats
/// a flush that also drains everyone else's cached writes; a database's scattered pages
/// (tens of runs) do not.
const FUA_MAX_RUNS: usize = 4;

/// Reserve space in the caller's area for `plan`, write the data and the records, make them
/// durable.
fn write_records(
    fs: &FsInner,
    ij: &IJournal,
    mut plan: Vec<Planned>,
    data: &[Arc<Buffer>],
) -> Result<(), Written> {
    let j = &fs.journal;
    let dev = &fs.dev;
    let bs = fs.geo.block_size;
    let n: u64 = plan.iter().map(|p| p.header.blocks()).sum();
    let k = cjfs_journal::per_core::core_slot(ij.areas.len(), cjfs_journal::per_core::Admission::Core);
    let area = &ij.areas[k];
    let (start, id, kick) = {
        let mut r = area.ring.lock();
        if n + 1 > r.ring.capacity() {
            return Err(Written::Fallback(Fallback::TooLarge));
        }
        release_dead(&mut r, j.durable_upto());
        let id = r.next_id;
        let Some(start) = r.ring.reserve(id, n) else { return Err(Written::Fallback(Fallback::AreaFull)) };
        r.next_id += 1;
        r.tids.push_back(u64::from(plan[0].header.txid));
        if r.ring.advance(start, n) < start || r.ring.advance(start, n) == r.ring.first() {
            ij.counters.wraps.fetch_add(1, Ordering::Relaxed);
        }
        let fill = (r.ring.fill() * 1000.0) as u64;
        ij.counters.max_fill_permille.fetch_max(fill, Ordering::Relaxed);
        (start, id, fill >= 500)
    };
    if kick {
        // Half full: ask for the commit that makes these records dead before the area fills
        // and an fsync has to wait for it (after the area's lock: a leaf, and the request
        // takes the log's state).
        ij.counters.commits_kicked.fetch_add(1, Ordering::Relaxed);
        let _ = j.commit(j.current_tx());
    }
    // Counted from here to the record's durability: whether this fsync is alone on the area.
    let others = area.writers.fetch_add(1, Ordering::SeqCst);
    let r = (|| -> Result<(), Written> {
        j.claim_ijournal()?;
        // Lay the records out: header, payload, commit block.
        let ring = LogRing::new(1, area.dev_area.len());
        let mut at = start;
        let mut first_phase: Vec<(u64, BlockBuf)> = Vec::new();
        let mut last_phase: Vec<(u64, BlockBuf)> = Vec::new();
        let mut payload_blocks = 0u64;
        for p in &mut plan {
            p.header.generation = area.generation;
            let hdr = BlockBuf::from(p.header.encode(ij.seed, bs)?);
            let hdr_at = at;
            at = ring.next(at);
            let mut covered = vec![hdr.clone()];
            for img in &p.payload {
                first_phase.push((area.dev_area.map(at)?, img.clone()));
                covered.push(img.clone());
                at = ring.next(at);
                payload_blocks += 1;
            }
            if p.header.commit_form {
                let c = RecordCommit {
                    txid: p.header.txid,
                    blocks: covered.len() as u32,
                    sub: p.header.sub,
                    generation: area.generation,
                    csum: chain_csum(ij.seed, covered.iter().map(|b| &b[..])),
                };
                first_phase.push((area.dev_area.map(hdr_at)?, hdr));
                last_phase.push((area.dev_area.map(at)?, BlockBuf::from(c.encode(ij.seed, bs))));
                at = ring.next(at);
            } else {
                last_phase.push((area.dev_area.map(hdr_at)?, hdr));
            }
        }
        // The file's data first, then (with the payload, or the commit form's headers)
        // everything the final blocks vouch for, durable, then the final blocks durable. On
        // a device with a volatile cache and FUA, writes of a few runs are FUA and no flush is
        // issued: a flush drains every dirty byte in the device's cache, a background
        // writer's too, while a FUA write makes durable only its own blocks (the fsync's cost
        // then does not grow with other files' dirty data). Scattered data (many runs: a
        // database's pages) goes as plain writes and one flush instead, since each FUA request
        // costs the device a flush of its own. Without FUA: writes and flushes; without a
        // volatile cache: writes only.
        //
        // With other fsyncs writing to this area (`IData::Grouped`), data that would go FUA
        // (a few requests: an append) goes as plain writes and its flush is left to the batch
        // the record's final blocks go out in: the batch's leader flushes once, after every
        // member's writes completed (each queues only then), before the final blocks — one
        // flush for the batch instead of a FUA request per fsync, each of which takes a
        // channel for about a flush's time (varmail-shared at 32 threads: 1.21x `jbd2`
        // against 0.84x). Scattered data keeps its own flush, issued at once beside the
        // others' (a queued flush): behind the batch it would wait a flush and a FUA write
        // more, for a batch of about two (OLTP-insert at 32 threads: 1.12x against 1.52x).
        // Alone, FUA keeps the fsync from draining other files' cached writes.
        let caps = dev.caps();
        let fua = caps.fua && caps.volatile_cache;
        let candidate = ij.data == IData::Grouped && caps.volatile_cache && others > 0;
        let t0 = std::time::Instant::now();
        // The extent blocks (and the commit form's headers) go in the data's batch.
        let w =
            j.write_data_with(data, first_phase.clone(), if fua && !candidate { FUA_MAX_RUNS } else { 0 })?;
        ij.counters.data_blocks.fetch_add(w.blocks, Ordering::Relaxed);
        let grouped = candidate && w.requests <= FUA_MAX_RUNS;
        let wrote_first = w.blocks > 0 || !first_phase.is_empty();
        // After FUA writes a flush is still due for data another path wrote and this one
        // waited for.
        let flush = caps.volatile_cache && ((!w.fua && (wrote_first || !data.is_empty())) || w.others > 0);
        if flush && !grouped {
            j.flush_device()?;
            ij.counters.flushes.fetch_add(1, Ordering::Relaxed);
        }
        if flush && grouped {
            ij.counters.data_grouped.fetch_add(1, Ordering::Relaxed);
        }
        let t1 = t0.elapsed();
        write_final(fs, ij, area, last_phase, fua, flush && grouped)?;
        ij.counters.data_ns.fetch_add(t1.as_nanos() as u64, Ordering::Relaxed);
        ij.counters.record_ns.fetch_add((t0.elapsed() - t1).as_nanos() as u64, Ordering::Relaxed);
        let c = &ij.counters;
        c.records.fetch_add(plan.len() as u64, Ordering::Relaxed);
        c.dir_records.fetch_add(plan.iter().filter(|p| p.header.dir).count() as u64, Ordering::Relaxed);
        c.blocks.fetch_add(n, Ordering::Relaxed);
        c.payload_blocks.fetch_add(payload_blocks, Ordering::Relaxed);
        Ok(())
    })();
    area.writers.fetch_sub(1, Ordering::SeqCst);
    // Written or not, the span may be released once dead (a failed record is garbage).
    area.ring.lock().ring.mark_durable(id);
    r
}

/// Make the records' final blocks `last` durable (FUA writes with `fua`, else writes and a
/// flush; after one flush first when `flush_first`: this fsync's data, written and completed,
/// waits for it), together with those of every fsync on the area that gets there meanwhile: the
/// group commit of i-transactions. The first fsync to find no batch in flight leads: it
/// takes every queued block, writes them (contiguous ones as one request) and wakes the
/// others; one that arrives while a batch is in flight queues for the next. A FUA request
/// costs the device about a flush of its own, so at many threads per area each fsync
/// otherwise paid one for a single block. The records are independent: a batch changes how
/// many requests carry them, not what recovery finds. A failed batch fails every fsync in it.
fn write_final(
    fs: &FsInner,
    ij: &IJournal,
    area: &Area,
    last: Vec<(u64, BlockBuf)>,
    fua: bool,
    flush_first: bool,
) -> Result<(), Written> {
    let mut b = area.batch.lock();
    b.pending.extend(last);
    b.flush_first |= flush_first;
    let mine = b.next;
    loop {
        if b.done >= mine {
            return match b.failed.iter().find(|(id, _)| *id == mine) {
                Some((_, e)) => Err(Written::Failed(e.clone())),
                None => Ok(()),
            };
        }
        if !b.writing {
            // Nobody writes and `mine` is not done: it is the batch `pending` goes out in.
            let mut blocks = std::mem::take(&mut b.pending);
            let flush_first = std::mem::take(&mut b.flush_first);
            let id = b.next;
            b.next += 1;
            b.writing = true;
            drop(b);
            let r = write_batch(fs, ij, &mut blocks, fua, flush_first);
            b = area.batch.lock();
            b.done = id;
            b.writing = false;
            if let Err(e) = r {
                b.failed.push_back((id, e));
                if b.failed.len() > FAILED_KEPT {
                    b.failed.pop_front();
                }
            }
            area.batch_cv.notify_all();
            continue;
        }
        b.wait(&area.batch_cv);
    }
}

/// Write one batch of final blocks, contiguous ones as one request, and make it durable;
/// with `flush_first`, after a flush that makes the members' completed data durable.
fn write_batch(
    fs: &FsInner,
    ij: &IJournal,
    blocks: &mut [(u64, BlockBuf)],
    fua: bool,
    flush_first: bool,
) -> FsResult<()> {
    let dev = &fs.dev;
    if flush_first {
        fs.journal.flush_device()?;
        ij.counters.flushes.fetch_add(1, Ordering::Relaxed);
    }
    blocks.sort_by_key(|(b, _)| *b);
    let mut reqs: Vec<WriteRequest> = Vec::new();
    for (blk, img) in blocks.iter() {
        match reqs.last_mut() {
            Some(r) if r.block + r.bufs.len() as u64 == *blk => r.bufs.push(img.clone()),
            _ => reqs.push(WriteRequest {
                block: *blk,
                bufs: vec![img.clone()],
                tag: WriteTag::kind(BlockKind::JournalCommit),
                fua,
            }),
        }
    }
    ij.counters.batches.fetch_add(1, Ordering::Relaxed);
    ij.counters.batch_requests.fetch_add(reqs.len() as u64, Ordering::Relaxed);
    cjfs_blockdev::wait_all(dev.submit_batch(reqs)?)?;
    if !fua && dev.caps().volatile_cache {
        fs.journal.flush_device()?;
        ij.counters.flushes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Release the spans, oldest first, that are written and whose TxID is durable.
fn release_dead(r: &mut AreaRing, durable: u64) {
    let mut upto = None;
    for (s, &tid) in r.ring.spans().iter().zip(r.tids.iter()) {
        if !s.durable || tid > durable {
            break;
        }
        upto = Some(s.id);
    }
    if let Some(id) = upto {
        let before = r.ring.spans().len();
        r.ring.release_upto(id);
        let gone = before - r.ring.spans().len();
        r.tids.drain(..gone);
    }
}
