//! Multi-mount protection (`mmp`, incompat 0x100): a file system shared by several hosts (or
//! processes) names, in one block (`s_mmp_block`), who has it open for writing and proves
//! it is alive by changing a sequence number every `s_mmp_update_interval` seconds. A writer
//! that finds the number changing while it watches refuses to open.
//!
//! The protocol is the kernel's (`fs/ext4/mmp.c`, `ext4_multi_mount_protect` and `kmmpd`),
//! so a cjfs writer and a kernel mount (or e2fsprogs) keep each other out:
//!
//! - the block says clean (`EXT4_MMP_SEQ_CLEAN`): take it at once with a random sequence
//!   number and read it back (as the kernel; e2fsprogs also waits here, which would cost
//!   every `cjfs put` eleven seconds). Two writers that take a clean block at the same
//!   instant both succeed; the loser finds the winner's number at its first update and
//!   aborts, having written for up to one update interval (the kernel, which reads back
//!   only when an update was late, may not find it at all);
//! - it says e2fsck holds it (`EXT4_MMP_SEQ_FSCK`): refuse;
//! - any other number: someone had it open, or crashed with it open. Watch it for
//!   `min(2 × interval + 1, interval + 60)` seconds (the interval: the larger of the
//!   superblock's update interval, the block's check interval and 5 s); refuse if it
//!   changed, else write a random number, watch again as long, and take it if ours stayed;
//! - while open, a thread writes the next sequence number every update interval and first
//!   reads the block back: a number or node name not its own, or a block it cannot read,
//!   means it can no longer vouch for being the only writer; the updater stops and the
//!   journal is aborted (the kernel's `ext4_error` on the same finding), so no further
//!   change is committed, and the holder's release reports it;
//! - a clean unmount (or the file system dropped) writes `EXT4_MMP_SEQ_CLEAN`; an open
//!   that fails after taking the block puts back the bytes it found (so a refused image
//!   stays byte-identical; the kernel writes CLEAN there), unless another writer has
//!   written it since.
//!
//! Only read-write opens take part, as in the kernel: a read-only open never writes. The
//! block is read from and written to the device directly, never through the buffer cache,
//! so another host's update is seen.
//!
//! A caller that opens the same file system several times (the CLI's dry run on an overlay
//! and then the real run, a recovery and the mount after it) takes the block once and hands
//! each open its [`MmpHandle`] (`MountOptions::mmp_held`, [`crate::fs::recover_device_held`]):
//! such an open does not take the block again, and aborts its journal if the holder loses
//! it.
//!
//! Layout of the block's first 1 KiB (`struct mmp_struct`): magic `0x004D4D50`, sequence
//! (u32), time of the last update (u64 seconds), node name (64 bytes), device name (32),
//! check interval (u16), padding, and at byte 1020 the CRC32C of bytes 0..1020 from the
//! file system's checksum seed (`metadata_csum` only).

use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cjfs_blockdev::{BlockKind, Device, WriteTag};
use cjfs_journal::lock_rank::{Rank, RankedMutex};

use crate::error::{FsError, FsResult};
use crate::ondisk::csum::{Csum, crc32c};
use crate::ondisk::features::INCOMPAT_MMP;
use crate::ondisk::superblock::Superblock;

/// `EXT4_MMP_MAGIC`.
pub const MMP_MAGIC: u32 = 0x004D_4D50;
/// `EXT4_MMP_SEQ_CLEAN`: nobody has the file system open for writing.
pub const SEQ_CLEAN: u32 = 0xFF4D_4D50;
/// `EXT4_MMP_SEQ_FSCK`: e2fsck (or another e2fsprogs program) has it open.
pub const SEQ_FSCK: u32 = 0xE24D_4D50;
/// `EXT4_MMP_SEQ_MAX`: the largest sequence number a writer uses.
pub const SEQ_MAX: u32 = 0xE24D_4D4F;
/// `EXT4_MMP_MIN_CHECK_INTERVAL` (seconds).
const MIN_CHECK_INTERVAL: u64 = 5;
/// `EXT4_MMP_MAX_CHECK_INTERVAL` (seconds).
const MAX_CHECK_INTERVAL: u64 = 300;

