//! JBD2 commit blocks (`struct commit_header`, `JBD2_COMMIT_BLOCK`).
//!
//! Layout (big-endian): `journal_header_t` (12 bytes), `h_chksum_type` u8 @12,
//! `h_chksum_size` u8 @13, 2 bytes padding, `h_chksum[8]` be32 @16, `h_commit_sec` be64 @48,
//! `h_commit_nsec` be32 @56; the rest of the block is zero.
//!
//! With csum v2/v3 (`jbd2_commit_block_csum_set`) `h_chksum_type` and `h_chksum_size` are 0
//! and `h_chksum[0]` holds the crc32c of the whole block computed with that field zeroed.
//! With the old compat checksum (v1) `h_chksum_type` is `JBD2_CRC32_CHKSUM`,
//! `h_chksum_size` 4 and `h_chksum[0]` the crc32_be of the transaction's descriptor and data
//! blocks (see [`CommitBlock::with_v1_checksum`]).
//!
//! # Chain marks (per-core journaling)
//!
//! A log of a journal with several logs (`per_core.rs`) writes, after the standard header,
//! the transaction's place in the order across logs ([`ChainMarks`]), big-endian at
//! [`CHAIN_OFFSET`] (0x40, past the 60-byte `commit_header` and its padding):
//!
//! | offset | field |
//! |---|---|
//! | +0 | `u32 magic` = [`CHAIN_MAGIC`] (`"ZJC1"`) |
//! | +4 | `u16 version` = 1 |
//! | +6 | `u16 log`: the log this transaction belongs to |
//! | +8 | `u16 count`: marks that follow (explicit; no sentinel, (0, 0) is a real name) |
//! | +10 | `u16` reserved, 0 |
//! | +12 | `u64 stamp`: the global commit-order stamp (a logical clock) |
//! | +20 | `count × (u16 log, u16 reserved, u32 tid)`: "valid only once transaction `tid` of log `log` is committed and valid" |
//! | +20 + 8·count | `u32 crc32c` (seed `!0`) of everything above from +0 |
//!
//! A log keeps only the newest mark per other log (a log's transactions are valid as a
//! prefix, so the newest implies the older ones), so `count` is below the number of logs and
//! always fits. JBD2 ignores these bytes; the csum v2/v3 block checksum covers them. The wall
//! clock stays in `h_commit_sec`/`h_commit_nsec`, which JBD2 recovery compares for its own
//! checks. A journal of one log writes no extension: its commit blocks are plain JBD2.

use crate::checksum::commit_block_csum;
use crate::descriptor::{
    BLOCKTYPE_COMMIT, BlockHeader, HEADER_SIZE, check_block_len, rd_be32, rd_be64, wr_be32, wr_be64,
};
use crate::error::{JResult, JournalError};
use crate::superblock::{CHKSUM_TYPE_CRC32, JournalFeatures};

/// Offset of `h_chksum_type`.
pub const COMMIT_CHKSUM_TYPE_OFFSET: usize = HEADER_SIZE;
/// Offset of `h_chksum_size`.
pub const COMMIT_CHKSUM_SIZE_OFFSET: usize = HEADER_SIZE + 1;
/// Offset of `h_chksum[0]`.
pub const COMMIT_CHKSUM_OFFSET: usize = 16;
/// Number of `h_chksum` words (`JBD2_CHECKSUM_BYTES`).
pub const COMMIT_CHKSUM_WORDS: usize = 8;
/// Offset of `h_commit_sec`.
pub const COMMIT_SEC_OFFSET: usize = 48;
/// Offset of `h_commit_nsec`.
pub const COMMIT_NSEC_OFFSET: usize = 56;
/// `JBD2_CRC32_CHKSUM_SIZE`: `h_chksum_size` for v1 checksums.
pub const CRC32_CHKSUM_SIZE: u8 = 4;

/// Offset of the chain-marks extension.
pub const CHAIN_OFFSET: usize = 0x40;
/// Magic of the chain-marks extension (`"ZJC1"`).
pub const CHAIN_MAGIC: u32 = 0x5A4A_4331;
/// Most marks one commit block can carry (in the smallest, 1 KiB, block).
pub const MAX_CHAIN_MARKS: usize = (1024 - CHAIN_OFFSET - 24) / 8;

/// A transaction's place in the order across logs (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChainMarks {
    /// The log the transaction belongs to.
    pub log: u16,
    /// The global commit-order stamp: replay order across logs.
    pub stamp: u64,
    /// `(log, tid)` of the transactions this one is valid only after.
    pub marks: Vec<(u16, u32)>,
}

