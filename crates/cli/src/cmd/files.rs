//! The debugfs-like file commands: `ls`, `cat`, `get`, `stat` (read-only mounts) and
//! `put`, `mkdir`, `rm`, `mv`, `ln` (read-write mounts, unmounted cleanly at the end).
//!
//! Paths inside the image are absolute or relative to the root. Intermediate symbolic
//! links are followed; the last component is followed by `cat`, `get` and `put` only.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use cjfs_fs::{Attr, FileType, Fs, FsError, FsResult, Ino, ROOT_INO, RenameFlags, SetAttr, Timestamp};

use crate::error::{CliError, CliResult};
use crate::fmt::{inode_flag_names, lossy, perm_string, timestamp, type_char};
use crate::image::{Ctx, with_ro, with_rw};
use crate::out::Out;

/// Bytes moved per read or write call.
const CHUNK: usize = 1 << 20;
/// Symbolic links followed before giving up (like Linux's `MAXSYMLINKS`).
const MAX_SYMLINKS: u32 = 40;

/// Owner of new files and directories: the invoking user.
fn owner() -> (u32, u32) {
    // SAFETY: getuid and getgid take no arguments, cannot fail and touch no memory of ours.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// Resolve `path`, following symbolic links in intermediate components, and in the last
/// one when `follow_last`.
pub fn walk(fs: &Fs, path: &str, follow_last: bool) -> FsResult<Ino> {
    let mut stack: Vec<Vec<u8>> = components(path.as_bytes());
    let mut cur = ROOT_INO;
    let mut hops = 0;
    while let Some(c) = stack.pop() {
        let a = fs.lookup(cur, &c)?;
        if a.kind == FileType::Symlink && (!stack.is_empty() || follow_last) {
            hops += 1;
            if hops > MAX_SYMLINKS {
                return Err(FsError::Invalid(format!("{path}: too many levels of symbolic links")));
            }
            let target = fs.readlink(a.ino)?;
            if target.first() == Some(&b'/') {
                cur = ROOT_INO;
            }
            stack.extend(components(&target));
        } else {
            if a.kind != FileType::Directory && !stack.is_empty() {
                return Err(FsError::NotDir(lossy(&c)));
            }
            cur = a.ino;
        }
    }
    Ok(cur)
}

/// Path components, reversed (so `pop` yields them in order), without empty ones and `.`.
fn components(p: &[u8]) -> Vec<Vec<u8>> {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").rev().map(<[u8]>::to_vec).collect()
}

/// Split `path` into its parent directory path and final name (which must be a real name).
fn split_parent(path: &str) -> Result<(&str, &str), FsError> {
    let t = path.trim_end_matches('/');
    let (dir, name) = match t.rfind('/') {
        Some(i) => (&t[..i], &t[i + 1..]),
        None => ("", t),
    };
    if name.is_empty() || name == "." || name == ".." {
        return Err(FsError::Invalid(format!("{path:?} does not end in a file name")));
    }
    Ok((dir, name))
}

/// The parent directory inode and final name of `path`.
fn parent_of<'p>(fs: &Fs, path: &'p str) -> FsResult<(Ino, &'p str)> {
    let (dir, name) = split_parent(path)?;
    let d = walk(fs, dir, true)?;
    if fs.getattr(d)?.kind != FileType::Directory {
        return Err(FsError::NotDir(dir.to_string()));
    }
    Ok((d, name))
}

/// The last component of a local or image path.
fn basename(p: &str) -> &str {
    p.trim_end_matches('/').rsplit('/').next().unwrap_or(p)
}

fn ls_line(fs: &Fs, a: &Attr, name: &[u8]) -> FsResult<Vec<u8>> {
    let mut line = format!(
        "{}{} {:>4} {:>6} {:>6} {:>12} {:>9} ",
        type_char(a.kind),
        perm_string(a.perm),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        a.ino
    )
    .into_bytes();
    line.extend_from_slice(name);
    if a.kind == FileType::Symlink {
        line.extend_from_slice(b" -> ");
        line.extend_from_slice(&fs.readlink(a.ino)?);
    }
    line.push(b'\n');
    Ok(line)
}

