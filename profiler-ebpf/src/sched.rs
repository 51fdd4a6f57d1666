//! IO wait, timed by the profiler from a task's switch-out with `in_iowait` to its wake-up;
//! the last switch of a dead task.

use core::ptr::read_volatile;

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::btf_tracepoint, programs::BtfTracePointContext};
use profiler_common::*;

use crate::{config::*, maps::*, read::*, task::*};

// IO wait: time a task of the subtree is blocked with in_iowait set (in io_schedule()), from
// its switch-out to its wake-up. The kernel's own figure (delay accounting's blkio_delay)
// stamps the start of such a wait on the wrong task when the scheduler delays a dequeue
// (Linux 6.12 and later), so it is measured here. The common path of both programs is one
// read of the task's in_iowait bit.

/// The task's in_iowait bit. `task` must be a tracepoint argument (a pointer the verifier
/// trusts): the byte is loaded directly, without a helper call, as this runs on every
/// context switch and wake-up.
#[inline(always)]
pub(crate) fn in_iowait(task: *const u8) -> bool {
    let off = off!(task_in_iowait_byte);
    if off == ABSENT {
        return false;
    }
    let mask = global(&OFFSETS.task_in_iowait_mask);
    // SAFETY: a BTF-typed task pointer; the verifier checks the load against the kernel's BTF.
    let byte = unsafe { read_volatile(task.wrapping_add(off as usize)) };
    byte as u32 & mask != 0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let preempt: u8 = ctx.arg(0);
    let prev: *const u8 = ctx.arg(1);
    let prev_state: u32 = ctx.arg(3);
    if prev_state & TASK_DEAD != 0 {
        let _ = task_end(prev);
    // A preempted task stays runnable whatever its state says: it is not blocking.
    } else if preempt == 0 && prev_state != 0 && in_iowait(prev) {
        let _ = iowait_block(prev);
    }
    0
}

/// `TASK_DEAD` in task_struct.__state (include/linux/sched.h, unchanged since 4.14).
pub(crate) const TASK_DEAD: u32 = 0x80;

#[inline(always)]
pub(crate) fn iowait_block(task: *const u8) -> Option<()> {
    entry_of(task_cgroup_id(task))?;
    let tid = ld::<u32>(task, off!(task_pid));
    let start = ld::<u64>(task, off!(task_start_time));
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(w) = IOWAITS.get_ptr_mut(&tid) {
        // SAFETY: the entry of a blocking task; only its own events touch it.
        let w = unsafe { &mut *w };
        if w.start_time_ns == start {
            // Still blocked from the last wait: its wake-up never reached the profiler.
            if w.blocked_ns != 0 {
                drop_count(DropReason::WakeupUnseen);
            }
            w.blocked_ns = now;
            return Some(());
        }
    }
    let w = IoWait {
        start_time_ns: start,
        blocked_ns: now,
        total_ns: 0,
        count: 0,
    };
    if IOWAITS.insert(&tid, &w, 0).is_err() {
        drop_count(DropReason::IowaitFull);
    }
    Some(())
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    // in_iowait is still set when the task is woken from io_schedule().
    if in_iowait(task) {
        let tid = ld::<u32>(task, off!(task_pid));
        if let Some(w) = IOWAITS.get_ptr_mut(&tid) {
            // SAFETY: the entry of the task being woken; only its own events touch it.
            let w = unsafe { &mut *w };
            if w.blocked_ns != 0 {
                // SAFETY: helper without arguments.
                w.total_ns += unsafe { bpf_ktime_get_ns() }.saturating_sub(w.blocked_ns);
                w.count += 1;
                w.blocked_ns = 0;
            }
        }
    }
    0
}
