//! ext4 extent trees (the block map of inodes with `EXT4_EXTENTS_FL`).
//!
//! The root node lives in the inode's 60-byte `i_block` (12-byte header + 4 entries); every
//! other node is a whole 4096-byte block (12-byte header + 340 entries, then with
//! `metadata_csum` the 4-byte checksum tail, see [`crate::ondisk::extent`]).
//! Leaves (depth 0) map runs of logical blocks to physical blocks; index nodes point to the
//! node one level down.
//!
//! Invariants kept by every operation and verified by [`check`] (they are what `e2fsck`
//! accepts):
//! - the entries of a node are sorted by logical block and extents never overlap;
//! - the key of every index entry is *exactly* the first logical block of its subtree
//!   (`e2fsck` reports "Logical start ... does not match logical start ... at next level"
//!   otherwise, for the first entry of a node too);
//! - no node except the root is ever empty; an empty tree is a depth-0 root with no entries;
//! - the children of a depth-`d` node have depth `d - 1`; the depth is at most 5;
//! - an extent maps 1..=32768 (written) or 1..=32767 (unwritten) blocks and ends at or below
//!   logical block 2^32 - 1 (the kernel's `EXT_MAX_BLOCKS`), so block `u32::MAX` is never
//!   mapped.
//!
//! Every mutating operation is atomic with respect to errors: node changes are staged on
//! private copies and applied to the buffers (after [`MetaStore::write_access`]) only when
//! the whole operation has succeeded; on failure (e.g. `ENOSPC` while splitting) the blocks
//! allocated so far are freed again and the tree is unchanged. Tree blocks come from
//! [`MetaStore::new_block`] and go back through [`MetaStore::free_meta_block`]; the caller
//! accounts them in `i_blocks` from the returned [`TreeDelta`], frees the *data* blocks
//! reported by [`remove_range`], and writes the inode back after any mutation (the root is
//! part of it).
//!
//! Every function takes the owning inode's [`InodeCsum`]: with a seed, each tree block is
//! checked against its checksum tail when first read into the cache and gets a fresh tail
//! whenever the operation writes it.
//!
//! Damaged trees (bad magic, too many entries, depth beyond 5 or inconsistent between
//! levels, a block referenced twice, ...) give [`FsError::Corrupt`] with a message starting
//! with "extent tree:", never a panic or an endless loop.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use cjfs_journal::Buffer;

use crate::error::{CsumStructure, FsError, FsResult};
use crate::meta::MetaStore;
use crate::ondisk::csum::InodeCsum;
use crate::ondisk::extent::{
    ENTRY_SIZE, Extent, ExtentIndex, MAX_DEPTH, MAX_INIT_LEN, MAX_UNWRITTEN_LEN, NodeHeader,
    ROOT_MAX_ENTRIES, entry_key, max_entries_for, read_extent, read_header, read_index, split_raw_len,
    write_extent, write_header, write_index,
};
use crate::ondisk::extent::{set_block_checksum, verify_block_checksum};

/// Size of the inode's `i_block` area holding the root node.
pub const ROOT_BYTES: usize = 60;
/// Exclusive upper bound of mappable logical blocks (`EXT_MAX_BLOCKS`).
pub const MAX_LBLK_END: u32 = u32::MAX;

// The on-disk format and its one codec (headers and entries, read and written in place) are
// `ondisk::extent`'s; this file walks and changes trees.
const HDR: usize = ENTRY_SIZE;
const ENT: usize = ENTRY_SIZE;
const PBLK_LIMIT: u64 = 1 << 48;

/// One extent: `len` logical blocks from `lblk` mapped to the physical blocks from `pblk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// First logical block.
    pub lblk: u32,
    /// First physical block.
    pub pblk: u64,
    /// Number of blocks (at least 1).
    pub len: u32,
    /// Allocated but not written: reads return zeros.
    pub unwritten: bool,
}

impl Mapping {
    /// One past the last logical block.
    pub fn end(&self) -> u64 {
        self.lblk as u64 + self.len as u64
    }

    /// Whether logical block `lblk` is inside this extent.
    pub fn contains(&self, lblk: u32) -> bool {
        lblk >= self.lblk && (lblk as u64) < self.end()
    }

    /// The physical block mapped to logical block `lblk`, if it is inside this extent.
    pub fn pblk_of(&self, lblk: u32) -> Option<u64> {
        self.contains(lblk).then(|| self.pblk + (lblk - self.lblk) as u64)
    }

    /// The longest extent of this kind (written or unwritten).
    pub fn max_len(unwritten: bool) -> u32 {
        if unwritten { MAX_UNWRITTEN_LEN } else { MAX_INIT_LEN }
    }
}

/// Tree blocks (non-root nodes) allocated and freed by one operation, for the caller's
/// `i_blocks` accounting (data blocks are not included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TreeDelta {
    /// Tree blocks allocated with [`MetaStore::new_block`].
    pub blocks_allocated: u32,
    /// Tree blocks freed with [`MetaStore::free_meta_block`].
    pub blocks_freed: u32,
}

// ---------------------------------------------------------------------------------------
// On-disk encoding (private helpers: pure byte-slice encode/decode).
// ---------------------------------------------------------------------------------------

/// Where a node lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loc {
    /// The inode's `i_block`.
    Root,
    /// A tree block.
    Blk(u64),
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loc::Root => write!(f, "root node"),
            Loc::Blk(b) => write!(f, "node at block {b}"),
        }
    }
}

fn corrupt(loc: Loc, msg: impl fmt::Display) -> FsError {
    FsError::Corrupt(format!("extent tree: {loc}: {msg}"))
}

/// Entry `i` of the node at `loc` must point inside the file system (`limit` blocks): a
/// data read or a free through a wild pointer would otherwise surface as a device error
/// far from its cause.
fn check_ptr(loc: Loc, i: usize, e: &Ent, leaf: bool, limit: u64) -> FsResult<()> {
    let len = if leaf { u64::from(e.mapping().len) } else { 1 };
    if e.ptr != 0 && e.ptr.checked_add(len).is_some_and(|end| end <= limit) {
        return Ok(());
    }
    let what = if leaf {
        format!("extent {i} (logical block {}, {len} blocks) maps physical block {}", e.key, e.ptr)
    } else {
        format!("index entry {i} (logical block {}) points to block {}", e.key, e.ptr)
    };
    Err(corrupt(loc, format!("{what}, outside the file system ({limit} blocks)")))
}

/// One decoded entry. Leaf: `ptr` = first physical block, `raw_len` = `ee_len`.
/// Index: `ptr` = child block, `raw_len` = 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ent {
    key: u32,
    raw_len: u16,
    ptr: u64,
}

impl Ent {
    fn leaf(m: &Mapping) -> Ent {
        let x = Extent { logical: m.lblk, len: m.len, unwritten: m.unwritten, start: m.pblk };
        Ent { key: m.lblk, raw_len: x.raw_len(), ptr: m.pblk }
    }

    fn index(key: u32, child: u64) -> Ent {
        Ent { key, raw_len: 0, ptr: child }
    }

    fn mapping(&self) -> Mapping {
        let (len, unwritten) = split_raw_len(self.raw_len);
        Mapping { lblk: self.key, pblk: self.ptr, len, unwritten }
    }
}

/// A decoded node.
#[derive(Debug, Clone)]
struct Node {
    depth: u16,
    max: u16,
    generation: u32,
    ents: Vec<Ent>,
}

impl Node {
    fn first_key(&self, loc: Loc) -> FsResult<u32> {
        self.ents.first().map(|e| e.key).ok_or_else(|| corrupt(loc, "empty node"))
    }
}

/// Entries a node area of `bytes` bytes can hold.
fn capacity(bytes: usize) -> usize {
    bytes.saturating_sub(HDR) / ENT
}

/// Parse and validate a node header; `b` is the whole node area (60 or 4096 bytes).
fn parse_header(b: &[u8], loc: Loc) -> FsResult<NodeHeader> {
    read_header(b).map_err(|msg| corrupt(loc, msg))
}

/// Check a node's depth against the one its parent implies.
fn check_depth(h: &NodeHeader, expect: Option<u16>, loc: Loc) -> FsResult<()> {
    match expect {
        Some(d) if d != h.depth => Err(corrupt(loc, format!("depth {} where {d} was expected", h.depth))),
        _ => Ok(()),
    }
}

fn ent_at(b: &[u8], i: usize, leaf: bool) -> Ent {
    if leaf {
        let x = read_extent(b, i);
        Ent { key: x.logical, raw_len: x.raw_len(), ptr: x.start }
    } else {
        let x = read_index(b, i);
        Ent { key: x.logical, raw_len: 0, ptr: x.leaf }
    }
}

fn put_ent(b: &mut [u8], i: usize, leaf: bool, e: &Ent) {
    if leaf {
        let m = e.mapping();
        write_extent(b, i, &Extent { logical: m.lblk, len: m.len, unwritten: m.unwritten, start: m.pblk });
    } else {
        write_index(b, i, &ExtentIndex { logical: e.key, leaf: e.ptr });
    }
}

