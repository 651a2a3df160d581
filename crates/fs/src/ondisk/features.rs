//! ext4 feature flags: every compat / incompat / ro_compat bit with its e2fsprogs name, the
//! subset cjfs supports, and [`check_supported`] which refuses an image naming whatever it
//! cannot handle.
//!
//! Supported (read-write):
//! - compat: `has_journal`, `ext_attr`, `dir_index`, `resize_inode` (its reserved GDT blocks
//!   and inode 7 are left alone: cjfs never resizes), `orphan_file` (orphans are recorded
//!   in it and its entries processed at mount, see [`crate::orphan`]);
//! - incompat: `filetype`, `extent`, `64bit`, `flex_bg`, `needs_recovery`, `meta_bg`
//!   (descriptor blocks spread over the meta groups, as resize2fs leaves a file system grown
//!   past its reserved GDT blocks: `Superblock::desc_block_location`),
//!   `metadata_csum_seed` (the checksum seed is then `s_checksum_seed`), `large_dir` (htree
//!   directories up to two levels of interior nodes, see [`crate::ondisk::htree`]), `mmp`
//!   (multi-mount protection: a read-write open takes the MMP block and keeps it alive as
//!   the kernel does, see [`crate::mmp`]), `inline_data` (small files and directories kept
//!   in the inode: read, changed in place, or moved into a block when they grow, see
//!   `crate::inline_data`), `ea_inode` (extended attribute values in inodes of their own,
//!   see `crate::xattr`), `casefold` (encoding `utf8-12.1`: directories flagged
//!   `EXT4_CASEFOLD_FL` compare and hash names casefolded, see `crate::casefold`);
//! - ro_compat: `sparse_super`, `large_file`, `huge_file`, `dir_nlink`, `extra_isize`,
//!   `uninit_bg` (`gdt_csum`: CRC16 group descriptor checksums) and `metadata_csum`
//!   (CRC32C on the superblock, descriptors, bitmaps, inodes, extent tree blocks,
//!   directory leaves and htree nodes, xattr blocks, orphan file blocks;
//!   `s_checksum_type` must be 1), `orphan_present` (with `orphan_file` only), `quota`
//!   (usage kept in the hidden quota files, limits kept but not enforced, see
//!   `crate::quota`), `project` (project ids inherited from directories flagged
//!   `EXT4_PROJINHERIT_FL`; a link or rename into such a directory from another project is
//!   refused with `EXDEV`, as the kernel does).
//!
//! Both checksum features allow uninitialised groups (`BLOCK_UNINIT`, `INODE_UNINIT`,
//! `bg_itable_unused`): their bitmaps are synthesized instead of read
//! ([`crate::ondisk::bitmap::uninit_block_bitmap`],
//! [`crate::ondisk::bitmap::uninit_inode_bitmap`]) and initialised by the allocator when it
//! first uses the group. Every checksum is verified when its structure is read (a mismatch
//! is [`FsError::Checksum`]) and written with the structure (see
//! [`crate::ondisk::csum`]). Block sizes 1024, 2048 and 4096 are supported (what mke2fs
//! picks for small, medium and large images); the device is opened with the file system's
//! block size, and the journal logs in it as JBD2 does.
//!
//! Read only ([`read_only_features`]): ro_compat features cjfs does not maintain
//! (`verity`, `readonly`, ...), and no `extent` at all (ext2, ext3:
//! block-mapped files, see `crate::block_map`; an ext3 file system given `extent` later is
//! read-write, its old block-mapped files converted to extents when first changed).
//!
//! Everything else (`bigalloc`, `encrypt`, ...) is
//! refused with [`FsError::Incompatible`].

use crate::error::{FsError, FsResult};
use crate::ondisk::superblock::Superblock;

// ---- compat ----------------------------------------------------------------------------

