//! `cjfs mount` end to end: the command daemonizes once the mount is ready, the mount works,
//! `fusermount3 -u` ends the daemon, which leaves the image clean for the other commands.
//! The FUSE front end itself is tested in `crates/fuse/tests`. Prints `SKIP` without
//! `/dev/fuse`, root or `fusermount3`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_cjfs")
}

fn fuse_missing() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root");
    }
    let have = Command::new("sh").arg("-c").arg("command -v fusermount3").output();
    if !have.map(|o| o.status.success()).unwrap_or(false) {
        return Some("fusermount3 is not installed");
    }
    None
}

fn locked(image: &Path) -> bool {
    let f = File::open(image).unwrap();
    // SAFETY: flock on our own descriptor, released when it closes.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

#[test]
fn mount_write_unmount_then_read_with_cat() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: mount_write_unmount_then_read_with_cat: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("m.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(bin()).args(["mkfs", img.to_str().unwrap(), "--size", "64M"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Usage errors exit 2 with one line.
    let out =
        Command::new(bin()).arg("mount").arg(&img).arg(&mnt).args(["-o", "data=fast"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("cjfs: mount: bad mount option"));
    // Daemonized mount: returns when ready.
    let out = Command::new(bin()).arg("mount").arg(&img).arg(&mnt).args(["-o", "commit=1"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(mnt.join("hello"), b"from the kernel").unwrap();
    let st = Command::new("fusermount3").arg("-u").arg(&mnt).status().unwrap();
    assert!(st.success());
    let t0 = Instant::now();
    while locked(&img) {
        assert!(t0.elapsed() < Duration::from_secs(60), "the mount daemon did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(bin()).args(["cat", img.to_str().unwrap(), "/hello"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"from the kernel");
}
