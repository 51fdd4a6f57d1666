//! The command line: clap's structs and parsers, and the commands they run (`attach`, `run`,
//! `report`). The rest of the profiler sees only the settings made from them.

mod args;
mod attach;
mod check;
pub mod config;
mod generate;
mod otlp;
mod run;

use std::{
    io::Write as _,
    os::fd::{AsRawFd, RawFd},
    path::PathBuf,
};

use anyhow::Result;
use clap::{Parser, Subcommand};
use tokio::io::{Interest, unix::AsyncFd};

pub use self::args::*;
#[cfg(test)]
pub(crate) use self::otlp::{check_endpoint, parse_headers};
use crate::{
    ci::CiEnv,
    export::{Exporters, metrics::ExecAttributes},
    monitor::{Monitor, Options},
    record::ExecRecord,
    sources::cgroup::Limits,
    spawn::SpawnError,
};

#[derive(Debug, Parser)]
#[command(
    name = "profiler",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("PROFILER_COMMIT"), ")"),
    about = "Per-exec resource profiler for cgroup subtrees, with eBPF",
    // A flag given twice takes its last value: `--config`'s keys come first, flags after.
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More messages on what the profiler does (-vv: its libraries' too). RUST_LOG, when set,
    /// takes precedence (e.g. RUST_LOG=profiler=debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Fewer messages: -q leaves warnings and errors, -qq errors alone.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub quiet: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    // The first line of each is its summary in `profiler --help`; after_help shows one use.
    /// Watch a cgroup subtree: each child cgroup is an exec, reported when it ends.
    #[command(
        after_help = "Example: each RUN step of a `docker build`, as JSON lines \
        (SIGINT stops it):\n  profiler attach --runtime buildkit --output json > build.jsonl"
    )]
    Attach(AttachArgs),
    /// Run a command in a fresh cgroup and report what it used.
    #[command(
        after_help = "Example: the report goes to stderr, the exit code is make's:\n  \
        profiler run -- make -j8"
    )]
    Run(RunArgs),
    /// Picture a build recorded by `attach --output json`: an HTML page and a summary.
    ///
    /// The page shows each exec on a timeline and in a table; the summary of where the time
    /// went goes to stdout.
    #[command(after_help = "Example:\n  profiler report build.jsonl --html build.html")]
    Report(ReportArgs),
    /// Tell what this host allows the profiler to do, one line per feature.
    ///
    /// Exits 0 when `attach` can run (possibly with less), 1 when something it needs is
    /// missing.
    #[command(
        after_help = "Example: this host, and the subtree the config file watches:\n  \
        profiler check --config /etc/profiler/profiler.toml"
    )]
    Check(check::CheckArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(after_help = "Example: for bash, for the current user:\n  \
        profiler completions bash > ~/.local/share/bash-completion/completions/profiler")]
    Completions(generate::CompletionsArgs),
    /// Write the man pages (profiler.1 and one per subcommand) into a directory.
    #[command(hide = true)]
    Manpages(generate::ManpagesArgs),
}

/// Run the command; returns the process exit code.
pub async fn run_cli(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Attach(a) => attach::attach(a).await,
        Command::Run(r) => run::run(r).await,
        Command::Report(r) => crate::report::run(&crate::report::Options {
            inputs: r.input,
            compare: r.compare,
            fail_on: r.fail_on,
            steps: r.steps,
            html: r.html,
            json: r.json,
            markdown: r.markdown,
            top: r.top,
        })
        .map(|()| 0),
        Command::Check(c) => check::check(c).await,
        Command::Completions(c) => generate::completions(c).map(|()| 0),
        Command::Manpages(m) => generate::manpages(m).map(|()| 0),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.is::<StdoutGone>() => 0,
        Err(e) => {
            let code = match e.downcast_ref::<SpawnError>() {
                Some(s) => s.code,
                None if e.is::<crate::report::compare::Crossed>() => 3,
                None => 1,
            };
            log::error!("{}", one_line(&e));
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

pub(crate) fn options(
    common: &CommonArgs,
    ci_env: &CiEnv,
    cgroup: PathBuf,
    exec_depth: u32,
) -> Options {
    Options {
        cgroup,
        exec_depth,
        btf: common.btf.clone(),
        top: common.top,
        programs: common.programs,
        keep_procs: common.top.max(256),
        grace: common.grace,
        limits: Limits {
            max_execs: common.max_execs,
            max_cgroups: common.max_cgroups,
            max_baselines: 16384,
        },
        ci_env: ci_env.clone(),
        nests: Vec::new(),
        only_nests: false,
        named: Vec::new(),
    }
}

pub(crate) struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Watch a descriptor for readability.
///
/// SAFETY: the caller keeps `fd` open for as long as the returned AsyncFd lives.
pub(crate) unsafe fn watch(fd: RawFd) -> Result<AsyncFd<Fd>> {
    // SAFETY: per the caller's promise.
    let w = unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) };
    w.map_err(|e| anyhow::anyhow!("cannot poll a descriptor: {e}"))
}

