//! Extended attributes: the in-inode area (after `i_extra_isize`) and the external xattr
//! block (`i_file_acl`).
//!
//! Both hold a magic (`0xEA020000`), a list of `ext4_xattr_entry` records terminated by four
//! zero bytes, and the values packed (4-byte aligned) from the end of the area downwards.
//! In the inode, value offsets count from the first entry; in a block, from the block
//! start. Names are stored as a namespace index plus a suffix (`user.foo` = index 1,
//! `foo`). With the `ea_inode` feature an entry may instead name an inode holding its value
//! (`e_value_inum`, `e_value_offs` 0, the entry hash over the value's hash instead of the
//! value): [`EaRef`]; `crate::xattr` reads and writes those inodes.
//!
//! Attribute lists are `Vec<(full name, value)>` of bytes. POSIX ACL values
//! (`system.posix_acl_*`) are stored in ext4's own compact ACL format ([`crate::ondisk::acl`]);
//! `crate::acl` converts them from and to the user-space format.

use crate::error::{FsError, FsResult};
use crate::ondisk::superblock::{get_u16, get_u32, put_u16, put_u32};

/// `h_magic` / in-inode header magic.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;
/// Size of the block header.
pub const BLOCK_HEADER_SIZE: usize = 32;
/// Size of the in-inode header (just the magic).
pub const IBODY_HEADER_SIZE: usize = 4;
/// Size of an entry without its name.
pub const ENTRY_HEADER_SIZE: usize = 16;
/// Longest name suffix.
pub const NAME_MAX: usize = 255;

/// `h_magic` (u32).
pub const H_MAGIC: usize = 0;
/// `h_refcount` (u32).
pub const H_REFCOUNT: usize = 4;
/// `h_blocks` (u32, always 1).
pub const H_BLOCKS: usize = 8;
/// `h_hash` (u32).
pub const H_HASH: usize = 12;
/// `h_checksum` (u32, metadata_csum only: see [`block_checksum`]).
pub const H_CHECKSUM: usize = 16;

/// `e_name_len` (u8).
pub const E_NAME_LEN: usize = 0;
/// `e_name_index` (u8).
pub const E_NAME_INDEX: usize = 1;
/// `e_value_offs` (u16).
pub const E_VALUE_OFFS: usize = 2;
/// `e_value_inum` (u32).
pub const E_VALUE_INUM: usize = 4;
/// `e_value_size` (u32).
pub const E_VALUE_SIZE: usize = 8;
/// `e_hash` (u32).
pub const E_HASH: usize = 12;
/// `e_name`.
pub const E_NAME: usize = 16;

/// Name index: `user.`.
pub const INDEX_USER: u8 = 1;
/// Name index: `system.posix_acl_access`.
pub const INDEX_POSIX_ACL_ACCESS: u8 = 2;
/// Name index: `system.posix_acl_default`.
pub const INDEX_POSIX_ACL_DEFAULT: u8 = 3;
/// Name index: `trusted.`.
pub const INDEX_TRUSTED: u8 = 4;
/// Name index: Lustre (not supported).
pub const INDEX_LUSTRE: u8 = 5;
/// Name index: `security.`.
pub const INDEX_SECURITY: u8 = 6;
/// Name index: `system.` (e.g. `system.data` of inline data).
pub const INDEX_SYSTEM: u8 = 7;
/// Name index: `system.richacl`.
pub const INDEX_RICHACL: u8 = 8;

/// A list of attributes: (full name, value).
pub type XattrList = Vec<(Vec<u8>, Vec<u8>)>;

/// Space an entry with a `name_len`-byte suffix takes: 16 + name, rounded up to 4.
pub const fn entry_len(name_len: usize) -> usize {
    (ENTRY_HEADER_SIZE + name_len + 3) & !3
}

/// Space a value of `size` bytes takes: rounded up to 4.
pub const fn value_len(size: usize) -> usize {
    (size + 3) & !3
}

