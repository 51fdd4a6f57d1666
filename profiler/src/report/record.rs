//! The exec records that `profiler report` reads back: only the fields the picture uses, each
//! checked for sense.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Breakdown;

/// One exec record as `attach` writes it (docs/figures.md, "The JSON record"): only the fields the picture
/// uses. Unknown fields are ignored; those it uses are required as they are always written
/// (a default would turn a renamed field into silent zeros), Options where the record may
/// hold null or leave them out.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ExecRecord {
    /// Absent in records written before it was: those are schema 1.
    #[serde(default = "schema_1")]
    pub schema: u32,
    #[serde(default)]
    pub host: Option<String>,
    pub exec: String,
    pub cgroup_id: u64,
    /// The step identity; made here from the other fields for records without it.
    #[serde(default)]
    pub step: Option<String>,
    /// Written only for an exec whose cgroup is a container's (or a BuildKit step's).
    #[serde(default)]
    pub container: Option<Container>,
    /// Written only when the exec's first program was seen.
    #[serde(default)]
    pub command: Option<String>,
    /// How that program's process ended: written once it has.
    #[serde(default)]
    pub exit: Option<crate::record::ExecExit>,
    /// Written when that program was seen starting.
    #[serde(default)]
    pub phases: Option<crate::record::Phases>,
    /// Written only when that program's environment named a CI step or a trace.
    #[serde(default)]
    pub ci: Option<Ci>,
    pub state: State,
    pub partial: bool,
    pub wall_ns: u64,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub cpu: Cpu,
    pub disk: Disk,
    pub io: Io,
    pub tasks: Tasks,
    pub processes: Vec<Process>,
    /// Written by versions that break execs down by program.
    #[serde(default)]
    pub programs: Vec<crate::record::ProgramReport>,
    #[serde(default)]
    pub other_programs: Option<crate::record::ProgramReport>,
    pub cgroup: Option<Cgroup>,
    pub network: Option<Network>,
    pub notes: Vec<String>,
}

