//! Replaying the kernel's ext4 fast commits (`-O fast_commit`), so an image the kernel left
//! behind after a crash opens in cjfs with what the kernel's own recovery and `e2fsck`
//! (≥ 1.46) bring back. The format is in `crate::ondisk::fast_commit`.
//!
//! After the normal journal is replayed (its log ends where the fast-commit area begins),
//! the records up to the last valid TAIL are applied in log order on a [`Rebuild`] (the
//! machinery iJournaling's replay uses), with e2fsck's semantics (`e2fsck/journal.c`):
//!
//! * INODE: the raw inode is copied over the one on disk except `i_block` of an extent inode
//!   (the tree is the one the ranges build; an invalid header becomes an empty tree);
//!   `i_blocks` is recounted at the end; the inode is marked in use, or free when it has no
//!   links;
//! * ADD_RANGE / DEL_RANGE: the inode's extent tree gains or loses the mapping; blocks it no
//!   longer maps are freed, blocks it maps now claimed;
//! * CREAT / LINK: an entry of the same name is removed first, then the entry added (its
//!   type from the inode's mode); a directory entry counts in the parent's links;
//! * UNLINK: the entry is removed if it names the inode.
//!
//! Tree blocks the replay needs are allocated around the blocks any ADD_RANGE claims (the
//! kernel's excluded regions). The result is committed as one transaction, as for
//! i-transactions; then the journal's `INCOMPAT_FAST_COMMIT` bit is cleared (the area holds
//! nothing live), which also lets the log use the whole journal again, as after the
//! kernel's clean unmount. The ext4 `fast_commit` compat feature stays.

use std::collections::BTreeSet;

use cjfs_blockdev::Device;
use cjfs_journal::JournalArea;
use cjfs_journal::superblock::{INCOMPAT_FAST_COMMIT, read_superblock, write_superblock};

use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::inode::store_inode;
use crate::mkfs::read_layout;
use crate::ondisk::dirent::file_type_from_mode;
use crate::ondisk::fast_commit::{FcTag, scan};
use crate::ondisk::inode::{EXT4_EXTENTS_FL, Inode as DiskInode};
use crate::rebuild::Rebuild;
use crate::tx::{ReadStore, Tx};
use crate::types::Ino;

/// What a fast-commit replay found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FcReplayReport {
    /// Fast commits replayed.
    pub commits: u32,
    /// Records applied.
    pub records: u64,
    /// Why the scan stopped.
    pub stop: String,
    /// Blocks the replay changed (committed as one transaction).
    pub blocks: u64,
}

/// Offset of `i_block` in an on-disk inode, and of `i_generation` after it.
const I_BLOCK: usize = 0x28;
const I_GENERATION: usize = 0x64;

/// Replay the fast-commit area of the journal whose primary log is `primary` (its normal
/// log already replayed: the superblock says the log is clean and names the next
/// transaction, one past the one the fast commits were made in), then clear the journal's
/// fast-commit bit.
pub(crate) fn replay(dev: &Device, primary: &JournalArea) -> FsResult<FcReplayReport> {
    let jsb = read_superblock(&**dev, primary)?;
    let mut report = FcReplayReport::default();
    if jsb.s_feature_incompat & INCOMPAT_FAST_COMMIT == 0 {
        // Cleared already by a recovery cut after it: nothing left to replay.
        return Ok(report);
    }
    if jsb.needs_recovery() {
        return Err(FsError::Corrupt("fast-commit replay before the journal was replayed".into()));
    }
    // The normal replay leaves `s_sequence` one past the first transaction it did not find
    // committed (JBD2's `++end_transaction`): the one running at the crash, which a valid
    // HEAD names.
    let expected = jsb.s_sequence.wrapping_sub(1);
    let first = jsb.log_end() + 1;
    let last = u64::from(jsb.s_maxlen);
    let mut blocks = Vec::new();
    for b in first..last {
        blocks.push(dev.read_block(primary.map(b)?)?.to_vec());
    }
    let s = scan(&blocks, expected);
    report.commits = s.commits;
    report.stop = s.stop;
    if !s.tags.is_empty() {
        let (sb, _) = read_layout(&**dev)?;
        let inode_area = crate::fs::journal_area(dev, &sb)?;
        let rb = Rebuild::open(dev, primary, &inode_area)?;
        report.records = s.tags.len() as u64;
        apply(&rb, &s.tags)?;
        let changed = rb.finish()?;
        report.blocks = changed.len() as u64;
        cjfs_journal::external_tx::commit_and_replay(
            &**dev,
            primary,
            jsb.s_sequence,
            sb.wtime.max(0) as u64,
            &changed,
        )?;
    }
    let mut jsb = read_superblock(&**dev, primary)?;
    jsb.s_feature_incompat &= !INCOMPAT_FAST_COMMIT;
    write_superblock(&**dev, primary, &jsb, false)?;
    dev.flush()?;
    Ok(report)
}

