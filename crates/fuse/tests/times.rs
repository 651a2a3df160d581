//! Timestamps through a real mount: what stat shows while mounted must be what is stored,
//! read back by the library after the unmount. Pre-1970 times with nanoseconds (the
//! kernel's `(secs, nsec)` with negative seconds), mtime/ctime after a buffered write
//! followed by fallocate or copy_file_range, and whole seconds on 128-byte inodes.

mod common;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{Fs, MountOptions, Timestamp};
use common::*;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `utimensat(path, [atime, mtime])` with `(secs, nsec)` pairs as the kernel takes them.
fn utimens(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let c = cpath(p);
    let ts = [
        libc::timespec { tv_sec: atime.0, tv_nsec: atime.1 },
        libc::timespec { tv_sec: mtime.0, tv_nsec: mtime.1 },
    ];
    // SAFETY: a valid path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat {}: {}", p.display(), std::io::Error::last_os_error());
}

/// (atime, mtime, ctime) as the kernel shows them.
fn shown(p: &Path) -> [Timestamp; 3] {
    let m = std::fs::metadata(p).unwrap();
    let t = |s: i64, n: i64| Timestamp::new(s, n as u32);
    [t(m.atime(), m.atime_nsec()), t(m.mtime(), m.mtime_nsec()), t(m.ctime(), m.ctime_nsec())]
}

/// (atime, mtime, ctime) of `/name` as stored, read by the library from the unmounted image.
fn stored(image: &Path, names: &[&str]) -> Vec<[Timestamp; 3]> {
    let dev: Device = Arc::new(FileDevice::open(image, FileDeviceOptions::default()).unwrap());
    let fs = Fs::open(dev, MountOptions::default()).unwrap();
    let out = names
        .iter()
        .map(|n| {
            let a = fs.getattr(fs.resolve(&format!("/{n}")).unwrap()).unwrap();
            [a.atime, a.mtime, a.ctime]
        })
        .collect();
    fs.unmount().unwrap();
    out
}

#[test]
fn pre_epoch_times_with_nanoseconds_are_stored_as_set() {
    if skip("pre_epoch_times_with_nanoseconds_are_stored_as_set", &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount("");
    // (atime, mtime): -1.5 s, -0.25 s, exact seconds before the epoch, and after it.
    let cases: [((i64, i64), (i64, i64)); 4] = [
        ((-2, 500_000_000), (-1, 750_000_000)),
        ((-1, 1), (-86_400 * 365, 999_999_999)),
        ((-7, 0), (-1, 0)),
        ((1_700_000_000, 123_456_789), (0, 1)),
    ];
    let names: Vec<String> = (0..cases.len()).map(|i| format!("f{i}")).collect();
    let mut seen = Vec::new();
    for (n, (a, mt)) in names.iter().zip(cases) {
        File::create(s.p(n)).unwrap();
        utimens(&s.p(n), a, mt);
        let t = shown(&s.p(n));
        assert_eq!(t[0], Timestamp::new(a.0, a.1 as u32), "{n}: atime shown while mounted");
        assert_eq!(t[1], Timestamp::new(mt.0, mt.1 as u32), "{n}: mtime shown while mounted");
        seen.push(t);
    }
    m.unmount();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(stored(&s.image, &names), seen, "stored times differ from the ones shown");
    e2fsck_clean(&s.image);
}

/// A buffered write, then `then` on the same file; the times stat shows while mounted (after
/// the file is closed) must be the ones stored.
fn times_after_write_then(test: &str, opts: &str, then: impl Fn(&Scratch, &File)) {
    if skip(test, &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount(opts);
    let mut f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(s.p("f")).unwrap();
    f.write_all(&[5u8; 10_000]).unwrap();
    // Far enough apart that a time taken at the wrong moment cannot coincide.
    std::thread::sleep(Duration::from_millis(50));
    then(&s, &f);
    let while_open = shown(&s.p("f"));
    drop(f);
    let closed = shown(&s.p("f"));
    let also = shown(&s.p("g"));
    m.unmount();
    let st = stored(&s.image, &["f", "g"]);
    assert_eq!(st[0][1..], closed[1..], "{test}: f's mtime/ctime stored differ from the ones shown");
    assert_eq!(st[1][1..], also[1..], "{test}: g's mtime/ctime stored differ from the ones shown");
    assert!(closed[1] >= while_open[1] && closed[2] >= while_open[2], "{test}: times went back at close");
    e2fsck_clean(&s.image);
}

fn fallocate_extend(s: &Scratch, f: &File) {
    File::create(s.p("g")).unwrap();
    // SAFETY: fallocate on an open descriptor.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 1 << 20) }, 0);
}

fn fallocate_punch(s: &Scratch, f: &File) {
    File::create(s.p("g")).unwrap();
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate on an open descriptor.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), mode, 0, 4096) }, 0);
}