/// `cjfs ls IMG [PATH] [-l] [-a]`.
pub fn ls(image: &str, ctx: &Ctx, path: &str, long: bool, all: bool) -> CliResult<()> {
    with_ro(image, ctx, |fs| {
        let err = |e| CliError::fs_path(image, path, e);
        let ino = walk(fs, path, false).map_err(err)?;
        let attr = fs.getattr(ino).map_err(err)?;
        let mut out = Out::new();
        if attr.kind != FileType::Directory {
            let name = path.as_bytes();
            if long {
                out.write(&ls_line(fs, &attr, name).map_err(err)?)?;
            } else {
                out.write(name)?;
                out.write(b"\n")?;
            }
            return out.finish();
        }
        let mut ents = fs.readdir_all(ino).map_err(err)?;
        ents.retain(|e| all || (e.name != b"." && e.name != b".."));
        ents.sort_by(|a, b| a.name.cmp(&b.name));
        for e in &ents {
            if long {
                let a = fs.getattr(e.ino).map_err(|x| CliError::fs_path(image, &lossy(&e.name), x))?;
                out.write(&ls_line(fs, &a, &e.name).map_err(err)?)?;
            } else {
                out.write(&e.name)?;
                out.write(b"\n")?;
            }
        }
        out.finish()
    })
}

/// Resolve `path` to a regular file (following symbolic links).
fn regular_file(fs: &Fs, image: &str, path: &str) -> CliResult<Attr> {
    let err = |e| CliError::fs_path(image, path, e);
    let ino = walk(fs, path, true).map_err(err)?;
    let a = fs.getattr(ino).map_err(err)?;
    match a.kind {
        FileType::Regular => Ok(a),
        FileType::Directory => Err(err(FsError::IsDir(path.to_string()))),
        k => Err(CliError::Msg(format!("{image}: {path}: is a {}, not a regular file", k.name()))),
    }
}

