//! htree directories stay indexed through cjfs's changes, checked from outside:
//!
//! - cjfs builds a 50,000-entry directory and removes 10,000 at random: `e2fsck -fn` is
//!   clean and mentions no htree problem, `e2fsck -fy` on a copy finds nothing to fix or
//!   optimise (no "Pass 3A: Optimizing directories", which it runs for a directory of 3 or
//!   more blocks left unindexed), `debugfs htree` dumps the index, and the kernel lists
//!   exactly the 40,000 names and finds each by lookup;
//! - directories the kernel indexed on `mkfs.ext4` images (with and without
//!   `metadata_csum`), changed by cjfs (creates, removes, renames; a small directory grows
//!   into an indexed one): same checks;
//! - a 3-level htree on a `large_dir` image (made from an e2fsck-indexed directory by
//!   moving the root's entries under a new interior node, in a block freed for it): e2fsck
//!   accepts it, cjfs reads it and inserts through both interior levels, e2fsck and the
//!   kernel accept the result.
//!
//! Tests needing e2fsprogs skip with a message when it is missing; the kernel checks skip
//! when not root.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{Device, FileDevice};
use cjfs_fs::ondisk::htree::{DxEntry, DxNode, DxRoot, node_limit};
use cjfs_fs::{Fs, FsError, Ino, MkfsOptions, MountOptions, ROOT_INO, RenameFlags, mkfs};
use common::{open_image, which};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

const INDEX_FL: u32 = 0x1000;

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cjfs-dx")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tmpdir")
}

/// Why e2fsprogs cannot be used, if it cannot.
fn no_e2fsprogs() -> Option<String> {
    ["mkfs.ext4", "e2fsck", "debugfs"]
        .iter()
        .find(|t| which(t).is_none())
        .map(|t| format!("{t} not installed"))
}

/// Why the kernel cannot be used, if it cannot.
fn no_kernel() -> Option<String> {
    for t in ["mount", "umount"] {
        if which(t).is_none() {
            return Some(format!("{t} not installed"));
        }
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (loop mounts need it)".into());
    }
    None
}

/// A kernel loop mount, unmounted on drop.
struct KMount(PathBuf);

impl KMount {
    fn new(img: &Path, mnt: &Path, ro: bool) -> KMount {
        let _ = std::fs::create_dir(mnt);
        let o = Command::new("mount")
            .args(["-t", "ext4", "-o", if ro { "loop,ro" } else { "loop" }])
            .arg(img)
            .arg(mnt)
            .output()
            .expect("mount");
        assert!(o.status.success(), "mount {}: {}", img.display(), String::from_utf8_lossy(&o.stderr));
        KMount(mnt.to_path_buf())
    }
}

impl Drop for KMount {
    fn drop(&mut self) {
        let st = Command::new("umount").arg(&self.0).status().expect("umount");
        assert!(st.success(), "umount {} failed", self.0.display());
    }
}

fn run(cmd: &mut Command) -> (i32, String) {
    let o = cmd.output().expect("run");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text)
}

/// `e2fsck -fn` exits 0 and reports no htree problem; `e2fsck -fy` on a copy changes
/// nothing and optimises no directory.
fn assert_fsck_strict(img: &Path) {
    let e2fsck = which("e2fsck").expect("e2fsck");
    let (rc, out) = run(Command::new(&e2fsck).arg("-fn").arg(img));
    assert_eq!(rc, 0, "e2fsck -fn {}:\n{out}", img.display());
    // (the image's path, which e2fsck prints, may contain any word)
    let lower = out.replace(&*img.to_string_lossy(), "IMG").to_lowercase();
    for bad in ["htree", "optimiz", "rehash", "hash tree"] {
        assert!(!lower.contains(bad), "e2fsck -fn mentions {bad:?}:\n{out}");
    }
    let copy = img.with_extension("fy.img");
    std::fs::copy(img, &copy).expect("copy image");
    let (rc, out) = run(Command::new(&e2fsck).arg("-fy").arg(&copy));
    let _ = std::fs::remove_file(&copy);
    assert_eq!(rc, 0, "e2fsck -fy changed the image:\n{out}");
    assert!(
        !out.contains("Optimizing directories") && !out.contains("Pass 3A"),
        "e2fsck -fy optimised:\n{out}"
    );
}

