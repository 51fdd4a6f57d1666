//! profiler: per-exec resource profiling of cgroup subtrees with eBPF.
//!
//! Data flow: kernel programs (profiler-ebpf) -> maps keyed by cgroup id ([`probes`]) ->
//! userspace model of execs ([`execs`], driven by [`monitor`], named by [`runtime`] and
//! [`ci`]) -> records ([`record`], shown by [`render`]) -> exporters ([`export`]). The command
//! line is [`cli`]; `profiler report` reads records back ([`build_report`]).

pub mod build_report;
pub mod cgroup;
pub mod cgroup_files;
pub mod ci;
pub mod cli;
pub mod clock;
#[cfg(test)]
mod docs_check;
pub mod execs;
pub mod export;
pub mod host;
pub mod kernel_layout;
pub mod monitor;
pub mod network;
#[cfg(test)]
mod outside_input;
pub mod probes;
pub mod programs;
pub mod record;
pub mod render;
pub mod resident;
pub mod runtime;
pub mod sources;
pub mod spawn;
