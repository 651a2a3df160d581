//! Journal recovery, following Linux `fs/jbd2/recovery.c` (and e2fsck's copy of it).
//!
//! JBD2 recovers in three passes over the log, starting at `s_start` expecting transaction
//! `s_sequence`:
//!
//! 1. **PASS_SCAN** finds the end of the log: the walk stops at the first block without the
//!    magic, with an unexpected sequence, of an unknown type, or a fast-commit block; the
//!    transactions whose commit block was reached before are complete.
//! 2. **PASS_REVOKE** collects the revoke records of the complete transactions: block ->
//!    highest revoking tid.
//! 3. **PASS_REPLAY** writes every logged block of the complete transactions home (the
//!    escaped magic restored) unless it is revoked by a transaction with tid >= its own.
//!
//! Here the log is walked physically once (PASS_SCAN, which records every descriptor,
//! revoke and commit block it passes); the revoke and replay passes then run over that
//! record, reading the logged blocks again. The outcome is the same as JBD2's, because its
//! later passes re-walk exactly the blocks PASS_SCAN accepted.
//!
//! # Checksum failures (csum v2/v3), exactly as JBD2 5.10+ / e2fsprogs 1.46+ handle them
//!
//! * **Descriptor or revoke block tail checksum mismatch** during the scan does not stop it
//!   (the block may be a stale leftover of lazy journal init); it arms a check at the next
//!   commit block of that transaction: if that commit's `h_commit_sec` is *older* than the
//!   previous transaction's, the transaction is taken as stale and the log ends before it;
//!   otherwise the journal is corrupt and recovery fails with [`JournalError::Corrupt`]
//!   **without writing anything** (JBD2 fails the mount, e2fsck replays nothing). If no
//!   commit block follows, the transaction is simply incomplete.
//! * **Commit block checksum mismatch**: if its commit time is older than the previous
//!   transaction's, it is stale (the log ends there, no error). Otherwise the log ends there
//!   too, and without `ASYNC_COMMIT` it is recorded as the *failed commit*
//!   ([`ScanResult::failed_commit`], JBD2's `j_failed_commit`); with `ASYNC_COMMIT` the scan
//!   goes on past it (but replay still ends before it). The transactions before it are
//!   replayed. e2fsck then reports "transaction N was corrupt" and marks the file system as
//!   having errors; [`recover`] replays the same blocks, resets the journal like e2fsck, and
//!   reports the failed commit in [`RecoveryReport::failed_commit`] — the caller must mark
//!   the file system as having errors (the kernel instead refuses to mount).
//! * **Data block tag checksum mismatch** (checked during replay, after the revoke test,
//!   over the block as stored in the log, i.e. still escaped): that one block is not written,
//!   every other block is, and the failure is reported in [`RecoveryReport::bad_blocks`];
//!   the transaction is *not* dropped. Since later copies of the same home block overwrite
//!   earlier ones, a bad latest copy leaves the previous good copy in place, as in JBD2.
//!   JBD2/e2fsck return `EFSBADCRC`; again the caller must treat the file system as damaged.
//!
//! With the old compat checksum (`COMPAT_CHECKSUM`, v1) the scan accumulates crc32_be over
//! each transaction's descriptor and data blocks and compares it at the commit block like
//! JBD2 (mismatch: failed commit as above).
//!
//! # Deviations
//!
//! * A walk that advances more than a whole log without finding the end stops there (JBD2
//!   would loop); that only happens on a crafted log.
//! * A tag whose home block lies beyond the device is not written and is reported in
//!   [`RecoveryReport::bad_blocks`] (JBD2 gets an I/O error when writing it back).
//! * After recovery the superblock gets `s_start = 0` and `s_sequence = end + 1`, where
//!   `end` is the first transaction *not* replayed (JBD2's `++info.end_transaction`; e2fsck
//!   writes the same). The brief's "last tid + 1" would be `end`; JBD2 skips one more so a
//!   half-written transaction `end` left in the log can never be mistaken for a new one.

use std::collections::{BTreeMap, HashMap};

use cjfs_blockdev::{BlockBuf, BlockDevice, BlockKind, WriteRequest, WriteTag, block_from_slice, wait_all};

use crate::area::JournalArea;
use crate::checksum::crc32_be;
use crate::commit_block::CRC32_CHKSUM_SIZE;
use crate::commit_block::CommitBlock;
use crate::descriptor::{
    BLOCKTYPE_COMMIT, BLOCKTYPE_DESCRIPTOR, BLOCKTYPE_FC, BLOCKTYPE_REVOKE, BlockHeader, Tag, parse_tags,
    unescape, verify_block_tail,
};
use crate::error::{JResult, JournalError};
use crate::ordered_sums::DataSums;
use crate::revoke_block::parse_revoke_records;
use crate::ring::LogRing;
use crate::superblock::{
    CHKSUM_TYPE_CRC32, INCOMPAT_CJFS_OSUM, JournalFeatures, JournalSuperblock, read_superblock,
    write_superblock,
};

/// Journal blocks read at once when walking the log (256 KiB).
const READ_RUN_BLOCKS: u64 = 64;
/// Home blocks written per batch during replay.
const WRITE_BATCH_BLOCKS: usize = 1024;

/// `tid_gt(x, y)`: x is after y in the wrapping 32-bit transaction id space.
pub fn tid_gt(x: u32, y: u32) -> bool {
    (x.wrapping_sub(y) as i32) > 0
}

/// `tid_geq(x, y)`: x is y or after it in the wrapping 32-bit transaction id space.
pub fn tid_geq(x: u32, y: u32) -> bool {
    (x.wrapping_sub(y) as i32) >= 0
}

/// Reads log blocks through a window of up to [`READ_RUN_BLOCKS`] device-contiguous blocks.
pub(crate) struct LogReader<'a> {
    dev: &'a dyn BlockDevice,
    area: &'a JournalArea,
    maxlen: u64,
    start: u64,
    len: u64,
    buf: Vec<u8>,
}

impl<'a> LogReader<'a> {
    pub(crate) fn new(dev: &'a dyn BlockDevice, area: &'a JournalArea, sb: &JournalSuperblock) -> Self {
        LogReader { dev, area, maxlen: u64::from(sb.s_maxlen), start: 0, len: 0, buf: Vec::new() }
    }

    /// Log block `lblk` (`jread`).
    pub(crate) fn block(&mut self, lblk: u64) -> JResult<&[u8]> {
        if lblk >= self.maxlen {
            return Err(JournalError::Corrupt(format!(
                "log block {lblk} is beyond s_maxlen {}",
                self.maxlen
            )));
        }
        if lblk < self.start || lblk >= self.start + self.len {
            let (dev_block, n) = self.area.map_run(lblk, READ_RUN_BLOCKS.min(self.maxlen - lblk))?;
            let bs = self.dev.block_size();
            self.buf.resize(n as usize * bs, 0);
            self.len = 0;
            self.dev.read(dev_block, &mut self.buf)?;
            self.start = lblk;
            self.len = n;
        }
        let bs = self.dev.block_size();
        let off = (lblk - self.start) as usize * bs;
        Ok(&self.buf[off..off + bs])
    }
}

/// Why the scan stopped walking the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// `s_start == 0`: the journal is clean, nothing was scanned.
    Clean,
    /// A block without the JBD2 magic (the normal end of the log).
    NoMagic {
        /// Log block.
        log_block: u64,
    },
    /// A journal block of another transaction (the normal end of a wrapped log).
    SequenceMismatch {
        /// Log block.
        log_block: u64,
        /// Its `h_sequence`.
        found: u32,
        /// The transaction expected.
        expected: u32,
    },
    /// A block type recovery does not know.
    UnknownBlockType {
        /// Log block.
        log_block: u64,
        /// Its `h_blocktype`.
        blocktype: u32,
    },
    /// A fast-commit block in the main log.
    FastCommitBlock {
        /// Log block.
        log_block: u64,
    },
    /// A commit block whose checksum failed but whose time is older than the previous
    /// commit's: a stale leftover; the log ends before its transaction.
    StaleTransaction {
        /// Transaction id.
        tid: u32,
        /// Log block of the commit block.
        log_block: u64,
    },
    /// A commit block failed its checksum (see [`ScanResult::failed_commit`]).
    CommitChecksum {
        /// Transaction whose commit failed.
        tid: u32,
        /// Log block where the scan stopped.
        log_block: u64,
    },
    /// The walk went once around the whole log without finding its end.
    LogExhausted,
    /// Ordered-data checksums (`ordered_sums.rs`): the last transaction's commit block
    /// sums ordered data the device does not hold (its flush never completed); the log
    /// ends before it.
    DataNotDurable {
        /// Transaction id.
        tid: u32,
        /// First block of the first run that does not match (`None`: the sums section
        /// itself was torn).
        block: Option<u64>,
    },
}

