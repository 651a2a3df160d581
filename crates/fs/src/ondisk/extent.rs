//! Extent tree nodes: a 12-byte header followed by 12-byte index entries (interior nodes)
//! or extents (leaves). The root lives in the inode's 60-byte `i_block` (4 entries), other
//! nodes fill a block (340 entries in 4 KiB).
//!
//! The one codec of the format: the header and entry readers and writers below work in place
//! on a node's bytes (the tree code searches a node through them without decoding it
//! whole), and [`ExtentNode`] decodes and encodes whole nodes with them. Walking and
//! modifying the tree is `extent_tree`'s business.
//!
//! With `metadata_csum` a tree block ends its entry area (`eh_max` entries) with a 4-byte
//! `ext4_extent_tail`: CRC32C from the owning inode's seed over the block up to the tail.
//! In a 4 KiB block 340 entries leave exactly those 4 bytes, so `eh_max` does not change.

use crate::error::{FsError, FsResult};
use crate::ondisk::csum::crc32c;
use crate::ondisk::superblock::{get_u16, get_u32, put_u16, put_u32};

/// `eh_magic`.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// Size of the header and of each entry.
pub const ENTRY_SIZE: usize = 12;
/// Maximum tree depth the kernel accepts.
pub const MAX_DEPTH: u16 = 5;
/// Entries in the root (in `i_block`).
pub const ROOT_MAX_ENTRIES: u16 = 4;
/// Entries in a 4 KiB block.
pub const BLOCK_MAX_ENTRIES: u16 = 340;
/// Longest initialized extent.
pub const MAX_INIT_LEN: u32 = 32768;
/// Longest unwritten (uninitialized) extent.
pub const MAX_UNWRITTEN_LEN: u32 = 32767;

/// `eh_magic` (u16).
pub const EH_MAGIC: usize = 0;
/// `eh_entries` (u16).
pub const EH_ENTRIES: usize = 2;
/// `eh_max` (u16).
pub const EH_MAX: usize = 4;
/// `eh_depth` (u16).
pub const EH_DEPTH: usize = 6;
/// `eh_generation` (u32).
pub const EH_GENERATION: usize = 8;
/// `ei_block` / `ee_block` (u32).
pub const E_BLOCK: usize = 0;
/// `ei_leaf_lo` (u32).
pub const EI_LEAF_LO: usize = 4;
/// `ei_leaf_hi` (u16).
pub const EI_LEAF_HI: usize = 8;
/// `ee_len` (u16).
pub const EE_LEN: usize = 4;
/// `ee_start_hi` (u16).
pub const EE_START_HI: usize = 6;
/// `ee_start_lo` (u32).
pub const EE_START_LO: usize = 8;

/// Entries that fit a node of `bytes` bytes (60 → 4, 4096 → 340).
pub const fn max_entries_for(bytes: usize) -> u16 {
    if bytes < ENTRY_SIZE { 0 } else { ((bytes - ENTRY_SIZE) / ENTRY_SIZE) as u16 }
}

/// Entries in the root node.
pub const fn root_max() -> u16 {
    ROOT_MAX_ENTRIES
}

/// Entries in a block node of `block_size` bytes.
pub const fn block_max(block_size: usize) -> u16 {
    max_entries_for(block_size)
}

/// A leaf entry: `len` blocks starting at logical block `logical` map to physical `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extent {
    /// First logical block.
    pub logical: u32,
    /// Number of blocks (1..=32768 initialized, 1..=32767 unwritten).
    pub len: u32,
    /// Unwritten (preallocated, reads as zeros).
    pub unwritten: bool,
    /// First physical block (48 bits).
    pub start: u64,
}

impl Extent {
    /// Logical block after the last one mapped.
    pub fn logical_end(&self) -> u64 {
        self.logical as u64 + self.len as u64
    }
    /// Physical block of logical block `lblk` if this extent maps it.
    pub fn map(&self, lblk: u32) -> Option<u64> {
        if lblk >= self.logical && (lblk as u64) < self.logical_end() {
            Some(self.start + (lblk - self.logical) as u64)
        } else {
            None
        }
    }
    /// The raw `ee_len`.
    pub fn raw_len(&self) -> u16 {
        if self.unwritten { (self.len + MAX_INIT_LEN) as u16 } else { self.len as u16 }
    }
}

/// An index entry: the subtree at physical block `leaf` covers logical blocks from
/// `logical` up to the next index entry's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtentIndex {
    /// First logical block covered.
    pub logical: u32,
    /// Physical block of the child node (48 bits).
    pub leaf: u64,
}

/// The entries of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEntries {
    /// Depth 0: extents.
    Leaf(Vec<Extent>),
    /// Depth > 0: index entries.
    Index(Vec<ExtentIndex>),
}

