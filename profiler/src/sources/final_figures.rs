//! Figures read by the kernel at a cgroup's removal (profiler-ebpf final_figures.rs): the
//! PSI totals and cpu usage that the cgroup's per-CPU state holds, and memory.peak,
//! memory.events, pids.peak. The per-CPU areas are found once at start-up by an iterator.

use std::{io::Read as _, time::Duration};

use aya::{
    Ebpf,
    maps::{Array, MapData},
    programs::Iter,
};
use profiler_common::{ABSENT, FinalOffsets, MAX_CPUS, PSI_STATES};

use crate::{
    kernel_layout::{EnumNames, KernelBtf},
    loader::{program, take_map},
};

/// The iterator that finds each CPU's per-cpu offset and runqueue, and CONFIG_HZ's jiffies.
pub const PERCPU_DISCOVER: &str = "percpu_discover";

/// Each CPU's per-cpu area, and the kernel's tick rate, as the programs need them at removal.
pub struct PerCpu {
    offsets: Array<MapData, u64>,
    runqueues: Array<MapData, u64>,
    hz: Array<MapData, u64>,
    jiffy_probe: Array<MapData, u64>,
}

impl PerCpu {
    pub fn take(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        let mut array = |name: &str| -> anyhow::Result<Array<MapData, u64>> {
            Ok(Array::try_from(take_map(ebpf, name)?)?)
        };
        Ok(Self {
            offsets: array("PERCPU_OFFSETS")?,
            runqueues: array("PERCPU_RQ")?,
            hz: array("HZ")?,
            jiffy_probe: array("JIFFY_PROBE")?,
        })
    }

    /// Find each CPU's per-cpu offset (one pass of the percpu_discover iterator) and check
    /// them: every CPU's runqueue must sit at the same distance from its offset. Returns the
    /// CPUs found, or why the offsets cannot be trusted (they are then cleared, and the
    /// per-cpu figures at removal are not read).
    pub fn discover(&mut self, ebpf: &mut Ebpf, nr_cpus: u32) -> Result<u32, String> {
        run_discover(ebpf)?;
        // CONFIG_HZ: from the kernel's config, else measured from jiffies over 100 ms.
        let hz = match crate::host::kernel_hz() {
            Some(hz) => hz as u64,
            None => {
                let (j0, t0) = self.jiffy_probe();
                std::thread::sleep(Duration::from_millis(100));
                run_discover(ebpf)?;
                let (j1, t1) = self.jiffy_probe();
                let est = (j1.wrapping_sub(j0)) as f64 / ((t1.wrapping_sub(t0)) as f64 / 1e9);
                [100u64, 250, 300, 1000]
                    .into_iter()
                    .min_by(|a, b| (*a as f64 - est).abs().total_cmp(&(*b as f64 - est).abs()))
                    .filter(|&hz| (hz as f64 - est).abs() <= hz as f64 * 0.15)
                    .ok_or_else(|| format!("cannot tell CONFIG_HZ (measured {est:.0} jiffies/s)"))?
            }
        };
        self.hz.set(0, hz, 0).map_err(|e| e.to_string())?;
        let found: Vec<(u32, u64)> = (0..nr_cpus.min(MAX_CPUS))
            .map(|cpu| (cpu, self.offsets.get(&cpu, 0).unwrap_or(0)))
            .collect();
        let mut base = None;
        let mut n = 0;
        let mut bad = None;
        for &(cpu, off) in &found {
            let rq = self.runqueues.get(&cpu, 0).unwrap_or(0);
            if rq == 0 {
                continue; // offline or not seen: counted as unknown at removal
            }
            let b = rq.wrapping_sub(off);
            match base {
                None => base = Some(b),
                Some(x) if x != b => {
                    bad = Some(format!(
                        "CPU {cpu}'s runqueue is not where its per-cpu offset says"
                    ))
                }
                _ => {}
            }
            n += 1;
        }
        if let Some(why) =
            bad.or_else(|| (n == 0).then(|| "no CPU's per-cpu area was found".to_owned()))
        {
            for (cpu, _) in found {
                let _ = self.offsets.set(cpu, 0, 0);
            }
            return Err(why);
        }
        Ok(n)
    }

    /// (jiffies, ktime ns) as of the last percpu_discover pass.
    fn jiffy_probe(&self) -> (u64, u64) {
        (
            self.jiffy_probe.get(&0, 0).unwrap_or(0),
            self.jiffy_probe.get(&1, 0).unwrap_or(0),
        )
    }
}

/// One pass of the percpu_discover iterator.
fn run_discover(ebpf: &mut Ebpf) -> Result<(), String> {
    let iter: &mut Iter = program(ebpf, PERCPU_DISCOVER).map_err(|e| e.to_string())?;
    let link_id = iter.attach().map_err(|e| e.to_string())?;
    let link = iter.take_link(link_id).map_err(|e| e.to_string())?;
    let mut file = link.into_file().map_err(|e| e.to_string())?;
    let mut sink = Vec::new();
    file.read_to_end(&mut sink).map_err(|e| e.to_string())?;
    Ok(())
}