/// One descriptor block seen by the scan.
#[derive(Debug, Clone)]
pub(crate) struct ScannedDescriptor {
    /// Log block of the first logged block it describes.
    pub(crate) first_data: u64,
    pub(crate) tags: Vec<Tag>,
}

/// One transaction seen by the scan (complete when `commit` is set).
#[derive(Debug, Clone)]
pub(crate) struct ScannedTx {
    pub(crate) tid: u32,
    first_block: u64,
    pub(crate) descriptors: Vec<ScannedDescriptor>,
    descriptor_blocks: Vec<u64>,
    pub(crate) revokes: Vec<JResult<Vec<u64>>>,
    pub(crate) commit_block: u64,
    commit: Option<CommitBlock>,
    /// The ordered-data sums of its commit block (`Err`: the section is torn).
    sums: Result<Option<DataSums>, String>,
}

impl ScannedTx {
    fn new(tid: u32, first_block: u64) -> Self {
        ScannedTx {
            tid,
            first_block,
            descriptors: Vec::new(),
            descriptor_blocks: Vec::new(),
            revokes: Vec::new(),
            commit_block: 0,
            commit: None,
            sums: Ok(None),
        }
    }
}

/// Summary of one complete transaction found in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSummary {
    /// Transaction id.
    pub tid: u32,
    /// Its first log block.
    pub first_block: u64,
    /// Log block of its commit block.
    pub commit_block: u64,
    /// Descriptor blocks.
    pub descriptor_blocks: usize,
    /// Logged blocks (tags).
    pub data_blocks: usize,
    /// Revoke blocks.
    pub revoke_blocks: usize,
    /// Revoke records in well-formed revoke blocks.
    pub revoke_records: usize,
    /// Commit time, seconds.
    pub commit_sec: u64,
    /// Commit time, nanoseconds.
    pub commit_nsec: u32,
}

/// What [`scan`] found (PASS_SCAN). Reads only.
#[derive(Debug, Clone)]
pub struct ScanResult {
    /// The journal superblock.
    pub superblock: JournalSuperblock,
    /// The log holds transactions to replay (`s_start != 0`).
    pub needed: bool,
    /// First transaction expected (`s_sequence`).
    pub start_tid: u32,
    /// First transaction that is *not* replayed (JBD2's `info.end_transaction`).
    pub end_tid: u32,
    /// Log block where the walk started (`s_start`, 0 if clean).
    pub start_block: u64,
    /// Log block after the last replayable transaction's commit block (`start_block` if
    /// there is none).
    pub head_block: u64,
    /// The complete transactions to replay, in order (`start_tid..end_tid`).
    pub transactions: Vec<TransactionSummary>,
    /// JBD2's `j_failed_commit`: a transaction whose commit block failed its checksum
    /// (sync commit), or the first failure followed by another commit block (async with v1
    /// checksums). Replay stops before it; the file system must be marked as having errors.
    pub failed_commit: Option<u32>,
    /// Why the walk stopped.
    pub stop: ScanStop,
    /// Every transaction the walk passed, including any after `end_tid` (async commit).
    pub(crate) txs: Vec<ScannedTx>,
}

impl ScanResult {
    /// Number of transactions to replay.
    pub fn transaction_count(&self) -> u32 {
        self.end_tid.wrapping_sub(self.start_tid)
    }

    /// The transactions to replay (those before `end_tid`).
    pub(crate) fn replayable(&self) -> impl Iterator<Item = &ScannedTx> {
        let end = self.end_tid;
        self.txs.iter().take_while(move |t| tid_gt(end, t.tid))
    }
}

/// PASS_SCAN over the log described by `sb`.
pub(crate) fn scan_log(
    dev: &dyn BlockDevice,
    area: &JournalArea,
    sb: &JournalSuperblock,
) -> JResult<ScanResult> {
    let f = sb.features();
    let seed = sb.csum_seed();
    let geo = LogRing::from_superblock(sb);
    let mut result = ScanResult {
        superblock: sb.clone(),
        needed: sb.s_start != 0,
        start_tid: sb.s_sequence,
        end_tid: sb.s_sequence,
        start_block: u64::from(sb.s_start),
        head_block: u64::from(sb.s_start),
        transactions: Vec::new(),
        failed_commit: None,
        stop: ScanStop::Clean,
        txs: Vec::new(),
    };
    if !result.needed {
        return Ok(result);
    }

    let mut reader = LogReader::new(dev, area, sb);
    let mut next_id = sb.s_sequence;
    let mut lblk = u64::from(sb.s_start);
    let mut end: Option<u32> = None;
    let mut crc32_sum: u32 = !0;
    let mut need_check_commit_time = false;
    let mut last_commit_time: u64 = 0;
    let mut advanced: u64 = 0;
    let mut cur = ScannedTx::new(next_id, lblk);

    let stop = loop {
        if advanced >= geo.capacity() {
            break ScanStop::LogExhausted;
        }
        let here = lblk;
        let block = reader.block(here)?.to_vec();
        lblk = geo.next(lblk);
        advanced += 1;

        let h = BlockHeader::decode(&block)?;
        if !h.has_magic() {
            break ScanStop::NoMagic { log_block: here };
        }
        if h.sequence != next_id {
            break ScanStop::SequenceMismatch { log_block: here, found: h.sequence, expected: next_id };
        }
        match h.blocktype {
            BLOCKTYPE_DESCRIPTOR => {
                if !verify_block_tail(&block, &f, seed) {
                    // Possibly a stale block from lazy journal init: decided at the commit.
                    log::debug!("jbd2 scan: descriptor checksum mismatch at log block {here}");
                    need_check_commit_time = true;
                }
                let tags = parse_tags(&block, &f);
                let first_data = lblk;
                let n = tags.len() as u64;
                if f.compat_checksum() && !need_check_commit_time && end.is_none() {
                    crc32_sum = crc32_be(crc32_sum, &block);
                    for _ in 0..n {
                        crc32_sum = crc32_be(crc32_sum, reader.block(lblk)?);
                        lblk = geo.next(lblk);
                    }
                } else {
                    lblk = geo.advance(lblk, n);
                }
                advanced += n;
                cur.descriptor_blocks.push(here);
                cur.descriptors.push(ScannedDescriptor { first_data, tags });
            }
            BLOCKTYPE_COMMIT => {
                let commit = CommitBlock::decode_unverified(&block)?;
                let commit_time = commit.commit_sec;
                if need_check_commit_time {
                    if commit_time >= last_commit_time {
                        return Err(JournalError::Corrupt(format!(
                            "invalid descriptor or revoke block checksum in transaction {next_id} \
                             (commit block at log block {here}); nothing replayed"
                        )));
                    }
                    // Older than the previous commit: a stale transaction, end of the log.
                    break ScanStop::StaleTransaction { tid: next_id, log_block: here };
                }
                let mut chksum_error = false;
                if f.compat_checksum() {
                    if let Some(e) = end {
                        result.failed_commit = Some(e);
                        break ScanStop::CommitChecksum { tid: e, log_block: here };
                    }
                    let found = commit.chksum[0];
                    let ok = (crc32_sum == found
                        && commit.chksum_type == CHKSUM_TYPE_CRC32
                        && commit.chksum_size == CRC32_CHKSUM_SIZE)
                        || (commit.chksum_type == 0 && commit.chksum_size == 0 && found == 0);
                    if ok {
                        crc32_sum = !0;
                    } else {
                        chksum_error = true;
                    }
                }
                if !chksum_error && !CommitBlock::verify_csum(&block, &f, seed) {
                    chksum_error = true;
                }
                if chksum_error {
                    if commit_time < last_commit_time {
                        break ScanStop::StaleTransaction { tid: next_id, log_block: here };
                    }
                    log::warn!("jbd2 scan: commit block of transaction {next_id} failed its checksum");
                    end = Some(next_id);
                    if !f.async_commit() {
                        result.failed_commit = Some(next_id);
                        break ScanStop::CommitChecksum { tid: next_id, log_block: here };
                    }
                }
                last_commit_time = commit_time;
                cur.commit_block = here;
                cur.commit = Some(commit);
                if f.incompat & INCOMPAT_CJFS_OSUM != 0 {
                    cur.sums = DataSums::decode(&block).map_err(|e| e.to_string());
                }
                if end.is_none() {
                    result.head_block = lblk;
                }
                result.txs.push(std::mem::replace(&mut cur, ScannedTx::new(next_id.wrapping_add(1), lblk)));
                next_id = next_id.wrapping_add(1);
            }
            BLOCKTYPE_REVOKE => {
                if !verify_block_tail(&block, &f, seed) {
                    log::debug!("jbd2 scan: revoke block checksum mismatch at log block {here}");
                    need_check_commit_time = true;
                }
                cur.revokes.push(parse_revoke_records(&block, &f));
            }
            BLOCKTYPE_FC => break ScanStop::FastCommitBlock { log_block: here },
            other => {
                break ScanStop::UnknownBlockType { log_block: here, blocktype: other };
            }
        }
    };

    result.stop = stop;
    result.end_tid = end.unwrap_or(next_id);
    if f.incompat & INCOMPAT_CJFS_OSUM != 0 {
        check_last_sums(dev, sb, &mut result);
    }
    let summaries: Vec<TransactionSummary> = result
        .replayable()
        .map(|t| TransactionSummary {
            tid: t.tid,
            first_block: t.first_block,
            commit_block: t.commit_block,
            descriptor_blocks: t.descriptor_blocks.len(),
            data_blocks: t.descriptors.iter().map(|d| d.tags.len()).sum(),
            revoke_blocks: t.revokes.len(),
            revoke_records: t.revokes.iter().map(|r| r.as_ref().map_or(0, |v| v.len())).sum(),
            commit_sec: t.commit.map_or(0, |c| c.commit_sec),
            commit_nsec: t.commit.map_or(0, |c| c.commit_nsec),
        })
        .collect();
    result.transactions = summaries;
    Ok(result)
}

