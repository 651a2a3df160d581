//! The commit thread: locks the running transaction, waits for its handles, takes a
//! version of every buffer, opens the next running transaction, writes ordered data home
//! and the versions to the log, then hands the transaction to the flush thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cjfs_blockdev::{
    BlockBuf, BlockKind, IoTicket, WriteRequest, WriteTag, raise_io_thread_priority, set_low_timer_slack,
};

use cjfs_blockdev::TxId;

use crate::buffer::{Buffer, Tid};
use crate::config::JournalKind;
use crate::error::{JResult, JournalError};
use crate::flush::FlushJob;
use crate::log_core::LogCore;
use crate::set::Shared;
use crate::transaction::{Transaction, TxState};
use crate::work_queue::Dispatch;

/// Body of the commit thread.
pub(crate) fn commit_thread(j: Arc<LogCore>) {
    set_low_timer_slack();
    raise_io_thread_priority();
    while let Some(tx) = next_to_commit(&j) {
        let _g = j.commit_lock.lock();
        // An inline committer may have taken it meanwhile.
        if tx.state() != TxState::Running {
            continue;
        }
        if let Err(e) = commit_one(&j, &tx) {
            j.abort(format!("commit of transaction {} failed: {e}", tx.tid));
            return;
        }
    }
}

/// Serial modes: commit `tid` in the caller's thread if it is the running transaction and
/// no commit is in progress, saving the two thread wake-ups of a handoff. Returns whether
/// it committed.
pub(crate) fn commit_inline(j: &Arc<LogCore>, tid: Tid) -> JResult<bool> {
    let Some(_g) = j.commit_lock.try_lock() else { return Ok(false) };
    let tx = {
        let st = j.state.lock();
        match &st.running {
            Some(t) if t.tid == tid && t.state() == TxState::Running && st.committing.is_empty() => t.clone(),
            _ => return Ok(false),
        }
    };
    match commit_one(j, &tx) {
        Ok(()) => Ok(true),
        Err(e) => {
            j.abort(format!("commit of transaction {} failed: {e}", tx.tid));
            Err(e)
        }
    }
}

/// Wait until the running transaction is due (requested, full, or older than the commit
/// interval). `None` on shutdown or abort.
fn next_to_commit(j: &LogCore) -> Option<Arc<Transaction>> {
    let per_core = j.set.config.dispatch == Dispatch::PerCore;
    let mut st = j.state.lock();
    loop {
        // Read before looking for work: a request or wake-up after this moves it on.
        let seen = j.requests.bell.generation();
        if per_core {
            // Drain the per-core request slots.
            st.commit_request = st.commit_request.max(j.requests.highest());
        }
        if st.aborted.is_some() || st.shutdown {
            return None;
        }
        let mut timeout = j.set.config.commit_interval;
        let mut wake_on_request = true;
        if let Some(t) = st.running.clone() {
            let has_work = t.handles.load(Ordering::Relaxed) > 0;
            let age = t.started.elapsed();
            let requested = st.commit_request >= t.tid;
            if requested && let Some(wait) = crate::coalescing::pace(j, &t) {
                timeout = wait;
                wake_on_request = false;
            } else if requested || (has_work && age >= j.set.config.commit_interval) {
                return Some(t);
            } else {
                timeout =
                    j.set.config.commit_interval.saturating_sub(age).max(std::time::Duration::from_millis(1));
            }
        }
        if per_core {
            let requested = st.commit_request;
            drop(st);
            let has_work = || wake_on_request && j.requests.highest() > requested;
            j.requests.bell.sleep(seen, has_work, Some(Instant::now() + timeout));
            st = j.state.lock();
        } else {
            st.wait_for(&j.commit_cv, timeout);
        }
    }
}

