//! Opening images: devices, a read-only probe that validates an image before anything is
//! written to it, and read-only / read-write mounts.
//!
//! Every command that writes first validates the image through a read-only device (the
//! superblock, features, size, group descriptors, journal inode and journal superblock),
//! takes the image's writer lock, and runs once as a dry run on an overlay that keeps its
//! writes to itself ([`with_rw`]), so an image that is refused is never written to.

use std::path::Path;
use std::sync::Arc;

use cjfs_blockdev::{DEFAULT_BLOCK_SIZE, Device, FileDevice, FileDeviceOptions, OverlayDevice};
use cjfs_fs::mkfs::read_layout_for;
use cjfs_fs::ondisk::features::{Access, INCOMPAT_RECOVER};
use cjfs_fs::ondisk::superblock::Superblock;
use cjfs_fs::{Fs, FsError, MountOptions, MountReport};
use cjfs_journal::superblock::read_log_areas;

use crate::error::{CliError, CliResult};

/// Mount settings from the global options.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The preset's mount options with the data mode asked for.
    pub options: MountOptions,
    /// The command's name, for notes printed on stderr.
    pub command: &'static str,
}

impl Ctx {
    fn mount_options(&self, read_only: bool) -> MountOptions {
        MountOptions { read_only, ..self.options.clone() }
    }
}

/// Open the image file or block device at `image`, in blocks of the size its ext4
/// superblock names (4 KiB when it has none: the superblock check then reports that). A
/// missing path gives a plain "no such file" error rather than the device layer's wording.
pub fn open_device(image: &str, read_only: bool) -> CliResult<Device> {
    if let Err(e) = std::fs::metadata(image) {
        return Err(CliError::io(image, e));
    }
    let block_size = probe_block_size(Path::new(image)).unwrap_or(DEFAULT_BLOCK_SIZE);
    open_device_with(image, read_only, block_size)
}

/// [`open_device`] with an explicit block size (for `mkfs`).
pub fn open_device_with(image: &str, read_only: bool, block_size: usize) -> CliResult<Device> {
    let dev =
        FileDevice::open(image, FileDeviceOptions { read_only, block_size, ..FileDeviceOptions::default() })
            .map_err(|e| CliError::fs(image, FsError::Device(e)))?;
    Ok(Arc::new(dev))
}

pub use cjfs_fs::ondisk::superblock::probe_block_size;

/// What [`probe`] found: a valid image, and whether its journal needs recovery.
pub struct Probe {
    /// The journal holds transactions or the superblock says recovery is needed.
    pub needs_recovery: bool,
    /// The file system has a journal (`has_journal`).
    pub journal: bool,
    /// Features that keep cjfs from writing the file system, though it reads it
    /// ([`cjfs_fs::ondisk::features::read_only_features`]).
    pub read_only_features: Vec<String>,
}

/// Read the primary superblock of `dev`, reporting an image too small to hold one or
/// shorter than the superblock says.
pub fn read_primary_superblock(image: &str, dev: &Device) -> CliResult<Superblock> {
    if dev.num_blocks() * (dev.block_size() as u64) < 2048 {
        let bytes = std::fs::metadata(image).map(|m| m.len()).unwrap_or(0);
        return Err(CliError::Msg(format!(
            "{image}: not an ext2/3/4 file system: the image is only {bytes} bytes (the superblock \
             ends at byte 2048)"
        )));
    }
    cjfs_fs::mkfs::read_primary_superblock(&**dev).map_err(|e| CliError::fs(image, e))
}

/// Check that the device holds the whole file system `sb` describes.
pub fn check_not_truncated(image: &str, dev: &Device, sb: &Superblock) -> CliResult<()> {
    if sb.block_count() > dev.num_blocks() {
        return Err(CliError::Truncated {
            image: image.to_string(),
            want: sb.block_count(),
            want_bytes: sb.block_count().saturating_mul(u64::from(sb.block_size())),
            have: dev.num_blocks(),
        });
    }
    Ok(())
}

/// Validate the image at `image` without writing anything (read-only device): superblock,
/// features (for `access`: read-only, the ro_compat features cjfs reads past pass), size,
/// group descriptors, journal inode and journal superblock.
pub fn probe(image: &str, access: Access) -> CliResult<Probe> {
    let dev = open_device(image, true)?;
    probe_device(image, &dev, access)
}