/// compat: directory preallocation.
pub const COMPAT_DIR_PREALLOC: u32 = 0x0001;
/// compat: "imagic inodes" (AFS server inodes).
pub const COMPAT_IMAGIC_INODES: u32 = 0x0002;
/// compat: the file system has a journal (inode `s_journal_inum`).
pub const COMPAT_HAS_JOURNAL: u32 = 0x0004;
/// compat: extended attributes.
pub const COMPAT_EXT_ATTR: u32 = 0x0008;
/// compat: reserved GDT blocks for online growth (inode 7).
pub const COMPAT_RESIZE_INODE: u32 = 0x0010;
/// compat: hashed b-tree directories (htree).
pub const COMPAT_DIR_INDEX: u32 = 0x0020;
/// compat: lazy block groups (never used by Linux).
pub const COMPAT_LAZY_BG: u32 = 0x0040;
/// compat: exclude inode (snapshots, never merged).
pub const COMPAT_EXCLUDE_INODE: u32 = 0x0080;
/// compat: exclude bitmap (snapshots, never merged).
pub const COMPAT_EXCLUDE_BITMAP: u32 = 0x0100;
/// compat: sparse_super2 (only two backup superblocks, listed in `s_backup_bgs`).
pub const COMPAT_SPARSE_SUPER2: u32 = 0x0200;
/// compat: fast commits in the journal.
pub const COMPAT_FAST_COMMIT: u32 = 0x0400;
/// compat: inode numbers must never change (fscrypt).
pub const COMPAT_STABLE_INODES: u32 = 0x0800;
/// compat: orphan file (`s_orphan_file_inum`).
pub const COMPAT_ORPHAN_FILE: u32 = 0x1000;

// ---- incompat --------------------------------------------------------------------------

/// incompat: compression (never implemented).
pub const INCOMPAT_COMPRESSION: u32 = 0x0001;
/// incompat: directory entries record the file type.
pub const INCOMPAT_FILETYPE: u32 = 0x0002;
/// incompat: the journal needs recovery (`needs_recovery`).
pub const INCOMPAT_RECOVER: u32 = 0x0004;
/// incompat: this is an external journal device.
pub const INCOMPAT_JOURNAL_DEV: u32 = 0x0008;
/// incompat: meta block groups.
pub const INCOMPAT_META_BG: u32 = 0x0010;
/// incompat: files use extent trees.
pub const INCOMPAT_EXTENTS: u32 = 0x0040;
/// incompat: 64-bit block numbers (and `s_desc_size` group descriptors).
pub const INCOMPAT_64BIT: u32 = 0x0080;
/// incompat: multiple mount protection.
pub const INCOMPAT_MMP: u32 = 0x0100;
/// incompat: flexible block groups.
pub const INCOMPAT_FLEX_BG: u32 = 0x0200;
/// incompat: large xattr values stored in inodes.
pub const INCOMPAT_EA_INODE: u32 = 0x0400;
/// incompat: data in directory entries (Lustre).
pub const INCOMPAT_DIRDATA: u32 = 0x1000;
/// incompat: metadata checksum seed in the superblock.
pub const INCOMPAT_CSUM_SEED: u32 = 0x2000;
/// incompat: directories larger than 2 GiB / 3-level htree.
pub const INCOMPAT_LARGEDIR: u32 = 0x4000;
/// incompat: data stored in the inode.
pub const INCOMPAT_INLINE_DATA: u32 = 0x8000;
/// incompat: encrypted files.
pub const INCOMPAT_ENCRYPT: u32 = 0x10000;
/// incompat: case-insensitive directories.
pub const INCOMPAT_CASEFOLD: u32 = 0x20000;

// ---- ro_compat -------------------------------------------------------------------------

