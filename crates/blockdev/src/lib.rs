//! Block devices for cjfs.
//!
//! Every device implements [`BlockDevice`]: writes are *submitted* and complete
//! asynchronously (several may be in flight, which is the queue depth the journaling
//! papers measure), [`BlockDevice::flush`] makes every completed write durable,
//! [`BlockDevice::barrier`] (optional) orders earlier writes before later ones without
//! making them durable, and a FUA write is durable when it completes. Two guarantees hold
//! while writes are in flight: a read returns the data of every write submitted before
//! it, and writes to one block are applied in the order they were submitted (a crash may
//! still keep any subset of writes not yet flushed).
//!
//! Devices: [`FileDevice`] (image file or block device), [`EmulatedSsd`] (in memory, real
//! time, latency model with named presets), [`Recorder`] (wraps any device and logs
//! every write, flush, barrier and FUA for the crash harness) and [`OverlayDevice`] (a
//! writable view of a device that keeps its writes to itself, for dry runs).
//!
//! Every device has one block size ([`BlockDevice::block_size`], one of [`BLOCK_SIZES`],
//! 4 KiB unless chosen otherwise); block numbers and buffers are in that unit.
//!
//! # Lock order
//!
//! A device's locks are taken below every lock of its callers. Outer to inner:
//! [`Recorder`]'s `submit_order` (held across the wrapped device's `submit`, so before
//! that device's locks), then its `log`; [`EmulatedSsd`]'s `apply`, then one chunk's lock,
//! then the spare-chunk pool; the
//! emulated device's `timing`, `poison` and `write_failures`, [`FileDevice`]'s `state` and
//! `poison`, the overlays' `written` maps and an I/O ticket's state are leaves.

mod counters;
mod emulated;
mod error;
mod file;
mod overlay;
mod recorder;
mod timing;
mod writer_lock;

use std::sync::Arc;

pub use counters::{Counters, DeviceStats};
pub use emulated::{EmulatedSsd, SsdPreset};
pub use error::{DevError, DevResult};
pub use file::{DIRECT_WORKERS, FileDevice, FileDeviceOptions, check_image_kind, kernel_holder};
pub use overlay::{MemOverlay, OverlayDevice};
pub use recorder::{RecordedOp, Recorder, RecorderLog};
pub use timing::{
    MIN_SPIN_TAIL, SPIN_TAIL, precise_sleep, precise_sleep_until, raise_io_thread_priority,
    set_low_timer_slack,
};
pub use writer_lock::{EXITING_WAIT, lock_writer, writer_lock_held};

/// The block size devices use unless told otherwise, and the only one the emulated
/// devices' latency models were calibrated with.
pub const DEFAULT_BLOCK_SIZE: usize = 4096;

/// Block sizes a device accepts: the ext4 block sizes a 4 KiB-page kernel mounts.
pub const BLOCK_SIZES: [usize; 3] = [1024, 2048, 4096];

/// Whether `bs` is one of [`BLOCK_SIZES`].
pub fn valid_block_size(bs: usize) -> bool {
    BLOCK_SIZES.contains(&bs)
}

/// One block's bytes (exactly the device's block size), shared and immutable once
/// submitted: writers hand the device an `Arc` so a journal version, the recorder log and
/// the device can share one copy.
pub type BlockBuf = Arc<[u8]>;

/// A fresh zeroed buffer of `bs` bytes.
pub fn zeroed_block(bs: usize) -> Box<[u8]> {
    vec![0u8; bs].into_boxed_slice()
}

/// Copy `data` (one whole block) into a shared block buffer.
pub fn block_from_slice(data: &[u8]) -> BlockBuf {
    Arc::from(data)
}

/// A fresh zeroed shared block buffer of `bs` bytes.
pub fn zeroed_buf(bs: usize) -> BlockBuf {
    let mut a = Arc::<[u8]>::new_uninit_slice(bs);
    // Filled in place: `Arc::from(Vec)` would allocate twice and copy the block again.
    if let Some(dst) = Arc::get_mut(&mut a) {
        // SAFETY: a fresh, uniquely owned allocation of `bs` bytes.
        unsafe { std::ptr::write_bytes(dst.as_mut_ptr().cast::<u8>(), 0, bs) };
    }
    // SAFETY: fully written above (`get_mut` cannot fail on a fresh `Arc`); zero bytes are
    // valid `u8`s.
    unsafe { a.assume_init() }
}

