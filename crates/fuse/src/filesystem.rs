//! The `fuser::Filesystem` implementation: every FUSE request mapped onto one library
//! operation, with inode lifetime per the lookup/forget protocol (see the private module `lookups`).
//!
//! Requests arrive on several session threads at once (fuser's `n_threads`, one cloned
//! `/dev/fuse` descriptor each); every method here is reentrant and takes no lock of its own
//! besides the lookup table's shards. Errors are the library's [`FsError::errno`].

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use cjfs_fs::{
    AtimeUpdate, Attr, FallocMode, FileType, Fs, FsError, FsResult, Ino, RenameFlags, SetAttr, XattrFlags,
};
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, Notifier, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionUnmounter, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::convert::{entry_kind, errno, ext4_ino, file_attr, fuse_ino, time_or_now, timestamp};
use crate::lookups::LookupTable;
use crate::options::MountConfig;

/// The virtual extended attribute that switches a file's data journalling:
/// `setfattr -n user.cjfs.journal -v data|ordered FILE`.
pub const JOURNAL_XATTR: &[u8] = b"user.cjfs.journal";

/// ext4's per-file data journalling flag (`chattr +j`, `FS_JOURNAL_DATA_FL`).
const JOURNAL_DATA_FL: u32 = 0x0000_4000;
/// Flags `lsattr` may see (ext4's `EXT4_FL_USER_VISIBLE`).
const FL_USER_VISIBLE: u32 = 0x725B_DFFF;
/// Flags `chattr` may change (ext4's `EXT4_FL_USER_MODIFIABLE`); changes to other bits are
/// ignored, as ext4 does.
const FL_USER_MODIFIABLE: u32 = 0x604B_C0FF;

/// `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` (and their 32-bit forms, which the kernel's
/// fileattr code uses for FUSE).
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
/// `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR` (`struct fsxattr`, 28 bytes): the kernel reads
/// these around every `chattr`.
const FS_IOC_FSGETXATTR: u32 = 0x801C_581F;
const FS_IOC_FSSETXATTR: u32 = 0x401C_5820;
const FSXATTR_SIZE: usize = 28;

/// ext4 inode flags and their `FS_XFLAG_*` equivalents (ext4's `ext4_iflags_to_xflags`).
const XFLAG_MAP: [(u32, u32); 6] = [
    (0x0000_0008, 0x0000_0020), // SYNC
    (0x0000_0010, 0x0000_0008), // IMMUTABLE
    (0x0000_0020, 0x0000_0010), // APPEND
    (0x0000_0040, 0x0000_0080), // NODUMP
    (0x0000_0080, 0x0000_0040), // NOATIME
    (0x2000_0000, 0x0000_0200), // PROJINHERIT
];

fn xflags_of(flags: u32) -> u32 {
    XFLAG_MAP.iter().filter(|(f, _)| flags & f != 0).fold(0, |x, (_, xf)| x | xf)
}

fn iflags_of(xflags: u32) -> u32 {
    XFLAG_MAP.iter().filter(|(_, xf)| xflags & xf != 0).fold(0, |x, (f, _)| x | f)
}

/// Largest write (and read) request asked of the kernel.
pub const MAX_WRITE: u32 = 1 << 20;

/// How many times a lookup is retried when the inode it found was freed under it.
const LOOKUP_RETRIES: usize = 16;

/// Directory entries fetched from the library per batch while filling a readdir reply.
const READDIR_BATCH: usize = 128;

/// What unmounting the library returned, filled in by `destroy`.
pub type UnmountOutcome = Arc<Mutex<Option<FsResult<()>>>>;

/// The session's handle on its kernel mount, for `destroy` (see [`CjfsFuse::kernel_mount`]).
pub type KernelMount = Arc<Mutex<Option<SessionUnmounter>>>;

/// The session's channel for notifications to the kernel (see [`CjfsFuse::notifier`]).
pub type NotifierSlot = Arc<Mutex<Option<Notifier>>>;

/// A mounted cjfs file system served over FUSE.
pub struct CjfsFuse {
    fs: Fs,
    lookups: LookupTable,
    attr_ttl: Duration,
    entry_ttl: Duration,
    writeback_cache: bool,
    /// How an access that reaches the daemon moves access times: files, directories.
    atime: (AtimeUpdate, AtimeUpdate),
    outcome: UnmountOutcome,
    kernel_mount: KernelMount,
    /// For invalidating the kernel's cached attributes after a change it cannot foresee.
    notifier: NotifierSlot,
    destroyed: bool,
    /// When the session started (for `last_remove`).
    epoch: Instant,
    /// Milliseconds after `epoch` of the last unlink, rmdir or rename.
    last_remove: AtomicU64,
    /// Forget and release requests being handled right now.
    frees_in_flight: AtomicUsize,
}

