//! Does a run agree with the committed results? Each ratio of a fresh sweep is set beside the
//! same (workload, threads, series) of a committed `results.json`, with both intervals.
//!
//! Two ratios agree when their intervals overlap (a committed figure from before the lab
//! printed intervals is a bare ratio of medians, an interval of width zero), or when their
//! medians differ by no more than the run's bound (`--ci`), the spread the lab was asked to
//! reach.
//! Only ratios are compared: on a shared machine the ops/s of a series move with the
//! neighbours, the paired ratio much less (see [`crate::stats`]).

use std::fmt::Write as _;

use serde_json::Value;

use crate::bench::SweepReport;
use crate::stats::MedianCi;

/// One ratio of the fresh run and its committed counterpart.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    /// Workload.
    pub workload: String,
    /// Threads.
    pub threads: usize,
    /// Series (its ratio is to the first series of both runs).
    pub series: String,
    /// The fresh ratio with its interval.
    pub now: MedianCi,
    /// The committed ratio: with its interval, or `lo == hi == median` for a bare ratio.
    pub committed: MedianCi,
    /// Whether the committed figure had an interval.
    pub committed_has_interval: bool,
    /// `now / committed - 1` of the medians.
    pub diff: f64,
    /// Whether they agree (overlapping intervals, or medians within the bound).
    pub agree: bool,
}

/// Compare every ratio of `now` with `committed` (the text of a `results.json`); `bound` is
/// the relative difference of medians that still agrees (the run's `--ci` bound, if any).
/// Points the committed run does not have are skipped; it is an error when the two runs'
/// first series (the baseline of every ratio) differ or nothing could be compared.
pub fn compare(now: &SweepReport, committed: &str, bound: Option<f64>) -> Result<Vec<Agreement>, String> {
    let c: Value = serde_json::from_str(committed).map_err(|e| format!("not a results.json: {e}"))?;
    let c_points = c["points"].as_array().ok_or("not a results.json: no points")?;
    let c_first = c["series"][0]["name"].as_str().ok_or("not a results.json: no series")?;
    let Some(n_first) = now.series.first().map(|s| s.name.as_str()) else {
        return Err("the fresh run has no series".into());
    };
    if c_first != n_first {
        return Err(format!(
            "baselines differ: committed ratios are to {c_first:?}, fresh ones to {n_first:?}"
        ));
    }
    let find = |w: &str, t: usize, s: &str| {
        c_points.iter().find(|p| {
            p["workload"].as_str() == Some(w)
                && p["threads"].as_u64() == Some(t as u64)
                && p["series"].as_str() == Some(s)
        })
    };
    let mut out = Vec::new();
    for p in &now.points {
        let Some(now_ci) = p.ratio else { continue };
        let Some(cp) = find(&p.workload, p.threads, &p.series) else { continue };
        let (committed, has_interval) = match committed_ratio(&cp["ratio"]) {
            Some(ci) => (ci, true),
            None => {
                // Older results: the ratio of the medians, without an interval.
                let base = find(&p.workload, p.threads, n_first).and_then(|b| b["ops_per_sec"].as_f64());
                let (Some(ops), Some(base)) = (cp["ops_per_sec"].as_f64(), base) else { continue };
                if base <= 0.0 {
                    continue;
                }
                let r = ops / base;
                (MedianCi { median: r, lo: r, hi: r, coverage: 0.0, n: 1 }, false)
            }
        };
        let diff = now_ci.median / committed.median - 1.0;
        let agree = (committed.lo <= now_ci.hi && now_ci.lo <= committed.hi)
            || bound.is_some_and(|b| diff.abs() <= b + 1e-9);
        out.push(Agreement {
            workload: p.workload.clone(),
            threads: p.threads,
            series: p.series.clone(),
            now: now_ci,
            committed,
            committed_has_interval: has_interval,
            diff,
            agree,
        });
    }
    if out.is_empty() {
        return Err("no point of this run is in the committed results".into());
    }
    Ok(out)
}

fn committed_ratio(v: &Value) -> Option<MedianCi> {
    Some(MedianCi {
        median: v["median"].as_f64()?,
        lo: v["lo"].as_f64()?,
        hi: v["hi"].as_f64()?,
        coverage: v["coverage"].as_f64()?,
        n: v["n"].as_u64()? as usize,
    })
}

