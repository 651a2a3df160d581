//! The ext4 superblock: 1024 bytes at byte offset 1024 of the device (and backups at the
//! start of the first block of groups 1, 3, 5, 7, 9, 25, ... with `sparse_super`).
//!
//! [`Superblock`] models the standard fields as plain public fields and keeps the raw 1024
//! bytes, so [`Superblock::encode_into`] preserves every byte it does not model (error
//! records, mount options, checksums of features we refuse, future fields).

use crate::error::{FsError, FsResult};
use crate::ondisk::features::*;

/// Byte offset of the primary superblock on the device.
pub const SUPERBLOCK_OFFSET: usize = 1024;
/// Size of the superblock structure in bytes.
pub const SUPERBLOCK_SIZE: usize = 1024;

/// The block size the primary superblock in `head` (the first 2048 or more bytes of an
/// image) names, when it has the ext2/3/4 magic and a size this engine opens.
pub fn block_size_in(head: &[u8]) -> Option<usize> {
    let sb = head.get(SUPERBLOCK_OFFSET..SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE)?;
    if u16::from_le_bytes([sb[0x38], sb[0x39]]) != 0xEF53 {
        return None;
    }
    let log = u32::from_le_bytes([sb[0x18], sb[0x19], sb[0x1A], sb[0x1B]]);
    let bs = 1024usize.checked_shl(log)?;
    cjfs_blockdev::valid_block_size(bs).then_some(bs)
}

/// [`block_size_in`] for the image file or block device at `path` (reads 2048 bytes; `None`
/// when it cannot be read or holds no usable superblock).
pub fn probe_block_size(path: &std::path::Path) -> Option<usize> {
    use std::os::unix::fs::FileExt;
    // Never open what is not an image (a FIFO would block the open).
    cjfs_blockdev::check_image_kind(path).ok()?;
    let f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE];
    f.read_exact_at(&mut head, 0).ok()?;
    block_size_in(&head)
}

/// Where the primary superblock lives with blocks of `block_size` bytes: (block, byte
/// offset in it). Block 1 at offset 0 with 1 KiB blocks, block 0 at offset 1024 otherwise.
pub const fn sb_location(block_size: usize) -> (u64, usize) {
    ((SUPERBLOCK_OFFSET / block_size) as u64, SUPERBLOCK_OFFSET % block_size)
}
/// `s_magic`.
pub const EXT4_SUPER_MAGIC: u16 = 0xEF53;

/// `s_state`: cleanly unmounted.
pub const STATE_VALID: u16 = 0x0001;
/// `s_state`: errors detected.
pub const STATE_ERROR: u16 = 0x0002;
/// `s_state`: a fast-commit replay is in progress (`EXT4_FC_REPLAY`, as e2fsck sets it).
pub const STATE_FC_REPLAY: u16 = 0x0020;
/// `s_state`: orphans being recovered.
pub const STATE_ORPHAN: u16 = 0x0004;

/// `s_errors`: continue on errors.
pub const ERRORS_CONTINUE: u16 = 1;
/// `s_errors`: remount read-only on errors.
pub const ERRORS_RO: u16 = 2;
/// `s_errors`: panic on errors.
pub const ERRORS_PANIC: u16 = 3;

/// `s_flags`: directory hashes use signed chars.
pub const FLAGS_SIGNED_HASH: u32 = 0x0001;
/// `s_flags`: directory hashes use unsigned chars.
pub const FLAGS_UNSIGNED_HASH: u32 = 0x0002;
/// `s_flags`: test file system (development code allowed).
pub const FLAGS_TEST_FILESYS: u32 = 0x0004;

/// `s_default_mount_opts`: user extended attributes.
pub const DEFM_XATTR_USER: u32 = 0x0004;
/// `s_default_mount_opts`: POSIX ACLs.
pub const DEFM_ACL: u32 = 0x0008;

/// `s_jnl_backup_type`: `s_jnl_blocks` holds a copy of the journal inode's `i_block` (words
/// 0..15), `i_size_high` (word 15) and `i_size` (word 16).
pub const JNL_BACKUP_BLOCKS: u8 = 1;

/// `s_creator_os`: Linux.
pub const OS_LINUX: u32 = 0;

/// `s_rev_level`: original format (128-byte inodes, first inode 11, no feature words).
pub const GOOD_OLD_REV: u32 = 0;
/// `s_rev_level`: dynamic inode sizes and feature words.
pub const DYNAMIC_REV: u32 = 1;

/// Inode size of revision 0 file systems.
pub const GOOD_OLD_INODE_SIZE: u16 = 128;
/// First non-reserved inode of revision 0 file systems.
pub const GOOD_OLD_FIRST_INO: u32 = 11;

