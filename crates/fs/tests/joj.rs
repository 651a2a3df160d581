//! Journaling of journal (FAST'14), measured on the device log: the fsync of a
//! data-journaled file is exactly one write command (two where the log wraps) and one
//! flush, with no write home, also while committed, not yet checkpointed pages of the file
//! are dirty again; the journal features a single-I/O journal writes and puts back; what
//! the kernel's tools make of it is in `judges.rs` and the crash harness.

use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{BlockKind, Device, EmulatedSsd, RecordedOp, Recorder, SsdPreset};
use cjfs_fs::{DataMode, Fs, Ino, MkfsOptions, MountOptions, ROOT_INO, mkfs, preset};
use cjfs_journal::single_io;

/// What the device saw between two points of the recorder's log.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    /// Write commands, by block kind.
    writes: Vec<(BlockKind, usize)>,
    /// Completed flushes.
    flushes: usize,
}

impl Seen {
    fn of(ops: &[RecordedOp]) -> Seen {
        let mut s = Seen::default();
        for op in ops {
            match op {
                RecordedOp::Write { tag, bufs, .. } => s.writes.push((tag.kind, bufs.len())),
                RecordedOp::Flush { ok: true, .. } => s.flushes += 1,
                _ => {}
            }
        }
        s
    }

    /// Writes to home locations (data or metadata written in place).
    fn in_place(&self) -> usize {
        self.writes.iter().filter(|(k, _)| matches!(k, BlockKind::Data | BlockKind::Metadata)).count()
    }
}

struct Rig {
    ssd: Arc<EmulatedSsd>,
    rec: Arc<Recorder>,
    fs: Fs,
}

/// A file system on an emulated eMMC (a volatile cache, no barrier) behind a recorder,
/// mounted with `spec` and `data`; no timer commits and no background checkpoint, so only
/// the calls made show up in the log.
fn rig(spec: &str, data: DataMode, journal_blocks: Option<u32>) -> Rig {
    let ssd =
        EmulatedSsd::new(SsdPreset { write_latency_us: 0, flush_base_us: 0, ..SsdPreset::emmc() }, 32768);
    mkfs(&ssd, &MkfsOptions { assume_zeroed: true, journal_blocks, ..MkfsOptions::default() }).expect("mkfs");
    let ssd = Arc::new(ssd);
    let rec = Arc::new(Recorder::new(ssd.clone() as Device));
    let mut opts = preset::apply(spec, MountOptions { data, ..MountOptions::default() }).expect("preset");
    opts.journal.commit_interval = Duration::from_secs(3600);
    opts.journal.checkpoint_high_water = 0.95;
    let fs = Fs::open(rec.clone() as Device, opts).expect("mount");
    Rig { ssd, rec, fs }
}

impl Rig {
    /// Run `f`, returning what the device saw meanwhile.
    fn seen(&self, f: impl FnOnce(&Fs)) -> Seen {
        self.rec.clear();
        f(&self.fs);
        Seen::of(&self.rec.take_log().ops)
    }
}

