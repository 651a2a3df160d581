//! Block and inode bitmaps: bit `i` is bit `i % 8` of byte `i / 8` (little-endian bit
//! order, as `ext2fs_test_bit`). Pure helpers over a bitmap block's bytes.
//!
//! Padding rules e2fsck checks: in the block bitmap of the last (short) group, the bits
//! past the group's end are set; in every inode bitmap, the bits from `s_inodes_per_group`
//! to the end of the block are set.

use crate::ondisk::group_desc::GroupDesc;
use crate::ondisk::superblock::Superblock;

/// Whether bit `bit` is set. Bits past the slice read as set (they are not allocatable).
pub fn test(bm: &[u8], bit: usize) -> bool {
    match bm.get(bit / 8) {
        Some(b) => b & (1 << (bit % 8)) != 0,
        None => true,
    }
}

/// Set bit `bit`; returns its previous value. Bits past the slice are ignored (and
/// reported as set).
pub fn set(bm: &mut [u8], bit: usize) -> bool {
    match bm.get_mut(bit / 8) {
        Some(b) => {
            let old = *b & (1 << (bit % 8)) != 0;
            *b |= 1 << (bit % 8);
            old
        }
        None => true,
    }
}

/// Clear bit `bit`; returns its previous value (bits past the slice: ignored, `false`).
pub fn clear(bm: &mut [u8], bit: usize) -> bool {
    match bm.get_mut(bit / 8) {
        Some(b) => {
            let old = *b & (1 << (bit % 8)) != 0;
            *b &= !(1 << (bit % 8));
            old
        }
        None => false,
    }
}

fn clamp(bm: &[u8], start: usize, len: usize) -> (usize, usize) {
    let nbits = bm.len() * 8;
    let s = start.min(nbits);
    (s, start.saturating_add(len).min(nbits))
}

fn fill_range(bm: &mut [u8], start: usize, len: usize, value: bool) {
    let (mut i, end) = clamp(bm, start, len);
    while i < end {
        if i % 8 == 0 && end - i >= 8 {
            let bytes = (end - i) / 8;
            bm[i / 8..i / 8 + bytes].fill(if value { 0xFF } else { 0 });
            i += bytes * 8;
        } else {
            if value {
                bm[i / 8] |= 1 << (i % 8);
            } else {
                bm[i / 8] &= !(1 << (i % 8));
            }
            i += 1;
        }
    }
}

/// Set bits `start..start + len` (clamped to the slice).
pub fn set_range(bm: &mut [u8], start: usize, len: usize) {
    fill_range(bm, start, len, true);
}

/// Clear bits `start..start + len` (clamped to the slice).
pub fn clear_range(bm: &mut [u8], start: usize, len: usize) {
    fill_range(bm, start, len, false);
}

/// Number of set bits in `start..start + len` (clamped to the slice).
pub fn count_set_range(bm: &[u8], start: usize, len: usize) -> usize {
    let (mut i, end) = clamp(bm, start, len);
    let mut n = 0;
    while i < end {
        if i % 8 == 0 && end - i >= 8 {
            let bytes = (end - i) / 8;
            n += bm[i / 8..i / 8 + bytes].iter().map(|b| b.count_ones() as usize).sum::<usize>();
            i += bytes * 8;
        } else {
            n += (bm[i / 8] >> (i % 8) & 1) as usize;
            i += 1;
        }
    }
    n
}

/// Number of set bits among the first `nbits`.
pub fn count_set(bm: &[u8], nbits: usize) -> usize {
    count_set_range(bm, 0, nbits)
}

/// Number of clear bits among the first `nbits` (bits past the slice count as set).
pub fn count_zero(bm: &[u8], nbits: usize) -> usize {
    let n = nbits.min(bm.len() * 8);
    n - count_set(bm, n)
}

/// Whether all bits in `start..start + len` are clear (bits past the slice are set).
pub fn range_is_clear(bm: &[u8], start: usize, len: usize) -> bool {
    start.saturating_add(len) <= bm.len() * 8 && count_set_range(bm, start, len) == 0
}

/// Whether all bits in `start..start + len` are set (bits past the slice are set).
pub fn range_is_set(bm: &[u8], start: usize, len: usize) -> bool {
    let (s, e) = clamp(bm, start, len);
    count_set_range(bm, s, e - s) == e - s
}