/// Split a full name into (name index, suffix). [`FsError::NotSupported`] for an unknown
/// namespace, [`FsError::Range`] for a suffix above 255 bytes, [`FsError::Invalid`] for an
/// empty suffix where one is required.
pub fn split_name(full: &[u8]) -> FsResult<(u8, &[u8])> {
    let (idx, suffix): (u8, &[u8]) = if full == b"system.posix_acl_access" {
        (INDEX_POSIX_ACL_ACCESS, b"")
    } else if full == b"system.posix_acl_default" {
        (INDEX_POSIX_ACL_DEFAULT, b"")
    } else if full == b"system.richacl" {
        (INDEX_RICHACL, b"")
    } else if let Some(s) = full.strip_prefix(b"user.") {
        (INDEX_USER, s)
    } else if let Some(s) = full.strip_prefix(b"trusted.") {
        (INDEX_TRUSTED, s)
    } else if let Some(s) = full.strip_prefix(b"security.") {
        (INDEX_SECURITY, s)
    } else if let Some(s) = full.strip_prefix(b"system.") {
        (INDEX_SYSTEM, s)
    } else {
        return Err(FsError::NotSupported(format!(
            "extended attribute namespace of {:?}",
            String::from_utf8_lossy(full)
        )));
    };
    if suffix.len() > NAME_MAX {
        return Err(FsError::Range(format!(
            "extended attribute name suffix of {} bytes (at most {NAME_MAX})",
            suffix.len()
        )));
    }
    if suffix.is_empty() && !matches!(idx, INDEX_POSIX_ACL_ACCESS | INDEX_POSIX_ACL_DEFAULT | INDEX_RICHACL) {
        return Err(FsError::Invalid(format!(
            "extended attribute name {:?} has an empty suffix",
            String::from_utf8_lossy(full)
        )));
    }
    if suffix.contains(&0) {
        return Err(FsError::Invalid("extended attribute name contains a NUL byte".into()));
    }
    Ok((idx, suffix))
}

/// The full name for (index, suffix). [`FsError::Incompatible`] for an unknown index.
pub fn join_name(index: u8, suffix: &[u8]) -> FsResult<Vec<u8>> {
    let prefix: &[u8] = match index {
        INDEX_USER => b"user.",
        INDEX_POSIX_ACL_ACCESS => b"system.posix_acl_access",
        INDEX_POSIX_ACL_DEFAULT => b"system.posix_acl_default",
        INDEX_TRUSTED => b"trusted.",
        INDEX_SECURITY => b"security.",
        INDEX_SYSTEM => b"system.",
        INDEX_RICHACL => b"system.richacl",
        i => {
            return Err(FsError::Incompatible(format!("extended attribute name index {i}")));
        }
    };
    let mut v = prefix.to_vec();
    v.extend_from_slice(suffix);
    Ok(v)
}

/// Hash of one entry as ext4 computes it (`ext4_xattr_hash_entry`, unsigned chars): the
/// name suffix, then the value as little-endian words (zero padded).
pub fn entry_hash(suffix: &[u8], value: &[u8]) -> u32 {
    let mut hash = 0u32;
    for &c in suffix {
        hash = (hash << 5) ^ (hash >> 27) ^ c as u32;
    }
    for chunk in value.chunks(4) {
        let mut w = [0u8; 4];
        w[..chunk.len()].copy_from_slice(chunk);
        hash = (hash << 16) ^ (hash >> 16) ^ u32::from_le_bytes(w);
    }
    hash
}

/// The legacy (signed char) entry hash some older kernels and e2fsprogs wrote for names
/// with bytes >= 0x80; accepted when checking.
pub fn entry_hash_signed(suffix: &[u8], value: &[u8]) -> u32 {
    let mut hash = 0u32;
    for &c in suffix {
        hash = (hash << 5) ^ (hash >> 27) ^ (c as i8 as i32 as u32);
    }
    for chunk in value.chunks(4) {
        let mut w = [0u8; 4];
        w[..chunk.len()].copy_from_slice(chunk);
        hash = (hash << 16) ^ (hash >> 16) ^ u32::from_le_bytes(w);
    }
    hash
}

/// Block hash from the entry hashes in block order (`ext4_xattr_rehash`); 0 if any entry
/// hash is 0.
pub fn block_hash(entry_hashes: impl IntoIterator<Item = u32>) -> u32 {
    let mut hash = 0u32;
    for h in entry_hashes {
        if h == 0 {
            return 0;
        }
        hash = (hash << 16) ^ (hash >> 16) ^ h;
    }
    hash
}

