//! The crash harness' CI subset and its self-test.
//!
//! * `ci_subset_every_mode` (data=ordered): the fast subset (`Suite::ci()`: every 12th
//!   seq-1 workload, a seeded sample of seq-2 and seq-3 workloads, the classics, small
//!   iJournaling scenarios and multi-threaded workloads) on every crash-tested preset
//!   (`cjfs_fs::preset::names()`), with zero violations: up to 300 crash states per workload
//!   for the family heads ([`FAMILY_HEADS`]), 40 for the ablations, combinations and
//!   `nojournal`. `nojournal` is not crash-consistent by design, so its violations are
//!   reported, not failed on. The presets that overlap commits (dual thread, several
//!   versions) must have been caught with several transactions in flight.
//! * `ci_subset_every_mode_data_journal`: the same subset under data=journal for the family
//!   heads, up to 200 crash states per workload.
//! * `ci_subset_every_mode_without_barrier`: the same subset recorded on a device without a
//!   cache barrier (like an image file), for the family heads that use barriers or choose by
//!   them, and for per-core journaling, whose logs flush one at a time, sharing, on that
//!   device (its flushes are not queued) and each on its own on the other (the others commit
//!   the same way on both devices), where the journal's commit path differs: every group of
//!   transactions pays flush, commit blocks, flush
//!   (`no_barrier_device_gets_no_barrier` checks that the recording holds no barrier then).
//! * `ci_subset_one_kib_blocks`: the same subset on images of 1 KiB blocks (what mke2fs
//!   picks for images under 512 MiB) with `jbd2` and `cjfs`, up to 150 crash states per
//!   workload (the journal's block-size dependent parts are its tags and descriptors).
//! * `planted_bugs_are_caught`: each of the four planted bugs makes the harness report
//!   violations; `ijournal_planted_bug_is_caught`: so does iJournaling's (an fsync without
//!   the records of the new directories on the file's path).
//! * `planted_dirsync_bug_is_caught`: the `dirsync-*` workloads catch directory operations
//!   in a `chattr +D`/`+S` directory that return without committing, and are clean without.
//! * `ijournal_commit_form_and_full_areas`: iJournaling's cases with the paper's record form,
//!   and with areas small enough to fill.
//! * `regressions`: workloads that exposed real bugs stay clean.
//!
//! Run in release mode: `cargo test --release -p cjfs-lab --test crash_ci`.

use cjfs_blockdev::RecordedOp;
use cjfs_fs::{DataMode, preset};
#[cfg(feature = "planted-bugs")]
use cjfs_lab::crash::Bugs;
use cjfs_lab::crash::{self, BaseCache, CrashConfig, Suite, Summary, Workload};

use crash::check::e2fsck_or_skip;

#[test]
fn ci_subset_every_mode() {
    ci_subset(DataMode::Ordered, true);
}

#[test]
fn ci_subset_every_mode_data_journal() {
    ci_subset(DataMode::Journal, true);
}

#[test]
fn ci_subset_every_mode_without_barrier() {
    ci_subset(DataMode::Ordered, false);
}

#[test]
fn ci_subset_one_kib_blocks() {
    if !e2fsck_or_skip() {
        return;
    }
    let workloads = Suite::ci().workloads(1);
    for m in ["jbd2", "cjfs"] {
        let mut cfg = CrashConfig::new(m);
        cfg.block_size = 1024;
        cfg.states.max_states = ONE_KIB_STATES;
        let (s, results) = crash::run_suite(&cfg, &workloads, &|_| {});
        for r in &results {
            if let Some(e) = &r.error {
                eprintln!("{m}: {}: {e}", r.name);
            }
        }
        eprintln!("{m} with 1 KiB blocks: {} crash states, {} violations", s.crash_states, s.violations);
        assert!(s.crash_states > 0, "{m}: no crash states");
        assert!(
            s.passed(),
            "{m} with 1 KiB blocks: {} violation(s), {} workload error(s)",
            s.violations,
            s.workload_errors
        );
    }
}