/// The comparison as a table, and a last line saying how many agree.
pub fn text(rows: &[Agreement], source: &str, bound: Option<f64>) -> String {
    let mut out = String::new();
    let rule = match bound {
        Some(b) => format!("agree: intervals overlap or medians within ±{:.0} %", b * 100.0),
        None => "agree: intervals overlap".to_string(),
    };
    let _ = writeln!(out, "compared with the committed {source} (ratios to the same first series; {rule}):");
    let w = rows.iter().map(|r| r.series.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(
        out,
        "  {:<16} {:>3}  {:<w$}  {:<24} {:<24} {:>7}  agree",
        "workload", "thr", "series", "now", "committed", "diff"
    );
    for r in rows {
        let committed = if r.committed_has_interval {
            r.committed.ratio_text()
        } else {
            format!("{:.2} (no interval)", r.committed.median)
        };
        let _ = writeln!(
            out,
            "  {:<16} {:>3}  {:<w$}  {:<24} {:<24} {:>+6.1}%  {}",
            r.workload,
            r.threads,
            r.series,
            r.now.ratio_text(),
            committed,
            r.diff * 100.0,
            if r.agree { "yes" } else { "NO" }
        );
    }
    let agree = rows.iter().filter(|r| r.agree).count();
    let _ = write!(out, "  {agree} of {} ratios agree with the committed results", rows.len());
    if agree < rows.len() {
        out.push_str(" (the rows marked NO moved by more than that)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{Point, SeriesInfo};
    use crate::machine::Machine;

    fn ci(median: f64, lo: f64, hi: f64) -> MedianCi {
        MedianCi { median, lo, hi, coverage: 0.93, n: 8 }
    }

    fn point(series: &str, ops: f64, ratio: Option<MedianCi>) -> Point {
        Point {
            workload: "varmail-shared".into(),
            threads: 32,
            series: series.into(),
            ops_per_sec: ops,
            ops_ci: None,
            ratio,
            reps: 8,
            bound_met: None,
            mb_per_sec: 0.0,
            reps_ops_per_sec: vec![ops],
            median_run: None,
            fsync_pooled: None,
            fsync_p999_ratio: None,
            error: None,
        }
    }

    fn report(points: Vec<Point>) -> SweepReport {
        let info = |name: &str| SeriesInfo {
            name: name.into(),
            target: String::new(),
            mode: None,
            device: String::new(),
        };
        SweepReport {
            machine: Machine::fixture(),
            command: "test".into(),
            seed: 1,
            duration_secs: 3.0,
            reps: 5,
            max_reps: 8,
            ci_bound: Some(0.05),
            scale: 1.0,
            series: vec![info("a/jbd2"), info("a/cjfs"), info("ext4")],
            workloads: vec!["varmail-shared".into()],
            threads: vec![32],
            points,
        }
    }

    #[test]
    fn overlapping_intervals_agree_and_disjoint_ones_do_not() {
        let committed = report(vec![
            point("a/jbd2", 100.0, None),
            point("a/cjfs", 110.0, Some(ci(1.10, 1.05, 1.15))),
            point("ext4", 60.0, Some(ci(0.60, 0.58, 0.62))),
        ]);
        let now = report(vec![
            point("a/jbd2", 90.0, None),
            point("a/cjfs", 100.0, Some(ci(1.16, 1.14, 1.20))),
            point("ext4", 60.0, Some(ci(0.70, 0.66, 0.74))),
        ]);
        let rows = compare(&now, &serde_json::to_string(&committed).unwrap(), None).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows[0].agree && rows[0].committed_has_interval);
        assert!(!rows[1].agree);
        let t = text(&rows, "x", None);
        assert!(t.contains("1 of 2 ratios agree") && t.contains("NO"), "{t}");
        // 0.70 against 0.60 is 17 % apart: beyond a 5 % bound, within a 20 % one.
        let c = serde_json::to_string(&committed).unwrap();
        assert!(!compare(&now, &c, Some(0.05)).unwrap()[1].agree);
        assert!(compare(&now, &c, Some(0.20)).unwrap()[1].agree);
    }

    #[test]
    fn a_bare_committed_ratio_must_lie_inside_the_fresh_interval() {
        let mut committed = report(vec![point("a/jbd2", 100.0, None), point("a/cjfs", 176.0, None)]);
        committed.series.truncate(2);
        let text_of = |r: &SweepReport| serde_json::to_string(r).unwrap();
        let inside =
            report(vec![point("a/jbd2", 1.0, None), point("a/cjfs", 1.0, Some(ci(1.80, 1.74, 1.86)))]);
        let rows = compare(&inside, &text_of(&committed), None).unwrap();
        assert!(rows[0].agree && !rows[0].committed_has_interval);
        assert!((rows[0].committed.median - 1.76).abs() < 1e-9);
        let outside =
            report(vec![point("a/jbd2", 1.0, None), point("a/cjfs", 1.0, Some(ci(1.80, 1.78, 1.86)))]);
        assert!(!compare(&outside, &text_of(&committed), None).unwrap()[0].agree);
        let r = compare(&outside, &text_of(&committed), Some(0.05)).unwrap();
        assert!(r[0].agree, "1.80 is 2.3 % from 1.76");
        assert!((r[0].diff - (1.80 / 1.76 - 1.0)).abs() < 1e-9);
    }

    #[test]
    fn different_baselines_or_nothing_in_common_are_errors() {
        let committed =
            report(vec![point("a/jbd2", 100.0, None), point("a/cjfs", 110.0, Some(ci(1.1, 1.0, 1.2)))]);
        let mut other = committed.clone();
        other.series[0].name = "b/jbd2".into();
        assert!(
            compare(&other, &serde_json::to_string(&committed).unwrap(), None)
                .unwrap_err()
                .contains("baselines differ")
        );
        let mut elsewhere = committed.clone();
        for p in &mut elsewhere.points {
            p.threads = 1;
        }
        assert!(compare(&elsewhere, &serde_json::to_string(&committed).unwrap(), None).is_err());
        assert!(compare(&committed, "not json", None).is_err());
    }
}
