//! iJournaling end to end: what fsync writes (i-transactions, no normal commit), when it
//! commits instead, and what recovery brings back from a copy of the device taken while
//! mounted (a crash): the fsynced files and their new directories, nothing else, with the
//! image clean for `e2fsck` and the private feature bit set until then.

mod common;
use common::read_all;

use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{BlockDevice, Device, EmulatedSsd, SsdPreset};
use cjfs_fs::{Fs, MkfsOptions, MountOptions, ROOT_INO, mkfs, preset};
use cjfs_journal::superblock::INCOMPAT_CJFS_IJOURNAL;

fn opts(name: &str) -> MountOptions {
    let mut o = preset::resolve(name).expect("preset");
    // No timer commits: only what the test does reaches the normal journal.
    o.journal.commit_interval = Duration::from_secs(3600);
    o
}

fn image(o: &MountOptions, mib: u64) -> Arc<EmulatedSsd> {
    let ssd = Arc::new(EmulatedSsd::ram((mib << 20) / 4096));
    let mk = preset::mkfs_for(o, 1024, MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() });
    mkfs(&*ssd, &mk).expect("mkfs");
    ssd
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8).collect()
}

/// A fresh image on the emulated SATA SSD preset (volatile cache, FUA, flush costs).
fn sata_image(o: &MountOptions) -> Arc<EmulatedSsd> {
    Arc::new(EmulatedSsd::from_image(SsdPreset::sata_ssd(), &image(o, 64).image_bytes()))
}

/// A crash: the device's bytes now, as a new device.
fn crash_copy(ssd: &EmulatedSsd) -> Arc<EmulatedSsd> {
    Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &ssd.image_bytes()))
}

fn fsck(bytes: &[u8]) {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("img");
    std::fs::write(&p, bytes).expect("write");
    common::assert_fsck_clean(&p);
}

fn ijournal_bit(dev: &Device) -> bool {
    let (sb, _) = cjfs_fs::mkfs::read_layout(&**dev).expect("layout");
    let (jsb, _, _) = cjfs_fs::fs::journal_areas(dev, &sb).expect("areas");
    jsb.s_feature_incompat & INCOMPAT_CJFS_IJOURNAL != 0
}

#[test]
fn append_and_fsync_writes_one_record_block_and_no_commit() {
    for (name, per_fsync) in [("ijournal", 1u64), ("ijournal+iform=commit", 2)] {
        let o = opts(name);
        let ssd = image(&o, 64);
        let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
        let f = fs.create(ROOT_INO, b"log", 0o644, 0, 0).expect("create").ino;
        fs.sync().expect("sync");
        let before = fs.journal().stats();
        let n = 50u64;
        for i in 0..n {
            fs.write(f, i * 100, &content(100, i as u8)).expect("append");
            fs.fsync(f, false).expect("fsync");
        }
        let d = fs.journal().stats().delta(&before);
        let st = fs.ijournal_stats().expect("ijournal on");
        assert_eq!(d.transactions, 0, "{name}: an fsync committed: {st:?}");
        assert_eq!(st.served, n, "{name}: {st:?}");
        assert_eq!(st.records, n, "{name}");
        assert_eq!(st.blocks, n * per_fsync, "{name}: blocks per fsync");
        assert_eq!(st.fallback_total(), 0, "{name}: {st:?}");
        let want: Vec<u8> = (0..n).flat_map(|i| content(100, i as u8)).collect();
        let copy = crash_copy(&ssd);
        assert!(ijournal_bit(&(copy.clone() as Device)), "{name}: the crash image carries the private bit");
        drop(fs);
        let (fs, report) = Fs::open_with_report(copy.clone(), o.clone()).expect("recover");
        let ij = report.ijournal.expect("ijournal replayed");
        assert!(ij.applied >= 1, "{name}: {ij:?}");
        assert_eq!(read_all(&fs, f), want, "{name}: the fsynced appends after recovery");
        fs.unmount().expect("unmount");
        assert!(!ijournal_bit(&(copy.clone() as Device)));
        fsck(&copy.image_bytes());
    }
}

