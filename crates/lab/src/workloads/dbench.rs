//! dbench: replay of the dbench package's `client.txt` loadfile, as dbench 4's `fileio`
//! backend does it.
//!
//! The loadfile is read from the installed package (`apt-get install dbench` puts it in
//! [`DEFAULT_LOADFILE`]); it is not part of this repository. Each thread is one client with
//! its own directory `clients/client<N>`, looping over the loadfile until the time is up.
//! Semantics follow dbench 4's `fileio.c`:
//!
//! * every named operation first *resolves* the name: `stat`, and when that fails a scan of
//!   the parent directory (dbench's case-insensitive name resolution simulation);
//! * `NTCreateX` opens `O_RDWR`, adding `O_CREAT` for `FILE_CREATE` and `O_CREAT|O_TRUNC`
//!   for `FILE_OVERWRITE(_IF)`; the directory option makes the directory first;
//! * `Flush` is `fsync`; `--sync-dir` ([`DbenchOptions::sync_dir`], on by default as in the
//!   CJFS paper) syncs the parent directory after `Unlink`, `Rmdir` and `Rename`;
//! * `Deltree` unlinks every file below a directory (directories stay);
//! * `SET_FILE_INFORMATION` sets the times, `QUERY_*` stat, `FIND_FIRST` lists the
//!   directory when the pattern has a wildcard, `LockX`/`UnlockX` do nothing.
//!
//! Throughput is reported as dbench does (MB/s of reads and writes) and as loadfile lines
//! per second. Results that differ from the status the loadfile expects are counted
//! (`status_mismatches`), as dbench prints them.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::{Params, RunResult, run_workers};
use crate::target::{Fh, Target};

/// Where the dbench package installs its loadfile.
pub const DEFAULT_LOADFILE: &str = "/usr/share/dbench/client.txt";

/// Replay options.
#[derive(Debug, Clone)]
pub struct DbenchOptions {
    /// Sync the parent directory after unlink, rmdir and rename (`dbench --sync-dir`).
    pub sync_dir: bool,
    /// Simulate name resolution (dbench's default; `--no-resolve` turns it off).
    pub resolve: bool,
}

impl Default for DbenchOptions {
    fn default() -> Self {
        DbenchOptions { sync_dir: true, resolve: true }
    }
}

/// A path in the loadfile: below the client's own directory or absolute.
#[derive(Debug, Clone)]
enum LPath {
    /// Relative to `clients/client<N>` (may be empty: the client directory itself).
    Client(String),
    /// Any other path, relative to the target root.
    Root(String),
}

/// One loadfile line.
#[derive(Debug, Clone)]
enum Op {
    Deltree(LPath),
    Mkdir(LPath),
    Rmdir(LPath, bool),
    Create { path: LPath, options: u32, disposition: u32, fnum: u32, ok: bool },
    Close(u32),
    Read { fnum: u32, off: u64, size: usize },
    Write { fnum: u32, off: u64, size: usize },
    Flush(u32),
    Unlink(LPath, bool),
    Rename(LPath, LPath, bool),
    QueryPath(LPath),
    QueryFile(u32),
    QueryFs,
    SetFile(u32),
    FindFirst(LPath, usize),
    Nop,
}

const FILE_DIRECTORY_FILE: u32 = 0x1;
const FILE_CREATE: u32 = 2;
const FILE_OVERWRITE: u32 = 4;
const FILE_OVERWRITE_IF: u32 = 5;

fn num(s: Option<&&str>) -> Option<u64> {
    let s = s?;
    if let Some(h) = s.strip_prefix("0x") { u64::from_str_radix(h, 16).ok() } else { s.parse().ok() }
}

fn lpath(s: &str) -> LPath {
    let p = s.trim_matches('"').replace('\\', "/");
    match p.strip_prefix("/clients/client1") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => LPath::Client(rest.to_string()),
        _ => LPath::Root(p.trim_start_matches('/').to_string()),
    }
}

/// Split a line into words, keeping quoted names (which may hold spaces) whole.
fn words(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('"') {
            match r.find('"') {
                Some(end) => {
                    out.push(&rest[..end + 2]);
                    rest = r[end + 1..].trim_start();
                }
                None => {
                    out.push(rest);
                    rest = "";
                }
            }
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
    }
    out
}