// Field offsets inside the superblock.
/// `s_inodes_count` (u32).
pub const S_INODES_COUNT: usize = 0x00;
/// `s_blocks_count_lo` (u32).
pub const S_BLOCKS_COUNT_LO: usize = 0x04;
/// `s_r_blocks_count_lo` (u32).
pub const S_R_BLOCKS_COUNT_LO: usize = 0x08;
/// `s_free_blocks_count_lo` (u32).
pub const S_FREE_BLOCKS_COUNT_LO: usize = 0x0C;
/// `s_free_inodes_count` (u32).
pub const S_FREE_INODES_COUNT: usize = 0x10;
/// `s_first_data_block` (u32).
pub const S_FIRST_DATA_BLOCK: usize = 0x14;
/// `s_log_block_size` (u32).
pub const S_LOG_BLOCK_SIZE: usize = 0x18;
/// `s_log_cluster_size` (u32).
pub const S_LOG_CLUSTER_SIZE: usize = 0x1C;
/// `s_blocks_per_group` (u32).
pub const S_BLOCKS_PER_GROUP: usize = 0x20;
/// `s_clusters_per_group` (u32).
pub const S_CLUSTERS_PER_GROUP: usize = 0x24;
/// `s_inodes_per_group` (u32).
pub const S_INODES_PER_GROUP: usize = 0x28;
/// `s_mtime` (u32).
pub const S_MTIME: usize = 0x2C;
/// `s_wtime` (u32).
pub const S_WTIME: usize = 0x30;
/// `s_mnt_count` (u16).
pub const S_MNT_COUNT: usize = 0x34;
/// `s_max_mnt_count` (s16).
pub const S_MAX_MNT_COUNT: usize = 0x36;
/// `s_magic` (u16).
pub const S_MAGIC: usize = 0x38;
/// `s_state` (u16).
pub const S_STATE: usize = 0x3A;
/// `s_errors` (u16).
pub const S_ERRORS: usize = 0x3C;
/// `s_minor_rev_level` (u16).
pub const S_MINOR_REV_LEVEL: usize = 0x3E;
/// `s_lastcheck` (u32).
pub const S_LASTCHECK: usize = 0x40;
/// `s_checkinterval` (u32).
pub const S_CHECKINTERVAL: usize = 0x44;
/// `s_creator_os` (u32).
pub const S_CREATOR_OS: usize = 0x48;
/// `s_rev_level` (u32).
pub const S_REV_LEVEL: usize = 0x4C;
/// `s_def_resuid` (u16).
pub const S_DEF_RESUID: usize = 0x50;
/// `s_def_resgid` (u16).
pub const S_DEF_RESGID: usize = 0x52;
/// `s_first_ino` (u32).
pub const S_FIRST_INO: usize = 0x54;
/// `s_inode_size` (u16).
pub const S_INODE_SIZE: usize = 0x58;
/// `s_block_group_nr` (u16).
pub const S_BLOCK_GROUP_NR: usize = 0x5A;
/// `s_feature_compat` (u32).
pub const S_FEATURE_COMPAT: usize = 0x5C;
/// `s_feature_incompat` (u32).
pub const S_FEATURE_INCOMPAT: usize = 0x60;
/// `s_feature_ro_compat` (u32).
pub const S_FEATURE_RO_COMPAT: usize = 0x64;
/// `s_uuid` (16 bytes).
pub const S_UUID: usize = 0x68;
/// `s_volume_name` (16 bytes).
pub const S_VOLUME_NAME: usize = 0x78;
/// `s_last_mounted` (64 bytes).
pub const S_LAST_MOUNTED: usize = 0x88;
/// `s_algorithm_usage_bitmap` (u32).
pub const S_ALGORITHM_USAGE_BITMAP: usize = 0xC8;
/// `s_prealloc_blocks` (u8).
pub const S_PREALLOC_BLOCKS: usize = 0xCC;
/// `s_prealloc_dir_blocks` (u8).
pub const S_PREALLOC_DIR_BLOCKS: usize = 0xCD;
/// `s_reserved_gdt_blocks` (u16).
pub const S_RESERVED_GDT_BLOCKS: usize = 0xCE;
/// `s_journal_uuid` (16 bytes).
pub const S_JOURNAL_UUID: usize = 0xD0;
/// `s_journal_inum` (u32).
pub const S_JOURNAL_INUM: usize = 0xE0;
/// `s_journal_dev` (u32).
pub const S_JOURNAL_DEV: usize = 0xE4;
/// `s_last_orphan` (u32).
pub const S_LAST_ORPHAN: usize = 0xE8;
/// `s_hash_seed` (4 x u32).
pub const S_HASH_SEED: usize = 0xEC;
/// `s_def_hash_version` (u8).
pub const S_DEF_HASH_VERSION: usize = 0xFC;
/// `s_jnl_backup_type` (u8).
pub const S_JNL_BACKUP_TYPE: usize = 0xFD;
/// `s_desc_size` (u16).
pub const S_DESC_SIZE: usize = 0xFE;
/// `s_default_mount_opts` (u32).
pub const S_DEFAULT_MOUNT_OPTS: usize = 0x100;
/// `s_first_meta_bg` (u32).
pub const S_FIRST_META_BG: usize = 0x104;
/// `s_mkfs_time` (u32).
pub const S_MKFS_TIME: usize = 0x108;
/// `s_jnl_blocks` (17 x u32).
pub const S_JNL_BLOCKS: usize = 0x10C;
/// `s_blocks_count_hi` (u32).
pub const S_BLOCKS_COUNT_HI: usize = 0x150;
/// `s_r_blocks_count_hi` (u32).
pub const S_R_BLOCKS_COUNT_HI: usize = 0x154;
/// `s_free_blocks_count_hi` (u32).
pub const S_FREE_BLOCKS_COUNT_HI: usize = 0x158;
/// `s_min_extra_isize` (u16).
pub const S_MIN_EXTRA_ISIZE: usize = 0x15C;
/// `s_want_extra_isize` (u16).
pub const S_WANT_EXTRA_ISIZE: usize = 0x15E;
/// `s_flags` (u32).
pub const S_FLAGS: usize = 0x160;
/// `s_raid_stride` (u16).
pub const S_RAID_STRIDE: usize = 0x164;
/// `s_mmp_interval` (u16).
pub const S_MMP_INTERVAL: usize = 0x166;
/// `s_mmp_block` (u64).
pub const S_MMP_BLOCK: usize = 0x168;
/// `s_raid_stripe_width` (u32).
pub const S_RAID_STRIPE_WIDTH: usize = 0x170;
/// `s_log_groups_per_flex` (u8).
pub const S_LOG_GROUPS_PER_FLEX: usize = 0x174;
/// `s_checksum_type` (u8).
pub const S_CHECKSUM_TYPE: usize = 0x175;
/// `s_kbytes_written` (u64).
pub const S_KBYTES_WRITTEN: usize = 0x178;
/// `s_error_count` (u32).
pub const S_ERROR_COUNT: usize = 0x194;
/// `s_first_error_time` (u32).
pub const S_FIRST_ERROR_TIME: usize = 0x198;
/// `s_last_error_time` (u32).
pub const S_LAST_ERROR_TIME: usize = 0x1CC;
/// `s_mount_opts` (64 bytes).
pub const S_MOUNT_OPTS: usize = 0x200;
/// `s_usr_quota_inum` (u32).
pub const S_USR_QUOTA_INUM: usize = 0x240;
/// `s_grp_quota_inum` (u32).
pub const S_GRP_QUOTA_INUM: usize = 0x244;
/// `s_overhead_clusters` (u32).
pub const S_OVERHEAD_CLUSTERS: usize = 0x248;
/// `s_backup_bgs` (2 x u32).
pub const S_BACKUP_BGS: usize = 0x24C;
/// `s_lpf_ino` (u32).
pub const S_LPF_INO: usize = 0x268;
/// `s_prj_quota_inum` (u32).
pub const S_PRJ_QUOTA_INUM: usize = 0x26C;
/// `s_checksum_seed` (u32).
pub const S_CHECKSUM_SEED: usize = 0x270;
/// `s_wtime_hi` (u8).
pub const S_WTIME_HI: usize = 0x274;
/// `s_mtime_hi` (u8).
pub const S_MTIME_HI: usize = 0x275;
/// `s_mkfs_time_hi` (u8).
pub const S_MKFS_TIME_HI: usize = 0x276;
/// `s_lastcheck_hi` (u8).
pub const S_LASTCHECK_HI: usize = 0x277;
/// `s_first_error_time_hi` (u8).
pub const S_FIRST_ERROR_TIME_HI: usize = 0x278;
/// `s_last_error_time_hi` (u8).
pub const S_LAST_ERROR_TIME_HI: usize = 0x279;
/// `s_encoding` (u16).
pub const S_ENCODING: usize = 0x27C;
/// `s_encoding_flags` (u16).
pub const S_ENCODING_FLAGS: usize = 0x27E;
/// `s_orphan_file_inum` (u32).
pub const S_ORPHAN_FILE_INUM: usize = 0x280;
/// `s_checksum` (u32).
pub const S_CHECKSUM: usize = 0x3FC;

// ---- little-endian helpers shared by the on-disk modules (callers check bounds) ----------

