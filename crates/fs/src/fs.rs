//! Mounting and unmounting: reading the layout, recovering the journal, starting it, and
//! the shared state every operation works on.
//!
//! # Lock order (outer to inner)
//!
//! Each lock carries its rank (`cjfs_journal::lock_rank::Rank`), checked in debug builds:
//!
//! 1. `FsInner::rename_lock` (cross-directory renames only);
//! 2. inode locks (`Inode::state`): a directory before anything in it; a rename's two
//!    parents ancestor-first (else ascending inode number), then its two children
//!    directory-first (else ascending inode number) — the check allows several, their
//!    order is this rule's; an inode's xattr block lock (`FsInner::xattr_block_locks`)
//!    after the inode, then EA inodes (`ea_inode`) in ascending order, inside a
//!    transaction;
//! 3. a journal handle (started after the inode locks, never while waiting for one);
//! 4. an inode cache shard, or a quota file (`crate::quota`, one at a time);
//! 5. `FsInner::orphan_lock`;
//! 6. a group's allocator lock (`FsInner::groups[g]`), one group at a time;
//! 7. `FsInner::sb` (the in-memory superblock);
//! 8. journal-internal locks and buffer locks (see the journal crate);
//! 9. a directory's name map (`Inode::names`), the orphan list (`FsInner::orphans`), the
//!    adaptive mode's young names (`FsInner::young`), the MMP holder (`FsInner::mmp`) and
//!    its updater's callback slot (`crate::mmp`), an
//!    inode's iJournaling marks and an ijournal area's ring and record batch, leaves (the
//!    batch lock is never held across its write: a follower parks on the area's condvar).
//!
//! No file-system-wide lock is taken on the data path.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use cjfs_blockdev::{BlockKind, Device, WriteTag};
use cjfs_journal::lock_rank::{Rank, RankedMutex};
use cjfs_journal::recovery::{RecoveryReport, recover_strict};
use cjfs_journal::superblock::{
    INCOMPAT_CJFS_IJOURNAL, INCOMPAT_CJFS_LOGS, INCOMPAT_FAST_COMMIT, JournalSuperblock, read_journal_areas,
    read_log_areas, read_superblock, write_superblock,
};
use cjfs_journal::{BufferCache, Journal, JournalArea, JournalKind, TxId};

use crate::error::{FsError, FsResult};
use crate::inode::InodeCache;
use crate::mkfs::{read_layout, read_layout_for};
use crate::ondisk::csum::Csum;
use crate::ondisk::features::{Access, INCOMPAT_RECOVER, RO_COMPAT_ORPHAN_PRESENT};
use crate::ondisk::group_desc::GroupDesc;
use crate::ondisk::inode::{EXT4_EXTENTS_FL, JOURNAL_INO};
use crate::ondisk::superblock::{
    STATE_ERROR, STATE_FC_REPLAY, STATE_VALID, SUPERBLOCK_SIZE, Superblock, sb_location,
};
use crate::types::{MountOptions, ROOT_INO};

/// Stripes of [`FsInner::xattr_block_locks`].
pub(crate) const XATTR_BLOCK_LOCKS: usize = 64;

/// Fixed numbers derived from the superblock.
#[derive(Debug, Clone)]
pub struct Geometry {
    /// Bytes per block (1024, 2048 or 4096).
    pub block_size: usize,
    /// Blocks in the file system.
    pub blocks_count: u64,
    /// First data block (1 with 1 KiB blocks, else 0).
    pub first_data_block: u64,
    /// Blocks per group.
    pub blocks_per_group: u32,
    /// Inodes per group.
    pub inodes_per_group: u32,
    /// Number of groups.
    pub groups: u32,
    /// Inode record size.
    pub inode_size: u32,
    /// Group descriptor size.
    pub desc_size: u32,
    /// Total inodes.
    pub inodes_count: u32,
    /// First non-reserved inode.
    pub first_ino: u32,
    /// `huge_file` feature.
    pub huge_file: bool,
    /// `filetype` feature: directory entries carry the file's type (without it the byte is
    /// 0 on disk and the type comes from the inode).
    pub filetype: bool,
    /// `inline_data` feature: an inode flagged `EXT4_INLINE_DATA_FL` keeps its data in itself
    /// (`crate::inline_data`); without the feature such a flag is corruption.
    pub inline_data: bool,
    /// `ea_inode` feature: an extended attribute's value may live in an inode of its own
    /// (`crate::xattr`).
    pub ea_inode: bool,
    /// `casefold` feature: `Some(strict)` (strict: names must fold, `EXT4_ENC_STRICT_MODE_FL`);
    /// directories flagged `EXT4_CASEFOLD_FL` match names casefolded (`crate::casefold`).
    pub casefold: Option<bool>,
    /// `project` feature: inodes carry a project id (`i_projid`), inherited from a
    /// directory flagged `EXT4_PROJINHERIT_FL`.
    pub project: bool,
    /// Where each block of the primary group descriptor table is
    /// ([`Superblock::desc_block_location`]: in a row after the superblock, or spread over
    /// the meta groups with `meta_bg`).
    pub desc_blocks: Vec<u64>,
    /// `s_r_blocks_count`: free blocks only root, `s_def_resuid` and `s_def_resgid` may take.
    pub reserved_blocks: u64,
    /// Free blocks nobody takes for file data or directories, as ext4's `s_resv_clusters`
    /// (2 % of the blocks, at most 4096, with extents): room for extent-tree blocks when the
    /// file system is otherwise full.
    pub metadata_reserve: u64,
    /// `s_def_resuid`.
    pub res_uid: u32,
    /// `s_def_resgid`.
    pub res_gid: u32,
}