/// ro_compat: superblock backups only in groups 0, 1 and powers of 3, 5 and 7.
pub const RO_COMPAT_SPARSE_SUPER: u32 = 0x0001;
/// ro_compat: files larger than 2 GiB exist.
pub const RO_COMPAT_LARGE_FILE: u32 = 0x0002;
/// ro_compat: b-tree directories (never used).
pub const RO_COMPAT_BTREE_DIR: u32 = 0x0004;
/// ro_compat: `i_blocks` may be in file system blocks (`EXT4_HUGE_FILE_FL`) and 48 bits wide.
pub const RO_COMPAT_HUGE_FILE: u32 = 0x0008;
/// ro_compat: group descriptor crc16 checksums and uninitialised groups (`uninit_bg`).
pub const RO_COMPAT_GDT_CSUM: u32 = 0x0010;
/// ro_compat: directories may have more than 65000 subdirectories (`i_links_count` = 1).
pub const RO_COMPAT_DIR_NLINK: u32 = 0x0020;
/// ro_compat: large inodes have at least `s_min_extra_isize` extra bytes.
pub const RO_COMPAT_EXTRA_ISIZE: u32 = 0x0040;
/// ro_compat: snapshots (never merged).
pub const RO_COMPAT_HAS_SNAPSHOT: u32 = 0x0080;
/// ro_compat: quota inodes.
pub const RO_COMPAT_QUOTA: u32 = 0x0100;
/// ro_compat: allocation in clusters.
pub const RO_COMPAT_BIGALLOC: u32 = 0x0200;
/// ro_compat: crc32c checksums on all metadata.
pub const RO_COMPAT_METADATA_CSUM: u32 = 0x0400;
/// ro_compat: replicas (never merged).
pub const RO_COMPAT_REPLICA: u32 = 0x0800;
/// ro_compat: the file system may only be mounted read-only.
pub const RO_COMPAT_READONLY: u32 = 0x1000;
/// ro_compat: project quotas.
pub const RO_COMPAT_PROJECT: u32 = 0x2000;
/// ro_compat: shared blocks (e2fsprogs deduplication).
pub const RO_COMPAT_SHARED_BLOCKS: u32 = 0x4000;
/// ro_compat: fs-verity files.
pub const RO_COMPAT_VERITY: u32 = 0x8000;
/// ro_compat: the orphan file has entries.
pub const RO_COMPAT_ORPHAN_PRESENT: u32 = 0x10000;

/// compat bits cjfs supports. `fast_commit` says the kernel may write fast commits to the
/// journal; cjfs replays them after a crash (`crate::fast_commit`) and never writes any.
/// `stable_inodes` promises that inode numbers never change (what file encryption's
/// per-inode keys rely on; it forbids shrinking): cjfs never renumbers an inode.
pub const SUPPORTED_COMPAT: u32 = COMPAT_HAS_JOURNAL
    | COMPAT_EXT_ATTR
    | COMPAT_DIR_INDEX
    | COMPAT_RESIZE_INODE
    | COMPAT_ORPHAN_FILE
    | COMPAT_FAST_COMMIT
    | COMPAT_STABLE_INODES
    | COMPAT_SPARSE_SUPER2;
/// incompat bits cjfs supports.
pub const SUPPORTED_INCOMPAT: u32 = INCOMPAT_FILETYPE
    | INCOMPAT_EXTENTS
    | INCOMPAT_64BIT
    | INCOMPAT_FLEX_BG
    | INCOMPAT_RECOVER
    | INCOMPAT_CSUM_SEED
    | INCOMPAT_LARGEDIR
    | INCOMPAT_META_BG
    | INCOMPAT_MMP
    | INCOMPAT_INLINE_DATA
    | INCOMPAT_EA_INODE
    | INCOMPAT_CASEFOLD;
/// `s_encoding` of the casefold feature: UTF-8, Unicode 12.1 (`EXT4_ENC_UTF8_12_1`).
pub const ENCODING_UTF8_12_1: u16 = 1;
/// `s_encoding_flags`: refuse names that are not valid UTF-8 of assigned code points
/// (`EXT4_ENC_STRICT_MODE_FL`).
pub const ENCODING_STRICT: u16 = 0x1;

/// ro_compat bits cjfs supports.
pub const SUPPORTED_RO_COMPAT: u32 = RO_COMPAT_SPARSE_SUPER
    | RO_COMPAT_LARGE_FILE
    | RO_COMPAT_HUGE_FILE
    | RO_COMPAT_DIR_NLINK
    | RO_COMPAT_EXTRA_ISIZE
    | RO_COMPAT_GDT_CSUM
    | RO_COMPAT_METADATA_CSUM
    | RO_COMPAT_ORPHAN_PRESENT
    | RO_COMPAT_QUOTA
    | RO_COMPAT_PROJECT;

/// compat bits `mkfs` sets.
pub const MKFS_COMPAT: u32 = COMPAT_HAS_JOURNAL | COMPAT_EXT_ATTR | COMPAT_DIR_INDEX;
/// incompat bits `mkfs` sets (`64bit` only when asked for).
pub const MKFS_INCOMPAT: u32 = INCOMPAT_FILETYPE | INCOMPAT_EXTENTS | INCOMPAT_64BIT | INCOMPAT_FLEX_BG;
/// ro_compat bits `mkfs` always sets (`metadata_csum` too unless turned off).
pub const MKFS_RO_COMPAT: u32 = RO_COMPAT_SPARSE_SUPER
    | RO_COMPAT_LARGE_FILE
    | RO_COMPAT_HUGE_FILE
    | RO_COMPAT_DIR_NLINK
    | RO_COMPAT_EXTRA_ISIZE;

