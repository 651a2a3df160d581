//! The SQLite library in-process on cjfs through the VFS: every journal mode, every
//! configuration of the journaling-of-journal matrix, small rounds on a RAM disk; the
//! database is intact afterwards and the file system passes its own check.

use cjfs_blockdev::SsdPreset;
use cjfs_lab::sqlite::vfs::{FileKind, SETUP_PHASE, SyncEvent};
use cjfs_lab::sqlite::{Config, JournalMode, RoundParams, Row, run_cjfs};

#[test]
fn sqlite_runs_on_cjfs_in_every_mode_and_configuration() {
    let dev = SsdPreset::ramdisk();
    let mut rows = Vec::new();
    for mode in [JournalMode::Delete, JournalMode::Truncate, JournalMode::Persist, JournalMode::Wal] {
        for cfg in Config::paper() {
            for per_txn in [1, 40] {
                let p = RoundParams { records: 120, per_txn, mode, seed: 3, trace_syncs: true };
                let r = run_cjfs(&dev, &cfg, &p).unwrap_or_else(|e| panic!("{} {mode:?}: {e}", cfg.label));
                assert_eq!(r.phases.len(), 3);
                let want = 120usize.div_ceil(per_txn);
                assert!(r.phases.iter().all(|ph| ph.txns == want), "{:?}", r.phases);
                assert!(r.syncs >= want as u64, "{} {mode:?}: {} syncs", cfg.label, r.syncs);
                let by_file: u64 = r.sync_work.values().map(|w| w.syncs).sum();
                assert_eq!(by_file, r.syncs, "{} {mode:?}: every sync is filed by kind", cfg.label);
                let log = if mode == JournalMode::Wal { FileKind::Wal } else { FileKind::Journal };
                assert!(r.sync_work.get(&log).is_some_and(|w| w.syncs > 0), "{mode:?}: {:?}", r.sync_work);
                assert!(r.sync_work.contains_key(&FileKind::Db), "{mode:?}: {:?}", r.sync_work);
                // The trace has every sync, in phase and transaction order, and adds up to
                // the per-file figures.
                assert_eq!(r.sync_trace.len() as u64, r.syncs, "{} {mode:?}: one event per sync", cfg.label);
                // Set-up first (creating the table), then the phases in order.
                let order = |e: &SyncEvent| (e.phase != SETUP_PHASE, e.phase, e.txn);
                assert!(
                    r.sync_trace.windows(2).all(|w| order(&w[0]) <= order(&w[1])),
                    "events in round order"
                );
                assert!(
                    r.sync_trace
                        .iter()
                        .all(|e| e.phase == SETUP_PHASE || (e.phase < 3 && (e.txn as usize) < want))
                );
                let traced_flushes: u64 = r.sync_trace.iter().map(|e| e.work.flushes).sum();
                let filed_flushes: u64 = r.sync_work.values().map(|w| w.flushes).sum();
                assert_eq!(traced_flushes, filed_flushes);
                if cfg.label == "joj" {
                    assert!(r.single_io_commits > 0, "joj commits in one write");
                }
                // What the round leaves for write-back: nothing without a journal; the logged
                // data of the last transactions under data journaling.
                if cfg.label == "nojournal" {
                    assert_eq!(r.writeback_blocks, 0, "{mode:?}: nothing logged without a journal");
                }
                if matches!(cfg.label.as_str(), "data" | "joj") {
                    assert!(
                        r.writeback_blocks > 0,
                        "{} {mode:?}: logged data is left to write home",
                        cfg.label
                    );
                }
                if mode == JournalMode::Delete && per_txn == 40 {
                    let row = |phase: cjfs_lab::sqlite::Phase| Row {
                        device: dev.name.to_string(),
                        config: cfg.label.clone(),
                        mode,
                        per_txn,
                        phase,
                        rep: 0,
                        txns: want,
                        mean_us: r.phases.iter().find(|p| p.phase == phase).map_or(0.0, |p| p.mean_us),
                        round: r.clone(),
                    };
                    rows.extend(cjfs_lab::sqlite::Phase::ALL.map(row));
                }
            }
        }
    }
    // One line per configuration in the write-back table, each with a ratio to nojournal's.
    let t = cjfs_lab::sqlite::report::writeback_tables(&rows);
    for cfg in Config::paper() {
        let line = t
            .lines()
            .find(|l| l.starts_with(&format!("| delete | 40 | {} |", cfg.label)))
            .unwrap_or_else(|| panic!("no write-back line for {}:\n{t}", cfg.label));
        let ratio: f64 = line.trim_end_matches(" |").rsplit("| ").next().unwrap().parse().unwrap();
        if cfg.label == "nojournal" {
            assert_eq!(ratio, 1.0, "{line}");
        }
        assert!(ratio > 0.0, "{line}");
    }
}
