//! The crash-consistency harness (`cjfs crashtest`).
//!
//! For every journal mode (a preset, resolved by `cjfs_fs::preset`) and every workload:
//!
//! 1. [`record`]: run the workload on a [`cjfs_blockdev::Recorder`] over an in-memory copy
//!    of a known base image, logging every write (with its data, block kind and
//!    transaction), completion, flush and barrier, and the log positions of every operation;
//! 2. [`states`]: cut the log at every persistence point, enumerate what may be on the
//!    medium at each (subsets of the writes in flight, barrier order respected, torn
//!    writes), and deduplicate by image hash;
//! 3. [`check`]: recover every unique image with cjfs, run `e2fsck`, compare with
//!    `e2fsck -fy`, cut recovery itself, do new work;
//! 4. [`oracle`]: compare the recovered logical state with the model for every crash state.
//!
//! Violations are saved as small JSON files ([`replay`]) that `cjfs crashtest --replay`
//! reproduces; [`report`] makes the per-mode summary.

pub mod check;
pub mod memdev;
pub mod oracle;
pub mod record;
pub mod replay;
pub mod report;
pub mod states;
pub mod workloads;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cjfs_fs::{DataMode, FsError, MountOptions, preset};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

pub use check::CheckOptions;
pub use report::{ModeSummary, Summary};
pub use states::{StateDesc, StateOptions};
pub use workloads::{Op, Workload};

/// Errors of the harness itself (not crash-consistency violations).
#[derive(Debug, thiserror::Error)]
pub enum CrashError {
    /// A file system operation failed while making a base image or recording.
    #[error("file system: {0}")]
    Fs(#[from] FsError),
    /// A workload operation failed.
    #[error("workload: {0}")]
    Workload(String),
    /// Unknown preset.
    #[error(transparent)]
    UnknownMode(#[from] preset::UnknownPreset),
    /// Reading or writing a failure file.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A failure file did not parse.
    #[error("failure file: {0}")]
    Json(#[from] serde_json::Error),
    /// A replay could not reproduce the recorded state.
    #[error("replay: {0}")]
    Replay(String),
    /// Planted bugs were asked of a build without them.
    #[error(
        "planted bugs need a build with the `planted-bugs` feature (cargo ... --features cjfs-lab/planted-bugs)"
    )]
    NoPlantedBugs,
}

/// Planted bugs across the journal and the file system, for the harness' self-tests. They
/// take effect only in builds with the `planted-bugs` feature; elsewhere asking for one is
/// [`CrashError::NoPlantedBugs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Bugs {
    /// Journal: no flush before the commit block.
    pub skip_preflush: bool,
    /// Journal: commit block before the logged blocks.
    pub commit_before_data: bool,
    /// Journal: drop revoke records.
    pub drop_revokes: bool,
    /// File system: do not journal an inode size update.
    pub skip_size_update_journal: bool,
    /// Per-core journaling: write no chain marks.
    #[serde(default)]
    pub drop_marks: bool,
    /// Per-core journaling: checkpoint versions of transactions that are not yet valid.
    #[serde(default)]
    pub checkpoint_invalid: bool,
    /// Per-core journaling: release versions while another log holds an older copy.
    #[serde(default)]
    pub release_past_older: bool,
    /// iJournaling: leave out the records of the new directories on an fsynced file's path.
    #[serde(default)]
    pub skip_ancestor_record: bool,
    /// File system: do not revoke blocks freed from data-journaled files.
    #[serde(default)]
    pub no_data_revoke: bool,
    /// Single-I/O commit: write a transaction before the previous one is durable, with no
    /// barrier between them.
    #[serde(default)]
    pub single_io_overlap: bool,
    /// File system: a file leaving data journaling by revoke revokes nothing.
    #[serde(default)]
    pub leave_without_revoke: bool,
    /// File system: a file that left data journaling rewrites a block in place while the
    /// block still has an image in the log.
    #[serde(default)]
    pub rewrite_in_place: bool,
    /// Ordered-data checksums: rewrite a block in place while the last transaction's sums
    /// still cover it.
    #[serde(default)]
    pub unconfirmed_rewrite: bool,
    /// File system: directory operations in a `chattr +D`/`+S` directory (or on a
    /// `dirsync` mount) return without committing.
    #[serde(default)]
    pub no_dirsync: bool,
}

