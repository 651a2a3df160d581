//! Metadata checksums: how a file system computes them ([`Csum`], derived from its
//! superblock) and the per-inode seed ([`InodeCsum`]) that extent tree blocks, directory
//! blocks and the inode itself are checksummed with.
//!
//! With `metadata_csum` (ro_compat 0x400) every checksum is CRC32C as the kernel's
//! `ext4_chksum` computes it: a raw update of the running value, no inversion before or
//! after. The file system seed is `s_checksum_seed` with `metadata_csum_seed` (incompat
//! 0x2000), else the CRC32C of the UUID starting from `!0`; an inode's seed continues from
//! it over the inode number and then `i_generation` (both little-endian u32). Which bytes
//! each structure covers is documented next to its codec (superblock, group descriptor,
//! inode, extent block, directory leaf and htree node, xattr block).
//!
//! Without `metadata_csum` but with `uninit_bg` (`gdt_csum`, ro_compat 0x10) only the group
//! descriptors carry a checksum: CRC16 over the UUID, the group number and the descriptor
//! (see [`crate::ondisk::group_desc`]). Both features make uninitialised block groups
//! possible (`BLOCK_UNINIT`, `INODE_UNINIT`, `bg_itable_unused`).
//!
//! References: the kernel's `fs/ext4/ext4.h`, `super.c`, `inode.c`, `extents.c`,
//! `namei.c`, `xattr.c`, `bitmap.c`; e2fsprogs' `lib/ext2fs/csum.c`; the ext4 disk layout
//! documentation ("Checksums").

use crate::ondisk::features::{INCOMPAT_CSUM_SEED, RO_COMPAT_GDT_CSUM, RO_COMPAT_METADATA_CSUM};
use crate::ondisk::superblock::Superblock;

/// CRC32C update of `seed` over `data` with no pre- or post-inversion (Linux
/// `crc32c(seed, data, len)`, what ext4 calls `ext4_chksum`).
pub fn crc32c(seed: u32, data: &[u8]) -> u32 {
    // `crc32c_append` inverts on entry and on exit; undo both.
    !crc32c::crc32c_append(!seed, data)
}

/// Which checksums a file system keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsumKind {
    /// No checksums (and no uninitialised groups).
    None,
    /// `uninit_bg`: CRC16 group descriptor checksums only.
    Gdt,
    /// `metadata_csum`: CRC32C on every metadata structure.
    Metadata,
}

/// How the checksums of one file system are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Csum {
    kind: CsumKind,
    /// File system seed (`metadata_csum` only).
    seed: u32,
    /// UUID (the CRC16 descriptor checksum starts from it).
    uuid: [u8; 16],
    /// `64bit`: the CRC16 descriptor checksum then covers the bytes after `bg_checksum`.
    is64: bool,
    /// Block size in bytes, handed to every [`InodeCsum`] (a node's layout depends on it).
    block_size: usize,
}

impl Csum {
    /// No checksums at all.
    pub const fn none() -> Self {
        Csum { kind: CsumKind::None, seed: 0, uuid: [0; 16], is64: false, block_size: 4096 }
    }

    /// The checksums `sb`'s features call for. `metadata_csum` wins over `uninit_bg` (the
    /// kernel ignores the latter when both are set).
    pub fn from_sb(sb: &Superblock) -> Self {
        let is64 = sb.has_64bit();
        let block_size = sb.block_size() as usize;
        if sb.feature_ro_compat & RO_COMPAT_METADATA_CSUM != 0 {
            let seed = if sb.feature_incompat & INCOMPAT_CSUM_SEED != 0 {
                sb.checksum_seed
            } else {
                crc32c(!0, &sb.uuid)
            };
            Csum { kind: CsumKind::Metadata, seed, uuid: sb.uuid, is64, block_size }
        } else if sb.feature_ro_compat & RO_COMPAT_GDT_CSUM != 0 {
            Csum { kind: CsumKind::Gdt, seed: 0, uuid: sb.uuid, is64, block_size }
        } else {
            // The UUID still seeds EA inode value hashes (`ea_inode` without checksums).
            Csum { block_size, uuid: sb.uuid, ..Csum::none() }
        }
    }

