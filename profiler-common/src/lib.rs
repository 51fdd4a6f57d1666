//! Types shared by the eBPF programs (profiler-ebpf) and the userspace loader (profiler).
//!
//! Everything is `#[repr(C)]`, made of plain integers, with explicit padding, so both sides
//! agree on every byte. Counters are `u64` so that the kernel side can add to them atomically.
#![no_std]

/// Offset value meaning "this field does not exist on the running kernel".
pub const ABSENT: u32 = u32::MAX;

/// Byte offsets of the kernel struct fields that the programs read, resolved by userspace from
/// the running kernel's BTF. Rust eBPF has no CO-RE relocations, so layouts cannot be baked in
/// at compile time: they are handed to the programs as a read-only global at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    // task_struct
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_comm: u32,
    pub task_start_time: u32,
    pub task_exit_state: u32,
    pub task_real_parent: u32,
    pub task_sum_exec_runtime: u32,
    pub task_run_delay: u32,
    pub task_pcount: u32,
    pub task_nvcsw: u32,
    pub task_nivcsw: u32,
    pub task_utime: u32,
    pub task_stime: u32,
    pub task_delays: u32,
    /// Byte holding the `in_iowait` bitfield, and the bit's mask within it.
    pub task_in_iowait_byte: u32,
    pub task_in_iowait_mask: u32,
    pub task_ioac_rchar: u32,
    pub task_ioac_wchar: u32,
    pub task_ioac_syscr: u32,
    pub task_ioac_syscw: u32,
    pub task_ioac_read_bytes: u32,
    pub task_ioac_write_bytes: u32,
    pub task_ioac_cancelled_write_bytes: u32,
    pub task_cgroups: u32,
    pub task_mm: u32,
    // task_delay_info (behind task_struct.delays)
    pub delays_blkio_delay: u32,
    pub delays_blkio_count: u32,
    pub delays_swapin_delay: u32,
    pub delays_freepages_delay: u32,
    pub delays_thrashing_delay: u32,
    // mm_struct
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    // css_set, cgroup, kernfs_node, cgroup_root
    pub css_set_dfl_cgrp: u32,
    pub cgroup_kn: u32,
    pub cgroup_parent_css: u32,
    pub css_cgroup: u32,
    pub cgroup_root: u32,
    pub cgroup_root_hierarchy_id: u32,
    pub kernfs_node_id: u32,
    // request, bio, blkcg_gq, blkcg
    pub rq_cmd_flags: u32,
    pub rq_data_len: u32,
    pub rq_bio: u32,
    /// request.start_time_ns: when the block layer made the request (0 without I/O stats).
    pub rq_start_time_ns: u32,
    pub bio_opf: u32,
    pub bio_blkg: u32,
    pub blkg_blkcg: u32,
    pub blkcg_css_cgroup: u32,
}

impl KernelOffsets {
    /// All fields absent: what the programs see before userspace fills the global in.
    pub const ABSENT: Self = Self {
        task_pid: ABSENT,
        task_tgid: ABSENT,
        task_comm: ABSENT,
        task_start_time: ABSENT,
        task_exit_state: ABSENT,
        task_real_parent: ABSENT,
        task_sum_exec_runtime: ABSENT,
        task_run_delay: ABSENT,
        task_pcount: ABSENT,
        task_nvcsw: ABSENT,
        task_nivcsw: ABSENT,
        task_utime: ABSENT,
        task_stime: ABSENT,
        task_delays: ABSENT,
        task_in_iowait_byte: ABSENT,
        task_in_iowait_mask: 0,
        task_ioac_rchar: ABSENT,
        task_ioac_wchar: ABSENT,
        task_ioac_syscr: ABSENT,
        task_ioac_syscw: ABSENT,
        task_ioac_read_bytes: ABSENT,
        task_ioac_write_bytes: ABSENT,
        task_ioac_cancelled_write_bytes: ABSENT,
        task_cgroups: ABSENT,
        task_mm: ABSENT,
        delays_blkio_delay: ABSENT,
        delays_blkio_count: ABSENT,
        delays_swapin_delay: ABSENT,
        delays_freepages_delay: ABSENT,
        delays_thrashing_delay: ABSENT,
        mm_arg_start: ABSENT,
        mm_arg_end: ABSENT,
        css_set_dfl_cgrp: ABSENT,
        cgroup_kn: ABSENT,
        cgroup_parent_css: ABSENT,
        css_cgroup: ABSENT,
        cgroup_root: ABSENT,
        cgroup_root_hierarchy_id: ABSENT,
        kernfs_node_id: ABSENT,
        rq_cmd_flags: ABSENT,
        rq_data_len: ABSENT,
        rq_bio: ABSENT,
        rq_start_time_ns: ABSENT,
        bio_opf: ABSENT,
        bio_blkg: ABSENT,
        blkg_blkcg: ABSENT,
        blkcg_css_cgroup: ABSENT,
    };
}

