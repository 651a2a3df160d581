//! An SQLite VFS over the cjfs library, so the SQLite library itself runs in-process on a
//! cjfs file system: no FUSE crossing hides what the journal does.
//!
//! Registered through SQLite's C interface ([`rusqlite::ffi`], the `bundled` library). It
//! maps SQLite's file methods onto [`Fs`] calls one to one: `xRead`/`xWrite` →
//! [`Fs::read`]/[`Fs::write`], `xTruncate` → [`Fs::setattr`], `xSync` →
//! [`Fs::fsync`] with `datasync` (the `fdatasync()` the paper's SQLite called on Linux),
//! `xDelete` → [`Fs::unlink`] (and a directory fsync when SQLite asks for one), `xAccess`
//! → a lookup. As SQLite's own unix VFS does, the first sync of a file this VFS created
//! also syncs its directory (`UNIXFILE_DIRSYNC`), sectors are 4096 bytes and overwrites are
//! power-safe (`SQLITE_IOCAP_POWERSAFE_OVERWRITE`). File locks are the process's own: one
//! connection per database file, as in the benchmarks; the WAL index (`-shm`) lives in
//! memory (SQLite's unix VFS maps a file for it that it never syncs). Files SQLite opens
//! without a name (temporary files) live in memory.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cjfs_fs::{Fs, FsError, Ino, SetAttr};
use parking_lot::Mutex;
use rusqlite::ffi;
use serde::Serialize;

/// Which of SQLite's files a sync was for (from the flags SQLite opened it with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// The database.
    Db,
    /// The rollback journal.
    Journal,
    /// The write-ahead log.
    Wal,
    /// Anything else (a super-journal, a temporary file with a name).
    Other,
}

impl FileKind {
    fn from_open_flags(flags: c_int) -> FileKind {
        if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
            FileKind::Db
        } else if flags & ffi::SQLITE_OPEN_MAIN_JOURNAL != 0 {
            FileKind::Journal
        } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
            FileKind::Wal
        } else {
            FileKind::Other
        }
    }
}

/// The device work of one kind of file's syncs, from the device's counters around each
/// `xSync` (one SQLite connection, so another sync never overlaps; a flush of the journal's
/// background checkpoint during a sync is counted with it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct SyncWork {
    /// Syncs.
    pub syncs: u64,
    /// Device flushes during them.
    pub flushes: u64,
    /// Syncs that took two flushes or more (an ordered commit's data flush and its commit
    /// flush, where `nojournal` takes one).
    pub multi_flush: u64,
    /// Device write commands during them.
    pub writes: u64,
    /// Time spent in them, µs.
    pub us: u64,
}

impl SyncWork {
    /// Add `o`'s figures.
    pub fn add(&mut self, o: &SyncWork) {
        self.syncs += o.syncs;
        self.flushes += o.flushes;
        self.multi_flush += o.multi_flush;
        self.writes += o.writes;
        self.us += o.us;
    }
}

/// [`SyncEvent::phase`] of the syncs before the round's first transaction (its set-up).
pub const SETUP_PHASE: u8 = u8::MAX;

/// One `xSync` of a traced round (`cjfs bench sqlite --trace-syncs`): where in the round it
/// came and the device work it took.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SyncEvent {
    /// The round's phase, by its index in [`super::Phase::ALL`] ([`SETUP_PHASE`] before
    /// the first transaction).
    pub phase: u8,
    /// The transaction within the phase (from 0).
    pub txn: u64,
    /// The file synced.
    pub file: FileKind,
    /// Its work, as counted for [`SyncWork`] (one sync).
    pub work: SyncWork,
    /// FUA write commands among the writes.
    pub fua_writes: u64,
    /// Blocks written.
    pub blocks: u64,
}

