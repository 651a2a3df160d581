//! Bad input never costs data: a busy image, a damaged journal, corrupt superblock and inode
//! fields, failing output. Each test is the recipe of one finding of an outside corruption
//! campaign; every refusal must leave the image byte-identical (checked by hashing).

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cjfs_blockdev::{DEFAULT_BLOCK_SIZE as BLOCK_SIZE, Device, FileDevice, FileDeviceOptions};
use cjfs_fs::mkfs::read_layout;
use cjfs_fs::ondisk::csum::Csum;
use cjfs_fs::{Fs, MountOptions, ROOT_INO};
use common::*;

/// Byte offset of superblock field `field_offset` in the image (the images are
/// `metadata_csum`: the patches below fix the checksum they break, so each test meets the
/// damage it is about rather than a checksum mismatch).
fn sb_byte(field_offset: u64) -> u64 {
    1024 + field_offset
}

/// `s_first_ino` and `s_last_orphan` (superblock offsets).
const S_FIRST_INO: u64 = 0x54;
const S_LAST_ORPHAN: u64 = 0xE8;
/// Inode field offsets.
const I_SIZE_HIGH: u64 = 0x6C;
const I_BLOCK: u64 = 0x28;
const I_EXTRA_ISIZE: u64 = 0x80;

fn patch(img: &Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(img).expect("open image to patch");
    f.write_all_at(bytes, at).expect("patch image");
}

/// Patch superblock field bytes and fix `s_checksum` (the images are `metadata_csum`), so
/// the field's own check is what meets the change.
fn patch_sb(img: &Path, field_offset: u64, bytes: &[u8]) {
    patch(img, sb_byte(field_offset), bytes);
    let mut b = read_at(img, 1024, 1024);
    cjfs_fs::ondisk::superblock::set_checksum(&mut b);
    patch(img, 1024, &b);
}

/// Patch bytes of inode `ino`'s record and fix its checksum.
fn patch_inode(img: &Path, ino: u32, field_offset: u64, bytes: &[u8]) {
    let at = inode_offset(img, ino);
    patch(img, at + field_offset, bytes);
    let (sb, _) = read_layout(&*ro_dev(img)).expect("layout");
    let mut rec = read_at(img, at, sb.inode_size());
    cjfs_fs::ondisk::inode::set_checksum(&Csum::from_sb(&sb), ino, &mut rec);
    patch(img, at, &rec);
}

/// Patch bytes of directory `dir`'s leaf block `blk` and fix the block's checksum.
fn patch_dir_block(img: &Path, dir: u32, blk: u64, off: u64, bytes: &[u8]) {
    let at = blk * BLOCK_SIZE as u64;
    patch(img, at + off, bytes);
    let (sb, _) = read_layout(&*ro_dev(img)).expect("layout");
    let generation = u32::from_le_bytes(read_at(img, inode_offset(img, dir) + 0x64, 4).try_into().unwrap());
    if let Some(seed) = Csum::from_sb(&sb).for_inode(dir, generation).seed {
        let mut b = read_at(img, at, BLOCK_SIZE);
        cjfs_fs::ondisk::dirent::set_leaf_checksum(seed, &mut b);
        patch(img, at, &b);
    }
}

fn read_at(img: &Path, at: u64, n: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(img).expect("open image");
    let mut v = vec![0u8; n];
    f.read_exact_at(&mut v, at).expect("read image");
    v
}

fn ro_dev(img: &Path) -> Device {
    Arc::new(
        FileDevice::open(img, FileDeviceOptions { read_only: true, ..Default::default() }).expect("open"),
    )
}

/// The image byte offset of inode `ino`'s record.
fn inode_offset(img: &Path, ino: u32) -> u64 {
    let (sb, descs) = read_layout(&*ro_dev(img)).expect("layout");
    let g = (ino - 1) / sb.inodes_per_group;
    let idx = u64::from((ino - 1) % sb.inodes_per_group);
    descs[g as usize].inode_table * BLOCK_SIZE as u64 + idx * sb.inode_size() as u64
}

