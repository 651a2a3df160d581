//! The oracle: a logical model of the file system, its history over a workload, the
//! guarantees each persistence call creates, and the comparison of a recovered image
//! against them.
//!
//! # What is compared
//!
//! The *logical state* of a file system is its names (path → inode number and type) and,
//! for every reachable inode, its [`InodeView`]: type, permission bits, link count, size,
//! content (one hash per 512-byte sector, so a torn 4 KiB block is still judged per
//! sector), extended attributes (name → value hash) and symlink target. Times, block
//! counts, directory sizes and `lost+found`'s contents are not compared.
//!
//! # States and windows
//!
//! State 0 is the base image (setup done, cleanly unmounted). Operation `i` (0-based, in
//! model order) turns state `i` into state `i + 1`. For a crash at a point of the device log
//! the harness knows which operations had *started* (`hi`: the last state any of them can
//! have produced) and which persistence calls had *returned*. Every key — a path, or a field
//! of an inode — may show the value it had in state `lo` or any value it took in states
//! `lo + 1 ..= hi` ("the old or the new state and nothing else"), where `lo` is the last
//! state made durable *for that key* by a returned persistence call (0 if none). This is
//! checked per key: operations after the last persistence call may survive in any
//! combination, as POSIX allows, but no key ever shows a value it never had (no garbage, no
//! resurrected names) or one older than its durable state.
//!
//! The operations of a concurrent round run in an unknown order; they touch disjoint files,
//! so the model applies them in thread order, except that a creation that got the inode
//! number another operation of the round freed comes after that operation
//! ([`apply_round`]): inode numbers identify inodes in the comparison, and the free really
//! came first. A free-running workload's operations are applied in start order under the
//! same rule, and never before an operation that returned before they started
//! ([`apply_ordered`]).
//!
//! # Guarantees (which `lo` a returned persistence call sets)
//!
//! POSIX is vague about metadata; where it is, ext4's documented and well-known behaviour is
//! followed, as CrashMonkey does:
//!
//! * `sync`/`syncfs` after operation `i`, and the final clean unmount: every key, `lo = i+1`.
//! * `fsync(f)` of a regular file or symlink target inode `X`: every field of `X` (type,
//!   mode, link count, size, content, xattrs); every name that refers to `X` in state `i+1`
//!   *and every ancestor directory entry on those paths* (ext4 commits a new file's
//!   directory entry, and new parent directories' entries, with the file: a file fsynced
//!   several new directories deep is reachable after a crash). `X` must be reachable.
//! * `fsync(d)` of a directory: as for a file, plus every entry of `d` (every path whose
//!   parent is `d`, existing or removed: creations, unlinks and renames in `d` are durable).
//! * `fdatasync(f)`: `X`'s size and content (not its other attributes, not its names:
//!   fdatasync does not persist a rename); `X` must be reachable under some name.
//! * Synchronous updates (ext4's `IS_DIRSYNC`/`IS_SYNC`), with the flags tracked per inode
//!   (`chattr +D`/`+S`, and inherited as ext4 does: a new directory takes its parent's `+D`
//!   and `+S`, a new regular file `+S` only, a symlink neither). The return of a directory
//!   operation (creat, mkdir, symlink, link, unlink, rmdir, rename) in a `+D` or `+S`
//!   directory is an `fsync` of that directory in state `i+1`; of a rename where either
//!   parent is marked, an `fsync` of both parents. ext4 commits the whole transaction, but
//!   only that much is claimed. The return of a write to a `+S` file is an `fdatasync(f)`,
//!   of a truncate an `fsync(f)`; a `chattr` is an `fsync` of its inode only if that was `+S`
//!   before it (ext4 checks before changing the flags). Nothing is claimed in a plain
//!   directory or for a plain file (a `+D` directory's files are plain), nor for a `+S`
//!   inode's other updates (attributes, fallocate).
//!
//! Besides the per-key windows:
//!
//! * **never neither** — an inode that is linked in every state of its window must be
//!   reachable (a rename never loses the file);
//! * **never both** — a non-directory inode is never reachable under more names than its
//!   largest link count in the window (a rename never leaves both names);
//! * content is judged per 512-byte sector: each sector of the recovered file must equal
//!   that sector in some allowed state that covered it, cut at the recovered size (an
//!   in-place overwrite may reach the medium while the size is still the old one);
//!   data=ordered/journal never expose unwritten blocks or stale data past the durable size.
//!
//! One ext4 behaviour is allowed explicitly: a truncate to an unaligned smaller size zeroes
//! the rest of the new last block in place before the size change commits (ext4's
//! `ext4_block_truncate_page` does the same), so until it commits the old size may show
//! those bytes as zeros. Zeros only, where the caller asked for the bytes to go; no stale
//! data.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cjfs_fs::ondisk::inode::{EXT4_DIRSYNC_FL, EXT4_SYNC_FL};
use cjfs_fs::{FileType, Fs, FsError, Ino, ROOT_INO};
use serde::{Deserialize, Serialize};

use super::workloads::{Op, magic_pattern, pattern, split_path};

/// Sector size content hashes are taken over.
pub const SECTOR: usize = 512;

/// 64-bit hash (FNV-1a over 8-byte words with a final mix). Stable across runs.
pub fn hash64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ data.len() as u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// Kind of an inode, as far as the oracle cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Anything else.
    Other,
}

impl Kind {
    fn from_type(t: FileType) -> Kind {
        match t {
            FileType::Regular => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// The compared attributes of one inode. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InodeView {
    /// Type.
    pub kind: Kind,
    /// Permission bits.
    pub perm: u16,
    /// Link count.
    pub nlink: u32,
    /// Size (0 for directories: not compared).
    pub size: u64,
    /// One hash per 512-byte sector of the content (the last one over the bytes below the
    /// size, zero padded); empty for directories.
    pub sectors: Arc<Vec<u64>>,
    /// The content itself (regular files), for sector comparisons at a different size.
    pub data: Arc<Vec<u8>>,
    /// Extended attributes: name → value hash.
    pub xattrs: BTreeMap<String, u64>,
    /// Symlink target.
    pub target: Vec<u8>,
}

fn sector_hashes(data: &[u8]) -> Vec<u64> {
    data.chunks(SECTOR)
        .map(|c| {
            if c.len() == SECTOR {
                hash64(c)
            } else {
                let mut s = [0u8; SECTOR];
                s[..c.len()].copy_from_slice(c);
                hash64(&s)
            }
        })
        .collect()
}

/// A logical state: names and reachable inodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogicalState {
    /// Path → (inode, kind). The root is not listed.
    pub names: BTreeMap<String, (Ino, Kind)>,
    /// Reachable inodes (the root included).
    pub inodes: BTreeMap<Ino, InodeView>,
}

impl LogicalState {
    /// Read the logical state of a mounted file system by walking it from the root.
    pub fn read(fs: &Fs) -> Result<LogicalState, FsError> {
        let mut st = LogicalState::default();
        let mut queue = vec![(String::new(), ROOT_INO)];
        st.inodes.insert(ROOT_INO, view_of(fs, ROOT_INO)?);
        while let Some((dir, dino)) = queue.pop() {
            let mut off = 0;
            loop {
                let ents = fs.readdir(dino, off, 256)?;
                if ents.is_empty() {
                    break;
                }
                for e in &ents {
                    off = e.next_offset;
                    if e.name == b"." || e.name == b".." {
                        continue;
                    }
                    let name = String::from_utf8_lossy(&e.name).into_owned();
                    let path = if dir.is_empty() { name } else { format!("{dir}/{name}") };
                    let kind = Kind::from_type(e.kind);
                    match st.inodes.entry(e.ino) {
                        std::collections::btree_map::Entry::Vacant(slot) => {
                            let v = view_of(fs, e.ino)?;
                            if v.kind != kind {
                                return Err(FsError::Corrupt(format!(
                                    "entry {path} says {kind:?}, inode {} is {:?}",
                                    e.ino, v.kind
                                )));
                            }
                            slot.insert(v);
                            if kind == Kind::Dir {
                                queue.push((path.clone(), e.ino));
                            }
                        }
                        std::collections::btree_map::Entry::Occupied(_) if kind == Kind::Dir => {
                            return Err(FsError::Corrupt(format!("directory inode {} has two names", e.ino)));
                        }
                        std::collections::btree_map::Entry::Occupied(_) => {}
                    }
                    st.names.insert(path, (e.ino, kind));
                }
            }
        }
        Ok(st)
    }

