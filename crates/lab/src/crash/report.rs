//! The summary of a crash run: one row per mode (workloads, crash states, unique states,
//! violations, e2fsck failures, states/s), as a table or JSON.

use std::time::Duration;

use serde::Serialize;

use super::{CrashConfig, WorkloadResult};

/// Summary of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct ModeSummary {
    /// Journal preset.
    pub mode: String,
    /// Data mode.
    pub data: String,
    /// Whether the crash device had a cache barrier.
    pub barrier: bool,
    /// Block size of the images.
    pub block_size: usize,
    /// Whether the mode promises crash consistency (`nojournal` does not: its violations
    /// are expected and do not fail the run).
    pub crash_consistent_by_design: bool,
    /// Workloads run.
    pub workloads: u64,
    /// Workloads that could not be recorded (harness or file system errors while running).
    pub workload_errors: u64,
    /// Crash states generated.
    pub crash_states: u64,
    /// Unique images among them (each checked once).
    pub unique_states: u64,
    /// Crash-during-recovery states checked.
    pub recovery_states: u64,
    /// Crash states taken while two or more transactions had log writes in flight.
    pub multi_tx_states: u64,
    /// Most transactions with log writes in flight at one crash point.
    pub max_tx_in_flight: u64,
    /// Crash states taken while transactions of two or more logs had log writes in flight.
    pub multi_log_states: u64,
    /// Logs the mode's journal runs (per-core journaling: more than one).
    pub logs: u64,
    /// Crash states that violated something.
    pub violations: u64,
    /// iJournaling: fsyncs served by i-transactions in the recorded runs.
    pub ij_served: u64,
    /// iJournaling: fsyncs that committed instead.
    pub ij_fallbacks: u64,
    /// iJournaling: records that wrapped around their area's end.
    pub ij_wraps: u64,
    /// iJournaling: fsyncs that found their area full.
    pub ij_area_full: u64,
    /// iJournaling: served fsyncs whose data their batch's one flush made durable.
    pub ij_data_grouped: u64,
    /// iJournaling: unique crash images whose recovery applied records.
    pub ij_replayed: u64,
    /// e2fsck runs.
    pub e2fsck_runs: u64,
    /// Failed e2fsck runs.
    pub e2fsck_failures: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Crash states per second (generated states / wall time).
    pub states_per_sec: f64,
    /// Unique (checked) states per second.
    pub unique_per_sec: f64,
    /// Failure files written.
    pub failure_files: Vec<String>,
    /// First problems seen (for the report).
    pub first_problems: Vec<String>,
}

impl ModeSummary {
    /// Summarise the results of one mode.
    pub fn from_results(cfg: &CrashConfig, results: &[WorkloadResult], wall: Duration) -> ModeSummary {
        let sum = |f: fn(&WorkloadResult) -> u64| results.iter().map(f).sum::<u64>();
        let secs = wall.as_secs_f64().max(1e-9);
        let states = sum(|r| r.states);
        let unique = sum(|r| r.unique);
        let mut first = Vec::new();
        for r in results {
            if let Some(e) = &r.error {
                first.push(format!("{}: {e}", r.name));
            }
            for v in &r.details {
                first.push(format!(
                    "{}: {} — {}",
                    v.workload,
                    v.state_text,
                    v.problems.iter().take(3).cloned().collect::<Vec<_>>().join(" / ")
                ));
            }
        }
        first.truncate(10);
        ModeSummary {
            mode: cfg.mode.clone(),
            data: format!("{:?}", cfg.data).to_lowercase(),
            barrier: cfg.check.barrier,
            block_size: cfg.block_size,
            crash_consistent_by_design: cfg.crash_consistent_by_design(),
            workloads: results.len() as u64,
            workload_errors: results.iter().filter(|r| r.error.is_some()).count() as u64,
            crash_states: states,
            unique_states: unique,
            recovery_states: sum(|r| r.recovery_states),
            multi_tx_states: sum(|r| r.multi_tx_states),
            max_tx_in_flight: results.iter().map(|r| r.max_tx_in_flight).max().unwrap_or(0),
            multi_log_states: sum(|r| r.multi_log_states),
            logs: cfg.mount_options().map_or(1, |o| o.journal.logs.wanted() as u64),
            violations: sum(|r| r.violations),
            ij_served: sum(|r| r.ij_served),
            ij_fallbacks: sum(|r| r.ij_fallbacks),
            ij_wraps: sum(|r| r.ij_wraps),
            ij_area_full: sum(|r| r.ij_area_full),
            ij_data_grouped: sum(|r| r.ij_data_grouped),
            ij_replayed: sum(|r| r.ij_replayed),
            e2fsck_runs: sum(|r| r.e2fsck_runs),
            e2fsck_failures: sum(|r| r.e2fsck_failures),
            seconds: secs,
            states_per_sec: states as f64 / secs,
            unique_per_sec: unique as f64 / secs,
            failure_files: results
                .iter()
                .flat_map(|r| {
                    r.details.iter().filter_map(|v| v.file.as_ref().map(|p| p.display().to_string()))
                })
                .collect(),
            first_problems: first,
        }
    }

