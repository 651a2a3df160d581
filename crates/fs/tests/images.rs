//! Images made by e2fsprogs: `mke2fs` file systems populated with `debugfs` open
//! read-write, read back, change, and stay `e2fsck -fn` clean; an htree directory indexed
//! by `e2fsck -D` is readable and stays consistent after changes; 1 KiB and 2 KiB blocks
//! (what mke2fs picks for small images) work as 4 KiB ones do; unsupported features are
//! refused with an error that names them. Every test prints a message and
//! passes when the tool it needs is missing.

mod common;
use common::read_all;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{FileType, Fs, FsError, Ino, MountOptions, ROOT_INO, RenameFlags, SetAttr, XattrFlags};
use common::{assert_fsck_clean, get_xattr, kernel_mount, set_xattr, which};

/// `EXT4_INDEX_FL`: the directory has an htree index.
const INDEX_FL: u32 = 0x1000;

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cjfs-images")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tmpdir")
}

/// Run `mke2fs -q -t ext4 -b <bs> -O <features> img <size>`; `None` (after saying why)
/// when mke2fs is missing or refuses the combination.
fn mke2fs(img: &Path, block_size: u32, features: &str, size: &str) -> Option<()> {
    mke2fs_with(img, &["-t", "ext4", "-b", &block_size.to_string(), "-O", features], size)
}

/// Run `mke2fs -q -F <args> img <size>`; `None` (after saying why) when mke2fs is missing
/// or refuses the arguments.
fn mke2fs_with(img: &Path, args: &[&str], size: &str) -> Option<()> {
    let Some(mke2fs) = which("mke2fs") else {
        eprintln!("SKIP: mke2fs not installed");
        return None;
    };
    let out =
        Command::new(mke2fs).args(["-q", "-F"]).args(args).arg(img).arg(size).output().expect("run mke2fs");
    if !out.status.success() {
        eprintln!(
            "SKIP: mke2fs {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(())
}

/// Give `img` the `extent` feature as an upgrade from ext3 does (`tune2fs -O extent`);
/// `None` (after saying why) without tune2fs.
fn upgrade_to_extents(img: &Path) -> Option<()> {
    let Some(tune2fs) = which("tune2fs") else {
        eprintln!("SKIP: tune2fs not installed");
        return None;
    };
    let out = Command::new(tune2fs).args(["-O", "extent"]).arg(img).output().expect("run tune2fs");
    assert!(out.status.success(), "tune2fs -O extent: {}", String::from_utf8_lossy(&out.stderr));
    Some(())
}

/// The standard image of these tests.
fn std_image(img: &Path) -> Option<()> {
    mke2fs(img, 4096, "^metadata_csum,^resize_inode", "256M")
}

/// Run a debugfs command script against `img` (read-write).
fn debugfs(img: &Path, cmds: &str) -> Option<String> {
    let Some(debugfs) = which("debugfs") else {
        eprintln!("SKIP: debugfs not installed");
        return None;
    };
    let script = img.with_extension("cmds");
    std::fs::write(&script, cmds).expect("write debugfs script");
    let out = Command::new(debugfs).arg("-w").arg("-f").arg(&script).arg(img).output().expect("run debugfs");
    assert!(out.status.success(), "debugfs failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Read-only debugfs request (`-R`).
fn debugfs_r(img: &Path, req: &str) -> Option<String> {
    let debugfs = which("debugfs")?;
    let out = Command::new(debugfs).arg("-R").arg(req).arg(img).output().expect("run debugfs");
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Open `img` in blocks of the size its superblock names.
fn open(img: &Path) -> Device {
    let block_size = cjfs_fs::ondisk::superblock::probe_block_size(img).expect("superblock");
    Arc::new(
        FileDevice::open(img, FileDeviceOptions { block_size, ..Default::default() }).expect("open image"),
    )
}

fn mount(img: &Path) -> Fs {
    Fs::open(open(img), MountOptions::default()).expect("mount e2fsprogs image")
}

fn names(fs: &Fs, dir: Ino) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let mut off = 0;
    loop {
        let page = fs.readdir(dir, off, 500).expect("readdir");
        let Some(last) = page.last() else { break };
        off = last.next_offset;
        for e in page {
            if e.name != b"." && e.name != b".." {
                assert!(out.insert(e.name.clone()), "{:?} listed twice", String::from_utf8_lossy(&e.name));
            }
        }
    }
    out
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed) ^ (i >> 12) as u8).collect()
}

fn e2fsck_exit(img: &Path, args: &[&str]) -> Option<i32> {
    let e2fsck = which("e2fsck")?;
    let out = Command::new(e2fsck).args(args).arg(img).output().expect("run e2fsck");
    Some(out.status.code().unwrap_or(-1))
}

#[test]
fn debugfs_populated_image_reads_and_changes() {
    let tmp = tmpdir();
    let img = tmp.path().join("std.img");
    if std_image(&img).is_none() {
        return;
    }
    populated_image_round_trip(&tmp, &img);
}

/// mke2fs' defaults (metadata_csum, resize inode) with 1 KiB and 2 KiB blocks: the same
/// round trip as 4 KiB blocks.
#[test]
fn small_block_images_read_and_change() {
    for bs in [1024, 2048] {
        let tmp = tmpdir();
        let img = tmp.path().join(format!("b{bs}.img"));
        if mke2fs(&img, bs, "metadata_csum", "64M").is_none() {
            return;
        }
        eprintln!("{bs}-byte blocks");
        populated_image_round_trip(&tmp, &img);
    }
}

/// An image with `stable_inodes` (inode numbers never change) works as any other: cjfs
/// never renumbers an inode, and the flag stays set.
#[test]
fn stable_inodes_images_read_and_change() {
    let tmp = tmpdir();
    let img = tmp.path().join("stable.img");
    if mke2fs(&img, 4096, "metadata_csum,stable_inodes", "64M").is_none() {
        return;
    }
    populated_image_round_trip(&tmp, &img);
    if let Some(out) = debugfs_r(&img, "features") {
        assert!(out.contains("stable_inodes"), "the feature stays set: {out}");
    }
}

/// Without the `filetype` feature directory entries carry type 0 (e2fsck clears any other
/// value as corrupt): cjfs writes 0 and takes each entry's type from its inode, for renames
/// of directories and for readdir.
#[test]
fn no_filetype_images_read_and_change() {
    let tmp = tmpdir();
    let img = tmp.path().join("noft.img");
    if mke2fs(&img, 4096, "^filetype", "64M").is_none() {
        return;
    }
    populated_image_round_trip(&tmp, &img);
    let fs = mount(&img);
    let d = fs.mkdir(ROOT_INO, b"newdir", 0o755, 0, 0).expect("mkdir");
    fs.symlink(d.ino, b"ln", b"x", 0, 0).expect("symlink");
    fs.rename(ROOT_INO, b"dir1", d.ino, b"dir1", RenameFlags::default()).expect("rename a directory");
    let kinds: BTreeMap<Vec<u8>, FileType> =
        fs.readdir_all(d.ino).expect("readdir").into_iter().map(|e| (e.name, e.kind)).collect();
    assert_eq!(kinds.get(&b"dir1"[..]), Some(&FileType::Directory), "{kinds:?}");
    assert_eq!(kinds.get(&b"ln"[..]), Some(&FileType::Symlink), "{kinds:?}");
    assert_eq!(kinds.get(&b".."[..]), Some(&FileType::Directory), "{kinds:?}");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}

/// Without a journal (`mke2fs -O ^has_journal`): the same round trip, written in place; the
/// superblock is not clean while the file system is open (as the kernel leaves it, so that
/// e2fsck checks it after a crash) and clean again after the unmount, and a journal that
/// would need one is refused.
#[test]
fn no_journal_images_read_and_change() {
    let tmp = tmpdir();
    let img = tmp.path().join("nojournal.img");
    if mke2fs(&img, 4096, "^has_journal", "64M").is_none() {
        return;
    }
    populated_image_round_trip(&tmp, &img);
    let state = |img: &Path| {
        let raw = std::fs::read(img).expect("read image");
        let sb = cjfs_fs::ondisk::superblock::Superblock::decode(&raw[1024..2048]).expect("superblock");
        sb.state & cjfs_fs::ondisk::superblock::STATE_VALID
    };
    assert_ne!(state(&img), 0, "clean after the round trip");
    let fs = mount(&img);
    assert_eq!(fs.journal().config().kind, cjfs_journal::JournalKind::None);
    assert_eq!(fs.journal().config().name, "nojournal");
    assert_eq!(state(&img), 0, "open: not clean");
    let f = fs.create(ROOT_INO, b"in-place", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, &content(10_000, 9)).expect("write");
    fs.fsync(f.ino, false).expect("fsync");
    fs.unmount().expect("unmount");
    assert_ne!(state(&img), 0, "clean after the unmount");
    assert_fsck_clean(&img);
    let fs = mount(&img);
    assert_eq!(read_all(&fs, fs.lookup(ROOT_INO, b"in-place").expect("lookup").ino), content(10_000, 9));
    fs.unmount().expect("unmount");
    let named = cjfs_fs::preset::resolve("cjfs").expect("preset");
    match Fs::open(open(&img), named) {
        Err(FsError::Incompatible(why)) => assert!(why.contains("has no journal"), "{why}"),
        other => panic!("a journaling preset on an image without a journal: {other:?}"),
    }
}

/// debugfs fills `img`; cjfs reads, changes, and e2fsck and debugfs judge the result.
fn populated_image_round_trip(tmp: &tempfile::TempDir, img: &Path) {
    let img = img.to_path_buf();
    // Host files for debugfs to copy in: tiny, several blocks, several MiB.
    let small = content(5, 1);
    let medium = content(100_000, 2);
    let large = content(3 << 20, 3);
    for (n, d) in [("small", &small), ("medium", &medium), ("large", &large)] {
        std::fs::write(tmp.path().join(n), d).expect("host file");
    }
    let host = |n: &str| tmp.path().join(n).display().to_string();
    let cmds = format!(
        "mkdir dir1\nmkdir dir1/sub\nmkdir dir2\nwrite {} dir1/small\nwrite {} dir1/medium\nwrite {} dir1/sub/large\n\
         write {} top\nsymlink link dir1/small\n",
        host("small"),
        host("medium"),
        host("large"),
        host("medium")
    );
    if debugfs(&img, &cmds).is_none() {
        return;
    }
    assert_fsck_clean(&img);

    let fs = mount(&img);
    let dir1 = fs.resolve("/dir1").expect("dir1");
    assert_eq!(names(&fs, dir1), BTreeSet::from([b"small".to_vec(), b"medium".to_vec(), b"sub".to_vec()]));
    assert_eq!(read_all(&fs, fs.resolve("/dir1/small").expect("small")), small);
    assert_eq!(read_all(&fs, fs.resolve("/dir1/medium").expect("medium")), medium);
    let large_ino = fs.resolve("/dir1/sub/large").expect("large");
    assert_eq!(read_all(&fs, large_ino), large);
    assert_eq!(read_all(&fs, fs.resolve("/top").expect("top")), medium);
    let link = fs.lookup(ROOT_INO, b"link").expect("link");
    assert_eq!(link.kind, FileType::Symlink);
    assert_eq!(fs.readlink(link.ino).expect("readlink"), b"dir1/small");
    assert_eq!(fs.getattr(dir1).expect("getattr").nlink, 3);

    // Change things: overwrite inside and past the end of a debugfs file, truncate, write
    // new files, directories, renames, links, deletions, xattrs.
    let mut large2 = large.clone();
    let patch = content(50_000, 9);
    fs.write(large_ino, 1_000_000, &patch).expect("overwrite");
    large2[1_000_000..1_050_000].copy_from_slice(&patch);
    fs.write(large_ino, large2.len() as u64 + 10_000, b"tail").expect("extend");
    large2.resize(large2.len() + 10_000, 0);
    large2.extend_from_slice(b"tail");
    let medium_ino = fs.resolve("/dir1/medium").expect("medium");
    fs.setattr(medium_ino, &SetAttr { size: Some(12_345), ..Default::default() }).expect("truncate");
    let new = fs.create(fs.resolve("/dir2").expect("dir2"), b"new", 0o644, 0, 0).expect("create");
    let newdata = content(200_000, 5);
    fs.write(new.ino, 0, &newdata).expect("write new");
    let nd = fs.mkdir(dir1, b"newdir", 0o755, 0, 0).expect("mkdir");
    fs.rename(ROOT_INO, b"top", nd.ino, b"moved", RenameFlags::default()).expect("rename");
    fs.link(large_ino, ROOT_INO, b"hardlink").expect("link");
    fs.unlink(dir1, b"small").expect("unlink small");
    fs.setxattr(new.ino, b"user.origin", b"cjfs", XattrFlags::Create).expect("setxattr");
    let sub = fs.resolve("/dir1/sub").expect("sub");
    fs.rename(dir1, b"sub", fs.resolve("/dir2").expect("dir2"), b"sub2", RenameFlags::default())
        .expect("rename dir");
    let _ = sub;
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);

    // e2fsprogs sees our writes.
    let dumped = tmp.path().join("dumped");
    if debugfs_r(&img, &format!("dump /dir2/new {}", dumped.display())).is_some() {
        assert_eq!(std::fs::read(&dumped).expect("dumped file"), newdata, "debugfs reads cjfs's file");
        let d2 = tmp.path().join("dumped2");
        debugfs_r(&img, &format!("dump /hardlink {}", d2.display()));
        assert_eq!(std::fs::read(&d2).expect("dumped file"), large2, "debugfs reads the changed file");
    }

    // And so do we after a remount.
    let fs = mount(&img);
    assert_eq!(read_all(&fs, fs.resolve("/dir2/sub2/large").expect("large")), large2);
    assert_eq!(read_all(&fs, fs.resolve("/hardlink").expect("hardlink")), large2);
    assert_eq!(read_all(&fs, fs.resolve("/dir1/medium").expect("medium")), medium[..12_345]);
    assert_eq!(read_all(&fs, fs.resolve("/dir1/newdir/moved").expect("moved")), medium);
    assert!(matches!(fs.resolve("/dir1/small"), Err(FsError::NotFound(_))));
    let new = fs.resolve("/dir2/new").expect("new");
    assert_eq!(read_all(&fs, new), newdata);
    assert_eq!(fs.getxattr(new, b"user.origin").expect("getxattr"), b"cjfs");
    // Delete everything we can and check again.
    fs.unlink(fs.resolve("/dir2/sub2").expect("sub2"), b"large").expect("unlink");
    fs.unlink(ROOT_INO, b"hardlink").expect("unlink");
    fs.rmdir(fs.resolve("/dir2").expect("dir2"), b"sub2").expect("rmdir");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}

#[test]
fn htree_directory_from_e2fsck_dash_d() {
    const FILES: usize = 3000;
    let tmp = tmpdir();
    let img = tmp.path().join("htree.img");
    if std_image(&img).is_none() {
        return;
    }
    let empty = tmp.path().join("empty");
    std::fs::write(&empty, b"").expect("host file");
    let mut cmds = String::from("mkdir big\ncd big\n");
    for i in 0..FILES {
        cmds.push_str(&format!("write {} file-with-a-longish-name-{i:05}\n", empty.display()));
    }
    if debugfs(&img, &cmds).is_none() {
        return;
    }
    // Index the directories; exit code 1 = "file system was modified".
    match e2fsck_exit(&img, &["-fyD"]) {
        None => {
            eprintln!("SKIP: e2fsck not installed");
            return;
        }
        Some(c) => assert!(c == 0 || c == 1, "e2fsck -fyD exited with {c}"),
    }
    assert_fsck_clean(&img);
    let want: BTreeSet<Vec<u8>> =
        (0..FILES).map(|i| format!("file-with-a-longish-name-{i:05}").into_bytes()).collect();

    let fs = mount(&img);
    let big = fs.lookup(ROOT_INO, b"big").expect("big");
    assert!(
        big.flags & INDEX_FL != 0,
        "e2fsck -D should have indexed the directory (flags {:#x})",
        big.flags
    );
    assert!(big.size > 4096 * 10, "a {FILES}-entry directory spans many blocks");
    for n in &want {
        fs.lookup(big.ino, n).unwrap_or_else(|e| panic!("lookup {:?}: {e}", String::from_utf8_lossy(n)));
    }
    assert_eq!(names(&fs, big.ino), want, "readdir of the htree directory");

    // Change it through cjfs: add 300 names, remove every seventh.
    let mut now = want.clone();
    for i in 0..300 {
        let n = format!("added-by-cjfs-{i:04}").into_bytes();
        fs.create(big.ino, &n, 0o644, 0, 0).expect("create");
        now.insert(n);
    }
    for (k, n) in want.iter().enumerate() {
        if k % 7 == 0 {
            fs.unlink(big.ino, n).expect("unlink");
            now.remove(n);
        }
    }
    assert_eq!(names(&fs, big.ino), now);
    let flags = fs.check_inode(big.ino).expect("check /big").flags;
    assert_ne!(flags & INDEX_FL, 0, "cjfs's changes dropped the htree index");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);

    let fs = mount(&img);
    let big = fs.lookup(ROOT_INO, b"big").expect("big").ino;
    for n in &want {
        let r = fs.lookup(big, n);
        assert_eq!(
            r.is_ok(),
            now.contains(n),
            "lookup {:?} after remount: {r:?}",
            String::from_utf8_lossy(n)
        );
    }
    for n in &now {
        fs.lookup(big, n).unwrap_or_else(|e| panic!("lookup {:?}: {e}", String::from_utf8_lossy(n)));
    }
    assert_eq!(names(&fs, big), now);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
    // e2fsprogs finds every name too (`ls -l` also shows emptied records, the first of
    // their block, with inode 0: skip those).
    if let Some(ls) = debugfs_r(&img, "ls -l /big") {
        let listed = ls
            .lines()
            .filter(|l| l.split_whitespace().next() != Some("0"))
            .filter(|l| l.contains("file-with-a-longish-name-") || l.contains("added-by-cjfs-"))
            .count();
        assert_eq!(listed, now.len(), "debugfs ls -l /big");
    }
}

