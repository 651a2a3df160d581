//! POSIX details through a real mount, as the kernel's ext4 answers them: explicit times on
//! an append-only file, `chown(f, -1, -1)` and `O_TRUNC` on an empty file moving the times,
//! `trusted.` names hidden from other users, `system.` names refused, names over 255
//! bytes, RENAME_EXCHANGE's change times, an immutable non-empty directory's rmdir and
//! fallocate's mtime.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::*;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `utimensat(path, [atime, mtime])`; `None` for both is `times == NULL` (now).
fn utimens(p: &Path, times: Option<[libc::timespec; 2]>) -> Result<(), i32> {
    let c = cpath(p);
    let ptr = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: a valid path and null or two timespecs.
    if unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ptr, 0) } == 0 { Ok(()) } else { Err(errno()) }
}

/// Both times set to `sec` seconds.
fn at(sec: i64) -> Option<[libc::timespec; 2]> {
    Some([libc::timespec { tv_sec: sec, tv_nsec: 0 }; 2])
}

/// (mtime, ctime) in nanoseconds as stat shows them.
fn mc(p: &Path) -> (i128, i128) {
    let m = fs::metadata(p).unwrap();
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    (ns(m.mtime(), m.mtime_nsec()), ns(m.ctime(), m.ctime_nsec()))
}

/// Set or clear inode flags with FS_IOC_GETFLAGS / FS_IOC_SETFLAGS (`chattr`).
fn chattr(p: &Path, on: libc::c_long, off: libc::c_long) {
    let f = File::open(p).unwrap();
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes an int into `flags`.
    assert_eq!(unsafe { libc::ioctl(f.as_raw_fd(), 0x8008_6601, &mut flags) }, 0);
    flags = (flags | on) & !off;
    // SAFETY: FS_IOC_SETFLAGS reads an int from `flags`.
    assert_eq!(unsafe { libc::ioctl(f.as_raw_fd(), 0x4008_6602, &flags) }, 0, "chattr: {}", errno());
}

const APPEND_FL: libc::c_long = 0x20;
const IMMUTABLE_FL: libc::c_long = 0x10;

/// Long enough for the coarse clock to move between two stamps.
fn tick() {
    std::thread::sleep(Duration::from_millis(30));
}

#[test]
fn append_only_refuses_explicit_times() {
    if skip("append_only_refuses_explicit_times", &[]) {
        return;
    }
    for opts in ["", "writeback"] {
        let s = Scratch::new(64 << 20);
        let m = s.mount(opts);
        let f = s.p("log");
        fs::write(&f, b"one\n").unwrap();
        chattr(&f, APPEND_FL, 0);
        let before = mc(&f).0;
        assert_eq!(utimens(&f, at(978_307_200)), Err(libc::EPERM), "{opts}: touch -d");
        assert_eq!(mc(&f).0, before, "{opts}: mtime forged");
        // `touch` without a date sets now, which an append-only file allows.
        tick();
        utimens(&f, None).unwrap_or_else(|e| panic!("{opts}: touch: errno {e}"));
        assert!(mc(&f).0 > before, "{opts}: touch did not move mtime");
        chattr(&f, 0, APPEND_FL);
        utimens(&f, at(978_307_200)).unwrap();
        assert_eq!(mc(&f).0, 978_307_200_000_000_000, "{opts}: explicit time once cleared");
        m.unmount();
    }
}

