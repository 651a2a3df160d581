//! Reading inline data (the `inline_data` feature, inodes flagged `EXT4_INLINE_DATA_FL`): a
//! small file's bytes, or a small directory's entries, kept in the inode itself: the 60
//! bytes of `i_block`, then the value of the in-inode extended attribute `system.data`
//! (ext4's `Documentation/filesystems/ext4/inlinedata.rst`).
//!
//! A file's contents are the first `i_size` bytes of that stream. A directory's stream
//! starts with its parent's inode number (4 bytes, no `.` or `..` record), then records
//! fill the rest of `i_block` (56 bytes) and, separately, the whole attribute value: two
//! regions, as the kernel's `ext4_read_inline_dir` walks them.
//!
//! cjfs reads such inodes and changes them in place where they have the room, and
//! otherwise moves their data into a block first, as the kernel does when inline data no
//! longer fits (`ext4_convert_inline_data`, `ext4_convert_inline_dir`); it never makes a new
//! inode inline (a valid choice: the kernel makes one inline only on its first small write).
//!
//! - a file's first write, growth, `fallocate` or hole punch: [`file_to_extents`] (one
//!   block, written as the file's data mode writes data, in the caller's transaction);
//! - a file shrunk: in place ([`shrink`], the kernel's `ext4_inline_data_truncate`), so that
//!   emptying a file never needs a free block;
//! - a directory's new entry: in place where it fits ([`add_dir_entry`]), else
//!   [`crate::dir`] moves every entry into a block (`.` and `..` first), then adds it there;
//! - a directory's removed or repointed entry (`unlink`, `rename`, `..` of a moved
//!   directory): in place ([`edit_dir`]), so that removing a name never needs space either.
//!
//! `system.data` is kept first in the inode body: the kernel and e2fsck look for it only
//! there.

use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::fs::FsInner;
use crate::inode::InodeState;
use crate::ondisk::dirent;
use crate::ondisk::inode::{EXT4_EXTENTS_FL, EXT4_INLINE_DATA_FL};
use crate::ondisk::xattr as x;
use crate::tx::Tx;
use crate::types::Ino;

/// Bytes of `i_block` (`EXT4_MIN_INLINE_DATA_SIZE`).
const IBLOCK_BYTES: usize = 60;
/// The parent's inode number at the start of an inline directory (`EXT4_INLINE_DOTDOT_SIZE`).
const DOTDOT_BYTES: usize = 4;
/// The attribute holding the bytes past `i_block`.
pub(crate) const DATA_XATTR: &[u8] = b"system.data";

/// Whether the inode keeps its data inline.
pub(crate) fn is_inline(st: &InodeState) -> bool {
    st.d.flags & EXT4_INLINE_DATA_FL != 0
}

/// Refuse an inline inode on a file system without the feature, as the kernel's
/// `ext4_iget` does.
fn check_feature(fs: &FsInner, st: &InodeState) -> FsResult<()> {
    if !fs.geo.inline_data {
        return Err(FsError::Corrupt(format!(
            "inode {}: inline data flag (EXT4_INLINE_DATA_FL) without the inline_data feature",
            st.ino
        )));
    }
    Ok(())
}

/// The bytes past `i_block`: the value of `system.data` (empty when it has none).
fn tail(st: &InodeState) -> FsResult<Vec<u8>> {
    // In the inode body only, as the kernel looks for it (`ext4_xattr_ibody_find`): a damaged
    // external attribute block does not keep an inline file from being read.
    let list = x::parse_ibody_stored(st.d.xattr_area())?;
    Ok(list.into_iter().find(|a| a.name == DATA_XATTR).map(|a| a.value).unwrap_or_default())
}

/// Read up to `buf.len()` bytes at `off` of an inline file (`off` < `i_size`).
pub(crate) fn read(fs: &FsInner, st: &InodeState, off: u64, buf: &mut [u8]) -> FsResult<usize> {
    check_feature(fs, st)?;
    let size = st.d.size;
    let tail = if size > IBLOCK_BYTES as u64 { tail(st)? } else { Vec::new() };
    let have = (IBLOCK_BYTES + tail.len()) as u64;
    if size > have {
        return Err(FsError::Corrupt(format!(
            "inode {}: inline data of {have} bytes (i_block and system.data) for a size of {size}",
            st.ino
        )));
    }
    let (off, end) = (off as usize, size as usize);
    let n = buf.len().min(end.saturating_sub(off));
    // The stream's two pieces, copied in at most two runs.
    let head = &st.d.block[off.min(IBLOCK_BYTES)..end.min(IBLOCK_BYTES)];
    let k = head.len().min(n);
    buf[..k].copy_from_slice(&head[..k]);
    let from = off.max(IBLOCK_BYTES) - IBLOCK_BYTES;
    buf[k..n].copy_from_slice(&tail[from..from + (n - k)]);
    Ok(n)
}