/// Number of the first `n` entries whose key is `<= lblk` (entries are sorted).
fn count_le(b: &[u8], n: usize, lblk: u32) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if entry_key(b, mid) <= lblk {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn decode(b: &[u8], loc: Loc) -> FsResult<Node> {
    let h = parse_header(b, loc)?;
    let leaf = h.depth == 0;
    Ok(Node {
        depth: h.depth,
        max: h.max,
        generation: h.generation,
        ents: (0..h.entries as usize).map(|i| ent_at(b, i, leaf)).collect(),
    })
}

fn encode(node: &Node, b: &mut [u8], loc: Loc) -> FsResult<()> {
    let cap = capacity(b.len());
    if node.max as usize > cap || node.ents.len() > node.max as usize {
        return Err(corrupt(
            loc,
            format!("internal: {} entries do not fit (eh_max {}, capacity {cap})", node.ents.len(), node.max),
        ));
    }
    let h = NodeHeader {
        entries: node.ents.len() as u16,
        max: node.max,
        depth: node.depth,
        generation: node.generation,
    };
    write_header(b, &h);
    // A node's entry area is rewritten whole: no stale entry or `ei_unused` survives.
    b[HDR..HDR + cap * ENT].fill(0);
    let leaf = node.depth == 0;
    for (i, e) in node.ents.iter().enumerate() {
        put_ent(b, i, leaf, e);
    }
    Ok(())
}

fn validate_new(m: &Mapping) -> FsResult<()> {
    if m.len == 0 || m.len > Mapping::max_len(m.unwritten) {
        return Err(FsError::Invalid(format!(
            "extent tree: bad extent length {} (unwritten: {})",
            m.len, m.unwritten
        )));
    }
    if m.end() > MAX_LBLK_END as u64 {
        return Err(FsError::TooBig(format!(
            "extent tree: extent {}+{} beyond the last logical block",
            m.lblk, m.len
        )));
    }
    if m.pblk == 0 || m.pblk + m.len as u64 > PBLK_LIMIT {
        return Err(FsError::Invalid(format!("extent tree: bad physical block {} (+{})", m.pblk, m.len)));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Staged operation.
// ---------------------------------------------------------------------------------------

/// A private copy of a tree block being modified.
struct Staged {
    buf: Arc<Buffer>,
    data: Box<[u8]>,
    dirty: bool,
}

/// State of one operation: the root and modified blocks are private copies until
/// [`Tx::commit`].
struct Tx<'s, M: MetaStore + ?Sized> {
    store: &'s mut M,
    root: [u8; ROOT_BYTES],
    staged: BTreeMap<u64, Staged>,
    allocated: Vec<u64>,
    freed: Vec<u64>,
    /// Allocation goal for new tree blocks (0: none yet).
    goal: u64,
    /// `eh_max` of new non-root nodes (all a block holds outside tests).
    new_max: u16,
    /// The owning inode's checksum seed.
    ic: InodeCsum,
}

/// Parameters and results of a range removal.
struct Removal {
    start: u64,
    end: u64,
    runs: Vec<(u64, u32)>,
    seen: HashSet<u64>,
}

/// Result of inserting below a node: the node's (possibly new) first key, and the new right
/// sibling `(first key, block)` if the node was split.
type InsertUp = (u32, Option<(u32, u64)>);

enum Descend {
    Done(Option<Ent>),
    Down(u64, u16),
}

enum GtStep {
    Found(Option<Ent>),
    Children(u16, [Option<u64>; 2]),
}

impl<'s, M: MetaStore + ?Sized> Tx<'s, M> {
    fn new(store: &'s mut M, root: &[u8; ROOT_BYTES], goal: u64, new_max: u16, ic: InodeCsum) -> Self {
        Tx {
            store,
            root: *root,
            staged: BTreeMap::new(),
            allocated: Vec::new(),
            freed: Vec::new(),
            goal,
            new_max,
            ic,
        }
    }

    /// Read tree block `b`, checking its checksum tail the first time it is cached.
    fn read_node_block(&mut self, b: u64) -> FsResult<Arc<Buffer>> {
        let buf = self.store.read_block(b)?;
        if let Some(seed) = self.ic.seed
            && !buf.is_verified()
        {
            if let Err((stored, computed)) = verify_block_checksum(seed, &buf.read()[..]) {
                // A block without a valid header has no tail to find: report the header.
                parse_header(&buf.read()[..], Loc::Blk(b))?;
                return Err(FsError::checksum(
                    CsumStructure::ExtentBlock,
                    format!("at block {b} of inode {}", self.ic.ino),
                    stored,
                    computed,
                ));
            }
            buf.set_verified();
        }
        Ok(buf)
    }

    /// Run `f` on the bytes of a node (staged copy if any, else the buffer).
    fn with_bytes<R>(&mut self, loc: Loc, f: impl FnOnce(&[u8]) -> R) -> FsResult<R> {
        match loc {
            Loc::Root => Ok(f(&self.root[..])),
            Loc::Blk(b) => {
                if let Some(s) = self.staged.get(&b) {
                    return Ok(f(&s.data[..]));
                }
                if b == 0 || b >= PBLK_LIMIT {
                    return Err(corrupt(loc, "node pointer out of range"));
                }
                let buf = self.read_node_block(b)?;
                let g = buf.read();
                let r = f(&g[..]);
                Ok(r)
            }
        }
    }

    /// Decode and validate a node. `expect` is the depth its parent implies.
    fn load(&mut self, loc: Loc, expect: Option<u16>) -> FsResult<Node> {
        let node = self.with_bytes(loc, |b| decode(b, loc))??;
        if let Some(d) = expect
            && node.depth != d
        {
            return Err(corrupt(loc, format!("depth {} where {d} was expected", node.depth)));
        }
        if node.ents.is_empty() && (loc != Loc::Root || node.depth > 0) {
            return Err(corrupt(loc, "empty non-root or index node"));
        }
        let limit = self.store.block_limit();
        for (i, e) in node.ents.iter().enumerate() {
            check_ptr(loc, i, e, node.depth == 0, limit)?;
        }
        Ok(node)
    }

    fn stage(&mut self, b: u64) -> FsResult<&mut Staged> {
        if !self.staged.contains_key(&b) {
            if b == 0 || b >= PBLK_LIMIT {
                return Err(corrupt(Loc::Blk(b), "node pointer out of range"));
            }
            let buf = self.read_node_block(b)?;
            let data: Box<[u8]> = Box::from(&buf.read()[..]);
            self.staged.insert(b, Staged { buf, data, dirty: false });
        }
        self.staged.get_mut(&b).ok_or_else(|| corrupt(Loc::Blk(b), "staged block vanished"))
    }

    fn save(&mut self, loc: Loc, node: &Node) -> FsResult<()> {
        match loc {
            Loc::Root => encode(node, &mut self.root[..], loc),
            Loc::Blk(b) => {
                let s = self.stage(b)?;
                encode(node, &mut s.data[..], loc)?;
                s.dirty = true;
                Ok(())
            }
        }
    }

    /// Allocate a tree block (zeroed, staged as dirty).
    fn alloc(&mut self) -> FsResult<u64> {
        let buf = self.store.new_block(self.goal)?;
        let b = buf.blocknr();
        if b == 0 || b >= PBLK_LIMIT || self.staged.contains_key(&b) {
            return Err(FsError::Corrupt(format!(
                "extent tree: allocator returned block {b}, which is invalid or in use"
            )));
        }
        self.allocated.push(b);
        self.staged
            .insert(b, Staged { buf, data: vec![0u8; self.ic.block_size].into_boxed_slice(), dirty: true });
        Ok(b)
    }

    /// Free a tree block at commit.
    fn free(&mut self, b: u64) -> FsResult<()> {
        if self.freed.contains(&b) {
            return Err(corrupt(Loc::Blk(b), "block referenced twice"));
        }
        self.freed.push(b);
        Ok(())
    }

    /// Apply the staged changes: write access, copy into the buffers, update the root,
    /// free the released blocks.
    fn commit(self, root_out: &mut [u8; ROOT_BYTES]) -> FsResult<TreeDelta> {
        let Tx { store, root, mut staged, allocated, freed, ic, .. } = self;
        let freed_set: HashSet<u64> = freed.iter().copied().collect();
        let new_set: HashSet<u64> = allocated.iter().copied().collect();
        for (b, s) in &staged {
            if s.dirty
                && !new_set.contains(b)
                && !freed_set.contains(b)
                && let Err(e) = store.write_access(&s.buf)
            {
                for &nb in &allocated {
                    let _ = store.free_meta_block(nb);
                }
                return Err(e);
            }
        }
        for (b, s) in staged.iter_mut() {
            if s.dirty && !freed_set.contains(b) {
                if let Some(seed) = ic.seed {
                    set_block_checksum(seed, &mut s.data[..]);
                }
                s.buf.write()[..].copy_from_slice(&s.data[..]);
                if ic.seed.is_some() {
                    s.buf.set_verified();
                }
            }
        }
        *root_out = root;
        for &b in &freed {
            store.free_meta_block(b)?;
        }
        Ok(TreeDelta { blocks_allocated: allocated.len() as u32, blocks_freed: freed.len() as u32 })
    }

    /// Drop the staged changes and free the blocks allocated so far.
    fn abort(self) {
        for &b in &self.allocated {
            let _ = self.store.free_meta_block(b);
        }
    }

    // --- searches ------------------------------------------------------------------

    /// The extent with the greatest start `<= lblk`.
    fn find_le(&mut self, lblk: u32) -> FsResult<Option<Ent>> {
        let mut loc = Loc::Root;
        let mut expect = None;
        let limit = self.store.block_limit();
        loop {
            let step = self.with_bytes(loc, |b| -> FsResult<Descend> {
                let h = parse_header(b, loc)?;
                check_depth(&h, expect, loc)?;
                let c = count_le(b, h.entries as usize, lblk);
                if c == 0 {
                    return Ok(Descend::Done(None));
                }
                if h.depth == 0 {
                    let e = ent_at(b, c - 1, true);
                    check_ptr(loc, c - 1, &e, true, limit)?;
                    Ok(Descend::Done(Some(e)))
                } else {
                    Ok(Descend::Down(ent_at(b, c - 1, false).ptr, h.depth - 1))
                }
            })??;
            match step {
                Descend::Done(e) => return Ok(e),
                Descend::Down(p, d) => {
                    loc = Loc::Blk(p);
                    expect = Some(d);
                }
            }
        }
    }

    /// The extent with the smallest start `> lblk`.
    fn find_gt(&mut self, lblk: u32) -> FsResult<Option<Ent>> {
        self.find_gt_in(Loc::Root, None, lblk)
    }

    fn find_gt_in(&mut self, loc: Loc, expect: Option<u16>, lblk: u32) -> FsResult<Option<Ent>> {
        let limit = self.store.block_limit();
        let step = self.with_bytes(loc, |b| -> FsResult<GtStep> {
            let h = parse_header(b, loc)?;
            check_depth(&h, expect, loc)?;
            let n = h.entries as usize;
            let c = count_le(b, n, lblk);
            if h.depth == 0 {
                let e = (c < n).then(|| ent_at(b, c, true));
                if let Some(e) = &e {
                    check_ptr(loc, c, e, true, limit)?;
                }
                return Ok(GtStep::Found(e));
            }
            // The child that may hold keys > lblk after its first one, then the next one
            // (whose first key is > lblk). Exact index keys make the second a fallback only.
            let i = c.saturating_sub(1);
            let kid = |j: usize| (j < n).then(|| ent_at(b, j, false).ptr);
            Ok(GtStep::Children(h.depth - 1, [kid(i), kid(i + 1)]))
        })??;
        match step {
            GtStep::Found(e) => Ok(e),
            GtStep::Children(d, kids) => {
                for k in kids.into_iter().flatten() {
                    if let Some(e) = self.find_gt_in(Loc::Blk(k), Some(d), lblk)? {
                        return Ok(Some(e));
                    }
                }
                Ok(None)
            }
        }
    }

    /// The extent containing `lblk`, else the first one after it.
    fn at_or_after(&mut self, lblk: u32) -> FsResult<Option<Mapping>> {
        if let Some(e) = self.find_le(lblk)? {
            let m = e.mapping();
            if m.contains(lblk) {
                return Ok(Some(m));
            }
        }
        Ok(self.find_gt(lblk)?.map(|e| e.mapping()))
    }

    // --- insertion -----------------------------------------------------------------

    /// Insert leaf entry `e` without merging (the range must be free), splitting full nodes
    /// and growing the tree as needed.
    fn insert_raw(&mut self, e: Ent) -> FsResult<()> {
        self.insert_rec(Loc::Root, None, e).map(|_| ())
    }

    fn insert_rec(&mut self, loc: Loc, expect: Option<u16>, e: Ent) -> FsResult<InsertUp> {
        let mut node = self.load(loc, expect)?;
        let pos;
        if node.depth == 0 {
            pos = node.ents.partition_point(|x| x.key < e.key);
            node.ents.insert(pos, e);
        } else {
            let i = node.ents.partition_point(|x| x.key <= e.key).saturating_sub(1);
            let child = node.ents[i];
            let (fk, split) = self.insert_rec(Loc::Blk(child.ptr), Some(node.depth - 1), e)?;
            node.ents[i].key = fk;
            match split {
                Some((k, b)) => {
                    pos = i + 1;
                    node.ents.insert(pos, Ent::index(k, b));
                }
                None => {
                    if fk != child.key {
                        self.save(loc, &node)?;
                    }
                    return Ok((node.first_key(loc)?, None));
                }
            }
        }
        self.finish(loc, node, pos)
    }

    /// Store `node` (which may hold one entry too many; `pos` is where it was inserted),
    /// splitting it or, for the root, growing the tree by one level.
    fn finish(&mut self, loc: Loc, mut node: Node, pos: usize) -> FsResult<InsertUp> {
        let n = node.ents.len();
        if n <= node.max as usize {
            self.save(loc, &node)?;
            return Ok((node.first_key(loc)?, None));
        }
        match loc {
            Loc::Root => {
                // Grow in depth: the root's entries move to a new block; the root becomes an
                // index over it (and over its split half if the new block overflows).
                if node.depth >= MAX_DEPTH {
                    return Err(FsError::TooBig(format!("extent tree: depth limit {MAX_DEPTH} reached")));
                }
                let b = self.alloc()?;
                let child = Node { depth: node.depth, max: self.new_max, generation: 0, ents: node.ents };
                let (first, split) = self.finish(Loc::Blk(b), child, pos)?;
                let mut ents = vec![Ent::index(first, b)];
                if let Some((k, sb)) = split {
                    ents.push(Ent::index(k, sb));
                }
                let root =
                    Node { depth: node.depth + 1, max: ROOT_MAX_ENTRIES, generation: node.generation, ents };
                self.save(Loc::Root, &root)?;
                Ok((first, None))
            }
            Loc::Blk(_) => {
                // Appending: keep this node full and start a new one with the new entry
                // (sequential writes then leave full nodes). Otherwise split in the middle.
                let at = if pos + 1 == n { n - 1 } else { n / 2 };
                // Both halves must fit: the left keeps this node's eh_max, the right gets
                // `new_max`.
                let lo = n.saturating_sub(self.new_max as usize).max(1);
                let hi = (node.max as usize).min(n - 1);
                if lo > hi {
                    return Err(corrupt(loc, format!("internal: cannot split {n} entries")));
                }
                let at = at.clamp(lo, hi);
                let right = node.ents.split_off(at);
                let b = self.alloc()?;
                let rnode = Node { depth: node.depth, max: self.new_max, generation: 0, ents: right };
                self.save(Loc::Blk(b), &rnode)?;
                self.save(loc, &node)?;
                Ok((node.first_key(loc)?, Some((rnode.first_key(loc)?, b))))
            }
        }
    }

    /// Replace the leaf entry starting at `old_key` with `new` (whose start may differ; the
    /// caller keeps the order), fixing the index keys above it.
    fn replace(&mut self, old_key: u32, new: &Mapping) -> FsResult<()> {
        self.replace_rec(Loc::Root, None, old_key, Ent::leaf(new)).map(|_| ())
    }

    fn replace_rec(&mut self, loc: Loc, expect: Option<u16>, old_key: u32, new: Ent) -> FsResult<u32> {
        let mut node = self.load(loc, expect)?;
        if node.depth == 0 {
            let i = node
                .ents
                .binary_search_by_key(&old_key, |e| e.key)
                .map_err(|_| corrupt(loc, format!("internal: no extent starts at {old_key}")))?;
            node.ents[i] = new;
            self.save(loc, &node)?;
        } else {
            let i = node.ents.partition_point(|e| e.key <= old_key).saturating_sub(1);
            let child = node.ents[i];
            let fk = self.replace_rec(Loc::Blk(child.ptr), Some(node.depth - 1), old_key, new)?;
            if fk != child.key {
                node.ents[i].key = fk;
                self.save(loc, &node)?;
            }
        }
        node.first_key(loc)
    }

    /// Map `m` (the range must be unmapped), merging with contiguous neighbours.
    fn insert_merge(&mut self, m: Mapping) -> FsResult<()> {
        validate_new(&m)?;
        if self.goal == 0 {
            self.goal = m.pblk;
        }
        let prev = self.find_le(m.lblk)?.map(|e| e.mapping());
        if let Some(p) = prev
            && p.end() > m.lblk as u64
        {
            return Err(FsError::Corrupt(format!(
                "extent tree: inserting {}+{} over mapped extent {}+{}",
                m.lblk, m.len, p.lblk, p.len
            )));
        }
        let next = self.find_gt(m.lblk)?.map(|e| e.mapping());
        if let Some(n) = next
            && (n.lblk as u64) < m.end()
        {
            return Err(FsError::Corrupt(format!(
                "extent tree: inserting {}+{} over mapped extent {}+{}",
                m.lblk, m.len, n.lblk, n.len
            )));
        }
        let max = Mapping::max_len(m.unwritten);
        let with_prev = prev.filter(|p| {
            p.end() == m.lblk as u64
                && p.pblk + p.len as u64 == m.pblk
                && p.unwritten == m.unwritten
                && p.len + m.len <= max
        });
        let with_next = next.filter(|n| {
            m.end() == n.lblk as u64
                && m.pblk + m.len as u64 == n.pblk
                && n.unwritten == m.unwritten
                && m.len + n.len <= max
        });
        match (with_prev, with_next) {
            (Some(p), Some(n)) if p.len + m.len + n.len <= max => {
                self.remove_space(n.lblk as u64, n.end())?;
                let merged = Mapping { len: p.len + m.len + n.len, ..p };
                self.replace(p.lblk, &merged)
            }
            (Some(p), _) => {
                let merged = Mapping { len: p.len + m.len, ..p };
                self.replace(p.lblk, &merged)
            }
            (None, Some(n)) => {
                let merged = Mapping { len: m.len + n.len, ..m };
                self.replace(n.lblk, &merged)
            }
            (None, None) => self.insert_raw(Ent::leaf(&m)),
        }
    }

    // --- removal -------------------------------------------------------------------

    /// Unmap `[start, end)`; returns the physical runs that were mapped there.
    fn remove_space(&mut self, start: u64, end: u64) -> FsResult<Vec<(u64, u32)>> {
        let end = end.min(MAX_LBLK_END as u64);
        if start >= end {
            return Ok(Vec::new());
        }
        // An extent strictly containing the range becomes two: handled apart, since it adds
        // an entry (and may need a split), which the recursive removal never does.
        if let Some(e) = self.find_le(start as u32)? {
            let m = e.mapping();
            if (m.lblk as u64) < start && m.end() > end {
                if self.goal == 0 {
                    self.goal = m.pblk;
                }
                let head_len = (start - m.lblk as u64) as u32;
                let tail = Mapping {
                    lblk: end as u32,
                    pblk: m.pblk + (end - m.lblk as u64),
                    len: (m.end() - end) as u32,
                    unwritten: m.unwritten,
                };
                self.replace(m.lblk, &Mapping { len: head_len, ..m })?;
                self.insert_raw(Ent::leaf(&tail))?;
                return Ok(vec![(m.pblk + head_len as u64, (end - start) as u32)]);
            }
        }
        let mut r = Removal { start, end, runs: Vec::new(), seen: HashSet::new() };
        self.remove_rec(Loc::Root, None, u64::MAX, &mut r)?;
        self.collapse_root()?;
        Ok(r.runs)
    }

    /// Remove `[r.start, r.end)` below `loc`, whose subtree covers logical blocks below `hi`.
    /// Returns the node's new first key, or `None` if it became empty (a non-root node is
    /// then left for the parent to free; an empty root is reset to an empty leaf).
    fn remove_rec(
        &mut self,
        loc: Loc,
        expect: Option<u16>,
        hi: u64,
        r: &mut Removal,
    ) -> FsResult<Option<u32>> {
        let mut node = self.load(loc, expect)?;
        let mut changed = false;
        if node.depth == 0 {
            let mut out = Vec::with_capacity(node.ents.len() + 1);
            for e in &node.ents {
                let m = e.mapping();
                let (s, eend) = (m.lblk as u64, m.end());
                if eend <= r.start || s >= r.end || m.len == 0 {
                    out.push(*e);
                    continue;
                }
                changed = true;
                let (cs, ce) = (s.max(r.start), eend.min(r.end));
                r.runs.push((m.pblk + (cs - s), (ce - cs) as u32));
                if s < cs {
                    out.push(Ent::leaf(&Mapping { len: (cs - s) as u32, ..m }));
                }
                if ce < eend {
                    out.push(Ent::leaf(&Mapping {
                        lblk: ce as u32,
                        pblk: m.pblk + (ce - s),
                        len: (eend - ce) as u32,
                        unwritten: m.unwritten,
                    }));
                }
            }
            node.ents = out;
        } else {
            let n = node.ents.len();
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let e = node.ents[i];
                let lo = e.key as u64;
                let chi = node.ents.get(i + 1).map_or(hi, |x| x.key as u64);
                if lo >= r.end || chi <= r.start {
                    out.push(e);
                    continue;
                }
                if !r.seen.insert(e.ptr) {
                    return Err(corrupt(Loc::Blk(e.ptr), "block referenced twice"));
                }
                match self.remove_rec(Loc::Blk(e.ptr), Some(node.depth - 1), chi, r)? {
                    None => {
                        self.free(e.ptr)?;
                        changed = true;
                    }
                    Some(k) => {
                        if k != e.key {
                            changed = true;
                        }
                        out.push(Ent::index(k, e.ptr));
                    }
                }
            }
            node.ents = out;
        }
        if node.ents.is_empty() {
            if loc == Loc::Root {
                let mut empty = [0u8; ROOT_BYTES];
                init_root(&mut empty);
                self.root = empty;
            }
            return Ok(None);
        }
        if changed {
            self.save(loc, &node)?;
        }
        Ok(Some(node.first_key(loc)?))
    }

    /// While the root is an index whose children's entries all fit in the root, pull them
    /// up and free the children (keeps the tree as shallow as `e2fsck` likes it).
    fn collapse_root(&mut self) -> FsResult<()> {
        loop {
            let root = self.load(Loc::Root, None)?;
            if root.depth == 0 {
                return Ok(());
            }
            let mut all = Vec::new();
            for e in &root.ents {
                let child = self.load(Loc::Blk(e.ptr), Some(root.depth - 1))?;
                all.extend_from_slice(&child.ents);
                if all.len() > ROOT_MAX_ENTRIES as usize {
                    return Ok(());
                }
            }
            let new_root =
                Node { depth: root.depth - 1, max: ROOT_MAX_ENTRIES, generation: root.generation, ents: all };
            for e in &root.ents {
                self.free(e.ptr)?;
            }
            self.save(Loc::Root, &new_root)?;
        }
    }

    // --- conversion ----------------------------------------------------------------

    /// Turn the unwritten parts of `[start, end)` into written extents.
    fn mark_written(&mut self, start: u64, end: u64) -> FsResult<()> {
        let end = end.min(MAX_LBLK_END as u64);
        let mut cur = start;
        while cur < end {
            let Some(m) = self.at_or_after(cur as u32)? else {
                break;
            };
            if m.lblk as u64 >= end {
                break;
            }
            let a = cur.max(m.lblk as u64);
            let b = end.min(m.end());
            if b <= a {
                return Err(corrupt(Loc::Root, "internal: no progress converting extents"));
            }
            if m.unwritten {
                if self.goal == 0 {
                    self.goal = m.pblk;
                }
                self.remove_space(a, b)?;
                self.insert_merge(Mapping {
                    lblk: a as u32,
                    pblk: m.pblk + (a - m.lblk as u64),
                    len: (b - a) as u32,
                    unwritten: false,
                })?;
            }
            cur = b;
        }
        Ok(())
    }

    // --- traversal and validation --------------------------------------------------

    /// Visit every node in depth-first order (leaves in logical order).
    fn walk(
        &mut self,
        loc: Loc,
        expect: Option<u16>,
        seen: &mut HashSet<u64>,
        visit: &mut dyn FnMut(Loc, &Node),
    ) -> FsResult<()> {
        let node = self.load(loc, expect)?;
        visit(loc, &node);
        if node.depth > 0 {
            for e in &node.ents {
                if !seen.insert(e.ptr) {
                    return Err(corrupt(Loc::Blk(e.ptr), "block referenced twice"));
                }
                self.walk(Loc::Blk(e.ptr), Some(node.depth - 1), seen, visit)?;
            }
        }
        Ok(())
    }

    /// Extents overlapping `[start, end)` in logical order, below `loc`.
    fn collect_range(
        &mut self,
        loc: Loc,
        expect: Option<u16>,
        (start, end): (u64, u64),
        hi: u64,
        out: &mut Vec<Mapping>,
    ) -> FsResult<()> {
        let node = self.load(loc, expect)?;
        if node.depth == 0 {
            out.extend(
                node.ents
                    .iter()
                    .map(|e| e.mapping())
                    .filter(|m| m.end() > start && (m.lblk as u64) < end && m.len > 0),
            );
            return Ok(());
        }
        for (i, e) in node.ents.iter().enumerate() {
            let chi = node.ents.get(i + 1).map_or(hi, |x| x.key as u64);
            if (e.key as u64) < end && chi > start {
                self.collect_range(Loc::Blk(e.ptr), Some(node.depth - 1), (start, end), chi, out)?;
            }
        }
        Ok(())
    }

    fn check_rec(
        &mut self,
        loc: Loc,
        expect: Option<u16>,
        (first, hi): (Option<u32>, u64),
        seen: &mut HashSet<u64>,
        prev_end: &mut u64,
    ) -> FsResult<()> {
        let node = self.load(loc, expect)?;
        if let Some(k) = first
            && node.ents.first().map(|e| e.key) != Some(k)
        {
            return Err(corrupt(
                loc,
                format!("first key {:?} differs from the index key {k}", node.ents.first().map(|e| e.key)),
            ));
        }
        for w in node.ents.windows(2) {
            if w[0].key >= w[1].key {
                return Err(corrupt(loc, format!("keys not increasing ({} then {})", w[0].key, w[1].key)));
            }
        }
        if node.depth == 0 {
            for e in &node.ents {
                let m = e.mapping();
                if m.len == 0 {
                    return Err(corrupt(loc, format!("zero-length extent at {}", m.lblk)));
                }
                if (m.lblk as u64) < *prev_end {
                    return Err(corrupt(
                        loc,
                        format!("extent {}+{} overlaps the previous one", m.lblk, m.len),
                    ));
                }
                if m.end() > hi || m.end() > MAX_LBLK_END as u64 {
                    return Err(corrupt(loc, format!("extent {}+{} crosses the bound {hi}", m.lblk, m.len)));
                }
                if m.pblk == 0 || m.pblk + m.len as u64 > PBLK_LIMIT {
                    return Err(corrupt(
                        loc,
                        format!("extent {}+{} has bad physical block {}", m.lblk, m.len, m.pblk),
                    ));
                }
                *prev_end = m.end();
            }
            return Ok(());
        }
        for (i, e) in node.ents.iter().enumerate() {
            if e.ptr == 0 {
                return Err(corrupt(loc, format!("index entry {i} points to block 0")));
            }
            if !seen.insert(e.ptr) {
                return Err(corrupt(Loc::Blk(e.ptr), "block referenced twice"));
            }
            let chi = node.ents.get(i + 1).map_or(hi, |x| x.key as u64);
            self.check_rec(Loc::Blk(e.ptr), Some(node.depth - 1), (Some(e.key), chi), seen, prev_end)?;
        }
        Ok(())
    }
}

/// Run a mutating operation on a staged copy; commit on success, roll back on failure.
fn run<M, T>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    (goal, new_max): (u64, u16),
    f: impl FnOnce(&mut Tx<'_, M>) -> FsResult<T>,
) -> FsResult<(T, TreeDelta)>
where
    M: MetaStore + ?Sized,
{
    let mut tx = Tx::new(store, root, goal, new_max, ic);
    match f(&mut tx) {
        Ok(v) => {
            let d = tx.commit(root)?;
            Ok((v, d))
        }
        Err(e) => {
            tx.abort();
            Err(e)
        }
    }
}

/// Run a read-only operation.
fn read<M, T>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    f: impl FnOnce(&mut Tx<'_, M>) -> FsResult<T>,
) -> FsResult<T>
where
    M: MetaStore + ?Sized,
{
    let mut tx = Tx::new(store, root, 0, max_entries_for(ic.block_size), ic);
    f(&mut tx)
}

// ---------------------------------------------------------------------------------------
// Public API.
// ---------------------------------------------------------------------------------------

/// Make `root` an empty tree: a depth-0 root node with no entries.
pub fn init_root(root: &mut [u8; ROOT_BYTES]) {
    root.fill(0);
    write_header(root, &NodeHeader { entries: 0, max: ROOT_MAX_ENTRIES, depth: 0, generation: 0 });
}

/// Depth of the tree (0: the extents are in the inode).
pub fn depth(root: &[u8; ROOT_BYTES]) -> FsResult<u16> {
    Ok(parse_header(root, Loc::Root)?.depth)
}

/// Whether the tree maps nothing.
pub fn is_empty(root: &[u8; ROOT_BYTES]) -> FsResult<bool> {
    Ok(parse_header(root, Loc::Root)?.entries == 0)
}

/// The whole extent containing logical block `lblk` (not clipped: `lblk` may be anywhere
/// inside it; use [`Mapping::pblk_of`]), or `None` for a hole.
pub fn lookup<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    read(root, store, ic, |tx| Ok(tx.find_le(lblk)?.map(|e| e.mapping()).filter(|m| m.contains(lblk))))
}

