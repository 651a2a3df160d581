//! Checkpointing: write committed blocks to their home locations, flush, then move the log
//! tail forward and record it in the journal superblock.
//!
//! A checkpoint for log space (the log past its high-water mark, or a commit that found no
//! room) writes every durable transaction home, or with `CheckpointScope::Oldest` only the
//! oldest, as JBD2's `jbd2_log_do_checkpoint` does, leaving the newest in the log where a
//! revoke or a newer copy can still make their home writes unnecessary.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cjfs_blockdev::{BlockBuf, BlockKind, TxId, WriteTag};

use crate::buffer::{Buffer, Tid};

use crate::config::CheckpointScope;
use crate::error::JResult;
use crate::flush::flush;
use crate::log_core::LogCore;

/// Body of the background checkpoint thread: checkpoints when the log passes its high-water
/// mark, and when the journal has been idle for a commit interval with work pending.
pub(crate) fn checkpoint_thread(j: Arc<LogCore>) {
    let mut for_space;
    loop {
        {
            let mut st = j.state.lock();
            if st.shutdown || st.aborted.is_some() {
                return;
            }
            if !st.checkpoint_wanted {
                st.wait_for(&j.checkpoint_cv, j.set.config.commit_interval.max(Duration::from_millis(50)));
            }
            // Asked for (the log passed its high-water mark): free space; else the interval
            // passed: empty the log.
            for_space = std::mem::take(&mut st.checkpoint_wanted);
            if st.shutdown || st.aborted.is_some() {
                return;
            }
        }
        // Blocks to write home, or written but held in the log (several logs: by another
        // log's older copies, revokes or validity; a file's switch out of data journaling,
        // now durable): look again.
        let pending = !j.checkpoint_list.lock().is_empty()
            || (j.set.multi_log() && j.log.lock().ring.durable_prefix().is_some())
            || crate::unjournal::holds_to_release(&j);
        if pending && let Err(e) = run(&j, for_space) {
            j.abort(format!("checkpoint failed: {e}"));
            return;
        }
    }
}

/// Checkpoint every durable transaction at the head of the log (with several logs: every
/// valid one whose blocks may leave the log, see below).
///
/// Coherence checkpoint (Z-Journal §3.3), with several logs: a buffer's newest committed
/// version is written home only when its transaction is valid (versions of any log may be
/// written in any order: each holds every older change of its block). A transaction of this
/// log leaves the log only when, for each of its blocks, the newest version is valid and
/// home (or the block was freed): a newer version that a crash could still discard would
/// otherwise leave the block without this transaction's change. And a transaction that
/// revoked blocks stays until the other logs have released what they held then
/// (`hold_for_revoke`).
pub(crate) fn checkpoint(j: &LogCore) -> JResult<()> {
    run(j, false)
}

/// Checkpoint to free log space: with [`CheckpointScope::Oldest`] (one log) only the oldest
/// durable transactions, until the log is filled to half the high-water mark; else as
/// [`checkpoint`].
pub(crate) fn checkpoint_for_space(j: &LogCore) -> JResult<()> {
    run(j, true)
}

/// The newest transaction whose release, with every older one, brings the log down to half
/// the high-water mark (at least the oldest durable one); `None` when nothing is durable.
fn oldest_enough(j: &LogCore) -> Option<Tid> {
    let l = j.log.lock();
    let ring = &l.ring;
    let target = (ring.capacity() as f64 * j.set.config.checkpoint_high_water / 2.0) as u64;
    let mut used = ring.capacity() - ring.free();
    let mut upto = None;
    for s in ring.spans().iter().take_while(|s| s.durable) {
        used = used.saturating_sub(ring.distance(s.start, s.end));
        upto = Some(s.id);
        if used <= target {
            break;
        }
    }
    upto
}