/// [`probe`] on an already open device.
pub fn probe_device(image: &str, dev: &Device, access: Access) -> CliResult<Probe> {
    let sb0 = read_primary_superblock(image, dev)?;
    cjfs_fs::ondisk::features::check_supported_for(&sb0, access).map_err(|e| CliError::fs(image, e))?;
    check_not_truncated(image, dev, &sb0)?;
    let (sb, _descs) = read_layout_for(&**dev, access).map_err(|e| CliError::fs(image, e))?;
    let read_only_features = cjfs_fs::ondisk::features::read_only_features(&sb);
    if !sb.has_journal() {
        // Nothing to replay; a file system that was not cleanly unmounted is refused for
        // writing when it is opened.
        return Ok(Probe { needs_recovery: false, journal: false, read_only_features });
    }
    let area = cjfs_fs::fs::journal_area(dev, &sb).map_err(|e| CliError::fs(image, e))?;
    let jerr = |e| CliError::Journal { image: image.to_string(), source: e };
    let (jsb, areas) = read_log_areas(&**dev, &area).map_err(jerr)?;
    let logs_dirty =
        cjfs_fs::fs::logs_need_recovery(dev, &jsb, &areas).map_err(|e| CliError::fs(image, e))?;
    let needs_recovery = logs_dirty || sb.has_incompat(INCOMPAT_RECOVER);
    Ok(Probe { needs_recovery, journal: true, read_only_features })
}

/// Who else uses an image whose journal may be live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    /// Another process holds the image's writer lock (a `cjfs mount` or a cjfs writer).
    Cjfs,
    /// The kernel has it mounted (directly, or through a loop device): who holds it.
    Kernel(String),
}

/// Who else uses the image, if anyone can be found: the kernel (a mount of the block device
/// or of a loop device over the file), or another cjfs process holding the writer lock.
pub fn in_use(image: &str) -> Option<User> {
    if let Some(by) = cjfs_blockdev::kernel_holder(image) {
        return Some(User::Kernel(by));
    }
    cjfs_blockdev::writer_lock_held(image).unwrap_or(false).then_some(User::Cjfs)
}

/// Mount `image` read-only after probing it; fails with [`CliError::NeedsRecovery`] when
/// the journal must be replayed first, or with [`CliError::InUse`] when it only looks so
/// because another process (a `cjfs mount` or writer) is using the image and its journal.
pub fn mount_ro(image: &str, ctx: &Ctx) -> CliResult<Fs> {
    let p = probe(image, Access::ReadOnly)?;
    if p.needs_recovery {
        match in_use(image) {
            Some(User::Cjfs) => return Err(CliError::InUse { image: image.to_string() }),
            Some(User::Kernel(by)) => return Err(CliError::KernelInUse { image: image.to_string(), by }),
            None => {}
        }
        if !p.read_only_features.is_empty() {
            let features = p.read_only_features.join(", ");
            return Err(CliError::NeedsForeignRecovery { image: image.to_string(), features });
        }
        return Err(CliError::NeedsRecovery { image: image.to_string() });
    }
    mount_ro_unchecked(image, ctx)
}

fn mount_ro_unchecked(image: &str, ctx: &Ctx) -> CliResult<Fs> {
    let dev = open_device(image, true)?;
    Fs::open(dev, ctx.mount_options(true)).map_err(|e| CliError::fs(image, e))
}

/// Unmount, mapping the error to the image.
pub fn unmount(image: &str, fs: Fs) -> CliResult<()> {
    fs.unmount().map_err(|e| CliError::fs(image, e))
}

/// Run a read-only command: mount read-only, run `op`, unmount.
pub fn with_ro<R>(image: &str, ctx: &Ctx, op: impl FnOnce(&Fs) -> CliResult<R>) -> CliResult<R> {
    let fs = mount_ro(image, ctx)?;
    let r = op(&fs);
    let u = unmount(image, fs);
    let r = r?;
    u?;
    Ok(r)
}