fn copy_range(s: &Scratch, f: &File) {
    let g = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(s.p("g")).unwrap();
    let (mut off_in, mut off_out) = (0i64, 0i64);
    // SAFETY: two open descriptors and their offsets.
    let n =
        unsafe { libc::copy_file_range(f.as_raw_fd(), &mut off_in, g.as_raw_fd(), &mut off_out, 10_000, 0) };
    assert_eq!(n, 10_000, "copy_file_range: {}", std::io::Error::last_os_error());
}

#[test]
fn times_after_write_and_fallocate_are_stored_as_shown() {
    for opts in ["", "writeback"] {
        times_after_write_then("times_after_write_and_fallocate", opts, fallocate_extend);
        times_after_write_then("times_after_write_and_punch_hole", opts, fallocate_punch);
    }
}

#[test]
fn times_after_write_and_copy_file_range_are_stored_as_shown() {
    for opts in ["", "writeback"] {
        times_after_write_then("times_after_write_and_copy_file_range", opts, copy_range);
    }
}

#[test]
fn times_on_128_byte_inodes_are_whole_seconds_while_mounted() {
    if skip("times_on_128_byte_inodes_are_whole_seconds_while_mounted", &["mke2fs"]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let out = std::process::Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-I", "128", "-O", "^metadata_csum"])
        .arg(&s.image)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs -I 128: {}", String::from_utf8_lossy(&out.stderr));
    for opts in ["", "writeback"] {
        let m = s.mount(opts);
        let mut f = File::create(s.p("w")).unwrap();
        f.write_all(b"buffered").unwrap();
        File::create(s.p("u")).unwrap();
        utimens(&s.p("u"), (-2, 500_000_000), (1_700_000_000, 123_456_789));
        drop(f);
        let (w, u) = (shown(&s.p("w")), shown(&s.p("u")));
        for t in w.iter().chain(&u) {
            assert_eq!(t.nsec, 0, "-o {opts}: nanoseconds shown on a 128-byte inode: {w:?} {u:?}");
        }
        assert_eq!((u[0], u[1]), (Timestamp::new(-2, 0), Timestamp::new(1_700_000_000, 0)), "-o {opts}");
        m.unmount();
        let st = stored(&s.image, &["w", "u"]);
        assert_eq!(
            (st[0][1..].to_vec(), st[1][..2].to_vec()),
            (w[1..].to_vec(), u[..2].to_vec()),
            "-o {opts}"
        );
        e2fsck_clean(&s.image);
    }
}

/// The kernel leaves a FUSE file system's access times to the daemon: a read or a listing
/// that reaches it (a fresh mount: nothing cached) moves the access time under relatime, the
/// default, once after a change; ctime and mtime stay; under `noatime` nothing moves.
#[test]
fn reads_that_reach_the_daemon_move_the_access_time() {
    if skip("reads_that_reach_the_daemon_move_the_access_time", &[]) {
        return;
    }
    const Y2K: i64 = 946_684_800;
    let s = Scratch::new(64 << 20);
    let set_old = |opts: &str| {
        let m = s.mount(opts);
        if !s.p("f").exists() {
            std::fs::write(s.p("f"), b"data").unwrap();
            std::fs::create_dir(s.p("d")).unwrap();
        }
        utimens(&s.p("f"), (Y2K, 0), (Y2K, 0));
        utimens(&s.p("d"), (Y2K, 0), (Y2K, 0));
        m.unmount();
        stored(&s.image, &["f", "d"])
    };
    let read_both = |opts: &str| {
        let m = s.mount(opts);
        assert_eq!(std::fs::read(s.p("f")).unwrap(), b"data");
        assert_eq!(std::fs::read_dir(s.p("d")).unwrap().count(), 0);
        m.unmount();
        stored(&s.image, &["f", "d"])
    };
    let before = set_old("");
    let after = read_both("");
    for (i, name) in ["f", "d"].iter().enumerate() {
        assert!(after[i][0] >= before[i][2], "{name}: atime {:?} not moved to the access", after[i][0]);
        assert_eq!(after[i][1], Timestamp::new(Y2K, 0), "{name}: mtime moved");
        assert_eq!(after[i][2], before[i][2], "{name}: ctime moved by an access");
    }
    let before = set_old("");
    let after = read_both("noatime");
    assert_eq!(after, before, "noatime: an access moved a time");
    e2fsck_clean(&s.image);
}