/// The error of mounting `img`, which must be `Incompatible` and name `what`.
fn refused(img: &Path, what: &str) {
    match Fs::open(open(img), MountOptions::default()) {
        // Features cjfs reads but does not write are refused for writing by their own error.
        Err(FsError::Incompatible(m) | FsError::ReadOnlyFeatures(m)) => {
            assert!(m.contains(what), "refusal should name {what:?}: {m}");
            eprintln!("refused as expected: {m}");
        }
        Err(e) => panic!("mounting an image with {what} failed with {e}, not Incompatible"),
        Ok(fs) => {
            let _ = fs.unmount();
            panic!("an image with {what} mounted");
        }
    }
}

#[test]
fn unsupported_features_are_refused_by_name() {
    let tmp = tmpdir();
    let mut tried = 0;
    for (features, name) in [
        ("^metadata_csum,^resize_inode,bigalloc", "bigalloc"),
        ("^metadata_csum,^resize_inode,encrypt", "encrypt"),
    ] {
        let img: PathBuf = tmp.path().join(format!("{name}.img"));
        if mke2fs(&img, 4096, features, "128M").is_none() {
            continue;
        }
        tried += 1;
        refused(&img, name);
        let _ = std::fs::remove_file(&img);
    }
    eprintln!("{tried} feature images refused");
}

/// The resize inode's double-indirect block (`resize_inode`, on by default in mke2fs) is
/// owned: `cjfs check` finds nothing leaked on a fresh image, and reports a map that
/// points outside the reserved GDT blocks.
#[test]
fn image_check_accounts_for_the_resize_inode() {
    use std::os::unix::fs::FileExt;

    use cjfs_fs::image_check::check_image;
    use cjfs_fs::mkfs::read_layout;
    use cjfs_fs::ondisk::inode::{Inode, RESIZE_INO};

    let tmp = tmpdir();
    let img = tmp.path().join("resize.img");
    if mke2fs(&img, 4096, "^metadata_csum", "256M").is_none() {
        return;
    }
    let ro = MountOptions { read_only: true, ..Default::default() };
    let fs = Fs::open(open(&img), ro.clone()).expect("mount");
    let sb = fs.superblock();
    assert!(sb.reserved_gdt_blocks > 0, "mke2fs reserved no GDT blocks");
    let r = check_image(&fs).expect("check");
    assert!(r.errors.is_empty(), "errors on a fresh mke2fs image: {:?}", r.errors);
    assert!(r.warnings.is_empty(), "warnings on a fresh mke2fs image: {:?}", r.warnings);
    assert_eq!(r.blocks_in_use, sb.block_count() - sb.free_blocks(), "blocks found vs. marked in use");
    fs.unmount().expect("unmount");

    // Point the first entry of the double-indirect block at the last block of the image.
    let (sb, descs) = read_layout(&*open(&img)).expect("layout");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&img).expect("open image");
    let isz = sb.inode_size();
    let mut raw = vec![0u8; isz];
    let at = descs[0].inode_table * 4096 + (u64::from(RESIZE_INO) - 1) * isz as u64;
    file.read_exact_at(&mut raw, at).expect("read inode 7");
    let dind = u64::from(Inode::decode(&raw).expect("decode inode 7").block_words()[13]);
    assert_ne!(dind, 0, "the resize inode has no double-indirect block");
    let mut blk = vec![0u8; 4096];
    file.read_exact_at(&mut blk, dind * 4096).expect("read the double-indirect block");
    let slot = blk.chunks_exact(4).position(|w| w != [0; 4]).expect("a mapped reserved GDT block");
    let last = (sb.block_count() - 1) as u32;
    file.write_all_at(&last.to_le_bytes(), dind * 4096 + 4 * slot as u64).expect("corrupt the map");
    drop(file);
    let fs = Fs::open(open(&img), ro).expect("mount");
    let r = check_image(&fs).expect("check");
    assert!(
        r.errors.iter().any(|e| e.contains("resize inode") && e.contains(&format!("maps block {last}"))),
        "the bad map is not reported: {:?}",
        r.errors
    );
    fs.unmount().expect("unmount");
}

