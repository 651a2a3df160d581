//! Where every metadata structure of an image is: the map the mutator aims with.
//!
//! [`Layout::parse`] reads an image held in memory with the decoders of `cjfs-fs` and
//! `cjfs-journal` (superblock, group descriptors, inodes, extent trees, journal superblock and
//! log) and records byte offsets: the group descriptors, bitmaps and inode tables, every inode
//! in use, extent index and leaf blocks, directory blocks with each entry's offset (and
//! whether a block is an htree root), xattr blocks and in-inode xattr areas, and, for an image
//! whose journal needs recovery, every descriptor, data, commit and revoke block of the log.
//! [`Layout::paths`] walks the directory tree for the commands to run.

use std::collections::{BTreeMap, HashSet, VecDeque};

use cjfs_fs::ondisk::dirent::{DE_FILE_TYPE, DE_INODE, DE_NAME, DE_NAME_LEN, DE_REC_LEN};
use cjfs_fs::ondisk::extent::{ExtentNode, NodeEntries};
use cjfs_fs::ondisk::group_desc::GroupDesc;
use cjfs_fs::ondisk::inode::{
    EXT4_EXTENTS_FL, EXT4_INDEX_FL, I_BLOCK, I_EXTRA_ISIZE, I_FILE_ACL_HIGH, I_FILE_ACL_LO, I_FLAGS,
    I_LINKS_COUNT, I_MODE, I_SIZE_HIGH, I_SIZE_LO, JOURNAL_INO, ROOT_INO, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};
use cjfs_fs::ondisk::superblock::Superblock;
use cjfs_fs::ondisk::xattr::{BLOCK_HEADER_SIZE, ENTRY_HEADER_SIZE, XATTR_MAGIC, entry_len};
use cjfs_journal::descriptor::{
    BLOCKTYPE_COMMIT, BLOCKTYPE_DESCRIPTOR, BLOCKTYPE_REVOKE, HEADER_SIZE, JBD2_MAGIC, TAG_FLAG_LAST_TAG,
    TAG_FLAG_SAME_UUID, TAG_UUID_SIZE,
};
use cjfs_journal::superblock::{JournalFeatures, JournalSuperblock};
use serde::{Deserialize, Serialize};

/// The file system block size this fuzzer handles (cjfs supports only 4 KiB).
pub const BS: u64 = 4096;

/// Little-endian read of `width` bytes at `off` (0 past the end).
pub fn get_le(bytes: &[u8], off: u64, width: usize) -> u64 {
    let off = off as usize;
    let Some(s) = bytes.get(off..off + width) else { return 0 };
    s.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Big-endian read of `width` bytes at `off` (0 past the end).
pub fn get_be(bytes: &[u8], off: u64, width: usize) -> u64 {
    let off = off as usize;
    let Some(s) = bytes.get(off..off + width) else { return 0 };
    s.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// The 4 KiB block `b` of `bytes` (empty past the end).
pub fn block(bytes: &[u8], b: u64) -> &[u8] {
    let start = (b * BS) as usize;
    bytes.get(start..start + BS as usize).unwrap_or(&[])
}

/// One block group.
#[derive(Debug, Clone)]
pub struct GroupInfo {
    /// Group number.
    pub index: u32,
    /// Byte offset of its descriptor.
    pub desc_off: u64,
    /// Block bitmap block.
    pub block_bitmap: u64,
    /// Inode bitmap block.
    pub inode_bitmap: u64,
    /// First inode table block.
    pub inode_table: u64,
    /// First block of the group.
    pub first_block: u64,
    /// Blocks in the group.
    pub blocks: u64,
}

/// One inode in use.
#[derive(Debug, Clone)]
pub struct InodeInfo {
    /// Inode number.
    pub ino: u32,
    /// Byte offset of the inode in the image.
    pub off: u64,
    /// `i_mode`.
    pub mode: u16,
    /// `i_flags`.
    pub flags: u32,
    /// `i_size` (both halves).
    pub size: u64,
    /// `i_links_count`.
    pub links: u16,
    /// `i_file_acl` (xattr block).
    pub file_acl: u64,
    /// `i_extra_isize`.
    pub extra_isize: u16,
    /// Byte offsets of the in-inode xattr entries (empty without an in-inode xattr area).
    pub ibody_xattrs: Vec<u64>,
}

// Read from the raw bytes, not through `cjfs_fs`'s inode decoder: the fuzzer judges that code,
// so it keeps its own reading of the few fields it needs.
impl InodeInfo {
    /// The file type bits of the mode.
    pub fn file_type(&self) -> u16 {
        self.mode & S_IFMT
    }
    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }
    /// A regular file.
    pub fn is_reg(&self) -> bool {
        self.file_type() == S_IFREG
    }
    /// Uses an extent tree (`EXTENTS_FL`).
    pub fn has_extents(&self) -> bool {
        self.flags & EXT4_EXTENTS_FL != 0
    }
    /// Byte offset of `i_block` (the extent root).
    pub fn i_block_off(&self) -> u64 {
        self.off + I_BLOCK as u64
    }
}

/// An extent tree block (index or leaf) outside the inode.
#[derive(Debug, Clone)]
pub struct ExtentBlockInfo {
    /// Owning inode.
    pub ino: u32,
    /// The block.
    pub block: u64,
    /// `eh_depth` (0: leaf).
    pub depth: u16,
    /// `eh_entries`.
    pub entries: u16,
}

/// Whether a directory block is part of an htree index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DxKind {
    /// A plain directory block (or an htree leaf).
    Leaf,
    /// The htree root (logical block 0 of an indexed directory).
    Root,
    /// An interior htree node.
    Node,
}