/// One live record of an inline directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InlineEntry {
    /// The name.
    pub name: Vec<u8>,
    /// Its inode.
    pub ino: Ino,
    /// The record's file type byte.
    pub file_type: u8,
    /// Where the record starts in the directory's stream (the parent's 4 bytes, then
    /// `i_block`'s records, then `system.data`'s).
    pub start: u64,
    /// Where it ends.
    pub end: u64,
}

/// The parent and the live records of an inline directory, in stream order.
pub(crate) fn dir_entries(fs: &FsInner, st: &InodeState) -> FsResult<(Ino, Vec<InlineEntry>)> {
    check_feature(fs, st)?;
    let parent = u32::from_le_bytes([st.d.block[0], st.d.block[1], st.d.block[2], st.d.block[3]]);
    let tail = tail(st)?;
    let mut out = Vec::new();
    let regions = [(&st.d.block[DOTDOT_BYTES..IBLOCK_BYTES], DOTDOT_BYTES), (&tail[..], IBLOCK_BYTES)];
    for (region, base) in regions {
        for e in dirent::iter(region).with_max_inode(fs.geo.inodes_count) {
            let e = e.map_err(|e| match e {
                FsError::Corrupt(m) => {
                    FsError::Corrupt(format!("inline directory {} at byte {base}: {m}", st.ino))
                }
                other => other,
            })?;
            if e.is_live() {
                out.push(InlineEntry {
                    name: e.name.to_vec(),
                    ino: e.inode,
                    file_type: e.file_type,
                    start: (base + e.offset) as u64,
                    end: (base + e.offset + e.rec_len) as u64,
                });
            }
        }
    }
    if parent == 0 || parent > fs.geo.inodes_count {
        return Err(FsError::Corrupt(format!("inline directory {}: parent inode {parent}", st.ino)));
    }
    Ok((parent, out))
}

/// The in-body attributes with `system.data` set to `value` (first, where the kernel and
/// e2fsck look for it), or removed with `None`.
fn set_tail(st: &mut InodeState, value: Option<&[u8]>) -> FsResult<()> {
    let area = st.d.xattr_area();
    if area.is_empty() {
        // A 128-byte inode has no body for attributes: its inline data is `i_block` alone.
        return match value {
            Some(v) if !v.is_empty() => Err(FsError::Corrupt(format!(
                "inode {}: {} bytes of inline data past i_block in a 128-byte inode",
                st.ino,
                v.len()
            ))),
            _ => Ok(()),
        };
    }
    let mut list = other_attrs(area)?;
    if let Some(v) = value {
        list.insert(0, x::Stored { name: DATA_XATTR.to_vec(), value: v.to_vec(), ea: None });
    }
    let body = x::build_ibody_stored(&list, area.len())?;
    st.d.set_xattr_area(&body)
}

/// The in-body attributes of `area` other than `system.data`, as stored (a value in an EA
/// inode stays there).
fn other_attrs(area: &[u8]) -> FsResult<Vec<x::Stored>> {
    let mut list = x::parse_ibody_stored(area)?;
    list.retain(|a| a.name != DATA_XATTR);
    Ok(list)
}

/// Drop the inline data: no `system.data`, no inline flag, an empty extent tree.
fn clear(st: &mut InodeState) -> FsResult<()> {
    set_tail(st, None)?;
    st.d.flags &= !EXT4_INLINE_DATA_FL;
    st.d.flags |= EXT4_EXTENTS_FL;
    extent_tree::init_root(&mut st.d.block);
    Ok(())
}

/// Move inline file `st`'s bytes into a block of its own in `tx`, the inode becoming
/// extent-mapped (the kernel's `ext4_convert_inline_data`). The block goes out as the file's
/// data does: in the log with data journaling, else home before the commit (ordered). The
/// caller stores the inode. On failure (ENOSPC) `st` is unchanged.
pub(crate) fn file_to_extents(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    let mut data = vec![0u8; st.d.size as usize];
    if !data.is_empty() {
        read(tx.fs, st, 0, &mut data)?;
    }
    let saved = st.d.clone();
    let r = move_into_block(tx, ino, st, &data);
    if r.is_err() {
        st.d = saved;
    }
    r
}

/// [`file_to_extents`] once the bytes are read.
fn move_into_block(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState, data: &[u8]) -> FsResult<()> {
    clear(st)?;
    st.datasync_tx = tx.h.tx_id();
    if data.is_empty() {
        return Ok(());
    }
    let goal = crate::alloc::inode_goal(tx.fs, ino);
    let (pblk, _) = crate::alloc::alloc_blocks(tx, goal, 1)?;
    // One extent in an empty root: no tree block to allocate, so this cannot run short.
    let d = crate::file::insert_or_free(tx, st, Mapping { lblk: 0, pblk, len: 1, unwritten: false }, goal)?;
    crate::file::charge_blocks(tx.fs, st, 1 + i64::from(d.blocks_allocated))?;
    let buf = tx.fs.cache.get_new(pblk);
    // As `crate::file::write` places a fresh block.
    let jdata = crate::file::journals_data(tx.fs, st);
    crate::file::change_data_block(tx, st, buf, jdata, |b| b[..data.len()].copy_from_slice(data))?;
    Ok(())
}

