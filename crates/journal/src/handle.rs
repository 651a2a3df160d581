//! Handles: one file system operation's membership in the running transaction.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cjfs_blockdev::TxId;

use crate::buffer::Buffer;
use crate::config::JournalKind;
use crate::error::{JResult, JournalError};
use crate::log_core::LogCore;
use crate::transaction::Transaction;

/// A handle on the running transaction, from [`crate::Journal::start`] to [`Handle::stop`]
/// (or drop). While any handle of a transaction is open the transaction cannot commit, so
/// hold handles briefly and never start a second handle while holding one.
pub struct Handle {
    pub(crate) j: Arc<LogCore>,
    pub(crate) tx: Option<Arc<Transaction>>,
    pub(crate) credits: u32,
    pub(crate) used: u32,
    /// When a timed handle started (one in [`HANDLE_TIME_SAMPLE`] per thread).
    pub(crate) started: Option<std::time::Instant>,
    /// Per-core journaling: other logs' transactions this handle pinned by writing a block
    /// they hold (a bi-directional chain); released at stop.
    pub(crate) pinned: Vec<(Arc<LogCore>, Arc<Transaction>)>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("tx", &self.tx.as_ref().map(|t| t.id()))
            .field("credits", &self.credits)
            .field("used", &self.used)
            .finish()
    }
}

/// One handle in this many, per thread, is timed for [`crate::JournalStats::handle_ns`].
pub const HANDLE_TIME_SAMPLE: u32 = 16;