impl ChainMarks {
    /// Write the extension into a commit block image (before its checksum is computed).
    pub fn encode_into(&self, b: &mut [u8]) -> JResult<()> {
        if self.marks.len() > MAX_CHAIN_MARKS {
            return Err(JournalError::Corrupt(format!(
                "{} chain marks do not fit a commit block (at most {MAX_CHAIN_MARKS})",
                self.marks.len()
            )));
        }
        let o = CHAIN_OFFSET;
        wr_be32(b, o, CHAIN_MAGIC);
        b[o + 4..o + 6].copy_from_slice(&1u16.to_be_bytes());
        b[o + 6..o + 8].copy_from_slice(&self.log.to_be_bytes());
        b[o + 8..o + 10].copy_from_slice(&(self.marks.len() as u16).to_be_bytes());
        b[o + 10..o + 12].fill(0);
        wr_be64(b, o + 12, self.stamp);
        for (i, &(log, tid)) in self.marks.iter().enumerate() {
            let m = o + 20 + 8 * i;
            b[m..m + 2].copy_from_slice(&log.to_be_bytes());
            b[m + 2..m + 4].fill(0);
            wr_be32(b, m + 4, tid);
        }
        let end = o + 20 + 8 * self.marks.len();
        let crc = crate::checksum::crc32c(!0, &b[o..end]);
        wr_be32(b, end, crc);
        Ok(())
    }

    /// Read the extension of a commit block: `Ok(None)` when there is none (a plain JBD2
    /// commit block), an error when it is there but malformed or fails its checksum.
    pub fn decode(b: &[u8]) -> JResult<Option<ChainMarks>> {
        let o = CHAIN_OFFSET;
        check_block_len(b, "commit block")?;
        if rd_be32(b, o) != CHAIN_MAGIC {
            return Ok(None);
        }
        let be16 = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
        let version = be16(o + 4);
        if version != 1 {
            return Err(JournalError::Corrupt(format!(
                "commit block chain marks: version {version} (know 1)"
            )));
        }
        let count = usize::from(be16(o + 8));
        if count > MAX_CHAIN_MARKS {
            return Err(JournalError::Corrupt(format!(
                "commit block chain marks: {count} marks (at most {MAX_CHAIN_MARKS})"
            )));
        }
        let end = o + 20 + 8 * count;
        let (stored, computed) = (rd_be32(b, end), crate::checksum::crc32c(!0, &b[o..end]));
        if stored != computed {
            return Err(JournalError::Corrupt(format!(
                "commit block chain marks: checksum 0x{stored:08x} does not match computed 0x{computed:08x}"
            )));
        }
        let marks = (0..count).map(|i| (be16(o + 20 + 8 * i), rd_be32(b, o + 24 + 8 * i))).collect();
        Ok(Some(ChainMarks { log: be16(o + 6), stamp: rd_be64(b, o + 12), marks }))
    }
}

/// A decoded commit block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitBlock {
    /// Transaction id (`h_sequence`).
    pub sequence: u32,
    /// `h_chksum_type` (0 with csum v2/v3 or no checksum; 1 for v1 crc32).
    pub chksum_type: u8,
    /// `h_chksum_size` (0, or 4 for v1 crc32).
    pub chksum_size: u8,
    /// `h_chksum[]`; word 0 is the checksum with v1 or csum v2/v3.
    pub chksum: [u32; COMMIT_CHKSUM_WORDS],
    /// Commit time, seconds since the epoch.
    pub commit_sec: u64,
    /// Commit time, nanoseconds.
    pub commit_nsec: u32,
}

impl CommitBlock {
    /// A commit block for transaction `sequence` committed at `commit_sec.commit_nsec`.
    pub fn new(sequence: u32, commit_sec: u64, commit_nsec: u32) -> Self {
        CommitBlock {
            sequence,
            chksum_type: 0,
            chksum_size: 0,
            chksum: [0; COMMIT_CHKSUM_WORDS],
            commit_sec,
            commit_nsec,
        }
    }

    /// A commit block for `sequence` stamped with the current wall-clock time.
    pub fn now(sequence: u32) -> Self {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Self::new(sequence, t.as_secs(), t.subsec_nanos())
    }

