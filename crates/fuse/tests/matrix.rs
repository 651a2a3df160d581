//! The acceptance matrix for "open the ext4 that people have": images made by `mkfs.ext4`
//! (defaults at 32 MiB, 256 MiB, 1 GiB and 8 GiB; `-I 128`; `-b 2048`;
//! `-O metadata_csum_seed`; `-O orphan_file`; `-O large_dir`; `-O ^64bit`; `-O ^has_journal`,
//! written without a journal as ext4 writes one), each
//!
//! 1. filled by the kernel (a seeded tree: nested directories, files of many sizes, sparse
//!    files and files of many extents, short and long symbolic links, hard links, a fifo and a
//!    device node, setuid and sticky modes, owners, small and large xattrs shared between
//!    inodes, a directory of thousands of entries the kernel indexes);
//! 2. mounted read-write by cjfs through FUSE: it must show exactly what the kernel showed
//!    (names, types, modes, owners, sizes, link counts, contents, symlink targets, xattrs,
//!    inode numbers, block counts, mtime and ctime); then changed through the mount by a seeded
//!    fsstress-style sequence (create, write at offsets, truncate, mkdir, rmdir, rename across
//!    directories and over files, link, unlink, symlink, mkfifo, chmod, chown, setxattr,
//!    removexattr, fsync, read-back) and a directory of 50,000 entries; unmounted;
//! 3. `e2fsck -fn` clean; the kernel shows exactly what cjfs showed; the kernel then changes it
//!    (another seeded sequence, unlinks and creates in the big directory); cjfs shows exactly
//!    what the kernel showed; `e2fsck -fn` clean.
//!
//! Every view is also compared with a model of what the operations wrote. A configuration
//! cjfs refuses (listed in [`EXPECT_REFUSED`]) must be refused with the "unsupported" error
//! naming the reason, and the image must be byte-identical afterwards.
//!
//! Skips (printing `SKIP: ...`) without root, `/dev/fuse`, `fusermount3`, loop devices, the
//! kernel's ext4 or e2fsprogs. Every configuration runs (two at a time; about 100 s for the
//! whole matrix on a busy 2-core machine). Knobs: `CJFS_MATRIX=name,name` runs the named
//! configurations; `CJFS_MATRIX_JOBS=n` runs n at a time; `CJFS_MATRIX_SEED=n` other
//! workloads; `CJFS_MATRIX_KEEP=1` keeps the images and prints where.

mod common;
#[path = "../../fs/tests/common/kernel.rs"]
mod kernel;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use common::{Mount, fuse_missing};
use kernel::{Entry, KMount, Kind, LoopDev, Snap, Xattrs, assert_same, cpath, diff_opts, join, run, split};

/// One `mkfs.ext4` configuration of the matrix.
struct Config {
    /// Name used in messages and in `CJFS_MATRIX`.
    name: &'static str,
    /// Image size as mkfs.ext4 takes it.
    size: &'static str,
    /// Options besides `-F -q`.
    opts: &'static [&'static str],
}

/// The matrix.
const CONFIGS: &[Config] = &[
    Config { name: "default-32M", size: "32M", opts: &[] },
    Config { name: "default-256M", size: "256M", opts: &[] },
    Config { name: "default-1G", size: "1G", opts: &[] },
    Config { name: "default-8G", size: "8G", opts: &[] },
    Config { name: "inode-128", size: "1G", opts: &["-I", "128"] },
    Config { name: "block-2048", size: "1G", opts: &["-b", "2048"] },
    Config { name: "csum-seed", size: "1G", opts: &["-O", "metadata_csum_seed"] },
    Config { name: "orphan-file", size: "1G", opts: &["-O", "orphan_file"] },
    Config { name: "large-dir", size: "1G", opts: &["-O", "large_dir"] },
    Config { name: "no-64bit", size: "1G", opts: &["-O", "^64bit"] },
    Config { name: "no-journal", size: "256M", opts: &["-O", "^has_journal"] },
];

/// The configurations cjfs refuses today and what the refusal must name (a feature). Emptied
/// as support lands: a listed configuration that opens fails the test, so the list cannot go
/// stale.
const EXPECT_REFUSED: &[(&str, &str)] = &[];

/// Entries of the big directory made through FUSE (the number).
const BIG_DIR_ENTRIES: usize = 50_000;
/// Entries of the directory the kernel makes (and indexes) in the fill.
const HTREE_ENTRIES: usize = 3_000;
/// Random operations through the FUSE mount.
const FUSE_OPS: usize = 3_000;
/// Random operations through the kernel afterwards.
const KERNEL_OPS: usize = 1_500;
/// Largest file the random operations make.
const MAX_FILE: usize = 3 << 20;

