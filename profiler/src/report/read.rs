//! Reading recorded JSON lines: the files a user names (globs and directories expanded), each
//! read line by line. A line that is no record is a warning naming its file and line, and
//! the rest is still read (docs/report.md, "What report reads").

use std::{
    fs,
    io::{BufRead, BufReader, Read as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use super::ExecRecord;
use crate::record::RECORD_SCHEMA;

/// The longest line read (a record with thousands of processes is a few MiB).
pub const MAX_LINE: usize = 64 << 20;

/// What went wrong in the input that did not stop the report, one line each.
#[derive(Debug, Default)]
pub struct Warnings {
    pub lines: Vec<String>,
}

impl Warnings {
    pub fn add(&mut self, w: String) {
        self.lines.push(w);
    }

    /// Log them: the first 20, then how many more (a file of garbage is one message, not
    /// thousands).
    pub fn log(&self) {
        for w in self.lines.iter().take(20) {
            log::warn!("{w}");
        }
        if self.lines.len() > 20 {
            log::warn!("... and {} more such lines", self.lines.len() - 20);
        }
    }
}

/// The first fault of an input without records, for its one-line error: ": FAULT (and N
/// more)", or nothing.
pub fn first_fault(warnings: &[String]) -> String {
    match warnings {
        [] => String::new(),
        [one] => format!(": {one}"),
        [first, rest @ ..] => format!(": {first} (and {} more)", rest.len()),
    }
}

/// Each record of `input`, with its line number, in order. Blank lines are skipped; a line
/// that is no record, or a record that makes no sense, is a warning; a line beyond
/// [`MAX_LINE`] ends the file (no line follows it that could be found in bounded memory).
pub fn each_record(
    mut input: impl BufRead,
    name: &str,
    warn: &mut Warnings,
    mut f: impl FnMut(usize, ExecRecord),
) -> Result<()> {
    let mut buf = Vec::new();
    let mut newer = false;
    for n in 1.. {
        buf.clear();
        let got = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read {name} line {n}"))?;
        if got == 0 {
            break;
        }
        if buf.len() > MAX_LINE {
            warn.add(format!(
                "{name} line {n} is longer than {} MiB: not an exec record; the rest of the file is skipped",
                MAX_LINE >> 20
            ));
            break;
        }
        let line = String::from_utf8_lossy(&buf);
        if line.trim().is_empty() {
            continue;
        }
        let r: ExecRecord = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) if e.is_eof() && !line.ends_with('\n') => {
                warn.add(format!(
                    "{name} line {n}: truncated (the file ends inside a record): skipped"
                ));
                continue;
            }
            Err(e) => {
                warn.add(format!(
                    "{name} line {n}: not an exec record: {}",
                    json_error(&e)
                ));
                continue;
            }
        };
        if r.schema > RECORD_SCHEMA && !newer {
            newer = true;
            warn.add(format!(
                "{name} line {n}: records of schema {} are newer than this profiler reads ({RECORD_SCHEMA}): \
                 read as far as their keys match; a newer profiler reads them whole",
                r.schema
            ));
        }
        if let Err(why) = r.check() {
            warn.add(format!("{name} line {n}: skipped: {why}"));
            continue;
        }
        f(n, r);
    }
    Ok(())
}

/// serde_json's message without its position (each line is one document: the column is
/// what locates the fault).
fn json_error(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let msg = match msg.rsplit_once(" at line ") {
        Some((m, _)) => m.to_owned(),
        None => msg,
    };
    if e.column() > 0 {
        format!("{msg} (column {})", e.column())
    } else {
        msg
    }
}

/// One input: stdin, or a file.
pub enum Input {
    Stdin,
    File(PathBuf),
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Self::Stdin => "stdin".into(),
            Self::File(p) => p.display().to_string(),
        }
    }

    /// Read its records (see [`each_record`]).
    pub fn each_record(&self, warn: &mut Warnings, f: impl FnMut(usize, ExecRecord)) -> Result<()> {
        match self {
            Self::Stdin => each_record(std::io::stdin().lock(), "stdin", warn, f),
            Self::File(p) => {
                let file =
                    fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
                each_record(BufReader::new(file), &self.name(), warn, f)
            }
        }
    }
}

