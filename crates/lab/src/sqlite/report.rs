//! The SQLite matrix as tables, JSON, CSV and charts, with the paper's acceptance figures:
//! over its 24 cells (insert/update/delete × 1/1000 operations per transaction ×
//! rollback (`DELETE`)/WAL × eMMC/SATA), how often `adaptive` is within 6 % of `nojournal`,
//! its mean ratio, and whether `joj` beats stock data journaling in every cell.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::vfs::{FileKind, SyncWork};
use super::{JournalMode, MatrixSpec, Phase, Row, median, medians};
use crate::machine::Machine;

/// The paper's devices (the emulated presets standing for its Nexus 7 eMMC and Intel 311).
pub const PAPER_DEVICES: [&str; 2] = ["emmc", "sata-ssd"];

/// Acceptance figures over the paper's cells that were measured.
#[derive(Debug, Clone, Serialize)]
pub struct Acceptance {
    /// Paper cells measured (at most 24).
    pub cells: usize,
    /// Cells where `adaptive` / `nojournal` <= 1.06.
    pub adaptive_within_6pct: usize,
    /// Mean of `adaptive` / `nojournal` over the cells.
    pub adaptive_mean_ratio: f64,
    /// Cells where `joj` < `data`.
    pub joj_faster_than_data: usize,
    /// Cells where `adaptive` / `nojournal` > 1.06, named.
    pub adaptive_misses: Vec<String>,
    /// Cells where `joj` >= `data`, named.
    pub joj_misses: Vec<String>,
}

/// Everything written to `results.json`.
#[derive(Debug, Serialize)]
pub struct Results<'a> {
    /// The machine.
    pub machine: &'a Machine,
    /// What was run.
    pub spec: &'a MatrixSpec,
    /// SQLite's version.
    pub sqlite: String,
    /// Acceptance figures.
    pub acceptance: Option<Acceptance>,
    /// Every measurement.
    pub rows: &'a [Row],
}

fn cell_name(dev: &str, mode: JournalMode, per_txn: usize, phase: Phase) -> String {
    format!("{dev} {} {per_txn}-op {}", mode.name(), phase.name())
}

/// The acceptance figures, if the matrix holds `nojournal`, `adaptive`, `joj` and `data`.
pub fn acceptance(rows: &[Row]) -> Option<Acceptance> {
    let med = medians(rows);
    let get =
        |k: &(String, JournalMode, usize, Phase), c: &str| med.get(&(k.clone(), c.to_string())).copied();
    let keys: BTreeSet<(String, JournalMode, usize, Phase)> = med
        .keys()
        .map(|(k, _)| k.clone())
        .filter(|k| {
            PAPER_DEVICES.contains(&k.0.as_str())
                && matches!(k.1, JournalMode::Delete | JournalMode::Wal)
                && matches!(k.2, 1 | 1000)
        })
        .collect();
    let mut a = Acceptance {
        cells: 0,
        adaptive_within_6pct: 0,
        adaptive_mean_ratio: 0.0,
        joj_faster_than_data: 0,
        adaptive_misses: Vec::new(),
        joj_misses: Vec::new(),
    };
    let mut sum = 0.0;
    for k in &keys {
        let (Some(n), Some(ad), Some(jo), Some(da)) =
            (get(k, "nojournal"), get(k, "adaptive"), get(k, "joj"), get(k, "data"))
        else {
            continue;
        };
        a.cells += 1;
        let r = ad / n;
        sum += r;
        let name = cell_name(&k.0, k.1, k.2, k.3);
        if r <= 1.06 {
            a.adaptive_within_6pct += 1;
        } else {
            a.adaptive_misses.push(format!("{name} ({r:.2})"));
        }
        if jo < da {
            a.joj_faster_than_data += 1;
        } else {
            a.joj_misses.push(format!("{name} ({:.2})", jo / da));
        }
    }
    if a.cells == 0 {
        return None;
    }
    a.adaptive_mean_ratio = sum / a.cells as f64;
    Some(a)
}

