//! Buffers and the sharded buffer cache (the "page cache" of cjfs).
//!
//! One [`Buffer`] per cached block holds the live image. A committing transaction never
//! logs the live image: it logs a *version* (a copy taken when the transaction locks),
//! so writers of the next transaction may change the live image at once. How many versions
//! of one buffer may be in flight is the journal's `max_versions` (1 = JBD2's single frozen
//! copy; CJFS's multi-version shadow paging allows more).
//!
//! The live image is shared copy-on-write ([`Buffer::snapshot`], [`Buffer::write`]): an
//! ordered-data write sends the image itself, and a writer that changes the block while that
//! write still holds it copies first, as the kernel's JBD2 freezes a buffer only when it is
//! written to during a commit. Versions stay copies taken by the commit ([`Buffer::copy`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cjfs_blockdev::{BlockBuf, Device, TxId, zeroed_buf};
use parking_lot::{MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::lock_stat::{WaitCv, WaitSite};

use crate::lock_rank::{Rank, RankedGuard, RankedMutex};

use crate::error::JResult;

/// One shard of the cache: block number to buffer. The key is a block number, so the
/// hasher need not resist chosen keys; SipHash's rounds were a measurable share of a
/// streaming writer's CPU (every block written looks its buffer up).
type ShardMap = std::collections::HashMap<u64, Arc<Buffer>, foldhash::fast::RandomState>;

/// Transaction id within one log (JBD2's sequence number, not wrapped; the low 32 bits go on
/// disk). A transaction's full identity is a [`TxId`] (log and id): the buffer cache is shared
/// by every log, so everything kept per buffer names transactions by [`TxId`].
pub type Tid = u64;

/// A committed version of a buffer awaiting checkpoint.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The transaction that committed it.
    pub tx: TxId,
    /// Its commit-order stamp (orders versions of different logs; 0 with one log).
    pub stamp: u64,
    /// The image.
    pub image: BlockBuf,
}

/// Journal bookkeeping for one buffer. Protected by [`Buffer::jstate`].
#[derive(Debug, Default)]
pub struct JState {
    /// Running transaction that has this buffer on its metadata list (will log it).
    pub running: Option<TxId>,
    /// Committing transactions holding a version of this buffer that is not yet released.
    pub versions: u32,
    /// Latest committed version that still has to be written to its home location.
    pub checkpoint: Option<Committed>,
    /// The transaction that took the newest version of this buffer (per-core journaling
    /// chains a later writer of another log to it while it is not yet valid; a file leaving
    /// data journaling writes in place a block whose version is still in the log only once
    /// it revoked it, which clears this: `unjournal.rs`).
    pub last_version: Option<TxId>,
    /// Per-core journaling: durable versions of this block still in some log on disk, with
    /// their stamps. A log may not release a version while an older one is in another log:
    /// recovery would replay the older image over the newer one written home.
    pub in_logs: Vec<(TxId, u64)>,
    /// Data buffer whose live image has not been written home (ordered / no-journal).
    pub dirty: bool,
    /// Running transaction whose ordered-data list holds this buffer.
    pub ordered: Option<TxId>,
    /// The write in `ordered` must be on the medium before that transaction's commit record
    /// can be (newly allocated blocks, bytes the commit's size exposes, blocks whose logged
    /// image it revokes); a plain overwrite only needs to be durable with the commit.
    pub ordered_strict: bool,
    /// Who last wrote this data buffer home: the transaction whose commit wrote it as
    /// ordered data (durable with that transaction), or `None` for an fdatasync's own write.
    pub home_tx: Option<TxId>,
    /// fdatasync writes of this buffer submitted and not yet completed.
    pub home_writes: u32,
    /// fsync-path writes of this buffer that failed (wrapping): a caller that waited for
    /// another's write sees from it whether that write left the buffer dirty again.
    pub write_errors: u32,
    /// Ordered-data checksums: the transaction whose commit block sums this block's home
    /// contents, until that transaction is confirmed (`ordered_sums.rs`); an in-place
    /// write of the block must not reach the device before then.
    pub sum: Option<TxId>,
}

