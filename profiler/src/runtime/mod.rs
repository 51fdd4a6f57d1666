//! Container runtimes: where each one puts its execs' cgroups, and what it says about each
//! exec (container id, name, image, the command it started). Metadata is read when an exec's
//! cgroup appears, and again until found as docs/runtimes.md "When metadata is read" says, on a
//! thread of its own: never on the event loop, never on a hot path.
//!
//! Sources, by runtime:
//! - docker: the Engine API on its unix socket (`GET /containers/ID/json`);
//! - buildkit (dockerd's builder): the OCI bundle of each RUN step,
//!   `<docker root>/buildkit/executor/ID/config.json`, which lives while the step runs;
//! - podman: containers/storage's `containers.json` (name, image) and the container's
//!   `userdata/config.json` (command);
//! - containerd: the task bundle `<state>/io.containerd.runtime.v2.task/NS/ID/config.json`;
//! - runc and crun: their state (`<root>/ID/state.json`, `<root>/ID/status`), which names the
//!   bundle;
//! - buildah (and `podman build`): each RUN step's bundle, `<tmp>/buildah<N>/config.json`,
//!   named by the OCI runtime's state of `buildah-buildah<N>` (runc's `state.json`, crun's
//!   `status`) while the step runs.
//!
//! A Kubernetes container's pod comes from the same metadata (see [`K8s`]): no kubelet or
//! CRI API is asked.

mod connect;
mod docker;
mod oci;
mod podman;

use std::{path::PathBuf, sync::mpsc, thread, time::Duration};

use anyhow::{Context as _, Result, anyhow};
use serde::Serialize;

use self::connect::{connect, detect};
use crate::cgroup::Hierarchy;

/// A container runtime the profiler can follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    Docker,
    /// dockerd's BuildKit: the RUN steps of `docker build`.
    Buildkit,
    Podman,
    Containerd,
    /// buildah's RUN steps (`buildah bud`, `podman build`).
    Buildah,
}

impl RuntimeKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Buildkit => "buildkit",
            Self::Podman => "podman",
            Self::Containerd => "containerd",
            Self::Buildah => "buildah",
        }
    }
}

/// Which runtime to follow, and where it is (defaults: its standard places).
#[derive(Debug, Clone, Default)]
pub struct RuntimeSettings {
    /// None: name the execs from whichever runtimes are present.
    pub runtime: Option<RuntimeKind>,
    /// Its API socket.
    pub endpoint: Option<PathBuf>,
    /// Its state or storage directory.
    pub root: Option<PathBuf>,
}

/// What a runtime said about one exec.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ContainerInfo {
    /// docker, buildkit, podman, containerd, runc, crun or buildah.
    pub runtime: &'static str,
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The command the runtime started (entrypoint and arguments; a RUN step's command).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The Kubernetes pod the container belongs to, when kubelet started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k8s: Option<K8s>,
}

impl ContainerInfo {
    /// What to call the container: `namespace/pod/container` for a pod's, else its name.
    pub fn display_name(&self) -> Option<String> {
        match &self.k8s {
            Some(k) => Some(match &k.container_name {
                Some(c) => format!("{}/{}/{c}", k.namespace, k.pod_name),
                None => format!("{}/{}", k.namespace, k.pod_name),
            }),
            None => self.name.clone(),
        }
    }
}

/// A Kubernetes container's pod, from the keys kubelet's runtime leaves in the metadata the
/// profiler reads: containerd's CRI plugin annotates the OCI spec with `io.kubernetes.cri.*`;
/// kubelet's own labels `io.kubernetes.pod.*` are docker labels under cri-dockerd, CRI-O's
/// annotations, and (with `ctr run --label`, which copies labels into the spec) annotations.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct K8s {
    pub pod_name: String,
    pub namespace: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// None for a pod's sandbox (pause) container under containerd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
}