/// Ordered-data checksums (`ordered_sums.rs`): the last transaction to replay stays only if
/// the data its commit block sums is on the device, unless the superblock's
/// `osum_confirmed` covers it. Earlier transactions are never checked: a later commit on
/// disk proves their data durable, and their blocks may since have been rewritten in place.
fn check_last_sums(dev: &dyn BlockDevice, sb: &JournalSuperblock, result: &mut ScanResult) {
    if result.end_tid == result.start_tid {
        return;
    }
    let last = result.end_tid.wrapping_sub(1);
    if tid_geq(sb.osum_confirmed, last) {
        return;
    }
    let Some(tx) = result.txs.iter().find(|t| t.tid == last) else { return };
    let block = match &tx.sums {
        Ok(None) => return,
        Ok(Some(s)) => match s.first_mismatch(dev) {
            None => return,
            Some(b) => Some(b),
        },
        Err(e) => {
            log::warn!("jbd2 scan: transaction {last}: {e}");
            None
        }
    };
    log::info!("jbd2 scan: transaction {last}'s ordered data is not on the device; the log ends before it");
    result.head_block = tx.first_block;
    result.end_tid = last;
    result.stop = ScanStop::DataNotDurable { tid: last, block };
}

/// Scan the journal in `area` without writing anything: which transactions recovery would
/// replay and where the log ends (for `cjfs info` and tests).
pub fn scan(dev: &dyn BlockDevice, area: &JournalArea) -> JResult<ScanResult> {
    let sb = read_superblock(dev, area)?;
    scan_log(dev, area, &sb)
}

/// Why a logged block was not written home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadBlockReason {
    /// The tag checksum (csum v2/v3) does not match the logged block.
    ChecksumMismatch,
    /// The home block number lies beyond the device.
    OutOfRange,
}

/// A logged block of a replayed transaction that could not be replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLogBlock {
    /// Transaction id.
    pub tid: u32,
    /// Log block holding the copy.
    pub log_block: u64,
    /// Home block it was meant for.
    pub home_block: u64,
    /// What was wrong.
    pub reason: BadBlockReason,
}

/// Where the final copy of a home block comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source {
    pub(crate) log_block: u64,
    pub(crate) escaped: bool,
}

/// PASS_REVOKE and the decisions of PASS_REPLAY, without writing.
#[derive(Debug)]
struct Decisions {
    /// Home block -> its final copy.
    winners: BTreeMap<u64, Source>,
    replays: u64,
    revoke_hits: u64,
    revoke_records: u64,
    bad_blocks: Vec<BadLogBlock>,
}

fn decide(dev: &dyn BlockDevice, area: &JournalArea, scan: &ScanResult) -> JResult<Decisions> {
    let sb = &scan.superblock;
    let f: JournalFeatures = sb.features();
    let seed = sb.csum_seed();
    let geo = LogRing::from_superblock(sb);

    // PASS_REVOKE: block -> highest revoking tid.
    let mut revoked: HashMap<u64, u32> = HashMap::new();
    let mut revoke_records = 0u64;
    for tx in scan.replayable() {
        for recs in &tx.revokes {
            let recs = recs.as_ref().map_err(Clone::clone)?;
            for &blk in recs {
                revoke_records += 1;
                revoked
                    .entry(blk)
                    .and_modify(|t| {
                        if tid_gt(tx.tid, *t) {
                            *t = tx.tid;
                        }
                    })
                    .or_insert(tx.tid);
            }
        }
    }

    // PASS_REPLAY decisions, in log order so later copies win.
    let mut reader = LogReader::new(dev, area, sb);
    let num_blocks = dev.num_blocks();
    let mut d = Decisions {
        winners: BTreeMap::new(),
        replays: 0,
        revoke_hits: 0,
        revoke_records,
        bad_blocks: Vec::new(),
    };
    for tx in scan.replayable() {
        for desc in &tx.descriptors {
            for (i, tag) in desc.tags.iter().enumerate() {
                let log_block = geo.advance(desc.first_data, i as u64);
                // jbd2_journal_test_revoke: revoked by a transaction at or after this one.
                if revoked.get(&tag.blocknr).is_some_and(|&rt| !tid_gt(tx.tid, rt)) {
                    d.revoke_hits += 1;
                    continue;
                }
                if f.csum_v2or3() && !tag.verify(reader.block(log_block)?, tx.tid, &f, seed) {
                    log::warn!(
                        "jbd2 replay: checksum mismatch for block {} (log block {log_block}, transaction {})",
                        tag.blocknr,
                        tx.tid
                    );
                    d.bad_blocks.push(BadLogBlock {
                        tid: tx.tid,
                        log_block,
                        home_block: tag.blocknr,
                        reason: BadBlockReason::ChecksumMismatch,
                    });
                    continue;
                }
                if tag.blocknr >= num_blocks {
                    d.bad_blocks.push(BadLogBlock {
                        tid: tx.tid,
                        log_block,
                        home_block: tag.blocknr,
                        reason: BadBlockReason::OutOfRange,
                    });
                    continue;
                }
                d.replays += 1;
                d.winners.insert(tag.blocknr, Source { log_block, escaped: tag.escaped() });
            }
        }
    }
    Ok(d)
}

/// Read the final copies in batches (in log block order, for sequential reads) and hand each
/// batch, sorted by home block, to `sink`.
pub(crate) fn for_each_batch(
    dev: &dyn BlockDevice,
    area: &JournalArea,
    sb: &JournalSuperblock,
    winners: &BTreeMap<u64, Source>,
    mut sink: impl FnMut(Vec<(u64, BlockBuf)>) -> JResult<()>,
) -> JResult<()> {
    let mut by_log: Vec<(u64, Source)> = winners.iter().map(|(&h, &s)| (h, s)).collect();
    by_log.sort_by_key(|(_, s)| s.log_block);
    let mut reader = LogReader::new(dev, area, sb);
    for chunk in by_log.chunks(WRITE_BATCH_BLOCKS) {
        let mut batch = Vec::with_capacity(chunk.len());
        for &(home, src) in chunk {
            let raw = reader.block(src.log_block)?;
            let b = if src.escaped {
                let mut v = raw.to_vec();
                unescape(&mut v);
                BlockBuf::from(v)
            } else {
                block_from_slice(raw)
            };
            batch.push((home, b));
        }
        batch.sort_by_key(|(h, _)| *h);
        sink(batch)?;
    }
    Ok(())
}

/// What a replay would do, without writing ([`plan_replay`]).
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    /// The scan it is based on.
    pub scan: ScanResult,
    /// Final content of every home block the replay writes, sorted by block number (later
    /// copies of a block already folded in).
    pub writes: Vec<(u64, BlockBuf)>,
    /// Logged blocks replayed (JBD2's `nr_replays`; a block logged twice counts twice).
    pub blocks_replayed: u64,
    /// Logged blocks skipped because revoked (`nr_revoke_hits`).
    pub blocks_revoked: u64,
    /// Revoke records in the replayed transactions (`nr_revokes`).
    pub revoke_records: u64,
    /// Logged blocks that cannot be replayed.
    pub bad_blocks: Vec<BadLogBlock>,
}

