//! POSIX ACLs: ext4's on-disk format and the user-space (`setxattr`) format, and the rules
//! the kernel applies between an ACL and the mode (`fs/posix_acl.c`, `fs/ext4/acl.c`).
//!
//! * User space (`system.posix_acl_access` / `_default` as `setxattr` and `getxattr` pass
//!   them): a 4-byte header `a_version = 2`, then 8-byte entries `{e_tag u16, e_perm u16,
//!   e_id u32}`, `e_id` undefined (`0xFFFFFFFF`) except for named users and groups.
//! * On disk (xattr name index 2 / 3 with an empty name): a 4-byte header `a_version = 1`,
//!   then 4-byte entries `{e_tag, e_perm}` for `USER_OBJ`, `GROUP_OBJ`, `MASK`, `OTHER` and
//!   8-byte entries `{e_tag, e_perm, e_id}` for `USER` and `GROUP`.
//!
//! Everything is little-endian.

use crate::error::{FsError, FsResult};
use crate::ondisk::superblock::{get_u16, get_u32, put_u16, put_u32};

/// `a_version` of the user-space format (`POSIX_ACL_XATTR_VERSION`).
pub const XATTR_VERSION: u32 = 2;
/// `a_version` of ext4's on-disk format (`EXT4_ACL_VERSION`).
pub const DISK_VERSION: u32 = 1;
/// `e_id` of entries that name no user or group (`ACL_UNDEFINED_ID`).
pub const UNDEFINED_ID: u32 = u32::MAX;

/// Tag: the owner.
pub const ACL_USER_OBJ: u16 = 0x01;
/// Tag: a named user.
pub const ACL_USER: u16 = 0x02;
/// Tag: the owning group.
pub const ACL_GROUP_OBJ: u16 = 0x04;
/// Tag: a named group.
pub const ACL_GROUP: u16 = 0x08;
/// Tag: the mask of named entries and the owning group.
pub const ACL_MASK: u16 = 0x10;
/// Tag: everyone else.
pub const ACL_OTHER: u16 = 0x20;

/// Permission bits an entry may carry (read 4, write 2, execute 1).
pub const ACL_PERMS: u16 = 0o7;

/// Header size of both formats.
const HEADER: usize = 4;
/// A user-space entry, and an on-disk entry that carries an id.
const FULL_ENTRY: usize = 8;
/// An on-disk entry without an id.
const SHORT_ENTRY: usize = 4;

/// One ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    /// `ACL_USER_OBJ`, `ACL_USER`, ...
    pub tag: u16,
    /// Permission bits (`ACL_PERMS`).
    pub perm: u16,
    /// User or group id for `ACL_USER` / `ACL_GROUP`, else [`UNDEFINED_ID`].
    pub id: u32,
}

impl AclEntry {
    /// An entry without an id.
    pub const fn base(tag: u16, perm: u16) -> AclEntry {
        AclEntry { tag, perm, id: UNDEFINED_ID }
    }

    fn has_id(&self) -> bool {
        matches!(self.tag, ACL_USER | ACL_GROUP)
    }
}

/// Parse the user-space format (`posix_acl_from_xattr`). `Ok(None)` for an empty ACL (no
/// value or a bare header), which means "remove". [`FsError::NotSupported`] for another
/// version, [`FsError::Invalid`] for a bad size or an unknown tag (the kernel's
/// `EOPNOTSUPP` and `EINVAL`).
pub fn from_xattr(v: &[u8]) -> FsResult<Option<Vec<AclEntry>>> {
    if v.is_empty() {
        return Ok(None);
    }
    if v.len() < HEADER {
        return Err(FsError::Invalid(format!("POSIX ACL of {} bytes has no header", v.len())));
    }
    let version = get_u32(v, 0);
    if version != XATTR_VERSION {
        return Err(FsError::NotSupported(format!("POSIX ACL version {version} (expected {XATTR_VERSION})")));
    }
    let body = &v[HEADER..];
    if !body.len().is_multiple_of(FULL_ENTRY) {
        return Err(FsError::Invalid(format!(
            "POSIX ACL of {} bytes is not a whole number of entries",
            v.len()
        )));
    }
    if body.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(body.len() / FULL_ENTRY);
    for e in body.chunks_exact(FULL_ENTRY) {
        let (tag, perm, id) = (get_u16(e, 0), get_u16(e, 2), get_u32(e, 4));
        let id = match tag {
            ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => UNDEFINED_ID,
            // The kernel maps the id into its namespace; -1 maps to nothing.
            ACL_USER | ACL_GROUP if id != UNDEFINED_ID => id,
            ACL_USER | ACL_GROUP => {
                return Err(FsError::Invalid("POSIX ACL entry with an undefined id".into()));
            }
            t => return Err(FsError::Invalid(format!("POSIX ACL entry with unknown tag 0x{t:x}"))),
        };
        out.push(AclEntry { tag, perm, id });
    }
    Ok(Some(out))
}

