//! File system errors. Every error maps to an errno for the FUSE and CLI front ends.

use cjfs_blockdev::DevError;
use cjfs_journal::JournalError;

/// Result of a file system operation.
pub type FsResult<T> = Result<T, FsError>;

/// Why a file system operation failed.
#[derive(Debug, thiserror::Error, Clone)]
pub enum FsError {
    /// The device failed.
    #[error("device error: {0}")]
    Device(#[from] DevError),
    /// The journal failed or was aborted.
    #[error("{0}")]
    Journal(#[from] JournalError),
    /// An on-disk structure is damaged; names the structure and what is wrong.
    #[error("corrupt file system: {0}")]
    Corrupt(String),
    /// A metadata checksum does not match (`metadata_csum` / `uninit_bg`): names the
    /// structure, where it is, and the stored and computed values.
    #[error("checksum mismatch: {structure} {location}: {detail}")]
    Checksum {
        /// Which kind of structure.
        structure: CsumStructure,
        /// Where it is: "group 3", "inode 12", "block 1234 of inode 12", ...
        location: String,
        /// "stored 0x..., computed 0x..." or what is missing.
        detail: String,
    },
    /// The device holds an external journal (`mkfs.ext4 -O journal_dev`, incompat feature
    /// `journal_dev`), the journal of another file system, not a file system itself.
    #[error(
        "not a file system: an external journal device (journal_dev feature), the journal of another file system"
    )]
    JournalDevice,
    /// The image uses a feature or layout we do not support; names it.
    #[error("unsupported file system: {0}")]
    Incompatible(String),
    /// A read-write open of a file system with features cjfs reads but does not maintain
    /// (`ondisk::features::read_only_features`, named here comma-separated).
    #[error(
        "ext4 feature(s) {0} not maintained by cjfs: such a file system opens only read-only \
         (`cjfs mount -o ro`, the reading commands)"
    )]
    ReadOnlyFeatures(String),
    /// No such file or directory.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// The name already exists.
    #[error("file exists: {0}")]
    Exists(String),
    /// Not a directory.
    #[error("not a directory: {0}")]
    NotDir(String),
    /// Is a directory.
    #[error("is a directory: {0}")]
    IsDir(String),
    /// Directory not empty.
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// No space left on the device (blocks or inodes).
    #[error("no space left on device: {0}")]
    NoSpace(String),
    /// Invalid argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// Name too long.
    #[error("file name too long: {0}")]
    NameTooLong(String),
    /// Too many links.
    #[error("too many links: {0}")]
    TooManyLinks(String),
    /// Operation not supported.
    #[error("operation not supported: {0}")]
    NotSupported(String),
    /// No such extended attribute.
    #[error("no such attribute: {0}")]
    NoAttr(String),
    /// Value or list does not fit the caller's buffer or the on-disk space.
    #[error("out of range: {0}")]
    Range(String),
    /// File too large.
    #[error("file too large: {0}")]
    TooBig(String),
    /// Read-only file system.
    #[error("read-only file system")]
    ReadOnly,
    /// Permission denied / operation not permitted.
    #[error("operation not permitted: {0}")]
    Perm(String),
    /// Permission denied where the kernel answers `EACCES` (a default ACL on a
    /// non-directory).
    #[error("permission denied: {0}")]
    Access(String),
    /// Cross-device or otherwise invalid rename (e.g. a directory into its own subtree).
    #[error("invalid rename: {0}")]
    InvalidRename(String),
    /// A link or rename across project quota boundaries (`EXDEV`).
    #[error("cross-project link or rename: {0}")]
    CrossProject(String),
    /// A stale inode handle.
    #[error("stale inode {0}")]
    Stale(u32),
    /// Another writer has the file system open (multi-mount protection, `crate::mmp`).
    #[error("file system in use: {0}")]
    InUse(String),
}

impl FsError {
    /// The errno this error maps to.
    pub fn errno(&self) -> i32 {
        use libc::*;
        match self {
            FsError::Device(d) => d.errno(),
            FsError::Journal(j) => j.errno(),
            FsError::Corrupt(_) => EUCLEAN,
            // The kernel's EFSBADCRC.
            FsError::Checksum { .. } => EBADMSG,
            FsError::Incompatible(_) => EOPNOTSUPP,
            FsError::ReadOnlyFeatures(_) => EROFS,
            FsError::JournalDevice => EINVAL,
            FsError::NotFound(_) => ENOENT,
            FsError::Exists(_) => EEXIST,
            FsError::NotDir(_) => ENOTDIR,
            FsError::IsDir(_) => EISDIR,
            FsError::NotEmpty(_) => ENOTEMPTY,
            FsError::NoSpace(_) => ENOSPC,
            FsError::Invalid(_) => EINVAL,
            FsError::NameTooLong(_) => ENAMETOOLONG,
            FsError::TooManyLinks(_) => EMLINK,
            FsError::NotSupported(_) => EOPNOTSUPP,
            FsError::NoAttr(_) => ENODATA,
            FsError::Range(_) => ERANGE,
            FsError::TooBig(_) => EFBIG,
            FsError::ReadOnly => EROFS,
            FsError::Perm(_) => EPERM,
            FsError::Access(_) => EACCES,
            FsError::InvalidRename(_) => EINVAL,
            FsError::CrossProject(_) => EXDEV,
            FsError::Stale(_) => ESTALE,
            FsError::InUse(_) => EBUSY,
        }
    }

    /// A checksum mismatch of `structure` at `location`.
    pub fn checksum(
        structure: CsumStructure,
        location: impl Into<String>,
        stored: u32,
        computed: u32,
    ) -> Self {
        FsError::Checksum {
            structure,
            location: location.into(),
            detail: format!("stored 0x{stored:08x}, computed 0x{computed:08x}"),
        }
    }

    /// A corruption error.
    pub fn corrupt(msg: impl Into<String>) -> Self {
        FsError::Corrupt(msg.into())
    }
}

/// The metadata structures that carry a checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsumStructure {
    /// The superblock (`s_checksum`).
    Superblock,
    /// A group descriptor (`bg_checksum`).
    GroupDesc,
    /// A block bitmap (`bg_block_bitmap_csum`).
    BlockBitmap,
    /// An inode bitmap (`bg_inode_bitmap_csum`).
    InodeBitmap,
    /// An inode (`i_checksum_lo` / `i_checksum_hi`).
    Inode,
    /// An extent tree block (`ext4_extent_tail`).
    ExtentBlock,
    /// A directory leaf block (the checksum entry at its end).
    DirBlock,
    /// An htree root or interior node (`dx_tail`).
    HtreeNode,
    /// An extended attribute block (`h_checksum`).
    XattrBlock,
    /// An orphan file block (`ob_checksum`).
    OrphanBlock,
    /// The multi-mount protection block (`mmp_checksum`).
    MmpBlock,
}

impl std::fmt::Display for CsumStructure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CsumStructure::Superblock => "superblock",
            CsumStructure::GroupDesc => "group descriptor",
            CsumStructure::BlockBitmap => "block bitmap",
            CsumStructure::InodeBitmap => "inode bitmap",
            CsumStructure::Inode => "inode",
            CsumStructure::ExtentBlock => "extent tree block",
            CsumStructure::DirBlock => "directory block",
            CsumStructure::HtreeNode => "htree node",
            CsumStructure::XattrBlock => "xattr block",
            CsumStructure::OrphanBlock => "orphan file block",
            CsumStructure::MmpBlock => "MMP block",
        })
    }
}
