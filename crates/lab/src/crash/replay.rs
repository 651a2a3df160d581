//! Failure files: a violation saved as a small JSON file (mode, data mode, planted bugs,
//! seed, the workload's operations, the crash state and what was wrong) that
//! [`replay`] reproduces: it records the workload again, rebuilds the same crash state from
//! the new log and checks it, printing the operation log and the differing fields.
//!
//! Single-threaded workloads record the same log every time (timer commits are off in the
//! harness), so the state is reproduced exactly; the replay says whether the log matched.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::oracle::hash64;
use super::{BaseCache, Bugs, CrashConfig, CrashError, StateDesc, Violation, Workload, WorkloadResult};

/// Format version of failure files.
pub const FAILURE_VERSION: u32 = 1;

/// A saved violation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailureFile {
    /// Format version.
    pub version: u32,
    /// Journal preset.
    pub mode: String,
    /// Data mode (`ordered` or `journal`).
    pub data: String,
    /// Planted bugs in force.
    pub bugs: Bugs,
    /// Run seed.
    pub seed: u64,
    /// The workload (setup and operations).
    pub workload: Workload,
    /// The operation log, one line each (for reading; `workload` is what is replayed).
    pub op_log: Vec<String>,
    /// The crash state.
    pub state: StateDesc,
    /// Its description.
    pub state_text: String,
    /// What was wrong.
    pub problems: Vec<String>,
    /// Fingerprint of the recorded log's shape.
    pub log_fingerprint: u64,
}

/// A seed derived from a workload name (so each workload samples differently).
pub fn name_seed(name: &str) -> u64 {
    hash64(name.as_bytes())
}

fn op_log(wl: &Workload) -> Vec<String> {
    let mut v: Vec<String> = wl.setup.iter().map(|o| format!("setup: {}", o.describe())).collect();
    for (i, op) in wl.flat_ops().iter().enumerate() {
        v.push(format!("{i:3}: {}", op.describe()));
    }
    v
}

/// Save `v` as a failure file in `dir`; returns its path.
pub fn save(dir: &Path, cfg: &CrashConfig, wl: &Workload, v: &Violation) -> Result<PathBuf, CrashError> {
    std::fs::create_dir_all(dir)?;
    let bases = BaseCache::default();
    let fingerprint = super::prepare(cfg, wl, &bases).map(|(r, _)| r.fingerprint()).unwrap_or(0);
    let f = FailureFile {
        version: FAILURE_VERSION,
        mode: cfg.mode.clone(),
        data: format!("{:?}", cfg.data).to_lowercase(),
        bugs: cfg.bugs,
        seed: cfg.seed,
        workload: wl.clone(),
        op_log: op_log(wl),
        state: v.state.clone(),
        state_text: v.state_text.clone(),
        problems: v.problems.clone(),
        log_fingerprint: fingerprint,
    };
    let path = dir.join(format!("{}-{}-{}.json", cfg.mode, wl.name, v.state.point));
    std::fs::write(&path, serde_json::to_string_pretty(&f)?)?;
    Ok(path)
}

/// Load a failure file.
pub fn load(path: &Path) -> Result<FailureFile, CrashError> {
    let text = std::fs::read_to_string(path)?;
    let f: FailureFile = serde_json::from_str(&text)?;
    if f.version != FAILURE_VERSION {
        return Err(CrashError::Replay(format!(
            "failure file version {} (expected {FAILURE_VERSION})",
            f.version
        )));
    }
    Ok(f)
}

/// What a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The operation log.
    pub op_log: Vec<String>,
    /// The crash state, as described against the new recording.
    pub state_text: String,
    /// Whether the new recording's log has the saved shape.
    pub same_log: bool,
    /// Problems found now (empty: the violation did not reproduce).
    pub problems: Vec<String>,
    /// Problems saved in the file.
    pub saved_problems: Vec<String>,
}

impl ReplayReport {
    /// Whether the violation reproduced.
    pub fn reproduced(&self) -> bool {
        !self.problems.is_empty()
    }

    /// Human-readable report.
    pub fn text(&self) -> String {
        let mut s = String::from("operation log:\n");
        for l in &self.op_log {
            s.push_str(&format!("  {l}\n"));
        }
        s.push_str(&format!("crash state: {}\n", self.state_text));
        if !self.same_log {
            s.push_str("note: the recorded log differs from the saved one (the code changed since, or the workload is concurrent)\n");
        }
        if self.problems.is_empty() {
            s.push_str("the violation did not reproduce; saved problems were:\n");
            for p in &self.saved_problems {
                s.push_str(&format!("  {p}\n"));
            }
        } else {
            s.push_str("differing fields / problems:\n");
            for p in &self.problems {
                s.push_str(&format!("  {p}\n"));
            }
        }
        s
    }
}

/// Replay a failure file (with `threads` checking threads).
pub fn replay(f: &FailureFile, threads: usize) -> Result<ReplayReport, CrashError> {
    let mut cfg = CrashConfig::new(&f.mode);
    cfg.data = f.data.parse().map_err(CrashError::Replay)?;
    cfg.bugs = f.bugs;
    cfg.seed = f.seed;
    cfg.threads = threads.max(1);
    let bases = BaseCache::default();
    let (rec, parsed) = super::prepare(&cfg, &f.workload, &bases)?;
    let mut result = WorkloadResult::default();
    let per = super::check_states(&cfg, &rec, &parsed, std::slice::from_ref(&f.state), &mut result)?;
    Ok(ReplayReport {
        op_log: op_log(&f.workload),
        state_text: f.state.describe(&parsed),
        same_log: rec.fingerprint() == f.log_fingerprint,
        problems: per.into_iter().flatten().collect(),
        saved_problems: f.problems.clone(),
    })
}
