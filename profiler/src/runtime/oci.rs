//! OCI bundles (`config.json`, the runtime spec a container is started from) and the state
//! of runc and crun, which names a container's bundle.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use serde_json::Value;

use super::{ContainerInfo, K8s, command_line};

/// The parts of a bundle's config.json that name what ran.
pub struct Bundle {
    args: Vec<String>,
    annotations: serde_json::Map<String, Value>,
    /// linux.cgroupsPath: where the runtime puts the container.
    cgroups_path: Option<String>,
}

impl Bundle {
    /// Read `<dir>/config.json`. NotFound when the bundle is gone (its container ended).
    pub fn read(dir: &Path) -> io::Result<Self> {
        let text = fs::read(dir.join("config.json"))?;
        let v: Value = serde_json::from_slice(&text)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(Self::from_spec(&v))
    }

    pub(super) fn from_spec(v: &Value) -> Self {
        let args = v["process"]["args"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let annotations = v["annotations"].as_object().cloned().unwrap_or_default();
        let cgroups_path = v["linux"]["cgroupsPath"].as_str().map(str::to_owned);
        Self {
            args,
            annotations,
            cgroups_path,
        }
    }

    /// Whether the bundle puts its container in the cgroup at `path` (from the v2 root).
    pub fn in_cgroup(&self, path: &str) -> bool {
        self.cgroups_path
            .as_deref()
            .is_some_and(|p| p.trim_end_matches('/') == path.trim_end_matches('/'))
    }

    pub fn command(&self) -> Option<String> {
        command_line(&self.args)
    }

    fn annotation(&self, key: &str) -> Option<String> {
        self.annotations
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    }

    /// The pod of a Kubernetes container, from its annotations.
    pub fn k8s(&self) -> Option<K8s> {
        K8s::from_map(&self.annotations)
    }

    /// A containerd task's metadata: the CRI plugin annotates name, image and pod; ctr and
    /// nerdctl containers have only their id (and what `--label` or `--annotation` put in).
    pub fn containerd_info(&self, id: &str) -> ContainerInfo {
        let k8s = self.k8s();
        ContainerInfo {
            runtime: "containerd",
            id: id.to_owned(),
            name: self
                .annotation("io.kubernetes.cri.container-name")
                .or_else(|| k8s.as_ref().and_then(|k| k.container_name.clone())),
            image: self.annotation("io.kubernetes.cri.image-name"),
            command: self.command(),
            k8s,
        }
    }
}

/// An OCI runtime's state root, which names each running container's bundle: runc's
/// `<root>/<id>/state.json` (a label `bundle=`), crun's `<root>/<id>/status` (a key `bundle`).
#[derive(Debug, Clone)]
pub struct StateRoot {
    pub runtime: &'static str,
    pub dir: PathBuf,
}

impl StateRoot {
    /// runc's default root (`runc --root`); made at its first container.
    pub fn runc() -> Self {
        Self {
            runtime: "runc",
            dir: PathBuf::from("/run/runc"),
        }
    }

    /// crun's default root as root (`crun --root`).
    pub fn crun() -> Self {
        Self {
            runtime: "crun",
            dir: PathBuf::from("/run/crun"),
        }
    }