/// The CI subset on every preset with data mode `data`, on a device with or without a
/// cache barrier.
fn ci_subset(data: DataMode, barrier: bool) {
    if !e2fsck_or_skip() {
        return;
    }
    let t0 = std::time::Instant::now();
    let mut modes = Vec::new();
    for m in preset::names() {
        let Some((workloads, max_states)) = ci_plan(m, data, barrier) else { continue };
        let mut cfg = CrashConfig::new(m);
        cfg.data = data;
        cfg.check.barrier = barrier;
        cfg.states.max_states = max_states;
        let (s, results) = crash::run_suite(&cfg, &workloads, &|_| {});
        for r in &results {
            if let Some(e) = &r.error {
                eprintln!("{m}: {}: {e}", r.name);
            }
            if s.crash_consistent_by_design {
                for v in &r.details {
                    eprintln!("{m}: {}: {} — {:?}", v.workload, v.state_text, v.problems);
                }
            }
        }
        modes.push(s);
    }
    let summary = Summary { modes, seed: 1, seconds: t0.elapsed().as_secs_f64() };
    eprintln!("{}", summary.table());
    for m in &summary.modes {
        assert!(m.crash_states > 0, "{}: no crash states", m.mode);
        // Presets that let a transaction commit while earlier ones are still being made
        // durable must be tested in that situation too (the free-running workload). Without
        // a barrier the `cjfs` presets commit serially.
        let overlaps = preset::resolve(&m.mode)
            .map(|o| o.journal)
            .is_ok_and(|c| c.dual_thread && c.max_versions > 1 && (barrier || !c.dual_thread_barrier_only));
        if overlaps {
            assert!(m.multi_tx_states > 0, "{}: no crash state with several transactions in flight", m.mode);
        }
        if preset::resolve(&m.mode).is_ok_and(|o| o.journal.ijournal.on()) {
            // The records were written, wrapped around the areas, and replayed.
            assert!(
                m.ij_served > 0 && m.ij_fallbacks > 0 && m.ij_wraps > 0 && m.ij_replayed > 0,
                "{}: iJournaling was not exercised: {} served, {} fallbacks, {} wraps, {} images replayed",
                m.mode,
                m.ij_served,
                m.ij_fallbacks,
                m.ij_wraps,
                m.ij_replayed
            );
        }
        assert!(
            m.passed(),
            "{}: {} violation(s), {} workload error(s)",
            m.mode,
            m.violations,
            m.workload_errors
        );
    }
}

/// Presets whose commit path stands for a family in the data=journal and barrier-less
/// subsets: every other preset differs from one of these by one switched-off technique (an
/// ablation) or a combination whose parts are tested here, and runs in the data=ordered
/// subset and in the full suites (`docs/results/crash/`). CI time is the limit: every preset
/// in every data mode and device kind took over half of a 30-minute CI run.
const FAMILY_HEADS: &[&str] = &["jbd2", "barrierfs", "cjfs", "zjournal", "joj", "ijournal"];

/// Crash states per workload for a family head under data=ordered; the others take fewer.
/// (400 until a fresh-clone CI run took 28 of its 30 minutes; the full suites take every
/// state. By mode, the data=ordered subset spent 215 of its 383 s on the heads.)
const HEAD_STATES: usize = 300;
/// Crash states per workload for a family head under data=journal or without a barrier.
const HEAD_OTHER_STATES: usize = 200;
/// Crash states per workload for the ablations, combinations and `nojournal` (150, then 100,
/// then 60, until the same limit; the cap binds: they averaged 57 states per workload at 60).
const ABLATION_STATES: usize = 40;
/// Crash states per workload on 1 KiB blocks.
const ONE_KIB_STATES: usize = 150;

