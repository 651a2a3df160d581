//! Shared helpers for the tests that mount for real: prerequisites (skip with a message when
//! `/dev/fuse`, root or `fusermount3` is missing), images, and a mount daemon run in the
//! foreground as a child process.

#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{MkfsOptions, mkfs};

/// The mount helper binary built with this crate.
pub const CJFS_MOUNT: &str = env!("CARGO_BIN_EXE_cjfs-mount");

/// Whether `prog` runs (is on PATH).
pub fn have(prog: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {prog}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Why FUSE tests cannot run here, if they cannot.
pub fn fuse_missing() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if !have("fusermount3") {
        return Some("fusermount3 is not installed (apt-get install fuse3)".into());
    }
    None
}

/// Print `SKIP: ...` and return true when FUSE or one of `tools` is missing.
pub fn skip(test: &str, tools: &[&str]) -> bool {
    if let Some(why) = fuse_missing() {
        println!("SKIP: {test}: {why}");
        return true;
    }
    for t in tools {
        if !have(t) {
            println!("SKIP: {test}: {t} is not installed");
            return true;
        }
    }
    false
}

/// A scratch directory with an image and a mount point.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub image: PathBuf,
    pub mnt: PathBuf,
}

impl Scratch {
    /// A fresh ext4 image of `size` bytes (sparse) made by cjfs's mkfs.
    pub fn new(size: u64) -> Scratch {
        let dir = tempfile::Builder::new().prefix("cjfs-fuse-test").tempdir().expect("tempdir");
        let image = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let dev: Device = Arc::new(
            FileDevice::open(&image, FileDeviceOptions { create_size: Some(size), ..Default::default() })
                .unwrap(),
        );
        mkfs(&*dev, &MkfsOptions { assume_zeroed: true, ..Default::default() }).unwrap();
        dev.flush().unwrap();
        drop(dev);
        Scratch { dir, image, mnt }
    }

    /// Mount with extra `-o` options in the foreground.
    pub fn mount(&self, opts: &str) -> Mount {
        Mount::start(&self.image, &self.mnt, opts)
    }

    /// A path inside the mount.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

/// Is `dir` a mount point (listed in /proc/self/mountinfo)?
pub fn is_mounted(dir: &Path) -> bool {
    let want = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines().any(|l| l.split(' ').nth(4).map(Path::new) == Some(want.as_path()))
}

/// `e2fsck -fn` on the image; panics with its output unless clean.
pub fn e2fsck_clean(image: &Path) {
    if !have("e2fsck") {
        println!("note: e2fsck is not installed; image check skipped");
        return;
    }
    let out = Command::new("e2fsck").arg("-fn").arg(image).output().unwrap();
    assert!(
        out.status.success(),
        "e2fsck -fn {} failed ({}):\n{}{}",
        image.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether some process holds the image's mount lock.
pub fn image_locked(image: &Path) -> bool {
    let f = File::open(image).unwrap();
    // SAFETY: flock on our own descriptor; closing it drops any lock we got.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

/// A mount daemon running in the foreground as our child.
pub struct Mount {
    pub dir: PathBuf,
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Mount {
    /// Start `cjfs-mount IMAGE DIR --foreground -o OPTS` and wait until mounted.
    pub fn start(image: &Path, dir: &Path, opts: &str) -> Mount {
        Mount::try_start(image, dir, opts).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Mount::start`]; `Err` with the exit status and the daemon's output when it exits
    /// without mounting (it refused the image, say).
    pub fn try_start(image: &Path, dir: &Path, opts: &str) -> Result<Mount, String> {
        let log = image.with_extension(format!("log{}", std::process::id()));
        let logf = File::create(&log).unwrap();
        let mut cmd = Command::new(CJFS_MOUNT);
        cmd.arg(image).arg(dir).arg("--foreground");
        if !opts.is_empty() {
            cmd.arg("-o").arg(opts);
        }
        let child = cmd.stdin(Stdio::null()).stdout(logf.try_clone().unwrap()).stderr(logf).spawn().unwrap();
        let mut m = Mount { dir: dir.to_path_buf(), child: Some(child), log };
        let t0 = Instant::now();
        while !is_mounted(dir) {
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                m.child = None;
                return Err(format!("cjfs-mount exited ({st}) before mounting:\n{}", m.log_text()));
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "mount not ready after 60 s:\n{}", m.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(m)
    }

    /// The daemon's output so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// `fusermount3 -u`, then wait for the daemon to finish unmounting the image; panics
    /// unless it exits 0.
    pub fn unmount(mut self) {
        let st = self.unmount_status();
        assert!(st.success(), "cjfs-mount exited with {st}:\n{}", self.log_text());
    }

    /// `fusermount3 -u` and the daemon's exit status.
    pub fn unmount_status(&mut self) -> ExitStatus {
        // Another process's `df` or `stat` passing through the mount holds it for a moment
        // (EBUSY); only a mount still busy after that is a failure of the test.
        let mut tries = 0;
        let out = loop {
            let out = Command::new("fusermount3").arg("-u").arg(&self.dir).output().unwrap();
            tries += 1;
            if out.status.success() || tries == 50 || !String::from_utf8_lossy(&out.stderr).contains("busy") {
                break out;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(out.status.success(), "fusermount3 -u: {}", String::from_utf8_lossy(&out.stderr));
        self.wait(Duration::from_secs(120))
    }

    /// Wait for the daemon to exit.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("daemon already reaped");
        let t0 = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return st;
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                panic!("cjfs-mount did not exit within {limit:?}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send `sig` to the daemon.
    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// Kill the daemon with SIGKILL (a crash) and clear the dead mount.
    pub fn crash(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.take().unwrap().wait();
        let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(&self.dir).status();
        let t0 = Instant::now();
        while is_mounted(&self.dir) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(&self.dir).status();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(30) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run a shell command in `dir`, panicking with its output on failure; returns stdout.
pub fn sh(dir: &Path, cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "`{cmd}` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deterministic file contents for file `i` of `len` bytes.
pub fn pattern(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