#[test]
fn a_new_file_in_new_directories_comes_back_with_its_path() {
    let o = opts("ijournal");
    let ssd = image(&o, 64);
    let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).expect("mkdir").ino;
    let b = fs.mkdir(a, b"b", 0o750, 0, 0).expect("mkdir").ino;
    let c = fs.create(b, b"c", 0o600, 0, 0).expect("create").ino;
    let data = content(300_000, 3);
    fs.write(c, 0, &data).expect("write");
    // Not fsynced: must not come back.
    let lost = fs.create(a, b"lost", 0o644, 0, 0).expect("create").ino;
    fs.write(lost, 0, b"gone").expect("write");
    fs.fsync(c, false).expect("fsync");
    let st = fs.ijournal_stats().expect("on");
    assert_eq!((st.served, st.records, st.dir_records), (1, 3, 2), "{st:?}");
    let copy = crash_copy(&ssd);
    drop(fs);
    let fs = Fs::open(copy.clone(), o.clone()).expect("recover");
    assert_eq!(fs.resolve("/a/b/c").expect("path back"), c);
    assert_eq!(read_all(&fs, c), data);
    assert_eq!(fs.getattr(b).expect("b").perm, 0o750);
    assert_eq!(fs.getattr(a).expect("a").nlink, 3);
    assert!(fs.lookup(a, b"lost").is_err(), "a file never fsynced stays lost");
    fs.unmount().expect("unmount");
    fsck(&copy.image_bytes());
}

#[test]
fn fallbacks_commit_and_are_counted() {
    let o = opts("ijournal");
    let ssd = image(&o, 64);
    let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir").ino;
    fs.fsync(d, false).expect("directory fsync");
    let f = fs.create(d, b"f", 0o644, 0, 0).expect("create").ino;
    fs.write(f, 0, b"x").expect("write");
    fs.link(f, ROOT_INO, b"g").expect("link");
    fs.fsync(f, false).expect("fsync after link");
    let h = fs.create(d, b"h", 0o644, 0, 0).expect("create").ino;
    fs.rename(d, b"h", d, b"h2", Default::default()).expect("rename");
    fs.fsync(h, false).expect("fsync after rename");
    let st = fs.ijournal_stats().expect("on");
    let n = |k: &str| st.fallbacks.iter().find(|(x, _)| x == k).map_or(0, |(_, n)| *n);
    assert_eq!((n("directory"), n("hard-link"), n("rename-unlink")), (1, 1, 1), "{st:?}");
    assert_eq!(st.served, 0);
    fs.unmount().expect("unmount");
    fsck(&ssd.image_bytes());
}

