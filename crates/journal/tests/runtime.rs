//! The journal runtime end to end on an emulated device: commit, crash copy, recovery.

use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{BlockDevice, Device, EmulatedSsd};
use cjfs_journal::recovery::recover;
use cjfs_journal::superblock::format_journal;
use cjfs_journal::{BufferCache, Journal, JournalArea, JournalConfig, TxId};

const DEV_BLOCKS: u64 = 8192;
const LOG_START: u64 = 4096;
const LOG_LEN: u64 = 1024;

fn setup(config: JournalConfig) -> (Arc<EmulatedSsd>, Journal) {
    let ssd = Arc::new(EmulatedSsd::ram(DEV_BLOCKS));
    let j = open_on(ssd.clone(), config);
    (ssd, j)
}

/// Format a journal on `dev` and open it.
fn open_on(dev: Device, config: JournalConfig) -> Journal {
    let area = JournalArea::contiguous(LOG_START, LOG_LEN);
    format_journal(&*dev, &area, [3; 16], true).expect("format");
    let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
    Journal::open(dev, area, cache, config).expect("open")
}

/// Data block 300 filled with 7s as ordered data of a handle; its buffer and transaction.
fn dirty_data_block(j: &Journal) -> (Arc<cjfs_journal::Buffer>, TxId) {
    let data = j.cache().read(300).expect("read");
    let mut h = j.start(4).expect("start");
    data.write().fill(7);
    h.dirty_data(&data).expect("dirty data");
    let tid = h.stop().expect("stop");
    (data, tid)
}

fn write_pattern(j: &Journal, blk: u64, byte: u8) -> TxId {
    let buf = j.cache().read(blk).expect("read");
    let mut h = j.start(4).expect("start");
    h.get_write_access(&buf).expect("access");
    buf.write().fill(byte);
    h.dirty_metadata(&buf).expect("dirty");
    h.stop().expect("stop")
}

fn home(dev: &dyn BlockDevice, blk: u64) -> u8 {
    dev.read_block(blk).expect("read")[100]
}

fn presets() -> Vec<JournalConfig> {
    JournalConfig::preset_names()
        .iter()
        .filter(|n| **n != "nojournal")
        .filter_map(|n| JournalConfig::preset(n))
        .collect()
}

#[test]
fn committed_blocks_replay_after_crash() {
    for cfg in presets() {
        committed_blocks_replay_after_crash_in(cfg);
    }
}

fn committed_blocks_replay_after_crash_in(cfg: JournalConfig) {
    let (ssd, j) = setup(cfg);
    for i in 0..50u64 {
        let tid = write_pattern(&j, 100 + i, (i + 1) as u8);
        j.commit_wait(tid).expect("commit");
    }
    // Nothing is checkpointed yet: home blocks are still zero, the log holds everything.
    let crash = EmulatedSsd::from_image(cjfs_blockdev::SsdPreset::ramdisk(), &ssd.image_bytes());
    assert_eq!(home(&crash, 100), 0);
    let area = JournalArea::contiguous(LOG_START, LOG_LEN);
    let report = recover(&crash, &area).expect("recover");
    assert!(report.needed);
    for i in 0..50u64 {
        assert_eq!(home(&crash, 100 + i), (i + 1) as u8, "block {}", 100 + i);
    }
    j.shutdown().expect("shutdown");
    // After a clean shutdown the blocks are home and the log is empty.
    for i in 0..50u64 {
        assert_eq!(home(&*ssd, 100 + i), (i + 1) as u8);
    }
    let r2 = recover(&*ssd, &area).expect("recover clean");
    assert!(!r2.needed);
}

#[test]
fn log_wraps_with_checkpoints_and_revokes() {
    for cfg in presets() {
        log_wraps_in(cfg);
    }
}

