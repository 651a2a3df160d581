//! iJournaling in casefolded directories: a name removed through one spelling and made
//! again through another is the same name to the fsync records and their replay, and a
//! record's entry is replayed into an indexed casefolded directory hashed folded.
mod common;
use common::read_all;

use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{EmulatedSsd, SsdPreset};
use cjfs_fs::{Fs, MountOptions, ROOT_INO, preset};

use cjfs_fs::ondisk::inode::EXT4_CASEFOLD_FL as CASEFOLD_FL;

fn opts(name: &str) -> MountOptions {
    let mut o = preset::resolve(name).expect("preset");
    o.journal.commit_interval = Duration::from_secs(3600);
    o
}

/// A cjfs image with iJournaling areas, given `casefold` by tune2fs; `None` (after saying
/// why) without tune2fs.
fn casefold_image() -> Option<Arc<EmulatedSsd>> {
    if common::which("tune2fs").is_none() {
        eprintln!("SKIP: tune2fs not installed");
        return None;
    }
    let o = opts("ijournal");
    let ssd = EmulatedSsd::ram((64u64 << 20) / 4096);
    let mk = preset::mkfs_for(
        &o,
        1024,
        cjfs_fs::MkfsOptions { assume_zeroed: true, ..cjfs_fs::MkfsOptions::default() },
    );
    cjfs_fs::mkfs(&ssd, &mk).expect("mkfs");
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("cf.img");
    std::fs::write(&p, ssd.image_bytes()).expect("write");
    let out = std::process::Command::new("tune2fs")
        .args(["-O", "casefold", "-E", "encoding=utf8"])
        .arg(&p)
        .output()
        .expect("tune2fs");
    assert!(out.status.success(), "tune2fs: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&p).expect("read");
    Some(Arc::new(EmulatedSsd::from_image(SsdPreset::sata_ssd(), &bytes)))
}

fn crash_copy(ssd: &EmulatedSsd) -> Arc<EmulatedSsd> {
    Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &ssd.image_bytes()))
}

fn fsck(bytes: &[u8]) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("img");
    std::fs::write(&p, bytes).expect("write");
    let out = std::process::Command::new("e2fsck").arg("-fn").arg(&p).output().expect("e2fsck");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Make `first` in a casefolded directory and sync (or, `first_fsync`, only fsync it: its
/// own i-record); take it away with `remove` (given the directory); make `again`, write and
/// fsync it; crash and recover. Returns the fsynced inode and the inode `again` names after
/// recovery; e2fsck must find the image clean.
fn name_reuse(
    first: &[u8],
    first_fsync: bool,
    remove: impl Fn(&Fs, u32),
    again: &[u8],
) -> Option<(u32, Option<u32>)> {
    let o = opts("ijournal");
    let ssd = casefold_image()?;
    let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"cf", 0o755, 0, 0).expect("mkdir").ino;
    fs.set_flags(d, CASEFOLD_FL, CASEFOLD_FL).expect("+F");
    fs.sync().expect("sync");
    let old = fs.create(d, first, 0o644, 0, 0).expect("create").ino;
    fs.write(old, 0, b"old").expect("write");
    if first_fsync {
        fs.fsync(old, false).expect("fsync");
    } else {
        fs.sync().expect("sync");
    }
    remove(&fs, d);
    let new = fs.create(d, again, 0o644, 0, 0).expect("create").ino;
    fs.write(new, 0, b"new data, fsynced").expect("write");
    fs.fsync(new, false).expect("fsync");
    let copy = crash_copy(&ssd);
    drop(fs);
    let fs = Fs::open(copy.clone(), o).expect("recover");
    let got = fs.lookup(d, again).map(|a| a.ino).ok();
    if let Some(i) = got {
        assert_eq!(read_all(&fs, i), if i == new { &b"new data, fsynced"[..] } else { &b"old"[..] });
    }
    fs.unmount().expect("unmount");
    let (ok, out) = fsck(&copy.image_bytes());
    assert!(ok, "{out}");
    Some((new, got))
}

