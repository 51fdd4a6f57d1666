//! An exec's processes: each with its program, its figures and how it ended, in a table
//! bounded per exec.

use std::collections::HashMap;

use profiler_common::{TASK_LEADER, TASK_OOM_VICTIM, TASK_PARTIAL, TaskCounters, TaskRecord};

use super::{ProcCounters, events::cstr};
use crate::programs::{ProgramTotals, Programs};

/// One process of an exec (all its threads).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Proc {
    pub tgid: u32,
    pub comm: String,
    pub args: String,
    /// The program it runs: the name the kernel gave it at its execve (the executable's file
    /// name), else its parent's, else its name when first seen.
    pub program: String,
    pub threads: u32,
    pub counters: TaskCounters,
    pub ended: bool,
    /// How it ended (its leader's record), once it has.
    pub exit: Option<Exit>,
}

/// How a process ended: the wait status its parent got, whether the OOM killer chose it, and
/// its peak resident set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exit {
    pub status: u32,
    pub oom_killed: bool,
    pub max_rss_pages: u64,
}

/// An exec's main program: the first it ran (a runtime's own init aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainProgram {
    pub tgid: u32,
    /// Its execve (CLOCK_MONOTONIC).
    pub started_ns: u64,
    /// How its process ended, and when (its leader's last switch).
    pub exit: Option<Exit>,
    pub ended_ns: Option<u64>,
}

impl Exit {
    pub fn of(rec: &TaskRecord) -> Self {
        Self {
            status: rec.exit_code,
            oom_killed: rec.flags & TASK_OOM_VICTIM != 0,
            max_rss_pages: rec.max_rss_pages,
        }
    }
}

impl Proc {
    pub fn cpu(&self) -> u64 {
        self.counters.oncpu_ns
    }
    pub fn io(&self) -> u64 {
        self.counters.rchar + self.counters.wchar
    }
    pub fn stall(&self) -> u64 {
        let c = &self.counters;
        c.runq_ns + c.iowait_ns + c.swapin_ns + c.reclaim_ns + c.thrashing_ns
    }
}

/// The processes of one exec, bounded: ended processes beyond `keep` that rank low on CPU,
/// IO and stall are folded into `other`.
#[derive(Clone, Debug, Default)]
pub struct ProcTable {
    live: HashMap<u32, Proc>,
    done: Vec<Proc>,
    pub other_count: u64,
    pub other: TaskCounters,
    keep: usize,
    /// Every ended task's figures by program, whatever was folded away.
    programs: Programs,
}

/// Live processes kept per exec before the excess is folded into `other`.
const MAX_LIVE: usize = 32768;

impl ProcTable {
    pub fn new(keep: usize) -> Self {
        Self {
            keep: keep.max(3),
            ..Default::default()
        }
    }

    fn live_entry(&mut self, tgid: u32) -> &mut Proc {
        if self.live.len() >= MAX_LIVE && !self.live.contains_key(&tgid) {
            // Far more live processes than any report shows: fold an arbitrary one away.
            if let Some(&k) = self.live.keys().next() {
                let p = self.live.remove(&k).unwrap();
                self.other_count += 1;
                self.other.add(&p.counters);
            }
        }
        self.live.entry(tgid).or_insert_with(|| Proc {
            tgid,
            ..Default::default()
        })
    }

    /// A process with no command line of its own (no execve seen) runs its parent's
    /// program: it takes the parent's command line when the parent is known. Not one that was
    /// running before the profiler saw it (a partial record), whose execve may have come first.
    fn inherit_command(&mut self, rec: &TaskRecord) {
        let (tgid, parent_tgid) = (rec.tgid, rec.parent_tgid);
        if parent_tgid == tgid
            || rec.flags & TASK_PARTIAL != 0
            || self.live.get(&tgid).is_some_and(|p| !p.args.is_empty())
        {
            return;
        }
        let Some(parent) = self.live.get(&parent_tgid).filter(|p| !p.args.is_empty()) else {
            return;
        };
        let (comm, args, program) = (
            parent.comm.clone(),
            parent.args.clone(),
            parent.program.clone(),
        );
        let p = self.live_entry(tgid);
        p.args = args;
        if p.comm.is_empty() {
            p.comm = comm;
        }
        if p.program.is_empty() {
            p.program = program;
        }
    }