/// Fresh `mkfs.ext4` images with 1, 2 and 4 KiB blocks: the whole-image check finds exactly
/// the blocks the bitmaps mark in use (with 1 KiB blocks, block 0 lies before the first
/// group and counts as in use without a bitmap bit) and warns of nothing. One stray bit
/// set in a block bitmap is then reported.
#[test]
fn image_check_counts_match_fresh_mke2fs_images_of_every_block_size() {
    use std::os::unix::fs::FileExt;

    use cjfs_fs::image_check::check_image;
    use cjfs_fs::mkfs::read_layout;
    use cjfs_fs::ondisk::bitmap;

    for (bs, size) in [(1024u32, "64M"), (2048, "64M"), (4096, "256M")] {
        let tmp = tmpdir();
        let img = tmp.path().join(format!("fresh{bs}.img"));
        // The defaults (metadata_csum); then without it, so a bitmap bit can be flipped
        // without also meeting a bitmap checksum mismatch.
        for features in ["metadata_csum", "^metadata_csum"] {
            if mke2fs(&img, bs, features, size).is_none() {
                return;
            }
            let ro = MountOptions { read_only: true, ..Default::default() };
            let fs = Fs::open(open(&img), ro.clone()).expect("mount");
            let sb = fs.superblock();
            let r = check_image(&fs).expect("check");
            assert!(r.errors.is_empty(), "{bs}-byte blocks, {features}: errors: {:?}", r.errors);
            assert!(r.warnings.is_empty(), "{bs}-byte blocks, {features}: warnings: {:?}", r.warnings);
            assert_eq!(
                r.blocks_in_use,
                sb.block_count() - sb.free_blocks(),
                "{bs}-byte blocks, {features}: blocks found vs. marked in use"
            );
            fs.unmount().expect("unmount");
        }
        // Mark the first free block of group 0 in use (the image is without metadata_csum).
        let (sb, descs) = read_layout(&*open(&img)).expect("layout");
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&img).expect("open image");
        let at = descs[0].block_bitmap * u64::from(bs);
        let mut bm = vec![0u8; bs as usize];
        file.read_exact_at(&mut bm, at).expect("read the block bitmap");
        let free =
            (0..sb.group_block_count(0) as usize).find(|&i| !bitmap::test(&bm, i)).expect("a free block");
        bitmap::set(&mut bm, free);
        file.write_all_at(&bm, at).expect("write the block bitmap");
        drop(file);
        let fs = Fs::open(open(&img), MountOptions { read_only: true, ..Default::default() }).expect("mount");
        let r = check_image(&fs).expect("check");
        assert!(
            r.warnings.iter().any(|w| w.contains("1 block(s) are marked in use but owned by nothing")),
            "{bs}-byte blocks: the stray bitmap bit is not reported: {:?}",
            r.warnings
        );
        fs.unmount().expect("unmount");
    }
}

/// Files of an ext3 file system are block-mapped (`crate::block_map`). As ext3 (no `extent`
/// feature) the file system opens read-only, its files, directories, slow symlinks read
/// back, and a read-write open is refused naming `^extent` with the image unchanged. Given
/// `extent` by tune2fs, as an upgrade to ext4 does, it is read-write with its block-mapped
/// journal: an overwrite and a partial truncate convert a file to extents (a map of more
/// runs than the inode holds needs a leaf), a growing directory converts too, a deleted
/// block-mapped file frees its indirect blocks; e2fsck and `check_image` find it clean and
/// a remount reads the same.
#[test]
fn ext3_block_mapped_files_read_and_change() {
    let tmp = tmpdir();
    let img = tmp.path().join("ext3.img");
    if mke2fs_with(&img, &["-t", "ext3", "-b", "1024"], "64M").is_none() {
        return;
    }
    // 1 KiB blocks: 12 direct, 256 single-, 65 536 double-indirect. 2 MiB reach the double
    // level, and the indirect blocks between the runs split the map into 9 runs.
    let big = content(2 << 20, 3);
    let mid = content(300_000, 5);
    let small = content(5_000, 7);
    for (name, data) in [("big", &big), ("mid", &mid), ("small", &small)] {
        std::fs::write(tmp.path().join(name), data).expect("write local file");
    }
    let target = "/a/slow/symlink/target/longer/than/the/sixty/bytes/of/i_block/x";
    let mut cmds = format!(
        "write {} big\nwrite {} mid\nmkdir d\nsymlink d/slow {target}\n",
        tmp.path().join("big").display(),
        tmp.path().join("mid").display()
    );
    for i in 0..120 {
        cmds += &format!("write {} d/f{i}\n", tmp.path().join("small").display());
    }
    if debugfs(&img, &cmds).is_none() {
        return;
    }
    let before = std::fs::read(&img).expect("read image");

    match Fs::open(open(&img), MountOptions::default()) {
        Err(FsError::ReadOnlyFeatures(m)) => assert!(m.contains("^extent"), "{m}"),
        other => panic!("read-write open of ext3: {:?}", other.map(|_| ())),
    }
    assert!(std::fs::read(&img).expect("read image") == before, "a refused open leaves the image unchanged");
    let ro = MountOptions { read_only: true, ..MountOptions::default() };
    let fs = Fs::open(open(&img), ro.clone()).expect("read-only open of ext3");
    let ino = |fs: &Fs, p: &str| fs.resolve(p).expect(p);
    assert_eq!(read_all(&fs, ino(&fs, "/big")), big);
    assert_eq!(read_all(&fs, ino(&fs, "/mid")), mid);
    assert_eq!(read_all(&fs, ino(&fs, "/d/f77")), small);
    assert_eq!(names(&fs, ino(&fs, "/d")).len(), 121);
    assert_eq!(fs.readlink(ino(&fs, "/d/slow")).expect("readlink"), target.as_bytes());
    let r = cjfs_fs::image_check::check_image(&fs).expect("check");
    assert!(r.errors.is_empty() && r.warnings.is_empty(), "ext3: {:?} {:?}", r.errors, r.warnings);
    fs.unmount().expect("unmount");
    assert!(
        std::fs::read(&img).expect("read image") == before,
        "a read-only open leaves the image unchanged"
    );

    if upgrade_to_extents(&img).is_none() {
        return;
    }
    let fs = mount(&img);
    let flags = |fs: &Fs, p: &str| fs.getattr(fs.resolve(p).expect(p)).expect("getattr").flags;
    assert_eq!(flags(&fs, "/big") & 0x80000, 0, "still block-mapped before a change");
    let mut big2 = big.clone();
    big2[1_500_000..1_500_100].fill(0xAB);
    fs.write(ino(&fs, "/big"), 1_500_000, &big2[1_500_000..1_500_100]).expect("overwrite");
    fs.setattr(ino(&fs, "/mid"), &SetAttr { size: Some(100_000), ..SetAttr::default() }).expect("truncate");
    let d = ino(&fs, "/d");
    for i in 0..400 {
        fs.create(d, format!("new{i}").as_bytes(), 0o644, 0, 0).expect("create in a block-mapped directory");
    }
    fs.unlink(d, b"f3").expect("unlink a block-mapped file");
    fs.unlink(ROOT_INO, b"small-missing").expect_err("no such file");
    for p in ["/big", "/mid", "/d"] {
        assert_ne!(flags(&fs, p) & 0x80000, 0, "{p} converted to extents");
    }
    assert_eq!(read_all(&fs, ino(&fs, "/big")), big2);
    assert_eq!(read_all(&fs, ino(&fs, "/mid")), mid[..100_000]);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
    let fs = mount(&img);
    assert_eq!(read_all(&fs, ino(&fs, "/big")), big2);
    assert_eq!(read_all(&fs, ino(&fs, "/mid")), mid[..100_000]);
    assert_eq!(read_all(&fs, ino(&fs, "/d/f77")), small);
    assert_eq!(names(&fs, ino(&fs, "/d")).len(), 520);
    assert_eq!(fs.readlink(ino(&fs, "/d/slow")).expect("readlink"), target.as_bytes());
    let r = cjfs_fs::image_check::check_image(&fs).expect("check");
    assert!(r.errors.is_empty() && r.warnings.is_empty(), "after changes: {:?} {:?}", r.errors, r.warnings);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}

/// `meta_bg` (mke2fs `-O meta_bg`, and what resize2fs leaves when it grows a file system
/// past its reserved GDT blocks): each block of group descriptors lives in the first group
/// of its meta group. With 1 KiB blocks and 1024-block groups the 64 groups' descriptors
/// are spread over four blocks; a 30 MB file takes blocks in three meta groups, so their
/// descriptors are found and updated where they are. The usual round trip, then e2fsck and
/// `check_image` clean and the data read back after a remount.
#[test]
fn meta_bg_images_read_and_change() {
    let tmp = tmpdir();
    let img = tmp.path().join("meta_bg.img");
    if mke2fs_with(&img, &["-t", "ext4", "-b", "1024", "-g", "1024", "-O", "meta_bg,^resize_inode"], "64M")
        .is_none()
    {
        return;
    }
    populated_image_round_trip(&tmp, &img);
    let big = content(30_000_000, 11);
    let fs = mount(&img);
    let f = fs.create(ROOT_INO, b"spread", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, &big).expect("write 30 MB");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
    let fs = mount(&img);
    assert_eq!(read_all(&fs, fs.lookup(ROOT_INO, b"spread").expect("lookup").ino), big);
    let r = cjfs_fs::image_check::check_image(&fs).expect("check");
    assert!(r.errors.is_empty() && r.warnings.is_empty(), "{:?} {:?}", r.errors, r.warnings);
    fs.unmount().expect("unmount");
}