/// Offsets and constants for the figures read from a cgroup when it is removed (PSI totals,
/// memory peak and events, pids peak, cpu usage), and for finding each CPU's per-cpu area.
/// ABSENT where this kernel lacks the structure.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalOffsets {
    /// Per-cpu discovery: task_struct.se.cfs_rq, cfs_rq.rq, rq.cpu, and the offsets of the
    /// per-cpu variables `runqueues` and `this_cpu_off` in the per-cpu section.
    pub task_se_cfs_rq: u32,
    pub cfs_rq_rq: u32,
    pub rq_cpu: u32,
    pub _pad0: u32,
    pub runqueues_secoff: u64,
    pub this_cpu_off_secoff: u64,
    /// PSI: cgroup.psi (pointer), psi_group.pcpu, psi_group.total (PSI_AVGS row first),
    /// psi_group_cpu.times, .times_prev (PSI_AVGS row first), .state_mask.
    pub cgroup_psi: u32,
    pub psi_pcpu: u32,
    pub psi_total: u32,
    pub psic_times: u32,
    pub psic_times_prev: u32,
    pub psic_state_mask: u32,
    /// NR_PSI_STATES (the last state, PSI_NONIDLE, weighs the others).
    pub nr_psi_states: u32,
    pub _pad2: u32,
    /// cgroup.subsys[] and the indices of the memory and pids controllers in it.
    pub cgroup_subsys: u32,
    pub memory_cgrp_id: u32,
    pub pids_cgrp_id: u32,
    /// mem_cgroup.memory.watermark, mem_cgroup.memory_events, pids_cgroup.watermark.
    pub memcg_watermark: u32,
    pub memcg_events: u32,
    pub pids_watermark: u32,
    /// cgroup.bstat.cputime.sum_exec_runtime, cgroup.rstat_base_cpu (or rstat_cpu: per-cpu
    /// pointer), and in the per-cpu struct bstat/last_bstat .cputime.sum_exec_runtime.
    pub cgroup_bstat_sum: u32,
    pub cgroup_rstat_cpu: u32,
    pub rstatc_bstat_sum: u32,
    pub rstatc_last_bstat_sum: u32,
    /// Number of possible CPUs to walk (at most MAX_CPUS).
    pub nr_cpus: u32,
    pub _pad1: u32,
}

impl FinalOffsets {
    pub const ABSENT: Self = Self {
        task_se_cfs_rq: ABSENT,
        cfs_rq_rq: ABSENT,
        rq_cpu: ABSENT,
        _pad0: 0,
        runqueues_secoff: u64::MAX,
        this_cpu_off_secoff: u64::MAX,
        cgroup_psi: ABSENT,
        psi_pcpu: ABSENT,
        psi_total: ABSENT,
        psic_times: ABSENT,
        psic_times_prev: ABSENT,
        psic_state_mask: ABSENT,
        nr_psi_states: 0,
        _pad2: 0,
        cgroup_subsys: ABSENT,
        memory_cgrp_id: ABSENT,
        pids_cgrp_id: ABSENT,
        memcg_watermark: ABSENT,
        memcg_events: ABSENT,
        pids_watermark: ABSENT,
        cgroup_bstat_sum: ABSENT,
        cgroup_rstat_cpu: ABSENT,
        rstatc_bstat_sum: ABSENT,
        rstatc_last_bstat_sum: ABSENT,
        nr_cpus: 0,
        _pad1: 0,
    };
}

