//! Cross-check with e2fsprogs: a journal written with our format builders must be replayed by
//! `e2fsck` exactly as by our `recover()`.
//!
//! Skipped (with a message) when `mke2fs`, `debugfs` or `e2fsck` is not installed.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cjfs_blockdev::{BlockDevice, DevError, DevResult, DeviceCaps, DeviceStats, IoTicket, WriteRequest};
use cjfs_journal::JournalArea;
use cjfs_journal::checksum::csum_seed;
use cjfs_journal::commit_block::CommitBlock;
use cjfs_journal::descriptor::{DescriptorBuilder, JBD2_MAGIC, make_tag};
use cjfs_journal::recovery::{recover, scan};
use cjfs_journal::revoke_block::RevokeBuilder;
use cjfs_journal::superblock::JournalSuperblock;

const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;

/// Offset of the ext4 superblock in the image.
const EXT4_SB: u64 = 1024;
/// `s_feature_incompat` in the ext4 superblock.
const EXT4_FEATURE_INCOMPAT: u64 = 0x60;
/// `s_uuid` in the ext4 superblock.
const EXT4_UUID: u64 = 0x68;
/// `EXT3_FEATURE_INCOMPAT_RECOVER` (needs_recovery).
const INCOMPAT_RECOVER: u32 = 0x4;

/// A block device over an image file, writing synchronously.
struct ImageDev {
    file: File,
    blocks: u64,
}

impl ImageDev {
    fn open(path: &Path) -> ImageDev {
        let file = OpenOptions::new().read(true).write(true).open(path).expect("open image");
        let blocks = file.metadata().expect("stat").len() / BLOCK_SIZE as u64;
        ImageDev { file, blocks }
    }
}

impl BlockDevice for ImageDev {
    fn block_size(&self) -> usize {
        BLOCK_SIZE
    }
    fn num_blocks(&self) -> u64 {
        self.blocks
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps { barrier: false, volatile_cache: true, fua: false, queued_flush: false }
    }
    fn describe(&self) -> String {
        "test image".into()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        self.file.read_exact_at(buf, block * BLOCK_SIZE as u64).map_err(|e| DevError::io("read", "image", e))
    }
    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        if req.block + req.bufs.len() as u64 > self.blocks {
            return Err(DevError::OutOfRange {
                block: req.block,
                count: req.bufs.len() as u64,
                num_blocks: self.blocks,
            });
        }
        for (i, b) in req.bufs.iter().enumerate() {
            self.file
                .write_all_at(&b[..], (req.block + i as u64) * BLOCK_SIZE as u64)
                .map_err(|e| DevError::io("write", "image", e))?;
        }
        Ok(IoTicket::done(Ok(())))
    }
    fn flush(&self) -> DevResult<()> {
        self.file.sync_data().map_err(|e| DevError::io("flush", "image", e))
    }
    fn barrier(&self) -> DevResult<()> {
        Err(DevError::Unsupported("barrier"))
    }
    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
}

fn have(tool: &str) -> bool {
    ["/sbin", "/usr/sbin", "/bin", "/usr/bin"].iter().map(|d| Path::new(d).join(tool)).any(|p| p.exists())
        || Command::new(tool).arg("-V").output().is_ok()
}

fn tool(name: &str) -> Command {
    for d in ["/sbin", "/usr/sbin"] {
        let p = Path::new(d).join(name);
        if p.exists() {
            return Command::new(p);
        }
    }
    Command::new(name)
}

fn debugfs(img: &Path, req: &str) -> String {
    let out = tool("debugfs").arg("-R").arg(req).arg(img).output().expect("run debugfs");
    assert!(out.status.success(), "debugfs -R '{req}' failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read_at(path: &Path, off: u64, len: usize) -> Vec<u8> {
    let f = File::open(path).expect("open");
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, off).expect("read");
    buf
}

fn write_at(path: &Path, off: u64, data: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).expect("open");
    f.write_all_at(data, off).expect("write");
}

fn block_of(path: &Path, blk: u64) -> Vec<u8> {
    read_at(path, blk * BLOCK_SIZE as u64, BLOCK_SIZE)
}

