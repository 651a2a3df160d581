//! Where a workload runs: cjfs in-process, or any mounted directory through plain system
//! calls. Workloads are written once against [`Target`], so the kernel's file systems and
//! cjfs are measured by the very same generator.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use cjfs_blockdev::DeviceStats;
use cjfs_fs::{FileType, Fs, FsError, ROOT_INO, RenameFlags, SetAttr};
use cjfs_journal::StatsSnapshot;
use parking_lot::Mutex;

/// An open file of a target.
pub type Fh = u64;

/// What [`Target::stat`] reports about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// It is a directory.
    pub is_dir: bool,
    /// Size in bytes.
    pub size: u64,
}

/// A file system a workload can drive. Paths are relative to the target's root and use `/`.
pub trait Target: Send + Sync {
    /// One-line description (kind, mode, device).
    fn describe(&self) -> String;
    /// Make a directory.
    fn mkdir(&self, path: &str) -> io::Result<()>;
    /// Create (or truncate) a file and open it for writing.
    fn create(&self, path: &str) -> io::Result<Fh>;
    /// Open an existing file.
    fn open(&self, path: &str) -> io::Result<Fh>;
    /// Write at an offset.
    fn write_at(&self, fh: Fh, off: u64, data: &[u8]) -> io::Result<()>;
    /// Read at an offset; returns bytes read.
    fn read_at(&self, fh: Fh, off: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Current size of an open file.
    fn size(&self, fh: Fh) -> io::Result<u64>;
    /// Truncate an open file.
    fn truncate(&self, fh: Fh, size: u64) -> io::Result<()>;
    /// fsync (or fdatasync).
    fn fsync(&self, fh: Fh, datasync: bool) -> io::Result<()>;
    /// Close.
    fn close(&self, fh: Fh) -> io::Result<()>;
    /// Remove a file.
    fn unlink(&self, path: &str) -> io::Result<()>;
    /// Remove an empty directory.
    fn rmdir(&self, path: &str) -> io::Result<()>;
    /// Rename.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// fsync a directory.
    fn fsync_dir(&self, path: &str) -> io::Result<()>;
    /// fdatasync a directory opened read-only, as dbench's `--sync-dir` does after unlink,
    /// rmdir and rename (its `sync_parent`); by default [`Target::fsync_dir`].
    fn datasync_dir(&self, path: &str) -> io::Result<()> {
        self.fsync_dir(path)
    }
    /// Whether a path exists.
    fn exists(&self, path: &str) -> bool;
    /// Attributes of a path (`stat`, following nothing special).
    fn stat(&self, _path: &str) -> io::Result<Stat> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "stat not supported by this target"))
    }
    /// Names in a directory, without `.` and `..`.
    fn list_dir(&self, _path: &str) -> io::Result<Vec<String>> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "list_dir not supported by this target"))
    }
    /// Set an open file's access and modification times (dbench's SET_FILE_INFORMATION).
    fn touch(&self, _fh: Fh) -> io::Result<()> {
        Ok(())
    }
    /// File system statistics (`statvfs`); the result is discarded, the call is the work.
    fn statfs(&self) -> io::Result<()> {
        Ok(())
    }
    /// Make everything durable (`syncfs`), used between a workload's setup and its run.
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    /// Journal statistics, for cjfs targets.
    fn journal_stats(&self) -> Option<StatsSnapshot> {
        None
    }
    /// Device statistics, for cjfs targets.
    fn device_stats(&self) -> Option<DeviceStats> {
        None
    }
    /// iJournaling statistics, for cjfs targets that use it.
    fn ijournal_stats(&self) -> Option<cjfs_fs::IjStats> {
        None
    }
    /// Core-aware allocation counts `(own groups, all)` since mount, for cjfs targets.
    fn alloc_counts(&self) -> Option<(u64, u64)> {
        None
    }
    /// The kernel's journal counters for the ext4 file system holding a directory target.
    fn kernel_journal(&self) -> Option<KernelJournal> {
        None
    }
}

/// The kernel's counters of one mounted ext4 file system: its JBD2 journal
/// (`/proc/fs/jbd2/DEV-8/info`) and its fast commits (`/proc/fs/ext4/DEV/fc_info`, present
/// on kernels ≥ 5.10; all zero unless the file system was made with `-O fast_commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct KernelJournal {
    /// JBD2 transactions committed since mount.
    pub transactions: u64,
    /// Mean logged blocks per transaction since mount (the kernel prints it rounded down).
    pub logged_blocks_per_tx: u64,
    /// Fast commits written.
    pub fc_commits: u64,
    /// Fast commits that fell back to a full commit (an ineligible change).
    pub fc_ineligible: u64,
    /// Fast-commit blocks written.
    pub fc_blocks: u64,
}