/// The journal superblock of the image on `dev`.
fn journal_superblock(dev: &Device) -> cjfs_journal::superblock::JournalSuperblock {
    let (sb, _) = cjfs_fs::mkfs::read_layout(&**dev).expect("layout");
    cjfs_fs::fs::journal_logs(dev, &sb).expect("journal").0
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn data_journaled_file(fs: &Fs, name: &[u8]) -> Ino {
    let f = fs.create(ROOT_INO, name, 0o644, 0, 0).expect("create");
    fs.set_journal_data(f.ino, true).expect("chattr +j");
    f.ino
}

#[test]
fn fsync_of_a_data_journaled_file_is_one_write_and_one_flush() {
    for (spec, data) in
        [("joj", DataMode::Ordered), ("joj", DataMode::Journal), ("adaptive", DataMode::Ordered)]
    {
        let r = rig(spec, data, None);
        let ino = data_journaled_file(&r.fs, b"db");
        // The first commit after the mount already happened (the create); the single-I/O
        // features are on disk since the first handle started.
        r.fs.write(ino, 0, &pattern(1, 5 * 4096)).expect("write");
        r.fs.fsync(ino, false).expect("fsync");
        // Committed, not yet checkpointed pages of the file, dirty again, next to new ones.
        for round in 0..4u8 {
            r.fs.write(ino, 0, &pattern(10 + round, 3 * 4096)).expect("rewrite");
            r.fs.write(ino, 8 * 4096 + u64::from(round) * 4096, &pattern(20 + round, 100)).expect("append");
            let s = r.seen(|fs| fs.fsync(ino, round % 2 == 1).expect("fsync"));
            assert_eq!(s.writes.len(), 1, "{spec} data={data:?} round {round}: one write command: {s:?}");
            assert_eq!(s.writes[0].0, BlockKind::JournalTransaction, "{s:?}");
            assert_eq!(s.flushes, 1, "{spec} data={data:?}: one flush: {s:?}");
            assert_eq!(s.in_place(), 0, "{spec} data={data:?}: nothing written home: {s:?}");
        }
        let st = r.fs.journal().stats();
        assert!(st.checkpoint_cancelled > 0, "rewritten pages cancel their older checkpoint copies");
        r.fs.unmount().expect("unmount");
    }
}

/// An overwrite inside the size that leaves every field of the inode as it was (the coarse
/// clock did not tick since the last write) keeps the inode out of the transaction, as ext4's
/// `file_update_time` does: its fsync writes the data home and flushes, and commits nothing.
/// A write that moves the mtime does log the inode.
#[test]
fn an_overwrite_within_one_clock_tick_leaves_the_inode_out() {
    let r = rig("jbd2", DataMode::Ordered, None);
    let f = r.fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    r.fs.write(f, 0, &pattern(1, 8192)).expect("write");
    r.fs.fsync(f, false).expect("fsync");
    // A moved mtime is a change: the fsync commits the inode.
    let old = cjfs_fs::Timestamp::new(1, 0);
    r.fs.setattr(f, &cjfs_fs::SetAttr { mtime: Some(old), ..Default::default() }).expect("utimes");
    r.fs.fsync(f, false).expect("fsync");
    r.fs.write(f, 0, &pattern(2, 100)).expect("overwrite");
    assert_ne!(r.fs.getattr(f).expect("getattr").mtime, old);
    let s = r.seen(|fs| fs.fsync(f, false).expect("fsync"));
    assert!(s.writes.iter().any(|(k, _)| *k == BlockKind::JournalCommit), "{s:?}");
    // Back-to-back overwrites nearly always share a tick; retried when the clock moved.
    for attempt in 0..100 {
        let before = r.fs.getattr(f).expect("getattr");
        r.fs.write(f, 10, &pattern(3 + attempt as u8, 100)).expect("overwrite");
        let after = r.fs.getattr(f).expect("getattr");
        let j0 = r.fs.journal().stats();
        let s = r.seen(|fs| fs.fsync(f, false).expect("fsync"));
        if (after.mtime, after.ctime) != (before.mtime, before.ctime) {
            continue;
        }
        assert_eq!(s.writes, vec![(BlockKind::Data, 1)], "only the data block goes out: {s:?}");
        assert_eq!(s.flushes, 1, "{s:?}");
        // Counted as an fsync with its one flush, though it waited for no commit.
        let j = r.fs.journal().stats().delta(&j0);
        assert_eq!((j.fsyncs, j.fsync_waits, j.flushes), (1, 0, 1), "{j:?}");
        assert_eq!(j.flushes_per_fsync(), 1.0);
        let mut back = vec![0u8; 100];
        r.fs.read(f, 10, &mut back).expect("read");
        assert_eq!(back, pattern(3 + attempt as u8, 100));
        r.fs.unmount().expect("unmount");
        return;
    }
    panic!("the coarse clock ticked between every pair of calls in 100 attempts");
}

/// Up to 100 times: `write` (given the attempt number), then an fsync (`datasync`) that must
/// commit a transaction (`what` names the change it carries), until a write changed no field
/// of the inode — it fell in the same tick of the coarse clock as the last change, as
/// back-to-back calls nearly always do — which must happen.
fn each_fsync_commits(r: &Rig, f: Ino, datasync: bool, what: &str, mut write: impl FnMut(&Fs, u64)) {
    for attempt in 0..100u64 {
        let before = r.fs.getattr(f).expect("getattr");
        write(&r.fs, attempt);
        let after = r.fs.getattr(f).expect("getattr");
        let s = r.seen(|fs| fs.fsync(f, datasync).expect("fsync"));
        assert!(
            s.writes.iter().any(|(k, _)| *k == BlockKind::JournalCommit),
            "datasync={datasync} attempt {attempt}: {what} is committed: {s:?}"
        );
        if (after.mtime, after.ctime, after.blocks) == (before.mtime, before.ctime, before.blocks) {
            return;
        }
    }
    panic!("the coarse clock ticked between every pair of calls in 100 attempts");
}

/// A write into a preallocated (unwritten) range of a file whose extent tree has a leaf
/// block below the inode: the conversion changes that block and no field of the inode, and
/// fsync must still commit it (else the data reads back as zeros after a crash).
#[test]
fn a_write_into_preallocated_blocks_within_one_tick_is_committed_by_fsync() {
    let r = rig("jbd2", DataMode::Ordered, None);
    let f = r.fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    // Eight separate unwritten extents: more than the inode's root holds, so a leaf block.
    for i in 0..8u64 {
        r.fs.fallocate(f, cjfs_fs::FallocMode::Allocate, i * 8 * 4096, 4 * 4096).expect("fallocate");
    }
    r.fs.fsync(f, false).expect("fsync");
    each_fsync_commits(&r, f, false, "the extent conversion", |fs, attempt| {
        // A block not written before, inside the size and inside an unwritten extent.
        let off = (attempt % 8) * 8 * 4096 + (attempt / 8 % 4) * 4096;
        fs.write(f, off, &pattern(attempt as u8, 4096)).expect("write");
    });
    r.fs.unmount().expect("unmount");
}

/// The same overwrite of a data-journaled file: the block is in the log, not on the fsync
/// list, so its fsync (and fdatasync) commits the transaction although the inode stayed out.
#[test]
fn an_overwrite_of_a_data_journaled_file_within_one_tick_still_commits() {
    for (data, datasync) in
        [(DataMode::Journal, false), (DataMode::Journal, true), (DataMode::Ordered, false)]
    {
        let r = rig("jbd2", data, None);
        let f = r.fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
        if data == DataMode::Ordered {
            r.fs.set_journal_data(f, true).expect("chattr +j");
        }
        r.fs.write(f, 0, &pattern(1, 8192)).expect("write");
        r.fs.fsync(f, false).expect("fsync");
        each_fsync_commits(&r, f, datasync, &format!("{data:?}: the logged block"), |fs, attempt| {
            fs.write(f, 10, &pattern(3 + attempt as u8, 100)).expect("overwrite");
        });
        r.fs.unmount().expect("unmount");
    }
}

#[test]
fn jbd2_data_journaling_pays_two_writes_and_two_flushes() {
    let r = rig("jbd2", DataMode::Journal, None);
    let f = r.fs.create(ROOT_INO, b"db", 0o644, 0, 0).expect("create");
    r.fs.write(f.ino, 0, &pattern(1, 3 * 4096)).expect("write");
    let s = r.seen(|fs| fs.fsync(f.ino, false).expect("fsync"));
    assert_eq!(s.flushes, 2, "{s:?}");
    assert!(s.writes.len() >= 2, "{s:?}");
    assert!(s.writes.iter().any(|(k, _)| *k == BlockKind::JournalCommit), "{s:?}");
    assert_eq!(s.in_place(), 0, "no write home on the fsync path either: {s:?}");
}

#[test]
fn a_wrapping_log_takes_two_write_commands() {
    // A small journal (1024 blocks) and transactions of 6 blocks (three data blocks, the
    // inode-table block, a descriptor and a commit block): the head passes the end of the
    // log within 200 fsyncs; the log is checkpointed now and then so no fsync waits for space
    // (that would put home writes on its path). Each write sets another old mtime first:
    // writes inside one tick of the coarse clock would leave the inode out, and transactions
    // of 5 or 6 blocks by the clock's whim could end exactly at the log's end.
    let r = rig("joj", DataMode::Journal, Some(1024));
    let f = r.fs.create(ROOT_INO, b"wal", 0o644, 0, 0).expect("create");
    let mut wraps = 0;
    for i in 0..400u32 {
        let old = cjfs_fs::Timestamp::new(i64::from(i) + 1, 0);
        r.fs.setattr(f.ino, &cjfs_fs::SetAttr { mtime: Some(old), ..Default::default() }).expect("utimes");
        r.fs.write(f.ino, 0, &pattern(i as u8, 3 * 4096)).expect("write");
        let s = r.seen(|fs| fs.fsync(f.ino, true).expect("fsync"));
        assert!(matches!(s.writes.len(), 1 | 2), "fsync {i}: {s:?}");
        assert!(s.writes.iter().all(|(k, _)| *k == BlockKind::JournalTransaction), "{s:?}");
        assert_eq!((s.flushes, s.in_place()), (1, 0), "fsync {i}: {s:?}");
        if s.writes.len() == 2 {
            wraps += 1;
        }
        if i % 32 == 31 {
            r.fs.journal().checkpoint().expect("checkpoint");
        }
    }
    assert!(wraps >= 2, "the log wrapped {wraps} times in 400 fsyncs");
    r.fs.unmount().expect("unmount");
}

#[test]
fn ordered_data_in_the_transaction_flushes_before_the_single_write() {
    let r = rig("joj", DataMode::Ordered, None);
    let f = r.fs.create(ROOT_INO, b"plain", 0o644, 0, 0).expect("create");
    r.fs.write(f.ino, 0, &pattern(3, 2 * 4096)).expect("write");
    let s = r.seen(|fs| fs.fsync(f.ino, false).expect("fsync"));
    // Ordered data home, flush, the transaction in one write, flush.
    let kinds: Vec<BlockKind> = s.writes.iter().map(|w| w.0).collect();
    assert_eq!(kinds, vec![BlockKind::Data, BlockKind::JournalTransaction], "{s:?}");
    assert_eq!(s.flushes, 2, "{s:?}");
}

#[test]
fn single_io_features_are_set_before_the_first_commit_and_put_back_at_unmount() {
    let ssd = Arc::new(EmulatedSsd::ram(32768));
    mkfs(&*ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    let dev: Device = ssd.clone();
    let jsb = || journal_superblock(&dev);
    let plain = jsb().features();
    assert!(plain.csum_v3(), "cjfs mkfs writes a csum v3 journal");
    let opts = preset::resolve("joj").expect("joj");
    let fs = Fs::open(dev.clone(), opts.clone()).expect("mount");
    assert_eq!(jsb().features(), plain, "nothing is written before the first handle");
    let f = fs.create(ROOT_INO, b"x", 0o644, 0, 0).expect("create");
    fs.fsync(f.ino, false).expect("fsync");
    let on = jsb();
    assert!(single_io::is_single_io(on.features()), "{:?}", on.features());
    assert_ne!(on.s_start, 0, "the superblock points at the head of the log");
    fs.unmount().expect("unmount");
    let off = jsb();
    assert_eq!((off.features(), off.s_start), (plain, 0), "a clean unmount leaves the journal as it was");
    // A crash copy taken while mounted replays with our recovery.
    let fs = Fs::open(dev.clone(), opts).expect("mount");
    let f = fs.create(ROOT_INO, b"y", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, b"durable").expect("write");
    fs.fsync(f.ino, false).expect("fsync");
    let crash: Device = Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &ssd.image_bytes()));
    drop(fs);
    let fs = Fs::open(crash, preset::resolve("jbd2").expect("jbd2")).expect("recover");
    let y = fs.resolve("y").expect("y");
    let mut buf = [0u8; 7];
    assert_eq!(fs.read(y, 0, &mut buf).expect("read"), 7);
    assert_eq!(&buf, b"durable");
}