fn pattern(seed: u8) -> [u8; BLOCK_SIZE] {
    let mut b = [0u8; BLOCK_SIZE];
    for (i, x) in b.iter_mut().enumerate() {
        *x = seed.wrapping_mul(31).wrapping_add((i % 253) as u8);
    }
    b
}

/// Device runs `(start, len)` of a file, in logical order, from debugfs `stat` output
/// (`(0-9):8-17, (10):19, (ETB0):20, ...`; extent tree blocks are skipped).
fn parse_extents(stat: &str) -> Vec<(u64, u64)> {
    let text = stat.split("EXTENTS:").nth(1).expect("EXTENTS in stat output");
    let mut runs = Vec::new();
    let mut next_logical = 0u64;
    for item in text.split(',') {
        let item = item.trim();
        let Some((logical, physical)) = item.split_once(':') else {
            continue;
        };
        let logical = logical.trim_start_matches('(').trim_end_matches(')');
        if logical.starts_with("ETB") {
            continue;
        }
        let range = |s: &str| -> (u64, u64) {
            match s.split_once('-') {
                Some((a, b)) => (a.trim().parse().expect("num"), b.trim().parse().expect("num")),
                None => {
                    let v = s.trim().parse().expect("num");
                    (v, v)
                }
            }
        };
        let (l0, l1) = range(logical);
        let (p0, p1) = range(physical.split_whitespace().next().unwrap_or(""));
        assert_eq!(l0, next_logical, "journal has a hole at logical block {next_logical}");
        assert_eq!(l1 - l0, p1 - p0, "extent {item}");
        runs.push((p0, p1 - p0 + 1));
        next_logical = l1 + 1;
    }
    runs
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Which log block to damage before recovery (log layout below, in `build_image`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// Intact journal.
    None,
    /// Flip a bit in y's logged copy (log block 3): tag checksum mismatch.
    DataBlock,
    /// Flip a bit in tx 6's commit block (log block 9): failed commit.
    CommitBlock,
    /// Flip a bit in tx 6's descriptor (log block 7): fatal checksum error.
    Descriptor,
}

impl Damage {
    fn log_block(self) -> Option<u64> {
        match self {
            Damage::None => None,
            Damage::DataBlock => Some(3),
            Damage::CommitBlock => Some(9),
            Damage::Descriptor => Some(7),
        }
    }
}

/// An ext4 image whose journal holds two transactions written with our builders.
struct Setup {
    img: PathBuf,
    area: JournalArea,
    /// Device block of the journal superblock.
    p0: u64,
    /// Journal length in blocks.
    n: u64,
    /// Home blocks x, y, z.
    homes: [u64; 3],
    /// What y looks like (starts with the JBD2 magic).
    ymagic: [u8; BLOCK_SIZE],
}

fn build_image(dir: &Path, damage: Damage) -> Setup {
    let img = dir.join(format!("{damage:?}.img"));
    File::create(&img).expect("create").set_len(64 << 20).expect("size");
    let out = tool("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-O", "^metadata_csum,^resize_inode"])
        .arg(&img)
        .arg("64M")
        .output()
        .expect("run mke2fs");
    assert!(out.status.success(), "mke2fs failed: {out:?}");

    // The internal journal (inode 8): size and extents (mke2fs does not always make it
    // contiguous on small file systems, so map it run by run).
    let p0: u64 = debugfs(&img, "bmap <8> 0").trim().parse().expect("bmap output");
    let stat = debugfs(&img, "stat <8>");
    let size: u64 = stat
        .split_whitespace()
        .skip_while(|w| *w != "Size:")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("journal size in stat output");
    let n = size / BLOCK_SIZE as u64;
    let runs = parse_extents(&stat);
    assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), n, "extents cover the journal:\n{stat}");
    let area = JournalArea::new(runs.clone());
    assert_eq!(area.map(0).expect("map 0"), p0);
    let in_journal = |b: u64| runs.iter().any(|&(s, l)| b >= s && b < s + l);

    // Three free blocks in the data area, away from the journal.
    let fs_blocks = (64u64 << 20) / BLOCK_SIZE as u64;
    let free = debugfs(&img, &format!("ffb 3 {}", fs_blocks * 3 / 4));
    let homes: Vec<u64> = free.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
    assert_eq!(homes.len(), 3, "ffb output: {free}");
    assert!(homes.iter().all(|&h| h + 1 < fs_blocks && !in_journal(h)));
    let (x, y, z) = (homes[0], homes[1], homes[2]);
    for &h in &homes {
        assert_eq!(block_of(&img, h), vec![0u8; BLOCK_SIZE], "block {h} should be free/zero");
    }

    // Our journal superblock, with the file system's UUID and csum v3.
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&read_at(&img, EXT4_SB + EXT4_UUID, 16));
    let mut sb = JournalSuperblock::new_v2(n as u32, uuid, true);
    let f = sb.features();
    let seed = csum_seed(&uuid);
    // Log blocks from 1: desc5, x, y, z, commit5, revoke6, desc6, x', commit6, zero.
    let mut log: Vec<Box<[u8]>> = Vec::new();

    // tx 5: x = pattern(1), y = a block starting with the JBD2 magic (escaped), z = pattern(3).
    let mut ymagic = pattern(2);
    ymagic[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
    let mut db = DescriptorBuilder::new(5, f, uuid, BLOCK_SIZE);
    let mut datas = Vec::new();
    for (home, data) in [(x, pattern(1)), (y, ymagic), (z, pattern(3))] {
        let mut d = data;
        let tag = make_tag(home, &mut d, 5, &f, seed);
        assert_eq!(tag.escaped(), home == y);
        assert!(db.try_push(tag));
        datas.push(d);
    }
    log.push(db.finish());
    log.extend(datas.into_iter().map(|d| Box::new(d) as Box<[u8]>));
    log.push(CommitBlock::new(5, 1_700_000_000, 1).encode(&f, seed, BLOCK_SIZE));
    // tx 6: revoke z, log x again with pattern(4).
    let mut rb = RevokeBuilder::new(6, f, uuid, BLOCK_SIZE);
    rb.push(z);
    log.extend(rb.finish());
    let mut db = DescriptorBuilder::new(6, f, uuid, BLOCK_SIZE);
    let mut d = pattern(4);
    assert!(db.try_push(make_tag(x, &mut d, 6, &f, seed)));
    log.push(db.finish());
    log.push(Box::new(d));
    log.push(CommitBlock::new(6, 1_700_000_001, 2).encode(&f, seed, BLOCK_SIZE));
    // End of the log: a zero block.
    log.push(vec![0u8; BLOCK_SIZE].into_boxed_slice());
    assert_eq!(log.len(), 10);
    if let Some(lb) = damage.log_block() {
        log[lb as usize - 1][3000] ^= 1;
    }

    sb.s_sequence = 5;
    sb.s_start = 1;
    write_at(&img, p0 * BLOCK_SIZE as u64, &sb.encode());
    for (i, b) in log.iter().enumerate() {
        let dev_block = area.map(1 + i as u64).expect("map log block");
        write_at(&img, dev_block * BLOCK_SIZE as u64, b);
    }
    set_needs_recovery(&img, true);
    Setup { img, area, p0, n, homes: [x, y, z], ymagic }
}

