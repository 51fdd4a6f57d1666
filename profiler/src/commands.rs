//! The command line: `profiler attach` and `profiler run`.

use std::{
    io::Write as _,
    net::SocketAddr,
    os::fd::{AsRawFd, RawFd},
    path::PathBuf,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval},
};

use crate::{
    cgroup::{self, Hierarchy},
    ci::CiEnv,
    export::{Exporters, OtlpConfig, OtlpFlags, metrics::ExecAttributes},
    kernel_layout::DEFAULT_BTF,
    monitor::{Monitor, Options},
    probes::Limits,
    report::{ExecReport, live_table},
    runtime::{Connected, Resolver, RuntimeArgs},
    spawn::{SpawnError, spawn_in_cgroup, wait_exit_code},
};

#[derive(Debug, Parser)]
#[command(
    name = "profiler",
    version,
    about = "Per-exec resource profiler for cgroup subtrees, with eBPF"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch a cgroup subtree: each child cgroup is an exec, reported when it ends.
    Attach(AttachArgs),
    /// Run a command in a fresh cgroup and report what it used.
    Run(RunArgs),
    /// Picture a build from the JSON lines of `attach --output json`: an HTML page (timeline,
    /// table) and a summary of where the time went on stdout.
    Report(ReportArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
    /// Processes listed per exec: the top N by CPU, by IO and by stall (0 lists all kept).
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Kernel BTF to read struct layouts and attach points from.
    #[arg(long, default_value = DEFAULT_BTF, value_name = "FILE")]
    pub btf: String,
    /// Most execs followed at once.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_execs: u32,
    /// Most cgroups (execs and their descendants) followed at once.
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_cgroups: u32,
    /// How long to wait for an ended exec's last tasks to be collected before reporting it.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub grace: Duration,
    /// How often the cgroup files (pressure, cpu.stat, io.stat, memory.*, pids.*) of running
    /// execs are read.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub sample_interval: Duration,
    /// Print the run count and mean run time of each eBPF program on exit
    /// (enables the kernel's BPF statistics while running).
    #[arg(long)]
    pub bpf_stats: bool,
    #[command(flatten)]
    pub otlp: OtlpFlags,
    /// Also serve the metrics in the Prometheus text format at ADDR (host:port), path
    /// /metrics.
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<SocketAddr>,
    /// A regular expression matched against each exec's cgroup path (relative to the
    /// attached cgroup): each named group that matches becomes an attribute of the exec's
    /// metrics, e.g. '^ci/(?P<job>[^/]+)'.
    #[arg(long, value_name = "REGEX")]
    pub exec_attributes: Option<String>,
    /// Also read this variable from the environment of each exec's first program (besides
    /// TRACEPARENT, TRACESTATE and the CI systems' own): it goes into the record and onto
    /// the exec's metrics as profiler.exec.env.NAME. Repeatable.
    #[arg(long = "ci-env", value_name = "NAME")]
    pub ci_env: Vec<String>,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The cgroup v2 directory to watch (absolute, or relative to the v2 mount); with
    /// --runtime, the runtime's own cgroup parent by default.
    #[arg(long, value_name = "PATH", required_unless_present = "runtime")]
    pub cgroup: Option<String>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Depth of the execs below PATH: cgroups at depth 1..=N are execs, deeper ones roll up.
    #[arg(long, default_value_t = 1)]
    pub exec_depth: u32,
    /// Show a refreshing table of the running execs.
    #[arg(long)]
    pub live: bool,
    /// Refresh interval of --live.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Parent cgroup of the fresh cgroup (absolute, or relative to the v2 mount); created
    /// when missing.
    #[arg(long, default_value = "profiler", value_name = "PATH")]
    pub parent: String,
    /// Name of the fresh cgroup (default: run-<profiler pid>).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub common: CommonArgs,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The JSON lines (`-` reads stdin).
    #[arg(value_name = "FILE.jsonl")]
    pub input: String,
    /// Where to write the HTML page.
    #[arg(long, default_value = "profiler-report.html", value_name = "OUT.html")]
    pub html: PathBuf,
    /// Execs listed per resource in the summary.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
}

/// "250ms", "2s", "1.5s", "1m" or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (use e.g. 500ms, 2s, 1m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("invalid duration unit in {s:?} (use ms, s or m)")),
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("invalid duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Run the command; returns the process exit code.
pub async fn run_cli(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Attach(a) => attach(a).await,
        Command::Run(r) => run(r).await,
        Command::Report(r) => crate::build_report::run(&r.input, &r.html, r.top).map(|()| 0),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let code = e.downcast_ref::<SpawnError>().map(|s| s.code).unwrap_or(1);
            eprintln!("profiler: error: {}", one_line(&e));
            code
        }
    }
}

