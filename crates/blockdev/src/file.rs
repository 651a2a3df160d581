//! [`FileDevice`]: a device over an image file or a block device.
//!
//! * Buffered mode: `pwrite` completes the write at submission ([`IoTicket::done`]); a
//!   write of several blocks is one `pwritev` straight from the block buffers.
//! * `O_DIRECT` mode: writes are queued to a small pool of worker threads, so several are in
//!   flight at once; each completes through a [`Completion`]. Buffers are copied into a
//!   4096-aligned bounce buffer, as `O_DIRECT` requires. A write overlapping one submitted
//!   before it waits for it, and a read waits for earlier writes it overlaps (the device
//!   contract: submission order per block, read-your-writes).
//! * [`BlockDevice::submit_batch`] merges requests that are contiguous on the device into
//!   one write.
//! * [`BlockDevice::flush`] is `fdatasync`. A failed `fdatasync` **poisons** the device: the
//!   cause is recorded and every later flush and write fails with [`DevError::Poisoned`]
//!   (the kernel may have dropped the dirty pages, so a retry could falsely succeed).
//! * No barrier command; FUA is emulated as write + `fdatasync`.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::{
    BlockBuf, BlockDevice, Completion, Counters, DEFAULT_BLOCK_SIZE, DevError, DevResult, DeviceCaps,
    DeviceStats, IoTicket, WriteRequest,
};

/// Number of worker threads submitting `O_DIRECT` writes (the device's queue depth).
pub const DIRECT_WORKERS: usize = 4;

/// How to open a [`FileDevice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDeviceOptions {
    /// Open with `O_DIRECT` (bypass the page cache; writes go through worker threads).
    pub direct: bool,
    /// Open read-only: writes fail with `EROFS`. A read-write open takes the image's
    /// writer lock (an exclusive `flock`, held while the device lives) and fails with
    /// [`DevError::Busy`] when another open file description holds it.
    pub read_only: bool,
    /// Create the file if missing and extend it to at least this many bytes (never
    /// truncates unless `zero` is set; ignored for block devices and read-only opens).
    pub create_size: Option<u64>,
    /// With `create_size`: empty the file first, once the writer lock is held, so the
    /// device is `create_size` bytes of zeros (sparse). For making a new file system over
    /// an old image without racing another writer of it.
    pub zero: bool,
    /// Block size in bytes, one of [`crate::BLOCK_SIZES`]; the default is
    /// [`DEFAULT_BLOCK_SIZE`].
    pub block_size: usize,
}

