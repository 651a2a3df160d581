//! Linear directory blocks made of `ext4_dir_entry_2` records: inode (u32), rec_len (u16),
//! name_len (u8), file_type (u8), name (padded to 4 bytes). A block is a chain of records
//! whose `rec_len`s add up exactly to the block size; a record with inode 0 is unused.
//!
//! Pure functions over a block's bytes. The block length is whatever slice is passed (4096
//! in cjfs); `rec_len` is stored as is (no 64 KiB encoding).
//!
//! With `metadata_csum` a leaf block ends with a 12-byte checksum record
//! (`ext4_dir_entry_tail`): inode 0, rec_len 12, name_len 0, file_type 0xDE, then the
//! CRC32C from the directory inode's seed over the block before it. The entries then fill
//! only the first `block size - 12` bytes: callers pass that slice to the functions here
//! and finish the block with [`set_leaf_checksum`].

use cjfs_blockdev::zeroed_block;

use crate::error::{FsError, FsResult};
use crate::ondisk::csum::crc32c;
use crate::ondisk::inode::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use crate::ondisk::superblock::{get_u16, get_u32, put_u16, put_u32};

/// Size of the fixed part of a record.
pub const DIRENT_HEADER: usize = 8;
/// Longest name.
pub const NAME_MAX: usize = 255;
/// Smallest valid record (`rec_len_for(1)`).
pub const MIN_REC_LEN: usize = 12;

/// `inode` (u32).
pub const DE_INODE: usize = 0;
/// `rec_len` (u16).
pub const DE_REC_LEN: usize = 4;
/// `name_len` (u8).
pub const DE_NAME_LEN: usize = 6;
/// `file_type` (u8).
pub const DE_FILE_TYPE: usize = 7;
/// `name`.
pub const DE_NAME: usize = 8;

/// File type: unknown.
pub const FT_UNKNOWN: u8 = 0;
/// File type: regular file.
pub const FT_REG_FILE: u8 = 1;
/// File type: directory.
pub const FT_DIR: u8 = 2;
/// File type: character device.
pub const FT_CHRDEV: u8 = 3;
/// File type: block device.
pub const FT_BLKDEV: u8 = 4;
/// File type: FIFO.
pub const FT_FIFO: u8 = 5;
/// File type: socket.
pub const FT_SOCK: u8 = 6;
/// File type: symbolic link.
pub const FT_SYMLINK: u8 = 7;
/// One past the largest valid file type.
pub const FT_MAX: u8 = 8;

/// Record length needed for a name of `name_len` bytes: `8 + name_len` rounded up to 4.
pub const fn rec_len_for(name_len: usize) -> usize {
    (DIRENT_HEADER + name_len + 3) & !3
}

/// Directory entry file type for an inode mode.
pub fn file_type_from_mode(mode: u16) -> u8 {
    match mode & S_IFMT {
        S_IFREG => FT_REG_FILE,
        S_IFDIR => FT_DIR,
        S_IFCHR => FT_CHRDEV,
        S_IFBLK => FT_BLKDEV,
        S_IFIFO => FT_FIFO,
        S_IFSOCK => FT_SOCK,
        S_IFLNK => FT_SYMLINK,
        _ => FT_UNKNOWN,
    }
}

/// One record of a directory block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// Byte offset of the record in the block.
    pub offset: usize,
    /// Inode number (0: unused record).
    pub inode: u32,
    /// Record length.
    pub rec_len: usize,
    /// The name (`name_len` bytes).
    pub name: &'a [u8],
    /// File type code (`FT_*`).
    pub file_type: u8,
}

impl DirEntry<'_> {
    /// Whether the record is in use.
    pub fn is_live(&self) -> bool {
        self.inode != 0
    }
    /// Bytes the record needs for its name (0 if unused: the whole record is free).
    pub fn used_len(&self) -> usize {
        if self.inode == 0 { 0 } else { rec_len_for(self.name.len()) }
    }
    /// Free bytes in the record that a new entry could take.
    pub fn free_len(&self) -> usize {
        self.rec_len - self.used_len()
    }
}