fn log_wraps_in(mut cfg: JournalConfig) {
    let name = cfg.name.clone();
    cfg.commit_interval = Duration::from_millis(20);
    let (ssd, j) = setup(cfg);
    // 3000 single-block commits over a 1024-block log force many wraps and checkpoints.
    for i in 0..3000u64 {
        let tid = write_pattern(&j, 200 + (i % 300), (i % 251) as u8 + 1);
        j.commit_wait(tid).expect("commit");
    }
    // Revoke a block after logging it: its logged copies must never be replayed.
    let tid = write_pattern(&j, 50, 0xAA);
    j.commit_wait(tid).expect("commit");
    let mut h = j.start(1).expect("start");
    h.revoke(50).expect("revoke");
    let tid = h.stop().expect("stop");
    j.commit_wait(tid).expect("commit");
    let stats = j.stats();
    assert!(stats.checkpoints > 0, "{stats:?}");
    // Taken while the journal is live (the checkpoint thread may be writing): the device's
    // image is a point-in-time snapshot, a state a crash could leave.
    let crash = EmulatedSsd::from_image(cjfs_blockdev::SsdPreset::ramdisk(), &ssd.image_bytes());
    let area = JournalArea::contiguous(LOG_START, LOG_LEN);
    // The revoked block's 0xAA may already be home: a checkpoint may write a durable
    // transaction's blocks before a later revoke is durable (see
    // `revoke_after_checkpoint_keeps_the_home_copy`). Recovery must leave it as it is.
    let revoked_before = home(&crash, 50);
    recover(&crash, &area).expect("recover");
    for k in 0..300u64 {
        // The last write to block 200+k was iteration i = the largest i < 3000 with i%300==k.
        let i = 2700 + k;
        assert_eq!(home(&crash, 200 + k), (i % 251) as u8 + 1, "{name}: block {}", 200 + k);
    }
    assert_eq!(home(&crash, 50), revoked_before, "{name}: revoked block was replayed");
    j.shutdown().expect("shutdown");
}

#[test]
fn revoke_after_checkpoint_keeps_the_home_copy() {
    for cfg in presets() {
        revoke_after_checkpoint_in(cfg);
    }
}

/// A revoke forbids replaying the block's logged copies; it does not undo a checkpoint that
/// already wrote the block's last committed contents home (JBD2 alike). So a crash image may
/// hold a revoked block's old contents, and recovery must neither replay nor clear them.
fn revoke_after_checkpoint_in(cfg: JournalConfig) {
    let name = cfg.name.clone();
    let (ssd, j) = setup(cfg);
    let tid = write_pattern(&j, 50, 0xAA);
    j.commit_wait(tid).expect("commit");
    j.checkpoint().expect("checkpoint");
    let mut h = j.start(1).expect("start");
    h.revoke(50).expect("revoke");
    let tid = h.stop().expect("stop");
    j.commit_wait(tid).expect("commit");
    let crash = EmulatedSsd::from_image(cjfs_blockdev::SsdPreset::ramdisk(), &ssd.image_bytes());
    assert_eq!(home(&crash, 50), 0xAA, "{name}: checkpointed before the revoke");
    let area = JournalArea::contiguous(LOG_START, LOG_LEN);
    let report = recover(&crash, &area).expect("recover");
    assert_eq!(report.blocks_replayed, 0, "{name}: {report:?}");
    assert_eq!(home(&crash, 50), 0xAA, "{name}");
    j.shutdown().expect("shutdown");
}

#[test]
fn concurrent_handles_share_transactions() {
    for cfg in presets() {
        concurrent_in(cfg);
    }
}

fn concurrent_in(cfg: JournalConfig) {
    let (_ssd, j) = setup(cfg);
    let j = Arc::new(j);
    let mut ts = Vec::new();
    for t in 0..8u64 {
        let j = j.clone();
        ts.push(std::thread::spawn(move || {
            for i in 0..200u64 {
                let tid = write_pattern(&j, 1000 + t * 10 + (i % 10), i as u8);
                if i % 10 == 0 {
                    j.commit_wait(tid).expect("commit");
                }
            }
        }));
    }
    for t in ts {
        t.join().expect("thread");
    }
    j.force().expect("force");
    let s = j.stats();
    assert!(s.transactions > 0);
    assert!(s.handles >= 1600);
    j.shutdown().expect("shutdown");
}

#[test]
fn failed_flush_reaches_every_waiter() {
    for cfg in presets() {
        failed_flush_in(cfg);
    }
}

