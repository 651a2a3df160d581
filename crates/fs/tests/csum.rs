//! `metadata_csum` and `uninit_bg` images, read-write.
//!
//! - Images made by `mkfs.ext4 -b 4096` (defaults, with `metadata_csum_seed`, and with
//!   `^metadata_csum,uninit_bg`), filled by the kernel through a loop mount (a directory of
//!   a few thousand entries, so htree-indexed; xattrs in the inode and in a block; hard and
//!   symbolic links), then changed through the library (creates, writes, unlinks, renames,
//!   mkdir, rmdir, setxattr; enough to allocate in uninitialised groups and to add blocks
//!   to directories): `e2fsck -fn` stays clean and the kernel reads back what cjfs wrote.
//! - cjfs' own mkfs makes `metadata_csum` images (`e2fsck -fn` clean before and after
//!   work), or plain ones when asked.
//!
//! Tests print `SKIP:` and pass when e2fsprogs, root or loop mounts are missing.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use cjfs_fs::mkfs::read_layout;
use cjfs_fs::ondisk::features::{INCOMPAT_CSUM_SEED, RO_COMPAT_GDT_CSUM, RO_COMPAT_METADATA_CSUM};
use cjfs_fs::ondisk::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, GroupDesc};
use cjfs_fs::{Fs, Ino, MkfsOptions, ROOT_INO, RenameFlags, XattrFlags, mkfs};
use common::{assert_fsck_clean, get_xattr, mount, open_image, set_xattr, which};

/// `EXT4_INDEX_FL`.
const INDEX_FL: u32 = 0x1000;
/// Entries of the big (htree) directory.
const BIG: usize = 3000;

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("cjfs-csum").tempdir().expect("tmpdir")
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8).collect()
}

/// Why the kernel cannot be used here, if it cannot.
fn no_kernel() -> Option<String> {
    for t in ["mkfs.ext4", "e2fsck", "mount", "umount"] {
        if which(t).is_none() {
            return Some(format!("{t} not installed"));
        }
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (loop mounts need it)".into());
    }
    None
}

/// A kernel loop mount, unmounted on drop.
struct KMount(PathBuf);

impl KMount {
    fn new(img: &Path, mnt: &Path) -> Result<KMount, String> {
        let _ = std::fs::create_dir(mnt);
        let o = Command::new("mount")
            .args(["-t", "ext4", "-o", "loop"])
            .arg(img)
            .arg(mnt)
            .output()
            .expect("mount");
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).into_owned());
        }
        Ok(KMount(mnt.to_path_buf()))
    }
}

impl Drop for KMount {
    fn drop(&mut self) {
        let st = Command::new("umount").arg(&self.0).status().expect("umount");
        assert!(st.success(), "umount {} failed", self.0.display());
    }
}

fn mkfs_ext4(img: &Path, features: Option<&str>) {
    let mut c = Command::new(which("mkfs.ext4").expect("mkfs.ext4"));
    c.args(["-q", "-F", "-b", "4096"]);
    if let Some(f) = features {
        c.args(["-O", f]);
    }
    let o = c.arg(img).arg("600M").output().expect("run mkfs.ext4");
    assert!(o.status.success(), "mkfs.ext4 failed: {}", String::from_utf8_lossy(&o.stderr));
}

/// What the kernel writes into a fresh image.
fn kernel_fill(root: &Path) {
    let big = root.join("big");
    std::fs::create_dir(&big).expect("mkdir big");
    for i in 0..BIG {
        std::fs::write(big.join(format!("entry-with-a-longish-name-{i:05}")), i.to_string()).expect("write");
    }
    let sub = root.join("sub");
    std::fs::create_dir_all(sub.join("deep/er")).expect("mkdir sub");
    std::fs::write(sub.join("file"), content(300_000, 1)).expect("write file");
    std::fs::hard_link(sub.join("file"), sub.join("hard")).expect("link");
    std::os::unix::fs::symlink("file", sub.join("fast-link")).expect("symlink");
    std::os::unix::fs::symlink("t".repeat(200), sub.join("slow-link")).expect("symlink");
    set_xattr(&sub.join("file"), "user.small", b"in the inode");
    std::fs::write(sub.join("xattrs"), b"x").expect("write");
    set_xattr(&sub.join("xattrs"), "user.big", &content(2000, 9));
    std::fs::create_dir(root.join("gone")).expect("mkdir gone");
    std::fs::write(root.join("gone/f"), b"f").expect("write");
}

