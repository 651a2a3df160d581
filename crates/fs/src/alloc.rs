//! Block and inode allocation with one lock per block group.
//!
//! Blocks freed by a transaction stay unusable until that transaction is durable (the
//! group's busy list), so a crash never leaves a committed file pointing at blocks that
//! were already handed to someone else and overwritten.
//!
//! With group descriptor checksums (`uninit_bg`, `metadata_csum`) a group may be
//! uninitialised: its bitmaps are then synthesized, never read; the first allocation or
//! free in the group writes the synthesized bitmap into the bitmap block, clears the flag
//! and logs the descriptor in the same handle. Every bitmap change records the bitmap's
//! checksum in the descriptor, and every descriptor write carries its own checksum
//! ([`GroupDesc::encode_into`]); a bitmap read from disk is checked against the descriptor
//! once, when it enters the cache.
//!
//! Free blocks are held back as ext4 holds them (`ext4_has_free_clusters`): the metadata
//! reserve from everyone's file data and directories (extent-tree blocks may use it), and the
//! root reserve (`s_r_blocks_count`) from callers other than root, `s_def_resuid` and
//! `s_def_resgid`. The caller is the thread's [`act_as`] (the FUSE front end sets it per
//! request); without one the caller is privileged (the library, the command line).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cjfs_journal::Buffer;

use crate::error::{FsError, FsResult};
use crate::fs::{FsInner, GroupState};
use crate::ondisk::bitmap;
use crate::ondisk::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, GroupDesc};
use crate::tx::Tx;
use crate::types::Ino;

/// Write group `g`'s descriptor into the GDT buffer under the transaction.
fn write_desc(tx: &mut Tx<'_>, g: u32, desc: &GroupDesc) -> FsResult<()> {
    let (blk, off) = tx.fs.geo.desc_location(g);
    let buf = tx.fs.cache.read(blk)?;
    tx.h.get_write_access(&buf)?;
    let mut w = buf.write();
    let ds = tx.fs.geo.desc_size as usize;
    desc.encode_into(&mut w[off..off + ds], &tx.fs.csum, g);
    Ok(())
}

/// Which bitmap of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Block,
    Inode,
}

impl Kind {
    fn uninit_flag(self) -> u16 {
        match self {
            Kind::Block => BG_BLOCK_UNINIT,
            Kind::Inode => BG_INODE_UNINIT,
        }
    }
}

/// Whether group `gs`'s `kind` bitmap is uninitialised (synthesized, not on disk).
fn is_uninit(fs: &FsInner, gs: &GroupState, kind: Kind) -> bool {
    fs.csum.group_desc() && gs.desc.flags & kind.uninit_flag() != 0
}

/// The bitmap an uninitialised group `g` has.
fn synthesized(fs: &FsInner, gs: &GroupState, g: u32, kind: Kind) -> Vec<u8> {
    let sb = fs.sb.lock();
    match kind {
        Kind::Block => bitmap::uninit_block_bitmap(&sb, &gs.desc, g),
        Kind::Inode => bitmap::uninit_inode_bitmap(&sb),
    }
}

/// Check the `kind` bitmap of group `g` in `buf` (read from disk) against the checksum
/// its descriptor records, once per cached buffer. Call with the group locked.
fn verify_bitmap(fs: &FsInner, gs: &GroupState, g: u32, buf: &Buffer, kind: Kind) -> FsResult<()> {
    if !fs.csum.metadata() || buf.is_verified() || is_uninit(fs, gs, kind) {
        return Ok(());
    }
    let bm = buf.read();
    match kind {
        Kind::Block => gs.desc.verify_block_bitmap(&fs.csum, g, &bm[..], fs.geo.blocks_per_group)?,
        Kind::Inode => gs.desc.verify_inode_bitmap(&fs.csum, g, &bm[..], fs.geo.inodes_per_group)?,
    }
    buf.set_verified();
    Ok(())
}

