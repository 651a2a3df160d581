//! A directory of 100,000 entries: creation is not quadratic, lookups find every name,
//! readdir returns every name exactly once with offsets that stay valid while entries are
//! added and removed between pages (and by another thread meanwhile), deleting them all
//! leaves an empty directory, and `e2fsck -fn` is clean throughout.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cjfs_blockdev::{Device, FileDevice};
use cjfs_fs::{Fs, FsError, Ino, MkfsOptions, MountOptions, ROOT_INO, mkfs};
use common::{assert_fsck_clean, open_image};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const N: usize = 100_000;
const WINDOW: usize = 10_000;

fn name(i: usize) -> Vec<u8> {
    format!("entry-{i:06}").into_bytes()
}

/// A 512 MiB image with enough inodes for 100,000 files.
fn image(dir: &Path) -> (std::path::PathBuf, Device) {
    let path = dir.join("bigdir.img");
    let dev: Device = Arc::new(FileDevice::create(&path, 512 << 20).expect("create image"));
    mkfs(&*dev, &MkfsOptions { inode_ratio: 4096, assume_zeroed: true, ..MkfsOptions::default() })
        .expect("mkfs");
    (path, dev)
}

/// Every entry of `dir` (without `.` and `..`), paging `page` at a time; panics on a
/// duplicate.
fn list_all(fs: &Fs, dir: Ino, page: usize) -> HashMap<Vec<u8>, Ino> {
    let mut out = HashMap::new();
    let mut off = 0;
    loop {
        let ents = fs.readdir(dir, off, page).expect("readdir");
        let Some(last) = ents.last() else { break };
        off = last.next_offset;
        for e in ents {
            if e.name != b"." && e.name != b".." {
                assert!(
                    out.insert(e.name.clone(), e.ino).is_none(),
                    "{:?} listed twice",
                    String::from_utf8_lossy(&e.name)
                );
            }
        }
    }
    out
}

/// A temporary directory in RAM when there is one (the image's flushes are then cheap).
fn fast_tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cjfs-bigdir")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tmpdir")
}

#[test]
fn bigdir_100k() {
    let tmp = fast_tmpdir();
    let (path, dev) = image(tmp.path());
    let fs = Fs::open(dev, MountOptions::default()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).expect("mkdir").ino;

    // Creation: the last 10,000 must not be much slower than the first 10,000.
    let mut inos = Vec::with_capacity(N);
    let mut first = Duration::ZERO;
    let t0 = Instant::now();
    let mut tw = Instant::now();
    for i in 0..N {
        inos.push(fs.create(d, &name(i), 0o644, 0, 0).unwrap_or_else(|e| panic!("create {i}: {e}")).ino);
        if i + 1 == WINDOW {
            first = tw.elapsed();
        }
        if i + 1 == N - WINDOW {
            tw = Instant::now();
        }
    }
    let last = tw.elapsed();
    eprintln!("created {N} in {:?}: first {WINDOW} {first:?}, last {WINDOW} {last:?}", t0.elapsed());
    // A complexity check, not a performance target: linear work per create keeps the two
    // windows alike; quadratic work would make the last ~10x slower. Small absolute slack
    // absorbs timer noise and commits.
    assert!(
        last <= first * 3 + Duration::from_millis(300),
        "creating entries slows down with directory size: first {WINDOW} took {first:?}, last {WINDOW} {last:?}"
    );

    // Lookups of random names, present and absent.
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..5000 {
        let i = rng.gen_range(0..N);
        let a = fs.lookup(d, &name(i)).unwrap_or_else(|e| panic!("lookup {i}: {e}"));
        assert_eq!(a.ino, inos[i], "lookup {i}");
    }
    for i in N..N + 100 {
        assert!(matches!(fs.lookup(d, &name(i)), Err(FsError::NotFound(_))));
    }

    // Every name exactly once, in pages of various sizes.
    for page in [1000, 4097] {
        let all = list_all(&fs, d, page);
        assert_eq!(all.len(), N, "readdir with pages of {page}");
        for (i, ino) in inos.iter().enumerate().step_by(97) {
            assert_eq!(all.get(&name(i)), Some(ino));
        }
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);

    // Remount (the index is rebuilt from disk) and read in pages while entries come and go.
    let fs = Fs::open(open_image(&path), MountOptions::default()).expect("remount");
    let d = fs.lookup(ROOT_INO, b"big").expect("lookup big").ino;
    assert_eq!(fs.lookup(d, &name(N - 1)).expect("last name").ino, inos[N - 1]);
    readdir_while_changing(&fs, d);

    // Delete everything left.
    let left = list_all(&fs, d, 3000);
    let mut names: Vec<Vec<u8>> = left.into_keys().collect();
    names.shuffle(&mut rng);
    let t = Instant::now();
    for n in &names {
        fs.unlink(d, n).unwrap_or_else(|e| panic!("unlink {:?}: {e}", String::from_utf8_lossy(n)));
    }
    eprintln!("deleted {} in {:?}", names.len(), t.elapsed());
    let rest = fs.readdir(d, 0, 10).expect("readdir empty");
    assert_eq!(rest.len(), 2, "only . and .. left: {rest:?}");
    assert!(list_all(&fs, d, 100).is_empty());
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
    let fs = Fs::open(open_image(&path), MountOptions::default()).expect("remount");
    assert!(list_all(&fs, d, 100).is_empty());
    fs.rmdir(ROOT_INO, b"big").expect("rmdir");
    fs.unmount().expect("unmount");
    assert_fsck_clean(&path);
}