impl Default for FileDeviceOptions {
    fn default() -> Self {
        FileDeviceOptions {
            direct: false,
            read_only: false,
            create_size: None,
            zero: false,
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }
}

/// A block device over an image file or a real block device. See the module docs.
pub struct FileDevice {
    /// Shared with the worker threads. Not behind a lock; see [`Shared`] for its fields.
    shared: Arc<Shared>,
    /// Worker pool for `O_DIRECT` writes (`None` in buffered mode). Only touched by `open`
    /// and `drop`, which have exclusive access.
    pool: Option<WritePool>,
}

/// State shared by the device handle and its workers.
struct Shared {
    /// The open file. No lock: only positional I/O (`pread`/`pwrite`) and `fdatasync`,
    /// which are safe to call concurrently.
    file: File,
    /// Path as given (immutable).
    path: PathBuf,
    /// Path as displayed in errors (immutable).
    what: String,
    /// Opened with `O_DIRECT` (immutable).
    direct: bool,
    /// Opened read-only (immutable).
    read_only: bool,
    /// Block size in bytes (immutable).
    block_size: usize,
    /// Size in blocks (immutable).
    num_blocks: u64,
    /// Statistics (atomics, no lock).
    counters: Counters,
    /// Protected by its own mutex: the cause recorded by the first failed flush; once set,
    /// it never changes.
    poison: Mutex<Option<String>>,
    /// Atomic: make the next flush fail with [`DevError::Injected`].
    fail_next_flush: AtomicBool,
}

/// One queued `O_DIRECT` write (one or more merged requests).
struct Job {
    offset: u64,
    bufs: Vec<BlockBuf>,
    fua: bool,
    /// One per request merged into this write.
    done: Vec<Arc<Completion>>,
}

/// The worker pool's queue.
struct Queue {
    /// Protected by this mutex: pending jobs and the shutdown flag.
    state: Mutex<QueueState>,
    /// Signalled when a job is queued or finishes, or shutdown is requested.
    cv: Condvar,
}

struct QueueState {
    jobs: VecDeque<Job>,
    /// Byte ranges `[start, end)` being written by workers now.
    busy: Vec<(u64, u64)>,
    shutdown: bool,
}

impl Job {
    fn range(&self) -> (u64, u64) {
        (self.offset, self.offset + self.bufs.iter().map(|b| b.len() as u64).sum::<u64>())
    }
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl QueueState {
    /// The first queued job that overlaps no write in progress and no job queued before
    /// it: writes to one block are applied in submission order, as with buffered I/O.
    fn take_ready(&mut self) -> Option<Job> {
        let i = (0..self.jobs.len()).find(|&i| {
            let r = self.jobs[i].range();
            !self.busy.iter().any(|&b| overlaps(b, r))
                && !self.jobs.range(..i).any(|j| overlaps(j.range(), r))
        })?;
        self.jobs.remove(i)
    }

    /// Whether a write submitted earlier still covers part of `r` (queued or in progress).
    fn pending_over(&self, r: (u64, u64)) -> bool {
        self.busy.iter().any(|&b| overlaps(b, r)) || self.jobs.iter().any(|j| overlaps(j.range(), r))
    }
}

struct WritePool {
    queue: Arc<Queue>,
    workers: Vec<JoinHandle<()>>,
}

/// Alignment and allocation unit of the `O_DIRECT` bounce buffers.
const PAGE: usize = 4096;

/// One 4096-aligned page, the unit of the `O_DIRECT` bounce buffers.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct AlignedPage([u8; PAGE]);

/// A growable, 4096-aligned, contiguous buffer of `len` bytes (in whole pages).
#[derive(Default)]
struct AlignedBuf {
    pages: Vec<AlignedPage>,
    len: usize,
}

impl AlignedBuf {
    /// Make the buffer hold exactly `len` bytes (contents unspecified).
    fn resize(&mut self, len: usize) {
        self.pages.resize(len.div_ceil(PAGE), AlignedPage([0; PAGE]));
        self.len = len;
    }
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `AlignedPage` is `repr(C)` around `[u8; PAGE]` with alignment equal to its
        // size, so it has no padding and the `Vec` holds at least `len` contiguous,
        // initialised bytes, borrowed for the lifetime of `&self`.
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), self.len) }
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`; the exclusive borrow of `self` makes the slice unique,
        // and any byte pattern is a valid `AlignedPage`.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl FileDevice {
    /// Open `path` as a device. The size comes from the file's metadata or, for a block
    /// device, from seeking to its end; a trailing partial block is ignored.
    pub fn open(path: impl AsRef<Path>, opts: FileDeviceOptions) -> DevResult<FileDevice> {
        let path = path.as_ref();
        let what = path.display().to_string();
        if !crate::valid_block_size(opts.block_size) {
            return Err(DevError::BadBlockSize(opts.block_size));
        }
        let create_size = if opts.read_only { None } else { opts.create_size };
        check_image_kind(path)?;
        let block_dev = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
        let mut oo = OpenOptions::new();
        oo.read(true).write(!opts.read_only).create(create_size.is_some());
        let mut flags = if opts.direct { libc::O_DIRECT } else { 0 };
        if block_dev && !opts.read_only {
            // O_EXCL on a block device fails with EBUSY while it is mounted (or held
            // exclusively by another opener): writing under a kernel mount corrupts it.
            flags |= libc::O_EXCL;
        }
        oo.custom_flags(flags);
        let file = oo.open(path).map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) if block_dev => DevError::KernelBusy {
                what: what.clone(),
                by: format!("{what} is mounted or held exclusively"),
            },
            _ => DevError::io("open", &what, e),
        })?;
        if !opts.read_only {
            crate::writer_lock::lock_writer(&file, &what)?;
            if !block_dev && let Some(by) = kernel_loop_holder(&file) {
                return Err(DevError::KernelBusy { what, by });
            }
        }
        let meta = file.metadata().map_err(|e| DevError::io("stat", &what, e))?;
        let size = if meta.file_type().is_block_device() {
            (&file).seek(SeekFrom::End(0)).map_err(|e| DevError::io("seek", &what, e))?
        } else {
            if opts.zero && create_size.is_some() {
                file.set_len(0).map_err(|e| DevError::io("truncate", &what, e))?;
            }
            let len = if opts.zero && create_size.is_some() { 0 } else { meta.len() };
            match create_size {
                Some(want) if len < want => {
                    file.set_len(want).map_err(|e| DevError::io("extend", &what, e))?;
                    want
                }
                _ => len,
            }
        };
        let shared = Arc::new(Shared {
            file,
            path: path.to_path_buf(),
            what,
            direct: opts.direct,
            read_only: opts.read_only,
            block_size: opts.block_size,
            num_blocks: size / opts.block_size as u64,
            counters: Counters::new(),
            poison: Mutex::new(None),
            fail_next_flush: AtomicBool::new(false),
        });
        let pool = if opts.direct && !opts.read_only { Some(WritePool::start(&shared)?) } else { None };
        Ok(FileDevice { shared, pool })
    }

    /// Create (or extend) an image file of `size_bytes` bytes and open it buffered,
    /// read-write.
    pub fn create(path: impl AsRef<Path>, size_bytes: u64) -> DevResult<FileDevice> {
        FileDevice::open(
            path,
            FileDeviceOptions { create_size: Some(size_bytes), ..FileDeviceOptions::default() },
        )
    }

    /// The path the device was opened with.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether the device was opened with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.shared.direct
    }

    /// The cause of the poisoning, if an earlier flush failed.
    pub fn poisoned(&self) -> Option<String> {
        self.shared.poison.lock().clone()
    }

    /// Make the next flush (or FUA write's flush) fail with [`DevError::Injected`], which
    /// poisons the device like a real `fdatasync` failure. For tests.
    pub fn inject_flush_failure(&self) {
        self.shared.fail_next_flush.store(true, Ordering::SeqCst);
    }

    fn check_range(&self, block: u64, count: u64) -> DevResult<()> {
        let n = self.shared.num_blocks;
        match block.checked_add(count) {
            Some(end) if end <= n => Ok(()),
            _ => Err(DevError::OutOfRange { block, count, num_blocks: n }),
        }
    }

    /// Whether `req` may be submitted: in range, device writable and not poisoned.
    fn check_write(&self, req: &WriteRequest) -> DevResult<()> {
        let s = &self.shared;
        self.check_range(req.block, req.bufs.len() as u64)?;
        if let Some(b) = req.bufs.iter().find(|b| b.len() != s.block_size) {
            return Err(DevError::BadLength(b.len()));
        }
        if s.read_only {
            return Err(DevError::io("write", &s.what, std::io::Error::from_raw_os_error(libc::EROFS)));
        }
        s.check_poison()
    }

    /// Write `bufs` (the blocks of `n` requests, already checked) at `block` as one device
    /// write, returning `n` tickets that all carry its result.
    fn write_merged(&self, block: u64, bufs: Vec<BlockBuf>, fua: bool, n: usize) -> Vec<IoTicket> {
        let s = &self.shared;
        if bufs.is_empty() {
            return (0..n).map(|_| IoTicket::done(Ok(()))).collect();
        }
        s.counters.record_write(bufs.len() as u64, s.block_size, fua);
        s.counters.write_submitted();
        let offset = block * s.block_size as u64;
        match &self.pool {
            Some(pool) => {
                let done: Vec<Arc<Completion>> = (0..n).map(|_| Arc::new(Completion::default())).collect();
                let tickets = done.iter().map(|d| IoTicket::pending(Arc::clone(d))).collect();
                pool.push(Job { offset, bufs, fua, done });
                tickets
            }
            None => {
                let r = s.write_blocks(offset, &bufs, fua, &mut AlignedBuf::default());
                s.counters.write_completed();
                (0..n).map(|_| IoTicket::done(r.clone())).collect()
            }
        }
    }
}

/// Who in the kernel uses the image at `path`, if anyone: a block device that is mounted
/// (or held exclusively), or an image file backing a loop device that is. The writer opens
/// of [`FileDevice::open`] refuse such an image; read-only callers use this to say why a
/// journal looks live. Reads and writes nothing.
pub fn kernel_holder(path: impl AsRef<Path>) -> Option<String> {
    let path = path.as_ref();
    if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device()) {
        return held_exclusively(path).then(|| format!("{} is mounted or held exclusively", path.display()));
    }
    kernel_loop_holder(&File::open(path).ok()?)
}

/// Refuse a path that exists and is neither a regular file nor a block device, before
/// anything opens it (opening a FIFO for reading blocks until a writer comes).
pub fn check_image_kind(path: &Path) -> DevResult<()> {
    match std::fs::metadata(path) {
        Ok(m) if !m.file_type().is_file() && !m.file_type().is_block_device() => {
            Err(DevError::NotAnImage(path.display().to_string()))
        }
        _ => Ok(()),
    }
}

/// Whether block device `dev` is mounted or held: an exclusive open of it then fails with EBUSY.
fn held_exclusively(dev: &Path) -> bool {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(dev)
        .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
}

/// The loop device that `file` backs, if the kernel uses it (mounted, or held exclusively):
/// `flock` means nothing to the kernel, so an image mounted with `mount -o loop` would
/// otherwise be written under the kernel's feet. An attached loop device nobody holds is not
/// a user. Found through `/sys/block/loop*/loop/backing_file`, compared by device and inode.
fn kernel_loop_holder(file: &File) -> Option<String> {
    let me = file.metadata().ok()?;
    for entry in std::fs::read_dir("/sys/block").ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(entry.path().join("loop/backing_file")) else { continue };
        let backing = backing.trim_end_matches('\n');
        let backing = backing.strip_suffix(" (deleted)").unwrap_or(backing);
        let same = std::fs::metadata(backing).is_ok_and(|m| m.dev() == me.dev() && m.ino() == me.ino());
        if !same {
            continue;
        }
        let dev = format!("/dev/{name}");
        if held_exclusively(Path::new(&dev)) {
            return Some(format!("{dev} (backed by it) is mounted or held exclusively"));
        }
    }
    None
}

impl Shared {
    fn check_poison(&self) -> DevResult<()> {
        match &*self.poison.lock() {
            Some(cause) => Err(DevError::Poisoned(cause.clone())),
            None => Ok(()),
        }
    }

    /// `fdatasync`, poisoning the device on failure.
    fn sync(&self) -> DevResult<()> {
        self.check_poison()?;
        let r = if self.fail_next_flush.swap(false, Ordering::SeqCst) {
            Err(DevError::Injected(format!("flush of {}", self.what)))
        } else {
            self.file.sync_data().map_err(|e| DevError::io("flush", &self.what, e))
        };
        if let Err(e) = &r {
            let mut p = self.poison.lock();
            if p.is_none() {
                *p = Some(e.to_string());
            }
        }
        r
    }

    /// Write `bufs` at `offset` (through `bounce` in `O_DIRECT` mode), then `fdatasync` if
    /// `fua`.
    fn write_blocks(
        &self,
        offset: u64,
        bufs: &[BlockBuf],
        fua: bool,
        bounce: &mut AlignedBuf,
    ) -> DevResult<()> {
        let r = if self.direct {
            bounce.resize(bufs.len() * self.block_size);
            for (dst, src) in bounce.as_bytes_mut().chunks_mut(self.block_size).zip(bufs) {
                dst.copy_from_slice(&src[..]);
            }
            self.file.write_all_at(bounce.as_bytes(), offset)
        } else if let [one] = bufs {
            self.file.write_all_at(&one[..], offset)
        } else {
            pwritev_all(&self.file, bufs, offset)
        };
        r.map_err(|e| DevError::io("write", &self.what, e))?;
        if fua { self.sync() } else { Ok(()) }
    }
}

/// Write `bufs` back to back at `offset` with `pwritev`, straight from the block buffers
/// (no joined copy), finishing short writes.
fn pwritev_all(file: &File, bufs: &[BlockBuf], mut offset: u64) -> std::io::Result<()> {
    let mut iov: Vec<libc::iovec> = bufs
        .iter()
        .map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() })
        .collect();
    let mut first = 0;
    while first < iov.len() {
        let cnt = (iov.len() - first).min(libc::UIO_MAXIOV as usize);
        let off =
            libc::off_t::try_from(offset).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: `iov[first..first + cnt]` describes memory inside `bufs`, which outlives the
        // call; pwritev only reads it.
        let r = unsafe { libc::pwritev(file.as_raw_fd(), iov[first..].as_ptr(), cnt as libc::c_int, off) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let mut n = r as usize;
        offset += n as u64;
        while n > 0 {
            let v = &mut iov[first];
            if n >= v.iov_len {
                n -= v.iov_len;
                first += 1;
            } else {
                // SAFETY: `n < iov_len`, so the advanced pointer stays inside the same buffer.
                v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n) }.cast();
                v.iov_len -= n;
                n = 0;
            }
        }
    }
    Ok(())
}

impl WritePool {
    fn start(shared: &Arc<Shared>) -> DevResult<WritePool> {
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState { jobs: VecDeque::new(), busy: Vec::new(), shutdown: false }),
            cv: Condvar::new(),
        });
        let mut pool = WritePool { queue, workers: Vec::with_capacity(DIRECT_WORKERS) };
        for i in 0..DIRECT_WORKERS {
            let q = Arc::clone(&pool.queue);
            let s = Arc::clone(shared);
            let h = std::thread::Builder::new()
                .name(format!("cjfs-dio-{i}"))
                .spawn(move || worker(&q, &s))
                .map_err(|e| DevError::io("spawn writer for", &shared.what, e))?;
            // On error, dropping `pool` shuts down the workers already started.
            pool.workers.push(h);
        }
        Ok(pool)
    }

    fn push(&self, job: Job) {
        self.queue.state.lock().jobs.push_back(job);
        // All: a job blocked behind an overlapping one may be the only one some worker
        // could take, and readers wait on the same condition.
        self.queue.cv.notify_all();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if !self.read_only {
            // Release the writer lock explicitly instead of by `close`: a process forked
            // elsewhere in this program (any `Command` spawn) holds a copy of the descriptor
            // until it execs, and the lock lives as long as any copy does, so a reopen right
            // after an unmount would find its own image busy. LOCK_UN drops it for every copy.
            // SAFETY: flock on a descriptor owned by `self.file`, still open here.
            unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

impl Drop for WritePool {
    fn drop(&mut self) {
        // Workers drain the queue before exiting, so writes whose tickets were dropped
        // still happen.
        self.queue.state.lock().shutdown = true;
        self.queue.cv.notify_all();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(q: &Queue, s: &Shared) {
    let mut bounce = AlignedBuf::default();
    loop {
        let job = {
            let mut st = q.state.lock();
            loop {
                if let Some(j) = st.take_ready() {
                    st.busy.push(j.range());
                    break Some(j);
                }
                if st.shutdown && st.jobs.is_empty() {
                    break None;
                }
                q.cv.wait(&mut st);
            }
        };
        let Some(job) = job else { return };
        let r = s.write_blocks(job.offset, &job.bufs, job.fua, &mut bounce);
        s.counters.write_completed();
        {
            let mut st = q.state.lock();
            let range = job.range();
            if let Some(i) = st.busy.iter().position(|&b| b == range) {
                st.busy.swap_remove(i);
            }
        }
        q.cv.notify_all();
        for d in &job.done {
            d.complete(r.clone());
        }
    }
}

impl BlockDevice for FileDevice {
    fn block_size(&self) -> usize {
        self.shared.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.shared.num_blocks
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps { barrier: false, volatile_cache: true, fua: false, queued_flush: false }
    }

    fn describe(&self) -> String {
        format!(
            "file {} ({} blocks of {} bytes, {}{})",
            self.shared.what,
            self.shared.num_blocks,
            self.shared.block_size,
            if self.shared.direct { "O_DIRECT" } else { "buffered" },
            if self.shared.read_only { ", read-only" } else { "" },
        )
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.shared.block_size;
        if !buf.len().is_multiple_of(bs) {
            return Err(DevError::BadLength(buf.len()));
        }
        let count = (buf.len() / bs) as u64;
        self.check_range(block, count)?;
        if count == 0 {
            return Ok(());
        }
        self.shared.counters.record_read(count);
        let offset = block * bs as u64;
        let s = &self.shared;
        if let Some(pool) = &self.pool {
            // Read-your-writes: a block whose write is still queued would read stale.
            let r = (offset, offset + buf.len() as u64);
            let mut st = pool.queue.state.lock();
            while st.pending_over(r) {
                pool.queue.cv.wait(&mut st);
            }
        }
        if s.direct {
            let mut bounce = AlignedBuf::default();
            bounce.resize(buf.len());
            s.file
                .read_exact_at(bounce.as_bytes_mut(), offset)
                .map_err(|e| DevError::io("read", &s.what, e))?;
            buf.copy_from_slice(bounce.as_bytes());
            Ok(())
        } else {
            s.file.read_exact_at(buf, offset).map_err(|e| DevError::io("read", &s.what, e))
        }
    }

    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        self.check_write(&req)?;
        let mut t = self.write_merged(req.block, req.bufs, req.fua, 1);
        Ok(t.pop().unwrap_or_else(|| IoTicket::done(Ok(()))))
    }

    fn submit_batch(&self, reqs: Vec<WriteRequest>) -> DevResult<Vec<IoTicket>> {
        let mut out = Vec::with_capacity(reqs.len());
        let mut reqs = reqs.into_iter().peekable();
        while let Some(first) = reqs.next() {
            self.check_write(&first)?;
            let (block, mut bufs, fua) = (first.block, first.bufs, first.fua);
            let mut n = 1;
            // FUA requests stay on their own: each keeps exactly its own durability point.
            while !fua && !bufs.is_empty() {
                let end = block + bufs.len() as u64;
                let mergeable = |r: &WriteRequest| {
                    r.block == end && !r.fua && !r.bufs.is_empty() && self.check_write(r).is_ok()
                };
                let Some(next) = reqs.next_if(mergeable) else { break };
                bufs.extend(next.bufs);
                n += 1;
            }
            out.extend(self.write_merged(block, bufs, fua, n));
        }
        Ok(out)
    }

    fn flush(&self) -> DevResult<()> {
        self.shared.counters.record_flush();
        self.shared.sync()
    }

    fn barrier(&self) -> DevResult<()> {
        Err(DevError::Unsupported("barrier"))
    }

    fn stats(&self) -> DeviceStats {
        self.shared.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockKind, WriteTag, block_from_slice, wait_all};

    const BLOCK_SIZE: usize = DEFAULT_BLOCK_SIZE;

    fn pattern(seed: u8) -> BlockBuf {
        let v: Vec<u8> = (0..BLOCK_SIZE).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        block_from_slice(&v)
    }

    #[test]
    fn a_second_writer_is_refused_until_the_first_is_dropped() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let path = dir.path().join("img");
        let first = FileDevice::create(&path, 16 * BLOCK_SIZE as u64)?;
        let second = FileDevice::open(&path, FileDeviceOptions::default());
        assert!(matches!(second, Err(DevError::Busy { .. })), "second writer: {:?}", second.err());
        let reader = FileDevice::open(&path, FileDeviceOptions { read_only: true, ..Default::default() });
        assert!(reader.is_ok(), "a reader takes no lock");
        drop(first);
        FileDevice::open(&path, FileDeviceOptions::default())?;
        Ok(())
    }

    #[test]
    fn a_forked_copy_of_the_descriptor_does_not_keep_the_lock() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let path = dir.path().join("img");
        let dev = FileDevice::create(&path, 16 * BLOCK_SIZE as u64)?;
        // A child that has not exec'd yet (any `Command` spawn elsewhere in the program)
        // holds a copy of every descriptor; it must not keep the image busy after a drop.
        // SAFETY: the child only calls async-signal-safe functions (sleep, _exit).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                libc::sleep(30);
                libc::_exit(0);
            }
        }
        assert!(pid > 0, "fork failed");
        drop(dev);
        let again = FileDevice::open(&path, FileDeviceOptions::default());
        // SAFETY: `pid` is our child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        again.map(drop)
    }

    #[test]
    fn round_trip_buffered() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let path = dir.path().join("img");
        let dev = FileDevice::create(&path, 64 * BLOCK_SIZE as u64)?;
        assert_eq!(dev.num_blocks(), 64);
        assert!(dev.describe().contains("img"));
        dev.write_block(3, pattern(1), WriteTag::kind(BlockKind::Data))?;
        let t = dev.submit(WriteRequest {
            block: 10,
            bufs: vec![pattern(2), pattern(3)],
            tag: WriteTag::tx(BlockKind::JournalLogged, crate::TxId::new(0, 7)),
            fua: true,
        })?;
        t.wait()?;
        dev.flush()?;
        assert_eq!(&dev.read_block(3)?[..], &pattern(1)[..]);
        let mut two = vec![0u8; 2 * BLOCK_SIZE];
        dev.read(10, &mut two)?;
        assert_eq!(&two[..BLOCK_SIZE], &pattern(2)[..]);
        assert_eq!(&two[BLOCK_SIZE..], &pattern(3)[..]);
        assert!(dev.read_block(0)?.iter().all(|&b| b == 0));
        let st = dev.stats();
        assert_eq!((st.writes, st.blocks_written, st.fua_writes, st.flushes), (2, 3, 1, 1));
        assert_eq!(st.inflight_now, 0);
        assert!(matches!(dev.barrier(), Err(DevError::Unsupported(_))));
        drop(dev);

        // Reopen read-only: the data is there and writes are refused.
        let ro = FileDevice::open(&path, FileDeviceOptions { read_only: true, ..Default::default() })?;
        assert_eq!(&ro.read_block(11)?[..], &pattern(3)[..]);
        let e = ro.write_block(0, pattern(0), WriteTag::default());
        assert_eq!(e.err().map(|e| e.errno()), Some(libc::EROFS));
        Ok(())
    }

    /// A batch of `(block, blocks, fua)` requests with distinct contents.
    fn batch(spec: &[(u64, u8, bool)]) -> Vec<WriteRequest> {
        spec.iter()
            .map(|&(block, n, fua)| WriteRequest {
                block,
                bufs: (0..n).map(|k| pattern((block as u8).wrapping_mul(16).wrapping_add(k))).collect(),
                tag: WriteTag::default(),
                fua,
            })
            .collect()
    }

    fn check_batch(dev: &FileDevice, spec: &[(u64, u8, bool)]) -> DevResult<()> {
        for &(block, n, _) in spec {
            for k in 0..n {
                assert_eq!(
                    &dev.read_block(block + u64::from(k))?[..],
                    &pattern((block as u8).wrapping_mul(16).wrapping_add(k))[..]
                );
            }
        }
        Ok(())
    }

    #[test]
    fn batch_merges_contiguous_requests() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let dev = FileDevice::create(dir.path().join("img"), 64 * BLOCK_SIZE as u64)?;
        // 1..4 and 4..5 merge; 7 stands alone; 10 (FUA) stays apart from 11, which merges
        // with 12 and 13..15; an empty request gets its own ticket.
        let spec = [
            (1, 3, false),
            (4, 1, false),
            (7, 1, false),
            (10, 1, true),
            (11, 1, false),
            (12, 1, false),
            (13, 2, false),
            (20, 0, false),
        ];
        let tickets = dev.submit_batch(batch(&spec))?;
        assert_eq!(tickets.len(), spec.len());
        wait_all(tickets)?;
        check_batch(&dev, &spec)?;
        let st = dev.stats();
        assert_eq!((st.writes, st.blocks_written, st.fua_writes), (4, 10, 1));
        assert_eq!(st.inflight_now, 0);
        // A request past the end fails the batch; the ones before it were written.
        let bad = batch(&[(30, 1, false), (31, 1, false), (64, 1, false)]);
        assert!(matches!(dev.submit_batch(bad), Err(DevError::OutOfRange { block: 64, .. })));
        check_batch(&dev, &[(30, 1, false), (31, 1, false)])?;
        Ok(())
    }

    /// A new O_DIRECT image of `blocks` blocks, or `None` (with a message) where the file
    /// system under the temp dir does not support O_DIRECT.
    fn open_direct(path: &std::path::Path, blocks: u64) -> DevResult<Option<FileDevice>> {
        let opts = FileDeviceOptions {
            direct: true,
            create_size: Some(blocks * BLOCK_SIZE as u64),
            ..FileDeviceOptions::default()
        };
        match FileDevice::open(path, opts) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.errno() == libc::EINVAL => {
                println!("skipping O_DIRECT test: {} does not support O_DIRECT ({e})", path.display());
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    #[test]
    fn direct_io_batch() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let Some(dev) = open_direct(&dir.path().join("img"), 64)? else { return Ok(()) };
        let spec = [(2, 2, false), (4, 3, false), (9, 1, false), (10, 1, true)];
        let tickets = dev.submit_batch(batch(&spec))?;
        assert_eq!(tickets.len(), 4);
        wait_all(tickets)?;
        dev.flush()?;
        check_batch(&dev, &spec)?;
        let st = dev.stats();
        assert_eq!((st.writes, st.blocks_written, st.fua_writes), (3, 7, 1));
        Ok(())
    }

    #[test]
    fn direct_io_keeps_submission_order_per_block() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let Some(dev) = open_direct(&dir.path().join("img"), 64)? else { return Ok(()) };
        for round in 0..20u8 {
            // Overlapping writes of blocks 5..8 in flight together, the last one whole.
            let mut tickets = Vec::new();
            for k in 0..8u8 {
                let v = round.wrapping_mul(8).wrapping_add(k);
                let (block, n) = if k % 2 == 0 { (5, 3) } else { (6, 1) };
                let bufs = (0..n).map(|_| pattern(v)).collect();
                tickets.push(dev.submit(WriteRequest {
                    block,
                    bufs,
                    tag: WriteTag::default(),
                    fua: false,
                })?);
            }
            let last = round.wrapping_mul(8).wrapping_add(8);
            tickets.push(dev.submit(WriteRequest {
                block: 5,
                bufs: vec![pattern(last), pattern(last), pattern(last)],
                tag: WriteTag::default(),
                fua: false,
            })?);
            // Read before waiting: it must see every write submitted before it.
            let mut b = vec![0u8; 3 * BLOCK_SIZE];
            dev.read(5, &mut b)?;
            for blk in b.chunks(BLOCK_SIZE) {
                assert_eq!(blk, &pattern(last)[..], "round {round}");
            }
            wait_all(tickets)?;
        }
        Ok(())
    }

    #[test]
    fn out_of_range_and_bad_length() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let dev = FileDevice::create(dir.path().join("img"), 8 * BLOCK_SIZE as u64)?;
        let e = dev.write_block(8, pattern(0), WriteTag::default());
        assert!(matches!(e, Err(DevError::OutOfRange { block: 8, count: 1, num_blocks: 8 })));
        let mut b = vec![0u8; 2 * BLOCK_SIZE];
        assert!(matches!(dev.read(7, &mut b), Err(DevError::OutOfRange { .. })));
        assert!(matches!(dev.read(u64::MAX, &mut b), Err(DevError::OutOfRange { .. })));
        let mut odd = vec![0u8; 100];
        assert!(matches!(dev.read(0, &mut odd), Err(DevError::BadLength(100))));
        Ok(())
    }

    #[test]
    fn open_missing_names_path() {
        let r = FileDevice::open("/nonexistent/cjfs/img", FileDeviceOptions::default());
        match r {
            Err(e) => assert!(e.to_string().contains("/nonexistent/cjfs/img"), "{e}"),
            Ok(_) => panic!("opened a missing file"),
        }
    }

    #[test]
    fn direct_io_round_trip() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let path = dir.path().join("img");
        let Some(dev) = open_direct(&path, 256)? else { return Ok(()) };
        assert!(dev.is_direct());
        let tickets: Vec<IoTicket> = (0..32u64)
            .map(|i| {
                dev.submit(WriteRequest {
                    block: i * 2,
                    bufs: vec![pattern(i as u8), pattern(i as u8 + 100)],
                    tag: WriteTag::default(),
                    fua: i == 31,
                })
            })
            .collect::<DevResult<_>>()?;
        wait_all(tickets)?;
        dev.flush()?;
        for i in 0..32u64 {
            let mut b = vec![0u8; 2 * BLOCK_SIZE];
            dev.read(i * 2, &mut b)?;
            assert_eq!(&b[..BLOCK_SIZE], &pattern(i as u8)[..]);
            assert_eq!(&b[BLOCK_SIZE..], &pattern(i as u8 + 100)[..]);
        }
        let st = dev.stats();
        assert_eq!(st.writes, 32);
        assert_eq!(st.inflight_now, 0);
        assert!(st.inflight_max >= 1);
        // A dropped ticket's write still happens (the pool drains on drop).
        drop(dev.submit(WriteRequest::one(200, pattern(9), WriteTag::default()))?);
        drop(dev);
        let dev = FileDevice::open(&path, FileDeviceOptions::default())?;
        assert_eq!(&dev.read_block(200)?[..], &pattern(9)[..]);
        Ok(())
    }

    #[test]
    fn flush_failure_poisons() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let dev = FileDevice::create(dir.path().join("img"), 8 * BLOCK_SIZE as u64)?;
        dev.write_block(0, pattern(1), WriteTag::default())?;
        dev.flush()?;
        assert!(dev.poisoned().is_none());
        dev.inject_flush_failure();
        assert!(matches!(dev.flush(), Err(DevError::Injected(_))));
        assert!(dev.poisoned().is_some());
        // Never silently retried: later flushes and writes fail.
        assert!(matches!(dev.flush(), Err(DevError::Poisoned(_))));
        let w = dev.write_block(1, pattern(2), WriteTag::default());
        assert!(matches!(w, Err(DevError::Poisoned(_))));
        // Reads still work.
        assert_eq!(&dev.read_block(0)?[..], &pattern(1)[..]);
        Ok(())
    }

    #[test]
    fn fua_flush_failure_poisons() -> DevResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DevError::io("tempdir", "", e))?;
        let dev = FileDevice::create(dir.path().join("img"), 8 * BLOCK_SIZE as u64)?;
        dev.inject_flush_failure();
        let mut req = WriteRequest::one(0, pattern(1), WriteTag::default());
        req.fua = true;
        assert!(matches!(dev.submit(req)?.wait(), Err(DevError::Injected(_))));
        assert!(matches!(dev.flush(), Err(DevError::Poisoned(_))));
        Ok(())
    }
}
