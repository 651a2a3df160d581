//! Mutations aimed at each metadata structure, deterministic from an RNG.
//!
//! [`mutate`] picks one structure the seed has (see [`Structure`]), changes one field of one
//! instance to an interesting value (0, 1, the maximum, off by one, a flipped bit, a random
//! value, or a value chosen for that field: another structure's block, a reserved inode, a
//! length crossing the block end, ...), and records a description `structure field @offset:
//! old -> new`. Now and then a second mutation is stacked. Journal mutations usually fix the
//! checksum they broke (journal superblock, descriptor and revoke tails, commit block, data
//! block tags), so that recovery reaches the changed value instead of stopping at the
//! checksum.

use cjfs_fs::ondisk::inode::{
    EXT4_APPEND_FL, EXT4_CASEFOLD_FL, EXT4_COMPR_FL, EXT4_DAX_FL, EXT4_EA_INODE_FL, EXT4_ENCRYPT_FL,
    EXT4_EXTENTS_FL, EXT4_HUGE_FILE_FL, EXT4_IMMUTABLE_FL, EXT4_INDEX_FL, EXT4_INLINE_DATA_FL,
    EXT4_JOURNAL_DATA_FL, EXT4_VERITY_FL, JOURNAL_INO, ROOT_INO, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK,
    S_IFREG, S_IFSOCK,
};
use cjfs_fs::ondisk::superblock as sbo;
use cjfs_journal::checksum::{block_tag_csum, block_tail_csum, commit_block_csum, superblock_csum};
use cjfs_journal::descriptor::{
    JBD2_MAGIC, TAG_FLAG_DELETED, TAG_FLAG_ESCAPE, TAG_FLAG_LAST_TAG, TAG_FLAG_SAME_UUID,
};
use cjfs_journal::superblock::{
    INCOMPAT_64BIT, INCOMPAT_ASYNC_COMMIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3, INCOMPAT_FAST_COMMIT,
    INCOMPAT_REVOKE, JournalFeatures,
};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::layout::{BS, DxKind, Layout, LogBlock, LogKind, get_be, get_le};
use crate::seeds::Seed;

/// The structure a mutation aims at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Structure {
    /// Not mutated (a seed judged as is).
    None,
    /// A field of the primary superblock.
    Superblock,
    /// A field of a group descriptor.
    GroupDesc,
    /// Bits of a block bitmap.
    BlockBitmap,
    /// Bits of an inode bitmap.
    InodeBitmap,
    /// A field of an inode table entry.
    Inode,
    /// The extent header in an inode's `i_block`.
    ExtentHeader,
    /// An extent or index entry in an inode's `i_block`.
    ExtentEntry,
    /// An extent index or leaf block.
    ExtentBlock,
    /// A directory entry.
    DirEntry,
    /// The `.` or `..` entry of a directory.
    DotDot,
    /// An htree root.
    Htree,
    /// An xattr block or in-inode xattr area.
    Xattr,
    /// The journal superblock.
    JournalSuperblock,
    /// A descriptor block of the log.
    JournalDescriptor,
    /// A commit block of the log.
    JournalCommit,
    /// A revoke block of the log.
    JournalRevoke,
    /// A logged copy of a metadata block.
    JournalData,
    /// Random bytes flipped.
    ByteFlips,
    /// The image truncated (or extended).
    Truncate,
    /// A region zeroed.
    ZeroRegion,
}

impl Structure {
    /// Every mutated structure, in report order.
    pub const MUTATED: [Structure; 20] = [
        Structure::Superblock,
        Structure::GroupDesc,
        Structure::BlockBitmap,
        Structure::InodeBitmap,
        Structure::Inode,
        Structure::ExtentHeader,
        Structure::ExtentEntry,
        Structure::ExtentBlock,
        Structure::DirEntry,
        Structure::DotDot,
        Structure::Htree,
        Structure::Xattr,
        Structure::JournalSuperblock,
        Structure::JournalDescriptor,
        Structure::JournalCommit,
        Structure::JournalRevoke,
        Structure::JournalData,
        Structure::ByteFlips,
        Structure::Truncate,
        Structure::ZeroRegion,
    ];

    /// The name as printed and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Structure::None => "none",
            Structure::Superblock => "superblock",
            Structure::GroupDesc => "group_desc",
            Structure::BlockBitmap => "block_bitmap",
            Structure::InodeBitmap => "inode_bitmap",
            Structure::Inode => "inode",
            Structure::ExtentHeader => "extent_header",
            Structure::ExtentEntry => "extent_entry",
            Structure::ExtentBlock => "extent_block",
            Structure::DirEntry => "dir_entry",
            Structure::DotDot => "dot_dot",
            Structure::Htree => "htree",
            Structure::Xattr => "xattr",
            Structure::JournalSuperblock => "journal_superblock",
            Structure::JournalDescriptor => "journal_descriptor",
            Structure::JournalCommit => "journal_commit",
            Structure::JournalRevoke => "journal_revoke",
            Structure::JournalData => "journal_data",
            Structure::ByteFlips => "byte_flips",
            Structure::Truncate => "truncate",
            Structure::ZeroRegion => "zero_region",
        }
    }
}

impl std::fmt::Display for Structure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One change made to an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutation {
    /// What it aimed at.
    pub structure: Structure,
    /// What it changed: `field @offset: old -> new`.
    pub desc: String,
}

/// A mutated image.
#[derive(Debug, Clone)]
pub struct Mutated {
    /// The image bytes.
    pub bytes: Vec<u8>,
    /// The changes, first the primary one.
    pub mutations: Vec<Mutation>,
}

impl Mutated {
    /// The structure of the primary mutation.
    pub fn structure(&self) -> Structure {
        self.mutations.first().map_or(Structure::None, |m| m.structure)
    }
}

/// The structures `layout` has instances of (what [`mutate`] can aim at).
pub fn available(layout: &Layout) -> Vec<Structure> {
    let log = layout.journal.as_ref().map(|j| j.log.as_slice()).unwrap_or(&[]);
    let in_log = |f: fn(&LogKind) -> bool| log.iter().any(|b| f(&b.kind));
    Structure::MUTATED
        .into_iter()
        .filter(|s| match s {
            Structure::ExtentHeader | Structure::ExtentEntry => layout.inodes.iter().any(|i| i.has_extents()),
            Structure::ExtentBlock => !layout.extent_blocks.is_empty(),
            Structure::DirEntry | Structure::DotDot => {
                layout.dir_blocks.iter().any(|b| !b.entries.is_empty())
            }
            Structure::Htree => layout.dir_blocks.iter().any(|b| b.dx == DxKind::Root),
            Structure::Xattr => {
                !layout.xattr_blocks.is_empty() || layout.inodes.iter().any(|i| !i.ibody_xattrs.is_empty())
            }
            Structure::JournalSuperblock => layout.journal.is_some(),
            Structure::JournalDescriptor | Structure::JournalData => {
                in_log(|k| matches!(k, LogKind::Descriptor { .. }))
            }
            Structure::JournalCommit => in_log(|k| matches!(k, LogKind::Commit)),
            Structure::JournalRevoke => in_log(|k| matches!(k, LogKind::Revoke { .. })),
            _ => true,
        })
        .collect()
}

/// Mutate a copy of `seed` (see the module docs).
pub fn mutate(seed: &Seed, rng: &mut StdRng) -> Mutated {
    let avail = available(&seed.layout);
    let mut m = Mutator { l: &seed.layout, b: seed.bytes.clone(), muts: Vec::new(), rng };
    let first = *avail.choose(m.rng).expect("superblock mutations are always available");
    m.apply(first);
    if m.rng.gen_bool(0.15) {
        let second =
            if m.rng.gen_bool(0.5) { Structure::ByteFlips } else { *avail.choose(m.rng).expect("non-empty") };
        if second != Structure::Truncate || first != Structure::Truncate {
            m.apply(second);
        }
    }
    Mutated { bytes: m.b, mutations: m.muts }
}

fn mask(width: usize) -> u64 {
    if width >= 8 { u64::MAX } else { (1u64 << (8 * width)) - 1 }
}

fn show(v: u64) -> String {
    if v < 100_000 { v.to_string() } else { format!("{v:#x}") }
}

struct Mutator<'a> {
    l: &'a Layout,
    b: Vec<u8>,
    muts: Vec<Mutation>,
    rng: &'a mut StdRng,
}

