//! A journal handle bound to the file system: metadata access, allocation and freeing
//! inside one transaction.

use std::sync::Arc;

use cjfs_journal::{Buffer, BufferCache, Handle};

use crate::error::{FsError, FsResult};
use crate::fs::FsInner;
use crate::meta::MetaStore;

/// One file system operation's transaction handle.
pub(crate) struct Tx<'a> {
    pub fs: &'a FsInner,
    pub h: Handle,
    /// iJournaling: metadata blocks this handle changed (`true`: freed) through
    /// [`MetaStore`] — extent tree blocks and directory blocks — taken by the next
    /// `store_inode` (the inode whose tree they are: every operation stores the inode it
    /// changed right after changing it).
    pub tree: Vec<(u64, bool)>,
}

impl<'a> Tx<'a> {
    /// Start a handle with `credits` blocks reserved.
    pub fn start(fs: &'a FsInner, credits: u32) -> FsResult<Tx<'a>> {
        if fs.opts.read_only {
            return Err(FsError::ReadOnly);
        }
        // A change of an inode's charge updates the quota files in the same transaction.
        let credits = credits + fs.quota.get().map_or(0, crate::quota::Quotas::credits);
        let credits = credits.min(fs.journal.max_tx_blocks());
        Ok(Tx { fs, h: fs.journal.start(credits)?, tree: Vec::new() })
    }

    /// Stop the handle; returns its transaction.
    pub fn stop(self) -> FsResult<cjfs_journal::TxId> {
        Ok(self.h.stop()?)
    }
}

impl MetaStore for Tx<'_> {
    fn read_block(&mut self, blk: u64) -> FsResult<Arc<Buffer>> {
        check_block(self.fs, blk)?;
        Ok(self.fs.cache.read(blk)?)
    }

    fn write_access(&mut self, buf: &Arc<Buffer>) -> FsResult<()> {
        self.h.get_write_access(buf)?;
        if self.fs.ij.get().is_some() {
            self.tree.push((buf.blocknr(), false));
        }
        Ok(())
    }

    fn new_block(&mut self, goal: u64) -> FsResult<Arc<Buffer>> {
        // Tree blocks complete a mapping already allocated: they may use the reserves.
        let (blk, _) = crate::alloc::alloc_blocks_any(self, goal, 1)?;
        let buf = self.fs.cache.get_new(blk);
        self.h.get_create_access(&buf)?;
        if self.fs.ij.get().is_some() {
            self.tree.push((blk, false));
        }
        Ok(buf)
    }

    fn free_meta_block(&mut self, blk: u64) -> FsResult<()> {
        crate::alloc::free_blocks(self, blk, 1, true)?;
        if self.fs.ij.get().is_some() {
            self.tree.push((blk, true));
        }
        Ok(())
    }
    fn block_limit(&self) -> u64 {
        self.fs.geo.blocks_count
    }
}

fn check_block(fs: &FsInner, blk: u64) -> FsResult<()> {
    if blk == 0 || blk >= fs.geo.blocks_count {
        return Err(FsError::Corrupt(format!(
            "metadata block {blk} is outside the file system ({} blocks)",
            fs.geo.blocks_count
        )));
    }
    Ok(())
}

/// Read-only metadata access through a buffer cache (lookups outside a transaction).
pub(crate) struct ReadStore<'a> {
    pub cache: &'a BufferCache,
    pub limit: u64,
}

impl MetaStore for ReadStore<'_> {
    fn read_block(&mut self, blk: u64) -> FsResult<Arc<Buffer>> {
        if blk == 0 || blk >= self.limit {
            return Err(FsError::Corrupt(format!(
                "metadata block {blk} is outside the file system ({} blocks)",
                self.limit
            )));
        }
        Ok(self.cache.read(blk)?)
    }
    fn write_access(&mut self, _buf: &Arc<Buffer>) -> FsResult<()> {
        Err(FsError::ReadOnly)
    }
    fn new_block(&mut self, _goal: u64) -> FsResult<Arc<Buffer>> {
        Err(FsError::ReadOnly)
    }
    fn free_meta_block(&mut self, _blk: u64) -> FsResult<()> {
        Err(FsError::ReadOnly)
    }
    fn block_limit(&self) -> u64 {
        self.limit
    }
}