#[inline]
pub(crate) fn get_u8(b: &[u8], off: usize) -> u8 {
    b[off]
}
#[inline]
pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
#[inline]
pub(crate) fn put_u8(b: &mut [u8], off: usize, v: u8) {
    b[off] = v;
}
#[inline]
pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// The ext4 superblock. Times are seconds since the epoch including the `_hi` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// `s_inodes_count`: total inodes (= groups x inodes per group).
    pub inodes_count: u32,
    /// `s_blocks_count_lo` / `_hi` (the high half only with `64bit`).
    pub blocks_count: u64,
    /// `s_r_blocks_count_lo` / `_hi`: blocks reserved for the super-user.
    pub r_blocks_count: u64,
    /// `s_free_blocks_count_lo` / `_hi`.
    pub free_blocks_count: u64,
    /// `s_free_inodes_count`.
    pub free_inodes_count: u32,
    /// `s_first_data_block`: 0 for block sizes above 1024.
    pub first_data_block: u32,
    /// `s_log_block_size`: block size = 1024 << this.
    pub log_block_size: u32,
    /// `s_log_cluster_size`.
    pub log_cluster_size: u32,
    /// `s_blocks_per_group`.
    pub blocks_per_group: u32,
    /// `s_clusters_per_group`.
    pub clusters_per_group: u32,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// `s_mtime` (+ `s_mtime_hi`): last mount time.
    pub mtime: i64,
    /// `s_wtime` (+ `s_wtime_hi`): last write time.
    pub wtime: i64,
    /// `s_mnt_count`: mounts since the last check.
    pub mnt_count: u16,
    /// `s_max_mnt_count`: mounts before a check is forced (-1: never).
    pub max_mnt_count: i16,
    /// `s_magic`: [`EXT4_SUPER_MAGIC`].
    pub magic: u16,
    /// `s_state`: [`STATE_VALID`], [`STATE_ERROR`], [`STATE_ORPHAN`].
    pub state: u16,
    /// `s_errors`: [`ERRORS_CONTINUE`], [`ERRORS_RO`], [`ERRORS_PANIC`].
    pub errors: u16,
    /// `s_minor_rev_level`.
    pub minor_rev_level: u16,
    /// `s_lastcheck` (+ `_hi`): time of the last check.
    pub lastcheck: i64,
    /// `s_checkinterval`: seconds between forced checks (0: never).
    pub checkinterval: u32,
    /// `s_creator_os`.
    pub creator_os: u32,
    /// `s_rev_level`: [`GOOD_OLD_REV`] or [`DYNAMIC_REV`].
    pub rev_level: u32,
    /// `s_def_resuid`: user allowed to use reserved blocks.
    pub def_resuid: u16,
    /// `s_def_resgid`: group allowed to use reserved blocks.
    pub def_resgid: u16,
    /// `s_first_ino`: first non-reserved inode (raw; see [`Superblock::first_ino`]).
    pub first_ino: u32,
    /// `s_inode_size` (raw; see [`Superblock::inode_size`]).
    pub inode_size: u16,
    /// `s_block_group_nr`: group this copy lives in.
    pub block_group_nr: u16,
    /// `s_feature_compat`.
    pub feature_compat: u32,
    /// `s_feature_incompat`.
    pub feature_incompat: u32,
    /// `s_feature_ro_compat`.
    pub feature_ro_compat: u32,
    /// `s_uuid`.
    pub uuid: [u8; 16],
    /// `s_volume_name` (NUL padded).
    pub volume_name: [u8; 16],
    /// `s_last_mounted` (NUL padded).
    pub last_mounted: [u8; 64],
    /// `s_algorithm_usage_bitmap`.
    pub algorithm_usage_bitmap: u32,
    /// `s_prealloc_blocks`.
    pub prealloc_blocks: u8,
    /// `s_prealloc_dir_blocks`.
    pub prealloc_dir_blocks: u8,
    /// `s_reserved_gdt_blocks`: GDT blocks reserved for growth after each GDT copy.
    pub reserved_gdt_blocks: u16,
    /// `s_journal_uuid` (external journals only).
    pub journal_uuid: [u8; 16],
    /// `s_journal_inum`: journal inode (8).
    pub journal_inum: u32,
    /// `s_journal_dev`: external journal device number.
    pub journal_dev: u32,
    /// `s_last_orphan`: head of the orphan inode list.
    pub last_orphan: u32,
    /// `s_hash_seed`: htree hash seed (host-order words of the little-endian array).
    pub hash_seed: [u32; 4],
    /// `s_def_hash_version`: default htree hash (see [`crate::ondisk::htree`]).
    pub def_hash_version: u8,
    /// `s_jnl_backup_type`: [`JNL_BACKUP_BLOCKS`] when `jnl_blocks` is valid.
    pub jnl_backup_type: u8,
    /// `s_desc_size` (raw; see [`Superblock::desc_size`]).
    pub desc_size: u16,
    /// `s_default_mount_opts`.
    pub default_mount_opts: u32,
    /// `s_first_meta_bg`.
    pub first_meta_bg: u32,
    /// `s_mkfs_time` (+ `_hi`).
    pub mkfs_time: i64,
    /// `s_jnl_blocks`: backup of the journal inode's `i_block`, `i_size_high`, `i_size`.
    pub jnl_blocks: [u32; 17],
    /// `s_min_extra_isize`.
    pub min_extra_isize: u16,
    /// `s_want_extra_isize`.
    pub want_extra_isize: u16,
    /// `s_flags`: [`FLAGS_SIGNED_HASH`], [`FLAGS_UNSIGNED_HASH`], [`FLAGS_TEST_FILESYS`].
    pub flags: u32,
    /// `s_raid_stride`.
    pub raid_stride: u16,
    /// `s_mmp_interval`.
    pub mmp_interval: u16,
    /// `s_mmp_block`.
    pub mmp_block: u64,
    /// `s_raid_stripe_width`.
    pub raid_stripe_width: u32,
    /// `s_log_groups_per_flex`: flex group size = 1 << this (with `flex_bg`).
    pub log_groups_per_flex: u8,
    /// `s_checksum_type`.
    pub checksum_type: u8,
    /// `s_kbytes_written`: lifetime KiB written.
    pub kbytes_written: u64,
    /// `s_error_count`.
    pub error_count: u32,
    /// `s_first_error_time` (+ `_hi`).
    pub first_error_time: i64,
    /// `s_last_error_time` (+ `_hi`).
    pub last_error_time: i64,
    /// `s_usr_quota_inum`.
    pub usr_quota_inum: u32,
    /// `s_grp_quota_inum`.
    pub grp_quota_inum: u32,
    /// `s_overhead_clusters` (0: the kernel computes it).
    pub overhead_clusters: u32,
    /// `s_backup_bgs` (sparse_super2).
    pub backup_bgs: [u32; 2],
    /// `s_lpf_ino`.
    pub lpf_ino: u32,
    /// `s_prj_quota_inum`.
    pub prj_quota_inum: u32,
    /// `s_checksum_seed`.
    pub checksum_seed: u32,
    /// `s_encoding`.
    pub encoding: u16,
    /// `s_encoding_flags`.
    pub encoding_flags: u16,
    /// `s_orphan_file_inum`.
    pub orphan_file_inum: u32,
    /// `s_checksum` as read. With `metadata_csum`, [`Superblock::encode_into`] writes the
    /// checksum of the encoded bytes instead (see [`superblock_checksum`]).
    pub checksum: u32,
    raw: [u8; SUPERBLOCK_SIZE],
}

fn time_get(b: &[u8], lo: usize, hi: usize) -> i64 {
    (get_u32(b, lo) as i64) | ((get_u8(b, hi) as i64) << 32)
}

fn time_put(b: &mut [u8], lo: usize, hi: usize, t: i64) {
    put_u32(b, lo, t as u32);
    put_u8(b, hi, (t >> 32) as u8);
}

fn corrupt(field: &str, value: impl std::fmt::Display, why: &str) -> FsError {
    FsError::Corrupt(format!("superblock: {field} = {value} {why}"))
}

impl Superblock {
    /// A superblock with every byte zero except `s_magic`: start from this to build one.
    pub fn blank() -> Self {
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        put_u16(&mut raw, S_MAGIC, EXT4_SUPER_MAGIC);
        Self::from_raw_unchecked(raw)
    }

