//! `--config FILE`: `attach`'s options in a TOML file, one key per flag (`exec-depth = 2`,
//! `otlp-endpoint = "http://collector:4318"`, `live = true`, `ci-env = ["BUILD_ID"]`).
//!
//! The file's keys become flags placed before those of the command line, so a flag given
//! there wins (single values are overridden, lists add up), and clap checks them the same
//! way. OTEL_* variables stay below both, as for flags. Each key is checked here first, so
//! that an error names the file, the line and the key.

use std::{ffi::OsString, fs};

use clap::{ArgAction, CommandFactory as _, error::ErrorKind};
use toml::de::{DeTable, DeValue};

use super::Cli;

/// The subcommands that take `--config`, and the one whose options the file holds.
const TAKES_CONFIG: &[&str] = &["attach", "check"];
const OPTIONS_OF: &str = "attach";

/// Flags that make no sense in a file.
const NOT_IN_FILE: &[&str] = &["config", "help", "version"];

/// The command line with the config file's options spliced in after the subcommand, or the
/// line to print when the file is wrong.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(sub) = args.get(1).and_then(|a| a.to_str()) else {
        return Ok(args);
    };
    if !TAKES_CONFIG.contains(&sub) {
        return Ok(args);
    }
    let Some(path) = config_path(&args[2..]) else {
        return Ok(args);
    };
    let text = fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read the config file {}: {e}",
            path.to_string_lossy()
        )
    })?;
    let file = path.to_string_lossy().into_owned();
    let flags = flags_from(&file, &text, sub)?;
    let mut out = args[..2].to_vec();
    out.extend(flags);
    out.extend_from_slice(&args[2..]);
    Ok(out)
}

/// The value of `--config FILE` or `--config=FILE` (the last one given).
fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--config" {
            found = it.next().cloned();
        } else if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            found = Some(v.into());
        }
    }
    found
}

/// The flags for subcommand `sub` that the file's text sets; `file` names it in errors.
fn flags_from(file: &str, text: &str, sub: &str) -> Result<Vec<OsString>, String> {
    let at = |span: std::ops::Range<usize>| {
        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
        format!("{file}:{line}")
    };
    let table = DeTable::parse(text).map_err(|e| {
        let place = e.span().map(&at).unwrap_or_else(|| file.to_owned());
        format!("{place}: not valid TOML: {}", e.message().trim())
    })?;
    let root = Cli::command();
    let options = root
        .find_subcommand(OPTIONS_OF)
        .expect("attach is a subcommand");
    let target = root
        .find_subcommand(sub)
        .expect("a subcommand that takes --config");
    let mut flags = Vec::new();
    for (key, value) in table.get_ref().iter() {
        let place = at(key.span());
        let name = key.get_ref().replace('_', "-");
        let arg = options
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()))
            .filter(|_| !NOT_IN_FILE.contains(&name.as_str()))
            .ok_or_else(|| {
                format!(
                    "{place}: unknown key '{}' (the keys are attach's long options without \
                     the dashes; see `profiler attach --help`)",
                    key.get_ref()
                )
            })?;
        let values = scalars(value.get_ref(), arg.get_action()).map_err(|want| {
            format!(
                "{place}: key '{}' wants {want}, not {}",
                key.get_ref(),
                value.get_ref().type_str()
            )
        })?;
        for v in &values {
            // The flag's own parser, as clap runs it: other errors (a required flag absent
            // from this one-flag line) are not about this value.
            let line = [OsString::from(format!("--{name}={v}"))];
            if let Err(e) = options
                .clone()
                .no_binary_name(true)
                .try_get_matches_from(line)
                && matches!(
                    e.kind(),
                    ErrorKind::InvalidValue | ErrorKind::ValueValidation
                )
            {
                return Err(format!(
                    "{place}: key '{}': {}",
                    key.get_ref(),
                    clap_line(&e)
                ));
            }
        }
        // `check` takes only some of attach's options: the rest are for attach alone.
        if !target
            .get_arguments()
            .any(|a| a.get_long() == Some(name.as_str()))
        {
            continue;
        }
        match arg.get_action() {
            ArgAction::SetTrue => {
                if values == ["true"] {
                    flags.push(format!("--{name}").into());
                }
            }
            _ => flags.extend(values.iter().map(|v| format!("--{name}={v}").into())),
        }
    }
    Ok(flags)
}

/// [`flags_from`] for the property tests.
#[cfg(test)]
pub(crate) fn flags_for_test(text: &str) -> Result<Vec<OsString>, String> {
    flags_from("t.toml", text, OPTIONS_OF)
}

/// A key's value as the strings its flag would take, or what the key wants instead.
fn scalars(v: &DeValue<'_>, action: &ArgAction) -> Result<Vec<String>, &'static str> {
    let one = |v: &DeValue<'_>| match v {
        DeValue::String(s) => Some(s.to_string()),
        DeValue::Integer(i) => Some(i.to_string()),
        DeValue::Float(f) => Some(f.to_string()),
        _ => None,
    };
    match action {
        ArgAction::SetTrue => v
            .as_bool()
            .map(|b| vec![b.to_string()])
            .ok_or("true or false"),
        ArgAction::Append => match v {
            DeValue::Array(items) => items
                .iter()
                .map(|i| one(i.get_ref()))
                .collect::<Option<Vec<_>>>()
                .ok_or("a list of strings"),
            v => one(v)
                .map(|s| vec![s])
                .ok_or("a string or a list of strings"),
        },
        _ => one(v).map(|s| vec![s]).ok_or("a string or a number"),
    }
}

