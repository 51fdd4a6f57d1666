//! `profiler report`: a picture of a build from the JSON lines that `attach --output json`
//! wrote. The records are read back here ([`ExecRecord`], only the fields the picture uses), the
//! time of each exec is broken down ([`Breakdown`]), and two renderings are made: a terminal
//! summary ([`summary`]) and a self-contained HTML page ([`html`]).

pub mod compare;
pub mod html;
mod many;
pub mod markdown;
pub mod read;
mod record;
pub mod steps;
pub mod summary;

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::{BufRead, BufReader},
    ops::AddAssign,
};

pub use self::record::{
    Cgroup, Ci, Container, Cpu, Disk, ExecRecord, Io, NamedBy, Network, Process, Sockets, Sourced,
    State, Tasks, Trace, Traffic,
};
use anyhow::{Context as _, Result, bail};

/// Where an exec's task time went: `on_cpu + runq + iowait + other - overlap == task`, and at
/// most one of `other` and `overlap` is non-zero.
///
/// The whole is task time: the sum of the exec's task lifetimes (`cpu.task_time_ns`).
/// On-CPU, run-queue and IO-wait are disjoint states of a task; `other` is the rest of its
/// life (sleeping, or blocked on anything but IO). Memory stalls are no part of it: delay
/// accounting times them across the IO waits and CPU time they contain. `overlap` is how far
/// the three measured parts exceed the whole where they do (never hidden in a negative
/// `other`): an IO wait ends where the run-queue wait begins (when the wake-up queued the
/// task), but the two ends of a wait may be stamped by the clocks of two CPUs, which can
/// disagree by a little.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub task_ns: u64,
    pub on_cpu_ns: u64,
    pub runq_ns: u64,
    pub iowait_ns: u64,
    pub other_ns: u64,
    pub overlap_ns: u64,
}

impl Breakdown {
    pub fn of(c: &Cpu) -> Self {
        let parts = c
            .on_cpu_ns
            .saturating_add(c.runq_delay_ns)
            .saturating_add(c.iowait_ns);
        Self {
            task_ns: c.task_time_ns,
            on_cpu_ns: c.on_cpu_ns,
            runq_ns: c.runq_delay_ns,
            iowait_ns: c.iowait_ns,
            other_ns: c.task_time_ns.saturating_sub(parts),
            overlap_ns: parts.saturating_sub(c.task_time_ns),
        }
    }

    /// The parts, in the order they are drawn: (key, label, ns).
    pub fn parts(&self) -> [(&'static str, &'static str, u64); 4] {
        [
            ("cpu", "on-CPU", self.on_cpu_ns),
            ("runq", "run-queue", self.runq_ns),
            ("iowait", "IO-wait", self.iowait_ns),
            ("other", "other", self.other_ns),
        ]
    }

    /// What the parts add up to: task time, plus the overlap.
    pub fn parts_total(&self) -> u64 {
        self.task_ns.saturating_add(self.overlap_ns)
    }
}

impl AddAssign for Breakdown {
    // Saturating: a recording's figures are outside input.
    fn add_assign(&mut self, o: Self) {
        self.task_ns = self.task_ns.saturating_add(o.task_ns);
        self.on_cpu_ns = self.on_cpu_ns.saturating_add(o.on_cpu_ns);
        self.runq_ns = self.runq_ns.saturating_add(o.runq_ns);
        self.iowait_ns = self.iowait_ns.saturating_add(o.iowait_ns);
        self.other_ns = self.other_ns.saturating_add(o.other_ns);
        self.overlap_ns = self.overlap_ns.saturating_add(o.overlap_ns);
    }
}

/// The execs of a recording, ordered by start.
#[derive(Clone, Debug, Default)]
pub struct Build {
    pub records: Vec<ExecRecord>,
    /// "running" records dropped because a later record of the same exec replaced them.
    pub superseded: usize,
    /// Lines that were no records, or records that made no sense: skipped.
    pub warnings: Vec<String>,
}

