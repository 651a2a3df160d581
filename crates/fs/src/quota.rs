//! Quota usage (`quota` feature; project ids with `project`): the hidden quota files the
//! superblock names (`s_usr_quota_inum`, `s_grp_quota_inum`, `s_prj_quota_inum`) keep, per
//! user, group and project id, the inodes and bytes charged to it. cjfs keeps them exact,
//! in the transaction that changes the charge, as the kernel's journalled quota does
//! (`ext4_mark_dquot_dirty` writes the dquot inside the running handle); `e2fsck` recounts
//! them from the inodes and reports any difference.
//!
//! What is charged, as `e2fsck` (`pass1.c` `check_blocks`) counts it: every inode in use
//! that is the root or at least `s_first_ino`, except the project quota file, the orphan
//! file and EA inodes, is charged `i_blocks` × 512 bytes and 1 + (its attributes stored in
//! EA inodes) inodes, to its uid, gid and (with `project`) project id. An inode's charge
//! follows its record: [`crate::inode::store_inode`] compares the charge of the record it
//! writes with the one it wrote before ([`Charge`]) and moves the difference, so every path
//! that changes `i_blocks`, the owner or the inode's life is covered without a call of its
//! own. Limits are kept as found and not enforced (the kernel enforces them only when
//! mounted with `usrquota`/`grpquota`/`prjquota`, which cjfs has no equivalent of); grace
//! times are cleared when usage falls back to the soft limit, as `dquot_decr_space` does.
//!
//! The file format is the kernel's v2r1 quota tree (`fs/quota/quota_tree.c`,
//! `lib/support/quotaio_tree.c` in e2fsprogs): 1 KiB quota blocks whatever the file system's
//! block size; block 0 holds the header (magic, version) and the info (grace times, flags,
//! `dqi_blocks`, the free-block and free-entry lists); a four-level radix tree from block 1
//! indexed by the id's bytes; data blocks of fourteen 72-byte entries behind a 16-byte
//! header. A new id is inserted as the kernel inserts it (a block with free entries first,
//! then the free-block list, then a new block at the end of the file; the file grows by one
//! file system block mapped into its extent tree when needed). Entries are never deleted:
//! one left at zero usage is what the kernel leaves while a dquot is in use, and `e2fsck`
//! accepts it.
//!
//! An operation that brings an id in (a new inode, a chown, a project change) first gives
//! it its entries ([`Quotas::prepare`]), so that a full file system refuses the operation
//! before it changes anything, as the kernel's `dquot_initialize` does.
//!
//! iJournaling: an fsync whose file changed its charge since the last durable commit commits
//! ([`crate::ijournal::Fallback::Quota`]): an i-transaction carries no quota block.
//!
//! Lock: each quota file has its own mutex (rank `FsQuota`), taken inside a transaction
//! under the inode locks of the change, one file at a time; under it the allocator's group
//! locks and journal buffer access.

use std::collections::HashMap;
use std::sync::Arc;

use cjfs_journal::Buffer;
use cjfs_journal::lock_rank::{Rank, RankedMutex};

use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::fs::FsInner;
use crate::inode::InodeState;
use crate::ondisk::csum::InodeCsum;
use crate::ondisk::features::{RO_COMPAT_PROJECT, RO_COMPAT_QUOTA};
use crate::ondisk::inode::{EXT4_EA_INODE_FL, Inode as DiskInode};
use crate::tx::{ReadStore, Tx};
use crate::types::{Ino, ROOT_INO};

/// Bytes of one quota tree block (`QT_BLKSIZE`).
const QBLK: usize = 1024;
/// The tree's root block (`QT_TREEOFF`).
const TREE_ROOT: u32 = 1;
/// Levels of the radix tree (`QT_TREEDEPTH`).
const DEPTH: u32 = 4;
/// A data block's header (`struct qt_disk_dqdbheader`).
const DATA_HDR: usize = 16;
/// One v2r1 entry (`struct v2r1_disk_dqblk`).
const ENTRY: usize = 72;
/// Entries per data block.
const PER_BLOCK: usize = (QBLK - DATA_HDR) / ENTRY;
/// Header magics per type (`V2_INITQMAGICS`).
const MAGIC: [u32; 3] = [0xd9c0_1f11, 0xd9c0_1927, 0xd9c0_3f14];
/// `V2_VERSION_R1`.
const VERSION: u32 = 1;
/// Offset of `struct v2_disk_dqinfo` in block 0.
const INFO: usize = 8;

