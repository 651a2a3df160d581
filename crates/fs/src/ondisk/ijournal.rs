//! iJournaling's on-disk format: ijournal areas and i-transactions (see `crate::ijournal` for
//! how they are written and `crate::ijournal_replay` for how they are replayed).
//!
//! An ijournal area is a run of blocks inside the journal inode, past the primary journal's
//! `s_maxlen`, listed in the journal superblock's area table as kind `ijournal`. Stock tools
//! never read it. All integers are big-endian, as in JBD2; every checksum is crc32c seeded
//! with `crc32c(!0, file system UUID)`, so a block of another file system never validates.
//!
//! # Area header (area block 0)
//!
//! | offset | field |
//! |---:|---|
//! | 0x00 | `u32` magic [`AREA_MAGIC`] ("CJIA") |
//! | 0x04 | `u32` format version (1) |
//! | 0x08 | `u32` area index |
//! | 0x0C | `u32` area length in blocks (the header included) |
//! | 0x10 | `u64` generation: bumped at every mount and by recovery; a record of another generation is dead |
//! | 0x18 | `u32` block size |
//! | 0x1C | `u32` 1 while a recovery is replaying the area, else 0 |
//! | 0x20 | `u32` that recovery's last committed normal transaction (records at or below it are stale) |
//! | last 4 | `u32` checksum of the bytes before it |
//!
//! Blocks 1.. of the area are a ring ([`cjfs_journal::ring::LogRing`]) of i-transactions.
//!
//! # i-transaction
//!
//! One record per inode: a header block, then `n_tags` payload blocks (the file's extent
//! tree blocks changed since the last durable commit, in tag order, wrapping around the
//! ring), then, in the commit form only, a commit block.
//!
//! Header block:
//!
//! | offset | field |
//! |---:|---|
//! | 0x00 | `u32` JBD2 magic `0xC03B3998` |
//! | 0x04 | `u32` block type [`BLOCK_RECORD`] |
//! | 0x08 | `u32` TxID: the normal transaction running when the inode was captured |
//! | 0x0C | `u32` flags ([`FLAG_COMMIT_FORM`], [`FLAG_DENTRY`], [`FLAG_DIR`], [`FLAG_REPLACE`]) |
//! | 0x10 | `u64` sub-TxID (global, one per record, increasing in capture order) |
//! | 0x18 | `u64` the area's generation |
//! | 0x20 | `u32` inode number |
//! | 0x24 | `u32` inode generation (`i_generation`) |
//! | 0x28 | `u16` inode record length |
//! | 0x2A | `u16` `n_tags` |
//! | 0x2C | `u32` parent directory inode of the entry (with [`FLAG_DENTRY`]) |
//! | 0x30 | `u8` name length, `u8` ext4 file type code, `u16` 0 |
//! | 0x34 | name (255 bytes reserved) |
//! | 0x134 | the raw on-disk inode (its record length), as ext4 stores it, checksum included |
//! | then | `n_tags` × (`u64` home block, `u32` checksum of the payload block) |
//! | last 4 | `u32` checksum of the bytes before it |
//!
//! Commit block (commit form): JBD2 magic, [`BLOCK_COMMIT`], TxID, `u32` blocks in the record
//! before it, `u64` sub-TxID, `u64` generation, `u32` checksum chained over the header and
//! payload blocks, and the block's own checksum in its last 4 bytes.
//!
//! A record is complete when its header checks, it carries the area's generation, every
//! payload block matches its tag's checksum, and (commit form) its commit block checks and
//! names it. The single form is therefore one block for a file whose extent tree fits its
//! inode; the commit form (the paper's) is two.

use crate::error::{FsError, FsResult};
use crate::ondisk::csum::crc32c;

/// Magic of an area header ("CJIA").
pub const AREA_MAGIC: u32 = 0x434A_4941;
/// Format version of an area.
pub const AREA_VERSION: u32 = 1;
/// The JBD2 magic, which record headers and commit blocks start with.
pub const JBD2_MAGIC: u32 = 0xC03B_3998;
/// Block type of a record header (private: JBD2 uses 1 to 5, e2fsprogs 6 for fast commits).
pub const BLOCK_RECORD: u32 = 0x49;
/// Block type of a record's commit block.
pub const BLOCK_COMMIT: u32 = 0x4A;
/// The record has a commit block (the paper's form).
pub const FLAG_COMMIT_FORM: u32 = 1;
/// The record carries the inode's entry in its parent (not yet durable when captured).
pub const FLAG_DENTRY: u32 = 2;
/// The record is a directory's (a new directory on the fsynced file's path).
pub const FLAG_DIR: u32 = 4;
/// With [`FLAG_DENTRY`]: the entry's name was unlinked from its directory by a transaction
/// not durable when the inode was captured, so recovery may find it still naming the old
/// inode; that entry goes (the old inode loses the link, and is freed with its last one).
pub const FLAG_REPLACE: u32 = 8;

