//! Outside judges shared by the tests that check images against the Linux kernel and
//! e2fsprogs: finding and running tools, loop devices and kernel mounts (released by drop
//! guards, also when a test fails), and logical snapshots of a mounted tree (names, types,
//! modes, owners, sizes, link counts, contents, symlink targets, xattrs, inode numbers, block
//! counts, mtime and ctime) with their differences.
//!
//! Used by `crates/fs/tests/judges.rs` (as `common::kernel`) and by the FUSE matrix test
//! (`crates/fuse/tests/matrix.rs`, through a `#[path]` module).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

// ---- running tools -------------------------------------------------------------------------

/// Full path of program `name` (PATH, then the usual system directories).
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .filter(|d| !d.is_empty())
        .chain(["/sbin", "/usr/sbin", "/bin", "/usr/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// `Err` naming the programs of `names` that are not installed.
pub fn need_tools(names: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = names.iter().copied().filter(|n| tool(n).is_none()).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("{} not found (install e2fsprogs and util-linux)", missing.join(", ")))
    }
}

/// Root, loop devices and the kernel's ext4, probed once by mounting a small mke2fs image.
pub fn kernel_env() -> Result<(), String> {
    static ENV: OnceLock<Result<(), String>> = OnceLock::new();
    ENV.get_or_init(probe_kernel).clone()
}

/// Mount a fresh mke2fs image through a loop device: `Err` says what is missing.
pub fn probe_kernel() -> Result<(), String> {
    need_tools(&["mke2fs", "losetup", "mount", "umount"])?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not running as root (loop devices and mounts need it)".into());
    }
    let o = run("losetup", ["-f"]);
    if o.code != 0 {
        return Err(format!("no loop device support (`losetup -f` failed: {})", o.text().trim()));
    }
    let dir = tempfile::Builder::new().prefix("cjfs-probe-").tempdir().expect("tempdir");
    let img = dir.path().join("probe.img");
    let o = run(
        "mke2fs",
        [
            OsStr::new("-q"),
            OsStr::new("-F"),
            OsStr::new("-t"),
            OsStr::new("ext4"),
            img.as_os_str(),
            OsStr::new("32M"),
        ],
    );
    assert_eq!(o.code, 0, "mke2fs of the probe image failed:\n{}", o.text());
    let lo = LoopDev::attach(&img, false)?;
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    match KMount::mount(&lo, &mnt, "") {
        Ok(mut m) => {
            m.umount();
            Ok(())
        }
        Err(e) if e.contains("unknown filesystem type") => {
            Err(format!("the kernel has no ext4 (mount said: {})", e.trim()))
        }
        Err(e) if e.contains("permission denied") || e.contains("must be superuser") => {
            Err(format!("mounting is not permitted here (mount said: {})", e.trim()))
        }
        Err(e) => panic!("probe mount of a fresh mke2fs image failed: {e}"),
    }
}

/// A finished program: exit code and output.
pub struct Out {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Out {
    /// stdout followed by stderr.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Run `prog` with `args` and wait for it.
pub fn run<I, S>(prog: &str, args: I) -> Out
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let exe = tool(prog).unwrap_or_else(|| PathBuf::from(prog));
    let o = Command::new(&exe).args(args).output().unwrap_or_else(|e| panic!("cannot run {prog}: {e}"));
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `e2fsck FLAGS IMG`.
pub fn e2fsck(img: &Path, flags: &str) -> Out {
    run("e2fsck", [OsStr::new(flags), img.as_os_str()])
}

/// `e2fsck -fn` must exit 0.
pub fn assert_fsck_clean(img: &Path, what: &str) {
    let o = e2fsck(img, "-fn");
    assert_eq!(o.code, 0, "e2fsck -fn on {what} ({}) exited {}:\n{}", img.display(), o.code, o.text());
}

// ---- loop devices and kernel mounts (drop guards) ------------------------------------------

/// A loop device, detached on drop.
pub struct LoopDev {
    /// `/dev/loopN`.
    pub dev: String,
}

impl LoopDev {
    /// `losetup -f --show [-r] IMG`.
    pub fn attach(img: &Path, read_only: bool) -> Result<LoopDev, String> {
        let mut args: Vec<OsString> = vec!["-f".into(), "--show".into()];
        if read_only {
            args.push("-r".into());
        }
        args.push(img.into());
        let o = run("losetup", &args);
        if o.code != 0 || o.stdout.trim().is_empty() {
            return Err(format!("cannot attach a loop device to {}: {}", img.display(), o.text().trim()));
        }
        Ok(LoopDev { dev: o.stdout.trim().to_string() })
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        for _ in 0..20 {
            if run("losetup", ["-d", &self.dev]).code == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("warning: could not detach {}", self.dev);
    }
}

/// A kernel mount, unmounted on drop (lazily if it is busy).
pub struct KMount {
    /// The mount point.
    pub dir: PathBuf,
    /// Still mounted (not yet unmounted by [`KMount::umount`]).
    pub mounted: bool,
}

impl KMount {
    /// `mount -t ext4 [-o OPTS] LOOP DIR`; `Err` holds mount's output.
    pub fn mount(lo: &LoopDev, dir: &Path, opts: &str) -> Result<KMount, String> {
        let mut args: Vec<OsString> = vec!["-t".into(), "ext4".into()];
        if !opts.is_empty() {
            args.push("-o".into());
            args.push(opts.into());
        }
        args.push(OsString::from(&lo.dev));
        args.push(dir.into());
        let o = run("mount", &args);
        if o.code != 0 {
            return Err(o.text());
        }
        Ok(KMount { dir: dir.to_path_buf(), mounted: true })
    }