impl KernelJournal {
    /// Read the counters of the file system mounted from `dev` (a device path such as
    /// `/dev/loop3`). `None` when the kernel has no JBD2 statistics for it (not ext4, or no
    /// journal).
    pub fn read(dev: &str) -> Option<KernelJournal> {
        let name = dev.rsplit('/').next()?;
        let jbd2 = std::fs::read_to_string(format!("/proc/fs/jbd2/{name}-8/info")).ok()?;
        let fc = std::fs::read_to_string(format!("/proc/fs/ext4/{name}/fc_info")).unwrap_or_default();
        let mut k = KernelJournal::parse_jbd2_info(&jbd2)?;
        let (c, i, b) = KernelJournal::parse_fc_info(&fc);
        (k.fc_commits, k.fc_ineligible, k.fc_blocks) = (c, i, b);
        Some(k)
    }

    /// Transactions and logged blocks per transaction from a `/proc/fs/jbd2/*/info` text
    /// (`N transactions (M requested), each up to B blocks` ... `L logged blocks per
    /// transaction`).
    pub fn parse_jbd2_info(s: &str) -> Option<KernelJournal> {
        let first = |l: &str| l.split_whitespace().next().and_then(|n| n.parse::<u64>().ok());
        let transactions = s.lines().find(|l| l.contains("transactions (")).and_then(first)?;
        let logged_blocks_per_tx =
            s.lines().find(|l| l.contains("logged blocks per transaction")).and_then(first).unwrap_or(0);
        Some(KernelJournal { transactions, logged_blocks_per_tx, ..Default::default() })
    }

    /// (commits, ineligible, blocks) from a `/proc/fs/ext4/*/fc_info` text; zeros when absent.
    pub fn parse_fc_info(s: &str) -> (u64, u64, u64) {
        let get = |key: &str| {
            s.lines()
                .map(str::split_whitespace)
                .find_map(|mut w| {
                    let n = w.next()?.parse::<u64>().ok()?;
                    (w.next()? == key).then_some(n)
                })
                .unwrap_or(0)
        };
        (get("commits"), get("ineligible"), get("numblks"))
    }

    /// Counts from `earlier` to `self` (the per-transaction mean stays the later one's).
    pub fn since(&self, earlier: &KernelJournal) -> KernelJournal {
        KernelJournal {
            transactions: self.transactions.saturating_sub(earlier.transactions),
            logged_blocks_per_tx: self.logged_blocks_per_tx,
            fc_commits: self.fc_commits.saturating_sub(earlier.fc_commits),
            fc_ineligible: self.fc_ineligible.saturating_sub(earlier.fc_ineligible),
            fc_blocks: self.fc_blocks.saturating_sub(earlier.fc_blocks),
        }
    }
}

/// The source device and file system type of the mount holding `dir` (from /proc/self/mounts).
pub fn mount_source(dir: &std::path::Path) -> Option<(String, String)> {
    let canon = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(usize, String, String)> = None;
    for l in mounts.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        if canon.starts_with(f[1]) && best.as_ref().is_none_or(|(n, _, _)| f[1].len() > *n) {
            best = Some((f[1].len(), f[0].to_string(), f[2].to_string()));
        }
    }
    best.map(|(_, d, t)| (d, t))
}

/// The ext4 feature flags of an ext4 superblock (the 1024 bytes at offset 1024) worth naming
/// beside a kernel target: `has_journal` and `fast_commit` (compat 0x4 and 0x400).
pub fn ext4_features(sb: &[u8]) -> Vec<&'static str> {
    const MAGIC: u16 = 0xEF53;
    if sb.len() < 0x60 || u16::from_le_bytes([sb[0x38], sb[0x39]]) != MAGIC {
        return Vec::new();
    }
    let compat = u32::from_le_bytes([sb[0x5C], sb[0x5D], sb[0x5E], sb[0x5F]]);
    [(0x4, "has_journal"), (0x400, "fast_commit")]
        .into_iter()
        .filter(|(bit, _)| compat & bit != 0)
        .map(|(_, n)| n)
        .collect()
}