impl K8s {
    /// From a container's annotations or labels (`get` gives a key's non-empty value); None
    /// unless both the pod's name and namespace are there.
    fn from_keys(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let either = |cri: &str, kubelet: &str| get(cri).or_else(|| get(kubelet));
        Some(Self {
            pod_name: either("io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name")?,
            namespace: either(
                "io.kubernetes.cri.sandbox-namespace",
                "io.kubernetes.pod.namespace",
            )?,
            pod_uid: either("io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"),
            container_name: either(
                "io.kubernetes.cri.container-name",
                "io.kubernetes.container.name",
            ),
        })
    }

    /// From a JSON object of string values (OCI annotations, docker labels).
    fn from_map(m: &serde_json::Map<String, serde_json::Value>) -> Option<Self> {
        Self::from_keys(|k| {
            m.get(k)
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        })
    }
}

/// The outcome of one exec's lookup.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    Found(ContainerInfo),
    /// The exec's cgroup does not name a container of any runtime looked at.
    NotContainer,
    /// It names a container whose metadata could not be read: why.
    Missing(String),
}

/// Longest command kept (a bound on record and attribute size).
const COMMAND_CHARS: usize = 1024;

/// argv words to one string, bounded.
fn command_line<S: AsRef<str>>(words: &[S]) -> Option<String> {
    let s = words
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(" ");
    if s.is_empty() {
        return None;
    }
    Some(if s.chars().count() > COMMAND_CHARS {
        let mut t: String = s.chars().take(COMMAND_CHARS - 1).collect();
        t.push('…');
        t
    } else {
        s
    })
}