/// Everything [`recover`] would write to home blocks, without writing (for tests and
/// tools). Fails like [`recover`] on a corrupt log.
pub fn plan_replay(dev: &dyn BlockDevice, area: &JournalArea) -> JResult<ReplayPlan> {
    let scan = scan(dev, area)?;
    let d = decide(dev, area, &scan)?;
    let mut writes = Vec::with_capacity(d.winners.len());
    for_each_batch(dev, area, &scan.superblock, &d.winners, |batch| {
        writes.extend(batch);
        Ok(())
    })?;
    writes.sort_by_key(|(h, _)| *h);
    Ok(ReplayPlan {
        scan,
        writes,
        blocks_replayed: d.replays,
        blocks_revoked: d.revoke_hits,
        revoke_records: d.revoke_records,
        bad_blocks: d.bad_blocks,
    })
}

/// What [`recover`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The journal needed recovery (`s_start != 0`).
    pub needed: bool,
    /// First transaction in the log (`s_sequence` before recovery).
    pub start_tid: u32,
    /// Next transaction id to use; the superblock now carries it as `s_sequence` (JBD2's
    /// `j_transaction_sequence` after recovery). When no recovery was needed it is
    /// `s_sequence + 1`, as JBD2 computes it, and the superblock is left untouched.
    pub end_tid: u32,
    /// Transactions replayed.
    pub transactions: u32,
    /// Logged blocks replayed (`nr_replays`).
    pub blocks_replayed: u64,
    /// Distinct home blocks written.
    pub blocks_written: u64,
    /// Logged blocks skipped because revoked (`nr_revoke_hits`).
    pub blocks_revoked: u64,
    /// Revoke records seen (`nr_revokes`).
    pub revoke_records: u64,
    /// A transaction whose commit block failed its checksum; replay stopped before it.
    pub failed_commit: Option<u32>,
    /// A later transaction reached the log after [`RecoveryReport::failed_commit`], so the
    /// failure lost committed work. Without one the failed commit block was the log's last
    /// write, torn by a crash: that transaction was never acknowledged and is rightly
    /// dropped.
    pub failed_commit_followed: bool,
    /// Logged blocks of replayed transactions that were not written (bad checksum, out of
    /// range).
    pub bad_blocks: Vec<BadLogBlock>,
    /// Why the log walk stopped.
    pub stop: ScanStop,
    /// With several logs: committed transactions not replayed because they are chained to
    /// a transaction that did not commit (see `order_graph.rs`).
    pub discarded: u32,
    /// Logs that held transactions to replay (`start_tid` and `end_tid` are log 0's: a
    /// range of tids means one log only when this is at most 1).
    pub logs_replayed: u32,
}

impl RecoveryReport {
    /// A report of no recovery for a log starting at `start_tid` (nothing replayed yet).
    pub fn nothing(start_tid: u32) -> Self {
        RecoveryReport {
            needed: false,
            start_tid,
            end_tid: start_tid.wrapping_add(1),
            transactions: 0,
            blocks_replayed: 0,
            blocks_written: 0,
            blocks_revoked: 0,
            revoke_records: 0,
            failed_commit: None,
            failed_commit_followed: false,
            bad_blocks: Vec::new(),
            stop: ScanStop::Clean,
            discarded: 0,
            logs_replayed: 0,
        }
    }

    /// The journal was damaged (a failed commit followed by later transactions, or
    /// unreplayable blocks): the file system must be marked as having errors and checked,
    /// as e2fsck does. A torn last commit block is not damage (see
    /// [`RecoveryReport::failed_commit_followed`]); JBD2 and e2fsck are stricter there
    /// (the kernel refuses the mount, e2fsck marks errors), though the transaction they
    /// drop is the same.
    pub fn damaged(&self) -> bool {
        self.failed_commit_followed || !self.bad_blocks.is_empty()
    }
}

/// Recover the journal in `area`: replay every complete transaction to its home blocks,
/// flush, then mark the log empty (`s_start = 0`, `s_sequence = end_tid`) and flush again.
///
/// Idempotent: if interrupted before the superblock is rewritten, running it again writes
/// the same blocks. When the journal is clean nothing is written. Errors found before any
/// write (corrupt superblock, a descriptor/revoke checksum failure JBD2 treats as fatal, a
/// malformed revoke block) return [`JournalError::Corrupt`] / [`JournalError::Incompatible`]
/// with the device untouched. See the module documentation for checksum failures.
pub fn recover(dev: &dyn BlockDevice, area: &JournalArea) -> JResult<RecoveryReport> {
    recover_with(dev, area, false)
}

/// [`recover`] for a mount that goes on to change the file system: a damaged journal (a
/// failed commit followed by later transactions, or logged blocks that cannot be replayed)
/// fails with
/// [`JournalError::Damaged`] **before anything is written**, so the image stays as it was
/// for `cjfs recover` and `e2fsck` to judge. Replaying what is intact and then allocating
/// from bitmaps that a lost block should have changed would hand out blocks and inodes that
/// are in use; the kernel likewise refuses to mount after a failed journal checksum.
pub fn recover_strict(dev: &dyn BlockDevice, area: &JournalArea) -> JResult<RecoveryReport> {
    recover_with(dev, area, true)
}

/// Whether the transaction after `failed` (whose commit block failed its checksum) reached
/// the log *committed*: its descriptor, revoke and logged blocks follow the failed commit
/// block and end in a commit block of its own that passes its checksum. Then the failure is
/// damage that loses committed work. Otherwise the failed commit block is the last commit
/// of the log — the signature of a crash tearing it — and dropping that transaction (and the
/// uncommitted blocks of the next one behind it) is what the crash means: it was never
/// acknowledged durable, because every mode writes a transaction's commit block only after
/// the previous commit block is durable or, with a barrier, ordered before it. (The next
/// transaction's log blocks may well have reached the log already: with dual-thread commit
/// they are written while the previous commit block is in flight — found by the crash
/// harness, `barrierfs` without a barrier.) A tag checksum or a home block out of range
/// cannot come from a crash in any mode, since log blocks are durable or ordered before
/// their commit block.
pub(crate) fn committed_after(
    dev: &dyn BlockDevice,
    area: &JournalArea,
    sb: &JournalSuperblock,
    scan: &ScanResult,
    failed: u32,
) -> bool {
    if scan.txs.iter().any(|t| tid_gt(t.tid, failed) && t.commit.is_some()) {
        return true;
    }
    let ScanStop::CommitChecksum { tid, log_block } = scan.stop else {
        return false;
    };
    let f = sb.features();
    if f.compat_checksum() && f.async_commit() {
        // v1 with async commit scans past the failed transaction and stops only at a later
        // commit block (JBD2's `j_failed_commit = end_transaction`): a commit after a torn
        // transaction, which a single-I/O journal never leaves (n+1 is written only once n
        // is durable, or behind a barrier).
        return true;
    }
    if tid != failed {
        return false;
    }
    let seed = sb.csum_seed();
    let geo = LogRing::from_superblock(sb);
    let next_tid = failed.wrapping_add(1);
    let mut reader = LogReader::new(dev, area, sb);
    let mut lblk = geo.next(log_block);
    let mut walked = 0u64;
    while walked < geo.capacity() {
        let Some(block) = reader.block(lblk).ok().map(|b| b.to_vec()) else { return false };
        let Ok(h) = BlockHeader::decode(&block) else { return false };
        if !h.has_magic() || h.sequence != next_tid {
            return false;
        }
        lblk = geo.next(lblk);
        walked += 1;
        match h.blocktype {
            BLOCKTYPE_DESCRIPTOR => {
                if !verify_block_tail(&block, &f, seed) {
                    return false;
                }
                let n = parse_tags(&block, &f).len() as u64;
                lblk = geo.advance(lblk, n);
                walked += n;
            }
            BLOCKTYPE_REVOKE => {
                if !verify_block_tail(&block, &f, seed) {
                    return false;
                }
            }
            BLOCKTYPE_COMMIT => return CommitBlock::verify_csum(&block, &f, seed),
            _ => return false,
        }
    }
    false
}

/// Why a damaged journal cannot be replayed whole, in one line.
pub(crate) fn damage_summary(failed_commit: Option<u32>, bad: &[BadLogBlock]) -> String {
    let mut why = Vec::new();
    if let Some(t) = failed_commit {
        why.push(format!("transaction {t} failed its commit block checksum"));
    }
    if let Some(b) = bad.first() {
        let what = match b.reason {
            BadBlockReason::ChecksumMismatch => "fails its tag checksum".to_string(),
            BadBlockReason::OutOfRange => "names a home block beyond the device".to_string(),
        };
        let more = if bad.len() > 1 { format!(" ({} such blocks in all)", bad.len()) } else { String::new() };
        why.push(format!(
            "transaction {}: log block {} for home block {} {what}{more}",
            b.tid, b.log_block, b.home_block
        ));
    }
    why.join("; ")
}

