//! The flush thread: waits for a transaction's log writes, makes them durable, writes the
//! commit record and wakes the waiters, in transaction order.
//!
//! JBD2 ordering: log blocks complete → cache flush → commit block → flush (the kernel's
//! REQ_PREFLUSH | REQ_FUA on the commit block). A failed flush aborts the journal and is
//! reported to every waiter; it is never retried.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cjfs_blockdev::{
    BlockBuf, BlockKind, IoTicket, TxId, WriteRequest, WriteTag, raise_io_thread_priority,
    set_low_timer_slack,
};

use crate::buffer::{Buffer, Committed};
use crate::config::JournalKind;
use crate::error::{JResult, JournalError};
use crate::log_core::LogCore;
use crate::transaction::{Transaction, TxState};

/// A transaction handed from the commit thread to the flush thread.
pub(crate) struct FlushJob {
    pub tx: Arc<Transaction>,
    /// Log writes (or, without a journal, home writes of metadata) in flight.
    pub tickets: Vec<IoTicket>,
    /// Ordered data writes in flight (must complete before the commit record).
    pub data_tickets: Vec<IoTicket>,
    /// Ordered data another path's fsync is writing (must complete before the commit
    /// record too; see [`crate::commit::HomeWrites::in_flight`]).
    pub data_in_flight: Vec<(Arc<Buffer>, u32)>,
    /// Commit block and its log position, for the flush thread to write (JBD2 format with
    /// something logged, unless the commit thread already dispatched it).
    pub commit: Option<(u64, BlockBuf)>,
    /// The commit block write the commit thread dispatched behind a barrier.
    pub commit_ticket: Option<IoTicket>,
    /// Versions written, to release and hand to the checkpoint.
    pub versions: Vec<(Arc<Buffer>, BlockBuf)>,
    /// Ordered data was written (a flush is needed even with nothing logged).
    pub had_data: bool,
    /// The whole transaction, commit block included, is in `tickets` (single-I/O commit):
    /// one flush after them makes it durable.
    pub single_io: bool,
    /// Blocks the transaction revoked (their older checkpoint copies die with it).
    pub revoked: Vec<u64>,
    /// Per-core journaling: the transactions of other logs it is valid only after.
    pub marks: Vec<TxId>,
    /// When the transaction was locked.
    pub t_lock: Instant,
    /// When the commit thread handed the transaction over.
    pub handed: Instant,
}

/// Body of the flush thread.
pub(crate) fn flush_thread(j: Arc<LogCore>) {
    set_low_timer_slack();
    raise_io_thread_priority();
    while let Some(group) = crate::compound_flush::next_group(&j) {
        let tid = group.first().map(|g| g.tx.tid).unwrap_or(0);
        if let Err(e) = complete_group(&j, group) {
            j.abort(format!("flush of transaction {tid} failed: {e}"));
        }
    }
}

/// Flush the device, counting it; a failure aborts the journal.
pub(crate) fn flush(j: &LogCore) -> JResult<()> {
    flush_step(j, true)
}