fn failed_flush_in(cfg: JournalConfig) {
    let (ssd, j) = setup(cfg);
    let tid = write_pattern(&j, 10, 1);
    ssd.inject_flush_failure();
    let err = j.commit_wait(tid).expect_err("flush failure must be reported");
    assert!(err.to_string().contains("flush"), "{err}");
    // Later operations see the abort too; nothing is retried.
    assert!(j.start(1).is_err());
    assert!(j.aborted().is_some());
}

/// fdatasync of a data buffer that a committing transaction has already written home as
/// ordered data (so the buffer is clean, but its write not yet flushed) must not return
/// before that transaction is durable.
#[test]
fn sync_data_waits_for_the_commit_that_wrote_a_clean_buffer() {
    for cfg in presets() {
        let name = cfg.name.clone();
        // A slow flush keeps the commit in flight after it has written the buffer.
        let preset = cjfs_blockdev::SsdPreset {
            flush_base_us: 50_000,
            volatile_cache: true,
            ..cjfs_blockdev::SsdPreset::ramdisk()
        };
        let j = open_on(Arc::new(EmulatedSsd::new(preset, DEV_BLOCKS)), cfg);
        let (data, tid) = dirty_data_block(&j);
        std::thread::scope(|s| {
            // Another thread's fsync commits the transaction that carries the data.
            let committer = s.spawn(|| j.commit_wait(tid));
            while data.jstate().dirty {
                std::thread::sleep(Duration::from_micros(50));
            }
            j.sync_data(std::slice::from_ref(&data)).expect("sync data");
            assert!(
                j.is_durable(tid),
                "{name}: fdatasync returned before the commit that wrote its data was durable"
            );
            committer.join().expect("committer").expect("commit");
        });
        j.shutdown().expect("shutdown");
    }
}

/// A journal of two logs (the primary and one extra area): the first handle marks the
/// primary superblock with the private `cjfs_logs` bit before anything is logged, a clean
/// shutdown clears it; both logs share the buffer cache and the statistics; an abort in
/// either reaches both; a transaction naming a log the set does not have is refused; the
/// primary log is not recovered alone while the bit is set.
#[test]
fn two_logs_share_the_cache_and_mark_the_primary() {
    use cjfs_journal::superblock::{
        INCOMPAT_CJFS_LOGS, format_journal_areas, read_log_areas, read_superblock,
    };
    let ssd = Arc::new(EmulatedSsd::ram(DEV_BLOCKS));
    let dev: Device = ssd.clone();
    let inode = JournalArea::contiguous(LOG_START, 2 * LOG_LEN);
    format_journal_areas(&*dev, &inode, [3; 16], true, LOG_LEN, &[LOG_LEN]).expect("format");
    let (sb, areas) = read_log_areas(&*dev, &inode).expect("areas");
    assert_eq!((sb.s_maxlen as u64, areas.len()), (LOG_LEN, 2));
    let bit =
        |dev: &Device| read_superblock(&**dev, &inode).expect("sb").s_feature_incompat & INCOMPAT_CJFS_LOGS;

    let two = JournalConfig { logs: cjfs_journal::Logs::Count(2), ..JournalConfig::jbd2() };
    let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
    let one = Journal::open_logs(dev.clone(), areas.clone(), cache, JournalConfig::jbd2()).expect("open");
    assert_eq!(one.log_count(), 1, "one log wanted: the extra area stays unused");
    one.shutdown().expect("shutdown");
    let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
    let j = Journal::open_logs(dev.clone(), areas.clone(), cache, two.clone()).expect("open");
    assert_eq!(j.log_count(), 2);
    assert_eq!(bit(&dev), 0, "nothing is written before the first handle");
    let tx = write_pattern(&j, 100, 7);
    assert_ne!(bit(&dev), 0, "the first handle sets the private bit");
    j.commit_wait(tx).expect("commit");
    assert!(j.is_durable(tx));
    assert!(!j.is_durable(TxId::new(1 - tx.log, 1000)), "the other log has not committed that far");
    assert!(j.commit_wait(TxId::new(7, 1)).is_err(), "log 7 does not exist");
    j.shutdown().expect("shutdown");
    assert_eq!(bit(&dev), 0, "a clean shutdown clears the private bit");
    assert_eq!(home(&*dev, 100), 7);

    // Abort fan-out: a failed flush on the primary's commit closes the extra log too.
    let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
    let j = Journal::open_logs(dev.clone(), areas, cache, two).expect("reopen");
    let tx = write_pattern(&j, 101, 8);
    ssd.inject_flush_failure();
    assert!(j.commit_wait(tx).is_err());
    assert!(j.aborted().is_some());
    let err = j.wait(TxId::new(1, 5)).expect_err("the extra log must see the abort");
    assert!(err.to_string().contains("flush"), "{err}");
    assert!(j.shutdown().is_err());
    assert_ne!(bit(&dev), 0, "an aborted journal keeps the bit: its logs may need replay");
    // Replaying the primary log alone is refused while the bit says other logs may hold
    // transactions; recovering every log together is what clears it.
    let before = ssd.image_bytes();
    let err = recover(&*dev, &inode).expect_err("one log of several recovered alone");
    assert!(err.to_string().contains("cjfs_logs"), "{err}");
    assert!(ssd.image_bytes() == before, "a refused recovery wrote to the image");
}

