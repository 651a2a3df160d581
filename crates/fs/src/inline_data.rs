//! Reading inline data (the `inline_data` feature, inodes flagged `EXT4_INLINE_DATA_FL`): a
//! small file's bytes, or a small directory's entries, kept in the inode itself: the 60
//! bytes of `i_block`, then the value of the in-inode extended attribute `system.data`
//! (ext4's `Documentation/filesystems/ext4/inlinedata.rst`).
//!
//! A file's contents are the first `i_size` bytes of that stream. A directory's stream
//! starts with its parent's inode number (4 bytes, no `.` or `..` record), then records
//! fill the rest of `i_block` (56 bytes) and, separately, the whole attribute value: two
//! regions, as the kernel's `ext4_read_inline_dir` walks them.
//!
//! cjfs reads such inodes and does not write them: a file system with the feature opens
//! read-only (`ondisk::features::READ_ONLY_INCOMPAT`), so no write path meets one.

use crate::error::{FsError, FsResult};
use crate::fs::FsInner;
use crate::inode::InodeState;
use crate::ondisk::dirent;
use crate::ondisk::inode::EXT4_INLINE_DATA_FL;
use crate::types::Ino;

/// Bytes of `i_block` (`EXT4_MIN_INLINE_DATA_SIZE`).
const IBLOCK_BYTES: usize = 60;
/// The parent's inode number at the start of an inline directory (`EXT4_INLINE_DOTDOT_SIZE`).
const DOTDOT_BYTES: usize = 4;
/// The attribute holding the bytes past `i_block`.
const DATA_XATTR: &[u8] = b"system.data";

/// Whether the inode keeps its data inline.
pub(crate) fn is_inline(st: &InodeState) -> bool {
    st.d.flags & EXT4_INLINE_DATA_FL != 0
}

/// Refuse an inline inode on a file system without the feature, as the kernel's
/// `ext4_iget` does.
fn check_feature(fs: &FsInner, st: &InodeState) -> FsResult<()> {
    if !fs.geo.inline_data {
        return Err(FsError::Corrupt(format!(
            "inode {}: inline data flag (EXT4_INLINE_DATA_FL) without the inline_data feature",
            st.ino
        )));
    }
    Ok(())
}

/// The bytes past `i_block`: the value of `system.data` (empty when it has none).
fn tail(st: &InodeState) -> FsResult<Vec<u8>> {
    // In the inode body only, as the kernel looks for it (`ext4_xattr_ibody_find`): a damaged
    // external attribute block does not keep an inline file from being read.
    let list = crate::ondisk::xattr::parse_ibody(st.d.xattr_area())?;
    Ok(list.into_iter().find(|(n, _)| n == DATA_XATTR).map(|(_, v)| v).unwrap_or_default())
}

/// Read up to `buf.len()` bytes at `off` of an inline file (`off` < `i_size`).
pub(crate) fn read(fs: &FsInner, st: &InodeState, off: u64, buf: &mut [u8]) -> FsResult<usize> {
    check_feature(fs, st)?;
    let size = st.d.size;
    let tail = if size > IBLOCK_BYTES as u64 { tail(st)? } else { Vec::new() };
    let have = (IBLOCK_BYTES + tail.len()) as u64;
    if size > have {
        return Err(FsError::Corrupt(format!(
            "inode {}: inline data of {have} bytes (i_block and system.data) for a size of {size}",
            st.ino
        )));
    }
    let (off, end) = (off as usize, size as usize);
    let n = buf.len().min(end.saturating_sub(off));
    // The stream's two pieces, copied in at most two runs.
    let head = &st.d.block[off.min(IBLOCK_BYTES)..end.min(IBLOCK_BYTES)];
    let k = head.len().min(n);
    buf[..k].copy_from_slice(&head[..k]);
    let from = off.max(IBLOCK_BYTES) - IBLOCK_BYTES;
    buf[k..n].copy_from_slice(&tail[from..from + (n - k)]);
    Ok(n)
}

/// One live record of an inline directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InlineEntry {
    /// The name.
    pub name: Vec<u8>,
    /// Its inode.
    pub ino: Ino,
    /// The record's file type byte.
    pub file_type: u8,
    /// Where the record ends in the directory's stream (a stable readdir cookie).
    pub end: u64,
}

/// The parent and the live records of an inline directory, in stream order.
pub(crate) fn dir_entries(fs: &FsInner, st: &InodeState) -> FsResult<(Ino, Vec<InlineEntry>)> {
    check_feature(fs, st)?;
    let parent = u32::from_le_bytes([st.d.block[0], st.d.block[1], st.d.block[2], st.d.block[3]]);
    let tail = tail(st)?;
    let mut out = Vec::new();
    let regions = [(&st.d.block[DOTDOT_BYTES..IBLOCK_BYTES], DOTDOT_BYTES), (&tail[..], IBLOCK_BYTES)];
    for (region, base) in regions {
        for e in dirent::iter(region).with_max_inode(fs.geo.inodes_count) {
            let e = e.map_err(|e| match e {
                FsError::Corrupt(m) => {
                    FsError::Corrupt(format!("inline directory {} at byte {base}: {m}", st.ino))
                }
                other => other,
            })?;
            if e.is_live() {
                out.push(InlineEntry {
                    name: e.name.to_vec(),
                    ino: e.inode,
                    file_type: e.file_type,
                    end: (base + e.offset + e.rec_len) as u64,
                });
            }
        }
    }
    if parent == 0 || parent > fs.geo.inodes_count {
        return Err(FsError::Corrupt(format!("inline directory {}: parent inode {parent}", st.ino)));
    }
    Ok((parent, out))
}
