//! Block group descriptors: 32 bytes, or `s_desc_size` (>= 64) bytes with `64bit`.
//!
//! `bg_checksum` exists with either checksum feature:
//! - `uninit_bg` (`gdt_csum`): CRC16 (seed `!0`) over the UUID, the group number
//!   (little-endian u32) and the descriptor without the checksum field;
//! - `metadata_csum`: the low 16 bits of CRC32C from the file system seed over the group
//!   number and the whole descriptor (`s_desc_size` bytes, 32 without `64bit`) with the
//!   checksum field as zero.
//!
//! With `metadata_csum` the descriptor also holds the bitmaps' checksums: CRC32C from the
//! file system seed over the first `blocks_per_group / 8` bytes of the block bitmap and the
//! first `inodes_per_group / 8` bytes of the inode bitmap, the low halves in
//! `bg_*_bitmap_csum_lo`, the high halves in `bg_*_bitmap_csum_hi` (64-byte descriptors
//! only). [`GroupDesc::encode_into`] always writes `bg_checksum` as the [`Csum`] given
//! says, so no writer can leave a stale one.
//!
//! Either feature allows uninitialised groups: with [`BG_BLOCK_UNINIT`] /
//! [`BG_INODE_UNINIT`] the on-disk bitmap is not valid and is synthesized instead
//! ([`crate::ondisk::bitmap::uninit_block_bitmap`] /
//! [`crate::ondisk::bitmap::uninit_inode_bitmap`]); inodes past
//! `inodes_per_group - bg_itable_unused` were never used, and without [`BG_INODE_ZEROED`]
//! their table slots may hold anything.

use crate::error::{CsumStructure, FsError, FsResult};
use crate::ondisk::csum::{Csum, CsumKind, crc32c};
use crate::ondisk::superblock::{Superblock, get_u16, get_u32, put_u16, put_u32};

/// Smallest descriptor size.
pub const DESC_SIZE_32: usize = 32;
/// Descriptor size with `64bit`.
pub const DESC_SIZE_64: usize = 64;

/// `bg_flags`: inode table and bitmap are not initialized.
pub const BG_INODE_UNINIT: u16 = 0x0001;
/// `bg_flags`: block bitmap is not initialized.
pub const BG_BLOCK_UNINIT: u16 = 0x0002;
/// `bg_flags`: the inode table is zeroed.
pub const BG_INODE_ZEROED: u16 = 0x0004;

/// `bg_block_bitmap_lo` (u32).
pub const BG_BLOCK_BITMAP_LO: usize = 0x00;
/// `bg_inode_bitmap_lo` (u32).
pub const BG_INODE_BITMAP_LO: usize = 0x04;
/// `bg_inode_table_lo` (u32).
pub const BG_INODE_TABLE_LO: usize = 0x08;
/// `bg_free_blocks_count_lo` (u16).
pub const BG_FREE_BLOCKS_COUNT_LO: usize = 0x0C;
/// `bg_free_inodes_count_lo` (u16).
pub const BG_FREE_INODES_COUNT_LO: usize = 0x0E;
/// `bg_used_dirs_count_lo` (u16).
pub const BG_USED_DIRS_COUNT_LO: usize = 0x10;
/// `bg_flags` (u16).
pub const BG_FLAGS: usize = 0x12;
/// `bg_exclude_bitmap_lo` (u32).
pub const BG_EXCLUDE_BITMAP_LO: usize = 0x14;
/// `bg_block_bitmap_csum_lo` (u16).
pub const BG_BLOCK_BITMAP_CSUM_LO: usize = 0x18;
/// `bg_inode_bitmap_csum_lo` (u16).
pub const BG_INODE_BITMAP_CSUM_LO: usize = 0x1A;
/// `bg_itable_unused_lo` (u16).
pub const BG_ITABLE_UNUSED_LO: usize = 0x1C;
/// `bg_checksum` (u16).
pub const BG_CHECKSUM: usize = 0x1E;
/// `bg_block_bitmap_hi` (u32).
pub const BG_BLOCK_BITMAP_HI: usize = 0x20;
/// `bg_inode_bitmap_hi` (u32).
pub const BG_INODE_BITMAP_HI: usize = 0x24;
/// `bg_inode_table_hi` (u32).
pub const BG_INODE_TABLE_HI: usize = 0x28;
/// `bg_free_blocks_count_hi` (u16).
pub const BG_FREE_BLOCKS_COUNT_HI: usize = 0x2C;
/// `bg_free_inodes_count_hi` (u16).
pub const BG_FREE_INODES_COUNT_HI: usize = 0x2E;
/// `bg_used_dirs_count_hi` (u16).
pub const BG_USED_DIRS_COUNT_HI: usize = 0x30;
/// `bg_itable_unused_hi` (u16).
pub const BG_ITABLE_UNUSED_HI: usize = 0x32;
/// `bg_block_bitmap_csum_hi` (u16).
pub const BG_BLOCK_BITMAP_CSUM_HI: usize = 0x38;
/// `bg_inode_bitmap_csum_hi` (u16).
pub const BG_INODE_BITMAP_CSUM_HI: usize = 0x3A;

