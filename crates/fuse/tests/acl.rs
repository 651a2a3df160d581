//! POSIX ACLs through a real mount: `cp -a` / `cp -p` keep modes (they set them as minimal
//! ACLs), `setfacl` / `getfacl` round trip, chmod rewrites the ACL, the new mode shows at once
//! (no stale attribute cache), and the image stays clean. Skipped with a message when
//! `/dev/fuse`, root or the tools are missing.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::*;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

/// `getfacl -n` without its comment lines.
fn getfacl(dir: &Path, rel: &str) -> String {
    sh(dir, &format!("getfacl -n {rel}"))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

#[test]
fn cp_and_setfacl_keep_modes_and_acls() {
    if skip("cp_and_setfacl_keep_modes_and_acls", &["getfacl", "setfacl", "cp"]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let src = s.dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    std::fs::set_permissions(src.join("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::create_dir(src.join("d")).unwrap();
    std::fs::set_permissions(src.join("d"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let m = s.mount("");
    let mnt = &s.mnt;

    // cp creates with 0600 / 0700 and sets the source's mode as an ACL.
    sh(
        s.dir.path(),
        &format!("cp -a src/f {0}/fa && cp -p src/f {0}/fp && cp -a src/d {0}/da", mnt.display()),
    );
    assert_eq!(mode(&s.p("fa")), 0o644);
    assert_eq!(mode(&s.p("fp")), 0o644);
    assert_eq!(mode(&s.p("da")), 0o755);
    // A mode-equivalent ACL is not stored.
    assert_eq!(getfacl(mnt, "fa"), "user::rw-\ngroup::r--\nother::r--");

    // An extended ACL round trips, and its mask shows in the mode at once.
    sh(mnt, "setfacl -m u:nobody:rwx fa");
    assert_eq!(mode(&s.p("fa")), 0o674);
    assert_eq!(getfacl(mnt, "fa"), "user::rw-\nuser:65534:rwx\ngroup::r--\nmask::rwx\nother::r--");
    // chmod rewrites the mask.
    sh(mnt, "chmod 640 fa");
    assert_eq!(
        getfacl(mnt, "fa"),
        "user::rw-\nuser:65534:rwx\t#effective:r--\ngroup::r--\nmask::r--\nother::---"
    );
    // A copy of a file with an extended ACL carries it.
    sh(mnt, "cp -a fa fb");
    assert_eq!(getfacl(mnt, "fb"), getfacl(mnt, "fa"));
    assert_eq!(mode(&s.p("fb")), 0o640);
    // Default ACLs on a directory; refused on a file.
    sh(mnt, "setfacl -d -m g:100:rx da");
    assert!(getfacl(mnt, "da").contains("default:group:100:r-x"), "{}", getfacl(mnt, "da"));
    let o =
        std::process::Command::new("setfacl").args(["-d", "-m", "u:1:r"]).arg(s.p("fp")).output().unwrap();
    assert!(!o.status.success(), "a default ACL on a file was accepted");
    // Removing the ACL keeps the mode.
    sh(mnt, "setfacl -b fa");
    assert_eq!(getfacl(mnt, "fa"), "user::rw-\ngroup::r--\nother::---");
    assert_eq!(mode(&s.p("fa")), 0o640);

    m.unmount();
    e2fsck_clean(&s.image);
    // After a remount the same, from disk.
    let m = s.mount("");
    assert_eq!(mode(&s.p("fb")), 0o640);
    assert_eq!(
        getfacl(mnt, "fb"),
        "user::rw-\nuser:65534:rwx\t#effective:r--\ngroup::r--\nmask::r--\nother::---"
    );
    assert_eq!(mode(&s.p("da")), 0o755);
    m.unmount();
}

/// A write (or a truncating open) by another user clears set-user-ID and set-group-ID, and
/// the mount shows the new mode at once, not after the attribute timeout.
#[test]
fn set_id_bits_cleared_by_another_users_write_show_at_once() {
    if skip("set_id_bits_cleared_by_another_users_write_show_at_once", &["setpriv", "stat"]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount("allow_other");
    // The scratch directory may be private: the other user works inside the mount.
    std::fs::set_permissions(&s.mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
    for (name, how) in [("w", ">>"), ("t", ">")] {
        let out = sh(
            &s.mnt,
            &format!(
                "printf '#!/bin/sh\\n' > {name} && chmod 6777 {name} && stat -c %a {name} && \\
                 setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'echo y {how} {name}' && stat -c %a {name}"
            ),
        );
        assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["6777", "777"], "{name}: {out}");
    }
    // Set-group-ID without group execute goes too when the writer is not in the file's
    // group (the kernel's `setattr_should_drop_sgid`), and stays for a member.
    for (name, gid, want) in [("g", 0, "2666"), ("n", 65534, "666")] {
        let out = sh(
            &s.mnt,
            &format!(
                "printf x > {name} && chmod 2666 {name} && \
                 setpriv --reuid=65534 --regid={gid} --clear-groups sh -c 'echo y >> {name}' && stat -c %a {name}"
            ),
        );
        assert_eq!(out.trim(), want, "{name}: writer gid {gid}, file gid 0: {out}");
    }
    m.unmount();
}

/// Through the mount a directory's default ACL is inherited by what is made in it and the
/// umask is ignored there (the kernel passes it with FUSE_DONT_MASK), exactly as on the
/// host's own file system doing the same steps beside it; and the kernel enforces an ACL
/// entry the mode alone would refuse (FUSE_POSIX_ACL).
#[test]
fn default_acls_are_inherited_and_acls_enforced() {
    if skip("default_acls_are_inherited_and_acls_enforced", &["getfacl", "setfacl", "setpriv", "stat"]) {
        return;
    }
    let s = Scratch::new(64 << 20);
    let m = s.mount("allow_other");
    let mnt = &s.mnt;
    let steps = "mkdir -m 755 d && setfacl -d -m u:65534:rwx,g::r-x,g:100:rw,o::--x d && \
                 umask 022 && touch d/f && umask 077 && mkdir d/sub && touch d/sub/g && \
                 umask 027 && touch r && ln -s f d/l";
    let show = |dir: &Path| {
        sh(dir, "for p in d/f d/sub d/sub/g r; do stat -c '%n %a' $p; getfacl -n -p $p | grep -v '^#'; done")
    };
    sh(mnt, steps);
    // 0666 & the default's entries: owner rw, mask rw (the umask's 022 ignored), other none.
    assert_eq!(mode(&s.p("d/f")), 0o660);
    assert_eq!(
        getfacl(mnt, "d/f"),
        "user::rw-\nuser:65534:rwx\t#effective:rw-\ngroup::r-x\t#effective:r--\ngroup:100:rw-\nmask::rw-\nother::---"
    );
    assert_eq!(mode(&s.p("d/sub")), 0o771, "umask 077 ignored under a default ACL");
    assert!(getfacl(mnt, "d/sub").contains("default:user:65534:rwx"), "{}", getfacl(mnt, "d/sub"));
    assert_eq!(mode(&s.p("r")), 0o640, "no default ACL: the umask applies");

    // The same steps on the host's file system, where it keeps POSIX ACLs.
    let host = s.dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let ok = std::process::Command::new("sh").arg("-c").arg(steps).current_dir(&host).status().unwrap();
    if ok.success() {
        assert_eq!(show(mnt), show(&host), "cjfs through FUSE against the host's file system");
    } else {
        println!(
            "note: the host's file system in {} keeps no default ACLs; comparison skipped",
            host.display()
        );
    }

    // Enforcement: 0600 root's file, readable by user 65534 through an ACL entry only.
    std::fs::set_permissions(mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    sh(mnt, "echo secret > p && chmod 600 p && setfacl -m u:65534:r,m::r p");
    // From inside the mount: the scratch directory above it may be private.
    let read_as_nobody = || {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat", "p"])
            .current_dir(mnt)
            .output()
            .unwrap()
    };
    let o = read_as_nobody();
    assert!(o.status.success(), "the ACL entry was not honoured: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, b"secret\n");
    sh(mnt, "setfacl -x u:65534 p");
    assert!(!read_as_nobody().status.success(), "read allowed after the ACL entry was removed");
    m.unmount();
    e2fsck_clean(&s.image);
}
