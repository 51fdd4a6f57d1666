//! Start-up: the checks before anything is loaded, then loading, registering the cgroups and
//! tasks already there, and attaching, in the order that loses nothing in between.

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use profiler_common::{
    Config, DROP_COUNTERS, NAMED_PREFIX, NAMED_RULES, TASK_LEADER, TaskBaseline,
};

use super::{Monitor, NamedExecs, Options};
use crate::{
    cgroup::{self, Hierarchy},
    clock::monotonic_ns,
    execs::{Execs, args_summary},
    host::{check_privileges, enable_delay_accounting, kernel_release, own_netns_inum},
    kernel_layout::{KernelBtf, KernelLayout, aya_btf},
    loader::Probes,
    runtime::Resolver,
    sources::block,
    sources::cgroup_files::{FinalNames, Layout as FileLayout},
};

/// What start-up checks and decides before anything is loaded.
struct Preflight {
    hierarchy: Hierarchy,
    layout: KernelLayout,
    config: Config,
    /// Degraded figures, repeated in every record.
    notes: Vec<String>,
    /// How this host is measured, said once at start.
    notices: Vec<String>,
}

/// The kernel and privilege checks, and the settings the programs are loaded with: each
/// failure is one line saying what is missing.
fn preflight(opts: &Options) -> Result<Preflight> {
    check_privileges()?;
    crate::clock::unix_offset_ns(); // fixed from now on for this run's records
    let hierarchy = Hierarchy::find()?;
    let kbtf = KernelBtf::open(&opts.btf)?;
    let release = kernel_release();
    let block_getrq_fallback = kbtf.preflight(&release)?;
    let layout = kbtf.layout()?;
    drop(kbtf);
    let controllers = hierarchy.controllers();
    let blkcg = controllers.iter().any(|c| c == "io") && controllers.iter().any(|c| c == "memory");
    let attribution = if blkcg {
        "block IO is charged to the cgroup of each bio's blkcg (cgroup writeback: buffered \
         writes go to the exec that dirtied them)"
    } else {
        "block IO is charged to the submitting task's exec (no io+memory controllers in \
         cgroup v2, so no cgroup writeback: buffered writes flushed later by writeback are \
         not charged to any exec)"
    };
    let base_id = cgroup::cgroup_id(&opts.cgroup)?;
    let mut config = Config {
        base_cgroup_id: base_id,
        exec_depth: opts.exec_depth,
        blkcg_attribution: blkcg as u32,
        block_getrq_fallback: block_getrq_fallback as u32,
        host_netns_inum: own_netns_inum()?,
        exec_slots: opts.limits.exec_slots(),
        cgroup_slots: opts.limits.cgroup_slots(),
        named_parent_id: [0; NAMED_RULES],
        named_prefix_len: [0; NAMED_RULES],
        named_prefix: [[0; NAMED_PREFIX]; NAMED_RULES],
    };
    set_named_rules(&mut config, &hierarchy, &opts.named)?;
    let mut notes: Vec<String> = layout
        .missing
        .iter()
        .map(|f| format!("kernel {release} lacks {f}: figures that need it are zero"))
        .collect();
    notes.extend(enable_delay_accounting());
    let mut notices = vec![attribution.to_owned()];
    if block_getrq_fallback {
        notices.push(format!(
            "kernel {release} lacks {} (Linux {}+): block requests are tied to their exec \
             at {} and counted from their first issue",
            block::START.name,
            block::START.since,
            block::START_FALLBACK
        ));
    }

    Ok(Preflight {
        hierarchy,
        layout,
        config,
        notes,
        notices,
    })
}

