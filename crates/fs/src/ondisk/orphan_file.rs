//! Blocks of the ext4 orphan file (`orphan_file`, compat 0x1000): the inode named by
//! `s_orphan_file_inum` holds `i_size / block size` blocks, each an array of little-endian
//! u32 inode numbers (0: a free slot) filling the block up to an 8-byte tail:
//!
//! | offset         | field         | meaning                                |
//! |----------------|---------------|----------------------------------------|
//! | 0              | `__le32[n]`   | orphan inode numbers, 0 = free         |
//! | block size - 8 | `ob_magic`    | [`ORPHAN_BLOCK_MAGIC`]                 |
//! | block size - 4 | `ob_checksum` | CRC32C, with `metadata_csum` only      |
//!
//! The checksum (kernel `ext4_orphan_file_block_csum_verify`, e2fsprogs
//! `ext2fs_do_orphan_file_block_csum`) starts from the orphan file inode's seed (file system
//! seed, then its inode number and `i_generation`, both LE u32), continues over the block's
//! physical number as a little-endian u64, then over the entries (every byte before the
//! tail). Without `metadata_csum` the field is not checked.
//!
//! `RO_COMPAT_ORPHAN_PRESENT` (0x10000) in the superblock says entries may be live.

use crate::error::{CsumStructure, FsError, FsResult};
use crate::ondisk::csum::crc32c;

/// `ob_magic` of every orphan file block.
pub const ORPHAN_BLOCK_MAGIC: u32 = 0x0b10_ca04;

/// Bytes of the tail (`ob_magic`, `ob_checksum`).
pub const TAIL_BYTES: usize = 8;

/// Entries per block of `block_size` bytes.
pub const fn entries_per_block(block_size: usize) -> usize {
    (block_size - TAIL_BYTES) / 4
}

/// Entry `slot` of an orphan file block.
pub fn entry(block: &[u8], slot: usize) -> u32 {
    u32::from_le_bytes(block[slot * 4..slot * 4 + 4].try_into().expect("4 bytes"))
}

/// Set entry `slot` of an orphan file block to `ino` (0 frees it).
pub fn set_entry(block: &mut [u8], slot: usize, ino: u32) {
    block[slot * 4..slot * 4 + 4].copy_from_slice(&ino.to_le_bytes());
}

/// The checksum of an orphan file block at physical block `pblk`, for an orphan file whose
/// inode seed is `inode_seed`.
pub fn block_checksum(inode_seed: u32, pblk: u64, block: &[u8]) -> u32 {
    let c = crc32c(inode_seed, &pblk.to_le_bytes());
    crc32c(c, &block[..entries_per_block(block.len()) * 4])
}

/// Recompute and store the checksum of an orphan file block (`inode_seed`: `None` without
/// `metadata_csum`, when the field is left as it is).
pub fn set_checksum(inode_seed: Option<u32>, pblk: u64, block: &mut [u8]) {
    if let Some(seed) = inode_seed {
        let c = block_checksum(seed, pblk, block);
        let n = block.len();
        block[n - 4..].copy_from_slice(&c.to_le_bytes());
    }
}

/// Check the tail of orphan file block `index` (physical `pblk`): its magic, and its
/// checksum when `inode_seed` is given. Returns how many entries are live.
pub fn verify_block(inode_seed: Option<u32>, index: u32, pblk: u64, block: &[u8]) -> FsResult<usize> {
    let n = block.len();
    let magic = u32::from_le_bytes(block[n - 8..n - 4].try_into().expect("4 bytes"));
    if magic != ORPHAN_BLOCK_MAGIC {
        return Err(FsError::Corrupt(format!(
            "orphan file block {index} (block {pblk}): ob_magic {magic:#010x}, expected {ORPHAN_BLOCK_MAGIC:#010x}"
        )));
    }
    if let Some(seed) = inode_seed {
        let stored = u32::from_le_bytes(block[n - 4..].try_into().expect("4 bytes"));
        let want = block_checksum(seed, pblk, block);
        if stored != want {
            return Err(FsError::Checksum {
                structure: CsumStructure::OrphanBlock,
                location: format!("{index} (block {pblk})"),
                detail: format!("stored {stored:#010x}, computed {want:#010x}"),
            });
        }
    }
    Ok((0..entries_per_block(n)).filter(|&s| entry(block, s) != 0).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blank(seed: Option<u32>, pblk: u64) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[4088..4092].copy_from_slice(&ORPHAN_BLOCK_MAGIC.to_le_bytes());
        set_checksum(seed, pblk, &mut b);
        b
    }

    #[test]
    fn layout_and_checksum() {
        assert_eq!(entries_per_block(4096), 1022);
        let mut b = blank(Some(0x1234), 77);
        assert_eq!(verify_block(Some(0x1234), 0, 77, &b).unwrap(), 0);
        set_entry(&mut b, 1021, 13);
        assert!(matches!(verify_block(Some(0x1234), 0, 77, &b), Err(FsError::Checksum { .. })));
        set_checksum(Some(0x1234), 77, &mut b);
        assert_eq!(verify_block(Some(0x1234), 0, 77, &b).unwrap(), 1);
        assert_eq!(entry(&b, 1021), 13);
        // The block number is covered: the same bytes elsewhere do not verify.
        assert!(verify_block(Some(0x1234), 0, 78, &b).is_err());
        // Without metadata_csum only the magic counts.
        assert_eq!(verify_block(None, 0, 78, &b).unwrap(), 1);
        b[4088] ^= 1;
        assert!(matches!(verify_block(None, 0, 78, &b), Err(FsError::Corrupt(_))));
    }
}
