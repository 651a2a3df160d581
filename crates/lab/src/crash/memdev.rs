//! [`CowDevice`]: an in-memory device made of a shared base image and a copy-on-write map of
//! changed blocks. Building one for a crash state costs only its changed blocks (an
//! [`cjfs_blockdev::EmulatedSsd`] would copy the whole 16 MiB image), and the changed blocks
//! are exactly what must be written to refresh an `e2fsck` scratch file.
//!
//! Writes are applied at submission and complete at once; flushes and barriers change nothing
//! (durability is the recorder's business, not this device's), though a flush may be given a
//! duration ([`CowDevice::with_flush_delay`]) so that work overlaps it as on a disk. It reports a volatile cache
//! and, unless built without ([`CowDevice::with_barrier`]), barrier support, so every journal mode
//! issues the flushes and barriers it would on a real disk of that kind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{
    BlockBuf, BlockDevice, DEFAULT_BLOCK_SIZE, DevError, DevResult, DeviceCaps, DeviceStats, IoTicket,
    WriteRequest,
};
use parking_lot::RwLock;

/// Base image plus changed blocks. See the module docs.
pub struct CowDevice {
    base: Arc<Vec<u8>>,
    num_blocks: u64,
    /// Bytes per block (immutable).
    block_size: usize,
    /// Changed blocks. Lock: itself.
    blocks: RwLock<BTreeMap<u64, BlockBuf>>,
    /// How long a flush takes (immutable).
    flush_delay: Duration,
    /// Whether the device reports a cache barrier (immutable).
    barrier: bool,
}

pub use cjfs_fs::ondisk::superblock::block_size_in as image_block_size;

impl CowDevice {
    /// A device holding `base` with `blocks` changed, in blocks of the size the ext4
    /// superblock in `base` names (4 KiB when there is none yet).
    pub fn new(base: Arc<Vec<u8>>, blocks: BTreeMap<u64, BlockBuf>) -> CowDevice {
        let bs = image_block_size(&base).unwrap_or(DEFAULT_BLOCK_SIZE);
        CowDevice::with_block_size(base, blocks, bs)
    }

    /// A device holding `base` with `blocks` changed, in blocks of `block_size` bytes.
    pub fn with_block_size(
        base: Arc<Vec<u8>>,
        blocks: BTreeMap<u64, BlockBuf>,
        block_size: usize,
    ) -> CowDevice {
        let num_blocks = (base.len() / block_size) as u64;
        CowDevice {
            base,
            block_size,
            num_blocks,
            blocks: RwLock::new(blocks),
            flush_delay: Duration::ZERO,
            barrier: true,
        }
    }

    /// The same device reporting a cache barrier or not (`false`: like an image file or a
    /// disk where only a flush orders writes, so the journal takes its barrier-less path;
    /// like an image file it then has no FUA either, so iJournaling writes and flushes).
    pub fn with_barrier(mut self, barrier: bool) -> CowDevice {
        self.barrier = barrier;
        self
    }

    /// The same device whose flushes each take `d` (the caller sleeps), so commits and
    /// other writes can be issued while a flush is in progress, as on a disk.
    pub fn with_flush_delay(mut self, d: Duration) -> CowDevice {
        self.flush_delay = d;
        self
    }

    /// The base image.
    pub fn base(&self) -> &Arc<Vec<u8>> {
        &self.base
    }

    /// The changed blocks (those equal to the base are dropped).
    pub fn changed(&self) -> BTreeMap<u64, BlockBuf> {
        self.blocks
            .read()
            .iter()
            .filter(|(b, buf)| {
                let off = **b as usize * self.block_size;
                self.base.get(off..off + self.block_size).is_none_or(|o| o != &buf[..])
            })
            .map(|(b, buf)| (*b, buf.clone()))
            .collect()
    }

    /// The whole image.
    pub fn image_bytes(&self) -> Vec<u8> {
        let mut img = self.base.to_vec();
        for (&b, buf) in self.blocks.read().iter() {
            let off = b as usize * self.block_size;
            if let Some(dst) = img.get_mut(off..off + self.block_size) {
                dst.copy_from_slice(&buf[..]);
            }
        }
        img
    }

    /// A new device with the same contents (base shared, changed blocks copied).
    pub fn fork(&self) -> CowDevice {
        CowDevice::with_block_size(self.base.clone(), self.blocks.read().clone(), self.block_size)
            .with_barrier(self.barrier)
    }
}

impl BlockDevice for CowDevice {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn caps(&self) -> DeviceCaps {
        // The barrier device stands for NVMe (queued flushes), the other for SATA and eMMC,
        // so the crash suite runs both ways a multi-log journal flushes.
        DeviceCaps {
            barrier: self.barrier,
            volatile_cache: true,
            fua: self.barrier,
            queued_flush: self.barrier,
        }
    }

    fn describe(&self) -> String {
        format!("copy-on-write memory device ({} blocks)", self.num_blocks)
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.block_size;
        if !buf.len().is_multiple_of(bs) {
            return Err(DevError::BadLength(buf.len()));
        }
        let count = (buf.len() / bs) as u64;
        if block.checked_add(count).is_none_or(|e| e > self.num_blocks) {
            return Err(DevError::OutOfRange { block, count, num_blocks: self.num_blocks });
        }
        let map = self.blocks.read();
        for (i, dst) in buf.chunks_mut(bs).enumerate() {
            let b = block + i as u64;
            match map.get(&b) {
                Some(src) => dst.copy_from_slice(&src[..]),
                None => {
                    let off = b as usize * bs;
                    dst.copy_from_slice(&self.base[off..off + bs]);
                }
            }
        }
        Ok(())
    }

    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        let count = req.bufs.len() as u64;
        if req.block.checked_add(count).is_none_or(|e| e > self.num_blocks) {
            return Err(DevError::OutOfRange { block: req.block, count, num_blocks: self.num_blocks });
        }
        if let Some(b) = req.bufs.iter().find(|b| b.len() != self.block_size) {
            return Err(DevError::BadLength(b.len()));
        }
        let mut map = self.blocks.write();
        for (i, b) in req.bufs.into_iter().enumerate() {
            map.insert(req.block + i as u64, b);
        }
        Ok(IoTicket::done(Ok(())))
    }

    fn flush(&self) -> DevResult<()> {
        if !self.flush_delay.is_zero() {
            std::thread::sleep(self.flush_delay);
        }
        Ok(())
    }

    fn barrier(&self) -> DevResult<()> {
        Ok(())
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
}