/// `debugfs -R 'htree DIR'`: the root dump is there; returns its indirect levels.
fn debugfs_levels(img: &Path, dir: &str) -> u8 {
    let (rc, out) =
        run(Command::new(which("debugfs").expect("debugfs")).arg("-R").arg(format!("htree {dir}")).arg(img));
    assert_eq!(rc, 0, "debugfs htree {dir}:\n{out}");
    assert!(
        out.contains("Root node dump:"),
        "debugfs shows no htree root for {dir}:\n{}",
        &out[..out.len().min(2000)]
    );
    let line =
        out.lines().find(|l| l.trim_start().starts_with("Indirect levels:")).expect("Indirect levels line");
    line.split(':').nth(1).unwrap().trim().parse().expect("levels")
}

/// The kernel's view of `dir` on a read-only mount: every name listed equals `want`, and
/// each is found by a lookup (which goes through the index).
fn assert_kernel_sees(img: &Path, dir: &str, want: &BTreeSet<Vec<u8>>) {
    if let Some(why) = no_kernel() {
        println!("SKIP kernel check of {dir}: {why}");
        return;
    }
    let mnt = img.with_extension("mnt");
    let m = KMount::new(img, &mnt, true);
    let d = m.0.join(dir.trim_start_matches('/'));
    let listed: BTreeSet<Vec<u8>> = std::fs::read_dir(&d)
        .expect("kernel readdir")
        .map(|e| e.expect("entry").file_name().as_bytes().to_vec())
        .collect();
    let missing: Vec<_> =
        want.difference(&listed).take(5).map(|n| String::from_utf8_lossy(n).into_owned()).collect();
    let extra: Vec<_> =
        listed.difference(want).take(5).map(|n| String::from_utf8_lossy(n).into_owned()).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "kernel listing of {dir}: missing {missing:?}, extra {extra:?}"
    );
    assert_eq!(listed.len(), want.len());
    for n in want {
        let p = d.join(std::ffi::OsStr::from_bytes(n));
        std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("kernel lookup of {}: {e}", p.display()));
    }
    drop(m);
    let _ = std::fs::remove_dir(&mnt);
}

/// `cjfs check` (the library's image check) finds no error.
fn assert_cjfs_check_clean(img: &Path) {
    let ro = MountOptions { read_only: true, ..MountOptions::default() };
    let fs = Fs::open(open_image(img), ro).expect("read-only mount");
    let r = cjfs_fs::image_check::check_image(&fs).expect("check_image");
    assert!(r.errors.is_empty(), "cjfs check: {:?}", r.errors);
    fs.unmount().expect("unmount");
}

fn flags(fs: &Fs, ino: Ino) -> u32 {
    fs.check_inode(ino).expect("check_inode").flags
}

fn cjfs_names(fs: &Fs, dir: Ino) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let mut off = 0;
    loop {
        let ents = fs.readdir(dir, off, 4096).expect("readdir");
        let Some(last) = ents.last() else { break };
        off = last.next_offset;
        for e in ents {
            if e.name != b"." && e.name != b".." {
                out.insert(e.name);
            }
        }
    }
    out
}

