//! Which CI step and which trace an exec belongs to: the W3C trace context (`TRACEPARENT`,
//! `TRACESTATE`) and the well-known variables of GitHub Actions, GitLab CI, Buildkite and
//! Jenkins, read once from the environment of the exec's first program and mapped to
//! OpenTelemetry's `cicd.*` attributes.
//!
//! Only the variables named here (and those the user adds) are kept, each value bounded;
//! every other variable is skipped as it is read, never stored.

use std::{collections::BTreeMap, fs::File, io::Read as _};

use serde::Serialize;

/// Longest value kept.
const VALUE_CHARS: usize = 256;
/// Longest TRACESTATE (W3C: 512 characters); a longer one is dropped, not cut (a cut one is
/// invalid).
const TRACESTATE_CHARS: usize = 512;
/// Most of an environment read (the kernel's own limit on argv + envp is larger, but CI
/// variables come early in practice, and the read must stay bounded).
const ENVIRON_BYTES: usize = 256 * 1024;

/// The variables of each CI system, by the attribute they give.
struct System {
    name: &'static str,
    /// Set (to anything) when running under this system.
    marker: &'static str,
    pipeline_name: &'static [&'static str],
    pipeline_run_id: &'static [&'static str],
    task_name: &'static [&'static str],
    task_run_id: &'static [&'static str],
    worker_id: &'static [&'static str],
    worker_name: &'static [&'static str],
    pipeline_run_url: &'static [&'static str],
    task_run_url: &'static [&'static str],
}

impl System {
    /// The variables each figure of the system's context may come from.
    fn variables(&self) -> [&'static [&'static str]; 8] {
        [
            self.pipeline_name,
            self.pipeline_run_id,
            self.task_name,
            self.task_run_id,
            self.worker_id,
            self.worker_name,
            self.pipeline_run_url,
            self.task_run_url,
        ]
    }
}

const SYSTEMS: &[System] = &[
    System {
        name: "github_actions",
        marker: "GITHUB_ACTIONS",
        pipeline_name: &["GITHUB_WORKFLOW"],
        pipeline_run_id: &["GITHUB_RUN_ID"],
        task_name: &["GITHUB_JOB"],
        // GitHub puts no job id in the environment.
        task_run_id: &[],
        worker_id: &[],
        worker_name: &["RUNNER_NAME"],
        // Made from GITHUB_SERVER_URL, GITHUB_REPOSITORY and GITHUB_RUN_ID (see `urls`).
        pipeline_run_url: &[],
        task_run_url: &[],
    },
    System {
        name: "gitlab_ci",
        marker: "GITLAB_CI",
        pipeline_name: &["CI_PIPELINE_NAME", "CI_PROJECT_PATH"],
        pipeline_run_id: &["CI_PIPELINE_ID"],
        task_name: &["CI_JOB_NAME"],
        task_run_id: &["CI_JOB_ID"],
        worker_id: &["CI_RUNNER_ID"],
        worker_name: &["CI_RUNNER_DESCRIPTION"],
        pipeline_run_url: &["CI_PIPELINE_URL"],
        task_run_url: &["CI_JOB_URL"],
    },
    System {
        name: "buildkite",
        marker: "BUILDKITE",
        pipeline_name: &["BUILDKITE_PIPELINE_SLUG"],
        pipeline_run_id: &["BUILDKITE_BUILD_ID"],
        task_name: &["BUILDKITE_LABEL", "BUILDKITE_STEP_KEY"],
        task_run_id: &["BUILDKITE_JOB_ID"],
        worker_id: &["BUILDKITE_AGENT_ID"],
        worker_name: &["BUILDKITE_AGENT_NAME"],
        pipeline_run_url: &["BUILDKITE_BUILD_URL"],
        task_run_url: &[],
    },
    System {
        name: "jenkins",
        marker: "JENKINS_URL",
        pipeline_name: &["JOB_NAME"],
        pipeline_run_id: &["BUILD_NUMBER", "BUILD_ID"],
        task_name: &["STAGE_NAME"],
        task_run_id: &[],
        worker_id: &[],
        worker_name: &["NODE_NAME"],
        pipeline_run_url: &["BUILD_URL"],
        task_run_url: &[],
    },
];

