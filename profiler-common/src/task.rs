//! Tasks: the kernel's per-task counters, baselines of tasks that came under the profiler
//! running, IO waits, and task records.

use crate::*;

/// Number of u64 counters in [`TaskCounters`].
pub const TASK_COUNTERS: usize = 20;

/// The kernel's own per-task counters, read from task_struct. Cumulative since the task started.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskCounters {
    /// se.sum_exec_runtime: time on a CPU.
    pub oncpu_ns: u64,
    /// sched_info.run_delay: time runnable, waiting for a CPU.
    pub runq_ns: u64,
    /// sched_info.pcount: times the task was put on a CPU.
    pub runq_count: u64,
    /// Time blocked waiting for IO (uninterruptible sleep with in_iowait), until the wake-up.
    pub iowait_ns: u64,
    pub iowait_count: u64,
    /// delays->swapin_delay, freepages_delay, thrashing_delay: memory stalls.
    pub swapin_ns: u64,
    pub reclaim_ns: u64,
    pub thrashing_ns: u64,
    pub nvcsw: u64,
    pub nivcsw: u64,
    /// ioac: bytes and calls of read/write syscalls (page-cache hits included).
    pub rchar: u64,
    pub wchar: u64,
    pub syscr: u64,
    pub syscw: u64,
    /// ioac.read_bytes: bytes this task caused to be read from storage.
    pub storage_read_bytes: u64,
    /// ioac.write_bytes: bytes of page cache this task dirtied (or wrote directly).
    pub dirtied_bytes: u64,
    /// ioac.cancelled_write_bytes: dirtied bytes later truncated before writeback.
    pub cancelled_write_bytes: u64,
    /// utime, stime: user and system time sampled at ticks; only their ratio is used, to
    /// split the exact on-CPU time (as the kernel does for /proc and cpu.stat).
    pub utime_ns: u64,
    pub stime_ns: u64,
    /// Time the task has lived (ktime now - start_time): its share of the exec's task time,
    /// the whole that on-CPU, run-queue and IO-wait are parts of. Less a baseline's, from a
    /// move into the exec.
    pub life_ns: u64,
}

impl TaskCounters {
    pub fn as_array(&self) -> &[u64; TASK_COUNTERS] {
        // SAFETY: repr(C) struct of exactly TASK_COUNTERS u64 fields (checked below).
        unsafe { &*(self as *const Self as *const [u64; TASK_COUNTERS]) }
    }

    pub fn as_array_mut(&mut self) -> &mut [u64; TASK_COUNTERS] {
        // SAFETY: as above.
        unsafe { &mut *(self as *mut Self as *mut [u64; TASK_COUNTERS]) }
    }

    /// Counters accrued since `base`, a reading of the same task's counters, which never
    /// decrease. Wrapping, not saturating: branch-free keeps the BPF verifier's work small.
    pub fn since(&self, base: &TaskCounters) -> TaskCounters {
        let mut out = *self;
        let b = base.as_array();
        for (i, v) in out.as_array_mut().iter_mut().enumerate() {
            *v = v.wrapping_sub(b[i]);
        }
        out
    }

    pub fn add(&mut self, other: &TaskCounters) {
        let o = other.as_array();
        for (i, v) in self.as_array_mut().iter_mut().enumerate() {
            *v = v.wrapping_add(o[i]);
        }
    }
}

const _: () = assert!(core::mem::size_of::<TaskCounters>() == 8 * TASK_COUNTERS);

/// Per-task baseline: the task's counters when it came under the profiler while already
/// running (at attach, or when it was moved into the subtree).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskBaseline {
    /// task_struct.start_time of the task the baseline belongs to (guards against pid reuse).
    pub start_time_ns: u64,
    pub exec_id: u64,
    pub counters: TaskCounters,
}

/// A task's IO waits (key: tid): time blocked with `in_iowait` set, from the switch-out to
/// the wake-up. Measured here because the kernel's own delay accounting of these waits
/// (blkio_delay) is unreliable since Linux 6.12 (docs/figures.md, "IO-wait").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoWait {
    /// task_struct.start_time of the task the entry belongs to (guards against pid reuse).
    pub start_time_ns: u64,
    /// When the current wait began, in the task's queue-free clock: the runqueue's clock less
    /// the task's run-queue delay so far (`sched_info.run_delay`). 0: not waiting.
    pub blocked_ns: u64,
    pub total_ns: u64,
    pub count: u64,
}

/// Flags of [`TaskRecord::flags`]. TASK_NO_DELAYS: no usable delay accounting (memory stalls).
pub const TASK_LEADER: u32 = 1;
pub const TASK_NO_DELAYS: u32 = 2;
pub const TASK_PARTIAL: u32 = 4;
/// The process was chosen by the OOM killer (its signal_struct's oom_mm is set).
pub const TASK_OOM_VICTIM: u32 = 8;

/// A task's counters: final when it ended (EV_TASK_END, ring buffer), or live (EV_TASK_SNAPSHOT,
/// task iterator). Counters already have the baseline taken off.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskRecord {
    pub kind: u32,
    pub pid: u32,
    pub tgid: u32,
    pub flags: u32,
    pub exec_id: u64,
    pub start_time_ns: u64,
    /// The process's parent (real_parent's tgid) when the record was made: a process that
    /// never called execve runs its parent's program.
    pub parent_tgid: u32,
    /// The wait status the parent gets (task_struct.exit_code: the code << 8, or the signal
    /// that killed it, | 0x80 when it dumped core). Set in the record of an ended leader.
    pub exit_code: u32,
    pub comm: [u8; COMM_LEN],
    pub counters: TaskCounters,
    /// The process's peak resident set in pages (signal_struct.maxrss, as getrusage's
    /// ru_maxrss). Set in the record of an ended leader.
    pub max_rss_pages: u64,
    /// When the counters were read (CLOCK_MONOTONIC): for an ended task, its end.
    pub read_ns: u64,
}
