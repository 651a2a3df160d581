//! Model-based property test: random sequences of namespace, data and attribute operations
//! run against cjfs and against an in-memory model; after every step the errors, the
//! directory listings, the file contents and the attributes must agree. At the end of each
//! case the image is remounted and compared again, then judged by `e2fsck -fn`.
//!
//! Each case runs data=ordered with the JBD2 journal, data=journal, or without a journal,
//! and may remount midway. Operation targets are picked among existing entries when the
//! operation runs, so most operations do something; some use fixed paths that may not
//! exist, for the error cases.
//!
//! Cases: 64 by default; set `CJFS_PROPTEST_CASES` for a heavier run. `CJFS_MODEL_TRACE=1`
//! prints each operation with its concrete paths; `CJFS_TEST_TMPDIR` moves the images off
//! /dev/shm; `CJFS_WATCHDOG_PAUSE=1` makes the deadlock watchdog wait (to attach a
//! debugger) instead of aborting.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use cjfs_fs::{
    DataMode, FallocMode, FileType, Fs, FsError, Ino, MountOptions, ROOT_INO, RenameFlags, SetAttr,
    XattrFlags,
};
use cjfs_journal::JournalConfig;
use common::{assert_fsck_clean, fresh_image, open_image};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Directory paths operations act in (some nested; they exist only when made).
const DIRS: &[&[&str]] = &[&[], &["d0"], &["d0", "d1"], &["d2"], &["d0", "d1", "d2"]];
/// Names operations use (any of them may become a file, directory or symlink).
const NAMES: &[&str] = &["d0", "d1", "d2", "f0", "f1", "f2"];
/// Extended attribute names.
const XNAMES: &[&str] = &["user.a", "user.bb", "user.ccc"];

/// Which existing entries a [`Loc::Pick`] prefers.
#[derive(Debug, Clone, Copy)]
enum Pref {
    File,
    Dir,
    Any,
}

/// Where an operation acts, resolved against the model when it runs (so most operations
/// hit something that exists).
#[derive(Debug, Clone, Copy)]
enum Loc {
    /// An existing entry: index (modulo) into those of the preferred kind.
    Pick(u16, Pref),
    /// Name `NAMES[.1]` in an existing directory: index (modulo) into all directories.
    In(u16, usize),
    /// A fixed path (`DIRS[.0]` / `NAMES[.1]`), which may well not exist.
    Fixed(usize, usize),
}

#[derive(Debug, Clone)]
enum Op {
    Create(Loc),
    Mkdir(Loc),
    Write {
        t: Loc,
        off: u64,
        len: usize,
        seed: u8,
    },
    Truncate {
        t: Loc,
        size: u64,
    },
    Unlink(Loc),
    Rmdir(Loc),
    Rename {
        from: Loc,
        to: Loc,
        flags: u8,
    },
    Link {
        t: Loc,
        to: Loc,
    },
    Symlink {
        at: Loc,
        len: usize,
    },
    SetXattr {
        t: Loc,
        k: usize,
        vlen: usize,
        flag: u8,
    },
    RemoveXattr {
        t: Loc,
        k: usize,
    },
    Fallocate {
        t: Loc,
        mode: u8,
        off: u64,
        len: u64,
    },
    Fsync {
        t: Loc,
        datasync: bool,
    },
    /// Unmount and mount again (directory indexes and inodes are then rebuilt from disk).
    Remount,
}

fn fixed_s() -> impl Strategy<Value = Loc> {
    (0..DIRS.len(), 0..NAMES.len()).prop_map(|(d, n)| Loc::Fixed(d, n))
}

/// An existing entry, preferably of kind `pref` (sometimes a fixed path instead).
fn pick_s(pref: Pref) -> impl Strategy<Value = Loc> {
    prop_oneof![8 => any::<u16>().prop_map(move |i| Loc::Pick(i, pref)), 1 => fixed_s()]
}

/// A new name in an existing directory, most often a directory name (`dir`) or a file name.
fn new_s(dir: bool) -> impl Strategy<Value = Loc> {
    let base: usize = if dir { 0 } else { 3 };
    prop_oneof![
        8 => (any::<u16>(), prop_oneof![3 => base..base + 3, 1 => 0..NAMES.len()]).prop_map(|(d, n)| Loc::In(d, n)),
        1 => fixed_s(),
    ]
}

/// Offsets biased to block boundaries, with some far past any end of file.
fn off_s() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..10_000,
        (0u64..48, -8i64..8).prop_map(|(k, d)| (k as i64 * 4096 + d).max(0) as u64),
        0u64..200_000,
    ]
}

fn len_s() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..64,
        1usize..12_000,
        (1usize..4, -3i64..3).prop_map(|(k, d)| (k as i64 * 4096 + d) as usize)
    ]
}

