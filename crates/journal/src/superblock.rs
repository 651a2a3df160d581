//! The JBD2 journal superblock (`journal_superblock_t`), log block 0 of the journal area.
//!
//! Layout (all fields big-endian), from Linux `include/linux/jbd2.h`:
//!
//! | offset | field |
//! |-------:|-------|
//! | 0x000 | `s_header` (`journal_header_t`: magic, blocktype 3 = v1 / 4 = v2, sequence) |
//! | 0x00C | `s_blocksize` |
//! | 0x010 | `s_maxlen` (log blocks, including this one) |
//! | 0x014 | `s_first` (first log block) |
//! | 0x018 | `s_sequence` (first tid expected in the log) |
//! | 0x01C | `s_start` (log block of the first transaction; 0 = log empty / clean) |
//! | 0x020 | `s_errno` |
//! | 0x024 | `s_feature_compat`, `s_feature_incompat`, `s_feature_ro_compat` |
//! | 0x030 | `s_uuid[16]` |
//! | 0x040 | `s_nr_users`, `s_dynsuper`, `s_max_transaction`, `s_max_trans_data` |
//! | 0x050 | `s_checksum_type` (u8), 3 bytes padding |
//! | 0x054 | `s_num_fc_blks`, `s_head` |
//! | 0x05C | 40 x u32 padding (cjfs: the first holds `osum_confirmed` while `cjfs_ordered_sums` is set) |
//! | 0x0FC | `s_checksum` |
//! | 0x100 | `s_users[16 * 48]` |
//! | 0x400 | end of structure (rest of the 4 KiB block is zero) |

use cjfs_blockdev::{
    BlockDevice, BlockKind, DEFAULT_BLOCK_SIZE, WriteRequest, WriteTag, block_from_slice, zeroed_buf,
};

use crate::area::JournalArea;
use crate::checksum::{csum_seed, superblock_csum};
use crate::descriptor::{
    BLOCK_TAIL_SIZE, BLOCKTYPE_COMMIT, BLOCKTYPE_DESCRIPTOR, BLOCKTYPE_FC, BLOCKTYPE_REVOKE, BLOCKTYPE_SB_V1,
    BLOCKTYPE_SB_V2, BlockHeader, JBD2_MAGIC, TAG_BYTES_BASE, TAG3_BYTES, rd_be32, wr_be32,
};
use crate::error::{JResult, JournalError};

/// Offset of `s_blocksize`.
pub const SB_BLOCKSIZE_OFFSET: usize = 0x0C;
/// Offset of `s_maxlen`.
pub const SB_MAXLEN_OFFSET: usize = 0x10;
/// Offset of `s_first`.
pub const SB_FIRST_OFFSET: usize = 0x14;
/// Offset of `s_sequence`.
pub const SB_SEQUENCE_OFFSET: usize = 0x18;
/// Offset of `s_start`.
pub const SB_START_OFFSET: usize = 0x1C;
/// Offset of `s_errno`.
pub const SB_ERRNO_OFFSET: usize = 0x20;
/// Offset of `s_feature_compat`.
pub const SB_FEATURE_COMPAT_OFFSET: usize = 0x24;
/// Offset of `s_feature_incompat`.
pub const SB_FEATURE_INCOMPAT_OFFSET: usize = 0x28;
/// Offset of `s_feature_ro_compat`.
pub const SB_FEATURE_RO_COMPAT_OFFSET: usize = 0x2C;
/// Offset of `s_uuid`.
pub const SB_UUID_OFFSET: usize = 0x30;
/// Offset of `s_nr_users`.
pub const SB_NR_USERS_OFFSET: usize = 0x40;
/// Offset of `s_dynsuper`.
pub const SB_DYNSUPER_OFFSET: usize = 0x44;
/// Offset of `s_max_transaction`.
pub const SB_MAX_TRANSACTION_OFFSET: usize = 0x48;
/// Offset of `s_max_trans_data`.
pub const SB_MAX_TRANS_DATA_OFFSET: usize = 0x4C;
/// Offset of `s_checksum_type` (one byte).
pub const SB_CHECKSUM_TYPE_OFFSET: usize = 0x50;
/// Offset of `s_num_fc_blks`.
pub const SB_NUM_FC_BLKS_OFFSET: usize = 0x54;
/// Offset of `s_head`.
pub const SB_HEAD_OFFSET: usize = 0x58;
/// Offset of `s_checksum`.
pub const SB_CHECKSUM_OFFSET: usize = 0xFC;
/// Offset of cjfs' `osum_confirmed` (`s_padding[0]`).
pub const SB_OSUM_CONFIRMED_OFFSET: usize = 0x5C;
/// Offset of `s_users`.
pub const SB_USERS_OFFSET: usize = 0x100;
/// Size of `s_users` (16 bytes x 48 users).
pub const SB_USERS_LEN: usize = 16 * 48;
/// Size of `journal_superblock_t`, the span covered by the superblock checksum.
pub const SB_CSUM_LEN: usize = 0x400;
/// Size of the v1 part of the superblock (fields up to and including `s_errno`).
pub const SB_V1_LEN: usize = 0x24;

/// `JBD2_FEATURE_COMPAT_CHECKSUM`: v1 transaction checksums (crc32_be in the commit block).
pub const COMPAT_CHECKSUM: u32 = 0x1;
/// `JBD2_FEATURE_INCOMPAT_REVOKE`: the log may contain revoke blocks.
pub const INCOMPAT_REVOKE: u32 = 0x1;
/// `JBD2_FEATURE_INCOMPAT_64BIT`: block numbers in tags and revoke records are 64-bit.
pub const INCOMPAT_64BIT: u32 = 0x2;
/// `JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT`: commit blocks written without waiting for the data.
pub const INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
/// `JBD2_FEATURE_INCOMPAT_CSUM_V2`: crc32c checksums, 16-bit tag checksums.
pub const INCOMPAT_CSUM_V2: u32 = 0x8;
/// `JBD2_FEATURE_INCOMPAT_CSUM_V3`: crc32c checksums, `journal_block_tag3_t` tags.
pub const INCOMPAT_CSUM_V3: u32 = 0x10;
/// `JBD2_FEATURE_INCOMPAT_FAST_COMMIT`: a fast-commit area ends the journal (its last
/// `s_num_fc_blks` blocks, 256 when 0); the log wraps before it. Replayed by the file system
/// after the log (`cjfs_fs`), which then clears the bit.
pub const INCOMPAT_FAST_COMMIT: u32 = 0x20;
/// cjfs-private: log areas besides this journal (see [`LogArea`]) may hold transactions that
/// need replay. Unknown to the kernel and e2fsck, which therefore refuse the journal ("JBD2:
/// Unrecognised features on journal"; "journal superblock has an unknown incompatible
/// feature flag set") instead of replaying only this log. Set while extra logs are open,
/// cleared by a clean unmount and by `cjfs recover`. The top bit, far from JBD2's own.
pub const INCOMPAT_CJFS_LOGS: u32 = 0x8000_0000;
/// cjfs-private: ijournal areas (see [`AreaKind::IJournal`]) may hold i-transactions that
/// need replay (iJournaling's fsync records). Stock tools refuse the journal for the same
/// reason as [`INCOMPAT_CJFS_LOGS`]: replaying the primary log alone would silently drop every
/// fsync served by an i-transaction since the last commit. A bit of its own rather than
/// `cjfs_logs` because the two are cleared at different points of recovery: the logs' bit once
/// the normal logs are replayed, this one only after the i-transactions are home.
pub const INCOMPAT_CJFS_IJOURNAL: u32 = 0x4000_0000;
/// cjfs-private: commit blocks may carry checksums of the ordered data their transaction
/// maps (`crate::ordered_sums`), which recovery verifies before replaying the log's last
/// transaction. The kernel and e2fsck would replay that transaction without the check — the
/// metadata over blocks whose data never reached the device — so they must refuse the
/// journal. Set while a journal with the technique is open; cleared by a clean unmount and
/// by recovery.
pub const INCOMPAT_CJFS_OSUM: u32 = 0x2000_0000;

