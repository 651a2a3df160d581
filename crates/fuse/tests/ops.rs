//! Every operation through a real mount: namespace, attributes, xattrs (with size probing),
//! rename flags, fallocate and SEEK_DATA/SEEK_HOLE, per-file data journalling, open-unlinked
//! files, big directories, fsync variants, read-only mounts, daemon mode and signals.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn renameat2(a: &Path, b: &Path, flags: u32) -> Result<(), i32> {
    let (a, b) = (cpath(a), cpath(b));
    // SAFETY: valid C strings; renameat2 via syscall (glibc wrapper may be missing).
    let r = unsafe {
        libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags)
    };
    if r == 0 { Ok(()) } else { Err(errno()) }
}

fn getxattr(p: &Path, name: &str, size: usize) -> Result<(isize, Vec<u8>), i32> {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; size];
    // SAFETY: buffer of `size` bytes (null when 0).
    let r = unsafe {
        libc::getxattr(
            p.as_ptr(),
            n.as_ptr(),
            if size == 0 { std::ptr::null_mut() } else { buf.as_mut_ptr().cast() },
            size,
        )
    };
    if r < 0 { Err(errno()) } else { Ok((r, buf[..if size == 0 { 0 } else { r as usize }].to_vec())) }
}

fn setxattr(p: &Path, name: &str, v: &[u8], flags: i32) -> Result<(), i32> {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: valid pointers and lengths.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags) };
    if r == 0 { Ok(()) } else { Err(errno()) }
}

fn listxattr(p: &Path, size: usize) -> Result<(isize, Vec<u8>), i32> {
    let p = cpath(p);
    let mut buf = vec![0u8; size];
    // SAFETY: as getxattr.
    let r = unsafe {
        libc::listxattr(
            p.as_ptr(),
            if size == 0 { std::ptr::null_mut() } else { buf.as_mut_ptr().cast() },
            size,
        )
    };
    if r < 0 { Err(errno()) } else { Ok((r, buf[..if size == 0 { 0 } else { r as usize }].to_vec())) }
}

fn statvfs_free(p: &Path) -> u64 {
    let c = cpath(p);
    // SAFETY: statvfs fills the zeroed struct.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0);
        s.f_bfree
    }
}

