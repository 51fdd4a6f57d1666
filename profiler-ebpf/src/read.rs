//! Reading the kernel's structures at the offsets userspace resolved from BTF: tasks'
//! counters and cgroups.

use core::{ffi::c_void, ptr::read_volatile};

use aya_ebpf::helpers::{bpf_ktime_get_ns, generated as helper};
use profiler_common::{
    ABSENT, COMM_LEN, TASK_LEADER, TASK_NO_DELAYS, TASK_PARTIAL, TaskCounters, TaskRecord,
};

use crate::maps::{BASELINES, IOWAITS};

/// Read a `T` at `base + off`; zero when the field is absent or the read fails (the helper
/// zeroes its destination on failure). Branch-free, which keeps the verifier's work small.
#[inline(always)]
pub(crate) fn rd<T: Copy + Default>(base: *const u8, off: u32) -> T {
    let mut v = T::default();
    if off != ABSENT {
        // SAFETY: bpf_probe_read_kernel copes with any source address.
        unsafe {
            helper::bpf_probe_read_kernel(
                &mut v as *mut T as *mut c_void,
                size_of::<T>() as u32,
                base.wrapping_add(off as usize) as *const c_void,
            )
        };
    }
    v
}

#[inline(always)]
pub(crate) fn rd_ptr(base: *const u8, off: u32) -> *const u8 {
    rd::<u64>(base, off) as *const u8
}

/// Load a scalar field of a BTF-typed kernel pointer (a tracepoint argument, or a pointer
/// field loaded from one with `ld_ptr`); zero when the field is absent. A plain load, which the
/// verifier checks against the kernel's BTF and makes fault-safe (a NULL or bad pointer reads
/// 0): a few instructions instead of a bpf_probe_read_kernel call, which costs tens of ns on
/// the hot paths. The offset must be a load-time constant (OFFSETS is frozen). A load must
/// lie within one field (a scalar array may be read in parts, see `comm_of`); fields read as
/// another type than BTF gives them (type-punned structs) go through `rd`.
#[inline(always)]
pub(crate) fn ld<T: Copy + Default>(base: *const u8, off: u32) -> T {
    if off == ABSENT {
        return T::default();
    }
    // SAFETY: a BTF-typed pointer; the verifier checks the access and handles faults.
    unsafe { read_volatile(base.wrapping_add(off as usize) as *const T) }
}

/// A pointer field of a BTF-typed pointer, itself BTF-typed (see `ld`).
#[inline(always)]
pub(crate) fn ld_ptr(base: *const u8, off: u32) -> *const u8 {
    if off == ABSENT {
        return core::ptr::null();
    }
    // SAFETY: as for `ld`.
    unsafe { read_volatile(base.wrapping_add(off as usize) as *const *const u8) }
}

/// The task's name (`task` BTF-typed): two 8-byte loads, which the verifier allows within the
/// char array, instead of a helper call (bpf_get_current_comm or a probe read).
#[inline(always)]
pub(crate) fn comm_of(task: *const u8) -> [u8; COMM_LEN] {
    let off = off!(task_comm);
    if off == ABSENT {
        return [0; COMM_LEN];
    }
    let lo = ld::<u64>(task, off);
    let hi = ld::<u64>(task, off.wrapping_add(8));
    let mut comm = [0u8; COMM_LEN];
    comm[..8].copy_from_slice(&lo.to_ne_bytes());
    comm[8..].copy_from_slice(&hi.to_ne_bytes());
    comm
}

/// The cgroup's id (0 when unreadable: no cgroup has id 0). `cgrp` is BTF-typed.
#[inline(always)]
pub(crate) fn cgroup_id(cgrp: *const u8) -> u64 {
    ld::<u64>(ld_ptr(cgrp, off!(cgroup_kn)), off!(kernfs_node_id))
}

/// True for cgroups of the v2 (default) hierarchy, whose hierarchy id is 0; the same
/// tracepoints fire for v1 hierarchies, whose ids live in another number space.
#[inline(always)]
pub(crate) fn on_v2(cgrp: *const u8) -> bool {
    let root = ld_ptr(cgrp, off!(cgroup_root));
    !root.is_null() && ld::<i32>(root, off!(cgroup_root_hierarchy_id)) == 0
}

/// The task's cgroup v2 directory (BTF-typed).
#[inline(always)]
pub(crate) fn task_dfl_cgroup(task: *const u8) -> *const u8 {
    ld_ptr(ld_ptr(task, off!(task_cgroups)), off!(css_set_dfl_cgrp))
}

/// The task's cgroup v2 id (`task` BTF-typed). Where the task is current, the same as
/// `bpf_get_current_cgroup_id` in four loads, without its call (~50 ns here).
#[inline(always)]
pub(crate) fn task_cgroup_id(task: *const u8) -> u64 {
    cgroup_id(task_dfl_cgroup(task))
}

/// The parent of a cgroup (BTF-typed).
#[inline(always)]
pub(crate) fn cgroup_parent(cgrp: *const u8) -> *const u8 {
    ld_ptr(ld_ptr(cgrp, off!(cgroup_parent_css)), off!(css_cgroup))
}