// Fields of an entry.
const E_ID: usize = 0;
const E_IHARD: usize = 8;
const E_ISOFT: usize = 16;
const E_CURINODES: usize = 24;
const E_BHARD: usize = 32;
const E_BSOFT: usize = 40;
const E_CURSPACE: usize = 48;
const E_BTIME: usize = 56;
const E_ITIME: usize = 64;

/// A kind of quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// Per user id (`s_usr_quota_inum`).
    User = 0,
    /// Per group id (`s_grp_quota_inum`).
    Group = 1,
    /// Per project id (`s_prj_quota_inum`, with the `project` feature).
    Project = 2,
}

impl QuotaKind {
    /// All three, in the order of the superblock's fields.
    pub const ALL: [QuotaKind; 3] = [QuotaKind::User, QuotaKind::Group, QuotaKind::Project];

    /// "user", "group" or "project".
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }
}

/// One id's entry in a quota file, as [`crate::Fs::quota_report`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaEntry {
    /// The user, group or project id.
    pub id: u32,
    /// Bytes charged (`dqb_curspace`).
    pub bytes: u64,
    /// Inodes charged (`dqb_curinodes`).
    pub inodes: u64,
    /// Block soft and hard limits, in bytes (0: none; kept, not enforced).
    pub bytes_limits: (u64, u64),
    /// Inode soft and hard limits (0: none; kept, not enforced).
    pub inodes_limits: (u64, u64),
}

/// The three kinds of quota, in the order of the superblock's fields.
const NAMES: [&str; 3] = ["user", "group", "project"];

/// What one inode's record is charged with: its ids and usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Charge {
    /// uid, gid, project id.
    pub ids: [u32; 3],
    /// Bytes (`i_blocks` × 512).
    pub bytes: u64,
    /// Inodes: the inode and its EA inodes.
    pub inodes: u64,
}

/// The info block's fields cjfs changes.
#[derive(Debug, Clone, Copy)]
struct Info {
    blocks: u32,
    free_blk: u32,
    free_entry: u32,
}

/// One quota file. Protected by its [`Quotas::files`] mutex (every field).
struct QuotaFile {
    /// 0 user, 1 group, 2 project.
    kind: usize,
    /// Its inode (no cached inode object: only this structure writes its record).
    ino: Ino,
    /// Its inode record as stored.
    d: DiskInode,
    /// Checksum context of its extent tree blocks.
    csum: InodeCsum,
    /// Physical block of each file system block of the file.
    map: Vec<u64>,
    /// The info block's fields, as last written.
    info: Info,
    /// Byte offset in the file of each id's entry.
    entries: HashMap<u32, u64>,
}

/// The quota files of a mounted file system (those the superblock names).
pub(crate) struct Quotas {
    /// User, group and project quota files. Lock: each its own mutex (rank `FsQuota`).
    files: [Option<RankedMutex<QuotaFile>>; 3],
    /// The project quota file and the orphan file: not charged (`e2fsck` skips them).
    /// Fixed after mount, as are the fields below.
    uncharged: [Ino; 2],
    /// `s_first_ino`: inodes below it other than the root are not charged.
    first_ino: Ino,
    /// The `project` feature: project ids are charged.
    project: bool,
}

