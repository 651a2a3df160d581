//! dbench: replay of the dbench package's `client.txt` loadfile, as dbench 4's `fileio`
//! backend does it.
//!
//! The loadfile is read from the installed package (`apt-get install dbench` puts it in
//! [`DEFAULT_LOADFILE`]); it is not part of this repository. Each thread is one client with
//! its own directory `clients/client<N>`, looping over the loadfile until the time is up.
//! Semantics follow dbench 4.0's `child.c` and `fileio.c`:
//!
//! * every named operation first *resolves* the name: `stat`, and when that fails a scan of
//!   the parent directory (dbench's case-insensitive name resolution simulation);
//! * `NTCreateX` opens `O_RDWR`, adding `O_CREAT` for `FILE_CREATE` and `O_CREAT|O_TRUNC`
//!   for `FILE_OVERWRITE(_IF)`, then `fstat`s the new handle; the directory option makes
//!   the directory first;
//! * `Flush` is `fsync` of the handle; `--sync-dir` ([`DbenchOptions::sync_dir`], on by
//!   default as in the CJFS paper) syncs the parent directory after `Unlink`, `Rmdir` and
//!   `Rename` (dbench uses `fdatasync` on a freshly opened directory; the lab's
//!   [`Target::fsync_dir`] is `fsync`, which on ext4 is the same full journal commit);
//!   without `--sync` (`O_SYNC`) or `--fsync` no other line syncs anything;
//! * `Deltree` unlinks every file below a directory (directories stay);
//! * `SET_FILE_INFORMATION` stats the handle and sets its times, `QUERY_FILE_INFORMATION`
//!   stats it, `QUERY_PATH_INFORMATION` resolves the name, `QUERY_FS_INFORMATION` is
//!   `statvfs`, `FIND_FIRST` resolves and lists the directory when the pattern has a
//!   wildcard, `LockX`/`UnlockX` do nothing, `Sleep` sleeps;
//! * a line may start with a timestamp (seconds since the start of the loadfile): the client
//!   then waits for that time, as dbench paces such loadfiles; the package's `client.txt`
//!   has no timestamps, so it runs flat out;
//! * lines whose last word is not a status (`NT_STATUS_...` or `0x...`) are skipped.
//!
//! Throughput is dbench's: MB/s (10^6) of the bytes *requested* by `ReadX` and `WriteX`
//! lines, nothing else, counted only after the **warm-up**. As in dbench, the run is the
//! warm-up ([`DbenchOptions::warmup`], by default dbench's `-t T` default of `T/5` whole
//! seconds, so none for runs under 5 s; it also lasts until every client has moved some
//! bytes) followed by the measured time ([`Params::duration`], dbench's `-t`), and the
//! operation counts and latencies are reset when the warm-up ends. This matters: `client.txt` opens with 22 MB of
//! filler writes and only 38 syncs in its first thousand lines, far denser in bytes than the
//! rest (about 100 KB per sync), and with many clients on a slow disk a whole run may not get
//! much further. `secs`, `ops_per_sec` and `mb_per_sec` cover the measured phase only; CPU
//! time and the journal and device figures of cjfs targets cover the whole run. Results that
//! differ from the status the loadfile expects are counted (`status_mismatches`), as dbench
//! prints them.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Params, RunResult, Worker, run_workers};
use crate::hist::Latency;
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
    /// Warm-up run before the measured [`Params::duration`] and left out of every figure
    /// but CPU time and the journal and device statistics; `None` is dbench's default, a
    /// fifth of the measured time in whole seconds (`dbench -t T` warms up for `T/5`
    /// seconds, integer division). Either way the warm-up lasts until every client has read
    /// or written some bytes.
    pub warmup: Option<Duration>,
}

impl Default for DbenchOptions {
    fn default() -> Self {
        DbenchOptions { sync_dir: true, resolve: true, warmup: None }
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
    Sleep(Duration),
    Nop,
}

/// One loadfile line: its operation and, when the line starts with a timestamp, the time
/// since the start of the loadfile at which dbench issues it (seconds; 0 = unpaced).
#[derive(Debug, Clone)]
struct Line {
    at: f64,
    op: Op,
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

/// Parse one line as dbench's `child_run` does: skip comments and lines of fewer than two
/// words, take a leading timestamp, require a status as the last word.
fn parse_line(line: &str) -> Option<Line> {
    let mut w = words(line);
    if w.len() < 2 || w[0].starts_with('#') {
        return None;
    }
    let mut at = 0.0;
    if w[0].starts_with(|c: char| c.is_ascii_digit()) {
        at = w[0].parse::<f64>().ok().filter(|t| t.is_finite() && *t >= 0.0)?;
        w.remove(0);
    }
    let status = *w.last()?;
    if !(status.starts_with("NT_STATUS_") || status.starts_with("0x")) {
        return None;
    }
    Some(Line { at, op: parse_op(&w)? })
}

fn parse_op(w: &[&str]) -> Option<Op> {
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
        "Sleep" => Op::Sleep(Duration::from_micros(n(1)?)),
        "LockX" | "UnlockX" => Op::Nop,
        _ => return None,
    })
}