/// One extent tree node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtentNode {
    /// `eh_max`: capacity of the node.
    pub max: u16,
    /// `eh_depth`: 0 for leaves.
    pub depth: u16,
    /// `eh_generation`.
    pub generation: u32,
    /// The entries (`eh_entries` of them); leaves iff `depth == 0`.
    pub entries: NodeEntries,
}

fn corrupt(msg: String) -> FsError {
    FsError::Corrupt(format!("extent node: {msg}"))
}

/// A node header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeHeader {
    /// `eh_entries`.
    pub entries: u16,
    /// `eh_max`.
    pub max: u16,
    /// `eh_depth`: 0 for leaves.
    pub depth: u16,
    /// `eh_generation`.
    pub generation: u32,
}

/// Read and check the header of the node in `b` (the 60-byte `i_block` or a whole tree
/// block): the magic, `eh_max` against the size, `eh_entries <= eh_max`, `eh_depth <= 5`.
/// The error is the problem alone; the caller says where the node is.
pub fn read_header(b: &[u8]) -> Result<NodeHeader, String> {
    if b.len() < ENTRY_SIZE {
        return Err(format!("{} bytes given, at least 12 needed", b.len()));
    }
    let magic = get_u16(b, EH_MAGIC);
    if magic != EXTENT_MAGIC {
        return Err(format!("eh_magic = 0x{magic:04x} (expected 0xf30a)"));
    }
    let h = NodeHeader {
        entries: get_u16(b, EH_ENTRIES),
        max: get_u16(b, EH_MAX),
        depth: get_u16(b, EH_DEPTH),
        generation: get_u32(b, EH_GENERATION),
    };
    let cap = max_entries_for(b.len());
    if h.max == 0 || h.max > cap {
        return Err(format!("eh_max = {} (a {}-byte node holds {cap})", h.max, b.len()));
    }
    if h.entries > h.max {
        return Err(format!("eh_entries = {} exceeds eh_max = {}", h.entries, h.max));
    }
    if h.depth > MAX_DEPTH {
        return Err(format!("eh_depth = {} (at most {MAX_DEPTH})", h.depth));
    }
    Ok(h)
}

/// Write a header (with the magic) at the start of `b`.
pub fn write_header(b: &mut [u8], h: &NodeHeader) {
    put_u16(b, EH_MAGIC, EXTENT_MAGIC);
    put_u16(b, EH_ENTRIES, h.entries);
    put_u16(b, EH_MAX, h.max);
    put_u16(b, EH_DEPTH, h.depth);
    put_u32(b, EH_GENERATION, h.generation);
}

/// Bytes of entry `i` of the node in `b`.
fn entry(b: &[u8], i: usize) -> &[u8] {
    &b[ENTRY_SIZE * (i + 1)..ENTRY_SIZE * (i + 2)]
}

fn entry_mut(b: &mut [u8], i: usize) -> &mut [u8] {
    &mut b[ENTRY_SIZE * (i + 1)..ENTRY_SIZE * (i + 2)]
}

/// The first logical block of entry `i` (extent or index alike).
pub fn entry_key(b: &[u8], i: usize) -> u32 {
    get_u32(entry(b, i), E_BLOCK)
}

/// Length and unwritten flag of a raw `ee_len` (above 32768: unwritten, biased by 32768).
pub fn split_raw_len(raw: u16) -> (u32, bool) {
    let raw = u32::from(raw);
    if raw > MAX_INIT_LEN { (raw - MAX_INIT_LEN, true) } else { (raw, false) }
}

/// Extent `i` of the leaf in `b`, as stored (a zero length is the caller's to refuse).
pub fn read_extent(b: &[u8], i: usize) -> Extent {
    let e = entry(b, i);
    let (len, unwritten) = split_raw_len(get_u16(e, EE_LEN));
    Extent {
        logical: get_u32(e, E_BLOCK),
        len,
        unwritten,
        start: u64::from(get_u32(e, EE_START_LO)) | u64::from(get_u16(e, EE_START_HI)) << 32,
    }
}

/// Index entry `i` of the interior node in `b`.
pub fn read_index(b: &[u8], i: usize) -> ExtentIndex {
    let e = entry(b, i);
    ExtentIndex {
        logical: get_u32(e, E_BLOCK),
        leaf: u64::from(get_u32(e, EI_LEAF_LO)) | u64::from(get_u16(e, EI_LEAF_HI)) << 32,
    }
}

/// Write extent `i` of the leaf in `b`.
pub fn write_extent(b: &mut [u8], i: usize, x: &Extent) {
    let e = entry_mut(b, i);
    put_u32(e, E_BLOCK, x.logical);
    put_u16(e, EE_LEN, x.raw_len());
    put_u16(e, EE_START_HI, (x.start >> 32) as u16);
    put_u32(e, EE_START_LO, x.start as u32);
}