    fn from_raw_unchecked(raw: [u8; SUPERBLOCK_SIZE]) -> Self {
        let b = &raw[..];
        let incompat = get_u32(b, S_FEATURE_INCOMPAT);
        let is64 = incompat & INCOMPAT_64BIT != 0;
        let hi = |off: usize| {
            if is64 { (get_u32(b, off) as u64) << 32 } else { 0 }
        };
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[S_UUID..S_UUID + 16]);
        let mut volume_name = [0u8; 16];
        volume_name.copy_from_slice(&b[S_VOLUME_NAME..S_VOLUME_NAME + 16]);
        let mut last_mounted = [0u8; 64];
        last_mounted.copy_from_slice(&b[S_LAST_MOUNTED..S_LAST_MOUNTED + 64]);
        let mut journal_uuid = [0u8; 16];
        journal_uuid.copy_from_slice(&b[S_JOURNAL_UUID..S_JOURNAL_UUID + 16]);
        let mut hash_seed = [0u32; 4];
        for (i, w) in hash_seed.iter_mut().enumerate() {
            *w = get_u32(b, S_HASH_SEED + 4 * i);
        }
        let mut jnl_blocks = [0u32; 17];
        for (i, w) in jnl_blocks.iter_mut().enumerate() {
            *w = get_u32(b, S_JNL_BLOCKS + 4 * i);
        }
        Superblock {
            inodes_count: get_u32(b, S_INODES_COUNT),
            blocks_count: get_u32(b, S_BLOCKS_COUNT_LO) as u64 | hi(S_BLOCKS_COUNT_HI),
            r_blocks_count: get_u32(b, S_R_BLOCKS_COUNT_LO) as u64 | hi(S_R_BLOCKS_COUNT_HI),
            free_blocks_count: get_u32(b, S_FREE_BLOCKS_COUNT_LO) as u64 | hi(S_FREE_BLOCKS_COUNT_HI),
            free_inodes_count: get_u32(b, S_FREE_INODES_COUNT),
            first_data_block: get_u32(b, S_FIRST_DATA_BLOCK),
            log_block_size: get_u32(b, S_LOG_BLOCK_SIZE),
            log_cluster_size: get_u32(b, S_LOG_CLUSTER_SIZE),
            blocks_per_group: get_u32(b, S_BLOCKS_PER_GROUP),
            clusters_per_group: get_u32(b, S_CLUSTERS_PER_GROUP),
            inodes_per_group: get_u32(b, S_INODES_PER_GROUP),
            mtime: time_get(b, S_MTIME, S_MTIME_HI),
            wtime: time_get(b, S_WTIME, S_WTIME_HI),
            mnt_count: get_u16(b, S_MNT_COUNT),
            max_mnt_count: get_u16(b, S_MAX_MNT_COUNT) as i16,
            magic: get_u16(b, S_MAGIC),
            state: get_u16(b, S_STATE),
            errors: get_u16(b, S_ERRORS),
            minor_rev_level: get_u16(b, S_MINOR_REV_LEVEL),
            lastcheck: time_get(b, S_LASTCHECK, S_LASTCHECK_HI),
            checkinterval: get_u32(b, S_CHECKINTERVAL),
            creator_os: get_u32(b, S_CREATOR_OS),
            rev_level: get_u32(b, S_REV_LEVEL),
            def_resuid: get_u16(b, S_DEF_RESUID),
            def_resgid: get_u16(b, S_DEF_RESGID),
            first_ino: get_u32(b, S_FIRST_INO),
            inode_size: get_u16(b, S_INODE_SIZE),
            block_group_nr: get_u16(b, S_BLOCK_GROUP_NR),
            feature_compat: get_u32(b, S_FEATURE_COMPAT),
            feature_incompat: incompat,
            feature_ro_compat: get_u32(b, S_FEATURE_RO_COMPAT),
            uuid,
            volume_name,
            last_mounted,
            algorithm_usage_bitmap: get_u32(b, S_ALGORITHM_USAGE_BITMAP),
            prealloc_blocks: get_u8(b, S_PREALLOC_BLOCKS),
            prealloc_dir_blocks: get_u8(b, S_PREALLOC_DIR_BLOCKS),
            reserved_gdt_blocks: get_u16(b, S_RESERVED_GDT_BLOCKS),
            journal_uuid,
            journal_inum: get_u32(b, S_JOURNAL_INUM),
            journal_dev: get_u32(b, S_JOURNAL_DEV),
            last_orphan: get_u32(b, S_LAST_ORPHAN),
            hash_seed,
            def_hash_version: get_u8(b, S_DEF_HASH_VERSION),
            jnl_backup_type: get_u8(b, S_JNL_BACKUP_TYPE),
            desc_size: get_u16(b, S_DESC_SIZE),
            default_mount_opts: get_u32(b, S_DEFAULT_MOUNT_OPTS),
            first_meta_bg: get_u32(b, S_FIRST_META_BG),
            mkfs_time: time_get(b, S_MKFS_TIME, S_MKFS_TIME_HI),
            jnl_blocks,
            min_extra_isize: get_u16(b, S_MIN_EXTRA_ISIZE),
            want_extra_isize: get_u16(b, S_WANT_EXTRA_ISIZE),
            flags: get_u32(b, S_FLAGS),
            raid_stride: get_u16(b, S_RAID_STRIDE),
            mmp_interval: get_u16(b, S_MMP_INTERVAL),
            mmp_block: get_u64(b, S_MMP_BLOCK),
            raid_stripe_width: get_u32(b, S_RAID_STRIPE_WIDTH),
            log_groups_per_flex: get_u8(b, S_LOG_GROUPS_PER_FLEX),
            checksum_type: get_u8(b, S_CHECKSUM_TYPE),
            kbytes_written: get_u64(b, S_KBYTES_WRITTEN),
            error_count: get_u32(b, S_ERROR_COUNT),
            first_error_time: time_get(b, S_FIRST_ERROR_TIME, S_FIRST_ERROR_TIME_HI),
            last_error_time: time_get(b, S_LAST_ERROR_TIME, S_LAST_ERROR_TIME_HI),
            usr_quota_inum: get_u32(b, S_USR_QUOTA_INUM),
            grp_quota_inum: get_u32(b, S_GRP_QUOTA_INUM),
            overhead_clusters: get_u32(b, S_OVERHEAD_CLUSTERS),
            backup_bgs: [get_u32(b, S_BACKUP_BGS), get_u32(b, S_BACKUP_BGS + 4)],
            lpf_ino: get_u32(b, S_LPF_INO),
            prj_quota_inum: get_u32(b, S_PRJ_QUOTA_INUM),
            checksum_seed: get_u32(b, S_CHECKSUM_SEED),
            encoding: get_u16(b, S_ENCODING),
            encoding_flags: get_u16(b, S_ENCODING_FLAGS),
            orphan_file_inum: get_u32(b, S_ORPHAN_FILE_INUM),
            checksum: get_u32(b, S_CHECKSUM),
            raw,
        }
    }

    /// Decode a superblock from its 1024 bytes (`buf` may be longer; only the first 1024
    /// bytes are used). Checks the magic and the geometry every helper method relies on
    /// (no division by zero, no overflowing shift); feature support is checked separately by
    /// [`check_supported`].
    pub fn decode(buf: &[u8]) -> FsResult<Self> {
        let sb = Self::decode_unverified(buf)?;
        sb.verify_checksum()?;
        Ok(sb)
    }

    /// With `metadata_csum`, check `s_checksum` against the bytes as read (Ok otherwise).
    pub fn verify_checksum(&self) -> FsResult<()> {
        if self.feature_ro_compat & RO_COMPAT_METADATA_CSUM == 0 {
            return Ok(());
        }
        let stored = get_u32(&self.raw, S_CHECKSUM);
        let computed = superblock_checksum(&self.raw);
        if stored != computed {
            return Err(FsError::checksum(
                crate::error::CsumStructure::Superblock,
                format!("(group {} copy)", self.block_group_nr),
                stored,
                computed,
            ));
        }
        Ok(())
    }

    /// [`Superblock::decode`] without the checksum check (tools that report a bad checksum
    /// and go on).
    pub fn decode_unverified(buf: &[u8]) -> FsResult<Self> {
        if buf.len() < SUPERBLOCK_SIZE {
            return Err(FsError::Corrupt(format!(
                "superblock: {} bytes given, {SUPERBLOCK_SIZE} needed",
                buf.len()
            )));
        }
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        raw.copy_from_slice(&buf[..SUPERBLOCK_SIZE]);
        let sb = Self::from_raw_unchecked(raw);
        sb.validate()?;
        Ok(sb)
    }

    /// Decode the primary superblock from the first 2048 (or more) bytes of the device.
    pub fn decode_from_device_start(buf: &[u8]) -> FsResult<Self> {
        if buf.len() < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE {
            return Err(FsError::Corrupt(format!(
                "superblock: {} bytes given, {} needed",
                buf.len(),
                SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE
            )));
        }
        Self::decode(&buf[SUPERBLOCK_OFFSET..])
    }

    /// Check the geometry fields (done by [`Superblock::decode`]). A superblock of an
    /// external journal device (`journal_dev`) is refused first, with
    /// [`FsError::JournalDevice`].
    pub fn validate(&self) -> FsResult<()> {
        if self.magic != EXT4_SUPER_MAGIC {
            return Err(FsError::Corrupt(format!(
                "not an ext2/3/4 file system: bad magic 0x{:04x} (superblock s_magic)",
                self.magic
            )));
        }
        // Before the geometry: a journal device's superblock has the ext4 magic but no
        // groups or inodes, and is no corrupt file system.
        if self.feature_incompat & INCOMPAT_JOURNAL_DEV != 0 {
            return Err(FsError::JournalDevice);
        }
        if self.log_block_size > 6 {
            return Err(corrupt("s_log_block_size", self.log_block_size, "(block size above 64 KiB)"));
        }
        let bs = self.block_size();
        // With bigalloc the block bitmap counts clusters, so a group spans up to 8 * block
        // size clusters of several blocks each. Accept that geometry here so the feature
        // check can refuse the image by name instead of calling it corrupt.
        let cluster_ratio = if self.feature_ro_compat & RO_COMPAT_BIGALLOC != 0 {
            1u64 << self.log_cluster_size.saturating_sub(self.log_block_size).min(16)
        } else {
            1
        };
        let max_bpg = (u64::from(8 * bs) * cluster_ratio).min(u64::from(u32::MAX));
        if self.blocks_per_group == 0 || u64::from(self.blocks_per_group) > max_bpg {
            return Err(corrupt(
                "s_blocks_per_group",
                self.blocks_per_group,
                &format!("(must be 1..={max_bpg})"),
            ));
        }
        if self.inodes_per_group == 0 || self.inodes_per_group > 8 * bs {
            return Err(corrupt(
                "s_inodes_per_group",
                self.inodes_per_group,
                &format!("(must be 1..={})", 8 * bs),
            ));
        }
        if self.blocks_count <= self.first_data_block as u64 {
            return Err(corrupt(
                "s_blocks_count",
                self.blocks_count,
                &format!("(not above s_first_data_block {})", self.first_data_block),
            ));
        }
        if self.rev_level >= DYNAMIC_REV {
            let is = self.inode_size;
            if is < GOOD_OLD_INODE_SIZE || !is.is_power_of_two() || is as u32 > bs {
                return Err(corrupt("s_inode_size", is, "(must be a power of two 128..=block size)"));
            }
            if self.first_ino < GOOD_OLD_FIRST_INO {
                return Err(corrupt("s_first_ino", self.first_ino, "(below 11)"));
            }
            let room = is - GOOD_OLD_INODE_SIZE;
            if is > GOOD_OLD_INODE_SIZE && (self.min_extra_isize > room || self.want_extra_isize > room) {
                return Err(corrupt(
                    "s_min_extra_isize/s_want_extra_isize",
                    format!("{}/{}", self.min_extra_isize, self.want_extra_isize),
                    &format!("(exceed the {room} extra bytes of a {is}-byte inode)"),
                ));
            }
        }
        if self.has_64bit() {
            let ds = self.desc_size;
            if !(64..=1024).contains(&ds) || !ds.is_power_of_two() || ds as u32 > bs {
                return Err(corrupt("s_desc_size", ds, "(64bit needs a power of two 64..=1024)"));
            }
        }
        if self.has_flex_bg() && self.log_groups_per_flex > 31 {
            return Err(corrupt("s_log_groups_per_flex", self.log_groups_per_flex, "(above 31)"));
        }
        let groups = self.group_count_u64();
        if groups > u32::MAX as u64 {
            return Err(corrupt("s_blocks_count", self.blocks_count, "(too many groups)"));
        }
        if groups * self.inodes_per_group as u64 != self.inodes_count as u64 {
            return Err(corrupt(
                "s_inodes_count",
                self.inodes_count,
                &format!("(should be {groups} groups x {} inodes per group)", self.inodes_per_group),
            ));
        }
        if self.free_inodes_count > self.inodes_count {
            return Err(corrupt(
                "s_free_inodes_count",
                self.free_inodes_count,
                &format!("(above s_inodes_count {})", self.inodes_count),
            ));
        }
        // Checked here, where it is read, so no allocation starts past the table. The orphan
        // list head is checked where the list is walked (`orphan::load_orphan_chain`), so a
        // bad one still lets read-only commands read the image.
        let first = self.first_ino();
        if first >= self.inodes_count {
            return Err(corrupt(
                "s_first_ino",
                first,
                &format!("(not below s_inodes_count {})", self.inodes_count),
            ));
        }
        Ok(())
    }

    /// Write the superblock into `out[..1024]`: the raw bytes read by `decode` with every
    /// modeled field patched in. The `_hi` halves of the block counts are only written
    /// with `64bit` (otherwise the raw bytes are kept).
    pub fn encode_into(&self, out: &mut [u8]) {
        let b = &mut out[..SUPERBLOCK_SIZE];
        b.copy_from_slice(&self.raw);
        let is64 = self.has_64bit();
        put_u32(b, S_INODES_COUNT, self.inodes_count);
        put_u32(b, S_BLOCKS_COUNT_LO, self.blocks_count as u32);
        put_u32(b, S_R_BLOCKS_COUNT_LO, self.r_blocks_count as u32);
        put_u32(b, S_FREE_BLOCKS_COUNT_LO, self.free_blocks_count as u32);
        if is64 {
            put_u32(b, S_BLOCKS_COUNT_HI, (self.blocks_count >> 32) as u32);
            put_u32(b, S_R_BLOCKS_COUNT_HI, (self.r_blocks_count >> 32) as u32);
            put_u32(b, S_FREE_BLOCKS_COUNT_HI, (self.free_blocks_count >> 32) as u32);
        }
        put_u32(b, S_FREE_INODES_COUNT, self.free_inodes_count);
        put_u32(b, S_FIRST_DATA_BLOCK, self.first_data_block);
        put_u32(b, S_LOG_BLOCK_SIZE, self.log_block_size);
        put_u32(b, S_LOG_CLUSTER_SIZE, self.log_cluster_size);
        put_u32(b, S_BLOCKS_PER_GROUP, self.blocks_per_group);
        put_u32(b, S_CLUSTERS_PER_GROUP, self.clusters_per_group);
        put_u32(b, S_INODES_PER_GROUP, self.inodes_per_group);
        time_put(b, S_MTIME, S_MTIME_HI, self.mtime);
        time_put(b, S_WTIME, S_WTIME_HI, self.wtime);
        put_u16(b, S_MNT_COUNT, self.mnt_count);
        put_u16(b, S_MAX_MNT_COUNT, self.max_mnt_count as u16);
        put_u16(b, S_MAGIC, self.magic);
        put_u16(b, S_STATE, self.state);
        put_u16(b, S_ERRORS, self.errors);
        put_u16(b, S_MINOR_REV_LEVEL, self.minor_rev_level);
        time_put(b, S_LASTCHECK, S_LASTCHECK_HI, self.lastcheck);
        put_u32(b, S_CHECKINTERVAL, self.checkinterval);
        put_u32(b, S_CREATOR_OS, self.creator_os);
        put_u32(b, S_REV_LEVEL, self.rev_level);
        put_u16(b, S_DEF_RESUID, self.def_resuid);
        put_u16(b, S_DEF_RESGID, self.def_resgid);
        put_u32(b, S_FIRST_INO, self.first_ino);
        put_u16(b, S_INODE_SIZE, self.inode_size);
        put_u16(b, S_BLOCK_GROUP_NR, self.block_group_nr);
        put_u32(b, S_FEATURE_COMPAT, self.feature_compat);
        put_u32(b, S_FEATURE_INCOMPAT, self.feature_incompat);
        put_u32(b, S_FEATURE_RO_COMPAT, self.feature_ro_compat);
        b[S_UUID..S_UUID + 16].copy_from_slice(&self.uuid);
        b[S_VOLUME_NAME..S_VOLUME_NAME + 16].copy_from_slice(&self.volume_name);
        b[S_LAST_MOUNTED..S_LAST_MOUNTED + 64].copy_from_slice(&self.last_mounted);
        put_u32(b, S_ALGORITHM_USAGE_BITMAP, self.algorithm_usage_bitmap);
        put_u8(b, S_PREALLOC_BLOCKS, self.prealloc_blocks);
        put_u8(b, S_PREALLOC_DIR_BLOCKS, self.prealloc_dir_blocks);
        put_u16(b, S_RESERVED_GDT_BLOCKS, self.reserved_gdt_blocks);
        b[S_JOURNAL_UUID..S_JOURNAL_UUID + 16].copy_from_slice(&self.journal_uuid);
        put_u32(b, S_JOURNAL_INUM, self.journal_inum);
        put_u32(b, S_JOURNAL_DEV, self.journal_dev);
        put_u32(b, S_LAST_ORPHAN, self.last_orphan);
        for (i, w) in self.hash_seed.iter().enumerate() {
            put_u32(b, S_HASH_SEED + 4 * i, *w);
        }
        put_u8(b, S_DEF_HASH_VERSION, self.def_hash_version);
        put_u8(b, S_JNL_BACKUP_TYPE, self.jnl_backup_type);
        put_u16(b, S_DESC_SIZE, self.desc_size);
        put_u32(b, S_DEFAULT_MOUNT_OPTS, self.default_mount_opts);
        put_u32(b, S_FIRST_META_BG, self.first_meta_bg);
        time_put(b, S_MKFS_TIME, S_MKFS_TIME_HI, self.mkfs_time);
        for (i, w) in self.jnl_blocks.iter().enumerate() {
            put_u32(b, S_JNL_BLOCKS + 4 * i, *w);
        }
        put_u16(b, S_MIN_EXTRA_ISIZE, self.min_extra_isize);
        put_u16(b, S_WANT_EXTRA_ISIZE, self.want_extra_isize);
        put_u32(b, S_FLAGS, self.flags);
        put_u16(b, S_RAID_STRIDE, self.raid_stride);
        put_u16(b, S_MMP_INTERVAL, self.mmp_interval);
        put_u64(b, S_MMP_BLOCK, self.mmp_block);
        put_u32(b, S_RAID_STRIPE_WIDTH, self.raid_stripe_width);
        put_u8(b, S_LOG_GROUPS_PER_FLEX, self.log_groups_per_flex);
        put_u8(b, S_CHECKSUM_TYPE, self.checksum_type);
        put_u64(b, S_KBYTES_WRITTEN, self.kbytes_written);
        put_u32(b, S_ERROR_COUNT, self.error_count);
        time_put(b, S_FIRST_ERROR_TIME, S_FIRST_ERROR_TIME_HI, self.first_error_time);
        time_put(b, S_LAST_ERROR_TIME, S_LAST_ERROR_TIME_HI, self.last_error_time);
        put_u32(b, S_USR_QUOTA_INUM, self.usr_quota_inum);
        put_u32(b, S_GRP_QUOTA_INUM, self.grp_quota_inum);
        put_u32(b, S_OVERHEAD_CLUSTERS, self.overhead_clusters);
        put_u32(b, S_BACKUP_BGS, self.backup_bgs[0]);
        put_u32(b, S_BACKUP_BGS + 4, self.backup_bgs[1]);
        put_u32(b, S_LPF_INO, self.lpf_ino);
        put_u32(b, S_PRJ_QUOTA_INUM, self.prj_quota_inum);
        put_u32(b, S_CHECKSUM_SEED, self.checksum_seed);
        put_u16(b, S_ENCODING, self.encoding);
        put_u16(b, S_ENCODING_FLAGS, self.encoding_flags);
        put_u32(b, S_ORPHAN_FILE_INUM, self.orphan_file_inum);
        put_u32(b, S_CHECKSUM, self.checksum);
        set_checksum(b);
    }

    /// The encoded 1024 bytes.
    pub fn to_bytes(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut b = [0u8; SUPERBLOCK_SIZE];
        self.encode_into(&mut b);
        b
    }

    /// The raw bytes as last decoded (fields not modeled come from here).
    pub fn raw(&self) -> &[u8; SUPERBLOCK_SIZE] {
        &self.raw
    }

    // ---- features ----

    /// Whether a compat feature bit is set.
    pub fn has_compat(&self, bit: u32) -> bool {
        self.feature_compat & bit != 0
    }
    /// Whether an incompat feature bit is set.
    pub fn has_incompat(&self, bit: u32) -> bool {
        self.feature_incompat & bit != 0
    }
    /// Whether a ro_compat feature bit is set.
    pub fn has_ro_compat(&self, bit: u32) -> bool {
        self.feature_ro_compat & bit != 0
    }
    /// `64bit`.
    pub fn has_64bit(&self) -> bool {
        self.has_incompat(INCOMPAT_64BIT)
    }
    /// `flex_bg`.
    pub fn has_flex_bg(&self) -> bool {
        self.has_incompat(INCOMPAT_FLEX_BG)
    }
    /// `extent`.
    pub fn has_extents(&self) -> bool {
        self.has_incompat(INCOMPAT_EXTENTS)
    }
    /// `filetype`: directory entries carry a file type.
    pub fn has_filetype(&self) -> bool {
        self.has_incompat(INCOMPAT_FILETYPE)
    }
    /// `has_journal` with the journal on another device (`mkfs.ext4 -J device=...`): no
    /// journal inode (`s_journal_inum` 0) but a journal UUID or device number.
    pub fn has_external_journal(&self) -> bool {
        self.has_journal()
            && self.journal_inum == 0
            && (self.journal_uuid != [0; 16] || self.journal_dev != 0)
    }
    /// The external journal's UUID and device number, for messages.
    pub fn external_journal_description(&self) -> String {
        let u = &self.journal_uuid;
        let h = |r: std::ops::Range<usize>| u[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
        format!(
            "journal UUID {}-{}-{}-{}-{}, device 0x{:04x}",
            h(0..4),
            h(4..6),
            h(6..8),
            h(8..10),
            h(10..16),
            self.journal_dev
        )
    }
    /// `needs_recovery`.
    pub fn needs_recovery(&self) -> bool {
        self.has_incompat(INCOMPAT_RECOVER)
    }
    /// `has_journal`.
    pub fn has_journal(&self) -> bool {
        self.has_compat(COMPAT_HAS_JOURNAL)
    }
    /// `dir_index`.
    pub fn has_dir_index(&self) -> bool {
        self.has_compat(COMPAT_DIR_INDEX)
    }
    /// `ext_attr`.
    pub fn has_ext_attr(&self) -> bool {
        self.has_compat(COMPAT_EXT_ATTR)
    }
    /// `sparse_super`.
    pub fn has_sparse_super(&self) -> bool {
        self.has_ro_compat(RO_COMPAT_SPARSE_SUPER)
    }
    /// `huge_file`.
    pub fn has_huge_file(&self) -> bool {
        self.has_ro_compat(RO_COMPAT_HUGE_FILE)
    }
    /// `large_file`.
    pub fn has_large_file(&self) -> bool {
        self.has_ro_compat(RO_COMPAT_LARGE_FILE)
    }
    /// `dir_nlink`.
    pub fn has_dir_nlink(&self) -> bool {
        self.has_ro_compat(RO_COMPAT_DIR_NLINK)
    }
    /// `uninit_bg` (`gdt_csum`): crc16 group descriptor checksums.
    pub fn has_gdt_csum(&self) -> bool {
        self.has_ro_compat(RO_COMPAT_GDT_CSUM)
    }
    /// `metadata_csum`: crc32c checksums on all metadata.
    pub fn has_metadata_csum(&self) -> bool {
        self.has_ro_compat(RO_COMPAT_METADATA_CSUM)
    }
    /// Group descriptors are checksummed (`uninit_bg` or `metadata_csum`), which is what
    /// makes uninitialised groups (`BLOCK_UNINIT`, `INODE_UNINIT`, `bg_itable_unused`)
    /// possible (the kernel's `ext4_has_group_desc_csum`).
    pub fn has_group_desc_csum(&self) -> bool {
        self.has_gdt_csum() || self.has_metadata_csum()
    }

    // ---- geometry ----

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1024u32 << self.log_block_size.min(6)
    }
    /// Number of blocks.
    pub fn block_count(&self) -> u64 {
        self.blocks_count
    }
    /// Free blocks according to the superblock.
    pub fn free_blocks(&self) -> u64 {
        self.free_blocks_count
    }
    /// Blocks reserved for the super-user.
    pub fn reserved_blocks(&self) -> u64 {
        self.r_blocks_count
    }

    fn group_count_u64(&self) -> u64 {
        let bpg = self.blocks_per_group.max(1) as u64;
        self.blocks_count.saturating_sub(self.first_data_block as u64).div_ceil(bpg)
    }

    /// Number of block groups.
    pub fn group_count(&self) -> u32 {
        self.group_count_u64().min(u32::MAX as u64) as u32
    }
    /// Size of one group descriptor: `s_desc_size` with `64bit`, else 32.
    pub fn desc_size(&self) -> usize {
        if self.has_64bit() { self.desc_size as usize } else { 32 }
    }
    /// Group descriptors per block.
    pub fn descs_per_block(&self) -> u32 {
        self.block_size() / self.desc_size().max(1) as u32
    }
    /// Blocks of one copy of the group descriptor table (without reserved GDT blocks).
    pub fn gdt_blocks(&self) -> u32 {
        self.group_count().div_ceil(self.descs_per_block().max(1))
    }
    /// First block of group `g`.
    pub fn group_first_block(&self, g: u32) -> u64 {
        self.first_data_block as u64 + g as u64 * self.blocks_per_group as u64
    }
    /// Number of blocks in group `g` (the last group may be short).
    pub fn group_block_count(&self, g: u32) -> u32 {
        let start = self.group_first_block(g);
        if start >= self.blocks_count {
            return 0;
        }
        (self.blocks_count - start).min(self.blocks_per_group as u64) as u32
    }
    /// Group containing block `b`.
    pub fn group_of_block(&self, b: u64) -> u32 {
        (b.saturating_sub(self.first_data_block as u64) / self.blocks_per_group.max(1) as u64) as u32
    }
    /// Offset of block `b` in its group.
    pub fn block_offset_in_group(&self, b: u64) -> u32 {
        (b.saturating_sub(self.first_data_block as u64) % self.blocks_per_group.max(1) as u64) as u32
    }
    /// Whether group `g` holds a superblock copy (and a GDT copy): group 0; with
    /// `sparse_super2` the (at most two) groups `s_backup_bgs` names; else every group
    /// without `sparse_super`, groups 1 and powers of 3, 5 and 7 with it (e2fsprogs'
    /// `ext2fs_bg_has_super`).
    pub fn has_super_in_group(&self, g: u32) -> bool {
        if g == 0 {
            return true;
        }
        if self.feature_compat & crate::ondisk::features::COMPAT_SPARSE_SUPER2 != 0 {
            return self.backup_bgs.contains(&g);
        }
        if !self.has_sparse_super() {
            return true;
        }
        group_has_super_sparse(g)
    }
    /// Block holding the superblock copy of group `g`, if the group has one. For group 0
    /// with 4 KiB blocks that is block 0 (the copy is at byte 1024 of it); backups are at
    /// byte 0 of their block.
    pub fn superblock_location(&self, g: u32) -> Option<u64> {
        if !self.has_super_in_group(g) {
            return None;
        }
        if g == 0 {
            Some(SUPERBLOCK_OFFSET as u64 / self.block_size() as u64)
        } else {
            Some(self.group_first_block(g))
        }
    }
    /// First block of the GDT copy in group `g` (right after its superblock copy), if any.
    /// With `meta_bg` the copy holds only the descriptor blocks before `s_first_meta_bg`.
    pub fn gdt_location(&self, g: u32) -> Option<u64> {
        self.superblock_location(g).map(|_| self.group_first_block(g) + 1)
    }
    /// `meta_bg`: the descriptor table is cut into blocks, each kept in the first group of
    /// the block's own groups (the *meta group*) with backups in its second and last group,
    /// from descriptor block `s_first_meta_bg` on (the blocks before it stay in the classic
    /// table after each superblock copy).
    pub fn has_meta_bg(&self) -> bool {
        self.feature_incompat & crate::ondisk::features::INCOMPAT_META_BG != 0
    }
    /// Descriptor blocks in the classic table after each superblock copy: all of them, or
    /// with `meta_bg` those before `s_first_meta_bg`.
    pub fn classic_gdt_blocks(&self) -> u32 {
        if self.has_meta_bg() { self.first_meta_bg.min(self.gdt_blocks()) } else { self.gdt_blocks() }
    }
    /// Block holding the primary copy of descriptor block `i` (groups `i * descs_per_block`
    /// onwards): in the classic table, or with `meta_bg` from `s_first_meta_bg` on at the
    /// start of the meta group's first group, after its superblock copy if it has one.
    pub fn desc_block_location(&self, i: u32) -> u64 {
        if !self.has_meta_bg() || i < self.first_meta_bg {
            return u64::from(self.first_data_block) + 1 + u64::from(i);
        }
        let g = i.saturating_mul(self.descs_per_block());
        self.group_first_block(g) + u64::from(self.has_super_in_group(g))
    }
    /// Blocks at the start of group `g` taken by its superblock copy, its copy of the
    /// classic descriptor table and the reserved GDT blocks after it, and with `meta_bg` a
    /// meta group's descriptor block (first, second and last group of each), as the
    /// kernel's `ext4_num_base_meta_clusters` counts them.
    pub fn group_super_overhead(&self, g: u32) -> u32 {
        let sup = self.has_super_in_group(g);
        let per = self.descs_per_block().max(1);
        let meta_group = g / per;
        if !self.has_meta_bg() || meta_group < self.first_meta_bg {
            return if sup { 1 + self.classic_gdt_blocks() + self.reserved_gdt_blocks as u32 } else { 0 };
        }
        let k = g % per;
        u32::from(sup) + u32::from(k == 0 || k == 1 || k == per - 1)
    }
    /// Blocks the file system's metadata takes, as ext4's `s_overhead` (what `statfs` leaves
    /// out of the total): `s_overhead_clusters` when set, else the first data block, every
    /// group's superblock and GDT copies, reserved GDT blocks, bitmaps and inode table, and
    /// the internal journal's `journal_blocks`.
    pub fn overhead_blocks(&self, journal_blocks: u64) -> u64 {
        if self.overhead_clusters != 0 {
            return u64::from(self.overhead_clusters);
        }
        let itable = u64::from(self.inode_table_blocks());
        let groups = self.group_count();
        let supers: u64 = (0..groups).map(|g| u64::from(self.group_super_overhead(g))).sum();
        u64::from(self.first_data_block) + supers + u64::from(groups) * (2 + itable) + journal_blocks
    }
    /// Flex group size (1 without `flex_bg`).
    pub fn groups_per_flex(&self) -> u32 {
        if self.has_flex_bg() { 1u32 << self.log_groups_per_flex.min(31) } else { 1 }
    }

    // ---- inodes ----

    /// Inode record size in bytes (128 for revision 0).
    pub fn inode_size(&self) -> usize {
        if self.rev_level == GOOD_OLD_REV { GOOD_OLD_INODE_SIZE as usize } else { self.inode_size as usize }
    }
    /// First non-reserved inode (11 for revision 0).
    pub fn first_ino(&self) -> u32 {
        if self.rev_level == GOOD_OLD_REV { GOOD_OLD_FIRST_INO } else { self.first_ino }
    }
    /// Inodes per block.
    pub fn inodes_per_block(&self) -> u32 {
        self.block_size() / self.inode_size().max(1) as u32
    }
    /// Blocks of one group's inode table.
    pub fn inode_table_blocks(&self) -> u32 {
        (self.inodes_per_group as u64 * self.inode_size() as u64).div_ceil(self.block_size() as u64) as u32
    }
    /// Whether `ino` is a valid inode number (1..=s_inodes_count).
    pub fn valid_ino(&self, ino: u32) -> bool {
        ino >= 1 && ino <= self.inodes_count
    }
    /// Group of inode `ino` (1-based inode numbers).
    pub fn inode_group(&self, ino: u32) -> u32 {
        ino.saturating_sub(1) / self.inodes_per_group.max(1)
    }
    /// Index of inode `ino` in its group.
    pub fn inode_index_in_group(&self, ino: u32) -> u32 {
        ino.saturating_sub(1) % self.inodes_per_group.max(1)
    }
    /// Where inode `ino` lives relative to its group's inode table: `(group, block offset
    /// from the table start, byte offset in that block)`.
    pub fn inode_position(&self, ino: u32) -> (u32, u32, usize) {
        let idx = self.inode_index_in_group(ino);
        let ipb = self.inodes_per_block().max(1);
        (self.inode_group(ino), idx / ipb, (idx % ipb) as usize * self.inode_size())
    }

    // ---- misc ----

    /// Whether directory hashes use unsigned chars (`s_flags` [`FLAGS_UNSIGNED_HASH`]).
    pub fn hash_unsigned(&self) -> bool {
        self.flags & FLAGS_UNSIGNED_HASH != 0
    }
    /// The volume label (up to the first NUL, lossy UTF-8).
    pub fn label(&self) -> String {
        let end = self.volume_name.iter().position(|&c| c == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.volume_name[..end]).into_owned()
    }
    /// Set the volume label; [`FsError::Invalid`] if longer than 16 bytes.
    pub fn set_label(&mut self, label: &str) -> FsResult<()> {
        let b = label.as_bytes();
        if b.len() > 16 {
            return Err(FsError::Invalid(format!(
                "volume label {label:?} is {} bytes (at most 16)",
                b.len()
            )));
        }
        self.volume_name = [0; 16];
        self.volume_name[..b.len()].copy_from_slice(b);
        Ok(())
    }
}

