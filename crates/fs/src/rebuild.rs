//! Rebuilding metadata from file-level records: the machinery iJournaling's replay
//! (`crate::ijournal_replay`) and ext4 fast-commit replay (`crate::fast_commit`) share.
//!
//! A [`Rebuild`] mounts the image (the normal journal already replayed) over an in-memory
//! overlay with a journal that logs nothing, so every change is made by the file system's
//! own code — the allocator with its bitmaps, group descriptors and checksums, the
//! directory code with its htree — and lands in the overlay, never on the device. Nothing
//! else runs on the mount: no orphan processing, no superblock update, no timestamps taken
//! from the clock, and every allocation is deterministic, so the same image and the same
//! records give the same blocks. [`Rebuild::finish`] hands them back, and the caller
//! commits them as one journal transaction (`cjfs_journal::external_tx`), so a recovery
//! cut anywhere is either fully replayed by the next one or recomputed by it from the
//! same image.
//!
//! Bitmaps, group descriptors and counters are never taken from a record: they follow
//! from the blocks and inodes an installed inode owns compared with what its previous
//! version owned (the paper's Fig. 5: free what it no longer maps, claim what it maps now).

use std::sync::Arc;

use cjfs_blockdev::{BlockBuf, Device, MemOverlay};
use cjfs_journal::{BufferCache, Journal, JournalArea, JournalConfig};

use crate::error::FsResult;
use crate::extent_tree;
use crate::fs::FsInner;
use crate::inode::{InodeState, store_inode};
use crate::mkfs::read_layout;
use crate::ondisk::dirent::FT_DIR;
use crate::ondisk::inode::{EXT4_EXTENTS_FL, EXT4_INDEX_FL, Inode as DiskInode};
use crate::ondisk::superblock::{SUPERBLOCK_SIZE, sb_location};
use crate::tx::{ReadStore, Tx};
use crate::types::{DataMode, Ino, MountOptions};

/// Why a record was not applied (the caller counts it; nothing was changed for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped(pub String);

/// Sorted, disjoint, merged block ranges `(start, end)`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    /// Ranges from `(start, len)` pieces (any order, may overlap or touch).
    pub fn from_pieces(mut v: Vec<(u64, u64)>) -> Ranges {
        v.retain(|&(_, l)| l > 0);
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (s, l) in v {
            let e = s + l;
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        Ranges(out)
    }

    /// The blocks in `self` and not in `other`, as `(start, len)`.
    pub fn minus(&self, other: &Ranges) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut j = 0;
        for &(s, e) in &self.0 {
            let mut cur = s;
            while j < other.0.len() && other.0[j].1 <= cur {
                j += 1;
            }
            let mut k = j;
            while cur < e {
                match other.0.get(k) {
                    Some(&(os, oe)) if os < e => {
                        if os > cur {
                            out.push((cur, os - cur));
                        }
                        cur = cur.max(oe);
                        k += 1;
                    }
                    _ => {
                        out.push((cur, e - cur));
                        cur = e;
                    }
                }
            }
        }
        out
    }

    /// Whether block `b` is in a range.
    pub fn contains(&self, b: u64) -> bool {
        let i = self.0.partition_point(|&(_, e)| e <= b);
        self.0.get(i).is_some_and(|&(s, _)| s <= b)
    }
}

/// The mounted image a recovery step rebuilds on. See the module docs.
pub(crate) struct Rebuild {
    pub fs: FsInner,
    overlay: Arc<MemOverlay>,
    /// Device blocks of the journal inode (never part of the result).
    journal: Ranges,
}

impl Rebuild {
    /// Mount `dev` (its journal replayed; `primary`: its primary log) for rebuilding.
    pub fn open(dev: &Device, primary: &JournalArea, journal_inode: &JournalArea) -> FsResult<Rebuild> {
        let overlay = Arc::new(MemOverlay::new(dev.clone()));
        let odev: Device = overlay.clone();
        let (sb, descs) = read_layout(&*odev)?;
        let cache = Arc::new(BufferCache::new(odev.clone(), 4096));
        let ofile = crate::orphan::OrphanFile::load(&odev, &sb, &cache)?;
        let opts = MountOptions {
            journal: JournalConfig {
                commit_interval: std::time::Duration::from_secs(3600),
                ..JournalConfig::nojournal()
            },
            data: DataMode::Ordered,
            read_only: false,
            cache_blocks: 4096,
            core_groups: false,
            adaptive: false,
            leave: crate::types::LeaveMode::Empty,
            dirsync: false,
            sync: false,
            mmp_held: None,
            #[cfg(feature = "planted-bugs")]
            bugs: crate::planted::FsBugs::default(),
        };
        let journal =
            Journal::open_logs(odev.clone(), vec![primary.clone()], cache.clone(), opts.journal.clone())?;
        let journal_blocks =
            Ranges::from_pieces(journal_inode.extents().iter().map(|e| (e.dev_start, e.len)).collect());
        let fs = FsInner::assemble(odev, cache, journal, sb, descs, opts, ofile, None);
        Ok(Rebuild { fs, overlay, journal: journal_blocks })
    }