/// The user-space format of `acl` (`posix_acl_to_xattr`).
pub fn to_xattr(acl: &[AclEntry]) -> Vec<u8> {
    let mut v = vec![0u8; HEADER + FULL_ENTRY * acl.len()];
    put_u32(&mut v, 0, XATTR_VERSION);
    for (e, out) in acl.iter().zip(v[HEADER..].chunks_exact_mut(FULL_ENTRY)) {
        put_u16(out, 0, e.tag);
        put_u16(out, 2, e.perm);
        put_u32(out, 4, if e.has_id() { e.id } else { UNDEFINED_ID });
    }
    v
}

/// Parse ext4's on-disk format (`ext4_acl_from_disk`). `Ok(None)` for a header without
/// entries; [`FsError::Invalid`] for anything malformed (the kernel's `EINVAL`).
pub fn from_disk(v: &[u8]) -> FsResult<Option<Vec<AclEntry>>> {
    let bad = |why: &str| FsError::Invalid(format!("stored POSIX ACL is not in ext4's format: {why}"));
    if v.len() < HEADER {
        return Err(bad("no header"));
    }
    if get_u32(v, 0) != DISK_VERSION {
        return Err(bad(&format!("version {}", get_u32(v, 0))));
    }
    // The entry count as ext4_acl_count derives it from the size, assuming the four short
    // entries a valid extended ACL has; the entries must then end exactly at the end.
    let body = v.len() - HEADER;
    let count = if body < 4 * SHORT_ENTRY {
        if !body.is_multiple_of(SHORT_ENTRY) {
            return Err(bad("size is not a whole number of entries"));
        }
        body / SHORT_ENTRY
    } else {
        let named = body - 4 * SHORT_ENTRY;
        if !named.is_multiple_of(FULL_ENTRY) {
            return Err(bad("size is not a whole number of entries"));
        }
        named / FULL_ENTRY + 4
    };
    let mut out = Vec::with_capacity(count);
    let mut off = HEADER;
    for _ in 0..count {
        if off + SHORT_ENTRY > v.len() {
            return Err(bad("truncated entry"));
        }
        let (tag, perm) = (get_u16(v, off), get_u16(v, off + 2));
        match tag {
            ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => {
                out.push(AclEntry::base(tag, perm));
                off += SHORT_ENTRY;
            }
            ACL_USER | ACL_GROUP => {
                if off + FULL_ENTRY > v.len() {
                    return Err(bad("truncated entry"));
                }
                out.push(AclEntry { tag, perm, id: get_u32(v, off + 4) });
                off += FULL_ENTRY;
            }
            t => return Err(bad(&format!("unknown tag 0x{t:x}"))),
        }
    }
    if off != v.len() {
        return Err(bad("entries do not fill the value"));
    }
    Ok(if out.is_empty() { None } else { Some(out) })
}

/// ext4's on-disk format of `acl` (`ext4_acl_to_disk`).
pub fn to_disk(acl: &[AclEntry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + FULL_ENTRY * acl.len());
    v.extend_from_slice(&DISK_VERSION.to_le_bytes());
    for e in acl {
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        if e.has_id() {
            v.extend_from_slice(&e.id.to_le_bytes());
        }
    }
    v
}