/// Names of the compat bits, as e2fsprogs prints them.
pub const COMPAT_NAMES: &[(u32, &str)] = &[
    (COMPAT_DIR_PREALLOC, "dir_prealloc"),
    (COMPAT_IMAGIC_INODES, "imagic_inodes"),
    (COMPAT_HAS_JOURNAL, "has_journal"),
    (COMPAT_EXT_ATTR, "ext_attr"),
    (COMPAT_RESIZE_INODE, "resize_inode"),
    (COMPAT_DIR_INDEX, "dir_index"),
    (COMPAT_LAZY_BG, "lazy_bg"),
    (COMPAT_EXCLUDE_INODE, "exclude_inode"),
    (COMPAT_EXCLUDE_BITMAP, "exclude_bitmap"),
    (COMPAT_SPARSE_SUPER2, "sparse_super2"),
    (COMPAT_FAST_COMMIT, "fast_commit"),
    (COMPAT_STABLE_INODES, "stable_inodes"),
    (COMPAT_ORPHAN_FILE, "orphan_file"),
];

/// Names of the incompat bits, as e2fsprogs prints them.
pub const INCOMPAT_NAMES: &[(u32, &str)] = &[
    (INCOMPAT_COMPRESSION, "compression"),
    (INCOMPAT_FILETYPE, "filetype"),
    (INCOMPAT_RECOVER, "needs_recovery"),
    (INCOMPAT_JOURNAL_DEV, "journal_dev"),
    (INCOMPAT_META_BG, "meta_bg"),
    (INCOMPAT_EXTENTS, "extent"),
    (INCOMPAT_64BIT, "64bit"),
    (INCOMPAT_MMP, "mmp"),
    (INCOMPAT_FLEX_BG, "flex_bg"),
    (INCOMPAT_EA_INODE, "ea_inode"),
    (INCOMPAT_DIRDATA, "dirdata"),
    (INCOMPAT_CSUM_SEED, "metadata_csum_seed"),
    (INCOMPAT_LARGEDIR, "large_dir"),
    (INCOMPAT_INLINE_DATA, "inline_data"),
    (INCOMPAT_ENCRYPT, "encrypt"),
    (INCOMPAT_CASEFOLD, "casefold"),
];

/// Names of the ro_compat bits, as e2fsprogs prints them.
pub const RO_COMPAT_NAMES: &[(u32, &str)] = &[
    (RO_COMPAT_SPARSE_SUPER, "sparse_super"),
    (RO_COMPAT_LARGE_FILE, "large_file"),
    (RO_COMPAT_BTREE_DIR, "btree_dir"),
    (RO_COMPAT_HUGE_FILE, "huge_file"),
    (RO_COMPAT_GDT_CSUM, "uninit_bg"),
    (RO_COMPAT_DIR_NLINK, "dir_nlink"),
    (RO_COMPAT_EXTRA_ISIZE, "extra_isize"),
    (RO_COMPAT_HAS_SNAPSHOT, "snapshot_bitmap"),
    (RO_COMPAT_QUOTA, "quota"),
    (RO_COMPAT_BIGALLOC, "bigalloc"),
    (RO_COMPAT_METADATA_CSUM, "metadata_csum"),
    (RO_COMPAT_REPLICA, "replica"),
    (RO_COMPAT_READONLY, "read-only"),
    (RO_COMPAT_PROJECT, "project"),
    (RO_COMPAT_SHARED_BLOCKS, "shared_blocks"),
    (RO_COMPAT_VERITY, "verity"),
    (RO_COMPAT_ORPHAN_PRESENT, "orphan_present"),
];

/// Which of the three feature words a bit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureKind {
    /// `s_feature_compat`.
    Compat,
    /// `s_feature_incompat`.
    Incompat,
    /// `s_feature_ro_compat`.
    RoCompat,
}

