//! The whole-image check behind `cjfs check` (and the knowledge recovery passes that
//! rebuild bitmaps need): on a read-only mount, visit every directory from the root; each
//! directory's entries must be readable with correct `.` and `..`, every reachable inode
//! must have a valid mode matching its directory entry type, a sane link count and an
//! extent tree that passes [`crate::extent_tree::check`] (through [`Fs::check_inode`]); no
//! block may be owned twice (files, the journal and the static metadata: superblock and
//! descriptor copies, bitmaps, inode tables, the resize inode's double-indirect block and
//! the reserved GDT blocks it maps) and `i_blocks` must count what each inode
//! owns. The owned blocks and reachable inodes are then compared with the bitmaps and the
//! free counts of the group descriptors and the superblock: a block or inode in use but
//! marked free is an error, one marked in use but not found (leaked, or an orphan) and count
//! differences are warnings. The orphan list is walked as the next read-write mount would
//! walk it.
//!
//! Checksums (`metadata_csum`, `uninit_bg`): every structure the walk reads is checked
//! against its checksum as it is read (inodes, extent tree blocks, directory leaves and
//! htree nodes, xattr blocks), and so are the bitmaps of initialised groups; a mismatch is
//! an error naming the structure. The superblock and the group descriptors are checked
//! before mounting by [`layout_checksum_errors`], which lists every mismatch (a mount stops
//! at the first).
//!
//! What it does **not** look at (e2fsck does): unreachable inodes beyond counting them (a
//! leaked inode with a bad extent tree is not opened), `i_size` against the extents,
//! directory block internals beyond what reading the entries needs (rec_len slack, unused
//! tail space, htree node contents), duplicate names in a directory, timestamps, xattr
//! block contents and reference counts, the backup superblocks and descriptors, the
//! journal's log contents (only its inode's blocks), and flags or fields cjfs ignores. So
//! an image this check passes can still fail e2fsck; a clean e2fsck is the final word.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use crate::check::InodeCheck;
use crate::error::FsResult;
use crate::fs::Fs;
use crate::inode::read_raw_inode;
use crate::mkfs::read_layout_for;
use crate::ondisk::bitmap;
use crate::ondisk::csum::Csum;
use crate::ondisk::features::{COMPAT_RESIZE_INODE, INCOMPAT_MMP, RO_COMPAT_PROJECT, RO_COMPAT_QUOTA};
use crate::ondisk::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, GroupDesc};
use crate::ondisk::inode::RESIZE_INO;
use crate::ondisk::superblock::{SUPERBLOCK_SIZE, Superblock, sb_location};
use crate::types::{FileType, Ino, ROOT_INO};
use cjfs_blockdev::BlockDevice;

/// `EXT2_DIND_BLOCK`: the double-indirect slot of a block-mapped `i_block`.
const DIND_BLOCK: usize = 13;

/// Problems listed in full before the rest are only counted.
pub const MAX_LISTED: usize = 50;

/// A growable bit set over block or inode numbers.
struct BitSet(Vec<u64>);

impl BitSet {
    fn new(n: u64) -> Self {
        BitSet(vec![0; n.div_ceil(64) as usize])
    }
    /// Set bit `i`; returns whether it was already set.
    fn set(&mut self, i: u64) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        let was = self.0[w] & (1 << b) != 0;
        self.0[w] |= 1 << b;
        was
    }
    fn get(&self, i: u64) -> bool {
        self.0.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

/// One reachable inode.
struct Seen {
    path: String,
    kind: Option<FileType>,
    links: u16,
    refs: u32,
}

/// The check's findings.
#[derive(Default)]
struct Findings {
    errors: Vec<String>,
    error_count: usize,
    warnings: Vec<String>,
}

impl Findings {
    fn error(&mut self, m: String) {
        self.error_count += 1;
        if self.errors.len() < MAX_LISTED {
            self.errors.push(m);
        }
    }
    fn warn(&mut self, m: String) {
        self.warnings.push(m);
    }
}

struct Walker<'a> {
    fs: &'a Fs,
    sb: Superblock,
    report: Findings,
    seen: HashMap<Ino, Seen>,
    owned: BitSet,
    owned_count: u64,
    xattr_blocks: HashSet<u64>,
    /// References to each EA inode found (`ea_inode`): one per body entry, one per entry
    /// of each distinct xattr block.
    ea_refs: BTreeMap<Ino, u64>,
    /// Xattr blocks whose EA inode references are counted.
    ea_ref_blocks: HashSet<u64>,
    dup_blocks: u64,
    /// The quota files (`quota` images), and the usage the inodes charge to each id of
    /// each kind.
    quota: Option<crate::quota::Quotas>,
    usage: [BTreeMap<u32, (u64, u64)>; 3],
    dirs: u64,
    files: u64,
    others: u64,
    data_blocks: u64,
    meta_blocks: u64,
    journal_blocks: u64,
}

