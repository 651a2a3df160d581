//! mkfs integration tests: make file systems on image files and let `e2fsck -fn` and
//! `dumpe2fs -h` judge them. Tests that need e2fsprogs print a message and pass when the
//! tools are missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use cjfs_blockdev::{BlockDevice, EmulatedSsd, FileDevice, FileDeviceOptions};
use cjfs_fs::FsError;
use cjfs_fs::mkfs::{MkfsOptions, MkfsReport, mkfs, read_layout};
use cjfs_fs::ondisk::bitmap;
use cjfs_fs::ondisk::dirent;
use cjfs_fs::ondisk::extent::ExtentNode;
use cjfs_fs::ondisk::features;
use cjfs_fs::ondisk::inode::{Inode, JOURNAL_INO, ROOT_INO};

fn tool(name: &str) -> Option<PathBuf> {
    for dir in ["/sbin", "/usr/sbin", "/usr/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    let out = Command::new("which").arg(name).output().ok()?;
    if out.status.success() {
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !s.is_empty() {
            return Some(PathBuf::from(s));
        }
    }
    None
}

/// Run `e2fsck -fn img`; panic with its output unless it exits 0. Returns false (after
/// printing why) when e2fsck is not installed.
fn e2fsck_clean(img: &Path) -> bool {
    let Some(e2fsck) = tool("e2fsck") else {
        println!("SKIP: e2fsck not found; install e2fsprogs to check the image");
        return false;
    };
    let out = Command::new(e2fsck).arg("-fn").arg(img).output().expect("run e2fsck");
    assert!(
        out.status.success(),
        "e2fsck -fn {} exited with {:?}\nstdout:\n{}\nstderr:\n{}",
        img.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

fn dumpe2fs_h(img: &Path) -> Option<String> {
    let Some(d) = tool("dumpe2fs") else {
        println!("SKIP: dumpe2fs not found");
        return None;
    };
    let out = Command::new(d).arg("-h").arg(img).output().expect("run dumpe2fs");
    assert!(out.status.success(), "dumpe2fs failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn field<'a>(dump: &'a str, name: &str) -> &'a str {
    dump.lines()
        .find_map(|l| l.strip_prefix(name).map(|r| r.trim_start_matches(':').trim()))
        .unwrap_or_else(|| panic!("dumpe2fs has no {name:?} line:\n{dump}"))
}

const FEATURES_64: &str = "has_journal ext_attr dir_index filetype extent 64bit flex_bg \
                           sparse_super large_file huge_file dir_nlink extra_isize metadata_csum";
const FEATURES_32: &str = "has_journal ext_attr dir_index filetype extent flex_bg \
                           sparse_super large_file huge_file dir_nlink extra_isize metadata_csum";

/// Make a file system on a (sparse) image of `bytes` bytes; returns the report.
fn make(img: &Path, bytes: u64, opts: &MkfsOptions) -> MkfsReport {
    make_bs(img, bytes, 4096, opts)
}

/// [`make`] with blocks of `block_size` bytes.
fn make_bs(img: &Path, bytes: u64, block_size: usize, opts: &MkfsOptions) -> MkfsReport {
    let dev = FileDevice::open(
        img,
        FileDeviceOptions { create_size: Some(bytes), block_size, ..Default::default() },
    )
    .expect("create image");
    let r = mkfs(&dev, opts).expect("mkfs");
    // the layout reads back
    let (sb, descs) = read_layout(&dev).expect("read_layout");
    assert_eq!(sb, r.superblock);
    assert_eq!(descs, r.groups);
    check_structures(&dev, &r);
    r
}

/// Check our own view of what mkfs wrote: counts, bitmaps, root directory, journal inode.
fn check_structures(dev: &dyn BlockDevice, r: &MkfsReport) {
    let sb = &r.superblock;
    assert!(features::check_supported(sb).is_ok());
    let mut free_b = 0u64;
    let mut free_i = 0u64;
    for (g, d) in r.groups.iter().enumerate() {
        let g = g as u32;
        let bb = dev.read_block(d.block_bitmap).unwrap();
        let n = sb.group_block_count(g) as usize;
        assert_eq!(bitmap::count_zero(&bb[..], n) as u32, d.free_blocks_count, "group {g}");
        assert!(bitmap::padding_ok(&bb[..], n), "block bitmap padding of group {g}");
        let ib = dev.read_block(d.inode_bitmap).unwrap();
        let ipg = sb.inodes_per_group as usize;
        assert_eq!(bitmap::count_zero(&ib[..], ipg) as u32, d.free_inodes_count, "group {g}");
        assert!(bitmap::padding_ok(&ib[..], ipg), "inode bitmap padding of group {g}");
        free_b += d.free_blocks_count as u64;
        free_i += d.free_inodes_count as u64;
    }
    assert_eq!(free_b, sb.free_blocks_count);
    assert_eq!(free_i, sb.free_inodes_count as u64);

    let read_inode = |ino: u32| {
        let (g, blk, off) = sb.inode_position(ino);
        let b = dev.read_block(r.groups[g as usize].inode_table + blk as u64).unwrap();
        Inode::decode(&b[off..off + sb.inode_size()]).unwrap()
    };
    let root = read_inode(ROOT_INO);
    assert!(root.is_dir());
    assert_eq!(root.links_count, 3);
    let node = ExtentNode::decode(&root.block).unwrap();
    let ext = node.extents().unwrap()[0];
    let blk = dev.read_block(ext.start).unwrap();
    // (With metadata_csum the block ends with the unused checksum record.)
    assert_eq!(dirent::has_tail(&blk[..]), sb.has_metadata_csum());
    let names: Vec<Vec<u8>> =
        dirent::iter(&blk[..]).map(|e| e.unwrap()).filter(|e| e.is_live()).map(|e| e.name.to_vec()).collect();
    assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"lost+found".to_vec()]);

    let j = read_inode(JOURNAL_INO);
    assert_eq!(j.size, r.journal_blocks as u64 * u64::from(sb.block_size()));
    let words = j.block_words();
    assert_eq!(&sb.jnl_blocks[..15], &words[..]);
    assert_eq!(sb.jnl_blocks[16], j.size as u32);
}

#[test]
fn mkfs_64mib_e2fsck_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    let opts = MkfsOptions { label: "cjfs-test".into(), ..Default::default() };
    let r = make(&img, 64 << 20, &opts);
    assert_eq!(r.block_count, 16384);
    assert_eq!(r.group_count, 1);
    assert_eq!(r.journal_blocks, 1024);
    if !e2fsck_clean(&img) {
        return;
    }
    if let Some(d) = dumpe2fs_h(&img) {
        assert_eq!(field(&d, "Filesystem features"), FEATURES_64);
        assert_eq!(field(&d, "Filesystem volume name"), "cjfs-test");
        assert_eq!(field(&d, "Filesystem state"), "clean");
        assert_eq!(field(&d, "Errors behavior"), "Continue");
        assert_eq!(field(&d, "Inode size"), "256");
        assert_eq!(field(&d, "Required extra isize"), "32");
        assert_eq!(field(&d, "Desired extra isize"), "32");
        assert_eq!(field(&d, "First inode"), "11");
        assert_eq!(field(&d, "Default directory hash"), "half_md4");
        assert_eq!(field(&d, "Journal inode"), "8");
        assert_eq!(field(&d, "Journal backup"), "inode blocks");
        assert_eq!(field(&d, "Reserved block count"), "819");
        assert_eq!(field(&d, "Flex block group size"), "16");
        let uuid = field(&d, "Filesystem UUID").replace('-', "");
        let hex: String = r.uuid.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(uuid, hex);
    }
}

/// 1 KiB and 2 KiB blocks (what mke2fs picks below 512 MiB): the layout e2fsck expects
/// (superblock in block 1 and 8192-block groups with 1 KiB blocks), clean before and after
/// cjfs writes files, directories and a long symlink into it.
#[test]
fn mkfs_small_blocks_e2fsck_clean() {
    use cjfs_fs::{Fs, MountOptions};
    for bs in [1024usize, 2048] {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("fs.img");
        let r = make_bs(&img, 64 << 20, bs, &MkfsOptions::default());
        assert_eq!(r.block_count, (64 << 20) / bs as u64);
        assert_eq!(r.superblock.block_size() as usize, bs);
        assert_eq!(r.superblock.first_data_block, u32::from(bs == 1024));
        assert_eq!(r.superblock.blocks_per_group as usize, 8 * bs);
        if !e2fsck_clean(&img) {
            return;
        }
        if let Some(d) = dumpe2fs_h(&img) {
            assert_eq!(field(&d, "Block size"), bs.to_string());
            assert_eq!(field(&d, "First block"), u32::from(bs == 1024).to_string());
        }
        let dev = std::sync::Arc::new(
            FileDevice::open(&img, FileDeviceOptions { block_size: bs, ..Default::default() }).unwrap(),
        );
        let fs = Fs::open(dev, MountOptions::default()).expect("mount");
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for i in 0..200u32 {
            let f = fs.create(d.ino, format!("file-{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
            fs.write(f.ino, 0, &data[..(i as usize * 1500) % data.len()]).unwrap();
        }
        let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
        fs.write(big.ino, 0, &data).unwrap();
        fs.symlink(ROOT_INO, b"long", &[b'x'; 900], 0, 0).unwrap();
        fs.setxattr(big.ino, b"user.k", &[7u8; 600], cjfs_fs::XattrFlags::Create).unwrap();
        fs.unlink(d.ino, b"file-0007").unwrap();
        fs.unmount().unwrap();
        assert!(e2fsck_clean(&img), "{bs}-byte blocks after cjfs wrote");
    }
}

#[test]
fn mkfs_1gib_sparse_e2fsck_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    let r = make(&img, 1 << 30, &MkfsOptions::default());
    assert_eq!(r.group_count, 8);
    assert_eq!(r.inodes_per_group, 8192);
    assert_eq!(r.journal_blocks, 8192);
    if !e2fsck_clean(&img) {
        return;
    }
    if let Some(d) = dumpe2fs_h(&img) {
        assert_eq!(field(&d, "Filesystem features"), FEATURES_64);
        assert_eq!(field(&d, "Block count"), "262144");
        assert_eq!(field(&d, "Inode count"), "65536");
        assert_eq!(field(&d, "Total journal blocks"), "8192");
    }
}

#[test]
fn mkfs_without_64bit_and_odd_size() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    // 5 groups and a bit: the last group is short but kept
    let bytes = (4 * 32768 + 20000) * 4096u64;
    let opts = MkfsOptions { sixty_four_bit: false, flex_bg_size: 2, ..Default::default() };
    let r = make(&img, bytes, &opts);
    assert_eq!(r.group_count, 5);
    assert_eq!(r.block_count, 4 * 32768 + 20000);
    assert_eq!(r.superblock.desc_size(), 32);
    if !e2fsck_clean(&img) {
        return;
    }
    if let Some(d) = dumpe2fs_h(&img) {
        assert_eq!(field(&d, "Filesystem features"), FEATURES_32);
        assert_eq!(field(&d, "Flex block group size"), "2");
    }
}

#[test]
fn mkfs_short_last_group_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    let r = make(&img, (3 * 32768 + 40) * 4096, &MkfsOptions::default());
    assert_eq!(r.block_count, 3 * 32768);
    e2fsck_clean(&img);
}

