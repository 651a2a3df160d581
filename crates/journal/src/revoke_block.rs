//! JBD2 revoke blocks (`jbd2_journal_revoke_header_t`, `JBD2_REVOKE_BLOCK`).
//!
//! Layout (big-endian): `journal_header_t` (12 bytes), `r_count` be32 @12 = bytes used in
//! the block *including* this 16-byte header, then the revoked block numbers from offset 16:
//! be64 each with the 64-bit feature, be32 otherwise. With csum v2/v3 the block ends with
//! the 4-byte tail checksum, which records never overlap.
//!
//! A revoke record for block B in transaction T tells recovery not to replay any logged copy
//! of B from a transaction with tid <= T.

use crate::checksum::csum_seed;
use crate::descriptor::{
    BLOCKTYPE_REVOKE, BlockHeader, HEADER_SIZE, check_block_len, rd_be32, rd_be64, set_block_tail,
    verify_block_tail, wr_be32, wr_be64,
};
use crate::error::{JResult, JournalError};
use crate::superblock::JournalFeatures;

/// Offset of `r_count`.
pub const REVOKE_COUNT_OFFSET: usize = HEADER_SIZE;
/// Size of `jbd2_journal_revoke_header_t`; the first record starts here.
pub const REVOKE_HEADER_SIZE: usize = 16;

/// Packs revoked block numbers of one transaction into as many revoke blocks as needed
/// (the way `jbd2_journal_write_revoke_records` fills them).
#[derive(Debug, Clone)]
pub struct RevokeBuilder {
    sequence: u32,
    features: JournalFeatures,
    seed: u32,
    records: Vec<u64>,
    block_size: usize,
    /// Records per block at most (`None`: as many as fit).
    cap: Option<usize>,
}

/// Bytes of a sector: the unit a device is assumed to write atomically.
pub const SECTOR_SIZE: usize = 512;

impl RevokeBuilder {
    /// An empty set of revoke records for transaction `sequence` of a journal with
    /// `features` and `uuid` (the superblock's `s_uuid`), in blocks of `block_size` bytes.
    pub fn new(sequence: u32, features: JournalFeatures, uuid: [u8; 16], block_size: usize) -> Self {
        RevokeBuilder {
            sequence,
            features,
            seed: csum_seed(&uuid),
            records: Vec::new(),
            block_size,
            cap: None,
        }
    }

    /// Put records only in each block's first 512-byte sector (`r_count` <= 512). Without a
    /// checksum over revoke blocks (JBD2's v1 transaction checksum does not cover them) a
    /// block torn at sector granularity is then either wholly this transaction's — its
    /// header and every record are in that sector — or wholly stale, whose old sequence
    /// number ends the log before the transaction: recovery reads records only up to
    /// `r_count`, so a stale later sector can never add a record.
    pub fn sector_atomic(mut self) -> Self {
        self.cap =
            Some((SECTOR_SIZE.min(self.block_size) - REVOKE_HEADER_SIZE) / self.features.revoke_record_len());
        self
    }

    /// Records per block for this builder.
    fn per_block(&self) -> usize {
        let all = Self::records_per_block(&self.features, self.block_size);
        self.cap.map_or(all, |c| c.min(all))
    }

    /// Records one revoke block of `block_size` bytes holds with `features` (in 4 KiB: 509
    /// with 64-bit + csum, 1020 with neither).
    pub fn records_per_block(features: &JournalFeatures, block_size: usize) -> usize {
        (block_size - REVOKE_HEADER_SIZE - features.tail_size()) / features.revoke_record_len()
    }

    /// Revoke blocks of `block_size` bytes needed for `n` records.
    pub fn blocks_needed(n: usize, features: &JournalFeatures, block_size: usize) -> usize {
        n.div_ceil(Self::records_per_block(features, block_size))
    }

