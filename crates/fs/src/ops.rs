//! The public file system API: every operation by inode number (and path helpers).

use std::sync::Arc;

use cjfs_journal::lock_rank::{RankedRead, RankedWrite};

use crate::dir;
use crate::error::{FsError, FsResult};
use crate::fs::Fs;
use crate::inode::{Inode, InodeState, store_inode};
use crate::ondisk::inode::{EXT4_CASEFOLD_FL, EXT4_DIRSYNC_FL, EXT4_JOURNAL_DATA_FL, EXT4_SYNC_FL};
use crate::tx::Tx;
use crate::types::{
    Attr, DataMode, DirEntry, FallocMode, FileType, Ino, ROOT_INO, RenameFlags, SetAttr, StatFs, Timestamp,
};
use crate::xattr::{self, XattrFlags};

fn attr_of(fs: &crate::fs::FsInner, ino: Ino, st: &InodeState) -> Attr {
    let d = &st.d;
    let rdev = if d.is_device() {
        let (ma, mi) = d.rdev();
        ((ma & 0xfff) << 8) | (mi & 0xff) | ((mi & !0xff) << 12)
    } else {
        0
    };
    Attr {
        ino,
        kind: FileType::from_mode(u32::from(d.mode)).unwrap_or(FileType::Regular),
        perm: d.mode & 0o7777,
        nlink: u32::from(d.links_count),
        uid: d.uid,
        gid: d.gid,
        size: d.size,
        blocks: d.blocks_512(fs.geo.huge_file, fs.geo.block_size as u32),
        blksize: fs.geo.block_size as u32,
        atime: d.atime,
        mtime: d.mtime,
        ctime: d.ctime,
        crtime: d.crtime,
        rdev,
        flags: d.flags,
        projid: if fs.geo.project { d.projid } else { 0 },
        generation: d.generation,
    }
}

fn live(node: &Inode, st: &InodeState) -> FsResult<()> {
    if st.freed || (st.d.links_count == 0 && !st.orphan) || st.d.mode == 0 {
        return Err(FsError::NotFound(format!("inode {}", node.ino)));
    }
    Ok(())
}

impl Fs {
    fn node(&self, ino: Ino) -> FsResult<Arc<Inode>> {
        self.inner.inodes.get(&self.inner, ino)
    }