fn seed() -> u64 {
    std::env::var("CJFS_MATRIX_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

// ---- the model -----------------------------------------------------------------------------

/// An inode as the operations left it.
#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    perm: u32,
    uid: u32,
    gid: u32,
    /// File contents or symlink target.
    data: Vec<u8>,
    xattrs: Xattrs,
    rdev: (u32, u32),
}

/// What the operations wrote: paths to inodes, and a pool of the paths random operations
/// pick from (everything but the children of the big directories, which are changed in bulk).
struct Model {
    nodes: HashMap<u64, Node>,
    paths: BTreeMap<String, u64>,
    next_id: u64,
    /// Paths to each inode.
    refs: HashMap<u64, usize>,
    /// Directories whose entries stay out of the pool.
    bulk: BTreeSet<String>,
    pool: Vec<String>,
    pool_pos: HashMap<String, usize>,
}

impl Model {
    /// The model of a fresh file system as `snap` shows it (directories only).
    fn fresh(snap: &Snap) -> Model {
        let mut m = Model {
            nodes: HashMap::new(),
            paths: BTreeMap::new(),
            next_id: 1,
            refs: HashMap::new(),
            bulk: BTreeSet::new(),
            pool: Vec::new(),
            pool_pos: HashMap::new(),
        };
        for (p, e) in &snap.tree {
            assert_eq!(e.kind, Kind::Dir, "{p}: a fresh file system holds only directories");
            let id = m.new_node(Node {
                kind: Kind::Dir,
                perm: e.perm,
                uid: e.uid,
                gid: e.gid,
                data: Vec::new(),
                xattrs: e.xattrs.clone(),
                rdev: (0, 0),
            });
            m.add_path(p, id);
        }
        // e2fsck wants it back; it is never picked.
        m.bulk.insert("/lost+found".into());
        m
    }

    fn new_node(&mut self, n: Node) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.nodes.insert(id, n);
        id
    }

    fn add_path(&mut self, p: &str, id: u64) {
        assert!(self.paths.insert(p.to_string(), id).is_none(), "model: {p} exists");
        *self.refs.entry(id).or_insert(0) += 1;
        if p != "/" && !self.bulk.contains(split(p).0) {
            self.pool_pos.insert(p.to_string(), self.pool.len());
            self.pool.push(p.to_string());
        }
    }

    /// Remove path `p`; its inode goes with its last path.
    fn remove_path(&mut self, p: &str) -> u64 {
        let id = self.detach_path(p);
        let refs = self.refs.get_mut(&id).unwrap();
        *refs -= 1;
        if *refs == 0 {
            self.refs.remove(&id);
            self.nodes.remove(&id);
        }
        id
    }

    /// Move `from` to `to` (no replaced entry).
    fn move_path(&mut self, from: &str, to: &str) {
        let id = self.detach_path(from);
        *self.refs.get_mut(&id).unwrap() -= 1;
        self.add_path(to, id);
    }

    /// Take path `p` out of the namespace and the pool, leaving the link count.
    fn detach_path(&mut self, p: &str) -> u64 {
        let id = self.paths.remove(p).unwrap_or_else(|| panic!("model: no {p}"));
        if let Some(i) = self.pool_pos.remove(p) {
            self.pool.swap_remove(i);
            if i < self.pool.len() {
                self.pool_pos.insert(self.pool[i].clone(), i);
            }
        }
        id
    }

    /// Paths to inode `id`.
    fn links(&self, id: u64) -> usize {
        self.refs.get(&id).copied().unwrap_or(0)
    }

    /// Take the entries of `dir` out of the pool and keep new ones out.
    fn make_bulk(&mut self, dir: &str) {
        self.bulk.insert(dir.to_string());
        for p in self.below(dir) {
            if let Some(i) = self.pool_pos.remove(&p) {
                self.pool.swap_remove(i);
                if i < self.pool.len() {
                    self.pool_pos.insert(self.pool[i].clone(), i);
                }
            }
        }
    }

    fn node(&self, p: &str) -> &Node {
        &self.nodes[&self.paths[p]]
    }

    fn node_mut(&mut self, p: &str) -> &mut Node {
        let id = self.paths[p];
        self.nodes.get_mut(&id).unwrap()
    }

    /// Paths strictly below `dir`.
    fn below(&self, dir: &str) -> Vec<String> {
        let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
        self.paths
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn is_empty_dir(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        self.paths.range(prefix.clone()..).next().is_none_or(|(k, _)| !k.starts_with(&prefix))
    }

    /// The snapshot every view must match (directory sizes aside).
    fn snap(&self) -> Snap {
        let mut nlinks: HashMap<u64, u32> = HashMap::new();
        for (p, id) in &self.paths {
            let n = &self.nodes[id];
            if n.kind == Kind::Dir {
                *nlinks.entry(*id).or_insert(0) += 2;
                if p != "/" {
                    *nlinks.entry(self.paths[split(p).0]).or_insert(0) += 1;
                }
            } else {
                *nlinks.entry(*id).or_insert(0) += 1;
            }
        }
        let mut s = Snap::default();
        for (p, id) in &self.paths {
            let n = &self.nodes[id];
            let (size, crc, target) = match n.kind {
                Kind::File => (n.data.len() as u64, crc32c::crc32c(&n.data), Vec::new()),
                Kind::Symlink => (n.data.len() as u64, 0, n.data.clone()),
                _ => (0, 0, Vec::new()),
            };
            s.tree.insert(
                p.clone(),
                Entry {
                    kind: n.kind,
                    perm: n.perm,
                    uid: n.uid,
                    gid: n.gid,
                    size,
                    nlink: nlinks[id],
                    crc,
                    target,
                    rdev: n.rdev,
                    xattrs: n.xattrs.clone(),
                },
            );
        }
        s
    }

    /// Panic unless `view` shows what the model holds, hard links included.
    fn check(&self, ctx: &str, vn: &str, view: &Snap) {
        let mut d = diff_opts("model", &self.snap(), vn, view, false, false);
        // Paths to one model inode share one inode number in the view, and only they do.
        let mut by_view: HashMap<u64, u64> = HashMap::new();
        for (p, id) in &self.paths {
            let Some(x) = view.extra.get(p) else { continue };
            if let Some(other) = by_view.insert(x.ino, *id)
                && other != *id
            {
                d.push(format!("{p}: inode {} also holds another model inode", x.ino));
            }
        }
        let mut ino_of: HashMap<u64, u64> = HashMap::new();
        for (p, id) in &self.paths {
            let Some(x) = view.extra.get(p) else { continue };
            if let Some(i) = ino_of.insert(*id, x.ino)
                && i != x.ino
            {
                d.push(format!("{p}: a hard link of inode {i} shows as inode {}", x.ino));
            }
        }
        if !d.is_empty() {
            panic!(
                "{ctx}: the model and {vn} differ in {} places:\n  {}",
                d.len(),
                d[..d.len().min(40)].join("\n  ")
            );
        }
    }
}

fn write_at(data: &mut Vec<u8>, off: usize, buf: &[u8]) {
    if data.len() < off + buf.len() {
        data.resize(off + buf.len(), 0);
    }
    data[off..off + buf.len()].copy_from_slice(buf);
}

// ---- operations on a mounted tree (kernel or FUSE) and the model ---------------------------

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Operations applied both to a mounted tree under `root` and to the model.
struct Ops<'a> {
    root: &'a Path,
    m: &'a mut Model,
    rng: StdRng,
    /// Name prefix of this phase (names never collide across phases).
    tag: &'static str,
    names: u64,
    /// The file system's block size.
    block_size: usize,
    /// Data sizes are scaled by this (below 1 on images under 256 MiB, so the random
    /// writes of both phases fit a 32 MiB image).
    data_scale: f64,
    counts: BTreeMap<&'static str, usize>,
}