fn run(j: &LogCore, for_space: bool) -> JResult<()> {
    let _g = j.checkpoint_lock.lock();
    let multi = j.set.multi_log();
    let hold_cap = if multi { revoke_hold_cap(j) } else { None };
    let Some(mut upto) = j.log.lock().ring.durable_prefix() else {
        return Ok(());
    };
    // One log only: with several, what may leave a log also depends on the other logs'.
    if for_space
        && !multi
        && j.set.config.checkpoint_scope == CheckpointScope::Oldest
        && let Some(o) = oldest_enough(j)
    {
        upto = upto.min(o);
    }
    let bugs = crate::planted::bugs(&j.set.config);
    // A file that left data journaling still needs its older copies until its switch is
    // durable (`unjournal.rs`).
    if let Some(c) = crate::unjournal::leave_cap(j, upto) {
        upto = upto.min(c);
    }
    if multi && !bugs.checkpoint_invalid {
        upto = upto.min(j.set.chains.valid_upto(usize::from(j.id)));
        if let Some(c) = hold_cap {
            upto = upto.min(c);
        }
    }
    let list = std::mem::take(&mut *j.checkpoint_list.lock());
    // Per block: the entries of this log (its transactions that committed a version).
    let mut by_block: HashMap<u64, (Arc<Buffer>, Vec<Tid>)> = HashMap::with_capacity(list.len());
    for (b, t) in list {
        by_block.entry(b.blocknr()).or_insert_with(|| (b, Vec::new())).1.push(t);
    }
    let mut writes: Vec<(u64, BlockBuf)> = Vec::new();
    let mut done = Vec::new();
    let mut keep: Vec<(Arc<Buffer>, Tid)> = Vec::new();
    let mut capped = upto;
    for (_, (b, tids)) in by_block {
        let js = b.jstate();
        let Some(c) = js.checkpoint.clone() else {
            continue; // written home by another checkpoint, or freed
        };
        drop(js);
        let writable =
            if multi { j.set.chains.is_valid(c.tx) || bugs.checkpoint_invalid } else { c.tx.tid <= upto };
        if writable {
            writes.push((b.blocknr(), c.image.clone()));
            keep.extend(tids.iter().filter(|&&t| t > upto).map(|&t| (b.clone(), t)));
            done.push((b, c.tx));
        } else {
            if multi && let Some(&first) = tids.iter().filter(|&&t| t <= upto).min() {
                capped = capped.min(first - 1);
                j.set.stats.not_valid_skips.fetch_add(1, Ordering::Relaxed);
            }
            keep.extend(tids.into_iter().map(|t| (b.clone(), t)));
        }
    }
    let mut upto = capped;
    if multi {
        upto = upto.min(older_copies_cap(j, upto));
    }
    if !keep.is_empty() {
        j.checkpoint_list.lock().extend(keep);
    }
    let n = writes.len() as u64;
    let tickets = crate::commit::submit_runs(&j.set, writes, WriteTag::kind(BlockKind::Metadata))?;
    cjfs_blockdev::wait_all(tickets)?;
    // The flush makes this run's home writes durable before the tail moves past their log
    // copies. Without any there is nothing to flush: every block of what leaves was written
    // home and flushed by an earlier run (which flushes before it returns), freed (its
    // revoke is in a durable transaction), or handed to a switch's ordered writes (held by
    // `leave_cap` until that switch is durable). JBD2 moves its tail with no flush of its
    // own too (`jbd2_update_log_tail` after a commit's flush).
    if n > 0 {
        flush(j)?;
    }
    for (b, t) in done {
        let mut js = b.jstate();
        if js.checkpoint.as_ref().is_some_and(|c| c.tx == t)
            && let Some(c) = js.checkpoint.take()
        {
            drop(js);
            j.set.shadow.put(c.image);
        }
    }
    // Nothing of this log may leave it yet (e.g. its oldest transaction is not yet valid).
    if upto < j.log.lock().ring.spans().front().map_or(u64::MAX, |s| s.id) {
        j.set.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        j.set.stats.checkpoint_blocks.fetch_add(n, Ordering::Relaxed);
        return Ok(());
    }
    // The new tail must be durable in the superblock before its blocks can be reused,
    // or a crash could leave the superblock pointing at overwritten log blocks.
    {
        let _sg = j.sb_write.lock();
        let (img, start) = j.log.lock().sb_image_after(upto);
        j.set.dev.write_block(
            j.area.map(0)?,
            BlockBuf::from(img),
            WriteTag::kind(BlockKind::JournalSuper),
        )?;
        flush(j)?;
        let mut l = j.log.lock();
        l.ring.release_upto(upto);
        l.sb_start_on_disk = start;
        j.note_free(&l);
    }
    if multi {
        j.revoke_holds.lock().retain(|(r, _)| *r > upto);
        {
            let mut st = j.stamped.lock();
            while st.front().is_some_and(|e| e.0 <= upto) {
                st.pop_front();
            }
        }
        let released: Vec<(Arc<Buffer>, Tid)> = {
            let mut q = j.in_log.lock();
            let mut out = Vec::new();
            while q.front().is_some_and(|e| e.1 <= upto) {
                if let Some((b, t, _)) = q.pop_front() {
                    out.push((b, t));
                }
            }
            out
        };
        for (b, t) in released {
            let id = j.tx_id(t);
            b.jstate().in_logs.retain(|(x, _)| *x != id);
        }
    }
    j.set.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
    j.set.stats.checkpoint_blocks.fetch_add(n, Ordering::Relaxed);
    Ok(())
}

