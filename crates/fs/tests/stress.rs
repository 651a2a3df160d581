//! Concurrency stress: 16 threads mix every operation on shared and private directories
//! for a few seconds; a watchdog fails the test if they do not finish (deadlock), then the
//! image must unmount and pass `e2fsck -fn`. Private files are checked against a per-thread
//! model (nobody else touches them), shared ones only for sane errors.
//!
//! Configurations: `jbd2`, no journal, data=journal, two per-core logs with CJFS's pipeline
//! and polling waits, iJournaling.
//!
//! `CJFS_STRESS_SECS` sets the seconds each configuration runs (default 2);
//! `CJFS_STRESS_SEED` picks other operation mixes.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cjfs_fs::{
    DataMode, FallocMode, FileType, Fs, FsError, Ino, MountOptions, ROOT_INO, RenameFlags, SetAttr,
    XattrFlags, preset,
};
use cjfs_journal::JournalConfig;
use common::{assert_fsck_clean, fresh_image, open_image};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const THREADS: usize = 16;
const SHARED: usize = 2;
/// Bound on file offsets (keeps the image far from full).
const MAX_OFF: u64 = 192 * 1024;

/// `CJFS_STRESS_SEED` varies the runs (default: fixed seeds, reproducible op mixes).
fn base_seed() -> u64 {
    std::env::var("CJFS_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn secs() -> f64 {
    std::env::var("CJFS_STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0)
}

/// Errors a racing operation on shared names may legitimately get.
fn benign(e: &FsError) -> bool {
    use libc::*;
    matches!(
        e.errno(),
        ENOENT | EEXIST | ENOTEMPTY | ENOTDIR | EISDIR | EINVAL | ENODATA | EPERM | EOPNOTSUPP
    )
}

/// Per-thread state: a model of the private directory's files.
struct Worker {
    id: usize,
    fs: Fs,
    rng: StdRng,
    shared: Vec<Ino>,
    private: Ino,
    files: HashMap<String, Vec<u8>>,
    last: Arc<Mutex<Vec<String>>>,
}

type Res = Result<(), String>;

fn check<T>(what: &str, r: Result<T, FsError>) -> Result<Option<T>, String> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if benign(&e) => Ok(None),
        Err(e) => Err(format!("{what}: unexpected error {e} (errno {})", e.errno())),
    }
}

