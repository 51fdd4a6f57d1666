//! Wall-clock times of records. The kernel stamps events with CLOCK_MONOTONIC
//! (bpf_ktime_get_ns); records also carry Unix times, converted with one offset
//! (CLOCK_REALTIME - CLOCK_MONOTONIC) taken once, so that a clock step while the profiler runs
//! does not reorder its execs.

use std::sync::OnceLock;

use nix::time::{ClockId, clock_gettime};

static OFFSET_NS: OnceLock<u64> = OnceLock::new();

fn now_ns(clock: ClockId) -> u64 {
    let t = clock_gettime(clock).unwrap_or(nix::sys::time::TimeSpec::new(0, 0));
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
pub fn monotonic_ns() -> u64 {
    now_ns(ClockId::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC in ns, read on the first call and fixed from then on
/// (the monitor calls it at start).
pub fn unix_offset_ns() -> u64 {
    *OFFSET_NS.get_or_init(|| {
        // The realtime read between two monotonic reads: the offset at their midpoint.
        let m1 = now_ns(ClockId::CLOCK_MONOTONIC);
        let r = now_ns(ClockId::CLOCK_REALTIME);
        let m2 = now_ns(ClockId::CLOCK_MONOTONIC);
        r.saturating_sub(m1 / 2 + m2 / 2)
    })
}

/// A CLOCK_MONOTONIC stamp as ns since the Unix epoch.
pub fn monotonic_to_unix_ns(monotonic_ns: u64) -> u64 {
    monotonic_ns.saturating_add(unix_offset_ns())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_with_a_fixed_offset() {
        let mono = now_ns(ClockId::CLOCK_MONOTONIC);
        let unix = monotonic_to_unix_ns(mono);
        let real = now_ns(ClockId::CLOCK_REALTIME);
        assert!(real.abs_diff(unix) < 1_000_000_000, "{unix} vs {real}");
        assert_eq!(monotonic_to_unix_ns(mono + 5) - unix, 5);
        assert_eq!(unix_offset_ns(), unix_offset_ns());
    }
}
