//! Multi-mount protection (`mmp`): a read-write open takes the MMP block as the kernel does
//! and keeps it alive, a writer elsewhere keeps cjfs out (and cjfs keeps the kernel out), a
//! stale block from a crashed writer is taken after the watch, a block said to be held by
//! e2fsck is refused at once, and a writer that takes the block over while cjfs has it open
//! aborts cjfs's journal. Blocks of images made by mke2fs, written around cjfs with the
//! library's own codec; the kernel (as root) and e2fsck judge the result.
//!
//! The watches are real: with mke2fs's 5-second update interval a busy block is watched for
//! 11 seconds (the kernel's `2 × interval + 1`), so the slow cases run in parallel threads.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cjfs_fs::mmp::{MmpBlock, SEQ_CLEAN, SEQ_FSCK};
use cjfs_fs::ondisk::csum::Csum;
use cjfs_fs::ondisk::superblock::Superblock;
use cjfs_fs::{Fs, FsError, MountOptions, ROOT_INO};
use common::{assert_fsck_clean, kernel_mount, open_image, read_all, which};

/// An mke2fs image with `mmp` (4 KiB blocks, metadata_csum, update interval 5 s), or `None`
/// after saying why.
fn mmp_image(dir: &Path, name: &str) -> Option<PathBuf> {
    let Some(mke2fs) = which("mke2fs") else {
        eprintln!("SKIP: mke2fs not installed");
        return None;
    };
    let img = dir.join(name);
    let out = Command::new(mke2fs)
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-O", "mmp"])
        .arg(&img)
        .arg("64M")
        .output()
        .expect("run mke2fs");
    if !out.status.success() {
        eprintln!("SKIP: mke2fs -O mmp failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(img)
}

/// The image's MMP block number, its checksum rules and its block size.
/// The superblock, read straight from the file: the image may be open (and locked) by a
/// cjfs writer.
fn superblock(img: &Path) -> Superblock {
    let f = std::fs::File::open(img).expect("open");
    let mut raw = vec![0u8; 1024];
    f.read_exact_at(&mut raw, 1024).expect("read the superblock");
    Superblock::decode(&raw).expect("superblock")
}

fn mmp_where(img: &Path) -> (u64, Csum, u64) {
    let sb = superblock(img);
    (sb.mmp_block, Csum::from_sb(&sb), u64::from(sb.block_size()))
}

/// File `name` in the root holds `want`, read by a read-only open.
fn assert_file(img: &Path, name: &[u8], want: &[u8]) {
    let fs =
        Fs::open(open_image(img), MountOptions { read_only: true, ..MountOptions::default() }).expect("ro");
    let ino = fs.lookup(ROOT_INO, name).expect("lookup").ino;
    assert_eq!(read_all(&fs, ino), want);
    fs.unmount().expect("unmount");
}

/// The MMP block as it is on disk now.
fn read_mmp(img: &Path) -> MmpBlock {
    let (block, csum, bs) = mmp_where(img);
    let f = std::fs::File::open(img).expect("open");
    let mut buf = vec![0u8; bs as usize];
    f.read_exact_at(&mut buf, block * bs).expect("read");
    MmpBlock::decode(&buf, &csum, block).expect("decode")
}

/// Write the MMP block as another writer would: sequence `seq`, node `node`.
fn write_mmp(img: &Path, seq: u32, node: &str) {
    let (block, csum, bs) = mmp_where(img);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(img).expect("open");
    let mut buf = vec![0u8; bs as usize];
    f.read_exact_at(&mut buf, block * bs).expect("read");
    let mut m = MmpBlock::decode(&buf, &csum, block).expect("decode");
    m.seq = seq;
    m.nodename = [0; 64];
    m.nodename[..node.len()].copy_from_slice(node.as_bytes());
    m.encode_into(&mut buf, &csum);
    f.write_all_at(&buf, block * bs).expect("write");
    f.sync_all().expect("sync");
}

/// Whether the superblock says the journal needs recovery.
fn needs_recovery(img: &Path) -> bool {
    superblock(img).has_incompat(cjfs_fs::ondisk::features::INCOMPAT_RECOVER)
}

fn hash(img: &Path) -> Vec<u8> {
    std::fs::read(img).expect("read image")
}

fn rw() -> MountOptions {
    MountOptions::default()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|r| r.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

/// A clean block is taken at once; while open the sequence number moves every update
/// interval; a clean unmount leaves it clean; e2fsck and (as root) the kernel accept the
/// result and read the file; a read-only open never writes the block.
#[test]
fn an_open_takes_the_block_keeps_it_alive_and_leaves_it_clean() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(img) = mmp_image(tmp.path(), "live.img") else { return };
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN);
    let before = hash(&img);
    let ro =
        Fs::open(open_image(&img), MountOptions { read_only: true, ..MountOptions::default() }).expect("ro");
    ro.unmount().expect("ro unmount");
    assert!(hash(&img) == before, "a read-only open wrote the image");

    let t = Instant::now();
    let fs = Fs::open(open_image(&img), rw()).expect("open an mmp image for writing");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "a clean block is taken without a watch: {:?}",
        t.elapsed()
    );
    let first = read_mmp(&img);
    assert_ne!(first.seq, SEQ_CLEAN, "taken: not clean while open");
    let f = fs.create(ROOT_INO, b"held", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, b"written under multi-mount protection\n").expect("write");
    fs.fsync(f.ino, false).expect("fsync");
    std::thread::sleep(Duration::from_secs(7));
    let later = read_mmp(&img);
    assert_ne!(later.seq, first.seq, "the sequence number did not move in 7 s (interval 5 s)");
    assert_ne!(later.seq, SEQ_CLEAN);
    fs.unmount().expect("unmount");
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN, "a clean unmount leaves the block clean");
    assert_fsck_clean(&img);
    assert_file(&img, b"held", b"written under multi-mount protection\n");
    if let Some(_m) = kernel_mount(&img, &tmp.path().join("mnt")) {
        let got = std::fs::read(tmp.path().join("mnt/held")).expect("the kernel reads the file");
        assert_eq!(got, b"written under multi-mount protection\n");
    }
}