fn parse_line(line: &str) -> Option<Op> {
    let w = words(line);
    let cmd = *w.first()?;
    let ok = w.last().is_some_and(|s| *s == "NT_STATUS_OK" || num(Some(s)) == Some(0));
    let n = |i: usize| num(w.get(i));
    let p = |i: usize| w.get(i).map(|s| lpath(s));
    Some(match cmd {
        "Deltree" => Op::Deltree(p(1)?),
        "Mkdir" => Op::Mkdir(p(1)?),
        "Rmdir" => Op::Rmdir(p(1)?, ok),
        "NTCreateX" => Op::Create {
            path: p(1)?,
            options: n(2)? as u32,
            disposition: n(3)? as u32,
            fnum: n(4)? as u32,
            ok,
        },
        "Close" => Op::Close(n(1)? as u32),
        "ReadX" => Op::Read { fnum: n(1)? as u32, off: n(2)?, size: n(3)? as usize },
        "WriteX" => Op::Write { fnum: n(1)? as u32, off: n(2)?, size: n(3)? as usize },
        "Flush" => Op::Flush(n(1)? as u32),
        "Unlink" => Op::Unlink(p(1)?, ok),
        "Rename" => Op::Rename(p(1)?, p(2)?, ok),
        "QUERY_PATH_INFORMATION" => Op::QueryPath(p(1)?),
        "QUERY_FILE_INFORMATION" => Op::QueryFile(n(1)? as u32),
        "QUERY_FS_INFORMATION" => Op::QueryFs,
        "SET_FILE_INFORMATION" => Op::SetFile(n(1)? as u32),
        "FIND_FIRST" => Op::FindFirst(p(1)?, n(3).unwrap_or(u64::MAX) as usize),
        "LockX" | "UnlockX" | "Sleep" => Op::Nop,
        _ => return None,
    })
}

/// Parse a loadfile (cached per path for the life of the process).
fn load(path: &Path) -> io::Result<Arc<Vec<Op>>> {
    static CACHE: OnceLock<Mutex<HashMap<std::path::PathBuf, Arc<Vec<Op>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = cache.lock().get(path) {
        return Ok(v.clone());
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("dbench loadfile {}: {e} (install it with `apt-get install dbench`)", path.display()),
        )
    })?;
    let ops: Vec<Op> = text.lines().filter(|l| !l.trim().is_empty()).filter_map(parse_line).collect();
    if ops.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: no operations", path.display())));
    }
    let ops = Arc::new(ops);
    cache.lock().insert(path.to_path_buf(), ops.clone());
    Ok(ops)
}

/// Whether a loadfile can be read (so callers can skip dbench cleanly).
pub fn available(path: &Path) -> bool {
    load(path).is_ok()
}

enum Handle {
    File(Fh),
    Dir(String),
}

struct Client<'a> {
    t: &'a dyn Target,
    base: String,
    handles: HashMap<u32, Handle>,
    opts: &'a DbenchOptions,
    mismatches: u64,
}

fn parent(p: &str) -> &str {
    p.rfind('/').map_or("", |i| &p[..i])
}

impl Client<'_> {
    fn path(&self, p: &LPath) -> String {
        match p {
            LPath::Client(rest) => format!("{}{rest}", self.base),
            LPath::Root(r) => r.clone(),
        }
    }

    /// dbench's `resolve_name`: stat, and on failure scan the parent directory.
    fn resolve(&self, p: &str) -> Option<crate::target::Stat> {
        match self.t.stat(p) {
            Ok(s) => Some(s),
            Err(_) => {
                if self.opts.resolve {
                    let _ = self.t.list_dir(parent(p));
                }
                None
            }
        }
    }

    fn check(&mut self, r: io::Result<()>, ok: bool) {
        if r.is_ok() != ok {
            self.mismatches += 1;
        }
    }

    fn deltree(&self, dir: &str) {
        let Ok(names) = self.t.list_dir(dir) else { return };
        for n in names {
            let p = format!("{dir}/{n}");
            match self.t.stat(&p) {
                Ok(s) if s.is_dir => self.deltree(&p),
                Ok(_) => {
                    let _ = self.t.unlink(&p);
                }
                Err(_) => {}
            }
        }
    }

    fn file(&self, fnum: u32) -> Option<Fh> {
        match self.handles.get(&fnum) {
            Some(Handle::File(fh)) => Some(*fh),
            _ => None,
        }
    }

    fn close_all(&mut self) {
        for (_, h) in self.handles.drain() {
            if let Handle::File(fh) = h {
                let _ = self.t.close(fh);
            }
        }
    }
}

