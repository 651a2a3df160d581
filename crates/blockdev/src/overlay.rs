//! [`OverlayDevice`]: a writable view of another device that never writes to it.
//!
//! Reads see the base device with every write made through the overlay applied on top;
//! writes land in an unlinked, sparse temporary file, so a dry run that writes gigabytes
//! costs disk space in the temporary directory, not memory. Flushes and barriers succeed
//! without touching the base. The command line tool runs every writing command on an
//! overlay first: a command that fails there (a corrupt structure found half-way, no space,
//! a damaged journal) is refused with the image byte-identical.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::{BlockDevice, DevError, DevResult, Device, DeviceCaps, DeviceStats, IoTicket, WriteRequest};

/// A device that reads through to `base` and keeps its own writes. See the module docs.
pub struct OverlayDevice {
    /// The device underneath (only read).
    base: Device,
    /// Holds the written blocks at their own offsets (sparse, unlinked at creation). No
    /// lock: only positional reads and writes.
    upper: File,
    /// Protected by its own mutex: the blocks written through the overlay. Held across the
    /// write to `upper`, so a reader never sees a block marked before its data is there.
    written: Mutex<HashSet<u64>>,
    /// Where `upper` was created (for messages).
    upper_path: PathBuf,
    /// Blocks written through the overlay (atomic statistics).
    blocks_written: AtomicU64,
}

/// A name for the overlay's temporary file that no other process or overlay uses.
fn temp_path() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(".cjfs-overlay-{}-{n}-{nanos}", std::process::id()))
}

impl OverlayDevice {
    /// An overlay over `base`, its writes kept in a temporary file under
    /// [`std::env::temp_dir`] (removed from the directory at once; the space is freed when
    /// the overlay is dropped).
    pub fn new(base: Device) -> DevResult<OverlayDevice> {
        let path = temp_path();
        let what = path.display().to_string();
        let upper = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| DevError::io("create overlay", &what, e))?;
        let _ = std::fs::remove_file(&path);
        Ok(OverlayDevice {
            base,
            upper,
            written: Mutex::new(HashSet::new()),
            upper_path: path,
            blocks_written: AtomicU64::new(0),
        })
    }

    /// Distinct blocks written through the overlay.
    pub fn changed_blocks(&self) -> usize {
        self.written.lock().len()
    }

    fn check_range(&self, block: u64, count: u64) -> DevResult<()> {
        let n = self.base.num_blocks();
        match block.checked_add(count) {
            Some(end) if end <= n => Ok(()),
            _ => Err(DevError::OutOfRange { block, count, num_blocks: n }),
        }
    }
}

impl BlockDevice for OverlayDevice {
    fn block_size(&self) -> usize {
        self.base.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.base.num_blocks()
    }

    fn caps(&self) -> DeviceCaps {
        self.base.caps()
    }

    fn describe(&self) -> String {
        format!("overlay over {} (writes kept in {})", self.base.describe(), self.upper_path.display())
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.block_size();
        if !buf.len().is_multiple_of(bs) {
            return Err(DevError::BadLength(buf.len()));
        }
        let count = (buf.len() / bs) as u64;
        self.check_range(block, count)?;
        let written = self.written.lock();
        if (block..block + count).all(|b| !written.contains(&b)) {
            drop(written);
            return self.base.read(block, buf);
        }
        for (i, dst) in buf.chunks_mut(bs).enumerate() {
            let b = block + i as u64;
            if written.contains(&b) {
                self.upper
                    .read_exact_at(dst, b * bs as u64)
                    .map_err(|e| DevError::io("read overlay", self.upper_path.display().to_string(), e))?;
            } else {
                self.base.read(b, dst)?;
            }
        }
        Ok(())
    }

    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        self.check_range(req.block, req.bufs.len() as u64)?;
        let bs = self.block_size();
        if let Some(b) = req.bufs.iter().find(|b| b.len() != bs) {
            return Err(DevError::BadLength(b.len()));
        }
        let mut written = self.written.lock();
        for (i, b) in req.bufs.iter().enumerate() {
            let blk = req.block + i as u64;
            self.upper
                .write_all_at(&b[..], blk * bs as u64)
                .map_err(|e| DevError::io("write overlay", self.upper_path.display().to_string(), e))?;
            written.insert(blk);
        }
        self.blocks_written.fetch_add(req.bufs.len() as u64, Ordering::Relaxed);
        Ok(IoTicket::done(Ok(())))
    }

    fn flush(&self) -> DevResult<()> {
        Ok(())
    }

    fn barrier(&self) -> DevResult<()> {
        if self.base.caps().barrier { Ok(()) } else { Err(DevError::Unsupported("barrier")) }
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
}

