//! A description of the machine a measurement ran on, printed beside every figure.

use std::path::Path;

use serde::Serialize;

/// The machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Online cores.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// Memory in GiB.
    pub mem_gib: f64,
    /// File system and device under the working directory.
    pub disk: String,
}

fn first_line_with(path: &str, key: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split(':').nth(1)).map(|v| v.trim().to_string())
}

/// The file system type and source device holding `dir` (from /proc/self/mounts).
pub fn disk_of(dir: &Path) -> String {
    let Ok(canon) = dir.canonicalize() else { return "unknown".into() };
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut best: Option<(usize, String)> = None;
    for l in mounts.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        if canon.starts_with(f[1]) && best.as_ref().is_none_or(|(n, _)| f[1].len() > *n) {
            best = Some((f[1].len(), format!("{} on {} ({})", f[0], f[1], f[2])));
        }
    }
    best.map(|b| b.1).unwrap_or_else(|| "unknown".into())
}

impl Machine {
    /// Describe this machine; `workdir` names where benchmark files live.
    pub fn detect(workdir: &Path) -> Machine {
        let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: uname fills the struct it is given.
        let kernel = if unsafe { libc::uname(&mut uts) } == 0 {
            // SAFETY: uname NUL-terminates release.
            unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) }.to_string_lossy().into_owned()
        } else {
            "unknown".into()
        };
        let mem_kib: f64 = first_line_with("/proc/meminfo", "MemTotal")
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0.0);
        Machine {
            cpu: first_line_with("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            kernel,
            mem_gib: mem_kib / 1024.0 / 1024.0,
            disk: disk_of(workdir),
        }
    }

    /// One line for reports.
    pub fn line(&self) -> String {
        format!(
            "machine: {} x{} | kernel {} | {:.0} GiB RAM | disk: {}",
            self.cpu, self.cores, self.kernel, self.mem_gib, self.disk
        )
    }
}

#[cfg(test)]
impl Machine {
    /// A made-up machine for report tests.
    pub(crate) fn fixture() -> Machine {
        Machine { cpu: "x".into(), cores: 2, kernel: "k".into(), mem_gib: 1.0, disk: "d".into() }
    }
}