/// Run the replay: one client per thread.
pub fn run(t: &dyn Target, p: &Params, opts: &DbenchOptions) -> io::Result<RunResult> {
    let ops = load(&p.dbench_loadfile)?;
    let _ = t.mkdir("clients");
    let mismatches = Mutex::new(0u64);
    let loops = Mutex::new(0u64);
    let mut res = run_workers(t, "dbench", p.threads, p.duration, p.seed, |w| {
        let mut c = Client {
            t,
            base: format!("clients/client{}", w.id),
            handles: HashMap::new(),
            opts,
            mismatches: 0,
        };
        let mut buf = vec![0u8; 1 << 16];
        let zeros = vec![0u8; 1 << 16];
        'outer: while w.running() {
            for op in ops.iter() {
                if !w.running() {
                    break 'outer;
                }
                step(&mut c, w, op, &mut buf, &zeros)?;
            }
            *loops.lock() += 1;
        }
        c.close_all();
        *mismatches.lock() += c.mismatches;
        Ok(())
    })?;
    res.extra.push(("status_mismatches".into(), *mismatches.lock() as f64));
    res.extra.push(("loadfile_loops".into(), *loops.lock() as f64));
    Ok(res)
}

fn grow(buf: &mut Vec<u8>, n: usize) {
    if buf.len() < n {
        buf.resize(n, 0);
    }
}

