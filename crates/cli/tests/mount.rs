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

/// `cjfs umount` returns only once the daemon has written everything home and let go: right
/// after it the image is clean, unlocked, readable by every command and by `e2fsck`, with
/// what was written through the mount (20 MB and fifty small files, seconds of checkpoint
/// work that `fusermount3 -u` does not wait for). A directory that is no cjfs mount is
/// refused in one line.
#[test]
fn umount_waits_until_the_image_is_clean_and_released() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: umount_waits_until_the_image_is_clean_and_released: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("u.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(bin()).args(["mkfs", img.to_str().unwrap(), "--size", "256M"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(bin()).arg("umount").arg(&mnt).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("cjfs: umount: ") && err.contains("not the mount point") && err.lines().count() == 1,
        "{err}"
    );
    let out = Command::new(bin()).arg("mount").arg(&img).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let big: Vec<u8> = (0..20_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(mnt.join("big"), &big).unwrap();
    for i in 0..50 {
        std::fs::write(mnt.join(format!("s{i}")), format!("{i}")).unwrap();
    }
    let out = Command::new(bin()).arg("umount").arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!locked(&img), "the image is still locked after cjfs umount");
    let out = Command::new(bin()).args(["info", img.to_str().unwrap()]).output().unwrap();
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.lines().any(|l| l.starts_with("State:") && l.contains("clean")), "{info}");
    let out = Command::new(bin()).args(["cat", img.to_str().unwrap(), "/big"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == big, "the 20 MB file differs");
    let out = Command::new(bin()).args(["cat", img.to_str().unwrap(), "/s49"]).output().unwrap();
    assert_eq!(out.stdout, b"49");
    if let Ok(o) = Command::new("e2fsck").args(["-fn"]).arg(&img).output() {
        assert!(o.status.success(), "e2fsck: {}", String::from_utf8_lossy(&o.stdout));
    } else {
        println!("SKIP (part): e2fsck is not installed");
    }
}

/// A busy mount (a file open in it) stays mounted: `cjfs umount` says so in one line and
/// fails, as `umount` does; `--lazy` detaches it and returns once the file closed and the
/// image is clean.
#[test]
fn umount_of_a_busy_mount_fails_unless_lazy() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: umount_of_a_busy_mount_fails_unless_lazy: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("b.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(bin()).args(["mkfs", img.to_str().unwrap(), "--size", "64M"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(bin()).arg("mount").arg(&img).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(mnt.join("f"), b"open").unwrap();
    let held = std::fs::File::open(mnt.join("f")).unwrap();
    let out = Command::new(bin()).arg("umount").arg(&mnt).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("target is busy") && err.lines().count() == 1, "{err}");
    assert!(locked(&img), "the busy mount was let go");
    let closer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(held);
    });
    let out = Command::new(bin()).args(["umount", "--lazy"]).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    closer.join().unwrap();
    assert!(!locked(&img), "the image is still locked after cjfs umount --lazy");
    let out = Command::new(bin()).args(["cat", img.to_str().unwrap(), "/f"]).output().unwrap();
    assert_eq!(out.stdout, b"open");
}

/// `cjfs bench sqlite --fuse DIR --fuse-emulated`: every configuration's rounds through a
/// FUSE mount this process serves from an emulated device; the tables name the device
/// `fuse-<preset>`, every configuration has a figure, and no mount is left behind.
#[test]
fn sqlite_rounds_through_fuse_on_an_emulated_device() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: sqlite_rounds_through_fuse_on_an_emulated_device: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new(bin())
        .args(["bench", "sqlite", "--fuse"])
        .arg(dir.path())
        .args(["--fuse-emulated", "--device", "ramdisk", "--modes", "delete,wal", "--per-txn", "1"])
        .args(["--records-small", "30", "--reps", "1", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tables = std::fs::read_to_string(out_dir.join("tables.md")).unwrap();
    assert!(tables.contains("#### fuse-ramdisk"), "{tables}");
    for mode in ["delete", "wal"] {
        for phase in ["insert", "update", "delete"] {
            let line = tables
                .lines()
                .find(|l| l.starts_with(&format!("| {mode} | 1 | {phase} |")))
                .unwrap_or_else(|| panic!("no {mode} {phase} line:\n{tables}"));
            // nojournal, ordered, data, joj, adaptive: five figures, none missing.
            assert_eq!(line.matches(" | ").count(), 7, "{line}");
            assert!(!line.contains(" - "), "{line}");
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.path().to_str().unwrap()), "no mount left behind");
}

/// The process holding the `flock` of `image`, from `/proc/locks`.
fn lock_holder(image: &Path) -> Option<i32> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(image).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let ours = f.len() > 5 && f[1] == "FLOCK" && f[5].rsplit(':').next() == Some(&ino.to_string());
        if ours { f[4].parse().ok() } else { None }
    })
}