fn recover_with(dev: &dyn BlockDevice, area: &JournalArea, strict: bool) -> JResult<RecoveryReport> {
    let sb = read_superblock(dev, area)?;
    if sb.s_feature_incompat & crate::superblock::INCOMPAT_CJFS_LOGS != 0 {
        // Replaying this log alone could replay an older copy of a block over the newer one
        // another log holds, or a transaction whose chained partner never committed.
        return Err(JournalError::Incompatible(
            "journal superblock has cjfs_logs set: its extra logs must be recovered with it \
             (order_graph::recover_logs, or `cjfs recover`)"
                .into(),
        ));
    }
    let scan = scan_log(dev, area, &sb)?;
    if !scan.needed {
        if sb.s_feature_incompat & INCOMPAT_CJFS_OSUM != 0 {
            // An empty log needs no check: the private bit goes, so stock tools accept it.
            let mut new_sb = sb.clone();
            new_sb.s_feature_incompat &= !INCOMPAT_CJFS_OSUM;
            new_sb.osum_confirmed = 0;
            write_superblock(dev, area, &new_sb, false)?;
            dev.flush()?;
        }
        return Ok(RecoveryReport::nothing(sb.s_sequence));
    }
    let d = decide(dev, area, &scan)?;
    let followed = scan.failed_commit.is_some_and(|t| committed_after(dev, area, &sb, &scan, t));
    if strict && (followed || !d.bad_blocks.is_empty()) {
        let lost = scan.failed_commit.filter(|_| followed);
        return Err(JournalError::Damaged(damage_summary(lost, &d.bad_blocks)));
    }

    let mut written = 0u64;
    for_each_batch(dev, area, &sb, &d.winners, |batch| write_home(dev, batch, &mut written))?;
    dev.flush()?;

    let next_tid = scan.end_tid.wrapping_add(1);
    let mut new_sb = sb.clone();
    new_sb.s_start = 0;
    new_sb.s_sequence = next_tid;
    // The log is empty: nothing left for stock tools to replay unchecked.
    new_sb.s_feature_incompat &= !INCOMPAT_CJFS_OSUM;
    new_sb.osum_confirmed = 0;
    write_superblock(dev, area, &new_sb, false)?;
    dev.flush()?;

    Ok(RecoveryReport {
        needed: true,
        start_tid: scan.start_tid,
        end_tid: next_tid,
        transactions: scan.transaction_count(),
        blocks_replayed: d.replays,
        blocks_written: written,
        blocks_revoked: d.revoke_hits,
        revoke_records: d.revoke_records,
        failed_commit: scan.failed_commit,
        failed_commit_followed: followed,
        bad_blocks: d.bad_blocks,
        stop: scan.stop,
        discarded: 0,
        logs_replayed: 1,
    })
}

/// Write a batch of `(home block, image)` (sorted by block) home, merging contiguous runs,
/// and wait; counts the blocks in `written`.
pub(crate) fn write_home(
    dev: &dyn BlockDevice,
    batch: Vec<(u64, BlockBuf)>,
    written: &mut u64,
) -> JResult<()> {
    let tag = WriteTag::kind(BlockKind::Recovery);
    let mut tickets = Vec::new();
    let mut run: Option<WriteRequest> = None;
    for (home, buf) in batch {
        *written += 1;
        match run.as_mut() {
            Some(r) if r.block + r.bufs.len() as u64 == home => {
                r.bufs.push(buf);
                continue;
            }
            _ => {}
        }
        if let Some(r) = run.replace(WriteRequest { block: home, bufs: vec![buf], tag, fua: false }) {
            tickets.push(dev.submit(r)?);
        }
    }
    if let Some(r) = run {
        tickets.push(dev.submit(r)?);
    }
    wait_all(tickets)?;
    Ok(())
}

