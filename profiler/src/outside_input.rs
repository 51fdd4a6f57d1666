//! Property tests of every parser of outside input: the cgroup files, the JSON lines `report`
//! reads, the OTLP header and endpoint settings, durations, the config file and the CI
//! environment. Whatever they are given, they answer (a value or an error), never panic or
//! hang, and keep their stated bounds. Each test runs a bounded number of cases in CI
//! (`PROPTEST_CASES` raises it for a longer run by hand); an input that ever failed is kept in
//! `proptest-regressions/` and tried first from then on.

use proptest::prelude::*;

use crate::{
    ci::{CiEnv, TraceContext},
    cli::{MAX_DURATION, parse_duration},
    report::Build,
    sources::cgroup_files::parse,
};

/// Text shaped like a cgroup file: keys, `=`, numbers (some huge or negative), odd bytes.
fn cgroup_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("some".to_owned()),
        Just("full".to_owned()),
        Just("avg10=".to_owned()),
        Just("total=".to_owned()),
        Just("rbytes=".to_owned()),
        Just("8:0".to_owned()),
        Just("max".to_owned()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9]{1,30}(\\.[0-9]{0,4})?",
        " ",
        "\n",
        "\t",
        ".{0,6}",
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

/// One valid record line as `attach --output json` writes it, with its numbers replaced.
fn record_line() -> impl Strategy<Value = String> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        prop_oneof![Just("ended"), Just("running"), Just("other")],
    )
        .prop_map(|(start, end, on, task, bytes, state)| {
            format!(
                r#"{{"exec":"e","cgroup_id":{bytes},"state":"{state}","partial":false,"wall_ns":{task},"start_unix_ns":{start},"end_unix_ns":{end},"live_tasks":0,"cpu":{{"on_cpu_ns":{on},"user_ns":{on},"system_ns":0,"runq_delay_ns":{on},"runq_waits":1,"iowait_ns":{task},"iowait_waits":1,"swapin_ns":{on},"reclaim_ns":{task},"thrashing_ns":{on},"voluntary_switches":1,"involuntary_switches":0,"task_time_ns":{task}}},"disk":{{"read_bytes":{bytes},"write_bytes":{bytes},"read_requests":1,"write_requests":1}},"io":{{"read_bytes":{bytes},"write_bytes":0}},"tasks":{{"processes_started":1,"threads_started":0,"execve":1}},"processes":[],"other_processes":{{}},"cgroup":{{}},"notes":[]}}"#
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cgroup_files_parse_or_refuse(text in cgroup_text()) {
        let _ = parse::pressure(&text);
        let _ = parse::flat_keyed(&text);
        let _ = parse::nested_keyed(&text);
        let _ = parse::single(&text);
        let _ = parse::blkio_v1(&text);
    }

    #[test]
    fn report_reads_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Build::read(&bytes[..], "fuzz");
    }

    #[test]
    fn report_pictures_any_figures(lines in prop::collection::vec(record_line(), 1..6)) {
        // Whatever the figures (u64::MAX, an end before the start), reading, the page and
        // the summary finish.
        if let Ok(b) = Build::read(lines.join("\n").as_bytes(), "fuzz") {
            let _ = crate::report::html::render(&b, "fuzz");
            let _ = crate::report::summary::render(&b, 3);
        }
    }

    #[test]
    fn durations_parse_within_their_range(s in "[0-9eE.+-]{0,25}(ms|s|m|h|)") {
        if let Ok(d) = parse_duration(&s) {
            prop_assert!(d <= MAX_DURATION);
        }
    }

    #[test]
    fn otlp_settings_parse_or_refuse(s in ".{0,60}", url in "(https?://)?[\\[\\]:0-9a-z.@/%-]{0,40}") {
        let _ = crate::cli::parse_headers(&s);
        let _ = crate::cli::check_endpoint("--otlp-endpoint", &url);
        let _ = crate::cli::check_endpoint("--otlp-endpoint", &s);
    }

    #[test]
    fn config_files_parse_or_refuse(text in "([a-z_-]{0,16} ?= ?(\"[^\"\n]{0,16}\"|[0-9]{1,22}|true|\\[[^\n]{0,16}\\]|\\{[^\n]{0,8}\\})|\\[[a-z]{0,6}\\]|#[^\n]{0,8}|\n){0,10}") {
        let _ = crate::cli::config::flags_for_test(&text);
    }

    #[test]
    fn ci_context_from_any_environment(
        environ in prop::collection::vec(
            prop_oneof![
                "(GITHUB_ACTIONS|GITHUB_RUN_ID|GITLAB_CI|CI_JOB_ID|BUILDKITE|TRACEPARENT|TRACESTATE)=[^\\x00]{0,60}",
                "[^\\x00]{0,30}",
            ],
            0..12,
        ),
        traceparent in "[0-9a-fA-F-]{0,60}",
    ) {
        let block = environ.join("\0");
        let env = CiEnv::new(&["BUILD_ID".to_owned()]).unwrap();
        let _ = env.context(block.as_bytes());
        let _ = TraceContext::parse(&traceparent, Some(traceparent.clone()));
    }
}
