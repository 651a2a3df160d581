//! Kernel lookups in an htree directory built by cjfs vs the same directory built by the
//! kernel.
//!
//! Two identical fresh `mkfs.ext4` images (same UUID and hash seed); in each, a directory
//! gets the same 50,000 names in the same order and loses the same 10,000 (chosen at random
//! from the seed): once through the cjfs library, once through a kernel loop mount. Then,
//! for each repetition and each image in turn: a read-only kernel mount, caches dropped
//! (`echo 3 > /proc/sys/vm/drop_caches`), the same 10,000 random names of the 40,000 looked
//! up (`lstat`), timed; a second pass times them warm; then, caches dropped again, the
//! 10,000 removed names (negative lookups: the index and leaves only, no inode reads).
//! Medians over the repetitions are printed with the ratios, the machine, the seed and the
//! repetitions.
//!
//! Needs root (loop mounts, dropping caches), `mkfs.ext4`, `e2fsck` and `debugfs`.
//!
//! ```text
//! cargo run --release -p cjfs-lab --example htree_bench -- [--seed N] [--reps N]
//!     [--entries N] [--remove N] [--lookups N] [--dir PATH] [--json FILE] [--keep]
//! ```

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{Fs, MountOptions, ROOT_INO};
use cjfs_lab::machine::Machine;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

const UUID: &str = "6a1e7e3c-55d1-4c4e-9a3b-2f0d3c1b7e01";
const HASH_SEED: &str = "0b5e4f7a-1c2d-4e3f-8a9b-0c1d2e3f4a5b";

struct Opts {
    seed: u64,
    reps: usize,
    entries: usize,
    remove: usize,
    lookups: usize,
    dir: PathBuf,
    json: Option<PathBuf>,
    keep: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        seed: 1,
        reps: 5,
        entries: 50_000,
        remove: 10_000,
        lookups: 10_000,
        dir: std::env::temp_dir(),
        json: None,
        keep: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|_| format!("bad number {v:?}"));
        match a.as_str() {
            "--seed" => o.seed = num(val()?)?,
            "--reps" => o.reps = num(val()?)? as usize,
            "--entries" => o.entries = num(val()?)? as usize,
            "--remove" => o.remove = num(val()?)? as usize,
            "--lookups" => o.lookups = num(val()?)? as usize,
            "--dir" => o.dir = PathBuf::from(val()?),
            "--json" => o.json = Some(PathBuf::from(val()?)),
            "--keep" => o.keep = true,
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    if o.remove >= o.entries || o.reps == 0 || o.lookups == 0 {
        return Err("need --remove < --entries, --reps > 0, --lookups > 0".into());
    }
    Ok(o)
}

fn name(i: usize) -> Vec<u8> {
    let mut x = (i as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    format!("item-{i:06}-{x:016x}-{:08x}", (x >> 7) as u32).into_bytes()
}

fn sh(cmd: &mut Command) -> Result<String, String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        return Err(format!("{cmd:?} failed ({}): {text}", o.status));
    }
    Ok(text)
}

fn mkfs(img: &Path) -> Result<(), String> {
    let _ = std::fs::remove_file(img);
    sh(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-N", "65536", "-U", UUID, "-E"])
        .arg(format!("hash_seed={HASH_SEED},lazy_itable_init=0,lazy_journal_init=0"))
        .arg(img)
        .arg("1G"))
    .map(|_| ())
}

struct Mount(PathBuf);

impl Mount {
    fn new(img: &Path, mnt: &Path, ro: bool) -> Result<Mount, String> {
        let _ = std::fs::create_dir_all(mnt);
        sh(Command::new("mount")
            .args(["-t", "ext4", "-o", if ro { "loop,ro" } else { "loop" }])
            .arg(img)
            .arg(mnt))?;
        Ok(Mount(mnt.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = sh(Command::new("umount").arg(&self.0)) {
            eprintln!("{e}");
        }
    }
}

fn drop_caches() -> Result<(), String> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| format!("drop_caches: {e}"))
}