/// Wait until every transaction before `tx` is durable (serial JBD2 commit).
fn wait_previous_durable(j: &LogCore, tid: Tid) -> JResult<()> {
    // Polling waits: wait on the predecessor's own completion (one log: durable is valid;
    // with several logs validity may come later than durability, so the log's condvar).
    let poll = j.set.config.wait != crate::polling::WaitMode::Condvar && !j.set.multi_log();
    let mut st = j.state.lock();
    while st.durable + 1 < tid && st.committing.iter().any(|t| t.tid < tid) {
        if let Some(a) = &st.aborted {
            return Err(JournalError::Aborted(a.clone()));
        }
        match st.committing.iter().rfind(|t| t.tid < tid).cloned() {
            Some(prev) if poll => {
                drop(st);
                let budget = crate::polling::spin_budget(j.set.config.wait, j.timing.durable_estimate());
                prev.done.wait(budget, || j.closed.load(Ordering::SeqCst));
                st = j.state.lock();
            }
            _ => st.wait(&j.done_cv),
        }
    }
    Ok(())
}

fn commit_one(j: &Arc<LogCore>, tx: &Arc<Transaction>) -> JResult<()> {
    if !j.set.config.dual_thread && !crate::planted::bugs(&j.set.config).single_io_overlap {
        wait_previous_durable(j, tx.tid)?;
    }
    let t_lock = Instant::now();
    // Until its span is reserved, admission keeps room for it (per-core journaling).
    j.unreserved.store(u64::from(tx.credits.load(Ordering::Acquire)) + 4, Ordering::Release);
    crate::coalescing::lock_up(j, tx)?;
    // Stamped after the last handle stopped and before any version is taken: a writer of
    // another log that sees one of its versions drains later, with a later stamp.
    let stamp = j.set.chains.next_stamp();
    tx.stamp.store(stamp, Ordering::SeqCst);
    if j.set.multi_log() {
        j.stamped.lock().push_back((tx.tid, stamp));
    }
    let lists = std::mem::take(&mut *tx.lists.lock());
    let versions = take_versions(j, tx, lists.buffers)?;
    let marks: Vec<TxId> = tx.marks.lock().clone();
    // Commit what this transaction is chained to at the same time, in the other logs'
    // threads, rather than after it (it is valid, and its waiters woken, only with them).
    for m in &marks {
        if !j.set.chains.is_valid(*m)
            && let Some(l) = j.set.log_core(m.log)
        {
            l.request_commit(m.tid);
        }
    }
    let marks = if crate::planted::bugs(&j.set.config).drop_marks { Vec::new() } else { marks };
    let in_flight = {
        let mut st = j.state.lock();
        if st.running.as_ref().is_some_and(|r| r.tid == tx.tid) {
            st.running = None;
            j.running_fast.store(None);
            // Starters waiting with polling waits all wake (spinners at once) at the switch
            // below; finding no running transaction they would queue on `state` to open one
            // (the herd the call-site lock table showed: 84 % of lock waits, varmail-split
            // at 32 threads). Open it for them first, so they join lock-free.
            if tx.starters.load(Ordering::SeqCst) > 0 {
                j.open_running(&mut st);
            }
        }
        tx.set_state(TxState::Committing);
        st.committing.push_back(tx.clone());
        j.publish_committing(&st);
        st.committing.len() as u64
    };
    j.locked_cv.notify_all();
    j.set.stats.in_flight_sum.fetch_add(in_flight, Ordering::Relaxed);
    j.set.stats.max_in_flight.fetch_max(in_flight, Ordering::Relaxed);

    let mut revokes: Vec<u64> = lists.revokes.into_iter().collect();
    revokes.sort_unstable();
    let revoked = revokes.clone();
    if crate::planted::bugs(&j.set.config).drop_revokes {
        revokes.clear();
    }
    if j.set.config.kind == JournalKind::Jbd2 && j.set.config.commit == crate::config::CommitMode::SingleIo {
        return crate::single_io::commit(j, tx, &lists.ordered, versions, &revokes, revoked, t_lock);
    }
    let (reqs, commit) = match j.set.config.kind {
        JournalKind::None => {
            let home: Vec<(u64, BlockBuf)> = versions.iter().map(|(b, v)| (b.blocknr(), v.clone())).collect();
            (run_requests(home, WriteTag::tx(BlockKind::Metadata, tx.id())), None)
        }
        // Every transaction gets a commit block, even one with nothing to log (as JBD2's
        // commit does): recovery walks transaction ids in sequence, so an id consumed without
        // one would end the log before every later transaction (found by
        // `an_empty_transaction_does_not_end_the_log`: an fsynced block lost after an empty
        // handle's commit); and with several logs another log's transaction may be chained
        // to it.
        JournalKind::Jbd2 => {
            let chain = j.set.multi_log().then(|| crate::commit_block::ChainMarks {
                log: j.id,
                stamp: tx.stamp.load(Ordering::SeqCst),
                marks: marks.iter().map(|m| (m.log, m.tid as u32)).collect(),
            });
            let (r, c) = log_requests(j, tx.tid, &versions, &revokes, chain.as_ref())?;
            (r, Some(c))
        }
    };
    j.unreserved.store(0, Ordering::Release);
    // Ordered data and log blocks go to the device together before anything waits (JBD2
    // submits both, then waits); one batch lets the device merge the contiguous log run.
    // A large ordered-data list goes out in windows, each submitted once the one before it
    // completed, as the kernel's block layer never lets one writer queue a commit's worth of
    // data ahead of every other request: a window bounds how long another writer's I/O (an
    // fsync served by an i-transaction, a read) waits behind this commit's data. The last
    // window goes out with the log blocks. Its size follows the device: about
    // `ORDERED_WINDOW_TARGET` of writing, at most `ordered_window_blocks`.
    let max_window = (j.set.config.ordered_window_blocks as usize).max(1);
    let mut ordered: &[Arc<Buffer>] = &lists.ordered;
    loop {
        let window = j.set.ordered_window.load(Ordering::Relaxed).clamp(1, max_window);
        if ordered.len() <= window {
            break;
        }
        let (head, rest) = ordered.split_at(window);
        let t0 = Instant::now();
        let (submitted, in_flight) = {
            let _hw = j.set.home_write_lock.lock();
            let w = ordered_requests(&j.set, head, Some(tx.id()));
            (j.set.dev.submit_batch(w.reqs)?, w.in_flight)
        };
        cjfs_blockdev::wait_all(submitted)?;
        wait_in_flight(&j.set, &in_flight)?;
        j.set.ordered_window.store(next_window(window, t0.elapsed(), max_window), Ordering::Relaxed);
        ordered = rest;
    }
    let (n_data, mut tickets, data_in_flight) = {
        let _hw = j.set.home_write_lock.lock();
        let w = ordered_requests(&j.set, ordered, Some(tx.id()));
        (w.reqs.len(), j.set.dev.submit_batch(w.reqs.into_iter().chain(reqs).collect())?, w.in_flight)
    };
    let data_tickets: Vec<IoTicket> = tickets.drain(..n_data).collect();
    // Order-preserving dispatch (BarrierFS, CJFS): with a cache barrier the commit thread
    // sends the commit block right behind the transaction's blocks, without waiting for
    // their transfer; the flush thread then only waits and flushes.
    let mut commit_ticket = None;
    if let Some((lblk, img)) = &commit
        && j.set.config.dual_thread
        && j.set.config.use_barriers
        && j.set.dev.caps().barrier
        && !crate::planted::bugs(&j.set.config).commit_before_data
    {
        crate::flush::ensure_sb_start(j)?;
        if !crate::planted::bugs(&j.set.config).skip_preflush {
            crate::flush::barrier(j)?;
        }
        let dev_blk = j.area.map(*lblk)?;
        commit_ticket = Some(j.set.dev.submit(WriteRequest::one(
            dev_blk,
            img.clone(),
            WriteTag::tx(BlockKind::JournalCommit, tx.id()),
        ))?);
    }
    tx.set_state(TxState::Flushing);
    let job = FlushJob {
        tx: tx.clone(),
        tickets,
        data_tickets,
        data_in_flight,
        commit: if commit_ticket.is_some() { None } else { commit },
        commit_ticket,
        versions,
        had_data: !lists.ordered.is_empty(),
        single_io: false,
        t_lock,
        handed: Instant::now(),
        revoked,
        marks,
    };
    j.timing.commit_took(t_lock.elapsed());
    if j.set.config.dual_thread {
        j.flush_queue.push(job);
    } else {
        // Serial commit: the commit thread runs the flush step itself, as JBD2's single
        // kjournald thread does; no handoff to wait for.
        crate::flush::complete(j, job)?;
    }
    Ok(())
}

