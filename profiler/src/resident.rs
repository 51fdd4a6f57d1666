//! The resident set after start-up. Code runs once at start-up (BTF parsing, program loading,
//! argument parsing) and stays mapped once touched, with the pages the kernel maps around each
//! fault (fault-around, 64 KiB by default): ~6 MiB of the binary's text at idle. Dropping the
//! mappings of code once start-up is over lets the pages that steady state runs come back on
//! first use; the rest leave the resident set (they stay in the page cache, shared).

/// Code mappings that can be dropped: executable, private, backed by a file, and holding no
/// page of their own (a written page of a private mapping would be lost; code is never written).
fn droppable_code(smaps: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).unwrap_or("");
            current = (perms == "r-xp" && path.starts_with('/')).then_some((start, end));
            continue;
        }
        if first == "Anonymous:"
            && let Some(range) = current.take()
            && fields.next() == Some("0")
        {
            out.push(range);
        }
    }
    out
}

/// Drop the resident pages of this process's code mappings (see the module's comment).
/// Best effort: nothing is lost if it cannot be done.
pub fn drop_startup_code() {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    for (start, end) in droppable_code(&smaps) {
        // SAFETY: a private, never-written file mapping of code: MADV_DONTNEED only unmaps its
        // pages, which fault back in from the same file when run again.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unwritten_private_code_of_files_is_dropped() {
        let smaps = "\
55d0a0000000-55d0a0100000 r--p 00000000 fd:01 123 /usr/bin/profiler
Anonymous:             0 kB
55d0a0100000-55d0a0900000 r-xp 00100000 fd:01 123 /usr/bin/profiler
Rss:                6000 kB
Anonymous:             0 kB
55d0a0900000-55d0a0a00000 rw-p 00900000 fd:01 123 /usr/bin/profiler
Anonymous:            12 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:01 9 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             4 kB
7f0000200000-7f0000300000 r-xp 00000000 00:00 0 
Anonymous:             0 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
";
        assert_eq!(
            droppable_code(smaps),
            vec![(0x55d0a0100000, 0x55d0a0900000)]
        );
    }

    /// kB resident in the mappings of code that can be dropped.
    fn code_rss() -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let ranges = droppable_code(&smaps);
        let mut rss = 0;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((start, _)) = line.split_once('-')
                && let Ok(start) = usize::from_str_radix(start, 16)
            {
                inside = ranges.iter().any(|r| r.0 == start);
            } else if inside && line.starts_with("Rss:") {
                rss += line
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
        }
        rss
    }

    #[test]
    fn dropped_code_leaves_the_resident_set_and_runs_again() {
        let before = code_rss();
        drop_startup_code();
        let after = code_rss();
        assert!(
            after < before,
            "code resident: {before} kB before, {after} kB after"
        );
        // The code that runs after the drop came back from the file.
        assert!(!droppable_code(&std::fs::read_to_string("/proc/self/smaps").unwrap()).is_empty());
    }
}
