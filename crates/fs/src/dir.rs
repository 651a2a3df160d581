//! Directories: linear ext4 directory blocks on disk, an in-memory index per directory so
//! lookups and inserts in a 100,000-entry directory are not linear scans.
//!
//! Entries never move inside their block (insertion splits slack, removal merges into the
//! previous record), so a linear directory's readdir offset (`block << 12 | byte offset`)
//! stays valid across inserts and removals. A directory read in hash order (indexed, or a
//! single block that becomes indexed when it fills up, as the kernel reads them) has hash
//! cookies instead, which stay valid when a split moves entries to another block. An
//! htree (dir_index) directory keeps its index through every
//! change ([`crate::dx`]): a new name goes to the leaf its hash selects, a full leaf is
//! split (moving part of its entries to a new block at the end), and a linear directory
//! whose only block fills up becomes indexed, as the kernel does. Lookups use the
//! in-memory name map, built from every block on first use. On a file system without
//! `dir_index` an indexed directory's flag is cleared before its first change, which
//! leaves a valid linear directory.
//!
//! With `metadata_csum` each block is checked when it enters the cache: a leaf against its
//! checksum record, an index block (the root, block 0, and interior nodes, recognised as
//! the kernel does: a fake record of inode 0 covering the whole block) against its
//! `dx_tail`. Leaf entries then fill the block less its 12-byte checksum record, and every
//! block changed gets a fresh checksum ([`seal_leaf`], [`crate::dx::seal`]). Dropping the
//! index also turns its blocks into leaves (`.` and `..` in the root, an empty record in a
//! node), each with a checksum record: a linear reader of a checksummed directory expects
//! one in every block.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use crate::dx::{self, BlockKind, DxCtx, DxStore};
use crate::error::CsumStructure;
use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::fs::FsInner;
use crate::inode::InodeState;
use crate::meta::MetaStore;
use crate::ondisk::dirent::{self, FT_DIR, TAIL_SIZE, rec_len_for};
use crate::ondisk::features::INCOMPAT_LARGEDIR;
use crate::ondisk::htree::{self, DX_HASH_TEA};
use crate::ondisk::inode::{EXT4_CASEFOLD_FL, EXT4_INDEX_FL, EXT4_INLINE_DATA_FL};
use crate::ondisk::superblock::{get_u16, get_u32};
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
    /// A casefolded directory's names as stored, by name-map key, where the two differ
    /// (see [`name_key`]).
    pub stored: HashMap<Box<[u8]>, Box<[u8]>>,
}

/// Whether `st` is a casefolded directory: its names are matched and hashed casefolded
/// (`crate::casefold`), as the kernel does for `EXT4_CASEFOLD_FL`.
pub(crate) fn folds(fs: &FsInner, st: &InodeState) -> bool {
    fs.geo.casefold.is_some() && st.d.flags & EXT4_CASEFOLD_FL != 0
}

/// The key of `name` in a name map, and what is hashed for it: its casefolded form when
/// `fold` (its bytes when it cannot be folded, as the kernel falls back), else itself.
fn key_with(fold: bool, name: &[u8]) -> Cow<'_, [u8]> {
    match fold.then(|| crate::casefold::casefold(name)).flatten() {
        Some(k) => Cow::Owned(k),
        None => Cow::Borrowed(name),
    }
}

/// In a casefolded directory of a strict-encoding file system, only names that fold (valid
/// UTF-8) exist: any other is refused with EINVAL, for lookups too (the kernel's
/// `generic_ci_d_hash`).
pub(crate) fn check_foldable(fs: &FsInner, st: &InodeState, name: &[u8]) -> FsResult<()> {
    if fs.geo.casefold == Some(true) && folds(fs, st) && crate::casefold::casefold(name).is_none() {
        return Err(FsError::Invalid(format!(
            "name {:?} is not valid UTF-8 (strict casefold encoding)",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

/// The key of `name` in `st`'s name map ([`key_with`]).
pub(crate) fn name_key<'a>(fs: &FsInner, st: &InodeState, name: &'a [u8]) -> Cow<'a, [u8]> {
    key_with(folds(fs, st), name)
}

/// Record entry `name` (as stored) at `slot` in `st`'s name map.
fn map_insert(st: &mut InodeState, fold: bool, name: &[u8], slot: DirSlot) {
    let key = key_with(fold, name);
    if key.as_ref() != name
        && let Some(d) = st.dir.as_mut()
    {
        d.stored.insert(key.as_ref().into(), name.into());
    }
    if let Some(m) = st.names.0.write().as_mut() {
        m.insert(key.into_owned().into(), slot);
    }
}

/// The entry `name` matches in `st`, as stored (itself outside casefolded directories).
fn stored_name<'a>(st: &InodeState, fold: bool, name: &'a [u8]) -> Cow<'a, [u8]> {
    let key = key_with(fold, name);
    match st.dir.as_ref().and_then(|d| d.stored.get(key.as_ref())) {
        Some(n) => Cow::Owned(n.to_vec()),
        None => key,
    }
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
    check_len(name)
}

/// A name longer than ext4's 255 bytes: [`FsError::NameTooLong`] for a new entry and for a
/// lookup alike (`ext4_lookup`), never a missing entry.
pub(crate) fn check_len(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong(format!("{} bytes (at most {NAME_MAX})", name.len())));
    }
    Ok(())
}

