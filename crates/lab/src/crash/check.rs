//! Checking one crash image: recover it, read its logical state, run `e2fsck`, compare with
//! `e2fsck -fy`'s own replay, cut recovery itself, and make sure the file system accepts new
//! work afterwards.
//!
//! Per unique image ([`check_image`]):
//!
//! 1. open it in cjfs (the journal is replayed and orphans released on open) and read its
//!    [`LogicalState`] — the oracle compares that with every crash state that produced this
//!    image;
//! 2. unmount and run `e2fsck -fn` (must be clean);
//! 3. JBD2-format modes, when the image needed recovery: `e2fsck -fy` on the *raw* crash
//!    image must give the same logical state as ours;
//! 4. crash during recovery: recovery's own writes are recorded and cut like any other log;
//!    recovering each cut image must give the image the uncut recovery gave, and recovering
//!    a recovered image changes nothing;
//! 5. new work: create, write, fsync and delete a file in every directory, remove every
//!    entry and directory, allocate a fresh inode, unmount, `e2fsck -fn` again, reopen and
//!    find the new file intact.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{BlockBuf, DEFAULT_BLOCK_SIZE, Device, Recorder};
use cjfs_fs::{Fs, MountOptions, ROOT_INO, recover_device};
use cjfs_journal::JournalKind;

use super::memdev::CowDevice;
use super::oracle::{Kind, LogicalState};
use super::states::{ParsedLog, StateOptions, generate, materialize, overlay};
use super::workloads::pattern;

/// What to run on every unique image.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Run `e2fsck -fn` after recovery (and after the new work).
    pub e2fsck: bool,
    /// Compare with `e2fsck -fy`'s replay (JBD2-format modes).
    pub e2fsck_fy: bool,
    /// Do the new-work step.
    pub new_work: bool,
    /// Cut recovery's own writes into at most this many states per image that needed
    /// recovery (0 = off).
    pub recovery_cuts: usize,
    /// Do the new-work step and the recovery cuts on one unique image out of this many
    /// (1 = all). `e2fsck` and the oracle comparison always run on every unique image.
    pub heavy_every: u32,
    /// Whether the crash device (recording, and the mounts that check an image) reports a
    /// cache barrier. `false` is a device like an image file, where only a flush orders
    /// writes, so the journal takes its barrier-less commit path (recovery uses no barrier).
    pub barrier: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            e2fsck: true,
            e2fsck_fy: true,
            new_work: true,
            recovery_cuts: 4,
            heavy_every: 1,
            barrier: true,
        }
    }
}

/// The outcome for one unique image.
#[derive(Debug, Clone, Default)]
pub struct ImageOutcome {
    /// The logical state after cjfs' recovery (`None` if the image could not be opened or
    /// read; the reason is in `problems`).
    pub recovered: Option<LogicalState>,
    /// Problems found with the image itself (each is a violation for every state that
    /// produced this image).
    pub problems: Vec<String>,
    /// `e2fsck` runs that failed.
    pub e2fsck_failures: u32,
    /// `e2fsck` runs done.
    pub e2fsck_runs: u32,
    /// Crash images of a journal with several logs that stock `e2fsck -fy` refused (the
    /// private `cjfs_logs` bit), as it must.
    pub stock_refusals: u32,
    /// Crash-during-recovery states checked.
    pub recovery_states: u32,
    /// Records cjfs' recovery applied (iJournaling).
    pub ij_applied: u64,
}

