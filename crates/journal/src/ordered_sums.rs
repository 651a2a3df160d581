//! Ordered-data checksums: one flush for a single-I/O commit that exposes new data.
//!
//! In data=ordered mode a transaction that maps newly allocated blocks (or exposes bytes by
//! a size change) may not have its commit record durable before that data: recovery would
//! replay metadata over blocks holding someone else's old contents. The single-I/O commit
//! (`single_io.rs`) therefore writes such data, waits, flushes, and only then sends its log
//! write and flushes again: two flushes where a file system without a journal pays one (the
//! second flush of "ordered growth", the gap left in SQLite's WAL cells of the journaling of
//! journal benchmark, `docs/results/joj/`).
//!
//! With this technique the commit instead records, in its commit block, a crc32c of every
//! run of that data as written (OptFS's transactional checksums: Chidambaram et al.,
//! "Optimistic Crash Consistency", SOSP'13, §4.3), and sends data and log write together,
//! under one flush. A crash before the flush may keep the commit record without the data;
//! recovery then finds the sums do not match what the home blocks hold and ends the log
//! before that transaction, as it ends it before a torn one.
//!
//! # Which transaction recovery checks
//!
//! Only the log's **last** complete transaction. Each transaction's write is issued after
//! the previous one's flush completed (serial commit) or behind a cache barrier after it, so
//! a later transaction on disk proves the earlier one's data durable — and the earlier one's
//! blocks may since have been overwritten in place (their sums then fail although nothing
//! was lost), so they must not be checked. The last transaction is checked unless the
//! journal superblock's `osum_confirmed` names it or a later one.
//!
//! # Keeping the last transaction's blocks as summed
//!
//! Until a later transaction is durable, an in-place write of a summed block would make the
//! last transaction fail its check after a crash, and recovery would drop a transaction whose
//! fsync returned. So a block keeps the name of the transaction whose sums cover it
//! (`JState::sum`) until that transaction is *confirmed* — a later transaction of its log is
//! durable, or `osum_confirmed` says so — and:
//!
//! * the file system journals a rewrite of such a block in its transaction instead of
//!   writing it in place (`Journal::sum_pending`, used by `cjfs_fs`'s `before_in_place`):
//!   the next append to a WAL's partly written last block is one logged block, not a flush;
//! * every path that writes data buffers home (a commit's ordered data, an fdatasync's own
//!   writes, a leave hold's writes) first confirms any other transaction still naming one of
//!   them ([`settle`]): it waits for that transaction to be durable and records it in
//!   `osum_confirmed` with a superblock write and a flush. The file system's journaling
//!   makes this rare; it is the guarantee, not the fast path.
//!
//! A buffer whose transaction is not confirmed is pinned in the cache, so the name cannot be
//! lost by eviction; a log's durable transactions release the names they confirm.
//!
//! # Format and stock tools
//!
//! The sums follow the standard commit header at [`SUMS_OFFSET`] (where a journal of several
//! logs keeps its chain marks; the single-I/O commit runs one log), big-endian:
//!
//! | offset | field |
//! |---|---|
//! | +0 | `u32 magic` = [`SUMS_MAGIC`] (`"CJOS"`) |
//! | +4 | `u16 version` = 1 |
//! | +6 | `u16 count`: runs that follow |
//! | +8 | `count × (u64 first block, u32 blocks, u32 crc32c)`: the crc32c (seed `!0`) of the run's blocks as written, chained |
//! | +8 + 16·count | `u32 crc32c` (seed `!0`) of everything above from +0 |
//!
//! The v1 transaction checksum of the single-I/O commit does not cover the commit block, so
//! the section carries its own: a torn commit block (its first sector new, a later one old)
//! fails it and ends the log there. The kernel and e2fsck would replay the transaction
//! without checking its data, so while such a journal is open its superblock carries the
//! private `cjfs_ordered_sums` bit (`superblock::INCOMPAT_CJFS_OSUM`): stock tools refuse a
//! crashed image until `cjfs recover` has replayed it; a clean unmount and recovery clear
//! the bit.
//!
//! Only newly exposed data is summed (what `Handle::dirty_data` files); a transaction whose
//! data only overwrites blocks inside the durable size already goes out with one flush.
//! Sums are not used (the transaction takes the data-first path) when its exposed data
//! forms more runs than the commit block holds, or when part of it was written home by
//! another path (an fdatasync) whose image the commit does not have.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cjfs_blockdev::{BlockBuf, BlockDevice, BlockKind, TxId, WriteRequest, WriteTag};

use crate::buffer::{Buffer, Tid};
use crate::commit_block::CHAIN_OFFSET;
use crate::descriptor::{check_block_len, rd_be32, rd_be64, wr_be32, wr_be64};
use crate::error::{JResult, JournalError};
use crate::log_core::LogCore;
use crate::set::Shared;