/// The whole extent containing `lblk`, else the first extent starting after it, else `None`
/// (`SEEK_DATA`, skipping holes of sparse files).
pub fn next_extent_at_or_after<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    read(root, store, ic, |tx| tx.at_or_after(lblk))
}

/// The last extent starting at or before `lblk` (whether or not it reaches `lblk`): the
/// natural allocation goal for `lblk` is `pblk + (lblk - m.lblk)`.
pub fn extent_at_or_before<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    read(root, store, ic, |tx| Ok(tx.find_le(lblk)?.map(|e| e.mapping())))
}

/// The whole extents overlapping `[start, end)` (`end` exclusive; `u32::MAX` means "to the
/// end"), in logical order.
pub fn extents_in_range<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    start: u32,
    end: u32,
) -> FsResult<Vec<Mapping>> {
    read(root, store, ic, |tx| {
        let mut out = Vec::new();
        if start < end {
            tx.collect_range(Loc::Root, None, (start as u64, end as u64), u64::MAX, &mut out)?;
        }
        Ok(out)
    })
}

/// Map `[m.lblk, m.lblk + m.len)` to the physical blocks from `m.pblk`.
///
/// The range must be unmapped (else [`FsError::Corrupt`]; the caller removes it first).
/// The new extent is merged with its logical and physical neighbours when they have the
/// same written state and the merged length fits; otherwise it is inserted, splitting full
/// nodes and growing the tree as needed. New tree blocks are allocated near `goal` (near
/// `m.pblk` when `goal` is 0). `m.len` must be 1..=32768 (written) or 1..=32767 (unwritten)
/// and the extent must end at or below logical block `u32::MAX`.
pub fn insert<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    m: Mapping,
    goal: u64,
) -> FsResult<TreeDelta> {
    insert_with(root, store, ic, m, goal, max_entries_for(ic.block_size))
}