/// varmail's pattern: a file unlinked and its name re-created and fsynced before the unlink
/// is durable. The record carries the replacement, so the fsync commits nothing; after a
/// crash the new file has the name and the old inode is gone (freed, or one link fewer),
/// even when the old file's own record claims the name too. A name freed by a rename still
/// falls back: dropping the old entry would lose the file that moved.
#[test]
fn a_name_reused_after_an_unlink_is_served_by_a_record() {
    let o = opts("ijournal");
    let ssd = image(&o, 64);
    let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir").ino;
    let old = fs.create(d, b"m", 0o644, 0, 0).expect("create").ino;
    fs.write(old, 0, &content(9000, 1)).expect("write");
    let linked = fs.create(d, b"h", 0o644, 0, 0).expect("create").ino;
    fs.write(linked, 0, b"two names").expect("write");
    fs.link(linked, ROOT_INO, b"h2").expect("link");
    let _moved = fs.create(d, b"r", 0o644, 0, 0).expect("create").ino;
    fs.sync().expect("sync");
    // Durable: d/m -> old, d/h and /h2 -> linked, d/r -> moved. Now, none of it durable:
    fs.unlink(d, b"m").expect("unlink m");
    let new = fs.create(d, b"m", 0o644, 0, 0).expect("re-create m").ino;
    fs.write(new, 0, &content(3000, 2)).expect("write");
    fs.fsync(new, false).expect("fsync m");
    // A new file fsynced under a new name, unlinked, and its name reused: two records claim it.
    let first = fs.create(d, b"n", 0o644, 0, 0).expect("create n").ino;
    fs.write(first, 0, &content(100, 3)).expect("write");
    fs.fsync(first, false).expect("fsync n");
    fs.unlink(d, b"n").expect("unlink n");
    let second = fs.create(d, b"n", 0o644, 0, 0).expect("re-create n").ino;
    fs.write(second, 0, &content(200, 4)).expect("write");
    fs.fsync(second, false).expect("fsync n again");
    fs.unlink(d, b"h").expect("unlink h");
    let h = fs.create(d, b"h", 0o644, 0, 0).expect("re-create h").ino;
    fs.fsync(h, false).expect("fsync h");
    let st = fs.ijournal_stats().expect("on");
    assert_eq!((st.served, st.fallback_total()), (4, 0), "{st:?}");
    // The crash: nothing above is in a durable normal commit.
    let copy = crash_copy(&ssd);
    fs.rename(d, b"r", d, b"r2", Default::default()).expect("rename");
    let r = fs.create(d, b"r", 0o644, 0, 0).expect("re-create r").ino;
    fs.fsync(r, false).expect("fsync r");
    let st = fs.ijournal_stats().expect("on");
    let n = |k: &str| st.fallbacks.iter().find(|(x, _)| x == k).map_or(0, |(_, n)| *n);
    assert_eq!(n("name-reuse"), 1, "{st:?}");
    drop(fs);
    let (fs, report) = Fs::open_with_report(copy.clone(), o.clone()).expect("recover");
    let ij = report.ijournal.expect("replayed");
    assert_eq!(ij.applied, 3, "the first record of n is dropped: {ij:?}");
    assert_eq!(fs.lookup(d, b"m").expect("m").ino, new);
    assert_eq!(read_all(&fs, new), content(3000, 2));
    assert_eq!(fs.lookup(d, b"n").expect("n").ino, second);
    assert_eq!(read_all(&fs, second), content(200, 4));
    assert_eq!(fs.lookup(d, b"h").expect("h").ino, h);
    assert_eq!(fs.lookup(ROOT_INO, b"h2").expect("h2").ino, linked);
    assert_eq!(fs.getattr(linked).expect("linked").nlink, 1);
    assert!(
        fs.getattr(old).is_err() || fs.getattr(old).expect("old").nlink == 0,
        "the unlinked inode is freed"
    );
    fs.unmount().expect("unmount");
    fsck(&copy.image_bytes());
}

#[test]
fn records_older_than_a_durable_commit_are_ignored() {
    let o = opts("ijournal");
    let ssd = image(&o, 64);
    let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    fs.write(f, 0, &content(5000, 1)).expect("write");
    fs.fsync(f, false).expect("fsync");
    // A later truncate, committed normally: the record (longer file) is stale.
    fs.setattr(f, &cjfs_fs::SetAttr { size: Some(10), ..Default::default() }).expect("truncate");
    fs.sync().expect("sync");
    let copy = crash_copy(&ssd);
    drop(fs);
    let (fs, report) = Fs::open_with_report(copy.clone(), o.clone()).expect("recover");
    let ij = report.ijournal.expect("replayed");
    assert_eq!((ij.applied, ij.stale), (0, 1), "{ij:?}");
    assert_eq!(read_all(&fs, f), content(5000, 1)[..10].to_vec());
    fs.unmount().expect("unmount");
    fsck(&copy.image_bytes());
}

