//! Namespace operations: create, mkdir, mknod, symlink, link, unlink, rmdir, rename.
//!
//! Locking: parent before child; renames between directories take `rename_lock` and order
//! the two parents ancestor-first (else by inode number), then the children directory-first
//! (else by inode number).

use std::sync::Arc;

use cjfs_journal::lock_rank::RankedWrite;

use crate::dir;
use crate::error::{FsError, FsResult};
use crate::extent_tree;
use crate::fs::FsInner;
use crate::inode::{Inode, InodeState, store_inode};
use crate::ondisk::dirent::file_type_from_mode;
use crate::ondisk::inode::{
    EXT4_EXTENTS_FL, EXT4_FL_INHERITED, EXT4_INDEX_FL, EXT4_PROJINHERIT_FL, Inode as DiskInode, S_IFCHR,
    S_IFDIR, S_IFLNK, S_IFMT, mask_flags,
};
use crate::tx::Tx;
use crate::types::{FileType, Ino, RenameFlags, Timestamp};

/// ext4's link limit; with dir_nlink a directory past it counts 1.
pub(crate) const LINK_MAX: u16 = 65000;

/// A directory's link count after it gains a subdirectory: ext4's `ext4_inc_count` (an
/// indexed directory past the limit, or already at 1, counts 1: "too many to count").
pub(crate) fn subdir_added(dir: &InodeState) -> u16 {
    links_after_subdir(dir.d.links_count, dir.d.flags & EXT4_INDEX_FL != 0)
}

fn links_after_subdir(links: u16, indexed: bool) -> u16 {
    if indexed && (links >= LINK_MAX || links == 1) { 1 } else { links.saturating_add(1) }
}

/// A directory's link count after it loses a subdirectory: ext4's `ext4_dec_count` (1, "too
/// many to count", and the 2 of an empty directory stay).
pub(crate) fn subdir_removed(links: u16) -> u16 {
    if links > 2 { links - 1 } else { links }
}

/// `EMLINK` when directory `dir` cannot take another subdirectory: at the limit unless
/// `dir_nlink` lets an indexed directory count 1 (ext4's `EXT4_DIR_LINK_MAX`).
fn check_subdir_room(fs: &FsInner, ino: Ino, dir: &InodeState) -> FsResult<()> {
    if dir.d.links_count >= LINK_MAX && !(dir.d.flags & EXT4_INDEX_FL != 0 && fs.sb.lock().has_dir_nlink()) {
        return Err(FsError::TooManyLinks(format!("directory inode {ino}")));
    }
    Ok(())
}

/// Whether a symlink keeps its target inside the inode.
pub(crate) fn is_fast_symlink(st: &InodeState) -> bool {
    st.d.is_symlink() && st.d.flags & EXT4_EXTENTS_FL == 0 && st.d.size < 60
}

/// A directory's inode, write-locked, checked to be a live directory.
fn dir_guard<'a>(node: &'a Arc<Inode>) -> FsResult<RankedWrite<'a, InodeState>> {
    let g = node.state.write();
    if g.freed || (g.d.links_count == 0 && !g.orphan) {
        return Err(FsError::NotFound(format!("directory inode {}", node.ino)));
    }
    if !g.d.is_dir() {
        return Err(FsError::NotDir(format!("inode {}", node.ino)));
    }
    if g.d.links_count == 0 {
        return Err(FsError::NotFound(format!("directory inode {} was removed", node.ino)));
    }
    Ok(g)
}

/// Refuse to give `inode` a name in `dir` when `dir` hands down a project id `inode` does not
/// have (`EXDEV`, as `ext4_link` and `ext4_rename`: project quota would be bypassed).
fn same_project(fs: &FsInner, dir: &InodeState, inode: &InodeState) -> FsResult<()> {
    if fs.geo.project && dir.d.flags & EXT4_PROJINHERIT_FL != 0 && dir.d.projid != inode.d.projid {
        return Err(FsError::CrossProject(format!(
            "inode {} has project {}, directory {} hands down project {}",
            inode.ino, inode.d.projid, dir.ino, dir.d.projid
        )));
    }
    Ok(())
}

/// The project id a new inode in directory `dir` gets (`__ext4_new_inode`: a directory
/// flagged `EXT4_PROJINHERIT_FL` hands its own down; else 0).
fn inherited_project(fs: &FsInner, dir: &InodeState) -> u32 {
    if fs.geo.project && dir.d.flags & EXT4_PROJINHERIT_FL != 0 { dir.d.projid } else { 0 }
}