/// One group descriptor. The raw bytes are kept so unmodeled fields (exclude bitmap,
/// bitmap checksums, reserved) survive [`GroupDesc::encode_into`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDesc {
    /// Block bitmap location.
    pub block_bitmap: u64,
    /// Inode bitmap location.
    pub inode_bitmap: u64,
    /// First block of the inode table.
    pub inode_table: u64,
    /// Free blocks in the group.
    pub free_blocks_count: u32,
    /// Free inodes in the group.
    pub free_inodes_count: u32,
    /// Directories in the group.
    pub used_dirs_count: u32,
    /// `bg_flags`: [`BG_INODE_UNINIT`], [`BG_BLOCK_UNINIT`], [`BG_INODE_ZEROED`].
    pub flags: u16,
    /// Inodes at the end of the table never used (only meaningful with `uninit_bg`).
    pub itable_unused: u32,
    /// `bg_checksum` as read ([`GroupDesc::encode_into`] writes a fresh one).
    pub checksum: u16,
    /// `bg_block_bitmap_csum_lo` | `_hi` << 16 (the high half only in 64-byte descriptors).
    pub block_bitmap_csum: u32,
    /// `bg_inode_bitmap_csum_lo` | `_hi` << 16 (the high half only in 64-byte descriptors).
    pub inode_bitmap_csum: u32,
    raw: Vec<u8>,
}

impl GroupDesc {
    /// A zeroed descriptor of `size` bytes (32, or `s_desc_size` with `64bit`).
    pub fn new(size: usize) -> Self {
        GroupDesc {
            block_bitmap: 0,
            inode_bitmap: 0,
            inode_table: 0,
            free_blocks_count: 0,
            free_inodes_count: 0,
            used_dirs_count: 0,
            flags: 0,
            itable_unused: 0,
            checksum: 0,
            block_bitmap_csum: 0,
            inode_bitmap_csum: 0,
            raw: vec![0; size.max(DESC_SIZE_32)],
        }
    }