/// stdout's reader went away (EPIPE: `| head`): the command ends quietly, as coreutils do.
#[derive(Debug)]
pub(crate) struct StdoutGone;

impl std::fmt::Display for StdoutGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutGone {}

/// Write to stdout: a reader that has gone is [`StdoutGone`], any other failure (ENOSPC) an
/// error that says so.
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutGone.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}

pub(crate) fn emit(reports: &[ExecRecord], output: Output) -> Result<()> {
    if reports.is_empty() {
        return Ok(());
    }
    let mut text = String::new();
    for r in reports {
        text.push_str(&match output {
            Output::Text => r.line(),
            Output::Json => r.json(),
        });
        text.push('\n');
    }
    write_stdout(text.as_bytes())
}

/// The configured exporters, checked before anything is attached.
pub(crate) fn start_exporters(common: &CommonArgs) -> Result<Option<Exporters>> {
    let otlp = otlp::resolve(&common.otlp)?;
    let attrs =
        ExecAttributes::new(common.exec_attributes.as_deref()).map_err(anyhow::Error::msg)?;
    let attrs = ExecAttributes {
        no_command_line: common.no_export_command_line,
        ..attrs
    };
    let x = Exporters::start(otlp, common.prometheus, attrs, common.max_execs as usize)?;
    for d in x.iter().flat_map(|x| x.describe()) {
        log::info!("{d}");
    }
    Ok(x)
}

pub(crate) fn print_costs(mon: &Monitor) {
    use std::fmt::Write as _;
    // Asked for with --bpf-stats: output, not a message (-q does not hide it). Written with
    // its errors ignored: a closed stderr must not panic (eprintln! would).
    let mut text = String::from("profiler: eBPF program costs (kernel BPF statistics):\n");
    for c in mon.costs() {
        let mean = (c.run_time.as_nanos() as u64)
            .checked_div(c.run_count)
            .unwrap_or(0);
        let _ = writeln!(
            text,
            "  {:<22} runs {:>10}  total {:>12} ns  mean {:>6} ns",
            c.name,
            c.run_count,
            c.run_time.as_nanos(),
            mean
        );
    }
    crate::diagnostics::write_stderr(&text);
}

pub(crate) fn enable_bpf_stats(on: bool) -> Result<Option<std::os::fd::OwnedFd>> {
    if !on {
        return Ok(None);
    }
    crate::host::check_privileges()?;
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map(Some)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot enable BPF statistics (Linux {} or later): {e}",
                crate::sources::BPF_STATS_SINCE
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_parses() {
        let c = Cli::try_parse_from(["profiler", "run", "--", "sh", "-c", "exit 3"]).unwrap();
        match c.command {
            Command::Run(r) => assert_eq!(r.command, ["sh", "-c", "exit 3"]),
            _ => panic!(),
        }
        let c = Cli::try_parse_from(["profiler", "report", "-", "--html", "o.html"]).unwrap();
        match c.command {
            Command::Report(r) => assert_eq!((r.input, r.top), (vec!["-".to_owned()], 5)),
            _ => panic!(),
        }
        assert!(Cli::try_parse_from(["profiler", "report"]).is_err());
        let report = |args: &[&str]| {
            let argv = ["profiler", "report"].iter().chain(args).copied();
            match Cli::try_parse_from(argv).map(|c| c.command) {
                Ok(Command::Report(r)) => Ok(r),
                Ok(_) => panic!(),
                Err(e) => Err(e.kind()),
            }
        };
        // BASE ends at `--`; options go before it.
        let r = report(&[
            "--fail-on",
            "write=50%,failed",
            "--compare",
            "a",
            "b",
            "--",
            "c",
        ])
        .unwrap();
        assert_eq!(
            (r.compare, r.input),
            (vec!["a".into(), "b".into()], vec!["c".into()])
        );
        assert_eq!(r.fail_on.len(), 2);
        let r = report(&["new", "--compare", "base"]).unwrap();
        assert_eq!(
            (r.compare, r.input),
            (vec!["base".into()], vec!["new".into()])
        );
        // A bare --markdown takes no file after it: that is an input.
        let r = report(&["--markdown", "x.jsonl"]).unwrap();
        assert_eq!(
            (r.markdown.as_deref(), r.input),
            (Some("-"), vec!["x.jsonl".into()])
        );
        let r = report(&["--markdown=s.md", "x.jsonl"]).unwrap();
        assert_eq!(r.markdown.as_deref(), Some("s.md"));
        assert!(
            report(&["x", "--fail-on", "any"]).is_err(),
            "--fail-on needs --compare"
        );
        assert!(
            report(&["--compare", "a", "--", "b", "--fail-on", "speed"]).is_ok(),
            "after --, an input"
        );
        assert!(report(&["--fail-on", "speed", "--compare", "a", "--", "b"]).is_err());
        // Neither --cgroup nor --runtime: every runtime found (decided when it runs).
        assert!(Cli::try_parse_from(["profiler", "attach"]).is_ok());
        assert!(
            Cli::try_parse_from(["profiler", "attach", "--cgroup", "x", "--exec-depth", "-1"])
                .is_err()
        );
    }
}
