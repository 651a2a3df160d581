//! The on-disk inode (`struct ext4_inode`): 128 bytes plus `i_extra_isize` extra bytes,
//! then the in-inode extended attribute area up to `s_inode_size` (256 with cjfs' mkfs).
//!
//! [`Inode`] keeps the whole raw record, so fields it does not model (`i_version` high half,
//! the xattr area) survive [`Inode::encode_into`].
//!
//! With `metadata_csum` the record carries a CRC32C from the inode's seed (see
//! [`crate::ondisk::csum`]) over all `s_inode_size` bytes with `l_i_checksum_lo` and, when
//! `i_extra_isize` reaches it, `i_checksum_hi` taken as zero; the low half goes in
//! `l_i_checksum_lo`, the high half in `i_checksum_hi` (when there is room; otherwise only
//! 16 bits are kept and compared). [`Inode::encode_into`] always writes it.

use crate::error::{CsumStructure, FsError, FsResult};
use crate::ondisk::csum::{Csum, crc32c};
use crate::ondisk::superblock::{get_u16, get_u32, put_u16, put_u32};

/// Size of the original inode, and offset of the extra fields.
pub const GOOD_OLD_INODE_SIZE: usize = 128;
/// Inode size `mkfs` uses.
pub const DEFAULT_INODE_SIZE: usize = 256;
/// `i_extra_isize` `mkfs` uses (covers every extra field up to `i_projid`).
pub const DEFAULT_EXTRA_ISIZE: u16 = 32;
/// Size of `i_block`.
pub const I_BLOCK_SIZE: usize = 60;

// Special inode numbers.
/// Bad blocks inode.
pub const BAD_INO: u32 = 1;
/// Root directory.
pub const ROOT_INO: u32 = 2;
/// User quota.
pub const USR_QUOTA_INO: u32 = 3;
/// Group quota.
pub const GRP_QUOTA_INO: u32 = 4;
/// Boot loader.
pub const BOOT_LOADER_INO: u32 = 5;
/// Undelete directory.
pub const UNDEL_DIR_INO: u32 = 6;
/// Reserved GDT blocks (resize_inode).
pub const RESIZE_INO: u32 = 7;
/// Journal.
pub const JOURNAL_INO: u32 = 8;
/// Exclude inode (snapshots).
pub const EXCLUDE_INO: u32 = 9;
/// Replica inode.
pub const REPLICA_INO: u32 = 10;
/// First non-reserved inode with `mkfs` (lost+found).
pub const FIRST_INO: u32 = 11;

// Mode bits.
/// File type mask.
pub const S_IFMT: u16 = 0o170000;
/// Socket.
pub const S_IFSOCK: u16 = 0o140000;
/// Symbolic link.
pub const S_IFLNK: u16 = 0o120000;
/// Regular file.
pub const S_IFREG: u16 = 0o100000;
/// Block device.
pub const S_IFBLK: u16 = 0o060000;
/// Directory.
pub const S_IFDIR: u16 = 0o040000;
/// Character device.
pub const S_IFCHR: u16 = 0o020000;
/// FIFO.
pub const S_IFIFO: u16 = 0o010000;
/// Set-user-ID.
pub const S_ISUID: u16 = 0o4000;
/// Set-group-ID.
pub const S_ISGID: u16 = 0o2000;
/// Sticky.
pub const S_ISVTX: u16 = 0o1000;

// i_flags.
/// Secure deletion.
pub const EXT4_SECRM_FL: u32 = 0x0000_0001;
/// Undelete.
pub const EXT4_UNRM_FL: u32 = 0x0000_0002;
/// Compress file.
pub const EXT4_COMPR_FL: u32 = 0x0000_0004;
/// Synchronous updates.
pub const EXT4_SYNC_FL: u32 = 0x0000_0008;
/// Immutable file.
pub const EXT4_IMMUTABLE_FL: u32 = 0x0000_0010;
/// Append only.
pub const EXT4_APPEND_FL: u32 = 0x0000_0020;
/// Do not dump.
pub const EXT4_NODUMP_FL: u32 = 0x0000_0040;
/// Do not update atime.
pub const EXT4_NOATIME_FL: u32 = 0x0000_0080;
/// Dirty (compression).
pub const EXT4_DIRTY_FL: u32 = 0x0000_0100;
/// Compressed clusters (compression).
pub const EXT4_COMPRBLK_FL: u32 = 0x0000_0200;
/// Do not compress.
pub const EXT4_NOCOMPR_FL: u32 = 0x0000_0400;
/// Encrypted inode.
pub const EXT4_ENCRYPT_FL: u32 = 0x0000_0800;
/// Hash-indexed directory.
pub const EXT4_INDEX_FL: u32 = 0x0000_1000;
/// AFS magic directory.
pub const EXT4_IMAGIC_FL: u32 = 0x0000_2000;
/// File data is journalled.
pub const EXT4_JOURNAL_DATA_FL: u32 = 0x0000_4000;
/// No tail merging.
pub const EXT4_NOTAIL_FL: u32 = 0x0000_8000;
/// Synchronous directory updates.
pub const EXT4_DIRSYNC_FL: u32 = 0x0001_0000;
/// Top of a directory hierarchy (Orlov).
pub const EXT4_TOPDIR_FL: u32 = 0x0002_0000;
/// `i_blocks` counts file system blocks (with `huge_file`).
pub const EXT4_HUGE_FILE_FL: u32 = 0x0004_0000;
/// The inode uses an extent tree.
pub const EXT4_EXTENTS_FL: u32 = 0x0008_0000;
/// fs-verity file.
pub const EXT4_VERITY_FL: u32 = 0x0010_0000;
/// Inode holds a large xattr value.
pub const EXT4_EA_INODE_FL: u32 = 0x0020_0000;
/// DAX.
pub const EXT4_DAX_FL: u32 = 0x0200_0000;
/// Data stored in the inode.
pub const EXT4_INLINE_DATA_FL: u32 = 0x1000_0000;
/// Project ID inheritance.
pub const EXT4_PROJINHERIT_FL: u32 = 0x2000_0000;
/// Case-insensitive directory.
pub const EXT4_CASEFOLD_FL: u32 = 0x4000_0000;
/// Reserved for ext4.
pub const EXT4_RESERVED_FL: u32 = 0x8000_0000;

