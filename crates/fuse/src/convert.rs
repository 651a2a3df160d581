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
        blksize: a.blksize,
        flags: 0,
    }
}

/// The kernel's timestamp from a time fuser passed with a request (setattr's atime, mtime
/// and ctime).
///
/// The kernel sends `(secs, nsec)` meaning `secs + nsec / 10^9` (ext4's encoding too:
/// -1.5 s is secs = -2, nsec = 500_000_000). fuser 0.18 turns a negative `secs` into
/// `UNIX_EPOCH - (|secs| s + nsec ns)`, subtracting the nanoseconds instead of adding them,
/// so its `SystemTime` is that much further back than the kernel meant; the pair is
/// recovered from the distance to the epoch as fuser built it. (The dependency is pinned
/// to that fuser release; a negative `secs` is at least one second, so no other time lands
/// in that arm.)
pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => Timestamp::new(d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            Timestamp::new(-(d.as_secs() as i64), d.subsec_nanos())
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

    /// What fuser 0.18 hands `setattr` for the kernel's `(secs, nsec)`
    /// (`fuser::time::system_time_from_time`, private to fuser).
    fn fuser_request_time(secs: i64, nsec: u32) -> SystemTime {
        if secs >= 0 {
            SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nsec)
        } else {
            SystemTime::UNIX_EPOCH - Duration::new(secs.unsigned_abs(), nsec)
        }
    }

    #[test]
    fn request_times_keep_the_kernels_seconds_and_nanoseconds() {
        for (secs, nsec) in [
            // after the epoch, with and without nanoseconds
            (1_700_000_000, 123_456_789),
            (10, 5),
            (0, 0),
            (0, 999_999_999),
            (5_000_000_000, 1),
            // before it: -1.5 s is (-2, 500_000_000), -0.25 s is (-1, 750_000_000)
            (-2, 500_000_000),
            (-1, 750_000_000),
            (-1, 1),
            (-5, 250_000_000),
            (-1_000_000_000, 999_999_999),
            // exact seconds
            (-1, 0),
            (-7, 0),
            (-(1 << 31), 0),
        ] {
            assert_eq!(
                timestamp(fuser_request_time(secs, nsec)),
                Timestamp::new(secs, nsec),
                "{secs} {nsec}"
            );
        }
    }

    #[test]
    fn attributes_carry_the_true_time() {
        // -1.5 s as the kernel and ext4 encode it is 1.5 s before the epoch.
        let t = to_system_time(Timestamp::new(-2, 500_000_000));
        assert_eq!(SystemTime::UNIX_EPOCH.duration_since(t).unwrap(), Duration::from_millis(1500));
        let t = to_system_time(Timestamp::new(-7, 0));
        assert_eq!(SystemTime::UNIX_EPOCH.duration_since(t).unwrap(), Duration::from_secs(7));
        let t = to_system_time(Timestamp::new(10, 5));
        assert_eq!(t.duration_since(SystemTime::UNIX_EPOCH).unwrap(), Duration::new(10, 5));
    }
}
