//! Why a mount failed. Every variant prints as one line that names the image or directory
//! it concerns and what to do about it.

use std::path::PathBuf;

use cjfs_fs::FsError;

/// Result of the mount front end.
pub type MountResult<T> = Result<T, MountError>;

/// Why `cjfs mount` failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A `-o` option is unknown or has a bad value.
    #[error("bad mount option: {0}")]
    BadOption(String),
    /// The image file does not exist or cannot be opened.
    #[error("{path}: cannot open the image: {source}")]
    Image {
        /// The image path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The mount point is missing or is not a directory.
    #[error("{path}: mount point {why}")]
    Mountpoint {
        /// The mount point.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Another process (another `cjfs mount`, or a cjfs command writing the image) holds the
    /// image's lock.
    #[error("{path}: the image is already in use: {holder} holds its lock")]
    Locked {
        /// The image path.
        path: PathBuf,
        /// The holding processes, as `cjfs_blockdev::DevError::Busy` names them.
        holder: String,
    },
    /// `/dev/fuse` is missing or unusable.
    #[error(
        "/dev/fuse is not available ({0}); load the fuse module (`modprobe fuse`) or run where FUSE is allowed"
    )]
    NoFuse(String),
    /// The file system library refused the image (corrupt, unsupported, needs recovery on a
    /// read-only mount, ...).
    #[error("{path}: {source}")]
    Fs {
        /// The image path.
        path: PathBuf,
        /// The library error.
        #[source]
        source: FsError,
    },
    /// The kernel or `fusermount3` refused the mount.
    #[error("{path}: mount failed: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Unmounting the image (commit, checkpoint, marking it clean) failed after the FUSE
    /// session ended.
    #[error("{path}: unmount failed: {source}")]
    Unmount {
        /// The image path.
        path: PathBuf,
        /// The library error.
        #[source]
        source: FsError,
    },
    /// The daemon child failed before the mount was ready and reported this (its own
    /// message, passed through).
    #[error("{message}")]
    Reported {
        /// The child's exit status.
        code: u8,
        /// The child's error message.
        message: String,
    },
    /// Daemonizing failed (fork, pipe, setsid).
    #[error("cannot start the mount daemon: {0}")]
    Daemon(String),
    /// `cjfs umount`: the directory is not a `cjfs mount`'s mount point.
    #[error("{path}: not the mount point of a cjfs mount (no FUSE mount there in /proc/self/mountinfo)")]
    NotMounted {
        /// The directory.
        path: PathBuf,
    },
    /// `cjfs umount`: the mount's source (`fsname=`) is not the image path, so the image
    /// whose release to wait for is unknown.
    #[error(
        "{path}: its source {source_name:?} is not an image path (set with fsname=); name the image with --image"
    )]
    UnknownImage {
        /// The mount point.
        path: PathBuf,
        /// The source shown in /proc/self/mountinfo.
        source_name: String,
    },
    /// `cjfs umount`: files are open in the mount (or a process works in it), so it stays
    /// mounted, as `umount` leaves it.
    #[error(
        "{path}: target is busy (a file in it is open or a process works in it); close them, or pass \
         --lazy to detach it now and wait until they close"
    )]
    Busy {
        /// The mount point.
        path: PathBuf,
    },
    /// `cjfs umount`: the daemon still held the image when the wait ran out.
    #[error("{path}: the cjfs mount daemon still holds the image after {secs} s (still writing it home?)")]
    StillHeld {
        /// The image path.
        path: PathBuf,
        /// Seconds waited.
        secs: u64,
    },
    /// `cjfs umount`: the daemon let go of the image without marking it clean.
    #[error(
        "{path}: the mount daemon exited without a clean unmount (the journal needs recovery); run `cjfs recover {path}`"
    )]
    NotClean {
        /// The image path.
        path: PathBuf,
    },
}

impl MountError {
    /// The process exit status for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            MountError::BadOption(_) => 2,
            MountError::Reported { code, .. } => *code,
            _ => 1,
        }
    }
}