    /// Field-by-field differences from `other` (for reports), at most `max`.
    pub fn diff(&self, other: &LogicalState, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        let paths: BTreeSet<&String> = self.names.keys().chain(other.names.keys()).collect();
        for p in paths {
            let (a, b) = (self.names.get(p), other.names.get(p));
            if a != b {
                out.push(format!("path {p}: {} vs {}", fmt_name(a.copied()), fmt_name(b.copied())));
            }
        }
        let inos: BTreeSet<&Ino> = self.inodes.keys().chain(other.inodes.keys()).collect();
        for i in inos {
            match (self.inodes.get(i), other.inodes.get(i)) {
                (Some(a), Some(b)) if a != b => {
                    for f in view_field_diffs(a, b) {
                        out.push(format!("inode {i}: {f}"));
                    }
                }
                (Some(_), None) => out.push(format!("inode {i}: present vs absent")),
                (None, Some(_)) => out.push(format!("inode {i}: absent vs present")),
                _ => {}
            }
        }
        out.truncate(max);
        out
    }
}

fn view_field_diffs(a: &InodeView, b: &InodeView) -> Vec<String> {
    let mut v = Vec::new();
    if a.kind != b.kind {
        v.push(format!("kind {:?} vs {:?}", a.kind, b.kind));
    }
    if a.perm != b.perm {
        v.push(format!("mode {:o} vs {:o}", a.perm, b.perm));
    }
    if a.nlink != b.nlink {
        v.push(format!("nlink {} vs {}", a.nlink, b.nlink));
    }
    if a.size != b.size {
        v.push(format!("size {} vs {}", a.size, b.size));
    }
    if a.sectors != b.sectors {
        let n = a.sectors.iter().zip(b.sectors.iter()).filter(|(x, y)| x != y).count();
        v.push(format!("content differs in {n} sector(s)"));
    }
    if a.xattrs != b.xattrs {
        v.push(format!(
            "xattrs {:?} vs {:?}",
            a.xattrs.keys().collect::<Vec<_>>(),
            b.xattrs.keys().collect::<Vec<_>>()
        ));
    }
    if a.target != b.target {
        v.push(format!(
            "symlink target {:?} vs {:?}",
            String::from_utf8_lossy(&a.target),
            String::from_utf8_lossy(&b.target)
        ));
    }
    v
}

fn fmt_name(v: Option<(Ino, Kind)>) -> String {
    match v {
        None => "absent".to_string(),
        Some((i, k)) => format!("inode {i} ({k:?})"),
    }
}

fn view_of(fs: &Fs, ino: Ino) -> Result<InodeView, FsError> {
    let a = fs.getattr(ino)?;
    let kind = Kind::from_type(a.kind);
    let mut xattrs = BTreeMap::new();
    for n in fs.listxattr(ino)? {
        let v = fs.getxattr(ino, &n)?;
        xattrs.insert(String::from_utf8_lossy(&n).into_owned(), hash64(&v));
    }
    let (size, sectors, target, data) = match kind {
        Kind::File => {
            if a.size > 1 << 30 {
                return Err(FsError::Corrupt(format!("inode {ino}: implausible size {}", a.size)));
            }
            let mut data = vec![0u8; a.size as usize];
            let mut done = 0;
            while done < data.len() {
                let n = fs.read(ino, done as u64, &mut data[done..])?;
                if n == 0 {
                    break;
                }
                done += n;
            }
            (a.size, sector_hashes(&data), Vec::new(), data)
        }
        Kind::Symlink => (a.size, Vec::new(), fs.readlink(ino)?, Vec::new()),
        _ => (0, Vec::new(), Vec::new(), Vec::new()),
    };
    Ok(InodeView {
        kind,
        perm: a.perm & 0o7777,
        nlink: a.nlink,
        size,
        sectors: Arc::new(sectors),
        data: Arc::new(data),
        xattrs,
        target,
    })
}

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

/// One modelled inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MInode {
    /// Type.
    pub kind: Kind,
    /// Permission bits.
    pub perm: u16,
    /// File content.
    pub data: Vec<u8>,
    /// Extended attributes.
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// Symlink target.
    pub target: Vec<u8>,
    /// Synchronous-update flags (`EXT4_SYNC_FL`, `EXT4_DIRSYNC_FL`; the others are not
    /// modelled). Not part of the logical state: they decide which operations are
    /// persistence calls.
    pub flags: u32,
}

/// The flags the model tracks.
const SYNC_FLAGS: u32 = EXT4_SYNC_FL | EXT4_DIRSYNC_FL;

/// The logical model of the file system a workload runs on.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Path → inode.
    pub names: BTreeMap<String, Ino>,
    /// Live inodes (root included).
    pub inodes: BTreeMap<Ino, MInode>,
    /// Paths naming each inode.
    links: HashMap<Ino, BTreeSet<String>>,
    /// Next inode number for predicted (generator-only) creations.
    next_fake: Ino,
}

/// What one operation changed (for the history).
#[derive(Debug, Default)]
pub struct Changes {
    /// Paths whose entry changed.
    pub paths: BTreeSet<String>,
    /// Inodes whose view may have changed (or which were freed).
    pub inos: BTreeSet<Ino>,
    /// Extra intermediate views an inode may show for this operation (see
    /// [`Model::apply`] on truncate).
    pub alt: Vec<(Ino, InodeView)>,
    /// Persistence calls the operation's return amounts to, in the state it leaves
    /// (synchronous updates: `chattr +D`/`+S`, see the module docs): `Fsync` or `Fdatasync`.
    pub implied: Vec<Op>,
}

impl Model {
    /// A fresh file system: the root and `lost+found` (generators only; inode numbers are
    /// made up).
    pub fn empty_fs() -> Model {
        let mut m = Model { next_fake: 1_000_000, ..Model::default() };
        m.inodes.insert(ROOT_INO, MInode::dir(0o755));
        m.inodes.insert(11, MInode::dir(0o700));
        m.names.insert("lost+found".into(), 11);
        m.links.entry(11).or_default().insert("lost+found".into());
        m
    }

    /// The model of a mounted file system, read from it.
    pub fn from_fs(fs: &Fs) -> Result<Model, FsError> {
        let ls = LogicalState::read(fs)?;
        let mut m = Model { next_fake: 1_000_000, ..Model::default() };
        for (&ino, v) in &ls.inodes {
            let mut xattrs = BTreeMap::new();
            for n in fs.listxattr(ino)? {
                let val = fs.getxattr(ino, &n)?;
                xattrs.insert(String::from_utf8_lossy(&n).into_owned(), val);
            }
            let data = if v.kind == Kind::File {
                let mut d = vec![0u8; v.size as usize];
                let mut done = 0;
                while done < d.len() {
                    let n = fs.read(ino, done as u64, &mut d[done..])?;
                    if n == 0 {
                        break;
                    }
                    done += n;
                }
                d
            } else {
                Vec::new()
            };
            let flags = fs.getattr(ino)?.flags & SYNC_FLAGS;
            m.inodes.insert(
                ino,
                MInode { kind: v.kind, perm: v.perm, data, xattrs, target: v.target.clone(), flags },
            );
        }
        for (p, (ino, _)) in &ls.names {
            m.names.insert(p.clone(), *ino);
            m.links.entry(*ino).or_default().insert(p.clone());
        }
        Ok(m)
    }

