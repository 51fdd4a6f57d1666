use std::process::ExitCode;

use clap::{Parser as _, error::ErrorKind};
use profiler::cli::{Cli, run_cli};

fn main() -> ExitCode {
    // glibc's allocator, tuned for a small resident set: one arena (the exporter threads
    // allocate little; each extra arena kept its own free pages: 10 MiB with 1,000 live execs
    // exported over OTLP), buffers above 64 KiB (export requests) in their own mappings,
    // returned when freed, and the heap top trimmed beyond 256 KiB free.
    // SAFETY: mallopt only sets allocator parameters; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 * 1024);
    }
    profiler::diagnostics::init();
    let args = match profiler::cli::config::expand(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            log::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            // One line: what is wrong, and where to look.
            let text = e.to_string();
            let what: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let what = what.join(" ");
            let what = what.strip_prefix("error: ").unwrap_or(&what);
            log::error!("{what} (see `profiler --help`)");
            return ExitCode::from(2);
        }
    };
    profiler::diagnostics::set_verbosity(cli.verbose, cli.quiet);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log::error!("cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(run_cli(cli));
    ExitCode::from(code.clamp(0, 255) as u8)
}
