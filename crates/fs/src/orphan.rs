//! Orphans: inodes whose last link is gone but which are still open (or whose blocks are
//! still being freed). A crash leaves them recorded on disk and the next read-write mount
//! frees what they hold (or finishes the truncate of an orphan that still has links).
//!
//! Two on-disk records exist, and a mount processes both (an image may hold entries in
//! each):
//!
//! - the classic list: the superblock's `s_last_orphan` names the first; each orphan's
//!   `i_dtime` names the next. The in-memory list (`FsInner::orphans`, head first) is
//!   authoritative while mounted; [`crate::inode::store_inode`] writes each orphan's next
//!   pointer from it.
//! - the orphan file (`orphan_file`, compat 0x1000; format in
//!   [`crate::ondisk::orphan_file`]): on such an image an orphan is recorded, as the kernel
//!   does, by writing its inode number into a free slot of some block of the orphan file
//!   ([`OrphanFile`] keeps each block's free count and each orphan's slot), and removed by
//!   zeroing the slot; its `i_dtime` is left alone. When every slot is taken the orphan goes
//!   on the classic list instead (the kernel's `-ENOSPC` fallback: the file never grows).
//!   `RO_COMPAT_ORPHAN_PRESENT` follows the kernel: it is set when the image is mounted
//!   read-write (written before the first entry can be) and cleared at a clean unmount
//!   when the orphan file holds no entry, so a crash always leaves it set over any live
//!   entry. At mount the entries left by a crash are validated like the classic list (a
//!   reserved, out-of-range, free or twice-listed inode is corruption) and then processed
//!   with the same semantics, clearing each slot.
use std::sync::Arc;

use cjfs_journal::JournalKind;

use std::collections::HashMap;

use cjfs_blockdev::Device;
use cjfs_journal::BufferCache;
use cjfs_journal::lock_rank::{Rank, RankedMutex};

use crate::error::{FsError, FsResult};
use crate::fs::FsInner;
use crate::inode::{Inode, InodeState, read_raw_inode, store_inode};
use crate::ondisk::csum::Csum;
use crate::ondisk::features::COMPAT_ORPHAN_FILE;
use crate::ondisk::inode::EXT4_EXTENTS_FL;
use crate::ondisk::inode::set_checksum as set_inode_checksum;
use crate::ondisk::orphan_file::{
    entries_per_block, entry, set_checksum as set_block_checksum, set_entry, verify_block,
};
use crate::ondisk::superblock::Superblock;
use crate::ondisk::superblock::{SUPERBLOCK_SIZE, sb_location, set_checksum as set_sb_checksum};
use crate::tx::Tx;
use crate::types::{Ino, Timestamp};

/// Byte offset of `i_dtime` in an inode record.
const I_DTIME: usize = 0x14;

/// The orphan file of a mounted `orphan_file` image: where its blocks are and which slots
/// are taken.
pub(crate) struct OrphanFile {
    /// Its inode (`s_orphan_file_inum`).
    pub ino: Ino,
    /// Physical block of each of its blocks, in file order.
    pub blocks: Vec<u64>,
    /// Its inode's checksum seed (`metadata_csum` only).
    pub seed: Option<u32>,
    /// Slots in one of its blocks (set by the block size).
    pub slots_per_block: usize,
    /// Free slots and recorded orphans. Lock: itself (a leaf, never held across I/O).
    pub state: RankedMutex<OrphanFileState>,
}

/// The mutable part of [`OrphanFile`].
pub(crate) struct OrphanFileState {
    /// Free slots of each block, less those reserved by an add in progress.
    pub free: Vec<usize>,
    /// Each orphan recorded in the file: (block index, slot).
    pub slots: HashMap<Ino, (usize, usize)>,
    /// Block the next add starts looking at (spreads concurrent adds over blocks).
    pub rotor: usize,
}

