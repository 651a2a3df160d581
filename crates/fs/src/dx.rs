//! Keeping an htree (dir_index) directory indexed while it changes.
//!
//! A new name goes to the leaf its hash selects. A full leaf is split: its entries sorted
//! by hash, the upper half (by bytes) moved to a new block appended to the directory, and
//! a separator for the new block inserted into the parent index block right after the
//! entry that led to the leaf ([`htree::plan_leaf_split`] picks the split and sets the
//! collision bit when equal hashes straddle it). A full index block is split in two first
//! (its upper half of entries moved to a new node, the separator inserted one level up),
//! and a full root moves its entries to a new node and becomes that node's only parent,
//! one level deeper — up to two levels of nodes with `large_dir`, one without; past that
//! the directory is full (`ENOSPC`, as the kernel answers).
//!
//! A linear directory whose single block is full becomes indexed ([`make_indexed`]): its
//! entries move to a new block 1, block 0 becomes the root (keeping `.` and `..`), and
//! block 1 is split at once, giving a root and two leaves.
//!
//! Removal takes the entry out of its leaf and nothing else: leaves are never merged.
//!
//! The moved entries are removed from the old leaf in place; only when the new name then
//! fits in no gap is the old block packed. Indexed directories are read in hash order
//! ([`scan_leaves`], readdir cookies from the hash), so moving entries between blocks does
//! not disturb a readdir in progress.
//!
//! The algorithms work on a [`DxStore`]: the directory's blocks by logical number, changed
//! inside the caller's transaction and sealed (leaf checksum record or `dx_tail`) after
//! each change.

use crate::error::{FsError, FsResult};
use crate::ondisk::dirent::{self, TAIL_SIZE, rec_len_for};
use crate::ondisk::htree::{
    self, DX_ROOT_INFO_LEN, DxEntry, DxNode, DxRoot, node_limit_for, plan_leaf_split, root_limit_for,
};

/// What a directory block is (decides its checksum and which bytes hold entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockKind {
    /// Entries (a linear block or an htree leaf).
    Leaf,
    /// The htree root (block 0 of an indexed directory).
    DxRoot,
    /// An htree interior node.
    DxNode,
}

/// Write the checksum of a changed directory block of `kind` (with directory seed `seed`,
/// `None` without `metadata_csum`).
pub(crate) fn seal(seed: Option<u32>, kind: BlockKind, block: &mut [u8]) {
    if let Some(seed) = seed {
        match kind {
            BlockKind::Leaf => dirent::set_leaf_checksum(seed, block),
            BlockKind::DxRoot => htree::set_dx_checksum(seed, block, true),
            BlockKind::DxNode => htree::set_dx_checksum(seed, block, false),
        }
    }
}

/// A directory's blocks as the index code sees them.
pub(crate) trait DxStore {
    /// Bytes per block.
    fn block_size(&self) -> usize;
    /// Whether blocks carry checksums (a record at the end of leaves, a `dx_tail` in index
    /// blocks).
    fn csum(&self) -> bool;
    /// Blocks in the directory.
    fn nblocks(&self) -> u32;
    /// Call `f` with block `lblk`.
    fn read<R>(&mut self, lblk: u32, f: impl FnOnce(&[u8]) -> R) -> FsResult<R>;
    /// Change block `lblk` (a block of `kind`) with `f`, then seal it.
    fn modify<R>(
        &mut self,
        lblk: u32,
        kind: BlockKind,
        f: impl FnOnce(&mut [u8]) -> FsResult<R>,
    ) -> FsResult<R>;
    /// Append a zeroed block, fill it with `f` and seal it as `kind`; returns its number.
    fn append(&mut self, kind: BlockKind, f: impl FnOnce(&mut [u8]) -> FsResult<()>) -> FsResult<u32>;
    /// Mark the directory indexed (block 0 is a root from now on).
    fn set_indexed(&mut self);
}

/// How names hash and how deep the tree may grow.
pub(crate) struct DxCtx<'a> {
    /// The directory (for messages).
    pub dir_ino: u32,
    /// Hash of a name given the root's `hash_version` (low bit ignored).
    pub hash: &'a dyn Fn(u8, &[u8]) -> FsResult<u32>,
    /// Largest `indirect_levels` ([`htree::max_indirect_levels`]).
    pub max_levels: u8,
}

impl DxCtx<'_> {
    fn hash_of(&self, version: u8, name: &[u8]) -> FsResult<u32> {
        Ok((self.hash)(version, name)? & !1)
    }

    /// Corruption in block `lblk`, naming the directory and block.
    fn corrupt(&self, lblk: u32, what: impl std::fmt::Display) -> FsError {
        FsError::Corrupt(format!("directory inode {} block {lblk}: {what}", self.dir_ino))
    }

    /// Attach the directory and block to a decoding error.
    fn at(&self, lblk: u32, e: FsError) -> FsError {
        match e {
            FsError::Corrupt(msg) => self.corrupt(lblk, msg),
            e => e,
        }
    }
}