const FILE_PERMS: &[u32] =
    &[0o644, 0o600, 0o755, 0o4755, 0o2755, 0o6711, 0o1644, 0o2644, 0o000, 0o444, 0o777];
const DIR_PERMS: &[u32] = &[0o755, 0o700, 0o777, 0o1777, 0o555, 0o750, 0o4755, 0o000];
const OWNERS: &[u32] = &[0, 1000, 1001, 65534, 100_000];

impl Ops<'_> {
    fn abs(&self, p: &str) -> PathBuf {
        self.root.join(&p[1..])
    }

    /// `len` scaled by [`Ops::data_scale`] (a non-zero length stays non-zero).
    fn scaled(&self, len: usize) -> usize {
        if len == 0 { 0 } else { ((len as f64 * self.data_scale) as usize).max(1) }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.rng.fill_bytes(&mut v);
        v
    }

    fn fresh_name(&mut self) -> String {
        self.names += 1;
        let n = self.names;
        match self.rng.gen_range(0..20) {
            0 => format!("{}{n}-{}", self.tag, "long".repeat(self.rng.gen_range(10..60))),
            1..=4 => format!("{}{n}", self.tag),
            _ => format!(
                "{}{n}-{}",
                self.tag,
                ["data", "notes.txt", "x", "archive.tar", "cfg"][n as usize % 5]
            ),
        }
    }

    fn chmod(&mut self, p: &str, perm: u32) {
        fs::set_permissions(self.abs(p), fs::Permissions::from_mode(perm))
            .unwrap_or_else(|e| panic!("chmod {p} {perm:o}: {e}"));
        self.m.node_mut(p).perm = perm;
    }

    fn chown(&mut self, p: &str, uid: u32, gid: u32) {
        std::os::unix::fs::lchown(self.abs(p), Some(uid), Some(gid))
            .unwrap_or_else(|e| panic!("chown {p} {uid}:{gid}: {e}"));
        let n = self.m.node_mut(p);
        n.uid = uid;
        n.gid = gid;
        // chown clears setuid, and setgid with group execute, on all but directories.
        if n.kind != Kind::Dir && n.kind != Kind::Symlink {
            n.perm &= !0o4000;
            if n.perm & 0o010 != 0 {
                n.perm &= !0o2000;
            }
        }
    }

    fn create(&mut self, p: &str, perm: u32, data: &[u8]) {
        let mut f = File::create(self.abs(p)).unwrap_or_else(|e| panic!("create {p}: {e}"));
        f.write_all(data).unwrap_or_else(|e| panic!("write {p}: {e}"));
        drop(f);
        let id = self.m.new_node(Node {
            kind: Kind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            data: data.to_vec(),
            xattrs: Xattrs::new(),
            rdev: (0, 0),
        });
        self.m.add_path(p, id);
        if perm != 0o644 {
            self.chmod(p, perm);
        }
    }

    fn write(&mut self, p: &str, off: u64, data: &[u8]) {
        let f = OpenOptions::new().write(true).open(self.abs(p)).unwrap_or_else(|e| panic!("open {p}: {e}"));
        f.write_all_at(data, off).unwrap_or_else(|e| panic!("write {p} at {off}: {e}"));
        write_at(&mut self.m.node_mut(p).data, off as usize, data);
    }

    fn truncate(&mut self, p: &str, len: u64) {
        let f = OpenOptions::new().write(true).open(self.abs(p)).unwrap_or_else(|e| panic!("open {p}: {e}"));
        f.set_len(len).unwrap_or_else(|e| panic!("truncate {p} to {len}: {e}"));
        self.m.node_mut(p).data.resize(len as usize, 0);
    }

    fn mkdir(&mut self, p: &str, perm: u32) {
        fs::create_dir(self.abs(p)).unwrap_or_else(|e| panic!("mkdir {p}: {e}"));
        let id = self.m.new_node(Node {
            kind: Kind::Dir,
            perm: 0o755,
            uid: 0,
            gid: 0,
            data: Vec::new(),
            xattrs: Xattrs::new(),
            rdev: (0, 0),
        });
        self.m.add_path(p, id);
        if perm != 0o755 {
            self.chmod(p, perm);
        }
    }

    fn symlink(&mut self, p: &str, target: &[u8]) {
        std::os::unix::fs::symlink(OsStr::from_bytes(target), self.abs(p))
            .unwrap_or_else(|e| panic!("symlink {p} ({} bytes): {e}", target.len()));
        let id = self.m.new_node(Node {
            kind: Kind::Symlink,
            perm: 0o777,
            uid: 0,
            gid: 0,
            data: target.to_vec(),
            xattrs: Xattrs::new(),
            rdev: (0, 0),
        });
        self.m.add_path(p, id);
    }

    fn mknod(&mut self, p: &str, kind: Kind, perm: u32, rdev: (u32, u32)) {
        let fmt = match kind {
            Kind::Fifo => libc::S_IFIFO,
            Kind::Chr => libc::S_IFCHR,
            _ => unreachable!(),
        };
        // SAFETY: a valid C string.
        let r =
            unsafe { libc::mknod(cpath(&self.abs(p)).as_ptr(), fmt | 0o644, libc::makedev(rdev.0, rdev.1)) };
        assert_eq!(r, 0, "mknod {p}: {}", errno());
        let id = self.m.new_node(Node {
            kind,
            perm: 0o644,
            uid: 0,
            gid: 0,
            data: Vec::new(),
            xattrs: Xattrs::new(),
            rdev,
        });
        self.m.add_path(p, id);
        if perm != 0o644 {
            self.chmod(p, perm);
        }
    }

    fn link(&mut self, from: &str, to: &str) {
        fs::hard_link(self.abs(from), self.abs(to)).unwrap_or_else(|e| panic!("link {from} {to}: {e}"));
        let id = self.m.paths[from];
        self.m.add_path(to, id);
    }

    fn unlink(&mut self, p: &str) {
        fs::remove_file(self.abs(p)).unwrap_or_else(|e| panic!("unlink {p}: {e}"));
        self.m.remove_path(p);
    }

    fn rmdir(&mut self, p: &str) {
        fs::remove_dir(self.abs(p)).unwrap_or_else(|e| panic!("rmdir {p}: {e}"));
        self.m.remove_path(p);
    }

    /// Rename `from` to `to`; `to` may be an existing non-directory (replaced).
    fn rename(&mut self, from: &str, to: &str) {
        fs::rename(self.abs(from), self.abs(to)).unwrap_or_else(|e| panic!("rename {from} {to}: {e}"));
        if self.m.paths.contains_key(to) {
            self.m.remove_path(to);
        }
        let moved = self.m.below(from);
        self.m.move_path(from, to);
        for old in moved {
            self.m.move_path(&old, &format!("{to}{}", &old[from.len()..]));
        }
    }

    fn setxattr(&mut self, p: &str, name: &str, value: &[u8]) {
        let n = CString::new(name).unwrap();
        // SAFETY: valid C strings and a buffer of `value.len()` bytes.
        let r = unsafe {
            libc::lsetxattr(cpath(&self.abs(p)).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0)
        };
        assert_eq!(r, 0, "setxattr {p} {name} ({} bytes): {}", value.len(), errno());
        self.m.node_mut(p).xattrs.insert(name.as_bytes().to_vec(), value.to_vec());
    }

    fn removexattr(&mut self, p: &str, name: &[u8]) {
        let n = CString::new(name).unwrap();
        // SAFETY: valid C strings.
        let r = unsafe { libc::lremovexattr(cpath(&self.abs(p)).as_ptr(), n.as_ptr()) };
        assert_eq!(r, 0, "removexattr {p} {}: {}", String::from_utf8_lossy(name), errno());
        self.m.node_mut(p).xattrs.remove(name);
    }

    /// Read a file back and compare with the model.
    fn verify(&mut self, p: &str) {
        let got = fs::read(self.abs(p)).unwrap_or_else(|e| panic!("read {p}: {e}"));
        let want = &self.m.node(p).data;
        if got != *want {
            let first = got.iter().zip(want.iter()).position(|(a, b)| a != b);
            panic!(
                "{p}: read back {} bytes, the model holds {} (first difference at {first:?})",
                got.len(),
                want.len()
            );
        }
    }

    fn fsync(&mut self, p: &str, data_only: bool) {
        let f = File::open(self.abs(p)).unwrap_or_else(|e| panic!("open {p}: {e}"));
        if data_only { f.sync_data() } else { f.sync_all() }.unwrap_or_else(|e| panic!("fsync {p}: {e}"));
    }

    // ---- random choices ----

    /// A random pool path satisfying `want` (a few tries), if any.
    fn pick(&mut self, want: impl Fn(&Model, &str, &Node) -> bool) -> Option<String> {
        for _ in 0..40 {
            if self.m.pool.is_empty() {
                return None;
            }
            let p = &self.m.pool[self.rng.gen_range(0..self.m.pool.len())];
            if want(self.m, p, self.m.node(p)) {
                return Some(p.clone());
            }
        }
        None
    }

    /// A directory to create in: the root, a pool directory, now and then a big one.
    fn pick_dir(&mut self) -> String {
        if self.rng.gen_range(0..20) == 0 {
            let bulk: Vec<String> = self.m.bulk.iter().filter(|b| *b != "/lost+found").cloned().collect();
            if !bulk.is_empty() {
                return bulk[self.rng.gen_range(0..bulk.len())].clone();
            }
        }
        if self.rng.gen_range(0..10) == 0 {
            return "/".into();
        }
        self.pick(|_, _, n| n.kind == Kind::Dir).unwrap_or_else(|| "/".into())
    }

    fn xattr_cost(x: &Xattrs) -> usize {
        x.iter().map(|(n, v)| 24 + n.len() + v.len()).sum()
    }

    /// One random operation; returns its name.
    fn random_op(&mut self) -> &'static str {
        let what = match self.rng.gen_range(0..100) {
            0..=13 => "create",
            14..=28 => "write",
            29..=34 => "truncate",
            35..=40 => "mkdir",
            41..=43 => "rmdir",
            44..=53 => "rename",
            54..=58 => "link",
            59..=66 => "unlink",
            67..=71 => "symlink",
            72..=75 => "chmod",
            76..=78 => "chown",
            79..=86 => "setxattr",
            87..=89 => "removexattr",
            90..=93 => "fsync",
            94..=97 => "verify",
            _ => "mkfifo",
        };
        let done = match what {
            "create" => {
                let p = join(&self.pick_dir(), &self.fresh_name());
                let len = match self.rng.gen_range(0..10) {
                    0..=2 => 0,
                    3..=7 => self.rng.gen_range(1..20_000),
                    _ => self.rng.gen_range(20_000..400_000),
                };
                let data = self.bytes(self.scaled(len));
                let perm = FILE_PERMS[self.rng.gen_range(0..FILE_PERMS.len())];
                self.create(&p, perm, &data);
                true
            }
            "write" => match self.pick(|_, _, n| n.kind == Kind::File) {
                Some(p) => {
                    let size = self.m.node(&p).data.len();
                    let off = match self.rng.gen_range(0..4) {
                        0 => size,
                        1 => size + self.rng.gen_range(1..1 << 20),
                        _ => self.rng.gen_range(0..=size),
                    };
                    let len = if self.rng.gen_range(0..8) == 0 {
                        self.rng.gen_range(65_536..300_000)
                    } else {
                        self.rng.gen_range(1..20_000)
                    };
                    let len = self.scaled(len);
                    let off = off.min(MAX_FILE.saturating_sub(len));
                    let data = self.bytes(len);
                    self.write(&p, off as u64, &data);
                    true
                }
                None => false,
            },
            "truncate" => match self.pick(|_, _, n| n.kind == Kind::File) {
                Some(p) => {
                    let size = self.m.node(&p).data.len();
                    let len = self.rng.gen_range(0..=(size * 2 + 10_000).min(MAX_FILE));
                    self.truncate(&p, len as u64);
                    true
                }
                None => false,
            },
            "mkdir" => {
                let p = join(&self.pick_dir(), &self.fresh_name());
                let perm = DIR_PERMS[self.rng.gen_range(0..DIR_PERMS.len())];
                self.mkdir(&p, perm);
                true
            }
            "rmdir" => {
                let bulk = self.m.bulk.clone();
                match self.pick(|m, p, n| n.kind == Kind::Dir && !bulk.contains(p) && m.is_empty_dir(p)) {
                    Some(p) => {
                        self.rmdir(&p);
                        true
                    }
                    None => false,
                }
            }
            "rename" => {
                let bulk = self.m.bulk.clone();
                let holds_bulk = |p: &str| bulk.iter().any(|b| b == p || b.starts_with(&format!("{p}/")));
                match self.pick(|_, p, _| !holds_bulk(p)) {
                    Some(from) => {
                        let is_dir = self.m.node(&from).kind == Kind::Dir;
                        let mut to = None;
                        if !is_dir && self.rng.gen_range(0..3) == 0 {
                            let id = self.m.paths[&from];
                            to = self.pick(|m, p, n| n.kind != Kind::Dir && m.paths[p] != id);
                        }
                        let to = match to {
                            Some(t) => t,
                            None => {
                                let mut dir = self.pick_dir();
                                if is_dir && (dir == from || dir.starts_with(&format!("{from}/"))) {
                                    dir = "/".into();
                                }
                                join(&dir, &self.fresh_name())
                            }
                        };
                        self.rename(&from, &to);
                        true
                    }
                    None => false,
                }
            }
            "link" => match self.pick(|m, p, n| n.kind == Kind::File && m.links(m.paths[p]) < 20) {
                Some(from) => {
                    let to = join(&self.pick_dir(), &self.fresh_name());
                    self.link(&from, &to);
                    true
                }
                None => false,
            },
            "unlink" => match self.pick(|_, _, n| n.kind != Kind::Dir) {
                Some(p) => {
                    self.unlink(&p);
                    true
                }
                None => false,
            },
            "symlink" => {
                let p = join(&self.pick_dir(), &self.fresh_name());
                let len = if self.rng.gen_range(0..3) == 0 {
                    self.rng.gen_range(60..=(self.block_size - 1).min(3000))
                } else {
                    self.rng.gen_range(1..60)
                };
                let target: Vec<u8> = (0..len).map(|i| b"abcdefghij/klmnop."[(i * 7 + len) % 18]).collect();
                self.symlink(&p, &target);
                true
            }
            "chmod" => match self.pick(|_, _, n| n.kind != Kind::Symlink) {
                Some(p) => {
                    let perms = if self.m.node(&p).kind == Kind::Dir { DIR_PERMS } else { FILE_PERMS };
                    let perm = perms[self.rng.gen_range(0..perms.len())];
                    self.chmod(&p, perm);
                    true
                }
                None => false,
            },
            "chown" => match self.pick(|_, _, _| true) {
                Some(p) => {
                    let uid = OWNERS[self.rng.gen_range(0..OWNERS.len())];
                    let gid = OWNERS[self.rng.gen_range(0..OWNERS.len())];
                    self.chown(&p, uid, gid);
                    true
                }
                None => false,
            },
            "setxattr" => match self.pick(|_, _, _| true) {
                Some(p) => {
                    let n = self.m.node(&p);
                    // user.* only exists on files and directories.
                    let ns = if matches!(n.kind, Kind::File | Kind::Dir) { "user" } else { "trusted" };
                    let name =
                        format!("{ns}.{}", ["a", "comment", "mime_type", "big"][self.rng.gen_range(0..4)]);
                    let mut rest = n.xattrs.clone();
                    rest.remove(name.as_bytes());
                    let room =
                        (self.block_size * 3 / 4).saturating_sub(Self::xattr_cost(&rest) + 24 + name.len());
                    if room == 0 {
                        false
                    } else {
                        let len = match self.rng.gen_range(0..10) {
                            0..=6 => self.rng.gen_range(0..=room.min(64)),
                            7..=8 => self.rng.gen_range(0..=room.min(400)),
                            _ => room,
                        };
                        let v = self.bytes(len);
                        self.setxattr(&p, &name, &v);
                        true
                    }
                }
                None => false,
            },
            "removexattr" => match self.pick(|_, _, n| !n.xattrs.is_empty()) {
                Some(p) => {
                    let names: Vec<Vec<u8>> = self.m.node(&p).xattrs.keys().cloned().collect();
                    let name = names[self.rng.gen_range(0..names.len())].clone();
                    self.removexattr(&p, &name);
                    true
                }
                None => false,
            },
            "fsync" => match self.pick(|_, _, n| n.kind == Kind::File) {
                Some(p) => {
                    let data_only = self.rng.gen_bool(0.5);
                    self.fsync(&p, data_only);
                    true
                }
                None => false,
            },
            "verify" => match self.pick(|_, _, n| n.kind == Kind::File) {
                Some(p) => {
                    self.verify(&p);
                    true
                }
                None => false,
            },
            _ => {
                let p = join(&self.pick_dir(), &self.fresh_name());
                self.mknod(&p, Kind::Fifo, 0o640, (0, 0));
                true
            }
        };
        if done {
            *self.counts.entry(what).or_insert(0) += 1;
        }
        what
    }

    fn random_ops(&mut self, n: usize) {
        for _ in 0..n {
            self.random_op();
        }
    }
}

