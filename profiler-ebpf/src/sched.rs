//! IO wait, timed by the profiler in the scheduler's clock from a task's switch-out with
//! `in_iowait` to the moment it was queued again; the last switch of a dead task.

use core::ptr::read_volatile;

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use profiler_common::{ABSENT, DropReason, IoWait};

use crate::{
    config::{OFFSETS, global},
    maps::{IOWAITS, drop_count, entry_of},
    read::{ld, ld_ptr, task_cgroup_id},
    task::task_end,
};

// IO wait: time a task of the subtree is blocked with in_iowait set (in io_schedule()). The
// kernel's own figure (delay accounting's blkio_delay) stamps the start of such a wait on the
// wrong task when the scheduler delays a dequeue (Linux 6.12 and later), so it is measured
// here, by sched_switch alone: the switch-out stamps the runqueue's clock, and the switch-in
// (in_iowait stays set until the task runs again) ends the wait when the wake-up queued it,
// in the same clock. That is sched_info.last_queued, unless the queued task was moved to
// another CPU (idle balancing): the move charges its queued time so far to run_delay and
// queues it again, with a later last_queued. So both ends are read in the task's queue-free
// clock, the runqueue's clock less the task's run_delay so far, which stands still while the
// task is queued: the wait is counted up to its first queueing. The run-queue delay starts
// there, so the two tile without overlap, and no program runs on wake-ups (a completion's
// wake-up from interrupt context could also be skipped by BPF's recursion guard; a switch
// cannot). The common path is one read of each task's in_iowait bit.

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
    let next: *const u8 = ctx.arg(2);
    let prev_state: u32 = ctx.arg(3);
    if prev_state & TASK_DEAD != 0 {
        let _ = task_end(prev);
    // A preempted task stays runnable whatever its state says: it is not blocking.
    } else if preempt == 0 && prev_state != 0 && in_iowait(prev) {
        let _ = iowait_block(prev);
    }
    if in_iowait(next) {
        iowait_end(next);
    }
    0
}

/// The scheduler's clock (rq->clock, updated by __schedule just before the tracepoint) of the
/// runqueue a task is on: the clock of sched_info.last_queued.
#[inline(always)]
fn rq_clock(task: *const u8) -> u64 {
    ld::<u64>(
        ld_ptr(ld_ptr(task, off!(task_cfs_rq)), off!(cfs_rq_rq)),
        off!(rq_clock),
    )
}

/// `TASK_DEAD` in task_struct.__state (include/linux/sched.h, unchanged since 4.14).
pub(crate) const TASK_DEAD: u32 = 0x80;

#[inline(always)]
pub(crate) fn iowait_block(task: *const u8) -> Option<()> {
    entry_of(task_cgroup_id(task))?;
    let tid = ld::<u32>(task, off!(task_pid));
    let start = ld::<u64>(task, off!(task_start_time));
    let now = rq_clock(task).wrapping_sub(ld::<u64>(task, off!(task_run_delay)));
    if let Some(w) = IOWAITS.get_ptr_mut(&tid) {
        // SAFETY: the entry of a blocking task; only its own events touch it.
        let w = unsafe { &mut *w };
        if w.start_time_ns == start {
            // Still blocked from the last wait: its end never reached the profiler.
            if w.blocked_ns != 0 {
                drop_count(DropReason::IowaitEndUnseen);
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

/// A task switched in with in_iowait: its wait, if the profiler saw it begin, ended when the
/// wake-up queued it.
#[inline(always)]
fn iowait_end(task: *const u8) {
    let tid = ld::<u32>(task, off!(task_pid));
    if let Some(w) = IOWAITS.get_ptr_mut(&tid) {
        // SAFETY: the entry of the task being switched in; only its own events touch it.
        let w = unsafe { &mut *w };
        // A task preempted in io_schedule() before it blocked has no wait open.
        if w.blocked_ns != 0 {
            // sched_info_arrive() runs after this tracepoint: last_queued and run_delay do not
            // yet hold the queueing that ends now.
            let queued = ld::<u64>(task, off!(task_last_queued));
            if queued != 0 {
                let end = queued.wrapping_sub(ld::<u64>(task, off!(task_run_delay)));
                w.total_ns += end.saturating_sub(w.blocked_ns);
            }
            w.count += 1;
            w.blocked_ns = 0;
        }
    }
}