fn ino(fs: &Fs, path: &str) -> Ino {
    fs.resolve(path).unwrap_or_else(|e| panic!("resolve {path}: {e}"))
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf).expect("read");
    buf.truncate(n);
    buf
}

fn names(fs: &Fs, dir: Ino) -> BTreeSet<String> {
    fs.readdir_all(dir)
        .expect("readdir")
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .filter(|n| n != "." && n != "..")
        .collect()
}

/// Groups flagged `flag`.
fn flagged(descs: &[GroupDesc], flag: u16) -> BTreeSet<usize> {
    descs.iter().enumerate().filter(|(_, d)| d.flags & flag != 0).map(|(g, _)| g).collect()
}

/// What cjfs does to a kernel-filled image; returns the big file's contents.
fn cjfs_changes(fs: &Fs) -> Vec<u8> {
    let big = ino(fs, "/big");
    assert_eq!(names(fs, big).len(), BIG, "the htree directory lists every entry");
    // Changes keep the index (leaves and index blocks each with its checksum).
    for i in 0..40 {
        let a = fs.create(big, format!("cjfs-added-{i:03}-{}", "z".repeat(100)).as_bytes(), 0o644, 0, 0);
        fs.write(a.expect("create").ino, 0, format!("added {i}").as_bytes()).expect("write");
    }
    for i in (0..BIG).step_by(7) {
        fs.unlink(big, format!("entry-with-a-longish-name-{i:05}").as_bytes()).expect("unlink");
    }
    let sub = ino(fs, "/sub");
    fs.rename(big, b"entry-with-a-longish-name-00001", sub, b"moved-in", RenameFlags::default())
        .expect("rename");
    fs.rename(sub, b"hard", big, b"hard-moved-out", RenameFlags::default()).expect("rename");
    // A fresh directory that needs several blocks.
    let many = fs.mkdir(ROOT_INO, b"many", 0o755, 0, 0).expect("mkdir").ino;
    for i in 0..400 {
        fs.create(many, format!("n{i:04}-{}", "y".repeat(40)).as_bytes(), 0o644, 0, 0).expect("create");
    }
    // Directories spread over the groups (inodes in uninitialised groups).
    for d in 0..12 {
        let dir = fs.mkdir(ROOT_INO, format!("spread-{d}").as_bytes(), 0o755, 0, 0).expect("mkdir").ino;
        let f = fs.create(dir, b"f", 0o644, 0, 0).expect("create").ino;
        fs.write(f, 0, &content(5000, d as u8)).expect("write");
    }
    // Blocks in uninitialised groups.
    let data = content(300 << 20, 3);
    let f = fs.create(ROOT_INO, b"large", 0o644, 0, 0).expect("create").ino;
    fs.write(f, 0, &data).expect("write large");
    let gone = ino(fs, "/gone");
    fs.unlink(gone, b"f").expect("unlink");
    fs.rmdir(ROOT_INO, b"gone").expect("rmdir");
    let x = ino(fs, "/sub/xattrs");
    fs.setxattr(x, b"user.added", &content(1500, 4), XattrFlags::Any).expect("setxattr in the block");
    let file = ino(fs, "/sub/file");
    fs.setxattr(file, b"user.tiny", b"t", XattrFlags::Any).expect("setxattr in the inode");
    fs.symlink(ROOT_INO, b"cjfs-link", "l".repeat(300).as_bytes(), 0, 0).expect("symlink");
    fs.link(file, ROOT_INO, b"cjfs-hard").expect("link");
    data
}

