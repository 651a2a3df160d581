//! Images whose inodes have no room for the extra fields: `mke2fs -I 128` file systems (no
//! in-inode xattr area, no `_extra` time words, no `i_crtime`). Extended attributes must go
//! to an external xattr block (counted in `i_blocks`, freed with the last attribute and
//! with the inode), times must clamp to the 32-bit range and lose their nanoseconds as the
//! kernel stores them, and what stat shows must be what a remount (and the kernel) reads.
//! Every test prints a message and passes when a tool it needs (mke2fs, e2fsck, root for a
//! loop mount) is missing.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{Fs, FsError, Ino, MountOptions, ROOT_INO, SetAttr, Timestamp, XattrFlags};
use common::{assert_fsck_clean, which};

/// Earliest and latest seconds a timestamp without its `_extra` field holds.
const S32_MIN: i64 = i32::MIN as i64;
const S32_MAX: i64 = i32::MAX as i64;

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cjfs-small-inodes")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tmpdir")
}

/// `mkfs.ext4 -I <isize> -b 4096 -O ^metadata_csum img 128M`; `None` (after saying why)
/// when mke2fs is missing.
fn mke2fs(img: &Path, inode_size: u32) -> Option<()> {
    let Some(mke2fs) = which("mke2fs") else {
        println!("SKIP: mke2fs not installed");
        return None;
    };
    let out = Command::new(mke2fs)
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-I", &inode_size.to_string(), "-O", "^metadata_csum"])
        .arg(img)
        .arg("128M")
        .output()
        .expect("run mke2fs");
    assert!(
        out.status.success(),
        "mke2fs -I {inode_size} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

fn open(img: &Path) -> Device {
    Arc::new(FileDevice::open(img, FileDeviceOptions::default()).expect("open image"))
}

fn mount(img: &Path) -> Fs {
    Fs::open(open(img), MountOptions::default()).expect("mount mke2fs image")
}

/// 512-byte sectors of one 4 KiB block.
const BLOCK_SECTORS: u64 = 8;

fn xattrs(fs: &Fs, ino: Ino) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut names = fs.listxattr(ino).expect("listxattr");
    names.sort();
    names.into_iter().map(|n| (n.clone(), fs.getxattr(ino, &n).expect("getxattr"))).collect()
}

#[test]
fn xattrs_live_in_a_block_on_128_byte_inodes() {
    let tmp = tmpdir();
    let img = tmp.path().join("i128.img");
    if mke2fs(&img, 128).is_none() {
        return;
    }
    assert_eq!(mount(&img).superblock().inode_size(), 128);
    let fs = mount(&img);
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).expect("create a");
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).expect("create b");
    let gone = fs.create(ROOT_INO, b"gone", 0o644, 0, 0).expect("create gone");
    fs.write(a.ino, 0, b"data of a").expect("write");
    let with_data = fs.getattr(a.ino).expect("getattr").blocks;

    fs.setxattr(a.ino, b"user.small", b"tiny", XattrFlags::Create).expect("setxattr on a 128-byte inode");
    assert_eq!(fs.getxattr(a.ino, b"user.small").expect("getxattr"), b"tiny");
    assert_eq!(
        fs.getattr(a.ino).expect("getattr").blocks,
        with_data + BLOCK_SECTORS,
        "xattr block in i_blocks"
    );
    fs.setxattr(a.ino, b"user.large", &[b'L'; 1500], XattrFlags::Create).expect("second xattr");
    fs.setxattr(a.ino, b"trusted.t", b"", XattrFlags::Create).expect("empty value");
    fs.setxattr(a.ino, b"user.small", b"replaced", XattrFlags::Replace).expect("replace");
    assert_eq!(fs.getattr(a.ino).expect("getattr").blocks, with_data + BLOCK_SECTORS, "still one block");
    // More than a block holds is ENOSPC, and leaves the attributes as they were.
    let before = xattrs(&fs, a.ino);
    assert!(matches!(
        fs.setxattr(a.ino, b"user.huge", &[b'H'; 3000], XattrFlags::Create),
        Err(FsError::NoSpace(_))
    ));
    assert_eq!(xattrs(&fs, a.ino), before);

    // The last attribute removed frees the block.
    fs.setxattr(b.ino, b"user.only", b"1", XattrFlags::Create).expect("setxattr b");
    assert_eq!(fs.getattr(b.ino).expect("getattr").blocks, BLOCK_SECTORS);
    fs.removexattr(b.ino, b"user.only").expect("removexattr");
    assert_eq!(fs.getattr(b.ino).expect("getattr").blocks, 0);
    assert!(matches!(fs.getxattr(b.ino, b"user.only"), Err(FsError::NoAttr(_))));
    // Deleting an inode frees its xattr block.
    fs.setxattr(gone.ino, b"user.doomed", &[7; 100], XattrFlags::Create).expect("setxattr gone");
    let free_before = fs.statfs().bfree;
    fs.unlink(ROOT_INO, b"gone").expect("unlink");
    fs.sync().expect("sync");
    assert_eq!(fs.statfs().bfree, free_before + 1, "the deleted inode's xattr block is free again");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);

    let fs = mount(&img);
    let a2 = fs.resolve("/a").expect("a");
    assert_eq!(xattrs(&fs, a2), before);
    assert_eq!(fs.getattr(a2).expect("getattr").blocks, with_data + BLOCK_SECTORS);
    assert!(fs.listxattr(fs.resolve("/b").expect("b")).expect("listxattr").is_empty());
    fs.unmount().expect("unmount");
}

