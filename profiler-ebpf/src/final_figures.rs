//! The kernel's own totals of an exec's cgroup at its removal (PSI, memory, pids, cpu usage),
//! as its files would show them, and the per-CPU areas they need.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, generated as helper},
    macros::map,
    maps::Array,
};
use profiler_common::{
    ABSENT, DropReason, EV_EXEC_FINAL, ExecFinalEvent, FINAL_CPU, FINAL_CPU_UNKNOWN, FINAL_MEMORY,
    FINAL_PIDS, FINAL_PSI, FINAL_PSI_ACTIVE, MAX_CPUS, MEMCG_EVENTS, PSI_STATES,
};

use crate::{
    config::{FINAL, global},
    maps::{EVENTS, drop_count, wakeup_flag},
    read::{BpfIterTask, rd, rd_ptr},
};

/// Each CPU's per-cpu offset (__per_cpu_offset[cpu]), found by the percpu_discover iterator,
/// and the address of that CPU's runqueue it was found from (0: not found).
#[map]
pub(crate) static PERCPU_OFFSETS: Array<u64> = Array::with_max_entries(MAX_CPUS, 0);

#[map]
pub(crate) static PERCPU_RQ: Array<u64> = Array::with_max_entries(MAX_CPUS, 0);

/// CONFIG_HZ (PSI weighs CPUs by non-idle jiffies), set by userspace from the kernel's config
/// or measured with JIFFY_PROBE: (jiffies, ktime) at the last percpu_discover run.
#[map]
pub(crate) static HZ: Array<u64> = Array::with_max_entries(1, 0);

#[map]
pub(crate) static JIFFY_PROBE: Array<u64> = Array::with_max_entries(2, 0);

/// The kernel's own totals of a cgroup being removed, as its files would show them now:
/// PSI totals (replaying the aggregation a read of the pressure file does), memory peak and
/// events, pids peak, cpu usage (with the per-cpu parts not yet flushed).
#[inline(always)]
pub(crate) fn exec_final(cgrp: *const u8, id: u64, pending: u64) {
    let Some(mut slot) = EVENTS.reserve::<ExecFinalEvent>(0) else {
        drop_count(DropReason::RingBuf);
        return;
    };
    // SAFETY: the slot is ours until submitted; every field is written before submit.
    let ev = unsafe { &mut *slot.as_mut_ptr() };
    ev.kind = EV_EXEC_FINAL;
    ev.flags = 0;
    ev.cgroup_id = id;
    ev.psi_ns = [0; PSI_STATES];
    ev.memory_peak_pages = 0;
    ev.memory_events = [0; MEMCG_EVENTS];
    ev.pids_peak = 0;
    ev.cpu_usage_ns = 0;
    ev.pending = pending;
    // SAFETY: helper without arguments.
    ev.ts_ns = unsafe { bpf_ktime_get_ns() };

    // memory and pids: the controllers' css (first member of their structs) in cgroup.subsys[].
    let subsys = fin!(cgroup_subsys);
    let mem_id = fin!(memory_cgrp_id);
    if subsys != ABSENT && mem_id < 32 && fin!(memcg_watermark) != ABSENT {
        let memcg = rd_ptr(cgrp, subsys + 8 * mem_id);
        if !memcg.is_null() {
            ev.memory_peak_pages = rd(memcg, fin!(memcg_watermark));
            ev.memory_events = rd(memcg, fin!(memcg_events));
            ev.flags |= FINAL_MEMORY;
        }
    }
    let pids_id = fin!(pids_cgrp_id);
    if subsys != ABSENT && pids_id < 32 && fin!(pids_watermark) != ABSENT {
        let pids = rd_ptr(cgrp, subsys + 8 * pids_id);
        if !pids.is_null() {
            ev.pids_peak = rd(pids, fin!(pids_watermark));
            ev.flags |= FINAL_PIDS;
        }
    }

    // Per-cpu parts: PSI times not yet aggregated, cpu time not yet flushed.
    let psi = rd_ptr(cgrp, fin!(cgroup_psi));
    let pcpu = rd::<u64>(psi, fin!(psi_pcpu));
    let nr = fin!(nr_psi_states) as usize;
    let hz = HZ.get(0).copied().unwrap_or(0);
    let psi_ok = !psi.is_null() && pcpu != 0 && (2..=PSI_STATES).contains(&nr) && hz > 0;
    // Divisions go through checked_div: a panic path has no place in a BPF program.
    let jiffy_ns = 1_000_000_000u64.checked_div(hz).unwrap_or(1).max(1);
    // Not saturating_sub(): that costs 6 more instructions in sched_switch.
    #[allow(clippy::implicit_saturating_sub)]
    let nonidle_idx = if nr >= 1 { nr - 1 } else { 0 };
    let rstat = rd::<u64>(cgrp, fin!(cgroup_rstat_cpu));
    let cpu_ok = rstat != 0 && fin!(cgroup_bstat_sum) != ABSENT;
    // The weighted deltas are summed in the record itself (zeroed above), not in an array on
    // the stack: sched_switch, where this is inlined, must stay within 480 bytes of stack
    // (Linux 6.1 rounds each frame to 32 bytes and allows 512 for a program and its calls).
    let mut nonidle_total = 0u64;
    let mut pending_ns = 0u64;
    let nr_cpus = fin!(nr_cpus);
    for cpu in 0..MAX_CPUS {
        if cpu >= nr_cpus {
            break;
        }
        let off = match PERCPU_OFFSETS.get(cpu) {
            Some(&o) if o != 0 => o,
            _ => {
                if PERCPU_RQ.get(cpu).copied().unwrap_or(0) == 0 {
                    ev.flags |= FINAL_CPU_UNKNOWN;
                }
                continue;
            }
        };
        if psi_ok {
            let gc = pcpu.wrapping_add(off) as *const u8;
            let times: [u32; PSI_STATES] = rd(gc, fin!(psic_times));
            let prev: [u32; PSI_STATES] = rd(gc, fin!(psic_times_prev));
            if rd::<u32>(gc, fin!(psic_state_mask)) != 0 {
                ev.flags |= FINAL_PSI_ACTIVE;
            }
            // As collect_percpu_times(): each CPU weighs by its non-idle jiffies.
            let mut nonidle_ns = 0u32;
            for s in 0..PSI_STATES {
                if s == nonidle_idx {
                    nonidle_ns = times[s].wrapping_sub(prev[s]);
                }
            }
            let nonidle = (nonidle_ns as u64).checked_div(jiffy_ns).unwrap_or(0);
            nonidle_total += nonidle;
            for s in 0..PSI_STATES {
                if s < nonidle_idx {
                    ev.psi_ns[s] += times[s].wrapping_sub(prev[s]) as u64 * nonidle;
                }
            }
        }
        if cpu_ok {
            let rc = rstat.wrapping_add(off) as *const u8;
            let now = rd::<u64>(rc, fin!(rstatc_bstat_sum));
            let last = rd::<u64>(rc, fin!(rstatc_last_bstat_sum));
            pending_ns += now.wrapping_sub(last);
        }
    }
    if psi_ok {
        let total = psi.wrapping_add(fin!(psi_total) as usize);
        let div = nonidle_total.max(1);
        // An index loop, as the ones above: its bound is a constant the verifier sees.
        #[allow(clippy::needless_range_loop)]
        for s in 0..PSI_STATES {
            if s < nonidle_idx {
                let t: u64 = rd(total, 8 * s as u32);
                ev.psi_ns[s] = t + ev.psi_ns[s].checked_div(div).unwrap_or(0);
            }
        }
        ev.flags |= FINAL_PSI;
    }
    if cpu_ok {
        ev.cpu_usage_ns = rd::<u64>(cgrp, fin!(cgroup_bstat_sum)) + pending_ns;
        ev.flags |= FINAL_CPU;
    }
    slot.submit(wakeup_flag());
}