/// One directory entry.
#[derive(Debug, Clone)]
pub struct DirentInfo {
    /// Offset within its block.
    pub off: usize,
    /// `inode`.
    pub ino: u32,
    /// `rec_len`.
    pub rec_len: u16,
    /// `name_len`.
    pub name_len: u8,
    /// `file_type`.
    pub ftype: u8,
    /// The name.
    pub name: Vec<u8>,
}

/// One directory block.
#[derive(Debug, Clone)]
pub struct DirBlockInfo {
    /// The directory's inode.
    pub ino: u32,
    /// Logical block within the directory.
    pub lblk: u32,
    /// Physical block.
    pub block: u64,
    /// Entries in rec_len order.
    pub entries: Vec<DirentInfo>,
    /// Htree role.
    pub dx: DxKind,
}

/// One xattr block.
#[derive(Debug, Clone)]
pub struct XattrBlockInfo {
    /// The inode pointing at it.
    pub ino: u32,
    /// The block.
    pub block: u64,
    /// Offsets of its entries within the block.
    pub entries: Vec<usize>,
}

/// One descriptor tag of the log.
#[derive(Debug, Clone)]
pub struct TagInfo {
    /// Offset of the tag within the descriptor block.
    pub off: usize,
    /// Home block of the logged copy.
    pub home: u64,
    /// Tag flags.
    pub flags: u16,
    /// Device block holding the logged copy.
    pub data_dev_block: u64,
}

/// What a log block is.
#[derive(Debug, Clone)]
pub enum LogKind {
    /// A descriptor block and its tags.
    Descriptor {
        /// The tags.
        tags: Vec<TagInfo>,
    },
    /// A logged copy of a file system block.
    Data {
        /// Device block of the descriptor that tags it.
        desc_dev_block: u64,
        /// Offset of its tag in that descriptor.
        tag_off: usize,
        /// Home block.
        home: u64,
    },
    /// A commit block.
    Commit,
    /// A revoke block.
    Revoke {
        /// `r_count`.
        count: u32,
    },
}

/// One block of the log that recovery would read.
#[derive(Debug, Clone)]
pub struct LogBlock {
    /// Device block.
    pub dev_block: u64,
    /// Transaction id.
    pub seq: u32,
    /// What it is.
    pub kind: LogKind,
}

/// The internal journal.
#[derive(Debug, Clone)]
pub struct JournalInfo {
    /// Device block of each log block.
    pub log_to_dev: Vec<u64>,
    /// Device block of the journal superblock.
    pub sb_block: u64,
    /// The journal's features.
    pub features: JournalFeatures,
    /// Checksum seed (from the journal UUID).
    pub csum_seed: u32,
    /// The decoded superblock.
    pub sb: Box<JournalSuperblock>,
    /// The log from `s_start` (empty when the journal is clean).
    pub log: Vec<LogBlock>,
}

/// What a path in the image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else.
    Other,
}

/// One path of the image's tree, for choosing command arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathEntry {
    /// Absolute path inside the image.
    pub path: String,
    /// What it is.
    pub kind: PathKind,
    /// Its size.
    pub size: u64,
    /// It lives in a directory with more than [`BIG_DIR`] entries (only a sample of those
    /// is read by `cat`).
    pub in_big_dir: bool,
}

