//! Build the eBPF programs (profiler-ebpf) for the BPF target and embed them: `cargo build`
//! of the profiler is all it takes (needs the nightly toolchain's rust-src and bpf-linker;
//! `cargo xtask setup` installs both).

use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    quiet_child_cargo();
    commit();
    let meta = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let pkg = meta
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "profiler-ebpf")
        .ok_or_else(|| anyhow!("profiler-ebpf package not found"))?;
    let root = pkg
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", pkg.manifest_path))?;
    if which_bpf_linker().is_none() {
        return Err(anyhow!(
            "bpf-linker not found on PATH: run `cargo xtask setup` to install it (and the nightly rust-src)"
        ));
    }
    aya_build::build_ebpf(
        [aya_build::Package {
            name: pkg.name.as_str(),
            root_dir: root.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}

/// aya-build forwards every line the eBPF crate's cargo writes to stderr as a `cargo:warning`,
/// its progress (`Compiling ...`, `Finished ...`) included. That cargo inherits our
/// environment: make it quiet (cargo's `term.quiet`), so that what is forwarded is what matters,
/// the compiler's warnings and errors (which it reads from the JSON messages, quiet or not) and
/// cargo's errors. Unless verbosity was asked for (`term.verbose` and `term.quiet` together are
/// an error).
fn quiet_child_cargo() {
    if std::env::var_os("CARGO_TERM_VERBOSE").is_none()
        && std::env::var_os("CARGO_TERM_QUIET").is_none()
    {
        // SAFETY: first thing in a build script's main, before any thread exists.
        unsafe { std::env::set_var("CARGO_TERM_QUIET", "true") };
    }
}

fn which_bpf_linker() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bpf-linker"))
        .find(|p| p.is_file())
}

/// The commit the binary is built from, for `--version`: $PROFILER_COMMIT (set by `cargo xtask
/// dist`), else `git rev-parse` of the tree, else "unknown" (a source tarball).
fn commit() {
    println!("cargo:rerun-if-env-changed=PROFILER_COMMIT");
    let from_git = || {
        let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .current_dir(&dir)
                .args(args)
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        // Rebuilt when HEAD moves (the ref it names, or HEAD itself when detached).
        let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{r}");
            println!("cargo:rerun-if-changed={git_dir}/packed-refs");
        }
        git(&["rev-parse", "--short=12", "HEAD"])
    };
    let commit = std::env::var("PROFILER_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(from_git)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PROFILER_COMMIT={commit}");
}
