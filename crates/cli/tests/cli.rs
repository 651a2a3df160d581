//! End-to-end tests of the `cjfs` binary: each test runs the built binary on images in a
//! temporary directory. Checks that need e2fsprogs (`e2fsck`, `debugfs`, `mke2fs`) print
//! `SKIP` and pass when the tools are missing.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{FileDevice, FileDeviceOptions};
use cjfs_fs::{Fs, MountOptions, ROOT_INO};
use common::*;

#[test]
fn mkfs_makes_an_image_e2fsck_accepts() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("a.img");
    let o = ok(&["mkfs", s(&img), "--size", "64M", "--label", "test", "--journal-blocks", "2048"]);
    let out = text(&o.stdout);
    for want in ["16384 blocks", "groups:", "inodes:", "journal:     2048 blocks", "label:       test"] {
        assert!(out.contains(want), "mkfs summary lacks {want:?}:\n{out}");
    }
    assert_eq!(std::fs::metadata(&img).expect("stat").len(), 64 << 20);
    assert_e2fsck_clean(&img);
    let info = text(&ok(&["info", s(&img)]).stdout);
    for want in [
        "State:                 clean",
        "has_journal",
        "extent",
        "Label:                 test",
        "nothing to replay",
    ] {
        assert!(info.contains(want), "info lacks {want:?}:\n{info}");
    }
    // A larger one with a custom inode ratio.
    let big = dir.path().join("b.img");
    ok(&["mkfs", s(&big), "--size", "1G", "--inode-ratio", "64K"]);
    assert_e2fsck_clean(&big);
    ok(&["check", s(&big)]);
}

#[test]
fn files_and_directories_are_visible_to_e2fsprogs() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    let local = dir.path().join("hello.txt");
    std::fs::write(&local, b"hello, world\n").expect("write local");
    ok(&["mkdir", s(&img), "/docs"]);
    ok(&["mkdir", s(&img), "/deep/er/still", "-p"]);
    ok(&["put", s(&img), s(&local), "/docs/hello.txt"]);
    ok(&["put", s(&img), s(&local), "/"]); // into a directory: keeps the name
    let o = cjfs_in(&["put", s(&img), "-", "/from-stdin"], b"piped data");
    assert!(o.status.success(), "put from stdin: {}", text(&o.stderr));
    assert_e2fsck_clean(&img);
    let Some(debugfs) = tool("debugfs") else {
        println!("SKIP: debugfs not installed");
        return;
    };
    let o = Command::new(debugfs).args(["-R", "ls -l /"]).arg(&img).output().expect("debugfs");
    let listing = text(&o.stdout);
    for name in ["docs", "deep", "hello.txt", "from-stdin", "lost+found"] {
        assert!(listing.contains(name), "debugfs ls -l / lacks {name}:\n{listing}");
    }
    let o = Command::new(tool("debugfs").expect("debugfs"))
        .args(["-R", "cat /from-stdin"])
        .arg(&img)
        .output()
        .expect("cat");
    assert_eq!(o.stdout, b"piped data");
}

#[test]
fn put_get_cat_round_trip_3mib() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    let data = random_bytes(3 << 20, 7);
    let local = dir.path().join("r.bin");
    std::fs::write(&local, &data).expect("write");
    ok(&["mkdir", s(&img), "/d"]);
    ok(&["put", s(&img), s(&local), "/d/r.bin"]);
    let back = dir.path().join("back.bin");
    ok(&["get", s(&img), "/d/r.bin", s(&back)]);
    assert!(std::fs::read(&back).expect("read back") == data, "get returned different bytes");
    let o = ok(&["cat", s(&img), "d/r.bin"]);
    assert!(o.stdout == data, "cat returned different bytes ({} bytes)", o.stdout.len());
    // Overwrite with a shorter file through stdin: the target is truncated.
    let o = cjfs_in(&["put", s(&img), "-", "/d/r.bin"], b"short");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(ok(&["cat", s(&img), "/d/r.bin"]).stdout, b"short");
    // And back to the big one; get to stdout.
    ok(&["put", s(&img), s(&local), "/d/r.bin"]);
    assert!(ok(&["get", s(&img), "/d/r.bin", "-"]).stdout == data);
    assert_e2fsck_clean(&img);
    ok(&["check", s(&img)]);
}

#[test]
fn ls_stat_mv_rm_ln() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    let local = dir.path().join("f");
    std::fs::write(&local, b"12345").expect("write");
    ok(&["mkdir", s(&img), "/a/b", "-p"]);
    ok(&["put", s(&img), s(&local), "/a/f"]);
    let o = text(&ok(&["ls", s(&img)]).stdout);
    assert_eq!(o, "a\nlost+found\n");
    let o = text(&ok(&["ls", s(&img), "/a", "-l"]).stdout);
    let f_line = o.lines().find(|l| l.ends_with(" f")).expect("f listed");
    let cols: Vec<&str> = f_line.split_whitespace().collect();
    assert_eq!(cols[0], "-rw-r--r--", "{f_line}");
    assert_eq!(cols[1], "1", "links: {f_line}");
    assert_eq!(cols[4], "5", "size: {f_line}");
    assert!(o.lines().any(|l| l.starts_with('d') && l.ends_with(" b")), "{o}");
    let st = text(&ok(&["stat", s(&img), "/a/f"]).stdout);
    for want in [
        "Type: regular file",
        "Size: 5",
        "Links: 1",
        "Modify:",
        "Change:",
        "Birth:",
        "Flags: 0x00080000 (extents)",
        "Extents (1)",
    ] {
        assert!(st.contains(want), "stat lacks {want:?}:\n{st}");
    }
    ok(&["mv", s(&img), "/a/f", "/a/b"]);
    assert_eq!(text(&ok(&["ls", s(&img), "/a/b"]).stdout), "f\n");
    ok(&["mv", s(&img), "/a/b/f", "/g"]);
    assert_eq!(ok(&["cat", s(&img), "/g"]).stdout, b"12345");
    ok(&["ln", s(&img), "/g", "/h"]);
    ok(&["ln", s(&img), "-s", "/g", "/sym"]);
    assert_eq!(ok(&["cat", s(&img), "/sym"]).stdout, b"12345");
    assert!(text(&ok(&["stat", s(&img), "/g"]).stdout).contains("Links: 2"));
    assert!(text(&ok(&["ls", s(&img), "-l", "/sym"]).stdout).contains("/sym -> /g"));
    fails(&["rm", s(&img), "/a"], "not empty");
    fails(&["rm", s(&img), "/nope"], "no such file");
    fails(&["cat", s(&img), "/a"], "is a directory");
    fails(&["mkdir", s(&img), "/a"], "exists");
    ok(&["rm", s(&img), "/a", "-r"]);
    ok(&["rm", s(&img), "/h"]);
    ok(&["rm", s(&img), "/sym"]);
    ok(&["mkdir", s(&img), "/empty"]);
    ok(&["rm", s(&img), "/empty"]);
    assert_eq!(text(&ok(&["ls", s(&img)]).stdout), "g\nlost+found\n");
    assert_e2fsck_clean(&img);
    ok(&["check", s(&img)]);
}