impl JState {
    /// Whether the journal still needs this buffer (it must not be evicted).
    pub fn pinned(&self) -> bool {
        self.running.is_some()
            || self.versions > 0
            || self.checkpoint.is_some()
            || self.dirty
            || self.ordered.is_some()
            || self.home_writes > 0
            || self.sum.is_some()
    }
}

/// One cached block.
///
/// Locks: `data` (RwLock) protects the live image; `jstate` (Mutex) protects the journal
/// bookkeeping and is what `cv` waits on. Never take `jstate` while holding `data` for
/// writing (the commit path takes `jstate` then `data` for reading).
pub struct Buffer {
    blocknr: u64,
    /// Live image, shared copy-on-write with the versions and writes taken of it: a
    /// snapshot is a reference, and a writer copies only while one is still held. Lock:
    /// itself.
    data: RwLock<BlockBuf>,
    /// Journal bookkeeping. Lock: itself.
    jstate: RankedMutex<JState>,
    /// Signalled when `jstate.versions` drops (writers blocked on a conflict wait here)
    /// and when `jstate.home_writes` drops (fdatasync waiting for another's data write).
    cv: WaitCv,
    /// The live image holds the block's content (read from disk or fully written).
    uptodate: AtomicBool,
    /// The file system checked the content's checksum (or wrote it): not checked again
    /// while the buffer stays cached (the kernel's `BH_Verified`).
    verified: AtomicBool,
    /// Last access tick, for eviction. Relaxed.
    last_used: AtomicU64,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer").field("blocknr", &self.blocknr).finish()
    }
}

impl Buffer {
    fn new(blocknr: u64, block_size: usize) -> Self {
        Buffer {
            blocknr,
            data: RwLock::new(zeroed_buf(block_size)),
            jstate: RankedMutex::new(Rank::BufferJState, JState::default()),
            cv: WaitCv::new(WaitSite::Buffer),
            uptodate: AtomicBool::new(false),
            verified: AtomicBool::new(false),
            last_used: AtomicU64::new(0),
        }
    }

    /// Block number on the device.
    pub fn blocknr(&self) -> u64 {
        self.blocknr
    }

    /// Read access to the live image.
    pub fn read(&self) -> MappedRwLockReadGuard<'_, [u8]> {
        RwLockReadGuard::map(self.data.read(), |d| &**d)
    }

    /// Write access to the live image. Metadata must be under a handle's write access first.
    /// The image is copied first if a snapshot of it is still referenced (a version in a
    /// log write or awaiting checkpoint, an ordered write in flight), so that snapshot
    /// stays what it was.
    pub fn write(&self) -> MappedRwLockWriteGuard<'_, [u8]> {
        RwLockWriteGuard::map(self.data.write(), |d| Arc::make_mut(d))
    }

    /// A private copy of the live image: a journal version, whose copy is the commit's
    /// work (counted in its statistics) rather than a later writer's.
    pub fn copy(&self) -> BlockBuf {
        BlockBuf::from(&self.data.read()[..])
    }

    /// A shared copy of the live image (an ordered write's data).
    pub fn snapshot(&self) -> BlockBuf {
        // A reference, not a copy: this runs for every block of every commit and every
        // ordered write, and the live image is copied only if written while it is held
        // (`write`). The ordered data of a streaming writer was copied three times (write,
        // snapshot, device); now twice.
        self.data.read().clone()
    }

    /// Journal bookkeeping lock.
    pub fn jstate(&self) -> RankedGuard<'_, JState> {
        self.jstate.lock()
    }

    /// Wait on the buffer's condition variable (releases and retakes `g`).
    pub fn wait_jstate(&self, g: &mut RankedGuard<'_, JState>) {
        g.wait(&self.cv);
    }

    /// Wake everyone waiting on this buffer.
    pub fn notify(&self) {
        self.cv.notify_all();
    }

    /// Whether the live image is valid.
    pub fn is_uptodate(&self) -> bool {
        self.uptodate.load(Ordering::Acquire)
    }

    /// Mark the live image valid (after the caller filled it completely).
    pub fn set_uptodate(&self) {
        self.uptodate.store(true, Ordering::Release);
    }

    /// Whether the file system has checked (or written) the content's checksum.
    pub fn is_verified(&self) -> bool {
        self.verified.load(Ordering::Acquire)
    }

    /// Record that the content's checksum was checked or written.
    pub fn set_verified(&self) {
        self.verified.store(true, Ordering::Release);
    }

    /// Mark a data buffer dirty (its live image must reach home). Returns the previous flag.
    pub fn mark_dirty(&self) -> bool {
        std::mem::replace(&mut self.jstate.lock().dirty, true)
    }
}