    /// Kind of the object at `path` (`""` is the root).
    pub fn kind_of(&self, path: &str) -> Option<Kind> {
        let ino = if path.is_empty() { ROOT_INO } else { *self.names.get(path)? };
        self.inodes.get(&ino).map(|i| i.kind)
    }

    /// Inode at `path`.
    pub fn ino_of(&self, path: &str) -> Option<Ino> {
        if path.is_empty() { Some(ROOT_INO) } else { self.names.get(path).copied() }
    }

    /// Whether `path` is an existing directory.
    pub fn exists_dir(&self, path: &str) -> bool {
        self.kind_of(path) == Some(Kind::Dir)
    }

    /// Size of the file at `path` (0 if none).
    pub fn size_of(&self, path: &str) -> u64 {
        self.ino_of(path).and_then(|i| self.inodes.get(&i)).map_or(0, |i| i.data.len() as u64)
    }

    /// Whether the object at `path` has the attribute.
    pub fn has_xattr(&self, path: &str, name: &str) -> bool {
        self.ino_of(path).and_then(|i| self.inodes.get(&i)).is_some_and(|i| i.xattrs.contains_key(name))
    }

    /// Whether directory operations in the directory at `dir` are synchronous (ext4's
    /// `IS_DIRSYNC`: the directory is `+D` or `+S`).
    pub fn dirsync(&self, dir: &str) -> bool {
        self.ino_of(dir).and_then(|i| self.inodes.get(&i)).is_some_and(|n| n.flags & SYNC_FLAGS != 0)
    }

    /// Whether every update of the object at `path` is synchronous (ext4's `IS_SYNC`: `+S`).
    pub fn sync(&self, path: &str) -> bool {
        self.ino_of(path).and_then(|i| self.inodes.get(&i)).is_some_and(|n| n.flags & EXT4_SYNC_FL != 0)
    }

    /// Whether the directory at `path` has no entries.
    pub fn dir_is_empty(&self, path: &str) -> bool {
        self.children(path).next().is_none()
    }