/// clap's error without its "error: " prefix and usage lines.
fn clap_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn expand_with(text: &str, args: &[&str]) -> Result<Vec<String>, String> {
        // One file per call (tests run in parallel), removed after: nothing left in /tmp.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("profiler-config-{}-{n}.toml", std::process::id()));
        fs::write(&path, text).unwrap();
        let mut argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        argv.push("--config".into());
        argv.push(path.clone().into());
        let r = expand(argv);
        let _ = fs::remove_file(&path);
        r.map(|v| {
            v.into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        })
        .map_err(|e| e.replace(&*path.to_string_lossy(), "FILE"))
    }

    #[test]
    fn keys_become_flags_that_the_command_line_overrides() {
        let text = "cgroup = \"buildkit\"\nexec-depth = 2\ngrace = \"5s\"\nlive = true\n\
                    bpf_stats = false\nci-env = [\"BUILD_ID\", \"JOB\"]\n";
        let argv = expand_with(text, &["profiler", "attach", "--exec-depth", "3"]).unwrap();
        // The file's keys (in key order) come before the command line's flags.
        let mut from_file = argv[2..8].to_vec();
        from_file.sort();
        assert_eq!(
            from_file,
            [
                "--cgroup=buildkit",
                "--ci-env=BUILD_ID",
                "--ci-env=JOB",
                "--exec-depth=2",
                "--grace=5s",
                "--live"
            ]
        );
        assert_eq!(
            argv[8..],
            ["--exec-depth", "3", "--config", argv[11].as_str()]
        );
        let cli = Cli::try_parse_from(&argv).unwrap();
        let super::super::Command::Attach(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.exec_depth, 3, "the command line wins");
        assert_eq!(a.cgroup.as_deref(), Some("buildkit"));
        assert_eq!(a.common.grace, std::time::Duration::from_secs(5));
        assert!(a.live && !a.common.bpf_stats);
        assert_eq!(a.common.ci_env, ["BUILD_ID", "JOB"]);
    }

    #[test]
    fn check_takes_only_its_own_keys() {
        let text = "cgroup = \"buildkit\"\notlp-endpoint = \"http://127.0.0.1:4318\"\n";
        let argv = expand_with(text, &["profiler", "check"]).unwrap();
        assert!(argv.contains(&"--cgroup=buildkit".to_owned()), "{argv:?}");
        assert!(!argv.iter().any(|a| a.starts_with("--otlp")), "{argv:?}");
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_key() {
        let e = expand_with(
            "cgroup = \"x\"\n\ngracee = \"2s\"\n",
            &["profiler", "attach"],
        );
        assert_eq!(
            e.unwrap_err().split(" (").next().unwrap(),
            "FILE:3: unknown key 'gracee'"
        );
        let e = expand_with("live = \"yes\"\n", &["profiler", "attach"]).unwrap_err();
        assert_eq!(e, "FILE:1: key 'live' wants true or false, not string");
        let e = expand_with("\nexec-depth = \"deep\"\n", &["profiler", "attach"]).unwrap_err();
        assert!(
            e.starts_with("FILE:2: key 'exec-depth': invalid value 'deep'"),
            "{e}"
        );
        let e = expand_with("runtime = \"lxc\"\n", &["profiler", "attach"]).unwrap_err();
        assert!(
            e.starts_with("FILE:1: key 'runtime': invalid value 'lxc'"),
            "{e}"
        );
        let e = expand_with("cgroup = [1, {}]\n", &["profiler", "attach"]).unwrap_err();
        assert_eq!(
            e,
            "FILE:1: key 'cgroup' wants a string or a number, not array"
        );
        let e = expand_with("cgroup = \n", &["profiler", "attach"]).unwrap_err();
        assert!(e.starts_with("FILE:1: not valid TOML"), "{e}");
        let e = expand_with("help = true\n", &["profiler", "attach"]).unwrap_err();
        assert!(e.starts_with("FILE:1: unknown key 'help'"), "{e}");
        let e = expand(vec![
            "profiler".into(),
            "attach".into(),
            "--config=/nonexistent/p.toml".into(),
        ]);
        assert!(
            e.unwrap_err()
                .starts_with("cannot read the config file /nonexistent/p.toml: "),
        );
    }

    #[test]
    fn other_commands_and_no_config_are_left_alone() {
        let argv: Vec<OsString> = ["profiler", "run", "--", "x", "--config", "y"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(expand(argv.clone()).unwrap(), argv);
        let argv: Vec<OsString> = ["profiler", "attach", "--cgroup", "x"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(expand(argv.clone()).unwrap(), argv);
    }
}
