//! The ext4 orphan list: inodes whose last link is gone but which are still open (or whose
//! blocks are still being freed). The superblock's `s_last_orphan` names the first; each
//! orphan's `i_dtime` names the next. A crash leaves the list on disk and the next mount
//! frees what it holds.
//!
//! The in-memory list (`FsInner::orphans`, head first) is authoritative while mounted;
//! [`crate::inode::store_inode`] writes each orphan's next pointer from it.

use std::sync::Arc;

use cjfs_journal::JournalKind;

use crate::error::{FsError, FsResult};
use crate::fs::FsInner;
use crate::inode::{Inode, InodeState, store_inode};
use crate::ondisk::inode::set_checksum as set_inode_checksum;
use crate::ondisk::superblock::{SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE, set_checksum as set_sb_checksum};
use crate::tx::Tx;
use crate::types::{Ino, Timestamp};

/// Byte offset of `i_dtime` in an inode record.
const I_DTIME: usize = 0x14;

/// Next pointer for orphan `ino` (0 if last or not an orphan).
pub(crate) fn next_of(fs: &FsInner, ino: Ino) -> u32 {
    let l = fs.orphans.lock();
    match l.iter().position(|&i| i == ino) {
        Some(p) => l.get(p + 1).copied().unwrap_or(0),
        None => 0,
    }
}

/// Write access to the superblock's buffer, taken before `orphan_lock` (as ext4 does) so a
/// writer waiting for the buffer never holds the lock every unlink needs.
fn sb_access(tx: &mut Tx<'_>) -> FsResult<Arc<cjfs_journal::Buffer>> {
    let buf = tx.fs.cache.read(0)?;
    tx.h.get_write_access(&buf)?;
    Ok(buf)
}

fn write_sb_orphan(tx: &mut Tx<'_>, buf: &cjfs_journal::Buffer, head: Ino) -> FsResult<()> {
    let mut sb = tx.fs.sb.lock();
    sb.last_orphan = head;
    // Only s_last_orphan changes here; keep the rest of the buffer as it is.
    let mut w = buf.write();
    w[SUPERBLOCK_OFFSET + 0xE8..SUPERBLOCK_OFFSET + 0xEC].copy_from_slice(&head.to_le_bytes());
    set_sb_checksum(&mut w[SUPERBLOCK_OFFSET..SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE]);
    Ok(())
}

/// Put `ino` at the head of the orphan list. The caller stores the inode afterwards.
pub(crate) fn add(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    if st.orphan {
        return Ok(());
    }
    let sb_buf = sb_access(tx)?;
    let _g = tx.fs.orphan_lock.lock();
    tx.fs.orphans.lock().insert(0, ino);
    write_sb_orphan(tx, &sb_buf, ino)?;
    st.orphan = true;
    Ok(())
}

/// Take `ino` off the orphan list. The caller stores the inode afterwards.
pub(crate) fn del(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    if !st.orphan {
        return Ok(());
    }
    // The block to patch (the superblock, or the predecessor's inode table block) whose write
    // access this handle already holds; taken unlocked, then the list is looked at again.
    let mut accessed: Option<Arc<cjfs_journal::Buffer>> = None;
    let _g = loop {
        let g = tx.fs.orphan_lock.lock();
        let (pos, prev, next) = {
            let l = tx.fs.orphans.lock();
            let Some(p) = l.iter().position(|&i| i == ino) else {
                st.orphan = false;
                return Ok(());
            };
            (p, if p > 0 { Some(l[p - 1]) } else { None }, l.get(p + 1).copied().unwrap_or(0))
        };
        let (blk, off) = match prev {
            None => (0, 0),
            Some(prev) => crate::inode::inode_location(tx.fs, prev),
        };
        let buf = match &accessed {
            Some(b) if b.blocknr() == blk => b.clone(),
            _ => {
                drop(g);
                let buf = tx.fs.cache.read(blk)?;
                tx.h.get_write_access(&buf)?;
                accessed = Some(buf);
                continue;
            }
        };
        match prev {
            None => write_sb_orphan(tx, &buf, next)?,
            // Patch the predecessor's next pointer in place: its in-memory record gets the
            // same value from the list whenever it is stored.
            Some(prev) => {
                let mut w = buf.write();
                let rec = &mut w[off..off + tx.fs.geo.inode_size as usize];
                rec[I_DTIME..I_DTIME + 4].copy_from_slice(&next.to_le_bytes());
                set_inode_checksum(&tx.fs.csum, prev, rec);
            }
        }
        tx.fs.orphans.lock().remove(pos);
        break g;
    };
    st.orphan = false;
    st.d.dtime = 0;
    Ok(())
}

