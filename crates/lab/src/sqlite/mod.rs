//! The SQLite benchmark of "Journaling of Journal Is (Almost) Free" (FAST'14 §3), run with
//! the SQLite library itself (rusqlite, the bundled SQLite).
//!
//! One *round* works on an empty table of records with an integer key and a 100-character
//! value: insert `records` records, update them in random order, delete them in random
//! order, as transactions of 1 or 1000 operations; the result of each phase is the mean
//! transaction response time. SQLite runs with `synchronous=FULL` and a rollback journal in
//! `DELETE` (the paper's), `TRUNCATE` or `PERSIST` mode, or `WAL` (default autocheckpoint,
//! 1000 pages); page size and cache are SQLite's defaults (4096 bytes; the paper's SQLite
//! 3.8 used 1024-byte pages).
//!
//! In-process ([`run_cjfs`]) the database lives on a cjfs file system on an emulated device,
//! reached through [`vfs::CjfsVfs`]; on a directory ([`run_dir`]) SQLite's own unix VFS
//! opens it there (e.g. a `cjfs mount` through FUSE, or a kernel file system).

pub mod report;
pub mod vfs;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cjfs_blockdev::{Device, EmulatedSsd, SsdPreset};
use cjfs_fs::{DataMode, Fs, MkfsOptions, MountOptions, ROOT_INO, mkfs, preset};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rusqlite::{Connection, OpenFlags, params};
use serde::Serialize;

/// SQLite's journal mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
pub enum JournalMode {
    /// Rollback journal deleted at commit (the paper's "rollback").
    Delete,
    /// Rollback journal truncated at commit.
    Truncate,
    /// Rollback journal kept, its header zeroed at commit.
    Persist,
    /// Write-ahead log.
    Wal,
}

impl JournalMode {
    /// The pragma value.
    pub fn pragma(&self) -> &'static str {
        match self {
            JournalMode::Delete => "DELETE",
            JournalMode::Truncate => "TRUNCATE",
            JournalMode::Persist => "PERSIST",
            JournalMode::Wal => "WAL",
        }
    }

    /// Short name.
    pub fn name(&self) -> &'static str {
        match self {
            JournalMode::Delete => "delete",
            JournalMode::Truncate => "truncate",
            JournalMode::Persist => "persist",
            JournalMode::Wal => "wal",
        }
    }

    /// Parse a short name.
    pub fn parse(s: &str) -> Option<JournalMode> {
        [JournalMode::Delete, JournalMode::Truncate, JournalMode::Persist, JournalMode::Wal]
            .into_iter()
            .find(|m| m.name() == s.to_ascii_lowercase())
    }
}

/// One phase of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
pub enum Phase {
    /// Inserts.
    Insert,
    /// Updates in random order.
    Update,
    /// Deletes in random order.
    Delete,
}

impl Phase {
    /// Every phase, in round order.
    pub const ALL: [Phase; 3] = [Phase::Insert, Phase::Update, Phase::Delete];

    /// Short name.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Insert => "insert",
            Phase::Update => "update",
            Phase::Delete => "delete",
        }
    }
}

/// A round's settings.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoundParams {
    /// Records inserted, updated and deleted (the paper: 10,000).
    pub records: usize,
    /// Operations per transaction (the paper: 1 and 1000).
    pub per_txn: usize,
    /// Journal mode.
    pub mode: JournalMode,
    /// Seed of the update and delete orders.
    pub seed: u64,
    /// Record every sync of the round ([`RoundReport::sync_trace`]; in-process rounds only).
    pub trace_syncs: bool,
}

/// One phase's result.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    /// The phase.
    pub phase: Phase,
    /// Transactions run.
    pub txns: usize,
    /// Mean transaction response time, microseconds.
    pub mean_us: f64,
}

