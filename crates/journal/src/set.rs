//! The journal as a set of logs over one buffer cache.
//!
//! [`Shared`] is what every log of the set shares: the device, the buffer cache and each
//! buffer's journal state, the order of home writes of one block (`home_write_lock`), the
//! fdatasync data step, the shadow pool, the statistics (every log adds to the same
//! counters) and abort fan-out (one log's failure stops them all). [`Journal`] is the public
//! object: the shared part, the logs (each a [`LogCore`] with its own transactions, threads
//! and log space) and admission, which picks the log a handle joins.
//!
//! A set of one log (every preset but per-core journaling's) is exactly JBD2. With several
//! logs (`per_core.rs`), admission picks the log of the calling core, [`Shared::chains`]
//! orders the logs' transactions, a caller waits for its transaction to be *valid* (durable
//! with everything it is chained to), and fsync commits every log in parallel. Transactions
//! are named by [`TxId`] (log and id) everywhere outside a log's own code, so a second log
//! cannot be mistaken for the first.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;

use cjfs_blockdev::{Device, TxId};

use crate::area::JournalArea;
use crate::buffer::{Buffer, BufferCache};
use crate::config::{CommitMode, JournalConfig, JournalKind};
use crate::error::{JResult, JournalError};
use crate::handle::Handle;
use crate::lock_rank::{Rank, RankedMutex};
use crate::log::LogState;
use crate::log_core::LogCore;
use crate::stats::{JournalStats, StatsSnapshot};
use crate::superblock::{INCOMPAT_CJFS_IJOURNAL, INCOMPAT_CJFS_LOGS, JournalSuperblock};

/// What every log of the journal shares.
///
/// Locks: `home_write_lock` (see its field), `aborted` (a leaf). Everything else is
/// immutable, atomic or locked inside (the cache, the shadow pool).
pub(crate) struct Shared {
    /// The device every log and every home location is on.
    pub dev: Device,
    /// The buffer cache; each buffer's journal state names transactions by [`TxId`].
    pub cache: Arc<BufferCache>,
    /// The configuration in use (for `auto`, what it resolved to).
    pub config: JournalConfig,
    /// Statistics of all logs together.
    pub stats: JournalStats,
    /// Held from taking a live image of data buffers until its writes are submitted (commit
    /// and fdatasync, of any log), so two writes of one block reach the device in the order
    /// their images were taken: an older image submitted last would overwrite the newer one.
    pub home_write_lock: RankedMutex<()>,
    /// Shadow pages for versions.
    pub shadow: crate::shadow::ShadowPool,
    /// Stamps and validity across the logs (with one log: durability).
    pub chains: crate::per_core::Chains,
    /// Compound flush across logs (used with several logs).
    pub shared_flush: crate::compound_flush::SharedFlush,
    /// Blocks in the next window of a commit's ordered data, adapted to the device's
    /// measured speed (atomic; see `commit::ORDERED_WINDOW_TARGET`).
    pub ordered_window: std::sync::atomic::AtomicUsize,
    /// Callers holding new handles back (JBD2's `j_barrier_count`): while non-zero a handle
    /// start waits on `barrier_cv`. Written under `barrier_lock`; read lock-free by the
    /// handle fast path (SeqCst, paired with the update count as `closed` is).
    pub updates_barrier: std::sync::atomic::AtomicU32,
    /// Pairs with `barrier_cv`. A leaf.
    pub barrier_lock: RankedMutex<()>,
    /// Wakes handle starts held back by `updates_barrier`.
    pub barrier_cv: crate::lock_stat::WaitCv,
    /// The first abort cause. Lock: itself (a leaf, released before the fan-out).
    aborted: RankedMutex<Option<String>>,
    /// The logs, for abort fan-out (weak: each log holds the set). Set once at open.
    logs: OnceLock<Vec<Weak<LogCore>>>,
}

impl Shared {
    /// Wait while a caller holds new handles back ([`Journal::empty`]).
    pub fn wait_barrier(&self) {
        let mut g = self.barrier_lock.lock();
        while self.updates_barrier.load(Ordering::SeqCst) > 0 {
            g.wait(&self.barrier_cv);
        }
    }

    /// Whether the journal runs several logs (per-core journaling).
    pub fn multi_log(&self) -> bool {
        self.logs.get().is_some_and(|l| l.len() > 1)
    }

    /// Every log of the set (`None` while opening or closing).
    pub fn logs_now(&self) -> Option<Vec<Arc<LogCore>>> {
        self.logs.get()?.iter().map(Weak::upgrade).collect()
    }

    /// Log `id` of the set (`None` past the last, or while closing).
    pub fn log_core(&self, id: cjfs_blockdev::LogId) -> Option<Arc<LogCore>> {
        self.logs.get()?.get(usize::from(id))?.upgrade()
    }