/// Variables needed to make links, besides those above.
const URL_PARTS: &[&str] = &["GITHUB_SERVER_URL", "GITHUB_REPOSITORY"];
const TRACEPARENT: &str = "TRACEPARENT";
const TRACESTATE: &str = "TRACESTATE";

/// A W3C trace context (traceparent version 00).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceContext {
    /// 32 lower-case hex digits.
    pub trace_id: String,
    /// The parent span: 16 lower-case hex digits.
    pub span_id: String,
    pub sampled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// Parse `00-<trace id>-<span id>-<flags>`; None for anything else (an all-zero id is
    /// invalid).
    pub fn parse(traceparent: &str, tracestate: Option<String>) -> Option<Self> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, n: usize| {
            s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if version != "00"
            || parts.next().is_some()
            || !hex(trace, 32)
            || !hex(span, 16)
            || !hex(flags, 2)
            || trace.bytes().all(|b| b == b'0')
            || span.bytes().all(|b| b == b'0')
        {
            return None;
        }
        Some(Self {
            trace_id: trace.to_owned(),
            span_id: span.to_owned(),
            sampled: u8::from_str_radix(flags, 16).ok()? & 1 == 1,
            tracestate,
        })
    }
}

/// What an exec's environment says about its CI step and trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CiContext {
    /// github_actions, gitlab_ci, buildkite or jenkins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<&'static str>,
    /// OpenTelemetry attribute -> value (cicd.pipeline.name, cicd.pipeline.run.id, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// The variables the user asked for with --ci-env, that were set.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl CiContext {
    pub fn is_empty(&self) -> bool {
        self.system.is_none() && self.trace.is_none() && self.env.is_empty()
    }
}

/// Which variables to read.
#[derive(Clone, Debug, Default)]
pub struct CiEnv {
    /// Added by the user (--ci-env NAME).
    extra: Vec<String>,
}

fn bounded(v: &str) -> String {
    if v.chars().count() <= VALUE_CHARS {
        v.to_owned()
    } else {
        let mut s: String = v.chars().take(VALUE_CHARS - 1).collect();
        s.push('…');
        s
    }
}

impl CiEnv {
    pub fn new(extra: &[String]) -> Result<Self, String> {
        for n in extra {
            if n.is_empty() || n.contains('=') || n.contains('\0') {
                return Err(format!("invalid --ci-env variable name {n:?}"));
            }
        }
        Ok(Self {
            extra: extra.to_vec(),
        })
    }

    fn wanted(&self, name: &[u8]) -> bool {
        let known = |n: &&str| n.as_bytes() == name;
        SYSTEMS
            .iter()
            .any(|s| known(&s.marker) || s.variables().iter().any(|l| l.iter().any(known)))
            || URL_PARTS.iter().any(known)
            || name == TRACEPARENT.as_bytes()
            || name == TRACESTATE.as_bytes()
            || self.extra.iter().any(|n| n.as_bytes() == name)
    }