/// Errors of the SQLite benchmark.
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file system failed.
    #[error("file system: {0}")]
    Fs(#[from] cjfs_fs::FsError),
    /// The VFS could not be registered.
    #[error(transparent)]
    Vfs(#[from] vfs::VfsError),
    /// An unknown preset.
    #[error(transparent)]
    Preset(#[from] preset::UnknownPreset),
    /// A bad setting.
    #[error("{0}")]
    Bad(String),
}

/// A 100-character value derived from `k`.
fn value(k: usize, salt: u64) -> String {
    let mut s = String::with_capacity(100);
    let mut x = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    while s.len() < 100 {
        x ^= x >> 13;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        s.push((b'a' + (x % 26) as u8) as char);
    }
    s
}

/// Set the connection up as the benchmark runs SQLite.
fn configure(conn: &Connection, mode: JournalMode) -> Result<(), SqliteError> {
    let got: String = conn.query_row(&format!("PRAGMA journal_mode={}", mode.pragma()), [], |r| r.get(0))?;
    if !got.eq_ignore_ascii_case(mode.pragma()) {
        return Err(SqliteError::Bad(format!("journal_mode {} refused (SQLite says {got})", mode.pragma())));
    }
    conn.execute_batch(
        "PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT NOT NULL);",
    )?;
    Ok(())
}

/// Run one round on `conn` (an empty table is made if there is none).
pub fn round(conn: &mut Connection, p: &RoundParams) -> Result<Vec<PhaseResult>, SqliteError> {
    round_marked(conn, p, &mut |_, _| {})
}

/// [`round`], calling `at(phase index, transaction)` as each transaction starts.
fn round_marked(
    conn: &mut Connection,
    p: &RoundParams,
    at: &mut dyn FnMut(u8, u64),
) -> Result<Vec<PhaseResult>, SqliteError> {
    configure(conn, p.mode)?;
    let mut rng = StdRng::seed_from_u64(p.seed);
    let mut keys: Vec<usize> = (0..p.records).collect();
    let mut out = Vec::with_capacity(3);
    for (pi, phase) in Phase::ALL.into_iter().enumerate() {
        if phase != Phase::Insert {
            keys.shuffle(&mut rng);
        }
        let mut txns = 0usize;
        let mut total = 0f64;
        for chunk in keys.chunks(p.per_txn.max(1)) {
            at(pi as u8, txns as u64);
            let t0 = Instant::now();
            let tx = conn.transaction()?;
            {
                let mut ins = tx.prepare_cached("INSERT INTO t (k, v) VALUES (?1, ?2)")?;
                let mut upd = tx.prepare_cached("UPDATE t SET v = ?2 WHERE k = ?1")?;
                let mut del = tx.prepare_cached("DELETE FROM t WHERE k = ?1")?;
                for &k in chunk {
                    match phase {
                        Phase::Insert => ins.execute(params![k as i64, value(k, 1)])?,
                        Phase::Update => upd.execute(params![k as i64, value(k, 2)])?,
                        Phase::Delete => del.execute(params![k as i64])?,
                    };
                }
            }
            tx.commit()?;
            total += t0.elapsed().as_secs_f64() * 1e6;
            txns += 1;
        }
        out.push(PhaseResult { phase, txns, mean_us: total / txns.max(1) as f64 });
    }
    Ok(out)
}

/// A journaling configuration of the matrix: a preset and a data mode.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Label in the results (`nojournal`, `ordered`, `data`, `joj`, `adaptive`).
    pub label: String,
    /// The preset.
    pub preset: String,
    /// The default data mode.
    #[serde(serialize_with = "data_mode")]
    pub data: DataMode,
}

fn data_mode<S: serde::Serializer>(d: &DataMode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match d {
        DataMode::Ordered => "ordered",
        DataMode::Journal => "journal",
    })
}

impl Config {
    /// The paper's five configurations: no journal, ext4 ordered, ext4 data journaling,
    /// single-I/O data journaling, file-adaptive.
    pub fn paper() -> Vec<Config> {
        let c = |label: &str, preset: &str, data| Config { label: label.into(), preset: preset.into(), data };
        vec![
            c("nojournal", "nojournal", DataMode::Ordered),
            c("ordered", "jbd2", DataMode::Ordered),
            c("data", "jbd2", DataMode::Journal),
            c("joj", "joj", DataMode::Journal),
            c("adaptive", "adaptive", DataMode::Ordered),
        ]
    }

