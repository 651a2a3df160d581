//! The circular log, once: block arithmetic over `first..last` and the allocation of spans
//! in it. The runtime log (`log.rs`), recovery's scan and any further area (a per-core log,
//! an ijournal area) use this one type, so the wrap rules cannot differ between writing a
//! log and reading it back.
//!
//! A ring hands out consecutive (wrapping) spans in order and takes them back oldest
//! first: a span is released only when it and every older one are durable and no longer
//! needed, which is the JBD2 tail rule. One block always stays unused, so a full ring never
//! looks empty.

use std::collections::VecDeque;

use crate::superblock::JournalSuperblock;

/// One span of the ring: what some record (a transaction, an i-transaction) occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The owner's id (a transaction id), increasing in allocation order.
    pub id: u64,
    /// First block.
    pub start: u64,
    /// The block after its last one (wrapped).
    pub end: u64,
    /// Its record is durable (its commit block reached stable storage).
    pub durable: bool,
}

/// A circular log of blocks `first..last`: the walk wraps from `last - 1` to `first`.
/// Besides the arithmetic it tracks the spans handed out and not yet released (recovery,
/// which only walks, never reserves any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRing {
    /// First block of the ring (`s_first` of a JBD2 log).
    first: u64,
    /// One past the last block (`s_maxlen`).
    last: u64,
    /// Next block to hand out.
    head: u64,
    /// Blocks in use between the tail and `head`.
    used: u64,
    /// Spans handed out and not released, oldest first.
    spans: VecDeque<Span>,
}

impl LogRing {
    /// An empty ring over `first..last` (no validation: a ring of capacity 0 walks nowhere).
    pub fn new(first: u64, last: u64) -> Self {
        LogRing { first, last, head: first, used: 0, spans: VecDeque::new() }
    }

    /// The ring a JBD2 superblock describes (`s_first..s_maxlen`, less the fast-commit area
    /// of a journal with the fast_commit feature).
    pub fn from_superblock(sb: &JournalSuperblock) -> Self {
        LogRing::new(u64::from(sb.s_first), sb.log_end())
    }

    /// First block.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// One past the last block.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Blocks in the ring.
    pub fn capacity(&self) -> u64 {
        self.last.saturating_sub(self.first)
    }

    /// Bring a block number at or past `last` back into the ring (JBD2's `wrap()`).
    pub fn wrap(&self, lblk: u64) -> u64 {
        let cap = self.capacity();
        if lblk < self.last || cap == 0 { lblk } else { self.first + (lblk - self.first) % cap }
    }

    /// The block after `lblk`.
    pub fn next(&self, lblk: u64) -> u64 {
        self.wrap(lblk + 1)
    }

    /// The block `n` blocks after `lblk`.
    pub fn advance(&self, lblk: u64, n: u64) -> u64 {
        let cap = self.capacity();
        if cap == 0 {
            return lblk;
        }
        self.wrap(lblk + n % cap)
    }

    /// Blocks from `from` forward to `to` (0 if equal).
    pub fn distance(&self, from: u64, to: u64) -> u64 {
        if to >= from { to - from } else { self.capacity() - (from - to) }
    }

    /// The next block to hand out (where the next span starts).
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Blocks not in use.
    pub fn free(&self) -> u64 {
        self.capacity() - self.used
    }

    /// Fraction of the ring in use.
    pub fn fill(&self) -> f64 {
        self.used as f64 / self.capacity().max(1) as f64
    }

    /// The spans handed out and not released, oldest first.
    pub fn spans(&self) -> &VecDeque<Span> {
        &self.spans
    }

    /// Hand out `n` consecutive (wrapping) blocks to `id`; `None` when the ring lacks the
    /// space (the caller frees some and retries).
    pub fn reserve(&mut self, id: u64, n: u64) -> Option<u64> {
        if n + 1 > self.free() {
            return None;
        }
        let start = self.head;
        let end = self.advance(start, n);
        self.head = end;
        self.used += n;
        self.spans.push_back(Span { id, start, end, durable: false });
        Some(start)
    }

    /// Record that `id`'s record is durable.
    pub fn mark_durable(&mut self, id: u64) {
        if let Some(s) = self.spans.iter_mut().find(|s| s.id == id) {
            s.durable = true;
        }
    }

    /// Highest id such that it and every older span are durable.
    pub fn durable_prefix(&self) -> Option<u64> {
        self.spans.iter().take_while(|s| s.durable).last().map(|s| s.id)
    }

    /// Release the spans up to `id`, oldest first, stopping at the first one not durable.
    pub fn release_upto(&mut self, id: u64) {
        while let Some(s) = self.spans.front() {
            if s.id > id || !s.durable {
                break;
            }
            self.used -= self.distance(s.start, s.end);
            self.spans.pop_front();
        }
        if self.spans.is_empty() {
            // The next span starts where the old ones ended: the ring keeps moving forward,
            // so stale blocks after the head never carry the next sequence number.
            self.used = 0;
        }
    }

    /// The oldest span with an id above `id`.
    pub fn first_after(&self, id: u64) -> Option<&Span> {
        self.spans.iter().find(|s| s.id > id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_wraps_from_the_last_block_to_the_first() {
        let r = LogRing::new(1, 64);
        assert_eq!(r.capacity(), 63);
        assert_eq!(r.next(62), 63);
        assert_eq!(r.next(63), 1);
        assert_eq!(r.advance(60, 10), 7);
        assert_eq!(r.advance(5, 63 * 3 + 2), 7);
        assert_eq!(r.distance(60, 7), 10);
        assert_eq!(r.distance(7, 7), 0);
        assert_eq!(r.wrap(64), 1);
        let empty = LogRing::new(5, 5);
        assert_eq!(empty.advance(5, 3), 5);
        assert_eq!(empty.wrap(9), 9);
    }

    #[test]
    fn spans_are_reserved_in_order_and_released_oldest_first() {
        let mut r = LogRing::new(1, 64);
        assert_eq!(r.reserve(1, 40), Some(1));
        assert_eq!(r.reserve(2, 40), None, "one block always stays unused");
        assert_eq!(r.reserve(2, 10), Some(41));
        r.mark_durable(2);
        assert_eq!(r.durable_prefix(), None, "1 is not durable yet");
        r.release_upto(2);
        assert_eq!(r.free(), 13, "nothing released past a span that is not durable");
        r.mark_durable(1);
        assert_eq!(r.durable_prefix(), Some(2));
        r.release_upto(1);
        assert_eq!(r.free(), 53);
        assert_eq!(r.first_after(1).map(|s| s.start), Some(41));
        assert_eq!(r.reserve(3, 40), Some(51));
        assert_eq!(r.spans()[1].end, 51 + 40 - 63);
        r.mark_durable(3);
        r.release_upto(3);
        assert_eq!(r.free(), r.capacity());
        assert_eq!(r.reserve(4, 1), Some(28), "the head keeps moving forward");
    }
}
