//! An exec's step identity: what stays the same when the same build step runs again, on
//! another host or in another pipeline run, so that runs can be compared and a fleet queried
//! per step (docs/report.md, "Many runs: steps").
//!
//! It is the container's name, else the command that ran (the runtime's, else the first
//! program's argv), else the cgroup path, with what differs from run to run replaced by a
//! placeholder: UUIDs, timestamps, temporary paths, long hex or random ids, long numbers. A CI
//! task name, where the exec's environment named one, comes first: `test: make check`.

use std::sync::LazyLock;

use regex::{Captures, Regex};

/// Longest identity, in bytes: a label value, not a document.
const MAX_LEN: usize = 200;

/// The exec's step identity from its record's fields (blank ones name nothing).
pub fn identity(
    task: Option<&str>,
    container_name: Option<&str>,
    command: Option<&str>,
    path: &str,
) -> String {
    fn some(v: Option<&str>) -> Option<&str> {
        v.map(str::trim).filter(|s| !s.is_empty())
    }
    let what = some(container_name)
        .or(some(command))
        .unwrap_or(path.trim());
    let what = normalize(what);
    let mut s = match some(task) {
        Some(t) => format!("{}: {what}", normalize(t)),
        None => what,
    };
    if s.len() > MAX_LEN {
        let mut cut = MAX_LEN;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Replace the parts of a command or path that change from run to run.
pub fn normalize(s: &str) -> String {
    static RULES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
        [
            (
                r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
                "<uuid>",
            ),
            (
                r"\d{4}-\d\d-\d\d[T_ ]\d\d[:.-]?\d\d[:.-]?\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?",
                "<time>",
            ),
            // The first component under a temporary directory: mktemp's, a compiler's, a
            // runner's work dir (what follows it is the build's own layout).
            (r"(/(?:tmp|var/tmp|dev/shm))/[^\s/:'\x22=,;]+", "$1/<tmp>"),
            // Content hashes, container and BuildKit ids: 12+ hex digits, or 20+ letters and
            // digits that hold both.
            (r"\b[0-9a-fA-F]{12,}\b", "<id>"),
            (r"\b[0-9A-Za-z]{20,}\b", "<id?>"),
            // Pids, run numbers, Unix times.
            (r"\b\d{6,}\b", "<n>"),
        ]
        .into_iter()
        .map(|(re, to)| (Regex::new(re).expect("static pattern"), to))
        .collect()
    });
    let mut s = s.to_owned();
    for (re, to) in RULES.iter() {
        if !re.is_match(&s) {
            continue;
        }
        s = if *to == "<id?>" {
            // A long word is an id only if it mixes letters and digits ("Makefile" and
            // "configuration" stay).
            re.replace_all(&s, |c: &Captures| {
                let w = &c[0];
                let digits = w.bytes().any(|b| b.is_ascii_digit());
                let letters = w.bytes().any(|b| b.is_ascii_alphabetic());
                if digits && letters {
                    "<id>".to_owned()
                } else {
                    w.to_owned()
                }
            })
            .into_owned()
        } else {
            re.replace_all(&s, *to).into_owned()
        };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_specific_parts_are_replaced() {
        for (given, want) in [
            ("make -j2", "make -j2"),
            (
                "/bin/sh -c cc -o /tmp/cc8XyZ1a.o -c main.c",
                "/bin/sh -c cc -o /tmp/<tmp> -c main.c",
            ),
            (
                "tar xf /tmp/tmp.Ab3dE9/src.tar -C /var/tmp/build-77/x",
                "tar xf /tmp/<tmp>/src.tar -C /var/tmp/<tmp>/x",
            ),
            (
                "docker-4bf92f3577b34da6a3ce929d0e0e4736aaaabbbbccccdddd0000111122223333.scope",
                "docker-<id>.scope",
            ),
            ("buildkit/6n2c0m1v3k9w5q8x7z4y2b1a0", "buildkit/<id>"),
            (
                "upload --run 1234567 --id 0d3c8e2a-1b4f-4c5d-9e6f-7a8b9c0d1e2f",
                "upload --run <n> --id <uuid>",
            ),
            (
                "log --since 2026-12-07T14:47:56.123Z --port 8080",
                "log --since <time> --port 8080",
            ),
            // Words without digits are no ids.
            (
                "./configuration-management-tool --verbose",
                "./configuration-management-tool --verbose",
            ),
        ] {
            assert_eq!(normalize(given), want, "{given}");
        }
    }

    #[test]
    fn identity_prefers_the_container_name_then_the_command_then_the_path() {
        assert_eq!(identity(None, Some("web"), Some("nginx"), "a/b"), "web");
        assert_eq!(
            identity(None, Some(" "), Some("make all"), "a/b"),
            "make all"
        );
        assert_eq!(identity(None, None, None, "ci/job-1234567"), "ci/job-<n>");
        assert_eq!(
            identity(Some("test"), None, Some("make check"), "x"),
            "test: make check"
        );
        assert_eq!(identity(Some(""), None, Some("ls"), "x"), "ls");
        let long = "é".repeat(300);
        let id = identity(None, None, Some(&long), "x");
        assert!(id.len() <= MAX_LEN && id.starts_with("éé"), "{id}");
    }
}