const SHARDS: usize = 64;

/// The sharded buffer cache. Each shard's map is protected by its own Mutex; no lock is
/// held across device I/O except the buffer's own `data` lock while reading it in.
pub struct BufferCache {
    dev: Device,
    /// The device's block size, the length of every buffer (immutable).
    block_size: usize,
    /// block number -> buffer, per shard. Lock: the shard's Mutex.
    shards: Vec<RankedMutex<ShardMap>>,
    /// Soft limit on cached buffers per shard.
    shard_cap: usize,
    /// Access clock for eviction. Relaxed.
    tick: AtomicU64,
    /// Buffers read from the device (statistics). Relaxed.
    reads: AtomicU64,
}

impl BufferCache {
    /// A cache over `dev` holding about `capacity_blocks` clean blocks.
    pub fn new(dev: Device, capacity_blocks: usize) -> Self {
        BufferCache {
            block_size: dev.block_size(),
            dev,
            shards: (0..SHARDS).map(|_| RankedMutex::new(Rank::CacheShard, ShardMap::default())).collect(),
            shard_cap: (capacity_blocks / SHARDS).max(64),
            tick: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }

    /// The device under the cache.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Bytes in every buffer: the device's block size.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    fn shard(&self, blocknr: u64) -> &RankedMutex<ShardMap> {
        // Fibonacci hashing spreads neighbouring blocks across shards.
        let h = blocknr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    /// The buffer for `blocknr`, created (not up to date) if absent. No I/O.
    pub fn get(&self, blocknr: u64) -> Arc<Buffer> {
        let t = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(blocknr).lock();
        if let Some(b) = shard.get(&blocknr) {
            b.last_used.store(t, Ordering::Relaxed);
            return b.clone();
        }
        if shard.len() >= self.shard_cap {
            Self::evict(&mut shard, self.shard_cap);
        }
        let b = Arc::new(Buffer::new(blocknr, self.block_size));
        b.last_used.store(t, Ordering::Relaxed);
        shard.insert(blocknr, b.clone());
        b
    }

    /// The buffer for `blocknr` if it is cached.
    pub fn peek(&self, blocknr: u64) -> Option<Arc<Buffer>> {
        self.shard(blocknr).lock().get(&blocknr).cloned()
    }

    /// The buffer for `blocknr`, read from the device if not up to date.
    pub fn read(&self, blocknr: u64) -> JResult<Arc<Buffer>> {
        let b = self.get(blocknr);
        if !b.is_uptodate() {
            let mut g = b.write();
            if !b.is_uptodate() {
                self.dev.read(blocknr, &mut g[..])?;
                self.reads.fetch_add(1, Ordering::Relaxed);
                b.set_uptodate();
            }
        }
        Ok(b)
    }

    /// The buffer for a block about to be fully overwritten: zeroed and up to date, no read.
    pub fn get_new(&self, blocknr: u64) -> Arc<Buffer> {
        let b = self.get(blocknr);
        // The block was just allocated: any committed version of its previous incarnation
        // still awaiting checkpoint is dead and must never be written over the new contents.
        // The freeing (revoking) transaction drops it when it becomes durable
        // (`flush::mark_durable`), after any older commit that could set it again; this is a
        // second line of defence. By the time the block can be allocated again its freeing
        // transaction is durable, so no such commit is left.
        // (Found by the crash harness: a freed directory block reused as file data had the
        // old directory written over the data by the checkpoint at unmount.)
        b.jstate().checkpoint = None;
        {
            let mut g = b.data.write();
            // A still-referenced old image is replaced, not copied and then zeroed.
            match Arc::get_mut(&mut g) {
                Some(d) => d.fill(0),
                None => *g = zeroed_buf(self.block_size),
            }
        }
        // Whatever was checked about the old contents says nothing about the new ones.
        b.verified.store(false, Ordering::Release);
        b.set_uptodate();
        b
    }

    /// Drop a clean, unpinned buffer from the cache (e.g. after its block was freed and
    /// will be rewritten by another path).
    pub fn forget(&self, blocknr: u64) {
        let mut shard = self.shard(blocknr).lock();
        if let Some(b) = shard.get(&blocknr) {
            let pinned = b.jstate.try_lock().map(|j| j.pinned()).unwrap_or(true);
            if !pinned && Arc::strong_count(b) == 1 {
                shard.remove(&blocknr);
            }
        }
    }

    /// Number of cached buffers.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True if nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Blocks read from the device so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Every cached buffer whose journal state satisfies `pred` (under its jstate lock).
    pub fn collect(&self, mut pred: impl FnMut(&JState) -> bool) -> Vec<Arc<Buffer>> {
        let mut out = Vec::new();
        for s in &self.shards {
            let shard = s.lock();
            for b in shard.values() {
                if pred(&b.jstate.lock()) {
                    out.push(b.clone());
                }
            }
        }
        out
    }

    /// Drop every clean, unpinned, unreferenced buffer (used after recovery rewrote blocks
    /// underneath the cache, and by tests).
    pub fn drop_clean(&self) {
        for s in &self.shards {
            let mut shard = s.lock();
            shard.retain(|_, b| {
                let pinned = b.jstate.try_lock().map(|j| j.pinned()).unwrap_or(true);
                pinned || Arc::strong_count(b) > 1
            });
        }
    }

    fn evict(shard: &mut ShardMap, cap: usize) {
        // Drop the older half of the evictable buffers: amortises the scan.
        let mut cands: Vec<(u64, u64)> = shard
            .iter()
            .filter(|(_, b)| {
                Arc::strong_count(b) == 1 && b.jstate.try_lock().map(|j| !j.pinned()).unwrap_or(false)
            })
            .map(|(k, b)| (b.last_used.load(Ordering::Relaxed), *k))
            .collect();
        if cands.is_empty() {
            return;
        }
        cands.sort_unstable();
        let n = (cands.len() / 2).max(1).min(shard.len().saturating_sub(cap / 2).max(1));
        for (_, k) in cands.into_iter().take(n) {
            shard.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cjfs_blockdev::EmulatedSsd;

    #[test]
    fn snapshots_share_the_image_until_it_is_written() {
        let dev: Device = Arc::new(EmulatedSsd::ram(64));
        let cache = BufferCache::new(dev, 64);
        let b = cache.get_new(5);
        b.write()[0] = 1;
        let s1 = b.snapshot();
        let s2 = b.snapshot();
        assert!(Arc::ptr_eq(&s1, &s2), "a snapshot is a reference, not a copy");
        b.write()[0] = 2;
        assert_eq!((s1[0], b.read()[0]), (1, 2), "a write while a snapshot is held copies first");
        drop((s1, s2));
        let s3 = b.snapshot();
        drop(s3);
        let before = b.read().as_ptr();
        b.write()[1] = 3;
        assert_eq!(b.read().as_ptr(), before, "an unreferenced image is written in place");
        let c = b.copy();
        assert!(!std::ptr::eq(c.as_ptr(), b.read().as_ptr()), "a version is a copy");
        assert_eq!(&c[..2], &[2, 3]);
    }

    #[test]
    fn read_caches_and_evicts_clean_only() {
        let dev: Device = Arc::new(EmulatedSsd::ram(4096));
        let cache = BufferCache::new(dev.clone(), 64 * 64);
        let b = cache.read(7).expect("read");
        assert!(b.is_uptodate());
        assert_eq!(b.blocknr(), 7);
        b.write()[0] = 9;
        b.mark_dirty();
        drop(b);
        for i in 100..(100 + 64 * 200) {
            let _ = cache.get(i % 4096);
        }
        // The dirty buffer survived eviction pressure with its content.
        let b = cache.get(7);
        assert_eq!(b.read()[0], 9);
        assert!(cache.len() < 64 * 200);
    }
}
