//! Failure files replay the exact crash state, also for concurrent workloads.
//!
//! * `concurrent_failure_replays_exactly`: a violation of an 8-thread workload under a
//!   planted bug is saved with the run's own recording and replays to the same problems
//!   (a new recording of a concurrent workload would give a different log).
//! * `version_1_files_are_rerecorded`: a failure file without a recording (version 1) is
//!   replayed by recording its single-threaded workload again.
//! * `no_barrier_failure_replays_on_a_device_without_barrier`: a failure file records that
//!   its run had no cache barrier and both kinds of replay use such a device again.
//! * `mt8_002_inode_reuse_is_not_a_violation`: the saved recording of a false violation of
//!   mt8-002 (seed 1), a creation in a concurrent round reusing the inode number an unlink
//!   of the same round freed (see `oracle::apply_round`), replays clean.
//! * `slow_creation_reusing_a_number_is_ordered_by_real_time`: two saved recordings of false
//!   violations of free-running workloads under `zjournal` (mtfree8-007 without a barrier,
//!   mtfree8-002 with one), a creation that started first getting an inode number another
//!   thread's file had held and freed meanwhile (see `oracle::apply_ordered`), replay clean.
//!
//! The first three plant a bug, so they need the `planted-bugs` feature. Run in release mode:
//! `cargo test --release -p cjfs-lab --features planted-bugs --test crash_replay`.

use std::path::Path;

use cjfs_lab::crash::check::e2fsck_or_skip;
use cjfs_lab::crash::replay;
#[cfg(feature = "planted-bugs")]
use cjfs_lab::crash::{self, BaseCache, Bugs, CrashConfig, Violation, Workload, workloads};

/// The workload `name` of the full suite (seed 1).
#[cfg(feature = "planted-bugs")]
fn full_suite_workload(name: &str) -> Workload {
    crash::Suite::all().workloads(1).into_iter().find(|w| w.name == name).unwrap_or_else(|| panic!("{name}"))
}

#[cfg(feature = "planted-bugs")]
/// Run `wl` under `bugs` (jbd2, device with a barrier) and save its first violation in `dir`.
fn first_failure(wl: &Workload, bugs: Bugs, dir: &Path) -> Violation {
    first_failure_on(CrashConfig::new("jbd2"), wl, bugs, dir)
}

#[cfg(feature = "planted-bugs")]
/// Run `wl` under `cfg` with `bugs` and save its first violation in `dir`.
fn first_failure_on(mut cfg: CrashConfig, wl: &Workload, bugs: Bugs, dir: &Path) -> Violation {
    cfg.bugs = bugs;
    cfg.states.max_states = 300;
    cfg.failure_dir = Some(dir.to_path_buf());
    let r = crash::run_workload(&cfg, wl, &BaseCache::default(), true);
    assert!(r.error.is_none(), "{}: {:?}", wl.name, r.error);
    let v = r.details.into_iter().next();
    v.unwrap_or_else(|| panic!("{}: the planted bug was not caught", wl.name))
}

#[cfg(feature = "planted-bugs")]
#[test]
fn concurrent_failure_replays_exactly() {
    if !e2fsck_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let wl = workloads::random_threads("mt8-000", 8, 4, 1);
    assert!(!wl.deterministic());
    let v = first_failure(&wl, Bugs { skip_preflush: true, ..Bugs::default() }, dir.path());
    let path = v.file.expect("failure file saved");
    let size = std::fs::metadata(&path).expect("failure file").len();
    eprintln!("{}: {size} bytes", path.display());
    assert!(size < 2 << 20, "failure file of {size} bytes");
    let f = replay::load(&path).expect("load");
    assert_eq!(f.version, replay::FAILURE_VERSION);
    assert!(f.recording.is_some(), "the run's recording is embedded");
    for _ in 0..2 {
        let r = replay::replay(&f, 2).expect("replay");
        eprint!("{}", r.text());
        assert!(r.embedded && r.same_log);
        assert_eq!(r.state_text, v.state_text);
        assert_eq!(r.problems, v.problems);
    }
}

#[cfg(feature = "planted-bugs")]
#[test]
fn version_1_files_are_rerecorded() {
    if !e2fsck_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let wl = full_suite_workload("ace1-0021");
    let v = first_failure(&wl, Bugs { skip_preflush: true, ..Bugs::default() }, dir.path());
    let path = v.file.expect("failure file saved");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    let obj = json.as_object_mut().expect("an object");
    obj.remove("recording");
    obj.insert("version".into(), 1.into());
    std::fs::write(&path, serde_json::to_string(&json).expect("json")).expect("write");
    let f = replay::load(&path).expect("load a version 1 file");
    assert!(f.recording.is_none());
    let r = replay::replay(&f, 2).expect("replay");
    assert!(!r.embedded && r.same_log);
    assert_eq!(r.problems, v.problems);
}

#[cfg(feature = "planted-bugs")]
#[test]
fn no_barrier_failure_replays_on_a_device_without_barrier() {
    if !e2fsck_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let wl = full_suite_workload("ace1-0021");
    // barrierfs: with a barrier its log holds barriers, without one it does not, so a
    // re-recording on the wrong kind of device would not give the saved log.
    let mut cfg = CrashConfig::new("barrierfs");
    cfg.check.barrier = false;
    let v = first_failure_on(cfg, &wl, Bugs { skip_preflush: true, ..Bugs::default() }, dir.path());
    let path = v.file.expect("failure file saved");
    let f = replay::load(&path).expect("load");
    assert!(!f.barrier, "the failure file records the device without barrier");
    let r = replay::replay(&f, 2).expect("replay");
    assert!(r.embedded && r.same_log);
    assert_eq!(r.problems, v.problems);
    let mut v1 = f.clone();
    v1.recording = None;
    let r = replay::replay(&v1, 2).expect("re-recorded replay");
    assert!(!r.embedded && r.same_log, "re-recorded on a device without barrier");
    assert_eq!(r.problems, v.problems);
}

#[test]
fn mt8_002_inode_reuse_is_not_a_violation() {
    if !e2fsck_or_skip() {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jbd2-mt8-002-57.json");
    let f = replay::load(&path).expect("load");
    assert_eq!(f.problems, ["inode 20: unreachable, but it is linked in every allowed state (45..=54)"]);
    let r = replay::replay(&f, 2).expect("replay");
    eprint!("{}", r.text());
    assert!(r.embedded && r.same_log);
    assert!(!r.reproduced(), "{:?}", r.problems);
}

#[test]
fn slow_creation_reusing_a_number_is_ordered_by_real_time() {
    if !e2fsck_or_skip() {
        return;
    }
    let cases = [
        (
            "zjournal-nobarrier-mtfree8-007-131.json",
            "inode 26: size 6000, expected 0 (durable from state 87)",
        ),
        ("zjournal-mtfree8-002-99.json", "inode 23: size 0, expected 5048 (durable from state 73)"),
    ];
    for (file, problem) in cases {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(file);
        let f = replay::load(&path).expect("load");
        assert_eq!(f.problems.first().map(String::as_str), Some(problem), "{file}");
        let r = replay::replay(&f, 2).expect("replay");
        eprint!("{}", r.text());
        assert!(r.embedded && r.same_log, "{file}");
        assert!(!r.reproduced(), "{file}: {:?}", r.problems);
    }
}