/// `kill -9` of a mount, then at once `cjfs recover`: the dying daemon still holds the image's
/// lock for a moment, which recovery waits out instead of calling the image in use; a live
/// mount is refused with its process named.
#[test]
fn recover_right_after_kill_9_waits_for_the_dying_mount() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: recover_right_after_kill_9_waits_for_the_dying_mount: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("k.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let run = |args: &[&str]| Command::new(bin()).args(args).output().unwrap();
    let (i, m) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    assert!(run(&["mkfs", i, "--size", "64M"]).status.success());
    for round in 0..5 {
        let out = run(&["--journal", "jbd2", "mount", i, m]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let pid = lock_holder(&img).expect("the daemon holds the lock");
        if round == 0 {
            let out = run(&["recover", i]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success());
            assert!(err.contains(&format!("in use: process {pid} (cjfs)")), "{err}");
        }
        for n in 0..20 {
            std::fs::write(mnt.join(format!("r{round}-{n}")), b"x").unwrap();
        }
        File::open(mnt.join(format!("r{round}-0"))).unwrap().sync_all().unwrap();
        // SAFETY: kill(2) has no memory effects; `pid` is the mount daemon.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let out = run(&["recover", i]);
        assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
        let _ = Command::new("fusermount3").args(["-u", "-z"]).arg(&mnt).status();
        let out = run(&["cat", i, &format!("/r{round}-0")]);
        assert_eq!(out.stdout, b"x", "round {round}: the fsynced file after recovery");
    }
}

/// A file system with a ro_compat feature cjfs does not maintain (`verity`, set by
/// `tune2fs`) mounts with `-o ro` and serves its files; a read-write mount is refused naming
/// the feature, and neither changes a byte of the image. A `quota` one mounts read-write,
/// and e2fsck finds its usage exact after writes through the mount.
#[test]
fn a_verity_file_system_mounts_read_only_a_quota_one_read_write() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: a_verity_file_system_mounts_read_only_a_quota_one_read_write: {why}");
        return;
    }
    let have = Command::new("sh").arg("-c").arg("command -v tune2fs").output();
    if !have.map(|o| o.status.success()).unwrap_or(false) {
        println!(
            "SKIP: a_verity_file_system_mounts_read_only_a_quota_one_read_write: tune2fs is not installed"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("q.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let local = dir.path().join("local");
    std::fs::write(&local, b"quota'd").unwrap();
    let run = |args: &[&std::ffi::OsStr]| Command::new(bin()).args(args).output().unwrap();
    let out = run(&["mkfs".as_ref(), img.as_os_str(), "--size".as_ref(), "64M".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run(&["put".as_ref(), img.as_os_str(), local.as_os_str(), "/f".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st = Command::new("tune2fs").args(["-O", "verity"]).arg(&img).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let before = std::fs::read(&img).unwrap();
    let out = run(&["mount".as_ref(), img.as_os_str(), mnt.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ext4 feature(s) verity not maintained by cjfs"), "{err}");
    let out = run(&["mount".as_ref(), img.as_os_str(), mnt.as_os_str(), "-o".as_ref(), "ro".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"quota'd");
    let e = std::fs::write(mnt.join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let out = run(&["umount".as_ref(), mnt.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(&img).unwrap() == before, "the image changed");

    // quota: read-write, usage kept.
    let q = dir.path().join("quota.img");
    let out = run(&["mkfs".as_ref(), q.as_os_str(), "--size".as_ref(), "64M".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st = Command::new("tune2fs").args(["-O", "quota,project"]).arg(&q).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let out = run(&["mount".as_ref(), q.as_os_str(), mnt.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..20u32 {
        let p = mnt.join(format!("d/f{i}"));
        std::fs::write(&p, vec![i as u8; 5000 * i as usize]).unwrap();
        std::os::unix::fs::chown(&p, Some(1000 + i), Some(2000 + i % 3)).unwrap();
    }
    std::fs::remove_file(mnt.join("d/f3")).unwrap();
    // A project directory set with chattr (FS_IOC_FSSETXATTR): what is made in it is
    // charged to the project; a rename out of another project into it is EXDEV.
    let have_chattr = Command::new("sh").arg("-c").arg("command -v chattr lsattr").output();
    if have_chattr.map(|o| o.status.success()).unwrap_or(false) {
        std::fs::create_dir(mnt.join("p")).unwrap();
        let st = Command::new("chattr").args(["+P", "-p", "42"]).arg(mnt.join("p")).output().unwrap();
        assert!(st.status.success(), "chattr +P -p 42: {}", String::from_utf8_lossy(&st.stderr));
        std::fs::create_dir(mnt.join("p/sub")).unwrap();
        std::fs::write(mnt.join("p/sub/g"), vec![7u8; 40_000]).unwrap();
        let ls = Command::new("lsattr").args(["-p", "-d"]).arg(mnt.join("p/sub")).output().unwrap();
        let ls = String::from_utf8_lossy(&ls.stdout).into_owned();
        assert!(ls.trim_start().starts_with("42 ") && ls.contains('P'), "lsattr -p -d p/sub: {ls}");
        let e = std::fs::rename(mnt.join("d/f1"), mnt.join("p/f1")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}");
    } else {
        println!("SKIP (part): chattr/lsattr not installed, project ids not set");
    }
    let out = run(&["umount".as_ref(), mnt.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fsck = Command::new("e2fsck").arg("-fn").arg(&q).output().unwrap();
    assert!(
        fsck.status.success(),
        "e2fsck -fn after writes through the mount: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// A casefold file system through the mount: `chattr +F` on an empty directory, then names
/// match whatever their case (the kernel's name cache, which compares bytes, keeps no entry
/// there), writes through one spelling show through another, and e2fsck finds the hashes
/// right.
#[test]
fn a_casefolded_directory_through_the_mount() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: a_casefolded_directory_through_the_mount: {why}");
        return;
    }
    let have = Command::new("sh").arg("-c").arg("command -v mkfs.ext4 chattr e2fsck").output();
    if !have.map(|o| o.status.success()).unwrap_or(false) {
        println!("SKIP: a_casefolded_directory_through_the_mount: e2fsprogs is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("cf.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let st =
        Command::new("mkfs.ext4").args(["-q", "-F", "-O", "casefold"]).arg(&img).arg("64M").output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let run = |args: &[&std::ffi::OsStr]| Command::new(bin()).args(args).output().unwrap();
    let info = run(&["info".as_ref(), img.as_os_str()]);
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("Filename encoding:     utf8-12.1 (s_encoding 1)")
    );
    let out = run(&["mount".as_ref(), img.as_os_str(), mnt.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    let st = Command::new("chattr").arg("+F").arg(&d).output().unwrap();
    assert!(st.status.success(), "chattr +F: {}", String::from_utf8_lossy(&st.stderr));
    assert!(!d.join("README.txt").exists(), "a lookup before the file exists");
    std::fs::write(d.join("ReadMe.TXT"), b"one").unwrap();
    assert_eq!(std::fs::read(d.join("README.txt")).unwrap(), b"one");
    std::fs::write(d.join("readme.txt"), b"two").unwrap();
    assert_eq!(std::fs::read(d.join("ReadMe.TXT")).unwrap(), b"two");
    std::fs::write(d.join("Stra\u{DF}e"), b"street").unwrap();
    assert_eq!(std::fs::read(d.join("STRASSE")).unwrap(), b"street");
    let names: Vec<String> =
        std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"ReadMe.TXT".to_string()), "the name as first given: {names:?}");
    std::fs::remove_file(d.join("README.TXT")).unwrap();
    assert!(!d.join("ReadMe.TXT").exists(), "removed through another spelling");
    let out = run(&["umount".as_ref(), mnt.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fsck = Command::new("e2fsck").arg("-fn").arg(&img).output().unwrap();
    assert!(fsck.status.success(), "{}", String::from_utf8_lossy(&fsck.stdout));
}