/// What the CI subset runs for preset `m` in data mode `data` on a device with or without a
/// cache barrier: its workloads and the cap on crash states per workload, or `None` (with
/// the reason printed) where another run covers the same commit path.
fn ci_plan(m: &str, data: DataMode, barrier: bool) -> Option<(Vec<Workload>, usize)> {
    let skip = |why: &str| {
        eprintln!("{m}: {why}");
        None
    };
    let head = FAMILY_HEADS.contains(&m);
    let ij = preset::resolve(m).is_ok_and(|o| o.journal.ijournal.on());
    // iJournaling writes no i-transaction for journaled data (every fsync commits, as its
    // base preset's: `tests/ijournal.rs` checks the fallback).
    if ij && data == DataMode::Journal {
        return skip("iJournaling takes its base preset's paths under data=journal; covered there");
    }
    // The adaptive policy chooses only under data=ordered; under data=journal the preset is
    // `joj` (`adaptive_policy_is_inert_under_data_journal` in crates/fs/tests/joj.rs).
    if data == DataMode::Journal && m == "adaptive" {
        return skip("under data=journal the same as joj; covered by joj");
    }
    // `joj` under data=ordered commits like `adaptive` under data=ordered (single writes, with
    // and without ordered data, data-journaled files) without the policy's switches.
    if data == DataMode::Ordered && barrier && m == "joj" {
        return skip("under data=ordered covered by adaptive");
    }
    if (data == DataMode::Journal || !barrier) && !head {
        return skip("an ablation or combination: data=ordered subset and full suites only");
    }
    // Without a barrier only the presets that use one (or choose by it) take another commit
    // path, and per-core logs another flush path (`LogFlush::Auto`: the crash device without
    // a barrier does not queue flushes); the others record the same logs as on the barrier
    // device.
    let barrier_sensitive = ij
        || preset::resolve(m).is_ok_and(|o| {
            o.journal.use_barriers
                || o.journal.dual_thread_barrier_only
                || o.journal.logs != cjfs_journal::Logs::One
        });
    if !barrier && !barrier_sensitive {
        return skip("same commit path with and without a barrier; covered by ci_subset_every_mode");
    }
    let mut workloads = Suite::ci().workloads_for(m, 1);
    if m == "ijournal-shared" || (ij && !barrier) {
        // One area instead of one per core is all that differs from `ijournal`; without FUA
        // only the record writes differ: its own cases and the multi-threaded ones.
        workloads.retain(|w| w.name.starts_with("ij-") || w.name.starts_with("mt"));
    }
    let states = match (head, data == DataMode::Ordered && barrier) {
        (true, true) => HEAD_STATES,
        (true, false) => HEAD_OTHER_STATES,
        (false, _) => ABLATION_STATES,
    };
    Some((workloads, states))
}

/// On a device without a cache barrier the journal issues none (its commit orders with
/// flushes alone), and on one with a barrier the dual-thread presets use it: so the two
/// subsets above test different commit paths.
#[test]
fn no_barrier_device_gets_no_barrier() {
    let wl = Suite::all().workloads(1).into_iter().find(|w| w.name == "ace1-0021").expect("ace1-0021");
    for m in ["jbd2", "barrierfs", "cjfs", "cjfs-no-compound"] {
        let mut shapes = Vec::new();
        for barrier in [true, false] {
            let mut cfg = CrashConfig::new(m);
            cfg.check.barrier = barrier;
            let (rec, _) = crash::prepare(&cfg, &wl, &BaseCache::default()).expect("record");
            shapes.push(rec.fingerprint());
            let count = |f: fn(&RecordedOp) -> bool| rec.log.iter().filter(|op| f(op)).count();
            let barriers = count(|op| matches!(op, RecordedOp::Barrier { .. }));
            let flushes = count(|op| matches!(op, RecordedOp::Flush { .. }));
            assert!(flushes > 0, "{m}, barrier {barrier}: no flush recorded");
            let dual = preset::resolve(m).is_ok_and(|o| o.journal.dual_thread);
            if barrier && dual {
                assert!(barriers > 0, "{m}: a dual-thread preset on a barrier device issued no barrier");
            }
            if !barrier {
                assert_eq!(
                    barriers, 0,
                    "{m}: {barriers} barrier(s) issued to a device without barrier support"
                );
            }
        }
        // A preset that neither uses barriers nor chooses by them records the same log on
        // both devices (why the barrier-less subset leaves it out).
        let sensitive =
            preset::resolve(m).is_ok_and(|o| o.journal.use_barriers || o.journal.dual_thread_barrier_only);
        if !sensitive {
            assert_eq!(shapes[0], shapes[1], "{m}: the log differs without a barrier");
        }
    }
}

#[cfg(feature = "planted-bugs")]
fn caught(bugs: Bugs, workloads: &[Workload]) -> u64 {
    caught_in("jbd2", bugs, workloads)
}

#[cfg(feature = "planted-bugs")]
fn caught_in(mode: &str, bugs: Bugs, workloads: &[Workload]) -> u64 {
    let mut cfg = CrashConfig::new(mode);
    cfg.bugs = bugs;
    cfg.states.max_states = 300;
    let (s, _) = crash::run_suite(&cfg, workloads, &|_| {});
    eprintln!(
        "{mode} {bugs:?}: {} states, {} with several transactions in flight",
        s.crash_states, s.multi_tx_states
    );
    s.violations
}