impl Monitor {
    pub fn start(opts: Options, resolver: Option<Resolver>) -> Result<Self> {
        let Preflight {
            hierarchy,
            layout,
            config,
            notes,
            mut notices,
        } = preflight(&opts)?;
        let mut probes = Probes::load(&layout, config, opts.limits, aya_btf(&opts.btf)?)?;
        match probes.discover_percpu(layout.finals.nr_cpus) {
            Ok(_) => {}
            Err(why) => notices.push(format!(
                "final PSI totals and cpu usage at an exec's removal are not read ({why}): they come from the last sample"
            )),
        }
        probes.attach_cgroup_programs()?;
        let base_path = hierarchy.kernel_path(&opts.cgroup);
        let mut execs = Execs::new(&base_path, opts.keep_procs);
        register_existing(&mut probes, &mut execs, &hierarchy, &opts)?;
        probes.tables.unmap_cgroups();
        let file_layout = FileLayout::discover(&hierarchy.mount);
        let partial_procs = take_baselines(&mut probes, &mut execs)?;
        probes.attach_task_programs()?;
        let cgroup_dir = fs::File::open(&opts.cgroup)
            .with_context(|| format!("cannot open {}", opts.cgroup.display()))?;
        probes.attach_net_programs(&cgroup_dir);
        for (what, status) in [
            ("socket", &probes.net.status.sockets),
            ("interface", &probes.net.status.interfaces),
        ] {
            if let Err(why) = status {
                notices.push(format!("no per-exec {what} traffic: {why}"));
            }
        }
        for (exec, tgid) in partial_procs {
            if let Some(e) = execs.get_mut(exec) {
                let (comm, args) = proc_cmdline(tgid);
                e.procs.set_args_if_unknown(tgid, &comm, args);
            }
        }
        let mut mon = Self {
            probes,
            execs,
            files: HashMap::new(),
            net_faults: HashMap::new(),
            file_layout,
            final_names: FinalNames {
                psi_states: layout.psi_states.clone(),
                memcg_events: layout.memcg_events.clone(),
            },
            opts,
            forget: Vec::new(),
            layout,
            drops_seen: [0; DROP_COUNTERS as usize],
            sweeps: 0,
            notes,
            notices,
            resolver,
            metadata_pending: HashSet::new(),
            late_asks: Vec::new(),
            envs: HashMap::new(),
            drains: 0,
        };
        for id in mon.execs.ids() {
            mon.open_files(id);
            mon.request_metadata(id);
        }
        // Parsing the kernel's BTF (twice: layout, loader) took tens of MiB that are free now;
        // glibc keeps freed heap unless asked to return it.
        // SAFETY: no arguments beyond the pad size; only releases free memory.
        unsafe { libc::malloc_trim(0) };
        Ok(mon)
    }
}

/// The kernel programs' rules for execs picked by name: each parent's id, and the path from
/// the root that a name in it begins with ("/buildah-buildah").
fn set_named_rules(config: &mut Config, h: &Hierarchy, named: &[NamedExecs]) -> Result<()> {
    anyhow::ensure!(
        named.len() <= NAMED_RULES,
        "at most {NAMED_RULES} rules pick execs by name"
    );
    for (i, n) in named.iter().enumerate() {
        let parent = h.kernel_path(&n.parent);
        let prefix = format!("{}/{}", parent.trim_end_matches('/'), n.prefix);
        anyhow::ensure!(
            prefix.len() <= NAMED_PREFIX,
            "the cgroup path prefix {prefix} is longer than {NAMED_PREFIX} bytes"
        );
        config.named_parent_id[i] = cgroup::cgroup_id(&n.parent)?;
        config.named_prefix_len[i] = prefix.len() as u32;
        config.named_prefix[i][..prefix.len()].copy_from_slice(prefix.as_bytes());
    }
    Ok(())
}

/// The execs picked by name that exist already: each at depth 1, its subtree rolled up.
fn register_named(
    probes: &mut Probes,
    execs: &mut Execs,
    h: &Hierarchy,
    named: &NamedExecs,
) -> Result<()> {
    let Ok(dir) = fs::read_dir(&named.parent) else {
        return Ok(());
    };
    let now = monotonic_ns();
    for e in dir.flatten() {
        let name = e.file_name();
        let path = e.path();
        if !name.to_string_lossy().starts_with(&named.prefix) || !path.is_dir() {
            continue;
        }
        let mut exec = None;
        let walked = cgroup::walk(&path, &mut |f| {
            let rel = f.path.strip_prefix(&path).unwrap_or(Path::new(""));
            let depth = 1 + rel.components().count() as u32;
            let exec_id = *exec.get_or_insert(f.id);
            register(probes, execs, h, f, exec_id, depth, now)
        });
        // Removed meanwhile: nothing to register (its mkdir had not been seen either).
        if walked.is_err() && path.exists() {
            return walked;
        }
    }
    Ok(())
}

