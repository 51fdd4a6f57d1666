//! Task lifecycle: fork, execve, exit and the last switch of a dead task (when its counters
//! are final), and the task iterator that reads running tasks' counters for userspace.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_ktime_get_ns, bpf_probe_read_user_buf, generated as helper},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use profiler_common::{
    ARGS_LEN, DropReason, EARLY_PROGRAMS, ENV_LEN, EV_PROC_ENV, EV_PROC_EXEC, EV_TASK_END,
    EV_TASK_SNAPSHOT, PROC_ENV_HEADER, ProcEnvEvent, ProcExecEvent, TASK_COUNTERS, TASK_LEADER,
    TASK_NO_DELAYS, TASK_OOM_VICTIM, TaskRecord,
};

use crate::{
    config::global,
    final_figures::exec_final,
    maps::{
        BASELINES, ENV_SCRATCH, EVENTS, IOWAITS, SCRATCH, add, drop_count, emit, entry_of,
        stats_of, wakeup_flag,
    },
    net::note_netns,
    read::{
        BpfIterTask, cgroup_id, cgroup_parent, comm_of, fill_record, ld, ld_ptr, task_cgroup_id,
        task_dfl_cgroup,
    },
};

// Task lifecycle.

#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    let child: *const u8 = ctx.arg(1);
    let _ = try_fork(child);
    0
}

/// Counted only: the child's parent is in its exec and end records, which costs less than a
/// record per fork (a ring record was ~40% of this program's time).
#[inline(always)]
pub(crate) fn try_fork(child: *const u8) -> Option<()> {
    // The child's own cgroup: clone3(CLONE_INTO_CGROUP) may start it outside its parent's.
    let entry = entry_of(task_cgroup_id(child))?;
    let stats = stats_of(entry.slot)?;
    let pid = ld::<u32>(child, off!(task_pid));
    let tgid = ld::<u32>(child, off!(task_tgid));
    if pid == tgid {
        add(&mut stats.procs_started, 1);
    } else {
        add(&mut stats.threads_started, 1);
    }
    Some(())
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    let _ = try_exec(task);
    0
}

#[inline(always)]
pub(crate) fn try_exec(task: *const u8) -> Option<()> {
    let entry = entry_of(task_cgroup_id(task))?;
    let stats = stats_of(entry.slot)?;
    add(&mut stats.execve, 1);
    // An exec's first programs wake the reader, which reads their environment (CI step,
    // trace context) while they run; a runtime's own init may come first, twice.
    let early = global(&stats.execve) <= EARLY_PROGRAMS;
    // A container's first program is executed after its runtime joined the exec's network
    // namespace: this is where the namespace becomes the exec's.
    note_netns(task, entry.exec_id);
    if early {
        // Before the exec record, which wakes the reader: both arrive in one read.
        send_env(task, entry.exec_id);
    }
    let Some(mut slot) = EVENTS.reserve::<ProcExecEvent>(0) else {
        drop_count(DropReason::RingBuf);
        return None;
    };
    let ev = slot.as_mut_ptr();
    // SAFETY: the slot is ours until submitted; every field is written before submit.
    unsafe {
        (*ev).kind = EV_PROC_EXEC;
        (*ev).tgid = ld::<u32>(task, off!(task_tgid));
        (*ev)._pad = 0;
        (*ev).exec_id = entry.exec_id;
        // Already the new program's name (set before this tracepoint fires).
        (*ev).comm = comm_of(task);
        (*ev).args_len = 0;
        // Only an exec's first programs can be its main one, whose start the phases need: the
        // clock read costs ~250 ns on a virtual machine whose TSC reads trap.
        (*ev).ts_ns = if early { bpf_ktime_get_ns() } else { 0 };
        // The new program's argv, from its stack (set up before this tracepoint fires).
        let mm = ld_ptr(task, off!(task_mm));
        let start = ld::<u64>(mm, off!(mm_arg_start));
        let end = ld::<u64>(mm, off!(mm_arg_end));
        let mut len = end.saturating_sub(start) as usize;
        if len > ARGS_LEN {
            len = ARGS_LEN;
        }
        if start != 0 && len > 0 {
            let buf = &mut (*ev).args;
            if len <= buf.len()
                && bpf_probe_read_user_buf(start as *const u8, &mut buf[..len]).is_ok()
            {
                (*ev).args_len = len as u32;
            }
        }
    }
    slot.submit(if early {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        wakeup_flag()
    });
    Some(())
}