    /// Decode one descriptor; `buf.len()` is the descriptor size (>= 32; the `_hi` halves are
    /// read when it is >= 64).
    pub fn decode(buf: &[u8]) -> FsResult<Self> {
        if buf.len() < DESC_SIZE_32 {
            return Err(FsError::Corrupt(format!(
                "group descriptor: {} bytes given, at least 32 needed",
                buf.len()
            )));
        }
        let b = buf;
        let wide = b.len() >= DESC_SIZE_64;
        let hi32 = |off: usize| {
            if wide { (get_u32(b, off) as u64) << 32 } else { 0 }
        };
        let hi16 = |off: usize| {
            if wide { (get_u16(b, off) as u32) << 16 } else { 0 }
        };
        Ok(GroupDesc {
            block_bitmap: get_u32(b, BG_BLOCK_BITMAP_LO) as u64 | hi32(BG_BLOCK_BITMAP_HI),
            inode_bitmap: get_u32(b, BG_INODE_BITMAP_LO) as u64 | hi32(BG_INODE_BITMAP_HI),
            inode_table: get_u32(b, BG_INODE_TABLE_LO) as u64 | hi32(BG_INODE_TABLE_HI),
            free_blocks_count: get_u16(b, BG_FREE_BLOCKS_COUNT_LO) as u32 | hi16(BG_FREE_BLOCKS_COUNT_HI),
            free_inodes_count: get_u16(b, BG_FREE_INODES_COUNT_LO) as u32 | hi16(BG_FREE_INODES_COUNT_HI),
            used_dirs_count: get_u16(b, BG_USED_DIRS_COUNT_LO) as u32 | hi16(BG_USED_DIRS_COUNT_HI),
            flags: get_u16(b, BG_FLAGS),
            itable_unused: get_u16(b, BG_ITABLE_UNUSED_LO) as u32 | hi16(BG_ITABLE_UNUSED_HI),
            checksum: get_u16(b, BG_CHECKSUM),
            block_bitmap_csum: get_u16(b, BG_BLOCK_BITMAP_CSUM_LO) as u32 | hi16(BG_BLOCK_BITMAP_CSUM_HI),
            inode_bitmap_csum: get_u16(b, BG_INODE_BITMAP_CSUM_LO) as u32 | hi16(BG_INODE_BITMAP_CSUM_HI),
            raw: b.to_vec(),
        })
    }

    /// Descriptor size this descriptor encodes to.
    pub fn size(&self) -> usize {
        self.raw.len()
    }

    /// Encode as group `group` into `out[..self.size()]`: the modeled fields patched into
    /// the raw bytes (in a 32-byte descriptor only the low halves), then `bg_checksum` as
    /// `csum` computes it (left as [`GroupDesc::checksum`] without checksums).
    pub fn encode_into(&self, out: &mut [u8], csum: &Csum, group: u32) {
        let n = self.raw.len();
        let b = &mut out[..n];
        b.copy_from_slice(&self.raw);
        self.patch(b);
        if let Some(c) = desc_checksum(csum, group, b) {
            put_u16(b, BG_CHECKSUM, c);
        }
    }

    fn patch(&self, b: &mut [u8]) {
        put_u32(b, BG_BLOCK_BITMAP_LO, self.block_bitmap as u32);
        put_u32(b, BG_INODE_BITMAP_LO, self.inode_bitmap as u32);
        put_u32(b, BG_INODE_TABLE_LO, self.inode_table as u32);
        put_u16(b, BG_FREE_BLOCKS_COUNT_LO, self.free_blocks_count as u16);
        put_u16(b, BG_FREE_INODES_COUNT_LO, self.free_inodes_count as u16);
        put_u16(b, BG_USED_DIRS_COUNT_LO, self.used_dirs_count as u16);
        put_u16(b, BG_FLAGS, self.flags);
        put_u16(b, BG_ITABLE_UNUSED_LO, self.itable_unused as u16);
        put_u16(b, BG_CHECKSUM, self.checksum);
        put_u16(b, BG_BLOCK_BITMAP_CSUM_LO, self.block_bitmap_csum as u16);
        put_u16(b, BG_INODE_BITMAP_CSUM_LO, self.inode_bitmap_csum as u16);
        if b.len() >= DESC_SIZE_64 {
            put_u16(b, BG_BLOCK_BITMAP_CSUM_HI, (self.block_bitmap_csum >> 16) as u16);
            put_u16(b, BG_INODE_BITMAP_CSUM_HI, (self.inode_bitmap_csum >> 16) as u16);
            put_u32(b, BG_BLOCK_BITMAP_HI, (self.block_bitmap >> 32) as u32);
            put_u32(b, BG_INODE_BITMAP_HI, (self.inode_bitmap >> 32) as u32);
            put_u32(b, BG_INODE_TABLE_HI, (self.inode_table >> 32) as u32);
            put_u16(b, BG_FREE_BLOCKS_COUNT_HI, (self.free_blocks_count >> 16) as u16);
            put_u16(b, BG_FREE_INODES_COUNT_HI, (self.free_inodes_count >> 16) as u16);
            put_u16(b, BG_USED_DIRS_COUNT_HI, (self.used_dirs_count >> 16) as u16);
            put_u16(b, BG_ITABLE_UNUSED_HI, (self.itable_unused >> 16) as u16);
        }
    }