fn item(i: usize, salt: u64) -> Vec<u8> {
    let mut x = (i as u64).wrapping_add(salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    format!("item-{i:06}-{x:016x}-{:08x}", (x >> 7) as u32).into_bytes()
}

/// Acceptance: 50,000 entries made by cjfs, 10,000 removed at random.
#[test]
fn cjfs_50k_minus_10k_stays_indexed() {
    if let Some(why) = no_e2fsprogs() {
        println!("SKIP: {why}");
        return;
    }
    let tmp = tmpdir();
    let img = tmp.path().join("cjfs50k.img");
    let dev: Device = Arc::new(FileDevice::create(&img, 512 << 20).expect("create image"));
    mkfs(&*dev, &MkfsOptions { inode_ratio: 4096, assume_zeroed: true, ..MkfsOptions::default() })
        .expect("mkfs");
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).expect("mkdir").ino;
    let mut names: Vec<Vec<u8>> = (0..50_000).map(|i| item(i, 1)).collect();
    for n in &names {
        fs.create(d, n, 0o644, 0, 0)
            .unwrap_or_else(|e| panic!("create {:?}: {e}", String::from_utf8_lossy(n)));
    }
    assert_ne!(flags(&fs, d) & INDEX_FL, 0, "a 50,000-entry directory is indexed");
    let mut rng = StdRng::seed_from_u64(20);
    names.shuffle(&mut rng);
    let (gone, kept) = names.split_at(10_000);
    for n in gone {
        fs.unlink(d, n).expect("unlink");
    }
    let want: BTreeSet<Vec<u8>> = kept.iter().cloned().collect();
    assert_eq!(cjfs_names(&fs, d), want);
    fs.unmount().expect("unmount");

    assert_fsck_strict(&img);
    assert_cjfs_check_clean(&img);
    assert_eq!(debugfs_levels(&img, "/big"), 1, "50,000 names of 37 bytes need a level of nodes");
    // cjfs again: the index is read back, lookups work, nothing removed is found
    let fs = Fs::open(open_image(&img), MountOptions::default()).expect("remount");
    let d = fs.lookup(ROOT_INO, b"big").expect("big").ino;
    for n in kept.iter().step_by(13) {
        fs.lookup(d, n).expect("lookup kept");
    }
    for n in gone.iter().step_by(13) {
        assert!(fs.lookup(d, n).is_err());
    }
    fs.unmount().expect("unmount");
    assert_kernel_sees(&img, "/big", &want);
}

fn mkfs_ext4(img: &Path, mib: u64, features: &str) {
    let (rc, out) = run(Command::new(which("mkfs.ext4").expect("mkfs.ext4"))
        .args(["-q", "-F", "-b", "4096", "-O", features])
        .arg(img)
        .arg(format!("{mib}M")));
    assert_eq!(rc, 0, "mkfs.ext4 -O {features}: {out}");
}

/// The kernel indexes a directory, cjfs changes it (and grows a small one into an indexed
/// one), the kernel reads every name back.
fn kernel_then_cjfs(features: &str) {
    if let Some(why) = no_e2fsprogs().or_else(no_kernel) {
        println!("SKIP kernel_then_cjfs({features}): {why}");
        return;
    }
    let tmp = tmpdir();
    let img = tmp.path().join("k.img");
    mkfs_ext4(&img, 256, features);
    let mut big: BTreeSet<Vec<u8>> = (0..6000).map(|i| item(i, 2)).collect();
    let mut small: BTreeSet<Vec<u8>> = (0..20).map(|i| format!("s{i}").into_bytes()).collect();
    {
        let m = KMount::new(&img, &tmp.path().join("mnt"), false);
        for (dir, names) in [("big", &big), ("small", &small)] {
            let d = m.0.join(dir);
            std::fs::create_dir(&d).expect("mkdir");
            for n in names {
                std::fs::File::create(d.join(std::ffi::OsStr::from_bytes(n))).expect("create");
            }
        }
    }
    assert_fsck_strict(&img);
    let levels_before = debugfs_levels(&img, "/big");

    let fs = Fs::open(open_image(&img), MountOptions::default()).expect("cjfs mount");
    let b = fs.lookup(ROOT_INO, b"big").expect("big").ino;
    let s = fs.lookup(ROOT_INO, b"small").expect("small").ino;
    assert_ne!(flags(&fs, b) & INDEX_FL, 0, "the kernel indexed /big");
    assert_eq!(flags(&fs, s) & INDEX_FL, 0, "/small is one linear block");
    let mut rng = StdRng::seed_from_u64(21);
    for i in 0..8000 {
        let n = item(100_000 + i, 3);
        fs.create(b, &n, 0o644, 0, 0).expect("create in big");
        big.insert(n);
    }
    // removals among the names the kernel made
    let old: Vec<Vec<u8>> = (0..6000).map(|i| item(i, 2)).collect();
    for n in old.choose_multiple(&mut rng, 3000) {
        fs.unlink(b, n).expect("unlink");
        big.remove(n);
    }
    // renames: onto a new name, over an existing one, and across directories
    let some: Vec<Vec<u8>> =
        big.iter().cloned().collect::<Vec<_>>().choose_multiple(&mut rng, 300).cloned().collect();
    for (k, n) in some.chunks(3).enumerate() {
        let fresh = format!("renamed-{k:04}-{}", "r".repeat(k % 60)).into_bytes();
        fs.rename(b, &n[0], b, &fresh, RenameFlags::default()).expect("rename");
        big.remove(&n[0]);
        big.insert(fresh);
        fs.rename(b, &n[1], b, &n[2], RenameFlags::default()).expect("rename over");
        big.remove(&n[1]);
        fs.rename(b, &n[2], s, &n[2], RenameFlags::default()).expect("rename across");
        big.remove(&n[2]);
        small.insert(n[2].clone());
    }
    for i in 0..400 {
        let n = format!("small-grows-{i:04}-{}", "g".repeat(i % 40)).into_bytes();
        fs.create(s, &n, 0o644, 0, 0).expect("create in small");
        small.insert(n);
    }
    assert_ne!(flags(&fs, b) & INDEX_FL, 0, "/big lost its index");
    assert_ne!(flags(&fs, s) & INDEX_FL, 0, "/small was not indexed when it grew");
    assert_eq!(cjfs_names(&fs, b), big);
    assert_eq!(cjfs_names(&fs, s), small);
    fs.unmount().expect("unmount");

    assert_fsck_strict(&img);
    assert_cjfs_check_clean(&img);
    assert!(debugfs_levels(&img, "/big") >= levels_before);
    debugfs_levels(&img, "/small");
    assert_kernel_sees(&img, "/big", &big);
    assert_kernel_sees(&img, "/small", &small);
}

