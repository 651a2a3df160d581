//! File data: read, write, truncate, fallocate, and the block accounting they share.
//!
//! data=ordered: data buffers are filed on the transaction's ordered list and written home
//! before its commit record. data=journal (per mount, or per file with
//! `EXT4_JOURNAL_DATA_FL`): data buffers are journalled like metadata.

use std::sync::Arc;

use cjfs_journal::Buffer;

use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::fs::FsInner;
use crate::inode::{InodeState, store_inode};
use crate::ondisk::inode::{EXT4_EXTENTS_FL, EXT4_JOURNAL_DATA_FL};
use crate::tx::{ReadStore, Tx};
use crate::types::{DataMode, FallocMode, Ino, Timestamp};

/// Largest file with `bs`-byte blocks: the on-disk limit (2^32 - 1 blocks, the kernel's
/// `s_maxbytes`), so nothing cjfs writes is an inode the kernel and e2fsck reject.
pub(crate) fn max_file_size(bs: u64) -> u64 {
    crate::ondisk::inode::max_file_size(bs as u32)
}
/// How many of `len` bytes a write at `off` may take: those below the largest file size
/// (a short write, as POSIX asks); [`FsError::TooBig`] when it starts at or past that size
/// (the kernel's `generic_write_check_limits`, with ext4's `s_maxbytes`).
pub(crate) fn writable_len(fs: &FsInner, off: u64, len: usize) -> FsResult<usize> {
    let max = max_file_size(fs.geo.block_size as u64);
    if len == 0 {
        return Ok(0);
    }
    if off >= max {
        return Err(FsError::TooBig(format!("write at byte {off}: files end at byte {max}")));
    }
    Ok(len.min((max - off).min(usize::MAX as u64) as usize))
}

/// Blocks written per transaction handle (bounds a handle's log footprint).
const CHUNK_BLOCKS: u64 = 256;

/// Add `nblocks` file system blocks (negative to remove) to the inode's `i_blocks`.
pub(crate) fn charge_blocks(fs: &FsInner, st: &mut InodeState, nblocks: i64) -> FsResult<()> {
    let bs = fs.geo.block_size as u64;
    let cur = st.d.blocks_512(fs.geo.huge_file, bs as u32) as i64;
    let new = (cur + nblocks * (bs as i64 / 512)).max(0) as u64;
    st.d.set_blocks_512(new, fs.geo.huge_file, bs as u32)
}

/// Give an inode with no blocks yet an extent root mapping one new block at logical 0
/// (a new directory's first block, a slow symlink's target), charged to the inode; the
/// block comes back uninitialised and already in the transaction.
pub(crate) fn map_first_block(tx: &mut Tx<'_>, st: &mut InodeState, ino: Ino) -> FsResult<Arc<Buffer>> {
    extent_tree::init_root(&mut st.d.block);
    st.d.flags |= EXT4_EXTENTS_FL;
    let goal = crate::alloc::inode_goal(tx.fs, ino);
    let (pblk, _) = crate::alloc::alloc_blocks(tx, goal, 1)?;
    let d = extent_tree::insert(
        &mut st.d.block,
        tx,
        st.csum,
        Mapping { lblk: 0, pblk, len: 1, unwritten: false },
        goal,
    )?;
    let buf = tx.fs.cache.get_new(pblk);
    tx.h.get_create_access(&buf)?;
    charge_blocks(tx.fs, st, 1 + i64::from(d.blocks_allocated))?;
    Ok(buf)
}

/// Whether this file's data is journalled.
pub(crate) fn journals_data(fs: &FsInner, st: &InodeState) -> bool {
    fs.opts.data == DataMode::Journal || st.d.flags & EXT4_JOURNAL_DATA_FL != 0
}

/// Look `lblk` up in the inode's extent tree, or in its block map if it has one
/// ([`crate::block_map`]).
pub(crate) fn map_lookup<M: crate::meta::MetaStore + ?Sized>(
    st: &InodeState,
    store: &mut M,
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    if crate::block_map::is_block_mapped(st) {
        return crate::block_map::lookup(&st.d.block, store, st.csum.block_size, lblk);
    }
    extent_tree::lookup(&st.d.block, store, st.csum, lblk)
}

