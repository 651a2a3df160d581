//! The ext4 fast-commit area (kernel ≥ 5.10, e2fsprogs ≥ 1.46): the last `s_num_fc_blks`
//! blocks of the journal (256 when 0) while the journal has `INCOMPAT_FAST_COMMIT`, holding a
//! log of tag-length-value records, little-endian, written by the kernel's fast commits
//! between two full commits (`fs/ext4/fast_commit.h`).
//!
//! Each record is `u16 tag, u16 len` and `len` bytes of value; a record never crosses a
//! block boundary (a PAD fills the rest of a block). The area starts with HEAD (features,
//! the tid of the transaction running when the fast commits were made); each fast commit
//! ends with TAIL (that tid and a crc32c, from 0, over every record since the previous TAIL:
//! PADs and HEAD included, and the TAIL's own tag, length and tid). What is replayed is every
//! record up to the last TAIL that checks, in log order — and only if HEAD names the
//! transaction that was running at the crash (the first the normal journal does not hold).
//!
//! | tag | value |
//! |---|---|
//! | 1 ADD_RANGE | `u32 ino`, `struct ext4_extent` (12 bytes): map these logical blocks here |
//! | 2 DEL_RANGE | `u32 ino, u32 lblk, u32 len`: unmap them |
//! | 3 CREAT | `u32 parent, u32 ino`, name: a new inode's entry |
//! | 4 LINK | `u32 parent, u32 ino`, name: an entry to an existing inode |
//! | 5 UNLINK | `u32 parent, u32 ino`, name: an entry removed |
//! | 6 INODE | `u32 ino`, the raw inode (128 + `i_extra_isize` bytes; `i_block` not replayed for extent inodes) |
//! | 7 PAD | zeros |
//! | 8 TAIL | `u32 tid, u32 crc` |
//! | 9 HEAD | `u32 features, u32 tid` |

use crate::ondisk::csum::crc32c;

/// `EXT4_FC_TAG_ADD_RANGE`.
pub const TAG_ADD_RANGE: u16 = 1;
/// `EXT4_FC_TAG_DEL_RANGE`.
pub const TAG_DEL_RANGE: u16 = 2;
/// `EXT4_FC_TAG_CREAT`.
pub const TAG_CREAT: u16 = 3;
/// `EXT4_FC_TAG_LINK`.
pub const TAG_LINK: u16 = 4;
/// `EXT4_FC_TAG_UNLINK`.
pub const TAG_UNLINK: u16 = 5;
/// `EXT4_FC_TAG_INODE`.
pub const TAG_INODE: u16 = 6;
/// `EXT4_FC_TAG_PAD`.
pub const TAG_PAD: u16 = 7;
/// `EXT4_FC_TAG_TAIL`.
pub const TAG_TAIL: u16 = 8;
/// `EXT4_FC_TAG_HEAD`.
pub const TAG_HEAD: u16 = 9;
/// `EXT4_FC_SUPPORTED_FEATURES`.
pub const SUPPORTED_FEATURES: u32 = 0;

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// One record to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FcTag {
    /// Map `[lblk, lblk + len)` of `ino` to `pblk..` (unwritten when `unwritten`).
    AddRange {
        /// Inode.
        ino: u32,
        /// First logical block.
        lblk: u32,
        /// Blocks.
        len: u32,
        /// First physical block.
        pblk: u64,
        /// Allocated, not written.
        unwritten: bool,
    },
    /// Unmap `[lblk, lblk + len)` of `ino`.
    DelRange {
        /// Inode.
        ino: u32,
        /// First logical block.
        lblk: u32,
        /// Blocks.
        len: u32,
    },
    /// A new inode's entry (CREAT) or an entry to an existing one (LINK).
    Link {
        /// Directory.
        parent: u32,
        /// Inode.
        ino: u32,
        /// Name.
        name: Vec<u8>,
    },
    /// An entry removed.
    Unlink {
        /// Directory.
        parent: u32,
        /// Inode.
        ino: u32,
        /// Name.
        name: Vec<u8>,
    },
    /// The raw inode.
    Inode {
        /// Inode.
        ino: u32,
        /// The raw record (128 + `i_extra_isize` bytes).
        raw: Vec<u8>,
    },
}