impl<'a> Walker<'a> {
    /// Claim blocks `start..start+len` for `what`; a block claimed twice is an error.
    fn claim(&mut self, start: u64, len: u64, what: &str) {
        let limit = self.sb.block_count();
        let mut first_dup = None;
        let mut dups = 0u64;
        for b in start..start.saturating_add(len) {
            if b >= limit {
                self.report.error(format!("{what}: block {b} is beyond the end of the file system"));
                return;
            }
            if self.owned.set(b) {
                dups += 1;
                first_dup.get_or_insert(b);
            } else {
                self.owned_count += 1;
            }
        }
        if let Some(b) = first_dup {
            self.dup_blocks += dups;
            self.report
                .error(format!("{what}: {dups} block(s) from block {b} are also owned by something else"));
        }
    }

    fn claim_inode(&mut self, c: &InodeCheck, what: &str) -> u64 {
        let mut n = 0;
        for m in &c.extents {
            self.claim(m.pblk, u64::from(m.len), what);
            n += u64::from(m.len);
        }
        for &b in &c.tree_blocks {
            self.claim(b, 1, &format!("{what} (extent tree block)"));
            n += 1;
        }
        self.count_ea_refs(c);
        if let Some(b) = c.xattr_block {
            // Xattr blocks may be shared between inodes (refcounted).
            if self.xattr_blocks.insert(b) {
                self.claim(b, 1, &format!("{what} (xattr block)"));
            }
        }
        if c.stored_blocks() != c.counted_blocks() {
            self.report.error(format!(
                "{what}: i_blocks says {} block(s) but the inode owns {}",
                c.stored_blocks(),
                c.counted_blocks()
            ));
        }
        n
    }

    /// Charge inode `c`, in use, to its ids' usage as `e2fsck` counts it (see
    /// `crate::quota`).
    fn charge_quota(&mut self, c: &InodeCheck) {
        let Some(q) = &self.quota else { return };
        if !q.charges(c.ino, c.flags) {
            return;
        }
        let inodes = 1 + (c.ea_body.len() + c.ea_block.len()) as u64;
        for (kind, u) in self.usage.iter_mut().enumerate() {
            let e = u.entry(c.ids[kind]).or_default();
            e.0 += c.blocks_512 * 512;
            e.1 += inodes;
        }
    }

    /// Each quota file's usage against what the inodes found charge.
    fn check_quota(&mut self) {
        let Some(q) = &self.quota else { return };
        for kind in 0..3 {
            let file: BTreeMap<u32, (u64, u64)> = match q.entries(&self.fs.inner, kind) {
                Ok(Some(f)) => f.into_iter().map(|e| (e.id, (e.bytes, e.inodes))).collect(),
                Ok(None) => continue,
                Err(e) => {
                    self.report.error(format!("{} quota: {e}", crate::QuotaKind::ALL[kind].name()));
                    continue;
                }
            };
            let ids: BTreeSet<u32> = file.keys().chain(self.usage[kind].keys()).copied().collect();
            for id in ids {
                let has = file.get(&id).copied().unwrap_or_default();
                let want = self.usage[kind].get(&id).copied().unwrap_or_default();
                if has != want {
                    self.report.error(format!(
                        "{} quota id {id}: the quota file says {} bytes in {} inodes, the inodes hold {} bytes in {}",
                        crate::QuotaKind::ALL[kind].name(),
                        has.0,
                        has.1,
                        want.0,
                        want.1
                    ));
                }
            }
        }
    }

    /// An orphan's attributes still hold their EA inodes, and it its quota, until it is
    /// freed. One that still has links (a truncate cut short) was counted by the walk that
    /// reached it.
    fn count_orphan(&mut self, c: &InodeCheck) {
        if c.links == 0 {
            self.count_ea_refs(c);
            self.charge_quota(c);
        }
    }