    /// The mode's name with what differs from the default run (data=journal, no barrier).
    pub fn label(&self) -> String {
        let mut notes = Vec::new();
        if self.data != "ordered" {
            notes.push(format!("data={}", self.data));
        }
        if !self.barrier {
            notes.push("no barrier".to_string());
        }
        if self.block_size != cjfs_blockdev::DEFAULT_BLOCK_SIZE {
            notes.push(format!("{} KiB blocks", self.block_size / 1024));
        }
        if notes.is_empty() { self.mode.clone() } else { format!("{} ({})", self.mode, notes.join(", ")) }
    }

    /// Whether this mode passed: no violations and no workload errors, or the mode is not
    /// crash-consistent by design.
    pub fn passed(&self) -> bool {
        !self.crash_consistent_by_design
            || (self.violations == 0 && self.workload_errors == 0 && !self.missed_multi_log())
    }

    /// A journal of several logs whose run never caught two logs' transactions in flight at
    /// once: the run did not test what per-core journaling adds.
    pub fn missed_multi_log(&self) -> bool {
        self.logs > 1 && self.crash_states > 0 && self.multi_log_states == 0
    }

    /// The verdict column.
    pub fn verdict(&self) -> &'static str {
        if !self.crash_consistent_by_design {
            "not crash-consistent (by design)"
        } else if self.passed() {
            "pass"
        } else {
            "FAIL"
        }
    }
}

/// The summary of a whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per mode.
    pub modes: Vec<ModeSummary>,
    /// Seed.
    pub seed: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

impl Summary {
    /// Whether every mode passed.
    pub fn passed(&self) -> bool {
        self.modes.iter().all(ModeSummary::passed)
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let header = [
            "mode",
            "workloads",
            "crash states",
            "unique states",
            "multi-tx states",
            "multi-log states",
            "violations",
            "e2fsck failures",
            "states/s",
            "verdict",
        ];
        let rows: Vec<[String; 10]> = self
            .modes
            .iter()
            .map(|m| {
                [
                    m.label(),
                    m.workloads.to_string(),
                    m.crash_states.to_string(),
                    m.unique_states.to_string(),
                    m.multi_tx_states.to_string(),
                    if m.logs > 1 { m.multi_log_states.to_string() } else { "-".into() },
                    m.violations.to_string(),
                    format!("{}/{}", m.e2fsck_failures, m.e2fsck_runs),
                    format!("{:.0}", m.states_per_sec),
                    m.verdict().to_string(),
                ]
            })
            .collect();
        let mut w = header.map(str::len);
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: Vec<String>| -> String {
            let mut s = String::from("|");
            for (i, c) in cells.iter().enumerate() {
                let pad = w[i] - c.chars().count();
                if i == 0 || i == 9 {
                    s.push_str(&format!(" {c}{} |", " ".repeat(pad)));
                } else {
                    s.push_str(&format!(" {}{c} |", " ".repeat(pad)));
                }
            }
            s
        };
        let mut out = line(header.iter().map(|s| s.to_string()).collect());
        out.push('\n');
        out.push('|');
        for (i, n) in w.iter().enumerate() {
            let dash = "-".repeat(*n);
            if i == 0 || i == 9 {
                out.push_str(&format!("-{dash}-|"));
            } else {
                out.push_str(&format!("-{dash}:|"));
            }
        }
        for r in rows {
            out.push('\n');
            out.push_str(&line(r.to_vec()));
        }
        for m in self.modes.iter().filter(|m| m.ij_served + m.ij_fallbacks > 0) {
            out.push_str(&format!(
                "\n{}: iJournaling served {} fsyncs by i-transactions ({} with their data made durable by \
                 their batch's flush), {} committed instead ({} with the area full), {} records wrapped; \
                 recovery applied records in {} unique crash images",
                m.label(),
                m.ij_served,
                m.ij_data_grouped,
                m.ij_fallbacks,
                m.ij_area_full,
                m.ij_wraps,
                m.ij_replayed
            ));
        }
        out.push_str(&format!("\nseed {}, {:.1} s", self.seed, self.seconds));
        out
    }
}
