//! `profiler run`: one command in a fresh cgroup, and its report.

use std::{os::fd::AsRawFd as _, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result, bail};
use tokio::{
    signal::unix::{SignalKind, signal},
    time::interval,
};

use super::{
    Output, RunArgs, emit, enable_bpf_stats, options, print_costs, start_exporters, watch,
};
use crate::{
    cgroup::{self, Hierarchy},
    ci::CiEnv,
    monitor::Monitor,
    spawn::{spawn_in_cgroup, wait_exit_code},
};

/// Removes the run's cgroup (killing what is left in it) however `run` ends.
struct CgroupGuard(PathBuf);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Err(e) = cgroup::kill_and_remove(&self.0, Duration::from_secs(5)) {
            log::warn!("{e:#}");
        }
    }
}

pub(crate) async fn run(args: RunArgs) -> Result<i32> {
    let h = Hierarchy::find()?;
    crate::host::check_privileges()?;
    let given = PathBuf::from(&args.parent);
    let parent = if given.starts_with(&h.mount) {
        given
    } else {
        h.mount.join(args.parent.trim_start_matches('/'))
    };
    if !parent.exists() {
        h.create(&parent)?;
    }
    let parent = h.resolve(parent.to_str().context("non-UTF-8 parent path")?)?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("run-{}", std::process::id()));
    if name.contains('/') || name.is_empty() || name.starts_with('.') {
        bail!("invalid cgroup name {name:?}: use a plain directory name");
    }
    let dir = parent.join(&name);
    if dir.exists() {
        bail!(
            "cgroup {} already exists; pick another --name",
            dir.display()
        );
    }
    h.create(&dir)?;
    let guard = CgroupGuard(dir.clone());
    let _stats = enable_bpf_stats(args.common.bpf_stats)?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let exporters = start_exporters(&args.common)?;
    let ci_env = CiEnv::new(&args.common.ci_env).map_err(anyhow::Error::msg)?;
    let mut mon = Monitor::start(options(&args.common, &ci_env, dir.clone(), 0), None)?;
    let exec_id = cgroup::cgroup_id(&dir)?;
    // The record names the run's cgroup by its path on the v2 mount.
    if let Ok(rel) = dir.strip_prefix(&h.mount) {
        mon.rename_exec(exec_id, &rel.display().to_string());
    }

    let child = spawn_in_cgroup(&dir, &args.command)?;
    // SAFETY: the pidfd belongs to `child`, which outlives `exited`.
    let exited = unsafe { watch(child.pidfd.as_raw_fd())? };
    let mut tick = interval(Duration::from_millis(100));
    let mut sample_tick = interval(args.common.sample_interval.max(Duration::from_millis(10)));
    // After a stop request, the command has --kill-after to end before its cgroup is killed
    // (as `timeout -k` and `docker stop` do); a second request kills at once.
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    loop {
        let stop_request = tokio::select! {
            _ = exited.readable() => break,
            _ = tick.tick() => { mon.poll(); false }
            _ = sample_tick.tick() => { mon.sample_files(); false }
            // The terminal sends SIGINT to the whole foreground group, the command included.
            _ = sigint.recv() => true,
            _ = sigterm.recv() => {
                // SAFETY: signal our own child.
                unsafe { libc::kill(child.pid, libc::SIGTERM) };
                true
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)),
                if kill_at.is_some() && !killed => {
                cgroup::kill_all(&dir, Duration::from_secs(5))?;
                killed = true;
                false
            }
        };
        if stop_request {
            kill_at = match kill_at {
                None => Some(tokio::time::Instant::now() + args.kill_after),
                Some(_) => Some(tokio::time::Instant::now()),
            };
        }
    }
    if killed {
        mon.note(
            exec_id,
            &format!(
                "the command was still running {:?} after it was asked to stop: its cgroup was \
                 killed",
                args.kill_after
            ),
        );
    }
    let (code, status) = wait_exit_code(child.pid)?;
    if cgroup::populated(&dir) {
        cgroup::kill_all(&dir, Duration::from_secs(5))?;
        mon.note(exec_id, "processes left behind by the command were killed");
    }
    // The exec is empty and its cgroup still there: its files hold their final values.
    mon.sample_final(exec_id);
    drop(guard); // remove the cgroup
    let deadline = tokio::time::Instant::now() + args.common.grace + Duration::from_secs(1);
    let mut report = None;
    while report.is_none() && tokio::time::Instant::now() < deadline {
        report = mon.poll().into_iter().find(|r| r.cgroup_id == exec_id);
        if report.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let Some(report) = report else {
        bail!("the command {status}, but its exec's final figures did not arrive");
    };
    if let Some(x) = exporters {
        x.ended(std::slice::from_ref(&report));
        x.shutdown();
    }
    match args.common.output {
        Output::Text => {
            crate::diagnostics::write_stderr(&report.detailed(&args.command.join(" "), &status))
        }
        // The command's exit code is the answer, whether or not stdout's reader stayed.
        Output::Json => match emit(&[report], Output::Json) {
            Err(e) if !e.is::<super::StdoutGone>() => return Err(e),
            _ => {}
        },
    }
    if args.common.bpf_stats {
        print_costs(&mon);
    }
    Ok(code)
}
