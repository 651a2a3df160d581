//! ext4's immutable and append-only inode flags (`chattr +i`, `chattr +a`), refused with
//! EPERM (root included) where the kernel's VFS refuses them: `may_delete`, `may_create`
//! (`inode_permission` with `MAY_WRITE` on an immutable directory), `vfs_link`,
//! `notify_change`, `do_truncate`, `vfs_fallocate` and `xattr_permission`.
//!
//! Over FUSE the kernel never sees these flags in its inodes (FUSE does not carry
//! `S_IMMUTABLE`/`S_APPEND`), so the file system is the only place they can hold. Two
//! choices differ from the kernel, both for the FUSE writeback cache (`-o writeback`),
//! which writes pages back whole, in any order, after the program's write returned, and
//! sends the mtime it kept as a value, like an explicit one: pages written back are not
//! checked (the opens that made them were), and an explicit mtime alone (`touch -m -d`)
//! still passes on an append-only regular file there (an explicit atime is refused, as
//! ext4 refuses both). With the writeback cache, dirty pages of a file made immutable
//! before they went home still go home. Clearing `O_APPEND` with `fcntl(F_SETFL)` never
//! reaches a FUSE daemon, so it cannot be refused.

use crate::error::{FsError, FsResult};
use crate::inode::InodeState;
use crate::ondisk::inode::{
    EXT4_APPEND_FL, EXT4_CASEFOLD_FL, EXT4_DIRSYNC_FL, EXT4_IMMUTABLE_FL, EXT4_NOATIME_FL, EXT4_NODUMP_FL,
    EXT4_PROJINHERIT_FL, EXT4_SYNC_FL,
};
use crate::types::{FallocMode, Ino};

/// The `chattr` flags [`crate::Fs::set_flags`] changes: immutable, append-only, no-dump
/// (only for backup tools), no-atime, synchronous updates (`+S`) and synchronous directory
/// updates (`+D`, see [`crate::MountOptions::dirsync`]), project id inheritance (`+P`, a
/// directory's, see `crate::quota`), casefolding (`+F`, an empty directory's, see
/// `crate::casefold`). Data journalling has its own call; the others are
/// refused rather than stored and not honoured.
pub const CHATTR_FLAGS: u32 = EXT4_IMMUTABLE_FL
    | EXT4_APPEND_FL
    | EXT4_NODUMP_FL
    | EXT4_NOATIME_FL
    | EXT4_SYNC_FL
    | EXT4_DIRSYNC_FL
    | EXT4_PROJINHERIT_FL
    | EXT4_CASEFOLD_FL;

/// The flags only a caller with `CAP_LINUX_IMMUTABLE` may change.
pub const PROTECT_FLAGS: u32 = EXT4_IMMUTABLE_FL | EXT4_APPEND_FL;

fn immutable(st: &InodeState) -> bool {
    st.d.flags & EXT4_IMMUTABLE_FL != 0
}

fn append_only(st: &InodeState) -> bool {
    st.d.flags & EXT4_APPEND_FL != 0
}

fn refuse(ino: Ino, what: &str, st: &InodeState) -> FsError {
    refuse_flags(ino, what, st.d.flags)
}

fn refuse_flags(ino: Ino, what: &str, flags: u32) -> FsError {
    let why =
        if flags & EXT4_IMMUTABLE_FL != 0 { "immutable (chattr +i)" } else { "append-only (chattr +a)" };
    FsError::Perm(format!("{what}: inode {ino} is {why}"))
}

/// Adding an entry to directory `dir` (create, mkdir, symlink, mknod, link or rename into
/// it): refused in an immutable directory; an append-only one takes new entries.
pub(crate) fn may_add_entry(dir: Ino, ds: &InodeState) -> FsResult<()> {
    if immutable(ds) { Err(refuse(dir, "adding a directory entry", ds)) } else { Ok(()) }
}

/// Removing (or replacing) the entry of `ino` in directory `dir`: refused when either is
/// immutable or append-only.
pub(crate) fn may_remove_entry(dir: Ino, ds: &InodeState, ino: Ino, st: &InodeState) -> FsResult<()> {
    if immutable(ds) || append_only(ds) {
        return Err(refuse(dir, "removing a directory entry", ds));
    }
    if immutable(st) || append_only(st) {
        return Err(refuse(ino, "removing a name", st));
    }
    Ok(())
}

/// A change the kernel refuses on immutable and append-only files alike: truncate, chmod,
/// chown, a new hard link, an extended attribute.
pub(crate) fn may_change(ino: Ino, st: &InodeState, what: &str) -> FsResult<()> {
    if immutable(st) || append_only(st) { Err(refuse(ino, what, st)) } else { Ok(()) }
}

/// A change refused on immutable files only: new times, a directory moved to another
/// parent (its `..` entry changes).
pub(crate) fn may_change_immutable(ino: Ino, st: &InodeState, what: &str) -> FsResult<()> {
    if immutable(st) { Err(refuse(ino, what, st)) } else { Ok(()) }
}

/// A write at `off`: refused on an immutable file, and on an append-only one anywhere
/// but at or past its end. Not asked for pages a writeback cache sends home (see the
/// module's doc): the kernel accepted those writes already, and refusing them would lose
/// the bytes.
pub(crate) fn may_write(ino: Ino, st: &InodeState, off: u64) -> FsResult<()> {
    if immutable(st) || (append_only(st) && off < st.d.size) {
        return Err(refuse(ino, "write", st));
    }
    Ok(())
}

/// fallocate: refused on an immutable file; on an append-only file only plain allocation
/// passes (`vfs_fallocate` refuses every mode but `FALLOC_FL_KEEP_SIZE` there).
pub(crate) fn may_fallocate(ino: Ino, st: &InodeState, mode: FallocMode) -> FsResult<()> {
    let plain = matches!(mode, FallocMode::Allocate | FallocMode::KeepSize);
    if immutable(st) || (append_only(st) && !plain) {
        return Err(refuse(ino, "fallocate", st));
    }
    Ok(())
}

/// Opening for writing (the FUSE `open`): refused on an immutable file; an append-only
/// file opens for writing only with `O_APPEND` and never with `O_TRUNC` (`may_open`).
pub fn may_open(ino: Ino, flags: u32, writable: bool, append: bool, trunc: bool) -> FsResult<()> {
    let imm = flags & EXT4_IMMUTABLE_FL != 0;
    let app = flags & EXT4_APPEND_FL != 0;
    if (imm && (writable || trunc)) || (app && ((writable && !append) || trunc)) {
        return Err(refuse_flags(ino, "open for writing", flags));
    }
    Ok(())
}