/// Per-thread scratch files for `e2fsck` (in `/dev/shm` when it exists). File `a` is kept
/// equal to a base image plus the last changed blocks, so refreshing it writes only the
/// blocks that differ; file `b` is rewritten whole (for `e2fsck -fy`, which modifies it).
#[derive(Debug)]
pub struct Scratch {
    a: PathBuf,
    b: PathBuf,
    /// Base image file `a` holds (kept alive, so its address identifies it) and the blocks
    /// it holds that differ from it.
    a_state: Option<(Arc<Vec<u8>>, BTreeSet<u64>)>,
    /// The same for file `b`; after `e2fsck -fy` the set holds every block it changed.
    b_state: Option<(Arc<Vec<u8>>, BTreeSet<u64>)>,
    /// Verdicts on recovered images of `verdict_base`, by [`image_key`]: different crash
    /// images often recover to the same image, and the `e2fsck -fn` after recovery and the
    /// new-work step depend on nothing else, so each is done once per recovered image.
    verdicts: HashMap<u64, Verdict>,
    /// The base image the verdicts are about (kept alive, so its address identifies it).
    verdict_base: Option<Arc<Vec<u8>>>,
}

/// What was found for one recovered image.
#[derive(Debug, Clone, Default)]
struct Verdict {
    /// `e2fsck -fn` after recovery: exit code and message, or why it could not run.
    fsck: Option<Result<(i32, String), String>>,
    /// The new-work step's outcome.
    new_work: Option<Result<u32, (u32, String)>>,
}

/// Content key of an image given as the blocks that differ from its base.
fn image_key(changed: &BTreeMap<u64, BlockBuf>) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ changed.len() as u64;
    for (b, buf) in changed {
        h = (h ^ b).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
        h = (h ^ super::oracle::hash64(&buf[..])).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
    }
    h
}

impl Scratch {
    /// Scratch files for worker `id` (unique in the process: `id` is only a label).
    pub fn new(id: usize) -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let id = format!("{id}.{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let dir =
            if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| remove_stale_scratch(&dir));
        let pid = std::process::id();
        Scratch {
            a: dir.join(format!("cjfs-crash-{pid}-{id}-a.img")),
            b: dir.join(format!("cjfs-crash-{pid}-{id}-b.img")),
            a_state: None,
            b_state: None,
            verdicts: HashMap::new(),
            verdict_base: None,
        }
    }

    /// The verdict slot for the recovered image `key` of `base`.
    fn verdict(&mut self, base: &Arc<Vec<u8>>, key: u64) -> &mut Verdict {
        if !self.verdict_base.as_ref().is_some_and(|b| Arc::ptr_eq(b, base)) {
            self.verdicts.clear();
            self.verdict_base = Some(base.clone());
        }
        self.verdicts.entry(key).or_default()
    }

    /// Make file `a` hold `base` with `changed` blocks.
    fn write_a(&mut self, base: &Arc<Vec<u8>>, changed: &BTreeMap<u64, BlockBuf>) -> Result<(), String> {
        let prev = self.a_state.take();
        self.a_state = Some(write_delta(&self.a, prev, base, changed)?);
        Ok(())
    }

    /// Make file `b` hold `base` with `changed` blocks (for `e2fsck -fy`, which modifies it:
    /// call [`Scratch::read_b`] afterwards to learn what it changed).
    fn write_b(&mut self, base: &Arc<Vec<u8>>, changed: &BTreeMap<u64, BlockBuf>) -> Result<(), String> {
        let prev = self.b_state.take();
        // Not kept: e2fsck is about to change the file; `read_b` learns the new state.
        write_delta(&self.b, prev, base, changed).map(|_| ())
    }

    /// Read file `b` back and remember which blocks differ from `base`.
    fn read_b(&mut self, base: &Arc<Vec<u8>>) -> Result<Vec<u8>, String> {
        self.b_state = None;
        let img = std::fs::read(&self.b).map_err(|e| format!("cannot read scratch image: {e}"))?;
        if img.len() == base.len() {
            let bs = super::memdev::image_block_size(base).unwrap_or(DEFAULT_BLOCK_SIZE);
            let dirty = img
                .chunks(bs)
                .zip(base.chunks(bs))
                .enumerate()
                .filter(|(_, (x, y))| x != y)
                .map(|(i, _)| i as u64)
                .collect();
            self.b_state = Some((base.clone(), dirty));
        }
        Ok(img)
    }
}

