//! `profiler attach`: watch a cgroup subtree (or a container runtime's) until interrupted.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use tokio::{
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval},
};

use super::{
    AttachArgs, Output, emit, enable_bpf_stats, options, print_costs, start_exporters, watch,
    write_stdout,
};
use crate::{
    cgroup::Hierarchy,
    ci::CiEnv,
    monitor::{Monitor, NamedExecs},
    render::live_table,
    runtime::{Connected, Resolver},
};

/// What to watch: the attached cgroup, and the nests below it whose children are execs; with
/// `only_nests`, the nests alone (every runtime found: each one's parent).
struct Watched {
    dir: PathBuf,
    nests: Vec<PathBuf>,
    only_nests: bool,
    /// Execs picked by name beside (buildah's RUN steps at the root).
    named: Vec<NamedExecs>,
}

/// --cgroup; else the named runtime's cgroup parent; else the parents of every runtime found
/// running here. A parent the runtime has not made yet (it does at its first container) is
/// made, except a systemd slice.
fn watched(h: &Hierarchy, args: &AttachArgs, connected: &[Connected]) -> Result<Watched> {
    let parent = |c: &Connected| -> Result<PathBuf> {
        if !c.cgroup_parent.exists() {
            if c.systemd {
                bail!(
                    "the runtime's cgroup parent {} does not exist (is systemd its cgroup \
                     manager?); pass the parent with --cgroup",
                    c.cgroup_parent.display()
                );
            }
            h.create(&c.cgroup_parent)?;
            log::info!(
                "created {} (the runtime makes it at its first container)",
                c.cgroup_parent.display()
            );
        }
        h.resolve(c.cgroup_parent.to_str().context("non-UTF-8 cgroup path")?)
    };
    if let Some(p) = &args.cgroup {
        return Ok(Watched {
            dir: h.resolve(p)?,
            nests: Vec::new(),
            only_nests: false,
            named: Vec::new(),
        });
    }
    if args.runtime.settings().runtime.is_some() {
        let c = &connected[0];
        if !c.watch_parent {
            // Execs by name alone: nothing else is watched.
            log::info!("runtime {}", c.describe);
            return Ok(Watched {
                dir: h.mount.clone(),
                nests: Vec::new(),
                only_nests: true,
                named: c.named.clone(),
            });
        }
        let dir = parent(c)?;
        // Said once the parent is known: an error is then the only line.
        log::info!("runtime {}", c.describe);
        return Ok(Watched {
            nests: nests(h, &dir, c)?,
            dir,
            only_nests: false,
            named: c.named.clone(),
        });
    }
    // Neither: each runtime that runs here. A systemd driver's parent is a slice of the host's
    // services too, not only containers: that runtime is left to --runtime.
    let mut all = Vec::new();
    let mut named: Vec<NamedExecs> = Vec::new();
    for c in connected {
        if c.systemd {
            log::info!(
                "not watching {}: its containers are units of {} among the host's \
                 services; use --runtime",
                c.describe,
                c.cgroup_parent.display()
            );
            continue;
        }
        let dir = parent(c)?;
        log::info!("runtime {} (watching {})", c.describe, dir.display());
        all.extend(nests(h, &dir, c)?);
        all.push(dir);
        named.extend(
            c.named
                .iter()
                .filter(|n| !named.contains(n))
                .cloned()
                .collect::<Vec<_>>(),
        );
    }
    if all.is_empty() {
        bail!(
            "no container runtime found running here (docker, podman, containerd with their \
             cgroupfs parents): pass --cgroup PATH or --runtime NAME"
        );
    }
    Ok(Watched {
        dir: h.mount.clone(),
        nests: all,
        only_nests: true,
        named,
    })
}

/// The runtime's nests of execs under the watched parent, made when the runtime has not made
/// them yet (it does at its first exec there): dockerd's `buildkit/`, so that `--runtime
/// docker` reports each RUN step of a build, not one exec of them all.
fn nests(h: &Hierarchy, dir: &Path, c: &Connected) -> Result<Vec<PathBuf>> {
    c.nests
        .iter()
        .map(|n| {
            let nest = dir.join(n);
            if !nest.exists() {
                h.create(&nest)?;
            }
            Ok(nest)
        })
        .collect()
}