/// What an exec's cgroup name says about the container in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Candidate<'a> {
    /// A 64-hex id: docker, podman, containerd and runc all use these.
    Hex(&'a str),
    /// `docker-ID.scope` (docker with the systemd cgroup driver).
    Docker(&'a str),
    /// A BuildKit exec id (25 lower-case base-36 characters), under `buildkit/` or as
    /// `docker-ID.scope`.
    BuildkitStep(&'a str),
    /// `libpod-ID`; `conmon` for podman's monitor process (`libpod-conmon-ID.scope`).
    Podman { id: &'a str, conmon: bool },
    /// `cri-containerd-ID.scope`, `nerdctl-ID.scope`.
    Containerd(&'a str),
    /// A buildah RUN step: `buildah-buildah<N>` (as a scope: `runc-` or `crun-` before it).
    BuildahStep(&'a str),
    /// Any other name: a containerd or runc container id, or no container at all.
    Plain(&'a str),
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// buildah's container name for a RUN step: `buildah-` and its bundle's directory,
/// `buildah<digits>`.
fn is_buildah_step(s: &str) -> bool {
    s.strip_prefix("buildah-buildah")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn is_buildkit_id(s: &str) -> bool {
    s.len() == 25
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// The container an exec's path (relative to the attached cgroup) names, from its last
/// component.
fn candidate(path: &str) -> Option<Candidate<'_>> {
    let mut comps = path.rsplit('/');
    let last = comps.next().filter(|c| !c.is_empty() && *c != ".")?;
    let parent = comps.next();
    let name = last.strip_suffix(".scope").unwrap_or(last);
    if let Some(id) = name.strip_prefix("docker-") {
        if is_hex64(id) {
            return Some(Candidate::Docker(id));
        }
        if is_buildkit_id(id) {
            return Some(Candidate::BuildkitStep(id));
        }
    }
    let step = ["runc-", "crun-"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    if is_buildah_step(step) {
        return Some(Candidate::BuildahStep(step));
    }
    if let Some(id) = name.strip_prefix("libpod-conmon-") {
        return Some(Candidate::Podman { id, conmon: true });
    }
    if let Some(id) = name.strip_prefix("libpod-") {
        return Some(Candidate::Podman { id, conmon: false });
    }
    for p in ["cri-containerd-", "nerdctl-"] {
        if let Some(id) = name.strip_prefix(p) {
            return Some(Candidate::Containerd(id));
        }
    }
    if is_hex64(name) {
        return Some(Candidate::Hex(name));
    }
    if is_buildkit_id(name) && parent == Some("buildkit") {
        return Some(Candidate::BuildkitStep(name));
    }
    Some(Candidate::Plain(name))
}

/// The container id an exec's path names, when it names one by a pattern the runtimes use
/// (`docker-ID.scope`, `libpod-ID`, a 64-hex id, a BuildKit step id, `crio-ID.scope`, ...).
pub fn container_id(path: &str) -> Option<String> {
    for comp in path.rsplit('/') {
        let c = comp.strip_suffix(".scope").unwrap_or(comp);
        let c = [
            "docker-",
            "cri-containerd-",
            "crio-",
            "libpod-",
            "containerd-",
        ]
        .iter()
        .find_map(|p| c.strip_prefix(p))
        .unwrap_or(c);
        if is_hex64(c) || is_buildkit_id(c) {
            return Some(c.to_owned());
        }
    }
    None
}

/// One place metadata can come from.
enum Source {
    Docker(docker::Api),
    /// BuildKit's executor directory: one OCI bundle per running step.
    Buildkit(PathBuf),
    Podman(podman::Storage),
    Containerd {
        state: PathBuf,
        namespace: String,
    },
    /// An OCI runtime's state (runc, crun) for containers it runs on its own.
    Oci(oci::StateRoot),
    /// buildah's RUN steps, through the state roots of runc and crun.
    Buildah([oci::StateRoot; 2]),
}

impl Source {
    /// Look `cand` up. None: this source does not know it (another may).
    fn lookup(&self, cand: Candidate<'_>, path: &str) -> Option<Result<ContainerInfo, String>> {
        use Candidate as C;
        // A plain name is a container's only if its bundle put it in this very cgroup: a CI
        // cgroup named `build` is not the ctr container `build`.
        let here = |b: &oci::Bundle| !matches!(cand, C::Plain(_)) || b.in_cgroup(path);
        match (self, cand) {
            (Source::Docker(api), C::Hex(id) | C::Docker(id)) => api.inspect(id).transpose(),
            (Source::Buildkit(dir), C::BuildkitStep(id)) => Some(
                oci::Bundle::read(&dir.join(id))
                    .map(|b| ContainerInfo {
                        runtime: "buildkit",
                        id: id.to_owned(),
                        name: None,
                        image: None,
                        command: b.command(),
                        k8s: None,
                    })
                    .map_err(|e| {
                        format!(
                            "buildkit: the bundle of step {id} could not be read (the step \
                             may have ended first): {e}"
                        )
                    }),
            ),
            (Source::Podman(s), C::Hex(id)) => s.lookup(id, false).transpose(),
            (Source::Podman(s), C::Podman { id, conmon }) => s.lookup(id, conmon).transpose(),
            (
                Source::Containerd { state, namespace },
                C::Hex(id) | C::Containerd(id) | C::Plain(id),
            ) => {
                // The configured namespace first, then the others (the CRI's is k8s.io).
                let tasks = state.join("io.containerd.runtime.v2.task");
                let mut namespaces = vec![namespace.clone()];
                if let Ok(rd) = std::fs::read_dir(&tasks) {
                    namespaces.extend(
                        rd.flatten()
                            .filter_map(|e| e.file_name().into_string().ok())
                            .filter(|n| n != namespace),
                    );
                }
                for ns in namespaces {
                    match oci::Bundle::read(&tasks.join(&ns).join(id)) {
                        Ok(b) if here(&b) => return Some(Ok(b.containerd_info(id))),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Some(Err(format!(
                                "containerd: the bundle of {id} could not be read: {e}"
                            )));
                        }
                    }
                }
                None
            }
            (Source::Buildah(roots), C::BuildahStep(id)) => Some(oci::buildah_step(roots, id)),
            (Source::Oci(root), C::Hex(id) | C::Plain(id)) => {
                root.container(id, matches!(cand, C::Plain(_)).then_some(path))
            }
            _ => None,
        }
    }
}

/// Which runtime a lookup is for, and where the answers come from.
struct Sources {
    list: Vec<Source>,
    /// The runtime the user named: a container it does not know is then worth a note.
    named: Option<RuntimeKind>,
}

impl Sources {
    fn resolve(&self, path: &str) -> Lookup {
        let Some(cand) = candidate(path) else {
            return Lookup::NotContainer;
        };
        let mut failure = None;
        for s in &self.list {
            match s.lookup(cand, path) {
                Some(Ok(info)) => return Lookup::Found(info),
                Some(Err(why)) => {
                    failure.get_or_insert(why);
                }
                None => {}
            }
        }
        if let Some(why) = failure {
            return Lookup::Missing(why);
        }
        // A name shaped by a runtime, or any exec of a runtime the user named, that no source
        // knows: say so; an unremarkable name under auto-detection is just not a container.
        let shaped = !matches!(cand, Candidate::Plain(_));
        match (self.named, shaped) {
            // Beside its containers, a runtime's cgroup parent holds what it does not make
            // (with the systemd driver, every unit of the slice; dockerd's buildkit/): not
            // containers, and nothing to say about them. containerd's ids can be any name.
            (Some(k), false) if k != RuntimeKind::Containerd => Lookup::NotContainer,
            (Some(k), _) => Lookup::Missing(format!(
                "{}: no container or step {} is known (it may have been removed before it \
                 was read)",
                k.name(),
                path.rsplit('/').next().unwrap_or(path)
            )),
            (None, true) if !self.list.is_empty() => Lookup::Missing(format!(
                "no runtime found here knows container {}",
                path.rsplit('/').next().unwrap_or(path)
            )),
            _ => Lookup::NotContainer,
        }
    }
}

/// The runtime the user named, connected: where its execs are, and how to name them.
pub struct Connected {
    /// The runtime's cgroup parent (absolute, on the v2 mount): its execs are the children.
    pub cgroup_parent: PathBuf,
    /// True when the parent follows the systemd driver's layout (a slice systemd owns).
    pub systemd: bool,
    /// How the runtime was found, said once at start.
    pub describe: String,
    /// Cgroups under the parent whose children are execs too (relative to the parent):
    /// dockerd's BuildKit puts its RUN steps in `buildkit/` beside its containers.
    pub nests: Vec<PathBuf>,
    /// Whether its execs are the parent's children (all runtimes but buildah).
    pub watch_parent: bool,
    /// Execs picked by name outside the parent: buildah's RUN steps (podman's builds too).
    pub named: Vec<crate::monitor::NamedExecs>,
}

/// Reads runtime metadata on its own thread.
pub struct Resolver {
    requests: mpsc::Sender<(u64, String)>,
    answers: mpsc::Receiver<(u64, Lookup)>,
}

impl Resolver {
    /// Connect to the runtime named in `args` (checking that it runs): one Connected; or find
    /// the runtimes present here when none is named: those that run, each Connected. The
    /// work runs on the resolver's thread, so that a blocking HTTP client never runs on the
    /// event loop.
    pub fn start(args: &RuntimeSettings, h: &Hierarchy) -> Result<(Self, Vec<Connected>)> {
        let (req_tx, req_rx) = mpsc::channel::<(u64, String)>();
        let (ans_tx, ans_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let args = args.clone();
        let mount = h.mount.clone();
        thread::Builder::new()
            .name("runtime-metadata".into())
            .spawn(move || {
                let sources = match args.runtime {
                    Some(kind) => match connect(kind, &args, &mount) {
                        Ok((sources, connected)) => {
                            let _ = ready_tx.send(Ok(vec![connected]));
                            sources
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    },
                    None => {
                        let s = detect();
                        let running = [
                            RuntimeKind::Docker,
                            RuntimeKind::Podman,
                            RuntimeKind::Containerd,
                        ]
                        .into_iter()
                        .filter_map(|k| connect(k, &RuntimeSettings::default(), &mount).ok())
                        .map(|(_, c)| c)
                        .collect();
                        let _ = ready_tx.send(Ok(running));
                        s
                    }
                };
                for (id, path) in req_rx {
                    if ans_tx.send((id, sources.resolve(&path))).is_err() {
                        return;
                    }
                }
            })
            .context("cannot start the metadata thread")?;
        let connected = ready_rx
            .recv()
            .map_err(|_| anyhow!("the metadata thread ended before it was ready"))??;
        Ok((
            Self {
                requests: req_tx,
                answers: ans_rx,
            },
            connected,
        ))
    }

    /// Ask for the metadata of an exec (its path relative to the attached cgroup).
    pub fn request(&self, exec_id: u64, path: &str) {
        let _ = self.requests.send((exec_id, path.to_owned()));
    }

    /// The answers that have arrived.
    pub fn answers(&self) -> Vec<(u64, Lookup)> {
        self.answers.try_iter().collect()
    }
}

/// How long one metadata request may take.
const API_TIMEOUT: Duration = Duration::from_secs(2);

/// Metadata read from runtimes is outside input: any JSON, of any shape, is read without a
/// panic (property tests; a failing input is kept in proptest-regressions/).
#[cfg(test)]
mod outside_input {
    use proptest::prelude::*;
    use serde_json::Value;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,40}".prop_map(Value::String),
            // The keys the readers look for, with odd values.
            prop_oneof![
                Just("io.kubernetes.cri.sandbox-name"),
                Just("io.kubernetes.pod.namespace"),
                Just("Labels"),
                Just("args"),
            ]
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("process".to_owned()),
                        Just("args".to_owned()),
                        Just("annotations".to_owned()),
                        Just("linux".to_owned()),
                        Just("cgroupsPath".to_owned()),
                        Just("Config".to_owned()),
                        Just("Labels".to_owned()),
                        Just("Name".to_owned()),
                        Just("Image".to_owned()),
                        Just("names".to_owned()),
                        Just("metadata".to_owned()),
                        Just("CgroupDriver".to_owned()),
                        Just("DockerRootDir".to_owned()),
                        ".{0,12}",
                    ],
                    inner,
                    0..8
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_json_is_read_without_panic(v in json(), id in ".{0,70}") {
            let _ = super::docker::parse_info(&v);
            let _ = super::docker::parse_container(&v, &id);
            let _ = super::podman::from_storage_entry(&v, &id);
            let b = super::oci::Bundle::from_spec(&v);
            let _ = b.containerd_info(&id);
            let _ = b.in_cgroup(&id);
        }

        #[test]
        fn any_containers_conf_is_read_without_panic(text in "(\\[[a-z_]{0,8}\\]|[a-z_]{0,10} ?= ?\"?[^\n]{0,20}|#[^\n]{0,10}|\n){0,12}") {
            let _ = super::podman::toml_key(&text, "engine", "cgroup_manager");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "0a1188119143a8afe519940fd63a06514bf659cb2a5ffb3ddd6aa0a5f54f038b";

    #[test]
    fn candidates_from_cgroup_names() {
        assert_eq!(candidate(H), Some(Candidate::Hex(H)));
        assert_eq!(
            candidate(&format!("docker-{H}.scope")),
            Some(Candidate::Docker(H))
        );
        let bk = "nqen0192luj2j37s2orq02o28";
        assert_eq!(candidate(bk), Some(Candidate::Plain(bk)));
        assert_eq!(
            candidate(&format!("buildkit/{bk}")),
            Some(Candidate::BuildkitStep(bk))
        );
        assert_eq!(
            candidate(&format!("docker-{bk}.scope")),
            Some(Candidate::BuildkitStep(bk))
        );
        assert_eq!(
            candidate(&format!("libpod-{H}")),
            Some(Candidate::Podman {
                id: H,
                conmon: false
            })
        );
        assert_eq!(
            candidate(&format!("libpod-conmon-{H}.scope")),
            Some(Candidate::Podman {
                id: H,
                conmon: true
            })
        );
        assert_eq!(
            candidate(&format!("kubepods/pod1/cri-containerd-{H}.scope")),
            Some(Candidate::Containerd(H))
        );
        assert_eq!(candidate("ci/step-1"), Some(Candidate::Plain("step-1")));
        assert_eq!(candidate("."), None);
        // buildah's RUN steps: at the root (cgroupfs), or a runtime's scope (systemd).
        let step = "buildah-buildah3580042906";
        for path in [
            format!("/{step}"),
            step.to_owned(),
            format!("system.slice/runc-{step}.scope"),
            format!("system.slice/crun-{step}.scope"),
        ] {
            assert_eq!(
                candidate(&path),
                Some(Candidate::BuildahStep(step)),
                "{path}"
            );
        }
        assert_eq!(
            candidate("buildah-buildahx"),
            Some(Candidate::Plain("buildah-buildahx"))
        );
        assert_eq!(
            candidate("buildah-buildah"),
            Some(Candidate::Plain("buildah-buildah"))
        );
    }

    #[test]
    fn container_ids_from_paths() {
        assert_eq!(
            container_id(&format!("system.slice/docker-{H}.scope")).as_deref(),
            Some(H)
        );
        assert_eq!(
            container_id(&format!("kubepods/pod1/cri-containerd-{H}.scope")).as_deref(),
            Some(H)
        );
        assert_eq!(container_id(&format!("docker/{H}")).as_deref(), Some(H));
        assert_eq!(
            container_id("buildkit/k7yq3m2p9x4n8b6v1c5z0w2r8").as_deref(),
            Some("k7yq3m2p9x4n8b6v1c5z0w2r8")
        );
        assert_eq!(container_id("ci/job-42/step-1"), None);
    }

    #[test]
    fn commands_are_bounded() {
        assert_eq!(
            command_line(&["/bin/sh", "-c", "true"]).as_deref(),
            Some("/bin/sh -c true")
        );
        assert_eq!(command_line::<&str>(&[]), None);
        let long = "x".repeat(5000);
        assert_eq!(
            command_line(&[long.as_str()]).unwrap().chars().count(),
            COMMAND_CHARS
        );
    }

    #[test]
    fn a_named_runtime_reports_unknown_execs() {
        let s = Sources {
            list: vec![Source::Oci(oci::StateRoot {
                runtime: "runc",
                dir: PathBuf::from("/nonexistent-runc-root"),
            })],
            named: Some(RuntimeKind::Containerd),
        };
        assert!(matches!(s.resolve("step"), Lookup::Missing(_)));
        // Beside docker's containers, the units of the slice are no containers: no note.
        let docker = Sources {
            list: vec![Source::Oci(oci::StateRoot {
                runtime: "runc",
                dir: PathBuf::from("/nonexistent-runc-root"),
            })],
            named: Some(RuntimeKind::Docker),
        };
        assert_eq!(
            docker.resolve("/system.slice/ssh.service"),
            Lookup::NotContainer
        );
        assert!(matches!(
            docker.resolve(&format!("/system.slice/docker-{H}.scope")),
            Lookup::Missing(_)
        ));
        let auto = Sources {
            list: vec![Source::Oci(oci::StateRoot {
                runtime: "runc",
                dir: PathBuf::from("/nonexistent-runc-root"),
            })],
            named: None,
        };
        assert_eq!(auto.resolve("step"), Lookup::NotContainer);
        assert!(matches!(
            auto.resolve(&format!("docker-{H}.scope")),
            Lookup::Missing(_)
        ));
        assert_eq!(auto.resolve("."), Lookup::NotContainer);
    }
}