/// Offset of cjfs' log-area table in the journal superblock's block: past the 1024 bytes
/// JBD2 defines (and checksums), which is all the kernel and e2fsck read; both write the
/// block back whole, so the table survives their superblock updates.
pub const AREA_TABLE_OFFSET: usize = 0x400;
/// Magic of the log-area table ("CJLA", big-endian as the rest of JBD2): every entry a log.
pub const AREA_TABLE_MAGIC: u32 = 0x434A_4C41;
/// Magic of the log-area table with typed entries ("CJLB"): written when some area is not a
/// log (an ijournal area), so a journal with only extra logs keeps the `CJLA` bytes.
pub const AREA_TABLE_MAGIC_TYPED: u32 = 0x434A_4C42;
/// `JBD2_DEFAULT_FAST_COMMIT_BLOCKS`: fast-commit blocks when `s_num_fc_blks` is 0.
pub const DEFAULT_FC_BLOCKS: u64 = 256;
/// Smallest ijournal area (its header block and a ring of 15 blocks).
pub const MIN_IJOURNAL_AREA_BLOCKS: u32 = 16;
/// Most extra log areas the table holds.
pub const MAX_LOG_AREAS: usize = 64;

/// Compat features we understand.
pub const KNOWN_COMPAT: u32 = COMPAT_CHECKSUM;
/// Incompat features we can replay and write.
pub const SUPPORTED_INCOMPAT: u32 = INCOMPAT_REVOKE
    | INCOMPAT_64BIT
    | INCOMPAT_ASYNC_COMMIT
    | INCOMPAT_CSUM_V2
    | INCOMPAT_CSUM_V3
    | INCOMPAT_CJFS_LOGS
    | INCOMPAT_CJFS_IJOURNAL
    | INCOMPAT_CJFS_OSUM
    | INCOMPAT_FAST_COMMIT;
/// Ro-compat features we understand (none are defined by JBD2).
pub const KNOWN_RO_COMPAT: u32 = 0;

/// `JBD2_CRC32_CHKSUM`: `s_checksum_type` / `h_chksum_type` for crc32 (v1 commit checksums).
pub const CHKSUM_TYPE_CRC32: u8 = 1;
/// `JBD2_MD5_CHKSUM`.
pub const CHKSUM_TYPE_MD5: u8 = 2;
/// `JBD2_SHA1_CHKSUM`.
pub const CHKSUM_TYPE_SHA1: u8 = 3;
/// `JBD2_CRC32C_CHKSUM`: the only `s_checksum_type` valid with csum v2/v3.
pub const CHKSUM_TYPE_CRC32C: u8 = 4;

/// The journal block size a fresh superblock gets unless formatted on a device of another
/// block size (JBD2 logs in file-system blocks, so it is always the file system's).
pub const JOURNAL_BLOCK_SIZE: u32 = DEFAULT_BLOCK_SIZE as u32;
/// Smallest journal block that holds the log-area table of [`MAX_LOG_AREAS`] areas (typed
/// entries, the larger form) past the JBD2 superblock. On smaller blocks (1 KiB, where the
/// superblock fills the block) the table has a block of its own instead: journal-inode block
/// `s_maxlen`, the first past the primary journal, at offset 0, and the extra areas follow it
/// (see [`area_table_blocks`]).
pub const AREA_TABLE_MIN_BLOCK: usize = AREA_TABLE_OFFSET + 8 + 12 * MAX_LOG_AREAS + 4;

/// Blocks the area table takes of its own in a journal inode of `block_size`-byte blocks
/// with `extra_areas` extra areas: 1 where the table does not fit beside the superblock,
/// else 0.
pub const fn area_table_blocks(block_size: usize, extra_areas: usize) -> u64 {
    if extra_areas > 0 && block_size < AREA_TABLE_MIN_BLOCK { 1 } else { 0 }
}
/// `JBD2_MIN_JOURNAL_BLOCKS`: the kernel and e2fsprogs refuse smaller journals. Not enforced
/// here (tests use tiny logs), but anything meant for the kernel must be at least this long.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;

/// The three feature words of a journal superblock, with the queries the format code needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalFeatures {
    /// `s_feature_compat`.
    pub compat: u32,
    /// `s_feature_incompat`.
    pub incompat: u32,
    /// `s_feature_ro_compat`.
    pub ro_compat: u32,
}

impl JournalFeatures {
    /// Features from the three words.
    pub const fn new(compat: u32, incompat: u32, ro_compat: u32) -> Self {
        JournalFeatures { compat, incompat, ro_compat }
    }

    /// What cjfs writes: revoke + 64-bit tags, plus csum v3 when `csum_v3`.
    pub const fn cjfs(csum_v3: bool) -> Self {
        let mut incompat = INCOMPAT_REVOKE | INCOMPAT_64BIT;
        if csum_v3 {
            incompat |= INCOMPAT_CSUM_V3;
        }
        JournalFeatures { compat: 0, incompat, ro_compat: 0 }
    }

    /// `INCOMPAT_64BIT` is set.
    pub const fn has_64bit(&self) -> bool {
        self.incompat & INCOMPAT_64BIT != 0
    }
    /// `INCOMPAT_CSUM_V2` is set.
    pub const fn csum_v2(&self) -> bool {
        self.incompat & INCOMPAT_CSUM_V2 != 0
    }
    /// `INCOMPAT_CSUM_V3` is set.
    pub const fn csum_v3(&self) -> bool {
        self.incompat & INCOMPAT_CSUM_V3 != 0
    }
    /// csum v2 or v3 (`jbd2_journal_has_csum_v2or3`): crc32c block checksums are present.
    pub const fn csum_v2or3(&self) -> bool {
        self.incompat & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) != 0
    }
    /// `COMPAT_CHECKSUM` (v1 transaction checksums) is set.
    pub const fn compat_checksum(&self) -> bool {
        self.compat & COMPAT_CHECKSUM != 0
    }
    /// `INCOMPAT_ASYNC_COMMIT` is set.
    pub const fn async_commit(&self) -> bool {
        self.incompat & INCOMPAT_ASYNC_COMMIT != 0
    }
    /// `INCOMPAT_REVOKE` is set.
    pub const fn revoke(&self) -> bool {
        self.incompat & INCOMPAT_REVOKE != 0
    }
    /// `INCOMPAT_FAST_COMMIT` is set.
    pub const fn fast_commit(&self) -> bool {
        self.incompat & INCOMPAT_FAST_COMMIT != 0
    }

    /// Size of one descriptor tag (`journal_tag_bytes()`): 16 with csum v3; otherwise
    /// 12 (+2 with csum v2) with 64-bit block numbers and 8 (+2 with csum v2) without.
    pub const fn tag_bytes(&self) -> usize {
        if self.csum_v3() {
            return TAG3_BYTES;
        }
        let mut sz = TAG_BYTES_BASE;
        if self.csum_v2() {
            sz += 2;
        }
        if self.has_64bit() { sz } else { sz - 4 }
    }

    /// Bytes reserved at the end of descriptor and revoke blocks for the tail checksum.
    pub const fn tail_size(&self) -> usize {
        if self.csum_v2or3() { BLOCK_TAIL_SIZE } else { 0 }
    }

    /// Size of one revoke record: 8 with 64-bit block numbers, else 4.
    pub const fn revoke_record_len(&self) -> usize {
        if self.has_64bit() { 8 } else { 4 }
    }
}