#[test]
fn files_inherit_data_journaling_from_their_directory() {
    let r = rig("jbd2", DataMode::Ordered, None);
    let d = r.fs.mkdir(ROOT_INO, b"db", 0o755, 0, 0).expect("mkdir");
    r.fs.set_journal_data(d.ino, true).expect("chattr +j dir");
    let f = r.fs.create(d.ino, b"main.db", 0o644, 0, 0).expect("create");
    let sub = r.fs.mkdir(d.ino, b"sub", 0o755, 0, 0).expect("mkdir");
    let l = r.fs.symlink(d.ino, b"link", b"main.db", 0, 0).expect("symlink");
    const JDATA: u32 = 0x4000;
    assert_ne!(r.fs.getattr(f.ino).unwrap().flags & JDATA, 0, "a file made in a +j directory");
    assert_ne!(r.fs.getattr(sub.ino).unwrap().flags & JDATA, 0, "a directory made in a +j directory");
    assert_eq!(r.fs.getattr(l.ino).unwrap().flags & JDATA, 0, "not a symlink (ext4_mask_flags)");
    let g = r.fs.create(ROOT_INO, b"other", 0o644, 0, 0).expect("create");
    assert_eq!(r.fs.getattr(g.ino).unwrap().flags & JDATA, 0);
    // The inherited mode is the data-journaled one: its fsync writes nothing home.
    r.fs.write(f.ino, 0, &pattern(5, 8192)).expect("write");
    let s = r.seen(|fs| fs.fsync(f.ino, false).expect("fsync"));
    assert_eq!(s.in_place(), 0, "{s:?}");
    r.fs.unmount().expect("unmount");
}