    /// Paths of the entries of directory `dir`.
    pub fn children<'a>(&'a self, dir: &str) -> impl Iterator<Item = &'a String> + 'a {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let plen = prefix.len();
        self.names
            .range(prefix.clone()..)
            .take_while(move |(p, _)| p.starts_with(&prefix))
            .filter_map(move |(p, _)| if p[plen..].contains('/') || p.len() == plen { None } else { Some(p) })
    }

    /// Every path naming `ino` now.
    pub fn names_of(&self, ino: Ino) -> Vec<String> {
        self.links.get(&ino).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    /// The view of a live inode.
    pub fn view(&self, ino: Ino) -> Option<InodeView> {
        let i = self.inodes.get(&ino)?;
        let nlink = if i.kind == Kind::Dir {
            let path = if ino == ROOT_INO {
                String::new()
            } else {
                self.links.get(&ino).and_then(|s| s.iter().next().cloned()).unwrap_or_default()
            };
            2 + self.children(&path).filter(|p| self.kind_of(p) == Some(Kind::Dir)).count() as u32
        } else {
            self.links.get(&ino).map_or(0, |s| s.len() as u32)
        };
        let (size, sectors) = match i.kind {
            Kind::File => (i.data.len() as u64, sector_hashes(&i.data)),
            Kind::Symlink => (i.target.len() as u64, Vec::new()),
            _ => (0, Vec::new()),
        };
        Some(InodeView {
            kind: i.kind,
            perm: i.perm,
            nlink,
            size,
            sectors: Arc::new(sectors),
            data: Arc::new(if i.kind == Kind::File { i.data.clone() } else { Vec::new() }),
            xattrs: i.xattrs.iter().map(|(k, v)| (k.clone(), hash64(v))).collect(),
            target: i.target.clone(),
        })
    }

    /// The view of the object named `path` as a name entry.
    pub fn name_value(&self, path: &str) -> Option<(Ino, Kind)> {
        let ino = *self.names.get(path)?;
        Some((ino, self.inodes.get(&ino)?.kind))
    }

    /// Apply `op` as the generator predicts it (inode numbers made up).
    pub fn apply_predicted(&mut self, op: &Op) -> Changes {
        let fake = self.next_fake;
        self.next_fake += 1;
        self.apply(op, Some(fake))
    }

    fn parent_changed(&self, path: &str, ch: &mut Changes) {
        let (d, _) = split_path(path);
        if let Some(i) = self.ino_of(d) {
            ch.inos.insert(i);
        }
    }

    fn add_name(&mut self, path: &str, ino: Ino, ch: &mut Changes) {
        self.names.insert(path.to_string(), ino);
        self.links.entry(ino).or_default().insert(path.to_string());
        ch.paths.insert(path.to_string());
        ch.inos.insert(ino);
        self.parent_changed(path, ch);
    }

    fn remove_name(&mut self, path: &str, ch: &mut Changes) -> Option<Ino> {
        let ino = self.names.remove(path)?;
        ch.paths.insert(path.to_string());
        ch.inos.insert(ino);
        self.parent_changed(path, ch);
        let gone = match self.links.get_mut(&ino) {
            Some(s) => {
                s.remove(path);
                s.is_empty()
            }
            None => true,
        };
        if gone {
            self.links.remove(&ino);
            self.inodes.remove(&ino);
        }
        Some(ino)
    }

    /// Apply `op` (which succeeded on the file system; `new_ino` is the inode it created, if
    /// any). Returns what changed. Persistence calls change nothing.
    pub fn apply(&mut self, op: &Op, new_ino: Option<Ino>) -> Changes {
        let mut ch = Changes { implied: self.implied_persistence(op), ..Changes::default() };
        match op {
            Op::Creat { path } | Op::Mkdir { path } | Op::Symlink { path, .. } => {
                let ino = new_ino.unwrap_or(0);
                // ext4's `EXT4_FL_INHERITED` through `ext4_mask_flags`: a directory takes
                // both flags, a regular file `+S` only, a symlink neither.
                let parent = self.ino_of(split_path(path).0).and_then(|d| self.inodes.get(&d));
                let inherited = parent.map_or(0, |d| match op {
                    Op::Mkdir { .. } => d.flags,
                    Op::Creat { .. } => d.flags & EXT4_SYNC_FL,
                    _ => 0,
                });
                let mut node = match op {
                    Op::Creat { .. } => MInode::file(0o644),
                    Op::Mkdir { .. } => MInode::dir(0o755),
                    Op::Symlink { target, .. } => {
                        MInode { target: target.as_bytes().to_vec(), ..MInode::new(Kind::Symlink, 0o777) }
                    }
                    _ => unreachable!("matched above"),
                };
                node.flags = inherited;
                self.inodes.insert(ino, node);
                self.add_name(path, ino, &mut ch);
            }
            Op::Write { path, off, len, seed } | Op::WriteMagic { path, off, len, seed } => {
                if let Some(ino) = self.ino_of(path)
                    && let Some(n) = self.inodes.get_mut(&ino)
                {
                    let end = (off + len) as usize;
                    if n.data.len() < end {
                        n.data.resize(end, 0);
                    }
                    let bytes = match op {
                        Op::WriteMagic { .. } => magic_pattern(*seed, *off, *len),
                        _ => pattern(*seed, *off, *len),
                    };
                    n.data[*off as usize..end].copy_from_slice(&bytes);
                    ch.inos.insert(ino);
                }
            }
            Op::Truncate { path, size } => {
                if let Some(ino) = self.ino_of(path) {
                    // Shrinking to an unaligned size zeroes the rest of the new last block in
                    // place before the size change commits (ext4's truncate does the same):
                    // until then the old size may show those bytes as zeros. No stale data is
                    // exposed, only zeros where the caller asked for the bytes to go.
                    let cut = *size as usize;
                    if let Some(mut v) = self.inodes.get(&ino).filter(|n| n.data.len() > cut).cloned()
                        && !cut.is_multiple_of(4096)
                    {
                        let end = cut.next_multiple_of(4096).min(v.data.len());
                        v.data[cut..end].fill(0);
                        let saved = self.inodes.insert(ino, v);
                        if let Some(view) = self.view(ino) {
                            ch.alt.push((ino, view));
                        }
                        if let Some(orig) = saved {
                            self.inodes.insert(ino, orig);
                        }
                    }
                    if let Some(n) = self.inodes.get_mut(&ino) {
                        n.data.resize(cut, 0);
                        ch.inos.insert(ino);
                    }
                }
            }
            Op::Fallocate { path, mode, off, len } => {
                if let Some(ino) = self.ino_of(path)
                    && let Some(n) = self.inodes.get_mut(&ino)
                {
                    let end = (off + len) as usize;
                    let size = n.data.len();
                    match mode.as_str() {
                        "alloc" | "zero" if end > size => n.data.resize(end, 0),
                        _ => {}
                    }
                    if matches!(mode.as_str(), "punch" | "zero" | "zero_keep_size") {
                        let stop = end.min(n.data.len());
                        let start = (*off as usize).min(stop);
                        n.data[start..stop].fill(0);
                    }
                    ch.inos.insert(ino);
                }
            }
            Op::Link { from, to } => {
                if let Some(ino) = self.ino_of(from) {
                    self.add_name(to, ino, &mut ch);
                }
            }
            Op::Unlink { path } | Op::Rmdir { path } => {
                self.remove_name(path, &mut ch);
            }
            Op::Rename { from, to } => {
                let (Some(src), dst) = (self.ino_of(from), self.ino_of(to)) else { return ch };
                if dst == Some(src) {
                    return ch;
                }
                if dst.is_some() {
                    self.remove_name(to, &mut ch);
                }
                // Move the entry and, for a directory, every path below it.
                let prefix = format!("{from}/");
                let below: Vec<(String, Ino)> = self
                    .names
                    .range(prefix.clone()..)
                    .take_while(|(p, _)| p.starts_with(&prefix))
                    .map(|(p, i)| (p.clone(), *i))
                    .collect();
                self.names.remove(from);
                if let Some(s) = self.links.get_mut(&src) {
                    s.remove(from);
                }
                ch.paths.insert(from.clone());
                self.parent_changed(from, &mut ch);
                self.add_name(to, src, &mut ch);
                for (p, i) in below {
                    let np = format!("{to}/{}", &p[prefix.len()..]);
                    self.names.remove(&p);
                    if let Some(s) = self.links.get_mut(&i) {
                        s.remove(&p);
                        s.insert(np.clone());
                    }
                    self.names.insert(np.clone(), i);
                    ch.paths.insert(p);
                    ch.paths.insert(np);
                    ch.inos.insert(i);
                }
            }
            Op::SetXattr { path, name, len, seed } => {
                if let Some(ino) = self.ino_of(path)
                    && let Some(n) = self.inodes.get_mut(&ino)
                {
                    n.xattrs.insert(name.clone(), pattern(*seed, 0, u64::from(*len)));
                    ch.inos.insert(ino);
                }
            }
            Op::RemoveXattr { path, name } => {
                if let Some(ino) = self.ino_of(path)
                    && let Some(n) = self.inodes.get_mut(&ino)
                {
                    n.xattrs.remove(name);
                    ch.inos.insert(ino);
                }
            }
            Op::SetSyncFlags { path, dirsync, sync } => {
                if let Some(ino) = self.ino_of(path)
                    && let Some(n) = self.inodes.get_mut(&ino)
                {
                    // Flags the kind cannot carry are dropped, as `Fs::set_flags` does.
                    n.flags = match n.kind {
                        Kind::Dir if *dirsync => EXT4_DIRSYNC_FL,
                        _ => 0,
                    } | match n.kind {
                        Kind::Dir | Kind::File if *sync => EXT4_SYNC_FL,
                        _ => 0,
                    };
                }
            }
            // The data mode is not part of the logical state.
            // The model keeps no owners (a chown's effect is checked by e2fsck's quota count).
            Op::SetJournalData { .. }
            | Op::Chown { .. }
            | Op::Fsync { .. }
            | Op::Fdatasync { .. }
            | Op::Sync
            | Op::Unmount => {}
        }
        ch
    }

    /// The persistence calls `op`'s return amounts to under synchronous updates (before
    /// `op` is applied; every path named holds in the state after it), claiming no more
    /// than ext4 promises:
    ///
    /// * a directory operation in a `+D` or `+S` directory (ext4's `IS_DIRSYNC`: creat,
    ///   mkdir, symlink, link, unlink, rmdir, rename, where a rename is synchronous if
    ///   either parent is): `ext4_handle_sync` commits the transaction holding it, so at
    ///   least an fsync of the parent, of both parents for a rename;
    /// * a write to a `+S` file: `generic_write_sync`, an fdatasync of it;
    /// * a truncate of a `+S` file: `ext4_setattr`'s `ext4_handle_sync`, an fsync of it;
    /// * a `chattr` of an inode that was `+S` before (`ext4_ioctl_setflags` checks
    ///   `IS_SYNC` before changing the flags): an fsync of it.
    fn implied_persistence(&self, op: &Op) -> Vec<Op> {
        let parent = |p: &str| split_path(p).0.to_string();
        let fsync = |p: String| Op::Fsync { path: p };
        match op {
            Op::Creat { path }
            | Op::Mkdir { path }
            | Op::Symlink { path, .. }
            | Op::Unlink { path }
            | Op::Rmdir { path }
            | Op::Link { to: path, .. } => {
                let d = parent(path);
                if self.dirsync(&d) { vec![fsync(d)] } else { Vec::new() }
            }
            Op::Rename { from, to } => {
                let (a, b) = (parent(from), parent(to));
                if !self.dirsync(&a) && !self.dirsync(&b) {
                    Vec::new()
                } else if a == b {
                    vec![fsync(a)]
                } else {
                    vec![fsync(a), fsync(b)]
                }
            }
            Op::Write { path, .. } | Op::WriteMagic { path, .. } if self.sync(path) => {
                vec![Op::Fdatasync { path: path.clone() }]
            }
            Op::Truncate { path, .. } | Op::SetSyncFlags { path, .. } if self.sync(path) => {
                vec![fsync(path.clone())]
            }
            _ => Vec::new(),
        }
    }
}

impl MInode {
    fn new(kind: Kind, perm: u16) -> MInode {
        MInode { kind, perm, data: Vec::new(), xattrs: BTreeMap::new(), target: Vec::new(), flags: 0 }
    }
    fn dir(perm: u16) -> MInode {
        MInode::new(Kind::Dir, perm)
    }
    fn file(perm: u16) -> MInode {
        MInode::new(Kind::File, perm)
    }
}

// ---------------------------------------------------------------------------------------
// History and guarantees
// ---------------------------------------------------------------------------------------

/// Apply the operations of one round (run concurrently, one thread each; `round` pairs each
/// with the inode it created, if any) to `model` and `history` in an order that could have
/// happened, and return that order (indexes into `round`), which is the model order.
///
/// Operations of one round touch disjoint files, so every order gives the same names and
/// contents, except for inode numbers: a creation may get the number of an inode that
/// another operation of the same round freed (an unlink, an rmdir, a rename over a file),
/// and then the free really came first. Applying the creation first would graft the new
/// file onto the still-live old inode, so the history would show one inode "linked in every
/// state" across both operations, and a crash after the free committed but before the
/// creation did (a state the file system may legitimately be in) would look like a lost
/// file. So the operations are applied in thread order, except that a creation waits until
/// the inode number it got is free in the model.
///
/// Fails if a creation got the number of an inode that is live and that no operation of the
/// round frees: two live inodes sharing a number, a file system bug.
pub fn apply_round(
    model: &mut Model,
    history: &mut History,
    round: &[(&Op, Option<Ino>)],
) -> Result<Vec<usize>, String> {
    // One round's operations all run at once: none returned before another started.
    apply_ordered(model, history, round, &vec![None; round.len()], &vec![(0, 0); round.len()])
}