/// A writer elsewhere (its sequence number moving) keeps cjfs out after the watch, with
/// nothing written by cjfs; a block e2fsck holds is refused at once, naming the way out.
#[test]
fn a_live_writer_or_e2fsck_elsewhere_keeps_cjfs_out() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(img) = mmp_image(tmp.path(), "busy.img") else { return };
    write_mmp(&img, SEQ_FSCK, "fsck-node");
    let before = hash(&img);
    let t = Instant::now();
    let e = Fs::open(open_image(&img), rw()).expect_err("refused while e2fsck holds it");
    assert!(t.elapsed() < Duration::from_secs(3), "refused without a watch");
    let m = e.to_string();
    assert!(matches!(e, FsError::InUse(_)) && m.contains("e2fsck") && m.contains("clear_mmp"), "{m}");
    assert!(hash(&img) == before, "a refused open changed the image");

    // Another node updating its sequence number every second.
    write_mmp(&img, 1, "other-node");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (img, stop) = (img.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seq = 1;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                seq += 1;
                write_mmp(&img, seq, "other-node");
            }
            seq
        })
    };
    let t = Instant::now();
    let e = Fs::open(open_image(&img), rw()).expect_err("refused while another node writes");
    let waited = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let last = writer.join().expect("writer");
    let m = e.to_string();
    assert!(matches!(e, FsError::InUse(_)) && m.contains("other-node"), "{m}");
    assert!(waited >= Duration::from_secs(10), "refused after the watch, not before: {waited:?}");
    // Exactly what the other node wrote last: nothing of cjfs's in between or after.
    let now = read_mmp(&img);
    assert_eq!((now.seq, &now.nodename[..10]), (last, &b"other-node"[..]), "cjfs wrote the block");
}

/// A block left busy by a writer that crashed (its number no longer moves) is taken after
/// the two watches; the file system is then written normally and left clean.
#[test]
fn a_stale_block_is_taken_after_the_watch() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(img) = mmp_image(tmp.path(), "stale.img") else { return };
    write_mmp(&img, 0x1234, "crashed-node");
    let t = Instant::now();
    let fs = Fs::open(open_image(&img), rw()).expect("a stale block is taken");
    assert!(t.elapsed() >= Duration::from_secs(20), "both watches (2 x 11 s): {:?}", t.elapsed());
    fs.mkdir(ROOT_INO, b"after-crash", 0o755, 0, 0).expect("mkdir");
    fs.unmount().expect("unmount");
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN);
    assert_fsck_clean(&img);
}

/// A writer that takes the block over while cjfs has the file system open (a node that
/// ignored the protocol) is found at the next update: the journal aborts, later changes
/// fail, and cjfs leaves the intruder's block alone.
#[test]
fn a_writer_taking_over_aborts_the_journal() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(img) = mmp_image(tmp.path(), "stolen.img") else { return };
    let fs = Fs::open(open_image(&img), rw()).expect("open");
    fs.mkdir(ROOT_INO, b"before", 0o755, 0, 0).expect("mkdir");
    write_mmp(&img, 77, "intruder");
    std::thread::sleep(Duration::from_secs(7));
    let aborted = fs.journal().aborted().expect("the journal is aborted");
    assert!(aborted.contains("another writer took it") && aborted.contains("intruder"), "{aborted}");
    let e = fs.mkdir(ROOT_INO, b"after", 0o755, 0, 0).expect_err("a change after the takeover fails");
    assert!(e.to_string().contains("another writer"), "{e}");
    drop(fs);
    let m = read_mmp(&img);
    assert_eq!((m.seq, &m.nodename[..8]), (77, &b"intruder"[..]), "cjfs overwrote the intruder's block");
}

