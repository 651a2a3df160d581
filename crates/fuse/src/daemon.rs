//! The mount daemon: checks, daemonizing, the image lock, the FUSE session, and a clean
//! unmount on `fusermount3 -u`, `umount`, SIGINT, SIGTERM and SIGHUP.
//!
//! Order of events:
//! 1. in the calling process (no threads yet): resolve the image and the mount point, check
//!    `/dev/fuse`;
//! 2. unless `foreground`, fork: the parent waits on a pipe until the child reports the
//!    mount ready (exit 0) or an error (its message, exit 1); the child starts a new session;
//! 3. block SIGINT/SIGTERM/SIGHUP in the main thread, so every thread started later
//!    inherits the mask and one dedicated thread receives them with `sigwait`;
//! 4. open the image, which takes its writer lock (`flock(LOCK_EX | LOCK_NB)`, held by the
//!    device for the daemon's life; a read-only mount holds the same lock on a descriptor of
//!    its own), so CLI writes and a second mount are refused; journal recovery and orphan
//!    cleanup run here; mount through fuser;
//! 5. report ready, serve until the kernel ends the session (after any unmount), then
//!    [`cjfs_fs::Fs::unmount`] commits, checkpoints and marks the image clean.
//!
//! A signal unmounts the directory (lazily if it is busy, so open files keep working until
//! closed); the session then ends as for any other unmount.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cjfs_blockdev::{DevError, Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{Fs, FsError, MountOptions};
use fuser::{Config, MountOption, Session, SessionACL};
use parking_lot::Mutex;

use crate::error::{MountError, MountResult};
use crate::filesystem::CjfsFuse;
use crate::options::MountConfig;

/// The FUSE device.
const DEV_FUSE: &str = "/dev/fuse";

/// Everything `cjfs mount` needs.
#[derive(Debug, Clone)]
pub struct MountRequest {
    /// Image file or block device.
    pub image: PathBuf,
    /// Mount point (an existing directory).
    pub mountpoint: PathBuf,
    /// `-o` options.
    pub config: MountConfig,
    /// File system options where `-o` does not say otherwise: the preset (`auto`: chosen for
    /// the device) and the data mode.
    pub options: MountOptions,
    /// Stay in the foreground (otherwise daemonize once the mount is ready).
    pub foreground: bool,
    /// FUSE worker threads (default: [`default_threads`]).
    pub threads: Option<usize>,
}

impl MountRequest {
    /// A request with default settings.
    pub fn new(image: impl Into<PathBuf>, mountpoint: impl Into<PathBuf>) -> Self {
        MountRequest {
            image: image.into(),
            mountpoint: mountpoint.into(),
            config: MountConfig::default(),
            options: MountOptions::default(),
            foreground: false,
            threads: None,
        }
    }
}

/// Default number of FUSE worker threads: four per core, at least 16. A worker blocks for
/// the whole of an fsync, so more workers than cores let concurrent fsyncs share commits.
pub fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (cores * 4).max(16)
}

