//! `mkfs`: write a fresh ext4 file system that `e2fsck -fn` and the kernel accept, and
//! [`read_layout`], which reads back the superblock and group descriptors of any image.
//!
//! Features: `has_journal ext_attr dir_index filetype extent 64bit flex_bg sparse_super
//! large_file huge_file dir_nlink extra_isize metadata_csum` (no `resize_inode`; `64bit`
//! and `metadata_csum` can be turned off). 4 KiB blocks, 32768 blocks per group, 256-byte
//! inodes with 32 extra bytes, half-MD4 directory hashes with a random seed.
//!
//! With `metadata_csum` (the default, as with mke2fs) every structure is written with its
//! checksum (seed: CRC32C of the UUID), every inode table is zeroed (`ITABLE_ZEROED`), and
//! groups are left uninitialised as mke2fs leaves them: `INODE_UNINIT` with
//! `bg_itable_unused` covering the whole table for every group but 0, `BLOCK_UNINIT` for a
//! group (never the last) whose only used blocks are those its synthesized bitmap marks.
//!
//! Layout (like mke2fs): block 0 holds the superblock at byte 1024, blocks 1.. the group
//! descriptor table; groups 1, 3, 5, 7, 9, 25, 27, ... hold backup copies at their start.
//! With `flex_bg` the block bitmaps, then the inode bitmaps, then the inode tables of the
//! groups of each flex group are packed from the first free block of the flex group's first
//! group (spilling into the next groups if needed). The root directory (1 block) and
//! lost+found (4 blocks) follow group 0's metadata; the journal (inode 8, one contiguous
//! extent run when possible) starts in a group near the middle of the file system.

use std::collections::BTreeMap;
use std::collections::VecDeque;

use cjfs_blockdev::{
    BlockBuf, BlockDevice, BlockKind, IoTicket, WriteRequest, WriteTag, zeroed_block, zeroed_buf,
};
use cjfs_journal::JournalArea;

use crate::error::{FsError, FsResult};
use crate::ondisk::csum::Csum;
use crate::ondisk::dirent::{self, FT_DIR};
use crate::ondisk::extent::set_block_checksum;
use crate::ondisk::extent::{
    Extent, ExtentIndex, ExtentNode, NodeEntries, block_max, extents_for_run, root_max,
};
use crate::ondisk::features::{
    self, INCOMPAT_64BIT, MKFS_COMPAT, MKFS_INCOMPAT, MKFS_RO_COMPAT, RO_COMPAT_METADATA_CSUM,
};
use crate::ondisk::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED, GroupDesc};
use crate::ondisk::htree::DX_HASH_HALF_MD4;
use crate::ondisk::inode::{
    DEFAULT_EXTRA_ISIZE, DEFAULT_INODE_SIZE, EXT4_EXTENTS_FL, FIRST_INO, Inode, JOURNAL_INO, ROOT_INO,
    S_IFDIR, S_IFREG, Timestamp,
};
use crate::ondisk::superblock::{
    DEFM_ACL, DEFM_XATTR_USER, DYNAMIC_REV, ERRORS_CONTINUE, FLAGS_SIGNED_HASH, FLAGS_UNSIGNED_HASH,
    JNL_BACKUP_BLOCKS, OS_LINUX, STATE_VALID, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE, Superblock, sb_location,
};
use crate::ondisk::{bitmap, superblock};

/// Smallest device `mkfs` accepts.
pub const MIN_DEVICE_BYTES: u64 = 16 << 20;
/// Blocks per group with 4 KiB blocks (one bitmap block's bits: `8 * block size`).
pub const BLOCKS_PER_GROUP: u32 = 32768;
/// Smallest journal.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;
/// Largest journal (as mke2fs: 10,240,000 blocks).
pub const MAX_JOURNAL_BLOCKS: u32 = 10_240_000;
/// Blocks of lost+found (16 KiB, like mke2fs).
pub const LOST_FOUND_BLOCKS: u64 = 4;
/// Percentage of blocks reserved for the super-user.
pub const RESERVED_PERCENT: u64 = 5;

/// What `mkfs` should make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsOptions {
    /// Volume label (at most 16 bytes).
    pub label: String,
    /// File system UUID (random when `None`).
    pub uuid: Option<[u8; 16]>,
    /// Directory hash seed (random when `None`).
    pub hash_seed: Option<[u8; 16]>,
    /// Bytes per inode (default 16384; 1024..=64 MiB).
    pub inode_ratio: u32,
    /// Journal size in blocks (`None`: like mke2fs' `ext2fs_default_journal_size`).
    pub journal_blocks: Option<u32>,
    /// Extra log areas (sizes in blocks, each at least 1024) inside the journal inode after
    /// the primary journal, for techniques that run more than one log. Invisible to stock
    /// tools, which see the primary journal's `s_maxlen` only.
    pub log_areas: Vec<u32>,
    /// ijournal areas (sizes in blocks, each at least 16) inside the journal inode after the
    /// log areas, for iJournaling's fsync records. Invisible to stock tools too.
    pub ijournal_areas: Vec<u32>,
    /// Use the `64bit` feature (64-byte group descriptors; needed above 16 TiB).
    pub sixty_four_bit: bool,
    /// Use `metadata_csum` (CRC32C checksums on all metadata; default on, as mke2fs).
    pub metadata_csum: bool,
    /// Groups per flex group (a power of two; default 16).
    pub flex_bg_size: u32,
    /// The device already reads as zeros (a fresh sparse file, a new emulated device): skip
    /// zeroing the inode tables and the journal. Wrong on a used device: e2fsck then finds
    /// garbage inodes.
    pub assume_zeroed: bool,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            label: String::new(),
            uuid: None,
            hash_seed: None,
            inode_ratio: 16384,
            journal_blocks: None,
            log_areas: Vec::new(),
            ijournal_areas: Vec::new(),
            sixty_four_bit: true,
            metadata_csum: true,
            flex_bg_size: 16,
            assume_zeroed: false,
        }
    }
}

