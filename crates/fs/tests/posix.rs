//! POSIX details as the kernel's ext4 answers them: explicit times on append-only files.

mod common;

use cjfs_fs::ondisk::inode::{EXT4_APPEND_FL, EXT4_IMMUTABLE_FL};
use cjfs_fs::{FsError, ROOT_INO, SetAttr, Timestamp};
use common::*;

#[test]
fn append_only_refuses_explicit_times_and_immutable_any_setattr() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "p.img", 64);
    let fs = mount(dev);
    let a = fs.create(ROOT_INO, b"log", 0o644, 0, 0).expect("create");
    let i = fs.create(ROOT_INO, b"imm", 0o644, 0, 0).expect("create");
    fs.set_flags(a.ino, EXT4_APPEND_FL, EXT4_APPEND_FL).expect("chattr +a");
    fs.set_flags(i.ino, EXT4_IMMUTABLE_FL, EXT4_IMMUTABLE_FL).expect("chattr +i");
    let t = Timestamp::new(978_307_200, 0);
    for set in [
        SetAttr { mtime: Some(t), times_set: true, ..SetAttr::default() },
        SetAttr { atime: Some(t), times_set: true, ..SetAttr::default() },
        SetAttr { atime: Some(t), mtime: Some(t), times_set: true, ..SetAttr::default() },
    ] {
        let r = fs.setattr(a.ino, &set);
        assert!(matches!(r, Err(FsError::Perm(_))), "explicit times on an append-only file: {r:?}");
    }
    assert_ne!(fs.getattr(a.ino).expect("getattr").mtime, t);
    // Times set to now (`touch` without a date) and a change of ctime alone pass.
    let now = Timestamp::now();
    let set = SetAttr { atime: Some(now), mtime: Some(now), ..SetAttr::default() };
    assert_eq!(fs.setattr(a.ino, &set).expect("touch an append-only file").mtime, now);
    fs.setattr(a.ino, &SetAttr { ctime: Some(now), ..SetAttr::default() }).expect("ctime only");
    // ext4_setattr refuses every change of an immutable inode, a ctime alone included.
    let r = fs.setattr(i.ino, &SetAttr { ctime: Some(now), ..SetAttr::default() });
    assert!(matches!(r, Err(FsError::Perm(_))), "ctime of an immutable file: {r:?}");
    fs.set_flags(a.ino, EXT4_APPEND_FL, 0).expect("chattr -a");
    let set = SetAttr { atime: Some(t), mtime: Some(t), times_set: true, ..SetAttr::default() };
    assert_eq!(fs.setattr(a.ino, &set).expect("explicit times once cleared").mtime, t);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}