/// Record the checksum of group `g`'s changed `kind` bitmap in its descriptor.
fn note_bitmap(fs: &FsInner, gs: &mut GroupState, buf: &Buffer, kind: Kind) {
    if !fs.csum.metadata() {
        return;
    }
    let bm = buf.read();
    match kind {
        Kind::Block => gs.desc.set_block_bitmap_csum(&fs.csum, &bm[..], fs.geo.blocks_per_group),
        Kind::Inode => gs.desc.set_inode_bitmap_csum(&fs.csum, &bm[..], fs.geo.inodes_per_group),
    }
    buf.set_verified();
}

/// Make group `g`'s `kind` bitmap in `buf` (under write access in `tx`, group locked) the
/// one to change: an uninitialised bitmap is synthesized into the buffer, the flag cleared
/// and the descriptor logged; an initialised one is checked against its checksum.
fn prepare_bitmap(tx: &mut Tx<'_>, gs: &mut GroupState, g: u32, buf: &Buffer, kind: Kind) -> FsResult<()> {
    let fs = tx.fs;
    if !is_uninit(fs, gs, kind) {
        return verify_bitmap(fs, gs, g, buf, kind);
    }
    let bm = synthesized(fs, gs, g, kind);
    buf.write()[..].copy_from_slice(&bm);
    gs.desc.flags &= !kind.uninit_flag();
    note_bitmap(fs, gs, buf, kind);
    buf.set_verified();
    let desc = gs.desc.clone();
    write_desc(tx, g, &desc)
}

/// Take write access to a group's bitmap block and to its descriptor block before the group
/// is locked, as ext4 does: a writer that has to wait for a buffer (a JBD2 or BarrierFS
/// conflict) then never holds the group lock meanwhile, which would stall every allocator
/// of the group and, through their open handles, the transaction's lock-up.
fn pre_access(tx: &mut Tx<'_>, g: u32, bitmap_blk: u64) -> FsResult<Arc<Buffer>> {
    let bm_buf = tx.fs.cache.read(bitmap_blk)?;
    tx.h.get_write_access(&bm_buf)?;
    let (blk, _) = tx.fs.geo.desc_location(g);
    let gdt = tx.fs.cache.read(blk)?;
    tx.h.get_write_access(&gdt)?;
    Ok(bm_buf)
}

/// Core-aware allocation: the range of groups `[start, end)` of the calling core (of the
/// journal's log count; Z-Journal §3.5, start = i·G/N multiplied first so small images do
/// not collapse every core onto group 0), or `None` when the setting is off.
fn core_range(fs: &FsInner) -> Option<(u32, u32)> {
    if !fs.opts.core_groups {
        return None;
    }
    let n = fs.journal.log_count().max(1) as u64;
    let g = u64::from(fs.geo.groups);
    let i = cjfs_journal::per_core::core_slot(n as usize, fs.journal.config().admission) as u64;
    let start = (i * g / n) as u32;
    let end = (((i + 1) * g / n) as u32).max(start + 1).min(fs.geo.groups);
    Some((start, end))
}

/// Group `g` folded into the core's range `[s, e)`: groups outside it map to `s + g mod
/// (e - s)`, so things that would have gone to different groups (directories spread by the
/// rotor, files in their directory's group, goals near a file's blocks) still go to
/// different groups of the range. Z-Journal §3.5 confines a core to its groups and is silent
/// on placement inside them; starting every allocation at the range's first group (as this
/// did first) gave all of a core's files one goal, so concurrent appenders interleaved their
/// blocks and each file's extent tree grew by one extent per block (FxMark DWAL at 8–32
/// threads: `zjournal` 1.01×, `zjournal-no-bga` 1.24–1.59× `jbd2`).
fn fold_into(range: (u32, u32), g: u32) -> u32 {
    let (s, e) = range;
    if (s..e).contains(&g) { g } else { s + g % (e - s) }
}

/// Count an allocation in group `g` for the core-aware statistics (only allocations made
/// with a core's range: without core-aware allocation there is no "own" to count).
fn count_alloc(fs: &FsInner, range: Option<(u32, u32)>, g: u32) {
    let Some((s, e)) = range else { return };
    fs.alloc_all.fetch_add(1, Ordering::Relaxed);
    if (s..e).contains(&g) {
        fs.alloc_own.fetch_add(1, Ordering::Relaxed);
    }
}

/// Forget busy extents whose freeing transaction is durable.
fn prune_busy(fs: &FsInner, gs: &mut GroupState) {
    gs.busy.prune(|tx| fs.journal.is_durable(tx));
}

