//! Seed images, made fresh at the start of a run and filled deterministically from the seed.
//!
//! * `cjfs`: `cjfs mkfs --size 16M`, filled through the `cjfs` command line (directories,
//!   files of several sizes including one over 1 MiB, symbolic links fast and slow, a hard
//!   link, a directory of 100 entries with long names), then through the library for what
//!   the command line cannot make: a fragmented multi-extent file over 1 MiB with holes (its
//!   extent tree has a leaf block), a sparse file, and xattrs in the inode and in an xattr
//!   block.
//! * `mke2fs`: the same on an image made by `mkfs.ext4` (when installed and accepted by
//!   `cjfs info`), then `e2fsck -fyD` indexes its directories, so the seed has htree roots.
//! * `recovery`: an image whose journal needs recovery: the library fills a fresh image,
//!   then with commits only on fsync/sync (and checkpoints never) creates, writes, removes a
//!   journalled directory (a revoke record) and unlinks an open file (an orphan), and the
//!   image file is copied while still mounted, as a crash would leave it.
//!
//! File contents repeat short patterns, so images compress well (for the corpus).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::types::SetAttr;
use cjfs_fs::{Fs, MountOptions, ROOT_INO, XattrFlags};
use cjfs_journal::JournalConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{FuzzError, FuzzResult};
use crate::layout::{Layout, LogKind, PathEntry};
use crate::run::{RunOutput, RunSpec, run};

/// Size of every seed image.
pub const SEED_BYTES: u64 = 16 << 20;

/// One seed image.
#[derive(Debug, Clone)]
pub struct Seed {
    /// `cjfs`, `mke2fs` or `recovery`.
    pub name: String,
    /// The image.
    pub bytes: Vec<u8>,
    /// Its structure map.
    pub layout: Layout,
    /// Its paths (for an image needing recovery: the paths after recovery).
    pub paths: Vec<PathEntry>,
    /// The journal needs recovery.
    pub needs_recovery: bool,
}

/// The seeds of a run, and notes on the ones skipped.
#[derive(Debug, Clone, Default)]
pub struct Seeds {
    /// The seeds made.
    pub seeds: Vec<Seed>,
    /// Notes printed in the report (skipped seeds, checks that did not pass).
    pub notes: Vec<String>,
}

/// What making the seeds needs.
#[derive(Debug, Clone)]
pub struct SeedEnv {
    /// The `cjfs` binary.
    pub cjfs: PathBuf,
    /// Directory to make them in.
    pub dir: PathBuf,
    /// The run's seed.
    pub seed: u64,
    /// Timeout of each command.
    pub timeout: Duration,
    /// `mkfs.ext4`, if installed.
    pub mkfs_ext4: Option<PathBuf>,
    /// `e2fsck`, if installed.
    pub e2fsck: Option<PathBuf>,
}

impl SeedEnv {
    fn cjfs_ok(&self, name: &str, args: &[&str]) -> FuzzResult<RunOutput> {
        let spec = RunSpec::new(&self.cjfs, args.iter().copied()).timeout(self.timeout);
        let out = run(&spec)?;
        if !out.success() {
            return Err(FuzzError::seed(
                name,
                format!("`{}`: {}: {}", spec.display(), out.exit, out.stderr.trim()),
            ));
        }
        Ok(out)
    }
}

/// Make every seed (see the module docs). The `cjfs` and `recovery` seeds are required;
/// `mke2fs` is skipped with a note when `mkfs.ext4` is missing or its image is refused.
pub fn make_seeds(env: &SeedEnv) -> FuzzResult<Seeds> {
    std::fs::create_dir_all(&env.dir)
        .map_err(|e| FuzzError::io(format!("mkdir {}", env.dir.display()), e))?;
    let mut out = Seeds::default();
    out.seeds.push(cjfs_seed(env)?);
    match mke2fs_seed(env) {
        Ok((s, notes)) => {
            out.notes.extend(notes);
            out.seeds.push(s);
        }
        Err(e) => out.notes.push(format!("mke2fs seed skipped: {e}")),
    }
    out.seeds.push(recovery_seed(env)?);
    for s in &out.seeds {
        if let Some(note) = check_seed(env, s)? {
            out.notes.push(note);
        }
    }
    Ok(out)
}

/// Pattern contents: each 4 KiB block repeats 16 bytes made of `tag` and the block index.
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut blk = 0u64;
    while v.len() < len {
        let mut unit = [0u8; 16];
        unit[..8].copy_from_slice(&tag.to_le_bytes());
        unit[8..].copy_from_slice(&blk.to_le_bytes());
        for _ in 0..256 {
            v.extend_from_slice(&unit);
        }
        blk += 1;
    }
    v.truncate(len);
    v
}