/// Names of the bits set in `bits` of one feature word, in bit order. Unknown bits are
/// named like e2fsprogs does: `FEATURE_C12`, `FEATURE_I31`, `FEATURE_R20`.
pub fn bit_names(kind: FeatureKind, bits: u32) -> Vec<String> {
    let (table, letter) = match kind {
        FeatureKind::Compat => (COMPAT_NAMES, 'C'),
        FeatureKind::Incompat => (INCOMPAT_NAMES, 'I'),
        FeatureKind::RoCompat => (RO_COMPAT_NAMES, 'R'),
    };
    (0..32)
        .map(|i| 1u32 << i)
        .filter(|b| bits & b != 0)
        .map(|b| match table.iter().find(|(v, _)| *v == b) {
            Some((_, name)) => (*name).to_string(),
            None => format!("FEATURE_{letter}{}", b.trailing_zeros()),
        })
        .collect()
}

/// All feature names of a superblock, compat first, then incompat, then ro_compat (the
/// order `dumpe2fs` prints them in).
pub fn feature_names(sb: &Superblock) -> Vec<String> {
    let mut v = bit_names(FeatureKind::Compat, sb.feature_compat);
    v.extend(bit_names(FeatureKind::Incompat, sb.feature_incompat));
    v.extend(bit_names(FeatureKind::RoCompat, sb.feature_ro_compat));
    v
}

/// Names of the features of `sb` that cjfs does not support (empty when all are supported).
pub fn unsupported_features(sb: &Superblock) -> Vec<String> {
    let mut v = bit_names(FeatureKind::Compat, sb.feature_compat & !SUPPORTED_COMPAT);
    v.extend(bit_names(FeatureKind::Incompat, sb.feature_incompat & !SUPPORTED_INCOMPAT));
    v.extend(bit_names(FeatureKind::RoCompat, sb.feature_ro_compat & !SUPPORTED_RO_COMPAT));
    v
}

/// ro_compat bits of features cjfs does not maintain but can read past: by the ext4 rule
/// for `s_feature_ro_compat` (a kernel that does not know a bit may still mount read-only)
/// such a file system is opened read-only. Every ro_compat bit, known or not, except
/// `bigalloc`, whose cluster-sized bitmaps and group geometry cjfs does not read.
pub const READ_ONLY_RO_COMPAT: u32 = !SUPPORTED_RO_COMPAT & !RO_COMPAT_BIGALLOC;

/// How a file system is to be opened, for [`check_supported_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and write: every feature must be one cjfs maintains.
    ReadWrite,
    /// Read only: the features cjfs reads but does not maintain are allowed
    /// ([`READ_ONLY_RO_COMPAT`], no `extent`), and compat features it does not know.
    ReadOnly,
}

/// Names of the features of `sb` that keep cjfs from writing it but not from reading it
/// ([`READ_ONLY_RO_COMPAT`], no `extent`; empty when there are none).
///
/// A file system without `extent` (ext2, ext3) is named here as `^extent`: its files are
/// block-mapped, which cjfs reads but never creates (`crate::block_map`), and an inode with
/// an extent tree would be corrupt there.
pub fn read_only_features(sb: &Superblock) -> Vec<String> {
    let mut v = bit_names(FeatureKind::RoCompat, sb.feature_ro_compat & READ_ONLY_RO_COMPAT);
    if sb.feature_incompat & INCOMPAT_EXTENTS == 0 {
        v.push(NO_EXTENTS.into());
    }
    v
}

/// How [`read_only_features`] names a missing `extent` feature (mke2fs's `-O ^extent`).
pub const NO_EXTENTS: &str = "^extent (ext2/ext3 block maps)";

/// Refuse a file system cjfs cannot read and write: an external journal device
/// ([`FsError::JournalDevice`]), a journal on another device, unsupported features (all
/// named in one message; a file system without extents, ext2 or ext3, among them: it opens
/// read-only), a block size other than 1, 2 or 4 KiB, a revision level above 1 (dynamic).
pub fn check_supported(sb: &Superblock) -> FsResult<()> {
    check_supported_for(sb, Access::ReadWrite)
}