    /// A configuration named by label (one of [`Config::paper`]) or `PRESET[/journal]`.
    pub fn parse(s: &str) -> Result<Config, SqliteError> {
        if let Some(c) = Config::paper().into_iter().find(|c| c.label == s) {
            return Ok(c);
        }
        let (preset, data) = match s.split_once('/') {
            Some((p, "journal")) => (p, DataMode::Journal),
            Some((p, "ordered")) => (p, DataMode::Ordered),
            Some((_, d)) => return Err(SqliteError::Bad(format!("data mode {d:?} (ordered or journal)"))),
            None => (s, DataMode::Ordered),
        };
        preset::resolve(preset)?;
        Ok(Config { label: s.into(), preset: preset.into(), data })
    }
}

/// What one in-process round measured, with the file system's view of it.
#[derive(Debug, Clone, Serialize)]
pub struct RoundReport {
    /// Per phase.
    pub phases: Vec<PhaseResult>,
    /// Journal flushes.
    pub flushes: u64,
    /// Single-I/O commits.
    pub single_io_commits: u64,
    /// Device write commands.
    pub device_writes: u64,
    /// Device bytes written.
    pub device_bytes: u64,
    /// SQLite syncs.
    pub syncs: u64,
    /// Adaptive switches to data journaling and back.
    pub switches: (u64, u64),
    /// Milliseconds the switches back to ordered took (emptying the journal, or by revoke).
    pub switch_ms: f64,
    /// The syncs' device work per kind of file (empty for rounds outside cjfs).
    pub sync_work: std::collections::BTreeMap<vfs::FileKind, vfs::SyncWork>,
    /// Of the syncs' time in `sync_work`, what the round's set-up took before its first
    /// timed transaction (creating the database), µs.
    pub setup_sync_us: u64,
    /// Blocks the journal's checkpoints wrote home during the round (data a file logged
    /// and the metadata of every commit: device work that competes with the syncs).
    pub checkpoint_blocks: u64,
    /// Blocks the round left in the journal for write-back: what committing everything and
    /// writing every logged block home wrote after the last transaction (work a longer run
    /// pays in its checkpoints, and that the response times above leave out).
    pub writeback_blocks: u64,
    /// How long that write-back took (commit, checkpoint, their flushes), µs.
    pub writeback_us: u64,
    /// Every sync of the round in order, when traced (`sync-trace.csv`, not `results.json`;
    /// shared by the round's rows).
    #[serde(skip)]
    pub sync_trace: Arc<[vfs::SyncEvent]>,
}

/// Image size of the in-process rounds (a 32 MiB journal, as mkfs gives it).
pub const IMAGE_MIB: u64 = 1024;

