//! Recovery of a journal with several logs by order graph (Z-Journal §3.4, with the notes'
//! rules R0–R7 where the paper is silent; the authors' released code replays each log on
//! its own and never reads the marks).
//!
//! 1. **Scan** every log as JBD2 does (`recovery::scan_log`): its committed transactions
//!    `[L, E)`, each with the chain marks and stamp of its commit block.
//! 2. **Validity**, the greatest fixpoint: every committed transaction starts valid; one is
//!    invalidated while its predecessor in its log is invalid, or a mark names a transaction
//!    that is invalid or not committed (`tid >= E`). A mark below a log's start (`tid < L`)
//!    is satisfied: a log's tail only passes valid, checkpointed transactions. A
//!    bi-directional pair that both committed stays valid; the valid set of each log is a
//!    prefix.
//! 3. **End each log at its first invalid transaction** by zeroing that commit block (and
//!    flushing) before anything is written home, so that recovering again after a cut —
//!    with some logs already reset — finds exactly the same valid set: a log reset first
//!    would otherwise turn marks into it into "below its start", satisfied.
//! 4. **Replay** the valid transactions of every log in stamp order (within a log stamp
//!    order is tid order); a later image of a block wins. A revoke in a valid transaction
//!    suppresses the block in every valid transaction ordered at or before it, in any log
//!    (R5: a metadata block freed in one log and reused as data through another).
//! 5. **Write home, flush, then reset every log** (`s_start = 0`), its sequence moved from
//!    the end of its valid prefix past every id its ring can hold (a log of `c` blocks holds
//!    fewer than `c` transactions), so a stale commit block left behind a zeroed one can
//!    never pass for a new transaction.
//!
//! The result does not depend on the order the logs are scanned in ([`recover_logs`] takes
//! an order for the tests that shuffle it).

use std::collections::{BTreeMap, HashMap};

use cjfs_blockdev::{BlockDevice, BlockKind, WriteRequest, WriteTag};

use crate::area::JournalArea;
use crate::commit_block::ChainMarks;
use crate::error::{JResult, JournalError};
use crate::recovery::{
    BadBlockReason, BadLogBlock, LogReader, RecoveryReport, ScanResult, Source, committed_after,
    damage_summary, for_each_batch, scan_log, tid_gt, write_home,
};
use crate::ring::LogRing;
use crate::superblock::{JournalSuperblock, read_superblock, write_superblock};

/// One log as the scan found it.
struct ScannedLog {
    sb: JournalSuperblock,
    scan: ScanResult,
    /// Per committed transaction, in log order: its chain marks (`None`: a plain commit block).
    chains: Vec<Option<ChainMarks>>,
    /// Committed transactions found valid (a prefix).
    valid: usize,
}

/// What the order graph decided, per log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogVerdict {
    /// Committed transactions in the log.
    pub committed: u32,
    /// Of them, valid (replayed).
    pub valid: u32,
}

/// Scan every log and decide validity (steps 1–2). Reads only.
fn scan_all(dev: &dyn BlockDevice, areas: &[JournalArea]) -> JResult<Vec<ScannedLog>> {
    let mut logs = areas.iter().enumerate().map(|(k, a)| scan_one(dev, a, k)).collect::<JResult<Vec<_>>>()?;
    decide_validity(&mut logs);
    Ok(logs)
}

/// Scan log `k` (in `area`): its committed transactions and their chain marks, all taken as
/// valid until [`decide_validity`].
fn scan_one(dev: &dyn BlockDevice, area: &JournalArea, k: usize) -> JResult<ScannedLog> {
    let at = |e: JournalError| match e {
        JournalError::Corrupt(m) => JournalError::Corrupt(format!("log {k}: {m}")),
        other => other,
    };
    let sb = read_superblock(dev, area).map_err(at)?;
    let scan = scan_log(dev, area, &sb).map_err(at)?;
    let mut reader = LogReader::new(dev, area, &sb);
    let mut chains = Vec::new();
    for tx in scan.replayable() {
        let block = reader.block(tx.commit_block).map_err(at)?;
        chains.push(
            ChainMarks::decode(block)
                .map_err(|e| at(JournalError::Corrupt(format!("transaction {}: {e}", tx.tid))))?,
        );
    }
    let valid = chains.len();
    Ok(ScannedLog { sb, scan, chains, valid })
}