/// How long after a removal an ENOSPC is retried (see [`CjfsFuse::retry_nospc`]).
const NOSPC_GRACE: Duration = Duration::from_secs(2);
/// Retries of an ENOSPC while space may still be coming back, and the pause between them.
const NOSPC_RETRIES: u32 = 10;
const NOSPC_PAUSE: Duration = Duration::from_millis(20);

impl std::fmt::Debug for CjfsFuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CjfsFuse")
            .field("fs", &self.fs)
            .field("writeback_cache", &self.writeback_cache)
            .finish()
    }
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

macro_rules! ino_or_reply {
    ($n:expr, $reply:expr) => {
        match ext4_ino($n) {
            Ok(i) => i,
            Err(e) => return $reply.error(e),
        }
    };
}

macro_rules! try_reply {
    ($r:expr, $reply:expr) => {
        match $r {
            Ok(v) => v,
            Err(e) => return $reply.error(errno(&e)),
        }
    };
}

impl CjfsFuse {
    /// Serve `fs` with the caching settings of `cfg`. `outcome` receives the result of
    /// [`Fs::unmount`] when the session ends.
    pub fn new(fs: Fs, cfg: &MountConfig, outcome: UnmountOutcome) -> Self {
        CjfsFuse {
            fs,
            lookups: LookupTable::new(),
            attr_ttl: cfg.attr_timeout,
            entry_ttl: cfg.entry_timeout,
            writeback_cache: cfg.writeback_cache && !cfg.read_only,
            atime: cfg.atime(),
            outcome,
            kernel_mount: Arc::new(Mutex::new(None)),
            notifier: Arc::new(Mutex::new(None)),
            destroyed: false,
            epoch: Instant::now(),
            last_remove: AtomicU64::new(0),
            frees_in_flight: AtomicUsize::new(0),
        }
    }

    /// Where to put the session's [`fuser::Session::unmount_callable`] once the session
    /// exists: `destroy` then unmounts through it (if the kernel has not already) and reports
    /// the outcome itself.
    pub fn kernel_mount(&self) -> KernelMount {
        self.kernel_mount.clone()
    }

    /// Where to put the session's [`fuser::Session::notifier`] once the session exists:
    /// setting an access ACL changes the mode behind the kernel's back, and the kernel's
    /// cached attributes are then dropped through it.
    pub fn notifier(&self) -> NotifierSlot {
        self.notifier.clone()
    }

    /// Drop the kernel's cached attributes of `ino` (best effort: without a notifier they
    /// expire with the attribute timeout).
    fn invalidate_attrs(&self, ino: Ino) {
        if let Some(n) = self.notifier.lock().as_ref()
            // A negative offset invalidates the attributes only, not the page cache.
            && let Err(e) = n.inval_inode(fuse_ino(ino), -1, 0)
        {
            log::debug!("invalidating the attributes of inode {ino}: {e}");
        }
    }