#[test]
fn kernel_indexed_dir_changed_by_cjfs_metadata_csum() {
    kernel_then_cjfs("metadata_csum");
}

#[test]
fn kernel_indexed_dir_changed_by_cjfs_no_csum() {
    kernel_then_cjfs("^metadata_csum");
}

/// Physical blocks of `dir`, in logical order (`debugfs blocks`).
fn dir_blocks(img: &Path, dir: &str) -> Vec<u64> {
    let (rc, out) =
        run(Command::new(which("debugfs").expect("debugfs")).arg("-R").arg(format!("blocks {dir}")).arg(img));
    assert_eq!(rc, 0, "debugfs blocks: {out}");
    out.lines()
        .filter(|l| !l.starts_with("debugfs"))
        .flat_map(|l| {
            l.split_whitespace().map(|w| w.parse::<u64>().expect("block number")).collect::<Vec<_>>()
        })
        .collect()
}

fn read_block(img: &Path, pblk: u64) -> Vec<u8> {
    let mut f = std::fs::File::open(img).expect("open");
    f.seek(SeekFrom::Start(pblk * 4096)).expect("seek");
    let mut b = vec![0u8; 4096];
    f.read_exact(&mut b).expect("read");
    b
}

fn write_block(img: &Path, pblk: u64, b: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(img).expect("open");
    f.seek(SeekFrom::Start(pblk * 4096)).expect("seek");
    f.write_all(b).expect("write");
}