/// What `mkfs` made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsReport {
    /// The superblock written.
    pub superblock: Superblock,
    /// The group descriptors written.
    pub groups: Vec<GroupDesc>,
    /// Blocks in the file system (the device may be a little larger: a too-short last
    /// group is dropped like mke2fs does).
    pub block_count: u64,
    /// Number of groups.
    pub group_count: u32,
    /// Inodes per group.
    pub inodes_per_group: u32,
    /// Inode table blocks per group.
    pub inode_table_blocks: u32,
    /// Journal runs `(first device block, blocks)` in log order.
    pub journal_runs: Vec<(u64, u64)>,
    /// Journal inode size in blocks: the primary journal and any extra log areas.
    pub journal_blocks: u32,
    /// Extent index block of the journal inode (only when it needs more than 4 extents).
    pub journal_index_block: Option<u64>,
    /// Free blocks after mkfs.
    pub free_blocks: u64,
    /// Free inodes after mkfs.
    pub free_inodes: u32,
    /// The UUID.
    pub uuid: [u8; 16],
}

impl MkfsReport {
    /// The journal area to hand to the journal.
    pub fn journal_area(&self) -> JournalArea {
        JournalArea::new(self.journal_runs.iter().copied())
    }
}

/// Journal size mke2fs picks for a file system of `num_blocks` 4 KiB blocks
/// (`ext2fs_default_journal_size`); 0 below 2048 blocks.
pub fn default_journal_blocks(num_blocks: u64) -> u32 {
    match num_blocks {
        n if n < 2048 => 0,
        n if n < 32768 => 1024,
        n if n < 256 * 1024 => 4096,
        n if n < 512 * 1024 => 8192,
        n if n < 4096 * 1024 => 16384,
        n if n < 8192 * 1024 => 32768,
        n if n < 16384 * 1024 => 65536,
        n if n < 32768 * 1024 => 131072,
        _ => 262144,
    }
}

fn random_bytes() -> [u8; 16] {
    let mut b: [u8; 16] = rand::random();
    // RFC 4122 version 4, variant 1
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    b
}

/// Set of used block ranges (start -> end, exclusive; never overlapping).
struct Used {
    map: BTreeMap<u64, u64>,
    limit: u64,
}

impl Used {
    fn new(limit: u64) -> Self {
        Used { map: BTreeMap::new(), limit }
    }

    fn mark(&mut self, start: u64, len: u64) {
        if len > 0 {
            self.map.insert(start, start + len);
        }
    }

    /// First position >= `s` where `len` blocks are free before `end`, if any.
    fn fit_from(&self, mut s: u64, len: u64, end: u64) -> Option<u64> {
        loop {
            if s.checked_add(len)? > end {
                return None;
            }
            if let Some((_, &e)) = self.map.range(..=s).next_back()
                && e > s
            {
                s = e;
                continue;
            }
            if let Some((_, &e)) = self.map.range(s + 1..s + len).next() {
                s = e;
                continue;
            }
            return Some(s);
        }
    }

    /// Allocate `len` contiguous blocks, first fit from `goal`, wrapping to the start.
    fn alloc(&mut self, goal: u64, len: u64, what: &str) -> FsResult<u64> {
        let found = self
            .fit_from(goal, len, self.limit)
            .or_else(|| self.fit_from(0, len, goal.saturating_add(len).min(self.limit)));
        match found {
            Some(s) => {
                self.mark(s, len);
                Ok(s)
            }
            None => Err(FsError::NoSpace(format!(
                "mkfs: no room for {len} contiguous blocks for {what} on a file system of {} \
                 blocks",
                self.limit
            ))),
        }
    }

    /// First free block at or after `s` (may be `limit`).
    fn next_free(&self, mut s: u64) -> u64 {
        while let Some((_, &e)) = self.map.range(..=s).next_back() {
            if e > s {
                s = e;
            } else {
                break;
            }
        }
        s
    }

    /// Allocate `len` blocks as few runs as possible: one contiguous run if there is one,
    /// else the free runs in order from `goal`, wrapping to the start.
    fn alloc_runs(&mut self, goal: u64, len: u64, what: &str) -> FsResult<Vec<(u64, u64)>> {
        if let Ok(s) = self.alloc(goal, len, what) {
            return Ok(vec![(s, len)]);
        }
        let mut runs = Vec::new();
        let mut left = len;
        let mut pos = goal;
        let mut wrapped = false;
        while left > 0 {
            let s = self.next_free(pos);
            if s >= self.limit || (wrapped && s >= goal) {
                if wrapped {
                    return Err(FsError::NoSpace(format!("mkfs: no room for {len} blocks for {what}")));
                }
                wrapped = true;
                pos = 0;
                continue;
            }
            let next_used = self.map.range(s + 1..).next().map(|(&st, _)| st).unwrap_or(self.limit);
            let n = (next_used - s).min(left);
            self.mark(s, n);
            runs.push((s, n));
            left -= n;
            pos = s + n;
        }
        Ok(runs)
    }