const OFF_NAME: usize = 0x34;
const NAME_SPACE: usize = 255;
const OFF_INODE: usize = OFF_NAME + NAME_SPACE + 1;
const TAG_BYTES: usize = 12;

fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn rd64(b: &[u8], o: usize) -> u64 {
    (u64::from(rd32(b, o)) << 32) | u64::from(rd32(b, o + 4))
}
fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
fn wr32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_be_bytes());
}
fn wr64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_be_bytes());
}
fn wr16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}

/// The checksum seed of a file system's ijournal blocks.
pub fn seed(uuid: &[u8; 16]) -> u32 {
    crc32c(!0, uuid)
}

/// Store the checksum of `block` in its last 4 bytes.
fn seal(seed: u32, block: &mut [u8]) {
    let n = block.len() - 4;
    let c = crc32c(seed, &block[..n]);
    wr32(block, n, c);
}

/// Whether `block`'s last 4 bytes hold its checksum.
fn sealed(seed: u32, block: &[u8]) -> bool {
    let n = block.len() - 4;
    rd32(block, n) == crc32c(seed, &block[..n])
}

/// Checksum of a payload block (its tag carries it).
pub fn payload_csum(seed: u32, block: &[u8]) -> u32 {
    crc32c(seed, block)
}

/// An area's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AreaHeader {
    /// Index of the area (its position among the ijournal areas).
    pub index: u32,
    /// Blocks in the area, the header included.
    pub len: u32,
    /// Records of another generation are dead.
    pub generation: u64,
    /// While a recovery replays the area: the last normal transaction it found committed.
    /// Recorded before the normal journal is replayed (which moves the log's sequence past
    /// an id), so a recovery cut and run again judges the records the same way.
    pub replay: Option<u32>,
}

impl AreaHeader {
    /// Encode into a block of `bs` bytes.
    pub fn encode(&self, seed: u32, bs: usize) -> Vec<u8> {
        let mut b = vec![0u8; bs];
        wr32(&mut b, 0, AREA_MAGIC);
        wr32(&mut b, 4, AREA_VERSION);
        wr32(&mut b, 8, self.index);
        wr32(&mut b, 12, self.len);
        wr64(&mut b, 16, self.generation);
        wr32(&mut b, 24, bs as u32);
        if let Some(m) = self.replay {
            wr32(&mut b, 28, 1);
            wr32(&mut b, 32, m);
        }
        seal(seed, &mut b);
        b
    }

    /// Decode an area header; `None` for a block that is not one (never formatted, torn, of
    /// another file system). A header of a later format version is refused.
    pub fn decode(seed: u32, b: &[u8]) -> FsResult<Option<AreaHeader>> {
        if b.len() < 64 || rd32(b, 0) != AREA_MAGIC || !sealed(seed, b) {
            return Ok(None);
        }
        let version = rd32(b, 4);
        if version != AREA_VERSION {
            return Err(FsError::Incompatible(format!(
                "ijournal area of format version {version} (this cjfs knows version {AREA_VERSION})"
            )));
        }
        if rd32(b, 24) as usize != b.len() {
            return Ok(None);
        }
        let replay = (rd32(b, 28) == 1).then(|| rd32(b, 32));
        Ok(Some(AreaHeader { index: rd32(b, 8), len: rd32(b, 12), generation: rd64(b, 16), replay }))
    }
}

/// A directory entry a record carries: the inode's name in its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dentry {
    /// Parent directory.
    pub parent: u32,
    /// Name.
    pub name: Vec<u8>,
    /// ext4 file type code of the entry.
    pub ftype: u8,
    /// The name may still name an unlinked inode in the durable image ([`FLAG_REPLACE`]).
    pub replace: bool,
}

/// One i-transaction's header, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    /// The normal transaction running when the inode was captured.
    pub txid: u32,
    /// Global capture order.
    pub sub: u64,
    /// The area's generation.
    pub generation: u64,
    /// Inode number.
    pub ino: u32,
    /// `i_generation`.
    pub i_generation: u32,
    /// A commit block follows the payload.
    pub commit_form: bool,
    /// A directory's record.
    pub dir: bool,
    /// The inode's entry in its parent.
    pub dentry: Option<Dentry>,
    /// The raw on-disk inode.
    pub inode: Vec<u8>,
    /// Payload blocks: (home block, checksum), in the order they follow the header.
    pub tags: Vec<(u64, u32)>,
}

/// Most payload tags a header of `bs` bytes holds with inode records of `inode_len` bytes.
pub fn max_tags(bs: usize, inode_len: usize) -> usize {
    bs.saturating_sub(OFF_INODE + inode_len + 4) / TAG_BYTES
}