/// The inode number of `path` (a path of plain names from the root).
fn ino_of(img: &Path, path: &str) -> u32 {
    let fs = Fs::open(ro_dev(img), MountOptions { read_only: true, ..Default::default() }).expect("mount");
    let mut cur = ROOT_INO;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        cur = fs.lookup(cur, c.as_bytes()).expect("lookup").ino;
    }
    fs.unmount().expect("unmount");
    cur
}

/// An image with `/a/x` (a file), `/b` (a directory) and `/f` (a 3 MiB file).
fn populated(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let img = make_image(dir, "a.img", "64M");
    ok(&["mkdir", s(&img), "/a"]);
    ok(&["mkdir", s(&img), "/b"]);
    let o = cjfs_in(&["put", s(&img), "-", "/a/x"], b"x");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let data = random_bytes(3 << 20, 7);
    let o = cjfs_in(&["put", s(&img), "-", "/f"], &data);
    assert!(o.status.success(), "{}", text(&o.stderr));
    (img, data)
}

/// Every writing command, with arguments valid on [`populated`] images.
fn write_commands<'a>(img: &'a str, local: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        vec!["mkdir", img, "/new"],
        vec!["put", img, local, "/new-file"],
        vec!["rm", img, "/a/x"],
        vec!["mv", img, "/a/x", "/b/y"],
        vec!["ln", img, "/f", "/f2"],
    ]
}

/// Item 1: a writer holds the image (a library user here; `cjfs mount` below): every
/// writing command is refused before it writes, reading stays possible.
#[test]
fn writes_are_refused_while_another_writer_holds_the_image() {
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    let local = dir.path().join("local");
    std::fs::write(&local, b"local").expect("write local");
    let holder = FileDevice::open(&img, FileDeviceOptions::default()).expect("first writer");
    let before = hash_file(&img);
    for args in write_commands(s(&img), s(&local)) {
        fails(&args, "in use");
    }
    // (`recover` on a clean journal writes nothing, so it needs no lock.)
    fails(&["mkfs", s(&img), "--size", "64M", "--force"], "in use");
    assert_eq!(hash_file(&img), before, "a refused command changed the image");
    ok(&["ls", s(&img), "/a"]);
    drop(holder);
    ok(&["mkdir", s(&img), "/after"]);
    assert_e2fsck_clean(&img);
}

/// Item 1 with the real mount: `cjfs put` and `cjfs mkdir` while `cjfs mount` serves the
/// image are refused, and what the mount wrote survives the unmount.
#[test]
fn writes_are_refused_while_mounted() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: writes_are_refused_while_mounted: {why}");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let local = dir.path().join("local");
    std::fs::write(&local, b"local").expect("write local");
    ok(&["mount", s(&img), s(&mnt)]);
    std::fs::write(mnt.join("through-mount"), b"kept").expect("write through the mount");
    for args in write_commands(s(&img), s(&local)) {
        fails(&args, "in use");
    }
    // The mounted image's journal is live: `recover` must not replay it under the mount.
    fails(&["recover", s(&img)], "in use");
    let st = Command::new("fusermount3").arg("-u").arg(&mnt).status().expect("fusermount3");
    assert!(st.success());
    wait_unlocked(&img);
    assert_eq!(ok(&["cat", s(&img), "/through-mount"]).stdout, b"kept");
    fails(&["cat", s(&img), "/new-file"], "no such file");
    assert_e2fsck_clean(&img);
}

fn fuse_missing() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root");
    }
    tool("fusermount3").map_or(Some("fusermount3 is not installed"), |_| None)
}

