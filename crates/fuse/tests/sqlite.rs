//! sqlite3 on a cjfs mount: 10,000 inserts in transactions with a rollback journal and with
//! WAL; `PRAGMA integrity_check` is ok, and still ok (with every row) after unmount and
//! remount.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

fn sqlite(dir: &Path, db: &str, script: &str) -> String {
    let mut child = Command::new("sqlite3")
        .arg("-bail")
        .arg(db)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "sqlite3 {db} failed ({}): {err}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// 10,000 rows in 100 transactions of 100.
fn inserts(mode: &str) -> String {
    let mut s = format!(
        "PRAGMA journal_mode={mode};\nPRAGMA synchronous=FULL;\n\
         CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);\nCREATE INDEX tk ON t(k);\n"
    );
    for tx in 0..100 {
        s.push_str("BEGIN;\n");
        for i in 0..100 {
            let id = tx * 100 + i;
            s.push_str(&format!(
                "INSERT INTO t VALUES({id}, 'key-{id:06}', randomblob({}));\n",
                50 + (id * 37) % 900
            ));
        }
        s.push_str("COMMIT;\n");
    }
    // Some updates and deletes so pages are rewritten and freed.
    s.push_str("BEGIN;\nUPDATE t SET v = randomblob(2000) WHERE id % 7 = 0;\nDELETE FROM t WHERE id % 11 = 0;\nCOMMIT;\n");
    s
}

fn check(dir: &Path, db: &str) {
    let out = sqlite(dir, db, "PRAGMA integrity_check;\nSELECT count(*), sum(id) FROM t;\n");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"ok"), "{db}: integrity_check says {out}");
    let kept: Vec<u64> = (0..10_000).filter(|i| i % 11 != 0).collect();
    let want = format!("{}|{}", kept.len(), kept.iter().sum::<u64>());
    assert_eq!(lines.get(1), Some(&want.as_str()), "{db}: rows");
}

#[test]
fn sqlite_rollback_journal_and_wal() {
    if skip("sqlite_rollback_journal_and_wal", &["sqlite3"]) {
        return;
    }
    let s = Scratch::new(512 << 20);
    let m = s.mount("");
    let t0 = std::time::Instant::now();
    let out = sqlite(&s.mnt, "rollback.db", &inserts("DELETE"));
    assert!(out.contains("delete"), "journal mode: {out}");
    let out = sqlite(&s.mnt, "wal.db", &inserts("WAL"));
    assert!(out.contains("wal"), "journal mode: {out}");
    println!("sqlite3: 2 x 10,000 inserts in {:?}", t0.elapsed());
    check(&s.mnt, "rollback.db");
    check(&s.mnt, "wal.db");
    m.unmount();
    e2fsck_clean(&s.image);
    let m = s.mount("");
    check(&s.mnt, "rollback.db");
    check(&s.mnt, "wal.db");
    m.unmount();
    e2fsck_clean(&s.image);
}