impl OrphanFile {
    /// Read and validate the orphan file of `sb`'s image (`None` without `orphan_file`):
    /// its inode must be a regular file in use, extent-mapped without holes, a whole number
    /// of blocks long; every block must carry the magic (and, with `metadata_csum`, a
    /// matching checksum). The live entries are recorded in `slots`. Reads only.
    pub(crate) fn load(dev: &Device, sb: &Superblock, cache: &BufferCache) -> FsResult<Option<OrphanFile>> {
        if !sb.has_compat(COMPAT_ORPHAN_FILE) {
            return Ok(None);
        }
        let ino = sb.orphan_file_inum;
        if ino < crate::types::ROOT_INO || ino > sb.inodes_count || ino == crate::ondisk::inode::JOURNAL_INO {
            return Err(FsError::Corrupt(format!(
                "superblock: s_orphan_file_inum = {ino} cannot be the orphan file"
            )));
        }
        let raw = read_raw_inode(&**dev, sb, ino)?;
        if raw.mode & 0o170000 != 0o100000 || raw.links_count == 0 {
            return Err(FsError::Corrupt(format!(
                "orphan file inode {ino}: i_mode {:#o}, i_links_count {} (not a regular file in use)",
                raw.mode, raw.links_count
            )));
        }
        if raw.flags & EXT4_EXTENTS_FL == 0 {
            return Err(FsError::Incompatible(format!(
                "orphan file inode {ino} is block-mapped (no extents)"
            )));
        }
        let bs = u64::from(sb.block_size());
        let slots_per_block = entries_per_block(bs as usize);
        if raw.size == 0 || raw.size % bs != 0 {
            return Err(FsError::Corrupt(format!(
                "orphan file inode {ino}: i_size {} is not a positive whole number of blocks",
                raw.size
            )));
        }
        let nblocks = raw.size / bs;
        let csum = Csum::from_sb(sb);
        let mut store = crate::tx::ReadStore { cache, limit: sb.block_count() };
        let mut blocks: Vec<u64> = Vec::new();
        let mut bad = None;
        crate::extent_tree::for_each_extent(
            &raw.block,
            &mut store,
            csum.for_inode(ino, raw.generation),
            |m| {
                if bad.is_none() && (u64::from(m.lblk) != blocks.len() as u64 || m.unwritten) {
                    bad = Some(m.lblk);
                }
                blocks.extend((0..u64::from(m.len)).map(|k| m.pblk + k));
            },
        )?;
        if let Some(l) = bad {
            return Err(FsError::Corrupt(format!(
                "orphan file inode {ino}: a hole or an unwritten extent at block {l}"
            )));
        }
        if (blocks.len() as u64) < nblocks {
            return Err(FsError::Corrupt(format!(
                "orphan file inode {ino} maps {} block(s), i_size says {nblocks}",
                blocks.len()
            )));
        }
        blocks.truncate(nblocks as usize);
        let seed = csum.metadata().then(|| csum.inode_seed(ino, raw.generation));
        let mut free = Vec::with_capacity(blocks.len());
        let mut slots = HashMap::new();
        for (i, &pblk) in blocks.iter().enumerate() {
            let buf = cache.read(pblk)?;
            let data = buf.read();
            let live = verify_block(seed, i as u32, pblk, &data[..])?;
            free.push(slots_per_block - live);
            for s in (0..slots_per_block).filter(|&s| entry(&data[..], s) != 0) {
                let o = entry(&data[..], s);
                if let Some((bi, bs)) = slots.insert(o, (i, s)) {
                    return Err(FsError::Corrupt(format!(
                        "orphan file inode {ino}: inode {o} is listed twice (block {bi} slot {bs}, block {i} slot {s})"
                    )));
                }
            }
        }
        Ok(Some(OrphanFile {
            ino,
            blocks,
            seed,
            slots_per_block,
            state: RankedMutex::new(Rank::Leaf, OrphanFileState { free, slots, rotor: 0 }),
        }))
    }

    /// No orphan is recorded in the file.
    pub(crate) fn is_empty(&self) -> bool {
        self.state.lock().slots.is_empty()
    }

