//! Extended attributes: in the inode's extra space first, then in one external block, and
//! with the `ea_inode` feature a value in an inode of its own (an *EA inode*).
//!
//! With `metadata_csum` the block is checked against `h_checksum` when it enters the cache
//! ([`read_block`]) and written with a fresh one whenever it changes.
//!
//! # EA inodes (`ea_inode`)
//!
//! As the kernel's `fs/ext4/xattr.c`: a value longer than a block can hold
//! (`EXT4_XATTR_MIN_LARGE_EA_SIZE`), or one that no longer fits beside the others, goes into
//! a regular inode flagged `EXT4_EA_INODE_FL`, in no directory, one link, its data blocks
//! journalled as metadata. The EA inode keeps the crc32c of the value (seeded as metadata
//! checksums are) in `i_atime` and its reference count in `i_ctime` (high 32 bits) and
//! `l_i_version` (low); the entry names it (`e_value_inum`) with the value's size and an
//! entry hash over the name and that crc. Every holder counts one reference: each inode body
//! entry, and each entry of an xattr block (however many inodes share the block). The owner's
//! `i_blocks` also counts the value's blocks for each reference it holds, in its body or its
//! block (quota charges the owner; e2fsck checks `i_blocks` so).
//!
//! cjfs makes a new EA inode for every value it moves out (the kernel may share one between
//! equal values through its cache; both are valid); an attribute a change does not touch
//! keeps its EA inode, its value not even read (reading, listing and removing never need any
//! value but the one asked for, so one damaged EA inode spoils only its own attribute); an
//! EA inode is freed with its last reference, in the same transaction. EA inodes are
//! locked only inside a transaction, after the owner, in ascending inode order, and nothing
//! else is locked or waited for while holding one; readers take them shared without a
//! transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use cjfs_journal::Buffer;

use crate::error::{CsumStructure, FsError, FsResult};
use crate::extent_tree::Mapping;
use crate::fs::FsInner;
use crate::inode::{Inode, InodeState, store_inode};
use crate::ondisk::inode::{EXT4_EA_INODE_FL, EXT4_EXTENTS_FL, S_IFREG};
use crate::ondisk::xattr::{self as x, EaRef, H_REFCOUNT, Stored, XattrList};
use crate::tx::Tx;
use crate::types::{Ino, Timestamp};

/// Largest value the VFS passes to `setxattr` (`XATTR_SIZE_MAX`).
const VALUE_MAX: usize = 65536;

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

/// An inode's attributes as stored: in its body, in its block, and the block's reference
/// count (0 without a block).
struct Current {
    ibody: Vec<Stored>,
    block: Vec<Stored>,
    block_refcount: u32,
}

impl Current {
    fn read(fs: &FsInner, st: &InodeState) -> FsResult<Current> {
        let ibody = x::parse_ibody_stored(st.d.xattr_area())?;
        let (block, block_refcount) = if st.d.file_acl != 0 {
            let b = read_block(fs, st.ino, st.d.file_acl)?;
            let xb = x::XattrBlock::decode(&b.read()[..])?;
            (xb.stored()?, xb.refcount)
        } else {
            (Vec::new(), 0)
        };
        if !fs.geo.ea_inode
            && let Some(r) = ibody.iter().chain(&block).find_map(|a| a.ea)
        {
            return Err(FsError::Corrupt(format!(
                "inode {}: extended attribute value in inode {} without the ea_inode feature",
                st.ino, r.inum
            )));
        }
        Ok(Current { ibody, block, block_refcount })
    }

    /// Check that every EA inode the attributes name is one (flag, link, size), before
    /// anything changes their reference counts.
    fn check_refs(&self, fs: &FsInner, owner: Ino) -> FsResult<()> {
        for a in self.ibody.iter().chain(&self.block) {
            if let Some(r) = &a.ea {
                ea_inode(fs, owner, &a.name, r)?;
            }
        }
        Ok(())
    }

    /// Every attribute as stored, the body's first (values in EA inodes not read).
    fn all(self) -> Vec<Stored> {
        let mut v = self.ibody;
        v.extend(self.block);
        v
    }