/// First clear bit in `start..end` (end clamped to the slice).
pub fn find_zero(bm: &[u8], start: usize, end: usize) -> Option<usize> {
    let end = end.min(bm.len() * 8);
    let mut i = start;
    while i < end {
        if i.is_multiple_of(8) {
            // skip full bytes quickly
            let byte = bm[i / 8];
            if byte == 0xFF {
                i += 8;
                continue;
            }
            let bit = (!byte).trailing_zeros() as usize;
            return if i + bit < end { Some(i + bit) } else { None };
        }
        if bm[i / 8] & (1 << (i % 8)) == 0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// First set bit in `start..end` (end clamped to the slice).
pub fn find_set(bm: &[u8], start: usize, end: usize) -> Option<usize> {
    let end = end.min(bm.len() * 8);
    let mut i = start;
    while i < end {
        if i.is_multiple_of(8) {
            let byte = bm[i / 8];
            if byte == 0 {
                i += 8;
                continue;
            }
            let bit = byte.trailing_zeros() as usize;
            return if i + bit < end { Some(i + bit) } else { None };
        }
        if bm[i / 8] & (1 << (i % 8)) != 0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// First clear bit among the first `nbits`, searching from `goal` to the end and then
/// wrapping around to the start.
pub fn find_zero_from_goal(bm: &[u8], goal: usize, nbits: usize) -> Option<usize> {
    let goal = if goal >= nbits { 0 } else { goal };
    find_zero(bm, goal, nbits).or_else(|| find_zero(bm, 0, goal))
}

/// First run of `len` clear bits entirely within `start..end`.
pub fn find_zero_run(bm: &[u8], start: usize, end: usize, len: usize) -> Option<usize> {
    if len == 0 {
        return Some(start);
    }
    let end = end.min(bm.len() * 8);
    let mut i = start;
    while i + len <= end {
        let z = find_zero(bm, i, end)?;
        if z + len > end {
            return None;
        }
        match find_set(bm, z, z + len) {
            None => return Some(z),
            Some(s) => i = s + 1,
        }
    }
    None
}

/// Set the padding bits of a block bitmap: every bit from `group_blocks` (the number of
/// blocks in the group) to the end of the bitmap.
pub fn pad_block_bitmap(bm: &mut [u8], group_blocks: usize) {
    let n = bm.len() * 8;
    set_range(bm, group_blocks, n.saturating_sub(group_blocks));
}

/// Set the padding bits of an inode bitmap: every bit from `inodes_per_group` to the end.
pub fn pad_inode_bitmap(bm: &mut [u8], inodes_per_group: usize) {
    let n = bm.len() * 8;
    set_range(bm, inodes_per_group, n.saturating_sub(inodes_per_group));
}

/// Whether every bit from `valid_bits` to the end of the bitmap is set.
pub fn padding_ok(bm: &[u8], valid_bits: usize) -> bool {
    range_is_set(bm, valid_bits, (bm.len() * 8).saturating_sub(valid_bits))
}

/// The block bitmap of a group flagged `BLOCK_UNINIT` (only with `uninit_bg` or `metadata_csum`),
/// built like the kernel's `ext4_init_block_bitmap`: the superblock/GDT copy of the group,
/// the group's own bitmaps and inode table when they lie in it, and the padding.
pub fn uninit_block_bitmap(sb: &Superblock, gd: &GroupDesc, group: u32) -> Vec<u8> {
    let mut bm = vec![0u8; sb.block_size() as usize];
    let nblocks = sb.group_block_count(group) as usize;
    set_range(&mut bm, 0, sb.group_super_overhead(group) as usize);
    let start = sb.group_first_block(group);
    let end = start + nblocks as u64;
    let mut mark = |b: u64, len: u64| {
        let s = b.max(start);
        let e = (b.saturating_add(len)).min(end);
        if s < e {
            set_range(&mut bm, (s - start) as usize, (e - s) as usize);
        }
    };
    mark(gd.block_bitmap, 1);
    mark(gd.inode_bitmap, 1);
    mark(gd.inode_table, sb.inode_table_blocks() as u64);
    pad_block_bitmap(&mut bm, nblocks);
    bm
}

/// The inode bitmap of a group flagged `INODE_UNINIT`: no inode in use, padding set.
pub fn uninit_inode_bitmap(sb: &Superblock) -> Vec<u8> {
    let mut bm = vec![0u8; sb.block_size() as usize];
    pad_inode_bitmap(&mut bm, sb.inodes_per_group as usize);
    bm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        let mut bm = vec![0u8; 16];
        assert!(!set(&mut bm, 3));
        assert!(set(&mut bm, 3));
        assert!(test(&bm, 3));
        assert_eq!(bm[0], 8);
        set_range(&mut bm, 5, 20);
        assert_eq!(count_set(&bm, 128), 21);
        assert_eq!(find_zero(&bm, 0, 128), Some(0));
        assert_eq!(find_zero(&bm, 3, 128), Some(4));
        assert_eq!(find_zero(&bm, 5, 128), Some(25));
        assert_eq!(find_set(&bm, 26, 128), None);
        clear_range(&mut bm, 10, 3);
        assert_eq!(find_zero_run(&bm, 0, 128, 3), Some(0));
        assert_eq!(find_zero_run(&bm, 4, 128, 3), Some(10));
        assert_eq!(find_zero_run(&bm, 0, 128, 4), Some(25));
        assert_eq!(find_zero_from_goal(&bm, 100, 128), Some(100));
        set_range(&mut bm, 0, 128);
        assert_eq!(find_zero_from_goal(&bm, 100, 128), None);
        clear(&mut bm, 7);
        assert_eq!(find_zero_from_goal(&bm, 100, 128), Some(7));
        assert!(test(&bm, 1000));
    }

    #[test]
    fn padding() {
        let mut bm = vec![0u8; 4096];
        pad_inode_bitmap(&mut bm, 8192);
        assert!(padding_ok(&bm, 8192));
        assert!(!padding_ok(&bm, 8000));
        assert_eq!(count_set(&bm, 32768), 32768 - 8192);
    }
}