/// The environment block of a program just started (`task` BTF-typed): on its new stack, set
/// up before sched_process_exec fires. At most ENV_LEN bytes; userspace reads /proc for the
/// rest of a longer one while the program runs.
#[inline(always)]
fn send_env(task: *const u8, exec_id: u64) {
    let Some(ev) = ENV_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used only within this program run.
    let ev = unsafe { &mut *ev };
    let h = &mut ev.header;
    h.kind = EV_PROC_ENV;
    h.tgid = ld::<u32>(task, off!(task_tgid));
    h.exec_id = exec_id;
    let mm = ld_ptr(task, off!(task_mm));
    let start = ld::<u64>(mm, off!(mm_env_start));
    let full = ld::<u64>(mm, off!(mm_env_end)).saturating_sub(start);
    h.full_len = full.min(u32::MAX as u64) as u32;
    let mut len = full as usize;
    if len > ENV_LEN {
        len = ENV_LEN;
    }
    if start != 0
        && len > 0
        && len <= ev.env.len()
        // SAFETY: a user address of this task; the helper checks it.
        && unsafe { bpf_probe_read_user_buf(start as *const u8, &mut ev.env[..len]) }.is_ok()
    {
        ev.header.len = len as u32;
    } else {
        ev.header.full_len = 0;
        ev.header.len = 0;
        len = 0;
    }
    // From the local, bounded above: the verifier does not follow a value through memory.
    let n = PROC_ENV_HEADER + len;
    // SAFETY: the first n bytes of the scratch record, n <= its size.
    let bytes = unsafe { core::slice::from_raw_parts(ev as *const ProcEnvEvent as *const u8, n) };
    if EVENTS
        .output::<[u8]>(bytes, BPF_RB_NO_WAKEUP as u64)
        .is_err()
    {
        drop_count(DropReason::RingBuf);
    }
}

#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    if let Some(entry) = entry_of(task_cgroup_id(task))
        && let Some(stats) = stats_of(entry.slot)
    {
        add(&mut stats.task_exits, 1);
        // Until its last context switch, the task's final counters are still to come.
        add(&mut stats.pending, 1);
    }
    0
}

/// The task is dead and switches out for the last time: its counters are final (the
/// scheduler has just charged its last run). Charge them to its exec and report the task.
/// Not later, at sched_process_free: that waits for the reaper and an RCU grace period, which
/// was seen to take more than 2 s.
#[inline(always)]
pub(crate) fn task_end(task: *const u8) -> Option<()> {
    let entry = entry_of(task_cgroup_id(task))?;
    let rec = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch, used only within this program run.
    let rec = unsafe { &mut *rec };
    let (partial, had_iowait, had_baseline) = fill_record(task, entry.exec_id, EV_TASK_END, rec);
    // A delete takes the bucket lock even for a missing key: only when there is an entry.
    if had_baseline {
        let _ = BASELINES.remove(&rec.pid);
    }
    if had_iowait {
        let _ = IOWAITS.remove(&rec.pid);
    }
    let stats = stats_of(entry.slot)?;
    let c = rec.counters.as_array();
    let ended = stats.ended.as_array_mut();
    for i in 0..TASK_COUNTERS {
        add(&mut ended[i], c[i]);
    }
    add(&mut stats.pending, u64::MAX); // wrapping -1
    // (The atomic add's result cannot be used on the generic BPF CPU: read the count back. Two
    // tasks ending together may both see 0 and both take the figures: harmless.)
    if global(&stats.pending) == 0 && stats.removed != 0 {
        // The exec's cgroup went away while this task was still exiting: take its final
        // figures again, now that its last task has been charged.
        let mut cgrp = task_dfl_cgroup(task);
        for _ in 0..8 {
            if cgroup_id(cgrp) == entry.exec_id {
                break;
            }
            cgrp = cgroup_parent(cgrp);
        }
        if cgroup_id(cgrp) == entry.exec_id {
            exec_final(cgrp, entry.exec_id, 0);
        }
    }
    if rec.flags & TASK_LEADER != 0 {
        add(&mut stats.proc_exits, 1);
        // How the process ended, as its parent's wait sees it, and its peak memory.
        rec.exit_code = ld(task, off!(task_exit_code));
        let signal = ld_ptr(task, off!(task_signal));
        if !signal.is_null() {
            rec.max_rss_pages = ld(signal, off!(signal_maxrss));
            if !ld_ptr(signal, off!(signal_oom_mm)).is_null() {
                rec.flags |= TASK_OOM_VICTIM;
            }
        }
    }
    if rec.flags & TASK_NO_DELAYS != 0 {
        add(&mut stats.tasks_without_delays, 1);
    }
    if partial {
        add(&mut stats.tasks_partial, 1);
    }
    emit(rec);
    Some(())
}

// Task iterator: live counters of every task in the subtree, read by userspace on demand.

#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub extern "C" fn task_snapshot(ctx: *mut c_void) -> i32 {
    let ctx = ctx as *const BpfIterTask;
    // SAFETY: the kernel passes a bpf_iter__task; direct loads keep the verifier's pointer types.
    let (meta, task) = unsafe { ((*ctx).meta, (*ctx).task) };
    if task.is_null() {
        return 0;
    }
    // Tasks that have exited are counted when they switch out for the last time.
    if ld::<i32>(task, off!(task_exit_state)) != 0 {
        return 0;
    }
    let Some(entry) = entry_of(task_cgroup_id(task)) else {
        return 0;
    };
    note_netns(task, entry.exec_id);
    let Some(rec) = SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: per-CPU scratch, used only within this program run.
    let rec = unsafe { &mut *rec };
    fill_record(task, entry.exec_id, EV_TASK_SNAPSHOT, rec);
    // SAFETY: seq is the iterator's seq_file; rec is a valid buffer of the given size.
    unsafe {
        let seq = (*meta).seq;
        helper::bpf_seq_write(
            seq as _,
            rec as *const TaskRecord as *const c_void,
            size_of::<TaskRecord>() as u32,
        );
    }
    0
}
