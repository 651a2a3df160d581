//! `cjfs mkfs`: make a file system on an image file or a block device.

use std::fs::OpenOptions;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;

use cjfs_blockdev::{
    BlockDevice, DevError, DevResult, Device, DeviceCaps, DeviceStats, FileDevice, FileDeviceOptions,
    IoTicket, WriteRequest,
};
use cjfs_fs::mkfs::{MAX_JOURNAL_BLOCKS, MIN_DEVICE_BYTES, MIN_JOURNAL_BLOCKS, MkfsOptions, MkfsReport};
use cjfs_fs::{FsError, mkfs};

use crate::error::{CliError, CliResult};
use crate::fmt::{human_bytes, uuid};
use crate::image::{existing_signature, open_device_with};
use crate::out::outln;

/// What `cjfs mkfs` was asked to do.
#[derive(Debug, Clone)]
pub struct MkfsRequest {
    /// Image file or block device.
    pub image: String,
    /// Size in bytes.
    pub size: Option<u64>,
    /// Block size in bytes (1024, 2048 or 4096).
    pub block_size: u64,
    /// Volume label.
    pub label: Option<String>,
    /// Journal blocks.
    pub journal_blocks: Option<u32>,
    /// Extra log areas (blocks each).
    pub log_areas: Vec<u32>,
    /// ijournal areas (blocks each).
    pub ijournal_areas: Vec<u32>,
    /// Bytes per inode.
    pub inode_ratio: Option<u64>,
    /// Overwrite an existing file system.
    pub force: bool,
    /// Make a `metadata_csum` file system.
    pub metadata_csum: bool,
}

/// The first `blocks` blocks of another device (for `--size` smaller than a block device).
struct Limited {
    inner: Device,
    blocks: u64,
}

impl BlockDevice for Limited {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.blocks
    }
    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }
    fn describe(&self) -> String {
        format!("first {} blocks of {}", self.blocks, self.inner.describe())
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        self.check(block, (buf.len() / self.inner.block_size()) as u64)?;
        self.inner.read(block, buf)
    }
    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        self.check(req.block, req.bufs.len() as u64)?;
        self.inner.submit(req)
    }
    fn flush(&self) -> DevResult<()> {
        self.inner.flush()
    }
    fn barrier(&self) -> DevResult<()> {
        self.inner.barrier()
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

impl Limited {
    fn check(&self, block: u64, count: u64) -> DevResult<()> {
        if block.saturating_add(count) > self.blocks {
            return Err(DevError::OutOfRange { block, count, num_blocks: self.blocks });
        }
        Ok(())
    }
}

/// Validate the options that do not depend on the device, before anything is touched.
fn options(req: &MkfsRequest) -> CliResult<MkfsOptions> {
    if !cjfs_blockdev::valid_block_size(req.block_size as usize) {
        return Err(CliError::Usage(format!("--block-size {}: must be 1024, 2048 or 4096", req.block_size)));
    }
    let mut o = MkfsOptions { metadata_csum: req.metadata_csum, ..MkfsOptions::default() };
    if let Some(l) = &req.label {
        if l.len() > 16 {
            return Err(CliError::Usage(format!("label {l:?} is {} bytes long (at most 16)", l.len())));
        }
        o.label = l.clone();
    }
    if let Some(r) = req.inode_ratio {
        if !(1024..=64 << 20).contains(&r) {
            return Err(CliError::Usage(format!(
                "--inode-ratio {r}: must be 1024..=67108864 bytes per inode"
            )));
        }
        o.inode_ratio = r as u32;
    }
    if let Some(j) = req.journal_blocks {
        if !(MIN_JOURNAL_BLOCKS..=MAX_JOURNAL_BLOCKS).contains(&j) {
            return Err(CliError::Usage(format!(
                "--journal-blocks {j}: must be {MIN_JOURNAL_BLOCKS}..={MAX_JOURNAL_BLOCKS}"
            )));
        }
        o.journal_blocks = Some(j);
    }
    for &a in &req.log_areas {
        if !(MIN_JOURNAL_BLOCKS..=MAX_JOURNAL_BLOCKS).contains(&a) {
            return Err(CliError::Usage(format!(
                "--log-area {a}: must be {MIN_JOURNAL_BLOCKS}..={MAX_JOURNAL_BLOCKS}"
            )));
        }
    }
    if req.log_areas.len() > cjfs_journal::superblock::MAX_LOG_AREAS {
        return Err(CliError::Usage(format!(
            "--log-area given {} times (at most {})",
            req.log_areas.len(),
            cjfs_journal::superblock::MAX_LOG_AREAS
        )));
    }
    o.log_areas = req.log_areas.clone();
    let min = cjfs_journal::superblock::MIN_IJOURNAL_AREA_BLOCKS;
    for &a in &req.ijournal_areas {
        if !(min..=MAX_JOURNAL_BLOCKS).contains(&a) {
            return Err(CliError::Usage(format!(
                "--ijournal-area {a}: must be {min}..={MAX_JOURNAL_BLOCKS}"
            )));
        }
    }
    if req.log_areas.len() + req.ijournal_areas.len() > cjfs_journal::superblock::MAX_LOG_AREAS {
        return Err(CliError::Usage(format!(
            "--log-area and --ijournal-area given {} times in all (at most {})",
            req.log_areas.len() + req.ijournal_areas.len(),
            cjfs_journal::superblock::MAX_LOG_AREAS
        )));
    }
    o.ijournal_areas = req.ijournal_areas.clone();
    if let Some(s) = req.size
        && s < MIN_DEVICE_BYTES
    {
        return Err(CliError::Usage(format!(
            "--size {s}: a file system needs at least {} ({MIN_DEVICE_BYTES} bytes)",
            human_bytes(MIN_DEVICE_BYTES)
        )));
    }
    Ok(o)
}

/// Run `cjfs mkfs`.
pub fn run(req: &MkfsRequest) -> CliResult<()> {
    let mut opts = options(req)?;
    let bs = req.block_size as usize;
    let image = req.image.as_str();
    let path = Path::new(image);
    let mut created = false;
    let dev: Device = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let Some(size) = req.size else {
                return Err(CliError::Usage(format!("{image} does not exist: give --size to create it")));
            };
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| CliError::io(image, e))?;
            created = true;
            if let Err(e) = f.set_len(size) {
                let _ = std::fs::remove_file(path);
                return Err(CliError::io(image, e));
            }
            opts.assume_zeroed = true;
            open_or_remove(image, created, bs)?
        }
        Err(e) => return Err(CliError::io(image, e)),
        Ok(m) => {
            let ft = m.file_type();
            if !ft.is_file() && !ft.is_block_device() {
                return Err(CliError::Msg(format!("{image}: not a regular file or block device")));
            }
            refuse_existing(image, req.force)?;
            if ft.is_block_device() {
                let dev = open_device_with(image, false, bs)?;
                let have = dev.num_blocks();
                match req.size {
                    Some(s) if s / bs as u64 > have => {
                        return Err(CliError::Msg(format!(
                            "{image}: --size {s} is larger than the device ({} bytes)",
                            have * bs as u64
                        )));
                    }
                    Some(s) => Arc::new(Limited { inner: dev, blocks: s / bs as u64 }),
                    None => dev,
                }
            } else {
                match req.size {
                    Some(size) => {
                        // Start from zeros (sparse), emptied only once the writer lock is held.
                        let dev = FileDevice::open(
                            path,
                            FileDeviceOptions {
                                create_size: Some(size),
                                zero: true,
                                block_size: bs,
                                ..Default::default()
                            },
                        )
                        .map_err(|e| CliError::fs(image, FsError::Device(e)))?;
                        opts.assume_zeroed = true;
                        return make(image, Arc::new(dev), &opts, false);
                    }
                    None if m.len() < MIN_DEVICE_BYTES => {
                        return Err(CliError::Msg(format!(
                            "{image}: the file is {} bytes; a file system needs at least {MIN_DEVICE_BYTES} \
                             (give --size to resize it)",
                            m.len()
                        )));
                    }
                    None => {}
                }
                open_device_with(image, false, bs)?
            }
        }
    };
    make(image, dev, &opts, created)
}

