//! In-memory inodes: the inode cache, per-inode locks, loading and storing inode records.

use std::collections::HashMap;
use std::sync::Arc;

use cjfs_blockdev::BlockDevice;
use cjfs_journal::lock_rank::{Rank, RankedMutex, RankedRwLock};
use cjfs_journal::{Buffer, TxId};

use crate::dir::{DirIndex, DirSlot};
use crate::error::{FsError, FsResult};
use crate::fs::FsInner;
use crate::ondisk::csum::{Csum, InodeCsum};
use crate::ondisk::group_desc::{BG_INODE_UNINIT, GroupDesc};
use crate::ondisk::inode::Inode as DiskInode;
use crate::ondisk::superblock::Superblock;
use crate::tx::Tx;
use crate::types::Ino;

/// Mutable state of one inode. Protected by [`Inode::state`] (the inode lock).
pub(crate) struct InodeState {
    /// The inode's number.
    pub ino: Ino,
    /// The checksum context of its extent tree and directory blocks (number and
    /// generation never change while the object lives).
    pub csum: InodeCsum,
    /// The inode record as it is (or will be, at commit) on disk.
    pub d: DiskInode,
    /// Directory index, built on first use (directories only). Its names live in `names`.
    pub dir: Option<DirIndex>,
    /// The directory's names, shared with [`Inode::names`]; `Some` exactly when `dir` is.
    pub names: Arc<Names>,
    /// Last transaction that changed this inode (fsync waits for it).
    pub meta_tx: TxId,
    /// Last transaction that changed what fdatasync needs (size, block mapping).
    pub datasync_tx: TxId,
    /// The file's last switch out of data journaling by revoke (`adaptive::leave_by_revoke`),
    /// or the last transaction since that journaled a rewrite of a block still having an
    /// image in the log (`adaptive::before_in_place`): every sync waits for it too (its
    /// revokes or newer images keep older logged copies from being replayed over what the
    /// file writes home), though it is not a change of the file the adaptive policy should
    /// count.
    pub leave_tx: TxId,
    /// Data buffers written since the last fsync (fdatasync without a commit writes these).
    pub dirty_data: Vec<Arc<Buffer>>,
    /// Length of `dirty_data` at which a write next prunes it (`file::prune_dirty`).
    pub dirty_prune_at: usize,
    /// Writes since the last sync, for the adaptive data mode (`adaptive.rs`).
    pub window: crate::adaptive::Window,
    /// Open file handles (the FUSE layer's opens and the library's explicit opens).
    pub open: u32,
    /// The inode has no links left and sits on the orphan list until its last close.
    pub orphan: bool,
    /// The inode was freed; the object is stale.
    pub freed: bool,
    /// iJournaling marks, shared with [`Inode::ij`].
    pub ij: Arc<RankedMutex<crate::ijournal::IjInode>>,
    /// iJournaling: external extent tree blocks changed, each with the last transaction that
    /// changed it (forgotten once that one is durable).
    pub ij_tree: std::collections::BTreeMap<u64, TxId>,
    /// What the stored record is charged to the quota files (`crate::quota`; `None` when
    /// nothing is, or the file system keeps no quota).
    pub charge: Option<crate::quota::Charge>,
}

/// One cached inode. `state` is the per-inode lock (taken before any journal handle).
pub(crate) struct Inode {
    pub ino: Ino,
    pub state: RankedRwLock<InodeState>,
    /// A directory's names for lookups that do not take `state` (see [`Names`]).
    pub names: Arc<Names>,
    /// iJournaling marks (see `crate::ijournal::IjInode`): a leaf lock, readable by an fsync
    /// of a file below this directory without this inode's lock.
    pub ij: Arc<RankedMutex<crate::ijournal::IjInode>>,
    /// One iJournaling fsync of this inode at a time (taken before `state`), and what the
    /// finished ones covered.
    pub fsync_lock: RankedMutex<crate::ijournal::FsyncGroup>,
    /// Tickets of iJournaling fsyncs of this inode: the last one handed out.
    pub fsync_tickets: std::sync::atomic::AtomicU64,
    /// The directory-entry type code of this inode's mode (0 for an unused inode), fixed
    /// for the object's life (a reallocated number gets a new object): readable without
    /// `state`, for entry types on images without the `filetype` feature.
    pub ftype: u8,
}