    /// Which checksums these are.
    pub fn kind(&self) -> CsumKind {
        self.kind
    }

    /// `metadata_csum`: every structure is checksummed.
    pub fn metadata(&self) -> bool {
        self.kind == CsumKind::Metadata
    }

    /// Group descriptors are checksummed (either feature), so groups may be uninitialised.
    pub fn group_desc(&self) -> bool {
        self.kind != CsumKind::None
    }

    /// The file system seed (meaningful with `metadata_csum` only).
    pub fn seed(&self) -> u32 {
        self.seed
    }

    /// The file system UUID.
    pub fn uuid(&self) -> &[u8; 16] {
        &self.uuid
    }

    /// Whether descriptors are 64-bit (`64bit` feature).
    pub fn is64(&self) -> bool {
        self.is64
    }

    /// The seed of inode `ino` with generation `generation`.
    pub fn inode_seed(&self, ino: u32, generation: u32) -> u32 {
        let s = crc32c(self.seed, &ino.to_le_bytes());
        crc32c(s, &generation.to_le_bytes())
    }

    /// The checksum context of inode `ino` (generation `generation`) for its extent tree
    /// and directory blocks.
    pub fn for_inode(&self, ino: u32, generation: u32) -> InodeCsum {
        InodeCsum {
            ino,
            seed: self.metadata().then(|| self.inode_seed(ino, generation)),
            block_size: self.block_size,
        }
    }

    /// CRC32C of a bitmap (the first `bytes` bytes of its block) with the file system seed.
    pub fn bitmap(&self, bitmap: &[u8], bytes: usize) -> u32 {
        crc32c(self.seed, &bitmap[..bytes.min(bitmap.len())])
    }
}

/// The context of one inode's blocks: its number (for messages), its checksum seed
/// (`None` without `metadata_csum`: nothing is checksummed) and the block size (which sets
/// how many extents a tree node holds and where a directory block's tail lies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeCsum {
    /// The inode the blocks belong to.
    pub ino: u32,
    /// Its seed, with `metadata_csum`.
    pub seed: Option<u32>,
    /// Bytes in one block of the file system.
    pub block_size: usize,
}

impl InodeCsum {
    /// No checksums, 4 KiB blocks (file systems without `metadata_csum`, tests).
    pub const fn none(ino: u32) -> Self {
        InodeCsum { ino, seed: None, block_size: 4096 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_is_the_kernels() {
        // The standard check value is the inverted form.
        assert_eq!(!crc32c(!0, b"123456789"), 0xE306_9283);
        let a = crc32c(0x1234_5678, b"hello ");
        assert_eq!(crc32c(a, b"world"), crc32c(0x1234_5678, b"hello world"));
    }

    #[test]
    fn seeds() {
        let mut sb = Superblock::blank();
        sb.uuid = [7; 16];
        assert_eq!(Csum::from_sb(&sb).kind(), CsumKind::None);
        sb.feature_ro_compat = RO_COMPAT_GDT_CSUM;
        assert_eq!(Csum::from_sb(&sb).kind(), CsumKind::Gdt);
        sb.feature_ro_compat = RO_COMPAT_METADATA_CSUM;
        let c = Csum::from_sb(&sb);
        assert!(c.metadata());
        assert_eq!(c.seed(), crc32c(!0, &[7; 16]));
        sb.feature_incompat = INCOMPAT_CSUM_SEED;
        sb.checksum_seed = 0xdead_beef;
        assert_eq!(Csum::from_sb(&sb).seed(), 0xdead_beef);
        let ic = Csum::from_sb(&sb).for_inode(12, 5);
        assert_eq!(ic.seed, Some(crc32c(crc32c(0xdead_beef, &12u32.to_le_bytes()), &5u32.to_le_bytes())));
        assert_eq!(Csum::none().for_inode(12, 5).seed, None);
    }
}
