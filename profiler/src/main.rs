use std::process::ExitCode;

use clap::Parser as _;
use profiler::commands::{Cli, run_cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("profiler: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(run_cli(cli));
    ExitCode::from(code.clamp(0, 255) as u8)
}