/// Names inside the image are bytes, as in the kernel: every file command takes a path that
/// is not UTF-8 (a Latin-1 name here), `ls` prints it as stored, a symbolic link may hold
/// such a target, and messages show it lossily.
#[test]
fn names_that_are_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    let local = dir.path().join("f");
    std::fs::write(&local, b"caf\xe9 au lait").expect("write");
    let run = |args: &[&[u8]]| -> std::process::Output {
        let o =
            Command::new(bin()).args(args.iter().map(|a| OsStr::from_bytes(a))).output().expect("spawn cjfs");
        assert!(
            o.status.success(),
            "cjfs {:?}: {}",
            args.iter().map(|a| text(a)).collect::<Vec<_>>(),
            text(&o.stderr)
        );
        o
    };
    let im = img.as_os_str().as_bytes();
    run(&[b"mkdir", im, b"/d\xff/sub", b"-p"]);
    run(&[b"put", im, local.as_os_str().as_bytes(), b"/d\xff/caf\xe9"]);
    assert_eq!(run(&[b"ls", im, b"/d\xff"]).stdout, b"caf\xe9\nsub\n");
    assert_eq!(run(&[b"cat", im, b"/d\xff/caf\xe9"]).stdout, b"caf\xe9 au lait");
    let st = text(&run(&[b"stat", im, b"/d\xff/caf\xe9"]).stdout);
    assert!(st.contains("File: /d\u{fffd}/caf\u{fffd}"), "{st}");
    run(&[b"mv", im, b"/d\xff/caf\xe9", b"/d\xff/sub/th\xe9"]);
    run(&[b"ln", im, b"-s", b"sub/th\xe9", b"/d\xff/lien\xe0"]);
    assert_eq!(run(&[b"cat", im, b"/d\xff/lien\xe0"]).stdout, b"caf\xe9 au lait");
    let out = dir.path().join("out");
    run(&[b"get", im, b"/d\xff/sub/th\xe9", out.as_os_str().as_bytes()]);
    assert_eq!(std::fs::read(&out).expect("read"), b"caf\xe9 au lait");
    let o = Command::new(bin())
        .arg("cat")
        .arg(&img)
        .arg(OsStr::from_bytes(b"/d\xff/nope\xe9"))
        .output()
        .expect("cjfs");
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("/d\u{fffd}/nope\u{fffd}"), "{}", text(&o.stderr));
    run(&[b"rm", im, b"/d\xff", b"-r"]);
    assert_eq!(text(&ok(&["ls", s(&img)]).stdout), "lost+found\n");
    assert_e2fsck_clean(&img);
}

/// Every refused image: one clean error line and not a byte changed, for every command.
/// [`fails`], and the image is byte-identical afterwards.
fn fails_unchanged(img: &Path, args: &[&str], needle: &str) {
    let before = hash_file(img);
    fails(args, needle);
    assert_eq!(hash_file(img), before, "cjfs {args:?} changed the refused image");
}

fn refused_everywhere(img: &Path, needle: &str) {
    let before = hash_file(img);
    let local = img.with_extension("local");
    std::fs::write(&local, b"x").expect("write local");
    let i = s(img);
    let l = s(&local);
    let cases: Vec<Vec<&str>> = vec![
        vec!["info", i],
        vec!["ls", i],
        vec!["cat", i, "/x"],
        vec!["stat", i, "/"],
        vec!["get", i, "/x", l],
        vec!["put", i, l, "/x"],
        vec!["mkdir", i, "/d"],
        vec!["rm", i, "/x"],
        vec!["mv", i, "/x", "/y"],
        vec!["ln", i, "-s", "t", "/l"],
        vec!["recover", i],
        vec!["check", i, "--no-e2fsck"],
    ];
    for c in cases {
        fails(&c, needle);
        assert_eq!(hash_file(img), before, "cjfs {c:?} changed the refused image");
    }
}

#[test]
fn missing_image() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("nope.img");
    for c in
        [vec!["info", s(&img)], vec!["ls", s(&img)], vec!["mkdir", s(&img), "/d"], vec!["recover", s(&img)]]
    {
        fails(&c, "no such file");
    }
    assert!(!img.exists());
    // mkfs without --size cannot create it: a usage error.
    let o = cjfs(&["mkfs", s(&img)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(!img.exists());
}

#[test]
fn not_ext4() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("zeros.img");
    std::fs::write(&img, vec![0u8; 20 << 20]).expect("write");
    refused_everywhere(&img, "not an ext2/3/4 file system");
    let tiny = dir.path().join("tiny.img");
    std::fs::write(&tiny, b"tiny").expect("write");
    refused_everywhere(&tiny, "not an ext2/3/4 file system");
}

#[test]
fn truncated_image() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "t.img", "64M");
    let f = std::fs::OpenOptions::new().write(true).open(&img).expect("open");
    f.set_len(30 << 20).expect("truncate");
    drop(f);
    refused_everywhere(&img, "truncated");
}

#[test]
fn corrupt_journal_superblock() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "j.img", "64M");
    // Find the journal's first block with the library, then smash its magic.
    let dev =
        FileDevice::open(&img, FileDeviceOptions { read_only: true, ..Default::default() }).expect("open");
    let dev: cjfs_blockdev::Device = Arc::new(dev);
    let (sb, _) = cjfs_fs::mkfs::read_layout(&*dev).expect("layout");
    let area = cjfs_fs::fs::journal_area(&dev, &sb).expect("journal area");
    let jblk = area.map(0).expect("journal block 0");
    drop(dev);
    let mut bytes = std::fs::read(&img).expect("read");
    let off = (jblk * 4096) as usize;
    bytes[off..off + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    std::fs::write(&img, &bytes).expect("write");
    refused_everywhere(&img, "journal superblock");
}

#[test]
fn unsupported_feature_encrypt() {
    let Some(mke2fs) = tool("mke2fs") else {
        println!("SKIP: mke2fs not installed");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("csum.img");
    let o = Command::new(mke2fs)
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-O", "metadata_csum,encrypt"])
        .arg(&img)
        .arg("64M")
        .output()
        .expect("mke2fs");
    assert!(o.status.success(), "mke2fs: {}", text(&o.stderr));
    refused_everywhere(&img, "encrypt");
    // mkfs refuses to overwrite it without --force and leaves it alone.
    let before = hash_file(&img);
    fails(&["mkfs", s(&img), "--size", "64M"], "--force");
    assert_eq!(hash_file(&img), before);
    ok(&["mkfs", s(&img), "--size", "64M", "--force"]);
    ok(&["ls", s(&img)]);
    assert_e2fsck_clean(&img);
}

#[test]
fn mkfs_refuses_existing_ext4_without_force() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    ok(&["mkdir", s(&img), "/keep"]);
    let before = hash_file(&img);
    fails(&["mkfs", s(&img), "--size", "64M"], "--force");
    fails(&["mkfs", s(&img)], "--force");
    assert_eq!(hash_file(&img), before);
    ok(&["mkfs", s(&img), "--force"]);
    assert_eq!(text(&ok(&["ls", s(&img)]).stdout), "lost+found\n");
    assert_e2fsck_clean(&img);
}