#[test]
fn recovery_is_idempotent() {
    let o = opts("ijournal");
    let ssd = image(&o, 64);
    let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).expect("mkdir").ino;
    let f = fs.create(a, b"f", 0o644, 0, 0).expect("create").ino;
    // Interleaved appends to two files: an extent tree with external blocks.
    let g = fs.create(a, b"g", 0o644, 0, 0).expect("create").ino;
    for i in 0..40u64 {
        fs.write(f, i * 8192, &content(4096, i as u8)).expect("write");
        fs.write(g, i * 8192, &content(4096, 100 + i as u8)).expect("write");
    }
    fs.fsync(f, false).expect("fsync");
    let st = fs.ijournal_stats().expect("on");
    assert!(st.payload_blocks > 0, "an external extent block was logged: {st:?}");
    let crash = ssd.image_bytes();
    drop(fs);
    let once = Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &crash));
    cjfs_fs::recover_device(&(once.clone() as Device)).expect("recover");
    let twice = Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &once.image_bytes()));
    cjfs_fs::recover_device(&(twice.clone() as Device)).expect("recover again");
    assert!(once.image_bytes() == twice.image_bytes(), "recovering a recovered image changed it");
    let fs = Fs::open(once.clone(), o.clone()).expect("mount");
    let want: Vec<u8> = (0..40u64)
        .flat_map(|i| {
            let mut v = content(4096, i as u8);
            if i < 39 {
                v.extend(vec![0; 4096]);
            }
            v
        })
        .collect();
    assert_eq!(read_all(&fs, f), want);
    assert!(fs.lookup(a, b"g").is_err());
    fs.unmount().expect("unmount");
    fsck(&once.image_bytes());
}

#[test]
fn journaled_data_commits_and_presets_refuse_several_logs() {
    let mut o = opts("ijournal");
    o.data = cjfs_fs::DataMode::Journal;
    let ssd = image(&o, 64);
    let fs = Fs::open(ssd.clone(), o).expect("mount");
    let f = fs.create(ROOT_INO, b"j", 0o644, 0, 0).expect("create").ino;
    fs.write(f, 0, b"journaled").expect("write");
    fs.fsync(f, false).expect("fsync");
    let st = fs.ijournal_stats().expect("on");
    assert_eq!(st.fallbacks, vec![("journal-data".to_string(), 1)]);
    fs.unmount().expect("unmount");
    let e = preset::resolve("zjournal+ijournal=cores").unwrap_err().to_string();
    assert!(e.contains("cannot be combined with several logs"), "{e}");
    assert!(preset::resolve("cjfs+ijournal=4+iform=commit+iarea=64").is_ok());
    assert!(preset::resolve("ijournal+iarea=8").is_err(), "an area under 16 blocks");
}

