//! dbench: replay of the dbench package's `client.txt` loadfile, as dbench 4.0's `fileio`
//! backend does it, with dbench's own accounting.
//!
//! The loadfile is read from the installed package (`apt-get install dbench` puts it in
//! [`DEFAULT_LOADFILE`]); it is not part of this repository. Each thread is one client with
//! its own directory `clients/client<N>` (`N` from 0, as dbench numbers its children), looping
//! over the loadfile until the time is up; paths of the loadfile below `\clients\client1` are
//! the client's own, any other path (`\clients`) is shared. Semantics follow dbench 4.0's
//! `child.c` and `fileio.c` (the version Debian ships, `dbench version 4.00`):
//!
//! * every named operation first *resolves* the name: `stat`, and when that fails a scan of
//!   the parent directory (dbench's case-insensitive name resolution simulation;
//!   [`DbenchOptions::resolve`] off is `--no-resolve`);
//! * `NTCreateX` opens `O_RDWR`, adding `O_CREAT` for `FILE_CREATE` (an existing file is
//!   opened, not truncated) and `O_CREAT|O_TRUNC` for `FILE_OVERWRITE(_IF)`, and `fstat`s
//!   the handle it keeps; `FILE_OPEN_IF` adds nothing, as in dbench. With the directory
//!   create option, or on a name that is a directory, the handle is the directory (made
//!   first when missing); a directory handle is a path, not an open descriptor;
//! * `Close` closes; `ReadX` and `WriteX` are `pread`/`pwrite` of the line's size at its
//!   offset (zeros); `Flush` is `fsync` of the handle;
//! * `--sync-dir` ([`DbenchOptions::sync_dir`], on by default as in the CJFS paper): after
//!   every `Unlink`, `Rmdir` and `Rename`, whether it succeeded or not, the parent directory
//!   (of the new name for `Rename`) is opened read-only and `fdatasync`ed
//!   ([`Target::datasync_dir`], dbench's `sync_parent`); without `--sync` (`O_SYNC`) or
//!   `--fsync` nothing else syncs;
//! * `Deltree` unlinks every file below a directory (directories stay); `Mkdir` ignores
//!   failure;
//! * `QUERY_PATH_INFORMATION` resolves the name, `QUERY_FILE_INFORMATION` `fstat`s the
//!   handle, `QUERY_FS_INFORMATION` is `statvfs`, `SET_FILE_INFORMATION` `fstat`s the handle
//!   and sets its times (dbench moves them back by a few seconds through the name with
//!   `utime`; the replay sets them to now through the handle, the same inode update),
//!   `FIND_FIRST` resolves and, when the pattern has a wildcard, lists the directory;
//! * `LockX`/`UnlockX` are counted but issue no call (dbench takes and drops an uncontended
//!   `fcntl` lock: 258 of the 458,344 lines); `Sleep` sleeps;
//! * a line may start with a timestamp (seconds since the start of the pass): the client then
//!   waits for that time, as dbench does without `--target-rate`; the package's `client.txt`
//!   has no timestamps, so it runs flat out;
//! * lines whose last word is not a status (`NT_STATUS_...` or `0x...`) are skipped; results
//!   other than the status the line expects are counted (`status_mismatches`; dbench prints
//!   them and, for unlink, rmdir and rename, stops), as are reads shorter than the line's
//!   size (`short_reads`) and failed syncs (`sync_errors`), which dbench prints and ignores.
//!
//! Accounting is dbench's (its parent process's one-second `SIGALRM`, emulated by a clock
//! thread):
//!
//! * only the bytes *requested* by `ReadX` and `WriteX` lines count, MB/s is 10^6 B/s;
//! * the run starts with the **warm-up** ([`DbenchOptions::warmup`], by default `-t T`'s
//!   `T/5` whole seconds, none under 5 s); it ends at the first tick past that time at which
//!   every client has moved some bytes. Bytes, lines and latencies of the warm-up are
//!   dropped. This matters: `client.txt` opens with 22 MB of filler writes and only 38 syncs
//!   in its first thousand lines, far denser in bytes than the rest, and a short run may not
//!   get much further;
//! * the measured phase lasts [`Params::duration`] (dbench's `-t`), ticking every second
//!   from the end of the warm-up (each tick re-armed after the previous one, so the ticks
//!   drift late as `alarm(1)` does). Each tick inside the phase computes bytes / elapsed; the
//!   tick past the time limit stops the clients. The reported throughput is the **last
//!   tick's**, as dbench's `Throughput` line is: for `-t 10` the bytes of the first ~9 s
//!   over ~9 s. `mb_per_sec`, `ops_per_sec`, `bytes`, `ops` and `secs` are that window's
//!   (`ops` = timed loadfile lines); when the phase is too short for a tick (under 2 s) they
//!   cover the whole measured phase instead;
//! * latencies are dbench's per line, from the start of the operation to its end, including
//!   name resolution and the `--sync-dir` sync, over the whole measured phase; per operation
//!   type they are reported as dbench's table is (`<Op>_count`, `<Op>_avg_ms`,
//!   `<Op>_max_ms` in `extra`, with dbench's names: `NTCreateX`, `Close`, `Rename`, `Unlink`,
//!   `Deltree`, `Rmdir`, `Mkdir`, `Qpathinfo`, `Qfileinfo`, `Qfsinfo`, `Sfileinfo`, `Find`,
//!   `WriteX`, `ReadX`, `LockX`, `UnlockX`, `Flush`). The fsync histogram holds `Flush` and
//!   the `--sync-dir` syncs. CPU time and the journal and device figures of cjfs targets
//!   cover the whole run; `warmup_s` and `measured_s` give the phases' lengths.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Params, RunResult, Worker, run_workers};
use crate::hist::Latency;
use crate::target::{Fh, Stat, Target};