/// [`check_supported`] for `access`: opened read-only, a file system whose only unsupported
/// features are ro_compat ones cjfs can read past ([`READ_ONLY_RO_COMPAT`]) is accepted;
/// opened read-write, it is refused with a message naming them and saying it opens read-only.
pub fn check_supported_for(sb: &Superblock, access: Access) -> FsResult<()> {
    if sb.feature_incompat & INCOMPAT_JOURNAL_DEV != 0 {
        return Err(FsError::JournalDevice);
    }
    if sb.rev_level > 1 {
        return Err(FsError::Incompatible(format!(
            "revision level {} (only 0 and 1 are supported)",
            sb.rev_level
        )));
    }
    if sb.has_external_journal() {
        return Err(external_journal(sb));
    }
    let mut bad = unsupported_features(sb);
    let read_only = read_only_features(sb);
    if sb.feature_incompat & INCOMPAT_EXTENTS == 0 {
        bad.push(NO_EXTENTS.into());
    }
    if access == Access::ReadOnly {
        // Compat features never stop a reader (nor, by the ext4 rule, a writer; cjfs writes
        // only past those it knows).
        let compat = bit_names(FeatureKind::Compat, sb.feature_compat & !SUPPORTED_COMPAT);
        bad.retain(|f| !read_only.contains(f) && !compat.contains(f));
    } else if !bad.is_empty() && bad == read_only {
        return Err(FsError::ReadOnlyFeatures(bad.join(", ")));
    }
    if !bad.is_empty() {
        return Err(FsError::Incompatible(format!("unsupported ext4 feature(s): {}", bad.join(", "))));
    }
    if sb.has_metadata_csum() && sb.checksum_type != 1 {
        return Err(FsError::Incompatible(format!(
            "metadata_csum with s_checksum_type {} (only 1, crc32c, exists)",
            sb.checksum_type
        )));
    }
    if sb.feature_ro_compat & RO_COMPAT_ORPHAN_PRESENT != 0 && !sb.has_compat(COMPAT_ORPHAN_FILE) {
        return Err(FsError::Corrupt("superblock: orphan_present without orphan_file".into()));
    }
    if sb.has_incompat(INCOMPAT_CASEFOLD) && sb.encoding != ENCODING_UTF8_12_1 {
        return Err(FsError::Incompatible(format!(
            "casefold with s_encoding {} (only 1, utf8-12.1, exists)",
            sb.encoding
        )));
    }
    if sb.has_incompat(INCOMPAT_CSUM_SEED) && !sb.has_metadata_csum() {
        return Err(FsError::Corrupt("superblock: metadata_csum_seed without metadata_csum".into()));
    }
    let bs = sb.block_size();
    if !cjfs_blockdev::valid_block_size(bs as usize) {
        return Err(FsError::Incompatible(format!(
            "block size {bs} (1024, 2048 and 4096 are supported: larger blocks than the 4 KiB page \
             are not mounted by the kernel either)"
        )));
    }
    // The superblock sits at byte 1024: in block 1 with 1 KiB blocks, in block 0 otherwise.
    let want_first = if bs == 1024 { 1 } else { 0 };
    if sb.first_data_block != want_first {
        return Err(FsError::Corrupt(format!(
            "superblock: s_first_data_block = {} (must be {want_first} with {bs}-byte blocks)",
            sb.first_data_block
        )));
    }
    if sb.log_cluster_size != sb.log_block_size && sb.rev_level > 0 {
        return Err(FsError::Incompatible(format!(
            "cluster size {} differs from the block size without bigalloc",
            1u64 << (10 + sb.log_cluster_size.min(40))
        )));
    }
    Ok(())
}

