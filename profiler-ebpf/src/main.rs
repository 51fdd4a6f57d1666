//! Kernel side of the profiler.
//!
//! Data flow: cgroup lifecycle tracepoints keep `CGROUPS` (cgroup id -> exec) and `EXECS`
//! (exec id -> totals) in step with the watched subtree. CPU, run-queue, memory-stall, syscall
//! IO and context-switch figures are the kernel's own per-task counters, collected once per
//! task at its last context switch (when it dies): exact. IO-wait is timed from switch-out to
//! wake-up. Block requests are counted once each, at their first issue, and charged to the exec
//! that caused them. Lifecycle records go to a ring buffer without wake-ups; userspace drains it
//! on a timer.
#![no_std]
#![no_main]
// The BPF target has no atomic compare-and-swap, so core's AtomicU64 lacks fetch_add; the
// intrinsic lowers to the BPF atomic add instruction.
#![allow(internal_features)]
#![feature(core_intrinsics)]

use core::{
    ffi::c_void,
    intrinsics::{AtomicOrdering, atomic_xadd},
    ptr::read_volatile,
};

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_cgroup_id, bpf_ktime_get_ns, bpf_probe_read_kernel_str_bytes,
        bpf_probe_read_user_buf, generated as helper,
    },
    macros::{btf_tracepoint, cgroup_skb, map},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{BtfTracePointContext, SkBuffContext},
};
use profiler_common::*;

// ---------------------------------------------------------------------------------------------
// Load-time globals (set by userspace; read-only, so the verifier prunes unused branches).

#[unsafe(no_mangle)]
static OFFSETS: KernelOffsets = KernelOffsets::ABSENT;

#[unsafe(no_mangle)]
static CONFIG: Config = Config {
    base_cgroup_id: 0,
    exec_depth: 1,
    blkcg_attribution: 0,
    block_getrq_fallback: 0,
    host_netns_inum: 0,
};

#[unsafe(no_mangle)]
static FINAL: FinalOffsets = FinalOffsets::ABSENT;

#[unsafe(no_mangle)]
static NET: NetOffsets = NetOffsets::ABSENT;

/// Bit of REQ_PREFLUSH in a request's cmd_flags (from the kernel's `enum req_flag_bits`).
#[unsafe(no_mangle)]
static REQ_PREFLUSH_BIT: u32 = 18;

/// A field of OFFSETS. Read volatile so the compiler cannot fold the default in; the
/// verifier knows the loaded value (the global is frozen), so untaken branches cost nothing.
macro_rules! off {
    ($f:ident) => {
        global(&OFFSETS.$f)
    };
}

macro_rules! net_off {
    ($f:ident) => {
        global(&NET.$f)
    };
}

#[inline(always)]
fn global<T: Copy>(v: &T) -> T {
    // SAFETY: plain read of a global.
    unsafe { read_volatile(v) }
}

// ---------------------------------------------------------------------------------------------
// Maps. Sizes are defaults; userspace may change them before load.

/// Every cgroup of the watched subtree -> its exec.
#[map]
static CGROUPS: HashMap<u64, CgroupEntry> = HashMap::with_max_entries(16384, 0);

/// Exec id -> totals.
#[map]
static EXECS: HashMap<u64, ExecStats> = HashMap::with_max_entries(4096, 0);

/// Tid -> counters at the moment the task came under the profiler while already running.
#[map]
static BASELINES: HashMap<u32, TaskBaseline> = HashMap::with_max_entries(16384, 0);

/// Request pointer -> exec and issue time, from request start to completion. A plain hash:
/// an LRU hash was seen to evict live entries long before it was full (inserts and deletes
/// happen on different CPUs), losing a request's bytes. Entries of requests whose completion
/// is never seen are replaced when the request pointer is reused, or removed by userspace after
/// a minute (start_ns).
#[map]
static INFLIGHT: HashMap<u64, Inflight> = HashMap::with_max_entries(16384, 0);

/// Tid -> IO waits of tasks of the subtree that have waited on IO.
#[map]
static IOWAITS: HashMap<u32, IoWait> = HashMap::with_max_entries(32768, 0);

/// Bio pointer -> its origin, from block_getrq to the first issue of its request (kernels
/// before 6.5, which lack block_io_start).
#[map]
static BIO_ORIGIN: HashMap<u64, Inflight> = HashMap::with_max_entries(16384, 0);

/// Each CPU's per-cpu offset (__per_cpu_offset[cpu]), found by the percpu_discover iterator,
/// and the address of that CPU's runqueue it was found from (0: not found).
#[map]
static PERCPU_OFFSETS: Array<u64> = Array::with_max_entries(MAX_CPUS, 0);
#[map]
static PERCPU_RQ: Array<u64> = Array::with_max_entries(MAX_CPUS, 0);

