//! Decoding garbage never panics: every decode function and every pure helper that walks
//! on-disk bytes is fed random bytes (and mutated valid structures) and must return either a
//! value or an error.

use proptest::prelude::*;

use cjfs_fs::FsResult;
use cjfs_fs::ondisk::bitmap;
use cjfs_fs::ondisk::dirent;
use cjfs_fs::ondisk::extent::ExtentNode;
use cjfs_fs::ondisk::features;
use cjfs_fs::ondisk::group_desc::GroupDesc;
use cjfs_fs::ondisk::htree::{self, DxNode, DxRoot};
use cjfs_fs::ondisk::inode::Inode;
use cjfs_fs::ondisk::superblock::Superblock;
use cjfs_fs::ondisk::xattr::{self, XattrBlock};

/// Apply random (offset, value) byte mutations.
fn mutate(mut b: Vec<u8>, muts: &[(usize, u8)]) -> Vec<u8> {
    if b.is_empty() {
        return b;
    }
    for &(o, v) in muts {
        let n = b.len();
        b[o % n] = v;
    }
    b
}

fn valid_sb() -> Vec<u8> {
    let mut sb = Superblock::blank();
    sb.blocks_count = 262144;
    sb.inodes_count = 65536;
    sb.log_block_size = 2;
    sb.log_cluster_size = 2;
    sb.blocks_per_group = 32768;
    sb.clusters_per_group = 32768;
    sb.inodes_per_group = 8192;
    sb.rev_level = 1;
    sb.first_ino = 11;
    sb.inode_size = 256;
    sb.desc_size = 64;
    sb.feature_compat = features::MKFS_COMPAT;
    sb.feature_incompat = features::MKFS_INCOMPAT;
    sb.feature_ro_compat = features::MKFS_RO_COMPAT | features::RO_COMPAT_GDT_CSUM;
    sb.log_groups_per_flex = 4;
    sb.to_bytes().to_vec()
}

fn exercise_sb(b: &[u8]) {
    if let Ok(sb) = Superblock::decode(b) {
        let _ = features::check_supported(&sb);
        let _ = features::feature_names(&sb);
        let _ = sb.to_bytes();
        let g = sb.group_count();
        for grp in [0, 1, g / 2, g.saturating_sub(1), g, u32::MAX] {
            let _ = sb.group_first_block(grp);
            let _ = sb.group_block_count(grp);
            let _ = sb.has_super_in_group(grp);
            let _ = sb.superblock_location(grp);
            let _ = sb.gdt_location(grp);
            let _ = sb.group_super_overhead(grp);
        }
        for ino in [0, 1, 11, sb.inodes_count, u32::MAX] {
            let _ = sb.inode_position(ino);
            let _ = sb.valid_ino(ino);
        }
        let _ = sb.gdt_blocks();
        let _ = sb.inode_table_blocks();
        let _ = sb.group_of_block(u64::MAX);
        let _ = sb.label();
        let gd = GroupDesc::decode(&b[..64]).unwrap();
        let _ = gd.validate(&sb, 0);
        let _ = gd.verify_checksum(&cjfs_fs::ondisk::csum::Csum::from_sb(&sb), 3);
        let _ = bitmap::uninit_block_bitmap(&sb, &gd, 0);
        let _ = bitmap::uninit_block_bitmap(&sb, &gd, g.saturating_sub(1));
        let _ = bitmap::uninit_inode_bitmap(&sb);
        let _ = htree::name_hash(&sb, b[0] % 8, b"name");
    }
}

fn valid_dir_block() -> Vec<u8> {
    let mut b = dirent::make_dot_block(12, 2, 4096).to_vec();
    for (i, n) in ["a", "bb", "ccc-ccc", "dddd"].iter().enumerate() {
        let off = dirent::find_space(&b, n.len()).unwrap().unwrap();
        dirent::insert(&mut b, off, 20 + i as u32, n.as_bytes(), 1).unwrap();
    }
    b
}

fn exercise_dir(b: &[u8]) {
    for e in dirent::iter(b).with_max_inode(1000) {
        if e.is_err() {
            break;
        }
    }
    let _ = dirent::validate_block(b, 1000);
    let _ = dirent::find(b, b"bb");
    let _ = dirent::find_space(b, 10);
    let _ = dirent::is_dx_node_block(b);
    let _ = dirent::is_empty_dir_block(b);
    let valid = dirent::validate_block(b, 1000).is_ok();
    let mut m = b.to_vec();
    let _ = dirent::remove(&mut m, b"ccc-ccc");
    let _ = dirent::set_inode(&mut m, b"a", 5, 1);
    if let Ok(Some(off)) = dirent::find_space(&m, 3) {
        dirent::insert(&mut m, off, 99, b"xyz", 1).unwrap();
        if valid {
            dirent::validate_block(&m, 1000).unwrap();
            assert_eq!(dirent::find(&m, b"xyz").unwrap().unwrap().inode, 99);
        }
    }
    let _ = dirent::insert(&mut m, b.len() / 2, 7, b"q", 1);
}

