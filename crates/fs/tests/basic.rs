//! Basic operations on a fresh image, judged by e2fsck.

mod common;

use cjfs_fs::{FsError, ROOT_INO, RenameFlags, SetAttr};
use common::*;

#[test]
fn create_write_read_rename_unlink_fsck_clean() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "a.img", 64);
    let fs = mount(dev);
    let a = fs.create(ROOT_INO, b"a.txt", 0o644, 0, 0).expect("create");
    assert_eq!(fs.write(a.ino, 0, b"hello world").expect("write"), 11);
    let mut buf = [0u8; 32];
    let n = fs.read(a.ino, 0, &mut buf).expect("read");
    assert_eq!(&buf[..n], b"hello world");
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).expect("mkdir");
    fs.rename(ROOT_INO, b"a.txt", d.ino, b"b.txt", RenameFlags::default()).expect("rename");
    assert!(matches!(fs.lookup(ROOT_INO, b"a.txt"), Err(FsError::NotFound(_))));
    let b = fs.lookup(d.ino, b"b.txt").expect("lookup");
    assert_eq!(b.ino, a.ino);
    // A big sparse file beyond 4 GiB.
    let big = fs.create(d.ino, b"big", 0o644, 0, 0).expect("create big");
    fs.write(big.ino, 5 << 30, b"far away").expect("write far");
    let n = fs.read(big.ino, 5 << 30, &mut buf).expect("read far");
    assert_eq!(&buf[..n], b"far away");
    fs.setattr(big.ino, &SetAttr { size: Some(100), ..Default::default() }).expect("truncate");
    fs.symlink(ROOT_INO, b"ln", b"dir/b.txt", 0, 0).expect("symlink");
    let long = vec![b'x'; 200];
    let sl = fs.symlink(ROOT_INO, b"ln2", &long, 0, 0).expect("slow symlink");
    assert_eq!(fs.readlink(sl.ino).expect("readlink"), long);
    // Only regular files are read, written, truncated: a fast symlink's i_block holds its
    // target, not a map (a read once took it for an extent root and called it corrupt).
    let fast = fs.lookup(ROOT_INO, b"ln").expect("lookup fast symlink");
    for s in [&fast, &sl] {
        assert!(matches!(fs.read(s.ino, 0, &mut buf), Err(FsError::Invalid(_))), "read of a symlink");
        assert!(matches!(fs.write(s.ino, 0, b"x"), Err(FsError::Invalid(_))), "write to a symlink");
        let t = fs.setattr(s.ino, &SetAttr { size: Some(0), ..Default::default() });
        assert!(matches!(t, Err(FsError::Invalid(_))), "truncate of a symlink");
    }
    assert_eq!(fs.readlink(fast.ino).expect("readlink"), b"dir/b.txt");
    fs.link(b.ino, ROOT_INO, b"hard").expect("link");
    fs.unlink(d.ino, b"b.txt").expect("unlink");
    fs.setxattr(ROOT_INO, b"user.k", b"v", Default::default()).expect("setxattr");
    assert_eq!(fs.getxattr(ROOT_INO, b"user.k").expect("getxattr"), b"v");
    fs.fsync(b.ino, false).expect("fsync");
    let e = fs.mkdir(d.ino, b"empty", 0o755, 0, 0).expect("mkdir2");
    let _ = e;
    assert!(matches!(fs.rmdir(ROOT_INO, b"dir"), Err(FsError::NotEmpty(_))));
    fs.rmdir(d.ino, b"empty").expect("rmdir");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    // Remount and check contents survived.
    let fs = mount(open_image(&path));
    let h = fs.lookup(ROOT_INO, b"hard").expect("hard link survives");
    let n = fs.read(h.ino, 0, &mut buf).expect("read");
    assert_eq!(&buf[..n], b"hello world");
    assert_eq!(fs.getxattr(ROOT_INO, b"user.k").expect("getxattr"), b"v");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

/// The largest size is the kernel's (2^32 - 1 blocks): truncating past it or writing at it
/// is EFBIG, a write crossing it is cut short there, exactly at it is accepted, and e2fsck finds the file clean (one block more
/// was once accepted and left an inode the kernel refused to open).
#[test]
fn file_size_limit_is_the_kernels() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "limit.img", 64);
    let fs = mount(dev);
    let max = ((1u64 << 32) - 1) * 4096;
    let f = fs.create(ROOT_INO, b"edge", 0o644, 0, 0).expect("create");
    let past = fs.setattr(f.ino, &SetAttr { size: Some(max + 1), ..Default::default() });
    assert!(matches!(past, Err(FsError::TooBig(_))), "{past:?}");
    let past = fs.setattr(f.ino, &SetAttr { size: Some(1u64 << 44), ..Default::default() });
    assert!(matches!(past, Err(FsError::TooBig(_))), "{past:?}");
    assert_eq!(fs.write(f.ino, max - 1, b"zy").expect("a write across the limit"), 1);
    assert!(matches!(fs.write(f.ino, max, b"y"), Err(FsError::TooBig(_))));
    assert_eq!(fs.getattr(f.ino).expect("getattr").size, max);
    let g = fs.create(ROOT_INO, b"edge2", 0o644, 0, 0).expect("create");
    fs.setattr(g.ino, &SetAttr { size: Some(max), ..Default::default() }).expect("truncate to the limit");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}