/// Where a new entry went, and which existing names a split moved.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Placed {
    /// Logical block now holding the new name.
    pub lblk: u32,
    /// Names moved to another block by a split, with their new block.
    pub moved: Vec<(Box<[u8]>, u32)>,
}

/// One index block on the path to a leaf.
#[derive(Debug, Clone)]
struct Frame {
    lblk: u32,
    entries: Vec<DxEntry>,
    limit: u16,
    /// Position of the entry followed.
    at: usize,
}

impl Frame {
    fn full(&self) -> bool {
        self.entries.len() >= usize::from(self.limit)
    }
}

/// The path from the root to the leaf for one hash.
#[derive(Debug)]
struct Probe {
    frames: Vec<Frame>,
    leaf: u32,
    /// The root's `hash_version`.
    version: u8,
    /// The root's `indirect_levels`.
    levels: u8,
}

/// Bytes of a leaf that hold entries.
fn leaf_end<S: DxStore>(s: &S) -> usize {
    s.block_size() - if s.csum() { TAIL_SIZE } else { 0 }
}

fn check_child<S: DxStore>(s: &S, ctx: &DxCtx<'_>, from: u32, child: u32) -> FsResult<u32> {
    if child == 0 || child >= s.nblocks() {
        return Err(ctx.corrupt(
            from,
            format!("htree index entry points to block {child} (the directory has {})", s.nblocks()),
        ));
    }
    Ok(child)
}

/// The root's hash version and depth.
fn read_root<S: DxStore>(s: &mut S, ctx: &DxCtx<'_>) -> FsResult<DxRoot> {
    let root = s.read(0, DxRoot::decode)?.map_err(|e| ctx.at(0, e))?;
    if root.indirect_levels > ctx.max_levels {
        return Err(ctx.corrupt(
            0,
            format!(
                "htree root: indirect_levels = {} (at most {} {} large_dir)",
                root.indirect_levels,
                ctx.max_levels,
                if ctx.max_levels > htree::MAX_INDIRECT_LEVELS { "with" } else { "without" }
            ),
        ));
    }
    Ok(root)
}

/// Walk from the root to the leaf for `hash` (low bit clear).
fn probe<S: DxStore>(s: &mut S, ctx: &DxCtx<'_>, root: DxRoot, hash: u32) -> FsResult<Probe> {
    let at = htree::search(&root.entries, hash);
    let mut next = check_child(s, ctx, 0, root.entries[at].block)?;
    let (version, levels) = (root.hash_version, root.indirect_levels);
    let mut frames = vec![Frame { lblk: 0, entries: root.entries, limit: root.limit, at }];
    for _ in 0..levels {
        let node = s.read(next, DxNode::decode)?.map_err(|e| ctx.at(next, e))?;
        let at = htree::search(&node.entries, hash);
        let child = check_child(s, ctx, next, node.entries[at].block)?;
        frames.push(Frame { lblk: next, entries: node.entries, limit: node.limit, at });
        next = child;
    }
    Ok(Probe { frames, leaf: next, version, levels })
}

/// Find `name` through the index: its leaf and inode (lookups use the in-memory name map;
/// this checks the on-disk index).
#[cfg(test)]
pub(crate) fn find<S: DxStore>(s: &mut S, ctx: &DxCtx<'_>, name: &[u8]) -> FsResult<Option<(u32, u32)>> {
    let root = read_root(s, ctx)?;
    let hash = ctx.hash_of(root.hash_version, name)?;
    let p = probe(s, ctx, root, hash)?;
    let end = leaf_end(s);
    let mut path = htree::DxPath {
        frames: p
            .frames
            .into_iter()
            .map(|f| htree::DxFrame { block: f.lblk, entries: f.entries, at: f.at })
            .collect(),
        leaf: p.leaf,
    };
    loop {
        let leaf = path.leaf;
        let hit = s.read(leaf, |b| dirent::find(&b[..end], name).map(|e| e.map(|e| e.inode)))?;
        if let Some(ino) = hit.map_err(|e| ctx.at(leaf, e))? {
            return Ok(Some((leaf, ino)));
        }
        let mut err = None;
        let next = path.next_leaf(hash, |l| match s.read(l, |b| b.to_vec()) {
            Ok(v) => Ok(v),
            Err(e) => {
                err = Some(l);
                Err(e)
            }
        });
        match next {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(None),
            Err(e) => return Err(ctx.at(err.unwrap_or(leaf), e)),
        }
    }
}