impl Inode {
    /// Put data buffers an fsync took back on the inode's list after the fsync failed, so
    /// the next one writes them again (the journal marked them dirty again if their write
    /// failed). The caller does not hold the inode's lock.
    pub(crate) fn keep_dirty<T>(&self, bufs: Vec<Arc<Buffer>>, r: FsResult<T>) -> FsResult<T> {
        if r.is_err() && !bufs.is_empty() {
            let mut st = self.state.write();
            // A freed inode's blocks are no longer its own to write.
            if !st.freed {
                st.dirty_data.extend(bufs);
            }
        }
        r
    }

    fn new(ino: Ino, st: InodeState) -> Self {
        let names = st.names.clone();
        let ij = st.ij.clone();
        let ftype = if st.d.mode == 0 { 0 } else { crate::ondisk::dirent::file_type_from_mode(st.d.mode) };
        Inode {
            ftype,
            ino,
            state: RankedRwLock::new(Rank::FsInode, st),
            names,
            ij,
            fsync_lock: RankedMutex::new(Rank::FsFsync, Default::default()),
            fsync_tickets: Default::default(),
        }
    }
}

/// A directory's name -> slot map (every live entry except `.` and `..`), `None` until the
/// directory index is built. Readable without the directory's inode lock, so a lookup
/// never waits behind a create or unlink that holds the directory across a journal start;
/// written only by holders of the inode's write lock. Lock order: inode lock, then this
/// (a leaf: nothing is taken or waited for while it is held).
#[derive(Debug)]
pub(crate) struct Names(pub RankedRwLock<Option<HashMap<Box<[u8]>, DirSlot>>>);

impl Default for Names {
    fn default() -> Self {
        Names(RankedRwLock::new(Rank::FsNames, None))
    }
}

const SHARDS: usize = 64;
/// Cached inodes per shard above which unused ones are dropped.
const SHARD_SOFT_CAP: usize = 4096;

/// Cache of in-memory inodes, sharded. Each shard's map is protected by its Mutex.
pub(crate) struct InodeCache {
    shards: Vec<RankedMutex<HashMap<Ino, Arc<Inode>>>>,
}

impl InodeCache {
    pub fn new() -> Self {
        InodeCache {
            shards: (0..SHARDS).map(|_| RankedMutex::new(Rank::FsInodeCache, HashMap::new())).collect(),
        }
    }

    fn shard(&self, ino: Ino) -> &RankedMutex<HashMap<Ino, Arc<Inode>>> {
        &self.shards[ino as usize % SHARDS]
    }

    /// The inode `ino`, loaded from disk if not cached. Does not check that it is in use.
    pub fn get(&self, fs: &FsInner, ino: Ino) -> FsResult<Arc<Inode>> {
        if ino == 0 || ino > fs.geo.inodes_count {
            return Err(FsError::Stale(ino));
        }
        if let Some(i) = self.shard(ino).lock().get(&ino) {
            return Ok(i.clone());
        }
        let d = load_inode(fs, ino)?;
        let node = Arc::new(Inode::new(ino, InodeState::new(fs, ino, d)));
        let mut shard = self.shard(ino).lock();
        if shard.len() > SHARD_SOFT_CAP {
            Self::trim(fs, &mut shard);
        }
        Ok(shard.entry(ino).or_insert(node).clone())
    }

    /// Install a freshly allocated inode.
    pub fn insert_new(&self, fs: &FsInner, ino: Ino, d: DiskInode, tx: TxId) -> Arc<Inode> {
        let mut st = InodeState::new(fs, ino, d);
        // Nothing is charged for it until its record is first stored.
        st.charge = None;
        st.meta_tx = tx;
        st.datasync_tx = tx;
        let node = Arc::new(Inode::new(ino, st));
        self.shard(ino).lock().insert(ino, node.clone());
        node
    }

    /// Forget a freed inode, if `node` is still the cached object for its number.
    ///
    /// The number can already belong to a new inode: eviction frees the inode (clearing its
    /// bitmap bit) before calling this, and a concurrent create may have allocated the same
    /// number and installed its object with [`InodeCache::insert_new`] in between. Removing
    /// that entry left two objects for one inode (the creator's, and one loaded from disk by
    /// the next lookup), whose diverging copies overwrote each other's records: e2fsck then
    /// found "unattached" inodes and deleted inodes with a zero dtime after 16 threads
    /// unlinked and re-created the same names through FUSE.
    pub fn remove(&self, node: &Arc<Inode>) {
        let mut shard = self.shard(node.ino).lock();
        if shard.get(&node.ino).is_some_and(|cur| Arc::ptr_eq(cur, node)) {
            shard.remove(&node.ino);
        }
    }
}

