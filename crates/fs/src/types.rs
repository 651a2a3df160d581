//! Public value types of the file system API.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cjfs_journal::JournalConfig;

/// Inode number.
pub type Ino = u32;

/// The root directory's inode number.
pub const ROOT_INO: Ino = 2;

/// Longest file name, in bytes.
pub const NAME_MAX: usize = 255;

/// How file data is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataMode {
    /// Data blocks reach home before the commit that references them (ext4's default).
    #[default]
    Ordered,
    /// Data blocks are journalled like metadata.
    Journal,
}

impl std::str::FromStr for DataMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ordered" => Ok(DataMode::Ordered),
            "journal" => Ok(DataMode::Journal),
            _ => Err(format!("unknown data mode {s:?} (ordered or journal)")),
        }
    }
}

/// Options for [`crate::Fs::open`].
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Journal settings (a preset such as `jbd2` or `nojournal`; by default `auto`, which
    /// picks the preset for the device when the journal opens).
    pub journal: JournalConfig,
    /// Default data mode; files with `EXT4_JOURNAL_DATA_FL` are always journalled.
    pub data: DataMode,
    /// Open read-only: nothing is written, not even recovery (fails if recovery is needed).
    pub read_only: bool,
    /// Buffer cache size in 4 KiB blocks.
    pub cache_blocks: usize,
    /// Core-aware block-group allocation (Z-Journal §3.5): each core (each log of a per-core
    /// journal) starts inode and block allocation in its own range of groups, so different
    /// cores' transactions do not share bitmap and descriptor blocks. Set by the `zjournal`
    /// presets (`cjfs_fs::preset`).
    pub core_groups: bool,
    /// Per-file adaptive journaling (journaling of journal, FAST'14 §2.2): at each fsync the
    /// file system picks the file's data mode from what was written since the last one
    /// (`adaptive.rs`), with no change to the application. Set by the `adaptive` preset.
    pub adaptive: bool,
    /// How a regular file leaves data journaling on a `data=ordered` mount (`chattr -j`, or the
    /// adaptive mode going back to ordered). Set by the `joj` and `adaptive` presets to
    /// [`LeaveMode::Revoke`].
    pub leave: LeaveMode,
    /// Directory operations (create, mkdir, mknod, symlink, link, unlink, rmdir, rename)
    /// are durable when they return, as on an ext4 mount with `dirsync` or `sync`; without
    /// it, only in directories marked `chattr +D` or `+S` (ext4's `IS_DIRSYNC`).
    pub dirsync: bool,
    /// Every inode behaves as `chattr +S` (ext4's `sync` mount option, `IS_SYNC`): writes,
    /// truncates, extended attribute and flag changes, and directory operations are durable
    /// when they return.
    pub sync: bool,
    /// The MMP block (`mmp` images) as already taken by the caller, who opens the file
    /// system more than once (`crate::mmp`): the open does not take it again and aborts
    /// its journal if the holder loses it. `None`: a read-write open takes it itself.
    pub mmp_held: Option<crate::mmp::MmpHandle>,
    /// Planted bugs for the crash harness' self-tests (`planted-bugs` builds only).
    #[cfg(feature = "planted-bugs")]
    pub bugs: crate::planted::FsBugs,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            journal: JournalConfig::auto(),
            data: DataMode::Ordered,
            read_only: false,
            cache_blocks: 256 * 1024,
            core_groups: false,
            adaptive: false,
            leave: LeaveMode::Empty,
            dirsync: false,
            sync: false,
            mmp_held: None,
            #[cfg(feature = "planted-bugs")]
            bugs: crate::planted::FsBugs::default(),
        }
    }
}

/// How a file leaves data journaling (one setting: `leave=empty|revoke`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveMode {
    /// Empty the journal first (commit and checkpoint everything), as ext4 does.
    Empty,
    /// Hand the file's pending checkpoint images to the switch's ordered writes and revoke
    /// its blocks there (`cjfs_journal`'s `unjournal.rs`); nothing is written at the switch.
    /// Falls back to `Empty` with several logs or iJournaling.
    Revoke,
}

/// File type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Character device.
    CharDev,
    /// Block device.
    BlockDev,
    /// Socket.
    Socket,
}