/// `s_checksum` of the 1024 superblock bytes `b`: CRC32C from `!0` over everything before
/// the field (the kernel's `ext4_superblock_csum`).
pub fn superblock_checksum(b: &[u8]) -> u32 {
    crate::ondisk::csum::crc32c(!0, &b[..S_CHECKSUM])
}

/// Write `s_checksum` into the 1024 superblock bytes `b` when they say `metadata_csum`
/// (no-op otherwise). Every writer of superblock bytes ends with this, including the
/// in-place patches of single fields.
pub fn set_checksum(b: &mut [u8]) {
    if get_u32(b, S_FEATURE_RO_COMPAT) & RO_COMPAT_METADATA_CSUM != 0 {
        let c = superblock_checksum(b);
        put_u32(b, S_CHECKSUM, c);
    }
}

/// `sparse_super` rule: group 0, 1 and powers of 3, 5 and 7 hold superblock backups.
pub fn group_has_super_sparse(g: u32) -> bool {
    if g <= 1 {
        return true;
    }
    if g.is_multiple_of(2) {
        return false;
    }
    for base in [3u64, 5, 7] {
        let mut p = base;
        while p < g as u64 {
            p *= base;
        }
        if p == g as u64 {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_groups() {
        let v: Vec<u32> = (0..130).filter(|&g| group_has_super_sparse(g)).collect();
        assert_eq!(v, vec![0, 1, 3, 5, 7, 9, 25, 27, 49, 81, 125]);
    }

    #[test]
    fn blank_round_trip_preserves_unknown_bytes() {
        let mut raw = Superblock::blank().to_bytes();
        // geometry so that validate passes
        put_u32(&mut raw, S_BLOCKS_COUNT_LO, 32768);
        put_u32(&mut raw, S_LOG_BLOCK_SIZE, 2);
        put_u32(&mut raw, S_BLOCKS_PER_GROUP, 32768);
        put_u32(&mut raw, S_INODES_PER_GROUP, 8192);
        put_u32(&mut raw, S_INODES_COUNT, 8192);
        raw[S_MOUNT_OPTS] = b'x';
        raw[0x3F0] = 0x5a;
        let sb = Superblock::decode(&raw).unwrap();
        assert_eq!(sb.to_bytes(), raw);
        assert_eq!(sb.group_count(), 1);
    }

    #[test]
    fn bad_magic_message() {
        let raw = [0u8; 1024];
        let e = Superblock::decode(&raw).unwrap_err().to_string();
        assert!(e.contains("not an ext2/3/4 file system: bad magic 0x0000"), "{e}");
    }
}