impl Bugs {
    /// Whether any bug is planted.
    pub fn any(&self) -> bool {
        self.skip_preflush
            || self.commit_before_data
            || self.drop_revokes
            || self.skip_size_update_journal
            || self.drop_marks
            || self.checkpoint_invalid
            || self.release_past_older
            || self.skip_ancestor_record
            || self.no_data_revoke
            || self.single_io_overlap
            || self.leave_without_revoke
            || self.rewrite_in_place
            || self.unconfirmed_rewrite
            || self.no_dirsync
    }
}

/// Everything a crash run needs.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// Journal preset name.
    pub mode: String,
    /// Default data mode.
    pub data: DataMode,
    /// Seed for sampling (states, seq-2/3 workloads, schedules).
    pub seed: u64,
    /// State generation knobs (`max_states` caps the states per workload).
    pub states: StateOptions,
    /// Image check knobs and the crash device's barrier support (`check.barrier`).
    pub check: CheckOptions,
    /// Worker threads for checking states.
    pub threads: usize,
    /// Planted bugs (tests only).
    pub bugs: Bugs,
    /// Where to save failure files (`None`: not saved).
    pub failure_dir: Option<PathBuf>,
    /// Violations kept in detail per workload at most (one failure file each).
    pub failures_per_workload: usize,
    /// Failure files saved per run at most.
    pub max_failure_files: usize,
    /// Block size of the images (1024, 2048 or 4096 bytes).
    pub block_size: usize,
}

impl CrashConfig {
    /// Defaults for `mode`.
    pub fn new(mode: &str) -> CrashConfig {
        CrashConfig {
            mode: mode.to_string(),
            data: DataMode::Ordered,
            seed: 1,
            states: StateOptions::default(),
            check: CheckOptions::default(),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            bugs: Bugs::default(),
            failure_dir: None,
            failures_per_workload: 1,
            max_failure_files: 20,
            block_size: cjfs_blockdev::DEFAULT_BLOCK_SIZE,
        }
    }

    /// Mount options for recording and checking: the preset with the harness' adjustments
    /// (no timer commits, so the recorded log depends only on the workload) and the planted
    /// bugs.
    pub fn mount_options(&self) -> Result<MountOptions, CrashError> {
        let base = MountOptions { data: self.data, cache_blocks: 4096, ..MountOptions::default() };
        let mut o = preset::apply(&self.mode, base)?;
        o.journal.commit_interval = Duration::from_secs(3600);
        // Small ijournal areas (unless the preset names a size): records wrap and fill them.
        if o.journal.ijournal.on() && !self.mode.contains("iarea=") {
            o.journal.ijournal.area_blocks = record::IJOURNAL_AREA_BLOCKS;
        }
        #[cfg(feature = "planted-bugs")]
        {
            o.bugs = cjfs_fs::FsBugs {
                skip_size_update_journal: self.bugs.skip_size_update_journal,
                skip_ancestor_record: self.bugs.skip_ancestor_record,
                no_data_revoke: self.bugs.no_data_revoke,
                leave_without_revoke: self.bugs.leave_without_revoke,
                rewrite_in_place: self.bugs.rewrite_in_place,
                no_dirsync: self.bugs.no_dirsync,
            };
            o.journal.bugs = cjfs_journal::PlantedBugs {
                skip_preflush: self.bugs.skip_preflush,
                commit_before_data: self.bugs.commit_before_data,
                drop_revokes: self.bugs.drop_revokes,
                drop_marks: self.bugs.drop_marks,
                checkpoint_invalid: self.bugs.checkpoint_invalid,
                release_past_older: self.bugs.release_past_older,
                single_io_overlap: self.bugs.single_io_overlap,
                unconfirmed_rewrite: self.bugs.unconfirmed_rewrite,
            };
        }
        #[cfg(not(feature = "planted-bugs"))]
        if self.bugs.any() {
            return Err(CrashError::NoPlantedBugs);
        }
        Ok(o)
    }

    /// Whether the mode promises crash consistency at all (`nojournal` does not).
    pub fn crash_consistent_by_design(&self) -> bool {
        preset::crash_consistent(&self.mode).unwrap_or(false)
    }
}

/// One violation: a crash state whose recovered image broke a promise.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Violation {
    /// Workload name.
    pub workload: String,
    /// The crash state.
    pub state: StateDesc,
    /// Its description.
    pub state_text: String,
    /// What was wrong (one line each).
    pub problems: Vec<String>,
    /// Failure file, if saved.
    pub file: Option<PathBuf>,
}