/// Flags a new inode takes from its directory (ext4's `EXT4_FL_INHERITED`), before
/// [`mask_flags`] drops the ones its kind cannot carry.
pub const EXT4_FL_INHERITED: u32 = EXT4_SECRM_FL
    | EXT4_UNRM_FL
    | EXT4_COMPR_FL
    | EXT4_SYNC_FL
    | EXT4_NODUMP_FL
    | EXT4_NOATIME_FL
    | EXT4_NOCOMPR_FL
    | EXT4_JOURNAL_DATA_FL
    | EXT4_NOTAIL_FL
    | EXT4_DIRSYNC_FL
    | EXT4_PROJINHERIT_FL
    | EXT4_CASEFOLD_FL;

/// The flags an inode of type `mode` (its `S_IFMT` bits) may carry (ext4's
/// `ext4_mask_flags`): directories all, regular files all but the directory-only ones,
/// other kinds only no-dump and no-atime.
pub fn mask_flags(mode: u16, flags: u32) -> u32 {
    match mode & S_IFMT {
        S_IFDIR => flags,
        S_IFREG => flags & !(EXT4_DIRSYNC_FL | EXT4_TOPDIR_FL | EXT4_CASEFOLD_FL | EXT4_PROJINHERIT_FL),
        _ => flags & (EXT4_NODUMP_FL | EXT4_NOATIME_FL),
    }
}

// Field offsets.
/// `i_mode` (u16).
pub const I_MODE: usize = 0x00;
/// `i_uid` (u16, low half).
pub const I_UID: usize = 0x02;
/// `i_size_lo` (u32).
pub const I_SIZE_LO: usize = 0x04;
/// `i_atime` (u32).
pub const I_ATIME: usize = 0x08;
/// `i_ctime` (u32).
pub const I_CTIME: usize = 0x0C;
/// `i_mtime` (u32).
pub const I_MTIME: usize = 0x10;
/// `i_dtime` (u32).
pub const I_DTIME: usize = 0x14;
/// `i_gid` (u16, low half).
pub const I_GID: usize = 0x18;
/// `i_links_count` (u16).
pub const I_LINKS_COUNT: usize = 0x1A;
/// `i_blocks_lo` (u32).
pub const I_BLOCKS_LO: usize = 0x1C;
/// `i_flags` (u32).
pub const I_FLAGS: usize = 0x20;
/// `l_i_version` (osd1, u32).
pub const I_VERSION: usize = 0x24;
/// `i_block` (60 bytes).
pub const I_BLOCK: usize = 0x28;
/// `i_generation` (u32).
pub const I_GENERATION: usize = 0x64;
/// `i_file_acl_lo` (u32).
pub const I_FILE_ACL_LO: usize = 0x68;
/// `i_size_high` (u32).
pub const I_SIZE_HIGH: usize = 0x6C;
/// `i_obso_faddr` (u32).
pub const I_OBSO_FADDR: usize = 0x70;
/// `l_i_blocks_high` (u16).
pub const I_BLOCKS_HIGH: usize = 0x74;
/// `l_i_file_acl_high` (u16).
pub const I_FILE_ACL_HIGH: usize = 0x76;
/// `l_i_uid_high` (u16).
pub const I_UID_HIGH: usize = 0x78;
/// `l_i_gid_high` (u16).
pub const I_GID_HIGH: usize = 0x7A;
/// `l_i_checksum_lo` (u16).
pub const I_CHECKSUM_LO: usize = 0x7C;
/// `i_extra_isize` (u16).
pub const I_EXTRA_ISIZE: usize = 0x80;
/// `i_checksum_hi` (u16).
pub const I_CHECKSUM_HI: usize = 0x82;
/// `i_ctime_extra` (u32).
pub const I_CTIME_EXTRA: usize = 0x84;
/// `i_mtime_extra` (u32).
pub const I_MTIME_EXTRA: usize = 0x88;
/// `i_atime_extra` (u32).
pub const I_ATIME_EXTRA: usize = 0x8C;
/// `i_crtime` (u32).
pub const I_CRTIME: usize = 0x90;
/// `i_crtime_extra` (u32).
pub const I_CRTIME_EXTRA: usize = 0x94;
/// `i_version_hi` (u32).
pub const I_VERSION_HI: usize = 0x98;
/// `i_projid` (u32).
pub const I_PROJID: usize = 0x9C;