/// Wait until the mount daemon has released the image.
fn wait_unlocked(img: &Path) {
    let t0 = Instant::now();
    while FileDevice::open(img, FileDeviceOptions::default()).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the daemon kept the image locked");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An image whose journal needs recovery: `/dir/file` written and committed but not
/// checkpointed (the image is copied while a library mount holds it).
fn needs_recovery(dir: &Path) -> std::path::PathBuf {
    let img = make_image(dir, "live.img", "64M");
    let copy = dir.join("crashed.img");
    let dev = FileDevice::open(&img, FileDeviceOptions::default()).expect("open");
    let fs = Fs::open(Arc::new(dev), MountOptions::default()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).expect("mkdir");
    let f = fs.create(d.ino, b"file", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, &random_bytes(50_000, 3)).expect("write");
    fs.journal().force().expect("force");
    std::fs::copy(&img, &copy).expect("copy while mounted");
    fs.unmount().expect("unmount");
    copy
}

/// Item 2: one descriptor tag's home block changed (its tail checksum fixed, so the scan
/// accepts it): `recover` reports the damage; a writing command must not replay the rest
/// and go on allocating.
#[test]
fn a_damaged_journal_is_not_replayed_by_a_writing_command() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = needs_recovery(dir.path());
    let dev = ro_dev(&img);
    let (sb, _) = read_layout(&*dev).expect("layout");
    let area = cjfs_fs::fs::journal_area(&dev, &sb).expect("journal area");
    let scan = cjfs_journal::recovery::scan(&*dev, &area).expect("scan");
    assert!(scan.needed && !scan.transactions.is_empty(), "the copy needs no recovery");
    let jsb = &scan.superblock;
    let (features, seed) = (jsb.features(), jsb.csum_seed());
    let tx = &scan.transactions[0];
    let blk = area.map(tx.first_block).expect("map descriptor");
    drop(dev);
    let at = blk * BLOCK_SIZE as u64;
    let mut desc = read_at(&img, at, BLOCK_SIZE);
    assert_eq!(u32::from_be_bytes(desc[4..8].try_into().unwrap()), 1, "first block is not a descriptor");
    // First tag's block number (big-endian, right after the 12-byte header): past the device.
    desc[12..16].copy_from_slice(&0x7fff_0000u32.to_be_bytes());
    cjfs_journal::descriptor::set_block_tail(&mut desc, &features, seed);
    patch(&img, at, &desc);

    let before = hash_file(&img);
    fails(&["mkdir", s(&img), "/m"], "journal is damaged");
    fails(&["put", s(&img), "-", "/p"], "journal is damaged");
    assert_eq!(hash_file(&img), before, "a refused write replayed the damaged journal");
    // `recover` refuses too, with nothing written: e2fsck replays what is intact and repairs.
    fails(&["recover", s(&img)], "journal is damaged");
    assert_eq!(hash_file(&img), before, "a refused recover changed the image");
    ok(&["info", s(&img)]);
    if let Some(e2fsck) = tool("e2fsck") {
        let o = Command::new(e2fsck).arg("-fy").arg(&img).output().expect("e2fsck -fy");
        assert!(o.status.code().is_some_and(|c| c <= 2), "e2fsck -fy: {}", text(&o.stdout));
        ok(&["mkdir", s(&img), "/m"]);
        assert_e2fsck_clean(&img);
    } else {
        println!("SKIP: e2fsck not installed; not repairing the image");
    }
}

/// A journal inode that is not a regular file is an invalid journal (the kernel and e2fsck
/// say so): nothing it maps is replayed, no command uses it, the image stays as it was.
/// Found by the image fuzzer (i_mode 0xffff on an image needing recovery).
#[test]
fn a_journal_inode_that_is_not_a_regular_file_is_refused() {
    const I_MODE: u64 = 0x00;
    let dir = tempfile::tempdir().expect("tmp");
    let img = needs_recovery(dir.path());
    patch_inode(&img, 8, I_MODE, &0xffffu16.to_le_bytes());
    let before = hash_file(&img);
    for args in [vec!["recover", s(&img)], vec!["mkdir", s(&img), "/m"], vec!["ls", s(&img), "/"]] {
        let err = fails(&args, "journal inode 8");
        assert!(err.contains("i_mode"), "{err}");
        assert_eq!(hash_file(&img), before, "{args:?} changed the image");
    }
}

