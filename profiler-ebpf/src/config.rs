//! Load-time globals, set by userspace before load (read-only, so the verifier prunes the
//! branches they rule out): struct field offsets from the running kernel's BTF and settings.

use core::ptr::read_volatile;

use profiler_common::{Config, FinalOffsets, KernelOffsets, NAMED_PREFIX, NAMED_RULES, NetOffsets};

// Load-time globals (set by userspace; read-only, so the verifier prunes unused branches).

#[unsafe(no_mangle)]
pub(crate) static OFFSETS: KernelOffsets = KernelOffsets::ABSENT;

#[unsafe(no_mangle)]
pub(crate) static CONFIG: Config = Config {
    base_cgroup_id: 0,
    exec_depth: 1,
    blkcg_attribution: 0,
    block_getrq_fallback: 0,
    host_netns_inum: 0,
    exec_slots: 8192,
    cgroup_slots: 32768,
    named_parent_id: [0; NAMED_RULES],
    named_prefix_len: [0; NAMED_RULES],
    named_prefix: [[0; NAMED_PREFIX]; NAMED_RULES],
};

#[unsafe(no_mangle)]
pub(crate) static FINAL: FinalOffsets = FinalOffsets::ABSENT;

#[unsafe(no_mangle)]
pub(crate) static NET: NetOffsets = NetOffsets::ABSENT;

/// Bit of REQ_PREFLUSH in a request's cmd_flags (from the kernel's `enum req_flag_bits`).
#[unsafe(no_mangle)]
pub(crate) static REQ_PREFLUSH_BIT: u32 = 18;

/// Bit of QUEUE_FLAG_STATS in a request queue's flags (u32::MAX: unknown).
#[unsafe(no_mangle)]
pub(crate) static QUEUE_STATS_BIT: u32 = u32::MAX;

/// A field of OFFSETS. Read volatile so the compiler cannot fold the default in; the
/// verifier knows the loaded value (the global is frozen), so untaken branches cost nothing.
macro_rules! off {
    ($f:ident) => {
        $crate::config::global(&$crate::config::OFFSETS.$f)
    };
}

macro_rules! net_off {
    ($f:ident) => {
        $crate::config::global(&$crate::config::NET.$f)
    };
}

#[inline(always)]
pub(crate) fn global<T: Copy>(v: &T) -> T {
    // SAFETY: plain read of a global.
    unsafe { read_volatile(v) }
}

macro_rules! fin {
    ($f:ident) => {
        $crate::config::global(&$crate::config::FINAL.$f)
    };
}