thread_local! {
    /// The credentials (uid, gid) of the operation this thread runs, if any was given.
    static CALLER: Cell<Option<(u32, u32)>> = const { Cell::new(None) };
}

/// Run this thread's file-system operations as `uid`/`gid` until the guard drops: blocks
/// reserved for root stay out of reach unless the caller is root, `s_def_resuid` or in
/// `s_def_resgid`.
pub fn act_as(uid: u32, gid: u32) -> CallerGuard {
    CallerGuard(CALLER.replace(Some((uid, gid))))
}

/// The credentials this thread's operation runs as ([`act_as`]); root where none was given
/// (a library caller).
pub(crate) fn caller() -> (u32, u32) {
    CALLER.get().unwrap_or((0, 0))
}

/// Restores the thread's previous caller when dropped (see [`act_as`]).
#[must_use = "the caller is reset when the guard drops"]
pub struct CallerGuard(Option<(u32, u32)>);

impl Drop for CallerGuard {
    fn drop(&mut self) {
        CALLER.set(self.0);
    }
}

/// How many of `want` blocks this thread's caller may take for file data or a directory, or
/// `NoSpace` naming the reserve that stops it.
fn within_reserve(fs: &FsInner, want: u32) -> FsResult<u32> {
    let geo = &fs.geo;
    let root = CALLER
        .get()
        .is_none_or(|(uid, gid)| uid == 0 || uid == geo.res_uid || (geo.res_gid != 0 && gid == geo.res_gid));
    let held = geo.metadata_reserve + if root { 0 } else { geo.reserved_blocks };
    let free = fs.free_blocks.load(Ordering::Relaxed).max(0) as u64;
    match free.saturating_sub(held) {
        0 if free > 0 => Err(FsError::NoSpace(format!(
            "the {free} free blocks are held back ({} reserved for root{}, {} for metadata)",
            geo.reserved_blocks,
            if root { ", usable by this caller" } else { "" },
            geo.metadata_reserve
        ))),
        avail => Ok(want.min(avail.min(u64::from(u32::MAX)) as u32).max(1)),
    }
}

/// Allocate up to `want` contiguous blocks for file data or a directory, as near `goal` as
/// possible, leaving the reserves the caller may not use. Returns the first block and how
/// many were allocated (at least 1).
pub(crate) fn alloc_blocks(tx: &mut Tx<'_>, goal: u64, want: u32) -> FsResult<(u64, u32)> {
    let want = within_reserve(tx.fs, want.max(1))?;
    alloc_blocks_any(tx, goal, want)
}