    /// `umount DIR` (retried while busy); panics if it fails.
    pub fn umount(&mut self) {
        // "target is busy" can be transient (something else on the machine looking in).
        let mut o = run("umount", [&self.dir]);
        for _ in 0..20 {
            if o.code == 0 || !o.text().contains("busy") {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
            o = run("umount", [&self.dir]);
        }
        if o.code != 0 && tool("fuser").is_some() {
            println!("{}", run("fuser", [OsStr::new("-vm"), self.dir.as_os_str()]).text());
        }
        assert_eq!(o.code, 0, "umount {}: {}", self.dir.display(), o.text());
        self.mounted = false;
    }
}

impl Drop for KMount {
    fn drop(&mut self) {
        if self.mounted && run("umount", [&self.dir]).code != 0 {
            let _ = run("umount", [OsStr::new("-l"), self.dir.as_os_str()]);
        }
    }
}

/// syncfs(2) on the file system mounted at `dir`.
pub fn syncfs(dir: &Path) {
    let f = File::open(dir).expect("open mount point");
    // SAFETY: a valid open file descriptor.
    let r = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) };
    assert_eq!(r, 0, "syncfs: {}", std::io::Error::last_os_error());
}

// ---- logical snapshots ---------------------------------------------------------------------

/// File type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Directory.
    Dir,
    /// Regular file.
    File,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Character device.
    Chr,
    /// Block device.
    Blk,
    /// Socket.
    Sock,
}

/// Extended attributes, name to value.
pub type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// What a path looks like, as every judge can see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// File type.
    pub kind: Kind,
    /// Permission bits with setuid, setgid and sticky.
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Link count.
    pub nlink: u32,
    /// crc32c of a regular file's contents.
    pub crc: u32,
    /// Symlink target.
    pub target: Vec<u8>,
    /// (major, minor) of a device node.
    pub rdev: (u32, u32),
    /// Extended attributes.
    pub xattrs: Xattrs,
}

/// Details two images (or an image and the kernel's view of it) must also agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extra {
    /// Inode number.
    pub ino: u64,
    /// Allocated 512-byte sectors.
    pub blocks: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// Change time (seconds, nanoseconds).
    pub ctime: (i64, u32),
}

/// Every path of a tree: what all views must agree on, and the details of one image.
#[derive(Debug, Clone, Default)]
pub struct Snap {
    /// Path to what every view of the tree must agree on.
    pub tree: BTreeMap<String, Entry>,
    /// Path to details of one image.
    pub extra: BTreeMap<String, Extra>,
}

/// `dir/name` for absolute paths.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") }
}

/// `(parent, name)` of an absolute path.
pub fn split(path: &str) -> (&str, &str) {
    let i = path.rfind('/').expect("absolute path");
    (if i == 0 { "/" } else { &path[..i] }, &path[i + 1..])
}

/// `(major, minor)` of a `dev_t`.
pub fn split_dev(r: u64) -> (u32, u32) {
    (((r >> 8) & 0xfff | (r >> 32) & !0xfff) as u32, (r & 0xff | (r >> 12) & !0xff) as u32)
}

