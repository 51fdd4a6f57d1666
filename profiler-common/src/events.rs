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

pub const CGROUP_PATH_LEN: usize = 256;
pub const COMM_LEN: usize = 16;
pub const ARGS_LEN: usize = 192;

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
}