/// Another file system (made by its own mkfs) or swap is named and left byte for byte
/// unless `--force` is given, as `mkfs.ext4` asks first.
#[test]
fn mkfs_refuses_other_signatures_without_force() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut tried = 0;
    for (tool_name, args, what) in
        [("mkfs.xfs", &["-q", "-f"][..], "an XFS file system"), ("mkswap", &["-q"][..], "swap space")]
    {
        let Some(t) = tool(tool_name) else {
            println!("SKIP: {tool_name} not installed");
            continue;
        };
        let img = dir.path().join(format!("{tool_name}.img"));
        std::fs::File::create(&img).unwrap().set_len(512 << 20).unwrap();
        let o = Command::new(t).args(args).arg(&img).output().expect("run mkfs tool");
        assert!(o.status.success(), "{tool_name}: {}", text(&o.stderr));
        let before = hash_file(&img);
        let e = fails(&["mkfs", s(&img)], "--force");
        assert!(e.contains(what), "{tool_name}: {e}");
        fails(&["mkfs", s(&img), "--size", "64M"], what);
        assert_eq!(hash_file(&img), before, "{tool_name}'s image changed");
        ok(&["mkfs", s(&img), "--force"]);
        assert_e2fsck_clean(&img);
        tried += 1;
    }
    println!("{tried} foreign signature(s) checked");
}

#[test]
fn full_device() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "small.img", "20M");
    let big = dir.path().join("big.bin");
    std::fs::write(&big, random_bytes(30 << 20, 3)).expect("write");
    let before = hash_file(&img);
    fails(&["put", s(&img), s(&big), "/big"], "no space left on device");
    assert_eq!(hash_file(&img), before, "a refused put changed the image");
    // Through stdin the size is not known in advance: the write fails midway, the partial
    // file is removed and the file system is left consistent.
    let o = cjfs_in(&["put", s(&img), "-", "/big"], &random_bytes(30 << 20, 4));
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("cjfs: put: ") && err.contains("no space left on device"), "{err}");
    assert!(!err.contains("panicked"));
    assert_eq!(text(&ok(&["ls", s(&img)]).stdout), "lost+found\n");
    assert_e2fsck_clean(&img);
    ok(&["check", s(&img), "--no-e2fsck"]);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["frobnicate"],
        vec!["mkfs"],
        vec!["mkfs", "x.img", "--size", "4X"],
        vec!["ls", "x.img", "--journal", "nosuch"],
        vec!["ls", "x.img", "--data", "writeback"],
    ] {
        let o = cjfs(&args);
        assert_eq!(o.status.code(), Some(2), "cjfs {args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("panicked"));
    }
    let o = ok(&["--help"]);
    let help = text(&o.stdout);
    for c in ["mkfs", "info", "ls", "cat", "put", "get", "mkdir", "rm", "mv", "stat", "recover", "check"] {
        assert!(help.contains(c), "--help lacks {c}");
    }
    for c in
        ["mkfs", "info", "ls", "cat", "put", "get", "mkdir", "rm", "mv", "ln", "stat", "recover", "check"]
    {
        ok(&[c, "--help"]);
    }
}

#[test]
fn global_options_are_accepted() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    let o = cjfs_in(&["--journal", "nojournal", "put", s(&img), "-", "/nj"], b"no journal");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = cjfs_in(&["put", "--data", "journal", s(&img), "-", "/dj"], b"data journal");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(ok(&["cat", s(&img), "/nj"]).stdout, b"no journal");
    assert_eq!(ok(&["cat", "--data", "journal", s(&img), "/dj"]).stdout, b"data journal");
    assert_e2fsck_clean(&img);
}

#[test]
fn recover_an_image_copied_while_mounted() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "live.img", "64M");
    let copy = dir.path().join("copy.img");
    let payload = random_bytes(200_000, 11);
    {
        let dev = FileDevice::open(&img, FileDeviceOptions::default()).expect("open");
        let fs = Fs::open(Arc::new(dev), MountOptions::default()).expect("mount");
        let d = fs.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).expect("mkdir");
        let f = fs.create(d.ino, b"file", 0o644, 0, 0).expect("create");
        let mut off = 0;
        while off < payload.len() {
            off += fs.write(f.ino, off as u64, &payload[off..]).expect("write");
        }
        fs.journal().force().expect("force");
        std::fs::copy(&img, &copy).expect("copy while mounted");
        fs.unmount().expect("unmount");
    }
    // Read-only commands refuse it and ask for recovery; nothing is written.
    let before = hash_file(&copy);
    fails(&["ls", s(&copy)], "cjfs recover");
    fails(&["cat", s(&copy), "/dir/file"], "needs recovery");
    fails(&["check", s(&copy)], "needs recovery");
    assert_eq!(hash_file(&copy), before);
    let info = text(&ok(&["info", s(&copy)]).stdout);
    assert!(info.contains("needs-recovery"), "{info}");
    assert!(info.contains("transaction(s) to replay"), "{info}");
    let out = text(&ok(&["recover", s(&copy)]).stdout);
    assert!(out.contains("replayed"), "{out}");
    // Both name the same transactions (recover used to print one past the last).
    let tids = |t: &str, end: &str| {
        let at = t.find("tids ").expect("a tid range");
        t[at..].split(end).next().expect("range").to_string()
    };
    assert_eq!(tids(&out, ")"), tids(&info, " (end"), "info:\n{info}\nrecover:\n{out}");
    assert!(ok(&["cat", s(&copy), "/dir/file"]).stdout == payload, "recovered data differs");
    assert!(text(&ok(&["recover", s(&copy)]).stdout).contains("clean"));
    assert_e2fsck_clean(&copy);
    ok(&["check", s(&copy)]);
    // The original, unmounted cleanly, is fine too.
    assert!(ok(&["cat", s(&img), "/dir/file"]).stdout == payload);
}