impl Build {
    /// Read JSON lines. For each exec (cgroup id) its "ended" record is kept, else its last
    /// "running" one. Lines that are no records are warnings (see [`read::each_record`]); an
    /// input without any record is an error.
    pub fn read(input: impl BufRead, name: &str) -> Result<Self> {
        let b = Self::read_lenient(input, name)?;
        if b.records.is_empty() {
            bail!(
                "{name} holds no exec records (expected the JSON lines of `profiler attach --output json`){}",
                read::first_fault(&b.warnings)
            );
        }
        Ok(b)
    }

    /// As [`Build::read`], but an input without records is an empty build.
    pub fn read_lenient(input: impl BufRead, name: &str) -> Result<Self> {
        let mut records: Vec<ExecRecord> = Vec::new();
        let mut by_id: HashMap<u64, usize> = HashMap::new();
        let mut superseded = 0;
        let mut warn = read::Warnings::default();
        let mut twice = Vec::new();
        read::each_record(input, name, &mut warn, |n, r| {
            match by_id.get(&r.cgroup_id) {
                None => {
                    by_id.insert(r.cgroup_id, records.len());
                    records.push(r);
                }
                Some(&at) => {
                    let old = &records[at];
                    if old.state == State::Ended && r.state == State::Ended {
                        twice.push(format!(
                        "{name} line {n}: a second \"ended\" record of exec {} (cgroup {}): skipped",
                        r.exec, r.cgroup_id
                    ));
                        return;
                    }
                    superseded += 1;
                    if old.state == State::Running {
                        records[at] = r;
                    }
                }
            }
        })?;
        warn.lines.extend(twice);
        records.sort_by(|a, b| {
            (a.start_unix_ns, &a.exec, a.cgroup_id).cmp(&(b.start_unix_ns, &b.exec, b.cgroup_id))
        });
        Ok(Self {
            records,
            superseded,
            warnings: warn.lines,
        })
    }

    /// First start and last end, in Unix ns.
    pub fn span(&self) -> (u64, u64) {
        let start = self.records.iter().map(|r| r.start_unix_ns).min();
        let end = self.records.iter().map(|r| r.end_unix_ns).max();
        (start.unwrap_or(0), end.unwrap_or(0))
    }

    pub fn total(&self) -> Breakdown {
        let mut t = Breakdown::default();
        for r in &self.records {
            t += r.breakdown();
        }
        t
    }

    pub fn running(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.state == State::Running)
            .count()
    }

    /// Every program of the build, summed over the execs (the listed ones of each, and each
    /// exec's rest as one `other`), most on-CPU first: (name, processes, on-CPU ns).
    pub fn programs(&self) -> Vec<(String, u64, u64)> {
        let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for r in &self.records {
            for p in &r.programs {
                let e = by.entry(p.name.clone()).or_default();
                e.0 += p.processes;
                e.1 = e.1.saturating_add(p.on_cpu_ns);
            }
            if let Some(o) = &r.other_programs {
                let e = by.entry("other".into()).or_default();
                e.0 += o.processes;
                e.1 = e.1.saturating_add(o.on_cpu_ns);
            }
        }
        let mut v: Vec<(String, u64, u64)> = by.into_iter().map(|(n, (p, c))| (n, p, c)).collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Execs whose main program did not exit 0.
    pub fn failed(&self) -> usize {
        self.records.iter().filter(|r| r.failed()).count()
    }
}

/// What `profiler report` is asked for (the command line's `report` arguments).
#[derive(Debug, Default)]
pub struct Options {
    pub inputs: Vec<String>,
    /// BASE inputs of `--compare`: then `inputs` are NEW.
    pub compare: Vec<String>,
    pub fail_on: Vec<compare::FailOn>,
    /// Group one input by step too.
    pub steps: bool,
    pub html: Option<std::path::PathBuf>,
    /// `-` is stdout.
    pub json: Option<String>,
    pub markdown: Option<String>,
    pub top: usize,
}

/// The page `report` writes for one build when `--html` names none.
pub const DEFAULT_HTML: &str = "profiler-report.html";