#[test]
fn switching_to_ordered_empties_the_journal() {
    let r = rig("joj+leave=empty", DataMode::Ordered, None);
    let ino = data_journaled_file(&r.fs, b"f");
    r.fs.write(ino, 0, &pattern(6, 16384)).expect("write");
    r.fs.fsync(ino, false).expect("fsync");
    let other = r.fs.create(ROOT_INO, b"g", 0o644, 0, 0).expect("create");
    r.fs.write(other.ino, 0, &pattern(7, 4096)).expect("write");
    r.fs.set_journal_data(ino, false).expect("chattr -j");
    // Everything before the switch is home; the log holds at most the switch itself.
    let left = r.logged();
    assert!(left <= 1, "{left} transactions left in the log");
    r.fs.write(ino, 0, &pattern(8, 4096)).expect("ordered write");
    let s = r.seen(|fs| fs.fsync(ino, false).expect("fsync"));
    assert!(s.writes.iter().any(|w| w.0 == BlockKind::Data), "ordered data goes home: {s:?}");
    r.fs.unmount().expect("unmount");
}

impl Rig {
    /// The log's transactions on the device now.
    fn logged(&self) -> usize {
        let dev = self.rec.clone() as Device;
        let (sb, _) = cjfs_fs::mkfs::read_layout(&*dev).expect("layout");
        let (_, areas) = cjfs_fs::fs::journal_logs(&dev, &sb).expect("journal");
        cjfs_journal::recovery::scan(&*dev, &areas[0]).expect("scan").transactions.len()
    }

    /// A new file of three blocks, fsynced: the adaptive policy data-journals it.
    fn small_synced_file(&self, name: &[u8]) -> cjfs_fs::Attr {
        let f = self.fs.create(ROOT_INO, name, 0o644, 0, 0).expect("create");
        self.fs.write(f.ino, 0, &pattern(1, 3 * 4096)).expect("pages");
        self.fs.fsync(f.ino, false).expect("fsync");
        assert_ne!(self.fs.getattr(f.ino).unwrap().flags & 0x4000, 0, "data-journaled");
        f
    }

    /// Mount a copy of the device as it is now (every write applied so far: a crash with
    /// the cache written back) and read `len` bytes of `name`.
    fn after_crash(&self, name: &[u8], len: usize) -> Vec<u8> {
        let mut got = recovered(&self.ssd.image_bytes(), name);
        got.truncate(len);
        got
    }
}

#[test]
fn leaving_data_journaling_by_revoke_writes_nothing_at_the_switch() {
    let r = rig("joj", DataMode::Ordered, None);
    let ino = data_journaled_file(&r.fs, b"f");
    let mut want = pattern(6, 16384);
    r.fs.write(ino, 0, &want).expect("write");
    r.fs.fsync(ino, false).expect("fsync");
    let other = r.fs.create(ROOT_INO, b"g", 0o644, 0, 0).expect("create");
    r.fs.write(other.ino, 0, &pattern(7, 4096)).expect("write");
    let s = r.seen(|fs| fs.set_journal_data(ino, false).expect("chattr -j"));
    assert_eq!(s, Seen::default(), "nothing written or flushed at the switch");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.left_by_revoke, st.blocks_handed), (1, 0), "the images stay checkpoint work: {st:?}");
    assert!(r.logged() >= 1, "the journaled copies stay in the log");
    // Rewritten and synced: the block still has its image in the log, so the write is
    // journaled again (a write home now could be overwritten by the older image at replay or
    // checkpoint); its sync commits it, the other file's new block going home first. A
    // crash now replays the newer copy.
    want[..4096].copy_from_slice(&pattern(8, 4096));
    r.fs.write(ino, 0, &want[..4096]).expect("ordered write");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.blocks_handed, st.blocks_rejournaled), (0, 1), "{st:?}");
    let s = r.seen(|fs| fs.fsync(ino, true).expect("fdatasync"));
    let home: usize = s.writes.iter().filter(|w| w.0 == BlockKind::Data).map(|w| w.1).sum();
    assert_eq!(home, 1, "only the other file's block goes home: {s:?}");
    assert!(s.writes.iter().any(|w| w.0 == BlockKind::JournalTransaction), "the rewrite committed: {s:?}");
    assert!(r.logged() >= 2, "no checkpoint ran: the old copies are still in the log");
    assert_eq!(r.after_crash(b"f", want.len()), want, "recovery replayed an older copy");
    // Once checkpointed, the images are gone: a rewrite goes in place and an overwrite
    // needs no commit.
    r.fs.journal().checkpoint().expect("checkpoint");
    want[4096..8192].copy_from_slice(&pattern(9, 4096));
    r.fs.write(ino, 4096, &want[4096..8192]).expect("ordered write");
    let s = r.seen(|fs| fs.fsync(ino, true).expect("fdatasync"));
    assert_eq!(r.fs.adaptive_stats().blocks_rejournaled, 1);
    assert_eq!((s.writes.len(), s.flushes), (1, 1), "{s:?}");
    assert_eq!(r.after_crash(b"f", want.len()), want);
    r.fs.unmount().expect("unmount");
}

#[test]
fn a_full_log_breaks_a_switch_hold_rather_than_wait() {
    // The switched file's copies are the oldest in a log that the switch's own commit needs
    // room in: the commit writes the file's blocks home itself and the tail moves on.
    let r = rig("adaptive+osum=off", DataMode::Ordered, Some(4096));
    let f = r.small_synced_file(b"f");
    let fill = data_journaled_file(&r.fs, b"fill");
    for i in 0..4u8 {
        r.fs.write(fill, 0, &pattern(20 + i, 900 * 4096)).expect("fill");
        r.fs.fsync(fill, false).expect("fsync");
    }
    assert_eq!(r.fs.journal().stats().leave_breaks, 0);
    // One transaction: more of the pinned file, and a large window over `f` that sends it
    // back to ordered at its sync, handing its three journaled blocks over with their
    // copies in the oldest transaction of the log held until the switch is durable.
    r.fs.write(fill, 0, &pattern(30, 600 * 4096)).expect("more");
    let want = pattern(7, 300 * 4096);
    r.fs.write(f.ino, 0, &want).expect("large window");
    r.fs.fsync(f.ino, false).expect("fsync");
    assert_eq!(r.fs.getattr(f.ino).unwrap().flags & 0x4000, 0, "back to ordered");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.left_by_revoke, st.blocks_handed), (1, 3), "{st:?}");
    assert!(r.fs.journal().stats().leave_breaks >= 1, "{:?}", r.fs.journal().stats());
    assert_eq!(r.after_crash(b"f", want.len()), want);
    r.fs.unmount().expect("unmount");
}