fn insert_with<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    m: Mapping,
    goal: u64,
    new_max: u16,
) -> FsResult<TreeDelta> {
    validate_new(&m)?;
    run(root, store, ic, (goal, new_max), |tx| tx.insert_merge(m)).map(|((), d)| d)
}

/// Unmap logical blocks `[start, end)` (`end` exclusive; `u32::MAX` means "to the end").
///
/// Extents straddling a boundary are trimmed; an extent strictly containing the range is
/// split in two (which may allocate a tree block). Tree blocks left empty are freed and the
/// tree is made shallower when the root can hold everything again. Returns the physical
/// runs `(first block, count)` that were mapped in the range (written or not), for the
/// caller to free.
pub fn remove_range<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    start: u32,
    end: u32,
) -> FsResult<(Vec<(u64, u32)>, TreeDelta)> {
    remove_range_with(root, store, ic, start, end, max_entries_for(ic.block_size))
}

fn remove_range_with<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    start: u32,
    end: u32,
    new_max: u16,
) -> FsResult<(Vec<(u64, u32)>, TreeDelta)> {
    if start >= end {
        parse_header(root, Loc::Root)?;
        return Ok((Vec::new(), TreeDelta::default()));
    }
    run(root, store, ic, (0, new_max), |tx| tx.remove_space(start as u64, end as u64))
}

/// Mark the unwritten blocks of `[lblk, lblk + len)` written (after their data has been
/// written). An unwritten extent partly inside the range is split into up to three
/// extents; converted pieces merge with contiguous written neighbours. Written blocks and
/// holes in the range are left alone.
pub fn mark_written<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    lblk: u32,
    len: u32,
) -> FsResult<TreeDelta> {
    mark_written_with(root, store, ic, lblk, len, max_entries_for(ic.block_size))
}

