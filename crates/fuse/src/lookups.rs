//! Inode lifetime under the FUSE lookup/forget protocol.
//!
//! The kernel counts every reply that hands it an inode (lookup, create, mknod, mkdir,
//! symlink, link, each readdirplus entry except `.` and `..`) and later returns those
//! references with `forget(ino, n)`. While the kernel holds any, it may send requests for the
//! inode (open, getattr, setattr, ...) even after the inode's last name is gone, so the
//! library must not free it: the table keeps one library open ([`Fs::open_file`]) per inode
//! the kernel knows (count 0 → 1) and releases it ([`Fs::release`]) when the count returns to
//! 0. An inode unlinked while known to the kernel therefore stays on the on-disk orphan list
//! until its last forget (or its last file handle, whichever comes later), exactly like
//! ext4 under the VFS.
//!
//! Lock order: a shard's mutex is taken before the library's inode lock (inside
//! `open_file`); nothing here is called with a library lock held, so there is no cycle. The
//! release on the 1 → 0 transition happens after the shard lock is dropped (it may free the
//! inode's blocks); `open_file`/`release` are counters, so a concurrent 0 → 1 acquire in
//! between is balanced whatever the order.

use std::collections::HashMap;

use cjfs_fs::{Attr, Fs, FsError, FsResult, Ino, ROOT_INO};
use parking_lot::Mutex;

const SHARDS: usize = 64;

/// Per-inode kernel lookup counts, sharded by inode number.
pub(crate) struct LookupTable {
    /// Lock: each shard its own mutex (before any library lock).
    shards: Vec<Mutex<HashMap<Ino, u64>>>,
}

impl LookupTable {
    /// An empty table.
    pub fn new() -> Self {
        LookupTable { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn shard(&self, ino: Ino) -> &Mutex<HashMap<Ino, u64>> {
        &self.shards[ino as usize % SHARDS]
    }

    /// Count one kernel reference to the inode `attr` describes (just returned by a lookup
    /// or a create). On the first reference the inode is opened in the library; if it was
    /// freed (and maybe reused) since `attr` was read, fails with `NotFound` or `Stale` and
    /// counts nothing, and the caller looks the name up again.
    pub fn acquire(&self, fs: &Fs, attr: Attr) -> FsResult<Attr> {
        let ino = attr.ino;
        if ino == ROOT_INO {
            return Ok(attr);
        }
        let mut shard = self.shard(ino).lock();
        if let Some(n) = shard.get_mut(&ino) {
            // Already held open: it cannot have been freed or reused since `attr` was read.
            *n += 1;
            return Ok(attr);
        }
        let fresh = fs.open_file(ino)?;
        if fresh.generation != attr.generation || fresh.kind != attr.kind {
            drop(shard);
            let _ = fs.release(ino);
            return Err(FsError::Stale(ino));
        }
        shard.insert(ino, 1);
        Ok(fresh)
    }

    /// Give back `n` kernel references; the last one releases the library open.
    pub fn forget(&self, fs: &Fs, ino: Ino, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let last = {
            let mut shard = self.shard(ino).lock();
            match shard.get_mut(&ino) {
                Some(c) if *c > n => {
                    *c -= n;
                    false
                }
                Some(_) => {
                    shard.remove(&ino);
                    true
                }
                None => {
                    log::warn!("forget of inode {ino}, which the kernel was never given");
                    false
                }
            }
        };
        if last && let Err(e) = fs.release(ino) {
            log::error!("releasing inode {ino} after its last forget: {e}");
        }
    }

    /// Kernel references held on `ino` (0 if none).
    #[cfg(test)]
    pub fn count(&self, ino: Ino) -> u64 {
        self.shard(ino).lock().get(&ino).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
    use cjfs_fs::{MkfsOptions, MountOptions, mkfs};

    use super::*;

    fn fresh_fs(dir: &tempfile::TempDir) -> Fs {
        let path = dir.path().join("a.img");
        let dev: Device = Arc::new(
            FileDevice::open(&path, FileDeviceOptions { create_size: Some(64 << 20), ..Default::default() })
                .unwrap(),
        );
        mkfs(&*dev, &MkfsOptions { assume_zeroed: true, ..Default::default() }).unwrap();
        Fs::open(dev, MountOptions::default()).unwrap()
    }

    #[test]
    fn unlinked_inode_lives_until_last_forget() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fresh_fs(&dir);
        let t = LookupTable::new();
        let a = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        let a = t.acquire(&fs, a).unwrap();
        t.acquire(&fs, fs.lookup(ROOT_INO, b"f").unwrap()).unwrap();
        assert_eq!(t.count(a.ino), 2);
        fs.write(a.ino, 0, b"still here").unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        // The kernel still holds the inode: it is usable.
        let mut buf = [0u8; 10];
        assert_eq!(fs.read(a.ino, 0, &mut buf).unwrap(), 10);
        t.forget(&fs, a.ino, 1);
        assert!(fs.getattr(a.ino).is_ok());
        t.forget(&fs, a.ino, 1);
        assert_eq!(t.count(a.ino), 0);
        assert!(fs.getattr(a.ino).is_err(), "freed after the last forget");
        fs.unmount().unwrap();
    }

    #[test]
    fn stale_attr_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fresh_fs(&dir);
        let t = LookupTable::new();
        let a = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        let e = t.acquire(&fs, a.clone()).unwrap_err();
        assert!(matches!(e, FsError::NotFound(_) | FsError::Stale(_)), "{e}");
        assert_eq!(t.count(a.ino), 0);
        fs.unmount().unwrap();
    }
}