/// Physical block of directory block `lblk`.
fn map_block<M: MetaStore + ?Sized>(st: &InodeState, store: &mut M, lblk: u32) -> FsResult<u64> {
    match crate::file::map_lookup(st, store, lblk)? {
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
    let bs = st.csum.block_size as u64;
    let n = st.d.size / bs;
    if !st.d.size.is_multiple_of(bs) || n == 0 || n > u64::from(u32::MAX) {
        return Err(FsError::Corrupt(format!(
            "directory size {} is not a whole number of blocks",
            st.d.size
        )));
    }
    Ok(n as u32)
}

fn block_kind(st: &InodeState, lblk: u32, block: &[u8]) -> BlockKind {
    if st.d.flags & EXT4_INDEX_FL == 0 {
        BlockKind::Leaf
    } else if lblk == 0 {
        BlockKind::DxRoot
    } else if get_u32(block, 0) == 0 && get_u16(block, 4) as usize == block.len() {
        BlockKind::DxNode
    } else {
        BlockKind::Leaf
    }
}

/// Bytes of a block of `kind` that hold entries: all but the checksum record of a leaf
/// with `metadata_csum`, else the whole block (an index block's records span it).
fn entries_end(st: &InodeState, kind: BlockKind) -> usize {
    let bs = st.csum.block_size;
    if st.csum.seed.is_some() && kind == BlockKind::Leaf { bs - TAIL_SIZE } else { bs }
}

/// Read directory block `lblk` (at `pblk`), checking its checksum the first time it is
/// cached. Returns the buffer and where its entries end.
pub(crate) fn read_dir_block(
    fs: &FsInner,
    st: &InodeState,
    lblk: u32,
    pblk: u64,
) -> FsResult<(Arc<cjfs_journal::Buffer>, usize)> {
    let buf = fs.cache.read(pblk)?;
    let kind = block_kind(st, lblk, &buf.read()[..]);
    if let Some(seed) = st.csum.seed
        && !buf.is_verified()
    {
        let r = {
            let data = buf.read();
            match kind {
                BlockKind::Leaf => dirent::verify_leaf_checksum(seed, &data[..]),
                BlockKind::DxRoot => htree::verify_dx_checksum(seed, &data[..], true),
                BlockKind::DxNode => htree::verify_dx_checksum(seed, &data[..], false),
            }
        };
        if let Err(bad) = r {
            let structure =
                if kind == BlockKind::Leaf { CsumStructure::DirBlock } else { CsumStructure::HtreeNode };
            let location = format!("at block {pblk} (logical {lblk}) of directory inode {}", st.ino);
            return Err(match bad {
                Some((stored, computed)) => FsError::checksum(structure, location, stored, computed),
                None => FsError::Checksum {
                    structure,
                    location,
                    detail: "no room for a checksum at the end of the block".into(),
                },
            });
        }
        buf.set_verified();
    }
    Ok((buf, entries_end(st, kind)))
}

/// Finish a changed leaf block: write its checksum record (with `metadata_csum`).
fn seal_leaf(st: &InodeState, buf: &cjfs_journal::Buffer) {
    seal_as(st, BlockKind::Leaf, buf);
}

/// Finish a changed block of `kind`: its checksum record or `dx_tail` (with
/// `metadata_csum`).
fn seal_as(st: &InodeState, kind: BlockKind, buf: &cjfs_journal::Buffer) {
    if st.csum.seed.is_some() {
        dx::seal(st.csum.seed, kind, &mut buf.write()[..]);
        buf.set_verified();
    }
}

/// What `add_entry` and friends need from the superblock, copied so its lock is not held
/// while blocks are allocated.
struct DirParams {
    block_size: usize,
    dir_index: bool,
    large_dir: bool,
    def_hash_version: u8,
    hash_seed: [u32; 4],
    sb_flags: u32,
}

impl DirParams {
    fn get(fs: &FsInner) -> Self {
        let sb = fs.sb.lock();
        DirParams {
            block_size: sb.block_size() as usize,
            dir_index: sb.has_dir_index(),
            large_dir: sb.has_incompat(INCOMPAT_LARGEDIR),
            def_hash_version: sb.def_hash_version,
            hash_seed: sb.hash_seed,
            sb_flags: sb.flags,
        }
    }

    /// Whether `st` is an htree directory whose index is kept up to date.
    fn indexed(&self, st: &InodeState) -> bool {
        self.dir_index && st.d.flags & EXT4_INDEX_FL != 0
    }

    /// The hash of a name in a directory whose root says `version` (`s_flags` decides
    /// signed or unsigned chars, `s_hash_seed` the seed).
    fn hash(&self, version: u8, name: &[u8]) -> FsResult<u32> {
        htree::dirhash(htree::effective_hash_version(version, self.sb_flags), name, &self.hash_seed)
            .map(|h| h.0)
    }
}

/// A directory's blocks inside a transaction, for the index code.
struct TxDirStore<'s, 'a> {
    tx: &'s mut Tx<'a>,
    dir_ino: Ino,
    st: &'s mut InodeState,
    block_size: usize,
}

impl TxDirStore<'_, '_> {
    fn set_free(&mut self, lblk: u32, free: u16) {
        if let Some(d) = self.st.dir.as_mut() {
            let i = lblk as usize;
            if d.free.len() <= i {
                d.free.resize(i + 1, 0);
            }
            d.free[i] = free;
        }
    }

    fn leaf_free(&self, buf: &cjfs_journal::Buffer) -> u16 {
        let end = self.block_size - if self.st.csum.seed.is_some() { TAIL_SIZE } else { 0 };
        block_max_free(&buf.read()[..end]).unwrap_or(0)
    }
}

impl DxStore for TxDirStore<'_, '_> {
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn csum(&self) -> bool {
        self.st.csum.seed.is_some()
    }
    fn nblocks(&self) -> u32 {
        (self.st.d.size / self.block_size as u64).min(u64::from(u32::MAX)) as u32
    }
    fn read<R>(&mut self, lblk: u32, f: impl FnOnce(&[u8]) -> R) -> FsResult<R> {
        let pblk = map_block(self.st, self.tx, lblk)?;
        let (buf, _) = read_dir_block(self.tx.fs, self.st, lblk, pblk)?;
        let data = buf.read();
        Ok(f(&data[..]))
    }
    fn modify<R>(
        &mut self,
        lblk: u32,
        kind: BlockKind,
        f: impl FnOnce(&mut [u8]) -> FsResult<R>,
    ) -> FsResult<R> {
        let pblk = map_block(self.st, self.tx, lblk)?;
        let (buf, _) = read_dir_block(self.tx.fs, self.st, lblk, pblk)?;
        self.tx.write_access(&buf)?;
        let r = f(&mut buf.write()[..]);
        // Sealed even on failure: the buffer is in the transaction either way.
        seal_as(self.st, kind, &buf);
        if kind == BlockKind::Leaf {
            let free = self.leaf_free(&buf);
            self.set_free(lblk, free);
        }
        r
    }
    fn append(&mut self, kind: BlockKind, f: impl FnOnce(&mut [u8]) -> FsResult<()>) -> FsResult<u32> {
        let (lblk, buf) = append_block(self.tx, self.dir_ino, self.st, self.block_size)?;
        let r = f(&mut buf.write()[..]);
        seal_as(self.st, kind, &buf);
        let free = if kind == BlockKind::Leaf { self.leaf_free(&buf) } else { 0 };
        self.set_free(lblk, free);
        r.map(|_| lblk)
    }
    fn set_indexed(&mut self) {
        self.st.d.flags |= EXT4_INDEX_FL;
    }
}

/// Map a new zeroed block at the end of the directory (size and block count updated).
fn append_block(
    tx: &mut Tx<'_>,
    dir_ino: Ino,
    st: &mut InodeState,
    block_size: usize,
) -> FsResult<(u32, Arc<cjfs_journal::Buffer>)> {
    let lblk = u32::try_from(st.d.size / block_size as u64).map_err(|_| {
        FsError::NoSpace(format!("directory inode {dir_ino} has the most blocks it can have"))
    })?;
    // Growing a block-mapped directory: its map becomes an extent tree first, in this
    // transaction (cjfs maps new blocks only with extents).
    if crate::block_map::is_block_mapped(st) {
        crate::block_map::to_extents(tx, st)?;
    }
    let goal = match extent_tree::extent_at_or_before(&st.d.block, tx, st.csum, lblk)? {
        Some(m) => m.pblk + u64::from(m.len),
        None => crate::alloc::inode_goal(tx.fs, dir_ino),
    };
    let (pblk, _) = crate::alloc::alloc_blocks(tx, goal, 1)?;
    let delta = crate::file::insert_or_free(tx, st, Mapping { lblk, pblk, len: 1, unwritten: false }, goal)?;
    let buf = tx.fs.cache.get_new(pblk);
    tx.h.get_create_access(&buf)?;
    st.d.size += block_size as u64;
    crate::file::charge_blocks(
        tx.fs,
        st,
        1 + i64::from(delta.blocks_allocated) - i64::from(delta.blocks_freed),
    )?;
    Ok((lblk, buf))
}

/// After an index change: record where names went, or, when it failed part way (a block
/// allocation failing after a split already grew the directory), store the directory inode
/// as the blocks in this transaction expect it and forget the in-memory index (rebuilt from
/// the blocks on next use).
fn finish_dx(
    tx: &mut Tx<'_>,
    dir_ino: Ino,
    st: &mut InodeState,
    name: &[u8],
    ino: Ino,
    ftype: u8,
    placed: FsResult<dx::Placed>,
) -> FsResult<()> {
    match placed {
        Ok(p) => {
            note_placed(tx.fs, st, name, ino, ftype, p);
            Ok(())
        }
        Err(e) => {
            crate::inode::store_inode(tx, dir_ino, st)?;
            st.drop_index();
            Err(e)
        }
    }
}

/// Record in the name map where a change put names.
fn note_placed(fs: &FsInner, st: &mut InodeState, name: &[u8], ino: Ino, ftype: u8, placed: dx::Placed) {
    let fold = folds(fs, st);
    if let Some(m) = st.names.0.write().as_mut() {
        for (n, lblk) in placed.moved {
            if let Some(s) = m.get_mut(key_with(fold, &n).as_ref()) {
                s.lblk = lblk;
            }
        }
    }
    map_insert(st, fold, name, DirSlot { ino, ftype, lblk: placed.lblk });
}

/// Build the directory's index if it is not built yet.
pub(crate) fn ensure_index(fs: &FsInner, st: &mut InodeState) -> FsResult<()> {
    if st.dir.is_some() {
        return Ok(());
    }
    if crate::inline_data::is_inline(st) {
        // No block has room to track: an addition finds its place in the inode.
        let (_, ents) = crate::inline_data::dir_entries(fs, st)?;
        st.set_index(DirIndex::default(), HashMap::new());
        let fold = folds(fs, st);
        for e in ents.into_iter().filter(|e| e.name != b"." && e.name != b"..") {
            let ftype = entry_ftype(fs, e.ino, e.file_type);
            map_insert(st, fold, &e.name, DirSlot { ino: e.ino, ftype, lblk: 0 });
        }
        return Ok(());
    }
    let nblocks = dir_blocks(st)?;
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let fold = folds(fs, st);
    let mut idx = DirIndex { free: Vec::with_capacity(nblocks as usize), ..DirIndex::default() };
    let mut names = HashMap::new();
    for lblk in 0..nblocks {
        let pblk = map_block(st, &mut store, lblk)?;
        let (buf, end) = read_dir_block(fs, st, lblk, pblk)?;
        let data = buf.read();
        let mut best = 0usize;
        for e in dirent::iter(&data[..end]).with_max_inode(fs.geo.inodes_count) {
            let e = e?;
            best = best.max(e.free_len());
            if e.is_live() && e.name != b"." && e.name != b".." {
                let ftype = entry_ftype(fs, e.inode, e.file_type);
                let key = key_with(fold, e.name);
                if key.as_ref() != e.name {
                    idx.stored.insert(key.as_ref().into(), e.name.into());
                }
                names.insert(key.into_owned().into(), DirSlot { ino: e.inode, ftype, lblk });
            }
        }
        idx.free.push(best as u16);
    }
    st.set_index(idx, names);
    Ok(())
}

/// The type byte a new entry gets on disk: 0 without the `filetype` feature (e2fsck clears
/// any other value there as corrupt).
fn disk_ftype(fs: &FsInner, ftype: u8) -> u8 {
    if fs.geo.filetype { ftype } else { 0 }
}

/// An entry's type: its own byte with the `filetype` feature, else from its inode's mode,
/// read without the inode's lock (callers hold directory locks and may hold a handle) and
/// 0 (unknown, as ext4's DT_UNKNOWN) when the inode cannot be read: one damaged child must
/// not make its whole directory unusable.
fn entry_ftype(fs: &FsInner, ino: Ino, byte: u8) -> u8 {
    if fs.geo.filetype {
        return byte;
    }
    fs.inodes.get(fs, ino).map(|n| n.ftype).unwrap_or(0)
}

/// Move inline directory `st`'s entries into a block of its own (`.` and `..` first), the
/// inode becoming extent-mapped, before an entry that does not fit inline is added (the
/// kernel's `ext4_convert_inline_dir`). Stored in `tx` at once, as [`drop_htree`] does: the
/// block is allocated in `tx` even if the addition then fails. On failure `st` is unchanged.
fn inline_to_block(tx: &mut Tx<'_>, dir_ino: Ino, st: &mut InodeState) -> FsResult<()> {
    let saved = st.d.clone();
    let r = inline_to_block_inner(tx, dir_ino, st);
    if r.is_err() {
        st.d = saved;
        // Rebuilt from the inline entries at the next use.
        st.drop_index();
    }
    r
}

fn inline_to_block_inner(tx: &mut Tx<'_>, dir_ino: Ino, st: &mut InodeState) -> FsResult<()> {
    let (parent, ents, records) = crate::inline_data::take_dir(tx.fs, st)?;
    let buf = crate::file::map_first_block(tx, st, dir_ino)?;
    let end = entries_end(st, BlockKind::Leaf);
    let ft = disk_ftype(tx.fs, FT_DIR);
    let at = INLINE_TO_BLOCK as usize + 4;
    {
        let mut w = buf.write();
        if at + records.len() <= end {
            // The records as they are, after `.` and `..`, the last one taking the rest of
            // the block (the kernel's `ext4_finish_convert_inline_dir`): every entry keeps
            // its readdir cookie ([`readdir_inline`]).
            w[..end].fill(0);
            dirent::init_block(&mut w[..at], &[(dir_ino, b".", ft), (parent, b"..", ft)])?;
            w[at..at + records.len()].copy_from_slice(&records);
            dirent::extend_last(&mut w[at..end])?;
        } else {
            let mut list: Vec<(Ino, &[u8], u8)> = vec![(dir_ino, b".", ft), (parent, b"..", ft)];
            list.extend(ents.iter().map(|e| (e.ino, &e.name[..], e.file_type)));
            dirent::init_block(&mut w[..end], &list)?;
        }
    }
    seal_leaf(st, &buf);
    st.d.size = st.csum.block_size as u64;
    let free = block_max_free(&buf.read()[..end])?;
    st.set_index(DirIndex { free: vec![free], ..DirIndex::default() }, HashMap::new());
    let fold = folds(tx.fs, st);
    for e in ents {
        let ftype = entry_ftype(tx.fs, e.ino, e.file_type);
        map_insert(st, fold, &e.name, DirSlot { ino: e.ino, ftype, lblk: 0 });
    }
    st.datasync_tx = tx.h.tx_id();
    crate::inode::store_inode(tx, dir_ino, st)
}

/// Look `name` up.
pub(crate) fn lookup(fs: &FsInner, st: &mut InodeState, name: &[u8]) -> FsResult<Option<DirSlot>> {
    check_len(name)?;
    ensure_index(fs, st)?;
    check_foldable(fs, st, name)?;
    let key = name_key(fs, st, name);
    Ok(st.names.0.read().as_ref().and_then(|m| m.get(key.as_ref()).copied()))
}

/// Clear the htree flag before the first change (leaves a valid linear directory). With
/// `metadata_csum` the index blocks become leaves with checksum records first.
fn drop_htree(tx: &mut Tx<'_>, st: &mut InodeState) -> FsResult<()> {
    if st.d.flags & EXT4_INDEX_FL == 0 {
        return Ok(());
    }
    if st.csum.seed.is_some() {
        for lblk in 0..dir_blocks(st)? {
            let pblk = map_block(st, tx, lblk)?;
            let (buf, _) = read_dir_block(tx.fs, st, lblk, pblk)?;
            let kind = block_kind(st, lblk, &buf.read()[..]);
            if kind == BlockKind::Leaf {
                continue;
            }
            tx.write_access(&buf)?;
            {
                let mut w = buf.write();
                let end = st.csum.block_size - TAIL_SIZE;
                if kind == BlockKind::DxRoot {
                    let (dot, dotdot) = (get_u32(&w[..], 0), get_u32(&w[..], 12));
                    let ft = disk_ftype(tx.fs, FT_DIR);
                    dirent::init_block(&mut w[..end], &[(dot, b".", ft), (dotdot, b"..", ft)])?;
                } else {
                    dirent::init_block(&mut w[..end], &[])?;
                }
            }
            let free = {
                let r = buf.read();
                block_max_free(&r[..st.csum.block_size - TAIL_SIZE])?
            };
            if let Some(d) = st.dir.as_mut()
                && let Some(f) = d.free.get_mut(lblk as usize)
            {
                *f = free;
            }
            seal_leaf(st, &buf);
        }
        // The blocks are leaves now: the inode must say so in this transaction even if the
        // change that called for it fails and the caller never stores the directory.
        st.d.flags &= !EXT4_INDEX_FL;
        crate::inode::store_inode(tx, st.ino, st)?;
    }
    st.d.flags &= !EXT4_INDEX_FL;
    Ok(())
}

/// Add `name` -> `ino`. The caller stores the directory inode afterwards (size, times,
/// flags may have changed).
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
    let params = DirParams::get(tx.fs);
    let on_disk = disk_ftype(tx.fs, ftype);
    let fold = folds(tx.fs, st);
    check_foldable(tx.fs, st, name)?;
    if st.names.0.read().as_ref().is_some_and(|m| m.contains_key(key_with(fold, name).as_ref())) {
        return Err(FsError::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    if crate::inline_data::is_inline(st) {
        let size = st.d.size;
        if crate::inline_data::add_dir_entry(st, name, ino, on_disk)? {
            if st.d.size != size {
                st.datasync_tx = tx.h.tx_id();
            }
            map_insert(st, fold, name, DirSlot { ino, ftype, lblk: 0 });
            return Ok(());
        }
        inline_to_block(tx, dir_ino, st)?;
    }
    if !params.dir_index {
        drop_htree(tx, st)?;
    }
    let hash = |v: u8, n: &[u8]| params.hash(v, &key_with(fold, n));
    let ctx = DxCtx { dir_ino, hash: &hash, max_levels: htree::max_indirect_levels(params.large_dir) };
    if params.indexed(st) {
        let placed = {
            let mut store = TxDirStore { tx, dir_ino, st, block_size: params.block_size };
            dx::insert(&mut store, &ctx, name, ino, on_disk)
        };
        return finish_dx(tx, dir_ino, st, name, ino, ftype, placed);
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
        let (buf, end) = read_dir_block(tx.fs, st, b as u32, pblk)?;
        let off = dirent::find_space(&buf.read()[..end], name.len())?;
        match off {
            Some(off) => {
                tx.write_access(&buf)?;
                let newfree = {
                    let mut w = buf.write();
                    dirent::insert(&mut w[..end], off, ino, name, on_disk)?;
                    block_max_free(&w[..end])?
                };
                seal_leaf(st, &buf);
                if let Some(d) = st.dir.as_mut() {
                    d.free[b] = newfree;
                }
                map_insert(st, fold, name, DirSlot { ino, ftype, lblk: b as u32 });
                return Ok(());
            }
            None => {
                let f = block_max_free(&buf.read()[..end])?;
                if let Some(d) = st.dir.as_mut() {
                    d.free[b] = f;
                }
            }
        }
    }
    // A single full block becomes an htree (root and two leaves), as the kernel does; a
    // hash version the kernel would not use (a corrupt s_def_hash_version) keeps it linear.
    if nblocks == 1 && params.dir_index && params.def_hash_version <= DX_HASH_TEA {
        let placed = {
            let mut store = TxDirStore { tx, dir_ino, st, block_size: params.block_size };
            dx::make_indexed(&mut store, &ctx, params.def_hash_version, name, ino, on_disk)
        };
        return finish_dx(tx, dir_ino, st, name, ino, ftype, placed);
    }
    if let Some(d) = st.dir.as_mut() {
        d.hint = nblocks.saturating_sub(1);
    }
    // No room: append a block.
    let (lblk, buf) = append_block(tx, dir_ino, st, params.block_size)?;
    let end = entries_end(st, BlockKind::Leaf);
    let newfree = {
        let mut w = buf.write();
        dirent::init_block(&mut w[..end], &[])?;
        dirent::insert(&mut w[..end], 0, ino, name, on_disk)?;
        block_max_free(&w[..end])?
    };
    seal_leaf(st, &buf);
    if let Some(d) = st.dir.as_mut() {
        d.free.push(newfree);
    }
    map_insert(st, fold, name, DirSlot { ino, ftype, lblk });
    Ok(())
}

/// Remove `name`; returns its slot.
pub(crate) fn remove_entry(tx: &mut Tx<'_>, st: &mut InodeState, name: &[u8]) -> FsResult<DirSlot> {
    ensure_index(tx.fs, st)?;
    let fold = folds(tx.fs, st);
    let key = key_with(fold, name).into_owned();
    let name = &stored_name(st, fold, name).into_owned()[..];
    if crate::inline_data::is_inline(st) {
        return remove_inline(tx, st, &key, name);
    }
    if !DirParams::get(tx.fs).dir_index {
        drop_htree(tx, st)?;
    }
    let slot = slot_of(st, &key)?;
    let pblk = map_block(st, tx, slot.lblk)?;
    let (buf, end) = read_dir_block(tx.fs, st, slot.lblk, pblk)?;
    tx.write_access(&buf)?;
    let newfree = {
        let mut w = buf.write();
        if !dirent::remove(&mut w[..end], name)? {
            return Err(FsError::Corrupt(format!(
                "directory index names {:?} but block {} does not hold it",
                String::from_utf8_lossy(name),
                slot.lblk
            )));
        }
        block_max_free(&w[..end])?
    };
    seal_leaf(st, &buf);
    forget(st, &key);
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
    let fold = folds(tx.fs, st);
    let key = key_with(fold, name).into_owned();
    let name = &stored_name(st, fold, name).into_owned()[..];
    if crate::inline_data::is_inline(st) {
        return set_inline(tx, st, (&key, name), ino, ftype);
    }
    if !DirParams::get(tx.fs).dir_index {
        drop_htree(tx, st)?;
    }
    let lblk = if name == b".." {
        0
    } else {
        st.names
            .0
            .read()
            .as_ref()
            .and_then(|m| m.get(&key[..]).map(|s| s.lblk))
            .ok_or_else(|| FsError::NotFound(String::from_utf8_lossy(name).into_owned()))?
    };
    let pblk = map_block(st, tx, lblk)?;
    let (buf, end) = read_dir_block(tx.fs, st, lblk, pblk)?;
    tx.write_access(&buf)?;
    let prev = dirent::set_inode(&mut buf.write()[..end], name, ino, disk_ftype(tx.fs, ftype))?;
    // `..` of an indexed directory lives in the htree root
    let kind = block_kind(st, lblk, &buf.read()[..]);
    seal_as(st, kind, &buf);
    if prev.is_none() {
        return Err(FsError::Corrupt(format!(
            "directory entry {:?} missing from its block",
            String::from_utf8_lossy(name)
        )));
    }
    if name != b".."
        && let Some(s) = st.names.0.write().as_mut().and_then(|m| m.get_mut(&key[..]))
    {
        s.ino = ino;
        s.ftype = ftype;
    }
    Ok(())
}

/// The index's slot of name-map key `key` (NotFound when the directory has no such entry).
fn slot_of(st: &InodeState, key: &[u8]) -> FsResult<DirSlot> {
    st.names
        .0
        .read()
        .as_ref()
        .and_then(|m| m.get(key).copied())
        .ok_or_else(|| FsError::NotFound(String::from_utf8_lossy(key).into_owned()))
}

/// Drop name-map key `key` (an entry removed).
fn forget(st: &mut InodeState, key: &[u8]) {
    if let Some(m) = st.names.0.write().as_mut() {
        m.remove(key);
    }
    if let Some(d) = st.dir.as_mut() {
        d.stored.remove(key);
    }
}

/// [`remove_entry`] in an inline directory: in place, needing no space (the kernel's
/// `ext4_delete_inline_entry`); the inode is stored in `tx`.
fn remove_inline(tx: &mut Tx<'_>, st: &mut InodeState, key: &[u8], name: &[u8]) -> FsResult<DirSlot> {
    let slot = slot_of(st, key)?;
    let found = crate::inline_data::edit_dir(st, |region| Ok(dirent::remove(region, name)?.then_some(())))?;
    if found.is_none() {
        return Err(FsError::Corrupt(format!(
            "inline directory {} does not hold {:?}, which its index names",
            st.ino,
            String::from_utf8_lossy(name)
        )));
    }
    forget(st, key);
    crate::inode::store_inode(tx, st.ino, st)?;
    Ok(slot)
}

/// [`set_entry`] in an inline directory: in place (`..` is the first four bytes of
/// `i_block`); the inode is stored in `tx`.
fn set_inline(
    tx: &mut Tx<'_>,
    st: &mut InodeState,
    (key, name): (&[u8], &[u8]),
    ino: Ino,
    ftype: u8,
) -> FsResult<()> {
    if name == b".." {
        crate::inline_data::set_parent(st, ino);
    } else {
        let on_disk = disk_ftype(tx.fs, ftype);
        let prev = crate::inline_data::edit_dir(st, |region| dirent::set_inode(region, name, ino, on_disk))?;
        if prev.is_none() {
            return Err(FsError::NotFound(String::from_utf8_lossy(name).into_owned()));
        }
        if let Some(s) = st.names.0.write().as_mut().and_then(|m| m.get_mut(key)) {
            s.ino = ino;
            s.ftype = ftype;
        }
    }
    crate::inode::store_inode(tx, st.ino, st)
}

/// Write the first block of a new directory (`.` and `..`) and map it.
pub(crate) fn init_dir(tx: &mut Tx<'_>, st: &mut InodeState, self_ino: Ino, parent: Ino) -> FsResult<()> {
    let buf = crate::file::map_first_block(tx, st, self_ino)?;
    let end = entries_end(st, BlockKind::Leaf);
    let ft = disk_ftype(tx.fs, FT_DIR);
    dirent::init_block(&mut buf.write()[..end], &[(self_ino, b".", ft), (parent, b"..", ft)])?;
    seal_leaf(st, &buf);
    st.d.size = st.csum.block_size as u64;
    let mut idx = DirIndex::default();
    idx.free.push(block_max_free(&buf.read()[..end])?);
    st.set_index(idx, HashMap::new());
    Ok(())
}

/// Read-only view of a directory's blocks for the index code (readdir).
struct ReadDirStore<'s> {
    fs: &'s FsInner,
    st: &'s InodeState,
    block_size: usize,
}

impl DxStore for ReadDirStore<'_> {
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn csum(&self) -> bool {
        self.st.csum.seed.is_some()
    }
    fn nblocks(&self) -> u32 {
        (self.st.d.size / self.block_size as u64).min(u64::from(u32::MAX)) as u32
    }
    fn read<R>(&mut self, lblk: u32, f: impl FnOnce(&[u8]) -> R) -> FsResult<R> {
        let mut store = ReadStore { cache: &self.fs.cache, limit: self.fs.geo.blocks_count };
        let pblk = map_block(self.st, &mut store, lblk)?;
        let (buf, _) = read_dir_block(self.fs, self.st, lblk, pblk)?;
        let data = buf.read();
        Ok(f(&data[..]))
    }
    fn modify<R>(&mut self, _: u32, _: BlockKind, _: impl FnOnce(&mut [u8]) -> FsResult<R>) -> FsResult<R> {
        Err(FsError::ReadOnly)
    }
    fn append(&mut self, _: BlockKind, _: impl FnOnce(&mut [u8]) -> FsResult<()>) -> FsResult<u32> {
        Err(FsError::ReadOnly)
    }
    fn set_indexed(&mut self) {}
}

