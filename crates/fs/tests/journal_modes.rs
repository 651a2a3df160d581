//! Journal modes and durability: data=journal (mount option and per file) survives a
//! remount; fsynced data survives a crash (a copy of the device image taken while mounted,
//! remounted through recovery); fdatasync of a pure overwrite commits nothing yet the data
//! survives a crash, also past the fdatasync list's pruning threshold; the commit timer
//! commits without fsync; an extent tree of depth 2 reads back after a remount and passes
//! e2fsck.

mod common;
use common::read_all;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cjfs_blockdev::{BlockDevice, Device, EmulatedSsd, FileDevice, FileDeviceOptions, SsdPreset};
use cjfs_fs::mkfs::read_layout;
use cjfs_fs::ondisk::group_desc::GroupDesc;
use cjfs_fs::ondisk::inode::Inode as DiskInode;
use cjfs_fs::{DataMode, Fs, Ino, MkfsOptions, MountOptions, ROOT_INO, mkfs};
use cjfs_journal::JournalConfig;
use common::assert_fsck_clean;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// `EXT4_JOURNAL_DATA_FL`.
const JOURNAL_DATA_FL: u32 = 0x4000;

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cjfs-jmodes")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tmpdir")
}

fn file_image(dir: &Path, name: &str, mib: u64) -> (PathBuf, Device) {
    let path = dir.join(name);
    let dev: Device = Arc::new(FileDevice::create(&path, mib << 20).expect("create image"));
    mkfs(&*dev, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    (path, dev)
}

fn open_file_dev(path: &Path) -> Device {
    Arc::new(FileDevice::open(path, FileDeviceOptions::default()).expect("open image"))
}

fn ram_image(mib: u64) -> Arc<EmulatedSsd> {
    let ssd = Arc::new(EmulatedSsd::ram((mib << 20) / 4096));
    mkfs(&*ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    ssd
}

fn dev_of(ssd: &Arc<EmulatedSsd>) -> Device {
    ssd.clone()
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 12) as u8).collect()
}

/// Write an image to a file so e2fsck can judge it.
fn fsck_bytes(dir: &Path, name: &str, bytes: &[u8]) {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write image copy");
    assert_fsck_clean(&p);
    let _ = std::fs::remove_file(&p);
}

/// A crash copy: the device image taken at the crash, on a fresh RAM disk.
fn ram_copy(crash: &[u8]) -> Arc<EmulatedSsd> {
    Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), crash))
}

/// Unmount the file system recovered from a crash copy and have e2fsck judge the copy.
fn unmount_and_fsck(fs: Fs, copy: &EmulatedSsd, dir: &Path) {
    fs.unmount().expect("unmount");
    fsck_bytes(dir, "recovered.img", &copy.image_bytes());
}

fn jbd2_fast_timer() -> JournalConfig {
    JournalConfig { commit_interval: Duration::from_millis(200), ..JournalConfig::jbd2() }
}

#[test]
fn data_journal_mount_option_survives_remount() {
    let tmp = tmpdir();
    let (path, dev) = file_image(tmp.path(), "dj.img", 128);
    let fs =
        Fs::open(dev, MountOptions { data: DataMode::Journal, ..MountOptions::default() }).expect("mount");
    let before = fs.journal().stats();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).expect("create").ino;
    let mut want = content(3 << 20, 1);
    fs.write(a, 0, &want).expect("write");
    // Partial overwrites crossing blocks, and a sparse extension.
    let patch = content(10_000, 2);
    fs.write(a, 4000, &patch).expect("overwrite");
    want[4000..14_000].copy_from_slice(&patch);
    fs.write(a, (4 << 20) + 100, b"far").expect("extend");
    want.resize((4 << 20) + 100, 0);
    want.extend_from_slice(b"far");
    fs.fsync(a, false).expect("fsync");
    let logged = fs.journal().stats().delta(&before).blocks_logged;
    assert!(logged >= (3 << 20) / 4096, "data=journal logs the data: only {logged} blocks logged");
    assert_eq!(read_all(&fs, a), want);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    // Remount in ordered mode: the data is home.
    let fs = Fs::open(open_file_dev(&path), MountOptions::default()).expect("remount");
    assert_eq!(read_all(&fs, a), want);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

