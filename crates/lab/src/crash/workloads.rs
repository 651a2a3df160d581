//! Crash workloads: the operations, how they run on cjfs, and the generators (ACE-style
//! bounded sequences, the classics, the iJournaling scenarios, multi-threaded random work).
//!
//! A [`Workload`] is a *setup* (run and made durable before recording starts, so it is part
//! of the base image, like CrashMonkey's setup phase) and a list of *rounds*; every round
//! is a list of operations run concurrently, one thread each (a single-threaded workload
//! has one operation per round). Operations in one round touch disjoint files, so the
//! logical result does not depend on their interleaving. A *free-running* workload
//! ([`Workload::free_running`]) gives each thread a column instead: thread `t` runs
//! operation `t` of every round in turn without waiting for the other threads between
//! rounds, so one thread's commit can start while another's is still being flushed; each
//! thread keeps to files of its own.
//!
//! # The ACE file set
//!
//! Two directories, nested one level (`A` and `A/C`), with two files each (`foo`, `bar`),
//! plus the same two names at the root. In the base image `foo`, `A/foo` and `A/C/foo` hold
//! 16 KiB and an extended attribute `user.a`, and an empty directory `B` exists; every `bar`
//! is absent (so it can be created, linked or renamed to). Operations are generated only
//! where they are valid in the current (modelled) state.

use std::collections::BTreeSet;

use cjfs_fs::ondisk::inode::{EXT4_DIRSYNC_FL, EXT4_SYNC_FL};
use cjfs_fs::{FallocMode, Fs, FsError, Ino, RenameFlags, SetAttr, XattrFlags};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::oracle::{Kind, Model};

/// One operation of a crash workload. Paths are relative to the root, `/`-separated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Create an empty regular file (mode 0644).
    Creat {
        /// Path.
        path: String,
    },
    /// Make a directory (mode 0755).
    Mkdir {
        /// Path.
        path: String,
    },
    /// Write `len` bytes of a pattern derived from `seed` at `off` (write, overwrite and
    /// append are this with different offsets).
    Write {
        /// Path.
        path: String,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
        /// Pattern seed.
        seed: u32,
    },
    /// Change the size.
    Truncate {
        /// Path.
        path: String,
        /// New size.
        size: u64,
    },
    /// fallocate.
    Fallocate {
        /// Path.
        path: String,
        /// Mode: `alloc`, `keep_size`, `punch` or `zero`.
        mode: String,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// Hard link `from` as `to`.
    Link {
        /// Existing path.
        from: String,
        /// New name.
        to: String,
    },
    /// Remove a non-directory.
    Unlink {
        /// Path.
        path: String,
    },
    /// Rename (replacing an existing target).
    Rename {
        /// Existing path.
        from: String,
        /// New path.
        to: String,
    },
    /// Make a symbolic link at `path` pointing at `target`.
    Symlink {
        /// Link text.
        target: String,
        /// Path of the link.
        path: String,
    },
    /// Remove an empty directory.
    Rmdir {
        /// Path.
        path: String,
    },
    /// Set an extended attribute to `len` pattern bytes.
    SetXattr {
        /// Path.
        path: String,
        /// Attribute name (with its namespace, e.g. `user.a`).
        name: String,
        /// Value length.
        len: u32,
        /// Pattern seed.
        seed: u32,
    },
    /// Remove an extended attribute.
    RemoveXattr {
        /// Path.
        path: String,
        /// Attribute name.
        name: String,
    },
    /// Write `len` bytes like [`Op::Write`], but every 4 KiB-aligned block of the file the
    /// write covers starts with the JBD2 magic number (big-endian `0xC03B3998`), so a
    /// journaled copy must be escaped (JBD2's `JBD2_FLAG_ESCAPE`) and restored at replay.
    WriteMagic {
        /// Path.
        path: String,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
        /// Pattern seed.
        seed: u32,
    },
    /// Turn data journaling of a file on or off (`chattr ±j`; turning it off empties the
    /// journal first, as ext4 does).
    SetJournalData {
        /// Path.
        path: String,
        /// On (`+j`) or off (`-j`).
        on: bool,
    },
    /// Set or clear synchronous updates (`chattr ±D ±S`, through `Fs::set_flags`): a
    /// directory marked `+D` or `+S` makes its directory operations durable when they
    /// return, a file marked `+S` its writes and truncates; new inodes inherit the flags.
    /// `dirsync` is dropped on anything but a directory, as ext4 does.
    SetSyncFlags {
        /// Path.
        path: String,
        /// Directory operations synchronous (`+D`) or not (`-D`).
        dirsync: bool,
        /// Every update synchronous (`+S`) or not (`-S`).
        sync: bool,
    },
    /// Change the owner and group (`chown`): on a `quota` image the file's usage moves from
    /// the old ids' entries to the new ones' (the oracle keeps no owners; e2fsck recounts
    /// every usage in each crash state).
    Chown {
        /// Path.
        path: String,
        /// New uid.
        uid: u32,
        /// New gid.
        gid: u32,
    },
    /// fsync (a file or a directory).
    Fsync {
        /// Path.
        path: String,
    },
    /// fdatasync.
    Fdatasync {
        /// Path.
        path: String,
    },
    /// sync / syncfs.
    Sync,
    /// Clean unmount (every workload ends with it; a global persistence point).
    Unmount,
}

impl Op {
    /// Whether this is a persistence call (fsync, fdatasync, sync, unmount). An operation
    /// that synchronous updates (`chattr +D`/`+S`) make durable is one too where the model
    /// says so (`oracle::Changes::implied`); that depends on the state, not on the operation.
    pub fn is_persistence(&self) -> bool {
        matches!(self, Op::Fsync { .. } | Op::Fdatasync { .. } | Op::Sync | Op::Unmount)
    }

    /// One-line description, shell-like.
    pub fn describe(&self) -> String {
        match self {
            Op::Creat { path } => format!("creat {path}"),
            Op::Mkdir { path } => format!("mkdir {path}"),
            Op::Write { path, off, len, seed } => format!("write {path} off={off} len={len} seed={seed}"),
            Op::WriteMagic { path, off, len, seed } => {
                format!("write-jbd2-magic {path} off={off} len={len} seed={seed}")
            }
            Op::SetJournalData { path, on } => format!("chattr {}j {path}", if *on { '+' } else { '-' }),
            Op::SetSyncFlags { path, dirsync, sync } => {
                let sign = |on: bool| if on { '+' } else { '-' };
                format!("chattr {}D {}S {path}", sign(*dirsync), sign(*sync))
            }
            Op::Truncate { path, size } => format!("truncate {path} {size}"),
            Op::Chown { path, uid, gid } => format!("chown {uid}:{gid} {path}"),
            Op::Fallocate { path, mode, off, len } => format!("fallocate {path} {mode} off={off} len={len}"),
            Op::Link { from, to } => format!("link {from} {to}"),
            Op::Unlink { path } => format!("unlink {path}"),
            Op::Rename { from, to } => format!("rename {from} {to}"),
            Op::Symlink { target, path } => format!("symlink {target} {path}"),
            Op::Rmdir { path } => format!("rmdir {path}"),
            Op::SetXattr { path, name, len, seed } => format!("setxattr {path} {name} len={len} seed={seed}"),
            Op::RemoveXattr { path, name } => format!("removexattr {path} {name}"),
            Op::Fsync { path } => format!("fsync {path}"),
            Op::Fdatasync { path } => format!("fdatasync {path}"),
            Op::Sync => "sync".to_string(),
            Op::Unmount => "unmount".to_string(),
        }
    }
}

/// A crash workload. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Name (unique within a suite), e.g. `ace1-017` or `classic-rename`.
    pub name: String,
    /// Run and made durable before recording starts.
    pub setup: Vec<Op>,
    /// Recorded rounds; each round's operations run concurrently.
    pub rounds: Vec<Vec<Op>>,
    /// Threads do not wait for each other between rounds: thread `t` runs operation `t` of
    /// each round in turn (every round has one operation per thread).
    #[serde(default)]
    pub free_running: bool,
}

impl Workload {
    /// A single-threaded workload.
    pub fn sequential(name: impl Into<String>, setup: Vec<Op>, ops: Vec<Op>) -> Workload {
        Workload {
            name: name.into(),
            setup,
            rounds: ops.into_iter().map(|o| vec![o]).collect(),
            free_running: false,
        }
    }

    /// The workload as run on images of `block_size`-byte blocks: extended attribute values
    /// longer than half a block are cut to half a block (one must fit an xattr block, as
    /// the kernel requires without `ea_inode`). Unchanged with 4 KiB blocks.
    pub fn for_block_size(&self, block_size: usize) -> Workload {
        let cap = (block_size / 2) as u32;
        let fit = |op: &Op| match op {
            Op::SetXattr { path, name, len, seed } if block_size < 4096 && *len > cap => {
                Op::SetXattr { path: path.clone(), name: name.clone(), len: cap, seed: *seed }
            }
            other => other.clone(),
        };
        Workload {
            name: self.name.clone(),
            setup: self.setup.iter().map(fit).collect(),
            rounds: self.rounds.iter().map(|r| r.iter().map(fit).collect()).collect(),
            free_running: self.free_running,
        }
    }