/// A timestamp: seconds since the epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    /// Seconds since 1970-01-01 UTC (may be negative).
    pub sec: i64,
    /// Nanoseconds, 0..1_000_000_000.
    pub nsec: u32,
}

impl Timestamp {
    /// A timestamp.
    pub const fn new(sec: i64, nsec: u32) -> Self {
        Timestamp { sec, nsec }
    }
    /// The current time as the kernel stamps inodes (`current_time`): the coarse real-time
    /// clock, which moves once a scheduler tick (1–4 ms). A fifth of the cost of a precise
    /// read, and two writes in one tick leave the times as they were, so the second need not
    /// store the inode (as ext4's `file_update_time`).
    pub fn now() -> Self {
        #[cfg(target_os = "linux")]
        {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
            if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 && ts.tv_sec >= 0 {
                return Timestamp { sec: ts.tv_sec, nsec: ts.tv_nsec as u32 };
            }
        }
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
    }
}

/// Encode a timestamp as ext4 does: the low 32 bits of the seconds (as a signed value), and
/// the extra word with 2 epoch bits (bits 32-33 of `sec - (i32)sec`) and the nanoseconds
/// (30 bits) shifted left by 2. Covers 1901..2446.
pub fn encode_time(t: Timestamp) -> (u32, u32) {
    let lo = t.sec as i32;
    let epoch = ((t.sec - lo as i64) >> 32) as u32 & 3;
    (lo as u32, epoch | ((t.nsec & 0x3FFF_FFFF) << 2))
}

/// Decode an ext4 timestamp (`extra` = 0 when the inode has no extra field for it). Like the
/// kernel, the nanoseconds are not range-checked (a damaged inode may give more than 10^9).
pub fn decode_time(lo: u32, extra: u32) -> Timestamp {
    let mut sec = lo as i32 as i64;
    sec += ((extra & 3) as i64) << 32;
    Timestamp { sec, nsec: extra >> 2 }
}

/// Earliest second an inode's timestamp can hold, with or without its `_extra` field
/// (`S32_MIN`: 1901-12-13).
pub const TIME_MIN: i64 = i32::MIN as i64;
/// Latest second a timestamp without its `_extra` field can hold (`S32_MAX`: 2038-01-19).
pub const TIME_MAX_NO_EXTRA: i64 = i32::MAX as i64;
/// Latest second a timestamp with its `_extra` field (two epoch bits) can hold: 2446-05-10.
pub const TIME_MAX_EXTRA: i64 = i32::MAX as i64 + (3 << 32);

/// The value a timestamp field keeps when `t` is stored in it, as the kernel stores it
/// (`EXT4_INODE_SET_XTIME` and the super block's time range): seconds clamped to
/// [`TIME_MIN`]..=[`TIME_MAX_EXTRA`] with the `_extra` field, to the 32-bit range without
/// it; no nanoseconds without the field, none either for a clamped time.
pub fn fit_time(t: Timestamp, has_extra: bool) -> Timestamp {
    let max = if has_extra { TIME_MAX_EXTRA } else { TIME_MAX_NO_EXTRA };
    if t.sec < TIME_MIN || t.sec > max {
        return Timestamp::new(t.sec.clamp(TIME_MIN, max), 0);
    }
    Timestamp::new(t.sec, if has_extra { t.nsec } else { 0 })
}

/// The largest size an ext4 file may have with `block_size`-byte blocks: 2^32 - 1 logical
/// blocks (an extent's logical block number is 32 bits; the kernel's `ext4_max_size`),
/// never beyond `i64::MAX` bytes.
pub fn max_file_size(block_size: u32) -> u64 {
    (u64::from(u32::MAX) * u64::from(block_size)).min(i64::MAX as u64)
}