fn set_needs_recovery(img: &Path, on: bool) {
    let mut inc = [0u8; 4];
    inc.copy_from_slice(&read_at(img, EXT4_SB + EXT4_FEATURE_INCOMPAT, 4));
    let mut incompat = u32::from_le_bytes(inc);
    if on {
        incompat |= INCOMPAT_RECOVER;
    } else {
        incompat &= !INCOMPAT_RECOVER;
    }
    write_at(img, EXT4_SB + EXT4_FEATURE_INCOMPAT, &incompat.to_le_bytes());
}

/// Build the image, let e2fsck replay one copy and `recover()` the other, and compare.
fn cross_check(dir: &Path, damage: Damage) {
    let s = build_image(dir, damage);
    let y = s.homes[1];
    let ours = dir.join(format!("{damage:?}-ours.img"));
    fs::copy(&s.img, &ours).expect("copy image");

    // e2fsck replays its copy.
    let out = tool("e2fsck").arg("-fy").arg(&s.img).output().expect("run e2fsck");
    let code = out.status.code().unwrap_or(-1);
    let log = format!(
        "{damage:?}: e2fsck exit code {code}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(code == 0 || code == 1, "{log}");
    let zero = vec![0u8; BLOCK_SIZE];
    let expect: [Vec<u8>; 3] = match damage {
        Damage::None => [pattern(4).to_vec(), s.ymagic.to_vec(), zero.clone()],
        Damage::DataBlock => [pattern(4).to_vec(), zero.clone(), zero.clone()],
        Damage::CommitBlock => [pattern(1).to_vec(), s.ymagic.to_vec(), pattern(3).to_vec()],
        Damage::Descriptor => [zero.clone(), zero.clone(), zero.clone()],
    };
    for (h, want) in s.homes.iter().zip(&expect) {
        assert_eq!(&block_of(&s.img, *h), want, "e2fsck, block {h}: {log}");
    }

    // recover() on the other copy writes the same home blocks.
    let dev = ImageDev::open(&ours);
    let result = recover(&dev, &s.area);
    for &h in &s.homes {
        assert_eq!(block_of(&ours, h), block_of(&s.img, h), "{damage:?}: block {h} differs");
    }
    let theirs_sb = block_of(&s.img, s.p0);
    let ours_sb = block_of(&ours, s.p0);
    let a = JournalSuperblock::decode(&theirs_sb, s.n).expect("e2fsck's journal sb");
    let b = JournalSuperblock::decode(&ours_sb, s.n).expect("our journal sb");
    match damage {
        Damage::None | Damage::CommitBlock => {
            let r = result.expect("recover");
            assert!(r.needed);
            // Same journal superblock afterwards (s_start = 0, s_sequence = end + 1).
            assert_eq!(a.s_start, 0);
            assert_eq!(b, a, "{damage:?}");
            assert_eq!(ours_sb, theirs_sb, "{damage:?}");
            if damage == Damage::None {
                assert!(!r.damaged(), "{r:?}");
                assert_eq!((r.transactions, r.blocks_revoked, r.end_tid), (2, 1, 8));
                assert_eq!(a.s_sequence, 8);
            } else {
                assert_eq!(r.failed_commit, Some(6));
                assert_eq!((r.transactions, r.end_tid), (1, 7));
                assert!(log.contains("corrupt"), "{log}");
            }
        }
        Damage::DataBlock => {
            let r = result.expect("recover");
            assert_eq!(r.bad_blocks.len(), 1, "{r:?}");
            assert_eq!(r.bad_blocks[0].home_block, y);
            assert!(log.contains("checksum"), "{log}");
            // Both mark the log empty; e2fsck keeps the old s_sequence after an error, we
            // move past the replayed transactions.
            assert_eq!((a.s_start, b.s_start), (0, 0));
            assert_eq!((a.s_sequence, b.s_sequence), (5, 8));
        }
        Damage::Descriptor => {
            assert!(result.is_err(), "{result:?}");
            assert!(log.contains("checksum"), "{log}");
            // Nothing replayed by either; we leave the journal for fsck to decide.
            assert_eq!(b.s_start, 1);
        }
    }
    if damage == Damage::None {
        // Clear needs_recovery as the file system layer would; e2fsck finds it clean.
        set_needs_recovery(&ours, false);
        let out = tool("e2fsck").arg("-fn").arg(&ours).output().expect("run e2fsck -n");
        assert_eq!(
            out.status.code(),
            Some(0),
            "e2fsck -fn on our recovered image:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // And our scan of the original layout agrees on what was there.
        let again = scan(&dev, &s.area).expect("scan");
        assert!(!again.needed);
    }
}

/// e2fsck replays a journal written with our builders (descriptor with csum-v3 tags, an
/// escaped block, a revoke, two commits) exactly like `recover()`, and handles checksum
/// damage the same way.
#[test]
fn e2fsck_replays_our_journal_like_recover() {
    for t in ["mke2fs", "debugfs", "e2fsck"] {
        if !have(t) {
            println!("skipping e2fsck cross-check: {t} is not installed");
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!(
        "cjfs-journal-xcheck-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    ));
    fs::create_dir_all(&dir).expect("tempdir");
    let _guard = TempDir(dir.clone());
    for damage in [Damage::None, Damage::DataBlock, Damage::CommitBlock, Damage::Descriptor] {
        cross_check(&dir, damage);
    }
}