/// readdir cookies of a directory read in hash order: `.` is 1, `..` 2, an entry
/// `HASH_COOKIE_BASE` + (major hash >> 1) << 32 | (minor hash >> 1).
const HASH_COOKIE_BASE: u64 = 3;

fn hash_cookie(major: u32, minor: u32) -> u64 {
    HASH_COOKIE_BASE + ((u64::from(major >> 1) << 32) | u64::from(minor >> 1))
}

fn cookie_major(cookie: u64) -> u32 {
    (cookie.saturating_sub(HASH_COOKIE_BASE) >> 32) as u32 * 2
}

/// The hash version to read `st` in hash order with, if it is read so: an indexed
/// directory (its root's version), or a single-block directory that would become indexed
/// when it grows (the default version). The kernel reads both in hash order too: cookies
/// then survive a conversion and a split, which moves entries between blocks but never
/// changes their hash.
fn hash_order_version(fs: &FsInner, st: &InodeState, params: &DirParams) -> FsResult<Option<u8>> {
    if !params.dir_index {
        return Ok(None);
    }
    if params.indexed(st) {
        let mut store = ReadDirStore { fs, st, block_size: params.block_size };
        let root = store.read(0, htree::DxRoot::decode)?.map_err(|e| match e {
            FsError::Corrupt(m) => FsError::Corrupt(format!("directory inode {} block 0: {m}", st.ino)),
            e => e,
        })?;
        return Ok(Some(root.hash_version));
    }
    let single = st.d.size == params.block_size as u64;
    Ok((single && params.def_hash_version <= DX_HASH_TEA).then_some(params.def_hash_version))
}

