//! `cjfs recover` and `cjfs info` on images a crash left with orphans (a file unlinked while
//! still open): recover frees the inodes recorded in the orphan file (`-O orphan_file`
//! images made by mkfs.ext4) as it frees the classic orphan list, clears `orphan_present`,
//! and reports the count; `info` never calls such an image clean. The crash is a copy of
//! the image bytes taken while the library still has it mounted. Checks that need
//! e2fsprogs print `SKIP` and pass when the tools are missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::ondisk::features::INCOMPAT_RECOVER;
use cjfs_fs::{Fs, MountOptions, ROOT_INO};
use common::*;

/// A 64 MiB `mkfs.ext4 -b 4096 -O orphan_file` image; `None` (after a SKIP message) when
/// mkfs.ext4 is missing or cannot make one.
fn mkfs_ext4_orphan_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let Some(mkfs) = tool("mkfs.ext4") else {
        println!("SKIP: mkfs.ext4 not installed");
        return None;
    };
    let img = dir.join(name);
    let o = Command::new(mkfs)
        .args(["-q", "-F", "-b", "4096", "-O", "orphan_file"])
        .arg(&img)
        .arg("64M")
        .output()
        .expect("run mkfs.ext4");
    if !o.status.success() {
        println!("SKIP: mkfs.ext4 -O orphan_file: {}", text(&o.stderr));
        return None;
    }
    Some(img)
}

fn open(img: &Path) -> Device {
    Arc::new(FileDevice::open(img, FileDeviceOptions::default()).expect("open image"))
}

/// Mount `img`, write and fsync 3 MiB to /orph, unlink it while it is open, make the unlink
/// durable and copy the image to `copy` without unmounting (the crash). With `checkpoint`
/// the journal is written home first, so the copy's log is empty and only the
/// needs_recovery flag is left (as after a mount killed some seconds after its last
/// commit). The original is then released and unmounted cleanly.
fn crash_with_open_unlinked(img: &Path, copy: &Path, checkpoint: bool) {
    let fs = Fs::open(open(img), MountOptions::default()).expect("mount");
    let f = fs.create(ROOT_INO, b"orph", 0o644, 0, 0).expect("create").ino;
    let data = random_bytes(3 << 20, 21);
    let mut off = 0;
    while off < data.len() {
        off += fs.write(f, off as u64, &data[off..]).expect("write");
    }
    fs.fsync(f, false).expect("fsync");
    fs.open_file(f).expect("open");
    fs.unlink(ROOT_INO, b"orph").expect("unlink");
    fs.fsync(ROOT_INO, false).expect("fsync dir");
    fs.sync().expect("sync");
    if checkpoint {
        fs.journal().checkpoint().expect("checkpoint");
    }
    std::fs::copy(img, copy).expect("copy while mounted");
    fs.release(f).expect("release");
    fs.unmount().expect("unmount");
}

/// The `State:` value of `cjfs info`.
fn state(img: &Path) -> String {
    let out = text(&ok(&["info", s(img)]).stdout);
    let l = out.lines().find(|l| l.starts_with("State:")).expect("a State line");
    l["State:".len()..].trim().to_string()
}

/// The `Features:` value of `cjfs info`.
fn features(img: &Path) -> String {
    let out = text(&ok(&["info", s(img)]).stdout);
    out.lines().find(|l| l.starts_with("Features:")).expect("a Features line").to_string()
}