/// Mount and serve until unmounted. With `foreground == false` this returns in the calling
/// process as soon as the mount is ready (or failed), while a daemon child serves it.
///
/// Meant to be the process's main job: call it before starting any thread (it may fork),
/// and note that it blocks SIGINT, SIGTERM and SIGHUP in the calling thread for good (the
/// daemon receives them on a thread of its own and unmounts).
pub fn mount(req: &MountRequest) -> MountResult<()> {
    install_logger();
    let image = std::fs::canonicalize(&req.image)
        .map_err(|source| MountError::Image { path: req.image.clone(), source })?;
    // Before anything opens it (a FIFO would block the open).
    cjfs_blockdev::check_image_kind(&image)
        .map_err(|e| MountError::Fs { path: image.clone(), source: FsError::Device(e) })?;
    let bad_dir = |e: std::io::Error| {
        let why = if e.kind() == std::io::ErrorKind::NotFound {
            "does not exist".to_string()
        } else if e.raw_os_error() == Some(libc::ENOTCONN) {
            "is a dead FUSE mount (its daemon exited without unmounting); run `fusermount3 -u` on it first"
                .to_string()
        } else {
            format!("cannot be used: {e}")
        };
        MountError::Mountpoint { path: req.mountpoint.clone(), why }
    };
    let mountpoint = std::fs::canonicalize(&req.mountpoint).map_err(bad_dir)?;
    if !std::fs::metadata(&mountpoint).map_err(bad_dir)?.is_dir() {
        return Err(MountError::Mountpoint {
            path: req.mountpoint.clone(),
            why: "is not a directory".into(),
        });
    }
    if let Err(e) = std::fs::metadata(DEV_FUSE) {
        return Err(MountError::NoFuse(e.to_string()));
    }
    if req.foreground { serve(req, &image, &mountpoint, None) } else { daemonize(req, &image, &mountpoint) }
}

/// Warnings and errors (ours and fuser's) on stderr; `CJFS_LOG=debug|info|warn|error|off`
/// chooses the level. A daemon's stderr is /dev/null once the mount is ready.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let text = r.args().to_string();
        let level =
            if is_reply_to_forgotten_request(r.target(), &text) { log::Level::Debug } else { r.level() };
        if level <= log::max_level() {
            eprintln!("cjfs-fuse: {}: {text}", level.as_str().to_ascii_lowercase());
        }
    }
    fn flush(&self) {}
}

/// fuser logs an error when the kernel refuses a reply with ENOENT, which means the kernel no
/// longer waits for that request: it was interrupted, or the connection was torn down by an
/// unmount while a background request (a `release` after `close`) was still being served.
/// libfuse ignores this case in `fuse_send_msg`; so do we, at debug level.
fn is_reply_to_forgotten_request(target: &str, text: &str) -> bool {
    target.starts_with("fuser")
        && text.starts_with("Failed to send FUSE reply")
        && text.ends_with("(os error 2)")
}

fn install_logger() {
    static LOGGER: StderrLogger = StderrLogger;
    let level = match std::env::var("CJFS_LOG").as_deref() {
        Ok("off") => log::LevelFilter::Off,
        Ok("error") => log::LevelFilter::Error,
        Ok("info") => log::LevelFilter::Info,
        Ok("debug") => log::LevelFilter::Debug,
        Ok("trace") => log::LevelFilter::Trace,
        _ => log::LevelFilter::Warn,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

/// The child's end of the readiness pipe.
struct Ready(File);

impl Ready {
    fn ok(mut self) {
        let _ = self.0.write_all(b"OK\n");
    }
    fn fail(mut self, e: &MountError) {
        let _ = write!(self.0, "ERR {}\n{e}", e.exit_code());
    }
}

fn last_os_error(what: &str) -> MountError {
    MountError::Daemon(format!("{what}: {}", std::io::Error::last_os_error()))
}

fn daemonize(req: &MountRequest, image: &Path, mountpoint: &Path) -> MountResult<()> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_os_error("pipe"));
    }
    // SAFETY: both descriptors were just created by pipe2 and are owned here only.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the calling process has not started any thread of ours (the caller's contract:
    // `mount` is called before any); the child only continues in Rust code it owns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(last_os_error("fork"));
    }
    if pid > 0 {
        drop(wr);
        let mut msg = String::new();
        let _ = File::from(rd).read_to_string(&mut msg);
        if msg.starts_with("OK") {
            return Ok(());
        }
        if let Some(rest) = msg.strip_prefix("ERR ") {
            let (code, text) = rest.split_once('\n').unwrap_or(("1", rest));
            return Err(MountError::Reported {
                code: code.trim().parse().unwrap_or(1),
                message: text.to_string(),
            });
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(MountError::Daemon(format!(
            "the mount daemon exited before the mount was ready (wait status {status:#x})"
        )));
    }
    // The child.
    drop(rd);
    // SAFETY: plain system calls on our own process.
    unsafe {
        libc::setsid();
    }
    let _ = std::env::set_current_dir("/");
    let ready = Ready(File::from(wr));
    let r = serve(req, image, mountpoint, Some(ready));
    // Errors before the mount was ready went to the parent through the pipe; later ones
    // have nowhere to go but the exit status (stderr is /dev/null by then).
    std::process::exit(if r.is_ok() { 0 } else { 1 });
}