fn op_s() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => new_s(false).prop_map(Op::Create),
        4 => new_s(true).prop_map(Op::Mkdir),
        8 => (pick_s(Pref::File), off_s(), len_s(), any::<u8>()).prop_map(|(t, off, len, seed)| Op::Write { t, off, len, seed }),
        3 => (pick_s(Pref::File), off_s()).prop_map(|(t, size)| Op::Truncate { t, size }),
        2 => pick_s(Pref::File).prop_map(Op::Unlink),
        2 => pick_s(Pref::Dir).prop_map(Op::Rmdir),
        3 => (pick_s(Pref::Any), new_s(false), 0u8..8).prop_map(|(from, to, flags)| Op::Rename { from, to, flags }),
        3 => (pick_s(Pref::Any), pick_s(Pref::Any), 0u8..8).prop_map(|(from, to, flags)| Op::Rename { from, to, flags }),
        2 => (pick_s(Pref::Dir), pick_s(Pref::Dir), 0u8..4).prop_map(|(from, to, flags)| Op::Rename { from, to, flags }),
        2 => (pick_s(Pref::Any), new_s(false)).prop_map(|(t, to)| Op::Link { t, to }),
        2 => (new_s(false), prop_oneof![1usize..59, 59usize..300]).prop_map(|(at, len)| Op::Symlink { at, len }),
        3 => (pick_s(Pref::Any), 0..XNAMES.len(), prop_oneof![0usize..40, 0usize..1000], 0u8..3)
            .prop_map(|(t, k, vlen, flag)| Op::SetXattr { t, k, vlen, flag }),
        1 => (pick_s(Pref::Any), 0..XNAMES.len()).prop_map(|(t, k)| Op::RemoveXattr { t, k }),
        4 => (pick_s(Pref::File), 0u8..5, off_s(), prop_oneof![Just(0u64), 1u64..20_000])
            .prop_map(|(t, mode, off, len)| Op::Fallocate { t, mode, off, len }),
        1 => (pick_s(Pref::Any), any::<bool>()).prop_map(|(t, datasync)| Op::Fsync { t, datasync }),
        1 => Just(Op::Remount),
    ]
}

// ---------------------------------------------------------------------------------------
// The model

#[derive(Debug, Clone)]
enum Kind {
    File(Vec<u8>),
    Dir { entries: BTreeMap<Vec<u8>, Ino>, parent: Ino },
    Symlink(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Node {
    kind: Kind,
    /// Links (regular files and symlinks; directories derive theirs).
    nlink: u32,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Nodes keyed by their real inode number (stable across remounts).
#[derive(Debug, Clone, Default)]
struct Model {
    nodes: HashMap<Ino, Node>,
}

type Errno = i32;
use libc::{EEXIST, EINVAL, EISDIR, ENODATA, ENOENT, ENOTDIR, ENOTEMPTY, EOPNOTSUPP, EPERM};

impl Model {
    fn entries(&self, dir: Ino) -> &BTreeMap<Vec<u8>, Ino> {
        match &self.nodes[&dir].kind {
            Kind::Dir { entries, .. } => entries,
            k => panic!("model: {dir} is not a directory: {k:?}"),
        }
    }
    fn entries_mut(&mut self, dir: Ino) -> &mut BTreeMap<Vec<u8>, Ino> {
        match &mut self.nodes.get_mut(&dir).expect("dir").kind {
            Kind::Dir { entries, .. } => entries,
            _ => panic!("model: {dir} is not a directory"),
        }
    }
    fn is_dir(&self, ino: Ino) -> bool {
        matches!(self.nodes[&ino].kind, Kind::Dir { .. })
    }
    fn parent(&self, dir: Ino) -> Ino {
        match &self.nodes[&dir].kind {
            Kind::Dir { parent, .. } => *parent,
            _ => panic!("not a dir"),
        }
    }
    fn nlink(&self, ino: Ino) -> u32 {
        let n = &self.nodes[&ino];
        match &n.kind {
            Kind::Dir { entries, .. } => 2 + entries.values().filter(|i| self.is_dir(**i)).count() as u32,
            _ => n.nlink,
        }
    }
    /// Walk `comps` from the root: ENOENT for a missing component, ENOTDIR for a
    /// non-directory in the middle.
    fn resolve(&self, comps: &[&[u8]]) -> Result<Ino, Errno> {
        let mut cur = ROOT_INO;
        for c in comps {
            if !self.is_dir(cur) {
                return Err(ENOTDIR);
            }
            cur = *self.entries(cur).get(*c).ok_or(ENOENT)?;
        }
        Ok(cur)
    }
    /// Whether `anc` is `ino` or an ancestor of directory `ino`.
    fn is_ancestor(&self, anc: Ino, mut ino: Ino) -> bool {
        loop {
            if ino == anc {
                return true;
            }
            if ino == ROOT_INO {
                return false;
            }
            ino = self.parent(ino);
        }
    }
    /// Drop one link of `ino`; forget it at zero.
    fn drop_link(&mut self, ino: Ino) {
        if self.is_dir(ino) {
            self.nodes.remove(&ino);
            return;
        }
        let n = self.nodes.get_mut(&ino).expect("node");
        n.nlink -= 1;
        if n.nlink == 0 {
            self.nodes.remove(&ino);
        }
    }
    fn add(&mut self, parent: Ino, name: &[u8], ino: Ino, kind: Kind) {
        assert!(!self.nodes.contains_key(&ino), "model: fs reused live inode {ino}");
        self.nodes.insert(ino, Node { kind, nlink: 1, xattrs: BTreeMap::new() });
        self.entries_mut(parent).insert(name.to_vec(), ino);
    }
    fn file_mut(&mut self, ino: Ino) -> &mut Vec<u8> {
        match &mut self.nodes.get_mut(&ino).expect("file").kind {
            Kind::File(d) => d,
            _ => panic!("not a file"),
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 131 + usize::from(seed) * 7) % 251 + 1) as u8).collect()
}

fn static_name(n: &[u8]) -> &'static [u8] {
    NAMES.iter().find(|s| s.as_bytes() == n).map(|s| s.as_bytes()).expect("names come from NAMES")
}

impl Model {
    /// Every directory (as a path from the root), in a stable order; lost+found excluded.
    fn all_dirs(&self) -> Vec<Vec<&'static [u8]>> {
        let mut out = vec![Vec::new()];
        let mut i = 0;
        while i < out.len() {
            let path = out[i].clone();
            let ino = self.resolve(&path).expect("listed dir resolves");
            for (n, c) in self.entries(ino) {
                if self.is_dir(*c) && !(ino == ROOT_INO && n == b"lost+found") {
                    let mut p = path.clone();
                    p.push(static_name(n));
                    out.push(p);
                }
            }
            i += 1;
        }
        out
    }