/// The error for a file system whose journal is on another device
/// ([`Superblock::has_external_journal`]): cjfs only uses the internal journal inode.
pub fn external_journal(sb: &Superblock) -> FsError {
    FsError::Incompatible(format!(
        "external journal not supported: the journal is on another device ({}), cjfs uses only an \
         internal journal (inode 8)",
        sb.external_journal_description()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_known_and_unknown_bits() {
        assert_eq!(
            bit_names(FeatureKind::RoCompat, RO_COMPAT_METADATA_CSUM | RO_COMPAT_SPARSE_SUPER),
            vec!["sparse_super", "metadata_csum"]
        );
        assert_eq!(bit_names(FeatureKind::Incompat, 1 << 31), vec!["FEATURE_I31"]);
        assert_eq!(bit_names(FeatureKind::Compat, COMPAT_ORPHAN_FILE), vec!["orphan_file"]);
    }

    #[test]
    fn ro_compat_features_not_maintained_open_read_only() {
        let mut sb = Superblock::blank();
        sb.log_block_size = 2;
        sb.log_cluster_size = 2;
        sb.rev_level = 1;
        sb.feature_compat = MKFS_COMPAT;
        sb.feature_incompat = MKFS_INCOMPAT;
        sb.feature_ro_compat = MKFS_RO_COMPAT | RO_COMPAT_VERITY | (1 << 20);
        assert!(check_supported_for(&sb, Access::ReadOnly).is_ok());
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("ext4 feature(s) verity, FEATURE_R20 not maintained by cjfs"), "{e}");
        // An incompat feature still refuses both, naming everything unsupported.
        sb.feature_incompat |= INCOMPAT_ENCRYPT;
        let e = check_supported_for(&sb, Access::ReadOnly).unwrap_err().to_string();
        assert!(e.contains("unsupported ext4 feature(s): encrypt"), "{e}");
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("unsupported ext4 feature(s): encrypt, verity, FEATURE_R20"), "{e}");
        // inline_data is read and written.
        sb.feature_incompat = MKFS_INCOMPAT | INCOMPAT_INLINE_DATA;
        assert!(check_supported_for(&sb, Access::ReadOnly).is_ok());
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("ext4 feature(s) verity, FEATURE_R20 not maintained"), "{e}");
        // A compat feature cjfs does not write past stops no reader.
        sb.feature_ro_compat = MKFS_RO_COMPAT;
        sb.feature_incompat = MKFS_INCOMPAT;
        sb.feature_compat = MKFS_COMPAT | COMPAT_DIR_PREALLOC;
        assert!(check_supported_for(&sb, Access::ReadOnly).is_ok());
        assert!(check_supported(&sb).is_err());
        sb.feature_compat = MKFS_COMPAT;
        // bigalloc is not read either.
        sb.feature_incompat = MKFS_INCOMPAT;
        sb.feature_ro_compat = MKFS_RO_COMPAT | RO_COMPAT_BIGALLOC;
        assert!(check_supported_for(&sb, Access::ReadOnly).is_err());
    }

    #[test]
    fn refuses_and_names() {
        let mut sb = Superblock::blank();
        sb.log_block_size = 2;
        sb.log_cluster_size = 2;
        sb.rev_level = 1;
        sb.feature_compat = MKFS_COMPAT | COMPAT_FAST_COMMIT | COMPAT_DIR_PREALLOC;
        sb.feature_incompat = MKFS_INCOMPAT | INCOMPAT_ENCRYPT;
        sb.feature_ro_compat = MKFS_RO_COMPAT | RO_COMPAT_METADATA_CSUM | RO_COMPAT_BIGALLOC;
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("unsupported ext4 feature(s): dir_prealloc, encrypt, bigalloc"), "{e}");
        sb.feature_compat = MKFS_COMPAT;
        sb.feature_incompat = MKFS_INCOMPAT;
        sb.feature_ro_compat = MKFS_RO_COMPAT | RO_COMPAT_ORPHAN_PRESENT;
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("orphan_present without orphan_file"), "{e}");
        sb.feature_compat = MKFS_COMPAT | COMPAT_ORPHAN_FILE;
        assert!(check_supported(&sb).is_ok());
        sb.feature_compat = MKFS_COMPAT;
        sb.feature_incompat = MKFS_INCOMPAT | INCOMPAT_CSUM_SEED;
        sb.feature_ro_compat = MKFS_RO_COMPAT | RO_COMPAT_METADATA_CSUM | RO_COMPAT_GDT_CSUM;
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("s_checksum_type 0"), "{e}");
        sb.checksum_type = 1;
        assert!(check_supported(&sb).is_ok());
        sb.feature_ro_compat = MKFS_RO_COMPAT;
        assert!(check_supported(&sb).is_err(), "csum seed without metadata_csum");
        sb.feature_incompat = MKFS_INCOMPAT;
        assert!(check_supported(&sb).is_ok());
        // 1 KiB blocks open when the superblock is in block 1; 8 KiB blocks are refused.
        sb.log_block_size = 0;
        sb.log_cluster_size = 0;
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("s_first_data_block = 0 (must be 1 with 1024-byte blocks)"), "{e}");
        sb.first_data_block = 1;
        assert!(check_supported(&sb).is_ok());
        sb.first_data_block = 0;
        sb.log_block_size = 3;
        sb.log_cluster_size = 3;
        let e = check_supported(&sb).unwrap_err().to_string();
        assert!(e.contains("block size 8192 (1024, 2048 and 4096 are supported"), "{e}");
    }
}