/// Before a change to the mapping of a block-mapped or inline inode: convert it to an extent
/// tree in a transaction of its own ([`crate::block_map::to_extents`],
/// [`crate::inline_data::file_to_extents`]); cjfs maps new blocks only with extents.
pub(crate) fn ensure_extents(fs: &FsInner, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    if crate::inline_data::is_inline(st) {
        // The block, its bitmap and descriptor, the inode (and the superblock's counts).
        let mut tx = Tx::start(fs, 8)?;
        crate::inline_data::file_to_extents(&mut tx, ino, st)?;
        store_inode(&mut tx, ino, st)?;
        tx.stop()?;
        return Ok(());
    }
    if !crate::block_map::is_block_mapped(st) {
        return Ok(());
    }
    // A file of n blocks has about n / (block size / 4) indirect blocks to free and a tree
    // of as many leaves at worst; the bitmaps and descriptors they touch come on top.
    let per = (fs.geo.block_size / 4) as u64;
    let credits = 32 + 2 * (st.d.size / fs.geo.block_size as u64).div_ceil(per);
    let mut tx = Tx::start(fs, credits.min(u64::from(u32::MAX)) as u32)?;
    crate::block_map::to_extents(&mut tx, st)?;
    st.datasync_tx = tx.h.tx_id();
    store_inode(&mut tx, ino, st)?;
    tx.stop()?;
    Ok(())
}

/// Read up to `buf.len()` bytes at `off`.
pub(crate) fn read(fs: &FsInner, st: &InodeState, off: u64, buf: &mut [u8]) -> FsResult<usize> {
    let bs = fs.geo.block_size as u64;
    if off >= st.d.size || buf.is_empty() {
        return Ok(0);
    }
    if crate::inline_data::is_inline(st) {
        return crate::inline_data::read(fs, st, off, buf);
    }
    let n = (buf.len() as u64).min(st.d.size - off) as usize;
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let mut done = 0usize;
    let mut cur: Option<Mapping> = None;
    while done < n {
        let pos = off + done as u64;
        let lblk = (pos / bs) as u32;
        let boff = (pos % bs) as usize;
        let take = (bs as usize - boff).min(n - done);
        if !cur.is_some_and(|m| m.contains(lblk)) {
            cur = map_lookup(st, &mut store, lblk)?;
        }
        let dst = &mut buf[done..done + take];
        match cur.and_then(|m| if m.unwritten { None } else { m.pblk_of(lblk) }) {
            Some(pblk) => {
                if pblk >= fs.geo.blocks_count {
                    return Err(FsError::Corrupt(format!(
                        "file data block {pblk} is outside the file system"
                    )));
                }
                let b = fs.cache.read(pblk)?;
                dst.copy_from_slice(&b.read()[boff..boff + take]);
            }
            None => dst.fill(0),
        }
        done += take;
    }
    Ok(n)
}

/// A data buffer for block `pblk` about to be written at `boff..boff+len`.
fn data_buffer(fs: &FsInner, pblk: u64, fresh: bool, full: bool) -> FsResult<Arc<Buffer>> {
    if fresh {
        return Ok(fs.cache.get_new(pblk));
    }
    if full {
        let b = fs.cache.get(pblk);
        if !b.is_uptodate() {
            // Fully overwritten: no need to read it; the caller fills every byte.
            b.write().fill(0);
            b.set_uptodate();
        }
        return Ok(b);
    }
    Ok(fs.cache.read(pblk)?)
}

/// Insert freshly allocated blocks into the extent tree. If that fails (ENOSPC for a new
/// tree block on a full file system) the tree is unchanged: give the blocks back, or the
/// transaction commits them as allocated but owned by no one (e2fsck: "Block bitmap
/// differences").
pub(crate) fn insert_or_free(
    tx: &mut Tx<'_>,
    st: &mut InodeState,
    m: Mapping,
    goal: u64,
) -> FsResult<extent_tree::TreeDelta> {
    extent_tree::insert(&mut st.d.block, tx, st.csum, m, goal).or_else(|e| {
        crate::alloc::free_blocks(tx, m.pblk, m.len, false)?;
        Err(e)
    })
}

