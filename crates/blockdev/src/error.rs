//! Device errors.

/// Result of a device operation.
pub type DevResult<T> = Result<T, DevError>;

/// Why a device operation failed.
#[derive(Debug, thiserror::Error, Clone)]
pub enum DevError {
    /// An OS-level I/O error, with what was being done.
    #[error("{op} failed on {what}: {source}")]
    Io {
        /// Operation (read, write, flush, open).
        op: &'static str,
        /// Device or path.
        what: String,
        /// The OS error.
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
    /// Access beyond the end of the device.
    #[error("block {block} (+{count}) is beyond the end of the device ({num_blocks} blocks)")]
    OutOfRange {
        /// First block.
        block: u64,
        /// Number of blocks.
        count: u64,
        /// Device size in blocks.
        num_blocks: u64,
    },
    /// A buffer whose length is not a multiple of the block size.
    #[error("buffer length {0} is not a multiple of the block size")]
    BadLength(usize),
    /// A block size devices do not support (see [`crate::BLOCK_SIZES`]).
    #[error("block size {0} is not supported (1024, 2048 or 4096 bytes)")]
    BadBlockSize(usize),
    /// The device does not support the operation (e.g. barrier on a file).
    #[error("{0} is not supported by this device")]
    Unsupported(&'static str),
    /// A failure injected by a test or the crash harness.
    #[error("injected failure: {0}")]
    Injected(String),
    /// The device was poisoned by an earlier flush failure; writes are refused.
    #[error("device is poisoned after an earlier failure: {0}")]
    Poisoned(String),
    /// Another open file description holds the image's writer lock (a `cjfs mount` or
    /// another cjfs command or program writing it).
    #[error("{what}: the image is in use: {holder} holds its writer lock")]
    Busy {
        /// The image.
        what: String,
        /// The holding processes (`process PID (COMMAND)`) where `/proc/locks` names them.
        holder: String,
    },
    /// The path is neither a regular file nor a block device (a FIFO, a socket, a character
    /// device): opening some of them would block or read nothing.
    #[error("{0}: not a regular file or block device")]
    NotAnImage(String),
    /// The kernel uses the image: a block device mounted (or held exclusively), or an image
    /// file backing a loop device that is. Both writing would corrupt it.
    #[error("{what}: the image is in use by the kernel: {by}; unmount it first")]
    KernelBusy {
        /// The image.
        what: String,
        /// Who holds it (`/dev/loop3 is mounted or held exclusively`).
        by: String,
    },
}

impl DevError {
    /// Wrap an io::Error.
    pub fn io(op: &'static str, what: impl Into<String>, e: std::io::Error) -> Self {
        DevError::Io { op, what: what.into(), source: std::sync::Arc::new(e) }
    }
    /// The errno this error maps to.
    pub fn errno(&self) -> i32 {
        match self {
            DevError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            DevError::OutOfRange { .. } => libc::ENOSPC,
            DevError::Busy { .. } | DevError::KernelBusy { .. } => libc::EBUSY,
            DevError::Unsupported(_) => libc::EOPNOTSUPP,
            _ => libc::EIO,
        }
    }
}