    /// Used blocks within `start..end`.
    fn count_in(&self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        if let Some((_, &e)) = self.map.range(..start).next_back()
            && e > start
        {
            n += e.min(end) - start;
        }
        for (&s, &e) in self.map.range(start..end) {
            n += e.min(end) - s;
        }
        n
    }

    /// Used ranges intersecting `start..end`, clipped.
    fn ranges_in(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        if let Some((_, &e)) = self.map.range(..start).next_back()
            && e > start
        {
            v.push((start, e.min(end)));
        }
        for (&s, &e) in self.map.range(start..end) {
            v.push((s, e.min(end)));
        }
        v
    }
}

/// Writes with a bounded number in flight.
struct Writer<'a> {
    dev: &'a dyn BlockDevice,
    inflight: VecDeque<IoTicket>,
    blocks: u64,
}

const MAX_INFLIGHT: usize = 32;
const MAX_REQ_BLOCKS: u64 = 256;

impl<'a> Writer<'a> {
    fn new(dev: &'a dyn BlockDevice) -> Self {
        Writer { dev, inflight: VecDeque::new(), blocks: 0 }
    }

    fn submit(&mut self, block: u64, bufs: Vec<BlockBuf>, kind: BlockKind) -> FsResult<()> {
        self.blocks += bufs.len() as u64;
        let t = self.dev.submit(WriteRequest { block, bufs, tag: WriteTag::kind(kind), fua: false })?;
        self.inflight.push_back(t);
        while self.inflight.len() > MAX_INFLIGHT {
            if let Some(t) = self.inflight.pop_front() {
                t.wait()?;
            }
        }
        Ok(())
    }

    fn write(&mut self, block: u64, data: &[u8], kind: BlockKind) -> FsResult<()> {
        let bufs = data.chunks(self.dev.block_size()).map(cjfs_blockdev::block_from_slice).collect();
        self.submit(block, bufs, kind)
    }

    fn zero(&mut self, start: u64, len: u64, zero: &BlockBuf) -> FsResult<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_REQ_BLOCKS);
            self.submit(start + done, vec![zero.clone(); n as usize], BlockKind::Metadata)?;
            done += n;
        }
        Ok(())
    }

    fn finish(&mut self) -> FsResult<()> {
        let mut first = Ok(());
        while let Some(t) = self.inflight.pop_front() {
            let r = t.wait();
            if first.is_ok() {
                first = r;
            }
        }
        first.map_err(FsError::from)
    }
}

/// Geometry computed from the device size, block size and options.
struct Geometry {
    /// Bytes per block.
    bs: u64,
    /// First data block: 1 with 1 KiB blocks (the superblock is block 1), else 0.
    first: u64,
    /// Blocks per group.
    bpg: u32,
    blocks: u64,
    groups: u32,
    ipg: u32,
    itb: u32,
    gdt_blocks: u32,
    desc_size: usize,
}

fn geometry(num_blocks: u64, bs: usize, opts: &MkfsOptions) -> FsResult<Geometry> {
    let desc_size = if opts.sixty_four_bit { 64 } else { 32 };
    let first = u64::from(bs == 1024);
    let bpg = (8 * bs) as u32;
    let bs = bs as u64;
    let mut blocks = num_blocks;
    loop {
        let groups = (blocks - first).div_ceil(u64::from(bpg));
        if groups > u32::MAX as u64 {
            return Err(FsError::Invalid(format!("device of {num_blocks} blocks is too large")));
        }
        let groups32 = groups as u32;
        let inodes_wanted = (blocks as u128 * bs as u128 / opts.inode_ratio as u128) as u64;
        let mut ipg = inodes_wanted.div_ceil(groups).max(16);
        ipg = ipg.div_ceil(16) * 16;
        ipg = ipg.min(8 * bs); // one bitmap block
        if ipg * groups > u32::MAX as u64 {
            ipg = (u32::MAX as u64 / groups) / 16 * 16;
        }
        if ipg < 16 {
            return Err(FsError::Invalid(format!(
                "device of {num_blocks} blocks has too many groups for 2^32 inodes"
            )));
        }
        let itb = (ipg * DEFAULT_INODE_SIZE as u64 / bs) as u32;
        let gdt_blocks = (groups * desc_size as u64).div_ceil(bs) as u32;
        let rem = (blocks - first) % u64::from(bpg);
        let last = groups32 - 1;
        let mut overhead = 3 + itb as u64;
        if superblock::group_has_super_sparse(last) {
            overhead += 1 + gdt_blocks as u64;
        }
        if rem != 0 && rem < overhead + 50 {
            if groups == 1 {
                return Err(FsError::Invalid(format!(
                    "device of {num_blocks} blocks is too small for its metadata"
                )));
            }
            blocks -= rem;
            continue;
        }
        return Ok(Geometry {
            bs,
            first,
            bpg,
            blocks,
            groups: groups32,
            ipg: ipg as u32,
            itb,
            gdt_blocks,
            desc_size,
        });
    }
}