#[test]
fn the_adaptive_mode_follows_the_write_pattern() {
    // Without ordered-data checksums: every small window that needs a commit is journaled.
    let r = rig("adaptive+osum=off", DataMode::Ordered, Some(8192));
    const JDATA: u32 = 0x4000;
    let flags = |ino| r.fs.getattr(ino).unwrap().flags & JDATA;
    // A rollback journal: created, a few blocks written, fsynced: data-journaled at that
    // very fsync, which is then one write and one flush.
    let j = r.fs.create(ROOT_INO, b"db-journal", 0o644, 0, 0).expect("create");
    r.fs.write(j.ino, 0, &pattern(1, 512)).expect("header");
    r.fs.write(j.ino, 512, &pattern(2, 2 * 4096 + 8)).expect("pages");
    let s = r.seen(|fs| fs.fsync(j.ino, false).expect("fsync"));
    assert_ne!(flags(j.ino), 0, "small appends that need a commit go to data journaling");
    assert_eq!((s.writes.len(), s.flushes, s.in_place()), (1, 1, 0), "{s:?}");
    // A WAL filled in large runs stays ordered.
    let w = r.fs.create(ROOT_INO, b"db-wal", 0o644, 0, 0).expect("create");
    r.fs.write(w.ino, 0, &pattern(3, 300 * 4096)).expect("run");
    r.fs.fsync(w.ino, true).expect("fdatasync");
    assert_eq!(flags(w.ino), 0, "a large run stays ordered");
    // An overwrite that needs no commit stays ordered too (one flush either way).
    r.fs.write(w.ino, 0, &pattern(4, 4096)).expect("overwrite");
    r.fs.fsync(w.ino, true).expect("fdatasync");
    assert_eq!(flags(w.ino), 0);
    // A data-journaled file written in a large run goes back to ordered: by revoke, the
    // switch costs a large window's worth, so one pays for it.
    r.fs.write(j.ino, 0, &pattern(10, 300 * 4096)).expect("large");
    r.fs.fsync(j.ino, false).expect("fsync");
    assert_eq!(flags(j.ino), 0, "a large window sends it back to ordered");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.to_data, st.to_ordered, st.left_by_revoke), (1, 1, 1), "{st:?}");
    assert!(st.flush_ns > 0);
    // An explicit choice pins the mode.
    r.fs.set_journal_data(w.ino, false).expect("chattr -j");
    r.fs.write(w.ino, 300 * 4096, &pattern(5, 4096)).expect("append");
    r.fs.fsync(w.ino, false).expect("fsync");
    assert_eq!(flags(w.ino), 0, "pinned");
    r.fs.unmount().expect("unmount");
}

#[test]
fn the_sync_that_sends_a_file_back_writes_its_window_home_once() {
    let r = rig("adaptive+osum=off", DataMode::Ordered, Some(8192));
    let j = r.small_synced_file(b"db-journal");
    // A large window over the journaled blocks and past them: the sync that sees it switches
    // before its commit, so the window goes home (with the three handed blocks rewritten in
    // it) and the log carries only metadata and the revokes.
    let want = pattern(10, 300 * 4096);
    r.fs.write(j.ino, 0, &want).expect("large");
    let s = r.seen(|fs| fs.fsync(j.ino, false).expect("fsync"));
    assert_eq!(r.fs.getattr(j.ino).unwrap().flags & 0x4000, 0, "back to ordered");
    let sum = |k: BlockKind| -> usize { s.writes.iter().filter(|w| w.0 == k).map(|w| w.1).sum() };
    assert_eq!(sum(BlockKind::Data), 300, "{s:?}");
    assert!(sum(BlockKind::JournalTransaction) < 32, "the window is not logged: {s:?}");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.to_ordered, st.left_by_revoke, st.blocks_handed), (1, 1, 3), "{st:?}");
    assert_eq!(r.after_crash(b"db-journal", want.len()), want);
    // The switch revoked the window's blocks, so rewriting one of them now goes in place (a
    // database's next update transaction), not into the log again for the copies the insert
    // phase left there; recovery must not replay those over it.
    let mut want = want;
    for (i, blk) in [0usize, 1, 2, 200].into_iter().enumerate() {
        want[blk * 4096..(blk + 1) * 4096].copy_from_slice(&pattern(20 + i as u8, 4096));
        r.fs.write(j.ino, (blk * 4096) as u64, &want[blk * 4096..(blk + 1) * 4096]).expect("rewrite");
        let s = r.seen(|fs| fs.fsync(j.ino, true).expect("fdatasync"));
        assert_eq!((s.writes.len(), s.flushes, s.in_place()), (1, 1, 1), "an overwrite in place: {s:?}");
        assert_eq!(r.after_crash(b"db-journal", want.len()), want, "rewrite of block {blk}");
    }
    assert_eq!(r.fs.adaptive_stats().blocks_rejournaled, 0);
    r.fs.unmount().expect("unmount");
}

#[test]
fn emptying_the_journal_costs_two_large_windows() {
    let r = rig("adaptive+leave=empty+osum=off", DataMode::Ordered, Some(8192));
    let j = r.small_synced_file(b"db-journal");
    let flags = |ino| r.fs.getattr(ino).unwrap().flags & 0x4000;
    r.fs.write(j.ino, 0, &pattern(10, 300 * 4096)).expect("large");
    r.fs.fsync(j.ino, false).expect("fsync");
    assert_ne!(flags(j.ino), 0, "one large window does not pay for emptying the journal");
    r.fs.write(j.ino, 0, &pattern(11, 300 * 4096)).expect("large");
    r.fs.fsync(j.ino, false).expect("fsync");
    assert_eq!(flags(j.ino), 0, "two do");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.to_ordered, st.left_by_revoke), (1, 0), "{st:?}");
    r.fs.unmount().expect("unmount");
}