/// Map `lblk` for writing: allocate (and insert) when unmapped, convert when unwritten.
/// Returns the physical block and whether its buffer must start zeroed.
///
/// `cur` caches the last mapping and whether this write allocated it: every block of a
/// fresh allocation starts zeroed, not just the first (a later block read from disk would
/// show whatever a previous owner of the block left there).
fn map_for_write(
    tx: &mut Tx<'_>,
    ino: Ino,
    st: &mut InodeState,
    lblk: u32,
    last_lblk: u32,
    cur: &mut Option<(Mapping, bool)>,
) -> FsResult<(u64, bool)> {
    if !cur.is_some_and(|(m, _)| m.contains(lblk)) {
        *cur = extent_tree::lookup(&st.d.block, tx, st.csum, lblk)?.map(|m| (m, false));
    }
    if let Some((m, allocated)) = *cur
        && let Some(p) = m.pblk_of(lblk)
    {
        if allocated {
            return Ok((p, true));
        }
        if m.unwritten {
            let d = extent_tree::mark_written(&mut st.d.block, tx, st.csum, lblk, 1)?;
            charge_blocks(tx.fs, st, i64::from(d.blocks_allocated) - i64::from(d.blocks_freed))?;
            // The conversion is needed to read the data back: fdatasync must commit it (found
            // by the crash harness: data written into a fallocated range and fdatasynced read
            // back as zeros after a crash, the extent still unwritten).
            st.datasync_tx = tx.h.tx_id();
            *cur = None;
            return Ok((p, true));
        }
        return Ok((p, false));
    }
    // Unmapped: allocate up to the next mapped block or the end of this write.
    let next = extent_tree::next_extent_at_or_after(&st.d.block, tx, st.csum, lblk)?;
    let mut want = u64::from(last_lblk) - u64::from(lblk) + 1;
    if let Some(nx) = next {
        want = want.min(u64::from(nx.lblk) - u64::from(lblk));
    }
    let goal = match extent_tree::extent_at_or_before(&st.d.block, tx, st.csum, lblk)? {
        Some(m) => m.pblk + u64::from(lblk - m.lblk),
        None => crate::alloc::inode_goal(tx.fs, ino),
    };
    let (pblk, len) = crate::alloc::alloc_blocks(tx, goal, want.min(32768) as u32)?;
    let m = Mapping { lblk, pblk, len, unwritten: false };
    let d = insert_or_free(tx, st, m, goal)?;
    charge_blocks(tx.fs, st, i64::from(len) + i64::from(d.blocks_allocated) - i64::from(d.blocks_freed))?;
    st.datasync_tx = tx.h.tx_id();
    *cur = Some((m, true));
    Ok((pblk, true))
}

