//! The checks of the cgroup v2 hierarchy: its mount and controllers, pressure files, and the
//! cgroup attach would watch.

use std::{fs, path::Path};

use super::{Line, Status, line};
use crate::{cgroup::Hierarchy, runtime::Connected};

/// The v2 controllers whose files attach reads per exec: (v2 name, v1 name, what is lost
/// without it).
const CONTROLLERS: &[(&str, &str, &str)] = &[
    ("cpu", "cpu", "cpu.stat throttling"),
    ("io", "blkio", "io.stat"),
    ("memory", "memory", "memory.*"),
    ("pids", "pids", "pids.*"),
];

/// Controllers mounted on cgroup v1 hierarchies (a hybrid host), from mountinfo.
pub(super) fn v1_controllers(mountinfo: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in mountinfo.lines() {
        let Some((_, post)) = l.split_once(" - ") else {
            continue;
        };
        let mut f = post.split_whitespace();
        if f.next() != Some("cgroup") {
            continue;
        }
        let opts = f.nth(1).unwrap_or("");
        for o in opts.split(',') {
            if CONTROLLERS.iter().any(|c| c.1 == o) && !out.iter().any(|x| x == o) {
                out.push(o.to_owned());
            }
        }
    }
    out
}

/// What the execs lose without these v2 controllers.
pub(super) fn losses(missing: &[&str]) -> String {
    let files: Vec<&str> = CONTROLLERS
        .iter()
        .filter(|c| missing.contains(&c.0))
        .map(|c| c.2)
        .collect();
    let mut s = format!("no {} per exec", files.join(", "));
    if missing.contains(&"io") || missing.contains(&"memory") {
        s.push_str(
            " (disk bytes still come from eBPF, but buffered writes that writeback flushes \
             later count for no exec)",
        );
    }
    s
}

pub(super) fn cgroup_line(mount: &Path, v2: &[String], v1: &[String]) -> Line {
    let missing: Vec<&str> = CONTROLLERS
        .iter()
        .map(|c| c.0)
        .filter(|c| !v2.iter().any(|x| x == c))
        .collect();
    let m = mount.display();
    if missing.is_empty() {
        let all: Vec<&str> = CONTROLLERS.iter().map(|c| c.0).collect();
        return line(
            "cgroup v2",
            Status::Ok,
            format!("{m} with the {} controllers", all.join(", ")),
        );
    }
    let on_v1: Vec<&str> = CONTROLLERS
        .iter()
        .filter(|c| missing.contains(&c.0) && v1.iter().any(|x| x == c.1))
        .map(|c| c.0)
        .collect();
    let detail = if on_v1.is_empty() {
        format!(
            "{m} lacks the {} controllers: {}",
            missing.join(", "),
            losses(&missing)
        )
    } else {
        format!(
            "hybrid: v2 at {m}, controllers {} are on v1: {}",
            on_v1.join(", "),
            losses(&missing)
        )
    };
    line("cgroup v2", Status::Degraded, detail)
}

pub(super) fn pressure_line(psi: bool) -> Line {
    if psi {
        line(
            "pressure",
            Status::Ok,
            "PSI on: cpu, io and memory pressure per exec",
        )
    } else {
        line(
            "pressure",
            Status::Degraded,
            "PSI off: no pressure figures (boot with psi=1, or CONFIG_PSI=y)",
        )
    }
}

/// The cgroup attach would watch, and the controllers its execs get.
pub(super) fn watched_lines(
    h: &Hierarchy,
    cgroup: Option<&str>,
    connected: Option<&Connected>,
) -> Vec<Line> {
    let name = "watched cgroup";
    let arg = match (cgroup, connected) {
        (Some(p), _) => p.to_owned(),
        (None, Some(c)) if !c.cgroup_parent.exists() => {
            let p = c.cgroup_parent.display();
            return vec![if c.systemd {
                line(
                    name,
                    Status::Missing,
                    format!(
                        "the runtime's cgroup parent {p} does not exist (is systemd its cgroup \
                         manager?); pass the parent with --cgroup"
                    ),
                )
            } else {
                line(
                    name,
                    Status::Ok,
                    format!("{p} does not exist yet: attach makes it (as the runtime would)"),
                )
            }];
        }
        (None, Some(c)) => c.cgroup_parent.display().to_string(),
        (None, None) => return Vec::new(),
    };
    let dir = match h.resolve(&arg) {
        Ok(d) => d,
        Err(e) => return vec![line(name, Status::Missing, format!("{e:#}"))],
    };
    let subtree = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let enabled: Vec<String> = subtree.split_whitespace().map(str::to_owned).collect();
    vec![
        line(name, Status::Ok, dir.display().to_string()),
        controllers_line(&dir, &h.controllers(), &enabled),
    ]
}

/// The controllers the execs (children of `dir`) get: those of the v2 hierarchy that `dir`
/// enables in its cgroup.subtree_control.
pub(super) fn controllers_line(dir: &Path, available: &[String], enabled: &[String]) -> Line {
    let name = "exec controllers";
    let wanted: Vec<&str> = CONTROLLERS
        .iter()
        .map(|c| c.0)
        .filter(|c| available.iter().any(|a| a == c))
        .collect();
    let off: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| !enabled.iter().any(|e| e == c))
        .collect();
    if wanted.is_empty() {
        return line(
            name,
            Status::Ok,
            "none of cpu, io, memory, pids is on the v2 hierarchy (see cgroup v2)",
        );
    }
    if off.is_empty() {
        return line(
            name,
            Status::Ok,
            format!("{} enabled for the execs", wanted.join(", ")),
        );
    }
    let plus: Vec<String> = off.iter().map(|c| format!("+{c}")).collect();
    line(
        name,
        Status::Degraded,
        format!(
            "{}; enable with: echo '{}' > {}",
            losses(&off),
            plus.join(" "),
            dir.join("cgroup.subtree_control").display()
        ),
    )
}
