//! Multi-version shadow paging (CJFS §4.2): a committing transaction writes a *copy* of each
//! buffer (a version), so writers of later transactions never wait for it; a transaction
//! that needs a version of a buffer that already has `max_versions` in flight conflicts at
//! commit time (see `coalescing`). Copies come from a pre-allocated pool and
//! go back to it once nothing references them (the log write, the checkpoint).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lock_rank::{Rank, RankedMutex};
use cjfs_blockdev::{BlockBuf, zeroed_buf};

use crate::buffer::Buffer;

/// A pool of shadow pages.
#[derive(Debug)]
pub struct ShadowPool {
    /// Free pages, each referenced only by the pool. Lock: itself.
    free: RankedMutex<Vec<BlockBuf>>,
    /// Most pages kept.
    cap: usize,
    /// Pages handed out from the pool (statistics). Relaxed.
    reused: AtomicU64,
    /// Bytes in every page: the journal's block size (immutable).
    block_size: usize,
}

/// Pages allocated when the pool is made; the rest of its capacity fills as versions come
/// back (a mount then costs no more than this, whatever the capacity).
pub const EAGER_PAGES: usize = 256;

impl ShadowPool {
    /// A pool of up to `n` pages of `block_size` bytes (0 disables pooling), [`EAGER_PAGES`]
    /// of them allocated now.
    pub fn new(n: usize, block_size: usize) -> Self {
        let free = (0..n.min(EAGER_PAGES)).map(|_| zeroed_buf(block_size)).collect();
        ShadowPool { free: RankedMutex::new(Rank::Leaf, free), cap: n, reused: AtomicU64::new(0), block_size }
    }

    /// A version of `buf`: a copy of its live image, taken under its read lock.
    pub fn copy_of(&self, buf: &Buffer) -> BlockBuf {
        let page = if self.cap > 0 { self.free.lock().pop() } else { None };
        match page {
            Some(mut p) => {
                if let Some(dst) = Arc::get_mut(&mut p) {
                    dst.copy_from_slice(&buf.read()[..]);
                    self.reused.fetch_add(1, Ordering::Relaxed);
                    return p;
                }
                buf.copy()
            }
            None => buf.copy(),
        }
    }

    /// Give a version back; it is kept only if nothing else references it.
    pub fn put(&self, mut page: BlockBuf) {
        if self.cap == 0 || Arc::get_mut(&mut page).is_none() {
            return;
        }
        let mut f = self.free.lock();
        if f.len() < self.cap {
            f.push(page);
        }
    }

    /// Pages currently free.
    pub fn free_pages(&self) -> usize {
        self.free.lock().len()
    }

    /// Versions served from the pool so far.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// Bytes a version costs.
    pub fn page_bytes(&self) -> usize {
        self.block_size
    }
}

#[cfg(test)]
mod tests {
    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;
    use super::*;
    use cjfs_blockdev::{Device, EmulatedSsd};

    #[test]
    fn pages_are_reused_only_when_unreferenced() {
        let dev: Device = Arc::new(EmulatedSsd::ram(64));
        let cache = crate::buffer::BufferCache::new(dev, 64);
        let b = cache.get_new(3);
        b.write()[0] = 7;
        let pool = ShadowPool::new(2, BLOCK_SIZE);
        let v1 = pool.copy_of(&b);
        assert_eq!(v1[0], 7);
        let held = v1.clone();
        pool.put(v1);
        assert_eq!(pool.free_pages(), 1, "a referenced page is not taken back");
        drop(held);
        let v2 = pool.copy_of(&b);
        pool.put(v2);
        // The first page was dropped while referenced, so one page is left.
        assert_eq!(pool.free_pages(), 1);
        assert_eq!(pool.reused(), 2);
    }
}