/// Allocate as [`alloc_blocks`] for metadata that completes an operation already under way
/// (an extent-tree block): the reserves do not apply (ext4's `EXT4_MB_USE_RESERVED`).
pub(crate) fn alloc_blocks_any(tx: &mut Tx<'_>, goal: u64, want: u32) -> FsResult<(u64, u32)> {
    let fs = tx.fs;
    let geo = &fs.geo;
    let want = want.clamp(1, 32768);
    let goal =
        if goal < geo.first_data_block || goal >= geo.blocks_count { geo.first_data_block } else { goal };
    let range = core_range(fs);
    let gg = geo.group_of(goal);
    let g0 = range.map_or(gg, |r| fold_into(r, gg));
    // Folded out of another core's range: the same place in the group it folds into.
    let goal = if g0 == gg {
        goal
    } else {
        geo.group_start(g0) + (goal - geo.group_start(gg)).min(u64::from(geo.group_len(g0)) - 1)
    };
    // Two passes: first only groups that can satisfy the whole request from the goal, then
    // anything that has a free block.
    for pass in 0..2 {
        for k in 0..geo.groups {
            let g = (g0 + k) % geo.groups;
            let skip = |gs: &GroupState| {
                gs.desc.free_blocks_count == 0 || (pass == 0 && gs.desc.free_blocks_count < want)
            };
            let (bitmap_blk, uninit) = {
                let gs = fs.groups[g as usize].lock();
                if skip(&gs) {
                    continue;
                }
                (gs.desc.block_bitmap, is_uninit(fs, &gs, Kind::Block))
            };
            // Probe before taking write access: a group that cannot serve the request must
            // not put its bitmap and descriptor blocks into the transaction (each would be a
            // false chain between per-core logs, and a needless logged block for any log).
            {
                let probe = if uninit { None } else { Some(fs.cache.read(bitmap_blk)?) };
                let mut gs = fs.groups[g as usize].lock();
                prune_busy(fs, &mut gs);
                let start_blk = geo.group_start(g);
                let glen = geo.group_len(g) as usize;
                let synth;
                let guard;
                let bm: &[u8] = match &probe {
                    Some(p) if !is_uninit(fs, &gs, Kind::Block) => {
                        verify_bitmap(fs, &gs, g, p, Kind::Block)?;
                        guard = p.read();
                        &guard[..]
                    }
                    _ => {
                        synth = synthesized(fs, &gs, g, Kind::Block);
                        &synth[..]
                    }
                };
                let from = if g == g0 { (goal - start_blk) as usize } else { 0 };
                let view = gs.busy.overlay(bm);
                if search_run(&view, from, glen, want, pass == 0).is_none()
                    && (from == 0 || search_run(&view, 0, from, want, pass == 0).is_none())
                {
                    continue;
                }
            }
            let bm_buf = pre_access(tx, g, bitmap_blk)?;
            let mut gs = fs.groups[g as usize].lock();
            if skip(&gs) {
                continue;
            }
            prepare_bitmap(tx, &mut gs, g, &bm_buf, Kind::Block)?;
            prune_busy(fs, &mut gs);
            let start_blk = geo.group_start(g);
            let glen = geo.group_len(g) as usize;
            let found = {
                let bm = bm_buf.read();
                let view = gs.busy.overlay(&bm[..]);
                let from = if g == g0 { (goal - start_blk) as usize } else { 0 };
                search_run(&view, from, glen, want, pass == 0)
                    .or_else(|| if from > 0 { search_run(&view, 0, glen, want, pass == 0) } else { None })
            };
            let Some((off, len)) = found else { continue };
            {
                let mut bm = bm_buf.write();
                if !bitmap::range_is_clear(&bm[..], off, len as usize) {
                    return Err(FsError::Corrupt(format!(
                        "block bitmap of group {g} changed under its lock"
                    )));
                }
                bitmap::set_range(&mut bm[..], off, len as usize);
            }
            gs.desc.free_blocks_count -= len;
            note_bitmap(fs, &mut gs, &bm_buf, Kind::Block);
            let desc = gs.desc.clone();
            write_desc(tx, g, &desc)?;
            drop(gs);
            fs.free_blocks.fetch_sub(i64::from(len), Ordering::Relaxed);
            count_alloc(fs, range, g);
            return Ok((start_blk + off as u64, len));
        }
    }
    Err(FsError::NoSpace(format!("no free blocks left ({} in the file system)", geo.blocks_count)))
}

/// Find a run of clear bits in `view` (a group's bitmap with its busy blocks set,
/// [`crate::fs::Busy::overlay`]) among its first `glen`, starting the search at `from`.
/// With `whole`, only a run of `want` blocks counts.
fn search_run(view: &[u8], from: usize, glen: usize, want: u32, whole: bool) -> Option<(usize, u32)> {
    let mut pos = from;
    while pos < glen {
        let z = bitmap::find_zero(view, pos, glen)?;
        let mut len = 1u32;
        while len < want && z + (len as usize) < glen && !bitmap::test(view, z + len as usize) {
            len += 1;
        }
        if !whole || len == want {
            return Some((z, len));
        }
        pos = z + len as usize + 1;
    }
    None
}