/// Make a file system on `dev` (all of it, rounded down to whole groups when the last one
/// would be too small). Everything is written with `dev.submit` and flushed at the end; the
/// primary superblock is written last.
pub fn mkfs(dev: &dyn BlockDevice, opts: &MkfsOptions) -> FsResult<MkfsReport> {
    let num_blocks = dev.num_blocks();
    let bs_bytes = dev.block_size();
    if !cjfs_blockdev::valid_block_size(bs_bytes) {
        return Err(FsError::Invalid(format!("block size {bs_bytes} (must be 1024, 2048 or 4096)")));
    }
    let bytes = num_blocks.saturating_mul(bs_bytes as u64);
    if bytes < MIN_DEVICE_BYTES {
        return Err(FsError::Invalid(format!(
            "device of {bytes} bytes ({num_blocks} blocks) is smaller than the 16 MiB minimum"
        )));
    }
    if !opts.sixty_four_bit && num_blocks > u32::MAX as u64 {
        return Err(FsError::Invalid(format!(
            "device of {num_blocks} blocks needs the 64bit feature (more than 2^32 blocks)"
        )));
    }
    if num_blocks >= 1u64 << 48 {
        return Err(FsError::Invalid(format!("device of {num_blocks} blocks exceeds 2^48 blocks")));
    }
    if !(1024..=64 << 20).contains(&opts.inode_ratio) {
        return Err(FsError::Invalid(format!(
            "inode ratio {} (must be 1024..=67108864 bytes per inode)",
            opts.inode_ratio
        )));
    }
    if opts.flex_bg_size == 0 || !opts.flex_bg_size.is_power_of_two() || opts.flex_bg_size > 1 << 16 {
        return Err(FsError::Invalid(format!(
            "flex_bg size {} (must be a power of two up to 65536)",
            opts.flex_bg_size
        )));
    }
    let g = geometry(num_blocks, bs_bytes, opts)?;
    let bs = g.bs;
    let now = Timestamp::now();
    let uuid = opts.uuid.unwrap_or_else(random_bytes);
    let seed = opts.hash_seed.unwrap_or_else(random_bytes);

    // ---- superblock ----
    let mut sb = Superblock::blank();
    sb.inodes_count = g.ipg * g.groups;
    sb.blocks_count = g.blocks;
    sb.r_blocks_count = g.blocks * RESERVED_PERCENT / 100;
    sb.first_data_block = g.first as u32;
    sb.log_block_size = (bs / 1024).trailing_zeros();
    sb.log_cluster_size = sb.log_block_size;
    sb.blocks_per_group = g.bpg;
    sb.clusters_per_group = g.bpg;
    sb.inodes_per_group = g.ipg;
    sb.wtime = now.sec;
    sb.max_mnt_count = -1;
    sb.state = STATE_VALID;
    sb.errors = ERRORS_CONTINUE;
    sb.lastcheck = now.sec;
    sb.creator_os = OS_LINUX;
    sb.rev_level = DYNAMIC_REV;
    sb.first_ino = FIRST_INO;
    sb.inode_size = DEFAULT_INODE_SIZE as u16;
    sb.feature_compat = MKFS_COMPAT;
    sb.feature_incompat = MKFS_INCOMPAT & !(if opts.sixty_four_bit { 0 } else { INCOMPAT_64BIT });
    sb.feature_ro_compat = MKFS_RO_COMPAT;
    if opts.metadata_csum {
        sb.feature_ro_compat |= RO_COMPAT_METADATA_CSUM;
        // CRC32C, the only algorithm there is.
        sb.checksum_type = 1;
    }
    sb.uuid = uuid;
    sb.set_label(&opts.label)?;
    sb.journal_inum = JOURNAL_INO;
    for (i, w) in sb.hash_seed.iter_mut().enumerate() {
        *w = u32::from_le_bytes([seed[4 * i], seed[4 * i + 1], seed[4 * i + 2], seed[4 * i + 3]]);
    }
    sb.def_hash_version = DX_HASH_HALF_MD4;
    sb.desc_size = if opts.sixty_four_bit { g.desc_size as u16 } else { 0 };
    sb.default_mount_opts = DEFM_XATTR_USER | DEFM_ACL;
    sb.mkfs_time = now.sec;
    sb.min_extra_isize = DEFAULT_EXTRA_ISIZE;
    sb.want_extra_isize = DEFAULT_EXTRA_ISIZE;
    // mke2fs records whether the platform's `char` is signed
    sb.flags = if std::ffi::c_char::MIN != 0 { FLAGS_SIGNED_HASH } else { FLAGS_UNSIGNED_HASH };
    sb.log_groups_per_flex = opts.flex_bg_size.trailing_zeros() as u8;
    debug_assert_eq!(sb.gdt_blocks(), g.gdt_blocks);
    let csum = Csum::from_sb(&sb);

    // ---- allocation ----
    let mut used = Used::new(g.blocks);
    if g.first > 0 {
        // The boot block before the first group (1 KiB blocks) is nobody's to allocate.
        used.mark(0, g.first);
    }
    for grp in 0..g.groups {
        if sb.has_super_in_group(grp) {
            used.mark(sb.group_first_block(grp), 1 + g.gdt_blocks as u64);
        }
    }
    let mut descs: Vec<GroupDesc> = (0..g.groups).map(|_| GroupDesc::new(g.desc_size)).collect();
    let flex = opts.flex_bg_size;
    let mut leader = 0u32;
    while leader < g.groups {
        let members = leader..(leader.saturating_add(flex)).min(g.groups);
        let mut goal = sb.group_first_block(leader);
        for m in members.clone() {
            let b = used.alloc(goal, 1, "a block bitmap")?;
            descs[m as usize].block_bitmap = b;
            goal = b + 1;
        }
        for m in members.clone() {
            let b = used.alloc(goal, 1, "an inode bitmap")?;
            descs[m as usize].inode_bitmap = b;
            goal = b + 1;
        }
        for m in members.clone() {
            let b = used.alloc(goal, g.itb as u64, "an inode table")?;
            descs[m as usize].inode_table = b;
            goal = b + g.itb as u64;
        }
        leader = members.end;
    }
    let root_block = used.alloc(0, 1, "the root directory")?;
    let lf_block = used.alloc(root_block + 1, LOST_FOUND_BLOCKS, "lost+found")?;

    // journal
    let primary_blocks = opts.journal_blocks.unwrap_or_else(|| default_journal_blocks(g.blocks));
    let free_now = g.blocks - used.count_in(0, g.blocks);
    if !(MIN_JOURNAL_BLOCKS..=MAX_JOURNAL_BLOCKS).contains(&primary_blocks) {
        return Err(FsError::Invalid(format!(
            "journal of {primary_blocks} blocks (must be {MIN_JOURNAL_BLOCKS}..={MAX_JOURNAL_BLOCKS})"
        )));
    }
    if let Some(a) = opts.log_areas.iter().find(|&&a| !(MIN_JOURNAL_BLOCKS..=MAX_JOURNAL_BLOCKS).contains(&a))
    {
        return Err(FsError::Invalid(format!(
            "log area of {a} blocks (must be {MIN_JOURNAL_BLOCKS}..={MAX_JOURNAL_BLOCKS})"
        )));
    }
    if let Some(a) = opts
        .ijournal_areas
        .iter()
        .find(|&&a| !(cjfs_journal::superblock::MIN_IJOURNAL_AREA_BLOCKS..=MAX_JOURNAL_BLOCKS).contains(&a))
    {
        return Err(FsError::Invalid(format!(
            "ijournal area of {a} blocks (must be {}..={MAX_JOURNAL_BLOCKS})",
            cjfs_journal::superblock::MIN_IJOURNAL_AREA_BLOCKS
        )));
    }
    if opts.log_areas.len() + opts.ijournal_areas.len() > cjfs_journal::superblock::MAX_LOG_AREAS {
        return Err(FsError::Invalid(format!(
            "{} extra log and ijournal areas (at most {})",
            opts.log_areas.len() + opts.ijournal_areas.len(),
            cjfs_journal::superblock::MAX_LOG_AREAS
        )));
    }
    // The journal inode holds the primary journal and every extra area (and, with blocks too
    // small to hold the areas' table beside the journal superblock, the table's block).
    let extra_count = opts.log_areas.len() + opts.ijournal_areas.len();
    let table = cjfs_journal::superblock::area_table_blocks(bs_bytes, extra_count);
    let extra_blocks: u64 = opts.log_areas.iter().chain(&opts.ijournal_areas).map(|&a| u64::from(a)).sum();
    let jblocks = u32::try_from(u64::from(primary_blocks) + table + extra_blocks)
        .map_err(|_| FsError::Invalid("the journal and its extra areas exceed 2^32 blocks".into()))?;
    if jblocks as u64 > free_now / 2 {
        return Err(FsError::Invalid(format!(
            "journal of {jblocks} blocks is too big: at most half of the {free_now} free blocks ({}) \
             may go to the journal",
            free_now / 2
        )));
    }
    let jgoal = journal_goal(&sb, &used);
    let runs = used.alloc_runs(jgoal, jblocks as u64, "the journal")?;
    let mut jextents: Vec<Extent> = Vec::new();
    let mut lblk = 0u32;
    for &(s, n) in &runs {
        jextents.extend(extents_for_run(lblk, s, n));
        lblk += n as u32;
    }
    let (jroot, jindex) = if jextents.len() <= root_max() as usize {
        let mut root = ExtentNode::new_leaf(root_max());
        root.entries = NodeEntries::Leaf(jextents);
        (root, None)
    } else {
        if jextents.len() > block_max(bs_bytes) as usize {
            return Err(FsError::NoSpace(format!(
                "mkfs: the journal needs {} extents (at most {})",
                jextents.len(),
                block_max(bs_bytes)
            )));
        }
        let last = runs.last().map(|&(s, n)| s + n).unwrap_or(0);
        let ib = used.alloc(last, 1, "the journal's extent block")?;
        let mut leaf = ExtentNode::new_leaf(block_max(bs_bytes));
        leaf.entries = NodeEntries::Leaf(jextents);
        let mut root = ExtentNode::new_index(root_max(), 1);
        root.entries = NodeEntries::Index(vec![ExtentIndex { logical: 0, leaf: ib }]);
        (root, Some((ib, leaf)))
    };

    // ---- counts ----
    let mut free_blocks_total = 0u64;
    for (grp, d) in descs.iter_mut().enumerate() {
        let grp = grp as u32;
        let start = sb.group_first_block(grp);
        let n = sb.group_block_count(grp) as u64;
        let free = n - used.count_in(start, start + n);
        d.free_blocks_count = free as u32;
        d.free_inodes_count = if grp == 0 { g.ipg - FIRST_INO } else { g.ipg };
        d.used_dirs_count = if grp == 0 { 2 } else { 0 };
        d.flags = 0;
        d.itable_unused = 0;
        if csum.group_desc() {
            d.flags = BG_INODE_ZEROED;
            d.itable_unused = d.free_inodes_count;
            if grp != 0 {
                d.flags |= BG_INODE_UNINIT;
            }
        }
        free_blocks_total += free;
    }
    sb.free_blocks_count = free_blocks_total;
    sb.free_inodes_count = sb.inodes_count - FIRST_INO;

    // ---- inodes ----
    let mk_inode = |mode: u16, links: u16, size: u64, blocks: u64, iblock: [u8; 60]| {
        let mut i = Inode::new(DEFAULT_INODE_SIZE, DEFAULT_EXTRA_ISIZE);
        i.mode = mode;
        i.links_count = links;
        i.size = size;
        i.blocks = blocks * (bs / 512);
        i.flags = EXT4_EXTENTS_FL;
        i.block = iblock;
        i.atime = now;
        i.ctime = now;
        i.mtime = now;
        i.crtime = now;
        i
    };
    let leaf_root = |start: u64, len: u64| {
        let mut n = ExtentNode::new_leaf(root_max());
        n.entries = NodeEntries::Leaf(extents_for_run(0, start, len));
        n.to_i_block()
    };
    let root_inode = mk_inode(S_IFDIR | 0o755, 3, bs, 1, leaf_root(root_block, 1));
    let lf_inode = mk_inode(
        S_IFDIR | 0o700,
        2,
        LOST_FOUND_BLOCKS * bs,
        LOST_FOUND_BLOCKS,
        leaf_root(lf_block, LOST_FOUND_BLOCKS),
    );
    let jsize = jblocks as u64 * bs;
    let j_inode =
        mk_inode(S_IFREG | 0o600, 1, jsize, jblocks as u64 + jindex.is_some() as u64, jroot.to_i_block());
    let words = j_inode.block_words();
    sb.jnl_blocks[..15].copy_from_slice(&words);
    sb.jnl_blocks[15] = (jsize >> 32) as u32;
    sb.jnl_blocks[16] = jsize as u32;
    sb.jnl_backup_type = JNL_BACKUP_BLOCKS;

    // ---- write ----
    let mut w = Writer::new(dev);
    let zero: BlockBuf = zeroed_buf(bs_bytes);
    if !opts.assume_zeroed {
        for d in &descs {
            w.zero(d.inode_table, g.itb as u64, &zero)?;
        }
        for &(s, n) in &runs {
            w.zero(s, n, &zero)?;
        }
    }
    // bitmaps
    for (grp, d) in descs.iter_mut().enumerate() {
        let grp = grp as u32;
        let start = sb.group_first_block(grp);
        let n = sb.group_block_count(grp) as u64;
        let mut bb = vec![0u8; bs_bytes];
        for (s, e) in used.ranges_in(start, start + n) {
            bitmap::set_range(&mut bb, (s - start) as usize, (e - s) as usize);
        }
        bitmap::pad_block_bitmap(&mut bb, n as usize);
        w.write(d.block_bitmap, &bb, BlockKind::Metadata)?;
        let mut ib = vec![0u8; bs_bytes];
        if grp == 0 {
            bitmap::set_range(&mut ib, 0, FIRST_INO as usize);
        }
        bitmap::pad_inode_bitmap(&mut ib, g.ipg as usize);
        w.write(d.inode_bitmap, &ib, BlockKind::Metadata)?;
        d.set_block_bitmap_csum(&csum, &bb, g.bpg);
        d.set_inode_bitmap_csum(&csum, &ib, g.ipg);
        // Like mke2fs: a group whose bitmap is what an uninitialised one synthesizes (never
        // the last group) is left uninitialised.
        if csum.group_desc() && grp + 1 < g.groups && bitmap::uninit_block_bitmap(&sb, d, grp) == bb {
            d.flags |= BG_BLOCK_UNINIT;
        }
    }
    // first inode table blocks of group 0: inodes 1..=11 (several blocks when they are small)
    let mut itb0 = vec![0u8; (FIRST_INO as usize * DEFAULT_INODE_SIZE).div_ceil(bs_bytes) * bs_bytes];
    for (ino, inode) in [(ROOT_INO, &root_inode), (JOURNAL_INO, &j_inode), (FIRST_INO, &lf_inode)] {
        let off = (ino as usize - 1) * DEFAULT_INODE_SIZE;
        inode.encode_into(&mut itb0[off..off + DEFAULT_INODE_SIZE], &csum, ino);
    }
    w.write(descs[0].inode_table, &itb0, BlockKind::Metadata)?;
    // directories
    // Directory leaves end with a checksum record with metadata_csum.
    let dir_block = |ino: u32, entries: &[(u32, &[u8], u8)]| -> FsResult<Box<[u8]>> {
        let mut b = zeroed_block(bs_bytes);
        let ic = csum.for_inode(ino, 0);
        let end = if ic.seed.is_some() { bs_bytes - dirent::TAIL_SIZE } else { bs_bytes };
        dirent::init_block(&mut b[..end], entries)?;
        if let Some(seed) = ic.seed {
            dirent::set_leaf_checksum(seed, &mut b[..]);
        }
        Ok(b)
    };
    let root_dir = dir_block(
        ROOT_INO,
        &[(ROOT_INO, b".", FT_DIR), (ROOT_INO, b"..", FT_DIR), (FIRST_INO, b"lost+found", FT_DIR)],
    )?;
    w.write(root_block, &root_dir[..], BlockKind::Metadata)?;
    let lf_first = dir_block(FIRST_INO, &[(FIRST_INO, b".", FT_DIR), (ROOT_INO, b"..", FT_DIR)])?;
    w.write(lf_block, &lf_first[..], BlockKind::Metadata)?;
    for i in 1..LOST_FOUND_BLOCKS {
        w.write(lf_block + i, &dir_block(FIRST_INO, &[])?[..], BlockKind::Metadata)?;
    }
    if let Some((ib, leaf)) = &jindex {
        let mut b = vec![0u8; bs_bytes];
        leaf.encode_into(&mut b);
        if let Some(seed) = csum.for_inode(JOURNAL_INO, 0).seed {
            set_block_checksum(seed, &mut b);
        }
        w.write(*ib, &b, BlockKind::Metadata)?;
    }
    w.finish()?;
    // journal superblock (also flushes)
    let area = JournalArea::new(runs.iter().copied());
    use cjfs_journal::superblock::AreaKind;
    let extra: Vec<(u64, AreaKind)> = opts
        .log_areas
        .iter()
        .map(|&a| (u64::from(a), AreaKind::Log))
        .chain(opts.ijournal_areas.iter().map(|&a| (u64::from(a), AreaKind::IJournal)))
        .collect();
    cjfs_journal::superblock::format_journal_with_areas(
        dev,
        &area,
        uuid,
        true,
        u64::from(primary_blocks),
        &extra,
    )?;

    // group descriptor table copies
    let mut gdt = vec![0u8; g.gdt_blocks as usize * bs_bytes];
    GroupDesc::encode_table(&descs, g.desc_size, &mut gdt, &csum);
    let sb_groups: Vec<u32> = (0..g.groups).filter(|&x| sb.has_super_in_group(x)).collect();
    for &grp in &sb_groups {
        w.write(sb.group_first_block(grp) + 1, &gdt, BlockKind::Superblock)?;
    }
    sb.kbytes_written = (w.blocks + sb_groups.len() as u64 + 2) * (bs / 1024);
    for &grp in sb_groups.iter().filter(|&&x| x != 0) {
        let mut copy = sb.clone();
        copy.block_group_nr = grp as u16;
        let mut b = vec![0u8; bs_bytes];
        copy.encode_into(&mut b[..SUPERBLOCK_SIZE]);
        w.write(sb.group_first_block(grp), &b, BlockKind::Superblock)?;
    }
    w.finish()?;
    dev.flush()?;
    let (sb_blk, sb_off) = sb_location(bs_bytes);
    let mut b0 = vec![0u8; bs_bytes];
    sb.encode_into(&mut b0[sb_off..sb_off + SUPERBLOCK_SIZE]);
    w.write(sb_blk, &b0, BlockKind::Superblock)?;
    w.finish()?;
    dev.flush()?;

    // re-decode so the report's superblock carries the raw bytes written
    let sb = Superblock::decode(&b0[sb_off..])?;
    Ok(MkfsReport {
        block_count: g.blocks,
        group_count: g.groups,
        inodes_per_group: g.ipg,
        inode_table_blocks: g.itb,
        journal_runs: runs,
        journal_blocks: jblocks,
        journal_index_block: jindex.map(|(b, _)| b),
        free_blocks: sb.free_blocks_count,
        free_inodes: sb.free_inodes_count,
        uuid,
        groups: GroupDesc::decode_table(&gdt, g.groups, g.desc_size)?,
        superblock: sb,
    })
}

