//! ext4 extent trees (the block map of inodes with `EXT4_EXTENTS_FL`).
//!
//! The root node lives in the inode's 60-byte `i_block` (12-byte header + 4 entries); every
//! other node is a whole 4096-byte block (12-byte header + 340 entries, no checksum tail).
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
//! Damaged trees (bad magic, too many entries, depth beyond 5 or inconsistent between
//! levels, a block referenced twice, ...) give [`FsError::Corrupt`] with a message starting
//! with "extent tree:", never a panic or an endless loop.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use cjfs_journal::Buffer;

use crate::error::{FsError, FsResult};
use crate::meta::MetaStore;

/// Size of the inode's `i_block` area holding the root node.
pub const ROOT_BYTES: usize = 60;
/// `eh_magic` of every node.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// Entries of the root node.
pub const ROOT_MAX_ENTRIES: u16 = 4;
/// Entries of a non-root node (a 4096-byte block without checksum tail).
pub const BLOCK_MAX_ENTRIES: u16 = 340;
/// Deepest tree allowed (the kernel's `EXT4_MAX_EXTENT_DEPTH`).
pub const MAX_DEPTH: u16 = 5;
/// Longest written (initialized) extent.
pub const MAX_INIT_LEN: u32 = 32768;
/// Longest unwritten extent.
pub const MAX_UNWRITTEN_LEN: u32 = 32767;
/// Exclusive upper bound of mappable logical blocks (`EXT_MAX_BLOCKS`).
pub const MAX_LBLK_END: u32 = u32::MAX;

const HDR: usize = 12;
const ENT: usize = 12;
const BLOCK_BYTES: usize = 4096;
const PBLK_LIMIT: u64 = 1 << 48;
/// `ee_len` values above this mark an unwritten extent.
const UNWRITTEN_BIAS: u32 = 32768;

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
        self.contains(lblk)
            .then(|| self.pblk + (lblk - self.lblk) as u64)
    }

    /// The longest extent of this kind (written or unwritten).
    pub fn max_len(unwritten: bool) -> u32 {
        if unwritten {
            MAX_UNWRITTEN_LEN
        } else {
            MAX_INIT_LEN
        }
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
        let raw = if m.unwritten {
            m.len + UNWRITTEN_BIAS
        } else {
            m.len
        };
        Ent {
            key: m.lblk,
            raw_len: raw as u16,
            ptr: m.pblk,
        }
    }

    fn index(key: u32, child: u64) -> Ent {
        Ent {
            key,
            raw_len: 0,
            ptr: child,
        }
    }

    fn mapping(&self) -> Mapping {
        let raw = self.raw_len as u32;
        let (len, unwritten) = if raw > UNWRITTEN_BIAS {
            (raw - UNWRITTEN_BIAS, true)
        } else {
            (raw, false)
        };
        Mapping {
            lblk: self.key,
            pblk: self.ptr,
            len,
            unwritten,
        }
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
        self.ents
            .first()
            .map(|e| e.key)
            .ok_or_else(|| corrupt(loc, "empty node"))
    }
}

#[derive(Debug, Clone, Copy)]
struct Header {
    entries: u16,
    max: u16,
    depth: u16,
    generation: u32,
}

fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn wr16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}

fn wr32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

/// Entries a node area of `bytes` bytes can hold.
fn capacity(bytes: usize) -> usize {
    bytes.saturating_sub(HDR) / ENT
}

/// Parse and validate a node header; `b` is the whole node area (60 or 4096 bytes).
fn parse_header(b: &[u8], loc: Loc) -> FsResult<Header> {
    if b.len() < HDR {
        return Err(corrupt(loc, "node area too small"));
    }
    let magic = rd16(b, 0);
    if magic != EXTENT_MAGIC {
        return Err(corrupt(loc, format!("bad magic {magic:#06x}")));
    }
    let h = Header {
        entries: rd16(b, 2),
        max: rd16(b, 4),
        depth: rd16(b, 6),
        generation: rd32(b, 8),
    };
    let cap = capacity(b.len());
    if h.max == 0 || h.max as usize > cap {
        return Err(corrupt(loc, format!("eh_max {} (capacity {cap})", h.max)));
    }
    if h.entries > h.max {
        return Err(corrupt(
            loc,
            format!("{} entries exceed eh_max {}", h.entries, h.max),
        ));
    }
    if h.depth > MAX_DEPTH {
        return Err(corrupt(loc, format!("depth {} exceeds {MAX_DEPTH}", h.depth)));
    }
    Ok(h)
}

/// Check a node's depth against the one its parent implies.
fn check_depth(h: &Header, expect: Option<u16>, loc: Loc) -> FsResult<()> {
    match expect {
        Some(d) if d != h.depth => Err(corrupt(
            loc,
            format!("depth {} where {d} was expected", h.depth),
        )),
        _ => Ok(()),
    }
}