#[test]
fn per_file_journal_data_survives_remount_and_crash() {
    let tmp = tmpdir();
    let ssd = ram_image(128);
    let fs = Fs::open(dev_of(&ssd), MountOptions::default()).expect("mount");
    let j = fs.create(ROOT_INO, b"jfile", 0o644, 0, 0).expect("create").ino;
    let o = fs.create(ROOT_INO, b"ofile", 0o644, 0, 0).expect("create").ino;
    fs.set_journal_data(j, true).expect("chattr +j");
    assert!(fs.getattr(j).expect("getattr").flags & JOURNAL_DATA_FL != 0);
    let before = fs.journal().stats();
    let jd = content(1 << 20, 3);
    let od = content(1 << 20, 4);
    fs.write(j, 0, &jd).expect("write j");
    fs.write(o, 0, &od).expect("write o");
    fs.fsync(j, false).expect("fsync j");
    fs.fsync(o, false).expect("fsync o");
    let d = fs.journal().stats().delta(&before);
    assert!(d.blocks_logged >= 256, "the +j file's data is logged ({} blocks)", d.blocks_logged);
    // Crash now: the journal holds the +j data (no checkpoint yet).
    let crash = ssd.image_bytes();
    fs.unmount().expect("unmount");
    let fs = Fs::open(dev_of(&ssd), MountOptions::default()).expect("remount");
    assert_eq!(read_all(&fs, j), jd);
    assert_eq!(read_all(&fs, o), od);
    assert!(fs.getattr(j).expect("getattr").flags & JOURNAL_DATA_FL != 0, "the flag persists");
    fs.unmount().expect("unmount");
    fsck_bytes(tmp.path(), "clean.img", &ssd.image_bytes());

    let copy = ram_copy(&crash);
    let (fs, report) =
        Fs::open_with_report(copy.clone(), MountOptions::default()).expect("mount the crash copy");
    assert!(report.replayed_transactions > 0, "recovery replays the committed transactions");
    assert_eq!(read_all(&fs, j), jd, "+j data after recovery");
    assert_eq!(read_all(&fs, o), od, "ordered data after recovery");
    unmount_and_fsck(fs, &copy, tmp.path());
}

/// Make two files durable, one by fsync and one by a forced commit; the caller then copies
/// the image (a crash) and checks that recovery brings both back. Returns (inode, content)
/// of each.
fn crash_after_fsync(fs: &Fs) -> (Ino, Vec<u8>, Ino, Vec<u8>) {
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).expect("create").ino;
    let da = content(700_000, 5);
    fs.write(a, 0, &da).expect("write");
    fs.fsync(a, false).expect("fsync");
    // A second file made durable by force (sync) rather than fsync.
    let dir = fs.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).expect("mkdir").ino;
    let b = fs.create(dir, b"b", 0o644, 0, 0).expect("create").ino;
    let db = content(50_000, 6);
    fs.write(b, 123, &db).expect("write");
    fs.journal().force().expect("force");
    let mut db_full = vec![0u8; 123];
    db_full.extend_from_slice(&db);
    (a, da, b, db_full)
}

#[test]
fn fsynced_data_survives_a_crash_copy_emulated() {
    for mode in [DataMode::Ordered, DataMode::Journal] {
        let tmp = tmpdir();
        let ssd = ram_image(128);
        let fs =
            Fs::open(dev_of(&ssd), MountOptions { data: mode, ..MountOptions::default() }).expect("mount");
        let (a, da, b, db) = crash_after_fsync(&fs);
        let crash = ssd.image_bytes();
        drop(fs);
        let copy = ram_copy(&crash);
        let (fs, report) =
            Fs::open_with_report(copy.clone(), MountOptions::default()).expect("mount crash copy");
        assert!(report.replayed_transactions > 0, "{mode:?}: the copy needed recovery");
        assert_eq!(read_all(&fs, a), da, "{mode:?}: fsynced file after recovery");
        assert_eq!(fs.resolve("/dir/b").expect("b survives"), b);
        assert_eq!(read_all(&fs, b), db, "{mode:?}: forced file after recovery");
        unmount_and_fsck(fs, &copy, tmp.path());
    }
}