/// Take a version (copy) of every buffer still filed on `tx`.
fn take_versions(
    j: &LogCore,
    tx: &Transaction,
    bufs: Vec<Arc<Buffer>>,
) -> JResult<Vec<(Arc<Buffer>, BlockBuf)>> {
    let max = j.set.config.max_versions.max(1);
    let multi_log = j.set.multi_log();
    // The single-I/O commit runs on the fsync path, so its versions share the buffer's image
    // instead of copying it: a later writer copies it (`Buffer::write`) only if it writes the
    // block while the version is still referenced, and a block written once and freed (a
    // rollback journal's) is never copied. SATA rollback 1000-op cells: 280 blocks a sync.
    let share = j.set.config.commit == crate::config::CommitMode::SingleIo;
    let t0 = Instant::now();
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs {
        let mut js = b.jstate();
        if js.running != Some(tx.id()) {
            continue; // revoked after being filed
        }
        while js.versions >= max {
            if let Some(a) = j.aborted() {
                return Err(JournalError::Aborted(a));
            }
            b.wait_jstate(&mut js);
        }
        let v = if share { b.snapshot() } else { j.set.shadow.copy_of(&b) };
        js.versions += 1;
        js.running = None;
        js.last_version = Some(tx.id());
        drop(js);
        if multi_log {
            // Another log's writer may wait for this version to be taken.
            b.notify();
        }
        out.push((b, v));
    }
    j.set.stats.copy_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    if !share {
        j.set.stats.shadow_copies.fetch_add(out.len() as u64, Ordering::Relaxed);
        j.set.stats.bytes_copied.fetch_add((out.len() * j.set.cache.block_size()) as u64, Ordering::Relaxed);
    }
    Ok(out)
}