/// Names of the set journal incompat bits, the unknown ones together in hex (`0x...`) last.
pub fn incompat_feature_names(bits: u32) -> Vec<String> {
    let names = [
        (INCOMPAT_CJFS_LOGS, "cjfs_logs"),
        (INCOMPAT_CJFS_IJOURNAL, "cjfs_ijournal"),
        (INCOMPAT_CJFS_OSUM, "cjfs_ordered_sums"),
        (INCOMPAT_REVOKE, "revoke"),
        (INCOMPAT_64BIT, "64bit"),
        (INCOMPAT_ASYNC_COMMIT, "async_commit"),
        (INCOMPAT_CSUM_V2, "csum_v2"),
        (INCOMPAT_CSUM_V3, "csum_v3"),
        (INCOMPAT_FAST_COMMIT, "fast_commit"),
    ];
    let mut out: Vec<String> = Vec::new();
    let mut rest = bits;
    for (bit, name) in names {
        if bits & bit != 0 {
            out.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        out.push(format!("0x{rest:x}"));
    }
    out
}

/// What an extra area of the journal inode holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AreaKind {
    /// A JBD2 log of its own (its superblock at its first block): per-core journaling.
    #[default]
    Log,
    /// An ijournal area (iJournaling's fsync records; the file system's format, see
    /// `cjfs_fs::ondisk::ijournal`): never replayed as a log.
    IJournal,
}

impl AreaKind {
    fn code(self) -> u32 {
        match self {
            AreaKind::Log => 0,
            AreaKind::IJournal => 1,
        }
    }

    fn from_code(c: u32) -> Option<AreaKind> {
        match c {
            0 => Some(AreaKind::Log),
            1 => Some(AreaKind::IJournal),
            _ => None,
        }
    }

    /// The smallest area of this kind.
    pub fn min_blocks(self) -> u32 {
        match self {
            AreaKind::Log => MIN_JOURNAL_BLOCKS,
            AreaKind::IJournal => MIN_IJOURNAL_AREA_BLOCKS,
        }
    }
}

/// An extra area inside the journal inode, past the primary journal's `s_maxlen` (the kernel
/// and e2fsck take `s_maxlen` as the journal's length and never look beyond it): a log of its
/// own or an ijournal area.
///
/// The table of them is stored big-endian at [`AREA_TABLE_OFFSET`] of the primary journal's
/// superblock block (blocks under [`AREA_TABLE_MIN_BLOCK`] bytes: at offset 0 of the block
/// after the primary journal, see [`area_table_blocks`]). When every area is a log: `u32 magic` ([`AREA_TABLE_MAGIC`], "CJLA"),
/// `u32 count`, `count × (u32 first, u32 len)` in journal-inode blocks, ascending and
/// disjoint, then `u32 crc32c` (seed !0) of everything before it. When some area is of
/// another kind: magic [`AREA_TABLE_MAGIC_TYPED`] ("CJLB") and `count × (u32 first, u32 len,
/// u32 kind)` (0 = log, 1 = ijournal), the rest as before. Absent (no magic) means no extra
/// areas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogArea {
    /// First block of the area, counted in the journal inode (its superblock).
    pub first: u32,
    /// Blocks in the area, its superblock included.
    pub len: u32,
    /// What it holds.
    pub kind: AreaKind,
}

impl LogArea {
    /// A log area.
    pub const fn log(first: u32, len: u32) -> Self {
        LogArea { first, len, kind: AreaKind::Log }
    }
}

/// Decode the area table at byte `at` of `block`, checked for shape: from block `free_from`
/// of the journal inode on (past the primary log and the table's own block, if any),
/// ascending, disjoint, each at least its kind's minimum.
/// Whether the areas lie inside the journal inode is [`read_log_areas`]'s check (the primary
/// log is decoded over its own `s_maxlen` blocks, which never hold an area).
fn decode_area_table(block: &[u8], at: usize, free_from: u64) -> JResult<Vec<LogArea>> {
    let corrupt = |msg: String| JournalError::Corrupt(format!("journal log-area table: {msg}"));
    if block.len() < at + 8 {
        return Ok(Vec::new());
    }
    let entry = match rd_be32(block, at) {
        AREA_TABLE_MAGIC => 8,
        AREA_TABLE_MAGIC_TYPED => 12,
        _ => return Ok(Vec::new()),
    };
    let count = rd_be32(block, at + 4) as usize;
    if count > MAX_LOG_AREAS {
        return Err(corrupt(format!("{count} areas (at most {MAX_LOG_AREAS})")));
    }
    let end = at + 8 + entry * count;
    if block.len() < end + 4 {
        return Err(corrupt(format!("{count} areas do not fit the block")));
    }
    let stored = rd_be32(block, end);
    let computed = crate::checksum::crc32c(!0, &block[at..end]);
    if stored != computed {
        return Err(corrupt(format!("checksum 0x{stored:08x} does not match computed 0x{computed:08x}")));
    }
    let mut areas = Vec::with_capacity(count);
    let mut next_free = free_from;
    for i in 0..count {
        let off = at + 8 + entry * i;
        let kind = if entry == 12 {
            let code = rd_be32(block, off + 8);
            AreaKind::from_code(code).ok_or_else(|| corrupt(format!("area {i} has unknown kind {code}")))?
        } else {
            AreaKind::Log
        };
        let a = LogArea { first: rd_be32(block, off), len: rd_be32(block, off + 4), kind };
        let (first, len) = (u64::from(a.first), u64::from(a.len));
        if first < next_free {
            return Err(corrupt(format!(
                "area {i} at block {first} overlaps the journal or the area before it (free from {next_free})"
            )));
        }
        if len < u64::from(kind.min_blocks()) {
            return Err(corrupt(format!(
                "area {i} (blocks {first}+{len}) is under {} blocks",
                kind.min_blocks()
            )));
        }
        next_free = first + len;
        areas.push(a);
    }
    Ok(areas)
}

/// Write the area table for `areas` into `block` at byte `at` (nothing when there are none,
/// or when the block has no room for it there: a small block's table has a block of its
/// own, written once by [`format_journal_with_areas`]).
fn encode_area_table(areas: &[LogArea], block: &mut [u8], at: usize) {
    let typed = areas.iter().any(|a| a.kind != AreaKind::Log);
    let entry = if typed { 12 } else { 8 };
    if areas.is_empty() || block.len() < at + 12 + entry * areas.len() {
        return;
    }
    let magic = if typed { AREA_TABLE_MAGIC_TYPED } else { AREA_TABLE_MAGIC };
    wr_be32(block, at, magic);
    wr_be32(block, at + 4, areas.len() as u32);
    for (i, a) in areas.iter().enumerate() {
        let off = at + 8 + entry * i;
        wr_be32(block, off, a.first);
        wr_be32(block, off + 4, a.len);
        if typed {
            wr_be32(block, off + 8, a.kind.code());
        }
    }
    let end = at + 8 + entry * areas.len();
    let crc = crate::checksum::crc32c(!0, &block[at..end]);
    wr_be32(block, end, crc);
}