/// The tables: per device, one line per cell with each configuration's median response
/// time (ms) and its ratio to `nojournal`.
pub fn tables(rows: &[Row]) -> String {
    let med = medians(rows);
    let mut configs: Vec<String> = Vec::new();
    for r in rows {
        if !configs.contains(&r.config) {
            configs.push(r.config.clone());
        }
    }
    let devices: BTreeSet<&str> = rows.iter().map(|r| r.device.as_str()).collect();
    let mut out = String::new();
    for dev in devices {
        let _ = writeln!(out, "\n#### {dev} (mean transaction response time, ms; ratio to nojournal)\n");
        let mut head = "| mode | op/txn | phase |".to_string();
        let mut sep = "|---|---:|---|".to_string();
        for c in &configs {
            let _ = write!(head, " {c} |");
            sep.push_str("---:|");
        }
        let _ = writeln!(out, "{head}\n{sep}");
        let cells: BTreeSet<(JournalMode, usize, Phase)> =
            rows.iter().filter(|r| r.device == dev).map(|r| (r.mode, r.per_txn, r.phase)).collect();
        for (mode, per_txn, phase) in cells {
            let key = (dev.to_string(), mode, per_txn, phase);
            let base = med.get(&(key.clone(), "nojournal".to_string())).copied();
            let _ = write!(out, "| {} | {per_txn} | {} |", mode.name(), phase.name());
            for c in &configs {
                match med.get(&(key.clone(), c.clone())) {
                    Some(v) => match base {
                        Some(b) if c != "nojournal" => {
                            let _ = write!(out, " {:.2} ({:.2}) |", v / 1000.0, v / b);
                        }
                        _ => {
                            let _ = write!(out, " {:.2} |", v / 1000.0);
                        }
                    },
                    None => out.push_str(" - |"),
                }
            }
            out.push('\n');
        }
    }
    out
}

/// Write `results.json`, `results.csv`, `tables.md` and the charts into `dir`; returns the
/// acceptance figures.
pub fn write(
    dir: &Path,
    machine: &Machine,
    spec: &MatrixSpec,
    rows: &[Row],
) -> std::io::Result<Option<Acceptance>> {
    std::fs::create_dir_all(dir)?;
    let acc = acceptance(rows);
    let res =
        Results { machine, spec, sqlite: rusqlite::version().to_string(), acceptance: acc.clone(), rows };
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&res).map_err(std::io::Error::other)?,
    )?;
    let mut csv = String::from(
        "device,config,mode,per_txn,phase,rep,txns,mean_us,flushes,single_io_commits,device_writes,device_bytes,syncs,to_data,to_ordered,switch_ms,writeback_blocks,writeback_us\n",
    );
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{:.1},{},{},{},{},{},{},{},{:.2},{},{}",
            r.device,
            r.config,
            r.mode.name(),
            r.per_txn,
            r.phase.name(),
            r.rep,
            r.txns,
            r.mean_us,
            r.round.flushes,
            r.round.single_io_commits,
            r.round.device_writes,
            r.round.device_bytes,
            r.round.syncs,
            r.round.switches.0,
            r.round.switches.1,
            r.round.switch_ms,
            r.round.writeback_blocks,
            r.round.writeback_us
        );
    }
    std::fs::write(dir.join("results.csv"), csv)?;
    if rows.iter().any(|r| !r.round.sync_trace.is_empty()) {
        std::fs::write(dir.join("sync-trace.csv"), sync_trace_csv(rows))?;
    }
    let mut md = format!("{}\n\nSQLite {}\n", machine.line(), rusqlite::version());
    md.push_str(&tables(rows));
    md.push_str(&sync_tables(rows));
    md.push_str(&writeback_tables(rows));
    if let Some(a) = &acc {
        let _ = writeln!(
            md,
            "\nPaper cells measured: {} · adaptive within 6 % of nojournal in {} · adaptive / nojournal mean {:.3} · joj faster than data journaling in {}",
            a.cells, a.adaptive_within_6pct, a.adaptive_mean_ratio, a.joj_faster_than_data
        );
        if !a.adaptive_misses.is_empty() {
            let _ = writeln!(md, "\nadaptive above 1.06: {}", a.adaptive_misses.join(", "));
        }
        if !a.joj_misses.is_empty() {
            let _ = writeln!(md, "\njoj not below data: {}", a.joj_misses.join(", "));
        }
    }
    std::fs::write(dir.join("tables.md"), md)?;
    if let Err(e) = charts(dir, rows) {
        eprintln!("charts: {e}");
    }
    Ok(acc)
}