/// A superblock that marks errors (set by the kernel or e2fsck -n) refuses writes until
/// e2fsck has repaired the file system; reading stays possible.
#[test]
fn a_file_system_marked_with_errors_refuses_writes() {
    const S_STATE: u64 = 0x3A;
    let dir = tempfile::tempdir().expect("tmp");
    let (img, data) = populated(dir.path());
    patch_sb(&img, S_STATE, &3u16.to_le_bytes());
    let before = hash_file(&img);
    fails(&["mkdir", s(&img), "/m"], "having errors");
    assert_eq!(hash_file(&img), before);
    assert_eq!(ok(&["cat", s(&img), "/f"]).stdout, data);
}

/// Item 3: a write command refused because of a bad orphan-list head must not rewrite the
/// superblock first (mount count, mount time, needs-recovery); read-only commands still
/// work on such an image.
#[test]
fn a_refused_write_leaves_the_image_byte_identical() {
    let dir = tempfile::tempdir().expect("tmp");
    let (img, data) = populated(dir.path());
    patch_sb(&img, S_LAST_ORPHAN, &5000u32.to_le_bytes());
    let before = hash_file(&img);
    let err = fails(&["mkdir", s(&img), "/m"], "orphan");
    assert!(err.contains("5000"), "{err}");
    assert_eq!(hash_file(&img), before, "a refused write changed the image");
    assert_eq!(ok(&["cat", s(&img), "/f"]).stdout, data);
    ok(&["ls", s(&img), "/a"]);
    let o = cjfs(&["check", s(&img), "--no-e2fsck"]);
    assert_eq!(o.status.code(), Some(1), "check called the image clean: {}", text(&o.stdout));
    assert!(text(&o.stdout).contains("s_last_orphan"), "{}", text(&o.stdout));
}

/// Item 3, second recipe: a `..` entry whose name_len is 1; `mv` out of that directory
/// fails on the corrupt entry and must leave the image as it was.
#[test]
fn mv_over_a_corrupt_dotdot_entry_leaves_the_image_byte_identical() {
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    let a = ino_of(&img, "/a");
    let at = inode_offset(&img, a);
    let root = read_at(&img, at + I_BLOCK, 60);
    assert_eq!(&root[..2], &[0x0a, 0xf3], "/a is not extent-mapped");
    let blk = u64::from(u32::from_le_bytes(root[20..24].try_into().unwrap()));
    // The `..` entry starts at byte 12 of the first block; name_len is its byte 6.
    patch_dir_block(&img, a, blk, 12 + 6, &[1]);
    let before = hash_file(&img);
    let o = cjfs(&["mv", s(&img), "/a/x", "/b/y"]);
    if o.status.success() {
        // Moving a file does not need `..`: then the image must still be consistent for us.
        ok(&["cat", s(&img), "/b/y"]);
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr).lines().count(), 1, "{}", text(&o.stderr));
    assert_eq!(hash_file(&img), before, "a refused mv changed the image");
    let o = cjfs(&["mv", s(&img), "/a", "/b/a"]);
    assert_eq!(o.status.code(), Some(1), "moving a directory with a corrupt '..' succeeded");
    assert_eq!(hash_file(&img), before, "a refused mv changed the image");
}

/// Item 4: reserved inodes in the orphan list are corruption, not orphans to free.
#[test]
fn a_reserved_inode_in_the_orphan_list_is_refused_and_reported() {
    for head in [1u32, 7] {
        let dir = tempfile::tempdir().expect("tmp");
        let (img, _) = populated(dir.path());
        patch_sb(&img, S_LAST_ORPHAN, &head.to_le_bytes());
        let before = hash_file(&img);
        let err = fails(&["mkdir", s(&img), "/m"], "reserved");
        assert!(err.contains(&format!("inode {head}")), "{err}");
        fails(&["put", s(&img), "-", "/p"], "reserved");
        assert_eq!(hash_file(&img), before, "orphan head {head}: a refused write changed the image");
        let o = cjfs(&["check", s(&img), "--no-e2fsck"]);
        assert_eq!(o.status.code(), Some(1), "check called the image clean: {}", text(&o.stdout));
        assert!(text(&o.stdout).contains("s_last_orphan"), "{}", text(&o.stdout));
    }
}