const O_SEQ: usize = 4;
const O_TIME: usize = 8;
const O_NODENAME: usize = 16;
const NODENAME_LEN: usize = 64;
const O_BDEVNAME: usize = 80;
const BDEVNAME_LEN: usize = 32;
const O_CHECK_INTERVAL: usize = 112;
const O_CHECKSUM: usize = 1020;
/// Bytes of `struct mmp_struct`.
const MMP_SIZE: usize = 1024;

/// The fields of an MMP block that the protocol reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MmpBlock {
    /// `mmp_seq`.
    pub seq: u32,
    /// `mmp_time`: seconds since the epoch of the last update.
    pub time: u64,
    /// `mmp_nodename`: the host of the last writer (NUL-padded).
    pub nodename: [u8; NODENAME_LEN],
    /// `mmp_bdevname`: the device the last writer named (NUL-padded).
    pub bdevname: [u8; BDEVNAME_LEN],
    /// `mmp_check_interval` (seconds).
    pub check_interval: u16,
}

fn name(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn padded<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let b = s.as_bytes();
    let n = b.len().min(N);
    out[..n].copy_from_slice(&b[..n]);
    out
}

impl MmpBlock {
    /// Decode the block at `location` (`buf` is the whole file system block), checking its
    /// magic and, with `metadata_csum`, its checksum.
    pub fn decode(buf: &[u8], csum: &Csum, location: u64) -> FsResult<MmpBlock> {
        let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().expect("4 bytes"));
        if buf.len() < MMP_SIZE {
            return Err(FsError::Corrupt(format!("MMP block {location}: shorter than 1 KiB")));
        }
        let magic = u32_at(0);
        if magic != MMP_MAGIC {
            return Err(FsError::Corrupt(format!(
                "MMP block {location}: mmp_magic = 0x{magic:08x}, expected 0x{MMP_MAGIC:08x} (e2fsck -f \
                 repairs it)"
            )));
        }
        if csum.metadata() {
            let (stored, computed) = (u32_at(O_CHECKSUM), crc32c(csum.seed(), &buf[..O_CHECKSUM]));
            if stored != computed {
                return Err(FsError::checksum(
                    crate::error::CsumStructure::MmpBlock,
                    format!("MMP block {location}"),
                    stored,
                    computed,
                ));
            }
        }
        Ok(MmpBlock {
            seq: u32_at(O_SEQ),
            time: u64::from_le_bytes(buf[O_TIME..O_TIME + 8].try_into().expect("8 bytes")),
            nodename: buf[O_NODENAME..O_NODENAME + NODENAME_LEN].try_into().expect("64 bytes"),
            bdevname: buf[O_BDEVNAME..O_BDEVNAME + BDEVNAME_LEN].try_into().expect("32 bytes"),
            check_interval: u16::from_le_bytes([buf[O_CHECK_INTERVAL], buf[O_CHECK_INTERVAL + 1]]),
        })
    }

    /// Write these fields (and the magic and checksum) into `buf`, leaving the padding and
    /// the rest of the block as they are.
    pub fn encode_into(&self, buf: &mut [u8], csum: &Csum) {
        buf[0..4].copy_from_slice(&MMP_MAGIC.to_le_bytes());
        buf[O_SEQ..O_SEQ + 4].copy_from_slice(&self.seq.to_le_bytes());
        buf[O_TIME..O_TIME + 8].copy_from_slice(&self.time.to_le_bytes());
        buf[O_NODENAME..O_NODENAME + NODENAME_LEN].copy_from_slice(&self.nodename);
        buf[O_BDEVNAME..O_BDEVNAME + BDEVNAME_LEN].copy_from_slice(&self.bdevname);
        buf[O_CHECK_INTERVAL..O_CHECK_INTERVAL + 2].copy_from_slice(&self.check_interval.to_le_bytes());
        if csum.metadata() {
            let c = crc32c(csum.seed(), &buf[..O_CHECKSUM]);
            buf[O_CHECKSUM..O_CHECKSUM + 4].copy_from_slice(&c.to_le_bytes());
        }
    }

    /// Who last wrote the block, for an error message.
    pub fn holder(&self) -> String {
        let node = name(&self.nodename);
        let dev = name(&self.bdevname);
        format!(
            "node {:?}, device {:?}, last update at {} (Unix seconds)",
            if node.is_empty() { "?" } else { &node },
            if dev.is_empty() { "?" } else { &dev },
            self.time
        )
    }
}