static VFS_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One round in-process: a fresh image on an emulated `device`, mounted with `cfg`.
pub fn run_cjfs(device: &SsdPreset, cfg: &Config, p: &RoundParams) -> Result<RoundReport, SqliteError> {
    let ssd = Arc::new(EmulatedSsd::new(*device, (IMAGE_MIB << 20) / 4096));
    mkfs(&*ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() })?;
    let dev: Device = ssd.clone();
    let opts = preset::apply(&cfg.preset, MountOptions { data: cfg.data, ..MountOptions::default() })?;
    let fs = Fs::open(dev.clone(), opts)?;
    fs.mkdir(ROOT_INO, b"bench", 0o755, 0, 0)?;
    fs.sync()?;
    let name = format!("cjfs-{}", VFS_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let v = vfs::CjfsVfs::register(&name, fs.clone())?;
    if p.trace_syncs {
        v.counters().start_trace();
    }
    let (j0, d0, a0) = (fs.journal().stats(), dev.stats(), fs.adaptive_stats());
    let phases = {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let mut conn = Connection::open_with_flags_and_vfs("/bench/test.db", flags, v.name())?;
        let counters = v.counters();
        let r = round_marked(&mut conn, p, &mut |phase, txn| counters.set_at(phase, txn))?;
        conn.close().map_err(|(_, e)| e)?;
        r
    };
    let (j1, d1, a1) = (fs.journal().stats(), dev.stats(), fs.adaptive_stats());
    let syncs = v.counters().syncs.load(std::sync::atomic::Ordering::Relaxed);
    let sync_work = v.counters().sync_work.lock().clone();
    let setup_sync_us = v.counters().setup_sync_us.load(std::sync::atomic::Ordering::Relaxed);
    let sync_trace: Arc<[vfs::SyncEvent]> =
        v.counters().trace.lock().take().map_or_else(Vec::new, |t| t.events).into();
    drop(v);
    let (wb0, t_wb) = (fs.journal().stats(), Instant::now());
    fs.sync()?;
    fs.journal().checkpoint().map_err(cjfs_fs::FsError::from)?;
    let writeback_us = t_wb.elapsed().as_micros() as u64;
    let writeback_blocks = fs.journal().stats().checkpoint_blocks - wb0.checkpoint_blocks;
    fs.unmount()?;
    Ok(RoundReport {
        phases,
        flushes: j1.flushes - j0.flushes,
        single_io_commits: j1.single_io_commits - j0.single_io_commits,
        device_writes: d1.writes - d0.writes,
        device_bytes: d1.bytes_written - d0.bytes_written,
        syncs,
        switches: (a1.to_data - a0.to_data, a1.to_ordered - a0.to_ordered),
        switch_ms: (a1.flush_ns - a0.flush_ns) as f64 / 1e6,
        sync_work,
        setup_sync_us,
        checkpoint_blocks: j1.checkpoint_blocks - j0.checkpoint_blocks,
        writeback_blocks,
        writeback_us,
        sync_trace,
    })
}

/// One round with SQLite's own VFS on a database file in `dir` (removed first).
pub fn run_dir(dir: &Path, p: &RoundParams) -> Result<Vec<PhaseResult>, SqliteError> {
    let db = dir.join("test.db");
    for suffix in ["", "-journal", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let mut conn = Connection::open(&db)?;
    let r = round(&mut conn, p)?;
    conn.close().map_err(|(_, e)| e)?;
    Ok(r)
}

/// The matrix to run.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixSpec {
    /// Emulated devices (presets).
    pub devices: Vec<String>,
    /// Journaling configurations.
    pub configs: Vec<Config>,
    /// SQLite journal modes.
    pub modes: Vec<JournalMode>,
    /// Operations per transaction.
    pub per_txn: Vec<usize>,
    /// Records per round with 1-operation transactions (the paper: 10,000).
    pub records_small_txn: usize,
    /// Records per round with larger transactions (the paper: 10,000).
    pub records_large_txn: usize,
    /// Repetitions (interleaved: every configuration once per repetition).
    pub reps: usize,
    /// Seed.
    pub seed: u64,
    /// Record every sync of the in-process rounds (`sync-trace.csv`).
    pub trace_syncs: bool,
}

/// One measured cell of one repetition.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Device preset.
    pub device: String,
    /// Configuration label.
    pub config: String,
    /// SQLite journal mode.
    pub mode: JournalMode,
    /// Operations per transaction.
    pub per_txn: usize,
    /// Phase.
    pub phase: Phase,
    /// Repetition.
    pub rep: usize,
    /// Transactions.
    pub txns: usize,
    /// Mean transaction response time, microseconds.
    pub mean_us: f64,
    /// The round's file-system view (shared by its three phases).
    pub round: RoundReport,
}