/// Polling waits (`WaitMode::SpinPark`): on a RAM device commits are shorter than the spin
/// limit, so fsync callers spin first; every commit still returns only once durable, and a
/// failed flush still reaches every waiter.
#[test]
fn spin_park_waits_commit_and_report_failures() {
    use cjfs_journal::polling::WaitMode;
    for base in [JournalConfig::jbd2(), JournalConfig::preset("cjfs").expect("cjfs preset")] {
        let cfg = JournalConfig { wait: WaitMode::SpinPark, ..base };
        let before = cjfs_journal::lock_stat::snapshot();
        concurrent_in(cfg.clone());
        // Whether a waiter spins depends on measured commit times (a loaded machine parks at
        // once), so this is reported, not asserted; the budget rule has its unit test.
        let spun = cjfs_journal::lock_stat::snapshot().since(&before);
        eprintln!("{}: {} spins, {} ended durable", cfg.name, spun.spins, spun.spin_hits);
        committed_blocks_replay_after_crash_in(cfg.clone());
        failed_flush_in(cfg);
    }
}

/// Per-core work queues (`Dispatch::PerCore`), with either wait: commit requests through
/// per-core slots and the lock-free flush hand-off lose no request (every concurrent commit
/// returns durable), replay after a crash, and a failed flush reaches every waiter; shutdown
/// wakes the sleeping commit and flush threads.
#[test]
fn per_core_dispatch_commits_replays_and_reports_failures() {
    use cjfs_journal::polling::WaitMode;
    use cjfs_journal::work_queue::Dispatch;
    for base in [JournalConfig::jbd2(), JournalConfig::preset("cjfs").expect("cjfs preset")] {
        for wait in [WaitMode::Condvar, WaitMode::SpinPark] {
            let cfg = JournalConfig { dispatch: Dispatch::PerCore, wait, ..base.clone() };
            concurrent_in(cfg.clone());
            committed_blocks_replay_after_crash_in(cfg.clone());
            failed_flush_in(cfg);
        }
    }
}

/// A transaction with a handle but nothing to log, committed between two that log blocks:
/// recovery must still replay the later one (JBD2 scans transaction ids in sequence, so a
/// consumed id with no commit block in the log would end the scan before it).
#[test]
fn an_empty_transaction_does_not_end_the_log() {
    for cfg in presets().into_iter().filter(|c| c.kind == cjfs_journal::JournalKind::Jbd2) {
        let name = cfg.name.clone();
        let (ssd, j) = setup(cfg);
        let first = write_pattern(&j, 300, 1);
        j.commit_wait(first).expect("commit");
        let empty = j.start(1).expect("start").stop().expect("stop");
        j.commit_wait(empty).expect("commit the empty transaction");
        let last = write_pattern(&j, 301, 2);
        j.commit_wait(last).expect("commit");
        let crash = EmulatedSsd::from_image(cjfs_blockdev::SsdPreset::ramdisk(), &ssd.image_bytes());
        let area = JournalArea::contiguous(LOG_START, LOG_LEN);
        recover(&crash, &area).expect("recover");
        assert_eq!((home(&crash, 300), home(&crash, 301)), (1, 2), "{name}: a committed block was lost");
        j.shutdown().expect("shutdown");
    }
}