    /// The orphans recorded in the file, in file order.
    pub(crate) fn entries(&self) -> Vec<Ino> {
        let st = self.state.lock();
        let mut v: Vec<(usize, usize, Ino)> = st.slots.iter().map(|(&i, &(b, s))| (b, s, i)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, _, i)| i).collect()
    }

    /// Reserve a free slot in some block; `None` when the file is full.
    fn reserve(&self) -> Option<usize> {
        let mut st = self.state.lock();
        let n = st.free.len();
        let start = st.rotor % n;
        let i = (0..n).map(|k| (start + k) % n).find(|&i| st.free[i] > 0)?;
        st.free[i] -= 1;
        st.rotor = i + 1;
        Some(i)
    }

    /// Record `ino` in a free slot, journalled under `tx`. `false` when the file is full
    /// (nothing was written: the caller uses the classic list).
    fn add(&self, tx: &mut Tx<'_>, ino: Ino) -> FsResult<bool> {
        let Some(i) = self.reserve() else {
            return Ok(false);
        };
        let buf = match tx.fs.cache.read(self.blocks[i]) {
            Ok(b) => b,
            Err(e) => {
                self.state.lock().free[i] += 1;
                return Err(e.into());
            }
        };
        if let Err(e) = tx.h.get_write_access(&buf) {
            self.state.lock().free[i] += 1;
            return Err(e.into());
        }
        let slot = {
            let mut w = buf.write();
            // The reservation guarantees a zero slot; its absence means the block changed
            // under us, which only corruption explains.
            let Some(s) = (0..self.slots_per_block).find(|&s| entry(&w[..], s) == 0) else {
                return Err(FsError::Corrupt(format!(
                    "orphan file inode {}: block {i} has no free slot though one was counted",
                    self.ino
                )));
            };
            set_entry(&mut w[..], s, ino);
            set_block_checksum(self.seed, self.blocks[i], &mut w[..]);
            s
        };
        self.state.lock().slots.insert(ino, (i, slot));
        Ok(true)
    }

    /// Clear `ino`'s slot, journalled under `tx`. `false` when `ino` is not in the file.
    fn del(&self, tx: &mut Tx<'_>, ino: Ino) -> FsResult<bool> {
        let Some((i, slot)) = self.state.lock().slots.get(&ino).copied() else {
            return Ok(false);
        };
        let buf = tx.fs.cache.read(self.blocks[i])?;
        tx.h.get_write_access(&buf)?;
        {
            let mut w = buf.write();
            if entry(&w[..], slot) != ino {
                return Err(FsError::Corrupt(format!(
                    "orphan file inode {}: block {i} slot {slot} holds {}, expected orphan {ino}",
                    self.ino,
                    entry(&w[..], slot)
                )));
            }
            set_entry(&mut w[..], slot, 0);
            set_block_checksum(self.seed, self.blocks[i], &mut w[..]);
        }
        let mut st = self.state.lock();
        st.slots.remove(&ino);
        st.free[i] += 1;
        Ok(true)
    }
}

/// Next pointer for orphan `ino` (0 if last or not an orphan).
pub(crate) fn next_of(fs: &FsInner, ino: Ino) -> u32 {
    let l = fs.orphans.lock();
    match l.iter().position(|&i| i == ino) {
        Some(p) => l.get(p + 1).copied().unwrap_or(0),
        None => 0,
    }
}

/// Write access to the superblock's buffer, taken before `orphan_lock` (as ext4 does) so a
/// writer waiting for the buffer never holds the lock every unlink needs.
fn sb_access(tx: &mut Tx<'_>) -> FsResult<Arc<cjfs_journal::Buffer>> {
    let buf = tx.fs.cache.read(sb_location(tx.fs.geo.block_size).0)?;
    tx.h.get_write_access(&buf)?;
    Ok(buf)
}

fn write_sb_orphan(tx: &mut Tx<'_>, buf: &cjfs_journal::Buffer, head: Ino) -> FsResult<()> {
    let mut sb = tx.fs.sb.lock();
    sb.last_orphan = head;
    // Only s_last_orphan changes here; keep the rest of the buffer as it is.
    let off = sb_location(tx.fs.geo.block_size).1;
    let mut w = buf.write();
    w[off + 0xE8..off + 0xEC].copy_from_slice(&head.to_le_bytes());
    set_sb_checksum(&mut w[off..off + SUPERBLOCK_SIZE]);
    Ok(())
}