/// What the VFS counted (relaxed atomics).
#[derive(Debug, Default)]
pub struct VfsCounters {
    /// `xSync` calls (fdatasync).
    pub syncs: AtomicU64,
    /// `xWrite` calls.
    pub writes: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
    /// Files deleted.
    pub deletes: AtomicU64,
    /// Device work of the syncs, per kind of file. Lock: itself (taken once per sync,
    /// never with another lock held).
    pub sync_work: Mutex<BTreeMap<FileKind, SyncWork>>,
    /// The round's syncs when it is traced (`None`: not traced). Lock: itself (a leaf, taken
    /// once per sync and once per transaction).
    pub trace: Mutex<Option<SyncTrace>>,
    /// The round's first timed transaction has started (set by [`VfsCounters::set_at`]).
    pub timed: AtomicBool,
    /// Time in syncs before that (the round's set-up: creating the database), µs; also in
    /// `sync_work`.
    pub setup_sync_us: AtomicU64,
}

/// A traced round so far: where it is and every sync in order.
#[derive(Debug)]
pub struct SyncTrace {
    /// The phase running (index in [`super::Phase::ALL`], [`SETUP_PHASE`] before the first
    /// transaction).
    pub phase: u8,
    /// The transaction running within the phase.
    pub txn: u64,
    /// The syncs so far.
    pub events: Vec<SyncEvent>,
}

impl VfsCounters {
    /// Start tracing the round's syncs, from its set-up.
    pub fn start_trace(&self) {
        *self.trace.lock() = Some(SyncTrace { phase: SETUP_PHASE, txn: 0, events: Vec::new() });
    }

    /// Record that the round's transaction `txn` of phase `phase` (index) starts.
    pub fn set_at(&self, phase: u8, txn: u64) {
        self.timed.store(true, Ordering::Relaxed);
        if let Some(t) = self.trace.lock().as_mut() {
            (t.phase, t.txn) = (phase, txn);
        }
    }
}

/// What the VFS needs: the file system and the shared WAL-index regions by path.
struct VfsData {
    fs: Fs,
    counters: Arc<VfsCounters>,
    /// WAL-index regions per database path. Lock: itself.
    shm: Mutex<HashMap<String, Vec<Box<[u8]>>>>,
}

/// A registered VFS; unregistered (and freed) on drop. Connections opened with it must be
/// closed first.
pub struct CjfsVfs {
    name: CString,
    vfs: *mut ffi::sqlite3_vfs,
    counters: Arc<VfsCounters>,
}

// SAFETY: the raw VFS is only handed to SQLite (thread-safe in its default serialized
// mode) and freed once in drop; `VfsData` is Send + Sync.
unsafe impl Send for CjfsVfs {}
// SAFETY: as above.
unsafe impl Sync for CjfsVfs {}

/// Errors registering the VFS.
#[derive(Debug, thiserror::Error)]
#[error("registering the SQLite VFS {name}: SQLite error {code}")]
pub struct VfsError {
    name: String,
    code: c_int,
}

impl CjfsVfs {
    /// Register a VFS named `name` over `fs` (not the default VFS: open databases with
    /// `OpenFlags` and this name, e.g. `Connection::open_with_flags_and_vfs`).
    pub fn register(name: &str, fs: Fs) -> Result<CjfsVfs, VfsError> {
        let cname =
            CString::new(name).map_err(|_| VfsError { name: name.into(), code: ffi::SQLITE_MISUSE })?;
        let counters = Arc::new(VfsCounters::default());
        let data = Box::new(VfsData { fs, counters: counters.clone(), shm: Mutex::new(HashMap::new()) });
        let vfs = Box::new(ffi::sqlite3_vfs {
            iVersion: 2,
            szOsFile: std::mem::size_of::<File>() as c_int,
            mxPathname: 1024,
            pNext: std::ptr::null_mut(),
            zName: cname.as_ptr(),
            pAppData: Box::into_raw(data).cast(),
            xOpen: Some(x_open),
            xDelete: Some(x_delete),
            xAccess: Some(x_access),
            xFullPathname: Some(x_full_pathname),
            xDlOpen: None,
            xDlError: None,
            xDlSym: None,
            xDlClose: None,
            xRandomness: Some(x_randomness),
            xSleep: Some(x_sleep),
            xCurrentTime: Some(x_current_time),
            xGetLastError: Some(x_get_last_error),
            xCurrentTimeInt64: Some(x_current_time_int64),
            xSetSystemCall: None,
            xGetSystemCall: None,
            xNextSystemCall: None,
        });
        let vfs = Box::into_raw(vfs);
        // SAFETY: `vfs` is a fully initialised VFS that lives until drop unregisters it.
        let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
        if rc != ffi::SQLITE_OK {
            // SAFETY: not registered; reclaim what was leaked above.
            unsafe { free_vfs(vfs) };
            return Err(VfsError { name: name.into(), code: rc });
        }
        Ok(CjfsVfs { name: cname, vfs, counters })
    }

