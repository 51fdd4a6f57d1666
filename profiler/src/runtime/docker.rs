//! dockerd's Engine API on its unix socket: the daemon's cgroup driver and data root, and the
//! name, image and command of a container (and its pod, from kubelet's labels, when kubelet
//! drives dockerd through cri-dockerd).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::{ContainerInfo, K8s, command_line};

pub struct Api {
    client: reqwest::blocking::Client,
    socket: PathBuf,
}

/// What `GET /info` says that the profiler needs.
pub struct Info {
    /// "cgroupfs" or "systemd".
    pub cgroup_driver: String,
    /// The daemon's data root (its BuildKit keeps the steps' bundles below it).
    pub root_dir: PathBuf,
}

impl Api {
    pub fn new(socket: &Path, timeout: Duration) -> Result<Self> {
        let client = reqwest::blocking::Client::builder()
            .unix_socket(socket)
            // Plain HTTP over a unix socket: no certificate store is needed (an image FROM
            // scratch has none, and reqwest refuses to build when it finds none).
            .tls_certs_only([])
            .timeout(timeout)
            .build()
            .context("cannot make an HTTP client for the docker socket")?;
        Ok(Self {
            client,
            socket: socket.to_owned(),
        })
    }

    /// GET a path; None on 404.
    fn get(&self, path: &str) -> Result<Option<Value>, String> {
        // The host part is not used over a unix socket.
        let resp = self
            .client
            .get(format!("http://docker{path}"))
            .send()
            .map_err(|e| format!("docker API at {}: {}", self.socket.display(), cause(&e)))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = resp
            .bytes()
            .map_err(|e| format!("docker API {path}: {}", cause(&e)))?;
        if !status.is_success() {
            // One line, whatever the daemon sent.
            let text = String::from_utf8_lossy(&body);
            let text: Vec<&str> = text.split_whitespace().collect();
            return Err(format!("docker API {path}: {status}: {}", text.join(" ")));
        }
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| format!("docker API {path}: bad JSON: {e}"))
    }

    pub fn info(&self) -> Result<Info> {
        let v = match self.get("/info") {
            Ok(Some(v)) => v,
            Ok(None) => bail!(
                "{} does not answer as dockerd does (GET /info: 404)",
                self.socket.display()
            ),
            Err(e) => bail!("{e}"),
        };
        parse_info(&v)
    }

    /// The container's metadata; None when dockerd has no such container.
    pub fn inspect(&self, id: &str) -> Result<Option<ContainerInfo>, String> {
        Ok(self
            .get(&format!("/containers/{id}/json"))?
            .map(|v| parse_container(&v, id)))
    }
}

/// The innermost cause of a request error (reqwest's own message is generic).
fn cause(e: &reqwest::Error) -> String {
    let mut src: &dyn std::error::Error = e;
    while let Some(s) = src.source() {
        src = s;
    }
    src.to_string()
}

pub(super) fn parse_info(v: &Value) -> Result<Info> {
    let driver = v["CgroupDriver"].as_str().unwrap_or("cgroupfs").to_owned();
    let root = v["DockerRootDir"]
        .as_str()
        .context("dockerd's /info has no DockerRootDir")?;
    Ok(Info {
        cgroup_driver: driver,
        root_dir: PathBuf::from(root),
    })
}

pub(super) fn parse_container(v: &Value, id: &str) -> ContainerInfo {
    let mut argv: Vec<String> = Vec::new();
    if let Some(p) = v["Path"].as_str() {
        argv.push(p.to_owned());
    }
    if let Some(a) = v["Args"].as_array() {
        argv.extend(a.iter().filter_map(|x| x.as_str().map(str::to_owned)));
    }
    ContainerInfo {
        runtime: "docker",
        id: v["Id"].as_str().unwrap_or(id).to_owned(),
        name: v["Name"]
            .as_str()
            .map(|n| n.trim_start_matches('/').to_owned())
            .filter(|n| !n.is_empty()),
        image: v["Config"]["Image"]
            .as_str()
            .map(str::to_owned)
            .filter(|i| !i.is_empty()),
        command: command_line(&argv),
        k8s: v["Config"]["Labels"].as_object().and_then(K8s::from_map),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_json_gives_name_image_and_command() {
        let v: Value = serde_json::from_str(
            r#"{"Id":"abc","Name":"/pt-cpu","Path":"/bin/sh","Args":["-c","busy 1000"],
                "Config":{"Image":"pbase:1","Labels":{}}}"#,
        )
        .unwrap();
        let c = parse_container(&v, "abc");
        assert_eq!(c.runtime, "docker");
        assert_eq!(c.name.as_deref(), Some("pt-cpu"));
        assert_eq!(c.image.as_deref(), Some("pbase:1"));
        assert_eq!(c.command.as_deref(), Some("/bin/sh -c busy 1000"));
        assert_eq!(c.k8s, None);
    }

    /// A container that kubelet started through cri-dockerd: its labels name the pod.
    #[test]
    fn kubelet_labels_give_the_pod() {
        let v: Value = serde_json::from_str(
            r#"{"Id":"abc","Name":"/k8s_app_web-7d9f-x2kq_shop_0d3c-11ef_0","Path":"/app",
                "Config":{"Image":"registry.local/app:1","Labels":{
                    "io.kubernetes.container.name":"app",
                    "io.kubernetes.docker.type":"container",
                    "io.kubernetes.pod.name":"web-7d9f-x2kq",
                    "io.kubernetes.pod.namespace":"shop",
                    "io.kubernetes.pod.uid":"0d3c-11ef"}}}"#,
        )
        .unwrap();
        let c = parse_container(&v, "abc");
        assert_eq!(
            c.k8s,
            Some(K8s {
                pod_name: "web-7d9f-x2kq".into(),
                namespace: "shop".into(),
                pod_uid: Some("0d3c-11ef".into()),
                container_name: Some("app".into()),
            })
        );
        assert_eq!(
            c.name.as_deref(),
            Some("k8s_app_web-7d9f-x2kq_shop_0d3c-11ef_0")
        );
        assert_eq!(c.display_name().as_deref(), Some("shop/web-7d9f-x2kq/app"));
    }

    #[test]
    fn info_gives_driver_and_root() {
        let v: Value =
            serde_json::from_str(r#"{"CgroupDriver":"systemd","DockerRootDir":"/var/lib/docker"}"#)
                .unwrap();
        let i = parse_info(&v).unwrap();
        assert_eq!(i.cgroup_driver, "systemd");
        assert_eq!(i.root_dir, Path::new("/var/lib/docker"));
        assert!(parse_info(&serde_json::json!({})).is_err());
    }
}