/// Write index entry `i` of the interior node in `b` (`ei_unused` left as it is).
pub fn write_index(b: &mut [u8], i: usize, x: &ExtentIndex) {
    let e = entry_mut(b, i);
    put_u32(e, E_BLOCK, x.logical);
    put_u32(e, EI_LEAF_LO, x.leaf as u32);
    put_u16(e, EI_LEAF_HI, (x.leaf >> 32) as u16);
}

impl ExtentNode {
    /// An empty leaf with room for `max` entries.
    pub fn new_leaf(max: u16) -> Self {
        ExtentNode { max, depth: 0, generation: 0, entries: NodeEntries::Leaf(Vec::new()) }
    }

    /// An empty index node at `depth` (> 0) with room for `max` entries.
    pub fn new_index(max: u16, depth: u16) -> Self {
        ExtentNode { max, depth, generation: 0, entries: NodeEntries::Index(Vec::new()) }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match &self.entries {
            NodeEntries::Leaf(v) => v.len(),
            NodeEntries::Index(v) => v.len(),
        }
    }

    /// True if the node has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the node is full.
    pub fn is_full(&self) -> bool {
        self.len() >= self.max as usize
    }

    /// The extents, if this is a leaf.
    pub fn extents(&self) -> Option<&[Extent]> {
        match &self.entries {
            NodeEntries::Leaf(v) => Some(v),
            NodeEntries::Index(_) => None,
        }
    }

    /// The index entries, if this is an interior node.
    pub fn indexes(&self) -> Option<&[ExtentIndex]> {
        match &self.entries {
            NodeEntries::Index(v) => Some(v),
            NodeEntries::Leaf(_) => None,
        }
    }

    /// Decode a node from `buf` (the 60-byte `i_block` or a whole tree block). Validates the
    /// magic, `eh_max` against the size, `eh_entries <= eh_max`, `eh_depth <= 5`, extent
    /// lengths, and that entries are sorted and (for leaves) do not overlap.
    pub fn decode(buf: &[u8]) -> FsResult<Self> {
        let NodeHeader { entries, max, depth, generation } = read_header(buf).map_err(corrupt)?;
        let entries = if depth == 0 {
            let mut v: Vec<Extent> = Vec::with_capacity(entries as usize);
            for i in 0..entries as usize {
                let x = read_extent(buf, i);
                let len = x.len;
                if len == 0 {
                    return Err(corrupt(format!("extent {i}: ee_len = 0")));
                }
                if x.logical_end() > 1u64 << 32 {
                    return Err(corrupt(format!(
                        "extent {i}: ee_block = {} + ee_len = {len} passes 2^32",
                        x.logical
                    )));
                }
                if let Some(p) = v.last()
                    && (x.logical as u64) < p.logical_end()
                {
                    return Err(corrupt(format!(
                        "extent {i}: ee_block = {} overlaps or precedes the previous extent \
                         ending at {}",
                        x.logical,
                        p.logical_end()
                    )));
                }
                v.push(x);
            }
            NodeEntries::Leaf(v)
        } else {
            let mut v: Vec<ExtentIndex> = Vec::with_capacity(entries as usize);
            for i in 0..entries as usize {
                let x = read_index(buf, i);
                if let Some(p) = v.last()
                    && x.logical <= p.logical
                {
                    return Err(corrupt(format!(
                        "index {i}: ei_block = {} not above the previous {}",
                        x.logical, p.logical
                    )));
                }
                v.push(x);
            }
            NodeEntries::Index(v)
        };
        Ok(ExtentNode { max, depth, generation, entries })
    }

    /// Encode into `out` (60 bytes for the root, a block otherwise): the header and the
    /// entries. Every byte after the last entry is left as it is (stale entries beyond
    /// `eh_entries`, a checksum tail), like the kernel does, so decode → encode gives back
    /// the exact bytes; start from a zeroed buffer for a new node. Entries that do not fit
    /// `out` are dropped (a caller bug: keep `len() <= max` and `max` within the buffer, see
    /// [`max_entries_for`]).
    pub fn encode_into(&self, out: &mut [u8]) {
        let max = self.max.max(self.len() as u16);
        let area = (ENTRY_SIZE * (max as usize + 1)).min(out.len() / ENTRY_SIZE * ENTRY_SIZE);
        if area < ENTRY_SIZE {
            return;
        }
        let fit = area / ENTRY_SIZE - 1;
        let b = &mut out[..area];
        let h = NodeHeader {
            entries: self.len().min(fit) as u16,
            max: self.max,
            depth: self.depth,
            generation: self.generation,
        };
        write_header(b, &h);
        match &self.entries {
            NodeEntries::Leaf(v) => {
                for (i, x) in v.iter().take(fit).enumerate() {
                    write_extent(b, i, x);
                }
            }
            NodeEntries::Index(v) => {
                for (i, x) in v.iter().take(fit).enumerate() {
                    write_index(b, i, x);
                }
            }
        }
    }