impl FileType {
    /// What `ls` and error messages call it ("regular file", "directory", ...).
    pub fn name(self) -> &'static str {
        match self {
            FileType::Regular => "regular file",
            FileType::Directory => "directory",
            FileType::Symlink => "symbolic link",
            FileType::Fifo => "fifo",
            FileType::CharDev => "character device",
            FileType::BlockDev => "block device",
            FileType::Socket => "socket",
        }
    }

    /// From the `S_IFMT` bits of a mode.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & 0o170000 {
            0o100000 => FileType::Regular,
            0o040000 => FileType::Directory,
            0o120000 => FileType::Symlink,
            0o010000 => FileType::Fifo,
            0o020000 => FileType::CharDev,
            0o060000 => FileType::BlockDev,
            0o140000 => FileType::Socket,
            _ => return None,
        })
    }
    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => 0o100000,
            FileType::Directory => 0o040000,
            FileType::Symlink => 0o120000,
            FileType::Fifo => 0o010000,
            FileType::CharDev => 0o020000,
            FileType::BlockDev => 0o060000,
            FileType::Socket => 0o140000,
        }
    }
    /// ext4 directory entry file type code.
    pub fn dirent_code(self) -> u8 {
        match self {
            FileType::Regular => 1,
            FileType::Directory => 2,
            FileType::CharDev => 3,
            FileType::BlockDev => 4,
            FileType::Fifo => 5,
            FileType::Socket => 6,
            FileType::Symlink => 7,
        }
    }
    /// From an ext4 directory entry file type code.
    pub fn from_dirent_code(c: u8) -> Option<FileType> {
        Some(match c {
            1 => FileType::Regular,
            2 => FileType::Directory,
            3 => FileType::CharDev,
            4 => FileType::BlockDev,
            5 => FileType::Fifo,
            6 => FileType::Socket,
            7 => FileType::Symlink,
            _ => return None,
        })
    }
}

pub use crate::ondisk::inode::Timestamp;

/// A timestamp as a `SystemTime`.
pub fn to_system_time(t: Timestamp) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::new(t.sec.unsigned_abs(), 0) + Duration::from_nanos(u64::from(t.nsec))
    }
}

/// File attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// Type.
    pub kind: FileType,
    /// Permission bits (and setuid/setgid/sticky), without the type.
    pub perm: u16,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Allocated 512-byte sectors.
    pub blocks: u64,
    /// The file system's block size (what `stat` reports as `st_blksize`, as ext4 does).
    pub blksize: u32,
    /// Access time.
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
    /// Change time.
    pub ctime: Timestamp,
    /// Creation time.
    pub crtime: Timestamp,
    /// Device number for device files.
    pub rdev: u32,
    /// ext4 inode flags.
    pub flags: u32,
    /// Project id (`i_projid`; 0 without the `project` feature).
    pub projid: u32,
    /// Inode generation.
    pub generation: u32,
}

/// Attribute changes for [`crate::Fs::setattr`]; `None` leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate up or down).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<Timestamp>,
    /// New modification time.
    pub mtime: Option<Timestamp>,
    /// New change time (defaults to now when anything changes).
    pub ctime: Option<Timestamp>,
    /// `atime`/`mtime` are values the caller chose (`utimensat` with times other than
    /// `UTIME_NOW`, the kernel's `ATTR_TIMES_SET`), which an append-only file refuses;
    /// false for times set to now.
    pub times_set: bool,
}

/// One directory entry from [`crate::Fs::readdir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Name bytes.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: Ino,
    /// File type.
    pub kind: FileType,
    /// Offset to pass to continue after this entry (stable across inserts and removals).
    pub next_offset: u64,
}

/// File system statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Block size.
    pub bsize: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
}

/// `fallocate` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocMode {
    /// Allocate (unwritten) blocks and extend the size.
    Allocate,
    /// Allocate without changing the size.
    KeepSize,
    /// Deallocate a range (the size is kept).
    PunchHole,
    /// Zero a range (allocating as needed).
    ZeroRange {
        /// Keep the size.
        keep_size: bool,
    },
}

/// `rename` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameFlags {
    /// Fail if the target exists.
    pub noreplace: bool,
    /// Atomically exchange source and target.
    pub exchange: bool,
    /// Leave a whiteout at the old name (`RENAME_WHITEOUT`, what overlayfs asks of its upper
    /// layer): a character device 0:0, owned by the caller, made in the same transaction as
    /// ext4's `ext4_whiteout_for_rename`.
    pub whiteout: bool,
}