/// One row per phase of `round` (each carries the round's file-system view).
fn push_rows(
    rows: &mut Vec<Row>,
    device: &str,
    config: &str,
    mode: JournalMode,
    per_txn: usize,
    rep: usize,
    round: &RoundReport,
) {
    for ph in &round.phases {
        rows.push(Row {
            device: device.to_string(),
            config: config.to_string(),
            mode,
            per_txn,
            phase: ph.phase,
            rep,
            txns: ph.txns,
            mean_us: ph.mean_us,
            round: round.clone(),
        });
    }
}

/// Run the matrix in-process, calling `progress` before each round.
pub fn run_matrix(spec: &MatrixSpec, progress: &mut dyn FnMut(&str)) -> Result<Vec<Row>, SqliteError> {
    let mut rows = Vec::new();
    for rep in 0..spec.reps {
        for dname in &spec.devices {
            let dev = SsdPreset::by_name(dname)
                .ok_or_else(|| SqliteError::Bad(format!("unknown device {dname}")))?;
            for &mode in &spec.modes {
                for &per_txn in &spec.per_txn {
                    let records = if per_txn <= 1 { spec.records_small_txn } else { spec.records_large_txn };
                    for cfg in &spec.configs {
                        progress(&format!(
                            "rep {}/{} {dname} {} {per_txn} op/txn {}",
                            rep + 1,
                            spec.reps,
                            mode.name(),
                            cfg.label
                        ));
                        let p = RoundParams {
                            records,
                            per_txn,
                            mode,
                            seed: spec.seed + rep as u64,
                            trace_syncs: spec.trace_syncs,
                        };
                        let r = run_cjfs(&dev, cfg, &p)?;
                        push_rows(&mut rows, dname, &cfg.label, mode, per_txn, rep, &r);
                    }
                }
            }
        }
    }
    Ok(rows)
}

/// A cell of the matrix: device, SQLite journal mode, transaction size, phase.
pub type CellKey = (String, JournalMode, usize, Phase);

/// Median response time per cell and configuration.
pub fn medians(rows: &[Row]) -> std::collections::BTreeMap<(CellKey, String), f64> {
    let mut by: std::collections::BTreeMap<(CellKey, String), Vec<f64>> = Default::default();
    for r in rows {
        by.entry(((r.device.clone(), r.mode, r.per_txn, r.phase), r.config.clone()))
            .or_default()
            .push(r.mean_us);
    }
    by.into_iter().map(|(k, v)| (k, median(v))).collect()
}

/// The median of `v` (the mean of the middle two for an even count; NaN when empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// The SQLite library's version.
pub fn sqlite_version() -> String {
    rusqlite::version().to_string()
}

/// Rows for one configuration's rounds on a directory (the FUSE matrix): one round per
/// SQLite journal mode and transaction size, with `label` as the device.
pub fn run_dir_rounds(
    dir: &Path,
    spec: &MatrixSpec,
    cfg: &Config,
    label: &str,
    rep: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Row>, SqliteError> {
    let mut rows = Vec::new();
    for &mode in &spec.modes {
        for &per_txn in &spec.per_txn {
            progress(&format!(
                "rep {}/{} {label} {} {per_txn} op/txn {}",
                rep + 1,
                spec.reps,
                mode.name(),
                cfg.label
            ));
            let records = if per_txn <= 1 { spec.records_small_txn } else { spec.records_large_txn };
            let p = RoundParams { records, per_txn, mode, seed: spec.seed + rep as u64, trace_syncs: false };
            let phases = run_dir(dir, &p)?;
            let round = RoundReport {
                phases,
                flushes: 0,
                single_io_commits: 0,
                device_writes: 0,
                device_bytes: 0,
                syncs: 0,
                switches: (0, 0),
                switch_ms: 0.0,
                sync_work: Default::default(),
                setup_sync_us: 0,
                checkpoint_blocks: 0,
                writeback_blocks: 0,
                writeback_us: 0,
                sync_trace: Arc::new([]),
            };
            push_rows(&mut rows, label, &cfg.label, mode, per_txn, rep, &round);
        }
    }
    Ok(rows)
}
