//! Per-core journaling (Z-Journal, Kim et al., ATC'21): a log per core, each with its own
//! running and committing transactions, commit, flush and checkpoint threads and log area,
//! so commits never queue behind one another; the order between logs is kept by *chain
//! marks* and enforced late, at checkpoint and at recovery.
//!
//! * **Admission** ([`admit`], setting `JournalConfig::admission`): a handle joins the log of
//!   the core it starts on (`sched_getcpu`, §3.1) and stays there. With more logs than cores
//!   (the lab sweeps N) a core would leave logs idle, so each thread then gets a slot of its
//!   own, round robin, and keeps it; [`Admission::Thread`] does that always, so a thread's
//!   blocks stay in one log when threads outnumber cores and migrate between them. The
//!   `zjournal` presets admit by thread (measured better on two cores, see
//!   `JournalConfig::zjournal`); `+admit=core` is the paper's.
//! * **Chaining** (§3.1–3.2; `handle.rs` calls [`chain_to_owner`] and [`chain_to_version`]):
//!   writing a block that another log's running (or locked, still draining) transaction holds
//!   makes a *bi-directional* chain: both get a mark naming the other, the block stays in its
//!   owner, and the writer's handle pins the owner (counts as one of its updates) so the
//!   owner cannot finish draining, take its version and read its marks while the writer may
//!   still change the block. Writing a block whose newest version belongs to another log's
//!   transaction that is not yet valid makes a *uni-directional* mark (the paper marks only a
//!   committing owner; a committed but not yet valid one needs it too, or the writer's newer
//!   image — which contains the owner's change — could be replayed without the owner).
//! * **Stamps**: a global logical clock taken when a transaction has drained its handles,
//!   before any of its versions is taken, so a writer that sees a version sees an older
//!   stamp; replaying valid transactions in stamp order is a linear extension of every
//!   per-block order (the notes' D6 argument), and recovery uses it.
//! * **Validity** ([`Chains`]): a committed transaction is valid when every transaction it
//!   has a mark to, and its predecessor in its own log, are committed and valid — the
//!   greatest fixpoint, so a bi-directional pair that both committed is valid together.
//!   Within a log validity is a prefix, so it is one number per log ([`Chains::is_valid`]).
//!   A transaction's waiters are woken when it becomes valid, not merely durable; a durable
//!   transaction that is not yet valid asks for its missing ancestors to be committed at once
//!   (the paper's space-starved "force" mode, applied always: nothing then waits on a
//!   running transaction's commit interval).
//! * **Coherence checkpoint** (§3.3, `checkpoint.rs`): only valid versions are written home,
//!   and a log releases a transaction only when every newer version of its blocks, in any
//!   log, is valid (else a crash could discard the newer one after the older one left the
//!   log: the block would lose the older transaction's change).
//! * **Marks kept per log**: one mark per other log, its newest transaction (validity is a
//!   prefix per log), so a commit block always has room for them (`commit_block.rs`).
//! * **Admission by log space** (`LogCore::has_room`): a handle joins a log only while it
//!   has room for the transaction being committed and the running one, so a transaction
//!   that may be chained never waits for log space at commit (a wait that could close a
//!   cycle: its partner, durable but not valid, holding back another log's tail).
//! * **Order of release**: a log releases a version only once no older version of the block
//!   is left in another log (`in_logs`), else recovery would replay the older image over the
//!   newer one already home — unless a newer *valid* version stays logged, which recovery
//!   replays last. So the newest valid version leaves last, and two logs sharing a block
//!   release together instead of in turns, one checkpoint each.
//!
//! A journal of one log never marks, stamps or waits for validity beyond durability, and
//! writes plain JBD2.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use cjfs_blockdev::TxId;

use crate::buffer::Tid;
use crate::lock_rank::{Rank, RankedMutex};
use crate::log_core::LogCore;
use crate::set::Shared;
use crate::transaction::Transaction;

/// How many logs the journal runs (per-core journaling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logs {
    /// One log: JBD2 and the CJFS presets.
    One,
    /// One log per online core (Z-Journal's default).
    PerCore,
    /// This many logs (the lab sweeps N, also beyond the core count).
    Count(u16),
}