/// Times set through the library, what stat must show for them on a 128-byte inode.
fn time_cases() -> Vec<(Timestamp, Timestamp)> {
    let t = Timestamp::new;
    vec![
        (t(5_000_000_000, 123_456_789), t(S32_MAX, 0)),
        (t(-5_000_000_000, 5), t(S32_MIN, 0)),
        (t(1 << 31, 0), t(S32_MAX, 0)),
        (t(S32_MAX, 999_999_999), t(S32_MAX, 0)),
        (t(-1, 500_000_000), t(-1, 0)),
        (t(1_700_000_000, 42), t(1_700_000_000, 0)),
    ]
}

#[test]
fn times_clamp_and_lose_nanoseconds_on_128_byte_inodes() {
    let tmp = tmpdir();
    let img = tmp.path().join("i128.img");
    if mke2fs(&img, 128).is_none() {
        return;
    }
    let fs = mount(&img);
    let mut want = Vec::new();
    for (i, (set, shown)) in time_cases().into_iter().enumerate() {
        let f = fs.create(ROOT_INO, format!("t{i}").as_bytes(), 0o644, 0, 0).expect("create");
        assert_eq!(f.mtime.nsec, 0, "a new 128-byte inode keeps no nanoseconds");
        assert_eq!(f.crtime, Timestamp::default(), "a 128-byte inode has no i_crtime");
        let a = fs
            .setattr(
                f.ino,
                &SetAttr { atime: Some(set), mtime: Some(set), ctime: Some(set), ..Default::default() },
            )
            .expect("setattr");
        assert_eq!((a.atime, a.mtime, a.ctime), (shown, shown, shown), "set {set:?}");
        assert_eq!(fs.getattr(f.ino).expect("getattr").mtime, shown);
        want.push((f.ino, shown));
    }
    // A write's times are whole seconds too.
    let w = fs.create(ROOT_INO, b"written", 0o644, 0, 0).expect("create");
    let a = fs.getattr(w.ino).expect("getattr");
    fs.write(w.ino, 0, b"x").expect("write");
    let aw = fs.getattr(w.ino).expect("getattr");
    assert_eq!((aw.mtime.nsec, aw.ctime.nsec), (0, 0));
    want.push((w.ino, aw.mtime));
    assert!(aw.mtime >= a.mtime);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);

    let fs = mount(&img);
    for (ino, shown) in want {
        let a = fs.getattr(ino).expect("getattr");
        assert_eq!((a.mtime, a.ctime), (shown, shown), "inode {ino} after a remount");
    }
    fs.unmount().expect("unmount");
}

/// Run debugfs -w with one command; `None` when debugfs is missing.
fn debugfs_w(img: &Path, req: &str) -> Option<()> {
    let Some(debugfs) = which("debugfs") else {
        println!("SKIP: debugfs not installed");
        return None;
    };
    let out = Command::new(debugfs).arg("-w").arg("-R").arg(req).arg(img).output().expect("run debugfs");
    assert!(out.status.success(), "debugfs {req}: {}", String::from_utf8_lossy(&out.stderr));
    Some(())
}