fn apply(rb: &Rebuild, tags: &[FcTag]) -> FsResult<()> {
    let fs = &rb.fs;
    // The kernel's excluded regions: blocks some ADD_RANGE maps are not handed out for
    // tree or directory blocks meanwhile.
    for t in tags {
        if let FcTag::AddRange { pblk, len, .. } = t {
            rb.exclude(*pblk, *len);
        }
    }
    let mut modified: BTreeSet<Ino> = BTreeSet::new();
    for t in tags {
        match t {
            FcTag::Inode { ino, raw } => {
                install_inode(rb, *ino, raw)?;
                modified.insert(*ino);
            }
            FcTag::AddRange { ino, lblk, len, pblk, unwritten } => {
                map_range(rb, *ino, *lblk, *len, Some((*pblk, *unwritten)))?;
                modified.insert(*ino);
            }
            FcTag::DelRange { ino, lblk, len } => {
                map_range(rb, *ino, *lblk, *len, None)?;
                modified.insert(*ino);
            }
            FcTag::Link { parent, ino, name } => {
                let mode = crate::inode::load_inode(fs, *ino)?.mode;
                let ftype = file_type_from_mode(mode);
                rb.relink(*parent, name, *ino, ftype)?;
            }
            FcTag::Unlink { parent, ino, name } => rb.unlink_if(*parent, name, *ino)?,
        }
    }
    for ino in modified {
        recount_blocks(rb, ino)?;
    }
    Ok(())
}

/// INODE: the raw inode over the one on disk, `i_block` kept for an extent inode.
fn install_inode(rb: &Rebuild, ino: Ino, raw: &[u8]) -> FsResult<()> {
    let fs = &rb.fs;
    if ino == 0 || ino > fs.geo.inodes_count {
        return Err(FsError::Corrupt(format!("fast commit: inode {ino} out of range")));
    }
    let isz = fs.geo.inode_size as usize;
    // The whole record, in-inode attributes included (the kernel logs and replays the full
    // inode: an inline inode's `system.data` must come with its `i_size`).
    let len = raw.len().min(isz);
    let node = fs.inodes.get(fs, ino)?;
    let mut st = node.state.write();
    let mut bytes = st.d.to_bytes();
    bytes.resize(isz, 0);
    let keep_block = bytes[I_BLOCK..I_GENERATION].to_vec();
    bytes[..len].copy_from_slice(&raw[..len]);
    let flags = u32::from_le_bytes([bytes[0x20], bytes[0x21], bytes[0x22], bytes[0x23]]);
    if flags & EXT4_EXTENTS_FL != 0 {
        bytes[I_BLOCK..I_GENERATION].copy_from_slice(&keep_block);
        let mut root = [0u8; 60];
        root.copy_from_slice(&bytes[I_BLOCK..I_GENERATION]);
        if extent_tree::depth(&root).is_err() {
            extent_tree::init_root(&mut root);
            bytes[I_BLOCK..I_GENERATION].copy_from_slice(&root);
        }
    }
    let d =
        DiskInode::decode(&bytes).map_err(|e| FsError::Corrupt(format!("fast commit: inode {ino}: {e}")))?;
    let live = crate::alloc::inode_in_use(fs, ino)?;
    let mut tx = Tx::start(fs, 16)?;
    if d.links_count > 0 && !live {
        crate::alloc::claim_inode(&mut tx, ino, d.is_dir())?;
    } else if d.links_count == 0 && live {
        crate::alloc::free_inode(&mut tx, ino, st.d.is_dir())?;
    }
    st.csum = fs.csum.for_inode(ino, d.generation);
    st.d = d;
    st.drop_index();
    st.freed = false;
    store_inode(&mut tx, ino, &mut st)?;
    tx.stop()?;
    Ok(())
}