    /// The bundle that the state of container `id` names (None inside: the state names
    /// none). None: this runtime has no such container.
    fn bundle_of(&self, id: &str) -> Option<Result<Option<PathBuf>, String>> {
        let runtime = self.runtime;
        let file = if runtime == "crun" {
            "status"
        } else {
            "state.json"
        };
        let text = match fs::read(self.dir.join(id).join(file)) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                return Some(Err(format!(
                    "{runtime}: cannot read the state of {id}: {e}"
                )));
            }
        };
        let state: Value = match serde_json::from_slice(&text) {
            Ok(v) => v,
            Err(e) => return Some(Err(format!("{runtime}: bad state of {id}: {e}"))),
        };
        let bundle = if runtime == "crun" {
            state["bundle"].as_str().map(str::to_owned)
        } else {
            state["config"]["labels"].as_array().and_then(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .find_map(|s| s.strip_prefix("bundle="))
                    .map(str::to_owned)
            })
        };
        Some(Ok(bundle.filter(|b| !b.is_empty()).map(PathBuf::from)))
    }

    /// A container's metadata from its state and bundle; None when this runtime has no such
    /// container (or, with `in_cgroup`, none whose bundle puts it in that cgroup).
    pub fn container(
        &self,
        id: &str,
        in_cgroup: Option<&str>,
    ) -> Option<Result<ContainerInfo, String>> {
        let bundle = match self.bundle_of(id)? {
            Ok(b) => b.and_then(|b| Bundle::read(&b).ok()),
            Err(e) => return Some(Err(e)),
        };
        if let Some(path) = in_cgroup
            && !bundle.as_ref().is_some_and(|b| b.in_cgroup(path))
        {
            return None;
        }
        // CRI-O runs runc with kubelet's labels as annotations.
        Some(Ok(ContainerInfo {
            runtime: self.runtime,
            id: id.to_owned(),
            name: None,
            image: None,
            command: bundle.as_ref().and_then(Bundle::command),
            k8s: bundle.as_ref().and_then(Bundle::k8s),
        }))
    }
}