fn mark_written_with<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    lblk: u32,
    len: u32,
    new_max: u16,
) -> FsResult<TreeDelta> {
    if len == 0 {
        parse_header(root, Loc::Root)?;
        return Ok(TreeDelta::default());
    }
    run(root, store, ic, (0, new_max), |tx| tx.mark_written(lblk as u64, lblk as u64 + len as u64))
        .map(|((), d)| d)
}

/// Call `f` on every extent, in logical order.
pub fn for_each_extent<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
    mut f: impl FnMut(Mapping),
) -> FsResult<()> {
    read(root, store, ic, |tx| {
        let mut seen = HashSet::new();
        tx.walk(Loc::Root, None, &mut seen, &mut |_, node| {
            if node.depth == 0 {
                for e in &node.ents {
                    f(e.mapping());
                }
            }
        })
    })
}

/// Every tree block (all non-root nodes), parents before children.
pub fn tree_blocks<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    ic: InodeCsum,
) -> FsResult<Vec<u64>> {
    read(root, store, ic, |tx| {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        tx.walk(Loc::Root, None, &mut seen, &mut |loc, _| {
            if let Loc::Blk(b) = loc {
                out.push(b);
            }
        })?;
        Ok(out)
    })
}

/// Validate the whole tree: magic, entry counts, depths, non-empty non-root nodes, sorted
/// non-overlapping extents of valid lengths, index keys equal to the first key below them,
/// each block referenced once.
pub fn check<M: MetaStore + ?Sized>(root: &[u8; ROOT_BYTES], store: &mut M, ic: InodeCsum) -> FsResult<()> {
    read(root, store, ic, |tx| {
        let mut seen = HashSet::new();
        let mut prev_end = 0u64;
        tx.check_rec(Loc::Root, None, (None, MAX_LBLK_END as u64), &mut seen, &mut prev_end)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    use cjfs_blockdev::EmulatedSsd;
    use cjfs_journal::BufferCache;
    use proptest::prelude::*;

    use crate::ondisk::superblock::put_u16;

    // The tests work without checksums (but for `checksummed_blocks`, which calls the
    // public functions by path): these shadow them with the inode context fixed.
    const IC: InodeCsum = InodeCsum::none(99);
    fn lookup<M: MetaStore>(r: &[u8; ROOT_BYTES], st: &mut M, l: u32) -> FsResult<Option<Mapping>> {
        super::lookup(r, st, IC, l)
    }
    fn next_extent_at_or_after<M: MetaStore>(
        r: &[u8; ROOT_BYTES],
        st: &mut M,
        l: u32,
    ) -> FsResult<Option<Mapping>> {
        super::next_extent_at_or_after(r, st, IC, l)
    }
    fn insert<M: MetaStore>(
        r: &mut [u8; ROOT_BYTES],
        st: &mut M,
        m: Mapping,
        goal: u64,
    ) -> FsResult<TreeDelta> {
        super::insert(r, st, IC, m, goal)
    }
    fn insert_with<M: MetaStore>(
        r: &mut [u8; ROOT_BYTES],
        st: &mut M,
        m: Mapping,
        goal: u64,
        new_max: u16,
    ) -> FsResult<TreeDelta> {
        super::insert_with(r, st, IC, m, goal, new_max)
    }
    fn remove_range<M: MetaStore>(
        r: &mut [u8; ROOT_BYTES],
        st: &mut M,
        a: u32,
        b: u32,
    ) -> FsResult<(Vec<(u64, u32)>, TreeDelta)> {
        super::remove_range(r, st, IC, a, b)
    }
    fn remove_range_with<M: MetaStore>(
        r: &mut [u8; ROOT_BYTES],
        st: &mut M,
        a: u32,
        b: u32,
        new_max: u16,
    ) -> FsResult<(Vec<(u64, u32)>, TreeDelta)> {
        super::remove_range_with(r, st, IC, a, b, new_max)
    }
    fn mark_written<M: MetaStore>(
        r: &mut [u8; ROOT_BYTES],
        st: &mut M,
        l: u32,
        n: u32,
    ) -> FsResult<TreeDelta> {
        super::mark_written(r, st, IC, l, n)
    }
    fn mark_written_with<M: MetaStore>(
        r: &mut [u8; ROOT_BYTES],
        st: &mut M,
        l: u32,
        n: u32,
        new_max: u16,
    ) -> FsResult<TreeDelta> {
        super::mark_written_with(r, st, IC, l, n, new_max)
    }
    fn for_each_extent<M: MetaStore>(
        r: &[u8; ROOT_BYTES],
        st: &mut M,
        f: impl FnMut(Mapping),
    ) -> FsResult<()> {
        super::for_each_extent(r, st, IC, f)
    }
    fn tree_blocks<M: MetaStore>(r: &[u8; ROOT_BYTES], st: &mut M) -> FsResult<Vec<u64>> {
        super::tree_blocks(r, st, IC)
    }
    fn check<M: MetaStore>(r: &[u8; ROOT_BYTES], st: &mut M) -> FsResult<()> {
        super::check(r, st, IC)
    }

    const DEV_BLOCKS: u64 = 1 << 16;

    /// In-memory metadata store: bump allocator, and checks that every buffer changed
    /// between two [`MemStore::end_tx`] calls got write access, that nothing is freed twice
    /// and that freed blocks are never read or written again.
    struct MemStore {
        cache: BufferCache,
        next: u64,
        live: HashMap<u64, Arc<Buffer>>,
        in_use: BTreeSet<u64>,
        access: HashSet<u64>,
        shadow: HashMap<u64, Vec<u8>>,
        /// Fail the allocation after this many more successful ones.
        fail_in: Option<u32>,
    }

    impl MemStore {
        fn new() -> Self {
            Self::starting_at(1000)
        }

        fn starting_at(next: u64) -> Self {
            MemStore {
                cache: BufferCache::new(Arc::new(EmulatedSsd::ram(DEV_BLOCKS)), 1 << 16),
                next,
                live: HashMap::new(),
                in_use: BTreeSet::new(),
                access: HashSet::new(),
                shadow: HashMap::new(),
                fail_in: None,
            }
        }

        fn end_tx(&mut self) {
            for (b, buf) in &self.live {
                let now = buf.read()[..].to_vec();
                if self.shadow.get(b) != Some(&now) {
                    assert!(self.access.contains(b), "block {b} modified without write access");
                }
                self.shadow.insert(*b, now);
            }
            self.access.clear();
        }

        /// Write a raw node into a newly allocated block (for corruption tests).
        fn craft(&mut self, depth: u16, max: u16, ents: &[Ent]) -> u64 {
            let buf = self.new_block(0).expect("alloc");
            let node = Node { depth, max, generation: 0, ents: ents.to_vec() };
            encode(&node, &mut buf.write()[..], Loc::Blk(buf.blocknr())).expect("encode");
            buf.blocknr()
        }
    }

    impl MetaStore for MemStore {
        fn read_block(&mut self, blk: u64) -> FsResult<Arc<Buffer>> {
            if !self.in_use.contains(&blk) {
                return Err(FsError::Corrupt(format!("test store: read of unallocated block {blk}")));
            }
            if let Some(b) = self.live.get(&blk) {
                return Ok(b.clone());
            }
            let b = self.cache.read(blk)?;
            self.shadow.insert(blk, b.read()[..].to_vec());
            self.live.insert(blk, b.clone());
            Ok(b)
        }

        fn write_access(&mut self, buf: &Arc<Buffer>) -> FsResult<()> {
            assert!(self.in_use.contains(&buf.blocknr()), "write access to free block {}", buf.blocknr());
            self.access.insert(buf.blocknr());
            Ok(())
        }

        fn new_block(&mut self, _goal: u64) -> FsResult<Arc<Buffer>> {
            if let Some(n) = self.fail_in {
                if n == 0 {
                    self.fail_in = None;
                    return Err(FsError::NoSpace("test store: injected".into()));
                }
                self.fail_in = Some(n - 1);
            }
            if self.next >= DEV_BLOCKS {
                return Err(FsError::NoSpace("test store: device full".into()));
            }
            let blk = self.next;
            self.next += 1;
            let b = self.cache.get_new(blk);
            self.in_use.insert(blk);
            self.access.insert(blk);
            self.live.insert(blk, b.clone());
            Ok(b)
        }

        fn free_meta_block(&mut self, blk: u64) -> FsResult<()> {
            assert!(self.in_use.remove(&blk), "free of unallocated block {blk}");
            self.live.remove(&blk);
            self.shadow.remove(&blk);
            Ok(())
        }
    }

    fn new_root() -> [u8; ROOT_BYTES] {
        let mut r = [0u8; ROOT_BYTES];
        init_root(&mut r);
        r
    }

    fn all_extents(root: &[u8; ROOT_BYTES], st: &mut MemStore) -> Vec<Mapping> {
        let mut v = Vec::new();
        for_each_extent(root, st, |m| v.push(m)).expect("for_each_extent");
        v
    }

    fn m(lblk: u32, pblk: u64, len: u32, unwritten: bool) -> Mapping {
        Mapping { lblk, pblk, len, unwritten }
    }

    type Model = BTreeMap<u32, (u64, bool)>;

    fn expand(exts: &[Mapping]) -> Model {
        let mut out = Model::new();
        for e in exts {
            for i in 0..e.len {
                assert!(out.insert(e.lblk + i, (e.pblk + i as u64, e.unwritten)).is_none());
            }
        }
        out
    }

    /// Tree valid, equal to the model, and owning exactly the blocks the store has handed out.
    fn assert_consistent(root: &[u8; ROOT_BYTES], st: &mut MemStore, model: &Model) {
        check(root, st).expect("check");
        let exts = all_extents(root, st);
        assert_eq!(&expand(&exts), model, "tree differs from model");
        let blocks: BTreeSet<u64> = tree_blocks(root, st).expect("tree_blocks").into_iter().collect();
        assert_eq!(blocks, st.in_use, "tree blocks differ from allocated blocks");
    }

    fn runs_to_sorted(runs: &[(u64, u32)]) -> Vec<u64> {
        let mut v: Vec<u64> = runs.iter().flat_map(|&(p, l)| (0..l as u64).map(move |i| p + i)).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn checksummed_blocks() {
        let ic = InodeCsum { ino: 12, seed: Some(0x1234_5678), block_size: 4096 };
        let mut st = MemStore::new();
        let mut root = new_root();
        for i in 0..20u32 {
            super::insert(&mut root, &mut st, ic, m(i * 10, 5000 + u64::from(i) * 100, 5, false), 0).unwrap();
        }
        st.end_tx();
        let blocks = super::tree_blocks(&root, &mut st, ic).unwrap();
        assert!(!blocks.is_empty(), "20 extents need a tree block");
        for b in blocks {
            let mut data = st.read_block(b).unwrap().read()[..].to_vec();
            assert_eq!(verify_block_checksum(0x1234_5678, &data), Ok(()), "block {b}");
            assert!(verify_block_checksum(0x1234_5679, &data).is_err(), "another inode's seed");
            data[30] ^= 1;
            assert!(verify_block_checksum(0x1234_5678, &data).is_err(), "a changed byte");
        }
    }

    #[test]
    fn empty_tree() {
        let mut st = MemStore::new();
        let root = new_root();
        assert_eq!(depth(&root).unwrap(), 0);
        assert!(is_empty(&root).unwrap());
        assert_eq!(lookup(&root, &mut st, 0).unwrap(), None);
        assert_eq!(next_extent_at_or_after(&root, &mut st, 0).unwrap(), None);
        assert!(all_extents(&root, &mut st).is_empty());
        assert!(tree_blocks(&root, &mut st).unwrap().is_empty());
        check(&root, &mut st).unwrap();
    }

    #[test]
    fn punch_hole_in_middle_of_extent() {
        let mut st = MemStore::new();
        let mut root = new_root();
        insert(&mut root, &mut st, m(0, 5000, 100, false), 0).unwrap();
        let (runs, d) = remove_range(&mut root, &mut st, 40, 50).unwrap();
        assert_eq!(runs, vec![(5040, 10)]);
        assert_eq!(d, TreeDelta::default());
        assert_eq!(all_extents(&root, &mut st), vec![m(0, 5000, 40, false), m(50, 5050, 50, false)]);
        assert_eq!(lookup(&root, &mut st, 45).unwrap(), None);
        assert_eq!(lookup(&root, &mut st, 99).unwrap(), Some(m(50, 5050, 50, false)));
        assert_eq!(next_extent_at_or_after(&root, &mut st, 40).unwrap(), Some(m(50, 5050, 50, false)));
        // Trim both edges.
        let (runs, _) = remove_range(&mut root, &mut st, 30, 60).unwrap();
        assert_eq!(runs, vec![(5030, 10), (5050, 10)]);
        assert_eq!(all_extents(&root, &mut st), vec![m(0, 5000, 30, false), m(60, 5060, 40, false)]);
        // Punch in an unwritten extent inside a full root leaf: needs a grow.
        let mut root = new_root();
        for i in 0..3 {
            insert(&mut root, &mut st, m(i * 10, 7000 + i as u64 * 100, 5, false), 0).unwrap();
        }
        insert(&mut root, &mut st, m(100, 9000, 50, true), 0).unwrap();
        let (runs, d) = remove_range(&mut root, &mut st, 110, 111).unwrap();
        assert_eq!(runs, vec![(9010, 1)]);
        assert_eq!(d.blocks_allocated, 1);
        assert_eq!(depth(&root).unwrap(), 1);
        assert_eq!(all_extents(&root, &mut st)[3..], [m(100, 9000, 10, true), m(111, 9011, 39, true)]);
        check(&root, &mut st).unwrap();
        // Removing one extent lets the root hold everything again.
        let (_, d) = remove_range(&mut root, &mut st, 0, 5).unwrap();
        assert_eq!(d.blocks_freed, 1);
        assert_eq!(depth(&root).unwrap(), 0);
        assert_eq!(all_extents(&root, &mut st).len(), 4);
        st.end_tx();
    }

    #[test]
    fn merges_with_neighbours() {
        let mut st = MemStore::new();
        let mut root = new_root();
        insert(&mut root, &mut st, m(10, 110, 5, false), 0).unwrap();
        // Contiguous after: merge.
        insert(&mut root, &mut st, m(15, 115, 5, false), 0).unwrap();
        assert_eq!(all_extents(&root, &mut st), vec![m(10, 110, 10, false)]);
        // Contiguous before: merge (start moves).
        insert(&mut root, &mut st, m(5, 105, 5, false), 0).unwrap();
        assert_eq!(all_extents(&root, &mut st), vec![m(5, 105, 15, false)]);
        // Physically discontiguous: no merge.
        insert(&mut root, &mut st, m(20, 500, 5, false), 0).unwrap();
        // Different state: no merge.
        insert(&mut root, &mut st, m(25, 505, 5, true), 0).unwrap();
        insert(&mut root, &mut st, m(40, 140, 5, false), 0).unwrap();
        assert_eq!(all_extents(&root, &mut st).len(), 4);
        // Filling the gap joins both sides.
        insert(&mut root, &mut st, m(30, 130, 10, false), 0).unwrap();
        assert_eq!(
            all_extents(&root, &mut st),
            vec![m(5, 105, 15, false), m(20, 500, 5, false), m(25, 505, 5, true), m(30, 130, 15, false)]
        );
        // Overlaps are refused and change nothing.
        let before = root;
        for bad in [m(0, 1, 6, false), m(44, 1, 1, false), m(12, 1, 1, true)] {
            assert!(matches!(insert(&mut root, &mut st, bad, 0), Err(FsError::Corrupt(_))));
            assert_eq!(root, before);
        }
        st.end_tx();
    }

    #[test]
    fn length_limits() {
        let mut st = MemStore::new();
        let mut root = new_root();
        insert(&mut root, &mut st, m(0, 1000, MAX_INIT_LEN, false), 0).unwrap();
        // A contiguous neighbour cannot make it longer.
        insert(&mut root, &mut st, m(MAX_INIT_LEN, 1000 + MAX_INIT_LEN as u64, 1, false), 0).unwrap();
        assert_eq!(all_extents(&root, &mut st).len(), 2);
        let u = MAX_INIT_LEN + 1;
        insert(&mut root, &mut st, m(100_000, 200_000, MAX_UNWRITTEN_LEN - 1, true), 0).unwrap();
        insert(
            &mut root,
            &mut st,
            m(100_000 + MAX_UNWRITTEN_LEN - 1, 200_000 + MAX_UNWRITTEN_LEN as u64 - 1, 1, true),
            0,
        )
        .unwrap();
        insert(
            &mut root,
            &mut st,
            m(100_000 + MAX_UNWRITTEN_LEN, 200_000 + MAX_UNWRITTEN_LEN as u64, 1, true),
            0,
        )
        .unwrap();
        let exts = all_extents(&root, &mut st);
        assert_eq!(exts[2], m(100_000, 200_000, MAX_UNWRITTEN_LEN, true));
        assert_eq!(exts.len(), 4);
        for bad in [
            m(0, 1, 0, false),
            m(0, 1, u, false),
            m(0, 1, MAX_INIT_LEN, true),
            m(u32::MAX - 1, 1, 2, false),
            m(u32::MAX, 1, 1, false),
            m(7, 0, 1, false),
            m(7, PBLK_LIMIT - 1, 2, false),
        ] {
            let r = insert(&mut root, &mut st, bad, 0);
            assert!(matches!(r, Err(FsError::Invalid(_)) | Err(FsError::TooBig(_))), "{bad:?}: {r:?}");
        }
        // The last mappable block.
        insert(&mut root, &mut st, m(u32::MAX - 2, 77, 2, false), 0).unwrap();
        let (runs, _) = remove_range(&mut root, &mut st, 5, u32::MAX).unwrap();
        assert_eq!(
            runs_to_sorted(&runs).len() as u64,
            MAX_INIT_LEN as u64 - 5 + 1 + MAX_UNWRITTEN_LEN as u64 + 1 + 2
        );
        assert_eq!(all_extents(&root, &mut st), vec![m(0, 1000, 5, false)]);
        check(&root, &mut st).unwrap();
    }

    #[test]
    fn mark_written_splits_and_merges() {
        let mut st = MemStore::new();
        let mut root = new_root();
        insert(&mut root, &mut st, m(0, 1000, 100, true), 0).unwrap();
        mark_written(&mut root, &mut st, 10, 10).unwrap();
        assert_eq!(
            all_extents(&root, &mut st),
            vec![m(0, 1000, 10, true), m(10, 1010, 10, false), m(20, 1020, 80, true)]
        );
        // Converting the head joins the written piece.
        mark_written(&mut root, &mut st, 0, 10).unwrap();
        assert_eq!(all_extents(&root, &mut st), vec![m(0, 1000, 20, false), m(20, 1020, 80, true)]);
        // A range covering holes, written and unwritten blocks.
        insert(&mut root, &mut st, m(200, 3000, 10, true), 0).unwrap();
        mark_written(&mut root, &mut st, 15, 190).unwrap();
        assert_eq!(
            all_extents(&root, &mut st),
            vec![m(0, 1000, 100, false), m(200, 3000, 5, false), m(205, 3005, 5, true)]
        );
        mark_written(&mut root, &mut st, 0, u32::MAX).unwrap();
        assert_eq!(all_extents(&root, &mut st), vec![m(0, 1000, 100, false), m(200, 3000, 10, false)]);
        check(&root, &mut st).unwrap();
        st.end_tx();
    }

    /// Build a depth >= 2 tree of 100k single-block extents, then free everything.
    #[test]
    fn deep_tree_build_and_remove_all() {
        const N: u32 = 100_000;
        let mut st = MemStore::new();
        let mut root = new_root();
        let mut tree = 0i64;
        for i in 0..N {
            let d = insert(&mut root, &mut st, m(i, 10_000_000 + 2 * i as u64, 1, i % 3 == 0), 0).unwrap();
            tree += d.blocks_allocated as i64 - d.blocks_freed as i64;
            if i % 5000 == 0 {
                st.end_tx();
            }
        }
        st.end_tx();
        assert!(depth(&root).unwrap() >= 2, "depth {}", depth(&root).unwrap());
        check(&root, &mut st).unwrap();
        let blocks = tree_blocks(&root, &mut st).unwrap();
        assert_eq!(blocks.len() as i64, tree);
        assert_eq!(blocks.len(), st.in_use.len());
        // Sequential appends keep leaves full: about N / 340 leaves.
        assert!(blocks.len() < (N as usize / 340) + 10, "{} blocks", blocks.len());
        let exts = all_extents(&root, &mut st);
        assert_eq!(exts.len(), N as usize);
        for i in (0..N).step_by(997) {
            let got = lookup(&root, &mut st, i).unwrap().unwrap();
            assert_eq!(got, m(i, 10_000_000 + 2 * i as u64, 1, i % 3 == 0));
        }
        assert_eq!(super::extents_in_range(&root, &mut st, IC, 500, 503).unwrap().len(), 3);
        let (runs, d) = remove_range(&mut root, &mut st, 0, u32::MAX).unwrap();
        st.end_tx();
        assert_eq!(runs.len(), N as usize);
        assert_eq!(d.blocks_freed as usize, blocks.len());
        assert_eq!(d.blocks_allocated, 0);
        assert!(st.in_use.is_empty());
        assert_eq!(root, new_root());
    }

    /// Random insertion order and removal in random chunks, at full node size.
    #[test]
    fn deep_tree_random_order() {
        const N: u32 = 30_000;
        let mut st = MemStore::new();
        let mut root = new_root();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut order: Vec<u32> = (0..N).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rnd() as usize % (i + 1));
        }
        for &i in &order {
            insert(&mut root, &mut st, m(3 * i, 10_000_000 + 5 * i as u64, 2, false), 0).unwrap();
        }
        st.end_tx();
        assert!(depth(&root).unwrap() >= 2);
        check(&root, &mut st).unwrap();
        assert_eq!(all_extents(&root, &mut st).len(), N as usize);
        assert_eq!(tree_blocks(&root, &mut st).unwrap().len(), st.in_use.len());
        let mut model = expand(&all_extents(&root, &mut st));
        let mut left = model.len();
        while left > 0 {
            let s = (rnd() % (3 * N as u64)) as u32;
            let e = s + (rnd() % 3000) as u32 + 1;
            let (runs, _) = remove_range(&mut root, &mut st, s, e).unwrap();
            let expected: Vec<u64> = model.range(s..e).map(|(_, v)| v.0).collect();
            let mut expected = expected;
            expected.sort_unstable();
            assert_eq!(runs_to_sorted(&runs), expected);
            let keys: Vec<u32> = model.range(s..e).map(|(k, _)| *k).collect();
            for k in keys {
                model.remove(&k);
            }
            left = model.len();
            check(&root, &mut st).unwrap();
            if left < 2000 {
                // Finish off with larger bites.
                remove_range(&mut root, &mut st, 0, u32::MAX).unwrap();
                model.clear();
                left = 0;
            }
        }
        st.end_tx();
        assert!(st.in_use.is_empty());
        assert_eq!(root, new_root());
    }

    #[test]
    fn enospc_leaves_tree_unchanged() {
        let mut st = MemStore::new();
        let mut root = new_root();
        for i in 0..4 {
            insert(&mut root, &mut st, m(i * 10, 100 + i as u64 * 100, 5, false), 0).unwrap();
        }
        // Root full: the next insert needs a block.
        let before = root;
        st.fail_in = Some(0);
        assert!(matches!(insert(&mut root, &mut st, m(100, 9000, 1, false), 0), Err(FsError::NoSpace(_))));
        assert_eq!(root, before);
        assert!(st.in_use.is_empty());
        // Fill a depth-1 tree with small nodes, then fail on the second of two allocations.
        let mut model = expand(&all_extents(&root, &mut st));
        let mut i = 0u32;
        loop {
            let e = m(1000 + 2 * i, 50_000 + 2 * i as u64, 1, false);
            let blocks_before = st.in_use.clone();
            let before = root;
            st.fail_in = Some(1);
            match insert_with(&mut root, &mut st, e, 0, 3) {
                Ok(_) => {
                    st.fail_in = None;
                    model.insert(e.lblk, (e.pblk, false));
                }
                Err(FsError::NoSpace(_)) => {
                    assert_eq!(root, before);
                    assert_eq!(st.in_use, blocks_before);
                    st.end_tx();
                    assert_consistent(&root, &mut st, &model);
                    if depth(&root).unwrap() >= 2 {
                        break;
                    }
                    // Let it succeed now.
                    insert_with(&mut root, &mut st, e, 0, 3).unwrap();
                    model.insert(e.lblk, (e.pblk, false));
                }
                Err(e) => panic!("{e}"),
            }
            st.end_tx();
            assert_consistent(&root, &mut st, &model);
            i += 1;
            assert!(i < 1000);
        }
    }

    #[test]
    fn corrupt_trees_are_errors() {
        fn all_fail(root: &mut [u8; ROOT_BYTES], st: &mut MemStore) {
            let r0 = *root;
            let e = |r: FsResult<()>| match r {
                Err(FsError::Corrupt(msg)) => assert!(msg.contains("extent tree"), "{msg}"),
                other => panic!("expected corruption, got {other:?}"),
            };
            e(check(root, st));
            e(for_each_extent(root, st, |_| {}));
            e(tree_blocks(root, st).map(|_| ()));
            e(remove_range(root, st, 0, u32::MAX).map(|_| ()));
            assert_eq!(*root, r0);
        }
        let mut st = MemStore::new();

        let mut root = new_root();
        root[0] = 0;
        all_fail(&mut root, &mut st);
        assert!(lookup(&root, &mut st, 0).is_err());
        assert!(insert(&mut root, &mut st, m(0, 1, 1, false), 0).is_err());
        assert!(mark_written(&mut root, &mut st, 0, 1).is_err());

        let mut root = new_root();
        put_u16(&mut root, 2, 5); // entries > max
        all_fail(&mut root, &mut st);
        let mut root = new_root();
        put_u16(&mut root, 4, 5); // max > capacity
        all_fail(&mut root, &mut st);
        let mut root = new_root();
        put_u16(&mut root, 6, 6); // depth 6, no entries
        all_fail(&mut root, &mut st);

        // Index pointing at a leaf where a depth-1 node is expected.
        let leaf = st.craft(0, 340, &[Ent::leaf(&m(0, 500, 1, false))]);
        let mut root = new_root();
        encode(
            &Node { depth: 2, max: 4, generation: 0, ents: vec![Ent::index(0, leaf)] },
            &mut root,
            Loc::Root,
        )
        .unwrap();
        all_fail(&mut root, &mut st);
        assert!(lookup(&root, &mut st, 0).is_err());
        assert!(insert(&mut root, &mut st, m(7, 1, 1, false), 0).is_err());

        // A node pointing to itself (a loop): depth mismatch.
        let selfref = st.craft(1, 340, &[]);
        {
            let buf = st.read_block(selfref).unwrap();
            let node = Node { depth: 1, max: 340, generation: 0, ents: vec![Ent::index(0, selfref)] };
            encode(&node, &mut buf.write()[..], Loc::Blk(selfref)).unwrap();
        }
        let mut root = new_root();
        encode(
            &Node { depth: 2, max: 4, generation: 0, ents: vec![Ent::index(0, selfref)] },
            &mut root,
            Loc::Root,
        )
        .unwrap();
        all_fail(&mut root, &mut st);
        assert!(lookup(&root, &mut st, 3).is_err());
        assert!(next_extent_at_or_after(&root, &mut st, 3).is_err());

        // The same leaf referenced twice.
        let mut root = new_root();
        encode(
            &Node { depth: 1, max: 4, generation: 0, ents: vec![Ent::index(0, leaf), Ent::index(10, leaf)] },
            &mut root,
            Loc::Root,
        )
        .unwrap();
        all_fail(&mut root, &mut st);

        // Pointer to block 0 and to an empty leaf.
        let empty = st.craft(0, 340, &[]);
        for p in [0, empty] {
            let mut root = new_root();
            encode(
                &Node { depth: 1, max: 4, generation: 0, ents: vec![Ent::index(0, p)] },
                &mut root,
                Loc::Root,
            )
            .unwrap();
            all_fail(&mut root, &mut st);
        }

        // Structurally readable but invalid: check() catches them.
        let bad_trees: Vec<Vec<Ent>> = vec![
            // overlapping
            vec![Ent::leaf(&m(0, 500, 10, false)), Ent::leaf(&m(5, 900, 1, false))],
            // unsorted
            vec![Ent::leaf(&m(10, 500, 1, false)), Ent::leaf(&m(5, 900, 1, false))],
            // zero length
            vec![Ent::leaf(&m(0, 500, 0, false))],
            // physical block 0
            vec![Ent::leaf(&m(0, 0, 1, false))],
        ];
        for ents in bad_trees {
            let mut root = new_root();
            encode(&Node { depth: 0, max: 4, generation: 0, ents }, &mut root, Loc::Root).unwrap();
            assert!(matches!(check(&root, &mut st), Err(FsError::Corrupt(_))));
        }
        // Index key differing from the child's first key.
        let mut root = new_root();
        encode(
            &Node { depth: 1, max: 4, generation: 0, ents: vec![Ent::index(1, leaf)] },
            &mut root,
            Loc::Root,
        )
        .unwrap();
        assert!(matches!(check(&root, &mut st), Err(FsError::Corrupt(_))));
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert at the first free block at or after `lblk` (clipped to the free gap).
        InsertFree {
            lblk: u32,
            len: u32,
            unwritten: bool,
            contiguous: bool,
        },
        /// Insert exactly here: fails if it overlaps.
        InsertRaw {
            lblk: u32,
            len: u32,
        },
        Remove {
            start: u32,
            len: u32,
        },
        RemoveToEnd {
            start: u32,
        },
        MarkWritten {
            start: u32,
            len: u32,
        },
        /// Make the allocation after `after` successful ones fail in the next operation.
        FailAlloc {
            after: u32,
        },
    }

    fn op_strategy(span: u32) -> impl Strategy<Value = Op> {
        prop_oneof![
            16 => (0..span, 1u32..12, any::<bool>(), 0u8..3).prop_map(
                |(lblk, len, unwritten, c)| Op::InsertFree { lblk, len, unwritten, contiguous: c == 0 }
            ),
            2 => (0..span, 1u32..8).prop_map(|(lblk, len)| Op::InsertRaw { lblk, len }),
            4 => (0..span + 50, 1u32..80).prop_map(|(start, len)| Op::Remove { start, len }),
            1 => (0..span + 50).prop_map(|start| Op::RemoveToEnd { start }),
            4 => (0..span + 50, 1u32..80).prop_map(|(start, len)| Op::MarkWritten { start, len }),
            2 => (0u32..4).prop_map(|after| Op::FailAlloc { after }),
        ]
    }

    fn pblk_for(lblk: u32, contiguous: bool) -> u64 {
        if contiguous { 100_000 + lblk as u64 } else { 1_000_000 + 3 * lblk as u64 }
    }

    fn run_ops(ops: &[Op], new_max: u16) {
        let mut st = MemStore::new();
        let mut root = new_root();
        let mut model = Model::new();
        let mut tree_count = 0i64;
        let mut fail = None;
        for (step, op) in ops.iter().enumerate() {
            st.fail_in = fail.take();
            let before_root = root;
            let before_blocks = st.in_use.clone();
            let injected = st.fail_in.is_some();
            let result: FsResult<TreeDelta> = match *op {
                Op::FailAlloc { after } => {
                    fail = Some(after);
                    Ok(TreeDelta::default())
                }
                Op::InsertFree { lblk, len, unwritten, contiguous } => {
                    let mut s = lblk;
                    while model.contains_key(&s) {
                        s += 1;
                    }
                    let gap_end = model.range(s..).next().map_or(u32::MAX, |(k, _)| *k);
                    let len = len.min(gap_end - s);
                    let e = m(s, pblk_for(s, contiguous), len, unwritten);
                    let r = insert_with(&mut root, &mut st, e, 0, new_max);
                    if r.is_ok() {
                        for i in 0..len {
                            model.insert(s + i, (e.pblk + i as u64, unwritten));
                        }
                    }
                    r
                }
                Op::InsertRaw { lblk, len } => {
                    let e = m(lblk, pblk_for(lblk, false), len, false);
                    let overlaps = model.range(lblk..lblk + len).next().is_some();
                    let r = insert_with(&mut root, &mut st, e, 0, new_max);
                    if overlaps {
                        assert!(matches!(r, Err(FsError::Corrupt(_))), "{r:?}");
                        assert_eq!(root, before_root);
                        Ok(TreeDelta::default())
                    } else {
                        if r.is_ok() {
                            for i in 0..len {
                                model.insert(lblk + i, (e.pblk + i as u64, false));
                            }
                        }
                        r
                    }
                }
                Op::Remove { .. } | Op::RemoveToEnd { .. } => {
                    let (start, end) = match *op {
                        Op::Remove { start, len } => (start, start + len),
                        Op::RemoveToEnd { start } => (start, u32::MAX),
                        _ => unreachable!(),
                    };
                    match remove_range_with(&mut root, &mut st, start, end, new_max) {
                        Ok((runs, d)) => {
                            let keys: Vec<u32> = model.range(start..end).map(|(k, _)| *k).collect();
                            let mut expected: Vec<u64> = keys.iter().map(|k| model[k].0).collect();
                            expected.sort_unstable();
                            assert_eq!(runs_to_sorted(&runs), expected, "step {step}");
                            for k in keys {
                                model.remove(&k);
                            }
                            Ok(d)
                        }
                        Err(e) => Err(e),
                    }
                }
                Op::MarkWritten { start, len } => {
                    let r = mark_written_with(&mut root, &mut st, start, len, new_max);
                    if r.is_ok() {
                        for (_, v) in model.range_mut(start..start + len) {
                            v.1 = false;
                        }
                    }
                    r
                }
            };
            st.fail_in = None;
            let too_big = matches!(result, Err(FsError::TooBig(_)));
            match result {
                Ok(d) => {
                    tree_count += d.blocks_allocated as i64 - d.blocks_freed as i64;
                }
                // Injected ENOSPC, or (tiny nodes only) the depth limit: nothing changed.
                Err(FsError::NoSpace(_)) | Err(FsError::TooBig(_))
                    if injected || (too_big && new_max < 8) =>
                {
                    assert_eq!(root, before_root, "step {step}: root changed on failure");
                    assert_eq!(st.in_use, before_blocks, "step {step}: blocks leaked");
                }
                Err(e) => panic!("step {step} {op:?}: {e}"),
            }
            st.end_tx();
            assert_consistent(&root, &mut st, &model);
            assert_eq!(tree_count, st.in_use.len() as i64, "step {step}: delta accounting");
            // Point queries against the model.
            for k in 0..12u32 {
                let l = (step as u32 * 7919 + k * 211) % 2100;
                let got = lookup(&root, &mut st, l).unwrap();
                match model.get(&l) {
                    Some(&(p, u)) => {
                        let g = got.expect("mapped block not found");
                        assert_eq!((g.pblk_of(l), g.unwritten), (Some(p), u));
                    }
                    None => assert_eq!(got, None),
                }
                let next = next_extent_at_or_after(&root, &mut st, l).unwrap();
                match model.range(l..).next() {
                    Some((&k2, &(p, _))) => {
                        let g = next.expect("next extent missing");
                        assert_eq!(g.pblk_of(k2), Some(p));
                        assert!(g.lblk <= k2.max(l));
                    }
                    None => assert_eq!(next, None),
                }
            }
        }
        // Tear down: everything is freed.
        let (_, d) = remove_range(&mut root, &mut st, 0, u32::MAX).unwrap();
        tree_count -= d.blocks_freed as i64;
        assert_eq!(tree_count, 0);
        assert!(st.in_use.is_empty());
        assert_eq!(root, new_root());
    }

    fn find_tool(name: &str) -> Option<std::path::PathBuf> {
        let mut dirs: Vec<std::path::PathBuf> =
            std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
        dirs.extend(["/sbin", "/usr/sbin", "/usr/local/sbin"].map(std::path::PathBuf::from));
        dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
    }

    /// Run a tool; (success, stdout + stderr).
    fn run_tool(tool: &std::path::Path, args: &[&str]) -> (bool, String) {
        let out = std::process::Command::new(tool).args(args).output().expect("run tool");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// Build a depth-2 tree (with unwritten extents, punched holes and a removed range) for
    /// an empty file of a real ext4 image made by mke2fs, install it with debugfs, and have
    /// `e2fsck -fn` check the result.
    #[test]
    fn e2fsck_accepts_our_tree() {
        use std::os::unix::fs::FileExt;

        let (Some(mke2fs), Some(e2fsck), Some(debugfs)) =
            (find_tool("mke2fs"), find_tool("e2fsck"), find_tool("debugfs"))
        else {
            eprintln!("skipping e2fsck cross-check: mke2fs, e2fsck or debugfs not found");
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("img");
        let img_s = img.to_str().expect("utf-8 path");
        let (ok, out) = run_tool(
            &mke2fs,
            &[
                "-q",
                "-F",
                "-t",
                "ext4",
                "-b",
                "4096",
                "-O",
                "^metadata_csum,^resize_inode,^uninit_bg",
                img_s,
                "256M",
            ],
        );
        assert!(ok, "mke2fs: {out}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").expect("write empty file");
        let (ok, out) = run_tool(&debugfs, &["-w", "-R", &format!("write {} f", empty.display()), img_s]);
        assert!(ok, "debugfs write: {out}");
        let (_, out) = run_tool(&debugfs, &["-R", "stat f", img_s]);
        let ino: u32 = out
            .split("Inode:")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no inode number in: {out}"));
        // A run of free blocks for data and tree blocks.
        let (_, out) = run_tool(&debugfs, &["-R", "ffb 20000 1000", img_s]);
        let free: Vec<u64> = out
            .split("Free blocks found:")
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let mut best = (0u64, 0u64);
        let mut i = 0;
        while i < free.len() {
            let mut j = i;
            while j + 1 < free.len() && free[j + 1] == free[j] + 1 {
                j += 1;
            }
            if (j - i + 1) as u64 > best.1 {
                best = (free[i], (j - i + 1) as u64);
            }
            i = j + 1;
        }
        let (base, run) = best;
        assert!(run >= 6600, "no free run of 6600 blocks: {best:?}");

        let mut st = MemStore::starting_at(base + 6500);
        let mut root = new_root();
        for i in 0..3000u32 {
            let e = m(2 * i, base + 2 * i as u64, 1, i % 7 == 3);
            insert(&mut root, &mut st, e, base).expect("insert");
        }
        insert(&mut root, &mut st, m(7000, base + 6000, 400, false), base).expect("insert");
        remove_range(&mut root, &mut st, 7100, 7110).expect("punch");
        remove_range(&mut root, &mut st, 1000, 1400).expect("remove");
        remove_range(&mut root, &mut st, 3001, 3003).expect("remove");
        mark_written(&mut root, &mut st, 0, 600).expect("mark_written");
        st.end_tx();
        check(&root, &mut st).expect("check");
        assert!(depth(&root).expect("depth") >= 2);

        // Install: tree blocks into the image, root/size/i_blocks into the inode, and the
        // used blocks into the bitmap.
        let tree = tree_blocks(&root, &mut st).expect("tree_blocks");
        let file = std::fs::OpenOptions::new().write(true).open(&img).expect("open image");
        for &b in &tree {
            let buf = st.read_block(b).expect("tree block");
            file.write_at(&buf.read()[..], b * 4096).expect("write tree block");
        }
        file.sync_all().expect("sync");
        drop(file);
        let exts = all_extents(&root, &mut st);
        let data: u64 = exts.iter().map(|e| e.len as u64).sum();
        let end = exts.last().map(|e| e.end()).expect("extents");
        let mut cmds = String::new();
        for w in 0..15 {
            let v = u32::from_le_bytes(root[4 * w..4 * w + 4].try_into().expect("4 bytes"));
            let field = match w {
                12 => "block[IND]".to_string(),
                13 => "block[DIND]".to_string(),
                14 => "block[TIND]".to_string(),
                _ => format!("block[{w}]"),
            };
            cmds.push_str(&format!("sif <{ino}> {field} {v:#x}\n"));
        }
        cmds.push_str(&format!("sif <{ino}> size {}\n", end * 4096));
        cmds.push_str(&format!("sif <{ino}> blocks {}\n", (data + tree.len() as u64) * 8));
        for e in &exts {
            cmds.push_str(&format!("setb {} {}\n", e.pblk, e.len));
        }
        for &b in &tree {
            cmds.push_str(&format!("setb {b}\n"));
        }
        let cmdfile = dir.path().join("cmds");
        std::fs::write(&cmdfile, &cmds).expect("write cmds");
        let cmdfile_s = cmdfile.to_str().expect("utf-8 path");
        let (ok, out) = run_tool(&debugfs, &["-w", "-f", cmdfile_s, img_s]);
        assert!(ok, "debugfs: {out}");

        // debugfs's setb leaves the free-block counters alone: take the counted values from
        // a first e2fsck run, then require a clean second run.
        let (_, out) = run_tool(&e2fsck, &["-fn", img_s]);
        let mut fix = String::new();
        for line in out.lines() {
            let Some(rest) = line.strip_prefix("Free blocks count wrong") else {
                continue;
            };
            let counted: Option<u64> =
                rest.split("counted=").nth(1).and_then(|s| s.trim_end_matches([')', '.']).parse().ok());
            let Some(counted) = counted else { continue };
            if let Some(g) = rest.strip_prefix(" for group #") {
                let g: u32 = g.split_whitespace().next().and_then(|s| s.parse().ok()).expect("group number");
                fix.push_str(&format!("set_bg {g} free_blocks_count {counted}\n"));
            } else {
                fix.push_str(&format!("ssv free_blocks_count {counted}\n"));
            }
        }
        if !fix.is_empty() {
            std::fs::write(&cmdfile, &fix).expect("write cmds");
            let (ok, out2) = run_tool(&debugfs, &["-w", "-f", cmdfile_s, img_s]);
            assert!(ok, "debugfs: {out2}");
        }
        let (ok, out) = run_tool(&e2fsck, &["-fn", img_s]);
        assert!(ok, "e2fsck -fn found problems:\n{out}\nfirst run fixes:\n{fix}");
        // And e2fsck saw our blocks as the file's.
        let (_, out) = run_tool(&debugfs, &["-R", &format!("stat <{ino}>"), img_s]);
        assert!(out.contains(&format!("Blockcount: {}", (data + tree.len() as u64) * 8)), "{out}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Tiny nodes (3 to 6 entries) give deep trees with few extents.
        #[test]
        fn random_ops_small_nodes(
            new_max in 3u16..=6,
            ops in proptest::collection::vec(op_strategy(1500), 1..400),
        ) {
            run_ops(&ops, new_max);
        }

        /// Real node size.
        #[test]
        fn random_ops_full_nodes(ops in proptest::collection::vec(op_strategy(2000), 1..300)) {
            run_ops(&ops, max_entries_for(4096));
        }
    }
}