/// Item 5: an i_size no ext4 file can have is corruption; `cat` into a pipe closed early
/// returns at once.
#[test]
fn sizes_beyond_reason_are_refused_and_a_closed_pipe_ends_cat() {
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    // A closed pipe: `cjfs cat IMG /f | head -c1` returns promptly with success.
    let mut child = Command::new(bin())
        .args(["cat", s(&img), "/f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut one = [0u8; 1];
    child.stdout.as_mut().expect("stdout").read_exact(&mut one).expect("read a byte");
    drop(child.stdout.take());
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "cat ignored the closed pipe");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("stderr");
    assert!(status.success(), "cat into a closed pipe: {status:?} {err}");
    assert!(err.is_empty(), "{err}");

    let f = ino_of(&img, "/f");
    patch_inode(&img, f, I_SIZE_HIGH, &0x8000_0000u32.to_le_bytes());
    let before = hash_file(&img);
    let err = fails(&["cat", s(&img), "/f"], "i_size");
    assert!(err.contains(&format!("inode {f}")), "{err}");
    fails(&["rm", s(&img), "/f"], "i_size");
    assert_eq!(hash_file(&img), before);
}

/// Item 6: output errors are reported, never a panic; a closed pipe is not an error.
#[test]
fn output_errors_do_not_panic() {
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    for args in [vec!["info", s(&img)], vec!["ls", "-l", s(&img), "/"], vec!["cat", s(&img), "/f"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
        let o = Command::new(bin()).args(&args).stdout(full).output().expect("run");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?} > /dev/full: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("stdout") && err.contains("No space left"), "{err}");
    }
    // stdout closed before the command starts writing.
    let mut child = Command::new(bin())
        .args(["info", s(&img)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success(), "info into a closed pipe: {:?} {}", o.status, text(&o.stderr));
}

/// Item 7: each message names the structure, the block or inode, and what is wrong, once.
#[test]
fn messages_name_the_structure_that_is_wrong() {
    let dir = tempfile::tempdir().expect("tmp");
    // A corrupt extent: physical start beyond the file system.
    let (img, _) = populated(dir.path());
    let f = ino_of(&img, "/f");
    patch_inode(&img, f, I_BLOCK + 12 + 6, &0x7fffu16.to_le_bytes());
    let err = fails(&["cat", s(&img), "/f"], "extent");
    assert!(!err.contains("journal") && !err.contains("device"), "{err}");
    assert!(err.contains("outside the file system"), "{err}");

    // A zeroed directory inode: its entry names a free inode.
    let d2 = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(d2.path());
    let a = ino_of(&img, "/a");
    patch(&img, inode_offset(&img, a), &[0u8; 128]);
    let err = fails(&["mkdir", s(&img), "/a"], "not in use");
    assert!(!err.contains("file exists"), "{err}");
    assert!(err.contains(&format!("inode {a}")), "{err}");

    // s_first_ino past the inode table.
    let d3 = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(d3.path());
    patch_sb(&img, S_FIRST_INO, &u32::MAX.to_le_bytes());
    let err = fails(&["mkdir", s(&img), "/m"], "s_first_ino");
    assert!(!err.contains("no free inodes"), "{err}");

    // A bad inode field: the inode is named once.
    let d4 = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(d4.path());
    let x = ino_of(&img, "/a/x");
    patch_inode(&img, x, I_EXTRA_ISIZE, &3u16.to_le_bytes());
    let err = fails(&["cat", s(&img), "/a/x"], "i_extra_isize");
    assert_eq!(err.matches("corrupt file system").count(), 1, "{err}");
    assert_eq!(err.matches(&format!("inode {x}")).count(), 1, "inode named more than once: {err}");

    // mkfs: a journal too big says what the limit is.
    let big = dir.path().join("j.img");
    let err = fails(&["mkfs", s(&big), "--size", "64M", "--journal-blocks", "12000"], "journal");
    assert!(err.contains("at most"), "{err}");
}

/// Item 8: a trailing slash names a directory.
#[test]
fn put_to_a_path_with_a_trailing_slash_needs_a_directory() {
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    let local = dir.path().join("local");
    std::fs::write(&local, b"local").expect("write local");
    let before = hash_file(&img);
    fails(&["put", s(&img), s(&local), "/new/"], "no such file");
    fails(&["put", s(&img), s(&local), "/f/"], "not a directory");
    assert_eq!(hash_file(&img), before);
    ok(&["put", s(&img), s(&local), "/b/"]);
    assert_eq!(ok(&["cat", s(&img), "/b/local"]).stdout, b"local");
}

/// An image the kernel has mounted through a loop device: the writer lock means nothing to
/// the kernel, so every writing command and `cjfs mount` are refused by name (the kernel's
/// live journal is not replayed under it) and the image is not touched; once the kernel lets
/// go, the same command works.
#[test]
fn writes_are_refused_while_the_kernel_mounts_the_image() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIP: writes_are_refused_while_the_kernel_mounts_the_image: not root, cannot loop-mount");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    let mnt = dir.path().join("kmnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let out = Command::new("mount").arg("-o").arg("loop").arg(&img).arg(&mnt).output().expect("mount");
    if !out.status.success() {
        println!(
            "SKIP: writes_are_refused_while_the_kernel_mounts_the_image: mount -o loop failed: {}",
            text(&out.stderr)
        );
        return;
    }
    struct Umount<'a>(&'a Path);
    impl Drop for Umount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let guard = Umount(&mnt);
    std::fs::write(mnt.join("by-kernel"), b"kernel").expect("write through the kernel");
    assert!(Command::new("sync").status().expect("sync").success());
    let local = dir.path().join("local");
    std::fs::write(&local, b"local").expect("write local");
    let before = hash_file(&img);
    for args in write_commands(s(&img), s(&local)) {
        fails(&args, "in use by the kernel");
    }
    fails(&["recover", s(&img)], "in use by the kernel");
    // Reading commands see the kernel's live journal: they name the kernel, not recovery.
    fails(&["ls", s(&img), "/"], "in use by the kernel");
    let info = text(&ok(&["info", s(&img)]).stdout);
    assert!(
        info.lines().any(|l| l.starts_with("State:") && l.contains("the kernel has it mounted")),
        "{info}"
    );
    if Path::new("/dev/fuse").exists() {
        let fm = dir.path().join("fmnt");
        std::fs::create_dir(&fm).expect("mkdir fmnt");
        fails(&["mount", s(&img), s(&fm)], "in use by the kernel");
    }
    assert_eq!(hash_file(&img), before, "a refused command wrote to the image");
    drop(guard);
    ok(&["put", s(&img), s(&local), "/after"]);
    assert_eq!(ok(&["cat", s(&img), "/by-kernel"]).stdout, b"kernel");
    assert_e2fsck_clean(&img);
}