/// Check an ACL as `posix_acl_valid` does: known tags and permission bits; entries in the
/// order `USER_OBJ`, `USER`..., `GROUP_OBJ`, `GROUP`..., `MASK`, `OTHER`; exactly one of each
/// base entry; a mask whenever there are named entries. Like the kernel it does not check
/// that named ids are sorted or unique (`setfacl` sorts them). [`FsError::Invalid`] otherwise.
pub fn validate(acl: &[AclEntry]) -> FsResult<()> {
    #[derive(PartialEq)]
    enum State {
        UserObj,
        User,
        Group,
        Other,
        Done,
    }
    let bad = |why: &str| Err(FsError::Invalid(format!("invalid POSIX ACL: {why}")));
    let mut state = State::UserObj;
    let mut needs_mask = false;
    for e in acl {
        if e.perm & !ACL_PERMS != 0 {
            return bad(&format!("permission bits 0x{:x}", e.perm));
        }
        state = match (e.tag, &state) {
            (ACL_USER_OBJ, State::UserObj) => State::User,
            (ACL_USER, State::User) => {
                needs_mask = true;
                State::User
            }
            (ACL_GROUP_OBJ, State::User) => State::Group,
            (ACL_GROUP, State::Group) => {
                needs_mask = true;
                State::Group
            }
            (ACL_MASK, State::Group) => State::Other,
            (ACL_OTHER, State::Other) => State::Done,
            (ACL_OTHER, State::Group) if !needs_mask => State::Done,
            (ACL_OTHER, State::Group) => return bad("named entries without a mask"),
            (t, _) => return bad(&format!("entry with tag 0x{t:x} out of place")),
        };
    }
    if state != State::Done {
        return bad("missing base entries");
    }
    Ok(())
}

/// The permission bits `acl` gives (`posix_acl_equiv_mode`): owner from `USER_OBJ`, group
/// from `MASK` if there is one (else `GROUP_OBJ`), other from `OTHER`; and whether the mode
/// says it all (only the three base entries, no mask).
pub fn equiv_mode(acl: &[AclEntry]) -> (u16, bool) {
    let mut mode = 0u16;
    let mut equiv = true;
    for e in acl {
        let p = e.perm & ACL_PERMS;
        match e.tag {
            ACL_USER_OBJ => mode |= p << 6,
            ACL_GROUP_OBJ => mode |= p << 3,
            ACL_OTHER => mode |= p,
            ACL_MASK => {
                mode = (mode & !0o070) | (p << 3);
                equiv = false;
            }
            _ => equiv = false,
        }
    }
    (mode, equiv)
}

/// Rewrite `acl` for a chmod to `mode` (`posix_acl_chmod_masq`): `USER_OBJ`, `OTHER` and the
/// mask (or `GROUP_OBJ` without one) take the new permission bits. [`FsError::Invalid`] for
/// an ACL without a group entry to take them.
pub fn chmod(acl: &mut [AclEntry], mode: u16) -> FsResult<()> {
    let mut group = None;
    let mut mask = None;
    for (i, e) in acl.iter_mut().enumerate() {
        match e.tag {
            ACL_USER_OBJ => e.perm = (mode >> 6) & ACL_PERMS,
            ACL_OTHER => e.perm = mode & ACL_PERMS,
            ACL_GROUP_OBJ => group = Some(i),
            ACL_MASK => mask = Some(i),
            _ => {}
        }
    }
    let i = mask.or(group).ok_or_else(|| FsError::Invalid("POSIX ACL without a group entry".into()))?;
    acl[i].perm = (mode >> 3) & ACL_PERMS;
    Ok(())
}