impl KernelBtf {
    /// Offsets for the figures read at a cgroup's removal. What this kernel lacks is ABSENT
    /// (and listed in `missing`), a group of fields used together as a whole: those figures
    /// then come from the last sample of the files.
    pub(crate) fn final_offsets(
        &self,
        missing: &mut Vec<String>,
    ) -> (FinalOffsets, EnumNames, EnumNames) {
        let mut f = FinalOffsets::ABSENT;
        let mut broken: Vec<&'static str> = Vec::new();
        for b in FinalOffsets::FIELDS {
            let found = self
                .field(b.ty, b.path)
                .filter(|&(_, sz)| b.size == 0 || sz == b.size);
            match (found, f.slot_mut(b.slot)) {
                (Some((off, _)), Some(slot)) => *slot = off,
                _ => match b.group {
                    Some(g) => broken.push(g),
                    None => missing.push(format!("{}.{}", b.ty, b.path)),
                },
            }
        }
        let off = |root: &str, path: &str| self.field(root, path).map(|(o, _)| o);
        // Before 6.15 the per-cpu base stats were cgroup.rstat_cpu, of type cgroup_rstat_cpu.
        if broken.contains(&"rstat")
            && let (Some(a), Some(b), Some(c), Some(d)) = (
                off("cgroup", "bstat.cputime.sum_exec_runtime"),
                off("cgroup", "rstat_cpu"),
                off("cgroup_rstat_cpu", "bstat.cputime.sum_exec_runtime"),
                off("cgroup_rstat_cpu", "last_bstat.cputime.sum_exec_runtime"),
            )
        {
            broken.retain(|g| *g != "rstat");
            (f.cgroup_bstat_sum, f.cgroup_rstat_cpu) = (a, b);
            (f.rstatc_bstat_sum, f.rstatc_last_bstat_sum) = (c, d);
        }
        // What the fields alone do not tell.
        match (
            self.percpu_var("runqueues"),
            self.percpu_var("this_cpu_off"),
        ) {
            (Some(r), Some(t)) => (f.runqueues_secoff, f.this_cpu_off_secoff) = (r, t),
            _ => broken.push("percpu"),
        }
        let states: Vec<(String, u32)> = self
            .enum_values("psi_states")
            .into_iter()
            .map(|(n, v)| (n, v as u32))
            .collect();
        let nr = states
            .iter()
            .find(|(n, _)| n == "NR_PSI_STATES")
            .map_or(0, |(_, v)| *v);
        let avgs = self
            .enum_values("psi_aggregators")
            .into_iter()
            .find(|(n, _)| n == "PSI_AVGS")
            .map(|(_, v)| v);
        if self.is_pointer("cgroup", "psi")
            && nr >= 2
            && nr as usize <= PSI_STATES
            && avgs == Some(0)
        {
            f.nr_psi_states = nr;
        } else {
            broken.push("psi");
        }
        let ids = self.enum_values("cgroup_subsys_id");
        let id_of = |n: &str| ids.iter().find(|(x, _)| x == n).map(|(_, v)| *v as u32);
        match id_of("memory_cgrp_id") {
            Some(id) if f.memcg_css == 0 => f.memory_cgrp_id = id,
            _ => broken.push("memory"),
        }
        match id_of("pids_cgrp_id") {
            Some(id) if f.pids_css == 0 => f.pids_cgrp_id = id,
            _ => broken.push("pids"),
        }
        broken.sort_unstable();
        broken.dedup();
        for g in broken {
            let mut names = Vec::new();
            for b in FinalOffsets::FIELDS.iter().filter(|b| b.group == Some(g)) {
                names.push(format!("{}.{}", b.ty, b.path));
                if let Some(slot) = f.slot_mut(b.slot) {
                    *slot = ABSENT;
                }
            }
            let what = match g {
                "percpu" => {
                    (f.runqueues_secoff, f.this_cpu_off_secoff) = (u64::MAX, u64::MAX);
                    names.push("per-cpu runqueues, this_cpu_off".into());
                    "per-cpu areas"
                }
                "psi" => {
                    f.nr_psi_states = 0;
                    names.push("enum psi_states, psi_aggregators".into());
                    "cgroup PSI internals"
                }
                "memory" => {
                    f.memory_cgrp_id = ABSENT;
                    "memory controller internals (memory.peak, memory.events)"
                }
                "pids" => {
                    f.pids_cgrp_id = ABSENT;
                    "pids controller internals (pids.peak)"
                }
                _ => "cgroup rstat internals (cpu usage)",
            };
            missing.push(format!("{what}: {}", names.join(", ")));
        }
        f.nr_cpus = crate::host::possible_cpus().min(MAX_CPUS);
        let events: Vec<(String, u32)> = self
            .enum_values("memcg_memory_event")
            .into_iter()
            .map(|(n, v)| (n, v as u32))
            .collect();
        (f, states, events)
    }
}