/// A xorshift stream from `seed`: each call gives a number below its argument (0 for 0).
fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n.max(1)
    }
}

/// One change of file `ino` (named `name` in the root) and of its model `model`, by `kind`:
/// 0 overwrite at `off`, 1 append `pad` bytes past the end, 2 shrink to `off`, 3 grow by
/// `n`, 4 truncate to zero, 5 punch or 6 zero `n` bytes at `off`, 7 fallocate them, 8
/// unlink (then false: the file is gone). Written data is `n` bytes of pattern `seed`.
fn change_file(
    fs: &Fs,
    ino: Ino,
    name: &str,
    model: &mut Vec<u8>,
    kind: usize,
    at: (u64, u64, u64),
    seed: u8,
) -> bool {
    use cjfs_fs::FallocMode;
    let (off, n, pad) = at;
    let len = model.len() as u64;
    match kind {
        0 | 1 => {
            let at = if kind == 0 { off } else { len + pad };
            let data = content(n as usize, seed ^ 0x55);
            fs.write(ino, at, &data).expect("write");
            let end = (at + n) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[at as usize..end].copy_from_slice(&data);
        }
        2..=4 => {
            let size = match kind {
                2 => off.min(len),
                3 => len + n,
                _ => 0,
            };
            fs.setattr(ino, &SetAttr { size: Some(size), ..SetAttr::default() }).expect("truncate");
            model.resize(size as usize, 0);
        }
        5 | 6 => {
            let mode =
                if kind == 5 { FallocMode::PunchHole } else { FallocMode::ZeroRange { keep_size: true } };
            fs.fallocate(ino, mode, off, n).expect("punch/zero");
            let end = ((off + n) as usize).min(model.len());
            if (off as usize) < end {
                model[off as usize..end].fill(0);
            }
        }
        7 => {
            fs.fallocate(ino, FallocMode::Allocate, off, n).expect("fallocate");
            if model.len() < (off + n) as usize {
                model.resize((off + n) as usize, 0);
            }
        }
        _ => {
            fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
            return false;
        }
    }
    true
}