/// Largest value an EA inode may hold (`EXT4_XATTR_SIZE_MAX`).
pub const EA_INODE_VALUE_MAX: u32 = 1 << 24;

/// An entry's value kept in an EA inode (`ea_inode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EaRef {
    /// `e_value_inum`: the inode holding the value.
    pub inum: u32,
    /// `e_value_size`: the value's length.
    pub size: u32,
    /// `e_hash`: the entry hash, over the name and the value's hash (kept in the EA inode).
    pub entry_hash: u32,
}

/// One parsed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// `e_name_index`.
    pub name_index: u8,
    /// Name suffix.
    pub name: Vec<u8>,
    /// The value (empty when it is in an EA inode).
    pub value: Vec<u8>,
    /// `e_hash` as stored.
    pub hash: u32,
    /// The EA inode holding the value, if any.
    pub ea: Option<EaRef>,
}

/// An attribute as stored: its full name, and its value either in the area (`value`) or in
/// an EA inode (`ea`, `value` then empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Full name (`user.foo`).
    pub name: Vec<u8>,
    /// The value when it is kept in the area.
    pub value: Vec<u8>,
    /// The EA inode holding the value, if any.
    pub ea: Option<EaRef>,
}

impl Stored {
    /// Attributes whose values are all kept in the area.
    pub fn plain(list: &[(Vec<u8>, Vec<u8>)]) -> Vec<Stored> {
        list.iter().map(|(n, v)| Stored { name: n.clone(), value: v.clone(), ea: None }).collect()
    }
}

/// Parse entries starting at `first` of `buf`, values relative to `value_base`, everything
/// before `end`. Checks like the kernel's `ext4_xattr_check_entries`.
fn parse_entries(buf: &[u8], first: usize, value_base: usize, what: &str) -> FsResult<Vec<RawEntry>> {
    let end = buf.len();
    let bad = |msg: String| Err(FsError::Corrupt(format!("{what}: {msg}")));
    // find the end of the names
    let mut off = first;
    let mut heads = Vec::new();
    loop {
        if off + 4 > end {
            return bad(format!("entry list not terminated before offset {end}"));
        }
        if get_u32(buf, off) == 0 {
            break;
        }
        if off + ENTRY_HEADER_SIZE > end {
            return bad(format!("entry at offset {off} passes the end"));
        }
        let name_len = buf[off + E_NAME_LEN] as usize;
        let next = off + entry_len(name_len);
        if next + 4 > end {
            return bad(format!("entry at offset {off}: e_name_len = {name_len} out of bounds"));
        }
        if buf[off + E_NAME..off + E_NAME + name_len].contains(&0) {
            return bad(format!("entry at offset {off}: name contains a NUL byte"));
        }
        heads.push(off);
        off = next;
    }
    let names_end = off + 4;
    let mut out = Vec::with_capacity(heads.len());
    for h in heads {
        let name_len = buf[h + E_NAME_LEN] as usize;
        let inum = get_u32(buf, h + E_VALUE_INUM);
        let size = get_u32(buf, h + E_VALUE_SIZE) as usize;
        let offs = get_u16(buf, h + E_VALUE_OFFS) as usize;
        let ea = if inum != 0 {
            // The kernel's `ext4_xattr_check_entries`; an empty value is never in an inode.
            if size == 0 || size as u32 > EA_INODE_VALUE_MAX {
                return bad(format!("entry at offset {h}: e_value_inum = {inum} with e_value_size = {size}"));
            }
            Some(EaRef { inum, size: size as u32, entry_hash: get_u32(buf, h + E_HASH) })
        } else {
            None
        };
        let value = if size == 0 || ea.is_some() {
            Vec::new()
        } else {
            let v = value_base + offs;
            if v < names_end || v > end || size > end - v || value_len(size) > end - v {
                return bad(format!(
                    "entry at offset {h}: e_value_offs = {offs} e_value_size = {size} out of \
                     bounds or overlapping the names"
                ));
            }
            buf[v..v + size].to_vec()
        };
        out.push(RawEntry {
            name_index: buf[h + E_NAME_INDEX],
            name: buf[h + E_NAME..h + E_NAME + name_len].to_vec(),
            value,
            hash: get_u32(buf, h + E_HASH),
            ea,
        });
    }
    Ok(out)
}

