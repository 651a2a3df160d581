//! Microsecond-accurate sleeping for the emulated devices.
//!
//! Linux rounds sleeps up by the thread's timer slack (50 µs by default), which would
//! swamp the 10-20 µs latencies the emulated SSDs model. [`precise_sleep`] lowers the slack,
//! sleeps in the kernel for all but the last [`SPIN_TAIL`], and spins for the tail.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The last part of a sleep that is spent spinning instead of sleeping in the kernel.
pub const SPIN_TAIL: Duration = Duration::from_micros(60);

thread_local! {
    /// Whether [`set_low_timer_slack`] already ran on this thread.
    static LOW_SLACK_SET: Cell<bool> = const { Cell::new(false) };
}

/// Set the calling thread's timer slack to 1 ns (`prctl(PR_SET_TIMERSLACK, 1)`), so kernel
/// sleeps wake up on time. Idempotent and cheap after the first call on a thread; a failure
/// (not expected on Linux) is ignored, leaving the default slack.
pub fn set_low_timer_slack() {
    LOW_SLACK_SET.with(|done| {
        if !done.get() {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only changes the
            // calling thread's timer slack; no memory is passed to the kernel.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
            }
            done.set(true);
        }
    });
}

/// Sleep for `d`, accurate to a few microseconds (it never returns early).
///
/// Everything above [`SPIN_TAIL`] is slept in the kernel (with a 1 ns timer slack); the
/// tail is spent spinning on [`Instant::now`] with [`std::hint::spin_loop`].
pub fn precise_sleep(d: Duration) {
    if d.is_zero() {
        return;
    }
    precise_sleep_until(Instant::now() + d);
}

/// Sleep until `deadline` (see [`precise_sleep`]); returns at once if it has passed.
pub fn precise_sleep_until(deadline: Instant) {
    let now = Instant::now();
    if now >= deadline {
        return;
    }
    let remaining = deadline - now;
    if remaining > SPIN_TAIL {
        set_low_timer_slack();
        std::thread::sleep(remaining - SPIN_TAIL);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn median_overshoot(d: Duration, n: usize) -> Duration {
        let mut over: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                precise_sleep(d);
                let e = t.elapsed();
                assert!(e >= d, "slept {e:?} < {d:?}");
                e - d
            })
            .collect();
        over.sort();
        over[n / 2]
    }

    #[test]
    fn short_sleeps_are_accurate() {
        let m = median_overshoot(Duration::from_micros(20), 300);
        assert!(m < Duration::from_micros(30), "median overshoot {m:?}");
    }

    #[test]
    fn longer_sleeps_use_the_kernel_and_stay_close() {
        // Exercises the kernel-sleep path; very tolerant because the machine is noisy.
        let m = median_overshoot(Duration::from_micros(300), 50);
        assert!(m < Duration::from_micros(500), "median overshoot {m:?}");
    }

    #[test]
    fn zero_and_past_deadlines_return() {
        precise_sleep(Duration::ZERO);
        precise_sleep_until(Instant::now());
        set_low_timer_slack();
        set_low_timer_slack();
    }
}
