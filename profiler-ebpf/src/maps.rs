//! The maps more than one source uses: the subtree's cgroups and execs, tasks' baselines and
//! IO waits, the records to userspace and the drop counters; and the helpers that use them.

use core::{
    intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd},
    ptr::read_volatile,
};

use aya_ebpf::{
    bindings::{BPF_F_MMAPABLE, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use profiler_common::{
    CgroupEntry, CgroupSlot, DROP_COUNTERS, DropReason, EXEC_PROBES, ExecStats, IoWait, NO_SLOT,
    ProcEnvEvent, TABLE_PROBES, TaskBaseline, TaskRecord, table_probe,
};

use crate::config::{CONFIG, global};

// Maps. Sizes are defaults; userspace may change them before load.

/// Every cgroup of the watched subtree -> its exec (open addressing by cgroup id: see
/// `TABLE_PROBES` in profiler-common). Userspace sets the size (CONFIG.cgroup_slots).
#[map]
pub(crate) static CGROUPS: Array<CgroupSlot> = Array::with_max_entries(32768, BPF_F_MMAPABLE);

/// The execs' totals, by slot (open addressing by exec id; CONFIG.exec_slots slots), and who
/// owns each slot.
#[map]
pub(crate) static EXECS: Array<ExecStats> = Array::with_max_entries(8192, 0);
#[map]
pub(crate) static EXEC_OWNERS: Array<u64> = Array::with_max_entries(8192, BPF_F_MMAPABLE);

/// Tid -> counters at the moment the task came under the profiler while already running.
#[map]
pub(crate) static BASELINES: HashMap<u32, TaskBaseline> = HashMap::with_max_entries(16384, 0);

/// Tid -> IO waits of tasks of the subtree that have waited on IO.
#[map]
pub(crate) static IOWAITS: HashMap<u32, IoWait> = HashMap::with_max_entries(32768, 0);

/// Lifecycle records to userspace. The reader maps the data twice (a ring wraps around), and
/// every page counts in its RSS: 1 MiB holds ~4,000 records (a process's execve and end
/// take ~500 bytes), the reader drains every 100 ms and is woken at a quarter full.
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

pub(crate) const RING_BYTES: u32 = 1 << 20;

/// Counters of records or entries that could not be stored, by `DropReason` (profiler-common).
#[map]
pub(crate) static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_COUNTERS, 0);

/// Per-CPU scratch for an environment block on its way to the ring buffer.
#[map]
pub(crate) static ENV_SCRATCH: PerCpuArray<ProcEnvEvent> = PerCpuArray::with_max_entries(1, 0);

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
fn cas(word: *mut u64, old: u64, new: u64) -> bool {
    // SAFETY: an aligned u64 of a map value.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(word, old, new)
            .1
    }
}

/// The cgroup's entry, if it belongs to the watched subtree.
#[inline(always)]
pub(crate) fn entry_of(cgroup_id: u64) -> Option<CgroupEntry> {
    let n = global(&CONFIG.cgroup_slots);
    for i in 0..TABLE_PROBES {
        let s = CGROUPS.get_ptr(table_probe(cgroup_id, n, i))?;
        // SAFETY: a map value; its owner is written last when the slot is taken.
        unsafe {
            if read_volatile(&(*s).owner) == cgroup_id {
                return Some(read_volatile(&(*s).entry));
            }
        }
    }
    None
}

/// Add the cgroup to CGROUPS (false when the table is full). Already there (userspace got
/// there first) is fine.
#[inline(always)]
pub(crate) fn insert_entry(cgroup_id: u64, entry: &CgroupEntry) -> bool {
    let n = global(&CONFIG.cgroup_slots);
    for i in 0..TABLE_PROBES {
        let Some(s) = CGROUPS.get_ptr_mut(table_probe(cgroup_id, n, i)) else {
            return false;
        };
        // SAFETY: a map value. A slot is taken by compare-and-swap of its owner to a
        // placeholder, filled, then given its owner.
        unsafe {
            let o = read_volatile(&(*s).owner);
            if o == cgroup_id {
                return true;
            }
            if o == 0 && cas(&mut (*s).owner, 0, u64::MAX) {
                core::ptr::write_volatile(&mut (*s).entry, *entry);
                core::ptr::write_volatile(&mut (*s).owner, cgroup_id);
                return true;
            }
        }
    }
    false
}

/// The exec's slot in EXECS: the first of its probe sequence that it owns or that is free
/// (taken by compare-and-swap). Kernel and userspace scan in the same order and never free a
/// slot while both may take one, so an exec gets one slot. NO_SLOT when the table is full.
#[inline(always)]
pub(crate) fn exec_slot(exec_id: u64) -> u32 {
    let n = global(&CONFIG.exec_slots);
    for i in 0..EXEC_PROBES {
        let j = table_probe(exec_id, n, i);
        let Some(s) = EXEC_OWNERS.get_ptr_mut(j) else {
            return NO_SLOT;
        };
        // SAFETY: a map value; it changes only by compare-and-swap (and userspace's free).
        unsafe {
            let o = read_volatile(s);
            if o == exec_id || (o == 0 && (cas(s, 0, exec_id) || read_volatile(s) == exec_id)) {
                return j;
            }
        }
    }
    NO_SLOT
}

/// The totals at an exec's slot (see EXEC_SLOT_HOLD_S for why no owner check is needed).
#[inline(always)]
pub(crate) fn stats_of(slot: u32) -> Option<&'static mut ExecStats> {
    match EXECS.get_ptr_mut(slot) {
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
