//! Load-time settings of the programs.

/// How many rules may pick execs by name ([`Config::named_parent_id`]).
pub const NAMED_RULES: usize = 4;
/// The longest path prefix a rule compares (the path from the cgroup root, with its `/`).
pub const NAMED_PREFIX: usize = 48;

/// Load-time settings of the programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// cgroup id of the attached cgroup (the root of the watched subtree).
    pub base_cgroup_id: u64,
    /// Cgroups at depth 1..=exec_depth below the base are execs; deeper ones roll up into
    /// their ancestor at exec_depth. The base (depth 0) is the exec of its own processes.
    pub exec_depth: u32,
    /// 1 when block requests are charged to the cgroup of the bio's blkcg (cgroup writeback
    /// on pure v2 with the io and memory controllers), 0 to charge the submitting task.
    pub blkcg_attribution: u32,
    /// 1 on kernels without the block_io_start tracepoint (before 6.5): requests are tied to
    /// their origin through block_getrq and their first issue.
    pub block_getrq_fallback: u32,
    /// Inode number of the host's network namespace (execs running there are counted by
    /// their sockets only).
    pub host_netns_inum: u32,
    /// Slots of the `EXECS` and `CGROUPS` tables.
    pub exec_slots: u32,
    pub cgroup_slots: u32,
    /// Execs picked by name among cgroups that are not watched (buildah's RUN steps, made at
    /// the root beside everything else): a cgroup made directly in `named_parent_id[i]`
    /// (0: no rule) whose path from the root begins with the first `named_prefix_len[i]`
    /// bytes of `named_prefix[i]` is an exec at depth 1; its siblings stay unwatched.
    pub named_parent_id: [u64; NAMED_RULES],
    pub named_prefix_len: [u32; NAMED_RULES],
    pub named_prefix: [[u8; NAMED_PREFIX]; NAMED_RULES],
}