    /// The VFS name to open databases with.
    pub fn name(&self) -> &str {
        self.name.to_str().unwrap_or_default()
    }

    /// What the VFS counted so far.
    pub fn counters(&self) -> &VfsCounters {
        &self.counters
    }
}

impl Drop for CjfsVfs {
    fn drop(&mut self) {
        // SAFETY: registered in `register`; every connection using it is closed by now.
        unsafe {
            ffi::sqlite3_vfs_unregister(self.vfs);
            free_vfs(self.vfs);
        }
    }
}

/// Free a VFS made by [`CjfsVfs::register`] and its data.
///
/// # Safety
/// `vfs` came from `Box::into_raw` there and is no longer registered.
unsafe fn free_vfs(vfs: *mut ffi::sqlite3_vfs) {
    // SAFETY: per the function's contract.
    unsafe {
        let v = Box::from_raw(vfs);
        drop(Box::from_raw(v.pAppData.cast::<VfsData>()));
    }
}

/// Where an open file's bytes are.
enum Backing {
    /// A cjfs file.
    Cjfs { ino: Ino, dir: Ino, dirsync: bool, delete_on_close: Option<String> },
    /// A temporary file in memory.
    Memory(Vec<u8>),
}

/// SQLite's file object: the base struct first, as SQLite requires.
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    /// Owned; freed by `xClose`.
    state: *mut FileState,
}

struct FileState {
    vfs: *const VfsData,
    backing: Backing,
    /// The database path this file belongs to (for its WAL index).
    path: String,
    /// Which of SQLite's files this is.
    kind: FileKind,
}

static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

/// The VFS's data.
///
/// # Safety
/// `vfs` is a VFS made by [`CjfsVfs::register`].
unsafe fn data<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a VfsData {
    // SAFETY: per the function's contract, `pAppData` is a live `VfsData`.
    unsafe { &*(*vfs).pAppData.cast::<VfsData>() }
}