/// Directories with more entries than this are "big": `cat` reads only a sample of them.
pub const BIG_DIR: usize = 20;

/// The structure map of one image.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Image length in bytes.
    pub image_len: u64,
    /// The primary superblock.
    pub sb: Box<Superblock>,
    /// Byte size of one group descriptor.
    pub desc_size: usize,
    /// The groups.
    pub groups: Vec<GroupInfo>,
    /// Blocks of each group's inode table.
    pub itable_blocks: u64,
    /// Inodes in use (including reserved ones with a mode or links).
    pub inodes: Vec<InodeInfo>,
    /// Some unused inode numbers.
    pub free_inodes: Vec<u32>,
    /// Extent index and leaf blocks.
    pub extent_blocks: Vec<ExtentBlockInfo>,
    /// Directory blocks.
    pub dir_blocks: Vec<DirBlockInfo>,
    /// Xattr blocks.
    pub xattr_blocks: Vec<XattrBlockInfo>,
    /// The journal, if the image has a readable one.
    pub journal: Option<JournalInfo>,
    /// Some data blocks of regular files.
    pub data_blocks: Vec<u64>,
}

impl Layout {
    /// Locate every structure of the image `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Layout, String> {
        let sb = Superblock::decode_from_device_start(bytes.get(..BS as usize).ok_or("image too short")?)
            .map_err(|e| e.to_string())?;
        if sb.block_size() as u64 != BS {
            return Err(format!("block size {} (only 4096 handled)", sb.block_size()));
        }
        let desc_size = sb.desc_size();
        let gdt_off = (u64::from(sb.first_data_block) + 1) * BS;
        let gdt_len = sb.gdt_blocks() as usize * BS as usize;
        let gdt = bytes
            .get(gdt_off as usize..gdt_off as usize + gdt_len)
            .ok_or("group descriptors past the end")?;
        let descs = GroupDesc::decode_table(gdt, sb.group_count(), desc_size).map_err(|e| e.to_string())?;
        let groups = descs
            .iter()
            .enumerate()
            .map(|(g, d)| GroupInfo {
                index: g as u32,
                desc_off: gdt_off + (g * desc_size) as u64,
                block_bitmap: d.block_bitmap,
                inode_bitmap: d.inode_bitmap,
                inode_table: d.inode_table,
                first_block: sb.group_first_block(g as u32),
                blocks: u64::from(sb.group_block_count(g as u32)),
            })
            .collect::<Vec<_>>();
        let mut l = Layout::bare(bytes.len() as u64, Box::new(sb), desc_size, groups);
        l.scan_inodes(bytes);
        l.journal = l.parse_journal(bytes);
        Ok(l)
    }

    /// Byte offset of inode `ino`.
    pub fn inode_off(&self, ino: u32) -> Option<u64> {
        if ino == 0 || ino > self.sb.inodes_count {
            return None;
        }
        let ipg = self.sb.inodes_per_group;
        let g = ((ino - 1) / ipg) as usize;
        let idx = u64::from((ino - 1) % ipg);
        let grp = self.groups.get(g)?;
        Some(grp.inode_table * BS + idx * self.sb.inode_size() as u64)
    }

    /// The inode `ino` if it is in use.
    pub fn inode(&self, ino: u32) -> Option<&InodeInfo> {
        self.inodes.iter().find(|i| i.ino == ino)
    }

    fn scan_inodes(&mut self, bytes: &[u8]) {
        let isz = self.sb.inode_size() as u64;
        for ino in 1..=self.sb.inodes_count {
            let Some(off) = self.inode_off(ino) else { continue };
            let mode = get_le(bytes, off + I_MODE as u64, 2) as u16;
            let links = get_le(bytes, off + I_LINKS_COUNT as u64, 2) as u16;
            if mode == 0 && links == 0 && ino != JOURNAL_INO {
                if ino >= self.sb.first_ino() && self.free_inodes.len() < 16 {
                    self.free_inodes.push(ino);
                }
                continue;
            }
            let flags = get_le(bytes, off + I_FLAGS as u64, 4) as u32;
            let size =
                get_le(bytes, off + I_SIZE_LO as u64, 4) | (get_le(bytes, off + I_SIZE_HIGH as u64, 4) << 32);
            let file_acl = get_le(bytes, off + I_FILE_ACL_LO as u64, 4)
                | (get_le(bytes, off + I_FILE_ACL_HIGH as u64, 2) << 32);
            let extra_isize = if isz > 128 { get_le(bytes, off + I_EXTRA_ISIZE as u64, 2) as u16 } else { 0 };
            let ibody_xattrs = ibody_xattr_entries(bytes, off, isz, extra_isize);
            let info = InodeInfo { ino, off, mode, flags, size, links, file_acl, extra_isize, ibody_xattrs };
            let extents = if info.has_extents() { self.walk_extents(bytes, &info) } else { Vec::new() };
            if info.is_dir() {
                self.add_dir_blocks(bytes, &info, &extents);
            } else if info.is_reg() {
                for &(_, start, _) in extents.iter().take(8) {
                    if self.data_blocks.len() < 64 {
                        self.data_blocks.push(start);
                    }
                }
            }
            if file_acl != 0 && file_acl < self.sb.block_count() {
                let blk = block(bytes, file_acl);
                if get_le(blk, 0, 4) as u32 == XATTR_MAGIC {
                    let entries = xattr_entries(blk, BLOCK_HEADER_SIZE);
                    self.xattr_blocks.push(XattrBlockInfo { ino, block: file_acl, entries });
                }
            }
            self.inodes.push(info);
        }
    }

    /// Walk the extent tree of `ino`: records index/leaf blocks and returns the leaf extents
    /// as (logical, physical start, length), skipping unwritten ones.
    fn walk_extents(&mut self, bytes: &[u8], ino: &InodeInfo) -> Vec<(u32, u64, u32)> {
        let root = &bytes[ino.i_block_off() as usize..ino.i_block_off() as usize + 60];
        let mut out = Vec::new();
        let mut stack = vec![(root.to_vec(), None::<u64>, 0u32)];
        while let Some((buf, blk, level)) = stack.pop() {
            let Ok(node) = ExtentNode::decode(&buf) else { continue };
            if let Some(b) = blk {
                self.extent_blocks.push(ExtentBlockInfo {
                    ino: ino.ino,
                    block: b,
                    depth: node.depth,
                    entries: node.len() as u16,
                });
            }
            match &node.entries {
                NodeEntries::Leaf(exts) => {
                    for e in exts.iter().filter(|e| !e.unwritten) {
                        out.push((e.logical, e.start, e.len));
                    }
                }
                NodeEntries::Index(idx) if level < 6 => {
                    for i in idx {
                        if i.leaf < self.sb.block_count() {
                            stack.push((block(bytes, i.leaf).to_vec(), Some(i.leaf), level + 1));
                        }
                    }
                }
                NodeEntries::Index(_) => {}
            }
        }
        out.sort_unstable();
        out
    }

    fn add_dir_blocks(&mut self, bytes: &[u8], ino: &InodeInfo, extents: &[(u32, u64, u32)]) {
        let indexed = ino.flags & EXT4_INDEX_FL != 0;
        let mut dx_nodes = HashSet::new();
        for &(logical, start, len) in extents {
            for i in 0..u64::from(len.min(1024)) {
                let lblk = logical + i as u32;
                let pblk = start + i;
                if pblk >= self.sb.block_count() {
                    break;
                }
                let blk = block(bytes, pblk);
                let dx = if indexed && lblk == 0 {
                    // dx_root: levels at 0x1E, count at 0x22, entries from 0x20 (8 bytes each,
                    // the first holding only the block at 0x24).
                    let levels = blk.get(0x1E).copied().unwrap_or(0);
                    let count = get_le(blk, 0x22, 2) as usize;
                    if levels > 0 {
                        for k in 0..count.min(508) {
                            let off = if k == 0 { 0x24 } else { 0x20 + 8 * k + 4 };
                            dx_nodes.insert(get_le(blk, off as u64, 4) as u32);
                        }
                    }
                    DxKind::Root
                } else if indexed && dx_nodes.contains(&lblk) {
                    DxKind::Node
                } else {
                    DxKind::Leaf
                };
                let entries = if dx == DxKind::Node { Vec::new() } else { parse_dirents(blk) };
                self.dir_blocks.push(DirBlockInfo { ino: ino.ino, lblk, block: pblk, entries, dx });
            }
        }
    }

    fn parse_journal(&self, bytes: &[u8]) -> Option<JournalInfo> {
        let jino = self.inode(self.sb.journal_inum)?;
        if !jino.has_extents() {
            return None;
        }
        // Re-walk without recording (the journal's own extent blocks are already recorded).
        let mut scratch = self.clone_shallow();
        let exts = scratch.walk_extents(bytes, jino);
        let mut log_to_dev = Vec::new();
        for (logical, start, len) in exts {
            if logical as usize != log_to_dev.len() {
                return None;
            }
            log_to_dev.extend((0..u64::from(len)).map(|i| start + i));
        }
        let sb_block = *log_to_dev.first()?;
        let jsb = JournalSuperblock::decode(block(bytes, sb_block), log_to_dev.len() as u64).ok()?;
        let features = jsb.features();
        let csum_seed = jsb.csum_seed();
        let mut log = Vec::new();
        if jsb.s_start != 0 {
            scan_log(bytes, &jsb, &features, &log_to_dev, &mut log);
        }
        Some(JournalInfo { log_to_dev, sb_block, features, csum_seed, sb: Box::new(jsb), log })
    }

    /// The geometry alone: no inode, block or journal found yet.
    fn bare(image_len: u64, sb: Box<Superblock>, desc_size: usize, groups: Vec<GroupInfo>) -> Layout {
        Layout {
            image_len,
            itable_blocks: u64::from(sb.inode_table_blocks()),
            sb,
            desc_size,
            groups,
            inodes: Vec::new(),
            free_inodes: Vec::new(),
            extent_blocks: Vec::new(),
            dir_blocks: Vec::new(),
            xattr_blocks: Vec::new(),
            journal: None,
            data_blocks: Vec::new(),
        }
    }

    fn clone_shallow(&self) -> Layout {
        Layout::bare(self.image_len, self.sb.clone(), self.desc_size, self.groups.clone())
    }

    /// Every path of the tree (breadth first from the root, at most 4096), with kinds and
    /// sizes from the inodes.
    pub fn paths(&self) -> Vec<PathEntry> {
        let mut by_dir: BTreeMap<u32, Vec<&DirentInfo>> = BTreeMap::new();
        for b in self.dir_blocks.iter().filter(|b| b.dx != DxKind::Node) {
            by_dir.entry(b.ino).or_default().extend(b.entries.iter().filter(|e| e.ino != 0));
        }
        let mut out = Vec::new();
        let mut seen = HashSet::from([ROOT_INO]);
        let mut queue = VecDeque::from([(ROOT_INO, String::new())]);
        while let Some((dir, prefix)) = queue.pop_front() {
            let Some(entries) = by_dir.get(&dir) else { continue };
            let live: Vec<_> = entries.iter().filter(|e| e.name != b"." && e.name != b"..").collect();
            let big = live.len() > BIG_DIR;
            for e in live {
                if out.len() >= 4096 {
                    return out;
                }
                let Ok(name) = std::str::from_utf8(&e.name) else { continue };
                let path = format!("{prefix}/{name}");
                let Some(inode) = self.inode(e.ino) else { continue };
                let kind = match inode.file_type() {
                    S_IFREG => PathKind::File,
                    S_IFDIR => PathKind::Dir,
                    S_IFLNK => PathKind::Symlink,
                    _ => PathKind::Other,
                };
                if kind == PathKind::Dir && seen.insert(e.ino) {
                    queue.push_back((e.ino, path.clone()));
                }
                out.push(PathEntry { path, kind, size: inode.size, in_big_dir: big });
            }
        }
        out
    }

    /// Every block that holds metadata (for aiming byte flips and zeroed blocks).
    pub fn metadata_blocks(&self) -> Vec<u64> {
        let mut v = vec![0, u64::from(self.sb.first_data_block) + 1];
        for g in &self.groups {
            v.push(g.block_bitmap);
            v.push(g.inode_bitmap);
            v.extend((0..self.itable_blocks.min(4)).map(|i| g.inode_table + i));
        }
        v.extend(self.extent_blocks.iter().map(|e| e.block));
        v.extend(self.dir_blocks.iter().map(|d| d.block));
        v.extend(self.xattr_blocks.iter().map(|x| x.block));
        if let Some(j) = &self.journal {
            v.push(j.sb_block);
            v.extend(j.log.iter().map(|b| b.dev_block));
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Entries of a directory block, following `rec_len` while it stays in the block.
pub fn parse_dirents(blk: &[u8]) -> Vec<DirentInfo> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + DE_NAME <= blk.len() {
        let rec_len = get_le(blk, (off + DE_REC_LEN) as u64, 2) as u16;
        let name_len = blk[off + DE_NAME_LEN];
        if (rec_len as usize) < DE_NAME || off + rec_len as usize > blk.len() {
            break;
        }
        let name_end = (off + DE_NAME + name_len as usize).min(off + rec_len as usize);
        out.push(DirentInfo {
            off,
            ino: get_le(blk, (off + DE_INODE) as u64, 4) as u32,
            rec_len,
            name_len,
            ftype: blk[off + DE_FILE_TYPE],
            name: blk[off + DE_NAME..name_end].to_vec(),
        });
        off += rec_len as usize;
    }
    out
}

/// Offsets of the xattr entries starting at `first` in `area` (until the 4 zero bytes that
/// end the list).
fn xattr_entries(area: &[u8], first: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut off = first;
    while off + ENTRY_HEADER_SIZE <= area.len() && out.len() < 64 {
        if get_le(area, off as u64, 4) == 0 {
            break;
        }
        out.push(off);
        off += entry_len(area[off] as usize);
    }
    out
}

/// Absolute offsets of the in-inode xattr entries of the inode at `off`.
fn ibody_xattr_entries(bytes: &[u8], off: u64, isz: u64, extra: u16) -> Vec<u64> {
    let start = off + 128 + u64::from(extra);
    if isz <= 128 || start + 4 > off + isz {
        return Vec::new();
    }
    if get_le(bytes, start, 4) as u32 != XATTR_MAGIC {
        return Vec::new();
    }
    let area = &bytes[(start + 4) as usize..(off + isz) as usize];
    xattr_entries(area, 0).into_iter().map(|e| start + 4 + e as u64).collect()
}

/// Walk the log from `s_start` the way recovery does (descriptor → its data blocks,
/// commit, revoke; stop at a block without the magic or with another sequence).
fn scan_log(
    bytes: &[u8],
    jsb: &JournalSuperblock,
    features: &JournalFeatures,
    log_to_dev: &[u64],
    out: &mut Vec<LogBlock>,
) {
    let maxlen = jsb.s_maxlen.min(log_to_dev.len() as u32);
    let first = jsb.s_first;
    if first == 0 || first >= maxlen {
        return;
    }
    let next = |lb: u32| if lb + 1 >= maxlen { first } else { lb + 1 };
    let mut lb = jsb.s_start;
    let mut seq = jsb.s_sequence;
    let mut steps = 0u32;
    while steps < maxlen && lb < maxlen {
        let dev = log_to_dev[lb as usize];
        let blk = block(bytes, dev);
        if blk.len() < BS as usize
            || get_be(blk, 0, 4) as u32 != JBD2_MAGIC
            || get_be(blk, 8, 4) as u32 != seq
        {
            return;
        }
        match get_be(blk, 4, 4) as u32 {
            BLOCKTYPE_DESCRIPTOR => {
                let tag_bytes = features.tag_bytes();
                let end = blk.len() - features.tail_size();
                let mut off = HEADER_SIZE;
                let mut tags = Vec::new();
                let mut data_lb = lb;
                while off + tag_bytes <= end {
                    let flags = get_be(blk, (off + 6) as u64, 2) as u16;
                    let mut home = get_be(blk, off as u64, 4);
                    if features.has_64bit() {
                        home |= get_be(blk, (off + 8) as u64, 4) << 32;
                    }
                    data_lb = next(data_lb);
                    steps += 1;
                    let data_dev = log_to_dev[data_lb as usize];
                    tags.push(TagInfo { off, home, flags, data_dev_block: data_dev });
                    off += tag_bytes;
                    if flags & TAG_FLAG_SAME_UUID == 0 {
                        off += TAG_UUID_SIZE;
                    }
                    if flags & TAG_FLAG_LAST_TAG != 0 {
                        break;
                    }
                }
                out.push(LogBlock { dev_block: dev, seq, kind: LogKind::Descriptor { tags: tags.clone() } });
                for t in &tags {
                    out.push(LogBlock {
                        dev_block: t.data_dev_block,
                        seq,
                        kind: LogKind::Data { desc_dev_block: dev, tag_off: t.off, home: t.home },
                    });
                }
                lb = data_lb;
            }
            BLOCKTYPE_COMMIT => {
                out.push(LogBlock { dev_block: dev, seq, kind: LogKind::Commit });
                seq = seq.wrapping_add(1);
            }
            BLOCKTYPE_REVOKE => {
                let count = get_be(blk, 12, 4) as u32;
                out.push(LogBlock { dev_block: dev, seq, kind: LogKind::Revoke { count } });
            }
            _ => return,
        }
        lb = next(lb);
        steps += 1;
    }
}