    /// The recorded operations in model order (round by round, thread order), ending with
    /// the unmount the recorder adds.
    pub fn flat_ops(&self) -> Vec<Op> {
        let mut v: Vec<Op> = self.rounds.iter().flatten().cloned().collect();
        v.push(Op::Unmount);
        v
    }

    /// Whether the recorded write log is deterministic (no concurrent round).
    pub fn deterministic(&self) -> bool {
        self.rounds.iter().all(|r| r.len() <= 1)
    }
}

/// The bytes written by a `Write` with this seed at file offset `pos`.
pub fn pattern_byte(seed: u32, pos: u64) -> u8 {
    let x = (pos as u32).wrapping_mul(0x9E37_79B1) ^ seed.wrapping_mul(0x85EB_CA77) ^ ((pos >> 32) as u32);
    let x = x ^ (x >> 15);
    (x.wrapping_mul(0x2C1B_3C6D) >> 24) as u8 | 1
}

/// `len` pattern bytes for a write at `off`.
pub fn pattern(seed: u32, off: u64, len: u64) -> Vec<u8> {
    (0..len).map(|i| pattern_byte(seed, off + i)).collect()
}

/// The bytes an [`Op::WriteMagic`] writes: the pattern, with the JBD2 magic number at the
/// start of every 4 KiB block of the file.
pub fn magic_pattern(seed: u32, off: u64, len: u64) -> Vec<u8> {
    const MAGIC: [u8; 4] = [0xC0, 0x3B, 0x39, 0x98];
    (0..len)
        .map(|i| {
            let pos = off + i;
            match pos % 4096 {
                k @ 0..4 => MAGIC[k as usize],
                _ => pattern_byte(seed, pos),
            }
        })
        .collect()
}

/// Split a path into (parent path, name).
pub fn split_path(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

fn falloc_mode(mode: &str) -> Result<FallocMode, FsError> {
    Ok(match mode {
        "alloc" => FallocMode::Allocate,
        "keep_size" => FallocMode::KeepSize,
        "punch" => FallocMode::PunchHole,
        "zero" => FallocMode::ZeroRange { keep_size: false },
        "zero_keep_size" => FallocMode::ZeroRange { keep_size: true },
        m => return Err(FsError::Invalid(format!("unknown fallocate mode {m:?}"))),
    })
}

/// Run `op` on `fs`. Returns the inode number of a newly created inode. `Unmount` is not
/// handled here (the recorder unmounts).
pub fn exec(fs: &Fs, op: &Op) -> Result<Option<Ino>, FsError> {
    let parent_name = |p: &str| -> Result<(Ino, Vec<u8>), FsError> {
        let (d, n) = split_path(p);
        Ok((fs.resolve(d)?, n.as_bytes().to_vec()))
    };
    match op {
        Op::Creat { path } => {
            let (p, n) = parent_name(path)?;
            Ok(Some(fs.create(p, &n, 0o644, 0, 0)?.ino))
        }
        Op::Mkdir { path } => {
            let (p, n) = parent_name(path)?;
            Ok(Some(fs.mkdir(p, &n, 0o755, 0, 0)?.ino))
        }
        Op::Write { path, off, len, seed } | Op::WriteMagic { path, off, len, seed } => {
            let ino = fs.resolve(path)?;
            let data = match op {
                Op::WriteMagic { .. } => magic_pattern(*seed, *off, *len),
                _ => pattern(*seed, *off, *len),
            };
            let mut done = 0usize;
            while done < data.len() {
                let n = fs.write(ino, off + done as u64, &data[done..])?;
                if n == 0 {
                    return Err(FsError::Invalid("short write".into()));
                }
                done += n;
            }
            Ok(None)
        }
        Op::Truncate { path, size } => {
            let ino = fs.resolve(path)?;
            fs.setattr(ino, &SetAttr { size: Some(*size), ..SetAttr::default() })?;
            Ok(None)
        }
        Op::Fallocate { path, mode, off, len } => {
            let ino = fs.resolve(path)?;
            fs.fallocate(ino, falloc_mode(mode)?, *off, *len)?;
            Ok(None)
        }
        Op::Link { from, to } => {
            let ino = fs.resolve(from)?;
            let (p, n) = parent_name(to)?;
            fs.link(ino, p, &n)?;
            Ok(None)
        }
        Op::Unlink { path } => {
            let (p, n) = parent_name(path)?;
            fs.unlink(p, &n)?;
            Ok(None)
        }
        Op::Rename { from, to } => {
            let (p1, n1) = parent_name(from)?;
            let (p2, n2) = parent_name(to)?;
            fs.rename(p1, &n1, p2, &n2, RenameFlags::default())?;
            Ok(None)
        }
        Op::Symlink { target, path } => {
            let (p, n) = parent_name(path)?;
            Ok(Some(fs.symlink(p, &n, target.as_bytes(), 0, 0)?.ino))
        }
        Op::Rmdir { path } => {
            let (p, n) = parent_name(path)?;
            fs.rmdir(p, &n)?;
            Ok(None)
        }
        Op::SetXattr { path, name, len, seed } => {
            let ino = fs.resolve(path)?;
            fs.setxattr(ino, name.as_bytes(), &pattern(*seed, 0, u64::from(*len)), XattrFlags::Any)?;
            Ok(None)
        }
        Op::RemoveXattr { path, name } => {
            let ino = fs.resolve(path)?;
            fs.removexattr(ino, name.as_bytes())?;
            Ok(None)
        }
        Op::SetJournalData { path, on } => {
            fs.set_journal_data(fs.resolve(path)?, *on)?;
            Ok(None)
        }
        Op::SetSyncFlags { path, dirsync, sync } => {
            let flags = if *dirsync { EXT4_DIRSYNC_FL } else { 0 } | if *sync { EXT4_SYNC_FL } else { 0 };
            fs.set_flags(fs.resolve(path)?, EXT4_DIRSYNC_FL | EXT4_SYNC_FL, flags)?;
            Ok(None)
        }
        Op::Chown { path, uid, gid } => {
            fs.setattr(
                fs.resolve(path)?,
                &SetAttr { uid: Some(*uid), gid: Some(*gid), ..SetAttr::default() },
            )?;
            Ok(None)
        }
        Op::Fsync { path } => {
            fs.fsync(fs.resolve(path)?, false)?;
            Ok(None)
        }
        Op::Fdatasync { path } => {
            fs.fsync(fs.resolve(path)?, true)?;
            Ok(None)
        }
        Op::Sync => {
            fs.sync()?;
            Ok(None)
        }
        Op::Unmount => Err(FsError::Invalid("unmount is run by the recorder".into())),
    }
}

// ---------------------------------------------------------------------------------------
// ACE-style generator
// ---------------------------------------------------------------------------------------

/// The directories of the ACE file set (root is `""`).
const ACE_DIRS: [&str; 3] = ["", "A", "A/C"];
/// File names used in every directory.
const ACE_FILES: [&str; 2] = ["foo", "bar"];
/// Names for new directories.
const ACE_NEW_DIRS: [&str; 3] = ["D", "A/D", "A/C/D"];

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") }
}

/// The setup shared by every ACE workload (see the module docs).
pub fn ace_setup() -> Vec<Op> {
    let mut v = vec![
        Op::Mkdir { path: "A".into() },
        Op::Mkdir { path: "A/C".into() },
        Op::Mkdir { path: "B".into() },
    ];
    for (i, d) in ACE_DIRS.iter().enumerate() {
        let p = join(d, "foo");
        v.push(Op::Creat { path: p.clone() });
        v.push(Op::Write { path: p.clone(), off: 0, len: 16384, seed: 100 + i as u32 });
        v.push(Op::SetXattr { path: p, name: "user.a".into(), len: 16, seed: 200 + i as u32 });
    }
    v.push(Op::Sync);
    v
}