/// CONFIG_HZ (PSI weighs CPUs by non-idle jiffies), set by userspace from the kernel's config
/// or measured with JIFFY_PROBE: (jiffies, ktime) at the last percpu_discover run.
#[map]
static HZ: Array<u64> = Array::with_max_entries(1, 0);
#[map]
static JIFFY_PROBE: Array<u64> = Array::with_max_entries(2, 0);

/// Lifecycle records to userspace. The reader maps the data twice (a ring wraps around), and
/// every page counts in its RSS: 1 MiB holds ~4,000 records (a process's fork, execve and end
/// take ~500 bytes), the reader drains every 100 ms and is woken at a quarter full.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);
const RING_BYTES: u32 = 1 << 20;

/// Counters of records or entries that could not be stored (see DROP_* in profiler-common).
#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_COUNTERS, 0);

/// Zeroed ExecStats to insert from (too big for the 512-byte BPF stack). Never written.
#[map]
static ZERO_STATS: PerCpuArray<ExecStats> = PerCpuArray::with_max_entries(1, 0);

/// Network namespaces of the execs (key: `struct net` address), other than the host's.
#[map]
static NETNS: HashMap<u64, NetnsEntry> = HashMap::with_max_entries(4096, 0);

/// Interface traffic of the execs' own network namespaces.
#[map]
static IFACES: HashMap<IfaceKey, IfaceTraffic> = HashMap::with_max_entries(16384, 0);

/// Per-CPU scratch record for building a TaskRecord off the stack.
#[map]
static SCRATCH: PerCpuArray<TaskRecord> = PerCpuArray::with_max_entries(1, 0);

// ---------------------------------------------------------------------------------------------
// Helpers.

#[inline(always)]
fn drop_count(idx: u32) {
    if let Some(p) = DROPS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}

/// Read a `T` at `base + off`; zero when the field is absent or the read fails (the helper
/// zeroes its destination on failure). Branch-free, which keeps the verifier's work small.
#[inline(always)]
fn rd<T: Copy + Default>(base: *const u8, off: u32) -> T {
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
fn rd_ptr(base: *const u8, off: u32) -> *const u8 {
    rd::<u64>(base, off) as *const u8
}

/// Load a scalar field of a BTF-typed kernel pointer (a tracepoint argument, or a pointer
/// field loaded from one with `ld_ptr`); zero when the field is absent. A plain load, which the
/// verifier checks against the kernel's BTF and makes fault-safe (a NULL or bad pointer reads
/// 0): a few instructions instead of a bpf_probe_read_kernel call, which costs tens of ns on
/// the hot paths. The offset must be a load-time constant (OFFSETS is frozen). Fields whose
/// BTF type differs from what is read (arrays, type-punned structs) go through `rd`.
#[inline(always)]
fn ld<T: Copy + Default>(base: *const u8, off: u32) -> T {
    if off == ABSENT {
        return T::default();
    }
    // SAFETY: a BTF-typed pointer; the verifier checks the access and handles faults.
    unsafe { read_volatile(base.wrapping_add(off as usize) as *const T) }
}

/// A pointer field of a BTF-typed pointer, itself BTF-typed (see `ld`).
#[inline(always)]
fn ld_ptr(base: *const u8, off: u32) -> *const u8 {
    if off == ABSENT {
        return core::ptr::null();
    }
    // SAFETY: as for `ld`.
    unsafe { read_volatile(base.wrapping_add(off as usize) as *const *const u8) }
}

#[inline(always)]
fn add(field: &mut u64, v: u64) {
    // SAFETY: the field lives in a map value shared between CPUs; an atomic add is the only
    // access other than userspace reads.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(field, v) };
}

/// The cgroup's id (0 when unreadable: no cgroup has id 0). `cgrp` is BTF-typed.
#[inline(always)]
fn cgroup_id(cgrp: *const u8) -> u64 {
    ld::<u64>(ld_ptr(cgrp, off!(cgroup_kn)), off!(kernfs_node_id))
}

/// True for cgroups of the v2 (default) hierarchy, whose hierarchy id is 0; the same
/// tracepoints fire for v1 hierarchies, whose ids live in another number space.
#[inline(always)]
fn on_v2(cgrp: *const u8) -> bool {
    let root = ld_ptr(cgrp, off!(cgroup_root));
    !root.is_null() && ld::<i32>(root, off!(cgroup_root_hierarchy_id)) == 0
}

/// The task's cgroup v2 directory (BTF-typed).
#[inline(always)]
fn task_dfl_cgroup(task: *const u8) -> *const u8 {
    ld_ptr(ld_ptr(task, off!(task_cgroups)), off!(css_set_dfl_cgrp))
}

#[inline(always)]
fn task_cgroup_id(task: *const u8) -> u64 {
    cgroup_id(task_dfl_cgroup(task))
}

/// The parent of a cgroup (BTF-typed).
#[inline(always)]
fn cgroup_parent(cgrp: *const u8) -> *const u8 {
    ld_ptr(ld_ptr(cgrp, off!(cgroup_parent_css)), off!(css_cgroup))
}

#[inline(always)]
fn entry_of(cgroup_id: u64) -> Option<CgroupEntry> {
    // SAFETY: entries are plain data, copied out.
    unsafe { CGROUPS.get(&cgroup_id) }.copied()
}

#[inline(always)]
fn stats_of(exec_id: u64) -> Option<&'static mut ExecStats> {
    match EXECS.get_ptr_mut(&exec_id) {
        // SAFETY: map values stay valid for the program's run; fields are updated atomically.
        Some(p) => Some(unsafe { &mut *p }),
        None => {
            drop_count(DROP_EXEC_MISSING);
            None
        }
    }
}