    /// A running process, from a snapshot record of its leader: known from now on, with its
    /// name, and its parent's command line if it has not called execve.
    pub fn on_running(&mut self, rec: &TaskRecord) {
        if self.done.iter().any(|p| p.tgid == rec.tgid) {
            return;
        }
        self.inherit_command(rec);
        let p = self.live_entry(rec.tgid);
        if p.comm.is_empty() {
            p.comm = cstr(&rec.comm);
        }
        if p.program.is_empty() {
            p.program = p.comm.clone();
        }
    }

    pub fn on_exec(&mut self, tgid: u32, comm: String, args: String) {
        let p = self.live_entry(tgid);
        p.program = comm.clone();
        p.comm = comm;
        p.args = args;
    }

    /// Command line of a process that was already running at attach.
    pub fn set_args_if_unknown(&mut self, tgid: u32, comm: &str, args: String) {
        let p = self.live_entry(tgid);
        if p.args.is_empty() {
            p.args = args;
        }
        if p.comm.is_empty() {
            p.comm = comm.to_owned();
        }
    }

    pub fn on_task_end(&mut self, rec: &TaskRecord) {
        let comm = cstr(&rec.comm);
        if let Some(p) = self.done.iter_mut().find(|p| p.tgid == rec.tgid) {
            // A thread freed after its process's leader.
            p.counters.add(&rec.counters);
            p.threads += 1;
            self.programs.add_task(&p.program, rec);
            return;
        }
        if rec.flags & TASK_LEADER != 0 {
            self.inherit_command(rec);
        }
        let p = self.live_entry(rec.tgid);
        if p.program.is_empty() {
            p.program = comm.clone();
        }
        let program = p.program.clone();
        p.counters.add(&rec.counters);
        p.threads += 1;
        self.programs.add_task(&program, rec);
        let p = self.live_entry(rec.tgid);
        if rec.flags & TASK_LEADER != 0 {
            p.comm = comm; // the final name (after any execve)
            p.ended = true;
            p.exit = Some(Exit::of(rec));
            let p = self.live.remove(&rec.tgid).unwrap();
            self.done.push(p);
            if self.done.len() > 2 * self.keep {
                self.compact();
            }
        } else if p.comm.is_empty() {
            p.comm = comm;
        }
    }

    /// Keep the processes that rank in the top third of `keep` by CPU, IO or stall.
    fn compact(&mut self) {
        let n = (self.keep / 3).max(1);
        let mut keep = vec![false; self.done.len()];
        for metric in [Proc::cpu as fn(&Proc) -> u64, Proc::io, Proc::stall] {
            let mut idx: Vec<usize> = (0..self.done.len()).collect();
            idx.sort_by_key(|&i| std::cmp::Reverse(metric(&self.done[i])));
            for &i in idx.iter().take(n) {
                keep[i] = true;
            }
        }
        let mut kept = Vec::with_capacity(self.keep);
        for (p, k) in std::mem::take(&mut self.done).into_iter().zip(keep) {
            if k {
                kept.push(p);
            } else {
                self.other_count += 1;
                self.other.add(&p.counters);
            }
        }
        self.done = kept;
    }

    /// All processes: ended ones and, with `live` snapshot counters, running ones.
    pub fn processes(&self, live_counters: &ProcCounters) -> Vec<Proc> {
        let mut out = self.done.clone();
        for p in self.live.values() {
            let mut p = p.clone();
            if let Some((c, threads)) = live_counters.get(&p.tgid) {
                p.counters.add(c);
                p.threads += threads;
            }
            out.push(p);
        }
        // Running processes seen only through threads in the snapshot (the leader has exited).
        for (tgid, (c, threads)) in live_counters {
            if !self.live.contains_key(tgid) && !self.done.iter().any(|p| p.tgid == *tgid) {
                out.push(Proc {
                    tgid: *tgid,
                    threads: *threads,
                    counters: *c,
                    ..Default::default()
                });
            }
        }
        out
    }

    /// Every program of the exec with its totals, running processes' `live_counters` added;
    /// most on-CPU first.
    pub fn programs(&self, live_counters: &ProcCounters) -> Vec<(String, ProgramTotals)> {
        let program_of = |tgid: &u32| -> (&str, bool) {
            match self.live.get(tgid) {
                Some(p) => (p.program.as_str(), true),
                // Threads of a process whose leader has ended.
                None => (
                    self.done
                        .iter()
                        .find(|p| p.tgid == *tgid)
                        .map_or("", |p| p.program.as_str()),
                    false,
                ),
            }
        };
        self.programs
            .with_live(live_counters.iter().map(|(tgid, (c, _))| {
                let (program, running) = program_of(tgid);
                (program, c, running)
            }))
    }