/// Make the file at `path`, which holds `prev`'s base with `prev`'s blocks possibly changed
/// (or anything when `prev` is `None`), hold `base` with `changed` blocks, writing only the
/// blocks that can differ. Returns the new state.
fn write_delta(
    path: &Path,
    prev: Option<(Arc<Vec<u8>>, BTreeSet<u64>)>,
    base: &Arc<Vec<u8>>,
    changed: &BTreeMap<u64, BlockBuf>,
) -> Result<(Arc<Vec<u8>>, BTreeSet<u64>), String> {
    let err = |e: std::io::Error| format!("scratch image {}: {e}", path.display());
    let mut f = open_scratch(path).map_err(err)?;
    let mut stale: BTreeSet<u64> = match prev {
        Some((k, dirty)) if Arc::ptr_eq(&k, base) => dirty,
        _ => {
            write_sparse(&mut f, base).map_err(err)?;
            BTreeSet::new()
        }
    };
    let bs = super::memdev::image_block_size(base).unwrap_or(DEFAULT_BLOCK_SIZE);
    for (&b, buf) in changed {
        f.seek(SeekFrom::Start(b * bs as u64)).map_err(err)?;
        f.write_all(&buf[..]).map_err(err)?;
        stale.remove(&b);
    }
    for b in stale {
        let off = b as usize * bs;
        f.seek(SeekFrom::Start(off as u64)).map_err(err)?;
        f.write_all(&base[off..off + bs]).map_err(err)?;
    }
    Ok((base.clone(), changed.keys().copied().collect()))
}

/// Open (creating if needed, not truncating) a scratch image file for writing.
fn open_scratch(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)
}

/// Rewrite `f` to hold `img`, writing only its non-zero 64 KiB chunks.
fn write_sparse(f: &mut File, img: &[u8]) -> std::io::Result<()> {
    f.set_len(0)?;
    f.set_len(img.len() as u64)?;
    const CHUNK: usize = 64 * 1024;
    static ZERO: [u8; CHUNK] = [0; CHUNK];
    for (i, c) in img.chunks(CHUNK).enumerate() {
        // A slice comparison is a memcmp: far faster than a byte loop over the image.
        if c != &ZERO[..c.len()] {
            f.seek(SeekFrom::Start((i * CHUNK) as u64))?;
            f.write_all(c)?;
        }
    }
    Ok(())
}

/// Remove scratch images left in `dir` by crash runs whose process is gone (a killed run
/// cannot drop its `Scratch`). Only names of the form `cjfs-crash-PID-…` whose PID has no
/// `/proc` entry are touched; without `/proc` nothing is removed.
fn remove_stale_scratch(dir: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("cjfs-crash-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.a);
        let _ = std::fs::remove_file(&self.b);
    }
}

/// The e2fsck program to run: `e2fsck.static` (Debian's `e2fsck-static`, the same checker
/// linked statically) when installed, since the harness runs it thousands of times and
/// dynamic linking is a third of each short run; `e2fsck` otherwise.
fn e2fsck_program() -> &'static str {
    static PROG: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    PROG.get_or_init(|| {
        let works = |p: &str| Command::new(p).arg("-V").output().is_ok_and(|o| o.status.success());
        if works("e2fsck.static") { "e2fsck.static" } else { "e2fsck" }
    })
}

/// Whether `e2fsck` can be run.
pub fn e2fsck_available() -> bool {
    Command::new(e2fsck_program()).arg("-V").output().is_ok_and(|o| o.status.success())
}

/// For tests: whether `e2fsck` can be run, saying visibly that the test is skipped if not.
pub fn e2fsck_or_skip() -> bool {
    if e2fsck_available() {
        true
    } else {
        eprintln!("e2fsck is not installed: the crash harness tests need it; skipping");
        false
    }
}