    /// The bytes as held: the modeled fields patched in, `bg_checksum` as
    /// [`GroupDesc::checksum`] says (for comparisons; writers use
    /// [`GroupDesc::encode_into`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = self.raw.clone();
        self.patch(&mut v);
        v
    }

    /// The `bg_checksum` this descriptor should carry as group `group` (`None` without
    /// checksums).
    pub fn compute_checksum(&self, csum: &Csum, group: u32) -> Option<u16> {
        desc_checksum(csum, group, &self.to_bytes())
    }

    /// Set [`GroupDesc::checksum`] to what it should be (no-op without checksums).
    pub fn update_checksum(&mut self, csum: &Csum, group: u32) {
        if let Some(c) = self.compute_checksum(csum, group) {
            self.checksum = c;
        }
    }

    /// Check `bg_checksum` (always Ok without checksums).
    pub fn verify_checksum(&self, csum: &Csum, group: u32) -> FsResult<()> {
        match self.compute_checksum(csum, group) {
            Some(want) if want != self.checksum => Err(FsError::checksum(
                CsumStructure::GroupDesc,
                format!("of group {group}"),
                u32::from(self.checksum),
                u32::from(want),
            )),
            _ => Ok(()),
        }
    }

    /// Record the checksum of block bitmap `bitmap` (its whole block) for
    /// `blocks_per_group` blocks (no-op without `metadata_csum`).
    pub fn set_block_bitmap_csum(&mut self, csum: &Csum, bitmap: &[u8], blocks_per_group: u32) {
        if csum.metadata() {
            self.block_bitmap_csum =
                self.bitmap_csum_field(csum.bitmap(bitmap, blocks_per_group as usize / 8));
        }
    }

    /// Record the checksum of inode bitmap `bitmap` for `inodes_per_group` inodes (no-op
    /// without `metadata_csum`).
    pub fn set_inode_bitmap_csum(&mut self, csum: &Csum, bitmap: &[u8], inodes_per_group: u32) {
        if csum.metadata() {
            self.inode_bitmap_csum =
                self.bitmap_csum_field(csum.bitmap(bitmap, inodes_per_group as usize / 8));
        }
    }

    /// Check block bitmap `bitmap` of group `group` against the recorded checksum (Ok
    /// without `metadata_csum`).
    pub fn verify_block_bitmap(
        &self,
        csum: &Csum,
        group: u32,
        bitmap: &[u8],
        blocks_per_group: u32,
    ) -> FsResult<()> {
        if !csum.metadata() {
            return Ok(());
        }
        let want = self.bitmap_csum_field(csum.bitmap(bitmap, blocks_per_group as usize / 8));
        if want != self.block_bitmap_csum {
            return Err(FsError::checksum(
                CsumStructure::BlockBitmap,
                format!("of group {group} (block {})", self.block_bitmap),
                self.block_bitmap_csum,
                want,
            ));
        }
        Ok(())
    }

    /// Check inode bitmap `bitmap` of group `group` against the recorded checksum (Ok
    /// without `metadata_csum`).
    pub fn verify_inode_bitmap(
        &self,
        csum: &Csum,
        group: u32,
        bitmap: &[u8],
        inodes_per_group: u32,
    ) -> FsResult<()> {
        if !csum.metadata() {
            return Ok(());
        }
        let want = self.bitmap_csum_field(csum.bitmap(bitmap, inodes_per_group as usize / 8));
        if want != self.inode_bitmap_csum {
            return Err(FsError::checksum(
                CsumStructure::InodeBitmap,
                format!("of group {group} (block {})", self.inode_bitmap),
                self.inode_bitmap_csum,
                want,
            ));
        }
        Ok(())
    }

    /// What of a bitmap checksum this descriptor can hold (the low half in 32 bytes).
    fn bitmap_csum_field(&self, c: u32) -> u32 {
        if self.raw.len() >= DESC_SIZE_64 { c } else { c & 0xFFFF }
    }

    /// Check that the bitmaps and inode table lie inside the file system, clear of the
    /// superblock/GDT copies of their group, and that the counts fit the group.
    pub fn validate(&self, sb: &Superblock, group: u32) -> FsResult<()> {
        let blocks = sb.block_count();
        let itb = sb.inode_table_blocks() as u64;
        let bad = |field: &str, v: u64, why: String| {
            Err(FsError::Corrupt(format!("group descriptor {group}: {field} = {v} {why}")))
        };
        for (field, v, len) in [
            ("bg_block_bitmap", self.block_bitmap, 1u64),
            ("bg_inode_bitmap", self.inode_bitmap, 1),
            ("bg_inode_table", self.inode_table, itb),
        ] {
            if v < sb.first_data_block as u64 || v.saturating_add(len) > blocks {
                return bad(field, v, format!("(outside the file system of {blocks} blocks)"));
            }
            let g = sb.group_of_block(v);
            for og in g..=sb.group_of_block(v + len - 1) {
                let start = sb.group_first_block(og);
                let meta = sb.group_super_overhead(og) as u64;
                if meta > 0 && v < start + meta && v + len > start {
                    return bad(field, v, format!("(overlaps the superblock/GDT copy of group {og})"));
                }
            }
            if !sb.has_flex_bg() && g != group {
                return bad(field, v, format!("(outside group {group} without flex_bg)"));
            }
        }
        if self.free_blocks_count > sb.group_block_count(group) {
            return bad(
                "bg_free_blocks_count",
                self.free_blocks_count as u64,
                format!("(group has {} blocks)", sb.group_block_count(group)),
            );
        }
        if self.free_inodes_count > sb.inodes_per_group {
            return bad(
                "bg_free_inodes_count",
                self.free_inodes_count as u64,
                format!("(group has {} inodes)", sb.inodes_per_group),
            );
        }
        if self.used_dirs_count > sb.inodes_per_group {
            return bad(
                "bg_used_dirs_count",
                self.used_dirs_count as u64,
                format!("(group has {} inodes)", sb.inodes_per_group),
            );
        }
        if sb.has_group_desc_csum() && self.itable_unused > sb.inodes_per_group {
            return bad(
                "bg_itable_unused",
                self.itable_unused as u64,
                format!("(group has {} inodes)", sb.inodes_per_group),
            );
        }
        Ok(())
    }

    /// Decode `count` descriptors of `desc_size` bytes from the concatenated GDT blocks.
    pub fn decode_table(buf: &[u8], count: u32, desc_size: usize) -> FsResult<Vec<GroupDesc>> {
        if desc_size < DESC_SIZE_32 {
            return Err(FsError::Corrupt(format!(
                "group descriptor table: descriptor size {desc_size} (at least 32)"
            )));
        }
        let need = count as usize * desc_size;
        if buf.len() < need {
            return Err(FsError::Corrupt(format!(
                "group descriptor table: {} bytes given, {need} needed for {count} groups",
                buf.len()
            )));
        }
        buf[..need].chunks_exact(desc_size).map(GroupDesc::decode).collect()
    }

    /// Encode descriptors into the GDT bytes `out` (descriptor `i`, group `i`, at
    /// `i * desc_size`), each with its checksum; bytes after the last descriptor are left as
    /// they are.
    pub fn encode_table(descs: &[GroupDesc], desc_size: usize, out: &mut [u8], csum: &Csum) {
        for (i, d) in descs.iter().enumerate() {
            let slot = &mut out[i * desc_size..(i + 1) * desc_size];
            if d.raw.len() == desc_size {
                d.encode_into(slot, csum, i as u32);
            } else {
                // Size changed (should not happen): write the modeled fields only.
                let n = d.raw.len().min(desc_size);
                slot[..n].copy_from_slice(&d.raw[..n]);
                slot[n..].fill(0);
                d.patch(slot);
                if let Some(c) = desc_checksum(csum, i as u32, slot) {
                    put_u16(slot, BG_CHECKSUM, c);
                }
            }
        }
    }
}

