//! Per-core work queues (the XFS journaling paper's per-core pool workqueues, §IV-A): how
//! work reaches a log's commit and flush threads.
//!
//! The setting is [`crate::JournalConfig::dispatch`]. With [`Dispatch::Shared`] (JBD2's way)
//! a commit request takes the log's `state` lock to raise `commit_request` and notifies
//! `commit_cv`, and the commit thread hands each transaction to the flush thread through a
//! mutex-protected queue and `flush_cv`. With [`Dispatch::PerCore`]:
//!
//! - **commit requests** go into per-core slots (one cache line each, indexed by the core the
//!   requester runs on); the commit thread drains them, taking the maximum, whenever it looks
//!   for work. A requester touches only its core's slot and reads one flag, and rings the
//!   commit thread's doorbell only when that thread said it sleeps — the paper's "work goes on
//!   the local CPU's pool" without a shared pool lock;
//! - **the flush hand-off** is a lock-free queue with the same doorbell. It is one queue, not
//!   one per core: its producers (the commit thread, or an fsync committing inline) are
//!   already serialised by the commit, so there is nothing to shard, and the flush thread
//!   must take the jobs in transaction order.
//!
//! The consumers stay unbound threads: the paper binds work to the submitting CPU's pool, and
//! upstream XFS went back to unbound work queues because bound work starves behind a busy core
//! (Dave Chinner, "xfs: prevent CIL push holdoff in log recovery", LKML, September 2019);
//! here only the *requests* are per core, and the thread that drains them runs wherever the
//! scheduler puts it, so no work can wait behind a core that is busy with something else.
//!
//! Doorbell protocol (checked by the `loom` model test `doorbell_never_sleeps_through_a_request`
//! in `polling.rs`): a producer publishes its work, issues a SeqCst fence and reads
//! `sleeping`; the consumer reads the event's generation, looks for work, stores `sleeping`,
//! issues a SeqCst fence and looks once more before it parks on the event. Either the consumer
//! sees the work, or the producer sees `sleeping` and rings, moving the generation on. (Without
//! the two fences the model finds the consumer asleep with a request published.)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::time::{Duration, Instant};

use crossbeam::queue::SegQueue;
use crossbeam::utils::CachePadded;

use crate::buffer::Tid;
use crate::flush::FlushJob;
use crate::lock_rank::{Rank, RankedMutex};
use crate::lock_stat::{WaitCv, WaitSite};
use crate::polling::Event;

/// How work reaches a log's commit and flush threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dispatch {
    /// The log's state lock and condition variables (JBD2's way).
    #[default]
    Shared,
    /// Per-core commit-request slots and a lock-free flush hand-off, each consumer woken only
    /// when it sleeps.
    PerCore,
}

impl Dispatch {
    /// The setting's name (`shared`, `per_core`).
    pub fn name(self) -> &'static str {
        match self {
            Dispatch::Shared => "shared",
            Dispatch::PerCore => "per_core",
        }
    }
}

/// The doorbell of one consumer thread (see the module docs for the protocol).
#[derive(Debug)]
pub(crate) struct Doorbell {
    sleeping: AtomicBool,
    event: Event,
}

impl Doorbell {
    fn new(site: WaitSite) -> Self {
        Doorbell { sleeping: AtomicBool::new(false), event: Event::new(site) }
    }

    /// Read before the consumer looks for work; [`Doorbell::sleep`] returns once it moved on.
    pub(crate) fn generation(&self) -> u64 {
        self.event.generation()
    }

    /// Producer side, after publishing work: ring only if the consumer sleeps.
    pub(crate) fn ring_if_sleeping(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.event.notify();
        }
    }

    /// Ring whatever the consumer does (shutdown, abort, a condition it checks under a lock).
    pub(crate) fn ring(&self) {
        self.event.notify();
    }

    /// Consumer side: park until rung after `seen` or until `deadline`, unless `has_work()`
    /// once the consumer announced that it sleeps.
    pub(crate) fn sleep(&self, seen: u64, has_work: impl Fn() -> bool, deadline: Option<Instant>) {
        self.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !has_work() {
            self.event.wait(seen, Duration::ZERO, deadline);
        }
        self.sleeping.store(false, Ordering::SeqCst);
    }
}

/// Per-core commit-request slots of one log ([`Dispatch::PerCore`]). Atomics only.
#[derive(Debug)]
pub(crate) struct CommitRequests {
    slots: Box<[CachePadded<AtomicU64>]>,
    /// The commit thread's doorbell.
    pub(crate) bell: Doorbell,
}

impl CommitRequests {
    /// One slot per core, each at `requested` (nothing requested past it yet).
    pub(crate) fn new(requested: Tid) -> Self {
        let cores = crate::per_core::cores();
        CommitRequests {
            slots: (0..cores).map(|_| CachePadded::new(AtomicU64::new(requested))).collect(),
            bell: Doorbell::new(WaitSite::CommitRequest),
        }
    }