/// A decoded journal superblock. Field names follow `journal_superblock_t`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSuperblock {
    /// Header block type: [`BLOCKTYPE_SB_V1`] or [`BLOCKTYPE_SB_V2`].
    pub blocktype: u32,
    /// Journal block size in bytes (the file system's block size).
    pub s_blocksize: u32,
    /// Total log blocks, including the superblock.
    pub s_maxlen: u32,
    /// First log block of the circular log.
    pub s_first: u32,
    /// First transaction id expected in the log.
    pub s_sequence: u32,
    /// Log block of the first transaction; 0 means the log is empty (clean).
    pub s_start: u32,
    /// Error value recorded by `jbd2_journal_abort` (negative errno), 0 if none.
    pub s_errno: i32,
    /// Compat features.
    pub s_feature_compat: u32,
    /// Incompat features.
    pub s_feature_incompat: u32,
    /// Ro-compat features.
    pub s_feature_ro_compat: u32,
    /// Journal UUID (for an internal journal, the file system UUID).
    pub s_uuid: [u8; 16],
    /// Number of file systems sharing the log.
    pub s_nr_users: u32,
    /// Blocknr of dynamic superblock copy (unused).
    pub s_dynsuper: u32,
    /// Limit of journal blocks per transaction (unused, 0).
    pub s_max_transaction: u32,
    /// Limit of data blocks per transaction (unused, 0).
    pub s_max_trans_data: u32,
    /// Checksum algorithm ([`CHKSUM_TYPE_CRC32C`] with csum v2/v3).
    pub s_checksum_type: u8,
    /// Number of fast-commit blocks after the log.
    pub s_num_fc_blks: u32,
    /// Head of the log, only up to date while the file system is clean.
    pub s_head: u32,
    /// cjfs, while `cjfs_ordered_sums` is set (else 0, as JBD2 leaves its padding): the
    /// newest transaction whose ordered data is known durable, so recovery need not check
    /// it against its sums (`crate::ordered_sums`).
    pub osum_confirmed: u32,
    /// Superblock checksum as read (recomputed by [`JournalSuperblock::encode`]).
    pub s_checksum: u32,
    /// UUIDs of the file systems sharing the log.
    pub s_users: [u8; SB_USERS_LEN],
    /// cjfs' extra log areas (stored past the 1024-byte superblock; see [`LogArea`]).
    pub log_areas: Vec<LogArea>,
}

impl JournalSuperblock {
    /// A fresh v2 superblock for a log of `maxlen` blocks with cjfs' features (revoke,
    /// 64-bit, and csum v3 when `csum_v3`): `s_first = 1`, `s_sequence = 1`, `s_start = 0`,
    /// one user whose id is `uuid`.
    pub fn new_v2(maxlen: u32, uuid: [u8; 16], csum_v3: bool) -> Self {
        Self::new_v2_with_features(maxlen, uuid, JournalFeatures::cjfs(csum_v3))
    }

    /// A fresh v2 superblock with explicit features (see [`JournalSuperblock::new_v2`]).
    pub fn new_v2_with_features(maxlen: u32, uuid: [u8; 16], features: JournalFeatures) -> Self {
        let mut users = [0u8; SB_USERS_LEN];
        users[..16].copy_from_slice(&uuid);
        JournalSuperblock {
            blocktype: BLOCKTYPE_SB_V2,
            s_blocksize: JOURNAL_BLOCK_SIZE,
            s_maxlen: maxlen,
            s_first: 1,
            s_sequence: 1,
            s_start: 0,
            s_errno: 0,
            s_feature_compat: features.compat,
            s_feature_incompat: features.incompat,
            s_feature_ro_compat: features.ro_compat,
            s_uuid: uuid,
            s_nr_users: 1,
            s_dynsuper: 0,
            s_max_transaction: 0,
            s_max_trans_data: 0,
            s_checksum_type: if features.csum_v2or3() { CHKSUM_TYPE_CRC32C } else { 0 },
            s_num_fc_blks: 0,
            s_head: 0,
            osum_confirmed: 0,
            s_checksum: 0,
            s_users: users,
            log_areas: Vec::new(),
        }
    }

    /// The feature words (all zero for a v1 superblock, as JBD2 ignores them there).
    pub fn features(&self) -> JournalFeatures {
        if self.blocktype == BLOCKTYPE_SB_V1 {
            return JournalFeatures::default();
        }
        JournalFeatures::new(self.s_feature_compat, self.s_feature_incompat, self.s_feature_ro_compat)
    }

    /// The checksum seed for descriptor, commit, revoke and tag checksums.
    pub fn csum_seed(&self) -> u32 {
        csum_seed(&self.s_uuid)
    }

    /// Fast-commit blocks at the end of the journal (`jbd2_journal_get_num_fc_blks`:
    /// `s_num_fc_blks`, or 256 when it is 0), counted only while the journal has the
    /// fast_commit feature.
    pub fn fc_blocks(&self) -> u64 {
        if !self.features().fast_commit() {
            return 0;
        }
        if self.s_num_fc_blks == 0 { DEFAULT_FC_BLOCKS } else { u64::from(self.s_num_fc_blks) }
    }

    /// One past the last block of the circular log (JBD2's `j_last`): `s_maxlen`, less the
    /// fast-commit area while the journal has the fast_commit feature.
    pub fn log_end(&self) -> u64 {
        u64::from(self.s_maxlen).saturating_sub(self.fc_blocks())
    }

    /// True if the log holds transactions that must be replayed (`s_start != 0`).
    pub fn needs_recovery(&self) -> bool {
        self.s_start != 0
    }