/// Visit the leaves in hash order from the first that may hold `hash` (low bit clear):
/// `visit(store, leaf, next)` gets each leaf and the lowest hash of the leaves after it
/// (`None` after the last one, the collision bit kept), and returns whether to go on.
/// Returns the root's hash version.
pub(crate) fn scan_leaves<S: DxStore>(
    s: &mut S,
    ctx: &DxCtx<'_>,
    hash: u32,
    mut visit: impl FnMut(&mut S, u8, u32, Option<u32>) -> FsResult<bool>,
) -> FsResult<()> {
    let root = read_root(s, ctx)?;
    let p = probe(s, ctx, root, hash)?;
    let version = p.version;
    let mut frames = p.frames;
    let mut leaf = p.leaf;
    // Guards against an index whose entries form a cycle.
    for _ in 0..=s.nblocks() {
        // the next position: the deepest frame with an entry after the one followed
        let next = (0..frames.len()).rev().find(|&l| frames[l].at + 1 < frames[l].entries.len());
        let next_hash = next.map(|l| frames[l].entries[frames[l].at + 1].hash);
        if !visit(s, version, leaf, next_hash)? {
            return Ok(());
        }
        let Some(level) = next else {
            return Ok(());
        };
        frames[level].at += 1;
        let mut child =
            check_child(s, ctx, frames[level].lblk, frames[level].entries[frames[level].at].block)?;
        for f in frames.iter_mut().skip(level + 1) {
            let node = s.read(child, DxNode::decode)?.map_err(|e| ctx.at(child, e))?;
            let grand = check_child(s, ctx, child, node.entries[0].block)?;
            *f = Frame { lblk: child, entries: node.entries, limit: node.limit, at: 0 };
            child = grand;
        }
        leaf = child;
    }
    Err(ctx.corrupt(0, "htree index visits more leaves than the directory has blocks"))
}

/// Insert `(hash, block)` into index block `f` right after the entry it followed.
fn insert_separator<S: DxStore>(
    s: &mut S,
    ctx: &DxCtx<'_>,
    f: &Frame,
    root: bool,
    hash: u32,
    block: u32,
) -> FsResult<()> {
    let pos = f.at + 1;
    let lblk = f.lblk;
    if root {
        s.modify(lblk, BlockKind::DxRoot, |b| {
            let mut r = DxRoot::decode(b).map_err(|e| ctx.at(lblk, e))?;
            r.entries.insert(pos.min(r.entries.len()), DxEntry { hash, block });
            r.encode_into(b);
            Ok(())
        })
    } else {
        s.modify(lblk, BlockKind::DxNode, |b| {
            let mut n = DxNode::decode(b).map_err(|e| ctx.at(lblk, e))?;
            n.entries.insert(pos.min(n.entries.len()), DxEntry { hash, block });
            n.encode_into(b);
            Ok(())
        })
    }
}

/// The root is full: move its entries to a new node under it (one level deeper).
fn add_level<S: DxStore>(s: &mut S, ctx: &DxCtx<'_>, root: &Frame) -> FsResult<()> {
    let node = DxNode { limit: node_limit_for(s.block_size(), s.csum()), entries: root.entries.clone() };
    let nb = s.append(BlockKind::DxNode, |b| {
        node.encode_into(b);
        Ok(())
    })?;
    s.modify(0, BlockKind::DxRoot, |b| {
        let mut r = DxRoot::decode(b).map_err(|e| ctx.at(0, e))?;
        r.entries = vec![DxEntry { hash: 0, block: nb }];
        r.indirect_levels += 1;
        r.encode_into(b);
        Ok(())
    })
}

/// Interior node `frames[k]` is full and its parent is not: move its upper half of
/// entries to a new node and add that node to the parent.
fn split_node<S: DxStore>(s: &mut S, ctx: &DxCtx<'_>, frames: &[Frame], k: usize) -> FsResult<()> {
    let f = &frames[k];
    let keep = f.entries.len() / 2;
    let sep = f.entries[keep].hash;
    let right =
        DxNode { limit: node_limit_for(s.block_size(), s.csum()), entries: f.entries[keep..].to_vec() };
    let nb = s.append(BlockKind::DxNode, |b| {
        right.encode_into(b);
        Ok(())
    })?;
    let lblk = f.lblk;
    s.modify(lblk, BlockKind::DxNode, |b| {
        let mut n = DxNode::decode(b).map_err(|e| ctx.at(lblk, e))?;
        n.entries.truncate(keep);
        n.encode_into(b);
        Ok(())
    })?;
    insert_separator(s, ctx, &frames[k - 1], k - 1 == 0, sep, nb)
}

/// A live entry of a leaf being split.
struct Live {
    hash: u32,
    name: Box<[u8]>,
    ino: u32,
    ftype: u8,
}

/// An entry as moved between blocks: inode, name, file type.
type Moved = (u32, Box<[u8]>, u8);

fn live_entries(block: &[u8]) -> FsResult<Vec<Moved>> {
    let mut v = Vec::new();
    for e in dirent::iter(block) {
        let e = e?;
        if e.is_live() {
            v.push((e.inode, Box::from(e.name), e.file_type));
        }
    }
    Ok(v)
}

