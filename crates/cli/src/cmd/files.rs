//! The debugfs-like file commands: `ls`, `cat`, `get`, `stat` (read-only mounts) and
//! `put`, `mkdir`, `rm`, `mv`, `ln` (read-write mounts, unmounted cleanly at the end).
//!
//! Paths inside the image are absolute or relative to the root, and are bytes (a name need
//! not be UTF-8; messages show it lossily). Intermediate symbolic links are followed; the
//! last component is followed by `cat`, `get` and `put` only.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;

use cjfs_fs::{Attr, FileType, Fs, FsError, FsResult, Ino, ROOT_INO, RenameFlags, SetAttr, Timestamp};

use crate::error::{CliError, CliResult};
use crate::fmt::{dev_numbers, inode_flag_names, lossy, perm_string, timestamp, type_char};
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
pub fn walk(fs: &Fs, path: &[u8], follow_last: bool) -> FsResult<Ino> {
    let mut stack: Vec<Vec<u8>> = components(path);
    let mut cur = ROOT_INO;
    let mut hops = 0;
    while let Some(c) = stack.pop() {
        let a = fs.lookup(cur, &c)?;
        if a.kind == FileType::Symlink && (!stack.is_empty() || follow_last) {
            hops += 1;
            if hops > MAX_SYMLINKS {
                return Err(FsError::Invalid(format!("{}: too many levels of symbolic links", lossy(path))));
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

/// `p` without trailing slashes.
fn trim_slashes(p: &[u8]) -> &[u8] {
    let end = p.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    &p[..end]
}

/// Split `path` into its parent directory path and final name (which must be a real name).
fn split_parent(path: &[u8]) -> Result<(&[u8], &[u8]), FsError> {
    let t = trim_slashes(path);
    let (dir, name) = match t.iter().rposition(|&b| b == b'/') {
        Some(i) => (&t[..i], &t[i + 1..]),
        None => (&t[..0], t),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Err(FsError::Invalid(format!("{:?} does not end in a file name", lossy(path))));
    }
    Ok((dir, name))
}

/// The parent directory inode and final name of `path`.
fn parent_of<'p>(fs: &Fs, path: &'p [u8]) -> FsResult<(Ino, &'p [u8])> {
    let (dir, name) = split_parent(path)?;
    let d = walk(fs, dir, true)?;
    if fs.getattr(d)?.kind != FileType::Directory {
        return Err(FsError::NotDir(lossy(dir)));
    }
    Ok((d, name))
}

/// The last component of a local or image path.
fn basename(p: &[u8]) -> &[u8] {
    let t = trim_slashes(p);
    t.rsplit(|&b| b == b'/').next().unwrap_or(t)
}

/// The size column of `ls -l`: `major, minor` for a device, as `ls -l` shows it.
fn size_column(a: &Attr) -> String {
    if matches!(a.kind, FileType::CharDev | FileType::BlockDev) {
        let (major, minor) = dev_numbers(a.rdev);
        format!("{major}, {minor}")
    } else {
        a.size.to_string()
    }
}

fn ls_line(fs: &Fs, a: &Attr, name: &[u8]) -> FsResult<Vec<u8>> {
    let mut line = format!(
        "{}{} {:>4} {:>6} {:>6} {:>12} {:>9} ",
        type_char(a.kind),
        perm_string(a.perm),
        a.nlink,
        a.uid,
        a.gid,
        size_column(a),
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
pub fn ls(image: &str, ctx: &Ctx, path: &[u8], long: bool, all: bool) -> CliResult<()> {
    let shown = lossy(path);
    with_ro(image, ctx, |fs| {
        let err = |e| CliError::fs_path(image, &shown, e);
        let ino = walk(fs, path, false).map_err(err)?;
        let attr = fs.getattr(ino).map_err(err)?;
        let mut out = Out::new();
        if attr.kind != FileType::Directory {
            let name = path;
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
fn regular_file(fs: &Fs, image: &str, path: &[u8]) -> CliResult<Attr> {
    let shown = lossy(path);
    let err = |e| CliError::fs_path(image, &shown, e);
    let ino = walk(fs, path, true).map_err(err)?;
    let a = fs.getattr(ino).map_err(err)?;
    match a.kind {
        FileType::Regular => Ok(a),
        FileType::Directory => Err(err(FsError::IsDir(shown.clone()))),
        k => Err(CliError::Msg(format!("{image}: {shown}: is a {}, not a regular file", k.name()))),
    }
}

/// Copy the contents of file `a` to `sink`, every byte in order (holes as zeros).
fn copy_out(
    fs: &Fs,
    image: &str,
    path: &str,
    a: &Attr,
    mut sink: impl FnMut(&[u8]) -> CliResult<()>,
) -> CliResult<()> {
    copy_range_out(fs, image, path, a.ino, (0, a.size), |_, b| sink(b))
}

/// Copy the bytes `[start, end)` of file `ino` to `sink`, which also gets their offset;
/// stops early at the end of the file.
fn copy_range_out(
    fs: &Fs,
    image: &str,
    path: &str,
    ino: Ino,
    (start, end): Range,
    mut sink: impl FnMut(u64, &[u8]) -> CliResult<()>,
) -> CliResult<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut off = start;
    while off < end {
        let want = ((end - off) as usize).min(CHUNK);
        let n = fs.read(ino, off, &mut buf[..want]).map_err(|e| CliError::fs_path(image, path, e))?;
        if n == 0 {
            break;
        }
        sink(off, &buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

/// `cjfs cat IMG PATH`.
pub fn cat(image: &str, ctx: &Ctx, path: &[u8]) -> CliResult<()> {
    let shown = lossy(path);
    with_ro(image, ctx, |fs| {
        let a = regular_file(fs, image, path)?;
        let mut out = Out::new();
        copy_out(fs, image, &shown, &a, |b| out.write(b))?;
        out.finish()
    })
}

/// `cjfs get IMG PATH LOCAL` (`-` for stdout).
///
/// To a local regular file, as `cp --sparse=auto`: only the file's data ranges (its
/// extents, from [`Fs::seek_data_hole`]) are read and written at their offsets, then the
/// local file's length is set to the size, so holes stay holes. Unwritten (preallocated)
/// extents read as zeros and are holes here too. To stdout or any other kind of local file
/// (a pipe, a device) every byte is written in order, holes as zeros.
pub fn get(image: &str, ctx: &Ctx, path: &[u8], local: &OsStr) -> CliResult<()> {
    let shown = lossy(path);
    let local_shown = std::path::Path::new(local).display().to_string();
    let local_shown = local_shown.as_str();
    with_ro(image, ctx, |fs| {
        let a = regular_file(fs, image, path)?;
        if local == "-" {
            let mut out = Out::new();
            copy_out(fs, image, &shown, &a, |b| out.write(b))?;
            return out.finish();
        }
        let f = std::fs::File::create(local).map_err(|e| CliError::io(local_shown, e))?;
        let is_file = f.metadata().map_err(|e| CliError::io(local_shown, e))?.is_file();
        if is_file {
            let data = seek_ranges(a.size, |off, data| fs.seek_data_hole(a.ino, off, data))
                .map_err(|e| CliError::fs_path(image, &shown, e))?;
            for &r in &data {
                copy_range_out(fs, image, &shown, a.ino, r, |off, b| {
                    f.write_all_at(b, off).map_err(|e| CliError::io(local_shown, e))
                })?;
            }
            f.set_len(a.size).map_err(|e| CliError::io(local_shown, e))?;
            return f.sync_all().map_err(|e| CliError::io(local_shown, e));
        }
        let mut w = std::io::BufWriter::new(f);
        copy_out(fs, image, &shown, &a, |b| w.write_all(b).map_err(|e| CliError::io(local_shown, e)))?;
        let f = w.into_inner().map_err(|e| CliError::io(local_shown, e.into_error()))?;
        f.sync_all().map_err(|e| CliError::io(local_shown, e))
    })
}

/// Where `put` writes.
struct PutTarget {
    /// Parent directory and name (used to create the file, or to remove it after a failure).
    parent: Ino,
    name: Vec<u8>,
    /// The existing regular file, if any.
    existing: Option<Attr>,
    /// Path shown in messages.
    shown: String,
}

/// Decide where `put` writes and check that the data fits, before anything is written.
fn plan_put(
    fs: &Fs,
    image: &str,
    path: &[u8],
    local_name: Option<&[u8]>,
    data: Option<&[Range]>,
) -> CliResult<PutTarget> {
    let shown_path = lossy(path);
    let err = |e| CliError::fs_path(image, &shown_path, e);
    let (parent, name, full) = match walk(fs, path, true) {
        Ok(ino) if fs.getattr(ino).map_err(err)?.kind == FileType::Directory => match local_name {
            Some(n) => (ino, n.to_vec(), [trim_slashes(path), b"/", n].concat()),
            None => return Err(err(FsError::IsDir(shown_path.clone()))),
        },
        // A trailing slash names a directory (as for cp): it must exist.
        Ok(_) if path.ends_with(b"/") => return Err(err(FsError::NotDir(shown_path.clone()))),
        Err(FsError::NotFound(_)) if path.ends_with(b"/") => {
            return Err(err(FsError::NotFound(format!("{shown_path} (a trailing slash names a directory)"))));
        }
        Ok(_) | Err(FsError::NotFound(_)) => {
            let (p, n) = parent_of(fs, path).map_err(err)?;
            (p, n.to_vec(), path.to_vec())
        }
        Err(e) => return Err(err(e)),
    };
    let shown = lossy(&full);
    let existing = match fs.lookup(parent, &name) {
        Ok(a) => match a.kind {
            FileType::Regular => Some(a),
            FileType::Directory => {
                return Err(CliError::fs_path(image, &shown, FsError::IsDir(shown.clone())));
            }
            FileType::Symlink => {
                // A symbolic link to a regular file is written through.
                let t = walk(fs, &full, true).and_then(|i| fs.getattr(i)).map_err(err)?;
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
    if let Some(data) = data {
        let need = blocks_needed(data, u64::from(st.bsize));
        let freed = existing.as_ref().map_or(0, |a| a.blocks / (u64::from(st.bsize) / 512));
        let free = st.bfree + freed;
        if need > free {
            return Err(CliError::NoSpace { image: image.to_string(), what: shown, need, free });
        }
    }
    Ok(PutTarget { parent, name, existing, shown })
}

/// A byte range `[start, end)` of a file that holds data (outside are holes).
type Range = (u64, u64);

/// Longest extent ext4 maps (`EXT_INIT_MAX_LEN`).
const MAX_EXTENT_BLOCKS: u64 = 32768;

/// The image blocks of `block_size` bytes a file whose data lies in `data` (ordered, not
/// overlapping) allocates: the blocks its data touches (holes allocate nothing), plus an
/// estimate of its extent tree: one extent per data range, per `MAX_EXTENT_BLOCKS` and per
/// block group (`8 * block_size` blocks at most) crossed; beyond the 4 extents the inode
/// holds, leaves of `(block_size - 12) / 12` entries and the index blocks above them.
fn blocks_needed(data: &[Range], block_size: u64) -> u64 {
    let mut blocks = 0u64;
    let mut extents = 0u64;
    let mut last: Option<u64> = None;
    for &(start, end) in data.iter().filter(|(s, e)| e > s) {
        let first = start / block_size;
        let past = end.div_ceil(block_size);
        // A block shared with the previous range was counted with it.
        let first = match last {
            Some(l) if l >= first => l + 1,
            _ => first,
        };
        if past > first {
            let n = past - first;
            blocks += n;
            extents += n.div_ceil(MAX_EXTENT_BLOCKS) + n / (8 * block_size);
        }
        last = Some(past - 1);
    }
    let per_block = (block_size - 12) / 12;
    let mut tree = 0;
    let mut n = extents;
    while n > 4 {
        n = n.div_ceil(per_block);
        tree += n;
    }
    blocks + tree
}

/// Granule of the zero scan of [`data_ranges`]' fallback: a whole number of image blocks
/// for every block size cjfs supports.
const ZERO_SCAN: u64 = 4096;

/// Where the local regular file `f` of `size` bytes holds data, as `cp --sparse=auto`
/// sees it: the source's holes from `lseek(SEEK_DATA/SEEK_HOLE)`. When the source file
/// system does not support those, a file that looks sparse (fewer blocks allocated than its
/// size needs) is scanned for all-zero granules of [`ZERO_SCAN`] bytes instead, and any
/// other file is all data.
fn data_ranges(f: &std::fs::File, size: u64, allocated: u64) -> std::io::Result<Vec<Range>> {
    match seek_data_ranges(f, size)? {
        Some(v) => Ok(v),
        None if allocated < size => zero_scan_ranges(f, size),
        None => Ok(if size > 0 { vec![(0, size)] } else { Vec::new() }),
    }
}

/// The data ranges of a file of `size` bytes, found by `seek(off, data)`: the offset of
/// the next data (`data` true) or hole (false) at or after `off`, `None` when there is none
/// (`ENXIO`), as `lseek(SEEK_DATA/SEEK_HOLE)` gives it. Serves both a local file's
/// `lseek` ([`seek_data_ranges`]) and an image file's extents (`get`).
fn seek_ranges<E>(
    size: u64,
    mut seek: impl FnMut(u64, bool) -> Result<Option<u64>, E>,
) -> Result<Vec<Range>, E> {
    let mut v = Vec::new();
    let mut off = 0u64;
    while off < size {
        let d = match seek(off, true)? {
            Some(d) if d < size => d,
            // No data at or after `off`: the rest is a hole.
            _ => break,
        };
        let h = seek(d, false)?.unwrap_or(size).min(size);
        if h <= d {
            break;
        }
        v.push((d, h));
        off = h;
    }
    Ok(v)
}

/// The data ranges of `f` from `SEEK_DATA`/`SEEK_HOLE`; `None` when unsupported.
fn seek_data_ranges(f: &std::fs::File, size: u64) -> std::io::Result<Option<Vec<Range>>> {
    let fd = f.as_raw_fd();
    let mut calls = 0u32;
    let r = seek_ranges(size, |off, data| {
        calls += 1;
        let whence = if data { libc::SEEK_DATA } else { libc::SEEK_HOLE };
        // SAFETY: lseek on a descriptor owned by `f`, which outlives the call; the reads
        // use positioned reads, so moving the file offset is harmless.
        let r = unsafe { libc::lseek(fd, off as libc::off_t, whence) };
        if r >= 0 {
            return Ok(Some(r as u64));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        }
    });
    match r {
        Ok(v) => Ok(Some(v)),
        // The very first SEEK_DATA refused: the file system does not support it.
        Err(e) if calls == 1 && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The ranges of `f` that are not all zeros, in granules of [`ZERO_SCAN`] bytes.
fn zero_scan_ranges(f: &std::fs::File, size: u64) -> std::io::Result<Vec<Range>> {
    let mut v: Vec<Range> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    while off < size {
        let want = ((size - off) as usize).min(CHUNK);
        f.read_exact_at(&mut buf[..want], off)?;
        for (i, g) in buf[..want].chunks(ZERO_SCAN as usize).enumerate() {
            if g.iter().all(|&b| b == 0) {
                continue;
            }
            let s = off + i as u64 * ZERO_SCAN;
            let e = s + g.len() as u64;
            match v.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => v.push((s, e)),
            }
        }
        off += want as u64;
    }
    Ok(v)
}

/// A local regular file of `size` bytes with data in `data` (its holes are kept as holes),
/// read by offset.
struct LocalFile {
    /// The open file.
    file: std::fs::File,
    /// Its size.
    size: u64,
    /// Where it holds data ([`data_ranges`]).
    data: Vec<Range>,
}

/// Copy the data ranges of `src` into file `ino` at the same offsets, then set its size:
/// the holes between and after them stay holes.
fn copy_ranges_in(
    fs: &Fs,
    image: &str,
    t: &PutTarget,
    ino: Ino,
    src: &LocalFile,
    local: &str,
) -> CliResult<()> {
    let mut buf = vec![0u8; CHUNK];
    let size = src.size;
    for &(start, end) in &src.data {
        let mut off = start;
        while off < end {
            let want = ((end - off) as usize).min(CHUNK);
            let n = src.file.read_at(&mut buf[..want], off).map_err(|e| CliError::io(local, e))?;
            if n == 0 {
                return Err(CliError::Msg(format!("{local}: the file shrank while being copied")));
            }
            write_all_at(fs, image, t, ino, off, &buf[..n])?;
            off += n as u64;
        }
    }
    if fs.getattr(ino).map_err(|e| CliError::fs_path(image, &t.shown, e))?.size != size {
        fs.setattr(ino, &SetAttr { size: Some(size), ..Default::default() })
            .map_err(|e| CliError::fs_path(image, &t.shown, e))?;
    }
    Ok(())
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

/// Write all of `data` to file `ino` at `off` (a short write is retried; none at all is ENOSPC).
fn write_all_at(fs: &Fs, image: &str, t: &PutTarget, ino: Ino, off: u64, data: &[u8]) -> CliResult<()> {
    let mut done = 0;
    while done < data.len() {
        let w = fs
            .write(ino, off + done as u64, &data[done..])
            .map_err(|e| CliError::fs_path(image, &t.shown, e))?;
        if w == 0 {
            return Err(CliError::fs_path(image, &t.shown, FsError::NoSpace("short write".into())));
        }
        done += w;
    }
    Ok(())
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
        write_all_at(fs, image, t, ino, off, &buf[..n])?;
        off += n as u64;
    }
}

/// The bytes `put` copies, readable once per run (the dry run and the real one).
enum Source {
    /// A local regular file, or standard input spooled to an unlinked temporary file.
    File(LocalFile),
    /// Another local file (a pipe, a device), opened anew and read in order for each run.
    Stream(std::path::PathBuf),
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
///
/// A regular file's holes (`SEEK_DATA`/`SEEK_HOLE`, as `cp --sparse=auto` finds them) stay
/// holes in the image; the free space check counts only the blocks its data needs (plus an
/// estimate of its extent tree).
pub fn put(image: &str, ctx: &Ctx, local: &OsStr, path: &[u8]) -> CliResult<()> {
    let local_shown = std::path::Path::new(local).display().to_string();
    let (src, meta) = if local == "-" {
        let (file, size) = spool_stdin()?;
        let data = if size > 0 { vec![(0, size)] } else { Vec::new() };
        (Source::File(LocalFile { file, size, data }), None)
    } else {
        let m = std::fs::metadata(local).map_err(|e| CliError::io(&local_shown, e))?;
        if m.is_dir() {
            return Err(CliError::Msg(format!("{local_shown}: is a directory (put copies one file)")));
        }
        // Only a regular file's size and holes are known in advance (not a pipe's or a device's).
        if m.is_file() {
            let file = std::fs::File::open(local).map_err(|e| CliError::io(&local_shown, e))?;
            let size = m.len();
            let data = data_ranges(&file, size, m.blocks().saturating_mul(512))
                .map_err(|e| CliError::io(&local_shown, e))?;
            (Source::File(LocalFile { file, size, data }), Some(m))
        } else {
            (Source::Stream(local.into()), Some(m))
        }
    };
    let local_name = (local != "-").then(|| basename(local.as_bytes()));
    let data = match &src {
        Source::File(f) => Some(f.data.as_slice()),
        Source::Stream(_) => None,
    };
    with_rw(
        image,
        ctx,
        |fs| plan_put(fs, image, path, local_name, data),
        |fs, t| {
            let err = |e| CliError::fs_path(image, &t.shown, e);
            let (uid, gid) = owner();
            let mode = meta.as_ref().map_or(0o644, |m| m.permissions().mode() & 0o7777);
            let ino = match &t.existing {
                Some(a) => {
                    fs.setattr(a.ino, &SetAttr { size: Some(0), ..Default::default() }).map_err(err)?;
                    a.ino
                }
                None => fs.create(t.parent, &t.name, mode, uid, gid).map_err(err)?.ino,
            };
            let copied = match &src {
                Source::File(f) => {
                    let shown = if local == "-" { "stdin (spooled)" } else { &local_shown };
                    copy_ranges_in(fs, image, &t, ino, f, shown)
                }
                Source::Stream(p) => std::fs::File::open(p)
                    .map_err(|e| CliError::io(p.display(), e))
                    .and_then(|mut f| copy_in(fs, image, &t, ino, &mut f, &local_shown)),
            };
            if let Err(e) = copied {
                // Give the space back: remove what we created, empty what we truncated.
                if t.existing.is_none() {
                    let _ = fs.unlink(t.parent, &t.name);
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
pub fn mkdir(image: &str, ctx: &Ctx, path: &[u8], parents: bool) -> CliResult<()> {
    let shown = lossy(path);
    let err = |e| CliError::fs_path(image, &shown, e);
    if parents {
        // Nothing to check up front beyond the path being walkable; done in `op`.
        return with_rw(
            image,
            ctx,
            |_| Ok(()),
            |fs, ()| {
                let (uid, gid) = owner();
                let mut cur = ROOT_INO;
                let mut comps = components(path);
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
                                return Err(err(FsError::NotDir(lossy(&so_far))));
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
            match fs.lookup(p, name) {
                Ok(_) => Err(err(FsError::Exists(shown.clone()))),
                Err(FsError::NotFound(_)) => Ok(()),
                Err(e) => Err(err(e)),
            }
        },
        |fs, ()| {
            let (uid, gid) = owner();
            let (p, name) = parent_of(fs, path).map_err(err)?;
            fs.mkdir(p, name, 0o755, uid, gid).map_err(err)?;
            Ok(())
        },
    )
}

/// The prefix of `path` that has been consumed when `rest` (reversed) remains.
fn walk_prefix(path: &[u8], rest: &[Vec<u8>]) -> Vec<u8> {
    let all = components(path);
    let taken = all.len() - rest.len();
    let mut out: Vec<u8> = all.iter().rev().take(taken).flat_map(|c| [&b"/"[..], c].concat()).collect();
    if out.is_empty() {
        out.push(b'/');
    }
    out
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
pub fn rm(image: &str, ctx: &Ctx, path: &[u8], recursive: bool) -> CliResult<()> {
    let shown = lossy(path);
    let err = |e| CliError::fs_path(image, &shown, e);
    let check = |fs: &Fs| -> CliResult<(Ino, Vec<u8>, Attr)> {
        if components(path).is_empty() {
            return Err(CliError::Msg(format!("{image}: refusing to remove the root directory")));
        }
        let (p, name) = parent_of(fs, path).map_err(err)?;
        let a = fs.lookup(p, name).map_err(err)?;
        if a.kind == FileType::Directory && !recursive {
            let n = fs.readdir_all(a.ino).map_err(err)?.len();
            if n > 2 {
                return Err(err(FsError::NotEmpty(format!("{shown} (use -r to remove its contents)"))));
            }
        }
        Ok((p, name.to_vec(), a))
    };
    with_rw(image, ctx, check, |fs, (p, name, a)| {
        if a.kind == FileType::Directory {
            if recursive {
                remove_tree(fs, a.ino).map_err(err)?;
            }
            fs.rmdir(p, &name).map_err(err)
        } else {
            fs.unlink(p, &name).map_err(err)
        }
    })
}

/// `cjfs mv IMG FROM TO`.
pub fn mv(image: &str, ctx: &Ctx, from: &[u8], to: &[u8]) -> CliResult<()> {
    let (from_shown, to_shown) = (lossy(from), lossy(to));
    let ferr = |e| CliError::fs_path(image, &from_shown, e);
    let plan = |fs: &Fs| -> CliResult<(Ino, Vec<u8>, Ino, Vec<u8>)> {
        let (fp, fname) = parent_of(fs, from).map_err(ferr)?;
        fs.lookup(fp, fname).map_err(ferr)?;
        let terr = |e| CliError::fs_path(image, &to_shown, e);
        let (tp, tname) = match walk(fs, to, true) {
            Ok(ino) if fs.getattr(ino).map_err(terr)?.kind == FileType::Directory => (ino, fname.to_vec()),
            Ok(_) | Err(FsError::NotFound(_)) => {
                let (p, n) = parent_of(fs, to).map_err(terr)?;
                (p, n.to_vec())
            }
            Err(e) => return Err(terr(e)),
        };
        Ok((fp, fname.to_vec(), tp, tname))
    };
    with_rw(image, ctx, plan, |fs, (fp, fname, tp, tname)| {
        fs.rename(fp, &fname, tp, &tname, RenameFlags::default()).map_err(ferr)
    })
}

/// `cjfs ln IMG TARGET LINK [-s]`.
pub fn ln(image: &str, ctx: &Ctx, target: &[u8], link: &[u8], symbolic: bool) -> CliResult<()> {
    let (target_shown, link_shown) = (lossy(target), lossy(link));
    let lerr = |e| CliError::fs_path(image, &link_shown, e);
    let plan = |fs: &Fs| -> CliResult<(Option<Ino>, Ino, Vec<u8>)> {
        let src = if symbolic {
            if target.is_empty() {
                return Err(CliError::Usage("a symbolic link target cannot be empty".into()));
            }
            None
        } else {
            let ino = walk(fs, target, false).map_err(|e| CliError::fs_path(image, &target_shown, e))?;
            if fs.getattr(ino).map_err(lerr)?.kind == FileType::Directory {
                return Err(CliError::Msg(format!(
                    "{image}: {target_shown}: hard links to directories are not allowed"
                )));
            }
            Some(ino)
        };
        let (p, name) = match walk(fs, link, true) {
            Ok(ino) if fs.getattr(ino).map_err(lerr)?.kind == FileType::Directory => {
                (ino, basename(target).to_vec())
            }
            Ok(_) => return Err(lerr(FsError::Exists(link_shown.clone()))),
            Err(FsError::NotFound(_)) => {
                let (p, n) = parent_of(fs, link).map_err(lerr)?;
                (p, n.to_vec())
            }
            Err(e) => return Err(lerr(e)),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(lerr(FsError::Invalid(format!("no file name for the link in {link_shown:?}"))));
        }
        match fs.lookup(p, &name) {
            Ok(_) => return Err(lerr(FsError::Exists(lossy(&name)))),
            Err(FsError::NotFound(_)) => {}
            Err(e) => return Err(lerr(e)),
        }
        Ok((src, p, name))
    };
    with_rw(image, ctx, plan, |fs, (src, p, name)| {
        match src {
            Some(ino) => fs.link(ino, p, &name).map_err(lerr)?,
            None => {
                let (uid, gid) = owner();
                fs.symlink(p, &name, target, uid, gid).map_err(lerr)?
            }
        };
        Ok(())
    })
}

/// `cjfs stat IMG PATH`.
pub fn stat(image: &str, ctx: &Ctx, path: &[u8]) -> CliResult<()> {
    let shown = lossy(path);
    with_ro(image, ctx, |fs| {
        let err = |e| CliError::fs_path(image, &shown, e);
        let ino = walk(fs, path, false).map_err(err)?;
        let a = fs.getattr(ino).map_err(err)?;
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        if a.kind == FileType::Symlink {
            line(format!("  File: {shown} -> {}", lossy(&fs.readlink(ino).map_err(err)?)));
        } else {
            line(format!("  File: {shown}"));
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
            let (major, minor) = dev_numbers(a.rdev);
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
        if fs.geometry().inode_size <= 128 {
            // 128-byte inodes have no room for a creation time (as `stat`, a dash).
            line("  Birth:  -".to_string());
        } else {
            line(format!("  Birth:  {}", timestamp(a.crtime)));
        }
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

#[cfg(test)]
mod put_tests {
    use super::*;

    #[test]
    fn blocks_needed_counts_data_blocks_once_and_the_tree() {
        assert_eq!(blocks_needed(&[], 4096), 0);
        // One byte, then a range sharing its block, then one in another block.
        assert_eq!(blocks_needed(&[(0, 1), (100, 5000), (1 << 20, (1 << 20) + 1)], 4096), 3);
        // 1 KiB blocks: 4 KiB of data are 4 blocks.
        assert_eq!(blocks_needed(&[(4096, 8192)], 1024), 4);
        // 5 ranges: more extents than the inode holds, one leaf block.
        let five: Vec<Range> = (0..5).map(|i| (i * 65536, i * 65536 + 4096)).collect();
        assert_eq!(blocks_needed(&five, 4096), 6);
    }

    #[test]
    fn data_ranges_find_holes_and_the_zero_scan_agrees() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("sparse");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .expect("create");
        f.set_len(1 << 20).expect("set_len");
        f.write_all_at(&[7u8; 100], 300_000).expect("write");
        // The zero scan: the one 4 KiB granule holding data.
        let g = 300_000 / ZERO_SCAN * ZERO_SCAN;
        assert_eq!(zero_scan_ranges(&f, 1 << 20).expect("scan"), vec![(g, g + ZERO_SCAN)]);
        // SEEK_DATA: a range covering the data, within the file (file systems without holes
        // report all of it).
        let r = seek_data_ranges(&f, 1 << 20).expect("seek").expect("SEEK_DATA supported");
        assert!(r.iter().any(|&(s, e)| s <= 300_000 && e >= 300_100), "{r:?}");
        assert!(r.iter().all(|&(s, e)| s < e && e <= 1 << 20), "{r:?}");
        // A file of one hole: no data (or all of it where holes are not kept).
        let h = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("hole"))
            .expect("create");
        h.set_len(1 << 20).expect("set_len");
        let r = data_ranges(&h, 1 << 20, 0).expect("ranges");
        assert!(r.is_empty() || r == vec![(0, 1 << 20)], "{r:?}");
    }
}
