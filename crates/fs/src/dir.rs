//! Directories: linear ext4 directory blocks on disk, an in-memory index per directory so
//! lookups and inserts in a 100,000-entry directory are not linear scans.
//!
//! Entries never move inside their block (insertion splits slack, removal merges into the
//! previous record), so a readdir offset (`block << 12 | byte offset`) stays valid across
//! inserts and removals. An htree (dir_index) directory is read as the linear directory it
//! also is; the first change clears its index flag, which leaves a valid linear directory.

use std::collections::HashMap;
use std::sync::Arc;

use cjfs_blockdev::BLOCK_SIZE;

use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::fs::FsInner;
use crate::inode::InodeState;
use crate::meta::MetaStore;
use crate::ondisk::dirent::{self, rec_len_for};
use crate::ondisk::inode::{EXT4_EXTENTS_FL, EXT4_INDEX_FL, EXT4_INLINE_DATA_FL};
use crate::tx::{ReadStore, Tx};
use crate::types::{DirEntry, FileType, Ino, NAME_MAX};

/// Where a name lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirSlot {
    /// Inode number.
    pub ino: Ino,
    /// ext4 file type code.
    pub ftype: u8,
    /// Logical block of the directory.
    pub lblk: u32,
}

/// In-memory index of one directory, less its names (in [`crate::inode::Names`]).
/// Protected by the directory's inode lock.
#[derive(Debug, Default)]
pub(crate) struct DirIndex {
    /// Per logical block: largest record a new entry could take (an upper bound).
    pub free: Vec<u16>,
    /// First block that may have room.
    pub hint: usize,
}

fn block_max_free(block: &[u8]) -> FsResult<u16> {
    let mut best = 0usize;
    for e in dirent::iter(block) {
        best = best.max(e?.free_len());
    }
    Ok(best as u16)
}

/// Check a name for a new entry.
pub(crate) fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Invalid(format!("bad file name {:?}", String::from_utf8_lossy(name))));
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong(String::from_utf8_lossy(name).into_owned()));
    }
    Ok(())
}

/// Physical block of directory block `lblk`.
fn map_block<M: MetaStore + ?Sized>(st: &InodeState, store: &mut M, lblk: u32) -> FsResult<u64> {
    match extent_tree::lookup(&st.d.block, store, lblk)? {
        Some(m) if !m.unwritten => m
            .pblk_of(lblk)
            .ok_or_else(|| FsError::Corrupt(format!("directory block {lblk} mapping is inconsistent"))),
        _ => Err(FsError::Corrupt(format!("directory has a hole at block {lblk}"))),
    }
}

fn dir_blocks(st: &InodeState) -> FsResult<u32> {
    if st.d.flags & EXT4_INLINE_DATA_FL != 0 {
        return Err(FsError::Incompatible("inline-data directory".into()));
    }
    if st.d.flags & EXT4_EXTENTS_FL == 0 {
        return Err(FsError::Incompatible("block-mapped directory (no extents flag)".into()));
    }
    let n = st.d.size / BLOCK_SIZE as u64;
    if !st.d.size.is_multiple_of(BLOCK_SIZE as u64) || n == 0 || n > u64::from(u32::MAX) {
        return Err(FsError::Corrupt(format!(
            "directory size {} is not a whole number of blocks",
            st.d.size
        )));
    }
    Ok(n as u32)
}

/// Build the directory's index if it is not built yet.
pub(crate) fn ensure_index(fs: &FsInner, st: &mut InodeState) -> FsResult<()> {
    if st.dir.is_some() {
        return Ok(());
    }
    let nblocks = dir_blocks(st)?;
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let mut idx = DirIndex { free: Vec::with_capacity(nblocks as usize), hint: 0 };
    let mut names = HashMap::new();
    for lblk in 0..nblocks {
        let pblk = map_block(st, &mut store, lblk)?;
        let buf = fs.cache.read(pblk)?;
        let data = buf.read();
        let mut best = 0usize;
        for e in dirent::iter(&data[..]).with_max_inode(fs.geo.inodes_count) {
            let e = e?;
            best = best.max(e.free_len());
            if e.is_live() && e.name != b"." && e.name != b".." {
                names.insert(e.name.into(), DirSlot { ino: e.inode, ftype: e.file_type, lblk });
            }
        }
        idx.free.push(best as u16);
    }
    st.set_index(idx, names);
    Ok(())
}