#[test]
fn recover_reports_the_i_transactions_it_applied() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("ij.img");
    ok(&["mkfs", s(&img), "--size", "64M", "--ijournal-area", "256"]);
    let copy = dir.path().join("copy.img");
    let first = random_bytes(5000, 3);
    let second = random_bytes(3000, 4);
    {
        let dev = FileDevice::open(&img, FileDeviceOptions::default()).expect("open");
        let opts = cjfs_fs::preset::apply("ijournal", MountOptions::default()).expect("preset");
        let fs = Fs::open(Arc::new(dev), opts).expect("mount");
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create");
        fs.journal().force().expect("force");
        // Served by i-transactions: the file's transaction is already durable.
        assert_eq!(fs.write(f.ino, 0, &first).expect("write"), first.len());
        fs.fsync(f.ino, false).expect("fsync");
        assert_eq!(fs.write(f.ino, first.len() as u64, &second).expect("write"), second.len());
        fs.fsync(f.ino, false).expect("fsync");
        std::fs::copy(&img, &copy).expect("copy while mounted");
        fs.unmount().expect("unmount");
    }
    let out = text(&ok(&["recover", s(&copy)]).stdout);
    assert!(out.contains("i-transactions: ") && out.contains(" applied ("), "{out}");
    let mut want = first.clone();
    want.extend_from_slice(&second);
    assert!(ok(&["cat", s(&copy), "/f"]).stdout == want, "recovered data differs");
    assert_e2fsck_clean(&copy);
}

#[test]
fn check_finds_a_damaged_extent_tree() {
    let Some(debugfs) = tool("debugfs") else {
        println!("SKIP: debugfs not installed");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "64M");
    let o = cjfs_in(&["put", s(&img), "-", "/f"], &random_bytes(100_000, 5));
    assert!(o.status.success());
    ok(&["check", s(&img)]);
    // Break the extent header magic in the inode's i_block.
    let o =
        Command::new(debugfs).args(["-w", "-R", "sif /f block[0] 0"]).arg(&img).output().expect("debugfs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = cjfs(&["check", s(&img), "--no-e2fsck"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("extent"), "{}", text(&o.stdout));
    assert!(text(&o.stderr).starts_with("cjfs: check: "), "{}", text(&o.stderr));
}

/// `--journal`'s help names every preset the library knows.
#[test]
fn help_names_every_preset() {
    let help = text(&ok(&["--help"]).stdout).replace(char::is_whitespace, "");
    for name in cjfs_fs::preset::names() {
        assert!(
            help.contains(&format!("{name},")) || help.contains(&format!("{name};")),
            "--help lacks {name}"
        );
    }
}

/// `Blocks (512-byte):` of `cjfs stat`.
fn stat_sectors(img: &Path, path: &str) -> u64 {
    let out = text(&ok(&["stat", s(img), path]).stdout);
    let l = out.lines().find(|l| l.contains("Blocks (512-byte):")).expect("a Blocks line");
    l.rsplit(':').next().expect("value").trim().parse().expect("a number")
}

/// `put` keeps a sparse source's holes (`SEEK_DATA`/`SEEK_HOLE`, as `cp --sparse=auto`):
/// the image file allocates only the blocks holding data, reads back identical, and a
/// sparse file larger than the free space but whose data fits is accepted.
#[test]
fn put_keeps_holes() {
    use std::os::unix::fs::{FileExt, MetadataExt};

    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "20M");
    // hole (1 MiB), data (100 000 bytes), hole, data up to the end (10 000 bytes): 6 MiB.
    let local = dir.path().join("sparse.bin");
    let size = 6u64 << 20;
    let f = std::fs::File::create(&local).expect("create");
    f.set_len(size).expect("set_len");
    f.write_all_at(&random_bytes(100_000, 1), 1 << 20).expect("write");
    f.write_all_at(&random_bytes(10_000, 2), size - 10_000).expect("write");
    drop(f);
    let data = std::fs::read(&local).expect("read");
    let sparse_source = std::fs::metadata(&local).expect("stat").blocks() * 512 < size / 2;
    ok(&["mkdir", s(&img), "/d"]);
    ok(&["put", s(&img), s(&local), "/d/sparse"]);
    let back = dir.path().join("back.bin");
    ok(&["get", s(&img), "/d/sparse", s(&back)]);
    assert!(std::fs::read(&back).expect("read back") == data, "get returned different bytes");
    assert!(ok(&["cat", s(&img), "/d/sparse"]).stdout == data, "cat returned different bytes");
    let sectors = stat_sectors(&img, "/d/sparse");
    if sparse_source {
        // 110 000 bytes of data: 27 + 3 blocks of 4 KiB at most, and no tree block.
        assert!(sectors * 512 <= 30 * 4096, "{sectors} sectors allocated for 110 000 bytes of data");
    } else {
        println!("SKIP: the temporary directory's file system keeps no holes; not checking allocation");
    }
    // A hole only: nothing allocated, size kept.
    let holes = dir.path().join("holeonly");
    std::fs::File::create(&holes).expect("create").set_len(10 << 20).expect("set_len");
    ok(&["put", s(&img), s(&holes), "/d/holeonly"]);
    assert_eq!(stat_sectors(&img, "/d/holeonly"), 0, "a file of one hole allocated blocks");
    assert!(text(&ok(&["stat", s(&img), "/d/holeonly"]).stdout).contains("Size: 10485760"));
    // Larger than the 20 MiB image, 1 MiB of data: accepted.
    let big = dir.path().join("big-sparse");
    let f = std::fs::File::create(&big).expect("create");
    f.set_len(100 << 20).expect("set_len");
    f.write_all_at(&random_bytes(1 << 20, 3), 50 << 20).expect("write");
    drop(f);
    if std::fs::metadata(&big).expect("stat").blocks() * 512 < 10 << 20 {
        ok(&["put", s(&img), s(&big), "/big-sparse"]);
        let o = ok(&["get", s(&img), "/big-sparse", "-"]);
        assert!(o.stdout == std::fs::read(&big).expect("read"), "the big sparse file came back different");
    }
    // Replacing a file with a sparse one frees what the old one had.
    ok(&["put", s(&img), s(&holes), "/d/sparse"]);
    assert_eq!(stat_sectors(&img, "/d/sparse"), 0);
    assert_e2fsck_clean(&img);
    ok(&["check", s(&img), "--no-e2fsck"]);
}