/// Run e2fsck on an image file; returns (exit code, last lines of output).
fn e2fsck(path: &Path, fix: bool) -> Result<(i32, String), String> {
    let out = Command::new(e2fsck_program())
        .arg(if fix { "-fy" } else { "-fn" })
        .arg(path)
        .env("E2FSCK_CONFIG", "/dev/null")
        .output()
        .map_err(|e| format!("cannot run e2fsck: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("e2fsck ") && !l.starts_with("Pass "))
        .collect();
    // The last lines, and any line about a corrupt journal transaction before them.
    let n = tail.len();
    let keep = tail
        .iter()
        .enumerate()
        .filter(|(i, l)| *i + 6 >= n || l.contains("was corrupt"))
        .map(|(_, l)| *l)
        .collect::<Vec<_>>()
        .join(" | ");
    Ok((out.status.code().unwrap_or(-1), keep))
}

/// `e2fsck -fn` on what `dev` holds.
fn e2fsck_dev(scratch: &mut Scratch, dev: &CowDevice) -> Result<(i32, String), String> {
    scratch.write_a(dev.base(), &dev.changed())?;
    e2fsck(&scratch.a, false)
}

/// Open, read the logical state, unmount (the device then holds the unmounted image).
/// Returns the state and whether recovery (journal replay or orphan release) did work.
fn open_read_unmount(opts: &MountOptions, dev: &Arc<CowDevice>) -> Result<(LogicalState, bool, u64), String> {
    let (fs, report) = Fs::open_with_report(dev.clone() as Device, opts.clone())
        .map_err(|e| format!("cjfs cannot open: {e}"))?;
    let st = LogicalState::read(&fs).map_err(|e| format!("cannot read the recovered tree: {e}"))?;
    fs.unmount().map_err(|e| format!("unmount after recovery failed: {e}"))?;
    let applied = report.ijournal.as_ref().map_or(0, |r| r.applied);
    Ok((
        st,
        report.replayed_transactions > 0 || report.orphans_cleaned > 0 || report.ijournal.is_some(),
        applied,
    ))
}

/// Check one unique crash image (`base` with `changed` blocks). `heavy` selects the
/// new-work and recovery-cut steps for it.
pub fn check_image(
    opts: &MountOptions,
    co: &CheckOptions,
    scratch: &mut Scratch,
    base: &Arc<Vec<u8>>,
    changed: BTreeMap<u64, BlockBuf>,
    heavy: bool,
    seed: u64,
) -> ImageOutcome {
    let mut out = ImageOutcome::default();
    let dev = Arc::new(CowDevice::new(base.clone(), changed.clone()).with_barrier(co.barrier));
    // A single-I/O journal (v1 checksum, async commit) promises that stock tools end the log
    // cleanly at a torn transaction, with no report of a corrupt one.
    let single_io = journal_is_single_io(&dev);
    let (state, needed) = match open_read_unmount(opts, &dev) {
        Ok((st, needed, applied)) => {
            out.ij_applied = applied;
            (st, needed)
        }
        Err(e) => {
            out.problems.push(e);
            return out;
        }
    };
    let key = image_key(&dev.changed());
    if co.e2fsck {
        let r = match scratch.verdict(base, key).fsck.clone() {
            Some(r) => r,
            None => {
                out.e2fsck_runs += 1;
                let r = e2fsck_dev(scratch, &dev);
                scratch.verdict(base, key).fsck = Some(r.clone());
                r
            }
        };
        match r {
            Ok((0, _)) => {}
            Ok((code, msg)) => {
                out.e2fsck_failures += 1;
                out.problems.push(format!("e2fsck -fn after recovery exited {code}: {msg}"));
            }
            Err(e) => out.problems.push(e),
        }
    }
    if needed && co.e2fsck && co.e2fsck_fy && opts.journal.kind == JournalKind::Jbd2 {
        out.e2fsck_runs += 1;
        let r = (|| {
            scratch.write_b(base, &changed)?;
            let (code, msg) = e2fsck(&scratch.b, true)?;
            if (opts.journal.logs.wanted() > 1 || opts.journal.ijournal.on() || opts.journal.ordered_sums)
                && code >= 4
                && msg.contains("unknown incompatible feature")
            {
                // Several logs, ijournal areas or ordered-data sums: the image carries a
                // private bit (`cjfs_logs`, `cjfs_ijournal`, `cjfs_ordered_sums`) until
                // recovered, so stock e2fsck refuses it rather than replay the primary log
                // alone or a last transaction without checking its data.
                return Ok(true);
            }
            if code >= 4 {
                return Err(format!("e2fsck -fy on the crash image exited {code}: {msg}"));
            }
            if single_io && msg.contains("was corrupt") {
                return Err(format!(
                    "e2fsck -fy takes a transaction of the single-I/O journal for corrupt: {msg}"
                ));
            }
            let fixed = scratch.read_b(base)?;
            let fdev = Arc::new(CowDevice::new(Arc::new(fixed), BTreeMap::new()).with_barrier(co.barrier));
            let (theirs, _, _) =
                open_read_unmount(opts, &fdev).map_err(|e| format!("after e2fsck -fy: {e}"))?;
            let d = state.diff(&theirs, 6);
            if d.is_empty() {
                Ok(false)
            } else {
                Err(format!("e2fsck -fy recovers a different state (ours vs e2fsck's): {}", d.join("; ")))
            }
        })();
        match r {
            Ok(refused) => out.stock_refusals += u32::from(refused),
            Err(e) => {
                out.e2fsck_failures += 1;
                out.problems.push(e);
            }
        }
    }
    if heavy && needed && co.recovery_cuts > 0 {
        let raw = Arc::new(materialize(base, &super::states::Overlay { blocks: changed.clone(), hash: 0 }));
        match recovery_cuts(opts, raw, &state, co.recovery_cuts, seed) {
            Ok((n, probs)) => {
                out.recovery_states += n;
                out.problems.extend(probs);
            }
            Err(e) => out.problems.push(e),
        }
    }
    if heavy && co.new_work {
        let r = match scratch.verdict(base, key).new_work.clone() {
            // Counted once: its e2fsck runs are not done again.
            Some(r) => r.map(|_| 0).map_err(|(_, e)| (0, e)),
            None => {
                let r = new_work(opts, co, scratch, &dev, &state);
                scratch.verdict(base, key).new_work = Some(r.clone());
                r
            }
        };
        match r {
            Ok(runs) => out.e2fsck_runs += runs,
            Err((runs, e)) => {
                out.e2fsck_runs += runs;
                if e.starts_with("e2fsck") {
                    out.e2fsck_failures += 1;
                }
                out.problems.push(e);
            }
        }
    }
    out.recovered = Some(state);
    out
}

/// Whether the journal on `dev` carries the single-I/O features (v1 transaction checksum
/// with async commit), read before recovery.
fn journal_is_single_io(dev: &Arc<CowDevice>) -> bool {
    let d: Device = dev.clone();
    let Ok((sb, _)) = cjfs_fs::mkfs::read_layout(&*d) else { return false };
    cjfs_fs::fs::journal_logs(&d, &sb)
        .is_ok_and(|(jsb, _)| cjfs_journal::single_io::is_single_io(jsb.features()))
}

/// Journal replay as `cjfs recover` does it (no mount); returns the changed blocks.
fn recover_on(dev: &Arc<CowDevice>) -> Result<BTreeMap<u64, BlockBuf>, String> {
    recover_device(&(dev.clone() as Device)).map_err(|e| format!("recovery failed: {e}"))?;
    Ok(dev.changed())
}

fn differing_blocks(a: &BTreeMap<u64, BlockBuf>, b: &BTreeMap<u64, BlockBuf>) -> Vec<u64> {
    let keys: BTreeSet<&u64> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(k).map(|x| &x[..]) != b.get(k).map(|x| &x[..]))
        .copied()
        .take(8)
        .collect()
}

/// Crash during recovery, on the raw crash image `raw`. Returns (states checked, problems).
fn recovery_cuts(
    opts: &MountOptions,
    raw: Arc<Vec<u8>>,
    want: &LogicalState,
    max: usize,
    seed: u64,
) -> Result<(u32, Vec<String>), String> {
    let mut probs = Vec::new();
    let dev = Arc::new(CowDevice::new(raw.clone(), BTreeMap::new()));
    let rec = Arc::new(Recorder::new(dev.clone() as Device));
    recover_device(&(rec.clone() as Device)).map_err(|e| format!("recovery failed: {e}"))?;
    let full = dev.changed();
    let log = rec.take_log();
    // Recovering a recovered image changes nothing.
    let again = recover_on(&Arc::new(dev.fork()))?;
    if again.len() != full.len() || !differing_blocks(&full, &again).is_empty() {
        probs.push(format!(
            "recovering a recovered image changed blocks {:?}",
            differing_blocks(&full, &again)
        ));
    }
    // Several logs: scanning them in another order recovers the same image.
    let logs = opts.journal.logs.wanted();
    if logs > 1 {
        let reversed: Vec<usize> = (0..logs).rev().collect();
        let other = Arc::new(CowDevice::new(raw.clone(), BTreeMap::new()));
        match cjfs_fs::recover_device_scanning(&(other.clone() as Device), Some(&reversed)) {
            Ok(_) => {
                let diff = differing_blocks(&full, &other.changed());
                if !diff.is_empty() {
                    probs.push(format!("recovery scanning the logs in reverse order gives a different image: blocks {diff:?} differ"));
                }
            }
            Err(e) => probs.push(format!("recovery scanning the logs in reverse order: {e}")),
        }
    }
    // `cjfs recover` then mount must give what mounting (which recovers) gave.
    match open_read_unmount(opts, &Arc::new(dev.fork())) {
        Ok((st, _, _)) => {
            let d = want.diff(&st, 6);
            if !d.is_empty() {
                probs.push(format!(
                    "recovery without mount (cjfs recover) then mount gives a different state (mount vs recover): {}",
                    d.join("; ")
                ));
            }
        }
        Err(e) => probs.push(format!("after cjfs recover: {e}")),
    }
    let parsed = ParsedLog::parse(&log.ops);
    let so = StateOptions { max_states: max, seed, ..StateOptions::default() };
    let mut n = 0;
    for d in generate(&parsed, &so) {
        let ov = overlay(&parsed, &raw, &d)?;
        if ov.blocks.is_empty() {
            continue;
        }
        n += 1;
        match recover_on(&Arc::new(CowDevice::new(raw.clone(), ov.blocks))) {
            Ok(r) => {
                let diff = differing_blocks(&full, &r);
                if !diff.is_empty() {
                    probs.push(format!(
                        "crash during recovery ({}) then recovery gives a different image: blocks {diff:?} differ",
                        d.describe(&parsed)
                    ));
                }
            }
            Err(e) => probs.push(format!("crash during recovery ({}): {e}", d.describe(&parsed))),
        }
    }
    Ok((n, probs))
}

/// The new-work step, on the recovered and unmounted image in `dev`. Returns the e2fsck
/// runs, or (runs, problem).
fn new_work(
    opts: &MountOptions,
    co: &CheckOptions,
    scratch: &mut Scratch,
    dev: &Arc<CowDevice>,
    st: &LogicalState,
) -> Result<u32, (u32, String)> {
    let mut runs = 0;
    let err = |runs: u32, m: String| (runs, m);
    let dev = Arc::new(dev.fork());
    let fs = Fs::open(dev.clone() as Device, opts.clone())
        .map_err(|e| err(runs, format!("new work: reopen: {e}")))?;
    let step = |what: &str, r: Result<(), cjfs_fs::FsError>| r.map_err(|e| format!("new work: {what}: {e}"));
    let work = || -> Result<(), String> {
        let mut dirs: Vec<(String, u32)> = vec![(String::new(), ROOT_INO)];
        dirs.extend(st.names.iter().filter(|(_, (_, k))| *k == Kind::Dir).map(|(p, (i, _))| (p.clone(), *i)));
        let data = pattern(4242, 0, 4096);
        for (p, ino) in &dirs {
            let r = (|| {
                let a = fs.create(*ino, b"__cjfs_new", 0o644, 0, 0)?;
                fs.write(a.ino, 0, &data)?;
                fs.fsync(a.ino, false)?;
                fs.unlink(*ino, b"__cjfs_new")
            })();
            step(&format!("create/write/fsync/unlink in /{p}"), r)?;
        }
        let mut paths: Vec<(&String, Kind)> = st
            .names
            .iter()
            .filter(|(p, _)| !p.starts_with("lost+found"))
            .map(|(p, (_, k))| (p, *k))
            .collect();
        paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.matches('/').count()));
        for (p, k) in paths {
            let (d, n) = super::workloads::split_path(p);
            let r = fs.resolve(d).and_then(|pi| {
                if k == Kind::Dir { fs.rmdir(pi, n.as_bytes()) } else { fs.unlink(pi, n.as_bytes()) }
            });
            step(&format!("remove /{p}"), r)?;
        }
        let fresh = pattern(777, 0, 8192);
        let r = (|| {
            let a = fs.create(ROOT_INO, b"__cjfs_fresh", 0o600, 0, 0)?;
            fs.write(a.ino, 0, &fresh)?;
            fs.mkdir(ROOT_INO, b"__cjfs_freshdir", 0o700, 0, 0)?;
            fs.sync()
        })();
        step("allocate a fresh inode", r)
    };
    if let Err(e) = work() {
        drop(fs);
        return Err(err(runs, e));
    }
    fs.unmount().map_err(|e| err(runs, format!("new work: unmount: {e}")))?;
    if co.e2fsck {
        runs += 1;
        match e2fsck_dev(scratch, &dev) {
            Ok((0, _)) => {}
            Ok((code, msg)) => {
                return Err(err(runs, format!("e2fsck -fn after new work exited {code}: {msg}")));
            }
            Err(e) => return Err(err(runs, e)),
        }
    }
    let fs = Fs::open(dev.clone() as Device, opts.clone())
        .map_err(|e| err(runs, format!("new work: reopen: {e}")))?;
    let got = LogicalState::read(&fs).map_err(|e| err(runs, format!("new work: read back: {e}")))?;
    let names: Vec<&String> = got.names.keys().filter(|p| !p.starts_with("lost+found")).collect();
    let ok_names = names == ["__cjfs_fresh", "__cjfs_freshdir"];
    let mut buf = vec![0u8; 8192];
    let content_ok = fs
        .resolve("__cjfs_fresh")
        .and_then(|i| fs.read(i, 0, &mut buf))
        .is_ok_and(|n| n == 8192 && buf == pattern(777, 0, 8192));
    let _ = fs.unmount();
    if !(ok_names && content_ok) {
        let want = pattern(777, 0, 8192);
        let blocks: Vec<&str> = buf
            .chunks(4096)
            .zip(want.chunks(4096))
            .map(|(g, w)| {
                if g == w {
                    "ok"
                } else if g.iter().all(|&b| b == 0) {
                    "zeros"
                } else if g == &pattern(4242, 0, 4096)[..] {
                    "the data of an unlinked file"
                } else {
                    "other data"
                }
            })
            .collect();
        return Err(err(
            runs,
            format!(
                "new work: after reopen the tree is {names:?} (fresh file intact: {content_ok}, blocks {blocks:?})"
            ),
        ));
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_scratch_of_dead_processes_only_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        // Above any possible pid_max (2^22), so never a live process.
        let dead = dir.path().join("cjfs-crash-4000000000-0.1-a.img");
        let live = dir.path().join(format!("cjfs-crash-{}-0.1-a.img", std::process::id()));
        let other = dir.path().join("cjfs-crash-notapid-a.img");
        for p in [&dead, &live, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        remove_stale_scratch(dir.path());
        assert!(!dead.exists(), "a dead process's scratch image is removed");
        assert!(live.exists(), "a live process's scratch image is kept");
        assert!(other.exists(), "names that are not scratch images are kept");
    }
}
