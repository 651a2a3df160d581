//! The single-I/O commit of journaling of journal (Jeong et al., "Journaling of Journal Is
//! (Almost) Free", FAST'14, §2.1): a transaction reaches the log as **one** contiguous
//! write — its revoke blocks, descriptor blocks, the escaped copies of its blocks and its
//! commit block — followed by **one** flush, instead of JBD2's log blocks → flush → commit
//! block → flush. A log that wraps splits the write in two (the kernel's block layer would
//! too); nothing else is written on the commit path.
//!
//! # Telling a torn write from a whole one
//!
//! Without a flush between the body and the commit block, a crash may keep any subset of
//! the write's sectors, the commit block without the body included. Recovery must then end
//! the log before a transaction whose blocks are not all there, and replay everything
//! before it. JBD2 has exactly one format whose torn *last* transaction the kernel and
//! `e2fsck` both treat that way: the **v1 transaction checksum** (`COMPAT_CHECKSUM`, a
//! crc32_be over the transaction's descriptor and logged blocks in the commit block) with
//! **`INCOMPAT_ASYNC_COMMIT`**: a checksum mismatch there sets `end_transaction` and ends
//! the scan cleanly (`do_one_pass` in `fs/jbd2/recovery.c`, copied into e2fsprogs'
//! `e2fsck/recovery.c`), where without `ASYNC_COMMIT` it is a failed commit (the kernel
//! refuses to mount, e2fsck marks the file system as having errors). The csum v2/v3
//! formats do not do it: their per-block checksums are checked at replay, one block at a
//! time, so a torn body replays partly and both tools report `EFSBADCRC` (see the README's
//! "Journal modes"). v1 and v2/v3 exclude each other in one journal superblock, so while a
//! single-I/O journal is open its superblock carries `COMPAT_CHECKSUM | ASYNC_COMMIT`
//! (with `REVOKE` and `64BIT` as before) and no csum v2/v3 — also on `metadata_csum` file
//! systems, whose metadata blocks keep their own checksums; it is written (and flushed)
//! before the first commit, while the log is empty, and a clean close puts the features
//! found at open back. Stock tools therefore replay a crashed single-I/O journal as they
//! replay the kernel's own `journal_async_commit` journals, with no private feature bit.
//!
//! Two holes of the v1 format are closed by how the write is laid out:
//!
//! * the v1 checksum does not cover **revoke blocks**: each carries records only in its
//!   first 512-byte sector (`RevokeBuilder::sector_atomic`), so a torn revoke block is
//!   either wholly new or wholly stale (whose old sequence number ends the log);
//! * a commit block whose type, size and checksum are all zero means "no checksum" to
//!   recovery: ours always carry the checksum.
//!
//! And one rule of ordering: a transaction's write is never issued before the previous
//! transaction's flush completed (serial commit), or, on a device with a cache barrier,
//! before a barrier behind the previous write — recovery treats a valid commit *after* a
//! torn transaction as corruption (`j_failed_commit`), so a crash must never be able to keep
//! transaction n+1 and tear transaction n.
//!
//! # Transactions with ordered data
//!
//! The checksum covers the log only, not ordered data written home, so a commit block that
//! persists before that data would replay metadata pointing at stale blocks (Jan Kara's
//! objection to `journal_async_commit` with `data=ordered`, which the kernel now refuses).
//! Here such a transaction writes its ordered data, waits for it, and flushes (the
//! `REQ_PREFLUSH` of the kernel's journal write) before its single log write; on a device
//! with a cache barrier the barrier orders the data ahead of the log instead. The classic
//! two-step commit would pay the same two flushes and one more write command (its separate
//! commit block), so the single write is kept in every transaction.
//!
//! Only data that a commit record persisting first would expose needs that order: newly
//! allocated blocks, bytes a size change uncovers, blocks whose logged image the transaction
//! revokes (`Handle::dirty_data`). When all of the transaction's ordered data overwrites
//! blocks already on disk inside the durable size (`Handle::dirty_overwrite`: SQLite
//! rewriting its WAL from the start, or its database pages), the data and the log write go
//! out together and the one flush after them makes both durable; a crash before it may keep
//! either version of an overwritten sector, as for any write not yet synced (ext4 orders
//! only newly allocated blocks).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cjfs_blockdev::{BlockBuf, BlockKind, IoTicket, WriteRequest, WriteTag};

use crate::buffer::Buffer;
use crate::error::{JResult, JournalError};
use crate::flush::FlushJob;
use crate::log_core::LogCore;
use crate::superblock::{
    COMPAT_CHECKSUM, INCOMPAT_64BIT, INCOMPAT_ASYNC_COMMIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3,
    INCOMPAT_REVOKE, JournalFeatures,
};
use crate::transaction::Transaction;