/// The newest transaction of `j` (at most `upto`) that may leave the log without exposing an
/// older version of one of its blocks that another log still holds: recovery would replay
/// that older image over the newer one this log wrote home. The globally oldest version can
/// always go, so the logs never wait on one another in a cycle.
///
/// An older copy elsewhere does not hold a version back when a *newer valid* version of the
/// block stays logged (in another log, or in this one past `upto`): recovery replays every
/// valid version in stamp order, so that newer one lands last whatever older ones are left.
/// The newest valid version itself still waits for every older copy to leave, so at every
/// durable point either no older copy is logged or the newest valid one is. Without this the
/// logs of a shared directory release in turns, one checkpoint each, and writers wait for
/// log room (varmail-shared, `zjournal-cjfs`: 9 292 space waits in 2 s, see
/// `docs/results/zjournal/README.md`).
fn older_copies_cap(j: &LogCore, upto: Tid) -> Tid {
    if crate::planted::bugs(&j.set.config).release_past_older {
        return upto;
    }
    let entries: Vec<(Arc<Buffer>, Tid, u64)> =
        j.in_log.lock().iter().take_while(|e| e.1 <= upto).cloned().collect();
    for (b, t, stamp) in entries {
        let js = b.jstate();
        let older = js.in_logs.iter().any(|(x, s)| x.log != j.id && *s < stamp);
        if older && !newer_valid_stays(j, &js.in_logs, upto, stamp) {
            return t - 1;
        }
    }
    upto
}

/// Whether a valid version of the block stamped after `stamp` stays in a log once `j`
/// releases its transactions up to `upto` (`in_logs`: the block's logged versions).
fn newer_valid_stays(j: &LogCore, in_logs: &[(TxId, u64)], upto: Tid, stamp: u64) -> bool {
    in_logs.iter().any(|(x, s)| *s > stamp && (x.log != j.id || x.tid > upto) && j.set.chains.is_valid(*x))
}

/// Transaction `r` of `j`, which revoked blocks, is durable (this runs before it can become
/// valid, so no checkpoint sees it valid without its hold): it stays in its log until every
/// other log has released the transactions it had then (one of them may hold an older copy
/// of a freed block that only this revoke keeps recovery from replaying over the block's
/// next owner).
pub(crate) fn hold_for_revoke(j: &LogCore, r: Tid, stamp: u64) {
    let Some(logs) = j.set.logs_now() else { return };
    // Per other log, its newest transaction stamped before the revoke and not yet released
    // (later ones hold newer copies, which the revoke does not suppress at recovery anyway).
    let deps: Vec<TxId> = logs
        .iter()
        .filter(|l| l.id != j.id)
        .filter_map(|l| {
            let st = l.stamped.lock();
            st.iter().take_while(|(_, s)| *s < stamp).last().map(|&(t, _)| l.tx_id(t))
        })
        .collect();
    j.revoke_holds.lock().push((r, deps));
}