/// The task's cumulative counters (`task` BTF-typed). Returns false when the task has no
/// usable delay accounting. `iowait`: the task's IO-wait total and count (see `iowait_of`).
#[inline(always)]
pub(crate) fn read_counters(task: *const u8, c: &mut TaskCounters, iowait: (u64, u64)) -> bool {
    c.oncpu_ns = ld(task, off!(task_sum_exec_runtime));
    c.runq_ns = ld(task, off!(task_run_delay));
    c.runq_count = ld(task, off!(task_pcount));
    c.nvcsw = ld(task, off!(task_nvcsw));
    c.nivcsw = ld(task, off!(task_nivcsw));
    c.utime_ns = ld(task, off!(task_utime));
    c.stime_ns = ld(task, off!(task_stime));
    c.rchar = ld(task, off!(task_ioac_rchar));
    c.wchar = ld(task, off!(task_ioac_wchar));
    c.syscr = ld(task, off!(task_ioac_syscr));
    c.syscw = ld(task, off!(task_ioac_syscw));
    c.storage_read_bytes = ld(task, off!(task_ioac_read_bytes));
    c.dirtied_bytes = ld(task, off!(task_ioac_write_bytes));
    c.cancelled_write_bytes = ld(task, off!(task_ioac_cancelled_write_bytes));
    let start_time = ld::<u64>(task, off!(task_start_time));
    (c.iowait_ns, c.iowait_count) = iowait;
    let delays = ld_ptr(task, off!(task_delays));
    c.swapin_ns = ld(delays, off!(delays_swapin_delay));
    c.reclaim_ns = ld(delays, off!(delays_freepages_delay));
    c.thrashing_ns = ld(delays, off!(delays_thrashing_delay));
    // A task cannot have waited longer than it has lived. The kernel can end an IO wait
    // whose start it never recorded (seen on 6.18: blkio_delay jumps by the uptime); such a
    // task's delay figures are unusable.
    // SAFETY: helper without arguments.
    let life = unsafe { bpf_ktime_get_ns() }.wrapping_sub(start_time);
    c.life_ns = life;
    if delays.is_null()
        || c.iowait_ns > life
        || c.swapin_ns > life
        || c.reclaim_ns > life
        || c.thrashing_ns > life
    {
        clear_delays(c);
        return false;
    }
    true
}

/// The task's IO-wait total and count, and whether it has an IOWAITS entry at all (`task`
/// BTF-typed).
#[inline(always)]
pub(crate) fn iowait_of(task: *const u8, pid: u32) -> ((u64, u64), bool) {
    let start_time = ld::<u64>(task, off!(task_start_time));
    // SAFETY: plain data read within the program run.
    match unsafe { IOWAITS.get(&pid) } {
        Some(w) => {
            if w.start_time_ns == start_time {
                ((w.total_ns, w.count), true)
            } else {
                ((0, 0), true)
            }
        }
        None => ((0, 0), false),
    }
}

#[inline(always)]
pub(crate) fn clear_delays(c: &mut TaskCounters) {
    c.iowait_ns = 0;
    c.iowait_count = 0;
    c.swapin_ns = 0;
    c.reclaim_ns = 0;
    c.thrashing_ns = 0;
}

/// Fill `rec` with the task's identity and its counters minus any baseline (`task`
/// BTF-typed). Returns (a baseline applied, the task had an IOWAITS entry, it had a baseline
/// entry).
#[inline(always)]
pub(crate) fn fill_record(
    task: *const u8,
    exec_id: u64,
    kind: u32,
    rec: &mut TaskRecord,
) -> (bool, bool, bool) {
    rec.kind = kind;
    rec.exec_id = exec_id;
    rec.pid = ld::<u32>(task, off!(task_pid));
    rec.tgid = ld::<u32>(task, off!(task_tgid));
    rec.start_time_ns = ld(task, off!(task_start_time));
    rec.parent_tgid = ld::<u32>(ld_ptr(task, off!(task_real_parent)), off!(task_tgid));
    rec.exit_code = 0;
    rec.max_rss_pages = 0;
    rec.comm = comm_of(task);
    rec.flags = if rec.pid == rec.tgid { TASK_LEADER } else { 0 };
    let (iowait, had_iowait) = iowait_of(task, rec.pid);
    let delays_ok = read_counters(task, &mut rec.counters, iowait);
    // The clock read that gave its life (before any baseline is taken off).
    rec.read_ns = rec.start_time_ns.wrapping_add(rec.counters.life_ns);
    if !delays_ok {
        rec.flags |= TASK_NO_DELAYS;
    }
    // SAFETY: plain data copied out.
    let base = unsafe { BASELINES.get(&rec.pid) }.copied();
    let partial = match base {
        Some(b) if b.start_time_ns == rec.start_time_ns => {
            rec.counters = rec.counters.since(&b.counters);
            if !delays_ok {
                clear_delays(&mut rec.counters);
            }
            rec.flags |= TASK_PARTIAL;
            true
        }
        _ => false,
    };
    (partial, had_iowait, base.is_some())
}

/// The context of a task iterator program (`struct bpf_iter__task`), and its meta.
#[repr(C)]
pub(crate) struct BpfIterMeta {
    pub(crate) seq: *mut c_void,
    pub(crate) session_id: u64,
    pub(crate) seq_num: u64,
}

#[repr(C)]
pub(crate) struct BpfIterTask {
    pub(crate) meta: *const BpfIterMeta,
    pub(crate) task: *const u8,
}
