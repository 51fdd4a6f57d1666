//! The documentation's cross references stay true: every code comment that cites a document
//! by heading (`docs/figures.md, "Skipped BPF runs"`) names a heading that exists there, no
//! comment cites the README for depth, and every relative link in the Markdown files points at
//! a file (and heading) that exists. Run with the unit tests.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// Files under `dir` whose name ends with `ext`, skipping build output and VCS data.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !(name.starts_with('.') || name == "target") {
                files(&p, ext, out);
            }
        } else if name.ends_with(ext) {
            out.push(p);
        }
    }
}

/// The headings of a Markdown text, without their `#`s (fenced code skipped).
fn headings(md: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for l in md.lines() {
        if l.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && l.starts_with('#') {
            out.push(l.trim_start_matches('#').trim().to_owned());
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, spaces to dashes, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Citations `PATH.md, "Heading"` in a text: (path, heading).
fn citations(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(".md, \"") {
        let before = &rest[..i];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "/_.-".contains(c)))
            .map_or(0, |s| s + 1);
        let path = format!("{}.md", &before[start..]);
        let after = &rest[i + 6..];
        let Some(end) = after.find('"') else { break };
        // A heading cited across a comment's line break: join the words.
        let heading = after[..end]
            .split_whitespace()
            .filter(|w| *w != "//" && *w != "///")
            .collect::<Vec<_>>()
            .join(" ");
        out.push((path, heading));
        rest = &after[end..];
    }
    out
}

#[test]
fn code_cites_headings_that_exist() {
    let root = crate::root();
    let mut rs = Vec::new();
    for d in [
        "profiler",
        "profiler-common",
        "profiler-ebpf",
        "xtask",
        "tests",
    ] {
        files(&root.join(d), ".rs", &mut rs);
    }
    let mut bad = Vec::new();
    let mut cited = 0;
    // This file's own examples are not citations.
    rs.retain(|f| !f.ends_with("xtask/src/doclinks.rs"));
    for f in &rs {
        let text = fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        for (i, line) in text.lines().enumerate() {
            if line.contains("README, \"")
                || line.contains("README \"")
                || line.contains("(see README)")
            {
                bad.push(format!(
                    "{rel}:{}: cites the README: cite docs/ by heading",
                    i + 1
                ));
            }
        }
        for (path, heading) in citations(&text) {
            // Only repository documents: docs/..., tests/README.md.
            if !(path.starts_with("docs/") || path == "tests/README.md") {
                continue;
            }
            cited += 1;
            match fs::read_to_string(root.join(&path)) {
                Err(_) => bad.push(format!("{rel}: cites {path}, which does not exist")),
                Ok(md) => {
                    if !headings(&md).iter().any(|h| h == &heading) {
                        bad.push(format!(
                            "{rel}: cites {path}, \"{heading}\": no such heading"
                        ));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(cited > 0, "no citation found: the scanner is broken");
}

#[test]
fn markdown_links_point_at_files_and_headings_that_exist() {
    let root = crate::root();
    let mut md = vec![root.join("README.md")];
    files(&root.join("docs"), ".md", &mut md);
    files(&root.join("tests"), ".md", &mut md);
    let mut bad = Vec::new();
    let mut links = 0;
    for f in &md {
        let text = fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            rest = &after[end..];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                f.clone()
            } else {
                f.parent().unwrap().join(path)
            };
            if !file.exists() {
                bad.push(format!("{rel}: link to {target}: no such file"));
                continue;
            }
            if !anchor.is_empty() {
                let t = fs::read_to_string(&file).unwrap_or_default();
                if !headings(&t).iter().any(|h| slug(h) == anchor) {
                    bad.push(format!("{rel}: link to {target}: no such heading"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(links > 0, "no link found: the scanner is broken");
}

#[test]
fn the_scanners_read_what_they_should() {
    assert_eq!(
        citations(
            "// (docs/figures.md, \"Skipped BPF\n    // runs\") and docs/cost.md, \"Resident memory\""
        ),
        [
            ("docs/figures.md".to_owned(), "Skipped BPF runs".to_owned()),
            ("docs/cost.md".to_owned(), "Resident memory".to_owned())
        ]
    );
    assert_eq!(
        slug("A picture of a build: `profiler report`"),
        "a-picture-of-a-build-profiler-report"
    );
    assert_eq!(slug("Docker sidecar"), "docker-sidecar");
    assert_eq!(headings("# A\n```\n# not\n```\n## B c\n"), ["A", "B c"]);
}
