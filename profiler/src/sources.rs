//! The kernel programs, by the source of their figures: the tracepoint each one attaches to,
//! the Linux version that has it, and when it is attached. Listed once: loading, attaching and
//! the kernel check all read this table.

/// When a program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// First: from then on, new cgroups of the subtree are registered by the kernel.
    Cgroup,
    /// After the cgroups and the running tasks' baselines are in the maps.
    Task,
    /// Interface counters; optional (their figures are flagged where they cannot load).
    Interfaces,
}

/// A program on a BTF tracepoint of the same name.
#[derive(Clone, Copy, Debug)]
pub struct Program {
    pub name: &'static str,
    /// The first Linux version with the tracepoint (as the profiler needs it).
    pub since: &'static str,
    pub stage: Stage,
}

const fn p(name: &'static str, since: &'static str, stage: Stage) -> Program {
    Program { name, since, stage }
}

/// Every tracepoint program but the block request's start (see [`BLOCK_START`]).
pub const PROGRAMS: &[Program] = &[
    // cgroup lifecycle (profiler-ebpf cgroup.rs)
    p("cgroup_mkdir", "4.13", Stage::Cgroup),
    p("cgroup_rmdir", "4.13", Stage::Cgroup),
    p("cgroup_attach_task", "4.13", Stage::Task),
    // tasks (task.rs)
    p("sched_process_fork", "2.6.32", Stage::Task),
    p("sched_process_exec", "3.4", Stage::Task),
    p("sched_process_exit", "2.6.32", Stage::Task),
    // block IO (block.rs)
    p("block_rq_issue", "2.6.32", Stage::Task),
    p("block_rq_complete", "2.6.32", Stage::Task),
    // the scheduler: IO waits, tasks' last switch (sched.rs); prev_state came in 5.18
    p("sched_switch", "5.18", Stage::Task),
    // interfaces of the execs' own namespaces (net.rs)
    p("net_dev_xmit", "2.6.32", Stage::Interfaces),
    p("netif_receive_skb", "2.6.32", Stage::Interfaces),
];

/// Where block requests are tied to the exec that caused them: block_io_start, else
/// block_getrq with the request's first issue. Attached with the task programs.
pub const BLOCK_START: Program = p("block_io_start", "6.5", Stage::Task);
pub const BLOCK_START_FALLBACK: &str = "block_getrq";

/// The socket counters (cgroup_skb programs on the attached cgroup, as BPF links; optional).
pub const SOCK_INGRESS: &str = "sock_ingress";
pub const SOCK_EGRESS: &str = "sock_egress";
pub const SOCKET_PROGRAMS: &[&str] = &[SOCK_INGRESS, SOCK_EGRESS];
/// BPF links on cgroups, which let the socket counters run beside other programs.
pub const SOCKET_PROGRAMS_SINCE: &str = "5.7";

/// The task iterators: running tasks' counters, and the per-CPU areas.
pub const TASK_SNAPSHOT: &str = "task_snapshot";
pub const PERCPU_DISCOVER: &str = "percpu_discover";
pub const ITERATORS: &[&str] = &[TASK_SNAPSHOT, PERCPU_DISCOVER];
pub const ITERATORS_SINCE: &str = "5.8";

/// The kernel's BPF statistics (`--bpf-stats`, kernel.bpf_stats_enabled).
pub const BPF_STATS_SINCE: &str = "5.8";

/// The programs of a stage.
pub fn at(stage: Stage) -> impl Iterator<Item = &'static str> {
    PROGRAMS
        .iter()
        .filter(move |p| p.stage == stage)
        .map(|p| p.name)
}