fn to_list(entries: Vec<RawEntry>) -> FsResult<XattrList> {
    entries
        .into_iter()
        .map(|e| match e.ea {
            Some(r) => Err(FsError::Incompatible(format!(
                "extended attribute value in EA inode {} (read through the file system)",
                r.inum
            ))),
            None => Ok((join_name(e.name_index, &e.name)?, e.value)),
        })
        .collect()
}

fn to_stored(entries: Vec<RawEntry>) -> FsResult<Vec<Stored>> {
    entries
        .into_iter()
        .map(|e| Ok(Stored { name: join_name(e.name_index, &e.name)?, value: e.value, ea: e.ea }))
        .collect()
}

/// Raw entries of an in-inode area (the bytes from `128 + i_extra_isize` to the end of the
/// inode). No magic means no attributes.
pub fn parse_ibody_raw(area: &[u8]) -> FsResult<Vec<RawEntry>> {
    if area.len() < IBODY_HEADER_SIZE || get_u32(area, 0) != XATTR_MAGIC {
        return Ok(Vec::new());
    }
    parse_entries(area, IBODY_HEADER_SIZE, IBODY_HEADER_SIZE, "in-inode xattrs")
}

/// Attributes of an in-inode area (see [`parse_ibody_raw`]); [`FsError::Incompatible`]
/// for a value kept in an EA inode (see [`parse_ibody_stored`]).
pub fn parse_ibody(area: &[u8]) -> FsResult<XattrList> {
    to_list(parse_ibody_raw(area)?)
}

/// Attributes of an in-inode area as stored, EA inode references included.
pub fn parse_ibody_stored(area: &[u8]) -> FsResult<Vec<Stored>> {
    to_stored(parse_ibody_raw(area)?)
}

/// A parsed external xattr block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrBlock {
    /// `h_refcount`: inodes sharing the block.
    pub refcount: u32,
    /// `h_blocks` (1).
    pub blocks: u32,
    /// `h_hash`.
    pub hash: u32,
    /// Entries in block order.
    pub entries: Vec<RawEntry>,
}

impl XattrBlock {
    /// Decode an xattr block, checking the magic, `h_blocks == 1` and the entries.
    pub fn decode(block: &[u8]) -> FsResult<Self> {
        if block.len() < BLOCK_HEADER_SIZE + 4 {
            return Err(FsError::Corrupt(format!("xattr block: {} bytes", block.len())));
        }
        let magic = get_u32(block, H_MAGIC);
        if magic != XATTR_MAGIC {
            return Err(FsError::Corrupt(format!(
                "xattr block: h_magic = 0x{magic:08x} (expected 0xea020000)"
            )));
        }
        let blocks = get_u32(block, H_BLOCKS);
        if blocks != 1 {
            return Err(FsError::Corrupt(format!("xattr block: h_blocks = {blocks} (expected 1)")));
        }
        Ok(XattrBlock {
            refcount: get_u32(block, H_REFCOUNT),
            blocks,
            hash: get_u32(block, H_HASH),
            entries: parse_entries(block, BLOCK_HEADER_SIZE, 0, "xattr block")?,
        })
    }

    /// The attributes as (full name, value); [`FsError::Incompatible`] for a value kept in
    /// an EA inode (see [`XattrBlock::stored`]).
    pub fn attrs(&self) -> FsResult<XattrList> {
        to_list(self.entries.clone())
    }

    /// The attributes as stored, EA inode references included.
    pub fn stored(&self) -> FsResult<Vec<Stored>> {
        to_stored(self.entries.clone())
    }
}

/// Attributes of an external xattr block.
pub fn parse_block(block: &[u8]) -> FsResult<XattrList> {
    XattrBlock::decode(block)?.attrs()
}

struct Prepared<'a> {
    index: u8,
    suffix: &'a [u8],
    value: &'a [u8],
    ea: Option<EaRef>,
}

