//! Shell completions and man pages, generated from the clap definitions (the packages ship
//! both: `cargo xtask dist`).

use std::{fs, path::PathBuf};

use anyhow::{Context as _, Result};
use clap::{Args, CommandFactory as _};
use clap_complete::Shell;

use super::Cli;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManpagesArgs {
    /// Directory to write profiler.1 and profiler-SUBCOMMAND.1 into (created when missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

pub(crate) fn completions(a: CompletionsArgs) -> Result<()> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "profiler", &mut out);
    super::write_stdout(&out)
}

pub(crate) fn manpages(a: ManpagesArgs) -> Result<()> {
    fs::create_dir_all(&a.dir).with_context(|| format!("cannot create {}", a.dir.display()))?;
    let cmd = Cli::command();
    let cmd = cmd.version(env!("CARGO_PKG_VERSION"));
    let mut pages = vec![("profiler".to_owned(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // Named as the page's own title: "profiler-attach", as git and cargo name theirs.
        let name = format!("profiler-{}", sub.get_name());
        pages.push((
            name.clone(),
            sub.clone().name(name).version(env!("CARGO_PKG_VERSION")),
        ));
    }
    for (name, page) in pages {
        let mut buf = Vec::new();
        clap_mangen::Man::new(page).render(&mut buf)?;
        let path = a.dir.join(format!("{name}.1"));
        fs::write(&path, buf).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
