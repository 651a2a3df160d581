//! Crash consistency on layouts e2fsprogs makes and cjfs converts when it first changes them.
//!
//! - Block-mapped files of an upgraded ext3 file system: an image made by `mke2fs -t ext3`,
//!   filled by `debugfs` and given `extent` by `tune2fs` (what an upgrade to ext4 does), is
//!   the base image of a workload that converts block-mapped files and a directory to
//!   extents (overwrite, partial truncate, a growing directory), frees one (unlink, truncate
//!   to zero) and fsyncs between. The journal is ext3's own, a block-mapped inode.
//! - Inline data: an `inline_data` image filled by `mke2fs -d` (small files and directories
//!   in their inodes) is the base of a workload that changes inline files and directories in
//!   place (shrink, unlink, new entries in `i_block` and a grown `system.data`, `..` of a
//!   moved directory), moves them into blocks (append, growth, an entry that no longer
//!   fits), frees them (unlink, rmdir) and fsyncs between.
//! - EA inodes: on an `ea_inode` image, attribute values kept in inodes of their own are
//!   made, replaced, removed and freed with their file.
//!
//! Every crash state must recover to a state the operations allow, and e2fsck must find it
//! clean, under every preset that runs on a file system made by mke2fs. Skipped with a
//! message without mke2fs, debugfs, tune2fs or e2fsck.
//!
//! Run in release mode: `cargo test --release -p cjfs-lab --test crash_ext3`.

use std::path::Path;
use std::process::Command;

use cjfs_lab::crash::workloads::Op;
use cjfs_lab::crash::{self, BaseCache, CrashConfig, Workload};

fn tool(name: &str) -> Option<String> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| Path::new(p).exists())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run tool");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The upgraded ext3 image, `blocks` 4 KiB blocks.
fn ext3_image(dir: &Path, blocks: u64) -> Option<Vec<u8>> {
    let (Some(mke2fs), Some(debugfs), Some(tune2fs)) = (tool("mke2fs"), tool("debugfs"), tool("tune2fs"))
    else {
        eprintln!("SKIP: mke2fs, debugfs or tune2fs not installed");
        return None;
    };
    let img = dir.join("ext3.img");
    run(Command::new(mke2fs)
        .args(["-q", "-F", "-t", "ext3", "-b", "4096", "-J", "size=4"])
        .arg(&img)
        .arg(format!("{blocks}")));
    // 4 KiB blocks: 12 direct, then the single-indirect level; 300 KiB is 75 blocks.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(dir.join("big"), &big).expect("write");
    std::fs::write(dir.join("small"), vec![b'x'; 6000]).expect("write");
    let mut cmds =
        format!("write {0} big\nwrite {0} big2\nwrite {0} big3\nmkdir d\n", dir.join("big").display());
    for i in 0..150 {
        cmds += &format!("write {} d/f{i}\n", dir.join("small").display());
    }
    let script = dir.join("cmds");
    std::fs::write(&script, cmds).expect("write script");
    run(Command::new(debugfs).arg("-w").arg("-f").arg(&script).arg(&img));
    run(Command::new(tune2fs).args(["-O", "extent"]).arg(&img));
    Some(std::fs::read(&img).expect("read image"))
}

#[test]
fn block_mapped_conversion_is_crash_consistent() {
    if !crash::check::e2fsck_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmpdir");
    let Some(image) = ext3_image(dir.path(), crash::record::image_blocks(1)) else { return };
    let w = |path: &str, off: u64, len: u64, seed: u32| Op::Write { path: path.into(), off, len, seed };
    let fsync = |path: &str| Op::Fsync { path: path.into() };
    let ops = vec![
        w("big", 100_000, 5000, 1),
        fsync("big"),
        Op::Truncate { path: "big2".into(), size: 70_000 },
        Op::Creat { path: "d/new1".into() },
        Op::Creat { path: "d/new2".into() },
        fsync("d/new2"),
        Op::Unlink { path: "d/f3".into() },
        Op::Truncate { path: "big3".into(), size: 0 },
        w("big3", 0, 9000, 2),
        fsync("big3"),
        Op::Unlink { path: "big".into() },
    ];
    let wl = Workload::sequential("ext3-block-mapped", Vec::new(), ops);
    run_every_preset(&wl, &image);
}

/// An ext4 image `name` of `blocks` 4 KiB blocks with a 4 MiB journal made by
/// `mke2fs -I <inode_size> -O <features>`, filled from `src` when given (`-d`).
fn mke2fs_image(
    dir: &Path,
    name: &str,
    inode_size: &str,
    features: &str,
    src: Option<&Path>,
    blocks: u64,
) -> Option<Vec<u8>> {
    let Some(mke2fs) = tool("mke2fs") else {
        eprintln!("SKIP: mke2fs not installed");
        return None;
    };
    let img = dir.join(name);
    let mut cmd = Command::new(mke2fs);
    cmd.args(["-q", "-F", "-t", "ext4", "-b", "4096", "-I", inode_size, "-J", "size=4", "-O", features]);
    if let Some(src) = src {
        cmd.arg("-d").arg(src);
    }
    run(cmd.arg(&img).arg(format!("{blocks}")));
    Some(std::fs::read(&img).expect("read image"))
}

