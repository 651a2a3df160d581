//! Block-mapped inodes: ext2/ext3's indirect block maps, which ext4 still reads in inodes
//! without `EXT4_EXTENTS_FL` (a file system made as ext3 and later given the `extent`
//! feature keeps its old files, and usually its journal, block-mapped).
//!
//! `i_block` holds 15 little-endian 32-bit block numbers: twelve direct ones, then the
//! single-, double- and triple-indirect blocks, each a block of block numbers one level
//! down; 0 is a hole. Indirect blocks carry no checksum.
//!
//! cjfs reads such inodes (files, directories, slow symlinks, the journal) and frees them
//! when they are deleted, but maps new blocks only with extents: before the first change to
//! a block-mapped inode's mapping it is converted to an extent tree ([`to_extents`], what the
//! kernel's `EXT4_IOC_MIGRATE` — `chattr +e` — does), which needs the `extent` feature. A file
//! system without it (ext2, ext3) therefore opens read-only
//! ([`crate::ondisk::features::read_only_features`]).

use std::collections::HashSet;

use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::inode::InodeState;
use crate::meta::MetaStore;
use crate::ondisk::inode::{EXT4_EXTENTS_FL, EXT4_INLINE_DATA_FL, Inode as DiskInode};
use crate::tx::Tx;

/// Direct block slots in `i_block`.
const DIRECT: u64 = 12;

