//! A full file system: writes allocate their blocks when they are made, so the write that
//! does not fit is the one told ENOSPC (or cut short), the size covers exactly what was
//! accepted, and an accepted write never fails later (fsync, commit, unmount).

mod common;

use std::sync::Arc;

use cjfs_fs::{FallocMode, Fs, FsError, ROOT_INO, SetAttr};
use common::*;

/// Byte `i` of file `seed`'s content.
fn byte(seed: u64, i: u64) -> u8 {
    (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(131)) % 251) as u8
}

fn chunk(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| byte(seed, off + i)).collect()
}

/// Write `len`-byte chunks to `ino` until the file system refuses one. Returns the bytes
/// accepted; checks that the refusal is ENOSPC and that a short count came only once, last.
fn fill(fs: &Fs, ino: cjfs_fs::Ino, seed: u64, len: usize) -> u64 {
    let mut off = 0u64;
    loop {
        match fs.write(ino, off, &chunk(seed, off, len)) {
            Ok(n) => {
                assert!(n > 0, "a write of {len} bytes accepted nothing without an error");
                off += n as u64;
                if n < len {
                    // Short: the next write finds no room at all.
                    let e =
                        fs.write(ino, off, &chunk(seed, off, len)).expect_err("write after a short write");
                    assert!(matches!(e, FsError::NoSpace(_)), "{e}");
                    return off;
                }
            }
            Err(FsError::NoSpace(_)) => return off,
            Err(e) => panic!("write at {off}: {e}"),
        }
        assert!(off < 1 << 30, "the file system never filled up");
    }
}

fn check_content(fs: &Fs, ino: cjfs_fs::Ino, seed: u64, len: u64) {
    let got = read_all(fs, ino);
    assert_eq!(got.len() as u64, len, "size of file {seed}");
    assert!(got == chunk(seed, 0, len as usize), "content of file {seed} differs from what was accepted");
}

#[test]
fn writes_past_free_space_fail_at_write_and_accepted_data_is_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "full.img", 32);
    let fs = mount(dev);
    let free0 = fs.statfs().bfree;
    let bs = u64::from(fs.statfs().bsize);
    let f = fs.create(ROOT_INO, b"fill", 0o644, 0, 0).expect("create");
    // 1 MiB writes, as in the report this guards against (40 x 1 MiB on a 32 MiB image).
    let accepted = fill(&fs, f.ino, 1, 1 << 20);
    assert!(accepted > 16 << 20 && accepted < 32 << 20, "accepted {accepted}");
    assert_eq!(fs.getattr(f.ino).expect("getattr").size, accepted, "size covers only accepted bytes");
    fs.fsync(f.ino, false).expect("fsync of accepted data");
    // Almost nothing is left beside the metadata reserve (a few blocks at most: the last
    // write may have stopped for want of an extent-tree block).
    let reserve = fs.geometry().metadata_reserve;
    assert!(
        reserve > 0 && fs.statfs().bfree < reserve + 8,
        "free blocks after filling: {}",
        fs.statfs().bfree
    );
    // Another file gets nothing; a small overwrite inside the file still works.
    let g = fs.create(ROOT_INO, b"more", 0o644, 0, 0).expect("create a second file");
    match fs.write(g.ino, 0, &vec![1u8; 64 << 10]) {
        Err(FsError::NoSpace(_)) => {}
        Ok(n) => assert!((n as u64) < 8 * bs, "{n} bytes written with nothing free"),
        Err(e) => panic!("{e}"),
    }
    assert_eq!(fs.write(f.ino, 4096, &chunk(1, 4096, 100)).expect("overwrite"), 100);
    fs.unlink(ROOT_INO, b"more").expect("unlink");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);

    // Every accepted byte is there after a remount; deleting the file gives the space back.
    let fs = mount(open_image(&path));
    let f = fs.lookup(ROOT_INO, b"fill").expect("lookup");
    check_content(&fs, f.ino, 1, accepted);
    fs.unlink(ROOT_INO, b"fill").expect("unlink");
    fs.sync().expect("sync");
    assert_eq!(fs.statfs().bfree, free0, "free blocks after deleting the file");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