/// This host's name (`mmp_nodename`), as `uname -n` gives it.
fn hostname() -> String {
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uname` fills the struct it is given; the names are NUL-terminated.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = u.nodename.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A random sequence number a writer may use (`mmp_new_seq`).
fn new_seq() -> u32 {
    loop {
        let s: u32 = rand::random();
        if s != 0 && s <= SEQ_MAX {
            return s;
        }
    }
}

/// What to do when the holder loses the block.
pub type OnLost = Arc<dyn Fn(String) + Send + Sync>;

/// What the holder, its updater thread and the opens it hands the block to share.
struct Shared {
    dev: Device,
    block: u64,
    csum: Csum,
    /// The file system's UUID (an open handed this checks it is the same file system).
    /// Immutable.
    uuid: [u8; 16],
    /// Why the block was lost, once it is, and what to call then. Lock: itself, a leaf
    /// (the callback runs after it is released).
    lost: RankedMutex<Lost>,
}

#[derive(Default)]
struct Lost {
    finding: Option<String>,
    callback: Option<OnLost>,
}

impl Shared {
    fn read(&self) -> FsResult<(Box<[u8]>, MmpBlock)> {
        let buf = self.dev.read_block(self.block)?;
        let m = MmpBlock::decode(&buf, &self.csum, self.block)?;
        Ok((buf, m))
    }

    fn write(&self, buf: &mut [u8], m: &MmpBlock) -> FsResult<()> {
        m.encode_into(buf, &self.csum);
        let tag = WriteTag::kind(BlockKind::Superblock);
        self.dev.write_block(self.block, cjfs_blockdev::block_from_slice(buf), tag)?;
        Ok(())
    }

    fn lose(&self, why: String) {
        log::error!("{why}");
        let f = {
            let mut g = self.lost.lock();
            g.finding.get_or_insert_with(|| why.clone());
            g.callback.clone()
        };
        if let Some(f) = f {
            f(why);
        }
    }

    fn finding(&self) -> Option<String> {
        self.lost.lock().finding.clone()
    }
}

/// The block's bytes and fields as this writer last wrote them.
type Held = (Box<[u8]>, MmpBlock);

/// A taken MMP block: the original bytes (put back if the caller fails before
/// [`Mmp::establish`]) and the updater that keeps the block alive.
pub struct Mmp {
    shared: Arc<Shared>,
    /// The block as found, written back by a drop before [`Mmp::establish`].
    original: Box<[u8]>,
    /// Our current contents (handed to the updater when it starts).
    mine: Option<Held>,
    interval: u64,
    /// Dropped to stop the updater.
    stop: Option<Sender<()>>,
    /// The updater; it returns the block's contents for the last write, or `None` when the
    /// block was lost.
    updater: Option<JoinHandle<Option<Held>>>,
    /// Whether a drop leaves the block clean (after a successful open) or puts back the
    /// original.
    established: bool,
}

/// A held block handed to an open (`MountOptions::mmp_held`): the open does not take the
/// block again and aborts its journal if the holder loses it.
#[derive(Clone)]
pub struct MmpHandle(Arc<Shared>);

impl std::fmt::Debug for MmpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MmpHandle(block {})", self.0.block)
    }
}

impl MmpHandle {
    /// Whether this is the block of the file system `sb` describes; an error saying why not.
    pub fn check(&self, sb: &Superblock) -> FsResult<()> {
        if self.0.uuid != sb.uuid || self.0.block != sb.mmp_block || !sb.has_incompat(INCOMPAT_MMP) {
            return Err(FsError::Invalid(format!(
                "MMP block {} handed to the open of another file system (MMP block {})",
                self.0.block, sb.mmp_block
            )));
        }
        if let Some(why) = self.0.finding() {
            return Err(FsError::InUse(why));
        }
        Ok(())
    }

    /// Call `f` if the block is lost (at once, if it is already); replaces an earlier one.
    pub fn on_lost(&self, f: OnLost) {
        let finding = {
            let mut g = self.0.lost.lock();
            g.callback = Some(f.clone());
            g.finding.clone()
        };
        if let Some(why) = finding {
            f(why);
        }
    }

    /// Why the block was lost, if it was.
    pub fn lost(&self) -> Option<String> {
        self.0.finding()
    }
}

/// How long the protocol watches a block that is not clean: `min(2 × check + 1, check + 60)`
/// seconds, `check` being the largest of the superblock's update interval, the block's
/// check interval and 5 s.
pub fn watch_time(update_interval: u16, block_check_interval: u16) -> Duration {
    let check = u64::from(update_interval).max(MIN_CHECK_INTERVAL).max(u64::from(block_check_interval));
    Duration::from_secs((2 * check + 1).min(check + 60))
}

impl Mmp {
    /// Take the file system on `dev` for writing, if its superblock `sb` has `mmp` (`None`
    /// otherwise). May wait (see the module documentation); refuses with
    /// [`FsError::InUse`] when another writer has it, and with [`FsError::Corrupt`] when
    /// the block is not an MMP block, having written nothing. `device_name` goes into the
    /// block for whoever finds it held (at most 32 bytes are kept).
    pub fn take(dev: &Device, sb: &Superblock, device_name: &str) -> FsResult<Option<Mmp>> {
        if !sb.has_incompat(INCOMPAT_MMP) {
            return Ok(None);
        }
        let block = sb.mmp_block;
        if block < u64::from(sb.first_data_block) || block >= sb.blocks_count {
            return Err(FsError::Corrupt(format!(
                "superblock: s_mmp_block = {block} lies outside the file system"
            )));
        }
        let shared = Arc::new(Shared {
            dev: dev.clone(),
            block,
            csum: Csum::from_sb(sb),
            uuid: sb.uuid,
            lost: RankedMutex::new(Rank::Leaf, Lost::default()),
        });
        let (original, found) = shared.read()?;
        let watch = watch_time(sb.mmp_interval, found.check_interval);
        if found.seq == SEQ_FSCK {
            return Err(FsError::InUse(format!(
                "MMP block {block}: e2fsck or another e2fsprogs program has the file system open \
                 ({}); if none does, clear it with `tune2fs -f -E clear_mmp`",
                found.holder()
            )));
        }
        let busy = found.seq != SEQ_CLEAN;
        let in_use = |now: &MmpBlock, when: &str| {
            FsError::InUse(format!(
                "MMP block {block}: the file system is open for writing elsewhere ({}); its \
                 sequence number changed {when}",
                now.holder()
            ))
        };
        if busy {
            log::warn!(
                "MMP block {block}: not clean ({}); watching it for {} s before taking it",
                found.holder(),
                watch.as_secs()
            );
            std::thread::sleep(watch);
            let (_, again) = shared.read()?;
            if again.seq != found.seq {
                return Err(in_use(&again, &format!("while cjfs watched it for {} s", watch.as_secs())));
            }
        }
        let interval = u64::from(sb.mmp_interval).max(1);
        let mine = MmpBlock {
            seq: new_seq(),
            time: now_secs(),
            nodename: padded(&hostname()),
            bdevname: padded(device_name),
            check_interval: (2 * interval).clamp(MIN_CHECK_INTERVAL, MAX_CHECK_INTERVAL) as u16,
        };
        let mut buf = original.clone();
        shared.write(&mut buf, &mine)?;
        let mut mmp = Mmp {
            shared,
            original,
            mine: Some((buf, mine)),
            interval,
            stop: None,
            updater: None,
            established: false,
        };
        // As the kernel: read back at once, and after a second watch when the block was
        // found busy; a number not ours means someone else wrote in between.
        if busy {
            std::thread::sleep(watch);
        }
        let (_, again) = mmp.shared.read()?;
        let ours = mmp.mine.as_ref().map_or(0, |(_, m)| m.seq);
        if again.seq != ours {
            // Not ours any more: leave the other writer's block alone.
            mmp.mine = None;
            mmp.established = true;
            let when = if busy {
                format!("in the {} s cjfs watched it after writing its own", watch.as_secs())
            } else {
                "right after cjfs wrote its own".to_string()
            };
            return Err(in_use(&again, &when));
        }
        mmp.start_updater()?;
        Ok(Some(mmp))
    }

    /// The handle an open of the same file system takes instead of the block.
    pub fn handle(&self) -> MmpHandle {
        MmpHandle(self.shared.clone())
    }

    /// The caller's work succeeded: from now on dropping this leaves the block clean
    /// instead of putting the original back.
    pub fn establish(&mut self) {
        self.established = true;
    }

    fn start_updater(&mut self) -> FsResult<()> {
        let shared = self.shared.clone();
        let (mut buf, mut mine) = self.mine.take().expect("taken once");
        let interval = Duration::from_secs(self.interval);
        let (tx, rx) = channel::<()>();
        self.stop = Some(tx);
        let spawned = std::thread::Builder::new().name("cjfs-mmp".into()).spawn(move || {
            let mut seq = 0u32;
            let mut last = Instant::now();
            // Until stopped (a message or the sender dropped): then hand the block back for
            // the last write.
            while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
                let stranger = match shared.read() {
                    Ok((_, now)) if now.seq != mine.seq || now.nodename != mine.nodename => {
                        Some(format!("another writer took it ({})", now.holder()))
                    }
                    Ok(_) => None,
                    Err(e) => Some(format!("it cannot be read back ({e})")),
                };
                if let Some(what) = stranger {
                    shared.lose(format!(
                        "MMP block {}: {what} while the file system was open for writing here; \
                         the journal is aborted",
                        shared.block
                    ));
                    return None;
                }
                seq = if seq >= SEQ_MAX { 1 } else { seq + 1 };
                mine.seq = seq;
                mine.time = now_secs();
                // As kmmpd: a late update lengthens the watch others keep.
                let late = 2 * last.elapsed().as_secs();
                mine.check_interval = late.clamp(MIN_CHECK_INTERVAL, MAX_CHECK_INTERVAL) as u16;
                last = Instant::now();
                if let Err(e) = shared.write(&mut buf, &mine) {
                    // As kmmpd: reported, and tried again at the next interval.
                    log::error!("MMP block {}: writing the sequence number failed: {e}", shared.block);
                }
            }
            Some((buf, mine))
        });
        match spawned {
            Ok(h) => {
                self.updater = Some(h);
                Ok(())
            }
            Err(e) => {
                // As the kernel when kmmpd cannot start: the open fails, the block put back.
                self.put_back()?;
                self.established = true;
                Err(FsError::Invalid(format!("MMP: cannot start the updater thread: {e}")))
            }
        }
    }

    /// Stop the updater and write `EXT4_MMP_SEQ_CLEAN` (a clean unmount); an error if the
    /// block was lost while held (whatever was written meanwhile may have met another
    /// writer's changes: check the file system).
    pub fn release(mut self) -> FsResult<()> {
        self.establish();
        self.finish()?;
        match self.shared.finding() {
            Some(why) => Err(FsError::InUse(format!("{why}; check the file system with e2fsck -f"))),
            None => Ok(()),
        }
    }

    /// Stop the updater; then write CLEAN (established) or put the original back, in
    /// either case only while the block still holds our number.
    fn finish(&mut self) -> FsResult<()> {
        drop(self.stop.take());
        let state = match self.updater.take() {
            // The last owner dropped on the updater's own thread (its lost callback): it
            // has written its last already.
            Some(h) if h.thread().id() == std::thread::current().id() => None,
            Some(h) => h.join().unwrap_or(None),
            None => self.mine.take(),
        };
        let Some((mut buf, mut mine)) = state else {
            return Ok(());
        };
        let (_, now) = self.shared.read()?;
        if now.seq != mine.seq {
            // Another writer's now: leave it.
            return Ok(());
        }
        if self.established {
            mine.seq = SEQ_CLEAN;
            mine.time = now_secs();
            self.shared.write(&mut buf, &mine)
        } else {
            self.put_back()
        }
    }

    /// Write the block back as it was found.
    fn put_back(&self) -> FsResult<()> {
        let tag = WriteTag::kind(BlockKind::Superblock);
        let orig = cjfs_blockdev::block_from_slice(&self.original);
        self.shared.dev.write_block(self.shared.block, orig, tag)?;
        Ok(())
    }
}

impl Drop for Mmp {
    fn drop(&mut self) {
        if (self.updater.is_some() || self.mine.is_some())
            && let Err(e) = self.finish()
        {
            log::error!("MMP block {}: releasing it failed: {e}", self.shared.block);
        }
    }
}

/// The MMP block of the file system on `dev` as it is now, for `cjfs info`: `None` without
/// `mmp`. Reads only.
pub fn read(dev: &Device, sb: &Superblock) -> Option<FsResult<MmpBlock>> {
    if !sb.has_incompat(INCOMPAT_MMP) {
        return None;
    }
    let csum = Csum::from_sb(sb);
    Some(
        dev.read_block(sb.mmp_block)
            .map_err(FsError::from)
            .and_then(|b| MmpBlock::decode(&b, &csum, sb.mmp_block)),
    )
}

impl MmpBlock {
    /// What the block says, in words: clean, held by e2fsck, or held by a writer.
    pub fn state(&self) -> String {
        match self.seq {
            SEQ_CLEAN => "clean (no writer)".into(),
            SEQ_FSCK => format!("held by e2fsck or another e2fsprogs program ({})", self.holder()),
            s => format!(
                "held by a writer, or left by one that crashed (sequence 0x{s:08x}; {})",
                self.holder()
            ),
        }
    }
}

/// Take the MMP block of the file system on `dev` (reading its superblock) for a caller
/// that opens it several times, handing each open [`Mmp::handle`]: `None` without `mmp`.
pub fn take_for(dev: &Device, device_name: &str) -> FsResult<Option<Mmp>> {
    let (sb, _) = crate::mkfs::read_layout(&**dev)?;
    Mmp::take(dev, &sb, device_name)
}

/// Hold the MMP block (if any, and unless `held` says the caller holds it) while `f` runs:
/// left clean if `f` succeeds, put back as found if it fails.
pub fn while_held<T>(
    dev: &Device,
    sb: &Superblock,
    held: Option<&MmpHandle>,
    f: impl FnOnce() -> FsResult<T>,
) -> FsResult<T> {
    if let Some(h) = held {
        h.check(sb)?;
        return f();
    }
    let Some(mut m) = Mmp::take(dev, sb, "cjfs")? else {
        return f();
    };
    let r = f()?;
    m.establish();
    m.release()?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_round_trips_leaving_the_rest_alone() {
        let csum = Csum::none();
        let m = MmpBlock {
            seq: 42,
            time: 1_700_000_000,
            nodename: padded("host"),
            bdevname: padded("cjfs"),
            check_interval: 10,
        };
        let mut buf = vec![0xAAu8; 4096];
        m.encode_into(&mut buf, &csum);
        assert_eq!(MmpBlock::decode(&buf, &csum, 9).unwrap(), m);
        assert_eq!(buf[2000], 0xAA, "the rest of the block is left alone");
        assert!(m.holder().contains("node \"host\", device \"cjfs\""), "{}", m.holder());
        buf[0] = 0;
        let e = MmpBlock::decode(&buf, &csum, 9).unwrap_err().to_string();
        assert!(e.contains("MMP block 9: mmp_magic"), "{e}");
    }

    #[test]
    fn the_watch_follows_the_kernel() {
        assert_eq!(watch_time(5, 0), Duration::from_secs(11));
        assert_eq!(watch_time(1, 0), Duration::from_secs(11), "at least 5 s of check interval");
        assert_eq!(watch_time(5, 20), Duration::from_secs(41));
        assert_eq!(watch_time(100, 0), Duration::from_secs(160), "check + 60 at most");
    }

    #[test]
    fn sequence_numbers_stay_below_the_reserved_values() {
        for _ in 0..10_000 {
            let s = new_seq();
            assert!(s > 0 && s <= SEQ_MAX);
        }
    }
}