#[test]
fn small_rewrites_in_place_send_a_data_journaled_file_back_to_ordered() {
    let r = rig("adaptive+osum=off", DataMode::Ordered, Some(8192));
    let flags = |ino| r.fs.getattr(ino).unwrap().flags & 0x4000;
    // A WAL filled in small fdatasync'd appends: data-journaled (each needs a commit).
    let w = r.fs.create(ROOT_INO, b"db-wal", 0o644, 0, 0).expect("create");
    for i in 0..4u8 {
        r.fs.write(w.ino, u64::from(i) * 8192, &pattern(i, 8192)).expect("append");
        r.fs.fsync(w.ino, true).expect("fdatasync");
    }
    assert_ne!(flags(w.ino), 0, "small appends go to data journaling");
    // Then rewritten from its start, two blocks per fdatasync, as after a WAL checkpoint:
    // ordered would need no commit, so each window adds its 2 blocks, a descriptor and a
    // commit block to the debt.
    let windows = cjfs_fs::switch_cost_blocks(cjfs_fs::LeaveMode::Revoke).div_ceil(4);
    let rewrite = |k: u32| {
        r.fs.write(w.ino, u64::from(k % 4) * 8192, &pattern(20 + (k % 7) as u8, 8192)).expect("rewrite");
        r.fs.fsync(w.ino, true).expect("fdatasync");
    };
    for k in 0..windows - 1 {
        rewrite(k);
    }
    assert_ne!(flags(w.ino), 0, "not yet: the debt is below a switch's cost");
    // An append needs a commit anyway: data journaling saved its flush, the debt is cleared.
    r.fs.write(w.ino, 4 * 8192, &pattern(9, 4096)).expect("append");
    r.fs.fsync(w.ino, true).expect("fdatasync");
    for k in 0..windows - 1 {
        rewrite(k);
    }
    assert_ne!(flags(w.ino), 0, "the append cleared the debt");
    assert_eq!(r.fs.adaptive_stats().to_ordered, 0);
    rewrite(0);
    assert_eq!(flags(w.ino), 0, "the debt reached a switch's cost: back to ordered");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.to_data, st.to_ordered), (1, 1), "{st:?}");
    // The next sync commits the switch (its revokes, the handed blocks home).
    r.fs.write(w.ino, 0, &pattern(29, 8192)).expect("rewrite");
    r.fs.fsync(w.ino, true).expect("fdatasync");
    // Rewrites stay ordered now, one flush each (journaled again while their blocks have
    // images in the log, which the policy does not count against ordered mode).
    let s = r.seen(|fs| {
        fs.write(w.ino, 0, &pattern(30, 8192)).expect("rewrite");
        fs.fsync(w.ino, true).expect("fdatasync");
    });
    assert_eq!(flags(w.ino), 0);
    assert_eq!(s.flushes, 1, "{s:?}");
    r.fs.unmount().expect("unmount");
}

#[test]
fn adaptive_policy_is_inert_under_data_journal() {
    let r = rig("adaptive", DataMode::Journal, None);
    let f = r.fs.create(ROOT_INO, b"j", 0o644, 0, 0).expect("create");
    for i in 0..3u8 {
        r.fs.write(f.ino, u64::from(i) * 4096, &pattern(i, 4096)).expect("write");
        r.fs.fsync(f.ino, false).expect("fsync");
    }
    r.fs.write(f.ino, 0, &pattern(9, 300 * 4096)).expect("large");
    r.fs.fsync(f.ino, false).expect("fsync");
    r.fs.write(f.ino, 0, &pattern(9, 300 * 4096)).expect("large");
    r.fs.fsync(f.ino, false).expect("fsync");
    assert_eq!(
        r.fs.adaptive_stats(),
        cjfs_fs::AdaptiveStats::default(),
        "every file's data is journaled anyway"
    );
    assert_eq!(r.fs.getattr(f.ino).unwrap().flags & 0x4000, 0, "no flag is set");
    r.fs.unmount().expect("unmount");
}

/// The paper's §3.1 example: nine small writes (2,576 bytes in all) to nine pages of a
/// data-journaled file, then fdatasync. The single write carries one descriptor, the nine
/// pages, the inode-table block and the commit block: 12 blocks, 49,152 bytes (the paper
/// reports 45,056, apparently without the descriptor).
#[test]
fn nine_small_writes_cost_twelve_journal_blocks() {
    let r = rig("joj", DataMode::Ordered, None);
    let ino = data_journaled_file(&r.fs, b"db-journal");
    r.fs.write(ino, 0, &pattern(1, 9 * 4096)).expect("preallocate");
    r.fs.fsync(ino, false).expect("fsync");
    // An old mtime, so the first small write changes the inode whatever the clock's tick
    // (writes inside one tick of the coarse clock leave it out of the transaction).
    let old = cjfs_fs::Timestamp::new(1, 0);
    r.fs.setattr(ino, &cjfs_fs::SetAttr { mtime: Some(old), ..Default::default() }).expect("utimes");
    r.fs.fsync(ino, false).expect("fsync");
    let sizes = [512u64, 100, 300, 200, 264, 300, 300, 300, 300];
    assert_eq!(sizes.iter().sum::<u64>(), 2576);
    for (i, n) in sizes.iter().enumerate() {
        r.fs.write(ino, i as u64 * 4096 + 7, &pattern(i as u8, *n as usize)).expect("small write");
    }
    let s = r.seen(|fs| fs.fsync(ino, true).expect("fdatasync"));
    assert_eq!(s.writes, vec![(BlockKind::JournalTransaction, 12)], "{s:?}");
    assert_eq!(s.flushes, 1);
    r.fs.unmount().expect("unmount");
}