    /// Add a revoked block number.
    ///
    /// # Panics
    /// If `blocknr` does not fit in 32 bits and the journal lacks the 64-bit feature.
    pub fn push(&mut self, blocknr: u64) {
        assert!(
            self.features.has_64bit() || blocknr <= u64::from(u32::MAX),
            "revoked block {blocknr} needs the 64bit journal feature"
        );
        self.records.push(blocknr);
    }

    /// Number of records pushed.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True if nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Number of blocks [`RevokeBuilder::finish`] will produce.
    pub fn block_count(&self) -> usize {
        self.records.len().div_ceil(self.per_block())
    }

    /// The revoke blocks, in order (none if nothing was pushed), each with `r_count` and the
    /// tail checksum set.
    pub fn finish(self) -> Vec<Box<[u8]>> {
        let per = self.per_block();
        let rec = self.features.revoke_record_len();
        let mut out = Vec::with_capacity(self.block_count());
        for chunk in self.records.chunks(per) {
            let mut b = vec![0u8; self.block_size].into_boxed_slice();
            BlockHeader::new(BLOCKTYPE_REVOKE, self.sequence).encode_into(&mut b);
            let mut off = REVOKE_HEADER_SIZE;
            for &blk in chunk {
                if rec == 8 {
                    wr_be64(&mut b, off, blk);
                } else {
                    wr_be32(&mut b, off, blk as u32);
                }
                off += rec;
            }
            wr_be32(&mut b, REVOKE_COUNT_OFFSET, off as u32);
            set_block_tail(&mut b, &self.features, self.seed);
            out.push(b);
        }
        out
    }
}

/// The records of a revoke block, read like JBD2's `scan_revoke_records`: `r_count` larger
/// than the block minus the tail is [`JournalError::Corrupt`]; records are taken while a
/// whole one fits below `r_count`. Neither header nor checksum is checked.
pub fn parse_revoke_records(block: &[u8], features: &JournalFeatures) -> JResult<Vec<u64>> {
    check_block_len(block, "revoke block")?;
    let rcount = rd_be32(block, REVOKE_COUNT_OFFSET);
    let max = block.len() - features.tail_size();
    if rcount as usize > max {
        return Err(JournalError::Corrupt(format!(
            "revoke block of transaction {}: r_count {rcount} exceeds {max}",
            rd_be32(block, 8)
        )));
    }
    let rec = features.revoke_record_len();
    let mut off = REVOKE_HEADER_SIZE;
    let mut out = Vec::new();
    while off + rec <= rcount as usize {
        out.push(if rec == 8 { rd_be64(block, off) } else { u64::from(rd_be32(block, off)) });
        off += rec;
    }
    Ok(out)
}

/// Decode a revoke block: checks the header (magic, revoke block type) and, with csum v2/v3,
/// the tail checksum, then returns the revoked block numbers.
pub fn parse_revoke(block: &[u8], features: &JournalFeatures, csum_seed: u32) -> JResult<Vec<u64>> {
    check_block_len(block, "revoke block")?;
    let h = BlockHeader::expect(block, "revoke block", BLOCKTYPE_REVOKE, None)?;
    if !verify_block_tail(block, features, csum_seed) {
        return Err(JournalError::Corrupt(format!(
            "revoke block of transaction {}: tail checksum mismatch",
            h.sequence
        )));
    }
    parse_revoke_records(block, features)
}

#[cfg(test)]
mod tests {
    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;
    use super::*;
    use crate::superblock::{INCOMPAT_64BIT, INCOMPAT_CSUM_V3};

    #[test]
    fn sector_atomic_blocks_keep_every_record_in_the_first_sector() {
        let f = JournalFeatures::new(crate::superblock::COMPAT_CHECKSUM, INCOMPAT_64BIT, 0);
        let mut b = RevokeBuilder::new(4, f, [1; 16], BLOCK_SIZE).sector_atomic();
        for i in 0..200u64 {
            b.push(1000 + i);
        }
        assert_eq!(b.block_count(), 4, "62 records of 8 bytes per 512-byte sector");
        let blocks = b.finish();
        let mut all = Vec::new();
        for blk in &blocks {
            assert!(rd_be32(blk, REVOKE_COUNT_OFFSET) as usize <= SECTOR_SIZE);
            assert!(blk[SECTOR_SIZE..].iter().all(|&x| x == 0), "nothing past the first sector");
            all.extend(parse_revoke_records(blk, &f).expect("records"));
        }
        assert_eq!(all, (1000..1200).collect::<Vec<u64>>());
    }

