//! Build the eBPF programs (profiler-ebpf) for the BPF target and embed them: `cargo build`
//! of the profiler is all it takes (needs the nightly toolchain's rust-src and bpf-linker;
//! `cargo xtask setup` installs both).

use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
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

fn which_bpf_linker() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bpf-linker"))
        .find(|p| p.is_file())
}