/// Offset of the sums section in a commit block.
pub const SUMS_OFFSET: usize = CHAIN_OFFSET;
/// Magic of the sums section (`"CJOS"`).
pub const SUMS_MAGIC: u32 = 0x434A_4F53;
/// Bytes of one run record.
const RUN_LEN: usize = 16;

/// A run of home blocks and the crc32c of their contents as the commit wrote them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SumRun {
    /// First home block.
    pub block: u64,
    /// Blocks in the run.
    pub count: u32,
    /// crc32c (seed `!0`) over the run's blocks, in order.
    pub crc: u32,
}

/// The ordered-data sums of one transaction (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataSums {
    /// The runs, as the commit wrote them.
    pub runs: Vec<SumRun>,
}

impl DataSums {
    /// Most runs a commit block of `block_size` bytes holds.
    pub fn max_runs(block_size: usize) -> usize {
        block_size.saturating_sub(SUMS_OFFSET + 8 + 4) / RUN_LEN
    }

    /// The sums of the data write requests `reqs` (one per device-contiguous run).
    pub fn of_requests(reqs: &[WriteRequest]) -> DataSums {
        let runs = reqs
            .iter()
            .map(|r| SumRun {
                block: r.block,
                count: r.bufs.len() as u32,
                crc: r.bufs.iter().fold(!0, |c, b| crate::checksum::crc32c(c, &b[..])),
            })
            .collect();
        DataSums { runs }
    }

    /// Write the section into a commit block image.
    pub fn encode_into(&self, b: &mut [u8]) -> JResult<()> {
        let max = Self::max_runs(b.len());
        if self.runs.len() > max || self.runs.len() > usize::from(u16::MAX) {
            return Err(JournalError::Corrupt(format!(
                "{} ordered-data runs do not fit a commit block (at most {max})",
                self.runs.len()
            )));
        }
        let o = SUMS_OFFSET;
        wr_be32(b, o, SUMS_MAGIC);
        b[o + 4..o + 6].copy_from_slice(&1u16.to_be_bytes());
        b[o + 6..o + 8].copy_from_slice(&(self.runs.len() as u16).to_be_bytes());
        for (i, r) in self.runs.iter().enumerate() {
            let at = o + 8 + RUN_LEN * i;
            wr_be64(b, at, r.block);
            wr_be32(b, at + 8, r.count);
            wr_be32(b, at + 12, r.crc);
        }
        let end = o + 8 + RUN_LEN * self.runs.len();
        let crc = crate::checksum::crc32c(!0, &b[o..end]);
        wr_be32(b, end, crc);
        Ok(())
    }

    /// Read the section of a commit block: `Ok(None)` when there is none, an error when it
    /// is there but malformed or fails its checksum (a torn commit block).
    pub fn decode(b: &[u8]) -> JResult<Option<DataSums>> {
        check_block_len(b, "commit block")?;
        let o = SUMS_OFFSET;
        if rd_be32(b, o) != SUMS_MAGIC {
            return Ok(None);
        }
        let be16 = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
        let version = be16(o + 4);
        if version != 1 {
            return Err(JournalError::Corrupt(format!(
                "commit block ordered-data sums: version {version} (know 1)"
            )));
        }
        let count = usize::from(be16(o + 6));
        if count > Self::max_runs(b.len()) {
            return Err(JournalError::Corrupt(format!(
                "commit block ordered-data sums: {count} runs do not fit the block"
            )));
        }
        let end = o + 8 + RUN_LEN * count;
        let want = rd_be32(b, end);
        let got = crate::checksum::crc32c(!0, &b[o..end]);
        if want != got {
            return Err(JournalError::Corrupt(format!(
                "commit block ordered-data sums: checksum {got:#010x}, recorded {want:#010x}"
            )));
        }
        let runs = (0..count)
            .map(|i| {
                let at = o + 8 + RUN_LEN * i;
                SumRun { block: rd_be64(b, at), count: rd_be32(b, at + 8), crc: rd_be32(b, at + 12) }
            })
            .collect();
        Ok(Some(DataSums { runs }))
    }

    /// Check the runs against what `dev` holds: `None` when every run matches, else the
    /// first block of the first run that does not (or cannot be read).
    pub fn first_mismatch(&self, dev: &dyn BlockDevice) -> Option<u64> {
        for r in &self.runs {
            let mut crc = !0;
            for i in 0..u64::from(r.count) {
                match dev.read_block(r.block + i) {
                    Ok(b) => crc = crate::checksum::crc32c(crc, &b),
                    Err(_) => return Some(r.block),
                }
            }
            if crc != r.crc {
                return Some(r.block);
            }
        }
        None
    }
}

