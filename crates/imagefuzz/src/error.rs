//! The fuzzer's own errors (not the findings: those are [`crate::classify::Outcome`]s).

use std::path::PathBuf;

/// Why the fuzzer itself could not go on.
#[derive(Debug, thiserror::Error)]
pub enum FuzzError {
    /// A local file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the file.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The `cjfs` binary to judge was not found.
    #[error(
        "cjfs binary not found at {0} (build it with `cargo build --release -p cjfs-cli` or pass --cjfs)"
    )]
    NoCjfs(PathBuf),
    /// Making a seed image failed.
    #[error("seed image {name}: {msg}")]
    Seed {
        /// The seed's name.
        name: String,
        /// What went wrong.
        msg: String,
    },
    /// An image could not be parsed to locate its structures.
    #[error("layout of {name}: {msg}")]
    Layout {
        /// The image's name.
        name: String,
        /// What went wrong.
        msg: String,
    },
    /// A corpus entry is malformed.
    #[error("corpus entry {path}: {msg}")]
    Corpus {
        /// The entry's file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// JSON encoding or decoding failed.
    #[error("{what}: {source}")]
    Json {
        /// What was being encoded or decoded.
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

impl FuzzError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        FuzzError::Io { what: what.into(), source }
    }

    /// A seed error.
    pub fn seed(name: &str, msg: impl Into<String>) -> Self {
        FuzzError::Seed { name: name.to_string(), msg: msg.into() }
    }
}

/// Result of the fuzzer's own operations.
pub type FuzzResult<T> = Result<T, FuzzError>;