    /// Whether inode `ino` is live: in use in its bitmap, linked, with a type.
    pub fn live(&self, ino: Ino) -> FsResult<Option<DiskInode>> {
        if ino == 0 || ino > self.fs.geo.inodes_count {
            return Ok(None);
        }
        if !crate::alloc::inode_in_use(&self.fs, ino)? {
            return Ok(None);
        }
        let d = crate::inode::load_inode(&self.fs, ino)?;
        Ok((d.links_count > 0 && d.mode != 0).then_some(d))
    }

    /// Whether `ino` is a live directory.
    pub fn live_dir(&self, ino: Ino) -> FsResult<bool> {
        Ok(self.live(ino)?.is_some_and(|d| d.is_dir()))
    }

    /// The inode `name` names in directory `dir` (which must be live).
    pub fn lookup(&self, dir: Ino, name: &[u8]) -> FsResult<Option<Ino>> {
        let node = self.fs.inodes.get(&self.fs, dir)?;
        let mut st = node.state.write();
        Ok(crate::dir::lookup(&self.fs, &mut st, name)?.map(|s| s.ino))
    }

    /// The blocks an inode owns: its extent tree's blocks and data, and its xattr block.
    /// `store` reads the tree (a record's blocks may stand in for the device's).
    fn owned(&self, d: &DiskInode, ino: Ino, store: &mut ReadStore<'_>) -> Result<Ranges, Skipped> {
        let mut v = Vec::new();
        if d.file_acl != 0 {
            v.push((d.file_acl, 1));
        }
        if d.flags & EXT4_EXTENTS_FL != 0 {
            let ic = self.fs.csum.for_inode(ino, d.generation);
            extent_tree::check(&d.block, store, ic)
                .map_err(|e| Skipped(format!("inode {ino}: extent tree: {e}")))?;
            extent_tree::for_each_extent(&d.block, store, ic, |m| v.push((m.pblk, u64::from(m.len))))
                .map_err(|e| Skipped(format!("inode {ino}: extent tree: {e}")))?;
            for b in extent_tree::tree_blocks(&d.block, store, ic)
                .map_err(|e| Skipped(format!("inode {ino}: extent tree: {e}")))?
            {
                v.push((b, 1));
            }
        } else if crate::block_map::maps_blocks(d) {
            // Block-mapped (an ext3 file kept through the upgrade to extents).
            let owned = crate::block_map::owned(&d.block, store, self.fs.geo.block_size)
                .map_err(|e| Skipped(format!("inode {ino}: block map: {e}")))?;
            v.extend(owned.runs.iter().map(|m| (m.pblk, u64::from(m.len))));
            v.extend(owned.indirect.iter().map(|&b| (b, 1)));
        }
        let r = Ranges::from_pieces(v);
        let limit = self.fs.geo.blocks_count;
        if r.0.iter().any(|&(s, e)| s < self.fs.geo.first_data_block || e > limit) {
            return Err(Skipped(format!("inode {ino} maps blocks outside the file system")));
        }
        Ok(r)
    }

