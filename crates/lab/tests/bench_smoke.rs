//! Every workload runs for about a second on an emulated preset and produces sane figures.
//! Not a timed assertion: it checks the generators work end to end on cjfs, not how fast.

use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{Device, EmulatedSsd, SsdPreset};
use cjfs_fs::{Fs, MkfsOptions, MountOptions, mkfs};
use cjfs_lab::target::{CjfsTarget, Target};
use cjfs_lab::workloads::{self, Params, Workload, dbench};

/// A small loadfile in dbench's format, used when the dbench package is not installed.
const MINI_LOADFILE: &str = r#"Deltree "\clients\client1" NT_STATUS_OK
Mkdir "\clients" NT_STATUS_OK
NTCreateX "\clients\client1" 0x1 0x2 16385 NT_STATUS_OK
Close 16385 NT_STATUS_OK
NTCreateX "\clients\client1\~dmtmp" 0x1 0x2 9937 NT_STATUS_OK
Close 9937 NT_STATUS_OK
NTCreateX "\clients\client1\~dmtmp\A.DOC" 0x40 0x5 9938 NT_STATUS_OK
WriteX 9938 0 65536 65536 NT_STATUS_OK
WriteX 9938 65536 4096 4096 NT_STATUS_OK
Flush 9938 NT_STATUS_OK
QUERY_FILE_INFORMATION 9938 258 NT_STATUS_OK
SET_FILE_INFORMATION 9938 1004 NT_STATUS_OK
Close 9938 NT_STATUS_OK
NTCreateX "\clients\client1\~dmtmp\A.DOC" 0x40 0x1 9939 NT_STATUS_OK
ReadX 9939 0 4096 4096 NT_STATUS_OK
Close 9939 NT_STATUS_OK
QUERY_PATH_INFORMATION "\clients\client1\~dmtmp\NONE.TMP" 1004 NT_STATUS_OBJECT_NAME_NOT_FOUND
FIND_FIRST "\clients\client1\~dmtmp\*" 260 1366 3 NT_STATUS_OK
QUERY_FS_INFORMATION 1 NT_STATUS_OK
Rename "\clients\client1\~dmtmp\A.DOC" "\clients\client1\~dmtmp\B.DOC" NT_STATUS_OK
Unlink "\clients\client1\~dmtmp\B.DOC" 0x6 NT_STATUS_OK
Unlink "\clients\client1\~dmtmp\B.DOC" 0x6 NT_STATUS_NO_SUCH_FILE
"#;

#[test]
fn every_workload_runs_on_an_emulated_preset() {
    let tmp = tempfile::tempdir().unwrap();
    let mut loadfile = std::path::PathBuf::from(dbench::DEFAULT_LOADFILE);
    if !dbench::available(&loadfile) {
        loadfile = tmp.path().join("client.txt");
        std::fs::write(&loadfile, MINI_LOADFILE).unwrap();
    }
    let preset = SsdPreset::by_name("nvme-consumer").unwrap();
    for w in Workload::all() {
        let p = Params {
            scale: 0.02,
            dbench_loadfile: loadfile.clone(),
            bg_mb_s: 20.0,
            ..Params::new(2, Duration::from_millis(900), 7)
        };
        let dev: Device = Arc::new(EmulatedSsd::new(preset, w.device_blocks(&p).min(1 << 20)));
        mkfs(&*dev, &MkfsOptions { assume_zeroed: true, ..Default::default() }).unwrap();
        let fs = Fs::open(dev, MountOptions::default()).unwrap();
        let t: Arc<dyn Target> = Arc::new(CjfsTarget::new(fs, "test"));
        let r = workloads::run(w, &t, &p).unwrap_or_else(|e| panic!("{w}: {e}"));
        assert_eq!(r.workload, w.to_string());
        assert!(r.ops > 0, "{w}: no operations");
        assert!(r.ops_per_sec > 0.0 && r.ops_per_sec.is_finite(), "{w}: ops/s {}", r.ops_per_sec);
        assert!(r.secs > 0.5, "{w}: ran {} s", r.secs);
        assert!(r.op_latency.count > 0 && r.op_latency.p50 > 0.0, "{w}: no latencies");
        assert!(
            r.op_latency.p50 <= r.op_latency.p99 && r.op_latency.p99 <= r.op_latency.max,
            "{w}: percentiles"
        );
        assert!(!r.op_cdf.is_empty(), "{w}: no CDF");
        let j = r.journal_summary.unwrap_or_else(|| panic!("{w}: no journal figures"));
        let d = r.device_summary.unwrap_or_else(|| panic!("{w}: no device figures"));
        if r.fsync_latency.count > 0 {
            assert!(j.transactions > 0, "{w}: fsyncs but no transaction");
            assert!(d.flushes > 0, "{w}: fsyncs but no device flush");
            // The commit thread parks between commits; every fsync caller parks or finds its
            // transaction durable, so a run with fsyncs has parks to report.
            let waits = r.waits.as_ref().unwrap_or_else(|| panic!("{w}: no wait figures"));
            assert!(waits.rows.iter().any(|x| x.kind == "park" && x.events > 0), "{w}: no parks: {waits:?}");
            assert!(r.context_switches > 0, "{w}: no context switches");
        }
        drop(t);
    }
}