/// Iterator over every record of a block, unused ones included. Yields
/// [`FsError::Corrupt`] (and then stops) on a bad record: `rec_len` below 12, not a multiple
/// of 4, too small for `name_len`, running past the block, a live record with an empty
/// name, or an inode number above the limit given to [`DirIter::with_max_inode`].
pub struct DirIter<'a> {
    block: &'a [u8],
    off: usize,
    done: bool,
    max_ino: u32,
}

impl<'a> DirIter<'a> {
    /// Iterate over `block`.
    pub fn new(block: &'a [u8]) -> Self {
        DirIter { block, off: 0, done: block.is_empty(), max_ino: u32::MAX }
    }
    /// Also reject inode numbers above `max` (use `s_inodes_count`).
    pub fn with_max_inode(mut self, max: u32) -> Self {
        self.max_ino = max;
        self
    }
}

/// Parse the record at `off` of `block`.
pub fn entry_at(block: &[u8], off: usize, max_ino: u32) -> FsResult<DirEntry<'_>> {
    let bad = |what: String| Err(FsError::Corrupt(format!("directory entry at offset {off}: {what}")));
    if off + DIRENT_HEADER > block.len() {
        return bad(format!("header passes the end of the {}-byte block", block.len()));
    }
    let inode = get_u32(block, off + DE_INODE);
    let rec_len = get_u16(block, off + DE_REC_LEN) as usize;
    let name_len = block[off + DE_NAME_LEN] as usize;
    let file_type = block[off + DE_FILE_TYPE];
    if rec_len < MIN_REC_LEN {
        return bad(format!("rec_len = {rec_len} (smaller than {MIN_REC_LEN})"));
    }
    if !rec_len.is_multiple_of(4) {
        return bad(format!("rec_len = {rec_len} (not a multiple of 4)"));
    }
    if rec_len < rec_len_for(name_len) {
        return bad(format!("rec_len = {rec_len} too small for name_len = {name_len}"));
    }
    if off + rec_len > block.len() {
        return bad(format!("rec_len = {rec_len} runs past the end of the {}-byte block", block.len()));
    }
    if inode != 0 && name_len == 0 {
        return bad(format!("inode = {inode} with name_len = 0"));
    }
    if inode > max_ino {
        return bad(format!("inode = {inode} (above the {max_ino} inodes of the file system)"));
    }
    Ok(DirEntry {
        offset: off,
        inode,
        rec_len,
        name: &block[off + DE_NAME..off + DE_NAME + name_len],
        file_type,
    })
}

impl<'a> Iterator for DirIter<'a> {
    type Item = FsResult<DirEntry<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.off >= self.block.len() {
            return None;
        }
        match entry_at(self.block, self.off, self.max_ino) {
            Ok(e) => {
                self.off += e.rec_len;
                Some(Ok(e))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Iterate over the records of `block` (see [`DirIter`]).
pub fn iter(block: &[u8]) -> DirIter<'_> {
    DirIter::new(block)
}

/// Check every record of `block`.
pub fn validate_block(block: &[u8], max_ino: u32) -> FsResult<()> {
    for e in DirIter::new(block).with_max_inode(max_ino) {
        e?;
    }
    Ok(())
}

/// The live entry named `name`, if any.
pub fn find<'a>(block: &'a [u8], name: &[u8]) -> FsResult<Option<DirEntry<'a>>> {
    for e in iter(block) {
        let e = e?;
        if e.inode != 0 && e.name == name {
            return Ok(Some(e));
        }
    }
    Ok(None)
}

/// Offset of a record where an entry with a `name_len`-byte name fits: an unused record
/// large enough, or a live record with enough slack after its name. `None` if the block
/// is full.
pub fn find_space(block: &[u8], name_len: usize) -> FsResult<Option<usize>> {
    let need = rec_len_for(name_len);
    for e in iter(block) {
        let e = e?;
        if e.free_len() >= need {
            return Ok(Some(e.offset));
        }
    }
    Ok(None)
}

fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() {
        return Err(FsError::Invalid("empty directory entry name".into()));
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong(format!("{} bytes (at most {NAME_MAX})", name.len())));
    }
    Ok(())
}

