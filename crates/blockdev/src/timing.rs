//! Microsecond-accurate sleeping for the emulated devices.
//!
//! Linux rounds sleeps up by the thread's timer slack (50 µs by default), which would
//! swamp the 10-20 µs latencies the emulated SSDs model. [`precise_sleep`] lowers the slack,
//! sleeps in the kernel for all but a short tail, and spins for the tail. The tail adapts
//! to how late the kernel's wake-ups actually are on this machine (a running estimate,
//! between [`MIN_SPIN_TAIL`] and [`SPIN_TAIL`]): spinning costs a core that the file system
//! under test could use, and a real device costs the host no CPU while it works.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest tail spent spinning instead of sleeping in the kernel.
pub const SPIN_TAIL: Duration = Duration::from_micros(60);

/// The shortest spinning tail.
pub const MIN_SPIN_TAIL: Duration = Duration::from_micros(8);

/// Running estimate of the kernel's wake-up lateness, in nanoseconds (a high quantile:
/// it rises at once with a late wake-up and decays slowly).
static WAKE_LATE_NS: AtomicU64 = AtomicU64::new(SPIN_TAIL.as_nanos() as u64);

/// The spinning tail to use now.
fn spin_tail() -> Duration {
    let late = WAKE_LATE_NS.load(Ordering::Relaxed);
    Duration::from_nanos(late + 4_000).clamp(MIN_SPIN_TAIL, SPIN_TAIL)
}

/// Record how late a kernel sleep woke up.
fn observe_lateness(late: Duration) {
    let l = late.as_nanos().min(u128::from(u64::MAX)) as u64;
    let cur = WAKE_LATE_NS.load(Ordering::Relaxed);
    // Up quickly (a late wake-up makes a sleep overshoot), down slowly (1/32 per sample).
    let next = if l > cur { cur + (l - cur) / 2 } else { cur - (cur - l) / 32 };
    WAKE_LATE_NS.store(next, Ordering::Relaxed);
}

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

/// Give the calling thread a higher scheduling priority (nice -10), best effort: threads
/// that drive the device (a journal's commit and flush threads) are on the path of every
/// fsync, and when many application threads wake at once (a group of transactions became
/// durable) they must not wait behind them for a core. Without the privilege to lower the
/// nice value (CAP_SYS_NICE) the thread keeps its priority. Returns whether it took effect.
pub fn raise_io_thread_priority() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no arguments; setpriority with PRIO_PROCESS and a thread id
        // changes only that thread's nice value and touches no memory.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, -10) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Sleep for `d`, accurate to a few microseconds (it never returns early).
///
/// Everything above the spinning tail (the kernel's measured wake-up lateness, within
/// [`MIN_SPIN_TAIL`]..=[`SPIN_TAIL`]) is slept in the kernel with a 1 ns timer slack; the tail
/// is spent spinning on [`Instant::now`] with [`std::hint::spin_loop`].
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
    let tail = spin_tail();
    if remaining > tail {
        set_low_timer_slack();
        let wake = now + (remaining - tail);
        std::thread::sleep(remaining - tail);
        observe_lateness(Instant::now().saturating_duration_since(wake));
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