/// Insert into leaf `lblk` if there is a gap for the name; `pack` first packs the block's
/// entries (its free space then is one gap). Returns whether it fit.
fn insert_into_leaf<S: DxStore>(
    s: &mut S,
    ctx: &DxCtx<'_>,
    lblk: u32,
    (name, ino, ftype): (&[u8], u32, u8),
    pack: bool,
) -> FsResult<bool> {
    let end = leaf_end(s);
    if !pack {
        let off =
            s.read(lblk, |b| dirent::find_space(&b[..end], name.len()))?.map_err(|e| ctx.at(lblk, e))?;
        let Some(off) = off else {
            return Ok(false);
        };
        s.modify(lblk, BlockKind::Leaf, |b| dirent::insert(&mut b[..end], off, ino, name, ftype))
            .map_err(|e| ctx.at(lblk, e))?;
        return Ok(true);
    }
    s.modify(lblk, BlockKind::Leaf, |b| {
        let live = live_entries(&b[..end])?;
        let refs: Vec<(u32, &[u8], u8)> = live.iter().map(|(i, n, t)| (*i, &n[..], *t)).collect();
        dirent::init_block(&mut b[..end], &refs)?;
        match dirent::find_space(&b[..end], name.len())? {
            Some(off) => dirent::insert(&mut b[..end], off, ino, name, ftype).map(|_| true),
            None => Ok(false),
        }
    })
    .map_err(|e| ctx.at(lblk, e))
}

/// Split the full leaf `p.leaf` and insert the new entry into the half its hash selects.
fn split_leaf<S: DxStore>(
    s: &mut S,
    ctx: &DxCtx<'_>,
    p: &Probe,
    hash: u32,
    new: (&[u8], u32, u8),
) -> FsResult<Placed> {
    let leaf = p.leaf;
    let end = leaf_end(s);
    let raw = s.read(leaf, |b| live_entries(&b[..end]))?.map_err(|e| ctx.at(leaf, e))?;
    let mut ents = Vec::with_capacity(raw.len());
    for (ino, name, ftype) in raw {
        ents.push(Live { hash: ctx.hash_of(p.version, &name)?, name, ino, ftype });
    }
    ents.sort_by_key(|e| e.hash);
    let sizes: Vec<(u32, usize)> = ents.iter().map(|e| (e.hash, rec_len_for(e.name.len()))).collect();
    let Some((split, sep)) = plan_leaf_split(&sizes, end) else {
        return Err(FsError::NoSpace(format!(
            "directory inode {} block {leaf}: full leaf with {} entries cannot be split",
            ctx.dir_ino,
            ents.len()
        )));
    };
    let moving = &ents[split..];
    let nb = s.append(BlockKind::Leaf, |b| {
        let refs: Vec<(u32, &[u8], u8)> = moving.iter().map(|e| (e.ino, &e.name[..], e.ftype)).collect();
        dirent::init_block(&mut b[..end], &refs)
    })?;
    s.modify(leaf, BlockKind::Leaf, |b| {
        for e in moving {
            if !dirent::remove(&mut b[..end], &e.name)? {
                return Err(ctx.corrupt(
                    leaf,
                    format!("entry {:?} vanished during a split", String::from_utf8_lossy(&e.name)),
                ));
            }
        }
        Ok(())
    })
    .map_err(|e| ctx.at(leaf, e))?;
    let d = p.frames.len() - 1;
    insert_separator(s, ctx, &p.frames[d], d == 0, sep, nb)?;
    let mut placed = Placed { lblk: leaf, moved: moving.iter().map(|e| (e.name.clone(), nb)).collect() };
    let target = if hash >= sep & !1 { nb } else { leaf };
    if !insert_into_leaf(s, ctx, target, new, false)? && !insert_into_leaf(s, ctx, target, new, true)? {
        return Err(FsError::NoSpace(format!(
            "directory inode {} block {target}: no room for a {}-byte name after a split",
            ctx.dir_ino,
            new.0.len()
        )));
    }
    placed.lblk = target;
    Ok(placed)
}

/// Add `name` -> `ino` to an indexed directory.
pub(crate) fn insert<S: DxStore>(
    s: &mut S,
    ctx: &DxCtx<'_>,
    name: &[u8],
    ino: u32,
    ftype: u8,
) -> FsResult<Placed> {
    let new = (name, ino, ftype);
    // Each pass either places the name or splits one index block (which ends in a
    // bounded number of passes: every split adds room on the path).
    for _ in 0..2 * (htree::MAX_INDIRECT_LEVELS_LARGE_DIR as usize + 2) {
        let root = read_root(s, ctx)?;
        let hash = ctx.hash_of(root.hash_version, name)?;
        let p = probe(s, ctx, root, hash)?;
        if insert_into_leaf(s, ctx, p.leaf, new, false)? {
            return Ok(Placed { lblk: p.leaf, moved: Vec::new() });
        }
        let d = p.frames.len() - 1;
        if !p.frames[d].full() {
            return split_leaf(s, ctx, &p, hash, new);
        }
        // Split the highest full index block on the path whose parent has room.
        let mut k = d;
        while k > 0 && p.frames[k - 1].full() {
            k -= 1;
        }
        if k > 0 {
            split_node(s, ctx, &p.frames, k)?;
        } else if p.levels < ctx.max_levels {
            add_level(s, ctx, &p.frames[0])?;
        } else {
            return Err(FsError::NoSpace(format!(
                "directory inode {}: htree index full at {} levels{}",
                ctx.dir_ino,
                p.levels + 1,
                if ctx.max_levels < htree::MAX_INDIRECT_LEVELS_LARGE_DIR {
                    " (large_dir is not enabled)"
                } else {
                    ""
                }
            )));
        }
    }
    Err(ctx.corrupt(0, "htree insertion did not converge"))
}

