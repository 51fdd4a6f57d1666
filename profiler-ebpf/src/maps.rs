//! The maps more than one source uses: the subtree's cgroups and execs, tasks' baselines and
//! IO waits, the records to userspace and the drop counters; and the helpers that use them.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};
use profiler_common::*;

// Maps. Sizes are defaults; userspace may change them before load.

/// Every cgroup of the watched subtree -> its exec.
#[map]
pub(crate) static CGROUPS: HashMap<u64, CgroupEntry> = HashMap::with_max_entries(16384, 0);

/// Exec id -> totals.
#[map]
pub(crate) static EXECS: HashMap<u64, ExecStats> = HashMap::with_max_entries(4096, 0);

/// Tid -> counters at the moment the task came under the profiler while already running.
#[map]
pub(crate) static BASELINES: HashMap<u32, TaskBaseline> = HashMap::with_max_entries(16384, 0);

/// Tid -> IO waits of tasks of the subtree that have waited on IO.
#[map]
pub(crate) static IOWAITS: HashMap<u32, IoWait> = HashMap::with_max_entries(32768, 0);

/// Lifecycle records to userspace. The reader maps the data twice (a ring wraps around), and
/// every page counts in its RSS: 1 MiB holds ~4,000 records (a process's fork, execve and end
/// take ~500 bytes), the reader drains every 100 ms and is woken at a quarter full.
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

pub(crate) const RING_BYTES: u32 = 1 << 20;

/// Counters of records or entries that could not be stored (see DROP_* in profiler-common).
#[map]
pub(crate) static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_COUNTERS, 0);

/// Zeroed ExecStats to insert from (too big for the 512-byte BPF stack). Never written.
#[map]
pub(crate) static ZERO_STATS: PerCpuArray<ExecStats> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU scratch record for building a TaskRecord off the stack.
#[map]
pub(crate) static SCRATCH: PerCpuArray<TaskRecord> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
pub(crate) fn drop_count(why: DropReason) {
    if let Some(p) = DROPS.get_ptr_mut(why as u32) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
pub(crate) fn add(field: &mut u64, v: u64) {
    // SAFETY: the field lives in a map value shared between CPUs; an atomic add is the only
    // access other than userspace reads.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(field, v) };
}

#[inline(always)]
pub(crate) fn entry_of(cgroup_id: u64) -> Option<CgroupEntry> {
    // SAFETY: entries are plain data, copied out.
    unsafe { CGROUPS.get(&cgroup_id) }.copied()
}

#[inline(always)]
pub(crate) fn stats_of(exec_id: u64) -> Option<&'static mut ExecStats> {
    match EXECS.get_ptr_mut(&exec_id) {
        // SAFETY: map values stay valid for the program's run; fields are updated atomically.
        Some(p) => Some(unsafe { &mut *p }),
        None => {
            drop_count(DropReason::ExecMissing);
            None
        }
    }
}

/// Wake the reader only when the buffer is filling up; otherwise it drains on its timer.
#[inline(always)]
pub(crate) fn wakeup_flag() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA as u64) > (RING_BYTES / 4) as u64 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

pub(crate) fn emit<T>(ev: &T) {
    if EVENTS.output::<T>(ev, wakeup_flag()).is_err() {
        drop_count(DropReason::RingBuf);
    }
}