/// A `zjournal` journal of two logs (the primary and one extra area) on a RAM device; the
/// device, the logs' areas and the journal.
fn two_logs(commit_interval: Duration) -> (Arc<EmulatedSsd>, Vec<JournalArea>, Journal) {
    use cjfs_journal::superblock::{format_journal_areas, read_log_areas};
    let ssd = Arc::new(EmulatedSsd::ram(DEV_BLOCKS));
    let dev: Device = ssd.clone();
    let inode = JournalArea::contiguous(LOG_START, 2 * LOG_LEN);
    format_journal_areas(&*dev, &inode, [3; 16], true, LOG_LEN, &[LOG_LEN]).expect("format");
    let (_, areas) = read_log_areas(&*dev, &inode).expect("areas");
    let mut cfg = JournalConfig { logs: cjfs_journal::Logs::Count(2), ..JournalConfig::zjournal() };
    cfg.commit_interval = commit_interval;
    let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
    let j = Journal::open_logs(dev, areas.clone(), cache, cfg).expect("open");
    (ssd, areas, j)
}

/// `Journal::empty` with two logs while another thread keeps updating a block both logs
/// hold: every log is emptied, so a block written in place afterwards (a file leaving data
/// journaling) is not overwritten at recovery by a journaled copy from before. Without new
/// handles held back, a log keeps its old transaction for as long as the shared block's
/// newest version is in a running transaction.
#[test]
fn empty_frees_every_log_while_a_shared_block_keeps_changing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (ssd, areas, j) = two_logs(Duration::from_millis(5));
    let j = Arc::new(j);
    let in_log = |log: usize, blk: u64, byte: u8| -> TxId {
        let buf = j.cache().read(blk).expect("read");
        let mut h = j.start_in(log, 2).expect("start");
        h.get_write_access(&buf).expect("access");
        buf.write().fill(byte);
        h.dirty_metadata(&buf).expect("dirty");
        h.stop().expect("stop")
    };
    for round in 0..20u8 {
        let stop = Arc::new(AtomicBool::new(false));
        let churn = {
            let (j, stop) = (j.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u8;
                while !stop.load(Ordering::Relaxed) {
                    for log in [1, 0] {
                        let buf = j.cache().read(300).expect("read");
                        let mut h = j.start_in(log, 2).expect("start");
                        h.get_write_access(&buf).expect("access");
                        n = n.wrapping_add(1);
                        buf.write().fill(n);
                        h.dirty_metadata(&buf).expect("dirty");
                        let tx = h.stop().expect("stop");
                        j.commit(tx).expect("commit");
                    }
                }
            })
        };
        // The "file data" block, journaled in log 0 beside the shared block.
        in_log(0, 300, 0xEE);
        let tx = in_log(0, 100, round + 1);
        j.commit_wait(tx).expect("commit");
        std::thread::sleep(Duration::from_millis(2));
        j.empty().expect("empty");
        // Written in place from now on, outside the journal.
        let data = cjfs_blockdev::BlockBuf::from(vec![0xD0 + round % 16; 4096]);
        let tag = cjfs_blockdev::WriteTag::kind(cjfs_blockdev::BlockKind::Data);
        ssd.write_block(100, data, tag).expect("in place");
        ssd.flush().expect("flush");
        let crash = EmulatedSsd::from_image(cjfs_blockdev::SsdPreset::ramdisk(), &ssd.image_bytes());
        stop.store(true, Ordering::Relaxed);
        churn.join().expect("churn");
        // Every log: a copy in log 1 replayed over the in-place write is the failure too.
        cjfs_journal::order_graph::recover_logs(&crash, &areas, false, None).expect("recover");
        assert_eq!(
            home(&crash, 100),
            0xD0 + round % 16,
            "round {round}: a journaled copy was replayed over the in-place write"
        );
    }
    j.shutdown().expect("shutdown");
}