/// Result of one workload.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkloadResult {
    /// Workload name.
    pub name: String,
    /// Crash states generated.
    pub states: u64,
    /// Unique images among them.
    pub unique: u64,
    /// Crash-during-recovery states checked.
    pub recovery_states: u64,
    /// Crash states taken while two or more transactions had log writes in flight.
    pub multi_tx_states: u64,
    /// Most transactions with log writes in flight at one crash point.
    pub max_tx_in_flight: u64,
    /// Crash states taken while transactions of two or more logs had log writes in flight.
    pub multi_log_states: u64,
    /// States that violated something.
    pub violations: u64,
    /// iJournaling: fsyncs the recorded run served with i-transactions.
    #[serde(default)]
    pub ij_served: u64,
    /// iJournaling: fsyncs that committed instead.
    #[serde(default)]
    pub ij_fallbacks: u64,
    /// iJournaling: records that wrapped around their area's end.
    #[serde(default)]
    pub ij_wraps: u64,
    /// iJournaling: fsyncs that found their area full.
    #[serde(default)]
    pub ij_area_full: u64,
    /// iJournaling: served fsyncs whose data their batch's one flush made durable.
    #[serde(default)]
    pub ij_data_grouped: u64,
    /// iJournaling: unique crash images whose recovery applied records.
    #[serde(default)]
    pub ij_replayed: u64,
    /// e2fsck runs that failed.
    pub e2fsck_failures: u64,
    /// e2fsck runs.
    pub e2fsck_runs: u64,
    /// A harness error (the workload could not be recorded).
    pub error: Option<String>,
    /// The first violations (details).
    #[serde(skip)]
    pub details: Vec<Violation>,
    /// Seconds spent.
    pub seconds: f64,
}

/// Base images, per (mount options, setup).
#[derive(Default)]
pub struct BaseCache {
    map: Mutex<HashMap<String, Arc<Vec<u8>>>>,
}

impl BaseCache {
    fn key(opts: &MountOptions, setup: &[Op], block_size: usize) -> String {
        // Everything that shapes the image: the whole mount options (planted bugs included).
        format!("{opts:?}/{setup:?}/{block_size}")
    }

    /// Use `image` as the base image of `cfg`'s workloads with setup `setup` instead of one
    /// made by cjfs's mkfs (an image made by other tools, cleanly unmounted, of
    /// [`record::image_blocks`] blocks).
    pub fn insert(&self, cfg: &CrashConfig, setup: &[Op], image: Vec<u8>) -> Result<(), CrashError> {
        let opts = cfg.mount_options()?;
        self.map.lock().insert(Self::key(&opts, setup, cfg.block_size), Arc::new(image));
        Ok(())
    }

    fn get(&self, opts: &MountOptions, setup: &[Op], block_size: usize) -> Result<Arc<Vec<u8>>, CrashError> {
        let key = Self::key(opts, setup, block_size);
        if let Some(b) = self.map.lock().get(&key) {
            return Ok(b.clone());
        }
        let b = record::make_base(opts, setup, block_size)?;
        self.map.lock().insert(key, b.clone());
        Ok(b)
    }
}

/// Record one workload and generate its states (shared by runs and replays).
pub fn prepare(
    cfg: &CrashConfig,
    wl: &Workload,
    bases: &BaseCache,
) -> Result<(record::Recording, states::ParsedLog), CrashError> {
    let opts = cfg.mount_options()?;
    let base = bases.get(&opts, &wl.setup, cfg.block_size)?;
    let rec = record::record(&opts, wl, base, cfg.check.barrier)?;
    let parsed = states::ParsedLog::parse(&rec.log);
    Ok((rec, parsed))
}