/// A 3-level htree (`large_dir`): read by cjfs, inserted into through two interior levels.
#[test]
fn large_dir_three_levels() {
    if let Some(why) = no_e2fsprogs() {
        println!("SKIP: {why}");
        return;
    }
    let tmp = tmpdir();
    let img = tmp.path().join("large_dir.img");
    mkfs_ext4(&img, 128, "large_dir,^metadata_csum");
    // 12,000 names of ~200 bytes: ~600 leaves once e2fsck -D packs them, so one level of
    // nodes under the root
    let long = |i: usize| format!("{i:06}-{}", "L".repeat(193));
    let mut cmds = String::from("mkdir /d\n");
    for i in 0..12_000 {
        cmds.push_str(&format!("write /dev/null /d/{}\n", long(i)));
    }
    let cmdfile = tmp.path().join("cmds");
    std::fs::write(&cmdfile, cmds).expect("write cmds");
    let debugfs = which("debugfs").expect("debugfs");
    let (rc, out) = run(Command::new(&debugfs).arg("-w").arg("-f").arg(&cmdfile).arg(&img));
    assert_eq!(rc, 0, "debugfs: {}", &out[..out.len().min(2000)]);
    let (rc, out) = run(Command::new(which("e2fsck").expect("e2fsck")).arg("-fyD").arg(&img));
    assert!(rc == 0 || rc == 1, "e2fsck -fyD: {out}");
    assert_eq!(debugfs_levels(&img, "/d"), 1);

    // Free a leaf: remove its names (it stays referenced, empty), then drop its entry from
    // its parent (the previous leaf's range absorbs the empty range).
    let blocks = dir_blocks(&img, "/d");
    let mut root = DxRoot::decode(&read_block(&img, blocks[0])).expect("root");
    let node_lblk = root.entries[root.entries.len() / 2].block;
    let mut node = DxNode::decode(&read_block(&img, blocks[node_lblk as usize])).expect("node");
    let victim = node.entries.remove(1);
    let leaf = read_block(&img, blocks[victim.block as usize]);
    let mut rm = String::new();
    let mut removed = BTreeSet::new();
    for e in cjfs_fs::ondisk::dirent::iter(&leaf) {
        let e = e.expect("leaf entry");
        if e.inode != 0 {
            rm.push_str(&format!("rm /d/{}\n", String::from_utf8_lossy(e.name)));
            removed.insert(e.name.to_vec());
        }
    }
    assert!(!removed.is_empty());
    std::fs::write(&cmdfile, rm).expect("write cmds");
    let (rc, out) = run(Command::new(&debugfs).arg("-w").arg("-f").arg(&cmdfile).arg(&img));
    assert_eq!(rc, 0, "debugfs rm: {}", &out[..out.len().min(2000)]);
    let mut nb = read_block(&img, blocks[node_lblk as usize]);
    node.encode_into(&mut nb);
    write_block(&img, blocks[node_lblk as usize], &nb);
    // The freed block becomes an interior node holding the root's entries; the root points
    // to it alone: root -> node -> node -> leaves.
    let mid = DxNode { limit: node_limit(4096), entries: root.entries.clone() };
    let mut mb = vec![0u8; 4096];
    mid.encode_into(&mut mb);
    write_block(&img, blocks[victim.block as usize], &mb);
    root.entries = vec![DxEntry { hash: 0, block: victim.block }];
    root.indirect_levels = 2;
    let mut rb = read_block(&img, blocks[0]);
    root.encode_into(&mut rb);
    write_block(&img, blocks[0], &rb);
    assert_fsck_strict(&img);
    assert_eq!(debugfs_levels(&img, "/d"), 2, "the hand-made tree has 3 levels");

    let mut want: BTreeSet<Vec<u8>> = (0..12_000).map(|i| long(i).into_bytes()).collect();
    for n in &removed {
        want.remove(n);
    }
    let fs = Fs::open(open_image(&img), MountOptions::default()).expect("cjfs mount");
    let d = fs.lookup(ROOT_INO, b"d").expect("d").ino;
    assert_eq!(cjfs_names(&fs, d), want, "cjfs reads the 3-level directory");
    for n in want.iter().step_by(17) {
        fs.lookup(d, n).expect("lookup");
    }
    // inserts and removals through both interior levels (with leaf and node splits)
    for i in 20_000..23_000 {
        let n = long(i).into_bytes();
        fs.create(d, &n, 0o644, 0, 0).expect("create");
        want.insert(n);
    }
    for i in (0..12_000).step_by(5) {
        let n = long(i).into_bytes();
        if want.remove(&n) {
            fs.unlink(d, &n).expect("unlink");
        }
    }
    assert_eq!(cjfs_names(&fs, d), want);
    fs.unmount().expect("unmount");
    assert_fsck_strict(&img);
    assert_cjfs_check_clean(&img);
    assert_eq!(debugfs_levels(&img, "/d"), 2);
    assert_kernel_sees(&img, "/d", &want);
}

