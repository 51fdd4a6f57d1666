//! Tasks (profiler-ebpf task.rs): fork, exec and exit give the processes, their CPU and IO at
//! exit and their first argv; the task iterator gives the counters of the tasks still running,
//! and at start-up the baselines they are counted from.

use std::io::Read as _;

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
    programs::Iter,
};
use profiler_common::{TaskBaseline, TaskRecord};

use super::{Program, Stage, p};
use crate::loader::{program, take_map};

pub const PROGRAMS: &[Program] = &[
    p("sched_process_fork", "2.6.32", Stage::Task),
    p("sched_process_exec", "3.4", Stage::Task),
    p("sched_process_exit", "2.6.32", Stage::Task),
];

/// The task iterator that reads running tasks' counters.
pub const SNAPSHOT: &str = "task_snapshot";

/// The counters of tasks that ran before the profiler attached, as they were then.
pub struct Baselines(HashMap<MapData, u32, TaskBaseline>);

impl Baselines {
    pub fn take(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(Self(HashMap::try_from(take_map(ebpf, "BASELINES")?)?))
    }

    pub fn insert(&mut self, pid: u32, b: TaskBaseline) -> Result<()> {
        Ok(self.0.insert(pid, b, 0)?)
    }
}

/// Live counters of every task in the subtree (one pass of the task iterator).
pub fn snapshot(ebpf: &mut Ebpf) -> Result<Vec<TaskRecord>> {
    let iter: &mut Iter = program(ebpf, SNAPSHOT)?;
    let link_id = iter.attach().context("cannot create the task iterator")?;
    let link = iter.take_link(link_id)?;
    let mut file = link.into_file().context("cannot open the task iterator")?;
    let mut buf = Vec::with_capacity(64 * 1024);
    file.read_to_end(&mut buf)
        .context("cannot read the task iterator")?;
    let size = size_of::<TaskRecord>();
    if buf.len() % size != 0 {
        bail!(
            "task iterator returned {} bytes, not a multiple of {size}",
            buf.len()
        );
    }
    Ok(buf
        .chunks_exact(size)
        // SAFETY: TaskRecord is plain data and each chunk has its size.
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const TaskRecord) })
        .collect())
}