// ---- the phases ----------------------------------------------------------------------------

/// Geometry read from an image's superblock.
struct Geometry {
    block_size: usize,
    inode_size: usize,
    /// Bytes in the file system.
    bytes: u64,
}

impl Geometry {
    /// See [`Ops::data_scale`].
    fn data_scale(&self) -> f64 {
        (self.bytes as f64 / f64::from(256u32 << 20)).min(1.0)
    }
}

fn geometry(img: &Path) -> Geometry {
    let mut sb = [0u8; 1024];
    File::open(img).and_then(|f| f.read_exact_at(&mut sb, 1024)).expect("read superblock");
    let le32 = |o: usize| u32::from_le_bytes(sb[o..o + 4].try_into().unwrap());
    let le16 = |o: usize| u16::from_le_bytes(sb[o..o + 2].try_into().unwrap());
    let blocks = u64::from(le32(0x04)) | u64::from(le32(0x150)) << 32;
    let block_size = 1024usize << le32(0x18);
    Geometry { block_size, inode_size: usize::from(le16(0x58)), bytes: blocks * block_size as u64 }
}

/// The kernel's tree: everything a real file system holds, from every direction.
fn kernel_fill(o: &mut Ops<'_>) {
    let bs = o.block_size;
    o.mkdir("/k", 0o755);
    for d in 0..6 {
        o.mkdir(&format!("/k/d{d}"), DIR_PERMS[d % DIR_PERMS.len()].max(0o700));
        o.mkdir(&format!("/k/d{d}/sub"), 0o755);
        o.mkdir(&format!("/k/d{d}/sub/deeper"), 0o750);
    }
    let sizes = [0usize, 1, 59, 60, 1023, 1024, 4095, 4096, 4097, 65_537, 300_000, (1 << 20) + 1];
    for (i, &size) in sizes.iter().enumerate() {
        for d in 0..3 {
            let p = format!("/k/d{}/{}f{size}", (i + d) % 6, ["", "sub/", "sub/deeper/"][d]);
            let data = o.bytes(size);
            o.create(&p, FILE_PERMS[(i + d) % FILE_PERMS.len()], &data);
        }
    }
    // Sparse: data at 0, a hole, data past 6 MiB.
    let data = o.bytes(4096);
    o.create("/k/sparse", 0o600, &data);
    let data = o.bytes(10_000);
    o.write("/k/sparse", (6 << 20) + 17, &data);
    // Many extents (an extent tree of depth 1): 12 pieces with holes between them.
    o.create("/k/fragmented", 0o644, b"");
    for i in 0..12u64 {
        let data = o.bytes(4096);
        o.write("/k/fragmented", i * 3 * 4096, &data);
    }
    // Interleaved appends to two files, synced between, so their extents interleave.
    o.create("/k/inter-a", 0o644, b"");
    o.create("/k/inter-b", 0o644, b"");
    for i in 0..8u64 {
        for f in ["/k/inter-a", "/k/inter-b"] {
            let data = o.bytes(8192);
            o.write(f, i * 8192, &data);
            o.fsync(f, true);
        }
    }
    o.symlink("/k/fast", b"d1/f4096");
    o.symlink("/k/d1/slow", &[b'z'; 200]);
    o.symlink("/k/d2/longest", &vec![b'y'; (bs - 1).min(3000)]);
    o.link("/k/d1/f4096", "/k/d3/hard-a");
    o.link("/k/d1/f4096", "/k/d4/sub/hard-b");
    o.link("/k/d2/sub/f1", "/k/hard-c");
    o.mknod("/k/fifo", Kind::Fifo, 0o600, (0, 0));
    o.mknod("/k/chr", Kind::Chr, 0o640, (1, 7));
    o.chown("/k/d1/f1", 1000, 1000);
    o.chown("/k/d1", 100_000, 200_000);
    o.chown("/k/fast", 1001, 1001);
    o.chmod("/k/d5", 0o1777);
    o.setxattr("/k/d1/f1", "user.small", b"v");
    o.setxattr("/k", "user.dir", b"directory attribute");
    o.setxattr("/k/d1/slow", "trusted.sym", b"on a symlink");
    // Identical large sets on three files: the kernel shares one xattr block among them.
    let big = o.bytes(bs / 2);
    for p in ["/k/d2/f59", "/k/d3/f60", "/k/d4/f1023"] {
        o.setxattr(p, "user.big", &big);
        o.setxattr(p, "user.tag", b"shared");
    }
    let own = o.bytes(bs / 3);
    o.setxattr("/k/d0/f0", "user.own", &own);
    // A directory the kernel indexes (thousands of entries, many blocks).
    o.mkdir("/k/htree", 0o755);
    for i in 0..HTREE_ENTRIES {
        let data = if i % 10 == 0 { format!("{i}").into_bytes() } else { Vec::new() };
        o.create(&format!("/k/htree/entry-with-a-longer-name-{i:05}"), 0o644, &data);
    }
    o.m.make_bulk("/k/htree");
}