/// Free `len` blocks from `start`. `revoke`: the blocks held journalled contents
/// (metadata or data=journal data), whose logged copies must not be replayed. Freed data
/// buffers stay dirty: a committing transaction whose metadata still maps them must write
/// them before its commit record (data=ordered); they are dead only once this transaction
/// is durable, and cannot be reused before then.
pub(crate) fn free_blocks(tx: &mut Tx<'_>, start: u64, len: u32, revoke: bool) -> FsResult<()> {
    let fs = tx.fs;
    let geo = &fs.geo;
    if len == 0 {
        return Ok(());
    }
    if start < geo.first_data_block || start + u64::from(len) > geo.blocks_count {
        return Err(FsError::Corrupt(format!("freeing blocks {start}+{len} outside the file system")));
    }
    let txid = tx.h.tx_id();
    let end = start + u64::from(len);
    change_block_bits(tx, start, end, false, |gs, b, n| {
        let first = (b - geo.group_start(geo.group_of(b))) as u32;
        gs.busy.insert(txid, first, n);
    })?;
    if revoke {
        for blk in start..end {
            tx.h.revoke(blk)?;
        }
    }
    Ok(())
}

/// The runs of `start..end` that fall in one block group each: `(group, group's first
/// block, first block of the run, blocks in the run)`.
fn group_runs(
    geo: &crate::fs::Geometry,
    start: u64,
    end: u64,
) -> impl Iterator<Item = (u32, u64, u64, u64)> + '_ {
    let mut b = start;
    std::iter::from_fn(move || {
        if b >= end {
            return None;
        }
        let g = geo.group_of(b);
        let gstart = geo.group_start(g);
        let n = end.min(gstart + u64::from(geo.group_len(g))) - b;
        let run = (g, gstart, b, n);
        b += n;
        Some(run)
    })
}

/// Mark blocks `start..end` in use (`used`) or free in their groups' bitmaps, descriptors
/// and the free count, each run found wholly the other way first (else the image is
/// corrupt, named); `on_run` sees each group's state and run under the group's lock.
fn change_block_bits(
    tx: &mut Tx<'_>,
    start: u64,
    end: u64,
    used: bool,
    mut on_run: impl FnMut(&mut GroupState, u64, u32),
) -> FsResult<()> {
    let fs = tx.fs;
    for (g, gstart, b, n) in group_runs(&fs.geo, start, end) {
        let n = n as u32;
        let bitmap_blk = fs.groups[g as usize].lock().desc.block_bitmap;
        let bm_buf = pre_access(tx, g, bitmap_blk)?;
        let mut gs = fs.groups[g as usize].lock();
        prepare_bitmap(tx, &mut gs, g, &bm_buf, Kind::Block)?;
        {
            let mut bm = bm_buf.write();
            let off = (b - gstart) as usize;
            if used {
                if !bitmap::range_is_clear(&bm[..], off, n as usize) {
                    return Err(FsError::Corrupt(format!("claiming blocks {b}+{n} of group {g}, in use")));
                }
                bitmap::set_range(&mut bm[..], off, n as usize);
            } else {
                if !bitmap::range_is_set(&bm[..], off, n as usize) {
                    return Err(FsError::Corrupt(format!(
                        "freeing already free blocks {b}+{n} in group {g}"
                    )));
                }
                bitmap::clear_range(&mut bm[..], off, n as usize);
            }
        }
        if used {
            gs.desc.free_blocks_count -= n;
        } else {
            gs.desc.free_blocks_count += n;
        }
        note_bitmap(fs, &mut gs, &bm_buf, Kind::Block);
        on_run(&mut gs, b, n);
        let desc = gs.desc.clone();
        write_desc(tx, g, &desc)?;
        drop(gs);
        let delta = if used { -i64::from(n) } else { i64::from(n) };
        fs.free_blocks.fetch_add(delta, Ordering::Relaxed);
    }
    Ok(())
}