/// The task's cumulative counters (`task` BTF-typed). Returns false when the task has no
/// usable delay accounting. `iowait`: the task's IO-wait total and count (see `iowait_of`).
#[inline(always)]
fn read_counters(task: *const u8, c: &mut TaskCounters, iowait: (u64, u64)) -> bool {
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
fn iowait_of(task: *const u8, pid: u32) -> ((u64, u64), bool) {
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
fn clear_delays(c: &mut TaskCounters) {
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
fn fill_record(
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
    rec.comm = rd(task, off!(task_comm));
    rec.flags = if rec.pid == rec.tgid { TASK_LEADER } else { 0 };
    let (iowait, had_iowait) = iowait_of(task, rec.pid);
    let delays_ok = read_counters(task, &mut rec.counters, iowait);
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

/// Wake the reader only when the buffer is filling up; otherwise it drains on its timer.
#[inline(always)]
fn wakeup_flag() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA as u64) > (RING_BYTES / 4) as u64 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

fn emit<T>(ev: &T) {
    if EVENTS.output::<T>(ev, wakeup_flag()).is_err() {
        drop_count(DROP_RINGBUF);
    }
}

// ---------------------------------------------------------------------------------------------
// cgroup lifecycle: keep CGROUPS and EXECS in step with the subtree.

#[btf_tracepoint(function = "cgroup_mkdir")]
pub fn cgroup_mkdir(ctx: BtfTracePointContext) -> i32 {
    let cgrp: *const u8 = ctx.arg(0);
    let path: *const u8 = ctx.arg(1);
    let _ = try_cgroup_mkdir(cgrp, path);
    0
}

#[inline(always)]
fn try_cgroup_mkdir(cgrp: *const u8, path: *const u8) -> Option<()> {
    if !on_v2(cgrp) {
        return None;
    }
    let id = cgroup_id(cgrp);
    let parent = entry_of(cgroup_id(cgroup_parent(cgrp)))?;
    let depth = parent.depth + 1;
    let exec_depth = global(&CONFIG.exec_depth);
    let exec_id = if depth <= exec_depth {
        id
    } else {
        parent.exec_id
    };
    if exec_id == id {
        let zero = ZERO_STATS.get(0)?;
        if let Err(e) = EXECS.insert(&id, zero, BPF_NOEXIST as u64) {
            if e != -17 {
                drop_count(DROP_EXECS_FULL); // -EEXIST is fine: userspace got there first
                return None;
            }
        }
    }
    let entry = CgroupEntry {
        exec_id,
        depth,
        _pad: 0,
    };
    if let Err(e) = CGROUPS.insert(&id, &entry, BPF_NOEXIST as u64) {
        if e != -17 {
            drop_count(DROP_CGROUPS_FULL);
            return None;
        }
    }
    let kind = if exec_id == id {
        EV_EXEC_CREATED
    } else {
        EV_CGROUP_CREATED
    };
    emit_cgroup_event(kind, id, &entry, path);
    Some(())
}

#[inline(always)]
fn emit_cgroup_event(kind: u32, id: u64, entry: &CgroupEntry, path: *const u8) {
    let Some(mut slot) = EVENTS.reserve::<CgroupEvent>(0) else {
        drop_count(DROP_RINGBUF);
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
                let pending = match stats_of(id) {
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

macro_rules! fin {
    ($f:ident) => {
        global(&FINAL.$f)
    };
}

/// The kernel's own totals of a cgroup being removed, as its files would show them now:
/// PSI totals (replaying the aggregation a read of the pressure file does), memory peak and
/// events, pids peak, cpu usage (with the per-cpu parts not yet flushed).
#[inline(always)]
fn exec_final(cgrp: *const u8, id: u64, pending: u64) {
    let Some(mut slot) = EVENTS.reserve::<ExecFinalEvent>(0) else {
        drop_count(DROP_RINGBUF);
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
    let psi_ok = !psi.is_null() && pcpu != 0 && nr >= 2 && nr <= PSI_STATES && hz > 0;
    // Divisions go through checked_div: a panic path has no place in a BPF program.
    let jiffy_ns = 1_000_000_000u64.checked_div(hz).unwrap_or(1).max(1);
    let nonidle_idx = if nr >= 1 { nr - 1 } else { 0 };
    let rstat = rd::<u64>(cgrp, fin!(cgroup_rstat_cpu));
    let cpu_ok = rstat != 0 && fin!(cgroup_bstat_sum) != ABSENT;
    let mut deltas = [0u64; PSI_STATES];
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
                    deltas[s] += times[s].wrapping_sub(prev[s]) as u64 * nonidle;
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
        for s in 0..PSI_STATES {
            if s < nonidle_idx {
                let t: u64 = rd(total, 8 * s as u32);
                ev.psi_ns[s] = t + deltas[s].checked_div(div).unwrap_or(0);
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
fn try_attach_task(dst: *const u8, task: *const u8) -> Option<()> {
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
    if let Some(old) = unsafe { BASELINES.get(&pid) }.copied() {
        if old.start_time_ns == start && Some(old.exec_id) != dst_entry.map(|e| e.exec_id) {
            if let Some(stats) = stats_of(old.exec_id) {
                let moved = rec.counters.since(&old.counters);
                let m = moved.as_array();
                let ended = stats.ended.as_array_mut();
                for i in 0..TASK_COUNTERS {
                    add(&mut ended[i], m[i]);
                }
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
                drop_count(DROP_BASELINES_FULL);
            }
        }
        None => {
            let _ = BASELINES.remove(&pid);
        }
    }
    Some(())
}

// ---------------------------------------------------------------------------------------------
// Task lifecycle.

#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    let parent: *const u8 = ctx.arg(0);
    let child: *const u8 = ctx.arg(1);
    let _ = try_fork(parent, child);
    0
}

#[inline(always)]
fn try_fork(parent: *const u8, child: *const u8) -> Option<()> {
    // The child's own cgroup: clone3(CLONE_INTO_CGROUP) may start it outside its parent's.
    let entry = entry_of(task_cgroup_id(child))?;
    let stats = stats_of(entry.exec_id)?;
    let pid = ld::<u32>(child, off!(task_pid));
    let tgid = ld::<u32>(child, off!(task_tgid));
    if pid == tgid {
        add(&mut stats.procs_started, 1);
        let ev = ProcForkEvent {
            kind: EV_PROC_FORK,
            tgid,
            parent_tgid: ld::<u32>(parent, off!(task_tgid)),
            _pad: 0,
            exec_id: entry.exec_id,
        };
        emit(&ev);
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
fn try_exec(task: *const u8) -> Option<()> {
    // SAFETY: helper without arguments.
    let entry = entry_of(unsafe { bpf_get_current_cgroup_id() })?;
    let stats = stats_of(entry.exec_id)?;
    add(&mut stats.execve, 1);
    // An exec's first programs wake the reader, which reads their environment (CI step,
    // trace context) while they run; a runtime's own init may come first, hence two.
    let early = global(&stats.execve) <= 2;
    // A container's first program is executed after its runtime joined the exec's network
    // namespace: this is where the namespace becomes the exec's.
    note_netns(task, entry.exec_id);
    let Some(mut slot) = EVENTS.reserve::<ProcExecEvent>(0) else {
        drop_count(DROP_RINGBUF);
        return None;
    };
    let ev = slot.as_mut_ptr();
    // SAFETY: the slot is ours until submitted; every field is written before submit.
    unsafe {
        (*ev).kind = EV_PROC_EXEC;
        (*ev).tgid = ld::<u32>(task, off!(task_tgid));
        (*ev)._pad = 0;
        (*ev).exec_id = entry.exec_id;
        // Straight into the record (the helper zero-fills on failure).
        helper::bpf_get_current_comm((*ev).comm.as_mut_ptr() as *mut c_void, COMM_LEN as u32);
        (*ev).args_len = 0;
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

#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(_ctx: BtfTracePointContext) -> i32 {
    // SAFETY: helper without arguments.
    if let Some(entry) = entry_of(unsafe { bpf_get_current_cgroup_id() }) {
        if let Some(stats) = stats_of(entry.exec_id) {
            add(&mut stats.task_exits, 1);
            // Until its last context switch, the task's final counters are still to come.
            add(&mut stats.pending, 1);
        }
    }
    0
}

/// The task is dead and switches out for the last time: its counters are final (the
/// scheduler has just charged its last run). Charge them to its exec and report the task.
/// Not later, at sched_process_free: that waits for the reaper and an RCU grace period, which
/// was seen to take more than 2 s.
#[inline(always)]
fn task_end(task: *const u8) -> Option<()> {
    // The dead task is still current.
    // SAFETY: helper without arguments.
    let entry = entry_of(unsafe { bpf_get_current_cgroup_id() })?;
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
    let stats = stats_of(entry.exec_id)?;
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

// ---------------------------------------------------------------------------------------------
// IO wait: time a task of the subtree is blocked with in_iowait set (in io_schedule()), from
// its switch-out to its wake-up. The kernel's own figure (delay accounting's blkio_delay)
// stamps the start of such a wait on the wrong task when the scheduler delays a dequeue
// (Linux 6.12 and later), so it is measured here. The common path of both programs is one
// read of the task's in_iowait bit.

/// The task's in_iowait bit. `task` must be a tracepoint argument (a pointer the verifier
/// trusts): the byte is loaded directly, without a helper call, as this runs on every
/// context switch and wake-up.
#[inline(always)]
fn in_iowait(task: *const u8) -> bool {
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
const TASK_DEAD: u32 = 0x80;

#[inline(always)]
fn iowait_block(task: *const u8) -> Option<()> {
    // The switched-out task is still current.
    // SAFETY: helper without arguments.
    entry_of(unsafe { bpf_get_current_cgroup_id() })?;
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
                drop_count(DROP_WAKEUP_UNSEEN);
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
        drop_count(DROP_IOWAIT_FULL);
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

// ---------------------------------------------------------------------------------------------
// Block IO: one count per request, at its first issue (dispatch to the driver), charged to the
// exec recorded when the request was created in the submitter's context; latency from the last
// issue to completion. Counting per issue would double-count requeued requests; the current task
// at issue or completion is often kblockd or an IRQ. Counting at completion is not exact either:
// the kernel skips programs silently at times (README, "Skipped BPF runs"), completions most:
// 0.03-0.2% of them on the 6.18 host under concurrent direct IO.

/// The exec that caused a bio, and the request class and flush flag of its op flags. Away from
/// the submitter (`by_task` false) only the bio's blkcg can tell. `bio` is BTF-typed.
#[inline(always)]
fn bio_origin(bio: *const u8, opf: u32, by_task: bool) -> Option<Inflight> {
    let exec_depth = global(&CONFIG.exec_depth);
    let mut exec_id = 0u64;
    if global(&CONFIG.blkcg_attribution) != 0 {
        // cgroup writeback: the bio carries the blkcg of the cgroup that dirtied the pages.
        let blkg = ld_ptr(bio, off!(bio_blkg));
        let blkcg = ld_ptr(blkg, off!(blkg_blkcg));
        let cgrp = ld_ptr(blkcg, off!(blkcg_css_cgroup));
        if let Some(e) = entry_of(cgroup_id(cgrp)) {
            // A blkcg above exec depth only says the io controller is not delegated further.
            if e.depth >= exec_depth {
                exec_id = e.exec_id;
            }
        }
    }
    if exec_id == 0 {
        if !by_task {
            return None;
        }
        // SAFETY: helper without arguments.
        exec_id = entry_of(unsafe { bpf_get_current_cgroup_id() })?.exec_id;
    }
    let preflush_bit = global(&REQ_PREFLUSH_BIT);
    let op = match opf & 0xff {
        0 => OP_READ,
        1 => OP_WRITE,
        2 => OP_FLUSH,
        3 | 5 | 9 => OP_DISCARD, // discard, secure erase, write zeroes
        _ => OP_OTHER,
    };
    let preflush = preflush_bit < 32 && opf & (1u32 << (preflush_bit & 31)) != 0;
    Some(Inflight {
        exec_id,
        start_ns: 0,
        issue_ns: 0,
        op,
        preflush: preflush as u32,
    })
}

/// When the request was made, for the expiry of entries whose completion never comes: the
/// block layer's own stamp when it keeps one (I/O statistics on), else the clock.
#[inline(always)]
fn request_time(rq: *const u8) -> u64 {
    let t = ld::<u64>(rq, off!(rq_start_time_ns));
    if t != 0 {
        return t;
    }
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// Start following a request. Requests are preallocated by the block layer and reused, so
/// each request pointer keeps its INFLIGHT entry (exec_id 0 when idle), rewritten in place:
/// a lookup, where an insert and a delete per request each took the bucket lock and the
/// element free list. An entry still in flight and issued means the completion of the request
/// that last used the pointer never reached the profiler.
#[inline(always)]
fn track_request(rq: *const u8, v: &Inflight) {
    let key = rq as u64;
    if let Some(p) = INFLIGHT.get_ptr_mut(&key) {
        // SAFETY: this request's entry: only its own events (which do not overlap) write it.
        let e = unsafe { &mut *p };
        if e.exec_id != 0 && e.issue_ns != 0 {
            drop_count(DROP_COMPLETION_UNSEEN);
        }
        *e = *v;
        return;
    }
    if INFLIGHT.insert(&key, v, 0).is_err() {
        drop_count(DROP_INFLIGHT_FULL);
    }
}

/// A request whose start no program saw: before 6.5 its bio as block_getrq saw it; otherwise
/// its bio's blkcg where cgroup writeback attributes IO (block_io_start was seen to miss 0.15%
/// of requests on the preemptible 7.3 kernel).
#[inline(always)]
fn unseen_request(rq: *const u8) -> Option<Inflight> {
    let bio = ld_ptr(rq, off!(rq_bio));
    if global(&CONFIG.block_getrq_fallback) != 0 {
        // SAFETY: plain data copied out.
        if let Some(v) = unsafe { BIO_ORIGIN.get(&(bio as u64)) }.copied() {
            let _ = BIO_ORIGIN.remove(&(bio as u64));
            return Some(v);
        }
    }
    let mut v = bio_origin(bio, ld::<u32>(rq, off!(rq_cmd_flags)), false)?;
    v.start_ns = request_time(rq);
    Some(v)
}

/// Count a request once: its bytes and class, into its exec's totals.
#[inline(always)]
fn count_request(inf: &Inflight, bytes: u32) {
    let Some(stats) = stats_of(inf.exec_id) else {
        return;
    };
    let d = &mut stats.disk;
    let bytes = bytes as u64;
    match inf.op {
        OP_READ => {
            add(&mut d.read_bytes, bytes);
            add(&mut d.read_reqs, 1);
        }
        // A write without data is the empty carrier of a cache flush.
        OP_WRITE if bytes > 0 => {
            add(&mut d.write_bytes, bytes);
            add(&mut d.write_reqs, 1);
        }
        OP_DISCARD => {
            add(&mut d.discard_bytes, bytes);
            add(&mut d.discard_reqs, 1);
        }
        _ => {}
    }
    if inf.op == OP_FLUSH || inf.preflush != 0 {
        add(&mut d.flush_reqs, 1);
    }
}

/// A request is created for a bio, in the submitter's context (Linux 6.5+).
#[btf_tracepoint(function = "block_io_start")]
pub fn block_io_start(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    let bio = ld_ptr(rq, off!(rq_bio));
    if let Some(mut v) = bio_origin(bio, ld::<u32>(rq, off!(rq_cmd_flags)), true) {
        v.start_ns = request_time(rq);
        track_request(rq, &v);
    }
    0
}

/// Before 6.5 (no block_io_start): the bio that a new request is made for, in the
/// submitter's context; the request is tracked from its first issue (see block_rq_issue).
#[btf_tracepoint(function = "block_getrq")]
pub fn block_getrq(ctx: BtfTracePointContext) -> i32 {
    let bio: *const u8 = ctx.arg(0);
    if let Some(mut v) = bio_origin(bio, ld::<u32>(bio, off!(bio_opf)), true) {
        // SAFETY: helper without arguments.
        v.start_ns = unsafe { bpf_ktime_get_ns() };
        if BIO_ORIGIN.insert(&(bio as u64), &v, 0).is_err() {
            drop_count(DROP_INFLIGHT_FULL);
        }
    }
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(p) = INFLIGHT.get_ptr_mut(&(rq as u64)) {
        // SAFETY: map value of this request; only this request's events touch it.
        let v = unsafe { &mut *p };
        if v.exec_id != 0 {
            if v.issue_ns == 0 {
                // First issue: the request's size is final (no merge after dispatch).
                count_request(v, ld::<u32>(rq, off!(rq_data_len)));
            }
            // Latency is measured from the last issue (a requeued request is issued again).
            v.issue_ns = now;
            return 0;
        }
    }
    if let Some(mut v) = unseen_request(rq) {
        count_request(&v, ld::<u32>(rq, off!(rq_data_len)));
        v.issue_ns = now;
        track_request(rq, &v);
    }
    0
}

#[btf_tracepoint(function = "block_rq_complete")]
pub fn block_rq_complete(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    let error: u64 = ctx.arg(1);
    let nr_bytes: u32 = ctx.arg(2);
    let _ = try_rq_complete(rq, error as u8 != 0, nr_bytes);
    0
}

#[inline(always)]
fn try_rq_complete(rq: *const u8, error: bool, nr_bytes: u32) -> Option<()> {
    // A request may complete in parts; it is done when this part covers what is left.
    let done = nr_bytes >= ld::<u32>(rq, off!(rq_data_len));
    let entry = INFLIGHT.get_ptr_mut(&(rq as u64));
    // SAFETY: plain data copied out.
    let inf = match entry.map(|p| unsafe { *p }) {
        Some(v) if v.exec_id != 0 => {
            if done {
                if let Some(p) = entry {
                    // Idle again (see track_request).
                    // SAFETY: this request's entry: only its own events write it.
                    unsafe {
                        (*p).exec_id = 0;
                        (*p).issue_ns = 0;
                    }
                }
            }
            v
        }
        // Without an entry: a request never issued (a cache flush that the flush machinery
        // carried out, known by its bio before 6.5), or one whose start and issue no program
        // saw.
        _ => unseen_request(rq)?,
    };
    if inf.issue_ns == 0 {
        // Not seen issued: counted here, without a latency.
        if done {
            count_request(&inf, nr_bytes);
        }
        return Some(());
    }
    let d = &mut stats_of(inf.exec_id)?.disk;
    if error {
        // Counted at issue; these bytes were not transferred.
        let undo = 0u64.wrapping_sub(nr_bytes as u64);
        match inf.op {
            OP_READ => add(&mut d.read_bytes, undo),
            OP_WRITE => add(&mut d.write_bytes, undo),
            OP_DISCARD => add(&mut d.discard_bytes, undo),
            _ => {}
        }
    }
    if !done {
        return Some(());
    }
    // SAFETY: helper without arguments.
    let lat = unsafe { bpf_ktime_get_ns() }.saturating_sub(inf.issue_ns);
    let b = lat_bucket(lat);
    let (sum, buckets) = match inf.op {
        OP_READ => (&mut d.read_lat_sum_ns, &mut d.read_lat),
        OP_WRITE => (&mut d.write_lat_sum_ns, &mut d.write_lat),
        _ => return Some(()),
    };
    add(sum, lat);
    if b < LAT_BUCKETS {
        add(&mut buckets[b], 1);
    }
    Some(())
}

// ---------------------------------------------------------------------------------------------
// Network. Two views: the exec's sockets, by their cgroup (cgroup_skb on the attached subtree:
// any namespace, IP bytes), and the interfaces of the exec's own network namespaces, counted
// as the interfaces count (link-layer bytes) at transmit and receive. The interface programs
// run for every packet of the host; their common path is one hash lookup of the device's
// namespace, which finds nothing outside the execs' namespaces.

/// Make the task's network namespace its exec's, unless it is the host's. The newest exec
/// wins: a pooled namespace belongs to the exec that uses it now.
#[inline(always)]
fn note_netns(task: *const u8, exec_id: u64) {
    let off = net_off!(task_nsproxy);
    if off == ABSENT {
        return;
    }
    let net = ld_ptr(ld_ptr(task, off), net_off!(nsproxy_net_ns));
    // Most programs run in the host's namespace: tell that before any map lookup.
    let inum = ld::<u32>(net, net_off!(net_ns_inum));
    if net.is_null() || inum == 0 || inum == global(&CONFIG.host_netns_inum) {
        return;
    }
    let key = net as u64;
    // SAFETY: plain data copied out.
    if let Some(e) = unsafe { NETNS.get(&key) } {
        if e.exec_id == exec_id {
            return;
        }
    }
    let e = NetnsEntry {
        exec_id,
        inum,
        _pad: 0,
    };
    if NETNS.insert(&key, &e, 0).is_err() {
        drop_count(DROP_NET_FULL);
    }
}

/// The exec whose namespace the device is in.
#[inline(always)]
fn netns_of(dev: *const u8) -> Option<NetnsEntry> {
    let net = rd_ptr(dev, net_off!(netdev_nd_net));
    // SAFETY: plain data copied out.
    unsafe { NETNS.get(&(net as u64)) }.copied()
}

#[inline(always)]
fn count_iface(dev: *const u8, ns: &NetnsEntry, len: u64, tx: bool) -> Option<()> {
    let key = IfaceKey {
        exec_id: ns.exec_id,
        netns_inum: ns.inum,
        ifindex: rd::<u32>(dev, net_off!(netdev_ifindex)),
    };
    let v = match IFACES.get_ptr_mut(&key) {
        Some(v) => v,
        None => {
            let t = IfaceTraffic {
                name: rd(dev, net_off!(netdev_name)),
                dev_type: rd::<u16>(dev, net_off!(netdev_type)) as u32,
                ..Default::default()
            };
            // Another CPU may have inserted it meanwhile: then the lookup below finds it.
            let _ = IFACES.insert(&key, &t, BPF_NOEXIST as u64);
            match IFACES.get_ptr_mut(&key) {
                Some(v) => v,
                None => {
                    drop_count(DROP_NET_FULL);
                    return None;
                }
            }
        }
    };
    // SAFETY: map value, updated atomically.
    let v = unsafe { &mut *v };
    if tx {
        add(&mut v.tx_bytes, len);
        add(&mut v.tx_packets, 1);
    } else {
        add(&mut v.rx_bytes, len);
        add(&mut v.rx_packets, 1);
    }
    Some(())
}

/// A packet left a device (rc 0: the driver took it). `len` includes the link-layer header,
/// as the driver's own counters do.
#[btf_tracepoint(function = "net_dev_xmit")]
pub fn net_dev_xmit(ctx: BtfTracePointContext) -> i32 {
    let rc: i32 = ctx.arg(1);
    if rc == 0 {
        let dev: *const u8 = ctx.arg(2);
        if let Some(ns) = netns_of(dev) {
            let len: u32 = ctx.arg(3);
            let _ = count_iface(dev, &ns, len as u64, true);
        }
    }
    0
}

/// A packet arrived on a device. Its link-layer header has been pulled by now: add it back.
#[btf_tracepoint(function = "netif_receive_skb")]
pub fn netif_receive_skb(ctx: BtfTracePointContext) -> i32 {
    let skb: *const u8 = ctx.arg(0);
    let dev = rd_ptr(skb, net_off!(skb_dev));
    if let Some(ns) = netns_of(dev) {
        let len = rd::<u32>(skb, net_off!(skb_len)) as u64
            + rd::<u16>(dev, net_off!(netdev_hard_header_len)) as u64;
        let _ = count_iface(dev, &ns, len, false);
    }
    0
}

#[inline(always)]
fn count_sock(ctx: &SkBuffContext, tx: bool) -> Option<()> {
    let skb = ctx.skb.skb;
    // SAFETY: the context pointer of a cgroup_skb program; the helper takes it as is.
    let id = unsafe { helper::bpf_skb_cgroup_id(skb) };
    let entry = entry_of(id)?;
    let stats = stats_of(entry.exec_id)?;
    // SAFETY: context field loads, rewritten by the verifier.
    let (len, ifindex) = unsafe { ((*skb).len as u64, (*skb).ifindex) };
    let t = &mut stats.sock;
    // Every namespace's loopback device has ifindex 1 (LOOPBACK_IFINDEX).
    let lo = ifindex == 1;
    if tx {
        add(&mut t.tx_bytes, len);
        add(&mut t.tx_packets, 1);
        if lo {
            add(&mut t.lo_tx_bytes, len);
            add(&mut t.lo_tx_packets, 1);
        }
    } else {
        add(&mut t.rx_bytes, len);
        add(&mut t.rx_packets, 1);
        if lo {
            add(&mut t.lo_rx_bytes, len);
            add(&mut t.lo_rx_packets, 1);
        }
    }
    Some(())
}

/// Packets to the subtree's sockets. Always let them through.
#[cgroup_skb(ingress)]
pub fn sock_ingress(ctx: SkBuffContext) -> i32 {
    let _ = count_sock(&ctx, false);
    1
}

/// Packets from the subtree's sockets. Always let them through.
#[cgroup_skb(egress)]
pub fn sock_egress(ctx: SkBuffContext) -> i32 {
    let _ = count_sock(&ctx, true);
    1
}

// ---------------------------------------------------------------------------------------------
// Task iterator: live counters of every task in the subtree, read by userspace on demand.

#[repr(C)]
struct BpfIterMeta {
    seq: *mut c_void,
    session_id: u64,
    seq_num: u64,
}

#[repr(C)]
struct BpfIterTask {
    meta: *const BpfIterMeta,
    task: *const u8,
}

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

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