/// A refused write past EOF leaves the size alone: a page cache writing back in order
/// (FUSE's writeback cache) sends every later chunk after the first refusal, and each used
/// to move the size to its own offset, leaving a hole of zeros the writer never wrote.
#[test]
fn a_write_refused_past_eof_does_not_move_the_size() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "eof.img", 16);
    let fs = mount(dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    let accepted = fill(&fs, f.ino, 3, 1 << 20);
    let (size0, blocks0) = {
        let a = fs.getattr(f.ino).expect("getattr");
        (a.size, a.blocks)
    };
    assert_eq!(size0, accepted);
    for k in 1..4u64 {
        let off = accepted + k * (1 << 20);
        let e = fs.write(f.ino, off, &chunk(3, off, 1 << 20)).expect_err("a write with nothing free");
        assert!(matches!(e, FsError::NoSpace(_)), "{e}");
        let a = fs.getattr(f.ino).expect("getattr");
        assert_eq!((a.size, a.blocks), (size0, blocks0), "after a refused write at {off}");
    }
    fs.fsync(f.ino, false).expect("fsync");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = mount(open_image(&path));
    let f = fs.lookup(ROOT_INO, b"f").expect("lookup");
    check_content(&fs, f.ino, 3, accepted);
    fs.unmount().expect("unmount");
}

#[test]
fn small_writes_fill_to_the_reserve_and_truncate_gives_it_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "small.img", 16);
    let fs = mount(dev);
    let free0 = fs.statfs().bfree;
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    // Unaligned writes: each straddles blocks.
    let accepted = fill(&fs, f.ino, 7, 3000);
    assert_eq!(fs.getattr(f.ino).expect("getattr").size, accepted);
    fs.fsync(f.ino, true).expect("fdatasync");
    // Truncating half the file (never committed before) frees its blocks for new writes.
    let half = accepted / 2;
    fs.setattr(f.ino, &SetAttr { size: Some(half), ..Default::default() }).expect("truncate");
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).expect("create");
    let second = fill(&fs, g.ino, 8, 1 << 16);
    assert!(second + half + (64 << 10) >= accepted, "truncate freed too little: {second} after {half}");
    // A hole punched in the second file makes room again; fallocate'd blocks need none.
    fs.fallocate(g.ino, FallocMode::PunchHole, 0, 1 << 20).expect("punch");
    fs.fallocate(g.ino, FallocMode::KeepSize, second, 256 << 10).expect("fallocate");
    let h = fs.create(ROOT_INO, b"h", 0o644, 0, 0).expect("create");
    let third = fill(&fs, h.ino, 9, 1 << 16);
    assert!(third > 0);
    assert_eq!(
        fs.write(g.ino, second, &chunk(8, second, 256 << 10)).expect("write into fallocated"),
        256 << 10
    );
    for ino in [f.ino, g.ino, h.ino] {
        fs.fsync(ino, false).expect("fsync");
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = mount(open_image(&path));
    let f = fs.lookup(ROOT_INO, b"f").expect("lookup");
    check_content(&fs, f.ino, 7, half);
    let h = fs.lookup(ROOT_INO, b"h").expect("lookup");
    check_content(&fs, h.ino, 9, third);
    for n in [&b"f"[..], b"g", b"h"] {
        fs.unlink(ROOT_INO, n).expect("unlink");
    }
    fs.sync().expect("sync");
    assert_eq!(fs.statfs().bfree, free0);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

/// The reserves ext4 keeps (`ext4_has_free_clusters`): a caller other than root stops at
/// the root reserve plus the metadata reserve, and gets ENOSPC naming them; root goes on
/// to the metadata reserve; `statfs`'s available count is what the other caller could take.
#[test]
fn the_root_reserve_is_kept_from_other_users() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "resv.img", 32);
    let fs = mount(dev);
    let geo = fs.geometry().clone();
    assert!(geo.reserved_blocks > 0 && geo.metadata_reserve > 0, "{geo:?}");
    let bs = u64::from(fs.statfs().bsize);
    let avail0 = fs.statfs().bavail;
    let f = fs.create(ROOT_INO, b"user", 0o644, 1000, 1000).expect("create");
    let user = {
        let _caller = cjfs_fs::act_as(1000, 1000);
        let n = fill(&fs, f.ino, 21, 1 << 20);
        let e = fs.write(f.ino, n, &chunk(21, n, 4096)).expect_err("past the reserve");
        assert!(e.to_string().contains("reserved for root"), "{e}");
        n
    };
    let s = fs.statfs();
    assert!(s.bfree >= geo.reserved_blocks + geo.metadata_reserve, "the user took reserved blocks: {s:?}");
    assert!(s.bavail < 8 && user.div_ceil(bs) + 8 >= avail0, "user stopped early: {user} bytes, {s:?}");
    // Root (and a caller that set none, the library's default) takes the root reserve.
    let r = fs.create(ROOT_INO, b"root", 0o644, 0, 0).expect("create");
    let root = {
        let _caller = cjfs_fs::act_as(0, 0);
        fill(&fs, r.ino, 22, 1 << 20)
    };
    assert!(root.div_ceil(bs) + 8 >= geo.reserved_blocks, "root got only {root} bytes");
    assert!(fs.statfs().bfree < geo.metadata_reserve + 8, "{:?}", fs.statfs());
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = mount(open_image(&path));
    check_content(&fs, fs.lookup(ROOT_INO, b"user").expect("lookup").ino, 21, user);
    check_content(&fs, fs.lookup(ROOT_INO, b"root").expect("lookup").ino, 22, root);
    fs.unmount().expect("unmount");
}