/// Extended attribute values in EA inodes (`ea_inode`): made (a value too large for a
/// block, one that no longer fits beside others), replaced, removed and freed with their
/// file, fsyncs between; the EA inode, its journalled data, its reference count and the
/// owner's `i_blocks` must agree in every crash state.
#[test]
fn ea_inode_changes_are_crash_consistent() {
    if !crash::check::e2fsck_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmpdir");
    let blocks = crash::record::image_blocks(1);
    let Some(image) = mke2fs_image(dir.path(), "ea.img", "256", "ea_inode", None, blocks) else { return };
    let set = |path: &str, name: &str, len: u32, seed: u32| Op::SetXattr {
        path: path.into(),
        name: name.into(),
        len,
        seed,
    };
    let fsync = |path: &str| Op::Fsync { path: path.into() };
    let ops = vec![
        Op::Creat { path: "a".into() },
        set("a", "user.big", 10_000, 1),
        fsync("a"),
        set("a", "user.s", 10, 2),
        set("a", "user.big", 12_000, 3),
        fsync("a"),
        Op::Creat { path: "b".into() },
        set("b", "user.c", 1500, 4),
        set("b", "user.d", 1500, 5),
        set("b", "user.e", 1500, 6),
        fsync("b"),
        Op::RemoveXattr { path: "a".into(), name: "user.big".into() },
        fsync("a"),
        set("b", "user.f", 20_000, 7),
        Op::Unlink { path: "b".into() },
        Op::Creat { path: "c".into() },
        set("c", "user.g", 30_000, 8),
        fsync("c"),
    ];
    let wl = Workload::sequential("ea-inode", Vec::new(), ops);
    run_every_preset(&wl, &image);
}

/// Quota usage (`quota,project`, with `ea_inode`): files made, grown, truncated, given new
/// owners (ids the quota files have no entry for yet, so entries and tree blocks are
/// inserted), given an attribute in an EA inode (one more inode charged), unlinked while a
/// later fsync makes it all durable; in every crash state e2fsck recounts each user's,
/// group's and project's usage and must find the quota files agreeing.
#[test]
fn quota_usage_is_crash_consistent() {
    if !crash::check::e2fsck_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmpdir");
    let blocks = crash::record::image_blocks(1);
    let Some(image) = mke2fs_image(dir.path(), "quota.img", "256", "quota,project,ea_inode", None, blocks)
    else {
        return;
    };
    let write = |path: &str, off: u64, len: u64, seed: u32| Op::Write { path: path.into(), off, len, seed };
    let chown = |path: &str, uid: u32, gid: u32| Op::Chown { path: path.into(), uid, gid };
    let fsync = |path: &str| Op::Fsync { path: path.into() };
    let ops = vec![
        Op::Creat { path: "a".into() },
        write("a", 0, 20_000, 1),
        fsync("a"),
        chown("a", 1000, 1000),
        Op::Creat { path: "b".into() },
        write("b", 0, 70_000, 2),
        chown("b", 0x0101_0203, 77),
        fsync("b"),
        Op::SetXattr { path: "a".into(), name: "user.big".into(), len: 9000, seed: 3 },
        Op::Truncate { path: "a".into(), size: 5000 },
        fsync("a"),
        Op::Mkdir { path: "d".into() },
        Op::Creat { path: "d/c".into() },
        write("d/c", 0, 12_000, 4),
        chown("d/c", 1000, 0x00ff_fffe),
        Op::Unlink { path: "b".into() },
        fsync("d/c"),
        chown("a", 0, 0),
        Op::Unlink { path: "a".into() },
        Op::Sync,
    ];
    let wl = Workload::sequential("quota", Vec::new(), ops);
    run_every_preset(&wl, &image);
}

/// A casefolded directory (`casefold`, `+F` set by debugfs on `cf`): enough names in many
/// scripts to make it indexed, fsyncs, unlinks and renames, under every preset; in each
/// crash state e2fsck recomputes every name's casefolded hash (a name hashed as bytes, or
/// put in the wrong leaf, is an error) and the model checks each name is where it belongs.
#[test]
fn casefolded_directory_changes_are_crash_consistent() {
    if !crash::check::e2fsck_or_skip() {
        return;
    }
    let Some(debugfs) = tool("debugfs") else {
        eprintln!("SKIP: debugfs not installed");
        return;
    };
    let dir = tempfile::tempdir().expect("tmpdir");
    let blocks = crash::record::image_blocks(1);
    let Some(image) = mke2fs_image(dir.path(), "cf.img", "256", "casefold", None, blocks) else { return };
    let img = dir.path().join("cf.img");
    std::fs::write(&img, &image).expect("write image");
    run(Command::new(&debugfs).args(["-w", "-R", "mkdir cf"]).arg(&img));
    run(Command::new(&debugfs).args(["-w", "-R", "set_inode_field cf flags 0x40080000"]).arg(&img));
    let image = std::fs::read(&img).expect("read image");
    let stems = [
        "Stra\u{DF}e",
        "\u{C9}cole",
        "\u{3A3}\u{3AF}\u{3C3}\u{3C5}\u{3C6}\u{3BF}\u{3C2}",
        "\u{D55C}\u{AE00}",
        "Caf\u{E9}\u{1F600}",
    ];
    let name =
        |i: usize| format!("cf/{}-{i:03}-a-name-long-enough-to-fill-blocks-quickly", stems[i % stems.len()]);
    let mut ops = vec![Op::Mkdir { path: "cf/Sub".into() }];
    for i in 0..120 {
        ops.push(Op::Creat { path: name(i) });
        if i % 40 == 39 {
            ops.push(Op::Fsync { path: name(i) });
        }
    }
    for i in (0..120).step_by(9) {
        ops.push(Op::Unlink { path: name(i) });
    }
    ops.push(Op::Rename { from: name(1), to: "cf/Sub/Moved".into() });
    ops.push(Op::Fsync { path: "cf/Sub/Moved".into() });
    ops.push(Op::Rename { from: name(2), to: name(200) });
    ops.push(Op::Fsync { path: "cf".into() });
    let wl = Workload::sequential("casefold", Vec::new(), ops);
    run_every_preset(&wl, &image);
}