#[test]
fn mkfs_big_journal_needs_an_index_block() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    // 2 GiB, journal of 200000 blocks: 7 extents of at most 32768 blocks -> depth 1
    let opts = MkfsOptions { journal_blocks: Some(200_000), assume_zeroed: true, ..Default::default() };
    let r = make(&img, 2 << 30, &opts);
    assert!(r.journal_index_block.is_some(), "{:?}", r.journal_runs);
    let total: u64 = r.journal_runs.iter().map(|&(_, n)| n).sum();
    assert_eq!(total, 200_000);
    if !e2fsck_clean(&img) {
        return;
    }
    if let Some(d) = dumpe2fs_h(&img) {
        assert_eq!(field(&d, "Total journal blocks"), "200000");
    }
}

#[test]
fn mkfs_minimum_size_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    let r = make(&img, 16 << 20, &MkfsOptions { flex_bg_size: 1, ..Default::default() });
    assert_eq!(r.block_count, 4096);
    e2fsck_clean(&img);

    let small = EmulatedSsd::ram(4095);
    match mkfs(&small, &MkfsOptions::default()) {
        Err(FsError::Invalid(m)) => assert!(m.contains("16773120 bytes"), "{m}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    let dev = EmulatedSsd::ram(8192);
    let bad = MkfsOptions { label: "x".repeat(17), ..Default::default() };
    assert!(matches!(mkfs(&dev, &bad), Err(FsError::Invalid(_))));
    let bad = MkfsOptions { flex_bg_size: 3, ..Default::default() };
    assert!(matches!(mkfs(&dev, &bad), Err(FsError::Invalid(_))));
    let bad = MkfsOptions { journal_blocks: Some(5000), ..Default::default() };
    assert!(matches!(mkfs(&dev, &bad), Err(FsError::Invalid(_))));
}

#[test]
fn mkfs_on_emulated_device_reads_back() {
    let dev = EmulatedSsd::ram(100_000);
    let opts = MkfsOptions { assume_zeroed: true, uuid: Some([7; 16]), ..Default::default() };
    let r = mkfs(&dev, &opts).unwrap();
    let (sb, descs) = read_layout(&dev).unwrap();
    assert_eq!(sb.uuid, [7; 16]);
    assert_eq!(descs.len(), r.group_count as usize);
    check_structures(&dev, &r);
}

#[test]
fn read_layout_rejects_garbage() {
    let dev = EmulatedSsd::ram(8192);
    match read_layout(&dev) {
        Err(FsError::Corrupt(m)) => {
            assert!(m.contains("not an ext2/3/4 file system: bad magic 0x0000"), "{m}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn mkfs_dense_inodes_spill_flex_metadata_into_next_group() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    // 32768 inodes per group: 16 inode tables of 2048 blocks do not fit one group
    let opts = MkfsOptions { inode_ratio: 4096, assume_zeroed: true, ..Default::default() };
    let r = make(&img, 2 << 30, &opts);
    assert_eq!(r.inodes_per_group, 32768);
    let last = r.groups.last().unwrap();
    assert!(last.inode_table + r.inode_table_blocks as u64 > 32768, "no spill: {last:?}");
    e2fsck_clean(&img);
}