/// First block of the group the journal should start in: like mke2fs'
/// `get_midpoint_journal_block`, the group at the middle of the file system (rounded down to
/// its flex group's first group when past the first flex group), choosing among it and its
/// neighbours the one with the most free blocks.
fn journal_goal(sb: &Superblock, used: &Used) -> u64 {
    let groups = sb.group_count();
    let free = |grp: u32| {
        let s = sb.group_first_block(grp);
        let n = sb.group_block_count(grp) as u64;
        n - used.count_in(s, s + n)
    };
    let mut group = sb.group_of_block(sb.block_count() / 2);
    let log_flex = sb.groups_per_flex();
    let start;
    if sb.log_groups_per_flex > 0 && group > log_flex {
        group &= !(log_flex - 1);
        while group < groups && free(group) == 0 {
            group += 1;
        }
        if group == groups {
            group = 0;
        }
        start = group;
    } else {
        start = group.saturating_sub(1);
    }
    let end = if group + 1 < groups { group + 1 } else { group };
    let mut best = start;
    for i in start + 1..=end {
        if free(i) > free(best) {
            best = i;
        }
    }
    sb.group_first_block(best)
}

/// Decode the primary superblock of `dev` (the 1024 bytes at byte 1024, whatever the block
/// size) and check that the device was opened with the block size it names.
pub fn read_primary_superblock(dev: &dyn BlockDevice) -> FsResult<Superblock> {
    let bs = dev.block_size();
    let nblocks = (SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE).div_ceil(bs);
    if dev.num_blocks() < nblocks as u64 {
        return Err(FsError::Corrupt(format!(
            "not an ext2/3/4 file system: the device holds {} whole block(s) of {bs} bytes, too \
             few for the superblock at bytes 1024..2048",
            dev.num_blocks()
        )));
    }
    let mut head = vec![0u8; nblocks * bs];
    dev.read(0, &mut head)?;
    let sb = Superblock::decode_from_device_start(&head)?;
    if sb.block_size() as usize != bs && cjfs_blockdev::valid_block_size(sb.block_size() as usize) {
        return Err(FsError::Invalid(format!(
            "superblock: the file system has {}-byte blocks but the device was opened with {bs}-byte \
             blocks",
            sb.block_size()
        )));
    }
    Ok(sb)
}