    /// Count the EA inode references of inode `c`'s attributes: one per body entry, one
    /// per entry of each distinct xattr block.
    fn count_ea_refs(&mut self, c: &InodeCheck) {
        let block = c.xattr_block.is_some_and(|b| self.ea_ref_blocks.insert(b));
        let block_refs: &[(u32, u32)] = if block { &c.ea_block } else { &[] };
        for &(ino, _) in c.ea_body.iter().chain(block_refs) {
            *self.ea_refs.entry(ino).or_default() += 1;
        }
    }

    /// Static metadata: the blocks before the first group, superblock and GDT copies (with
    /// reserved GDT blocks), bitmaps and inode tables.
    ///
    /// With 1 KiB blocks `s_first_data_block` is 1: block 0 (the boot sector, the superblock
    /// lives in block 1) belongs to no group and no bitmap, but `s_blocks_count` counts it
    /// and the free counts never include it, so it is in use as e2fsprogs and the kernel
    /// see it. It is claimed here so that what is found in use adds up to `s_blocks_count`
    /// minus the free blocks, and so that a file mapping it is reported as a double owner.
    fn claim_metadata(&mut self, descs: &[GroupDesc]) {
        let before = self.owned_count;
        let sb = self.sb.clone();
        if sb.first_data_block > 0 {
            self.claim(0, u64::from(sb.first_data_block), "the blocks before the first group (boot sector)");
        }
        for g in 0..sb.group_count() {
            // With meta_bg a group without a superblock copy may hold descriptor blocks.
            let n = sb.group_super_overhead(g);
            if n > 0 {
                self.claim(
                    sb.group_first_block(g),
                    u64::from(n),
                    &format!("group {g} superblock/descriptors"),
                );
            }
        }
        for (g, d) in descs.iter().enumerate() {
            self.claim(d.block_bitmap, 1, &format!("group {g} block bitmap"));
            self.claim(d.inode_bitmap, 1, &format!("group {g} inode bitmap"));
            self.claim(d.inode_table, u64::from(sb.inode_table_blocks()), &format!("group {g} inode table"));
        }
        self.meta_blocks = self.owned_count - before;
    }

