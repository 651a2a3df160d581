//! Failures give a clear one-line message and a non-zero exit: a corrupt image, a missing
//! mount point, an image already mounted (the lock), no `/dev/fuse`, bad options; a full
//! image gives the writer ENOSPC (from `write` itself by default) while the daemon keeps
//! serving.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::process::Command;

use common::*;

fn mount_fails(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let out = Command::new(CJFS_MOUNT).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), err)
}

#[test]
fn clear_errors_and_nonzero_exit() {
    if skip("clear_errors_and_nonzero_exit", &[]) {
        return;
    }
    let s = Scratch::new(128 << 20);
    // A missing mount point.
    let missing = s.dir.path().join("nope");
    let (code, err) = mount_fails(&[s.image.as_os_str(), missing.as_os_str()]);
    assert_eq!(code, 1);
    assert!(err.contains("mount point does not exist"), "{err}");
    // A missing image.
    let (code, err) = mount_fails(&[missing.as_os_str(), s.mnt.as_os_str()]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot open the image"), "{err}");
    // Bad options are usage errors.
    let (code, err) =
        mount_fails(&[s.image.as_os_str(), s.mnt.as_os_str(), "-o".as_ref(), "data=fast".as_ref()]);
    assert_eq!(code, 2);
    assert!(err.contains("data=fast"), "{err}");
    // A corrupt image (superblock magic destroyed).
    let bad = s.dir.path().join("bad.img");
    fs::copy(&s.image, &bad).unwrap();
    let mut f = OpenOptions::new().write(true).open(&bad).unwrap();
    f.seek(SeekFrom::Start(1024 + 0x38)).unwrap();
    f.write_all(&[0, 0]).unwrap();
    drop(f);
    let (code, err) = mount_fails(&[bad.as_os_str(), s.mnt.as_os_str()]);
    assert_eq!(code, 1);
    assert!(err.contains("bad.img") && err.contains("magic"), "{err}");
    assert!(!is_mounted(&s.mnt));
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // Already mounted: the second mount of the image fails on the lock, daemon or not.
    let m = s.mount("");
    let other = s.dir.path().join("mnt2");
    fs::create_dir(&other).unwrap();
    for extra in [&[][..], &["--foreground".as_ref()][..]] {
        let mut args = vec![s.image.as_os_str(), other.as_os_str()];
        args.extend_from_slice(extra);
        let (code, err) = mount_fails(&args);
        assert_eq!(code, 1);
        assert!(err.contains("already in use"), "{err}");
        assert!(!is_mounted(&other));
    }
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn no_dev_fuse() {
    if skip("no_dev_fuse", &["unshare"]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    // A private mount namespace whose /dev has no fuse device.
    let script =
        format!("mount -t tmpfs none /dev && exec {} {} {}", CJFS_MOUNT, s.image.display(), s.mnt.display());
    let out = Command::new("unshare")
        .arg("-m")
        .arg("--propagation")
        .arg("private")
        .arg("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("unshare failed") || err.contains("Operation not permitted") {
        println!("SKIP: no_dev_fuse: cannot make a mount namespace here: {err}");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/dev/fuse is not available"), "{err}");
    assert!(!image_locked(&s.image));
}

#[test]
fn full_device_gives_enospc_and_daemon_survives() {
    if skip("full_device_gives_enospc_and_daemon_survives", &[]) {
        return;
    }
    for opts in ["", "writeback"] {
        let s = Scratch::new(64 << 20);
        let m = s.mount(opts);
        let chunk = vec![0x5Au8; 1 << 20];
        let mut f = File::create(s.p("fill")).unwrap();
        let mut written = 0u64;
        let mut saw = None;
        for _ in 0..200 {
            if let Err(e) = f.write_all(&chunk) {
                saw = Some(e);
                break;
            }
            written += chunk.len() as u64;
        }
        // Writing through (the default) the write itself is refused; with the writeback cache
        // the error may only show at fsync (the kernel accepted the data into its cache).
        let e = match saw {
            Some(e) => e,
            None if opts == "writeback" => f.sync_all().expect_err("a 200 MiB file fitted in a 64 MiB image"),
            None => panic!("{opts:?}: 200 MiB written to a 64 MiB image without an error"),
        };
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{opts:?}: {e}");
        drop(f);
        assert!(written > 20 << 20, "{opts:?}: only {written} bytes written");
        // The daemon still serves: delete, write again, read back.
        fs::remove_file(s.p("fill")).unwrap();
        fs::write(s.p("after"), b"still alive").unwrap();
        assert_eq!(fs::read(s.p("after")).unwrap(), b"still alive");
        File::open(s.p("after")).unwrap().sync_all().unwrap();
        m.unmount();
        e2fsck_clean(&s.image);
    }
}

/// 40 x 1 MiB written to a new file on a 32 MiB image with about 6 MB free, as a program
/// that never calls fsync would: the write past the free space fails (short count, then
/// ENOSPC), fsync and close succeed, and the file holds exactly what was accepted, with no
/// hole, after an unmount.
#[test]
fn write_past_free_space_fails_at_write_and_size_matches() {
    if skip("write_past_free_space_fails_at_write_and_size_matches", &[]) {
        return;
    }
    let s = Scratch::new(32 << 20);
    let m = s.mount("");
    // Leave about 6 MB free.
    let st = statvfs(&s.mnt);
    let fill = (st.0 * st.1).saturating_sub(6 << 20);
    fs::write(s.p("ballast"), vec![0x11u8; fill as usize]).unwrap();
    File::open(s.p("ballast")).unwrap().sync_all().unwrap();
    let free = {
        let st = statvfs(&s.mnt);
        st.0 * st.1
    };
    assert!((4 << 20..8 << 20).contains(&free), "free after ballast: {free}");
    let mut f = File::create(s.p("victim")).unwrap();
    let mut accepted = 0u64;
    let mut failed = None;
    for i in 0..40u64 {
        let buf: Vec<u8> = (0..1u64 << 20).map(|j| ((i << 20) + j) as u8 ^ (j >> 12) as u8).collect();
        match f.write(&buf) {
            Ok(n) => {
                accepted += n as u64;
                if n < buf.len() {
                    let e = f.write(&buf[n..]).expect_err("write after a short write");
                    failed = Some(e);
                    break;
                }
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let e = failed.expect("40 MiB accepted with about 6 MB free");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    assert!(accepted > 2 << 20 && accepted <= free, "accepted {accepted} of {free} free");
    f.sync_all().expect("fsync of what was accepted");
    drop(f);
    assert_eq!(fs::metadata(s.p("victim")).unwrap().len(), accepted, "size covers only accepted bytes");
    m.unmount();
    e2fsck_clean(&s.image);
    let m = s.mount("");
    let got = fs::read(s.p("victim")).unwrap();
    assert_eq!(got.len() as u64, accepted);
    for (k, b) in got.iter().enumerate() {
        let (i, j) = ((k >> 20) as u64, (k & ((1 << 20) - 1)) as u64);
        assert_eq!(*b, ((i << 20) + j) as u8 ^ (j >> 12) as u8, "byte {k} after remount");
    }
    m.unmount();
    e2fsck_clean(&s.image);
}

/// (fragment size, free blocks) of the file system at `p` (the root reserve included: the
/// daemon does not keep it from anyone).
fn statvfs(p: &std::path::Path) -> (u64, u64) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string and an out-parameter of the right type.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    (st.f_frsize, st.f_bfree)
}

#[test]
fn dead_mount_is_explained_and_recovers() {
    if skip("dead_mount_is_explained_and_recovers", &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let mut m = s.mount("");
    fs::write(s.p("before"), b"synced").unwrap();
    File::open(s.p("before")).unwrap().sync_all().unwrap();
    m.signal(libc::SIGKILL);
    m.wait(std::time::Duration::from_secs(30));
    let (code, err) = mount_fails(&[s.image.as_os_str(), s.mnt.as_os_str()]);
    // Clear the dead mount before any assertion can fail and leave it behind.
    let st = Command::new("fusermount3").arg("-u").arg("-z").arg(&s.mnt).status().unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("dead FUSE mount") && err.contains("fusermount3 -u"), "{err}");
    assert!(st.success());
    let m = s.mount("");
    assert!(m.log_text().contains("recovered"), "{}", m.log_text());
    assert_eq!(fs::read(s.p("before")).unwrap(), b"synced");
    m.unmount();
    e2fsck_clean(&s.image);
}