/// Write the dirty buffers among `bufs` home and wait: an fdatasync's own data writes (no
/// transaction). Each written buffer counts in `home_writes` until its write completes, so
/// a concurrent fdatasync that finds it clean waits for the write before its flush.
pub(crate) fn write_data(set: &Shared, bufs: &[Arc<Buffer>]) -> JResult<()> {
    let (submitted, written) = loop {
        crate::ordered_sums::settle(set, bufs, None, false)?;
        let _hw = set.home_write_lock.lock();
        if crate::ordered_sums::any_unsettled(set, bufs, None) {
            continue;
        }
        let w = ordered_requests(set, bufs, None);
        if w.reqs.is_empty() {
            return Ok(());
        }
        break (set.dev.submit_batch(w.reqs), w.written);
    };
    let r = submitted.and_then(cjfs_blockdev::wait_all);
    done_writing(&written, r.is_err());
    Ok(r?)
}

/// An fsync-path data write of `written` ended: each buffer's count of writes in flight
/// drops; after a failure the buffers are dirty again, so the next fsync writes them
/// rather than finding them clean and reporting data durable that never reached the device.
/// A buffer the journal has taken meanwhile (its block now logged: metadata, or a file
/// switched to data journaling) is not: its live image must not go home outside the log.
pub(crate) fn done_writing(written: &[Arc<Buffer>], failed: bool) {
    for b in written {
        let mut js = b.jstate();
        js.home_writes -= 1;
        if failed {
            js.write_errors = js.write_errors.wrapping_add(1);
            if js.running.is_none() && js.versions == 0 && js.checkpoint.is_none() {
                js.dirty = true;
                js.home_tx = None;
            }
        }
        drop(js);
        b.notify();
    }
}

/// Wait until no fsync-path write of `b` is in flight. Returns whether a write that
/// failed since `errors` (the buffer's `write_errors` when the caller looked) left it dirty
/// again: then the caller must write it itself before calling it durable.
pub(crate) fn wait_home_writes(
    b: &Buffer,
    js: &mut crate::lock_rank::RankedGuard<'_, crate::buffer::JState>,
    errors: u32,
) -> bool {
    while js.home_writes > 0 {
        b.wait_jstate(js);
    }
    js.write_errors != errors && js.dirty
}

/// The home writes [`ordered_requests`] decided on.
pub(crate) struct HomeWrites {
    /// One request per device-contiguous run of the dirty buffers.
    pub reqs: Vec<WriteRequest>,
    /// An fdatasync's own writes: the buffers written, counted in `home_writes`.
    pub written: Vec<Arc<Buffer>>,
    /// A commit's: clean buffers whose fsync-path write is still in flight, with their
    /// `write_errors` when seen. The commit record waits for those writes as for its own:
    /// its size may expose those bytes, and the fsync that wrote them may not have flushed
    /// yet (JBD2 waits for every page of the inode under writeback, whoever started it).
    pub in_flight: Vec<(Arc<Buffer>, u32)>,
}