/// CPUs walked for the per-cpu figures of a removed cgroup.
pub const MAX_CPUS: u32 = 256;
/// PSI states reported (io some/full, memory some/full, cpu some/full, irq full, nonidle).
pub const PSI_STATES: usize = 8;
/// memory.events counters copied (enum memcg_memory_event order).
pub const MEMCG_EVENTS: usize = 9;

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

/// Load-time settings of the programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// cgroup id of the attached cgroup (the root of the watched subtree).
    pub base_cgroup_id: u64,
    /// Cgroups at depth 1..=exec_depth below the base are execs; deeper ones roll up into
    /// their ancestor at exec_depth. The base (depth 0) is the exec of its own processes.
    pub exec_depth: u32,
    /// 1 when block requests are charged to the cgroup of the bio's blkcg (cgroup writeback
    /// on pure v2 with the io and memory controllers), 0 to charge the submitting task.
    pub blkcg_attribution: u32,
    /// 1 on kernels without the block_io_start tracepoint (before 6.5): requests are tied to
    /// their origin through block_getrq and their first issue.
    pub block_getrq_fallback: u32,
    /// Inode number of the host's network namespace (execs running there are counted by
    /// their sockets only).
    pub host_netns_inum: u32,
}

/// Value of the cgroups map: which exec a cgroup of the subtree belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupEntry {
    pub exec_id: u64,
    /// Depth below the attached cgroup (0 for the attached cgroup itself).
    pub depth: u32,
    pub _pad: u32,
}

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

/// Log2 latency buckets: bucket i counts latencies in [2^i, 2^(i+1)) microseconds; bucket 0
/// also holds everything under 1 us and the last bucket everything above.
pub const LAT_BUCKETS: usize = 24;

/// The latency bucket of a duration in nanoseconds.
#[inline(always)]
pub fn lat_bucket(ns: u64) -> usize {
    let mut us = ns >> 10; // ~microseconds; 1024 ns keeps it a shift
    let mut b = 0usize;
    // Unrolled binary search for floor(log2(us)): no loops, no clz needed in BPF.
    if us >= 1 << 16 {
        us >>= 16;
        b += 16;
    }
    if us >= 1 << 8 {
        us >>= 8;
        b += 8;
    }
    if us >= 1 << 4 {
        us >>= 4;
        b += 4;
    }
    if us >= 1 << 2 {
        us >>= 2;
        b += 2;
    }
    if us >= 1 << 1 {
        b += 1;
    }
    if b >= LAT_BUCKETS { LAT_BUCKETS - 1 } else { b }
}

/// Lower bound of latency bucket `i` in nanoseconds (bucket 0 starts at 0).
pub fn lat_bucket_floor_ns(i: usize) -> u64 {
    if i == 0 { 0 } else { 1024u64 << i }
}

/// Block-layer figures of an exec, counted once per request at its completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskStats {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_reqs: u64,
    pub write_reqs: u64,
    pub discard_bytes: u64,
    pub discard_reqs: u64,
    pub flush_reqs: u64,
    pub read_lat_sum_ns: u64,
    pub write_lat_sum_ns: u64,
    pub read_lat: [u64; LAT_BUCKETS],
    pub write_lat: [u64; LAT_BUCKETS],
}

impl Default for DiskStats {
    fn default() -> Self {
        Self {
            read_bytes: 0,
            write_bytes: 0,
            read_reqs: 0,
            write_reqs: 0,
            discard_bytes: 0,
            discard_reqs: 0,
            flush_reqs: 0,
            read_lat_sum_ns: 0,
            write_lat_sum_ns: 0,
            read_lat: [0; LAT_BUCKETS],
            write_lat: [0; LAT_BUCKETS],
        }
    }
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

/// Traffic of an exec's sockets, counted by cgroup_skb programs on the attached subtree, by
/// the cgroup of the socket. Bytes are IP packet lengths (from the IP header on); a packet
/// offloaded as one large segment counts once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockTraffic {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    /// The part of the above that went over a loopback device.
    pub lo_rx_bytes: u64,
    pub lo_rx_packets: u64,
    pub lo_tx_bytes: u64,
    pub lo_tx_packets: u64,
}