/// Read the primary superblock and the group descriptor table of `dev`: checks the magic
/// ("not an ext2/3/4 file system: bad magic 0x...."), the geometry, the features
/// ([`features::check_supported`]), that the device holds the whole file system, and every
/// descriptor (location sanity, and its checksum with `uninit_bg` or `metadata_csum`). The
/// superblock's own checksum is checked by [`Superblock::decode`].
pub fn read_layout(dev: &dyn BlockDevice) -> FsResult<(Superblock, Vec<GroupDesc>)> {
    read_layout_for(dev, features::Access::ReadWrite)
}

/// [`read_layout`] for a file system opened with `access` (read-only, the ro_compat features
/// cjfs reads past are allowed: [`features::check_supported_for`]).
pub fn read_layout_for(
    dev: &dyn BlockDevice,
    access: features::Access,
) -> FsResult<(Superblock, Vec<GroupDesc>)> {
    let sb = read_primary_superblock(dev)?;
    features::check_supported_for(&sb, access)?;
    if sb.block_count() > dev.num_blocks() {
        return Err(FsError::Corrupt(format!(
            "image is truncated: the superblock says {} blocks (s_blocks_count) but the device has \
             only {}",
            sb.block_count(),
            dev.num_blocks()
        )));
    }
    let buf = read_desc_table(dev, &sb)?;
    let descs = GroupDesc::decode_table(&buf, sb.group_count(), sb.desc_size())?;
    let csum = Csum::from_sb(&sb);
    for (grp, d) in descs.iter().enumerate() {
        d.verify_checksum(&csum, grp as u32)?;
        d.validate(&sb, grp as u32)?;
    }
    Ok((sb, descs))
}