impl Mutator<'_> {
    fn record(&mut self, structure: Structure, desc: String) {
        self.muts.push(Mutation { structure, desc });
    }

    fn get(&self, off: u64, width: usize, be: bool) -> u64 {
        if be { get_be(&self.b, off, width) } else { get_le(&self.b, off, width) }
    }

    /// Store `new` at `off` and record `what @off: old -> new`.
    fn set(&mut self, s: Structure, what: &str, off: u64, width: usize, be: bool, new: u64) {
        let end = off as usize + width;
        if end > self.b.len() {
            self.record(s, format!("{what} @{off:#x}: past the end of the image, not changed"));
            return;
        }
        let old = self.get(off, width, be);
        let new = new & mask(width);
        for (i, byte) in new.to_le_bytes().into_iter().take(width).enumerate() {
            let k = if be { width - 1 - i } else { i };
            self.b[off as usize + k] = byte;
        }
        self.record(s, format!("{what} @{off:#x}: {} -> {}", show(old), show(new)));
    }

    /// An interesting new value for a `width`-byte field holding `old`.
    fn pick(&mut self, old: u64, width: usize, extras: &[u64]) -> u64 {
        let max = mask(width);
        for _ in 0..16 {
            let v = if !extras.is_empty() && self.rng.gen_bool(0.45) {
                *extras.choose(self.rng).expect("non-empty") & max
            } else {
                match self.rng.gen_range(0..8) {
                    0 => 0,
                    1 => 1,
                    2 => max,
                    3 => old.wrapping_add(1) & max,
                    4 => old.wrapping_sub(1) & max,
                    5 => old ^ (1u64 << self.rng.gen_range(0..width * 8)),
                    6 => self.rng.r#gen::<u64>() & max,
                    _ => 1u64 << (width * 8 - 1),
                }
            };
            if v != old {
                return v;
            }
        }
        old ^ 1
    }

    /// Pick a value for the field at `off` and store it.
    /// Mutate one little-endian field, chosen from `table` (name, offset from `base`, width,
    /// values worth trying besides the generic ones).
    fn one_field_of(&mut self, s: Structure, base: u64, table: &[(&str, usize, usize, Vec<u64>)]) {
        let (name, off, w, extras) = table.choose(self.rng).expect("non-empty");
        self.field(s, name, base + *off as u64, *w, false, extras);
    }

    /// Flip one bit of the 32-bit feature word at `off`: a known feature most of the time,
    /// any bit otherwise.
    fn flip_feature(&mut self, s: Structure, name: &str, off: u64, be: bool, known: &[u32]) {
        let bit = if self.rng.gen_bool(0.75) {
            u64::from(*known.choose(self.rng).expect("non-empty"))
        } else {
            1u64 << self.rng.gen_range(0..32)
        };
        let old = self.get(off, 4, be);
        self.set(s, name, off, 4, be, old ^ bit);
    }

    /// Replace the byte at `byte` by `f` of its value.
    fn update_byte(&mut self, s: Structure, what: &str, byte: u64, f: impl FnOnce(u64) -> u64) {
        let old = self.get(byte, 1, false);
        self.set(s, what, byte, 1, false, f(old));
    }

    fn field(&mut self, s: Structure, what: &str, off: u64, width: usize, be: bool, extras: &[u64]) {
        let old = self.get(off, width, be);
        let new = self.pick(old, width, extras);
        self.set(s, what, off, width, be, new);
    }

    fn blocks(&self) -> u64 {
        self.l.sb.block_count()
    }

    /// Block numbers worth pointing a block field at.
    fn block_targets(&mut self) -> Vec<u64> {
        let l = self.l;
        let n = self.blocks();
        let mut v = vec![0, 1, n - 1, n, n + 1, u64::from(u32::MAX), 1 << 32];
        if let Some(g) = l.groups.first() {
            v.extend([g.block_bitmap, g.inode_bitmap, g.inode_table, g.inode_table + l.itable_blocks - 1]);
            v.push(n.saturating_sub(l.itable_blocks) + 1);
        }
        if let Some(j) = &l.journal {
            v.push(j.sb_block);
            v.push(j.log_to_dev[j.log_to_dev.len() / 2]);
        }
        if let Some(d) = l.dir_blocks.choose(self.rng) {
            v.push(d.block);
        }
        if let Some(&d) = l.data_blocks.choose(self.rng) {
            v.push(d);
        }
        if let Some(x) = l.extent_blocks.choose(self.rng) {
            v.push(x.block);
        }
        v
    }

    /// Inode numbers worth pointing an inode field at.
    fn inode_targets(&mut self) -> Vec<u64> {
        let l = self.l;
        let n = u64::from(l.sb.inodes_count);
        let mut v: Vec<u64> = vec![0, 1, 2, 3, 5, 7, 8, 10, 11, n, n + 1, u64::from(u32::MAX)];
        v.push(u64::from(l.sb.first_ino()) - 1);
        if let Some(&f) = l.free_inodes.choose(self.rng) {
            v.push(u64::from(f));
        }
        if let Some(i) = l.inodes.iter().filter(|i| i.ino > 11).collect::<Vec<_>>().choose(self.rng) {
            v.push(u64::from(i.ino));
        }
        if let Some(i) = l.inodes.iter().filter(|i| i.is_dir()).collect::<Vec<_>>().choose(self.rng) {
            v.push(u64::from(i.ino));
        }
        v
    }

    fn apply(&mut self, s: Structure) {
        match s {
            Structure::None => {}
            Structure::Superblock => self.superblock(),
            Structure::GroupDesc => self.group_desc(),
            Structure::BlockBitmap => self.bitmap(true),
            Structure::InodeBitmap => self.bitmap(false),
            Structure::Inode => self.inode(),
            Structure::ExtentHeader => self.extent_header(),
            Structure::ExtentEntry => self.extent_entry(),
            Structure::ExtentBlock => self.extent_block(),
            Structure::DirEntry => self.dir_entry(),
            Structure::DotDot => self.dot_dot(),
            Structure::Htree => self.htree(),
            Structure::Xattr => self.xattr(),
            Structure::JournalSuperblock => self.journal_superblock(),
            Structure::JournalDescriptor => self.journal_descriptor(),
            Structure::JournalCommit => self.journal_commit(),
            Structure::JournalRevoke => self.journal_revoke(),
            Structure::JournalData => self.journal_data(),
            Structure::ByteFlips => self.byte_flips(),
            Structure::Truncate => self.truncate(),
            Structure::ZeroRegion => self.zero_region(),
        }
    }

    fn superblock(&mut self) {
        const S: Structure = Structure::Superblock;
        let base = 1024u64;
        let l = self.l;
        let sb = &l.sb;
        let blocks = self.blocks();
        let inodes = u64::from(sb.inodes_count);
        let live: Vec<u64> = l.inodes.iter().filter(|i| i.ino >= 11).map(|i| u64::from(i.ino)).collect();
        let live_ino = live.choose(self.rng).copied().unwrap_or(12);
        match self.rng.gen_range(0..10) {
            0 => {
                self.one_field_of(
                    S,
                    base,
                    &[
                        (
                            "s_inodes_count",
                            sbo::S_INODES_COUNT,
                            4,
                            vec![inodes + 1, inodes - 1, inodes * 2, 11],
                        ),
                        (
                            "s_blocks_count_lo",
                            sbo::S_BLOCKS_COUNT_LO,
                            4,
                            vec![blocks + 1, blocks - 1, blocks * 2, 1],
                        ),
                        ("s_blocks_count_hi", sbo::S_BLOCKS_COUNT_HI, 4, vec![1]),
                        ("s_r_blocks_count_lo", sbo::S_R_BLOCKS_COUNT_LO, 4, vec![blocks, blocks + 1]),
                        ("s_free_blocks_count_lo", sbo::S_FREE_BLOCKS_COUNT_LO, 4, vec![blocks, blocks + 1]),
                        ("s_free_inodes_count", sbo::S_FREE_INODES_COUNT, 4, vec![inodes, inodes + 1]),
                        ("s_first_data_block", sbo::S_FIRST_DATA_BLOCK, 4, vec![1, 2, blocks]),
                    ],
                );
            }
            1 => {
                let ipg = u64::from(sb.inodes_per_group);
                self.one_field_of(
                    S,
                    base,
                    &[
                        ("s_log_block_size", sbo::S_LOG_BLOCK_SIZE, 4, vec![0, 1, 3, 4, 6, 7, 16, 31]),
                        ("s_log_cluster_size", sbo::S_LOG_CLUSTER_SIZE, 4, vec![0, 1, 3, 4, 16]),
                        (
                            "s_blocks_per_group",
                            sbo::S_BLOCKS_PER_GROUP,
                            4,
                            vec![8, 256, 1024, 4095, 4096, 32767, 32769, 65536],
                        ),
                        (
                            "s_clusters_per_group",
                            sbo::S_CLUSTERS_PER_GROUP,
                            4,
                            vec![8, 4096, 32767, 32769, 65536],
                        ),
                        (
                            "s_inodes_per_group",
                            sbo::S_INODES_PER_GROUP,
                            4,
                            vec![8, 15, 16, ipg - 1, ipg + 1, ipg * 2, 32768, 32769, 65536],
                        ),
                    ],
                );
            }
            2 => {
                self.one_field_of(
                    S,
                    base,
                    &[
                        ("s_first_ino", sbo::S_FIRST_INO, 4, vec![0, 1, 2, 8, 10, 12, inodes, inodes + 1]),
                        (
                            "s_inode_size",
                            sbo::S_INODE_SIZE,
                            2,
                            vec![0, 64, 127, 128, 129, 255, 257, 512, 1024, 4096, 8192],
                        ),
                        ("s_min_extra_isize", sbo::S_MIN_EXTRA_ISIZE, 2, vec![0, 1, 3, 32, 100, 200, 0xFFFF]),
                        (
                            "s_want_extra_isize",
                            sbo::S_WANT_EXTRA_ISIZE,
                            2,
                            vec![0, 1, 3, 32, 100, 200, 0xFFFF],
                        ),
                    ],
                );
            }
            3 => {
                let mut extras: Vec<u64> = (1..=10).collect();
                extras.extend([u64::from(sb.first_ino()), inodes, inodes + 1, live_ino, live_ino, 2]);
                self.field(S, "s_last_orphan", base + sbo::S_LAST_ORPHAN as u64, 4, false, &extras);
            }
            4 => {
                let (name, off, known): (&str, usize, &[u32]) = *[
                    (
                        "s_feature_compat",
                        sbo::S_FEATURE_COMPAT,
                        &[0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x200, 0x400, 0x800, 0x1000][..],
                    ),
                    (
                        "s_feature_incompat",
                        sbo::S_FEATURE_INCOMPAT,
                        &[
                            0x1, 0x2, 0x4, 0x8, 0x10, 0x40, 0x80, 0x100, 0x200, 0x400, 0x1000, 0x2000,
                            0x4000, 0x8000, 0x10000, 0x20000,
                        ][..],
                    ),
                    (
                        "s_feature_ro_compat",
                        sbo::S_FEATURE_RO_COMPAT,
                        &[
                            0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x100, 0x200, 0x400, 0x1000, 0x2000,
                            0x8000, 0x10000,
                        ][..],
                    ),
                ]
                .choose(self.rng)
                .expect("non-empty");
                self.flip_feature(S, name, base + off as u64, false, known);
            }
            5 => {
                self.one_field_of(
                    S,
                    base,
                    &[
                        ("s_rev_level", sbo::S_REV_LEVEL, 4, vec![0, 2, 0xFFFF_FFFF]),
                        ("s_minor_rev_level", sbo::S_MINOR_REV_LEVEL, 2, vec![1, 0xFFFF]),
                        ("s_magic", sbo::S_MAGIC, 2, vec![0, 0xEF52, 0x53EF, 0xFFFF]),
                        ("s_state", sbo::S_STATE, 2, vec![0, 2, 3, 4, 6, 0xFFFF]),
                        ("s_errors", sbo::S_ERRORS, 2, vec![0, 2, 3, 4, 0xFFFF]),
                        ("s_creator_os", sbo::S_CREATOR_OS, 4, vec![1, 3, 5]),
                    ],
                );
            }
            6 => {
                self.one_field_of(
                    S,
                    base,
                    &[
                        (
                            "s_desc_size",
                            sbo::S_DESC_SIZE,
                            2,
                            vec![0, 16, 31, 32, 33, 63, 64, 65, 128, 1024, 4096],
                        ),
                        (
                            "s_journal_inum",
                            sbo::S_JOURNAL_INUM,
                            4,
                            vec![0, 1, 2, 7, 9, 11, inodes, inodes + 1, live_ino],
                        ),
                        (
                            "s_reserved_gdt_blocks",
                            sbo::S_RESERVED_GDT_BLOCKS,
                            2,
                            vec![0, 1, 256, 1024, 4096, 0xFFFF],
                        ),
                        ("s_log_groups_per_flex", sbo::S_LOG_GROUPS_PER_FLEX, 1, vec![0, 1, 31, 32, 64, 255]),
                        ("s_first_meta_bg", sbo::S_FIRST_META_BG, 4, vec![0, 1, 2, 0xFFFF_FFFF]),
                        ("s_def_hash_version", sbo::S_DEF_HASH_VERSION, 1, vec![0, 1, 2, 3, 4, 5, 6, 0xFF]),
                        ("s_checksum_type", sbo::S_CHECKSUM_TYPE, 1, vec![0, 1, 0xFF]),
                        ("s_jnl_backup_type", sbo::S_JNL_BACKUP_TYPE, 1, vec![0, 1, 2]),
                    ],
                );
            }
            7 => {
                self.one_field_of(
                    S,
                    base,
                    &[
                        ("s_lpf_ino", sbo::S_LPF_INO, 4, vec![2, 8, 11, live_ino, inodes + 1]),
                        ("s_usr_quota_inum", sbo::S_USR_QUOTA_INUM, 4, vec![2, 3, 8, live_ino, inodes + 1]),
                        ("s_grp_quota_inum", sbo::S_GRP_QUOTA_INUM, 4, vec![2, 4, 8, live_ino]),
                        ("s_prj_quota_inum", sbo::S_PRJ_QUOTA_INUM, 4, vec![2, 8, live_ino]),
                        ("s_orphan_file_inum", sbo::S_ORPHAN_FILE_INUM, 4, vec![2, 8, 11, 12, live_ino]),
                        ("s_encoding", sbo::S_ENCODING, 2, vec![1, 0xFFFF]),
                        ("s_flags", sbo::S_FLAGS, 4, vec![1, 2, 3, 4, 0xFFFF_FFFF]),
                        ("s_overhead_clusters", sbo::S_OVERHEAD_CLUSTERS, 4, vec![blocks, blocks + 1]),
                        ("s_mmp_block", sbo::S_MMP_BLOCK, 8, vec![0, 1, blocks + 1]),
                        ("s_backup_bgs[0]", sbo::S_BACKUP_BGS, 4, vec![1, 2, 0xFFFF_FFFF]),
                    ],
                );
            }
            8 => {
                self.one_field_of(
                    S,
                    base,
                    &[
                        ("s_mnt_count", sbo::S_MNT_COUNT, 2, vec![0xFFFF, 0x7FFF]),
                        ("s_max_mnt_count", sbo::S_MAX_MNT_COUNT, 2, vec![0, 1, 0x7FFF, 0xFFFF]),
                        ("s_wtime", sbo::S_WTIME, 4, vec![0, 0xFFFF_FFFF, 0x8000_0000]),
                        ("s_mtime", sbo::S_MTIME, 4, vec![0, 0xFFFF_FFFF]),
                        ("s_lastcheck", sbo::S_LASTCHECK, 4, vec![0, 0xFFFF_FFFF]),
                        ("s_checkinterval", sbo::S_CHECKINTERVAL, 4, vec![1, 0xFFFF_FFFF]),
                        ("s_kbytes_written", sbo::S_KBYTES_WRITTEN, 8, vec![u64::MAX]),
                        ("s_error_count", sbo::S_ERROR_COUNT, 4, vec![1, 0xFFFF_FFFF]),
                        (
                            "s_default_mount_opts",
                            sbo::S_DEFAULT_MOUNT_OPTS,
                            4,
                            vec![0x60, 0x400, 0xFFFF_FFFF],
                        ),
                    ],
                );
            }
            _ => {
                let k = self.rng.gen_range(0..17u64);
                let name = format!("s_jnl_blocks[{k}]");
                let extras = [0, 1, blocks, 0xF30A, 0xFFFF_FFFF];
                self.field(S, &name, base + sbo::S_JNL_BLOCKS as u64 + 4 * k, 4, false, &extras);
            }
        }
    }

    fn group_desc(&mut self) {
        const S: Structure = Structure::GroupDesc;
        let l = self.l;
        let g = l.groups.choose(self.rng).expect("at least one group").clone();
        let big = l.desc_size >= 64;
        let locs = self.block_targets();
        let ipg = u64::from(l.sb.inodes_per_group);
        let mut fields: Vec<(&str, u64, usize, Vec<u64>)> = vec![
            ("bg_block_bitmap_lo", 0x00, 4, locs.clone()),
            ("bg_inode_bitmap_lo", 0x04, 4, locs.clone()),
            ("bg_inode_table_lo", 0x08, 4, locs.clone()),
            ("bg_free_blocks_count_lo", 0x0C, 2, vec![g.blocks, g.blocks + 1, 0xFFFF]),
            ("bg_free_inodes_count_lo", 0x0E, 2, vec![ipg, ipg + 1, 0xFFFF]),
            ("bg_used_dirs_count_lo", 0x10, 2, vec![ipg, ipg + 1, 0xFFFF]),
            ("bg_flags", 0x12, 2, vec![1, 2, 3, 4, 5, 7, 0xFFFF]),
            ("bg_flags", 0x12, 2, vec![1, 2, 3, 4, 5, 7]),
            ("bg_exclude_bitmap_lo", 0x14, 4, locs.clone()),
            ("bg_block_bitmap_csum_lo", 0x18, 2, vec![]),
            ("bg_inode_bitmap_csum_lo", 0x1A, 2, vec![]),
            ("bg_itable_unused_lo", 0x1C, 2, vec![0, ipg, ipg + 1, ipg - 1, 0xFFFF]),
            ("bg_checksum", 0x1E, 2, vec![]),
        ];
        if big {
            fields.extend([
                ("bg_block_bitmap_hi", 0x20, 4, vec![1]),
                ("bg_inode_bitmap_hi", 0x24, 4, vec![1]),
                ("bg_inode_table_hi", 0x28, 4, vec![1]),
                ("bg_free_blocks_count_hi", 0x2C, 2, vec![1]),
                ("bg_free_inodes_count_hi", 0x2E, 2, vec![1]),
                ("bg_used_dirs_count_hi", 0x30, 2, vec![1]),
                ("bg_itable_unused_hi", 0x32, 2, vec![1]),
            ]);
        }
        let (name, off, w, extras) = fields.choose(self.rng).expect("non-empty").clone();
        let what = format!("group {} {name}", g.index);
        self.field(S, &what, g.desc_off + off, w, false, &extras);
    }

    fn bitmap(&mut self, blocks: bool) {
        let s = if blocks { Structure::BlockBitmap } else { Structure::InodeBitmap };
        let l = self.l;
        let g = l.groups.choose(self.rng).expect("at least one group").clone();
        let bm = if blocks { g.block_bitmap } else { g.inode_bitmap };
        let off = bm * BS;
        let units = if blocks { g.blocks } else { u64::from(l.sb.inodes_per_group) };
        let what = if blocks { "block bitmap" } else { "inode bitmap" };
        let bit_of = |n: u64| (off + n / 8, (n % 8) as u8);
        match self.rng.gen_range(0..7) {
            0 | 1 => {
                // Clear the bit of something in use.
                let n = if blocks {
                    let mut used = vec![0, g.block_bitmap, g.inode_bitmap, g.inode_table];
                    used.extend(l.dir_blocks.iter().map(|d| d.block));
                    used.extend(l.data_blocks.iter().copied());
                    used.extend(l.extent_blocks.iter().map(|e| e.block));
                    used.extend(l.xattr_blocks.iter().map(|x| x.block));
                    if let Some(j) = &l.journal {
                        used.push(j.sb_block);
                    }
                    used.retain(|&b| b >= g.first_block && b < g.first_block + g.blocks);
                    used.choose(self.rng).map(|b| b - g.first_block).unwrap_or(0)
                } else {
                    let first = u64::from(g.index) * u64::from(l.sb.inodes_per_group) + 1;
                    let used: Vec<u64> = l
                        .inodes
                        .iter()
                        .map(|i| u64::from(i.ino))
                        .filter(|&i| i >= first && i < first + units)
                        .collect();
                    used.choose(self.rng).map(|i| i - first).unwrap_or(1)
                };
                let (byte, bit) = bit_of(n);
                self.update_byte(s, &format!("{what} of group {} bit {n} (clear)", g.index), byte, |old| {
                    old & !(1 << bit)
                });
            }
            2 => {
                // Set the bit of something free.
                let mut n = self.rng.gen_range(0..units);
                for _ in 0..64 {
                    let (byte, bit) = bit_of(n);
                    if self.get(byte, 1, false) & (1 << bit) == 0 {
                        break;
                    }
                    n = self.rng.gen_range(0..units);
                }
                let (byte, bit) = bit_of(n);
                self.update_byte(s, &format!("{what} of group {} bit {n} (set)", g.index), byte, |old| {
                    old | (1 << bit)
                });
            }
            3 => {
                self.fill(s, &format!("{what} of group {} (block {bm})", g.index), off, BS as usize, 0);
            }
            4 => {
                self.fill(s, &format!("{what} of group {} (block {bm})", g.index), off, BS as usize, 0xFF);
            }
            5 => {
                let n = self.rng.gen_range(1..=8);
                for _ in 0..n {
                    let k = self.rng.gen_range(0..units);
                    let (byte, bit) = bit_of(k);
                    self.update_byte(
                        s,
                        &format!("{what} of group {} bit {k} (flip)", g.index),
                        byte,
                        |old| old ^ (1 << bit),
                    );
                }
            }
            _ => {
                // The padding past the group's last block or inode.
                let first_pad = units.div_ceil(8);
                if first_pad < BS {
                    let k = self.rng.gen_range(first_pad..BS);
                    let new = if self.rng.gen_bool(0.5) { 0 } else { 0x5A };
                    self.set(
                        s,
                        &format!("{what} of group {} padding byte {k}", g.index),
                        off + k,
                        1,
                        false,
                        new,
                    );
                } else {
                    let old = self.get(off + BS - 1, 1, false);
                    self.set(
                        s,
                        &format!("{what} of group {} last byte", g.index),
                        off + BS - 1,
                        1,
                        false,
                        !old,
                    );
                }
            }
        }
    }

    fn fill(&mut self, s: Structure, what: &str, off: u64, len: usize, v: u8) {
        let start = (off as usize).min(self.b.len());
        let end = (start + len).min(self.b.len());
        self.b[start..end].fill(v);
        self.record(s, format!("{what} @{off:#x}: {} bytes set to {v:#04x}", end - start));
    }

    /// An inode to mutate: mostly files and directories, sometimes the root, the journal, a
    /// reserved inode, an unused one.
    fn pick_inode(&mut self, pred: impl Fn(&crate::layout::InodeInfo) -> bool) -> Option<(u32, u64)> {
        let l = self.l;
        let r = self.rng.gen_range(0..20);
        let pool: Vec<_> = l.inodes.iter().filter(|i| pred(i)).collect();
        let chosen = match r {
            0 | 1 => pool.iter().find(|i| i.ino == ROOT_INO).copied(),
            2 => pool.iter().find(|i| i.ino == JOURNAL_INO).copied(),
            3 => pool.iter().filter(|i| i.ino < 11).collect::<Vec<_>>().choose(self.rng).map(|i| **i),
            _ => None,
        };
        let chosen = chosen.or_else(|| {
            let users: Vec<_> = pool.iter().filter(|i| i.ino >= 11).collect();
            users.choose(self.rng).map(|i| **i).or_else(|| pool.choose(self.rng).copied())
        })?;
        Some((chosen.ino, chosen.off))
    }

    fn inode(&mut self) {
        const S: Structure = Structure::Inode;
        let l = self.l;
        let (ino, off) = if self.rng.gen_bool(0.07) {
            // An unused inode (or a random one) brought to life.
            let ino = l.free_inodes.choose(self.rng).copied().unwrap_or(12);
            (ino, l.inode_off(ino).unwrap_or(0))
        } else {
            match self.pick_inode(|_| true) {
                Some(x) => x,
                None => return self.byte_flips(),
            }
        };
        let mode = self.get(off, 2, false);
        let perm = mode & 0o7777;
        let isz = l.sb.inode_size() as u64;
        let data = self.block_targets();
        let r = self.rng.gen_range(0..14);
        let what = |f: &str| format!("inode {ino} {f}");
        match r {
            0 | 1 => {
                let types = [S_IFREG, S_IFDIR, S_IFLNK, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK, 0, 0xF000];
                let mut extras: Vec<u64> = types.iter().map(|&t| perm | u64::from(t)).collect();
                extras.extend([0, 0xFFFF]);
                self.field(S, &what("i_mode"), off, 2, false, &extras);
            }
            2 | 3 => {
                let old = self.get(off + 4, 4, false);
                let extras = [0, 1, 59, 60, 61, 4095, 4096, 4097, old * 2, 0xFFFF_FFFF];
                self.field(S, &what("i_size_lo"), off + 4, 4, false, &extras);
            }
            4 | 5 => {
                let extras = [0x8000_0000, 0xFFFF_FFFF, 1, 0x7FFF_FFFF, 0x10000];
                self.field(S, &what("i_size_high"), off + 0x6C, 4, false, &extras);
            }
            6 => self.field(S, &what("i_links_count"), off + 0x1A, 2, false, &[0, 1, 2, 0xFFFF, 65000]),
            7 | 8 => {
                let flags = [
                    EXT4_EXTENTS_FL,
                    EXT4_INDEX_FL,
                    EXT4_INLINE_DATA_FL,
                    EXT4_HUGE_FILE_FL,
                    EXT4_EA_INODE_FL,
                    EXT4_ENCRYPT_FL,
                    EXT4_CASEFOLD_FL,
                    EXT4_VERITY_FL,
                    EXT4_IMMUTABLE_FL,
                    EXT4_APPEND_FL,
                    EXT4_JOURNAL_DATA_FL,
                    EXT4_COMPR_FL,
                    EXT4_DAX_FL,
                ];
                let bit = if self.rng.gen_bool(0.8) {
                    u64::from(*flags.choose(self.rng).expect("non-empty"))
                } else {
                    1u64 << self.rng.gen_range(0..32)
                };
                let old = self.get(off + 0x20, 4, false);
                self.set(S, &what("i_flags"), off + 0x20, 4, false, old ^ bit);
            }
            9 => {
                let (name, o, w) = *[("i_file_acl_lo", 0x68u64, 4usize), ("i_file_acl_high", 0x76, 2)]
                    .choose(self.rng)
                    .expect("non-empty");
                let extras = if w == 4 { data } else { vec![1, 0xFFFF] };
                self.field(S, &what(name), off + o, w, false, &extras);
            }
            10 if isz > 128 => {
                let extras = [0, 1, 2, 3, 4, 28, 32, 96, 97, 128, 160, 0xFFFF, isz - 128, isz - 124];
                self.field(S, &what("i_extra_isize"), off + 0x80, 2, false, &extras);
            }
            11 => {
                let (name, o, w) = *[
                    ("i_dtime", 0x14u64, 4usize),
                    ("i_blocks_lo", 0x1C, 4),
                    ("i_blocks_high", 0x74, 2),
                    ("i_generation", 0x64, 4),
                    ("i_uid", 0x02, 2),
                    ("i_gid", 0x18, 2),
                ]
                .choose(self.rng)
                .expect("non-empty");
                self.field(S, &what(name), off + o, w, false, &[1, 0xFFFF_FFFF]);
            }
            12 => {
                let (name, o) = *[
                    ("i_atime", 0x08u64),
                    ("i_ctime", 0x0C),
                    ("i_mtime", 0x10),
                    ("i_ctime_extra", 0x84),
                    ("i_mtime_extra", 0x88),
                    ("i_atime_extra", 0x8C),
                    ("i_crtime", 0x90),
                ]
                .choose(self.rng)
                .expect("non-empty");
                if o < isz {
                    self.field(S, &what(name), off + o, 4, false, &[0, 0xFFFF_FFFF, 0x8000_0000]);
                } else {
                    self.field(S, &what("i_mtime"), off + 0x10, 4, false, &[0, 0xFFFF_FFFF]);
                }
            }
            _ => {
                // Raw i_block bytes (a fast symlink's target, or a non-extent block map).
                let k = self.rng.gen_range(0..60u64);
                self.field(
                    S,
                    &what(&format!("i_block byte {k}")),
                    off + 0x28 + k,
                    1,
                    false,
                    &[0, b'/'.into(), 0xFF],
                );
            }
        }
    }

    fn extent_header_at(&mut self, s: Structure, owner: &str, off: u64, is_root: bool) {
        let max_cap: u64 = if is_root { 4 } else { 340 };
        let entries = self.get(off + 2, 2, false);
        let depth = self.get(off + 6, 2, false);
        let (name, o, w, extras): (&str, u64, usize, Vec<u64>) = [
            ("eh_magic", 0u64, 2usize, vec![0, 0xF30B, 0x0AF3, 0xFFFF]),
            ("eh_entries", 2, 2, vec![0, max_cap + 1, entries + 1, 5, 341, 0xFFFF]),
            ("eh_max", 4, 2, vec![0, 1, 3, 4, 5, 340, 341, 0xFFFF]),
            ("eh_depth", 6, 2, vec![0, 1, 2, depth + 1, 5, 6, 0xFFFF]),
            ("eh_generation", 8, 4, vec![1, 0xFFFF_FFFF]),
        ]
        .choose(self.rng)
        .expect("non-empty")
        .clone();
        self.field(s, &format!("{owner} {name}"), off + o, w, false, &extras);
    }

    fn extent_entry_at(&mut self, s: Structure, owner: &str, node: u64, cap: u64) {
        let entries = self.get(node + 2, 2, false);
        let depth = self.get(node + 6, 2, false);
        let k = if entries == 0 || self.rng.gen_bool(0.1) {
            entries.min(cap - 1)
        } else {
            self.rng.gen_range(0..entries.min(cap))
        };
        let e = node + 12 + 12 * k;
        let locs = self.block_targets();
        let prev_lblk = if k > 0 { self.get(e - 12, 4, false) } else { 0 };
        let (name, o, w, extras): (&str, u64, usize, Vec<u64>) = if depth == 0 {
            let len = self.get(e + 4, 2, false);
            [
                ("ee_block", 0u64, 4usize, vec![0, 1, prev_lblk, 0x7FFF_FFFF, 0xFFFF_FFFF, 0xFFFF_FFFE]),
                ("ee_len", 4, 2, vec![0, 1, 32768, 32769, 0xFFFF, len * 2, len + 1, len | 0x8000]),
                ("ee_start_hi", 6, 2, vec![1, 0xFFFF]),
                ("ee_start_lo", 8, 4, locs),
            ]
            .choose(self.rng)
            .expect("non-empty")
            .clone()
        } else {
            let mut leaf = locs;
            leaf.push(node / BS);
            [
                ("ei_block", 0u64, 4usize, vec![0, 1, prev_lblk, 0xFFFF_FFFF]),
                ("ei_leaf_lo", 4, 4, leaf),
                ("ei_leaf_hi", 8, 2, vec![1, 0xFFFF]),
                ("ei_unused", 10, 2, vec![1, 0xFFFF]),
            ]
            .choose(self.rng)
            .expect("non-empty")
            .clone()
        };
        self.field(s, &format!("{owner} entry {k} {name}"), e + o, w, false, &extras);
    }

    fn extent_header(&mut self) {
        match self.pick_inode(|i| i.has_extents()) {
            Some((ino, off)) => self.extent_header_at(
                Structure::ExtentHeader,
                &format!("inode {ino} i_block"),
                off + 0x28,
                true,
            ),
            None => self.byte_flips(),
        }
    }

    fn extent_entry(&mut self) {
        match self.pick_inode(|i| i.has_extents()) {
            Some((ino, off)) => {
                self.extent_entry_at(Structure::ExtentEntry, &format!("inode {ino} i_block"), off + 0x28, 4)
            }
            None => self.byte_flips(),
        }
    }

    fn extent_block(&mut self) {
        const S: Structure = Structure::ExtentBlock;
        let Some(x) = self.l.extent_blocks.choose(self.rng).cloned() else { return self.byte_flips() };
        let owner = format!("extent block {} (inode {}, depth {})", x.block, x.ino, x.depth);
        let off = x.block * BS;
        match self.rng.gen_range(0..10) {
            0..=3 => self.extent_header_at(S, &owner, off, false),
            4..=8 => self.extent_entry_at(S, &owner, off, 340),
            _ => self.fill(S, &owner, off, BS as usize, 0),
        }
    }

    fn dir_entry(&mut self) {
        const S: Structure = Structure::DirEntry;
        let l = self.l;
        let blocks: Vec<_> = l.dir_blocks.iter().filter(|b| !b.entries.is_empty()).collect();
        let Some(db) = blocks.choose(self.rng).map(|b| (*b).clone()) else { return self.byte_flips() };
        let e = db.entries.choose(self.rng).expect("non-empty").clone();
        let off = db.block * BS + e.off as u64;
        let inos = self.inode_targets();
        let owner = format!("dir {} block {} entry {:?}", db.ino, db.lblk, String::from_utf8_lossy(&e.name));
        let rec = u64::from(e.rec_len);
        let to_end = BS - e.off as u64;
        match self.rng.gen_range(0..10) {
            0..=2 => {
                let mut extras = inos;
                extras.push(u64::from(db.ino));
                self.field(S, &format!("{owner} inode"), off, 4, false, &extras);
            }
            3..=5 => {
                let extras = [
                    0,
                    1,
                    4,
                    8,
                    11,
                    12,
                    13,
                    rec - 4,
                    rec + 4,
                    rec + 1,
                    to_end,
                    to_end + 4,
                    4096,
                    4097,
                    0xFFFF,
                    0x8000,
                    0xFFFC,
                ];
                self.field(S, &format!("{owner} rec_len"), off + 4, 2, false, &extras);
            }
            6 => {
                let extras = [0, 1, 255, u64::from(e.name_len) + 1, rec - 7];
                self.field(S, &format!("{owner} name_len"), off + 6, 1, false, &extras);
            }
            7 | 8 => self.field(
                S,
                &format!("{owner} file_type"),
                off + 7,
                1,
                false,
                &[0, 1, 2, 3, 4, 5, 6, 7, 8, 0x7F, 0xFF],
            ),
            _ => {
                if e.name_len == 0 {
                    return self.field(S, &format!("{owner} name_len"), off + 6, 1, false, &[1, 255]);
                }
                let k = self.rng.gen_range(0..u64::from(e.name_len));
                self.field(
                    S,
                    &format!("{owner} name byte {k}"),
                    off + 8 + k,
                    1,
                    false,
                    &[0, b'/'.into(), b'.'.into(), 0xFF],
                );
            }
        }
    }

    fn dot_dot(&mut self) {
        const S: Structure = Structure::DotDot;
        let l = self.l;
        let firsts: Vec<_> = l.dir_blocks.iter().filter(|b| b.lblk == 0 && b.entries.len() >= 2).collect();
        let Some(db) = firsts.choose(self.rng).map(|b| (*b).clone()) else { return self.dir_entry() };
        let dot = db.block * BS;
        let dotdot = dot + u64::from(db.entries[0].rec_len);
        let mut inos = self.inode_targets();
        inos.extend([u64::from(db.ino), 2]);
        let owner = format!("dir {}", db.ino);
        match self.rng.gen_range(0..8) {
            0..=3 => self.field(S, &format!("{owner} '..' inode"), dotdot, 4, false, &inos),
            4 => self.field(S, &format!("{owner} '.' inode"), dot, 4, false, &inos),
            5 => {
                let rec = u64::from(db.entries[1].rec_len);
                self.field(
                    S,
                    &format!("{owner} '..' rec_len"),
                    dotdot + 4,
                    2,
                    false,
                    &[0, 12, rec + 4, 4096, 4084],
                )
            }
            6 => self.field(S, &format!("{owner} '..' name_len"), dotdot + 6, 1, false, &[0, 1, 3, 255]),
            _ => self.field(S, &format!("{owner} '.' rec_len"), dot + 4, 2, false, &[0, 8, 16, 4096, 0xFFFF]),
        }
    }

    fn htree(&mut self) {
        const S: Structure = Structure::Htree;
        let l = self.l;
        let roots: Vec<_> = l.dir_blocks.iter().filter(|b| b.dx == DxKind::Root).collect();
        let Some(db) = roots.choose(self.rng).map(|b| (*b).clone()) else { return self.dir_entry() };
        let off = db.block * BS;
        let nblocks = l.dir_blocks.iter().filter(|b| b.ino == db.ino).count() as u64;
        let count = self.get(off + 0x22, 2, false);
        let limit = self.get(off + 0x20, 2, false);
        let owner = format!("dir {} dx_root", db.ino);
        let mut fields: Vec<(String, u64, usize, Vec<u64>)> = vec![
            ("reserved_zero".into(), 0x18, 4, vec![1, 0xFFFF_FFFF]),
            ("hash_version".into(), 0x1C, 1, vec![0, 1, 2, 3, 4, 5, 6, 0xFF]),
            ("info_length".into(), 0x1D, 1, vec![0, 4, 9, 0xFF]),
            ("indirect_levels".into(), 0x1E, 1, vec![1, 2, 3, 4, 0xFF]),
            ("unused_flags".into(), 0x1F, 1, vec![1, 0xFF]),
            ("limit".into(), 0x20, 2, vec![0, 1, count.saturating_sub(1), 507, 508, 509, 0xFFFF]),
            ("count".into(), 0x22, 2, vec![0, 1, limit, limit + 1, 0xFFFF]),
            ("entry 0 block".into(), 0x24, 4, vec![0, nblocks, nblocks + 1, 0xFFFF_FFFF]),
        ];
        for k in 1..count.min(8) {
            let e = 0x20 + 8 * k;
            fields.push((format!("entry {k} hash"), e, 4, vec![0, 1, 0xFFFF_FFFE, 0xFFFF_FFFF]));
            fields.push((format!("entry {k} block"), e + 4, 4, vec![0, nblocks, nblocks + 1, 0xFFFF_FFFF]));
        }
        let (name, o, w, extras) = fields.choose(self.rng).expect("non-empty").clone();
        self.field(S, &format!("{owner} {name}"), off + o, w, false, &extras);
    }

    fn xattr(&mut self) {
        const S: Structure = Structure::Xattr;
        let l = self.l;
        let ibody: Vec<_> = l.inodes.iter().filter(|i| !i.ibody_xattrs.is_empty()).collect();
        let use_block = !l.xattr_blocks.is_empty() && (ibody.is_empty() || self.rng.gen_bool(0.6));
        let files = self.inode_targets();
        let (owner, entry_offs, header): (String, Vec<u64>, Option<u64>) = if use_block {
            let x = l.xattr_blocks.choose(self.rng).expect("non-empty");
            let base = x.block * BS;
            (
                format!("xattr block {} (inode {})", x.block, x.ino),
                x.entries.iter().map(|&e| base + e as u64).collect(),
                Some(base),
            )
        } else if let Some(i) = ibody.choose(self.rng) {
            (format!("inode {} in-inode xattrs", i.ino), i.ibody_xattrs.clone(), None)
        } else {
            return self.byte_flips();
        };
        if let Some(h) = header
            && self.rng.gen_bool(0.3)
        {
            let (name, o, extras): (&str, u64, Vec<u64>) = [
                ("h_magic", 0u64, vec![0, 0xEA01_0000, 0xEA02_0001, 0xFFFF_FFFF]),
                ("h_refcount", 4, vec![0, 2, 0xFFFF_FFFF]),
                ("h_blocks", 8, vec![0, 2, 0xFFFF_FFFF]),
                ("h_hash", 12, vec![0, 1]),
            ]
            .choose(self.rng)
            .expect("non-empty")
            .clone();
            return self.field(S, &format!("{owner} {name}"), h + o, 4, false, &extras);
        }
        if header.is_none() && self.rng.gen_bool(0.15) {
            let magic = entry_offs[0] - 4;
            return self.field(S, &format!("{owner} magic"), magic, 4, false, &[0, 0xEA02_0001, 0xEA01_0000]);
        }
        let k = self.rng.gen_range(0..entry_offs.len());
        let e = entry_offs[k];
        let value_size = self.get(e + 8, 4, false);
        let (name, o, w, extras): (&str, u64, usize, Vec<u64>) = [
            ("e_name_len", 0u64, 1usize, vec![0, 1, 255]),
            ("e_name_index", 1, 1, vec![0, 2, 3, 7, 9, 0xFF]),
            ("e_value_offs", 2, 2, vec![0, 1, 3, 4092, 4095, 4096, 0xFFFF]),
            ("e_value_inum", 4, 4, files),
            ("e_value_size", 8, 4, vec![0, 1, 4095, 4096, 65536, 0xFFFF_FFFF, value_size + 1]),
            ("e_hash", 12, 4, vec![0, 1]),
        ]
        .choose(self.rng)
        .expect("non-empty")
        .clone();
        self.field(S, &format!("{owner} entry {k} {name}"), e + o, w, false, &extras);
    }

    fn journal_superblock(&mut self) {
        const S: Structure = Structure::JournalSuperblock;
        let Some(j) = self.l.journal.as_ref() else { return self.byte_flips() };
        let off = j.sb_block * BS;
        let len = j.log_to_dev.len() as u64;
        let maxlen = u64::from(j.sb.s_maxlen);
        let first = u64::from(j.sb.s_first);
        let r = self.rng.gen_range(0..14);
        let checksum_field = r == 13;
        match r {
            0 => self.field(S, "journal h_magic", off, 4, true, &[0, u64::from(JBD2_MAGIC ^ 1)]),
            1 => self.field(S, "journal h_blocktype", off + 4, 4, true, &[1, 2, 3, 5, 6, 0xFF]),
            2 => {
                self.field(S, "journal s_blocksize", off + 0x0C, 4, true, &[0, 512, 1024, 2048, 8192, 65536])
            }
            3 => self.field(
                S,
                "journal s_maxlen",
                off + 0x10,
                4,
                true,
                &[0, 1, 2, len - 1, len + 1, len * 2, 1023],
            ),
            4 => self.field(
                S,
                "journal s_first",
                off + 0x14,
                4,
                true,
                &[0, 1, 2, maxlen - 1, maxlen, maxlen + 1],
            ),
            5 => self.field(S, "journal s_sequence", off + 0x18, 4, true, &[0, 0xFFFF_FFFF]),
            6 | 7 => self.field(
                S,
                "journal s_start",
                off + 0x1C,
                4,
                true,
                &[0, 1, first, first + 1, maxlen - 1, maxlen, maxlen + 1, 0xFFFF_FFFF],
            ),
            8 => self.field(S, "journal s_errno", off + 0x20, 4, true, &[(-5i32) as u32 as u64, 1]),
            9 | 10 => {
                let (name, o, known): (&str, u64, &[u32]) = *[
                    ("journal s_feature_compat", 0x24u64, &[1u32][..]),
                    (
                        "journal s_feature_incompat",
                        0x28,
                        &[
                            INCOMPAT_REVOKE,
                            INCOMPAT_64BIT,
                            INCOMPAT_ASYNC_COMMIT,
                            INCOMPAT_CSUM_V2,
                            INCOMPAT_CSUM_V3,
                            INCOMPAT_FAST_COMMIT,
                            0x40,
                        ][..],
                    ),
                    ("journal s_feature_ro_compat", 0x2C, &[1u32][..]),
                ]
                .choose(self.rng)
                .expect("non-empty");
                self.flip_feature(S, name, off + o, true, known);
            }
            11 => {
                let (name, o, w, extras): (&str, u64, usize, Vec<u64>) = [
                    ("journal s_nr_users", 0x40u64, 4usize, vec![0, 2, 48, 49, 0xFFFF_FFFF]),
                    ("journal s_max_transaction", 0x48, 4, vec![1, 0xFFFF_FFFF]),
                    ("journal s_max_trans_data", 0x4C, 4, vec![1, 0xFFFF_FFFF]),
                    ("journal s_checksum_type", 0x50, 1, vec![0, 1, 2, 3, 5, 0xFF]),
                    ("journal s_num_fc_blks", 0x54, 4, vec![1, 256, maxlen, 0xFFFF_FFFF]),
                    ("journal s_head", 0x58, 4, vec![1, maxlen, 0xFFFF_FFFF]),
                ]
                .choose(self.rng)
                .expect("non-empty")
                .clone();
                self.field(S, name, off + o, w, true, &extras);
            }
            12 => {
                let k = self.rng.gen_range(0..16u64);
                self.field(S, &format!("journal s_uuid byte {k}"), off + 0x30 + k, 1, false, &[0, 0xFF]);
            }
            _ => self.field(S, "journal s_checksum", off + 0xFC, 4, true, &[0, 1]),
        }
        // Usually make the checksum match again, so the change is what the reader meets.
        let incompat = self.get(off + 0x28, 4, true) as u32;
        let feats = JournalFeatures::new(0, incompat, 0);
        if !checksum_field && feats.csum_v2or3() && self.rng.gen_bool(0.6) {
            let start = off as usize;
            if start + 1024 <= self.b.len() {
                let c = superblock_csum(&self.b[start..start + 1024]);
                self.set(S, "journal s_checksum (fixed)", off + 0xFC, 4, true, u64::from(c));
            }
        }
    }

    fn log_blocks(&self, f: fn(&LogKind) -> bool) -> Vec<LogBlock> {
        self.l
            .journal
            .as_ref()
            .map(|j| j.log.iter().filter(|b| f(&b.kind)).cloned().collect())
            .unwrap_or_default()
    }

    /// Recompute the tail checksum of the descriptor or revoke block at device block `blk`.
    fn fix_tail(&mut self, s: Structure, blk: u64) {
        let Some(j) = self.l.journal.as_ref() else { return };
        if !j.features.csum_v2or3() {
            return;
        }
        let start = (blk * BS) as usize;
        if start + BS as usize > self.b.len() {
            return;
        }
        let c = block_tail_csum(j.csum_seed, &self.b[start..start + BS as usize]);
        self.set(
            s,
            &format!("log block {blk} tail checksum (fixed)"),
            blk * BS + BS - 4,
            4,
            true,
            u64::from(c),
        );
    }

    fn journal_descriptor(&mut self) {
        const S: Structure = Structure::JournalDescriptor;
        let descs = self.log_blocks(|k| matches!(k, LogKind::Descriptor { .. }));
        let Some(d) = descs.choose(self.rng).cloned() else { return self.byte_flips() };
        let LogKind::Descriptor { tags } = &d.kind else { return };
        let off = d.dev_block * BS;
        let owner = format!("descriptor (log block at {}, transaction {})", d.dev_block, d.seq);
        let locs = self.block_targets();
        let seq = u64::from(d.seq);
        let r = self.rng.gen_range(0..10);
        if r < 2 || tags.is_empty() {
            let (name, o, extras): (&str, u64, Vec<u64>) = [
                ("h_magic", 0u64, vec![0]),
                ("h_blocktype", 4, vec![2, 3, 4, 5, 0xFF]),
                ("h_sequence", 8, vec![seq + 1, seq.wrapping_sub(1), 0]),
            ]
            .choose(self.rng)
            .expect("non-empty")
            .clone();
            self.field(S, &format!("{owner} {name}"), off + o, 4, true, &extras);
        } else {
            let k = self.rng.gen_range(0..tags.len());
            let t = tags[k].clone();
            let to = off + t.off as u64;
            let tag = format!("{owner} tag {k} (home {})", t.home);
            match r {
                2..=5 => self.field(S, &format!("{tag} t_blocknr"), to, 4, true, &locs),
                6 => self.field(S, &format!("{tag} t_blocknr_high"), to + 8, 4, true, &[1, 0xFFFF_FFFF]),
                7 | 8 => {
                    let bit =
                        *[TAG_FLAG_ESCAPE, TAG_FLAG_SAME_UUID, TAG_FLAG_DELETED, TAG_FLAG_LAST_TAG, 0x8000]
                            .choose(self.rng)
                            .expect("non-empty");
                    let old = self.get(to + 6, 2, true);
                    self.set(S, &format!("{tag} t_flags"), to + 6, 2, true, old ^ u64::from(bit));
                }
                _ => self.field(S, &format!("{tag} t_checksum"), to + 12, 4, true, &[0]),
            }
        }
        if self.rng.gen_bool(0.7) {
            self.fix_tail(S, d.dev_block);
        }
    }

    fn journal_commit(&mut self) {
        const S: Structure = Structure::JournalCommit;
        let commits = self.log_blocks(|k| matches!(k, LogKind::Commit));
        let Some(c) = commits.choose(self.rng).cloned() else { return self.byte_flips() };
        let off = c.dev_block * BS;
        let seq = u64::from(c.seq);
        let owner = format!("commit (log block at {}, transaction {})", c.dev_block, c.seq);
        let (name, o, w, extras): (&str, u64, usize, Vec<u64>) = [
            ("h_magic", 0u64, 4usize, vec![0]),
            ("h_blocktype", 4, 4, vec![1, 3, 5, 0xFF]),
            ("h_sequence", 8, 4, vec![seq + 1, seq.wrapping_sub(1), 0]),
            ("h_chksum_type", 12, 1, vec![1, 2, 4, 0xFF]),
            ("h_chksum_size", 13, 1, vec![4, 32, 0xFF]),
            ("h_chksum[0]", 16, 4, vec![0, 1]),
            ("h_commit_sec", 48, 8, vec![0, u64::MAX]),
            ("h_commit_nsec", 56, 4, vec![1_000_000_000, 0xFFFF_FFFF]),
        ]
        .choose(self.rng)
        .expect("non-empty")
        .clone();
        self.field(S, &format!("{owner} {name}"), off + o, w, true, &extras);
        let Some(j) = self.l.journal.as_ref() else { return };
        if name != "h_chksum[0]" && j.features.csum_v2or3() && self.rng.gen_bool(0.5) {
            let start = off as usize;
            let csum = commit_block_csum(j.csum_seed, &self.b[start..start + BS as usize]);
            self.set(S, &format!("{owner} h_chksum[0] (fixed)"), off + 16, 4, true, u64::from(csum));
        }
    }

    fn journal_revoke(&mut self) {
        const S: Structure = Structure::JournalRevoke;
        let revokes = self.log_blocks(|k| matches!(k, LogKind::Revoke { .. }));
        let Some(rb) = revokes.choose(self.rng).cloned() else { return self.byte_flips() };
        let LogKind::Revoke { count } = rb.kind else { return };
        let off = rb.dev_block * BS;
        let owner = format!("revoke (log block at {}, transaction {})", rb.dev_block, rb.seq);
        let is64 = self.l.journal.as_ref().is_some_and(|j| j.features.has_64bit());
        let rec = if is64 { 8 } else { 4 };
        let count = u64::from(count);
        if self.rng.gen_bool(0.45) {
            let extras = [
                0,
                1,
                15,
                16,
                17,
                20,
                24,
                count + rec,
                count.saturating_sub(rec),
                4092,
                4096,
                4097,
                0xFFFF_FFFF,
            ];
            self.field(S, &format!("{owner} r_count"), off + 12, 4, true, &extras);
        } else if self.rng.gen_bool(0.2) {
            let seq = u64::from(rb.seq);
            self.field(S, &format!("{owner} h_sequence"), off + 8, 4, true, &[seq + 1, seq.wrapping_sub(1)]);
        } else {
            let n = count.saturating_sub(16) / rec;
            let k = if n == 0 { 0 } else { self.rng.gen_range(0..n) };
            let mut extras = self.block_targets();
            let homes: Vec<u64> = self
                .log_blocks(|k| matches!(k, LogKind::Data { .. }))
                .iter()
                .filter_map(|b| match b.kind {
                    LogKind::Data { home, .. } => Some(home),
                    _ => None,
                })
                .collect();
            if let Some(&h) = homes.choose(self.rng) {
                extras.extend([h, h, h]);
            }
            extras.push(u64::MAX);
            self.field(S, &format!("{owner} record {k}"), off + 16 + rec * k, rec as usize, true, &extras);
        }
        if self.rng.gen_bool(0.7) {
            self.fix_tail(S, rb.dev_block);
        }
    }

    fn journal_data(&mut self) {
        const S: Structure = Structure::JournalData;
        let datas = self.log_blocks(|k| matches!(k, LogKind::Data { .. }));
        let Some(d) = datas.choose(self.rng).cloned() else { return self.byte_flips() };
        let LogKind::Data { desc_dev_block, tag_off, home } = d.kind else { return };
        let l = self.l;
        let off = d.dev_block * BS;
        let owner = format!("logged copy of block {home} (transaction {})", d.seq);
        let in_itable =
            l.groups.iter().any(|g| home >= g.inode_table && home < g.inode_table + l.itable_blocks);
        let isz = l.sb.inode_size() as u64;
        if in_itable && self.rng.gen_bool(0.8) {
            let slot = self.rng.gen_range(0..BS / isz);
            let io = off + slot * isz;
            let (name, o, w, extras): (&str, u64, usize, Vec<u64>) = [
                ("i_size_high", 0x6Cu64, 4usize, vec![0x8000_0000, 0xFFFF_FFFF]),
                ("i_mode", 0, 2, vec![0, 0xFFFF, 0o040755, 0o100644, 0o120777]),
                ("i_links_count", 0x1A, 2, vec![0, 0xFFFF]),
                ("i_flags", 0x20, 4, vec![0, 0x1000, 0x1000_0000, 0xFFFF_FFFF]),
                ("eh_magic", 0x28, 2, vec![0, 0xFFFF]),
                ("eh_entries", 0x2A, 2, vec![5, 0xFFFF]),
                ("eh_depth", 0x2E, 2, vec![1, 6]),
                ("ee_start_lo", 0x28 + 12 + 8, 4, vec![0, 1, l.sb.block_count() + 1]),
            ]
            .choose(self.rng)
            .expect("non-empty")
            .clone();
            self.field(S, &format!("{owner} inode slot {slot} {name}"), io + o, w, false, &extras);
        } else if l.dir_blocks.iter().any(|b| b.block == home) && self.rng.gen_bool(0.8) {
            self.field(
                S,
                &format!("{owner} first dirent rec_len"),
                off + 4,
                2,
                false,
                &[0, 1, 8, 4097, 0xFFFF],
            );
        } else {
            let n = self.rng.gen_range(1..=8);
            for _ in 0..n {
                let k = self.rng.gen_range(0..BS);
                let old = self.get(off + k, 1, false);
                let x = self.rng.gen_range(1..=255u64);
                self.set(S, &format!("{owner} byte {k}"), off + k, 1, false, old ^ x);
            }
        }
        // Make the tag checksum (and then the descriptor tail) match the changed copy.
        let Some(j) = l.journal.as_ref() else { return };
        if j.features.csum_v2or3() && self.rng.gen_bool(0.85) {
            let start = off as usize;
            let c = block_tag_csum(j.csum_seed, d.seq, &self.b[start..start + BS as usize]);
            let to = desc_dev_block * BS + tag_off as u64;
            if j.features.csum_v3() {
                self.set(S, &format!("{owner} tag checksum (fixed)"), to + 12, 4, true, u64::from(c));
            } else {
                self.set(S, &format!("{owner} tag checksum (fixed)"), to + 4, 2, true, u64::from(c & 0xFFFF));
            }
            self.fix_tail(S, desc_dev_block);
        }
    }

    fn byte_flips(&mut self) {
        const S: Structure = Structure::ByteFlips;
        let meta = self.l.metadata_blocks();
        let n = self.rng.gen_range(1..=32);
        let mut shown = Vec::new();
        let len = self.b.len() as u64;
        if len == 0 {
            return self.record(S, "image is empty: nothing to flip".into());
        }
        for _ in 0..n {
            let off = if self.rng.gen_bool(0.7) && !meta.is_empty() {
                let blk = *meta.choose(self.rng).expect("non-empty");
                (blk * BS + self.rng.gen_range(0..BS)).min(len - 1)
            } else {
                self.rng.gen_range(0..len)
            };
            let x = self.rng.gen_range(1..=255u8);
            let old = self.b[off as usize];
            self.b[off as usize] = old ^ x;
            shown.push(format!("@{off:#x} {old:#04x}->{:#04x}", old ^ x));
        }
        let more = if shown.len() > 6 { format!(" (+{} more)", shown.len() - 6) } else { String::new() };
        shown.truncate(6);
        self.record(S, format!("{n} byte(s) flipped: {}{more}", shown.join(", ")));
    }

    fn truncate(&mut self) {
        const S: Structure = Structure::Truncate;
        let len = self.b.len() as u64;
        if self.rng.gen_bool(0.1) {
            let extra = *[1u64, 512, 4096, 65536].choose(self.rng).expect("non-empty");
            let fill = if self.rng.gen_bool(0.5) { 0 } else { 0xA5 };
            self.b.resize((len + extra) as usize, fill);
            return self
                .record(S, format!("image extended: {len} -> {} bytes (fill {fill:#04x})", len + extra));
        }
        let l = self.l;
        let mut cands =
            vec![0, 512, 1023, 1024, 1100, 2047, 2048, 4095, 4096, 4103, 8192, len / 2, len - 4096, len - 1];
        if let Some(g) = l.groups.first() {
            cands.push(g.inode_table * BS + 100);
            cands.push(g.block_bitmap * BS);
        }
        if let Some(j) = &l.journal {
            cands.push(j.sb_block * BS);
        }
        cands.push(self.rng.gen_range(0..len));
        let new = (*cands.choose(self.rng).expect("non-empty")).min(len - 1);
        self.b.truncate(new as usize);
        self.record(S, format!("image truncated: {len} -> {new} bytes"));
    }

    fn zero_region(&mut self) {
        const S: Structure = Structure::ZeroRegion;
        let l = self.l;
        let len = self.b.len() as u64;
        if self.rng.gen_bool(0.6) {
            let mut named: Vec<(String, u64)> = vec![
                ("superblock block".into(), 0),
                ("group descriptor block".into(), u64::from(l.sb.first_data_block) + 1),
            ];
            if let Some(g) = l.groups.first() {
                named.push(("block bitmap".into(), g.block_bitmap));
                named.push(("inode bitmap".into(), g.inode_bitmap));
                named.push(("first inode table block".into(), g.inode_table));
            }
            if let Some(d) = l.dir_blocks.iter().find(|d| d.ino == ROOT_INO) {
                named.push(("root directory block".into(), d.block));
            }
            if let Some(d) = l.dir_blocks.choose(self.rng) {
                named.push((format!("directory {} block {}", d.ino, d.lblk), d.block));
            }
            if let Some(x) = l.extent_blocks.choose(self.rng) {
                named.push((format!("extent block of inode {}", x.ino), x.block));
            }
            if let Some(x) = l.xattr_blocks.choose(self.rng) {
                named.push((format!("xattr block of inode {}", x.ino), x.block));
            }
            if let Some(j) = &l.journal {
                named.push(("journal superblock".into(), j.sb_block));
                if let Some(b) = j.log.choose(self.rng) {
                    named.push((format!("log block (transaction {})", b.seq), b.dev_block));
                }
            }
            let (name, blk) = named.choose(self.rng).expect("non-empty").clone();
            self.fill(S, &format!("{name} (block {blk})"), blk * BS, BS as usize, 0);
        } else {
            let n = self.rng.gen_range(1..=65536u64).min(len);
            let start = self.rng.gen_range(0..=len - n);
            self.fill(S, "random region", start, n as usize, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_shown_values() {
        assert_eq!(mask(2), 0xFFFF);
        assert_eq!(mask(8), u64::MAX);
        assert_eq!(show(5), "5");
        assert_eq!(show(0x1_0000_0000), "0x100000000");
    }
}