    /// Decode and validate a superblock read from log block 0 of an area of `area_len`
    /// blocks. Checks the magic, block type, block size, `s_maxlen <= area_len`, `s_first`,
    /// `s_start`, feature support and (csum v2/v3) the checksum type and checksum.
    ///
    /// A v1 superblock is accepted; its v2-only fields (features and beyond) are ignored and
    /// returned as zero, as JBD2 and e2fsck treat them.
    pub fn decode(buf: &[u8], area_len: u64) -> JResult<Self> {
        let corrupt = |msg: String| JournalError::Corrupt(format!("journal superblock: {msg}"));
        let incompatible = |msg: String| JournalError::Incompatible(format!("journal superblock: {msg}"));
        if buf.len() < SB_CSUM_LEN {
            return Err(corrupt(format!("buffer of {} bytes is shorter than 1024", buf.len())));
        }
        let hdr = BlockHeader::decode(buf)?;
        if hdr.magic != JBD2_MAGIC {
            return Err(corrupt(format!(
                "h_magic 0x{:08x} is not the JBD2 magic 0x{JBD2_MAGIC:08x}",
                hdr.magic
            )));
        }
        match hdr.blocktype {
            BLOCKTYPE_SB_V1 | BLOCKTYPE_SB_V2 => {}
            BLOCKTYPE_DESCRIPTOR | BLOCKTYPE_COMMIT | BLOCKTYPE_REVOKE | BLOCKTYPE_FC => {
                return Err(corrupt(format!(
                    "h_blocktype {} is a log block type, not a superblock",
                    hdr.blocktype
                )));
            }
            other => {
                return Err(incompatible(format!("unknown superblock h_blocktype {other}")));
            }
        }
        let v1 = hdr.blocktype == BLOCKTYPE_SB_V1;
        let field = |off: usize| if v1 { 0 } else { rd_be32(buf, off) };

        let s_blocksize = rd_be32(buf, SB_BLOCKSIZE_OFFSET);
        if s_blocksize as usize != buf.len() {
            let msg = format!(
                "s_blocksize {s_blocksize} differs from the file system's block size {} (JBD2 logs \
                 in file-system blocks)",
                buf.len()
            );
            return Err(if s_blocksize.is_power_of_two() && (512..=65536).contains(&s_blocksize) {
                incompatible(msg)
            } else {
                corrupt(msg)
            });
        }
        let s_maxlen = rd_be32(buf, SB_MAXLEN_OFFSET);
        if u64::from(s_maxlen) > area_len {
            return Err(corrupt(format!("s_maxlen {s_maxlen} exceeds the journal area ({area_len} blocks)")));
        }
        let s_first = rd_be32(buf, SB_FIRST_OFFSET);
        if s_first == 0 || s_first >= s_maxlen {
            return Err(corrupt(format!("s_first {s_first} outside 1..{s_maxlen}")));
        }
        let s_start = rd_be32(buf, SB_START_OFFSET);
        if s_start != 0 && (s_start < s_first || s_start >= s_maxlen) {
            return Err(corrupt(format!("s_start {s_start} outside the log {s_first}..{s_maxlen}")));
        }

        let mut uuid = [0u8; 16];
        let mut users = [0u8; SB_USERS_LEN];
        if !v1 {
            uuid.copy_from_slice(&buf[SB_UUID_OFFSET..SB_UUID_OFFSET + 16]);
            users.copy_from_slice(&buf[SB_USERS_OFFSET..SB_USERS_OFFSET + SB_USERS_LEN]);
        }
        let mut sb = JournalSuperblock {
            blocktype: hdr.blocktype,
            s_blocksize,
            s_maxlen,
            s_first,
            s_sequence: rd_be32(buf, SB_SEQUENCE_OFFSET),
            s_start,
            s_errno: rd_be32(buf, SB_ERRNO_OFFSET) as i32,
            s_feature_compat: field(SB_FEATURE_COMPAT_OFFSET),
            s_feature_incompat: field(SB_FEATURE_INCOMPAT_OFFSET),
            s_feature_ro_compat: field(SB_FEATURE_RO_COMPAT_OFFSET),
            s_uuid: uuid,
            s_nr_users: field(SB_NR_USERS_OFFSET),
            s_dynsuper: field(SB_DYNSUPER_OFFSET),
            s_max_transaction: field(SB_MAX_TRANSACTION_OFFSET),
            s_max_trans_data: field(SB_MAX_TRANS_DATA_OFFSET),
            s_checksum_type: if v1 { 0 } else { buf[SB_CHECKSUM_TYPE_OFFSET] },
            s_num_fc_blks: field(SB_NUM_FC_BLKS_OFFSET),
            s_head: field(SB_HEAD_OFFSET),
            osum_confirmed: field(SB_OSUM_CONFIRMED_OFFSET),
            s_checksum: field(SB_CHECKSUM_OFFSET),
            s_users: users,
            log_areas: Vec::new(),
        };

        let f = sb.features();
        let unknown = f.incompat & !SUPPORTED_INCOMPAT;
        if unknown != 0 {
            return Err(incompatible(format!(
                "unknown incompat features {} (s_feature_incompat 0x{:x})",
                incompat_feature_names(unknown).join(","),
                f.incompat
            )));
        }
        let unknown_ro = f.ro_compat & !KNOWN_RO_COMPAT;
        if unknown_ro != 0 {
            return Err(incompatible(format!("unknown ro_compat features 0x{unknown_ro:x}")));
        }
        if !v1 {
            sb.log_areas = decode_area_table(buf, AREA_TABLE_OFFSET, u64::from(sb.s_maxlen))?;
        }
        // A small block's table is in a block of its own, checked by `read_journal_areas`.
        if f.incompat & INCOMPAT_CJFS_LOGS != 0
            && !sb.log_areas.iter().any(|a| a.kind == AreaKind::Log)
            && buf.len() >= AREA_TABLE_MIN_BLOCK
        {
            return Err(corrupt("incompat cjfs_logs is set but there is no log-area table".into()));
        }
        if f.incompat & INCOMPAT_CJFS_IJOURNAL != 0
            && !sb.log_areas.iter().any(|a| a.kind == AreaKind::IJournal)
            && buf.len() >= AREA_TABLE_MIN_BLOCK
        {
            return Err(corrupt("incompat cjfs_ijournal is set but the journal has no ijournal area".into()));
        }
        if f.csum_v2() && f.csum_v3() {
            return Err(corrupt("both csum_v2 and csum_v3 are set".into()));
        }
        if f.csum_v2or3() {
            if f.compat_checksum() {
                return Err(corrupt("compat checksum (v1) set together with csum v2/v3".into()));
            }
            if sb.s_checksum_type != CHKSUM_TYPE_CRC32C {
                return Err(corrupt(format!(
                    "s_checksum_type {} (csum v2/v3 requires crc32c = {CHKSUM_TYPE_CRC32C})",
                    sb.s_checksum_type
                )));
            }
            let computed = superblock_csum(buf);
            if computed != sb.s_checksum {
                return Err(corrupt(format!(
                    "s_checksum 0x{:08x} does not match computed 0x{computed:08x}",
                    sb.s_checksum
                )));
            }
        }
        Ok(sb)
    }

    /// Encode into a full journal block of `s_blocksize` bytes. With csum v2/v3 the checksum
    /// is computed and stored (the `s_checksum` field of `self` is ignored). The area table
    /// goes in only on blocks of at least [`AREA_TABLE_MIN_BLOCK`] bytes (smaller blocks keep
    /// it in a block of its own).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.s_blocksize as usize];
        BlockHeader { magic: JBD2_MAGIC, blocktype: self.blocktype, sequence: 0 }.encode_into(&mut b);
        wr_be32(&mut b, SB_BLOCKSIZE_OFFSET, self.s_blocksize);
        wr_be32(&mut b, SB_MAXLEN_OFFSET, self.s_maxlen);
        wr_be32(&mut b, SB_FIRST_OFFSET, self.s_first);
        wr_be32(&mut b, SB_SEQUENCE_OFFSET, self.s_sequence);
        wr_be32(&mut b, SB_START_OFFSET, self.s_start);
        wr_be32(&mut b, SB_ERRNO_OFFSET, self.s_errno as u32);
        if self.blocktype == BLOCKTYPE_SB_V1 {
            return b;
        }
        wr_be32(&mut b, SB_FEATURE_COMPAT_OFFSET, self.s_feature_compat);
        wr_be32(&mut b, SB_FEATURE_INCOMPAT_OFFSET, self.s_feature_incompat);
        wr_be32(&mut b, SB_FEATURE_RO_COMPAT_OFFSET, self.s_feature_ro_compat);
        b[SB_UUID_OFFSET..SB_UUID_OFFSET + 16].copy_from_slice(&self.s_uuid);
        wr_be32(&mut b, SB_NR_USERS_OFFSET, self.s_nr_users);
        wr_be32(&mut b, SB_DYNSUPER_OFFSET, self.s_dynsuper);
        wr_be32(&mut b, SB_MAX_TRANSACTION_OFFSET, self.s_max_transaction);
        wr_be32(&mut b, SB_MAX_TRANS_DATA_OFFSET, self.s_max_trans_data);
        b[SB_CHECKSUM_TYPE_OFFSET] = self.s_checksum_type;
        wr_be32(&mut b, SB_NUM_FC_BLKS_OFFSET, self.s_num_fc_blks);
        wr_be32(&mut b, SB_HEAD_OFFSET, self.s_head);
        wr_be32(&mut b, SB_OSUM_CONFIRMED_OFFSET, self.osum_confirmed);
        b[SB_USERS_OFFSET..SB_USERS_OFFSET + SB_USERS_LEN].copy_from_slice(&self.s_users);
        let csum = if self.features().csum_v2or3() { superblock_csum(&b) } else { self.s_checksum };
        wr_be32(&mut b, SB_CHECKSUM_OFFSET, csum);
        encode_area_table(&self.log_areas, &mut b, AREA_TABLE_OFFSET);
        b
    }
}

/// Read and decode the superblock at log block 0 of `area`.
pub fn read_superblock(dev: &dyn BlockDevice, area: &JournalArea) -> JResult<JournalSuperblock> {
    let raw = dev.read_block(area.map(0)?)?;
    JournalSuperblock::decode(&raw[..], area.len())
}

/// Write `sb` to log block 0 of `area` and wait for the write (`fua` makes it durable).
pub fn write_superblock(
    dev: &dyn BlockDevice,
    area: &JournalArea,
    sb: &JournalSuperblock,
    fua: bool,
) -> JResult<()> {
    let req = WriteRequest {
        block: area.map(0)?,
        bufs: vec![block_from_slice(&sb.encode())],
        tag: WriteTag::kind(BlockKind::JournalSuper),
        fua,
    };
    dev.submit(req)?.wait()?;
    Ok(())
}