fn must<T>(what: &str, r: Result<T, FsError>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn pattern(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let seed: u8 = rng.r#gen();
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

impl Worker {
    fn note(&self, s: String) {
        self.last.lock().expect("last")[self.id] = s;
    }

    fn shared_dir(&mut self) -> Ino {
        let i = self.rng.gen_range(0..self.shared.len());
        self.shared[i]
    }

    /// A shared directory, or one of its subdirectories when one exists.
    fn any_shared_dir(&mut self) -> Ino {
        let d = self.shared_dir();
        if self.rng.gen_bool(0.5) {
            let name = format!("d{}", self.rng.gen_range(0..4));
            if let Ok(a) = self.fs.lookup(d, name.as_bytes())
                && a.kind == FileType::Directory
            {
                return a.ino;
            }
        }
        d
    }

    fn shared_name(&mut self) -> String {
        if self.rng.gen_bool(0.2) {
            format!("d{}", self.rng.gen_range(0..4))
        } else {
            format!("s{}", self.rng.gen_range(0..12))
        }
    }

    fn run(&mut self, deadline: Instant) -> Res {
        let mut n = 0u64;
        while Instant::now() < deadline {
            let k = self.rng.gen_range(0..100);
            if k < 55 {
                self.shared_op()?;
            } else if k < 95 {
                self.private_op()?;
            } else {
                self.open_unlinked()?;
            }
            n += 1;
        }
        self.note(format!("done after {n} ops"));
        // Everything private must still read back as modelled.
        self.verify_private()
    }

    fn shared_op(&mut self) -> Res {
        let fs = self.fs.clone();
        let d = self.any_shared_dir();
        let name = self.shared_name();
        let nb = name.as_bytes();
        let op = self.rng.gen_range(0..20);
        self.note(format!("shared op {op} in {d} on {name}"));
        // Operations by inode number hold the inode open, as a FUSE client's lookup
        // reference would: otherwise a racing unlink could free the number and another
        // thread's create reuse it, and the write would land in that thread's file.
        let grabbed = if matches!(op, 3..=7 | 12 | 14 | 15 | 17) { self.grab(d, nb)? } else { None };
        match op {
            0 | 1 => {
                check("create", fs.create(d, nb, 0o644, 0, 0))?;
            }
            2 => {
                check("mkdir", fs.mkdir(d, nb, 0o755, 0, 0))?;
            }
            3..=5 => {
                if let Some(a) = grabbed.clone() {
                    let off = self.rng.gen_range(0..MAX_OFF);
                    let len = self.rng.gen_range(1..9000);
                    let data = pattern(&mut self.rng, len);
                    if op == 5 {
                        // Append.
                        if let Some(at) = check("getattr", fs.getattr(a.ino))?
                            && at.size < MAX_OFF
                        {
                            check("append", fs.write(a.ino, at.size, &data))?;
                        }
                    } else {
                        check("write", fs.write(a.ino, off, &data))?;
                    }
                }
            }
            6 => {
                if let Some(a) = grabbed.clone() {
                    let mut buf = vec![0u8; self.rng.gen_range(1..20_000)];
                    let off = self.rng.gen_range(0..MAX_OFF);
                    check("read", fs.read(a.ino, off, &mut buf))?;
                }
            }
            7 => {
                if let Some(a) = grabbed.clone() {
                    let size = self.rng.gen_range(0..MAX_OFF);
                    check(
                        "truncate",
                        fs.setattr(a.ino, &SetAttr { size: Some(size), ..Default::default() }),
                    )?;
                }
            }
            8 => {
                check("unlink", fs.unlink(d, nb))?;
            }
            9 => {
                check("rmdir", fs.rmdir(d, nb))?;
            }
            10 | 11 => {
                let d2 = self.any_shared_dir();
                let n2 = self.shared_name();
                let flags = match self.rng.gen_range(0..4) {
                    0 => RenameFlags { noreplace: true, ..RenameFlags::default() },
                    1 => RenameFlags { exchange: true, ..RenameFlags::default() },
                    _ => RenameFlags::default(),
                };
                self.note(format!("rename {d}/{name} -> {d2}/{n2} {flags:?}"));
                check("rename", fs.rename(d, nb, d2, n2.as_bytes(), flags))?;
            }
            12 => {
                if let Some(a) = grabbed.clone() {
                    let d2 = self.any_shared_dir();
                    let n2 = self.shared_name();
                    check("link", fs.link(a.ino, d2, n2.as_bytes()))?;
                }
            }
            13 => {
                let target = vec![b'x'; self.rng.gen_range(1..200)];
                check("symlink", fs.symlink(d, nb, &target, 0, 0))?;
            }
            14 => {
                if let Some(a) = grabbed.clone() {
                    let v = vec![7u8; self.rng.gen_range(0..600)];
                    let key = format!("user.k{}", self.rng.gen_range(0..3));
                    if self.rng.gen_bool(0.7) {
                        check("setxattr", fs.setxattr(a.ino, key.as_bytes(), &v, XattrFlags::Any))?;
                    } else {
                        check("removexattr", fs.removexattr(a.ino, key.as_bytes()))?;
                    }
                    check("listxattr", fs.listxattr(a.ino))?;
                }
            }
            15 => {
                if let Some(a) = grabbed.clone() {
                    check("fsync", fs.fsync(a.ino, self.rng.gen_bool(0.5)))?;
                }
            }
            16 => {
                if self.rng.gen_bool(0.1) {
                    must("sync", fs.sync())?;
                }
            }
            17 => {
                if let Some(a) = grabbed.clone() {
                    let mode = match self.rng.gen_range(0..4) {
                        0 => FallocMode::KeepSize,
                        1 => FallocMode::PunchHole,
                        2 => FallocMode::ZeroRange { keep_size: true },
                        _ => FallocMode::Allocate,
                    };
                    let off = self.rng.gen_range(0..MAX_OFF);
                    check("fallocate", fs.fallocate(a.ino, mode, off, self.rng.gen_range(1..40_000)))?;
                }
            }
            _ => {
                let mut off = 0;
                while let Some(page) = check("readdir", fs.readdir(d, off, 16))? {
                    let Some(last) = page.last() else { break };
                    off = last.next_offset;
                }
            }
        }
        if let Some(a) = grabbed {
            must("release", fs.release(a.ino))?;
        }
        Ok(())
    }

    /// Look `d/name` up and open it; `None` if it is gone (or was replaced in between:
    /// the generation tells).
    fn grab(&mut self, d: Ino, name: &[u8]) -> Result<Option<cjfs_fs::Attr>, String> {
        let Some(a) = check("lookup", self.fs.lookup(d, name))? else { return Ok(None) };
        let Some(o) = check("open", self.fs.open_file(a.ino))? else { return Ok(None) };
        if o.generation != a.generation {
            must("release", self.fs.release(a.ino))?;
            return Ok(None);
        }
        Ok(Some(a))
    }

    fn private_op(&mut self) -> Res {
        let fs = self.fs.clone();
        let p = self.private;
        let name = format!("f{}", self.rng.gen_range(0..8));
        let nb = name.as_bytes();
        let op = self.rng.gen_range(0..9);
        self.note(format!("private op {op} on {name}"));
        let exists = self.files.contains_key(&name);
        match op {
            0 => {
                let r = fs.create(p, nb, 0o644, 0, 0);
                if exists {
                    if !matches!(r, Err(FsError::Exists(_))) {
                        return Err(format!("create of existing private {name}: {r:?}"));
                    }
                } else {
                    must("create private", r)?;
                    self.files.insert(name, Vec::new());
                }
            }
            1..=3 if exists => {
                let ino = must("lookup private", fs.lookup(p, nb))?.ino;
                let off = self.rng.gen_range(0..MAX_OFF) as usize;
                let len = self.rng.gen_range(1..12_000);
                let data = pattern(&mut self.rng, len);
                let n = must("write private", fs.write(ino, off as u64, &data))?;
                if n != len {
                    return Err(format!("short write {n} of {len}"));
                }
                let f = self.files.get_mut(&name).expect("file");
                if f.len() < off + len {
                    f.resize(off + len, 0);
                }
                f[off..off + len].copy_from_slice(&data);
            }
            4 if exists => {
                let ino = must("lookup private", fs.lookup(p, nb))?.ino;
                let size = self.rng.gen_range(0..MAX_OFF) as usize;
                must(
                    "truncate private",
                    fs.setattr(ino, &SetAttr { size: Some(size as u64), ..Default::default() }),
                )?;
                self.files.get_mut(&name).expect("file").resize(size, 0);
            }
            5 if exists => {
                let ino = must("lookup private", fs.lookup(p, nb))?.ino;
                must("fsync private", fs.fsync(ino, self.rng.gen_bool(0.5)))?;
                self.verify_one(&name)?;
            }
            6 if exists => {
                must("unlink private", fs.unlink(p, nb))?;
                self.files.remove(&name);
            }
            7 if exists => {
                let to = format!("f{}", self.rng.gen_range(0..8));
                must("rename private", fs.rename(p, nb, p, to.as_bytes(), RenameFlags::default()))?;
                let data = self.files.remove(&name).expect("file");
                self.files.insert(to, data);
            }
            _ if exists => self.verify_one(&name)?,
            _ => {}
        }
        Ok(())
    }

    fn verify_one(&self, name: &str) -> Res {
        let want = &self.files[name];
        let a = must("lookup private", self.fs.lookup(self.private, name.as_bytes()))?;
        if a.size != want.len() as u64 {
            return Err(format!("private {name}: size {} want {}", a.size, want.len()));
        }
        let mut buf = vec![0u8; want.len()];
        let n = must("read private", self.fs.read(a.ino, 0, &mut buf))?;
        if n != want.len() || buf != *want {
            let at = buf.iter().zip(want.iter()).position(|(a, b)| a != b);
            return Err(format!("private {name}: content differs (read {n}, first difference at {at:?})"));
        }
        Ok(())
    }

    fn verify_private(&self) -> Res {
        for name in self.files.keys() {
            self.verify_one(name)?;
        }
        let mut names: Vec<String> = Vec::new();
        let mut off = 0;
        loop {
            let page = must("readdir private", self.fs.readdir(self.private, off, 7))?;
            let Some(last) = page.last() else { break };
            off = last.next_offset;
            names.extend(
                page.iter()
                    .filter(|e| e.name != b"." && e.name != b"..")
                    .map(|e| String::from_utf8_lossy(&e.name).into()),
            );
        }
        names.sort();
        let mut want: Vec<String> = self.files.keys().cloned().collect();
        want.sort();
        if names != want {
            return Err(format!("private dir lists {names:?}, want {want:?}"));
        }
        Ok(())
    }

    /// Create, open, unlink, then use the open-unlinked file and release it.
    fn open_unlinked(&mut self) -> Res {
        let fs = self.fs.clone();
        self.note("open-unlinked".into());
        let a = must("create tmp", fs.create(self.private, b"tmp", 0o600, 0, 0))?;
        must("open", fs.open_file(a.ino))?;
        must("unlink tmp", fs.unlink(self.private, b"tmp"))?;
        let len = self.rng.gen_range(1..30_000);
        let data = pattern(&mut self.rng, len);
        must("write unlinked", fs.write(a.ino, 100, &data))?;
        if self.rng.gen_bool(0.3) {
            must("fsync unlinked", fs.fsync(a.ino, false))?;
        }
        let mut buf = vec![0u8; len];
        must("read unlinked", fs.read(a.ino, 100, &mut buf))?;
        if buf != data {
            return Err("open-unlinked file reads back wrong".into());
        }
        let at = must("getattr unlinked", fs.getattr(a.ino))?;
        if at.nlink != 0 || at.size != 100 + len as u64 {
            return Err(format!("open-unlinked getattr: nlink {} size {}", at.nlink, at.size));
        }
        must("release", fs.release(a.ino))?;
        // Freed at its last release (another thread may reuse the number at once: compare
        // generations).
        if let Ok(b) = fs.getattr(a.ino)
            && b.generation == a.generation
        {
            return Err(format!("inode {} still alive after its last release: {b:?}", a.ino));
        }
        Ok(())
    }
}

fn stress(label: &str, opts: MountOptions, seed: u64) {
    // In RAM when there is a tmpfs: the image's flushes are then cheap and the threads
    // spend their time in the file system, not waiting for a disk.
    let dir = tempfile::Builder::new()
        .prefix("cjfs-stress")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tmpdir");
    let (path, dev) = fresh_image(dir.path(), "stress.img", 256);
    let fs = Fs::open(dev, opts.clone()).expect("mount");
    let shared: Vec<Ino> = (0..SHARED)
        .map(|i| fs.mkdir(ROOT_INO, format!("shared{i}").as_bytes(), 0o755, 0, 0).expect("mkdir").ino)
        .collect();
    let secs = secs();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let last = Arc::new(Mutex::new(vec![String::new(); THREADS]));
    let (tx, rx) = mpsc::channel();
    let failed = Arc::new(AtomicBool::new(false));
    for id in 0..THREADS {
        let private = fs.mkdir(ROOT_INO, format!("p{id}").as_bytes(), 0o755, 0, 0).expect("mkdir").ino;
        let mut w = Worker {
            id,
            fs: fs.clone(),
            rng: StdRng::seed_from_u64(base_seed() * 1_000_003 + seed * 1000 + id as u64),
            shared: shared.clone(),
            private,
            files: HashMap::new(),
            last: last.clone(),
        };
        let tx = tx.clone();
        let failed = failed.clone();
        std::thread::spawn(move || {
            let r = w.run(deadline);
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            let _ = tx.send((id, r));
        });
    }
    drop(tx);
    // Watchdog: generous bound on top of the run time.
    let bound = Duration::from_secs_f64(secs + 60.0);
    let t0 = Instant::now();
    let mut errors = Vec::new();
    for _ in 0..THREADS {
        let left = bound.saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok((_, Ok(()))) => {}
            Ok((id, Err(e))) => errors.push(format!("thread {id}: {e}")),
            Err(_) => {
                let l = last.lock().expect("last");
                let states: Vec<String> = l.iter().enumerate().map(|(i, s)| format!("  {i}: {s}")).collect();
                panic!(
                    "{label}: workers did not finish within {bound:?}: deadlock? last operation per thread:\n{}",
                    states.join("\n")
                );
            }
        }
    }
    assert!(errors.is_empty(), "{label}: {}", errors.join("\n"));
    let stats = fs.journal().stats();
    eprintln!("{label}: {} transactions, {} handles in {secs} s", stats.transactions, stats.handles);
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    // And it mounts again.
    let fs = Fs::open(open_image(&path), opts).expect("remount");
    fs.readdir(ROOT_INO, 0, 100).expect("readdir root");
    fs.unmount().expect("second unmount");
    assert_fsck_clean(&path);
}

#[test]
fn stress_jbd2() {
    stress("jbd2", MountOptions::default(), 1);
}

#[test]
fn stress_nojournal() {
    stress("nojournal", MountOptions { journal: JournalConfig::nojournal(), ..MountOptions::default() }, 2);
}

#[test]
fn stress_data_journal() {
    stress("data=journal", MountOptions { data: DataMode::Journal, ..MountOptions::default() }, 3);
}

/// Per-core logs with CJFS's pipeline in each, two logs whatever the core count, polling
/// waits and per-core dispatch: allocation, chaining and validity under every operation,
/// and (in the debug run) every lock acquisition checked against its rank.
#[test]
fn stress_two_logs() {
    let opts =
        preset::apply("zjournal-cjfs+logs=2+wait=spin_park+dispatch=per_core", MountOptions::default())
            .expect("preset");
    stress("zjournal-cjfs, 2 logs", opts, 4);
}

/// iJournaling's fsync path (file-level records) beside normal commits under every operation.
#[test]
fn stress_ijournal() {
    stress("ijournal", preset::apply("ijournal", MountOptions::default()).expect("preset"), 5);
}

/// A rename of directory `a/dir` over file `b/file` (ENOTDIR) races an rmdir of
/// `a/dir/link`, a hard link to `b/file`. The rmdir locks `dir` (its parent) and then the
/// file; the rename must lock its two children in the same order (directory first), not
/// by inode number (the file was made first, so its number is lower), or the two wait on
/// each other forever.
#[test]
fn rename_and_rmdir_of_a_hard_link_do_not_deadlock() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let (_path, dev) = fresh_image(dir.path(), "links.img", 64);
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).expect("mkdir a").ino;
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).expect("mkdir b").ino;
    let file = fs.create(b, b"file", 0o644, 0, 0).expect("create").ino;
    let d = fs.mkdir(a, b"dir", 0o755, 0, 0).expect("mkdir dir").ino;
    assert!(file < d, "the file must have the lower inode number ({file} vs {d})");
    fs.link(file, d, b"link").expect("link");
    let iterations = 20_000;
    let (tx, rx) = mpsc::channel();
    let f1 = fs.clone();
    let tx1 = tx.clone();
    std::thread::spawn(move || {
        for _ in 0..iterations {
            let r = f1.rename(a, b"dir", b, b"file", RenameFlags::default());
            assert!(matches!(r, Err(FsError::NotDir(_))), "rename of a directory over a file: {r:?}");
        }
        let _ = tx1.send(());
    });
    let f2 = fs.clone();
    std::thread::spawn(move || {
        for _ in 0..iterations {
            let r = f2.rmdir(d, b"link");
            assert!(matches!(r, Err(FsError::NotDir(_))), "rmdir of a file: {r:?}");
        }
        let _ = tx.send(());
    });
    for _ in 0..2 {
        rx.recv_timeout(Duration::from_secs(60)).expect("rename and rmdir deadlocked");
    }
    fs.unmount().expect("unmount");
}