impl RecordHeader {
    /// Blocks of the record (header, payload, commit block).
    pub fn blocks(&self) -> u64 {
        1 + self.tags.len() as u64 + u64::from(self.commit_form)
    }

    /// Encode into a block of `bs` bytes.
    pub fn encode(&self, seed: u32, bs: usize) -> FsResult<Vec<u8>> {
        if self.tags.len() > max_tags(bs, self.inode.len()) {
            return Err(FsError::Invalid(format!(
                "an i-transaction of {} extent blocks does not fit one header",
                self.tags.len()
            )));
        }
        let mut b = vec![0u8; bs];
        wr32(&mut b, 0, JBD2_MAGIC);
        wr32(&mut b, 4, BLOCK_RECORD);
        wr32(&mut b, 8, self.txid);
        let mut flags = 0;
        if self.commit_form {
            flags |= FLAG_COMMIT_FORM;
        }
        if let Some(d) = &self.dentry {
            flags |= FLAG_DENTRY;
            if d.replace {
                flags |= FLAG_REPLACE;
            }
        }
        if self.dir {
            flags |= FLAG_DIR;
        }
        wr32(&mut b, 12, flags);
        wr64(&mut b, 16, self.sub);
        wr64(&mut b, 24, self.generation);
        wr32(&mut b, 32, self.ino);
        wr32(&mut b, 36, self.i_generation);
        wr16(&mut b, 40, self.inode.len() as u16);
        wr16(&mut b, 42, self.tags.len() as u16);
        if let Some(d) = &self.dentry {
            wr32(&mut b, 44, d.parent);
            b[48] = d.name.len() as u8;
            b[49] = d.ftype;
            b[OFF_NAME..OFF_NAME + d.name.len()].copy_from_slice(&d.name);
        }
        b[OFF_INODE..OFF_INODE + self.inode.len()].copy_from_slice(&self.inode);
        let mut o = OFF_INODE + self.inode.len();
        for &(home, csum) in &self.tags {
            wr64(&mut b, o, home);
            wr32(&mut b, o + 8, csum);
            o += TAG_BYTES;
        }
        seal(seed, &mut b);
        Ok(b)
    }

    /// Decode a record header; `None` for a block that is not one (another kind of block,
    /// torn, stale, of another file system).
    pub fn decode(seed: u32, b: &[u8]) -> Option<RecordHeader> {
        if b.len() < OFF_INODE + 8
            || rd32(b, 0) != JBD2_MAGIC
            || rd32(b, 4) != BLOCK_RECORD
            || !sealed(seed, b)
        {
            return None;
        }
        let flags = rd32(b, 12);
        let inode_len = usize::from(rd16(b, 40));
        let n_tags = usize::from(rd16(b, 42));
        if inode_len < 128 || n_tags > max_tags(b.len(), inode_len) {
            return None;
        }
        let dentry = if flags & FLAG_DENTRY != 0 {
            let len = usize::from(b[48]);
            if len == 0 {
                return None;
            }
            Some(Dentry {
                parent: rd32(b, 44),
                name: b[OFF_NAME..OFF_NAME + len].to_vec(),
                ftype: b[49],
                replace: flags & FLAG_REPLACE != 0,
            })
        } else {
            None
        };
        let inode = b[OFF_INODE..OFF_INODE + inode_len].to_vec();
        let mut tags = Vec::with_capacity(n_tags);
        let mut o = OFF_INODE + inode_len;
        for _ in 0..n_tags {
            tags.push((rd64(b, o), rd32(b, o + 8)));
            o += TAG_BYTES;
        }
        Some(RecordHeader {
            txid: rd32(b, 8),
            sub: rd64(b, 16),
            generation: rd64(b, 24),
            ino: rd32(b, 32),
            i_generation: rd32(b, 36),
            commit_form: flags & FLAG_COMMIT_FORM != 0,
            dir: flags & FLAG_DIR != 0,
            dentry,
            inode,
            tags,
        })
    }
}

/// A record's commit block (the commit form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordCommit {
    /// The record's TxID.
    pub txid: u32,
    /// Header and payload blocks it covers.
    pub blocks: u32,
    /// The record's sub-TxID.
    pub sub: u64,
    /// The area's generation.
    pub generation: u64,
    /// Checksum chained over the covered blocks ([`chain_csum`]).
    pub csum: u32,
}

/// The checksum a commit block carries over `blocks` (header first, then the payload).
pub fn chain_csum<'a>(seed: u32, blocks: impl IntoIterator<Item = &'a [u8]>) -> u32 {
    blocks.into_iter().fold(seed, crc32c)
}

