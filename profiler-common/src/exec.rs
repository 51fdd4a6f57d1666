//! Execs: which exec each cgroup of the subtree belongs to, an exec's totals in the kernel, and
//! its cgroup's own figures read at its removal.

use crate::*;

/// Value of the cgroups map: which exec a cgroup of the subtree belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupEntry {
    pub exec_id: u64,
    /// Depth below the attached cgroup (0 for the attached cgroup itself).
    pub depth: u32,
    pub _pad: u32,
}

/// Per-exec totals kept by the kernel side (value of the execs map).
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
}