/// What a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FcScan {
    /// The records to replay (up to the last valid TAIL), in log order.
    pub tags: Vec<FcTag>,
    /// Fast commits (valid TAILs) they make up.
    pub commits: u32,
    /// Why the scan stopped where it did.
    pub stop: String,
}

/// Scan the fast-commit blocks `blocks` (in order) for fast commits made after transaction
/// `expected` started (see the module docs). Reads only what it is given.
pub fn scan(blocks: &[Vec<u8>], expected: u32) -> FcScan {
    let mut out = FcScan::default();
    let mut pending: Vec<FcTag> = Vec::new();
    let mut crc = 0u32;
    let mut seen_head = false;
    'blocks: for (off, b) in blocks.iter().enumerate() {
        let bs = b.len();
        if off == 0 && (bs < 4 || le16(b, 0) != TAG_HEAD) {
            out.stop = "no fast commit (the area does not start with HEAD)".into();
            return out;
        }
        let mut cur = 0usize;
        while cur + 1 < bs {
            if cur + 4 > bs {
                break;
            }
            let (tag, len) = (le16(b, cur), usize::from(le16(b, cur + 2)));
            let end = cur + 4 + len;
            if end > bs {
                out.stop = format!("record at block {off} offset {cur} runs past the block");
                break 'blocks;
            }
            let val = &b[cur + 4..end];
            let rec = &b[cur..end];
            match tag {
                TAG_HEAD => {
                    if val.len() < 8 {
                        out.stop = "short HEAD".into();
                        break 'blocks;
                    }
                    let (features, tid) = (le32(val, 0), le32(val, 4));
                    if features & !SUPPORTED_FEATURES != 0 {
                        out.stop = format!("HEAD with unsupported features 0x{features:x}");
                        break 'blocks;
                    }
                    if tid != expected {
                        out.stop =
                            format!("HEAD of transaction {tid}, the log ends before {expected}: stale");
                        break 'blocks;
                    }
                    seen_head = true;
                    crc = crc32c(crc, rec);
                }
                TAG_TAIL => {
                    if val.len() < 8 {
                        out.stop = "short TAIL".into();
                        break 'blocks;
                    }
                    crc = crc32c(crc, &b[cur..cur + 8]);
                    let (tid, want) = (le32(val, 0), le32(val, 4));
                    if seen_head && tid == expected && want == crc {
                        out.tags.append(&mut pending);
                        out.commits += 1;
                    } else {
                        out.stop = format!("TAIL of transaction {tid} fails its check");
                        break 'blocks;
                    }
                    crc = 0;
                }
                TAG_PAD => crc = crc32c(crc, rec),
                TAG_ADD_RANGE | TAG_DEL_RANGE | TAG_CREAT | TAG_LINK | TAG_UNLINK | TAG_INODE => {
                    crc = crc32c(crc, rec);
                    match parse(tag, val) {
                        Some(t) => pending.push(t),
                        None => {
                            out.stop = format!("malformed record {tag} at block {off} offset {cur}");
                            break 'blocks;
                        }
                    }
                }
                other => {
                    out.stop = format!("unknown tag {other} at block {off} offset {cur}");
                    break 'blocks;
                }
            }
            cur = end;
        }
    }
    if out.stop.is_empty() {
        out.stop = "end of the area".into();
    }
    out
}