/// Needs the `planted-bugs` feature (`scripts/test.sh` enables it).
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_bugs_are_caught() {
    if !e2fsck_or_skip() {
        return;
    }
    let all = Suite::all().workloads(1);
    let pick = |names: &[&str]| -> Vec<Workload> {
        all.iter().filter(|w| names.contains(&w.name.as_str())).cloned().collect()
    };
    // Appends followed by fsync (and a second transaction after the first), and block reuse.
    let appends = pick(&["ace1-0021", "ace1-0022", "classic-block-reuse"]);
    assert_eq!(appends.len(), 3);
    let reuse = pick(&["classic-block-reuse"]);
    assert_eq!(caught(Bugs::default(), &appends), 0, "the harness must be quiet without bugs");
    let cases = [
        ("skip the flush before the commit block", Bugs { skip_preflush: true, ..Bugs::default() }, &appends),
        (
            "commit block before the data blocks",
            Bugs { commit_before_data: true, ..Bugs::default() },
            &appends,
        ),
        ("drop revoke records", Bugs { drop_revokes: true, ..Bugs::default() }, &reuse),
        (
            "forget to journal an inode size update",
            Bugs { skip_size_update_journal: true, ..Bugs::default() },
            &appends,
        ),
    ];
    for (what, bugs, wls) in cases {
        let n = caught(bugs, wls);
        eprintln!("{what}: {n} violating crash state(s)");
        assert!(n > 0, "the harness did not catch the planted bug: {what}");
    }
}

/// Per-core journaling's planted bugs: without chain marks recovery replays a transaction
/// whose chained partner never committed; checkpointing a version that is not yet valid puts
/// a change on disk that recovery may have to discard; releasing a version while another log
/// holds an older copy lets recovery replay that copy over the newer one home. Each is caught
/// on the Z-Journal workloads with two logs.
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_chaining_bugs_are_caught() {
    if !e2fsck_or_skip() {
        return;
    }
    let wls: Vec<Workload> = cjfs_lab::crash::workloads::zjournal_cases(6)
        .into_iter()
        .chain(Suite::all().workloads(1).into_iter().filter(|w| w.name == "mt8-000"))
        .collect();
    // Both ways the logs flush (each on its own, and one shared flush at a time).
    let modes = ["zjournal+logs=2", "zjournal+logs=2+log_flush=shared"];
    for mode in modes {
        assert_eq!(
            caught_in(mode, Bugs::default(), &wls),
            0,
            "{mode}: the harness must be quiet without bugs"
        );
    }
    for (what, bugs) in [
        ("drop the chain marks", Bugs { drop_marks: true, ..Bugs::default() }),
        (
            "checkpoint a transaction that is not yet valid",
            Bugs { checkpoint_invalid: true, ..Bugs::default() },
        ),
        (
            "release a version while another log holds an older copy",
            Bugs { release_past_older: true, ..Bugs::default() },
        ),
    ] {
        // Whether a checkpoint finds a transaction not yet valid depends on the threads'
        // timing (a loaded CI machine once gave a run with none): a few recordings, not one.
        let mut n = 0;
        for _ in 0..3 {
            n += modes.iter().map(|m| caught_in(m, bugs, &wls)).sum::<u64>();
            if n > 0 {
                break;
            }
        }
        eprintln!("{what}: {n} violating crash state(s)");
        assert!(n > 0, "the harness did not catch the planted bug: {what}");
    }
}

/// iJournaling's variants on its own cases: the paper's record form (a commit block after a
/// flush), and areas so small that fsyncs find them full (and commit) even with the early
/// commit a half-full area asks for.
#[test]
fn ijournal_commit_form_and_full_areas() {
    if !e2fsck_or_skip() {
        return;
    }
    let cases = cjfs_lab::crash::workloads::ijournal_cases(3);
    let pick = |names: &[&str]| -> Vec<Workload> {
        cases.iter().filter(|w| names.iter().any(|n| w.name == *n)).cloned().collect()
    };
    let commit = pick(&["ij-after-commit", "ij-truncate-fsync", "ij-fill", "ij-race-commit"]);
    // Eight threads, 128 fsyncs: enough that some find the 15-block area full.
    let full: Vec<Workload> =
        cjfs_lab::crash::workloads::ijournal_cases(16).into_iter().filter(|w| w.name == "ij-fill").collect();
    for (mode, wls, need_full) in
        [("ijournal+iform=commit", &commit, false), ("ijournal+iarea=16", &full, true)]
    {
        let mut cfg = CrashConfig::new(mode);
        cfg.states.max_states = 200;
        let (s, results) = crash::run_suite(&cfg, wls, &|_| {});
        for r in &results {
            if let Some(e) = &r.error {
                eprintln!("{mode}: {}: {e}", r.name);
            }
        }
        eprintln!(
            "{mode}: {} crash states, {} violations, {} fsyncs served, {} found the area full",
            s.crash_states, s.violations, s.ij_served, s.ij_area_full
        );
        assert!(s.passed() && s.crash_states > 0, "{mode}: {} violation(s)", s.violations);
        assert!(s.ij_served > 0 && s.ij_replayed > 0, "{mode}: no record written or replayed");
        if need_full {
            assert!(s.ij_area_full > 0, "{mode}: no fsync found its area full");
        }
    }
}