fn key_at(b: &[u8], i: usize) -> u32 {
    rd32(b, HDR + i * ENT)
}

fn ent_at(b: &[u8], i: usize, leaf: bool) -> Ent {
    let o = HDR + i * ENT;
    if leaf {
        Ent {
            key: rd32(b, o),
            raw_len: rd16(b, o + 4),
            ptr: (rd16(b, o + 6) as u64) << 32 | rd32(b, o + 8) as u64,
        }
    } else {
        Ent {
            key: rd32(b, o),
            raw_len: 0,
            ptr: (rd16(b, o + 8) as u64) << 32 | rd32(b, o + 4) as u64,
        }
    }
}

fn put_ent(b: &mut [u8], i: usize, leaf: bool, e: &Ent) {
    let o = HDR + i * ENT;
    wr32(b, o, e.key);
    if leaf {
        wr16(b, o + 4, e.raw_len);
        wr16(b, o + 6, (e.ptr >> 32) as u16);
        wr32(b, o + 8, e.ptr as u32);
    } else {
        wr32(b, o + 4, e.ptr as u32);
        wr16(b, o + 8, (e.ptr >> 32) as u16);
        wr16(b, o + 10, 0);
    }
}

/// Number of the first `n` entries whose key is `<= lblk` (entries are sorted).
fn count_le(b: &[u8], n: usize, lblk: u32) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if key_at(b, mid) <= lblk {
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
            format!(
                "internal: {} entries do not fit (eh_max {}, capacity {cap})",
                node.ents.len(),
                node.max
            ),
        ));
    }
    wr16(b, 0, EXTENT_MAGIC);
    wr16(b, 2, node.ents.len() as u16);
    wr16(b, 4, node.max);
    wr16(b, 6, node.depth);
    wr32(b, 8, node.generation);
    let leaf = node.depth == 0;
    for (i, e) in node.ents.iter().enumerate() {
        put_ent(b, i, leaf, e);
    }
    b[HDR + node.ents.len() * ENT..HDR + cap * ENT].fill(0);
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
        return Err(FsError::Invalid(format!(
            "extent tree: bad physical block {} (+{})",
            m.pblk, m.len
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Staged operation.
// ---------------------------------------------------------------------------------------

/// A private copy of a tree block being modified.
struct Staged {
    buf: Arc<Buffer>,
    data: Box<[u8; BLOCK_BYTES]>,
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
    /// `eh_max` of new non-root nodes (always [`BLOCK_MAX_ENTRIES`] outside tests).
    new_max: u16,
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
    fn new(store: &'s mut M, root: &[u8; ROOT_BYTES], goal: u64, new_max: u16) -> Self {
        Tx {
            store,
            root: *root,
            staged: BTreeMap::new(),
            allocated: Vec::new(),
            freed: Vec::new(),
            goal,
            new_max,
        }
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
                let buf = self.store.read_block(b)?;
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
            return Err(corrupt(
                loc,
                format!("depth {} where {d} was expected", node.depth),
            ));
        }
        if node.ents.is_empty() && (loc != Loc::Root || node.depth > 0) {
            return Err(corrupt(loc, "empty non-root or index node"));
        }
        Ok(node)
    }

    fn stage(&mut self, b: u64) -> FsResult<&mut Staged> {
        use std::collections::btree_map::Entry;
        match self.staged.entry(b) {
            Entry::Occupied(o) => Ok(o.into_mut()),
            Entry::Vacant(v) => {
                if b == 0 || b >= PBLK_LIMIT {
                    return Err(corrupt(Loc::Blk(b), "node pointer out of range"));
                }
                let buf = self.store.read_block(b)?;
                let mut data = Box::new([0u8; BLOCK_BYTES]);
                data.copy_from_slice(&buf.read()[..]);
                Ok(v.insert(Staged {
                    buf,
                    data,
                    dirty: false,
                }))
            }
        }
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
        self.staged.insert(
            b,
            Staged {
                buf,
                data: Box::new([0u8; BLOCK_BYTES]),
                dirty: true,
            },
        );
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
        let Tx {
            store,
            root,
            staged,
            allocated,
            freed,
            ..
        } = self;
        let freed_set: HashSet<u64> = freed.iter().copied().collect();
        let new_set: HashSet<u64> = allocated.iter().copied().collect();
        for (b, s) in &staged {
            if s.dirty && !new_set.contains(b) && !freed_set.contains(b) {
                if let Err(e) = store.write_access(&s.buf) {
                    for &nb in &allocated {
                        let _ = store.free_meta_block(nb);
                    }
                    return Err(e);
                }
            }
        }
        for (b, s) in &staged {
            if s.dirty && !freed_set.contains(b) {
                s.buf.write()[..].copy_from_slice(&s.data[..]);
            }
        }
        *root_out = root;
        for &b in &freed {
            store.free_meta_block(b)?;
        }
        Ok(TreeDelta {
            blocks_allocated: allocated.len() as u32,
            blocks_freed: freed.len() as u32,
        })
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
        loop {
            let step = self.with_bytes(loc, |b| -> FsResult<Descend> {
                let h = parse_header(b, loc)?;
                check_depth(&h, expect, loc)?;
                let c = count_le(b, h.entries as usize, lblk);
                if c == 0 {
                    return Ok(Descend::Done(None));
                }
                if h.depth == 0 {
                    Ok(Descend::Done(Some(ent_at(b, c - 1, true))))
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
        let step = self.with_bytes(loc, |b| -> FsResult<GtStep> {
            let h = parse_header(b, loc)?;
            check_depth(&h, expect, loc)?;
            let n = h.entries as usize;
            let c = count_le(b, n, lblk);
            if h.depth == 0 {
                return Ok(GtStep::Found((c < n).then(|| ent_at(b, c, true))));
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
            let i = node
                .ents
                .partition_point(|x| x.key <= e.key)
                .saturating_sub(1);
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
                    return Err(FsError::TooBig(format!(
                        "extent tree: depth limit {MAX_DEPTH} reached"
                    )));
                }
                let b = self.alloc()?;
                let child = Node {
                    depth: node.depth,
                    max: self.new_max,
                    generation: 0,
                    ents: node.ents,
                };
                let (first, split) = self.finish(Loc::Blk(b), child, pos)?;
                let mut ents = vec![Ent::index(first, b)];
                if let Some((k, sb)) = split {
                    ents.push(Ent::index(k, sb));
                }
                let root = Node {
                    depth: node.depth + 1,
                    max: ROOT_MAX_ENTRIES,
                    generation: node.generation,
                    ents,
                };
                self.save(Loc::Root, &root)?;
                Ok((first, None))
            }
            Loc::Blk(_) => {
                // Appending: keep this node full and start a new one with the new entry
                // (sequential writes then leave full nodes). Otherwise split in the middle.
                let mut at = if pos + 1 == n { n - 1 } else { n / 2 };
                at = at.max(n.saturating_sub(self.new_max as usize)).max(1);
                let right = node.ents.split_off(at);
                let b = self.alloc()?;
                let rnode = Node {
                    depth: node.depth,
                    max: self.new_max,
                    generation: 0,
                    ents: right,
                };
                self.save(Loc::Blk(b), &rnode)?;
                self.save(loc, &node)?;
                Ok((node.first_key(loc)?, Some((rnode.first_key(loc)?, b))))
            }
        }
    }

    /// Replace the leaf entry starting at `old_key` with `new` (whose start may differ; the
    /// caller keeps the order), fixing the index keys above it.
    fn replace(&mut self, old_key: u32, new: &Mapping) -> FsResult<()> {
        self.replace_rec(Loc::Root, None, old_key, Ent::leaf(new))
            .map(|_| ())
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
            let i = node
                .ents
                .partition_point(|e| e.key <= old_key)
                .saturating_sub(1);
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
                let merged = Mapping {
                    len: p.len + m.len + n.len,
                    ..p
                };
                self.replace(p.lblk, &merged)
            }
            (Some(p), _) => {
                let merged = Mapping {
                    len: p.len + m.len,
                    ..p
                };
                self.replace(p.lblk, &merged)
            }
            (None, Some(n)) => {
                let merged = Mapping {
                    len: m.len + n.len,
                    ..m
                };
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
        let mut r = Removal {
            start,
            end,
            runs: Vec::new(),
            seen: HashSet::new(),
        };
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
                    out.push(Ent::leaf(&Mapping {
                        len: (cs - s) as u32,
                        ..m
                    }));
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
            let new_root = Node {
                depth: root.depth - 1,
                max: ROOT_MAX_ENTRIES,
                generation: root.generation,
                ents: all,
            };
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
                return Err(corrupt(
                    loc,
                    format!("keys not increasing ({} then {})", w[0].key, w[1].key),
                ));
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
                    return Err(corrupt(
                        loc,
                        format!("extent {}+{} crosses the bound {hi}", m.lblk, m.len),
                    ));
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
            self.check_rec(
                Loc::Blk(e.ptr),
                Some(node.depth - 1),
                (Some(e.key), chi),
                seen,
                prev_end,
            )?;
        }
        Ok(())
    }
}

/// Run a mutating operation on a staged copy; commit on success, roll back on failure.
fn run<M, T>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    goal: u64,
    new_max: u16,
    f: impl FnOnce(&mut Tx<'_, M>) -> FsResult<T>,
) -> FsResult<(T, TreeDelta)>
where
    M: MetaStore + ?Sized,
{
    let mut tx = Tx::new(store, root, goal, new_max);
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
    f: impl FnOnce(&mut Tx<'_, M>) -> FsResult<T>,
) -> FsResult<T>
where
    M: MetaStore + ?Sized,
{
    let mut tx = Tx::new(store, root, 0, BLOCK_MAX_ENTRIES);
    f(&mut tx)
}

// ---------------------------------------------------------------------------------------
// Public API.
// ---------------------------------------------------------------------------------------

/// Make `root` an empty tree: a depth-0 root node with no entries.
pub fn init_root(root: &mut [u8; ROOT_BYTES]) {
    root.fill(0);
    wr16(root, 0, EXTENT_MAGIC);
    wr16(root, 4, ROOT_MAX_ENTRIES);
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
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    read(root, store, |tx| {
        Ok(tx
            .find_le(lblk)?
            .map(|e| e.mapping())
            .filter(|m| m.contains(lblk)))
    })
}

/// The whole extent containing `lblk`, else the first extent starting after it, else `None`
/// (`SEEK_DATA`, skipping holes of sparse files).
pub fn next_extent_at_or_after<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    read(root, store, |tx| tx.at_or_after(lblk))
}

/// The last extent starting at or before `lblk` (whether or not it reaches `lblk`): the
/// natural allocation goal for `lblk` is `pblk + (lblk - m.lblk)`.
pub fn extent_at_or_before<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    lblk: u32,
) -> FsResult<Option<Mapping>> {
    read(root, store, |tx| Ok(tx.find_le(lblk)?.map(|e| e.mapping())))
}

/// The whole extents overlapping `[start, end)`, in logical order.
pub fn extents_in_range<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    start: u32,
    end: u64,
) -> FsResult<Vec<Mapping>> {
    read(root, store, |tx| {
        let mut out = Vec::new();
        if (start as u64) < end {
            tx.collect_range(Loc::Root, None, (start as u64, end), u64::MAX, &mut out)?;
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
    m: Mapping,
    goal: u64,
) -> FsResult<TreeDelta> {
    insert_with(root, store, m, goal, BLOCK_MAX_ENTRIES)
}

fn insert_with<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    m: Mapping,
    goal: u64,
    new_max: u16,
) -> FsResult<TreeDelta> {
    validate_new(&m)?;
    run(root, store, goal, new_max, |tx| tx.insert_merge(m)).map(|((), d)| d)
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
    start: u32,
    end: u32,
) -> FsResult<(Vec<(u64, u32)>, TreeDelta)> {
    remove_range_with(root, store, start, end, BLOCK_MAX_ENTRIES)
}

fn remove_range_with<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    start: u32,
    end: u32,
    new_max: u16,
) -> FsResult<(Vec<(u64, u32)>, TreeDelta)> {
    if start >= end {
        parse_header(root, Loc::Root)?;
        return Ok((Vec::new(), TreeDelta::default()));
    }
    run(root, store, 0, new_max, |tx| {
        tx.remove_space(start as u64, end as u64)
    })
}

/// Mark the unwritten blocks of `[lblk, lblk + len)` written (after their data has been
/// written). An unwritten extent partly inside the range is split into up to three
/// extents; converted pieces merge with contiguous written neighbours. Written blocks and
/// holes in the range are left alone.
pub fn mark_written<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    lblk: u32,
    len: u32,
) -> FsResult<TreeDelta> {
    mark_written_with(root, store, lblk, len, BLOCK_MAX_ENTRIES)
}

fn mark_written_with<M: MetaStore + ?Sized>(
    root: &mut [u8; ROOT_BYTES],
    store: &mut M,
    lblk: u32,
    len: u32,
    new_max: u16,
) -> FsResult<TreeDelta> {
    if len == 0 {
        parse_header(root, Loc::Root)?;
        return Ok(TreeDelta::default());
    }
    run(root, store, 0, new_max, |tx| {
        tx.mark_written(lblk as u64, lblk as u64 + len as u64)
    })
    .map(|((), d)| d)
}

/// Call `f` on every extent, in logical order.
pub fn for_each_extent<M: MetaStore + ?Sized>(
    root: &[u8; ROOT_BYTES],
    store: &mut M,
    mut f: impl FnMut(Mapping),
) -> FsResult<()> {
    read(root, store, |tx| {
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
) -> FsResult<Vec<u64>> {
    read(root, store, |tx| {
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
pub fn check<M: MetaStore + ?Sized>(root: &[u8; ROOT_BYTES], store: &mut M) -> FsResult<()> {
    read(root, store, |tx| {
        let mut seen = HashSet::new();
        let mut prev_end = 0u64;
        tx.check_rec(
            Loc::Root,
            None,
            (None, MAX_LBLK_END as u64),
            &mut seen,
            &mut prev_end,
        )
    })
}