/// Point stdin, stdout and stderr at /dev/null (a daemon has no terminal).
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which this process owns.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// The source (`fsname`) of the `cjfs mount` whose mount point is `dir` (canonical), from
/// `/proc/self/mountinfo`; `None` if no `fuse.cjfs` (or, mounted by root, plain `fuse`) file
/// system is mounted there.
pub fn mount_source(dir: &Path) -> std::io::Result<Option<String>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    // The last entry for a mount point is the one visible there.
    Ok(info.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mountpoint = unescape_mountinfo(left.split(' ').nth(4)?);
        let mut r = right.split(' ');
        let fstype = r.next()?;
        let source = unescape_mountinfo(r.next()?);
        // A mount made directly (as root) shows `fuse`: the kernel ignores the subtype there.
        let ours = matches!(fstype, "fuse.cjfs" | "fuse" | "fuseblk");
        (ours && Path::new(&mountpoint) == dir).then_some(source)
    }))
}

/// Undo mountinfo's octal escapes (`\040` for a space, `\134` for a backslash, ...).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct =
            b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |a, c| a.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmount the `cjfs mount` at `dir` and wait until its daemon has committed, checkpointed,
/// marked the image clean and let go of it — which `fusermount3 -u` and `umount` do not wait
/// for: the kernel ends the session first and the daemon writes home after. The image is
/// the mount's source unless `image` names it. A busy mount (files open in it) is
/// [`MountError::Busy`], as `umount` answers, unless `lazy`: then it is detached at once and
/// the wait lasts until its last open file closes. Returns the image.
pub fn unmount_and_wait(
    dir: &Path,
    image: Option<&Path>,
    timeout: std::time::Duration,
    lazy: bool,
) -> MountResult<PathBuf> {
    let bad_dir = |e: std::io::Error| MountError::Mountpoint { path: dir.to_path_buf(), why: e.to_string() };
    let dir = std::fs::canonicalize(dir).map_err(bad_dir)?;
    let source =
        mount_source(&dir).map_err(bad_dir)?.ok_or_else(|| MountError::NotMounted { path: dir.clone() })?;
    let image = match image {
        Some(i) => i.to_path_buf(),
        None if Path::new(&source).is_absolute() && Path::new(&source).exists() => PathBuf::from(&source),
        None => return Err(MountError::UnknownImage { path: dir, source_name: source }),
    };
    unmount_dir_with(&dir, lazy).map_err(|source| match source.raw_os_error() {
        Some(libc::EBUSY) => MountError::Busy { path: dir.clone() },
        _ => MountError::Mount { path: dir.clone(), source },
    })?;
    let t0 = std::time::Instant::now();
    while cjfs_blockdev::writer_lock_held(&image)
        .map_err(|source| MountError::Image { path: image.clone(), source })?
    {
        if t0.elapsed() > timeout {
            return Err(MountError::StillHeld { path: image, secs: timeout.as_secs() });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let dev = FileDevice::open(
        &image,
        FileDeviceOptions {
            read_only: true,
            block_size: cjfs_fs::ondisk::superblock::probe_block_size(&image)
                .unwrap_or(cjfs_blockdev::DEFAULT_BLOCK_SIZE),
            ..FileDeviceOptions::default()
        },
    )
    .map_err(|e| MountError::Fs { path: image.clone(), source: FsError::Device(e) })?;
    let (sb, _) = cjfs_fs::mkfs::read_layout_for(&dev, cjfs_fs::ondisk::features::Access::ReadOnly)
        .map_err(|source| MountError::Fs { path: image.clone(), source })?;
    if sb.has_incompat(cjfs_fs::ondisk::features::INCOMPAT_RECOVER) {
        return Err(MountError::NotClean { path: image });
    }
    Ok(image)
}

/// Unmount `dir`: a plain unmount, lazily if busy, through `fusermount3` if we may not.
pub fn unmount_dir(dir: &Path) -> std::io::Result<()> {
    unmount_dir_with(dir, true)
}

/// [`unmount_dir`]; without `lazy` a busy mount is left mounted and the error is EBUSY.
pub fn unmount_dir_with(dir: &Path, lazy: bool) -> std::io::Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EBUSY) if !lazy => Err(e),
        // SAFETY: as above.
        Some(libc::EBUSY) if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 => Ok(()),
        Some(libc::EPERM) | Some(libc::EBUSY) => {
            let mut cmd = std::process::Command::new("fusermount3");
            cmd.arg("-u");
            if lazy {
                cmd.arg("-z");
            }
            // Its message is matched below: in the C locale.
            let out =
                cmd.env("LC_ALL", "C").arg("--").arg(dir).stderr(std::process::Stdio::piped()).output()?;
            let why = String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                Ok(())
            } else if !lazy && why.contains("busy") {
                Err(std::io::Error::from_raw_os_error(libc::EBUSY))
            } else {
                Err(std::io::Error::other(format!("fusermount3 -u failed: {}", why.trim())))
            }
        }
        _ => Err(e),
    }
}

