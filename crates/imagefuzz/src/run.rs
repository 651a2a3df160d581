//! Running one subprocess with a timeout, bounded output and resource limits.
//!
//! Every command runs in its own process group (killed as a whole on timeout) with the soft
//! limits `RLIMIT_CORE = 0`, `RLIMIT_FSIZE` (a `get` of a file with a huge `i_size` dies of
//! `SIGXFSZ` instead of filling the disk) and `RLIMIT_AS` (a runaway allocation aborts
//! instead of exhausting the machine). The limits are set once on the fuzzer's own process
//! ([`limit_self`]) and inherited: a `pre_exec` hook would force `fork` of the whole fuzzer
//! (its page tables hold every seed image) for each of the thousands of commands, where
//! without one the standard library spawns with `posix_spawn`. Standard error is read to the end but only its first
//! [`STDERR_KEEP`] bytes are kept; standard output is discarded, sent to `/dev/full`, or
//! read up to a limit, after which the pipe is closed (so a command streaming forever gets
//! `EPIPE` rather than the fuzzer reading forever).

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use crate::error::{FuzzError, FuzzResult};

/// Bytes of standard error kept.
pub const STDERR_KEEP: usize = 64 * 1024;
/// Bytes of standard output kept (the rest is counted, then dropped).
pub const STDOUT_KEEP: usize = 4096;
/// `RLIMIT_FSIZE` of a judged command.
pub const FSIZE_LIMIT: u64 = 512 << 20;
/// `RLIMIT_AS` of a judged command.
pub const AS_LIMIT: u64 = 8 << 30;
/// How long to wait for the output pipes to reach end-of-file once the command exited.
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// Where a command's standard output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdoutMode {
    /// `/dev/null`.
    Null,
    /// `/dev/full`: every write fails with `ENOSPC`.
    DevFull,
    /// A pipe read up to `limit` bytes, then closed.
    Capture {
        /// Bytes read before the pipe is closed.
        limit: u64,
    },
}

/// A command to run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Where standard output goes.
    pub stdout: StdoutMode,
    /// Wall-clock limit; the process group is killed after it.
    pub timeout: Duration,
}

impl RunSpec {
    /// `program args...`, output captured up to 1 MiB, 20 s timeout.
    pub fn new<I, S>(program: impl AsRef<Path>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        RunSpec {
            program: program.as_ref().to_path_buf(),
            args: args.into_iter().map(Into::into).collect(),
            stdout: StdoutMode::Capture { limit: 1 << 20 },
            timeout: Duration::from_secs(20),
        }
    }

    /// Set where standard output goes.
    pub fn stdout(mut self, mode: StdoutMode) -> Self {
        self.stdout = mode;
        self
    }

    /// Set the timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// The command line, for messages (the program by its file name).
    pub fn display(&self) -> String {
        let prog = self.program.file_name().unwrap_or(self.program.as_os_str()).to_string_lossy();
        let mut s = prog.into_owned();
        for a in &self.args {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        match self.stdout {
            StdoutMode::Null => s.push_str(" >/dev/null"),
            StdoutMode::DevFull => s.push_str(" >/dev/full"),
            StdoutMode::Capture { .. } => {}
        }
        s
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal (not ours) killed it.
    Signal(i32),
    /// It ran past its timeout and was killed.
    Timeout,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit {c}"),
            Exit::Signal(s) => write!(f, "signal {s} ({})", signal_name(*s)),
            Exit::Timeout => write!(f, "timeout"),
        }
    }
}

/// The conventional name of signal `sig`.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "?",
    }
}

/// What a finished command did.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// How it ended.
    pub exit: Exit,
    /// The first [`STDOUT_KEEP`] bytes of standard output (when captured).
    pub stdout_head: Vec<u8>,
    /// Bytes of standard output read (when captured).
    pub stdout_len: u64,
    /// The output limit was reached and the pipe closed.
    pub stdout_closed_early: bool,
    /// Standard error (lossy UTF-8, the first [`STDERR_KEEP`] bytes).
    pub stderr: String,
    /// Standard error was longer than what is kept.
    pub stderr_truncated: bool,
    /// A pipe did not reach end-of-file after the command exited (a descendant kept it).
    pub streams_incomplete: bool,
    /// Wall-clock time.
    pub elapsed: Duration,
}

impl RunOutput {
    /// Whether the command exited with status 0.
    pub fn success(&self) -> bool {
        self.exit == Exit::Code(0)
    }

    /// Standard output as lossy UTF-8 (the kept head only).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout_head).into_owned()
    }
}

struct StdoutResult {
    head: Vec<u8>,
    len: u64,
    closed_early: bool,
}