/// The newest transaction of `j` that its revoke holds let leave the log (`None`: no hold).
fn revoke_hold_cap(j: &LogCore) -> Option<Tid> {
    let holds = j.revoke_holds.lock().clone();
    let mut cap: Option<Tid> = None;
    for (r, deps) in holds {
        let held = deps.iter().any(|d| j.set.log_core(d.log).is_some_and(|l| l.released() < d.tid));
        if held {
            cap = Some(cap.map_or(r - 1, |c| c.min(r - 1)));
        }
    }
    cap
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use cjfs_blockdev::{BlockDevice, Device, EmulatedSsd, SsdPreset, TxId};

    use crate::area::JournalArea;
    use crate::buffer::BufferCache;
    use crate::config::JournalConfig;
    use crate::per_core::Logs;
    use crate::set::Journal;
    use crate::superblock::{format_journal_areas, read_log_areas};

    const BLK: u64 = 300;

    /// Two logs of 1 024 blocks on a RAM device, no timed commits or checkpoints.
    fn two_logs() -> (Arc<EmulatedSsd>, Vec<JournalArea>, Journal) {
        let ssd = Arc::new(EmulatedSsd::ram(8192));
        let dev: Device = ssd.clone();
        let inode = JournalArea::contiguous(4096, 2048);
        format_journal_areas(&*dev, &inode, [3; 16], true, 1024, &[1024]).expect("format");
        let (_, areas) = read_log_areas(&*dev, &inode).expect("areas");
        let mut cfg = JournalConfig { logs: Logs::Count(2), ..JournalConfig::zjournal() };
        cfg.commit_interval = Duration::from_secs(3600);
        let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
        (ssd, areas.clone(), Journal::open_logs(dev, areas, cache, cfg).expect("open"))
    }

    /// Write `byte` over block `BLK` in log `log` and wait until it is durable and valid.
    fn write_in(j: &Journal, log: usize, byte: u8) -> TxId {
        let buf = j.cache().read(BLK).expect("read");
        let mut h = j.start_in(log, 2).expect("start");
        h.get_write_access(&buf).expect("access");
        buf.write().fill(byte);
        h.dirty_metadata(&buf).expect("dirty");
        let tx = h.stop().expect("stop");
        j.commit_wait(tx).expect("commit");
        assert!(j.is_durable(tx));
        tx
    }

    /// What recovery makes of block `BLK` on a copy of the device as it is now.
    fn after_crash(ssd: &EmulatedSsd, areas: &[JournalArea]) -> u8 {
        let crash = EmulatedSsd::from_image(SsdPreset::ramdisk(), &ssd.image_bytes());
        crate::order_graph::recover_logs(&crash, areas, false, None).expect("recover");
        crash.read_block(BLK).expect("read")[100]
    }

    /// The report counts the logs that held transactions (`cjfs recover` names them instead
    /// of a tid range, which would mix two logs' unrelated tids).
    #[test]
    fn recovery_reports_how_many_logs_it_replayed() {
        let (ssd, areas, j) = two_logs();
        write_in(&j, 0, 1);
        let crash = EmulatedSsd::from_image(SsdPreset::ramdisk(), &ssd.image_bytes());
        let r = crate::order_graph::recover_logs(&crash, &areas, false, None).expect("recover");
        assert_eq!((r.transactions, r.logs_replayed), (1, 1));
        write_in(&j, 1, 2);
        let crash = EmulatedSsd::from_image(SsdPreset::ramdisk(), &ssd.image_bytes());
        let r = crate::order_graph::recover_logs(&crash, &areas, false, None).expect("recover");
        assert_eq!((r.transactions, r.logs_replayed), (2, 2));
        j.shutdown().expect("shutdown");
    }

    /// A version leaves its log past an older copy in another log when a newer valid version
    /// stays logged (recovery replays that one last), so logs sharing a block release it in
    /// one checkpoint each, not in turns; the newest valid version still waits for every
    /// older copy; and a crash at each step recovers the newest content.
    #[test]
    fn an_older_copy_elsewhere_holds_back_only_the_newest_version() {
        let (ssd, areas, j) = two_logs();
        let t1 = write_in(&j, 0, 1);
        let u1 = write_in(&j, 1, 2);
        let t2 = write_in(&j, 0, 3);
        // Log 1's version (2) has an older copy in log 0 (1) and a newer valid one (3) there.
        super::checkpoint(j.log_for_test(1)).expect("checkpoint log 1");
        assert!(!j.in_log(u1), "log 1 kept its version although a newer valid one stays logged");
        assert!(j.in_log(t1) && j.in_log(t2));
        assert_eq!(after_crash(&ssd, &areas), 3);
        super::checkpoint(j.log_for_test(0)).expect("checkpoint log 0");
        assert!(!j.in_log(t1) && !j.in_log(t2), "log 0 still holds versions with no older copy left");
        assert_eq!(after_crash(&ssd, &areas), 3);

        // Now log 1 holds the newest version and log 0 an older one: log 1 must wait.
        let t3 = write_in(&j, 0, 4);
        let u2 = write_in(&j, 1, 5);
        super::checkpoint(j.log_for_test(1)).expect("checkpoint log 1");
        assert!(j.in_log(u2), "the newest version left while an older copy stays in log 0");
        assert_eq!(after_crash(&ssd, &areas), 5);
        super::checkpoint(j.log_for_test(0)).expect("checkpoint log 0");
        assert!(!j.in_log(t3));
        super::checkpoint(j.log_for_test(1)).expect("checkpoint log 1");
        assert!(!j.in_log(u2));
        assert_eq!(after_crash(&ssd, &areas), 5);
        j.shutdown().expect("shutdown");
    }

    /// A checkpoint for space with `CheckpointScope::Oldest` writes home only the oldest
    /// transactions, until the log is down to half the high-water mark: the newest stay
    /// logged (their blocks not written home) and recovery still brings them back; a full
    /// checkpoint then empties the log.
    #[test]
    fn a_checkpoint_for_space_writes_only_the_oldest_transactions() {
        let ssd = Arc::new(EmulatedSsd::ram(8192));
        let dev: Device = ssd.clone();
        let inode = JournalArea::contiguous(4096, 1024);
        format_journal_areas(&*dev, &inode, [3; 16], true, 1024, &[]).expect("format");
        let (_, areas) = read_log_areas(&*dev, &inode).expect("areas");
        let mut cfg = JournalConfig::joj();
        assert_eq!(cfg.checkpoint_scope, crate::CheckpointScope::Oldest);
        cfg.commit_interval = Duration::from_secs(3600);
        let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
        let j = Journal::open_logs(dev.clone(), areas.clone(), cache, cfg).expect("open");
        let block = |i: u64, k: u64| BLK + i * 40 + k;
        // Ten transactions of 40 blocks each: about 420 of the log's 1 023 blocks.
        let txs: Vec<TxId> = (0..10u64)
            .map(|i| {
                let mut h = j.start(41).expect("start");
                for k in 0..40 {
                    let buf = j.cache().read(block(i, k)).expect("read");
                    h.get_write_access(&buf).expect("access");
                    buf.write().fill(i as u8 + 1);
                    h.dirty_metadata(&buf).expect("dirty");
                }
                let tx = h.stop().expect("stop");
                j.commit_wait(tx).expect("commit");
                tx
            })
            .collect();
        super::checkpoint_for_space(j.log_for_test(0)).expect("checkpoint for space");
        let (in_log, home): (Vec<bool>, Vec<u8>) = (0..10)
            .map(|i| (j.in_log(txs[i]), ssd.read_block(block(i as u64, 0)).expect("home")[100]))
            .unzip();
        // The log's 1 023 blocks down to at most 255: four of the ten transactions leave it.
        assert_eq!(in_log, [false, false, false, false, true, true, true, true, true, true]);
        assert_eq!(home, [1, 2, 3, 4, 0, 0, 0, 0, 0, 0], "only the released transactions went home");
        let crash = EmulatedSsd::from_image(SsdPreset::ramdisk(), &ssd.image_bytes());
        crate::order_graph::recover_logs(&crash, &areas, false, None).expect("recover");
        for i in 0..10u64 {
            assert_eq!(
                crash.read_block(block(i, 39)).expect("read")[0],
                i as u8 + 1,
                "transaction {i} after a crash"
            );
        }
        super::checkpoint(j.log_for_test(0)).expect("checkpoint");
        assert!(txs.iter().all(|&t| !j.in_log(t)), "a full checkpoint empties the log");
        assert_eq!(ssd.read_block(block(9, 0)).expect("home")[100], 10);
        j.shutdown().expect("shutdown");
    }
}