/// The write requests for the dirty buffers among `bufs`, which are marked clean (ordered
/// data of transaction `tx`, or an fdatasync's own writes when `tx` is `None`, counted in
/// `home_writes`). The caller holds `home_write_lock` until the requests are submitted.
pub(crate) fn ordered_requests(set: &Shared, bufs: &[Arc<Buffer>], tx: Option<TxId>) -> HomeWrites {
    let t = take_home_writes(set, bufs, tx, |_, _| false);
    let tag = match tx {
        Some(id) => WriteTag::tx(BlockKind::Data, id),
        None => WriteTag::kind(BlockKind::Data),
    };
    HomeWrites { reqs: run_requests(t.rest, tag), written: t.written, in_flight: t.in_flight }
}

/// What [`take_home_writes`] took: the dirty buffers' contents (block, image), split by the
/// caller's `pick`, and the buffers others are writing.
#[derive(Default)]
pub(crate) struct Taken {
    /// Writes `pick` chose.
    pub picked: Vec<(u64, BlockBuf)>,
    /// The other writes.
    pub rest: Vec<(u64, BlockBuf)>,
    /// See [`HomeWrites::written`].
    pub written: Vec<Arc<Buffer>>,
    /// See [`HomeWrites::in_flight`].
    pub in_flight: Vec<(Arc<Buffer>, u32)>,
}

/// The one pass over a commit's (or an fdatasync's) data buffers: take each off `tx`'s
/// ordered list, mark the dirty ones clean and written by `tx` (or, with `tx` `None`, by the
/// caller, counted in `home_writes`), and note the clean ones whose fsync-path write is in
/// flight. `pick` sees each buffer's state first, with `tx`'s ordered mark still on, and
/// chooses which of the writes go into [`Taken::picked`] (ordered-data checksums sum those).
pub(crate) fn take_home_writes(
    set: &Shared,
    bufs: &[Arc<Buffer>],
    tx: Option<TxId>,
    mut pick: impl FnMut(&Arc<Buffer>, &mut crate::buffer::JState) -> bool,
) -> Taken {
    let mut t = Taken { rest: Vec::with_capacity(bufs.len()), ..Taken::default() };
    for b in bufs {
        let mut js = b.jstate();
        let picked = pick(b, &mut js);
        if tx.is_some() && js.ordered == tx {
            js.ordered = None;
            js.ordered_strict = false;
        }
        if js.dirty {
            js.dirty = false;
            js.home_tx = tx;
            if tx.is_none() {
                js.home_writes += 1;
                t.written.push(b.clone());
            }
            drop(js);
            let w = (b.blocknr(), b.snapshot());
            if picked { t.picked.push(w) } else { t.rest.push(w) }
        } else if tx.is_some() && js.home_writes > 0 {
            t.in_flight.push((b.clone(), js.write_errors));
        }
    }
    set.stats.data_blocks.fetch_add((t.picked.len() + t.rest.len()) as u64, Ordering::Relaxed);
    t
}

/// Wait for the fsync-path writes a commit found in flight ([`HomeWrites::in_flight`]);
/// one that failed left its buffer dirty, which the commit then writes itself.
pub(crate) fn wait_in_flight(set: &Shared, bufs: &[(Arc<Buffer>, u32)]) -> JResult<()> {
    let mut retry = Vec::new();
    for (b, seen) in bufs {
        let mut js = b.jstate();
        if wait_home_writes(b, &mut js, *seen) {
            retry.push(b.clone());
        }
    }
    if !retry.is_empty() {
        write_data(set, &retry)?;
    }
    Ok(())
}

/// How long one window of a commit's ordered data should keep the device busy: what an fsync
/// served by an i-transaction (or a read) may wait behind a commit, per request it makes. A
/// latency target rather than a size, with the kernel's writeback throttling (blk-wbt)
/// default for non-rotational devices: a fixed 4 MiB window is 1.6 ms of a fast SSD but
/// 28 ms of an eMMC part. (4 ms was measured too: the fsync tester's p95 at 60 % background
/// rose 2.5x on SATA and 2.0x on eMMC over no background, against 1.5x and 1.3x at 2 ms.)
pub(crate) const ORDERED_WINDOW_TARGET: Duration = Duration::from_millis(2);

