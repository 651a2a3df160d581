//! Shared by the integration tests: finding (or building) the `cjfs` binary to judge.
// Each test binary uses only some of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// `target/<profile>` of this test binary (`target/<profile>/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// Raise `newest` to the newest modification time of the files under `dir`.
fn newest_in(dir: &Path, newest: &mut SystemTime) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            newest_in(&p, newest);
        } else if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
            *newest = (*newest).max(m);
        }
    }
}

/// The newest modification time of the sources the `cjfs` binary is built from.
fn sources_mtime() -> SystemTime {
    let ws = workspace();
    let mut t = SystemTime::UNIX_EPOCH;
    for c in ["cli", "fs", "journal", "blockdev", "fuse", "lab"] {
        newest_in(&ws.join("crates").join(c).join("src"), &mut t);
        if let Ok(m) =
            std::fs::metadata(ws.join("crates").join(c).join("Cargo.toml")).and_then(|m| m.modified())
        {
            t = t.max(m);
        }
    }
    t
}

/// The `cjfs` binary to judge: `$CJFS_BIN`, else `target/<profile>/cjfs` or
/// `target/release/cjfs` when newer than every source it is built from, else one built
/// now with `cargo build --release -p cjfs-cli` into `target/imagefuzz-cjfs` (a separate
/// target directory, so the build does not wait for the lock of the running `cargo test`).
pub fn cjfs_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("CJFS_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "CJFS_BIN={} is not a file", p.display());
        println!("judging CJFS_BIN={}", p.display());
        return p;
    }
    let profile = profile_dir();
    let target = profile.parent().expect("target dir").to_path_buf();
    let src = sources_mtime();
    for cand in [profile.join("cjfs"), target.join("release").join("cjfs")] {
        let fresh = std::fs::metadata(&cand).and_then(|m| m.modified()).is_ok_and(|m| m >= src);
        if fresh {
            println!("judging {}", cand.display());
            return cand;
        }
        if cand.is_file() {
            println!("{} is older than its sources; not used", cand.display());
        }
    }
    let own = target.join("imagefuzz-cjfs");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    println!(
        "building cjfs: {} build --release -p cjfs-cli --target-dir {} (in {})",
        Path::new(&cargo).display(),
        own.display(),
        workspace().display()
    );
    let st = std::process::Command::new(&cargo)
        .args(["build", "--release", "-p", "cjfs-cli", "--target-dir"])
        .arg(&own)
        .current_dir(workspace())
        .status()
        .expect("run cargo build");
    assert!(st.success(), "cargo build --release -p cjfs-cli failed: {st}");
    let bin = own.join("release").join("cjfs");
    println!("judging {}", bin.display());
    bin
}

/// Whether FUSE mounts can run here (root, /dev/fuse, fusermount3); prints `SKIP:` if not.
pub fn fuse_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ok = root
        && Path::new("/dev/fuse").exists()
        && cjfs_imagefuzz::campaign::find_tool("fusermount3").is_some();
    if !ok {
        println!("SKIP: FUSE mount workloads (needs root, /dev/fuse and fusermount3)");
    }
    ok
}

/// Prints `SKIP:` when e2fsck is missing (write_left_unclean is then not judged).
pub fn note_e2fsck() {
    if cjfs_imagefuzz::campaign::find_tool("e2fsck").is_none() {
        println!(
            "SKIP: e2fsck not installed: images are not classified clean/unclean, write_left_unclean is not judged"
        );
    }
}