/// The first change to each of many block-mapped files of an upgraded ext3 file system is a
/// different operation (overwrite, append, shrink, grow, truncate to zero, punch, zero a
/// range, fallocate, unlink), on files of every map depth, sparse ones among them (a
/// hole in the direct, single- and double-indirect ranges); two more random changes follow.
/// A model of each file checks every read; e2fsck and `check_image` judge the result.
#[test]
fn block_mapped_files_survive_every_first_change() {
    let tmp = tmpdir();
    let img = tmp.path().join("ext3ops.img");
    if mke2fs_with(&img, &["-t", "ext3", "-b", "1024"], "96M").is_none() {
        return;
    }
    // 1 KiB blocks: direct below 12 KiB, single-indirect below 268 KiB, double above.
    let sizes = [5_000u64, 11_000, 40_000, 250_000, 700_000, 1_500_000];
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut cmds = String::new();
    for (i, &len) in sizes.iter().cycle().take(36).enumerate() {
        let mut data = content(len as usize, i as u8);
        let name = format!("f{i}");
        let host = tmp.path().join(&name);
        if i % 3 == 2 {
            // Sparse: holes of whole blocks in each range the file reaches.
            for (from, to) in [(2_048usize, 6_144usize), (20_480, 60_000), (300_000, 420_000)] {
                if to <= data.len() {
                    data[from..to].fill(0);
                }
            }
            let f = std::fs::File::create(&host).expect("host file");
            use std::os::unix::fs::FileExt;
            let mut off = 0;
            while off < data.len() {
                let end = (off + 1024).min(data.len());
                if data[off..end].iter().any(|&b| b != 0) {
                    f.write_all_at(&data[off..end], off as u64).expect("write");
                }
                off = end;
            }
            f.set_len(data.len() as u64).expect("size");
        } else {
            std::fs::write(&host, &data).expect("host file");
        }
        cmds += &format!("write {} {name}\n", host.display());
        files.push((name, data));
    }
    if debugfs(&img, &cmds).is_none() {
        return;
    }
    if upgrade_to_extents(&img).is_none() {
        return;
    }
    let fs = mount(&img);
    let mut next = below(0x9e37_79b9_7f4a_7c15u64);
    let mut gone = Vec::new();
    for (i, (name, model)) in files.iter_mut().enumerate() {
        let ino = fs.lookup(ROOT_INO, name.as_bytes()).expect("lookup").ino;
        assert_eq!(read_all(&fs, ino), *model, "{name} as ext3 wrote it");
        let a = fs.getattr(ino).expect("getattr");
        assert_eq!(a.flags & 0x80000, 0, "{name} is block-mapped");
        if i % 3 == 2 && model.len() > 6_144 {
            assert!(a.blocks * 512 < model.len() as u64, "{name} is sparse: {} sectors", a.blocks);
        }
        for step in 0..3 {
            let kind = if step == 0 { i % 9 } else { next(8) as usize };
            let len = model.len() as u64;
            let (off, n, pad) = (next(len + 4096), 1 + next(70_000), next(5000));
            if !change_file(&fs, ino, name, model, kind, (off, n, pad), (i + step) as u8) {
                gone.push(name.clone());
                break;
            }
            assert_eq!(read_all(&fs, ino), *model, "{name} after step {step} (operation {kind})");
        }
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
    let fs = mount(&img);
    for (name, model) in &files {
        match fs.lookup(ROOT_INO, name.as_bytes()) {
            Ok(a) => assert_eq!(read_all(&fs, a.ino), *model, "{name} after a remount"),
            Err(_) => assert!(gone.contains(name), "{name} lost"),
        }
    }
    let r = cjfs_fs::image_check::check_image(&fs).expect("check");
    assert!(r.errors.is_empty() && r.warnings.is_empty(), "{:?} {:?}", r.errors, r.warnings);
    fs.unmount().expect("unmount");
}

/// The kernel as judge of the two layouts cjfs learned from other tools: an upgraded ext3
/// file system whose block-mapped file and directory cjfs converted to extents, and a
/// `meta_bg` file system cjfs wrote across three meta groups. The kernel mounts each, reads
/// what cjfs wrote, writes a file of its own; e2fsck finds the result clean and cjfs reads
/// the kernel's file.
#[test]
fn the_kernel_reads_converted_ext3_and_meta_bg_images() {
    let tmp = tmpdir();
    let ext3 = tmp.path().join("ext3.img");
    let meta = tmp.path().join("meta.img");
    if mke2fs_with(&ext3, &["-t", "ext3", "-b", "1024"], "64M").is_none()
        || mke2fs_with(
            &meta,
            &["-t", "ext4", "-b", "1024", "-g", "1024", "-O", "meta_bg,^resize_inode"],
            "64M",
        )
        .is_none()
    {
        return;
    }
    let big = content(2 << 20, 21);
    std::fs::write(tmp.path().join("big"), &big).expect("host file");
    if debugfs(&ext3, &format!("write {} big\nmkdir d\n", tmp.path().join("big").display())).is_none() {
        return;
    }
    if upgrade_to_extents(&ext3).is_none() {
        return;
    }
    let mut big2 = big.clone();
    big2[700_000..760_000].fill(0x5a);
    let spread = content(30_000_000, 22);
    {
        let fs = mount(&ext3);
        let ino = fs.resolve("/big").expect("big");
        fs.write(ino, 700_000, &big2[700_000..760_000]).expect("overwrite");
        let d = fs.resolve("/d").expect("d");
        for i in 0..200 {
            fs.create(d, format!("n{i}").as_bytes(), 0o644, 0, 0).expect("create");
        }
        fs.unmount().expect("unmount");
        let fs = mount(&meta);
        let f = fs.create(ROOT_INO, b"spread", 0o644, 0, 0).expect("create");
        fs.write(f.ino, 0, &spread).expect("write");
        fs.unmount().expect("unmount");
    }
    for (img, path, want) in [(&ext3, "big", &big2), (&meta, "spread", &spread)] {
        let mnt = tmp.path().join("mnt");
        let Some(m) = kernel_mount(img, &mnt) else { return };
        assert!(std::fs::read(mnt.join(path)).expect("kernel read") == *want, "the kernel reads {path}");
        if path == "big" {
            assert_eq!(std::fs::read_dir(mnt.join("d")).expect("readdir").count(), 200);
        }
        std::fs::write(mnt.join("from-kernel"), b"written by the kernel").expect("kernel write");
        drop(m);
        assert_fsck_clean(img);
        let fs = mount(img);
        assert_eq!(
            read_all(&fs, fs.resolve("/from-kernel").expect("kernel's file")),
            b"written by the kernel"
        );
        fs.unmount().expect("unmount");
    }
}

/// `EXT4_INLINE_DATA_FL`: the inode keeps its data in itself.
const INLINE_FL: u32 = 0x1000_0000;

/// Create empty files `{prefix}0`, `{prefix}1`, ... in inline directory `d` until one moves it
/// into a block: the ones before stay in the inode, the first in `i_block`'s room or in
/// `system.data` as it grows. Returns the names made and how many went in place.
fn add_until_block(fs: &Fs, d: Ino, prefix: &str) -> (Vec<Vec<u8>>, usize) {
    let inline = |fs: &Fs| fs.getattr(d).expect("getattr").flags & INLINE_FL != 0;
    assert!(inline(fs), "{prefix}: the directory starts inline");
    let mut made = Vec::new();
    let mut spilled = false;
    for i in 0..200 {
        let name = format!("{prefix}{i}").into_bytes();
        fs.create(d, &name, 0o644, 0, 0).expect("create in an inline directory");
        made.push(name);
        if !inline(fs) {
            return (made, i);
        }
        let size = fs.getattr(d).expect("getattr").size;
        spilled |= size > 60;
        assert_eq!(size % 4, 0, "{prefix}: an inline directory's size is i_block and system.data");
    }
    panic!("{prefix}: 200 entries and the directory is still inline (spilled: {spilled})");
}

/// `inline_data` file systems are written. Files mke2fs stored inline take every kind of
/// first change (overwrite, append, shrink, grow, truncate to zero, punch, zero a range,
/// fallocate, unlink), then two random ones, checked against a model; shrinking keeps them
/// inline. Inline directories lose, repoint and gain entries in place (also in the part of
/// the directory kept in `system.data`, which grows for them, and which the kernel makes when
/// it can mount here) and move into a block when an entry no longer fits; a moved inline directory's `..` follows;
/// `system.data` stays in the inode beside attributes added later. e2fsck, `check_image`
/// and the kernel judge the result.
#[test]
fn inline_data_files_and_directories_change() {
    let tmp = tmpdir();
    let src = tmp.path().join("src");
    for d in ["d", "a/inner", "b"] {
        std::fs::create_dir_all(src.join(d)).expect("mkdir");
    }
    let sizes = [0usize, 6, 59, 60, 61, 100, 150, 300];
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..27 {
        let data = content(sizes[i % sizes.len()], i as u8);
        std::fs::write(src.join(format!("f{i}")), &data).expect("write");
        files.push((format!("f{i}"), data));
    }
    for n in ["n0", "n1", "n2"] {
        std::fs::write(src.join("d").join(n), n).expect("write");
    }
    std::fs::write(src.join("a/inner/z"), b"z").expect("write");
    std::fs::write(src.join("x"), content(150, 99)).expect("write");
    let img = tmp.path().join("inline.img");
    let s = src.to_str().expect("utf-8 path");
    if mke2fs_with(&img, &["-t", "ext4", "-b", "4096", "-I", "512", "-O", "inline_data", "-d", s], "64M")
        .is_none()
    {
        return;
    }
    // The kernel adds an inline directory that spills into `system.data` (mke2fs moves a
    // directory into a block when `i_block` is full).
    let mnt = tmp.path().join("mnt");
    let kernel_dir = match kernel_mount(&img, &mnt) {
        Some(m) => {
            std::fs::create_dir(mnt.join("k")).expect("kernel mkdir");
            for i in 0..12 {
                std::fs::write(mnt.join(format!("k/e{i}")), format!("{i}")).expect("kernel write");
            }
            drop(m);
            true
        }
        None => false,
    };

    let fs = mount(&img);
    let ino = |fs: &Fs, p: &str| fs.resolve(p).expect(p);
    let flags = |fs: &Fs, p: &str| fs.getattr(fs.resolve(p).expect(p)).expect("getattr").flags;
    for p in ["/f5", "/d", "/a/inner", "/b", "/x"] {
        assert_ne!(flags(&fs, p) & INLINE_FL, 0, "{p} is inline as mke2fs made it");
    }
    if kernel_dir {
        assert_ne!(flags(&fs, "/k") & INLINE_FL, 0, "/k is inline as the kernel made it");
        assert!(fs.getattr(ino(&fs, "/k")).expect("getattr").size > 60, "/k spills into system.data");
    }

    let mut next = below(0x2545_f491_4f6c_dd1du64);
    let mut gone = Vec::new();
    for (i, (name, model)) in files.iter_mut().enumerate() {
        let f = fs.lookup(ROOT_INO, name.as_bytes()).expect("lookup").ino;
        assert_eq!(read_all(&fs, f), *model, "{name} as mke2fs wrote it");
        for step in 0..3 {
            let kind = if step == 0 { i % 9 } else { next(8) as usize };
            let len = model.len() as u64;
            let (off, n, pad) = (next(len + 200), 1 + next(if step == 0 { 100 } else { 9000 }), next(300));
            if !change_file(&fs, f, name, model, kind, (off, n, pad), (i + step) as u8) {
                gone.push(name.clone());
                break;
            }
            if step == 0 && (kind == 2 || kind == 4) {
                assert_ne!(fs.getattr(f).expect("getattr").flags & INLINE_FL, 0, "{name} shrunk in place");
            }
            assert_eq!(read_all(&fs, f), *model, "{name} after step {step} (operation {kind})");
        }
    }
    // Attributes beside the inline data: system.data stays in the inode body.
    let x = ino(&fs, "/x");
    fs.setxattr(x, b"user.small", b"s", XattrFlags::Create).expect("setxattr");
    fs.setxattr(x, b"user.big", &content(400, 3), XattrFlags::Create).expect("setxattr");
    assert_eq!(read_all(&fs, x), content(150, 99));
    assert_ne!(flags(&fs, "/x") & INLINE_FL, 0);

    // Entries removed and repointed in place; added ones go in place (i_block, then
    // system.data grown to the inode's room) until one moves the directory into a block.
    let d = ino(&fs, "/d");
    fs.unlink(d, b"n1").expect("unlink in an inline directory");
    fs.rename(d, b"n0", d, b"n2", RenameFlags::default()).expect("rename over a name");
    assert_ne!(flags(&fs, "/d") & INLINE_FL, 0, "/d changed in place");
    let (added, in_place) = add_until_block(&fs, d, "added");
    // 512-byte inodes: 44 bytes of i_block and 324 of system.data for 12- and 16-byte records.
    assert!(in_place >= 20, "/d took {in_place} entries in place");
    let mut want: BTreeSet<Vec<u8>> = added.iter().cloned().collect();
    want.insert(b"n2".to_vec());
    assert_eq!(names(&fs, d), want);
    let want_d = want;
    assert_eq!(read_all(&fs, ino(&fs, "/d/n2")), b"n0");
    // A moved inline directory: its `..` is rewritten in place, its new parent grows a block.
    let (a, b) = (ino(&fs, "/a"), ino(&fs, "/b"));
    fs.rename(a, b"inner", b, b"inner", RenameFlags::default()).expect("move an inline directory");
    assert_ne!(flags(&fs, "/b/inner") & INLINE_FL, 0);
    // /b took inner in place; more names spill into a system.data it grows, all left inline
    // for e2fsck and the kernel to read.
    let mut want_b: BTreeSet<Vec<u8>> = [b"inner".to_vec()].into();
    for i in 0..8 {
        let name = format!("p{i}").into_bytes();
        fs.create(b, &name, 0o644, 0, 0).expect("create in an inline directory");
        want_b.insert(name);
    }
    assert_ne!(flags(&fs, "/b") & INLINE_FL, 0, "/b kept its entries inline");
    assert!(fs.getattr(b).expect("getattr").size > 60, "/b spilled into system.data");
    assert_eq!(names(&fs, b), want_b);
    fs.rmdir(ROOT_INO, b"a").expect("rmdir an emptied inline directory");
    if kernel_dir {
        let k = ino(&fs, "/k");
        for e in [b"e9".as_slice(), b"e5", b"e0"] {
            fs.unlink(k, e).expect("unlink in system.data and i_block");
        }
        fs.rename(k, b"e1", k, b"e11", RenameFlags::default()).expect("rename over a name");
        assert_ne!(flags(&fs, "/k") & INLINE_FL, 0, "/k changed in place");
        // Into system.data, which the kernel grew to the inode's room.
        fs.mkdir(k, b"sub", 0o755, 0, 0).expect("mkdir in an inline directory");
        assert_ne!(flags(&fs, "/k") & INLINE_FL, 0, "/k gained sub in place");
        add_until_block(&fs, k, "m");
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);

    let fs = mount(&img);
    for (name, model) in &files {
        match fs.lookup(ROOT_INO, name.as_bytes()) {
            Ok(a) => assert_eq!(read_all(&fs, a.ino), *model, "{name} after a remount"),
            Err(_) => assert!(gone.contains(name), "{name} lost"),
        }
    }
    assert_eq!(fs.getxattr(ino(&fs, "/x"), b"user.big").expect("getxattr"), content(400, 3));
    assert_eq!(read_all(&fs, ino(&fs, "/b/inner/z")), b"z");
    let r = cjfs_fs::image_check::check_image(&fs).expect("check");
    assert!(r.errors.is_empty() && r.warnings.is_empty(), "{:?} {:?}", r.errors, r.warnings);
    fs.unmount().expect("unmount");

    let Some(m) = kernel_mount(&img, &mnt) else { return };
    for (name, model) in &files {
        match std::fs::read(mnt.join(name)) {
            Ok(got) => assert!(got == *model, "the kernel reads {name}"),
            Err(_) => assert!(gone.contains(name), "{name} lost"),
        }
    }
    assert_eq!(std::fs::read(mnt.join("d/n2")).expect("kernel read"), b"n0");
    assert_eq!(std::fs::read(mnt.join("b/inner/z")).expect("kernel read"), b"z");
    let mut k: Vec<String> = std::fs::read_dir(mnt.join("k"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    k.sort();
    k.retain(|n| !n.starts_with('m'));
    let mut want: Vec<String> = [2, 3, 4, 6, 7, 8, 10, 11].iter().map(|i| format!("e{i}")).collect();
    want.push("sub".into());
    want.sort();
    assert_eq!(k, want);
    let kernel_names = |dir: &str| -> BTreeSet<Vec<u8>> {
        let entries = std::fs::read_dir(mnt.join(dir)).expect("readdir");
        entries.map(|e| e.expect("entry").file_name().into_encoded_bytes()).collect()
    };
    assert_eq!(kernel_names("d"), want_d, "the kernel lists /d");
    assert_eq!(kernel_names("b"), want_b, "the kernel lists /b");
    // The kernel changes the system.data cjfs grew in place, without rehashing its entry:
    // cjfs must have left the in-inode hash 0, as the kernel does, or e2fsck aborts.
    std::fs::write(mnt.join("b/k"), b"k").expect("kernel create in a grown inline directory");
    std::fs::remove_file(mnt.join("b/p7")).expect("kernel unlink in system.data");
    assert_eq!(std::fs::read(mnt.join("k/e11")).expect("kernel read"), b"1");
    std::fs::write(mnt.join("b/inner/from-kernel"), b"k").expect("kernel write");
    drop(m);
    assert_fsck_clean(&img);
}

/// readdir of inline directories resumes where it left off across in-place removals and
/// additions and across the move into a block, read in hash order (`dir_index`, as the kernel reads
/// inline directories then) and linearly (without it): every entry present throughout is
/// returned exactly once.
#[test]
fn inline_directory_readdir_survives_removals_and_the_move_into_a_block() {
    let tmp = tmpdir();
    for features in ["inline_data", "inline_data,^dir_index"] {
        // Four short names: mke2fs keeps them in i_block (it moves a fuller directory into a
        // block rather than into system.data).
        let src = tmp.path().join(format!("src-{features}"));
        std::fs::create_dir_all(src.join("d")).expect("mkdir");
        for i in 0..4 {
            std::fs::write(src.join(format!("d/e{i}")), format!("{i}")).expect("write");
        }
        let s = src.to_str().expect("utf-8 path");
        for change in ["unlink", "create", "spill"] {
            let img = tmp.path().join(format!("{features}-{change}.img"));
            let args = ["-t", "ext4", "-b", "4096", "-I", "1024", "-O", features, "-d", s];
            if mke2fs_with(&img, &args, "32M").is_none() {
                return;
            }
            let fs = mount(&img);
            let d = fs.resolve("/d").expect("d");
            if change != "unlink" {
                // A hole first: e1's record goes to e0, which an added entry or the move
                // into a block keeps.
                fs.unlink(d, b"e1").expect("unlink");
            }
            assert_ne!(fs.getattr(d).expect("getattr").flags & INLINE_FL, 0, "{features}: /d is inline");
            let first = fs.readdir(d, 0, 3).expect("readdir");
            let mut seen: Vec<Vec<u8>> = first.iter().map(|e| e.name.clone()).collect();
            let cookie = first.last().expect("entries").next_offset;
            if change == "unlink" {
                // The entry after the last one returned: read linearly, its record goes to
                // that one, whose end moves past the cookie.
                let all = fs.readdir(d, 0, 100).expect("readdir");
                let next = all[3].name.clone();
                fs.unlink(d, &next).expect("unlink");
                assert_ne!(
                    fs.getattr(d).expect("getattr").flags & INLINE_FL,
                    0,
                    "{features}: unlinked in place"
                );
            } else if change == "create" {
                fs.create(d, b"new", 0o644, 0, 0).expect("create");
                assert_ne!(
                    fs.getattr(d).expect("getattr").flags & INLINE_FL,
                    0,
                    "{features}: added in place"
                );
            } else {
                add_until_block(&fs, d, "new");
            }
            let mut off = cookie;
            loop {
                let page = fs.readdir(d, off, 1).expect("readdir");
                let Some(last) = page.last() else { break };
                off = last.next_offset;
                seen.extend(page.into_iter().map(|e| e.name));
            }
            seen.retain(|n| !n.starts_with(b"new"));
            let mut sorted = seen.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), seen.len(), "{features}, {change}: an entry came twice: {seen:?}");
            let want = 5;
            assert_eq!(seen.len(), want, "{features}, {change}: entries missing: {seen:?}");
            fs.unmount().expect("unmount");
            assert_fsck_clean(&img);
        }
    }
}

/// On a full file system an inline directory still gains entries in place, needing no
/// block; the entry that would move it into a block is refused with ENOSPC and changes
/// nothing (the directory stays inline with every name it had, e2fsck clean).
#[test]
fn a_full_file_system_still_adds_entries_to_inline_directories() {
    let tmp = tmpdir();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("d")).expect("mkdir");
    std::fs::write(src.join("d/a"), b"a").expect("write");
    let img = tmp.path().join("full.img");
    let s = src.to_str().expect("utf-8 path");
    let args = ["-t", "ext4", "-b", "4096", "-I", "512", "-m", "0", "-O", "inline_data", "-d", s];
    if mke2fs_with(&img, &args, "16M").is_none() {
        return;
    }
    let fs = mount(&img);
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).expect("create").ino;
    let chunk = vec![0x5au8; 1 << 20];
    let mut off = 0u64;
    loop {
        match fs.write(big, off, &chunk) {
            Ok(n) => off += n as u64,
            Err(FsError::NoSpace(_)) => break,
            Err(e) => panic!("write at {off}: {e}"),
        }
    }
    assert_eq!(fs.statfs().bavail, 0, "the file system is full");
    let d = fs.resolve("/d").expect("d");
    let (added, in_place) = {
        let mut made = vec![b"a".to_vec()];
        let mut n = 0;
        loop {
            let name = format!("entry-{n}").into_bytes();
            match fs.create(d, &name, 0o644, 0, 0) {
                Ok(_) => made.push(name),
                Err(FsError::NoSpace(_)) => break,
                Err(e) => panic!("create {n}: {e}"),
            }
            n += 1;
            assert!(n < 200, "200 entries and no ENOSPC");
        }
        (made.into_iter().collect::<BTreeSet<_>>(), n)
    };
    assert!(in_place >= 10, "{in_place} entries went in place");
    assert_ne!(fs.getattr(d).expect("getattr").flags & INLINE_FL, 0, "/d stays inline");
    assert_eq!(names(&fs, d), added);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
    let fs = mount(&img);
    assert_eq!(names(&fs, fs.resolve("/d").expect("d")), added, "after a remount");
    fs.unmount().expect("unmount");
}