#[test]
fn fsynced_data_survives_a_crash_copy_file_device() {
    let tmp = tmpdir();
    let (path, dev) = file_image(tmp.path(), "crash.img", 128);
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let (a, da, b, db) = crash_after_fsync(&fs);
    let copy = tmp.path().join("crash-copy.img");
    std::fs::copy(&path, &copy).expect("copy image");
    fs.unmount().expect("unmount original");
    assert_fsck_clean(&path);
    let (fs, report) =
        Fs::open_with_report(open_file_dev(&copy), MountOptions::default()).expect("mount copy");
    assert!(report.replayed_transactions > 0, "the copy needed recovery");
    assert_eq!(read_all(&fs, a), da);
    assert_eq!(fs.resolve("/dir/b").expect("b survives"), b);
    assert_eq!(read_all(&fs, b), db);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&copy);
}

#[test]
fn fdatasync_of_an_overwrite_commits_nothing_yet_survives_a_crash() {
    let tmp = tmpdir();
    let ssd = ram_image(64);
    let fs = Fs::open(dev_of(&ssd), MountOptions::default()).expect("mount");
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).expect("create").ino;
    let mut want = content(256 * 1024, 7);
    fs.write(a, 0, &want).expect("write");
    fs.fsync(a, false).expect("fsync");
    // Pure overwrites: no size change, every block already allocated and written.
    let patch = content(20_000, 8);
    fs.write(a, 5000, &patch).expect("overwrite");
    want[5000..25_000].copy_from_slice(&patch);
    let before = fs.journal().stats();
    let last = fs.journal().current_tx();
    let was_durable = fs.journal().is_durable(last);
    fs.fsync(a, true).expect("fdatasync");
    let d = fs.journal().stats().delta(&before);
    assert_eq!(d.transactions, 0, "fdatasync of an overwrite committed a transaction");
    assert_eq!(fs.journal().is_durable(last), was_durable);
    // Crash right after the fdatasync: the overwrite is on the device.
    let crash = ssd.image_bytes();
    let copy = ram_copy(&crash);
    fs.unmount().expect("unmount");
    let fs = Fs::open(copy.clone(), MountOptions::default()).expect("mount crash copy");
    assert_eq!(read_all(&fs, a), want, "the fdatasynced overwrite after a crash");
    unmount_and_fsck(fs, &copy, tmp.path());
}

/// A file's fdatasync list past its pruning threshold (4 096 buffers, then each doubling):
/// 10 240 single-block overwrites, the first 3 000 blocks twice (duplicates for the prune to
/// drop), then fdatasync and a crash: every block's last write is on the device.
#[test]
fn fdatasync_after_more_overwrites_than_the_prune_threshold_survives_a_crash() {
    let tmp = tmpdir();
    let ssd = ram_image(128);
    let fs = Fs::open(dev_of(&ssd), MountOptions::default()).expect("mount");
    let a = fs.create(ROOT_INO, b"long", 0o644, 0, 0).expect("create").ino;
    const BLOCKS: usize = 10_240;
    let mut want = content(BLOCKS * 4096, 3);
    fs.write(a, 0, &want).expect("write");
    fs.fsync(a, false).expect("fsync");
    let mut pass = |blocks: std::ops::Range<usize>, seed: u8| {
        for b in blocks {
            let block = content(4096, seed.wrapping_add(b as u8));
            fs.write(a, (b * 4096) as u64, &block).expect("overwrite");
            want[b * 4096..(b + 1) * 4096].copy_from_slice(&block);
        }
    };
    pass(0..BLOCKS, 40);
    pass(0..3000, 90);
    fs.fsync(a, true).expect("fdatasync");
    let crash = ssd.image_bytes();
    let copy = ram_copy(&crash);
    fs.unmount().expect("unmount");
    let fs = Fs::open(copy.clone(), MountOptions::default()).expect("mount crash copy");
    assert!(read_all(&fs, a) == want, "the fdatasynced overwrites after a crash");
    unmount_and_fsck(fs, &copy, tmp.path());
}

#[test]
fn commit_timer_commits_without_fsync() {
    let tmp = tmpdir();
    let ssd = ram_image(64);
    let fs = Fs::open(dev_of(&ssd), MountOptions { journal: jbd2_fast_timer(), ..MountOptions::default() })
        .expect("mount");
    // Let whatever mount did settle, then change something and never fsync.
    std::thread::sleep(Duration::from_millis(300));
    let before = fs.journal().stats().transactions;
    let a = fs.create(ROOT_INO, b"timed", 0o644, 0, 0).expect("create").ino;
    let data = content(40_000, 9);
    fs.write(a, 0, &data).expect("write");
    let t0 = Instant::now();
    let tx = fs.journal().current_tx();
    while !fs.journal().is_durable(tx) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the commit timer did not commit within 5 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("timer commit after {:?}", t0.elapsed());
    assert!(fs.journal().stats().transactions > before);
    // A crash now keeps the file and its (ordered) data.
    let crash = ssd.image_bytes();
    fs.unmount().expect("unmount");
    let copy = ram_copy(&crash);
    let fs = Fs::open(copy.clone(), MountOptions::default()).expect("mount crash copy");
    let got = fs.lookup(ROOT_INO, b"timed").expect("the timer-committed file exists").ino;
    assert_eq!(read_all(&fs, got), data);
    unmount_and_fsck(fs, &copy, tmp.path());
}