/// Run `wl` on base image `image` under every preset that runs on a file system mke2fs made.
fn run_every_preset(wl: &Workload, image: &[u8]) {
    for mode in ["jbd2", "cjfs", "ijournal", "joj", "adaptive", "zjournal+logs=1"] {
        let cfg = CrashConfig::new(mode);
        let bases = BaseCache::default();
        bases.insert(&cfg, &[], image.to_vec()).expect("base image");
        let r = crash::run_workload(&cfg, wl, &bases, false);
        eprintln!(
            "{} {mode}: {} states, {} violations, e2fsck {} failed of {}{}",
            wl.name,
            r.states,
            r.violations,
            r.e2fsck_failures,
            r.e2fsck_runs,
            r.error.as_deref().map(|e| format!(", error: {e}")).unwrap_or_default()
        );
        assert!(r.error.is_none(), "{mode}: {:?}", r.error);
        assert!(r.states > 50, "{mode}: only {} crash states", r.states);
        assert_eq!(r.violations, 0, "{mode}: {:?}", r.details);
        assert_eq!(r.e2fsck_failures, 0, "{mode}");
    }
}

/// An `inline_data` image of `blocks` 4 KiB blocks filled by `mke2fs -d`: files of 50 to
/// 300 bytes and small directories, all kept in their 512-byte inodes.
fn inline_image(dir: &Path, blocks: u64) -> Option<Vec<u8>> {
    let src = dir.join("src");
    for d in ["d", "a/inner", "b"] {
        std::fs::create_dir_all(src.join(d)).expect("mkdir");
    }
    for (name, len) in [("s1", 100usize), ("s2", 200), ("s3", 50), ("s4", 300)] {
        std::fs::write(src.join(name), vec![name.as_bytes()[1]; len]).expect("write");
    }
    for n in ["n0", "n1", "n2"] {
        std::fs::write(src.join("d").join(n), n).expect("write");
    }
    std::fs::write(src.join("a/inner/z"), b"z").expect("write");
    mke2fs_image(dir, "inline.img", "512", "inline_data", Some(&src), blocks)
}

#[test]
fn inline_data_changes_are_crash_consistent() {
    if !crash::check::e2fsck_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmpdir");
    let Some(image) = inline_image(dir.path(), crash::record::image_blocks(1)) else { return };
    let w = |path: &str, off: u64, len: u64, seed: u32| Op::Write { path: path.into(), off, len, seed };
    let fsync = |path: &str| Op::Fsync { path: path.into() };
    let ops = vec![
        w("s1", 100, 50, 1),
        fsync("s1"),
        Op::Truncate { path: "s2".into(), size: 80 },
        fsync("s2"),
        // In place first: a removal, a repointed name, a new entry in i_block, one in a
        // system.data grown for it; then one that fits neither moves the directory into a
        // block (a 512-byte inode holds 324 bytes of system.data).
        Op::Unlink { path: "d/n1".into() },
        Op::Rename { from: "d/n0".into(), to: "d/n2".into() },
        fsync("d"),
        Op::Creat { path: "d/new".into() },
        fsync("d/new"),
        Op::Creat { path: format!("d/{}", "l".repeat(120)) },
        fsync("d"),
        Op::Creat { path: format!("d/{}", "m".repeat(220)) },
        fsync("d"),
        Op::Rename { from: "a/inner".into(), to: "b/inner".into() },
        Op::Rmdir { path: "a".into() },
        fsync("b/inner"),
        Op::Truncate { path: "s3".into(), size: 0 },
        w("s3", 0, 9000, 2),
        fsync("s3"),
        // Grown: its 300 bytes move into a block no write covers.
        Op::Truncate { path: "s4".into(), size: 5000 },
        fsync("s4"),
        Op::Unlink { path: "s2".into() },
    ];
    let wl = Workload::sequential("inline-data", Vec::new(), ops);
    run_every_preset(&wl, &image);
}
