//! Extended attributes: in the inode's extra space first, then in one external block.
//!
//! With `metadata_csum` the block is checked against `h_checksum` when it enters the cache
//! ([`read_block`]) and written with a fresh one whenever it changes.

use std::sync::Arc;

use cjfs_journal::Buffer;

use crate::error::{CsumStructure, FsError, FsResult};
use crate::fs::FsInner;
use crate::inode::{InodeState, store_inode};
use crate::ondisk::xattr::{self as x, H_REFCOUNT, XattrList};
use crate::tx::Tx;
use crate::types::{Ino, Timestamp};

/// How `set` treats an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrFlags {
    /// Create or replace.
    #[default]
    Any,
    /// Fail if it exists (XATTR_CREATE).
    Create,
    /// Fail if it does not exist (XATTR_REPLACE).
    Replace,
}

/// The xattr block `blk` of inode `ino`, read and checked against its checksum the first
/// time it is cached.
pub(crate) fn read_block(fs: &FsInner, ino: Ino, blk: u64) -> FsResult<Arc<Buffer>> {
    if blk == 0 || blk >= fs.geo.blocks_count {
        return Err(FsError::Corrupt(format!("xattr block {blk} outside the file system")));
    }
    let b = fs.cache.read(blk)?;
    if fs.csum.metadata() && !b.is_verified() {
        if let Err((stored, computed)) = x::verify_block_checksum(fs.csum.seed(), blk, &b.read()[..]) {
            return Err(FsError::checksum(
                CsumStructure::XattrBlock,
                format!("at block {blk} (of inode {ino})"),
                stored,
                computed,
            ));
        }
        b.set_verified();
    }
    Ok(b)
}

/// Write the checksum of the changed xattr block in `buf` (with `metadata_csum`).
fn seal(fs: &FsInner, buf: &Buffer) {
    if fs.csum.metadata() {
        x::set_block_checksum(fs.csum.seed(), buf.blocknr(), &mut buf.write()[..]);
        buf.set_verified();
    }
}

/// Refuse a name ext4 has no handler for with [`FsError::NotSupported`] (EOPNOTSUPP, as
/// the kernel's `xattr_resolve_name`): `system.` names other than the two POSIX ACLs
/// (`system.data` of inline data, `system.richacl`) and unknown namespaces. Such names may
/// still be on disk; they are kept, but neither listed nor read nor written.
pub(crate) fn check_namespace(name: &[u8]) -> FsResult<()> {
    let known = [&b"user."[..], b"trusted.", b"security."].iter().any(|p| name.starts_with(p))
        || crate::acl::is_acl(name);
    if known {
        Ok(())
    } else {
        Err(FsError::NotSupported(format!(
            "extended attribute {:?}: ext4 has no handler for its namespace",
            String::from_utf8_lossy(name)
        )))
    }
}

/// Whether ext4's `listxattr` shows `name`: never a name without a handler
/// ([`check_namespace`]), and `trusted.` names only to a caller with `CAP_SYS_ADMIN`
/// (`privileged`; the trusted handler's `list`).
pub(crate) fn listed(name: &[u8], privileged: bool) -> bool {
    check_namespace(name).is_ok() && (privileged || !name.starts_with(b"trusted."))
}

/// Every attribute of the inode.
pub(crate) fn list_all(fs: &FsInner, st: &InodeState) -> FsResult<XattrList> {
    let mut out = Vec::new();
    let area = st.d.xattr_area();
    if area.len() >= 4 && area[..4] == x::XATTR_MAGIC.to_le_bytes() {
        out.extend(x::parse_ibody(area)?);
    }
    if st.d.file_acl != 0 {
        let b = read_block(fs, st.ino, st.d.file_acl)?;
        out.extend(x::parse_block(&b.read()[..])?);
    }
    Ok(out)
}

/// One attribute's value.
pub(crate) fn get(fs: &FsInner, st: &InodeState, name: &[u8]) -> FsResult<Vec<u8>> {
    list_all(fs, st)?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .ok_or_else(|| FsError::NoAttr(String::from_utf8_lossy(name).into_owned()))
}