    /// Abort every log: the first cause is kept and handed to each, and every waiter of
    /// every log and every writer waiting for a buffer version sees it.
    pub fn abort(&self, cause: String) {
        let first = {
            let mut a = self.aborted.lock();
            if a.is_none() {
                log::error!("journal aborted: {cause}");
            }
            a.get_or_insert(cause).clone()
        };
        for log in self.logs.get().into_iter().flatten().filter_map(Weak::upgrade) {
            log.abort_log(&first);
        }
        for b in self.cache.collect(|j| j.versions > 0 || j.running.is_some()) {
            b.notify();
        }
    }
}

/// The journal: a set of logs sharing one buffer cache. Dropping it (or
/// [`Journal::shutdown`]) commits what is running, checkpoints everything and marks every
/// log empty.
pub struct Journal {
    shared: Arc<Shared>,
    /// The logs; index = [`TxId::log`]. Immutable.
    logs: Vec<Arc<LogCore>>,
    /// Every log's commit, flush and checkpoint threads. Lock: itself.
    threads: RankedMutex<Vec<JoinHandle<()>>>,
    /// Why the `auto` preset chose the configuration in use (`None` for a named preset).
    /// Immutable.
    choice: Option<String>,
    /// The private incompat bits the primary journal carries because of this journal's use
    /// (`cjfs_logs`: extra logs are open for writing; `cjfs_ijournal`: the file system's
    /// ijournal areas may hold i-transactions), a mask. Written under log 0's `sb_write`.
    claimed: AtomicU32,
    /// The first handle must set the private bit: extra logs exist and the journal logs
    /// (a journal of kind `None` or a read-only one never writes a log). Immutable.
    claim_needed: bool,
    /// Single-I/O commit: the features found at open, put back by a clean close (`None`:
    /// the journal commits in two steps). Immutable.
    single_io_plain: Option<crate::superblock::JournalFeatures>,
    /// The single-I/O features are on disk (written by the first handle's start, before
    /// anything is logged). Written under log 0's `sb_write`.
    single_io_on: AtomicBool,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("config", &self.shared.config.name)
            .field("logs", &self.logs.len())
            .finish()
    }
}

impl Journal {
    /// Open the journal whose only log is `area` (which must have been recovered:
    /// `s_start == 0`) and start its threads.
    pub fn open(
        dev: Device,
        area: JournalArea,
        cache: Arc<BufferCache>,
        config: JournalConfig,
    ) -> JResult<Journal> {
        Self::open_logs(dev, vec![area], cache, config)
    }