    const UUID: [u8; 16] = [0x42; 16];

    #[test]
    fn capacity() {
        assert_eq!(RevokeBuilder::records_per_block(&JournalFeatures::cjfs(true), BLOCK_SIZE), 509);
        assert_eq!(RevokeBuilder::records_per_block(&JournalFeatures::cjfs(false), BLOCK_SIZE), 510);
        assert_eq!(RevokeBuilder::records_per_block(&JournalFeatures::default(), BLOCK_SIZE), 1020);
        assert_eq!(
            RevokeBuilder::records_per_block(&JournalFeatures::new(0, INCOMPAT_CSUM_V3, 0), BLOCK_SIZE),
            1019
        );
    }

    #[test]
    fn roundtrip_one_block() {
        let f = JournalFeatures::cjfs(true);
        let mut b = RevokeBuilder::new(12, f, UUID, BLOCK_SIZE);
        b.push(5);
        b.push(1 << 40);
        let blocks = b.finish();
        assert_eq!(blocks.len(), 1);
        assert_eq!(rd_be32(&blocks[0], REVOKE_COUNT_OFFSET), 16 + 16);
        let recs = parse_revoke(&blocks[0], &f, csum_seed(&UUID)).expect("parse");
        assert_eq!(recs, vec![5, 1 << 40]);
    }

    #[test]
    fn across_multiple_blocks() {
        for f in [
            JournalFeatures::cjfs(true),
            JournalFeatures::cjfs(false),
            JournalFeatures::default(),
            JournalFeatures::new(0, INCOMPAT_CSUM_V3, 0),
            JournalFeatures::new(0, INCOMPAT_64BIT, 0),
        ] {
            let per = RevokeBuilder::records_per_block(&f, BLOCK_SIZE);
            let n = per * 2 + 7;
            let mut b = RevokeBuilder::new(3, f, UUID, BLOCK_SIZE);
            for i in 0..n as u64 {
                b.push(i * 11 + 1);
            }
            assert_eq!(b.block_count(), 3);
            let blocks = b.finish();
            assert_eq!(blocks.len(), 3);
            let mut all = Vec::new();
            for (i, blk) in blocks.iter().enumerate() {
                let recs = parse_revoke(blk, &f, csum_seed(&UUID)).expect("parse");
                assert_eq!(recs.len(), if i < 2 { per } else { 7 });
                all.extend(recs);
            }
            assert_eq!(all, (0..n as u64).map(|i| i * 11 + 1).collect::<Vec<_>>());
        }
        assert!(RevokeBuilder::new(1, JournalFeatures::default(), UUID, BLOCK_SIZE).finish().is_empty());
    }

    #[test]
    fn checksum_and_count_errors() {
        let f = JournalFeatures::cjfs(true);
        let seed = csum_seed(&UUID);
        let mut b = RevokeBuilder::new(1, f, UUID, BLOCK_SIZE);
        b.push(77);
        let mut blk = b.finish().remove(0);
        blk[17] ^= 1;
        assert!(matches!(parse_revoke(&blk, &f, seed), Err(JournalError::Corrupt(_))));
        // A bogus r_count is rejected even without checksums.
        wr_be32(&mut blk, REVOKE_COUNT_OFFSET, 4093);
        match parse_revoke_records(&blk, &f) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("r_count"), "{m}"),
            other => panic!("{other:?}"),
        }
        wr_be32(&mut blk, REVOKE_COUNT_OFFSET, 3);
        assert_eq!(parse_revoke_records(&blk, &f).expect("tiny count"), Vec::<u64>::new());
    }
}