/// A truncation to the file's own size drops blocks fallocated past it (ext4 truncates
/// whenever the size does not grow); growing the size keeps them.
#[test]
fn truncating_to_the_same_size_frees_blocks_past_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "keep.img", 32);
    let fs = mount(dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    fs.write(f.ino, 0, &chunk(5, 0, 100)).expect("write");
    let free0 = fs.statfs().bfree;
    let blocks0 = fs.getattr(f.ino).expect("getattr").blocks;
    fs.fallocate(f.ino, FallocMode::KeepSize, 0, 8 << 20).expect("fallocate");
    let size = |s: u64| SetAttr { size: Some(s), ..Default::default() };
    fs.setattr(f.ino, &size(200)).expect("grow");
    let a = fs.getattr(f.ino).expect("getattr");
    assert!(a.blocks >= (8 << 20) / 512, "growing the size dropped the preallocation: {a:?}");
    fs.setattr(f.ino, &size(200)).expect("truncate to the same size");
    let a = fs.getattr(f.ino).expect("getattr");
    assert_eq!((a.size, a.blocks), (200, blocks0), "blocks past the size are gone");
    fs.sync().expect("sync");
    assert_eq!(fs.statfs().bfree, free0, "their space is free again");
    let mut expect = chunk(5, 0, 100);
    expect.resize(200, 0);
    assert!(read_all(&fs, f.ino) == expect);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

#[test]
fn concurrent_writers_near_full_never_overcommit() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "conc.img", 32);
    let fs = mount(dev);
    let free0 = fs.statfs().bfree;
    let bs = u64::from(fs.statfs().bsize);
    let fs = Arc::new(fs);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let f = fs.create(ROOT_INO, format!("w{t}").as_bytes(), 0o644, 0, 0).expect("create");
                let n = fill(&fs, f.ino, 100 + t, 48 << 10);
                // Every accepted write is durable without ENOSPC.
                fs.fsync(f.ino, false).expect("fsync after ENOSPC");
                (f.ino, n)
            })
        })
        .collect();
    let got: Vec<_> = threads.into_iter().map(|h| h.join().expect("writer")).collect();
    let total: u64 = got.iter().map(|g| g.1).sum();
    assert!(total.div_ceil(bs) <= free0, "accepted {total} bytes, only {free0} blocks were free");
    assert!(total > 20 << 20, "accepted only {total} bytes of {free0} free blocks");
    for (ino, n) in &got {
        assert_eq!(fs.getattr(*ino).expect("getattr").size, *n);
    }
    let fs = Arc::into_inner(fs).expect("threads done");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = mount(open_image(&path));
    for (t, (_, n)) in got.iter().enumerate() {
        let f = fs.lookup(ROOT_INO, format!("w{t}").as_bytes()).expect("lookup");
        check_content(&fs, f.ino, 100 + t as u64, *n);
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

/// On a full file system a refused change changes nothing: a setxattr whose new value needs
/// an xattr block keeps the old value (in memory and, after a later change of the inode,
/// on disk), a zero range over written data that needs a block for a hole leaves every byte
/// as it was, and a refused flag still says EEXIST or ENODATA before ENOSPC, as ext4.
#[test]
fn refused_setxattr_and_zero_range_change_nothing() {
    use cjfs_fs::XattrFlags;
    let dir = tempfile::tempdir().expect("tmp");
    let (path, dev) = fresh_image(dir.path(), "refused.img", 32);
    let fs = mount(dev);
    let bs = u64::from(fs.statfs().bsize);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
    let data = chunk(7, 0, 3 * bs as usize);
    fs.write(f.ino, 0, &data).expect("write");
    fs.setxattr(f.ino, b"user.a", &[b'x'; 25], XattrFlags::Any).expect("setxattr");
    let filler = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).expect("create");
    fill(&fs, filler.ino, 2, 1 << 16);
    fill(&fs, filler.ino, 2, bs as usize);
    let big = vec![b'y'; 3 * bs as usize / 4];
    match fs.setxattr(f.ino, b"user.a", &big, XattrFlags::Any) {
        Err(FsError::NoSpace(_)) => {}
        other => panic!("setxattr on a full file system: {other:?}"),
    }
    assert_eq!(fs.getxattr(f.ino, b"user.a").expect("old value kept"), vec![b'x'; 25]);
    fs.setattr(f.ino, &SetAttr { mode: Some(0o600), ..SetAttr::default() }).expect("chmod");
    match fs.setxattr(f.ino, b"user.missing", &big, XattrFlags::Replace) {
        Err(FsError::NoAttr(_)) => {}
        other => panic!("replace of a missing name: {other:?}"),
    }
    match fs.setxattr(f.ino, b"user.a", &vec![b'z'; bs as usize], XattrFlags::Create) {
        Err(FsError::Exists(_)) => {}
        other => panic!("create of an existing name: {other:?}"),
    }
    // A zero range reaching into a hole past the data: the hole needs blocks there are none of.
    let r = fs.fallocate(f.ino, FallocMode::ZeroRange { keep_size: true }, 100, 40 * bs);
    assert!(matches!(r, Err(FsError::NoSpace(_))), "zero range on a full file system: {r:?}");
    assert!(read_all(&fs, f.ino) == data, "a refused zero range changed the data");
    // With room, the same range reads as zeros and the file keeps its blocks.
    fs.unlink(ROOT_INO, b"filler").expect("unlink");
    fs.fsync(ROOT_INO, false).expect("commit the free");
    fs.fallocate(f.ino, FallocMode::ZeroRange { keep_size: true }, 100, 40 * bs).expect("zero range");
    let got = read_all(&fs, f.ino);
    assert!(got[..100] == data[..100] && got[100..].iter().all(|&b| b == 0), "zero range");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = mount(open_image(&path));
    assert_eq!(fs.getxattr(f.ino, b"user.a").expect("on disk"), vec![b'x'; 25]);
    let got = read_all(&fs, f.ino);
    assert!(got[..100] == data[..100] && got[100..].iter().all(|&b| b == 0), "zero range after remount");
    fs.unmount().expect("unmount");
}