fn kernel_round_trip(name: &str, features: Option<&str>, ro_compat: u32, incompat: u32) {
    if let Some(why) = no_kernel() {
        println!("SKIP: {name}: {why}");
        return;
    }
    let dir = tmpdir();
    let img = dir.path().join(format!("{name}.img"));
    let mnt = dir.path().join("mnt");
    mkfs_ext4(&img, features);
    {
        let m = KMount::new(&img, &mnt).expect("the kernel mounts the fresh image");
        kernel_fill(&m.0);
    }
    assert_fsck_clean(&img);
    let (sb, before) = read_layout(&*open_image(&img)).expect("layout");
    assert_eq!(sb.feature_ro_compat & ro_compat, ro_compat, "{name}: ro_compat features");
    assert_eq!(sb.feature_incompat & incompat, incompat, "{name}: incompat features");
    let uninit_before = (flagged(&before, BG_BLOCK_UNINIT), flagged(&before, BG_INODE_UNINIT));
    assert!(
        !uninit_before.0.is_empty() && !uninit_before.1.is_empty(),
        "{name}: mkfs left no uninitialised group"
    );

    let fs = mount(open_image(&img));
    let big = ino(&fs, "/big");
    assert!(fs.check_inode(big).expect("check /big").flags & INDEX_FL != 0, "{name}: /big is not an htree");
    let data = cjfs_changes(&fs);
    assert_ne!(fs.check_inode(big).expect("check /big").flags & INDEX_FL, 0, "{name}: /big lost its index");
    let many = ino(&fs, "/many");
    assert_ne!(
        fs.check_inode(many).expect("check /many").flags & INDEX_FL,
        0,
        "{name}: /many was not indexed"
    );
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
    let (_, after) = read_layout(&*open_image(&img)).expect("layout");
    let block_inited: Vec<_> =
        uninit_before.0.difference(&flagged(&after, BG_BLOCK_UNINIT)).copied().collect();
    let inode_inited: Vec<_> =
        uninit_before.1.difference(&flagged(&after, BG_INODE_UNINIT)).copied().collect();
    assert!(!block_inited.is_empty(), "{name}: no BLOCK_UNINIT group was used");
    assert!(!inode_inited.is_empty(), "{name}: no INODE_UNINIT group was used");
    for g in &inode_inited {
        let d = &after[*g];
        assert!(d.itable_unused < sb.inodes_per_group, "group {g}: bg_itable_unused not lowered");
        assert!(d.itable_unused <= d.free_inodes_count, "group {g}: bg_itable_unused above the free inodes");
    }

    // The kernel sees what cjfs wrote, and writes on.
    {
        let m = KMount::new(&img, &mnt).expect("the kernel mounts the image cjfs changed");
        let r = &m.0;
        assert_eq!(std::fs::read(r.join("large")).expect("read large"), data);
        assert_eq!(
            std::fs::read(r.join("big/cjfs-added-007-".to_string() + &"z".repeat(100))).expect("read"),
            b"added 7"
        );
        assert_eq!(std::fs::read_dir(r.join("big")).expect("readdir").count(), BIG + 40 - BIG.div_ceil(7));
        assert!(!r.join("big/entry-with-a-longish-name-00007").exists());
        assert_eq!(std::fs::read(r.join("sub/moved-in")).expect("read"), b"1");
        assert_eq!(std::fs::read(r.join("big/hard-moved-out")).expect("read"), content(300_000, 1));
        assert_eq!(std::fs::read_dir(r.join("many")).expect("readdir").count(), 400);
        assert!(!r.join("gone").exists());
        assert_eq!(get_xattr(&r.join("sub/xattrs"), "user.added"), content(1500, 4));
        assert_eq!(get_xattr(&r.join("sub/xattrs"), "user.big"), content(2000, 9));
        assert_eq!(get_xattr(&r.join("sub/file"), "user.tiny"), b"t");
        assert_eq!(std::fs::read_link(r.join("cjfs-link")).expect("readlink").as_os_str().len(), 300);
        assert_eq!(std::fs::read(r.join("spread-11/f")).expect("read"), content(5000, 11));
        std::fs::write(r.join("many/from-the-kernel"), b"kernel").expect("kernel write");
        std::fs::write(r.join("big/from-the-kernel"), b"kernel too").expect("kernel write");
    }
    assert_fsck_clean(&img);
    let fs = mount(open_image(&img));
    assert_eq!(read_all(&fs, ino(&fs, "/many/from-the-kernel")), b"kernel");
    assert_eq!(read_all(&fs, ino(&fs, "/big/from-the-kernel")), b"kernel too");
    fs.unlink(ino(&fs, "/many"), b"from-the-kernel").expect("unlink");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}

/// Acceptance 1, `mkfs.ext4 -b 4096` defaults (`metadata_csum`).
#[test]
fn mkfs_ext4_default_image_round_trip() {
    kernel_round_trip("default", None, RO_COMPAT_METADATA_CSUM, 0);
}

/// Acceptance 1 with `metadata_csum_seed` (the seed is `s_checksum_seed`).
#[test]
fn mkfs_ext4_csum_seed_image_round_trip() {
    kernel_round_trip("csum-seed", Some("metadata_csum_seed"), RO_COMPAT_METADATA_CSUM, INCOMPAT_CSUM_SEED);
}

