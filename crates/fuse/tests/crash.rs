//! Crash the daemon (SIGKILL) in the middle of an fsync-heavy workload, mount again (journal
//! recovery and orphan cleanup run), and check that every file whose fsync had returned is
//! intact, that an fsynced append log holds every acknowledged record, and that `e2fsck -fn`
//! finds the image clean.

mod common;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

const WORKERS: u64 = 4;
const RECORD: usize = 512;

/// Per worker: the files whose fsync returned, and how many log records were acknowledged.
type Acked = Arc<Mutex<Vec<(Vec<u64>, u64)>>>;

fn file_len(i: u64) -> usize {
    1000 + ((i * 7919) % 60_000) as usize
}

fn run_once(round: u64, opts: &str) {
    let s = Scratch::new(512 << 20);
    let m = s.mount(opts);
    let stop = Arc::new(AtomicBool::new(false));
    // Per worker: the files whose fsync returned, and the records of its log acknowledged.
    let acked: Acked = Arc::new(Mutex::new(vec![(Vec::new(), 0); WORKERS as usize]));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (stop, acked) = (stop.clone(), acked.clone());
            let dir = s.p(&format!("w{w}"));
            std::fs::create_dir(&dir).unwrap();
            std::thread::spawn(move || {
                let mut log = OpenOptions::new().create(true).append(true).open(dir.join("log")).unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let id = w * 1_000_000 + i;
                    let r = (|| -> std::io::Result<()> {
                        let p = dir.join(format!("f{i}"));
                        let tmp = dir.join(format!("f{i}.tmp"));
                        let mut f = File::create(&tmp)?;
                        f.write_all(&pattern(id, file_len(id)))?;
                        f.sync_all()?;
                        drop(f);
                        std::fs::rename(&tmp, &p)?;
                        File::open(&dir)?.sync_all()?;
                        acked.lock().unwrap()[w as usize].0.push(i);
                        let mut rec = pattern(id ^ 0xABCD, RECORD);
                        rec[..8].copy_from_slice(&i.to_le_bytes());
                        log.write_all(&rec)?;
                        log.sync_data()?;
                        acked.lock().unwrap()[w as usize].1 = i + 1;
                        // Some churn: delete an older file now and then (orphans, frees).
                        if i % 5 == 4 {
                            std::fs::remove_file(dir.join(format!("f{}", i - 3)))?;
                        }
                        Ok(())
                    })();
                    if r.is_err() {
                        // The daemon died under us.
                        return;
                    }
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500 + 400 * round));
    m.crash();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let total: usize = acked.iter().map(|a| a.0.len()).sum();
    assert!(total > 20, "too few fsyncs before the crash: {total}");
    let m = s.mount(opts);
    assert!(m.log_text().contains("recovered"), "the remount did not report recovery:\n{}", m.log_text());
    for (w, (files, records)) in acked.iter().enumerate() {
        let dir = s.p(&format!("w{w}"));
        for &i in files {
            if i % 5 == 1 && files.contains(&(i + 3)) {
                continue; // deleted by the workload
            }
            let id = w as u64 * 1_000_000 + i;
            let got = std::fs::read(dir.join(format!("f{i}")))
                .unwrap_or_else(|e| panic!("round {round}: w{w}/f{i} (fsync returned) lost: {e}"));
            assert!(got == pattern(id, file_len(id)), "round {round}: w{w}/f{i} damaged");
        }
        let log = std::fs::read(dir.join("log")).unwrap();
        assert!(log.len() >= *records as usize * RECORD, "round {round}: w{w}/log lost acknowledged records");
        for r in 0..*records {
            let id = w as u64 * 1_000_000 + r;
            let mut want = pattern(id ^ 0xABCD, RECORD);
            want[..8].copy_from_slice(&r.to_le_bytes());
            let at = r as usize * RECORD;
            assert!(log[at..at + RECORD] == want[..], "round {round}: w{w}/log record {r} damaged");
        }
    }
    println!("crash round {round} ({opts:?}): {total} fsynced files checked after recovery");
    m.unmount();
    e2fsck_clean(&s.image);
}

#[test]
fn kill_9_during_fsync_workload() {
    if skip("kill_9_during_fsync_workload", &[]) {
        return;
    }
    run_once(0, "");
    run_once(1, "data=journal");
    run_once(2, "writeback");
}

/// `-o dirsync`, `-o sync`, and `chattr +D` on one directory of a plain mount (passed on to
/// the directories made in it): every directory operation is durable when it returns, so
/// a kill -9 right after them loses none. No commit timer runs (`commit=600`) and nothing
/// is fsynced after the set-up.
#[test]
fn kill_9_after_directory_operations_loses_none_with_dirsync() {
    if skip("kill_9_after_directory_operations_loses_none_with_dirsync", &["chattr"]) {
        return;
    }
    for opts in ["dirsync,commit=600", "sync,commit=600", "commit=600"] {
        let s = Scratch::new(64 << 20);
        let m = s.mount(opts);
        let d = s.p("d");
        std::fs::create_dir(&d).unwrap();
        if opts == "commit=600" {
            sh(&s.mnt, "chattr +D d");
            File::open(&d).unwrap().sync_all().unwrap();
        }
        std::fs::create_dir(d.join("a")).unwrap();
        File::create(d.join("a/f")).unwrap();
        std::fs::rename(d.join("a/f"), d.join("g")).unwrap();
        std::os::unix::fs::symlink("g", d.join("s")).unwrap();
        std::fs::hard_link(d.join("g"), d.join("l")).unwrap();
        std::fs::create_dir(d.join("x")).unwrap();
        std::fs::remove_dir(d.join("x")).unwrap();
        File::create(d.join("a/kept")).unwrap();
        std::fs::remove_file(d.join("l")).unwrap();
        m.crash();
        let m = s.mount(opts);
        for (path, there) in [
            ("a", true),
            ("a/kept", true),
            ("a/f", false),
            ("g", true),
            ("s", true),
            ("l", false),
            ("x", false),
        ] {
            assert_eq!(
                std::fs::symlink_metadata(d.join(path)).is_ok(),
                there,
                "-o {opts}: d/{path} after kill -9 and recovery"
            );
        }
        let attrs = sh(&s.mnt, "lsattr -d d/a");
        assert!(
            opts != "commit=600" || attrs.split_whitespace().next().is_some_and(|f| f.contains('D')),
            "d/a inherits +D: {attrs}"
        );
        m.unmount();
        e2fsck_clean(&s.image);
    }
}
