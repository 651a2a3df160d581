//! POSIX details as the kernel's ext4 answers them: explicit times on append-only files,
//! extended attribute namespaces ext4 has no handler for and `trusted.` names hidden from
//! unprivileged callers, a write crossing the largest file size, names over 255 bytes,
//! RENAME_EXCHANGE's change times, RENAME_WHITEOUT's whiteout, removals refused by the protection flags before
//! emptiness is looked at, and fallocate's times.

mod common;

use std::process::Command;

use cjfs_fs::ondisk::inode::{EXT4_APPEND_FL, EXT4_IMMUTABLE_FL};
use cjfs_fs::{FallocMode, FileType, FsError, ROOT_INO, RenameFlags, SetAttr, Timestamp, XattrFlags};
use common::*;

/// A time long past, to see whether an operation moves a time at all.
const OLD: Timestamp = Timestamp::new(1_000_000_000, 0);

/// Set mtime and ctime of `ino` to [`OLD`].
fn age(fs: &cjfs_fs::Fs, ino: cjfs_fs::Ino) {
    let set = SetAttr { mtime: Some(OLD), ctime: Some(OLD), times_set: true, ..SetAttr::default() };
    fs.setattr(ino, &set).expect("set old times");
}

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

#[test]
fn a_write_crossing_the_largest_file_size_is_short() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "m.img", 64);
    let fs = mount(dev);
    let max = ((1u64 << 32) - 1) * fs.geometry().block_size as u64;
    let f = fs.create(ROOT_INO, b"big", 0o644, 0, 0).expect("create");
    assert_eq!(fs.write(f.ino, max - 1, b"zz").expect("write across the limit"), 1);
    assert_eq!(fs.getattr(f.ino).expect("getattr").size, max);
    for off in [max, max + 10] {
        let r = fs.write(f.ino, off, b"z");
        assert!(matches!(r, Err(FsError::TooBig(_))), "write at {off}: {r:?}");
    }
    let mut b = [0u8; 4];
    assert_eq!(fs.read(f.ino, max - 2, &mut b).expect("read"), 2);
    assert_eq!(&b[..2], b"\0z");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

#[test]
fn names_longer_than_255_bytes_are_too_long_not_missing() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_path, dev) = fresh_image(dir.path(), "n.img", 64);
    let fs = mount(dev);
    let long = [b'n'; 256];
    fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    let too_long = |r: Result<(), FsError>, what: &str| {
        assert!(matches!(r, Err(FsError::NameTooLong(_))), "{what}: {r:?}");
    };
    too_long(fs.lookup(ROOT_INO, &long).map(drop), "lookup");
    too_long(fs.unlink(ROOT_INO, &long), "unlink");
    too_long(fs.rmdir(ROOT_INO, &long), "rmdir");
    too_long(fs.rename(ROOT_INO, &long, ROOT_INO, b"g", RenameFlags::default()), "rename from");
    too_long(fs.rename(ROOT_INO, b"f", ROOT_INO, &long, RenameFlags::default()), "rename to");
    let r = fs.lookup(ROOT_INO, &long[..255]);
    assert!(matches!(r, Err(FsError::NotFound(_))), "255 bytes: {r:?}");
    fs.unmount().expect("unmount");
}

