//! POSIX ACLs through the library: the mode follows an access ACL, a mode-equivalent ACL is
//! not stored, an extended one is stored in ext4's format (checked byte for byte and by
//! e2fsck), chmod rewrites it, and the kernel's ext4 reads what cjfs wrote and the other way
//! round (skipped with a message without root, loop devices or the tools).

mod common;
#[path = "common/kernel.rs"]
mod kernel;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cjfs_fs::acl::{ACCESS, DEFAULT};
use cjfs_fs::mkfs::read_layout;
use cjfs_fs::ondisk::acl::{
    ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ, AclEntry, to_disk, to_xattr,
};
use cjfs_fs::ondisk::inode::Inode as RawInode;
use cjfs_fs::ondisk::xattr::{XATTR_MAGIC, parse_block, parse_ibody};
use cjfs_fs::{FsError, ROOT_INO, SetAttr, XattrFlags};
use common::{assert_fsck_clean, fresh_image, mount, open_image};

fn base(u: u16, g: u16, o: u16) -> Vec<AclEntry> {
    vec![AclEntry::base(ACL_USER_OBJ, u), AclEntry::base(ACL_GROUP_OBJ, g), AclEntry::base(ACL_OTHER, o)]
}

fn extended() -> Vec<AclEntry> {
    vec![
        AclEntry::base(ACL_USER_OBJ, 7),
        AclEntry { tag: ACL_USER, perm: 4, id: 65534 },
        AclEntry::base(ACL_GROUP_OBJ, 5),
        AclEntry { tag: ACL_GROUP, perm: 6, id: 100 },
        AclEntry::base(ACL_MASK, 6),
        AclEntry::base(ACL_OTHER, 1),
    ]
}

/// The raw stored xattrs of inode `ino` of an unmounted image, read from the device.
fn raw_xattrs(img: &Path, ino: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let dev = open_image(img);
    let (sb, descs) = read_layout(&*dev).expect("read_layout");
    let bs = sb.block_size() as u64;
    let isz = sb.inode_size() as u64;
    let g = ((ino - 1) / sb.inodes_per_group) as usize;
    let byte = descs[g].inode_table * bs + u64::from((ino - 1) % sb.inodes_per_group) * isz;
    let blk = dev.read_block(byte / bs).expect("read inode table");
    let off = (byte % bs) as usize;
    let d = RawInode::decode(&blk[off..off + isz as usize]).expect("decode inode");
    let mut out = Vec::new();
    let area = d.xattr_area();
    if area.len() >= 4 && area[..4] == XATTR_MAGIC.to_le_bytes() {
        out.extend(parse_ibody(area).unwrap());
    }
    if d.file_acl != 0 {
        out.extend(parse_block(&dev.read_block(d.file_acl).unwrap()).unwrap());
    }
    out
}

#[test]
fn acls_follow_ext4() {
    let dir = tempfile::tempdir().unwrap();
    let (img, dev) = fresh_image(dir.path(), "acl.img", 32);
    let fs = mount(dev);
    let f = fs.create(ROOT_INO, b"f", 0o600, 0, 0).unwrap().ino;
    let d = fs.mkdir(ROOT_INO, b"d", 0o700, 0, 0).unwrap().ino;

    // A minimal ACL (what `cp -p` sets) is a chmod: the mode changes, nothing is stored.
    fs.setxattr(f, ACCESS, &to_xattr(&base(6, 4, 4)), XattrFlags::Any).unwrap();
    assert_eq!(fs.getattr(f).unwrap().perm, 0o644);
    assert!(fs.listxattr(f).unwrap().is_empty());
    assert!(matches!(fs.getxattr(f, ACCESS), Err(FsError::NoAttr(_))));
    fs.setxattr(d, ACCESS, &to_xattr(&base(7, 5, 5)), XattrFlags::Create).unwrap();
    assert_eq!(fs.getattr(d).unwrap().perm, 0o755);

    // An extended ACL: mode from owner, mask and other; stored in ext4's format.
    fs.setxattr(f, ACCESS, &to_xattr(&extended()), XattrFlags::Any).unwrap();
    assert_eq!(fs.getattr(f).unwrap().perm, 0o761);
    assert_eq!(fs.getxattr(f, ACCESS).unwrap(), to_xattr(&extended()));
    assert_eq!(fs.listxattr(f).unwrap(), vec![ACCESS.to_vec()]);

    // chmod rewrites the stored ACL (owner, mask, other).
    fs.setattr(f, &SetAttr { mode: Some(0o640), ..Default::default() }).unwrap();
    let mut want = extended();
    want[0].perm = 6;
    want[4].perm = 4;
    want[5].perm = 0;
    assert_eq!(fs.getxattr(f, ACCESS).unwrap(), to_xattr(&want));

    // Invalid ACLs are refused and change nothing.
    let mut no_mask = extended();
    no_mask.remove(4);
    let e = fs.setxattr(f, ACCESS, &to_xattr(&no_mask), XattrFlags::Any).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    let e = fs.setxattr(f, ACCESS, &to_disk(&extended()), XattrFlags::Any).unwrap_err();
    assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e}");
    assert_eq!(fs.getattr(f).unwrap().perm, 0o640);

    // Default ACLs: directories only.
    let e = fs.setxattr(f, DEFAULT, &to_xattr(&extended()), XattrFlags::Any).unwrap_err();
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    fs.setxattr(d, DEFAULT, &to_xattr(&extended()), XattrFlags::Any).unwrap();
    assert_eq!(fs.getattr(d).unwrap().perm, 0o755);
    assert_eq!(fs.getxattr(d, DEFAULT).unwrap(), to_xattr(&extended()));
    // One for the kernel to find below.
    let k = fs.create(ROOT_INO, b"k", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(k, ACCESS, &to_xattr(&extended()), XattrFlags::Any).unwrap();

    // Removing the access ACL leaves the mode; removing a missing one is no error.
    fs.removexattr(f, ACCESS).unwrap();
    assert_eq!(fs.getattr(f).unwrap().perm, 0o640);
    assert!(fs.listxattr(f).unwrap().is_empty());
    fs.removexattr(f, ACCESS).unwrap();
    fs.create(ROOT_INO, b"kw", 0o644, 0, 0).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
    // What is on disk: nothing for f, ext4's format for k and d's default ACL.
    assert!(raw_xattrs(&img, f).is_empty());
    assert_eq!(raw_xattrs(&img, k), vec![(ACCESS.to_vec(), to_disk(&extended()))]);
    assert_eq!(raw_xattrs(&img, d), vec![(DEFAULT.to_vec(), to_disk(&extended()))]);

    kernel_view(&img);
}