fn write_entry(block: &mut [u8], off: usize, ino: u32, rec_len: usize, name: &[u8], ft: u8) {
    put_u32(block, off + DE_INODE, ino);
    put_u16(block, off + DE_REC_LEN, rec_len as u16);
    block[off + DE_NAME_LEN] = name.len() as u8;
    block[off + DE_FILE_TYPE] = ft;
    block[off + DE_NAME..off + DE_NAME + name.len()].copy_from_slice(name);
    // zero the padding after the name
    let end = off + rec_len_for(name.len());
    block[off + DE_NAME + name.len()..end].fill(0);
}

/// Insert entry (`ino`, `name`, `ftype`) into the record at `offset` (as returned by
/// [`find_space`]): an unused record is taken whole; a live record is shrunk to its name
/// and the new entry takes the rest.
pub fn insert(block: &mut [u8], offset: usize, ino: u32, name: &[u8], ftype: u8) -> FsResult<()> {
    check_name(name)?;
    if ino == 0 {
        return Err(FsError::Invalid("directory entry with inode 0".into()));
    }
    let e = entry_at(block, offset, u32::MAX)?;
    let need = rec_len_for(name.len());
    if e.free_len() < need {
        return Err(FsError::NoSpace(format!(
            "directory record at offset {offset} has {} free bytes, {need} needed",
            e.free_len()
        )));
    }
    if e.inode == 0 {
        let rec_len = e.rec_len;
        write_entry(block, offset, ino, rec_len, name, ftype);
    } else {
        let used = e.used_len();
        let rest = e.rec_len - used;
        put_u16(block, offset + DE_REC_LEN, used as u16);
        write_entry(block, offset + used, ino, rest, name, ftype);
    }
    Ok(())
}

/// Remove the live entry named `name`: its record is merged into the previous record, or,
/// if it is the first of the block, marked unused (inode 0). Returns whether it was found.
pub fn remove(block: &mut [u8], name: &[u8]) -> FsResult<bool> {
    let mut prev: Option<(usize, usize)> = None;
    let mut hit: Option<(usize, usize)> = None;
    for e in iter(block) {
        let e = e?;
        if e.inode != 0 && e.name == name {
            hit = Some((e.offset, e.rec_len));
            break;
        }
        prev = Some((e.offset, e.rec_len));
    }
    let Some((off, rec_len)) = hit else {
        return Ok(false);
    };
    match prev {
        Some((poff, plen)) => put_u16(block, poff + DE_REC_LEN, (plen + rec_len) as u16),
        None => put_u32(block, off + DE_INODE, 0),
    }
    Ok(true)
}

/// Point the live entry named `name` at inode `ino` with type `ftype` (rename over an
/// existing name, or `..` of a moved directory). Returns the previous inode, if found.
pub fn set_inode(block: &mut [u8], name: &[u8], ino: u32, ftype: u8) -> FsResult<Option<u32>> {
    let found = find(block, name)?.map(|e| (e.offset, e.inode));
    if let Some((off, old)) = found {
        put_u32(block, off + DE_INODE, ino);
        block[off + DE_FILE_TYPE] = ftype;
        return Ok(Some(old));
    }
    Ok(None)
}

/// Fill `block` with `entries` (inode, name, type) packed from the start, the last record
/// taking the rest of the block; no entries gives one unused record covering the block.
pub fn init_block(block: &mut [u8], entries: &[(u32, &[u8], u8)]) -> FsResult<()> {
    let total: usize = entries.iter().map(|(_, n, _)| rec_len_for(n.len())).sum();
    if total > block.len() || block.len() < MIN_REC_LEN || block.len() > u16::MAX as usize {
        return Err(FsError::NoSpace(format!(
            "{} directory entries need {total} bytes, the block has {}",
            entries.len(),
            block.len()
        )));
    }
    block.fill(0);
    if entries.is_empty() {
        put_u16(block, DE_REC_LEN, block.len() as u16);
        return Ok(());
    }
    let mut off = 0;
    for (i, (ino, name, ft)) in entries.iter().enumerate() {
        check_name(name)?;
        let len = if i + 1 == entries.len() { block.len() - off } else { rec_len_for(name.len()) };
        write_entry(block, off, *ino, len, name, *ft);
        off += len;
    }
    Ok(())
}

