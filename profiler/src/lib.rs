//! profiler: per-exec resource profiling of cgroup subtrees with eBPF.
//!
//! Data flow: kernel programs (profiler-ebpf) -> maps keyed by cgroup id ([`probes`]) ->
//! userspace model of execs ([`execs`], driven by [`monitor`]) -> records ([`report`]).

pub mod build_report;
pub mod cgroup;
pub mod cgroup_files;
pub mod ci;
pub mod cli;
pub mod clock;
pub mod execs;
pub mod export;
pub mod kernel_layout;
pub mod monitor;
pub mod network;
pub mod probes;
pub mod report;
pub mod runtime;
pub mod spawn;
