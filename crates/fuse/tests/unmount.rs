//! Unmounting a real mount logs nothing: the daemon's output (warnings and errors are on by
//! default) has no "Failed to umount" or EINVAL after `fusermount3 -u`, `umount` or a
//! signal, and the image is clean afterwards.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// What the daemon printed, after the lines a mount always prints (journal choice).
fn problems(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("warn") || l.contains("error") || l.contains("Invalid argument"))
        .collect()
}

#[test]
fn unmount_logs_no_error() {
    if skip("unmount_logs_no_error", &["umount"]) {
        return;
    }
    let s = Scratch::new(64 << 20);

    let m = s.mount("");
    std::fs::write(s.p("a"), b"fusermount3").unwrap();
    let log_path = m.log.clone();
    m.unmount();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(problems(&log).is_empty(), "fusermount3 -u: the daemon logged:\n{log}");

    let mut m = s.mount("");
    std::fs::write(s.p("b"), b"umount").unwrap();
    let out = Command::new("umount").arg(&s.mnt).output().unwrap();
    assert!(out.status.success(), "umount: {}", String::from_utf8_lossy(&out.stderr));
    let st = m.wait(Duration::from_secs(60));
    let log = m.log_text();
    assert!(st.success(), "cjfs-mount exited with {st}:\n{log}");
    assert!(problems(&log).is_empty(), "umount: the daemon logged:\n{log}");

    let mut m = s.mount("");
    std::fs::write(s.p("c"), b"signal").unwrap();
    m.signal(libc::SIGTERM);
    let st = m.wait(Duration::from_secs(60));
    let log = m.log_text();
    assert!(st.success(), "cjfs-mount exited with {st}:\n{log}");
    assert!(problems(&log).is_empty(), "SIGTERM: the daemon logged:\n{log}");
    assert!(!is_mounted(&s.mnt), "still mounted after SIGTERM");
    e2fsck_clean(&s.image);
}
