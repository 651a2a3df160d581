//! A file system served over FUSE by a thread of the test process
//! (`cjfs_fuse::serve_in_process`), on an emulated device: files written, fsynced and renamed
//! through the kernel are there after the unmount, which leaves the image clean. Skips (printing
//! `SKIP: ...`) without root, `/dev/fuse` or `fusermount3`.

mod common;

use std::io::Write;
use std::sync::Arc;

use cjfs_blockdev::{Device, EmulatedSsd, SsdPreset};
use cjfs_fs::{Fs, MkfsOptions, MountOptions, ROOT_INO, mkfs};

#[test]
fn a_file_system_served_in_process_keeps_what_was_written_through_the_mount() {
    if common::skip("a_file_system_served_in_process_keeps_what_was_written_through_the_mount", &[]) {
        return;
    }
    let ssd = Arc::new(EmulatedSsd::new(SsdPreset::ramdisk(), 16384));
    mkfs(&*ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    let dev: Device = ssd.clone();
    let fs = Fs::open(dev, MountOptions::default()).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mount point");
    let cfg = cjfs_fuse::MountConfig::default();
    let served = cjfs_fuse::serve_in_process(fs, &mnt, &cfg, "in-process-test", 4).expect("serve");
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut f = std::fs::File::create(mnt.join("a.tmp")).expect("create");
        f.write_all(&body).expect("write");
        f.sync_all().expect("fsync");
    }
    std::fs::rename(mnt.join("a.tmp"), mnt.join("a")).expect("rename");
    std::fs::create_dir(mnt.join("d")).expect("mkdir");
    assert_eq!(std::fs::read(mnt.join("a")).expect("read back"), body);
    served.unmount().expect("unmount");
    let source = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(!source.contains(mnt.to_str().unwrap()), "the mount is gone");
    // The device holds a clean image with the file and the directory.
    let dev: Device = ssd.clone();
    let (fs, report) = Fs::open_with_report(dev, MountOptions::default()).expect("reopen");
    assert_eq!(report.replayed_transactions, 0, "unmounted clean: nothing to replay");
    let ino = fs.lookup(ROOT_INO, b"a").expect("lookup a").ino;
    let mut got = vec![0u8; body.len()];
    let n = fs.read(ino, 0, &mut got).expect("read");
    assert_eq!(n, body.len());
    assert_eq!(got, body);
    assert!(fs.lookup(ROOT_INO, b"d").is_ok(), "the directory is there");
    assert!(fs.lookup(ROOT_INO, b"a.tmp").is_err(), "the rename took");
    fs.unmount().expect("unmount the reopened file system");
}