/// The on-disk inode. Fields in the extra area are only read/written when `extra_isize`
/// covers them (ctime/mtime/atime extra need 12 bytes, crtime 24, projid 32).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    /// `i_mode`: type and permission bits.
    pub mode: u16,
    /// Owner (`i_uid` | `l_i_uid_high` << 16).
    pub uid: u32,
    /// Group (`i_gid` | `l_i_gid_high` << 16).
    pub gid: u32,
    /// Size in bytes (`i_size_lo` | `i_size_high` << 32).
    pub size: u64,
    /// Access time (+ `i_atime_extra`).
    pub atime: Timestamp,
    /// Change time (+ `i_ctime_extra`).
    pub ctime: Timestamp,
    /// Modification time (+ `i_mtime_extra`).
    pub mtime: Timestamp,
    /// Creation time (`i_crtime` + extra; zero without the extra field).
    pub crtime: Timestamp,
    /// Deletion time; for orphans the next orphan inode number.
    pub dtime: u32,
    /// Hard links.
    pub links_count: u16,
    /// Raw 48-bit `i_blocks` (`i_blocks_lo` | `l_i_blocks_high` << 32); see
    /// [`Inode::blocks_512`].
    pub blocks: u64,
    /// `i_flags`.
    pub flags: u32,
    /// `l_i_version` (osd1).
    pub version: u32,
    /// `i_block`: extent tree root, block map, inline symlink target or device number.
    pub block: [u8; I_BLOCK_SIZE],
    /// `i_generation`.
    pub generation: u32,
    /// Extended attribute block (`i_file_acl_lo` | `l_i_file_acl_high` << 32).
    pub file_acl: u64,
    /// `i_extra_isize` (0 for 128-byte inodes).
    pub extra_isize: u16,
    /// `i_projid` (needs `extra_isize` >= 32).
    pub projid: u32,
    raw: Vec<u8>,
}

impl Inode {
    /// A zeroed inode record of `inode_size` bytes with `i_extra_isize` = `extra_isize`
    /// (forced to 0 for 128-byte inodes).
    pub fn new(inode_size: usize, extra_isize: u16) -> Self {
        let inode_size = inode_size.max(GOOD_OLD_INODE_SIZE);
        let extra = if inode_size > GOOD_OLD_INODE_SIZE {
            extra_isize.min((inode_size - GOOD_OLD_INODE_SIZE) as u16) & !3
        } else {
            0
        };
        Inode {
            mode: 0,
            uid: 0,
            gid: 0,
            size: 0,
            atime: Timestamp::default(),
            ctime: Timestamp::default(),
            mtime: Timestamp::default(),
            crtime: Timestamp::default(),
            dtime: 0,
            links_count: 0,
            blocks: 0,
            flags: 0,
            version: 0,
            block: [0; I_BLOCK_SIZE],
            generation: 0,
            file_acl: 0,
            extra_isize: extra,
            projid: 0,
            raw: vec![0; inode_size],
        }
    }

    /// Decode an inode record; `buf.len()` is the inode size (>= 128). Fails when
    /// `i_extra_isize` is not a multiple of 4 or runs past the record.
    pub fn decode(buf: &[u8]) -> FsResult<Self> {
        if buf.len() < GOOD_OLD_INODE_SIZE {
            return Err(FsError::Corrupt(format!("inode: {} bytes given, at least 128 needed", buf.len())));
        }
        let b = buf;
        let extra_isize = if b.len() > GOOD_OLD_INODE_SIZE + 1 { get_u16(b, I_EXTRA_ISIZE) } else { 0 };
        if GOOD_OLD_INODE_SIZE + extra_isize as usize > b.len() || extra_isize % 4 != 0 {
            return Err(FsError::Corrupt(format!(
                "inode: i_extra_isize = {extra_isize} (must be a multiple of 4 within the {}-byte \
                 inode)",
                b.len()
            )));
        }
        let has = |end: usize| GOOD_OLD_INODE_SIZE + extra_isize as usize >= end;
        let ex = |off: usize| if has(off + 4) { get_u32(b, off) } else { 0 };
        let mut block = [0u8; I_BLOCK_SIZE];
        block.copy_from_slice(&b[I_BLOCK..I_BLOCK + I_BLOCK_SIZE]);
        Ok(Inode {
            mode: get_u16(b, I_MODE),
            uid: get_u16(b, I_UID) as u32 | (get_u16(b, I_UID_HIGH) as u32) << 16,
            gid: get_u16(b, I_GID) as u32 | (get_u16(b, I_GID_HIGH) as u32) << 16,
            size: get_u32(b, I_SIZE_LO) as u64 | (get_u32(b, I_SIZE_HIGH) as u64) << 32,
            atime: decode_time(get_u32(b, I_ATIME), ex(I_ATIME_EXTRA)),
            ctime: decode_time(get_u32(b, I_CTIME), ex(I_CTIME_EXTRA)),
            mtime: decode_time(get_u32(b, I_MTIME), ex(I_MTIME_EXTRA)),
            crtime: decode_time(ex(I_CRTIME), ex(I_CRTIME_EXTRA)),
            dtime: get_u32(b, I_DTIME),
            links_count: get_u16(b, I_LINKS_COUNT),
            blocks: get_u32(b, I_BLOCKS_LO) as u64 | (get_u16(b, I_BLOCKS_HIGH) as u64) << 32,
            flags: get_u32(b, I_FLAGS),
            version: get_u32(b, I_VERSION),
            block,
            generation: get_u32(b, I_GENERATION),
            file_acl: get_u32(b, I_FILE_ACL_LO) as u64 | (get_u16(b, I_FILE_ACL_HIGH) as u64) << 32,
            extra_isize,
            projid: ex(I_PROJID),
            raw: b.to_vec(),
        })
    }