/// An image whose journal needs recovery while another process holds its writer lock (what
/// a running `cjfs mount` looks like): the read-only commands say the image is in use and
/// must be unmounted, not that it must be recovered; `info` says so in its State line.
/// Once the lock is gone, the same image needs `cjfs recover`.
#[test]
fn a_live_journal_is_reported_as_in_use_not_as_needing_recovery() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = needs_recovery(dir.path());
    let before = hash_file(&img);
    let holder = FileDevice::open(&img, FileDeviceOptions::default()).expect("hold the writer lock");
    for args in [vec!["ls", s(&img), "/"], vec!["cat", s(&img), "/dir/file"], vec!["check", s(&img)]] {
        let err = fails(&args, "in use by another cjfs process");
        assert!(err.contains("unmount it") && !err.contains("cjfs recover"), "{err}");
    }
    let info = text(&ok(&["info", s(&img)]).stdout);
    let state = info.lines().find(|l| l.starts_with("State:")).expect("a State line");
    assert!(state.contains("in use") && state.contains("unmount"), "{info}");
    drop(holder);
    assert_eq!(hash_file(&img), before, "a read-only command changed the image");
    fails(&["ls", s(&img), "/"], "run `cjfs recover");
    let info = text(&ok(&["info", s(&img)]).stdout);
    let state = info.lines().find(|l| l.starts_with("State:")).expect("a State line");
    assert!(state.contains("needs-recovery: the journal holds transactions"), "{info}");
    assert!(info.lines().any(|l| l.trim_start().starts_with("needs recovery:      yes")), "{info}");
    assert_eq!(hash_file(&img), before, "a read-only command changed the image");
}