    /// Every entry (directory path, name) of the preferred kind, in a stable order.
    fn all_entries(&self, pref: Pref) -> Vec<(Vec<&'static [u8]>, &'static [u8])> {
        let mut out = Vec::new();
        for d in self.all_dirs() {
            let ino = self.resolve(&d).expect("dir");
            for (n, c) in self.entries(ino) {
                if ino == ROOT_INO && n == b"lost+found" {
                    continue;
                }
                let ok = match pref {
                    Pref::Any => true,
                    Pref::Dir => self.is_dir(*c),
                    Pref::File => matches!(self.nodes[c].kind, Kind::File(_)),
                };
                if ok {
                    out.push((d.clone(), static_name(n)));
                }
            }
        }
        out
    }

    /// A concrete path for `loc` in the current state.
    fn concrete(&self, loc: Loc) -> (Vec<&'static [u8]>, &'static [u8]) {
        let fixed = |d: usize, n: usize| {
            (DIRS[d].iter().map(|s| s.as_bytes()).collect::<Vec<_>>(), NAMES[n].as_bytes())
        };
        match loc {
            Loc::Fixed(d, n) => fixed(d, n),
            Loc::In(i, n) => {
                let dirs = self.all_dirs();
                (dirs[usize::from(i) % dirs.len()].clone(), NAMES[n].as_bytes())
            }
            Loc::Pick(i, pref) => {
                let mut c = self.all_entries(pref);
                if c.is_empty() {
                    c = self.all_entries(Pref::Any);
                }
                if c.is_empty() {
                    return fixed(0, 3);
                }
                c[usize::from(i) % c.len()].clone()
            }
        }
    }
}

fn show(comps: &[&[u8]], name: &[u8]) -> String {
    let mut s: Vec<String> = comps.iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect();
    s.push(String::from_utf8_lossy(name).into_owned());
    format!("/{}", s.join("/"))
}

// ---------------------------------------------------------------------------------------
// Running one case

struct Case {
    fs: Option<Fs>,
    m: Model,
    log: Vec<String>,
    image: std::path::PathBuf,
    opts: MountOptions,
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

type R<T> = Result<T, TestCaseError>;

impl Case {
    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("mounted")
    }

    /// Resolve a directory path in both; they must agree. `Ok(None)` when both failed alike.
    fn resolve_dir(&self, comps: &[&[u8]]) -> R<Option<Ino>> {
        let want = self.m.resolve(comps);
        let mut got: Result<Ino, Errno> = Ok(ROOT_INO);
        for c in comps {
            got = got.and_then(|i| self.fs().lookup(i, c).map(|a| a.ino).map_err(|e| e.errno()));
        }
        if let Ok(d) = want
            && !self.m.is_dir(d)
        {
            // A final component that is not a directory: operations in it say ENOTDIR.
            return match got {
                Ok(g) if g == d => Ok(None),
                other => Err(fail(format!("resolve {comps:?}: model {want:?}, fs {other:?}"))),
            };
        }
        match (want, got) {
            (Ok(a), Ok(b)) if a == b => Ok(Some(a)),
            (Err(a), Err(b)) if a == b => Ok(None),
            (a, b) => Err(fail(format!("resolve {comps:?}: model {a:?}, fs {b:?}"))),
        }
    }

    /// Resolve the directory of `p` and its name: `Err(errno)` the model expects for
    /// operating in it (the directory missing or not a directory).
    fn dir_of(&self, p: Loc) -> R<Result<(Ino, &'static [u8]), Errno>> {
        let (comps, name) = self.m.concrete(p);
        let line = format!("    {p:?} = {}", show(&comps, name));
        if trace() {
            eprintln!("{line}");
        }
        progress(Some(line));
        match self.resolve_dir(&comps)? {
            Some(d) => Ok(Ok((d, name))),
            None => {
                let e = match self.m.resolve(&comps) {
                    Ok(_) => ENOTDIR,
                    Err(e) => e,
                };
                Ok(Err(e))
            }
        }
    }