/// `profiler report`: one build pictured (an HTML page and a terminal summary), or many runs
/// grouped by step, or BASE and NEW compared; JSON and Markdown on request.
pub fn run(o: &Options) -> Result<()> {
    if o.json.as_deref() == Some("-") && o.markdown.as_deref() == Some("-") {
        bail!("--json - and --markdown both ask for stdout: give one of them a file");
    }
    let stdout_free = o.json.as_deref() != Some("-") && o.markdown.as_deref() != Some("-");
    let inputs = read::expand(&o.inputs)?;
    if o.compare.is_empty() && !o.steps && inputs.len() == 1 {
        return one_build(&inputs[0], o, stdout_free);
    }
    let new = load_steps(&inputs)?;
    let new_sum = new.summaries();
    let mut base_sum = Vec::new();
    let base = if o.compare.is_empty() {
        None
    } else {
        let base = load_steps(&read::expand(&o.compare)?)?;
        base_sum = base.summaries();
        Some(base)
    };
    let diffs = base.as_ref().map(|_| compare::compare(&base_sum, &new_sum));
    let compared = base.as_ref().zip(diffs.as_deref());
    let source = o.inputs.join(" ");
    if stdout_free {
        let text = match compared {
            Some((b, d)) => many::compare_text(b, &new, d),
            None => many::steps_table(&new, &new_sum),
        };
        crate::cli::write_stdout(text.as_bytes())?;
    }
    if let Some(path) = &o.json {
        let mut text = match (&base, &diffs) {
            (Some(b), Some(d)) => serde_json::to_string_pretty(&many::CompareDoc {
                base: many::StepsDoc::of(b, &base_sum),
                new: many::StepsDoc::of(&new, &new_sum),
                margin_pct: compare::MARGIN_PCT,
                steps: d,
            }),
            _ => serde_json::to_string_pretty(&many::StepsDoc::of(&new, &new_sum)),
        }?;
        text.push('\n');
        write_to(path, &text)?;
    }
    if let Some(path) = &o.markdown {
        write_to(path, &markdown::render(&new, &new_sum, compared))?;
    }
    if let Some(path) = &o.html {
        let page = html::steps::render(&new, &new_sum, compared, &source);
        fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
    }
    match &diffs {
        Some(d) => compare::check(&o.fail_on, d),
        None => Ok(()),
    }
}

/// One recording pictured: the page, the summary, and what else was asked for.
fn one_build(input: &read::Input, o: &Options, stdout_free: bool) -> Result<()> {
    let name = input.name();
    let build = match input {
        read::Input::Stdin => Build::read(std::io::stdin().lock(), &name)?,
        read::Input::File(p) => {
            let f = fs::File::open(p).with_context(|| format!("cannot open {name}"))?;
            Build::read(BufReader::new(f), &name)?
        }
    };
    read::Warnings {
        lines: build.warnings.clone(),
    }
    .log();
    let html_out = o.html.clone().unwrap_or_else(|| DEFAULT_HTML.into());
    let page = html::render(&build, &name);
    fs::write(&html_out, page).with_context(|| format!("cannot write {}", html_out.display()))?;
    if stdout_free {
        crate::cli::write_stdout(summary::render(&build, o.top).as_bytes())?;
    }
    if o.json.is_some() || o.markdown.is_some() {
        let mut steps = steps::Steps::default();
        steps.files = 1;
        steps.warnings = build.warnings.clone();
        for r in &build.records {
            steps.add(r, &name);
        }
        let sum = steps.summaries();
        if let Some(path) = &o.json {
            let mut text = serde_json::to_string_pretty(&many::StepsDoc::of(&steps, &sum))?;
            text.push('\n');
            write_to(path, &text)?;
        }
        if let Some(path) = &o.markdown {
            write_to(path, &markdown::render(&steps, &sum, None))?;
        }
    }
    log::info!(
        "wrote {} ({} execs)",
        html_out.display(),
        build.records.len()
    );
    Ok(())
}

/// Every input's records folded into steps, one file at a time (each file's records are
/// deduplicated by exec, then dropped). A file without records is a warning; inputs without
/// any are an error.
pub fn load_steps(inputs: &[read::Input]) -> Result<steps::Steps> {
    let mut s = steps::Steps::default();
    let mut warn = read::Warnings::default();
    for input in inputs {
        let name = input.name();
        let b = match input {
            read::Input::Stdin => Build::read_lenient(std::io::stdin().lock(), &name)?,
            read::Input::File(p) => {
                let f = fs::File::open(p).with_context(|| format!("cannot open {name}"))?;
                Build::read_lenient(BufReader::new(f), &name)?
            }
        };
        warn.lines.extend(b.warnings);
        if b.records.is_empty() {
            warn.add(format!("{name} holds no exec records: skipped"));
            continue;
        }
        s.files += 1;
        for r in &b.records {
            s.add(r, &name);
        }
    }
    if s.execs() == 0 {
        // One line: the first fault says what the inputs are instead.
        bail!(
            "no exec records in {} input(s) (expected the JSON lines of `profiler attach --output json`){}",
            inputs.len(),
            read::first_fault(&warn.lines)
        );
    }
    warn.log();
    s.warnings = warn.lines;
    Ok(s)
}