#[test]
fn a_file_made_where_the_last_one_died_young_journals_large_windows() {
    let r = rig("adaptive", DataMode::Ordered, Some(8192));
    const JDATA: u32 = 0x4000;
    // A file of 100 blocks made under `name` and fsynced.
    let made = |name: &[u8], seed: u8| {
        let f = r.fs.create(ROOT_INO, name, 0o644, 0, 0).expect("create");
        r.fs.write(f.ino, 0, &pattern(seed, 100 * 4096)).expect("pages");
        r.fs.fsync(f.ino, false).expect("fsync");
        f.ino
    };
    // A rollback journal of 100 blocks: too large for data journaling on its own.
    let first = made(b"db-journal", 1);
    assert_eq!(r.fs.getattr(first).unwrap().flags & JDATA, 0, "ordered");
    // Deleted while its transaction is still in the log: the next file of that name starts
    // short-lived, and its window goes into the log as one write with one flush.
    r.fs.unlink(ROOT_INO, b"db-journal").expect("unlink");
    let next = r.fs.create(ROOT_INO, b"db-journal", 0o644, 0, 0).expect("create");
    let want = pattern(2, 100 * 4096);
    r.fs.write(next.ino, 0, &want).expect("pages");
    let s = r.seen(|fs| fs.fsync(next.ino, false).expect("fsync"));
    assert_ne!(r.fs.getattr(next.ino).unwrap().flags & JDATA, 0, "data-journaled");
    assert_eq!((s.writes.len(), s.flushes, s.in_place()), (1, 1, 0), "{s:?}");
    assert_eq!(r.fs.adaptive_stats().short_lived, 1);
    assert_eq!(r.after_crash(b"db-journal", want.len()), want);
    // Another name, or a file removed after its checkpoint, teaches nothing.
    let other = made(b"other", 3);
    assert_eq!(r.fs.getattr(other).unwrap().flags & JDATA, 0, "ordered");
    r.fs.journal().checkpoint().expect("checkpoint");
    r.fs.unlink(ROOT_INO, b"other").expect("unlink");
    let again = made(b"other", 4);
    assert_eq!(r.fs.getattr(again).unwrap().flags & JDATA, 0, "old when removed: ordered");
    assert_eq!(r.fs.adaptive_stats().short_lived, 1);
    r.fs.unmount().expect("unmount");
}

#[test]
fn a_truncate_to_the_same_size_needs_no_commit_for_fdatasync() {
    let r = rig("jbd2", DataMode::Ordered, None);
    let f = r.fs.create(ROOT_INO, b"db", 0o644, 0, 0).expect("create");
    r.fs.write(f.ino, 0, &pattern(1, 8 * 4096)).expect("write");
    r.fs.fsync(f.ino, false).expect("fsync");
    r.fs.write(f.ino, 4096, &pattern(2, 4096)).expect("overwrite");
    r.fs.setattr(f.ino, &cjfs_fs::SetAttr { size: Some(8 * 4096), ..Default::default() }).expect("truncate");
    let s = r.seen(|fs| fs.fsync(f.ino, true).expect("fdatasync"));
    assert_eq!((s.writes.len(), s.flushes), (1, 1), "the data and a flush, no commit: {s:?}");
    r.fs.unmount().expect("unmount");
}

#[test]
fn a_commit_whose_ordered_data_only_overwrite_needs_one_flush() {
    let r = rig("joj", DataMode::Ordered, None);
    // `f` leaves data journaling with its two blocks' images still in the log; `g` is an
    // ordered file whose four blocks are home.
    let f = data_journaled_file(&r.fs, b"f");
    let mut fwant = pattern(1, 2 * 4096);
    r.fs.write(f, 0, &fwant).expect("write");
    r.fs.fsync(f, false).expect("fsync");
    r.fs.set_journal_data(f, false).expect("chattr -j");
    let g = r.fs.create(ROOT_INO, b"g", 0o644, 0, 0).expect("create").ino;
    let mut gwant = pattern(2, 4 * 4096);
    r.fs.write(g, 0, &gwant).expect("write");
    r.fs.fsync(g, false).expect("fsync");
    // One transaction: `f`'s rewrite (journaled again) and an overwrite inside `g`'s size,
    // which the commit writes home beside its log write; one flush covers both.
    let j0 = r.fs.journal().stats();
    fwant[..4096].copy_from_slice(&pattern(3, 4096));
    r.fs.write(f, 0, &fwant[..4096]).expect("rewrite");
    gwant[4096..8192].copy_from_slice(&pattern(4, 4096));
    r.fs.write(g, 4096, &gwant[4096..8192]).expect("overwrite");
    let s = r.seen(|fs| fs.fsync(f, true).expect("fdatasync"));
    let d = r.fs.journal().stats().delta(&j0);
    assert_eq!((d.single_io_commits, d.single_io_unordered, d.single_io_preflushes), (1, 1, 0), "{d:?}");
    assert_eq!(s.flushes, 1, "{s:?}");
    assert_eq!(s.in_place(), 1, "g's block: {s:?}");
    assert_eq!(r.after_crash(b"f", fwant.len()), fwant);
    assert_eq!(r.after_crash(b"g", gwant.len()), gwant);
    // A newly allocated block in the transaction must be home before its commit record.
    let j0 = r.fs.journal().stats();
    fwant[4096..].copy_from_slice(&pattern(5, 4096));
    r.fs.write(f, 4096, &fwant[4096..]).expect("rewrite");
    gwant.extend_from_slice(&pattern(6, 4096));
    r.fs.write(g, 4 * 4096, &gwant[4 * 4096..]).expect("append");
    let s = r.seen(|fs| fs.fsync(f, true).expect("fdatasync"));
    let d = r.fs.journal().stats().delta(&j0);
    assert_eq!((d.single_io_commits, d.single_io_unordered, d.single_io_preflushes), (1, 0, 1), "{d:?}");
    assert_eq!(s.flushes, 2, "{s:?}");
    assert_eq!(r.after_crash(b"f", fwant.len()), fwant);
    assert_eq!(r.after_crash(b"g", gwant.len()), gwant);
    assert_eq!(r.fs.adaptive_stats().blocks_rejournaled, 2);
    r.fs.unmount().expect("unmount");
}

/// `base` with the writes of `ops` whose kind `keep` accepts applied (a crash that kept
/// exactly those): the image a recovery then starts from.
fn image_keeping(base: &[u8], ops: &[RecordedOp], keep: impl Fn(BlockKind) -> bool) -> Vec<u8> {
    let mut img = base.to_vec();
    for op in ops {
        if let RecordedOp::Write { block, bufs, tag, .. } = op
            && keep(tag.kind)
        {
            for (i, b) in bufs.iter().enumerate() {
                let at = (*block as usize + i) * 4096;
                img[at..at + 4096].copy_from_slice(b);
            }
        }
    }
    img
}