/// The journal features a single-I/O journal runs with, given those found on disk: the v1
/// transaction checksum and `ASYNC_COMMIT`, revoke and the block-number width kept, no
/// csum v2/v3 (exclusive with v1); unknown bits (none are accepted at open) are dropped.
pub fn features(found: JournalFeatures) -> JournalFeatures {
    let incompat = INCOMPAT_REVOKE | INCOMPAT_ASYNC_COMMIT | (found.incompat & INCOMPAT_64BIT);
    JournalFeatures::new(COMPAT_CHECKSUM, incompat, 0)
}

/// Whether `f` is the feature set [`features`] makes.
pub fn is_single_io(f: JournalFeatures) -> bool {
    f.compat_checksum() && f.async_commit() && !f.csum_v2or3()
}

/// The features to put back when a single-I/O journal closes cleanly, given those found at
/// open: the same, unless a crashed single-I/O journal left its own set there, whose
/// predecessor is not recorded: then cjfs' default (revoke, 64-bit, csum v3 as the
/// configuration says, what `cjfs mkfs` and mke2fs' `metadata_csum` write).
pub fn plain_features(found: JournalFeatures, csum_v3: bool) -> JournalFeatures {
    if is_single_io(found) { JournalFeatures::cjfs(csum_v3) } else { found }
}

/// Set the journal superblock's feature words (and the checksum type that goes with them)
/// in `sb`.
pub(crate) fn set_features(sb: &mut crate::superblock::JournalSuperblock, f: JournalFeatures) {
    sb.s_feature_compat = f.compat;
    sb.s_feature_incompat = (sb.s_feature_incompat
        & !(INCOMPAT_REVOKE
            | INCOMPAT_64BIT
            | INCOMPAT_ASYNC_COMMIT
            | INCOMPAT_CSUM_V2
            | INCOMPAT_CSUM_V3
            | crate::superblock::INCOMPAT_CJFS_OSUM))
        | f.incompat;
    sb.s_feature_ro_compat = f.ro_compat;
    sb.s_checksum_type = if f.csum_v2or3() { crate::superblock::CHKSUM_TYPE_CRC32C } else { 0 };
    if f.incompat & crate::superblock::INCOMPAT_CJFS_OSUM == 0 {
        sb.osum_confirmed = 0;
    }
}

/// Commit `tx` in one write: ordered data first (then a flush, or a barrier), the whole
/// transaction as one request (two where the log wraps), then the flush step (here in serial
/// mode, by the flush thread with a barrier behind the write otherwise). The caller took the
/// versions and moved the transaction to Committing.
#[allow(clippy::too_many_arguments)]
pub(crate) fn commit(
    j: &Arc<LogCore>,
    tx: &Arc<Transaction>,
    ordered: &[Arc<Buffer>],
    versions: Vec<(Arc<Buffer>, BlockBuf)>,
    revokes: &[u64],
    revoked: Vec<u64>,
    t_lock: Instant,
) -> JResult<()> {
    let bugs = crate::planted::bugs(&j.set.config);
    let barrier = j.set.config.dual_thread && j.set.config.use_barriers && j.set.dev.caps().barrier;
    let sums_on = j.set.config.ordered_sums;
    // No block another transaction's sums still cover may be written in place before that
    // transaction is confirmed (`ordered_sums.rs`).
    crate::ordered_sums::settle(&j.set, ordered, Some(tx.id()), false)?;
    // Ordered data goes home first; the log write may not persist before it does, unless
    // its commit block sums it.
    let (data_tickets, in_flight, sums) = {
        let _hw = j.set.home_write_lock.lock();
        if sums_on {
            let w = crate::ordered_sums::requests(&j.set, ordered, tx.id());
            (j.set.dev.submit_batch(w.reqs)?, w.in_flight, w.sums)
        } else {
            let w = crate::commit::ordered_requests(&j.set, ordered, Some(tx.id()));
            (j.set.dev.submit_batch(w.reqs)?, w.in_flight, None)
        }
    };
    let had_data = !data_tickets.is_empty() || !in_flight.is_empty();
    let strict = tx.strict_ordered.load(Ordering::Relaxed) > 0;
    let (reqs, nblocks) = log_write(j, tx, &versions, revokes, sums.as_ref())?;
    j.unreserved.store(0, Ordering::Release);
    let mut unordered = Vec::new();
    let mut unordered_in_flight = Vec::new();
    if had_data && (!strict || sums.is_some()) {
        // Overwrites only, or exposed data its commit block sums: waited for before the
        // flush step's flush, not before the log write.
        unordered = data_tickets;
        unordered_in_flight = in_flight;
        match &sums {
            Some(s) => {
                j.set.stats.osum_commits.fetch_add(1, Ordering::Relaxed);
                j.set.stats.osum_runs.fetch_add(s.runs.len() as u64, Ordering::Relaxed);
            }
            None => {
                j.set.stats.single_io_unordered.fetch_add(1, Ordering::Relaxed);
            }
        }
    } else if had_data {
        cjfs_blockdev::wait_all(data_tickets)?;
        crate::commit::wait_in_flight(&j.set, &in_flight)?;
        j.set.stats.single_io_preflushes.fetch_add(1, Ordering::Relaxed);
        if barrier {
            crate::flush::barrier(j)?;
        } else if !bugs.skip_preflush {
            crate::flush::flush(j)?;
        }
    }
    crate::flush::ensure_sb_start(j)?;
    let tickets: Vec<IoTicket> = j.set.dev.submit_batch(reqs)?;
    j.set.stats.single_io_commits.fetch_add(1, Ordering::Relaxed);
    j.set.stats.single_io_writes.fetch_add(tickets.len() as u64, Ordering::Relaxed);
    j.set.stats.single_io_blocks.fetch_add(nblocks, Ordering::Relaxed);
    if barrier {
        // The next transaction's write may not persist unless this one did.
        crate::flush::barrier(j)?;
    }
    tx.set_state(crate::transaction::TxState::Flushing);
    let job = FlushJob {
        tx: tx.clone(),
        tickets,
        data_tickets: unordered,
        data_in_flight: unordered_in_flight,
        commit: None,
        commit_ticket: None,
        versions,
        had_data,
        single_io: true,
        t_lock,
        handed: Instant::now(),
        revoked,
        marks: Vec::new(),
    };
    j.timing.commit_took(t_lock.elapsed());
    if j.set.config.dual_thread || bugs.single_io_overlap {
        j.flush_queue.push(job);
        Ok(())
    } else {
        crate::flush::complete(j, job)
    }
}