#[test]
fn namespace_and_attributes() {
    if skip("namespace_and_attributes", &[]) {
        return;
    }
    let s = Scratch::new(256 << 20);
    let m = s.mount("");
    // create, O_EXCL
    fs::write(s.p("a"), b"hello").unwrap();
    let e = OpenOptions::new().write(true).create_new(true).open(s.p("a")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    // mkdir, nested, rmdir of non-empty
    fs::create_dir_all(s.p("d/e/f")).unwrap();
    assert_eq!(fs::remove_dir(s.p("d")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    // symlink, readlink, hard link
    std::os::unix::fs::symlink("a", s.p("sl")).unwrap();
    assert_eq!(fs::read_link(s.p("sl")).unwrap(), Path::new("a"));
    assert_eq!(fs::read(s.p("sl")).unwrap(), b"hello");
    let long_target = "x/".repeat(300);
    std::os::unix::fs::symlink(&long_target, s.p("slow")).unwrap();
    assert_eq!(fs::read_link(s.p("slow")).unwrap(), Path::new(&long_target));
    fs::hard_link(s.p("a"), s.p("d/a2")).unwrap();
    assert_eq!(fs::metadata(s.p("a")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(s.p("a")).unwrap().ino(), fs::metadata(s.p("d/a2")).unwrap().ino());
    // mknod fifo
    let fifo = cpath(&s.p("fifo"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    assert!(fs::symlink_metadata(s.p("fifo")).unwrap().file_type().is_fifo());
    // chmod, chown, utimens, truncate
    fs::set_permissions(s.p("a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(s.p("a")).unwrap().mode() & 0o7777, 0o600);
    std::os::unix::fs::chown(s.p("a"), Some(1234), Some(5678)).unwrap();
    let md = fs::metadata(s.p("a")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    let f = File::options().write(true).open(s.p("a")).unwrap();
    f.set_times(fs::FileTimes::new().set_modified(std::time::UNIX_EPOCH + Duration::new(1_000_000, 42)))
        .unwrap();
    f.set_len(100_000).unwrap();
    drop(f);
    let md = fs::metadata(s.p("a")).unwrap();
    assert_eq!(md.len(), 100_000);
    let data = fs::read(s.p("a")).unwrap();
    assert_eq!(&data[..5], b"hello");
    assert!(data[5..].iter().all(|&b| b == 0));
    // rename over, NOREPLACE, EXCHANGE
    fs::write(s.p("b"), b"bee").unwrap();
    assert_eq!(renameat2(&s.p("b"), &s.p("a"), libc::RENAME_NOREPLACE), Err(libc::EEXIST));
    renameat2(&s.p("b"), &s.p("d/a2"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(s.p("b")).unwrap()[..5], *b"hello");
    assert_eq!(fs::read(s.p("d/a2")).unwrap(), b"bee");
    fs::rename(s.p("d/a2"), s.p("a")).unwrap();
    assert_eq!(fs::read(s.p("a")).unwrap(), b"bee");
    // RENAME_WHITEOUT (overlayfs' upper layer): a character device 0:0 at the old name.
    fs::write(s.p("w"), b"white").unwrap();
    renameat2(&s.p("w"), &s.p("d/w"), libc::RENAME_WHITEOUT).unwrap();
    let md = fs::symlink_metadata(s.p("w")).unwrap();
    assert!(md.file_type().is_char_device(), "{md:?}");
    assert_eq!((md.rdev(), md.mode() & 0o7777), (0, 0));
    assert_eq!(fs::read(s.p("d/w")).unwrap(), b"white");
    let both = libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE;
    assert_eq!(renameat2(&s.p("d/w"), &s.p("a"), both), Err(libc::EINVAL));
    fs::remove_file(s.p("w")).unwrap();
    fs::remove_file(s.p("d/w")).unwrap();
    assert_eq!(fs::metadata(s.p("b")).unwrap().nlink(), 1);
    // directory rename into its own subtree fails
    assert_eq!(fs::rename(s.p("d"), s.p("d/e/g")).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    fs::rename(s.p("d/e"), s.p("e")).unwrap();
    assert!(s.p("e/f").is_dir());
    // unlink, rmdir, ENOENT, ENOTDIR, EISDIR
    fs::remove_file(s.p("b")).unwrap();
    assert_eq!(fs::remove_file(s.p("b")).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    assert_eq!(fs::read(s.p("a/x")).unwrap_err().raw_os_error(), Some(libc::ENOTDIR));
    assert_eq!(fs::remove_file(s.p("e")).unwrap_err().raw_os_error(), Some(libc::EISDIR));
    fs::remove_dir(s.p("e/f")).unwrap();
    let long = "n".repeat(256);
    assert_eq!(fs::write(s.p(&long), b"").unwrap_err().raw_os_error(), Some(libc::ENAMETOOLONG));
    // statfs
    let c = cpath(&s.mnt);
    // SAFETY: statvfs fills the zeroed struct.
    let sv = unsafe {
        let mut sv: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut sv), 0);
        sv
    };
    assert_eq!(sv.f_bsize, 4096);
    // As ext4 reports: the total leaves out the metadata (inode tables, journal), and the
    // blocks available to unprivileged callers are fewer than the free ones.
    assert!(sv.f_blocks < 65536 && sv.f_blocks > 65536 * 8 / 10, "f_blocks {}", sv.f_blocks);
    assert!(sv.f_bfree > 0 && sv.f_bfree < sv.f_blocks && sv.f_namemax == 255);
    assert!(sv.f_bavail < sv.f_bfree);
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn big_directory_readdir_and_lookup() {
    if skip("big_directory_readdir_and_lookup", &[]) {
        return;
    }
    let s = Scratch::new(256 << 20);
    let m = s.mount("");
    fs::create_dir(s.p("big")).unwrap();
    for i in 0..3000 {
        File::create(s.p(&format!("big/file-with-a-longish-name-{i:05}"))).unwrap();
    }
    for i in (0..3000).step_by(3) {
        fs::remove_file(s.p(&format!("big/file-with-a-longish-name-{i:05}"))).unwrap();
    }
    let mut names: Vec<String> =
        fs::read_dir(s.p("big")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let want: Vec<String> =
        (0..3000).filter(|i| i % 3 != 0).map(|i| format!("file-with-a-longish-name-{i:05}")).collect();
    assert_eq!(names, want);
    let ls = sh(&s.mnt, "ls -la big | wc -l");
    assert_eq!(ls.trim(), "2003", "total + . + .. + 2000 entries");
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn xattrs_with_size_probing() {
    if skip("xattrs_with_size_probing", &[]) {
        return;
    }
    let s = Scratch::new(128 << 20);
    let m = s.mount("");
    let f = s.p("x");
    fs::write(&f, b"data").unwrap();
    assert_eq!(getxattr(&f, "user.nope", 0), Err(libc::ENODATA));
    setxattr(&f, "user.k", b"value-1", 0).unwrap();
    assert_eq!(setxattr(&f, "user.k", b"v", libc::XATTR_CREATE), Err(libc::EEXIST));
    assert_eq!(setxattr(&f, "user.new", b"v", libc::XATTR_REPLACE), Err(libc::ENODATA));
    // size 0 asks for the size; too small is ERANGE
    assert_eq!(getxattr(&f, "user.k", 0).unwrap().0, 7);
    assert_eq!(getxattr(&f, "user.k", 3), Err(libc::ERANGE));
    assert_eq!(getxattr(&f, "user.k", 64).unwrap().1, b"value-1");
    let big = vec![b'z'; 3000];
    setxattr(&f, "user.big", &big, 0).unwrap();
    assert_eq!(getxattr(&f, "user.big", 4096).unwrap().1, big);
    // A value that fits no xattr block is ENOSPC, as ext4 without ea_inode answers.
    assert_eq!(setxattr(&f, "user.huge", &vec![b'h'; 4500], 0), Err(libc::ENOSPC));
    let (n, _) = listxattr(&f, 0).unwrap();
    assert_eq!(n as usize, "user.k\0user.big\0".len());
    assert_eq!(listxattr(&f, 4), Err(libc::ERANGE));
    let (_, list) = listxattr(&f, 256).unwrap();
    let mut names: Vec<&[u8]> = list.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    names.sort();
    assert_eq!(names, vec![&b"user.big"[..], &b"user.k"[..]]);
    let c = cpath(&f);
    let n = CString::new("user.k").unwrap();
    // SAFETY: valid C strings.
    assert_eq!(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) }, 0);
    assert_eq!(getxattr(&f, "user.k", 0), Err(libc::ENODATA));
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn per_file_data_journalling() {
    if skip("per_file_data_journalling", &[]) {
        return;
    }
    let s = Scratch::new(128 << 20);
    let m = s.mount("");
    let f = s.p("j");
    fs::write(&f, b"journal me").unwrap();
    assert_eq!(getxattr(&f, "user.cjfs.journal", 64).unwrap().1, b"ordered");
    setxattr(&f, "user.cjfs.journal", b"data", 0).unwrap();
    assert_eq!(getxattr(&f, "user.cjfs.journal", 64).unwrap().1, b"data");
    assert_eq!(setxattr(&f, "user.cjfs.journal", b"bogus", 0), Err(libc::EINVAL));
    // chattr through FS_IOC_GETFLAGS / SETFLAGS
    let file = File::open(&f).unwrap();
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes an int into `flags`.
    assert_eq!(unsafe { libc::ioctl(file.as_raw_fd(), 0x8008_6601, &mut flags) }, 0);
    assert_ne!(flags & 0x4000, 0, "lsattr shows j");
    flags &= !0x4000;
    // SAFETY: FS_IOC_SETFLAGS reads an int from `flags`.
    assert_eq!(unsafe { libc::ioctl(file.as_raw_fd(), 0x4008_6602, &flags) }, 0);
    assert_eq!(getxattr(&f, "user.cjfs.journal", 64).unwrap().1, b"ordered");
    drop(file);
    if have("chattr") && have("lsattr") {
        sh(&s.mnt, "chattr +j j && lsattr j | grep -q '^[^ ]*j'");
        assert_eq!(getxattr(&f, "user.cjfs.journal", 64).unwrap().1, b"data");
    }
    let mut w = OpenOptions::new().append(true).open(&f).unwrap();
    w.write_all(&pattern(1, 200_000)).unwrap();
    w.sync_all().unwrap();
    drop(w);
    m.unmount();
    e2fsck_clean(&s.image);
    let m = s.mount("");
    let d = fs::read(&f).unwrap();
    assert_eq!(&d[..10], b"journal me");
    assert_eq!(&d[10..], &pattern(1, 200_000)[..]);
    assert_eq!(getxattr(&f, "user.cjfs.journal", 64).unwrap().1, b"data", "the flag is on disk");
    m.unmount();
}

/// `chattr +i` / `+a` through FS_IOC_SETFLAGS: the mount refuses what ext4 refuses (EPERM on
/// writing opens, truncation, unlink, rename), appends pass, `-i` gives the file back, and a
/// flag cjfs does not honour (`+S`) is refused rather than stored.
#[test]
fn immutable_and_append_only_through_chattr() {
    if skip("immutable_and_append_only_through_chattr", &[]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount("");
    let (imm, app) = (s.p("imm"), s.p("app"));
    fs::write(&imm, b"fixed").unwrap();
    fs::write(&app, b"one\n").unwrap();
    let set = |p: &Path, on: libc::c_long, off: libc::c_long| -> Result<(), i32> {
        let f = File::open(p).unwrap();
        let mut flags: libc::c_long = 0;
        // SAFETY: FS_IOC_GETFLAGS writes an int into `flags`.
        assert_eq!(unsafe { libc::ioctl(f.as_raw_fd(), 0x8008_6601, &mut flags) }, 0);
        flags = (flags | on) & !off;
        // SAFETY: FS_IOC_SETFLAGS reads an int from `flags`.
        if unsafe { libc::ioctl(f.as_raw_fd(), 0x4008_6602, &flags) } == 0 { Ok(()) } else { Err(errno()) }
    };
    set(&imm, 0x10, 0).unwrap();
    set(&app, 0x20, 0).unwrap();
    let eperm = |r: std::io::Result<()>, what: &str| {
        assert_eq!(r.map_err(|e| e.raw_os_error()), Err(Some(libc::EPERM)), "{what}");
    };
    eperm(OpenOptions::new().write(true).open(&imm).map(drop), "open +i for writing");
    eperm(fs::remove_file(&imm), "unlink +i");
    eperm(fs::rename(&imm, s.p("moved")), "rename +i");
    eperm(fs::hard_link(&imm, s.p("l")), "link +i");
    eperm(OpenOptions::new().write(true).open(&app).map(drop), "open +a without O_APPEND");
    eperm(
        OpenOptions::new().append(true).custom_flags(libc::O_TRUNC).open(&app).map(drop),
        "open +a with O_TRUNC",
    );
    eperm(fs::remove_file(&app), "unlink +a");
    let mut w = OpenOptions::new().append(true).open(&app).unwrap();
    w.write_all(b"two\n").unwrap();
    w.sync_all().unwrap();
    drop(w);
    assert_eq!(fs::read(&app).unwrap(), b"one\ntwo\n");
    assert_eq!(fs::read(&imm).unwrap(), b"fixed");
    assert_eq!(set(&imm, 0x4, 0), Err(libc::EOPNOTSUPP), "chattr +c");
    assert_eq!(set(&imm, 0x40, 0), Err(libc::EPERM), "chattr +d while immutable");
    set(&app, 0x40, 0).unwrap();
    set(&imm, 0, 0x10).unwrap();
    set(&app, 0, 0x20).unwrap();
    fs::write(&imm, b"free").unwrap();
    fs::remove_file(&app).unwrap();
    set(&imm, 0x10, 0).unwrap();
    m.unmount();
    e2fsck_clean(&s.image);
    let m = s.mount("");
    eperm(fs::remove_file(&imm), "unlink +i after a remount");
    set(&imm, 0, 0x10).unwrap();
    m.unmount();
}

#[test]
fn fallocate_and_seek_data_hole() {
    if skip("fallocate_and_seek_data_hole", &[]) {
        return;
    }
    let s = Scratch::new(128 << 20);
    let m = s.mount("");
    let mut f =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(s.p("sparse")).unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(&[7u8; 4096]).unwrap();
    f.sync_all().unwrap();
    let fd = f.as_raw_fd();
    // SAFETY: lseek on an open descriptor.
    unsafe {
        assert_eq!(libc::lseek(fd, 0, libc::SEEK_DATA), 1 << 20);
        assert_eq!(libc::lseek(fd, 0, libc::SEEK_HOLE), 0);
        assert_eq!(libc::lseek(fd, 1 << 20, libc::SEEK_HOLE), (1 << 20) + 4096);
        assert_eq!(libc::lseek(fd, (1 << 20) + 4096, libc::SEEK_DATA), -1);
        assert_eq!(errno(), libc::ENXIO);
    }
    // SAFETY: fallocate on an open descriptor.
    unsafe {
        assert_eq!(libc::fallocate(fd, 0, 2 << 20, 1 << 20), 0);
    }
    assert_eq!(f.metadata().unwrap().len(), 3 << 20);
    // SAFETY: as above.
    unsafe {
        assert_eq!(libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 3 << 20, 1 << 20), 0);
        assert_eq!(
            libc::fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 4096),
            0
        );
        assert_eq!(libc::fallocate(fd, libc::FALLOC_FL_ZERO_RANGE, 0, 8192), 0);
        assert_eq!(libc::fallocate(fd, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
    }
    assert_eq!(f.metadata().unwrap().len(), 3 << 20);
    let mut buf = vec![1u8; 4096];
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "punched range reads zeros");
    // A truncation to the same size drops the blocks fallocated past it, as on ext4.
    use std::os::unix::fs::MetadataExt;
    let blocks = f.metadata().unwrap().blocks();
    f.set_len(3 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().blocks(), blocks - (1 << 20) / 512, "keep-size blocks past EOF");
    drop(f);
    // O_RDONLY|O_TRUNC truncates, as Linux does.
    drop(OpenOptions::new().read(true).custom_flags(libc::O_TRUNC).open(s.p("sparse")).unwrap());
    assert_eq!(fs::metadata(s.p("sparse")).unwrap().len(), 0, "O_RDONLY|O_TRUNC");
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn unlinked_open_file_lives_until_closed() {
    if skip("unlinked_open_file_lives_until_closed", &[]) {
        return;
    }
    let s = Scratch::new(256 << 20);
    let m = s.mount("");
    let free0 = statvfs_free(&s.mnt);
    let mut f =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(s.p("tmp")).unwrap();
    let data = pattern(9, 8 << 20);
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    fs::remove_file(s.p("tmp")).unwrap();
    assert!(!s.p("tmp").exists());
    // Still readable and writable through the descriptor.
    f.write_all(b"tail").unwrap();
    f.sync_all().unwrap();
    let mut back = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(&back[..data.len()], &data[..]);
    assert_eq!(&back[data.len()..], b"tail");
    assert!(statvfs_free(&s.mnt) < free0 - 2000, "blocks still allocated while open");
    drop(f);
    // The kernel forgets the inode asynchronously; the blocks come back soon after.
    let t0 = Instant::now();
    while statvfs_free(&s.mnt) < free0 - 16 {
        assert!(t0.elapsed() < Duration::from_secs(20), "blocks of the unlinked file never freed");
        std::thread::sleep(Duration::from_millis(50));
        // Dropping the kernel's dentry cache makes it send the forget now.
        let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
    }
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn fsync_variants_and_sync_writes() {
    if skip("fsync_variants_and_sync_writes", &[]) {
        return;
    }
    let s = Scratch::new(128 << 20);
    let m = s.mount("");
    let mut f = File::create(s.p("f")).unwrap();
    f.write_all(b"one").unwrap();
    f.sync_data().unwrap();
    f.write_all(b"two").unwrap();
    f.sync_all().unwrap();
    let d = File::open(&s.mnt).unwrap();
    d.sync_all().unwrap();
    // SAFETY: fdatasync on an open directory descriptor.
    assert_eq!(unsafe { libc::fdatasync(d.as_raw_fd()) }, 0);
    let mut g = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_SYNC)
        .open(s.p("g"))
        .unwrap();
    g.write_all(b"sync write").unwrap();
    drop(g);
    // SAFETY: syncfs on an open descriptor.
    assert_eq!(unsafe { libc::syncfs(d.as_raw_fd()) }, 0);
    drop((f, d));
    m.crash();
    // Everything above was synced: a crash loses none of it.
    let m = s.mount("");
    assert_eq!(fs::read(s.p("f")).unwrap(), b"onetwo");
    assert_eq!(fs::read(s.p("g")).unwrap(), b"sync write");
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn read_only_mount() {
    if skip("read_only_mount", &[]) {
        return;
    }
    let s = Scratch::new(128 << 20);
    let m = s.mount("");
    fs::write(s.p("keep"), b"kept").unwrap();
    m.unmount();
    let m = s.mount("ro");
    assert_eq!(fs::read(s.p("keep")).unwrap(), b"kept");
    assert_eq!(fs::write(s.p("new"), b"x").unwrap_err().raw_os_error(), Some(libc::EROFS));
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn daemon_mode_and_signals() {
    if skip("daemon_mode_and_signals", &[]) {
        return;
    }
    let s = Scratch::new(128 << 20);
    // Daemonized: returns once mounted; fusermount3 -u ends the daemon, which unlocks.
    let st = Command::new(CJFS_MOUNT)
        .arg(&s.image)
        .arg(&s.mnt)
        .arg("-o")
        .arg("data=journal,commit=1")
        .status()
        .unwrap();
    assert!(st.success());
    assert!(is_mounted(&s.mnt), "mounted when cjfs-mount returns");
    assert!(image_locked(&s.image));
    fs::write(s.p("d"), b"daemon").unwrap();
    let out = Command::new("fusermount3").arg("-u").arg(&s.mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t0 = Instant::now();
    while image_locked(&s.image) {
        assert!(t0.elapsed() < Duration::from_secs(60), "daemon never finished unmounting");
        std::thread::sleep(Duration::from_millis(20));
    }
    e2fsck_clean(&s.image);
    // SIGTERM and SIGINT unmount cleanly too.
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut m = s.mount("");
        fs::write(s.p(&format!("sig{sig}")), b"x").unwrap();
        m.signal(sig);
        let st = m.wait(Duration::from_secs(60));
        assert!(st.success(), "exit after signal {sig}: {st}\n{}", m.log_text());
        assert!(!is_mounted(&s.mnt));
        e2fsck_clean(&s.image);
    }
    let m = s.mount("");
    assert_eq!(fs::read(s.p("d")).unwrap(), b"daemon");
    assert!(s.p(&format!("sig{}", libc::SIGTERM)).exists());
    m.unmount();
}