    /// The resize inode (inode 7 with `resize_inode`), block-mapped: its double-indirect
    /// block (`i_block[EXT2_DIND_BLOCK]`) lists the primary reserved GDT blocks as its
    /// indirect blocks, and each of those lists its backups in the groups holding superblock
    /// copies. The reserved GDT blocks are claimed with the static metadata; this claims the
    /// double-indirect block, checks that every block the map reaches is a reserved GDT
    /// block, and that `i_blocks` counts them all.
    fn claim_resize_inode(&mut self) {
        let sb = self.sb.clone();
        if !sb.has_compat(COMPAT_RESIZE_INODE) {
            return;
        }
        let what = format!("resize inode (inode {RESIZE_INO})");
        let dev = self.fs.device().clone();
        let d = match read_raw_inode(&*dev, &sb, RESIZE_INO) {
            Ok(d) => d,
            Err(e) => return self.report.error(format!("{what}: {e}")),
        };
        let dind = u64::from(d.block_words()[DIND_BLOCK]);
        if dind == 0 {
            if sb.reserved_gdt_blocks > 0 {
                self.report.error(format!(
                    "{what}: no double-indirect block, but {} reserved GDT block(s) to map",
                    sb.reserved_gdt_blocks
                ));
            }
            return;
        }
        if dind < u64::from(sb.first_data_block) || dind >= sb.block_count() {
            return self
                .report
                .error(format!("{what}: double-indirect block {dind} is outside the file system"));
        }
        let before = self.owned_count;
        self.claim(dind, 1, &format!("{what} (double-indirect block)"));
        self.meta_blocks += self.owned_count - before;
        // Reserved GDT blocks of every group with a superblock copy.
        let reserved: Vec<(u64, u64)> = (0..sb.group_count())
            .filter(|&g| sb.has_super_in_group(g))
            .map(|g| {
                let start = sb.group_first_block(g) + 1 + u64::from(sb.classic_gdt_blocks());
                (start, start + u64::from(sb.reserved_gdt_blocks))
            })
            .collect();
        let is_reserved = |b: u64| reserved.iter().any(|&(s, e)| (s..e).contains(&b));
        let words = |blk: u64| -> FsResult<Vec<u64>> {
            let b = dev.read_block(blk)?;
            Ok(b.chunks_exact(4).map(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))).collect())
        };
        let primaries = match words(dind) {
            Ok(w) => w,
            Err(e) => return self.report.error(format!("{what}: double-indirect block {dind}: {e}")),
        };
        let mut mapped = 1u64;
        for p in primaries.into_iter().filter(|&p| p != 0) {
            if !is_reserved(p) {
                return self.report.error(format!(
                    "{what}: double-indirect block {dind} maps block {p}, which is not a reserved GDT block"
                ));
            }
            mapped += 1;
            let backups = match words(p) {
                Ok(w) => w,
                Err(e) => return self.report.error(format!("{what}: reserved GDT block {p}: {e}")),
            };
            for b in backups.into_iter().filter(|&b| b != 0) {
                if !is_reserved(b) {
                    return self.report.error(format!(
                        "{what}: reserved GDT block {p} maps block {b}, which is not a reserved GDT block"
                    ));
                }
                mapped += 1;
            }
        }
        let bs = sb.block_size();
        let stored = d.blocks_512(sb.has_huge_file(), bs) / (u64::from(bs) / 512);
        if stored != mapped {
            self.report.error(format!("{what}: i_blocks says {stored} block(s) but the inode maps {mapped}"));
        }
    }

    /// Check one newly reached inode; returns it if it is a directory to descend into.
    fn visit(&mut self, ino: Ino, path: &str, dirent_kind: FileType) -> Option<Ino> {
        let c = match self.fs.check_inode(ino) {
            Ok(c) => c,
            Err(e) => {
                self.report.error(format!("{path} (inode {ino}): {e}"));
                self.seen.insert(ino, Seen { path: path.to_string(), kind: None, links: 0, refs: 1 });
                return None;
            }
        };
        self.seen.insert(ino, Seen { path: path.to_string(), kind: c.kind, links: c.links, refs: 1 });
        let what = format!("{path} (inode {ino})");
        let Some(kind) = c.kind else {
            self.report.error(format!("{what}: invalid mode 0o{:o}", c.mode));
            return None;
        };
        if kind != dirent_kind {
            self.report.error(format!(
                "{what}: the directory entry says {} but the inode is a {}",
                dirent_kind.name(),
                kind.name()
            ));
        }
        if c.links == 0 {
            self.report.error(format!("{what}: reachable but its link count is 0"));
        }
        if c.dtime != 0 {
            self.report.error(format!("{what}: reachable but has a deletion time ({})", c.dtime));
        }
        if c.ea_refcount.is_some() {
            self.report.error(format!("{what}: an EA inode (it holds an attribute value) in a directory"));
        }
        let owned = self.claim_inode(&c, &what);
        self.data_blocks += owned;
        self.charge_quota(&c);
        match kind {
            FileType::Directory => {
                self.dirs += 1;
                Some(ino)
            }
            FileType::Regular => {
                self.files += 1;
                None
            }
            _ => {
                self.others += 1;
                None
            }
        }
    }

    /// Walk the tree from the root.
    fn walk(&mut self) {
        let root_path = "/".to_string();
        if self.visit(ROOT_INO, &root_path, FileType::Directory).is_none() {
            return;
        }
        let mut queue: VecDeque<(Ino, Ino, String)> = VecDeque::from([(ROOT_INO, ROOT_INO, root_path)]);
        while let Some((dir, parent, path)) = queue.pop_front() {
            let ents = match self.fs.readdir_all(dir) {
                Ok(e) => e,
                Err(e) => {
                    self.report.error(format!("{path} (inode {dir}): cannot read the directory: {e}"));
                    continue;
                }
            };
            let (mut dot, mut dotdot) = (false, false);
            for e in ents {
                if e.name == b"." {
                    dot = true;
                    if e.ino != dir {
                        self.report.error(format!("{path}: '.' points to inode {} instead of {dir}", e.ino));
                    }
                } else if e.name == b".." {
                    dotdot = true;
                    if e.ino != parent {
                        self.report
                            .error(format!("{path}: '..' points to inode {} instead of {parent}", e.ino));
                    }
                }
                if let Some(s) = self.seen.get_mut(&e.ino) {
                    s.refs += 1;
                    if e.name != b"." && e.name != b".." && s.kind == Some(FileType::Directory) {
                        let first = s.path.clone();
                        self.report.error(format!(
                            "{path}/{}: directory inode {} is also reachable as {first}",
                            String::from_utf8_lossy(&e.name),
                            e.ino
                        ));
                    }
                    continue;
                }
                if e.name == b"." || e.name == b".." {
                    // Counted on the inode's own visit (it is always visited first).
                    continue;
                }
                let child = if path == "/" {
                    format!("/{}", String::from_utf8_lossy(&e.name))
                } else {
                    format!("{path}/{}", String::from_utf8_lossy(&e.name))
                };
                if e.ino == 0 || e.ino > self.sb.inodes_count {
                    self.report.error(format!("{child}: entry points to invalid inode {}", e.ino));
                    continue;
                }
                if let Some(d) = self.visit(e.ino, &child, e.kind) {
                    queue.push_back((d, dir, child));
                }
            }
            if !dot || !dotdot {
                self.report.error(format!("{path} (inode {dir}): missing '.' or '..' entry"));
            }
        }
    }

    /// Compare link counts with the references found.
    fn check_links(&mut self) {
        let dir_nlink = self.sb.has_dir_nlink();
        let mut problems = Vec::new();
        for (ino, s) in &self.seen {
            if s.kind.is_none() {
                continue;
            }
            // Every visit counted 1 for the entry that found the inode; the root has no
            // such entry but its '..' points to itself, counted by the walk.
            let refs = if *ino == ROOT_INO { s.refs - 1 } else { s.refs };
            let ok = u32::from(s.links) == refs
                || (dir_nlink && s.kind == Some(FileType::Directory) && s.links == 1);
            if !ok {
                problems.push(format!(
                    "{} (inode {ino}): link count {} but {} reference(s) found",
                    s.path, s.links, refs
                ));
            }
        }
        problems.sort();
        for p in problems {
            self.report.error(p);
        }
    }

    /// EA inodes (`ea_inode`): in no directory, each is owned through the attributes that
    /// name it; its stored reference count must match the references found.
    fn check_ea_inodes(&mut self) {
        for (ino, refs) in std::mem::take(&mut self.ea_refs) {
            let what = format!("EA inode {ino}");
            let c = match self.fs.check_inode(ino) {
                Ok(c) => c,
                Err(e) => {
                    self.report.error(format!("{what}: {e}"));
                    continue;
                }
            };
            if self.seen.contains_key(&ino) {
                self.report.error(format!("{what}: also reached as {}", self.seen[&ino].path));
                continue;
            }
            self.seen.insert(ino, Seen { path: format!("<{what}>"), kind: None, links: c.links, refs: 1 });
            self.meta_blocks += self.claim_inode(&c, &what);
            match c.ea_refcount {
                None => self.report.error(format!("{what}: named by an attribute but not flagged EA_INODE")),
                Some(stored) if stored != refs => self
                    .report
                    .error(format!("{what}: reference count {stored} but {refs} reference(s) found")),
                Some(_) if c.links != 1 => self.report.error(format!("{what}: link count {}", c.links)),
                Some(_) => {}
            }
        }
    }

    /// Compare with the bitmaps and the free counts.
    fn check_bitmaps(&mut self, descs: &[GroupDesc]) {
        let sb = self.sb.clone();
        let dev = self.fs.device().clone();
        let first_ino = sb.first_ino();
        let (mut leaked_blocks, mut unmarked_blocks) = (0u64, 0u64);
        let mut unreached_inodes = 0u64;
        let mut first_unmarked_block = None;
        let mut unreached_list = Vec::new();
        let (mut sum_free_blocks, mut sum_free_inodes) = (0u64, 0u64);
        for (g, d) in descs.iter().enumerate() {
            let g32 = g as u32;
            let uninit_ok = sb.has_group_desc_csum();
            let bbm = if uninit_ok && d.flags & BG_BLOCK_UNINIT != 0 {
                Ok(bitmap::uninit_block_bitmap(&sb, d, g32))
            } else {
                dev.read_block(d.block_bitmap).map(|b| b.to_vec())
            };
            let ibm = if uninit_ok && d.flags & BG_INODE_UNINIT != 0 {
                Ok(bitmap::uninit_inode_bitmap(&sb))
            } else {
                dev.read_block(d.inode_bitmap).map(|b| b.to_vec())
            };
            let csum = Csum::from_sb(&sb);
            if let Ok(bm) = &bbm
                && !(uninit_ok && d.flags & BG_BLOCK_UNINIT != 0)
                && let Err(e) = d.verify_block_bitmap(&csum, g32, bm, sb.blocks_per_group)
            {
                self.report.error(e.to_string());
            }
            if let Ok(bm) = &ibm
                && !(uninit_ok && d.flags & BG_INODE_UNINIT != 0)
                && let Err(e) = d.verify_inode_bitmap(&csum, g32, bm, sb.inodes_per_group)
            {
                self.report.error(e.to_string());
            }
            match bbm {
                Ok(bm) => {
                    let start = sb.group_first_block(g32);
                    let n = sb.group_block_count(g32) as usize;
                    let mut free = 0u64;
                    for i in 0..n {
                        let b = start + i as u64;
                        let marked = bitmap::test(&bm, i);
                        let owned = self.owned.get(b);
                        if !marked {
                            free += 1;
                        }
                        if marked && !owned {
                            leaked_blocks += 1;
                        } else if !marked && owned {
                            unmarked_blocks += 1;
                            first_unmarked_block.get_or_insert(b);
                        }
                    }
                    sum_free_blocks += free;
                    if free != u64::from(d.free_blocks_count) {
                        self.report.warn(format!(
                            "group {g}: {free} free block(s) in the bitmap, the descriptor says {}",
                            d.free_blocks_count
                        ));
                    }
                }
                Err(e) => self.report.error(format!("group {g}: cannot read the block bitmap: {e}")),
            }
            match ibm {
                Ok(bm) => {
                    let mut free = 0u64;
                    for i in 0..sb.inodes_per_group as usize {
                        let ino = (u64::from(g32) * u64::from(sb.inodes_per_group) + i as u64 + 1)
                            .min(u64::from(u32::MAX)) as u32;
                        let marked = bitmap::test(&bm, i);
                        let used = ino < first_ino || self.seen.contains_key(&ino);
                        if !marked {
                            free += 1;
                        }
                        if marked && !used {
                            unreached_inodes += 1;
                            if unreached_list.len() < 10 {
                                unreached_list.push(ino.to_string());
                            }
                        } else if !marked && used {
                            self.report
                                .error(format!("inode {ino} is in use but marked free in the inode bitmap"));
                        }
                    }
                    sum_free_inodes += free;
                    if free != u64::from(d.free_inodes_count) {
                        self.report.warn(format!(
                            "group {g}: {free} free inode(s) in the bitmap, the descriptor says {}",
                            d.free_inodes_count
                        ));
                    }
                }
                Err(e) => self.report.error(format!("group {g}: cannot read the inode bitmap: {e}")),
            }
        }
        if unmarked_blocks > 0 {
            self.report.error(format!(
                "{unmarked_blocks} block(s) in use are marked free in the block bitmaps (first: block {})",
                first_unmarked_block.unwrap_or(0)
            ));
        }
        if leaked_blocks > 0 {
            self.report
                .warn(format!("{leaked_blocks} block(s) are marked in use but owned by nothing reachable"));
        }
        if unreached_inodes > 0 {
            self.report.warn(format!(
                "{unreached_inodes} inode(s) are marked in use but not reachable from the root (orphans or \
                 lost): {}{}",
                unreached_list.join(", "),
                if unreached_inodes > unreached_list.len() as u64 { ", ..." } else { "" }
            ));
        }
        let desc_free_blocks: u64 = descs.iter().map(|d| u64::from(d.free_blocks_count)).sum();
        let desc_free_inodes: u64 = descs.iter().map(|d| u64::from(d.free_inodes_count)).sum();
        if sb.free_blocks() != desc_free_blocks {
            self.report.warn(format!(
                "the superblock says {} free block(s), the group descriptors {desc_free_blocks}",
                sb.free_blocks()
            ));
        }
        if u64::from(sb.free_inodes_count) != desc_free_inodes {
            self.report.warn(format!(
                "the superblock says {} free inode(s), the group descriptors {desc_free_inodes}",
                sb.free_inodes_count
            ));
        }
        let used_by_bitmaps = sb.block_count().saturating_sub(sum_free_blocks);
        if used_by_bitmaps != self.owned_count {
            self.report.warn(format!(
                "{} block(s) found in use, the bitmaps mark {used_by_bitmaps}",
                self.owned_count
            ));
        }
        let used_inodes = u64::from(sb.inodes_count).saturating_sub(sum_free_inodes);
        let reserved = u64::from(first_ino.saturating_sub(1));
        let found_inodes =
            (self.seen.len() as u64 + reserved).saturating_sub(u64::from(self.seen.contains_key(&ROOT_INO)));
        if used_inodes != found_inodes {
            self.report.warn(format!(
                "{found_inodes} inode(s) found in use (including {reserved} reserved), the bitmaps mark {used_inodes}"
            ));
        }
    }
}