/// Shrink inline file `st` to `new_size` (<= its size) in place, as the kernel's
/// `ext4_inline_data_truncate`: the bytes past it zeroed in `i_block`, `system.data` cut to
/// what lies past `i_block`. The caller sets the size and stores the inode.
pub(crate) fn shrink(st: &mut InodeState, new_size: u64) -> FsResult<()> {
    let n = new_size as usize;
    let tail = tail(st)?;
    let keep = n.saturating_sub(IBLOCK_BYTES).min(tail.len());
    set_tail(st, Some(&tail[..keep]))?;
    if n < IBLOCK_BYTES {
        st.d.block[n..].fill(0);
    }
    Ok(())
}

/// Apply `f` to the region of inline directory `st` that holds live entry `name` (the rest
/// of `i_block` or `system.data`) and keep the change. `f` returns `None` when the region
/// does not hold the name; so does this when neither does.
pub(crate) fn edit_dir<T>(
    st: &mut InodeState,
    mut f: impl FnMut(&mut [u8]) -> FsResult<Option<T>>,
) -> FsResult<Option<T>> {
    let mut head = st.d.block[DOTDOT_BYTES..IBLOCK_BYTES].to_vec();
    if let Some(r) = f(&mut head)? {
        st.d.block[DOTDOT_BYTES..IBLOCK_BYTES].copy_from_slice(&head);
        return Ok(Some(r));
    }
    let mut tail = tail(st)?;
    if let Some(r) = f(&mut tail)? {
        set_tail(st, Some(&tail))?;
        return Ok(Some(r));
    }
    Ok(None)
}

/// Add record (`ino`, `name`, `ftype`) to inline directory `st` in place, as the kernel's
/// `ext4_try_add_inline_entry`: in the rest of `i_block`, else in `system.data`; an empty
/// `system.data` first grows to all the room the inode body has (`ext4_update_inline_dir`,
/// the directory's size following). Returns whether it fitted; when not, `st` is unchanged
/// and the caller moves the directory into a block.
pub(crate) fn add_dir_entry(st: &mut InodeState, name: &[u8], ino: Ino, ftype: u8) -> FsResult<bool> {
    let mut head = st.d.block[DOTDOT_BYTES..IBLOCK_BYTES].to_vec();
    if let Some(off) = dirent::find_space(&head, name.len())? {
        dirent::insert(&mut head, off, ino, name, ftype)?;
        st.d.block[DOTDOT_BYTES..IBLOCK_BYTES].copy_from_slice(&head);
        return Ok(true);
    }
    let mut tail = tail(st)?;
    if tail.is_empty() {
        let room = tail_room(st)?;
        // As the kernel (`ext4_update_inline_dir`): not for the room of one minimal record or less.
        if room <= dirent::rec_len_for(1) {
            return Ok(false);
        }
        tail = vec![0; room];
        dirent::init_block(&mut tail, &[])?;
    }
    let Some(off) = dirent::find_space(&tail, name.len())? else {
        return Ok(false);
    };
    dirent::insert(&mut tail, off, ino, name, ftype)?;
    set_tail(st, Some(&tail))?;
    st.d.size = (IBLOCK_BYTES + tail.len()) as u64;
    Ok(true)
}

/// The largest `system.data` value the inode body holds beside its other attributes, in
/// whole 4-byte units (the kernel's `get_max_inline_xattr_value_size`).
fn tail_room(st: &InodeState) -> FsResult<usize> {
    let area = st.d.xattr_area();
    if area.is_empty() {
        return Ok(0);
    }
    let mut list = other_attrs(area)?;
    list.push(x::Stored { name: DATA_XATTR.to_vec(), value: Vec::new(), ea: None });
    Ok(area.len().saturating_sub(x::ibody_size_stored(&list)?) & !3)
}

/// Point the `..` of inline directory `st` at `parent` (it is the first four bytes).
pub(crate) fn set_parent(st: &mut InodeState, parent: Ino) {
    st.d.block[..DOTDOT_BYTES].copy_from_slice(&parent.to_le_bytes());
}

/// Turn inline directory `st` into an empty extent-mapped inode of size 0, returning its
/// parent, its entries and its records as they are stored (the stream past the parent:
/// the rest of `i_block`, then `system.data`), for the caller to write into a block
/// ([`crate::dir`]).
pub(crate) fn take_dir(fs: &FsInner, st: &mut InodeState) -> FsResult<(Ino, Vec<InlineEntry>, Vec<u8>)> {
    let (parent, ents) = dir_entries(fs, st)?;
    let mut records = st.d.block[DOTDOT_BYTES..IBLOCK_BYTES].to_vec();
    records.extend(tail(st)?);
    clear(st)?;
    st.d.size = 0;
    Ok((parent, ents, records))
}
