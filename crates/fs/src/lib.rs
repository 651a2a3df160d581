//! ext4-compatible file system for cjfs.
pub mod error;
pub mod mkfs;
pub mod ondisk;
pub use error::{FsError, FsResult};
