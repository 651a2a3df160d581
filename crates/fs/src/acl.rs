//! POSIX ACLs (`system.posix_acl_access`, `system.posix_acl_default`) as ext4 keeps them:
//! converted between the user-space format and ext4's on-disk format (see
//! [`crate::ondisk::acl`]), and kept consistent with the mode as `ext4_set_acl` and
//! `posix_acl_chmod` keep them.
//!
//! * Setting an access ACL sets the permission bits it implies; an ACL the mode says in
//!   full (three base entries) is not stored at all, and removes a stored one.
//! * A default ACL is only for directories (`EACCES` otherwise, as the kernel).
//! * A chmod rewrites a stored access ACL's owner, mask (or group) and other entries.
//!
//! Permission checks are not made here: the front end decides who may set an ACL, and the
//! stored ACLs grant nothing by themselves (see the FUSE crate on what the kernel checks).

use crate::error::{FsError, FsResult};
use crate::fs::FsInner;
use crate::inode::InodeState;
use crate::ondisk::acl::{self as a};
use crate::ondisk::inode::{S_IFDIR, S_IFLNK, S_IFMT};
use crate::types::Ino;
use crate::xattr;

/// Name of the access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// Name of the default ACL.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

/// Whether `name` is one of the two ACL attributes.
pub(crate) fn is_acl(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

/// The ACL `name` in the user-space format. [`FsError::NoAttr`] when there is none,
/// [`FsError::Invalid`] when what is stored is not an ext4 ACL (`ext4_acl_from_disk`).
pub(crate) fn get(fs: &FsInner, st: &InodeState, name: &[u8]) -> FsResult<Vec<u8>> {
    let raw = xattr::get(fs, st, name)?;
    let none = || FsError::NoAttr(String::from_utf8_lossy(name).into_owned());
    // An empty stored value reads as no ACL, as in ext4_get_acl.
    if raw.is_empty() {
        return Err(none());
    }
    match a::from_disk(&raw)? {
        Some(acl) => Ok(a::to_xattr(&acl)),
        None => Err(none()),
    }
}

/// Set ACL `name` from its user-space format (an empty value or bare header removes it), as
/// `setxattr(2)` of an ACL does on ext4. `kill_sgid` (the caller is outside the file's group
/// and may not keep set-group-ID) clears `S_ISGID` with an access ACL, as
/// `posix_acl_update_mode` does. The create/replace flags of `setxattr` do not apply.
pub(crate) fn set(
    fs: &FsInner,
    ino: Ino,
    st: &mut InodeState,
    name: &[u8],
    value: &[u8],
    kill_sgid: bool,
) -> FsResult<()> {
    if st.d.is_symlink() {
        return Err(FsError::NotSupported(format!("POSIX ACL on symbolic link {ino}")));
    }
    let acl = a::from_xattr(value)?;
    if let Some(acl) = &acl {
        a::validate(acl)?;
    }
    if name == DEFAULT {
        if !st.d.is_dir() {
            return match acl {
                Some(_) => Err(FsError::Access(format!("default ACL on non-directory {ino}"))),
                None => Ok(()),
            };
        }
        let disk = acl.as_deref().map(a::to_disk);
        return xattr::set_acl(fs, ino, st, DEFAULT, disk.as_deref(), None);
    }
    let Some(acl) = acl else {
        // Removing the access ACL leaves the mode as it is.
        return xattr::set_acl(fs, ino, st, ACCESS, None, None);
    };
    let (perm, equiv) = a::equiv_mode(&acl);
    let mut mode = (st.d.mode & !0o777) | perm;
    if kill_sgid {
        mode &= !0o2000;
    }
    let disk = (!equiv).then(|| a::to_disk(&acl));
    xattr::set_acl(fs, ino, st, ACCESS, disk.as_deref(), Some(mode))
}

/// What a new inode of `mode` made in directory `parent` (state `ps`) by a caller with
/// `umask` gets (`posix_acl_create`): with a default ACL on the parent, the permission bits
/// it allows and the attributes to store — an access ACL unless the mode says it all, and for
/// a directory the default ACL itself; the umask is then ignored, as the kernel does. Without
/// one, the umask applies and nothing is stored. Symbolic links get neither.
pub(crate) fn inherit(
    fs: &FsInner,
    parent: Ino,
    ps: &InodeState,
    mode: u16,
    umask: u16,
) -> FsResult<(u16, crate::ondisk::xattr::XattrList)> {
    let kind = mode & S_IFMT;
    if kind == S_IFLNK {
        return Ok((mode, Vec::new()));
    }
    let raw = match xattr::get(fs, ps, DEFAULT) {
        Ok(v) => v,
        Err(FsError::NoAttr(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let default = if raw.is_empty() { None } else { a::from_disk(&raw)? };
    let Some(default) = default else {
        return Ok((mode & !(umask & 0o777), Vec::new()));
    };
    let mut access = default.clone();
    let (perm, stored) = a::create_masq(&mut access, mode & 0o777).map_err(|e| match e {
        FsError::Invalid(m) => FsError::Corrupt(format!("default ACL of directory inode {parent}: {m}")),
        e => e,
    })?;
    let mut list = Vec::new();
    if stored {
        list.push((ACCESS.to_vec(), a::to_disk(&access)));
    }
    if kind == S_IFDIR {
        list.push((DEFAULT.to_vec(), a::to_disk(&default)));
    }
    Ok(((mode & !0o777) | perm, list))
}

/// After a chmod to the inode's current mode: rewrite its stored access ACL to match
/// (`posix_acl_chmod`). Nothing to do without one.
pub(crate) fn chmod(fs: &FsInner, ino: Ino, st: &mut InodeState) -> FsResult<()> {
    if st.d.is_symlink() {
        return Ok(());
    }
    let raw = match xattr::get(fs, st, ACCESS) {
        Ok(v) => v,
        Err(FsError::NoAttr(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let Some(mut acl) = (if raw.is_empty() { None } else { a::from_disk(&raw)? }) else {
        return Ok(());
    };
    a::chmod(&mut acl, st.d.mode & 0o777)?;
    let disk = a::to_disk(&acl);
    if disk == raw {
        return Ok(());
    }
    xattr::set_acl(fs, ino, st, ACCESS, Some(&disk), None)
}