/// readdir of a directory read in hash order (see [`hash_order_version`]).
fn readdir_hashed(
    fs: &FsInner,
    st: &InodeState,
    params: &DirParams,
    version: u8,
    offset: u64,
    max: usize,
) -> FsResult<Vec<DirEntry>> {
    let mut store = ReadDirStore { fs, st, block_size: params.block_size };
    let max_ino = fs.geo.inodes_count;
    let fold = folds(fs, st);
    let mut out = Vec::new();
    if offset < 2 {
        let dots = store.read(0, |b| -> FsResult<Vec<(u32, Vec<u8>)>> {
            let mut v = Vec::new();
            for e in dirent::iter(b).with_max_inode(max_ino).take(2) {
                let e = e?;
                v.push((e.inode, e.name.to_vec()));
            }
            Ok(v)
        })??;
        for (i, (ino, name)) in dots.into_iter().enumerate() {
            if (i as u64) >= offset && (name == b"." || name == b"..") {
                out.push(DirEntry { name, ino, kind: FileType::Directory, next_offset: i as u64 + 1 });
            }
        }
    }
    if out.len() >= max {
        out.truncate(max);
        return Ok(out);
    }
    let from = offset.max(2);
    let want = max - out.len();
    let end = params.block_size - if st.csum.seed.is_some() { TAIL_SIZE } else { 0 };
    let mut cands: Vec<(u64, DirEntry)> = Vec::new();
    let take = |b: &[u8], is_root_block: bool, cands: &mut Vec<(u64, DirEntry)>| -> FsResult<()> {
        let end = if is_root_block && params.indexed(st) { b.len() } else { end.min(b.len()) };
        for e in dirent::iter(&b[..end]).with_max_inode(max_ino) {
            let e = e?;
            if !e.is_live() || e.name == b"." || e.name == b".." {
                continue;
            }
            let c = entry_hash_cookie(params, version, &key_with(fold, e.name))?;
            if c > from {
                let kind = FileType::from_dirent_code(e.file_type).unwrap_or(FileType::Regular);
                cands.push((c, DirEntry { name: e.name.to_vec(), ino: e.inode, kind, next_offset: c }));
            }
        }
        Ok(())
    };
    let by_cookie =
        |a: &(u64, DirEntry), b: &(u64, DirEntry)| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name));
    if params.indexed(st) {
        let hash = |v: u8, n: &[u8]| params.hash(v, &key_with(fold, n));
        let ctx =
            DxCtx { dir_ino: st.ino, hash: &hash, max_levels: htree::max_indirect_levels(params.large_dir) };
        dx::scan_leaves(&mut store, &ctx, cookie_major(from), |s, _, leaf, next| {
            s.read(leaf, |b| take(b, false, &mut cands))??;
            if cands.len() >= want {
                cands.sort_by(by_cookie);
                let m = cookie_major(cands[want - 1].0);
                // later leaves hold hashes from `next` on
                if next.is_none_or(|n| n & !1 > m) {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
    } else {
        store.read(0, |b| take(b, true, &mut cands))??;
    }
    take_by_cookie(&mut out, cands, want);
    Ok(out)
}

/// The hash-order readdir cookie of entry `name` in a directory hashed with `version`.
fn entry_hash_cookie(params: &DirParams, version: u8, name: &[u8]) -> FsResult<u64> {
    let (major, minor) =
        htree::dirhash(htree::effective_hash_version(version, params.sb_flags), name, &params.hash_seed)?;
    // The legacy hash has no minor part: a checksum of the name separates collisions.
    let minor = if version == htree::DX_HASH_LEGACY { crate::ondisk::csum::crc32c(0, name) } else { minor };
    Ok(hash_cookie(major, minor))
}

/// Append the `want` candidates of lowest cookie to `out`, in cookie order; entries sharing
/// a cookie go out together (a reader resuming from it skips them all).
fn take_by_cookie(out: &mut Vec<DirEntry>, mut cands: Vec<(u64, DirEntry)>, want: usize) {
    cands.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let mut n = want.min(cands.len());
    while n > 0 && n < cands.len() && cands[n].0 == cands[n - 1].0 {
        n += 1;
    }
    out.extend(cands.into_iter().take(n).map(|(_, e)| e));
}

/// How far an inline directory's records move when it goes into a block: the stream's
/// 4-byte parent becomes the 12-byte `.` and 12-byte `..` records (the kernel's
/// `extra_offset`). An inline record's linear cookie is where it would end in the block.
const INLINE_TO_BLOCK: u64 = 20;

/// [`readdir_on_disk`] of an inline directory, in the cookies the directory keeps once it
/// moves into a block: read in hash order when a single block would be (`dir_index`, as
/// the kernel's `is_dx_dir` holds for inline directories), else linear cookies as in the
/// block, `.` ending at 12, `..` at 24, each record [`INLINE_TO_BLOCK`] past its end in
/// the stream.
fn readdir_inline(fs: &FsInner, st: &InodeState, offset: u64, max: usize) -> FsResult<Vec<DirEntry>> {
    let (parent, ents) = crate::inline_data::dir_entries(fs, st)?;
    let params = DirParams::get(fs);
    let kind = |code: u8| FileType::from_dirent_code(code).unwrap_or(FileType::Regular);
    let hashed = params.dir_index && params.def_hash_version <= DX_HASH_TEA;
    let (dot_end, dotdot_end) = if hashed { (1, 2) } else { (12, 24) };
    let mut out: Vec<DirEntry> = [(&b"."[..], st.ino, dot_end), (&b".."[..], parent, dotdot_end)]
        .into_iter()
        .filter(|&(_, _, next)| next > offset)
        .map(|(name, ino, next)| DirEntry {
            name: name.to_vec(),
            ino,
            kind: FileType::Directory,
            next_offset: next,
        })
        .take(max)
        .collect();
    let want = max - out.len();
    if hashed {
        let from = offset.max(2);
        let mut cands = Vec::new();
        for e in ents {
            let c = entry_hash_cookie(&params, params.def_hash_version, &key_with(folds(fs, st), &e.name))?;
            if c > from {
                cands.push((
                    c,
                    DirEntry { kind: kind(e.file_type), name: e.name, ino: e.ino, next_offset: c },
                ));
            }
        }
        take_by_cookie(&mut out, cands, want);
        return Ok(out);
    }
    let rest = ents
        .into_iter()
        // A record that absorbed a removed one starts before the cookie: it was returned.
        .filter(|e| e.start + INLINE_TO_BLOCK >= offset && e.end + INLINE_TO_BLOCK > offset)
        .map(|e| DirEntry {
            kind: kind(e.file_type),
            name: e.name,
            ino: e.ino,
            next_offset: e.end + INLINE_TO_BLOCK,
        });
    out.extend(rest.take(want));
    Ok(out)
}

/// Entries from `offset` on (at most `max`). Offsets are stable cookies: hash-based for a
/// directory read in hash order (indexed, or a single block that may become indexed),
/// `block << 12 | byte offset` for a linear one.
pub(crate) fn readdir(fs: &FsInner, st: &InodeState, offset: u64, max: usize) -> FsResult<Vec<DirEntry>> {
    let mut out = readdir_on_disk(fs, st, offset, max)?;
    if !fs.geo.filetype {
        // The entries carry no type: each one's inode says (`.` and `..` are directories).
        for e in out.iter_mut() {
            e.kind = if e.name == b"." || e.name == b".." {
                FileType::Directory
            } else {
                FileType::from_dirent_code(entry_ftype(fs, e.ino, 0)).unwrap_or(FileType::Regular)
            };
        }
    }
    Ok(out)
}

fn readdir_on_disk(fs: &FsInner, st: &InodeState, offset: u64, max: usize) -> FsResult<Vec<DirEntry>> {
    if crate::inline_data::is_inline(st) {
        return readdir_inline(fs, st, offset, max);
    }
    let params = DirParams::get(fs);
    if let Some(version) = hash_order_version(fs, st, &params)? {
        return readdir_hashed(fs, st, &params, version, offset, max);
    }
    let nblocks = dir_blocks(st)?;
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let mut out = Vec::new();
    let bs = st.csum.block_size as u64;
    let mut lblk = (offset / bs) as u32;
    let mut from = (offset % bs) as usize;
    while lblk < nblocks && out.len() < max {
        let pblk = map_block(st, &mut store, lblk)?;
        let (buf, end) = read_dir_block(fs, st, lblk, pblk)?;
        let data = buf.read();
        for e in dirent::iter(&data[..end]).with_max_inode(fs.geo.inodes_count) {
            let e = e?;
            if e.offset + e.rec_len <= from || !e.is_live() {
                continue;
            }
            if e.offset < from {
                // The cookie points into a record that absorbed a removed one: its entry was
                // already returned.
                continue;
            }
            let next = u64::from(lblk) * bs + (e.offset + e.rec_len) as u64;
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