/// Give the last record of the chain filling the start of `block` the rest of `block` (the
/// chain's records are valid and end before `block` does; the bytes after it are zero).
pub fn extend_last(block: &mut [u8]) -> FsResult<()> {
    let mut last = None;
    let mut off = 0;
    while off + MIN_REC_LEN <= block.len() {
        let rec_len = usize::from(get_u16(block, off + DE_REC_LEN));
        if rec_len == 0 {
            break;
        }
        last = Some(off);
        off += rec_len;
    }
    let Some(last) = last else {
        return Err(FsError::Corrupt("directory records: none to extend".into()));
    };
    if off > block.len() {
        return Err(FsError::Corrupt(format!("directory record at {last} runs past the block")));
    }
    put_u16(block, last + DE_REC_LEN, (block.len() - last) as u16);
    Ok(())
}

/// First block of a new directory: `.` (`self_ino`, rec_len 12) and `..` (`parent_ino`,
/// taking the rest of the `block_size`-byte block).
pub fn make_dot_block(self_ino: u32, parent_ino: u32, block_size: usize) -> Box<[u8]> {
    let mut b = zeroed_block(block_size);
    write_entry(&mut b[..], 0, self_ino, 12, b".", FT_DIR);
    write_entry(&mut b[..], 12, parent_ino, block_size - 12, b"..", FT_DIR);
    b
}

/// An empty directory block (one unused record covering it), as used for extra
/// directory blocks (e.g. lost+found's).
pub fn make_empty_block(block_size: usize) -> Box<[u8]> {
    let mut b = zeroed_block(block_size);
    put_u16(&mut b[..], DE_REC_LEN, block_size as u16);
    b
}

/// Size of the checksum record at the end of a leaf block.
pub const TAIL_SIZE: usize = 12;
/// `det_reserved_ft` of the checksum record.
pub const FT_DIR_CSUM: u8 = 0xDE;

/// Whether the last 12 bytes of `block` are a checksum record.
pub fn has_tail(block: &[u8]) -> bool {
    if block.len() < TAIL_SIZE {
        return false;
    }
    let t = block.len() - TAIL_SIZE;
    get_u32(block, t) == 0
        && get_u16(block, t + DE_REC_LEN) as usize == TAIL_SIZE
        && block[t + DE_NAME_LEN] == 0
        && block[t + DE_FILE_TYPE] == FT_DIR_CSUM
}

/// Checksum of leaf `block` with directory seed `seed`: over everything before the tail.
pub fn leaf_checksum(seed: u32, block: &[u8]) -> u32 {
    crc32c(seed, &block[..block.len().saturating_sub(TAIL_SIZE)])
}

/// Write the checksum record at the end of leaf `block` (whose entries end `TAIL_SIZE`
/// bytes before the end) with its checksum.
pub fn set_leaf_checksum(seed: u32, block: &mut [u8]) {
    let t = block.len() - TAIL_SIZE;
    put_u32(block, t, 0);
    put_u16(block, t + DE_REC_LEN, TAIL_SIZE as u16);
    block[t + DE_NAME_LEN] = 0;
    block[t + DE_FILE_TYPE] = FT_DIR_CSUM;
    let c = leaf_checksum(seed, block);
    put_u32(block, t + 8, c);
}

/// Check leaf `block`'s checksum record: `Err(None)` if it has none, `Err(Some((stored,
/// computed)))` on a mismatch.
pub fn verify_leaf_checksum(seed: u32, block: &[u8]) -> Result<(), Option<(u32, u32)>> {
    if !has_tail(block) {
        return Err(None);
    }
    let stored = get_u32(block, block.len() - 4);
    let computed = leaf_checksum(seed, block);
    if stored != computed { Err(Some((stored, computed))) } else { Ok(()) }
}