#[test]
fn an_image_without_ijournal_areas_commits_on_fsync() {
    let o = opts("ijournal");
    let ssd = Arc::new(EmulatedSsd::ram((64 << 20) / 4096));
    mkfs(&*ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    let fs = Fs::open(ssd, o).expect("mount");
    assert!(fs.ijournal_stats().is_none(), "no area, no iJournaling");
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    fs.write(f, 0, b"x").expect("write");
    fs.fsync(f, false).expect("fsync");
    fs.unmount().expect("unmount");
}

/// Threads fsyncing one shared file are grouped: a fsync that queued behind another one of
/// the same file is served by the next one, and every thread's write is back after a crash.
/// An fsync's data in a few runs goes FUA; scattered data (a database's pages) goes as plain
/// writes and one flush.
#[test]
fn concurrent_fsyncs_of_one_file_are_grouped_and_scattered_data_flushes_once() {
    let o = opts("ijournal");
    // A device with a volatile cache, FUA and a flush cost, so fsyncs take long enough to queue.
    let ssd = sata_image(&o);
    let fs = Arc::new(Fs::open(ssd.clone(), o.clone()).expect("mount"));
    let f = fs.create(ROOT_INO, b"table", 0o644, 0, 0).expect("create").ino;
    fs.sync().expect("sync");
    // The first record of the mount sets the private feature bit (a write and a flush).
    fs.write(f, 0, b"x").expect("write");
    fs.fsync(f, false).expect("fsync");

    // One contiguous run: FUA data and a FUA record, no flush.
    let dev = || ssd.stats();
    let before = dev();
    fs.write(f, 0, &content(16 * 4096, 1)).expect("write");
    fs.fsync(f, false).expect("fsync");
    let d = dev().delta(&before);
    assert_eq!((d.fua_writes, d.flushes), (2, 0), "contiguous data: {d:?}");

    // Sixteen scattered pages: plain writes, one flush, a FUA record.
    let before = dev();
    for i in 0..16u64 {
        fs.write(f, (100 + 2 * i) * 4096, &content(4096, 10 + i as u8)).expect("write");
    }
    fs.fsync(f, false).expect("fsync");
    let d = dev().delta(&before);
    assert_eq!((d.fua_writes, d.flushes), (1, 1), "scattered data: {d:?}");

    let threads = 8u64;
    let rounds = 12u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let fs = fs.clone();
            s.spawn(move || {
                for r in 0..rounds {
                    fs.write(f, (200 + t) * 4096, &content(4096, (t * 16 + r) as u8)).expect("write");
                    fs.fsync(f, false).expect("fsync");
                }
            });
        }
    });
    let st = fs.ijournal_stats().expect("on");
    assert_eq!(st.fallback_total(), 0, "{st:?}");
    assert_eq!(st.served + st.grouped + st.clean, st.fsyncs, "{st:?}");
    assert!(st.grouped > 0, "eight threads fsyncing one file were never grouped: {st:?}");
    let copy = crash_copy(&ssd);
    drop(fs);
    let fs = Fs::open(copy.clone(), o).expect("recover");
    let all = read_all(&fs, f);
    for t in 0..threads {
        let at = ((200 + t) * 4096) as usize;
        assert_eq!(
            &all[at..at + 4096],
            &content(4096, (t * 16 + rounds - 1) as u8)[..],
            "thread {t}'s last write"
        );
    }
    fs.unmount().expect("unmount");
    fsck(&copy.image_bytes());
}

/// Concurrent fsyncs of different files on one area leave their data's flush to their batch
/// of records (`idata=grouped`, the default): one flush per batch instead of a FUA request or
/// a flush per fsync, and every file's writes are back after a crash; `idata=own` never does.
#[test]
fn concurrent_fsyncs_of_different_files_share_their_batch_flush() {
    for (name, grouped) in [("ijournal-shared", true), ("ijournal-shared+idata=own", false)] {
        let o = opts(name);
        let ssd = sata_image(&o);
        let fs = Arc::new(Fs::open(ssd.clone(), o.clone()).expect("mount"));
        let threads = 8u64;
        let rounds = 10u64;
        let files: Vec<_> = (0..threads)
            .map(|t| fs.create(ROOT_INO, format!("f{t}").as_bytes(), 0o644, 0, 0).expect("create").ino)
            .collect();
        fs.sync().expect("sync");
        // The first record of the mount sets the private feature bit.
        fs.write(files[0], 0, b"x").expect("write");
        fs.fsync(files[0], false).expect("fsync");
        let st0 = fs.ijournal_stats().expect("on");
        let before = ssd.stats();
        std::thread::scope(|s| {
            for (t, &f) in files.iter().enumerate() {
                let fs = fs.clone();
                s.spawn(move || {
                    for r in 0..rounds {
                        fs.write(f, r * 4096, &content(4096, (t as u64 * 16 + r) as u8)).expect("write");
                        fs.fsync(f, false).expect("fsync");
                    }
                });
            }
        });
        let st = fs.ijournal_stats().expect("on").since(&st0);
        let d = ssd.stats().delta(&before);
        assert_eq!(st.fallback_total(), 0, "{name}: {st:?}");
        assert_eq!(st.served, threads * rounds, "{name}: {st:?}");
        if grouped {
            assert!(st.data_grouped > 0, "{name}: eight threads never shared a batch flush: {st:?}");
            assert!(d.flushes < st.served, "{name}: a flush per fsync: {d:?} {st:?}");
        } else {
            assert_eq!(st.data_grouped, 0, "{name}: {st:?}");
        }
        let copy = crash_copy(&ssd);
        drop(fs);
        let fs = Fs::open(copy.clone(), o).expect("recover");
        for (t, &f) in files.iter().enumerate() {
            let all = read_all(&fs, f);
            assert_eq!(all.len() as u64, rounds * 4096, "{name}: file {t}'s size");
            for r in 0..rounds {
                let at = (r * 4096) as usize;
                assert_eq!(
                    &all[at..at + 4096],
                    &content(4096, (t as u64 * 16 + r) as u8)[..],
                    "{name}: file {t}, write {r}"
                );
            }
        }
        fs.unmount().expect("unmount");
        fsck(&copy.image_bytes());
    }
}