fn lock_image(image: &Path) -> MountResult<File> {
    let f = File::open(image).map_err(|source| MountError::Image { path: image.to_path_buf(), source })?;
    cjfs_blockdev::lock_writer(&f, &image.display().to_string()).map_err(|e| locked(image, e))?;
    Ok(f)
}

/// The mount error for a failed writer lock of `image`.
fn locked(image: &Path, e: DevError) -> MountError {
    match e {
        DevError::Busy { holder, .. } => MountError::Locked { path: image.to_path_buf(), holder },
        e => MountError::Fs { path: image.to_path_buf(), source: FsError::Device(e) },
    }
}

fn kernel_flag(flag: &str) -> Option<MountOption> {
    Some(match flag {
        "noatime" => MountOption::NoAtime,
        "atime" => MountOption::Atime,
        "nodev" => MountOption::NoDev,
        "dev" => MountOption::Dev,
        "nosuid" => MountOption::NoSuid,
        "suid" => MountOption::Suid,
        "noexec" => MountOption::NoExec,
        "exec" => MountOption::Exec,
        "sync" => MountOption::Sync,
        "dirsync" => MountOption::DirSync,
        // relatime, nodiratime, ...: the kernel's defaults for FUSE are fine.
        _ => return None,
    })
}

fn session_config(c: &MountConfig, source: &str, threads: usize) -> Config {
    let mut opts = vec![
        MountOption::FSName(c.fsname.clone().unwrap_or_else(|| source.to_string())),
        MountOption::Subtype("cjfs".into()),
        // The library does not check permissions: the kernel does, from our attributes.
        MountOption::DefaultPermissions,
        if c.read_only { MountOption::RO } else { MountOption::RW },
    ];
    for f in &c.kernel_flags {
        if let Some(o) = kernel_flag(f)
            && !opts.contains(&o)
        {
            opts.push(o);
        }
    }
    let mut cfg = Config::default();
    cfg.mount_options = opts;
    cfg.acl = if c.allow_other {
        SessionACL::All
    } else if c.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    cfg.n_threads = Some(threads.max(1));
    cfg.clone_fd = true;
    cfg
}