impl Geometry {
    fn from_sb(sb: &Superblock) -> Geometry {
        Geometry {
            block_size: sb.block_size() as usize,
            blocks_count: sb.block_count(),
            first_data_block: u64::from(sb.first_data_block),
            blocks_per_group: sb.blocks_per_group,
            inodes_per_group: sb.inodes_per_group,
            groups: sb.group_count(),
            inode_size: sb.inode_size() as u32,
            desc_size: sb.desc_size() as u32,
            inodes_count: sb.inodes_count,
            first_ino: sb.first_ino(),
            huge_file: sb.has_huge_file(),
            filetype: sb.has_filetype(),
            inline_data: sb.has_incompat(crate::ondisk::features::INCOMPAT_INLINE_DATA),
            ea_inode: sb.has_incompat(crate::ondisk::features::INCOMPAT_EA_INODE),
            project: sb.feature_ro_compat & crate::ondisk::features::RO_COMPAT_PROJECT != 0,
            casefold: sb
                .has_incompat(crate::ondisk::features::INCOMPAT_CASEFOLD)
                .then_some(sb.encoding_flags & crate::ondisk::features::ENCODING_STRICT != 0),
            desc_blocks: (0..sb.gdt_blocks()).map(|i| sb.desc_block_location(i)).collect(),
            reserved_blocks: sb.r_blocks_count,
            metadata_reserve: if sb.has_incompat(crate::ondisk::features::INCOMPAT_EXTENTS) {
                (sb.block_count() / 50).min(4096)
            } else {
                0
            },
            res_uid: u32::from(sb.def_resuid),
            res_gid: u32::from(sb.def_resgid),
        }
    }

    /// First block of group `g`.
    pub fn group_start(&self, g: u32) -> u64 {
        self.first_data_block + u64::from(g) * u64::from(self.blocks_per_group)
    }

    /// Blocks in group `g` (the last one may be short).
    pub fn group_len(&self, g: u32) -> u32 {
        let start = self.group_start(g);
        (self.blocks_count - start).min(u64::from(self.blocks_per_group)) as u32
    }

    /// Group of block `b`.
    pub fn group_of(&self, b: u64) -> u32 {
        ((b - self.first_data_block) / u64::from(self.blocks_per_group)) as u32
    }

    /// Group of inode `ino`.
    pub fn inode_group(&self, ino: u32) -> u32 {
        (ino - 1) / self.inodes_per_group
    }

    /// Descriptor location: (GDT block, byte offset).
    pub fn desc_location(&self, g: u32) -> (u64, usize) {
        let per = self.block_size as u32 / self.desc_size;
        (self.desc_blocks[(g / per) as usize], ((g % per) * self.desc_size) as usize)
    }
}

/// Blocks (or inodes) of one group freed by a transaction that is not yet durable: not
/// reused until it is, so a crash can never leave the old owner pointing at overwritten data
/// (with iJournaling, an inode number: an i-transaction of a new file that got it would meet
/// the old file's entry, still on disk, after a crash, and take the old name).
///
/// The allocator sees them as a bitmap laid over the group's ([`Busy::overlay`]), so the
/// search costs the same however many runs are busy; a workload that frees much and commits
/// rarely (iJournaling's fsyncs never commit) held thousands of runs, and walking them one by
/// one on every allocation, under the group's lock, serialised its creates.
#[derive(Debug, Default)]
pub(crate) struct Busy {
    /// One bit per block (inode) of the group, from its first: set while busy or excluded.
    bits: Vec<u8>,
    /// Bits that never expire (recovery's exclusions).
    never: Vec<u8>,
    /// The busy runs (freeing transaction's id, first bit, length) in freeing order, one
    /// queue per log: a log's ids only grow, so pruning pops a queue's front while it is
    /// durable and stops at the first that is not (O(1) when nothing became durable).
    order: Vec<VecDeque<(u64, u32, u32)>>,
}

/// Bit `b` of `v`, clear past its end.
fn has(v: &[u8], b: usize) -> bool {
    v.get(b / 8).is_some_and(|x| x & (1 << (b % 8)) != 0)
}

impl Busy {
    fn set(v: &mut Vec<u8>, first: u32, len: u32) {
        let end = (first + len) as usize;
        if v.len() * 8 < end {
            v.resize(end.div_ceil(8), 0);
        }
        crate::ondisk::bitmap::set_range(v, first as usize, len as usize);
    }

    /// Bits `first..first+len` freed by `tx`.
    pub fn insert(&mut self, tx: TxId, first: u32, len: u32) {
        Self::set(&mut self.bits, first, len);
        let l = usize::from(tx.log);
        if self.order.len() <= l {
            self.order.resize_with(l + 1, VecDeque::new);
        }
        self.order[l].push_back((tx.tid, first, len));
    }

    /// Bits `first..first+len` kept from the allocator for as long as this mount lives.
    pub fn exclude(&mut self, first: u32, len: u32) {
        Self::set(&mut self.bits, first, len);
        Self::set(&mut self.never, first, len);
    }

    /// Whether no run waits for its transaction (exclusions aside).
    pub fn is_empty(&self) -> bool {
        self.order.iter().all(VecDeque::is_empty)
    }

    /// Forget the runs whose freeing transaction is durable.
    pub fn prune(&mut self, durable: impl Fn(TxId) -> bool) {
        for (l, q) in self.order.iter_mut().enumerate() {
            while let Some(&(tid, first, len)) = q.front() {
                if !durable(TxId::new(l as u16, tid)) {
                    break;
                }
                q.pop_front();
                for b in first as usize..(first + len) as usize {
                    if !has(&self.never, b) {
                        crate::ondisk::bitmap::clear(&mut self.bits, b);
                    }
                }
            }
        }
        if self.never.is_empty() && !self.bits.is_empty() && self.is_empty() {
            // Nothing busy: the allocator reads the group's bitmap as it is.
            self.bits = Vec::new();
        }
    }