/// Put `ino` at the head of the orphan list. The caller stores the inode afterwards.
pub(crate) fn add(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    if st.orphan {
        return Ok(());
    }
    if let Some(of) = &tx.fs.ofile
        && of.add(tx, ino)?
    {
        st.orphan = true;
        return Ok(());
    }
    let sb_buf = sb_access(tx)?;
    let _g = tx.fs.orphan_lock.lock();
    tx.fs.orphans.lock().insert(0, ino);
    write_sb_orphan(tx, &sb_buf, ino)?;
    st.orphan = true;
    Ok(())
}

/// Take `ino` off the orphan list. The caller stores the inode afterwards.
pub(crate) fn del(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    if !st.orphan {
        return Ok(());
    }
    if let Some(of) = &tx.fs.ofile
        && of.del(tx, ino)?
    {
        st.orphan = false;
        return Ok(());
    }
    // The block to patch (the superblock, or the predecessor's inode table block) whose write
    // access this handle already holds; taken unlocked, then the list is looked at again.
    let mut accessed: Option<Arc<cjfs_journal::Buffer>> = None;
    let _g = loop {
        let g = tx.fs.orphan_lock.lock();
        let (pos, prev, next) = {
            let l = tx.fs.orphans.lock();
            let Some(p) = l.iter().position(|&i| i == ino) else {
                st.orphan = false;
                return Ok(());
            };
            (p, if p > 0 { Some(l[p - 1]) } else { None }, l.get(p + 1).copied().unwrap_or(0))
        };
        let (blk, off) = match prev {
            None => sb_location(tx.fs.geo.block_size),
            Some(prev) => crate::inode::inode_location(tx.fs, prev),
        };
        let buf = match &accessed {
            Some(b) if b.blocknr() == blk => b.clone(),
            _ => {
                drop(g);
                let buf = tx.fs.cache.read(blk)?;
                tx.h.get_write_access(&buf)?;
                accessed = Some(buf);
                continue;
            }
        };
        match prev {
            None => write_sb_orphan(tx, &buf, next)?,
            // Patch the predecessor's next pointer in place: its in-memory record gets the
            // same value from the list whenever it is stored.
            Some(prev) => {
                let mut w = buf.write();
                let rec = &mut w[off..off + tx.fs.geo.inode_size as usize];
                rec[I_DTIME..I_DTIME + 4].copy_from_slice(&next.to_le_bytes());
                set_inode_checksum(&tx.fs.csum, prev, rec);
            }
        }
        tx.fs.orphans.lock().remove(pos);
        break g;
    };
    st.orphan = false;
    st.d.dtime = 0;
    Ok(())
}

/// Free an unlinked inode's blocks and the inode itself, in bounded transactions; the
/// inode stays on the orphan list until the last one.
pub(crate) fn evict(fs: &FsInner, node: &Arc<Inode>, st: &mut InodeState) -> FsResult<()> {
    if st.freed {
        return Ok(());
    }
    if (st.d.is_reg() || st.d.is_dir() || (st.d.is_symlink() && !crate::namei::is_fast_symlink(st)))
        && st.d.size > 0
        && (st.d.is_reg())
    {
        crate::file::truncate(fs, node.ino, st, 0)?;
    }
    // Each EA inode the attributes free: its record, bitmaps, descriptors, tree blocks.
    let ea = crate::xattr::ea_refs_of(fs, st).map(|(b, k)| b.len() + k.len()).unwrap_or(0);
    let mut tx = Tx::start(fs, 32 + 8 * ea as u32)?;
    crate::file::free_all(&mut tx, st)?;
    crate::xattr::free_all(&mut tx, st)?;
    del(&mut tx, node.ino, st)?;
    let is_dir = st.d.is_dir();
    st.d.links_count = 0;
    st.d.dtime = Timestamp::now().sec as u32;
    st.d.size = 0;
    store_inode(&mut tx, node.ino, st)?;
    crate::alloc::free_inode(&mut tx, node.ino, is_dir)?;
    tx.stop()?;
    st.freed = true;
    st.drop_index();
    fs.inodes.remove(node);
    Ok(())
}