impl RecordCommit {
    /// Encode into a block of `bs` bytes.
    pub fn encode(&self, seed: u32, bs: usize) -> Vec<u8> {
        let mut b = vec![0u8; bs];
        wr32(&mut b, 0, JBD2_MAGIC);
        wr32(&mut b, 4, BLOCK_COMMIT);
        wr32(&mut b, 8, self.txid);
        wr32(&mut b, 12, self.blocks);
        wr64(&mut b, 16, self.sub);
        wr64(&mut b, 24, self.generation);
        wr32(&mut b, 32, self.csum);
        seal(seed, &mut b);
        b
    }

    /// Decode a commit block; `None` for anything else.
    pub fn decode(seed: u32, b: &[u8]) -> Option<RecordCommit> {
        if b.len() < 64 || rd32(b, 0) != JBD2_MAGIC || rd32(b, 4) != BLOCK_COMMIT || !sealed(seed, b) {
            return None;
        }
        Some(RecordCommit {
            txid: rd32(b, 8),
            blocks: rd32(b, 12),
            sub: rd64(b, 16),
            generation: rd64(b, 24),
            csum: rd32(b, 32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: usize = 4096;

    fn header() -> RecordHeader {
        RecordHeader {
            txid: 77,
            sub: 9,
            generation: 3,
            ino: 12,
            i_generation: 0xdead,
            commit_form: false,
            dir: false,
            dentry: Some(Dentry { parent: 2, name: b"file".to_vec(), ftype: 1, replace: false }),
            inode: (0..256u32).map(|i| i as u8).collect(),
            tags: vec![(1000, 5), (1001, 6)],
        }
    }

    #[test]
    fn area_header_roundtrips_and_rejects_damage() {
        let s = seed(&[7; 16]);
        let h = AreaHeader { index: 1, len: 64, generation: 42, replay: None };
        let b = h.encode(s, BS);
        assert_eq!(AreaHeader::decode(s, &b).unwrap(), Some(h));
        let r = AreaHeader { replay: Some(77), ..h };
        assert_eq!(AreaHeader::decode(s, &r.encode(s, BS)).unwrap(), Some(r));
        assert_eq!(AreaHeader::decode(seed(&[8; 16]), &b).unwrap(), None, "another file system's");
        let mut torn = b.clone();
        torn[100] ^= 1;
        assert_eq!(AreaHeader::decode(s, &torn).unwrap(), None);
        assert_eq!(AreaHeader::decode(s, &vec![0; BS]).unwrap(), None);
        let mut later = b;
        wr32(&mut later, 4, 2);
        seal(s, &mut later);
        assert!(AreaHeader::decode(s, &later).is_err(), "a later version is refused, not ignored");
    }

    #[test]
    fn record_header_roundtrips() {
        let s = seed(&[1; 16]);
        let h = header();
        let b = h.encode(s, BS).unwrap();
        assert_eq!(RecordHeader::decode(s, &b), Some(h.clone()));
        assert_eq!(h.blocks(), 3);
        let mut replacing = h.clone();
        replacing.dentry.as_mut().unwrap().replace = true;
        let b = replacing.encode(s, BS).unwrap();
        assert_eq!(rd32(&b, 12) & FLAG_REPLACE, FLAG_REPLACE);
        assert_eq!(RecordHeader::decode(s, &b), Some(replacing));
        let mut plain = h.clone();
        plain.dentry = None;
        plain.commit_form = true;
        plain.dir = true;
        plain.tags.clear();
        let b = plain.encode(s, BS).unwrap();
        assert_eq!(RecordHeader::decode(s, &b), Some(plain.clone()));
        assert_eq!(plain.blocks(), 2);
        // Every byte counts: a torn sector fails the checksum.
        for off in [0usize, 20, 300, 4000] {
            let mut bad = h.encode(s, BS).unwrap();
            bad[off] ^= 0x40;
            assert_eq!(RecordHeader::decode(s, &bad), None, "byte {off}");
        }
        assert!(RecordCommit::decode(s, &h.encode(s, BS).unwrap()).is_none());
    }

    #[test]
    fn too_many_tags_do_not_encode() {
        let s = seed(&[1; 16]);
        let mut h = header();
        let max = max_tags(BS, 256);
        assert!(max > 200);
        h.tags = vec![(1, 1); max];
        assert!(h.encode(s, BS).is_ok());
        h.tags.push((2, 2));
        assert!(h.encode(s, BS).is_err());
    }

    #[test]
    fn commit_block_roundtrips() {
        let s = seed(&[2; 16]);
        let a = vec![1u8; BS];
        let b = vec![2u8; BS];
        let c =
            RecordCommit { txid: 5, blocks: 2, sub: 8, generation: 1, csum: chain_csum(s, [&a[..], &b[..]]) };
        let enc = c.encode(s, BS);
        assert_eq!(RecordCommit::decode(s, &enc), Some(c));
        assert_ne!(chain_csum(s, [&b[..], &a[..]]), c.csum, "order matters");
        assert!(RecordHeader::decode(s, &enc).is_none());
    }
}