    /// Install a file's inode record `image` (not a directory) at `ino`, with its extent tree
    /// blocks `payload` (`(home block, image)`): the blocks its previous version owned and it
    /// no longer maps are freed, the ones it maps now are claimed, the tree blocks written,
    /// the inode marked in use. The link count is the previous version's when it was live
    /// (names are only ever added by records, never removed), else `links` (its new names).
    /// Nothing changes when the record does not fit the image (a block it claims in use by
    /// another, a tree that does not parse): `Err(Skipped)`.
    pub fn install_file(
        &self,
        ino: Ino,
        image: &[u8],
        payload: &[(u64, BlockBuf)],
        links: u16,
    ) -> FsResult<Result<(), Skipped>> {
        let fs = &self.fs;
        let mut new = match DiskInode::decode(image) {
            Ok(d) => d,
            Err(e) => return Ok(Err(Skipped(format!("inode {ino}: {e}")))),
        };
        if new.is_dir() || new.mode == 0 || image.len() != fs.geo.inode_size as usize {
            return Ok(Err(Skipped(format!("inode {ino}: not a file's record"))));
        }
        let old = self.live(ino)?;
        if old.as_ref().is_some_and(|o| o.is_dir()) {
            return Ok(Err(Skipped(format!("inode {ino} is a live directory"))));
        }
        if new.file_acl != old.as_ref().map_or(0, |o| o.file_acl) {
            return Ok(Err(Skipped(format!("inode {ino}: xattr block differs"))));
        }
        let limit = fs.geo.blocks_count;
        let old_owned = match &old {
            Some(o) => {
                let mut store = ReadStore { cache: &fs.cache, limit };
                match self.owned(o, ino, &mut store) {
                    Ok(r) => r,
                    Err(s) => return Ok(Err(s)),
                }
            }
            None => Ranges::default(),
        };
        // The new tree is read with the record's blocks standing in for the device's.
        let scratch_dev: Device = Arc::new(MemOverlay::new(fs.dev.clone()));
        let scratch = BufferCache::new(scratch_dev, 64);
        for (home, img) in payload {
            if *home >= limit || *home < fs.geo.first_data_block {
                return Ok(Err(Skipped(format!("inode {ino}: extent block {home} outside the file system"))));
            }
            let b = scratch.get_new(*home);
            b.write().copy_from_slice(&img[..]);
            b.set_uptodate();
        }
        let new_owned = {
            let mut store = ReadStore { cache: &scratch, limit };
            match self.owned(&new, ino, &mut store) {
                Ok(r) => r,
                Err(s) => return Ok(Err(s)),
            }
        };
        let tree: std::collections::HashSet<u64> = {
            let mut store = ReadStore { cache: &scratch, limit };
            let ic = fs.csum.for_inode(ino, new.generation);
            if new.flags & EXT4_EXTENTS_FL != 0 {
                extent_tree::tree_blocks(&new.block, &mut store, ic).unwrap_or_default().into_iter().collect()
            } else {
                Default::default()
            }
        };
        if payload.iter().any(|(h, _)| !tree.contains(h)) {
            return Ok(Err(Skipped(format!("inode {ino}: a logged block is not in its extent tree"))));
        }
        let claim = new_owned.minus(&old_owned);
        for &(s, l) in &claim {
            if !crate::alloc::blocks_free(fs, s, l)? {
                return Ok(Err(Skipped(format!("inode {ino}: blocks {s}+{l} are in use"))));
            }
        }
        let free = old_owned.minus(&new_owned);
        let node = fs.inodes.get(fs, ino)?;
        let mut st = node.state.write();
        let mut tx = Tx::start(fs, 64)?;
        for &(s, l) in &free {
            let mut at = s;
            while at < s + l {
                let n = (s + l - at).min(u64::from(u32::MAX / 2)) as u32;
                crate::alloc::free_blocks(&mut tx, at, n, false)?;
                at += u64::from(n);
            }
        }
        for &(s, l) in &claim {
            crate::alloc::claim_blocks(&mut tx, s, l)?;
        }
        for (home, img) in payload {
            let b = fs.cache.get(*home);
            if !b.is_uptodate() {
                b.write().fill(0);
                b.set_uptodate();
            }
            tx.h.get_write_access(&b)?;
            b.write().copy_from_slice(&img[..]);
            b.set_verified();
        }
        if old.is_none() {
            crate::alloc::claim_inode(&mut tx, ino, false)?;
        }
        new.links_count = old.as_ref().map_or(links, |o| o.links_count);
        new.dtime = 0;
        st.csum = fs.csum.for_inode(ino, new.generation);
        st.d = new;
        st.freed = false;
        st.orphan = false;
        store_inode(&mut tx, ino, &mut st)?;
        tx.stop()?;
        Ok(Ok(()))
    }