/// Open the image and serve it at `mountpoint` until unmounted.
fn serve(req: &MountRequest, image: &Path, mountpoint: &Path, ready: Option<Ready>) -> MountResult<()> {
    let set = signal_set();
    // SAFETY: blocking signals in the calling thread; threads started later inherit the mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let Started { mut session, outcome, lock: _lock } = match start(req, image, mountpoint) {
        Ok(s) => s,
        Err(e) => {
            if let Some(ready) = ready {
                ready.fail(&e);
            }
            return Err(e);
        }
    };
    let dir = mountpoint.to_path_buf();
    // The signal thread: the first SIGINT/SIGTERM/SIGHUP unmounts; the session then ends.
    std::thread::Builder::new()
        .name("cjfs-signals".into())
        .spawn(move || {
            let mut sig = 0;
            // SAFETY: `set` is initialised and blocked in every thread.
            while unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                log::info!("signal {sig}: unmounting {}", dir.display());
                if let Err(e) = unmount_dir(&dir) {
                    log::error!("unmounting {} after signal {sig}: {e}", dir.display());
                }
            }
        })
        .map_err(|e| MountError::Daemon(format!("signal thread: {e}")))?;
    let daemon = ready.is_some();
    if let Some(ready) = ready {
        ready.ok();
    }
    if daemon {
        detach_stdio();
    }
    // fuser unmounts on its own only when the session is dropped; keep its handle so a
    // failed run still leaves no dead mount behind.
    let mut unmounter = session.unmount_callable();
    let run = session.run();
    let _ = unmounter.unmount();
    let unmounted = outcome.lock().take();
    match (run, unmounted) {
        (_, Some(Err(source))) => Err(MountError::Unmount { path: image.to_path_buf(), source }),
        (Err(source), _) => Err(MountError::Mount { path: mountpoint.to_path_buf(), source }),
        (Ok(()), Some(Ok(()))) => Ok(()),
        (Ok(()), None) => Err(MountError::Unmount {
            path: image.to_path_buf(),
            source: FsError::Invalid("the FUSE session ended without unmounting the image".into()),
        }),
    }
}

/// A mounted, not yet running session.
struct Started {
    session: Session<CjfsFuse>,
    /// Filled by the file system's `destroy` with the result of unmounting the image.
    outcome: crate::filesystem::UnmountOutcome,
    /// The image lock of a read-only mount, held until the daemon is done with the image (a
    /// read-write mount's device holds the writer lock itself; see [`FileDeviceOptions`]).
    lock: Option<File>,
}

fn start(req: &MountRequest, image: &Path, mountpoint: &Path) -> MountResult<Started> {
    let opts = req.config.fs_options(&req.options)?;
    // A read-only device takes no lock; the mount still excludes writers while it serves.
    let lock = if opts.read_only { Some(lock_image(image)?) } else { None };
    let dev: Device = Arc::new(
        FileDevice::open(
            image,
            FileDeviceOptions {
                read_only: opts.read_only,
                // The superblock check after the open names a missing or odd superblock.
                block_size: cjfs_fs::ondisk::superblock::probe_block_size(image)
                    .unwrap_or(cjfs_blockdev::DEFAULT_BLOCK_SIZE),
                ..FileDeviceOptions::default()
            },
        )
        .map_err(|e| locked(image, e))?,
    );
    let (fs, report) = Fs::open_with_report(dev, opts)
        .map_err(|source| MountError::Fs { path: image.to_path_buf(), source })?;
    // The preset `auto` chose is logged by the journal (`CJFS_LOG=info`) and shown by `cjfs
    // info`: a mount that works is quiet.
    if report.replayed_transactions > 0 || report.orphans_cleaned > 0 {
        eprintln!(
            "cjfs: {}: recovered: {} journal transactions ({} blocks) replayed, {} orphan inodes cleaned",
            image.display(),
            report.replayed_transactions,
            report.replayed_blocks,
            report.orphans_cleaned
        );
    }
    let outcome: crate::filesystem::UnmountOutcome = Arc::new(Mutex::new(None));
    let threads = req.threads.unwrap_or_else(default_threads);
    let fuse = CjfsFuse::new(fs, &req.config, outcome.clone());
    let kernel_mount = fuse.kernel_mount();
    let notifier = fuse.notifier();
    let cfg = session_config(&req.config, &image.display().to_string(), threads);
    // On failure fuser drops the file system, whose `destroy` unmounts the image cleanly.
    let mut session = Session::new(fuse, mountpoint, &cfg)
        .map_err(|source| MountError::Mount { path: mountpoint.to_path_buf(), source })?;
    *kernel_mount.lock() = Some(session.unmount_callable());
    *notifier.lock() = Some(session.notifier());
    Ok(Started { session, outcome, lock })
}