/// The smallest window (1 MiB of 4 KiB blocks would be 256): below it the round trip
/// between windows costs more device time than it saves other writers.
const ORDERED_WINDOW_MIN: usize = 64;

/// The next window after one of `blocks` took `took`: the blocks the device wrote in
/// [`ORDERED_WINDOW_TARGET`] at that speed, moved halfway there (one slow window, queued
/// behind someone else's I/O, does not halve it), within `ORDERED_WINDOW_MIN..=max`.
fn next_window(blocks: usize, took: Duration, max: usize) -> usize {
    let took = took.as_secs_f64().max(1e-6);
    let fit = blocks as f64 * ORDERED_WINDOW_TARGET.as_secs_f64() / took;
    let next = (blocks as f64 + fit) / 2.0;
    (next as usize).clamp(ORDERED_WINDOW_MIN.min(max), max)
}

/// Submit `(block, data)` writes, merging device-contiguous runs into one request.
pub(crate) fn submit_runs(
    set: &Shared,
    writes: Vec<(u64, BlockBuf)>,
    tag: WriteTag,
) -> JResult<Vec<IoTicket>> {
    Ok(set.dev.submit_batch(run_requests(writes, tag))?)
}

/// `(block, data)` writes as requests, one per device-contiguous run.
pub(crate) fn run_requests(mut writes: Vec<(u64, BlockBuf)>, tag: WriteTag) -> Vec<WriteRequest> {
    writes.sort_unstable_by_key(|w| w.0);
    writes.dedup_by_key(|w| w.0);
    let mut reqs = Vec::new();
    let mut i = 0;
    while i < writes.len() {
        let start = writes[i].0;
        let mut bufs = vec![writes[i].1.clone()];
        let mut k = i + 1;
        while k < writes.len() && writes[k].0 == start + bufs.len() as u64 && bufs.len() < 256 {
            bufs.push(writes[k].1.clone());
            k += 1;
        }
        reqs.push(WriteRequest { block: start, bufs, tag, fua: false });
        i = k;
    }
    reqs
}

/// Build the transaction's log blocks (revoke blocks, then descriptor + logged blocks) and
/// reserve log space for them; return their write requests and the commit block with its
/// position.
fn log_requests(
    j: &Arc<LogCore>,
    tid: Tid,
    versions: &[(Arc<Buffer>, BlockBuf)],
    revokes: &[u64],
    chain: Option<&crate::commit_block::ChainMarks>,
) -> JResult<(Vec<WriteRequest>, (u64, BlockBuf))> {
    let (sb_features, uuid) = {
        let l = j.log.lock();
        (l.sb.features(), l.sb.s_uuid)
    };
    let bs = j.set.cache.block_size();
    let blocks = crate::writer::build_log_blocks(tid, sb_features, uuid, versions, revokes, bs)?;
    j.set.stats.revokes.fetch_add(revokes.len() as u64, Ordering::Relaxed);
    j.set.stats.blocks_logged.fetch_add(versions.len() as u64, Ordering::Relaxed);
    let n = blocks.len() as u64 + 1;
    let start = reserve(j, tid, n)?;
    let mut reqs = Vec::new();
    let mut lblk = start;
    let mut i = 0;
    let commit_first = crate::planted::bugs(&j.set.config).commit_before_data;
    let commit_img = crate::writer::commit_block(tid, sb_features, uuid, chain, &blocks, bs)?;
    let commit_lblk = {
        let l = j.log.lock();
        let mut p = start;
        for _ in 0..blocks.len() {
            p = l.ring.next(p);
        }
        p
    };
    if commit_first {
        // Planted bug: the commit record goes out before the blocks it vouches for.
        let dev_blk = j.area.map(commit_lblk)?;
        let t = j.set.dev.submit(WriteRequest::one(
            dev_blk,
            commit_img.clone(),
            WriteTag::tx(BlockKind::JournalCommit, j.tx_id(tid)),
        ))?;
        t.wait()?;
        j.set.dev.flush()?;
    }
    while i < blocks.len() {
        let (dev_blk, run) = j.area.map_run(lblk, (blocks.len() - i) as u64)?;
        let kind = blocks[i].0;
        let mut bufs = Vec::with_capacity(run as usize);
        while bufs.len() < run as usize && i < blocks.len() && blocks[i].0 == kind {
            bufs.push(blocks[i].1.clone());
            i += 1;
        }
        let cnt = bufs.len() as u64;
        reqs.push(WriteRequest { block: dev_blk, bufs, tag: WriteTag::tx(kind, j.tx_id(tid)), fua: false });
        let l = j.log.lock();
        for _ in 0..cnt {
            lblk = l.ring.next(lblk);
        }
    }
    Ok((reqs, (commit_lblk, commit_img)))
}

