//! OCI bundles (`config.json`, the runtime spec a container is started from) and runc's
//! state, which names a container's bundle.

use std::{fs, io, path::Path};

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

/// A runc container's metadata from `<root>/<id>/state.json`; None when runc there has no
/// such container (or, with `in_cgroup`, none whose bundle puts it in that cgroup).
pub fn runc_state(
    root: &Path,
    id: &str,
    in_cgroup: Option<&str>,
) -> Option<Result<ContainerInfo, String>> {
    let text = match fs::read(root.join(id).join("state.json")) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(format!("runc: cannot read the state of {id}: {e}"))),
    };
    let state: Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => return Some(Err(format!("runc: bad state of {id}: {e}"))),
    };
    // runc records the bundle as a label: "bundle=/path/to/bundle".
    let bundle = state["config"]["labels"].as_array().and_then(|l| {
        l.iter()
            .filter_map(Value::as_str)
            .find_map(|s| s.strip_prefix("bundle="))
            .map(str::to_owned)
    });
    let bundle = bundle.and_then(|b| Bundle::read(Path::new(&b)).ok());
    if let Some(path) = in_cgroup
        && !bundle.as_ref().is_some_and(|b| b.in_cgroup(path))
    {
        return None;
    }
    // CRI-O runs runc with kubelet's labels as annotations.
    Some(Ok(ContainerInfo {
        runtime: "runc",
        id: id.to_owned(),
        name: None,
        image: None,
        command: bundle.as_ref().and_then(Bundle::command),
        k8s: bundle.as_ref().and_then(Bundle::k8s),
    }))
}

/// A buildah RUN step (`buildah-buildah<N>`, its container name and cgroup): its bundle is
/// the directory `buildah<N>` that the OCI runtime's state names (runc's `state.json` label
/// `bundle=`, crun's `status` key `bundle`), else that directory under $TMPDIR or /var/tmp,
/// where buildah makes it. The name ties bundle and cgroup: a state naming another directory
/// is not this step's.
pub fn buildah_step(
    state_roots: &[&std::path::PathBuf],
    id: &str,
) -> Result<ContainerInfo, String> {
    let dir_name = id.strip_prefix("buildah-").unwrap_or(id);
    let from_state = state_roots.iter().find_map(|root| {
        let runc = fs::read(root.join(id).join("state.json"))
            .ok()
            .and_then(|t| {
                let v: Value = serde_json::from_slice(&t).ok()?;
                v["config"]["labels"]
                    .as_array()?
                    .iter()
                    .filter_map(Value::as_str)
                    .find_map(|s| s.strip_prefix("bundle="))
                    .map(str::to_owned)
            });
        runc.or_else(|| {
            let t = fs::read(root.join(id).join("status")).ok()?;
            let v: Value = serde_json::from_slice(&t).ok()?;
            v["bundle"].as_str().map(str::to_owned)
        })
    });
    let tmp = std::env::var_os("TMPDIR").map(std::path::PathBuf::from);
    let dirs = from_state.map(std::path::PathBuf::from).into_iter().chain(
        tmp.into_iter()
            .chain([std::path::PathBuf::from("/var/tmp")])
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
        let roots = [&runc, &crun];
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
    fn runc_state_names_the_bundle() {
        let dir = std::env::temp_dir().join(format!("profiler-oci-test-{}", std::process::id()));
        let bundle = dir.join("bundle");
        fs::create_dir_all(dir.join("root/c1")).unwrap();
        fs::create_dir_all(&bundle).unwrap();
        fs::write(
            bundle.join("config.json"),
            r#"{"process":{"args":["/bin/busy","200000"]},"linux":{"cgroupsPath":"/ci/c1"},
                "annotations":{"io.kubernetes.pod.name":"p","io.kubernetes.pod.namespace":"n"}}"#,
        )
        .unwrap();
        fs::write(
            dir.join("root/c1/state.json"),
            format!(
                r#"{{"id":"c1","config":{{"labels":["bundle={}"]}}}}"#,
                bundle.display()
            ),
        )
        .unwrap();
        let c = runc_state(&dir.join("root"), "c1", None).unwrap().unwrap();
        assert_eq!(c.runtime, "runc");
        assert_eq!(c.command.as_deref(), Some("/bin/busy 200000"));
        assert_eq!(c.display_name().as_deref(), Some("n/p"));
        assert!(runc_state(&dir.join("root"), "c1", Some("/ci/c1")).is_some());
        // A cgroup of the same name elsewhere is not that container.
        assert!(runc_state(&dir.join("root"), "c1", Some("/other/c1")).is_none());
        assert!(runc_state(&dir.join("root"), "c2", None).is_none());
        fs::remove_dir_all(&dir).unwrap();
    }
}
