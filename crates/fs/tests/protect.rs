//! The immutable and append-only flags (`chattr +i`, `chattr +a`) refuse what the kernel's
//! VFS refuses, with EPERM, and the image stays clean; clearing them gives the file back.

mod common;

use cjfs_fs::ondisk::inode::{EXT4_APPEND_FL, EXT4_IMMUTABLE_FL};
use cjfs_fs::{FallocMode, FsError, ROOT_INO, RenameFlags, SetAttr, XattrFlags};
use common::*;

fn perm<T: std::fmt::Debug>(r: Result<T, FsError>, what: &str) {
    assert!(matches!(r, Err(FsError::Perm(_))), "{what}: {r:?}");
}

#[test]
fn immutable_and_append_only_refuse_what_ext4_refuses() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "p.img", 64);
    let fs = mount(dev);
    let sub = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir");
    let i = fs.create(ROOT_INO, b"imm", 0o644, 0, 0).expect("create");
    fs.write(i.ino, 0, b"fixed").expect("write");
    let a = fs.create(ROOT_INO, b"log", 0o644, 0, 0).expect("create");
    fs.write(a.ino, 0, b"one\n").expect("write");
    fs.set_flags(i.ino, EXT4_IMMUTABLE_FL, EXT4_IMMUTABLE_FL).expect("chattr +i");
    fs.set_flags(a.ino, EXT4_APPEND_FL, EXT4_APPEND_FL).expect("chattr +a");
    assert_ne!(fs.getattr(i.ino).expect("getattr").flags & EXT4_IMMUTABLE_FL, 0);

    // Immutable: no data, size, mode, times, xattr, link, unlink or rename change.
    perm(fs.write(i.ino, 0, b"X"), "write");
    perm(fs.write(i.ino, 5, b"X"), "append");
    perm(fs.setattr(i.ino, &SetAttr { size: Some(0), ..Default::default() }), "truncate");
    perm(fs.setattr(i.ino, &SetAttr { mode: Some(0o600), ..Default::default() }), "chmod");
    perm(fs.setattr(i.ino, &SetAttr { uid: Some(7), ..Default::default() }), "chown");
    let t = cjfs_fs::Timestamp { sec: 5, nsec: 0 };
    perm(fs.setattr(i.ino, &SetAttr { mtime: Some(t), ..Default::default() }), "utimes");
    perm(fs.fallocate(i.ino, FallocMode::KeepSize, 0, 4096), "fallocate");
    perm(fs.setxattr(i.ino, b"user.k", b"v", XattrFlags::Any), "setxattr");
    perm(fs.removexattr(i.ino, b"user.k"), "removexattr");
    perm(fs.link(i.ino, sub.ino, b"l"), "link");
    perm(fs.unlink(ROOT_INO, b"imm"), "unlink");
    perm(fs.rename(ROOT_INO, b"imm", sub.ino, b"m", RenameFlags::default()), "rename");
    fs.create(sub.ino, b"victim", 0o644, 0, 0).expect("create");
    perm(fs.rename(sub.ino, b"victim", ROOT_INO, b"imm", RenameFlags::default()), "rename over");
    let mut buf = [0u8; 16];
    let n = fs.read(i.ino, 0, &mut buf).expect("read");
    assert_eq!(&buf[..n], b"fixed");

    // Append-only: bytes past the end only; no truncate, punch, unlink, rename or xattr.
    assert_eq!(fs.write(a.ino, 4, b"two\n").expect("append"), 4);
    perm(fs.write(a.ino, 0, b"ONE"), "overwrite");
    perm(fs.write(a.ino, 0, &[b'x'; 100]), "an overwrite that also extends");
    assert_eq!(fs.write_keep_times(a.ino, 4, b"two\nthree\n").expect("writeback of a page"), 10);
    perm(fs.setattr(a.ino, &SetAttr { size: Some(2), ..Default::default() }), "truncate");
    perm(fs.fallocate(a.ino, FallocMode::PunchHole, 0, 4096), "punch");
    fs.fallocate(a.ino, FallocMode::KeepSize, 0, 8192).expect("plain fallocate passes");
    perm(fs.unlink(ROOT_INO, b"log"), "unlink");
    perm(fs.setxattr(a.ino, b"user.k", b"v", XattrFlags::Any), "setxattr");
    perm(fs.setattr(a.ino, &SetAttr { mode: Some(0o600), ..Default::default() }), "chmod");
    // A write by an unprivileged caller clears set-user-ID even here (ATTR_KILL_SUID).
    fs.kill_set_id(a.ino, 0o644).expect("clearing set-user-ID on an append-only file");

    // Directories: an immutable one takes no entry; an append-only one takes but keeps them.
    fs.set_flags(sub.ino, EXT4_APPEND_FL, EXT4_APPEND_FL).expect("chattr +a dir");
    fs.create(sub.ino, b"new", 0o644, 0, 0).expect("create in an append-only directory");
    perm(fs.unlink(sub.ino, b"new"), "unlink in an append-only directory");
    fs.set_flags(sub.ino, EXT4_APPEND_FL | EXT4_IMMUTABLE_FL, EXT4_IMMUTABLE_FL).expect("chattr -a +i dir");
    perm(fs.create(sub.ino, b"new2", 0o644, 0, 0), "create in an immutable directory");
    perm(fs.mkdir(sub.ino, b"dd", 0o755, 0, 0), "mkdir in an immutable directory");
    perm(fs.symlink(sub.ino, b"s", b"x", 0, 0), "symlink in an immutable directory");
    perm(fs.rename(sub.ino, b"new", ROOT_INO, b"out", RenameFlags::default()), "rename out");
    fs.mkdir(ROOT_INO, b"other", 0o755, 0, 0).expect("mkdir");
    perm(fs.rename(ROOT_INO, b"other", sub.ino, b"x", RenameFlags::default()), "rename into");

    // Cleared, everything works again.
    fs.set_flags(sub.ino, EXT4_IMMUTABLE_FL, 0).expect("chattr -i dir");
    fs.set_flags(i.ino, EXT4_IMMUTABLE_FL, 0).expect("chattr -i");
    fs.set_flags(a.ino, EXT4_APPEND_FL, 0).expect("chattr -a");
    fs.write(i.ino, 0, b"F").expect("write");
    fs.unlink(ROOT_INO, b"log").expect("unlink");
    fs.unlink(sub.ino, b"new").expect("unlink");
    assert!(matches!(fs.set_flags(i.ino, 0x4, 0x4), Err(FsError::NotSupported(_))), "chattr +c is refused");
    fs.set_flags(i.ino, EXT4_IMMUTABLE_FL, EXT4_IMMUTABLE_FL).expect("chattr +i");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    // The flag is on disk.
    let fs = mount(open_image(&path));
    let i = fs.lookup(ROOT_INO, b"imm").expect("lookup");
    assert_ne!(i.flags & EXT4_IMMUTABLE_FL, 0);
    perm(fs.write(i.ino, 0, b"X"), "write after remount");
    fs.unmount().expect("unmount");
}
