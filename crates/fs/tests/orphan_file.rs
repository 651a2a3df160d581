//! `orphan_file` images (`mkfs.ext4 -b 4096 -O orphan_file`, with and without
//! `metadata_csum`), read-write.
//!
//! - Round trip: cjfs creates, writes and unlinks files, one while it is open (an orphan,
//!   recorded in the orphan file); after a clean unmount `RO_COMPAT_ORPHAN_PRESENT` is clear,
//!   the orphan file holds no entry, `e2fsck -fn` is clean and the kernel reads what cjfs
//!   wrote.
//! - Crash: an open-unlinked file at a crash leaves its entry in the orphan file (read raw
//!   after journal replay) with `orphan_present` set; the next cjfs mount frees the inode
//!   and its blocks, clears the entry and, at unmount, the flag.
//! - Full orphan file: with a one-block orphan file (1022 slots) further orphans go on the
//!   classic list; a crash leaves orphans in both and the next mount processes both.
//! - Kernel orphan: the kernel's own entry (a file unlinked while open on a loop mount, the
//!   image copied before the close) is processed by cjfs the same way.
//!
//! Tests print `SKIP:` and pass when e2fsprogs, root or loop mounts are missing.

mod common;
use common::read_all;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{Device, EmulatedSsd, SsdPreset};
use cjfs_fs::image_check::check_image;
use cjfs_fs::mkfs::read_layout;
use cjfs_fs::ondisk::features::{COMPAT_ORPHAN_FILE, RO_COMPAT_METADATA_CSUM, RO_COMPAT_ORPHAN_PRESENT};
use cjfs_fs::{Fs, Ino, MountOptions, ROOT_INO, recover_device};
use common::{assert_fsck_clean, open_image, which};

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("cjfs-orphan-file").tempdir().expect("tmpdir")
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 10) as u8).collect()
}

/// `mkfs.ext4 -b 4096 -O <features>` on a 128 MiB image; `None` (after saying why) when
/// mkfs.ext4 is missing or cannot make an orphan_file image.
fn mkfs_orphan_file(img: &Path, features: &str) -> Option<()> {
    mkfs_orphan_file_ext(img, features, &[])
}

/// [`mkfs_orphan_file`] with extra mkfs.ext4 arguments.
fn mkfs_orphan_file_ext(img: &Path, features: &str, extra: &[&str]) -> Option<()> {
    let Some(mkfs) = which("mkfs.ext4") else {
        eprintln!("SKIP: mkfs.ext4 not installed");
        return None;
    };
    let o = Command::new(mkfs)
        .args(["-q", "-F", "-b", "4096", "-O", features])
        .args(extra)
        .arg(img)
        .arg("128M")
        .output()
        .expect("run mkfs.ext4");
    if !o.status.success() {
        eprintln!("SKIP: mkfs.ext4 -O {features}: {}", String::from_utf8_lossy(&o.stderr));
        return None;
    }
    let (sb, _) = read_layout(&*open_image(img)).expect("read layout");
    assert_ne!(sb.feature_compat & COMPAT_ORPHAN_FILE, 0, "mkfs.ext4 -O {features} made no orphan file");
    Some(())
}

/// The superblock's ro_compat word and orphan file inode of the image at `img`.
fn sb_orphan(img: &Path) -> (u32, u32) {
    let (sb, _) = read_layout(&*open_image(img)).expect("read layout");
    (sb.feature_ro_compat, sb.orphan_file_inum)
}

/// The live entries of the image's orphan file, read raw: its blocks come from debugfs,
/// the entries from the blocks as stored (every u32 before the 8-byte tail). `None` when
/// debugfs is missing.
fn orphan_entries(img: &Path) -> Option<Vec<u32>> {
    let Some(debugfs) = which("debugfs") else {
        eprintln!("SKIP raw orphan file check: debugfs not installed");
        return None;
    };
    let (_, ino) = sb_orphan(img);
    let o =
        Command::new(debugfs).arg("-R").arg(format!("blocks <{ino}>")).arg(img).output().expect("debugfs");
    let blocks: Vec<u64> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(|w| w.parse().expect("block number"))
        .collect();
    assert!(!blocks.is_empty(), "orphan file inode {ino} has no blocks");
    let bytes = std::fs::read(img).expect("read image");
    let mut live = Vec::new();
    for b in blocks {
        let blk = &bytes[b as usize * 4096..(b as usize + 1) * 4096];
        assert_eq!(
            u32::from_le_bytes(blk[4088..4092].try_into().unwrap()),
            0x0b10_ca04,
            "orphan file block {b}: magic"
        );
        live.extend(
            blk[..4088].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).filter(|&v| v != 0),
        );
    }
    Some(live)
}