/// The kernel's ext4 sees the ACLs cjfs wrote, and cjfs reads ACLs the kernel wrote.
fn kernel_view(img: &Path) {
    if let Err(why) = kernel::need_tools(&["getfacl", "setfacl"]).and_then(|()| kernel::kernel_env()) {
        println!("SKIP: kernel comparison: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    {
        let lo = kernel::LoopDev::attach(img, false).unwrap();
        let mut m = kernel::KMount::mount(&lo, &mnt, "").unwrap();
        let getfacl = |p: &str| {
            let o = kernel::run("getfacl", [OsStr::new("-n"), mnt.join(p).as_os_str()]);
            assert_eq!(o.code, 0, "getfacl {p}: {}", o.text());
            o.stdout
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n")
                .trim_end()
                .to_string()
        };
        assert_eq!(
            getfacl("k"),
            "user::rwx\nuser:65534:r--\ngroup::r-x\t#effective:r--\ngroup:100:rw-\nmask::rw-\nother::--x\n"
                .trim_end()
        );
        assert_eq!(std::fs::metadata(mnt.join("k")).unwrap().permissions().mode() & 0o7777, 0o761);
        assert_eq!(getfacl("f"), "user::rw-\ngroup::r--\nother::---");
        assert!(getfacl("d").contains("default:group:100:rw-\ndefault:mask::rw-"), "{}", getfacl("d"));
        assert_eq!(std::fs::metadata(mnt.join("d")).unwrap().permissions().mode() & 0o7777, 0o755);
        // The kernel writes one for cjfs to read.
        let o =
            kernel::run("setfacl", [OsStr::new("-m"), OsStr::new("u:7:r,g:8:w"), mnt.join("kw").as_os_str()]);
        assert_eq!(o.code, 0, "setfacl: {}", o.text());
        m.umount();
    }
    kernel::assert_fsck_clean(img, "the image after the kernel's setfacl");
    let fs = mount(open_image(img));
    let kw = fs.lookup(ROOT_INO, b"kw").unwrap().ino;
    let want = vec![
        AclEntry::base(ACL_USER_OBJ, 6),
        AclEntry { tag: ACL_USER, perm: 4, id: 7 },
        AclEntry::base(ACL_GROUP_OBJ, 4),
        AclEntry { tag: ACL_GROUP, perm: 2, id: 8 },
        AclEntry::base(ACL_MASK, 6),
        AclEntry::base(ACL_OTHER, 4),
    ];
    assert_eq!(fs.getxattr(kw, ACCESS).unwrap(), to_xattr(&want));
    assert_eq!(fs.getattr(kw).unwrap().perm, 0o664);
    fs.unmount().unwrap();
}

/// A new file or directory in a directory with a default ACL inherits it as ext4 does
/// (`posix_acl_create`): the access ACL is the default masked by the create mode, the umask
/// is ignored, a directory also takes the default ACL, a mode-equivalent result is not
/// stored, symbolic links get nothing; without a default ACL the umask applies. Then the
/// kernel's ext4, creating the same names with the same umask, must store the same.
#[test]
fn default_acls_are_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let (img, dev) = fresh_image(dir.path(), "inherit.img", 32);
    let fs = mount(dev);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.setxattr(d, DEFAULT, &to_xattr(&extended()), XattrFlags::Any).unwrap();
    let e = fs.mkdir(ROOT_INO, b"e", 0o755, 0, 0).unwrap().ino;
    fs.setxattr(e, DEFAULT, &to_xattr(&base(7, 5, 0)), XattrFlags::Any).unwrap();

    // 0666 with umask 022: the default's mask (rw) gives the group bits, not the umask.
    let f = fs.create_umask(d, b"f", 0o666, 0o022, 0, 0).unwrap();
    assert_eq!(f.perm, 0o660);
    let mut want_f = extended();
    want_f[0].perm = 6; // owner: rwx & rw-
    want_f[5].perm = 0; // other: --x & rw-
    assert_eq!(fs.getxattr(f.ino, ACCESS).unwrap(), to_xattr(&want_f));
    assert!(matches!(fs.getxattr(f.ino, DEFAULT), Err(FsError::NoAttr(_))));

    // A directory: access ACL from the default and the default itself; umask 077 ignored.
    let sub = fs.mkdir_umask(d, b"sub", 0o777, 0o077, 0, 0).unwrap();
    assert_eq!(sub.perm, 0o761);
    assert_eq!(fs.getxattr(sub.ino, ACCESS).unwrap(), to_xattr(&extended()));
    assert_eq!(fs.getxattr(sub.ino, DEFAULT).unwrap(), to_xattr(&extended()));
    // ... which its own new files inherit in turn.
    let g = fs.create_umask(sub.ino, b"g", 0o640, 0o777, 0, 0).unwrap();
    assert_eq!(g.perm, 0o640);

    // Three base entries: the mode says it all, nothing is stored.
    let b = fs.create_umask(e, b"b", 0o666, 0o022, 0, 0).unwrap();
    assert_eq!(b.perm, 0o640);
    assert!(fs.listxattr(b.ino).unwrap().is_empty());
    // No default ACL: the umask applies.
    let r = fs.create_umask(ROOT_INO, b"r", 0o666, 0o027, 0, 0).unwrap();
    assert_eq!(r.perm, 0o640);
    assert!(fs.listxattr(r.ino).unwrap().is_empty());
    // ACLs too large for the inode go to an xattr block, made in the same transaction.
    let mut big = vec![AclEntry::base(ACL_USER_OBJ, 7)];
    big.extend((0..40).map(|i| AclEntry { tag: ACL_USER, perm: 5, id: 2000 + i }));
    big.extend([AclEntry::base(ACL_GROUP_OBJ, 5), AclEntry::base(ACL_MASK, 7), AclEntry::base(ACL_OTHER, 0)]);
    let bigd = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).unwrap().ino;
    fs.setxattr(bigd, DEFAULT, &to_xattr(&big), XattrFlags::Any).unwrap();
    let bd = fs.mkdir_umask(bigd, b"bd", 0o750, 0o022, 0, 0).unwrap();
    assert_eq!(bd.perm, 0o750);
    assert_eq!(fs.getxattr(bd.ino, DEFAULT).unwrap(), to_xattr(&big));
    let bf = fs.create_umask(bd.ino, b"bf", 0o600, 0, 0, 0).unwrap();
    assert_eq!(fs.getxattr(bf.ino, ACCESS).unwrap().len(), 4 + 8 * big.len());
    // Symbolic links take nothing.
    let l = fs.symlink(d, b"l", b"f", 0, 0).unwrap();
    assert_eq!(l.perm, 0o777);
    assert!(fs.listxattr(l.ino).unwrap().is_empty());
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
    assert_eq!(raw_xattrs(&img, f.ino), vec![(ACCESS.to_vec(), to_disk(&want_f))]);
    assert_eq!(raw_xattrs(&img, bd.ino).len(), 2, "both ACLs of the big directory on disk");

    if let Err(why) = kernel::need_tools(&["getfacl"]).and_then(|()| kernel::kernel_env()) {
        println!("SKIP: default_acls_are_inherited kernel comparison: {why}");
        return;
    }
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let lo = kernel::LoopDev::attach(&img, false).unwrap();
    let mut m = kernel::KMount::mount(&lo, &mnt, "").unwrap();
    let sh = |cmd: &str| {
        let o = kernel::run("sh", [OsStr::new("-c"), OsStr::new(cmd)]);
        assert_eq!(o.code, 0, "{cmd}: {}", o.text());
        o.stdout
    };
    let m_str = mnt.display();
    sh(&format!(
        "cd {m_str} && umask 022 && touch d/kf e/kb && umask 077 && mkdir d/ksub && umask 027 && touch kr"
    ));
    for (ours, theirs) in [("d/f", "d/kf"), ("d/sub", "d/ksub"), ("e/b", "e/kb"), ("r", "kr")] {
        let show = |p: &str| sh(&format!("cd {m_str} && stat -c %a {p} && getfacl -n -p {p} | grep -v '^#'"));
        assert_eq!(show(ours), show(theirs), "{ours} (cjfs) against {theirs} (the kernel's ext4)");
    }
    m.umount();
}