    /// Set a v1 (`COMPAT_CHECKSUM`) transaction checksum: crc32_be from `~0` over every
    /// descriptor and data block of the transaction, in log order.
    pub fn with_v1_checksum(mut self, crc32_sum: u32) -> Self {
        self.chksum_type = CHKSUM_TYPE_CRC32;
        self.chksum_size = CRC32_CHKSUM_SIZE;
        self.chksum[0] = crc32_sum;
        self
    }

    /// Encode into a journal block of `block_size` bytes. With csum v2/v3 the type and size
    /// are written as 0 and `h_chksum[0]` is set to the block checksum, whatever `self`
    /// holds there.
    pub fn encode(&self, features: &JournalFeatures, csum_seed: u32, block_size: usize) -> Box<[u8]> {
        self.encode_with(features, csum_seed, None, block_size)
            .unwrap_or_else(|_| unreachable!("no extension"))
    }

    /// [`CommitBlock::encode`] with a chain-marks extension (per-core journaling).
    pub fn encode_with(
        &self,
        features: &JournalFeatures,
        csum_seed: u32,
        chain: Option<&ChainMarks>,
        block_size: usize,
    ) -> JResult<Box<[u8]>> {
        let mut b = vec![0u8; block_size].into_boxed_slice();
        if let Some(c) = chain {
            c.encode_into(&mut b)?;
        }
        BlockHeader::new(BLOCKTYPE_COMMIT, self.sequence).encode_into(&mut b);
        let v23 = features.csum_v2or3();
        b[COMMIT_CHKSUM_TYPE_OFFSET] = if v23 { 0 } else { self.chksum_type };
        b[COMMIT_CHKSUM_SIZE_OFFSET] = if v23 { 0 } else { self.chksum_size };
        for (i, w) in self.chksum.iter().enumerate() {
            wr_be32(&mut b, COMMIT_CHKSUM_OFFSET + 4 * i, *w);
        }
        wr_be64(&mut b, COMMIT_SEC_OFFSET, self.commit_sec);
        wr_be32(&mut b, COMMIT_NSEC_OFFSET, self.commit_nsec);
        if v23 {
            let csum = commit_block_csum(csum_seed, &b);
            wr_be32(&mut b, COMMIT_CHKSUM_OFFSET, csum);
        }
        Ok(b)
    }

    /// Decode a commit block, requiring the magic and commit block type, and verifying the
    /// checksum with csum v2/v3 (mismatch: [`JournalError::Corrupt`]).
    pub fn decode(block: &[u8], features: &JournalFeatures, csum_seed: u32) -> JResult<Self> {
        let c = Self::decode_unverified(block)?;
        if !Self::verify_csum(block, features, csum_seed) {
            return Err(JournalError::Corrupt(format!(
                "commit block of transaction {}: h_chksum[0] 0x{:08x} does not match computed 0x{:08x}",
                c.sequence,
                c.chksum[0],
                commit_block_csum(csum_seed, block)
            )));
        }
        Ok(c)
    }

    /// Decode without verifying any checksum (header magic and type are still checked).
    pub fn decode_unverified(block: &[u8]) -> JResult<Self> {
        check_block_len(block, "commit block")?;
        let h = BlockHeader::expect(block, "commit block", BLOCKTYPE_COMMIT, None)?;
        let mut chksum = [0u32; COMMIT_CHKSUM_WORDS];
        for (i, w) in chksum.iter_mut().enumerate() {
            *w = rd_be32(block, COMMIT_CHKSUM_OFFSET + 4 * i);
        }
        Ok(CommitBlock {
            sequence: h.sequence,
            chksum_type: block[COMMIT_CHKSUM_TYPE_OFFSET],
            chksum_size: block[COMMIT_CHKSUM_SIZE_OFFSET],
            chksum,
            commit_sec: rd_be64(block, COMMIT_SEC_OFFSET),
            commit_nsec: rd_be32(block, COMMIT_NSEC_OFFSET),
        })
    }

    /// `jbd2_commit_block_csum_verify`: true without csum v2/v3, else whether `h_chksum[0]`
    /// matches the block.
    pub fn verify_csum(block: &[u8], features: &JournalFeatures, csum_seed: u32) -> bool {
        if !features.csum_v2or3() {
            return true;
        }
        rd_be32(block, COMMIT_CHKSUM_OFFSET) == commit_block_csum(csum_seed, block)
    }
}

#[cfg(test)]
mod tests {
    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;
    use super::*;
    use crate::checksum::csum_seed;
    use crate::descriptor::{BLOCKTYPE_DESCRIPTOR, H_BLOCKTYPE_OFFSET};