/// Build the directory with the cjfs library.
fn build_cjfs(img: &Path, names: &[Vec<u8>], gone: &[Vec<u8>]) -> Result<Duration, String> {
    let dev = FileDevice::open(img, FileDeviceOptions::default()).map_err(|e| e.to_string())?;
    let dev: Device = Arc::new(dev);
    let t = Instant::now();
    let fs = Fs::open(dev, MountOptions::default()).map_err(|e| e.to_string())?;
    let d = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).map_err(|e| e.to_string())?.ino;
    for n in names {
        fs.create(d, n, 0o644, 0, 0).map_err(|e| e.to_string())?;
    }
    for n in gone {
        fs.unlink(d, n).map_err(|e| e.to_string())?;
    }
    fs.unmount().map_err(|e| e.to_string())?;
    Ok(t.elapsed())
}

/// Build the directory with the kernel.
fn build_kernel(img: &Path, mnt: &Path, names: &[Vec<u8>], gone: &[Vec<u8>]) -> Result<Duration, String> {
    let t = Instant::now();
    let m = Mount::new(img, mnt, false)?;
    let d = m.0.join("big");
    std::fs::create_dir(&d).map_err(|e| e.to_string())?;
    for n in names {
        std::fs::File::create(d.join(std::ffi::OsStr::from_bytes(n))).map_err(|e| e.to_string())?;
    }
    for n in gone {
        std::fs::remove_file(d.join(std::ffi::OsStr::from_bytes(n))).map_err(|e| e.to_string())?;
    }
    drop(m);
    Ok(t.elapsed())
}