/// A command that is running.
pub struct Running {
    pgid: i32,
    start: Instant,
    deadline: Instant,
    waiter: Receiver<std::io::Result<std::process::ExitStatus>>,
    stdout_rx: Option<Receiver<StdoutResult>>,
    stderr_rx: Receiver<(Vec<u8>, bool)>,
    status: Option<std::process::ExitStatus>,
}

/// Start `spec` (see [`Running::wait`]).
pub fn spawn(spec: &RunSpec) -> FuzzResult<Running> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .process_group(0);
    match spec.stdout {
        StdoutMode::Null => {
            cmd.stdout(Stdio::null());
        }
        StdoutMode::DevFull => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .map_err(|e| FuzzError::io("open /dev/full", e))?;
            cmd.stdout(Stdio::from(f));
        }
        StdoutMode::Capture { .. } => {
            cmd.stdout(Stdio::piped());
        }
    }
    limit_self();
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| FuzzError::io(format!("run {}", spec.display()), e))?;
    let pgid = child.id() as i32;

    let stderr = child.stderr.take().expect("stderr is piped");
    let (etx, stderr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = etx.send(read_capped(stderr, STDERR_KEEP));
    });
    let stdout_rx = match spec.stdout {
        StdoutMode::Capture { limit } => {
            let out = child.stdout.take().expect("stdout is piped");
            let (otx, orx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = otx.send(read_limited(out, limit));
            });
            Some(orx)
        }
        _ => None,
    };
    // A thread blocks in waitpid, so the exit is seen at once (no polling).
    let (wtx, waiter) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = wtx.send(child.wait());
    });
    Ok(Running { pgid, start, deadline: start + spec.timeout, waiter, stdout_rx, stderr_rx, status: None })
}

/// Lower the soft limit `$res` of this process to `$value` (never raising it); a macro, as
/// the type of the resource argument differs between C libraries.
macro_rules! lower_soft_limit {
    ($res:expr, $value:expr) => {{
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `lim` is a valid out-parameter, then a valid rlimit, for the calls.
        unsafe {
            if libc::getrlimit($res, &mut lim) == 0 {
                let value = $value as libc::rlim_t;
                if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur > value {
                    lim.rlim_cur = value.min(lim.rlim_max);
                    libc::setrlimit($res, &lim);
                }
            }
        }
    }};
}

/// Lower the soft limits `RLIMIT_CORE`, `RLIMIT_FSIZE` and `RLIMIT_AS` of this process (once;
/// never raises a limit) so every command spawned inherits them.
pub fn limit_self() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        lower_soft_limit!(libc::RLIMIT_CORE, 0);
        lower_soft_limit!(libc::RLIMIT_FSIZE, FSIZE_LIMIT);
        lower_soft_limit!(libc::RLIMIT_AS, AS_LIMIT);
    });
}

/// Run `spec` to the end (or its timeout).
pub fn run(spec: &RunSpec) -> FuzzResult<RunOutput> {
    spawn(spec)?.wait()
}

/// Read `r` to its end, keeping the first `keep` bytes; returns them and whether more came.
fn read_capped(mut r: impl Read, keep: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    truncated = true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    (kept, truncated)
}

