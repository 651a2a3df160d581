//! The circular log: head and tail, which transactions occupy it, and the superblock image
//! that describes it.

use std::collections::VecDeque;

use crate::buffer::Tid;
use crate::config::JournalConfig;
use crate::error::{JResult, JournalError};
use crate::superblock::JournalSuperblock;

/// One transaction's span of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogTx {
    /// Transaction id.
    pub tid: Tid,
    /// First log block.
    pub start: u64,
    /// Log block after its commit block.
    pub end: u64,
    /// Its commit record is durable.
    pub durable: bool,
}

/// Log bookkeeping. Protected by `JournalInner::log`.
#[derive(Debug)]
pub(crate) struct LogState {
    /// Superblock template (features, uuid, geometry) for rewriting it.
    pub sb: JournalSuperblock,
    /// First usable log block (after the superblock).
    first: u64,
    /// One past the last log block.
    last: u64,
    /// Next log block to hand out.
    head: u64,
    /// Blocks in use between tail and head.
    used: u64,
    /// Transactions in the log (reserved, in flight or durable and not checkpointed).
    pub txs: VecDeque<LogTx>,
    /// `s_start` as last written to disk (0 = the on-disk log is empty).
    pub sb_start_on_disk: u64,
    /// Sequence number the next empty-log superblock must carry (above every tid logged).
    pub next_seq: Tid,
}

impl LogState {
    pub fn new(sb: JournalSuperblock, _config: &JournalConfig) -> JResult<Self> {
        let first = u64::from(sb.s_first);
        let last = u64::from(sb.s_maxlen);
        if first == 0 || first + 16 > last {
            return Err(JournalError::Corrupt(format!(
                "journal area too small: first {first}, maxlen {last}"
            )));
        }
        let next_seq = u64::from(sb.s_sequence.max(1));
        Ok(LogState {
            sb,
            first,
            last,
            head: first,
            used: 0,
            txs: VecDeque::new(),
            sb_start_on_disk: 0,
            next_seq,
        })
    }

    /// Usable log blocks.
    pub fn capacity(&self) -> u64 {
        self.last - self.first
    }

    /// Free log blocks.
    pub fn free(&self) -> u64 {
        self.capacity() - self.used
    }

    /// Fraction of the log in use.
    pub fn fill(&self) -> f64 {
        self.used as f64 / self.capacity() as f64
    }

    /// The log block after `lblk`, wrapping.
    pub fn next(&self, lblk: u64) -> u64 {
        if lblk + 1 >= self.last { self.first } else { lblk + 1 }
    }

    /// Reserve `n` consecutive (wrapping) log blocks for `tid`. `None` when the log lacks
    /// space; the caller checkpoints and retries. One block is always left unused so a full
    /// log never looks empty.
    pub fn reserve(&mut self, tid: Tid, n: u64) -> Option<u64> {
        if n + 1 > self.free() {
            return None;
        }
        let start = self.head;
        let mut end = self.head;
        for _ in 0..n {
            end = self.next(end);
        }
        self.head = end;
        self.used += n;
        self.txs.push_back(LogTx { tid, start, end, durable: false });
        self.next_seq = self.next_seq.max(tid + 1);
        Some(start)
    }

    /// Record that `tid`'s commit record is durable.
    pub fn mark_durable(&mut self, tid: Tid) {
        if let Some(t) = self.txs.iter_mut().find(|t| t.tid == tid) {
            t.durable = true;
        }
    }

    /// Highest tid such that it and every older transaction in the log are durable.
    pub fn durable_prefix(&self) -> Option<Tid> {
        self.txs.iter().take_while(|t| t.durable).last().map(|t| t.tid)
    }

    /// Drop transactions up to `tid` (all durable and written home) from the log.
    pub fn release_upto(&mut self, tid: Tid) {
        while let Some(t) = self.txs.front() {
            if t.tid > tid || !t.durable {
                break;
            }
            let span =
                if t.end >= t.start { t.end - t.start } else { (self.last - t.start) + (t.end - self.first) };
            self.used -= span;
            self.txs.pop_front();
        }
        if self.txs.is_empty() {
            // Start the next transaction where the old ones ended; keeps the log moving
            // forward so stale blocks after the head never carry the next sequence number.
            self.used = 0;
        }
    }

    /// `(s_start, s_sequence)` the on-disk superblock should carry now.
    pub fn sb_position(&self) -> (u64, Tid) {
        self.position_after(0)
    }

    /// `(s_start, s_sequence)` once every transaction up to `upto` is released.
    fn position_after(&self, upto: Tid) -> (u64, Tid) {
        match self.txs.iter().find(|t| t.tid > upto) {
            Some(t) => (t.start, t.tid),
            None => (0, self.next_seq),
        }
    }

    /// The superblock image for the current position.
    pub fn sb_image(&self) -> Box<[u8; cjfs_blockdev::BLOCK_SIZE]> {
        self.sb_image_after(0).0
    }

    /// The superblock image (and its `s_start`) once transactions up to `upto` are released.
    pub fn sb_image_after(&self, upto: Tid) -> (Box<[u8; cjfs_blockdev::BLOCK_SIZE]>, u64) {
        let (start, seq) = self.position_after(upto);
        let mut sb = self.sb.clone();
        sb.s_start = start as u32;
        sb.s_sequence = seq as u32;
        (Box::new(sb.encode()), start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(maxlen: u32) -> JournalSuperblock {
        JournalSuperblock::new_v2(maxlen, [7; 16], true)
    }

    #[test]
    fn reserve_wraps_and_releases() {
        let mut l = LogState::new(sb(64), &JournalConfig::jbd2()).expect("log");
        assert_eq!(l.capacity(), 63);
        let a = l.reserve(1, 40).expect("space");
        assert_eq!(a, 1);
        assert!(l.reserve(2, 40).is_none());
        l.mark_durable(1);
        l.release_upto(1);
        let b = l.reserve(2, 40).expect("space after release");
        assert_eq!(b, 41);
        assert_eq!(l.txs[0].end, 41 + 40 - 63);
        assert_eq!(l.sb_position(), (41, 2));
        l.mark_durable(2);
        l.release_upto(2);
        assert_eq!(l.sb_position(), (0, 3));
    }
}