/// A network namespace that an exec's tasks run in, other than the host's (value of the
/// netns map, keyed by the address of its `struct net`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetnsEntry {
    pub exec_id: u64,
    /// The namespace's inode number (as in /proc/PID/ns/net).
    pub inum: u32,
    pub _pad: u32,
}

/// Key of an exec's per-interface counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IfaceKey {
    pub exec_id: u64,
    pub netns_inum: u32,
    pub ifindex: u32,
}

pub const IFNAME_LEN: usize = 16;

/// An interface's traffic while it belonged to an exec, counted the way the interface counts
/// it (bytes with the link-layer header): at transmit (net_dev_xmit) and at receive
/// (netif_receive_skb).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfaceTraffic {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    /// Interface name when first seen.
    pub name: [u8; IFNAME_LEN],
    /// ARPHRD_* type of the device (772: loopback).
    pub dev_type: u32,
    pub _pad: u32,
}

pub const ARPHRD_LOOPBACK: u32 = 772;

/// Offsets for the network programs (0xffffffff: absent; the programs then stay unloaded).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetOffsets {
    pub task_nsproxy: u32,
    pub nsproxy_net_ns: u32,
    pub net_ns_inum: u32,
    pub netdev_nd_net: u32,
    pub netdev_ifindex: u32,
    pub netdev_name: u32,
    pub netdev_type: u32,
    pub netdev_hard_header_len: u32,
    pub skb_dev: u32,
    pub skb_len: u32,
}

impl NetOffsets {
    pub const ABSENT: Self = Self {
        task_nsproxy: ABSENT,
        nsproxy_net_ns: ABSENT,
        net_ns_inum: ABSENT,
        netdev_nd_net: ABSENT,
        netdev_ifindex: ABSENT,
        netdev_name: ABSENT,
        netdev_type: ABSENT,
        netdev_hard_header_len: ABSENT,
        skb_dev: ABSENT,
        skb_len: ABSENT,
    };
}

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
/// (blkio_delay) is unreliable since Linux 6.12 (see README).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoWait {
    /// task_struct.start_time of the task the entry belongs to (guards against pid reuse).
    pub start_time_ns: u64,
    /// When the current wait began (0: not waiting).
    pub blocked_ns: u64,
    pub total_ns: u64,
    pub count: u64,
}

/// Block request (key: request pointer). The block layer reuses its preallocated requests, so
/// an entry stays with its pointer: `exec_id` 0 when the request is idle (completed).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inflight {
    pub exec_id: u64,
    /// When the request was made: userspace removes entries whose request never completed in
    /// view (merged into another request) after a minute.
    pub start_ns: u64,
    pub issue_ns: u64,
    pub op: u32,
    /// 1 when the request carries a cache flush (REQ_PREFLUSH).
    pub preflush: u32,
}

/// Request classes for [`Inflight::op`].
pub const OP_READ: u32 = 0;
pub const OP_WRITE: u32 = 1;
pub const OP_FLUSH: u32 = 2;
pub const OP_DISCARD: u32 = 3;
pub const OP_OTHER: u32 = 4;

/// Indices of the drop counters (array map `drops`).
pub const DROP_RINGBUF: u32 = 0;
pub const DROP_CGROUPS_FULL: u32 = 1;
pub const DROP_EXECS_FULL: u32 = 2;
pub const DROP_BASELINES_FULL: u32 = 3;
pub const DROP_INFLIGHT_FULL: u32 = 4;
pub const DROP_EXEC_MISSING: u32 = 5;
pub const DROP_IOWAIT_FULL: u32 = 6;
pub const DROP_NET_FULL: u32 = 7;
/// Not a lost record: a block request whose completion the kernel never delivered to the
/// profiler (its bytes are counted; its latency is not).
pub const DROP_COMPLETION_UNSEEN: u32 = 8;
/// Likewise: a wake-up from an IO wait that the kernel never delivered (that wait is lost).
pub const DROP_WAKEUP_UNSEEN: u32 = 9;
pub const DROP_COUNTERS: u32 = 10;

