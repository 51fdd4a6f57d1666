//! The subtree's cgroups: `CGROUPS` and `EXECS` kept in step with creation and removal, and
//! tasks moving in.

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel_str_bytes},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use profiler_common::{
    CgroupEntry, CgroupEvent, DropReason, EV_CGROUP_CREATED, EV_CGROUP_REMOVED, EV_EXEC_CREATED,
    NAMED_PREFIX, NAMED_RULES, NO_SLOT, TASK_COUNTERS, TaskBaseline,
};

use crate::{
    config::{CONFIG, global},
    final_figures::exec_final,
    maps::{
        BASELINES, EVENTS, SCRATCH, add, drop_count, entry_of, exec_slot, insert_entry, stats_of,
        wakeup_flag,
    },
    read::{cgroup_id, cgroup_parent, iowait_of, ld, on_v2, read_counters},
};

// cgroup lifecycle: keep CGROUPS and EXECS in step with the subtree.

#[btf_tracepoint(function = "cgroup_mkdir")]
pub fn cgroup_mkdir(ctx: BtfTracePointContext) -> i32 {
    let cgrp: *const u8 = ctx.arg(0);
    let path: *const u8 = ctx.arg(1);
    let _ = try_cgroup_mkdir(cgrp, path);
    0
}

#[inline(always)]
pub(crate) fn try_cgroup_mkdir(cgrp: *const u8, path: *const u8) -> Option<()> {
    if !on_v2(cgrp) {
        return None;
    }
    let id = cgroup_id(cgrp);
    let parent_id = cgroup_id(cgroup_parent(cgrp));
    let (depth, exec_id, parent_slot) = match entry_of(parent_id) {
        Some(parent) => {
            let depth = parent.depth + 1;
            let exec_id = if depth <= global(&CONFIG.exec_depth) {
                id
            } else {
                parent.exec_id
            };
            (depth, exec_id, parent.slot)
        }
        // Outside the watched cgroups: an exec only if a rule picks it by name.
        None if named_exec(parent_id, path) => (1, id, NO_SLOT),
        None => return None,
    };
    let slot = if exec_id == id {
        let slot = exec_slot(id);
        if slot == NO_SLOT {
            drop_count(DropReason::ExecsFull);
            return None;
        }
        slot
    } else {
        parent_slot
    };
    let entry = CgroupEntry {
        exec_id,
        depth,
        slot,
    };
    if !insert_entry(id, &entry) {
        drop_count(DropReason::CgroupsFull);
        return None;
    }
    let kind = if exec_id == id {
        EV_EXEC_CREATED
    } else {
        EV_CGROUP_CREATED
    };
    emit_cgroup_event(kind, id, &entry, path);
    Some(())
}

/// Whether a rule of `CONFIG.named_*` picks the cgroup made in `parent_id` at `path` (its
/// path from the root). Runs at cgroup creation only; without rules the verifier drops it.
#[inline(always)]
fn named_exec(parent_id: u64, path: *const u8) -> bool {
    if path.is_null() {
        return false;
    }
    let mut name = [0u8; NAMED_PREFIX];
    let mut read = false;
    for r in 0..NAMED_RULES {
        let want = global(&CONFIG.named_parent_id[r]);
        if want == 0 || want != parent_id {
            continue;
        }
        if !read {
            // SAFETY: the tracepoint's path argument, a kernel string.
            if unsafe { bpf_probe_read_kernel_str_bytes(path, &mut name) }.is_err() {
                return false;
            }
            read = true;
        }
        let len = (global(&CONFIG.named_prefix_len[r]) as usize).min(NAMED_PREFIX);
        let mut same = true;
        for (i, c) in name.iter().enumerate() {
            if i < len && *c != global(&CONFIG.named_prefix[r][i]) {
                same = false;
                break;
            }
        }
        if same {
            return true;
        }
    }
    false
}