    /// Resolve the whole path `p` in both.
    fn target(&self, p: Loc) -> R<Result<Ino, Errno>> {
        let (d, name) = match self.dir_of(p)? {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        let want = self.m.entries(d).get(name).copied().ok_or(ENOENT);
        let got = self.fs().lookup(d, name).map(|a| a.ino).map_err(|e| e.errno());
        if want != got {
            let (comps, name) = self.m.concrete(p);
            return Err(fail(format!("lookup {}: model {want:?}, fs {got:?}", show(&comps, name))));
        }
        Ok(want)
    }

    fn step(&mut self, op: &Op) -> R<()> {
        self.log.push(format!("{op:?}"));
        if trace() {
            eprintln!("{op:?}");
        }
        match *op {
            Op::Create(p) | Op::Mkdir(p) => {
                let mkdir = matches!(op, Op::Mkdir(_));
                let (d, name) = match self.dir_of(p)? {
                    Ok(x) => x,
                    Err(_) => return Ok(()),
                };
                let exists = self.m.entries(d).contains_key(name);
                let r = if mkdir {
                    self.fs().mkdir(d, name, 0o755, 0, 0)
                } else {
                    self.fs().create(d, name, 0o644, 0, 0)
                };
                if exists {
                    return self.expect_err(EEXIST, r.map(|_| ()));
                }
                let a = r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                let kind = if mkdir {
                    Kind::Dir { entries: BTreeMap::new(), parent: d }
                } else {
                    Kind::File(Vec::new())
                };
                self.m.add(d, name, a.ino, kind);
            }
            Op::Symlink { at, len } => {
                let target: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                let (d, name) = match self.dir_of(at)? {
                    Ok(x) => x,
                    Err(_) => return Ok(()),
                };
                let r = self.fs().symlink(d, name, &target, 0, 0);
                if self.m.entries(d).contains_key(name) {
                    return self.expect_err(EEXIST, r.map(|_| ()));
                }
                let a = r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                self.m.add(d, name, a.ino, Kind::Symlink(target));
            }
            Op::Write { t, off, len, seed } => {
                let ino = match self.target(t)? {
                    Ok(i) => i,
                    Err(_) => return Ok(()),
                };
                let data = pattern(len, seed);
                let r = self.fs().write(ino, off, &data);
                match &self.m.nodes[&ino].kind {
                    Kind::Dir { .. } => return self.expect_err(EISDIR, r.map(|_| ())),
                    Kind::Symlink(_) => return self.expect_err(EINVAL, r.map(|_| ())),
                    Kind::File(_) => {}
                }
                let n = r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                if n != len {
                    return Err(fail(format!("{op:?}: wrote {n} of {len}")));
                }
                if len > 0 {
                    let f = self.m.file_mut(ino);
                    let end = off as usize + len;
                    if f.len() < end {
                        f.resize(end, 0);
                    }
                    f[off as usize..end].copy_from_slice(&data);
                }
            }
            Op::Truncate { t, size } => {
                let ino = match self.target(t)? {
                    Ok(i) => i,
                    Err(_) => return Ok(()),
                };
                let r = self.fs().setattr(ino, &SetAttr { size: Some(size), ..Default::default() });
                match &self.m.nodes[&ino].kind {
                    Kind::Dir { .. } => return self.expect_err(EISDIR, r.map(|_| ())),
                    Kind::Symlink(_) => return self.expect_err(EINVAL, r.map(|_| ())),
                    Kind::File(_) => {}
                }
                let a = r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                if a.size != size {
                    return Err(fail(format!("{op:?}: setattr returned size {}", a.size)));
                }
                self.m.file_mut(ino).resize(size as usize, 0);
            }
            Op::Fallocate { t, mode, off, len } => {
                let ino = match self.target(t)? {
                    Ok(i) => i,
                    Err(_) => return Ok(()),
                };
                let fm = match mode {
                    0 => FallocMode::Allocate,
                    1 => FallocMode::KeepSize,
                    2 => FallocMode::PunchHole,
                    3 => FallocMode::ZeroRange { keep_size: true },
                    _ => FallocMode::ZeroRange { keep_size: false },
                };
                let r = self.fs().fallocate(ino, fm, off, len);
                if !matches!(self.m.nodes[&ino].kind, Kind::File(_)) {
                    return self.expect_err(EOPNOTSUPP, r);
                }
                if len == 0 {
                    return self.expect_err(EINVAL, r);
                }
                r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                let f = self.m.file_mut(ino);
                let end = (off + len) as usize;
                let (zero, extend) = match fm {
                    FallocMode::Allocate => (false, true),
                    FallocMode::KeepSize => (false, false),
                    FallocMode::PunchHole => (true, false),
                    FallocMode::ZeroRange { keep_size } => (true, !keep_size),
                };
                if zero {
                    let zend = end.min(f.len());
                    if (off as usize) < zend {
                        f[off as usize..zend].fill(0);
                    }
                }
                if extend && f.len() < end {
                    f.resize(end, 0);
                }
            }
            Op::Unlink(p) | Op::Rmdir(p) => {
                let rmdir = matches!(op, Op::Rmdir(_));
                let (d, name) = match self.dir_of(p)? {
                    Ok(x) => x,
                    Err(_) => return Ok(()),
                };
                let r = if rmdir { self.fs().rmdir(d, name) } else { self.fs().unlink(d, name) };
                let Some(&ino) = self.m.entries(d).get(name) else {
                    return self.expect_err(ENOENT, r);
                };
                let is_dir = self.m.is_dir(ino);
                if rmdir && !is_dir {
                    return self.expect_err(ENOTDIR, r);
                }
                if !rmdir && is_dir {
                    return self.expect_err(EISDIR, r);
                }
                if is_dir && !self.m.entries(ino).is_empty() {
                    return self.expect_err(ENOTEMPTY, r);
                }
                r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                self.m.entries_mut(d).remove(name);
                self.m.drop_link(ino);
            }
            Op::Link { t, to } => {
                let ino = match self.target(t)? {
                    Ok(i) => i,
                    Err(_) => return Ok(()),
                };
                let (d, name) = match self.dir_of(to)? {
                    Ok(x) => x,
                    Err(_) => return Ok(()),
                };
                let r = self.fs().link(ino, d, name).map(|_| ());
                let exists = self.m.entries(d).contains_key(name);
                let is_dir = self.m.is_dir(ino);
                // Both apply when linking a directory onto an existing name: POSIX allows
                // either (Linux checks EEXIST first).
                if is_dir && exists {
                    return self.expect_one_of(&[EEXIST, EPERM], r);
                }
                if is_dir {
                    return self.expect_err(EPERM, r);
                }
                if exists {
                    return self.expect_err(EEXIST, r);
                }
                r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                self.m.entries_mut(d).insert(name.to_vec(), ino);
                self.m.nodes.get_mut(&ino).expect("node").nlink += 1;
            }
            Op::Rename { from, to, flags } => return self.rename(from, to, flags),
            Op::SetXattr { t, k, vlen, flag } => {
                let ino = match self.target(t)? {
                    Ok(i) => i,
                    Err(_) => return Ok(()),
                };
                let name = XNAMES[k].as_bytes();
                let value = pattern(vlen, k as u8 ^ vlen as u8);
                let xf = match flag {
                    0 => XattrFlags::Any,
                    1 => XattrFlags::Create,
                    _ => XattrFlags::Replace,
                };
                let r = self.fs().setxattr(ino, name, &value, xf);
                let exists = self.m.nodes[&ino].xattrs.contains_key(name);
                if exists && xf == XattrFlags::Create {
                    return self.expect_err(EEXIST, r);
                }
                if !exists && xf == XattrFlags::Replace {
                    return self.expect_err(ENODATA, r);
                }
                r.map_err(|e| fail(format!("{op:?}: {e}")))?;
                self.m.nodes.get_mut(&ino).expect("node").xattrs.insert(name.to_vec(), value);
            }
            Op::RemoveXattr { t, k } => {
                let ino = match self.target(t)? {
                    Ok(i) => i,
                    Err(_) => return Ok(()),
                };
                let name = XNAMES[k].as_bytes();
                let r = self.fs().removexattr(ino, name);
                if self.m.nodes.get_mut(&ino).expect("node").xattrs.remove(name).is_none() {
                    return self.expect_err(ENODATA, r);
                }
                r.map_err(|e| fail(format!("{op:?}: {e}")))?;
            }
            Op::Fsync { t, datasync } => {
                let ino = match self.target(t)? {
                    Ok(i) => i,
                    Err(_) => return Ok(()),
                };
                self.fs().fsync(ino, datasync).map_err(|e| fail(format!("{op:?}: {e}")))?;
            }
            Op::Remount => self.remount()?,
        }
        Ok(())
    }

    fn remount(&mut self) -> R<()> {
        self.fs.take().expect("fs").unmount().map_err(|e| fail(format!("unmount: {e}")))?;
        let fs = Fs::open(open_image(&self.image), self.opts.clone())
            .map_err(|e| fail(format!("remount: {e}")))?;
        self.fs = Some(fs);
        Ok(())
    }

    /// The model expects `errno`.
    fn expect_err(&self, errno: Errno, r: Result<(), FsError>) -> R<()> {
        self.expect_one_of(&[errno], r)
    }

    fn expect_one_of(&self, errnos: &[Errno], r: Result<(), FsError>) -> R<()> {
        match r {
            Ok(()) => Err(fail(format!("{}: expected errno {errnos:?}, got success", self.last()))),
            Err(e) if errnos.contains(&e.errno()) => Ok(()),
            Err(e) => {
                Err(fail(format!("{}: expected errno {errnos:?}, got {} ({e})", self.last(), e.errno())))
            }
        }
    }

    fn last(&self) -> &str {
        self.log.last().map(|s| s.as_str()).unwrap_or("")
    }

    fn rename(&mut self, from: Loc, to: Loc, flags: u8) -> R<()> {
        let rf = RenameFlags { noreplace: flags & 1 != 0, exchange: flags & 2 != 0, whiteout: false };
        if rf.noreplace && rf.exchange {
            let r = self.with_dirs(from, to, |fs, (d1, n1), (d2, n2)| fs.rename(d1, n1, d2, n2, rf));
            return match r? {
                Some(r) => self.expect_err(EINVAL, r),
                None => Ok(()),
            };
        }
        let (d1, n1) = match self.dir_of(from)? {
            Ok(x) => x,
            Err(_) => return Ok(()),
        };
        let (d2, n2) = match self.dir_of(to)? {
            Ok(x) => x,
            Err(_) => return Ok(()),
        };
        let r = self.fs().rename(d1, n1, d2, n2, rf);
        let m = &self.m;
        let Some(&src) = m.entries(d1).get(n1) else {
            return self.expect_err(ENOENT, r);
        };
        let dst = m.entries(d2).get(n2).copied();
        if rf.noreplace && dst.is_some() {
            return self.expect_err(EEXIST, r);
        }
        if rf.exchange && dst.is_none() {
            return self.expect_err(ENOENT, r);
        }
        let src_dir = m.is_dir(src);
        // Moving a directory into its own subtree.
        if src_dir && d1 != d2 && m.is_ancestor(src, d2) {
            return self.expect_err(EINVAL, r);
        }
        if let Some(dst) = dst {
            // The target is an ancestor of the source: Linux says ENOTEMPTY (EINVAL when
            // exchanging) before looking at types.
            if m.is_dir(dst) && d1 != d2 && m.is_ancestor(dst, d1) {
                return self.expect_err(if rf.exchange { EINVAL } else { ENOTEMPTY }, r);
            }
            if dst == src {
                r.map_err(|e| fail(format!("rename onto itself: {e}")))?;
                return Ok(());
            }
            let dst_dir = m.is_dir(dst);
            if !rf.exchange {
                if src_dir && !dst_dir {
                    return self.expect_err(ENOTDIR, r);
                }
                if !src_dir && dst_dir {
                    return self.expect_err(EISDIR, r);
                }
                if dst_dir && !m.entries(dst).is_empty() {
                    return self.expect_err(ENOTEMPTY, r);
                }
            }
        }
        r.map_err(|e| fail(format!("{}: {e}", self.last())))?;
        // Apply.
        if rf.exchange {
            let dst = dst.expect("exchange target");
            self.m.entries_mut(d1).insert(n1.to_vec(), dst);
            self.m.entries_mut(d2).insert(n2.to_vec(), src);
            self.set_parent(src, d2);
            self.set_parent(dst, d1);
        } else {
            self.m.entries_mut(d1).remove(n1);
            if let Some(dst) = self.m.entries_mut(d2).insert(n2.to_vec(), src) {
                self.m.drop_link(dst);
            }
            self.set_parent(src, d2);
        }
        Ok(())
    }

    fn set_parent(&mut self, ino: Ino, p: Ino) {
        if let Kind::Dir { parent, .. } = &mut self.m.nodes.get_mut(&ino).expect("node").kind {
            *parent = p;
        }
    }

    /// For the invalid-flags rename: resolve both directories; `None` if either fails
    /// (alike in model and fs).
    fn with_dirs(
        &self,
        from: Loc,
        to: Loc,
        f: impl FnOnce(&Fs, (Ino, &[u8]), (Ino, &[u8])) -> Result<(), FsError>,
    ) -> R<Option<Result<(), FsError>>> {
        let a = match self.dir_of(from)? {
            Ok(x) => x,
            Err(_) => return Ok(None),
        };
        let b = match self.dir_of(to)? {
            Ok(x) => x,
            Err(_) => return Ok(None),
        };
        Ok(Some(f(self.fs(), a, b)))
    }

    // -----------------------------------------------------------------------------------
    // Comparing the whole tree

    fn check(&self) -> R<()> {
        let mut seen_dirs = BTreeSet::new();
        self.check_dir(ROOT_INO, &mut seen_dirs)
    }

    fn check_dir(&self, dir: Ino, seen: &mut BTreeSet<Ino>) -> R<()> {
        if !seen.insert(dir) {
            return Err(fail(format!("directory {dir} reached twice")));
        }
        let fs = self.fs();
        self.check_node(dir)?;
        // readdir in small pages.
        let mut got: BTreeMap<Vec<u8>, (Ino, FileType)> = BTreeMap::new();
        let (mut dot, mut dotdot) = (None, None);
        let mut off = 0;
        loop {
            let page = fs.readdir(dir, off, 5).map_err(|e| fail(format!("readdir {dir}: {e}")))?;
            if page.is_empty() {
                break;
            }
            for e in page {
                off = e.next_offset;
                match e.name.as_slice() {
                    b"." => dot = Some(e.ino),
                    b".." => dotdot = Some(e.ino),
                    n => {
                        if got.insert(n.to_vec(), (e.ino, e.kind)).is_some() {
                            return Err(fail(format!(
                                "readdir {dir}: {:?} listed twice",
                                String::from_utf8_lossy(n)
                            )));
                        }
                    }
                }
            }
        }
        if dot != Some(dir) || dotdot != Some(self.m.parent(dir)) {
            return Err(fail(format!(
                "readdir {dir}: '.' = {dot:?}, '..' = {dotdot:?}, parent is {}",
                self.m.parent(dir)
            )));
        }
        let want: BTreeMap<Vec<u8>, (Ino, FileType)> = self
            .m
            .entries(dir)
            .iter()
            .map(|(n, i)| (n.clone(), (*i, kind_of(&self.m.nodes[i].kind))))
            .collect();
        if got != want {
            return Err(fail(format!("readdir {dir}: fs {} vs model {}", names(&got), names(&want))));
        }
        for (name, (ino, _)) in &want {
            let a = fs.lookup(dir, name).map_err(|e| fail(format!("lookup {dir}/{name:?}: {e}")))?;
            if a.ino != *ino {
                return Err(fail(format!("lookup {dir}/{name:?} = {}, want {ino}", a.ino)));
            }
            if self.m.is_dir(*ino) {
                self.check_dir(*ino, seen)?;
            } else {
                self.check_node(*ino)?;
            }
        }
        Ok(())
    }

    fn check_node(&self, ino: Ino) -> R<()> {
        let fs = self.fs();
        let n = &self.m.nodes[&ino];
        let a = fs.getattr(ino).map_err(|e| fail(format!("getattr {ino}: {e}")))?;
        let want_kind = kind_of(&n.kind);
        if a.kind != want_kind || a.nlink != self.m.nlink(ino) {
            return Err(fail(format!(
                "getattr {ino}: kind {:?} nlink {}, model kind {want_kind:?} nlink {}",
                a.kind,
                a.nlink,
                self.m.nlink(ino)
            )));
        }
        match &n.kind {
            Kind::File(data) => {
                if a.size != data.len() as u64 {
                    return Err(fail(format!("file {ino}: size {} want {}", a.size, data.len())));
                }
                let mut buf = vec![0xEEu8; data.len() + 100];
                let got = fs.read(ino, 0, &mut buf).map_err(|e| fail(format!("read {ino}: {e}")))?;
                if got != data.len() || buf[..got] != data[..] {
                    let first = buf.iter().zip(data.iter()).position(|(a, b)| a != b);
                    return Err(fail(format!(
                        "file {ino}: read {got} bytes of {}; first difference at {first:?}",
                        data.len()
                    )));
                }
            }
            Kind::Symlink(t) => {
                let got = fs.readlink(ino).map_err(|e| fail(format!("readlink {ino}: {e}")))?;
                if &got != t || a.size != t.len() as u64 {
                    return Err(fail(format!("symlink {ino}: {} bytes, want {}", got.len(), t.len())));
                }
            }
            Kind::Dir { .. } => {}
        }
        let mut names = fs.listxattr(ino).map_err(|e| fail(format!("listxattr {ino}: {e}")))?;
        names.sort();
        let want: Vec<Vec<u8>> = n.xattrs.keys().cloned().collect();
        if names != want {
            return Err(fail(format!("listxattr {ino}: {names:?} want {want:?}")));
        }
        for (k, v) in &n.xattrs {
            let got = fs.getxattr(ino, k).map_err(|e| fail(format!("getxattr {ino}: {e}")))?;
            if &got != v {
                return Err(fail(format!("getxattr {ino} {k:?}: {} bytes, want {}", got.len(), v.len())));
            }
        }
        Ok(())
    }
}

fn kind_of(k: &Kind) -> FileType {
    match k {
        Kind::File(_) => FileType::Regular,
        Kind::Dir { .. } => FileType::Directory,
        Kind::Symlink(_) => FileType::Symlink,
    }
}

fn names(m: &BTreeMap<Vec<u8>, (Ino, FileType)>) -> String {
    let v: Vec<String> =
        m.iter().map(|(n, (i, k))| format!("{}={i}:{k:?}", String::from_utf8_lossy(n))).collect();
    v.join(",")
}

/// Last sign of life (milliseconds since [`T0`]) and the running case's operations so far:
/// the watchdog prints them and aborts when no step finishes for [`STALL`], so a deadlock
/// fails the test instead of hanging it. `CJFS_WATCHDOG_PAUSE=1` makes it wait instead of
/// aborting, to attach a debugger.
static PROGRESS: AtomicU64 = AtomicU64::new(0);
static T0: OnceLock<Instant> = OnceLock::new();
static CURRENT: Mutex<Vec<String>> = Mutex::new(Vec::new());
const STALL: Duration = Duration::from_secs(60);

fn now_ms() -> u64 {
    T0.get_or_init(Instant::now).elapsed().as_millis() as u64
}

fn progress(what: Option<String>) {
    PROGRESS.store(now_ms(), Ordering::Relaxed);
    let mut cur = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    match what {
        Some(w) => cur.push(w),
        None => cur.clear(),
    }
}

fn watchdog() {
    static START: Once = Once::new();
    START.call_once(|| {
        progress(None);
        std::thread::spawn(|| {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                if now_ms().saturating_sub(PROGRESS.load(Ordering::Relaxed)) < STALL.as_millis() as u64 {
                    continue;
                }
                let ops = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).join("\n  ");
                // Straight to stderr: the test harness's capture dies with the process.
                let _ = writeln!(
                    std::io::stderr(),
                    "model test: no step finished for {STALL:?} (deadlock?); the case so far:\n  {ops}"
                );
                if std::env::var_os("CJFS_WATCHDOG_PAUSE").is_some() {
                    std::thread::sleep(Duration::from_secs(3600));
                }
                std::process::abort();
            }
        });
    });
}