/// At mount, before anything is written: read and validate the on-disk orphan list (reads
/// only).
pub(crate) fn load_orphan_chain(fs: &FsInner) -> FsResult<Vec<Ino>> {
    let head = fs.sb.lock().last_orphan;
    walk_orphan_list(head, (fs.geo.first_ino, fs.geo.inodes_count), |ino| {
        let node = fs.inodes.get(fs, ino)?;
        let st = node.state.read();
        Ok((st.d.mode, st.d.dtime))
    })
}

/// The classic orphan list from `head` (`s_last_orphan`), each link read by `read` (the
/// inode's mode and `i_dtime`, the next link), validated as the kernel's ext4_orphan_get
/// does: a link to a reserved inode, past the table (`first..=last` are the candidates),
/// back into the list or to a free inode is corruption, not an orphan to free.
fn walk_orphan_list(
    mut head: Ino,
    (first, last): (Ino, Ino),
    mut read: impl FnMut(Ino) -> FsResult<(u16, u32)>,
) -> FsResult<Vec<Ino>> {
    let mut from = "superblock s_last_orphan".to_string();
    let mut chain = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while head != 0 {
        if head < first || head > last {
            return Err(FsError::Corrupt(format!(
                "orphan list: {from} links to inode {head}, which is {} (orphans are inodes {first}..={last})",
                if head < first { "reserved" } else { "past the inode table" },
            )));
        }
        if !seen.insert(head) {
            return Err(FsError::Corrupt(format!("orphan list: {from} links back to inode {head} (a loop)")));
        }
        chain.push(head);
        let (mode, dtime) = read(head)?;
        if mode == 0 {
            return Err(FsError::Corrupt(format!(
                "orphan list: {from} links to inode {head}, which is free"
            )));
        }
        from = format!("inode {head}'s i_dtime");
        head = dtime;
    }
    Ok(chain)
}

/// At mount, before anything is written: validate the entries of the orphan file (if any)
/// as [`load_orphan_chain`] validates the list, `chain` being that list (an inode in both
/// is corruption). Returns them in file order (reads only).
pub(crate) fn load_orphan_file(fs: &FsInner, chain: &[Ino]) -> FsResult<Vec<Ino>> {
    let Some(of) = &fs.ofile else {
        return Ok(Vec::new());
    };
    let entries = of.entries();
    check_orphan_file(of.ino, &entries, (fs.geo.first_ino, fs.geo.inodes_count), chain, |ino| {
        Ok(fs.inodes.get(fs, ino)?.state.read().d.mode == 0)
    })?;
    Ok(entries)
}

/// Validate the entries of orphan file `of_ino` against the candidates `first..=last` and
/// the classic list `chain` (an inode in both is corruption); `is_free` reads whether an
/// inode is free.
fn check_orphan_file(
    of_ino: Ino,
    entries: &[Ino],
    (first, last): (Ino, Ino),
    chain: &[Ino],
    mut is_free: impl FnMut(Ino) -> FsResult<bool>,
) -> FsResult<()> {
    for &ino in entries {
        if ino < first || ino > last || ino == of_ino {
            return Err(FsError::Corrupt(format!(
                "orphan file inode {of_ino}: entry {ino} is {} (orphans are inodes {first}..={last}, not the orphan file)",
                if ino > last { "past the inode table" } else { "reserved" },
            )));
        }
        if chain.contains(&ino) {
            return Err(FsError::Corrupt(format!(
                "orphan inode {ino} is both in the orphan file and on the orphan list"
            )));
        }
        if is_free(ino)? {
            return Err(FsError::Corrupt(format!("orphan file inode {of_ino}: entry {ino} is a free inode")));
        }
    }
    Ok(())
}

