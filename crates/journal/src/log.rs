//! The circular log: head and tail, which transactions occupy it, and the superblock image
//! that describes it.

use crate::buffer::Tid;
use crate::error::{JResult, JournalError};
use crate::ring::LogRing;
use crate::superblock::JournalSuperblock;

/// Log bookkeeping. Protected by `LogCore::log`.
#[derive(Debug)]
pub(crate) struct LogState {
    /// Superblock template (features, uuid, geometry) for rewriting it.
    pub sb: JournalSuperblock,
    /// The circular log: transactions occupy spans named by their tid (reserved, in flight
    /// or durable and not checkpointed).
    pub ring: LogRing,
    /// `s_start` as last written to disk (0 = the on-disk log is empty).
    pub sb_start_on_disk: u64,
    /// Sequence number the next empty-log superblock must carry (above every tid logged).
    pub next_seq: Tid,
    /// Once every transaction is released, point the superblock at the head of the log
    /// (`s_start` = head, `s_sequence` = the next id) instead of marking the log empty, as
    /// JBD2's `jbd2_journal_get_log_tail` does: the next commit then needs no superblock
    /// write first. The single-I/O commit sets it, so its fsync is one write; the log is
    /// marked empty (`s_start` = 0) only when the journal closes ([`LogState::sb_image_empty`]).
    pub keep_head: bool,
}

impl LogState {
    pub fn new(sb: JournalSuperblock) -> JResult<Self> {
        let ring = LogRing::from_superblock(&sb);
        if ring.first() == 0 || ring.first() + 16 > ring.last() {
            return Err(JournalError::Corrupt(format!(
                "journal area too small: first {}, maxlen {}",
                ring.first(),
                ring.last()
            )));
        }
        let next_seq = u64::from(sb.s_sequence.max(1));
        Ok(LogState { sb, ring, sb_start_on_disk: 0, next_seq, keep_head: false })
    }

    /// Reserve `n` consecutive (wrapping) log blocks for `tid`. `None` when the log lacks
    /// space; the caller checkpoints and retries.
    pub fn reserve(&mut self, tid: Tid, n: u64) -> Option<u64> {
        let start = self.ring.reserve(tid, n)?;
        self.next_seq = self.next_seq.max(tid + 1);
        Some(start)
    }

    /// `(s_start, s_sequence)` the on-disk superblock should carry now.
    pub fn sb_position(&self) -> (u64, Tid) {
        self.position_after(0)
    }

    /// `(s_start, s_sequence)` once every transaction up to `upto` is released.
    fn position_after(&self, upto: Tid) -> (u64, Tid) {
        match self.ring.first_after(upto) {
            Some(t) => (t.start, t.id),
            None if self.keep_head => (self.ring.head(), self.next_seq),
            None => (0, self.next_seq),
        }
    }

    /// The superblock image of an empty log (`s_start` = 0), whatever `keep_head` says: for
    /// closing the journal once every transaction is released.
    pub fn sb_image_empty(&self) -> Vec<u8> {
        let mut sb = self.sb.clone();
        sb.s_start = 0;
        sb.s_sequence = self.next_seq as u32;
        sb.encode()
    }

    /// The superblock image for the current position.
    pub fn sb_image(&self) -> Vec<u8> {
        self.sb_image_after(0).0
    }

    /// The superblock image (and its `s_start`) once transactions up to `upto` are released.
    pub fn sb_image_after(&self, upto: Tid) -> (Vec<u8>, u64) {
        let (start, seq) = self.position_after(upto);
        let mut sb = self.sb.clone();
        sb.s_start = start as u32;
        sb.s_sequence = seq as u32;
        (sb.encode(), start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(maxlen: u32) -> JournalSuperblock {
        JournalSuperblock::new_v2(maxlen, [7; 16], true)
    }

    #[test]
    fn superblock_position_follows_the_ring() {
        let mut l = LogState::new(sb(64)).expect("log");
        assert_eq!(l.ring.capacity(), 63);
        let a = l.reserve(1, 40).expect("space");
        assert_eq!(a, 1);
        assert!(l.reserve(2, 40).is_none());
        l.ring.mark_durable(1);
        l.ring.release_upto(1);
        let b = l.reserve(2, 40).expect("space after release");
        assert_eq!(b, 41);
        assert_eq!(l.sb_position(), (41, 2));
        l.ring.mark_durable(2);
        l.ring.release_upto(2);
        assert_eq!(l.sb_position(), (0, 3));
        assert!(LogState::new(sb(16)).is_err(), "too small");
    }
}