/// Make the file system on `dev`; a file this command created is removed on failure.
fn make(image: &str, dev: Device, opts: &MkfsOptions, created: bool) -> CliResult<()> {
    let path = Path::new(image);
    match mkfs(&*dev, opts) {
        Ok(r) => {
            print_summary(image, &r)?;
            Ok(())
        }
        Err(e) => {
            drop(dev);
            if created {
                let _ = std::fs::remove_file(path);
            }
            Err(CliError::fs(image, e))
        }
    }
}

fn open_or_remove(image: &str, created: bool, block_size: usize) -> CliResult<Device> {
    open_device_with(image, false, block_size).inspect_err(|_| {
        if created {
            let _ = std::fs::remove_file(image);
        }
    })
}

/// Refuse to overwrite a file system, swap, an encrypted volume or a partition table
/// without `--force`, as `mkfs.ext4` asks before it does (reads only).
fn refuse_existing(image: &str, force: bool) -> CliResult<()> {
    if force {
        return Ok(());
    }
    match existing_signature(Path::new(image)).map_err(|e| CliError::io(image, e))? {
        Some(what) => {
            Err(CliError::Msg(format!("{image}: already holds {what}; use --force to overwrite it")))
        }
        None => Ok(()),
    }
}

fn print_summary(image: &str, r: &MkfsReport) -> CliResult<()> {
    let bs = u64::from(r.superblock.block_size());
    let bytes = r.block_count * bs;
    outln!("Made an ext4 file system on {image}");
    outln!("  size:        {} ({} blocks of {bs} bytes)", human_bytes(bytes), r.block_count);
    outln!(
        "  groups:      {} ({} inodes and {} inode table blocks each)",
        r.group_count,
        r.inodes_per_group,
        r.inode_table_blocks
    );
    outln!(
        "  inodes:      {} ({} free)",
        u64::from(r.inodes_per_group) * u64::from(r.group_count),
        r.free_inodes
    );
    outln!("  free blocks: {}", r.free_blocks);
    outln!(
        "  journal:     {} blocks ({}) in {} extent(s)",
        r.journal_blocks,
        human_bytes(u64::from(r.journal_blocks) * bs),
        r.journal_runs.len()
    );
    let label = r.superblock.label();
    if !label.is_empty() {
        outln!("  label:       {label}");
    }
    outln!("  uuid:        {}", uuid(&r.uuid));
    outln!(
        "  checksums:   {}",
        if r.superblock.has_metadata_csum() { "metadata_csum (crc32c)" } else { "none" }
    );
    Ok(())
}