/// An image copied while mounted with nothing committed: the superblock's needs_recovery
/// flag is set but the log is empty. `info` says both without contradicting itself.
#[test]
fn info_explains_a_recovery_flag_with_an_empty_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "live.img", "64M");
    let copy = dir.path().join("flag-only.img");
    let fs = Fs::open(
        Arc::new(FileDevice::open(&img, FileDeviceOptions::default()).expect("open")),
        MountOptions::default(),
    )
    .expect("mount");
    std::fs::copy(&img, &copy).expect("copy while mounted");
    fs.unmount().expect("unmount");
    let info = text(&ok(&["info", s(&copy)]).stdout);
    let state = info.lines().find(|l| l.starts_with("State:")).expect("a State line");
    assert!(state.contains("needs_recovery flag is set but the journal holds nothing to replay"), "{info}");
    let line = info.lines().find(|l| l.trim_start().starts_with("needs recovery:")).expect("journal line");
    assert!(line.contains("no (this log holds nothing to replay"), "{info}");
    ok(&["recover", s(&copy)]);
    let info = text(&ok(&["info", s(&copy)]).stdout);
    assert!(info.lines().any(|l| l == "State:                 clean"), "{info}");
}

/// A FIFO (or a character device) named as the image is refused before anything opens it:
/// opening a FIFO for reading would block until a writer came.
#[test]
fn a_fifo_or_character_device_is_not_an_image() {
    let dir = tempfile::tempdir().expect("tmp");
    let fifo = dir.path().join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    for path in [s(&fifo), "/dev/null"] {
        for args in [vec!["info", path], vec!["ls", path, "/"], vec!["put", path, "/etc/hostname", "/x"]] {
            let err = fails(&args, "not a regular file or block device");
            assert!(err.contains(path), "{err}");
        }
    }
    fails(&["mkfs", s(&fifo)], "not a regular file or block device");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    fails(&["mount", s(&fifo), s(&mnt), "-o", "ro"], "not a regular file or block device");
}

/// An inode whose mode names no file type is corrupt, not a regular file: reading,
/// removing and moving it are refused with the inode and its mode named, and the image
/// stays byte-identical.
#[test]
fn an_inode_without_a_valid_file_type_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let (img, _) = populated(dir.path());
    let ino = ino_of(&img, "/a/x");
    patch_inode(&img, ino, 0, &0o170644u16.to_le_bytes());
    let before = hash_file(&img);
    for args in
        [vec!["cat", s(&img), "/a/x"], vec!["rm", s(&img), "/a/x"], vec!["mv", s(&img), "/a/x", "/b/y"]]
    {
        let err = fails(&args, "i_mode");
        assert!(err.contains(&format!("inode {ino}")), "{err}");
    }
    assert_eq!(hash_file(&img), before, "a refused command changed the image");
}