    /// Open the journal whose logs are `areas` (the primary journal first, then the extra
    /// log areas its superblock lists; every one recovered) and start their threads. Nothing
    /// is written until the first handle starts; with extra logs, that first start marks the
    /// primary journal with the private `cjfs_logs` bit, which a clean shutdown clears.
    /// No areas at all is a file system without a journal, for a configuration of kind
    /// [`JournalKind::None`] only.
    pub fn open_logs(
        dev: Device,
        areas: Vec<JournalArea>,
        cache: Arc<BufferCache>,
        config: JournalConfig,
    ) -> JResult<Journal> {
        // A file system without a journal (`has_journal` off) runs a journal of kind `None`,
        // which writes metadata home at commit and never touches a log: it gets an empty area
        // (any log write would fail to map, not land on the file system) and a log state that
        // exists only in memory.
        let no_log = areas.is_empty() && config.kind == JournalKind::None;
        if (areas.is_empty() && !no_log) || areas.len() > usize::from(u16::MAX) {
            return Err(JournalError::Corrupt(format!("a journal of {} logs", areas.len())));
        }
        // Run as many logs as the configuration wants and the image has; the others stay
        // as they are (empty: every log was recovered before opening).
        let mut areas = areas;
        let wanted = if config.kind == JournalKind::Jbd2 { config.logs.wanted() } else { 1 };
        if wanted > areas.len() && !no_log {
            log::warn!(
                "journal {}: {wanted} logs wanted, the image has {}: running {} (make more with `cjfs mkfs --log-area`)",
                config.name,
                areas.len(),
                areas.len()
            );
        }
        areas.truncate(wanted.max(1));
        let mut states = Vec::with_capacity(areas.len());
        if no_log {
            areas.push(JournalArea::new([]));
            let maxlen = 1024;
            states.push(LogState::new(crate::superblock::JournalSuperblock::new_v2(maxlen, [0; 16], false))?);
        }
        for (i, area) in areas.iter().enumerate().skip(states.len()) {
            let raw = dev.read_block(area.map(0)?)?;
            let sb = JournalSuperblock::decode(&raw[..], area.len())?;
            if sb.s_start != 0 && config.kind == JournalKind::Jbd2 {
                return Err(JournalError::Corrupt(format!("log {i} needs recovery before it can be opened")));
            }
            states.push(LogState::new(sb)?);
        }
        let (mut config, choice) = config.resolve_for(&dev.caps());
        if let Some(why) = &choice {
            log::info!("journal preset auto: {why}");
        }
        if config.dual_thread && config.dual_thread_barrier_only && !dev.caps().barrier {
            log::info!("journal {}: the device has no cache barrier: serial commit", config.name);
            config.dual_thread = false;
        }
        let single_io = config.kind == JournalKind::Jbd2 && config.commit == CommitMode::SingleIo;
        if single_io && areas.len() > 1 {
            return Err(JournalError::Incompatible(format!(
                "journal {}: the single-I/O commit runs one log ({} wanted)",
                config.name,
                areas.len()
            )));
        }
        if config.kind != JournalKind::Jbd2 {
            // Nothing is committed (read-only, no journal): nothing to sum.
            config.ordered_sums = false;
        }
        if config.ordered_sums && (!single_io || config.ijournal.on()) {
            return Err(JournalError::Incompatible(format!(
                "journal {}: ordered-data checksums need the single-I/O commit and no iJournaling \
                 (whose fsync writes data home outside a commit)",
                config.name
            )));
        }
        if single_io && config.dual_thread && !(config.use_barriers && dev.caps().barrier) {
            // Without a barrier nothing keeps transaction n+1's single write from persisting
            // while n's is torn, which recovery takes for corruption: each waits for the
            // flush before it.
            log::info!("journal {}: single-I/O commit without a cache barrier: serial commit", config.name);
            config.dual_thread = false;
        }
        let single_io_plain = single_io.then(|| {
            let found = states.first().map(|l| l.sb.features()).unwrap_or_default();
            crate::single_io::plain_features(found, config.csum_v3)
        });
        if single_io && let Some(l) = states.first_mut() {
            l.keep_head = true;
        }
        config.log_flush = config.log_flush.resolve(&dev.caps());
        let first_tids: Vec<u64> = states.iter().map(|l| u64::from(l.sb.s_sequence.max(1))).collect();
        let shared = Arc::new(Shared {
            chains: crate::per_core::Chains::new(&first_tids),
            shared_flush: crate::compound_flush::SharedFlush::new(),
            ordered_window: (config.ordered_window_blocks as usize).max(1).into(),
            updates_barrier: 0.into(),
            barrier_lock: RankedMutex::new(Rank::Leaf, ()),
            barrier_cv: crate::lock_stat::WaitCv::new(crate::lock_stat::WaitSite::LockedTx),
            dev,
            shadow: crate::shadow::ShadowPool::new(config.shadow_pool, cache.block_size()),
            cache,
            config,
            stats: JournalStats::default(),
            home_write_lock: RankedMutex::new(Rank::HomeWriteLock, ()),
            aborted: RankedMutex::new(Rank::Leaf, None),
            logs: OnceLock::new(),
        });
        let logs: Vec<Arc<LogCore>> = areas
            .into_iter()
            .zip(states)
            .enumerate()
            .map(|(i, (area, log))| Arc::new(LogCore::new(shared.clone(), i as u16, area, log)))
            .collect();
        let _ = shared.logs.set(logs.iter().map(Arc::downgrade).collect());
        let claim_needed = logs.len() > 1 && shared.config.kind == JournalKind::Jbd2;
        let journal = Journal {
            shared,
            logs,
            threads: RankedMutex::new(Rank::Leaf, Vec::new()),
            choice,
            claimed: AtomicU32::new(0),
            claim_needed,
            single_io_plain,
            single_io_on: AtomicBool::new(false),
        };
        for log in &journal.logs {
            journal.spawn_threads(log)?;
        }
        Ok(journal)
    }