/// One chart per device: each configuration's response time relative to `nojournal`, per
/// cell.
fn charts(dir: &Path, rows: &[Row]) -> Result<(), crate::charts::ChartError> {
    let med = medians(rows);
    let devices: BTreeSet<&str> = rows.iter().map(|r| r.device.as_str()).collect();
    let mut configs: Vec<String> = Vec::new();
    for r in rows {
        if !configs.contains(&r.config) && r.config != "nojournal" {
            configs.push(r.config.clone());
        }
    }
    for dev in devices {
        let cells: Vec<(JournalMode, usize, Phase)> = rows
            .iter()
            .filter(|r| r.device == dev)
            .map(|r| (r.mode, r.per_txn, r.phase))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let labels: Vec<String> =
            cells.iter().map(|(m, t, p)| format!("{} {t} {}", m.name(), &p.name()[..3])).collect();
        let mut series: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
        for c in &configs {
            let v = cells
                .iter()
                .map(|&(m, t, p)| {
                    let k = (dev.to_string(), m, t, p);
                    Some(med.get(&(k.clone(), c.clone()))? / med.get(&(k, "nojournal".to_string()))?)
                })
                .collect();
            series.insert(c.clone(), v);
        }
        let ordered: Vec<(String, Vec<Option<f64>>)> =
            configs.iter().filter_map(|c| series.remove(c).map(|v| (c.clone(), v))).collect();
        crate::charts::draw_ratios(
            dir,
            &format!("sqlite-{dev}"),
            &format!("SQLite on {dev}: response time / nojournal"),
            &labels,
            &ordered,
        )?;
    }
    Ok(())
}

/// One row per round (its first phase's): the rows of a round share its file-system view.
fn round_rows(rows: &[Row]) -> impl Iterator<Item = &Row> {
    rows.iter().filter(|r| r.round.phases.first().map(|p| p.phase) == Some(r.phase))
}

/// The in-process rounds (those with a file-system view) and their configurations in order of
/// first appearance.
fn in_process_rounds(rows: &[Row]) -> (Vec<&Row>, Vec<String>) {
    let rounds: Vec<&Row> = round_rows(rows).filter(|r| !r.round.sync_work.is_empty()).collect();
    let mut configs: Vec<String> = Vec::new();
    for r in &rounds {
        if !configs.contains(&r.config) {
            configs.push(r.config.clone());
        }
    }
    (rounds, configs)
}

/// A round's key with its configuration: device, mode, operations per transaction, config.
type RoundKey = (String, JournalMode, usize, String);

/// Per device, the rounds (mode × operations per transaction) that `m` has keys for.
fn rounds_by_device<V>(m: &BTreeMap<RoundKey, V>) -> BTreeMap<&str, BTreeSet<(JournalMode, usize)>> {
    let mut out: BTreeMap<&str, BTreeSet<(JournalMode, usize)>> = BTreeMap::new();
    for k in m.keys() {
        out.entry(k.0.as_str()).or_default().insert((k.1, k.2));
    }
    out
}

/// Every traced sync of every round, one line each.
pub fn sync_trace_csv(rows: &[Row]) -> String {
    let mut out =
        String::from("device,config,mode,per_txn,rep,phase,txn,file,writes,blocks,flushes,fua_writes,us\n");
    for r in round_rows(rows) {
        for e in r.round.sync_trace.iter() {
            let phase = crate::sqlite::Phase::ALL.get(usize::from(e.phase)).map_or("setup", |p| p.name());
            let _ = writeln!(
                out,
                "{},{},{},{},{},{phase},{},{:?},{},{},{},{},{}",
                r.device,
                r.config,
                r.mode.name(),
                r.per_txn,
                r.rep,
                e.txn,
                e.file,
                e.work.writes,
                e.blocks,
                e.work.flushes,
                e.fua_writes,
                e.work.us
            );
        }
    }
    out
}