/// [`apply_round`] for operations that are not all concurrent: `after[j]` is an operation
/// that must be applied before `j` (the previous operation of `j`'s thread), and `spans[j]`
/// the log positions at which `j` started and returned: an operation that returned before
/// `j` started (`spans[o].1 < spans[j].0`) is applied before `j` too. Operations are
/// otherwise applied in the order given, a creation waiting until its inode number is free.
///
/// The order given (start order, for a free-running workload) can put two creations that got
/// one inode number the wrong way round: a creation that started first may have been given
/// the number only after a later-starting one had taken it and its thread had freed it again.
/// Applied first, it would hold the number while the other waits for it forever. So when a
/// creation is next and another pending creation got the same number, both choices are
/// tried: apply it now, or let it wait until another creation of that number is applied.
/// Inode numbers alone may allow an order that cannot have happened (the later-starting
/// creation's thread freeing the number only after the crash point): the log positions rule
/// it out, or a persistence call's durable state would land on the wrong side of writes.
/// On an error `model` and `history` are left empty (the workload is abandoned).
pub fn apply_ordered(
    model: &mut Model,
    history: &mut History,
    round: &[(&Op, Option<Ino>)],
    after: &[Option<usize>],
    spans: &[(usize, usize)],
) -> Result<Vec<usize>, String> {
    let mut search = Search { round, after, spans, branches: 0 };
    let start = Step {
        pending: (0..round.len()).collect(),
        applied: vec![false; round.len()],
        order: Vec::with_capacity(round.len()),
        created: HashMap::new(),
        waits: Vec::new(),
    };
    // Taken, not cloned: the search clones only where it branches. On an error the caller
    // abandons the workload, so the two are left empty.
    let (m, h, order) = search.run(std::mem::take(model), std::mem::take(history), start)?;
    *model = m;
    *history = h;
    Ok(order)
}

/// Choices at most tried by [`apply_ordered`] before it reports the first dead end.
const ORDER_BRANCHES: usize = 4096;

/// The fixed part of [`apply_ordered`]'s search.
struct Search<'a, 'o> {
    round: &'a [(&'o Op, Option<Ino>)],
    after: &'a [Option<usize>],
    spans: &'a [(usize, usize)],
    branches: usize,
}

/// Where [`apply_ordered`]'s search stands.
#[derive(Clone)]
struct Step {
    pending: Vec<usize>,
    applied: Vec<bool>,
    order: Vec<usize>,
    /// Creations applied so far, per inode number.
    created: HashMap<Ino, usize>,
    /// Creations told to wait for another creation of their number: (operation, the count
    /// in `created` when it was told).
    waits: Vec<(usize, usize)>,
}

impl Search<'_, '_> {
    fn run(
        &mut self,
        mut model: Model,
        mut history: History,
        mut st: Step,
    ) -> Result<(Model, History, Vec<usize>), String> {
        while !st.pending.is_empty() {
            // No operation may go before one that returned before it started.
            let first_end = st.pending.iter().map(|&o| self.spans[o].1).min().unwrap_or(usize::MAX);
            let ready = st.pending.iter().position(|&j| {
                self.spans[j].0 <= first_end
                    && self.after[j].is_none_or(|a| st.applied[a])
                    && self.round[j].1.is_none_or(|ino| {
                        !model.inodes.contains_key(&ino)
                            && !st
                                .waits
                                .iter()
                                .any(|&(w, c)| w == j && st.created.get(&ino).copied().unwrap_or(0) == c)
                    })
            });
            let Some(k) = ready else {
                let j = st.pending[0];
                let ino = self.round[j].1.unwrap_or(0);
                return Err(format!(
                    "`{}` created inode {ino}, which is still live as {:?}",
                    self.round[j].0.describe(),
                    model.names_of(ino)
                ));
            };
            let j = st.pending[k];
            let (op, ino) = self.round[j];
            let rival = ino.is_some_and(|n| st.pending.iter().any(|&o| o != j && self.round[o].1 == Some(n)));
            if rival && self.branches < ORDER_BRANCHES {
                self.branches += 1;
                let mut tried = st.clone();
                let (mut m2, mut h2) = (model.clone(), history.clone());
                Self::apply(&mut m2, &mut h2, &mut tried, k, op, ino);
                match self.run(m2, h2, tried) {
                    Ok(done) => return Ok(done),
                    Err(_) => {
                        let n = ino.unwrap_or(0);
                        st.waits.push((j, st.created.get(&n).copied().unwrap_or(0)));
                        continue;
                    }
                }
            }
            Self::apply(&mut model, &mut history, &mut st, k, op, ino);
        }
        Ok((model, history, st.order))
    }

    fn apply(model: &mut Model, history: &mut History, st: &mut Step, k: usize, op: &Op, ino: Option<Ino>) {
        let j = st.pending.remove(k);
        let ch = model.apply(op, ino);
        history.push(op, model, &ch);
        if let Some(n) = ino {
            *st.created.entry(n).or_insert(0) += 1;
        }
        st.applied[j] = true;
        st.order.push(j);
    }
}

/// Values one key took: `(state, value)`, increasing states; the first entry is state 0.
type Timeline<V> = Vec<(u32, V)>;

fn window<V>(t: &Timeline<V>, lo: u32, hi: u32) -> impl Iterator<Item = &V> {
    // The value at `lo` is the last entry with state <= lo.
    let first = t.iter().rposition(|(s, _)| *s <= lo).unwrap_or(0);
    t[first..].iter().take_while(move |(s, _)| *s <= hi).map(|(_, v)| v)
}

/// What one returned persistence call made durable (see the module docs).
#[derive(Debug, Clone)]
pub struct Guarantee {
    /// The durable state (operation index + 1).
    pub state: u32,
    /// Everything (sync, unmount).
    pub global: bool,
    /// The fsynced inode.
    pub ino: Option<Ino>,
    /// Only size and content (fdatasync).
    pub data_only: bool,
    /// Paths whose entries became durable.
    pub paths: Vec<String>,
    /// Directory whose entries became durable (fsync of a directory).
    pub dir: Option<String>,
}

/// The model's history over a recorded workload.
#[derive(Debug, Default, Clone)]
pub struct History {
    names: HashMap<String, Timeline<Option<(Ino, Kind)>>>,
    inodes: HashMap<Ino, Timeline<Option<InodeView>>>,
    /// Per operation: the guarantees it creates when it returns (persistence calls, and
    /// operations that synchronous updates make durable: [`Changes::implied`]).
    pub guarantees: Vec<Vec<Guarantee>>,
    /// Number of states recorded (operations + 1).
    pub states: u32,
    /// Every path ever seen, by parent directory path.
    children: HashMap<String, BTreeSet<String>>,
}

impl History {
    /// Start a history at state 0 = `m`.
    pub fn new(m: &Model) -> History {
        let mut h = History { states: 1, ..History::default() };
        for p in m.names.keys() {
            h.names.insert(p.clone(), vec![(0, m.name_value(p))]);
            h.note_child(p);
        }
        for &ino in m.inodes.keys() {
            h.inodes.insert(ino, vec![(0, m.view(ino))]);
        }
        h
    }

    fn note_child(&mut self, p: &str) {
        self.children.entry(split_path(p).0.to_string()).or_default().insert(p.to_string());
    }