fn one_line(e: &anyhow::Error) -> String {
    // Context chain on one line, most specific last; multi-line verifier logs stay indented.
    let parts: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    let mut out = parts[0].clone();
    for p in &parts[1..] {
        if !out.contains(p.as_str()) {
            out.push_str(": ");
            out.push_str(p);
        }
    }
    out
}

fn options(common: &CommonArgs, ci_env: &CiEnv, cgroup: PathBuf, exec_depth: u32) -> Options {
    Options {
        cgroup,
        exec_depth,
        btf: common.btf.clone(),
        top: common.top,
        keep_procs: common.top.max(256),
        grace: common.grace,
        limits: Limits {
            max_execs: common.max_execs,
            max_cgroups: common.max_cgroups,
            max_baselines: 16384,
        },
        ci_env: ci_env.clone(),
    }
}

struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Watch a descriptor for readability.
///
/// SAFETY: the caller keeps `fd` open for as long as the returned AsyncFd lives.
unsafe fn watch(fd: RawFd) -> Result<AsyncFd<Fd>> {
    // SAFETY: per the caller's promise.
    let w = unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) };
    w.map_err(|e| anyhow::anyhow!("cannot poll a descriptor: {e}"))
}

fn emit(reports: &[ExecReport], output: Output) {
    let mut out = std::io::stdout().lock();
    for r in reports {
        let line = match output {
            Output::Text => r.line(),
            Output::Json => r.json(),
        };
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// The configured exporters, checked before anything is attached.
fn start_exporters(common: &CommonArgs) -> Result<Option<Exporters>> {
    let otlp = OtlpConfig::resolve(&common.otlp)?;
    let attrs =
        ExecAttributes::new(common.exec_attributes.as_deref()).map_err(anyhow::Error::msg)?;
    let x = Exporters::start(otlp, common.prometheus, attrs, common.max_execs as usize)?;
    for d in x.iter().flat_map(|x| x.describe()) {
        eprintln!("profiler: {d}");
    }
    Ok(x)
}

fn print_costs(mon: &Monitor) {
    eprintln!("profiler: eBPF program costs (kernel BPF statistics):");
    for c in mon.costs() {
        let mean = (c.run_time.as_nanos() as u64)
            .checked_div(c.run_count)
            .unwrap_or(0);
        eprintln!(
            "  {:<22} runs {:>10}  total {:>12} ns  mean {:>6} ns",
            c.name,
            c.run_count,
            c.run_time.as_nanos(),
            mean
        );
    }
}

/// The cgroup to watch: --cgroup, else the named runtime's cgroup parent (made when the
/// runtime has not made it yet: it does at its first container).
fn attach_dir(h: &Hierarchy, args: &AttachArgs, connected: Option<&Connected>) -> Result<PathBuf> {
    if let Some(c) = connected {
        eprintln!("profiler: runtime {}", c.describe);
    }
    match (&args.cgroup, connected) {
        (Some(p), _) => h.resolve(p),
        (None, Some(c)) => {
            if !c.cgroup_parent.exists() {
                if c.systemd {
                    bail!(
                        "the runtime's cgroup parent {} does not exist (is systemd its cgroup \
                         manager?); pass the parent with --cgroup",
                        c.cgroup_parent.display()
                    );
                }
                cgroup::create(&c.cgroup_parent)?;
                eprintln!(
                    "profiler: created {} (the runtime makes it at its first container)",
                    c.cgroup_parent.display()
                );
            }
            h.resolve(c.cgroup_parent.to_str().context("non-UTF-8 cgroup path")?)
        }
        (None, None) => bail!("--cgroup or --runtime is needed"),
    }
}

async fn attach(args: AttachArgs) -> Result<i32> {
    let h = Hierarchy::find()?;
    crate::monitor::check_privileges()?;
    let (resolver, connected) = Resolver::start(&args.runtime, &h)?;
    let dir = attach_dir(&h, &args, connected.as_ref())?;
    let _stats = enable_bpf_stats(args.common.bpf_stats)?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let exporters = start_exporters(&args.common)?;
    let ci_env = CiEnv::new(&args.common.ci_env).map_err(anyhow::Error::msg)?;
    let mut mon = Monitor::start(
        options(&args.common, &ci_env, dir.clone(), args.exec_depth),
        Some(resolver),
    )?;
    eprintln!(
        "profiler: attached to {} (exec depth {}, {} exec(s) present)",
        dir.display(),
        args.exec_depth,
        mon.exec_ids().len()
    );
    for n in mon.notices() {
        eprintln!("profiler: note: {n}");
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
    loop {
        let ended = tokio::select! {
            g = ring.readable() => {
                if let Ok(mut g) = g { g.clear_ready(); }
                mon.poll()
            }
            _ = tick.tick() => mon.poll(),
            _ = sweep_tick.tick() => {
                mon.sweep();
                mon.poll()
            }
            _ = sample_tick.tick() => {
                mon.sample_files();
                if let Some(x) = &exporters {
                    match mon.live() {
                        Ok(rows) => x.live(&rows),
                        Err(e) => eprintln!("profiler: warning: {e:#}"),
                    }
                }
                Vec::new()
            }
            _ = live_tick.tick(), if args.live => {
                let rows = mon.live()?;
                match output {
                    Output::Text => {
                        let mut s = String::from("\x1b[H\x1b[2J");
                        s.push_str(&live_table(&rows));
                        if !recent.is_empty() {
                            s.push_str("\nrecently ended:\n");
                            for l in &recent { s.push_str(l); s.push('\n'); }
                        }
                        print!("{s}");
                        let _ = std::io::stdout().flush();
                    }
                    Output::Json => emit(&rows, output),
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
        } else {
            emit(&ended, output);
        }
    }
    let last = mon.shutdown()?;
    emit(&last, output);
    if let Some(x) = exporters {
        // Running execs' figures so far are their last ones from this profiler.
        x.ended(&last);
        x.shutdown();
    }
    if args.common.bpf_stats {
        print_costs(&mon);
    }
    Ok(0)
}

fn enable_bpf_stats(on: bool) -> Result<Option<std::os::fd::OwnedFd>> {
    if !on {
        return Ok(None);
    }
    crate::monitor::check_privileges()?;
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("cannot enable BPF statistics (Linux 5.8 or later): {e}"))
}

/// Removes the run's cgroup (killing what is left in it) however `run` ends.
struct CgroupGuard(PathBuf);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Err(e) = cgroup::kill_and_remove(&self.0, Duration::from_secs(5)) {
            eprintln!("profiler: warning: {e:#}");
        }
    }
}

async fn run(args: RunArgs) -> Result<i32> {
    let h = Hierarchy::find()?;
    crate::monitor::check_privileges()?;
    let given = PathBuf::from(&args.parent);
    let parent = if given.starts_with(&h.mount) {
        given
    } else {
        h.mount.join(args.parent.trim_start_matches('/'))
    };
    if !parent.exists() {
        cgroup::create(&parent)?;
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
    cgroup::create(&dir)?;
    let guard = CgroupGuard(dir.clone());
    let _stats = enable_bpf_stats(args.common.bpf_stats)?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let exporters = start_exporters(&args.common)?;
    let ci_env = CiEnv::new(&args.common.ci_env).map_err(anyhow::Error::msg)?;
    let mut mon = Monitor::start(options(&args.common, &ci_env, dir.clone(), 0), None)?;
    let exec_id = cgroup::cgroup_id(&dir)?;

    let child = spawn_in_cgroup(&dir, &args.command)?;
    // SAFETY: the pidfd belongs to `child`, which outlives `exited`.
    let exited = unsafe { watch(child.pidfd.as_raw_fd())? };
    let mut tick = interval(Duration::from_millis(100));
    let mut sample_tick = interval(args.common.sample_interval.max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            _ = exited.readable() => break,
            _ = tick.tick() => { mon.poll(); }
            _ = sample_tick.tick() => mon.sample_files(),
            // The terminal sends SIGINT to the whole foreground group, the command included.
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {
                // SAFETY: signal our own child.
                unsafe { libc::kill(child.pid, libc::SIGTERM) };
            }
        }
    }
    let (code, status) = wait_exit_code(child.pid)?;
    let leftovers = cgroup::populated(&dir);
    if leftovers {
        cgroup::kill_all(&dir, Duration::from_secs(5))?;
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
    let Some(mut report) = report else {
        bail!("the command {status}, but its exec's final figures did not arrive");
    };
    if leftovers {
        report
            .notes
            .push("processes left behind by the command were killed".into());
    }
    report.exec = dir
        .strip_prefix(&h.mount)
        .map(|p| p.display().to_string())
        .unwrap_or(report.exec);
    if let Some(x) = exporters {
        x.ended(std::slice::from_ref(&report));
        x.shutdown();
    }
    match args.common.output {
        Output::Text => eprint!("{}", report.detailed(&args.command.join(" "), &status)),
        Output::Json => emit(&[report], Output::Json),
    }
    if args.common.bpf_stats {
        print_costs(&mon);
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn cli_parses() {
        let c = Cli::try_parse_from(["profiler", "run", "--", "sh", "-c", "exit 3"]).unwrap();
        match c.command {
            Command::Run(r) => assert_eq!(r.command, ["sh", "-c", "exit 3"]),
            _ => panic!(),
        }
        let c = Cli::try_parse_from(["profiler", "report", "-", "--html", "o.html"]).unwrap();
        match c.command {
            Command::Report(r) => assert_eq!((r.input.as_str(), r.top), ("-", 5)),
            _ => panic!(),
        }
        assert!(Cli::try_parse_from(["profiler", "report"]).is_err());
        assert!(Cli::try_parse_from(["profiler", "attach"]).is_err());
        assert!(
            Cli::try_parse_from(["profiler", "attach", "--cgroup", "x", "--exec-depth", "-1"])
                .is_err()
        );
    }
}
