//! [`Recorder`]: wraps a device and logs every write, completion, flush and barrier for the
//! crash harness.
//!
//! Every logged operation gets a global sequence number (increasing in log order, never
//! reused, not reset by [`Recorder::take_log`] or [`Recorder::clear`]):
//!
//! * [`RecordedOp::Write`] when a write is submitted (only if the inner device accepted
//!   it). Submissions are serialised through the recorder so the log order of writes is
//!   the order in which the inner device received them.
//! * [`RecordedOp::WriteDone`] when the write's ticket is waited for. A ticket dropped
//!   without waiting logs no completion (the write may or may not have happened).
//! * [`RecordedOp::FlushStart`] before calling the inner flush and [`RecordedOp::Flush`]
//!   (naming its start: flushes of different threads overlap) when it returns: a successful
//!   `Flush` is a completed persistence point for every write whose `WriteDone` precedes
//!   its `FlushStart`.
//! * [`RecordedOp::Barrier`] after a successful barrier (failed barriers are not logged),
//!   in submission order with the writes.
//!
//! Reads are forwarded and not logged. Logging a write does not copy its data: the log keeps
//! the request's [`BlockBuf`]s, which are shared `Arc`s.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::{
    BlockBuf, BlockDevice, DevResult, Device, DeviceCaps, DeviceStats, IoTicket, WriteRequest, WriteTag,
};

/// One logged operation. See the module docs for when each is logged.
#[derive(Clone)]
pub enum RecordedOp {
    /// A write was submitted.
    Write {
        /// Sequence number.
        seq: u64,
        /// First block.
        block: u64,
        /// The blocks' contents (shared with the writer, not copied).
        bufs: Vec<BlockBuf>,
        /// Kind and transaction.
        tag: WriteTag,
        /// Force unit access.
        fua: bool,
    },
    /// The write logged as `write_seq` was waited for and completed.
    WriteDone {
        /// Sequence number.
        seq: u64,
        /// Sequence number of the [`RecordedOp::Write`].
        write_seq: u64,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A flush is about to be issued.
    FlushStart {
        /// Sequence number.
        seq: u64,
    },
    /// A flush returned.
    Flush {
        /// Sequence number.
        seq: u64,
        /// Sequence number of its [`RecordedOp::FlushStart`] (flushes of different threads
        /// overlap); `None` in recordings made before it was logged.
        start: Option<u64>,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A barrier completed.
    Barrier {
        /// Sequence number.
        seq: u64,
    },
}

impl RecordedOp {
    /// The operation's sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            RecordedOp::Write { seq, .. }
            | RecordedOp::WriteDone { seq, .. }
            | RecordedOp::FlushStart { seq }
            | RecordedOp::Flush { seq, .. }
            | RecordedOp::Barrier { seq } => *seq,
        }
    }
}

impl fmt::Debug for RecordedOp {
    /// Like a derived `Debug`, but a write shows its block count instead of its bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordedOp::Write { seq, block, bufs, tag, fua } => f
                .debug_struct("Write")
                .field("seq", seq)
                .field("block", block)
                .field("nblocks", &bufs.len())
                .field("tag", tag)
                .field("fua", fua)
                .finish(),
            RecordedOp::WriteDone { seq, write_seq, ok } => f
                .debug_struct("WriteDone")
                .field("seq", seq)
                .field("write_seq", write_seq)
                .field("ok", ok)
                .finish(),
            RecordedOp::FlushStart { seq } => f.debug_struct("FlushStart").field("seq", seq).finish(),
            RecordedOp::Flush { seq, start, ok } => {
                f.debug_struct("Flush").field("seq", seq).field("start", start).field("ok", ok).finish()
            }
            RecordedOp::Barrier { seq } => f.debug_struct("Barrier").field("seq", seq).finish(),
        }
    }
}

/// A recorded sequence of operations, in sequence-number order.
#[derive(Debug, Clone, Default)]
pub struct RecorderLog {
    /// The operations.
    pub ops: Vec<RecordedOp>,
}

impl RecorderLog {
    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// Whether nothing was logged.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Iterate over the operations.
    pub fn iter(&self) -> std::slice::Iter<'_, RecordedOp> {
        self.ops.iter()
    }
}

impl IntoIterator for RecorderLog {
    type Item = RecordedOp;
    type IntoIter = std::vec::IntoIter<RecordedOp>;
    fn into_iter(self) -> Self::IntoIter {
        self.ops.into_iter()
    }
}