/// [`ext4_features`] of the file system on block device `dev`, read from the device; empty
/// when it cannot be read or is not ext4.
pub fn ext4_features_of(dev: &str) -> Vec<&'static str> {
    use std::os::unix::fs::FileExt;
    let mut sb = vec![0u8; 1024];
    match std::fs::File::open(dev).and_then(|f| f.read_exact_at(&mut sb, 1024)) {
        Ok(()) => ext4_features(&sb),
        Err(_) => Vec::new(),
    }
}

fn io_err(e: FsError) -> io::Error {
    io::Error::new(io::Error::from_raw_os_error(e.errno()).kind(), e.to_string())
}

fn split(path: &str) -> (&str, &str) {
    let p = path.trim_matches('/');
    match p.rfind('/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => ("", p),
    }
}

/// cjfs in-process.
pub struct CjfsTarget {
    fs: Fs,
    label: String,
    /// Directory path -> inode, so workloads don't pay a path walk per operation twice.
    /// Lock: itself.
    dirs: Mutex<HashMap<String, u32>>,
}

impl CjfsTarget {
    /// Drive a mounted file system.
    pub fn new(fs: Fs, label: impl Into<String>) -> Self {
        CjfsTarget { fs, label: label.into(), dirs: Mutex::new(HashMap::new()) }
    }

    /// The file system.
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    /// Unmount, consuming the target.
    pub fn unmount(self) -> Result<(), FsError> {
        self.fs.unmount()
    }

    fn dir_ino(&self, dir: &str) -> io::Result<u32> {
        if dir.is_empty() {
            return Ok(ROOT_INO);
        }
        if let Some(i) = self.dirs.lock().get(dir) {
            return Ok(*i);
        }
        let ino = self.fs.resolve(dir).map_err(io_err)?;
        self.dirs.lock().insert(dir.to_string(), ino);
        Ok(ino)
    }

    fn ino(&self, path: &str) -> io::Result<u32> {
        let (d, n) = split(path);
        let p = self.dir_ino(d)?;
        Ok(self.fs.lookup(p, n.as_bytes()).map_err(io_err)?.ino)
    }
}

