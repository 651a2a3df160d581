//! The regression corpus (`crates/imagefuzz/corpus/`): every image is small enough to keep
//! in the repository, loads, and replays with no failure class (panic, hang,
//! changed_by_readonly, write_left_unclean).

mod common;

use std::path::PathBuf;

use cjfs_imagefuzz::campaign::{Config, replay_corpus};
use cjfs_imagefuzz::corpus::{MAX_ENTRY_BYTES, load_dir};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

#[test]
fn corpus_entries_are_small_and_load() {
    let dir = corpus_dir();
    let entries = load_dir(&dir).expect("load the corpus");
    assert!(!entries.is_empty(), "the corpus in {} is empty", dir.display());
    for e in &entries {
        let len = std::fs::metadata(&e.path).expect("stat").len();
        assert!(
            len < MAX_ENTRY_BYTES,
            "{}: {len} bytes (keep corpus files under {MAX_ENTRY_BYTES})",
            e.path.display()
        );
        assert!(
            !e.meta.paths.is_empty() || e.bytes.is_empty(),
            "{}: no paths in the sidecar",
            e.path.display()
        );
    }
}

#[test]
fn corpus_replays_without_failures() {
    let cjfs = common::cjfs_binary();
    common::note_e2fsck();
    let cfg = Config { cjfs, jobs: 2, progress: false, ..Config::default() };
    let report = replay_corpus(&cfg, &corpus_dir()).expect("replay the corpus");
    println!("{}", report.render());
    let n = report.failure_count();
    assert_eq!(n, 0, "{n} failing command run(s) replaying the corpus (groups above)");
}