/// Check a list of crash states of one recording. Returns per-state problems (empty =
/// fine) and counters.
pub fn check_states(
    cfg: &CrashConfig,
    rec: &record::Recording,
    parsed: &states::ParsedLog,
    descs: &[StateDesc],
    result: &mut WorkloadResult,
) -> Result<Vec<Vec<String>>, CrashError> {
    let opts = cfg.mount_options()?;
    // Overlays and dedupe.
    let mut uniq: Vec<(states::Overlay, Vec<usize>)> = Vec::new();
    let mut by_hash: HashMap<u64, usize> = HashMap::new();
    let mut per_state: Vec<Vec<String>> = vec![Vec::new(); descs.len()];
    for (i, d) in descs.iter().enumerate() {
        match states::overlay(parsed, &rec.base, d) {
            Ok(ov) => match by_hash.get(&ov.hash) {
                Some(&u) => uniq[u].1.push(i),
                None => {
                    by_hash.insert(ov.hash, uniq.len());
                    uniq.push((ov, vec![i]));
                }
            },
            Err(e) => per_state[i].push(format!("harness: {e}")),
        }
    }
    result.states += descs.len() as u64;
    result.unique += uniq.len() as u64;
    let mut in_flight: HashMap<usize, (u64, u64)> = HashMap::new();
    for d in descs {
        let (n, logs) = *in_flight
            .entry(d.point)
            .or_insert_with(|| (parsed.txs_in_flight(d.point) as u64, parsed.logs_in_flight(d.point) as u64));
        result.multi_tx_states += u64::from(n >= 2);
        result.multi_log_states += u64::from(logs >= 2);
        result.max_tx_in_flight = result.max_tx_in_flight.max(n);
    }
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<Option<check::ImageOutcome>>> = Mutex::new(vec![None; uniq.len()]);
    let threads = cfg.threads.max(1).min(uniq.len().max(1));
    std::thread::scope(|s| {
        for t in 0..threads {
            let (next, outcomes, uniq, opts) = (&next, &outcomes, &uniq, &opts);
            s.spawn(move || {
                let mut scratch = check::Scratch::new(t);
                loop {
                    let u = next.fetch_add(1, Ordering::Relaxed);
                    if u >= uniq.len() {
                        break;
                    }
                    let heavy = cfg.check.heavy_every <= 1
                        || (uniq[u].0.hash ^ cfg.seed).is_multiple_of(u64::from(cfg.check.heavy_every));
                    let o = check::check_image(
                        opts,
                        &cfg.check,
                        &mut scratch,
                        &rec.base,
                        uniq[u].0.blocks.clone(),
                        heavy,
                        cfg.seed ^ uniq[u].0.hash,
                    );
                    outcomes.lock()[u] = Some(o);
                }
            });
        }
    });
    let outcomes = outcomes.into_inner();
    for ((_, members), o) in uniq.iter().zip(outcomes) {
        let Some(o) = o else { continue };
        result.e2fsck_failures += u64::from(o.e2fsck_failures);
        result.e2fsck_runs += u64::from(o.e2fsck_runs);
        result.recovery_states += u64::from(o.recovery_states);
        result.ij_replayed += u64::from(o.ij_applied > 0);
        for &i in members {
            let d = &descs[i];
            per_state[i].extend(o.problems.iter().cloned());
            if let Some(st) = &o.recovered {
                let started = rec.started_before(d.point);
                let returned = rec.returned_by(d.point);
                per_state[i].extend(rec.history.check(st, started, &returned));
            }
        }
    }
    Ok(per_state)
}

/// Run one workload under `cfg`.
/// Run one workload under `cfg`. Failure files are saved (to `cfg.failure_dir`) only when
/// `save` is set.
pub fn run_workload(cfg: &CrashConfig, wl: &Workload, bases: &BaseCache, save: bool) -> WorkloadResult {
    let t0 = Instant::now();
    let fitted = wl.for_block_size(cfg.block_size);
    let wl = &fitted;
    let mut result = WorkloadResult { name: wl.name.clone(), ..WorkloadResult::default() };
    let r = (|| -> Result<(), CrashError> {
        let (rec, parsed) = prepare(cfg, wl, bases)?;
        if let Some(ij) = &rec.ijournal {
            result.ij_served = ij.served;
            result.ij_fallbacks = ij.fallback_total();
            result.ij_wraps = ij.wraps;
            result.ij_data_grouped = ij.data_grouped;
            result.ij_area_full =
                ij.fallbacks.iter().filter(|(k, _)| k == "area-full").map(|(_, n)| n).sum::<u64>();
        }
        let so = StateOptions {
            seed: cfg.states.seed ^ cfg.seed ^ replay::name_seed(&wl.name),
            ..cfg.states.clone()
        };
        let descs = states::generate(&parsed, &so);
        let per_state = check_states(cfg, &rec, &parsed, &descs, &mut result)?;
        for (d, probs) in descs.iter().zip(per_state) {
            if probs.is_empty() {
                continue;
            }
            result.violations += 1;
            if result.details.len() < cfg.failures_per_workload {
                let mut v = Violation {
                    workload: wl.name.clone(),
                    state: d.clone(),
                    state_text: d.describe(&parsed),
                    problems: probs,
                    file: None,
                };
                if let Some(dir) = &cfg.failure_dir
                    && save
                {
                    v.file = replay::save(dir, cfg, wl, &rec, &v).ok();
                }
                result.details.push(v);
            }
        }
        Ok(())
    })();
    if let Err(e) = r {
        result.error = Some(e.to_string());
    }
    result.seconds = t0.elapsed().as_secs_f64();
    result
}

