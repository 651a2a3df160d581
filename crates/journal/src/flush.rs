//! The flush thread: waits for a transaction's log writes, makes them durable, writes the
//! commit record and wakes the waiters, in transaction order.
//!
//! JBD2 ordering: log blocks complete → cache flush → commit block → flush (the kernel's
//! REQ_PREFLUSH | REQ_FUA on the commit block). A failed flush aborts the journal and is
//! reported to every waiter; it is never retried.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cjfs_blockdev::{BlockBuf, BlockKind, IoTicket, WriteRequest, WriteTag, set_low_timer_slack};

use crate::buffer::Buffer;
use crate::config::JournalKind;
use crate::error::{JResult, JournalError};
use crate::journal::JournalInner;
use crate::transaction::{Transaction, TxState};

/// A transaction handed from the commit thread to the flush thread.
pub(crate) struct FlushJob {
    pub tx: Arc<Transaction>,
    /// Ordered data, home writes (no-journal) and log writes in flight.
    pub tickets: Vec<IoTicket>,
    /// Commit block and its log position (JBD2 format with something logged).
    pub commit: Option<(u64, BlockBuf)>,
    /// Versions written, to release and hand to the checkpoint.
    pub versions: Vec<(Arc<Buffer>, BlockBuf)>,
    /// Ordered data was written (a flush is needed even with nothing logged).
    pub had_data: bool,
    /// When the transaction was locked.
    pub t_lock: Instant,
}

/// Body of the flush thread.
pub(crate) fn flush_thread(j: Arc<JournalInner>) {
    set_low_timer_slack();
    loop {
        let job = {
            let mut q = j.flush_queue.lock();
            loop {
                if let Some(job) = q.pop_front() {
                    break job;
                }
                if j.state.lock().shutdown {
                    return;
                }
                j.flush_cv.wait(&mut q);
            }
        };
        let tid = job.tx.tid;
        if let Err(e) = complete(&j, job) {
            j.abort(format!("flush of transaction {tid} failed: {e}"));
        }
    }
}

/// Flush the device, counting it; a failure aborts the journal.
pub(crate) fn flush(j: &JournalInner) -> JResult<()> {
    j.stats.flushes.fetch_add(1, Ordering::Relaxed);
    j.dev.flush().map_err(JournalError::from)
}

/// Write the journal superblock if the on-disk log is marked empty, so recovery will find
/// the transaction about to be committed.
pub(crate) fn ensure_sb_start(j: &JournalInner) -> JResult<()> {
    let _g = j.sb_write.lock();
    let (img, start) = {
        let l = j.log.lock();
        if l.sb_start_on_disk != 0 {
            return Ok(());
        }
        (l.sb_image(), l.sb_position().0)
    };
    let dev_blk = j.area.map(0)?;
    j.dev.write_block(dev_blk, BlockBuf::from(img), WriteTag::kind(BlockKind::JournalSuper))?;
    j.log.lock().sb_start_on_disk = start;
    Ok(())
}

pub(crate) fn complete(j: &JournalInner, job: FlushJob) -> JResult<()> {
    if let Some(a) = j.aborted() {
        return Err(JournalError::Aborted(a));
    }
    cjfs_blockdev::wait_all(job.tickets)?;
    let tid = job.tx.tid;
    if j.config.release_on_log_write {
        release_versions(&job.versions);
    }
    if let Some((lblk, img)) = &job.commit {
        ensure_sb_start(j)?;
        if !j.config.bugs.skip_preflush && !j.config.bugs.commit_before_data {
            flush(j)?;
        }
        if !j.config.bugs.commit_before_data {
            let dev_blk = j.area.map(*lblk)?;
            j.dev
                .submit(WriteRequest::one(dev_blk, img.clone(), WriteTag::tx(BlockKind::JournalCommit, tid)))?
                .wait()?;
        }
        flush(j)?;
    } else if job.had_data || (j.config.kind == JournalKind::None && !job.versions.is_empty()) {
        flush(j)?;
    }
    // Durable: hand versions to the checkpoint, release their slots.
    let ckpt = j.config.kind == JournalKind::Jbd2;
    for (b, v) in &job.versions {
        let mut js = b.jstate();
        if !j.config.release_on_log_write {
            js.versions = js.versions.saturating_sub(1);
        }
        if ckpt && js.checkpoint.as_ref().is_none_or(|(t, _)| *t < tid) {
            js.checkpoint = Some((tid, v.clone()));
        }
        drop(js);
        b.notify();
    }
    if ckpt && !job.versions.is_empty() {
        j.checkpoint_list.lock().extend(job.versions.iter().map(|(b, _)| b.clone()));
    }
    let fill = {
        let mut l = j.log.lock();
        l.mark_durable(tid);
        l.fill()
    };
    {
        let mut st = j.state.lock();
        job.tx.set_state(TxState::Committed);
        st.committing.retain(|t| t.tid != tid);
        if st.durable < tid {
            st.durable = tid;
        }
    }
    j.stats.transactions.fetch_add(1, Ordering::Relaxed);
    j.stats.commit_ns.fetch_add(job.t_lock.elapsed().as_nanos() as u64, Ordering::Relaxed);
    j.done_cv.notify_all();
    j.commit_cv.notify_all();
    if fill > j.config.checkpoint_high_water {
        j.checkpoint_cv.notify_all();
    }
    Ok(())
}

fn release_versions(versions: &[(Arc<Buffer>, BlockBuf)]) {
    for (b, _) in versions {
        let mut js = b.jstate();
        js.versions = js.versions.saturating_sub(1);
        drop(js);
        b.notify();
    }
}
