//! Access times moved by an access ([`Fs::touch_atime`], what the FUSE daemon calls for the
//! reads and listings that reach it): the kernel's relatime rule, strictatime, noatime, the
//! no-atime and immutable flags, a read-only mount, and ctime never moved.

mod common;

use cjfs_fs::ondisk::inode::{EXT4_IMMUTABLE_FL, EXT4_NOATIME_FL};
use cjfs_fs::{AtimeUpdate, Fs, MountOptions, ROOT_INO, SetAttr, Timestamp};
use common::*;

const DAY: i64 = 24 * 60 * 60;

/// Set atime and mtime of `ino` (ctime becomes now, as for utimensat).
fn set_times(fs: &Fs, ino: cjfs_fs::Ino, atime: Timestamp, mtime: Timestamp) {
    fs.setattr(ino, &SetAttr { atime: Some(atime), mtime: Some(mtime), ..Default::default() })
        .expect("utimes");
}

#[test]
fn relatime_strictatime_noatime_and_the_flags() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "a.img", 64);
    let fs = mount(dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
    fs.write(f, 0, b"data").expect("write");
    let now = Timestamp::now();
    let ago = |secs: i64| Timestamp::new(now.sec - secs, 0);

    // relatime: an access time not after the modification moves (ctime was set now by the
    // utimes, so it is after the access time too) ...
    set_times(&fs, f, ago(100), ago(50));
    let ctime = fs.getattr(f).expect("getattr").ctime;
    assert!(fs.touch_atime(f, AtimeUpdate::Relative).expect("touch"));
    let a = fs.getattr(f).expect("getattr");
    assert!(a.atime >= now, "atime moved to now: {:?}", a.atime);
    assert_eq!(a.ctime, ctime, "an access does not change ctime");
    // ... once: then it is after both, and stays.
    assert!(!fs.touch_atime(f, AtimeUpdate::Relative).expect("touch"));
    // An access time newer than mtime and ctime but a day old moves again.
    set_times(&fs, f, ago(DAY + 60), ago(2 * DAY));
    fs.setattr(f, &SetAttr { ctime: Some(ago(2 * DAY)), ..Default::default() }).expect("ctime");
    assert!(fs.touch_atime(f, AtimeUpdate::Relative).expect("touch"), "a day old");
    // Newer than both and fresh: relatime leaves it, strictatime moves it, noatime never.
    set_times(&fs, f, ago(10), ago(2 * DAY));
    fs.setattr(f, &SetAttr { ctime: Some(ago(2 * DAY)), ..Default::default() }).expect("ctime");
    assert!(!fs.touch_atime(f, AtimeUpdate::Relative).expect("touch"));
    assert!(!fs.touch_atime(f, AtimeUpdate::Never).expect("touch"));
    assert!(fs.touch_atime(f, AtimeUpdate::Always).expect("touch"));
    // chattr +A and +i: never.
    set_times(&fs, f, ago(100), ago(50));
    fs.set_flags(f, EXT4_NOATIME_FL, EXT4_NOATIME_FL).expect("chattr +A");
    assert!(!fs.touch_atime(f, AtimeUpdate::Always).expect("touch"));
    fs.set_flags(f, EXT4_NOATIME_FL | EXT4_IMMUTABLE_FL, EXT4_IMMUTABLE_FL).expect("chattr -A +i");
    assert!(!fs.touch_atime(f, AtimeUpdate::Always).expect("touch"));
    fs.set_flags(f, EXT4_IMMUTABLE_FL, 0).expect("chattr -i");
    // Directories follow the same rule.
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir").ino;
    set_times(&fs, d, ago(100), ago(50));
    assert!(fs.touch_atime(d, AtimeUpdate::Relative).expect("touch dir"));
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);

    // A read-only mount changes nothing, whatever the rule.
    let ro =
        Fs::open(open_image(&path), MountOptions { read_only: true, ..MountOptions::default() }).expect("ro");
    let f = ro.resolve("/f").expect("resolve");
    let before = ro.getattr(f).expect("getattr").atime;
    assert!(!ro.touch_atime(f, AtimeUpdate::Always).expect("touch"));
    assert_eq!(ro.getattr(f).expect("getattr").atime, before);
    ro.unmount().expect("unmount");
}