    /// Make directory `ino` anew from its record `image` (attributes only) as an empty
    /// directory in `parent`: its blocks are allocated here, so call it after every record's
    /// blocks are claimed. Its previous contents are never looked at (it was not live).
    pub fn create_dir(&self, ino: Ino, image: &[u8], parent: Ino) -> FsResult<Result<(), Skipped>> {
        let fs = &self.fs;
        let mut new = match DiskInode::decode(image) {
            Ok(d) => d,
            Err(e) => return Ok(Err(Skipped(format!("directory inode {ino}: {e}")))),
        };
        if !new.is_dir() || image.len() != fs.geo.inode_size as usize {
            return Ok(Err(Skipped(format!("inode {ino}: not a directory's record"))));
        }
        if self.live(ino)?.is_some() {
            return Ok(Err(Skipped(format!("directory inode {ino} is live"))));
        }
        new.block = [0; 60];
        new.flags &= !(EXT4_INDEX_FL | EXT4_EXTENTS_FL);
        new.size = 0;
        new.blocks = 0;
        new.file_acl = 0;
        new.links_count = 2;
        new.dtime = 0;
        let node = fs.inodes.get(fs, ino)?;
        let mut st = node.state.write();
        st.drop_index();
        let mut tx = Tx::start(fs, 64)?;
        crate::alloc::claim_inode(&mut tx, ino, true)?;
        st.csum = fs.csum.for_inode(ino, new.generation);
        st.d = new;
        st.freed = false;
        st.orphan = false;
        crate::dir::init_dir(&mut tx, &mut st, ino, parent)?;
        store_inode(&mut tx, ino, &mut st)?;
        tx.stop()?;
        Ok(Ok(()))
    }

    /// Add `name` -> `ino` (type `ftype`) to directory `parent` if absent; a directory entry
    /// counts in the parent's links. Returns whether it was added; an entry of the name
    /// naming another inode is left as it is (`Err(Skipped)`), unless `replace` and that
    /// inode is not a directory: then the entry goes first ([`Rebuild::unlink_if`]).
    pub fn link(
        &self,
        parent: Ino,
        name: &[u8],
        ino: Ino,
        ftype: u8,
        replace: bool,
    ) -> FsResult<Result<bool, Skipped>> {
        let fs = &self.fs;
        if replace
            && let Some(old) = self.lookup(parent, name)?.filter(|&x| x != ino)
            && !self.live_dir(old)?
        {
            self.unlink_if(parent, name, old)?;
        }
        let pnode = fs.inodes.get(fs, parent)?;
        let mut ps = pnode.state.write();
        match crate::dir::lookup(fs, &mut ps, name)? {
            Some(s) if s.ino == ino => return Ok(Ok(false)),
            Some(s) => {
                return Ok(Err(Skipped(format!(
                    "directory {parent}: {:?} names inode {} already",
                    String::from_utf8_lossy(name),
                    s.ino
                ))));
            }
            None => {}
        }
        let mut tx = Tx::start(fs, 64)?;
        add_counted_entry(&mut tx, parent, &mut ps, name, ino, ftype)?;
        tx.stop()?;
        Ok(Ok(true))
    }

    /// Keep `pblk..pblk+len` from being allocated by this rebuild (see
    /// `crate::alloc::exclude_blocks`).
    pub fn exclude(&self, pblk: u64, len: u32) {
        crate::alloc::exclude_blocks(&self.fs, pblk, u64::from(len));
    }

    /// Make `name` in directory `parent` name `ino` (type `ftype`): an entry of that name is
    /// removed first, whatever it names (fast-commit CREAT and LINK, as e2fsck replays
    /// them); directory entries count in the parent's links. A parent that is not a live
    /// directory is left alone.
    pub fn relink(&self, parent: Ino, name: &[u8], ino: Ino, ftype: u8) -> FsResult<()> {
        let fs = &self.fs;
        if !self.live_dir(parent)? {
            log::warn!(
                "fast-commit replay: directory {parent} is not live; entry {:?} skipped",
                String::from_utf8_lossy(name)
            );
            return Ok(());
        }
        let pnode = fs.inodes.get(fs, parent)?;
        let mut ps = pnode.state.write();
        let mut tx = Tx::start(fs, 64)?;
        if let Some(s) = crate::dir::lookup(fs, &mut ps, name)? {
            if s.ino == ino && s.ftype == ftype {
                tx.stop()?;
                return Ok(());
            }
            crate::dir::remove_entry(&mut tx, &mut ps, name)?;
            if s.ftype == FT_DIR && ps.d.links_count > 2 {
                ps.d.links_count -= 1;
            }
        }
        add_counted_entry(&mut tx, parent, &mut ps, name, ino, ftype)?;
        tx.stop()?;
        Ok(())
    }