/// Event kinds: the first u32 of every ring-buffer record and iterator record.
pub const EV_EXEC_CREATED: u32 = 1;
pub const EV_CGROUP_REMOVED: u32 = 2;
pub const EV_TASK_END: u32 = 3;
pub const EV_PROC_EXEC: u32 = 4;
pub const EV_PROC_FORK: u32 = 5;
pub const EV_TASK_SNAPSHOT: u32 = 6;
pub const EV_CGROUP_CREATED: u32 = 7;
pub const EV_EXEC_FINAL: u32 = 8;

pub const CGROUP_PATH_LEN: usize = 256;
pub const COMM_LEN: usize = 16;
pub const ARGS_LEN: usize = 192;

/// A cgroup of the subtree was created (EV_EXEC_CREATED when it is a new exec,
/// EV_CGROUP_CREATED when it rolls up into one) or removed (EV_CGROUP_REMOVED).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgroupEvent {
    pub kind: u32,
    pub depth: u32,
    pub ts_ns: u64,
    pub cgroup_id: u64,
    pub exec_id: u64,
    /// Path from the cgroup v2 root as the kernel printed it, NUL-terminated (maybe truncated).
    pub path: [u8; CGROUP_PATH_LEN],
}

/// Flags of [`TaskRecord::flags`]. TASK_NO_DELAYS: no usable delay accounting (memory stalls).
pub const TASK_LEADER: u32 = 1;
pub const TASK_NO_DELAYS: u32 = 2;
pub const TASK_PARTIAL: u32 = 4;

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
    pub comm: [u8; COMM_LEN],
    pub counters: TaskCounters,
}

/// A process of an exec called execve: its new command line.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcExecEvent {
    pub kind: u32,
    pub tgid: u32,
    pub args_len: u32,
    pub _pad: u32,
    pub exec_id: u64,
    pub comm: [u8; COMM_LEN],
    /// argv as NUL-separated strings, truncated to ARGS_LEN.
    pub args: [u8; ARGS_LEN],
}

/// A new process (not thread) was forked into an exec.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcForkEvent {
    pub kind: u32,
    pub tgid: u32,
    pub parent_tgid: u32,
    pub _pad: u32,
    pub exec_id: u64,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all are repr(C) plain integers with explicit padding.
    unsafe impl aya::Pod for KernelOffsets {}
    unsafe impl aya::Pod for Config {}
    unsafe impl aya::Pod for FinalOffsets {}
    unsafe impl aya::Pod for CgroupEntry {}
    unsafe impl aya::Pod for TaskCounters {}
    unsafe impl aya::Pod for ExecStats {}
    unsafe impl aya::Pod for TaskBaseline {}
    unsafe impl aya::Pod for Inflight {}
    unsafe impl aya::Pod for IoWait {}
    unsafe impl aya::Pod for SockTraffic {}
    unsafe impl aya::Pod for NetnsEntry {}
    unsafe impl aya::Pod for IfaceKey {}
    unsafe impl aya::Pod for IfaceTraffic {}
    unsafe impl aya::Pod for NetOffsets {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lat_buckets_are_log2_microseconds() {
        assert_eq!(lat_bucket(0), 0);
        assert_eq!(lat_bucket(1_500), 0);
        assert_eq!(lat_bucket(2_048), 1);
        assert_eq!(lat_bucket(4_095), 1);
        assert_eq!(lat_bucket(4_096), 2);
        assert_eq!(lat_bucket(1_000_000), 9); // ~976 us
        assert_eq!(lat_bucket(u64::MAX), LAT_BUCKETS - 1);
        for i in 1..LAT_BUCKETS {
            assert_eq!(lat_bucket(lat_bucket_floor_ns(i)), i);
            assert_eq!(lat_bucket(lat_bucket_floor_ns(i) - 1), i - 1);
        }
    }

    #[test]
    fn counters_since_and_add() {
        let mut a = TaskCounters {
            oncpu_ns: 10,
            rchar: 5,
            ..Default::default()
        };
        let b = TaskCounters {
            oncpu_ns: 4,
            rchar: 5,
            ..Default::default()
        };
        let d = a.since(&b);
        assert_eq!((d.oncpu_ns, d.rchar), (6, 0));
        a.add(&d);
        assert_eq!(a.oncpu_ns, 16);
    }
}