    /// End of the extra fields [`Inode::encode_into`] writes (128 when it writes none).
    fn extra_end(&self) -> usize {
        let n = self.raw.len();
        if n > GOOD_OLD_INODE_SIZE + 1 {
            GOOD_OLD_INODE_SIZE + (self.extra_isize.min((n - GOOD_OLD_INODE_SIZE) as u16) & !3) as usize
        } else {
            GOOD_OLD_INODE_SIZE
        }
    }

    /// Set the timestamps to what the record keeps of them (see [`fit_time`]): whole
    /// seconds where `i_extra_isize` leaves no `_extra` field (128-byte inodes), and a zero
    /// `i_crtime` where it leaves no room for one, so what is shown is what is stored.
    pub fn fit_times(&mut self) {
        let end = self.extra_end();
        let has = |off: usize| off + 4 <= end;
        self.atime = fit_time(self.atime, has(I_ATIME_EXTRA));
        self.ctime = fit_time(self.ctime, has(I_CTIME_EXTRA));
        self.mtime = fit_time(self.mtime, has(I_MTIME_EXTRA));
        self.crtime =
            if has(I_CRTIME) { fit_time(self.crtime, has(I_CRTIME_EXTRA)) } else { Timestamp::default() };
    }

    /// Record size this inode encodes to.
    pub fn inode_size(&self) -> usize {
        self.raw.len()
    }

    /// Encode as inode `ino` into `out[..self.inode_size()]`: the raw record with the
    /// modeled fields patched in (extra fields only as far as `extra_isize` reaches;
    /// `extra_isize` is clamped to the record and rounded down to a multiple of 4), then the
    /// checksum `csum` calls for.
    pub fn encode_into(&self, out: &mut [u8], csum: &Csum, ino: u32) {
        self.patch(out);
        set_checksum(csum, ino, &mut out[..self.raw.len()]);
    }

    fn patch(&self, out: &mut [u8]) {
        let n = self.raw.len();
        let b = &mut out[..n];
        b.copy_from_slice(&self.raw);
        put_u16(b, I_MODE, self.mode);
        put_u16(b, I_UID, self.uid as u16);
        put_u16(b, I_UID_HIGH, (self.uid >> 16) as u16);
        put_u16(b, I_GID, self.gid as u16);
        put_u16(b, I_GID_HIGH, (self.gid >> 16) as u16);
        put_u32(b, I_SIZE_LO, self.size as u32);
        put_u32(b, I_SIZE_HIGH, (self.size >> 32) as u32);
        let (a, ax) = encode_time(self.atime);
        let (c, cx) = encode_time(self.ctime);
        let (m, mx) = encode_time(self.mtime);
        let (cr, crx) = encode_time(self.crtime);
        put_u32(b, I_ATIME, a);
        put_u32(b, I_CTIME, c);
        put_u32(b, I_MTIME, m);
        put_u32(b, I_DTIME, self.dtime);
        put_u16(b, I_LINKS_COUNT, self.links_count);
        put_u32(b, I_BLOCKS_LO, self.blocks as u32);
        put_u16(b, I_BLOCKS_HIGH, (self.blocks >> 32) as u16);
        put_u32(b, I_FLAGS, self.flags);
        put_u32(b, I_VERSION, self.version);
        b[I_BLOCK..I_BLOCK + I_BLOCK_SIZE].copy_from_slice(&self.block);
        put_u32(b, I_GENERATION, self.generation);
        put_u32(b, I_FILE_ACL_LO, self.file_acl as u32);
        put_u16(b, I_FILE_ACL_HIGH, (self.file_acl >> 32) as u16);
        if n > GOOD_OLD_INODE_SIZE + 1 {
            let extra = self.extra_isize.min((n - GOOD_OLD_INODE_SIZE) as u16) & !3;
            put_u16(b, I_EXTRA_ISIZE, extra);
            let end = GOOD_OLD_INODE_SIZE + extra as usize;
            let mut put = |off: usize, v: u32| {
                if off + 4 <= end {
                    put_u32(b, off, v);
                }
            };
            put(I_CTIME_EXTRA, cx);
            put(I_MTIME_EXTRA, mx);
            put(I_ATIME_EXTRA, ax);
            put(I_CRTIME, cr);
            put(I_CRTIME_EXTRA, crx);
            put(I_PROJID, self.projid);
        }
    }