    /// Remove `name` from directory `parent` if it names `ino`, and drop the link it held
    /// (fast-commit UNLINK, as the kernel replays it with `__ext4_unlink`): an inode left
    /// with no link is freed with its blocks (the kernel puts it on the orphan list, which
    /// its mount then frees). A later INODE record of the inode brings it back.
    pub fn unlink_if(&self, parent: Ino, name: &[u8], ino: Ino) -> FsResult<()> {
        let fs = &self.fs;
        if !self.live_dir(parent)? {
            return Ok(());
        }
        let pnode = fs.inodes.get(fs, parent)?;
        let mut ps = pnode.state.write();
        let Some(s) = crate::dir::lookup(fs, &mut ps, name)?.filter(|s| s.ino == ino) else { return Ok(()) };
        let node = fs.inodes.get(fs, ino)?;
        let mut st = node.state.write();
        let mut tx = Tx::start(fs, 64)?;
        crate::dir::remove_entry(&mut tx, &mut ps, name)?;
        if s.ftype == FT_DIR && ps.d.links_count > 2 {
            ps.d.links_count -= 1;
        }
        store_inode(&mut tx, parent, &mut ps)?;
        let live = crate::alloc::inode_in_use(fs, ino)? && st.d.mode != 0 && st.d.links_count > 0;
        if live {
            let is_dir = st.d.is_dir();
            st.d.links_count = if is_dir { 0 } else { st.d.links_count - 1 };
            if st.d.links_count == 0 {
                crate::file::free_all(&mut tx, &mut st)?;
                crate::xattr::free_all(&mut tx, &mut st)?;
                st.d.size = 0;
                st.d.dtime = fs.sb.lock().wtime.max(1) as u32;
                store_inode(&mut tx, ino, &mut st)?;
                crate::alloc::free_inode(&mut tx, ino, is_dir)?;
                st.drop_index();
            } else {
                store_inode(&mut tx, ino, &mut st)?;
            }
        }
        tx.stop()?;
        Ok(())
    }

    /// Commit what was changed so far into the overlay (frees become reusable).
    pub fn sync(&self) -> FsResult<()> {
        Ok(self.fs.journal.force()?)
    }

    /// The superblock's free counts from the group descriptors, everything committed, and
    /// the blocks changed (the journal inode's own blocks left out).
    pub fn finish(self) -> FsResult<Vec<(u64, BlockBuf)>> {
        let fs = &self.fs;
        {
            let free_blocks: u64 = fs.groups.iter().map(|g| u64::from(g.lock().desc.free_blocks_count)).sum();
            let free_inodes: u32 = fs.groups.iter().map(|g| g.lock().desc.free_inodes_count).sum();
            let (blk, off) = sb_location(fs.geo.block_size);
            let buf = fs.cache.read(blk)?;
            let mut sb =
                crate::ondisk::superblock::Superblock::decode(&buf.read()[off..off + SUPERBLOCK_SIZE])?;
            if sb.free_blocks_count != free_blocks || sb.free_inodes_count != free_inodes {
                sb.free_blocks_count = free_blocks;
                sb.free_inodes_count = free_inodes;
                let mut tx = Tx::start(fs, 4)?;
                tx.h.get_write_access(&buf)?;
                sb.encode_into(&mut buf.write()[off..off + SUPERBLOCK_SIZE]);
                tx.stop()?;
            }
        }
        fs.journal.force()?;
        fs.journal.shutdown()?;
        let changed = self.overlay.changed();
        Ok(changed.into_iter().filter(|(b, _)| !self.journal.contains(*b)).collect())
    }
}

/// Add entry `name` → `ino` (type `ftype`) to directory `parent` and store it; a directory
/// entry counts in the parent's links ([`crate::namei::subdir_added`]).
fn add_counted_entry(
    tx: &mut Tx<'_>,
    parent: Ino,
    ps: &mut InodeState,
    name: &[u8],
    ino: Ino,
    ftype: u8,
) -> FsResult<()> {
    crate::dir::add_entry(tx, parent, ps, name, ino, ftype)?;
    if ftype == FT_DIR {
        ps.d.links_count = crate::namei::subdir_added(ps);
    }
    store_inode(tx, parent, ps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_subtract() {
        let a = Ranges::from_pieces(vec![(10, 5), (12, 10), (30, 2), (32, 1)]);
        assert_eq!(a.0, vec![(10, 22), (30, 33)]);
        let b = Ranges::from_pieces(vec![(8, 4), (20, 11)]);
        assert_eq!(a.minus(&b), vec![(12, 8), (31, 2)]);
        assert_eq!(b.minus(&a), vec![(8, 2), (22, 8)]);
        assert!(a.contains(10) && a.contains(21) && !a.contains(22) && a.contains(32) && !a.contains(9));
        assert!(a.minus(&a).is_empty());
        assert_eq!(a.minus(&Ranges::default()), vec![(10, 12), (30, 3)]);
    }
}