/// Run a writing command.
///
/// The image is validated read-only first ([`probe`]); then the read-write device is opened,
/// which takes the image's writer lock (a `cjfs mount` or another writer holding it makes
/// the command fail here, before anything is written). The whole command — mount (journal
/// replay, orphan cleanup included), `pre` (validates the request: paths exist, enough
/// space, ...), `op`, clean unmount — then runs as a **dry run** on an [`OverlayDevice`]
/// over the image, which keeps every write to itself. Only if the dry run succeeds does it
/// run again on the image. So a request refused for any reason the image itself gives (a
/// corrupt structure found half-way, a damaged journal, no space) leaves the image
/// byte-identical; what is left to fail on the real run is the device (I/O errors).
///
/// The dry run writes to a sparse temporary file (`$TMPDIR`), not memory; `pre` and `op`
/// must therefore be repeatable (`put` spools standard input first).
pub fn with_rw<T, R>(
    image: &str,
    ctx: &Ctx,
    pre: impl Fn(&Fs) -> CliResult<T>,
    op: impl Fn(&Fs, T) -> CliResult<R>,
) -> CliResult<R> {
    probe(image, Access::ReadWrite)?;
    let dev = open_device(image, false)?;
    let mut mmp = hold_mmp(ctx, image, &dev)?;
    let mmp_held = mmp.as_ref().map(cjfs_fs::mmp::Mmp::handle);
    let run = |dev: Device| -> CliResult<(R, MountReport)> {
        let opts = MountOptions { mmp_held: mmp_held.clone(), ..ctx.mount_options(false) };
        let (fs, report) = Fs::open_with_report(dev, opts).map_err(|e| CliError::fs(image, e))?;
        let r = pre(&fs).and_then(|v| op(&fs, v));
        let u = unmount(image, fs);
        let r = r?;
        u?;
        Ok((r, report))
    };
    let overlay = OverlayDevice::new(dev.clone()).map_err(|e| CliError::fs(image, FsError::Device(e)))?;
    run(Arc::new(overlay))?;
    if let Some(why) = mmp_held.as_ref().and_then(cjfs_fs::mmp::MmpHandle::lost) {
        // Another writer took the file system during the dry run: the real run must not.
        return Err(CliError::fs(image, FsError::InUse(why)));
    }
    if let Some(m) = mmp.as_mut() {
        m.establish();
    }
    let (r, report) = run(dev)?;
    if let Some(m) = mmp {
        m.release().map_err(|e| CliError::fs(image, e))?;
    }
    note_recovery(ctx, image, &report);
    Ok(r)
}

/// Multi-mount protection (`mmp` images) for a command that opens the image more than once
/// (the dry run on an overlay, then the real run): taken once on the image itself and
/// handed to each open (`MountOptions::mmp_held`, `cjfs_fs::mmp`). Dropped before
/// [`cjfs_fs::mmp::Mmp::establish`], it puts the block back as found.
pub fn hold_mmp(ctx: &Ctx, image: &str, dev: &Device) -> CliResult<Option<cjfs_fs::mmp::Mmp>> {
    if let Ok((sb, _)) = cjfs_fs::mkfs::read_layout(&**dev)
        && let Some(Ok(m)) = cjfs_fs::mmp::read(dev, &sb)
        && m.seq != cjfs_fs::mmp::SEQ_CLEAN
        && m.seq != cjfs_fs::mmp::SEQ_FSCK
    {
        // The wait is the protocol's, not a hang: say so before it starts.
        let watch = cjfs_fs::mmp::watch_time(sb.mmp_interval, m.check_interval).as_secs();
        eprintln!(
            "cjfs: {}: note: {image}: the MMP block is not clean ({}); watching it for {watch} s, then {watch} s more if it stays unchanged, as the kernel's mount does",
            ctx.command,
            m.state()
        );
    }
    cjfs_fs::mmp::take_for(dev, "cjfs").map_err(|e| CliError::fs(image, e))
}

fn note_recovery(ctx: &Ctx, image: &str, r: &MountReport) {
    if r.replayed_transactions > 0 || r.orphans_cleaned > 0 {
        eprintln!(
            "cjfs: {}: note: {image}: replayed {} journal transaction(s) ({} blocks), cleaned {} orphan \
             inode(s)",
            ctx.command, r.replayed_transactions, r.replayed_blocks, r.orphans_cleaned
        );
    }
}

/// Bytes read from the start of a device to look for signatures (btrfs's is at 64 KiB).
const SIGNATURE_BYTES: usize = 0x10040 + 8;