/// The inode number cjfs's FUSE mount shows for the root directory (FUSE's root node id;
/// ext4's root is inode 2). The only inode number allowed to differ between the views.
const FUSE_ROOT_INO_SHOWN: u64 = 1;

/// A mounted tree's snapshot, timed. Written data is synced first, so block counts are the
/// allocated ones (a kernel's delayed allocation reserves no extent tree blocks).
fn snapshot(cfg: &str, what: &str, root: &Path) -> Snap {
    let t = Instant::now();
    kernel::syncfs(root);
    let mut s = kernel::walk_host(root);
    if let Some(x) = s.extra.get_mut("/")
        && x.ino == FUSE_ROOT_INO_SHOWN
    {
        x.ino = 2;
    }
    println!("config {cfg}: {what}: {} paths walked in {:.1} s", s.tree.len(), t.elapsed().as_secs_f64());
    s
}

/// The data regions of a (sparse) file, for byte-exact comparison.
fn data_regions(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut f = File::open(path).expect("open image");
    let len = f.metadata().unwrap().len();
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = 0i64;
    while (pos as u64) < len {
        // SAFETY: lseek on our own descriptor.
        let start = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if start < 0 {
            break;
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        let mut buf = vec![0u8; (end - start) as usize];
        f.seek(SeekFrom::Start(start as u64)).unwrap();
        f.read_exact(&mut buf).unwrap();
        out.push((start as u64, buf));
        pos = end;
    }
    out
}

fn mkfs(cfg: &Config, img: &Path) -> Result<(), String> {
    let mut args: Vec<&OsStr> = vec![OsStr::new("-F"), OsStr::new("-q")];
    args.extend(cfg.opts.iter().map(OsStr::new));
    args.push(img.as_os_str());
    args.push(OsStr::new(cfg.size));
    let o = run("mkfs.ext4", &args);
    if o.code != 0 { Err(o.text()) } else { Ok(()) }
}

/// How one configuration ended.
enum Outcome {
    Passed,
    Refused(String),
    Skipped(String),
}

fn run_config(cfg: &Config, base_seed: u64) -> Outcome {
    let t0 = Instant::now();
    let mut dir = tempfile::Builder::new().prefix(&format!("cjfs-matrix-{}-", cfg.name)).tempdir().unwrap();
    if std::env::var_os("CJFS_MATRIX_KEEP").is_some() {
        dir.disable_cleanup(true);
        println!("config {}: keeping {}", cfg.name, dir.path().display());
    }
    let img = dir.path().join("ext4.img");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    if let Err(e) = mkfs(cfg, &img) {
        return Outcome::Skipped(format!("this mkfs.ext4 cannot make it: {}", e.trim()));
    }
    let geo = geometry(&img);
    let name = cfg.name;
    let seed = base_seed ^ (crc32c::crc32c(name.as_bytes()) as u64);
    println!(
        "config {name}: mkfs.ext4 -F -q {}IMG {} -> {}-byte blocks, {}-byte inodes",
        cfg.opts.iter().map(|o| format!("{o} ")).collect::<String>(),
        cfg.size,
        geo.block_size,
        geo.inode_size
    );

    // 1. The kernel fills it.
    let t = Instant::now();
    let lo = LoopDev::attach(&img, false).expect("losetup");
    let mut km = KMount::mount(&lo, &mnt, "").unwrap_or_else(|e| panic!("config {name}: kernel mount: {e}"));
    let fresh = kernel::walk_host(&mnt);
    let mut model = Model::fresh(&fresh);
    let mut o = Ops {
        root: &mnt,
        m: &mut model,
        rng: StdRng::seed_from_u64(seed),
        tag: "k",
        names: 0,
        block_size: geo.block_size,
        data_scale: geo.data_scale(),
        counts: BTreeMap::new(),
    };
    kernel_fill(&mut o);
    drop(o);
    let k0 = snapshot(name, "kernel after its fill", &mnt);
    model.check(&format!("config {name}: kernel fill"), "kernel", &k0);
    km.umount();
    drop(lo);
    println!("config {name}: kernel fill in {:.1} s", t.elapsed().as_secs_f64());

    // 2. cjfs opens it read-write through FUSE, or refuses it as expected.
    let refusal = EXPECT_REFUSED.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
    let expect_words = refusal.map(str::to_string);
    if let Some(words) = expect_words {
        let before = data_regions(&img);
        match Mount::try_start(&img, &mnt, "") {
            Ok(m) => {
                m.unmount();
                panic!(
                    "config {name}: listed in EXPECT_REFUSED ({words}) but cjfs opened it: take it off the list"
                )
            }
            Err(log) => {
                assert!(
                    log.contains("unsupported") && log.contains(&words),
                    "config {name}: cjfs refused, but not with the \"unsupported ... {words}\" error:\n{log}"
                );
                let line =
                    log.lines().find(|l| l.contains("unsupported")).unwrap_or_default().trim().to_string();
                println!("config {name}: cjfs-mount said: {line}");
                assert!(data_regions(&img) == before, "config {name}: the refused image changed");
                kernel::assert_fsck_clean(&img, &format!("config {name} after cjfs refused it"));
                return Outcome::Refused(format!("{words} not supported yet"));
            }
        }
    }

    let t = Instant::now();
    let fm = Mount::start(&img, &mnt, "");
    let f0 = snapshot(name, "cjfs (FUSE) after mounting", &mnt);
    assert_same(&format!("config {name}: cjfs opening the kernel's image"), "kernel", &k0, "cjfs", &f0, true);
    let mut o = Ops {
        root: &mnt,
        m: &mut model,
        rng: StdRng::seed_from_u64(seed + 1),
        tag: "c",
        names: 0,
        block_size: geo.block_size,
        data_scale: geo.data_scale(),
        counts: BTreeMap::new(),
    };
    let tops = Instant::now();
    o.random_ops(FUSE_OPS / 2);
    // Changes in the kernel's indexed directory: new entries, removals, renames out and in.
    for i in 0..300 {
        let data = o.bytes(i % 7);
        o.create(&format!("/k/htree/cjfs-added-{i:04}"), 0o644, &data);
    }
    for i in (0..HTREE_ENTRIES).step_by(7) {
        o.unlink(&format!("/k/htree/entry-with-a-longer-name-{i:05}"));
    }
    o.mkdir("/from-htree", 0o755);
    for i in (3..HTREE_ENTRIES).step_by(97).filter(|i| i % 7 != 0) {
        o.rename(&format!("/k/htree/entry-with-a-longer-name-{i:05}"), &format!("/from-htree/{i}"));
    }
    o.random_ops(FUSE_OPS - FUSE_OPS / 2);
    println!(
        "config {name}: {} random operations through FUSE in {:.1} s: {:?}",
        FUSE_OPS,
        tops.elapsed().as_secs_f64(),
        o.counts
    );
    // The big directory: a tight loop of creates.
    o.mkdir("/big", 0o755);
    o.m.make_bulk("/big");
    // Small images have fewer free inodes than entries (mke2fs gives a 32 MiB image 8192):
    // past what the inodes allow (less a reserve for the later phases), the entries are
    // hard links to the files made first, so the directory still has every entry.
    let files = BIG_DIR_ENTRIES.min(free_inodes(&mnt).saturating_sub(3000).max(1));
    let tbig = Instant::now();
    for i in 0..BIG_DIR_ENTRIES {
        let rel = format!("big/file-number-{i:06}");
        if i < files {
            File::create(mnt.join(&rel)).unwrap_or_else(|e| panic!("config {name}: create /{rel}: {e}"));
        } else {
            let target = mnt.join(format!("big/file-number-{:06}", i % files));
            fs::hard_link(&target, mnt.join(&rel))
                .unwrap_or_else(|e| panic!("config {name}: link /{rel}: {e}"));
        }
    }
    let big_secs = tbig.elapsed().as_secs_f64();
    let mut ids = Vec::with_capacity(files);
    for i in 0..BIG_DIR_ENTRIES {
        let id = if i < files {
            let id = o.m.new_node(Node {
                kind: Kind::File,
                perm: 0o644,
                uid: 0,
                gid: 0,
                data: Vec::new(),
                xattrs: Xattrs::new(),
                rdev: (0, 0),
            });
            ids.push(id);
            id
        } else {
            ids[i % files]
        };
        o.m.add_path(&format!("/big/file-number-{i:06}"), id);
    }
    println!(
        "config {name}: {BIG_DIR_ENTRIES} entries in one directory through FUSE ({files} creates, the rest hard \
         links) in {big_secs:.1} s"
    );
    drop(o);
    let f1 = snapshot(name, "cjfs (FUSE) after its changes", &mnt);
    model.check(&format!("config {name}: after the changes through FUSE"), "cjfs", &f1);
    let tu = Instant::now();
    fm.unmount();
    println!(
        "config {name}: cjfs phase in {:.1} s (unmount {:.1} s)",
        t.elapsed().as_secs_f64(),
        tu.elapsed().as_secs_f64()
    );

    // 3. e2fsck, then the kernel sees what cjfs showed, and changes it.
    kernel::assert_fsck_clean(&img, &format!("config {name} after cjfs wrote it"));
    let t = Instant::now();
    let lo = LoopDev::attach(&img, false).expect("losetup");
    let mut km = KMount::mount(&lo, &mnt, "").unwrap_or_else(|e| panic!("config {name}: kernel mount: {e}"));
    let k1 = snapshot(name, "kernel after cjfs", &mnt);
    assert_same(
        &format!("config {name}: the kernel reading what cjfs wrote"),
        "cjfs",
        &f1,
        "kernel",
        &k1,
        true,
    );
    let mut o = Ops {
        root: &mnt,
        m: &mut model,
        rng: StdRng::seed_from_u64(seed + 2),
        tag: "kk",
        names: 0,
        block_size: geo.block_size,
        data_scale: geo.data_scale(),
        counts: BTreeMap::new(),
    };
    o.random_ops(KERNEL_OPS);
    // The kernel changes the directory cjfs built: removals, new entries, renames out.
    for i in (0..BIG_DIR_ENTRIES).step_by(10) {
        o.unlink(&format!("/big/file-number-{i:06}"));
    }
    for i in 0..1000 {
        let data = o.bytes(i % 5);
        o.create(&format!("/big/kernel-added-{i:04}"), 0o644, &data);
    }
    o.mkdir("/from-big", 0o755);
    for i in (1..BIG_DIR_ENTRIES).step_by(1001).filter(|i| i % 10 != 0) {
        o.rename(&format!("/big/file-number-{i:06}"), &format!("/from-big/{i}"));
    }
    let counts = std::mem::take(&mut o.counts);
    drop(o);
    let k2 = snapshot(name, "kernel after its changes", &mnt);
    model.check(&format!("config {name}: after the kernel's changes"), "kernel", &k2);
    km.umount();
    drop(lo);
    println!("config {name}: kernel phase in {:.1} s: {counts:?}", t.elapsed().as_secs_f64());

    // 4. cjfs sees what the kernel showed.
    let t = Instant::now();
    kernel::assert_fsck_clean(&img, &format!("config {name} after the kernel wrote it"));
    let fm = Mount::start(&img, &mnt, "");
    let f2 = snapshot(name, "cjfs (FUSE) after the kernel", &mnt);
    assert_same(
        &format!("config {name}: cjfs reading what the kernel wrote"),
        "kernel",
        &k2,
        "cjfs",
        &f2,
        true,
    );
    fm.unmount();
    kernel::assert_fsck_clean(&img, &format!("config {name} after cjfs mounted it again"));
    println!("config {name}: final cjfs check in {:.1} s", t.elapsed().as_secs_f64());
    println!("config {name}: passed in {:.1} s", t0.elapsed().as_secs_f64());
    Outcome::Passed
}

/// Configurations to run: all, or those `CJFS_MATRIX` names (comma-separated).
fn selected() -> Vec<&'static Config> {
    let want: Vec<String> = match std::env::var("CJFS_MATRIX") {
        Ok(v) if !v.is_empty() && v != "full" => v.split(',').map(|s| s.trim().to_string()).collect(),
        _ => CONFIGS.iter().map(|c| c.name.to_string()).collect(),
    };
    for w in &want {
        assert!(CONFIGS.iter().any(|c| c.name == w), "CJFS_MATRIX: no configuration {w:?}");
    }
    CONFIGS.iter().filter(|c| want.iter().any(|w| w == c.name)).collect()
}

