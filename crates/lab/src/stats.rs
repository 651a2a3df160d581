//! Medians with their spread: a distribution-free confidence interval for the median of a
//! few repetitions, and the ratio of two series as the median of their paired
//! per-repetition ratios.
//!
//! Throughput on a shared machine is not normally distributed (a repetition that loses the
//! CPU to a neighbour is slow by a lot, never fast by a lot), so the interval is the
//! order-statistic one: with `n` sorted values, `[x(k), x(n-k+1)]` covers the true median
//! with probability `1 - 2·P(Binomial(n, 1/2) ≤ k-1)`, whatever the distribution. The largest
//! `k` whose coverage reaches the asked confidence is used; with too few values for that
//! (fewer than 5 at 90 %), the interval is min–max and its real, lower coverage is reported.
//!
//! Ratios are paired: the lab interleaves repetitions (A B C, A B C, …), so repetition `r`
//! of every series ran under the same conditions, and `ops(B, r) / ops(A, r)` cancels what
//! the machine did during that round. The spread of those ratios is what a reader needs to
//! know whether a ratio holds still; it is usually much narrower than the spread of either
//! series' ops/s.

use serde::Serialize;

/// Confidence asked of every interval the lab prints.
pub const CONFIDENCE: f64 = 0.90;

/// A median and the interval around it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MedianCi {
    /// The median.
    pub median: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Probability that the interval covers the true median (below [`CONFIDENCE`] when
    /// there were too few values: then the interval is min–max).
    pub coverage: f64,
    /// Values it was computed from.
    pub n: usize,
}

impl MedianCi {
    /// Half the interval's width relative to the median (0.05 = ±5 %).
    pub fn rel_half_width(&self) -> f64 {
        if self.median == 0.0 { f64::INFINITY } else { (self.hi - self.lo) / 2.0 / self.median.abs() }
    }

    /// Whether the interval reaches the asked confidence and is within `bound` (relative
    /// half-width).
    pub fn within(&self, bound: f64) -> bool {
        self.coverage + 1e-9 >= CONFIDENCE && self.rel_half_width() <= bound
    }

    /// `1.08 [0.98–1.15]` (ratios) with the coverage when it falls short of [`CONFIDENCE`].
    pub fn ratio_text(&self) -> String {
        let mut s = format!("{:.2} [{:.2}–{:.2}]", self.median, self.lo, self.hi);
        if self.coverage + 1e-9 < CONFIDENCE {
            s.push_str(&format!(" ({:.0} %)", self.coverage * 100.0));
        }
        s
    }
}

/// The median of `v` (0 for an empty slice).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// `P(Binomial(n, 1/2) ≤ k)`.
fn binom_cdf_half(n: usize, k: usize) -> f64 {
    let mut c = 1.0f64; // C(n, 0)
    let mut sum = 0.0;
    for i in 0..=k.min(n) {
        if i > 0 {
            c = c * (n - i + 1) as f64 / i as f64;
        }
        sum += c;
    }
    sum / 2f64.powi(n as i32)
}

/// Coverage of `[x(k), x(n-k+1)]` (1-based order statistics) for the median.
fn coverage(n: usize, k: usize) -> f64 {
    if k == 0 || 2 * k > n + 1 {
        return 0.0;
    }
    1.0 - 2.0 * binom_cdf_half(n, k - 1)
}

/// The median of `v` with its order-statistic interval at [`CONFIDENCE`]. `None` for fewer
/// than two values: one value has no spread, and a figure without one is not printed.
pub fn median_ci(v: &[f64]) -> Option<MedianCi> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let n = s.len();
    if n < 2 {
        return None;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    // The largest k (narrowest interval) that still reaches the confidence; k = 1 (min–max)
    // when none does.
    let mut k = 1;
    while coverage(n, k + 1) >= CONFIDENCE {
        k += 1;
    }
    Some(MedianCi { median: median(&s), lo: s[k - 1], hi: s[n - k], coverage: coverage(n, k), n })
}

/// Paired per-repetition ratios `num[r] / den[r]`; repetitions where either failed (`None`)
/// or the baseline measured nothing are left out.
pub fn paired_ratios(num: &[Option<f64>], den: &[Option<f64>]) -> Vec<f64> {
    num.iter()
        .zip(den)
        .filter_map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) if *b > 0.0 => Some(a / b),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_matches_the_binomial() {
        // n = 5, min–max: 1 - 2/32.
        assert!((coverage(5, 1) - 0.9375).abs() < 1e-12);
        // n = 3, min–max: 1 - 2/8.
        assert!((coverage(3, 1) - 0.75).abs() < 1e-12);
        // n = 10, k = 2: 1 - 2·(1 + 10)/1024.
        assert!((coverage(10, 2) - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        assert_eq!(coverage(4, 3), 0.0);
    }

    #[test]
    fn interval_narrows_with_more_values_and_reports_short_coverage() {
        let three = median_ci(&[1.0, 3.0, 2.0]).expect("ci");
        assert_eq!((three.median, three.lo, three.hi), (2.0, 1.0, 3.0));
        assert!(three.coverage < CONFIDENCE);
        assert!(three.ratio_text().contains("(75 %)"), "{}", three.ratio_text());
        assert!(!three.within(10.0), "a 75 % interval never satisfies a bound");
        let v: Vec<f64> = (1..=12).map(f64::from).collect();
        let twelve = median_ci(&v).expect("ci");
        assert!(twelve.coverage >= CONFIDENCE);
        assert!(twelve.lo > 1.0 && twelve.hi < 12.0, "{twelve:?}");
        assert_eq!(twelve.median, 6.5);
        assert!(median_ci(&[1.0]).is_none());
    }

    #[test]
    fn ratios_are_paired_and_skip_failed_repetitions() {
        let r = paired_ratios(&[Some(2.0), None, Some(9.0)], &[Some(1.0), Some(1.0), Some(3.0)]);
        assert_eq!(r, vec![2.0, 3.0]);
        let within = median_ci(&[1.00, 1.01, 0.99, 1.02, 0.98]).expect("ci");
        assert!(within.within(0.03) && !within.within(0.01), "{within:?}");
    }
}