/// Flush the device; `last` when no other flush of this group follows (commit pacing).
fn flush_step(j: &LogCore, last: bool) -> JResult<()> {
    let t0 = Instant::now();
    let r = if j.set.multi_log() && j.set.config.log_flush != crate::compound_flush::LogFlush::Shared {
        // Each log's own flush, concurrently with the others'; failures shared as below.
        j.set.stats.flushes.fetch_add(1, Ordering::Relaxed);
        j.set.shared_flush.flush_own(&j.set.dev).map_err(JournalError::from)
    } else if j.set.multi_log() {
        // Compound flush across logs: join a flush another log is about to issue.
        match j.set.shared_flush.flush(&j.set.dev) {
            Ok(true) => {
                j.set.stats.flushes.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Ok(false) => {
                j.set.stats.shared_flushes.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(JournalError::from(e)),
        }
    } else {
        j.set.stats.flushes.fetch_add(1, Ordering::Relaxed);
        j.set.dev.flush().map_err(JournalError::from)
    };
    j.timing.flush_ended(t0.elapsed(), last);
    j.set.stats.flush_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

/// Write the journal superblock if the on-disk log is marked empty, so recovery will find
/// the transaction about to be committed.
pub(crate) fn ensure_sb_start(j: &LogCore) -> JResult<()> {
    let _g = j.sb_write.lock();
    let (img, start) = {
        let l = j.log.lock();
        if l.sb_start_on_disk != 0 {
            return Ok(());
        }
        (l.sb_image(), l.sb_position().0)
    };
    let dev_blk = j.area.map(0)?;
    j.set.dev.write_block(dev_blk, BlockBuf::from(img), WriteTag::kind(BlockKind::JournalSuper))?;
    j.log.lock().sb_start_on_disk = start;
    Ok(())
}

/// Make one transaction durable (serial commit path).
pub(crate) fn complete(j: &LogCore, job: FlushJob) -> JResult<()> {
    complete_group(j, vec![job])
}

/// Make a group of transactions durable, in order, with one flush after their commit
/// blocks (compound flush when the group has more than one).
///
/// Ordering of each transaction's log blocks before its commit block, and of commit blocks
/// among themselves, is by cache barrier when the device has one and the mode uses them;
/// otherwise one flush before the commit blocks makes every log block of the group durable
/// first (so a crash can only lose a suffix of unacknowledged transactions).
pub(crate) fn complete_group(j: &LogCore, mut jobs: Vec<FlushJob>) -> JResult<()> {
    if let Some(a) = j.aborted() {
        return Err(JournalError::Aborted(a));
    }
    let queued: u64 = jobs.iter().map(|jb| jb.handed.elapsed().as_nanos() as u64).sum();
    j.set.stats.flush_queue_ns.fetch_add(queued, Ordering::Relaxed);
    for job in &mut jobs {
        // Versions are released as soon as their own log writes complete (JBD2 releases its
        // shadow buffers at metadata I/O completion), not after the ordered data.
        cjfs_blockdev::wait_all(std::mem::take(&mut job.tickets))?;
        if j.set.config.release_on_log_write {
            release_versions(&job.versions);
        }
    }
    let mut dispatched = false;
    for job in &mut jobs {
        cjfs_blockdev::wait_all(std::mem::take(&mut job.data_tickets))?;
        crate::commit::wait_in_flight(&j.set, &std::mem::take(&mut job.data_in_flight))?;
        if let Some(t) = job.commit_ticket.take() {
            t.wait()?;
            dispatched = true;
        }
    }
    let bugs = crate::planted::bugs(&j.set.config);
    let commits: Vec<(u64, BlockBuf, u64)> = jobs
        .iter()
        .filter_map(|jb| jb.commit.as_ref().map(|(l, img)| (*l, img.clone(), jb.tx.tid)))
        .collect();
    if !commits.is_empty() {
        ensure_sb_start(j)?;
        let barriers = j.set.config.use_barriers && j.set.dev.caps().barrier;
        if bugs.commit_before_data {
            // Planted bug: the commit records were already written before their blocks.
        } else if barriers {
            let mut tickets = Vec::with_capacity(commits.len());
            for (lblk, img, tid) in &commits {
                if !bugs.skip_preflush {
                    barrier(j)?;
                }
                let dev_blk = j.area.map(*lblk)?;
                tickets.push(j.set.dev.submit(WriteRequest::one(
                    dev_blk,
                    img.clone(),
                    WriteTag::tx(BlockKind::JournalCommit, j.tx_id(*tid)),
                ))?);
            }
            cjfs_blockdev::wait_all(tickets)?;
        } else {
            if !bugs.skip_preflush {
                j.timing.group_flushes_start(2);
                flush_step(j, false)?;
            }
            let mut tickets = Vec::with_capacity(commits.len());
            for (lblk, img, tid) in &commits {
                let dev_blk = j.area.map(*lblk)?;
                tickets.push(j.set.dev.submit(WriteRequest::one(
                    dev_blk,
                    img.clone(),
                    WriteTag::tx(BlockKind::JournalCommit, j.tx_id(*tid)),
                ))?);
            }
            cjfs_blockdev::wait_all(tickets)?;
        }
        j.timing.group_flushes_start(1);
        flush(j)?;
    } else if dispatched
        || jobs.iter().any(|jb| {
            jb.had_data || jb.single_io || (j.set.config.kind == JournalKind::None && !jb.versions.is_empty())
        })
    {
        j.timing.group_flushes_start(1);
        flush(j)?;
    }
    j.set.stats.compound_groups.fetch_add(1, Ordering::Relaxed);
    for job in jobs {
        mark_durable(j, job);
    }
    Ok(())
}

/// Hand a durable transaction's versions to the checkpoint, release their slots, and —
/// at once with one log, once everything it is chained to is durable with several — make it
/// valid and wake its waiters.
fn mark_durable(j: &LogCore, job: FlushJob) {
    let tid = job.tx.tid;
    let id = job.tx.id();
    let stamp = job.tx.stamp.load(Ordering::SeqCst);
    let ckpt = j.set.config.kind == JournalKind::Jbd2;
    for (b, v) in &job.versions {
        let mut js = b.jstate();
        if !j.set.config.release_on_log_write {
            js.versions = js.versions.saturating_sub(1);
        }
        // The newest version (by stamp: commit order within a log and across logs) waits
        // for the checkpoint; an older one that becomes durable later is already contained.
        if ckpt
            && js.checkpoint.as_ref().is_none_or(|c| c.stamp < stamp)
            && let Some(old) = js.checkpoint.replace(Committed { tx: id, stamp, image: v.clone() })
        {
            j.set.stats.checkpoint_cancelled.fetch_add(1, Ordering::Relaxed);
            j.set.shadow.put(old.image);
        }
        drop(js);
        b.notify();
    }
    if ckpt && !job.versions.is_empty() {
        j.checkpoint_list.lock().extend(job.versions.iter().map(|(b, _)| (b.clone(), tid)));
    }
    if ckpt && j.set.multi_log() {
        for (b, _) in &job.versions {
            b.jstate().in_logs.push((id, stamp));
        }
        j.in_log.lock().extend(job.versions.iter().map(|(b, _)| (b.clone(), tid, stamp)));
    }
    if !ckpt {
        for (_, v) in job.versions {
            j.set.shadow.put(v);
        }
    }
    let multi = j.set.multi_log();
    let pending = crate::per_core::Pending { marks: job.marks, tx: job.tx.clone(), revoked: job.revoked };
    if !multi {
        drop_revoked(j, &pending);
    }
    let fill = {
        let mut l = j.log.lock();
        l.ring.mark_durable(tid);
        l.ring.fill()
    };
    {
        let mut st = j.state.lock();
        job.tx.set_state(TxState::Committed);
        st.committing.retain(|t| t.tid != tid);
        j.publish_committing(&st);
        if st.durable < tid {
            st.durable = tid;
            j.durable_fast.store(tid, Ordering::Release);
        }
        if !multi {
            // One log: durable is valid. Under `state`, which waiters check under.
            j.set.chains.set_valid(usize::from(j.id), tid);
        }
        // Under `state`, with the flag the checkpoint thread checks before it waits: a
        // wake-up between its check and its wait cannot be lost.
        if fill > j.set.config.checkpoint_high_water {
            st.checkpoint_wanted = true;
            j.checkpoint_cv.notify_all();
        }
    }
    j.set.stats.transactions.fetch_add(1, Ordering::Relaxed);
    j.set.stats.commit_ns.fetch_add(job.t_lock.elapsed().as_nanos() as u64, Ordering::Relaxed);
    if !multi {
        // Every earlier transaction's ordered-data sums are confirmed by this one.
        crate::ordered_sums::release(j, tid.saturating_sub(1));
        job.tx.set_done();
        j.done_cv.notify_all();
        return;
    }
    j.done_cv.notify_all();
    if crate::planted::bugs(&j.set.config).checkpoint_invalid
        && let Err(e) = crate::checkpoint::checkpoint(j)
    {
        // Planted bug: checkpoint every durable transaction at once, valid or not.
        j.abort(format!("checkpoint failed: {e}"));
    }
    // A revoke's hold goes in before its transaction can become valid: a checkpoint that saw
    // it valid without the hold could free it from the log while another log still holds an
    // older copy of a revoked block, which recovery would then replay over the next owner.
    if j.set.config.kind == JournalKind::Jbd2 && !pending.revoked.is_empty() {
        crate::checkpoint::hold_for_revoke(j, pending.tx.tid, pending.tx.stamp.load(Ordering::SeqCst));
    }
    let t0 = Instant::now();
    let adv = j.set.chains.durable(pending);
    j.set.stats.validity_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    for p in adv.valid {
        let Some(log) = j.set.log_core(p.tx.log) else { continue };
        drop_revoked(&log, &p);
        p.tx.set_done();
        // Validity is published; waiters check it under `state`.
        drop(log.state.lock());
        log.done_cv.notify_all();
    }
    for c in adv.commit {
        if let Some(log) = j.set.log_core(c.log) {
            j.set.stats.forced_commits.fetch_add(1, Ordering::Relaxed);
            log.request_commit(c.tid);
        }
    }
}

/// Blocks `p` freed may be reused once it is valid: drop their older committed copies still
/// awaiting checkpoint (of any log: older by stamp), or the checkpoint would write stale
/// metadata over the next owner's contents (seen as a file's new data block turning back
/// into the directory block it once was). This must wait until now: a version committed
/// before the revoke may become durable after the revoke was made (it is still needed home
/// if this transaction never commits). With several logs, a copy dropped here may still be
/// in another log on disk, where only this revoke keeps recovery from replaying it: the
/// transaction stays in its log until that log has released it (`revoke_holds`).
fn drop_revoked(j: &LogCore, p: &crate::per_core::Pending) {
    if j.set.config.kind != JournalKind::Jbd2 || p.revoked.is_empty() {
        return;
    }
    let stamp = p.tx.stamp.load(Ordering::SeqCst);
    for blk in &p.revoked {
        if let Some(b) = j.set.cache.peek(*blk) {
            let mut js = b.jstate();
            if js.checkpoint.as_ref().is_some_and(|c| c.stamp < stamp)
                && let Some(old) = js.checkpoint.take()
            {
                j.set.stats.checkpoint_cancelled.fetch_add(1, Ordering::Relaxed);
                j.set.shadow.put(old.image);
            }
        }
    }
}

/// Issue a cache barrier, counting it.
pub(crate) fn barrier(j: &LogCore) -> JResult<()> {
    j.set.stats.barriers.fetch_add(1, Ordering::Relaxed);
    j.set.dev.barrier().map_err(JournalError::from)
}

fn release_versions(versions: &[(Arc<Buffer>, BlockBuf)]) {
    for (b, _) in versions {
        let mut js = b.jstate();
        js.versions = js.versions.saturating_sub(1);
        drop(js);
        b.notify();
    }
}