impl Walker<'_> {
    /// The orphan list (superblock `s_last_orphan`, then each inode's `i_dtime`): every link
    /// a non-reserved inode of the table, in use, no loop — what the next read-write mount
    /// will walk and free (the same rules as `cjfs_fs`'s mount, which refuses a bad list).
    fn check_orphans(&mut self) {
        let first = self.sb.first_ino();
        let last = self.sb.inodes_count;
        let mut head = self.sb.last_orphan;
        let mut from = "superblock s_last_orphan".to_string();
        let mut seen = HashSet::new();
        while head != 0 {
            if head < first || head > last {
                let what = if head < first { "a reserved inode" } else { "past the inode table" };
                self.report.error(format!(
                    "orphan list: {from} = {head} is {what} (orphans are inodes {first}..={last})"
                ));
                return;
            }
            if !seen.insert(head) {
                self.report.error(format!("orphan list: {from} = {head} links back into the list (a loop)"));
                return;
            }
            match self.fs.check_inode(head) {
                Ok(c) if c.mode == 0 => {
                    self.report.error(format!("orphan list: {from} = {head} names a free inode"));
                    return;
                }
                Ok(c) => {
                    self.count_orphan(&c);
                    from = format!("inode {head}'s i_dtime");
                    head = c.dtime;
                }
                Err(e) => {
                    self.report.error(format!("orphan list: {from} = {head}: {e}"));
                    return;
                }
            }
        }
        if !seen.is_empty() {
            self.report.warn(format!(
                "orphan list holds {} inode(s); the next read-write mount frees them",
                seen.len()
            ));
        }
        self.check_orphan_file(&seen);
    }

    /// The orphan file's entries (read and validated when the image was opened): the same
    /// rules as the list, and none may also be on the list.
    fn check_orphan_file(&mut self, list: &HashSet<Ino>) {
        let Some(of) = &self.fs.inner.ofile else {
            return;
        };
        let (first, last) = (self.sb.first_ino(), self.sb.inodes_count);
        let entries = of.entries();
        for &ino in &entries {
            if ino < first || ino > last || ino == of.ino {
                self.report.error(format!(
                    "orphan file: entry {ino} is not an orphan candidate (orphans are inodes {first}..={last})"
                ));
            } else if list.contains(&ino) {
                self.report.error(format!("orphan file: entry {ino} is also on the orphan list"));
            } else {
                match self.fs.check_inode(ino) {
                    Ok(c) if c.mode == 0 => {
                        self.report.error(format!("orphan file: entry {ino} is a free inode"))
                    }
                    Ok(c) => self.count_orphan(&c),
                    Err(e) => self.report.error(format!("orphan file: entry {ino}: {e}")),
                }
            }
        }
        if !entries.is_empty() {
            self.report.warn(format!(
                "orphan file holds {} inode(s); the next read-write mount frees them",
                entries.len()
            ));
        }
    }
}