/// Unlinked through one spelling, made again through another, fsynced, crashed: the fsynced
/// file is under the name after recovery.
#[test]
fn ijournal_name_reuse_after_unlink_other_spelling() {
    let unlink = |fs: &Fs, d: u32| fs.unlink(d, b"FOO").expect("unlink");
    let Some((new, got)) = name_reuse(b"Foo", false, unlink, b"foo") else { return };
    assert_eq!(got, Some(new), "the fsynced file is not under its name after the crash");
}

/// Renamed away through one spelling, made again through another, fsynced, crashed: the
/// fsynced file is under the name after recovery.
#[test]
fn ijournal_name_reuse_after_rename_other_spelling() {
    let rename =
        |fs: &Fs, d: u32| fs.rename(d, b"FOO", ROOT_INO, b"moved", Default::default()).expect("rename");
    let Some((new, got)) = name_reuse(b"Foo", false, rename, b"foo") else { return };
    assert_eq!(got, Some(new), "the fsynced file is not under its name after the crash");
}

/// The first spelling's file only fsynced (its i-record still live when the second one's
/// is written): recovery replays both records, and the name is the second file's.
#[test]
fn ijournal_name_reuse_after_an_fsynced_first_spelling() {
    let unlink = |fs: &Fs, d: u32| fs.unlink(d, b"FOO").expect("unlink");
    let Some((new, got)) = name_reuse(b"Foo", true, unlink, b"foo") else { return };
    assert_eq!(got, Some(new), "the fsynced file is not under its name after the crash");
}

/// The same with one spelling.
#[test]
fn ijournal_name_reuse_same_spelling_control() {
    let unlink = |fs: &Fs, d: u32| fs.unlink(d, b"foo").expect("unlink");
    let Some((new, got)) = name_reuse(b"foo", false, unlink, b"foo") else { return };
    assert_eq!(got, Some(new));
}

/// An i-record's new entry replayed into an indexed casefolded directory is hashed folded
/// (e2fsck clean) and found through another spelling.
#[test]
fn ijournal_replay_into_indexed_casefolded_dir() {
    let o = opts("ijournal");
    let Some(ssd) = casefold_image() else { return };
    let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"cf", 0o755, 0, 0).expect("mkdir").ino;
    fs.set_flags(d, CASEFOLD_FL, CASEFOLD_FL).expect("+F");
    for i in 0..400 {
        fs.create(d, format!("Fill-\u{C9}cole-{i:04}-xxxxxxxxxxxxxxxxxxxxxxxxx").as_bytes(), 0o644, 0, 0)
            .expect("fill");
    }
    fs.sync().expect("sync");
    let f = fs
        .create(d, "Stra\u{DF}e-\u{3A3}\u{3AF}\u{3C3}\u{3C5}\u{3C6}\u{3BF}\u{3C2}".as_bytes(), 0o644, 0, 0)
        .expect("create")
        .ino;
    fs.write(f, 0, b"data").expect("write");
    fs.fsync(f, false).expect("fsync");
    let st = fs.ijournal_stats().expect("on");
    assert_eq!(st.fallback_total(), 0, "{st:?}");
    let copy = crash_copy(&ssd);
    drop(fs);
    let (fs, report) = Fs::open_with_report(copy.clone(), o.clone()).expect("recover");
    eprintln!("replay: {:?}", report.ijournal);
    let got = fs
        .lookup(d, "STRASSE-\u{3C3}\u{3B9}\u{301}\u{3A3}\u{3A5}\u{3A6}\u{39F}\u{3A3}".as_bytes())
        .map(|a| a.ino);
    assert_eq!(got.ok(), Some(f));
    fs.unmount().expect("unmount");
    let (ok, out) = fsck(&copy.image_bytes());
    assert!(ok, "{out}");
}