/// ADD_RANGE (`to` = the physical start and written state) or DEL_RANGE (`to` = `None`).
fn map_range(rb: &Rebuild, ino: Ino, lblk: u32, len: u32, to: Option<(u64, bool)>) -> FsResult<()> {
    let fs = &rb.fs;
    let end = lblk
        .checked_add(len)
        .ok_or_else(|| FsError::Corrupt(format!("fast commit: range of inode {ino} past 2^32")))?;
    let node = fs.inodes.get(fs, ino)?;
    let mut st = node.state.write();
    if st.d.flags & EXT4_EXTENTS_FL == 0 {
        if st.d.mode != 0 && st.d.block.iter().any(|&b| b != 0) {
            return Err(FsError::Incompatible(format!(
                "fast commit: inode {ino} maps blocks without extents"
            )));
        }
        st.d.flags |= EXT4_EXTENTS_FL;
        extent_tree::init_root(&mut st.d.block);
    }
    let mut tx = Tx::start(fs, 64)?;
    let ic = st.csum;
    let (freed, _) = extent_tree::remove_range(&mut st.d.block, &mut tx, ic, lblk, end)?;
    let mut pieces = Vec::new();
    if let Some((pblk, unwritten)) = to {
        let max = Mapping::max_len(unwritten);
        let mut at = 0u32;
        while at < len {
            let n = (len - at).min(max);
            pieces.push(Mapping { lblk: lblk + at, pblk: pblk + u64::from(at), len: n, unwritten });
            at += n;
        }
    }
    // Blocks the old mapping held and the new one does not are freed; the new ones claimed
    // where free (an earlier record of this replay may have claimed them already).
    let new: Vec<(u64, u64)> = pieces.iter().map(|m| (m.pblk, u64::from(m.len))).collect();
    let newr = crate::rebuild::Ranges::from_pieces(new.clone());
    let old = crate::rebuild::Ranges::from_pieces(freed.iter().map(|&(p, l)| (p, u64::from(l))).collect());
    for (s, l) in old.minus(&newr) {
        crate::alloc::free_blocks(&mut tx, s, l as u32, false)?;
    }
    for m in &pieces {
        let goal = m.pblk;
        extent_tree::insert(&mut st.d.block, &mut tx, ic, *m, goal)?;
    }
    for (s, l) in newr.minus(&old) {
        for (a, n) in free_runs(fs, s, l)? {
            crate::alloc::claim_blocks(&mut tx, a, n)?;
        }
    }
    store_inode(&mut tx, ino, &mut st)?;
    tx.stop()?;
    Ok(())
}

/// The free runs within `start..start+len`.
fn free_runs(fs: &crate::fs::FsInner, start: u64, len: u64) -> FsResult<Vec<(u64, u64)>> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for b in start..start + len {
        if crate::alloc::blocks_free(fs, b, 1)? {
            match out.last_mut() {
                Some((s, n)) if *s + *n == b => *n += 1,
                _ => out.push((b, 1)),
            }
        }
    }
    Ok(out)
}

/// `i_blocks` from what the inode maps now (data, tree blocks, xattr block, and the values
/// of EA inodes its attributes name, as e2fsck counts them).
fn recount_blocks(rb: &Rebuild, ino: Ino) -> FsResult<()> {
    let fs = &rb.fs;
    let node = fs.inodes.get(fs, ino)?;
    let mut st = node.state.write();
    if st.d.mode == 0 || st.d.links_count == 0 {
        return Ok(());
    }
    let mut n: u64 = u64::from(st.d.file_acl != 0) + crate::xattr::ea_blocks(fs, &st)?;
    let mut store = ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    if st.d.flags & EXT4_EXTENTS_FL != 0 {
        extent_tree::for_each_extent(&st.d.block, &mut store, st.csum, |m| n += u64::from(m.len))?;
        n += extent_tree::tree_blocks(&st.d.block, &mut store, st.csum)?.len() as u64;
    } else if crate::block_map::is_block_mapped(&st) {
        let owned = crate::block_map::owned(&st.d.block, &mut store, fs.geo.block_size)?;
        n += owned.runs.iter().map(|m| u64::from(m.len)).sum::<u64>() + owned.indirect.len() as u64;
    }
    let bs = fs.geo.block_size as u32;
    st.d.set_blocks_512(n * u64::from(bs / 512), fs.geo.huge_file, bs)?;
    let mut tx = Tx::start(fs, 4)?;
    store_inode(&mut tx, ino, &mut st)?;
    tx.stop()?;
    Ok(())
}