/// Where the dbench package installs its loadfile.
pub const DEFAULT_LOADFILE: &str = "/usr/share/dbench/client.txt";

/// Replay options.
#[derive(Debug, Clone)]
pub struct DbenchOptions {
    /// `fdatasync` the parent directory after unlink, rmdir and rename (`dbench --sync-dir`).
    pub sync_dir: bool,
    /// Simulate name resolution (dbench's default; `--no-resolve` turns it off).
    pub resolve: bool,
    /// Minimum warm-up before the measured [`Params::duration`], left out of every figure
    /// but CPU time and the journal and device statistics; `None` is dbench's default, a
    /// fifth of the measured time in whole seconds (`dbench -t T` warms up for `T/5`
    /// seconds, integer division). Either way the warm-up lasts until every client has read
    /// or written some bytes, and ends on a one-second tick.
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

/// One loadfile operation.
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
    Lock(bool),
    Sleep(Duration),
}

/// dbench's operation names, in the order of its latency table.
const OP_NAMES: [&str; 17] = [
    "NTCreateX",
    "Close",
    "Rename",
    "Unlink",
    "Deltree",
    "Rmdir",
    "Mkdir",
    "Qpathinfo",
    "Qfileinfo",
    "Qfsinfo",
    "Sfileinfo",
    "Find",
    "WriteX",
    "ReadX",
    "LockX",
    "UnlockX",
    "Flush",
];

impl Op {
    /// Index in [`OP_NAMES`]; `None` for `Sleep`, which dbench does not time.
    fn kind(&self) -> Option<usize> {
        Some(match self {
            Op::Create { .. } => 0,
            Op::Close(_) => 1,
            Op::Rename(..) => 2,
            Op::Unlink(..) => 3,
            Op::Deltree(_) => 4,
            Op::Rmdir(..) => 5,
            Op::Mkdir(_) => 6,
            Op::QueryPath(_) => 7,
            Op::QueryFile(_) => 8,
            Op::QueryFs => 9,
            Op::SetFile(_) => 10,
            Op::FindFirst(..) => 11,
            Op::Write { .. } => 12,
            Op::Read { .. } => 13,
            Op::Lock(true) => 14,
            Op::Lock(false) => 15,
            Op::Flush(_) => 16,
            Op::Sleep(_) => return None,
        })
    }
}

/// One loadfile line: its operation and, when the line starts with a timestamp, the time
/// since the start of the pass at which dbench issues it (seconds; 0 = unpaced).
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
        // FIND_FIRST name level maxcnt count status
        "FIND_FIRST" => Op::FindFirst(p(1)?, n(3).unwrap_or(u64::MAX) as usize),
        "Sleep" => Op::Sleep(Duration::from_micros(n(1)?)),
        "LockX" => Op::Lock(true),
        "UnlockX" => Op::Lock(false),
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