/// `get` to a local regular file keeps the image file's holes (as `cp --sparse=auto`): only
/// its extents are written, the size is set at the end, and unwritten (preallocated) extents
/// stay holes. To stdout every byte comes out, holes as zeros.
#[test]
fn get_keeps_holes() {
    use std::os::unix::fs::{FileExt, MetadataExt};

    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "32M");
    // hole (1 MiB), data (100 000 bytes), hole, data (50 000 bytes at 3 MiB), hole to 8 MiB.
    let local = dir.path().join("sparse.bin");
    let size = 8u64 << 20;
    let f = std::fs::File::create(&local).expect("create");
    f.set_len(size).expect("set_len");
    f.write_all_at(&random_bytes(100_000, 21), 1 << 20).expect("write");
    f.write_all_at(&random_bytes(50_000, 22), 3 << 20).expect("write");
    drop(f);
    let data = std::fs::read(&local).expect("read");
    let sparse_local = std::fs::metadata(&local).expect("stat").blocks() * 512 < size / 2;
    ok(&["put", s(&img), s(&local), "/sparse"]);
    // A preallocated (unwritten) range past the data, through the library: reads as zeros.
    {
        let dev = FileDevice::open(&img, FileDeviceOptions::default()).expect("open");
        let fs = Fs::open(Arc::new(dev), MountOptions::default()).expect("mount");
        let a = fs.lookup(ROOT_INO, b"sparse").expect("lookup");
        fs.fallocate(a.ino, cjfs_fs::FallocMode::KeepSize, 5 << 20, 1 << 20).expect("fallocate");
        fs.unmount().expect("unmount");
    }
    assert!(text(&ok(&["stat", s(&img), "/sparse"]).stdout).contains("[unwritten]"));

    // Into an existing local file longer than the image file: replaced, not merged.
    let back = dir.path().join("back.bin");
    std::fs::write(&back, vec![0xffu8; 9 << 20]).expect("prefill");
    ok(&["get", s(&img), "/sparse", s(&back)]);
    let m = std::fs::metadata(&back).expect("stat back");
    assert_eq!(m.len(), size, "the local file's length is the image file's size");
    assert!(std::fs::read(&back).expect("read back") == data, "get returned different bytes");
    if sparse_local {
        // 150 000 bytes of data: 38 blocks of 4 KiB, and less than twice that on any file system.
        assert!(
            m.blocks() * 512 <= 80 * 4096,
            "{} sectors allocated locally for 150 000 bytes of data",
            m.blocks()
        );
    } else {
        println!("SKIP: the temporary directory's file system keeps no holes; not checking allocation");
    }
    // To stdout: all the bytes, zeros included.
    assert!(ok(&["get", s(&img), "/sparse", "-"]).stdout == data, "get - returned different bytes");
    // A file of one hole comes back as one hole of the same size.
    let holes = dir.path().join("holeonly");
    std::fs::File::create(&holes).expect("create").set_len(10 << 20).expect("set_len");
    ok(&["put", s(&img), s(&holes), "/holeonly"]);
    let back = dir.path().join("holeonly.back");
    ok(&["get", s(&img), "/holeonly", s(&back)]);
    let m = std::fs::metadata(&back).expect("stat back");
    assert_eq!(m.len(), 10 << 20);
    if sparse_local {
        assert_eq!(m.blocks(), 0, "a file of one hole allocated blocks locally");
    }
    assert!(std::fs::read(&back).expect("read back").iter().all(|&b| b == 0));
}

/// `ls -l` shows a device's `major, minor` in the size column, as `ls -l` does; `stat`
/// prints the same numbers.
#[test]
fn ls_long_shows_device_numbers() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = make_image(dir.path(), "a.img", "16M");
    // Linux's new_encode_dev layout, as `Fs::mknod` takes it.
    let enc = |major: u32, minor: u32| (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
    {
        let dev = FileDevice::open(&img, FileDeviceOptions::default()).expect("open");
        let fs = Fs::open(Arc::new(dev), MountOptions::default()).expect("mount");
        fs.mknod(ROOT_INO, b"null", 0o20666, enc(1, 3), 0, 0).expect("mknod c");
        fs.mknod(ROOT_INO, b"sda1", 0o60660, enc(8, 1), 0, 0).expect("mknod b");
        fs.mknod(ROOT_INO, b"nvme", 0o60660, enc(259, 70000), 0, 0).expect("mknod b large");
        fs.unmount().expect("unmount");
    }
    let out = text(&ok(&["ls", s(&img), "-l"]).stdout);
    let line = |name: &str| -> Vec<String> {
        let l = out
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} in {out}"));
        l.split_whitespace().map(str::to_string).collect()
    };
    // type+perm, links, uid, gid, "major,", "minor", inode, name.
    for (name, ty, major, minor) in
        [("null", 'c', "1,", "3"), ("sda1", 'b', "8,", "1"), ("nvme", 'b', "259,", "70000")]
    {
        let f = line(name);
        assert!(f[0].starts_with(ty), "{name}: {f:?}");
        assert_eq!((f[4].as_str(), f[5].as_str()), (major, minor), "{name}: {out}");
    }
    // The same for one file named on the command line.
    let one = text(&ok(&["ls", s(&img), "-l", "/null"]).stdout);
    assert!(one.contains(" 1, 3 "), "{one}");
    assert!(text(&ok(&["stat", s(&img), "/nvme"]).stdout).contains("Device: 259,70000"));
    // A regular file keeps its size there.
    ok(&["put", s(&img), "-", "/f"]);
    let f = text(&ok(&["ls", s(&img), "-l", "/f"]).stdout);
    assert_eq!(f.split_whitespace().nth(4), Some("0"), "{f}");
    assert_e2fsck_clean(&img);
}

/// `mkfs.ext4` (`mke2fs -t ext4`) with `-b BS`; false (after saying why) when missing.
fn mkfs_ext4(img: &Path, args: &[&str], size: &str) -> bool {
    let Some(mke2fs) = tool("mke2fs") else {
        println!("SKIP: mke2fs not installed");
        return false;
    };
    let o = Command::new(mke2fs)
        .args(["-q", "-F", "-t", "ext4"])
        .args(args)
        .arg(img)
        .arg(size)
        .output()
        .expect("run mke2fs");
    assert!(o.status.success(), "mke2fs {args:?}: {}{}", text(&o.stdout), text(&o.stderr));
    true
}