/// The contents of `name` after recovering `img`.
fn recovered(img: &[u8], name: &[u8]) -> Vec<u8> {
    let dev = Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), img));
    let fs = Fs::open(dev as Device, preset::resolve("jbd2").expect("preset")).expect("recover");
    let ino = fs.lookup(ROOT_INO, name).expect("lookup").ino;
    let size = fs.getattr(ino).expect("getattr").size as usize;
    let mut got = vec![0u8; size];
    let n = fs.read(ino, 0, &mut got).expect("read");
    got.truncate(n);
    fs.unmount().expect("unmount");
    got
}

#[test]
fn exposed_data_summed_in_the_commit_block_needs_one_flush() {
    // `joj`: the file stays ordered (the adaptive policy would journal a file this small).
    let r = rig("joj+osum=on", DataMode::Ordered, None);
    let f = r.fs.create(ROOT_INO, b"wal", 0o644, 0, 0).expect("create").ino;
    // WAL-like frames (4120 bytes: the last block of each sync is partly written).
    let mut want = pattern(1, 3 * 4120);
    r.fs.write(f, 0, &want).expect("write");
    r.fs.fsync(f, false).expect("fsync");
    let base = r.ssd.image_bytes();
    // Growth: new blocks and the size; the commit block sums them, one flush for both.
    let j0 = r.fs.journal().stats();
    r.rec.clear();
    let more = pattern(2, 4 * 4120);
    r.fs.write(f, want.len() as u64, &more).expect("append");
    r.fs.fsync(f, true).expect("fdatasync");
    let ops = r.rec.take_log().ops;
    let s = Seen::of(&ops);
    let d = r.fs.journal().stats().delta(&j0);
    assert_eq!((d.osum_commits, d.single_io_preflushes, d.osum_confirm_writes), (1, 0, 0), "{d:?}");
    assert_eq!(s.flushes, 1, "{s:?}");
    // The append began inside the last block the previous sync summed: that block is
    // logged, not written in place before a later commit confirms that sync.
    assert_eq!(r.fs.adaptive_stats().blocks_rejournaled, 1);
    let old = want.clone();
    want.extend_from_slice(&more);
    // Every write kept: the new state. The log write kept without the data: the commit's
    // sums do not match, it is not replayed, and the previous sync's bytes are all there.
    assert_eq!(recovered(&image_keeping(&base, &ops, |_| true), b"wal"), want);
    assert_eq!(recovered(&image_keeping(&base, &ops, |k| k != BlockKind::Data), b"wal"), old);
    assert_eq!(recovered(&image_keeping(&base, &ops, |k| k == BlockKind::Data), b"wal"), old);
    assert_eq!(r.after_crash(b"wal", want.len()), want);
    r.fs.unmount().expect("unmount");
}

#[test]
fn stock_tools_refuse_a_journal_with_ordered_sums_until_it_is_closed() {
    let r = rig("adaptive", DataMode::Ordered, None);
    let f = r.fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    r.fs.write(f, 0, &pattern(3, 8192)).expect("write");
    r.fs.fsync(f, false).expect("fsync");
    let sb_of = |img: &[u8]| {
        journal_superblock(&(Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), img)) as Device))
    };
    let bit = cjfs_journal::superblock::INCOMPAT_CJFS_OSUM;
    assert_ne!(sb_of(&r.ssd.image_bytes()).s_feature_incompat & bit, 0, "set while open");
    // Recovery clears it.
    let crashed = r.ssd.image_bytes();
    let dev = Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &crashed));
    cjfs_fs::recover_device(&(dev.clone() as Device)).expect("recover");
    assert_eq!(sb_of(&dev.image_bytes()).s_feature_incompat & bit, 0, "cleared by recovery");
    r.fs.unmount().expect("unmount");
    assert_eq!(sb_of(&r.ssd.image_bytes()).s_feature_incompat & bit, 0, "cleared at unmount");
}

#[test]
fn with_ordered_sums_only_short_lived_files_journal_their_data() {
    let r = rig("adaptive", DataMode::Ordered, Some(8192));
    const JDATA: u32 = 0x4000;
    let flags = |ino| r.fs.getattr(ino).unwrap().flags & JDATA;
    // A database grown by a page and fsynced: ordered costs one flush too (data and log
    // write together, the data summed), so it stays ordered.
    let db = r.fs.create(ROOT_INO, b"db", 0o644, 0, 0).expect("create").ino;
    r.fs.write(db, 0, &pattern(1, 2 * 4096)).expect("pages");
    let s = r.seen(|fs| fs.fsync(db, false).expect("fsync"));
    assert_eq!(flags(db), 0, "a small window that needs a commit stays ordered");
    assert_eq!(s.flushes, 1, "{s:?}");
    assert!(s.writes.iter().any(|(k, _)| *k == BlockKind::Data), "data in place: {s:?}");
    // A rollback journal deleted while in the log: the next one of that name dies young
    // too, so its window goes into the log, one write, no in-place write.
    let j = r.fs.create(ROOT_INO, b"db-journal", 0o644, 0, 0).expect("create").ino;
    r.fs.write(j, 0, &pattern(2, 3 * 4096)).expect("pages");
    r.fs.fsync(j, false).expect("fsync");
    assert_eq!(flags(j), 0, "not known to be short-lived yet");
    r.fs.unlink(ROOT_INO, b"db-journal").expect("unlink");
    let j = r.fs.create(ROOT_INO, b"db-journal", 0o644, 0, 0).expect("create").ino;
    r.fs.write(j, 0, &pattern(3, 3 * 4096)).expect("pages");
    let s = r.seen(|fs| fs.fsync(j, false).expect("fsync"));
    assert_ne!(flags(j), 0, "short-lived: data-journaled");
    assert_eq!((s.writes.len(), s.flushes, s.in_place()), (1, 1, 0), "{s:?}");
    let st = r.fs.adaptive_stats();
    assert_eq!((st.to_data, st.short_lived), (1, 1), "{st:?}");
    r.fs.unmount().expect("unmount");
}