/// Every core operation valid in `m` over the ACE file set, in a fixed order.
pub fn ace_candidates(m: &Model) -> Vec<Op> {
    let mut out = Vec::new();
    let files: Vec<String> = ACE_DIRS
        .iter()
        .flat_map(|d| ACE_FILES.iter().map(move |f| join(d, f)))
        .filter(|p| m.exists_dir(split_path(p).0))
        .collect();
    let regular: Vec<&String> = files.iter().filter(|p| m.kind_of(p) == Some(Kind::File)).collect();
    let absent: Vec<&String> = files.iter().filter(|p| m.kind_of(p).is_none()).collect();
    let mut seed = 1000u32;
    let mut next_seed = || {
        seed += 1;
        seed
    };
    for p in &absent {
        out.push(Op::Creat { path: (*p).clone() });
    }
    for d in ACE_NEW_DIRS {
        if m.kind_of(d).is_none() && m.exists_dir(split_path(d).0) {
            out.push(Op::Mkdir { path: d.to_string() });
        }
    }
    for p in &regular {
        let size = m.size_of(p);
        let p = (*p).clone();
        // write: past the end, leaving a hole; overwrite: aligned and unaligned; append.
        out.push(Op::Write { path: p.clone(), off: size.max(4096) + 28672, len: 4096, seed: next_seed() });
        if size > 0 {
            out.push(Op::Write { path: p.clone(), off: 4096, len: 8192.min(size), seed: next_seed() });
            out.push(Op::Write { path: p.clone(), off: 100, len: 5000, seed: next_seed() });
        } else {
            out.push(Op::Write { path: p.clone(), off: 0, len: 8192, seed: next_seed() });
        }
        out.push(Op::Write { path: p.clone(), off: size, len: 5000, seed: next_seed() });
        out.push(Op::Truncate { path: p.clone(), size: 0 });
        if size > 5000 {
            out.push(Op::Truncate { path: p.clone(), size: 5000 });
        }
        out.push(Op::Truncate { path: p.clone(), size: size + 65536 });
        out.push(Op::Fallocate { path: p.clone(), mode: "alloc".into(), off: size, len: 16384 });
        out.push(Op::Fallocate { path: p.clone(), mode: "keep_size".into(), off: size, len: 32768 });
        if size >= 8192 {
            out.push(Op::Fallocate { path: p.clone(), mode: "punch".into(), off: 4096, len: 4096 });
            out.push(Op::Fallocate { path: p.clone(), mode: "zero".into(), off: 1000, len: 8000 });
        }
        out.push(Op::SetXattr { path: p.clone(), name: "user.a".into(), len: 24, seed: next_seed() });
        out.push(Op::SetXattr { path: p.clone(), name: "user.big".into(), len: 3000, seed: next_seed() });
        if m.has_xattr(&p, "user.a") {
            out.push(Op::RemoveXattr { path: p.clone(), name: "user.a".into() });
        }
    }
    // Hard links and renames: same directory and across directories.
    for from in &regular {
        for to in &files {
            if from == &to {
                continue;
            }
            let same_dir = split_path(from).0 == split_path(to).0;
            let (fname, tname) = (split_path(from).1, split_path(to).1);
            // Keep the cross product small: same directory, or same file name across dirs.
            if !same_dir && fname != tname && !(fname == "foo" && tname == "bar") {
                continue;
            }
            if m.kind_of(to).is_none() {
                out.push(Op::Link { from: (*from).clone(), to: to.clone() });
            }
            if m.kind_of(to).is_none_or(|k| k == Kind::File) {
                out.push(Op::Rename { from: (*from).clone(), to: to.clone() });
            }
        }
    }
    for p in &regular {
        out.push(Op::Unlink { path: (*p).clone() });
    }
    for p in &absent {
        let (d, n) = split_path(p);
        if n == "bar" {
            out.push(Op::Symlink { target: "foo".into(), path: (*p).clone() });
        }
        let _ = d;
    }
    // Directory operations.
    for d in ["B", "A/D", "D", "A/C/D"] {
        if m.kind_of(d) == Some(Kind::Dir) && m.dir_is_empty(d) {
            out.push(Op::Rmdir { path: d.into() });
        }
    }
    if m.kind_of("A/C") == Some(Kind::Dir) && m.kind_of("C").is_none() {
        out.push(Op::Rename { from: "A/C".into(), to: "C".into() });
    }
    if m.kind_of("B") == Some(Kind::Dir) && m.kind_of("A/B").is_none() && m.kind_of("A").is_some() {
        out.push(Op::Rename { from: "B".into(), to: "A/B".into() });
    }
    if m.kind_of("A") == Some(Kind::Dir) {
        out.push(Op::SetXattr { path: "A".into(), name: "user.d".into(), len: 40, seed: next_seed() });
    }
    out
}

/// The persistence call to follow `op` with: `which` is 0 = fsync of the object,
/// 1 = fsync of its parent directory, 2 = fdatasync, 3 = sync. Returns `None` where the
/// choice duplicates another (fdatasync of a directory) or has nothing to act on.
pub fn ace_persist(m: &Model, op: &Op, which: u8) -> Option<Op> {
    let (obj, parent) = match op {
        Op::Creat { path }
        | Op::Mkdir { path }
        | Op::Write { path, .. }
        | Op::Truncate { path, .. }
        | Op::Fallocate { path, .. }
        | Op::Symlink { path, .. }
        | Op::SetXattr { path, .. }
        | Op::Chown { path, .. }
        | Op::RemoveXattr { path, .. } => (Some(path.clone()), split_path(path).0.to_string()),
        Op::Link { to, .. } | Op::Rename { to, .. } => (Some(to.clone()), split_path(to).0.to_string()),
        Op::Unlink { path } | Op::Rmdir { path } => (None, split_path(path).0.to_string()),
        _ => (None, String::new()),
    };
    // A symlink cannot be opened for fsync: use its parent.
    let obj = obj.filter(|p| matches!(m.kind_of(p), Some(Kind::File) | Some(Kind::Dir)));
    match which {
        0 => Some(Op::Fsync { path: obj.unwrap_or_else(|| parent.clone()) }),
        1 => Some(Op::Fsync { path: parent }),
        2 => match obj {
            Some(p) if m.kind_of(&p) == Some(Kind::File) => Some(Op::Fdatasync { path: p }),
            _ => None,
        },
        _ => Some(Op::Sync),
    }
}

/// The ACE base model: the model after [`ace_setup`] on an empty file system.
pub fn ace_base_model() -> Model {
    let mut m = Model::empty_fs();
    for op in ace_setup() {
        m.apply_predicted(&op);
    }
    m
}

/// Every length-1 ACE workload: each candidate operation followed by each persistence
/// choice (never nothing).
pub fn ace_seq1() -> Vec<Workload> {
    let base = ace_base_model();
    let mut out = Vec::new();
    for op in ace_candidates(&base) {
        let mut after = base.clone();
        after.apply_predicted(&op);
        let mut seen = BTreeSet::new();
        for which in 0..4 {
            if let Some(p) = ace_persist(&after, &op, which)
                && seen.insert(p.describe())
            {
                let name = format!("ace1-{:04}", out.len());
                out.push(Workload::sequential(name, ace_setup(), vec![op.clone(), p]));
            }
        }
    }
    out
}

