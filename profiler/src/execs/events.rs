//! The records the kernel sends on the ring buffer, read into events; argv and comm as text.

use anyhow::{Result, bail};
use profiler_common::{
    CgroupEvent, EV_CGROUP_CREATED, EV_CGROUP_REMOVED, EV_EXEC_CREATED, EV_EXEC_FINAL, EV_PROC_ENV,
    EV_PROC_EXEC, EV_TASK_END, ExecFinalEvent, PROC_ENV_HEADER, ProcEnvHeader, ProcExecEvent,
    TaskRecord,
};

/// A record from the ring buffer.
#[derive(Clone, Debug)]
pub enum Event {
    Cgroup(CgroupEvent),
    TaskEnd(TaskRecord),
    ProcExec(ProcExecEvent),
    ExecFinal(ExecFinalEvent),
}

fn read<T: Copy>(bytes: &[u8]) -> Result<T> {
    if bytes.len() < size_of::<T>() {
        bail!(
            "short record: {} bytes, expected {}",
            bytes.len(),
            size_of::<T>()
        );
    }
    // SAFETY: length checked; T is plain data.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const T) })
}

impl Event {
    pub fn parse(bytes: &[u8]) -> Result<Event> {
        let kind: u32 = read(bytes)?;
        Ok(match kind {
            EV_EXEC_CREATED | EV_CGROUP_CREATED | EV_CGROUP_REMOVED => Event::Cgroup(read(bytes)?),
            EV_TASK_END => Event::TaskEnd(read(bytes)?),
            EV_PROC_EXEC => Event::ProcExec(read(bytes)?),
            EV_EXEC_FINAL => Event::ExecFinal(read(bytes)?),
            k => bail!("unknown record kind {k}"),
        })
    }
}

/// An environment record (EV_PROC_ENV): read in place, its block never copied.
pub struct ProcEnv<'a> {
    pub exec_id: u64,
    pub tgid: u32,
    /// NAME=value entries separated by NULs, as much as the kernel sent.
    pub block: &'a [u8],
    /// The block was longer than the record holds.
    pub cut: bool,
}

impl<'a> ProcEnv<'a> {
    /// The record, when `bytes` is one (None for other kinds).
    pub fn parse(bytes: &'a [u8]) -> Option<Result<Self>> {
        if read::<u32>(bytes).ok()? != EV_PROC_ENV {
            return None;
        }
        Some((|| {
            let h: ProcEnvHeader = read(bytes)?;
            let len = h.len as usize;
            let Some(block) = bytes.get(PROC_ENV_HEADER..PROC_ENV_HEADER + len) else {
                bail!("environment record of {len} bytes cut short");
            };
            Ok(Self {
                exec_id: h.exec_id,
                tgid: h.tgid,
                block,
                cut: h.full_len as usize > len,
            })
        })())
    }
}

/// NUL-terminated bytes to a string.
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// argv as the kernel stores it (NUL-separated) to "the first words", at most `max` chars.
pub fn args_summary(raw: &[u8], max: usize) -> String {
    let words: Vec<String> = raw
        .split(|&c| c == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let mut out = String::new();
    for w in words {
        if !out.is_empty() {
            out.push(' ');
        }
        let room = max.saturating_sub(out.chars().count());
        if w.chars().count() > room {
            out.extend(w.chars().take(room));
            out.push('…');
            break;
        }
        out.push_str(&w);
    }
    out
}

pub(super) const ARGS_SUMMARY_CHARS: usize = 96;

/// `runc init` re-executing itself inside the container's cgroup (runc's cloned-binary
/// guard, at times after the cgroup join): the runtime's own program, not the exec's first.
pub(super) fn is_runtime_init(raw: &[u8]) -> bool {
    let mut words = raw.split(|&c| c == 0);
    let argv0 = words.next().unwrap_or_default();
    let base = argv0.rsplit(|&c| c == b'/').next().unwrap_or_default();
    base.ends_with(b"runc") && words.next() == Some(b"init")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execs::tests::task;

    #[test]
    fn environment_records_are_read_in_place() {
        let record = |len: u32, full_len: u32, block: &[u8]| {
            let h = ProcEnvHeader {
                kind: EV_PROC_ENV,
                tgid: 42,
                exec_id: 7,
                len,
                full_len,
            };
            // SAFETY: plain data viewed as bytes.
            let mut bytes = unsafe {
                std::slice::from_raw_parts(&h as *const ProcEnvHeader as *const u8, PROC_ENV_HEADER)
            }
            .to_vec();
            bytes.extend_from_slice(block);
            bytes
        };
        let bytes = record(7, 7, b"A=1\0B=2");
        let env = ProcEnv::parse(&bytes).unwrap().unwrap();
        assert_eq!(
            (env.exec_id, env.tgid, env.block, env.cut),
            (7, 42, &b"A=1\0B=2"[..], false)
        );
        let bytes = record(3, 9000, b"A=1");
        assert!(ProcEnv::parse(&bytes).unwrap().unwrap().cut);
        // A length beyond the record, a short header, another kind.
        assert!(ProcEnv::parse(&record(50, 50, b"A=1")).unwrap().is_err());
        assert!(ProcEnv::parse(&EV_PROC_ENV.to_ne_bytes()).unwrap().is_err());
        assert!(ProcEnv::parse(&EV_PROC_EXEC.to_ne_bytes()).is_none());
        assert!(ProcEnv::parse(&[]).is_none());
    }

    #[test]
    fn args_are_summarised() {
        assert_eq!(args_summary(b"cc\0-O2\0-c\0foo.c\0", 96), "cc -O2 -c foo.c");
        assert_eq!(args_summary(b"a\0bbbbbbbbbb\0", 5), "a bbb…");
        assert_eq!(args_summary(b"", 5), "");
    }

    #[test]
    fn the_runtimes_own_init_is_not_the_first_program() {
        assert!(is_runtime_init(b"runc\0init\0"));
        assert!(is_runtime_init(b"/usr/sbin/runc\0init\0"));
        assert!(!is_runtime_init(b"/bin/sh\0-c\0runc init\0"));
        assert!(!is_runtime_init(b"runc\0run\0x\0"));
    }

    #[test]
    fn parse_rejects_short_and_unknown_records() {
        assert!(Event::parse(&[1, 0]).is_err());
        assert!(Event::parse(&99u32.to_ne_bytes()).is_err());
        let rec = task(1, 1, 1, "a");
        // SAFETY: plain data viewed as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                &rec as *const TaskRecord as *const u8,
                size_of::<TaskRecord>(),
            )
        };
        assert!(matches!(Event::parse(bytes).unwrap(), Event::TaskEnd(_)));
        assert!(Event::parse(&bytes[..20]).is_err());
    }
}