    /// Processes that ran in the exec, including those folded into `other`.
    pub fn known(&self) -> usize {
        self.done.len() + self.live.len() + self.other_count as usize
    }
}

/// The union of the top `n` processes by CPU, by IO and by stall, ordered by CPU; `n == 0`
/// keeps them all.
pub fn top_processes(procs: &mut [Proc], n: usize) -> Vec<Proc> {
    if n == 0 || procs.len() <= n {
        let mut v = procs.to_vec();
        v.sort_by_key(|p| (std::cmp::Reverse(p.cpu()), p.tgid));
        return v;
    }
    let mut chosen: Vec<u32> = Vec::new();
    for metric in [Proc::cpu as fn(&Proc) -> u64, Proc::io, Proc::stall] {
        procs.sort_by_key(|p| std::cmp::Reverse(metric(p)));
        for p in procs.iter().take(n) {
            if metric(p) > 0 && !chosen.contains(&p.tgid) {
                chosen.push(p.tgid);
            }
        }
    }
    let mut v: Vec<Proc> = procs
        .iter()
        .filter(|p| chosen.contains(&p.tgid))
        .cloned()
        .collect();
    v.sort_by_key(|p| (std::cmp::Reverse(p.cpu()), p.tgid));
    v
}

#[cfg(test)]
mod tests {
    use profiler_common::EV_TASK_SNAPSHOT;

    use super::*;
    use crate::execs::tests::task;

    #[test]
    fn threads_merge_into_their_process() {
        let mut t = ProcTable::new(10);
        t.on_exec(100, "cc1".into(), "cc1 -O2".into());
        t.on_task_end(&task(100, 101, 5, "cc1"));
        t.on_task_end(&task(100, 100, 7, "cc1"));
        // A thread freed after its leader still joins the process.
        t.on_task_end(&task(100, 102, 1, "cc1"));
        let p = t.processes(&HashMap::new());
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].counters.oncpu_ns, 13);
        assert_eq!(p[0].threads, 3);
        assert_eq!(p[0].args, "cc1 -O2");
        assert!(p[0].ended);
    }

    #[test]
    fn forked_child_inherits_command_until_exec() {
        let mut t = ProcTable::new(10);
        t.on_exec(1, "make".into(), "make -j2".into());
        // Running, seen in a snapshot: the parent's command line and its own name.
        let mut running = task(2, 2, 0, "make");
        running.kind = EV_TASK_SNAPSHOT;
        t.on_running(&running);
        // Ended without a snapshot: the parent's command line too.
        t.on_task_end(&task(3, 3, 1, "make"));
        // A child that called execve keeps its own.
        t.on_exec(4, "cc1".into(), "cc1 -O2".into());
        t.on_task_end(&task(4, 4, 1, "cc1"));
        // One running before the profiler saw it may have called execve unseen.
        let mut partial = task(5, 5, 1, "sh");
        partial.flags |= TASK_PARTIAL;
        t.on_task_end(&partial);
        let p = t.processes(&HashMap::new());
        let args = |tgid| p.iter().find(|p| p.tgid == tgid).unwrap().args.clone();
        assert_eq!(args(2), "make -j2");
        assert_eq!(args(3), "make -j2");
        assert_eq!(args(4), "cc1 -O2");
        assert_eq!(args(5), "");
        assert_eq!(p.iter().find(|p| p.tgid == 2).unwrap().comm, "make");
    }

    #[test]
    fn table_stays_bounded_and_keeps_the_top() {
        let mut t = ProcTable::new(30);
        for i in 1..=10_000u32 {
            t.on_task_end(&task(i, i, i as u64, "x"));
        }
        let p = t.processes(&HashMap::new());
        assert!(p.len() <= 60, "{}", p.len());
        assert!(
            p.iter().any(|p| p.tgid == 10_000),
            "the biggest CPU user is kept"
        );
        let total: u64 = p.iter().map(|p| p.cpu()).sum::<u64>() + t.other.oncpu_ns;
        assert_eq!(total, (1..=10_000u64).sum::<u64>(), "nothing is lost");
        assert_eq!(t.known(), 10_000);
    }
}