/// What a written block is, where the writer knows it. The recorder keeps it with the
/// write so the crash harness can name journal blocks and transactions in its reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BlockKind {
    /// Not known or not interesting.
    #[default]
    Unknown,
    /// File data written to its home location.
    Data,
    /// File system metadata written to its home location (checkpoint or no-journal mode).
    Metadata,
    /// Journal superblock.
    JournalSuper,
    /// Journal descriptor block.
    JournalDescriptor,
    /// A logged copy of a metadata (or journalled data) block.
    JournalLogged,
    /// Journal commit block.
    JournalCommit,
    /// Journal revoke block.
    JournalRevoke,
    /// A whole journal transaction in one write (the single-I/O commit): revoke,
    /// descriptor and logged blocks, and the commit block last.
    JournalTransaction,
    /// File system superblock or group descriptors.
    Superblock,
    /// Written by recovery.
    Recovery,
}

/// Which log a transaction belongs to: 0 is the primary journal (inode 8's JBD2 log); the
/// journal may run more logs over one buffer cache, each numbering its own transactions.
pub type LogId = u16;

/// A transaction's identity: its log and its id within that log. Ids of one log are in commit
/// order; ids of two logs are not comparable, so nothing orders by the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TxId {
    /// The log that commits the transaction.
    pub log: LogId,
    /// The transaction's id in its log (the JBD2 sequence number, not wrapped).
    pub tid: u64,
}

impl TxId {
    /// Transaction `tid` of log `log`.
    pub const fn new(log: LogId, tid: u64) -> Self {
        TxId { log, tid }
    }
}

impl std::fmt::Display for TxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The primary log's transactions print as JBD2 sequence numbers, as e2fsck and the
        // kernel name them.
        if self.log == 0 { write!(f, "{}", self.tid) } else { write!(f, "{}:{}", self.log, self.tid) }
    }
}

/// Tag attached to a write: block kind and journal transaction when known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WriteTag {
    /// What the block is.
    pub kind: BlockKind,
    /// The journal transaction the write belongs to, if any.
    pub tx: Option<TxId>,
}

impl WriteTag {
    /// A tag with a kind and no transaction.
    pub const fn kind(kind: BlockKind) -> Self {
        WriteTag { kind, tx: None }
    }
    /// A tag with a kind and a transaction.
    pub const fn tx(kind: BlockKind, tx: TxId) -> Self {
        WriteTag { kind, tx: Some(tx) }
    }
}

/// A write of one or more contiguous blocks starting at `block`.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// First block number.
    pub block: u64,
    /// The blocks' contents, in order.
    pub bufs: Vec<BlockBuf>,
    /// Kind and transaction.
    pub tag: WriteTag,
    /// Force unit access: durable on completion.
    pub fua: bool,
}

impl WriteRequest {
    /// A single-block, non-FUA write.
    pub fn one(block: u64, buf: BlockBuf, tag: WriteTag) -> Self {
        WriteRequest { block, bufs: vec![buf], tag, fua: false }
    }
}

/// What a device can do beyond the basics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Supports [`BlockDevice::barrier`] (ordering without durability).
    pub barrier: bool,
    /// Has a volatile write cache (flush is needed for durability).
    pub volatile_cache: bool,
    /// Supports FUA writes natively (otherwise emulated with write + flush).
    pub fua: bool,
    /// Flushes are queued commands that may run concurrently with each other and with
    /// writes (NVMe, where the kernel's block layer keeps one flush in flight per hardware
    /// queue); `false` where the host serialises them (SATA, eMMC, a file's `fdatasync`).
    pub queued_flush: bool,
}

/// A submitted write. [`IoTicket::wait`] blocks until it completed and returns its result.
/// Dropping a ticket without waiting is allowed: the write still happens.
pub struct IoTicket {
    inner: TicketInner,
}

enum TicketInner {
    Done(DevResult<()>),
    /// Completes at a point in time (emulated devices).
    At(std::time::Instant, Arc<parking_lot::Mutex<Option<DevError>>>),
    /// Completed by another thread.
    Pending(Arc<Completion>),
    /// Another ticket with a hook run once when it is waited for (used by the recorder).
    Hooked(Box<IoTicket>, TicketHook),
}

/// A hook run once with a write's result when its ticket is waited for
/// (see [`IoTicket::hooked`]).
pub type TicketHook = Box<dyn FnOnce(&DevResult<()>) + Send>;

/// Completion slot for a write finished by another thread.
#[derive(Default)]
pub struct Completion {
    state: parking_lot::Mutex<Option<DevResult<()>>>,
    cv: parking_lot::Condvar,
}