    fn note_remove(&self) {
        self.last_remove.store(self.epoch.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
    }

    /// Run an allocating operation, retrying an ENOSPC for a short while when space may be
    /// on its way back: the kernel sends the release of a closed file and the forget of an
    /// unlinked inode asynchronously, so a program that deletes a file and then writes can
    /// find the daemon still holding the deleted file's blocks (ext4 frees them before
    /// `unlink` returns). Only right after a removal, or while a release or forget is being
    /// handled; otherwise ENOSPC is returned at once.
    fn retry_nospc<T>(&self, mut op: impl FnMut() -> FsResult<T>) -> FsResult<T> {
        let mut tries = 0;
        loop {
            let r = op();
            let Err(FsError::NoSpace(_)) = &r else { return r };
            let last = self.last_remove.load(Ordering::Relaxed);
            let recent =
                last != 0 && self.epoch.elapsed().as_millis() as u64 <= last + NOSPC_GRACE.as_millis() as u64;
            if tries >= NOSPC_RETRIES || !(recent || self.frees_in_flight.load(Ordering::Relaxed) > 0) {
                return r;
            }
            tries += 1;
            std::thread::sleep(NOSPC_PAUSE);
        }
    }

    /// Release a library open (a file handle or the kernel's last reference).
    fn release_counted(&self, ino: Ino) -> FsResult<()> {
        self.frees_in_flight.fetch_add(1, Ordering::Relaxed);
        let r = self.fs.release(ino);
        self.frees_in_flight.fetch_sub(1, Ordering::Relaxed);
        r
    }

    fn reply_entry(&self, reply: ReplyEntry, a: &Attr) {
        reply.entry_with_ttls(
            &self.attr_ttl,
            &self.entry_ttl(),
            &file_attr(a),
            Generation(u64::from(a.generation)),
        );
    }

    /// How long the kernel may keep a name (or its absence): not at all on a casefold file
    /// system. In a casefolded directory the kernel's name cache, which compares names byte
    /// for byte, would keep one spelling's entry (or its absence) past a change made through
    /// another; and a name cached in any directory keeps its time when a rename moves it
    /// into a casefolded one, or when `chattr +F` makes its directory one.
    fn entry_ttl(&self) -> Duration {
        if self.fs.geometry().casefold.is_some() { Duration::ZERO } else { self.entry_ttl }
    }

    /// Reply to a request that made a new name for an inode (create, mknod, mkdir, symlink,
    /// link): the kernel now holds one more reference.
    fn reply_new(&self, reply: ReplyEntry, made: FsResult<Attr>) {
        let a = try_reply!(made, reply);
        let a = try_reply!(self.lookups.acquire(&self.fs, a), reply);
        self.reply_entry(reply, &a);
    }

    /// Look `name` up and count the kernel's reference, retrying when the inode found was
    /// freed (and perhaps reused) before it could be held.
    fn lookup_acquire(&self, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        let mut last = None;
        for _ in 0..LOOKUP_RETRIES {
            let a = self.fs.lookup(parent, name)?;
            match self.lookups.acquire(&self.fs, a) {
                Ok(a) => return Ok(a),
                Err(e @ (FsError::NotFound(_) | FsError::Stale(_))) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| FsError::NotFound(String::from_utf8_lossy(name).into_owned())))
    }

    /// Owner of a new inode in `parent`: the caller, with the group of a set-group-ID
    /// directory (whose subdirectories inherit the bit).
    fn owner(&self, req: &Request, parent: Ino) -> FsResult<(u32, u32, bool)> {
        let p = self.fs.getattr(parent)?;
        if p.perm & 0o2000 != 0 { Ok((req.uid(), p.gid, true)) } else { Ok((req.uid(), req.gid(), false)) }
    }

    /// Open an inode the kernel already holds (a file handle's library open).
    fn open_handle(&self, ino: Ino, flags: i32) -> FsResult<Attr> {
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let a = self.fs.open_file(ino)?;
        let (append, trunc) = (flags & libc::O_APPEND != 0, flags & libc::O_TRUNC != 0);
        if let Err(e) = cjfs_fs::protect::may_open(ino, a.flags, writable, append, trunc) {
            let _ = self.fs.release(ino);
            return Err(e);
        }
        // Also read-only: Linux truncates on O_RDONLY|O_TRUNC (the kernel has checked write
        // permission, `default_permissions`). An empty file too: the kernel's
        // handle_truncate stamps mtime and ctime whatever the size (make's stamp files).
        if trunc && a.kind == FileType::Regular {
            let set = SetAttr { size: Some(0), ..SetAttr::default() };
            if let Err(e) = self.fs.setattr(ino, &set) {
                let _ = self.fs.release(ino);
                return Err(e);
            }
        }
        Ok(a)
    }

    /// `chattr`: move the inode flags from `old` to `new` (changes outside ext4's
    /// user-modifiable set are ignored, as ext4 does). Immutable and append-only need root
    /// (`CAP_LINUX_IMMUTABLE`); flags cjfs cannot honour are refused with EOPNOTSUPP.
    fn change_flags(&self, req: &Request, ino: Ino, old: u32, new: u32) -> FsResult<()> {
        use cjfs_fs::protect::{CHATTR_FLAGS, PROTECT_FLAGS};
        let changed = (new ^ old) & FL_USER_MODIFIABLE;
        if changed & !(JOURNAL_DATA_FL | CHATTR_FLAGS) != 0 {
            return Err(FsError::NotSupported(format!(
                "inode {ino}: flags {:#x} cannot be changed",
                changed & !(JOURNAL_DATA_FL | CHATTR_FLAGS)
            )));
        }
        if changed & PROTECT_FLAGS != 0 && req.uid() != 0 {
            return Err(FsError::Perm(format!(
                "inode {ino}: only root may change the immutable and append-only flags"
            )));
        }
        // An immutable file's other flags change only together with clearing it
        // (`ext4_ioctl_check_immutable`).
        let imm = cjfs_fs::ondisk::inode::EXT4_IMMUTABLE_FL;
        if old & new & imm != 0 && changed & !imm != 0 {
            return Err(FsError::Perm(format!(
                "inode {ino} is immutable (chattr +i): clear that first to change its other flags"
            )));
        }
        if changed & JOURNAL_DATA_FL != 0 {
            self.fs.set_journal_data(ino, new & JOURNAL_DATA_FL != 0)?;
        }
        if changed & CHATTR_FLAGS != 0 {
            self.fs.set_flags(ino, changed & CHATTR_FLAGS, new)?;
            self.invalidate_attrs(ino);
        }
        Ok(())
    }

    /// An access the kernel leaves to the daemon (FUSE inodes are `S_NOATIME` in the
    /// kernel): move the access time as the mount's rule asks. Reads the kernel serves from
    /// its page cache never get here, as for every FUSE file system. A failure costs only the
    /// update; the access itself succeeded.
    fn accessed(&self, ino: Ino, how: AtimeUpdate) {
        if let Err(e) = self.fs.touch_atime(ino, how) {
            log::debug!("access time of inode {ino} not updated: {e}");
        }
    }

    fn file_open_flags(&self) -> FopenFlags {
        // One writer (this daemon) and every change goes through the kernel, so its page cache
        // stays valid across opens.
        FopenFlags::FOPEN_KEEP_CACHE
    }

    fn set_journal_mode(&self, ino: Ino, value: &[u8]) -> FsResult<()> {
        let v = value.strip_suffix(b"\0").unwrap_or(value);
        let v = v.strip_suffix(b"\n").unwrap_or(v);
        match v {
            b"data" | b"journal" => self.fs.set_journal_data(ino, true),
            b"ordered" => self.fs.set_journal_data(ino, false),
            _ => Err(FsError::Invalid(format!(
                "{}: value must be \"data\" or \"ordered\", not {:?}",
                String::from_utf8_lossy(JOURNAL_XATTR),
                String::from_utf8_lossy(v)
            ))),
        }
    }

    /// Clear set-user-ID and set-group-ID after a write or truncation by a caller without
    /// `CAP_FSETID`; whether a bit was cleared.
    fn kill_suid_sgid(&self, req: &Request, ino: Ino) -> FsResult<bool> {
        let a = self.fs.getattr(ino)?;
        let mut perm = u32::from(a.perm);
        let mut clear = 0o4000;
        // As the kernel's `setattr_should_drop_sgid`: setgid goes with group execute, and
        // without it too unless the caller is in the file's group (or root).
        if perm & 0o2000 != 0 && (perm & 0o010 != 0 || !(req.uid() == 0 || caller_in_group(req, a.gid))) {
            clear |= 0o2000;
        }
        if perm & clear == 0 {
            return Ok(false);
        }
        perm &= !clear;
        self.fs.kill_set_id(ino, perm)?;
        Ok(true)
    }
}

/// Whether the process behind `req` has `gid` as its group or a supplementary group (from
/// `/proc/PID/status`; the request carries only the fs gid).
fn caller_in_group(req: &Request, gid: u32) -> bool {
    if req.gid() == gid {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
}

/// Reply to an xattr request with `size` probing semantics: size 0 asks for the length,
/// a buffer too small is `ERANGE`.
fn reply_xattr(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

impl Filesystem for CjfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut want = InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_EXPORT_SUPPORT
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_MAX_PAGES
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            // The kernel checks permissions against POSIX ACLs (read back through getxattr)
            // and leaves the umask to the daemon, which ignores it where a default ACL is
            // inherited instead, as ext4 does (`cjfs_fs::Fs::mknod_umask`).
            | InitFlags::FUSE_POSIX_ACL
            | InitFlags::FUSE_DONT_MASK;
        if self.writeback_cache {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let supported = want & config.capabilities();
        if !supported.contains(InitFlags::FUSE_WRITEBACK_CACHE) && self.writeback_cache {
            log::warn!("the kernel does not offer the writeback cache; writing through");
            self.writeback_cache = false;
        }
        let _ = config.add_capabilities(supported);
        if let Err(nearest) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_readahead(MAX_WRITE) {
            let _ = config.set_max_readahead(nearest);
        }
        // New inodes of a 128-byte-inode image keep whole seconds: have the kernel's own times
        // (which it keeps with the writeback cache) truncated alike.
        if self.fs.geometry().inode_size <= 128 {
            let _ = config.set_time_granularity(Duration::from_secs(1));
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn destroy(&mut self) {
        if self.destroyed {
            return;
        }
        self.destroyed = true;
        let r = self.fs.clone().unmount();
        if let Err(e) = &r {
            log::error!("unmount: {e}");
        }
        *self.outcome.lock() = Some(r);
        // fuser 0.18 unmounts the mount point once more when the session ends, even after the
        // kernel unmounted it (which is what ended the session), and logs the EINVAL as
        // "Failed to umount filesystem". Taking its mount here leaves it nothing to do.
        if let Some(mut m) = self.kernel_mount.lock().take() {
            match m.unmount() {
                Ok(()) => {}
                // umount(2) without flags: EINVAL only for a directory that is not a mount point.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    log::debug!("the mount point was already unmounted");
                }
                Err(e) => log::error!("unmounting the mount point: {e}"),
            }
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = ino_or_reply!(parent, reply);
        match self.lookup_acquire(parent, name_bytes(name)) {
            Ok(a) => self.reply_entry(reply, &a),
            Err(FsError::NotFound(_)) => {
                // A negative entry the kernel may cache: every change goes through it.
                let mut none = file_attr(&dummy_attr(parent));
                none.ino = INodeNo(0);
                reply.entry_with_ttls(&Duration::ZERO, &self.entry_ttl(), &none, Generation(0));
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Ok(ino) = ext4_ino(ino) {
            self.frees_in_flight.fetch_add(1, Ordering::Relaxed);
            self.lookups.forget(&self.fs, ino, nlookup);
            self.frees_in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = ino_or_reply!(ino, reply);
        let a = try_reply!(self.fs.getattr(ino), reply);
        reply.attr(&self.attr_ttl, &file_attr(&a));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Reserved blocks are kept from the caller as ext4 keeps them (`cjfs_fs::act_as`).
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let ino = ino_or_reply!(ino, reply);
        // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves clearing set-user/group-ID to us (fuser
        // does not pass FATTR_KILL_SUIDGID): chown always clears them on non-directories, a
        // truncate by an unprivileged caller too, as the VFS does for ext4.
        if mode.is_none() && (uid.is_some() || gid.is_some() || (size.is_some() && req.uid() != 0)) {
            let a = try_reply!(self.fs.getattr(ino), reply);
            if a.kind != FileType::Directory {
                try_reply!(self.kill_suid_sgid(req, ino), reply);
            }
        }
        // The kernel marks a time set to now (FATTR_ATIME_NOW, FATTR_MTIME_NOW), except the
        // mtime of a regular file under the writeback cache, which it sends as a value (its
        // own cached time or now alike): only an explicit atime tells there.
        let explicit = |t: &Option<TimeOrNow>| matches!(t, Some(TimeOrNow::SpecificTime(_)));
        let own_mtime = explicit(&mtime)
            && self.writeback_cache
            && try_reply!(self.fs.getattr(ino), reply).kind == FileType::Regular;
        let mut set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(timestamp),
            times_set: explicit(&atime) || (explicit(&mtime) && !own_mtime),
        };
        if set == SetAttr::default() {
            // `chown(f, -1, -1)` arrives empty (the kernel sends its ATTR_CTIME only with the
            // writeback cache, for regular files): ext4 stamps ctime for it all the same.
            set.ctime = Some(cjfs_fs::Timestamp::now());
        }
        let a = try_reply!(self.fs.setattr(ino, &set), reply);
        reply.attr(&self.attr_ttl, &file_attr(&a));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let ino = ino_or_reply!(ino, reply);
        let t = try_reply!(self.fs.readlink(ino), reply);
        reply.data(&t);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let parent = ino_or_reply!(parent, reply);
        let (uid, gid, _) = try_reply!(self.owner(req, parent), reply);
        let mode = (mode & 0o170000) | (mode & 0o7777);
        self.reply_new(
            reply,
            self.retry_nospc(|| self.fs.mknod_umask(parent, name_bytes(name), mode, umask, rdev, uid, gid)),
        );
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let parent = ino_or_reply!(parent, reply);
        let (uid, gid, sgid) = try_reply!(self.owner(req, parent), reply);
        let mut perm = mode & 0o7777;
        if sgid {
            perm |= 0o2000;
        }
        self.reply_new(
            reply,
            self.retry_nospc(|| self.fs.mkdir_umask(parent, name_bytes(name), perm, umask, uid, gid)),
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = ino_or_reply!(parent, reply);
        try_reply!(self.fs.unlink(parent, name_bytes(name)), reply);
        self.note_remove();
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = ino_or_reply!(parent, reply);
        try_reply!(self.fs.rmdir(parent, name_bytes(name)), reply);
        self.note_remove();
        reply.ok();
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let parent = ino_or_reply!(parent, reply);
        let (uid, gid, _) = try_reply!(self.owner(req, parent), reply);
        let target = target.as_os_str().as_bytes();
        let made = self.retry_nospc(|| self.fs.symlink(parent, name_bytes(link_name), target, uid, gid));
        self.reply_new(reply, made);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let parent = ino_or_reply!(parent, reply);
        let newparent = ino_or_reply!(newparent, reply);
        let f = RenameFlags {
            noreplace: flags.contains(fuser::RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(fuser::RenameFlags::RENAME_EXCHANGE),
            whiteout: flags.contains(fuser::RenameFlags::RENAME_WHITEOUT),
        };
        if f.exchange && (f.noreplace || f.whiteout) {
            return reply.error(Errno::EINVAL);
        }
        try_reply!(self.fs.rename(parent, name_bytes(name), newparent, name_bytes(newname), f), reply);
        self.note_remove();
        reply.ok();
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let ino = ino_or_reply!(ino, reply);
        let newparent = ino_or_reply!(newparent, reply);
        self.reply_new(reply, self.retry_nospc(|| self.fs.link(ino, newparent, name_bytes(newname))));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino_or_reply!(ino, reply);
        let a = try_reply!(self.open_handle(ino, flags.0), reply);
        let mut killed = false;
        if flags.0 & libc::O_TRUNC != 0 && req.uid() != 0 && a.kind == FileType::Regular {
            match self.kill_suid_sgid(req, ino) {
                Ok(k) => killed = k,
                Err(e) => {
                    let _ = self.fs.release(ino);
                    return reply.error(errno(&e));
                }
            }
        }
        if killed {
            self.invalidate_attrs(ino);
        }
        reply.opened(FileHandle(0), self.file_open_flags());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let ino = ino_or_reply!(ino, reply);
        let mut buf = vec![0u8; size as usize];
        let n = try_reply!(self.fs.read(ino, offset, &mut buf), reply);
        reply.data(&buf[..n]);
        if flags.0 & libc::O_NOATIME == 0 {
            self.accessed(ino, self.atime.0);
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let ino = ino_or_reply!(ino, reply);
        let killed = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            && try_reply!(self.kill_suid_sgid(req, ino), reply);
        // With the writeback cache the kernel keeps mtime and ctime of what it caches and sends
        // them with SETATTR, possibly before the pages: a writeback must not move them on.
        let n = if self.writeback_cache && write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
            self.retry_nospc(|| self.fs.write_keep_times(ino, offset, data))
        } else {
            self.retry_nospc(|| self.fs.write(ino, offset, data))
        };
        let n = try_reply!(n, reply);
        if killed {
            // The kernel keeps its cached mode until the attribute timeout otherwise, showing
            // set-ID bits the file no longer has. Before the reply: sent after it, the
            // notification lost the race with the writer's own attribute update.
            self.invalidate_attrs(ino);
        }
        reply.written(n as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is buffered here: data reaches the library with every write request. ENOSYS
        // tells the kernel so once and for all: it then skips FLUSH on every close, saving a
        // round trip, and still writes back the file's dirty pages and reports their errors
        // from close itself.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(ino, reply);
        try_reply!(self.release_counted(ino), reply);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let ino = ino_or_reply!(ino, reply);
        try_reply!(self.fs.fsync(ino, datasync), reply);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino_or_reply!(ino, reply);
        let a = try_reply!(self.fs.open_file(ino), reply);
        if a.kind != FileType::Directory {
            let _ = self.fs.release(ino);
            return reply.error(Errno::ENOTDIR);
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let ino = ino_or_reply!(ino, reply);
        self.accessed(ino, self.atime.1);
        let mut off = offset;
        loop {
            let ents = try_reply!(self.fs.readdir(ino, off, READDIR_BATCH), reply);
            if ents.is_empty() {
                break;
            }
            for e in ents {
                let full =
                    reply.add(fuse_ino(e.ino), e.next_offset, entry_kind(e.kind), OsStr::from_bytes(&e.name));
                if full {
                    return reply.ok();
                }
                off = e.next_offset;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = ino_or_reply!(ino, reply);
        self.accessed(dir, self.atime.1);
        let entry_ttl = self.entry_ttl();
        let mut off = offset;
        loop {
            let ents = try_reply!(self.fs.readdir(dir, off, READDIR_BATCH), reply);
            if ents.is_empty() {
                break;
            }
            for e in ents {
                let name = OsStr::from_bytes(&e.name);
                off = e.next_offset;
                if e.name == b"." || e.name == b".." {
                    // The kernel neither links nor counts these.
                    let a = self.fs.getattr(e.ino).unwrap_or_else(|_| dummy_attr(e.ino));
                    let full = reply.add(
                        fuse_ino(e.ino),
                        e.next_offset,
                        name,
                        &self.entry_ttl,
                        &file_attr(&a),
                        Generation(0),
                    );
                    if full {
                        return reply.ok();
                    }
                    continue;
                }
                // Hold the inode before handing it out; skip entries removed meanwhile.
                let Ok(a) = self.fs.getattr(e.ino).and_then(|a| self.lookups.acquire(&self.fs, a)) else {
                    continue;
                };
                let full = reply.add(
                    fuse_ino(e.ino),
                    e.next_offset,
                    name,
                    &entry_ttl,
                    &file_attr(&a),
                    Generation(u64::from(a.generation)),
                );
                if full {
                    // Not sent: the kernel will not count it.
                    self.lookups.forget(&self.fs, a.ino, 1);
                    return reply.ok();
                }
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(ino, reply);
        try_reply!(self.release_counted(ino), reply);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let ino = ino_or_reply!(ino, reply);
        try_reply!(self.fs.fsync(ino, datasync), reply);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let ino = ino_or_reply!(ino, reply);
        let name = name_bytes(name);
        if name == JOURNAL_XATTR {
            try_reply!(self.set_journal_mode(ino, value), reply);
            return reply.ok();
        }
        let flags = match flags {
            0 => XattrFlags::Any,
            libc::XATTR_CREATE => XattrFlags::Create,
            libc::XATTR_REPLACE => XattrFlags::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        // The kernel leaves posix_acl_update_mode's set-group-ID rule to the daemon (it
        // flags it only with FUSE_SETXATTR_EXT): root stands in for CAP_FSETID.
        let clear_sgid = name == cjfs_fs::acl::ACCESS && req.uid() != 0 && {
            let a = try_reply!(self.fs.getattr(ino), reply);
            a.perm & 0o2000 != 0 && !caller_in_group(req, a.gid)
        };
        try_reply!(
            self.retry_nospc(|| self.fs.setxattr_clearing_sgid(ino, name, value, flags, clear_sgid)),
            reply
        );
        if name == cjfs_fs::acl::ACCESS {
            // The kernel only marks ctime stale after a setxattr, and with the writeback cache
            // not even that for a regular file: the new mode would show only after the
            // attribute timeout.
            self.invalidate_attrs(ino);
        }
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let ino = ino_or_reply!(ino, reply);
        let name = name_bytes(name);
        if name == JOURNAL_XATTR {
            let a = try_reply!(self.fs.getattr(ino), reply);
            let v: &[u8] = if a.flags & JOURNAL_DATA_FL != 0 { b"data" } else { b"ordered" };
            return reply_xattr(reply, size, v);
        }
        let v = try_reply!(self.fs.getxattr(ino, name), reply);
        reply_xattr(reply, size, &v);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let ino = ino_or_reply!(ino, reply);
        // trusted.* names only for CAP_SYS_ADMIN, for which root stands in here.
        let names = try_reply!(self.fs.listxattr_as(ino, req.uid() == 0), reply);
        let mut buf = Vec::new();
        for n in names {
            buf.extend_from_slice(&n);
            buf.push(0);
        }
        reply_xattr(reply, size, &buf);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ino = ino_or_reply!(ino, reply);
        let name = name_bytes(name);
        if name == JOURNAL_XATTR {
            try_reply!(self.fs.set_journal_data(ino, false), reply);
            return reply.ok();
        }
        try_reply!(self.fs.removexattr(ino, name), reply);
        reply.ok();
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let ino = ino_or_reply!(ino, reply);
        let a = try_reply!(self.fs.getattr(ino), reply);
        let want = mask.bits() & 0o7;
        if want == 0 {
            return reply.ok();
        }
        let perm = u32::from(a.perm);
        let ok = if req.uid() == 0 {
            // Root may do anything but execute a file nobody may execute.
            want & libc::X_OK == 0 || a.kind == FileType::Directory || perm & 0o111 != 0
        } else {
            let bits = if req.uid() == a.uid {
                perm >> 6
            } else if req.gid() == a.gid {
                perm >> 3
            } else {
                perm
            } & 0o7;
            bits & want as u32 == want as u32
        };
        if ok { reply.ok() } else { reply.error(Errno::EACCES) }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let parent = ino_or_reply!(parent, reply);
        let name = name_bytes(name);
        let (uid, gid, _) = try_reply!(self.owner(req, parent), reply);
        let perm = mode & 0o7777;
        let mut last = FsError::NotFound(String::from_utf8_lossy(name).into_owned());
        for _ in 0..LOOKUP_RETRIES {
            let (held, fresh) =
                match self.retry_nospc(|| self.fs.create_umask(parent, name, perm, umask, uid, gid)) {
                    Ok(a) => (try_reply!(self.lookups.acquire(&self.fs, a), reply), true),
                    // The kernel thought the name free; without O_EXCL open what is there now.
                    Err(FsError::Exists(_)) if flags & libc::O_EXCL == 0 => {
                        match self.lookup_acquire(parent, name) {
                            Ok(a) => (a, false),
                            Err(e @ FsError::NotFound(_)) => {
                                last = e;
                                continue;
                            }
                            Err(e) => return reply.error(errno(&e)),
                        }
                    }
                    Err(e) => return reply.error(errno(&e)),
                };
            if held.kind == FileType::Directory {
                self.lookups.forget(&self.fs, held.ino, 1);
                return reply.error(Errno::EISDIR);
            }
            let open_flags = if fresh { flags & !libc::O_TRUNC } else { flags };
            let a = match self.open_handle(held.ino, open_flags) {
                Ok(_) => self.fs.getattr(held.ino).unwrap_or(held.clone()),
                Err(e) => {
                    self.lookups.forget(&self.fs, held.ino, 1);
                    return reply.error(errno(&e));
                }
            };
            return reply.created(
                &self.entry_ttl(),
                &file_attr(&a),
                Generation(u64::from(a.generation)),
                FileHandle(0),
                self.file_open_flags(),
            );
        }
        reply.error(errno(&last));
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let ino = ino_or_reply!(ino, reply);
        match cmd {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => {
                let a = try_reply!(self.fs.getattr(ino), reply);
                let flags = a.flags & FL_USER_VISIBLE;
                let n = (out_size as usize).min(4);
                reply.ioctl(0, &flags.to_ne_bytes()[..n]);
            }
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                let Some(raw) = in_data.get(..4) else {
                    return reply.error(Errno::EINVAL);
                };
                let new = u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]);
                let a = try_reply!(self.fs.getattr(ino), reply);
                try_reply!(self.change_flags(req, ino, a.flags, new), reply);
                reply.ioctl(0, &[]);
            }
            FS_IOC_FSGETXATTR => {
                let a = try_reply!(self.fs.getattr(ino), reply);
                let mut out = [0u8; FSXATTR_SIZE];
                out[..4].copy_from_slice(&xflags_of(a.flags).to_ne_bytes());
                out[12..16].copy_from_slice(&a.projid.to_ne_bytes());
                let n = (out_size as usize).min(FSXATTR_SIZE);
                reply.ioctl(0, &out[..n]);
            }
            FS_IOC_FSSETXATTR => {
                let Some(raw) = in_data.get(..FSXATTR_SIZE) else {
                    return reply.error(Errno::EINVAL);
                };
                let a = try_reply!(self.fs.getattr(ino), reply);
                let word = |i: usize| u32::from_ne_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
                // Extent size hints are not supported.
                if word(4) != 0 {
                    return reply.error(Errno::EOPNOTSUPP);
                }
                let mapped = XFLAG_MAP.iter().fold(0, |m, (f, _)| m | f);
                let new = (a.flags & !mapped) | iflags_of(word(0));
                // As `ext4_ioctl_check_immutable`: the project id may change in the call that
                // clears immutable and append-only, or sets them, not while they stay.
                let protect = cjfs_fs::protect::PROTECT_FLAGS;
                let unprotects = a.flags & protect != 0 && new & protect == 0;
                if unprotects {
                    try_reply!(self.change_flags(req, ino, a.flags, new), reply);
                }
                if word(12) != a.projid {
                    try_reply!(self.fs.set_project(ino, word(12)), reply);
                    self.invalidate_attrs(ino);
                }
                if !unprotects {
                    try_reply!(self.change_flags(req, ino, a.flags, new), reply);
                }
                reply.ioctl(0, &[]);
            }
            _ => reply.error(Errno::ENOTTY),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _caller = cjfs_fs::act_as(req.uid(), req.gid());
        let ino = ino_or_reply!(ino, reply);
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let m = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 if keep => FallocMode::KeepSize,
            0 => FallocMode::Allocate,
            libc::FALLOC_FL_PUNCH_HOLE if keep => FallocMode::PunchHole,
            libc::FALLOC_FL_PUNCH_HOLE => return reply.error(Errno::EINVAL),
            libc::FALLOC_FL_ZERO_RANGE => FallocMode::ZeroRange { keep_size: keep },
            _ => return reply.error(Errno::EOPNOTSUPP),
        };
        try_reply!(self.retry_nospc(|| self.fs.fallocate(ino, m, offset, length)), reply);
        reply.ok();
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let ino = ino_or_reply!(ino, reply);
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            // The kernel resolves SEEK_SET/CUR/END itself.
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(off) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        match try_reply!(self.fs.seek_data_hole(ino, off, data), reply) {
            Some(o) => reply.offset(o as i64),
            None => reply.error(Errno::ENXIO),
        }
    }
}

/// Attributes for an entry whose inode cannot be read (only its number and type matter).
fn dummy_attr(ino: Ino) -> Attr {
    let t = cjfs_fs::Timestamp::new(0, 0);
    Attr {
        ino,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        blksize: 4096,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        rdev: 0,
        flags: 0,
        projid: 0,
        generation: 0,
    }
}