/// Whether `block` looks like an htree interior (`dx_node`) block: a fake record with
/// inode 0, `rec_len` = the block size and no name, followed by a count/limit header whose
/// limit is `(block size - 8) / 8` and whose count is 1..=limit. (An empty linear block
/// has the same fake record but no such header; only the htree knows for sure.)
pub fn is_dx_node_block(block: &[u8]) -> bool {
    if block.len() < 16 || block.len() > u16::MAX as usize {
        return false;
    }
    let limit = get_u16(block, 8) as usize;
    let count = get_u16(block, 10) as usize;
    get_u32(block, DE_INODE) == 0
        && get_u16(block, DE_REC_LEN) as usize == block.len()
        && block[DE_NAME_LEN] == 0
        && limit == (block.len() - 8) / 8
        && (1..=limit).contains(&count)
}

/// Whether a directory block has no live entries other than `.` and `..`.
pub fn is_empty_dir_block(block: &[u8]) -> FsResult<bool> {
    for e in iter(block) {
        let e = e?;
        if e.inode != 0 && e.name != b"." && e.name != b".." {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;
    use super::*;

    fn names(b: &[u8]) -> Vec<(u32, Vec<u8>)> {
        iter(b).map(|e| e.unwrap()).filter(|e| e.inode != 0).map(|e| (e.inode, e.name.to_vec())).collect()
    }

    #[test]
    fn dot_block_insert_remove() {
        let mut b = make_dot_block(12, 2, BLOCK_SIZE);
        assert_eq!(names(&b[..]), vec![(12, b".".to_vec()), (2, b"..".to_vec())]);
        let off = find_space(&b[..], 3).unwrap().unwrap();
        assert_eq!(off, 12);
        insert(&mut b[..], off, 20, b"abc", FT_REG_FILE).unwrap();
        let off = find_space(&b[..], 5).unwrap().unwrap();
        insert(&mut b[..], off, 21, b"defgh", FT_DIR).unwrap();
        assert_eq!(names(&b[..]).len(), 4);
        assert_eq!(find(&b[..], b"abc").unwrap().unwrap().inode, 20);
        validate_block(&b[..], 100).unwrap();
        assert!(remove(&mut b[..], b"abc").unwrap());
        assert!(!remove(&mut b[..], b"abc").unwrap());
        assert_eq!(find(&b[..], b"defgh").unwrap().unwrap().inode, 21);
        assert!(remove(&mut b[..], b".").unwrap());
        assert_eq!(entry_at(&b[..], 0, u32::MAX).unwrap().inode, 0);
        // the removed first record is reused
        assert_eq!(find_space(&b[..], 1).unwrap(), Some(0));
        validate_block(&b[..], 100).unwrap();
    }

    #[test]
    fn fill_block_until_full() {
        let mut b = make_empty_block(BLOCK_SIZE);
        let mut n = 0u32;
        loop {
            let name = format!("file-{n:05}");
            match find_space(&b[..], name.len()).unwrap() {
                Some(off) => insert(&mut b[..], off, n + 1, name.as_bytes(), FT_REG_FILE).unwrap(),
                None => break,
            }
            n += 1;
        }
        assert_eq!(n as usize, BLOCK_SIZE / rec_len_for(10));
        assert_eq!(names(&b[..]).len(), n as usize);
    }

    #[test]
    fn corrupt_records() {
        let mut b = make_dot_block(2, 2, BLOCK_SIZE);
        put_u16(&mut b[..], 12 + DE_REC_LEN, 4000);
        assert!(validate_block(&b[..], 100).is_err());
        let mut b = make_dot_block(2, 2, BLOCK_SIZE);
        put_u16(&mut b[..], DE_REC_LEN, 10);
        assert!(validate_block(&b[..], 100).is_err());
        let b = make_dot_block(2, 200, BLOCK_SIZE);
        assert!(validate_block(&b[..], 100).is_err());
        assert!(!is_dx_node_block(&make_empty_block(BLOCK_SIZE)[..]));
    }

    #[test]
    fn init_block_entries() {
        let mut b = zeroed_block(BLOCK_SIZE);
        init_block(&mut b[..], &[(2, b".", FT_DIR), (2, b"..", FT_DIR), (11, b"lost+found", FT_DIR)])
            .unwrap();
        let v: Vec<_> = iter(&b[..]).map(|e| e.unwrap().rec_len).collect();
        assert_eq!(v, vec![12, 12, BLOCK_SIZE - 24]);
    }
}