thread_local! {
    /// Handles this thread started since its last timed one.
    static UNTIMED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether the handle starting now on this thread is one of the timed sample.
fn time_this_handle() -> bool {
    UNTIMED.with(|n| {
        let k = n.get();
        n.set((k + 1) % HANDLE_TIME_SAMPLE);
        k == 0
    })
}

/// Where a block stands for a handle about to file or revoke it ([`Handle::holder`]).
enum Holder {
    /// In this handle's transaction or one it pinned: the block belongs there.
    Filed(Arc<Transaction>),
    /// Another log's transaction finished draining and is taking its versions (stamped
    /// already): wait for it to take this block's.
    Taking,
    /// No other log holds it (this log's own rules apply).
    Free,
}

impl Handle {
    /// A handle of log `j` on transaction `tx`, with `credits` reserved.
    pub(crate) fn new(j: Arc<LogCore>, tx: Arc<Transaction>, credits: u32) -> Handle {
        let started = time_this_handle().then(std::time::Instant::now);
        Handle { j, tx: Some(tx), credits, used: 0, started, pinned: Vec::new() }
    }

    pub(crate) fn tx(&self) -> JResult<&Arc<Transaction>> {
        self.tx.as_ref().ok_or(JournalError::Shutdown)
    }

    /// The transaction this handle belongs to (a stopped handle's is log 0's id 0, which is
    /// always durable).
    pub fn tx_id(&self) -> TxId {
        self.tx.as_ref().map(|t| t.id()).unwrap_or_default()
    }

    /// Declare that `buf` (metadata, or data in data=journal mode) is about to be modified.
    /// Blocks while every allowed version of the buffer is in flight (a transaction conflict).
    pub fn get_write_access(&mut self, buf: &Arc<Buffer>) -> JResult<()> {
        let tx = self.tx()?.clone();
        let id = tx.id();
        let max_versions = self.j.set.config.max_versions.max(1);
        let multi_version = self.j.set.config.multi_version;
        let multi_log = self.j.set.multi_log();
        let mut conflicted = false;
        {
            let mut js = buf.jstate();
            loop {
                let holder = self.holder(&tx, js.running);
                if let Holder::Filed(_) = holder {
                    return Ok(());
                }
                if let Some(a) = self.j.aborted() {
                    return Err(JournalError::Aborted(a));
                }
                if let Holder::Taking = holder {
                    buf.wait_jstate(&mut js);
                    continue;
                }
                // A buffer still owned by an older transaction that has not taken its version
                // must wait; so must one whose versions are all in flight, unless versions
                // are copies (multi-version shadow paging: that is a commit-time conflict).
                if js.running.is_some() || (!multi_version && js.versions >= max_versions) {
                    if !conflicted {
                        conflicted = true;
                        tx.conflicts.fetch_add(1, Ordering::Relaxed);
                        self.j.set.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    let t0 = std::time::Instant::now();
                    buf.wait_jstate(&mut js);
                    self.j
                        .set
                        .stats
                        .conflict_wait_ns
                        .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    continue;
                }
                if multi_log && let Some(v) = js.last_version {
                    crate::per_core::chain_to_version(&self.j.set, &tx, v);
                }
                js.running = Some(id);
                break;
            }
        }
        let mut l = tx.lists.lock();
        l.buffers.push(buf.clone());
        // Journalling the block again cancels a revoke of it in the same transaction.
        l.revokes.remove(&buf.blocknr());
        drop(l);
        self.used += 1;
        Ok(())
    }

    /// Whether `owner` is another log's transaction this handle pinned (writes to its
    /// blocks go into it).
    fn pins(&self, owner: Option<TxId>) -> bool {
        owner.is_some_and(|o| self.pinned.iter().any(|(_, t)| t.id() == o))
    }

    /// Which transaction a block filed on `running` goes into for this handle (of `tx`),
    /// as far as the logs decide it; the caller holds the buffer's jstate. Another log's
    /// running (or still draining) transaction keeps the block and is pinned: a
    /// bi-directional chain, so the two are replayed together or not at all.
    fn holder(&mut self, tx: &Arc<Transaction>, running: Option<TxId>) -> Holder {
        let Some(owner) = running else {
            return Holder::Free;
        };
        if owner == tx.id() {
            return Holder::Filed(tx.clone());
        }
        if let Some((_, t)) = self.pinned.iter().find(|(_, t)| t.id() == owner) {
            return Holder::Filed(t.clone());
        }
        if owner.log == tx.log || !self.j.set.multi_log() {
            return Holder::Free;
        }
        match crate::per_core::chain_to_owner(&self.j.set, tx, owner) {
            Some(pin) => {
                let t = pin.1.clone();
                self.pinned.push(pin);
                Holder::Filed(t)
            }
            None => Holder::Taking,
        }
    }

    /// Declare a newly allocated metadata block that will be fully written. The buffer
    /// should come from [`crate::BufferCache::get_new`].
    pub fn get_create_access(&mut self, buf: &Arc<Buffer>) -> JResult<()> {
        self.get_write_access(buf)
    }

    /// Mark a buffer under write access as modified. Buffers are filed at write access, so
    /// this only checks the handle's use of the buffer.
    pub fn dirty_metadata(&mut self, buf: &Arc<Buffer>) -> JResult<()> {
        let tx = self.tx()?;
        let running = buf.jstate().running;
        if running != Some(tx.id()) && !self.pins(running) {
            return Err(JournalError::Corrupt(format!(
                "block {} dirtied without write access",
                buf.blocknr()
            )));
        }
        Ok(())
    }

    /// Mark an ordered data buffer dirty: it is written home before this transaction's
    /// commit record (data=ordered).
    pub fn dirty_data(&mut self, buf: &Arc<Buffer>) -> JResult<()> {
        self.file_data(buf, true)
    }

    /// Mark a data buffer dirty that overwrites data already on disk inside the file's
    /// durable size (not newly allocated, not exposed by a size change, no logged image):
    /// this transaction's commit writes it home like ordered data, but its commit record
    /// need not wait for it — one flush after both makes both durable. ext4 orders only
    /// newly allocated blocks (`ext4_map_blocks` adds the inode to the transaction only for
    /// `EXT4_MAP_NEW`); a crash before the flush may keep either version of an overwritten
    /// sector, as for any write not yet synced. Only the single-I/O commit makes use of it.
    pub fn dirty_overwrite(&mut self, buf: &Arc<Buffer>) -> JResult<()> {
        self.file_data(buf, false)
    }

    /// File `buf` on this transaction's ordered list (`strict`: before its commit record).
    fn file_data(&mut self, buf: &Arc<Buffer>, strict: bool) -> JResult<()> {
        let tx = self.tx()?.clone();
        let mut js = buf.jstate();
        js.dirty = true;
        if js.ordered != Some(tx.id()) {
            js.ordered = Some(tx.id());
            js.ordered_strict = strict;
            drop(js);
            if strict {
                tx.strict_ordered.fetch_add(1, Ordering::Relaxed);
            }
            tx.lists.lock().ordered.push(buf.clone());
            let n = tx.ordered_count.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= self.j.set.config.max_ordered_blocks {
                self.j.request_commit(tx.tid);
            }
        } else if strict && !js.ordered_strict {
            js.ordered_strict = true;
            tx.strict_ordered.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Revoke `blocknr`: a freed metadata block whose logged copies must not be replayed.
    /// The buffer's pending checkpoint copy is dropped when this transaction becomes durable
    /// (see `flush::mark_durable`), so stale metadata never overwrites the block's next
    /// owner; until then a crash may still need that copy written home.
    ///
    /// With several logs a revoke is chained like a write: recovery applies a revoke to the
    /// copies stamped at or before it, so another log's running transaction that still holds
    /// the block (and would be stamped later) is pinned and loses the block, both marked;
    /// another log's version not yet valid gets a uni-directional mark.
    pub fn revoke(&mut self, blocknr: u64) -> JResult<()> {
        let tx = self.tx()?.clone();
        let multi_log = self.j.set.multi_log();
        if let Some(buf) = self.j.set.cache.peek(blocknr) {
            let mut js = buf.jstate();
            // The block leaves whichever transaction would log it: this one, or another log's
            // (pinned, so the two are replayed together or not at all and that log's copy can
            // never be stamped after this revoke).
            let holder = loop {
                let holder = self.holder(&tx, js.running);
                if let Holder::Filed(t) = holder {
                    break Some(t);
                }
                if let Some(a) = self.j.aborted() {
                    return Err(JournalError::Aborted(a));
                }
                if let Holder::Taking = holder {
                    // Then the revoke orders after the version it takes.
                    buf.wait_jstate(&mut js);
                    continue;
                }
                if multi_log && let Some(v) = js.last_version {
                    crate::per_core::chain_to_version(&self.j.set, &tx, v);
                }
                break None;
            };
            if let Some(h) = holder {
                // Off the list before `running` clears (lists rank below jstate), so no
                // other handle can file the block again in between and lose it.
                h.lists.lock().buffers.retain(|b| b.blocknr() != blocknr);
                js.running = None;
            }
        }
        if self.j.set.config.kind == JournalKind::Jbd2 {
            tx.lists.lock().revokes.insert(blocknr);
        }
        Ok(())
    }

    /// Credits used so far (buffers filed by this handle).
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Stop the handle. Returns the transaction, which [`crate::Journal::commit_wait`]
    /// takes to make this operation durable.
    pub fn stop(mut self) -> JResult<TxId> {
        let id = self.tx_id();
        self.release();
        Ok(id)
    }

    fn release(&mut self) {
        if let Some(tx) = self.tx.take() {
            if self.used > self.credits {
                log::debug!("handle used {} of {} credits", self.used, self.credits);
            }
            // Unused credits go back to the transaction (JBD2's jbd2_journal_stop): only the
            // buffers actually filed keep counting against its size limit.
            let unused = self.credits.saturating_sub(self.used);
            if unused > 0 {
                let _ = tx
                    .credits
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| Some(c.saturating_sub(unused)));
            }
            if let Some(t) = self.started {
                let stats = &self.j.set.stats;
                stats.handle_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                stats.handles_timed.fetch_add(1, Ordering::Relaxed);
            }
            if tx.updates.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.j.updates_done();
            }
        }
        for (log, owner) in self.pinned.drain(..) {
            if owner.updates.fetch_sub(1, Ordering::AcqRel) == 1 {
                log.updates_done();
            }
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.release();
    }
}