/// The ext4 "new" encoding of a device number.
pub fn make_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// A path as a C string.
pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

/// The extended attributes of `p` (not following a symbolic link).
pub fn host_xattrs(p: &Path) -> Xattrs {
    let c = cpath(p);
    let mut out = Xattrs::new();
    // SAFETY: valid C string; a null buffer of size 0 asks for the size.
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    assert!(n >= 0, "llistxattr {}: {}", p.display(), std::io::Error::last_os_error());
    let mut names = vec![0u8; n as usize];
    // SAFETY: the buffer holds `names.len()` bytes.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "llistxattr {}: {}", p.display(), std::io::Error::last_os_error());
    for name in names[..n as usize].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let cn = CString::new(name).unwrap();
        // SAFETY: as above.
        let len = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), std::ptr::null_mut(), 0) };
        assert!(len >= 0, "lgetxattr {}: {}", p.display(), std::io::Error::last_os_error());
        let mut v = vec![0u8; len as usize];
        // SAFETY: the buffer holds `v.len()` bytes.
        let len = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(len >= 0, "lgetxattr {}: {}", p.display(), std::io::Error::last_os_error());
        v.truncate(len as usize);
        out.insert(name.to_vec(), v);
    }
    out
}

/// Every path under a mount point (a kernel's or a FUSE mount's).
///
/// The names are listed first, then four threads look at the paths: through FUSE each
/// look is a few round trips to the daemon, and a tree may hold tens of thousands of paths.
pub fn walk_host(root: &Path) -> Snap {
    let mut paths = Vec::new();
    let mut stack = vec![("/".to_string(), root.to_path_buf(), true)];
    while let Some((path, abs, is_dir)) = stack.pop() {
        if is_dir {
            for d in std::fs::read_dir(&abs).unwrap_or_else(|e| panic!("read_dir {}: {e}", abs.display())) {
                let d = d.expect("dirent");
                let name = d.file_name().to_string_lossy().into_owned();
                let dir = d.file_type().unwrap_or_else(|e| panic!("{}: {e}", d.path().display())).is_dir();
                stack.push((join(&path, &name), d.path(), dir));
            }
        }
        paths.push((path, abs, is_dir));
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let looks: Vec<(String, Entry, Extra)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut buf = vec![0u8; MIB as usize];
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((path, abs, listed_dir)) = paths.get(i) else { break };
                        let (e, x) = look(abs, &mut buf);
                        assert_eq!(
                            e.kind == Kind::Dir,
                            *listed_dir,
                            "{path}: the directory entry's type differs from the inode's ({:?})",
                            e.kind
                        );
                        out.push((path.clone(), e, x));
                    }
                    out
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("walker thread")).collect()
    });
    let mut snap = Snap::default();
    for (path, e, x) in looks {
        snap.extra.insert(path.clone(), x);
        snap.tree.insert(path, e);
    }
    snap
}

/// What one path under a mount point looks like; `buf` is scratch space for reading.
fn look(abs: &Path, buf: &mut [u8]) -> (Entry, Extra) {
    let md = std::fs::symlink_metadata(abs).unwrap_or_else(|e| panic!("stat {}: {e}", abs.display()));
    let ft = md.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_char_device() {
        Kind::Chr
    } else if ft.is_block_device() {
        Kind::Blk
    } else {
        Kind::Sock
    };
    let mut e = Entry {
        kind,
        perm: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: md.size(),
        nlink: md.nlink() as u32,
        crc: 0,
        target: Vec::new(),
        rdev: (0, 0),
        xattrs: host_xattrs(abs),
    };
    match kind {
        // Empty files are not opened: through FUSE that is three requests per file.
        Kind::File if md.size() > 0 => {
            let mut f = File::open(abs).unwrap_or_else(|e| panic!("open {}: {e}", abs.display()));
            loop {
                let n = f.read(buf).unwrap_or_else(|e| panic!("read {}: {e}", abs.display()));
                if n == 0 {
                    break;
                }
                e.crc = crc32c::crc32c_append(e.crc, &buf[..n]);
            }
        }
        Kind::Symlink => {
            e.target = std::fs::read_link(abs).expect("readlink").as_os_str().as_bytes().to_vec()
        }
        Kind::Chr | Kind::Blk => e.rdev = split_dev(md.rdev()),
        _ => {}
    }
    let x = Extra {
        ino: md.ino(),
        blocks: md.blocks(),
        mtime: (md.mtime(), md.mtime_nsec() as u32),
        ctime: (md.ctime(), md.ctime_nsec() as u32),
    };
    (e, x)
}