/// An in-memory block device for this crate's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::atomic::{AtomicU64, Ordering};

    use cjfs_blockdev::{BlockDevice, DevError, DevResult, DeviceCaps, DeviceStats, IoTicket, WriteRequest};
    use parking_lot::Mutex;

    /// The test devices' block size.
    pub(crate) const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;

    /// Blocks in a vector; writes are immediately durable.
    pub(crate) struct MemDev {
        blocks: Mutex<Vec<[u8; BLOCK_SIZE]>>,
        flushes: AtomicU64,
        writes: AtomicU64,
    }

    impl MemDev {
        pub(crate) fn new(n: u64) -> Self {
            MemDev {
                blocks: Mutex::new(vec![[0u8; BLOCK_SIZE]; n as usize]),
                flushes: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            }
        }
        pub(crate) fn poke(&self, block: u64, data: &[u8]) {
            self.blocks.lock()[block as usize].copy_from_slice(data);
        }
        pub(crate) fn peek(&self, block: u64) -> [u8; BLOCK_SIZE] {
            self.blocks.lock()[block as usize]
        }
        pub(crate) fn flushes(&self) -> u64 {
            self.flushes.load(Ordering::Relaxed)
        }
        pub(crate) fn writes(&self) -> u64 {
            self.writes.load(Ordering::Relaxed)
        }
        pub(crate) fn snapshot(&self) -> Vec<[u8; BLOCK_SIZE]> {
            self.blocks.lock().clone()
        }
    }

    impl BlockDevice for MemDev {
        fn block_size(&self) -> usize {
            BLOCK_SIZE
        }
        fn num_blocks(&self) -> u64 {
            self.blocks.lock().len() as u64
        }
        fn caps(&self) -> DeviceCaps {
            DeviceCaps { barrier: false, volatile_cache: false, fua: true, queued_flush: false }
        }
        fn describe(&self) -> String {
            "test memdev".into()
        }
        fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
            if buf.len() / BLOCK_SIZE * BLOCK_SIZE != buf.len() {
                return Err(DevError::BadLength(buf.len()));
            }
            let blocks = self.blocks.lock();
            let count = (buf.len() / BLOCK_SIZE) as u64;
            if block + count > blocks.len() as u64 {
                return Err(DevError::OutOfRange { block, count, num_blocks: blocks.len() as u64 });
            }
            for (i, dst) in buf.chunks_mut(BLOCK_SIZE).enumerate() {
                dst.copy_from_slice(&blocks[block as usize + i]);
            }
            Ok(())
        }
        fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
            let mut blocks = self.blocks.lock();
            let count = req.bufs.len() as u64;
            if req.block + count > blocks.len() as u64 {
                return Err(DevError::OutOfRange {
                    block: req.block,
                    count,
                    num_blocks: blocks.len() as u64,
                });
            }
            for (i, b) in req.bufs.iter().enumerate() {
                blocks[req.block as usize + i].copy_from_slice(b);
            }
            self.writes.fetch_add(1, Ordering::Relaxed);
            Ok(IoTicket::done(Ok(())))
        }
        fn flush(&self) -> DevResult<()> {
            self.flushes.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn barrier(&self) -> DevResult<()> {
            Err(DevError::Unsupported("barrier"))
        }
        fn stats(&self) -> DeviceStats {
            DeviceStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;
    use super::test_support::MemDev;
    use super::*;
    use crate::checksum::{crc32c, csum_seed};
    use crate::commit_block::COMMIT_SEC_OFFSET;
    use crate::descriptor::{BLOCK_TAIL_SIZE, DescriptorBuilder, JBD2_MAGIC, make_tag, rd_be32, wr_be32};
    use crate::revoke_block::RevokeBuilder;
    use crate::superblock::{INCOMPAT_ASYNC_COMMIT, format_journal};

    const UUID: [u8; 16] = *b"cjfs-journal-uid";
    /// Journal area: device blocks 1000..1000+LOG_LEN.
    const AREA_START: u64 = 1000;
    const LOG_LEN: u64 = 64;
    const DEV_BLOCKS: u64 = 1100;

    /// Builds journals by hand on a MemDev.
    struct Writer<'a> {
        dev: &'a MemDev,
        area: JournalArea,
        sb: JournalSuperblock,
        f: JournalFeatures,
        seed: u32,
        /// Next log block to write.
        pos: u64,
        time: u64,
    }

    impl<'a> Writer<'a> {
        fn new(dev: &'a MemDev, csum_v3: bool) -> Self {
            let area = JournalArea::contiguous(AREA_START, LOG_LEN);
            let sb = format_journal(dev, &area, UUID, csum_v3).expect("format");
            let f = sb.features();
            Writer { dev, area, seed: csum_seed(&UUID), f, pos: 1, sb, time: 1_000 }
        }
        fn geo(&self) -> LogRing {
            LogRing::from_superblock(&self.sb)
        }
        fn put(&mut self, data: &[u8]) -> u64 {
            let at = self.pos;
            self.dev.poke(self.area.map(at).expect("map"), data);
            self.pos = self.geo().next(self.pos);
            at
        }
        /// Mark the log as starting at `start` with `seq`.
        fn set_start(&mut self, start: u64, seq: u32) {
            self.sb.s_start = start as u32;
            self.sb.s_sequence = seq;
            self.dev.poke(AREA_START, &self.sb.encode());
        }
        /// Write transaction `tid`: revokes, then descriptor + blocks; commit if `commit`.
        /// Returns the log block of the commit (or where it would be).
        fn tx(&mut self, tid: u32, blocks: &[(u64, [u8; BLOCK_SIZE])], revokes: &[u64], commit: bool) -> u64 {
            if !revokes.is_empty() {
                let mut rb = RevokeBuilder::new(tid, self.f, UUID, BLOCK_SIZE);
                for &r in revokes {
                    rb.push(r);
                }
                for b in rb.finish() {
                    self.put(&b);
                }
            }
            let mut rest = blocks;
            while !rest.is_empty() {
                let mut db = DescriptorBuilder::new(tid, self.f, UUID, BLOCK_SIZE);
                let mut datas = Vec::new();
                let mut n = 0;
                for (home, data) in rest {
                    let mut d = *data;
                    let tag = make_tag(*home, &mut d, tid, &self.f, self.seed);
                    if !db.try_push(tag) {
                        break;
                    }
                    datas.push(d);
                    n += 1;
                }
                rest = &rest[n..];
                let desc = db.finish();
                self.put(&desc);
                for d in &datas {
                    self.put(d);
                }
            }
            self.time += 10;
            let c = CommitBlock::new(tid, self.time, 0).encode(&self.f, self.seed, BLOCK_SIZE);
            if commit { self.put(&c) } else { self.pos }
        }
    }

    fn pattern(seed: u8) -> [u8; BLOCK_SIZE] {
        let mut b = [0u8; BLOCK_SIZE];
        for (i, x) in b.iter_mut().enumerate() {
            *x = seed.wrapping_add((i % 251) as u8);
        }
        b
    }

    fn read_sb(dev: &MemDev) -> JournalSuperblock {
        JournalSuperblock::decode(&dev.peek(AREA_START), LOG_LEN).expect("sb")
    }

    #[test]
    fn tid_compare_wraps() {
        assert!(tid_gt(1, 0));
        assert!(tid_gt(0, u32::MAX));
        assert!(!tid_gt(5, 5));
        assert!(tid_geq(5, 5));
        assert!(!tid_geq(u32::MAX, 0));
    }

    #[test]
    fn geometry_wraps() {
        let sb = JournalSuperblock::new_v2(10, UUID, true);
        let g = LogRing::from_superblock(&sb);
        assert_eq!(g.capacity(), 9);
        assert_eq!(g.next(8), 9);
        assert_eq!(g.next(9), 1);
        assert_eq!(g.advance(8, 3), 2);
        assert_eq!(g.advance(3, 9), 3);
        assert_eq!(g.advance(3, 20), 5);
        assert_eq!(g.distance(8, 2), 3);
        assert_eq!(g.distance(2, 8), 6);
    }

    #[test]
    fn clean_journal_needs_nothing() {
        let dev = MemDev::new(DEV_BLOCKS);
        let w = Writer::new(&dev, true);
        let before = dev.snapshot();
        let writes = dev.writes();
        let r = recover(&dev, &w.area).expect("recover");
        assert!(!r.needed);
        assert_eq!(dev.writes(), writes);
        assert_eq!(r.end_tid, 2);
        assert_eq!(dev.snapshot(), before);
    }

    #[test]
    fn one_committed_transaction() {
        for csum in [true, false] {
            let dev = MemDev::new(DEV_BLOCKS);
            let mut w = Writer::new(&dev, csum);
            let mut magic_block = pattern(9);
            magic_block[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
            w.tx(5, &[(10, pattern(1)), (11, pattern(2)), (40, magic_block)], &[], true);
            w.set_start(1, 5);

            let s = scan(&dev, &w.area).expect("scan");
            assert!(s.needed);
            assert_eq!((s.start_tid, s.end_tid), (5, 6));
            assert_eq!(s.transactions.len(), 1);
            assert_eq!(s.transactions[0].data_blocks, 3);
            assert_eq!(s.transactions[0].commit_block, 5);
            assert_eq!(s.head_block, 6);
            assert_eq!(s.stop, ScanStop::NoMagic { log_block: 6 });

            let plan = plan_replay(&dev, &w.area).expect("plan");
            let homes: Vec<u64> = plan.writes.iter().map(|(h, _)| *h).collect();
            assert_eq!(homes, vec![10, 11, 40]);
            assert_eq!(dev.peek(10), [0u8; BLOCK_SIZE], "plan must not write");

            let r = recover(&dev, &w.area).expect("recover");
            assert!(r.needed && !r.damaged());
            assert_eq!(r.transactions, 1);
            assert_eq!(r.blocks_replayed, 3);
            assert_eq!(r.blocks_written, 3);
            assert_eq!(r.end_tid, 7);
            assert_eq!(dev.peek(10), pattern(1));
            assert_eq!(dev.peek(11), pattern(2));
            assert_eq!(dev.peek(40), magic_block, "escaped block restored");
            let sb = read_sb(&dev);
            assert_eq!(sb.s_start, 0);
            assert_eq!(sb.s_sequence, 7);
            assert!(dev.flushes() >= 2);
        }
    }

    #[test]
    fn uncommitted_transaction_ignored() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1))], &[], true);
        w.tx(2, &[(10, pattern(2)), (12, pattern(3))], &[], false);
        w.set_start(1, 1);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 1);
        assert_eq!(dev.peek(10), pattern(1));
        assert_eq!(dev.peek(12), [0u8; BLOCK_SIZE]);
        assert_eq!(read_sb(&dev).s_sequence, 3);
    }

    #[test]
    fn revoke_suppresses_older_not_newer() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1)), (20, pattern(2))], &[], true);
        // tx 2 revokes 10 and 20; tx 3 logs 20 again (newer than the revoke).
        w.tx(2, &[(30, pattern(3))], &[10, 20], true);
        w.tx(3, &[(20, pattern(4))], &[], true);
        w.set_start(1, 1);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 3);
        assert_eq!(r.blocks_revoked, 2);
        assert_eq!(r.revoke_records, 2);
        assert_eq!(dev.peek(10), [0u8; BLOCK_SIZE], "revoked by a later transaction");
        assert_eq!(dev.peek(20), pattern(4), "logged after the revoke");
        assert_eq!(dev.peek(30), pattern(3));
    }

    #[test]
    fn revoke_in_same_transaction_suppresses_its_block() {
        // A revoke record with tid == the block's tid revokes it too (tid >= block tid).
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, false);
        w.tx(4, &[(10, pattern(1)), (11, pattern(2))], &[10], true);
        w.set_start(1, 4);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.blocks_revoked, 1);
        assert_eq!(dev.peek(10), [0u8; BLOCK_SIZE]);
        assert_eq!(dev.peek(11), pattern(2));
    }

    #[test]
    fn later_copy_wins() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1))], &[], true);
        w.tx(2, &[(10, pattern(2))], &[], true);
        w.set_start(1, 1);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.blocks_replayed, 2);
        assert_eq!(r.blocks_written, 1);
        assert_eq!(dev.peek(10), pattern(2));
    }

    #[test]
    fn wraps_around_the_end_of_the_area() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        // An old, already checkpointed transaction right after where tx 11 will end.
        w.pos = 9;
        w.tx(7, &[(50, pattern(50))], &[], true);
        // The live log starts near the end: tx 10 at 58..62, tx 11 wraps.
        w.pos = 58;
        let start = w.pos;
        let blocks10: Vec<(u64, [u8; BLOCK_SIZE])> =
            (0..3).map(|i| (100 + i, pattern(10 + i as u8))).collect();
        w.tx(10, &blocks10, &[], true);
        let blocks11: Vec<(u64, [u8; BLOCK_SIZE])> =
            (0..6).map(|i| (200 + i, pattern(20 + i as u8))).collect();
        let commit = w.tx(11, &blocks11, &[100], true);
        assert!(commit < start, "transaction 11 must wrap");
        w.set_start(start, 10);
        let s = scan(&dev, &w.area).expect("scan");
        assert_eq!(s.transaction_count(), 2);
        assert!(matches!(s.stop, ScanStop::SequenceMismatch { found: 7, expected: 12, .. }), "{:?}", s.stop);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 2);
        assert_eq!(dev.peek(100), [0u8; BLOCK_SIZE], "revoked");
        assert_eq!(dev.peek(101), pattern(11));
        for i in 0..6 {
            assert_eq!(dev.peek(200 + i), pattern(20 + i as u8));
        }
        assert_eq!(dev.peek(50), [0u8; BLOCK_SIZE], "old transaction not replayed");
        assert_eq!(read_sb(&dev).s_sequence, 13);
    }

    #[test]
    fn torn_commit_block_stops_replay() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1))], &[], true);
        let c2 = w.tx(2, &[(11, pattern(2))], &[], true);
        w.tx(3, &[(12, pattern(3))], &[], true);
        // Tear the commit of tx 2: its second half never reached the disk.
        let dblk = w.area.map(c2).expect("map");
        let mut b = dev.peek(dblk);
        b[COMMIT_SEC_OFFSET..].fill(0xAA);
        dev.poke(dblk, &b);
        w.set_start(1, 1);
        let s = scan(&dev, &w.area).expect("scan");
        assert_eq!(s.end_tid, 2);
        assert_eq!(s.failed_commit, Some(2));
        assert!(matches!(s.stop, ScanStop::CommitChecksum { tid: 2, .. }));
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 1);
        assert_eq!(r.failed_commit, Some(2));
        assert!(r.damaged());
        assert_eq!(dev.peek(10), pattern(1));
        assert_eq!(dev.peek(11), [0u8; BLOCK_SIZE]);
        assert_eq!(dev.peek(12), [0u8; BLOCK_SIZE]);
        let sb = read_sb(&dev);
        assert_eq!((sb.s_start, sb.s_sequence), (0, 3));
    }

    #[test]
    fn strict_recovery_tells_a_torn_tail_from_lost_work() {
        // The next transaction: absent, its log blocks written but not its commit block
        // (dual-thread commit writes them while the previous commit block is in flight, so
        // a crash can leave that too), or committed.
        for (next, followed) in [(None, false), (Some(false), false), (Some(true), true)] {
            let dev = MemDev::new(DEV_BLOCKS);
            let mut w = Writer::new(&dev, true);
            w.tx(1, &[(10, pattern(1))], &[], true);
            let c2 = w.tx(2, &[(11, pattern(2))], &[], true);
            if let Some(commit) = next {
                w.tx(3, &[(12, pattern(3))], &[], commit);
            }
            let dblk = w.area.map(c2).expect("map");
            let mut b = dev.peek(dblk);
            b[COMMIT_SEC_OFFSET..].fill(0xAA);
            dev.poke(dblk, &b);
            w.set_start(1, 1);
            let before = dev.snapshot();
            match recover_strict(&dev, &w.area) {
                // The torn commit block was the log's last write: a crash, not damage.
                Ok(r) => {
                    assert!(!followed, "lost work replayed: {r:?}");
                    assert_eq!((r.transactions, r.failed_commit), (1, Some(2)));
                    assert!(!r.damaged());
                    assert_eq!(dev.peek(10), pattern(1));
                }
                // Transaction 3 committed behind it: refused, and nothing written.
                Err(JournalError::Damaged(m)) => {
                    assert!(followed, "a torn tail refused: {m}");
                    assert!(m.contains("transaction 2"), "{m}");
                    assert!(dev.snapshot() == before, "strict recovery wrote before refusing");
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn stale_commit_with_bad_checksum_ends_log_quietly() {
        // A commit with a bad checksum and an older time than the previous commit is stale.
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1))], &[], true);
        let c2 = w.tx(2, &[(11, pattern(2))], &[], true);
        let dblk = w.area.map(c2).expect("map");
        let mut b = dev.peek(dblk);
        crate::descriptor::wr_be64(&mut b, COMMIT_SEC_OFFSET, 5); // older than tx 1's
        dev.poke(dblk, &b); // checksum now wrong
        w.set_start(1, 1);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 1);
        assert_eq!(r.failed_commit, None);
        assert!(matches!(r.stop, ScanStop::StaleTransaction { tid: 2, .. }));
        assert_eq!(dev.peek(11), [0u8; BLOCK_SIZE]);
    }

    #[test]
    fn async_commit_failure_continues_scan_but_not_replay() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.sb.s_feature_incompat |= INCOMPAT_ASYNC_COMMIT;
        w.f = w.sb.features();
        w.tx(1, &[(10, pattern(1))], &[], true);
        let c2 = w.tx(2, &[(11, pattern(2))], &[], true);
        w.tx(3, &[(12, pattern(3))], &[], true);
        let dblk = w.area.map(c2).expect("map");
        let mut b = dev.peek(dblk);
        b[100] = 1;
        dev.poke(dblk, &b);
        w.set_start(1, 1);
        let s = scan(&dev, &w.area).expect("scan");
        assert_eq!(s.end_tid, 2);
        assert_eq!(s.failed_commit, None);
        assert_eq!(s.txs.len(), 3, "scan went past the failed commit");
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 1);
        assert_eq!(dev.peek(11), [0u8; BLOCK_SIZE]);
        assert_eq!(dev.peek(12), [0u8; BLOCK_SIZE]);
    }

    #[test]
    fn bad_descriptor_checksum_is_fatal_without_writes() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1))], &[], true);
        let d2 = w.pos;
        w.tx(2, &[(11, pattern(2))], &[], true);
        let dblk = w.area.map(d2).expect("map");
        let mut b = dev.peek(dblk);
        b[BLOCK_SIZE - BLOCK_TAIL_SIZE - 1] ^= 1;
        dev.poke(dblk, &b);
        w.set_start(1, 1);
        let before = dev.snapshot();
        match recover(&dev, &w.area) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("transaction 2"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(dev.snapshot(), before, "nothing written");
        assert!(scan(&dev, &w.area).is_err());
    }

    #[test]
    fn bad_descriptor_without_commit_is_just_incomplete() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1))], &[], true);
        let d2 = w.pos;
        w.tx(2, &[(11, pattern(2))], &[], false);
        let dblk = w.area.map(d2).expect("map");
        let mut b = dev.peek(dblk);
        b[200] ^= 1;
        dev.poke(dblk, &b);
        w.set_start(1, 1);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 1);
        assert_eq!(dev.peek(10), pattern(1));
    }

    #[test]
    fn data_checksum_mismatch_skips_only_that_block() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1)), (11, pattern(2))], &[], true);
        w.tx(2, &[(10, pattern(3))], &[], true);
        // Corrupt tx 2's copy of block 10 (log block: 1 desc + 2 data + commit, then desc, data).
        let data_lblk = 6;
        let dblk = w.area.map(data_lblk).expect("map");
        let mut b = dev.peek(dblk);
        b[7] ^= 0xFF;
        dev.poke(dblk, &b);
        w.set_start(1, 1);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.transactions, 2);
        assert_eq!(r.bad_blocks.len(), 1);
        assert_eq!(r.bad_blocks[0].home_block, 10);
        assert_eq!(r.bad_blocks[0].tid, 2);
        assert_eq!(r.bad_blocks[0].reason, BadBlockReason::ChecksumMismatch);
        assert!(r.damaged());
        assert_eq!(dev.peek(10), pattern(1), "previous good copy stays");
        assert_eq!(dev.peek(11), pattern(2));
        assert_eq!(read_sb(&dev).s_start, 0);
    }

    #[test]
    fn out_of_range_home_block_reported() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, false);
        w.tx(1, &[(DEV_BLOCKS + 5, pattern(1)), (12, pattern(2))], &[], true);
        w.set_start(1, 1);
        let r = recover(&dev, &w.area).expect("recover");
        assert_eq!(r.bad_blocks.len(), 1);
        assert_eq!(r.bad_blocks[0].reason, BadBlockReason::OutOfRange);
        assert_eq!(dev.peek(12), pattern(2));
    }

    #[test]
    fn malformed_revoke_block_is_fatal() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, false);
        let r1 = w.pos;
        w.tx(1, &[(10, pattern(1))], &[99], true);
        let dblk = w.area.map(r1).expect("map");
        let mut b = dev.peek(dblk);
        wr_be32(&mut b, crate::revoke_block::REVOKE_COUNT_OFFSET, 5000);
        dev.poke(dblk, &b);
        w.set_start(1, 1);
        let before = dev.snapshot();
        assert!(matches!(recover(&dev, &w.area), Err(JournalError::Corrupt(_))));
        assert_eq!(dev.snapshot(), before);
    }

    #[test]
    fn many_blocks_multiple_descriptors_and_revoke_blocks() {
        let dev = MemDev::new(4000);
        let area = JournalArea::new([(3000, 300), (3500, 400)]);
        let sb = format_journal(&dev, &area, UUID, true).expect("format");
        let f = sb.features();
        let seed = csum_seed(&UUID);
        let geo = LogRing::from_superblock(&sb);
        let mut pos = 1u64;
        let put = |d: &[u8], pos: &mut u64| {
            dev.poke(area.map(*pos).expect("map"), d);
            *pos = geo.next(*pos);
        };
        // tx 1: 300 blocks (2 descriptors) across the two extents.
        let mut db = DescriptorBuilder::new(1, f, UUID, BLOCK_SIZE);
        let mut pending: Vec<[u8; BLOCK_SIZE]> = Vec::new();
        for i in 0..300u64 {
            let mut d = pattern(i as u8);
            let t = make_tag(10 + i, &mut d, 1, &f, seed);
            if !db.try_push(t) {
                put(&db.finish(), &mut pos);
                for p in pending.drain(..) {
                    put(&p, &mut pos);
                }
                db = DescriptorBuilder::new(1, f, UUID, BLOCK_SIZE);
                assert!(db.try_push(t));
            }
            pending.push(d);
        }
        put(&db.finish(), &mut pos);
        for p in pending.drain(..) {
            put(&p, &mut pos);
        }
        put(&CommitBlock::new(1, 10, 0).encode(&f, seed, BLOCK_SIZE), &mut pos);
        // tx 2: revoke 600 blocks (two revoke blocks): 0..100 and 500..1000.
        let mut rb = RevokeBuilder::new(2, f, UUID, BLOCK_SIZE);
        for b in (0..100u64).chain(500..1000) {
            rb.push(b);
        }
        for b in rb.finish() {
            put(&b, &mut pos);
        }
        put(&CommitBlock::new(2, 11, 0).encode(&f, seed, BLOCK_SIZE), &mut pos);
        let mut sb2 = sb.clone();
        sb2.s_start = 1;
        sb2.s_sequence = 1;
        dev.poke(3000, &sb2.encode());
        let r = recover(&dev, &area).expect("recover");
        assert_eq!(r.transactions, 2);
        assert_eq!(r.revoke_records, 600);
        assert_eq!(r.blocks_revoked, 90);
        assert_eq!(r.blocks_written, 210);
        assert_eq!(dev.peek(99), [0u8; BLOCK_SIZE]);
        for i in 90..300u64 {
            assert_eq!(dev.peek(10 + i), pattern(i as u8), "block {}", 10 + i);
        }
    }

    #[test]
    fn recovery_twice_equals_once_and_interrupted_recovery_repeats() {
        let dev = MemDev::new(DEV_BLOCKS);
        let mut w = Writer::new(&dev, true);
        w.tx(1, &[(10, pattern(1)), (11, pattern(2))], &[], true);
        w.tx(2, &[(12, pattern(3))], &[10], true);
        w.set_start(1, 1);
        let initial = dev.snapshot();

        recover(&dev, &w.area).expect("first");
        let once = dev.snapshot();
        let again = recover(&dev, &w.area).expect("second");
        assert!(!again.needed);
        assert_eq!(dev.snapshot(), once);

        // Crash after replaying but before the superblock update: replay again.
        let dev2 = MemDev::new(DEV_BLOCKS);
        for (i, b) in initial.iter().enumerate() {
            dev2.poke(i as u64, b);
        }
        let plan = plan_replay(&dev2, &w.area).expect("plan");
        for (home, data) in &plan.writes {
            dev2.poke(*home, data);
        }
        // Home block 11 also partially scribbled by the crash.
        dev2.poke(11, &pattern(99));
        recover(&dev2, &w.area).expect("after crash");
        assert_eq!(dev2.snapshot(), once);
    }

    #[test]
    fn v1_compat_checksum_journal() {
        use crate::superblock::COMPAT_CHECKSUM;
        let dev = MemDev::new(DEV_BLOCKS);
        let area = JournalArea::contiguous(AREA_START, LOG_LEN);
        let f = JournalFeatures::new(COMPAT_CHECKSUM, crate::superblock::INCOMPAT_REVOKE, 0);
        let mut sb = JournalSuperblock::new_v2_with_features(LOG_LEN as u32, UUID, f);
        let geo = LogRing::from_superblock(&sb);
        let mut pos = 1;
        let put = |d: &[u8], pos: &mut u64| {
            dev.poke(area.map(*pos).expect("map"), d);
            *pos = geo.next(*pos);
        };
        let write_tx = |tid: u32, home: u64, p: u8, good: bool, pos: &mut u64| {
            let mut db = DescriptorBuilder::new(tid, f, UUID, BLOCK_SIZE);
            let mut d = pattern(p);
            assert!(db.try_push(make_tag(home, &mut d, tid, &f, 0)));
            let desc = db.finish();
            let mut crc = crc32_be(!0, &desc);
            crc = crc32_be(crc, &d);
            if !good {
                crc ^= 1;
            }
            put(&desc, pos);
            put(&d, pos);
            put(
                &CommitBlock::new(tid, 100 + u64::from(tid), 0)
                    .with_v1_checksum(crc)
                    .encode(&f, 0, BLOCK_SIZE),
                pos,
            );
        };
        write_tx(1, 10, 1, true, &mut pos);
        write_tx(2, 11, 2, false, &mut pos);
        sb.s_start = 1;
        dev.poke(AREA_START, &sb.encode());
        let r = recover(&dev, &area).expect("recover");
        assert_eq!(r.transactions, 1);
        assert_eq!(r.failed_commit, Some(2));
        assert_eq!(dev.peek(10), pattern(1));
        assert_eq!(dev.peek(11), [0u8; BLOCK_SIZE]);
    }

    #[test]
    fn kernel_style_csum2_journal_replays() {
        // Older layout: csum v2 (16-bit tag checksums), 32-bit block numbers.
        let dev = MemDev::new(DEV_BLOCKS);
        let area = JournalArea::contiguous(AREA_START, LOG_LEN);
        let f = JournalFeatures::new(0, crate::superblock::INCOMPAT_CSUM_V2, 0);
        let mut sb = JournalSuperblock::new_v2_with_features(LOG_LEN as u32, UUID, f);
        let seed = csum_seed(&UUID);
        let mut db = DescriptorBuilder::new(3, f, UUID, BLOCK_SIZE);
        let mut d = pattern(7);
        let t = make_tag(33, &mut d, 3, &f, seed);
        assert!(t.checksum <= 0xFFFF);
        assert!(db.try_push(t));
        dev.poke(AREA_START + 1, &db.finish());
        dev.poke(AREA_START + 2, &d);
        dev.poke(AREA_START + 3, &CommitBlock::new(3, 1, 0).encode(&f, seed, BLOCK_SIZE));
        sb.s_start = 1;
        sb.s_sequence = 3;
        dev.poke(AREA_START, &sb.encode());
        let r = recover(&dev, &area).expect("recover");
        assert_eq!(r.blocks_written, 1);
        assert_eq!(dev.peek(33), pattern(7));
        // Sanity: the seed is the raw crc32c of the uuid.
        assert_eq!(seed, crc32c(!0, &UUID));
        assert_eq!(rd_be32(&dev.peek(AREA_START), 0), JBD2_MAGIC);
    }

    #[test]
    fn garbage_log_never_panics() {
        // Random-ish bytes with valid-looking headers must not panic or loop.
        let dev = MemDev::new(DEV_BLOCKS);
        let w = Writer::new(&dev, true);
        let mut x: u32 = 12345;
        for l in 1..LOG_LEN {
            let mut b = [0u8; BLOCK_SIZE];
            for byte in b.iter_mut() {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                *byte = (x >> 16) as u8;
            }
            BlockHeader::new(1 + (l as u32 % 5), 1).encode_into(&mut b);
            dev.poke(AREA_START + l, &b);
        }
        let mut sb = w.sb.clone();
        sb.s_start = 1;
        dev.poke(AREA_START, &sb.encode());
        let _ = scan(&dev, &w.area);
        let _ = recover(&dev, &w.area);
        // Every block a revoke block of tid 1 forever: the walk must end.
        dev.poke(AREA_START, &sb.encode());
        for l in 1..LOG_LEN {
            let mut rb = RevokeBuilder::new(1, w.f, UUID, BLOCK_SIZE);
            rb.push(l);
            dev.poke(AREA_START + l, &rb.finish()[0]);
        }
        let s = scan(&dev, &w.area).expect("scan");
        assert_eq!(s.stop, ScanStop::LogExhausted);
        assert_eq!(s.transaction_count(), 0);
    }
}
