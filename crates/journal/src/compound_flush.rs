//! Compound flush (CJFS §4.4): when the flush thread is about to flush a transaction and a
//! later one is already committing, it takes that one into the same group (ordering the
//! commit blocks with barriers) and one flush makes the whole group durable — up to
//! `compound_flush` transactions per flush, so no transaction waits indefinitely.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::flush::FlushJob;
use crate::journal::JournalInner;

/// How long the flush thread waits for a transaction that is committing but not yet handed
/// over before flushing without it.
const JOIN_WAIT: Duration = Duration::from_micros(200);

/// The next group of transactions to make durable together; `None` on shutdown.
pub(crate) fn next_group(j: &Arc<JournalInner>) -> Option<Vec<FlushJob>> {
    let limit = j.config.compound_flush.max(1) as usize;
    let mut q = j.flush_queue.lock();
    let first = loop {
        if let Some(job) = q.pop_front() {
            break job;
        }
        if j.state.lock().shutdown {
            return None;
        }
        j.flush_cv.wait(&mut q);
    };
    let mut group = vec![first];
    let deadline = Instant::now() + JOIN_WAIT;
    while group.len() < limit {
        if let Some(job) = q.pop_front() {
            group.push(job);
            continue;
        }
        // A later transaction still being written by the commit thread joins the group if
        // it is handed over soon; otherwise flush what we have.
        let last = group.last().map(|g| g.tx.tid).unwrap_or(0);
        let more = j.state.lock().committing.iter().any(|t| t.tid > last);
        if !more || Instant::now() >= deadline {
            break;
        }
        j.flush_cv.wait_until(&mut q, deadline);
    }
    Some(group)
}
