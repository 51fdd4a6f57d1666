//! The sources of figures, one module each beside the kernel module of the same name in
//! profiler-ebpf/src/: its programs (the tracepoint each attaches to, the Linux version that
//! has it, when it is attached), its maps and how they are read, the kernel offsets only it
//! needs. The loader ([`crate::loader`]) loads and attaches what the sources list here.

pub mod block;
pub mod cgroup;
pub mod cgroup_files;
pub mod final_figures;
pub mod net;
pub mod sched;
mod table;
pub mod task;

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

/// Every tracepoint program but the block request's start (see [`block::START`]), in
/// loading order.
pub fn programs() -> impl Iterator<Item = &'static Program> {
    [
        cgroup::PROGRAMS,
        task::PROGRAMS,
        block::PROGRAMS,
        sched::PROGRAMS,
        net::INTERFACE_PROGRAMS,
    ]
    .into_iter()
    .flatten()
}

/// The programs of a stage.
pub fn at(stage: Stage) -> impl Iterator<Item = &'static str> {
    programs().filter(move |p| p.stage == stage).map(|p| p.name)
}

/// The task iterators: running tasks' counters, and the per-CPU areas.
pub const ITERATORS: &[&str] = &[task::SNAPSHOT, final_figures::PERCPU_DISCOVER];
pub const ITERATORS_SINCE: &str = "5.8";

/// The kernel's BPF statistics (`--bpf-stats`, kernel.bpf_stats_enabled).
pub const BPF_STATS_SINCE: &str = "5.8";