/// Copy the contents of file `a` to `sink`.
fn copy_out(
    fs: &Fs,
    image: &str,
    path: &str,
    a: &Attr,
    mut sink: impl FnMut(&[u8]) -> CliResult<()>,
) -> CliResult<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    while off < a.size {
        let want = ((a.size - off) as usize).min(CHUNK);
        let n = fs.read(a.ino, off, &mut buf[..want]).map_err(|e| CliError::fs_path(image, path, e))?;
        if n == 0 {
            break;
        }
        sink(&buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

/// `cjfs cat IMG PATH`.
pub fn cat(image: &str, ctx: &Ctx, path: &str) -> CliResult<()> {
    with_ro(image, ctx, |fs| {
        let a = regular_file(fs, image, path)?;
        let mut out = Out::new();
        copy_out(fs, image, path, &a, |b| out.write(b))?;
        out.finish()
    })
}

/// `cjfs get IMG PATH LOCAL` (`-` for stdout).
pub fn get(image: &str, ctx: &Ctx, path: &str, local: &str) -> CliResult<()> {
    with_ro(image, ctx, |fs| {
        let a = regular_file(fs, image, path)?;
        if local == "-" {
            let mut out = Out::new();
            copy_out(fs, image, path, &a, |b| out.write(b))?;
            return out.finish();
        }
        let f = std::fs::File::create(local).map_err(|e| CliError::io(local, e))?;
        let mut w = std::io::BufWriter::new(f);
        copy_out(fs, image, path, &a, |b| w.write_all(b).map_err(|e| CliError::io(local, e)))?;
        let f = w.into_inner().map_err(|e| CliError::io(local, e.into_error()))?;
        f.sync_all().map_err(|e| CliError::io(local, e))
    })
}

/// Where `put` writes.
struct PutTarget {
    /// Parent directory and name (used to create the file, or to remove it after a failure).
    parent: Ino,
    name: String,
    /// The existing regular file, if any.
    existing: Option<Attr>,
    /// Path shown in messages.
    shown: String,
}

/// Decide where `put` writes and check that the data fits, before anything is written.
fn plan_put(
    fs: &Fs,
    image: &str,
    path: &str,
    local_name: Option<&str>,
    size: Option<u64>,
) -> CliResult<PutTarget> {
    let err = |e| CliError::fs_path(image, path, e);
    let (parent, name, shown) = match walk(fs, path, true) {
        Ok(ino) if fs.getattr(ino).map_err(err)?.kind == FileType::Directory => match local_name {
            Some(n) => (ino, n.to_string(), format!("{}/{n}", path.trim_end_matches('/'))),
            None => return Err(err(FsError::IsDir(path.to_string()))),
        },
        // A trailing slash names a directory (as for cp): it must exist.
        Ok(_) if path.ends_with('/') => return Err(err(FsError::NotDir(path.to_string()))),
        Err(FsError::NotFound(_)) if path.ends_with('/') => {
            return Err(err(FsError::NotFound(format!("{path} (a trailing slash names a directory)"))));
        }
        Ok(_) | Err(FsError::NotFound(_)) => {
            let (p, n) = parent_of(fs, path).map_err(err)?;
            (p, n.to_string(), path.to_string())
        }
        Err(e) => return Err(err(e)),
    };
    let existing = match fs.lookup(parent, name.as_bytes()) {
        Ok(a) => match a.kind {
            FileType::Regular => Some(a),
            FileType::Directory => {
                return Err(CliError::fs_path(image, &shown, FsError::IsDir(shown.clone())));
            }
            FileType::Symlink => {
                // A symbolic link to a regular file is written through.
                let t = walk(fs, &shown, true).and_then(|i| fs.getattr(i)).map_err(err)?;
                if t.kind != FileType::Regular {
                    return Err(CliError::Msg(format!(
                        "{image}: {shown}: is a symbolic link to a {}",
                        t.kind.name()
                    )));
                }
                Some(t)
            }
            k => {
                return Err(CliError::Msg(format!(
                    "{image}: {shown}: exists and is a {}, not a regular file",
                    k.name()
                )));
            }
        },
        Err(FsError::NotFound(_)) => None,
        Err(e) => return Err(err(e)),
    };
    let st = fs.statfs();
    if existing.is_none() && st.ffree == 0 {
        return Err(CliError::fs_path(image, &shown, FsError::NoSpace("no free inodes".into())));
    }
    if let Some(size) = size {
        let need = size.div_ceil(u64::from(st.bsize));
        let freed = existing.as_ref().map_or(0, |a| a.blocks / (u64::from(st.bsize) / 512));
        let free = st.bfree + freed;
        if need > free {
            return Err(CliError::NoSpace { image: image.to_string(), what: shown, need, free });
        }
    }
    Ok(PutTarget { parent, name, existing, shown })
}

/// Fill `buf` from `r` as far as possible; returns the bytes read (short only at EOF).
fn read_full(r: &mut (impl Read + ?Sized), buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Copy `src` into file `ino` from offset 0.
fn copy_in(fs: &Fs, image: &str, t: &PutTarget, ino: Ino, src: &mut dyn Read, local: &str) -> CliResult<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let n = read_full(src, &mut buf).map_err(|e| CliError::io(local, e))?;
        if n == 0 {
            return Ok(());
        }
        let mut done = 0;
        while done < n {
            let w = fs
                .write(ino, off + done as u64, &buf[done..n])
                .map_err(|e| CliError::fs_path(image, &t.shown, e))?;
            if w == 0 {
                return Err(CliError::fs_path(image, &t.shown, FsError::NoSpace("short write".into())));
            }
            done += w;
        }
        off += n as u64;
    }
}

/// The bytes `put` copies, readable once per run (the dry run and the real one).
enum Source {
    /// A local file, opened anew for each run.
    Path(String),
    /// Standard input, spooled to an unlinked temporary file first.
    Spool(std::fs::File),
}

impl Source {
    fn open(&self) -> CliResult<Box<dyn Read>> {
        match self {
            Source::Path(p) => Ok(Box::new(std::fs::File::open(p).map_err(|e| CliError::io(p, e))?)),
            Source::Spool(f) => {
                use std::io::{Seek, SeekFrom};
                let mut f = f.try_clone().map_err(|e| CliError::io("stdin (spooled)", e))?;
                f.seek(SeekFrom::Start(0)).map_err(|e| CliError::io("stdin (spooled)", e))?;
                Ok(Box::new(f))
            }
        }
    }
}

/// Copy standard input into an unlinked file in the temporary directory.
fn spool_stdin() -> CliResult<(std::fs::File, u64)> {
    let path = std::env::temp_dir().join(format!(".cjfs-put-stdin-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| CliError::io(path.display(), e))?;
    let _ = std::fs::remove_file(&path);
    let n = std::io::copy(&mut std::io::stdin().lock(), &mut f).map_err(|e| CliError::io("stdin", e))?;
    Ok((f, n))
}

/// `cjfs put IMG LOCAL PATH` (`-` reads stdin).
pub fn put(image: &str, ctx: &Ctx, local: &str, path: &str) -> CliResult<()> {
    let (src, meta, size) = if local == "-" {
        let (f, n) = spool_stdin()?;
        (Source::Spool(f), None, Some(n))
    } else {
        let m = std::fs::metadata(local).map_err(|e| CliError::io(local, e))?;
        if m.is_dir() {
            return Err(CliError::Msg(format!("{local}: is a directory (put copies one file)")));
        }
        // Only a regular file's size is known in advance (not a pipe or a device).
        let size = m.is_file().then_some(m.len());
        (Source::Path(local.to_string()), Some(m), size)
    };
    let local_name = (local != "-").then(|| basename(local));
    with_rw(
        image,
        ctx,
        |fs| plan_put(fs, image, path, local_name, size),
        |fs, t| {
            let err = |e| CliError::fs_path(image, &t.shown, e);
            let mut src = src.open()?;
            let (uid, gid) = owner();
            let mode = meta.as_ref().map_or(0o644, |m| m.permissions().mode() & 0o7777);
            let ino = match &t.existing {
                Some(a) => {
                    fs.setattr(a.ino, &SetAttr { size: Some(0), ..Default::default() }).map_err(err)?;
                    a.ino
                }
                None => fs.create(t.parent, t.name.as_bytes(), mode, uid, gid).map_err(err)?.ino,
            };
            if let Err(e) = copy_in(fs, image, &t, ino, &mut src, local) {
                // Give the space back: remove what we created, empty what we truncated.
                if t.existing.is_none() {
                    let _ = fs.unlink(t.parent, t.name.as_bytes());
                } else {
                    let _ = fs.setattr(ino, &SetAttr { size: Some(0), ..Default::default() });
                }
                return Err(e);
            }
            if let Some(m) = &meta {
                let mtime = Timestamp::new(m.mtime(), m.mtime_nsec().clamp(0, 999_999_999) as u32);
                fs.setattr(ino, &SetAttr { mtime: Some(mtime), ..Default::default() }).map_err(err)?;
            }
            Ok(())
        },
    )
}

/// `cjfs mkdir IMG PATH [-p]`.
pub fn mkdir(image: &str, ctx: &Ctx, path: &str, parents: bool) -> CliResult<()> {
    let err = |e| CliError::fs_path(image, path, e);
    if parents {
        // Nothing to check up front beyond the path being walkable; done in `op`.
        return with_rw(
            image,
            ctx,
            |_| Ok(()),
            |fs, ()| {
                let (uid, gid) = owner();
                let mut cur = ROOT_INO;
                let mut comps = components(path.as_bytes());
                while let Some(c) = comps.pop() {
                    if c == b".." {
                        cur = fs.lookup(cur, b"..").map_err(err)?.ino;
                        continue;
                    }
                    cur = match fs.lookup(cur, &c) {
                        Ok(a) if a.kind == FileType::Directory => a.ino,
                        Ok(a) if a.kind == FileType::Symlink => {
                            let so_far = walk_prefix(path, &comps);
                            let ino = walk(fs, &so_far, true).map_err(err)?;
                            if fs.getattr(ino).map_err(err)?.kind != FileType::Directory {
                                return Err(err(FsError::NotDir(so_far)));
                            }
                            ino
                        }
                        Ok(_) => return Err(err(FsError::NotDir(lossy(&c)))),
                        Err(FsError::NotFound(_)) => fs.mkdir(cur, &c, 0o755, uid, gid).map_err(err)?.ino,
                        Err(e) => return Err(err(e)),
                    };
                }
                Ok(())
            },
        );
    }
    with_rw(
        image,
        ctx,
        |fs| {
            let (p, name) = parent_of(fs, path).map_err(err)?;
            match fs.lookup(p, name.as_bytes()) {
                Ok(_) => Err(err(FsError::Exists(path.to_string()))),
                Err(FsError::NotFound(_)) => Ok(()),
                Err(e) => Err(err(e)),
            }
        },
        |fs, ()| {
            let (uid, gid) = owner();
            let (p, name) = parent_of(fs, path).map_err(err)?;
            fs.mkdir(p, name.as_bytes(), 0o755, uid, gid).map_err(err)?;
            Ok(())
        },
    )
}

/// The prefix of `path` that has been consumed when `rest` (reversed) remains.
fn walk_prefix(path: &str, rest: &[Vec<u8>]) -> String {
    let all = components(path.as_bytes());
    let taken = all.len() - rest.len();
    let parts: Vec<String> = all.iter().rev().take(taken).map(|c| lossy(c)).collect();
    format!("/{}", parts.join("/"))
}

/// Remove everything inside directory `dir`.
fn remove_tree(fs: &Fs, dir: Ino) -> FsResult<()> {
    for e in fs.readdir_all(dir)? {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        if e.kind == FileType::Directory {
            remove_tree(fs, e.ino)?;
            fs.rmdir(dir, &e.name)?;
        } else {
            fs.unlink(dir, &e.name)?;
        }
    }
    Ok(())
}

/// `cjfs rm IMG PATH [-r]`.
pub fn rm(image: &str, ctx: &Ctx, path: &str, recursive: bool) -> CliResult<()> {
    let err = |e| CliError::fs_path(image, path, e);
    let check = |fs: &Fs| -> CliResult<(Ino, String, Attr)> {
        if components(path.as_bytes()).is_empty() {
            return Err(CliError::Msg(format!("{image}: refusing to remove the root directory")));
        }
        let (p, name) = parent_of(fs, path).map_err(err)?;
        let a = fs.lookup(p, name.as_bytes()).map_err(err)?;
        if a.kind == FileType::Directory && !recursive {
            let n = fs.readdir_all(a.ino).map_err(err)?.len();
            if n > 2 {
                return Err(err(FsError::NotEmpty(format!("{path} (use -r to remove its contents)"))));
            }
        }
        Ok((p, name.to_string(), a))
    };
    with_rw(image, ctx, check, |fs, (p, name, a)| {
        if a.kind == FileType::Directory {
            if recursive {
                remove_tree(fs, a.ino).map_err(err)?;
            }
            fs.rmdir(p, name.as_bytes()).map_err(err)
        } else {
            fs.unlink(p, name.as_bytes()).map_err(err)
        }
    })
}

/// `cjfs mv IMG FROM TO`.
pub fn mv(image: &str, ctx: &Ctx, from: &str, to: &str) -> CliResult<()> {
    let plan = |fs: &Fs| -> CliResult<(Ino, String, Ino, String)> {
        let (fp, fname) = parent_of(fs, from).map_err(|e| CliError::fs_path(image, from, e))?;
        fs.lookup(fp, fname.as_bytes()).map_err(|e| CliError::fs_path(image, from, e))?;
        let terr = |e| CliError::fs_path(image, to, e);
        let (tp, tname) = match walk(fs, to, true) {
            Ok(ino) if fs.getattr(ino).map_err(terr)?.kind == FileType::Directory => (ino, fname.to_string()),
            Ok(_) | Err(FsError::NotFound(_)) => {
                let (p, n) = parent_of(fs, to).map_err(terr)?;
                (p, n.to_string())
            }
            Err(e) => return Err(terr(e)),
        };
        Ok((fp, fname.to_string(), tp, tname))
    };
    with_rw(image, ctx, plan, |fs, (fp, fname, tp, tname)| {
        fs.rename(fp, fname.as_bytes(), tp, tname.as_bytes(), RenameFlags::default())
            .map_err(|e| CliError::fs_path(image, from, e))
    })
}

/// `cjfs ln IMG TARGET LINK [-s]`.
pub fn ln(image: &str, ctx: &Ctx, target: &str, link: &str, symbolic: bool) -> CliResult<()> {
    let plan = |fs: &Fs| -> CliResult<(Option<Ino>, Ino, String)> {
        let lerr = |e| CliError::fs_path(image, link, e);
        let src = if symbolic {
            if target.is_empty() {
                return Err(CliError::Usage("a symbolic link target cannot be empty".into()));
            }
            None
        } else {
            let ino = walk(fs, target, false).map_err(|e| CliError::fs_path(image, target, e))?;
            if fs.getattr(ino).map_err(lerr)?.kind == FileType::Directory {
                return Err(CliError::Msg(format!(
                    "{image}: {target}: hard links to directories are not allowed"
                )));
            }
            Some(ino)
        };
        let (p, name) = match walk(fs, link, true) {
            Ok(ino) if fs.getattr(ino).map_err(lerr)?.kind == FileType::Directory => {
                (ino, basename(target).to_string())
            }
            Ok(_) => return Err(lerr(FsError::Exists(link.to_string()))),
            Err(FsError::NotFound(_)) => {
                let (p, n) = parent_of(fs, link).map_err(lerr)?;
                (p, n.to_string())
            }
            Err(e) => return Err(lerr(e)),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(lerr(FsError::Invalid(format!("no file name for the link in {link:?}"))));
        }
        match fs.lookup(p, name.as_bytes()) {
            Ok(_) => return Err(lerr(FsError::Exists(name))),
            Err(FsError::NotFound(_)) => {}
            Err(e) => return Err(lerr(e)),
        }
        Ok((src, p, name))
    };
    with_rw(image, ctx, plan, |fs, (src, p, name)| {
        let lerr = |e| CliError::fs_path(image, link, e);
        match src {
            Some(ino) => fs.link(ino, p, name.as_bytes()).map_err(lerr)?,
            None => {
                let (uid, gid) = owner();
                fs.symlink(p, name.as_bytes(), target.as_bytes(), uid, gid).map_err(lerr)?
            }
        };
        Ok(())
    })
}

/// `cjfs stat IMG PATH`.
pub fn stat(image: &str, ctx: &Ctx, path: &str) -> CliResult<()> {
    with_ro(image, ctx, |fs| {
        let err = |e| CliError::fs_path(image, path, e);
        let ino = walk(fs, path, false).map_err(err)?;
        let a = fs.getattr(ino).map_err(err)?;
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        if a.kind == FileType::Symlink {
            line(format!("  File: {path} -> {}", lossy(&fs.readlink(ino).map_err(err)?)));
        } else {
            line(format!("  File: {path}"));
        }
        line(format!("  Inode: {}   Type: {}   Generation: {}", a.ino, a.kind.name(), a.generation));
        line(format!(
            "  Mode: {:04o} ({}{})   Links: {}   Uid: {}   Gid: {}",
            a.perm,
            type_char(a.kind),
            perm_string(a.perm),
            a.nlink,
            a.uid,
            a.gid
        ));
        line(format!("  Size: {}   Blocks (512-byte): {}", a.size, a.blocks));
        if matches!(a.kind, FileType::CharDev | FileType::BlockDev) {
            let major = (a.rdev & 0xfff00) >> 8;
            let minor = (a.rdev & 0xff) | ((a.rdev >> 12) & 0xfff00);
            line(format!("  Device: {major},{minor}"));
        }
        let names = inode_flag_names(a.flags);
        line(format!(
            "  Flags: 0x{:08x}{}",
            a.flags,
            if names.is_empty() { String::new() } else { format!(" ({})", names.join(" ")) }
        ));
        line(format!("  Access: {}", timestamp(a.atime)));
        line(format!("  Modify: {}", timestamp(a.mtime)));
        line(format!("  Change: {}", timestamp(a.ctime)));
        line(format!("  Birth:  {}", timestamp(a.crtime)));
        match fs.check_inode(ino) {
            Ok(c) => {
                if !c.extents.is_empty() || !c.tree_blocks.is_empty() {
                    let ext: Vec<String> = c
                        .extents
                        .iter()
                        .map(|m| {
                            let end = u64::from(m.lblk) + u64::from(m.len) - 1;
                            let pend = m.pblk + u64::from(m.len) - 1;
                            let u = if m.unwritten { " [unwritten]" } else { "" };
                            if m.len == 1 {
                                format!("({}):{}{u}", m.lblk, m.pblk)
                            } else {
                                format!("({}-{end}):{}-{pend}{u}", m.lblk, m.pblk)
                            }
                        })
                        .collect();
                    line(format!("  Extents ({}): {}", ext.len(), ext.join(", ")));
                    if !c.tree_blocks.is_empty() {
                        let t: Vec<String> = c.tree_blocks.iter().map(u64::to_string).collect();
                        line(format!("  Extent tree blocks: {}", t.join(", ")));
                    }
                }
                if let Some(b) = c.xattr_block {
                    line(format!("  Xattr block: {b}"));
                }
            }
            Err(e) => line(format!("  Extents: unreadable: {e}")),
        }
        let xs = fs.listxattr(ino).map_err(err)?;
        if !xs.is_empty() {
            line("  Extended attributes:".to_string());
            for n in xs {
                let v = fs.getxattr(ino, &n).map_err(err)?;
                line(format!("    {} ({} bytes)", lossy(&n), v.len()));
            }
        }
        let mut out = Out::new();
        out.write(s.as_bytes())?;
        out.finish()
    })
}