/// At mount: free (or finish truncating) every inode of `chain`, the validated orphan list
/// from [`load_orphan_chain`], and of `file`, the orphan file's entries from
/// [`load_orphan_file`]. Returns how many.
pub(crate) fn process_orphans(fs: &FsInner, chain: Vec<Ino>, file: Vec<Ino>) -> FsResult<u32> {
    if (chain.is_empty() && file.is_empty()) || fs.opts.journal.kind == JournalKind::None && fs.opts.read_only
    {
        return Ok(0);
    }
    *fs.orphans.lock() = chain.clone();
    let all: Vec<Ino> = chain.into_iter().chain(file).collect();
    for ino in &all {
        let node = fs.inodes.get(fs, *ino)?;
        node.state.write().orphan = true;
    }
    let mut n = 0;
    for ino in all {
        let node = fs.inodes.get(fs, ino)?;
        let mut st = node.state.write();
        if st.d.links_count == 0 {
            evict(fs, &node, &mut st)?;
        } else {
            // An orphan that still has links was mid-truncate; its size is already right.
            let mut tx = Tx::start(fs, 8)?;
            del(&mut tx, ino, &mut st)?;
            store_inode(&mut tx, ino, &mut st)?;
            tx.stop()?;
        }
        n += 1;
    }
    Ok(n)
}

/// At unmount: free every orphan still held open.
pub(crate) fn release_all(fs: &FsInner) -> FsResult<()> {
    let mut list: Vec<Ino> = fs.orphans.lock().clone();
    if let Some(of) = &fs.ofile {
        list.extend(of.entries());
    }
    for ino in list {
        let node = fs.inodes.get(fs, ino)?;
        let mut st = node.state.write();
        st.open = 0;
        if st.orphan && st.d.links_count == 0 {
            evict(fs, &node, &mut st)?;
        }
    }
    Ok(())
}

/// The orphans an image records on disk, read without mounting it: what the next
/// read-write mount (or `cjfs recover`) would free.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingOrphans {
    /// The classic list (`s_last_orphan`, then each orphan's `i_dtime`), head first.
    pub list: Vec<Ino>,
    /// The orphan file's entries, in file order (empty without `orphan_file`).
    pub file: Vec<Ino>,
    /// `RO_COMPAT_ORPHAN_PRESENT` is set (left by a mount that did not unmount cleanly,
    /// with or without entries).
    pub present_flag: bool,
}

impl PendingOrphans {
    /// How many inodes are recorded, in the list and the file together.
    pub fn count(&self) -> usize {
        self.list.len() + self.file.len()
    }

    /// A read-write mount has something to do: inodes to free, or the `orphan_present`
    /// flag to clear.
    pub fn any(&self) -> bool {
        self.count() > 0 || self.present_flag
    }
}

/// Read the orphans recorded on the image on `dev` (reads only), validated as a mount
/// validates them: a link out of range, a loop, a free inode or an inode in both the list
/// and the file is [`FsError::Corrupt`]. On an image needing journal recovery this is what
/// the disk holds before the replay, not what the mount after it will find.
pub fn pending_orphans(dev: &Device) -> FsResult<PendingOrphans> {
    let (sb, _) = crate::mkfs::read_layout_for(&**dev, crate::ondisk::features::Access::ReadOnly)?;
    let range = (sb.first_ino(), sb.inodes_count);
    let list = walk_orphan_list(sb.last_orphan, range, |ino| {
        let raw = read_raw_inode(&**dev, &sb, ino)?;
        Ok((raw.mode, raw.dtime))
    })?;
    let cache = BufferCache::new(dev.clone(), 64);
    let file = match OrphanFile::load(dev, &sb, &cache)? {
        Some(of) => {
            let entries = of.entries();
            check_orphan_file(of.ino, &entries, range, &list, |ino| {
                Ok(read_raw_inode(&**dev, &sb, ino)?.mode == 0)
            })?;
            entries
        }
        None => Vec::new(),
    };
    let present_flag = sb.feature_ro_compat & crate::ondisk::features::RO_COMPAT_ORPHAN_PRESENT != 0;
    Ok(PendingOrphans { list, file, present_flag })
}