    /// The record as held: the modeled fields patched into the raw bytes, the checksum as
    /// read (for comparisons; writers use [`Inode::encode_into`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.raw.len()];
        self.patch(&mut v);
        v
    }

    /// Offset of the in-inode xattr area (after the extra fields).
    pub fn xattr_area_offset(&self) -> usize {
        (GOOD_OLD_INODE_SIZE + self.extra_isize as usize).min(self.raw.len())
    }

    /// The in-inode extended attribute area (empty for 128-byte inodes). See
    /// [`crate::ondisk::xattr`] to parse it.
    pub fn xattr_area(&self) -> &[u8] {
        let off = self.xattr_area_offset();
        if self.raw.len() <= GOOD_OLD_INODE_SIZE {
            return &[];
        }
        &self.raw[off..]
    }

    /// Replace the in-inode xattr area with `area` (its length must be that of
    /// [`Inode::xattr_area`]; empty for an inode without one, such as a 128-byte inode).
    pub fn set_xattr_area(&mut self, area: &[u8]) -> FsResult<()> {
        let off = self.xattr_area_offset();
        if area.len() != self.raw.len() - off {
            return Err(FsError::Invalid(format!(
                "inode xattr area: {} bytes given, the area has {}",
                area.len(),
                self.raw.len().saturating_sub(off)
            )));
        }
        self.raw[off..].copy_from_slice(area);
        Ok(())
    }

    /// File type bits of the mode.
    pub fn file_type(&self) -> u16 {
        self.mode & S_IFMT
    }
    /// Directory?
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }
    /// Regular file?
    pub fn is_reg(&self) -> bool {
        self.file_type() == S_IFREG
    }
    /// Symbolic link?
    pub fn is_symlink(&self) -> bool {
        self.file_type() == S_IFLNK
    }
    /// Character or block device?
    pub fn is_device(&self) -> bool {
        matches!(self.file_type(), S_IFCHR | S_IFBLK)
    }
    /// Uses an extent tree (`EXT4_EXTENTS_FL`)?
    pub fn has_extents(&self) -> bool {
        self.flags & EXT4_EXTENTS_FL != 0
    }
    /// Whether the inode is in use (links or mode set, not deleted).
    pub fn in_use(&self) -> bool {
        self.mode != 0 && self.dtime == 0
    }

    /// Blocks charged to the inode in 512-byte units. With `huge_file` and
    /// `EXT4_HUGE_FILE_FL` the raw value counts file system blocks of `block_size` bytes.
    pub fn blocks_512(&self, huge_file: bool, block_size: u32) -> u64 {
        if huge_file {
            if self.flags & EXT4_HUGE_FILE_FL != 0 {
                self.blocks.saturating_mul(block_size as u64 / 512)
            } else {
                self.blocks
            }
        } else {
            self.blocks & 0xFFFF_FFFF
        }
    }

    /// Set the blocks charged to the inode (`sectors` in 512-byte units) as ext4 does: the
    /// 32-bit field if it fits, else (with `huge_file`) 48 bits, else in file system blocks
    /// with `EXT4_HUGE_FILE_FL`. [`FsError::TooBig`] if it cannot be represented.
    pub fn set_blocks_512(&mut self, sectors: u64, huge_file: bool, block_size: u32) -> FsResult<()> {
        if sectors <= u32::MAX as u64 {
            self.blocks = sectors;
            self.flags &= !EXT4_HUGE_FILE_FL;
            return Ok(());
        }
        if !huge_file {
            return Err(FsError::TooBig(format!("{sectors} sectors need the huge_file feature")));
        }
        if sectors < 1u64 << 48 {
            self.blocks = sectors;
            self.flags &= !EXT4_HUGE_FILE_FL;
            return Ok(());
        }
        let per = (block_size / 512).max(1) as u64;
        let fsb = sectors.div_ceil(per);
        if fsb < 1u64 << 48 {
            self.blocks = fsb;
            self.flags |= EXT4_HUGE_FILE_FL;
            return Ok(());
        }
        Err(FsError::TooBig(format!("{sectors} sectors do not fit i_blocks")))
    }

    /// Device number of a character/block device inode: `(major, minor)` from the old
    /// (`i_block[0]`) or new (`i_block[1]`) encoding, as the kernel reads it.
    pub fn rdev(&self) -> (u32, u32) {
        let w0 = get_u32(&self.block, 0);
        if w0 != 0 {
            ((w0 >> 8) & 0xff, w0 & 0xff)
        } else {
            let w1 = get_u32(&self.block, 4);
            ((w1 & 0xfff00) >> 8, (w1 & 0xff) | ((w1 >> 12) & 0xfff00))
        }
    }

    /// Store a device number like the kernel: old 16-bit encoding in `i_block[0]` when
    /// major and minor are below 256, else the new encoding in `i_block[1]`.
    pub fn set_rdev(&mut self, major: u32, minor: u32) {
        self.block = [0; I_BLOCK_SIZE];
        if major < 256 && minor < 256 {
            put_u32(&mut self.block, 0, (major << 8) | minor);
        } else {
            let v = (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12);
            put_u32(&mut self.block, 4, v);
        }
    }

    /// `i_block` as 15 little-endian words (block map or `s_jnl_blocks` backup).
    pub fn block_words(&self) -> [u32; 15] {
        let mut w = [0u32; 15];
        for (i, x) in w.iter_mut().enumerate() {
            *x = get_u32(&self.block, 4 * i);
        }
        w
    }
}