    /// The wanted variables of an environment block (NAME=value entries separated by NULs).
    fn pick(&self, environ: &[u8]) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::new();
        for entry in environ.split(|&b| b == 0) {
            let Some(eq) = entry.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (name, value) = (&entry[..eq], &entry[eq + 1..]);
            // An empty value says nothing (and must not hide a fallback variable).
            if value.is_empty() || !self.wanted(name) {
                continue;
            }
            let value = String::from_utf8_lossy(value);
            let value = if name == TRACESTATE.as_bytes() {
                if value.chars().count() > TRACESTATE_CHARS {
                    continue;
                }
                value.into_owned()
            } else {
                bounded(&value)
            };
            vars.insert(String::from_utf8_lossy(name).into_owned(), value);
        }
        vars
    }

    /// The CI context of an environment block.
    pub fn context(&self, environ: &[u8]) -> CiContext {
        let vars = self.pick(environ);
        let get = |names: &[&str]| names.iter().find_map(|n| vars.get(*n).cloned());
        let mut c = CiContext::default();
        if let Some(s) = SYSTEMS.iter().find(|s| vars.contains_key(s.marker)) {
            c.system = Some(s.name);
            for (attr, names) in [
                ("cicd.pipeline.name", s.pipeline_name),
                ("cicd.pipeline.run.id", s.pipeline_run_id),
                ("cicd.pipeline.task.name", s.task_name),
                ("cicd.pipeline.task.run.id", s.task_run_id),
                ("cicd.worker.id", s.worker_id),
                ("cicd.worker.name", s.worker_name),
                ("cicd.pipeline.run.url.full", s.pipeline_run_url),
                ("cicd.pipeline.task.run.url.full", s.task_run_url),
            ] {
                if let Some(v) = get(names) {
                    c.attributes.insert(attr, v);
                }
            }
            if s.name == "github_actions"
                && let (Some(server), Some(repo), Some(run)) = (
                    vars.get("GITHUB_SERVER_URL"),
                    vars.get("GITHUB_REPOSITORY"),
                    vars.get("GITHUB_RUN_ID"),
                )
            {
                c.attributes.insert(
                    "cicd.pipeline.run.url.full",
                    bounded(&format!("{server}/{repo}/actions/runs/{run}")),
                );
            }
            if s.name == "buildkite"
                && let (Some(build), Some(job)) = (
                    vars.get("BUILDKITE_BUILD_URL"),
                    vars.get("BUILDKITE_JOB_ID"),
                )
            {
                c.attributes.insert(
                    "cicd.pipeline.task.run.url.full",
                    bounded(&format!("{build}#{job}")),
                );
            }
        }
        c.trace = vars
            .get(TRACEPARENT)
            .and_then(|t| TraceContext::parse(t, vars.get(TRACESTATE).cloned()));
        for n in &self.extra {
            if let Some(v) = vars.get(n) {
                c.env.insert(n.clone(), v.clone());
            }
        }
        c
    }

    /// The CI context of a running process, from /proc/PID/environ, when the process is
    /// still the program `comm` (not gone, its pid not reused). The block read is overwritten
    /// before it is freed, and read into one buffer (no copies left behind by growing it).
    pub fn of_process(&self, pid: u32, comm: &str) -> Option<CiContext> {
        let now = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if now.trim_end_matches('\n') != comm {
            return None;
        }
        let f = File::open(format!("/proc/{pid}/environ")).ok()?;
        let mut buf = Vec::with_capacity(ENVIRON_BYTES);
        let read = f.take(ENVIRON_BYTES as u64).read_to_end(&mut buf);
        let c = read.is_ok().then(|| self.context(&buf));
        buf.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&buf);
        c
    }
}