fn prepare(attrs: &[Stored]) -> FsResult<Vec<Prepared<'_>>> {
    let mut v: Vec<Prepared<'_>> = Vec::with_capacity(attrs.len());
    for a in attrs {
        let (index, suffix) = split_name(&a.name)?;
        if v.iter().any(|p| p.index == index && p.suffix == suffix) {
            return Err(FsError::Invalid(format!(
                "duplicate extended attribute {:?}",
                String::from_utf8_lossy(&a.name)
            )));
        }
        if a.ea.is_none() && a.value.len() > u16::MAX as usize {
            return Err(FsError::Range(format!("xattr value of {} bytes", a.value.len())));
        }
        v.push(Prepared { index, suffix, value: &a.value, ea: a.ea });
    }
    Ok(v)
}

fn space(p: &Prepared<'_>) -> usize {
    entry_len(p.suffix.len()) + if p.ea.is_some() { 0 } else { value_len(p.value.len()) }
}

/// Bytes an in-inode area needs for `attrs` (0 for none).
pub fn ibody_size(attrs: &[(Vec<u8>, Vec<u8>)]) -> FsResult<usize> {
    ibody_size_stored(&Stored::plain(attrs))
}

/// [`ibody_size`] of attributes as stored (a value in an EA inode takes no room).
pub fn ibody_size_stored(attrs: &[Stored]) -> FsResult<usize> {
    let p = prepare(attrs)?;
    if p.is_empty() {
        return Ok(0);
    }
    Ok(IBODY_HEADER_SIZE + 4 + p.iter().map(space).sum::<usize>())
}

/// Bytes an xattr block needs for `attrs`.
pub fn block_size_needed(attrs: &[(Vec<u8>, Vec<u8>)]) -> FsResult<usize> {
    block_size_needed_stored(&Stored::plain(attrs))
}

fn block_size_needed_stored(attrs: &[Stored]) -> FsResult<usize> {
    let p = prepare(attrs)?;
    Ok(BLOCK_HEADER_SIZE + 4 + p.iter().map(space).sum::<usize>())
}