/// A flush that fails on an fsync served by an i-transaction is that fsync's error, and
/// every later fsync fails too: the journal is aborted, nothing is retried away.
#[test]
fn a_failed_flush_on_the_fsync_path_is_reported_and_sticks() {
    let o = opts("ijournal");
    let ssd = sata_image(&o);
    let fs = Fs::open(ssd.clone(), o).expect("mount");
    let f = fs.create(ROOT_INO, b"db", 0o644, 0, 0).expect("create").ino;
    fs.sync().expect("sync");
    fs.write(f, 0, b"x").expect("write");
    fs.fsync(f, false).expect("fsync");
    // Scattered pages: plain writes and a flush, which fails.
    for i in 0..8u64 {
        fs.write(f, (10 + 3 * i) * 4096, &content(4096, i as u8)).expect("write");
    }
    ssd.inject_flush_failure();
    let e = fs.fsync(f, false).expect_err("the flush failed");
    assert!(e.to_string().contains("flush"), "{e}");
    fs.write(f, 0, b"y").expect_err("the journal is aborted");
    let again = fs.fsync(f, false).expect_err("a later fsync must fail too");
    assert!(!again.to_string().is_empty());
}

/// A data write that fails on the fsync path is reported, and the data stays dirty: the
/// next fsync writes it again instead of finding it clean and reporting it durable
/// (iJournaling's own data write, and `sync_data` after a commit); where the write was a
/// commit's ordered data the journal aborts instead and every later fsync fails.
#[test]
fn a_failed_data_write_on_fsync_is_reported_and_the_next_fsync_writes_it() {
    for name in ["ijournal", "jbd2", "cjfs", "zjournal"] {
        let o = opts(name);
        let ssd = sata_image(&o);
        let fs = Fs::open(ssd.clone(), o.clone()).expect("mount");
        let f = fs.create(ROOT_INO, b"db", 0o644, 0, 0).expect("create").ino;
        let old = content(4096, 1);
        fs.write(f, 0, &old).expect("write");
        fs.fsync(f, false).expect("fsync");
        fs.sync().expect("sync");
        // The file's block, found by its bytes.
        let img = ssd.image_bytes();
        let blk =
            img.chunks(4096).position(|c| c == old.as_slice()).expect("data block on the device") as u64;
        let new = content(4096, 2);
        fs.write(f, 0, &new).expect("overwrite");
        ssd.inject_write_failure_at(blk);
        let e = fs.fsync(f, false).expect_err("the data write failed");
        assert!(e.to_string().contains("nject"), "{name}: {e}");
        if fs.journal().aborted().is_some() {
            // The write was a commit's ordered data: the journal aborted (ext4's
            // data_err=abort), and every later fsync fails.
            assert_ne!(name, "ijournal", "iJournaling writes the file's data itself");
            assert!(fs.fsync(f, false).is_err(), "{name}: an aborted journal fails every fsync");
            continue;
        }
        if let Err(e) = fs.fsync(f, false) {
            panic!("{name}: the next fsync must write the data again: {e}");
        }
        let copy = crash_copy(&ssd);
        let fs2 = Fs::open(copy, o).expect("remount");
        let ino = fs2.lookup(ROOT_INO, b"db").expect("db").ino;
        assert!(read_all(&fs2, ino) == new, "{name}: a successful fsync left old data on the device");
    }
}
