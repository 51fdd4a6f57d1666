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
    /// Size in bytes the programs read.
    pub size: usize,
    pub need: Need,
    /// Resolved only when this other slot was (a struct reached through it).
    pub after: Option<&'static str>,
}

/// Declares an offsets struct of u32 slots: `slot: Need "struct" "member.path" size,` (with
/// `after other_slot` when reached through another field), then `extra` slots resolved by hand,
/// with their defaults.
macro_rules! btf_offsets {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $slot:ident: $need:ident $ty:literal $path:literal $size:literal $(after $dep:ident)?, )*
        }
        extra { $( $(#[$emeta:meta])* $eslot:ident = $edefault:expr, )* }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $slot: u32, )*
            $( $(#[$emeta])* pub $eslot: u32, )*
        }

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
        mm_arg_start: Optional "mm_struct" "arg_start" 8,
        mm_arg_end: Optional "mm_struct" "arg_end" 8,
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
        /// When the block layer made the request (0 without I/O stats); without it the programs
        /// read the clock.
        rq_start_time_ns: Quiet "request" "start_time_ns" 8,
        /// When the block layer last issued the request, stamped just after block_rq_issue
        /// (0 until its first issue, and without I/O statistics on the queue).
        rq_io_start_time_ns: Quiet "request" "io_start_time_ns" 8,
        bio_opf: Optional "bio" "bi_opf" 4,
        bio_blkg: Optional "bio" "bi_blkg" 8,
        blkg_blkcg: Optional "blkcg_gq" "blkcg" 8,
        blkcg_css_cgroup: Optional "blkcg" "css.cgroup" 8,
    }
    extra {
        /// Byte holding the `in_iowait` bitfield, and the bit's mask within it.
        task_in_iowait_byte = ABSENT,
        task_in_iowait_mask = 0,
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