/// Format a fresh, empty journal over the whole of `area`: a v2 superblock with cjfs'
/// features (revoke, 64-bit, csum v3 when `csum_v3`), `s_uuid = uuid`, and log block 1
/// zeroed so a stale descriptor left there can never be taken for a transaction. Flushes the
/// device and returns the superblock written.
pub fn format_journal(
    dev: &dyn BlockDevice,
    area: &JournalArea,
    uuid: [u8; 16],
    csum_v3: bool,
) -> JResult<JournalSuperblock> {
    let len = area.len();
    if len < 2 {
        return Err(JournalError::Incompatible(format!(
            "journal area of {len} blocks is too small (need a superblock and a log)"
        )));
    }
    let maxlen = u32::try_from(len).map_err(|_| {
        JournalError::Incompatible(format!("journal area of {len} blocks exceeds 2^32 blocks"))
    })?;
    let mut sb = JournalSuperblock::new_v2(maxlen, uuid, csum_v3);
    sb.s_blocksize = dev.block_size() as u32;
    let zero = zeroed_buf(dev.block_size());
    let t1 = dev.submit(WriteRequest {
        block: area.map(u64::from(sb.s_first))?,
        bufs: vec![zero],
        tag: WriteTag::kind(BlockKind::JournalSuper),
        fua: false,
    })?;
    t1.wait()?;
    write_superblock(dev, area, &sb, false)?;
    dev.flush()?;
    Ok(sb)
}

/// The logs of a journal inode mapped by `inode_area`: the primary journal (log 0, its first
/// `s_maxlen` blocks) and the extra log areas its superblock's table lists, each a log of its own.
/// Reads only; returns the primary superblock too. Areas of other kinds are left out (see
/// [`read_journal_areas`]).
pub fn read_log_areas(
    dev: &dyn BlockDevice,
    inode_area: &JournalArea,
) -> JResult<(JournalSuperblock, Vec<JournalArea>)> {
    let (sb, logs, _) = read_journal_areas(dev, inode_area)?;
    Ok((sb, logs))
}

/// Every area of a journal inode mapped by `inode_area`: the primary superblock, the logs
/// (the primary journal first, then the extra logs) and the ijournal areas, in table order.
/// Reads only.
pub fn read_journal_areas(
    dev: &dyn BlockDevice,
    inode_area: &JournalArea,
) -> JResult<(JournalSuperblock, Vec<JournalArea>, Vec<JournalArea>)> {
    let mut sb = read_superblock(dev, inode_area)?;
    let maxlen = u64::from(sb.s_maxlen);
    if sb.log_areas.is_empty()
        && (sb.s_blocksize as usize) < AREA_TABLE_MIN_BLOCK
        && inode_area.len() > maxlen
    {
        let table = dev.read_block(inode_area.map(maxlen)?)?;
        sb.log_areas = decode_area_table(&table, 0, maxlen + 1)?;
    }
    if sb.s_feature_incompat & INCOMPAT_CJFS_LOGS != 0
        && !sb.log_areas.iter().any(|a| a.kind == AreaKind::Log)
    {
        return Err(JournalError::Corrupt("incompat cjfs_logs is set but there is no log-area table".into()));
    }
    if sb.s_feature_incompat & INCOMPAT_CJFS_IJOURNAL != 0
        && !sb.log_areas.iter().any(|a| a.kind == AreaKind::IJournal)
    {
        return Err(JournalError::Corrupt(
            "incompat cjfs_ijournal is set but the journal has no ijournal area".into(),
        ));
    }
    let mut logs = vec![inode_area.slice(0, maxlen)?];
    let mut ijournal = Vec::new();
    for (i, a) in sb.log_areas.iter().enumerate() {
        let area = inode_area.slice(u64::from(a.first), u64::from(a.len)).map_err(|_| {
            JournalError::Corrupt(format!(
                "journal log-area table: area {i} (blocks {}+{}) lies beyond the journal inode ({} blocks)",
                a.first,
                a.len,
                inode_area.len()
            ))
        })?;
        match a.kind {
            AreaKind::Log => logs.push(area),
            AreaKind::IJournal => ijournal.push(area),
        }
    }
    Ok((sb, logs, ijournal))
}

/// Format the journal inode mapped by `inode_area`: a primary journal of `primary_len`
/// blocks and, after it, one extra log area per entry of `extra_lens`, each an empty JBD2
/// log with the primary's features, listed in the primary superblock's log-area table.
/// Flushes; returns the primary superblock.
pub fn format_journal_areas(
    dev: &dyn BlockDevice,
    inode_area: &JournalArea,
    uuid: [u8; 16],
    csum_v3: bool,
    primary_len: u64,
    extra_lens: &[u64],
) -> JResult<JournalSuperblock> {
    let extra: Vec<(u64, AreaKind)> = extra_lens.iter().map(|&l| (l, AreaKind::Log)).collect();
    format_journal_with_areas(dev, inode_area, uuid, csum_v3, primary_len, &extra)
}

/// [`format_journal_areas`] with areas of any kind: logs are formatted as empty JBD2 logs;
/// an ijournal area is only listed (its owner, the file system, formats it).
pub fn format_journal_with_areas(
    dev: &dyn BlockDevice,
    inode_area: &JournalArea,
    uuid: [u8; 16],
    csum_v3: bool,
    primary_len: u64,
    extra: &[(u64, AreaKind)],
) -> JResult<JournalSuperblock> {
    let table_blocks = area_table_blocks(dev.block_size(), extra.len());
    let total: u64 = primary_len + table_blocks + extra.iter().map(|(l, _)| l).sum::<u64>();
    if total > inode_area.len() || extra.len() > MAX_LOG_AREAS {
        return Err(JournalError::Incompatible(format!(
            "{} journal areas of {total} blocks in all do not fit a journal inode of {} blocks (at most \
             {MAX_LOG_AREAS} extra areas)",
            extra.len() + 1,
            inode_area.len()
        )));
    }
    let mut log_areas = Vec::with_capacity(extra.len());
    let mut first = primary_len + table_blocks;
    for &(len, kind) in extra {
        if len < u64::from(kind.min_blocks()) {
            let what = match kind {
                AreaKind::Log => "log area",
                AreaKind::IJournal => "ijournal area",
            };
            return Err(JournalError::Incompatible(format!(
                "{what} of {len} blocks (at least {})",
                kind.min_blocks()
            )));
        }
        if kind == AreaKind::Log {
            format_journal(dev, &inode_area.slice(first, len)?, uuid, csum_v3)?;
        }
        let narrow = |v: u64| {
            u32::try_from(v)
                .map_err(|_| JournalError::Incompatible(format!("journal area at block {v} beyond 2^32")))
        };
        log_areas.push(LogArea { first: narrow(first)?, len: narrow(len)?, kind });
        first += len;
    }
    let mut sb = format_journal(dev, &inode_area.slice(0, primary_len)?, uuid, csum_v3)?;
    if !log_areas.is_empty() {
        if table_blocks > 0 {
            let mut table = vec![0u8; dev.block_size()];
            encode_area_table(&log_areas, &mut table, 0);
            let req = WriteRequest {
                block: inode_area.map(primary_len)?,
                bufs: vec![block_from_slice(&table)],
                tag: WriteTag::kind(BlockKind::JournalSuper),
                fua: false,
            };
            dev.submit(req)?.wait()?;
        }
        sb.log_areas = log_areas;
        write_superblock(dev, inode_area, &sb, false)?;
        dev.flush()?;
    }
    Ok(sb)
}

#[cfg(test)]
mod tests {
    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;