    /// Encode as an inode root (`i_block`).
    pub fn to_i_block(&self) -> [u8; 60] {
        let mut b = [0u8; 60];
        self.encode_into(&mut b);
        b
    }

    /// In a leaf, the extent mapping logical block `lblk`.
    pub fn find_extent(&self, lblk: u32) -> Option<&Extent> {
        let v = self.extents()?;
        let i = v.partition_point(|e| e.logical <= lblk);
        let e = v.get(i.checked_sub(1)?)?;
        e.map(lblk).map(|_| e)
    }

    /// In an interior node, the position of the child whose range covers `lblk` (the last
    /// entry with `logical <= lblk`; the first entry if `lblk` precedes all of them).
    pub fn find_index(&self, lblk: u32) -> Option<usize> {
        let v = self.indexes()?;
        if v.is_empty() {
            return None;
        }
        Some(v.partition_point(|e| e.logical <= lblk).saturating_sub(1))
    }
}

/// Offset of the checksum tail of the tree block `b`: after its `eh_max` entries (`None`
/// if the header's `eh_max` leaves no room for it in the block).
pub fn tail_offset(b: &[u8]) -> Option<usize> {
    if b.len() < ENTRY_SIZE {
        return None;
    }
    let off = ENTRY_SIZE * (1 + get_u16(b, EH_MAX) as usize);
    (off + 4 <= b.len()).then_some(off)
}

/// The checksum tree block `b` should carry with inode seed `seed` (`None`: no room).
pub fn block_checksum(seed: u32, b: &[u8]) -> Option<u32> {
    tail_offset(b).map(|off| crc32c(seed, &b[..off]))
}

/// Write the checksum tail of tree block `b` (no-op when `eh_max` leaves no room, which a
/// block written by [`ExtentNode::encode_into`] with `eh_max` <= 340 always has).
pub fn set_block_checksum(seed: u32, b: &mut [u8]) {
    if let (Some(off), Some(c)) = (tail_offset(b), block_checksum(seed, b)) {
        put_u32(b, off, c);
    }
}

/// Check the checksum tail of tree block `b`: `Err((stored, computed))` on a mismatch, or
/// `Err((0, 0))` when the header leaves no room for a tail.
pub fn verify_block_checksum(seed: u32, b: &[u8]) -> Result<(), (u32, u32)> {
    match (tail_offset(b), block_checksum(seed, b)) {
        (Some(off), Some(c)) => {
            let stored = get_u32(b, off);
            if stored == c { Ok(()) } else { Err((stored, c)) }
        }
        _ => Err((0, 0)),
    }
}

/// Split the run of `len` physical blocks at `start` mapped from logical block `logical`
/// into initialized extents of at most 32768 blocks.
pub fn extents_for_run(logical: u32, start: u64, len: u64) -> Vec<Extent> {
    let mut v = Vec::new();
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(MAX_INIT_LEN as u64);
        v.push(Extent {
            logical: logical.wrapping_add(done as u32),
            len: n as u32,
            unwritten: false,
            start: start + done,
        });
        done += n;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_round_trip() {
        let mut n = ExtentNode::new_leaf(root_max());
        n.entries = NodeEntries::Leaf(vec![
            Extent { logical: 0, len: 32768, unwritten: false, start: 0x1_0000_0002 },
            Extent { logical: 40000, len: 10, unwritten: true, start: 77 },
        ]);
        let b = n.to_i_block();
        let d = ExtentNode::decode(&b).unwrap();
        assert_eq!(d, n);
        assert_eq!(d.find_extent(5).unwrap().map(5), Some(0x1_0000_0007));
        assert!(d.find_extent(32768).is_none());
        assert_eq!(d.find_extent(40009).unwrap().start, 77);
    }

    #[test]
    fn rejects_bad_nodes() {
        let mut n = ExtentNode::new_leaf(4);
        n.entries = NodeEntries::Leaf(vec![
            Extent { logical: 10, len: 5, unwritten: false, start: 1 },
            Extent { logical: 12, len: 5, unwritten: false, start: 100 },
        ]);
        let b = n.to_i_block();
        assert!(ExtentNode::decode(&b).is_err());
        let mut b = ExtentNode::new_leaf(4).to_i_block();
        put_u16(&mut b, EH_MAX, 5);
        assert!(ExtentNode::decode(&b).is_err());
        assert_eq!(max_entries_for(4096), 340);
        assert_eq!(max_entries_for(60), 4);
    }
}