/// Blocks and index depth of /big (`debugfs`).
fn shape(img: &Path) -> Result<String, String> {
    let stat = sh(Command::new("debugfs").arg("-R").arg("stat /big").arg(img))?;
    let size = stat
        .lines()
        .find_map(|l| l.split("Size: ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let ht = sh(Command::new("debugfs").arg("-R").arg("htree /big").arg(img))?;
    let levels = ht
        .lines()
        .find(|l| l.trim_start().starts_with("Indirect levels:"))
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| "no index".into());
    Ok(format!("{} blocks, {levels}", size / 4096))
}

/// One timed pass: the present names cold (after dropping caches) and warm, then the
/// absent ones cold (a negative lookup reads only the index and leaves, no inode: the
/// directory's own cost).
fn lookups(img: &Path, mnt: &Path, probe: &[Vec<u8>], absent: &[Vec<u8>]) -> Result<[Duration; 3], String> {
    let m = Mount::new(img, mnt, true)?;
    let d = m.0.join("big");
    let mut times = [Duration::ZERO; 3];
    for (k, (names, cold, present)) in
        [(probe, true, true), (probe, false, true), (absent, true, false)].into_iter().enumerate()
    {
        if cold {
            drop_caches()?;
        }
        let t = Instant::now();
        for n in names {
            let p = d.join(std::ffi::OsStr::from_bytes(n));
            match std::fs::symlink_metadata(&p) {
                Ok(_) if present => {}
                Err(e) if !present && e.kind() == std::io::ErrorKind::NotFound => {}
                r => return Err(format!("lstat {}: {r:?}", p.display())),
            }
        }
        times[k] = t.elapsed();
    }
    drop(m);
    Ok(times)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2 }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run(o: &Opts) -> Result<String, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (loop mounts, drop_caches)".into());
    }
    let work =
        tempfile::Builder::new().prefix("htree-bench").tempdir_in(&o.dir).map_err(|e| e.to_string())?;
    let machine = Machine::detect(work.path());
    let names: Vec<Vec<u8>> = (0..o.entries).map(name).collect();
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut order = names.clone();
    order.shuffle(&mut rng);
    let gone: Vec<Vec<u8>> = order[..o.remove].to_vec();
    let kept: Vec<Vec<u8>> = order[o.remove..].to_vec();
    let probe: Vec<Vec<u8>> = kept.choose_multiple(&mut rng, o.lookups.min(kept.len())).cloned().collect();

    let cj = work.path().join("cjfs.img");
    let kn = work.path().join("kernel.img");
    let mnt = work.path().join("mnt");
    mkfs(&cj)?;
    mkfs(&kn)?;
    let build_cj = build_cjfs(&cj, &names, &gone)?;
    let build_kn = build_kernel(&kn, &mnt, &names, &gone)?;
    for img in [&cj, &kn] {
        sh(Command::new("e2fsck").arg("-fn").arg(img))?;
        let m = Mount::new(img, &mnt, true)?;
        let listed: BTreeSet<Vec<u8>> = std::fs::read_dir(m.0.join("big"))
            .map_err(|e| e.to_string())?
            .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        drop(m);
        if listed != kept.iter().cloned().collect::<BTreeSet<_>>() {
            return Err(format!("{}: the kernel does not list the expected names", img.display()));
        }
    }
    let (shape_cj, shape_kn) = (shape(&cj)?, shape(&kn)?);

    // [cjfs, kernel] x [cold, warm, absent cold]
    let mut t: [[Vec<Duration>; 3]; 2] = Default::default();
    for r in 0..o.reps {
        // alternate which image goes first
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let img = if side == 0 { &cj } else { &kn };
            let got = lookups(img, &mnt, &probe, &gone)?;
            for (k, d) in got.into_iter().enumerate() {
                t[side][k].push(d);
            }
        }
        eprintln!("rep {}/{} done", r + 1, o.reps);
    }
    let all = |v: &[Duration]| v.iter().map(|d| format!("{:.1}", ms(*d))).collect::<Vec<_>>().join(" ");
    let med = |v: &Vec<Duration>| ms(median(v.clone()));
    let mut s = String::new();
    s.push_str("htree lookup benchmark: kernel lstat of random names in a directory built by cjfs vs by the kernel\n");
    s.push_str(&format!("{}\n", machine.line()));
    s.push_str(&format!(
        "seed {} | {} entries created, {} removed | {} lookups of present names, {} of removed (absent) names | {} repetitions, medians | mkfs.ext4 -b 4096 1G, same UUID and hash seed\n",
        o.seed, o.entries, o.remove, probe.len(), gone.len(), o.reps
    ));
    s.push_str(&format!("directory built by cjfs:   {shape_cj} (build {:.1} s)\n", build_cj.as_secs_f64()));
    s.push_str(&format!("directory built by kernel: {shape_kn} (build {:.1} s)\n", build_kn.as_secs_f64()));
    let labels = ["present, cold (caches dropped)", "present, warm", "absent, cold (caches dropped)"];
    for (k, label) in labels.iter().enumerate() {
        let (c, kk) = (med(&t[0][k]), med(&t[1][k]));
        s.push_str(&format!(
            "{label:<31} cjfs-built {c:>8.2} ms | kernel-built {kk:>8.2} ms | cjfs/kernel {:.3}\n",
            c / kk
        ));
    }
    for (k, label) in labels.iter().enumerate() {
        s.push_str(&format!("samples ms, {label}: cjfs [{}] kernel [{}]\n", all(&t[0][k]), all(&t[1][k])));
    }
    if o.keep {
        s.push_str(&format!("images kept in {}\n", work.keep().display()));
    }
    if let Some(p) = &o.json {
        let v = |x: &Vec<Duration>| x.iter().map(|d| ms(*d)).collect::<Vec<_>>();
        let j = serde_json::json!({
            "machine": machine,
            "seed": o.seed, "entries": o.entries, "removed": o.remove, "lookups": probe.len(), "reps": o.reps,
            "shape": {"cjfs": shape_cj, "kernel": shape_kn},
            "present_cold_ms": {"cjfs": v(&t[0][0]), "kernel": v(&t[1][0])},
            "present_warm_ms": {"cjfs": v(&t[0][1]), "kernel": v(&t[1][1])},
            "absent_cold_ms": {"cjfs": v(&t[0][2]), "kernel": v(&t[1][2])},
        });
        std::fs::write(p, serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    Ok(s)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("htree_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(s) => {
            print!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("htree_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