/// The state of an open file.
///
/// # Safety
/// `f` is a file opened by `x_open` and not closed.
unsafe fn state<'a>(f: *mut ffi::sqlite3_file) -> &'a mut FileState {
    // SAFETY: per the function's contract.
    unsafe { &mut *(*f.cast::<File>()).state }
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

fn io_err(e: &FsError) -> c_int {
    match e {
        FsError::NoSpace(_) => ffi::SQLITE_FULL,
        FsError::NotFound(_) => ffi::SQLITE_CANTOPEN,
        _ => ffi::SQLITE_IOERR,
    }
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite passes the VFS it was given.
    let d = unsafe { data(vfs) };
    let f = file.cast::<File>();
    // SAFETY: SQLite hands `szOsFile` bytes for us to fill; nothing is open until pMethods
    // is set.
    unsafe {
        (*f).base.pMethods = std::ptr::null();
        (*f).state = std::ptr::null_mut();
    }
    let backing = if name.is_null() {
        Backing::Memory(Vec::new())
    } else {
        // SAFETY: a NUL-terminated path from SQLite.
        let path = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let (dir, base) = split(&path);
        let dir = match d.fs.resolve(dir) {
            Ok(i) => i,
            Err(_) => return ffi::SQLITE_CANTOPEN,
        };
        let create = flags & ffi::SQLITE_OPEN_CREATE != 0;
        let (ino, created) = match d.fs.lookup(dir, base.as_bytes()) {
            Ok(a) if flags & ffi::SQLITE_OPEN_EXCLUSIVE != 0 && create => {
                let _ = a;
                return ffi::SQLITE_CANTOPEN;
            }
            Ok(a) => (a.ino, false),
            Err(FsError::NotFound(_)) if create => match d.fs.create(dir, base.as_bytes(), 0o644, 0, 0) {
                Ok(a) => (a.ino, true),
                Err(e) => return io_err(&e),
            },
            Err(e) => return io_err(&e),
        };
        let delete_on_close = (flags & ffi::SQLITE_OPEN_DELETEONCLOSE != 0).then(|| path.clone());
        Backing::Cjfs { ino, dir, dirsync: created, delete_on_close }
    };
    let path = if name.is_null() {
        String::new()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    };
    let st = Box::new(FileState { vfs: d, backing, path, kind: FileKind::from_open_flags(flags) });
    // SAFETY: `f` is ours to fill (see above).
    unsafe {
        (*f).state = Box::into_raw(st);
        (*f).base.pMethods = &IO_METHODS;
        if !out_flags.is_null() {
            *out_flags = flags;
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file; its state is freed exactly once here.
    let st = unsafe { Box::from_raw((*f).state) };
    // SAFETY: as above.
    unsafe { (*f).state = std::ptr::null_mut() };
    if let Backing::Cjfs { dir, delete_on_close: Some(path), .. } = &st.backing {
        // SAFETY: the VFS outlives its files.
        let d = unsafe { &*st.vfs };
        let (_, base) = split(path);
        let _ = d.fs.unlink(*dir, base.as_bytes());
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_read(file: *mut ffi::sqlite3_file, buf: *mut c_void, amt: c_int, off: i64) -> c_int {
    // SAFETY: an open file; `buf` holds `amt` bytes.
    let (st, out) = unsafe { (state(file), std::slice::from_raw_parts_mut(buf.cast::<u8>(), amt as usize)) };
    let n = match &st.backing {
        Backing::Memory(v) => {
            let start = (off as usize).min(v.len());
            let n = (v.len() - start).min(out.len());
            out[..n].copy_from_slice(&v[start..start + n]);
            n
        }
        Backing::Cjfs { ino, .. } => {
            // SAFETY: the VFS outlives its files.
            let d = unsafe { &*st.vfs };
            let mut done = 0;
            while done < out.len() {
                match d.fs.read(*ino, off as u64 + done as u64, &mut out[done..]) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(_) => return ffi::SQLITE_IOERR_READ,
                }
            }
            done
        }
    };
    if n < out.len() {
        out[n..].fill(0);
        return ffi::SQLITE_IOERR_SHORT_READ;
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: i64,
) -> c_int {
    // SAFETY: an open file; `buf` holds `amt` bytes.
    let (st, src) = unsafe { (state(file), std::slice::from_raw_parts(buf.cast::<u8>(), amt as usize)) };
    // SAFETY: the VFS outlives its files.
    let d = unsafe { &*st.vfs };
    d.counters.writes.fetch_add(1, Ordering::Relaxed);
    d.counters.bytes.fetch_add(src.len() as u64, Ordering::Relaxed);
    match &mut st.backing {
        Backing::Memory(v) => {
            let end = off as usize + src.len();
            if v.len() < end {
                v.resize(end, 0);
            }
            v[off as usize..end].copy_from_slice(src);
        }
        Backing::Cjfs { ino, .. } => {
            let mut done = 0;
            while done < src.len() {
                match d.fs.write(*ino, off as u64 + done as u64, &src[done..]) {
                    Ok(0) => return ffi::SQLITE_IOERR_WRITE,
                    Ok(n) => done += n,
                    Err(FsError::NoSpace(_)) => return ffi::SQLITE_FULL,
                    Err(_) => return ffi::SQLITE_IOERR_WRITE,
                }
            }
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: an open file.
    let st = unsafe { state(file) };
    // SAFETY: the VFS outlives its files.
    let d = unsafe { &*st.vfs };
    match &mut st.backing {
        Backing::Memory(v) => v.resize(size as usize, 0),
        Backing::Cjfs { ino, .. } => {
            if d.fs.setattr(*ino, &SetAttr { size: Some(size as u64), ..SetAttr::default() }).is_err() {
                return ffi::SQLITE_IOERR_TRUNCATE;
            }
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    // SAFETY: an open file.
    let st = unsafe { state(file) };
    // SAFETY: the VFS outlives its files.
    let d = unsafe { &*st.vfs };
    if let Backing::Cjfs { ino, dir, dirsync, .. } = &mut st.backing {
        d.counters.syncs.fetch_add(1, Ordering::Relaxed);
        let (t0, s0) = (std::time::Instant::now(), d.fs.device().stats());
        if d.fs.fsync(*ino, true).is_err() {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        let s1 = d.fs.device().stats();
        let flushes = s1.flushes - s0.flushes;
        let work = SyncWork {
            syncs: 1,
            flushes,
            multi_flush: u64::from(flushes >= 2),
            writes: s1.writes - s0.writes,
            us: t0.elapsed().as_micros() as u64,
        };
        d.counters.sync_work.lock().entry(st.kind).or_default().add(&work);
        if !d.counters.timed.load(Ordering::Relaxed) {
            d.counters.setup_sync_us.fetch_add(work.us, Ordering::Relaxed);
        }
        if let Some(t) = d.counters.trace.lock().as_mut() {
            t.events.push(SyncEvent {
                phase: t.phase,
                txn: t.txn,
                file: st.kind,
                work,
                fua_writes: s1.fua_writes - s0.fua_writes,
                blocks: s1.blocks_written - s0.blocks_written,
            });
        }
        if std::mem::take(dirsync) && d.fs.fsync(*dir, false).is_err() {
            return ffi::SQLITE_IOERR_DIR_FSYNC;
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    // SAFETY: an open file.
    let st = unsafe { state(file) };
    // SAFETY: the VFS outlives its files.
    let d = unsafe { &*st.vfs };
    let n = match &st.backing {
        Backing::Memory(v) => v.len() as u64,
        Backing::Cjfs { ino, .. } => match d.fs.getattr(*ino) {
            Ok(a) => a.size,
            Err(_) => return ffi::SQLITE_IOERR_FSTAT,
        },
    };
    // SAFETY: SQLite's out-parameter.
    unsafe { *size = n as i64 };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_lock(_f: *mut ffi::sqlite3_file, _level: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_unlock(_f: *mut ffi::sqlite3_file, _level: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_check_reserved_lock(_f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: SQLite's out-parameter.
    unsafe { *out = 0 };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_file_control(_f: *mut ffi::sqlite3_file, _op: c_int, _arg: *mut c_void) -> c_int {
    ffi::SQLITE_NOTFOUND
}

unsafe extern "C" fn x_sector_size(_f: *mut ffi::sqlite3_file) -> c_int {
    4096
}

unsafe extern "C" fn x_device_characteristics(_f: *mut ffi::sqlite3_file) -> c_int {
    ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: an open file.
    let st = unsafe { state(file) };
    // SAFETY: the VFS outlives its files.
    let d = unsafe { &*st.vfs };
    let mut shm = d.shm.lock();
    let regions = shm.entry(st.path.clone()).or_default();
    let i = region as usize;
    if regions.len() <= i {
        if extend == 0 {
            // SAFETY: SQLite's out-parameter.
            unsafe { *out = std::ptr::null_mut() };
            return ffi::SQLITE_OK;
        }
        regions.resize_with(i + 1, || vec![0u8; size as usize].into_boxed_slice());
    }
    // The regions are boxed: their addresses stay put while the vector grows.
    // SAFETY: SQLite's out-parameter; the region lives until xShmUnmap.
    unsafe { *out = regions[i].as_mut_ptr().cast() };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_shm_lock(_f: *mut ffi::sqlite3_file, _off: c_int, _n: c_int, _flags: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_shm_barrier(_f: *mut ffi::sqlite3_file) {
    std::sync::atomic::fence(Ordering::SeqCst);
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: an open file.
    let st = unsafe { state(file) };
    // SAFETY: the VFS outlives its files.
    let d = unsafe { &*st.vfs };
    if delete != 0 {
        d.shm.lock().remove(&st.path);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_delete(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    // SAFETY: SQLite passes the VFS it was given and a NUL-terminated path.
    let (d, path) = unsafe { (data(vfs), CStr::from_ptr(name).to_string_lossy().into_owned()) };
    let (dir, base) = split(&path);
    let Ok(dir) = d.fs.resolve(dir) else { return ffi::SQLITE_IOERR_DELETE_NOENT };
    match d.fs.unlink(dir, base.as_bytes()) {
        Ok(()) => {}
        Err(FsError::NotFound(_)) => return ffi::SQLITE_IOERR_DELETE_NOENT,
        Err(_) => return ffi::SQLITE_IOERR_DELETE,
    }
    d.counters.deletes.fetch_add(1, Ordering::Relaxed);
    if sync_dir != 0 && d.fs.fsync(dir, false).is_err() {
        return ffi::SQLITE_IOERR_DIR_FSYNC;
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    _flags: c_int,
    out: *mut c_int,
) -> c_int {
    // SAFETY: SQLite passes the VFS it was given and a NUL-terminated path.
    let (d, path) = unsafe { (data(vfs), CStr::from_ptr(name).to_string_lossy().into_owned()) };
    let exists = d.fs.resolve(&path).is_ok();
    // SAFETY: SQLite's out-parameter.
    unsafe { *out = c_int::from(exists) };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: a NUL-terminated name from SQLite.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    let mut p = Vec::with_capacity(bytes.len() + 2);
    if !bytes.starts_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(bytes);
    if p.len() + 1 > n as usize {
        return ffi::SQLITE_CANTOPEN;
    }
    // SAFETY: `out` holds `n` bytes; the path and its NUL fit (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(p.as_ptr(), out.cast::<u8>(), p.len());
        *out.add(p.len()) = 0;
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_randomness(_vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: `out` holds `n` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(out.cast::<u8>(), n as usize) };
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), buf);
    n
}

unsafe extern "C" fn x_sleep(_vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    std::thread::sleep(std::time::Duration::from_micros(micros.max(0) as u64));
    micros
}

/// Milliseconds since the Julian epoch (noon, 24 November 4714 BC).
fn julian_ms() -> i64 {
    const UNIX_EPOCH_JULIAN_MS: i64 = 210_866_760_000_000;
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    UNIX_EPOCH_JULIAN_MS + t.as_millis() as i64
}

unsafe extern "C" fn x_current_time(_vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: SQLite's out-parameter.
    unsafe { *out = julian_ms() as f64 / 86_400_000.0 };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_current_time_int64(_vfs: *mut ffi::sqlite3_vfs, out: *mut i64) -> c_int {
    // SAFETY: SQLite's out-parameter.
    unsafe { *out = julian_ms() };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_get_last_error(_vfs: *mut ffi::sqlite3_vfs, _n: c_int, _out: *mut c_char) -> c_int {
    0
}