    /// Ask for `tid` to be committed: in the calling core's slot; the commit thread is rung
    /// only if it sleeps and this core had not asked for `tid` already.
    pub(crate) fn request(&self, tid: Tid) {
        let slot = &self.slots[crate::per_core::current_cpu() % self.slots.len()];
        if slot.fetch_max(tid, Ordering::SeqCst) >= tid {
            return;
        }
        self.bell.ring_if_sleeping();
    }

    /// The highest transaction any core asked for.
    pub(crate) fn highest(&self) -> Tid {
        self.slots.iter().map(|s| s.load(Ordering::SeqCst)).max().unwrap_or(0)
    }
}

/// The hand-off of committed transactions from the commit work to the flush thread of one
/// log (single consumer; producers serialised by the commit), with the count of jobs handed
/// over and not yet taken (commit pacing reads it without a lock).
pub(crate) struct FlushQueue {
    jobs: Jobs,
    /// Raised before a job is queued, lowered after it is taken: never below the true count.
    pending: AtomicUsize,
}

/// Where the jobs wait, by [`Dispatch`].
enum Jobs {
    /// A mutex-protected queue (rank `FlushQueue`) and `flush_cv`.
    Shared { q: RankedMutex<VecDeque<FlushJob>>, cv: WaitCv },
    /// A lock-free queue and the flush thread's doorbell.
    PerCore { q: Box<SegQueue<FlushJob>>, bell: Doorbell },
}

impl FlushQueue {
    /// An empty hand-off of the kind `dispatch` names.
    pub(crate) fn new(dispatch: Dispatch) -> Self {
        let jobs = match dispatch {
            Dispatch::Shared => Jobs::Shared {
                q: RankedMutex::new(Rank::FlushQueue, VecDeque::new()),
                cv: WaitCv::new(WaitSite::FlushQueue),
            },
            Dispatch::PerCore => {
                Jobs::PerCore { q: Box::new(SegQueue::new()), bell: Doorbell::new(WaitSite::FlushQueue) }
            }
        };
        FlushQueue { jobs, pending: AtomicUsize::new(0) }
    }

    /// Jobs handed over and not yet taken.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Queue a job.
    pub(crate) fn push(&self, job: FlushJob) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        match &self.jobs {
            Jobs::Shared { q, cv } => {
                q.lock().push_back(job);
                cv.notify_all();
            }
            Jobs::PerCore { q, bell } => {
                q.push(job);
                bell.ring_if_sleeping();
            }
        }
    }

    /// The oldest job, if any.
    pub(crate) fn pop(&self) -> Option<FlushJob> {
        let job = match &self.jobs {
            Jobs::Shared { q, .. } => q.lock().pop_front(),
            Jobs::PerCore { q, .. } => q.pop(),
        };
        if job.is_some() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
        job
    }

    /// Wait until a job is queued, `stop()` holds, or `deadline` passes. Whoever makes
    /// `stop()` true calls [`FlushQueue::wake`].
    pub(crate) fn wait(&self, deadline: Option<Instant>, stop: impl Fn() -> bool) {
        match &self.jobs {
            Jobs::Shared { q, cv } => {
                let mut g = q.lock();
                while g.is_empty() && !stop() {
                    match deadline {
                        None => g.wait(cv),
                        Some(d) => {
                            if g.wait_until(cv, d).timed_out() {
                                return;
                            }
                        }
                    }
                }
            }
            Jobs::PerCore { q, bell } => loop {
                let seen = bell.generation();
                if !q.is_empty() || stop() || deadline.is_some_and(|d| Instant::now() >= d) {
                    return;
                }
                bell.sleep(seen, || !q.is_empty(), deadline);
            },
        }
    }

    /// Wake the flush thread to look again (shutdown, abort).
    pub(crate) fn wake(&self) {
        match &self.jobs {
            Jobs::Shared { q, cv } => {
                // Under the lock: the waiter checks `stop()` under it before it waits.
                let _g = q.lock();
                cv.notify_all();
            }
            Jobs::PerCore { bell, .. } => bell.ring(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn requests_from_every_core_are_drained_and_ring_a_sleeping_consumer() {
        let r = Arc::new(CommitRequests::new(0));
        let consumer = {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut seen_tid = 0;
                while seen_tid < 400 {
                    let g = r.bell.generation();
                    let h = r.highest();
                    if h > seen_tid {
                        seen_tid = h;
                        continue;
                    }
                    r.bell.sleep(g, || r.highest() > seen_tid, None);
                }
                seen_tid
            })
        };
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for t in 1..=100 {
                        r.request(t * 4 - p);
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().expect("producer");
        }
        assert_eq!(consumer.join().expect("consumer"), 400, "the highest request reached the consumer");
    }

    #[test]
    fn a_lower_request_does_not_lower_the_slot() {
        let r = CommitRequests::new(5);
        r.request(3);
        assert_eq!(r.highest(), 5);
        r.request(9);
        assert_eq!(r.highest(), 9);
    }
}