#[test]
fn chown_to_the_same_ids_moves_ctime() {
    if skip("chown_to_the_same_ids_moves_ctime", &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount("");
    let f = s.p("f");
    File::create(&f).unwrap();
    let c = cpath(&f);
    // chown(f, -1, -1) reaches the daemon as a SETATTR with nothing in it.
    let (m0, c0) = mc(&f);
    tick();
    // SAFETY: a valid path; -1 leaves owner and group.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), u32::MAX, u32::MAX) }, 0);
    let (m1, c1) = mc(&f);
    assert_eq!(m1, m0, "chown(-1, -1) moved mtime");
    assert!(c1 > c0, "chown(-1, -1) left ctime");
    // ext4_setattr refuses even a ctime-only change of an immutable file.
    chattr(&f, IMMUTABLE_FL, 0);
    // SAFETY: as above.
    let r = unsafe { libc::chown(c.as_ptr(), u32::MAX, u32::MAX) };
    assert_eq!((r, errno()), (-1, libc::EPERM), "chown(-1, -1) of an immutable file");
    chattr(&f, 0, IMMUTABLE_FL);
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn otrunc_of_an_empty_file_moves_mtime_and_ctime() {
    if skip("otrunc_of_an_empty_file_moves_mtime_and_ctime", &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount("");
    let f = s.p("stamp");
    File::create(&f).unwrap();
    // By open and by creat (`: > stamp`), as make's stamp files are touched.
    for how in ["open", "creat"] {
        utimens(&f, at(1_577_836_800)).unwrap();
        let (m0, c0) = mc(&f);
        tick();
        match how {
            "open" => drop(OpenOptions::new().write(true).truncate(true).open(&f).unwrap()),
            _ => drop(File::create(&f).unwrap()),
        }
        let (m1, c1) = mc(&f);
        assert!(m1 > m0 && c1 > c0, "{how}(O_TRUNC) of an empty file: ({m0}, {c0}) -> ({m1}, {c1})");
    }
    // A truncate to the same size moves them too, as on ext4 (ext4_truncate stamps both).
    utimens(&f, at(1_577_836_800)).unwrap();
    let (m0, _) = mc(&f);
    tick();
    OpenOptions::new().write(true).open(&f).unwrap().set_len(0).unwrap();
    assert!(mc(&f).0 > m0, "ftruncate to the same size");
    m.unmount();
    e2fsck_clean(&s.image);
}

/// `flistxattr` on `fd` from a thread whose file system ids are `uid` (the ids a FUSE
/// request carries; the rest of the process stays root).
fn list_as(fd: i32, uid: u32) -> Vec<String> {
    std::thread::spawn(move || {
        // SAFETY: setfsuid/setfsgid change only this thread's file system ids.
        unsafe {
            libc::setfsgid(uid);
            libc::setfsuid(uid);
        }
        let mut buf = vec![0u8; 4096];
        // SAFETY: a buffer of buf.len() bytes.
        let n = unsafe { libc::flistxattr(fd, buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 0, "flistxattr as {uid}: errno {}", errno());
        let mut names: Vec<String> = buf[..n as usize]
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        names.sort();
        names
    })
    .join()
    .unwrap()
}

#[test]
fn trusted_names_hidden_from_other_users_and_system_names_refused() {
    if skip("trusted_names_hidden_from_other_users_and_system_names_refused", &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    // The daemon serves requests of other users only with allow_other.
    let m = s.mount("allow_other");
    let f = s.p("x");
    File::create(&f).unwrap();
    let set = |name: &str| -> Result<(), i32> {
        let (p, n) = (cpath(&f), CString::new(name).unwrap());
        // SAFETY: valid strings and a one-byte value.
        let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
        if r == 0 { Ok(()) } else { Err(errno()) }
    };
    set("trusted.secret").unwrap();
    set("user.u").unwrap();
    for name in ["system.foo", "system.data", "system.richacl"] {
        assert_eq!(set(name), Err(libc::EOPNOTSUPP), "setxattr {name}");
        let (p, n) = (cpath(&f), CString::new(name).unwrap());
        // SAFETY: a size probe (null buffer).
        let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
        assert_eq!((r, errno()), (-1, libc::EOPNOTSUPP), "getxattr {name}");
    }
    let file = File::open(&f).unwrap();
    assert_eq!(list_as(file.as_raw_fd(), 0), ["trusted.secret", "user.u"]);
    assert_eq!(list_as(file.as_raw_fd(), 65534), ["user.u"]);
    drop(file);
    m.unmount();
}

#[test]
fn long_names_exchange_ctimes_immutable_rmdir_and_fallocate_times() {
    if skip("long_names_exchange_ctimes_immutable_rmdir_and_fallocate_times", &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount("");
    // Over 255 bytes: ENAMETOOLONG from stat, open and unlink, not ENOENT.
    let long = s.p(&"n".repeat(256));
    assert_eq!(fs::metadata(&long).map_err(|e| e.raw_os_error()).err(), Some(Some(libc::ENAMETOOLONG)));
    assert_eq!(File::open(&long).map_err(|e| e.raw_os_error()).err(), Some(Some(libc::ENAMETOOLONG)));
    assert_eq!(fs::remove_file(&long).map_err(|e| e.raw_os_error()).err(), Some(Some(libc::ENAMETOOLONG)));
    // RENAME_EXCHANGE changes both inodes.
    let (a, b) = (s.p("a"), s.p("b"));
    File::create(&a).unwrap();
    File::create(&b).unwrap();
    let (ca, cb) = (mc(&a).1, mc(&b).1);
    tick();
    let (pa, pb) = (cpath(&a), cpath(&b));
    // SAFETY: valid C strings; renameat2 through syscall.
    let r = unsafe {
        libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, pa.as_ptr(), libc::AT_FDCWD, pb.as_ptr(), 2u32)
    };
    assert_eq!(r, 0, "RENAME_EXCHANGE: errno {}", errno());
    assert!(mc(&b).1 > ca && mc(&a).1 > cb, "exchange left a ctime");
    // An immutable non-empty directory: EPERM, not ENOTEMPTY.
    let d = s.p("d");
    fs::create_dir(&d).unwrap();
    File::create(d.join("x")).unwrap();
    chattr(&d, IMMUTABLE_FL, 0);
    assert_eq!(fs::remove_dir(&d).map_err(|e| e.raw_os_error()).err(), Some(Some(libc::EPERM)));
    chattr(&d, 0, IMMUTABLE_FL);
    // fallocate, growing the file and with KEEP_SIZE: mtime and ctime move.
    let g = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(s.p("g")).unwrap();
    for (mode, off) in [(0, 0), (libc::FALLOC_FL_KEEP_SIZE, 1 << 20)] {
        utimens(&s.p("g"), at(1_577_836_800)).unwrap();
        let (m0, c0) = mc(&s.p("g"));
        tick();
        // SAFETY: fallocate on an open descriptor.
        assert_eq!(unsafe { libc::fallocate(g.as_raw_fd(), mode, off, 1 << 20) }, 0);
        let (m1, c1) = mc(&s.p("g"));
        assert!(m1 > m0 && c1 > c0, "fallocate mode {mode}: ({m0}, {c0}) -> ({m1}, {c1})");
    }
    drop(g);
    m.unmount();
    e2fsck_clean(&s.image);
}
