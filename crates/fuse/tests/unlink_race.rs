//! 16 threads repeatedly unlinking and re-creating the same few names in one directory with
//! open(O_CREAT): the open, write and close never fail (no ENOENT, no EIO) — the inode
//! lifetime follows the kernel's lookup/forget protocol, so an inode the kernel found just
//! before another thread unlinked it is still there when it opens it.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn sixteen_threads_unlink_and_recreate_same_names() {
    if skip("sixteen_threads_unlink_and_recreate_same_names", &[]) {
        return;
    }
    let s = Scratch::new(256 << 20);
    let m = s.mount("");
    let dir = s.p("race");
    std::fs::create_dir(&dir).unwrap();
    let secs: u64 = std::env::var("CJFS_RACE_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let opens = Arc::new(AtomicU64::new(0));
    let unlinks = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let dir = dir.clone();
            let (opens, unlinks) = (opens.clone(), unlinks.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let name = dir.join(format!("n{}", (i + t) % 4));
                    match std::fs::remove_file(&name) {
                        Ok(()) => {
                            unlinks.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                        Err(e) => return Err(format!("unlink {}: {e}", name.display())),
                    }
                    let mut o = OpenOptions::new();
                    o.write(true).create(true);
                    if i.is_multiple_of(3) {
                        o.truncate(true);
                    }
                    if i.is_multiple_of(5) {
                        o.custom_flags(libc::O_APPEND);
                    }
                    let mut f =
                        o.open(&name).map_err(|e| format!("open(O_CREAT) {}: {e}", name.display()))?;
                    f.write_all(&[t as u8; 100]).map_err(|e| format!("write {}: {e}", name.display()))?;
                    if i.is_multiple_of(16) {
                        f.sync_all().map_err(|e| format!("fsync {}: {e}", name.display()))?;
                    }
                    drop(f);
                    opens.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok(())
            })
        })
        .collect();
    let errors: Vec<String> = threads.into_iter().filter_map(|h| h.join().unwrap().err()).collect();
    assert!(errors.is_empty(), "errors: {errors:?}");
    let (o, u) = (opens.load(Ordering::Relaxed), unlinks.load(Ordering::Relaxed));
    println!("unlink/re-create race: {o} opens, {u} unlinks in {secs} s, no errors");
    assert!(o > 1000 && u > 100, "too little work done: {o} opens, {u} unlinks");
    m.unmount();
    e2fsck_clean(&s.image);
}
