//! `metadata_csum` damage: one byte changed in each checksummed structure of a `cjfs mkfs`
//! image (superblock, group descriptor, block bitmap, inode bitmap, inode, extent tree
//! block, directory leaf block, htree node, xattr block). `cjfs check` reports the mismatch
//! naming the structure; the command that reads the structure fails with one line naming
//! it (no panic); neither changes a byte of the image.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{DEFAULT_BLOCK_SIZE as BLOCK_SIZE, Device, FileDevice, FileDeviceOptions};
use cjfs_fs::mkfs::read_layout;
use cjfs_fs::{Fs, Ino, MountOptions, ROOT_INO, XattrFlags};
use common::*;

/// `EXT4_INDEX_FL`.
const INDEX_FL: u32 = 0x1000;

fn dev(img: &Path, read_only: bool) -> Device {
    Arc::new(FileDevice::open(img, FileDeviceOptions { read_only, ..Default::default() }).expect("open"))
}

fn flip(img: &Path, at: u64) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(img).expect("open image");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read byte");
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).expect("write byte");
}

fn read_at(img: &Path, at: u64, n: usize) -> Vec<u8> {
    let f = std::fs::File::open(img).expect("open image");
    let mut v = vec![0u8; n];
    f.read_exact_at(&mut v, at).expect("read image");
    v
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// Image byte offset of inode `ino`'s record.
fn inode_offset(img: &Path, ino: Ino) -> u64 {
    let (sb, descs) = read_layout(&*dev(img, true)).expect("layout");
    let g = (ino - 1) / sb.inodes_per_group;
    let idx = u64::from((ino - 1) % sb.inodes_per_group);
    descs[g as usize].inode_table * BLOCK_SIZE as u64 + idx * sb.inode_size() as u64
}

/// The first entry's block of the extent node `node`: `ee_start_lo` of a leaf's first
/// extent, `ei_leaf_lo` of an index node's first entry; and the node's depth.
fn first_entry(node: &[u8]) -> (u64, u16) {
    assert_eq!(&node[..2], &[0x0a, 0xf3], "not an extent node");
    let depth = u16::from_le_bytes([node[6], node[7]]);
    (u64::from(if depth == 0 { u32_at(node, 20) } else { u32_at(node, 16) }), depth)
}

/// Inode `ino`'s first extent tree block (its tree must have depth 1 or more).
fn tree_block(img: &Path, ino: Ino) -> u64 {
    let rec = read_at(img, inode_offset(img, ino), 128);
    let (b, depth) = first_entry(&rec[0x28..0x28 + 60]);
    assert!(depth > 0, "inode {ino}'s extents fit the inode");
    b
}

/// The block holding inode `ino`'s logical block 0.
fn first_block(img: &Path, ino: Ino) -> u64 {
    let rec = read_at(img, inode_offset(img, ino), 128);
    let (mut b, mut depth) = first_entry(&rec[0x28..0x28 + 60]);
    while depth > 0 {
        (b, depth) = first_entry(&read_at(img, b * BLOCK_SIZE as u64, BLOCK_SIZE));
    }
    b
}

struct Prepared {
    img: PathBuf,
    x: Ino,
    frag: Ino,
    xa: Ino,
    a: Ino,
    big: Option<Ino>,
}

/// A `cjfs mkfs` image with a small file, a file whose extent tree needs a block, a file
/// with an xattr block and, when e2fsck is installed, a directory e2fsck indexed (htree).
fn prepare(dir: &Path) -> Prepared {
    let img = make_image(dir, "c.img", "64M");
    let fs = Fs::open(dev(&img, false), MountOptions::default()).expect("mount");
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).expect("mkdir").ino;
    let x = fs.create(a, b"x", 0o644, 0, 0).expect("create").ino;
    fs.write(x, 0, b"x").expect("write");
    let frag = fs.create(ROOT_INO, b"frag", 0o644, 0, 0).expect("create").ino;
    for k in 0..20u64 {
        fs.write(frag, k * 2 * BLOCK_SIZE as u64, &[k as u8 + 1; BLOCK_SIZE]).expect("write");
    }
    let xa = fs.create(ROOT_INO, b"xa", 0o644, 0, 0).expect("create").ino;
    fs.setxattr(xa, b"user.big", &[7u8; 2500], XattrFlags::Any).expect("setxattr");
    let big = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).expect("mkdir").ino;
    for i in 0..300 {
        fs.create(big, format!("entry-{i:04}-{}", "e".repeat(40)).as_bytes(), 0o644, 0, 0).expect("create");
    }
    fs.unmount().expect("unmount");
    let big = match tool("e2fsck") {
        Some(e2fsck) => {
            // `-D` indexes every directory of more than one block (the kernel's layout,
            // with `dx_tail` checksums).
            let o = Command::new(e2fsck).arg("-fyD").arg(&img).output().expect("e2fsck -fyD");
            assert!(o.status.code().is_some_and(|c| c <= 1), "e2fsck -fyD: {}", text(&o.stdout));
            let flags = u32_at(&read_at(&img, inode_offset(&img, big), 128), 0x20);
            assert!(flags & INDEX_FL != 0, "e2fsck -D did not index /big");
            Some(big)
        }
        None => {
            println!("SKIP: e2fsck not installed; no htree directory to damage");
            None
        }
    };
    assert_e2fsck_clean(&img);
    Prepared { img, x, frag, xa, a, big }
}