/// Entries in the root of `ino`'s extent tree and the tree's depth, read from the raw inode
/// on the device.
fn extent_root(dev: &dyn BlockDevice, ino: Ino) -> (u16, u16) {
    let (sb, descs): (_, Vec<GroupDesc>) = read_layout(dev).expect("read layout");
    let ipg = sb.inodes_per_group;
    let g = ((ino - 1) / ipg) as usize;
    let byte = u64::from((ino - 1) % ipg) * sb.inode_size() as u64;
    let blk = descs[g].inode_table + byte / 4096;
    let raw = dev.read_block(blk).expect("read inode table");
    let off = (byte % 4096) as usize;
    let d = DiskInode::decode(&raw[off..off + sb.inode_size()]).expect("decode inode");
    assert_eq!(u16::from_le_bytes([d.block[0], d.block[1]]), 0xF30A, "extent header magic");
    (u16::from_le_bytes([d.block[2], d.block[3]]), u16::from_le_bytes([d.block[6], d.block[7]]))
}

#[test]
fn core_aware_allocation_keeps_concurrent_appends_contiguous() {
    // One thread (one log's groups) appends to two files in two directories in turn, as
    // threads sharing a core do: each file must stay one extent, not one per block.
    let ssd = ram_image(1024);
    let opts = cjfs_fs::preset::apply("zjournal+logs=2", MountOptions::default()).expect("preset");
    assert!(opts.core_groups);
    let fs = Fs::open(dev_of(&ssd), opts).expect("mount");
    let files: Vec<Ino> = (0..2u8)
        .map(|i| {
            let d = fs.mkdir(ROOT_INO, format!("d{i}").as_bytes(), 0o755, 0, 0).expect("mkdir").ino;
            fs.create(d, b"f", 0o644, 0, 0).expect("create").ino
        })
        .collect();
    for k in 0..64u64 {
        for (i, &f) in files.iter().enumerate() {
            fs.write(f, k * 4096, &content(4096, k as u8 ^ i as u8)).expect("append");
        }
    }
    fs.unmount().expect("unmount");
    for &f in &files {
        assert_eq!(extent_root(&*ssd, f), (1, 0), "inode {f}: (root entries, depth)");
    }
}