/// `ea_inode` file systems: values the kernel put in EA inodes (one shared by two files)
/// are read; cjfs replaces, removes and adds values that go into EA inodes (too large for a
/// block, or not fitting beside the others), keeps an unchanged one's inode, frees one with
/// its last reference (a removed attribute, an unlinked file) and refuses a value past the
/// VFS limit. e2fsck, `check_image` and the kernel judge the result.
#[test]
fn ea_inode_values_are_read_and_written() {
    let tmp = tmpdir();
    for (bs, isize) in [("4096", "256"), ("1024", "512")] {
        let img = tmp.path().join(format!("ea-{bs}.img"));
        if mke2fs_with(&img, &["-t", "ext4", "-b", bs, "-I", isize, "-O", "ea_inode"], "64M").is_none() {
            return;
        }
        let shared = content(10_000, 1);
        let mut model: BTreeMap<&str, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
        let mnt = tmp.path().join(format!("mnt-{bs}"));
        let kernel = match kernel_mount(&img, &mnt) {
            Some(m) => {
                for f in ["k1", "k2", "k3"] {
                    std::fs::write(mnt.join(f), f).expect("kernel write");
                }
                // Equal values: the kernel shares one EA inode between them (refcount 2).
                set_xattr(&mnt.join("k1"), "user.big", &shared);
                set_xattr(&mnt.join("k2"), "user.big", &shared);
                for (i, n) in ["user.m1", "user.m2", "user.m3"].iter().enumerate() {
                    set_xattr(&mnt.join("k3"), n, &content(1500, 10 + i as u8));
                }
                set_xattr(&mnt.join("k3"), "user.huge", &content(65536, 9));
                drop(m);
                assert_fsck_clean(&img);
                model.insert("k1", [("user.big".to_string(), shared.clone())].into());
                model.insert("k2", [("user.big".to_string(), shared.clone())].into());
                true
            }
            None => false,
        };
        let fs = mount(&img);
        if kernel {
            let k3 = fs.resolve("/k3").expect("k3");
            assert_eq!(fs.getxattr(k3, b"user.huge").expect("kernel's huge value"), content(65536, 9));
            for (i, n) in [&b"user.m1"[..], b"user.m2", b"user.m3"].iter().enumerate() {
                assert_eq!(fs.getxattr(k3, n).expect("kernel value"), content(1500, 10 + i as u8));
            }
            let k1 = fs.resolve("/k1").expect("k1");
            assert_eq!(fs.getxattr(k1, b"user.big").expect("shared value"), shared);
            // Replaced in k1 (the shared inode keeps k2's reference), removed from k2 (freed).
            let v = content(20_000, 2);
            fs.setxattr(k1, b"user.big", &v, XattrFlags::Any).expect("replace a shared value");
            model.get_mut("k1").expect("k1").insert("user.big".into(), v);
            let k2 = fs.resolve("/k2").expect("k2");
            fs.setxattr(k2, b"user.small", b"s", XattrFlags::Create).expect("small beside");
            model.get_mut("k2").expect("k2").insert("user.small".into(), b"s".to_vec());
            fs.removexattr(k2, b"user.big").expect("remove the last reference");
            model.get_mut("k2").expect("k2").remove("user.big");
            fs.unlink(ROOT_INO, b"k3").expect("unlink a file with EA inodes");
        }
        let c1 = fs.create(ROOT_INO, b"c1", 0o644, 0, 0).expect("create").ino;
        let mut m1 = BTreeMap::new();
        // Too large for a block; then four that do not all fit beside it in the block.
        for (n, len, seed) in
            [("user.a", 5000, 3u8), ("user.b", 10, 4), ("user.c", 1500, 5), ("user.d", 1500, 6)]
        {
            let v = content(len, seed);
            fs.setxattr(c1, n.as_bytes(), &v, XattrFlags::Create).expect("setxattr");
            m1.insert(n.to_string(), v);
        }
        let e = content(1400, 7);
        fs.setxattr(c1, b"user.e", &e, XattrFlags::Create).expect("one more that needs an EA inode");
        m1.insert("user.e".into(), e);
        // Rewriting the list keeps the unchanged values where they are.
        fs.setxattr(c1, b"user.b", b"changed", XattrFlags::Replace).expect("replace a small one");
        m1.insert("user.b".into(), b"changed".to_vec());
        model.insert("c1", m1);
        let c2 = fs.create(ROOT_INO, b"c2", 0o644, 0, 0).expect("create").ino;
        fs.setxattr(c2, b"user.max", &content(65536, 8), XattrFlags::Create).expect("the VFS limit");
        let e = fs.setxattr(c2, b"user.over", &content(65537, 8), XattrFlags::Create).expect_err("past it");
        assert!(matches!(e, FsError::NoSpace(_)), "{e}");
        fs.unlink(ROOT_INO, b"c2").expect("unlink");
        for (f, attrs) in &model {
            let ino = fs.resolve(&format!("/{f}")).expect("file");
            for (n, v) in attrs {
                assert_eq!(&fs.getxattr(ino, n.as_bytes()).expect("getxattr"), v, "{f} {n}");
            }
        }
        fs.unmount().expect("unmount");
        assert_fsck_clean(&img);
        let fs = mount(&img);
        let r = cjfs_fs::image_check::check_image(&fs).expect("check");
        assert!(r.errors.is_empty() && r.warnings.is_empty(), "{bs}: {:?} {:?}", r.errors, r.warnings);
        for (f, attrs) in &model {
            let ino = fs.resolve(&format!("/{f}")).expect("file");
            let mut names: Vec<Vec<u8>> = fs.listxattr(ino).expect("listxattr");
            names.sort();
            let want: Vec<Vec<u8>> = attrs.keys().map(|n| n.as_bytes().to_vec()).collect();
            assert_eq!(names, want, "{f} after a remount");
            for (n, v) in attrs {
                assert_eq!(&fs.getxattr(ino, n.as_bytes()).expect("getxattr"), v, "{f} {n} after a remount");
            }
        }
        fs.unmount().expect("unmount");
        let Some(m) = kernel_mount(&img, &mnt) else { continue };
        for (f, attrs) in &model {
            for (n, v) in attrs {
                assert!(get_xattr(&mnt.join(f), n) == *v, "the kernel reads {f} {n}");
            }
        }
        set_xattr(&mnt.join("c1"), "user.a", &content(9000, 11));
        drop(m);
        assert_fsck_clean(&img);
    }
}