/// A temporary directory in RAM when there is one (the image's flushes are then cheap).
/// `CJFS_TEST_TMPDIR` puts the images elsewhere (e.g. on a real disk).
fn fast_tmpdir() -> tempfile::TempDir {
    let base = std::env::var("CJFS_TEST_TMPDIR").unwrap_or_else(|_| "/dev/shm".into());
    tempfile::Builder::new()
        .prefix("cjfs-model")
        .tempdir_in(base)
        .or_else(|_| tempfile::tempdir())
        .expect("tmpdir")
}

/// Mount options of the case: data=ordered with the JBD2 journal, data=journal, or no
/// journal.
fn mount_options(mode: u8) -> MountOptions {
    match mode {
        0 => MountOptions::default(),
        1 => MountOptions { data: DataMode::Journal, ..MountOptions::default() },
        _ => MountOptions { journal: JournalConfig::nojournal(), ..MountOptions::default() },
    }
}

fn run_case(ops: &[Op], mode: u8) -> R<()> {
    watchdog();
    progress(None);
    let dir = fast_tmpdir();
    let (path, dev) = fresh_image(dir.path(), "model.img", 48);
    let opts = mount_options(mode);
    let fs = Fs::open(dev, opts.clone()).expect("mount");
    // The root as mkfs made it: lost+found is part of the namespace.
    let mut m = Model::default();
    m.nodes.insert(
        ROOT_INO,
        Node {
            kind: Kind::Dir { entries: BTreeMap::new(), parent: ROOT_INO },
            nlink: 2,
            xattrs: BTreeMap::new(),
        },
    );
    for e in fs.readdir(ROOT_INO, 0, 100).expect("readdir root") {
        if e.name != b"." && e.name != b".." {
            m.nodes.insert(
                e.ino,
                Node {
                    kind: Kind::Dir { entries: BTreeMap::new(), parent: ROOT_INO },
                    nlink: 2,
                    xattrs: BTreeMap::new(),
                },
            );
            m.entries_mut(ROOT_INO).insert(e.name.clone(), e.ino);
        }
    }
    let mut c = Case { fs: Some(fs), m, log: Vec::new(), image: path.clone(), opts };
    c.check()?;
    for op in ops {
        progress(Some(format!("{op:?}")));
        c.step(op)?;
        c.check().map_err(|e| fail(format!("after {op:?}: {e}")))?;
    }
    c.remount()?;
    c.check().map_err(|e| fail(format!("after remount: {e}")))?;
    c.fs.take().expect("fs").unmount().map_err(|e| fail(format!("second unmount: {e}")))?;
    assert_fsck_clean(&path);
    Ok(())
}