/// After the crash, `info` is not clean; `recover` replays (or clears the flag), releases
/// the one orphan, and leaves a clean image e2fsck accepts.
fn recover_after_crash(img: &Path, copy: &Path, checkpoint: bool) {
    crash_with_open_unlinked(img, copy, checkpoint);
    let st = state(copy);
    assert_ne!(st, "clean", "a crashed image with an orphan");
    let out = text(&ok(&["recover", s(copy)]).stdout);
    assert!(out.contains("released 1 orphan inode(s)"), "checkpoint {checkpoint}: {out}");
    if checkpoint {
        // The case that released nothing: no transaction to replay, no classic list.
        assert!(out.contains("the journal log was empty"), "{out}");
    }
    assert_eq!(state(copy), "clean", "after recover");
    assert!(!features(copy).contains("orphan_present"), "{}", features(copy));
    assert_e2fsck_clean(copy);
    ok(&["check", s(copy)]);
    let again = text(&ok(&["recover", s(copy)]).stdout);
    assert!(again.contains("nothing to replay") && !again.contains("released"), "{again}");
}

/// The defect: with the log written home before the crash, recover only cleared the
/// needs_recovery flag and left the orphan file's entry (e2fsck: "Deleted inode has zero
/// dtime", bitmap differences, "Orphan file block 0 is not clean").
#[test]
fn recover_frees_the_orphan_file_entry_of_a_crash_empty_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let Some(img) = mkfs_ext4_orphan_file(dir.path(), "of.img") else {
        return;
    };
    recover_after_crash(&img, &dir.path().join("crash.img"), true);
}

#[test]
fn recover_frees_the_orphan_file_entry_of_a_crash_with_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let Some(img) = mkfs_ext4_orphan_file(dir.path(), "of.img") else {
        return;
    };
    recover_after_crash(&img, &dir.path().join("crash.img"), false);
}

#[test]
fn recover_frees_the_classic_orphan_list_of_a_crash() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    recover_after_crash(&img, &dir.path().join("crash.img"), true);
}

/// An image whose journal is clean but which still records an orphan (the needs_recovery
/// flag cleared by a bare journal replay, as an older `cjfs recover` did): `info` says the
/// orphans are pending, not clean, and `recover` frees them.
fn pending_until_recover(img: &Path, copy: &Path, classic: bool) {
    crash_with_open_unlinked(img, copy, true);
    cjfs_fs::recover_device(&open(copy)).expect("bare journal replay");
    let st = state(copy);
    assert!(st.starts_with("orphans pending: 1 inode(s)"), "{st}");
    assert!(st.contains("cjfs recover"), "{st}");
    if !classic {
        assert!(text(&ok(&["info", s(copy)]).stdout).contains("Orphan file entries:   1"));
    }
    let out = text(&ok(&["recover", s(copy)]).stdout);
    assert!(out.contains("the journal is clean"), "{out}");
    assert!(out.contains("released 1 orphan inode(s)"), "{out}");
    assert_eq!(state(copy), "clean");
    assert!(!features(copy).contains("orphan_present"));
    assert_e2fsck_clean(copy);
}

#[test]
fn info_says_orphan_file_entries_are_pending_until_recover() {
    let dir = tempfile::tempdir().expect("tmp");
    let Some(img) = mkfs_ext4_orphan_file(dir.path(), "of.img") else {
        return;
    };
    pending_until_recover(&img, &dir.path().join("crash.img"), false);
}

#[test]
fn info_says_the_orphan_list_is_pending_until_recover() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    pending_until_recover(&img, &dir.path().join("crash.img"), true);
}

/// Rewrite the primary superblock of `img` with `edit` applied (checksum recomputed).
fn edit_superblock(img: &Path, edit: impl FnOnce(&mut cjfs_fs::ondisk::superblock::Superblock)) {
    use cjfs_fs::ondisk::superblock::{SUPERBLOCK_SIZE, Superblock};
    let mut bytes = std::fs::read(img).expect("read image");
    let raw = &mut bytes[1024..1024 + SUPERBLOCK_SIZE];
    let mut sb = Superblock::decode_unverified(raw).expect("superblock");
    edit(&mut sb);
    sb.encode_into(raw);
    std::fs::write(img, &bytes).expect("write image");
}

