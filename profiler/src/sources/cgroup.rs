//! Cgroup lifecycle (profiler-ebpf cgroup.rs): execs come and go with their cgroups. The
//! kernel registers each new cgroup of the subtree in `CGROUPS` and each new exec's totals in
//! a slot of `EXECS`; the profiler registers those already there, reads the totals, and frees
//! the slots of ended execs.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf,
    maps::{Array, Map, MapData},
};
use profiler_common::{
    CgroupEntry, CgroupSlot, EXEC_PROBES, EXEC_SLOT_HOLD_S, ExecStats, NO_SLOT, TABLE_PROBES,
};

use super::{Program, Stage, p, table::MappedArray};
use crate::loader::take_map;

pub const PROGRAMS: &[Program] = &[
    p("cgroup_mkdir", "4.13", Stage::Cgroup),
    p("cgroup_rmdir", "4.13", Stage::Cgroup),
    p("cgroup_attach_task", "4.13", Stage::Task),
];

/// Map sizes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_execs: u32,
    pub max_cgroups: u32,
    pub max_baselines: u32,
}

impl Limits {
    /// Slots of the exec and cgroup tables: twice the most followed at once, so that they are
    /// at most half full (see TABLE_PROBES in profiler-common).
    pub fn exec_slots(&self) -> u32 {
        self.max_execs.saturating_mul(2)
    }

    pub fn cgroup_slots(&self) -> u32 {
        self.max_cgroups.saturating_mul(2)
    }
}

/// The cgroup and exec tables.
pub struct ExecTables {
    cgroups: CgroupTable,
    exec_owners: MappedArray<u64>,
    _exec_owners_map: MapData,
    execs: Array<MapData, ExecStats>,
    /// Ended execs' slots, with when they may be freed (see `free_exec`).
    retired: VecDeque<(Instant, u64)>,
}

fn take_array(ebpf: &mut Ebpf, name: &str) -> Result<MapData> {
    match take_map(ebpf, name)? {
        Map::Array(m) => Ok(m),
        _ => Err(anyhow!("map {name} is not an array")),
    }
}

impl ExecTables {
    pub fn take(ebpf: &mut Ebpf, limits: &Limits) -> Result<Self> {
        let cgroups = CgroupTable {
            map: take_array(ebpf, "CGROUPS")?,
            len: limits.cgroup_slots(),
            view: None,
        };
        // The programs refer to the map by its fd, which stays open with it.
        let exec_owners_map = take_array(ebpf, "EXEC_OWNERS")?;
        let exec_owners = MappedArray::new(&exec_owners_map, limits.exec_slots())?;
        let execs = Array::try_from(Map::Array(take_array(ebpf, "EXECS")?))?;
        Ok(Self {
            cgroups,
            exec_owners,
            _exec_owners_map: exec_owners_map,
            execs,
            retired: VecDeque::new(),
        })
    }

    /// Register a cgroup of the subtree (already registered by the kernel is fine).
    pub fn add_cgroup(&mut self, id: u64, exec_id: u64, depth: u32) -> Result<()> {
        let slot = if exec_id == id {
            self.exec_owners
                .take_slot(id, EXEC_PROBES, 0)
                .context("the exec table is full (raise --max-execs)")?
                .0 as u32
        } else {
            self.entry(exec_id).map_or(NO_SLOT, |e| e.slot)
        };
        let cgroups = self.cgroups.view()?;
        let (j, new) = cgroups
            .take_slot(id, TABLE_PROBES, u64::MAX)
            .context("the cgroup table is full (raise --max-cgroups)")?;
        if new {
            let entry = CgroupEntry {
                exec_id,
                depth,
                slot,
            };
            // SAFETY: the slot is ours (owner is the placeholder) until its owner is set.
            unsafe { cgroups.write_field(j, 8, entry) };
            cgroups.set_owner(j, id);
        }
        Ok(())
    }

    /// A cgroup's entry.
    pub fn entry(&mut self, id: u64) -> Option<CgroupEntry> {
        let cgroups = self.cgroups.view().ok()?;
        let j = cgroups.find_slot(id, TABLE_PROBES)?;
        Some(cgroups.read(j).entry)
    }

    /// Forget a cgroup (its exec has been reported).
    pub fn forget_cgroup(&mut self, id: u64) {
        let cgroups = match self.cgroups.view() {
            Ok(c) => c,
            Err(e) => {
                log::warn!("cannot free a cgroup's slot: {e:#}");
                return;
            }
        };
        // Only the owner goes: a program may still be reading the entry, and the next to take
        // the slot writes its own before it sets its owner.
        if let Some(j) = cgroups.find_slot(id, TABLE_PROBES) {
            cgroups.set_owner(j, 0);
        }
    }

    /// Done with the cgroup table for now (see [`CgroupTable`]).
    pub fn unmap_cgroups(&mut self) {
        self.cgroups.view = None;
    }

    /// An exec's totals so far.
    pub fn exec_stats(&self, exec_id: u64) -> Option<ExecStats> {
        let j = self.exec_owners.find_slot(exec_id, EXEC_PROBES)?;
        self.execs.get(&(j as u32), 0).ok()
    }

    /// An exec has been reported and its cgroups forgotten: its slot is freed some seconds
    /// later (see EXEC_SLOT_HOLD_S in profiler-common).
    pub fn free_exec(&mut self, exec_id: u64) {
        self.retired.push_back((
            Instant::now() + Duration::from_secs(EXEC_SLOT_HOLD_S),
            exec_id,
        ));
        self.release_retired();
    }

    /// Free the slots whose time has come: zeroed (the next exec starts from zero), then
    /// ownerless.
    pub fn release_retired(&mut self) {
        let now = Instant::now();
        while let Some(&(at, exec_id)) = self.retired.front() {
            if at > now {
                break;
            }
            self.retired.pop_front();
            let Some(j) = self.exec_owners.find_slot(exec_id, EXEC_PROBES) else {
                continue;
            };
            if let Err(e) = self.execs.set(j as u32, ExecStats::default(), 0) {
                log::warn!("cannot reset an exec's slot: {e}");
                continue; // the slot stays taken rather than carry old counts
            }
            self.exec_owners.set_owner(j, 0);
        }
    }
}

/// The cgroup table, mapped into the profiler only while it takes or frees slots (at start-up,
/// and in batches when execs end): a mapped BPF array counts whole in the resident set
/// (32,768 slots: 1 MiB).
struct CgroupTable {
    map: MapData,
    len: u32,
    view: Option<MappedArray<CgroupSlot>>,
}

impl CgroupTable {
    fn view(&mut self) -> Result<&MappedArray<CgroupSlot>> {
        if self.view.is_none() {
            self.view = Some(MappedArray::new(&self.map, self.len)?);
        }
        Ok(self.view.as_ref().expect("mapped above"))
    }
}