/// An ext3 file system (mke2fs `-O ^extent`: every file block-mapped) opens read-only: the
/// reading commands and `check` work, writes are refused naming `^extent` and leave the
/// image unchanged; once tune2fs gives it `extent` (an upgrade to ext4), it is written,
/// the block-mapped files converted to extents as they change, and e2fsck finds it clean.
#[test]
fn ext3_file_systems_are_read_and_upgraded_ones_written() {
    let (Some(tune2fs), Some(debugfs)) = (tool("tune2fs"), tool("debugfs")) else {
        println!("SKIP: tune2fs or debugfs not installed");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("ext3.img");
    if !mkfs_ext4(
        &img,
        &["-O", "^extent,^64bit,^flex_bg,^huge_file,^metadata_csum,^dir_nlink,^extra_isize"],
        "64M",
    ) {
        return;
    }
    let data = random_bytes(300_000, 3);
    let local = dir.path().join("data");
    std::fs::write(&local, &data).expect("write local");
    let o = Command::new(&debugfs)
        .args(["-w", "-R"])
        .arg(format!("write {} f", local.display()))
        .arg(&img)
        .output()
        .expect("debugfs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (i, l) = (s(&img), s(&local));
    assert_eq!(ok(&["cat", i, "/f"]).stdout, data);
    let info = text(&ok(&["info", i]).stdout);
    assert!(info.contains("Read-only features:    ^extent (ext2/ext3 block maps)"), "{info}");
    let check = text(&ok(&["check", i]).stdout);
    assert!(check.contains("0 error(s), 0 warning(s)"), "{check}");
    fails_unchanged(
        &img,
        &["put", i, l, "/x"],
        "ext4 feature(s) ^extent (ext2/ext3 block maps) not maintained by cjfs",
    );
    let o = Command::new(&tune2fs).args(["-O", "extent"]).arg(&img).output().expect("tune2fs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    ok(&["put", i, l, "/x"]);
    ok(&["rm", i, "/f"]);
    assert_eq!(ok(&["cat", i, "/x"]).stdout, data);
    assert_e2fsck_clean(&img);
}

/// A pristine `mkfs.ext4` image passes `cjfs check` without a warning whatever its block
/// size (with 1 KiB blocks, block 0 lies before the first group and no bitmap maps it).
#[test]
fn check_is_quiet_on_pristine_mkfs_ext4_images() {
    let dir = tempfile::tempdir().expect("tmp");
    for (bs, size) in [("1024", "64M"), ("1024", "300M"), ("2048", "64M"), ("4096", "256M")] {
        let img = dir.path().join(format!("fresh-{bs}-{size}.img"));
        if !mkfs_ext4(&img, &["-b", bs], size) {
            return;
        }
        let out = text(&ok(&["check", s(&img), "--no-e2fsck"]).stdout);
        assert!(!out.contains("warning:"), "{bs}-byte blocks, {size}: {out}");
        assert!(out.contains("result: no errors (0 error(s), 0 warning(s))"), "{out}");
    }
}

/// An external journal device (`mkfs.ext4 -O journal_dev`) is named as such by every
/// command, not called a corrupt file system.
#[test]
fn an_external_journal_device_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("journal.img");
    if !mkfs_ext4(&img, &["-O", "journal_dev"], "16M") {
        return;
    }
    refused_everywhere(&img, "external journal device (journal_dev feature)");
}

/// A file system without a journal (`mkfs.ext4 -O ^has_journal`) is read and written as ext4
/// writes one: metadata in place, the superblock's clean state cleared while it is open and
/// set again on a clean close; a preset that journals, data=journal and an image not cleanly
/// unmounted are refused for writing with the image byte-identical, and read-only commands
/// still read the last.
#[test]
fn a_file_system_without_a_journal_is_written_in_place() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("nojournal.img");
    if !mkfs_ext4(&img, &["-O", "^has_journal"], "64M") {
        return;
    }
    let i = s(&img);
    let local = dir.path().join("data");
    let data = random_bytes(300_000, 7);
    std::fs::write(&local, &data).expect("write local");
    ok(&["mkdir", i, "/d/e", "-p"]);
    ok(&["put", i, s(&local), "/d/e/f"]);
    ok(&["put", i, s(&local), "/g"]);
    ok(&["mv", i, "/g", "/d/h"]);
    ok(&["rm", i, "/d/e/f"]);
    ok(&["ln", i, "-s", "e", "/d/l"]);
    assert_eq!(ok(&["cat", i, "/d/h"]).stdout, data);
    assert_e2fsck_clean(&img);
    let info = text(&ok(&["info", i]).stdout);
    for want in ["State:                 clean", "Journal:               none (has_journal is off)"] {
        assert!(info.contains(want), "info lacks {want:?}:\n{info}");
    }
    let o = ok(&["recover", i]);
    assert!(
        text(&o.stdout).contains("no journal (has_journal is off); nothing to replay"),
        "{}",
        text(&o.stdout)
    );

    for (args, needle) in [
        (
            vec!["put", i, s(&local), "/x", "--journal", "jbd2"],
            "has no journal (has_journal is off) and journal preset jbd2 needs one",
        ),
        (vec!["put", i, s(&local), "/x", "--data", "journal"], "data=journal needs one"),
    ] {
        fails_unchanged(&img, &args, needle);
    }

    // Not cleanly unmounted (what a crash while open leaves): read, but not written.
    let Some(debugfs) = tool("debugfs") else {
        println!("SKIP: debugfs not installed");
        return;
    };
    let o = Command::new(debugfs).args(["-w", "-R", "ssv state 0"]).arg(&img).output().expect("debugfs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(ok(&["cat", i, "/d/h"]).stdout, data);
    for args in [vec!["put", i, s(&local), "/x"], vec!["mkdir", i, "/y"]] {
        fails_unchanged(&img, &args, "has no journal and was not cleanly unmounted (s_state)");
    }
}

/// An ext2 file system (no journal, no `extent` feature: every file block-mapped) is read,
/// and refused for writing naming the missing feature, the image unchanged.
#[test]
fn an_ext2_file_system_is_read_only() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("ext2.img");
    if !mkfs_ext4(&img, &["-O", "^has_journal,^extent,^64bit,^flex_bg,^metadata_csum"], "32M") {
        return;
    }
    let local = dir.path().join("x");
    std::fs::write(&local, b"x").expect("write local");
    let (i, l) = (s(&img), s(&local));
    assert_eq!(text(&ok(&["ls", i]).stdout), "lost+found\n");
    fails(&["cat", i, "/x"], "no such file or directory");
    for c in [vec!["put", i, l, "/x"], vec!["mkdir", i, "/d"]] {
        fails_unchanged(&img, &c, "^extent (ext2/ext3 block maps) not maintained by cjfs");
    }
}

/// bigalloc with 1 KiB blocks: its descriptors do not checksum the way the ones cjfs reads
/// do, and `check` and `info` used to report that mismatch instead of the feature.
#[test]
fn bigalloc_is_refused_by_name_before_any_layout_check() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("bigalloc.img");
    if !mkfs_ext4(&img, &["-b", "1024", "-O", "bigalloc"], "64M") {
        return;
    }
    refused_everywhere(&img, "unsupported ext4 feature(s): bigalloc");
    let o = cjfs(&["info", s(&img)]);
    let out = text(&o.stdout);
    assert!(!out.contains("checksum") && !out.contains("orphan records unreadable"), "{out}");
    assert!(out.contains("Unsupported features:  bigalloc"), "{out}");
}