    /// The EA inode references this inode's attributes hold and give up when rewritten or
    /// freed: every body entry's, and the block's if no other inode shares it.
    fn released_refs(&self) -> impl Iterator<Item = EaRef> + '_ {
        let block: &[Stored] = if self.block_refcount == 1 { &self.block } else { &[] };
        self.ibody.iter().chain(block).filter_map(|a| a.ea)
    }

    /// One reference less on each EA inode [`Current::released_refs`] names.
    fn release(&self) -> BTreeMap<u32, i64> {
        let mut delta = BTreeMap::new();
        for r in self.released_refs() {
            *delta.entry(r.inum).or_default() -= 1;
        }
        delta
    }
}

/// Blocks charged to an inode's `i_blocks` for the EA inode values its body and its block
/// name.
fn ea_charge(bs: usize, ibody: &[Stored], block: &[Stored]) -> i64 {
    ibody.iter().chain(block).filter_map(|a| a.ea).map(|r| (r.size as usize).div_ceil(bs) as i64).sum()
}

/// (EA inode, value size) of each attribute kept in an EA inode.
pub(crate) type EaRefs = Vec<(u32, u32)>;

/// The EA inode references of an inode's attributes: its body's entries, then its block's
/// (empty without `ea_inode`).
pub(crate) fn ea_refs_of(fs: &FsInner, st: &InodeState) -> FsResult<(EaRefs, EaRefs)> {
    if !fs.geo.ea_inode {
        return Ok((Vec::new(), Vec::new()));
    }
    let cur = Current::read(fs, st)?;
    let refs = |l: &[Stored]| l.iter().filter_map(|a| a.ea).map(|r| (r.inum, r.size)).collect();
    Ok((refs(&cur.ibody), refs(&cur.block)))
}

/// An EA inode's stored reference count (`None` for any other inode).
pub(crate) fn ea_refcount(st: &InodeState) -> Option<u64> {
    (st.d.flags & EXT4_EA_INODE_FL != 0).then(|| ea_refs(st))
}

/// Blocks the inode's `i_blocks` counts for the EA inode values it names (0 without
/// `ea_inode`).
pub(crate) fn ea_blocks(fs: &FsInner, st: &InodeState) -> FsResult<u64> {
    if !fs.geo.ea_inode {
        return Ok(0);
    }
    let cur = Current::read(fs, st)?;
    Ok(ea_charge(fs.geo.block_size, &cur.ibody, &cur.block) as u64)
}

/// The crc32c an EA inode keeps of its value (`ext4_xattr_inode_hash`: seeded as metadata
/// checksums are, from the UUID when there are none).
fn value_hash(fs: &FsInner, value: &[u8]) -> u32 {
    let seed =
        if fs.csum.metadata() { fs.csum.seed() } else { crate::ondisk::csum::crc32c(!0, fs.csum.uuid()) };
    crate::ondisk::csum::crc32c(seed, value)
}

/// An EA inode's reference count (`i_ctime` high, `l_i_version` low).
fn ea_refs(st: &InodeState) -> u64 {
    ((st.d.ctime.sec as u64 & 0xffff_ffff) << 32) | u64::from(st.d.version)
}

fn set_ea_refs(st: &mut InodeState, refs: u64) {
    st.d.ctime = Timestamp::new((refs >> 32) as i64, 0);
    st.d.version = refs as u32;
}

/// The EA inode `r.inum` that attribute `name` of inode `owner` names, checked as the
/// kernel's `ext4_xattr_inode_iget` does.
fn ea_inode(fs: &FsInner, owner: Ino, name: &[u8], r: &EaRef) -> FsResult<Arc<Inode>> {
    let bad = |why: String| {
        FsError::Corrupt(format!(
            "inode {owner}: extended attribute {:?} names EA inode {}: {why}",
            String::from_utf8_lossy(name),
            r.inum
        ))
    };
    if r.inum < fs.geo.first_ino || r.inum > fs.geo.inodes_count || r.inum == owner {
        return Err(bad("not an inode that can hold a value".into()));
    }
    let node = fs.inodes.get(fs, r.inum)?;
    {
        let est = node.state.read();
        if est.d.flags & EXT4_EA_INODE_FL == 0 || est.d.links_count == 0 || !est.d.is_reg() || est.freed {
            return Err(bad("not an EA inode in use".into()));
        }
        if est.d.size != u64::from(r.size) {
            return Err(bad(format!("it holds {} bytes, the entry says {}", est.d.size, r.size)));
        }
    }
    Ok(node)
}