/// Running out of blocks while an indexed directory grows: creates fail with ENOSPC, the
/// directory stays valid (a split that got its block keeps it), e2fsck is clean.
#[test]
fn enospc_during_splits_leaves_a_clean_image() {
    let tmp = tmpdir();
    let img = tmp.path().join("full.img");
    let dev: Device = Arc::new(FileDevice::create(&img, 64 << 20).expect("create image"));
    mkfs(&*dev, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir").ino;
    // fill the data space, leaving a few dozen blocks
    let f = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).expect("create").ino;
    let chunk = vec![7u8; 1 << 20];
    let mut off = 0u64;
    while fs.write(f, off, &chunk).is_ok() {
        off += chunk.len() as u64;
    }
    let mut small = vec![7u8; 4096];
    while fs.write(f, off, &small).is_ok() {
        off += 4096;
    }
    // From the size written (a short write leaves `off` past it), so the truncation frees.
    let end = fs.getattr(f).expect("getattr").size;
    let size = Some(end.saturating_sub(40 * 4096));
    fs.setattr(f, &cjfs_fs::SetAttr { size, ..Default::default() }).expect("truncate");
    small.clear();
    let mut made = BTreeSet::new();
    let mut enospc = 0;
    for i in 0..20_000 {
        let n = format!("{i:06}-{}", "n".repeat(120)).into_bytes();
        match fs.create(d, &n, 0o644, 0, 0) {
            Ok(_) => {
                made.insert(n);
            }
            Err(FsError::NoSpace(_)) => {
                enospc += 1;
                if enospc > 50 {
                    break;
                }
            }
            Err(e) => panic!("create {i}: {e}"),
        }
    }
    assert!(enospc > 0, "the file system never filled up");
    assert_ne!(flags(&fs, d) & INDEX_FL, 0);
    assert_eq!(cjfs_names(&fs, d), made);
    for n in made.iter().step_by(5) {
        fs.lookup(d, n).expect("lookup after ENOSPC");
    }
    fs.unmount().expect("unmount");
    if no_e2fsprogs().is_none() {
        assert_fsck_strict(&img);
    } else {
        println!("SKIP e2fsck check: e2fsprogs not installed");
    }
    let fs = Fs::open(open_image(&img), MountOptions::default()).expect("remount");
    let d = fs.lookup(ROOT_INO, b"d").expect("d").ino;
    assert_eq!(cjfs_names(&fs, d), made);
    fs.unmount().expect("unmount");
}

/// readdir cookies of an indexed directory are hashes: paging through it while splits
/// move entries between blocks (and while a single-block directory becomes indexed)
/// returns every original name exactly once.
#[test]
fn readdir_across_splits_and_conversion() {
    let tmp = tmpdir();
    let img = tmp.path().join("rd.img");
    let dev: Device = Arc::new(FileDevice::create(&img, 128 << 20).expect("create image"));
    mkfs(&*dev, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    for (dir, start, page, per_page, limit) in
        [(&b"conv"[..], 10usize, 3usize, 200usize, 400usize), (&b"big"[..], 3000, 50, 150, 3000)]
    {
        let d = fs.mkdir(ROOT_INO, dir, 0o755, 0, 0).expect("mkdir").ino;
        let orig: BTreeSet<Vec<u8>> = (0..start).map(|i| item(i, 5)).collect();
        for n in &orig {
            fs.create(d, n, 0o644, 0, 0).expect("create");
        }
        let mut seen = BTreeSet::new();
        let (mut off, mut added) = (0u64, 0usize);
        loop {
            let ents = fs.readdir(d, off, page).expect("readdir");
            let Some(last) = ents.last() else { break };
            off = last.next_offset;
            for e in ents {
                assert!(seen.insert(e.name.clone()), "{:?} returned twice", String::from_utf8_lossy(&e.name));
            }
            for _ in 0..per_page.min(limit - added) {
                fs.create(d, &item(1_000_000 + added, 6), 0o644, 0, 0).expect("create");
                added += 1;
            }
        }
        assert!(orig.is_subset(&seen), "an original name was not returned");
        assert_ne!(flags(&fs, d) & INDEX_FL, 0);
    }
    fs.unmount().expect("unmount");
    if no_e2fsprogs().is_none() {
        assert_fsck_strict(&img);
    }
}
