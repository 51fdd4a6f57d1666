//! The hover details of each exec on the report page: what it ran, where its time went, its
//! processes and programs, its cgroup and network figures, as an inert template the page's
//! script shows on hover.

use std::fmt::Write as _;

use super::{ci_rows, esc, offset, pct};
use crate::{
    render::{bytes, dur, truncate},
    report::{ExecRecord, State},
};

/// The hover details of one exec, as an inert template.
pub(super) fn details(s: &mut String, i: usize, r: &ExecRecord, t0: u64) {
    let b = r.breakdown();
    let _ = write!(
        s,
        "<template id=\"detail-{i}\"><h3>{}</h3><p>{}{} &middot; cgroup {}</p><table>",
        esc(r.name().0),
        match r.state {
            State::Ended => "ended",
            State::Running => "still running when recorded",
        },
        if r.partial {
            " &middot; partial: already running when the profiler attached"
        } else {
            ""
        },
        r.cgroup_id
    );
    let row = |s: &mut String, key: &str, th: &str, td: String| {
        let _ = write!(s, "<tr data-key=\"{key}\"><th>{th}</th><td>{td}</td></tr>");
    };
    row(s, "path", "cgroup path", esc(&r.exec));
    if let Some(c) = &r.container {
        let mut x = format!("{} {}", esc(&c.runtime), esc(&truncate(&c.id, 13)));
        if let Some(n) = &c.name {
            let _ = write!(x, " &middot; name {}", esc(n));
        }
        if let Some(im) = &c.image {
            let _ = write!(x, " &middot; image {}", esc(im));
        }
        row(s, "container", "container", x);
        if let Some(cmd) = &c.command {
            row(
                s,
                "container_command",
                "its command",
                esc(&truncate(cmd, 200)),
            );
        }
    }
    if let Some(cmd) = &r.command {
        row(s, "command", "first program", esc(&truncate(cmd, 200)));
    }
    if let Some(e) = &r.exit {
        let v = esc(&e.status.summary());
        let v = if r.failed() {
            format!("<span class=\"failed\">{v}</span>")
        } else {
            v
        };
        row(s, "exit", "its end", format!("{v} (pid {})", e.pid));
    }
    if let Some(p) = &r.phases {
        let mut x = String::new();
        if let Some(setup) = p.setup_ns {
            let _ = write!(x, "runtime setup {} &middot; ", dur(setup));
        }
        let _ = write!(x, "command {}", dur(p.run_ns));
        if let Some(t) = p.teardown_ns {
            let _ = write!(x, " &middot; teardown {}", dur(t));
        }
        row(s, "phases", "phases", x);
    }
    if let Some(ci) = r.ci() {
        for (key, th, td) in ci_rows(ci) {
            row(s, key, th, td);
        }
        if let Some(t) = &ci.trace {
            let mut x = format!(
                "<code>{}</code>, parent span <code>{}</code>{}",
                esc(&t.trace_id),
                esc(&t.span_id),
                if t.sampled { ", sampled" } else { "" }
            );
            if let Some(st) = &t.tracestate {
                let _ = write!(x, "; tracestate {}", esc(st));
            }
            row(s, "trace", "trace", x);
        }
        if !ci.env.is_empty() {
            let vars: Vec<String> = ci
                .env
                .iter()
                .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
                .collect();
            row(s, "env", "variables", vars.join(", "));
        }
    }
    row(
        s,
        "span",
        "span",
        format!(
            "{} to {}, wall {}",
            offset(r.start_unix_ns - t0),
            offset(r.end_unix_ns.max(r.start_unix_ns) - t0),
            dur(r.wall_ns)
        ),
    );
    // Shares of task time, as in "Where the time went": the parts less what was counted
    // twice add up to it.
    let mut parts = format!("{} =", dur(b.task_ns));
    for (k, (key, label, ns)) in b.parts().into_iter().enumerate() {
        let _ = write!(
            parts,
            "{} <i class=\"{key}\"></i>{label} {} ({:.1}%)",
            if k == 0 { "" } else { " +" },
            dur(ns),
            pct(ns, b.task_ns)
        );
    }
    if b.overlap_ns > 0 {
        let _ = write!(
            parts,
            " &minus; {} counted twice ({:.1}%)",
            dur(b.overlap_ns),
            pct(b.overlap_ns, b.task_ns)
        );
    }
    row(s, "task_time", "task time", parts);
    let stall = r
        .cpu
        .swapin_ns
        .saturating_add(r.cpu.reclaim_ns)
        .saturating_add(r.cpu.thrashing_ns);
    if stall > 0 {
        row(s, "memory_stall", "memory stall", dur(stall));
    }
    row(
        s,
        "disk",
        "disk",
        format!(
            "read {} ({} req), write {} ({} req)",
            bytes(r.disk.read_bytes),
            r.disk.read_requests,
            bytes(r.disk.write_bytes),
            r.disk.write_requests
        ),
    );
    row(
        s,
        "syscalls",
        "read/write calls",
        format!(
            "read {}, write {} (page cache included)",
            bytes(r.io.read_bytes),
            bytes(r.io.write_bytes)
        ),
    );
    let net = match r.sockets() {
        Ok(t) => {
            let lo = r
                .network
                .as_ref()
                .and_then(|n| n.sockets.as_ref())
                .map(|k| k.loopback)
                .unwrap_or_default();
            let mut x = format!(
                "sockets rx {}, tx {} (loopback rx {}, tx {})",
                bytes(t.rx_bytes),
                bytes(t.tx_bytes),
                bytes(lo.rx_bytes),
                bytes(lo.tx_bytes)
            );
            if let Some(i) = r.network.as_ref().and_then(|n| n.interfaces_total) {
                let _ = write!(
                    x,
                    "; own namespace's interfaces rx {}, tx {}",
                    bytes(i.rx_bytes),
                    bytes(i.tx_bytes)
                );
            }
            x
        }
        Err(why) => format!("n/a: {}", esc(&why)),
    };
    row(s, "network", "network", net);
    let mem = match r.memory_peak() {
        Ok((m, source)) => format!("{} ({source})", bytes(m)),
        Err(why) => format!("n/a: {}", esc(&why)),
    };
    row(s, "memory_peak", "memory peak", mem);
    row(
        s,
        "processes",
        "processes",
        format!(
            "{} started, {} threads, {} execve",
            r.tasks.processes_started, r.tasks.threads_started, r.tasks.execve
        ),
    );
    s.push_str("</table>");
    if !r.processes.is_empty() {
        s.push_str("<ol class=\"procs\">");
        let mut procs: Vec<_> = r.processes.iter().collect();
        procs.sort_by_key(|p| std::cmp::Reverse(p.on_cpu_ns));
        for p in procs.iter().take(5) {
            let _ = write!(
                s,
                "<li><b>{}</b> pid {} &middot; CPU {}</li>",
                esc(&truncate(p.name(), 80)),
                p.pid,
                dur(p.on_cpu_ns)
            );
        }
        if procs.len() > 5 {
            let _ = write!(s, "<li>and {} more</li>", procs.len() - 5);
        }
        s.push_str("</ol>");
    }
    if !r.programs.is_empty() {
        let total = r.cpu.on_cpu_ns.max(1);
        s.push_str("<ul class=\"programs\">");
        for p in r.programs.iter().take(5).chain(&r.other_programs) {
            let _ = write!(
                s,
                "<li><b>{}</b> &times;{} &middot; CPU {} ({:.1}%)</li>",
                esc(&p.name),
                p.processes,
                dur(p.on_cpu_ns),
                p.on_cpu_ns as f64 * 100.0 / total as f64
            );
        }
        s.push_str("</ul>");
    }
    if !r.notes.is_empty() {
        s.push_str("<ul class=\"notes\">");
        for n in &r.notes {
            let _ = write!(s, "<li>{}</li>", esc(n));
        }
        s.push_str("</ul>");
    }
    s.push_str("</template>\n");
}