/// Acceptance 1 with `^metadata_csum,uninit_bg` (CRC16 descriptor checksums only).
#[test]
fn mkfs_ext4_uninit_bg_image_round_trip() {
    kernel_round_trip("uninit-bg", Some("^metadata_csum,uninit_bg"), RO_COMPAT_GDT_CSUM, 0);
}

/// Work on a cjfs-made image: files, directories of several blocks, xattrs, deletes.
fn cjfs_work(fs: &Fs) {
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir").ino;
    for i in 0..600 {
        let f =
            fs.create(d, format!("file-{i:04}-{}", "q".repeat(30)).as_bytes(), 0o644, 0, 0).expect("create");
        if i % 50 == 0 {
            fs.write(f.ino, 0, &content(70_000, i as u8)).expect("write");
        }
    }
    for i in (0..600).step_by(3) {
        fs.unlink(d, format!("file-{i:04}-{}", "q".repeat(30)).as_bytes()).expect("unlink");
    }
    let x = fs.create(ROOT_INO, b"x", 0o644, 0, 0).expect("create").ino;
    fs.setxattr(x, b"user.a", &content(3000, 1), XattrFlags::Any).expect("setxattr");
    // A file of many extents: its tree needs a block.
    for k in 0..40u64 {
        fs.write(x, k * 2 * 4096, &content(4096, k as u8)).expect("write");
    }
    fs.mkdir(d, b"sub", 0o755, 0, 0).expect("mkdir");
    fs.rename(d, b"sub", ROOT_INO, b"sub", RenameFlags::default()).expect("rename");
    fs.rmdir(ROOT_INO, b"sub").expect("rmdir");
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).expect("create").ino;
    fs.write(big, 0, &content(150 << 20, 5)).expect("write big");
}

/// Acceptance 2: `cjfs mkfs` makes `metadata_csum` images by default that e2fsck and the
/// kernel accept, before and after work; without it, plain ones.
#[test]
fn cjfs_mkfs_makes_metadata_csum_images() {
    let dir = tmpdir();
    for (csum, name) in [(true, "csum.img"), (false, "plain.img")] {
        let img = dir.path().join(name);
        let dev = cjfs_blockdev::FileDevice::open(
            &img,
            cjfs_blockdev::FileDeviceOptions { create_size: Some(600 << 20), ..Default::default() },
        )
        .expect("create image");
        let r = mkfs(&dev, &MkfsOptions { metadata_csum: csum, ..Default::default() }).expect("mkfs");
        drop(dev);
        assert_eq!(r.superblock.has_metadata_csum(), csum, "{name}");
        assert_eq!(r.superblock.has_group_desc_csum(), csum, "{name}");
        if csum {
            assert!(
                r.groups.iter().skip(1).all(|d| d.flags & BG_INODE_UNINIT != 0),
                "groups 1.. INODE_UNINIT"
            );
            assert!(r.groups.iter().any(|d| d.flags & BG_BLOCK_UNINIT != 0), "some group BLOCK_UNINIT");
        } else {
            assert!(r.groups.iter().all(|d| d.flags == 0 && d.itable_unused == 0), "{name}: no group flags");
        }
        assert_fsck_clean(&img);
        let fs = mount(open_image(&img));
        cjfs_work(&fs);
        fs.unmount().expect("unmount");
        assert_fsck_clean(&img);
        let fs = mount(open_image(&img));
        assert_eq!(read_all(&fs, ino(&fs, "/big")), content(150 << 20, 5));
        assert_eq!(names(&fs, ino(&fs, "/d")).len(), 400);
        fs.unmount().expect("unmount");
        if let Some(why) = no_kernel() {
            println!("SKIP: kernel mount of {name}: {why}");
            continue;
        }
        let m = KMount::new(&img, &dir.path().join("mnt")).expect("the kernel mounts a cjfs image");
        assert_eq!(std::fs::read_dir(m.0.join("d")).expect("readdir").count(), 400);
        assert_eq!(get_xattr(&m.0.join("x"), "user.a"), content(3000, 1));
        assert_eq!(
            std::fs::read(m.0.join("d/file-0050-".to_string() + &"q".repeat(30))).expect("read").len(),
            70_000
        );
        std::fs::write(m.0.join("d/kernel"), b"k").expect("kernel write");
        drop(m);
        assert_fsck_clean(&img);
    }
}