    /// The group's bitmap `bm` with the busy and excluded bits set: the allocator may take
    /// what is clear in it.
    pub fn overlay<'a>(&self, bm: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        if self.bits.is_empty() {
            return std::borrow::Cow::Borrowed(bm);
        }
        let mut v = bm.to_vec();
        for (d, s) in v.iter_mut().zip(&self.bits) {
            *d |= *s;
        }
        std::borrow::Cow::Owned(v)
    }
}

/// Per-group allocator state. Protected by its group's Mutex.
#[derive(Debug)]
pub(crate) struct GroupState {
    /// In-memory copy of the group descriptor (written through to the GDT buffer).
    pub desc: GroupDesc,
    /// Recently freed blocks that must not be reused yet.
    pub busy: Busy,
    /// With iJournaling: inodes freed by a transaction that is not yet durable.
    pub busy_inodes: Busy,
}

/// Shared state of a mounted file system.
pub(crate) struct FsInner {
    pub dev: Device,
    pub cache: Arc<BufferCache>,
    pub journal: Journal,
    pub geo: Geometry,
    /// How metadata checksums are computed (fixed after mount).
    pub csum: Csum,
    /// In-memory superblock. Lock: itself.
    pub sb: RankedMutex<Superblock>,
    /// Allocator state per group. Lock: each its own.
    pub groups: Vec<RankedMutex<GroupState>>,
    /// Free block count (summary; group descriptors are authoritative). Atomic.
    pub free_blocks: AtomicI64,
    /// Free inode count (summary). Atomic.
    pub free_inodes: AtomicI64,
    /// Open/cached inodes.
    pub inodes: InodeCache,
    pub opts: MountOptions,
    /// Serialises cross-directory renames (ancestry checks need a stable tree).
    pub rename_lock: RankedMutex<()>,
    /// Serialises orphan list edits.
    pub orphan_lock: RankedMutex<()>,
    /// Group to start the next directory allocation at. Atomic.
    pub dir_rotor: AtomicU32,
    /// Core-aware allocation: allocations served from the caller's own group range, and all
    /// allocations made with a range (statistics; relaxed; both 0 without core-aware
    /// allocation).
    pub alloc_own: std::sync::atomic::AtomicU64,
    /// See `alloc_own`.
    pub alloc_all: std::sync::atomic::AtomicU64,
    /// First inode table block of each group (fixed after mount).
    pub itable: Vec<u64>,
    /// The orphan list, head first (authoritative while mounted). Lock: itself, taken
    /// under `orphan_lock` for changes.
    pub orphans: RankedMutex<Vec<crate::types::Ino>>,
    /// The orphan file (`orphan_file` images only).
    pub ofile: Option<crate::orphan::OrphanFile>,
    /// iJournaling, when the mount uses it (unset: fsync commits). Set once at mount, after
    /// the image is validated (starting it writes the areas' headers).
    pub ij: std::sync::OnceLock<crate::ijournal::IJournal>,
    /// Blocks of the file system's own metadata (`statfs` leaves them out of the total, as
    /// ext4's `s_overhead`), worked out on the first `statfs`. Set once.
    pub overhead: std::sync::OnceLock<u64>,
    /// The adaptive data mode's switches (atomics).
    pub adaptive: crate::adaptive::Counters,
    /// The adaptive data mode's memory of names whose file died young (its own leaf lock).
    pub young: crate::adaptive::YoungNames,
    /// Multi-mount protection held while open for writing (`mmp` images). Lock: itself, a
    /// leaf, taken at mount and unmount only.
    pub mmp: RankedMutex<Option<crate::mmp::Mmp>>,
    /// Xattr block locks, striped by block number (`crate::xattr`): one is held while an
    /// inode changes or drops the xattr block it has, so that inodes sharing a block do not
    /// lose each other's `h_refcount` (and, with `ea_inode`, EA inode reference) updates
    /// (the kernel locks the block's buffer). Ranked as an inode lock: taken after the
    /// owner's, before any EA inode's, one at a time.
    pub xattr_block_locks: Vec<RankedMutex<()>>,
    /// Quota usage (`quota` images opened for writing; see `crate::quota`). Set once at
    /// mount, before any inode is loaded (each records its charge when loaded).
    pub quota: std::sync::OnceLock<crate::quota::Quotas>,
}

impl FsInner {
    /// The shared state over `dev` once the journal is open: counts summed from `descs`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn assemble(
        dev: Device,
        cache: Arc<BufferCache>,
        journal: Journal,
        sb: Superblock,
        descs: Vec<GroupDesc>,
        opts: MountOptions,
        ofile: Option<crate::orphan::OrphanFile>,
        ij: Option<crate::ijournal::IJournal>,
    ) -> FsInner {
        let free_blocks: i64 = descs.iter().map(|d| i64::from(d.free_blocks_count)).sum();
        let free_inodes: i64 = descs.iter().map(|d| i64::from(d.free_inodes_count)).sum();
        let itable = descs.iter().map(|d| d.inode_table).collect();
        FsInner {
            csum: Csum::from_sb(&sb),
            geo: Geometry::from_sb(&sb),
            itable,
            orphans: RankedMutex::new(Rank::Leaf, Vec::new()),
            ofile,
            dev,
            cache,
            journal,
            groups: descs
                .into_iter()
                .map(|desc| {
                    RankedMutex::new(
                        Rank::FsGroup,
                        GroupState { desc, busy: Busy::default(), busy_inodes: Busy::default() },
                    )
                })
                .collect(),
            sb: RankedMutex::new(Rank::FsSuperblock, sb),
            free_blocks: AtomicI64::new(free_blocks),
            free_inodes: AtomicI64::new(free_inodes),
            inodes: InodeCache::new(),
            opts,
            rename_lock: RankedMutex::new(Rank::FsRename, ()),
            orphan_lock: RankedMutex::new(Rank::FsOrphan, ()),
            dir_rotor: AtomicU32::new(0),
            alloc_own: Default::default(),
            alloc_all: Default::default(),
            adaptive: Default::default(),
            young: Default::default(),
            mmp: RankedMutex::new(Rank::Leaf, None),
            xattr_block_locks: (0..XATTR_BLOCK_LOCKS).map(|_| RankedMutex::new(Rank::FsInode, ())).collect(),
            ij: match ij {
                Some(i) => std::sync::OnceLock::from(i),
                None => std::sync::OnceLock::new(),
            },
            overhead: std::sync::OnceLock::new(),
            quota: std::sync::OnceLock::new(),
        }
    }
}