/// The value of attribute `name` kept in EA inode `r`, its hashes verified as the kernel's
/// `ext4_xattr_inode_verify_hashes` does.
fn read_ea_value(fs: &FsInner, owner: Ino, name: &[u8], r: &EaRef) -> FsResult<Vec<u8>> {
    let node = ea_inode(fs, owner, name, r)?;
    let est = node.state.read();
    let mut value = vec![0u8; r.size as usize];
    let mut got = 0;
    while got < value.len() {
        let n = crate::file::read(fs, &est, got as u64, &mut value[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let hash = value_hash(fs, &value[..got]);
    let (_, suffix) = x::split_name(name)?;
    let entry_ok = |h: u32| {
        x::entry_hash(suffix, &h.to_le_bytes()) == r.entry_hash
            || x::entry_hash_signed(suffix, &h.to_le_bytes()) == r.entry_hash
    };
    if got != value.len() || est.d.atime.sec as u32 != hash || !entry_ok(hash) {
        return Err(FsError::Corrupt(format!(
            "inode {owner}: extended attribute {:?} in EA inode {}: value or hash damaged",
            String::from_utf8_lossy(name),
            r.inum
        )));
    }
    Ok(value)
}

/// The names of the inode's attributes (no value is read: a damaged EA inode does not keep
/// the others from being listed, as in the kernel).
pub(crate) fn names(fs: &FsInner, st: &InodeState) -> FsResult<Vec<Vec<u8>>> {
    Ok(Current::read(fs, st)?.all().into_iter().map(|a| a.name).collect())
}

/// One attribute's value (only its own EA inode is read).
pub(crate) fn get(fs: &FsInner, st: &InodeState, name: &[u8]) -> FsResult<Vec<u8>> {
    let a = Current::read(fs, st)?
        .all()
        .into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| FsError::NoAttr(String::from_utf8_lossy(name).into_owned()))?;
    match a.ea {
        Some(r) => read_ea_value(fs, st.ino, name, &r),
        None => Ok(a.value),
    }
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
    // The others stay as stored: a value in an EA inode is neither read nor moved.
    let cur = Current::read(fs, st)?;
    let released = cur.released_refs().count();
    let mut list = cur.all();
    let pos = list.iter().position(|a| a.name == name);
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
    if let Some(v) = value {
        check_value_len(fs, v.len(), "xattr value")?;
    }
    let new = |v: &[u8]| Stored { name: name.to_vec(), value: v.to_vec(), ea: None };
    match (pos, value) {
        (Some(i), Some(v)) => list[i] = new(v),
        (None, Some(v)) => list.push(new(v)),
        (Some(i), None) => {
            list.remove(i);
        }
        // Refused above.
        (None, None) => {}
    }
    commit(fs, ino, st, Some((list, released)), None)
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
    if let Some(v) = value {
        check_value_len(fs, v.len(), "POSIX ACL")?;
    }
    let cur = Current::read(fs, st)?;
    let released = cur.released_refs().count();
    let mut list = cur.all();
    let pos = list.iter().position(|a| a.name == name);
    let new = |v: &[u8]| Stored { name: name.to_vec(), value: v.to_vec(), ea: None };
    let changed = match (pos, value) {
        (Some(i), Some(v)) => {
            list[i] = new(v);
            true
        }
        (None, Some(v)) => {
            list.push(new(v));
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
    commit(fs, ino, st, changed.then_some((list, released)), mode)
}

/// ENOSPC for a value no place can hold, as ext4: without `ea_inode` one that fits neither
/// the inode nor one block; with it, one past what the VFS passes.
fn check_value_len(fs: &FsInner, len: usize, what: &str) -> FsResult<()> {
    if fs.geo.ea_inode {
        if len > VALUE_MAX {
            return Err(FsError::NoSpace(format!("{what} of {len} bytes (at most {VALUE_MAX})")));
        }
    } else if len > fs.geo.block_size - 64 {
        return Err(FsError::NoSpace(format!(
            "{what} of {len} bytes does not fit in one {}-byte xattr block",
            fs.geo.block_size
        )));
    }
    Ok(())
}

/// Journal credits for a new inode's first attributes `list` (its inherited ACLs):
/// nothing for none, else as [`credits`] with nothing to give up.
pub(crate) fn init_credits(fs: &FsInner, list: &XattrList) -> u32 {
    if list.is_empty() { 0 } else { credits(fs, &Stored::plain(list), 0) }
}

/// Journal credits to rewrite an inode's attributes as `list`: the inode, the block and
/// its bitmap and descriptor, and with `ea_inode` a new EA inode for any value (its inode,
/// bitmaps, descriptors, data and a tree block) plus each old EA inode's record.
fn credits(fs: &FsInner, list: &[Stored], old_refs: usize) -> u32 {
    if !fs.geo.ea_inode {
        return 8;
    }
    let bs = fs.geo.block_size;
    let new: usize = list.iter().map(|a| a.value.len().div_ceil(bs) + 8).sum();
    (8 + new + 4 * old_refs).min(u32::MAX as usize) as u32
}

/// One transaction: the inode's attributes replaced by `list` (when given, with the number
/// of EA inode references the old ones give up), its mode set to `mode` (when given), ctime
/// now.
fn commit(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    list: Option<(Vec<Stored>, usize)>,
    mode: Option<u16>,
) -> FsResult<()> {
    let mut tx = Tx::start(fs, list.as_ref().map_or(8, |(l, released)| credits(fs, l, *released)))?;
    if let Some((list, _)) = list {
        let saved = st.d.clone();
        match write_all(&mut tx, ino, st, list) {
            Ok(outside) => {
                if outside {
                    let id = tx.h.tx_id();
                    crate::ijournal::note_unsafe(fs, &st.ij, crate::ijournal::Fallback::XattrBlock, id);
                }
            }
            Err(e) => {
                // Refused before anything changed (ENOSPC, too large): the inode as it was.
                st.d = saved;
                tx.stop()?;
                return Err(e);
            }
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
    if write_all(tx, ino, st, Stored::plain(list))? {
        let id = tx.h.tx_id();
        crate::ijournal::note_unsafe(tx.fs, &st.ij, crate::ijournal::Fallback::XattrBlock, id);
    }
    Ok(())
}

/// Where each attribute of `list` keeps its value: one already in an EA inode stays there
/// (an attribute the change does not touch is neither read nor moved); with `ea_inode` a
/// new value too large for a block, and when the rest does not fit the largest new ones,
/// get a new EA inode (`ea` with inode 0 until it is made). [`FsError::NoSpace`] when even
/// that does not fit.
fn place(fs: &FsInner, mut stored: Vec<Stored>, area_len: usize) -> FsResult<Vec<Stored>> {
    let bs = fs.geo.block_size;
    if !fs.geo.ea_inode {
        return Ok(stored);
    }
    let placeholder = |len: usize| Some(EaRef { inum: 0, size: len as u32, entry_hash: 0 });
    for a in stored.iter_mut().filter(|a| a.ea.is_none()) {
        if x::value_len(a.value.len()) > bs - 56 {
            // `EXT4_XATTR_MIN_LARGE_EA_SIZE`: no block could hold it beside a header.
            a.ea = placeholder(a.value.len());
        }
    }
    loop {
        match x::layout_stored(&stored, area_len, bs) {
            Ok(_) => return Ok(stored),
            Err(FsError::NoSpace(m)) => {
                // The kernel retries a value that does not fit in an EA inode.
                let Some(big) = stored
                    .iter_mut()
                    .filter(|a| {
                        a.ea.is_none() && !a.value.is_empty() && a.name != crate::inline_data::DATA_XATTR
                    })
                    .max_by_key(|a| a.value.len())
                else {
                    return Err(FsError::NoSpace(m));
                };
                big.ea = placeholder(big.value.len());
            }
            Err(e) => return Err(e),
        }
    }
}

/// Make an EA inode holding `value` for attribute `name` of inode `owner` (`ext4_xattr_inode_create`:
/// a regular file of the owner's ids, `EXT4_EA_INODE_FL`, one link, no references yet, the
/// value's hash in `i_atime`), its data journalled as metadata. On failure nothing is left
/// allocated.
fn make_ea_inode(
    tx: &mut Tx<'_>,
    owner: &InodeState,
    name: &[u8],
    value: &[u8],
) -> FsResult<(Arc<Inode>, EaRef)> {
    let fs = tx.fs;
    let ino = crate::alloc::alloc_inode(tx, fs.geo.inode_group(owner.ino), false)?;
    let mut d = crate::ondisk::inode::Inode::new(fs.geo.inode_size as usize, 32);
    let now = Timestamp::now();
    let hash = value_hash(fs, value);
    d.mode = S_IFREG | 0o600;
    d.uid = owner.d.uid;
    d.gid = owner.d.gid;
    d.atime = Timestamp::new(i64::from(hash), 0);
    d.mtime = now;
    d.crtime = now;
    d.links_count = 1;
    d.size = value.len() as u64;
    d.flags = EXT4_EA_INODE_FL | EXT4_EXTENTS_FL;
    d.generation = rand::random();
    crate::extent_tree::init_root(&mut d.block);
    let node = fs.inodes.insert_new(fs, ino, d, tx.h.tx_id());
    let mut est = node.state.write();
    set_ea_refs(&mut est, 0);
    let written = write_ea_data(tx, &mut est, value);
    let r = written.and_then(|()| store_inode(tx, ino, &mut est));
    if let Err(e) = r {
        free_ea_inode(tx, &node, &mut est)?;
        return Err(e);
    }
    drop(est);
    let (_, suffix) = x::split_name(name)?;
    let entry_hash = x::entry_hash(suffix, &hash.to_le_bytes());
    Ok((node, EaRef { inum: ino, size: value.len() as u32, entry_hash }))
}

/// Map and write the blocks of new EA inode `est` holding `value`, in as few runs as the
/// allocator gives.
fn write_ea_data(tx: &mut Tx<'_>, est: &mut InodeState, value: &[u8]) -> FsResult<()> {
    let bs = tx.fs.geo.block_size;
    let n = value.len().div_ceil(bs) as u32;
    let mut goal = crate::alloc::inode_goal(tx.fs, est.ino);
    let mut lblk = 0u32;
    while lblk < n {
        let (pblk, got) = crate::alloc::alloc_blocks(tx, goal, n - lblk)?;
        let m = Mapping { lblk, pblk, len: got, unwritten: false };
        let d = crate::file::insert_or_free(tx, est, m, goal)?;
        crate::file::charge_blocks(tx.fs, est, i64::from(got) + i64::from(d.blocks_allocated))?;
        for i in 0..got {
            let off = (lblk + i) as usize * bs;
            let end = (off + bs).min(value.len());
            let b = tx.fs.cache.get_new(pblk + u64::from(i));
            tx.h.get_create_access(&b)?;
            let mut w = b.write();
            w.fill(0);
            w[..end - off].copy_from_slice(&value[off..end]);
        }
        lblk += got;
        goal = pblk + u64::from(got);
    }
    Ok(())
}

/// Free EA inode `node` (its last reference gone, or never taken): its blocks (revoked:
/// they were journalled), then the inode.
fn free_ea_inode(tx: &mut Tx<'_>, node: &Arc<Inode>, est: &mut InodeState) -> FsResult<()> {
    crate::namei::discard_new(tx, node, est, false)
}

/// Add `delta` references to each EA inode (ascending inode order, the lock order among
/// them), freeing one whose count reaches 0. `made` are the ones this change created.
fn adjust_refs(tx: &mut Tx<'_>, delta: &BTreeMap<u32, i64>, made: &[Arc<Inode>]) -> FsResult<()> {
    for (&inum, &d) in delta {
        if d == 0 {
            continue;
        }
        let node = match made.iter().find(|n| n.ino == inum) {
            Some(n) => n.clone(),
            None => tx.fs.inodes.get(tx.fs, inum)?,
        };
        let mut est = node.state.write();
        let refs = ea_refs(&est) as i64 + d;
        if refs <= 0 {
            free_ea_inode(tx, &node, &mut est)?;
        } else {
            set_ea_refs(&mut est, refs as u64);
            store_inode(tx, inum, &mut est)?;
        }
    }
    Ok(())
}

/// The lock of xattr block `blk`, held while an inode changes or drops it (`None` for no
/// block): see `FsInner::xattr_block_locks`.
fn block_lock(fs: &FsInner, blk: u64) -> Option<cjfs_journal::lock_rank::RankedGuard<'_, ()>> {
    (blk != 0).then(|| fs.xattr_block_locks[(blk % crate::fs::XATTR_BLOCK_LOCKS as u64) as usize].lock())
}

/// Replace the inode's attributes by `list` in `tx` (the caller stores the inode). Returns
/// whether anything outside the inode record took part (an xattr block, an EA inode).
fn write_all(tx: &mut Tx<'_>, ino: Ino, st: &mut InodeState, mut list: Vec<Stored>) -> FsResult<bool> {
    let fs = tx.fs;
    let area_len = st.d.xattr_area().len();
    let bs = fs.geo.block_size;
    // An inline inode's `system.data` goes first, so that it stays in the inode body: the
    // kernel and e2fsck look for it only there.
    if let Some(i) = list.iter().position(|a| a.name == crate::inline_data::DATA_XATTR) {
        let data = list.remove(i);
        list.insert(0, data);
    }
    let nospace = |e| match e {
        FsError::NoSpace(m) => FsError::NoSpace(format!("extended attributes do not fit: {m}")),
        e => e,
    };
    let _block = block_lock(fs, st.d.file_acl);
    let old = Current::read(fs, st)?;
    old.check_refs(fs, st.ino)?;
    let mut stored = place(fs, list, area_len).map_err(nospace)?;
    let mut made = Vec::new();
    let placed = (|| {
        for a in stored.iter_mut() {
            if a.ea.is_some_and(|r| r.inum == 0) {
                let (node, r) = make_ea_inode(tx, st, &a.name, &a.value)?;
                made.push(node);
                a.ea = Some(r);
            }
            if a.ea.is_some() {
                a.value.clear();
            }
        }
        let (ibody, block_list) = x::layout_stored(&stored, area_len, bs).map_err(nospace)?;
        write_placed(tx, ino, st, &ibody, &block_list, old.block_refcount > 1)?;
        Ok(!block_list.is_empty())
    })();
    let has_block = match placed {
        Ok(b) => b,
        Err(e) => {
            // Nothing of the inode changed: the new EA inodes go back.
            for node in &made {
                free_ea_inode(tx, node, &mut node.state.write())?;
            }
            return Err(e);
        }
    };
    // Every new entry is a new holder: in the body, or in a block written for this inode
    // alone.
    let mut delta = old.release();
    for r in stored.iter().filter_map(|a| a.ea) {
        *delta.entry(r.inum).or_default() += 1;
    }
    adjust_refs(tx, &delta, &made)?;
    let charge = ea_charge(bs, &stored, &[]) - ea_charge(bs, &old.ibody, &old.block);
    crate::file::charge_blocks(fs, st, charge)?;
    Ok(old.block_refcount != 0 || has_block || !delta.is_empty())
}

/// Write the laid-out attributes: the inode body `ibody`, and `block_list` into the
/// inode's own block (a new one when it has none or `shared` it with other inodes), or no
/// block.
fn write_placed(
    tx: &mut Tx<'_>,
    ino: Ino,
    st: &mut InodeState,
    ibody: &[u8],
    block_list: &[Stored],
    shared: bool,
) -> FsResult<()> {
    let bs = tx.fs.geo.block_size;
    if block_list.is_empty() {
        st.d.set_xattr_area(ibody)?;
        free_block(tx, st)?;
        return Ok(());
    }
    let img = x::build_block_stored(block_list, 1, bs)?;
    // A new block (none yet, or copy on write of a shared one) is allocated before anything
    // changes: ENOSPC leaves the attributes as they were. Near the inode's group, as ext4
    // does.
    let fresh = if st.d.file_acl == 0 || shared {
        let goal = crate::alloc::inode_goal(tx.fs, ino);
        Some(crate::alloc::alloc_blocks(tx, goal, 1)?.0)
    } else {
        None
    };
    st.d.set_xattr_area(ibody)?;
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

/// Drop every attribute of an inode being freed: its references to EA inodes (freeing those
/// it held last) and its xattr block (freed when unshared). The caller stores the inode.
pub(crate) fn free_all(tx: &mut Tx<'_>, st: &mut InodeState) -> FsResult<()> {
    let _block = block_lock(tx.fs, st.d.file_acl);
    if tx.fs.geo.ea_inode {
        let old = Current::read(tx.fs, st)?;
        old.check_refs(tx.fs, st.ino)?;
        adjust_refs(tx, &old.release(), &[])?;
        let charge = ea_charge(tx.fs.geo.block_size, &old.ibody, &old.block);
        crate::file::charge_blocks(tx.fs, st, -charge)?;
        st.d.set_xattr_area(&vec![0; st.d.xattr_area().len()])?;
    }
    free_block(tx, st)
}

/// Drop the inode's reference to its xattr block, freeing it when unshared (its EA inode
/// references stay with it while shared: see [`write_all`] and [`free_all`]).
fn free_block(tx: &mut Tx<'_>, st: &mut InodeState) -> FsResult<()> {
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