/// Two fsyncs of one data buffer: the first one's write is in flight when the second finds
/// the buffer clean and waits for that write; the write fails. The second must not call the
/// data durable: it writes the buffer itself (the failed write left it dirty again).
/// A block that log 0's running transaction holds is freed and revoked through log 1 (a
/// directory emptied in one log, removed in the other), then reused as data written in
/// place. Recovery applies a revoke to the copies stamped at or before it, so log 0 must not
/// commit its copy after the revoke: the revoke pins log 0's transaction and takes the
/// block out of it. Log 1 commits first here, as it may; a copy of the block stamped after
/// the revoke would be replayed over the data.
#[test]
fn a_revoke_takes_the_block_from_another_logs_running_transaction() {
    let (ssd, areas, j) = two_logs(Duration::from_secs(60));
    let buf = j.cache().read(300).expect("read");
    let mut h = j.start_in(0, 2).expect("start");
    h.get_write_access(&buf).expect("access");
    buf.write().fill(0x11);
    h.dirty_metadata(&buf).expect("dirty");
    let t0 = h.stop().expect("stop");
    let mut h = j.start_in(1, 2).expect("start");
    h.revoke(300).expect("revoke");
    let t1 = h.stop().expect("stop");
    assert_eq!((t0.log, t1.log), (0, 1));
    j.commit_wait(t1).expect("commit the revoke");
    j.commit_wait(t0).expect("commit the other log");
    let data = cjfs_blockdev::BlockBuf::from(vec![0xD5; 4096]);
    ssd.write_block(300, data, cjfs_blockdev::WriteTag::kind(cjfs_blockdev::BlockKind::Data))
        .expect("in place");
    ssd.flush().expect("flush");
    let crash = EmulatedSsd::from_image(cjfs_blockdev::SsdPreset::ramdisk(), &ssd.image_bytes());
    cjfs_journal::order_graph::recover_logs(&crash, &areas, false, None).expect("recover");
    assert_eq!(home(&crash, 300), 0xD5, "a logged copy of the revoked block was replayed over its new data");
    let stats = j.stats();
    assert!(stats.marks_bi >= 1, "the revoke chains both ways: {stats:?}");
    j.shutdown().expect("shutdown");
}

#[test]
fn a_concurrent_fsyncs_failed_write_is_not_taken_for_durable() {
    let slow = cjfs_blockdev::SsdPreset { write_latency_us: 150_000, ..cjfs_blockdev::SsdPreset::ramdisk() };
    let ssd = Arc::new(EmulatedSsd::new(slow, DEV_BLOCKS));
    let dev: Device = ssd.clone();
    let area = JournalArea::contiguous(LOG_START, LOG_LEN);
    format_journal(&*dev, &area, [3; 16], true).expect("format");
    let cache = Arc::new(BufferCache::new(dev.clone(), 4096));
    let cfg = JournalConfig { commit_interval: Duration::from_secs(3600), ..JournalConfig::jbd2() };
    let j = Arc::new(Journal::open(dev, area, cache, cfg).expect("open"));
    let buf = j.cache().read(500).expect("read");
    let mut h = j.start(1).expect("start");
    buf.write().fill(0x5A);
    h.dirty_data(&buf).expect("dirty");
    h.stop().expect("stop");
    ssd.inject_write_failure_at(500);
    let first = {
        let (j, buf) = (j.clone(), buf.clone());
        std::thread::spawn(move || j.sync_data(&[buf]))
    };
    // The first fsync's write is in flight (150 ms): this one finds the buffer clean.
    std::thread::sleep(Duration::from_millis(50));
    j.sync_data(std::slice::from_ref(&buf)).expect("the second fsync writes the data itself");
    assert!(first.join().expect("join").is_err(), "the injected failure reaches the first fsync");
    assert_eq!(home(&*ssd, 500), 0x5A, "a successful fsync left the block unwritten");
    j.shutdown().expect("shutdown");
}

/// A device that holds the completion of data writes to one block until a commit record
/// or a flush shows up (or half a second passes), and reports which of them came while the
/// write was still in flight.
struct HoldOne {
    inner: Device,
    block: u64,
    /// Writes held, whether they were let go, what came while one was held.
    state: parking_lot::Mutex<(usize, bool, Vec<String>)>,
    cv: parking_lot::Condvar,
}