/// A mounted file system. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Fs {
    pub(crate) inner: Arc<FsInner>,
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fs").field("blocks", &self.inner.geo.blocks_count).finish()
    }
}

/// What [`Fs::open`] found and did.
#[derive(Debug, Clone, Default)]
pub struct MountReport {
    /// Journal transactions replayed by recovery.
    pub replayed_transactions: u32,
    /// Blocks replayed.
    pub replayed_blocks: u64,
    /// Orphan inodes cleaned up.
    pub orphans_cleaned: u32,
    /// What the replay of i-transactions did (when the journal said there might be some).
    pub ijournal: Option<crate::ijournal_replay::IjReplayReport>,
}

/// Read the journal inode's extents into a journal area (reads only; public so tools can
/// inspect the journal of an image that cannot be mounted, e.g. one needing recovery).
pub fn journal_area(dev: &Device, sb: &Superblock) -> FsResult<JournalArea> {
    if !sb.has_journal() {
        return Err(FsError::Incompatible("file system has no journal (has_journal is off)".into()));
    }
    if sb.has_external_journal() {
        return Err(crate::ondisk::features::external_journal(sb));
    }
    if sb.journal_inum != JOURNAL_INO {
        return Err(FsError::Incompatible(format!(
            "journal in inode {} (only the internal journal inode 8 is supported)",
            sb.journal_inum
        )));
    }
    let raw = crate::inode::read_raw_inode(&**dev, sb, JOURNAL_INO)?;
    // As the kernel (`ext4_get_journal_inode`) and e2fsck ("invalid journal"): a journal
    // inode that is not a regular file in use is corrupt, and nothing it maps is replayed.
    if raw.mode & 0o170000 != 0o100000 || raw.links_count == 0 {
        return Err(FsError::Corrupt(format!(
            "journal inode 8: i_mode {:#o}, i_links_count {} (not a regular file in use)",
            raw.mode, raw.links_count
        )));
    }
    let cache = BufferCache::new(dev.clone(), 1024);
    let mut store = crate::tx::ReadStore { cache: &cache, limit: sb.block_count() };
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut expected = 0u64;
    let mut bad = None;
    let ic = Csum::from_sb(sb).for_inode(JOURNAL_INO, raw.generation);
    let mut run = |m: crate::extent_tree::Mapping| {
        if u64::from(m.lblk) != expected && bad.is_none() {
            bad = Some(m.lblk);
        }
        expected = u64::from(m.lblk) + u64::from(m.len);
        runs.push((m.pblk, u64::from(m.len)));
    };
    if raw.flags & EXT4_EXTENTS_FL != 0 {
        crate::extent_tree::for_each_extent(&raw.block, &mut store, ic, run)?;
    } else {
        // A journal made by ext3's mke2fs, kept when the file system gained extents.
        let owned = crate::block_map::owned(&raw.block, &mut store, sb.block_size() as usize)
            .map_err(|e| crate::check::prefix(JOURNAL_INO, e))?;
        owned.runs.into_iter().for_each(&mut run);
    }
    if let Some(l) = bad {
        return Err(FsError::Corrupt(format!("journal inode has a hole before block {l}")));
    }
    let size_blocks = raw.size / u64::from(sb.block_size());
    let area = JournalArea::new(runs);
    if area.len() < size_blocks || area.len() < 1024 {
        return Err(FsError::Corrupt(format!(
            "journal inode maps {} blocks, size says {size_blocks}",
            area.len()
        )));
    }
    Ok(area)
}

/// The journal's logs: the primary journal (the first `s_maxlen` blocks of inode 8), then
/// the extra log areas its superblock's table lists, and the primary superblock. Reads only.
pub fn journal_logs(dev: &Device, sb: &Superblock) -> FsResult<(JournalSuperblock, Vec<JournalArea>)> {
    let inode_area = journal_area(dev, sb)?;
    Ok(read_log_areas(&**dev, &inode_area)?)
}

/// Every area of the journal: the primary superblock, the logs (the primary first) and the
/// ijournal areas. Reads only.
pub fn journal_areas(
    dev: &Device,
    sb: &Superblock,
) -> FsResult<(JournalSuperblock, Vec<JournalArea>, Vec<JournalArea>)> {
    let inode_area = journal_area(dev, sb)?;
    Ok(read_journal_areas(&**dev, &inode_area)?)
}

