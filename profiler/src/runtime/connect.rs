//! Connecting to a runtime: is it there and running, where does it put its execs (its cgroup
//! driver and parent), and which runtimes are present for naming a plain `--cgroup`'s execs.

use std::{
    env,
    path::{Path, PathBuf},
};

use anyhow::{Result, bail};

use super::{
    API_TIMEOUT, Connected, RuntimeKind, RuntimeSettings, Source, Sources, docker, oci, podman,
};
use crate::monitor::NamedExecs;

/// Connect to the named runtime: check it is there and running, find its cgroup parent.
pub(super) fn connect(
    kind: RuntimeKind,
    args: &RuntimeSettings,
    mount: &Path,
) -> Result<(Sources, Connected)> {
    let systemd_host = Path::new("/run/systemd/system").is_dir();
    let (list, parent, systemd, describe) = match kind {
        RuntimeKind::Docker | RuntimeKind::Buildkit => {
            let socket = docker_socket(args)?;
            let api = docker::Api::new(&socket, API_TIMEOUT)?;
            let info = api.info()?;
            let systemd = info.cgroup_driver == "systemd";
            let parent = default_parent(kind, systemd).unwrap_or_default().to_owned();
            let executor = info.root_dir.join("buildkit/executor");
            let describe = format!(
                "{} via dockerd at {} ({} cgroup driver, data root {})",
                kind.name(),
                socket.display(),
                info.cgroup_driver,
                info.root_dir.display()
            );
            (
                vec![Source::Docker(api), Source::Buildkit(executor)],
                parent,
                systemd,
                describe,
            )
        }
        RuntimeKind::Podman => {
            let storage = podman::Storage::find(args.root.as_deref())?;
            let systemd = podman::cgroup_manager_is_systemd(systemd_host);
            let parent = default_parent(kind, systemd).unwrap_or_default().to_owned();
            let describe = format!(
                "podman with storage at {} ({} cgroup manager; its builds' RUN steps too)",
                storage.root().display(),
                if systemd { "systemd" } else { "cgroupfs" }
            );
            (
                vec![Source::Podman(storage), buildah_source()],
                parent,
                systemd,
                describe,
            )
        }
        RuntimeKind::Buildah => {
            // buildah and podman share containers/storage; either builds.
            let tool = if podman::which("buildah") || !podman::which("podman") {
                "buildah"
            } else {
                "podman"
            };
            let storage = podman::Storage::find_for(tool, args.root.as_deref())?;
            let systemd = podman::cgroup_manager_is_systemd(systemd_host);
            let describe = format!(
                "buildah's RUN steps ({tool} with storage at {}, {} cgroup manager)",
                storage.root().display(),
                if systemd { "systemd" } else { "cgroupfs" }
            );
            (vec![buildah_source()], String::new(), systemd, describe)
        }
        RuntimeKind::Containerd => {
            let socket = args
                .endpoint
                .clone()
                .or_else(|| env::var_os("CONTAINERD_ADDRESS").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from("/run/containerd/containerd.sock"));
            check_socket(
                "containerd",
                &socket,
                "start containerd, or pass --runtime-endpoint",
            )?;
            let state = args
                .root
                .clone()
                .unwrap_or_else(|| PathBuf::from("/run/containerd"));
            if let Err(e) = std::fs::read_dir(&state) {
                bail!(
                    "containerd's state directory {} cannot be read ({e}); pass --runtime-root",
                    state.display()
                );
            }
            let namespace = env::var("CONTAINERD_NAMESPACE").unwrap_or_else(|_| "default".into());
            let describe = format!(
                "containerd at {} (namespace {namespace}, state {})",
                socket.display(),
                state.display()
            );
            // ctr and nerdctl (cgroupfs) put a container at /<namespace>/<id>.
            let parent = default_parent(kind, false).unwrap_or(&namespace).to_owned();
            (
                vec![Source::Containerd { state, namespace }],
                parent,
                false,
                describe,
            )
        }
    };
    let named = if matches!(kind, RuntimeKind::Podman | RuntimeKind::Buildah) {
        buildah_steps(mount, systemd)
    } else {
        Vec::new()
    };
    Ok((
        Sources {
            list,
            named: Some(kind),
        },
        Connected {
            cgroup_parent: mount.join(parent),
            systemd,
            describe,
            // (With the systemd driver the steps are scopes beside the containers.)
            nests: if kind == RuntimeKind::Docker && !systemd {
                vec![PathBuf::from("buildkit")]
            } else {
                Vec::new()
            },
            watch_parent: kind != RuntimeKind::Buildah,
            named,
        },
    ))
}