/// iJournaling's planted bug: an fsync that leaves out the records of the new directories
/// on the file's path. The file's record names a directory recovery never makes, so the
/// fsynced file is lost.
#[cfg(feature = "planted-bugs")]
#[test]
fn ijournal_planted_bug_is_caught() {
    if !e2fsck_or_skip() {
        return;
    }
    let wls: Vec<Workload> = Suite::ci()
        .workloads_for("ijournal", 1)
        .into_iter()
        .filter(|w| w.name.starts_with("ij-deep-fsync") || w.name == "ij-htree")
        .collect();
    assert_eq!(wls.len(), 2);
    assert_eq!(caught_in("ijournal", Bugs::default(), &wls), 0, "the harness must be quiet without bugs");
    let n = caught_in("ijournal", Bugs { skip_ancestor_record: true, ..Bugs::default() }, &wls);
    eprintln!("skip the ancestor's directory i-transaction: {n} violating crash state(s)");
    assert!(n > 0, "the harness did not catch the planted bug: skip the ancestor's directory i-transaction");
}

/// Journaling of journal's planted bugs: with the revoke of a freed data-journaled block
/// switched off, the cross-mode reuse case replays the old journaled copy over the ordered
/// file's data (with the two-step and the single-I/O commit); a single-I/O transaction
/// written before the previous one is durable, with no barrier, leaves crash states with a
/// valid commit after a torn transaction; and a single write with ordered data but no flush
/// before it can persist before that data.
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_joj_bugs_are_caught() {
    if !e2fsck_or_skip() {
        return;
    }
    let all = Suite::all().workloads(1);
    let pick = |names: &[&str]| -> Vec<Workload> {
        all.iter().filter(|w| names.contains(&w.name.as_str())).cloned().collect()
    };
    let reuse = pick(&["joj-reuse"]);
    assert_eq!(reuse.len(), 1);
    let overlap: Vec<Workload> = pick(&["mtfree8-000", "joj-switch"]);
    let appends = pick(&["ace1-0021", "ace1-0022"]);
    for m in ["jbd2", "joj"] {
        assert_eq!(caught_in(m, Bugs::default(), &reuse), 0, "{m}: the harness must be quiet without bugs");
        let n = caught_in(m, Bugs { no_data_revoke: true, ..Bugs::default() }, &reuse);
        eprintln!("{m}, revoke switched off: {n} violating crash state(s)");
        assert!(n > 0, "{m}: the cross-mode reuse test did not catch the revoke switched off");
    }
    assert_eq!(caught_in("joj", Bugs::default(), &overlap), 0, "joj: quiet without bugs");
    // The adaptive policy's switch back to ordered, made in the window's own transaction.
    let sqlite = pick(&["joj-sqlite"]);
    let leave = Bugs { leave_without_revoke: true, ..Bugs::default() };
    // Without the checksums, so that the policy journals the database and the WAL too.
    let adaptive = "adaptive+osum=off";
    assert_eq!(caught_in(adaptive, Bugs::default(), &sqlite), 0, "{adaptive}: quiet without bugs");
    let n = caught_in(adaptive, leave, &sqlite);
    eprintln!("{adaptive}, leaving data journaling without the revokes: {n} violating crash state(s)");
    assert!(n > 0, "the harness did not catch the adaptive switch without its revokes");
    let switch = pick(&["joj-switch"]);
    for (what, bugs, wls) in [
        // An explicit switch commits the file's writes first and so hands nothing over (the
        // revoke-less switch is the adaptive policy's, above); what protects a block the file
        // rewrites after it is journaling the rewrite while the block has an image in the log.
        (
            "rewriting a block in place while it has an image in the log",
            Bugs { rewrite_in_place: true, ..Bugs::default() },
            &switch,
        ),
        ("single writes overlapping", Bugs { single_io_overlap: true, ..Bugs::default() }, &overlap),
        (
            "no flush before a single write with ordered data",
            Bugs { skip_preflush: true, ..Bugs::default() },
            &appends,
        ),
    ] {
        let n = caught_in("joj", bugs, wls);
        eprintln!("joj, {what}: {n} violating crash state(s)");
        assert!(n > 0, "the harness did not catch the planted bug: {what}");
    }
    // Ordered-data checksums: an append into the last block a synced transaction summed (the
    // WAL frames of `joj-sqlite`, which stays ordered under `joj`),
    // written in place before a later commit confirmed it, makes recovery drop that
    // acknowledged transaction.
    let osum = "joj+osum=on";
    assert_eq!(caught_in(osum, Bugs::default(), &sqlite), 0, "{osum}: quiet without bugs");
    let n = caught_in(osum, Bugs { unconfirmed_rewrite: true, ..Bugs::default() }, &sqlite);
    eprintln!(
        "{osum}, rewriting a summed block in place before it is confirmed: {n} violating crash state(s)"
    );
    assert!(n > 0, "the harness did not catch a summed block rewritten in place");
}

