//! `cargo xtask dist` and `cargo xtask image`: what an operator installs.
//!
//! dist: into target/dist/, the statically linked profiler (eBPF programs embedded) in a
//! versioned tarball with its sha256 file, the README, the licences, the man pages, shell
//! completions, the default config and the systemd unit; and a .deb of the same made by
//! cargo-deb (metadata in profiler/Cargo.toml). image: a FROM-scratch container image of the
//! same binary, built with the local Docker Engine and saved as a tarball.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{cargo, ensure_debian_packages, output, root, run};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
const TRIPLE: &str = "x86_64-linux";
/// cargo-deb's version: the one whose asset and systemd-unit handling profiler/Cargo.toml
/// was written for.
const CARGO_DEB: &str = "3.8.0";

fn dist_dir() -> PathBuf {
    root().join("target/dist")
}

/// The statically linked profiler (glibc linked in: it runs on any x86_64 Linux and in an
/// image with nothing else): the one the VM matrix runs, built with the same command so that
/// one build serves both.
fn static_profiler() -> Result<PathBuf> {
    Ok(crate::vmtest::build_static_bins()?.join("profiler"))
}

/// Make the tarball and the .deb; returns the directory holding them.
pub fn dist() -> Result<PathBuf> {
    let binary = static_profiler()?;
    let dir = dist_dir();
    // Fixed name: profiler/Cargo.toml's deb assets point here.
    let stage = dir.join("stage");
    let _ = fs::remove_dir_all(&stage);
    for d in ["man", "completions"] {
        fs::create_dir_all(stage.join(d))?;
    }
    let bin = stage.join("profiler");
    fs::copy(&binary, &bin)?;
    let version = output(Command::new(&bin).arg("--version"))?;
    eprintln!("xtask: {}", version.trim());
    for f in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        fs::copy(root().join(f), stage.join(f))?;
    }
    fs::copy(
        root().join("deploy/profiler.toml"),
        stage.join("profiler.toml"),
    )?;
    fs::copy(
        root().join("deploy/systemd/profiler.service"),
        stage.join("profiler.service"),
    )?;
    // The fleet's Prometheus rules and Grafana dashboard (docs/fleet.md).
    for (dir, f) in [
        ("prometheus", "profiler-rules.yml"),
        ("grafana", "profiler-dashboard.json"),
    ] {
        fs::create_dir_all(stage.join(dir))?;
        fs::copy(
            root().join("deploy").join(dir).join(f),
            stage.join(dir).join(f),
        )?;
    }
    // Generated from the clap definitions by the binary itself.
    run(Command::new(&bin).arg("manpages").arg(stage.join("man")))?;
    run(Command::new("gzip")
        .args(["-9n", "-r"])
        .arg(stage.join("man")))?;
    for (shell, name) in [
        ("bash", "profiler.bash"),
        ("zsh", "_profiler"),
        ("fish", "profiler.fish"),
    ] {
        let script = output(Command::new(&bin).args(["completions", shell]))?;
        fs::write(stage.join("completions").join(name), script)?;
    }

    let name = format!("profiler-{VERSION}-{TRIPLE}");
    let tarball = dir.join(format!("{name}.tar.gz"));
    run(Command::new("tar")
        .arg("-C")
        .arg(&dir)
        .args(["--owner=0", "--group=0", "--sort=name", "-czf"])
        .arg(&tarball)
        .arg(format!("--transform=s,^stage,{name},"))
        .arg("stage"))?;
    let sum = output(
        Command::new("sha256sum")
            .current_dir(&dir)
            .arg(tarball.file_name().unwrap()),
    )?;
    fs::write(dir.join(format!("{name}.tar.gz.sha256")), sum)?;

    install_cargo_deb()?;
    let deb = dir.join(format!("profiler_{VERSION}-1_amd64.deb"));
    let _ = fs::remove_file(&deb);
    run(cargo()
        .args([
            "deb",
            "-p",
            "profiler",
            "--no-build",
            "--no-strip",
            "--output",
        ])
        .arg(&deb))?;
    for f in [&tarball, &deb] {
        let size = fs::metadata(f)?.len();
        eprintln!(
            "xtask: {} ({:.1} MiB)",
            f.display(),
            size as f64 / (1 << 20) as f64
        );
    }
    Ok(dir)
}