/// Count, total and maximum latency of one operation type (dbench's `struct op`).
#[derive(Debug, Clone, Copy, Default)]
struct OpStat {
    count: u64,
    total: Duration,
    max: Duration,
}

impl OpStat {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.total += d;
        self.max = self.max.max(d);
    }
    fn merge(&mut self, o: &OpStat) {
        self.count += o.count;
        self.total += o.total;
        self.max = self.max.max(o.max);
    }
}

type OpTable = [OpStat; OP_NAMES.len()];

/// What a client counts besides the worker's figures.
#[derive(Debug, Default)]
struct Tally {
    ops: OpTable,
    mismatches: u64,
    short_reads: u64,
    sync_errors: u64,
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        for (a, b) in self.ops.iter_mut().zip(o.ops.iter()) {
            a.merge(b);
        }
        self.mismatches += o.mismatches;
        self.short_reads += o.short_reads;
        self.sync_errors += o.sync_errors;
    }
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
    tally: Tally,
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
    fn resolve(&self, p: &str) -> Option<Stat> {
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
            self.tally.mismatches += 1;
        }
    }

    /// dbench's `sync_parent` (with `--sync-dir`): `fdatasync` of the parent directory,
    /// failures counted and otherwise ignored.
    fn sync_parent(&mut self, w: &mut Worker, p: &str) {
        if !self.opts.sync_dir {
            return;
        }
        let s = Instant::now();
        let r = self.t.datasync_dir(parent(p));
        w.fsync.record(s.elapsed());
        if r.is_err() {
            self.tally.sync_errors += 1;
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

    /// The open file behind a handle; a handle the loadfile never opened (or whose open
    /// failed) is a mismatch, as dbench's `find_handle` would report it.
    fn file(&mut self, fnum: u32) -> Option<Fh> {
        match self.handles.get(&fnum) {
            Some(Handle::File(fh)) => Some(*fh),
            Some(Handle::Dir(_)) => None,
            None => {
                self.tally.mismatches += 1;
                None
            }
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

/// One window of the measured phase, as a tick of dbench's clock saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    secs: f64,
    bytes: u64,
    ops: u64,
}

/// The parts of [`Clock`] its ticks change.
#[derive(Debug)]
struct ClockState {
    /// dbench's `tv_start`: the start of the run, then the end of the warm-up.
    origin: Instant,
    /// Whether a warm-up is still to end (dbench's `options.warmup > 0`).
    warming: bool,
    /// Bytes and lines done before the measured phase.
    base_bytes: u64,
    base_ops: u64,
    /// The last tick's window of the measured phase (dbench's `throughput`).
    sample: Option<Sample>,
}

/// dbench's parent process: ticks once a second (its `SIGALRM` handler `sig_alarm`) to end
/// the warm-up, take the throughput and stop the clients; the clients add their bytes and
/// lines to it.
struct Clock {
    start: Instant,
    clients: usize,
    warmup: Duration,
    limit: Duration,
    /// Clients that have read or written some bytes.
    active: AtomicUsize,
    /// `ReadX`/`WriteX` bytes and timed lines of every client since the start.
    bytes: AtomicU64,
    ops: AtomicU64,
    /// Nanoseconds after `start` at which the measured phase began; `u64::MAX` before.
    measured_ns: AtomicU64,
    /// The clients are to stop (dbench's `children[i].done`).
    done: AtomicBool,
    /// The workers have returned: the clock thread is to stop too.
    finished: AtomicBool,
    state: Mutex<ClockState>,
}

impl Clock {
    /// Without a warm-up time, dbench measures from the start.
    fn new(warmup: Duration, limit: Duration, clients: usize) -> Clock {
        let start = Instant::now();
        Clock {
            start,
            clients,
            warmup,
            limit,
            active: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            measured_ns: AtomicU64::new(if warmup.is_zero() { 0 } else { u64::MAX }),
            done: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            state: Mutex::new(ClockState {
                origin: start,
                warming: !warmup.is_zero(),
                base_bytes: 0,
                base_ops: 0,
                sample: None,
            }),
        }
    }

    /// One tick at `now` (dbench's `sig_alarm`); false once it has stopped the clients.
    fn tick(&self, now: Instant) -> bool {
        let mut st = self.state.lock();
        let t = now.saturating_duration_since(st.origin);
        let all_active = self.active.load(Ordering::Acquire) >= self.clients;
        if all_active && st.warming && t > self.warmup {
            // The warm-up is over: measure from now, without what was done so far.
            st.origin = now;
            st.warming = false;
            st.base_bytes = self.bytes.load(Ordering::Acquire);
            st.base_ops = self.ops.load(Ordering::Acquire);
            let ns = now.saturating_duration_since(self.start).as_nanos() as u64;
            self.measured_ns.store(ns, Ordering::Release);
            return true;
        }
        let in_warmup = !all_active || (st.warming && t < self.warmup);
        if !in_warmup && t > self.limit {
            self.done.store(true, Ordering::Release);
            return false;
        }
        if !in_warmup && t >= Duration::from_secs(1) {
            st.sample = Some(Sample {
                secs: t.as_secs_f64(),
                bytes: self.bytes.load(Ordering::Acquire) - st.base_bytes,
                ops: self.ops.load(Ordering::Acquire) - st.base_ops,
            });
        }
        true
    }

    /// Tick every second until the clients are stopped or have returned; each tick is
    /// scheduled a second after the previous one ended, as `alarm(1)` re-armed in the
    /// handler is.
    fn run(&self) {
        let mut next = self.start + Duration::from_secs(1);
        loop {
            loop {
                if self.finished.load(Ordering::Acquire) {
                    return;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                std::thread::sleep((next - now).min(Duration::from_millis(20)));
            }
            if !self.tick(Instant::now()) {
                return;
            }
            next = Instant::now() + Duration::from_secs(1);
        }
    }

    /// When the measured phase began, after `start`.
    fn measured_since(&self) -> Option<Duration> {
        let ns = self.measured_ns.load(Ordering::Acquire);
        (ns != u64::MAX).then(|| Duration::from_nanos(ns))
    }

    /// Whether a client should stop: the clock said so, the measured time is up (which
    /// also ends runs shorter than a tick), or the run's limit passed.
    fn stop(&self, w: &Worker) -> bool {
        self.done.load(Ordering::Acquire)
            || !w.running()
            || self.measured_since().is_some_and(|m| self.start.elapsed() >= m + self.limit)
    }

    /// Count a client's bytes, becoming active with the first.
    fn moved(&self, bytes: u64, active: &mut bool) {
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        if !*active {
            *active = true;
            self.active.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Forget what a client measured during the warm-up (dbench clears its op statistics).
fn reset(w: &mut Worker, tally: &mut Tally) {
    w.lat = Latency::new();
    w.fsync = Latency::new();
    w.ops = 0;
    w.bytes = 0;
    tally.ops = OpTable::default();
}

/// Wait until `at` seconds after `since` (a timestamped loadfile line), in slices so the
/// end of the run is not missed.
fn pace(w: &Worker, clock: &Clock, since: Instant, at: f64) {
    let due = Duration::from_secs_f64(at);
    while !clock.stop(w) {
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
    let total = Mutex::new(Tally::default());
    let loops = AtomicU64::new(0);
    let warmup = opts.warmup.unwrap_or(Duration::from_secs(p.duration.as_secs() / 5));
    let clock = Clock::new(warmup, p.duration, p.threads);
    // The clients stop when the clock says so; this limit only ends a run whose warm-up
    // never does (a client that never moves a byte; dbench itself would run on for ever).
    let limit = 2 * (warmup + p.duration) + Duration::from_secs(2);
    let (res, end) = std::thread::scope(|s| {
        s.spawn(|| clock.run());
        let res = run_workers(t, "dbench", p.threads, limit, p.seed, |w| {
            let mut c = Client {
                t,
                base: format!("clients/client{}", w.id),
                handles: HashMap::new(),
                opts,
                tally: Tally::default(),
            };
            let mut buf = vec![0u8; 1 << 16];
            let zeros = vec![0u8; 1 << 16];
            let (mut measuring, mut active) = (clock.measured_since().is_some(), false);
            let r = (|| -> io::Result<()> {
                'outer: while !clock.stop(w) {
                    // dbench resets its clock for timestamped lines at every pass.
                    let pass = Instant::now();
                    for line in lines.iter() {
                        if clock.stop(w) {
                            break 'outer;
                        }
                        if line.at > 0.0 {
                            pace(w, &clock, pass, line.at);
                            if clock.stop(w) {
                                break 'outer;
                            }
                        }
                        let bytes = step(&mut c, w, &line.op, &mut buf, &zeros)?;
                        if line.op.kind().is_some() {
                            clock.ops.fetch_add(1, Ordering::AcqRel);
                        }
                        if bytes > 0 {
                            clock.moved(bytes, &mut active);
                        }
                        if !measuring && clock.measured_since().is_some() {
                            measuring = true;
                            reset(w, &mut c.tally);
                        }
                    }
                    loops.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })();
            c.close_all();
            total.lock().merge(&c.tally);
            r
        });
        let end = Instant::now();
        clock.finished.store(true, Ordering::Release);
        (res, end)
    });
    let mut res = res?;
    let measured = clock.measured_since();
    let st = clock.state.lock();
    let window = st.sample.unwrap_or_else(|| {
        // No tick inside the measured phase: the whole of it (or of the run, if the
        // warm-up never ended).
        let from = clock.start + measured.unwrap_or(Duration::ZERO);
        Sample {
            secs: end.saturating_duration_since(from).as_secs_f64(),
            bytes: clock.bytes.load(Ordering::Acquire) - st.base_bytes,
            ops: clock.ops.load(Ordering::Acquire) - st.base_ops,
        }
    });
    let secs = window.secs.max(1e-6);
    res.secs = secs;
    res.ops = window.ops;
    res.bytes = window.bytes;
    res.ops_per_sec = window.ops as f64 / secs;
    res.mb_per_sec = window.bytes as f64 / secs / 1e6;
    let warm_s = measured.map_or(0.0, |d| d.as_secs_f64());
    let total = total.lock();
    res.extra.push(("warmup_s".into(), warm_s));
    res.extra.push(("measured_s".into(), end.saturating_duration_since(clock.start).as_secs_f64() - warm_s));
    res.extra.push(("status_mismatches".into(), total.mismatches as f64));
    res.extra.push(("short_reads".into(), total.short_reads as f64));
    res.extra.push(("sync_errors".into(), total.sync_errors as f64));
    res.extra.push(("loadfile_loops".into(), loops.load(Ordering::Relaxed) as f64));
    for (name, o) in OP_NAMES.iter().zip(total.ops.iter()).filter(|(_, o)| o.count > 0) {
        res.extra.push((format!("{name}_count"), o.count as f64));
        res.extra.push((format!("{name}_avg_ms"), o.total.as_secs_f64() * 1e3 / o.count as f64));
        res.extra.push((format!("{name}_max_ms"), o.max.as_secs_f64() * 1e3));
    }
    Ok(res)
}

fn grow(buf: &mut Vec<u8>, n: usize) {
    if buf.len() < n {
        buf.resize(n, 0);
    }
}

/// Do one line; returns the bytes it counts for throughput (`ReadX` and `WriteX` sizes).
fn step(c: &mut Client<'_>, w: &mut Worker, op: &Op, buf: &mut Vec<u8>, zeros: &[u8]) -> io::Result<u64> {
    let Some(kind) = op.kind() else {
        if let Op::Sleep(d) = op {
            std::thread::sleep(*d);
        }
        return Ok(0);
    };
    let t = c.t;
    let s = Instant::now();
    let mut bytes = 0u64;
    match op {
        Op::Deltree(p) => {
            let p = c.path(p);
            c.deltree(&p);
        }
        Op::Mkdir(p) => {
            let p = c.path(p);
            c.resolve(&p);
            let _ = t.mkdir(&p);
        }
        Op::Rmdir(p, ok) => {
            let p = c.path(p);
            c.resolve(&p);
            let r = t.rmdir(&p);
            c.check(r, *ok);
            c.sync_parent(w, &p);
        }
        Op::Create { path, options, disposition, fnum, ok } => {
            let p = c.path(path);
            let st = c.resolve(&p);
            let h = if options & FILE_DIRECTORY_FILE != 0 || st.is_some_and(|s| s.is_dir) {
                // dbench makes the directory (ignoring failure) and opens it read-only.
                if options & FILE_DIRECTORY_FILE != 0 && st.is_none() {
                    let _ = t.mkdir(&p);
                }
                match t.stat(&p) {
                    Ok(s) if s.is_dir => Ok(Handle::Dir(p.clone())),
                    Ok(_) => Err(io::Error::from(io::ErrorKind::NotADirectory)),
                    Err(e) => Err(e),
                }
            } else {
                match (*disposition, st) {
                    (FILE_OVERWRITE | FILE_OVERWRITE_IF, _) | (FILE_CREATE, None) => t.create(&p),
                    // O_CREAT on an existing file opens it; other dispositions only open.
                    _ => t.open(&p),
                }
                .map(Handle::File)
            };
            match (h, ok) {
                (Ok(h), true) => {
                    if let Handle::File(fh) = h {
                        // dbench fstats every handle it keeps.
                        let _ = t.size(fh);
                    }
                    if let Some(Handle::File(old)) = c.handles.insert(*fnum, h) {
                        let _ = t.close(old);
                    }
                }
                (Ok(h), false) => {
                    c.tally.mismatches += 1;
                    if let Handle::File(fh) = h {
                        let _ = t.close(fh);
                    }
                }
                (Err(_), true) => c.tally.mismatches += 1,
                (Err(_), false) => {}
            }
        }
        Op::Close(fnum) => match c.handles.remove(fnum) {
            Some(Handle::File(fh)) => {
                let _ = t.close(fh);
            }
            Some(Handle::Dir(_)) => {}
            None => c.tally.mismatches += 1,
        },
        Op::Read { fnum, off, size } => {
            if let Some(fh) = c.file(*fnum) {
                grow(buf, *size);
                match t.read_at(fh, *off, &mut buf[..*size]) {
                    Ok(n) if n == *size => {}
                    _ => c.tally.short_reads += 1,
                }
                bytes = *size as u64;
            }
        }
        Op::Write { fnum, off, size } => {
            if let Some(fh) = c.file(*fnum) {
                // dbench stops on a failed write; so does the replay.
                let mut done = 0;
                while done < *size {
                    let n = (*size - done).min(zeros.len());
                    t.write_at(fh, off + done as u64, &zeros[..n])?;
                    done += n;
                }
                bytes = *size as u64;
            }
        }
        Op::Flush(fnum) => {
            let r = match c.handles.get(fnum) {
                Some(Handle::File(fh)) => Some(t.fsync(*fh, false)),
                Some(Handle::Dir(d)) => Some(t.fsync_dir(d)),
                None => {
                    c.tally.mismatches += 1;
                    None
                }
            };
            if let Some(r) = r {
                w.fsync.record(s.elapsed());
                if r.is_err() {
                    c.tally.sync_errors += 1;
                }
            }
        }
        Op::Unlink(p, ok) => {
            let p = c.path(p);
            c.resolve(&p);
            let r = t.unlink(&p);
            c.check(r, *ok);
            c.sync_parent(w, &p);
        }
        Op::Rename(a, b, ok) => {
            let (a, b) = (c.path(a), c.path(b));
            c.resolve(&a);
            c.resolve(&b);
            let r = t.rename(&a, &b);
            c.check(r, *ok);
            c.sync_parent(w, &b);
        }
        Op::QueryPath(p) => {
            let p = c.path(p);
            c.resolve(&p);
        }
        Op::QueryFile(fnum) => match c.handles.get(fnum) {
            Some(Handle::File(fh)) => {
                let _ = t.size(*fh);
            }
            Some(Handle::Dir(d)) => {
                let _ = t.stat(d);
            }
            None => c.tally.mismatches += 1,
        },
        Op::QueryFs => {
            let _ = t.statfs();
        }
        Op::SetFile(fnum) => match c.handles.get(fnum) {
            Some(Handle::File(fh)) => {
                let _ = t.size(*fh);
                let _ = t.touch(*fh);
            }
            Some(Handle::Dir(d)) => {
                let _ = t.stat(d);
            }
            None => c.tally.mismatches += 1,
        },
        Op::FindFirst(p, max) => {
            let p = c.path(p);
            c.resolve(&p);
            let name = p.rsplit('/').next().unwrap_or("");
            if *max > 0 && name.contains(['<', '>', '*', '?', '"']) {
                let _ = t.list_dir(parent(&p));
            }
        }
        Op::Lock(_) | Op::Sleep(_) => {}
    }
    let d = s.elapsed();
    w.lat.record(d);
    w.ops += 1;
    w.bytes += bytes;
    c.tally.ops[kind].add(d);
    Ok(bytes)
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
        assert!(matches!(
            op(r#"FIND_FIRST "\clients\client1\FILLER.*" 260 1366 0 NT_STATUS_NO_SUCH_FILE"#),
            Some(Op::FindFirst(_, 1366))
        ));
        assert!(matches!(op("LockX 9938 0 1 NT_STATUS_OK"), Some(Op::Lock(true))));
        assert!(matches!(op("UnlockX 9938 0 1 NT_STATUS_OK"), Some(Op::Lock(false))));
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
    fn every_op_has_dbench_name_but_sleep() {
        assert_eq!(op("Sleep 10 NT_STATUS_OK").and_then(|o| o.kind()), None);
        let k = |l: &str| op(l).and_then(|o| o.kind()).map(|i| OP_NAMES[i]);
        assert_eq!(k("Flush 1 NT_STATUS_OK"), Some("Flush"));
        assert_eq!(k("QUERY_FS_INFORMATION 1 NT_STATUS_OK"), Some("Qfsinfo"));
        assert_eq!(k(r#"FIND_FIRST "\a\*" 260 1366 0 NT_STATUS_OK"#), Some("Find"));
        assert_eq!(k("ReadX 1 0 10 10 NT_STATUS_OK"), Some("ReadX"));
    }

    #[test]
    fn no_warm_up_measures_from_the_start() {
        let c = Clock::new(Duration::ZERO, Duration::from_secs(3), 1);
        assert_eq!(c.measured_since(), Some(Duration::ZERO));
        // Nothing is sampled while a client has moved no bytes (dbench's in_warmup).
        assert!(c.tick(c.start + Duration::from_millis(1001)));
        assert_eq!(c.state.lock().sample, None);
        let mut active = false;
        c.moved(4_000_000, &mut active);
        assert!(c.tick(c.start + Duration::from_secs(2)));
        assert_eq!(c.state.lock().sample, Some(Sample { secs: 2.0, bytes: 4_000_000, ops: 0 }));
        assert!(!c.tick(c.start + Duration::from_millis(3001)), "the tick past -t stops the run");
        assert!(c.done.load(Ordering::Acquire));
    }

    #[test]
    fn warm_up_ends_on_a_tick_once_every_client_moved_bytes() {
        let c = Clock::new(Duration::from_secs(2), Duration::from_secs(3), 2);
        let at = |ms: u64| c.start + Duration::from_millis(ms);
        assert_eq!(c.measured_since(), None);
        let (mut a, mut b) = (false, false);
        c.moved(10, &mut a);
        assert!(c.tick(at(1000)) && c.tick(at(2001)));
        assert_eq!(c.measured_since(), None, "one client has not moved a byte yet");
        c.moved(10, &mut b);
        c.moved(10, &mut b);
        c.ops.fetch_add(7, Ordering::AcqRel);
        assert!(c.tick(at(3002)));
        assert_eq!(c.measured_since(), Some(Duration::from_millis(3002)));
        // The warm-up's bytes and lines are left out; each tick takes the window so far.
        c.moved(1000, &mut a);
        c.ops.fetch_add(3, Ordering::AcqRel);
        assert!(c.tick(at(4002)));
        assert_eq!(c.state.lock().sample, Some(Sample { secs: 1.0, bytes: 1000, ops: 3 }));
        c.moved(1000, &mut a);
        assert!(c.tick(at(5002)) && c.tick(at(6002)));
        assert_eq!(c.state.lock().sample, Some(Sample { secs: 3.0, bytes: 2000, ops: 3 }));
        // The tick past the limit stops the clients and keeps the last window.
        c.moved(5000, &mut b);
        assert!(!c.tick(at(6003)));
        assert_eq!(c.state.lock().sample.map(|s| s.bytes), Some(2000));
    }
}