/// Find each CPU's per-cpu offset: a task's runqueue is the per-cpu `runqueues` of the CPU it
/// belongs to, and that CPU's `this_cpu_off` (next to it in the same per-cpu area) holds the
/// offset. Run once over all tasks by userspace, which checks the result.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub extern "C" fn percpu_discover(ctx: *mut c_void) -> i32 {
    let ctx = ctx as *const BpfIterTask;
    // SAFETY: the kernel passes a bpf_iter__task.
    let task = unsafe { (*ctx).task };
    if let (Some(j), Some(t)) = (JIFFY_PROBE.get_ptr_mut(0), JIFFY_PROBE.get_ptr_mut(1)) {
        // SAFETY: array slots; helpers without arguments.
        unsafe {
            *j = helper::bpf_jiffies64();
            *t = bpf_ktime_get_ns();
        }
    }
    if task.is_null() || fin!(task_se_cfs_rq) == ABSENT {
        return 0;
    }
    let rq = rd_ptr(rd_ptr(task, fin!(task_se_cfs_rq)), fin!(cfs_rq_rq));
    if rq.is_null() {
        return 0;
    }
    let cpu = rd::<i32>(rq, fin!(rq_cpu));
    if cpu < 0 || cpu as u32 >= MAX_CPUS {
        return 0;
    }
    let cpu = cpu as u32;
    if PERCPU_RQ.get(cpu).copied().unwrap_or(0) != 0 {
        return 0;
    }
    let tco = (rq as u64)
        .wrapping_sub(global(&FINAL.runqueues_secoff))
        .wrapping_add(global(&FINAL.this_cpu_off_secoff));
    let off = rd::<u64>(tco as *const u8, 0);
    if let (Some(o), Some(r)) = (PERCPU_OFFSETS.get_ptr_mut(cpu), PERCPU_RQ.get_ptr_mut(cpu)) {
        // SAFETY: array slots; the iterator runs on one CPU at a time for this map.
        unsafe {
            *o = off;
            *r = rq as u64;
        }
    }
    0
}