/// Damage a copy of the prepared image at `at`; `cjfs check` and `op` must name
/// `structure`, and leave the image as it was.
fn damaged(p: &Prepared, name: &str, at: u64, structure: &str, op: &[&str]) {
    let img = p.img.with_file_name(format!("{name}.img"));
    std::fs::copy(&p.img, &img).expect("copy image");
    flip(&img, at);
    let before = hash_file(&img);
    let needle = format!("checksum mismatch: {structure}");
    let o = cjfs(&["check", s(&img), "--no-e2fsck"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{name}: check called the image clean:\n{out}");
    assert!(out.contains(&needle), "{name}: check does not report {needle:?}:\n{out}");
    assert!(!text(&o.stderr).contains("panicked"), "{name}: {}", text(&o.stderr));
    assert_eq!(hash_file(&img), before, "{name}: check changed the image");
    let mut args: Vec<&str> = vec![op[0], s(&img)];
    args.extend_from_slice(&op[1..]);
    fails(&args, &needle);
    assert_eq!(hash_file(&img), before, "{name}: the failing {} changed the image", op[0]);
}

#[test]
fn a_changed_byte_in_each_checksummed_structure_is_reported() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = prepare(dir.path());
    let local = dir.path().join("local");
    std::fs::write(&local, vec![3u8; 20_000]).expect("write local");
    let (_, descs) = read_layout(&*dev(&p.img, true)).expect("layout");
    let bs = BLOCK_SIZE as u64;

    // s_def_resuid.
    damaged(&p, "superblock", 1024 + 0x50, "superblock", &["ls", "/"]);
    // Group 0's bg_used_dirs_count (the table starts at block 1).
    damaged(&p, "gdt", bs + 0x10, "group descriptor", &["ls", "/"]);
    // A free block of group 0 marked in use; writing data allocates from that bitmap.
    damaged(&p, "bbitmap", descs[0].block_bitmap * bs + 1500, "block bitmap", &["put", s(&local), "/new"]);
    // Free inodes marked in use; creating allocates from that bitmap.
    damaged(&p, "ibitmap", descs[0].inode_bitmap * bs + 200, "inode bitmap", &["mkdir", "/new"]);
    // /a/x's i_mtime.
    damaged(&p, "inode", inode_offset(&p.img, p.x) + 0x10, "inode", &["cat", "/a/x"]);
    // An extent in /frag's tree block.
    damaged(&p, "extent", tree_block(&p.img, p.frag) * bs + 40, "extent tree block", &["cat", "/frag"]);
    // The name of /a/x's entry (after `.` and `..`, 12 bytes each).
    damaged(&p, "dirent", first_block(&p.img, p.a) * bs + 24 + 8, "directory block", &["ls", "/a"]);
    // The hash of the htree root's second entry.
    if let Some(big) = p.big {
        damaged(&p, "htree", first_block(&p.img, big) * bs + 0x29, "htree node", &["ls", "/big"]);
    }
    // The xattr value in /xa's block (removing the file reads the block to release it).
    let acl = u64::from(u32_at(&read_at(&p.img, inode_offset(&p.img, p.xa), 128), 0x68));
    assert_ne!(acl, 0, "/xa has no xattr block");
    damaged(&p, "xattr", acl * bs + 4000, "xattr block", &["rm", "/xa"]);
}

/// `cjfs mkfs` makes metadata_csum images unless told not to.
#[test]
fn mkfs_makes_metadata_csum_unless_told_not_to() {
    let dir = tempfile::tempdir().expect("tmp");
    let a = dir.path().join("a.img");
    let o = ok(&["mkfs", s(&a), "--size", "64M"]);
    assert!(text(&o.stdout).contains("metadata_csum"), "{}", text(&o.stdout));
    let (sb, _) = read_layout(&*dev(&a, true)).expect("layout");
    assert!(sb.has_metadata_csum());
    let b = dir.path().join("b.img");
    ok(&["mkfs", s(&b), "--size", "64M", "--no-metadata-csum"]);
    let (sb, descs) = read_layout(&*dev(&b, true)).expect("layout");
    assert!(!sb.has_metadata_csum() && !sb.has_group_desc_csum());
    assert!(descs.iter().all(|d| d.flags == 0));
    for img in [&a, &b] {
        ok(&["mkdir", s(img), "/d"]);
        assert_e2fsck_clean(img);
    }
}