/// Per device and round (mode × operations per transaction), each configuration's syncs per
/// kind of file, averaged over the repetitions: where the flushes beyond `nojournal`'s are.
pub fn sync_tables(rows: &[Row]) -> String {
    /// Per round summed over repetitions: the syncs per file, the repetitions, the
    /// checkpoints' blocks and the transactions' time outside syncs (µs).
    #[derive(Default)]
    struct Sum {
        work: BTreeMap<FileKind, SyncWork>,
        reps: usize,
        checkpoint_blocks: u64,
        outside_us: f64,
    }
    let mut sums: BTreeMap<RoundKey, Sum> = BTreeMap::new();
    let (rounds, configs) = in_process_rounds(rows);
    for r in rounds {
        let e = sums.entry((r.device.clone(), r.mode, r.per_txn, r.config.clone())).or_default();
        for (k, w) in &r.round.sync_work {
            e.work.entry(*k).or_default().add(w);
        }
        e.reps += 1;
        e.checkpoint_blocks += r.round.checkpoint_blocks;
        let txn_us: f64 = r.round.phases.iter().map(|p| p.txns as f64 * p.mean_us).sum();
        let sync_us: u64 = r.round.sync_work.values().map(|w| w.us).sum();
        // The set-up's syncs are in `sync_work` but not in any timed transaction.
        e.outside_us += txn_us - sync_us.saturating_sub(r.round.setup_sync_us) as f64;
    }
    if sums.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n#### Syncs per round by file (mean over repetitions): syncs · device flushes · syncs with two or more flushes · ms in syncs; blocks the checkpoints wrote; the transactions' ms outside syncs\n",
    );
    for (dev, rounds) in rounds_by_device(&sums) {
        let _ = writeln!(
            out,
            "\n{dev}\n\n| mode | op/txn | config | db | journal | wal | checkpoint blocks | ms outside syncs |\n|---|---:|---|---|---|---|---:|---:|"
        );
        for (mode, per_txn) in rounds {
            for c in &configs {
                let Some(sum) = sums.get(&(dev.to_string(), mode, per_txn, c.clone())) else {
                    continue;
                };
                let (work, n) = (&sum.work, sum.reps as f64);
                let _ = write!(out, "| {} | {per_txn} | {c} |", mode.name());
                for kind in [FileKind::Db, FileKind::Journal, FileKind::Wal] {
                    match work.get(&kind) {
                        Some(w) => {
                            let _ = write!(
                                out,
                                " {:.0} · {:.0} · {:.0} · {:.1} |",
                                w.syncs as f64 / n,
                                w.flushes as f64 / n,
                                w.multi_flush as f64 / n,
                                w.us as f64 / n / 1000.0
                            );
                        }
                        None => out.push_str(" - |"),
                    }
                }
                let _ = write!(
                    out,
                    " {:.0} | {:.1} |",
                    sum.checkpoint_blocks as f64 / n,
                    sum.outside_us / n / 1000.0
                );
                out.push('\n');
            }
        }
    }
    out
}

/// Per device and round (mode × operations per transaction), each configuration's timed
/// transactions plus the write-back the round left in the journal (committing everything and
/// writing every logged block home after its last transaction), medians over the
/// repetitions, and that sum's ratio to `nojournal`'s: the response times leave that work
/// out, and a configuration that logs data defers most of its home writes past a short round.
/// The write-back's flushes are a fixed cost per round that a longer run would share among
/// more transactions, so the ratio bounds the deferred cost from above.
pub fn writeback_tables(rows: &[Row]) -> String {
    let mut by: BTreeMap<RoundKey, Vec<(f64, f64, u64)>> = BTreeMap::new();
    let (rounds, configs) = in_process_rounds(rows);
    for r in rounds {
        let txn_ms: f64 = r.round.phases.iter().map(|p| p.txns as f64 * p.mean_us).sum::<f64>() / 1000.0;
        by.entry((r.device.clone(), r.mode, r.per_txn, r.config.clone())).or_default().push((
            txn_ms,
            r.round.writeback_us as f64 / 1000.0,
            r.round.writeback_blocks,
        ));
    }
    if by.is_empty() {
        return String::new();
    }
    // Per key: median transactions ms, median write-back ms, median blocks, median sum.
    let med: BTreeMap<&RoundKey, (f64, f64, f64, f64)> = by
        .iter()
        .map(|(k, v)| {
            let t = median(v.iter().map(|x| x.0).collect());
            let w = median(v.iter().map(|x| x.1).collect());
            let b = median(v.iter().map(|x| x.2 as f64).collect());
            let s = median(v.iter().map(|x| x.0 + x.1).collect());
            (k, (t, w, b, s))
        })
        .collect();
    let mut out = String::from(
        "\n#### Rounds with the write-back they left (medians over repetitions): the timed transactions' ms; blocks · ms to commit everything and write every logged block home after the last transaction; their sum and its ratio to nojournal's (an upper bound on the deferred cost: a longer run pays the same block writes but spreads a checkpoint's flushes over more transactions)\n",
    );
    for (dev, rounds) in rounds_by_device(&by) {
        let _ = writeln!(
            out,
            "\n{dev}\n\n| mode | op/txn | config | transactions ms | write-back | total ms | vs nojournal |\n|---|---:|---|---:|---:|---:|---:|"
        );
        for (mode, per_txn) in rounds {
            let key = |c: &str| (dev.to_string(), mode, per_txn, c.to_string());
            let base = med.get(&key("nojournal")).map(|m| m.3);
            for c in &configs {
                let Some(&(t, w, b, s)) = med.get(&key(c)) else {
                    continue;
                };
                let ratio = base.map_or("-".to_string(), |n| format!("{:.3}", s / n));
                let _ = writeln!(
                    out,
                    "| {} | {per_txn} | {c} | {t:.1} | {b:.0} · {w:.1} | {s:.1} | {ratio} |",
                    mode.name()
                );
            }
        }
    }
    out
}