    #[test]
    fn small_blocks_keep_the_area_table_in_a_block_of_its_own() {
        use cjfs_blockdev::{EmulatedSsd, SsdPreset};
        let dev = EmulatedSsd::with_block_size(SsdPreset::ramdisk(), 8192, 1024);
        let area = crate::JournalArea::new([(100u64, 4096u64)]);
        let sb = format_journal_areas(&dev, &area, [1; 16], true, 2048, &[]).expect("one log");
        assert_eq!(sb.s_blocksize, 1024);
        assert_eq!(read_superblock(&dev, &area.slice(0, 2048).unwrap()).unwrap().s_blocksize, 1024);
        // With 1 KiB blocks the table takes the block after the primary journal, and the
        // area follows it; the superblock block carries JBD2's 1024 bytes only.
        assert_eq!(area_table_blocks(1024, 1), 1);
        let sb = format_journal_areas(&dev, &area, [1; 16], true, 2048, &[2047]).expect("two logs");
        assert_eq!(sb.log_areas, vec![LogArea::log(2049, 2047)]);
        let raw = dev.read_block(100).unwrap();
        assert_eq!(JournalSuperblock::decode(&raw, 4096).unwrap().log_areas, vec![]);
        assert_eq!(rd_be32(&dev.read_block(100 + 2048).unwrap(), 0), AREA_TABLE_MAGIC);
        let (primary, areas) = read_log_areas(&dev, &area).expect("areas");
        assert_eq!((primary.log_areas.len(), areas.len()), (1, 2));
        assert_eq!(areas[1].map(0).ok(), Some(100 + 2049));
        assert_eq!(read_superblock(&dev, &areas[1]).unwrap().s_maxlen, 2047);
        // The private bit with the table block gone is corruption, named.
        let mut with_bit = primary.clone();
        with_bit.s_feature_incompat |= INCOMPAT_CJFS_LOGS;
        write_superblock(&dev, &area, &with_bit, false).unwrap();
        assert!(read_log_areas(&dev, &area).is_ok());
        dev.write_block(100 + 2048, zeroed_buf(1024), WriteTag::kind(BlockKind::JournalSuper)).unwrap();
        let e = read_log_areas(&dev, &area).unwrap_err().to_string();
        assert!(e.contains("cjfs_logs is set but there is no log-area table"), "{e}");
        assert!(format_journal_areas(&dev, &area, [1; 16], true, 2048, &[2048]).is_err(), "one block short");
        // A typed table (a log and an ijournal area) in its own block too.
        let sb = format_journal_with_areas(
            &dev,
            &area,
            [1; 16],
            true,
            2048,
            &[(1024, AreaKind::Log), (u64::from(MIN_IJOURNAL_AREA_BLOCKS), AreaKind::IJournal)],
        )
        .expect("a log and an ijournal area");
        assert_eq!(sb.log_areas[1].kind, AreaKind::IJournal);
        assert_eq!(rd_be32(&dev.read_block(100 + 2048).unwrap(), 0), AREA_TABLE_MAGIC_TYPED);
        let (_, logs, ij) = read_journal_areas(&dev, &area).expect("areas");
        assert_eq!((logs.len(), ij.len()), (2, 1));
        assert_eq!(ij[0].map(0).ok(), Some(100 + 2049 + 1024));
        // The ijournal bit set (live i-transactions) reads like the logs' bit: the table is in
        // its own block, so the superblock alone is no proof that an area is missing.
        let mut with_bit = sb.clone();
        with_bit.s_feature_incompat |= INCOMPAT_CJFS_IJOURNAL;
        write_superblock(&dev, &area, &with_bit, false).unwrap();
        let (_, _, ij) = read_journal_areas(&dev, &area).expect("ijournal bit on 1 KiB blocks");
        assert_eq!(ij.len(), 1);
        dev.write_block(100 + 2048, zeroed_buf(1024), WriteTag::kind(BlockKind::JournalSuper)).unwrap();
        let e = read_journal_areas(&dev, &area).unwrap_err().to_string();
        assert!(e.contains("cjfs_ijournal is set but the journal has no ijournal area"), "{e}");
        // A 2 KiB block holds the table.
        let dev = EmulatedSsd::with_block_size(SsdPreset::ramdisk(), 8192, 2048);
        let sb = format_journal_areas(&dev, &area, [1; 16], true, 2048, &[2048]).expect("two logs");
        assert_eq!(sb.log_areas.len(), 1);
        // A superblock read on a device of another block size is refused, naming both.
        let raw = dev.read_block(100).unwrap();
        let mut four = vec![0u8; 4096];
        four[..2048].copy_from_slice(&raw);
        let e = JournalSuperblock::decode(&four, 2048).unwrap_err().to_string();
        assert!(e.contains("s_blocksize 2048 differs from the file system's block size 4096"), "{e}");
    }
    use super::*;
    use crate::recovery::test_support::MemDev;

    fn uuid() -> [u8; 16] {
        let mut u = [0u8; 16];
        for (i, b) in u.iter_mut().enumerate() {
            *b = 0x10 + i as u8;
        }
        u
    }

    #[test]
    fn roundtrip_v2_csum3() {
        let mut sb = JournalSuperblock::new_v2(1024, uuid(), true);
        sb.s_sequence = 77;
        sb.s_start = 5;
        sb.s_errno = -5;
        sb.s_head = 9;
        let b = sb.encode();
        let d = JournalSuperblock::decode(&b, 1024).expect("decode");
        assert_eq!(d.s_checksum, superblock_csum(&b));
        let mut expect = sb.clone();
        expect.s_checksum = d.s_checksum;
        assert_eq!(d, expect);
        assert_eq!(d.features(), JournalFeatures::cjfs(true));
        assert_eq!(d.s_checksum_type, CHKSUM_TYPE_CRC32C);
        // Spot-check raw big-endian layout.
        assert_eq!(&b[0..4], &[0xC0, 0x3B, 0x39, 0x98]);
        assert_eq!(rd_be32(&b, 4), BLOCKTYPE_SB_V2);
        assert_eq!(rd_be32(&b, SB_MAXLEN_OFFSET), 1024);
        assert_eq!(rd_be32(&b, SB_SEQUENCE_OFFSET), 77);
        assert_eq!(&b[SB_USERS_OFFSET..SB_USERS_OFFSET + 16], &uuid());
        assert!(b[SB_CSUM_LEN..].iter().all(|&x| x == 0));
    }