/// Page through the directory; between pages delete half of the names just returned,
/// delete some not yet returned and insert new ones, while another thread inserts and
/// removes its own names. Every original name never deleted must come back exactly once;
/// no name may come back twice or after its deletion.
fn readdir_while_changing(fs: &Fs, d: Ino) {
    let stop = Arc::new(AtomicBool::new(false));
    let bg = {
        let fs = fs.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(11);
            let mut live = Vec::new();
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if live.len() < 500 || rng.gen_bool(0.5) {
                    let n = format!("bg-{k}").into_bytes();
                    k += 1;
                    fs.create(d, &n, 0o644, 0, 0).expect("bg create");
                    live.push(n);
                } else {
                    let i = rng.gen_range(0..live.len());
                    let n = live.swap_remove(i);
                    fs.unlink(d, &n).expect("bg unlink");
                }
            }
            k
        })
    };
    let mut rng = StdRng::seed_from_u64(13);
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    // Original names deleted before readdir returned them: they may or may not appear.
    let mut deleted_unseen: HashSet<Vec<u8>> = HashSet::new();
    // Names deleted (after or before being seen): must not appear from then on.
    let mut gone: HashSet<Vec<u8>> = HashSet::new();
    let mut added = 0usize;
    let mut off = 0;
    let mut pages = 0;
    loop {
        let ents = fs.readdir(d, off, 2000).expect("readdir page");
        let Some(last) = ents.last() else { break };
        off = last.next_offset;
        pages += 1;
        let mut page_names = Vec::new();
        for e in ents {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            assert!(
                !gone.contains(&e.name),
                "{:?} returned after its deletion",
                String::from_utf8_lossy(&e.name)
            );
            assert!(seen.insert(e.name.clone()), "{:?} returned twice", String::from_utf8_lossy(&e.name));
            page_names.push(e.name);
        }
        // Half of what was just returned goes away (its records merge into neighbours).
        for n in page_names.iter().filter(|n| n.starts_with(b"entry-")) {
            if rng.gen_bool(0.5) {
                fs.unlink(d, n).expect("unlink seen");
                gone.insert(n.clone());
            }
        }
        // Some originals not returned yet go away too.
        for _ in 0..20 {
            let n = name(rng.gen_range(0..N));
            if !seen.contains(&n) && !gone.contains(&n) {
                fs.unlink(d, &n).expect("unlink unseen");
                deleted_unseen.insert(n.clone());
                gone.insert(n);
            }
        }
        // And new names arrive (they may land before or after the cursor).
        for _ in 0..50 {
            let n = format!("new-{added}").into_bytes();
            added += 1;
            fs.create(d, &n, 0o644, 0, 0).expect("create new");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let bg_made = bg.join().expect("background thread");
    for i in 0..N {
        let n = name(i);
        assert!(
            seen.contains(&n) || deleted_unseen.contains(&n),
            "{:?} was never deleted but readdir did not return it",
            String::from_utf8_lossy(&n)
        );
    }
    eprintln!(
        "readdir: {pages} pages, {} names seen, {} deleted unseen, {added} added, {bg_made} made by the other thread",
        seen.len(),
        deleted_unseen.len()
    );
}
