//! Transaction lock-up, with or without opportunistic coalescing (CJFS §4.3, Algorithm 1).
//!
//! The commit thread locks the running transaction and waits for its outstanding handles.
//! A transaction *conflicts* when one of its buffers already has every allowed version in
//! flight with committing transactions. With coalescing the conflicting transaction goes
//! back to Running (waking the handles blocked on the lock), the commit thread waits for the
//! preceding commit to finish, and tries again — meanwhile the transaction keeps absorbing
//! operations. Without it (JBD2, BarrierFS) the lock-up is non-preemptive: the locked
//! transaction waits for the versions while every new handle waits for it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::error::{JResult, JournalError};
use crate::journal::JournalInner;
use crate::transaction::{Transaction, TxState};

/// Whether `tx` needs a version of a buffer that has none left.
fn conflicts(j: &JournalInner, tx: &Transaction) -> bool {
    let max = j.config.max_versions.max(1);
    let bufs = tx.lists.lock().buffers.clone();
    bufs.iter().any(|b| {
        let js = b.jstate();
        js.running == Some(tx.tid) && js.versions >= max
    })
}

/// Wait until the preceding commit finishes (some transaction becomes durable) or nothing
/// is committing.
fn wait_preceding_commit(j: &JournalInner) -> JResult<()> {
    let mut st = j.state.lock();
    let d0 = st.durable;
    while st.durable == d0 && !st.committing.is_empty() {
        if let Some(a) = &st.aborted {
            return Err(JournalError::Aborted(a.clone()));
        }
        if st.shutdown {
            return Err(JournalError::Shutdown);
        }
        j.done_cv.wait(&mut st);
    }
    Ok(())
}

/// Lock `tx` for commit: on return it is Locked, has no outstanding handles and (with
/// coalescing) no conflict. Time spent Locked is added to the statistics.
pub(crate) fn lock_up(j: &JournalInner, tx: &Arc<Transaction>) -> JResult<()> {
    loop {
        let t0 = Instant::now();
        {
            let _st = j.state.lock();
            tx.set_state(TxState::Locked);
        }
        {
            let mut g = j.updates_lock.lock();
            while tx.updates.load(Ordering::Acquire) > 0 {
                j.updates_cv.wait(&mut g);
            }
        }
        if !j.config.coalescing || !conflicts(j, tx) {
            j.stats.locked_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            return Ok(());
        }
        {
            let _st = j.state.lock();
            tx.set_state(TxState::Running);
        }
        j.locked_cv.notify_all();
        j.stats.locked_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        j.stats.coalesce_retries.fetch_add(1, Ordering::Relaxed);
        wait_preceding_commit(j)?;
    }
}