/// Look `name` up.
pub(crate) fn lookup(fs: &FsInner, st: &mut InodeState, name: &[u8]) -> FsResult<Option<DirSlot>> {
    ensure_index(fs, st)?;
    Ok(st.names.0.read().as_ref().and_then(|m| m.get(name).copied()))
}

/// Clear the htree flag before the first change (leaves a valid linear directory).
fn drop_htree(st: &mut InodeState) {
    if st.d.flags & EXT4_INDEX_FL != 0 {
        st.d.flags &= !EXT4_INDEX_FL;
    }
}

/// Add `name` -> `ino`. The caller stores the directory inode afterwards (size, times may
/// have changed).
pub(crate) fn add_entry(
    tx: &mut Tx<'_>,
    dir_ino: Ino,
    st: &mut InodeState,
    name: &[u8],
    ino: Ino,
    ftype: u8,
) -> FsResult<()> {
    check_name(name)?;
    ensure_index(tx.fs, st)?;
    drop_htree(st);
    if st.names.0.read().as_ref().is_some_and(|m| m.contains_key(name)) {
        return Err(FsError::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    let need = rec_len_for(name.len());
    let nblocks = st.dir.as_ref().map(|d| d.free.len()).unwrap_or(0);
    let start = st.dir.as_ref().map(|d| d.hint).unwrap_or(0);
    for b in start..nblocks {
        let fits = st.dir.as_ref().is_some_and(|d| usize::from(d.free[b]) >= need);
        if !fits {
            continue;
        }
        let pblk = map_block(st, tx, b as u32)?;
        let buf = tx.fs.cache.read(pblk)?;
        let off = dirent::find_space(&buf.read()[..], name.len())?;
        match off {
            Some(off) => {
                tx.write_access(&buf)?;
                let newfree = {
                    let mut w = buf.write();
                    dirent::insert(&mut w[..], off, ino, name, ftype)?;
                    block_max_free(&w[..])?
                };
                if let Some(d) = st.dir.as_mut() {
                    d.free[b] = newfree;
                }
                if let Some(m) = st.names.0.write().as_mut() {
                    m.insert(name.into(), DirSlot { ino, ftype, lblk: b as u32 });
                }
                return Ok(());
            }
            None => {
                let f = block_max_free(&buf.read()[..])?;
                if let Some(d) = st.dir.as_mut() {
                    d.free[b] = f;
                }
            }
        }
    }
    if let Some(d) = st.dir.as_mut() {
        d.hint = nblocks.saturating_sub(1);
    }
    // No room: append a block.
    let lblk = nblocks as u32;
    let goal = match extent_tree::extent_at_or_before(&st.d.block, tx, lblk)? {
        Some(m) => m.pblk + u64::from(m.len),
        None => crate::alloc::inode_goal(tx.fs, dir_ino),
    };
    let (pblk, _) = crate::alloc::alloc_blocks(tx, goal, 1)?;
    let delta = crate::file::insert_or_free(tx, st, Mapping { lblk, pblk, len: 1, unwritten: false }, goal)?;
    let buf = tx.fs.cache.get_new(pblk);
    tx.h.get_create_access(&buf)?;
    let newfree = {
        let mut w = buf.write();
        w.copy_from_slice(&dirent::make_empty_block()[..]);
        dirent::insert(&mut w[..], 0, ino, name, ftype)?;
        block_max_free(&w[..])?
    };
    st.d.size += BLOCK_SIZE as u64;
    crate::file::charge_blocks(
        tx.fs,
        st,
        1 + i64::from(delta.blocks_allocated) - i64::from(delta.blocks_freed),
    )?;
    if let Some(d) = st.dir.as_mut() {
        d.free.push(newfree);
    }
    if let Some(m) = st.names.0.write().as_mut() {
        m.insert(name.into(), DirSlot { ino, ftype, lblk });
    }
    Ok(())
}

/// Remove `name`; returns its slot.
pub(crate) fn remove_entry(tx: &mut Tx<'_>, st: &mut InodeState, name: &[u8]) -> FsResult<DirSlot> {
    ensure_index(tx.fs, st)?;
    drop_htree(st);
    let slot = st
        .names
        .0
        .read()
        .as_ref()
        .and_then(|m| m.get(name).copied())
        .ok_or_else(|| FsError::NotFound(String::from_utf8_lossy(name).into_owned()))?;
    let pblk = map_block(st, tx, slot.lblk)?;
    let buf = tx.fs.cache.read(pblk)?;
    tx.write_access(&buf)?;
    let newfree = {
        let mut w = buf.write();
        if !dirent::remove(&mut w[..], name)? {
            return Err(FsError::Corrupt(format!(
                "directory index names {:?} but block {} does not hold it",
                String::from_utf8_lossy(name),
                slot.lblk
            )));
        }
        block_max_free(&w[..])?
    };
    if let Some(m) = st.names.0.write().as_mut() {
        m.remove(name);
    }
    if let Some(d) = st.dir.as_mut() {
        d.free[slot.lblk as usize] = newfree;
        d.hint = d.hint.min(slot.lblk as usize);
    }
    Ok(slot)
}

/// Point existing entry `name` at `ino` (rename over a name, `..` of a moved directory).
pub(crate) fn set_entry(
    tx: &mut Tx<'_>,
    st: &mut InodeState,
    name: &[u8],
    ino: Ino,
    ftype: u8,
) -> FsResult<()> {
    ensure_index(tx.fs, st)?;
    drop_htree(st);
    let lblk = if name == b".." {
        0
    } else {
        st.names
            .0
            .read()
            .as_ref()
            .and_then(|m| m.get(name).map(|s| s.lblk))
            .ok_or_else(|| FsError::NotFound(String::from_utf8_lossy(name).into_owned()))?
    };
    let pblk = map_block(st, tx, lblk)?;
    let buf = tx.fs.cache.read(pblk)?;
    tx.write_access(&buf)?;
    let prev = dirent::set_inode(&mut buf.write()[..], name, ino, ftype)?;
    if prev.is_none() {
        return Err(FsError::Corrupt(format!(
            "directory entry {:?} missing from its block",
            String::from_utf8_lossy(name)
        )));
    }
    if name != b".."
        && let Some(s) = st.names.0.write().as_mut().and_then(|m| m.get_mut(name))
    {
        s.ino = ino;
        s.ftype = ftype;
    }
    Ok(())
}

/// Write the first block of a new directory (`.` and `..`) and map it.
pub(crate) fn init_dir(tx: &mut Tx<'_>, st: &mut InodeState, self_ino: Ino, parent: Ino) -> FsResult<()> {
    extent_tree::init_root(&mut st.d.block);
    st.d.flags |= EXT4_EXTENTS_FL;
    let goal = crate::alloc::inode_goal(tx.fs, self_ino);
    let (pblk, _) = crate::alloc::alloc_blocks(tx, goal, 1)?;
    extent_tree::insert(&mut st.d.block, tx, Mapping { lblk: 0, pblk, len: 1, unwritten: false }, goal)?;
    let buf = tx.fs.cache.get_new(pblk);
    tx.h.get_create_access(&buf)?;
    buf.write().copy_from_slice(&dirent::make_dot_block(self_ino, parent)[..]);
    st.d.size = BLOCK_SIZE as u64;
    crate::file::charge_blocks(tx.fs, st, 1)?;
    let mut idx = DirIndex::default();
    idx.free.push(block_max_free(&buf.read()[..])?);
    st.set_index(idx, HashMap::new());
    Ok(())
}

/// Entries from `offset` on (at most `max`). Offsets are stable cookies.
pub(crate) fn readdir(fs: &FsInner, st: &InodeState, offset: u64, max: usize) -> FsResult<Vec<DirEntry>> {
    let nblocks = dir_blocks(st)?;
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let mut out = Vec::new();
    let mut lblk = (offset / BLOCK_SIZE as u64) as u32;
    let mut from = (offset % BLOCK_SIZE as u64) as usize;
    while lblk < nblocks && out.len() < max {
        let pblk = map_block(st, &mut store, lblk)?;
        let buf: Arc<cjfs_journal::Buffer> = fs.cache.read(pblk)?;
        let data = buf.read();
        for e in dirent::iter(&data[..]).with_max_inode(fs.geo.inodes_count) {
            let e = e?;
            if e.offset + e.rec_len <= from || !e.is_live() {
                continue;
            }
            if e.offset < from {
                // The cookie points into a record that absorbed a removed one: its entry was
                // already returned.
                continue;
            }
            let next = u64::from(lblk) * BLOCK_SIZE as u64 + (e.offset + e.rec_len) as u64;
            out.push(DirEntry {
                name: e.name.to_vec(),
                ino: e.inode,
                kind: FileType::from_dirent_code(e.file_type).unwrap_or(FileType::Regular),
                next_offset: next,
            });
            if out.len() >= max {
                break;
            }
        }
        lblk += 1;
        from = 0;
    }
    Ok(out)
}