fn step(
    c: &mut Client<'_>,
    w: &mut super::Worker,
    op: &Op,
    buf: &mut Vec<u8>,
    zeros: &[u8],
) -> io::Result<()> {
    let t = c.t;
    match op {
        Op::Deltree(p) => {
            let p = c.path(p);
            w.op(|| {
                c.deltree(&p);
                Ok(())
            })?;
        }
        Op::Mkdir(p) => {
            let p = c.path(p);
            c.resolve(&p);
            w.op(|| {
                let _ = t.mkdir(&p);
                Ok(())
            })?;
        }
        Op::Rmdir(p, ok) => {
            let p = c.path(p);
            c.resolve(&p);
            let r = w.op(|| Ok(t.rmdir(&p)))?;
            c.check(r, *ok);
            if c.opts.sync_dir {
                w.inner_fsync(|| t.fsync_dir(parent(&p)))?;
            }
        }
        Op::Create { path, options, disposition, fnum, ok } => {
            let p = c.path(path);
            let st = c.resolve(&p);
            let h = w.op(|| -> io::Result<io::Result<Handle>> {
                if options & FILE_DIRECTORY_FILE != 0 {
                    if st.is_none() {
                        let _ = t.mkdir(&p);
                    }
                    return Ok(if t.stat(&p).is_ok_and(|s| s.is_dir) {
                        Ok(Handle::Dir(p.clone()))
                    } else {
                        Err(io::Error::from(io::ErrorKind::NotFound))
                    });
                }
                Ok(match (*disposition, st) {
                    (_, Some(s)) if s.is_dir => Ok(Handle::Dir(p.clone())),
                    (FILE_OVERWRITE | FILE_OVERWRITE_IF, _) => t.create(&p).map(Handle::File),
                    (FILE_CREATE, None) => t.create(&p).map(Handle::File),
                    _ => t.open(&p).map(Handle::File),
                })
            })?;
            match (h, ok) {
                (Ok(h), true) => {
                    if let Some(Handle::File(old)) = c.handles.insert(*fnum, h) {
                        let _ = t.close(old);
                    }
                }
                (Ok(h), false) => {
                    c.mismatches += 1;
                    if let Handle::File(fh) = h {
                        t.close(fh)?;
                    }
                }
                (Err(_), true) => c.mismatches += 1,
                (Err(_), false) => {}
            }
        }
        Op::Close(fnum) => {
            if let Some(h) = c.handles.remove(fnum) {
                w.op(|| match h {
                    Handle::File(fh) => t.close(fh),
                    Handle::Dir(_) => Ok(()),
                })?;
            }
        }
        Op::Read { fnum, off, size } => {
            if let Some(fh) = c.file(*fnum) {
                grow(buf, *size);
                w.op(|| t.read_at(fh, *off, &mut buf[..*size]))?;
                w.bytes += *size as u64;
            }
        }
        Op::Write { fnum, off, size } => {
            if let Some(fh) = c.file(*fnum) {
                let mut done = 0;
                w.op(|| {
                    while done < *size {
                        let n = (*size - done).min(zeros.len());
                        t.write_at(fh, off + done as u64, &zeros[..n])?;
                        done += n;
                    }
                    Ok(())
                })?;
                w.bytes += *size as u64;
            }
        }
        Op::Flush(fnum) => match c.handles.get(fnum) {
            Some(Handle::File(fh)) => {
                let fh = *fh;
                w.fsync_op(|| t.fsync(fh, false))?;
            }
            Some(Handle::Dir(d)) => {
                let d = d.clone();
                w.fsync_op(|| t.fsync_dir(&d))?;
            }
            None => {}
        },
        Op::Unlink(p, ok) => {
            let p = c.path(p);
            c.resolve(&p);
            let r = w.op(|| Ok(t.unlink(&p)))?;
            c.check(r, *ok);
            if c.opts.sync_dir {
                w.inner_fsync(|| t.fsync_dir(parent(&p)))?;
            }
        }
        Op::Rename(a, b, ok) => {
            let (a, b) = (c.path(a), c.path(b));
            c.resolve(&a);
            c.resolve(&b);
            let r = w.op(|| Ok(t.rename(&a, &b)))?;
            c.check(r, *ok);
            if c.opts.sync_dir {
                w.inner_fsync(|| t.fsync_dir(parent(&b)))?;
            }
        }
        Op::QueryPath(p) => {
            let p = c.path(p);
            w.op(|| {
                c.resolve(&p);
                Ok(())
            })?;
        }
        Op::QueryFile(fnum) => {
            if let Some(fh) = c.file(*fnum) {
                w.op(|| t.size(fh))?;
            }
        }
        Op::QueryFs => w.op(|| t.statfs())?,
        Op::SetFile(fnum) => {
            if let Some(fh) = c.file(*fnum) {
                w.op(|| {
                    t.size(fh)?;
                    t.touch(fh)
                })?;
            }
        }
        Op::FindFirst(p, _max) => {
            let p = c.path(p);
            w.op(|| {
                c.resolve(&p);
                let name = p.rsplit('/').next().unwrap_or("");
                if name.contains(['<', '>', '*', '?', '"']) {
                    let _ = t.list_dir(parent(&p));
                }
                Ok(())
            })?;
        }
        Op::Nop => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines() {
        assert!(matches!(
            parse_line(r#"NTCreateX "\clients\client1\~dmtmp\WORD\A B.DOC" 0x40 0x2 9938 NT_STATUS_OK"#),
            Some(Op::Create { options: 0x40, disposition: 2, fnum: 9938, ok: true, path: LPath::Client(p) })
                if p == "/~dmtmp/WORD/A B.DOC"
        ));
        assert!(matches!(parse_line("WriteX 9938 65534 1 1 NT_STATUS_OK"), Some(Op::Write { size: 1, .. })));
        assert!(matches!(
            parse_line(r#"Unlink "\clients\client1\x" 0x6 NT_STATUS_NO_SUCH_FILE"#),
            Some(Op::Unlink(_, false))
        ));
        assert!(
            matches!(parse_line(r#"Mkdir "\clients" NT_STATUS_OK"#), Some(Op::Mkdir(LPath::Root(r))) if r == "clients")
        );
    }
}