/// Allocate an inode, preferring `group` (directories are spread over groups).
pub(crate) fn alloc_inode(tx: &mut Tx<'_>, group: u32, is_dir: bool) -> FsResult<Ino> {
    let fs = tx.fs;
    let geo = &fs.geo;
    let range = core_range(fs);
    let g0 =
        if is_dir { fs.dir_rotor.fetch_add(1, Ordering::Relaxed) % geo.groups } else { group % geo.groups };
    // Core-aware: the same spreading, inside the core's groups.
    let g0 = range.map_or(g0, |r| fold_into(r, g0));
    for k in 0..geo.groups {
        let g = (g0 + k) % geo.groups;
        let bitmap_blk = {
            let gs = fs.groups[g as usize].lock();
            if gs.desc.free_inodes_count == 0 {
                continue;
            }
            gs.desc.inode_bitmap
        };
        let bm_buf = pre_access(tx, g, bitmap_blk)?;
        let mut gs = fs.groups[g as usize].lock();
        if gs.desc.free_inodes_count == 0 {
            continue;
        }
        prepare_bitmap(tx, &mut gs, g, &bm_buf, Kind::Inode)?;
        let ipg = geo.inodes_per_group as usize;
        let first = if g == 0 { (geo.first_ino - 1) as usize } else { 0 };
        gs.busy_inodes.prune(|tx| fs.journal.is_durable(tx));
        let found = {
            let bm = bm_buf.read();
            bitmap::find_zero(&gs.busy_inodes.overlay(&bm[..]), first, ipg)
        };
        let Some(bit) = found else {
            continue;
        };
        take_inode_bit(tx, g, gs, &bm_buf, bit, is_dir)?;
        count_alloc(fs, range, g);
        return Ok(g * geo.inodes_per_group + bit as u32 + 1);
    }
    Err(FsError::NoSpace(format!("no free inodes left ({} in the file system)", geo.inodes_count)))
}