/// Where buildah (and `podman build`) puts each RUN step: the OCI runtime's default for a
/// container without a cgroup path, named after the container (`buildah-buildah<N>`): at the
/// cgroup root with the cgroupfs manager, a `runc-`/`crun-` scope in system.slice with the
/// systemd one (and at the root too, where buildah leaves the runtime on cgroupfs).
pub(super) fn buildah_steps(mount: &Path, systemd: bool) -> Vec<NamedExecs> {
    let rule = |parent: &Path, prefix: &str| NamedExecs {
        parent: parent.to_owned(),
        prefix: prefix.to_owned(),
    };
    let mut v = vec![rule(mount, "buildah-buildah")];
    if systemd {
        let slice = mount.join("system.slice");
        v.push(rule(&slice, "runc-buildah-buildah"));
        v.push(rule(&slice, "crun-buildah-buildah"));
    }
    v
}

/// buildah's steps, named through the state of runc and of crun.
fn buildah_source() -> Source {
    Source::Buildah([oci::StateRoot::runc(), oci::StateRoot::crun()])
}

/// Where a runtime puts its execs by default, relative to the v2 root, by cgroup driver
/// (containerd: in a directory named after its namespace). dockerd's --cgroup-parent changes
/// docker's: then --cgroup says where. dockerd's BuildKit puts its steps in
/// <parent>/buildkit/ID, and with the systemd driver in <slice>/docker-ID.scope beside the
/// containers.
fn default_parent(kind: RuntimeKind, systemd: bool) -> Option<&'static str> {
    Some(match (kind, systemd) {
        (RuntimeKind::Docker | RuntimeKind::Buildkit, true) => "system.slice",
        (RuntimeKind::Docker, false) => "docker",
        (RuntimeKind::Buildkit, false) => "docker/buildkit",
        (RuntimeKind::Podman, true) => "machine.slice",
        (RuntimeKind::Podman, false) => "libpod_parent",
        (RuntimeKind::Containerd | RuntimeKind::Buildah, _) => return None,
    })
}

/// dockerd's socket: --runtime-endpoint, $DOCKER_HOST (unix:// only), /var/run/docker.sock.
fn docker_socket(args: &RuntimeSettings) -> Result<PathBuf> {
    let socket = match (&args.endpoint, env::var("DOCKER_HOST")) {
        (Some(p), _) => p.clone(),
        (None, Ok(h)) if !h.is_empty() => match h.strip_prefix("unix://") {
            Some(p) => PathBuf::from(p),
            None => bail!(
                "DOCKER_HOST={h} is not a unix socket: the profiler runs on the docker host; \
                 point DOCKER_HOST or --runtime-endpoint at dockerd's socket"
            ),
        },
        _ => PathBuf::from("/var/run/docker.sock"),
    };
    check_socket(
        "docker",
        &socket,
        "start dockerd, or point DOCKER_HOST or --runtime-endpoint at its socket",
    )?;
    Ok(socket)
}

/// A runtime's socket must exist and accept a connection.
fn check_socket(runtime: &str, socket: &Path, fix: &str) -> Result<()> {
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => Ok(()),
        Err(e) => {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "no such socket".to_owned(),
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
                _ => e.to_string(),
            };
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                bail!("cannot connect to {runtime} at {}: {why}", socket.display());
            }
            bail!(
                "{runtime} is not running: cannot connect to {} ({why}); {fix}",
                socket.display()
            )
        }
    }
}

/// The runtimes present here, for naming the execs of a plain `--cgroup` (nothing is said
/// when one is missing).
pub(super) fn detect() -> Sources {
    let mut list = Vec::new();
    if let Ok(socket) = docker_socket(&RuntimeSettings::default())
        && let Ok(api) = docker::Api::new(&socket, API_TIMEOUT)
        && let Ok(info) = api.info()
    {
        list.push(Source::Docker(api));
        list.push(Source::Buildkit(info.root_dir.join("buildkit/executor")));
    }
    if let Ok(storage) = podman::Storage::find(None)
        && storage.exists()
    {
        list.push(Source::Podman(storage));
    }
    let state = PathBuf::from("/run/containerd");
    if state.join("io.containerd.runtime.v2.task").is_dir() {
        let namespace = env::var("CONTAINERD_NAMESPACE").unwrap_or_else(|_| "default".into());
        list.push(Source::Containerd { state, namespace });
    }
    // runc and crun make their state roots at their first container: look there whether
    // they exist now or not (a lookup of an exec that is not theirs is a failed open each).
    list.push(Source::Oci(oci::StateRoot::runc()));
    list.push(Source::Oci(oci::StateRoot::crun()));
    list.push(buildah_source());
    Sources { list, named: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_parents_by_driver() {
        use RuntimeKind::*;
        assert_eq!(default_parent(Docker, false), Some("docker"));
        assert_eq!(default_parent(Buildkit, false), Some("docker/buildkit"));
        // systemd driver: scopes in the slice, named docker-ID.scope for steps too.
        assert_eq!(default_parent(Docker, true), Some("system.slice"));
        assert_eq!(default_parent(Buildkit, true), Some("system.slice"));
        assert_eq!(default_parent(Podman, false), Some("libpod_parent"));
        assert_eq!(default_parent(Podman, true), Some("machine.slice"));
        assert_eq!(default_parent(Containerd, false), None);
    }
}