    /// Record operation `op` (index `states - 1`) which turned the model into `m` with
    /// `changes`. `before` is the model before it (to resolve persistence targets).
    pub fn push(&mut self, op: &Op, m: &Model, changes: &Changes) {
        let state = self.states;
        for p in &changes.paths {
            let v = m.name_value(p);
            let t = self.names.entry(p.clone()).or_insert_with(|| vec![(0, None)]);
            if t.last().is_none_or(|(_, last)| *last != v) {
                t.push((state, v));
            }
            self.note_child(p);
        }
        for (ino, v) in &changes.alt {
            let t = self.inodes.entry(*ino).or_insert_with(|| vec![(0, None)]);
            t.push((state, Some(v.clone())));
        }
        for &ino in &changes.inos {
            let v = m.view(ino);
            let t = self.inodes.entry(ino).or_insert_with(|| vec![(0, None)]);
            if t.last().is_none_or(|(_, last)| *last != v) {
                t.push((state, v));
            }
        }
        let mut gs: Vec<Guarantee> = match op {
            Op::Sync | Op::Unmount => {
                vec![Guarantee { state, global: true, ino: None, data_only: false, paths: vec![], dir: None }]
            }
            Op::Fsync { .. } | Op::Fdatasync { .. } => vec![Self::file_guarantee(op, m, state)],
            _ => Vec::new(),
        };
        gs.extend(changes.implied.iter().map(|p| Self::file_guarantee(p, m, state)));
        self.guarantees.push(gs);
        self.states += 1;
    }

    /// What the fsync or fdatasync `op` makes durable when it returns in state `state`,
    /// which `m` is (see the module docs).
    fn file_guarantee(op: &Op, m: &Model, state: u32) -> Guarantee {
        let (Op::Fsync { path } | Op::Fdatasync { path }) = op else {
            unreachable!("not an fsync: {}", op.describe())
        };
        let data_only = matches!(op, Op::Fdatasync { .. });
        let ino = m.ino_of(path);
        let mut paths = BTreeSet::new();
        if !data_only && let Some(i) = ino {
            for n in m.names_of(i) {
                let mut p = n.as_str();
                loop {
                    paths.insert(p.to_string());
                    let (d, _) = split_path(p);
                    if d.is_empty() {
                        break;
                    }
                    p = d;
                }
            }
            // A directory's ancestors too (its own name is among names_of).
        }
        let dir = (!data_only && m.kind_of(path) == Some(Kind::Dir)).then(|| path.clone());
        Guarantee { state, global: false, ino, data_only, paths: paths.into_iter().collect(), dir }
    }