impl HoldOne {
    fn release(&self, st: &mut (usize, bool, Vec<String>), why: &str) {
        if st.0 > 0 && !st.1 {
            st.2.push(why.to_string());
            st.1 = true;
            self.cv.notify_all();
        }
    }
}

/// The device handle over a [`HoldOne`] (the test keeps the other).
struct HoldDev(Arc<HoldOne>);

impl BlockDevice for HoldDev {
    fn block_size(&self) -> usize {
        self.0.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.0.inner.num_blocks()
    }
    fn caps(&self) -> cjfs_blockdev::DeviceCaps {
        // A cache, no barrier, no FUA: ordering only by waiting and flushing.
        cjfs_blockdev::DeviceCaps { barrier: false, volatile_cache: true, fua: false, ..self.0.inner.caps() }
    }
    fn describe(&self) -> String {
        "hold-one".into()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> cjfs_blockdev::DevResult<()> {
        self.0.inner.read(block, buf)
    }
    fn submit(&self, req: cjfs_blockdev::WriteRequest) -> cjfs_blockdev::DevResult<cjfs_blockdev::IoTicket> {
        let held = req.tag.kind == cjfs_blockdev::BlockKind::Data
            && (req.block..req.block + req.bufs.len() as u64).contains(&self.0.block);
        if req.tag.kind == cjfs_blockdev::BlockKind::JournalCommit {
            self.0.release(
                &mut self.0.state.lock(),
                "commit record written while the data write was in flight",
            );
        }
        let t = self.0.inner.submit(req)?;
        if !held {
            return Ok(t);
        }
        self.0.state.lock().0 += 1;
        let c = Arc::new(cjfs_blockdev::Completion::default());
        let (me, c2) = (self.0.clone(), c.clone());
        std::thread::spawn(move || {
            let mut st = me.state.lock();
            if !st.1 {
                me.cv.wait_for(&mut st, Duration::from_millis(500));
            }
            me.release(&mut st, "released after half a second");
            drop(st);
            c2.complete(t.wait());
        });
        Ok(cjfs_blockdev::IoTicket::pending(c))
    }
    fn flush(&self) -> cjfs_blockdev::DevResult<()> {
        self.0.release(&mut self.0.state.lock(), "flush started while the data write was in flight");
        self.0.inner.flush()
    }
    fn barrier(&self) -> cjfs_blockdev::DevResult<()> {
        self.0.inner.barrier()
    }
    fn stats(&self) -> cjfs_blockdev::DeviceStats {
        self.0.inner.stats()
    }
}

/// An fsync served without a commit (iJournaling's data step) is writing a data block home
/// when a commit takes the same block as ordered data and finds it clean. The commit's
/// flush and commit record must wait for that write, as JBD2 waits for every page under
/// writeback: the fsync has not flushed yet, and the commit's inode size may expose the
/// bytes (found by the crash suite: a commit durable, the appended data not).
#[test]
fn a_commit_waits_for_an_fsyncs_write_of_its_ordered_data() {
    for cfg in presets() {
        let name = cfg.name.clone();
        let cfg = JournalConfig { commit_interval: Duration::from_secs(3600), ..cfg };
        let hold = Arc::new(HoldOne {
            inner: Arc::new(EmulatedSsd::ram(DEV_BLOCKS)),
            block: 300,
            state: parking_lot::Mutex::new((0, false, Vec::new())),
            cv: parking_lot::Condvar::new(),
        });
        let j = open_on(Arc::new(HoldDev(hold.clone())), cfg);
        let (data, tid) = dirty_data_block(&j);
        std::thread::scope(|s| {
            let fsync = s.spawn(|| j.write_data_with(std::slice::from_ref(&data), Vec::new(), 0));
            while hold.state.lock().0 == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
            j.commit_wait(tid).expect("commit");
            fsync.join().expect("fsync").expect("data write");
        });
        let why = hold.state.lock().2.clone();
        assert_eq!(why, vec!["released after half a second".to_string()], "{name}");
        j.shutdown().expect("shutdown");
    }
}
