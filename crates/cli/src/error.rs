//! The CLI's error type: every failure names the file or image it concerns and its cause,
//! and prints as one line (`cjfs: <command>: <cause>`).

use cjfs_fs::FsError;
use cjfs_journal::JournalError;

/// Result of a CLI command.
pub type CliResult<T> = Result<T, CliError>;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage found after argument parsing (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// A local file (not the image's contents) could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The local path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file system library refused or failed on the image.
    #[error("{image}: {}", describe_fs(source))]
    Fs {
        /// The image path.
        image: String,
        /// The library error.
        #[source]
        source: FsError,
    },
    /// An operation on a path inside the image failed.
    #[error("{image}: {path}: {}", describe_fs(source))]
    FsPath {
        /// The image path.
        image: String,
        /// The path inside the image.
        path: String,
        /// The library error.
        #[source]
        source: FsError,
    },
    /// The journal layer refused or failed on the image.
    #[error("{image}: {source}")]
    Journal {
        /// The image path.
        image: String,
        /// The journal error.
        #[source]
        source: JournalError,
    },
    /// The image's journal holds transactions and a read-only command cannot replay them.
    #[error("{image}: the journal needs recovery; run `cjfs recover {image}` first")]
    NeedsRecovery {
        /// The image path.
        image: String,
    },
    /// The journal needs recovery, but cjfs only reads this file system (ro_compat features it
    /// does not maintain), so `cjfs recover` cannot replay it either.
    #[error(
        "{image}: the journal needs recovery, which cjfs does not write on a file system with ext4 \
         feature(s) {features}: replay it with `e2fsck -fy {image}` or a kernel mount first"
    )]
    NeedsForeignRecovery {
        /// The image path.
        image: String,
        /// The features cjfs does not maintain, comma-separated.
        features: String,
    },
    /// The journal is live: another process (a `cjfs mount` or a cjfs writer) holds the
    /// image's writer lock while the superblock or the journal says recovery is needed, so
    /// what looks like a crash is that process's running journal.
    #[error(
        "{image}: the image is in use by another cjfs process (a cjfs mount or writer) whose journal is \
         live; unmount it (or let the writer finish) first"
    )]
    InUse {
        /// The image path.
        image: String,
    },
    /// The journal is live because the kernel has the image mounted (its block device, or a
    /// loop device over the file): what looks like a crash is the kernel's running journal.
    #[error("{image}: the image is in use by the kernel ({by}) and its journal is live; unmount it first")]
    KernelInUse {
        /// The image path.
        image: String,
        /// Who holds it.
        by: String,
    },
    /// The image file is shorter than its superblock says.
    #[error(
        "{image}: image is truncated: the superblock says {want} blocks ({want_bytes} bytes) but \
         the image holds only {have} blocks"
    )]
    Truncated {
        /// The image path.
        image: String,
        /// Blocks the superblock claims.
        want: u64,
        /// The same in bytes.
        want_bytes: u64,
        /// Whole blocks in the image.
        have: u64,
    },
    /// Not enough free space for what was asked.
    #[error("{image}: no space left on device: {what} needs {need} blocks but only {free} are free")]
    NoSpace {
        /// The image path.
        image: String,
        /// What needs the space.
        what: String,
        /// Blocks needed.
        need: u64,
        /// Blocks free.
        free: u64,
    },
    /// The reader of standard output went away (a closed pipe): the command stops quietly
    /// and succeeds.
    #[error("standard output was closed")]
    StdoutClosed,
    /// Any other failure, fully described.
    #[error("{0}")]
    Msg(String),
}

impl CliError {
    /// The process exit status for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }

    /// A library error on the image `image`.
    pub fn fs(image: &str, source: FsError) -> Self {
        CliError::Fs { image: image.to_string(), source }
    }

    /// A library error on `path` inside the image `image`.
    pub fn fs_path(image: &str, path: &str, source: FsError) -> Self {
        CliError::FsPath { image: image.to_string(), path: path.to_string(), source }
    }

    /// A local I/O error on `path`.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        CliError::Io { path: path.to_string(), source }
    }
}

/// Describe a library error without redundant prefixes: "corrupt file system: not an
/// ext2/3/4 file system: ..." reads better without the first part.
fn describe_fs(e: &FsError) -> String {
    match e {
        FsError::Corrupt(m) if m.starts_with("not an ext") => m.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_name_the_image() {
        let e =
            CliError::fs("a.img", FsError::Corrupt("not an ext2/3/4 file system: bad magic 0x0000".into()));
        assert_eq!(e.to_string(), "a.img: not an ext2/3/4 file system: bad magic 0x0000");
        let e = CliError::fs_path("a.img", "/x", FsError::NotFound("x".into()));
        assert_eq!(e.to_string(), "a.img: /x: no such file or directory: x");
        assert_eq!(CliError::Usage("u".into()).exit_code(), 2);
        assert_eq!(CliError::NeedsRecovery { image: "i".into() }.exit_code(), 1);
    }
}
