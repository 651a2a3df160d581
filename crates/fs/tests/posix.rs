//! POSIX details as the kernel's ext4 answers them: explicit times on append-only files,
//! extended attribute namespaces ext4 has no handler for and `trusted.` names hidden from
//! unprivileged callers.

mod common;

use std::process::Command;

use cjfs_fs::ondisk::inode::{EXT4_APPEND_FL, EXT4_IMMUTABLE_FL};
use cjfs_fs::{FsError, ROOT_INO, SetAttr, Timestamp, XattrFlags};
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

#[test]
fn system_names_other_than_acls_are_not_supported_nor_listed() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "x.img", 64);
    let fs = mount(dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 1000, 1000).expect("create");
    fs.setxattr(f.ino, b"user.u", b"1", XattrFlags::Any).expect("user xattr");
    for name in [&b"system.foo"[..], b"system.data", b"system.richacl", b"other.x"] {
        let what = String::from_utf8_lossy(name);
        let r = fs.setxattr(f.ino, name, b"v", XattrFlags::Any);
        assert!(matches!(r, Err(FsError::NotSupported(_))), "setxattr {what}: {r:?}");
        let r = fs.getxattr(f.ino, name);
        assert!(matches!(r, Err(FsError::NotSupported(_))), "getxattr {what}: {r:?}");
        let r = fs.removexattr(f.ino, name);
        assert!(matches!(r, Err(FsError::NotSupported(_))), "removexattr {what}: {r:?}");
    }
    assert_eq!(fs.listxattr(f.ino).expect("list"), vec![b"user.u".to_vec()]);
    fs.unmount().expect("unmount");
    // A system.* name already on disk (debugfs puts it there as ext4's index 7) is kept
    // but neither listed nor read, as the kernel shows it.
    let Some(debugfs) = which("debugfs") else {
        eprintln!("SKIP the on-disk part: debugfs not installed");
        return;
    };
    let out = Command::new(&debugfs)
        .args(["-w", "-R", "ea_set /f system.data hidden"])
        .arg(&path)
        .output()
        .expect("debugfs");
    assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    let fs = mount(open_image(&path));
    assert_eq!(fs.listxattr(f.ino).expect("list"), vec![b"user.u".to_vec()]);
    let r = fs.getxattr(f.ino, b"system.data");
    assert!(matches!(r, Err(FsError::NotSupported(_))), "getxattr system.data on disk: {r:?}");
    fs.setxattr(f.ino, b"user.v", b"2", XattrFlags::Any).expect("another user xattr");
    fs.unmount().expect("unmount");
    let out = Command::new(&debugfs).args(["-R", "ea_list /f"]).arg(&path).output().expect("debugfs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("system.data") && text.contains("user.v"), "kept on disk: {text}");
    assert_fsck_clean(&path);
}

#[test]
fn trusted_names_are_listed_to_privileged_callers_only() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_path, dev) = fresh_image(dir.path(), "t.img", 64);
    let fs = mount(dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    fs.setxattr(f.ino, b"trusted.secret", b"1", XattrFlags::Any).expect("trusted xattr");
    fs.setxattr(f.ino, b"user.u", b"1", XattrFlags::Any).expect("user xattr");
    let mut all = fs.listxattr_as(f.ino, true).expect("list as root");
    all.sort();
    assert_eq!(all, vec![b"trusted.secret".to_vec(), b"user.u".to_vec()]);
    assert_eq!(fs.listxattr_as(f.ino, false).expect("list as a user"), vec![b"user.u".to_vec()]);
    fs.unmount().expect("unmount");
}
