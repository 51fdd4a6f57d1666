//! Byte offsets of the kernel struct fields the programs read, resolved by userspace from the
//! running kernel's BTF. Rust eBPF has no CO-RE relocations, so layouts cannot be baked in at
//! compile time: they are handed to the programs as read-only globals at load time. Each
//! field is declared once, in a table that makes the struct, its all-absent value and the list
//! userspace resolves.

use crate::*;

/// Whether a field is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The profiler cannot attach without it.
    Required,
    /// The figures that need it are missing without it (and the records say so).
    Optional,
    /// Used when present; its absence costs no figure and goes unreported.
    Quiet,
}

/// One field of an offsets struct: where it is in the kernel's types.
#[derive(Clone, Copy, Debug)]
pub struct BtfField {
    /// The struct field it fills.
    pub slot: &'static str,
    /// Kernel struct, and member path (nested members joined by dots).
    pub ty: &'static str,
    pub path: &'static str,
    /// Size in bytes the programs read (0: any size, e.g. an array read in parts).
    pub size: usize,
    pub need: Need,
    /// Resolved only when this other slot was (a struct reached through it).
    pub after: Option<&'static str>,
    /// Fields that are used together: one missing makes them all absent.
    pub group: Option<&'static str>,
}

/// Declares an offsets struct of u32 slots: `slot: Need "struct" "member.path" size,` (with
/// `after other_slot` when reached through another field, `in group` when used with others),
/// then `extra` slots resolved by hand, with their types and defaults (in an order that leaves
/// no padding: the struct is handed to the programs byte for byte, which an assertion checks).
macro_rules! btf_offsets {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $slot:ident: $need:ident $ty:literal $path:literal $size:literal $(after $dep:ident)? $(in $group:ident)?, )*
        }
        extra { $( $(#[$emeta:meta])* $eslot:ident: $ety:ty = $edefault:expr, )* }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $slot: u32, )*
            $( $(#[$emeta])* pub $eslot: $ety, )*
        }

        // No padding: the struct goes to the programs byte for byte.
        const _: () = assert!(
            core::mem::size_of::<$name>()
                == 4 * [$(stringify!($slot)),*].len() $(+ core::mem::size_of::<$ety>())*
        );

        impl $name {
            /// Every slot absent: what the programs see before userspace fills the global in.
            pub const ABSENT: Self = Self {
                $( $slot: ABSENT, )*
                $( $eslot: $edefault, )*
            };

            /// The BTF fields of the slots, in declaration order.
            pub const FIELDS: &'static [BtfField] = &[
                $( BtfField {
                    slot: stringify!($slot),
                    ty: $ty,
                    path: $path,
                    size: $size,
                    need: Need::$need,
                    after: btf_offsets!(@after $($dep)?),
                    group: btf_offsets!(@after $($group)?),
                }, )*
            ];

            /// The slot a field of [`Self::FIELDS`] fills.
            pub fn slot_mut(&mut self, slot: &str) -> Option<&mut u32> {
                match slot {
                    $( stringify!($slot) => Some(&mut self.$slot), )*
                    _ => None,
                }
            }
        }
    };
    (@after) => { None };
    (@after $dep:ident) => { Some(stringify!($dep)) };
}

btf_offsets! {
    /// Offsets of the task, memory, cgroup and block-layer fields the programs read.
    pub struct KernelOffsets {
        task_pid: Required "task_struct" "pid" 4,
        task_tgid: Required "task_struct" "tgid" 4,
        task_comm: Required "task_struct" "comm" 16,
        task_start_time: Required "task_struct" "start_time" 8,
        task_exit_state: Required "task_struct" "exit_state" 4,
        task_exit_code: Required "task_struct" "exit_code" 4,
        /// A process's peak RSS and whether the OOM killer chose it, read at its leader's end.
        task_signal: Optional "task_struct" "signal" 8,
        signal_maxrss: Optional "signal_struct" "maxrss" 8 after task_signal,
        signal_oom_mm: Optional "signal_struct" "oom_mm" 8 after task_signal,
        task_real_parent: Optional "task_struct" "real_parent" 8,
        task_sum_exec_runtime: Required "task_struct" "se.sum_exec_runtime" 8,
        task_run_delay: Optional "task_struct" "sched_info.run_delay" 8,
        task_pcount: Optional "task_struct" "sched_info.pcount" 8,
        task_nvcsw: Required "task_struct" "nvcsw" 8,
        task_nivcsw: Required "task_struct" "nivcsw" 8,
        task_utime: Required "task_struct" "utime" 8,
        task_stime: Required "task_struct" "stime" 8,
        task_delays: Optional "task_struct" "delays" 8,
        task_ioac_rchar: Optional "task_struct" "ioac.rchar" 8,
        task_ioac_wchar: Optional "task_struct" "ioac.wchar" 8,
        task_ioac_syscr: Optional "task_struct" "ioac.syscr" 8,
        task_ioac_syscw: Optional "task_struct" "ioac.syscw" 8,
        task_ioac_read_bytes: Optional "task_struct" "ioac.read_bytes" 8,
        task_ioac_write_bytes: Optional "task_struct" "ioac.write_bytes" 8,
        task_ioac_cancelled_write_bytes: Optional "task_struct" "ioac.cancelled_write_bytes" 8,
        task_cgroups: Required "task_struct" "cgroups" 8,
        task_mm: Optional "task_struct" "mm" 8,
        delays_blkio_delay: Optional "task_delay_info" "blkio_delay" 8 after task_delays,
        delays_blkio_count: Optional "task_delay_info" "blkio_count" 4 after task_delays,
        delays_swapin_delay: Optional "task_delay_info" "swapin_delay" 8 after task_delays,
        delays_freepages_delay: Optional "task_delay_info" "freepages_delay" 8 after task_delays,
        delays_thrashing_delay: Optional "task_delay_info" "thrashing_delay" 8 after task_delays,
        /// IO wait in the scheduler's clock: a task's runqueue (through its fair-class entity,
        /// which every task has), that runqueue's clock, and when the task was last queued.
        task_cfs_rq: Optional "task_struct" "se.cfs_rq" 8 in iowait,
        cfs_rq_rq: Optional "cfs_rq" "rq" 8 in iowait,
        rq_clock: Optional "rq" "clock" 8 in iowait,
        task_last_queued: Optional "task_struct" "sched_info.last_queued" 8 in iowait,
        mm_arg_start: Optional "mm_struct" "arg_start" 8,
        mm_arg_end: Optional "mm_struct" "arg_end" 8,
        mm_env_start: Optional "mm_struct" "env_start" 8,
        mm_env_end: Optional "mm_struct" "env_end" 8,
        css_set_dfl_cgrp: Required "css_set" "dfl_cgrp" 8,
        cgroup_kn: Required "cgroup" "kn" 8,
        cgroup_parent_css: Required "cgroup" "self.parent" 8,
        css_cgroup: Required "cgroup_subsys_state" "cgroup" 8,
        cgroup_root: Required "cgroup" "root" 8,
        cgroup_root_hierarchy_id: Required "cgroup_root" "hierarchy_id" 4,
        kernfs_node_id: Required "kernfs_node" "id" 8,
        rq_cmd_flags: Required "request" "cmd_flags" 4,
        rq_data_len: Required "request" "__data_len" 4,
        rq_bio: Optional "request" "bio" 8,
        /// When the block layer last issued the request, stamped just after block_rq_issue
        /// (0 until its first issue, and without I/O statistics on the queue).
        rq_io_start_time_ns: Quiet "request" "io_start_time_ns" 8,
        /// Whether the queue stamps issues (QUEUE_FLAG_STATS in its flags).
        rq_q: Quiet "request" "q" 8,
        queue_flags: Quiet "request_queue" "queue_flags" 8 after rq_q,
        bio_opf: Optional "bio" "bi_opf" 4,
        bio_blkg: Optional "bio" "bi_blkg" 8,
        blkg_blkcg: Optional "blkcg_gq" "blkcg" 8,
        blkcg_css_cgroup: Optional "blkcg" "css.cgroup" 8,
    }
    extra {
        /// Byte holding the `in_iowait` bitfield, and the bit's mask within it.
        task_in_iowait_byte: u32 = ABSENT,
        task_in_iowait_mask: u32 = 0,
    }
}

btf_offsets! {
    /// Offsets for the network programs (they stay unloaded when one is absent).
    pub struct NetOffsets {
        task_nsproxy: Required "task_struct" "nsproxy" 8,
        nsproxy_net_ns: Required "nsproxy" "net_ns" 8,
        net_ns_inum: Required "net" "ns.inum" 4,
        netdev_nd_net: Required "net_device" "nd_net.net" 8,
        netdev_ifindex: Required "net_device" "ifindex" 4,
        netdev_name: Required "net_device" "name" 16,
        netdev_type: Required "net_device" "type" 2,
        netdev_hard_header_len: Required "net_device" "hard_header_len" 2,
        skb_dev: Required "sk_buff" "dev" 8,
        skb_len: Required "sk_buff" "len" 4,
    }
    extra {}
}

btf_offsets! {
    /// Offsets and constants for the figures read from a cgroup when it is removed (PSI totals,
    /// memory peak and events, pids peak, cpu usage), and for finding each CPU's per-cpu area.
    /// ABSENT where this kernel lacks the structure: a group's figures then come from the last
    /// sample of the files.
    pub struct FinalOffsets {
        /// Per-cpu discovery: a task's runqueue, and that runqueue's CPU.
        task_se_cfs_rq: Quiet "task_struct" "se.cfs_rq" 8 in percpu,
        cfs_rq_rq: Quiet "cfs_rq" "rq" 8 in percpu,
        rq_cpu: Quiet "rq" "cpu" 4 in percpu,
        /// PSI: cgroup.psi (a pointer), psi_group.pcpu, psi_group.total (PSI_AVGS row first),
        /// psi_group_cpu.times, .times_prev (PSI_AVGS row first), .state_mask.
        cgroup_psi: Quiet "cgroup" "psi" 8 in psi,
        psi_pcpu: Quiet "psi_group" "pcpu" 8 in psi,
        psi_total: Quiet "psi_group" "total" 0 in psi,
        psic_times: Quiet "psi_group_cpu" "times" 0 in psi,
        psic_times_prev: Quiet "psi_group_cpu" "times_prev" 0 in psi,
        psic_state_mask: Quiet "psi_group_cpu" "state_mask" 4 in psi,
        /// cgroup.subsys[], where the memory and pids controllers' states are (their css is
        /// the first member of their structs).
        cgroup_subsys: Quiet "cgroup" "subsys" 0,
        memcg_css: Quiet "mem_cgroup" "css" 0 in memory,
        /// mem_cgroup.memory.watermark, mem_cgroup.memory_events (fewer events on older
        /// kernels: the rest reads as the next fields), pids_cgroup.watermark.
        memcg_watermark: Quiet "mem_cgroup" "memory.watermark" 8 in memory,
        memcg_events: Quiet "mem_cgroup" "memory_events" 0 in memory,
        pids_css: Quiet "pids_cgroup" "css" 0 in pids,
        pids_watermark: Quiet "pids_cgroup" "watermark" 8 in pids,
        /// cgroup.bstat.cputime.sum_exec_runtime, the per-cpu base stats (before 6.15:
        /// cgroup.rstat_cpu, of type cgroup_rstat_cpu), and in them bstat/last_bstat.
        cgroup_bstat_sum: Quiet "cgroup" "bstat.cputime.sum_exec_runtime" 8 in rstat,
        cgroup_rstat_cpu: Quiet "cgroup" "rstat_base_cpu" 8 in rstat,
        rstatc_bstat_sum: Quiet "cgroup_rstat_base_cpu" "bstat.cputime.sum_exec_runtime" 8 in rstat,
        rstatc_last_bstat_sum: Quiet "cgroup_rstat_base_cpu" "last_bstat.cputime.sum_exec_runtime" 8 in rstat,
    }
    extra {
        /// NR_PSI_STATES (the last state, PSI_NONIDLE, weighs the others).
        nr_psi_states: u32 = 0,
        /// Indices of the memory and pids controllers in cgroup.subsys[].
        memory_cgrp_id: u32 = ABSENT,
        pids_cgrp_id: u32 = ABSENT,
        /// Number of possible CPUs to walk (at most MAX_CPUS).
        nr_cpus: u32 = 0,
        _pad: u32 = 0,
        /// Offsets of the per-cpu variables `runqueues` and `this_cpu_off` in the per-cpu
        /// section (per-cpu discovery).
        runqueues_secoff: u64 = u64::MAX,
        this_cpu_off_secoff: u64 = u64::MAX,
    }
}

/// CPUs walked for the per-cpu figures of a removed cgroup.
pub const MAX_CPUS: u32 = 256;
/// PSI states reported (io some/full, memory some/full, cpu some/full, irq full, nonidle).
pub const PSI_STATES: usize = 8;
/// memory.events counters copied (enum memcg_memory_event order).
pub const MEMCG_EVENTS: usize = 9;