/// The primary group descriptor table of `sb`'s file system, its blocks read from where
/// they are ([`Superblock::desc_block_location`]) into one buffer.
pub fn read_desc_table(dev: &dyn BlockDevice, sb: &Superblock) -> FsResult<Vec<u8>> {
    let bs = dev.block_size();
    let n = sb.gdt_blocks();
    let mut buf = vec![0u8; n as usize * bs];
    let classic = sb.classic_gdt_blocks() as usize;
    if classic > 0 {
        dev.read(sb.first_data_block as u64 + 1, &mut buf[..classic * bs])?;
    }
    for i in classic..n as usize {
        let at = sb.desc_block_location(i as u32);
        if at >= sb.block_count() {
            return Err(FsError::Corrupt(format!(
                "meta_bg: group descriptor block {i} would be at block {at}, past the end of the file system"
            )));
        }
        dev.read(at, &mut buf[i * bs..(i + 1) * bs])?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_sizes() {
        assert_eq!(default_journal_blocks(4096), 1024);
        assert_eq!(default_journal_blocks(65536), 4096);
        assert_eq!(default_journal_blocks(262144), 8192);
        assert_eq!(default_journal_blocks(1 << 30), 262144);
    }

    #[test]
    fn geometry_small_and_rounding() {
        let o = MkfsOptions::default();
        let g = geometry(4096, 4096, &o).unwrap();
        assert_eq!((g.groups, g.ipg, g.itb), (1, 1024, 64));
        // 64 MiB
        let g = geometry(16384, 4096, &o).unwrap();
        assert_eq!((g.groups, g.ipg), (1, 4096));
        // a last group of 100 blocks is dropped
        let g = geometry(32768 + 100, 4096, &o).unwrap();
        assert_eq!((g.blocks, g.groups), (32768, 1));
        let g = geometry(1 << 18, 4096, &o).unwrap();
        assert_eq!((g.groups, g.ipg, g.itb), (8, 8192, 512));
    }

    #[test]
    fn used_alloc() {
        let mut u = Used::new(100);
        u.mark(0, 10);
        u.mark(20, 5);
        assert_eq!(u.alloc(0, 10, "x").unwrap(), 10);
        assert_eq!(u.alloc(0, 3, "x").unwrap(), 25);
        assert_eq!(u.count_in(0, 100), 28);
        assert_eq!(u.count_in(22, 26), 4);
        assert_eq!(u.alloc_runs(90, 20, "j").unwrap(), vec![(28, 20)]);
        let mut u = Used::new(100);
        u.mark(0, 20);
        u.mark(20, 8);
        u.mark(40, 1);
        u.mark(60, 1);
        u.mark(80, 1);
        let runs = u.alloc_runs(90, 30, "j").unwrap();
        assert_eq!(runs, vec![(90, 10), (28, 12), (41, 8)]);
        assert!(u.alloc_runs(0, 100, "j").is_err());
    }
}
