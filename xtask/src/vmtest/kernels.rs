//! The kernels of the matrix, fetched from the Debian archive with a private apt
//! configuration (the host's sources stay untouched).

use std::{
    collections::HashSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use super::KERNELS;
use crate::{output, run};

/// apt with its own sources and state below `dir`: the host's configuration stays untouched.
pub(super) struct Apt {
    dir: PathBuf,
}

impl Apt {
    pub(super) fn new(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir.join("lists/partial"))?;
        fs::create_dir_all(dir.join("cache/archives/partial"))?;
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let mut sources = String::new();
        for suite in KERNELS.iter().map(|(_, s)| *s).collect::<HashSet<_>>() {
            sources.push_str(&format!(
                "deb [signed-by={keyring}] http://deb.debian.org/debian {suite} main\n"
            ));
        }
        fs::write(dir.join("sources.list"), sources)?;
        let apt = Self {
            dir: dir.to_path_buf(),
        };
        run(apt.cmd("apt-get").args(["-q", "update"]))?;
        Ok(apt)
    }

    fn cmd(&self, tool: &str) -> Command {
        let d = self.dir.display();
        let mut c = Command::new(tool);
        for o in [
            format!("Dir::Etc::SourceList={d}/sources.list"),
            "Dir::Etc::SourceParts=/dev/null".into(),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}/cache"),
            // Downloads go to the current directory, which _apt may not be able to write.
            "APT::Sandbox::User=root".into(),
        ] {
            c.args(["-o", &o]);
        }
        c
    }

    /// Download a package (optionally from one suite) into `dir`; returns the .deb path.
    fn download(&self, pkg: &str, suite: Option<&str>, dir: &Path) -> Result<PathBuf> {
        fs::create_dir_all(dir)?;
        let mut c = self.cmd("apt-get");
        c.current_dir(dir).arg("-q");
        if let Some(s) = suite {
            c.args(["-t", s]);
        }
        run(c.args(["download", pkg]))?;
        debs(dir)?
            .into_iter()
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{pkg}_"))
            })
            .with_context(|| format!("apt-get download {pkg} left no .deb"))
    }
}

fn debs(dir: &Path) -> Result<HashSet<PathBuf>> {
    Ok(fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect())
}

/// A kernel ready to boot: its image, release and module tree.
pub(super) struct Kernel {
    pub(super) vmlinuz: PathBuf,
    pub(super) release: String,
    pub(super) modules: PathBuf,
}

/// Fetch `linux-image-amd64` of `suite` and the packages holding its image and modules.
pub(super) fn fetch_kernel(apt: &Apt, suite: &str, dir: &Path) -> Result<Kernel> {
    let debs_dir = dir.join("debs");
    let _ = fs::remove_dir_all(&debs_dir);
    let meta = apt.download("linux-image-amd64", Some(suite), &debs_dir)?;
    // Follow the dependencies that make up the kernel: image, binary and modules packages.
    let mut todo = vec![meta];
    let mut seen = HashSet::new();
    let mut all = Vec::new();
    while let Some(deb) = todo.pop() {
        let deps = output(
            Command::new("dpkg-deb")
                .args(["-f"])
                .arg(&deb)
                .arg("Depends"),
        )?;
        all.push(deb);
        for alt in deps.split(',') {
            for dep in alt.split('|') {
                let name = dep.split_whitespace().next().unwrap_or("");
                let kernel_part = [
                    "linux-image-",
                    "linux-binary-",
                    "linux-modules-",
                    "linux-base-",
                ]
                .iter()
                .any(|p| {
                    name.starts_with(p) && name[p.len()..].starts_with(|c: char| c.is_ascii_digit())
                });
                if kernel_part && seen.insert(name.to_owned()) {
                    todo.push(apt.download(name, None, &debs_dir)?);
                }
            }
        }
    }
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root)?;
    for deb in &all {
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))?;
    }
    let mut modules = None;
    for base in ["lib/modules", "usr/lib/modules"] {
        if let Ok(rd) = fs::read_dir(root.join(base)) {
            for e in rd.flatten() {
                if e.path().join("kernel").is_dir() {
                    modules = Some(e.path());
                }
            }
        }
    }
    let modules =
        modules.with_context(|| format!("no module tree in the {suite} kernel packages"))?;
    let release = modules.file_name().unwrap().to_string_lossy().into_owned();
    let vmlinuz = [
        root.join(format!("boot/vmlinuz-{release}")),
        modules.join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .with_context(|| format!("no vmlinuz for {release}"))?;
    Ok(Kernel {
        vmlinuz,
        release,
        modules,
    })
}