/// `CJFS_MODEL_TRACE=1` prints every operation with its concrete paths.
fn trace() -> bool {
    std::env::var_os("CJFS_MODEL_TRACE").is_some()
}

fn cases() -> u32 {
    std::env::var("CJFS_PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 4000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn model_matches_fs(ops in proptest::collection::vec(op_s(), 1..60), mode in prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)]) {
        run_case(&ops, mode)?;
    }
}

// ---------------------------------------------------------------------------------------
// Regressions this test found, pinned down as plain tests.

/// Run `f` on a fresh file system in another thread; fail (instead of hanging) if it does
/// not finish in 20 s.
fn with_fs(f: impl FnOnce(&Fs) + Send + 'static) {
    let dir = fast_tmpdir();
    let (path, dev) = fresh_image(dir.path(), "regress.img", 48);
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let (tx, rx) = std::sync::mpsc::channel();
    let fs2 = fs.clone();
    std::thread::spawn(move || {
        f(&fs2);
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("operation hung (deadlock)"),
        Err(e) => panic!("worker panicked: {e}"),
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

#[test]
fn regression_link_of_a_directory_into_itself_is_eperm() {
    with_fs(|fs| {
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir").ino;
        let e = fs.link(d, d, b"x").expect_err("hard link to a directory");
        assert_eq!(e.errno(), EPERM);
    });
}

#[test]
fn regression_directory_moves_into_a_subdirectory() {
    with_fs(|fs| {
        let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).expect("mkdir").ino;
        let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).expect("mkdir").ino;
        let c = fs.mkdir(a, b"c", 0o755, 0, 0).expect("mkdir").ino;
        fs.rename(ROOT_INO, b"b", c, b"b", RenameFlags::default()).expect("move b into a/c");
        assert_eq!(fs.resolve("/a/c/b").expect("moved"), b);
        let e = fs.rename(ROOT_INO, b"a", b, b"a", RenameFlags::default()).expect_err("into itself");
        assert_eq!(e.errno(), EINVAL);
        // A file renamed over its own grandparent directory.
        fs.create(b, b"f", 0o644, 0, 0).expect("create");
        let e = fs.rename(b, b"f", ROOT_INO, b"a", RenameFlags::default()).expect_err("over an ancestor");
        assert_eq!(e.errno(), ENOTEMPTY);
        let e = fs.rename(c, b"b", ROOT_INO, b"a", RenameFlags { exchange: true, ..RenameFlags::default() });
        assert_eq!(e.expect_err("exchange with an ancestor").errno(), EINVAL);
    });
}

#[test]
fn regression_reused_blocks_of_a_multi_block_allocation_start_zeroed() {
    with_fs(|fs| {
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).expect("create").ino;
        fs.write(f, 61_440, &pattern(8721, 0)).expect("write");
        fs.setattr(f, &SetAttr { size: Some(20_480), ..Default::default() }).expect("truncate");
        fs.fsync(f, false).expect("fsync"); // the freed blocks become reusable
        // Allocates two blocks at once (likely the freed ones); the second is written partly.
        fs.write(f, 4096, &pattern(4097, 1)).expect("write");
        let mut buf = vec![0u8; 20_480];
        fs.read(f, 0, &mut buf).expect("read");
        assert_eq!(buf[4096..8193], pattern(4097, 1)[..]);
        assert!(buf[8193..].iter().all(|&b| b == 0), "stale bytes in a newly allocated block");
    });
}