/// The transaction's whole log image as write requests over its reserved span (one per
/// device-contiguous run: one, or two where the log wraps), and its length in blocks.
fn log_write(
    j: &Arc<LogCore>,
    tx: &Transaction,
    versions: &[(Arc<Buffer>, BlockBuf)],
    revokes: &[u64],
    sums: Option<&crate::ordered_sums::DataSums>,
) -> JResult<(Vec<WriteRequest>, u64)> {
    let tid = tx.tid;
    let (features, uuid) = {
        let l = j.log.lock();
        (l.sb.features(), l.sb.s_uuid)
    };
    if !is_single_io(features) {
        return Err(JournalError::Corrupt(format!(
            "single-I/O commit of transaction {tid} on a journal without the v1 checksum and async commit features"
        )));
    }
    let bs = j.set.cache.block_size();
    let mut blocks = crate::writer::build_log_blocks(tid, features, uuid, versions, revokes, bs)?;
    j.set.stats.revokes.fetch_add(revokes.len() as u64, Ordering::Relaxed);
    j.set.stats.blocks_logged.fetch_add(versions.len() as u64, Ordering::Relaxed);
    let mut commit = crate::writer::commit_block(tid, features, uuid, None, &blocks, bs)?;
    if let Some(s) = sums {
        // Past the header the v1 checksum leaves alone; the section has its own.
        let mut img = commit.to_vec();
        s.encode_into(&mut img)?;
        commit = BlockBuf::from(img);
    }
    blocks.push((BlockKind::JournalCommit, commit));
    let n = blocks.len() as u64;
    let start = crate::commit::reserve(j, tid, n)?;
    let tag = WriteTag::tx(BlockKind::JournalTransaction, j.tx_id(tid));
    let mut reqs = Vec::with_capacity(2);
    let mut lblk = start;
    let mut left = blocks.into_iter().map(|(_, b)| b);
    let mut remaining = n;
    while remaining > 0 {
        // A run ends where the ring wraps or the journal's extents break on the device.
        let to_end = {
            let l = j.log.lock();
            l.ring.last() - lblk
        };
        let (dev_blk, run) = j.area.map_run(lblk, remaining.min(to_end))?;
        let bufs: Vec<BlockBuf> = left.by_ref().take(run as usize).collect();
        reqs.push(WriteRequest { block: dev_blk, bufs, tag, fua: false });
        remaining -= run;
        lblk = {
            let l = j.log.lock();
            l.ring.advance(lblk, run)
        };
    }
    Ok((reqs, n))
}