/// e2fsck, finding a journal it will not replay, marks the file system as having errors;
/// the replay of our log (whose superblock copy predates that) must not erase the mark or
/// the error record, as the kernel keeps them (`ext4_load_journal`). `recover` replays,
/// then says e2fsck's turn has come instead of mounting on top of the errors, and e2fsck
/// can then finish.
#[test]
fn recover_keeps_the_errors_marked_before_it() {
    use cjfs_fs::ondisk::superblock::STATE_ERROR;
    let dir = tempfile::tempdir().expect("tmp");
    let Some(img) = mkfs_ext4_orphan_file(dir.path(), "err.img") else {
        return;
    };
    let copy = dir.path().join("crash.img");
    crash_with_open_unlinked(&img, &copy, false);
    edit_superblock(&copy, |sb| {
        sb.state |= STATE_ERROR;
        sb.error_count = 3;
    });
    let err = fails(&["recover", s(&copy)], "having errors");
    assert!(err.contains("e2fsck -f"), "{err}");
    let sb = cjfs_fs::mkfs::read_layout(&*open(&copy)).expect("layout").0;
    assert_ne!(sb.state & STATE_ERROR, 0, "the errors flag survived the replay");
    assert_eq!(sb.error_count, 3, "the error record survived the replay");
    assert!(!features(&copy).contains("needs_recovery"), "the log was replayed: {}", features(&copy));
    let Some(e2fsck) = tool("e2fsck") else {
        println!("SKIP: e2fsck not installed");
        return;
    };
    let o = Command::new(e2fsck).arg("-fy").arg(&copy).output().expect("e2fsck -fy");
    assert!(o.status.code().is_some_and(|c| c <= 1), "e2fsck -fy: {}", text(&o.stdout));
    assert_e2fsck_clean(&copy);
    ok(&["ls", s(&copy)]);
}

/// A crash of a mount that wrote metadata in place (`nojournal` on an image with a
/// journal) leaves an empty log, the needs_recovery flag and the superblock's free counts
/// behind the groups'; recover used to clear only the flag (e2fsck -fn: "Free blocks count
/// wrong"). The counts are set stale by hand: when the crash catches them so depends on
/// when the superblock was last written.
#[test]
fn recover_after_a_nojournal_crash_stores_the_free_counts() {
    let dir = tempfile::tempdir().expect("tmp");
    // Without the orphan file: its orphan_present flag would have had recover mount anyway.
    let img = make_image(dir.path(), "nj.img", "64M");
    let copy = dir.path().join("crash.img");
    let opts = MountOptions { journal: cjfs_journal::JournalConfig::nojournal(), ..MountOptions::default() };
    let fs = Fs::open(open(&img), opts).expect("mount nojournal");
    for k in 0..200 {
        let f = fs.create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, 0, 0).expect("create").ino;
        fs.write(f, 0, &random_bytes(64 << 10, k)).expect("write");
    }
    fs.journal().force().expect("commit");
    std::fs::copy(&img, &copy).expect("copy while mounted");
    fs.unmount().expect("unmount");
    // The counts as a crash leaves them when the superblock was last written before the
    // files came (at the mount: a kill -9 through FUSE a few seconds in did that).
    edit_superblock(&copy, |sb| {
        assert_ne!(sb.feature_incompat & INCOMPAT_RECOVER, 0, "the mount set needs_recovery");
        sb.free_blocks_count += 3000;
        sb.free_inodes_count = sb.inodes_count;
    });
    let out = text(&ok(&["recover", s(&copy)]).stdout);
    assert!(out.contains("the journal log was empty"), "{out}");
    let Some(e2fsck) = tool("e2fsck") else {
        println!("SKIP: e2fsck not installed");
        return;
    };
    let o = Command::new(e2fsck).arg("-fn").arg(&copy).output().expect("e2fsck -fn");
    let all = text(&o.stdout) + &text(&o.stderr);
    assert!(o.status.success() && !all.contains("count wrong"), "e2fsck -fn after recover:\n{all}");
}
