//! The scheduler (profiler-ebpf sched.rs): each task's IO waits, and a dead task's last switch,
//! which adds its figures to its exec's totals. No map of its own: it writes the task's and
//! the exec's entries of the task and cgroup sources.

use super::{Program, Stage, p};

/// prev_state, which tells an IO wait from other sleeps, came in 5.18.
pub const PROGRAMS: &[Program] = &[p("sched_switch", "5.18", Stage::Task)];