/// Fresh inode record.
fn new_disk_inode(fs: &FsInner, mode: u16, uid: u32, gid: u32) -> DiskInode {
    let mut d = DiskInode::new(fs.geo.inode_size as usize, 32);
    let now = Timestamp::now();
    d.mode = mode;
    d.uid = uid;
    d.gid = gid;
    d.atime = now;
    d.ctime = now;
    d.mtime = now;
    d.crtime = now;
    d.generation = rand::random();
    d
}

/// Make a new inode named `name` in `parent`. `init` fills type-specific parts inside the
/// same transaction. Returns the new inode.
///
/// `umask` applies to the permission bits unless `parent` has a default POSIX ACL: then the
/// new inode inherits it instead (`posix_acl_create`, in the same transaction as ext4's
/// `ext4_init_acl`), symbolic links excepted.
#[allow(clippy::too_many_arguments)]
fn make_node(
    fs: &FsInner,
    parent: Ino,
    name: &[u8],
    mode: u16,
    umask: u16,
    (uid, gid): (u32, u32),
    credits: u32,
    init: impl FnOnce(&mut Tx<'_>, Ino, &mut InodeState) -> FsResult<()>,
) -> FsResult<Arc<Inode>> {
    dir::check_name(name)?;
    let pnode = fs.inodes.get(fs, parent)?;
    let mut ps = dir_guard(&pnode)?;
    if dir::lookup(fs, &mut ps, name)?.is_some() {
        return Err(FsError::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    crate::protect::may_add_entry(parent, &ps)?;
    let is_dir = mode & S_IFMT == S_IFDIR;
    if is_dir {
        check_subdir_room(fs, parent, &ps)?;
    }
    let (mode, acls) = crate::acl::inherit(fs, parent, &ps, mode, umask)?;
    // An inherited ACL may need an xattr block (and its bitmap and group descriptor), or
    // with `ea_inode` an EA inode and its data.
    let credits = credits + crate::xattr::init_credits(fs, &acls);
    let mut tx = Tx::start(fs, credits)?;
    let projid = inherited_project(fs, &ps);
    if let Some(q) = fs.quota.get() {
        q.prepare(&mut tx, [uid, gid, projid])?;
    }
    let ino = crate::alloc::alloc_inode(&mut tx, fs.geo.inode_group(parent), is_dir)?;
    let mut d = new_disk_inode(fs, mode, uid, gid);
    // ext4 passes `EXT4_FL_INHERITED` from a directory to what is made in it, as far as the
    // new kind carries them (`ext4_mask_flags`): `chattr +j` on a database's directory
    // data-journals every file made there with no journal flush, `+D`/`+S` make the
    // subdirectories synchronous too, `+A` spares the new files' access times.
    d.flags |= mask_flags(mode, ps.d.flags & EXT4_FL_INHERITED);
    d.projid = projid;
    let node = fs.inodes.insert_new(fs, ino, d, tx.h.tx_id());
    let mut st = node.state.write();
    let made = (|| {
        init(&mut tx, ino, &mut st)?;
        if !acls.is_empty() {
            crate::xattr::init_list(&mut tx, ino, &mut st, &acls)?;
        }
        store_inode(&mut tx, ino, &mut st)?;
        dir::add_entry(&mut tx, parent, &mut ps, name, ino, file_type_from_mode(mode))
    })();
    if made.is_ok() {
        crate::adaptive::note_created(fs, parent, name, &mut st);
        // iJournaling: the entry is the inode's until a durable commit holds it.
        let ft = file_type_from_mode(mode);
        let key = dir::name_key(fs, &ps, name);
        crate::ijournal::note_new_entry(fs, &st.ij, (parent, &ps.ij), (name, &key), ft, tx.h.tx_id());
    }
    if let Err(e) = made {
        // Typically ENOSPC for the new directory's or symlink's block or for a new block of
        // the parent. The inode (and whatever `init` allocated) is already in this
        // transaction: give it back, or the commit leaks it (e2fsck: "Inode bitmap
        // differences", "Directories count wrong" after mkdir on a full file system).
        discard_new(&mut tx, &node, &mut st, is_dir)?;
        tx.stop()?;
        return Err(e);
    }
    if is_dir {
        ps.d.links_count = subdir_added(&ps);
    }
    let now = Timestamp::now();
    ps.d.mtime = now;
    ps.d.ctime = now;
    store_inode(&mut tx, parent, &mut ps)?;
    let txid = tx.stop()?;
    ps.datasync_tx = txid;
    st.datasync_tx = txid;
    drop(st);
    Ok(node)
}

/// Undo a new inode inside the transaction that allocated it (or free one nothing names
/// any more, an EA inode): free its blocks and the inode itself, and forget it.
pub(crate) fn discard_new(
    tx: &mut Tx<'_>,
    node: &Arc<Inode>,
    st: &mut InodeState,
    is_dir: bool,
) -> FsResult<()> {
    crate::file::free_all(tx, st)?;
    // An inherited ACL's xattr block too.
    crate::xattr::free_all(tx, st)?;
    st.d.links_count = 0;
    st.d.size = 0;
    st.d.dtime = Timestamp::now().sec as u32;
    store_inode(tx, node.ino, st)?;
    crate::alloc::free_inode(tx, node.ino, is_dir)?;
    st.freed = true;
    st.drop_index();
    tx.fs.inodes.remove(node);
    Ok(())
}

/// Create a regular file, fifo, socket or device node.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mknod(
    fs: &FsInner,
    parent: Ino,
    name: &[u8],
    mode: u32,
    umask: u16,
    rdev: u32,
    uid: u32,
    gid: u32,
) -> FsResult<Arc<Inode>> {
    let kind = FileType::from_mode(mode)
        .ok_or_else(|| FsError::Invalid(format!("mode {mode:o} has no file type")))?;
    if matches!(kind, FileType::Directory | FileType::Symlink) {
        return Err(FsError::Invalid("mknod cannot make directories or symlinks".into()));
    }
    make_node(fs, parent, name, mode as u16, umask, (uid, gid), 24, |_, _, st| {
        st.d.links_count = 1;
        match kind {
            FileType::Regular => {
                st.d.flags |= EXT4_EXTENTS_FL;
                extent_tree::init_root(&mut st.d.block);
            }
            FileType::CharDev | FileType::BlockDev => {
                st.d.set_rdev(libc_major(rdev), libc_minor(rdev));
            }
            _ => {}
        }
        Ok(())
    })
}

fn libc_major(rdev: u32) -> u32 {
    (rdev >> 8) & 0xfff
}
fn libc_minor(rdev: u32) -> u32 {
    (rdev & 0xff) | ((rdev >> 12) & 0xfff00)
}

/// Make a directory.
pub(crate) fn mkdir(
    fs: &FsInner,
    parent: Ino,
    name: &[u8],
    mode: u32,
    umask: u16,
    uid: u32,
    gid: u32,
) -> FsResult<Arc<Inode>> {
    let mode = (mode as u16 & !S_IFMT) | S_IFDIR;
    make_node(fs, parent, name, mode, umask, (uid, gid), 32, |tx, ino, st| {
        st.d.links_count = 2;
        dir::init_dir(tx, st, ino, parent)
    })
}

/// Make a symbolic link.
pub(crate) fn symlink(
    fs: &FsInner,
    parent: Ino,
    name: &[u8],
    target: &[u8],
    uid: u32,
    gid: u32,
) -> FsResult<Arc<Inode>> {
    if target.is_empty() || target.len() >= fs.geo.block_size {
        return Err(FsError::NameTooLong(format!("symlink target of {} bytes", target.len())));
    }
    make_node(fs, parent, name, S_IFLNK | 0o777, 0, (uid, gid), 24, |tx, ino, st| {
        st.d.links_count = 1;
        st.d.size = target.len() as u64;
        if target.len() < 60 {
            st.d.block = [0; 60];
            st.d.block[..target.len()].copy_from_slice(target);
            return Ok(());
        }
        let buf = crate::file::map_first_block(tx, st, ino)?;
        buf.write()[..target.len()].copy_from_slice(target);
        Ok(())
    })
}

/// Read a symlink's target.
pub(crate) fn readlink(fs: &FsInner, st: &InodeState) -> FsResult<Vec<u8>> {
    if !st.d.is_symlink() {
        return Err(FsError::Invalid("not a symbolic link".into()));
    }
    let n = st.d.size as usize;
    if is_fast_symlink(st) {
        return Ok(st.d.block[..n.min(60)].to_vec());
    }
    if n > fs.geo.block_size {
        return Err(FsError::Corrupt(format!("symlink of {n} bytes")));
    }
    let mut buf = vec![0u8; n];
    crate::file::read(fs, st, 0, &mut buf)?;
    Ok(buf)
}

/// Add a hard link `newparent/newname` to `ino`.
pub(crate) fn link(fs: &FsInner, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Arc<Inode>> {
    dir::check_name(newname)?;
    let pnode = fs.inodes.get(fs, newparent)?;
    let node = fs.inodes.get(fs, ino)?;
    // Refuse directories before taking any lock: `ino` may be `newparent` itself (locking it
    // twice would self-deadlock) or another directory (parent-then-child would lock two
    // directories in an order rmdir/rename may take the other way round). An inode's type
    // never changes, so the check stays valid once the locks are held.
    if node.state.read().d.is_dir() {
        return Err(FsError::Perm("hard links to directories are not allowed".into()));
    }
    let mut ps = dir_guard(&pnode)?;
    let mut st = node.state.write();
    if st.freed || st.d.links_count == 0 {
        return Err(FsError::NotFound(format!("inode {ino}")));
    }
    if st.d.is_dir() {
        return Err(FsError::Perm("hard links to directories are not allowed".into()));
    }
    if st.d.links_count >= LINK_MAX {
        return Err(FsError::TooManyLinks(format!("inode {ino}")));
    }
    if dir::lookup(fs, &mut ps, newname)?.is_some() {
        return Err(FsError::Exists(String::from_utf8_lossy(newname).into_owned()));
    }
    crate::protect::may_add_entry(newparent, &ps)?;
    crate::protect::may_change(ino, &st, "hard link")?;
    same_project(fs, &ps, &st)?;
    let mut tx = Tx::start(fs, 16)?;
    dir::add_entry(&mut tx, newparent, &mut ps, newname, ino, file_type_from_mode(st.d.mode))?;
    crate::ijournal::note_hard_link(fs, &st.ij, tx.h.tx_id());
    st.d.links_count += 1;
    let now = Timestamp::now();
    st.d.ctime = now;
    ps.d.mtime = now;
    ps.d.ctime = now;
    store_inode(&mut tx, ino, &mut st)?;
    store_inode(&mut tx, newparent, &mut ps)?;
    // The directory may have grown (a new block, a longer inline `system.data`):
    // fdatasync of it must commit this, as after a create.
    ps.datasync_tx = tx.stop()?;
    drop(st);
    Ok(node)
}

/// Drop one link of `node` inside `tx`; at zero links the inode goes on the orphan list
/// (freed at its last close, or right after this transaction if nothing holds it open).
/// Returns true when the caller must evict it.
fn drop_link(tx: &mut Tx<'_>, node: &Arc<Inode>, st: &mut InodeState, is_dir: bool) -> FsResult<bool> {
    if is_dir {
        st.d.links_count = 0;
    } else {
        st.d.links_count = st.d.links_count.saturating_sub(1);
    }
    st.d.ctime = Timestamp::now();
    let last = st.d.links_count == 0;
    if last {
        crate::orphan::add(tx, node.ino, st)?;
    }
    store_inode(tx, node.ino, st)?;
    Ok(last && st.open == 0)
}

/// Remove the name `parent/name` (not a directory).
pub(crate) fn unlink(fs: &FsInner, parent: Ino, name: &[u8]) -> FsResult<()> {
    remove(fs, parent, name, false)
}

/// Remove the empty directory `parent/name`.
pub(crate) fn rmdir(fs: &FsInner, parent: Ino, name: &[u8]) -> FsResult<()> {
    remove(fs, parent, name, true)
}

fn remove(fs: &FsInner, parent: Ino, name: &[u8], want_dir: bool) -> FsResult<()> {
    if name == b"." {
        return Err(FsError::Invalid("cannot remove '.'".into()));
    }
    if name == b".." {
        return Err(FsError::NotEmpty("..".into()));
    }
    let pnode = fs.inodes.get(fs, parent)?;
    let mut ps = dir_guard(&pnode)?;
    let slot = dir::lookup(fs, &mut ps, name)?
        .ok_or_else(|| FsError::NotFound(String::from_utf8_lossy(name).into_owned()))?;
    let node = fs.inodes.get(fs, slot.ino)?;
    let mut st = node.state.write();
    // The kernel's may_delete refuses an immutable or append-only entry or parent before it
    // looks at the type, and vfs_rmdir before the file system checks emptiness.
    crate::protect::may_remove_entry(parent, &ps, slot.ino, &st)?;
    let is_dir = st.d.is_dir();
    if want_dir && !is_dir {
        return Err(FsError::NotDir(String::from_utf8_lossy(name).into_owned()));
    }
    if !want_dir && is_dir {
        return Err(FsError::IsDir(String::from_utf8_lossy(name).into_owned()));
    }
    if is_dir {
        dir::ensure_index(fs, &mut st)?;
        if st.dir_len() > 0 {
            return Err(FsError::NotEmpty(String::from_utf8_lossy(name).into_owned()));
        }
    }
    let mut tx = Tx::start(fs, 24)?;
    dir::remove_entry(&mut tx, &mut ps, name)?;
    crate::ijournal::note_removed(fs, &ps.ij, &dir::name_key(fs, &ps, name), tx.h.tx_id(), !is_dir);
    if !is_dir && st.d.links_count > 1 {
        // One of several names goes: a record of the file could not remove it.
        crate::ijournal::note_unsafe(fs, &st.ij, crate::ijournal::Fallback::Rename, tx.h.tx_id());
    }
    if is_dir && ps.d.links_count > 2 {
        ps.d.links_count = subdir_removed(ps.d.links_count);
    }
    let now = Timestamp::now();
    ps.d.mtime = now;
    ps.d.ctime = now;
    store_inode(&mut tx, parent, &mut ps)?;
    if !is_dir && st.d.links_count == 1 {
        crate::adaptive::note_removed(fs, parent, name, &st);
    }
    let evict = drop_link(&mut tx, &node, &mut st, is_dir)?;
    let txid = tx.stop()?;
    ps.datasync_tx = txid;
    drop(ps);
    if evict {
        crate::orphan::evict(fs, &node, &mut st)?;
    }
    Ok(())
}

/// The parent of directory `ino` (its `..`).
fn parent_of(fs: &FsInner, ino: Ino) -> FsResult<Ino> {
    let node = fs.inodes.get(fs, ino)?;
    let st = node.state.read();
    // A directory removed by a racing rmdir (renames do not hold `rename_lock` against
    // it) has no blocks left: that is ENOENT for the rename, not corruption.
    if st.freed || st.d.links_count == 0 || !st.d.is_dir() {
        return Err(FsError::NotFound(format!("directory inode {ino}")));
    }
    if crate::inline_data::is_inline(&st) {
        return Ok(crate::inline_data::dir_entries(fs, &st)?.0);
    }
    let mut store = crate::tx::ReadStore { cache: &fs.cache, limit: fs.geo.blocks_count };
    let m = crate::file::map_lookup(&st, &mut store, 0)?
        .ok_or_else(|| FsError::Corrupt(format!("directory {ino} has no first block")))?;
    let pblk = m.pblk_of(0).ok_or_else(|| FsError::Corrupt(format!("directory {ino} has no first block")))?;
    let (buf, end) = dir::read_dir_block(fs, &st, 0, pblk)?;
    let data = buf.read();
    let e = crate::ondisk::dirent::find(&data[..end], b"..")?
        .ok_or_else(|| FsError::Corrupt(format!("directory {ino} has no '..'")))?;
    Ok(e.inode)
}

/// Directory `ino` and its ancestors up to the root, walking `..` (needs `rename_lock`, so
/// no directory moves meanwhile). Takes each directory's lock briefly: call it before
/// locking any directory, or it self-deadlocks on one this thread already holds.
fn ancestors(fs: &FsInner, mut ino: Ino) -> FsResult<Vec<Ino>> {
    let mut chain = Vec::new();
    for _ in 0..4096 {
        chain.push(ino);
        if ino == crate::types::ROOT_INO {
            return Ok(chain);
        }
        ino = parent_of(fs, ino)?;
    }
    Err(FsError::Corrupt("directory tree deeper than 4096 levels or looping".into()))
}

/// A whiteout for `RENAME_WHITEOUT` in `parent`, inside `tx`: a character device 0:0 with
/// no permission bits, owned by the caller (ext4's `ext4_whiteout_for_rename`), with one link
/// (the entry the caller puts at the old name). Returns its inode number.
fn new_whiteout(tx: &mut Tx<'_>, parent: Ino, ps: &InodeState) -> FsResult<Ino> {
    let fs = tx.fs;
    let (uid, gid) = crate::alloc::caller();
    let projid = inherited_project(fs, ps);
    if let Some(q) = fs.quota.get() {
        q.prepare(tx, [uid, gid, projid])?;
    }
    let ino = crate::alloc::alloc_inode(tx, fs.geo.inode_group(parent), false)?;
    let mut d = new_disk_inode(fs, S_IFCHR, uid, gid);
    d.projid = projid;
    d.links_count = 1;
    d.set_rdev(0, 0);
    let node = fs.inodes.insert_new(fs, ino, d, tx.h.tx_id());
    store_inode(tx, ino, &mut node.state.write())?;
    Ok(ino)
}

/// Rename `parent/name` to `newparent/newname`.
pub(crate) fn rename(
    fs: &FsInner,
    parent: Ino,
    name: &[u8],
    newparent: Ino,
    newname: &[u8],
    flags: RenameFlags,
) -> FsResult<()> {
    dir::check_name(newname)?;
    if name == b"." || name == b".." {
        return Err(FsError::Invalid("cannot rename '.' or '..'".into()));
    }
    if flags.exchange && flags.noreplace {
        return Err(FsError::Invalid("RENAME_EXCHANGE with RENAME_NOREPLACE".into()));
    }
    if flags.exchange && flags.whiteout {
        return Err(FsError::Invalid("RENAME_EXCHANGE with RENAME_WHITEOUT".into()));
    }
    // As Linux's `lock_rename`: only a move between directories can change the tree's shape
    // (the ancestry checks below need it stable); a rename within one directory is ordered
    // by that directory's lock, as link and unlink are (exim-like's spool renames queued on
    // this lock: over half of that workload's lock waits).
    let _rl = (parent != newparent).then(|| fs.rename_lock.lock());
    let p1 = fs.inodes.get(fs, parent)?;
    let p2 = fs.inodes.get(fs, newparent)?;
    let same = parent == newparent;
    // Both parents' ancestor chains, read before any directory is locked (walking `..`
    // locks each directory on the way; it used to run under the parents' locks and
    // self-deadlocked when a directory moved into a directory other than the root).
    let (old_chain, new_chain) =
        if same { (Vec::new(), Vec::new()) } else { (ancestors(fs, parent)?, ancestors(fs, newparent)?) };
    // Parents: ancestor first, else lower inode number first.
    let p2_first =
        !same && (old_chain.contains(&newparent) || (!new_chain.contains(&parent) && newparent < parent));
    let (mut g1, mut g2) = if same {
        (dir_guard(&p1)?, None)
    } else if p2_first {
        let b = dir_guard(&p2)?;
        let a = dir_guard(&p1)?;
        (a, Some(b))
    } else {
        let a = dir_guard(&p1)?;
        let b = dir_guard(&p2)?;
        (a, Some(b))
    };
    let src = dir::lookup(fs, &mut g1, name)?
        .ok_or_else(|| FsError::NotFound(String::from_utf8_lossy(name).into_owned()))?;
    let dst = match g2.as_mut() {
        Some(g) => dir::lookup(fs, g, newname)?,
        None => dir::lookup(fs, &mut g1, newname)?,
    };
    if dst.is_some() && flags.noreplace {
        return Err(FsError::Exists(String::from_utf8_lossy(newname).into_owned()));
    }
    if dst.is_none() && flags.exchange {
        return Err(FsError::NotFound(String::from_utf8_lossy(newname).into_owned()));
    }
    if let Some(d) = dst
        && d.ino == src.ino
    {
        // Both names are links to one inode: POSIX says do nothing.
        return Ok(());
    }
    let src_is_dir = src.ftype == crate::ondisk::dirent::FT_DIR;
    // A directory may not move into its own subtree.
    if src_is_dir && !same && new_chain.contains(&src.ino) {
        return Err(FsError::InvalidRename("a directory cannot move into itself".into()));
    }
    // The target is an ancestor of the source (its parent is locked already: locking it
    // again as a child would self-deadlock). Linux's order: EINVAL when exchanging (it would
    // move into itself), else ENOTEMPTY (it holds the source).
    if let Some(d) = dst
        && d.ftype == crate::ondisk::dirent::FT_DIR
        && !same
        && old_chain.contains(&d.ino)
    {
        if flags.exchange {
            return Err(FsError::InvalidRename("a directory cannot move into itself".into()));
        }
        return Err(FsError::NotEmpty(String::from_utf8_lossy(newname).into_owned()));
    }
    // Children: a directory before a non-directory (a directory is also a parent: an rmdir
    // or unlink in it locks it, then a file that may be hard-linked here as the other
    // child), else in inode order. Two directories here are never ancestor and descendant
    // (checked above).
    let sn = fs.inodes.get(fs, src.ino)?;
    let dn = match dst {
        Some(d) => Some(fs.inodes.get(fs, d.ino)?),
        None => None,
    };
    let dst_first = dst.as_ref().is_some_and(|d| {
        let d_is_dir = d.ftype == crate::ondisk::dirent::FT_DIR;
        if d_is_dir != src_is_dir { d_is_dir } else { d.ino < src.ino }
    });
    let (mut sg, mut dg) = match &dn {
        Some(dn) if dst_first => {
            let d = dn.state.write();
            (sn.state.write(), Some(d))
        }
        Some(dn) => {
            let s = sn.state.write();
            (s, Some(dn.state.write()))
        }
        None => (sn.state.write(), None),
    };
    {
        // The kernel's may_delete (and may_create) come before the type checks, and
        // vfs_rename before the file system checks the target is empty.
        use crate::protect::{may_add_entry, may_remove_entry};
        may_remove_entry(parent, &g1, src.ino, &sg)?;
        let new_dir = g2.as_deref().unwrap_or(&*g1);
        match (dst, dg.as_deref()) {
            (Some(d), Some(dgs)) => may_remove_entry(newparent, new_dir, d.ino, dgs)?,
            _ => may_add_entry(newparent, new_dir)?,
        }
    }
    if let (Some(_), Some(dgs), false) = (dst, dg.as_deref(), flags.exchange) {
        if src_is_dir && !dgs.d.is_dir() {
            return Err(FsError::NotDir(String::from_utf8_lossy(newname).into_owned()));
        }
        if !src_is_dir && dgs.d.is_dir() {
            return Err(FsError::IsDir(String::from_utf8_lossy(newname).into_owned()));
        }
    }
    // `ext4_rename` checks the project even within one directory.
    same_project(fs, g2.as_deref().unwrap_or(&*g1), &sg)?;
    if let (true, Some(dgs)) = (flags.exchange, dg.as_deref()) {
        same_project(fs, &g1, dgs)?;
    }
    {
        use crate::protect::may_change_immutable;
        let new_dir = g2.as_deref().unwrap_or(&*g1);
        if src_is_dir && !same {
            may_change_immutable(src.ino, &sg, "moving a directory to another parent")?;
            // It adds a subdirectory to the new parent unless it replaces one.
            if !dg.as_deref().is_some_and(|d| d.d.is_dir()) {
                check_subdir_room(fs, newparent, new_dir)?;
            }
        }
        // An exchange that sends a directory the other way adds one to the old parent
        // (ext4_cross_rename checks both).
        if flags.exchange && !same && !src_is_dir && dg.as_deref().is_some_and(|d| d.d.is_dir()) {
            check_subdir_room(fs, parent, &g1)?;
        }
        // An exchange moves the target too.
        if flags.exchange
            && !same
            && let (Some(d), Some(dgs)) = (dst, dg.as_deref())
            && dgs.d.is_dir()
        {
            may_change_immutable(d.ino, dgs, "moving a directory to another parent")?;
        }
    }
    if let (Some(_), Some(dgs), false) = (dst, dg.as_mut(), flags.exchange)
        && dgs.d.is_dir()
    {
        dir::ensure_index(fs, dgs)?;
        if dgs.dir_len() > 0 {
            return Err(FsError::NotEmpty(String::from_utf8_lossy(newname).into_owned()));
        }
    }
    let mut tx = Tx::start(fs, if flags.whiteout { 56 } else { 48 })?;
    let now = Timestamp::now();
    let src_ft = src.ftype;
    let mut evict = false;
    // The whiteout first, as ext4: a full inode table fails the rename before any entry
    // moved (the transaction then holds nothing).
    let whiteout = if flags.whiteout { Some(new_whiteout(&mut tx, parent, &g1)?) } else { None };
    {
        // iJournaling: neither inode's record could move a name, and a moved directory may
        // be an ancestor of any file.
        use crate::ijournal::{Fallback, note_dir_rename, note_removed, note_unsafe};
        let t = tx.h.tx_id();
        note_unsafe(fs, &sg.ij, Fallback::Rename, t);
        if let Some(d) = dg.as_ref() {
            note_unsafe(fs, &d.ij, Fallback::Rename, t);
            if d.d.is_dir() && flags.exchange {
                note_dir_rename(fs, t);
            }
        }
        if src_is_dir {
            note_dir_rename(fs, t);
        }
        // A record reusing either name could not restore the inode that moved away.
        note_removed(fs, &g1.ij, &dir::name_key(fs, &g1, name), t, false);
        if flags.exchange {
            let nd = g2.as_deref().unwrap_or(&*g1);
            note_removed(fs, &nd.ij, &dir::name_key(fs, nd, newname), t, false);
        }
    }
    if flags.exchange {
        let d = dst.ok_or_else(|| FsError::NotFound(String::from_utf8_lossy(newname).into_owned()))?;
        let dgs = dg.as_mut().ok_or_else(|| FsError::NotFound("exchange target".into()))?;
        dir::set_entry(&mut tx, &mut g1, name, d.ino, d.ftype)?;
        match g2.as_mut() {
            Some(g) => dir::set_entry(&mut tx, g, newname, src.ino, src_ft)?,
            None => dir::set_entry(&mut tx, &mut g1, newname, src.ino, src_ft)?,
        }
        if !same {
            let d_is_dir = dgs.d.is_dir();
            if src_is_dir {
                dir::set_entry(&mut tx, &mut sg, b"..", newparent, crate::ondisk::dirent::FT_DIR)?;
            }
            if d_is_dir {
                dir::set_entry(&mut tx, dgs, b"..", parent, crate::ondisk::dirent::FT_DIR)?;
            }
            if let Some(g) = g2.as_mut()
                && src_is_dir != d_is_dir
            {
                if src_is_dir {
                    g.d.links_count = subdir_added(g);
                    g1.d.links_count = subdir_removed(g1.d.links_count);
                } else {
                    g1.d.links_count = subdir_added(&g1);
                    g.d.links_count = subdir_removed(g.d.links_count);
                }
            }
        }
        dgs.d.ctime = now;
        store_inode(&mut tx, d.ino, dgs)?;
        // Both inodes change (ext4_cross_rename stamps the ctime of each).
        sg.d.ctime = now;
        store_inode(&mut tx, src.ino, &mut sg)?;
    } else {
        if dst.is_some() {
            let dgs = dg.as_mut().ok_or_else(|| FsError::NotFound("rename target".into()))?;
            match g2.as_mut() {
                Some(g) => dir::set_entry(&mut tx, g, newname, src.ino, src_ft)?,
                None => dir::set_entry(&mut tx, &mut g1, newname, src.ino, src_ft)?,
            }
            let d_is_dir = dgs.d.is_dir();
            if d_is_dir {
                // The victim directory's '..' link to the new parent disappears.
                let g = g2.as_mut().unwrap_or(&mut g1);
                g.d.links_count = subdir_removed(g.d.links_count);
            }
            let dnode = dn.as_ref().ok_or_else(|| FsError::NotFound("rename target".into()))?;
            evict = drop_link(&mut tx, dnode, dgs, d_is_dir)?;
        } else {
            match g2.as_mut() {
                Some(g) => dir::add_entry(&mut tx, newparent, g, newname, src.ino, src_ft)?,
                None => dir::add_entry(&mut tx, parent, &mut g1, newname, src.ino, src_ft)?,
            }
        }
        if let Some(w) = whiteout {
            dir::set_entry(&mut tx, &mut g1, name, w, crate::ondisk::dirent::FT_CHRDEV)?;
        } else {
            dir::remove_entry(&mut tx, &mut g1, name)?;
        }
        if src_is_dir && !same {
            dir::set_entry(&mut tx, &mut sg, b"..", newparent, crate::ondisk::dirent::FT_DIR)?;
            g1.d.links_count = subdir_removed(g1.d.links_count);
            if let Some(g) = g2.as_mut() {
                g.d.links_count = subdir_added(g);
            }
        }
        sg.d.ctime = now;
        store_inode(&mut tx, src.ino, &mut sg)?;
    }
    g1.d.mtime = now;
    g1.d.ctime = now;
    store_inode(&mut tx, parent, &mut g1)?;
    if let Some(g) = g2.as_mut() {
        g.d.mtime = now;
        g.d.ctime = now;
        store_inode(&mut tx, newparent, g)?;
    }
    let txid = tx.stop()?;
    g1.datasync_tx = txid;
    sg.datasync_tx = txid;
    // fdatasync of either parent (dbench's --sync-dir) must make the rename durable.
    if let Some(g) = g2.as_mut() {
        g.datasync_tx = txid;
    }
    if evict {
        // The replaced name was the victim's last link and nothing holds it open.
        drop(g1);
        drop(g2);
        if let (Some(dnode), Some(mut dgs)) = (dn.as_ref(), dg) {
            crate::orphan::evict(fs, dnode, &mut dgs)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_link_counts_follow_ext4() {
        // 64 998 subdirectories: 65 000 links, still counted; one more and an indexed
        // directory counts 1, for good (`ext4_inc_count`).
        assert_eq!(links_after_subdir(64_999, true), 65_000);
        assert_eq!(links_after_subdir(65_000, true), 1);
        assert_eq!(links_after_subdir(1, true), 1);
        // A directory without an index counts on (EMLINK stops it at the limit first).
        assert_eq!(links_after_subdir(64_999, false), 65_000);
        assert_eq!(links_after_subdir(2, false), 3);
        // Removing: 1 ("too many") and an empty directory's 2 stay (`ext4_dec_count`).
        assert_eq!((subdir_removed(1), subdir_removed(2), subdir_removed(3)), (1, 2, 2));
    }
}