/// `bg_checksum` of the encoded descriptor `b` of group `group` (`None` without checksums;
/// see the module documentation).
pub fn desc_checksum(csum: &Csum, group: u32, b: &[u8]) -> Option<u16> {
    match csum.kind() {
        CsumKind::None => None,
        CsumKind::Metadata => {
            let mut c = crc32c(csum.seed(), &group.to_le_bytes());
            c = crc32c(c, &b[..BG_CHECKSUM]);
            c = crc32c(c, &[0, 0]);
            c = crc32c(c, &b[BG_CHECKSUM + 2..]);
            Some(c as u16)
        }
        CsumKind::Gdt => {
            let mut c = crc16(0xFFFF, csum.uuid());
            c = crc16(c, &group.to_le_bytes());
            c = crc16(c, &b[..BG_CHECKSUM]);
            if csum.is64() && b.len() > BG_CHECKSUM + 2 {
                c = crc16(c, &b[BG_CHECKSUM + 2..]);
            }
            Some(c)
        }
    }
}

/// CRC-16 (polynomial 0x8005, reflected: 0xA001) as used for `uninit_bg` descriptor
/// checksums (Linux `crc16()`); seed with 0xFFFF (`~0`).
pub fn crc16(mut crc: u16, data: &[u8]) -> u16 {
    for &byte in data {
        crc ^= byte as u16;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xA001 } else { crc >> 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With 1 KiB blocks and flex_bg, mke2fs packs inode tables across group boundaries:
    /// crossing into a group without a superblock copy is fine, into one with it is not.
    #[test]
    fn tables_may_cross_into_groups_without_a_superblock_copy() {
        use crate::ondisk::features::{INCOMPAT_FLEX_BG, RO_COMPAT_SPARSE_SUPER};
        let mut sb = Superblock::blank();
        sb.log_block_size = 0;
        sb.first_data_block = 1;
        sb.blocks_per_group = 8192;
        sb.blocks_count = 262144;
        sb.inodes_per_group = 2048;
        sb.inode_size = 256;
        sb.rev_level = 1;
        sb.feature_ro_compat |= RO_COMPAT_SPARSE_SUPER;
        sb.feature_incompat |= INCOMPAT_FLEX_BG;
        sb.log_groups_per_flex = 4;
        let mut d = GroupDesc::new(64);
        d.block_bitmap = 131073;
        d.inode_bitmap = 131089;
        // 512 table blocks from group 16 into group 17 (no copy): accepted.
        d.inode_table = 138785;
        d.validate(&sb, 31).unwrap();
        // From group 8 into group 9 (a copy at its start): refused.
        let start9 = sb.group_first_block(9);
        d.inode_table = start9 - 100;
        let e = d.validate(&sb, 31).unwrap_err().to_string();
        assert!(e.contains("overlaps the superblock/GDT copy of group 9"), "{e}");
    }

    #[test]
    fn crc16_reference() {
        // CRC-16/ARC of "123456789" is 0xBB3D (init 0); MODBUS (init 0xFFFF) is 0x4B37.
        assert_eq!(crc16(0, b"123456789"), 0xBB3D);
        assert_eq!(crc16(0xFFFF, b"123456789"), 0x4B37);
    }

    #[test]
    fn round_trip_64() {
        let mut raw = vec![0u8; 64];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = (i * 7 + 1) as u8;
        }
        let d = GroupDesc::decode(&raw).unwrap();
        assert_eq!(d.to_bytes(), raw);
        let lo = get_u32(&raw, 0) as u64;
        assert_eq!(d.block_bitmap, lo | (get_u32(&raw, 32) as u64) << 32);
        let d32 = GroupDesc::decode(&raw[..32]).unwrap();
        assert_eq!(d32.to_bytes(), raw[..32]);
        assert_eq!(d32.block_bitmap, lo);
    }
}