/// A ro_compat feature cjfs does not maintain (`verity`) opens read-only, as the kernel
/// mounts it without the support: every reading command works, every writing one is refused
/// by name with the image byte-identical, and a journal that needs recovery points to
/// e2fsck, not to `cjfs recover`, which would be refused too. `quota` and `project` (made by
/// tune2fs, which counts the usage) are read and written: e2fsck and `check` find the usage
/// exact after writing commands.
#[test]
fn ro_compat_features_cjfs_does_not_maintain_open_read_only() {
    let (Some(tune2fs), Some(debugfs)) = (tool("tune2fs"), tool("debugfs")) else {
        println!("SKIP: tune2fs or debugfs not installed");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("quota.img");
    if !mkfs_ext4(&img, &[], "64M") {
        return;
    }
    let data = random_bytes(300_000, 7);
    let local = dir.path().join("data");
    std::fs::write(&local, &data).expect("write local");
    let (i, l) = (s(&img), s(&local));
    ok(&["mkdir", i, "/d"]);
    ok(&["put", i, l, "/d/f"]);
    // tune2fs makes the quota files and counts the usage (the kernel here may lack quota).
    let o = Command::new(&tune2fs).args(["-O", "quota,project"]).arg(&img).output().expect("tune2fs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_e2fsck_clean(&img);
    let info = text(&ok(&["info", i]).stdout);
    assert!(!info.contains("Read-only features"), "{info}");
    // One of each writing command, in an order that succeeds on a writable image.
    let writes = |i| {
        vec![
            vec!["put", i, l, "/x"],
            vec!["mkdir", i, "/e"],
            vec!["mv", i, "/d/f", "/y"],
            vec!["rm", i, "/x"],
            vec!["ln", i, "-s", "t", "/l"],
        ]
    };
    for c in writes(i) {
        ok(&c);
    }
    assert_e2fsck_clean(&img);
    let check = text(&ok(&["check", i]).stdout);
    assert!(check.contains("0 error(s), 0 warning(s)"), "{check}");
    let quota = text(&ok(&["quota", i]).stdout);
    for kind in ["user", "group", "project"] {
        assert!(quota.contains(&format!("{kind} quota: 1 id(s)")), "{quota}");
    }

    // verity: opened read-only.
    let v = dir.path().join("verity.img");
    if !mkfs_ext4(&v, &[], "64M") {
        return;
    }
    let vi = s(&v);
    ok(&["mkdir", vi, "/d"]);
    ok(&["put", vi, l, "/d/f"]);
    let o = Command::new(&tune2fs).args(["-O", "verity"]).arg(&v).output().expect("tune2fs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let before = hash_file(&v);
    let got = dir.path().join("got");
    assert_eq!(text(&ok(&["ls", vi, "/d"]).stdout), "f\n");
    assert_eq!(ok(&["cat", vi, "/d/f"]).stdout, data);
    ok(&["get", vi, "/d/f", s(&got)]);
    assert_eq!(std::fs::read(&got).expect("read"), data);
    ok(&["stat", vi, "/d/f"]);
    let info = text(&ok(&["info", vi]).stdout);
    assert!(info.contains("Read-only features:    verity"), "{info}");
    let check = text(&ok(&["check", vi]).stdout);
    assert!(check.contains("0 error(s), 0 warning(s)"), "verity: {check}");
    let refused = "ext4 feature(s) verity not maintained by cjfs: such a file system opens only read-only";
    for c in writes(vi) {
        fails(&c, refused);
    }
    // Nothing to replay: said, not refused.
    assert!(text(&ok(&["recover", vi]).stdout).contains("nothing to replay"));
    assert_eq!(hash_file(&v), before, "a refused write changed the image");
    // A journal to replay: the read-only commands cannot, and neither can `cjfs recover`.
    let o = Command::new(&debugfs)
        .args(["-w", "-R", "feature needs_recovery"])
        .arg(&v)
        .output()
        .expect("debugfs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let before = hash_file(&v);
    fails(&["ls", vi], "replay it with `e2fsck -fy");
    fails(&["recover", vi], "replay it with `e2fsck -fy");
    let info = text(&cjfs(&["info", vi]).stdout);
    assert!(info.contains("`e2fsck -fy` or a kernel mount"), "{info}");
    assert_eq!(hash_file(&v), before, "a refused command changed the image");
    // mmp: written under multi-mount protection (crates/fs/tests/mmp.rs has the protocol),
    // its block owned and left clean.
    let m = dir.path().join("mmp.img");
    if mkfs_ext4(&m, &["-O", "mmp"], "64M") {
        ok(&["mkdir", s(&m), "/d"]);
        assert_eq!(text(&ok(&["ls", s(&m)]).stdout), "d\nlost+found\n");
        let check = text(&ok(&["check", s(&m)]).stdout);
        assert!(check.contains("0 error(s), 0 warning(s)"), "mmp: {check}");
        let info = text(&ok(&["info", s(&m)]).stdout);
        assert!(info.contains("clean (no writer)"), "mmp: {info}");
    }
}

/// `inline_data` file systems (made by `mke2fs -d`, which stores small files, directories
/// and symlinks in their inodes) are read: every file's bytes, every directory's names,
/// long symlinks, a clean `check`; and written: a new file in an inline directory, an
/// inline file replaced and removed, e2fsck and `check` clean after.
#[test]
fn inline_data_file_systems_are_read_and_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("few/deep")).expect("mkdir");
    std::fs::create_dir_all(src.join("many")).expect("mkdir");
    std::fs::create_dir_all(src.join("empty")).expect("mkdir");
    let sizes = [0usize, 6, 59, 60, 61, 100, 150, 300, 5000];
    for n in sizes {
        std::fs::write(src.join(format!("few/f{n}")), random_bytes(n, n as u64)).expect("write");
    }
    std::fs::write(src.join("few/deep/z"), b"z\n").expect("write");
    for i in 0..40 {
        std::fs::write(src.join(format!("many/a-longer-file-name-{i}")), format!("{i}\n")).expect("write");
    }
    let long = "t".repeat(80);
    std::os::unix::fs::symlink(&long, src.join("few/long")).expect("symlink");
    std::os::unix::fs::symlink("f6", src.join("few/short")).expect("symlink");
    let img = dir.path().join("inline.img");
    let d = s(&src);
    if !mkfs_ext4(&img, &["-O", "inline_data", "-I", "512", "-d", d], "64M") {
        return;
    }
    assert_e2fsck_clean(&img);
    let i = s(&img);
    let mut names: Vec<String> = sizes.iter().map(|n| format!("f{n}")).collect();
    names.extend(["deep".into(), "long".into(), "short".into()]);
    names.sort();
    assert_eq!(text(&ok(&["ls", i, "/few"]).stdout), names.join("\n") + "\n");
    for n in sizes {
        assert_eq!(ok(&["cat", i, &format!("/few/f{n}")]).stdout, random_bytes(n, n as u64), "f{n}");
    }
    assert_eq!(ok(&["cat", i, "/few/deep/z"]).stdout, b"z\n");
    assert_eq!(text(&ok(&["ls", i, "/many"]).stdout).lines().count(), 40);
    assert_eq!(ok(&["cat", i, "/many/a-longer-file-name-39"]).stdout, b"39\n");
    assert_eq!(text(&ok(&["ls", i, "/empty"]).stdout), "");
    // The files the test is about are inline: a small file, a directory, a long symlink.
    for p in ["/few/f100", "/few/deep", "/few/long"] {
        let st = text(&ok(&["stat", i, p]).stdout);
        assert!(st.contains("inline_data"), "{p} is not inline: {st}");
    }
    assert!(text(&ok(&["stat", i, "/few/long"]).stdout).contains(&long));
    let info = text(&ok(&["info", i]).stdout);
    assert!(!info.contains("Read-only features"), "{info}");
    let check = text(&ok(&["check", i]).stdout);
    assert!(check.contains("0 error(s), 0 warning(s)"), "{check}");
    let local = dir.path().join("x");
    std::fs::write(&local, b"x").expect("write");
    // Inline directories gain an entry (in place where it fits), an inline file is
    // replaced by a larger one (it moves into a block) and another removed.
    ok(&["put", i, s(&local), "/few/deep/x"]);
    ok(&["mkdir", i, "/empty/y"]);
    let bigger = random_bytes(3000, 77);
    std::fs::write(dir.path().join("bigger"), &bigger).expect("write");
    ok(&["put", i, s(&dir.path().join("bigger")), "/few/f100"]);
    ok(&["rm", i, "/few/f150"]);
    assert_eq!(ok(&["cat", i, "/few/deep/x"]).stdout, b"x");
    assert_eq!(ok(&["cat", i, "/few/f100"]).stdout, bigger);
    assert_eq!(text(&ok(&["ls", i, "/empty"]).stdout), "y\n");
    assert_e2fsck_clean(&img);
    let check = text(&ok(&["check", i]).stdout);
    assert!(check.contains("0 error(s), 0 warning(s)"), "after changes: {check}");
    // The inode flag without the feature is corruption, as for the kernel.
    let Some(debugfs) = tool("debugfs") else {
        println!("SKIP: debugfs not installed");
        return;
    };
    let plain = make_image(dir.path(), "plain.img", "32M");
    ok(&["put", s(&plain), s(&local), "/x"]);
    let o = Command::new(debugfs)
        .args(["-w", "-R", "set_inode_field /x flags 0x10000000"])
        .arg(&plain)
        .output()
        .expect("debugfs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    fails(
        &["cat", s(&plain), "/x"],
        "inline data flag (EXT4_INLINE_DATA_FL) without the inline_data feature",
    );
}

/// `sparse_super2` (backups only in the groups `s_backup_bgs` names, none to two) is read and
/// written: `check` finds no metadata where the `sparse_super` rule would put backups, and
/// e2fsck finds what cjfs wrote clean.
#[test]
fn sparse_super2_file_systems_are_read_and_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = random_bytes(3 << 20, 11);
    let local = dir.path().join("data");
    std::fs::write(&local, &data).expect("write local");
    for (n, backups) in [(0, "0"), (1, "1"), (2, "2")] {
        let img = dir.path().join(format!("ss2-{n}.img"));
        let e = format!("num_backup_sb={backups}");
        if !mkfs_ext4(&img, &["-O", "sparse_super2", "-E", &e], "512M") {
            return;
        }
        let (i, l) = (s(&img), s(&local));
        let check = text(&ok(&["check", i]).stdout);
        assert!(check.contains("0 error(s), 0 warning(s)"), "{backups} backups: {check}");
        ok(&["mkdir", i, "/d"]);
        for f in 0..4 {
            ok(&["put", i, l, &format!("/d/f{f}")]);
        }
        assert_eq!(ok(&["cat", i, "/d/f3"]).stdout, data);
        let check = text(&ok(&["check", i]).stdout);
        assert!(check.contains("0 error(s), 0 warning(s)"), "{backups} backups: {check}");
        assert_e2fsck_clean(&img);
    }
}

/// A file system whose journal is on another device (`mkfs.ext4 -J device=...`: no
/// journal inode, a journal UUID and device number) is refused as unsupported by every
/// command. Made with debugfs (mke2fs needs a real block device for the journal).
#[test]
fn a_file_system_with_an_external_journal_is_refused() {
    let Some(debugfs) = tool("debugfs") else {
        println!("SKIP: debugfs not installed");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("extj.img");
    if !mkfs_ext4(&img, &["-O", "^has_journal"], "64M") {
        return;
    }
    let script =
        "feature has_journal\nssv journal_uuid 8beae5d7-4d7a-4931-aa15-7f38cb60dc57\nssv journal_dev 0x700\n";
    let script_path = dir.path().join("script");
    std::fs::write(&script_path, script).expect("write script");
    let o = Command::new(debugfs).arg("-w").arg("-f").arg(&script_path).arg(&img).output().expect("debugfs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    refused_everywhere(&img, "external journal not supported");
}

/// `mmp` through the CLI: a refused write command (the dry run fails) leaves the image,
/// MMP block included, byte-identical; a block left busy by a writer that crashed is taken
/// after the protocol's watch (said on stderr first), the command runs once, and the block
/// is left clean.
#[test]
fn mmp_images_are_written_by_the_cli() {
    use std::os::unix::fs::FileExt;

    use cjfs_fs::mmp::{MmpBlock, SEQ_CLEAN};
    use cjfs_fs::ondisk::csum::Csum;
    use cjfs_fs::ondisk::superblock::Superblock;

    let dir = tempfile::tempdir().expect("tmp");
    let img = dir.path().join("mmp.img");
    if !mkfs_ext4(&img, &["-O", "mmp"], "64M") {
        return;
    }
    let i = s(&img);
    ok(&["mkdir", i, "/d"]);
    fails_unchanged(&img, &["mkdir", i, "/d"], "file exists");
    // A writer that crashed: its sequence number stays.
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&img).expect("open");
    let mut raw = vec![0u8; 1024];
    f.read_exact_at(&mut raw, 1024).expect("superblock");
    let sb = Superblock::decode(&raw).expect("superblock");
    let (bs, block, csum) = (u64::from(sb.block_size()), sb.mmp_block, Csum::from_sb(&sb));
    let mut buf = vec![0u8; bs as usize];
    f.read_exact_at(&mut buf, block * bs).expect("mmp");
    let mut m = MmpBlock::decode(&buf, &csum, block).expect("mmp");
    // mke2fs's check interval (cjfs leaves the kernel's, twice the update interval).
    (m.seq, m.check_interval) = (0x5eed, 5);
    m.encode_into(&mut buf, &csum);
    f.write_all_at(&buf, block * bs).expect("write mmp");
    let t = std::time::Instant::now();
    let out = ok(&["mkdir", i, "/after-crash"]);
    let waited = t.elapsed();
    let err = text(&out.stderr);
    assert!(err.contains("the MMP block is not clean") && err.contains("watching it for 11 s"), "{err}");
    assert!(waited >= std::time::Duration::from_secs(20), "two watches of 11 s: {waited:?}");
    assert!(waited < std::time::Duration::from_secs(40), "watched once, not per open: {waited:?}");
    f.read_exact_at(&mut buf, block * bs).expect("mmp");
    assert_eq!(MmpBlock::decode(&buf, &csum, block).expect("mmp").seq, SEQ_CLEAN);
    assert_eq!(text(&ok(&["ls", i]).stdout), "after-crash\nd\nlost+found\n");
    assert_e2fsck_clean(&img);
}
