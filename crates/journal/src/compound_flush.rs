//! Compound flush (CJFS §4.4): when the flush thread is about to flush a transaction and a
//! later one is already committing, it takes that one into the same group (ordering the
//! commit blocks with barriers) and one flush makes the whole group durable — up to
//! `compound_flush` transactions per flush, so no transaction waits indefinitely.
//!
//! When the flush thread takes the queue it wakes a commit held back by coalescing (see
//! `coalescing::pace`) and waits briefly for it, so that transaction joins the group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::flush::FlushJob;
use crate::log_core::LogCore;
use crate::transaction::TxState;

/// How long the flush thread waits for a transaction that is committing but not yet handed
/// over before flushing without it.
const JOIN_WAIT: Duration = Duration::from_micros(200);

/// The next group of transactions to make durable together; `None` on shutdown.
pub(crate) fn next_group(j: &Arc<LogCore>) -> Option<Vec<FlushJob>> {
    let limit = j.set.config.compound_flush.max(1) as usize;
    let q = &j.flush_queue;
    // Set before `stop` rings the queue, so a waiter checking it after arming cannot miss it.
    let shutdown = || j.shutdown_fast.load(std::sync::atomic::Ordering::SeqCst);
    let first = loop {
        if let Some(job) = q.pop() {
            break job;
        }
        if shutdown() {
            return None;
        }
        q.wait(None, shutdown);
    };
    let mut group = vec![first];
    let deadline = Instant::now() + JOIN_WAIT;
    while group.len() < limit {
        if let Some(job) = q.pop() {
            group.push(job);
            continue;
        }
        // A later transaction already being committed joins the group if it is handed over
        // soon; otherwise flush what we have. (One merely requested is not waited for: a
        // paced commit was let go before this flush ended, see `coalescing::pace`, and
        // waiting for a commit not yet begun would idle the device for most of a commit.)
        let last = group.last().map(|g| g.tx.tid).unwrap_or(0);
        let more = {
            let st = j.state.lock();
            st.committing.iter().any(|t| t.tid > last)
                || st.running.as_ref().is_some_and(|t| t.state() == TxState::Locked)
        };
        // After `state` above, so a paced commit thread cannot miss this wake-up.
        j.wake_committer();
        if !more || Instant::now() >= deadline {
            break;
        }
        q.wait(Some(deadline), shutdown);
    }
    Some(group)
}

/// How the logs of a per-core journal flush (the `log_flush` setting; one log is
/// unaffected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFlush {
    /// [`LogFlush::PerLog`] on a device whose flushes are queued commands
    /// ([`cjfs_blockdev::DeviceCaps::queued_flush`]), [`LogFlush::Shared`] elsewhere; resolved
    /// when the journal opens.
    Auto,
    /// One flush at a time across the logs; a log whose writes completed while another's
    /// flush ran joins the next one (see [`SharedFlush`]). Saves device flushes where the host
    /// serialises them anyway (SATA, eMMC: the kernel's block layer keeps one flush in flight
    /// per hardware queue and merges the ones waiting), at the price of waiting for the
    /// flush in progress.
    Shared,
    /// Each log issues its own flush when its commit needs one, concurrently with the
    /// others', as per-core logs do on a multi-queue (NVMe) device under the kernel. On the
    /// emulated NVMe, against the shared flush: `zjournal` 1.47x on FxMark DWSL (16 threads),
    /// 1.32x on varmail-shared (32), 1.19x on SysBench Fig. 8; `zjournal-cjfs` 1.54x, 1.09x,
    /// 1.18x (`docs/results/zjournal/`): a log's commit no longer waits for the other log's
    /// flush before issuing its own. The gain rests on the device overlapping flushes, which
    /// the emulator assumes (`cjfs_blockdev::EmulatedSsd`'s module docs).
    PerLog,
}

impl LogFlush {
    /// What `Auto` means on a device with `caps`; the others stay.
    pub fn resolve(self, caps: &cjfs_blockdev::DeviceCaps) -> LogFlush {
        match self {
            LogFlush::Auto if caps.queued_flush => LogFlush::PerLog,
            LogFlush::Auto => LogFlush::Shared,
            other => other,
        }
    }
}

