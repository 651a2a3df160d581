//! The common JBD2 block header and descriptor blocks (`JBD2_DESCRIPTOR_BLOCK`).
//!
//! Every journal metadata block starts with a 12-byte `journal_header_t`
//! (`h_magic`, `h_blocktype`, `h_sequence`, big-endian). A descriptor block follows it with
//! tags, one per logged block; the logged blocks follow the descriptor in the log, in tag
//! order. Tag layouts (`journal_tag_bytes()`):
//!
//! * csum v3 (`journal_block_tag3_t`, 16 bytes): `t_blocknr` be32 @0, `t_flags` be32 @4,
//!   `t_blocknr_high` be32 @8, `t_checksum` be32 @12.
//! * otherwise (`journal_block_tag_t`): `t_blocknr` be32 @0, `t_checksum` be16 @4 (csum v2
//!   only), `t_flags` be16 @6, `t_blocknr_high` be32 @8 (64-bit only); 8 bytes, +4 with
//!   64-bit, +2 with csum v2.
//!
//! JBD2's replay code reads the flags of both layouts as the big-endian 16-bit word at
//! offset 6 (the low half of the v3 32-bit flags), and so does [`parse_tags`].
//! A 16-byte UUID follows every tag without [`TAG_FLAG_SAME_UUID`] (the writer puts it after
//! the first tag only); the last tag carries [`TAG_FLAG_LAST_TAG`]. With csum v2/v3 the
//! block ends with a 4-byte tail (`jbd2_journal_block_tail`) holding the block's checksum.

use cjfs_blockdev::valid_block_size;

use crate::checksum::{block_tag_csum, block_tail_csum, csum_seed};
use crate::error::{JResult, JournalError};
use crate::superblock::JournalFeatures;

/// `JBD2_MAGIC_NUMBER`, the first 4 bytes of every journal metadata block.
pub const JBD2_MAGIC: u32 = 0xC03B_3998;
/// Size of `journal_header_t`.
pub const HEADER_SIZE: usize = 12;
/// Offset of `h_magic`.
pub const H_MAGIC_OFFSET: usize = 0;
/// Offset of `h_blocktype`.
pub const H_BLOCKTYPE_OFFSET: usize = 4;
/// Offset of `h_sequence`.
pub const H_SEQUENCE_OFFSET: usize = 8;

/// `JBD2_DESCRIPTOR_BLOCK`.
pub const BLOCKTYPE_DESCRIPTOR: u32 = 1;
/// `JBD2_COMMIT_BLOCK`.
pub const BLOCKTYPE_COMMIT: u32 = 2;
/// `JBD2_SUPERBLOCK_V1`.
pub const BLOCKTYPE_SB_V1: u32 = 3;
/// `JBD2_SUPERBLOCK_V2`.
pub const BLOCKTYPE_SB_V2: u32 = 4;
/// `JBD2_REVOKE_BLOCK`.
pub const BLOCKTYPE_REVOKE: u32 = 5;
/// `JBD2_FC_BLOCK` (fast commit).
pub const BLOCKTYPE_FC: u32 = 6;

/// `JBD2_FLAG_ESCAPE`: the logged block's first 4 bytes were the magic and were zeroed.
pub const TAG_FLAG_ESCAPE: u16 = 1;
/// `JBD2_FLAG_SAME_UUID`: no UUID follows this tag.
pub const TAG_FLAG_SAME_UUID: u16 = 2;
/// `JBD2_FLAG_DELETED`: block deleted by this transaction (unused by JBD2 replay).
pub const TAG_FLAG_DELETED: u16 = 4;
/// `JBD2_FLAG_LAST_TAG`: last tag of the descriptor.
pub const TAG_FLAG_LAST_TAG: u16 = 8;