/// Synchronous directory updates' planted bug: directory operations in a `chattr +D` or
/// `+S` directory return without committing. Each `dirsync-*` workload with directory
/// operations in a marked directory then has crash states that lost one after it returned;
/// without the bug every one is clean.
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_dirsync_bug_is_caught() {
    if !e2fsck_or_skip() {
        return;
    }
    let wls: Vec<Workload> =
        Suite::ci().workloads(1).into_iter().filter(|w| w.name.starts_with("dirsync-")).collect();
    assert_eq!(wls.len(), 4);
    let run = |mode: &str, bugs: Bugs| {
        let mut cfg = CrashConfig::new(mode);
        cfg.bugs = bugs;
        cfg.states.max_states = 300;
        let (s, results) = crash::run_suite(&cfg, &wls, &|_| {});
        for r in &results {
            if let Some(e) = &r.error {
                eprintln!("{mode}: {}: {e}", r.name);
            }
            let bug = if bugs.any() { "no_dirsync" } else { "no bug" };
            eprintln!("{mode}, {bug}: {}: {} states, {} violating", r.name, r.states, r.violations);
        }
        assert_eq!(s.workload_errors, 0, "{mode}: workload errors");
        results
    };
    for m in ["jbd2", "cjfs"] {
        let clean = run(m, Bugs::default());
        assert!(clean.iter().all(|r| r.violations == 0), "{m}: the harness must be quiet without bugs");
        let buggy = run(m, Bugs { no_dirsync: true, ..Bugs::default() });
        // `dirsync-files` has no directory operation in a marked directory.
        for r in buggy.iter().filter(|r| r.name != "dirsync-files") {
            assert!(r.violations > 0, "{m}: {} did not catch directory operations left uncommitted", r.name);
        }
        let n: u64 = buggy.iter().map(|r| r.violations).sum();
        eprintln!("{m}, directory operations not synchronous: {n} violating crash state(s)");
    }
}

/// Workloads that once exposed real bugs (see the fixes they name).
#[test]
fn regressions() {
    if !e2fsck_or_skip() {
        return;
    }
    let all = Suite::all().workloads(1);
    // ace3-00079: data written into a fallocated (unwritten) range, then fdatasync: the
    // unwritten-to-written conversion was not committed (crates/fs/src/file.rs).
    // classic-block-reuse: a freed directory block reused as file data (with the revoke).
    let wls: Vec<Workload> = all
        .into_iter()
        .filter(|w| ["ace3-00079", "classic-block-reuse"].contains(&w.name.as_str()))
        .collect();
    assert_eq!(wls.len(), 2);
    let mut cfg = CrashConfig::new("jbd2");
    cfg.states.max_states = 0;
    let (s, results) = crash::run_suite(&cfg, &wls, &|_| {});
    for r in &results {
        for v in &r.details {
            eprintln!("{}: {} — {:?}", v.workload, v.state_text, v.problems);
        }
    }
    assert_eq!(s.violations, 0);
    assert_eq!(s.workload_errors, 0);
}