/// What the first bytes of `path` (a file or block device) already hold, by the signature
/// `blkid` would find first: a file system, swap, an encrypted volume or a partition table
/// (`"an XFS file system"`, ...), or `None`. Reads only; a short file has what fits in it.
pub fn existing_signature(path: &Path) -> std::io::Result<Option<&'static str>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; SIGNATURE_BYTES];
    let mut got = 0;
    while got < buf.len() {
        let n = f.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(signature_in(&buf))
}

/// The first known signature in `head`, the start of a device (see [`existing_signature`]).
pub fn signature_in(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    // Offsets and magics as libblkid's probes (superblocks/*.c, partitions/*.c).
    let table: [(usize, &[u8], &'static str); 10] = [
        (1024 + 0x38, &[0x53, 0xEF], "an ext2/3/4 file system"),
        (0, b"XFSB", "an XFS file system"),
        (0x10040, b"_BHRfS_M", "a btrfs file system"),
        (1024, &[0x10, 0x20, 0xF5, 0xF2], "an F2FS file system"),
        (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        (4096 - 10, b"SWAPSPACE2", "swap space"),
        (4096 - 10, b"SWAP-SPACE", "swap space"),
        (0, b"hsqs", "a squashfs image"),
        (0x8001, b"CD001", "an ISO 9660 file system"),
        (512, b"EFI PART", "a GPT partition table"),
    ];
    if let Some((_, _, what)) = table.iter().find(|(off, magic, _)| at(*off, magic)) {
        return Some(what);
    }
    if at(510, &[0x55, 0xAA]) {
        if at(54, b"FAT") || at(82, b"FAT32") {
            return Some("a FAT file system");
        }
        // A DOS partition table: some entry with a partition type.
        if (0..4).any(|i| head.get(446 + 16 * i + 4).is_some_and(|&t| t != 0)) {
            return Some("an MBR partition table");
        }
    }
    None
}

/// Parse a size: a number of bytes with an optional binary suffix `K`, `M`, `G`, `T`, `P`
/// (also `KiB`, `KB`, ... and lower case), e.g. `512K`, `64M`, `4G`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("invalid size {s:?}: expected a number with an optional K/M/G/T suffix"));
    }
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}: number too large"))?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => return Err(format!("invalid size {s:?}: unknown suffix {suffix:?} (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("invalid size {s:?}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000P").is_err());
    }

    #[test]
    fn signatures_are_named() {
        let with = |off: usize, magic: &[u8]| {
            let mut head = vec![0u8; SIGNATURE_BYTES];
            head[off..off + magic.len()].copy_from_slice(magic);
            head
        };
        assert_eq!(signature_in(&vec![0u8; SIGNATURE_BYTES]), None);
        assert_eq!(signature_in(&[]), None);
        assert_eq!(signature_in(&with(1024 + 0x38, &[0x53, 0xEF])), Some("an ext2/3/4 file system"));
        assert_eq!(signature_in(&with(0, b"XFSB")), Some("an XFS file system"));
        assert_eq!(signature_in(&with(0x10040, b"_BHRfS_M")), Some("a btrfs file system"));
        assert_eq!(signature_in(&with(4086, b"SWAPSPACE2")), Some("swap space"));
        assert_eq!(signature_in(&with(512, b"EFI PART")), Some("a GPT partition table"));
        assert_eq!(signature_in(&with(0x8001, b"CD001")), Some("an ISO 9660 file system"));
        // A boot signature alone is nothing; with a partition entry's type, a DOS table.
        let mut mbr = with(510, &[0x55, 0xAA]);
        assert_eq!(signature_in(&mbr), None);
        mbr[446 + 16 + 4] = 0x83;
        assert_eq!(signature_in(&mbr), Some("an MBR partition table"));
        let mut fat = with(510, &[0x55, 0xAA]);
        fat[82..87].copy_from_slice(b"FAT32");
        assert_eq!(signature_in(&fat), Some("a FAT file system"));
        // A short file holds only what fits in it.
        assert_eq!(signature_in(&with(0, b"XFSB")[..100]), Some("an XFS file system"));
        assert_eq!(signature_in(&with(0x10040, b"_BHRfS_M")[..4096]), None);
    }
}