#[test]
fn a_sweep_hands_over_its_results_after_every_point() {
    use cjfs_lab::bench::run_with;
    let cfg = varmail_sweep(&["jbd2", "cjfs"], vec![1, 2], Duration::from_millis(300));
    let mut seen = Vec::new();
    let done = run_with(&cfg, |so_far| {
        let partial = cjfs_lab::report::header(so_far).iter().any(|l| l.starts_with("partial:"));
        seen.push((so_far.points.len(), partial));
    })
    .unwrap();
    // Two series per point: 2 points after the first, all 4 (and no longer partial) after the last.
    assert_eq!(seen, vec![(2, true), (4, false)]);
    assert_eq!(done.points.len(), 4);
    assert!(!cjfs_lab::report::header(&done).iter().any(|l| l.starts_with("partial:")));
    // The README says where each cjfs point's threads waited.
    let md = cjfs_lab::report::markdown(&done, &[]);
    assert!(md.contains("## Where the threads waited"), "{md}");
    assert!(md.contains(
        "| lock or condvar | kind | events | wait ms | share of all waits | share of lock waits |"
    ));
}

/// The iJournaling unit case from the statistics: append + fsync on one small file is served
/// by i-transactions only, one block each in the single form and two in the commit form.
/// On the emulated NVMe SSD: on a device with no latency the fsyncs outrun the commits that
/// make old records dead, and an fsync that finds its area full commits (as it must).
#[test]
fn append_fsync_is_served_by_one_or_two_ijournal_blocks() {
    for (mode, blocks) in [("ijournal", 1.0), ("ijournal+iform=commit", 2.0)] {
        let p = Params::new(1, Duration::from_millis(400), 1);
        let dev: Device = Arc::new(EmulatedSsd::new(
            SsdPreset::by_name("nvme-consumer").unwrap(),
            Workload::AppendFsync.device_blocks(&p),
        ));
        let options = cjfs_fs::preset::resolve(mode).unwrap();
        let area =
            cjfs_fs::mkfs::default_journal_blocks(dev.num_blocks()).max(cjfs_fs::preset::LOG_AREA_BLOCKS);
        let mk = cjfs_fs::preset::mkfs_for(
            &options,
            area,
            MkfsOptions { assume_zeroed: true, ..Default::default() },
        );
        mkfs(&*dev, &mk).unwrap();
        let t: Arc<dyn Target> = Arc::new(CjfsTarget::new(Fs::open(dev, options).unwrap(), mode));
        let r = workloads::run(Workload::AppendFsync, &t, &p).unwrap();
        let ij = r.ijournal.unwrap_or_else(|| panic!("{mode}: no iJournaling figures"));
        assert!(ij.fsyncs > 10, "{mode}: {ij:?}");
        // An fsync right after a periodic commit made the file durable has nothing to log
        // (a clean fsync); every other one is served by an i-transaction.
        let clean = (ij.clean_share * ij.fsyncs as f64).round() as u64;
        assert_eq!(ij.served + clean, ij.fsyncs, "{mode}: every fsync served or clean: {ij:?}");
        assert!(ij.served * 100 >= ij.fsyncs * 99, "{mode}: {ij:?}");
        assert!(ij.fallbacks.is_empty(), "{mode}: {ij:?}");
        assert_eq!(ij.blocks_per_fsync, blocks, "{mode}: {ij:?}");
    }
}

/// Z-Journal's statistics reach the sweep's figures and README: two threads admitted to two
/// logs by thread, sharing varmail's directory, chain their transactions; core-aware
/// allocation counts where it allocated; one log reports no per-core figures at all.
#[test]
fn a_per_core_sweep_reports_its_chains_and_own_group_allocations() {
    use cjfs_lab::bench::run_with;
    let cfg = varmail_sweep(&["jbd2", "zjournal+logs=2+admit=thread"], vec![2], Duration::from_millis(600));
    let done = run_with(&cfg, |_| {}).unwrap();
    let summary = |series: &str| {
        let p = done.points.iter().find(|p| p.series.ends_with(series)).unwrap();
        p.median_run.as_ref().unwrap().journal_summary.unwrap()
    };
    let one = summary("jbd2");
    assert!(!one.per_core.any(), "one log, no chains: {:?}", one.per_core);
    let two = summary("zjournal+logs=2+admit=thread");
    let z = two.per_core;
    assert!(z.any() && z.marks_uni_per_tx + z.marks_bi_per_tx > 0.0, "shared directory, no chain: {z:?}");
    let own = z.own_group_share.expect("varmail allocates");
    assert!((0.0..=1.0).contains(&own), "{own}");
    let md = cjfs_lab::report::markdown(&done, &[]);
    let section = md.split("## Per-core journaling").nth(1).expect("a per-core section");
    let rows: Vec<&str> =
        section.split("\n## ").next().unwrap().lines().filter(|l| l.starts_with("| varmail")).collect();
    assert_eq!(rows.len(), 1, "only the two-log series: {rows:?}");
    assert!(rows[0].contains("zjournal"), "{rows:?}");
}

/// A one-repetition varmail-shared sweep on the RAM disk over `modes` at `threads`.
fn varmail_sweep(modes: &[&str], threads: Vec<usize>, duration: Duration) -> cjfs_lab::bench::SweepConfig {
    cjfs_lab::bench::SweepConfig {
        targets: vec!["cjfs:ramdisk".parse().unwrap()],
        modes: modes.iter().map(|m| m.to_string()).collect(),
        workloads: vec![Workload::VarmailShared],
        threads,
        duration,
        reps: 1,
        max_reps: 1,
        ci_bound: None,
        seed: 3,
        scale: 0.02,
        dbench_loadfile: dbench::DEFAULT_LOADFILE.into(),
        bg_mb_s: 20.0,
        fsync_delay: Duration::ZERO,
        device_gib: None,
        bg_share: None,
        disk_mb_s: None,
        progress: false,
        command: "test".into(),
    }
}