/// A buildah RUN step (`buildah-buildah<N>`, its container name and cgroup): its bundle is
/// the directory `buildah<N>` that the OCI runtime's state names, else that directory under
/// $TMPDIR or /var/tmp, where buildah makes it. The name ties bundle and cgroup: a state
/// naming another directory is not this step's.
pub fn buildah_step(state_roots: &[StateRoot], id: &str) -> Result<ContainerInfo, String> {
    let dir_name = id.strip_prefix("buildah-").unwrap_or(id);
    let from_state = state_roots
        .iter()
        .find_map(|root| root.bundle_of(id)?.ok().flatten());
    let tmp = std::env::var_os("TMPDIR").map(PathBuf::from);
    let dirs = from_state.into_iter().chain(
        tmp.into_iter()
            .chain([PathBuf::from("/var/tmp")])
            .map(|t| t.join(dir_name)),
    );
    let mut last = None;
    for dir in dirs {
        if dir.file_name().and_then(|n| n.to_str()) != Some(dir_name) {
            last = Some(format!(
                "buildah: the runtime's state of {id} names bundle {}, not this step's",
                dir.display()
            ));
            continue;
        }
        match Bundle::read(&dir) {
            Ok(b) => {
                return Ok(ContainerInfo {
                    runtime: "buildah",
                    id: id.to_owned(),
                    name: None,
                    image: None,
                    command: b.command(),
                    k8s: None,
                });
            }
            Err(e) => last = last.or(Some(format!("{}: {e}", dir.display()))),
        }
    }
    Err(format!(
        "buildah: the bundle of step {id} could not be read (the step may have ended first): {}",
        last.unwrap_or_else(|| "no runtime state names it".into())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buildah_step_is_named_from_the_bundle_its_runtime_state_names() {
        let d = std::env::temp_dir().join(format!("profiler-buildah-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let (runc, crun) = (d.join("runc"), d.join("crun"));
        let roots = [
            StateRoot {
                runtime: "runc",
                dir: runc.clone(),
            },
            StateRoot {
                runtime: "crun",
                dir: crun.clone(),
            },
        ];
        let bundle = |n: &str, cmd: &str| {
            let b = d.join("tmp").join(n);
            fs::create_dir_all(&b).unwrap();
            let spec = serde_json::json!({"process": {"args": ["/bin/sh", "-c", cmd]}});
            fs::write(b.join("config.json"), spec.to_string()).unwrap();
            b
        };
        let state = |root: &std::path::Path, id: &str, file: &str, v: Value| {
            fs::create_dir_all(root.join(id)).unwrap();
            fs::write(root.join(id).join(file), v.to_string()).unwrap();
        };
        // runc: the bundle is a label of its state.
        let b1 = bundle("buildah11", "make");
        let label = format!("bundle={}", b1.display());
        state(
            &runc,
            "buildah-buildah11",
            "state.json",
            serde_json::json!({"config": {"labels": [label]}}),
        );
        // crun: a key of its status.
        let b2 = bundle("buildah22", "make test");
        state(
            &crun,
            "buildah-buildah22",
            "status",
            serde_json::json!({"bundle": b2}),
        );
        // A state naming another step's bundle is not believed.
        state(
            &runc,
            "buildah-buildah33",
            "state.json",
            serde_json::json!({"config": {"labels": [format!("bundle={}", b1.display())]}}),
        );
        let c = buildah_step(&roots, "buildah-buildah11").unwrap();
        assert_eq!(
            (c.runtime, c.command.as_deref()),
            ("buildah", Some("/bin/sh -c make"))
        );
        let c = buildah_step(&roots, "buildah-buildah22").unwrap();
        assert_eq!(c.command.as_deref(), Some("/bin/sh -c make test"));
        let e = buildah_step(&roots, "buildah-buildah33").unwrap_err();
        assert!(e.contains("not this step's"), "{e}");
        let e = buildah_step(&roots, "buildah-buildah44").unwrap_err();
        assert!(e.contains("may have ended first"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn spec_gives_command_and_cri_annotations() {
        let v: Value = serde_json::from_str(
            r#"{"process":{"args":["/bin/sh","-c","make -j2"]},
                "annotations":{"io.kubernetes.cri.container-name":"build",
                               "io.kubernetes.cri.image-name":"docker.io/library/gcc:13"}}"#,
        )
        .unwrap();
        let b = Bundle::from_spec(&v);
        assert_eq!(b.command().as_deref(), Some("/bin/sh -c make -j2"));
        let c = b.containerd_info("x1");
        assert_eq!(c.name.as_deref(), Some("build"));
        assert_eq!(c.image.as_deref(), Some("docker.io/library/gcc:13"));
        let bare = Bundle::from_spec(&serde_json::json!({"process":{"args":["true"]}}));
        assert_eq!(bare.containerd_info("x2").name, None);
        assert_eq!(bare.containerd_info("x2").k8s, None);
    }

    /// The annotations containerd's CRI plugin writes into a container's spec.
    #[test]
    fn cri_annotations_give_the_pod() {
        let v: Value = serde_json::from_str(
            r#"{"process":{"args":["/app"]},
                "annotations":{"io.kubernetes.cri.container-type":"container",
                               "io.kubernetes.cri.container-name":"app",
                               "io.kubernetes.cri.sandbox-id":"4f1c",
                               "io.kubernetes.cri.sandbox-name":"web-7d9f-x2kq",
                               "io.kubernetes.cri.sandbox-namespace":"shop",
                               "io.kubernetes.cri.sandbox-uid":"0d3c-11ef",
                               "io.kubernetes.cri.image-name":"registry.local/app:1"}}"#,
        )
        .unwrap();
        let c = Bundle::from_spec(&v).containerd_info("x1");
        assert_eq!(c.name.as_deref(), Some("app"));
        assert_eq!(
            c.k8s,
            Some(K8s {
                pod_name: "web-7d9f-x2kq".into(),
                namespace: "shop".into(),
                pod_uid: Some("0d3c-11ef".into()),
                container_name: Some("app".into()),
            })
        );
        assert_eq!(c.display_name().as_deref(), Some("shop/web-7d9f-x2kq/app"));
        // The pod's sandbox (pause) container: the pod, no container name.
        let sandbox = Bundle::from_spec(&serde_json::json!({"annotations": {
            "io.kubernetes.cri.container-type": "sandbox",
            "io.kubernetes.cri.sandbox-name": "web-7d9f-x2kq",
            "io.kubernetes.cri.sandbox-namespace": "shop"}}));
        let k = sandbox.k8s().unwrap();
        assert_eq!((k.pod_uid, k.container_name), (None, None));
    }

    /// kubelet's labels, as `ctr run --label` leaves them in the spec (and CRI-O does).
    #[test]
    fn kubelet_labels_give_the_pod() {
        let b = Bundle::from_spec(&serde_json::json!({"annotations": {
            "io.kubernetes.pod.name": "db-0",
            "io.kubernetes.pod.namespace": "data",
            "io.kubernetes.pod.uid": "77aa",
            "io.kubernetes.container.name": "postgres"}}));
        let c = b.containerd_info("x1");
        assert_eq!(c.name.as_deref(), Some("postgres"));
        let k = c.k8s.unwrap();
        assert_eq!(
            (k.pod_name.as_str(), k.namespace.as_str()),
            ("db-0", "data")
        );
        assert_eq!(k.pod_uid.as_deref(), Some("77aa"));
        assert_eq!(k.container_name.as_deref(), Some("postgres"));
        // Both: containerd's own annotations win; a pod needs its name and namespace.
        let both = Bundle::from_spec(&serde_json::json!({"annotations": {
            "io.kubernetes.cri.sandbox-name": "a",
            "io.kubernetes.pod.name": "b",
            "io.kubernetes.pod.namespace": "ns"}}));
        assert_eq!(both.k8s().unwrap().pod_name, "a");
        let half = Bundle::from_spec(&serde_json::json!({"annotations": {
            "io.kubernetes.pod.name": "b", "io.kubernetes.pod.namespace": ""}}));
        assert_eq!(half.k8s(), None);
    }

    #[test]
    fn runc_and_crun_state_name_the_bundle() {
        let dir = std::env::temp_dir().join(format!("profiler-oci-test-{}", std::process::id()));
        let bundle = dir.join("bundle");
        fs::create_dir_all(dir.join("runc/c1")).unwrap();
        fs::create_dir_all(dir.join("crun/c1")).unwrap();
        fs::create_dir_all(&bundle).unwrap();
        fs::write(
            bundle.join("config.json"),
            r#"{"process":{"args":["/bin/busy","200000"]},"linux":{"cgroupsPath":"/ci/c1"},
                "annotations":{"io.kubernetes.pod.name":"p","io.kubernetes.pod.namespace":"n"}}"#,
        )
        .unwrap();
        fs::write(
            dir.join("runc/c1/state.json"),
            format!(
                r#"{{"id":"c1","config":{{"labels":["bundle={}"]}}}}"#,
                bundle.display()
            ),
        )
        .unwrap();
        // Its keys as crun writes them (libcrun_write_container_status).
        fs::write(
            dir.join("crun/c1/status"),
            format!(
                r#"{{"pid":42,"process-start-time":7,"cgroup-path":"/ci/c1","scope":"",
                    "rootfs":"{0}/rootfs","systemd-cgroup":false,"bundle":"{0}","created":
                    "2026-12-07T18:00:00Z","owner":"","detached":false,
                    "external_descriptors":"[]"}}"#,
                bundle.display()
            ),
        )
        .unwrap();
        for runtime in ["runc", "crun"] {
            let root = StateRoot {
                runtime,
                dir: dir.join(runtime),
            };
            let c = root.container("c1", None).unwrap().unwrap();
            assert_eq!(c.runtime, runtime);
            assert_eq!(c.command.as_deref(), Some("/bin/busy 200000"));
            assert_eq!(c.display_name().as_deref(), Some("n/p"));
            assert!(root.container("c1", Some("/ci/c1")).is_some());
            // A cgroup of the same name elsewhere is not that container.
            assert!(root.container("c1", Some("/other/c1")).is_none());
            assert!(root.container("c2", None).is_none());
        }
        fs::write(dir.join("crun/c1/status"), "{").unwrap();
        let crun = StateRoot {
            runtime: "crun",
            dir: dir.join("crun"),
        };
        let e = crun.container("c1", None).unwrap().unwrap_err();
        assert!(e.starts_with("crun: bad state of c1"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
