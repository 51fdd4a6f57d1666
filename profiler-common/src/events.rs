//! Ring-buffer records to userspace (besides task records and final figures).

/// Event kinds: the first u32 of every ring-buffer record and iterator record.
pub const EV_EXEC_CREATED: u32 = 1;
pub const EV_CGROUP_REMOVED: u32 = 2;
pub const EV_TASK_END: u32 = 3;
pub const EV_PROC_EXEC: u32 = 4;
// 5 was a fork record: a process's parent is now in its task records.
pub const EV_TASK_SNAPSHOT: u32 = 6;
pub const EV_CGROUP_CREATED: u32 = 7;
pub const EV_EXEC_FINAL: u32 = 8;
pub const EV_PROC_ENV: u32 = 9;

pub const CGROUP_PATH_LEN: usize = 256;
pub const COMM_LEN: usize = 16;
pub const ARGS_LEN: usize = 192;
/// Most of an environment block sent from the kernel: its record fills the largest value of a
/// per-CPU map (32 KiB).
pub const ENV_LEN: usize = 32 * 1024 - PROC_ENV_HEADER;

/// A cgroup of the subtree was created (EV_EXEC_CREATED when it is a new exec,
/// EV_CGROUP_CREATED when it rolls up into one) or removed (EV_CGROUP_REMOVED).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgroupEvent {
    pub kind: u32,
    pub depth: u32,
    pub ts_ns: u64,
    pub cgroup_id: u64,
    pub exec_id: u64,
    /// Path from the cgroup v2 root as the kernel printed it, NUL-terminated (maybe truncated).
    pub path: [u8; CGROUP_PATH_LEN],
}

/// A process of an exec called execve: its new command line.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcExecEvent {
    pub kind: u32,
    pub tgid: u32,
    pub args_len: u32,
    pub _pad: u32,
    pub exec_id: u64,
    pub comm: [u8; COMM_LEN],
    /// argv as NUL-separated strings, truncated to ARGS_LEN.
    pub args: [u8; ARGS_LEN],
    /// When the program started (CLOCK_MONOTONIC), for an exec's first [`EARLY_PROGRAMS`]
    /// programs (one may be its main program); 0 for the others.
    pub ts_ns: u64,
}

/// An exec's first programs, which are stamped, send their environment and wake the reader:
/// one of them is its main program, after a runtime's init, which may execute twice (runc
/// init, then runc init again from a sealed copy of itself, both inside the exec's cgroup).
pub const EARLY_PROGRAMS: u64 = 3;

/// The environment of one of an exec's first programs, read from its new stack when it
/// starts (CI step and trace context: exact however short the program). Sent as the header
/// and `len` bytes of `env`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcEnvEvent {
    pub header: ProcEnvHeader,
    /// NAME=value entries separated by NULs.
    pub env: [u8; ENV_LEN],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcEnvHeader {
    pub kind: u32,
    pub tgid: u32,
    pub exec_id: u64,
    /// Bytes of `env` sent.
    pub len: u32,
    /// Size of the whole block (more than `len` when it was cut, 0 when unreadable).
    pub full_len: u32,
}

/// Bytes of [`ProcEnvEvent`] before `env`.
pub const PROC_ENV_HEADER: usize = core::mem::size_of::<ProcEnvHeader>();

const _: () = assert!(core::mem::size_of::<ProcEnvEvent>() == 32 * 1024);