#[test]
fn mkfs_ext4_matrix() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: mkfs_ext4_matrix: {why}");
        return;
    }
    if let Err(why) = kernel::need_tools(&["mkfs.ext4", "e2fsck"]).and_then(|_| kernel::kernel_env()) {
        println!("SKIP: mkfs_ext4_matrix: {why}");
        return;
    }
    // New files get mode 0644 both in the kernel and through FUSE.
    // SAFETY: umask has no preconditions; this test binary runs only this test.
    unsafe { libc::umask(0o022) };
    let t0 = Instant::now();
    let base = seed();
    let configs = selected();
    let jobs: usize = std::env::var("CJFS_MATRIX_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(2).max(1);
    // Configurations run `jobs` at a time; one that fails is reported and the others go on.
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<Outcome, String>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(configs.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(cfg) = configs.get(i) else { break };
                    let out =
                        std::panic::catch_unwind(AssertUnwindSafe(|| run_config(cfg, base))).map_err(|p| {
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "panicked".into())
                        });
                    match &out {
                        Ok(Outcome::Passed) => {}
                        Ok(Outcome::Refused(why)) => println!("config {}: refused ({why})", cfg.name),
                        Ok(Outcome::Skipped(why)) => println!("config {}: SKIP: {why}", cfg.name),
                        Err(_) => println!("config {}: FAILED", cfg.name),
                    }
                    results.lock().unwrap().push((i, out));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    println!("matrix (seed {base}, {jobs} at a time) in {:.1} s:", t0.elapsed().as_secs_f64());
    let mut failed = Vec::new();
    for (i, out) in &results {
        let name = configs[*i].name;
        let s = match out {
            Ok(Outcome::Passed) => "passed".to_string(),
            Ok(Outcome::Refused(why)) => format!("refused ({why})"),
            Ok(Outcome::Skipped(why)) => format!("skipped ({why})"),
            Err(msg) => {
                failed.push(format!("config {name}: {msg}"));
                "FAILED".to_string()
            }
        };
        println!("  {name}: {s}");
    }
    assert!(failed.is_empty(), "{} configuration(s) failed:\n{}", failed.len(), failed.join("\n\n"));
    let passed = results.iter().filter(|(_, o)| matches!(o, Ok(Outcome::Passed))).count();
    assert!(passed > 0, "no configuration ran through");
}

/// Free inodes of the file system mounted at `mnt` (`statvfs`).
fn free_inodes(mnt: &Path) -> usize {
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a statvfs to fill.
    let r = unsafe { libc::statvfs(cpath(mnt).as_ptr(), &mut st) };
    assert_eq!(r, 0, "statvfs {}", mnt.display());
    st.f_ffree as usize
}