#[test]
fn rename_exchange_stamps_the_ctime_of_both_inodes() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "r.img", 64);
    let fs = mount(dev);
    let sub = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir");
    fs.create(ROOT_INO, b"a", 0o644, 0, 0).expect("create");
    fs.create(sub.ino, b"b", 0o644, 0, 0).expect("create");
    for (p1, n1, p2, n2) in [(ROOT_INO, &b"a"[..], sub.ino, &b"b"[..]), (ROOT_INO, b"a", ROOT_INO, b"c")] {
        if n2 == b"c" {
            fs.create(ROOT_INO, b"c", 0o644, 0, 0).expect("create");
        }
        let (x, y) = (fs.lookup(p1, n1).expect("lookup").ino, fs.lookup(p2, n2).expect("lookup").ino);
        age(&fs, x);
        age(&fs, y);
        fs.rename(p1, n1, p2, n2, RenameFlags { exchange: true, ..RenameFlags::default() })
            .expect("exchange");
        for ino in [x, y] {
            let at = fs.getattr(ino).expect("getattr");
            assert!(at.ctime > OLD, "inode {ino}: ctime stayed {:?}", at.ctime);
            assert_eq!(at.mtime, OLD, "inode {ino}: mtime moved");
        }
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

/// `RENAME_WHITEOUT` (overlayfs' upper layer) leaves a character device 0:0 without
/// permission bits, owned by the caller, at the old name, in the rename's transaction; the
/// moved file keeps its contents; the image stays clean for e2fsck; with an exchange it is
/// refused.
#[test]
fn rename_whiteout_leaves_a_character_device_at_the_old_name() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "w.img", 64);
    let fs = mount(dev);
    let sub = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir");
    let f = fs.create(ROOT_INO, b"a", 0o644, 0, 0).expect("create").ino;
    fs.write(f, 0, b"upper").expect("write");
    let free = fs.statfs().ffree;
    let white = RenameFlags { whiteout: true, ..RenameFlags::default() };
    {
        let _as = cjfs_fs::act_as(1000, 100);
        fs.rename(ROOT_INO, b"a", sub.ino, b"a", white).expect("rename with whiteout");
    }
    let w = fs.lookup(ROOT_INO, b"a").expect("the whiteout");
    assert_ne!(w.ino, f);
    let at = fs.getattr(w.ino).expect("getattr");
    assert_eq!((at.kind, at.perm, at.rdev, at.nlink), (FileType::CharDev, 0, 0, 1), "{at:?}");
    assert_eq!((at.uid, at.gid), (1000, 100));
    assert_eq!(fs.lookup(sub.ino, b"a").expect("moved").ino, f);
    assert_eq!(fs.statfs().ffree, free - 1);
    // Over an existing name in the same directory too; never with an exchange.
    fs.create(ROOT_INO, b"b", 0o644, 0, 0).expect("create");
    fs.create(ROOT_INO, b"c", 0o644, 0, 0).expect("create");
    fs.rename(ROOT_INO, b"b", ROOT_INO, b"c", white).expect("over a file");
    assert_eq!(fs.getattr(fs.lookup(ROOT_INO, b"b").unwrap().ino).unwrap().kind, FileType::CharDev);
    let both = RenameFlags { exchange: true, ..white };
    assert!(matches!(fs.rename(ROOT_INO, b"b", ROOT_INO, b"c", both), Err(FsError::Invalid(_))));
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = mount(open_image(&path));
    let mut buf = [0u8; 16];
    let n = fs.read(f, 0, &mut buf).expect("read");
    assert_eq!(&buf[..n], b"upper");
    assert_eq!(fs.getattr(fs.lookup(ROOT_INO, b"a").unwrap().ino).unwrap().kind, FileType::CharDev);
    fs.unmount().expect("unmount");
}

#[test]
fn protected_directories_refuse_removal_before_emptiness_is_checked() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "d.img", 64);
    let fs = mount(dev);
    let perm = |r: Result<(), FsError>, what: &str| {
        assert!(matches!(r, Err(FsError::Perm(_))), "{what}: {r:?}");
    };
    let p = fs.mkdir(ROOT_INO, b"p", 0o755, 0, 0).expect("mkdir");
    let c = fs.mkdir(p.ino, b"c", 0o755, 0, 0).expect("mkdir");
    fs.create(c.ino, b"x", 0o644, 0, 0).expect("create");
    fs.create(p.ino, b"file", 0o644, 0, 0).expect("create");
    fs.mkdir(ROOT_INO, b"other", 0o755, 0, 0).expect("mkdir");
    for flag in [EXT4_IMMUTABLE_FL, EXT4_APPEND_FL] {
        // The non-empty directory itself protected.
        fs.set_flags(c.ino, flag, flag).expect("chattr");
        perm(fs.rmdir(p.ino, b"c"), "rmdir of a protected non-empty directory");
        fs.set_flags(c.ino, flag, 0).expect("chattr -");
        // Its parent protected: rmdir, rmdir of a file, and rename over it.
        fs.set_flags(p.ino, flag, flag).expect("chattr");
        perm(fs.rmdir(p.ino, b"c"), "rmdir in a protected parent");
        perm(fs.rmdir(p.ino, b"file"), "rmdir of a file in a protected parent");
        perm(fs.unlink(p.ino, b"c"), "unlink of a directory in a protected parent");
        perm(fs.rename(ROOT_INO, b"other", p.ino, b"c", RenameFlags::default()), "rename over it");
        perm(
            fs.rename(ROOT_INO, b"other", p.ino, b"file", RenameFlags::default()),
            "a directory over a file",
        );
        fs.set_flags(p.ino, flag, 0).expect("chattr -");
    }
    let r = fs.rmdir(p.ino, b"c");
    assert!(matches!(r, Err(FsError::NotEmpty(_))), "unprotected: {r:?}");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

#[test]
fn fallocate_moves_mtime_and_ctime() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "f.img", 64);
    let fs = mount(dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, b"x").expect("write");
    for (mode, off) in [
        (FallocMode::Allocate, 0),
        (FallocMode::KeepSize, 1 << 20),
        (FallocMode::Allocate, 0),
        (FallocMode::PunchHole, 0),
        (FallocMode::ZeroRange { keep_size: true }, 0),
    ] {
        age(&fs, f.ino);
        fs.fallocate(f.ino, mode, off, 1 << 20).expect("fallocate");
        let a = fs.getattr(f.ino).expect("getattr");
        assert!(a.mtime > OLD && a.ctime > OLD, "{mode:?} at {off}: {:?} {:?}", a.mtime, a.ctime);
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}