/// Free an unlinked inode's blocks and the inode itself, in bounded transactions; the
/// inode stays on the orphan list until the last one.
pub(crate) fn evict(fs: &FsInner, node: &Arc<Inode>, st: &mut InodeState) -> FsResult<()> {
    if st.freed {
        return Ok(());
    }
    if (st.d.is_reg() || st.d.is_dir() || (st.d.is_symlink() && !crate::namei::is_fast_symlink(st)))
        && st.d.size > 0
        && (st.d.is_reg())
    {
        crate::file::truncate(fs, node.ino, st, 0)?;
    }
    let mut tx = Tx::start(fs, 32)?;
    crate::file::free_all(&mut tx, st)?;
    crate::xattr::free_block(&mut tx, st)?;
    del(&mut tx, node.ino, st)?;
    let is_dir = st.d.is_dir();
    st.d.links_count = 0;
    st.d.dtime = Timestamp::now().sec as u32;
    st.d.size = 0;
    store_inode(&mut tx, node.ino, st)?;
    crate::alloc::free_inode(&mut tx, node.ino, is_dir)?;
    tx.stop()?;
    st.freed = true;
    st.drop_index();
    fs.inodes.remove(node);
    Ok(())
}

/// At mount, before anything is written: read and validate the on-disk orphan list (reads
/// only).
pub(crate) fn load_orphan_chain(fs: &FsInner) -> FsResult<Vec<Ino>> {
    let mut head = fs.sb.lock().last_orphan;
    let mut from = "superblock s_last_orphan".to_string();
    let mut chain = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while head != 0 {
        // As the kernel's ext4_orphan_get: a link to a reserved inode, past the table, or
        // back into the list is corruption, not an orphan to free.
        if head < fs.geo.first_ino || head > fs.geo.inodes_count {
            return Err(FsError::Corrupt(format!(
                "orphan list: {from} links to inode {head}, which is {} (orphans are inodes {}..={})",
                if head < fs.geo.first_ino { "reserved" } else { "past the inode table" },
                fs.geo.first_ino,
                fs.geo.inodes_count
            )));
        }
        if !seen.insert(head) {
            return Err(FsError::Corrupt(format!("orphan list: {from} links back to inode {head} (a loop)")));
        }
        chain.push(head);
        let node = fs.inodes.get(fs, head)?;
        let st = node.state.read();
        if st.d.mode == 0 {
            return Err(FsError::Corrupt(format!(
                "orphan list: {from} links to inode {head}, which is free"
            )));
        }
        from = format!("inode {head}'s i_dtime");
        head = st.d.dtime;
    }
    Ok(chain)
}

/// At mount: free (or finish truncating) every inode of `chain`, the validated orphan list
/// from [`load_orphan_chain`]. Returns how many.
pub(crate) fn process_orphans(fs: &FsInner, chain: Vec<Ino>) -> FsResult<u32> {
    if chain.is_empty() || fs.opts.journal.kind == JournalKind::None && fs.opts.read_only {
        return Ok(0);
    }
    *fs.orphans.lock() = chain.clone();
    for ino in &chain {
        let node = fs.inodes.get(fs, *ino)?;
        node.state.write().orphan = true;
    }
    let mut n = 0;
    for ino in chain {
        let node = fs.inodes.get(fs, ino)?;
        let mut st = node.state.write();
        if st.d.links_count == 0 {
            evict(fs, &node, &mut st)?;
        } else {
            // An orphan that still has links was mid-truncate; its size is already right.
            let mut tx = Tx::start(fs, 8)?;
            del(&mut tx, ino, &mut st)?;
            store_inode(&mut tx, ino, &mut st)?;
            tx.stop()?;
        }
        n += 1;
    }
    Ok(n)
}

/// At unmount: free every orphan still held open.
pub(crate) fn release_all(fs: &FsInner) -> FsResult<()> {
    let list: Vec<Ino> = fs.orphans.lock().clone();
    for ino in list {
        let node = fs.inodes.get(fs, ino)?;
        let mut st = node.state.write();
        st.open = 0;
        if st.orphan && st.d.links_count == 0 {
            evict(fs, &node, &mut st)?;
        }
    }
    Ok(())
}