/// Why a kernel loop mount cannot be used here, if it cannot.
fn no_kernel() -> Option<String> {
    for t in ["mount", "umount"] {
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

fn run(cmd: &mut Command) -> std::process::Output {
    let o = cmd.output().expect("spawn");
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn round_trip(features: &str, csum: bool) {
    let tmp = tmpdir();
    let img = tmp.path().join("of.img");
    if mkfs_orphan_file(&img, features).is_none() {
        return;
    }
    assert_eq!(sb_orphan(&img).0 & RO_COMPAT_METADATA_CSUM != 0, csum, "{features}: metadata_csum");
    let fs =
        Fs::open(open_image(&img), MountOptions::default()).expect("mount an orphan_file image read-write");
    let keep = fs.create(ROOT_INO, b"keep", 0o644, 0, 0).expect("create").ino;
    fs.write(keep, 0, &content(300_000, 1)).expect("write");
    let gone = fs.create(ROOT_INO, b"gone", 0o644, 0, 0).expect("create").ino;
    fs.write(gone, 0, &content(50_000, 2)).expect("write");
    fs.unlink(ROOT_INO, b"gone").expect("unlink");
    // Several open-unlinked files at once: each takes a slot of the orphan file.
    let mut held = Vec::new();
    for k in 0..5u8 {
        let name = format!("held{k}");
        let a = fs.create(ROOT_INO, name.as_bytes(), 0o600, 0, 0).expect("create").ino;
        fs.write(a, 0, &content(70_000, k)).expect("write");
        fs.open_file(a).expect("open");
        fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
        held.push(a);
    }
    assert_eq!(read_all(&fs, held[3]), content(70_000, 3), "an orphan is still readable");
    fs.journal().force().expect("force");
    for (k, a) in held.iter().enumerate() {
        if k % 2 == 0 {
            fs.release(*a).expect("release");
        }
    }
    // The rest are still open at unmount, which frees them.
    fs.unmount().expect("unmount");
    let (ro, _) = sb_orphan(&img);
    assert_eq!(ro & RO_COMPAT_ORPHAN_PRESENT, 0, "{features}: orphan_present cleared at a clean unmount");
    if let Some(live) = orphan_entries(&img) {
        assert!(live.is_empty(), "{features}: orphan file entries left after unmount: {live:?}");
    }
    assert_fsck_clean(&img);
    let warnings = cjfs_check(&img);
    assert!(warnings.is_empty(), "{features}: cjfs check warnings: {warnings:?}");
    if let Some(why) = no_kernel() {
        eprintln!("SKIP kernel mount: {why}");
        return;
    }
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    run(Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(&img).arg(&mnt));
    let read = std::fs::read(mnt.join("keep"));
    let listing: Vec<String> = std::fs::read_dir(&mnt)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    run(Command::new("umount").arg(&mnt));
    assert_eq!(read.expect("kernel reads keep"), content(300_000, 1), "{features}: keep through the kernel");
    let mut listing = listing;
    listing.sort();
    assert_eq!(listing, vec!["keep".to_string(), "lost+found".to_string()], "{features}: kernel listing");
    assert_fsck_clean(&img);
}

#[test]
fn orphan_file_image_round_trip_metadata_csum() {
    round_trip("orphan_file", true);
}

#[test]
fn orphan_file_image_round_trip_no_csum() {
    round_trip("orphan_file,^metadata_csum", false);
}

/// `cjfs check` of the image at `img` (a read-only mount): no error; the warnings returned.
fn cjfs_check(img: &Path) -> Vec<String> {
    let fs = Fs::open(open_image(img), MountOptions { read_only: true, ..MountOptions::default() })
        .expect("read-only mount");
    let r = check_image(&fs).expect("check");
    fs.unmount().expect("unmount");
    assert_eq!(r.error_count, 0, "cjfs check errors: {:?}", r.errors);
    r.warnings
}

/// A RAM copy of the image at `img`.
fn ram_copy(img: &Path) -> Arc<EmulatedSsd> {
    Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &std::fs::read(img).expect("read image")))
}

/// Mount the crash image at `img` (journal replayed first, so the raw checks see what the
/// next mount sees): `orphan_present` is set and the orphan file holds `ino`; the mount
/// frees it (one orphan), and after its unmount the entry and the flag are gone and
/// `e2fsck -fn` is clean.
fn recover_crash_image(img: &Path, ino: Ino, name: &[u8], what: &str) {
    recover_device(&open_image(img)).expect("replay the journal");
    let (ro, _) = sb_orphan(img);
    assert_ne!(ro & RO_COMPAT_ORPHAN_PRESENT, 0, "{what}: orphan_present set at the crash");
    if let Some(live) = orphan_entries(img) {
        assert_eq!(live, vec![ino], "{what}: the orphan file holds the open-unlinked inode");
    }
    let warnings = cjfs_check(img);
    assert!(
        warnings.iter().any(|w| w.contains("orphan file holds 1 inode(s)")),
        "{what}: cjfs check names the pending orphan: {warnings:?}"
    );
    let (fs, report) =
        Fs::open_with_report(open_image(img), MountOptions::default()).expect("mount the crash image");
    assert_eq!(report.orphans_cleaned, 1, "{what}: the orphan is processed");
    assert!(fs.lookup(ROOT_INO, name).is_err());
    assert!(fs.getattr(ino).is_err(), "{what}: inode {ino} is freed");
    fs.unmount().expect("unmount");
    let (ro, _) = sb_orphan(img);
    assert_eq!(ro & RO_COMPAT_ORPHAN_PRESENT, 0, "{what}: orphan_present cleared");
    if let Some(live) = orphan_entries(img) {
        assert!(live.is_empty(), "{what}: entries left: {live:?}");
    }
    assert_fsck_clean(img);
}

fn crash_variant(features: &str) {
    let tmp = tmpdir();
    let img = tmp.path().join("of.img");
    if mkfs_orphan_file(&img, features).is_none() {
        return;
    }
    let ssd = ram_copy(&img);
    let dev: Device = ssd.clone();
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let free0 = fs.statfs();
    let a = fs.create(ROOT_INO, b"doomed", 0o644, 0, 0).expect("create").ino;
    fs.write(a, 0, &content(2 << 20, 9)).expect("write");
    fs.open_file(a).expect("open");
    fs.unlink(ROOT_INO, b"doomed").expect("unlink");
    fs.fsync(a, false).expect("fsync");
    fs.journal().force().expect("force");
    // Crash while the unlinked file is still open.
    let crash = ssd.image_bytes();
    fs.release(a).expect("release");
    fs.unmount().expect("unmount");
    let crash_img = tmp.path().join("crash.img");
    std::fs::write(&crash_img, &crash).expect("write crash image");
    recover_crash_image(&crash_img, a, b"doomed", &format!("cjfs crash, -O {features}"));
    let fs = Fs::open(open_image(&crash_img), MountOptions::default()).expect("remount");
    let free1 = fs.statfs();
    assert_eq!((free1.bfree, free1.ffree), (free0.bfree, free0.ffree), "its blocks and inode are free again");
    fs.unmount().expect("unmount");
}

#[test]
fn orphan_file_entry_at_a_crash_is_processed_metadata_csum() {
    crash_variant("orphan_file");
}

#[test]
fn orphan_file_entry_at_a_crash_is_processed_no_csum() {
    crash_variant("orphan_file,^metadata_csum");
}

/// A one-block orphan file (1022 slots) overflows onto the classic list; a crash leaves
/// orphans in both, and the next mount processes both.
#[test]
fn full_orphan_file_falls_back_to_the_classic_list() {
    const N: usize = 1030;
    let tmp = tmpdir();
    let img = tmp.path().join("of.img");
    if mkfs_orphan_file_ext(&img, "orphan_file", &["-E", "orphan_file_size=1"]).is_none() {
        return;
    }
    let ssd = ram_copy(&img);
    let dev: Device = ssd.clone();
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let free0 = fs.statfs();
    let mut held = Vec::new();
    for k in 0..N {
        let name = format!("o{k}");
        let a = fs.create(ROOT_INO, name.as_bytes(), 0o600, 0, 0).expect("create").ino;
        if k % 100 == 0 {
            fs.write(a, 0, &content(20_000, k as u8)).expect("write");
        }
        fs.open_file(a).expect("open");
        fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
        held.push(a);
    }
    fs.journal().force().expect("force");
    assert_ne!(
        fs.superblock().last_orphan,
        0,
        "the orphans past the orphan file's 1022 slots are on the list"
    );
    let crash = ssd.image_bytes();
    // Releasing empties both: the list (its head last) and the file.
    for a in held.iter().rev() {
        fs.release(*a).expect("release");
    }
    fs.unmount().expect("unmount");
    let done = tmp.path().join("done.img");
    std::fs::write(&done, ssd.image_bytes()).expect("write image");
    let (ro, _) = sb_orphan(&done);
    assert_eq!(ro & RO_COMPAT_ORPHAN_PRESENT, 0, "orphan_present cleared");
    assert_eq!(read_layout(&*open_image(&done)).expect("layout").0.last_orphan, 0, "list empty");
    assert_fsck_clean(&done);

    let crash_img = tmp.path().join("crash.img");
    std::fs::write(&crash_img, &crash).expect("write crash image");
    recover_device(&open_image(&crash_img)).expect("replay the journal");
    if let Some(live) = orphan_entries(&crash_img) {
        assert_eq!(live.len(), 1022, "the orphan file is full at the crash");
    }
    let warnings = cjfs_check(&crash_img);
    assert!(warnings.iter().any(|w| w.contains("orphan list holds 8 inode(s)")), "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("orphan file holds 1022 inode(s)")), "{warnings:?}");
    let (fs, report) = Fs::open_with_report(open_image(&crash_img), MountOptions::default()).expect("mount");
    assert_eq!(report.orphans_cleaned as usize, N, "both the list and the file are processed");
    let free1 = fs.statfs();
    assert_eq!(
        (free1.bfree, free1.ffree),
        (free0.bfree, free0.ffree),
        "every orphan's blocks and inode freed"
    );
    fs.unmount().expect("unmount");
    let (sb, _) = read_layout(&*open_image(&crash_img)).expect("layout");
    assert_eq!((sb.last_orphan, sb.feature_ro_compat & RO_COMPAT_ORPHAN_PRESENT), (0, 0));
    if let Some(live) = orphan_entries(&crash_img) {
        assert!(live.is_empty(), "entries left: {}", live.len());
    }
    assert_fsck_clean(&crash_img);
}

/// The kernel records an orphan in the orphan file; cjfs processes it.
#[test]
fn kernel_orphan_file_entry_is_processed() {
    if let Some(why) = no_kernel() {
        eprintln!("SKIP: {why}");
        return;
    }
    let tmp = tmpdir();
    let img = tmp.path().join("k.img");
    if mkfs_orphan_file(&img, "orphan_file").is_none() {
        return;
    }
    let mnt: PathBuf = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let copy = tmp.path().join("crash.img");
    run(Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(&img).arg(&mnt));
    std::fs::write(mnt.join("victim"), content(1 << 20, 4)).expect("kernel writes victim");
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(mnt.join("victim")).expect("stat").ino() as Ino
    };
    // Hold the file open across its unlink and the copy: the copy is a crash image with a
    // live kernel orphan.
    let o = Command::new("sh")
        .arg("-c")
        .arg(r#"exec 3<"$1/victim" && rm "$1/victim" && sync && cp "$2" "$3""#)
        .arg("sh")
        .arg(&mnt)
        .arg(&img)
        .arg(&copy)
        .output()
        .expect("sh");
    let um = Command::new("umount").arg(&mnt).output().expect("umount");
    assert!(o.status.success(), "hold, unlink and copy: {}", String::from_utf8_lossy(&o.stderr));
    assert!(um.status.success(), "umount: {}", String::from_utf8_lossy(&um.stderr));
    recover_crash_image(&copy, ino, b"victim", "kernel crash");
}