/// What [`check_image`] found.
#[derive(Debug, Clone, Default)]
pub struct ImageReport {
    /// Errors, the first [`MAX_LISTED`] of them.
    pub errors: Vec<String>,
    /// Errors in all.
    pub error_count: usize,
    /// Warnings (leaked blocks or inodes, count differences, orphans awaiting a mount).
    pub warnings: Vec<String>,
    /// Reachable inodes.
    pub inodes: usize,
    /// Reachable directories.
    pub dirs: u64,
    /// Reachable regular files.
    pub files: u64,
    /// Other reachable inodes.
    pub others: u64,
    /// Blocks found in use.
    pub blocks_in_use: u64,
    /// Of those: static metadata.
    pub meta_blocks: u64,
    /// Of those: the journal.
    pub journal_blocks: u64,
    /// Of those: file data and extent trees.
    pub data_blocks: u64,
    /// Blocks in the file system.
    pub block_count: u64,
    /// Blocks owned twice.
    pub dup_blocks: u64,
}

/// The superblock's and every group descriptor's checksum, read straight from `dev`
/// (they are what a mount refuses first, so a check that needs a mount would name only
/// the first): one message per mismatch, empty when all match or the image has no
/// checksums. Fails only when the superblock cannot be read or decoded at all.
pub fn layout_checksum_errors(dev: &dyn BlockDevice) -> FsResult<Vec<String>> {
    let (sb_blk, sb_off) = sb_location(dev.block_size());
    let b0 = dev.read_block(sb_blk)?;
    let raw = &b0[sb_off..sb_off + SUPERBLOCK_SIZE];
    let sb = Superblock::decode_unverified(raw)?;
    let mut out = Vec::new();
    if let Err(e) = sb.verify_checksum() {
        out.push(e.to_string());
    }
    let csum = Csum::from_sb(&sb);
    if !csum.group_desc() || sb.desc_size() < 32 {
        return Ok(out);
    }
    let buf = crate::mkfs::read_desc_table(dev, &sb)?;
    for (g, d) in GroupDesc::decode_table(&buf, sb.group_count(), sb.desc_size())?.iter().enumerate() {
        if let Err(e) = d.verify_checksum(&csum, g as u32) {
            out.push(e.to_string());
        }
    }
    Ok(out)
}