/// Progress of a suite run.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Workloads done.
    pub done: usize,
    /// Workloads in total.
    pub total: usize,
    /// Crash states so far.
    pub states: u64,
    /// Violations so far.
    pub violations: u64,
}

/// Which workloads a suite runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suite {
    /// Every seq-1 ACE workload (`None`: none; `Some(k)`: every k-th).
    pub seq1_every: Option<usize>,
    /// Seeded seq-2 workloads.
    pub seq2: usize,
    /// Seeded seq-3 workloads.
    pub seq3: usize,
    /// Full-size scenarios (classics, iJournaling, multi-threaded) or the small ones.
    pub full_scenarios: bool,
    /// Multi-threaded (8 threads) random workloads with full scenarios.
    pub mt: usize,
    /// Only workloads whose name contains this.
    pub filter: Option<String>,
}

impl Suite {
    /// `cjfs crashtest --all`: every seq-1, 5000 seq-2, 500 seq-3, every scenario.
    pub fn all() -> Suite {
        Suite { seq1_every: Some(1), seq2: 5000, seq3: 500, full_scenarios: true, mt: 8, filter: None }
    }

    /// The CI subset.
    pub fn ci() -> Suite {
        Suite { seq1_every: Some(12), seq2: 12, seq3: 4, full_scenarios: false, mt: 0, filter: None }
    }

    /// The workloads, in run order.
    pub fn workloads(&self, seed: u64) -> Vec<Workload> {
        let mut v = Vec::new();
        if let Some(k) = self.seq1_every {
            v.extend(workloads::ace_seq1().into_iter().step_by(k.max(1)));
        }
        v.extend(workloads::ace_seqn(2, self.seq2, seed));
        v.extend(workloads::ace_seqn(3, self.seq3, seed));
        if self.full_scenarios {
            v.extend(workloads::scenarios(self.mt, seed));
        } else {
            v.extend(workloads::scenarios_small(seed));
        }
        if let Some(f) = &self.filter {
            v.retain(|w| w.name.contains(f.as_str()));
        }
        v
    }

    /// The workloads for preset `mode`: [`Suite::workloads`], and in the CI subset the
    /// iJournaling cases (small) for a preset that uses iJournaling (the full suite runs
    /// them on every preset; the subset keeps CI time for the presets they test).
    pub fn workloads_for(&self, mode: &str, seed: u64) -> Vec<Workload> {
        let mut v = self.workloads(seed);
        let ij = preset::resolve(mode).is_ok_and(|o| o.journal.ijournal.on());
        if !self.full_scenarios && ij {
            let mut extra = workloads::ijournal_cases(3);
            if let Some(f) = &self.filter {
                extra.retain(|w| w.name.contains(f.as_str()));
            }
            v.extend(extra);
        }
        v
    }
}

/// Run `workloads` under `cfg`, calling `progress` after each.
pub fn run_suite(
    cfg: &CrashConfig,
    workloads: &[Workload],
    progress: &(dyn Fn(Progress) + Sync),
) -> (ModeSummary, Vec<WorkloadResult>) {
    let t0 = Instant::now();
    let bases = BaseCache::default();
    let mut results = Vec::with_capacity(workloads.len());
    let (mut states, mut viol) = (0u64, 0u64);
    let mut saved = 0;
    for (i, wl) in workloads.iter().enumerate() {
        // Failure files: crash-consistent modes only, at most `max_failure_files` per run.
        let save = cfg.crash_consistent_by_design() && saved < cfg.max_failure_files;
        let r = run_workload(cfg, wl, &bases, save);
        saved += r.details.iter().filter(|v| v.file.is_some()).count();
        states += r.states;
        viol += r.violations + u64::from(r.error.is_some());
        results.push(r);
        progress(Progress { done: i + 1, total: workloads.len(), states, violations: viol });
    }
    let summary = ModeSummary::from_results(cfg, &results, t0.elapsed());
    (summary, results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_bugs_take_effect_only_in_builds_that_carry_them() {
        let mut cfg = CrashConfig::new("jbd2");
        assert!(cfg.mount_options().is_ok(), "no bug asked: fine in every build");
        cfg.bugs = Bugs { drop_revokes: true, skip_size_update_journal: true, ..Bugs::default() };
        let r = cfg.mount_options();
        #[cfg(feature = "planted-bugs")]
        {
            let o = r.expect("planted-bugs build");
            assert!(o.journal.bugs.drop_revokes && o.bugs.skip_size_update_journal);
        }
        #[cfg(not(feature = "planted-bugs"))]
        assert!(matches!(r, Err(CrashError::NoPlantedBugs)), "{r:?}");
    }
}