/// The files that the arguments name, in order: `-` is stdin, a directory gives its
/// `*.jsonl` and `*.json` files (sorted, not recursing), a pattern with `*`, `?` or `[` its
/// matches (sorted); a path is taken as it is. A pattern that matches nothing, or a
/// directory without records, is an error: a typo must not pass as an empty input.
pub fn expand(args: &[String]) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    for a in args {
        if a == "-" {
            out.push(Input::Stdin);
            continue;
        }
        let p = Path::new(a);
        if a.starts_with("--") && !p.exists() {
            bail!(
                "{a} was read as an input file: options go before --compare (after its `--`, every word is an input)"
            );
        }
        if p.is_dir() {
            let mut files: Vec<PathBuf> = fs::read_dir(p)
                .with_context(|| format!("cannot read the directory {a}"))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.is_file() && f.extension().is_some_and(|x| x == "jsonl" || x == "json")
                })
                .collect();
            if files.is_empty() {
                bail!("{a} holds no .jsonl or .json files");
            }
            files.sort();
            out.extend(files.into_iter().map(Input::File));
        } else if !p.exists() && a.contains(['*', '?', '[']) {
            let paths = glob::glob(a).with_context(|| format!("bad pattern {a}"))?;
            let mut files: Vec<PathBuf> = paths
                .filter_map(Result::ok)
                .filter(|f| f.is_file())
                .collect();
            if files.is_empty() {
                bail!("{a} matches no file");
            }
            files.sort();
            out.extend(files.into_iter().map(Input::File));
        } else {
            out.push(Input::File(p.to_owned()));
        }
    }
    if out.iter().filter(|i| matches!(i, Input::Stdin)).count() > 1 {
        bail!("stdin (`-`) is named twice");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{cpu, line};

    fn read(text: &str) -> (Vec<(usize, String)>, Vec<String>) {
        let mut w = Warnings::default();
        let mut got = Vec::new();
        each_record(text.as_bytes(), "t.jsonl", &mut w, |n, r| {
            got.push((n, r.exec))
        })
        .unwrap();
        (got, w.lines)
    }

    #[test]
    fn bad_lines_are_warnings_naming_file_and_line_and_the_rest_is_read() {
        let good = |e: &str| line(e, 1, "ended", 0, 100, &cpu(1, 0, 0, 2));
        let text = format!(
            "{}\n{{oops\n\n{{\"exec\":\"x\"}}\n{}\n{}",
            good("a"),
            good("b").replace("\"ended\"", "\"gone\""),
            good("c")
        );
        let (got, w) = read(&text);
        assert_eq!(got, [(1, "a".to_owned()), (6, "c".to_owned())]);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].starts_with("t.jsonl line 2: not an exec record: "),
            "{w:?}"
        );
        assert!(w[1].starts_with("t.jsonl line 4: ") && w[1].contains("missing field `cgroup_id`"));
        assert!(w[2].contains("line 5") && w[2].contains("unknown variant `gone`"));
        // A file cut inside its last record.
        let cut = format!("{}\n{}", good("a"), &good("b")[..200]);
        let (got, w) = read(&cut);
        assert_eq!(got.len(), 1);
        assert_eq!(
            w,
            ["t.jsonl line 2: truncated (the file ends inside a record): skipped"]
        );
    }

    #[test]
    fn newer_records_are_read_with_one_warning() {
        let r = line("a", 1, "ended", 0, 100, &cpu(1, 0, 0, 2));
        let newer = r.replacen("{", "{\"schema\":2,\"new_key\":[1],", 1);
        let (got, w) = read(&format!("{newer}\n{newer}\n"));
        assert_eq!(got.len(), 2);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("line 1: records of schema 2 are newer"),
            "{w:?}"
        );
    }

    #[test]
    fn arguments_expand_to_files() {
        let dir = std::env::temp_dir().join(format!("profiler-expand-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("runs")).unwrap();
        for f in ["runs/b.jsonl", "runs/a.jsonl", "runs/notes.txt", "x.json"] {
            fs::write(dir.join(f), "").unwrap();
        }
        let d = |p: &str| dir.join(p).display().to_string();
        let names = |args: &[String]| -> Vec<String> {
            expand(args).unwrap().iter().map(Input::name).collect()
        };
        assert_eq!(names(&[d("runs")]), [d("runs/a.jsonl"), d("runs/b.jsonl")]);
        assert_eq!(
            names(&[d("runs/*.jsonl"), d("x.json")]),
            [d("runs/a.jsonl"), d("runs/b.jsonl"), d("x.json")]
        );
        assert_eq!(names(&["-".into()]), ["stdin"]);
        let err = |args: &[String]| expand(args).err().unwrap().to_string();
        assert!(err(&[d("runs/*.csv")]).ends_with("matches no file"));
        fs::create_dir_all(dir.join("empty")).unwrap();
        assert!(err(&[d("empty")]).ends_with("holds no .jsonl or .json files"));
        assert_eq!(err(&["-".into(), "-".into()]), "stdin (`-`) is named twice");
        assert!(err(&["--fail-on".into()]).contains("options go before --compare"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
