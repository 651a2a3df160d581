//! Journal errors.

use cjfs_blockdev::DevError;

/// Result of a journal operation.
pub type JResult<T> = Result<T, JournalError>;

/// Why a journal operation failed.
#[derive(Debug, thiserror::Error, Clone)]
pub enum JournalError {
    /// The device failed.
    #[error("journal device error: {0}")]
    Device(#[from] DevError),
    /// On-disk journal structure is damaged.
    #[error("corrupt journal: {0}")]
    Corrupt(String),
    /// The journal needs recovery but cannot be replayed whole (a failed commit checksum,
    /// logged blocks that fail their checksum or lie beyond the device); nothing was written.
    #[error("the journal is damaged ({0}); nothing was replayed")]
    Damaged(String),
    /// The journal uses a feature or layout we do not support.
    #[error("unsupported journal: {0}")]
    Incompatible(String),
    /// The journal was aborted after an earlier failure (e.g. a failed flush); nothing more is
    /// written. Carries the original cause.
    #[error("journal aborted: {0}")]
    Aborted(String),
    /// A handle asked for more credits than a transaction may hold.
    #[error("handle needs {wanted} credits but a transaction holds at most {max}")]
    TooManyCredits {
        /// Credits asked for.
        wanted: u32,
        /// Maximum per transaction.
        max: u32,
    },
    /// The journal has been shut down.
    #[error("journal is shut down")]
    Shutdown,
    /// Writes of an fsync's data made by concurrent fsyncs kept failing (each left the
    /// buffers dirty; the caller's own attempts were taken over by them).
    #[error("data write failed: {0}")]
    DataWrite(String),
}

impl JournalError {
    /// The errno this error maps to.
    pub fn errno(&self) -> i32 {
        match self {
            JournalError::Device(d) => d.errno(),
            JournalError::Corrupt(_) | JournalError::Damaged(_) => 117, // EUCLEAN
            JournalError::Incompatible(_) => 95,                        // EOPNOTSUPP
            JournalError::TooManyCredits { .. } => 28,                  // ENOSPC
            _ => 5,                                                     // EIO
        }
    }
}