    #[test]
    fn log_area_table_roundtrips_and_is_checked() {
        let mut sb = JournalSuperblock::new_v2(1024, uuid(), true);
        sb.log_areas = vec![LogArea::log(1024, 1024), LogArea::log(3000, 2000)];
        sb.s_feature_incompat |= INCOMPAT_CJFS_LOGS;
        let b = sb.encode();
        // The JBD2 superblock proper (and its checksum) is untouched by the table.
        assert_eq!(rd_be32(&b, SB_CHECKSUM_OFFSET), superblock_csum(&b));
        assert_eq!(rd_be32(&b, AREA_TABLE_OFFSET), AREA_TABLE_MAGIC);
        let d = JournalSuperblock::decode(&b, 5000).expect("decode");
        assert_eq!(d.log_areas, sb.log_areas);
        assert_ne!(d.s_feature_incompat & INCOMPAT_CJFS_LOGS, 0);
        let corrupt = |b: &[u8], area: u64, want: &str| match JournalSuperblock::decode(b, area) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains(want), "{m}"),
            other => panic!("expected Corrupt({want}), got {other:?}"),
        };
        let mut bad = b;
        bad[AREA_TABLE_OFFSET + 9] ^= 1;
        corrupt(&bad, 5000, "checksum");
        let mut overlap = sb.clone();
        overlap.log_areas[1].first = 1500;
        corrupt(&overlap.encode(), 5000, "overlaps");
        let mut inside = sb.clone();
        inside.log_areas[0].first = 1000;
        corrupt(&inside.encode(), 5000, "overlaps");
        let mut bit_only = JournalSuperblock::new_v2(1024, uuid(), true);
        bit_only.s_feature_incompat |= INCOMPAT_CJFS_LOGS;
        corrupt(&bit_only.encode(), 5000, "no log-area table");
    }

    #[test]
    fn extra_log_areas_are_formatted_and_found() {
        let dev = MemDev::new(4000);
        let inode = JournalArea::new([(100, 1500), (2000, 1600)]);
        let sb = format_journal_areas(&dev, &inode, uuid(), true, 1024, &[1024, 1024]).expect("format");
        assert_eq!(sb.s_maxlen, 1024);
        assert_eq!(sb.log_areas, vec![LogArea::log(1024, 1024), LogArea::log(2048, 1024)]);
        let (primary, areas) = read_log_areas(&dev, &inode).expect("read areas");
        assert_eq!((primary.s_maxlen, &primary.log_areas), (1024, &sb.log_areas));
        assert_eq!(areas.len(), 3);
        // The second area spans the two runs of the inode: its superblock at device block
        // 100 + 1024, its last block at 2000 + (2048 - 1500) - 1.
        assert_eq!(areas[1].map(0).ok(), Some(1124));
        assert_eq!(areas[1].map(1023).ok(), Some(2000 + 1024 + 1024 - 1500 - 1));
        for a in &areas[1..] {
            let s = read_superblock(&dev, a).expect("area superblock");
            assert_eq!((s.s_maxlen, s.s_start, s.log_areas.len()), (1024, 0, 0));
        }
        assert!(format_journal_areas(&dev, &inode, uuid(), true, 1024, &[3000]).is_err(), "too big");
        // A table naming blocks past the inode is refused where the inode is known.
        let short = inode.slice(0, 3000).expect("slice");
        match read_log_areas(&dev, &short) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("beyond the journal inode"), "{m}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert!(format_journal_areas(&dev, &inode, uuid(), true, 1024, &[100]).is_err(), "too small");
    }

    #[test]
    fn roundtrip_no_csum() {
        let sb = JournalSuperblock::new_v2(64, uuid(), false);
        let b = sb.encode();
        assert_eq!(rd_be32(&b, SB_CHECKSUM_OFFSET), 0);
        let d = JournalSuperblock::decode(&b, 64).expect("decode");
        assert_eq!(d, sb);
    }

    #[test]
    fn checksum_mismatch_is_corrupt() {
        let sb = JournalSuperblock::new_v2(64, uuid(), true);
        let mut b = sb.encode();
        b[SB_SEQUENCE_OFFSET + 3] ^= 1;
        match JournalSuperblock::decode(&b, 64) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("s_checksum"), "{m}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn validation_errors() {
        let sb = JournalSuperblock::new_v2(64, uuid(), false);
        let good = sb.encode();
        // Bad magic.
        let mut b = good.clone();
        b[0] = 0;
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Corrupt(_))));
        // maxlen beyond the area.
        match JournalSuperblock::decode(&good, 63) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("s_maxlen"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Smaller area than maxlen is fine the other way round.
        assert!(JournalSuperblock::decode(&good, 100).is_ok());
        // Block size.
        let mut b = good.clone();
        wr_be32(&mut b, SB_BLOCKSIZE_OFFSET, 1024);
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Incompatible(_))));
        wr_be32(&mut b, SB_BLOCKSIZE_OFFSET, 1000);
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Corrupt(_))));
        // s_first.
        let mut b = good.clone();
        wr_be32(&mut b, SB_FIRST_OFFSET, 0);
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Corrupt(_))));
        // s_start outside the log.
        let mut b = good.clone();
        wr_be32(&mut b, SB_START_OFFSET, 64);
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Corrupt(_))));
        // Log block type as superblock.
        let mut b = good.clone();
        wr_be32(&mut b, 4, BLOCKTYPE_COMMIT);
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Corrupt(_))));
        wr_be32(&mut b, 4, 9);
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Incompatible(_))));
        // Short buffer.
        assert!(matches!(JournalSuperblock::decode(&good[..100], 64), Err(JournalError::Corrupt(_))));
    }

    #[test]
    fn feature_checks() {
        // A fast-commit journal decodes; its log ends before the fast-commit area.
        let f = JournalFeatures::new(0, INCOMPAT_REVOKE | INCOMPAT_FAST_COMMIT, 0);
        let mut sb = JournalSuperblock::new_v2_with_features(2048, uuid(), f);
        let d = JournalSuperblock::decode(&sb.encode(), 2048).expect("fast commit");
        assert_eq!((d.fc_blocks(), d.log_end()), (256, 2048 - 256));
        sb.s_num_fc_blks = 64;
        assert_eq!(JournalSuperblock::decode(&sb.encode(), 2048).expect("fc").log_end(), 2048 - 64);
        sb.s_feature_incompat &= !INCOMPAT_FAST_COMMIT;
        assert_eq!(JournalSuperblock::decode(&sb.encode(), 2048).expect("no fc").log_end(), 2048);
        let f = JournalFeatures::new(0, 0x400, 0);
        let b = JournalSuperblock::new_v2_with_features(64, uuid(), f).encode();
        match JournalSuperblock::decode(&b, 64) {
            Err(JournalError::Incompatible(m)) => assert!(m.contains("0x400"), "{m}"),
            other => panic!("{other:?}"),
        }
        let f = JournalFeatures::new(0, 0, 1);
        let b = JournalSuperblock::new_v2_with_features(64, uuid(), f).encode();
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Incompatible(_))));
        let f = JournalFeatures::new(0, INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3, 0);
        let b = JournalSuperblock::new_v2_with_features(64, uuid(), f).encode();
        assert!(matches!(JournalSuperblock::decode(&b, 64), Err(JournalError::Corrupt(_))));
        // csum v3 with a wrong checksum type.
        let mut sb = JournalSuperblock::new_v2(64, uuid(), true);
        sb.s_checksum_type = CHKSUM_TYPE_CRC32;
        let b = sb.encode();
        match JournalSuperblock::decode(&b, 64) {
            Err(JournalError::Corrupt(m)) => assert!(m.contains("s_checksum_type"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v1_superblock_ignores_v2_fields() {
        let mut b = JournalSuperblock::new_v2(64, uuid(), false).encode();
        wr_be32(&mut b, 4, BLOCKTYPE_SB_V1);
        // Garbage in the (v2-only) feature word is ignored for v1.
        wr_be32(&mut b, SB_FEATURE_INCOMPAT_OFFSET, 0xFFFF_FFFF);
        let d = JournalSuperblock::decode(&b, 64).expect("v1");
        assert_eq!(d.blocktype, BLOCKTYPE_SB_V1);
        assert_eq!(d.features(), JournalFeatures::default());
        assert_eq!(d.s_feature_incompat, 0);
        assert_eq!(d.s_maxlen, 64);
    }

    #[test]
    fn tag_sizes() {
        assert_eq!(JournalFeatures::cjfs(true).tag_bytes(), 16);
        assert_eq!(JournalFeatures::new(0, INCOMPAT_CSUM_V3, 0).tag_bytes(), 16);
        assert_eq!(JournalFeatures::new(0, INCOMPAT_64BIT, 0).tag_bytes(), 12);
        assert_eq!(JournalFeatures::new(0, 0, 0).tag_bytes(), 8);
        assert_eq!(JournalFeatures::new(0, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT, 0).tag_bytes(), 14);
        assert_eq!(JournalFeatures::new(0, INCOMPAT_CSUM_V2, 0).tag_bytes(), 10);
    }

    #[test]
    fn format_writes_superblock_and_clears_first_block() {
        let dev = MemDev::new(200);
        let area = JournalArea::new([(100, 40), (150, 24)]);
        let mut junk = [0xEEu8; BLOCK_SIZE];
        junk[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        dev.poke(101, &junk);
        let sb = format_journal(&dev, &area, uuid(), true).expect("format");
        assert_eq!(sb.s_maxlen, 64);
        assert_eq!(dev.peek(101), [0u8; BLOCK_SIZE]);
        let read = read_superblock(&dev, &area).expect("read back");
        assert_eq!(read.s_maxlen, 64);
        assert_eq!(read.s_sequence, 1);
        assert_eq!(read.s_start, 0);
        assert_eq!(read.s_uuid, uuid());
        assert!(dev.flushes() >= 1);
        assert!(format_journal(&dev, &JournalArea::contiguous(0, 1), uuid(), true).is_err());
    }
}
