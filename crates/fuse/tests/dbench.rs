//! dbench (the loadfile `client.txt` from the dbench package) with synchronous directory
//! operations, 8 clients, on a cjfs mount: completes with no errors, and the image is clean
//! afterwards. `CJFS_DBENCH_SECS` sets the run time (default 10 s; the full run is
//! `-t 20`).

mod common;

use std::process::Command;

use common::*;

const LOADFILE: &str = "/usr/share/dbench/client.txt";

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
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("failed") || l.contains("unexpected") || l.contains("child")
        })
        .collect();
    assert!(bad.is_empty(), "dbench reported errors:\n{}\n---\n{text}", bad.join("\n"));
    let summary = text.lines().find(|l| l.starts_with("Throughput")).expect("dbench printed no throughput");
    println!("dbench on cjfs: {summary}");
    m.unmount();
    e2fsck_clean(&s.image);
}