impl InodeCache {
    /// Drop inodes nobody references and nothing depends on.
    fn trim(fs: &FsInner, m: &mut HashMap<Ino, Arc<Inode>>) {
        // An inode with iJournaling marks stays: an fsync reads them (a reloaded copy would
        // have lost them, and write no record for a new directory).
        m.retain(|_, i| {
            Arc::strong_count(i) > 1
                || i.state.try_read().is_none_or(|st| {
                    st.open > 0
                        || st.orphan
                        || !st.dirty_data.is_empty()
                        || crate::ijournal::must_stay(fs, &st)
                })
        });
    }
}

impl InodeState {
    /// Install a freshly built directory index and its names.
    pub fn set_index(&mut self, idx: DirIndex, names: HashMap<Box<[u8]>, DirSlot>) {
        self.dir = Some(idx);
        *self.names.0.write() = Some(names);
    }

    /// Forget the directory index (the inode was freed or discarded).
    pub fn drop_index(&mut self) {
        self.dir = None;
        *self.names.0.write() = None;
    }

    /// Live entries other than `.` and `..` (0 without an index).
    pub fn dir_len(&self) -> usize {
        self.names.0.read().as_ref().map_or(0, |m| m.len())
    }

    fn new(fs: &FsInner, ino: Ino, d: DiskInode) -> Self {
        let mut st = InodeState {
            ino,
            csum: fs.csum.for_inode(ino, d.generation),
            d,
            dir: None,
            names: Arc::new(Names::default()),
            meta_tx: TxId::default(),
            datasync_tx: TxId::default(),
            leave_tx: TxId::default(),
            dirty_data: Vec::new(),
            dirty_prune_at: crate::file::DIRTY_PRUNE_MIN,
            window: crate::adaptive::Window::default(),
            open: 0,
            orphan: false,
            freed: false,
            ij: Arc::new(RankedMutex::new(Rank::Leaf, crate::ijournal::IjInode::default())),
            ij_tree: std::collections::BTreeMap::new(),
            charge: None,
        };
        // Loaded from disk: whatever is in use is charged, an orphan without links too (it
        // is marked an orphan only later, by the mount's orphan processing).
        if let Some(q) = fs.quota.get() {
            st.charge = crate::quota::current(fs, q, &st, st.d.mode != 0);
        }
        st
    }
}

/// Location of inode `ino`: (inode table block, byte offset in it).
pub(crate) fn inode_location(fs: &FsInner, ino: Ino) -> (u64, usize) {
    let g = fs.geo.inode_group(ino);
    let idx = u64::from((ino - 1) % fs.geo.inodes_per_group);
    let isz = u64::from(fs.geo.inode_size);
    let table = fs.itable[g as usize];
    let byte = idx * isz;
    let bs = fs.geo.block_size as u64;
    (table + byte / bs, (byte % bs) as usize)
}

/// Whether inode `ino`'s table slot was never initialised: its group is `INODE_UNINIT`,
/// or the slot lies in the `bg_itable_unused` tail (only with group descriptor checksums).
fn never_used(fs: &FsInner, ino: Ino) -> bool {
    if !fs.csum.group_desc() {
        return false;
    }
    let g = fs.geo.inode_group(ino);
    let idx = (ino - 1) % fs.geo.inodes_per_group;
    let gs = fs.groups[g as usize].lock();
    gs.desc.flags & BG_INODE_UNINIT != 0
        || idx >= fs.geo.inodes_per_group.saturating_sub(gs.desc.itable_unused)
}

/// Read inode `ino` from its table block through the cache, checking its checksum. A slot
/// that was never initialised reads as a zeroed (free) inode whatever it holds.
pub(crate) fn load_inode(fs: &FsInner, ino: Ino) -> FsResult<DiskInode> {
    if never_used(fs, ino) {
        return Ok(DiskInode::new(fs.geo.inode_size as usize, 0));
    }
    let (blk, off) = inode_location(fs, ino);
    let buf = fs.cache.read(blk)?;
    let g = buf.read();
    let raw = &g[off..off + fs.geo.inode_size as usize];
    crate::ondisk::inode::verify_checksum(&fs.csum, ino, raw)?;
    let d = DiskInode::decode(raw).map_err(|e| in_inode(ino, e))?;
    check_size(ino, &d, fs.geo.block_size as u32)?;
    check_type(ino, &d)?;
    Ok(d)
}

/// Refuse a mode whose file type is none of the seven (e2fsck: "has invalid mode"): treated
/// as a regular file it would be read, written and freed as one.
fn check_type(ino: Ino, d: &DiskInode) -> FsResult<()> {
    if d.mode != 0 && crate::types::FileType::from_mode(u32::from(d.mode)).is_none() {
        return Err(FsError::Corrupt(format!(
            "inode {ino}: i_mode = {:#o} has no valid file type ({:#o})",
            d.mode,
            d.mode & 0o170000
        )));
    }
    Ok(())
}

