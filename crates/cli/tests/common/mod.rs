//! Helpers shared by the `cjfs` binary's end-to-end tests: run the binary with a timeout,
//! require success or a clean one-line failure, hash images, find e2fsprogs tools.

#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest a single command may run before the test fails (a hang is a bug).
pub const TIMEOUT: Duration = Duration::from_secs(120);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_cjfs")
}

/// Run `cjfs args...` with `stdin` as its standard input; fails the test on a timeout.
pub fn cjfs_in(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cjfs");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out_pipe = child.stdout.take().expect("stdout");
    let err_pipe = child.stderr.take().expect("stderr");
    let reader = |mut p: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = p.read_to_end(&mut v);
            v
        })
    };
    let out_t = reader(Box::new(out_pipe));
    let err_t = reader(Box::new(err_pipe));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cjfs {args:?} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = feeder.join();
    Output { status, stdout: out_t.join().expect("stdout"), stderr: err_t.join().expect("stderr") }
}

pub fn cjfs(args: &[&str]) -> Output {
    cjfs_in(args, b"")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run and require success.
pub fn ok(args: &[&str]) -> Output {
    let o = cjfs(args);
    assert!(
        o.status.success(),
        "cjfs {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

/// Run and require a clean failure: exit status 1, exactly one stderr line starting
/// with `cjfs: <command>: ` and containing `needle`, and no panic.
pub fn fails(args: &[&str], needle: &str) -> String {
    let o = cjfs(args);
    let err = text(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "cjfs {args:?}: expected exit 1, got {:?}; stderr: {err}",
        o.status.code()
    );
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "cjfs {args:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "cjfs {args:?}: expected one stderr line, got: {err:?}");
    assert!(lines[0].starts_with(&format!("cjfs: {}: ", args[0])), "cjfs {args:?}: bad prefix: {err}");
    assert!(
        lines[0].to_lowercase().contains(&needle.to_lowercase()),
        "cjfs {args:?}: stderr {err:?} does not mention {needle:?}"
    );
    err
}

pub fn hash_file(p: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    std::fs::read(p).expect("read image").hash(&mut h);
    h.finish()
}

/// A system tool, searched in PATH and the sbin directories.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `e2fsck -fn img` must pass (SKIP when e2fsck is missing).
pub fn assert_e2fsck_clean(img: &Path) {
    let Some(e2fsck) = tool("e2fsck") else {
        println!("SKIP: e2fsck not installed; not checking {}", img.display());
        return;
    };
    let o = Command::new(e2fsck).arg("-fn").arg(img).output().expect("run e2fsck");
    assert!(
        o.status.success(),
        "e2fsck -fn {} failed ({:?}):\n{}\n{}",
        img.display(),
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    );
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// A fresh image of `size` made by `cjfs mkfs`.
pub fn make_image(dir: &Path, name: &str, size: &str) -> PathBuf {
    let p = dir.join(name);
    ok(&["mkfs", s(&p), "--size", size]);
    p
}

pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut v = vec![0u8; n];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}
