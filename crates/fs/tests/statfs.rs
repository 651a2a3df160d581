//! `statfs` reports what the kernel's ext4 reports for the same image (`df` agrees): the
//! total without the metadata overhead, free blocks, and the blocks unprivileged callers may
//! use (root reserve and ext4's 2 % / 4096-block reserve held back). Skipped with a message
//! without root, loop devices or the tools.

mod common;
#[path = "common/kernel.rs"]
mod kernel;

use std::process::Command;

use std::sync::Arc;

use cjfs_blockdev::{FileDevice, FileDeviceOptions};
use common::mount;

#[test]
fn statfs_matches_the_kernels_for_mke2fs_images() {
    if let Err(why) = kernel::kernel_env() {
        println!("SKIP: statfs_matches_the_kernels_for_mke2fs_images: {why}");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    for (mib, extra) in [(64u64, vec![]), (1024, vec![]), (300, vec!["-b", "2048", "-O", "^flex_bg"])] {
        let img = dir.path().join(format!("s{mib}.img"));
        std::fs::File::create(&img).expect("create").set_len(mib << 20).expect("size");
        let o = kernel::run(
            "mke2fs",
            ["-q", "-F", "-t", "ext4"]
                .iter()
                .copied()
                .chain(extra.iter().copied())
                .chain([img.to_str().unwrap()]),
        );
        assert_eq!(o.code, 0, "mke2fs: {}", o.text());
        let block_size = cjfs_fs::ondisk::superblock::probe_block_size(&img).expect("block size");
        let dev =
            FileDevice::open(&img, FileDeviceOptions { block_size, ..Default::default() }).expect("open");
        let fs = mount(Arc::new(dev));
        let ours = fs.statfs();
        fs.unmount().expect("unmount");
        let lo = kernel::LoopDev::attach(&img, true).expect("loop");
        let mnt = dir.path().join(format!("m{mib}"));
        std::fs::create_dir_all(&mnt).expect("mkdir");
        let km = kernel::KMount::mount(&lo, &mnt, "ro,noload").expect("kernel mount");
        let out = Command::new("stat").args(["-f", "-c", "%S %b %f %a"]).arg(&mnt).output().expect("stat -f");
        drop(km);
        let k: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|v| v.parse().expect("number"))
            .collect();
        assert_eq!(
            (u64::from(ours.bsize), ours.blocks, ours.bfree, ours.bavail),
            (k[0], k[1], k[2], k[3]),
            "{mib} MiB {extra:?}: (bsize, blocks, bfree, bavail) against the kernel's"
        );
    }
}
