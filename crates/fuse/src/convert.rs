//! Conversions between the library's types and the FUSE protocol's: inode numbers (FUSE's
//! root is 1, ext4's is 2), attributes, times, errors.

use std::time::SystemTime;

use cjfs_fs::{Attr, FileType, FsError, Ino, ROOT_INO, Timestamp, to_system_time};
use fuser::{Errno, FileAttr, INodeNo, TimeOrNow};

/// The FUSE node id of ext4 inode `ino`.
pub(crate) fn fuse_ino(ino: Ino) -> INodeNo {
    if ino == ROOT_INO { INodeNo::ROOT } else { INodeNo(u64::from(ino)) }
}

/// The ext4 inode of FUSE node id `n`. Node 2 (ext4's root number) and ids beyond 32 bits
/// are never handed out, so the kernel cannot send them.
pub(crate) fn ext4_ino(n: INodeNo) -> Result<Ino, Errno> {
    match n.0 {
        1 => Ok(ROOT_INO),
        2 => Err(Errno::ESTALE),
        x => Ino::try_from(x).map_err(|_| Errno::ESTALE),
    }
}

/// The errno for a library error.
pub(crate) fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn kind(k: FileType) -> fuser::FileType {
    match k {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::CharDev => fuser::FileType::CharDevice,
        FileType::BlockDev => fuser::FileType::BlockDevice,
        FileType::Socket => fuser::FileType::Socket,
    }
}

/// A directory entry's type for readdir.
pub(crate) fn entry_kind(k: FileType) -> fuser::FileType {
    kind(k)
}

/// FUSE attributes of an inode.
pub(crate) fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: fuse_ino(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.crtime),
        kind: kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: cjfs_blockdev::BLOCK_SIZE as u32,
        flags: 0,
    }
}

/// A timestamp from a `SystemTime`.
pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => Timestamp::new(d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            // Negative times: floor to the second below, nanoseconds counted upwards.
            if d.subsec_nanos() == 0 {
                Timestamp::new(-(d.as_secs() as i64), 0)
            } else {
                Timestamp::new(-(d.as_secs() as i64) - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    }
}

/// A timestamp from a setattr time.
pub(crate) fn time_or_now(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::SpecificTime(t) => timestamp(t),
        TimeOrNow::Now => Timestamp::now(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn root_maps_both_ways() {
        assert_eq!(fuse_ino(ROOT_INO), INodeNo::ROOT);
        assert_eq!(ext4_ino(INodeNo::ROOT), Ok(ROOT_INO));
        assert_eq!(ext4_ino(fuse_ino(12)), Ok(12));
        assert_eq!(ext4_ino(INodeNo(2)), Err(Errno::ESTALE));
        assert_eq!(ext4_ino(INodeNo(1 << 40)), Err(Errno::ESTALE));
    }

    #[test]
    fn timestamps_round_trip() {
        for t in [Timestamp::new(1_700_000_000, 123), Timestamp::new(-5, 250_000_000), Timestamp::new(-7, 0)]
        {
            assert_eq!(timestamp(to_system_time(t)), t);
        }
        let t = SystemTime::UNIX_EPOCH + Duration::new(10, 5);
        assert_eq!(timestamp(t), Timestamp::new(10, 5));
    }
}
