//! ext4-compatible file system for cjfs.
//!
//! [`Fs::open`] mounts an image on any [`cjfs_blockdev::BlockDevice`]; every operation takes
//! inode numbers (with path helpers) and returns a typed [`FsError`] that maps to an errno.
//! See [`fs`] for the lock order.

pub mod acl;
mod adaptive;
mod alloc;
pub mod atime;
mod block_map;
pub mod casefold;
mod casefold_tables;
pub mod check;
mod dir;
mod dx;
pub mod error;
pub mod extent_tree;
mod fast_commit;
mod file;
pub mod fs;
pub mod ijournal;
pub mod ijournal_replay;
pub mod image_check;
mod inline_data;
mod inode;
pub mod meta;
pub mod mkfs;
pub mod mmp;
mod namei;
pub mod ondisk;
mod ops;
mod orphan;
mod planted;
pub mod preset;
pub mod protect;
mod quota;
mod rebuild;
mod tx;
pub mod types;
pub mod xattr;

pub use adaptive::{AdaptiveStats, DEBT_BLOCKS, LARGE_BLOCKS, switch_cost_blocks};
pub use alloc::{CallerGuard, act_as};
pub use atime::AtimeUpdate;
pub use error::{CsumStructure, FsError, FsResult};
pub use fs::{
    Fs, Geometry, MountReport, recover_device, recover_device_held, recover_device_scanning,
    recover_device_with,
};
pub use ijournal::{Fallback, IjStats};
pub use ijournal_replay::IjReplayReport;
pub use mkfs::{MkfsOptions, mkfs};
pub use orphan::{PendingOrphans, pending_orphans};
#[cfg(feature = "planted-bugs")]
pub use planted::FsBugs;
pub use quota::{QuotaEntry, QuotaKind};
pub use types::*;
pub use xattr::XattrFlags;
