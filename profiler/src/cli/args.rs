//! The flags of each command, and their parsers.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

pub use super::otlp::OtlpFlags;
use crate::kernel_layout::DEFAULT_BTF;

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
    /// Programs listed per exec, most on-CPU first; the rest are summed (0 lists them all).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub programs: usize,
    /// Kernel BTF to read struct layouts and attach points from.
    #[arg(long, default_value = DEFAULT_BTF, value_name = "FILE")]
    pub btf: String,
    /// Most execs followed at once, up to 65536 (each takes 1.75 KiB of kernel memory: two
    /// 896-byte slots of the exec table).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_execs: u32,
    /// Most cgroups (execs and their descendants) followed at once, up to 1048576 (32 bytes of
    /// kernel memory each).
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub max_cgroups: u32,
    /// How long to wait for an ended exec's last tasks to be collected before reporting it.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub grace: Duration,
    /// How often the cgroup files (pressure, cpu.stat, io.stat, memory.*, pids.*) of running
    /// execs are read.
    #[arg(long, default_value = "1s", value_parser = parse_period)]
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
    /// Leave each exec's command line (process.command_line) out of the exported metrics and
    /// spans: build commands may carry credentials. The local record keeps it.
    #[arg(long)]
    pub no_export_command_line: bool,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The cgroup v2 directory to watch (absolute, or relative to the v2 mount); with
    /// --runtime, the runtime's own cgroup parent by default; with neither, the cgroup
    /// parents of every container runtime found (docker, podman, containerd).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Read these options from a TOML file, one key per long option (`exec-depth = 2`,
    /// `otlp-endpoint = "http://collector:4318"`, `live = true`); flags given here win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Depth of the execs below PATH: cgroups at depth 1..=N are execs, deeper ones roll up.
    #[arg(long, default_value_t = 1)]
    pub exec_depth: u32,
    /// Show a refreshing table of the running execs.
    #[arg(long)]
    pub live: bool,
    /// Refresh interval of --live.
    #[arg(long, default_value = "1s", value_parser = parse_period)]
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
    /// After SIGTERM or SIGINT, how long the command has to end before its cgroup is killed
    /// (a second signal kills at once).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub kill_after: Duration,
    #[command(flatten)]
    pub common: CommonArgs,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Recorded JSON lines: files, directories (their *.jsonl and *.json files) or quoted
    /// patterns ('runs/*.jsonl'); `-` reads stdin. One file is pictured as one build; more
    /// are grouped by step. With --compare, these are the NEW runs.
    #[arg(value_name = "FILE", required = true)]
    pub input: Vec<String>,
    /// Compare with these BASE runs (files, directories, patterns), the list ended by `--`
    /// (other options go before --compare):
    /// each step's figures in NEW against BASE, flagged where they moved beyond BASE's spread.
    #[arg(long, num_args = 1.., value_name = "BASE")]
    pub compare: Vec<String>,
    /// With --compare, exit 3 when a step crosses a condition: FIGURE (flagged heavier),
    /// FIGURE=PCT% (and grown by more than PCT), `any`, `failed` (fails, never in BASE),
    /// `oom`. Figures: wall, cpu, runq, iowait, read, write, network, memory.
    #[arg(long, value_delimiter = ',', value_parser = crate::report::compare::FailOn::parse, requires = "compare", value_name = "COND")]
    pub fail_on: Vec<crate::report::compare::FailOn>,
    /// Group a single input by step as well (a sidecar's file of many runs).
    #[arg(long)]
    pub steps: bool,
    /// Write an HTML page (one build: default profiler-report.html).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Write the steps (or the comparison) as JSON (`-` for stdout).
    #[arg(long, value_name = "OUT.json")]
    pub json: Option<String>,
    /// Write a GitHub-flavoured Markdown summary, to stdout or `--markdown=FILE` (e.g.
    /// --markdown="$GITHUB_STEP_SUMMARY").
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "-", value_name = "FILE")]
    pub markdown: Option<String>,
    /// Execs listed per resource in the summary.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
}

#[derive(Debug, Clone, Default, Args)]
pub struct RuntimeArgs {
    /// Watch the execs of this container runtime: its cgroup parent is found (and `--cgroup`
    /// may still override it), and each exec is named from the runtime's metadata.
    #[arg(long, value_enum, value_name = "NAME")]
    pub runtime: Option<Runtime>,
    /// The runtime's API socket (docker: default $DOCKER_HOST or /var/run/docker.sock;
    /// containerd: $CONTAINERD_ADDRESS or /run/containerd/containerd.sock).
    #[arg(long, value_name = "SOCKET", requires = "runtime")]
    pub runtime_endpoint: Option<PathBuf>,
    /// The runtime's state directory (podman: its storage graphroot, default from
    /// storage.conf; containerd: its state directory, default /run/containerd).
    #[arg(long, value_name = "DIR", requires = "runtime")]
    pub runtime_root: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Runtime {
    /// Containers of dockerd.
    Docker,
    /// The RUN steps of `docker build` (dockerd's BuildKit).
    Buildkit,
    /// Containers of podman.
    Podman,
    /// Containers of containerd (ctr, nerdctl).
    Containerd,
    /// The RUN steps of `buildah bud` and `podman build` (`--runtime podman` includes them).
    Buildah,
}

impl RuntimeArgs {
    /// The runtime settings the metadata resolver takes.
    pub fn settings(&self) -> crate::runtime::RuntimeSettings {
        use crate::runtime::RuntimeKind as K;
        crate::runtime::RuntimeSettings {
            runtime: self.runtime.map(|r| match r {
                Runtime::Docker => K::Docker,
                Runtime::Buildkit => K::Buildkit,
                Runtime::Podman => K::Podman,
                Runtime::Containerd => K::Containerd,
                Runtime::Buildah => K::Buildah,
            }),
            endpoint: self.runtime_endpoint.clone(),
            root: self.runtime_root.clone(),
        }
    }
}

/// The longest duration any flag or variable takes: longer ones are surely a mistake, and
/// would overflow the clocks they are added to.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// "250ms", "2s", "1.5s", "1m" or a plain number of seconds, from 0 to [`MAX_DURATION`].
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
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(format!("duration {s:?} is longer than 24 hours"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration above zero (a period, a timeout), up to [`MAX_DURATION`].
pub fn parse_period(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("duration {s:?} must be above zero")),
        d => Ok(d),
    }
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
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("24m").unwrap(), Duration::from_secs(1440));
        // Far beyond any clock: refused at parse time, not a panic.
        for huge in [
            "99999999999999999999999",
            "1e19",
            "1e19s",
            "inf",
            "NaN",
            "1441m",
        ] {
            assert!(parse_duration(huge).is_err(), "{huge}");
        }
        assert!(parse_period("0s").is_err());
        assert_eq!(parse_period("1ms").unwrap(), Duration::from_millis(1));
    }
}