/// Test support: one context per CI system, from an environment that sets every variable the
/// profiler reads (and the `--ci-env` variable `extra`), so that each has every attribute its
/// system can give.
#[cfg(test)]
pub(crate) fn every_context(extra: &str) -> Vec<CiContext> {
    let ci = CiEnv::new(&[extra.to_owned()]).expect("a valid variable name");
    SYSTEMS
        .iter()
        .map(|s| {
            let mut env = Vec::new();
            let mut set = |name: &str, value: &str| {
                env.extend_from_slice(format!("{name}={value}").as_bytes());
                env.push(0);
            };
            for name in s
                .variables()
                .concat()
                .iter()
                .chain(URL_PARTS)
                .chain([&s.marker])
            {
                set(name, "1");
            }
            set(
                TRACEPARENT,
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            );
            set(TRACESTATE, "rojo=00f067aa0ba902b7");
            set(extra, "value");
            ci.context(&env)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut v = Vec::new();
        for (k, val) in pairs {
            v.extend_from_slice(format!("{k}={val}").as_bytes());
            v.push(0);
        }
        v
    }

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_is_parsed_strictly() {
        let t = TraceContext::parse(TP, Some("rojo=00f067aa0ba902b7".into())).unwrap();
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.span_id, "00f067aa0ba902b7");
        assert!(t.sampled);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad}");
        }
    }

    #[test]
    fn github_actions_variables_map_to_cicd_attributes() {
        let e = env(&[
            ("HOME", "/root"),
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_WORKFLOW", "CI"),
            ("GITHUB_RUN_ID", "1234567"),
            ("GITHUB_JOB", "build"),
            ("RUNNER_NAME", "runner-3"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "acme/app"),
            ("GITHUB_TOKEN", "ghs_secret"),
            ("TRACEPARENT", TP),
        ]);
        let c = CiEnv::default().context(&e);
        assert_eq!(c.system, Some("github_actions"));
        let a = &c.attributes;
        assert_eq!(a["cicd.pipeline.name"], "CI");
        assert_eq!(a["cicd.pipeline.run.id"], "1234567");
        assert_eq!(a["cicd.pipeline.task.name"], "build");
        assert_eq!(a["cicd.worker.name"], "runner-3");
        assert_eq!(
            a["cicd.pipeline.run.url.full"],
            "https://github.com/acme/app/actions/runs/1234567"
        );
        assert!(!a.contains_key("cicd.pipeline.task.run.id"));
        assert_eq!(c.trace.unwrap().span_id, "00f067aa0ba902b7");
        // Nothing else of the environment is kept.
        let s = format!("{:?}", CiEnv::default().pick(&e));
        assert!(!s.contains("ghs_secret") && !s.contains("/root"), "{s}");
    }

    /// Every attribute each system gives, and nothing else.
    #[test]
    fn gitlab_buildkite_and_jenkins() {
        let all = |c: &CiContext| -> Vec<(String, String)> {
            c.attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect()
        };
        let want = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            let mut v: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            v.sort();
            v
        };
        let g = CiEnv::default().context(&env(&[
            ("GITLAB_CI", "true"),
            ("CI_PROJECT_PATH", "group/app"),
            ("CI_PIPELINE_ID", "99"),
            (
                "CI_PIPELINE_URL",
                "https://gitlab.example/group/app/-/pipelines/99",
            ),
            ("CI_JOB_NAME", "test"),
            ("CI_JOB_ID", "555"),
            ("CI_RUNNER_ID", "7"),
            ("CI_RUNNER_DESCRIPTION", "shared-runner"),
            ("CI_JOB_URL", "https://gitlab.example/group/app/-/jobs/555"),
        ]));
        assert_eq!(g.system, Some("gitlab_ci"));
        assert_eq!(
            all(&g),
            want(&[
                ("cicd.pipeline.name", "group/app"),
                ("cicd.pipeline.run.id", "99"),
                (
                    "cicd.pipeline.run.url.full",
                    "https://gitlab.example/group/app/-/pipelines/99"
                ),
                ("cicd.pipeline.task.name", "test"),
                ("cicd.pipeline.task.run.id", "555"),
                (
                    "cicd.pipeline.task.run.url.full",
                    "https://gitlab.example/group/app/-/jobs/555"
                ),
                ("cicd.worker.id", "7"),
                ("cicd.worker.name", "shared-runner"),
            ])
        );
        // A pipeline's own name wins over the project path.
        let named = CiEnv::default().context(&env(&[
            ("GITLAB_CI", "true"),
            ("CI_PIPELINE_NAME", "nightly"),
            ("CI_PROJECT_PATH", "group/app"),
        ]));
        assert_eq!(named.attributes["cicd.pipeline.name"], "nightly");

        let b = CiEnv::default().context(&env(&[
            ("BUILDKITE", "true"),
            ("BUILDKITE_PIPELINE_SLUG", "app"),
            ("BUILDKITE_BUILD_ID", "b-1"),
            ("BUILDKITE_LABEL", ":hammer: Lint"),
            ("BUILDKITE_STEP_KEY", "lint"),
            ("BUILDKITE_JOB_ID", "j-2"),
            ("BUILDKITE_AGENT_ID", "a-3"),
            ("BUILDKITE_AGENT_NAME", "agent-1"),
            (
                "BUILDKITE_BUILD_URL",
                "https://buildkite.com/acme/app/builds/12",
            ),
        ]));
        assert_eq!(b.system, Some("buildkite"));
        assert_eq!(
            all(&b),
            want(&[
                ("cicd.pipeline.name", "app"),
                ("cicd.pipeline.run.id", "b-1"),
                (
                    "cicd.pipeline.run.url.full",
                    "https://buildkite.com/acme/app/builds/12"
                ),
                ("cicd.pipeline.task.name", ":hammer: Lint"),
                ("cicd.pipeline.task.run.id", "j-2"),
                (
                    "cicd.pipeline.task.run.url.full",
                    "https://buildkite.com/acme/app/builds/12#j-2"
                ),
                ("cicd.worker.id", "a-3"),
                ("cicd.worker.name", "agent-1"),
            ])
        );
        // Without a label, the step's key names the task.
        let keyed = CiEnv::default().context(&env(&[
            ("BUILDKITE", "true"),
            ("BUILDKITE_STEP_KEY", "lint"),
        ]));
        assert_eq!(keyed.attributes["cicd.pipeline.task.name"], "lint");

        let j = CiEnv::default().context(&env(&[
            ("JENKINS_URL", "https://ci.example/"),
            ("JOB_NAME", "app/main"),
            ("BUILD_NUMBER", "41"),
            ("BUILD_ID", "41-id"),
            ("STAGE_NAME", "Build"),
            ("NODE_NAME", "linux-2"),
            ("BUILD_URL", "https://ci.example/job/app/job/main/41/"),
        ]));
        assert_eq!(j.system, Some("jenkins"));
        assert_eq!(
            all(&j),
            want(&[
                ("cicd.pipeline.name", "app/main"),
                ("cicd.pipeline.run.id", "41"),
                (
                    "cicd.pipeline.run.url.full",
                    "https://ci.example/job/app/job/main/41/"
                ),
                ("cicd.pipeline.task.name", "Build"),
                ("cicd.worker.name", "linux-2"),
            ])
        );
        // An older Jenkins gives only BUILD_ID.
        let old = CiEnv::default().context(&env(&[
            ("JENKINS_URL", "https://ci.example/"),
            ("BUILD_ID", "2026-01-01_12-00-00"),
        ]));
        assert_eq!(
            old.attributes["cicd.pipeline.run.id"],
            "2026-01-01_12-00-00"
        );
    }

    #[test]
    fn empty_values_and_long_tracestates_are_left_out() {
        let c = CiEnv::default().context(&env(&[
            ("GITLAB_CI", "true"),
            ("CI_PIPELINE_NAME", ""),
            ("CI_PROJECT_PATH", "group/app"),
            ("TRACEPARENT", TP),
            ("TRACESTATE", &"a=b,".repeat(200)),
        ]));
        assert_eq!(c.attributes["cicd.pipeline.name"], "group/app");
        assert_eq!(c.trace.unwrap().tracestate, None);
        let ok = "k=".to_owned() + &"v".repeat(400);
        let c = CiEnv::default().context(&env(&[("TRACEPARENT", TP), ("TRACESTATE", &ok)]));
        assert_eq!(c.trace.unwrap().tracestate.as_deref(), Some(ok.as_str()));
    }

    #[test]
    fn user_variables_and_bounds() {
        let long = "x".repeat(1000);
        let c = CiEnv::new(&["BUILD_STEP".into()])
            .unwrap()
            .context(&env(&[("BUILD_STEP", &long), ("OTHER", "y")]));
        assert_eq!(c.system, None);
        assert_eq!(c.env["BUILD_STEP"].chars().count(), VALUE_CHARS);
        assert!(!c.env.contains_key("OTHER"));
        assert!(CiEnv::new(&["A=B".into()]).is_err());
        assert!(CiContext::default().is_empty());
    }
}