/// The home writes of a commit's ordered data, split by [`requests`].
pub(crate) struct SummedWrites {
    /// Every write request (exposed data and overwrites).
    pub reqs: Vec<WriteRequest>,
    /// The sums of the exposed data, when it can be summed (`None`: it cannot, or there is
    /// none; the commit then orders the data as before).
    pub sums: Option<DataSums>,
    /// Clean buffers whose fdatasync write is still in flight (see `HomeWrites::in_flight`).
    pub in_flight: Vec<(Arc<Buffer>, u32)>,
}

/// [`crate::commit::ordered_requests`] for a transaction `tx` that sums its exposed data: the
/// same writes, with the exposed ones summed and each marked with `tx` under its jstate, in
/// the same hold that takes it off the ordered list (so a writer of the next transaction
/// sees it either as `tx`'s exposed data or as summed, never as neither). The caller holds
/// `home_write_lock` until the requests are submitted.
pub(crate) fn requests(set: &Shared, bufs: &[Arc<Buffer>], tx: TxId) -> SummedWrites {
    let mut unsummable = false;
    let mut marked = Vec::new();
    let t = crate::commit::take_home_writes(set, bufs, Some(tx), |b, js| {
        let strict = js.ordered == Some(tx) && js.ordered_strict;
        // Filed again by a later transaction (the file system logs such a rewrite instead,
        // so this is a backstop): whether it was exposed data of `tx` is no longer known.
        unsummable |= js.ordered.is_some_and(|o| o != tx);
        if !js.dirty {
            // Being written by an fdatasync, or written by another path and perhaps not yet
            // flushed: only a flush before the log write orders it.
            unsummable |= strict;
        } else if strict {
            js.sum = Some(tx);
            marked.push(b.clone());
        }
        strict
    });
    let tag = WriteTag::tx(BlockKind::Data, tx);
    let exposed = crate::commit::run_requests(t.picked, tag);
    let fits = exposed.len() <= DataSums::max_runs(set.cache.block_size());
    let sums = (!exposed.is_empty() && fits && !unsummable).then(|| DataSums::of_requests(&exposed));
    if !marked.is_empty()
        && let Some(l) = set.log_core(tx.log)
    {
        l.summed.lock().push_back((tx.tid, marked));
    }
    let mut reqs = exposed;
    reqs.extend(crate::commit::run_requests(t.rest, tag));
    SummedWrites { reqs, sums, in_flight: t.in_flight }
}

/// Whether transaction `e`'s sums no longer matter: a later transaction of its log is
/// durable, or the superblock's `osum_confirmed` covers it.
pub(crate) fn confirmed(set: &Shared, e: TxId) -> bool {
    set.chains.valid_upto(usize::from(e.log)) > e.tid
        || set.log_core(e.log).is_none_or(|l| l.osum_confirmed.load(Ordering::Acquire) >= e.tid)
}

/// Whether an in-place write of `buf` by transaction `cur` (or by no transaction) must wait:
/// its home contents are still covered by another transaction's unconfirmed sums, or it is
/// exposed data of another transaction that will sum it.
pub(crate) fn pending(set: &Shared, buf: &Buffer, cur: Option<TxId>) -> Option<TxId> {
    if !set.config.ordered_sums || crate::planted::bugs(&set.config).unconfirmed_rewrite {
        return None;
    }
    let js = buf.jstate();
    if let Some(o) = js.ordered.filter(|&o| js.ordered_strict && Some(o) != cur) {
        return Some(o);
    }
    unconfirmed(set, &js, cur)
}

/// The transaction other than `cur` whose unconfirmed sums cover the buffer of `js`.
fn unconfirmed(set: &Shared, js: &crate::buffer::JState, cur: Option<TxId>) -> Option<TxId> {
    js.sum.filter(|&e| Some(e) != cur && !confirmed(set, e))
}

/// Whether some dirty buffer of `bufs` is covered by the unconfirmed sums of a transaction
/// other than `cur` (checked again under `home_write_lock` after [`settle`]).
pub(crate) fn any_unsettled(set: &Shared, bufs: &[Arc<Buffer>], cur: Option<TxId>) -> bool {
    set.config.ordered_sums
        && !crate::planted::bugs(&set.config).unconfirmed_rewrite
        && bufs.iter().any(|b| {
            let js = b.jstate();
            js.dirty && unconfirmed(set, &js, cur).is_some()
        })
}