/// Parse a loadfile (cached per path for the life of the process).
fn load(path: &Path) -> io::Result<Arc<Vec<Line>>> {
    static CACHE: OnceLock<Mutex<HashMap<std::path::PathBuf, Arc<Vec<Line>>>>> = OnceLock::new();
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
    let ops: Vec<Line> = text.lines().filter_map(parse_line).collect();
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

/// dbench's clock, shared by the clients. The warm-up ends once its time is up *and* every
/// client has moved some bytes (dbench's `sig_alarm` stays in warm-up while any client's
/// byte count is zero); each client then drops what it counted so far, as dbench snapshots
/// `bytes_done_warmup` and clears the operation statistics; the run ends `measure` after
/// that, whenever it was.
struct WarmUp {
    start: Instant,
    len: Duration,
    measure: Duration,
    clients: usize,
    /// Clients that have read or written bytes.
    active: AtomicUsize,
    /// Nanoseconds after `start` at which the measured phase began; `u64::MAX` before.
    ended_ns: AtomicU64,
}

impl WarmUp {
    /// Without a warm-up time, dbench measures from the start.
    fn new(len: Duration, measure: Duration, clients: usize) -> WarmUp {
        WarmUp {
            start: Instant::now(),
            len,
            measure,
            clients,
            active: AtomicUsize::new(0),
            ended_ns: AtomicU64::new(if len.is_zero() { 0 } else { u64::MAX }),
        }
    }

    /// Whether the warm-up is over (ending it now if its conditions hold).
    fn over(&self) -> bool {
        if self.ended_ns.load(Ordering::Acquire) != u64::MAX {
            return true;
        }
        let el = self.start.elapsed();
        if el < self.len || self.active.load(Ordering::Acquire) < self.clients {
            return false;
        }
        let _ = self.ended_ns.compare_exchange(
            u64::MAX,
            el.as_nanos() as u64,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        true
    }

    /// When the measured phase began, after `start`.
    fn ended(&self) -> Option<Duration> {
        let ns = self.ended_ns.load(Ordering::Acquire);
        (ns != u64::MAX).then(|| Duration::from_nanos(ns))
    }

    /// Whether the measured phase is over.
    fn time_up(&self) -> bool {
        self.ended().is_some_and(|e| self.start.elapsed() >= e + self.measure)
    }

    /// Whether a client should go on.
    fn going(&self, w: &Worker) -> bool {
        w.running() && !self.time_up()
    }
}

/// Forget what a client measured during the warm-up.
fn reset(w: &mut Worker) {
    w.lat = Latency::new();
    w.fsync = Latency::new();
    w.ops = 0;
    w.bytes = 0;
}

/// Wait until `at` seconds after `since` (a timestamped loadfile line), in slices so the
/// end of the run is not missed.
fn pace(w: &Worker, warm: &WarmUp, since: Instant, at: f64) {
    let due = Duration::from_secs_f64(at);
    while warm.going(w) {
        let el = since.elapsed();
        if el >= due {
            break;
        }
        std::thread::sleep((due - el).min(Duration::from_millis(50)));
    }
}

/// Run the replay: one client per thread; the warm-up, then [`Params::duration`] measured.
pub fn run(t: &dyn Target, p: &Params, opts: &DbenchOptions) -> io::Result<RunResult> {
    let lines = load(&p.dbench_loadfile)?;
    let _ = t.mkdir("clients");
    let mismatches = Mutex::new(0u64);
    let loops = Mutex::new(0u64);
    let warmup = opts.warmup.unwrap_or(Duration::from_secs(p.duration.as_secs() / 5));
    let warm = WarmUp::new(warmup, p.duration, p.threads);
    // The clients stop themselves `duration` after the warm-up ended; this limit only ends a
    // run whose warm-up never does (dbench itself would run on for ever).
    let limit = 2 * (warm.len + p.duration) + Duration::from_secs(1);
    let mut res = run_workers(t, "dbench", p.threads, limit, p.seed, |w| {
        let mut c = Client {
            t,
            base: format!("clients/client{}", w.id),
            handles: HashMap::new(),
            opts,
            mismatches: 0,
        };
        let mut buf = vec![0u8; 1 << 16];
        let zeros = vec![0u8; 1 << 16];
        let (mut warming, mut active) = (warm.ended().is_none(), false);
        'outer: while warm.going(w) {
            // dbench resets its clock for timestamped lines at every pass over the loadfile.
            let pass = Instant::now();
            for line in lines.iter() {
                if !warm.going(w) {
                    break 'outer;
                }
                if line.at > 0.0 {
                    pace(w, &warm, pass, line.at);
                    if !warm.going(w) {
                        break 'outer;
                    }
                }
                step(&mut c, w, &line.op, &mut buf, &zeros)?;
                if warming {
                    if !active && w.bytes > 0 {
                        active = true;
                        warm.active.fetch_add(1, Ordering::AcqRel);
                    }
                    if warm.over() {
                        warming = false;
                        reset(w);
                    }
                }
            }
            *loops.lock() += 1;
        }
        c.close_all();
        *mismatches.lock() += c.mismatches;
        Ok(())
    })?;
    // Figures of the measured phase only; if the warm-up never ended (a client that never
    // moved a byte), of the whole run.
    let skipped = warm.ended().map_or(0.0, |d| d.as_secs_f64());
    let secs = (res.secs - skipped).max(1e-6);
    res.secs = secs;
    res.ops_per_sec = res.ops as f64 / secs;
    res.mb_per_sec = res.bytes as f64 / secs / 1e6;
    res.extra.push(("warmup_s".into(), skipped));
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
                let h = match (*disposition, st) {
                    (_, Some(s)) if s.is_dir => return Ok(Ok(Handle::Dir(p.clone()))),
                    (FILE_OVERWRITE | FILE_OVERWRITE_IF, _) => t.create(&p),
                    (FILE_CREATE, None) => t.create(&p),
                    _ => t.open(&p),
                };
                if let Ok(fh) = h {
                    // dbench fstats every handle it opens.
                    let _ = t.size(fh);
                }
                Ok(h.map(Handle::File))
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
        Op::Sleep(d) => std::thread::sleep(*d),
        Op::Nop => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(line: &str) -> Option<Op> {
        parse_line(line).map(|l| l.op)
    }

    #[test]
    fn parses_lines() {
        assert!(matches!(
            op(r#"NTCreateX "\clients\client1\~dmtmp\WORD\A B.DOC" 0x40 0x2 9938 NT_STATUS_OK"#),
            Some(Op::Create { options: 0x40, disposition: 2, fnum: 9938, ok: true, path: LPath::Client(p) })
                if p == "/~dmtmp/WORD/A B.DOC"
        ));
        assert!(matches!(op("WriteX 9938 65534 1 1 NT_STATUS_OK"), Some(Op::Write { size: 1, .. })));
        assert!(matches!(
            op(r#"Unlink "\clients\client1\x" 0x6 NT_STATUS_NO_SUCH_FILE"#),
            Some(Op::Unlink(_, false))
        ));
        assert!(
            matches!(op(r#"Mkdir "\clients" NT_STATUS_OK"#), Some(Op::Mkdir(LPath::Root(r))) if r == "clients")
        );
        assert!(
            matches!(op("Sleep 1500 NT_STATUS_OK"), Some(Op::Sleep(d)) if d == Duration::from_micros(1500))
        );
    }

    #[test]
    fn skips_and_paces_as_dbench_does() {
        // No status as the last word, a comment, a lone word: skipped.
        assert!(parse_line("Close 9938").is_none());
        assert!(parse_line("# Close 9938 NT_STATUS_OK").is_none());
        assert!(parse_line("Close").is_none());
        // A leading timestamp paces the line; a 0x status counts as success when zero.
        let l = parse_line("12.500 ReadX 9938 0 4096 4096 0x00000000").unwrap();
        assert_eq!(l.at, 12.5);
        assert!(matches!(l.op, Op::Read { size: 4096, .. }));
        assert_eq!(parse_line("Flush 9938 NT_STATUS_OK").unwrap().at, 0.0);
        assert!(matches!(op("Rmdir \"\\clients\\client1\\d\" 0x0"), Some(Op::Rmdir(_, true))));
    }

    #[test]
    fn warm_up_waits_for_every_client() {
        let w = WarmUp::new(Duration::ZERO, Duration::from_secs(60), 2);
        assert_eq!(w.ended(), Some(Duration::ZERO), "no warm-up: measured from the start");
        let w = WarmUp::new(Duration::from_nanos(1), Duration::from_secs(60), 2);
        std::thread::sleep(Duration::from_millis(1));
        assert!(!w.over());
        w.active.fetch_add(1, Ordering::AcqRel);
        assert!(!w.over());
        w.active.fetch_add(1, Ordering::AcqRel);
        assert!(w.over());
        assert!(w.ended().is_some());
        assert!(!w.time_up());
        let w = WarmUp::new(Duration::from_secs(60), Duration::ZERO, 1);
        w.active.fetch_add(1, Ordering::AcqRel);
        assert!(!w.over() && w.ended().is_none() && !w.time_up());
    }
}