impl Logs {
    /// The number of logs wanted on this machine.
    pub fn wanted(self) -> usize {
        match self {
            Logs::One => 1,
            Logs::PerCore => cores(),
            Logs::Count(n) => usize::from(n.max(1)),
        }
    }
}

impl std::fmt::Display for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Logs::One => write!(f, "1"),
            Logs::PerCore => write!(f, "cores"),
            Logs::Count(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for Logs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cores" => Ok(Logs::PerCore),
            _ => match s.parse::<u16>() {
                Ok(1) => Ok(Logs::One),
                Ok(n) if n >= 2 && usize::from(n) <= crate::superblock::MAX_LOG_AREAS + 1 => {
                    Ok(Logs::Count(n))
                }
                _ => Err(format!(
                    "logs={s}: a number of logs (1..={}) or `cores`",
                    crate::superblock::MAX_LOG_AREAS + 1
                )),
            },
        }
    }
}

thread_local! {
    /// This thread's log slot when there are more logs than cores (usize::MAX: none yet).
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Next thread slot handed out.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

/// The core the calling thread runs on.
pub(crate) fn current_cpu() -> usize {
    // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's state.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).unwrap_or(0)
}

/// Which log a handle joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The log of the core the handle starts on (Z-Journal §3.1); with more logs than cores,
    /// the thread's own slot.
    Core,
    /// The calling thread's own slot, whatever core it runs on (the notes' thread-affine
    /// option): a thread's blocks stay in one log when threads outnumber cores and migrate.
    Thread,
}

/// The cores of the machine, read once: `available_parallelism` reads the cgroup files on
/// every call (about twenty system calls, hundreds of µs on a loaded machine), far too much
/// for a path every handle start and every i-transaction takes.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |c| c.get()))
}

/// The log (of `n`) a handle started now joins.
pub(crate) fn admit(n: usize, how: Admission) -> usize {
    if n <= 1 {
        return 0;
    }
    let cores = cores();
    if how == Admission::Core && n <= cores {
        return current_cpu() % n;
    }
    SLOT.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed));
        }
        s.get() % n
    })
}

/// The slot (of `n`) of the calling thread, as admission picks a log: the file system's
/// core-aware allocation uses it so each log's transactions allocate from their own groups.
pub fn core_slot(n: usize, how: Admission) -> usize {
    admit(n, how)
}

/// Add `target` to `marks`, keeping only the newest transaction per log.
pub(crate) fn add_mark(marks: &mut Vec<TxId>, target: TxId) -> bool {
    match marks.iter_mut().find(|m| m.log == target.log) {
        Some(m) if m.tid >= target.tid => false,
        Some(m) => {
            m.tid = target.tid;
            true
        }
        None => {
            marks.push(target);
            true
        }
    }
}

/// A durable transaction that is not yet valid.
pub(crate) struct Pending {
    /// Its marks.
    pub marks: Vec<TxId>,
    /// The transaction (its waiters are woken when it becomes valid).
    pub tx: Arc<Transaction>,
    /// Blocks it revoked (their older checkpoint copies die once it is valid).
    pub revoked: Vec<u64>,
}

/// What [`Chains::durable`] decided: transactions that became valid (oldest first per log),
/// and transactions to commit because a durable one waits for them.
pub(crate) struct Advance {
    /// Newly valid transactions.
    pub valid: Vec<Pending>,
    /// Ancestors to commit now.
    pub commit: Vec<TxId>,
}

/// Stamps and validity across the logs of a journal.
///
/// Locks: `pending` (a leaf; nothing is taken under it). `valid` and `stamp` are atomics,
/// `valid[k]` written only under `pending` so it only grows.
pub(crate) struct Chains {
    /// The global commit-order stamp (a logical clock).
    stamp: AtomicU64,
    /// Per log: every transaction up to this id is committed and valid.
    valid: Vec<AtomicU64>,
    /// Per log: durable transactions that are not yet valid, by id. Lock: itself.
    pending: RankedMutex<Vec<BTreeMap<Tid, Pending>>>,
}