/// Size of `journal_block_tag3_t`.
pub const TAG3_BYTES: usize = 16;
/// Size of `journal_block_tag_t` (with `t_blocknr_high`, without the csum-v2 extra).
pub const TAG_BYTES_BASE: usize = 12;
/// Offset of `t_blocknr` in both tag layouts.
pub const TAG_BLOCKNR_OFFSET: usize = 0;
/// Offset of the 16-bit `t_checksum` in `journal_block_tag_t`.
pub const TAG_CSUM16_OFFSET: usize = 4;
/// Offset of the 32-bit `t_flags` in `journal_block_tag3_t`.
pub const TAG3_FLAGS_OFFSET: usize = 4;
/// Offset of the 16-bit flags word as JBD2 reads it (both layouts).
pub const TAG_FLAGS16_OFFSET: usize = 6;
/// Offset of `t_blocknr_high` in both tag layouts.
pub const TAG_BLOCKNR_HIGH_OFFSET: usize = 8;
/// Offset of the 32-bit `t_checksum` in `journal_block_tag3_t`.
pub const TAG3_CSUM_OFFSET: usize = 12;
/// Size of the UUID following a tag without [`TAG_FLAG_SAME_UUID`].
pub const TAG_UUID_SIZE: usize = 16;
/// Size of `jbd2_journal_block_tail` (the checksum at the end of descriptor/revoke blocks).
pub const BLOCK_TAIL_SIZE: usize = 4;