impl Target for CjfsTarget {
    fn describe(&self) -> String {
        self.label.clone()
    }
    fn mkdir(&self, path: &str) -> io::Result<()> {
        let (d, n) = split(path);
        let p = self.dir_ino(d)?;
        self.fs.mkdir(p, n.as_bytes(), 0o755, 0, 0).map_err(io_err)?;
        Ok(())
    }
    fn create(&self, path: &str) -> io::Result<Fh> {
        let (d, n) = split(path);
        let p = self.dir_ino(d)?;
        let a = match self.fs.create(p, n.as_bytes(), 0o644, 0, 0) {
            Ok(a) => a,
            Err(FsError::Exists(_)) => {
                let a = self.fs.lookup(p, n.as_bytes()).map_err(io_err)?;
                self.fs.setattr(a.ino, &SetAttr { size: Some(0), ..Default::default() }).map_err(io_err)?
            }
            Err(e) => return Err(io_err(e)),
        };
        self.fs.open_file(a.ino).map_err(io_err)?;
        Ok(u64::from(a.ino))
    }
    fn open(&self, path: &str) -> io::Result<Fh> {
        let ino = self.ino(path)?;
        self.fs.open_file(ino).map_err(io_err)?;
        Ok(u64::from(ino))
    }
    fn write_at(&self, fh: Fh, off: u64, data: &[u8]) -> io::Result<()> {
        self.fs.write(fh as u32, off, data).map_err(io_err)?;
        Ok(())
    }
    fn read_at(&self, fh: Fh, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.fs.read(fh as u32, off, buf).map_err(io_err)
    }
    fn size(&self, fh: Fh) -> io::Result<u64> {
        Ok(self.fs.getattr(fh as u32).map_err(io_err)?.size)
    }
    fn truncate(&self, fh: Fh, size: u64) -> io::Result<()> {
        self.fs.setattr(fh as u32, &SetAttr { size: Some(size), ..Default::default() }).map_err(io_err)?;
        Ok(())
    }
    fn fsync(&self, fh: Fh, datasync: bool) -> io::Result<()> {
        self.fs.fsync(fh as u32, datasync).map_err(io_err)
    }
    fn close(&self, fh: Fh) -> io::Result<()> {
        self.fs.release(fh as u32).map_err(io_err)
    }
    fn unlink(&self, path: &str) -> io::Result<()> {
        let (d, n) = split(path);
        let p = self.dir_ino(d)?;
        self.fs.unlink(p, n.as_bytes()).map_err(io_err)
    }
    fn rmdir(&self, path: &str) -> io::Result<()> {
        let (d, n) = split(path);
        let p = self.dir_ino(d)?;
        self.fs.rmdir(p, n.as_bytes()).map_err(io_err)?;
        self.dirs.lock().retain(|k, _| {
            k != path.trim_matches('/') && !k.starts_with(&format!("{}/", path.trim_matches('/')))
        });
        Ok(())
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (d1, n1) = split(from);
        let (d2, n2) = split(to);
        let p1 = self.dir_ino(d1)?;
        let p2 = self.dir_ino(d2)?;
        self.fs.rename(p1, n1.as_bytes(), p2, n2.as_bytes(), RenameFlags::default()).map_err(io_err)?;
        self.dirs.lock().clear();
        Ok(())
    }
    fn fsync_dir(&self, path: &str) -> io::Result<()> {
        let ino = self.dir_ino(path.trim_matches('/'))?;
        self.fs.fsync(ino, false).map_err(io_err)
    }
    fn datasync_dir(&self, path: &str) -> io::Result<()> {
        let ino = self.dir_ino(path.trim_matches('/'))?;
        self.fs.fsync(ino, true).map_err(io_err)
    }
    fn exists(&self, path: &str) -> bool {
        self.ino(path).is_ok()
    }
    fn stat(&self, path: &str) -> io::Result<Stat> {
        let p = path.trim_matches('/');
        let ino = if p.is_empty() { ROOT_INO } else { self.ino(p)? };
        let a = self.fs.getattr(ino).map_err(io_err)?;
        Ok(Stat { is_dir: a.kind == FileType::Directory, size: a.size })
    }
    fn list_dir(&self, path: &str) -> io::Result<Vec<String>> {
        let ino = self.dir_ino(path.trim_matches('/'))?;
        let mut out = Vec::new();
        let mut off = 0;
        loop {
            let ents = self.fs.readdir(ino, off, 256).map_err(io_err)?;
            let Some(last) = ents.last() else { break };
            off = last.next_offset;
            out.extend(
                ents.iter()
                    .filter(|e| e.name != b"." && e.name != b"..")
                    .map(|e| String::from_utf8_lossy(&e.name).into_owned()),
            );
        }
        Ok(out)
    }
    fn touch(&self, fh: Fh) -> io::Result<()> {
        let a = self.fs.getattr(fh as u32).map_err(io_err)?;
        let set = SetAttr { atime: Some(a.atime), mtime: Some(a.mtime), ..Default::default() };
        self.fs.setattr(fh as u32, &set).map_err(io_err)?;
        Ok(())
    }
    fn statfs(&self) -> io::Result<()> {
        let _ = self.fs.statfs();
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.fs.sync().map_err(io_err)
    }
    fn journal_stats(&self) -> Option<StatsSnapshot> {
        Some(self.fs.journal().stats())
    }
    fn device_stats(&self) -> Option<DeviceStats> {
        Some(self.fs.device().stats())
    }
    fn ijournal_stats(&self) -> Option<cjfs_fs::IjStats> {
        self.fs.ijournal_stats()
    }
    fn alloc_counts(&self) -> Option<(u64, u64)> {
        Some(self.fs.alloc_counts())
    }
}

/// Any directory, through plain system calls (kernel ext4/XFS, fuse2fs, a cjfs FUSE mount).
pub struct DirTarget {
    root: PathBuf,
    label: String,
    opened: AtomicU64,
    /// The block device of the ext4 mount holding `root`, for [`Target::kernel_journal`].
    ext4_dev: Option<String>,
}

impl DirTarget {
    /// Drive the directory `root`.
    pub fn new(root: impl Into<PathBuf>, label: impl Into<String>) -> Self {
        let root = root.into();
        let ext4_dev = mount_source(&root).filter(|(_, t)| t == "ext4").map(|(d, _)| d);
        DirTarget { root, label: label.into(), opened: AtomicU64::new(0), ext4_dev }
    }