impl Chains {
    /// The chains of logs whose next transactions are `first_tids`.
    pub fn new(first_tids: &[Tid]) -> Self {
        Chains {
            stamp: AtomicU64::new(0),
            valid: first_tids.iter().map(|&t| AtomicU64::new(t.saturating_sub(1))).collect(),
            pending: RankedMutex::new(Rank::Leaf, first_tids.iter().map(|_| BTreeMap::new()).collect()),
        }
    }

    /// The next stamp.
    pub fn next_stamp(&self) -> u64 {
        self.stamp.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether transaction `id` is committed and valid.
    pub fn is_valid(&self, id: TxId) -> bool {
        self.valid.get(usize::from(id.log)).is_some_and(|v| v.load(Ordering::Acquire) >= id.tid)
    }

    /// Every transaction of log `log` up to this id is committed and valid.
    pub fn valid_upto(&self, log: usize) -> Tid {
        self.valid[log].load(Ordering::Acquire)
    }

    /// One log: transaction `tid` of `log` is durable, and so valid.
    pub fn set_valid(&self, log: usize, tid: Tid) {
        self.valid[log].fetch_max(tid, Ordering::AcqRel);
    }

    /// Transaction `p` of its log became durable: record it and recompute validity (the
    /// greatest fixpoint over every durable transaction not yet valid).
    pub fn durable(&self, p: Pending) -> Advance {
        let mut pend = self.pending.lock();
        let id = p.tx.id();
        pend[usize::from(id.log)].insert(id.tid, p);
        // hi[k]: the highest id of log k still possibly valid; starts at "every durable one".
        let mut hi: Vec<Tid> = pend
            .iter()
            .enumerate()
            .map(|(k, m)| {
                let v = self.valid_upto(k);
                // Durable transactions of a log become durable in order: the pending ones
                // are v+1, v+2, …; a gap ends what can be valid.
                let mut h = v;
                for &t in m.keys() {
                    if t != h + 1 {
                        break;
                    }
                    h = t;
                }
                h
            })
            .collect();
        loop {
            let mut changed = false;
            for (k, m) in pend.iter().enumerate() {
                for (&t, q) in m.range(..=hi[k]) {
                    if q.marks.iter().any(|mk| hi.get(usize::from(mk.log)).is_none_or(|&h| mk.tid > h)) {
                        hi[k] = t - 1;
                        changed = true;
                        break;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut adv = Advance { valid: Vec::new(), commit: Vec::new() };
        for (k, m) in pend.iter_mut().enumerate() {
            if hi[k] > self.valid_upto(k) {
                let rest = m.split_off(&(hi[k] + 1));
                adv.valid.extend(std::mem::replace(m, rest).into_values());
                self.valid[k].store(hi[k], Ordering::Release);
            }
        }
        // Whoever is still waiting waits for a transaction that has not committed: ask for it.
        for m in pend.iter() {
            for q in m.values() {
                for mk in &q.marks {
                    let durable_upto = self.valid_upto(usize::from(mk.log))
                        + pend.get(usize::from(mk.log)).map_or(0, |x| x.len() as u64);
                    if mk.tid > durable_upto && !adv.commit.contains(mk) {
                        adv.commit.push(*mk);
                    }
                }
            }
        }
        adv
    }

    /// Transactions of log `log` durable but not yet valid, and the uncommitted ancestors
    /// they wait for (a space-starved log forces their commit).
    pub fn blocked(&self, log: usize) -> Vec<TxId> {
        let pend = self.pending.lock();
        let mut out = Vec::new();
        for q in pend[log].values() {
            for mk in &q.marks {
                if !self.is_valid(*mk) && !out.contains(mk) {
                    out.push(*mk);
                }
            }
        }
        out
    }
}

/// `tx` writes a block that `owner`, another log's running or draining transaction, holds:
/// pin the owner (it cannot finish draining while this handle may change the block) and
/// mark both ways. `None` when the owner has drained already (it is taking its versions:
/// the caller waits for it to take this block's).
pub(crate) fn chain_to_owner(
    set: &Shared,
    tx: &Arc<Transaction>,
    owner: TxId,
) -> Option<(Arc<LogCore>, Arc<Transaction>)> {
    let log = set.log_core(owner.log)?;
    let otx = log.running_fast.load_full().filter(|t| t.tid == owner.tid)?;
    {
        let _g = log.updates_lock.lock();
        if otx.drained.load(Ordering::SeqCst) {
            return None;
        }
        otx.updates.fetch_add(1, Ordering::SeqCst);
    }
    add_mark(&mut tx.marks.lock(), owner);
    add_mark(&mut otx.marks.lock(), tx.id());
    set.stats.marks_bi.fetch_add(1, Ordering::Relaxed);
    Some((log, otx))
}

/// `tx` writes a block whose newest version `v` took: chain to it if it is another log's and
/// not yet valid (uni-directional).
pub(crate) fn chain_to_version(set: &Shared, tx: &Transaction, v: TxId) {
    if v.log != tx.log && !set.chains.is_valid(v) && add_mark(&mut tx.marks.lock(), v) {
        set.stats.marks_uni.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_uses_the_core_count_read_once() {
        let n = std::thread::available_parallelism().map_or(1, |c| c.get());
        assert_eq!(cores(), n);
        assert_eq!(cores(), n, "the cached figure stays");
        for logs in 1..=2 * n + 1 {
            assert!(admit(logs, Admission::Core) < logs);
            assert!(admit(logs, Admission::Thread) < logs);
        }
    }

    fn pending(log: u16, tid: Tid, marks: &[(u16, Tid)]) -> Pending {
        Pending {
            marks: marks.iter().map(|&(l, t)| TxId::new(l, t)).collect(),
            tx: Arc::new(Transaction::new(log, tid)),
            revoked: Vec::new(),
        }
    }

    fn ids(a: &Advance) -> Vec<(u16, Tid)> {
        let mut v: Vec<_> = a.valid.iter().map(|p| (p.tx.log, p.tx.tid)).collect();
        v.sort();
        v
    }

    #[test]
    fn a_bi_directional_pair_is_valid_only_together() {
        let c = Chains::new(&[1, 1]);
        let a = c.durable(pending(0, 1, &[(1, 1)]));
        assert!(ids(&a).is_empty());
        assert_eq!(a.commit, vec![TxId::new(1, 1)], "the missing partner is asked for");
        assert!(!c.is_valid(TxId::new(0, 1)));
        let a = c.durable(pending(1, 1, &[(0, 1)]));
        assert_eq!(ids(&a), vec![(0, 1), (1, 1)]);
        assert!(c.is_valid(TxId::new(0, 1)) && c.is_valid(TxId::new(1, 1)));
    }

    #[test]
    fn validity_is_a_prefix_per_log_and_transitive() {
        let c = Chains::new(&[1, 1, 1]);
        // (0,1) waits for (1,1), which waits for (2,1); (0,2) has no mark but follows (0,1).
        assert!(ids(&c.durable(pending(0, 1, &[(1, 1)]))).is_empty());
        assert!(ids(&c.durable(pending(0, 2, &[]))).is_empty());
        assert!(ids(&c.durable(pending(1, 1, &[(2, 1)]))).is_empty());
        assert_eq!(c.blocked(0), vec![TxId::new(1, 1)]);
        let a = c.durable(pending(2, 1, &[]));
        assert_eq!(ids(&a), vec![(0, 1), (0, 2), (1, 1), (2, 1)]);
        assert_eq!(c.valid_upto(0), 2);
    }

    #[test]
    fn marks_keep_the_newest_per_log() {
        let mut m = Vec::new();
        assert!(add_mark(&mut m, TxId::new(1, 4)));
        assert!(!add_mark(&mut m, TxId::new(1, 3)));
        assert!(add_mark(&mut m, TxId::new(1, 6)));
        assert!(add_mark(&mut m, TxId::new(2, 1)));
        assert_eq!(m, vec![TxId::new(1, 6), TxId::new(2, 1)]);
        assert_eq!("cores".parse::<Logs>(), Ok(Logs::PerCore));
        assert_eq!("1".parse::<Logs>(), Ok(Logs::One));
        assert_eq!("4".parse::<Logs>(), Ok(Logs::Count(4)));
        assert!("0".parse::<Logs>().is_err());
    }
}