fn exercise_htree(b: &[u8]) {
    let _ = DxRoot::decode(b);
    let _ = DxNode::decode(b);
    let read = |l: u32| -> FsResult<Vec<u8>> {
        let mut v = b.to_vec();
        if !v.is_empty() {
            let n = v.len();
            v[l as usize % n] ^= 0x55;
        }
        Ok(v)
    };
    if let Ok(mut p) = htree::lookup_leaf(b, 0x1234_5678, read) {
        for _ in 0..4 {
            match p.next_leaf(0x1234_5678, read) {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
}

fn valid_xattr_block() -> Vec<u8> {
    let attrs = vec![
        (b"user.a".to_vec(), b"1".to_vec()),
        (b"security.selinux".to_vec(), b"system_u:object_r".to_vec()),
        (b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0, 1, 0, 6, 0]),
    ];
    xattr::build_block(&attrs, 1, 4096).unwrap()
}

fn valid_ibody() -> Vec<u8> {
    let attrs = vec![(b"user.x".to_vec(), b"hello".to_vec()), (b"trusted.y".to_vec(), vec![])];
    xattr::build_ibody(&attrs, 96).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn superblock_garbage(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
        if b.len() >= 1024 {
            exercise_sb(&b);
        } else {
            prop_assert!(Superblock::decode(&b).is_err());
        }
    }

    #[test]
    fn superblock_mutated(muts in proptest::collection::vec((0usize..1024, any::<u8>()), 0..6)) {
        exercise_sb(&mutate(valid_sb(), &muts));
    }

    #[test]
    fn group_desc_garbage(b in proptest::collection::vec(any::<u8>(), 0..130), n in 0u32..5) {
        if let Ok(d) = GroupDesc::decode(&b) {
            prop_assert_eq!(d.to_bytes(), b.clone());
        }
        let _ = GroupDesc::decode_table(&b, n, 32);
        let _ = GroupDesc::decode_table(&b, n, 64);
        let _ = GroupDesc::decode_table(&b, n, 0);
    }

    #[test]
    fn inode_garbage(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(i) = Inode::decode(&b) {
            prop_assert_eq!(i.to_bytes(), b.clone());
            let _ = i.xattr_area();
            let _ = xattr::parse_ibody(i.xattr_area());
            let _ = ExtentNode::decode(&i.block);
            let _ = i.rdev();
            let _ = i.blocks_512(true, 4096);
        }
    }

    #[test]
    fn extent_garbage(b in proptest::collection::vec(any::<u8>(), 0..200), magic in any::<bool>()) {
        let mut b = b;
        if magic && b.len() >= 2 {
            b[0] = 0x0A;
            b[1] = 0xF3;
        }
        if let Ok(n) = ExtentNode::decode(&b) {
            let _ = n.find_extent(5);
            let _ = n.find_index(5);
            let mut out = b.clone();
            n.encode_into(&mut out);
            prop_assert_eq!(ExtentNode::decode(&out).unwrap(), n);
        }
    }

    #[test]
    fn dirent_garbage(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        exercise_dir(&b);
        exercise_htree(&b);
    }

    #[test]
    fn dirent_mutated(muts in proptest::collection::vec((0usize..4096, any::<u8>()), 0..6)) {
        let b = mutate(valid_dir_block(), &muts);
        exercise_dir(&b);
        exercise_htree(&b);
    }

    #[test]
    fn htree_mutated(muts in proptest::collection::vec((0usize..64, any::<u8>()), 0..4)) {
        let mut b = DxRoot::new_block(12, 2, htree::DX_HASH_TEA, 1, 4096).to_vec();
        if let Ok(mut r) = DxRoot::decode(&b) {
            r.entries.push(htree::DxEntry { hash: 0x1234_5679, block: 2 });
            r.indirect_levels = 1;
            r.encode_into(&mut b);
        }
        exercise_htree(&mutate(b, &muts));
    }

    #[test]
    fn xattr_garbage(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = xattr::parse_ibody(&b);
        let _ = XattrBlock::decode(&b);
        let mut m = b.clone();
        if m.len() >= 4 {
            m[..4].copy_from_slice(&xattr::XATTR_MAGIC.to_le_bytes());
            let _ = xattr::parse_ibody(&m);
        }
        if m.len() >= 12 {
            m[8..12].copy_from_slice(&1u32.to_le_bytes());
            let _ = XattrBlock::decode(&m);
        }
    }

    #[test]
    fn xattr_mutated(muts in proptest::collection::vec((0usize..4096, any::<u8>()), 0..6)) {
        let _ = XattrBlock::decode(&mutate(valid_xattr_block(), &muts));
        let _ = xattr::parse_ibody(&mutate(valid_ibody(), &muts));
    }

    #[test]
    fn bitmap_random(b in proptest::collection::vec(any::<u8>(), 0..64), s in 0usize..600, l in 0usize..600) {
        let mut b = b;
        let _ = bitmap::find_zero(&b, s, s + l);
        let _ = bitmap::find_set(&b, s, s + l);
        let _ = bitmap::find_zero_run(&b, s, 600, l % 20);
        let _ = bitmap::find_zero_from_goal(&b, s, l);
        let _ = bitmap::count_set_range(&b, s, l);
        let _ = bitmap::range_is_clear(&b, s, l);
        bitmap::set_range(&mut b, s, l);
        prop_assert!(bitmap::range_is_set(&b, s, l));
        bitmap::clear_range(&mut b, s, l);
        let n = b.len() * 8;
        if s + l <= n {
            prop_assert!(bitmap::range_is_clear(&b, s, l));
        }
        bitmap::pad_block_bitmap(&mut b, s);
        prop_assert!(bitmap::padding_ok(&b, s));
    }

    #[test]
    fn hashes_never_panic(name in proptest::collection::vec(any::<u8>(), 0..300), v in 0u8..8, seed in any::<[u32; 4]>()) {
        if let Ok((h, _)) = htree::dirhash(v, &name, &seed) {
            prop_assert_eq!(h & 1, 0);
        }
    }
}