fn install_cargo_deb() -> Result<()> {
    let have = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(CARGO_DEB)
        });
    if !have {
        // dpkg-deb builds the archive; cargo-deb writes its control files.
        ensure_debian_packages(&[("dpkg-dev", "dpkg-shlibdeps")])?;
        run(Command::new("cargo").args([
            "install",
            "--locked",
            "cargo-deb",
            "--version",
            CARGO_DEB,
        ]))?;
    }
    Ok(())
}

/// The image's name and tag.
pub fn image_ref() -> String {
    format!("profiler:{VERSION}")
}

/// The saved image made by `image`.
pub fn image_tarball() -> PathBuf {
    dist_dir().join(format!("profiler-image-{VERSION}.tar"))
}

/// Build the sidecar image from the static binary with the local Docker Engine (one started
/// for the purpose when none answers) and save it as a tarball: there is no registry here.
pub fn image() -> Result<PathBuf> {
    let binary = static_profiler()?;
    let context = dist_dir().join("image");
    let _ = fs::remove_dir_all(&context);
    fs::create_dir_all(&context)?;
    fs::copy(&binary, context.join("profiler"))?;
    fs::copy(
        root().join("deploy/profiler.toml"),
        context.join("profiler.toml"),
    )?;
    // The build host's CA bundle, for https OTLP endpoints (the image has nothing else).
    let ca = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if !ca.is_file() {
        crate::apt_install(&["ca-certificates"])?;
    }
    fs::copy(ca, context.join("ca-certificates.crt"))?;
    let revision = output(
        Command::new("git")
            .current_dir(root())
            .args(["rev-parse", "HEAD"]),
    )
    .unwrap_or_default();
    let daemon = Docker::find_or_start()?;
    run(daemon
        .cmd()
        .args(["build", "--quiet", "-f"])
        .arg(root().join("deploy/docker/Dockerfile"))
        .args(["-t", &image_ref()])
        .arg(format!("--build-arg=VERSION={VERSION}"))
        .arg(format!("--build-arg=REVISION={}", revision.trim()))
        .arg(&context))?;
    let tar = image_tarball();
    run(daemon.cmd().args(["save", "-o"]).arg(&tar).arg(image_ref()))?;
    let size = fs::metadata(&tar)?.len();
    eprintln!(
        "xtask: {} ({} saved, {:.1} MiB); load it with `docker load -i`",
        tar.display(),
        image_ref(),
        size as f64 / (1 << 20) as f64
    );
    Ok(tar)
}

/// A Docker Engine to build with: the host's, or a private one for as long as this lives.
struct Docker {
    host: Option<String>,
    child: Option<Child>,
}

impl Docker {
    fn find_or_start() -> Result<Self> {
        // Debian's client: its builder needs no buildx plugin.
        ensure_debian_packages(&[("docker.io", "dockerd")])?;
        let host = Docker {
            host: None,
            child: None,
        };
        if host
            .cmd()
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(host);
        }
        let data = root().join("target/dist/dockerd");
        let exec = PathBuf::from(format!("/run/profiler-xtask-docker-{}", std::process::id()));
        fs::create_dir_all(&data)?;
        fs::create_dir_all(&exec)?;
        let socket = exec.join("docker.sock");
        eprintln!(
            "xtask: no Docker Engine answers: starting one (data root {})",
            data.display()
        );
        let child = Command::new("dockerd")
            .args([
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--log-level=warn",
            ])
            .arg("--data-root")
            .arg(data.join("root"))
            .arg("--exec-root")
            .arg(&exec)
            .arg("--pidfile")
            .arg(exec.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(fs::File::create(data.join("dockerd.log"))?)
            .stderr(fs::File::create(data.join("dockerd.err"))?)
            .spawn()
            .context("cannot start dockerd")?;
        let d = Docker {
            host: Some(format!("unix://{}", socket.display())),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !d
            .cmd()
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            if Instant::now() > deadline {
                bail!(
                    "dockerd did not answer within 60 s (see {})",
                    data.join("dockerd.err").display()
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
        Ok(d)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("/usr/bin/docker");
        if let Some(h) = &self.host {
            c.env("DOCKER_HOST", h);
        }
        c.env("DOCKER_BUILDKIT", "1");
        c
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            if let Some(exec) = self
                .host
                .as_deref()
                .and_then(|h| h.strip_prefix("unix://"))
                .and_then(|s| Path::new(s).parent())
            {
                let _ = fs::remove_dir_all(exec);
            }
        }
    }
}