/// A damaged EA inode value (a byte of its data, which e2fsck does not check) spoils only
/// its own attribute, as in the kernel: the file's attributes are still listed, the others
/// read and changed, and the damaged one reads as corrupt and can be removed.
#[test]
fn a_damaged_ea_value_spoils_only_its_attribute() {
    let tmp = tmpdir();
    let img = tmp.path().join("ea-damaged.img");
    if mke2fs_with(&img, &["-t", "ext4", "-b", "4096", "-I", "256", "-O", "ea_inode"], "32M").is_none() {
        return;
    }
    let fs = mount(&img);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    fs.setxattr(f, b"user.small", b"s", XattrFlags::Create).expect("setxattr");
    fs.setxattr(f, b"user.big", &content(10_000, 5), XattrFlags::Create).expect("setxattr");
    fs.unmount().expect("unmount");
    // The EA inode is the first one after f, made in the same group.
    let Some(stat) = debugfs_r(&img, &format!("stat <{}>", f + 1)) else { return };
    assert!(stat.contains("Flags: 0x280000"), "inode {} is the EA inode: {stat}", f + 1);
    let bmap = debugfs_r(&img, &format!("bmap <{}> 0", f + 1)).expect("debugfs");
    let blk: u64 = bmap.trim().parse().expect("block number");
    let mut bytes = std::fs::read(&img).expect("read image");
    bytes[blk as usize * 4096 + 100] ^= 0xff;
    std::fs::write(&img, &bytes).expect("write image");
    let fs = mount(&img);
    let mut names = fs.listxattr(f).expect("listed despite the damage");
    names.sort();
    assert_eq!(names, vec![b"user.big".to_vec(), b"user.small".to_vec()]);
    assert_eq!(fs.getxattr(f, b"user.small").expect("the other value"), b"s");
    let e = fs.getxattr(f, b"user.big").expect_err("damaged");
    assert!(matches!(e, FsError::Corrupt(_)), "{e}");
    fs.setxattr(f, b"user.new", b"n", XattrFlags::Create).expect("a change beside it");
    fs.removexattr(f, b"user.big").expect("the damaged one removed");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}

/// `mkfs.ext4 -O quota,project` (with `ea_inode`, 4 KiB and 1 KiB blocks): cjfs keeps each
/// user's, group's and project's usage exact through creates, writes, truncates, chowns,
/// EA-inode attributes, unlinks and a remount, inserting hundreds of new ids (the quota
/// files grow); `e2fsck -fn`, which recounts every usage, finds the image clean. A link or
/// rename into a directory handing down another project id is refused with EXDEV, and new
/// inodes there inherit its project.
#[test]
fn quota_usage_follows_every_change() {
    use cjfs_fs::QuotaKind;
    let tmp = tmpdir();
    for bs in ["4096", "1024"] {
        let img = tmp.path().join(format!("quota-{bs}.img"));
        if mke2fs_with(&img, &["-t", "ext4", "-b", bs, "-I", "256", "-O", "quota,project,ea_inode"], "64M")
            .is_none()
        {
            return;
        }
        // A project directory (cjfs cannot set a project id: no FS_IOC_FSSETXATTR), then
        // e2fsck -fy moves its usage to project 42.
        if debugfs(
            &img,
            "mkdir /proj\nset_inode_field /proj projid 42\nset_inode_field /proj flags 0x20080000\n",
        )
        .is_none()
        {
            return;
        }
        // debugfs moved no usage: `cjfs check` finds project 42's missing, as e2fsck does.
        let ro = MountOptions { read_only: true, ..Default::default() };
        let fs = Fs::open(open(&img), ro.clone()).expect("ro");
        let r = cjfs_fs::image_check::check_image(&fs).expect("check");
        assert!(r.errors.iter().any(|e| e.contains("project quota id 42")), "{:?}", r.errors);
        fs.unmount().expect("unmount");
        assert!(e2fsck_exit(&img, &["-fy"]).is_some_and(|c| c <= 1), "e2fsck -fy after debugfs");
        assert_fsck_clean(&img);
        let fs = mount(&img);
        let proj = fs.resolve("/proj").expect("/proj");
        // Ids whose bytes differ at every level of the quota tree.
        let ids: Vec<u32> = (0..240u32).map(|i| 1000 + i * 37 + (i % 5) * 0x0103_0000).collect();
        let mut files = Vec::new();
        for (i, &uid) in ids.iter().enumerate() {
            let name = format!("f{i}");
            let a = fs.create(ROOT_INO, name.as_bytes(), 0o644, uid, 100 + (i as u32 % 7)).expect("create");
            fs.write(a.ino, 0, &content(i * 700 % 20_000, i as u8)).expect("write");
            files.push((name, a.ino));
        }
        let u = fs.quota_usage(QuotaKind::User, ids[3]).expect("usage").expect("an entry for a new uid");
        let a = fs.getattr(files[3].1).expect("getattr");
        assert_eq!(u, (a.blocks * 512, 1), "uid {}'s usage is its one file", ids[3]);
        // New inodes below /proj inherit project 42; cross-project names are refused.
        let sub = fs.mkdir(proj, b"sub", 0o755, 7, 7).expect("mkdir in /proj").ino;
        let p = fs.create(sub, b"pf", 0o644, 7, 7).expect("create in /proj/sub").ino;
        fs.write(p, 0, &content(50_000, 3)).expect("write");
        let pu = fs.quota_usage(QuotaKind::Project, 42).expect("usage");
        assert!(pu.is_some_and(|(b, n)| b >= 50_000 && n == 3), "project 42: {pu:?}");
        match fs.link(files[0].1, proj, b"l") {
            Err(FsError::CrossProject(_)) => {}
            r => panic!("link into another project: {r:?}"),
        }
        match fs.rename(ROOT_INO, b"f1", proj, b"r", RenameFlags::default()) {
            Err(e) => assert_eq!(e.errno(), libc::EXDEV, "{e}"),
            Ok(()) => panic!("rename into another project succeeded"),
        }
        fs.link(p, sub, b"pf2").expect("link within the project");
        // +P is a directory's flag (dropped on a file, as ext4 masks it); a file given
        // another project cannot even be renamed within its directory (`ext4_rename`).
        let pflag = cjfs_fs::ondisk::inode::EXT4_PROJINHERIT_FL;
        let a6 = fs.set_flags(files[6].1, pflag, pflag).expect("chattr +P on a file");
        assert_eq!(a6.flags & pflag, 0, "+P kept on a regular file");
        let q = fs.create(sub, b"other", 0o644, 7, 7).expect("create").ino;
        fs.set_project(q, 43).expect("set_project");
        match fs.rename(sub, b"other", sub, b"renamed", RenameFlags::default()) {
            Err(e) => assert_eq!(e.errno(), libc::EXDEV, "{e}"),
            Ok(()) => panic!("a rename within a directory of another project succeeded"),
        }
        fs.unlink(sub, b"other").expect("unlink");
        // Owners change; an attribute in an EA inode counts one more inode.
        for (name, ino) in files.iter().step_by(3) {
            let set = SetAttr { uid: Some(5000), gid: Some(5000), ..Default::default() };
            fs.setattr(*ino, &set).unwrap_or_else(|e| panic!("chown {name}: {e}"));
        }
        fs.setxattr(files[1].1, b"user.big", &content(9000, 1), XattrFlags::Create).expect("EA inode value");
        // A project id set directly (chattr -p): the file's usage moves to project 9.
        let a5 = fs.set_project(files[5].1, 9).expect("set_project");
        assert_eq!(
            (a5.projid, fs.quota_usage(QuotaKind::Project, 9).expect("usage")),
            (9, Some((a5.blocks * 512, 1)))
        );
        let set = SetAttr { size: Some(100), ..Default::default() };
        fs.setattr(files[2].1, &set).expect("truncate");
        for (name, _) in files.iter().skip(4).step_by(4) {
            fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
        }
        fs.unmount().expect("unmount");
        assert_fsck_clean(&img);

        let fs = mount(&img);
        let (b, n) = fs.quota_usage(QuotaKind::User, 5000).expect("usage").expect("uid 5000");
        assert!(b > 0 && n >= 40, "uid 5000: {b} bytes, {n} inodes");
        // Everything uid 5000 owns goes: its usage returns to zero.
        for (i, (name, ino)) in files.iter().enumerate() {
            if i % 3 == 0 && !(i >= 4 && (i - 4) % 4 == 0) {
                let _ = ino;
                fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink uid 5000's file");
            }
        }
        assert_eq!(fs.quota_usage(QuotaKind::User, 5000).expect("usage"), Some((0, 0)));
        fs.removexattr(files[1].1, b"user.big").expect("removexattr");
        fs.unlink(sub, b"pf").expect("unlink");
        // A crash while an unlinked file is open: the next mount frees the orphan, and its
        // usage with it.
        let o = fs.create(ROOT_INO, b"doomed", 0o644, 3000, 3000).expect("create").ino;
        fs.write(o, 0, &content(100_000, 5)).expect("write");
        fs.open_file(o).expect("open");
        fs.unlink(ROOT_INO, b"doomed").expect("unlink");
        fs.fsync(o, false).expect("fsync");
        fs.journal().force().expect("force");
        assert!(
            fs.quota_usage(QuotaKind::User, 3000)
                .expect("usage")
                .is_some_and(|(b, n)| b >= 100_000 && n == 1)
        );
        let crashed = tmp.path().join(format!("quota-{bs}-crash.img"));
        std::fs::copy(&img, &crashed).expect("copy the image mid-mount");
        fs.release(o).expect("release");
        fs.unmount().expect("unmount");
        assert_fsck_clean(&img);
        let (fs, report) = Fs::open_with_report(open(&crashed), MountOptions::default()).expect("recover");
        assert_eq!(report.orphans_cleaned, 1, "the orphan is freed");
        assert_eq!(fs.quota_usage(QuotaKind::User, 3000).expect("usage"), Some((0, 0)));
        fs.unmount().expect("unmount");
        assert_fsck_clean(&crashed);
        let fs = Fs::open(open(&img), ro).expect("ro");
        let r = cjfs_fs::image_check::check_image(&fs).expect("check");
        assert!(r.errors.is_empty() && r.warnings.is_empty(), "{:?} {:?}", r.errors, r.warnings);
        fs.unmount().expect("unmount");
    }
}