/// Before writing the dirty buffers of `bufs` (every one of them with `all`) home on behalf
/// of `cur`: confirm every other transaction whose sums still cover one of them (see the
/// module documentation). Returns whether it had to.
pub(crate) fn settle(set: &Shared, bufs: &[Arc<Buffer>], cur: Option<TxId>, all: bool) -> JResult<bool> {
    if !set.config.ordered_sums || crate::planted::bugs(&set.config).unconfirmed_rewrite {
        return Ok(false);
    }
    let newest = bufs
        .iter()
        .filter_map(|b| {
            let js = b.jstate();
            if js.dirty || all { unconfirmed(set, &js, cur) } else { None }
        })
        .max_by_key(|e| e.tid);
    let Some(e) = newest else { return Ok(false) };
    let Some(j) = set.log_core(e.log) else { return Ok(false) };
    // Its data is durable once its own flush completed.
    j.wait(e.tid)?;
    if confirmed(set, e) {
        return Ok(true);
    }
    let _g = j.sb_write.lock();
    if confirmed(set, e) {
        return Ok(true);
    }
    let (img, start) = {
        let mut l = j.log.lock();
        l.sb.osum_confirmed = e.tid as u32;
        (l.sb_image(), l.sb_position().0)
    };
    j.set.dev.write_block(j.area.map(0)?, BlockBuf::from(img), WriteTag::kind(BlockKind::JournalSuper))?;
    crate::flush::flush(&j)?;
    j.log.lock().sb_start_on_disk = start;
    j.osum_confirmed.fetch_max(e.tid, Ordering::AcqRel);
    set.stats.osum_confirm_writes.fetch_add(1, Ordering::Relaxed);
    release(&j, e.tid);
    Ok(true)
}

/// Transactions of `j` up to `upto` are confirmed: their buffers lose the name (and the pin).
pub(crate) fn release(j: &LogCore, upto: Tid) {
    if !j.set.config.ordered_sums {
        return;
    }
    let done: Vec<(Tid, Vec<Arc<Buffer>>)> = {
        let mut q = j.summed.lock();
        let mut out = Vec::new();
        while q.front().is_some_and(|(t, _)| *t <= upto) {
            out.extend(q.pop_front());
        }
        out
    };
    for (tid, bufs) in done {
        for b in bufs {
            let mut js = b.jstate();
            if js.sum.is_some_and(|s| s.tid == tid && s.log == j.id) {
                js.sum = None;
            }
        }
    }
}

/// Buffers summed per transaction, oldest first (`LogCore::summed`).
pub(crate) type SummedList = VecDeque<(Tid, Vec<Arc<Buffer>>)>;

#[cfg(test)]
mod tests {
    use super::*;

    fn sums() -> DataSums {
        DataSums {
            runs: vec![
                SumRun { block: 100, count: 3, crc: 0xDEAD_BEEF },
                SumRun { block: 1 << 40, count: 1, crc: 7 },
            ],
        }
    }

    #[test]
    fn sums_round_trip_past_the_commit_header() {
        let mut b = vec![0u8; 4096];
        b[..SUMS_OFFSET].fill(0xAB);
        sums().encode_into(&mut b).expect("fits");
        assert!(b[..SUMS_OFFSET].iter().all(|&x| x == 0xAB), "the header is left alone");
        assert_eq!(DataSums::decode(&b).expect("decodes"), Some(sums()));
        assert_eq!(DataSums::decode(&vec![0u8; 4096]).expect("plain"), None, "a plain commit block");
    }

    #[test]
    fn a_torn_section_is_an_error_not_silence() {
        let mut b = vec![0u8; 1024];
        sums().encode_into(&mut b).expect("fits");
        // The second run's record reverted to what the block held before (a torn write).
        let at = SUMS_OFFSET + 8 + RUN_LEN;
        b[at..at + RUN_LEN].fill(0);
        assert!(DataSums::decode(&b).is_err());
    }

    #[test]
    fn runs_past_the_block_are_refused() {
        let too_many =
            DataSums { runs: vec![SumRun { block: 1, count: 1, crc: 1 }; DataSums::max_runs(1024) + 1] };
        assert!(too_many.encode_into(&mut vec![0u8; 1024]).is_err());
        assert_eq!(DataSums::max_runs(1024), (1024 - SUMS_OFFSET - 12) / RUN_LEN);
    }

    #[test]
    fn a_run_is_checked_against_the_device() {
        let dev = crate::recovery::test_support::MemDev::new(64);
        let img: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        dev.poke(5, &img);
        let crc = crate::checksum::crc32c(!0, &img);
        let s = DataSums { runs: vec![SumRun { block: 5, count: 1, crc }] };
        assert_eq!(s.first_mismatch(&dev), None);
        let stale = DataSums { runs: vec![SumRun { block: 5, count: 1, crc: crc ^ 1 }] };
        assert_eq!(stale.first_mismatch(&dev), Some(5));
    }
}