/// Put inode `ino`'s number into a decoding error, once ("inode 36: i_extra_isize ...").
fn in_inode(ino: Ino, e: FsError) -> FsError {
    match e {
        FsError::Corrupt(m) => {
            FsError::Corrupt(format!("inode {ino}: {}", m.strip_prefix("inode: ").unwrap_or(&m)))
        }
        other => other,
    }
}

/// Refuse a size no ext4 file can have (the kernel's `s_maxbytes`): reading such a file
/// would stream zeros for years, and writing at its end would overflow block numbers.
fn check_size(ino: Ino, d: &DiskInode, block_size: u32) -> FsResult<()> {
    let max = crate::ondisk::inode::max_file_size(block_size);
    if d.size > max {
        return Err(FsError::Corrupt(format!(
            "inode {ino}: i_size = {} is beyond the largest ext4 file size {max} for {block_size}-byte \
             blocks",
            d.size
        )));
    }
    Ok(())
}

/// Write inode `ino`'s record into its table block under the transaction.
pub(crate) fn store_inode(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    let (blk, off) = inode_location(tx.fs, ino);
    let buf = tx.fs.cache.read(blk)?;
    tx.h.get_write_access(&buf)?;
    if st.orphan {
        st.d.dtime = crate::orphan::next_of(tx.fs, ino);
    }
    // Stat must show what the record keeps (128-byte inodes: whole seconds up to 2038).
    st.d.fit_times();
    {
        let mut g = buf.write();
        let rec = &mut g[off..off + tx.fs.geo.inode_size as usize];
        st.d.encode_into(rec, &tx.fs.csum, ino);
        if tx.fs.ij.get().is_some() {
            let tree = std::mem::take(&mut tx.tree);
            crate::ijournal::note_stored(tx.fs, st, tx.h.tx_id(), tree, rec);
        }
    }
    st.meta_tx = tx.h.tx_id();
    if let Some(q) = tx.fs.quota.get() {
        let live = st.d.links_count > 0 || st.orphan;
        let now = crate::quota::current(tx.fs, q, st, live);
        if now != st.charge {
            q.transfer(tx, st.charge, now)?;
            st.charge = now;
            // The quota file's own tree blocks are none of this inode's.
            tx.tree.clear();
            crate::ijournal::note_unsafe(tx.fs, &st.ij, crate::ijournal::Fallback::Quota, tx.h.tx_id());
        }
    }
    Ok(())
}

/// Write a record that has no cached inode (a quota file's) into its table block under the
/// transaction.
pub(crate) fn store_record(tx: &mut Tx<'_>, ino: Ino, d: &mut DiskInode) -> FsResult<()> {
    let (blk, off) = inode_location(tx.fs, ino);
    let buf = tx.fs.cache.read(blk)?;
    tx.h.get_write_access(&buf)?;
    d.fit_times();
    d.encode_into(&mut buf.write()[off..off + tx.fs.geo.inode_size as usize], &tx.fs.csum, ino);
    Ok(())
}

/// Read an inode straight from the device (mount time, before the cache exists).
pub(crate) fn read_raw_inode(dev: &dyn BlockDevice, sb: &Superblock, ino: Ino) -> FsResult<DiskInode> {
    let g = (ino - 1) / sb.inodes_per_group;
    let bs = u64::from(sb.block_size());
    let per = (bs as usize / sb.desc_size()) as u32;
    let gdt_blk = sb.desc_block_location(g / per);
    let raw = dev.read_block(gdt_blk)?;
    let off = (g % per) as usize * sb.desc_size();
    let desc = GroupDesc::decode(&raw[off..off + sb.desc_size()])?;
    let csum = Csum::from_sb(sb);
    desc.verify_checksum(&csum, g)?;
    let idx = u64::from((ino - 1) % sb.inodes_per_group);
    let isz = sb.inode_size() as u64;
    let byte = idx * isz;
    let blk = desc.inode_table + byte / bs;
    let b = dev.read_block(blk)?;
    let o = (byte % bs) as usize;
    crate::ondisk::inode::verify_checksum(&csum, ino, &b[o..o + isz as usize])?;
    let d = DiskInode::decode(&b[o..o + isz as usize]).map_err(|e| in_inode(ino, e))?;
    check_size(ino, &d, sb.block_size())?;
    Ok(d)
}