/// A file system served over FUSE by a thread of the calling process: no daemon, image lock or
/// signal handling — for a file system that lives only in this process, such as one on an
/// emulated device (the lab's SQLite rounds through FUSE on the paper's devices). Dropping it
/// unmounts as [`InProcessMount::unmount`] does, without reporting.
pub struct InProcessMount {
    session: Option<fuser::BackgroundSession>,
    outcome: crate::filesystem::UnmountOutcome,
    mountpoint: PathBuf,
}

/// Serve `fs` at `mountpoint` (an existing directory) with `config`'s FUSE settings (cache
/// mode, timeouts, kernel flags; the file system's own options were fixed when it was
/// opened) and `threads` workers, named `source` in the mount table.
pub fn serve_in_process(
    fs: Fs,
    mountpoint: &Path,
    config: &MountConfig,
    source: &str,
    threads: usize,
) -> MountResult<InProcessMount> {
    if let Err(e) = std::fs::metadata(DEV_FUSE) {
        return Err(MountError::NoFuse(e.to_string()));
    }
    let outcome: crate::filesystem::UnmountOutcome = Arc::new(Mutex::new(None));
    let fuse = CjfsFuse::new(fs, config, outcome.clone());
    let kernel_mount = fuse.kernel_mount();
    let notifier = fuse.notifier();
    let mount_err = |source| MountError::Mount { path: mountpoint.to_path_buf(), source };
    let mut session =
        Session::new(fuse, mountpoint, &session_config(config, source, threads)).map_err(mount_err)?;
    *kernel_mount.lock() = Some(session.unmount_callable());
    *notifier.lock() = Some(session.notifier());
    let session = session.spawn().map_err(mount_err)?;
    Ok(InProcessMount { session: Some(session), outcome, mountpoint: mountpoint.to_path_buf() })
}

impl InProcessMount {
    /// Unmount, wait for the session to end, and return what unmounting the file system
    /// (commit, checkpoint, marked clean) gave.
    pub fn unmount(mut self) -> MountResult<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let path = self.mountpoint.clone();
        session.umount_and_join().map_err(|source| MountError::Mount { path: path.clone(), source })?;
        match self.outcome.lock().take() {
            Some(r) => r.map_err(|source| MountError::Unmount { path, source }),
            None => Err(MountError::Unmount {
                path,
                source: FsError::Invalid("the FUSE session ended without unmounting the file system".into()),
            }),
        }
    }
}

impl Drop for InProcessMount {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = session.umount_and_join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_reply_to_forgotten_request;

    #[test]
    fn only_enoent_replies_from_fuser_are_quietened() {
        let enoent = "Failed to send FUSE reply: No such file or directory (os error 2)";
        assert!(is_reply_to_forgotten_request("fuser::reply", enoent));
        assert!(!is_reply_to_forgotten_request("cjfs_fuse::fs", enoent));
        let enodev = "Failed to send FUSE reply: No such device (os error 19)";
        assert!(!is_reply_to_forgotten_request("fuser::reply", enodev));
    }
}