/// Whether the record `raw` has room for `i_checksum_hi` (`i_extra_isize` >= 4).
fn has_checksum_hi(raw: &[u8]) -> bool {
    raw.len() >= I_CHECKSUM_HI + 2
        && GOOD_OLD_INODE_SIZE + get_u16(raw, I_EXTRA_ISIZE) as usize >= I_CHECKSUM_HI + 2
}

/// The checksum of inode record `raw` (all `s_inode_size` bytes) of inode `ino`, with the
/// checksum fields as zero; the seed uses the record's own `i_generation`.
pub fn checksum(csum: &Csum, ino: u32, raw: &[u8]) -> u32 {
    let seed = csum.inode_seed(ino, get_u32(raw, I_GENERATION));
    let mut c = crc32c(seed, &raw[..I_CHECKSUM_LO]);
    c = crc32c(c, &[0, 0]);
    c = crc32c(c, &raw[I_CHECKSUM_LO + 2..GOOD_OLD_INODE_SIZE.min(raw.len())]);
    if raw.len() > GOOD_OLD_INODE_SIZE {
        if has_checksum_hi(raw) {
            c = crc32c(c, &raw[GOOD_OLD_INODE_SIZE..I_CHECKSUM_HI]);
            c = crc32c(c, &[0, 0]);
            c = crc32c(c, &raw[I_CHECKSUM_HI + 2..]);
        } else {
            c = crc32c(c, &raw[GOOD_OLD_INODE_SIZE..]);
        }
    }
    c
}

/// Write the checksum of inode `ino` into its record `raw` (no-op without
/// `metadata_csum`). Every writer of inode bytes ends with this, in-place patches of single
/// fields included.
pub fn set_checksum(csum: &Csum, ino: u32, raw: &mut [u8]) {
    if !csum.metadata() {
        return;
    }
    let c = checksum(csum, ino, raw);
    put_u16(raw, I_CHECKSUM_LO, c as u16);
    if has_checksum_hi(raw) {
        put_u16(raw, I_CHECKSUM_HI, (c >> 16) as u16);
    }
}