impl Completion {
    /// Record the result and wake the waiter.
    pub fn complete(&self, r: DevResult<()>) {
        *self.state.lock() = Some(r);
        self.cv.notify_all();
    }
}

impl IoTicket {
    /// An already completed write.
    pub fn done(r: DevResult<()>) -> Self {
        IoTicket { inner: TicketInner::Done(r) }
    }
    /// A write that completes at `at`; `err` may be set by the device before then.
    pub fn at(at: std::time::Instant, err: Arc<parking_lot::Mutex<Option<DevError>>>) -> Self {
        IoTicket { inner: TicketInner::At(at, err) }
    }
    /// A write completed by another thread through `c`.
    pub fn pending(c: Arc<Completion>) -> Self {
        IoTicket { inner: TicketInner::Pending(c) }
    }
    /// Wrap `inner`, running `hook` with its result when it is waited for.
    pub fn hooked(inner: IoTicket, hook: TicketHook) -> Self {
        IoTicket { inner: TicketInner::Hooked(Box::new(inner), hook) }
    }
    /// When a write timed by the emulated device completes (`None` for the other kinds).
    #[cfg(test)]
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        match &self.inner {
            TicketInner::At(t, _) => Some(*t),
            _ => None,
        }
    }
    /// Whether the write has completed (without blocking).
    pub fn is_done(&self) -> bool {
        match &self.inner {
            TicketInner::Done(_) => true,
            TicketInner::At(t, _) => std::time::Instant::now() >= *t,
            TicketInner::Pending(c) => c.state.lock().is_some(),
            TicketInner::Hooked(t, _) => t.is_done(),
        }
    }
    /// Block until the write completed.
    pub fn wait(self) -> DevResult<()> {
        match self.inner {
            TicketInner::Done(r) => r,
            TicketInner::At(t, err) => {
                let now = std::time::Instant::now();
                if t > now {
                    precise_sleep(t - now);
                }
                match err.lock().take() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
            TicketInner::Pending(c) => {
                let mut g = c.state.lock();
                while g.is_none() {
                    c.cv.wait(&mut g);
                }
                g.take().unwrap_or(Ok(()))
            }
            TicketInner::Hooked(t, hook) => {
                let r = t.wait();
                hook(&r);
                r
            }
        }
    }
}

/// Wait for every ticket, returning the first error (all are waited for regardless).
pub fn wait_all(tickets: impl IntoIterator<Item = IoTicket>) -> DevResult<()> {
    let mut first = Ok(());
    for t in tickets {
        let r = t.wait();
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// A block device. All methods take `&self`: devices are shared between threads.
pub trait BlockDevice: Send + Sync {
    /// Size of one block in bytes (one of [`BLOCK_SIZES`]).
    fn block_size(&self) -> usize;
    /// Number of blocks.
    fn num_blocks(&self) -> u64;
    /// Capabilities.
    fn caps(&self) -> DeviceCaps;
    /// Human-readable description (kind, path or preset, figures).
    fn describe(&self) -> String;
    /// Read `buf.len() / block_size()` contiguous blocks starting at `block` (synchronous).
    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()>;
    /// Submit a write; it completes asynchronously. Blocks past the end are an error.
    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket>;
    /// Submit several writes at once, returning one ticket per request, in order. The
    /// result is the same as submitting them one by one in order (the default does exactly
    /// that); a device may merge requests that are contiguous on it into one write.
    fn submit_batch(&self, reqs: Vec<WriteRequest>) -> DevResult<Vec<IoTicket>> {
        reqs.into_iter().map(|r| self.submit(r)).collect()
    }
    /// Make every completed write durable. An error here means durability of earlier writes
    /// is unknown: callers must report it to every waiter and never silently retry.
    fn flush(&self) -> DevResult<()>;
    /// Order every write submitted before this call ahead of every write submitted after it,
    /// without waiting for durability. [`DevError::Unsupported`] when `caps().barrier` is false.
    fn barrier(&self) -> DevResult<()>;
    /// Counters since creation.
    fn stats(&self) -> DeviceStats;

    /// Submit and wait for a single-block write.
    fn write_block(&self, block: u64, buf: BlockBuf, tag: WriteTag) -> DevResult<()> {
        self.submit(WriteRequest::one(block, buf, tag))?.wait()
    }
    /// Read one block into a new buffer.
    fn read_block(&self, block: u64) -> DevResult<Box<[u8]>> {
        let mut b = zeroed_block(self.block_size());
        self.read(block, &mut b[..])?;
        Ok(b)
    }
}

/// Shared handle to any device.
pub type Device = Arc<dyn BlockDevice>;