/// Big-endian u16 at `off` (0 if out of bounds; callers check lengths first).
pub(crate) fn rd_be16(b: &[u8], off: usize) -> u16 {
    match b.get(off..off + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Big-endian u32 at `off` (0 if out of bounds; callers check lengths first).
pub(crate) fn rd_be32(b: &[u8], off: usize) -> u32 {
    match b.get(off..off + 4) {
        Some(s) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

/// Big-endian u64 at `off` (0 if out of bounds; callers check lengths first).
pub(crate) fn rd_be64(b: &[u8], off: usize) -> u64 {
    (u64::from(rd_be32(b, off)) << 32) | u64::from(rd_be32(b, off + 4))
}

/// Store a big-endian u16 at `off`.
pub(crate) fn wr_be16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Store a big-endian u32 at `off`.
pub(crate) fn wr_be32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Store a big-endian u64 at `off`.
pub(crate) fn wr_be64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Check that `block` is one whole journal block (1, 2 or 4 KiB).
pub(crate) fn check_block_len(block: &[u8], what: &str) -> JResult<()> {
    if !valid_block_size(block.len()) {
        return Err(JournalError::Corrupt(format!(
            "{what}: buffer is {} bytes, not a journal block of 1024, 2048 or 4096",
            block.len()
        )));
    }
    Ok(())
}

/// `journal_header_t`: the 12 bytes at the start of every journal metadata block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// `h_magic` ([`JBD2_MAGIC`] for a journal block).
    pub magic: u32,
    /// `h_blocktype` (`BLOCKTYPE_*`).
    pub blocktype: u32,
    /// `h_sequence`: the transaction id the block belongs to.
    pub sequence: u32,
}

impl BlockHeader {
    /// A header with the JBD2 magic.
    pub const fn new(blocktype: u32, sequence: u32) -> Self {
        BlockHeader { magic: JBD2_MAGIC, blocktype, sequence }
    }

    /// Decode the first 12 bytes of `buf` (no validation beyond the length).
    pub fn decode(buf: &[u8]) -> JResult<Self> {
        if buf.len() < HEADER_SIZE {
            return Err(JournalError::Corrupt(format!(
                "journal block header: buffer of {} bytes is shorter than {HEADER_SIZE}",
                buf.len()
            )));
        }
        Ok(BlockHeader {
            magic: rd_be32(buf, H_MAGIC_OFFSET),
            blocktype: rd_be32(buf, H_BLOCKTYPE_OFFSET),
            sequence: rd_be32(buf, H_SEQUENCE_OFFSET),
        })
    }

    /// Write the header into the first 12 bytes of `buf`.
    pub fn encode_into(&self, buf: &mut [u8]) {
        wr_be32(buf, H_MAGIC_OFFSET, self.magic);
        wr_be32(buf, H_BLOCKTYPE_OFFSET, self.blocktype);
        wr_be32(buf, H_SEQUENCE_OFFSET, self.sequence);
    }

    /// True if the magic is [`JBD2_MAGIC`].
    pub fn has_magic(&self) -> bool {
        self.magic == JBD2_MAGIC
    }

    /// Decode and require the magic, `blocktype` and (if given) `sequence`.
    pub fn expect(buf: &[u8], what: &str, blocktype: u32, sequence: Option<u32>) -> JResult<Self> {
        let h = Self::decode(buf)?;
        if !h.has_magic() {
            return Err(JournalError::Corrupt(format!(
                "{what}: h_magic 0x{:08x} is not the JBD2 magic",
                h.magic
            )));
        }
        if h.blocktype != blocktype {
            return Err(JournalError::Corrupt(format!(
                "{what}: h_blocktype {} (expected {blocktype})",
                h.blocktype
            )));
        }
        match sequence {
            Some(seq) if h.sequence != seq => {
                return Err(JournalError::Corrupt(format!(
                    "{what}: h_sequence {} (expected {seq})",
                    h.sequence
                )));
            }
            _ => {}
        }
        Ok(h)
    }
}

/// Verify the tail checksum of a descriptor or revoke block (always true without csum
/// v2/v3), like `jbd2_descriptor_block_csum_verify`.
pub fn verify_block_tail(block: &[u8], features: &JournalFeatures, seed: u32) -> bool {
    if !features.csum_v2or3() {
        return true;
    }
    if block.len() < BLOCK_TAIL_SIZE {
        return false;
    }
    let stored = rd_be32(block, block.len() - BLOCK_TAIL_SIZE);
    stored == block_tail_csum(seed, block)
}

/// Store the tail checksum of a descriptor or revoke block (no-op without csum v2/v3), like
/// `jbd2_descriptor_block_csum_set`.
pub fn set_block_tail(block: &mut [u8], features: &JournalFeatures, seed: u32) {
    if !features.csum_v2or3() || block.len() < BLOCK_TAIL_SIZE {
        return;
    }
    let off = block.len() - BLOCK_TAIL_SIZE;
    let csum = block_tail_csum(seed, block);
    wr_be32(block, off, csum);
}

/// One descriptor tag: where a logged block goes home, and how it was logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// Home block number on the file system device.
    pub blocknr: u64,
    /// `TAG_FLAG_*` bits. [`DescriptorBuilder`] manages `SAME_UUID` and `LAST_TAG` itself;
    /// callers set only [`TAG_FLAG_ESCAPE`] (and rarely [`TAG_FLAG_DELETED`]).
    pub flags: u16,
    /// Checksum of the logged block ([`block_tag_csum`]): 32 bits with csum v3, the low 16
    /// with csum v2, unused otherwise.
    pub checksum: u32,
}

impl Tag {
    /// True if the logged copy was escaped.
    pub fn escaped(&self) -> bool {
        self.flags & TAG_FLAG_ESCAPE != 0
    }

    /// Verify the checksum of the logged copy `data` (as read from the log, still escaped) of
    /// a block of transaction `sequence`, like `jbd2_block_tag_csum_verify` (true without
    /// csum v2/v3).
    pub fn verify(&self, data: &[u8], sequence: u32, features: &JournalFeatures, seed: u32) -> bool {
        if !features.csum_v2or3() {
            return true;
        }
        let csum = block_tag_csum(seed, sequence, data);
        if features.csum_v3() { self.checksum == csum } else { self.checksum & 0xFFFF == csum & 0xFFFF }
    }
}

/// Prepare a block for logging in transaction `sequence`: escape `data` in place (if its
/// first 4 bytes are the magic) and return its tag. The checksum covers the block as
/// written to the log, i.e. after escaping, exactly as `jbd2_block_tag_csum_set` computes it
/// over the escaped copy that `jbd2_journal_write_metadata_buffer` produced.
pub fn make_tag(home: u64, data: &mut [u8], sequence: u32, features: &JournalFeatures, seed: u32) -> Tag {
    let flags = if escape(data) { TAG_FLAG_ESCAPE } else { 0 };
    let checksum = tag_checksum(data, sequence, features, seed);
    Tag { blocknr: home, flags, checksum }
}

/// The value to store in a tag's checksum field for the logged copy `data` (as written to
/// the log, i.e. already escaped) of a block of transaction `sequence`: all 32 bits of
/// [`block_tag_csum`] with csum v3, the low 16 with csum v2, 0 otherwise.
pub fn tag_checksum(data: &[u8], sequence: u32, features: &JournalFeatures, seed: u32) -> u32 {
    if !features.csum_v2or3() {
        return 0;
    }
    let c = block_tag_csum(seed, sequence, data);
    if features.csum_v3() { c } else { c & 0xFFFF }
}

/// Escape a block about to be logged: if it starts with the JBD2 magic (big-endian), zero
/// those 4 bytes and return true (the tag must then carry [`TAG_FLAG_ESCAPE`]).
pub fn escape(data: &mut [u8]) -> bool {
    if data.len() >= 4 && rd_be32(data, 0) == JBD2_MAGIC {
        data[..4].fill(0);
        true
    } else {
        false
    }
}

/// Undo [`escape`]: put the magic back in the first 4 bytes of a logged block whose tag
/// carries [`TAG_FLAG_ESCAPE`].
pub fn unescape(data: &mut [u8]) {
    if data.len() >= 4 {
        wr_be32(data, 0, JBD2_MAGIC);
    }
}

/// Encode `tag` with `flags` at `off` in `block` per the features' layout.
fn write_tag(block: &mut [u8], off: usize, tag: &Tag, flags: u16, features: &JournalFeatures) {
    wr_be32(block, off + TAG_BLOCKNR_OFFSET, tag.blocknr as u32);
    if features.csum_v3() {
        wr_be32(block, off + TAG3_FLAGS_OFFSET, u32::from(flags));
        if features.has_64bit() {
            wr_be32(block, off + TAG_BLOCKNR_HIGH_OFFSET, (tag.blocknr >> 32) as u32);
        }
        wr_be32(block, off + TAG3_CSUM_OFFSET, tag.checksum);
    } else {
        if features.csum_v2() {
            wr_be16(block, off + TAG_CSUM16_OFFSET, tag.checksum as u16);
        }
        wr_be16(block, off + TAG_FLAGS16_OFFSET, flags);
        if features.has_64bit() {
            wr_be32(block, off + TAG_BLOCKNR_HIGH_OFFSET, (tag.blocknr >> 32) as u32);
        }
    }
}

/// Decode the tag at `off` (which must leave room for `tag_bytes`).
fn read_tag(block: &[u8], off: usize, features: &JournalFeatures) -> Tag {
    let mut blocknr = u64::from(rd_be32(block, off + TAG_BLOCKNR_OFFSET));
    if features.has_64bit() {
        blocknr |= u64::from(rd_be32(block, off + TAG_BLOCKNR_HIGH_OFFSET)) << 32;
    }
    let flags = rd_be16(block, off + TAG_FLAGS16_OFFSET);
    let checksum = if features.csum_v3() {
        rd_be32(block, off + TAG3_CSUM_OFFSET)
    } else if features.csum_v2() {
        u32::from(rd_be16(block, off + TAG_CSUM16_OFFSET))
    } else {
        0
    };
    Tag { blocknr, flags, checksum }
}

/// The tags of a descriptor block, walked exactly as JBD2's `count_tags()` and replay loop
/// do: while a whole tag fits before the tail, take it, skip the UUID unless `SAME_UUID`,
/// and stop after `LAST_TAG`. Neither the header nor the tail checksum is checked.
pub fn parse_tags(block: &[u8], features: &JournalFeatures) -> Vec<Tag> {
    let tag_bytes = features.tag_bytes();
    let size = block.len().saturating_sub(features.tail_size());
    let mut off = HEADER_SIZE;
    let mut tags = Vec::new();
    while off + tag_bytes <= size {
        let tag = read_tag(block, off, features);
        tags.push(tag);
        off += tag_bytes;
        if tag.flags & TAG_FLAG_SAME_UUID == 0 {
            off += TAG_UUID_SIZE;
        }
        if tag.flags & TAG_FLAG_LAST_TAG != 0 {
            break;
        }
    }
    tags
}

/// Decode a descriptor block: checks the header (magic, descriptor block type) and, with
/// csum v2/v3, the tail checksum, then returns its tags ([`parse_tags`]).
pub fn parse_descriptor(block: &[u8], features: &JournalFeatures, csum_seed: u32) -> JResult<Vec<Tag>> {
    check_block_len(block, "descriptor block")?;
    let h = BlockHeader::expect(block, "descriptor block", BLOCKTYPE_DESCRIPTOR, None)?;
    if !verify_block_tail(block, features, csum_seed) {
        return Err(JournalError::Corrupt(format!(
            "descriptor block of transaction {}: tail checksum 0x{:08x} does not match computed 0x{:08x}",
            h.sequence,
            rd_be32(block, block.len() - BLOCK_TAIL_SIZE),
            block_tail_csum(csum_seed, block)
        )));
    }
    Ok(parse_tags(block, features))
}

/// Packs the tags of one transaction into a descriptor block.
///
/// The first tag is followed by the journal UUID; later tags carry
/// [`TAG_FLAG_SAME_UUID`]. [`DescriptorBuilder::finish`] sets [`TAG_FLAG_LAST_TAG`] on the
/// last tag and the tail checksum. The block is filled to its real capacity (JBD2's own
/// writer stops one tag earlier, keeping room for a second UUID; both are valid).
#[derive(Debug, Clone)]
pub struct DescriptorBuilder {
    block: Box<[u8]>,
    features: JournalFeatures,
    uuid: [u8; 16],
    seed: u32,
    /// Offset of the next tag.
    off: usize,
    /// Offset of the last tag written, with its flags.
    last: Option<(usize, Tag)>,
    count: usize,
}

impl DescriptorBuilder {
    /// An empty descriptor for transaction `sequence` of a journal with `features` and
    /// `uuid` (the journal superblock's `s_uuid`), in blocks of `block_size` bytes.
    pub fn new(sequence: u32, features: JournalFeatures, uuid: [u8; 16], block_size: usize) -> Self {
        let mut block = vec![0u8; block_size].into_boxed_slice();
        BlockHeader::new(BLOCKTYPE_DESCRIPTOR, sequence).encode_into(&mut block[..]);
        DescriptorBuilder {
            block,
            features,
            uuid,
            seed: csum_seed(&uuid),
            off: HEADER_SIZE,
            last: None,
            count: 0,
        }
    }

    /// Most tags one descriptor block of `block_size` bytes holds with `features`.
    pub fn max_tags(features: &JournalFeatures, block_size: usize) -> usize {
        let room = block_size - HEADER_SIZE - features.tail_size();
        let tb = features.tag_bytes();
        if room < tb + TAG_UUID_SIZE { 0 } else { 1 + (room - tb - TAG_UUID_SIZE) / tb }
    }

    /// Number of tags pushed.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if no tag was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Add a tag; false (and nothing added) when the block is full.
    ///
    /// # Panics
    /// If `tag.blocknr` does not fit in 32 bits and the journal lacks the 64-bit feature
    /// (a caller bug: the file system must not be bigger than its journal can address).
    pub fn try_push(&mut self, tag: Tag) -> bool {
        assert!(
            self.features.has_64bit() || tag.blocknr <= u64::from(u32::MAX),
            "block {} needs the 64bit journal feature",
            tag.blocknr
        );
        let first = self.count == 0;
        let need = self.features.tag_bytes() + if first { TAG_UUID_SIZE } else { 0 };
        if self.off + need > self.block.len() - self.features.tail_size() {
            return false;
        }
        let mut flags = tag.flags & !(TAG_FLAG_SAME_UUID | TAG_FLAG_LAST_TAG);
        if !first {
            flags |= TAG_FLAG_SAME_UUID;
        }
        write_tag(&mut self.block[..], self.off, &tag, flags, &self.features);
        self.last = Some((self.off, Tag { flags, ..tag }));
        self.off += self.features.tag_bytes();
        if first {
            self.block[self.off..self.off + TAG_UUID_SIZE].copy_from_slice(&self.uuid);
            self.off += TAG_UUID_SIZE;
        }
        self.count += 1;
        true
    }

    /// The finished block: `LAST_TAG` set on the last tag, tail checksum stored.
    ///
    /// # Panics
    /// If no tag was pushed (an empty descriptor would be read back as one tag for block 0).
    pub fn finish(mut self) -> Box<[u8]> {
        let Some((off, tag)) = self.last else {
            panic!("DescriptorBuilder::finish on an empty descriptor");
        };
        let flags = tag.flags | TAG_FLAG_LAST_TAG;
        write_tag(&mut self.block[..], off, &tag, flags, &self.features);
        set_block_tail(&mut self.block[..], &self.features, self.seed);
        self.block
    }
}

#[cfg(test)]
mod tests {
    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;
    use super::*;
    use crate::superblock::{INCOMPAT_64BIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3, INCOMPAT_REVOKE};

    const UUID: [u8; 16] = [0xA5; 16];

    fn feats(incompat: u32) -> JournalFeatures {
        JournalFeatures::new(0, incompat, 0)
    }

    #[test]
    fn header_roundtrip() {
        let h = BlockHeader::new(BLOCKTYPE_COMMIT, 0xDEAD_BEEF);
        let mut b = [0u8; 16];
        h.encode_into(&mut b);
        assert_eq!(&b[..4], &[0xC0, 0x3B, 0x39, 0x98]);
        assert_eq!(BlockHeader::decode(&b).expect("decode"), h);
        assert!(BlockHeader::decode(&b[..11]).is_err());
        assert!(BlockHeader::expect(&b, "x", BLOCKTYPE_COMMIT, Some(0xDEAD_BEEF)).is_ok());
        assert!(BlockHeader::expect(&b, "x", BLOCKTYPE_COMMIT, Some(1)).is_err());
        assert!(BlockHeader::expect(&b, "x", BLOCKTYPE_REVOKE, None).is_err());
    }

    #[test]
    fn escape_roundtrip() {
        let mut data = vec![0x5Au8; BLOCK_SIZE];
        data[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        let orig = data.clone();
        assert!(escape(&mut data));
        assert_eq!(&data[..4], &[0, 0, 0, 0]);
        assert_eq!(&data[4..], &orig[4..]);
        unescape(&mut data);
        assert_eq!(data, orig);
        // A block without the magic is left alone.
        let mut plain = vec![0x11u8; BLOCK_SIZE];
        assert!(!escape(&mut plain));
        assert_eq!(plain, vec![0x11u8; BLOCK_SIZE]);
    }

    #[test]
    fn tag_checksum_is_over_escaped_data() {
        let f = JournalFeatures::cjfs(true);
        let seed = csum_seed(&UUID);
        let mut data = vec![7u8; BLOCK_SIZE];
        data[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        let tag = make_tag(1234, &mut data, 42, &f, seed);
        assert!(tag.escaped());
        assert_eq!(tag.checksum, block_tag_csum(seed, 42, &data));
        assert!(tag.verify(&data, 42, &f, seed));
        assert!(!tag.verify(&data, 43, &f, seed));
        let mut bad = data.clone();
        bad[100] ^= 1;
        assert!(!tag.verify(&bad, 42, &f, seed));
    }

    fn roundtrip(incompat: u32) {
        let f = feats(incompat);
        let seed = csum_seed(&UUID);
        let mut b = DescriptorBuilder::new(9, f, UUID, BLOCK_SIZE);
        let mut pushed = Vec::new();
        for i in 0..5u64 {
            let home = if f.has_64bit() { (7u64 << 32) + i * 3 } else { 1000 + i * 3 };
            let mut data = vec![i as u8; BLOCK_SIZE];
            if i == 2 {
                data[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
            }
            let t = make_tag(home, &mut data, 9, &f, seed);
            assert!(b.try_push(t));
            pushed.push(t);
        }
        let block = b.finish();
        let tags = parse_descriptor(&block, &f, seed).expect("parse");
        assert_eq!(tags.len(), 5);
        for (i, (got, want)) in tags.iter().zip(&pushed).enumerate() {
            assert_eq!(got.blocknr, want.blocknr, "tag {i}");
            assert_eq!(got.checksum, want.checksum, "tag {i}");
            assert_eq!(got.escaped(), i == 2);
            assert_eq!(got.flags & TAG_FLAG_SAME_UUID != 0, i > 0);
            assert_eq!(got.flags & TAG_FLAG_LAST_TAG != 0, i == 4);
        }
        // The UUID follows the first tag.
        let off = HEADER_SIZE + f.tag_bytes();
        assert_eq!(&block[off..off + 16], &UUID);
    }

    #[test]
    fn descriptor_roundtrip_all_layouts() {
        roundtrip(INCOMPAT_REVOKE | INCOMPAT_64BIT | INCOMPAT_CSUM_V3);
        roundtrip(INCOMPAT_CSUM_V3);
        roundtrip(INCOMPAT_64BIT | INCOMPAT_CSUM_V2);
        roundtrip(INCOMPAT_CSUM_V2);
        roundtrip(INCOMPAT_64BIT);
        roundtrip(0);
    }

    #[test]
    fn csum3_tag_layout() {
        let f = JournalFeatures::cjfs(true);
        let mut b = DescriptorBuilder::new(3, f, UUID, BLOCK_SIZE);
        assert!(b.try_push(Tag { blocknr: 0x1_0000_0002, flags: TAG_FLAG_ESCAPE, checksum: 0xCAFEBABE }));
        let blk = b.finish();
        assert_eq!(rd_be32(&blk, 12), 2);
        assert_eq!(rd_be32(&blk, 16), u32::from(TAG_FLAG_ESCAPE | TAG_FLAG_LAST_TAG));
        assert_eq!(rd_be32(&blk, 20), 1);
        assert_eq!(rd_be32(&blk, 24), 0xCAFEBABE);
    }

    #[test]
    fn fills_to_capacity_64bit_csum3() {
        let f = JournalFeatures::cjfs(true);
        // (4096 - 12 header - 4 tail - 16 uuid) / 16 bytes per tag.
        let cap = (BLOCK_SIZE - 12 - 4 - 16) / 16;
        assert_eq!(cap, 254);
        assert_eq!(DescriptorBuilder::max_tags(&f, BLOCK_SIZE), cap);
        let mut b = DescriptorBuilder::new(1, f, UUID, BLOCK_SIZE);
        for i in 0..cap as u64 {
            assert!(b.try_push(Tag { blocknr: 100 + i, flags: 0, checksum: i as u32 }), "tag {i}");
        }
        assert!(!b.try_push(Tag { blocknr: 1, flags: 0, checksum: 0 }));
        assert_eq!(b.len(), cap);
        let blk = b.finish();
        let tags = parse_descriptor(&blk, &f, csum_seed(&UUID)).expect("parse");
        assert_eq!(tags.len(), cap);
        assert_eq!(tags[cap - 1].blocknr, 100 + cap as u64 - 1);
        assert!(tags[cap - 1].flags & TAG_FLAG_LAST_TAG != 0);
    }

    #[test]
    fn capacity_other_layouts() {
        for incompat in [0, INCOMPAT_64BIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT] {
            let f = feats(incompat);
            let cap = DescriptorBuilder::max_tags(&f, BLOCK_SIZE);
            let mut b = DescriptorBuilder::new(1, f, UUID, BLOCK_SIZE);
            let mut n = 0;
            while b.try_push(Tag { blocknr: n, flags: 0, checksum: 0 }) {
                n += 1;
            }
            assert_eq!(n as usize, cap, "incompat {incompat:x}");
            let tags = parse_descriptor(&b.finish(), &f, csum_seed(&UUID)).expect("parse");
            assert_eq!(tags.len(), cap);
        }
    }

    #[test]
    fn tail_checksum_failure_detected() {
        let f = JournalFeatures::cjfs(true);
        let seed = csum_seed(&UUID);
        let mut b = DescriptorBuilder::new(1, f, UUID, BLOCK_SIZE);
        assert!(b.try_push(Tag { blocknr: 5, flags: 0, checksum: 0 }));
        let mut blk = b.finish();
        assert!(verify_block_tail(&blk, &f, seed));
        blk[40] ^= 0x80;
        assert!(!verify_block_tail(&blk, &f, seed));
        match parse_descriptor(&blk, &f, seed) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("tail checksum"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Wrong seed (other journal) fails too.
        blk[40] ^= 0x80;
        assert!(parse_descriptor(&blk, &f, csum_seed(&[0; 16])).is_err());
        // Wrong block type.
        let mut blk2 = blk.clone();
        wr_be32(&mut blk2, H_BLOCKTYPE_OFFSET, BLOCKTYPE_REVOKE);
        assert!(parse_descriptor(&blk2, &f, seed).is_err());
        // Short buffer.
        assert!(parse_descriptor(&blk[..100], &f, seed).is_err());
    }

    #[test]
    fn parse_garbage_never_panics() {
        let f = JournalFeatures::cjfs(false);
        let mut blk = [0xFFu8; BLOCK_SIZE];
        BlockHeader::new(BLOCKTYPE_DESCRIPTOR, 1).encode_into(&mut blk);
        // Every tag has LAST_TAG set: just one tag.
        assert_eq!(parse_tags(&blk, &f).len(), 1);
        let blk = [0u8; BLOCK_SIZE];
        // No flags: each tag followed by a UUID; walks to the end.
        assert_eq!(parse_tags(&blk, &f).len(), (BLOCK_SIZE - 12 - 12) / 28 + 1);
    }
}