fn schema_1() -> u32 {
    1
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Ended,
    Running,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Cpu {
    pub on_cpu_ns: u64,
    pub runq_delay_ns: u64,
    pub iowait_ns: u64,
    pub swapin_ns: u64,
    pub reclaim_ns: u64,
    pub thrashing_ns: u64,
    pub task_time_ns: u64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Disk {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_requests: u64,
    pub write_requests: u64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Io {
    pub read_bytes: u64,
    pub write_bytes: u64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Tasks {
    pub processes_started: u64,
    pub threads_started: u64,
    pub execve: u64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    pub args: String,
    pub on_cpu_ns: u64,
}

impl Process {
    /// The command line, else the command name.
    pub fn name(&self) -> &str {
        if self.args.is_empty() {
            &self.comm
        } else {
            &self.args
        }
    }
}

/// What the container runtime said about the exec: runtime and id always, the rest where
/// the runtime has it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Container {
    pub runtime: String,
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub command: Option<String>,
}

/// The exec's CI step and trace (see ci.rs): each part is left out when empty.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Ci {
    pub system: Option<String>,
    /// OpenTelemetry `cicd.*` attribute -> value.
    pub attributes: BTreeMap<String, String>,
    pub trace: Option<Trace>,
    /// Variables asked for with --ci-env.
    pub env: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Trace {
    pub trace_id: String,
    pub span_id: String,
    pub sampled: bool,
    #[serde(default)]
    pub tracestate: Option<String>,
}

impl Ci {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attributes
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The CI system for people (the record's own word for one not known here).
    pub fn system_name(&self) -> Option<&str> {
        self.system.as_deref().map(|s| match s {
            "github_actions" => "GitHub Actions",
            "gitlab_ci" => "GitLab CI",
            "buildkite" => "Buildkite",
            "jenkins" => "Jenkins",
            other => other,
        })
    }
}

/// What names an exec: see [`ExecRecord::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamedBy {
    ContainerName,
    ContainerCommand,
    Command,
    Path,
}

/// Figures a host may lack are null or left out: all optional.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Cgroup {
    pub memory_peak_bytes: Option<Sourced>,
    pub v1_memory_max_usage_bytes: Option<Sourced>,
    pub memory_events: Option<Sourced<BTreeMap<String, u64>>>,
}

/// A cgroup-file figure: its value, or why it is missing.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default)]
pub struct Sourced<T = u64> {
    pub value: Option<T>,
    pub missing: Option<String>,
}

impl<T> Default for Sourced<T> {
    fn default() -> Self {
        Self {
            value: None,
            missing: None,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Network {
    pub sockets: Option<Sockets>,
    pub sockets_missing: Option<String>,
    pub interfaces_total: Option<Traffic>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Sockets {
    /// All of the sockets' traffic, written flat beside `loopback`.
    #[serde(flatten)]
    pub all: Traffic,
    pub loopback: Traffic,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct Traffic {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

impl ExecRecord {
    /// Its main program ended other than by exit(0).
    pub fn failed(&self) -> bool {
        self.exit.as_ref().is_some_and(|e| !e.status.success())
    }

    /// What ran, as the exported spans name it: the container's name, else its command (the
    /// runtime's, else the first program's argv), else the exec's cgroup path; a blank one is
    /// passed over here (a label of spaces names nothing).
    pub fn name(&self) -> (&str, NamedBy) {
        fn some(v: &Option<String>) -> Option<&str> {
            v.as_deref().filter(|s| !s.trim().is_empty())
        }
        let c = self.container.as_ref();
        if let Some(n) = c.and_then(|c| some(&c.name)) {
            (n, NamedBy::ContainerName)
        } else if let Some(n) = c.and_then(|c| some(&c.command)) {
            (n, NamedBy::ContainerCommand)
        } else if let Some(n) = some(&self.command) {
            (n, NamedBy::Command)
        } else {
            (&self.exec, NamedBy::Path)
        }
    }

    /// The OOM killer ended its main program, or killed in its cgroup.
    pub fn oom_killed(&self) -> bool {
        let killed_here = self
            .cgroup
            .as_ref()
            .and_then(|c| {
                c.memory_events
                    .as_ref()?
                    .value
                    .as_ref()?
                    .get("oom_kill")
                    .copied()
            })
            .is_some_and(|n| n > 0);
        killed_here || self.exit.as_ref().is_some_and(|e| e.status.oom_killed)
    }

    /// Its step identity (docs/figures.md, "Step identity"): the record's, else made from its
    /// fields as the profiler makes it.
    pub fn step(&self) -> std::borrow::Cow<'_, str> {
        match &self.step {
            Some(s) => s.as_str().into(),
            None => {
                let c = self.container.as_ref();
                crate::step::identity(
                    self.ci
                        .as_ref()
                        .and_then(|c| c.attr("cicd.pipeline.task.name")),
                    c.and_then(|c| c.name.as_deref()),
                    c.and_then(|c| c.command.as_deref())
                        .or(self.command.as_deref()),
                    &self.exec,
                )
                .into()
            }
        }
    }

    /// The CI context, when the record has any.
    pub fn ci(&self) -> Option<&Ci> {
        self.ci
            .as_ref()
            .filter(|c| c.system.is_some() || c.trace.is_some() || !c.env.is_empty())
    }

    /// Memory peak and where it comes from: cgroup v2 `memory.peak`, else (hybrid hosts) v1
    /// `memory.max_usage_in_bytes`; otherwise why there is none.
    pub fn memory_peak(&self) -> Result<(u64, &'static str), String> {
        let Some(c) = &self.cgroup else {
            return Err("the record has no cgroup figures".into());
        };
        let v2 = c.memory_peak_bytes.as_ref();
        if let Some(v) = v2.and_then(|s| s.value) {
            return Ok((v, "memory.peak"));
        }
        if let Some(v) = c.v1_memory_max_usage_bytes.as_ref().and_then(|s| s.value) {
            return Ok((v, "v1 memory.max_usage_in_bytes"));
        }
        Err(v2
            .and_then(|s| s.missing.clone())
            .unwrap_or_else(|| "not in the record".into()))
    }

    /// Bytes received and sent by the exec's sockets (any namespace, loopback included).
    pub fn sockets(&self) -> Result<Traffic, String> {
        match &self.network {
            Some(n) => match &n.sockets {
                Some(s) => Ok(s.all),
                None => Err(n
                    .sockets_missing
                    .clone()
                    .unwrap_or_else(|| "no socket view".into())),
            },
            None => Err("the record has no network figures".into()),
        }
    }

    pub fn breakdown(&self) -> Breakdown {
        Breakdown::of(&self.cpu)
    }

    /// Whether the record can be pictured: an end not before its start, within a year of it.
    /// (The figures' sums saturate; the timeline's axis needs a sane span.)
    pub(super) fn check(&self) -> Result<(), String> {
        const YEAR_NS: u64 = 366 * 24 * 3600 * 1_000_000_000;
        if self.end_unix_ns < self.start_unix_ns {
            return Err(format!(
                "ends ({}) before it starts ({})",
                self.end_unix_ns, self.start_unix_ns
            ));
        }
        if self.end_unix_ns - self.start_unix_ns > YEAR_NS {
            return Err("lasts more than a year".into());
        }
        Ok(())
    }
}