/// Reserve `n` log blocks, checkpointing (and in dual-thread modes waiting for in-flight
/// transactions to become durable) until they fit.
pub(crate) fn reserve(j: &Arc<LogCore>, tid: Tid, n: u64) -> JResult<u64> {
    let try_reserve = || {
        let mut l = j.log.lock();
        let s = l.reserve(tid, n)?;
        j.note_free(&l);
        j.unreserved.store(0, Ordering::Release);
        Some(s)
    };
    let oldest_first = j.set.config.checkpoint_scope == crate::config::CheckpointScope::Oldest;
    loop {
        if let Some(s) = try_reserve() {
            return Ok(s);
        }
        // The oldest transactions first (`CheckpointScope::Oldest`), then all of them.
        if oldest_first {
            crate::checkpoint::checkpoint_for_space(j)?;
            if let Some(s) = try_reserve() {
                return Ok(s);
            }
        }
        crate::checkpoint::checkpoint(j)?;
        if let Some(s) = try_reserve() {
            return Ok(s);
        }
        // A file's switch out of data journaling may keep the tail until a commit that
        // could be this one: write its blocks home instead (`unjournal.rs`).
        if crate::unjournal::break_holds(j)? {
            continue;
        }
        let (mut pending, cap) = {
            let l = j.log.lock();
            (l.ring.spans().iter().any(|t| !t.durable), l.ring.capacity())
        };
        if j.set.multi_log() && !j.log.lock().ring.spans().is_empty() {
            // Space-starved with several logs (Z-Journal's forced checkpoint): what holds the
            // log is durable but not yet valid, or held for a revoke. Commit the ancestors it
            // waits for and let the other logs checkpoint, then look again.
            pending = true;
            for mk in j.set.chains.blocked(usize::from(j.id)) {
                if let Some(l) = j.set.log_core(mk.log) {
                    j.set.stats.forced_commits.fetch_add(1, Ordering::Relaxed);
                    l.request_commit(mk.tid);
                }
            }
            for l in j.set.logs_now().unwrap_or_default() {
                if l.id != j.id {
                    l.want_checkpoint();
                }
            }
        }
        if !pending {
            return Err(JournalError::Corrupt(format!(
                "transaction {tid} needs {n} log blocks but the log holds {cap}"
            )));
        }
        let mut st = j.state.lock();
        if let Some(a) = &st.aborted {
            return Err(JournalError::Aborted(a.clone()));
        }
        st.wait_for(&j.done_cv, std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_window_follows_the_device_speed() {
        let ms = Duration::from_millis;
        // 1024 blocks (4 MiB) in 28 ms (an eMMC part): about 73 blocks fit in 2 ms; the
        // window moves halfway there, then settles near it.
        let mut w = next_window(1024, ms(28), 1024);
        assert_eq!(w, (1024 + 73) / 2);
        for _ in 0..10 {
            w = next_window(w, Duration::from_secs_f64(w as f64 * 28e-3 / 1024.0), 1024);
        }
        assert!((64..=80).contains(&w), "{w}");
        // A fast device keeps the configured maximum; a stalled one stops at the minimum.
        assert_eq!(next_window(1024, ms(1), 1024), 1024);
        assert_eq!(next_window(64, Duration::from_secs(5), 1024), ORDERED_WINDOW_MIN);
        // A maximum below the minimum wins.
        assert_eq!(next_window(16, Duration::from_secs(5), 16), 16);
    }
}