/// Check the checksum of inode `ino`'s record `raw` (Ok without `metadata_csum`). An
/// all-zero record is accepted, as e2fsprogs does: it was never written (lazily
/// initialised inode tables).
pub fn verify_checksum(csum: &Csum, ino: u32, raw: &[u8]) -> FsResult<()> {
    if !csum.metadata() || raw.len() < GOOD_OLD_INODE_SIZE {
        return Ok(());
    }
    let c = checksum(csum, ino, raw);
    let (stored, computed) = if has_checksum_hi(raw) {
        (get_u16(raw, I_CHECKSUM_LO) as u32 | (get_u16(raw, I_CHECKSUM_HI) as u32) << 16, c)
    } else {
        (get_u16(raw, I_CHECKSUM_LO) as u32, c & 0xFFFF)
    };
    if stored != computed && raw[..GOOD_OLD_INODE_SIZE].iter().any(|&b| b != 0) {
        return Err(FsError::checksum(CsumStructure::Inode, ino.to_string(), stored, computed));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_encoding() {
        for (sec, nsec) in [
            (0i64, 0u32),
            (1_700_000_000, 123_456_789),
            (-1, 5),
            (-(1i64 << 31), 0),
            ((1i64 << 31) - 1, 999_999_999),
            (1i64 << 31, 1),
            ((1i64 << 32) + 77, 2),
            ((3i64 << 32) + (1 << 31) - 1, 9),
        ] {
            let t = Timestamp::new(sec, nsec);
            let (lo, ex) = encode_time(t);
            assert_eq!(decode_time(lo, ex), t, "{sec}");
        }
        // 2038-01-19T03:14:08 is lo = 0x80000000, epoch 1
        assert_eq!(encode_time(Timestamp::new(1 << 31, 0)), (0x8000_0000, 1));
    }

    #[test]
    fn fit_time_clamps_like_the_kernel() {
        let t = |s, n| Timestamp::new(s, n);
        assert_eq!(fit_time(t(1 << 31, 5), false), t(TIME_MAX_NO_EXTRA, 0));
        assert_eq!(fit_time(t(-(1 << 31) - 1, 5), false), t(TIME_MIN, 0));
        assert_eq!(fit_time(t(-(1 << 31) - 1, 5), true), t(TIME_MIN, 0));
        assert_eq!(fit_time(t(-5, 250), false), t(-5, 0));
        assert_eq!(fit_time(t(-5, 250), true), t(-5, 250));
        assert_eq!(fit_time(t(1 << 31, 5), true), t(1 << 31, 5));
        assert_eq!(fit_time(t(TIME_MAX_EXTRA + 1, 5), true), t(TIME_MAX_EXTRA, 0));
        // Whatever fits comes back unchanged through the on-disk encoding.
        for (s, has) in
            [(TIME_MAX_EXTRA, true), (TIME_MIN, true), (TIME_MAX_NO_EXTRA, false), (TIME_MIN, false)]
        {
            let f = fit_time(t(s, 7), has);
            let (lo, ex) = encode_time(f);
            assert_eq!(decode_time(lo, if has { ex } else { 0 }), f, "{s} {has}");
        }
    }

    #[test]
    fn fit_times_follows_extra_isize() {
        let big = Timestamp::new(5_000_000_000, 123);
        let set = |i: &mut Inode| {
            i.atime = big;
            i.ctime = big;
            i.mtime = big;
            i.crtime = big;
            i.fit_times();
            Inode::decode(&i.to_bytes()).unwrap()
        };
        // 128-byte inode: no extra fields at all.
        let mut small = Inode::new(128, 32);
        let back = set(&mut small);
        assert_eq!(small.mtime, Timestamp::new(TIME_MAX_NO_EXTRA, 0));
        assert_eq!(small.crtime, Timestamp::default());
        assert_eq!(
            (back.atime, back.ctime, back.mtime, back.crtime),
            (small.atime, small.ctime, small.mtime, small.crtime)
        );
        // i_extra_isize = 12: ctime/mtime/atime extra, no i_crtime.
        let mut mid = Inode::new(256, 12);
        let back = set(&mut mid);
        assert_eq!(mid.mtime, big);
        assert_eq!(mid.crtime, Timestamp::default());
        assert_eq!((back.atime, back.mtime, back.crtime), (mid.atime, mid.mtime, mid.crtime));
        // i_extra_isize = 20: i_crtime without i_crtime_extra.
        let mut cr = Inode::new(256, 20);
        let back = set(&mut cr);
        assert_eq!(cr.crtime, Timestamp::new(TIME_MAX_NO_EXTRA, 0));
        assert_eq!(back.crtime, cr.crtime);
        // i_extra_isize = 8: only i_ctime_extra.
        let mut c = Inode::new(256, 8);
        let back = set(&mut c);
        assert_eq!((c.ctime, c.mtime), (big, Timestamp::new(TIME_MAX_NO_EXTRA, 0)));
        assert_eq!((back.ctime, back.mtime), (c.ctime, c.mtime));
        // The default 32 keeps everything.
        let mut full = Inode::new(256, 32);
        set(&mut full);
        assert_eq!((full.atime, full.crtime), (big, big));
    }

    #[test]
    fn round_trip_preserves_xattr_area() {
        let mut raw = vec![0u8; 256];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = (i * 13 + 5) as u8;
        }
        put_u16(&mut raw, I_EXTRA_ISIZE, 32);
        let ino = Inode::decode(&raw).unwrap();
        assert_eq!(ino.to_bytes(), raw);
        assert_eq!(ino.xattr_area().len(), 256 - 160);
        put_u16(&mut raw, I_EXTRA_ISIZE, 130);
        assert!(Inode::decode(&raw).is_err());
    }

    #[test]
    fn checksum_round_trip() {
        let mut sb = crate::ondisk::superblock::Superblock::blank();
        sb.feature_ro_compat = crate::ondisk::features::RO_COMPAT_METADATA_CSUM;
        sb.uuid = [3; 16];
        let c = Csum::from_sb(&sb);
        let mut i = Inode::new(256, 32);
        i.mode = S_IFREG | 0o644;
        i.generation = 77;
        let mut raw = vec![0u8; 256];
        i.encode_into(&mut raw, &c, 12);
        verify_checksum(&c, 12, &raw).unwrap();
        assert!(verify_checksum(&c, 13, &raw).is_err(), "the inode number is in the seed");
        raw[200] ^= 1;
        assert!(matches!(verify_checksum(&c, 12, &raw), Err(FsError::Checksum { .. })));
        // A never-written slot passes; without metadata_csum nothing is checked.
        verify_checksum(&c, 12, &[0u8; 256]).unwrap();
        verify_checksum(&Csum::none(), 12, &raw).unwrap();
        // 128-byte inodes keep the low 16 bits only.
        let mut small = vec![0u8; 128];
        Inode::new(128, 0).encode_into(&mut small, &c, 5);
        verify_checksum(&c, 5, &small).unwrap();
    }

    #[test]
    fn rdev_encodings() {
        let mut i = Inode::new(256, 32);
        i.set_rdev(8, 1);
        assert_eq!(i.rdev(), (8, 1));
        i.set_rdev(259, 70000);
        assert_eq!(i.rdev(), (259, 70000));
    }

    #[test]
    fn blocks_huge() {
        let mut i = Inode::new(256, 32);
        i.set_blocks_512(8, true, 4096).unwrap();
        assert_eq!(i.blocks_512(true, 4096), 8);
        i.set_blocks_512(1 << 40, true, 4096).unwrap();
        assert_eq!(i.blocks_512(true, 4096), 1 << 40);
        i.set_blocks_512(1 << 50, true, 4096).unwrap();
        assert!(i.flags & EXT4_HUGE_FILE_FL != 0);
        assert_eq!(i.blocks_512(true, 4096), 1 << 50);
        assert!(i.set_blocks_512(1 << 40, false, 4096).is_err());
    }
}