/// Write entries and values into `buf[first..]`; values from the end downwards, offsets
/// relative to `value_base`. Returns the entry hashes in order. Caller checked the space.
///
/// An in-inode entry whose value is in the area gets `e_hash` 0 (`in_block` false), as the
/// kernel's `ext4_xattr_set_entry` writes it: the kernel changes some such values in place
/// without rehashing (an inline directory's `system.data`), and e2fsck reads a nonzero hash
/// as one to check.
fn write_entries(
    buf: &mut [u8],
    first: usize,
    value_base: usize,
    entries: &[Prepared<'_>],
    in_block: bool,
) -> Vec<u32> {
    let mut off = first;
    let mut vend = buf.len();
    let mut hashes = Vec::with_capacity(entries.len());
    for p in entries {
        let (hash, voffs, inum, size) = match p.ea {
            Some(r) => (r.entry_hash, 0, r.inum, r.size),
            None => {
                let hash = if in_block { entry_hash(p.suffix, p.value) } else { 0 };
                if p.value.is_empty() {
                    (hash, 0, 0, 0)
                } else {
                    vend -= value_len(p.value.len());
                    buf[vend..vend + p.value.len()].copy_from_slice(p.value);
                    (hash, vend - value_base, 0, p.value.len() as u32)
                }
            }
        };
        buf[off + E_NAME_LEN] = p.suffix.len() as u8;
        buf[off + E_NAME_INDEX] = p.index;
        put_u16(buf, off + E_VALUE_OFFS, voffs as u16);
        put_u32(buf, off + E_VALUE_INUM, inum);
        put_u32(buf, off + E_VALUE_SIZE, size);
        put_u32(buf, off + E_HASH, hash);
        buf[off + E_NAME..off + E_NAME + p.suffix.len()].copy_from_slice(p.suffix);
        off += entry_len(p.suffix.len());
        hashes.push(hash);
    }
    hashes
}

/// Build an in-inode area of exactly `area_len` bytes holding `attrs` (in the given
/// order). No attributes gives all zeros. [`FsError::NoSpace`] if they do not fit.
pub fn build_ibody(attrs: &[(Vec<u8>, Vec<u8>)], area_len: usize) -> FsResult<Vec<u8>> {
    build_ibody_stored(&Stored::plain(attrs), area_len)
}

/// [`build_ibody`] of attributes as stored.
pub fn build_ibody_stored(attrs: &[Stored], area_len: usize) -> FsResult<Vec<u8>> {
    let p = prepare(attrs)?;
    let mut buf = vec![0u8; area_len];
    if p.is_empty() {
        return Ok(buf);
    }
    let need = IBODY_HEADER_SIZE + 4 + p.iter().map(space).sum::<usize>();
    if need > area_len {
        return Err(FsError::NoSpace(format!("in-inode xattrs need {need} bytes, the inode has {area_len}")));
    }
    put_u32(&mut buf, 0, XATTR_MAGIC);
    write_entries(&mut buf, IBODY_HEADER_SIZE, IBODY_HEADER_SIZE, &p, false);
    Ok(buf)
}

/// Build an xattr block of `block_len` bytes holding `attrs`, entries sorted by (index,
/// name length, name) as ext4 expects, with entry hashes, the block hash, `h_blocks` = 1
/// and `h_refcount` = `refcount`. [`FsError::NoSpace`] if they do not fit.
pub fn build_block(attrs: &[(Vec<u8>, Vec<u8>)], refcount: u32, block_len: usize) -> FsResult<Vec<u8>> {
    build_block_stored(&Stored::plain(attrs), refcount, block_len)
}

/// [`build_block`] of attributes as stored.
pub fn build_block_stored(attrs: &[Stored], refcount: u32, block_len: usize) -> FsResult<Vec<u8>> {
    let mut p = prepare(attrs)?;
    p.sort_by(|a, b| (a.index, a.suffix.len(), a.suffix).cmp(&(b.index, b.suffix.len(), b.suffix)));
    let need = BLOCK_HEADER_SIZE + 4 + p.iter().map(space).sum::<usize>();
    if need > block_len || block_len > u16::MAX as usize + 1 {
        return Err(FsError::NoSpace(format!("xattr block needs {need} bytes, a block has {block_len}")));
    }
    let mut buf = vec![0u8; block_len];
    put_u32(&mut buf, H_MAGIC, XATTR_MAGIC);
    put_u32(&mut buf, H_REFCOUNT, refcount);
    put_u32(&mut buf, H_BLOCKS, 1);
    let hashes = write_entries(&mut buf, BLOCK_HEADER_SIZE, 0, &p, true);
    put_u32(&mut buf, H_HASH, block_hash(hashes));
    Ok(buf)
}

/// Place `attrs` like ext4: each goes into the inode if it still fits `ibody_len` bytes,
/// otherwise into the block. Returns the in-inode area (`ibody_len` bytes) and the
/// attributes left for the block (build it with [`build_block`] when not empty).
/// [`FsError::NoSpace`] if the rest does not fit a block of `block_len` bytes.
pub fn layout(
    attrs: &[(Vec<u8>, Vec<u8>)],
    ibody_len: usize,
    block_len: usize,
) -> FsResult<(Vec<u8>, XattrList)> {
    let (ibody, rest) = layout_stored(&Stored::plain(attrs), ibody_len, block_len)?;
    Ok((ibody, rest.into_iter().map(|a| (a.name, a.value)).collect()))
}

/// [`layout`] of attributes as stored.
pub fn layout_stored(
    attrs: &[Stored],
    ibody_len: usize,
    block_len: usize,
) -> FsResult<(Vec<u8>, Vec<Stored>)> {
    let p = prepare(attrs)?;
    let mut used = IBODY_HEADER_SIZE + 4;
    let mut inode_list = Vec::new();
    let mut block_list = Vec::new();
    for (i, pr) in p.iter().enumerate() {
        if used + space(pr) <= ibody_len {
            used += space(pr);
            inode_list.push(attrs[i].clone());
        } else {
            block_list.push(attrs[i].clone());
        }
    }
    if !block_list.is_empty() && block_size_needed_stored(&block_list)? > block_len {
        return Err(FsError::NoSpace(format!(
            "extended attributes do not fit the inode and one {block_len}-byte block"
        )));
    }
    Ok((build_ibody_stored(&inode_list, ibody_len)?, block_list))
}

/// `h_checksum` of the xattr block `block` at block number `blocknr` with file system seed
/// `seed`: CRC32C over the block number (little-endian u64), then the block with the
/// checksum field as zero (shared blocks keep one checksum: it does not depend on an inode).
pub fn block_checksum(seed: u32, blocknr: u64, block: &[u8]) -> u32 {
    let mut c = crate::ondisk::csum::crc32c(seed, &blocknr.to_le_bytes());
    c = crate::ondisk::csum::crc32c(c, &block[..H_CHECKSUM]);
    c = crate::ondisk::csum::crc32c(c, &[0; 4]);
    crate::ondisk::csum::crc32c(c, &block[H_CHECKSUM + 4..])
}

/// Write `h_checksum` into xattr block `block` at `blocknr`.
pub fn set_block_checksum(seed: u32, blocknr: u64, block: &mut [u8]) {
    let c = block_checksum(seed, blocknr, block);
    block[H_CHECKSUM..H_CHECKSUM + 4].copy_from_slice(&c.to_le_bytes());
}

/// Check `h_checksum` of xattr block `block` at `blocknr`: `Err((stored, computed))` on a
/// mismatch.
pub fn verify_block_checksum(seed: u32, blocknr: u64, block: &[u8]) -> Result<(), (u32, u32)> {
    let stored = u32::from_le_bytes([
        block[H_CHECKSUM],
        block[H_CHECKSUM + 1],
        block[H_CHECKSUM + 2],
        block[H_CHECKSUM + 3],
    ]);
    let computed = block_checksum(seed, blocknr, block);
    if stored != computed { Err((stored, computed)) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[(&str, &str)]) -> XattrList {
        v.iter().map(|(n, x)| (n.as_bytes().to_vec(), x.as_bytes().to_vec())).collect()
    }

    #[test]
    fn names() {
        assert_eq!(split_name(b"user.foo").unwrap(), (1, &b"foo"[..]));
        assert_eq!(split_name(b"system.posix_acl_access").unwrap(), (2, &b""[..]));
        assert_eq!(split_name(b"security.selinux").unwrap(), (6, &b"selinux"[..]));
        assert_eq!(split_name(b"system.data").unwrap(), (7, &b"data"[..]));
        assert!(split_name(b"os2.x").is_err());
        assert!(split_name(b"user.").is_err());
        assert_eq!(join_name(4, b"x").unwrap(), b"trusted.x");
    }

    #[test]
    fn ibody_round_trip() {
        let attrs = list(&[("user.a", "1"), ("system.posix_acl_access", "acl!"), ("user.bb", "")]);
        let area = build_ibody(&attrs, 96).unwrap();
        assert_eq!(parse_ibody(&area).unwrap(), attrs);
        assert!(build_ibody(&list(&[("user.x", &"v".repeat(80))]), 96).is_err());
        assert!(parse_ibody(&[0u8; 96]).unwrap().is_empty());
    }

    #[test]
    fn block_round_trip_sorted() {
        let attrs = list(&[("user.zz", "2"), ("user.a", "1"), ("security.s", "sec"), ("trusted.t", "")]);
        let b = build_block(&attrs, 1, 4096).unwrap();
        let xb = XattrBlock::decode(&b).unwrap();
        let names: Vec<_> = xb.attrs().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            vec![b"user.a".to_vec(), b"user.zz".to_vec(), b"trusted.t".to_vec(), b"security.s".to_vec()]
        );
        for e in &xb.entries {
            assert_eq!(e.hash, entry_hash(&e.name, &e.value));
        }
        assert_eq!(xb.hash, block_hash(xb.entries.iter().map(|e| e.hash)));
    }

    #[test]
    fn layout_spills_to_block() {
        let attrs = list(&[("user.small", "x"), ("user.big", &"v".repeat(200))]);
        let (ib, rest) = layout(&attrs, 96, 4096).unwrap();
        assert_eq!(parse_ibody(&ib).unwrap(), attrs[..1].to_vec());
        assert_eq!(rest, attrs[1..].to_vec());
    }
}