fn write_to(path: &str, text: &str) -> Result<()> {
    if path == "-" {
        crate::cli::write_stdout(text.as_bytes())
    } else {
        fs::write(path, text).with_context(|| format!("cannot write {path}"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record line as `attach` writes it (trimmed to what matters here).
    pub fn line(exec: &str, id: u64, state: &str, start_s: u64, wall_ms: u64, cpu: &str) -> String {
        let start = 1_700_000_000_000_000_000 + start_s * 1_000_000_000;
        let wall = wall_ms * 1_000_000;
        format!(
            r#"{{"exec":"{exec}","cgroup_id":{id},"state":"{state}","partial":false,"wall_ns":{wall},"start_unix_ns":{start},"end_unix_ns":{},"live_tasks":0,"cpu":{cpu},"disk":{{"read_bytes":4096,"write_bytes":1048576,"read_requests":1,"write_requests":1}},"io":{{"read_bytes":0,"write_bytes":0}},"tasks":{{"processes_started":1,"threads_started":0,"execve":1}},"processes":[{{"pid":7,"comm":"dd","args":"dd if=/dev/zero","on_cpu_ns":5}}],"other_processes":{{}},"cgroup":{{"memory_peak_bytes":{{"source":"memory.peak","when":"none","missing":"the memory controller is not on the cgroup v2 hierarchy"}}}},"network":{{"namespace":"host","sockets":{{"rx_bytes":10,"rx_packets":1,"tx_bytes":20,"tx_packets":1,"loopback":{{"rx_bytes":0,"rx_packets":0,"tx_bytes":0,"tx_packets":0}}}},"interfaces":[]}},"notes":[]}}"#,
            start + wall
        )
    }

    pub fn cpu(on: u64, rq: u64, io: u64, task: u64) -> String {
        format!(
            r#"{{"on_cpu_ns":{on},"user_ns":{on},"system_ns":0,"runq_delay_ns":{rq},"runq_waits":1,"iowait_ns":{io},"iowait_waits":1,"swapin_ns":0,"reclaim_ns":0,"thrashing_ns":0,"voluntary_switches":1,"involuntary_switches":0,"task_time_ns":{task}}}"#
        )
    }

    /// The reader takes what the writer writes: a record made by the monitor's own code.
    #[test]
    fn reads_the_records_the_profiler_writes() {
        use crate::{
            execs::Execs,
            record::{ExecRecord, Inputs},
            sources::net::{NetInput, NetReport},
        };
        use profiler_common::{ExecStats, SockTraffic};
        let mut execs = Execs::new("/base", 10);
        execs.add_exec(9, "/base/step-1", 1_000);
        let e = execs.get_mut(9).unwrap();
        e.command = Some("make -j2".into());
        e.metadata = Some(crate::runtime::Lookup::Found(
            crate::runtime::ContainerInfo {
                runtime: "buildkit",
                id: "6n2c0m1v3k9w5q8x7z4y2b1a0".into(),
                name: None,
                image: None,
                command: Some("/bin/sh -c make -j2".into()),
                k8s: None,
            },
        ));
        let environ = b"GITHUB_ACTIONS=true\0GITHUB_RUN_ID=42\0GITHUB_SERVER_URL=https://github.example\0GITHUB_REPOSITORY=a/b\0TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\0";
        e.ci = Some(crate::ci::CiEnv::default().context(environ));
        let exec = execs.get(9).unwrap();
        let mut stats = ExecStats::default();
        stats.ended.oncpu_ns = 40;
        stats.ended.runq_ns = 10;
        stats.ended.iowait_ns = 5;
        stats.ended.life_ns = 100;
        stats.disk.write_bytes = 4096;
        let sock = SockTraffic {
            rx_bytes: 7,
            tx_bytes: 8,
            lo_tx_bytes: 3,
            ..Default::default()
        };
        let network = Some(NetReport::build(NetInput {
            sock: &sock,
            sockets_status: &Ok(()),
            interfaces_status: &Ok(()),
            namespaces: &[],
            ifaces: &[],
            faults: None,
        }));
        let report = ExecRecord::build(
            exec,
            Inputs {
                stats: &stats,
                live: None,
                now_ns: 51_000,
                top: 10,
                programs: 20,
                notes: Vec::new(),
                cgroup: None,
                network,
            },
        );
        let b = Build::read(report.json().as_bytes(), "t").unwrap();
        let r = &b.records[0];
        assert_eq!(
            (r.exec.as_str(), r.cgroup_id, r.state),
            ("step-1", 9, State::Running)
        );
        assert_eq!(r.command.as_deref(), Some("make -j2"));
        assert_eq!(r.name(), ("/bin/sh -c make -j2", NamedBy::ContainerCommand));
        assert_eq!(r.container.as_ref().unwrap().runtime, "buildkit");
        let ci = r.ci().unwrap();
        assert_eq!(ci.system_name(), Some("GitHub Actions"));
        assert_eq!(ci.attr("cicd.pipeline.run.id"), Some("42"));
        assert_eq!(
            ci.attr("cicd.pipeline.run.url.full"),
            Some("https://github.example/a/b/actions/runs/42")
        );
        let t = ci.trace.as_ref().unwrap();
        assert_eq!(
            (t.trace_id.as_str(), t.span_id.as_str(), t.sampled),
            ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", true)
        );
        assert_eq!(r.wall_ns, 50_000);
        assert_eq!(r.end_unix_ns - r.start_unix_ns, 50_000);
        assert_eq!(r.disk.write_bytes, 4096);
        let t = r.sockets().unwrap();
        assert_eq!((t.rx_bytes, t.tx_bytes), (7, 8));
        let lo = r
            .network
            .as_ref()
            .unwrap()
            .sockets
            .as_ref()
            .unwrap()
            .loopback;
        assert_eq!(lo.tx_bytes, 3);
        let br = r.breakdown();
        assert_eq!((br.task_ns, br.on_cpu_ns, br.other_ns), (100, 40, 45));
        assert_eq!(
            r.memory_peak().unwrap_err(),
            "the record has no cgroup figures"
        );
    }

    fn read(text: &str) -> Result<Build> {
        Build::read(text.as_bytes(), "t.jsonl")
    }

    #[test]
    fn records_that_make_no_sense_are_skipped_and_huge_figures_saturate() {
        let good = line("a", 1, "ended", 0, 100, &cpu(1, 0, 0, 2));
        let backwards = line("b", 2, "ended", 5, 100, &cpu(1, 0, 0, 2)).replacen(
            r#""end_unix_ns":"#,
            r#""end_unix_ns":1,"x":"#,
            1,
        );
        let endless = line("c", 3, "ended", 0, 100, &cpu(1, 0, 0, 2)).replacen(
            r#""end_unix_ns":"#,
            &format!(r#""end_unix_ns":{},"x":"#, u64::MAX),
            1,
        );
        let max = u64::MAX;
        let huge = line("d", 4, "ended", 1, 100, &cpu(max, max, max, max));
        let huge2 = line("e", 5, "ended", 2, 100, &cpu(max, max, max, max));
        let b = read(&[good, backwards, endless, huge, huge2].join("\n")).unwrap();
        let kept: Vec<&str> = b.records.iter().map(|r| r.exec.as_str()).collect();
        assert_eq!(kept, ["a", "d", "e"]);
        let t = b.total();
        assert_eq!(
            (t.task_ns, t.on_cpu_ns),
            (u64::MAX, u64::MAX),
            "saturated, not wrapped"
        );
        // The page and the summary are made, whatever the figures.
        let page = html::render(&b, "t.jsonl");
        assert!(page.contains("</svg>"));
        let text = summary::render(&b, 3);
        assert!(text.contains("where the time went"), "{text}");
    }

    #[test]
    fn an_endless_line_is_an_error_not_a_memory_hog() {
        use std::io::Read as _;
        let zeros = std::io::repeat(0).take(read::MAX_LINE as u64 + 10);
        let e = Build::read(std::io::BufReader::new(zeros), "/dev/zero").unwrap_err();
        assert!(
            e.to_string().starts_with("/dev/zero holds no exec records"),
            "{e}"
        );
        let zeros = std::io::repeat(0).take(read::MAX_LINE as u64 + 10);
        let b = Build::read_lenient(std::io::BufReader::new(zeros), "/dev/zero").unwrap();
        assert_eq!(
            b.warnings,
            [
                "/dev/zero line 1 is longer than 64 MiB: not an exec record; the rest of the file is skipped"
            ]
        );
    }

    /// `line` with more fields (JSON members, comma-separated) after the cgroup id.
    pub fn with(line: &str, fields: &str) -> String {
        line.replacen(r#","state":"#, &format!(r#",{fields},"state":"#), 1)
    }

    #[test]
    fn an_exec_is_named_by_what_ran() {
        let base = line("steps/3", 1, "ended", 0, 100, &cpu(1, 0, 0, 2));
        let name = |fields: &str| {
            let text = if fields.is_empty() {
                base.clone()
            } else {
                with(&base, fields)
            };
            let r = read(&text).unwrap().records.remove(0);
            let (n, by) = r.name();
            (n.to_owned(), by)
        };
        let cmd = r#""command":"make -j2""#;
        let full = r#""container":{"runtime":"docker","id":"abc","name":"web","command":"nginx -g daemon"}"#;
        let unnamed =
            r#""container":{"runtime":"buildkit","id":"abc","command":"/bin/sh -c make"}"#;
        let bare = r#""container":{"runtime":"runc","id":"abc","name":" "}"#;
        assert_eq!(name(""), ("steps/3".into(), NamedBy::Path));
        assert_eq!(name(cmd), ("make -j2".into(), NamedBy::Command));
        assert_eq!(
            name(&format!("{full},{cmd}")),
            ("web".into(), NamedBy::ContainerName)
        );
        assert_eq!(
            name(&format!("{unnamed},{cmd}")),
            ("/bin/sh -c make".into(), NamedBy::ContainerCommand)
        );
        // A blank name names nothing.
        assert_eq!(
            name(&format!("{bare},{cmd}")),
            ("make -j2".into(), NamedBy::Command)
        );
        assert_eq!(name(bare), ("steps/3".into(), NamedBy::Path));
        // CI context: none without one, or with nothing in it.
        let r = read(&base).unwrap().records.remove(0);
        assert!(r.ci().is_none());
        let r = read(&with(&base, r#""ci":{}"#)).unwrap().records.remove(0);
        assert!(r.ci().is_none());
        let r = read(&with(
            &base,
            r#""ci":{"trace":{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","sampled":false}}"#,
        ))
        .unwrap()
        .records
        .remove(0);
        assert!(!r.ci().unwrap().trace.as_ref().unwrap().sampled);
        // A container without its id is not the profiler's: skipped, not a silent default.
        let text = with(&base, r#""container":{"runtime":"docker"}"#);
        let b = Build::read_lenient(text.as_bytes(), "t").unwrap();
        assert!(b.records.is_empty());
        assert!(
            b.warnings[0].contains("missing field `id`"),
            "{:?}",
            b.warnings
        );
    }

    #[test]
    fn ended_records_supersede_running_ones() {
        let text = [
            line("a", 1, "running", 0, 100, &cpu(1, 0, 0, 2)),
            line("b", 2, "ended", 1, 100, &cpu(1, 0, 0, 2)),
            line("a", 1, "ended", 0, 300, &cpu(3, 0, 0, 4)),
            line("a", 1, "running", 0, 400, &cpu(9, 0, 0, 9)),
            String::new(),
            line("c", 3, "running", 2, 100, &cpu(1, 0, 0, 1)),
            line("c", 3, "running", 2, 200, &cpu(2, 0, 0, 2)),
        ]
        .join("\n");
        let b = read(&text).unwrap();
        let got: Vec<(&str, State, u64)> = b
            .records
            .iter()
            .map(|r| (r.exec.as_str(), r.state, r.cpu.on_cpu_ns))
            .collect();
        assert_eq!(
            got,
            [
                ("a", State::Ended, 3),
                ("b", State::Ended, 1),
                ("c", State::Running, 2), // the last running record
            ]
        );
        assert_eq!(b.superseded, 3);
        assert_eq!(b.running(), 1);
    }

    #[test]
    fn a_bad_line_is_a_warning_naming_it() {
        let good = line("a", 1, "ended", 0, 100, &cpu(1, 0, 0, 2));
        let b = read(&format!("{good}\n{{oops\n")).unwrap();
        assert_eq!(b.records.len(), 1);
        let w = &b.warnings;
        assert!(
            w[0].starts_with("t.jsonl line 2: not an exec record: "),
            "{w:?}"
        );
        assert!(!w[0].contains('\n'), "one line: {w:?}");
        // A record of a profiler without task time or Unix times says what it lacks.
        let b = read(&format!(
            "{good}\n{}",
            good.replace("\"task_time_ns\"", "\"x\"")
        ))
        .unwrap();
        assert!(
            b.warnings[0].contains("missing field `task_time_ns`"),
            "{:?}",
            b.warnings
        );
        let b = read(&format!("{good}\n{good}")).unwrap();
        assert_eq!(b.records.len(), 1);
        assert!(
            b.warnings[0].contains("line 2: a second \"ended\" record"),
            "{:?}",
            b.warnings
        );
        // Nothing but bad lines: an error.
        let e = read("{oops\n").unwrap_err().to_string();
        assert!(e.contains("holds no exec records"), "{e}");
    }

    #[test]
    fn empty_input_is_an_error() {
        for text in ["", "\n  \n"] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains("holds no exec records"), "{e}");
        }
    }

    #[test]
    fn breakdown_sums_to_task_time() {
        let b = Breakdown::of(&Cpu {
            on_cpu_ns: 50,
            runq_delay_ns: 20,
            iowait_ns: 10,
            task_time_ns: 100,
            ..Default::default()
        });
        assert_eq!(b.other_ns, 20);
        assert_eq!(b.overlap_ns, 0);
        let sum: u64 = b.parts().iter().map(|p| p.2).sum();
        assert_eq!(sum, b.task_ns);
        // Parts beyond the whole (clocks of two CPUs): no negative "other", the
        // overlap is kept.
        let b = Breakdown::of(&Cpu {
            on_cpu_ns: 100,
            runq_delay_ns: 3,
            iowait_ns: 0,
            task_time_ns: 101,
            ..Default::default()
        });
        assert_eq!((b.other_ns, b.overlap_ns), (0, 2));
        let sum: u64 = b.parts().iter().map(|p| p.2).sum();
        assert_eq!(sum, b.parts_total());
        assert_eq!(b.parts_total(), b.task_ns + 2);
    }

    #[test]
    fn totals_add_up() {
        let text = [
            line("a", 1, "ended", 0, 100, &cpu(50, 20, 10, 100)),
            line("b", 2, "ended", 1, 100, &cpu(7, 1, 1, 1000)),
        ]
        .join("\n");
        let b = read(&text).unwrap();
        let t = b.total();
        assert_eq!(t.task_ns, 1100);
        assert_eq!(t.on_cpu_ns + t.runq_ns + t.iowait_ns + t.other_ns, 1100);
        assert_eq!(t.other_ns, 20 + 991);
        let (s, e) = b.span();
        assert_eq!(e - s, 1_100_000_000);
    }

    #[test]
    fn figures_missing_from_a_record_say_why() {
        let b = read(&line("a", 1, "ended", 0, 100, &cpu(1, 0, 0, 2))).unwrap();
        let r = &b.records[0];
        assert_eq!(
            r.memory_peak().unwrap_err(),
            "the memory controller is not on the cgroup v2 hierarchy"
        );
        assert_eq!(r.sockets().unwrap().tx_bytes, 20);
        let b = read(&line("a", 1, "ended", 0, 100, &cpu(1, 0, 0, 2)).replace(
            r#""when":"none","missing":"the memory controller is not on the cgroup v2 hierarchy""#,
            r#""when":"final","value":123"#,
        ))
        .unwrap();
        assert_eq!(b.records[0].memory_peak().unwrap(), (123, "memory.peak"));
    }
}