/// Turn a linear directory of one full block into an indexed one (hash `version`, as
/// stored in the root) and insert `name`: the entries move to a new block 1, block 0
/// becomes the root, block 1 is split.
pub(crate) fn make_indexed<S: DxStore>(
    s: &mut S,
    ctx: &DxCtx<'_>,
    version: u8,
    name: &[u8],
    ino: u32,
    ftype: u8,
) -> FsResult<Placed> {
    let end = leaf_end(s);
    let (dot, dotdot, ents) = s
        .read(0, |b| -> FsResult<_> {
            let mut it = dirent::iter(&b[..end]);
            let dot = it.next().transpose()?.filter(|e| e.is_live() && e.name == b".");
            let dotdot = it.next().transpose()?.filter(|e| e.is_live() && e.name == b"..");
            let (Some(dot), Some(dotdot)) = (dot, dotdot) else {
                return Err(FsError::Corrupt("first block does not start with '.' and '..'".into()));
            };
            let mut v = Vec::new();
            for e in it {
                let e = e?;
                if e.is_live() {
                    v.push((e.inode, Box::<[u8]>::from(e.name), e.file_type));
                }
            }
            Ok((dot.inode, dotdot.inode, v))
        })?
        .map_err(|e| ctx.at(0, e))?;
    let first = s.append(BlockKind::Leaf, |b| {
        let refs: Vec<(u32, &[u8], u8)> = ents.iter().map(|(i, n, t)| (*i, &n[..], *t)).collect();
        dirent::init_block(&mut b[..end], &refs)
    })?;
    let root = DxRoot {
        dot_inode: dot,
        dotdot_inode: dotdot,
        hash_version: version,
        info_length: DX_ROOT_INFO_LEN,
        indirect_levels: 0,
        unused_flags: 0,
        limit: root_limit_for(s.block_size(), s.csum()),
        entries: vec![DxEntry { hash: 0, block: first }],
    };
    s.modify(0, BlockKind::DxRoot, |b| {
        b.fill(0);
        root.encode_into(b);
        Ok(())
    })?;
    s.set_indexed();
    let mut moved: Vec<(Box<[u8]>, u32)> = ents.iter().map(|(_, n, _)| (n.clone(), first)).collect();
    let root = read_root(s, ctx)?;
    let hash = ctx.hash_of(version, name)?;
    let p = probe(s, ctx, root, hash)?;
    let placed = if ents.len() >= 2 {
        split_leaf(s, ctx, &p, hash, (name, ino, ftype))?
    } else {
        insert(s, ctx, name, ino, ftype)?
    };
    // Later moves win: the split's destination replaces block 1.
    moved.extend(placed.moved);
    Ok(Placed { lblk: placed.lblk, moved })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;
    use crate::ondisk::dirent::FT_DIR;
    use crate::ondisk::htree::{DX_HASH_HALF_MD4, DX_HASH_LEGACY, dirhash};

    /// A directory in memory.
    pub struct MemStore {
        pub bs: usize,
        pub seed: Option<u32>,
        pub blocks: Vec<Vec<u8>>,
        pub indexed: bool,
        /// Appends left before they fail with ENOSPC (`None`: unlimited).
        pub appends_left: Option<usize>,
    }

    impl MemStore {
        /// A new linear directory of one block (`.` = 12, `..` = 2).
        pub fn new(bs: usize, seed: Option<u32>) -> Self {
            let mut b = vec![0u8; bs];
            let end = bs - if seed.is_some() { TAIL_SIZE } else { 0 };
            dirent::init_block(&mut b[..end], &[(12, b".", FT_DIR), (2, b"..", FT_DIR)]).unwrap();
            seal(seed, BlockKind::Leaf, &mut b);
            MemStore { bs, seed, blocks: vec![b], indexed: false, appends_left: None }
        }
    }

    impl DxStore for MemStore {
        fn block_size(&self) -> usize {
            self.bs
        }
        fn csum(&self) -> bool {
            self.seed.is_some()
        }
        fn nblocks(&self) -> u32 {
            self.blocks.len() as u32
        }
        fn read<R>(&mut self, lblk: u32, f: impl FnOnce(&[u8]) -> R) -> FsResult<R> {
            Ok(f(&self.blocks[lblk as usize]))
        }
        fn modify<R>(
            &mut self,
            lblk: u32,
            kind: BlockKind,
            f: impl FnOnce(&mut [u8]) -> FsResult<R>,
        ) -> FsResult<R> {
            let b = &mut self.blocks[lblk as usize];
            let r = f(b);
            seal(self.seed, kind, b);
            r
        }
        fn append(&mut self, kind: BlockKind, f: impl FnOnce(&mut [u8]) -> FsResult<()>) -> FsResult<u32> {
            if let Some(n) = self.appends_left.as_mut() {
                if *n == 0 {
                    return Err(FsError::NoSpace("test: no blocks left".into()));
                }
                *n -= 1;
            }
            let mut b = vec![0u8; self.bs];
            f(&mut b)?;
            seal(self.seed, kind, &mut b);
            self.blocks.push(b);
            Ok(self.blocks.len() as u32 - 1)
        }
        fn set_indexed(&mut self) {
            self.indexed = true;
        }
    }

    /// Add a name the way the directory code does: the leaf its hash picks when indexed,
    /// else block 0, converting when it is full.
    pub fn add(s: &mut MemStore, ctx: &DxCtx<'_>, name: &[u8], ino: u32) -> FsResult<u32> {
        if s.indexed {
            return insert(s, ctx, name, ino, 1).map(|p| p.lblk);
        }
        if insert_into_leaf(s, ctx, 0, (name, ino, 1), false)? {
            return Ok(0);
        }
        make_indexed(s, ctx, DX_HASH_HALF_MD4, name, ino, 1).map(|p| p.lblk)
    }

    /// Remove a name (found through the index) from its leaf.
    pub fn remove(s: &mut MemStore, ctx: &DxCtx<'_>, name: &[u8]) -> bool {
        let Some((leaf, _)) = find(s, ctx, name).unwrap() else {
            return false;
        };
        let end = leaf_end(s);
        s.modify(leaf, BlockKind::Leaf, |b| dirent::remove(&mut b[..end], name)).unwrap()
    }

    /// Check the whole tree: depths, counts, limits, checksums, every block referenced
    /// once, every leaf's names within the hash range the index gives it (the upper bound
    /// inclusive only when the next separator has the collision bit). Returns the names.
    pub fn check_tree(s: &mut MemStore, ctx: &DxCtx<'_>) -> BTreeMap<Vec<u8>, u32> {
        let root = read_root(s, ctx).unwrap();
        let csum = s.csum();
        assert_eq!(root.limit, root_limit_for(s.bs, csum));
        if let Some(seed) = s.seed {
            assert!(htree::verify_dx_checksum(seed, &s.blocks[0], true).is_ok(), "root checksum");
        }
        let mut seen = BTreeSet::new();
        let mut names = BTreeMap::new();
        // (block, level, lo, hi, hi_inclusive)
        let mut stack = vec![(0u32, 0u8, 0u32, u32::MAX, true)];
        while let Some((blk, level, lo, hi, hi_incl)) = stack.pop() {
            assert!(seen.insert(blk), "block {blk} referenced twice");
            let b = s.blocks[blk as usize].clone();
            if level <= root.indirect_levels {
                let entries = if blk == 0 {
                    root.entries.clone()
                } else {
                    let n = DxNode::decode(&b).unwrap();
                    assert_eq!(n.limit, node_limit_for(s.bs, csum));
                    if let Some(seed) = s.seed {
                        assert!(htree::verify_dx_checksum(seed, &b, false).is_ok(), "node {blk} checksum");
                    }
                    n.entries
                };
                for i in 0..entries.len() {
                    let clo = if i == 0 { lo } else { entries[i].hash & !1 };
                    assert!(clo >= lo, "block {blk}: entry {i} below the range");
                    if i > 0 {
                        assert!(entries[i].hash & !1 >= entries[i - 1].hash & !1, "block {blk} out of order");
                    }
                    let (chi, cincl) = if i + 1 < entries.len() {
                        (entries[i + 1].hash & !1, entries[i + 1].hash & 1 == 1)
                    } else {
                        (hi, hi_incl)
                    };
                    stack.push((entries[i].block, level + 1, clo, chi, cincl));
                }
            } else {
                if let Some(seed) = s.seed {
                    assert!(dirent::verify_leaf_checksum(seed, &b).is_ok(), "leaf {blk} checksum");
                }
                let end = leaf_end(s);
                for e in dirent::iter(&b[..end]) {
                    let e = e.unwrap();
                    if !e.is_live() {
                        continue;
                    }
                    let h = ctx.hash_of(root.hash_version, e.name).unwrap();
                    assert!(
                        h >= lo,
                        "leaf {blk}: {:?} hash {h:#x} below {lo:#x}",
                        String::from_utf8_lossy(e.name)
                    );
                    assert!(
                        h < hi || (hi_incl && h == hi),
                        "leaf {blk}: {:?} hash {h:#x} above {hi:#x} (inclusive {hi_incl})",
                        String::from_utf8_lossy(e.name)
                    );
                    assert!(names.insert(e.name.to_vec(), blk).is_none(), "duplicate name");
                }
            }
        }
        assert_eq!(seen.len(), s.blocks.len(), "unreferenced blocks");
        names
    }

    /// Separators with the collision bit, over every index block.
    pub fn continuations(s: &MemStore) -> usize {
        let root = DxRoot::decode(&s.blocks[0]).unwrap();
        let mut n = root.entries.iter().skip(1).filter(|e| e.hash & 1 == 1).count();
        let mut level = root.entries.iter().map(|e| e.block).collect::<Vec<_>>();
        for _ in 0..root.indirect_levels {
            let mut next = Vec::new();
            for b in level {
                let node = DxNode::decode(&s.blocks[b as usize]).unwrap();
                n += node.entries.iter().skip(1).filter(|e| e.hash & 1 == 1).count();
                next.extend(node.entries.iter().map(|e| e.block));
            }
            level = next;
        }
        n
    }

    fn md4(v: u8, name: &[u8]) -> FsResult<u32> {
        dirhash(htree::effective_hash_version(v, 0), name, &[1, 2, 3, 4]).map(|h| h.0)
    }

    /// A hash with only 16 distinct values: long runs of collisions.
    fn coarse(_: u8, name: &[u8]) -> FsResult<u32> {
        Ok(md4(0, name)? & 0xf000_0000)
    }

    fn ctx<'a>(hash: &'a dyn Fn(u8, &[u8]) -> FsResult<u32>, max_levels: u8) -> DxCtx<'a> {
        DxCtx { dir_ino: 12, hash, max_levels }
    }

    #[test]
    fn grows_root_two_leaves_then_splits() {
        // 100-byte names: about 30 a leaf, so 20,000 need more leaves than a root holds
        let name = |i: u32| format!("file-{i:05}-{}", "p".repeat(89));
        for seed in [None, Some(0xdead_beef)] {
            let mut s = MemStore::new(4096, seed);
            let c = ctx(&md4, 1);
            let mut n = 0u32;
            while !s.indexed {
                add(&mut s, &c, name(n).as_bytes(), 100 + n).unwrap();
                n += 1;
            }
            // root + two leaves, as the kernel converts
            assert_eq!(s.blocks.len(), 3);
            let root = DxRoot::decode(&s.blocks[0]).unwrap();
            assert_eq!(root.entries.len(), 2);
            assert_eq!(root.hash_version, DX_HASH_HALF_MD4);
            assert_eq!(check_tree(&mut s, &c).len(), n as usize);
            for i in n..20_000 {
                add(&mut s, &c, name(i).as_bytes(), 100 + i).unwrap();
            }
            let names = check_tree(&mut s, &c);
            assert_eq!(names.len(), 20_000);
            let root = DxRoot::decode(&s.blocks[0]).unwrap();
            assert_eq!(root.indirect_levels, 1, "20,000 names need a level of nodes");
            for i in (0..20_000).step_by(7) {
                assert_eq!(find(&mut s, &c, name(i).as_bytes()).unwrap().map(|f| f.1), Some(100 + i));
            }
            for i in (0..20_000).step_by(3) {
                assert!(remove(&mut s, &c, name(i).as_bytes()));
            }
            assert_eq!(check_tree(&mut s, &c).len(), 20_000 - 6667);
        }
    }

    #[test]
    fn collisions_use_the_continuation_bit() {
        let mut s = MemStore::new(4096, Some(7));
        let c = ctx(&coarse, 1);
        for i in 0..3000u32 {
            add(&mut s, &c, format!("collide-{i}").as_bytes(), 100 + i).unwrap();
        }
        let names = check_tree(&mut s, &c);
        assert_eq!(names.len(), 3000);
        // 16 hash values over ~40 leaves: separators must carry the bit
        let cont = continuations(&s);
        assert!(cont > 10, "only {cont} continuation separators");
        for i in 0..3000u32 {
            let name = format!("collide-{i}");
            assert_eq!(find(&mut s, &c, name.as_bytes()).unwrap().map(|f| f.1), Some(100 + i), "{name}");
        }
    }

    #[test]
    fn legacy_hash_real_collisions() {
        // Brute-force names whose legacy hash collides (the legacy hash ignores the seed).
        // Ordered by hash so the insert order (and so where splits fall) is the same every run.
        let mut by_hash: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
        for i in 0..400_000u32 {
            let n = format!("{i:x}");
            let h = dirhash(DX_HASH_LEGACY, n.as_bytes(), &[0; 4]).unwrap().0;
            by_hash.entry(h).or_default().push(n);
        }
        let colliding: Vec<String> = by_hash.into_values().filter(|v| v.len() > 1).flatten().collect();
        assert!(colliding.len() >= 20, "{} colliding names", colliding.len());
        let legacy = |_: u8, n: &[u8]| dirhash(DX_HASH_LEGACY, n, &[0; 4]).map(|h| h.0);
        let c = ctx(&legacy, 1);
        let mut s = MemStore::new(1024, None);
        for (i, n) in colliding.iter().enumerate() {
            if s.indexed {
                insert(&mut s, &c, n.as_bytes(), 100 + i as u32, 1).unwrap();
            } else if !insert_into_leaf(&mut s, &c, 0, (n.as_bytes(), 100 + i as u32, 1), false).unwrap() {
                make_indexed(&mut s, &c, DX_HASH_LEGACY, n.as_bytes(), 100 + i as u32, 1).unwrap();
            }
        }
        assert_eq!(check_tree(&mut s, &c).len(), colliding.len());
        let cont = continuations(&s);
        assert!(cont > 0, "no split fell between colliding names ({} names)", colliding.len());
        for n in &colliding {
            assert!(find(&mut s, &c, n.as_bytes()).unwrap().is_some(), "{n}");
        }
    }

    #[test]
    fn full_without_large_dir_is_enospc_and_large_dir_goes_deeper() {
        // 1 KiB blocks and 250-byte names: 3 entries a leaf, 127 a node, 123 in the root
        let long = |i: u32| format!("{i:08}{}", "x".repeat(242));
        let c1 = ctx(&md4, 1);
        let mut s = MemStore::new(1024, None);
        let mut i = 0u32;
        let err = loop {
            match add(&mut s, &c1, long(i).as_bytes(), 100 + i) {
                Ok(_) => i += 1,
                Err(e) => break e,
            }
            assert!(i < 100_000);
        };
        assert!(matches!(err, FsError::NoSpace(ref m) if m.contains("large_dir")), "{err}");
        assert_eq!(check_tree(&mut s, &c1).len(), i as usize);
        // the same names with large_dir: a third level
        let c2 = ctx(&md4, 2);
        let mut s = MemStore::new(1024, Some(3));
        for j in 0..=i {
            add(&mut s, &c2, long(j).as_bytes(), 100 + j).unwrap();
        }
        assert_eq!(DxRoot::decode(&s.blocks[0]).unwrap().indirect_levels, 2);
        assert_eq!(check_tree(&mut s, &c2).len(), i as usize + 1);
        for j in (0..=i).step_by(11) {
            assert!(find(&mut s, &c2, long(j).as_bytes()).unwrap().is_some());
        }
        // deeper than allowed is corruption on read
        let e = find(&mut s, &c1, b"x").unwrap_err();
        assert!(e.to_string().contains("indirect_levels = 2"), "{e}");
    }

    #[test]
    fn running_out_of_blocks_mid_insert_leaves_a_valid_tree() {
        // 1 KiB blocks, long names: inserts often need a leaf split, a node split and a new
        // level in one go; let the n-th append of such an insert fail
        let long = |i: u32| format!("{i:08}{}", "z".repeat(200));
        let c = ctx(&md4, 2);
        for budget in 0..4 {
            let mut s = MemStore::new(1024, Some(5));
            let mut model = BTreeSet::new();
            let mut failures = 0;
            for i in 0..3000u32 {
                // every 7th insert gets only `budget` appends
                s.appends_left = (i % 7 == 0).then_some(budget);
                match add(&mut s, &c, long(i).as_bytes(), 100 + i) {
                    Ok(_) => {
                        model.insert(long(i).into_bytes());
                    }
                    Err(FsError::NoSpace(_)) => failures += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            // (a budget of 3 covers nearly every insert)
            assert!(budget > 1 || failures > 0, "budget {budget}: no insert failed");
            s.appends_left = None;
            let names = check_tree(&mut s, &c);
            assert_eq!(names.keys().cloned().collect::<BTreeSet<_>>(), model, "budget {budget}");
        }
    }

    #[test]
    fn corrupt_index_is_an_error_naming_the_block() {
        let mut s = MemStore::new(4096, None);
        let c = ctx(&md4, 1);
        for i in 0..400u32 {
            add(&mut s, &c, format!("f{i}").as_bytes(), 100 + i).unwrap();
        }
        // point a root entry past the end
        let mut r = DxRoot::decode(&s.blocks[0]).unwrap();
        let last = r.entries.len() - 1;
        r.entries[last].block = 999;
        r.encode_into(&mut s.blocks[0]);
        let mut err = None;
        for i in 0..400u32 {
            if let Err(e) = insert(&mut s, &c, format!("g{i}").as_bytes(), 1, 1) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("an insert through the bad entry");
        assert!(matches!(e, FsError::Corrupt(_)));
        assert!(e.to_string().contains("directory inode 12 block 0"), "{e}");
        assert!(e.to_string().contains("block 999"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn random_ops_match_a_model(
            ops in proptest::collection::vec((any::<bool>(), 0u32..3000, 1usize..60), 1..2500),
            coarse_hash in any::<bool>(),
            small in any::<bool>(),
            csum in any::<bool>(),
        ) {
            let hash: &dyn Fn(u8, &[u8]) -> FsResult<u32> = if coarse_hash { &coarse } else { &md4 };
            let c = ctx(hash, 2);
            let mut s = MemStore::new(if small { 1024 } else { 4096 }, csum.then_some(99));
            let mut model = BTreeSet::new();
            for (add_it, k, len) in ops {
                let name = format!("{k}-{}", "n".repeat(len)).into_bytes();
                if add_it && !model.contains(&name) {
                    add(&mut s, &c, &name, 100 + k).unwrap();
                    model.insert(name);
                } else if !add_it && s.indexed {
                    prop_assert_eq!(remove(&mut s, &c, &name), model.remove(&name));
                }
            }
            if s.indexed {
                let names = check_tree(&mut s, &c);
                prop_assert_eq!(names.keys().cloned().collect::<BTreeSet<_>>(), model.clone());
                for n in &model {
                    prop_assert!(find(&mut s, &c, n).unwrap().is_some());
                }
            }
        }
    }
}