/// Whether a log of the journal needs replay: the primary is not empty, the private
/// `cjfs_logs` bit says extra logs may hold transactions, or an extra log is not empty.
pub fn logs_need_recovery(dev: &Device, jsb: &JournalSuperblock, areas: &[JournalArea]) -> FsResult<bool> {
    let private = INCOMPAT_CJFS_LOGS | INCOMPAT_CJFS_IJOURNAL;
    if jsb.needs_recovery() || jsb.s_feature_incompat & private != 0 {
        return Ok(true);
    }
    for a in areas.iter().skip(1) {
        if read_superblock(&**dev, a)?.needs_recovery() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Replay every log: one log as JBD2 ([`recover_strict`]); several as one journal, by order
/// graph (`cjfs_journal::order_graph`: only transactions whose chained ones all committed
/// are replayed, in commit-stamp order, revokes applied across logs). A damaged log is
/// refused before anything is written. Then clears the private `cjfs_logs` bit.
fn recover_logs(dev: &Device, areas: &[JournalArea], order: Option<&[usize]>) -> FsResult<RecoveryReport> {
    let Some(primary) = areas.first() else {
        return Err(FsError::Corrupt("the journal has no log".into()));
    };
    let report = if areas.len() > 1 {
        cjfs_journal::order_graph::recover_logs(&**dev, areas, true, order)?
    } else {
        recover_strict(&**dev, primary)?
    };
    let mut jsb = read_superblock(&**dev, primary)?;
    if jsb.s_feature_incompat & INCOMPAT_CJFS_LOGS != 0 {
        jsb.s_feature_incompat &= !INCOMPAT_CJFS_LOGS;
        write_superblock(&**dev, primary, &jsb, false)?;
        dev.flush()?;
    }
    Ok(report)
}

/// Replay every log, then (when the private `cjfs_ijournal` bit says ijournal areas may hold
/// i-transactions) the i-transactions newer than the last transaction the normal replay
/// found committed (see `crate::ijournal_replay`).
fn recover_all(
    dev: &Device,
    areas: &[JournalArea],
    iareas: &[JournalArea],
    order: Option<&[usize]>,
) -> FsResult<(RecoveryReport, Option<crate::ijournal_replay::IjReplayReport>)> {
    let Some(primary) = areas.first() else {
        return Err(FsError::Corrupt("the journal has no log".into()));
    };
    let before = read_superblock(&**dev, primary)?;
    let ijournal = before.s_feature_incompat & INCOMPAT_CJFS_IJOURNAL != 0;
    // The kernel's fast commits are replayed only over a log that needs recovery, as the
    // kernel and e2fsck do (a clean log means they are older than its last full commit).
    // The normal replay below marks the log clean, so the ext4 superblock says a
    // fast-commit replay is due (`EXT4_FC_REPLAY` in `s_state`, as e2fsck marks it) from
    // before it until after the fast commits are home: a recovery cut in between replays them
    // when run again.
    let (mut sb, _) = read_layout(&**dev)?;
    let fast_commit = (before.s_feature_incompat & INCOMPAT_FAST_COMMIT != 0 && before.needs_recovery())
        || sb.state & STATE_FC_REPLAY != 0;
    if fast_commit && areas.len() > 1 {
        return Err(FsError::Incompatible(
            "the journal carries both extra logs and ext4 fast commits, which nothing writes together".into(),
        ));
    }
    if fast_commit && sb.state & STATE_FC_REPLAY == 0 {
        sb.state |= STATE_FC_REPLAY;
        write_sb_direct(dev, &sb)?;
    }
    // The last transaction the log holds committed (every record at or below it is older
    // than what the normal replay puts home), taken before that replay.
    let max = if ijournal { Some(crate::ijournal_replay::prepare(dev, primary, iareas)?) } else { None };
    let report = recover_logs(dev, areas, order)?;
    if fast_commit {
        // The kernel's fast commits, on top of the normal replay (as the kernel and e2fsck
        // replay them at the end of their journal recovery).
        let fc = crate::fast_commit::replay(dev, primary)?;
        if fc.commits > 0 {
            log::info!(
                "replayed {} ext4 fast commit(s): {} record(s), {} block(s)",
                fc.commits,
                fc.records,
                fc.blocks
            );
        }
        let (mut sb, _) = read_layout(&**dev)?;
        sb.state &= !STATE_FC_REPLAY;
        write_sb_direct(dev, &sb)?;
    }
    let Some(max) = max else {
        return Ok((report, None));
    };
    let r = crate::ijournal_replay::replay(dev, primary, iareas, max)?;
    Ok((report, Some(r)))
}

/// Replay the journal of the image on `dev` if it needs it (every log; see
/// [`journal_logs`]). Returns the recovery report.
///
/// A damaged journal (see [`recover_strict`]) is refused with nothing written: replaying
/// what is intact leaves a file system only a full check can repair, and `e2fsck -fy` both
/// replays and repairs.
pub fn recover_device(dev: &Device) -> FsResult<RecoveryReport> {
    recover_device_scanning(dev, None)
}

/// [`recover_device`], scanning a journal's several logs in `order` (a permutation of the
/// log numbers; `None`: table order). The result must not depend on it: the crash harness
/// checks that with the order reversed.
pub fn recover_device_scanning(dev: &Device, order: Option<&[usize]>) -> FsResult<RecoveryReport> {
    recover_device_with(dev, order).map(|(r, _)| r)
}

/// [`recover_device_scanning`], also returning what the replay of i-transactions did (when
/// the private `cjfs_ijournal` bit said the ijournal areas might hold some).
pub fn recover_device_with(
    dev: &Device,
    order: Option<&[usize]>,
) -> FsResult<(RecoveryReport, Option<crate::ijournal_replay::IjReplayReport>)> {
    recover_device_held(dev, order, None)
}

/// [`recover_device_with`] for a caller that holds the file system's MMP block (`mmp`
/// images; `crate::mmp`) around this and the mount after it; without `held` a replay on
/// such a file system takes the block for its duration.
pub fn recover_device_held(
    dev: &Device,
    order: Option<&[usize]>,
    held: Option<&crate::mmp::MmpHandle>,
) -> FsResult<(RecoveryReport, Option<crate::ijournal_replay::IjReplayReport>)> {
    let (before, _) = read_layout(&**dev)?;
    if !before.has_journal() {
        return Ok((RecoveryReport::nothing(0), None));
    }
    let (jsb, areas, iareas) = journal_areas(dev, &before)?;
    if needs_replay(dev, &before, &jsb, &areas)? && before.has_incompat(crate::ondisk::features::INCOMPAT_MMP)
    {
        // A replay writes the file system: hold it as a mount would (e2fsck does too).
        return crate::mmp::while_held(dev, &before, held, || {
            recover_held(dev, &before, &areas, &iareas, order)
        });
    }
    recover_held(dev, &before, &areas, &iareas, order)
}

/// Whether a mount or recovery of the file system `sb` describes has anything to replay:
/// a log, the `needs_recovery` flag, or ext4 fast commits.
fn needs_replay(
    dev: &Device,
    sb: &Superblock,
    jsb: &JournalSuperblock,
    areas: &[JournalArea],
) -> FsResult<bool> {
    Ok(logs_need_recovery(dev, jsb, areas)?
        || sb.has_incompat(INCOMPAT_RECOVER)
        || sb.state & STATE_FC_REPLAY != 0)
}

/// [`recover_device_with`] once nobody else may write the file system.
fn recover_held(
    dev: &Device,
    before: &Superblock,
    areas: &[JournalArea],
    iareas: &[JournalArea],
    order: Option<&[usize]>,
) -> FsResult<(RecoveryReport, Option<crate::ijournal_replay::IjReplayReport>)> {
    let (report, ij) = recover_all(dev, areas, iareas, order)?;
    // Read the superblock again: replay may have rewritten it (it is journalled like any
    // metadata: orphan list head, counts). Writing back the copy read before the replay
    // undid those changes (found by the crash harness: recovering twice gave a different
    // block 0 than recovering once).
    let (mut sb, _) = read_layout(&**dev)?;
    let mut changed = keep_error_record(before, &mut sb)?;
    if sb.has_incompat(INCOMPAT_RECOVER) {
        sb.feature_incompat &= !INCOMPAT_RECOVER;
        changed = true;
    }
    if changed {
        write_sb_direct(dev, &sb)?;
    }
    Ok((report, ij))
}

/// After a replay, put back what the log must not undo, as the kernel's `ext4_load_journal`
/// does: the error state (`EXT4_ERROR_FS` in `s_state`) and the error record (`s_error_count`
/// to `s_mount_opts`, and the times' high bytes) of `before`, the superblock as it was before
/// the replay. A logged superblock predates them: e2fsck, finding a journal it cannot replay,
/// marks errors that replaying our own copy would otherwise erase. Returns whether `sb`
/// changed.
fn keep_error_record(before: &Superblock, sb: &mut Superblock) -> FsResult<bool> {
    use crate::ondisk::superblock::{
        S_ERROR_COUNT, S_FIRST_ERROR_TIME_HI, S_LAST_ERROR_TIME_HI, S_MOUNT_OPTS,
    };
    let (mut old, mut new) = ([0u8; SUPERBLOCK_SIZE], [0u8; SUPERBLOCK_SIZE]);
    before.encode_into(&mut old);
    sb.encode_into(&mut new);
    let mut patched = new;
    patched[S_ERROR_COUNT..S_MOUNT_OPTS].copy_from_slice(&old[S_ERROR_COUNT..S_MOUNT_OPTS]);
    for at in [S_FIRST_ERROR_TIME_HI, S_LAST_ERROR_TIME_HI] {
        patched[at] = old[at];
    }
    let state = sb.state | (before.state & STATE_ERROR);
    if patched == new && state == sb.state {
        return Ok(false);
    }
    *sb = Superblock::decode_unverified(&patched)?;
    sb.state = state;
    Ok(true)
}

/// Write the superblock straight to its block (outside any transaction) and flush.
pub(crate) fn write_sb_direct(dev: &Device, sb: &Superblock) -> FsResult<()> {
    let (blk, off) = sb_location(dev.block_size());
    let mut b0 = dev.read_block(blk)?;
    sb.encode_into(&mut b0[off..off + SUPERBLOCK_SIZE]);
    dev.write_block(blk, Arc::from(b0), WriteTag::kind(BlockKind::Superblock))?;
    dev.flush()?;
    Ok(())
}

/// Refuse to write a file system without a journal (`has_journal` off) when the mount asks
/// for what only a journal gives, or when it was not cleanly unmounted. Such a file system is
/// written as ext4 writes one: metadata in place at each commit, no crash consistency.
fn refuse_without_journal(sb: &Superblock, opts: &MountOptions) -> FsResult<()> {
    if opts.journal.kind != JournalKind::None && !opts.journal.per_device {
        return Err(FsError::Incompatible(format!(
            "file system has no journal (has_journal is off) and journal preset {} needs one: \
             open it with the `nojournal` preset (or `auto`), or add a journal with `tune2fs -j`",
            opts.journal.name
        )));
    }
    if opts.data == crate::types::DataMode::Journal {
        return Err(FsError::Incompatible(
            "file system has no journal (has_journal is off): data=journal needs one".into(),
        ));
    }
    if sb.state & STATE_VALID == 0 {
        return Err(FsError::Corrupt(
            "file system has no journal and was not cleanly unmounted (s_state); check it with \
             e2fsck -f before writing to it"
                .into(),
        ));
    }
    Ok(())
}

impl Fs {
    /// Mount the ext4 image on `dev`: check its features, replay the journal if needed,
    /// clean up orphans and start the journal.
    pub fn open(dev: Device, opts: MountOptions) -> FsResult<Fs> {
        Self::open_with_report(dev, opts).map(|(f, _)| f)
    }

    /// [`Fs::open`], also returning what recovery did.
    pub fn open_with_report(dev: Device, opts: MountOptions) -> FsResult<(Fs, MountReport)> {
        let access = if opts.read_only { Access::ReadOnly } else { Access::ReadWrite };
        let (sb0, _) = read_layout_for(&*dev, access)?;
        if !opts.read_only && sb0.state & STATE_ERROR != 0 {
            // Writing on top of damage an earlier mount or recovery found would spread it
            // (e.g. allocate an inode a lost bitmap update says is free); e2fsck clears it.
            return Err(FsError::Corrupt(
                "the superblock marks the file system as having errors (s_state); repair it with \
                 e2fsck -f before writing to it"
                    .into(),
            ));
        }
        let has_log = sb0.has_journal();
        if !has_log && !opts.read_only {
            refuse_without_journal(&sb0, &opts)?;
        }
        // Before anything is written (recovery included), as the kernel's mount; put back
        // as found if the open fails later, cleared at unmount.
        let mmp = match &opts.mmp_held {
            _ if opts.read_only => None,
            Some(h) => {
                h.check(&sb0)?;
                None
            }
            None => crate::mmp::Mmp::take(&dev, &sb0, "cjfs")?,
        };
        let mmp_handle = mmp.as_ref().map(crate::mmp::Mmp::handle).or_else(|| opts.mmp_held.clone());
        let (areas, iareas, needs_recovery) = if has_log {
            let (jsb, areas, iareas) = journal_areas(&dev, &sb0)?;
            let needed = needs_replay(&dev, &sb0, &jsb, &areas)?;
            (areas, iareas, needed)
        } else {
            (Vec::new(), Vec::new(), false)
        };
        let mut report = MountReport::default();
        if needs_recovery {
            let foreign = crate::ondisk::features::read_only_features(&sb0);
            if opts.read_only && !foreign.is_empty() {
                return Err(FsError::Invalid(format!(
                    "the journal needs recovery, which cjfs does not write on a file system with \
                     ext4 feature(s) {} (replay it with e2fsck -fy or a kernel mount)",
                    foreign.join(", ")
                )));
            }
            if opts.read_only {
                return Err(FsError::Invalid(
                    "the journal needs recovery, which a read-only mount cannot do (run `cjfs recover`)"
                        .into(),
                ));
            }
            // A damaged journal is refused before anything is written (see `recover_strict`).
            let (r, ij) = recover_all(&dev, &areas, &iareas, None)?;
            report.replayed_transactions = r.transactions;
            report.replayed_blocks = r.blocks_replayed;
            report.ijournal = ij;
        }
        // Recovery may have rewritten the superblock and descriptors.
        let (mut sb, descs) = read_layout_for(&*dev, access)?;
        let cache = Arc::new(BufferCache::new(dev.clone(), opts.cache_blocks.max(1024)));
        let free_blocks: i64 = descs.iter().map(|d| i64::from(d.free_blocks_count)).sum();
        let free_inodes: i64 = descs.iter().map(|d| i64::from(d.free_inodes_count)).sum();
        // Refuse a broken image before writing anything to it.
        let root = crate::inode::read_raw_inode(&*dev, &sb, ROOT_INO)?;
        if !root.is_dir() || root.links_count == 0 {
            return Err(FsError::Corrupt(format!(
                "root inode is not a live directory (mode {:o})",
                root.mode
            )));
        }
        let ofile = crate::orphan::OrphanFile::load(&dev, &sb, &cache)?;
        if !opts.read_only && !has_log {
            // As the kernel without a journal: not clean while mounted, so a crash leaves an
            // image e2fsck checks (and this library refuses to write) until it is repaired.
            sb.state &= !STATE_VALID;
        }
        if !opts.read_only && has_log {
            sb.feature_incompat |= INCOMPAT_RECOVER;
            if ofile.is_some() {
                // As the kernel: entries may be live from now until a clean unmount.
                sb.feature_ro_compat |= RO_COMPAT_ORPHAN_PRESENT;
            }
            sb.mnt_count = sb.mnt_count.wrapping_add(1);
            sb.mtime = crate::types::Timestamp::now().sec;
            sb.free_blocks_count = free_blocks as u64;
            sb.free_inodes_count = free_inodes as u32;
        }
        let mut jcfg = opts.journal.clone();
        if !has_log {
            // Not `auto`'s choice for the device, whose name would claim a journal.
            jcfg = cjfs_journal::JournalConfig::nojournal();
        } else if opts.read_only {
            jcfg.kind = JournalKind::None;
        }
        let journal = Journal::open_logs(dev.clone(), areas, cache.clone(), jcfg)?;
        let ij_setting = journal.config().ijournal;
        if ij_setting.on() && journal.log_count() > 1 {
            return Err(FsError::Invalid(format!(
                "journal {}: iJournaling and several logs cannot be combined (i-transactions are \
                 ordered by one log's transaction ids)",
                journal.config().name
            )));
        }
        let uuid = sb.uuid;
        let inner = Arc::new(FsInner::assemble(dev, cache, journal, sb, descs, opts, ofile, None));
        let fs = Fs { inner };
        if let Some(h) = mmp_handle.filter(|_| !fs.inner.opts.read_only) {
            let w = Arc::downgrade(&fs.inner);
            h.on_lost(Arc::new(move |why| {
                if let Some(i) = w.upgrade() {
                    i.journal.abort(why);
                }
            }));
        }
        *fs.inner.mmp.lock() = mmp;
        if !fs.inner.opts.read_only
            && let Some(q) = crate::quota::Quotas::load(&fs.inner)?
        {
            let _ = fs.inner.quota.set(q);
        }
        // The root must be a directory we can read.
        let root = fs.inner.inodes.get(&fs.inner, ROOT_INO)?;
        if !root.state.read().d.is_dir() {
            return Err(FsError::Corrupt("root inode is not a directory".into()));
        }
        if !fs.inner.opts.read_only {
            // Everything read so far is validated (root, orphan chain) before the first write:
            // a refused image stays byte-identical.
            let chain = crate::orphan::load_orphan_chain(&fs.inner)?;
            let file = crate::orphan::load_orphan_file(&fs.inner, &chain)?;
            if ij_setting.on() && fs.inner.journal.config().kind == JournalKind::Jbd2 {
                let wanted = ij_setting.areas.wanted();
                let mut have = iareas;
                if have.len() < wanted {
                    log::warn!(
                        "journal {}: {wanted} ijournal areas wanted, the image has {} (make them with \
                         `cjfs mkfs --ijournal-area N`){}",
                        fs.inner.journal.config().name,
                        have.len(),
                        if have.is_empty() { ": fsync commits" } else { "" }
                    );
                }
                have.truncate(wanted);
                if !have.is_empty() {
                    let ij = crate::ijournal::IJournal::start(
                        &fs.inner.dev,
                        have,
                        &uuid,
                        ij_setting.form,
                        ij_setting.data,
                    )?;
                    let _ = fs.inner.ij.set(ij);
                }
            }
            let sb = fs.inner.sb.lock().clone();
            write_sb_direct(&fs.inner.dev, &sb)?;
            report.orphans_cleaned = crate::orphan::process_orphans(&fs.inner, chain, file)?;
        }
        if let Some(m) = fs.inner.mmp.lock().as_mut() {
            m.establish();
        }
        Ok((fs, report))
    }

    /// Commit everything, checkpoint, write the superblock's summary counts and mark the
    /// image clean.
    pub fn unmount(self) -> FsResult<()> {
        let inner = self.inner;
        if inner.opts.read_only {
            inner.journal.shutdown()?;
            return Ok(());
        }
        // Drop in-memory inodes whose last user is gone (open-unlinked files released).
        crate::orphan::release_all(&inner)?;
        inner.journal.shutdown()?;
        let mut sb = inner.sb.lock().clone();
        // The on-disk superblock buffer may carry journalled orphan-list changes: start from it.
        let (sb_blk, sb_off) = sb_location(inner.geo.block_size);
        let b0 = inner.cache.read(sb_blk)?;
        let cur = Superblock::decode(&b0.read()[sb_off..sb_off + SUPERBLOCK_SIZE])?;
        sb.last_orphan = cur.last_orphan;
        sb.feature_incompat &= !INCOMPAT_RECOVER;
        if inner.ofile.as_ref().is_some_and(|of| of.is_empty()) {
            sb.feature_ro_compat &= !RO_COMPAT_ORPHAN_PRESENT;
        }
        sb.free_blocks_count = inner.free_blocks.load(Ordering::Relaxed).max(0) as u64;
        sb.free_inodes_count = inner.free_inodes.load(Ordering::Relaxed).max(0) as u32;
        sb.state |= STATE_VALID;
        sb.wtime = crate::types::Timestamp::now().sec;
        {
            let mut g = b0.write();
            sb.encode_into(&mut g[sb_off..sb_off + SUPERBLOCK_SIZE]);
        }
        inner.dev.write_block(sb_blk, b0.snapshot(), WriteTag::kind(BlockKind::Superblock))?;
        inner.dev.flush()?;
        let mmp = inner.mmp.lock().take();
        if let Some(m) = mmp {
            m.release()?;
        }
        Ok(())
    }

    /// The device under the file system.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// The journal (statistics, forcing commits).
    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// What the adaptive data mode (the `adaptive` preset) switched so far.
    pub fn adaptive_stats(&self) -> crate::AdaptiveStats {
        self.inner.adaptive.snapshot()
    }

    /// The usage the quota file of `kind` records for `id`: `(bytes, inodes)`; `None` when
    /// the id has no entry, or the file system keeps no such quota (or is open read-only).
    pub fn quota_usage(&self, kind: crate::QuotaKind, id: u32) -> FsResult<Option<(u64, u64)>> {
        match self.inner.quota.get() {
            Some(q) => q.usage(&self.inner, kind as usize, id),
            None => Ok(None),
        }
    }

    /// Every entry of the quota file of `kind`, by id (usage and the limits kept); `None`
    /// when the file system keeps no such quota. Works on a read-only open too.
    pub fn quota_report(&self, kind: crate::QuotaKind) -> FsResult<Option<Vec<crate::QuotaEntry>>> {
        match self.inner.quota.get() {
            Some(q) => q.entries(&self.inner, kind as usize),
            None => match crate::quota::Quotas::load(&self.inner)? {
                Some(q) => q.entries(&self.inner, kind as usize),
                None => Ok(None),
            },
        }
    }

    /// Core-aware allocation: `(own, all)` — block and inode allocations served from the
    /// caller's own range of groups, and all allocations counted, since mount.
    pub fn alloc_counts(&self) -> (u64, u64) {
        let i = &self.inner;
        (i.alloc_own.load(Ordering::Relaxed), i.alloc_all.load(Ordering::Relaxed))
    }

    /// Geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.inner.geo
    }

    /// A copy of the in-memory superblock.
    pub fn superblock(&self) -> Superblock {
        self.inner.sb.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_runs_mask_the_bitmap_until_their_transaction_is_durable() {
        let mut b = Busy::default();
        let bm = vec![0b0000_0001u8, 0, 0, 0];
        assert!(matches!(b.overlay(&bm), std::borrow::Cow::Borrowed(_)), "nothing busy: no copy");
        b.insert(TxId::new(0, 5), 3, 4);
        b.insert(TxId::new(1, 9), 20, 1);
        b.insert(TxId::new(0, 6), 10, 2);
        b.exclude(30, 2);
        assert_eq!(&b.overlay(&bm)[..], &[0b0111_1001, 0b0000_1100, 0b0001_0000, 0b1100_0000]);
        // Log 0 durable up to 5: its first run goes, its second and log 1's stay.
        b.prune(|tx| tx.log == 0 && tx.tid <= 5);
        assert_eq!(&b.overlay(&bm)[..], &[0b0000_0001, 0b0000_1100, 0b0001_0000, 0b1100_0000]);
        assert!(!b.is_empty());
        // A queue stops at its first transaction not durable, even if a later one is.
        let mut c = Busy::default();
        c.insert(TxId::new(0, 8), 0, 1);
        c.insert(TxId::new(0, 7), 1, 1);
        c.prune(|tx| tx.tid == 7);
        assert_eq!(&c.overlay(&[0u8])[..], &[0b11]);
        b.prune(|_| true);
        assert!(b.is_empty());
        assert_eq!(&b.overlay(&bm)[..], &[0b0000_0001, 0, 0, 0b1100_0000], "exclusions stay");
        c.prune(|_| true);
        assert!(matches!(c.overlay(&bm), std::borrow::Cow::Borrowed(_)));
    }
}
