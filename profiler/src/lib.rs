//! profiler: per-exec resource profiling of cgroup subtrees with eBPF.
//!
//! Data flow: kernel programs (profiler-ebpf) -> maps keyed by cgroup id ([`sources`], loaded by [`loader`]) ->
//! userspace model of execs ([`execs`], driven by [`monitor`], named by [`runtime`] and
//! [`ci`]) -> records ([`record`], shown by [`render`]) -> exporters ([`export`]). The command
//! line is [`cli`]; `profiler report` reads records back ([`report`]).

pub mod cgroup;
pub mod ci;
pub mod cli;
pub mod clock;
pub mod diagnostics;
#[cfg(test)]
mod docs_check;
pub mod execs;
pub mod export;
pub mod host;
pub mod kernel_layout;
pub mod loader;
pub mod monitor;
#[cfg(test)]
mod outside_input;
pub mod programs;
pub mod record;
pub mod render;
pub mod report;
pub mod resident;
pub mod runtime;
pub mod sources;
pub mod spawn;
pub mod step;