/// A writable view of another device that keeps its writes in memory, for a computation
/// that must see its own writes and hand them back, never touching the base: the file
/// system's recovery steps build their changes on one and commit the blocks it collected
/// ([`MemOverlay::changed`]) through the journal. Writes complete at once; flushes do
/// nothing; it reports no volatile cache (nothing is durable here, and nothing needs to be).
pub struct MemOverlay {
    base: Device,
    /// The blocks written through the overlay. Lock: itself.
    written: Mutex<std::collections::BTreeMap<u64, crate::BlockBuf>>,
}

impl MemOverlay {
    /// An overlay over `base`.
    pub fn new(base: Device) -> MemOverlay {
        MemOverlay { base, written: Mutex::new(std::collections::BTreeMap::new()) }
    }

    /// Every block written through the overlay, with its last image.
    pub fn changed(&self) -> std::collections::BTreeMap<u64, crate::BlockBuf> {
        self.written.lock().clone()
    }
}

impl BlockDevice for MemOverlay {
    fn block_size(&self) -> usize {
        self.base.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.base.num_blocks()
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps { barrier: true, volatile_cache: false, fua: true, queued_flush: false }
    }

    fn describe(&self) -> String {
        format!("memory overlay over {}", self.base.describe())
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.block_size();
        if !buf.len().is_multiple_of(bs) {
            return Err(DevError::BadLength(buf.len()));
        }
        let count = (buf.len() / bs) as u64;
        let n = self.base.num_blocks();
        if block.checked_add(count).is_none_or(|e| e > n) {
            return Err(DevError::OutOfRange { block, count, num_blocks: n });
        }
        self.base.read(block, buf)?;
        let written = self.written.lock();
        for (b, img) in written.range(block..block + count) {
            let at = ((b - block) as usize) * bs;
            buf[at..at + bs].copy_from_slice(&img[..]);
        }
        Ok(())
    }

    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        let bs = self.block_size();
        let n = self.base.num_blocks();
        let count = req.bufs.len() as u64;
        if req.block.checked_add(count).is_none_or(|e| e > n) {
            return Err(DevError::OutOfRange { block: req.block, count, num_blocks: n });
        }
        if let Some(b) = req.bufs.iter().find(|b| b.len() != bs) {
            return Err(DevError::BadLength(b.len()));
        }
        let mut written = self.written.lock();
        for (i, b) in req.bufs.into_iter().enumerate() {
            written.insert(req.block + i as u64, b);
        }
        Ok(IoTicket::done(Ok(())))
    }

    fn flush(&self) -> DevResult<()> {
        Ok(())
    }

    fn barrier(&self) -> DevResult<()> {
        Ok(())
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{FileDevice, FileDeviceOptions, WriteTag};

    const BLOCK_SIZE: usize = crate::DEFAULT_BLOCK_SIZE;

    #[test]
    fn writes_stay_in_the_overlay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        std::fs::write(&path, vec![7u8; 8 * BLOCK_SIZE]).unwrap();
        let before = std::fs::read(&path).unwrap();
        let base: Device = Arc::new(
            FileDevice::open(&path, FileDeviceOptions { read_only: true, ..Default::default() }).unwrap(),
        );
        let o = OverlayDevice::new(base).unwrap();
        o.write_block(3, Arc::new([1u8; BLOCK_SIZE]), WriteTag::default()).unwrap();
        o.flush().unwrap();
        let mut two = vec![0u8; 2 * BLOCK_SIZE];
        o.read(2, &mut two).unwrap();
        assert!(two[..BLOCK_SIZE].iter().all(|&b| b == 7));
        assert!(two[BLOCK_SIZE..].iter().all(|&b| b == 1));
        assert_eq!(o.changed_blocks(), 1);
        assert!(o.submit(WriteRequest::one(8, Arc::new([0u8; BLOCK_SIZE]), WriteTag::default())).is_err());
        drop(o);
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
}