fn corrupt(kind: usize, ino: Ino, what: String) -> FsError {
    FsError::Corrupt(format!("{} quota file inode {ino}: {what}", NAMES[kind]))
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

impl Quotas {
    /// Read and check the quota files of `fs` (reads only). `None` without the `quota`
    /// feature or without any quota file named.
    pub fn load(fs: &FsInner) -> FsResult<Option<Quotas>> {
        let sb = fs.sb.lock().clone();
        if sb.feature_ro_compat & RO_COMPAT_QUOTA == 0 {
            return Ok(None);
        }
        let project = sb.feature_ro_compat & RO_COMPAT_PROJECT != 0;
        let inums = [sb.usr_quota_inum, sb.grp_quota_inum, if project { sb.prj_quota_inum } else { 0 }];
        let mut files: [Option<RankedMutex<QuotaFile>>; 3] = [None, None, None];
        for (kind, &ino) in inums.iter().enumerate() {
            if ino == 0 {
                continue;
            }
            if ino > fs.geo.inodes_count {
                return Err(corrupt(
                    kind,
                    ino,
                    format!("past the inode table ({} inodes)", fs.geo.inodes_count),
                ));
            }
            files[kind] = Some(RankedMutex::new(Rank::FsQuota, QuotaFile::load(fs, kind, ino)?));
        }
        if files.iter().all(Option::is_none) {
            return Ok(None);
        }
        let orphan_file = fs.ofile.as_ref().map_or(0, |o| o.ino);
        Ok(Some(Quotas { files, uncharged: [inums[2], orphan_file], first_ino: fs.geo.first_ino, project }))
    }

    /// Whether an inode in use numbered `ino` with flags `flags` is charged to quota.
    pub fn charges(&self, ino: Ino, flags: u32) -> bool {
        (ino == ROOT_INO || ino >= self.first_ino)
            && !self.uncharged.contains(&ino)
            && flags & EXT4_EA_INODE_FL == 0
    }

    /// Every entry of the quota file of `kind`, by id. `None` when there is no such file.
    pub fn entries(&self, fs: &FsInner, kind: usize) -> FsResult<Option<Vec<QuotaEntry>>> {
        let Some(f) = &self.files[kind] else { return Ok(None) };
        let q = f.lock();
        let mut out = Vec::with_capacity(q.entries.len());
        for (&id, &off) in &q.entries {
            let (buf, at) = q.locate(fs, off)?;
            let b = buf.read();
            let e = &b[at..at + ENTRY];
            let kib = |at| le64(e, at).saturating_mul(QBLK as u64);
            out.push(QuotaEntry {
                id,
                bytes: le64(e, E_CURSPACE),
                inodes: le64(e, E_CURINODES),
                bytes_limits: (kib(E_BSOFT), kib(E_BHARD)),
                inodes_limits: (le64(e, E_ISOFT), le64(e, E_IHARD)),
            });
        }
        out.sort_by_key(|e| e.id);
        Ok(Some(out))
    }

    /// Journal credits a change of one inode's charge may need: each file's entries of the
    /// old and new ids, and an insertion (tree blocks, a data block, the header, the file's
    /// record, a new block with its bitmap, descriptor and an extent tree block).
    pub fn credits(&self) -> u32 {
        self.files.iter().flatten().count() as u32 * 2 + 12
    }

    /// Give each of `ids` (uid, gid, project id) an entry where its quota file has none, in
    /// `tx`, before an operation that charges them changes anything else: as the kernel
    /// acquires its dquots (`dquot_initialize`, `dquot_transfer`) before it allocates, a
    /// full file system fails the operation here (ENOSPC) with nothing of it done, not half
    /// way through. A partial insertion leaves at most an empty tree block, which is valid.
    pub fn prepare(&self, tx: &mut Tx<'_>, ids: [u32; 3]) -> FsResult<()> {
        for (kind, f) in self.files.iter().enumerate() {
            let Some(f) = f else { continue };
            let id = if kind == 2 && !self.project { 0 } else { ids[kind] };
            let mut q = f.lock();
            if !q.entries.contains_key(&id) {
                // The quota file's own tree blocks are none of the operation's inode's.
                let tree = std::mem::take(&mut tx.tree);
                let r = q.insert(tx, id);
                tx.tree = tree;
                r?;
            }
        }
        Ok(())
    }

    /// Move `old`'s charge to `new` in `tx`.
    pub fn transfer(&self, tx: &mut Tx<'_>, old: Option<Charge>, new: Option<Charge>) -> FsResult<()> {
        for (kind, f) in self.files.iter().enumerate() {
            let Some(f) = f else { continue };
            let o = old.map(|c| (c.ids[kind], c.bytes as i64, c.inodes as i64));
            let n = new.map(|c| (c.ids[kind], c.bytes as i64, c.inodes as i64));
            let mut deltas: Vec<(u32, i64, i64)> = Vec::with_capacity(2);
            if let Some((id, b, i)) = o {
                deltas.push((id, -b, -i));
            }
            if let Some((id, b, i)) = n {
                match deltas.iter_mut().find(|d| d.0 == id) {
                    Some(d) => {
                        d.1 += b;
                        d.2 += i;
                    }
                    None => deltas.push((id, b, i)),
                }
            }
            deltas.retain(|d| d.1 != 0 || d.2 != 0);
            if deltas.is_empty() {
                continue;
            }
            let mut q = f.lock();
            for (id, db, di) in deltas {
                q.add(tx, id, db, di)?;
            }
        }
        Ok(())
    }

    /// Usage of `id` in the quota of `kind` (0 user, 1 group, 2 project) as the file holds
    /// it: `(bytes, inodes)`, `None` if the id has no entry or the file does not exist.
    pub fn usage(&self, fs: &FsInner, kind: usize, id: u32) -> FsResult<Option<(u64, u64)>> {
        let Some(f) = &self.files[kind] else { return Ok(None) };
        let q = f.lock();
        let Some(&off) = q.entries.get(&id) else { return Ok(None) };
        let (buf, at) = q.locate(fs, off)?;
        let b = buf.read();
        Ok(Some((le64(&b[..], at + E_CURSPACE), le64(&b[..], at + E_CURINODES))))
    }
}

/// The charge of `st`'s record (see [`Charge`]), with the EA values counted when the file
/// system has `ea_inode`; `live`: the inode is in use (a record without links is, while it
/// is an orphan; when stored by the code that frees it, it is not).
pub(crate) fn current(fs: &FsInner, q: &Quotas, st: &InodeState, live: bool) -> Option<Charge> {
    let d = &st.d;
    if !live || d.mode == 0 || !q.charges(st.ino, d.flags) {
        return None;
    }
    let ea = if fs.geo.ea_inode {
        match crate::xattr::ea_refs_of(fs, st) {
            Ok((b, k)) => (b.len() + k.len()) as u64,
            Err(e) => {
                log::warn!(
                    "inode {}: attributes unreadable, its EA values not charged to quota: {e}",
                    st.ino
                );
                0
            }
        }
    } else {
        0
    };
    let projid = if q.project { d.projid } else { 0 };
    Some(Charge {
        ids: [d.uid, d.gid, projid],
        bytes: d.blocks_512(fs.geo.huge_file, fs.geo.block_size as u32) * 512,
        inodes: 1 + ea,
    })
}

impl QuotaFile {
    fn load(fs: &FsInner, kind: usize, ino: Ino) -> FsResult<QuotaFile> {
        let d = crate::inode::load_inode(fs, ino)?;
        if !d.is_reg() || d.links_count == 0 {
            return Err(corrupt(kind, ino, format!("not a regular file in use (mode {:o})", d.mode)));
        }
        let bs = fs.geo.block_size as u64;
        let csum = fs.csum.for_inode(ino, d.generation);
        let nblocks = d.size.div_ceil(bs);
        if d.size < (2 * QBLK) as u64 || nblocks > 1 << 20 {
            return Err(corrupt(kind, ino, format!("size {} is not that of a quota tree", d.size)));
        }
        let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
        let mut map = Vec::with_capacity(nblocks as usize);
        for l in 0..nblocks as u32 {
            let m = if d.has_extents() {
                extent_tree::lookup(&d.block, &mut store, csum, l)?
            } else {
                crate::block_map::lookup(&d.block, &mut store, bs as usize, l)?
            };
            match m.and_then(|m| m.pblk_of(l)).filter(|_| !m.is_some_and(|m| m.unwritten)) {
                Some(p) => map.push(p),
                None => return Err(corrupt(kind, ino, format!("file block {l} is not mapped"))),
            }
        }
        let mut q = QuotaFile {
            kind,
            ino,
            d,
            csum,
            map,
            info: Info { blocks: 0, free_blk: 0, free_entry: 0 },
            entries: HashMap::new(),
        };
        let head = q.read_qblk(fs, 0)?;
        let (magic, version) = (le32(&head, 0), le32(&head, 4));
        if magic != MAGIC[kind] || version != VERSION {
            return Err(corrupt(
                kind,
                ino,
                format!(
                    "header magic {magic:#x} version {version}: not a v2r1 quota file (want {:#x} 1)",
                    MAGIC[kind]
                ),
            ));
        }
        q.info = Info {
            blocks: le32(&head, INFO + 12),
            free_blk: le32(&head, INFO + 16),
            free_entry: le32(&head, INFO + 20),
        };
        if q.info.blocks < 2 || u64::from(q.info.blocks) * QBLK as u64 > q.map.len() as u64 * bs {
            return Err(corrupt(
                kind,
                ino,
                format!(
                    "dqi_blocks {} does not fit the file's {} bytes",
                    q.info.blocks,
                    q.map.len() as u64 * bs
                ),
            ));
        }
        for (what, b) in [("dqi_free_blk", q.info.free_blk), ("dqi_free_entry", q.info.free_entry)] {
            if b >= q.info.blocks || b == TREE_ROOT {
                return Err(corrupt(
                    kind,
                    ino,
                    format!("{what} {b} is outside the tree (dqi_blocks {})", q.info.blocks),
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        q.walk(fs, TREE_ROOT, 0, &mut seen)?;
        Ok(q)
    }

    /// Record the entries below tree block `blk` at `depth`.
    fn walk(
        &mut self,
        fs: &FsInner,
        blk: u32,
        depth: u32,
        seen: &mut std::collections::HashSet<u32>,
    ) -> FsResult<()> {
        let b = self.read_qblk(fs, blk)?;
        for i in 0..QBLK / 4 {
            let r = le32(&b, i * 4);
            if r == 0 {
                continue;
            }
            if r >= self.info.blocks || r == TREE_ROOT {
                return Err(corrupt(
                    self.kind,
                    self.ino,
                    format!("tree block {blk} refers to block {r} (dqi_blocks {})", self.info.blocks),
                ));
            }
            if depth + 1 < DEPTH {
                if !seen.insert(r) {
                    return Err(corrupt(self.kind, self.ino, format!("tree block {r} is referred to twice")));
                }
                self.walk(fs, r, depth + 1, seen)?;
            } else if seen.insert(r) {
                let data = self.read_qblk(fs, r)?;
                for e in 0..PER_BLOCK {
                    let at = DATA_HDR + e * ENTRY;
                    if data[at..at + ENTRY].iter().all(|&x| x == 0) {
                        continue;
                    }
                    let id = le32(&data, at + E_ID);
                    let off = u64::from(r) * QBLK as u64 + at as u64;
                    if self.entries.insert(id, off).is_some() {
                        return Err(corrupt(self.kind, self.ino, format!("id {id} has two entries")));
                    }
                }
            }
        }
        Ok(())
    }

    /// The buffer and byte offset in it of file byte `off`.
    fn locate(&self, fs: &FsInner, off: u64) -> FsResult<(Arc<Buffer>, usize)> {
        let bs = fs.geo.block_size as u64;
        let pblk = *self
            .map
            .get((off / bs) as usize)
            .ok_or_else(|| corrupt(self.kind, self.ino, format!("offset {off} past the end of the file")))?;
        Ok((fs.cache.read(pblk)?, (off % bs) as usize))
    }

    fn read_qblk(&self, fs: &FsInner, blk: u32) -> FsResult<Vec<u8>> {
        let (buf, at) = self.locate(fs, u64::from(blk) * QBLK as u64)?;
        Ok(buf.read()[at..at + QBLK].to_vec())
    }

    /// Change quota block `blk` in `tx` with `f`.
    fn change(&self, tx: &mut Tx<'_>, blk: u32, f: impl FnOnce(&mut [u8])) -> FsResult<()> {
        let (buf, at) = self.locate(tx.fs, u64::from(blk) * QBLK as u64)?;
        tx.h.get_write_access(&buf)?;
        f(&mut buf.write()[at..at + QBLK]);
        Ok(())
    }

    fn write_info(&self, tx: &mut Tx<'_>) -> FsResult<()> {
        let i = self.info;
        self.change(tx, 0, |b| {
            put32(b, INFO + 12, i.blocks);
            put32(b, INFO + 16, i.free_blk);
            put32(b, INFO + 20, i.free_entry);
        })
    }

    /// Add `bytes` and `inodes` (negative to remove) to `id`'s usage, inserting its entry
    /// when it has none.
    fn add(&mut self, tx: &mut Tx<'_>, id: u32, bytes: i64, inodes: i64) -> FsResult<()> {
        let off = match self.entries.get(&id) {
            Some(&o) => o,
            None => self.insert(tx, id)?,
        };
        let (buf, at) = self.locate(tx.fs, off)?;
        tx.h.get_write_access(&buf)?;
        let mut g = buf.write();
        let e = &mut g[at..at + ENTRY];
        let space = (le64(e, E_CURSPACE) as i64).saturating_add(bytes).max(0) as u64;
        let count = (le64(e, E_CURINODES) as i64).saturating_add(inodes).max(0) as u64;
        if (le64(e, E_CURSPACE) as i64) + bytes < 0 || (le64(e, E_CURINODES) as i64) + inodes < 0 {
            log::warn!("{} quota id {id}: usage would go below zero; kept at zero", NAMES[self.kind]);
        }
        put64(e, E_CURSPACE, space);
        put64(e, E_CURINODES, count);
        // As `dquot_decr_space` / `dquot_decr_inodes`: back at or below the soft limit, the
        // grace period is over.
        let bsoft = le64(e, E_BSOFT).saturating_mul(QBLK as u64);
        if bytes < 0 && space <= bsoft {
            put64(e, E_BTIME, 0);
        }
        if inodes < 0 && count <= le64(e, E_ISOFT) {
            put64(e, E_ITIME, 0);
        }
        // An all-zero entry reads as free (`v2r1_mem2diskdqblk` marks it so).
        if e.iter().all(|&x| x == 0) {
            put64(e, E_ITIME, 1);
        }
        Ok(())
    }

    /// Insert an entry for `id` (`qtree_write_dquot` → `dq_insert_tree`); returns its
    /// offset in the file.
    fn insert(&mut self, tx: &mut Tx<'_>, id: u32) -> FsResult<u64> {
        let mut tb = TREE_ROOT;
        for depth in 0..DEPTH {
            let slot = (((id >> ((DEPTH - depth - 1) * 8)) & 0xff) * 4) as usize;
            let r = le32(&self.read_qblk(tx.fs, tb)?, slot);
            if depth + 1 == DEPTH {
                if r != 0 {
                    return Err(corrupt(
                        self.kind,
                        self.ino,
                        format!("id {id} is in the tree but has no entry"),
                    ));
                }
                let (blk, off) = self.free_entry(tx, id)?;
                self.change(tx, tb, |b| put32(b, slot, blk))?;
                self.entries.insert(id, off);
                return Ok(off);
            }
            tb = if r == 0 {
                let nb = self.free_block(tx)?;
                self.change(tx, tb, |b| put32(b, slot, nb))?;
                nb
            } else {
                r
            };
        }
        unreachable!("the loop returns at the last level")
    }

    /// A zeroed block: from the free-block list, else a new one at the end of the file
    /// (`get_free_dqblk`).
    fn free_block(&mut self, tx: &mut Tx<'_>) -> FsResult<u32> {
        let blk = if self.info.free_blk != 0 {
            let blk = self.info.free_blk;
            let next = le32(&self.read_qblk(tx.fs, blk)?, 0);
            if next >= self.info.blocks || next == TREE_ROOT {
                return Err(corrupt(self.kind, self.ino, format!("free block {blk} links to block {next}")));
            }
            self.info.free_blk = next;
            blk
        } else {
            let blk = self.info.blocks;
            self.grow(tx, blk)?;
            self.info.blocks += 1;
            blk
        };
        self.change(tx, blk, |b| b.fill(0))?;
        self.write_info(tx)?;
        Ok(blk)
    }

    /// Make room in the file for quota block `blk`: a new file system block when it is past
    /// the mapped ones, and `i_size` covering it (`ext4_quota_write`).
    fn grow(&mut self, tx: &mut Tx<'_>, blk: u32) -> FsResult<()> {
        let bs = tx.fs.geo.block_size as u64;
        let end = (u64::from(blk) + 1) * QBLK as u64;
        if end <= self.d.size {
            return Ok(());
        }
        if end > self.map.len() as u64 * bs {
            if !self.d.has_extents() {
                return Err(FsError::NotSupported(format!(
                    "{} quota file inode {}: growing a block-mapped quota file",
                    NAMES[self.kind], self.ino
                )));
            }
            let lblk = self.map.len() as u32;
            let goal = self.map.last().map_or_else(|| crate::alloc::inode_goal(tx.fs, self.ino), |p| p + 1);
            let (pblk, _) = crate::alloc::alloc_blocks_any(tx, goal, 1)?;
            let m = Mapping { lblk, pblk, len: 1, unwritten: false };
            let delta = match extent_tree::insert(&mut self.d.block, tx, self.csum, m, goal) {
                Ok(d) => d,
                Err(e) => {
                    crate::alloc::free_blocks(tx, pblk, 1, false)?;
                    return Err(e);
                }
            };
            let buf = tx.fs.cache.get_new(pblk);
            tx.h.get_create_access(&buf)?;
            buf.write().fill(0);
            self.map.push(pblk);
            let sectors = self.d.blocks_512(tx.fs.geo.huge_file, bs as u32)
                + (1 + u64::from(delta.blocks_allocated)) * (bs / 512);
            self.d.set_blocks_512(sectors, tx.fs.geo.huge_file, bs as u32)?;
        }
        self.d.size = end;
        crate::inode::store_record(tx, self.ino, &mut self.d)
    }

    /// A free entry for `id` in a data block (`find_free_dqentry`): returns the block and
    /// the entry's offset in the file, the entry holding `id` and nothing else.
    fn free_entry(&mut self, tx: &mut Tx<'_>, id: u32) -> FsResult<(u32, u64)> {
        let blk = if self.info.free_entry != 0 {
            self.info.free_entry
        } else {
            let b = self.free_block(tx)?;
            self.info.free_entry = b;
            self.write_info(tx)?;
            b
        };
        let data = self.read_qblk(tx.fs, blk)?;
        let entries = u16::from_le_bytes([data[8], data[9]]) as usize;
        let Some(slot) = (0..PER_BLOCK).find(|&e| {
            let at = DATA_HDR + e * ENTRY;
            data[at..at + ENTRY].iter().all(|&x| x == 0)
        }) else {
            return Err(corrupt(
                self.kind,
                self.ino,
                format!("data block {blk} on the free-entry list is full"),
            ));
        };
        if entries + 1 >= PER_BLOCK {
            self.unlink_free_entry(tx, blk, &data)?;
        }
        let at = DATA_HDR + slot * ENTRY;
        self.change(tx, blk, |b| {
            b[8..10].copy_from_slice(&((entries + 1) as u16).to_le_bytes());
            put32(b, at + E_ID, id);
            if id == 0 {
                put64(b, at + E_ITIME, 1);
            }
        })?;
        Ok((blk, u64::from(blk) * QBLK as u64 + at as u64))
    }

    /// Take full data block `blk` (contents `data`) off the free-entry list
    /// (`remove_free_dqentry`).
    fn unlink_free_entry(&mut self, tx: &mut Tx<'_>, blk: u32, data: &[u8]) -> FsResult<()> {
        let (next, prev) = (le32(data, 0), le32(data, 4));
        for b in [next, prev] {
            if b >= self.info.blocks || b == TREE_ROOT {
                return Err(corrupt(self.kind, self.ino, format!("data block {blk} links to block {b}")));
            }
        }
        if next != 0 {
            self.change(tx, next, |b| put32(b, 4, prev))?;
        }
        if prev != 0 {
            self.change(tx, prev, |b| put32(b, 0, next))?;
        } else {
            self.info.free_entry = next;
            self.write_info(tx)?;
        }
        self.change(tx, blk, |b| {
            put32(b, 0, 0);
            put32(b, 4, 0);
        })
    }
}
