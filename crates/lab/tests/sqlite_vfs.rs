//! The SQLite library in-process on cjfs through the VFS: every journal mode, every
//! configuration of the journaling-of-journal matrix, small rounds on a RAM disk; the
//! database is intact afterwards and the file system passes its own check.

use cjfs_blockdev::SsdPreset;
use cjfs_lab::sqlite::vfs::FileKind;
use cjfs_lab::sqlite::{Config, JournalMode, RoundParams, run_cjfs};

#[test]
fn sqlite_runs_on_cjfs_in_every_mode_and_configuration() {
    let dev = SsdPreset::ramdisk();
    for mode in [JournalMode::Delete, JournalMode::Truncate, JournalMode::Persist, JournalMode::Wal] {
        for cfg in Config::paper() {
            for per_txn in [1, 40] {
                let p = RoundParams { records: 120, per_txn, mode, seed: 3 };
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
                if cfg.label == "joj" {
                    assert!(r.single_io_commits > 0, "joj commits in one write");
                }
            }
        }
    }
}