/// `count` seeded random ACE workloads of `len` operations; every operation but the last
/// may be followed by nothing.
pub fn ace_seqn(len: usize, count: usize, seed: u64) -> Vec<Workload> {
    let mut rng = StdRng::seed_from_u64(seed ^ (len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let base = ace_base_model();
    let mut out = Vec::with_capacity(count);
    let mut seen = BTreeSet::new();
    let mut attempts = 0;
    while out.len() < count && attempts < count * 20 {
        attempts += 1;
        let mut m = base.clone();
        let mut ops = Vec::new();
        for i in 0..len {
            let cands = ace_candidates(&m);
            let Some(op) = cands.choose(&mut rng).cloned() else { break };
            m.apply_predicted(&op);
            ops.push(op.clone());
            let last = i + 1 == len;
            let which = rng.gen_range(0..if last { 4 } else { 5 });
            if which < 4
                && let Some(p) = ace_persist(&m, &op, which)
            {
                m.apply_predicted(&p);
                ops.push(p);
            } else if last {
                ops.push(Op::Sync);
            }
        }
        let key: Vec<String> = ops.iter().map(Op::describe).collect();
        if seen.insert(key) {
            let name = format!("ace{len}-{:05}", out.len());
            out.push(Workload::sequential(name, ace_setup(), ops));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Classics and the iJournaling scenarios
// ---------------------------------------------------------------------------------------

/// Rename a fsynced root-level file into a fsynced subdirectory without fsync: exactly one
/// name survives, with its content intact.
pub fn classic_rename() -> Workload {
    let setup = vec![Op::Sync];
    let ops = vec![
        Op::Creat { path: "foo".into() },
        Op::Write { path: "foo".into(), off: 0, len: 12288, seed: 7 },
        Op::Mkdir { path: "A".into() },
        Op::Fsync { path: "foo".into() },
        Op::Fsync { path: "A".into() },
        Op::Rename { from: "foo".into(), to: "A/foo".into() },
        Op::Write { path: "A/foo".into(), off: 20000, len: 100, seed: 8 },
    ];
    Workload::sequential("classic-rename", setup, ops)
}

/// Create, write and fsync ten files, then delete them with a sync between deletions.
pub fn classic_ten_files() -> Workload {
    let mut ops = Vec::new();
    for i in 0..10 {
        let p = format!("f{i}");
        ops.push(Op::Creat { path: p.clone() });
        ops.push(Op::Write { path: p.clone(), off: 0, len: 6000, seed: 30 + i });
        ops.push(Op::Fsync { path: p });
    }
    for i in 0..10 {
        ops.push(Op::Unlink { path: format!("f{i}") });
        ops.push(Op::Sync);
    }
    Workload::sequential("classic-ten-files", vec![], ops)
}

/// Block reuse across a free: a directory block is journalled, the directory removed
/// (the block freed and revoked), and the block reused as file data that is fsynced. Without
/// the revoke record, recovery would replay the old directory block over the file's data.
pub fn classic_block_reuse() -> Workload {
    let ops = vec![
        Op::Mkdir { path: "d".into() },
        Op::Creat { path: "d/x".into() },
        Op::Fsync { path: "d".into() },
        Op::Unlink { path: "d/x".into() },
        Op::Rmdir { path: "d".into() },
        Op::Sync,
        Op::Creat { path: "g".into() },
        Op::Write { path: "g".into(), off: 0, len: 16384, seed: 55 },
        Op::Fsync { path: "g".into() },
    ];
    Workload::sequential("classic-block-reuse", vec![], ops)
}

/// Writes into preallocated (unwritten) blocks of a file whose extent tree has a leaf block
/// (eight separate fallocated ranges, more than the inode's four root entries), each fsynced,
/// then an overwrite of written data, fsynced: a write in the same clock tick as the last one
/// converts the extent in the leaf and changes no field of the inode, and its fsync must
/// still commit the conversion (else the data reads back as zeros).
pub fn classic_prealloc_writes() -> Workload {
    let mut ops = vec![Op::Creat { path: "p".into() }];
    for i in 0..8u64 {
        ops.push(Op::Fallocate { path: "p".into(), mode: "alloc".into(), off: i * 32768, len: 16384 });
    }
    ops.push(Op::Fsync { path: "p".into() });
    for (i, off) in [4096u64, 32768 + 8192, 3 * 32768].into_iter().enumerate() {
        ops.push(Op::Write { path: "p".into(), off, len: 4096, seed: 60 + i as u32 });
        ops.push(Op::Fsync { path: "p".into() });
    }
    ops.push(Op::Write { path: "p".into(), off: 4096 + 100, len: 200, seed: 63 });
    ops.push(Op::Fsync { path: "p".into() });
    Workload::sequential("classic-prealloc-writes", vec![], ops)
}

/// iJournaling 1: `n` creates (each with 4 KiB written), only the odd ones fsynced.
pub fn ij_creates(n: usize) -> Workload {
    let mut ops = vec![Op::Mkdir { path: "d".into() }];
    for i in 0..n {
        let p = format!("d/f{i}");
        ops.push(Op::Creat { path: p.clone() });
        ops.push(Op::Write { path: p.clone(), off: 0, len: 4096, seed: i as u32 });
        if i % 2 == 1 {
            ops.push(Op::Fsync { path: p });
        }
    }
    Workload::sequential(format!("ij-creates-{n}"), vec![], ops)
}

/// iJournaling 2: repeated 4 KiB append + fsync until the file needs an extent tree of
/// depth >= 1. A second file appended in between keeps the first one's blocks apart, so
/// every append is a new extent; `appends` of 8 or more exceed the four in-inode extents.
pub fn ij_extent_tree(appends: usize) -> Workload {
    let mut ops = vec![Op::Creat { path: "big".into() }, Op::Creat { path: "gap".into() }];
    for i in 0..appends as u64 {
        ops.push(Op::Write { path: "big".into(), off: i * 4096, len: 4096, seed: 500 + i as u32 });
        ops.push(Op::Fsync { path: "big".into() });
        ops.push(Op::Write { path: "gap".into(), off: i * 4096, len: 4096, seed: 900 + i as u32 });
    }
    Workload::sequential(format!("ij-extent-tree-{appends}"), vec![], ops)
}

/// iJournaling 3: fsync of a file several new directories deep.
pub fn ij_deep_fsync(depth: usize) -> Workload {
    let mut ops = Vec::new();
    let mut p = String::new();
    for i in 0..depth {
        p = join(&p, &format!("n{i}"));
        ops.push(Op::Mkdir { path: p.clone() });
    }
    let f = join(&p, "file");
    ops.push(Op::Creat { path: f.clone() });
    ops.push(Op::Write { path: f.clone(), off: 0, len: 10000, seed: 77 });
    ops.push(Op::Fsync { path: f });
    ops.push(Op::Creat { path: "after".into() });
    Workload::sequential(format!("ij-deep-fsync-{depth}"), vec![], ops)
}

/// Rounds of eight fsyncs in `ij-fill` that write more record blocks than one area per core
/// holds in the crash test (two more rounds for the fsyncs that find an area full).
fn fill_rounds_to_wrap() -> usize {
    let blocks = cjfs_journal::IAreas::PerCore.wanted() * super::record::IJOURNAL_AREA_BLOCKS as usize;
    blocks.div_ceil(8) + 2
}

/// iJournaling's crash cases (its issue's "Crash testing" list; every preset runs them, and
/// they mean most where fsync writes i-transactions). `n` scales the repetitive ones.
///
/// * `ij-after-commit`: fsyncs served by records, then a normal commit (`sync`), then more
///   fsyncs: a crash after the commit finds records older than it, which must be ignored
///   (the file shortened by a committed truncate must not grow back).
/// * `ij-rename-fsync`: fsync after renaming the file, after renaming a new file, after
///   renaming a directory above it: never both names, never neither.
/// * `ij-link-fsync`: fsync after a hard link (the paper's fallback).
/// * `ij-dir-fsync`: directory fsync (a normal commit covering its new entries).
/// * `ij-truncate-fsync`: truncate then fsync, shrinking and growing, freed blocks unmapped.
/// * `ij-reuse-ino`: unlink and re-create, fsyncing each new file (the freed inode number
///   must not be reused while the unlink is not durable), and a name re-created in place
///   (after an unlink, of one of two links, by a new directory, and after a rename).
/// * `ij-fill`: appends and fsyncs from eight threads at once (`n` rounds, at least enough
///   to wrap): more records than the (small) crash-test areas hold, so records wrap around
///   the area end, fill it, force commits.
/// * `ij-race-commit`: one thread fsyncs its new files while another fsyncs a directory of its
///   own (a normal commit of the running transaction, the first thread's changes included):
///   fsyncs meet normal commits of the same transaction in flight.
/// * `ij-htree`: a new file and a new directory in an indexed directory of 600 entries,
///   fsynced: the entry merged into the htree at recovery.
pub fn ijournal_cases(n: usize) -> Vec<Workload> {
    let w = |p: &str, off: u64, len: u64, seed: u32| Op::Write { path: p.into(), off, len, seed };
    let fsync = |p: &str| Op::Fsync { path: p.into() };
    let after_commit = {
        let mut ops = vec![Op::Creat { path: "a".into() }, w("a", 0, 20000, 1), fsync("a")];
        ops.push(Op::Truncate { path: "a".into(), size: 5000 });
        ops.push(Op::Sync);
        for i in 0..n as u64 {
            ops.push(w("a", 5000 + i * 700, 700, 10 + i as u32));
            ops.push(fsync("a"));
        }
        ops.push(Op::Sync);
        ops.push(w("a", 20000, 100, 99));
        ops.push(fsync("a"));
        Workload::sequential("ij-after-commit", vec![], ops)
    };
    let rename = Workload::sequential(
        "ij-rename-fsync",
        vec![Op::Creat { path: "f".into() }, w("f", 0, 5000, 1), Op::Mkdir { path: "D".into() }, Op::Sync],
        vec![
            Op::Rename { from: "f".into(), to: "g".into() },
            fsync("g"),
            Op::Creat { path: "D/new".into() },
            w("D/new", 0, 3000, 2),
            Op::Rename { from: "D/new".into(), to: "D/moved".into() },
            fsync("D/moved"),
            Op::Mkdir { path: "D/sub".into() },
            Op::Rename { from: "D".into(), to: "E".into() },
            Op::Creat { path: "E/sub/x".into() },
            w("E/sub/x", 0, 100, 3),
            fsync("E/sub/x"),
            Op::Rename { from: "g".into(), to: "E/g".into() },
            w("E/g", 5000, 10, 4),
            fsync("E/g"),
        ],
    );
    let link = Workload::sequential(
        "ij-link-fsync",
        vec![Op::Mkdir { path: "D".into() }, Op::Sync],
        vec![
            Op::Creat { path: "D/a".into() },
            w("D/a", 0, 4000, 1),
            Op::Link { from: "D/a".into(), to: "b".into() },
            fsync("D/a"),
            Op::Creat { path: "c".into() },
            w("c", 0, 100, 2),
            fsync("c"),
            Op::Unlink { path: "b".into() },
            w("D/a", 4000, 100, 3),
            fsync("D/a"),
        ],
    );
    let dir = Workload::sequential(
        "ij-dir-fsync",
        vec![],
        vec![
            Op::Mkdir { path: "D".into() },
            Op::Creat { path: "D/a".into() },
            Op::Mkdir { path: "D/S".into() },
            Op::Creat { path: "D/S/b".into() },
            fsync("D"),
            Op::Creat { path: "D/c".into() },
            w("D/c", 0, 100, 1),
            fsync("D/c"),
            Op::Unlink { path: "D/a".into() },
            fsync("D"),
        ],
    );
    let truncate = {
        let mut ops = vec![Op::Creat { path: "t".into() }, w("t", 0, 40000, 1), fsync("t")];
        for i in 0..n as u64 {
            ops.push(Op::Truncate { path: "t".into(), size: 30000 - i * 7000 % 29000 });
            ops.push(fsync("t"));
            ops.push(w("t", 9000 + i * 3000, 5000, 20 + i as u32));
            ops.push(fsync("t"));
        }
        ops.push(Op::Truncate { path: "t".into(), size: 0 });
        ops.push(fsync("t"));
        Workload::sequential("ij-truncate-fsync", vec![], ops)
    };
    let reuse = {
        let mut ops = vec![Op::Mkdir { path: "D".into() }, Op::Creat { path: "D/x".into() }, fsync("D/x")];
        for i in 0..n {
            let a = format!("D/a{i}");
            ops.push(Op::Creat { path: a.clone() });
            ops.push(w(&a, 0, 2000, i as u32));
            ops.push(fsync(&a));
            ops.push(Op::Unlink { path: a });
            let b = format!("D/b{i}");
            ops.push(Op::Creat { path: b.clone() });
            ops.push(w(&b, 0, 1000, 50 + i as u32));
            ops.push(fsync(&b));
            // The same name again: the removal of the old entry may not be durable.
            ops.push(Op::Unlink { path: "D/x".into() });
            ops.push(Op::Creat { path: "D/x".into() });
            ops.push(w("D/x", 0, 300, 90 + i as u32));
            ops.push(fsync("D/x"));
        }
        // A name freed by a rename (a record could not bring the moved file back: fsync
        // commits), one freed by unlinking one of two names (the record drops that link), and
        // one reused by a new directory (its record replaces the unlinked file's entry).
        ops.extend([
            Op::Creat { path: "D/r".into() },
            w("D/r", 0, 700, 200),
            Op::Rename { from: "D/r".into(), to: "D/r2".into() },
            Op::Creat { path: "D/r".into() },
            w("D/r", 0, 500, 201),
            fsync("D/r"),
            Op::Creat { path: "D/h".into() },
            Op::Link { from: "D/h".into(), to: "h2".into() },
            Op::Sync,
            Op::Unlink { path: "D/h".into() },
            Op::Creat { path: "D/h".into() },
            w("D/h", 0, 400, 202),
            fsync("D/h"),
            Op::Unlink { path: "D/x".into() },
            Op::Mkdir { path: "D/x".into() },
            Op::Creat { path: "D/x/leaf".into() },
            w("D/x/leaf", 0, 600, 203),
            fsync("D/x/leaf"),
        ]);
        Workload::sequential("ij-reuse-ino", vec![], ops)
    };
    // Every fsync writes at least one block or finds its area full, so more fsyncs than the
    // areas hold blocks make at least one record wrap, on whichever cores the threads run.
    let fill_rounds = n.max(fill_rounds_to_wrap());
    let fill = Workload {
        name: "ij-fill".into(),
        setup: (0..8).map(|t| Op::Creat { path: format!("p{t}") }).chain([Op::Sync]).collect(),
        rounds: (0..2 * fill_rounds)
            .map(|r| {
                (0..8)
                    .map(|t| match r % 2 {
                        0 => Op::Write {
                            path: format!("p{t}"),
                            off: (r as u64 / 2) * 1500,
                            len: 1500,
                            seed: (r * 8 + t) as u32,
                        },
                        _ => Op::Fsync { path: format!("p{t}") },
                    })
                    .collect()
            })
            .collect(),
        free_running: true,
    };
    let race = Workload {
        name: "ij-race-commit".into(),
        setup: vec![Op::Mkdir { path: "R".into() }, Op::Mkdir { path: "T".into() }, Op::Sync],
        rounds: (0..3 * n)
            .map(|r| {
                let (f, g) = (format!("R/f{}", r / 3), format!("T/g{}", r / 3));
                match r % 3 {
                    0 => vec![Op::Creat { path: f }, Op::Creat { path: g }],
                    1 => vec![
                        Op::Write { path: f, off: 0, len: 3000, seed: r as u32 },
                        Op::Write { path: g, off: 0, len: 9000, seed: 1000 + r as u32 },
                    ],
                    // The directory fsync commits the running transaction, which holds the
                    // other thread's file too.
                    _ => vec![Op::Fsync { path: f }, Op::Fsync { path: "T".into() }],
                }
            })
            .collect(),
        free_running: true,
    };
    let htree = {
        let mut setup = vec![Op::Mkdir { path: "H".into() }];
        setup.extend((0..600).map(|i| Op::Creat { path: format!("H/entry-with-a-longish-name-{i:04}") }));
        setup.push(Op::Sync);
        Workload::sequential(
            "ij-htree",
            setup,
            vec![
                Op::Creat { path: "H/new".into() },
                w("H/new", 0, 5000, 1),
                fsync("H/new"),
                Op::Mkdir { path: "H/newdir".into() },
                Op::Creat { path: "H/newdir/leaf".into() },
                w("H/newdir/leaf", 0, 100, 2),
                fsync("H/newdir/leaf"),
                Op::Unlink { path: "H/entry-with-a-longish-name-0007".into() },
                Op::Creat { path: "H/late".into() },
                fsync("H/late"),
            ],
        )
    };
    vec![after_commit, rename, link, dir, truncate, reuse, fill, race, htree]
}

/// Random multi-threaded work: `threads` threads, each in its own directory `t<i>`, doing
/// `rounds` rounds of mkdir / create / write / truncate / unlink / fsync under a seeded
/// schedule (the operation chosen for every thread in every round comes from the seed; the
/// operations of one round run concurrently).
pub fn random_threads(name: &str, threads: usize, rounds: usize, seed: u64) -> Workload {
    let rounds = thread_rounds(threads, rounds, seed, |rng, m, _, t, s| random_thread_op(rng, m, t, s));
    Workload { name: name.to_string(), setup: thread_dirs(threads).0, rounds, free_running: false }
}

/// `threads` free-running threads ([`Workload::free_running`]), each doing `ops` operations
/// in a directory of its own: every other operation a random one as in [`random_threads`]
/// (never `sync`, whose promise covers every thread's files), then an fsync or fdatasync of
/// one of its files. Commits requested by different threads overlap, so the dual-thread
/// presets are caught with several transactions in flight.
pub fn overlapping_fsyncs(name: &str, threads: usize, ops: usize, seed: u64) -> Workload {
    let rounds = thread_rounds(threads, ops, seed, |rng, m, r, t, s| {
        let dir = format!("t{t}");
        if r % 2 == 0 {
            return match random_thread_op(rng, m, t, s) {
                Op::Sync => Op::Fsync { path: dir },
                op => op,
            };
        }
        let files: Vec<String> =
            (0..4).map(|i| format!("{dir}/f{i}")).filter(|p| m.kind_of(p) == Some(Kind::File)).collect();
        match files.choose(rng) {
            Some(p) if rng.gen_bool(0.3) => Op::Fdatasync { path: p.clone() },
            Some(p) => Op::Fsync { path: p.clone() },
            None => Op::Fsync { path: dir },
        }
    });
    Workload { name: name.to_string(), setup: thread_dirs(threads).0, rounds, free_running: true }
}

/// `rounds` rounds of one operation per thread over [`thread_dirs`], each chosen by
/// `op(rng, model, round, thread, seq)` in the state the earlier ones leave (`seq` counts
/// operations from 1, for written data).
fn thread_rounds(
    threads: usize,
    rounds: usize,
    seed: u64,
    mut op: impl FnMut(&mut StdRng, &Model, usize, usize, u32) -> Op,
) -> Vec<Vec<Op>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let (_, mut m) = thread_dirs(threads);
    let mut s = 0u32;
    (0..rounds)
        .map(|r| {
            (0..threads)
                .map(|t| {
                    s += 1;
                    let o = op(&mut rng, &m, r, t, s);
                    m.apply_predicted(&o);
                    o
                })
                .collect()
        })
        .collect()
}

/// `threads` free-running threads overwriting blocks of a file of their own (allocated in
/// the setup) and fsyncing it, every other operation an fdatasync instead. Each file's inode
/// sits in an inode-table block of its own (the setup creates 15 empty files after each),
/// so the transactions of different threads share no buffer: even with one version per
/// buffer (BarrierFS) a commit can start while another is being flushed.
pub fn overwrite_fsyncs(name: &str, threads: usize, ops: usize, seed: u64) -> Workload {
    let mut rng = StdRng::seed_from_u64(seed);
    const FILE: u64 = 8 * 4096;
    let mut setup = Vec::new();
    for t in 0..threads {
        let dir = format!("t{t}");
        setup.push(Op::Mkdir { path: dir.clone() });
        setup.push(Op::Creat { path: format!("{dir}/f") });
        setup.push(Op::Write { path: format!("{dir}/f"), off: 0, len: FILE, seed: t as u32 });
        setup.extend((0..15).map(|i| Op::Creat { path: format!("{dir}/p{i}") }));
    }
    setup.push(Op::Sync);
    let mut rounds = Vec::new();
    for r in 0..ops {
        let round = (0..threads)
            .map(|t| {
                let path = format!("t{t}/f");
                match r % 4 {
                    0 | 2 => Op::Write {
                        path,
                        off: rng.gen_range(0..FILE / 4096) * 4096,
                        len: 4096,
                        seed: 1000 + (r * threads + t) as u32,
                    },
                    1 => Op::Fsync { path },
                    _ => Op::Fdatasync { path },
                }
            })
            .collect();
        rounds.push(round);
    }
    Workload { name: name.to_string(), setup, rounds, free_running: true }
}

/// Setup for per-thread workloads: directories `t0`..`t{threads-1}`, made durable, and the
/// model after it.
fn thread_dirs(threads: usize) -> (Vec<Op>, Model) {
    let mut setup: Vec<Op> = (0..threads).map(|t| Op::Mkdir { path: format!("t{t}") }).collect();
    setup.push(Op::Sync);
    let mut m = Model::empty_fs();
    for op in &setup {
        m.apply_predicted(op);
    }
    (setup, m)
}

/// A random operation of thread `t` on its directory `t{t}` (files `f0`..`f3`, a
/// subdirectory `sub`), valid in the modelled state `m`; `s` seeds written data.
fn random_thread_op(rng: &mut StdRng, m: &Model, t: usize, s: u32) -> Op {
    let dir = format!("t{t}");
    let names: Vec<String> = (0..4).map(|i| format!("{dir}/f{i}")).collect();
    let files: Vec<&String> = names.iter().filter(|p| m.kind_of(p) == Some(Kind::File)).collect();
    let sub = format!("{dir}/sub");
    match rng.gen_range(0..7) {
        0 if m.kind_of(&sub).is_none() => Op::Mkdir { path: sub },
        0 | 1 => match names.iter().find(|p| m.kind_of(p).is_none()) {
            Some(p) => Op::Creat { path: p.clone() },
            None => Op::Sync,
        },
        2 | 3 if !files.is_empty() => {
            let p = files[rng.gen_range(0..files.len())].clone();
            let off = rng.gen_range(0..6u64) * 2048;
            Op::Write { path: p, off, len: rng.gen_range(1..3u64) * 3000, seed: s }
        }
        4 if !files.is_empty() => {
            let p = files[rng.gen_range(0..files.len())].clone();
            Op::Truncate { path: p, size: rng.gen_range(0..4u64) * 3000 }
        }
        5 if !files.is_empty() => Op::Unlink { path: files[rng.gen_range(0..files.len())].clone() },
        _ if !files.is_empty() => Op::Fsync { path: files[rng.gen_range(0..files.len())].clone() },
        _ => Op::Fsync { path: dir },
    }
}

/// Per-core journaling's cases (Z-Journal §3, the crash cases of its issue); meaningful for
/// every preset, and with several logs the recorder runs thread `t` on core `t`, so the two
/// threads' operations land in different logs:
///
/// * `zj-shared-dir`: two threads create files in one directory and fsync them: the
///   directory block is shared by both logs' running transactions (bi-directional chains)
///   or written while the other log commits it (uni-directional); a crash between the two
///   logs' commits must discard the chained one.
/// * `zj-overwrite`: two threads set attributes of files whose inodes share an inode-table
///   block, fsyncing each time: one block overwritten in two logs, mostly unchained (the
///   other's version already valid), where the later stamp must win.
/// * `zj-free-reuse`: one thread drops a file's external attribute block (a freed metadata
///   block, revoked) while the other allocates and writes file data, which may reuse it.
/// * `zj-dir-revoke`: thread 0 empties a directory (its block in log 0's running
///   transaction), thread 1 removes it (the block freed and revoked in log 1) and then
///   writes and fsyncs a file that may reuse the block: log 0 must not commit its copy of
///   the block after the revoke, or recovery replays it over the data. Whether log 0 holds
///   the block unpinned at the rmdir depends on the clock tick (an unlink in the tick of the
///   directory's last stored times leaves its inode alone), so this workload does not catch
///   that on every run; `a_revoke_takes_the_block_from_another_logs_running_transaction`
///   in the journal's tests does.
/// * `zj-starve`: eight threads fill the (smallest allowed) logs with creates carrying
///   attribute blocks in one shared directory: checkpoints under pressure and writers that
///   must force the commit of ancestors in other logs; it must finish.
pub fn zjournal_cases(rounds: usize) -> Vec<Workload> {
    let two = |f: &dyn Fn(usize, usize) -> Op| -> Vec<Vec<Op>> {
        (0..rounds).map(|r| (0..2).map(|t| f(r, t)).collect()).collect()
    };
    let shared = Workload {
        name: "zj-shared-dir".into(),
        setup: vec![Op::Mkdir { path: "S".into() }, Op::Sync],
        rounds: two(&|r, t| match r % 2 {
            0 => Op::Creat { path: format!("S/t{t}-{r}") },
            _ => Op::Fsync { path: format!("S/t{t}-{}", r - 1) },
        }),
        free_running: true,
    };
    let overwrite = Workload {
        name: "zj-overwrite".into(),
        setup: vec![Op::Creat { path: "f0".into() }, Op::Creat { path: "f1".into() }, Op::Sync],
        rounds: two(&|r, t| match r % 2 {
            0 => Op::SetXattr {
                path: format!("f{t}"),
                name: "user.a".into(),
                len: 16,
                seed: (r * 2 + t) as u32,
            },
            _ => Op::Fsync { path: format!("f{t}") },
        }),
        free_running: true,
    };
    let reuse = Workload {
        name: "zj-free-reuse".into(),
        setup: vec![
            Op::Creat { path: "a".into() },
            Op::SetXattr { path: "a".into(), name: "user.big".into(), len: 3000, seed: 7 },
            Op::Creat { path: "b".into() },
            Op::Sync,
        ],
        rounds: vec![
            vec![
                Op::RemoveXattr { path: "a".into(), name: "user.big".into() },
                Op::Fsync { path: "b".into() },
            ],
            vec![Op::Fsync { path: "a".into() }, Op::Write { path: "b".into(), off: 0, len: 65536, seed: 9 }],
            vec![Op::Sync, Op::Fsync { path: "b".into() }],
        ],
        free_running: false,
    };
    // Thread 0's fsync of the directory commits its inode; a second unlink in the same
    // clock tick leaves the inode alone, so log 0's running transaction holds the directory
    // block and nothing else thread 1's rmdir writes.
    let dir_revoke = Workload {
        name: "zj-dir-revoke".into(),
        setup: vec![
            Op::Mkdir { path: "D".into() },
            Op::Creat { path: "D/x".into() },
            Op::Creat { path: "D/y".into() },
            Op::Creat { path: "g0".into() },
            Op::Creat { path: "g1".into() },
            Op::Sync,
        ],
        rounds: vec![
            vec![
                Op::Unlink { path: "D/x".into() },
                Op::Write { path: "g1".into(), off: 0, len: 100, seed: 11 },
            ],
            vec![
                Op::Fsync { path: "D".into() },
                Op::Write { path: "g1".into(), off: 100, len: 100, seed: 12 },
            ],
            vec![
                Op::Unlink { path: "D/y".into() },
                Op::Write { path: "g1".into(), off: 200, len: 100, seed: 13 },
            ],
            vec![Op::Write { path: "g0".into(), off: 0, len: 100, seed: 14 }, Op::Rmdir { path: "D".into() }],
            vec![
                Op::Write { path: "g0".into(), off: 100, len: 100, seed: 15 },
                Op::Fsync { path: "g1".into() },
            ],
            vec![
                Op::Write { path: "g0".into(), off: 200, len: 100, seed: 16 },
                Op::Write { path: "g1".into(), off: 0, len: 65536, seed: 17 },
            ],
            vec![Op::Fsync { path: "g0".into() }, Op::Fsync { path: "g1".into() }],
        ],
        free_running: false,
    };
    let starve = Workload {
        name: "zj-starve".into(),
        setup: vec![Op::Mkdir { path: "S".into() }, Op::Sync],
        rounds: (0..rounds * 2)
            .map(|r| {
                (0..8)
                    .map(|t| match r % 3 {
                        0 => Op::Creat { path: format!("S/s{t}-{r}") },
                        1 => Op::SetXattr {
                            path: format!("S/s{t}-{}", r - 1),
                            name: "user.big".into(),
                            len: 3000,
                            seed: (r * 8 + t) as u32,
                        },
                        _ => Op::Fsync { path: format!("S/s{t}-{}", r - 2) },
                    })
                    .collect()
            })
            .collect(),
        free_running: true,
    };
    vec![shared, overwrite, reuse, dir_revoke, starve]
}

/// Journaling of journal's cases (FAST'14; the crash cases of its issue), meaningful for
/// every preset and in both data modes:
///
/// * `joj-reuse`: a block journaled for a data-journaled (`+j`) file, the file deleted (the
///   block revoked), the block reused by an ordered file that writes it in place and
///   fsyncs, with no checkpoint in between: without the revoke, recovery would replay the
///   old journaled copy over the ordered file's data.
/// * `joj-escape`: data whose blocks begin with the JBD2 magic number, journaled (escaped
///   in the log, restored at replay) and written in place.
/// * `joj-switch`: `chattr -j` and `+j` on a file that is rewritten in both modes, with
///   three other threads writing and fsyncing files of their own (data-journaled and
///   ordered) meanwhile: no journaled copy from before a switch to ordered may be replayed
///   over newer data written in place.
/// * `joj-sqlite`: the file pattern of an SQLite rollback-journal transaction (journal file
///   created, written, fsynced, its header rewritten and fsynced, database pages rewritten
///   and fsynced, the journal deleted) and of a WAL (small appends, fdatasync each, then a
///   large run), which the `adaptive` preset switches between data modes.
/// * `joj-ckpt`: that rollback-journal transaction `rounds` times with larger files (a
///   journal of 33 blocks, database windows of 16): the crash image's 1 024-block log passes
///   its high-water mark, so checkpoints for log space run while the newest journal file,
///   data-journaled, is still in the log and about to be deleted (revoked); under
///   `checkpoint=oldest` they release only the oldest transactions.
pub fn joj_cases(rounds: usize) -> Vec<Workload> {
    let reuse = Workload::sequential(
        "joj-reuse",
        vec![Op::Sync],
        vec![
            Op::Creat { path: "j".into() },
            Op::SetJournalData { path: "j".into(), on: true },
            Op::Write { path: "j".into(), off: 0, len: 32768, seed: 61 },
            Op::Fsync { path: "j".into() },
            Op::Unlink { path: "j".into() },
            Op::Sync,
            Op::Creat { path: "o".into() },
            Op::Write { path: "o".into(), off: 0, len: 32768, seed: 62 },
            Op::Fsync { path: "o".into() },
            Op::Write { path: "o".into(), off: 0, len: 8192, seed: 63 },
            Op::Fdatasync { path: "o".into() },
        ],
    );
    let escape = Workload::sequential(
        "joj-escape",
        vec![Op::Sync],
        vec![
            Op::Creat { path: "m".into() },
            Op::SetJournalData { path: "m".into(), on: true },
            Op::WriteMagic { path: "m".into(), off: 0, len: 12288, seed: 64 },
            Op::Fsync { path: "m".into() },
            Op::WriteMagic { path: "m".into(), off: 4096, len: 8192, seed: 65 },
            Op::Fdatasync { path: "m".into() },
            Op::Creat { path: "n".into() },
            Op::WriteMagic { path: "n".into(), off: 0, len: 8192, seed: 66 },
            Op::Fsync { path: "n".into() },
        ],
    );
    let mut setup = vec![Op::Creat { path: "s".into() }, Op::SetJournalData { path: "s".into(), on: true }];
    setup.push(Op::Write { path: "s".into(), off: 0, len: 32768, seed: 70 });
    for t in 1..4 {
        let p = format!("t{t}");
        setup.push(Op::Creat { path: p.clone() });
        if t == 1 {
            setup.push(Op::SetJournalData { path: p.clone(), on: true });
        }
        setup.push(Op::Write { path: p, off: 0, len: 16384, seed: 70 + t });
    }
    setup.push(Op::Sync);
    let switch = Workload {
        name: "joj-switch".into(),
        setup,
        rounds: (0..rounds)
            .map(|r| {
                let seed = 1000 + r as u32 * 4;
                let off = (r as u64 % 4) * 4096;
                let s = "s".to_string();
                let first = match r % 6 {
                    0 | 3 => Op::Write { path: s, off, len: 8192, seed },
                    1 => Op::Fsync { path: s },
                    2 => Op::SetJournalData { path: s, on: false },
                    4 => Op::Fdatasync { path: s },
                    _ => Op::SetJournalData { path: s, on: true },
                };
                std::iter::once(first)
                    .chain((1..4).map(|t| {
                        let p = format!("t{t}");
                        match r % 3 {
                            0 => Op::Write { path: p, off: (r as u64 % 3) * 4096, len: 6000, seed: seed + t },
                            1 => Op::Fdatasync { path: p },
                            _ => Op::Fsync { path: p },
                        }
                    }))
                    .collect()
            })
            .collect(),
        free_running: true,
    };
    let mut ops =
        vec![Op::Creat { path: "db".into() }, Op::Write { path: "db".into(), off: 0, len: 16384, seed: 80 }];
    ops.push(Op::Fsync { path: "db".into() });
    for i in 0..2u32 {
        ops.extend(rollback_txn(8200, 4096 * u64::from(i), 8192, 81 + i));
    }
    ops.push(Op::Creat { path: "db-wal".into() });
    for i in 0..4u64 {
        ops.push(Op::Write { path: "db-wal".into(), off: 32 + i * 4120, len: 4120, seed: 90 + i as u32 });
        ops.push(Op::Fdatasync { path: "db-wal".into() });
    }
    for i in 0..2u64 {
        // Large runs (a WAL of a big transaction, or a checkpoint into the database), each
        // of two writes that fit one handle: the model takes a write's size change as
        // atomic, and a write of more than 1 MiB is several handles, which a data=journal
        // transaction filling up may commit apart.
        for k in 0..2u64 {
            let at = 4 + i * 300 + k * 150;
            ops.push(Op::Write { path: "db-wal".into(), off: 32 + at * 4120, len: 150 * 4120, seed: 95 });
        }
        ops.push(Op::Fdatasync { path: "db-wal".into() });
    }
    ops.push(Op::Write { path: "db-wal".into(), off: 32, len: 4120, seed: 97 });
    ops.push(Op::Fdatasync { path: "db-wal".into() });
    let sqlite = Workload::sequential("joj-sqlite", vec![Op::Sync], ops);
    let mut ops =
        vec![Op::Creat { path: "db".into() }, Op::Write { path: "db".into(), off: 0, len: 65536, seed: 100 }];
    ops.push(Op::Fsync { path: "db".into() });
    for i in 0..rounds as u32 {
        ops.extend(rollback_txn(131072, 65536 * u64::from(i % 4), 65536, 101 + i));
    }
    ops.push(Op::Sync);
    let ckpt = Workload::sequential("joj-ckpt", vec![Op::Sync], ops);
    vec![reuse, escape, switch, sqlite, ckpt]
}

/// Synchronous updates (`chattr +D`, `+S`; ext4's `IS_DIRSYNC` and `IS_SYNC`): directory
/// operations in a marked directory, and writes and truncates of a `+S` file, are durable
/// when they return (the oracle treats their return as an fsync of the parent, or an
/// fdatasync or fsync of the file: `Model::apply`'s implied persistence calls), next to the
/// same operations in plain directories and on plain files, where nothing is promised:
///
/// * `dirsync-dirops`: a `+D` directory `D`, a subdirectory made in it (which inherits
///   `+D`) and a plain `P`: creat, mkdir, symlink, link, unlink, rmdir, renames within `D`
///   and across `D` and `P` both ways (a directory too), a directory marked `+D` while it
///   holds entries not yet committed, and `chattr -D` (after which `D` promises nothing).
/// * `dirsync-syncdir`: a `+S` directory: its directory operations, the `+S` files and
///   the `+S` subdirectory made in it (inherited), whose writes and truncates are
///   synchronous; a `+S` file renamed into a plain directory stays `+S`; `chattr -S` of a
///   `+S` inode is itself synchronous.
/// * `dirsync-files`: writes (overwrite, append), truncates (shrink, grow) and a rename of
///   a file marked `+S` during the run, next to the same on a plain file; `chattr +S` of a
///   plain file is not synchronous, `chattr -S` of a `+S` one is.
/// * `dirsync-threads`: two threads, each in a `+D` directory of its own, doing directory
///   operations in concurrent rounds (`rounds` of them; each thread cycles through creat,
///   write, mkdir, rename into the new directory, symlink, link, unlink, rmdir, rename).
pub fn dirsync_cases(rounds: usize) -> Vec<Workload> {
    let w = |p: &str, off: u64, len: u64, seed: u32| Op::Write { path: p.into(), off, len, seed };
    let flags = |p: &str, dirsync: bool, sync: bool| Op::SetSyncFlags { path: p.into(), dirsync, sync };
    let creat = |p: &str| Op::Creat { path: p.into() };
    let mkdir = |p: &str| Op::Mkdir { path: p.into() };
    let rename = |a: &str, b: &str| Op::Rename { from: a.into(), to: b.into() };
    let link = |a: &str, b: &str| Op::Link { from: a.into(), to: b.into() };
    let unlink = |p: &str| Op::Unlink { path: p.into() };
    let rmdir = |p: &str| Op::Rmdir { path: p.into() };
    let symlink = |t: &str, p: &str| Op::Symlink { target: t.into(), path: p.into() };
    let truncate = |p: &str, size: u64| Op::Truncate { path: p.into(), size };
    let dirops = Workload::sequential(
        "dirsync-dirops",
        vec![
            mkdir("D"),
            mkdir("P"),
            mkdir("P/mv"),
            creat("D/d0"),
            w("D/d0", 0, 6000, 1),
            creat("P/f0"),
            w("P/f0", 0, 8000, 2),
            flags("D", true, false),
            Op::Sync,
        ],
        vec![
            creat("D/a"),
            w("D/a", 0, 6000, 3),
            mkdir("D/sub"),
            creat("D/sub/x"),
            symlink("x", "D/sub/l"),
            creat("P/p"),
            w("P/p", 0, 5000, 4),
            rename("P/p", "D/p"),
            rename("D/a", "P/a"),
            link("D/p", "D/sub/p2"),
            link("D/sub/x", "P/x2"),
            unlink("D/sub/p2"),
            mkdir("D/sub/e"),
            rmdir("D/sub/e"),
            rename("P/mv", "D/sub/mv"),
            creat("P/q"),
            unlink("P/f0"),
            rename("D/d0", "D/d1"),
            unlink("D/sub/l"),
            rmdir("D/sub/mv"),
            // Entries made while the directory is plain, then the mark: the next
            // operation in it commits them too (an fsync of the directory would).
            mkdir("E"),
            creat("E/u"),
            flags("E", true, false),
            creat("E/v"),
            creat("D/sub/y"),
            w("D/sub/y", 0, 3000, 5),
            // Unmarked: nothing promised in `D` any more, its subdirectory keeps its mark.
            flags("D", false, false),
            creat("D/z"),
            unlink("D/d1"),
            creat("D/sub/z2"),
            creat("P/end"),
        ],
    );
    let syncdir = Workload::sequential(
        "dirsync-syncdir",
        vec![mkdir("S"), mkdir("P"), creat("P/g"), w("P/g", 0, 9000, 10), flags("S", false, true), Op::Sync],
        vec![
            creat("S/f"),
            w("S/f", 0, 10000, 11),
            w("S/f", 4096, 4096, 12),
            truncate("S/f", 5000),
            creat("P/g2"),
            w("P/g2", 0, 7000, 13),
            w("P/g", 4000, 9000, 14),
            mkdir("S/t"),
            creat("S/t/y"),
            w("S/t/y", 0, 6000, 15),
            rename("P/g2", "S/t/g2"),
            link("S/f", "P/f2"),
            symlink("f", "S/l"),
            unlink("S/l"),
            truncate("P/g", 100),
            truncate("S/t/y", 0),
            w("S/t/y", 0, 2000, 16),
            // The file keeps its flag in a plain directory.
            rename("S/t/y", "P/y"),
            w("P/y", 2000, 3000, 17),
            unlink("S/t/g2"),
            rmdir("S/t"),
            flags("S/f", false, false),
            w("S/f", 0, 8000, 18),
            flags("S", false, false),
            creat("S/after"),
            w("S/after", 0, 100, 19),
        ],
    );
    let files = Workload::sequential(
        "dirsync-files",
        vec![creat("a"), w("a", 0, 16384, 20), creat("b"), w("b", 0, 16384, 21), mkdir("P"), Op::Sync],
        vec![
            flags("a", false, true),
            w("a", 0, 8192, 22),
            w("b", 0, 8192, 23),
            w("a", 16384, 5000, 24),
            w("b", 16384, 5000, 25),
            truncate("a", 3000),
            truncate("b", 3000),
            truncate("a", 20000),
            truncate("b", 20000),
            rename("a", "P/a"),
            w("P/a", 100, 50, 26),
            flags("b", false, true),
            flags("b", false, false),
            w("b", 0, 4096, 27),
            Op::WriteMagic { path: "P/a".into(), off: 0, len: 8192, seed: 28 },
            w("b", 20000, 4000, 29),
        ],
    );
    // Thread `t` at step `s` of its cycle (ten steps per cycle); thread 1 starts five steps
    // in (the setup did the first five), so the two threads run different operations.
    let step = |t: usize, s: usize| -> Op {
        let (d, k) = (format!("D{t}"), s / 10);
        let (f, sub, l, h) =
            (format!("{d}/f{k}"), format!("{d}/s{k}"), format!("{d}/l{k}"), format!("{d}/h{k}"));
        let moved = format!("{sub}/f");
        match s % 10 {
            0 => Op::Creat { path: f },
            1 => Op::Write { path: f, off: 0, len: 3000, seed: (100 + 10 * t + s) as u32 },
            2 => Op::Mkdir { path: sub },
            3 => Op::Rename { from: f, to: moved },
            4 => Op::Symlink { target: format!("s{k}/f"), path: l },
            5 => Op::Link { from: moved, to: h },
            6 => Op::Unlink { path: l },
            7 => Op::Unlink { path: moved },
            8 => Op::Rmdir { path: sub },
            _ => Op::Rename { from: h, to: format!("{d}/kept{k}") },
        }
    };
    let offset = [0usize, 5];
    let mut setup = Vec::new();
    for (t, &first) in offset.iter().enumerate() {
        setup.push(mkdir(&format!("D{t}")));
        setup.push(flags(&format!("D{t}"), true, false));
        setup.extend((0..first).map(|s| step(t, s)));
    }
    setup.push(Op::Sync);
    let threads = Workload {
        name: "dirsync-threads".into(),
        setup,
        rounds: (0..rounds).map(|r| (0..2).map(|t| step(t, r + offset[t])).collect()).collect(),
        free_running: false,
    };
    vec![dirops, syncdir, files, threads]
}

/// One SQLite rollback-journal transaction: the journal created, `journal_len` bytes of pages
/// after its header written and fsynced, the header rewritten and fsynced, `db_len` bytes of
/// the database at `db_off` rewritten and fdatasynced, the journal deleted (seeds from `seed`).
fn rollback_txn(journal_len: u64, db_off: u64, db_len: u64, seed: u32) -> [Op; 9] {
    [
        Op::Creat { path: "db-journal".into() },
        Op::Write { path: "db-journal".into(), off: 0, len: 512, seed },
        Op::Write { path: "db-journal".into(), off: 512, len: journal_len, seed: seed + 1 },
        Op::Fsync { path: "db-journal".into() },
        Op::Write { path: "db-journal".into(), off: 0, len: 28, seed: seed + 2 },
        Op::Fsync { path: "db-journal".into() },
        Op::Write { path: "db".into(), off: db_off, len: db_len, seed: seed + 3 },
        Op::Fdatasync { path: "db".into() },
        Op::Unlink { path: "db-journal".into() },
    ]
}

/// The classics and the four iJournaling scenarios at full size, plus `mt` seeded 8-thread
/// random workloads.
pub fn scenarios(mt: usize, seed: u64) -> Vec<Workload> {
    let mut v = vec![
        classic_rename(),
        classic_ten_files(),
        classic_block_reuse(),
        classic_prealloc_writes(),
        ij_creates(1000),
        ij_extent_tree(10),
        ij_deep_fsync(5),
        random_threads("ij-ten-threads", 10, 12, seed ^ 0x17),
    ];
    v.extend(ijournal_cases(12));
    for i in 0..mt {
        v.push(random_threads(&format!("mt8-{i:03}"), 8, 10, seed.wrapping_add(i as u64)));
    }
    for i in 0..mt {
        v.push(overlapping_fsyncs(&format!("mtfree8-{i:03}"), 8, 12, seed.wrapping_add(0x100 + i as u64)));
    }
    for i in 0..mt / 2 {
        v.push(overwrite_fsyncs(&format!("mtover8-{i:03}"), 8, 12, seed.wrapping_add(0x200 + i as u64)));
    }
    v.extend(zjournal_cases(12));
    v.extend(joj_cases(24));
    v.extend(dirsync_cases(30));
    v
}

/// Small versions of the scenarios for CI (the iJournaling cases are added for the presets
/// that use iJournaling, see `Suite::workloads_for`).
pub fn scenarios_small(seed: u64) -> Vec<Workload> {
    vec![
        classic_rename(),
        classic_ten_files(),
        classic_block_reuse(),
        classic_prealloc_writes(),
        ij_creates(40),
        ij_extent_tree(8),
        ij_deep_fsync(4),
        random_threads("ij-ten-threads", 10, 4, seed ^ 0x17),
        random_threads("mt8-000", 8, 4, seed),
        overlapping_fsyncs("mtfree8-000", 8, 6, seed.wrapping_add(0x100)),
        overwrite_fsyncs("mtover8-000", 8, 8, seed.wrapping_add(0x200)),
    ]
    .into_iter()
    .chain(zjournal_cases(6))
    .chain(joj_cases(12))
    .chain(dirsync_cases(15))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_sizes_and_validity() {
        let s1 = ace_seq1();
        assert!(s1.len() >= 300, "{} seq-1 workloads", s1.len());
        let s2 = ace_seqn(2, 5000, 1);
        assert_eq!(s2.len(), 5000);
        let s3 = ace_seqn(3, 200, 1);
        assert_eq!(s3.len(), 200);
        let mut names = BTreeSet::new();
        for w in s1.iter().chain(&s2).chain(&s3) {
            assert!(names.insert(w.name.clone()), "duplicate {}", w.name);
            let last = w.rounds.last().and_then(|r| r.last());
            assert!(last.is_some_and(Op::is_persistence), "{} does not end with a persistence call", w.name);
        }
        // Deterministic for a seed.
        assert_eq!(ace_seqn(2, 50, 7), ace_seqn(2, 50, 7));
    }
}
