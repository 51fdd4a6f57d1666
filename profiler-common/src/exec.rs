//! Execs: which exec each cgroup of the subtree belongs to, an exec's totals in the kernel, and
//! its cgroup's own figures read at its removal.

use crate::*;

/// Which exec a cgroup of the subtree belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupEntry {
    pub exec_id: u64,
    /// Depth below the attached cgroup (0 for the attached cgroup itself).
    pub depth: u32,
    /// The exec's slot in the `EXECS` table, [`NO_SLOT`] when it got none (table full).
    pub slot: u32,
}

/// [`CgroupEntry::slot`] of an exec that has no slot.
pub const NO_SLOT: u32 = u32::MAX;

// The two tables the programs look up on every event, `CGROUPS` (cgroup id -> entry) and
// `EXECS` (the execs' totals), are arrays with open addressing, not hash maps: a hash map
// lookup cost hundreds of ns on the project's machines, an array lookup is inlined by the
// verifier. A key takes the first free one of its probe sequence (`table_probe`); a slot is
// taken by compare-and-swap of its owner (0 when free), and freed by userspace. The owners
// (`CGROUPS`, whose slots are small, and `EXEC_OWNERS`) are mapped into userspace
// (BPF_F_MMAPABLE), which takes and frees slots with the same atomics.

/// Slots a cgroup may take in `CGROUPS` (a lookup of a cgroup outside the subtree reads them
/// all): the table has twice `--max-cgroups` slots, so that it is at most half full.
pub const TABLE_PROBES: u32 = 8;
/// Slots an exec may take in `EXECS` (only looked up when an exec is made: its cgroups'
/// entries keep its slot). The table has twice `--max-execs` slots: ended execs keep theirs
/// for a while (see `EXEC_SLOT_HOLD_S`).
pub const EXEC_PROBES: u32 = 32;
/// Seconds an ended exec's slot stays taken after its cgroups were forgotten, so that a
/// program that found the slot just before (a block request still in flight) adds to that
/// exec, not to the next one to take the slot.
pub const EXEC_SLOT_HOLD_S: u64 = 2;

/// The `i`th slot of `key`'s probe sequence in a table of `n` slots.
#[inline(always)]
pub fn table_probe(key: u64, n: u32, i: u32) -> u32 {
    let n = if n == 0 { 1 } else { n };
    let j = ((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % n as u64) as u32 + i;
    if j >= n { j - n } else { j }
}

/// A slot of the `CGROUPS` table: `owner` is the cgroup id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupSlot {
    pub owner: u64,
    pub entry: CgroupEntry,
    pub _pad: u64,
}

/// An exec's totals kept by the kernel side: a slot of the `EXECS` table (its owner, the exec
/// id, is in `EXEC_OWNERS`). Userspace zeroes a slot before it frees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Sum over the exec's ended tasks of their counters (minus any baseline).
    pub ended: TaskCounters,
    pub disk: DiskStats,
    /// fork/clone of a new process (thread group leader) into the exec.
    pub procs_started: u64,
    /// fork/clone of a thread into an existing process of the exec.
    pub threads_started: u64,
    pub execve: u64,
    pub task_exits: u64,
    pub proc_exits: u64,
    /// Tasks that have exited but whose final counters have not been collected yet
    /// (a wrapping counter: read it as i64).
    pub pending: u64,
    /// Ended tasks that had no usable delay accounting (their memory stalls are unknown).
    pub tasks_without_delays: u64,
    /// Ended tasks that were already running when they came under the profiler: counted from
    /// that moment, not from their start.
    pub tasks_partial: u64,
    /// 1 once the exec's cgroup has been removed: the last task to end then takes the final
    /// cgroup figures again.
    pub removed: u64,
    /// Traffic of the exec's sockets (any network namespace).
    pub sock: SockTraffic,
}

/// Flags of [`ExecFinalEvent::flags`]: which figures were read.
pub const FINAL_PSI: u32 = 1;
pub const FINAL_MEMORY: u32 = 2;
pub const FINAL_PIDS: u32 = 4;
pub const FINAL_CPU: u32 = 8;
/// A CPU had a PSI state still active at removal (its time since is not counted).
pub const FINAL_PSI_ACTIVE: u32 = 16;
/// Some online CPU's per-cpu area was unknown.
pub const FINAL_CPU_UNKNOWN: u32 = 32;

/// The kernel's own totals of an exec's cgroup, read by the cgroup_rmdir program: what the
/// cgroup's files would have shown at that moment.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExecFinalEvent {
    pub kind: u32,
    pub flags: u32,
    pub cgroup_id: u64,
    /// PSI totals in ns per psi_states index, computed as a read of the pressure file would.
    pub psi_ns: [u64; PSI_STATES],
    pub memory_peak_pages: u64,
    pub memory_events: [u64; MEMCG_EVENTS],
    pub pids_peak: u64,
    /// cpu.stat usage (sum_exec_runtime) in ns.
    pub cpu_usage_ns: u64,
    /// Tasks of the exec still to end when these figures were taken: when not 0 (taken at the
    /// cgroup's removal while its last tasks were exiting), the last one takes them again.
    pub pending: u64,
    /// When these figures were taken (CLOCK_MONOTONIC). Taken again by a task that finished
    /// exiting after the removal, it ends the exec later than the removal does.
    pub ts_ns: u64,
}

const _: () = assert!(core::mem::size_of::<CgroupSlot>() == 32);