fn parse(tag: u16, v: &[u8]) -> Option<FcTag> {
    Some(match tag {
        TAG_ADD_RANGE => {
            if v.len() < 16 {
                return None;
            }
            let (ino, lblk, raw_len) = (le32(v, 0), le32(v, 4), le16(v, 8));
            let pblk = (u64::from(le16(v, 10)) << 32) | u64::from(le32(v, 12));
            let (len, unwritten) = if raw_len > 32768 {
                (u32::from(raw_len - 32768), true)
            } else {
                (u32::from(raw_len), false)
            };
            if len == 0 {
                return None;
            }
            FcTag::AddRange { ino, lblk, len, pblk, unwritten }
        }
        TAG_DEL_RANGE => {
            if v.len() < 12 {
                return None;
            }
            FcTag::DelRange { ino: le32(v, 0), lblk: le32(v, 4), len: le32(v, 8) }
        }
        TAG_CREAT | TAG_LINK | TAG_UNLINK => {
            if v.len() < 9 || v.len() - 8 > 255 {
                return None;
            }
            let (parent, ino, name) = (le32(v, 0), le32(v, 4), v[8..].to_vec());
            if tag == TAG_UNLINK {
                FcTag::Unlink { parent, ino, name }
            } else {
                FcTag::Link { parent, ino, name }
            }
        }
        TAG_INODE => {
            if v.len() < 4 + 128 {
                return None;
            }
            FcTag::Inode { ino: le32(v, 0), raw: v[4..].to_vec() }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u16, val: &[u8]) -> Vec<u8> {
        let mut v = tag.to_le_bytes().to_vec();
        v.extend((val.len() as u16).to_le_bytes());
        v.extend_from_slice(val);
        v
    }

    /// A block of `records`, a TAIL over them (with the running crc from `crc0`) and a PAD
    /// to the end, as the kernel writes one fast commit.
    fn commit_block(records: &[Vec<u8>], tid: u32, crc0: u32, bs: usize) -> (Vec<u8>, u32) {
        let mut b = Vec::new();
        let mut crc = crc0;
        for r in records {
            crc = crc32c(crc, r);
            b.extend_from_slice(r);
        }
        let mut tail = TAG_TAIL.to_le_bytes().to_vec();
        // The TAIL's length stretches to the end of the block.
        let tail_len = (bs - b.len() - 4) as u16;
        tail.extend(tail_len.to_le_bytes());
        tail.extend(tid.to_le_bytes());
        crc = crc32c(crc, &tail);
        tail.extend(crc.to_le_bytes());
        b.extend(tail);
        b.resize(bs, 0);
        (b, crc)
    }

    #[test]
    fn scans_up_to_the_last_valid_tail() {
        let bs = 1024;
        let head = tlv(TAG_HEAD, &[0, 0, 0, 0, 7, 0, 0, 0]);
        let mut add = 12u32.to_le_bytes().to_vec();
        add.extend(5u32.to_le_bytes());
        add.extend(3u16.to_le_bytes());
        add.extend(0u16.to_le_bytes());
        add.extend(900u32.to_le_bytes());
        let mut link = 2u32.to_le_bytes().to_vec();
        link.extend(12u32.to_le_bytes());
        link.extend_from_slice(b"name");
        let (b0, _) = commit_block(&[head, tlv(TAG_ADD_RANGE, &add), tlv(TAG_CREAT, &link)], 7, 0, bs);
        let mut del = 12u32.to_le_bytes().to_vec();
        del.extend(0u32.to_le_bytes());
        del.extend(1u32.to_le_bytes());
        let (b1, _) = commit_block(&[tlv(TAG_DEL_RANGE, &del)], 7, 0, bs);
        let s = scan(&[b0.clone(), b1.clone()], 7);
        assert_eq!(s.commits, 2, "{}", s.stop);
        assert_eq!(
            s.tags,
            vec![
                FcTag::AddRange { ino: 12, lblk: 5, len: 3, pblk: 900, unwritten: false },
                FcTag::Link { parent: 2, ino: 12, name: b"name".to_vec() },
                FcTag::DelRange { ino: 12, lblk: 0, len: 1 },
            ]
        );
        // A torn second commit keeps the first.
        let mut torn = b1.clone();
        torn[6] ^= 1;
        let s = scan(&[b0.clone(), torn], 7);
        assert_eq!((s.commits, s.tags.len()), (1, 2));
        // Another transaction's area is stale.
        assert!(scan(&[b0.clone(), b1], 8).tags.is_empty());
        assert!(scan(&[vec![0; bs]], 7).tags.is_empty());
    }
}