/// While cjfs has the file system open the kernel refuses to mount it ("Device is already
/// active on another node"), and mounts it once cjfs has let go. Root only.
#[test]
fn the_kernel_stays_out_while_cjfs_writes() {
    if !is_root() {
        println!("SKIP: not root, cannot loop-mount");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(img) = mmp_image(tmp.path(), "kernel.img") else { return };
    let fs = Fs::open(open_image(&img), rw()).expect("open");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).expect("mount point");
    let t = Instant::now();
    let out = Command::new("mount").arg("-o").arg("loop").arg(&img).arg(&mnt).output().expect("mount");
    if out.status.success() {
        let _ = Command::new("umount").arg(&mnt).status();
        panic!("the kernel mounted a file system cjfs has open for writing");
    }
    // Refused by the MMP check (after its watch), not by a failure to set up the loop.
    let waited = t.elapsed();
    let dmesg = Command::new("dmesg").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let said = dmesg.as_deref().unwrap_or("").contains("already active on another node");
    assert!(
        waited >= Duration::from_secs(10) && said,
        "kernel refusal after {waited:?}, dmesg said so: {said}"
    );
    fs.unmount().expect("unmount");
    match kernel_mount(&img, &mnt) {
        Some(_m) => assert!(mnt.join("lost+found").is_dir()),
        None => assert!(!is_root(), "the kernel did not mount the file system cjfs released"),
    }
}

/// `recover_device` (`cjfs recover`) takes the block to replay, as e2fsck does: a file
/// system left needing recovery is refused with nothing written while e2fsck holds the
/// block, and once it is clean is replayed and left clean.
#[test]
fn recovery_holds_the_block_while_it_replays() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(img) = mmp_image(tmp.path(), "recover.img") else { return };
    let fs = Fs::open(open_image(&img), rw()).expect("open");
    let f = fs.create(ROOT_INO, b"logged", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, b"in the log\n").expect("write");
    fs.fsync(f.ino, false).expect("fsync");
    // Gone without an unmount: the journal needs recovery; the block is let go.
    drop(fs);
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN, "a dropped file system lets the block go");
    write_mmp(&img, SEQ_FSCK, "fsck-node");
    let before = hash(&img);
    let e = cjfs_fs::fs::recover_device(&open_image(&img)).expect_err("refused while e2fsck holds it");
    assert!(matches!(e, FsError::InUse(_)), "{e}");
    assert!(hash(&img) == before, "a refused recovery changed the image");
    write_mmp(&img, SEQ_CLEAN, "fsck-node");
    assert!(needs_recovery(&img), "a dropped file system leaves its journal to replay");
    cjfs_fs::fs::recover_device(&open_image(&img)).expect("recover");
    assert!(!needs_recovery(&img), "recovered");
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN, "recovery leaves the block clean");
    assert_fsck_clean(&img);
    assert_file(&img, b"logged", b"in the log\n");
}

/// A caller that holds the block hands it to the open (`MountOptions::mmp_held`, as the CLI
/// does for its dry run and real run): the open takes no block of its own and waits for
/// nothing, its journal aborts when the holder loses the block, and the holder's release
/// says so.
#[test]
fn a_held_block_is_handed_to_the_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(img) = mmp_image(tmp.path(), "handed.img") else { return };
    let dev = open_image(&img);
    let held = cjfs_fs::mmp::take_for(&dev, "holder").expect("take").expect("an mmp image");
    let taken = read_mmp(&img);
    assert_eq!(&taken.bdevname[..6], b"holder");
    let t = Instant::now();
    let fs = Fs::open(dev.clone(), MountOptions { mmp_held: Some(held.handle()), ..rw() }).expect("open");
    assert!(t.elapsed() < Duration::from_secs(3), "the open watched a block its caller holds");
    assert_eq!(read_mmp(&img).seq, taken.seq, "the open took the block again");
    fs.mkdir(ROOT_INO, b"before", 0o755, 0, 0).expect("mkdir");
    write_mmp(&img, 99, "intruder");
    std::thread::sleep(Duration::from_secs(7));
    let aborted = fs.journal().aborted().expect("the journal is aborted when the holder loses the block");
    assert!(aborted.contains("intruder"), "{aborted}");
    drop(fs);
    let e = held.release().expect_err("the release reports the loss");
    assert!(matches!(e, FsError::InUse(_)) && e.to_string().contains("e2fsck"), "{e}");
    assert_eq!(read_mmp(&img).seq, 99, "the intruder's block is left alone");
}