/// Make `acl`, a directory's default ACL, the access ACL of a new inode created with
/// permission bits `mode` (`posix_acl_create_masq`): the owner, other and mask (or owning
/// group without a mask) entries keep only what `mode` allows, and `mode` keeps only what
/// they allow. Returns the new mode's permission bits and whether the ACL says more than
/// them (named entries or a mask: then it is stored, else the mode is all). [`FsError::Invalid`]
/// for an ACL without a group entry.
pub fn create_masq(acl: &mut [AclEntry], mode: u16) -> FsResult<(u16, bool)> {
    let mut mode = mode & 0o777;
    let mut group = None;
    let mut mask = None;
    let mut not_equiv = false;
    for (i, e) in acl.iter_mut().enumerate() {
        match e.tag {
            ACL_USER_OBJ => {
                e.perm &= (mode >> 6) & ACL_PERMS;
                mode = (mode & !0o700) | ((mode & 0o700) & (e.perm << 6));
            }
            ACL_USER | ACL_GROUP => not_equiv = true,
            ACL_GROUP_OBJ => group = Some(i),
            ACL_OTHER => {
                e.perm &= mode & ACL_PERMS;
                mode = (mode & !0o007) | ((mode & 0o007) & e.perm);
            }
            ACL_MASK => {
                mask = Some(i);
                not_equiv = true;
            }
            _ => return Err(FsError::Invalid(format!("POSIX ACL entry with tag {:#x}", e.tag))),
        }
    }
    let i = mask.or(group).ok_or_else(|| FsError::Invalid("POSIX ACL without a group entry".into()))?;
    acl[i].perm &= (mode >> 3) & ACL_PERMS;
    mode = (mode & !0o070) | ((mode & 0o070) & (acl[i].perm << 3));
    Ok((mode, not_equiv))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xattr(version: u32, entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = version.to_le_bytes().to_vec();
        for &(t, p, id) in entries {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    const U: u32 = UNDEFINED_ID;

    #[test]
    fn create_masq_intersects_the_default_acl_with_the_mode() {
        // A default ACL with a named user and a mask, a file created 0666.
        let mut acl = vec![
            AclEntry::base(ACL_USER_OBJ, 7),
            AclEntry { tag: ACL_USER, perm: 6, id: 1000 },
            AclEntry::base(ACL_GROUP_OBJ, 5),
            AclEntry::base(ACL_MASK, 7),
            AclEntry::base(ACL_OTHER, 5),
        ];
        let (mode, stored) = create_masq(&mut acl, 0o666).expect("masq");
        // Owner rw (7 & 6), mask rw (7 & 6) as the group bits, other r (5 & 6).
        assert_eq!((mode, stored), (0o664, true));
        let perms: Vec<u16> = acl.iter().map(|e| e.perm).collect();
        assert_eq!(perms, vec![6, 6, 5, 6, 4], "the named user keeps its bits; the mask limits them");
        // Three base entries only: the mode says it all, nothing is stored.
        let mut base = vec![
            AclEntry::base(ACL_USER_OBJ, 7),
            AclEntry::base(ACL_GROUP_OBJ, 5),
            AclEntry::base(ACL_OTHER, 0),
        ];
        assert_eq!(create_masq(&mut base, 0o777).expect("masq"), (0o750, false));
        assert!(create_masq(&mut [AclEntry::base(ACL_USER_OBJ, 7)], 0o777).is_err(), "no group entry");
    }

    fn extended() -> Vec<AclEntry> {
        vec![
            AclEntry::base(ACL_USER_OBJ, 6),
            AclEntry { tag: ACL_USER, perm: 4, id: 65534 },
            AclEntry::base(ACL_GROUP_OBJ, 4),
            AclEntry { tag: ACL_GROUP, perm: 5, id: 100 },
            AclEntry::base(ACL_MASK, 5),
            AclEntry::base(ACL_OTHER, 0),
        ]
    }

    #[test]
    fn disk_format_is_ext4s() {
        let d = to_disk(&extended());
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            1, 0, 0, 0,
            1, 0, 6, 0,
            2, 0, 4, 0, 0xfe, 0xff, 0, 0,
            4, 0, 4, 0,
            8, 0, 5, 0, 100, 0, 0, 0,
            0x10, 0, 5, 0,
            0x20, 0, 0, 0,
        ];
        assert_eq!(d, want);
        assert_eq!(from_disk(&d).unwrap().unwrap(), extended());
    }

    #[test]
    fn xattr_round_trip() {
        let v = to_xattr(&extended());
        assert_eq!(v.len(), 4 + 6 * 8);
        assert_eq!(&v[..4], &[2, 0, 0, 0]);
        // Base entries carry the undefined id.
        assert_eq!(&v[4..12], &[1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(from_xattr(&v).unwrap().unwrap(), extended());
        // Ids of base entries are ignored on input, as the kernel ignores them.
        let v = xattr(2, &[(ACL_USER_OBJ, 7, 5), (ACL_GROUP_OBJ, 5, 0), (ACL_OTHER, 4, U)]);
        let acl = from_xattr(&v).unwrap().unwrap();
        assert!(acl.iter().all(|e| e.id == U));
        // Empty value or bare header: no ACL.
        assert_eq!(from_xattr(&[]).unwrap(), None);
        assert_eq!(from_xattr(&[2, 0, 0, 0]).unwrap(), None);
        // Disk -> xattr -> disk.
        let d = to_disk(&extended());
        let back = from_xattr(&to_xattr(&from_disk(&d).unwrap().unwrap())).unwrap().unwrap();
        assert_eq!(to_disk(&back), d);
    }

    #[test]
    fn bad_xattr_input() {
        // Wrong version: EOPNOTSUPP as the kernel.
        let v = xattr(1, &[(ACL_USER_OBJ, 7, U), (ACL_GROUP_OBJ, 5, U), (ACL_OTHER, 4, U)]);
        assert!(matches!(from_xattr(&v), Err(FsError::NotSupported(_))));
        // Short header, ragged entries, unknown tag, undefined id on a named entry: EINVAL.
        assert!(matches!(from_xattr(&[2, 0]), Err(FsError::Invalid(_))));
        let mut v = xattr(2, &[(ACL_USER_OBJ, 7, U)]);
        v.push(0);
        assert!(matches!(from_xattr(&v), Err(FsError::Invalid(_))));
        assert!(matches!(from_xattr(&xattr(2, &[(0x40, 7, U)])), Err(FsError::Invalid(_))));
        assert!(matches!(from_xattr(&xattr(2, &[(ACL_USER, 7, U)])), Err(FsError::Invalid(_))));
    }

    #[test]
    fn bad_disk_input() {
        let d = to_disk(&extended());
        // The user-space format is not ext4's.
        assert!(from_disk(&to_xattr(&extended())).is_err());
        assert!(from_disk(&[]).is_err());
        assert!(from_disk(&[1, 0]).is_err());
        assert!(from_disk(&d[..d.len() - 2]).is_err());
        // Cut inside the id of the named user entry.
        assert!(from_disk(&d[..14]).is_err());
        let mut t = d.clone();
        t[4] = 0x40;
        assert!(from_disk(&t).is_err());
        assert_eq!(from_disk(&[1, 0, 0, 0]).unwrap(), None);
        // Three short entries and a named one: a size ext4_acl_count refuses.
        let odd = [
            AclEntry::base(ACL_USER_OBJ, 6),
            AclEntry { tag: ACL_USER, perm: 4, id: 1 },
            AclEntry::base(ACL_GROUP_OBJ, 4),
            AclEntry::base(ACL_OTHER, 0),
        ];
        assert!(from_disk(&to_disk(&odd)).is_err());
    }

    #[test]
    fn validity() {
        assert!(validate(&extended()).is_ok());
        let base = |u, g, o| {
            vec![
                AclEntry::base(ACL_USER_OBJ, u),
                AclEntry::base(ACL_GROUP_OBJ, g),
                AclEntry::base(ACL_OTHER, o),
            ]
        };
        assert!(validate(&base(6, 4, 4)).is_ok());
        // Named entry without a mask.
        let mut a = base(6, 4, 4);
        a.insert(1, AclEntry { tag: ACL_USER, perm: 4, id: 1 });
        assert!(validate(&a).is_err());
        // Missing OTHER, doubled USER_OBJ, wrong order, bad permission bits, empty.
        assert!(validate(&base(6, 4, 4)[..2]).is_err());
        let mut a = base(6, 4, 4);
        a.insert(0, AclEntry::base(ACL_USER_OBJ, 6));
        assert!(validate(&a).is_err());
        let mut a = base(6, 4, 4);
        a.swap(1, 2);
        assert!(validate(&a).is_err());
        assert!(validate(&base(6, 8, 4)).is_err());
        assert!(validate(&[]).is_err());
        // A mask alone is allowed (and makes the ACL extended).
        let mut a = base(6, 4, 4);
        a.insert(2, AclEntry::base(ACL_MASK, 7));
        assert!(validate(&a).is_ok());
        assert_eq!(equiv_mode(&a), (0o674, false));
    }

    #[test]
    fn mode_equivalence_and_chmod() {
        let base = vec![
            AclEntry::base(ACL_USER_OBJ, 6),
            AclEntry::base(ACL_GROUP_OBJ, 4),
            AclEntry::base(ACL_OTHER, 4),
        ];
        assert_eq!(equiv_mode(&base), (0o644, true));
        // Group bits come from the mask.
        assert_eq!(equiv_mode(&extended()), (0o650, false));
        let mut a = extended();
        chmod(&mut a, 0o741).unwrap();
        assert_eq!(equiv_mode(&a), (0o741, false));
        // GROUP_OBJ keeps its own bits under a mask; named entries are untouched.
        assert_eq!(a[2].perm, 4);
        assert_eq!(a[1].perm, 4);
        let mut b = base.clone();
        chmod(&mut b, 0o750).unwrap();
        assert_eq!(equiv_mode(&b), (0o750, true));
    }
}
