//! Latency recording with HDR histograms (microsecond resolution).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency histogram in microseconds.
#[derive(Clone)]
pub struct Latency {
    h: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

/// Percentiles of a latency histogram, microseconds.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latency").field("count", &self.h.len()).finish()
    }
}

impl Latency {
    /// An empty histogram (1 µs to 100 s, 3 significant digits).
    pub fn new() -> Latency {
        match Histogram::new_with_bounds(1, 100_000_000, 3) {
            Ok(h) => Latency { h },
            Err(_) => unreachable!("constant bounds are valid"),
        }
    }
    /// Record one duration.
    pub fn record(&mut self, d: Duration) {
        let us = (d.as_nanos() / 1000).clamp(1, 100_000_000) as u64;
        let _ = self.h.record(us);
    }
    /// Merge another histogram in.
    pub fn merge(&mut self, o: &Latency) {
        let _ = self.h.add(&o.h);
    }
    /// Cumulative distribution as `[µs, fraction]` points (100 quantiles plus the tail);
    /// empty when nothing was recorded.
    pub fn cdf(&self) -> Vec<[f64; 2]> {
        if self.h.is_empty() {
            return Vec::new();
        }
        let mut qs: Vec<f64> = (1..100).map(|i| f64::from(i) / 100.0).collect();
        qs.extend([0.995, 0.999, 0.9999, 1.0]);
        qs.into_iter().map(|q| [self.h.value_at_quantile(q) as f64, q]).collect()
    }
    /// Summary.
    pub fn percentiles(&self) -> Percentiles {
        Percentiles {
            count: self.h.len(),
            mean: self.h.mean(),
            p50: self.h.value_at_quantile(0.5) as f64,
            p95: self.h.value_at_quantile(0.95) as f64,
            p99: self.h.value_at_quantile(0.99) as f64,
            p999: self.h.value_at_quantile(0.999) as f64,
            max: self.h.max() as f64,
        }
    }
}
