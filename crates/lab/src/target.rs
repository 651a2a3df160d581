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
}

/// Any directory, through plain system calls (kernel ext4/XFS, fuse2fs, a cjfs FUSE mount).
pub struct DirTarget {
    root: PathBuf,
    label: String,
    opened: AtomicU64,
}

impl DirTarget {
    /// Drive the directory `root`.
    pub fn new(root: impl Into<PathBuf>, label: impl Into<String>) -> Self {
        DirTarget { root: root.into(), label: label.into(), opened: AtomicU64::new(0) }
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
    fn sync_all(&self) -> io::Result<()> {
        let fh = self.open_flags("", libc::O_RDONLY | libc::O_DIRECTORY)?;
        // SAFETY: fd from open_flags.
        let r = cvt(unsafe { libc::syncfs(fh as i32) });
        self.close(fh)?;
        r
    }
}