/// Set (or with `value = None` remove) an attribute.
pub(crate) fn set(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    name: &[u8],
    value: Option<&[u8]>,
    flags: XattrFlags,
) -> FsResult<()> {
    x::split_name(name)?;
    let mut list = list_all(fs, st)?;
    let pos = list.iter().position(|(n, _)| n == name);
    // EEXIST and ENODATA come before ENOSPC, as in ext4 (`ext4_xattr_set_handle` looks the
    // name up first).
    match (pos, value, flags) {
        (Some(_), Some(_), XattrFlags::Create) => {
            return Err(FsError::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        (None, Some(_), XattrFlags::Replace) | (None, None, _) => {
            return Err(FsError::NoAttr(String::from_utf8_lossy(name).into_owned()));
        }
        _ => {}
    }
    if let Some(v) = value
        && v.len() > fs.geo.block_size - 64
    {
        // ENOSPC as ext4 (no `ea_inode`): the value fits neither the inode nor one block.
        return Err(FsError::NoSpace(format!(
            "xattr value of {} bytes does not fit in one {}-byte xattr block",
            v.len(),
            fs.geo.block_size
        )));
    }
    match (pos, value) {
        (Some(i), Some(v)) => list[i].1 = v.to_vec(),
        (None, Some(v)) => list.push((name.to_vec(), v.to_vec())),
        (Some(i), None) => {
            list.remove(i);
        }
        // Refused above.
        (None, None) => {}
    }
    commit(fs, ino, st, Some(&list), None)
}

/// Set (or with `value = None` remove) a POSIX ACL attribute, already in ext4's format, and
/// with `mode` set the inode's mode too, in the same transaction (`ext4_set_acl`). As there,
/// removing an ACL that is not there is no error, and nothing is written unless something
/// changes.
pub(crate) fn set_acl(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    name: &[u8],
    value: Option<&[u8]>,
    mode: Option<u16>,
) -> FsResult<()> {
    x::split_name(name)?;
    if let Some(v) = value
        && v.len() > fs.geo.block_size - 64
    {
        return Err(FsError::NoSpace(format!(
            "POSIX ACL of {} bytes does not fit in one {}-byte xattr block",
            v.len(),
            fs.geo.block_size
        )));
    }
    let mut list = list_all(fs, st)?;
    let pos = list.iter().position(|(n, _)| n == name);
    let changed = match (pos, value) {
        (Some(i), Some(v)) => {
            list[i].1 = v.to_vec();
            true
        }
        (None, Some(v)) => {
            list.push((name.to_vec(), v.to_vec()));
            true
        }
        (Some(i), None) => {
            list.remove(i);
            true
        }
        (None, None) => false,
    };
    let mode = mode.filter(|&m| m != st.d.mode);
    if !changed && mode.is_none() {
        return Ok(());
    }
    commit(fs, ino, st, changed.then_some(&list), mode)
}

/// One transaction: the inode's attributes replaced by `list` (when given), its mode set to
/// `mode` (when given), ctime now.
fn commit(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    list: Option<&XattrList>,
    mode: Option<u16>,
) -> FsResult<()> {
    let mut tx = Tx::start(fs, 8)?;
    if let Some(list) = list {
        let had_block = st.d.file_acl != 0;
        let saved = st.d.clone();
        if let Err(e) = write_all(&mut tx, ino, st, list) {
            // Refused before anything changed (ENOSPC, too large): the inode as it was.
            st.d = saved;
            return Err(e);
        }
        if had_block || st.d.file_acl != 0 {
            crate::ijournal::note_unsafe(fs, &st.ij, crate::ijournal::Fallback::XattrBlock, tx.h.tx_id());
        }
    }
    if let Some(m) = mode {
        st.d.mode = m;
    }
    st.d.ctime = Timestamp::now();
    store_inode(&mut tx, ino, st)?;
    tx.stop()?;
    Ok(())
}

/// The first attributes of an inode made in `tx` (its inherited ACLs).
pub(crate) fn init_list(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState, list: &XattrList) -> FsResult<()> {
    write_all(tx, ino, st, list)?;
    if st.d.file_acl != 0 {
        let id = tx.h.tx_id();
        crate::ijournal::note_unsafe(tx.fs, &st.ij, crate::ijournal::Fallback::XattrBlock, id);
    }
    Ok(())
}

fn write_all(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState, list: &XattrList) -> FsResult<()> {
    let area_len = st.d.xattr_area().len();
    let bs = tx.fs.geo.block_size;
    // An inline inode's `system.data` goes first, so that it stays in the inode body: the
    // kernel and e2fsck look for it only there.
    let mut list = list.clone();
    if let Some(i) = list.iter().position(|(n, _)| n == crate::inline_data::DATA_XATTR) {
        let data = list.remove(i);
        list.insert(0, data);
    }
    let (ibody, block_list) = x::layout(&list, area_len, bs).map_err(|e| match e {
        FsError::NoSpace(m) => FsError::NoSpace(format!("extended attributes do not fit: {m}")),
        e => e,
    })?;
    if block_list.is_empty() {
        st.d.set_xattr_area(&ibody)?;
        free_block(tx, st)?;
        return Ok(());
    }
    let img = x::build_block(&block_list, 1, bs)?;
    let shared = if st.d.file_acl != 0 {
        let b = read_block(tx.fs, ino, st.d.file_acl)?;
        let r = u32::from_le_bytes([
            b.read()[H_REFCOUNT],
            b.read()[H_REFCOUNT + 1],
            b.read()[H_REFCOUNT + 2],
            b.read()[H_REFCOUNT + 3],
        ]);
        r > 1
    } else {
        false
    };
    // A new block (none yet, or copy on write of a shared one) is allocated before anything
    // changes: ENOSPC leaves the attributes as they were. Near the inode's group, as ext4
    // does.
    let fresh = if st.d.file_acl == 0 || shared {
        let goal = crate::alloc::inode_goal(tx.fs, ino);
        Some(crate::alloc::alloc_blocks(tx, goal, 1)?.0)
    } else {
        None
    };
    st.d.set_xattr_area(&ibody)?;
    let buf = match fresh {
        Some(blk) => {
            if shared {
                // Leave the shared block to its other users.
                free_block(tx, st)?;
            }
            st.d.file_acl = blk;
            crate::file::charge_blocks(tx.fs, st, 1)?;
            let b = tx.fs.cache.get_new(blk);
            tx.h.get_create_access(&b)?;
            b
        }
        None => {
            let b = read_block(tx.fs, ino, st.d.file_acl)?;
            tx.h.get_write_access(&b)?;
            b
        }
    };
    buf.write().copy_from_slice(&img);
    seal(tx.fs, &buf);
    Ok(())
}

/// Drop the inode's reference to its xattr block, freeing it when unshared.
pub(crate) fn free_block(tx: &mut Tx<'_>, st: &mut InodeState) -> FsResult<()> {
    let blk = st.d.file_acl;
    if blk == 0 {
        return Ok(());
    }
    let b = read_block(tx.fs, st.ino, blk)?;
    let refcount = {
        let r = b.read();
        u32::from_le_bytes([r[H_REFCOUNT], r[H_REFCOUNT + 1], r[H_REFCOUNT + 2], r[H_REFCOUNT + 3]])
    };
    if refcount > 1 {
        tx.h.get_write_access(&b)?;
        b.write()[H_REFCOUNT..H_REFCOUNT + 4].copy_from_slice(&(refcount - 1).to_le_bytes());
        seal(tx.fs, &b);
    } else {
        crate::alloc::free_blocks(tx, blk, 1, true)?;
    }
    st.d.file_acl = 0;
    crate::file::charge_blocks(tx.fs, st, -1)?;
    Ok(())
}