#[test]
fn small_extra_isize_keeps_only_the_fields_it_covers() {
    let tmp = tmpdir();
    let img = tmp.path().join("i256.img");
    if mke2fs(&img, 256).is_none() {
        return;
    }
    let fs = mount(&img);
    for name in ["x8", "x12", "x16", "x20"] {
        fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).expect("create");
    }
    fs.unmount().expect("unmount");
    for (name, isize) in [("x8", 8), ("x12", 12), ("x16", 16), ("x20", 20)] {
        if debugfs_w(&img, &format!("sif /{name} extra_isize {isize}")).is_none() {
            return;
        }
    }
    let fs = mount(&img);
    let far = Timestamp::new(5_000_000_000, 123_456_789);
    let set = SetAttr { atime: Some(far), mtime: Some(far), ctime: Some(far), ..Default::default() };
    let clamped = Timestamp::new(S32_MAX, 0);
    let mut shown = Vec::new();
    for name in ["x8", "x12", "x16", "x20"] {
        let ino = fs.resolve(&format!("/{name}")).expect("resolve");
        let a = fs.setattr(ino, &set).expect("setattr");
        shown.push((ino, a.clone()));
        match name {
            // i_ctime_extra only.
            "x8" => assert_eq!(
                (a.ctime, a.mtime, a.atime, a.crtime),
                (far, clamped, clamped, Timestamp::default())
            ),
            // ctime and mtime extra.
            "x12" => {
                assert_eq!((a.ctime, a.mtime, a.atime, a.crtime), (far, far, clamped, Timestamp::default()))
            }
            // ctime, mtime and atime extra, no room for i_crtime.
            "x16" => assert_eq!((a.ctime, a.mtime, a.atime, a.crtime), (far, far, far, Timestamp::default())),
            // i_crtime without i_crtime_extra: whole seconds.
            _ => {
                assert_eq!((a.ctime, a.mtime), (far, far));
                assert_eq!(a.crtime.nsec, 0);
                assert_ne!(a.crtime, Timestamp::default());
            }
        }
    }
    fs.unmount().expect("unmount");
    let fs = mount(&img);
    for (ino, a) in shown {
        let b = fs.getattr(ino).expect("getattr");
        assert_eq!(
            (b.atime, b.mtime, b.ctime, b.crtime),
            (a.atime, a.mtime, a.ctime, a.crtime),
            "inode {ino}"
        );
    }
    fs.unmount().expect("unmount");
}

/// Unmounts on drop.
struct LoopMount(PathBuf);

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|r| r.split_whitespace().nth(1)) == Some("0")
}

/// `mount -o loop,ro img mnt`, or `None` (after saying why) when not possible here.
fn loop_mount(img: &Path, mnt: &Path) -> Option<LoopMount> {
    if !is_root() {
        println!("SKIP: kernel round trip needs root for a loop mount");
        return None;
    }
    let out = Command::new("mount").arg("-o").arg("loop,ro").arg(img).arg(mnt).output().ok()?;
    if !out.status.success() {
        println!("SKIP: mount -o loop failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(LoopMount(mnt.to_path_buf()))
}

/// The kernel's value of xattr `name` of `path`: getfattr, else python3's os.getxattr;
/// `None` when neither is there.
fn kernel_getxattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    if which("getfattr").is_some() {
        let out = Command::new("getfattr")
            .args(["--absolute-names", "--only-values", "-n", name])
            .arg(path)
            .output()
            .expect("run getfattr");
        assert!(out.status.success(), "getfattr -n {name}: {}", String::from_utf8_lossy(&out.stderr));
        return Some(out.stdout);
    }
    let py = format!("import os,sys; sys.stdout.buffer.write(os.getxattr(sys.argv[1], {name:?}))");
    let out = Command::new("python3").arg("-c").arg(py).arg(path).output().ok()?;
    assert!(out.status.success(), "os.getxattr {name}: {}", String::from_utf8_lossy(&out.stderr));
    Some(out.stdout)
}

#[test]
fn kernel_reads_what_cjfs_wrote_on_128_byte_inodes() {
    let tmp = tmpdir();
    let img = tmp.path().join("i128.img");
    if mke2fs(&img, 128).is_none() {
        return;
    }
    let fs = mount(&img);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, b"payload").expect("write");
    let attrs: Vec<(&str, Vec<u8>)> = vec![
        ("user.small", b"tiny".to_vec()),
        ("user.large", vec![b'L'; 1500]),
        ("user.mid", vec![b'm'; 200]),
    ];
    for (n, v) in &attrs {
        fs.setxattr(f.ino, n.as_bytes(), v, XattrFlags::Create).expect("setxattr");
    }
    let mut files = Vec::new();
    for (i, (set, _)) in time_cases().into_iter().enumerate() {
        let name = format!("t{i}");
        let g = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).expect("create");
        let a = fs
            .setattr(g.ino, &SetAttr { atime: Some(set), mtime: Some(set), ..Default::default() })
            .expect("setattr");
        files.push((name, a));
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);

    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let Some(_m) = loop_mount(&img, &mnt) else {
        return;
    };
    assert_eq!(std::fs::read(mnt.join("f")).expect("read f"), b"payload");
    for (n, v) in &attrs {
        let Some(got) = kernel_getxattr(&mnt.join("f"), n) else {
            println!("note: neither getfattr nor python3 is installed; xattr part skipped");
            break;
        };
        assert_eq!(&got, v, "the kernel's {n}");
    }
    for (name, a) in files {
        let m = std::fs::metadata(mnt.join(&name)).expect("stat");
        assert_eq!((m.mtime(), m.mtime_nsec()), (a.mtime.sec, i64::from(a.mtime.nsec)), "{name} mtime");
        assert_eq!((m.atime(), m.atime_nsec()), (a.atime.sec, i64::from(a.atime.nsec)), "{name} atime");
        assert_eq!((m.ctime(), m.ctime_nsec()), (a.ctime.sec, i64::from(a.ctime.nsec)), "{name} ctime");
    }
}