#[inline(always)]
pub(crate) fn emit_cgroup_event(kind: u32, id: u64, entry: &CgroupEntry, path: *const u8) {
    let Some(mut slot) = EVENTS.reserve::<CgroupEvent>(0) else {
        drop_count(DropReason::RingBuf);
        return;
    };
    let ev = slot.as_mut_ptr();
    // SAFETY: the slot is ours until submitted; every field is written before submit.
    unsafe {
        (*ev).kind = kind;
        (*ev).depth = entry.depth;
        (*ev).ts_ns = bpf_ktime_get_ns();
        (*ev).cgroup_id = id;
        (*ev).exec_id = entry.exec_id;
        (*ev).path[0] = 0;
        if !path.is_null() {
            let _ = bpf_probe_read_kernel_str_bytes(path, &mut (*ev).path);
        }
    }
    // A new exec wakes the reader (a few microseconds, once per exec): its container's
    // metadata is read while the container exists. Other records wait for the reader's timer.
    slot.submit(if kind == EV_EXEC_CREATED {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        wakeup_flag()
    });
}

#[btf_tracepoint(function = "cgroup_rmdir")]
pub fn cgroup_rmdir(ctx: BtfTracePointContext) -> i32 {
    let cgrp: *const u8 = ctx.arg(0);
    let path: *const u8 = ctx.arg(1);
    if on_v2(cgrp) {
        let id = cgroup_id(cgrp);
        if let Some(entry) = entry_of(id) {
            if entry.exec_id == id {
                let pending = match stats_of(entry.slot) {
                    Some(st) => {
                        st.removed = 1;
                        st.pending
                    }
                    None => 0,
                };
                exec_final(cgrp, id, pending);
            }
            // The mapping stays: tasks that died in the cgroup are still to be collected.
            emit_cgroup_event(EV_CGROUP_REMOVED, id, &entry, path);
        }
    }
    0
}

/// A task moved into (or within) the subtree keeps its counters from before the move out of
/// its new exec: take a baseline. If it already had one, charge the time since to the exec it
/// leaves.
#[btf_tracepoint(function = "cgroup_attach_task")]
pub fn cgroup_attach_task(ctx: BtfTracePointContext) -> i32 {
    let dst: *const u8 = ctx.arg(0);
    let task: *const u8 = ctx.arg(2);
    let _ = try_attach_task(dst, task);
    0
}

#[inline(always)]
pub(crate) fn try_attach_task(dst: *const u8, task: *const u8) -> Option<()> {
    if !on_v2(dst) {
        return None;
    }
    let dst_entry = entry_of(cgroup_id(dst));
    let pid = ld::<u32>(task, off!(task_pid));
    let start = ld::<u64>(task, off!(task_start_time));
    let rec = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch, used only within this program run.
    let rec = unsafe { &mut *rec };
    read_counters(task, &mut rec.counters, iowait_of(task, pid).0);
    // SAFETY: plain data copied out.
    if let Some(old) = unsafe { BASELINES.get(&pid) }.copied()
        && old.start_time_ns == start
        && Some(old.exec_id) != dst_entry.map(|e| e.exec_id)
    {
        let old_slot = entry_of(old.exec_id).map_or(NO_SLOT, |e| e.slot);
        if let Some(stats) = stats_of(old_slot) {
            let moved = rec.counters.since(&old.counters);
            let m = moved.as_array();
            let ended = stats.ended.as_array_mut();
            for i in 0..TASK_COUNTERS {
                add(&mut ended[i], m[i]);
            }
        }
    }
    match dst_entry {
        Some(e) => {
            let b = TaskBaseline {
                start_time_ns: start,
                exec_id: e.exec_id,
                counters: rec.counters,
            };
            if BASELINES.insert(&pid, &b, 0).is_err() {
                drop_count(DropReason::BaselinesFull);
            }
        }
        None => {
            let _ = BASELINES.remove(&pid);
        }
    }
    Some(())
}