    #[test]
    fn roundtrip_csum3() {
        let f = JournalFeatures::cjfs(true);
        let seed = csum_seed(&[3; 16]);
        let c = CommitBlock::new(17, 1_700_000_000, 123_456_789);
        let b = c.encode(&f, seed, BLOCK_SIZE);
        assert_eq!(b[COMMIT_CHKSUM_TYPE_OFFSET], 0);
        assert_eq!(b[COMMIT_CHKSUM_SIZE_OFFSET], 0);
        assert_eq!(rd_be64(&b, COMMIT_SEC_OFFSET), 1_700_000_000);
        let d = CommitBlock::decode(&b, &f, seed).expect("decode");
        assert_eq!(d.sequence, 17);
        assert_eq!(d.commit_sec, 1_700_000_000);
        assert_eq!(d.commit_nsec, 123_456_789);
        assert_eq!(d.chksum[0], commit_block_csum(seed, &b));
        assert_ne!(d.chksum[0], 0);
    }

    #[test]
    fn roundtrip_no_csum_and_v1() {
        let f = JournalFeatures::cjfs(false);
        let c = CommitBlock::new(5, 10, 20);
        let b = c.encode(&f, 0, BLOCK_SIZE);
        assert_eq!(CommitBlock::decode(&b, &f, 0).expect("decode"), c);
        let c1 = CommitBlock::new(6, 1, 2).with_v1_checksum(0x1234_5678);
        let b = c1.encode(&f, 0, BLOCK_SIZE);
        let d = CommitBlock::decode(&b, &f, 0).expect("decode");
        assert_eq!(d, c1);
        assert_eq!(d.chksum_type, CHKSUM_TYPE_CRC32);
        assert_eq!(d.chksum_size, 4);
    }

    #[test]
    fn checksum_failure_detected() {
        let f = JournalFeatures::cjfs(true);
        let seed = csum_seed(&[3; 16]);
        let mut b = CommitBlock::new(17, 99, 1).encode(&f, seed, BLOCK_SIZE);
        b[COMMIT_SEC_OFFSET + 7] ^= 1;
        assert!(!CommitBlock::verify_csum(&b, &f, seed));
        match CommitBlock::decode(&b, &f, seed) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("h_chksum"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Torn block: second half zeroed does not matter here (all zero anyway), but a
        // zeroed checksum does.
        let mut b = CommitBlock::new(17, 99, 1).encode(&f, seed, BLOCK_SIZE);
        wr_be32(&mut b, COMMIT_CHKSUM_OFFSET, 0);
        assert!(CommitBlock::decode(&b, &f, seed).is_err());
        assert!(CommitBlock::decode_unverified(&b).is_ok());
    }

    #[test]
    fn chain_marks_round_trip_and_are_checked() {
        let f = JournalFeatures::cjfs(true);
        let seed = csum_seed(&[3; 16]);
        let plain = CommitBlock::new(9, 1, 2).encode(&f, seed, BLOCK_SIZE);
        assert_eq!(ChainMarks::decode(&plain).expect("plain"), None);
        let c = ChainMarks { log: 3, stamp: 0x0102_0304_0506, marks: vec![(0, 0), (7, 41)] };
        let b = CommitBlock::new(9, 1, 2).encode_with(&f, seed, Some(&c), BLOCK_SIZE).expect("encode");
        assert!(CommitBlock::verify_csum(&b, &f, seed), "the block checksum covers the extension");
        assert_eq!(ChainMarks::decode(&b).expect("decode"), Some(c.clone()));
        let mut bad = b;
        bad[CHAIN_OFFSET + 22] ^= 1;
        assert!(ChainMarks::decode(&bad).is_err());
        let many = ChainMarks { marks: vec![(1, 1); MAX_CHAIN_MARKS + 1], ..c };
        assert!(CommitBlock::new(9, 1, 2).encode_with(&f, seed, Some(&many), BLOCK_SIZE).is_err());
    }

    #[test]
    fn wrong_type_rejected() {
        let f = JournalFeatures::cjfs(false);
        let mut b = CommitBlock::new(1, 0, 0).encode(&f, 0, BLOCK_SIZE);
        wr_be32(&mut b, H_BLOCKTYPE_OFFSET, BLOCKTYPE_DESCRIPTOR);
        assert!(CommitBlock::decode(&b, &f, 0).is_err());
        assert!(CommitBlock::decode(&b[..20], &f, 0).is_err());
    }
}