/// Extended attributes for a message: names, sizes and checksums of the values.
pub fn show_xattrs(x: &Xattrs) -> String {
    let parts: Vec<String> = x
        .iter()
        .map(|(n, v)| {
            format!("{}=<{} bytes crc {:08x}>", String::from_utf8_lossy(n), v.len(), crc32c::crc32c(v))
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// How two entries differ (`loose_dir_size`: directories' sizes are not compared).
pub fn entry_diffs(x: &Entry, y: &Entry, loose_dir_size: bool) -> Vec<String> {
    let mut d = Vec::new();
    if x.kind != y.kind {
        d.push(format!("type {:?} vs {:?}", x.kind, y.kind));
    }
    if x.perm != y.perm {
        d.push(format!("mode {:o} vs {:o}", x.perm, y.perm));
    }
    if (x.uid, x.gid) != (y.uid, y.gid) {
        d.push(format!("owner {}:{} vs {}:{}", x.uid, x.gid, y.uid, y.gid));
    }
    if x.size != y.size && !(loose_dir_size && x.kind == Kind::Dir) {
        d.push(format!("size {} vs {}", x.size, y.size));
    }
    if x.nlink != y.nlink {
        d.push(format!("nlink {} vs {}", x.nlink, y.nlink));
    }
    if x.crc != y.crc {
        d.push(format!("content crc {:08x} vs {:08x}", x.crc, y.crc));
    }
    if x.target != y.target {
        d.push(format!(
            "symlink target {:?} vs {:?}",
            String::from_utf8_lossy(&x.target),
            String::from_utf8_lossy(&y.target)
        ));
    }
    if x.rdev != y.rdev {
        d.push(format!("rdev {:?} vs {:?}", x.rdev, y.rdev));
    }
    if x.xattrs != y.xattrs {
        d.push(format!("xattrs {} vs {}", show_xattrs(&x.xattrs), show_xattrs(&y.xattrs)));
    }
    d
}

/// Differences between two snapshots. `strict` also compares directory sizes, inode
/// numbers, block counts, mtime and ctime.
pub fn diff(an: &str, a: &Snap, bn: &str, b: &Snap, strict: bool) -> Vec<String> {
    diff_opts(an, a, bn, b, strict, strict)
}

/// [`diff`]; `dir_sizes` false leaves out directories' sizes and block counts even when
/// `strict` (e2fsck -fy may compact directories: its "Pass 3A: Optimizing directories").
pub fn diff_opts(an: &str, a: &Snap, bn: &str, b: &Snap, strict: bool, dir_sizes: bool) -> Vec<String> {
    let mut out = Vec::new();
    let keys: BTreeSet<&String> = a.tree.keys().chain(b.tree.keys()).collect();
    for k in keys {
        match (a.tree.get(k), b.tree.get(k)) {
            (Some(x), None) => out.push(format!("{k}: only in {an} ({:?}, {} bytes)", x.kind, x.size)),
            (None, Some(y)) => out.push(format!("{k}: only in {bn} ({:?}, {} bytes)", y.kind, y.size)),
            (Some(x), Some(y)) => {
                for d in entry_diffs(x, y, !dir_sizes) {
                    out.push(format!("{k}: {d} ({an} vs {bn})"));
                }
                let same = |ex: &Extra, ey: &Extra| {
                    ex == ey
                        || (!dir_sizes
                            && x.kind == Kind::Dir
                            && Extra { blocks: ey.blocks, ..ex.clone() } == *ey)
                };
                if strict
                    && let (Some(ex), Some(ey)) = (a.extra.get(k), b.extra.get(k))
                    && !same(ex, ey)
                {
                    out.push(format!("{k}: {ex:?} vs {ey:?} ({an} vs {bn})"));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    out
}

/// Panic listing the differences (the first 40) between two snapshots.
pub fn assert_same(ctx: &str, an: &str, a: &Snap, bn: &str, b: &Snap, strict: bool) {
    let d = diff(an, a, bn, b, strict);
    if !d.is_empty() {
        let shown: Vec<&String> = d.iter().take(40).collect();
        panic!(
            "{ctx}: {an} and {bn} differ in {} places:\n  {}",
            d.len(),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
        );
    }
}