/// Register the cgroups already in the subtree: execs down to exec depth, deeper ones rolled
/// up. Each cgroup is registered before its children are listed, so that children created
/// meanwhile are caught by the cgroup_mkdir program instead. With `only_nests`, the subtrees
/// of the outermost nests instead, each nest an exec of its own.
fn register_existing(
    probes: &mut Probes,
    execs: &mut Execs,
    h: &Hierarchy,
    opts: &Options,
) -> Result<()> {
    for n in &opts.named {
        register_named(probes, execs, h, n)?;
    }
    if !opts.only_nests {
        return register_tree(probes, execs, h, opts, &opts.cgroup);
    }
    for top in &opts.nests {
        let inner = opts.nests.iter().any(|n| n != top && top.starts_with(n));
        if !inner {
            register_tree(probes, execs, h, opts, top)?;
        }
    }
    Ok(())
}

/// One watched tree: `base` at depth 0 (an exec), its nests at depth 0 inside it (rolled into
/// `base`'s exec: the cgroups made in them later are execs).
fn register_tree(
    probes: &mut Probes,
    execs: &mut Execs,
    h: &Hierarchy,
    opts: &Options,
    base: &Path,
) -> Result<()> {
    let mut ids: HashMap<PathBuf, u64> = HashMap::new();
    let now = monotonic_ns();
    cgroup::walk(base, &mut |f| {
        ids.insert(f.path.clone(), f.id);
        if f.path != base && opts.nests.contains(&f.path) {
            let root = ids[base];
            probes.tables.add_cgroup(f.id, root, 0)?;
            execs.add_rolled_up(f.id, root);
            return Ok(());
        }
        // Depth counts from the innermost nest the cgroup is in, else from the base.
        let top = opts
            .nests
            .iter()
            .filter(|n| f.path.starts_with(n) && n.starts_with(base))
            .max_by_key(|n| n.components().count())
            .map_or(base, |n| n.as_path());
        let rel = f.path.strip_prefix(top).unwrap_or(Path::new(""));
        let depth = rel.components().count() as u32;
        let exec_id = if depth <= opts.exec_depth {
            f.id
        } else {
            // The ancestor at exec depth.
            let anc: PathBuf = top.join(
                rel.components()
                    .take(opts.exec_depth as usize)
                    .collect::<PathBuf>(),
            );
            *ids.get(&anc)
                .context("ancestor of a cgroup vanished during the walk")?
        };
        register(probes, execs, h, f, exec_id, depth, now)
    })
}

/// One cgroup found at start: in the kernel's table, and an exec or rolled into one.
fn register(
    probes: &mut Probes,
    execs: &mut Execs,
    h: &Hierarchy,
    f: &cgroup::Found,
    exec_id: u64,
    depth: u32,
    now: u64,
) -> Result<()> {
    probes.tables.add_cgroup(f.id, exec_id, depth)?;
    if exec_id == f.id {
        execs.add_exec(f.id, &h.kernel_path(&f.path), now);
    } else {
        execs.add_rolled_up(f.id, exec_id);
    }
    Ok(())
}

/// Tasks already running in the subtree are counted from now on: record their counters as
/// baselines, and mark their execs partial. Returns (exec, tgid) of their processes.
fn take_baselines(probes: &mut Probes, execs: &mut Execs) -> Result<Vec<(u64, u32)>> {
    let recs = probes.snapshot()?;
    let mut procs = Vec::new();
    for r in &recs {
        let b = TaskBaseline {
            start_time_ns: r.start_time_ns,
            exec_id: r.exec_id,
            counters: r.counters,
        };
        if let Err(e) = probes.baselines.insert(r.pid, b) {
            log::warn!("cannot record the baseline of task {}: {e}", r.pid);
        }
        if let Some(e) = execs.get_mut(r.exec_id) {
            e.partial = true;
        }
        if r.flags & TASK_LEADER != 0 {
            procs.push((r.exec_id, r.tgid));
        }
    }
    Ok(procs)
}

/// comm and argv summary of a running process, from /proc.
fn proc_cmdline(tgid: u32) -> (String, String) {
    let comm = fs::read_to_string(format!("/proc/{tgid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    let raw = fs::read(format!("/proc/{tgid}/cmdline")).unwrap_or_default();
    (comm, args_summary(&raw, 96))
}