    /// Start a log's commit, flush and checkpoint threads.
    fn spawn_threads(&self, log: &Arc<LogCore>) -> JResult<()> {
        for (name, f) in [
            ("cjfs-commit", crate::commit::commit_thread as fn(Arc<LogCore>)),
            ("cjfs-flush", crate::flush::flush_thread),
            ("cjfs-ckpt", crate::checkpoint::checkpoint_thread),
        ] {
            let name = if log.id == 0 { name.to_string() } else { format!("{name}-{}", log.id) };
            let l = log.clone();
            let t = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || f(l))
                .map_err(|e| JournalError::Aborted(format!("cannot start {name} thread: {e}")))?;
            self.threads.lock().push(t);
        }
        Ok(())
    }

    /// The log that commits `id`.
    fn log(&self, id: TxId) -> JResult<&Arc<LogCore>> {
        self.logs.get(usize::from(id.log)).ok_or_else(|| {
            JournalError::Corrupt(format!("transaction {id} names log {} of {}", id.log, self.logs.len()))
        })
    }

    /// Admission: the log a new handle joins (its thread's or its core's, see `per_core::admit`). A set of
    /// one log admits every handle to it.
    fn admit(&self) -> &Arc<LogCore> {
        &self.logs[crate::per_core::admit(self.logs.len(), self.shared.config.admission)]
    }

    /// Start a handle with `credits` blocks reserved.
    pub fn start(&self, credits: u32) -> JResult<Handle> {
        if self.claim_needed && self.claimed.load(Ordering::Acquire) & INCOMPAT_CJFS_LOGS == 0 {
            self.set_private_bit(INCOMPAT_CJFS_LOGS, true)?;
        }
        if self.single_io_plain.is_some() && !self.single_io_on.load(Ordering::Acquire) {
            self.set_single_io_features()?;
        }
        self.admit().start(credits)
    }

    /// Write `img`, the primary journal's superblock image whose log starts at `start`, and
    /// flush; on success the log knows that start is on disk. The caller holds `sb_write`.
    fn write_primary_sb(&self, img: Vec<u8>, start: u64) -> JResult<()> {
        let log0 = &self.logs[0];
        let tag = cjfs_blockdev::WriteTag::kind(cjfs_blockdev::BlockKind::JournalSuper);
        self.shared
            .dev
            .write_block(log0.area.map(0)?, cjfs_blockdev::BlockBuf::from(img), tag)
            .and_then(|_| self.shared.dev.flush())?;
        log0.log.lock().sb_start_on_disk = start;
        Ok(())
    }

    /// Put the single-I/O features (see `single_io.rs`) into the journal superblock and make
    /// it durable, before the first handle can log anything: the log is empty (recovered at
    /// open, nothing committed since), so no transaction of another format is in it. The
    /// superblock points at the head of the log from now on (`LogState::keep_head`).
    fn set_single_io_features(&self) -> JResult<()> {
        let log0 = &self.logs[0];
        let r = {
            let _g = log0.sb_write.lock();
            if self.single_io_on.load(Ordering::Acquire) || log0.closed.load(Ordering::Acquire) {
                return Ok(());
            }
            let (img, start) = {
                let mut l = log0.log.lock();
                if !l.ring.spans().is_empty() {
                    return Err(JournalError::Corrupt(
                        "single-I/O features asked for while the log holds transactions".into(),
                    ));
                }
                let mut f = crate::single_io::features(l.sb.features());
                if self.shared.config.ordered_sums {
                    // Stock tools must refuse a crashed log whose last commit they could not
                    // check (`ordered_sums.rs`); every transaction before this open is
                    // confirmed.
                    f.incompat |= crate::superblock::INCOMPAT_CJFS_OSUM;
                    let before = l.next_seq.saturating_sub(1);
                    l.sb.osum_confirmed = before as u32;
                    log0.osum_confirmed.store(before, Ordering::Release);
                }
                crate::single_io::set_features(&mut l.sb, f);
                (l.sb_image(), l.sb_position().0)
            };
            let r = self.write_primary_sb(img, start);
            if r.is_ok() {
                self.single_io_on.store(true, Ordering::Release);
            }
            r
        };
        if let Err(e) = r {
            self.shared.abort(format!("writing the journal superblock's single-I/O features failed: {e}"));
            return Err(e);
        }
        Ok(())
    }

    /// Close a single-I/O journal whose log is empty: the features found at open back and
    /// `s_start` = 0 (an empty log), made durable.
    fn close_single_io(&self) -> JResult<()> {
        let (Some(plain), log0) = (self.single_io_plain, &self.logs[0]) else { return Ok(()) };
        let _g = log0.sb_write.lock();
        let img = {
            let mut l = log0.log.lock();
            if !l.ring.spans().is_empty() {
                return Ok(());
            }
            crate::single_io::set_features(&mut l.sb, plain);
            l.sb_image_empty()
        };
        let tag = cjfs_blockdev::WriteTag::kind(cjfs_blockdev::BlockKind::JournalSuper);
        self.shared.dev.write_block(log0.area.map(0)?, cjfs_blockdev::BlockBuf::from(img), tag)?;
        self.shared.dev.flush()?;
        log0.log.lock().sb_start_on_disk = 0;
        self.single_io_on.store(false, Ordering::Release);
        Ok(())
    }

    /// Start a handle in log `log` (not its core's): for tests and the crash harness, which
    /// put two threads' operations into chosen logs.
    pub fn start_in(&self, log: usize, credits: u32) -> JResult<Handle> {
        let l = self.logs.get(log).ok_or_else(|| {
            JournalError::Corrupt(format!("log {log} of a journal of {} logs", self.logs.len()))
        })?;
        if self.claim_needed && self.claimed.load(Ordering::Acquire) & INCOMPAT_CJFS_LOGS == 0 {
            self.set_private_bit(INCOMPAT_CJFS_LOGS, true)?;
        }
        l.start(credits)
    }

    /// Set the private incompat bit `cjfs_ijournal` in the primary journal's superblock and
    /// make it durable, before the file system writes its first i-transaction: the kernel and
    /// e2fsck then refuse the image instead of replaying the normal journal alone (which
    /// would drop the fsyncs the i-transactions served). A clean [`Journal::shutdown`] clears
    /// it with the others, once every log is empty (every i-transaction is then older than
    /// the last durable commit). Cheap once set.
    pub fn claim_ijournal(&self) -> JResult<()> {
        if self.claimed.load(Ordering::Acquire) & INCOMPAT_CJFS_IJOURNAL != 0 {
            return Ok(());
        }
        if self.shared.config.kind != JournalKind::Jbd2 {
            return Err(JournalError::Aborted(
                "a journal that logs nothing cannot hold i-transactions".into(),
            ));
        }
        self.set_private_bit(INCOMPAT_CJFS_IJOURNAL, true)?;
        if self.claimed.load(Ordering::Acquire) & INCOMPAT_CJFS_IJOURNAL == 0 {
            // The journal closed meanwhile: no record may be written.
            return Err(JournalError::Aborted("the journal is closed".into()));
        }
        Ok(())
    }

    /// Set (or clear) a private incompat bit (`cjfs_logs`, `cjfs_ijournal`) in the primary
    /// journal's superblock and make it durable: set before anything can reach an extra log
    /// or an ijournal area, so the kernel and e2fsck refuse the image instead of replaying the
    /// primary journal alone; cleared once every log is empty. A journal that logs nothing
    /// (no journal, read-only) never sets one.
    fn set_private_bit(&self, bit: u32, on: bool) -> JResult<()> {
        let log0 = &self.logs[0];
        let r = {
            let _g = log0.sb_write.lock();
            let have = self.claimed.load(Ordering::Acquire);
            // Setting it on a closed journal (shut down, aborted) would mark a clean image:
            // the start that follows fails anyway.
            if (have & bit != 0) == on || (on && log0.closed.load(Ordering::Acquire)) {
                return Ok(());
            }
            let (img, start) = {
                let mut l = log0.log.lock();
                if on {
                    l.sb.s_feature_incompat |= bit;
                } else {
                    l.sb.s_feature_incompat &= !bit;
                }
                (l.sb_image(), l.sb_position().0)
            };
            let r = self.write_primary_sb(img, start);
            if r.is_ok() {
                if on {
                    self.claimed.fetch_or(bit, Ordering::AcqRel);
                } else {
                    self.claimed.fetch_and(!bit, Ordering::AcqRel);
                }
            }
            r
        };
        // Aborted with nothing held: abort takes every log's state and buffers' jstate.
        if let Err(e) = r {
            self.shared.abort(format!("writing the journal superblock's private feature bit failed: {e}"));
            return Err(e);
        }
        Ok(())
    }

    /// Log `i` itself, for the crate's tests that drive one log's checkpoint.
    #[cfg(test)]
    pub(crate) fn log_for_test(&self, i: usize) -> &Arc<LogCore> {
        &self.logs[i]
    }

    /// Number of logs (1: the primary journal only).
    pub fn log_count(&self) -> usize {
        self.logs.len()
    }

    /// Ask for transaction `id` to be committed (no wait).
    pub fn commit(&self, id: TxId) -> JResult<()> {
        self.log(id)?.request_commit(id.tid);
        Ok(())
    }

    /// Wait until `id` is durable.
    pub fn wait(&self, id: TxId) -> JResult<()> {
        self.log(id)?.wait(id.tid)
    }

    /// Commit `id` and wait for it (fsync). With several logs, as Z-Journal's fsync: every
    /// log's running transaction is asked to commit too (in parallel, each log by its own
    /// thread) — the file's updates may be in any of them — and the caller waits until `id`
    /// is valid, which also waits for every transaction it is chained to.
    pub fn commit_wait(&self, id: TxId) -> JResult<()> {
        let log = self.log(id)?;
        if self.logs.len() > 1 {
            for l in self.logs.iter().filter(|_| self.shared.config.fsync_all_logs) {
                if let Some(t) = l.running_fast.load().as_ref()
                    && t.handles.load(Ordering::Relaxed) > 0
                    && !(l.id == id.log && t.tid == id.tid)
                {
                    l.request_commit(t.tid);
                }
            }
            // The caller commits its own transaction inline where the mode allows (no
            // thread hand-off), then waits until it is valid.
            let inline = !self.shared.config.dual_thread
                && !log.is_durable(id.tid)
                && crate::commit::commit_inline(log, id.tid)?;
            if !inline {
                log.request_commit(id.tid);
            }
            return log.wait(id.tid);
        }
        log.commit_wait(id.tid)
    }

    /// Whether transaction `id` is durable (with several logs: and valid, so recovery keeps
    /// it; an unknown log's never is).
    pub fn is_durable(&self, id: TxId) -> bool {
        self.shared.chains.is_valid(id)
    }

    /// Ordered-data checksums (`ordered_sums.rs`): whether a write of the data buffer `buf`
    /// by transaction `cur` must be journaled rather than go in place — the block's home
    /// contents are covered by another transaction's sums not yet confirmed, or are exposed
    /// data another transaction is about to sum. Always false without the technique.
    pub fn sum_pending(&self, buf: &Buffer, cur: TxId) -> bool {
        crate::ordered_sums::pending(&self.shared, buf, Some(cur)).is_some()
    }

    /// Whether transaction `id` has not yet left its log: it is still running or
    /// committing, or durable with its blocks not all checkpointed (the log's tail has not
    /// passed it). A block it logged may still be written home by a checkpoint.
    pub fn in_log(&self, id: TxId) -> bool {
        let Some(log) = self.logs.get(usize::from(id.log)) else {
            return false;
        };
        if !self.is_durable(id) {
            return true;
        }
        log.log.lock().ring.spans().front().is_some_and(|s| s.id <= id.tid)
    }

    /// Commit whatever is running in every log and wait for everything to be durable (sync).
    pub fn force(&self) -> JResult<()> {
        let tids: Vec<u64> = self.logs.iter().map(|l| l.current_tid()).collect();
        if self.logs.len() > 1 {
            // Every log commits in parallel; then each is waited for.
            for (l, &t) in self.logs.iter().zip(&tids) {
                l.request_commit(t);
            }
        }
        for (l, &t) in self.logs.iter().zip(&tids) {
            l.commit_wait(t)?;
        }
        Ok(())
    }

    /// The transaction a handle started now would join (or the last one, if none runs).
    pub fn current_tx(&self) -> TxId {
        let log = self.admit();
        log.tx_id(log.current_tid())
    }

    /// Write every committed block home and free every log.
    pub fn checkpoint(&self) -> JResult<()> {
        // With several logs one log's tail may wait for another's (an older copy of a block,
        // a revoke held until the others released what they had): go round until every log
        // is empty or a round releases nothing.
        let spans = || -> usize { self.logs.iter().map(|l| l.log.lock().ring.spans().len()).sum() };
        let mut left = usize::MAX;
        loop {
            for log in &self.logs {
                crate::checkpoint::checkpoint(log)?;
            }
            let now = spans();
            if now == 0 || now >= left {
                break;
            }
            left = now;
        }
        Ok(())
    }

    /// Empty the journal (JBD2's `jbd2_journal_lock_updates` + `jbd2_journal_flush`): commit
    /// everything, write every committed block home and free every log, so that no journaled
    /// copy of any block is left to replay over what is later written in place (a file
    /// leaving data journaling). The caller holds no handle.
    ///
    /// With one log, [`Journal::force`] then [`Journal::checkpoint`] suffice: the checkpoint
    /// frees every transaction committed by then, and new handles only add later ones.
    /// With several logs a transaction leaves its log only once the newest version of each
    /// of its blocks is valid and home; under a steady stream of updates to a shared block
    /// (an inode table block) that is never true, and the checkpoint rounds end with old
    /// copies still in a log. So new handles are held back meanwhile, as ext4 does for
    /// every journal-mode switch, and the rounds go on until every log is empty.
    pub fn empty(&self) -> JResult<()> {
        if self.logs.len() == 1 {
            self.force()?;
            // Another file's switch out of data journaling, newer than the force, would cap
            // the checkpoint (`unjournal.rs`).
            crate::unjournal::break_holds(&self.logs[0])?;
            return self.checkpoint();
        }
        {
            let _g = self.shared.barrier_lock.lock();
            self.shared.updates_barrier.fetch_add(1, Ordering::SeqCst);
        }
        // A start that passed the barrier check under a log's state lock has joined its
        // transaction once that lock is free: every handle is now in a transaction `force`
        // commits.
        for l in &self.logs {
            drop(l.state.lock());
        }
        let r = self.force().and_then(|()| self.checkpoint_until_empty());
        {
            let _g = self.shared.barrier_lock.lock();
            self.shared.updates_barrier.fetch_sub(1, Ordering::SeqCst);
            self.shared.barrier_cv.notify_all();
        }
        r
    }

    /// Checkpoint rounds until every log is empty; with new handles held back a round that
    /// frees nothing (after a retry, for a checkpoint thread's round in between) means a
    /// log cannot be emptied, reported as such.
    fn checkpoint_until_empty(&self) -> JResult<()> {
        let spans = || -> Vec<usize> { self.logs.iter().map(|l| l.log.lock().ring.spans().len()).collect() };
        let mut left = spans();
        let mut stuck = 0;
        while left.iter().any(|&n| n > 0) {
            for log in &self.logs {
                crate::checkpoint::checkpoint(log)?;
            }
            let now = spans();
            if now.iter().sum::<usize>() < left.iter().sum::<usize>() {
                stuck = 0;
            } else {
                stuck += 1;
                if stuck > 3 {
                    return Err(JournalError::Corrupt(format!(
                        "the journal cannot be emptied: with every transaction committed, its logs \
                         still hold {now:?} transaction(s)"
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            left = now;
        }
        Ok(())
    }

    /// Count one fsync or fdatasync call of the file system on top, however it is served
    /// (the denominator of [`crate::StatsSnapshot::flushes_per_fsync`]).
    pub fn count_fsync(&self) {
        self.shared.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
    }

    /// The journal's part of an fsync through a commit: commit transaction `tx` and wait for
    /// it unless it is already durable, then make the data buffers `bufs` durable.
    pub fn fsync(&self, tx: TxId, bufs: &[Arc<Buffer>]) -> JResult<()> {
        if !self.is_durable(tx) {
            self.commit_wait(tx)?;
        }
        self.sync_data(bufs)
    }

    /// Make the data buffers `bufs` durable (the data part of fsync/fdatasync, once the
    /// metadata they need is durable): write the dirty ones home, wait for the writes other
    /// paths made of the rest — a commit's ordered-data write is durable with its
    /// transaction, another fdatasync's write once it completed and a flush followed —
    /// and flush. A buffer found clean is not yet durable just because it is clean.
    pub fn sync_data(&self, bufs: &[Arc<Buffer>]) -> JResult<()> {
        if bufs.is_empty() {
            return Ok(());
        }
        // Failed-write counts first: a concurrent fsync's write of one of these buffers that
        // fails from here on leaves it dirty again, and this caller then writes it itself.
        let mut errors: Vec<u32> = bufs.iter().map(|b| b.jstate().write_errors).collect();
        // The common case (data already written by the commit fsync waited for) takes no
        // global lock.
        if bufs.iter().any(|b| b.jstate().dirty) {
            crate::commit::write_data(&self.shared, bufs)?;
        }
        // The newest ordered-data writer per log: waiting for it covers the older ones.
        let mut wait: Vec<Option<TxId>> = vec![None; self.logs.len()];
        let mut flush = false;
        let mut todo: Vec<usize> = (0..bufs.len()).collect();
        for round in 0.. {
            let mut again = Vec::new();
            for &i in &todo {
                let b = &bufs[i];
                let mut js = b.jstate();
                if crate::commit::wait_home_writes(b, &mut js, errors[i]) {
                    errors[i] = js.write_errors;
                    again.push(i);
                    continue;
                }
                match js.home_tx {
                    None => flush = true,
                    Some(id) => {
                        let slot = &mut wait[usize::from(id.log)];
                        if slot.is_none_or(|w| w.tid < id.tid) {
                            *slot = Some(id);
                        }
                    }
                }
            }
            if again.is_empty() {
                break;
            }
            if round >= 8 {
                return Err(JournalError::DataWrite(format!(
                    "{} block(s) of this fsync, written by concurrent fsyncs, failed {round} times",
                    again.len()
                )));
            }
            let retry: Vec<Arc<Buffer>> = again.iter().map(|&i| bufs[i].clone()).collect();
            crate::commit::write_data(&self.shared, &retry)?;
            todo = again;
        }
        for id in wait.into_iter().flatten() {
            if !self.is_durable(id) {
                self.commit_wait(id)?;
            }
        }
        if flush {
            self.flush_device()?;
        }
        Ok(())
    }

    /// Write the data buffers `bufs` home now, with `extra` blocks (`(device block, image)`,
    /// outside the buffer cache: an i-transaction's extent blocks) in the same batch, and
    /// wait for the writes: the data step of an fsync served without a commit
    /// (iJournaling). Dirty buffers are written; a clean one whose last home write was a
    /// commit's ordered-data write, not yet durable, is written again (that write may still
    /// be in flight, and waiting for its commit to be durable is the wait the technique
    /// exists to avoid); writes of another fsync still in flight are waited for.
    ///
    /// The writes are FUA (each durable when it completes) when they form at most
    /// `fua_runs` device requests, else plain writes the caller makes durable with one flush
    /// (see [`DataWritten::fua`]; 0: never FUA). Even after FUA writes, a buffer another
    /// path wrote and this call only waited for is durable only after a flush
    /// ([`DataWritten::others`]).
    pub fn write_data_with(
        &self,
        bufs: &[Arc<Buffer>],
        extra: Vec<(u64, cjfs_blockdev::BlockBuf)>,
        fua_runs: usize,
    ) -> JResult<DataWritten> {
        if bufs.is_empty() && extra.is_empty() {
            return Ok(DataWritten { blocks: 0, others: 0, fua: fua_runs > 0, requests: 0 });
        }
        let chains = &self.shared.chains;
        let errors: Vec<u32> = bufs.iter().map(|b| b.jstate().write_errors).collect();
        let mut fua = fua_runs > 0;
        let mut requests = 0;
        let (tickets, written) = {
            let _hw = self.shared.home_write_lock.lock();
            let mut writes = Vec::new();
            let mut written = Vec::new();
            for b in bufs {
                let mut js = b.jstate();
                if js.dirty || js.home_tx.is_some_and(|t| !chains.is_valid(t)) {
                    js.dirty = false;
                    js.home_tx = None;
                    js.home_writes += 1;
                    drop(js);
                    writes.push((b.blocknr(), b.snapshot()));
                    written.push(b.clone());
                }
            }
            if writes.is_empty() && extra.is_empty() {
                (Vec::new(), written)
            } else {
                self.shared.stats.data_blocks.fetch_add(writes.len() as u64, Ordering::Relaxed);
                let kind = cjfs_blockdev::WriteTag::kind;
                let mut reqs = crate::commit::run_requests(writes, kind(cjfs_blockdev::BlockKind::Data));
                reqs.extend(crate::commit::run_requests(
                    extra,
                    kind(cjfs_blockdev::BlockKind::JournalLogged),
                ));
                fua = reqs.len() <= fua_runs;
                requests = reqs.len();
                for r in &mut reqs {
                    r.fua = fua;
                }
                let submitted: JResult<Vec<_>> = self.shared.dev.submit_batch(reqs).map_err(Into::into);
                match submitted {
                    Ok(t) => (t, written),
                    Err(e) => {
                        crate::commit::done_writing(&written, true);
                        return Err(e);
                    }
                }
            }
        };
        let r = cjfs_blockdev::wait_all(tickets);
        crate::commit::done_writing(&written, r.is_err());
        r?;
        let mut others = 0;
        let mut retry = Vec::new();
        for (b, &seen) in bufs.iter().zip(&errors).filter(|(b, _)| !written.iter().any(|w| Arc::ptr_eq(w, b)))
        {
            let mut js = b.jstate();
            if js.home_writes > 0 {
                others += 1;
            }
            if crate::commit::wait_home_writes(b, &mut js, seen) {
                retry.push(b.clone());
            }
        }
        // Another fsync's write of these failed and left them dirty: write them now (plain
        // writes; counted with `others`, so the caller flushes).
        if !retry.is_empty() {
            crate::commit::write_data(&self.shared, &retry)?;
            others += retry.len() as u64;
        }
        Ok(DataWritten { blocks: written.len() as u64, others, fua, requests })
    }

    /// Every transaction up to this id is durable (the primary log's; with several logs,
    /// valid).
    pub fn durable_upto(&self) -> u64 {
        self.shared.chains.valid_upto(0)
    }

    /// Flush the device's cache (counts as a journal flush).
    pub fn flush_device(&self) -> JResult<()> {
        self.shared.stats.flushes.fetch_add(1, Ordering::Relaxed);
        self.shared.dev.flush().map_err(|e| {
            self.shared.abort(format!("device flush failed: {e}"));
            JournalError::from(e)
        })
    }

    /// Abort every log from outside (the file system found that another writer took the
    /// device): every later handle, commit and waiter fails with `cause`.
    pub fn abort(&self, cause: String) {
        self.shared.abort(cause);
    }

    /// The abort cause, if aborted (every log has it: abort fans out).
    pub fn aborted(&self) -> Option<String> {
        self.logs.iter().find_map(|l| l.aborted())
    }

    /// Statistics of all logs together.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// With the `auto` preset: which preset it chose for this device, and why.
    pub fn choice(&self) -> Option<&str> {
        self.choice.as_deref()
    }

    /// The configuration in use (for `auto`, the preset it resolved to).
    pub fn config(&self) -> &JournalConfig {
        &self.shared.config
    }

    /// Largest number of credits one handle may ask for (of the smallest log).
    pub fn max_tx_blocks(&self) -> u32 {
        self.logs.iter().map(|l| l.max_tx_blocks).min().unwrap_or(0)
    }

    /// The buffer cache the journal works on.
    pub fn cache(&self) -> &Arc<BufferCache> {
        &self.shared.cache
    }

    /// Commit everything, checkpoint, mark every log empty and stop the threads.
    pub fn shutdown(&self) -> JResult<()> {
        let mut result = Ok(());
        if self.aborted().is_none() {
            result = self.force().and_then(|_| self.checkpoint());
        }
        for log in &self.logs {
            log.stop();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // Every log empty: the image is plain ext4 again.
        if result.is_ok()
            && self.aborted().is_none()
            && self.logs.iter().all(|l| l.log.lock().ring.spans().is_empty())
        {
            for bit in [INCOMPAT_CJFS_IJOURNAL, INCOMPAT_CJFS_LOGS] {
                if result.is_ok() && self.claimed.load(Ordering::Acquire) & bit != 0 {
                    result = self.set_private_bit(bit, false);
                }
            }
        }
        if result.is_ok() && self.aborted().is_none() && self.single_io_on.load(Ordering::Acquire) {
            result = self.close_single_io();
        }
        if let Some(a) = self.aborted() {
            return Err(JournalError::Aborted(a));
        }
        result
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        if !self.threads.lock().is_empty() {
            let _ = self.shutdown();
        }
    }
}
/// What [`Journal::write_data_with`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataWritten {
    /// Blocks written.
    pub blocks: u64,
    /// Blocks found written by another path, not yet known durable (a flush makes them so).
    pub others: u64,
    /// The writes were FUA: durable already, no flush needed for them.
    pub fua: bool,
    /// Device requests the writes took (contiguous blocks share one).
    pub requests: usize,
}