/// `mkfs.ext4 -O casefold` (4 KiB and 1 KiB blocks): a directory made casefolded with +F
/// matches names as the kernel does (case, precomposed or decomposed accents, ignorable
/// characters), keeps each name as it was given, and hashes it casefolded: e2fsck, which
/// recomputes every htree hash with its own Unicode 12.1 tables, finds the image clean
/// after hundreds of names in many scripts made the directory indexed.
#[test]
fn casefolded_directories_match_names_as_ext4_does() {
    use cjfs_fs::ondisk::inode::EXT4_CASEFOLD_FL;
    let tmp = tmpdir();
    for bs in ["4096", "1024"] {
        let img = tmp.path().join(format!("cf-{bs}.img"));
        if mke2fs_with(&img, &["-t", "ext4", "-b", bs, "-O", "casefold"], "64M").is_none() {
            return;
        }
        let fs = mount(&img);
        let cf = fs.mkdir(ROOT_INO, b"cf", 0o755, 0, 0).expect("mkdir").ino;
        fs.set_flags(cf, EXT4_CASEFOLD_FL, EXT4_CASEFOLD_FL).expect("+F on an empty directory");
        let plain = fs.mkdir(ROOT_INO, b"plain", 0o755, 0, 0).expect("mkdir").ino;
        fs.create(plain, b"x", 0o644, 0, 0).expect("create");
        assert!(matches!(fs.set_flags(plain, EXT4_CASEFOLD_FL, EXT4_CASEFOLD_FL), Err(FsError::NotEmpty(_))));
        let stems = [
            "File-\u{C4}\u{D6}\u{DC}-Stra\u{DF}e",
            "\u{3A3}\u{3AF}\u{3C3}\u{3C5}\u{3C6}\u{3BF}\u{3C2}",
            "\u{41F}\u{440}\u{438}\u{432}\u{435}\u{442}",
            "\u{6F22}\u{5B57}",
            "\u{D55C}\u{AE00}",
            "Caf\u{E9}-\u{1F600}",
            "ZWJ-\u{1F469}\u{200D}\u{1F4BB}-\u{2764}\u{FE0F}",
            "\u{130}stanbul",
            "a\u{301}\u{323}-marks",
        ];
        let mut made = Vec::new();
        for i in 0..400 {
            let name = format!("{}-{i:04}-{}", stems[i % stems.len()], "long-enough-to-fill-blocks");
            let ino = fs.create(cf, name.as_bytes(), 0o644, 0, 0).expect("create").ino;
            made.push((name, ino));
        }
        // Another spelling of each finds the same inode and cannot be made anew.
        let respell = |n: &str| -> String {
            n.to_uppercase().replace('\u{C9}', "E\u{301}").replace("\u{200D}", "").replace("\u{FE0F}", "")
        };
        for (name, ino) in made.iter().step_by(7) {
            let other = respell(name);
            let found = fs.lookup(cf, other.as_bytes()).unwrap_or_else(|e| panic!("lookup {other:?}: {e}"));
            assert_eq!(found.ino, *ino, "{other:?} names {name:?}");
            assert!(
                matches!(fs.create(cf, other.as_bytes(), 0o644, 0, 0), Err(FsError::Exists(_))),
                "{other:?}"
            );
        }
        assert!(fs.lookup(plain, b"X").is_err(), "a directory without +F is case-sensitive");
        // Names stay as given; removal and rename through another spelling.
        let listed: BTreeSet<Vec<u8>> = names(&fs, cf);
        assert!(listed.contains(made[5].0.as_bytes()));
        for (name, _) in made.iter().skip(1).step_by(3) {
            fs.unlink(cf, respell(name).as_bytes()).unwrap_or_else(|e| panic!("unlink {name:?}: {e}"));
        }
        fs.rename(cf, respell(&made[0].0).as_bytes(), plain, b"moved", RenameFlags::default())
            .expect("rename");
        assert_eq!(fs.lookup(plain, b"moved").expect("moved").ino, made[0].1);
        let sub = fs.mkdir(cf, b"Sub", 0o755, 0, 0).expect("mkdir").ino;
        assert_ne!(fs.getattr(sub).expect("getattr").flags & EXT4_CASEFOLD_FL, 0, "+F is inherited");
        fs.create(sub, b"Inner", 0o644, 0, 0).expect("create");
        assert!(fs.lookup(sub, b"INNER").is_ok());
        fs.unmount().expect("unmount");
        assert_fsck_clean(&img);
        let fs = mount(&img);
        let cf = fs.resolve("/cf").expect("/cf");
        assert_eq!(fs.lookup(cf, respell(&made[2].0).as_bytes()).expect("after remount").ino, made[2].1);
        fs.unmount().expect("unmount");
    }
    // Strict encoding: a casefolded directory refuses a name that does not fold (EINVAL);
    // any other directory takes it.
    let img = tmp.path().join("cf-strict.img");
    if mke2fs_with(&img, &["-t", "ext4", "-O", "casefold", "-E", "encoding_flags=strict"], "64M").is_none() {
        return;
    }
    let fs = mount(&img);
    let cf = fs.mkdir(ROOT_INO, b"cf", 0o755, 0, 0).expect("mkdir").ino;
    fs.set_flags(cf, EXT4_CASEFOLD_FL, EXT4_CASEFOLD_FL).expect("+F");
    match fs.create(cf, b"bad-\xff", 0o644, 0, 0) {
        Err(e) => assert_eq!(e.errno(), libc::EINVAL, "{e}"),
        Ok(_) => panic!("strict mode took a name that is not UTF-8"),
    }
    fs.create(ROOT_INO, b"bad-\xff", 0o644, 0, 0).expect("a plain directory takes any name");
    fs.create(cf, "ok-\u{E9}".as_bytes(), 0o644, 0, 0).expect("a valid name");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}

/// Random names drawn from many scripts, combining marks in every order, ignorables,
/// compatibility characters and code points from anywhere in Unicode 12.1, in casefolded
/// directories of 1 KiB blocks (many leaves): e2fsck recomputes every name's casefolded
/// hash and finds each entry in the leaf its hash selects.
/// Code points Unicode 12.1 does not assign are among them: they fold to themselves (a
/// reserved default-ignorable to nothing), as in the kernel's and e2fsprogs' tables.
#[test]
fn random_unicode_names_hash_as_e2fsck_folds_them() {
    use cjfs_fs::ondisk::inode::EXT4_CASEFOLD_FL;
    let tmp = tmpdir();
    let img = tmp.path().join("cf-random.img");
    if mke2fs_with(&img, &["-t", "ext4", "-b", "1024", "-N", "20000", "-O", "casefold"], "96M").is_none() {
        return;
    }
    let pools: &[(u32, u32)] = &[
        (0x41, 0x5A),
        (0x61, 0x7A),
        (0xC0, 0x24F),
        (0x300, 0x36F),
        (0x370, 0x3FF),
        (0x400, 0x4FF),
        (0x591, 0x5C7),
        (0x900, 0x97F),
        (0x1100, 0x11FF),
        (0x1E00, 0x1FFF),
        (0x200B, 0x200F),
        (0x2126, 0x212B),
        (0x2C00, 0x2C5E),
        (0x3040, 0x30FF),
        (0x4E00, 0x4E80),
        (0xAC00, 0xD7A3),
        (0xFB00, 0xFB06),
        (0xFE00, 0xFE0F),
        (0xFF21, 0xFF5A),
        (0x10400, 0x1044F),
        (0x1D400, 0x1D4FF),
        (0x1F300, 0x1F6FF),
        (0x20, 0x10FFFF),
    ];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let fs = mount(&img);
    let mut made = 0;
    for d in 0..4 {
        let dir = fs.mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o755, 0, 0).expect("mkdir").ino;
        fs.set_flags(dir, EXT4_CASEFOLD_FL, EXT4_CASEFOLD_FL).expect("+F");
        for i in 0..1500 {
            let mut name = format!("{i}-");
            for _ in 0..1 + next(12) {
                let (a, b) = pools[next(pools.len() as u64) as usize];
                let c = char::from_u32(a + next(u64::from(b - a + 1)) as u32).filter(|&c| c != '/');
                name.extend(c);
            }
            if name.len() > 255 {
                continue;
            }
            match fs.create(dir, name.as_bytes(), 0o644, 0, 0) {
                Ok(_) => made += 1,
                Err(FsError::Exists(_)) => {}
                Err(e) => panic!("create {name:?}: {e}"),
            }
        }
    }
    eprintln!("{made} names made");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}

/// A full `quota` file system: the quota files still grow from the metadata reserve, and
/// once that is gone too a chown or a create that brings in an id whose quota entry needs a
/// new block is refused with ENOSPC before anything changes (the kernel's
/// `dquot_initialize` order): the owner stays, no inode leaks, e2fsck is clean.
#[test]
fn a_full_quota_file_system_refuses_new_ids_cleanly() {
    let tmp = tmpdir();
    let img = tmp.path().join("quota-full.img");
    if mke2fs_with(&img, &["-t", "ext4", "-b", "4096", "-O", "quota"], "16M").is_none() {
        return;
    }
    let fs = mount(&img);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    let chunk = vec![7u8; 1 << 20];
    let mut off = 0u64;
    loop {
        match fs.write(f, off, &chunk) {
            Ok(0) | Err(FsError::NoSpace(_)) => break,
            Ok(n) => off += n as u64,
            Err(e) => panic!("write: {e}"),
        }
    }
    // Fill what is left, a block at a time, with small files of the same owner.
    for i in 0.. {
        let Ok(a) = fs.create(ROOT_INO, format!("s{i}").as_bytes(), 0o644, 0, 0) else { break };
        if !matches!(fs.write(a.ino, 0, &[1u8; 4096]), Ok(4096)) {
            break;
        }
    }
    // The quota file grows from the metadata reserve: new owners, each a new path in the
    // quota tree, until that is gone too.
    let mut refused = None;
    for k in 1..5000u32 {
        let uid = k << 16 | k;
        let before = fs.getattr(f).expect("getattr").uid;
        match fs.setattr(f, &SetAttr { uid: Some(uid), ..Default::default() }) {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                assert_eq!(fs.getattr(f).expect("getattr").uid, before, "a refused chown keeps the owner");
                refused = Some(uid);
                break;
            }
        }
    }
    let Some(uid) = refused else { panic!("5000 new owners never filled the file system") };
    let free = fs.statfs().ffree;
    match fs.create(ROOT_INO, b"new-owner", 0o644, uid + 1, 0) {
        Err(e) => assert_eq!(e.errno(), libc::ENOSPC, "{e}"),
        Ok(_) => panic!("a create needing a new quota block succeeded on a full file system"),
    }
    assert_eq!(fs.statfs().ffree, free, "no inode taken");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}