    fn read_state<'a>(&self, node: &'a Inode) -> FsResult<RankedRead<'a, InodeState>> {
        let st = node.state.read();
        live(node, &st)?;
        Ok(st)
    }

    fn write_state<'a>(&self, node: &'a Inode) -> FsResult<RankedWrite<'a, InodeState>> {
        let st = node.state.write();
        live(node, &st)?;
        Ok(st)
    }

    fn check_rw(&self) -> FsResult<()> {
        if self.inner.opts.read_only { Err(FsError::ReadOnly) } else { Ok(()) }
    }

    /// Look `name` up in directory `parent`. A name longer than 255 bytes is
    /// [`FsError::NameTooLong`], as `ext4_lookup` answers, not a missing entry.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        let not_found = || FsError::NotFound(String::from_utf8_lossy(name).into_owned());
        crate::dir::check_len(name)?;
        if name == b".." {
            let ino = self.parent_of(parent)?;
            return self.getattr(ino);
        }
        let pnode = self.node(parent)?;
        // Lock-free path: the names map is `Some` only for a live directory with an index.
        // The name is read again after the attributes: between the two reads it may have
        // been unlinked and its inode number reused by another file, whose attributes must
        // not be returned under this name.
        // (Not on casefold file systems: whether the directory folds names is read under
        // its lock.)
        if name != b"." && self.inner.geo.casefold.is_none() {
            let read = || pnode.names.0.read().as_ref().map(|m| m.get(name).map(|s| s.ino));
            match read() {
                Some(Some(ino)) => {
                    let attr = self.getattr(ino);
                    // A child found free is judged under the directory's lock below.
                    if read() == Some(Some(ino)) && !matches!(attr, Err(FsError::NotFound(_))) {
                        return attr;
                    }
                }
                Some(None) => return Err(not_found()),
                None => {}
            }
        }
        // Locked path: the directory stays locked while the child's attributes are read
        // (parent before child, the lock order).
        let st = self.read_state(&pnode)?;
        if !st.d.is_dir() {
            return Err(FsError::NotDir(format!("inode {parent}")));
        }
        if name == b"." {
            return Ok(attr_of(&self.inner, parent, &st));
        }
        if st.dir.is_some() {
            dir::check_foldable(&self.inner, &st, name)?;
            let key = dir::name_key(&self.inner, &st, name);
            let found = st.names.0.read().as_ref().and_then(|m| m.get(key.as_ref()).map(|s| s.ino));
            return self.entry_attr(parent, name, found.ok_or_else(not_found)?);
        }
        drop(st);
        let mut w = self.write_state(&pnode)?;
        let slot = dir::lookup(&self.inner, &mut w, name)?.ok_or_else(not_found)?;
        self.entry_attr(parent, name, slot.ino)
    }

    /// Attributes of `ino`, named `name` in directory `parent` (whose lock the caller
    /// holds): an entry that names a free inode is corruption, not a missing file (else a
    /// create of the same name would fail with "file exists").
    fn entry_attr(&self, parent: Ino, name: &[u8], ino: Ino) -> FsResult<Attr> {
        self.getattr(ino).map_err(|e| match e {
            FsError::NotFound(_) | FsError::Stale(_) => FsError::Corrupt(format!(
                "directory inode {parent}: entry {:?} names inode {ino}, which is not in use",
                String::from_utf8_lossy(name)
            )),
            e => e,
        })
    }

    fn parent_of(&self, ino: Ino) -> FsResult<Ino> {
        let ents = self.readdir(ino, 0, 2)?;
        ents.iter()
            .find(|e| e.name == b"..")
            .map(|e| e.ino)
            .ok_or_else(|| FsError::Corrupt(format!("directory {ino} has no '..'")))
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        let node = self.node(ino)?;
        let st = self.read_state(&node)?;
        Ok(attr_of(&self.inner, ino, &st))
    }

    /// An access (a read, a directory listing) of `ino` under the mount's rule `how`: moves
    /// the access time to now where the rule asks (see [`crate::atime`]), in a transaction of
    /// its own, without touching ctime. Returns whether it did. Nothing on a read-only mount.
    pub fn touch_atime(&self, ino: Ino, how: crate::AtimeUpdate) -> FsResult<bool> {
        if how == crate::AtimeUpdate::Never || self.inner.opts.read_only {
            return Ok(false);
        }
        let node = self.node(ino)?;
        let now = Timestamp::now();
        // Checked under the read lock first: under relatime nearly every access needs nothing.
        if !crate::atime::needs_update(how, &*self.read_state(&node)?, now) {
            return Ok(false);
        }
        let mut st = self.write_state(&node)?;
        if !crate::atime::needs_update(how, &st, now) {
            return Ok(false);
        }
        let mut tx = Tx::start(&self.inner, 2)?;
        st.d.atime = now;
        store_inode(&mut tx, ino, &mut st)?;
        tx.stop()?;
        Ok(true)
    }

    /// Change attributes (chmod, chown, truncate, utimens).
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> FsResult<Attr> {
        let attr = self.setattr_checked(ino, set, true)?;
        if set.size.is_some() {
            self.sync_if_marked(ino)?;
        }
        Ok(attr)
    }

    /// Set the permission bits to `mode` where a write or truncate by an unprivileged caller
    /// clears set-user/group-ID (the kernel's `ATTR_KILL_SUID`): allowed on an append-only
    /// file, where a chmod is refused.
    pub fn kill_set_id(&self, ino: Ino, mode: u32) -> FsResult<Attr> {
        self.setattr_checked(ino, &SetAttr { mode: Some(mode), ..SetAttr::default() }, false)
    }

    fn setattr_checked(&self, ino: Ino, set: &SetAttr, chmod_checked: bool) -> FsResult<Attr> {
        self.check_rw()?;
        let node = self.node(ino)?;
        let mut st = self.write_state(&node)?;
        if set.size.is_some() {
            crate::protect::may_change(ino, &st, "truncate")?;
        }
        if chmod_checked && (set.mode.is_some() || set.uid.is_some() || set.gid.is_some()) {
            crate::protect::may_change(ino, &st, "chmod or chown")?;
        }
        if set.atime.is_some() || set.mtime.is_some() || set.ctime.is_some() {
            crate::protect::may_change_immutable(ino, &st, "setting times")?;
        }
        // ext4_setattr: IS_APPEND with ATTR_TIMES_SET is EPERM; times set to now pass.
        if set.times_set && (set.atime.is_some() || set.mtime.is_some()) {
            crate::protect::may_change(ino, &st, "setting explicit times")?;
        }
        if let Some(size) = set.size {
            if st.d.is_dir() {
                return Err(FsError::IsDir(format!("inode {ino}")));
            }
            if !st.d.is_reg() {
                return Err(FsError::Invalid("truncate of a non-regular file".into()));
            }
            crate::file::truncate(&self.inner, ino, &mut st, size)?;
        }
        if set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.atime.is_some()
            || set.mtime.is_some()
            || set.ctime.is_some()
        {
            let mut tx = Tx::start(&self.inner, 4)?;
            if let Some(q) = self.inner.quota.get()
                && (set.uid.is_some_and(|u| u != st.d.uid) || set.gid.is_some_and(|g| g != st.d.gid))
            {
                // The new owner's entries first: a full file system refuses the chown here.
                q.prepare(&mut tx, [set.uid.unwrap_or(st.d.uid), set.gid.unwrap_or(st.d.gid), st.d.projid])?;
            }
            if let Some(m) = set.mode {
                st.d.mode = (st.d.mode & 0o170000) | (m as u16 & 0o7777);
            }
            if let Some(u) = set.uid {
                st.d.uid = u;
            }
            if let Some(g) = set.gid {
                st.d.gid = g;
            }
            if let Some(t) = set.atime {
                st.d.atime = t;
            }
            if let Some(t) = set.mtime {
                st.d.mtime = t;
            }
            st.d.ctime = set.ctime.unwrap_or_else(Timestamp::now);
            store_inode(&mut tx, ino, &mut st)?;
            tx.stop()?;
            if set.mode.is_some() {
                // A stored access ACL follows the new mode (a transaction of its own, as in
                // ext4_setattr).
                self.retry_nospc(|| crate::acl::chmod(&self.inner, ino, &mut st))?;
            }
        }
        Ok(attr_of(&self.inner, ino, &st))
    }

    /// Create a regular file with permission bits `mode` (no umask; a default POSIX ACL of
    /// `parent` is inherited, see [`Fs::mknod_umask`]).
    pub fn create(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> FsResult<Attr> {
        self.create_umask(parent, name, mode, 0, uid, gid)
    }

    /// Create a regular file as a process with `umask` does (see [`Fs::mknod_umask`]).
    pub fn create_umask(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
    ) -> FsResult<Attr> {
        self.mknod_umask(parent, name, (mode & 0o7777) | 0o100000, umask, 0, uid, gid)
    }

    /// Create a file of any non-directory, non-symlink type (fifo, socket, device, regular)
    /// with mode `mode` (no umask; see [`Fs::mknod_umask`]).
    pub fn mknod(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> FsResult<Attr> {
        self.mknod_umask(parent, name, mode, 0, rdev, uid, gid)
    }

    /// [`Fs::mknod`] as a process with `umask` does it on ext4: the umask clears permission
    /// bits unless `parent` has a default POSIX ACL, in which case the new inode inherits
    /// that ACL (as its access ACL, masked by `mode`; the mode keeps what the ACL allows) and
    /// the umask is ignored (`posix_acl_create`).
    #[allow(clippy::too_many_arguments)]
    pub fn mknod_umask(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> FsResult<Attr> {
        let um = (umask & 0o777) as u16;
        self.make(parent, || crate::namei::mknod(&self.inner, parent, name, mode, um, rdev, uid, gid))
    }

    /// Make a new inode in `parent` with `f` (on a writable mount, retried once space is
    /// freed) and return its attributes.
    fn make(&self, parent: Ino, f: impl Fn() -> FsResult<Arc<crate::inode::Inode>>) -> FsResult<Attr> {
        self.check_rw()?;
        let node = self.retry_nospc(f)?;
        let attr = attr_of(&self.inner, node.ino, &node.state.read());
        self.dir_ops_durable(&[parent])?;
        Ok(attr)
    }

    /// ext4's `IS_DIRSYNC`: after a directory operation in `dirs` on a `dirsync` or `sync`
    /// mount ([`crate::MountOptions::dirsync`]), or in a directory marked `chattr +D` or `+S`,
    /// commit the transaction that changed them and wait until it is durable. The
    /// directories' newest transaction is taken: one started after the operation's commits
    /// it too (on one log a later transaction commits after the earlier ones; across logs a
    /// shared directory block chains it to the operation's).
    fn dir_ops_durable(&self, dirs: &[Ino]) -> FsResult<()> {
        let mut sync = self.inner.opts.dirsync || self.inner.opts.sync;
        let mut txs = Vec::with_capacity(dirs.len());
        for &d in dirs {
            // Removed since by another caller (this very unlink may have emptied it): its
            // flags went with it, so commit everything rather than guess (a rare race).
            let Ok(node) = self.node(d) else { return Ok(self.inner.journal.force()?) };
            let st = node.state.read();
            sync |= st.d.flags & (EXT4_SYNC_FL | EXT4_DIRSYNC_FL) != 0;
            txs.push(st.meta_tx);
        }
        if sync && !crate::planted::bugs(&self.inner.opts).no_dirsync {
            for tx in txs {
                self.inner.journal.fsync(tx, &[])?;
            }
        }
        Ok(())
    }

    /// ext4's `IS_SYNC` for a truncate or an extended attribute change of `ino` (`chattr +S`,
    /// or a `sync` mount): an fsync before the call returns. Writes check it under their
    /// own lock ([`Fs::write_inner`]), flag changes before the change ([`Fs::set_flags`]).
    fn sync_if_marked(&self, ino: Ino) -> FsResult<()> {
        let marked = self.inner.opts.sync || self.node(ino)?.state.read().d.flags & EXT4_SYNC_FL != 0;
        if marked { self.fsync(ino, false) } else { Ok(()) }
    }

    /// Make a directory with permission bits `mode` (no umask; see [`Fs::mkdir_umask`]).
    pub fn mkdir(&self, parent: Ino, name: &[u8], mode: u32, uid: u32, gid: u32) -> FsResult<Attr> {
        self.mkdir_umask(parent, name, mode, 0, uid, gid)
    }

    /// Make a directory as a process with `umask` does (see [`Fs::mknod_umask`]); a default
    /// ACL of `parent` also becomes the new directory's default ACL.
    pub fn mkdir_umask(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
    ) -> FsResult<Attr> {
        let um = (umask & 0o777) as u16;
        self.make(parent, || crate::namei::mkdir(&self.inner, parent, name, mode, um, uid, gid))
    }

    /// Make a symbolic link `parent/name` pointing at `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> FsResult<Attr> {
        self.make(parent, || crate::namei::symlink(&self.inner, parent, name, target, uid, gid))
    }

    /// A symbolic link's target.
    pub fn readlink(&self, ino: Ino) -> FsResult<Vec<u8>> {
        let node = self.node(ino)?;
        let st = self.read_state(&node)?;
        crate::namei::readlink(&self.inner, &st)
    }

    /// Hard link `ino` as `newparent/newname`.
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Attr> {
        self.check_rw()?;
        let node = self.retry_nospc(|| crate::namei::link(&self.inner, ino, newparent, newname))?;
        let attr = attr_of(&self.inner, node.ino, &node.state.read());
        self.dir_ops_durable(&[newparent])?;
        Ok(attr)
    }

    /// Remove a non-directory name.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.check_rw()?;
        crate::namei::unlink(&self.inner, parent, name)?;
        self.dir_ops_durable(&[parent])
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.check_rw()?;
        crate::namei::rmdir(&self.inner, parent, name)?;
        self.dir_ops_durable(&[parent])
    }

    /// Rename (with RENAME_NOREPLACE / RENAME_EXCHANGE semantics via `flags`).
    pub fn rename(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> FsResult<()> {
        self.check_rw()?;
        self.retry_nospc(|| crate::namei::rename(&self.inner, parent, name, newparent, newname, flags))?;
        let dirs = [parent, newparent];
        self.dir_ops_durable(if parent == newparent { &dirs[..1] } else { &dirs })
    }

    /// Note an open of `ino`: an open file outlives its last unlink until [`Fs::release`] (the FUSE layer calls it on open).
    pub fn open_file(&self, ino: Ino) -> FsResult<Attr> {
        let node = self.node(ino)?;
        let mut st = self.write_state(&node)?;
        st.open += 1;
        Ok(attr_of(&self.inner, ino, &st))
    }

    /// Note the close of an open of `ino`; frees it if it was its last user and it has no
    /// links left.
    pub fn release(&self, ino: Ino) -> FsResult<()> {
        let node = self.node(ino)?;
        let mut st = node.state.write();
        st.open = st.open.saturating_sub(1);
        if st.open == 0 && st.orphan && st.d.links_count == 0 && !self.inner.opts.read_only {
            crate::orphan::evict(&self.inner, &node, &mut st)?;
        }
        Ok(())
    }

    /// Read at `off` into `buf`; returns bytes read (0 at end of file).
    pub fn read(&self, ino: Ino, off: u64, buf: &mut [u8]) -> FsResult<usize> {
        let node = self.node(ino)?;
        let st = self.read_state(&node)?;
        if st.d.is_dir() {
            return Err(FsError::IsDir(format!("inode {ino}")));
        }
        // A symlink's target is read with `readlink` (a fast one's i_block holds it, not a
        // map), a device's i_block its numbers.
        if !st.d.is_reg() {
            return Err(FsError::Invalid(format!("inode {ino} is not a regular file")));
        }
        crate::file::read(&self.inner, &st, off, buf)
    }

    /// Write `data` at `off`; returns bytes written. A write that crosses the largest file
    /// size is cut short there; one that starts at or past it is [`FsError::TooBig`].
    pub fn write(&self, ino: Ino, off: u64, data: &[u8]) -> FsResult<usize> {
        self.write_inner(ino, off, data, true)
    }

    /// Write `data` at `off` like [`Fs::write`], leaving mtime and ctime as they are: for a
    /// page cache writing back data written earlier, which keeps the times itself and sets
    /// them with [`Fs::setattr`] (FUSE's writeback cache). Setting them here instead would
    /// store the time of the writeback, later than the one the cache shows and has sent.
    pub fn write_keep_times(&self, ino: Ino, off: u64, data: &[u8]) -> FsResult<usize> {
        self.write_inner(ino, off, data, false)
    }

    fn write_inner(&self, ino: Ino, off: u64, data: &[u8], touch_times: bool) -> FsResult<usize> {
        self.check_rw()?;
        let node = self.node(ino)?;
        let mut st = self.write_state(&node)?;
        if st.d.is_dir() {
            return Err(FsError::IsDir(format!("inode {ino}")));
        }
        if !st.d.is_reg() {
            return Err(FsError::Invalid(format!("inode {ino} is not a regular file")));
        }
        if touch_times {
            crate::protect::may_write(ino, &st, off)?;
        }
        // ext4's `IS_SYNC` (`chattr +S`, a `sync` mount): `generic_write_sync`, an fdatasync.
        let sync = self.inner.opts.sync || st.d.flags & EXT4_SYNC_FL != 0;
        let done = self.write_locked(ino, &mut st, off, data, touch_times)?;
        drop(st);
        if sync {
            self.fsync(ino, true)?;
        }
        Ok(done)
    }

    /// [`Fs::write_inner`] under the inode's lock.
    fn write_locked(
        &self,
        ino: Ino,
        st: &mut InodeState,
        off: u64,
        data: &[u8],
        touch_times: bool,
    ) -> FsResult<usize> {
        let data = &data[..crate::file::writable_len(&self.inner, off, data.len())?];
        // Retried after a commit when freed-but-not-yet-durable blocks were all that was left
        // (see `retry_nospc`); rewriting the same bytes at the same offset is idempotent.
        let done = self.retry_nospc(|| crate::file::write(&self.inner, ino, st, off, data, touch_times))?;
        if done == 0 || done == data.len() || !self.frees_pending() {
            return Ok(done);
        }
        // Cut short where only blocks freed by a transaction not yet durable were left: the
        // rest once they are, so a short count still means the file system is full.
        // Bytes already in the file are reported as written whatever happens next (as the
        // kernel answers a partial write); a lasting error shows at the next write or fsync.
        if self.inner.journal.force().is_err() {
            return Ok(done);
        }
        Ok(done
            + crate::file::write(&self.inner, ino, st, off + done as u64, &data[done..], touch_times)
                .unwrap_or(0))
    }

    /// Whether blocks or inodes were freed by transactions that are not yet durable (the
    /// allocator may not reuse them before then).
    fn frees_pending(&self) -> bool {
        self.inner.groups.iter().any(|g| {
            let g = g.lock();
            !g.busy.is_empty() || !g.busy_inodes.is_empty()
        })
    }

    /// Run an allocating operation; on ENOSPC while blocks freed by transactions that are
    /// not yet durable exist (the allocator may not reuse them before then), force a commit
    /// and try once more, as ext4 does (`ext4_should_retry_alloc`). Without this a file
    /// deleted just before a write on a nearly full file system made the write fail with
    /// ENOSPC although its blocks were free once committed. The caller may hold inode locks
    /// but no journal handle (inode locks come before handles, so no handle holder waits on
    /// them and the commit can finish).
    fn retry_nospc<T>(&self, mut op: impl FnMut() -> FsResult<T>) -> FsResult<T> {
        match op() {
            Err(FsError::NoSpace(m)) => {
                if !self.frees_pending() {
                    return Err(FsError::NoSpace(m));
                }
                self.inner.journal.force()?;
                op()
            }
            r => r,
        }
    }

    /// Allocate, punch or zero a range.
    pub fn fallocate(&self, ino: Ino, mode: FallocMode, off: u64, len: u64) -> FsResult<()> {
        self.check_rw()?;
        let node = self.node(ino)?;
        let mut st = self.write_state(&node)?;
        if !st.d.is_reg() {
            return Err(FsError::NotSupported("fallocate on a non-regular file".into()));
        }
        crate::protect::may_fallocate(ino, &st, mode)?;
        self.retry_nospc(|| crate::file::fallocate(&self.inner, ino, &mut st, mode, off, len))
    }

    /// Offset of the next data (`data`) or hole at or after `off` (lseek SEEK_DATA/HOLE);
    /// `None` past the end (ENXIO).
    pub fn seek_data_hole(&self, ino: Ino, off: u64, data: bool) -> FsResult<Option<u64>> {
        let node = self.node(ino)?;
        let st = self.read_state(&node)?;
        crate::file::seek(&self.inner, &st, off, data)
    }

    /// Make `ino` durable: with `datasync`, only what is needed to read its data back.
    pub fn fsync(&self, ino: Ino, datasync: bool) -> FsResult<()> {
        let node = self.node(ino)?;
        self.inner.journal.count_fsync();
        // iJournaling: an i-transaction when the file allows one (else it counts why not).
        if crate::ijournal::fsync(&self.inner, &node, datasync)? {
            return Ok(());
        }
        let j = &self.inner.journal;
        let (tx, bufs, back) = {
            let mut st = node.state.write();
            let mut tx = if datasync { st.datasync_tx } else { st.meta_tx };
            let mut back = false;
            // The adaptive data mode decides from the writes since the last sync.
            if self.inner.opts.adaptive && !st.freed && st.d.links_count > 0 {
                match crate::adaptive::decide(&self.inner, &mut st, !j.is_durable(tx), datasync) {
                    crate::adaptive::Decision::ToData => {
                        crate::adaptive::to_data(&self.inner, ino, &mut st)?;
                        tx = st.meta_tx;
                    }
                    crate::adaptive::Decision::ToOrdered => {
                        // By revoke the switch goes in before this sync's commit, which then
                        // writes the window home instead of logging it.
                        let t0 = std::time::Instant::now();
                        if crate::adaptive::leave_by_revoke(&self.inner, ino, &mut st, true)? {
                            self.inner.adaptive.switched_to_ordered(t0.elapsed().as_nanos() as u64);
                        } else {
                            back = true;
                        }
                    }
                    crate::adaptive::Decision::Keep => {}
                }
            }
            // A switch out of data journaling by revoke, or a rewrite journaled since because
            // its block still had an image in the log, commits before the data is durable.
            if st.leave_tx.tid > tx.tid && !j.is_durable(st.leave_tx) {
                tx = st.leave_tx;
            }
            (tx, std::mem::take(&mut st.dirty_data), back)
        };
        // A data-journaled file's data is in the log: the commit is all (its committed pages
        // not yet checkpointed stay checkpoint work, never written home on this path).
        let r = j.fsync(tx, &bufs);
        node.keep_dirty(bufs, r.map_err(FsError::from))?;
        if back {
            crate::adaptive::timed(&self.inner, || self.change_journal_data(ino, false, false))?;
        }
        Ok(())
    }

    /// iJournaling's statistics since mount (`None` when the mount does not use it).
    pub fn ijournal_stats(&self) -> Option<crate::IjStats> {
        self.inner.ij.get().map(|ij| ij.stats())
    }

    /// Commit everything (sync / syncfs).
    pub fn sync(&self) -> FsResult<()> {
        Ok(self.inner.journal.force()?)
    }

    /// File system statistics.
    pub fn statfs(&self) -> StatFs {
        let overhead = *self.inner.overhead.get_or_init(|| {
            // A copy: reading the journal inode takes cache locks, not to be held under `sb`.
            let sb = self.inner.sb.lock().clone();
            let journal = crate::fs::journal_area(&self.inner.dev, &sb).map_or(0, |a| a.len());
            sb.overhead_blocks(journal)
        });
        let geo = &self.inner.geo;
        let bfree = self.inner.free_blocks.load(std::sync::atomic::Ordering::Relaxed).max(0) as u64;
        // As ext4 reports (`ext4_statfs`): the total without the metadata, and what an
        // unprivileged caller may not take held back (`crate::alloc` enforces the same).
        StatFs {
            bsize: geo.block_size as u32,
            blocks: geo.blocks_count.saturating_sub(overhead),
            bfree,
            bavail: bfree.saturating_sub(geo.reserved_blocks + geo.metadata_reserve),
            files: u64::from(geo.inodes_count),
            ffree: self.inner.free_inodes.load(std::sync::atomic::Ordering::Relaxed).max(0) as u64,
            namelen: crate::types::NAME_MAX as u32,
        }
    }

    /// Up to `max` directory entries from `offset` (0 = start; use each entry's
    /// `next_offset` to continue). Includes `.` and `..`.
    pub fn readdir(&self, ino: Ino, offset: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let node = self.node(ino)?;
        let st = self.read_state(&node)?;
        if !st.d.is_dir() {
            return Err(FsError::NotDir(format!("inode {ino}")));
        }
        dir::readdir(&self.inner, &st, offset, max)
    }

    /// Every entry of directory `ino`, `.` and `..` included.
    pub fn readdir_all(&self, ino: Ino) -> FsResult<Vec<DirEntry>> {
        let mut out = Vec::new();
        let mut off = 0;
        loop {
            let batch = self.readdir(ino, off, 1024)?;
            let Some(last) = batch.last() else { break };
            off = last.next_offset;
            out.extend(batch);
        }
        Ok(out)
    }

    /// Every attribute name ext4 lists to a caller with `CAP_SYS_ADMIN` (see
    /// [`Fs::listxattr_as`]).
    pub fn listxattr(&self, ino: Ino) -> FsResult<Vec<Vec<u8>>> {
        self.listxattr_as(ino, true)
    }

    /// The attribute names ext4 lists to a caller with (`privileged`) or without
    /// `CAP_SYS_ADMIN`: `trusted.` names only to the former, and no `system.` name other
    /// than the POSIX ACLs (ext4 has no handler for `system.data` or others, which may
    /// still be on disk).
    pub fn listxattr_as(&self, ino: Ino, privileged: bool) -> FsResult<Vec<Vec<u8>>> {
        let node = self.node(ino)?;
        let st = self.read_state(&node)?;
        Ok(xattr::names(&self.inner, &st)?.into_iter().filter(|n| xattr::listed(n, privileged)).collect())
    }

    /// One attribute's value. POSIX ACLs come in the user-space format (`a_version` 2),
    /// converted from ext4's on-disk format; a stored ACL that is not valid in that format
    /// is [`FsError::Invalid`], as on ext4. A name in a namespace ext4 has no handler for
    /// (`system.` names other than the ACLs, `system.data` among them) is
    /// [`FsError::NotSupported`].
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        xattr::check_namespace(name)?;
        let node = self.node(ino)?;
        let st = self.read_state(&node)?;
        if crate::acl::is_acl(name) {
            return crate::acl::get(&self.inner, &st, name);
        }
        xattr::get(&self.inner, &st, name)
    }

    /// Set an attribute. POSIX ACLs (`system.posix_acl_access` / `_default`, user-space
    /// format) are checked, stored in ext4's format and kept consistent with the mode as
    /// ext4 does: an access ACL sets the permission bits, and one the mode expresses in full
    /// is not stored; `flags` do not apply to them. Names ext4 has no handler for are
    /// refused as in [`Fs::getxattr`]. See [`Fs::setxattr_clearing_sgid`].
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: XattrFlags) -> FsResult<()> {
        self.setxattr_clearing_sgid(ino, name, value, flags, false)
    }

    /// [`Fs::setxattr`]; with `clear_sgid` (the caller is outside the file's group and lacks
    /// `CAP_FSETID`) setting an access ACL also clears the set-group-ID bit, as the kernel's
    /// `posix_acl_update_mode` does.
    pub fn setxattr_clearing_sgid(
        &self,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        clear_sgid: bool,
    ) -> FsResult<()> {
        self.check_rw()?;
        {
            let node = self.node(ino)?;
            let mut st = self.write_state(&node)?;
            crate::protect::may_change(ino, &st, "setting an extended attribute")?;
            xattr::check_namespace(name)?;
            if crate::acl::is_acl(name) {
                self.retry_nospc(|| crate::acl::set(&self.inner, ino, &mut st, name, value, clear_sgid))?;
            } else {
                self.retry_nospc(|| xattr::set(&self.inner, ino, &mut st, name, Some(value), flags))?;
            }
        }
        self.sync_if_marked(ino)
    }

    /// Remove an attribute. Removing a POSIX ACL leaves the mode alone and is no error when
    /// there is none, as on ext4.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> FsResult<()> {
        self.check_rw()?;
        {
            let node = self.node(ino)?;
            let mut st = self.write_state(&node)?;
            crate::protect::may_change(ino, &st, "removing an extended attribute")?;
            xattr::check_namespace(name)?;
            if crate::acl::is_acl(name) {
                crate::acl::set(&self.inner, ino, &mut st, name, &[], false)?;
            } else {
                xattr::set(&self.inner, ino, &mut st, name, None, XattrFlags::Any)?;
            }
        }
        self.sync_if_marked(ino)
    }

    /// Set the `chattr` flags in `mask` ([`crate::protect::CHATTR_FLAGS`] only) to their values in `flags`.
    /// Changing the immutable or append-only flag needs `CAP_LINUX_IMMUTABLE`, which the
    /// caller checks; data journalling changes through [`Fs::set_journal_data`].
    pub fn set_flags(&self, ino: Ino, mask: u32, flags: u32) -> FsResult<Attr> {
        use crate::protect::CHATTR_FLAGS;
        if mask & !CHATTR_FLAGS != 0 {
            return Err(FsError::NotSupported(format!(
                "inode flags {:#x} cannot be changed (only immutable, append-only, no-dump, no-atime, sync, dirsync, project inheritance and data journalling)",
                mask & !CHATTR_FLAGS
            )));
        }
        self.check_rw()?;
        let (attr, was_sync) = {
            let node = self.node(ino)?;
            let mut st = self.write_state(&node)?;
            // Flags the inode's kind cannot carry are dropped silently, as ext4 does
            // (`chattr +D` or `+P` on a regular file).
            let syncs = EXT4_SYNC_FL | EXT4_DIRSYNC_FL | crate::ondisk::inode::EXT4_PROJINHERIT_FL;
            let mask = (mask & !syncs) | (crate::ondisk::inode::mask_flags(st.d.mode, mask) & syncs);
            let was_sync = st.d.flags & EXT4_SYNC_FL != 0;
            let new = (st.d.flags & !mask) | (flags & mask);
            if (new ^ st.d.flags) & EXT4_CASEFOLD_FL != 0 {
                // As `ext4_ioctl_setflags`: only on an empty directory of a casefold file
                // system; its names are then keyed anew.
                if self.inner.geo.casefold.is_none() {
                    return Err(FsError::NotSupported("casefolding (+F) needs the casefold feature".into()));
                }
                if !st.d.is_dir() {
                    return Err(FsError::NotDir(format!("inode {ino}: only directories fold names (+F)")));
                }
                dir::ensure_index(&self.inner, &mut st)?;
                if st.dir_len() > 0 {
                    return Err(FsError::NotEmpty(format!("inode {ino}: +F needs an empty directory")));
                }
                st.drop_index();
            }
            if new != st.d.flags {
                let mut tx = Tx::start(&self.inner, 4)?;
                st.d.flags = new;
                st.d.ctime = Timestamp::now();
                store_inode(&mut tx, ino, &mut st)?;
                tx.stop()?;
            }
            (attr_of(&self.inner, ino, &st), was_sync)
        };
        // ext4_ioctl_setflags makes the change synchronous when the inode was `+S`.
        if was_sync || self.inner.opts.sync {
            self.fsync(ino, false)?;
        }
        Ok(attr)
    }

    /// Set the project id of `ino` (`chattr -p`, `FS_IOC_FSSETXATTR`'s `fsx_projid`, as
    /// `ext4_ioctl_setproject`): its quota usage moves to the new project in the same
    /// transaction. Without the `project` feature only 0 is accepted (`EOPNOTSUPP`
    /// otherwise); an immutable or append-only file refuses (`EPERM`), as do the quota files
    /// and EA inodes; a record too small to hold the field refuses (`EOPNOTSUPP`: the kernel
    /// would first grow the record's extra space, which cjfs does not). The caller checks
    /// that it owns the file.
    pub fn set_project(&self, ino: Ino, projid: u32) -> FsResult<Attr> {
        if !self.inner.geo.project {
            if projid == 0 {
                return self.getattr(ino);
            }
            return Err(FsError::NotSupported("project ids need the project feature".into()));
        }
        self.check_rw()?;
        let node = self.node(ino)?;
        let mut st = self.write_state(&node)?;
        if st.d.projid == projid {
            return Ok(attr_of(&self.inner, ino, &st));
        }
        let reserved = ino < self.inner.geo.first_ino && ino != crate::types::ROOT_INO;
        if reserved || st.d.flags & crate::ondisk::inode::EXT4_EA_INODE_FL != 0 {
            return Err(FsError::Perm(format!("inode {ino} is internal: its project id stays")));
        }
        // `ext4_ioctl_check_immutable`: an immutable file keeps its project (an append-only
        // one does not).
        crate::protect::may_change_immutable(ino, &st, "project id change")?;
        if st.d.extra_isize < 32 {
            return Err(FsError::NotSupported(format!(
                "inode {ino}: its record keeps {} extra bytes, too few for a project id",
                st.d.extra_isize
            )));
        }
        let mut tx = Tx::start(&self.inner, 4)?;
        if let Some(q) = self.inner.quota.get() {
            q.prepare(&mut tx, [st.d.uid, st.d.gid, projid])?;
        }
        st.d.projid = projid;
        st.d.ctime = Timestamp::now();
        store_inode(&mut tx, ino, &mut st)?;
        tx.stop()?;
        Ok(attr_of(&self.inner, ino, &st))
    }

    /// Turn data journalling for one file on or off (ext4's `chattr +j`). On a directory the
    /// flag only passes to the files and directories made in it later (ext4's
    /// `EXT4_FL_INHERITED`). The mode set here stays for the mount: the adaptive data mode
    /// (`adaptive` preset) leaves the file alone.
    pub fn set_journal_data(&self, ino: Ino, on: bool) -> FsResult<()> {
        self.change_journal_data(ino, on, true)
    }

    /// [`Fs::set_journal_data`]; `explicit` pins the mode against the adaptive policy.
    pub(crate) fn change_journal_data(&self, ino: Ino, on: bool, explicit: bool) -> FsResult<()> {
        self.check_rw()?;
        let node = self.node(ino)?;
        let mut st = self.write_state(&node)?;
        if explicit {
            st.window.pinned = true;
        }
        if st.d.is_reg() {
            // Data already buffered must reach home under the old mode first.
            drop(st);
            self.fsync(ino, false)?;
            st = self.write_state(&node)?;
        }
        let was = st.d.flags & EXT4_JOURNAL_DATA_FL != 0;
        if !explicit && was == on {
            return Ok(());
        }
        if st.d.is_reg() && !on && was && self.inner.opts.data != DataMode::Journal {
            // Journalled copies of this file's blocks may still await checkpoint. In ordered
            // mode new data goes straight home, and freeing an ordered block revokes nothing,
            // so a later checkpoint would write those stale copies over the file's new data
            // or over the blocks' next owner. Commit and checkpoint everything first, as
            // ext4 does (jbd2_journal_flush in ext4_change_inode_journal_flag). The inode
            // lock keeps new journalled writes to this file out meanwhile; with several
            // logs new handles wait too (see `Journal::empty`). `leave=revoke` does it
            // without writing anything now (`adaptive::leave_by_revoke`).
            if crate::adaptive::leave_by_revoke(&self.inner, ino, &mut st, false)? {
                return Ok(());
            }
            self.inner.journal.empty()?;
        }
        let mut tx = Tx::start(&self.inner, 4)?;
        if on {
            st.d.flags |= EXT4_JOURNAL_DATA_FL;
        } else {
            st.d.flags &= !EXT4_JOURNAL_DATA_FL;
        }
        st.d.ctime = Timestamp::now();
        store_inode(&mut tx, ino, &mut st)?;
        tx.stop()?;
        Ok(())
    }

    /// Resolve an absolute or root-relative path (no symlinks followed).
    pub fn resolve(&self, path: &str) -> FsResult<Ino> {
        let mut ino = ROOT_INO;
        for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            ino = self.lookup(ino, comp.as_bytes())?.ino;
        }
        Ok(ino)
    }

    /// Split a path into (parent inode, last name).
    pub fn resolve_parent<'p>(&self, path: &'p str) -> FsResult<(Ino, &'p str)> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if name.is_empty() {
            return Err(FsError::Invalid(format!("path {path:?} has no final name")));
        }
        Ok((self.resolve(dir)?, name))
    }
}
