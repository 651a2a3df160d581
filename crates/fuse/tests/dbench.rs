//! dbench (the loadfile `client.txt` from the dbench package) with synchronous directory
//! operations, 8 clients, on a cjfs mount: completes with no errors, and the image is clean
//! afterwards. `CJFS_DBENCH_SECS` sets the run time (default 10 s; the full run is
//! `-t 20`).

mod common;

use std::process::Command;

use common::*;

const LOADFILE: &str = "/usr/share/dbench/client.txt";

/// Whether a line of dbench's output reports a failure of the file system under test.
///
/// dbench reports an operation that failed or returned an unexpected status with `ERROR`
/// (`ERROR: child N failed at line M`, `(N) ERROR: handle ...`) and lines naming the
/// `NT_STATUS` it got against the one the loadfile expected; a client that died makes the
/// exit status non-zero. Its own set-up noise is not the file system's failure: dbench
/// 4.00 prints `failed to create barrier semaphore` whenever `semget` returns id 0 — a
/// valid id, the usual one for the first semaphore on a fresh machine — because it tests
/// the id with `!`, and then runs normally (`unshare --ipc dbench ...` shows it anywhere).
fn is_dbench_error(line: &str) -> bool {
    if line.contains("failed to create barrier semaphore") {
        return false;
    }
    // An operation dbench could not do ("... failed ...") counts too, whatever its wording.
    line.contains("ERROR") || line.contains("NT_STATUS") || line.contains("failed")
}

#[test]
fn dbench_error_lines_are_told_from_noise() {
    assert!(!is_dbench_error("failed to create barrier semaphore"));
    assert!(!is_dbench_error("  8     12345    45.12 MB/sec  execute   9 sec  latency 12.3 ms"));
    assert!(is_dbench_error("ERROR: child 3 failed at line 4123"));
    assert!(is_dbench_error("(4123) ERROR: handle 12345 was not found"));
    assert!(is_dbench_error(
        "[4123] open ./clients/client1/foo failed for handle 7 (NT_STATUS_OBJECT_NAME_NOT_FOUND)"
    ));
}

/// dbench in a fresh IPC namespace, where its barrier semaphore gets id 0 and it prints
/// `failed to create barrier semaphore`: the run still passes (the noise is not an error).
#[test]
fn dbench_semaphore_id_0_is_not_a_failure() {
    if skip("dbench_semaphore_id_0_is_not_a_failure", &["dbench", "unshare"]) {
        return;
    }
    if !std::path::Path::new(LOADFILE).exists() {
        println!("SKIP: dbench_semaphore_id_0_is_not_a_failure: {LOADFILE} is missing");
        return;
    }
    let s = Scratch::new(1 << 30);
    let m = s.mount("");
    let out = Command::new("unshare")
        .args(["--ipc", "dbench", "-c", LOADFILE, "-D"])
        .arg(&s.mnt)
        .args(["-t", "3", "2"])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "dbench failed ({}):\n{text}", out.status);
    assert!(text.contains("failed to create barrier semaphore"), "semaphore id was not 0:\n{text}");
    let bad: Vec<&str> = text.lines().filter(|l| is_dbench_error(l)).collect();
    assert!(bad.is_empty(), "dbench reported errors:\n{}", bad.join("\n"));
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn dbench_8_clients_sync_dirs() {
    if skip("dbench_8_clients_sync_dirs", &["dbench"]) {
        return;
    }
    if !std::path::Path::new(LOADFILE).exists() {
        println!("SKIP: dbench_8_clients_sync_dirs: {LOADFILE} is missing");
        return;
    }
    let secs: u32 = std::env::var("CJFS_DBENCH_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let s = Scratch::new(4 << 30);
    let m = s.mount("");
    let out = Command::new("dbench")
        .arg("-c")
        .arg(LOADFILE)
        .arg("-D")
        .arg(&s.mnt)
        .arg("--sync-dir")
        .arg("-t")
        .arg(secs.to_string())
        .arg("8")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "dbench failed ({}):\n{text}", out.status);
    let bad: Vec<&str> = text.lines().filter(|l| is_dbench_error(l)).collect();
    assert!(bad.is_empty(), "dbench reported errors:\n{}\n---\n{text}", bad.join("\n"));
    let summary = text.lines().find(|l| l.starts_with("Throughput")).expect("dbench printed no throughput");
    println!("dbench on cjfs: {summary}");
    m.unmount();
    e2fsck_clean(&s.image);
}