/// Write `data` at `off`. Returns bytes written.
pub(crate) fn write(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    off: u64,
    data: &[u8],
    touch_times: bool,
) -> FsResult<usize> {
    let bs = fs.geo.block_size as u64;
    if data.is_empty() {
        return Ok(0);
    }
    let end = off.checked_add(data.len() as u64).ok_or_else(|| FsError::TooBig("offset overflow".into()))?;
    if end > max_file_size(bs) {
        return Err(FsError::TooBig(format!(
            "write ending at byte {end} exceeds the {}-byte limit",
            max_file_size(bs)
        )));
    }
    ensure_extents(fs, ino, st)?;
    // What the inode holds as last stored: a chunk that changes none of it leaves the inode
    // out of its transaction.
    let mut stored = WriteFields::of(&st.d);
    if st.d.flags & EXT4_EXTENTS_FL == 0 {
        st.d.flags |= EXT4_EXTENTS_FL;
        extent_tree::init_root(&mut st.d.block);
    }
    let jdata = journals_data(fs, st);
    let mut done = 0usize;
    while done < data.len() {
        let pos = off + done as u64;
        let first = pos / bs;
        let last = ((off + data.len() as u64 - 1) / bs).min(first + CHUNK_BLOCKS - 1);
        let nblk = (last - first + 1) as u32;
        // Blocks with images left from data journaling are journaled again (`before_in_place`).
        let left = !jdata && crate::adaptive::images_left(fs, st);
        // Ordered-data checksums may log a rewritten block too (`before_in_place`).
        let credits = 24 + if jdata || left || fs.journal.config().ordered_sums { nblk } else { 0 };
        let mut tx = Tx::start(fs, credits)?;
        st.window.wrote(((last + 1) * bs).min(end) - pos);
        let mut cur = None;
        let mut log_needed = false;
        let mut lblk = first;
        // A mapping failure (ENOSPC) ends the write short: the blocks mapped before it are
        // written and in the in-memory extent tree, so the inode must still be stored
        // (else they leak: allocated in the bitmap, owned by no on-disk inode) and the size
        // must cover them (else they are initialised blocks past EOF).
        let mut failed = None;
        while lblk <= last {
            let pos = off + done as u64;
            let boff = (pos % bs) as usize;
            let take = (bs as usize - boff).min(data.len() - done);
            let (pblk, fresh) = match map_for_write(&mut tx, ino, st, lblk as u32, last as u32, &mut cur) {
                Ok(v) => v,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let buf = data_buffer(fs, pblk, fresh, take == bs as usize)?;
            let logged = if jdata {
                tx.h.get_write_access(&buf)?;
                true
            } else {
                match crate::adaptive::before_in_place(&mut tx, st, &buf, left) {
                    Ok(l) => l,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            };
            buf.write()[boff..boff + take].copy_from_slice(&data[done..done + take]);
            if logged {
                tx.h.dirty_metadata(&buf)?;
                // In the log, not on the fsync list: the fsync must commit this transaction.
                log_needed = true;
                if jdata {
                    st.datasync_tx = tx.h.tx_id();
                }
            } else {
                if fresh || pos + take as u64 > st.d.size {
                    tx.h.dirty_data(&buf)?;
                } else {
                    // An overwrite inside the size: no stale block or byte for a commit to expose.
                    tx.h.dirty_overwrite(&buf)?;
                }
                st.dirty_data.push(buf);
            }
            done += take;
            lblk += 1;
        }
        let new_end = off + done as u64;
        let old_size = st.d.size;
        // `done > 0`: a write refused at its first byte past EOF accepted nothing, so it must
        // not move the size to its offset (a hole of zeros nobody wrote).
        if done > 0 && new_end > st.d.size {
            st.d.size = new_end;
            st.datasync_tx = tx.h.tx_id();
        }
        if touch_times {
            let now = Timestamp::now();
            st.d.mtime = now;
            st.d.ctime = now;
            // As the record keeps them, so that an unchanged time compares equal below.
            st.d.fit_times();
        }
        let fields = WriteFields::of(&st.d);
        if crate::planted::bugs(&fs.opts).skip_size_update_journal && st.d.size != old_size {
            // PLANTED BUG (test only, `FsBugs::skip_size_update_journal`): journal the inode
            // with its old size, so the size update never becomes durable.
            let new_size = std::mem::replace(&mut st.d.size, old_size);
            let r = store_inode(&mut tx, ino, st);
            st.d.size = new_size;
            r?;
        } else if fields != stored || !tx.tree.is_empty() {
            store_inode(&mut tx, ino, st)?;
            stored = fields;
        } else if log_needed || st.datasync_tx == tx.h.tx_id() {
            // A change the data needs besides the inode (a logged block, an extent block
            // converted from unwritten): fsync commits this transaction too.
            st.meta_tx = tx.h.tx_id();
        }
        // Else an overwrite inside the size within one tick of the clock: no field of the
        // inode moved, so, as ext4's `file_update_time` finding the times unchanged, the inode
        // stays out of the transaction (no checksum, no inode-table block in the log); the
        // data buffers are on the transaction and the file's fsync list all the same.
        tx.stop()?;
        if let Some(e) = failed {
            prune_dirty(st);
            // A short write when some data went in (as the kernel does on ENOSPC).
            return if done > 0 { Ok(done) } else { Err(e) };
        }
    }
    prune_dirty(st);
    Ok(done)
}

/// The inode fields a write can change (size, times, flags, block count, extent root).
#[derive(PartialEq)]
struct WriteFields {
    size: u64,
    mtime: Timestamp,
    ctime: Timestamp,
    flags: u32,
    blocks: u64,
    block: [u8; extent_tree::ROOT_BYTES],
}

impl WriteFields {
    fn of(d: &crate::ondisk::inode::Inode) -> Self {
        WriteFields {
            size: d.size,
            mtime: d.mtime,
            ctime: d.ctime,
            flags: d.flags,
            blocks: d.blocks,
            block: d.block,
        }
    }
}

/// Length of a file's fdatasync list at which a write first prunes it.
pub(crate) const DIRTY_PRUNE_MIN: usize = 4096;

/// Keep the fdatasync list short: drop buffers already written home and duplicates. The
/// next prune waits until the list has doubled, so a file appended faster than commits clean
/// it (every block still dirty) costs a sort per doubling, not one per write; the list
/// holds at most twice the file's peak of dirty buffers.
fn prune_dirty(st: &mut InodeState) {
    if st.dirty_data.len() > st.dirty_prune_at {
        st.dirty_data.retain(|b| b.jstate().dirty);
        st.dirty_data.sort_by_key(|b| b.blocknr());
        st.dirty_data.dedup_by_key(|b| b.blocknr());
        st.dirty_prune_at = (2 * st.dirty_data.len()).max(DIRTY_PRUNE_MIN);
    }
}

/// Zero bytes `from..to` of logical block `lblk` if it is mapped and written.
fn zero_partial(
    tx: &mut Tx<'_>,
    st: &mut InodeState,
    lblk: u32,
    from: usize,
    to: usize,
    jdata: bool,
) -> FsResult<()> {
    if from >= to {
        return Ok(());
    }
    let Some(m) = extent_tree::lookup(&st.d.block, tx, st.csum, lblk)? else { return Ok(()) };
    if m.unwritten {
        return Ok(());
    }
    let Some(pblk) = m.pblk_of(lblk) else { return Ok(()) };
    let buf = tx.fs.cache.read(pblk)?;
    change_data_block(tx, st, buf, jdata, |b| b[from..to].fill(0))?;
    Ok(())
}

/// Change data block `buf` of `st` in `tx` with `f`, written as the file's data is: in the
/// log with data journaling (`jdata`) or when the block must be logged
/// ([`crate::adaptive::before_in_place`]), else home before the commit (ordered). Returns
/// whether it was logged.
pub(crate) fn change_data_block(
    tx: &mut Tx<'_>,
    st: &mut InodeState,
    buf: Arc<Buffer>,
    jdata: bool,
    f: impl FnOnce(&mut [u8]),
) -> FsResult<bool> {
    let logged = if jdata {
        tx.h.get_write_access(&buf)?;
        true
    } else {
        let left = crate::adaptive::images_left(tx.fs, st);
        crate::adaptive::before_in_place(tx, st, &buf, left)?
    };
    f(&mut buf.write()[..]);
    if logged {
        tx.h.dirty_metadata(&buf)?;
    } else {
        tx.h.dirty_data(&buf)?;
        st.dirty_data.push(buf);
    }
    Ok(logged)
}

/// Turn the written blocks of logical `start..end` (exclusive) unwritten, keeping them
/// mapped to the same physical blocks (they read as zeros from now on; no data is written
/// and no block freed). Returns how many blocks changed. Runs inside `tx`; a tree block a
/// split needs may be allocated (on ENOSPC there, the blocks of that extent are freed, so
/// the range still reads as zeros).
fn to_unwritten(tx: &mut Tx<'_>, st: &mut InodeState, start: u32, end: u32) -> FsResult<u64> {
    let written: Vec<Mapping> = extent_tree::extents_in_range(&st.d.block, tx, st.csum, start, end)?
        .into_iter()
        .filter(|m| !m.unwritten)
        .collect();
    let mut n = 0u64;
    for m in written {
        let (a, b) = (m.lblk.max(start), (m.end().min(u64::from(end))) as u32);
        let (_, removed) = extent_tree::remove_range(&mut st.d.block, tx, st.csum, a, b)?;
        let mut grown = i64::from(removed.blocks_allocated) - i64::from(removed.blocks_freed);
        let mut lblk = a;
        while lblk < b {
            let len = (b - lblk).min(Mapping::max_len(true));
            let pblk = m.pblk + u64::from(lblk - m.lblk);
            let piece = Mapping { lblk, pblk, len, unwritten: true };
            match extent_tree::insert(&mut st.d.block, tx, st.csum, piece, pblk) {
                Ok(d) => grown += i64::from(d.blocks_allocated) - i64::from(d.blocks_freed),
                Err(e) => {
                    // Unmapped now: free what is left of this extent, as a punch would.
                    let revoke = journals_data(tx.fs, st) || crate::adaptive::images_left(tx.fs, st);
                    crate::alloc::free_blocks(tx, pblk, b - lblk, revoke)?;
                    charge_blocks(tx.fs, st, grown - i64::from(b - lblk))?;
                    return Err(e);
                }
            }
            lblk += len;
        }
        charge_blocks(tx.fs, st, grown)?;
        n += u64::from(b - a);
    }
    Ok(n)
}

/// Unmap logical blocks `start..end` (exclusive), freeing them, in bounded transactions'
/// worth of work. Runs inside `tx`.
fn unmap_range(tx: &mut Tx<'_>, st: &mut InodeState, start: u32, end: u32, jdata: bool) -> FsResult<()> {
    let (freed, delta) = extent_tree::remove_range(&mut st.d.block, tx, st.csum, start, end)?;
    // A data-journaled file's freed blocks are revoked (ext4's `__ext4_forget`): a logged copy
    // left in the journal must never be replayed over the block's next owner, which may be a
    // file in ordered mode writing it in place. Unlike ext4, also under a data=journal mount,
    // where a file may still switch to ordered (adaptive mode, `chattr -j`).
    // So are an ordered file's blocks that may still have images from its data-journaled time.
    let revoke = (jdata || crate::adaptive::images_left(tx.fs, st))
        && !(st.d.is_reg() && crate::planted::bugs(&tx.fs.opts).no_data_revoke);
    let mut n = 0i64;
    for (pblk, len) in freed {
        crate::alloc::free_blocks(tx, pblk, len, revoke)?;
        n += i64::from(len);
    }
    charge_blocks(tx.fs, st, -n + i64::from(delta.blocks_allocated) - i64::from(delta.blocks_freed))?;
    st.datasync_tx = tx.h.tx_id();
    Ok(())
}

/// Logical blocks unmapped per transaction by truncate (bounds log use).
const TRUNCATE_STEP: u64 = 32768;

/// Change the size. Shrinking frees blocks from the end, one bounded transaction at a time,
/// each leaving a consistent, smaller file.
pub(crate) fn truncate(fs: &FsInner, ino: Ino, st: &mut InodeState, new_size: u64) -> FsResult<()> {
    let bs = fs.geo.block_size as u64;
    if new_size > max_file_size(bs) {
        return Err(FsError::TooBig(format!("size {new_size} exceeds the {}-byte limit", max_file_size(bs))));
    }
    let now = Timestamp::now();
    if new_size == 0 && crate::block_map::is_block_mapped(st) {
        // Freed as it is, not converted first: a conversion may need tree blocks, and
        // emptying a file must not fail for want of space.
        crate::adaptive::note_truncated_to_zero(fs, st);
        let mut tx = Tx::start(fs, 64)?;
        crate::block_map::free_all(&mut tx, st, journals_data(fs, st))?;
        st.d.size = 0;
        st.d.mtime = now;
        st.d.ctime = now;
        store_inode(&mut tx, ino, st)?;
        tx.stop()?;
        return Ok(());
    }
    // An inline file shrinks in place: emptying one needs no block (a growth converts it).
    let inline_shrink = crate::inline_data::is_inline(st) && new_size <= st.d.size;
    if !inline_shrink {
        ensure_extents(fs, ino, st)?;
    }
    let jdata = journals_data(fs, st);
    let keep = new_size.div_ceil(bs);
    // Blocks may be mapped past i_size (fallocate keep-size): start from the last extent.
    let last_end = if st.d.flags & EXT4_EXTENTS_FL != 0 {
        let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
        extent_tree::extent_at_or_before(&st.d.block, &mut store, st.csum, u32::MAX - 1)?
            .map(|m| m.end())
            .unwrap_or(0)
    } else {
        0
    };
    // A truncation to the current size still drops blocks mapped past it, as ext4's
    // (`ext4_setattr` calls `ext4_truncate` whenever the size does not grow).
    if inline_shrink || new_size > st.d.size || (new_size == st.d.size && last_end <= keep) {
        if inline_shrink && new_size == 0 && st.d.size > 0 {
            crate::adaptive::note_truncated_to_zero(fs, st);
        }
        let mut tx = Tx::start(fs, 8)?;
        if inline_shrink {
            crate::inline_data::shrink(st, new_size)?;
        }
        // Only a size change is needed to read the data back: a truncation to the same size
        // (SQLite's after every WAL checkpoint) changes times, which fdatasync need not
        // commit (ext4 sets `i_datasync_tid` only when `i_disksize` changes).
        if new_size != st.d.size {
            st.datasync_tx = tx.h.tx_id();
        }
        st.d.size = new_size;
        st.d.mtime = now;
        st.d.ctime = now;
        store_inode(&mut tx, ino, st)?;
        tx.stop()?;
        return Ok(());
    }
    if new_size == 0 && st.d.size > 0 {
        crate::adaptive::note_truncated_to_zero(fs, st);
    }
    let mut end = last_end.max(keep);
    loop {
        let step_start = if end - keep > TRUNCATE_STEP { end - TRUNCATE_STEP } else { keep };
        let mut tx = Tx::start(fs, 64)?;
        if st.d.flags & EXT4_EXTENTS_FL != 0 {
            let stop = if step_start == keep && end == last_end.max(keep) {
                u32::MAX
            } else {
                end.min(u64::from(u32::MAX)) as u32
            };
            if (step_start as u32) < stop {
                unmap_range(&mut tx, st, step_start as u32, stop, jdata)?;
            }
        }
        let last = step_start == keep;
        st.d.size = if last { new_size } else { st.d.size.min(step_start * bs) };
        if last && !new_size.is_multiple_of(bs) && st.d.flags & EXT4_EXTENTS_FL != 0 {
            zero_partial(&mut tx, st, (new_size / bs) as u32, (new_size % bs) as usize, bs as usize, jdata)?;
        }
        st.d.mtime = now;
        st.d.ctime = now;
        st.datasync_tx = tx.h.tx_id();
        store_inode(&mut tx, ino, st)?;
        tx.stop()?;
        if last {
            break;
        }
        end = step_start;
    }
    Ok(())
}

/// Free every block of a file (its last link and last user are gone).
pub(crate) fn free_all(tx: &mut Tx<'_>, st: &mut InodeState) -> FsResult<()> {
    if crate::block_map::is_block_mapped(st) {
        let revoke = journals_data(tx.fs, st) || !st.d.is_reg();
        return crate::block_map::free_all(tx, st, revoke);
    }
    if st.d.flags & EXT4_EXTENTS_FL != 0 && !crate::namei::is_fast_symlink(st) {
        // Symlink, directory and EA inode blocks are journalled: revoke them.
        let ea = st.d.flags & crate::ondisk::inode::EXT4_EA_INODE_FL != 0;
        let revoke = journals_data(tx.fs, st) || !st.d.is_reg() || ea;
        unmap_range(tx, st, 0, u32::MAX, revoke)?;
    }
    Ok(())
}

/// fallocate.
pub(crate) fn fallocate(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    mode: FallocMode,
    off: u64,
    len: u64,
) -> FsResult<()> {
    let bs = fs.geo.block_size as u64;
    if len == 0 {
        return Err(FsError::Invalid("fallocate length 0".into()));
    }
    let end = off
        .checked_add(len)
        .filter(|e| *e <= max_file_size(bs))
        .ok_or_else(|| FsError::TooBig("fallocate range too large".into()))?;
    ensure_extents(fs, ino, st)?;
    if st.d.flags & EXT4_EXTENTS_FL == 0 {
        st.d.flags |= EXT4_EXTENTS_FL;
        extent_tree::init_root(&mut st.d.block);
    }
    let jdata = journals_data(fs, st);
    // A zero range allocates the holes first (as unwritten blocks, which read as zeros, so
    // an ENOSPC there changes no byte), then turns the written blocks inside it unwritten in
    // place and zeroes the partial ones at its edges (the kernel's `ext4_zero_range`): no
    // block is freed and allocated again, so it needs no more space than the holes.
    let (punch, alloc, keep_size, zero) = match mode {
        FallocMode::Allocate => (false, true, false, false),
        FallocMode::KeepSize => (false, true, true, false),
        FallocMode::PunchHole => (true, false, true, false),
        FallocMode::ZeroRange { keep_size } => (false, true, keep_size, true),
    };
    let zero_edges = |tx: &mut Tx<'_>, st: &mut InodeState| -> FsResult<()> {
        // Partial blocks at the edges are zeroed in place.
        let (fb, lb) = (off / bs, (end - 1) / bs);
        if fb == lb {
            if !(off.is_multiple_of(bs) && end % bs == 0) {
                zero_partial(tx, st, fb as u32, (off % bs) as usize, ((end - 1) % bs + 1) as usize, jdata)?;
            }
        } else {
            if !off.is_multiple_of(bs) {
                zero_partial(tx, st, fb as u32, (off % bs) as usize, bs as usize, jdata)?;
            }
            if end % bs != 0 {
                zero_partial(tx, st, lb as u32, 0, (end % bs) as usize, jdata)?;
            }
        }
        Ok(())
    };
    let (first_full, end_full) = (off.div_ceil(bs), end / bs);
    if punch {
        let mut tx = Tx::start(fs, 64)?;
        if first_full < end_full {
            unmap_range(&mut tx, st, first_full as u32, end_full as u32, jdata)?;
        }
        zero_edges(&mut tx, st)?;
        st.d.ctime = Timestamp::now();
        st.d.mtime = st.d.ctime;
        store_inode(&mut tx, ino, st)?;
        tx.stop()?;
    }
    if alloc {
        let mut lblk = off / bs;
        let last = (end - 1) / bs;
        while lblk <= last {
            let mut tx = Tx::start(fs, 64)?;
            let stop = (lblk + CHUNK_BLOCKS * 16 - 1).min(last);
            // On failure (ENOSPC) keep what was allocated, as ext4 does, but store the inode:
            // the in-memory tree already maps it (else the blocks leak).
            let mut failed = None;
            while lblk <= stop {
                match extent_tree::lookup(&st.d.block, &mut tx, st.csum, lblk as u32)? {
                    Some(m) => lblk = m.end(),
                    None => {
                        let next =
                            extent_tree::next_extent_at_or_after(&st.d.block, &mut tx, st.csum, lblk as u32)?;
                        let mut want = stop - lblk + 1;
                        if let Some(nx) = next {
                            want = want.min(u64::from(nx.lblk) - lblk);
                        }
                        let goal = match extent_tree::extent_at_or_before(
                            &st.d.block,
                            &mut tx,
                            st.csum,
                            lblk as u32,
                        )? {
                            Some(m) => m.pblk + (lblk - u64::from(m.lblk)),
                            None => crate::alloc::inode_goal(fs, ino),
                        };
                        let want = want.min(u64::from(Mapping::max_len(true))) as u32;
                        let (pblk, got) = match crate::alloc::alloc_blocks(&mut tx, goal, want) {
                            Ok(v) => v,
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        };
                        let m = Mapping { lblk: lblk as u32, pblk, len: got, unwritten: true };
                        let d = match insert_or_free(&mut tx, st, m, goal) {
                            Ok(d) => d,
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        };
                        charge_blocks(
                            fs,
                            st,
                            i64::from(got) + i64::from(d.blocks_allocated) - i64::from(d.blocks_freed),
                        )?;
                        lblk += u64::from(got);
                    }
                }
            }
            if !keep_size && end > st.d.size && lblk > last {
                st.d.size = end;
            }
            // ext4_fallocate's file_modified: mtime and ctime, with FALLOC_FL_KEEP_SIZE too.
            st.d.ctime = Timestamp::now();
            st.d.mtime = st.d.ctime;
            st.datasync_tx = tx.h.tx_id();
            store_inode(&mut tx, ino, st)?;
            tx.stop()?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
    if zero {
        let mut tx = Tx::start(fs, 64)?;
        if first_full < end_full {
            let n = to_unwritten(&mut tx, st, first_full as u32, end_full as u32)?;
            if n > 0 {
                st.datasync_tx = tx.h.tx_id();
            }
        }
        zero_edges(&mut tx, st)?;
        st.d.ctime = Timestamp::now();
        st.d.mtime = st.d.ctime;
        store_inode(&mut tx, ino, st)?;
        tx.stop()?;
    }
    if !alloc && !keep_size && end > st.d.size {
        truncate(fs, ino, st, end)?;
    }
    Ok(())
}

/// Next offset >= `off` holding data (`data` = true) or a hole, for lseek.
pub(crate) fn seek(fs: &FsInner, st: &InodeState, off: u64, data: bool) -> FsResult<Option<u64>> {
    let bs = fs.geo.block_size as u64;
    if off >= st.d.size {
        return Ok(None);
    }
    if st.d.flags & EXT4_EXTENTS_FL == 0 {
        return Ok(if data { None } else { Some(st.d.size) }.or(Some(off)));
    }
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let mut lblk = (off / bs) as u32;
    loop {
        let pos = (u64::from(lblk) * bs).max(off);
        if pos >= st.d.size {
            return Ok(if data { None } else { Some(st.d.size) });
        }
        let m = extent_tree::lookup(&st.d.block, &mut store, st.csum, lblk)?;
        let is_data = m.is_some_and(|m| !m.unwritten);
        if is_data == data {
            return Ok(Some(pos));
        }
        lblk = match m {
            Some(m) => m.end().min(u64::from(u32::MAX)) as u32,
            None => match extent_tree::next_extent_at_or_after(&st.d.block, &mut store, st.csum, lblk)? {
                Some(nx) => nx.lblk,
                None => return Ok(if data { None } else { Some(pos) }),
            },
        };
    }
}