/// Compound flush across logs: a device flush makes durable every write completed before it
/// started, so when several logs need a flush at once (per-core journaling: an fsync commits
/// every log in parallel), a log whose writes completed before a flush that has not started
/// yet joins that flush instead of issuing its own. A failed flush is returned to the caller
/// that issued it and to every caller that joined it, and to every later caller: the journal
/// aborts on it, nothing is retried.
///
/// With [`LogFlush::PerLog`] the logs flush on their own ([`SharedFlush::flush_own`]) and
/// only the failure record is shared.
///
/// Locks: `flushes` (a leaf; no device I/O under it), paired with `cv`.
pub(crate) struct SharedFlush {
    flushes: crate::lock_rank::RankedMutex<FlushGen>,
    cv: crate::lock_stat::WaitCv,
}

/// Flush generations. Protected by `SharedFlush::flushes`.
#[derive(Default)]
struct FlushGen {
    /// Flushes started so far (the one in progress, if any, is number `started`).
    started: u64,
    /// Flushes finished so far (in order: one runs at a time).
    done: u64,
    /// A flush is running.
    running: bool,
    /// The first failure (sticky).
    failed: Option<cjfs_blockdev::DevError>,
}

impl SharedFlush {
    pub(crate) fn new() -> Self {
        SharedFlush {
            flushes: crate::lock_rank::RankedMutex::new(crate::lock_rank::Rank::Leaf, FlushGen::default()),
            cv: crate::lock_stat::WaitCv::new(crate::lock_stat::WaitSite::FlushQueue),
        }
    }

    /// [`LogFlush::PerLog`]: flush now, concurrently with any other log's flush. A failure is
    /// kept as [`SharedFlush::flush`] keeps it, so it reaches every later caller; and a caller
    /// whose own flush succeeded while another log's failed gets that failure too (the
    /// journal aborts on it, and no transaction is called durable after that).
    pub(crate) fn flush_own(&self, dev: &cjfs_blockdev::Device) -> Result<(), cjfs_blockdev::DevError> {
        if let Some(e) = &self.flushes.lock().failed {
            return Err(e.clone());
        }
        let r = dev.flush();
        let mut g = self.flushes.lock();
        if let Err(e) = &r {
            g.failed.get_or_insert(e.clone());
        }
        match &g.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Make every write the caller completed durable: join the next flush to start, or
    /// start it. Returns whether this caller issued the flush itself.
    pub(crate) fn flush(&self, dev: &cjfs_blockdev::Device) -> Result<bool, cjfs_blockdev::DevError> {
        let mut g = self.flushes.lock();
        // A flush already running may have started before the caller's writes completed:
        // the caller needs the one after it.
        let target = g.started + 1;
        loop {
            if let Some(e) = &g.failed {
                return Err(e.clone());
            }
            if g.done >= target {
                return Ok(false);
            }
            if !g.running {
                g.running = true;
                g.started += 1;
                let mine = g.started;
                drop(g);
                let r = dev.flush();
                let mut g = self.flushes.lock();
                g.running = false;
                g.done = mine;
                if let Err(e) = &r {
                    g.failed.get_or_insert(e.clone());
                }
                drop(g);
                self.cv.notify_all();
                return r.map(|_| true);
            }
            g.wait(&self.cv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cjfs_blockdev::DeviceCaps;

    #[test]
    fn auto_flushes_per_log_only_where_flushes_are_queued() {
        let caps = |queued_flush| DeviceCaps { barrier: true, volatile_cache: true, fua: true, queued_flush };
        assert_eq!(LogFlush::Auto.resolve(&caps(true)), LogFlush::PerLog);
        assert_eq!(LogFlush::Auto.resolve(&caps(false)), LogFlush::Shared);
        for chosen in [LogFlush::Shared, LogFlush::PerLog] {
            assert_eq!(chosen.resolve(&caps(true)), chosen);
            assert_eq!(chosen.resolve(&caps(false)), chosen);
        }
    }
}