fn write_local(path: &Path, data: &[u8]) -> FuzzResult<()> {
    std::fs::write(path, data).map_err(|e| FuzzError::io(format!("write {}", path.display()), e))
}

fn read_image(path: &Path) -> FuzzResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| FuzzError::io(format!("read {}", path.display()), e))
}

fn open_dev(path: &Path) -> FuzzResult<Device> {
    let dev = FileDevice::open(path, FileDeviceOptions::default()).map_err(|e| {
        FuzzError::io(format!("open {}", path.display()), std::io::Error::other(e.to_string()))
    })?;
    Ok(Arc::new(dev))
}

/// Fill the image at `img` through the command line.
fn populate_cli(env: &SeedEnv, name: &str, img: &Path, rng: &mut StdRng) -> FuzzResult<()> {
    let local = env.dir.join(format!("{name}-local"));
    std::fs::create_dir_all(&local).map_err(|e| FuzzError::io(format!("mkdir {}", local.display()), e))?;
    let i = img.to_str().ok_or_else(|| FuzzError::seed(name, "image path is not UTF-8"))?;
    for d in ["/dir", "/dir/sub", "/many", "/empty"] {
        env.cjfs_ok(name, &["mkdir", i, d])?;
    }
    let files: [(&str, usize); 4] = [
        ("/small.txt", rng.gen_range(20..200)),
        ("/empty.txt", 0),
        ("/dir/medium.bin", rng.gen_range(20_000..60_000)),
        ("/dir/sub/big.bin", rng.gen_range(1_200_000..1_800_000)),
    ];
    for (k, (path, len)) in files.iter().enumerate() {
        let f = local.join(format!("f{k}"));
        let data = if *path == "/small.txt" {
            b"cjfs imagefuzz seed file\n".iter().copied().cycle().take(*len).collect()
        } else {
            pattern(rng.r#gen(), *len)
        };
        write_local(&f, &data)?;
        env.cjfs_ok(name, &["put", i, f.to_str().unwrap_or_default(), path])?;
    }
    env.cjfs_ok(name, &["ln", "-s", i, "/dir/medium.bin", "/link"])?;
    let long_target = format!("/{}", "long-symlink-target/".repeat(6));
    env.cjfs_ok(name, &["ln", "-s", i, &long_target, "/dir/longlink"])?;
    env.cjfs_ok(name, &["ln", i, "/small.txt", "/dir/hard.txt"])?;
    let tiny = local.join("tiny");
    for k in 0..100 {
        let pad = "x".repeat(rng.gen_range(20..40));
        let path = format!("/many/entry-{k:03}-{pad}");
        match k % 10 {
            9 => {
                env.cjfs_ok(name, &["mkdir", i, &path])?;
            }
            8 => {
                env.cjfs_ok(name, &["ln", "-s", i, "../small.txt", &path])?;
            }
            _ => {
                write_local(&tiny, &pattern(k, k as usize * 7))?;
                env.cjfs_ok(name, &["put", i, tiny.to_str().unwrap_or_default(), &path])?;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&local);
    Ok(())
}

/// Fill what the command line cannot make, through the library: a fragmented file over
/// 1 MiB (an extent tree with a leaf block), a sparse file, xattrs in the inode and in a
/// block.
fn populate_lib(name: &str, img: &Path, rng: &mut StdRng) -> FuzzResult<()> {
    let err = |what: &str, e: cjfs_fs::FsError| FuzzError::seed(name, format!("library {what}: {e}"));
    let fs = Fs::open(open_dev(img)?, MountOptions::default()).map_err(|e| err("mount", e))?;
    let frag = fs.create(ROOT_INO, b"frag.bin", 0o644, 0, 0).map_err(|e| err("create", e))?.ino;
    let chunk = pattern(rng.r#gen(), 64 * 1024);
    for k in 0..20u64 {
        fs.write(frag, k * 128 * 1024, &chunk).map_err(|e| err("write", e))?;
    }
    let sparse = fs.create(ROOT_INO, b"sparse.bin", 0o600, 0, 0).map_err(|e| err("create", e))?.ino;
    fs.write(sparse, 0, &pattern(rng.r#gen(), 8192)).map_err(|e| err("write", e))?;
    fs.write(sparse, 6 << 20, &pattern(rng.r#gen(), 4096)).map_err(|e| err("write", e))?;
    let small = fs.resolve("/small.txt").map_err(|e| err("resolve", e))?;
    fs.setxattr(small, b"user.fuzz", b"in-inode", XattrFlags::Any).map_err(|e| err("setxattr", e))?;
    let medium = fs.resolve("/dir/medium.bin").map_err(|e| err("resolve", e))?;
    let big_value = pattern(rng.r#gen(), 1500);
    fs.setxattr(medium, b"user.big", &big_value, XattrFlags::Any).map_err(|e| err("setxattr", e))?;
    fs.setxattr(medium, b"user.second", b"2", XattrFlags::Any).map_err(|e| err("setxattr", e))?;
    fs.unmount().map_err(|e| err("unmount", e))
}

fn cjfs_seed(env: &SeedEnv) -> FuzzResult<Seed> {
    let name = "cjfs";
    let img = env.dir.join("cjfs.img");
    let _ = std::fs::remove_file(&img);
    let mut rng = StdRng::seed_from_u64(env.seed ^ 0xC1F5);
    let i = img.to_str().unwrap_or_default();
    env.cjfs_ok(name, &["mkfs", i, "--size", "16M"])?;
    populate_cli(env, name, &img, &mut rng)?;
    populate_lib(name, &img, &mut rng)?;
    finish_seed(name, &img, false)
}

/// Make the image with `mkfs.ext4 ... opts` and return whether `cjfs info` accepts it.
fn try_mkfs_ext4(env: &SeedEnv, mkfs: &Path, img: &Path, features: &str) -> FuzzResult<Result<(), String>> {
    let f = std::fs::File::create(img).map_err(|e| FuzzError::io(format!("create {}", img.display()), e))?;
    f.set_len(SEED_BYTES).map_err(|e| FuzzError::io(format!("size {}", img.display()), e))?;
    drop(f);
    let mut args = vec!["-q", "-F", "-b", "4096"];
    if !features.is_empty() {
        args.extend(["-O", features]);
    }
    let img_s = img.to_str().unwrap_or_default();
    args.extend(["-E", "lazy_itable_init=0,lazy_journal_init=0", img_s, "16M"]);
    let out = run(&RunSpec::new(mkfs, args).timeout(env.timeout))?;
    if !out.success() {
        return Ok(Err(format!("mkfs.ext4 -O {features}: {}: {}", out.exit, out.stderr.trim())));
    }
    let out = run(&RunSpec::new(&env.cjfs, ["info", img_s]).timeout(env.timeout))?;
    if !out.success() {
        return Ok(Err(format!("cjfs info refuses mkfs.ext4 -O {features}: {}", out.stderr.trim())));
    }
    Ok(Ok(()))
}

fn mke2fs_seed(env: &SeedEnv) -> FuzzResult<(Seed, Vec<String>)> {
    let name = "mke2fs";
    let mkfs = env.mkfs_ext4.as_ref().ok_or_else(|| FuzzError::seed(name, "mkfs.ext4 is not installed"))?;
    let img = env.dir.join("mke2fs.img");
    let mut refusals = Vec::new();
    let mut accepted = false;
    for features in ["^metadata_csum,^64bit", "^metadata_csum", ""] {
        match try_mkfs_ext4(env, mkfs, &img, features)? {
            Ok(()) => {
                accepted = true;
                break;
            }
            Err(why) => refusals.push(why),
        }
    }
    if !accepted {
        return Err(FuzzError::seed(name, refusals.join("; ")));
    }
    let mut notes = refusals;
    let mut rng = StdRng::seed_from_u64(env.seed ^ 0xE2F5);
    populate_cli(env, name, &img, &mut rng)?;
    populate_lib(name, &img, &mut rng)?;
    // Index the directories (htree roots for the mutator), if cjfs still reads the result.
    if let Some(e2fsck) = &env.e2fsck {
        let indexed = env.dir.join("mke2fs-indexed.img");
        std::fs::copy(&img, &indexed).map_err(|e| FuzzError::io("copy the mke2fs seed", e))?;
        let ix = indexed.to_str().unwrap_or_default();
        let out = run(&RunSpec::new(e2fsck, ["-fyD", ix]).timeout(env.timeout))?;
        let ok_fsck = matches!(out.exit, crate::run::Exit::Code(0..=2));
        let ls = run(&RunSpec::new(&env.cjfs, ["ls", ix, "/many"]).timeout(env.timeout))?;
        let check = run(&RunSpec::new(&env.cjfs, ["check", "--no-e2fsck", ix]).timeout(env.timeout))?;
        if ok_fsck && ls.success() && check.success() {
            std::fs::rename(&indexed, &img).map_err(|e| FuzzError::io("rename the indexed seed", e))?;
        } else {
            notes.push(format!(
                "mke2fs seed: directories left unindexed (e2fsck -fyD: {}; cjfs ls: {}; cjfs check: {} {})",
                out.exit,
                ls.exit,
                check.exit,
                check.stderr.lines().next().unwrap_or("")
            ));
        }
    }
    Ok((finish_seed(name, &img, false)?, notes))
}

/// Journal settings for a crash image: commits only on fsync/sync, no checkpoints, so the
/// file is stable while it is copied.
fn quiet_journal() -> JournalConfig {
    JournalConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_high_water: f64::INFINITY,
        ..JournalConfig::jbd2()
    }
}

fn recovery_seed(env: &SeedEnv) -> FuzzResult<Seed> {
    let name = "recovery";
    let live = env.dir.join("recovery-live.img");
    let img = env.dir.join("recovery.img");
    let _ = std::fs::remove_file(&live);
    let mut rng = StdRng::seed_from_u64(env.seed ^ 0x4EC0);
    let l = live.to_str().unwrap_or_default();
    env.cjfs_ok(name, &["mkfs", l, "--size", "16M"])?;
    let err = |what: &str, e: cjfs_fs::FsError| FuzzError::seed(name, format!("library {what}: {e}"));

    // A first, clean session: the files the crash session changes.
    let fs = Fs::open(open_dev(&live)?, MountOptions::default()).map_err(|e| err("mount", e))?;
    let base = fs.mkdir(ROOT_INO, b"base", 0o755, 0, 0).map_err(|e| err("mkdir", e))?.ino;
    for (n, len) in [("a", 100_000usize), ("b", 10_000)] {
        let f = fs.create(base, n.as_bytes(), 0o644, 0, 0).map_err(|e| err("create", e))?.ino;
        fs.write(f, 0, &pattern(rng.r#gen(), len)).map_err(|e| err("write", e))?;
    }
    let d = fs.mkdir(base, b"d", 0o755, 0, 0).map_err(|e| err("mkdir", e))?.ino;
    for k in 0..30 {
        fs.create(d, format!("file-{k:02}").as_bytes(), 0o644, 0, 0).map_err(|e| err("create", e))?;
    }
    fs.unmount().map_err(|e| err("unmount", e))?;

    // The crash session.
    let opts = MountOptions { journal: quiet_journal(), ..MountOptions::default() };
    let fs = Fs::open(open_dev(&live)?, opts).map_err(|e| err("mount", e))?;
    let crash = fs.mkdir(ROOT_INO, b"crash", 0o755, 0, 0).map_err(|e| err("mkdir", e))?.ino;
    let f1 = fs.create(crash, b"f1", 0o644, 0, 0).map_err(|e| err("create", e))?.ino;
    fs.write(f1, 0, &pattern(rng.r#gen(), 50_000)).map_err(|e| err("write", e))?;
    fs.fsync(f1, false).map_err(|e| err("fsync", e))?;
    let d2 = fs.mkdir(crash, b"d2", 0o755, 0, 0).map_err(|e| err("mkdir", e))?.ino;
    for k in 0..20 {
        fs.create(d2, format!("entry-{k:02}").as_bytes(), 0o644, 0, 0).map_err(|e| err("create", e))?;
    }
    let tmp = fs.mkdir(crash, b"tmpdir", 0o755, 0, 0).map_err(|e| err("mkdir", e))?.ino;
    for k in 0..10 {
        fs.create(tmp, format!("t{k}").as_bytes(), 0o644, 0, 0).map_err(|e| err("create", e))?;
    }
    fs.journal().force().map_err(|e| FuzzError::seed(name, format!("journal force: {e}")))?;
    // Free a journalled directory block: a revoke record.
    for k in 0..10 {
        fs.unlink(tmp, format!("t{k}").as_bytes()).map_err(|e| err("unlink", e))?;
    }
    fs.rmdir(crash, b"tmpdir").map_err(|e| err("rmdir", e))?;
    let f2 = fs.create(crash, b"f2", 0o644, 0, 0).map_err(|e| err("create", e))?.ino;
    fs.write(f2, 0, &pattern(rng.r#gen(), 200_000)).map_err(|e| err("write", e))?;
    fs.fsync(f2, false).map_err(|e| err("fsync", e))?;
    let a = fs.resolve("/base/a").map_err(|e| err("resolve", e))?;
    fs.setattr(a, &SetAttr { size: Some(10_000), ..SetAttr::default() }).map_err(|e| err("truncate", e))?;
    // An open, unlinked file: an orphan at the crash.
    let orphan = fs.create(crash, b"orphan", 0o644, 0, 0).map_err(|e| err("create", e))?.ino;
    fs.write(orphan, 0, &pattern(rng.r#gen(), 20_000)).map_err(|e| err("write", e))?;
    fs.open_file(orphan).map_err(|e| err("open", e))?;
    fs.unlink(crash, b"orphan").map_err(|e| err("unlink", e))?;
    fs.fsync(f2, false).map_err(|e| err("fsync", e))?;
    fs.journal().force().map_err(|e| FuzzError::seed(name, format!("journal force: {e}")))?;
    std::fs::copy(&live, &img).map_err(|e| FuzzError::io("copy the crash image", e))?;
    let _ = fs.release(orphan);
    fs.unmount().map_err(|e| err("unmount", e))?;
    let _ = std::fs::remove_file(&live);

    let i = img.to_str().unwrap_or_default();
    let info = env.cjfs_ok(name, &["info", i])?;
    let text = info.stdout_text();
    let says = text.lines().any(|l| {
        l.trim_start().starts_with("needs recovery:")
            && l.split(':').nth(1).is_some_and(|v| v.trim().starts_with("yes"))
    });
    if !says {
        return Err(FuzzError::seed(
            name,
            format!("`cjfs info` does not say the crash image needs recovery:\n{text}"),
        ));
    }
    // The paths after recovery, for the commands' arguments.
    let recovered = env.dir.join("recovery-replayed.img");
    std::fs::copy(&img, &recovered).map_err(|e| FuzzError::io("copy the crash image", e))?;
    env.cjfs_ok(name, &["recover", recovered.to_str().unwrap_or_default()])?;
    let rbytes = read_image(&recovered)?;
    let rlayout =
        Layout::parse(&rbytes).map_err(|msg| FuzzError::Layout { name: "recovered".into(), msg })?;
    let _ = std::fs::remove_file(&recovered);
    let mut seed = finish_seed(name, &img, true)?;
    seed.paths = rlayout.paths();
    let log = seed.layout.journal.as_ref().map(|j| j.log.as_slice()).unwrap_or(&[]);
    let has = |f: fn(&LogKind) -> bool| log.iter().any(|b| f(&b.kind));
    if !has(|k| matches!(k, LogKind::Descriptor { .. })) || !has(|k| matches!(k, LogKind::Commit)) {
        return Err(FuzzError::seed(name, "the crash image's log holds no committed transaction"));
    }
    Ok(seed)
}

fn finish_seed(name: &str, img: &Path, needs_recovery: bool) -> FuzzResult<Seed> {
    let bytes = read_image(img)?;
    let layout = Layout::parse(&bytes).map_err(|msg| FuzzError::Layout { name: name.to_string(), msg })?;
    let paths = layout.paths();
    Ok(Seed { name: name.to_string(), bytes, layout, paths, needs_recovery })
}

/// Check a seed before fuzzing it: `cjfs check --no-e2fsck` (clean seeds) and `e2fsck
/// -fn`. A seed that does not pass is still used; the note says why.
fn check_seed(env: &SeedEnv, s: &Seed) -> FuzzResult<Option<String>> {
    let img = env.dir.join(format!("{}.img", s.name));
    let i = img.to_str().unwrap_or_default();
    let mut problems = Vec::new();
    if !s.needs_recovery {
        let out = run(&RunSpec::new(&env.cjfs, ["check", "--no-e2fsck", i]).timeout(env.timeout))?;
        if !out.success() {
            problems.push(format!("cjfs check: {} {}", out.exit, out.stderr.trim()));
        }
        if let Some(e2fsck) = &env.e2fsck {
            let out = run(&RunSpec::new(e2fsck, ["-fn", i]).timeout(env.timeout))?;
            if !out.success() {
                let first =
                    out.stdout_text().lines().find(|l| !l.starts_with("Pass")).unwrap_or("").to_string();
                problems.push(format!("e2fsck -fn: {} {}", out.exit, first));
            }
        }
    }
    let log = s.layout.journal.as_ref().map(|j| j.log.len()).unwrap_or(0);
    if problems.is_empty() {
        return Ok(s.needs_recovery.then(|| format!("recovery seed: {log} log blocks to replay")));
    }
    Ok(Some(format!("seed {} did not pass its checks: {}", s.name, problems.join("; "))))
}