pub(crate) async fn attach(args: AttachArgs) -> Result<i32> {
    let h = Hierarchy::find()?;
    crate::host::check_privileges()?;
    let (resolver, connected) = Resolver::start(&args.runtime.settings(), &h)?;
    let w = watched(&h, &args, &connected)?;
    let dir = w.dir.clone();
    let _stats = enable_bpf_stats(args.common.bpf_stats)?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let exporters = start_exporters(&args.common)?;
    let ci_env = CiEnv::new(&args.common.ci_env).map_err(anyhow::Error::msg)?;
    let mut opts = options(&args.common, &ci_env, dir.clone(), args.exec_depth);
    let mut shown: Vec<String> = if w.only_nests {
        w.nests.iter().map(|n| n.display().to_string()).collect()
    } else {
        vec![dir.display().to_string()]
    };
    shown.extend(
        w.named
            .iter()
            .map(|n| format!("{}*", n.parent.join(&n.prefix).display())),
    );
    let shown = shown.join(", ");
    opts.nests = w.nests;
    opts.only_nests = w.only_nests;
    opts.named = w.named;
    let mut mon = Monitor::start(opts, Some(resolver))?;
    log::info!(
        "attached to {shown} (exec depth {}, {} exec(s) present)",
        args.exec_depth,
        mon.exec_ids().len()
    );
    if dir == h.mount && !w.only_nests {
        // `--cgroup .` or `/`: said plainly, since every top-level cgroup is then an exec.
        log::info!(
            "note: watching the root of the cgroup v2 hierarchy: each top-level cgroup \
             (system.slice, user.slice, ...) is an exec"
        );
    }
    for n in mon.notices() {
        log::info!("note: {n}");
    }
    // SAFETY: the ring buffer's fd belongs to `mon`, which outlives `ring`.
    let ring = unsafe { watch(mon.events_fd())? };
    let mut tick = interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut live_tick = interval(args.interval);
    live_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sweep_tick = interval(Duration::from_secs(5));
    sweep_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sample_tick = interval(args.common.sample_interval.max(Duration::from_millis(10)));
    sample_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let output = args.common.output;
    let mut recent: Vec<String> = Vec::new();
    // Why stdout could not be written, when it could not: attach stops then.
    let mut out_err: Option<anyhow::Error> = None;
    // Why attach stopped by itself, when it did.
    let mut stop_err: Option<anyhow::Error> = None;
    loop {
        let ended = tokio::select! {
            g = ring.readable() => {
                if let Ok(mut g) = g { g.clear_ready(); }
                mon.poll()
            }
            _ = tick.tick() => {
                // A pipe whose reader has gone (`| head -n1`) says so before the next write.
                if stdout_reader_gone() {
                    out_err = Some(super::StdoutGone.into());
                    break;
                }
                mon.poll()
            }
            _ = sweep_tick.tick() => {
                // Gone, nothing more can be seen there (a cgroup made again at the same path is
                // another one): report what ended and stop, not run on blind.
                if !dir.exists() {
                    stop_err = Some(anyhow::anyhow!(
                        "the watched cgroup {} was removed; attach again once it exists",
                        dir.display()
                    ));
                    break;
                }
                mon.sweep();
                mon.poll()
            }
            _ = sample_tick.tick() => {
                mon.sample_files();
                if let Some(x) = &exporters {
                    // Not before an exec is named: its series would change attributes.
                    let settling = mon.settling();
                    let mut live = std::collections::HashMap::new();
                    let r = mon.live_each(|r| {
                        if !settling.contains(&r.cgroup_id) {
                            x.add_live(&mut live, &r);
                        }
                    });
                    match r {
                        Ok(()) => x.set_live(live),
                        Err(e) => log::warn!("{e:#}"),
                    }
                }
                Vec::new()
            }
            _ = live_tick.tick(), if args.live => {
                let rows = mon.live()?;
                let shown = match output {
                    Output::Text => {
                        let mut s = String::from("\x1b[H\x1b[2J");
                        s.push_str(&live_table(&rows));
                        if !recent.is_empty() {
                            s.push_str("\nrecently ended:\n");
                            for l in &recent { s.push_str(l); s.push('\n'); }
                        }
                        write_stdout(s.as_bytes())
                    }
                    Output::Json => emit(&rows, output),
                };
                if let Err(e) = shown {
                    out_err = Some(e);
                    break;
                }
                Vec::new()
            }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
        };
        if let Some(x) = &exporters {
            x.ended(&ended);
        }
        if args.live && output == Output::Text {
            for r in &ended {
                recent.push(r.line());
            }
            let n = recent.len().saturating_sub(10);
            recent.drain(..n);
        } else if let Err(e) = emit(&ended, output) {
            // No reader (`| head`) or no room: stop, but flush the exporters first.
            out_err = Some(e);
            break;
        }
    }
    let last = mon.shutdown()?;
    if out_err.is_none()
        && let Err(e) = emit(&last, output)
    {
        out_err = Some(e);
    }
    if let Some(x) = exporters {
        // Running execs' figures so far are their last ones from this profiler.
        x.ended(&last);
        x.shutdown();
    }
    if args.common.bpf_stats {
        print_costs(&mon);
    }
    let (warnings, hidden) = crate::diagnostics::warnings();
    if hidden > 0 {
        log::info!(
            "{warnings} warnings in all, {hidden} of them not shown (each place in the code \
             shows at most 10 a minute)"
        );
    }
    out_err.or(stop_err).map_or(Ok(0), Err)
}

/// Whether stdout is a pipe whose reader has closed it (poll reports POLLERR on the write end).
fn stdout_reader_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n == 1 && fd.revents & libc::POLLERR != 0
}