#[test]
fn deep_extent_tree_survives_remount() {
    // 2000 single blocks 1 MiB apart: 2000 extents over ~2 GiB, in random order.
    const N: u64 = 2000;
    const STRIDE: u64 = 256;
    let tmp = tmpdir();
    let (path, dev) = file_image(tmp.path(), "deep.img", 256);
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let f = fs.create(ROOT_INO, b"sparse", 0o644, 0, 0).expect("create").ino;
    let mut order: Vec<u64> = (0..N).collect();
    order.shuffle(&mut StdRng::seed_from_u64(5));
    let block = |k: u64| content(4096, (k % 251) as u8 ^ (k >> 8) as u8);
    for &k in &order {
        fs.write(f, k * STRIDE * 4096, &block(k)).expect("write block");
    }
    let size = fs.getattr(f).expect("getattr").size;
    assert_eq!(size, ((N - 1) * STRIDE + 1) * 4096);
    fs.unmount().expect("unmount");
    let (_, depth) = extent_root(&*open_file_dev(&path), f);
    assert!(depth >= 2, "{N} extents should need a depth-2 tree, got depth {depth}");
    assert_fsck_clean(&path);

    let fs = Fs::open(open_file_dev(&path), MountOptions::default()).expect("remount");
    let mut buf = vec![0u8; 4096];
    for k in 0..N {
        fs.read(f, k * STRIDE * 4096, &mut buf).expect("read block");
        assert_eq!(buf, block(k), "block {k}");
        if k + 1 < N {
            fs.read(f, (k * STRIDE + 1 + k % 200) * 4096, &mut buf).expect("read hole");
            assert!(buf.iter().all(|&b| b == 0), "hole after block {k}");
        }
    }
    // Shrink the tree back: truncate to half, then fill a few holes.
    let half = (N / 2) * STRIDE * 4096;
    fs.setattr(f, &cjfs_fs::SetAttr { size: Some(half), ..Default::default() }).expect("truncate");
    for k in (0..N / 2).step_by(50) {
        fs.write(f, (k * STRIDE + 7) * 4096, &block(k + 1)).expect("fill a hole");
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = Fs::open(open_file_dev(&path), MountOptions::default()).expect("remount");
    for k in 0..N / 2 {
        fs.read(f, k * STRIDE * 4096, &mut buf).expect("read block");
        assert_eq!(buf, block(k), "block {k} after truncate");
    }
    assert_eq!(fs.getattr(f).expect("getattr").size, half);
    fs.unlink(ROOT_INO, b"sparse").expect("unlink");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

#[test]
fn open_unlinked_file_at_a_crash_is_freed_by_recovery() {
    let tmp = tmpdir();
    let ssd = ram_image(64);
    let fs = Fs::open(dev_of(&ssd), MountOptions::default()).expect("mount");
    let free0 = fs.statfs();
    let a = fs.create(ROOT_INO, b"doomed", 0o644, 0, 0).expect("create").ino;
    fs.write(a, 0, &content(2 << 20, 10)).expect("write");
    fs.open_file(a).expect("open");
    fs.unlink(ROOT_INO, b"doomed").expect("unlink");
    fs.fsync(a, false).expect("fsync");
    fs.journal().force().expect("force");
    // Crash while the unlinked file is still open: it sits on the orphan list.
    let crash = ssd.image_bytes();
    fs.release(a).expect("release");
    fs.unmount().expect("unmount");
    let copy = ram_copy(&crash);
    let (fs, report) = Fs::open_with_report(copy.clone(), MountOptions::default()).expect("mount crash copy");
    assert_eq!(report.orphans_cleaned, 1, "recovery frees the orphan");
    assert!(fs.lookup(ROOT_INO, b"doomed").is_err());
    let free1 = fs.statfs();
    assert_eq!((free1.bfree, free1.ffree), (free0.bfree, free0.ffree), "its blocks and inode are free again");
    unmount_and_fsck(fs, &copy, tmp.path());
}

/// A directory block committed by T1 and freed (revoked) by T2 while T1 was still being
/// made durable, then reused for file data: T1's copy awaiting checkpoint must not be
/// written home over the data. (A revoke used to forget the pending checkpoint copy at
/// once, before T1 had set it; T1 then set it, and the unmount's checkpoint wrote the
/// directory block over the file.)
#[test]
fn freed_metadata_block_is_not_checkpointed_over_its_next_owner() {
    // Slow flushes keep T1 in flight while T2 runs.
    let slow =
        SsdPreset { flush_base_us: 300_000, volatile_cache: true, barrier: false, ..SsdPreset::ramdisk() };
    let ssd = Arc::new(EmulatedSsd::new(slow, (64 << 20) / 4096));
    mkfs(&*ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    let fs = Fs::open(dev_of(&ssd), MountOptions::default()).expect("mount");
    fs.sync().expect("sync");
    fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir"); // T1: allocates the block
    let committer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync().expect("commit T1"))
    };
    std::thread::sleep(Duration::from_millis(100)); // T1 is now waiting for its flush
    fs.rmdir(ROOT_INO, b"d").expect("rmdir"); // T2: frees and revokes the block
    committer.join().expect("committer");
    fs.sync().expect("commit T2"); // the block is reusable now
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    let data = vec![b'Z'; 4096];
    fs.write(f, 0, &data).expect("write"); // most likely gets the freed block
    fs.unmount().expect("unmount"); // checkpoints everything
    let fs = Fs::open(dev_of(&ssd), MountOptions::default()).expect("remount");
    let got = read_all(&fs, f);
    assert!(
        got == data,
        "a stale checkpoint copy overwrote the file's data: starts {:?}",
        &got[..got.len().min(24)]
    );
    fs.unmount().expect("unmount");
    let tmp = tmpdir();
    fsck_bytes(tmp.path(), "reuse.img", &ssd.image_bytes());
}