/// Check the whole image mounted (read-only or not) as `fs`; see the module documentation.
pub fn check_image(fs: &Fs) -> FsResult<ImageReport> {
    // The file system is open, so its features passed the check for how it was opened.
    let (sb, descs) = read_layout_for(&**fs.device(), crate::ondisk::features::Access::ReadOnly)?;
    let mut w = Walker {
        fs,
        owned: BitSet::new(sb.block_count()),
        sb: sb.clone(),
        report: Findings::default(),
        seen: HashMap::new(),
        owned_count: 0,
        xattr_blocks: HashSet::new(),
        ea_refs: BTreeMap::new(),
        ea_ref_blocks: HashSet::new(),
        dup_blocks: 0,
        quota: None,
        usage: Default::default(),
        dirs: 0,
        files: 0,
        others: 0,
        data_blocks: 0,
        meta_blocks: 0,
        journal_blocks: 0,
    };
    w.claim_metadata(&descs);
    w.claim_resize_inode();
    if sb.has_journal() && sb.journal_inum != 0 {
        match fs.check_inode(sb.journal_inum) {
            Ok(c) => {
                w.journal_blocks = w.claim_inode(&c, &format!("journal (inode {})", sb.journal_inum));
            }
            Err(e) => w.report.error(format!("journal inode: {e}")),
        }
    }
    if let Some(of) = &fs.inner.ofile {
        // The orphan file is in use but in no directory: owned like the journal.
        match fs.check_inode(of.ino) {
            Ok(c) => {
                w.meta_blocks += w.claim_inode(&c, &format!("orphan file (inode {})", of.ino));
                w.seen.insert(
                    of.ino,
                    Seen { path: "<orphan file>".into(), kind: None, links: c.links, refs: 1 },
                );
            }
            Err(e) => w.report.error(format!("orphan file inode {}: {e}", of.ino)),
        }
    }
    if sb.has_incompat(INCOMPAT_MMP) && sb.mmp_block != 0 {
        // The multi-mount protection block (a file system opened read-only for `mmp`).
        w.claim(sb.mmp_block, 1, "MMP block");
        w.meta_blocks += 1;
    }
    // Quota files are in use but in no directory, as the orphan file is; inodes 3 and 4 are reserved, a project quota file
    // is an ordinary inode number.
    let quota = sb.feature_ro_compat & RO_COMPAT_QUOTA != 0;
    let project = quota && sb.feature_ro_compat & RO_COMPAT_PROJECT != 0;
    for (ino, what) in [
        (if quota { sb.usr_quota_inum } else { 0 }, "user"),
        (if quota { sb.grp_quota_inum } else { 0 }, "group"),
        (if project { sb.prj_quota_inum } else { 0 }, "project"),
    ] {
        if ino == 0 || w.seen.contains_key(&ino) {
            continue;
        }
        match fs.check_inode(ino) {
            Ok(c) => {
                w.meta_blocks += w.claim_inode(&c, &format!("{what} quota file (inode {ino})"));
                if ino >= sb.first_ino() {
                    let path = format!("<{what} quota file>");
                    w.seen.insert(ino, Seen { path, kind: None, links: c.links, refs: 1 });
                }
            }
            Err(e) => w.report.error(format!("{what} quota file inode {ino}: {e}")),
        }
    }
    match crate::quota::Quotas::load(&fs.inner) {
        Ok(q) => w.quota = q,
        Err(e) => w.report.error(format!("quota files: {e}")),
    }
    w.walk();
    w.check_orphans();
    w.check_ea_inodes();
    w.check_quota();
    w.check_links();
    w.check_bitmaps(&descs);
    Ok(ImageReport {
        errors: w.report.errors,
        error_count: w.report.error_count,
        warnings: w.report.warnings,
        inodes: w.seen.len(),
        dirs: w.dirs,
        files: w.files,
        others: w.others,
        blocks_in_use: w.owned_count,
        meta_blocks: w.meta_blocks,
        journal_blocks: w.journal_blocks,
        data_blocks: w.data_blocks,
        block_count: sb.block_count(),
        dup_blocks: w.dup_blocks,
    })
}