/// Free inode `ino`.
pub(crate) fn free_inode(tx: &mut Tx<'_>, ino: Ino, is_dir: bool) -> FsResult<()> {
    let fs = tx.fs;
    let g = fs.geo.inode_group(ino);
    let bit = ((ino - 1) % fs.geo.inodes_per_group) as usize;
    let bitmap_blk = fs.groups[g as usize].lock().desc.inode_bitmap;
    let bm_buf = pre_access(tx, g, bitmap_blk)?;
    let mut gs = fs.groups[g as usize].lock();
    prepare_bitmap(tx, &mut gs, g, &bm_buf, Kind::Inode)?;
    if !bitmap::clear(&mut bm_buf.write()[..], bit) {
        return Err(FsError::Corrupt(format!("freeing inode {ino}, which is already free")));
    }
    gs.desc.free_inodes_count += 1;
    if fs.ij.get().is_some() {
        gs.busy_inodes.insert(tx.h.tx_id(), bit as u32, 1);
    }
    note_bitmap(fs, &mut gs, &bm_buf, Kind::Inode);
    if is_dir {
        gs.desc.used_dirs_count = gs.desc.used_dirs_count.saturating_sub(1);
    }
    let desc = gs.desc.clone();
    write_desc(tx, g, &desc)?;
    drop(gs);
    fs.free_inodes.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A goal block for new data of inode `ino` (its group's first block).
pub(crate) fn inode_goal(fs: &FsInner, ino: Ino) -> u64 {
    let g = fs.geo.inode_group(ino);
    fs.geo.group_start(g) + (fs.geo.block_size as u64 / 8)
}

/// Whether inode `ino` is marked in use in its group's bitmap (an uninitialised group's
/// inodes are all free). Reads only.
pub(crate) fn inode_in_use(fs: &FsInner, ino: Ino) -> FsResult<bool> {
    let g = fs.geo.inode_group(ino);
    let bit = ((ino - 1) % fs.geo.inodes_per_group) as usize;
    let (bitmap_blk, uninit) = {
        let gs = fs.groups[g as usize].lock();
        (gs.desc.inode_bitmap, is_uninit(fs, &gs, Kind::Inode))
    };
    if uninit {
        return Ok(false);
    }
    let buf = fs.cache.read(bitmap_blk)?;
    {
        let gs = fs.groups[g as usize].lock();
        verify_bitmap(fs, &gs, g, &buf, Kind::Inode)?;
    }
    Ok(bitmap::test(&buf.read()[..], bit))
}

/// Whether every block of `start..start+len` is free in its group's bitmap (synthesized for
/// an uninitialised group). Reads only.
pub(crate) fn blocks_free(fs: &FsInner, start: u64, len: u64) -> FsResult<bool> {
    let geo = &fs.geo;
    if start < geo.first_data_block || start.checked_add(len).is_none_or(|e| e > geo.blocks_count) {
        return Ok(false);
    }
    for (g, gstart, b, n) in group_runs(geo, start, start + len) {
        let (bitmap_blk, uninit) = {
            let gs = fs.groups[g as usize].lock();
            (gs.desc.block_bitmap, is_uninit(fs, &gs, Kind::Block))
        };
        let clear = if uninit {
            let gs = fs.groups[g as usize].lock();
            let bm = synthesized(fs, &gs, g, Kind::Block);
            bitmap::range_is_clear(&bm, (b - gstart) as usize, n as usize)
        } else {
            let buf = fs.cache.read(bitmap_blk)?;
            let gs = fs.groups[g as usize].lock();
            verify_bitmap(fs, &gs, g, &buf, Kind::Block)?;
            bitmap::range_is_clear(&buf.read()[..], (b - gstart) as usize, n as usize)
        };
        if !clear {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Mark the free blocks `start..start+len` in use (recovery: blocks a replayed record
/// says a file owns). Fails if one is in use already.
pub(crate) fn claim_blocks(tx: &mut Tx<'_>, start: u64, len: u64) -> FsResult<()> {
    let fs = tx.fs;
    let geo = &fs.geo;
    if start < geo.first_data_block || start.checked_add(len).is_none_or(|e| e > geo.blocks_count) {
        return Err(FsError::Corrupt(format!("claiming blocks {start}+{len} outside the file system")));
    }
    change_block_bits(tx, start, start + len, true, |_, _, _| {})
}

/// Mark the free inode `ino` in use (recovery: an inode a replayed record brings back).
pub(crate) fn claim_inode(tx: &mut Tx<'_>, ino: Ino, is_dir: bool) -> FsResult<()> {
    let fs = tx.fs;
    let geo = &fs.geo;
    let g = geo.inode_group(ino);
    let bit = ((ino - 1) % geo.inodes_per_group) as usize;
    let bitmap_blk = fs.groups[g as usize].lock().desc.inode_bitmap;
    let bm_buf = pre_access(tx, g, bitmap_blk)?;
    let mut gs = fs.groups[g as usize].lock();
    prepare_bitmap(tx, &mut gs, g, &bm_buf, Kind::Inode)?;
    if bitmap::test(&bm_buf.read()[..], bit) {
        return Err(FsError::Corrupt(format!("claiming inode {ino}, in use")));
    }
    take_inode_bit(tx, g, gs, &bm_buf, bit, is_dir)
}

/// Mark inode bit `bit` of group `g` in use in its bitmap `bm_buf`, with the descriptor's
/// counts (directories, the unused tail of the inode table) and the free count; `gs` is
/// the group's state, locked, released here.
fn take_inode_bit(
    tx: &mut Tx<'_>,
    g: u32,
    mut gs: cjfs_journal::lock_rank::RankedGuard<'_, GroupState>,
    bm_buf: &Arc<Buffer>,
    bit: usize,
    is_dir: bool,
) -> FsResult<()> {
    let fs = tx.fs;
    let ipg = fs.geo.inodes_per_group;
    bitmap::set(&mut bm_buf.write()[..], bit);
    gs.desc.free_inodes_count -= 1;
    if is_dir {
        gs.desc.used_dirs_count += 1;
    }
    let used = bit as u32 + 1;
    if gs.desc.itable_unused > 0 && ipg - gs.desc.itable_unused < used {
        gs.desc.itable_unused = ipg - used;
    }
    note_bitmap(fs, &mut gs, bm_buf, Kind::Inode);
    let desc = gs.desc.clone();
    write_desc(tx, g, &desc)?;
    drop(gs);
    fs.free_inodes.fetch_sub(1, Ordering::Relaxed);
    Ok(())
}

/// Keep `start..start+len` from being allocated for as long as this mount lives (recovery:
/// blocks a later record claims, the kernel's fast-commit "excluded regions").
pub(crate) fn exclude_blocks(fs: &FsInner, start: u64, len: u64) {
    let geo = &fs.geo;
    let end = (start + len).min(geo.blocks_count);
    let mut b = start.max(geo.first_data_block);
    while b < end {
        let g = geo.group_of(b);
        let gend = geo.group_start(g) + u64::from(geo.group_len(g));
        let n = end.min(gend) - b;
        fs.groups[g as usize].lock().busy.exclude((b - geo.group_start(g)) as u32, n as u32);
        b += n;
    }
}
