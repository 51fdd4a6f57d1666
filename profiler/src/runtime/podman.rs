//! podman's containers, from containers/storage (the same files podman reads): the storage's
//! `containers.json` gives a container's name and image, its `userdata/config.json` (the OCI
//! spec podman hands the runtime) its command.

use std::{
    env, fs, io,
    path::{Path, PathBuf},
};

use anyhow::{Result, bail};
use serde_json::Value;

use super::{ContainerInfo, oci::Bundle};

/// storage.conf files, lowest precedence first (containers-storage.conf(5)).
const STORAGE_CONFS: [&str; 2] = [
    "/usr/share/containers/storage.conf",
    "/etc/containers/storage.conf",
];
const CONTAINERS_CONFS: [&str; 2] = [
    "/usr/share/containers/containers.conf",
    "/etc/containers/containers.conf",
];

pub struct Storage {
    root: PathBuf,
    driver: String,
}

/// A string key of a TOML table, e.g. ("storage", "graphroot").
pub(super) fn toml_key(text: &str, table: &str, key: &str) -> Option<String> {
    let v: toml::Table = text.parse().ok()?;
    v.get(table)?.get(key)?.as_str().map(str::to_owned)
}

/// The last of `files` that sets `table.key`.
fn conf_key(files: &[PathBuf], table: &str, key: &str) -> Option<String> {
    files
        .iter()
        .filter_map(|f| fs::read_to_string(f).ok())
        .filter_map(|t| toml_key(&t, table, key))
        .next_back()
}

fn storage_confs() -> Vec<PathBuf> {
    match env::var_os("CONTAINERS_STORAGE_CONF") {
        Some(f) => vec![PathBuf::from(f)],
        None => STORAGE_CONFS.iter().map(PathBuf::from).collect(),
    }
}

impl Storage {
    /// The storage podman uses as root: `root` if given, else storage.conf's graphroot.
    pub fn find(root: Option<&Path>) -> Result<Self> {
        Self::find_for("podman", root)
    }

    /// The storage `tool` (podman, or buildah: they share containers/storage) uses.
    pub fn find_for(tool: &str, root: Option<&Path>) -> Result<Self> {
        let confs = storage_confs();
        let driver = conf_key(&confs, "storage", "driver").unwrap_or_else(|| "overlay".into());
        let root = match root {
            Some(r) => r.to_owned(),
            None => PathBuf::from(
                conf_key(&confs, "storage", "graphroot")
                    .unwrap_or_else(|| "/var/lib/containers/storage".into()),
            ),
        };
        let s = Self { root, driver };
        match fs::read_dir(&s.root) {
            Ok(_) => Ok(s),
            // podman makes its storage at its first container: a sidecar may start earlier.
            Err(e) if e.kind() == io::ErrorKind::NotFound && which(tool) => Ok(s),
            Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
                "{tool} is not installed here (no {tool} on PATH, no container storage at {}); \
                 install {tool}, or pass its storage root with --runtime-root",
                s.root.display()
            ),
            Err(e) => bail!(
                "{tool}'s container storage at {} cannot be read ({e}); run as root, or pass \
                 --runtime-root",
                s.root.display()
            ),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn exists(&self) -> bool {
        self.containers_dir().join("containers.json").is_file()
    }

    fn containers_dir(&self) -> PathBuf {
        self.root.join(format!("{}-containers", self.driver))
    }

    /// The container's metadata; None when the storage has no such container.
    pub fn lookup(&self, id: &str, conmon: bool) -> Result<Option<ContainerInfo>, String> {
        let file = self.containers_dir().join("containers.json");
        let text = match fs::read(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("podman: cannot read {}: {e}", file.display())),
        };
        let list: Value = serde_json::from_slice(&text)
            .map_err(|e| format!("podman: bad {}: {e}", file.display()))?;
        let Some(c) = list
            .as_array()
            .and_then(|l| l.iter().find(|c| c["id"].as_str() == Some(id)))
        else {
            return Ok(None);
        };
        let mut info = from_storage_entry(c, id);
        if conmon {
            // podman's monitor of the container, in a scope of its own (systemd driver).
            info.name = info.name.map(|n| format!("{n} (conmon)"));
        } else {
            let bundle = self.containers_dir().join(id).join("userdata");
            info.command = Bundle::read(&bundle).ok().and_then(|b| b.command());
        }
        Ok(Some(info))
    }
}

/// containers.json entry: names[], and `metadata`, a JSON string with image-name and name.
pub(super) fn from_storage_entry(c: &Value, id: &str) -> ContainerInfo {
    let meta: Value = c["metadata"]
        .as_str()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null);
    let name = c["names"][0]
        .as_str()
        .or(meta["name"].as_str())
        .map(str::to_owned);
    ContainerInfo {
        runtime: "podman",
        id: id.to_owned(),
        name,
        image: meta["image-name"].as_str().map(str::to_owned),
        command: None,
        k8s: None,
    }
}

/// podman's cgroup manager: containers.conf's `engine.cgroup_manager`, else systemd where
/// systemd runs the host.
pub fn cgroup_manager_is_systemd(systemd_host: bool) -> bool {
    let files: Vec<PathBuf> = CONTAINERS_CONFS.iter().map(PathBuf::from).collect();
    match conf_key(&files, "engine", "cgroup_manager").as_deref() {
        Some("cgroupfs") => false,
        Some("systemd") => true,
        _ => systemd_host,
    }
}

pub(super) fn which(cmd: &str) -> bool {
    env::var_os("PATH")
        .map(|p| env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_entry_gives_name_and_image() {
        let c: Value = serde_json::from_str(
            r#"{"id":"0a11","names":["pt1"],"image":"4f64",
                "metadata":"{\"image-name\":\"localhost/pbase:1\",\"name\":\"pt1\"}"}"#,
        )
        .unwrap();
        let i = from_storage_entry(&c, "0a11");
        assert_eq!(i.name.as_deref(), Some("pt1"));
        assert_eq!(i.image.as_deref(), Some("localhost/pbase:1"));
    }

    #[test]
    fn toml_keys() {
        let t =
            "[storage]\ndriver = \"overlay\"\n# graphroot = \"/x\"\ngraphroot = \"/var/lib/c\"\n";
        assert_eq!(
            toml_key(t, "storage", "graphroot").as_deref(),
            Some("/var/lib/c")
        );
        assert_eq!(toml_key(t, "engine", "cgroup_manager"), None);
        assert_eq!(toml_key("not toml [", "storage", "driver"), None);
    }
}
