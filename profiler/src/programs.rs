//! Each exec broken down by program (docs/figures.md, "`programs`"): every process counted
//! under the program it ran, from every task record as it arrives (before any process is
//! folded away to bound memory), so that the programs' figures sum to the exec's.

use std::collections::{BTreeMap, HashMap};

use profiler_common::{TASK_LEADER, TaskCounters, TaskRecord};

use crate::{execs::Exit, record::ExitReport};

/// One program's share of an exec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProgramTotals {
    /// Processes that ran it and ended, and those still running.
    pub ended: u64,
    pub running: u64,
    pub counters: TaskCounters,
    /// Ended processes by outcome ("exit 0", "SIGKILL").
    pub exits: BTreeMap<String, u64>,
}

/// Distinct programs kept per exec; beyond, the new ones are counted as [`OVERFLOW`].
const MAX_PROGRAMS: usize = 4096;

/// The name of what is beyond [`MAX_PROGRAMS`].
pub const OVERFLOW: &str = "(more programs)";

/// The ended tasks of an exec, by program.
#[derive(Clone, Debug, Default)]
pub struct Programs {
    ended: HashMap<String, ProgramTotals>,
}

impl Programs {
    fn entry(&mut self, program: &str) -> &mut ProgramTotals {
        let key = if self.ended.contains_key(program) || self.ended.len() < MAX_PROGRAMS {
            program
        } else {
            OVERFLOW
        };
        self.ended.entry(key.to_owned()).or_default()
    }

    /// An ended task of a process that runs `program`: its counters, and the process's end
    /// when it is the leader.
    pub fn add_task(&mut self, program: &str, rec: &TaskRecord) {
        let t = self.entry(program);
        t.counters.add(&rec.counters);
        if rec.flags & TASK_LEADER != 0 {
            t.ended += 1;
            let exit = ExitReport::from(&Exit::of(rec)).summary();
            *t.exits.entry(exit).or_default() += 1;
        }
    }

    /// The totals with running processes' counters added (`live`: program, counters, and
    /// whether it is a running process, not threads of one that ended), most on-CPU first.
    pub fn with_live<'a>(
        &self,
        live: impl Iterator<Item = (&'a str, &'a TaskCounters, bool)>,
    ) -> Vec<(String, ProgramTotals)> {
        let mut all = self.clone();
        for (program, c, process) in live {
            let t = all.entry(program);
            t.counters.add(c);
            if process {
                t.running += 1;
            }
        }
        let mut v: Vec<(String, ProgramTotals)> = all.ended.into_iter().collect();
        v.sort_by(|a, b| {
            b.1.counters
                .oncpu_ns
                .cmp(&a.1.counters.oncpu_ns)
                .then_with(|| a.0.cmp(&b.0))
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::{COMM_LEN, EV_TASK_END};

    fn rec(tgid: u32, pid: u32, cpu: u64, exit_code: u32) -> TaskRecord {
        TaskRecord {
            kind: EV_TASK_END,
            pid,
            tgid,
            flags: if pid == tgid { TASK_LEADER } else { 0 },
            exec_id: 7,
            start_time_ns: 0,
            parent_tgid: 1,
            exit_code,
            comm: [0; COMM_LEN],
            counters: TaskCounters {
                oncpu_ns: cpu,
                ..Default::default()
            },
            max_rss_pages: 0,
            read_ns: 0,
        }
    }

    #[test]
    fn programs_sum_every_task_and_count_processes_and_outcomes() {
        let mut p = Programs::default();
        p.add_task("cc1", &rec(10, 11, 5, 0)); // a thread
        p.add_task("cc1", &rec(10, 10, 7, 0));
        p.add_task("cc1", &rec(12, 12, 3, 1 << 8));
        p.add_task("sh", &rec(13, 13, 1, 9));
        let running = TaskCounters {
            oncpu_ns: 100,
            ..Default::default()
        };
        let v = p.with_live([("ld", &running, true)].into_iter());
        let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ld", "cc1", "sh"]);
        let cc1 = &v[1].1;
        assert_eq!((cc1.ended, cc1.running, cc1.counters.oncpu_ns), (2, 0, 15));
        assert_eq!(cc1.exits["exit 0"], 1);
        assert_eq!(cc1.exits["exit 1"], 1);
        assert_eq!(v[2].1.exits["SIGKILL"], 1);
        assert_eq!((v[0].1.running, v[0].1.ended), (1, 0));
        let total: u64 = v.iter().map(|(_, t)| t.counters.oncpu_ns).sum();
        assert_eq!(total, 5 + 7 + 3 + 1 + 100);
    }

    #[test]
    fn programs_beyond_the_bound_are_counted_together() {
        let mut p = Programs::default();
        for i in 0..MAX_PROGRAMS + 10 {
            p.add_task(&format!("p{i}"), &rec(i as u32 + 1, i as u32 + 1, 1, 0));
        }
        let v = p.with_live(std::iter::empty());
        assert_eq!(v.len(), MAX_PROGRAMS + 1);
        let over = v.iter().find(|(n, _)| n == OVERFLOW).unwrap();
        assert_eq!(over.1.ended, 10);
    }
}