    /// Compare a recovered logical state with the model for a crash where operations
    /// `0..started` had started and the persistence calls in `returned` (operation indexes)
    /// had returned. Returns the violations found (empty = consistent).
    pub fn check(&self, r: &LogicalState, started: u32, returned: &[usize]) -> Vec<String> {
        let hi = started;
        let mut global_lo = 0u32;
        let mut name_lo: HashMap<&str, u32> = HashMap::new();
        let mut meta_lo: HashMap<Ino, u32> = HashMap::new();
        let mut data_lo: HashMap<Ino, u32> = HashMap::new();
        let mut must_exist: BTreeMap<Ino, u32> = BTreeMap::new();
        for g in returned.iter().filter_map(|&i| self.guarantees.get(i)).flatten() {
            if g.global {
                global_lo = global_lo.max(g.state);
                continue;
            }
            if let Some(ino) = g.ino {
                let e = data_lo.entry(ino).or_default();
                *e = (*e).max(g.state);
                must_exist.insert(ino, g.state);
                if !g.data_only {
                    let e = meta_lo.entry(ino).or_default();
                    *e = (*e).max(g.state);
                }
            }
            for p in &g.paths {
                let e = name_lo.entry(p.as_str()).or_default();
                *e = (*e).max(g.state);
            }
            if let Some(d) = &g.dir
                && let Some(kids) = self.children.get(d)
            {
                for p in kids {
                    let e = name_lo.entry(p.as_str()).or_default();
                    *e = (*e).max(g.state);
                }
            }
        }
        let mut out = Vec::new();
        let lo_name = |p: &str| name_lo.get(p).copied().unwrap_or(0).max(global_lo).min(hi);
        let lo_meta = |i: Ino| meta_lo.get(&i).copied().unwrap_or(0).max(global_lo).min(hi);
        let lo_data = |i: Ino| data_lo.get(&i).copied().unwrap_or(0).max(lo_meta(i)).min(hi);

        // Names.
        let none_tl: Timeline<Option<(Ino, Kind)>> = vec![(0, None)];
        let paths: BTreeSet<&String> = self.names.keys().chain(r.names.keys()).collect();
        for p in paths {
            let t = self.names.get(p).unwrap_or(&none_tl);
            let lo = lo_name(p);
            let found = r.names.get(p).copied();
            let allowed: Vec<Option<(Ino, Kind)>> = window(t, lo, hi).copied().collect();
            if !allowed.contains(&found) {
                let exp: Vec<String> = allowed.iter().map(|v| fmt_name(*v)).collect();
                out.push(format!(
                    "path {p}: found {}, expected {} (durable from state {lo}, operations up to {hi} started)",
                    fmt_name(found),
                    exp.join(" or ")
                ));
            }
        }

        // Inodes.
        let mut name_count: HashMap<Ino, u32> = HashMap::new();
        for (ino, _) in r.names.values() {
            *name_count.entry(*ino).or_default() += 1;
        }
        let none_it: Timeline<Option<InodeView>> = vec![(0, None)];
        for (&ino, v) in &r.inodes {
            let t = self.inodes.get(&ino).unwrap_or(&none_it);
            let (lm, ld) = (lo_meta(ino), lo_data(ino));
            let metas: Vec<&InodeView> = window(t, lm, hi).flatten().collect();
            let datas: Vec<&InodeView> = window(t, ld, hi).flatten().collect();
            if metas.is_empty() || datas.is_empty() {
                out.push(format!(
                    "inode {ino}: reachable, but it is not live in any allowed state ({lm}..={hi})"
                ));
                continue;
            }
            let field = |name: &str, ok: bool, found: String, exp: Vec<String>, lo: u32| {
                if ok {
                    None
                } else {
                    let mut exp = exp;
                    exp.dedup();
                    Some(format!(
                        "inode {ino}: {name} {found}, expected {} (durable from state {lo})",
                        exp.join(" or ")
                    ))
                }
            };
            out.extend(field(
                "kind",
                metas.iter().any(|m| m.kind == v.kind),
                format!("{:?}", v.kind),
                metas.iter().map(|m| format!("{:?}", m.kind)).collect(),
                lm,
            ));
            if v.kind != Kind::Dir || ino != ROOT_INO {
                out.extend(field(
                    "mode",
                    metas.iter().any(|m| m.perm == v.perm),
                    format!("{:o}", v.perm),
                    metas.iter().map(|m| format!("{:o}", m.perm)).collect(),
                    lm,
                ));
            }
            out.extend(field(
                "nlink",
                metas.iter().any(|m| m.nlink == v.nlink),
                v.nlink.to_string(),
                metas.iter().map(|m| m.nlink.to_string()).collect(),
                lm,
            ));
            out.extend(field(
                "symlink target",
                metas.iter().any(|m| m.target == v.target),
                format!("{:?}", String::from_utf8_lossy(&v.target)),
                metas.iter().map(|m| format!("{:?}", String::from_utf8_lossy(&m.target))).collect(),
                lm,
            ));
            let xnames: BTreeSet<&String> =
                v.xattrs.keys().chain(metas.iter().flat_map(|m| m.xattrs.keys())).collect();
            for xn in xnames {
                let f = v.xattrs.get(xn);
                if !metas.iter().any(|m| m.xattrs.get(xn) == f) {
                    out.push(format!(
                        "inode {ino}: xattr {xn} {}, not a value it had in states {lm}..={hi}",
                        if f.is_some() { "present with a value" } else { "missing" }
                    ));
                }
            }
            if v.kind == Kind::File {
                out.extend(field(
                    "size",
                    datas.iter().any(|m| m.size == v.size),
                    v.size.to_string(),
                    datas.iter().map(|m| m.size.to_string()).collect(),
                    ld,
                ));
                // Sector by sector, each candidate state's bytes cut at the recovered size (an
                // in-place overwrite may reach the medium while the size stays old).
                let mut bad = Vec::new();
                let rsize = v.data.len();
                for k in 0..rsize.div_ceil(SECTOR) {
                    let (start, end) = (k * SECTOR, ((k + 1) * SECTOR).min(rsize));
                    let got = &v.data[start..end];
                    let ok = datas.iter().any(|m| {
                        if m.size <= start as u64 {
                            return false;
                        }
                        if m.sectors.get(k) == v.sectors.get(k) {
                            return true;
                        }
                        let have = &m.data[start.min(m.data.len())..end.min(m.data.len())];
                        got.starts_with(have) && got[have.len()..].iter().all(|&b| b == 0)
                    });
                    if !ok {
                        bad.push(k);
                    }
                }
                if !bad.is_empty() {
                    // Name the newest older state the first bad sector holds (a stale replay).
                    let k = bad[0];
                    let stale = t
                        .iter()
                        .rev()
                        .filter(|(s, _)| *s < ld)
                        .find(|(_, m)| m.as_ref().is_some_and(|m| m.sectors.get(k) == v.sectors.get(k)))
                        .map_or(String::new(), |(s, _)| format!("; it holds state {s}'s bytes"));
                    out.push(format!(
                        "inode {ino}: content of {} sector(s) (first at byte {}) matches no allowed state \
                         (durable from state {ld}{stale})",
                        bad.len(),
                        k * SECTOR
                    ));
                }
                let maxlink = metas.iter().map(|m| m.nlink).max().unwrap_or(0);
                let n = name_count.get(&ino).copied().unwrap_or(0);
                if n > maxlink {
                    out.push(format!(
                        "inode {ino}: reachable under {n} names, but it never had more than {maxlink} links"
                    ));
                }
            }
        }
        // Never neither / durable inodes reachable.
        for (&ino, t) in &self.inodes {
            if r.inodes.contains_key(&ino) {
                continue;
            }
            let lo = lo_meta(ino);
            let always = window(t, lo, hi).all(|v| v.as_ref().is_some_and(|v| v.nlink > 0));
            if always {
                out.push(format!(
                    "inode {ino}: unreachable, but it is linked in every allowed state ({lo}..={hi})"
                ));
            } else if let Some(&s) = must_exist.get(&ino)
                && s <= hi
                && window(t, s, hi).all(|v| v.is_some())
            {
                out.push(format!("inode {ino}: unreachable after fsync/fdatasync at state {s}"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_model() -> (Model, History) {
        let mut m = Model::empty_fs();
        let ch = m.apply(&Op::Creat { path: "a".into() }, Some(12));
        let mut h = History::new(&Model::empty_fs());
        h.push(&Op::Creat { path: "a".into() }, &m, &ch);
        h.push(&Op::Sync, &m, &Changes::default());
        let ch = m.apply(&Op::Rename { from: "a".into(), to: "b".into() }, None);
        h.push(&Op::Rename { from: "a".into(), to: "b".into() }, &m, &ch);
        (m, h)
    }

    fn state(m: &Model, names: &[&str]) -> LogicalState {
        let mut st = LogicalState::default();
        for &ino in m.inodes.keys() {
            if let Some(v) = m.view(ino) {
                st.inodes.insert(ino, v);
            }
        }
        for n in names {
            st.names.insert(n.to_string(), (12, Kind::File));
        }
        st.names.insert("lost+found".into(), (11, Kind::Dir));
        st
    }

    #[test]
    fn rename_is_old_or_new_never_both_or_neither() {
        let (m, h) = file_model();
        // Crash after the sync (op 1 returned), rename (op 2) started.
        let ok_old = h.check(&state(&m, &["a"]), 3, &[1]);
        let ok_new = h.check(&state(&m, &["b"]), 3, &[1]);
        assert!(ok_old.is_empty(), "{ok_old:?}");
        assert!(ok_new.is_empty(), "{ok_new:?}");
        let both = h.check(&state(&m, &["a", "b"]), 3, &[1]);
        assert!(!both.is_empty(), "both names must be a violation");
        let mut neither = state(&m, &[]);
        neither.inodes.remove(&12);
        assert!(!h.check(&neither, 3, &[1]).is_empty(), "losing the file must be a violation");
        // Before the sync returned, the creation itself may be lost.
        assert!(h.check(&neither, 1, &[]).is_empty());
    }

    /// `chattr +D` and `+S`: flags inherited as ext4 does, directory operations in a marked
    /// directory durable when they return (an fsync of the parent, of both parents for a
    /// rename), `+S` writes an fdatasync, nothing in a plain directory.
    #[test]
    fn synchronous_updates_are_persistence_calls() {
        let mut m = Model::empty_fs();
        let mut h = History::new(&m);
        let mut run = |m: &mut Model, op: Op, ino: Option<Ino>| {
            let ch = m.apply(&op, ino);
            h.push(&op, m, &ch);
            ch.implied
        };
        assert!(run(&mut m, Op::Mkdir { path: "D".into() }, Some(12)).is_empty());
        assert!(run(&mut m, Op::Mkdir { path: "P".into() }, Some(13)).is_empty());
        let set = Op::SetSyncFlags { path: "D".into(), dirsync: true, sync: true };
        assert!(run(&mut m, set.clone(), None).is_empty(), "not +S before: no persistence");
        let fsync = |p: &str| Op::Fsync { path: p.into() };
        assert_eq!(run(&mut m, Op::Creat { path: "D/f".into() }, Some(14)), [fsync("D")]);
        assert_eq!(run(&mut m, Op::Mkdir { path: "D/s".into() }, Some(15)), [fsync("D")]);
        assert_eq!(m.inodes[&14].flags, EXT4_SYNC_FL, "a file takes +S, not +D");
        assert_eq!(m.inodes[&15].flags, EXT4_SYNC_FL | EXT4_DIRSYNC_FL);
        let w = Op::Write { path: "D/f".into(), off: 0, len: 100, seed: 1 };
        assert_eq!(run(&mut m, w, None), [Op::Fdatasync { path: "D/f".into() }]);
        assert!(run(&mut m, Op::Creat { path: "P/x".into() }, Some(16)).is_empty());
        let mv = Op::Rename { from: "P/x".into(), to: "D/s/x".into() };
        assert_eq!(run(&mut m, mv, None), [fsync("P"), fsync("D/s")]);
        assert_eq!(run(&mut m, set, None), [fsync("D")], "+S before: an fsync");
        // Crash with every operation started: once the rename (op 7) returned, D/s/x is
        // there and P/x gone; before, either.
        let moved = logical(&m);
        let mut back = moved.clone();
        back.names.remove("D/s/x");
        back.names.insert("P/x".into(), (16, Kind::File));
        assert!(h.check(&moved, 9, &[7]).is_empty());
        assert!(h.check(&back, 9, &[]).is_empty());
        let probs = h.check(&back, 9, &[7]);
        assert!(probs.iter().any(|p| p.contains("path D/s/x")), "{probs:?}");
        assert!(probs.iter().any(|p| p.contains("path P/x")), "{probs:?}");
        // The creation in the plain directory P (op 6) promised nothing on its own.
        let mut lost = back.clone();
        lost.names.remove("P/x");
        lost.inodes.remove(&16);
        assert!(h.check(&lost, 7, &[3, 4, 5]).is_empty());
        // The creation in D (op 3) did.
        let mut gone = lost.clone();
        gone.names.remove("D/f");
        gone.inodes.remove(&14);
        assert!(!h.check(&gone, 7, &[3]).is_empty());
        assert!(h.check(&gone, 7, &[]).is_empty());
    }

    /// The logical state a model describes.
    fn logical(m: &Model) -> LogicalState {
        let mut st = LogicalState::default();
        for (p, &ino) in &m.names {
            st.names.insert(p.clone(), (ino, m.inodes[&ino].kind));
        }
        for &ino in m.inodes.keys() {
            st.inodes.extend(m.view(ino).map(|v| (ino, v)));
        }
        st
    }

    /// Free-running threads: a creation that started first got its inode number last,
    /// after another thread had created a file with that number and removed it again. The
    /// start order cannot be applied as it is (the first creation would hold the number the
    /// second one needs); the order that happened can, and is found.
    #[test]
    fn a_creation_that_started_first_may_take_a_number_freed_after_it_started() {
        let mut m = Model::empty_fs();
        m.apply(&Op::Mkdir { path: "t1".into() }, Some(12));
        m.apply(&Op::Mkdir { path: "t6".into() }, Some(13));
        let mut h = History::new(&m);
        let slow = Op::Creat { path: "t6/f0".into() };
        let quick = Op::Creat { path: "t1/f0".into() };
        let gone = Op::Unlink { path: "t1/f0".into() };
        // Start order: the slow creation, then the other thread's creation and unlink.
        let ops = [(&slow, Some(24)), (&quick, Some(24)), (&gone, None)];
        let order =
            apply_ordered(&mut m, &mut h, &ops, &[None, None, Some(1)], &[(0, 9), (1, 2), (3, 4)]).unwrap();
        assert_eq!(order, [1, 2, 0]);
        assert_eq!(m.names_of(24), vec!["t6/f0".to_string()]);
        // Two live files given one number stay an error.
        let mut m2 = Model::empty_fs();
        m2.apply(&Op::Mkdir { path: "t1".into() }, Some(12));
        m2.apply(&Op::Mkdir { path: "t6".into() }, Some(13));
        let ops = [(&slow, Some(24)), (&quick, Some(24))];
        let spans = [(0, 9), (1, 2)];
        assert!(apply_ordered(&mut m2.clone(), &mut History::new(&m2), &ops, &[None, None], &spans).is_err());
    }

    /// mt8-002 (seed 1): in one concurrent round, `unlink t4/f0` freed inode 20 (fsynced
    /// before) and `creat t1/f0` got it back. A crash after the unlink committed and before
    /// the creation did loses inode 20, which is correct; applied in thread order (the
    /// creation first) the model merged the two files into one inode "linked in every
    /// state" and reported a lost file.
    #[test]
    fn inode_reused_within_a_round_is_freed_first() {
        let mut m = Model::empty_fs();
        m.apply(&Op::Mkdir { path: "t1".into() }, Some(12));
        m.apply(&Op::Mkdir { path: "t4".into() }, Some(13));
        m.apply(&Op::Creat { path: "t4/f0".into() }, Some(20));
        m.apply(&Op::Write { path: "t4/f0".into(), off: 0, len: 6000, seed: 7 }, None);
        let mut h = History::new(&m);
        let fsync = Op::Fsync { path: "t4/f0".into() };
        apply_round(&mut m, &mut h, &[(&fsync, None)]).unwrap();
        let mut after_unlink = m.clone();
        after_unlink.apply(&Op::Unlink { path: "t4/f0".into() }, None);
        let crashed = logical(&after_unlink);
        let before = logical(&m);

        // A creation that got a live inode number nothing in its round frees is an error.
        let creat = Op::Creat { path: "t1/f0".into() };
        assert!(apply_round(&mut m.clone(), &mut History::new(&m), &[(&creat, Some(20))]).is_err());

        let unlink = Op::Unlink { path: "t4/f0".into() };
        let order = apply_round(&mut m, &mut h, &[(&creat, Some(20)), (&unlink, None)]).unwrap();
        assert_eq!(order, [1, 0], "the unlink that freed inode 20 comes first");
        // Every operation started, the fsync returned: the unlink committed, the creation
        // did not.
        let probs = h.check(&crashed, 3, &[0]);
        assert!(probs.is_empty(), "{probs:?}");
        // Both committed, or neither.
        assert!(h.check(&logical(&m), 3, &[0]).is_empty());
        assert!(h.check(&before, 3, &[0]).is_empty());
        // But the fsynced file may not vanish while the unlink has not started.
        let probs = h.check(&crashed, 1, &[0]);
        assert!(probs.iter().any(|p| p.contains("inode 20: unreachable")), "{probs:?}");
    }

    /// mtfree8-007 (zjournal, seed 1): `creat t6/f0` got inode 26, was fdatasynced and
    /// unlinked; `creat t7/f0`, which had started first, then got 26 back, and t7/f0 was
    /// written and fsynced. The search also found an order in which t7/f0 holds 26 first,
    /// until t7's last operation unlinks it, and t6's file gets it after: inode numbers allow
    /// that, but the unlink started after the crash point, long after t6's fdatasync had
    /// returned. That fdatasync's durable state then came after t7/f0's write, and a crash
    /// image holding the write was reported as a violation. An operation that returned
    /// before another started comes first.
    #[test]
    fn an_operation_that_returned_before_another_started_comes_first() {
        use super::super::record::{OpMark, OpResult, Recording, assemble};
        use super::super::workloads::Workload;
        let mut base = Model::empty_fs();
        base.apply(&Op::Mkdir { path: "t6".into() }, Some(13));
        base.apply(&Op::Mkdir { path: "t7".into() }, Some(14));
        let (f6, f7) = (String::from("t6/f0"), String::from("t7/f0"));
        let write = Op::Write { path: f7.clone(), off: 0, len: 6000, seed: 72 };
        // Thread t6 | thread t7, with the log positions at which each started and returned.
        let rows = [
            (
                (Op::Creat { path: f6.clone() }, Some(26), 48, 48),
                (Op::Creat { path: f7.clone() }, Some(26), 3, 69),
            ),
            ((Op::Fdatasync { path: f6.clone() }, None, 48, 65), (write.clone(), None, 115, 115)),
            (
                (Op::Unlink { path: f6.clone() }, None, 65, 65),
                (Op::Fsync { path: f7.clone() }, None, 115, 141),
            ),
            (
                (Op::Fsync { path: "t6".into() }, None, 65, 102),
                (Op::Unlink { path: f7.clone() }, None, 141, 141),
            ),
        ];
        let result = |ino, start, end| OpResult { ino, mark: OpMark { start, end } };
        let mut rounds = Vec::new();
        let mut results = Vec::new();
        for ((a, ia, sa, ea), (b, ib, sb, eb)) in rows {
            rounds.push(vec![a, b]);
            results.extend([result(ia, sa, ea), result(ib, sb, eb)]);
        }
        results.push(result(None, 160, 222));
        let wl = Workload { name: "reuse".into(), setup: Vec::new(), rounds, free_running: true };
        let (ops, marks, history) = assemble(&wl, base.clone(), &results).unwrap();
        let at = |op: &Op| ops.iter().position(|o| o == op).unwrap();
        assert!(at(&Op::Unlink { path: f6.clone() }) < at(&Op::Creat { path: f7.clone() }), "{ops:?}");
        let rec =
            Recording { base: Arc::default(), log: Vec::new(), results, ops, marks, history, ijournal: None };
        let check =
            |x: usize, st: &LogicalState| rec.history.check(st, rec.started_before(x), &rec.returned_by(x));
        let mut empty = base.clone();
        empty.apply(&Op::Creat { path: f7.clone() }, Some(26));
        let mut written = empty.clone();
        written.apply(&write, None);
        // The crash point of the failure: the write started, its fsync had not returned.
        let probs = check(131, &logical(&written));
        assert!(probs.is_empty(), "{probs:?}");
        assert!(check(131, &logical(&empty)).is_empty());
        // Once that fsync returned (and the unlink had not started) the write must be there.
        assert!(check(141, &logical(&written)).is_empty());
        let probs = check(141, &logical(&empty));
        assert!(probs.iter().any(|p| p.contains("inode 26: size 0")), "{probs:?}");
    }
}