/// The greatest fixpoint of validity over every log's committed transactions.
fn decide_validity(logs: &mut [ScannedLog]) {
    loop {
        let bounds: Vec<(u32, u32)> =
            logs.iter().map(|l| (l.scan.start_tid, l.scan.start_tid.wrapping_add(l.valid as u32))).collect();
        let satisfied = |log: u16, tid: u32| match bounds.get(usize::from(log)) {
            // Below the log's start: checkpointed, so it was valid.
            Some(&(start, valid_end)) => tid_gt(start, tid) || tid_gt(valid_end, tid),
            None => false,
        };
        let mut changed = false;
        for l in logs.iter_mut() {
            let cut = l.chains[..l.valid].iter().position(|c| {
                c.as_ref().is_some_and(|c| c.marks.iter().any(|&(log, tid)| !satisfied(log, tid)))
            });
            if let Some(i) = cut {
                l.valid = i;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// What recovering `areas` would decide, per log, without writing (for `cjfs info`, tests).
pub fn verdicts(dev: &dyn BlockDevice, areas: &[JournalArea]) -> JResult<Vec<LogVerdict>> {
    Ok(scan_all(dev, areas)?
        .iter()
        .map(|l| LogVerdict { committed: l.chains.len() as u32, valid: l.valid as u32 })
        .collect())
}

/// One valid transaction in replay order.
struct Replayed<'a> {
    log: usize,
    stamp: u64,
    tx: &'a crate::recovery::ScannedTx,
}

/// Recover the logs in `areas` (the primary journal first) as one journal; `order` is the
/// order their scans are taken in (any permutation gives the same result; `None`: table
/// order). With `strict`, a damaged log fails with [`JournalError::Damaged`] before
/// anything is written (see `recovery::recover_strict`). The report is the primary's with
/// every log's counts added.
pub fn recover_logs(
    dev: &dyn BlockDevice,
    areas: &[JournalArea],
    strict: bool,
    order: Option<&[usize]>,
) -> JResult<RecoveryReport> {
    let identity: Vec<usize> = (0..areas.len()).collect();
    let order = order.unwrap_or(&identity);
    if order.len() != areas.len() || (0..areas.len()).any(|k| !order.contains(&k)) {
        return Err(JournalError::Corrupt(format!("scan order {order:?} is not a permutation of the logs")));
    }
    // Scan in the given order, then put the logs back in table order.
    let mut logs: Vec<Option<ScannedLog>> = (0..areas.len()).map(|_| None).collect();
    for &k in order {
        logs[k] = Some(scan_one(dev, &areas[k], k)?);
    }
    let mut logs: Vec<ScannedLog> = logs.into_iter().flatten().collect();
    decide_validity(&mut logs);
    let needed = logs.iter().any(|l| l.scan.needed);
    let report0 = &logs[0].scan;
    let mut report = RecoveryReport::nothing(report0.start_tid);
    report.needed = needed;
    if needed {
        report.stop = report0.stop.clone();
    }
    if !needed {
        return Ok(report);
    }

    // Damage (as one log's recovery judges it) is refused before anything is written.
    let mut followed = false;
    for (k, l) in logs.iter().enumerate() {
        if let Some(t) = l.scan.failed_commit {
            let f = committed_after(dev, &areas[k], &l.sb, &l.scan, t);
            followed |= f;
            if strict && f {
                return Err(JournalError::Damaged(format!("log {k}: {}", damage_summary(Some(t), &[]))));
            }
            report.failed_commit = report.failed_commit.or(Some(t));
        }
    }
    report.failed_commit_followed = followed;

    // Valid transactions in stamp order (a plain commit block, of a journal that never
    // ran several logs, orders by its log's tid alone).
    let mut order_list: Vec<Replayed<'_>> = Vec::new();
    for (k, l) in logs.iter().enumerate() {
        for (tx, c) in l.scan.replayable().zip(&l.chains).take(l.valid) {
            order_list.push(Replayed { log: k, stamp: c.as_ref().map_or(0, |c| c.stamp), tx });
        }
    }
    order_list.sort_by_key(|r| (r.stamp, r.log, r.tx.tid.wrapping_sub(logs[r.log].scan.start_tid)));
    // Revokes: block -> position of the last valid transaction revoking it.
    let mut revoked: HashMap<u64, usize> = HashMap::new();
    for (pos, r) in order_list.iter().enumerate() {
        for recs in &r.tx.revokes {
            let recs = recs.as_ref().map_err(Clone::clone)?;
            for &blk in recs {
                report.revoke_records += 1;
                revoked.insert(blk, pos);
            }
        }
    }
    let num_blocks = dev.num_blocks();
    let mut winners: Vec<BTreeMap<u64, Source>> = logs.iter().map(|_| BTreeMap::new()).collect();
    let mut owner: HashMap<u64, usize> = HashMap::new();
    let mut readers: Vec<LogReader<'_>> =
        logs.iter().zip(areas).map(|(l, a)| LogReader::new(dev, a, &l.sb)).collect();
    for (pos, r) in order_list.iter().enumerate() {
        let l = &logs[r.log];
        let f = l.sb.features();
        let seed = l.sb.csum_seed();
        let geo = LogRing::from_superblock(&l.sb);
        for desc in &r.tx.descriptors {
            for (i, tag) in desc.tags.iter().enumerate() {
                let log_block = geo.advance(desc.first_data, i as u64);
                if revoked.get(&tag.blocknr).is_some_and(|&rp| rp >= pos) {
                    report.blocks_revoked += 1;
                    continue;
                }
                let bad =
                    if f.csum_v2or3() && !tag.verify(readers[r.log].block(log_block)?, r.tx.tid, &f, seed) {
                        Some(BadBlockReason::ChecksumMismatch)
                    } else if tag.blocknr >= num_blocks {
                        Some(BadBlockReason::OutOfRange)
                    } else {
                        None
                    };
                if let Some(reason) = bad {
                    report.bad_blocks.push(BadLogBlock {
                        tid: r.tx.tid,
                        log_block,
                        home_block: tag.blocknr,
                        reason,
                    });
                    continue;
                }
                report.blocks_replayed += 1;
                if let Some(prev) = owner.insert(tag.blocknr, r.log)
                    && prev != r.log
                {
                    winners[prev].remove(&tag.blocknr);
                }
                winners[r.log].insert(tag.blocknr, Source { log_block, escaped: tag.escaped() });
            }
        }
    }
    if strict && !report.bad_blocks.is_empty() {
        return Err(JournalError::Damaged(damage_summary(None, &report.bad_blocks)));
    }

    // Step 3: end every log at its first invalid transaction, durably, before any home write.
    for (k, l) in logs.iter().enumerate() {
        if let Some(first_bad) = l.scan.replayable().nth(l.valid) {
            let blk = areas[k].map(first_bad.commit_block)?;
            let req = WriteRequest {
                block: blk,
                bufs: vec![cjfs_blockdev::zeroed_buf(dev.block_size())],
                tag: WriteTag::kind(BlockKind::Recovery),
                fua: false,
            };
            dev.submit(req)?.wait()?;
            log::info!(
                "journal log {k}: transaction {} and later are chained to transactions that did not commit; discarded",
                first_bad.tid
            );
        }
        report.discarded += (l.chains.len() - l.valid) as u32;
        report.transactions += l.valid as u32;
        report.logs_replayed += u32::from(l.scan.needed);
    }
    dev.flush()?;

    // Step 4: write home.
    let mut written = 0u64;
    for (k, l) in logs.iter().enumerate() {
        for_each_batch(dev, &areas[k], &l.sb, &winners[k], |batch| write_home(dev, batch, &mut written))?;
    }
    dev.flush()?;
    report.blocks_written = written;

    // Step 5: reset every log.
    for (k, l) in logs.iter().enumerate() {
        if !l.scan.needed {
            continue;
        }
        let capacity = LogRing::from_superblock(&l.sb).capacity() as u32;
        let mut sb = l.sb.clone();
        sb.s_start = 0;
        // From the end of the valid prefix, which a recovery cut after step 3 sees too (the
        // scan's own end moves back to it once the first invalid commit block is zeroed).
        let valid_end = l.scan.start_tid.wrapping_add(l.valid as u32);
        sb.s_sequence = valid_end.wrapping_add(1).wrapping_add(capacity);
        write_superblock(dev, &areas[k], &sb, false)?;
        if k == 0 {
            report.end_tid = sb.s_sequence;
        }
    }
    dev.flush()?;
    Ok(report)
}