/// Read `r` until end-of-file or `limit` bytes, then drop it (closing the pipe).
fn read_limited(mut r: impl Read, limit: u64) -> StdoutResult {
    let mut head = Vec::new();
    let mut len = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    let mut closed_early = false;
    loop {
        if len >= limit {
            closed_early = true;
            break;
        }
        let want = buf.len().min((limit - len) as usize);
        match r.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                let room = STDOUT_KEEP.saturating_sub(head.len());
                head.extend_from_slice(&buf[..n.min(room)]);
                len += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    drop(r);
    StdoutResult { head, len, closed_early }
}

impl Running {
    /// The process id (also its process group id).
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// Whether the command has exited (without waiting).
    pub fn has_exited(&mut self) -> FuzzResult<bool> {
        if self.status.is_some() {
            return Ok(true);
        }
        match self.waiter.try_recv() {
            Ok(r) => {
                self.status = Some(r.map_err(|e| FuzzError::io("wait for a command", e))?);
                Ok(true)
            }
            Err(TryRecvError::Empty) => Ok(false),
            Err(TryRecvError::Disconnected) => {
                Err(FuzzError::io("wait for a command", std::io::Error::other("waiter gone")))
            }
        }
    }

    /// Send `sig` to the command's whole process group.
    pub fn signal_group(&self, sig: i32) {
        // SAFETY: plain syscall; a stale group id only yields ESRCH.
        unsafe {
            libc::kill(-self.pgid, sig);
        }
    }

    /// Move the deadline to `timeout` from now.
    pub fn extend_deadline(&mut self, timeout: Duration) {
        self.deadline = Instant::now() + timeout;
    }

    /// Wait for the command until its deadline; past it, kill its process group
    /// ([`Exit::Timeout`]). Then collect its output.
    pub fn wait(mut self) -> FuzzResult<RunOutput> {
        let gone = || FuzzError::io("wait for a command", std::io::Error::other("waiter gone"));
        let mut timed_out = false;
        let status = match self.status {
            Some(st) => st,
            None => {
                let left = self.deadline.saturating_duration_since(Instant::now());
                let r = match self.waiter.recv_timeout(left) {
                    Ok(r) => r,
                    Err(RecvTimeoutError::Timeout) => {
                        self.signal_group(libc::SIGKILL);
                        timed_out = true;
                        self.waiter.recv().map_err(|_| gone())?
                    }
                    Err(RecvTimeoutError::Disconnected) => return Err(gone()),
                };
                let st = r.map_err(|e| FuzzError::io("wait for a command", e))?;
                self.status = Some(st);
                st
            }
        };
        let elapsed = self.start.elapsed();
        let exit = if timed_out {
            Exit::Timeout
        } else if let Some(c) = status.code() {
            Exit::Code(c)
        } else {
            Exit::Signal(status.signal().unwrap_or(0))
        };
        let mut incomplete = false;
        let (err, stderr_truncated) = match self.stderr_rx.recv_timeout(DRAIN_WAIT) {
            Ok(v) => v,
            Err(_) => {
                // A descendant in the group still holds the pipe: end it, then try again.
                incomplete = true;
                self.signal_group(libc::SIGKILL);
                self.stderr_rx.recv_timeout(DRAIN_WAIT).unwrap_or_default()
            }
        };
        let out = match &self.stdout_rx {
            Some(rx) => match rx.recv_timeout(DRAIN_WAIT) {
                Ok(v) => v,
                Err(_) => {
                    incomplete = true;
                    self.signal_group(libc::SIGKILL);
                    rx.recv_timeout(DRAIN_WAIT).unwrap_or(StdoutResult {
                        head: Vec::new(),
                        len: 0,
                        closed_early: false,
                    })
                }
            },
            None => StdoutResult { head: Vec::new(), len: 0, closed_early: false },
        };
        Ok(RunOutput {
            exit,
            stdout_head: out.head,
            stdout_len: out.len,
            stdout_closed_early: out.closed_early,
            stderr: String::from_utf8_lossy(&err).into_owned(),
            stderr_truncated,
            streams_incomplete: incomplete,
            elapsed,
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A command dropped without `wait` (an error path) must not outlive the fuzzer; the
        // waiter thread reaps it.
        if !matches!(self.has_exited(), Ok(true)) {
            self.signal_group(libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_signals_and_timeouts() {
        let o = run(&RunSpec::new("sh", ["-c", "echo out; echo err >&2; exit 3"])).expect("run");
        assert_eq!(o.exit, Exit::Code(3));
        assert_eq!(o.stdout_text(), "out\n");
        assert_eq!(o.stderr, "err\n");
        let o = run(&RunSpec::new("sh", ["-c", "kill -SEGV $$"])).expect("run");
        assert_eq!(o.exit, Exit::Signal(libc::SIGSEGV));
        let o =
            run(&RunSpec::new("sh", ["-c", "sleep 30"]).timeout(Duration::from_millis(200))).expect("run");
        assert_eq!(o.exit, Exit::Timeout);
        assert!(o.elapsed < Duration::from_secs(10));
    }

    #[test]
    fn endless_output_is_cut() {
        let o = run(&RunSpec::new("sh", ["-c", "yes"]).stdout(StdoutMode::Capture { limit: 1 << 20 }))
            .expect("run");
        assert!(o.stdout_closed_early);
        assert_eq!(o.stdout_len, 1 << 20);
        assert_ne!(o.exit, Exit::Timeout, "yes dies of EPIPE once the pipe is closed");
    }

    #[test]
    fn dev_full_and_file_size_limit() {
        let o = run(&RunSpec::new("sh", ["-c", "echo hi"]).stdout(StdoutMode::DevFull)).expect("run");
        assert_ne!(o.exit, Exit::Code(0), "{o:?}");
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("big");
        let script = format!("head -c {} /dev/zero > {}", FSIZE_LIMIT + 4096, f.display());
        let o = run(&RunSpec::new("sh", ["-c", script.as_str()])).expect("run");
        assert_ne!(o.exit, Exit::Code(0), "the file size limit stops the write: {o:?}");
        assert!(std::fs::metadata(&f).expect("stat").len() <= FSIZE_LIMIT);
    }
}