    /// The directory driven.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    fn cpath(&self, path: &str) -> io::Result<CString> {
        let p = self.root.join(path.trim_start_matches('/'));
        CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    fn open_flags(&self, path: &str, flags: i32) -> io::Result<Fh> {
        let c = self.cpath(path)?;
        // SAFETY: `c` is a valid NUL-terminated path; the fd is owned by the caller via Fh.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(fd as Fh)
    }
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl Target for DirTarget {
    fn describe(&self) -> String {
        self.label.clone()
    }
    fn mkdir(&self, path: &str) -> io::Result<()> {
        let c = self.cpath(path)?;
        // SAFETY: valid C string.
        cvt(unsafe { libc::mkdir(c.as_ptr(), 0o755) })
    }
    fn create(&self, path: &str) -> io::Result<Fh> {
        self.open_flags(path, libc::O_CREAT | libc::O_TRUNC | libc::O_RDWR)
    }
    fn open(&self, path: &str) -> io::Result<Fh> {
        self.open_flags(path, libc::O_RDWR)
    }
    fn write_at(&self, fh: Fh, off: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            // SAFETY: fd from open_flags; buffer valid for its length.
            let n = unsafe {
                libc::pwrite(
                    fh as i32,
                    data[done..].as_ptr().cast(),
                    data.len() - done,
                    (off + done as u64) as i64,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            done += n as usize;
        }
        Ok(())
    }
    fn read_at(&self, fh: Fh, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: fd from open_flags; buffer valid for its length.
        let n = unsafe { libc::pread(fh as i32, buf.as_mut_ptr().cast(), buf.len(), off as i64) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }
    fn size(&self, fh: Fh) -> io::Result<u64> {
        // SAFETY: zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd from open_flags.
        cvt(unsafe { libc::fstat(fh as i32, &mut st) })?;
        Ok(st.st_size as u64)
    }
    fn truncate(&self, fh: Fh, size: u64) -> io::Result<()> {
        // SAFETY: fd from open_flags.
        cvt(unsafe { libc::ftruncate(fh as i32, size as i64) })
    }
    fn fsync(&self, fh: Fh, datasync: bool) -> io::Result<()> {
        // SAFETY: fd from open_flags.
        cvt(unsafe { if datasync { libc::fdatasync(fh as i32) } else { libc::fsync(fh as i32) } })
    }
    fn close(&self, fh: Fh) -> io::Result<()> {
        // SAFETY: fd from open_flags, closed once.
        cvt(unsafe { libc::close(fh as i32) })
    }
    fn unlink(&self, path: &str) -> io::Result<()> {
        let c = self.cpath(path)?;
        // SAFETY: valid C string.
        cvt(unsafe { libc::unlink(c.as_ptr()) })
    }
    fn rmdir(&self, path: &str) -> io::Result<()> {
        let c = self.cpath(path)?;
        // SAFETY: valid C string.
        cvt(unsafe { libc::rmdir(c.as_ptr()) })
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let a = self.cpath(from)?;
        let b = self.cpath(to)?;
        // SAFETY: valid C strings.
        cvt(unsafe { libc::rename(a.as_ptr(), b.as_ptr()) })
    }
    fn fsync_dir(&self, path: &str) -> io::Result<()> {
        let fh = self.open_flags(path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let r = self.fsync(fh, false);
        self.close(fh)?;
        r
    }
    fn datasync_dir(&self, path: &str) -> io::Result<()> {
        let fh = self.open_flags(path, libc::O_RDONLY)?;
        let r = self.fsync(fh, true);
        self.close(fh)?;
        r
    }
    fn exists(&self, path: &str) -> bool {
        self.root.join(path.trim_start_matches('/')).exists()
    }
    fn stat(&self, path: &str) -> io::Result<Stat> {
        let m = std::fs::metadata(self.root.join(path.trim_start_matches('/')))?;
        Ok(Stat { is_dir: m.is_dir(), size: m.len() })
    }
    fn list_dir(&self, path: &str) -> io::Result<Vec<String>> {
        std::fs::read_dir(self.root.join(path.trim_start_matches('/')))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    }
    fn touch(&self, fh: Fh) -> io::Result<()> {
        // SAFETY: fd from open_flags; a null times pointer means "now" for both.
        cvt(unsafe { libc::futimens(fh as i32, std::ptr::null()) })
    }
    fn statfs(&self) -> io::Result<()> {
        let c = self.cpath("")?;
        // SAFETY: zeroed statvfs is a valid out-parameter; `c` is a valid C string.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        cvt(unsafe { libc::statvfs(c.as_ptr(), &mut st) })
    }
    fn kernel_journal(&self) -> Option<KernelJournal> {
        KernelJournal::read(self.ext4_dev.as_deref()?)
    }
    fn sync_all(&self) -> io::Result<()> {
        let fh = self.open_flags("", libc::O_RDONLY | libc::O_DIRECTORY)?;
        // SAFETY: fd from open_flags.
        let r = cvt(unsafe { libc::syncfs(fh as i32) });
        self.close(fh)?;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_counters_parse() {
        let info = "1234 transactions (1200 requested), each up to 8192 blocks\naverage: \n  0ms waiting for transaction\n  0ms request delay\n  4ms running transaction\n  0ms transaction was being locked\n  0ms flushing data (in ordered mode)\n  1ms logging transaction\n  812us average transaction commit time\n  3 handles per transaction\n  5 blocks per transaction\n  7 logged blocks per transaction\n";
        let k = KernelJournal::parse_jbd2_info(info).unwrap();
        assert_eq!((k.transactions, k.logged_blocks_per_tx), (1234, 7));
        let fresh = KernelJournal::parse_jbd2_info("0 transactions (0 requested), each up to 5461 blocks\n");
        assert_eq!(fresh, Some(KernelJournal::default()));
        assert_eq!(KernelJournal::parse_jbd2_info("garbage"), None);
        let fc = "fc stats:\n95 commits\n4 ineligible\n190 numblks\n310us avg_commit_time\nIneligible reasons:\n\"Extended attributes changed\":\t0\n";
        assert_eq!(KernelJournal::parse_fc_info(fc), (95, 4, 190));
        assert_eq!(KernelJournal::parse_fc_info(""), (0, 0, 0));
        let a = KernelJournal {
            transactions: 10,
            logged_blocks_per_tx: 3,
            fc_commits: 5,
            fc_ineligible: 1,
            fc_blocks: 9,
        };
        let b = KernelJournal {
            transactions: 14,
            logged_blocks_per_tx: 4,
            fc_commits: 25,
            fc_ineligible: 1,
            fc_blocks: 49,
        };
        assert_eq!(
            b.since(&a),
            KernelJournal {
                transactions: 4,
                logged_blocks_per_tx: 4,
                fc_commits: 20,
                fc_ineligible: 0,
                fc_blocks: 40
            }
        );
    }

    #[test]
    fn ext4_feature_bits() {
        let mut sb = vec![0u8; 1024];
        assert!(ext4_features(&sb).is_empty(), "no magic, no features");
        sb[0x38..0x3A].copy_from_slice(&0xEF53u16.to_le_bytes());
        sb[0x5C..0x60].copy_from_slice(&0x4u32.to_le_bytes());
        assert_eq!(ext4_features(&sb), vec!["has_journal"]);
        sb[0x5C..0x60].copy_from_slice(&0x404u32.to_le_bytes());
        assert_eq!(ext4_features(&sb), vec!["has_journal", "fast_commit"]);
        assert!(ext4_features_of("/nonexistent/device").is_empty());
    }

    /// A kernel ext4 `-O fast_commit` file system on a loop device is recognised as such and
    /// its fast commits are counted (root, losetup and mkfs.ext4 needed; skipped otherwise).
    #[test]
    fn fast_commit_dir_target_on_loop_device() {
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("fc.img");
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
        let run = |cmd: &str, args: &[&std::ffi::OsStr]| {
            std::process::Command::new(cmd).args(args).output().is_ok_and(|o| o.status.success())
        };
        if !run(
            "mkfs.ext4",
            &["-q".as_ref(), "-F".as_ref(), "-O".as_ref(), "fast_commit".as_ref(), img.as_os_str()],
        ) || !run("mount", &["-o".as_ref(), "loop".as_ref(), img.as_os_str(), mnt.as_os_str()])
        {
            eprintln!(
                "SKIP: cannot make and loop-mount an ext4 -O fast_commit image (needs root and e2fsprogs)"
            );
            return;
        }
        let result = std::panic::catch_unwind(|| {
            let (dev, fstype) = mount_source(&mnt).unwrap();
            assert_eq!(fstype, "ext4");
            assert!(ext4_features_of(&dev).contains(&"fast_commit"), "{dev}");
            let t = DirTarget::new(&mnt, "ext4-fc");
            let k0 = t.kernel_journal();
            let Some(k0) = k0 else {
                eprintln!("SKIP: no /proc/fs/jbd2 statistics for {dev}");
                return;
            };
            let fh = t.create("a").unwrap();
            for i in 0..8u64 {
                t.write_at(fh, i * 4096, &[7u8; 4096]).unwrap();
                t.fsync(fh, false).unwrap();
            }
            t.close(fh).unwrap();
            let k = t.kernel_journal().unwrap().since(&k0);
            assert!(
                k.fc_commits >= 1 && k.fc_blocks >= k.fc_commits,
                "appends + fsync made no fast commit: {k:?}"
            );
        });
        let _ = run("umount", &[mnt.as_os_str()]);
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    }
}
