//! The interface metadata algorithms (extent trees, directories, xattr blocks) use to read,
//! modify, allocate and free metadata blocks inside one journal handle.

use std::sync::Arc;

use cjfs_journal::Buffer;

use crate::error::FsResult;

/// Metadata block access within one transaction.
pub trait MetaStore {
    /// The buffer of metadata block `blk`, read in if needed.
    fn read_block(&mut self, blk: u64) -> FsResult<Arc<Buffer>>;
    /// Declare that `buf` will be modified in this transaction (journal write access).
    /// Call before changing the buffer's contents.
    fn write_access(&mut self, buf: &Arc<Buffer>) -> FsResult<()>;
    /// Allocate a new metadata block near `goal`: returned zeroed, up to date and under
    /// write access.
    fn new_block(&mut self, goal: u64) -> FsResult<Arc<Buffer>>;
    /// Free a metadata block (its journalled copies are revoked).
    fn free_meta_block(&mut self, blk: u64) -> FsResult<()>;
    /// One past the last block of the file system: an extent or pointer reaching it is
    /// corrupt. Stores not tied to a file system (tests) have no limit.
    fn block_limit(&self) -> u64 {
        u64::MAX
    }
}