/// Block number `i` of a pointer array (`i_block` or an indirect block).
fn ptr(bytes: &[u8], i: usize) -> u64 {
    u64::from(u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes")))
}

fn slot(i_block: &[u8; extent_tree::ROOT_BYTES], i: usize) -> u64 {
    ptr(i_block, i)
}

fn check_ptr(blk: u64, limit: u64, what: &str) -> FsResult<()> {
    if blk >= limit {
        return Err(FsError::Corrupt(format!(
            "block-mapped inode: {what} points to block {blk}, outside the file system ({limit} blocks)"
        )));
    }
    Ok(())
}

/// The block numbers stored in indirect block `blk`.
fn pointers<M: MetaStore + ?Sized>(store: &mut M, blk: u64) -> FsResult<Vec<u64>> {
    let buf = store.read_block(blk)?;
    let data = buf.read();
    Ok((0..data.len() / 4).map(|i| ptr(&data, i)).collect())
}

/// Physical block of logical block `lblk`, with the run of physically contiguous blocks
/// that follows it inside the same pointer array (`None`: a hole).
pub fn lookup<M: MetaStore + ?Sized>(
    i_block: &[u8; extent_tree::ROOT_BYTES],
    store: &mut M,
    block_size: usize,
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    let per = (block_size / 4) as u64;
    let limit = store.block_limit();
    let mut l = u64::from(lblk);
    if l < DIRECT {
        return run_at(&i_block[..4 * DIRECT as usize], l as usize, lblk, limit);
    }
    l -= DIRECT;
    // Levels below the top pointer: 1, 2 or 3.
    let mut span = per;
    let mut level = 1u32;
    while l >= span {
        l -= span;
        level += 1;
        if level > 3 {
            return Ok(None);
        }
        span *= per;
    }
    let mut blk = slot(i_block, 11 + level as usize);
    for depth in (0..level).rev() {
        if blk == 0 {
            return Ok(None);
        }
        check_ptr(blk, limit, "an indirect pointer")?;
        let buf = store.read_block(blk)?;
        let data = buf.read();
        let unit = per.pow(depth);
        let idx = (l / unit) as usize;
        l %= unit;
        if depth == 0 {
            return run_at(&data, idx, lblk, limit);
        }
        blk = ptr(&data, idx);
    }
    unreachable!("the loop returns at depth 0")
}

/// The mapping of logical block `lblk`, whose pointer is entry `idx` of the pointer array
/// `bytes`: the run of physically contiguous entries from it (`None`: a hole).
fn run_at(bytes: &[u8], idx: usize, lblk: u32, limit: u64) -> FsResult<Option<Mapping>> {
    let first = ptr(bytes, idx);
    if first == 0 {
        return Ok(None);
    }
    check_ptr(first, limit, &format!("logical block {lblk}"))?;
    let n = bytes.len() / 4;
    let mut len = 1u32;
    while idx + (len as usize) < n
        && ptr(bytes, idx + len as usize) == first + u64::from(len)
        && first + u64::from(len) < limit
        && u64::from(lblk) + u64::from(len) <= u64::from(u32::MAX)
    {
        len += 1;
    }
    Ok(Some(Mapping { lblk, pblk: first, len, unwritten: false }))
}

/// What a block map owns: its data blocks as runs in logical order (physically
/// contiguous, merged across pointer blocks) and its indirect blocks.
#[derive(Debug, Default)]
pub struct Owned {
    /// Data runs, ascending logical blocks.
    pub runs: Vec<Mapping>,
    /// Indirect blocks (single, double, triple), each once.
    pub indirect: Vec<u64>,
}

/// Walk the whole map of `i_block`. Fails with [`FsError::Corrupt`] on a pointer outside the
/// file system or an indirect block reached twice (which would also make the walk unbounded).
pub fn owned<M: MetaStore + ?Sized>(
    i_block: &[u8; extent_tree::ROOT_BYTES],
    store: &mut M,
    block_size: usize,
) -> FsResult<Owned> {
    let per = (block_size / 4) as u64;
    let limit = store.block_limit();
    let mut out = Owned::default();
    let mut seen = HashSet::new();
    for i in 0..DIRECT as usize {
        add(&mut out.runs, i as u64, slot(i_block, i), limit)?;
    }
    let mut base = DIRECT;
    for level in 1..=3u32 {
        let top = slot(i_block, 11 + level as usize);
        if top != 0 {
            walk(store, top, level, base, per, limit, &mut seen, &mut out)?;
        }
        base += per.pow(level);
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn walk<M: MetaStore + ?Sized>(
    store: &mut M,
    blk: u64,
    level: u32,
    base: u64,
    per: u64,
    limit: u64,
    seen: &mut HashSet<u64>,
    out: &mut Owned,
) -> FsResult<()> {
    check_ptr(blk, limit, "an indirect pointer")?;
    if !seen.insert(blk) {
        return Err(FsError::Corrupt(format!("block-mapped inode: indirect block {blk} is reached twice")));
    }
    out.indirect.push(blk);
    let unit = per.pow(level - 1);
    for (i, p) in pointers(store, blk)?.into_iter().enumerate() {
        let l = base + i as u64 * unit;
        if p == 0 {
            continue;
        }
        if level == 1 {
            add(&mut out.runs, l, p, limit)?;
        } else {
            walk(store, p, level - 1, l, per, limit, seen, out)?;
        }
    }
    Ok(())
}

fn add(runs: &mut Vec<Mapping>, lblk: u64, pblk: u64, limit: u64) -> FsResult<()> {
    if pblk == 0 {
        return Ok(());
    }
    check_ptr(pblk, limit, &format!("logical block {lblk}"))?;
    let Ok(lblk) = u32::try_from(lblk) else {
        return Err(FsError::Corrupt(format!(
            "block-mapped inode: logical block {lblk} past the 2^32 limit"
        )));
    };
    if let Some(last) = runs.last_mut()
        && last.end() == u64::from(lblk)
        && last.pblk + u64::from(last.len) == pblk
        && last.len < Mapping::max_len(false)
    {
        last.len += 1;
        return Ok(());
    }
    runs.push(Mapping { lblk, pblk, len: 1, unwritten: false });
    Ok(())
}

/// Whether `st` is block-mapped with something mapped (not a fast symlink, a device or an
/// empty file: those hold no block map to convert or free).
pub(crate) fn is_block_mapped(st: &InodeState) -> bool {
    maps_blocks(&st.d)
}

/// [`is_block_mapped`] of an on-disk inode.
pub(crate) fn maps_blocks(d: &DiskInode) -> bool {
    let fast_symlink = d.is_symlink() && d.flags & EXT4_EXTENTS_FL == 0 && d.size < 60;
    (d.is_reg() || d.is_dir() || (d.is_symlink() && !fast_symlink))
        && d.flags & (EXT4_EXTENTS_FL | EXT4_INLINE_DATA_FL) == 0
        && d.block.iter().any(|&b| b != 0)
}

/// Convert block-mapped `st` to an extent tree in `tx` (the kernel's `ext4_ext_migrate`):
/// every data run goes into a new tree, the indirect blocks are freed (revoked), `i_blocks`
/// follows. The caller stores the inode. On failure (ENOSPC for a tree block) `st` is
/// unchanged; the tree blocks already allocated are given back.
pub(crate) fn to_extents(tx: &mut Tx<'_>, st: &mut InodeState) -> FsResult<()> {
    let bs = tx.fs.geo.block_size;
    let owned = owned(&st.d.block, tx, bs)?;
    let mut root = [0u8; extent_tree::ROOT_BYTES];
    extent_tree::init_root(&mut root);
    let mut grown = 0i64;
    for m in &owned.runs {
        match extent_tree::insert(&mut root, tx, st.csum, *m, m.pblk) {
            Ok(d) => grown += i64::from(d.blocks_allocated) - i64::from(d.blocks_freed),
            Err(e) => {
                for b in extent_tree::tree_blocks(&root, tx, st.csum).unwrap_or_default() {
                    tx.free_meta_block(b)?;
                }
                return Err(e);
            }
        }
    }
    for &b in &owned.indirect {
        tx.free_meta_block(b)?;
    }
    st.d.block = root;
    st.d.flags |= EXT4_EXTENTS_FL;
    crate::file::charge_blocks(tx.fs, st, grown - owned.indirect.len() as i64)?;
    Ok(())
}

/// Free every block of block-mapped `st` (its last link and user are gone): data runs
/// (revoked when `revoke`: journaled data) and indirect blocks (always revoked), then an
/// empty map.
pub(crate) fn free_all(tx: &mut Tx<'_>, st: &mut InodeState, revoke: bool) -> FsResult<()> {
    let owned = owned(&st.d.block, tx, tx.fs.geo.block_size)?;
    let mut n = 0i64;
    for m in &owned.runs {
        crate::alloc::free_blocks(tx, m.pblk, m.len, revoke)?;
        n += i64::from(m.len);
    }
    for &b in &owned.indirect {
        tx.free_meta_block(b)?;
    }
    st.d.block = [0; extent_tree::ROOT_BYTES];
    crate::file::charge_blocks(tx.fs, st, -n - owned.indirect.len() as i64)?;
    st.datasync_tx = tx.h.tx_id();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cjfs_blockdev::EmulatedSsd;
    use cjfs_journal::{Buffer, BufferCache};

    use super::*;

    /// Reads blocks of a RAM device; allocates nothing.
    struct Store {
        cache: BufferCache,
        limit: u64,
    }

    impl MetaStore for Store {
        fn read_block(&mut self, blk: u64) -> FsResult<Arc<Buffer>> {
            Ok(self.cache.read(blk)?)
        }
        fn write_access(&mut self, _: &Arc<Buffer>) -> FsResult<()> {
            unreachable!("read only")
        }
        fn new_block(&mut self, _: u64) -> FsResult<Arc<Buffer>> {
            unreachable!("read only")
        }
        fn free_meta_block(&mut self, _: u64) -> FsResult<()> {
            unreachable!("read only")
        }
        fn block_limit(&self) -> u64 {
            self.limit
        }
    }

    /// The RAM device's block size.
    const BS: usize = 4096;
    const PER: u32 = (BS / 4) as u32;

    fn store() -> Store {
        Store { cache: BufferCache::new(Arc::new(EmulatedSsd::ram(4096)), 256), limit: 4096 }
    }

    fn put_ptrs(s: &Store, blk: u64, ptrs: &[(usize, u32)]) {
        let b = s.cache.get_new(blk);
        let mut d = b.write();
        d.fill(0);
        for &(i, p) in ptrs {
            d[4 * i..4 * i + 4].copy_from_slice(&p.to_le_bytes());
        }
    }

    fn root(slots: &[(usize, u32)]) -> [u8; extent_tree::ROOT_BYTES] {
        let mut r = [0u8; extent_tree::ROOT_BYTES];
        for &(i, p) in slots {
            r[4 * i..4 * i + 4].copy_from_slice(&p.to_le_bytes());
        }
        r
    }

    /// Direct blocks 0..12 at 100.., a hole at 12, single-indirect entries 13..20 at 200..,
    /// one double-indirect entry: logical 12 + 2 × PER + 5 at block 900.
    fn sample(s: &Store) -> [u8; extent_tree::ROOT_BYTES] {
        let mut slots: Vec<(usize, u32)> = (0..12).map(|i| (i, 100 + i as u32)).collect();
        slots.push((12, 50));
        slots.push((13, 60));
        put_ptrs(s, 50, &(1..8).map(|i| (i, 200 + i as u32)).collect::<Vec<_>>());
        put_ptrs(s, 60, &[(1, 61)]);
        put_ptrs(s, 61, &[(5, 900)]);
        root(&slots)
    }

    #[test]
    fn lookup_follows_every_level_and_returns_contiguous_runs() {
        let mut s = store();
        let r = sample(&s);
        let m = lookup(&r, &mut s, BS, 3).unwrap().unwrap();
        assert_eq!((m.lblk, m.pblk, m.len), (3, 103, 9), "runs to the end of the direct slots");
        assert_eq!(lookup(&r, &mut s, BS, 12).unwrap(), None, "hole");
        let m = lookup(&r, &mut s, BS, 14).unwrap().unwrap();
        assert_eq!((m.pblk, m.len), (202, 6));
        assert_eq!(lookup(&r, &mut s, BS, 12 + 2 * PER + 5).unwrap().map(|m| m.pblk), Some(900));
        assert_eq!(lookup(&r, &mut s, BS, 12 + 2 * PER + 4).unwrap(), None);
        assert_eq!(
            lookup(&r, &mut s, BS, 12 + PER + PER * PER + 1).unwrap(),
            None,
            "no triple-indirect block"
        );
    }

    #[test]
    fn owned_lists_runs_and_indirect_blocks() {
        let mut s = store();
        let r = sample(&s);
        let o = owned(&r, &mut s, BS).unwrap();
        let runs: Vec<(u32, u64, u32)> = o.runs.iter().map(|m| (m.lblk, m.pblk, m.len)).collect();
        assert_eq!(runs, vec![(0, 100, 12), (13, 201, 7), (12 + 2 * PER + 5, 900, 1)]);
        assert_eq!(o.indirect, vec![50, 60, 61]);
    }

    #[test]
    fn damaged_maps_are_corrupt() {
        let mut s = store();
        let r = root(&[(0, 5000)]);
        assert!(matches!(owned(&r, &mut s, BS), Err(FsError::Corrupt(_))));
        assert!(matches!(lookup(&r, &mut s, BS, 0), Err(FsError::Corrupt(_))));
        // A double-indirect block listing the same single-indirect block twice.
        put_ptrs(&s, 70, &[(0, 71), (1, 71)]);
        put_ptrs(&s, 71, &[(0, 300)]);
        let r = root(&[(13, 70)]);
        match owned(&r, &mut s, BS) {
            Err(FsError::Corrupt(m)) => assert!(m.contains("reached twice"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