/// Log plus the sequence counter, protected together by [`Shared::log`].
#[derive(Default)]
struct LogState {
    log: RecorderLog,
    next_seq: u64,
}

impl LogState {
    fn push(&mut self, make: impl FnOnce(u64) -> RecordedOp) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.log.ops.push(make(seq));
        seq
    }
}

/// State shared with the completion hooks.
struct Shared {
    /// Protected by this mutex: the log and the next sequence number. Held only to append
    /// or take entries, never across a call into the inner device.
    log: Mutex<LogState>,
    /// Atomic: whether operations are logged.
    enabled: AtomicBool,
}

impl Shared {
    fn push(&self, make: impl FnOnce(u64) -> RecordedOp) -> u64 {
        self.log.lock().push(make)
    }
}

/// A device wrapper that logs operations. See the module docs.
pub struct Recorder {
    /// The wrapped device (immutable).
    inner: Device,
    /// Log and enabled flag, shared with ticket hooks (see [`Shared`]).
    shared: Arc<Shared>,
    /// Held across the inner `submit` and the logging of the write, so the log order of
    /// writes is the order the inner device received them. Protects no data.
    submit_order: Mutex<()>,
}

impl Recorder {
    /// Wrap `inner`; logging is enabled.
    pub fn new(inner: Device) -> Recorder {
        Recorder {
            inner,
            shared: Arc::new(Shared { log: Mutex::new(LogState::default()), enabled: AtomicBool::new(true) }),
            submit_order: Mutex::new(()),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Device {
        &self.inner
    }

    /// Take the log, leaving it empty (sequence numbers keep increasing).
    pub fn take_log(&self) -> RecorderLog {
        std::mem::take(&mut self.shared.log.lock().log)
    }

    /// A copy of the log (cheap: block data is shared).
    pub fn log_snapshot(&self) -> RecorderLog {
        self.shared.log.lock().log.clone()
    }

    /// Empty the log (sequence numbers keep increasing).
    pub fn clear(&self) {
        self.shared.log.lock().log.ops.clear();
    }

    /// Turn logging on or off. While off, operations are only forwarded; completions of
    /// writes submitted while on are logged only if logging is on when they are waited for.
    pub fn set_enabled(&self, on: bool) {
        self.shared.enabled.store(on, Ordering::SeqCst);
    }

    /// Whether logging is on.
    pub fn is_enabled(&self) -> bool {
        self.shared.enabled.load(Ordering::SeqCst)
    }
}

impl BlockDevice for Recorder {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }

    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }

    fn describe(&self) -> String {
        format!("recorder over {}", self.inner.describe())
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read(block, buf)
    }

    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        if !self.is_enabled() {
            return self.inner.submit(req);
        }
        let (block, bufs, tag, fua) = (req.block, req.bufs.clone(), req.tag, req.fua);
        let _order = self.submit_order.lock();
        let ticket = self.inner.submit(req)?;
        let write_seq = self.shared.push(|seq| RecordedOp::Write { seq, block, bufs, tag, fua });
        let shared = Arc::clone(&self.shared);
        Ok(IoTicket::hooked(
            ticket,
            Box::new(move |r: &DevResult<()>| {
                if shared.enabled.load(Ordering::SeqCst) {
                    let ok = r.is_ok();
                    shared.push(|seq| RecordedOp::WriteDone { seq, write_seq, ok });
                }
            }),
        ))
    }

    fn flush(&self) -> DevResult<()> {
        if !self.is_enabled() {
            return self.inner.flush();
        }
        let start = self.shared.push(|seq| RecordedOp::FlushStart { seq });
        let r = self.inner.flush();
        let ok = r.is_ok();
        self.shared.push(|seq| RecordedOp::Flush { seq, start: Some(start), ok });
        r
    }

    fn barrier(&self) -> DevResult<()> {
        // Under the submission order, so every write logged before the barrier reached the
        // inner device before it and every write logged after it, after.
        let _order = self.submit_order.lock();
        let r = self.inner.barrier();
        if r.is_ok() && self.is_enabled() {
            self.shared.push(|seq| RecordedOp::Barrier { seq });
        }
        r
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockKind, DevError, EmulatedSsd, SsdPreset, TxId, block_from_slice};

    fn buf(v: u8) -> BlockBuf {
        block_from_slice(&[v; crate::DEFAULT_BLOCK_SIZE])
    }

    #[test]
    fn logs_writes_done_flush_in_order() -> DevResult<()> {
        let inner: Device = Arc::new(EmulatedSsd::new(SsdPreset::nvme_consumer(), 64));
        let rec = Recorder::new(Arc::clone(&inner));
        assert!(rec.describe().starts_with("recorder over emulated SSD"));
        let data = buf(1);
        let t1 = rec.submit(WriteRequest::one(
            5,
            Arc::clone(&data),
            WriteTag::tx(BlockKind::JournalLogged, TxId::new(0, 3)),
        ))?;
        let t2 = rec.submit(WriteRequest {
            block: 6,
            bufs: vec![buf(2)],
            tag: WriteTag::tx(BlockKind::JournalCommit, TxId::new(1, 3)),
            fua: true,
        })?;
        t1.wait()?;
        t2.wait()?;
        rec.flush()?;
        rec.barrier()?;
        let mut rd = vec![0u8; crate::DEFAULT_BLOCK_SIZE];
        rec.read(5, &mut rd)?; // not logged
        assert_eq!(rd[0], 1);

        let log = rec.take_log();
        let ops = &log.ops;
        assert_eq!(ops.len(), 7, "{ops:?}");
        for (i, op) in ops.iter().enumerate() {
            assert_eq!(op.seq(), i as u64);
        }
        match &ops[0] {
            RecordedOp::Write { seq: 0, block: 5, bufs, tag, fua: false } => {
                assert_eq!(*tag, WriteTag::tx(BlockKind::JournalLogged, TxId::new(0, 3)));
                // Shared, not copied.
                assert!(Arc::ptr_eq(&bufs[0], &data));
            }
            op => panic!("unexpected {op:?}"),
        }
        assert!(matches!(
            &ops[1],
            RecordedOp::Write { seq: 1, block: 6, fua: true, tag, .. }
                if tag.kind == BlockKind::JournalCommit && tag.tx == Some(TxId::new(1, 3))
        ));
        assert!(matches!(ops[2], RecordedOp::WriteDone { seq: 2, write_seq: 0, ok: true }));
        assert!(matches!(ops[3], RecordedOp::WriteDone { seq: 3, write_seq: 1, ok: true }));
        assert!(matches!(ops[4], RecordedOp::FlushStart { seq: 4 }));
        assert!(matches!(ops[5], RecordedOp::Flush { seq: 5, start: Some(4), ok: true }));
        assert!(matches!(ops[6], RecordedOp::Barrier { seq: 6 }));
        // Sequence numbers continue after take_log.
        rec.flush()?;
        assert!(matches!(rec.log_snapshot().ops[0], RecordedOp::FlushStart { seq: 7 }));
        Ok(())
    }

    #[test]
    fn barrier_failures_clear_and_disable() -> DevResult<()> {
        let emmc: Device = Arc::new(EmulatedSsd::new(SsdPreset::emmc(), 8));
        let rec = Recorder::new(emmc);
        assert!(matches!(rec.barrier(), Err(DevError::Unsupported(_))));
        assert!(rec.log_snapshot().is_empty());

        let ram = Arc::new(EmulatedSsd::ram(8));
        let rec = Recorder::new(Arc::clone(&ram) as Device);
        rec.barrier()?;
        assert!(matches!(rec.log_snapshot().ops[..], [RecordedOp::Barrier { seq: 0 }]));
        rec.clear();
        assert!(rec.log_snapshot().is_empty());

        // Rejected writes are not logged; failed writes and flushes are logged as failed.
        assert!(rec.write_block(8, buf(0), WriteTag::default()).is_err());
        ram.inject_write_failure_at(1);
        assert!(rec.write_block(1, buf(0), WriteTag::default()).is_err());
        ram.inject_flush_failure();
        assert!(rec.flush().is_err());
        let ops = rec.take_log().ops;
        assert!(
            matches!(
                ops[..],
                [
                    RecordedOp::Write { seq: 1, block: 1, .. },
                    RecordedOp::WriteDone { seq: 2, write_seq: 1, ok: false },
                    RecordedOp::FlushStart { seq: 3 },
                    RecordedOp::Flush { seq: 4, start: Some(3), ok: false },
                ]
            ),
            "{ops:?}"
        );

        // Disabled: forwarded, not logged.
        let rec = Recorder::new(Arc::new(EmulatedSsd::ram(8)));
        rec.set_enabled(false);
        assert!(!rec.is_enabled());
        rec.write_block(0, buf(3), WriteTag::default())?;
        rec.flush()?;
        assert!(rec.take_log().is_empty());
        assert_eq!(rec.read_block(0)?[0], 3);
        assert_eq!(rec.stats().writes, 1);
        Ok(())
    }
}
