//! What the programs could not store or were not given, counted per CPU (array map `DROPS`).

/// Why a counter of the `DROPS` map went up.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    RingBuf,
    CgroupsFull,
    ExecsFull,
    BaselinesFull,
    InflightFull,
    ExecMissing,
    IowaitFull,
    NetFull,
    /// Not a lost record: a block request whose completion the kernel never delivered to the
    /// profiler (its bytes are counted; its latency is not).
    CompletionUnseen,
    /// An IO wait whose end (the task's next switch-in) the profiler never saw: the task
    /// blocked again with the wait still open (that wait is lost).
    IowaitEndUnseen,
}

impl DropReason {
    /// Every reason, in the order of the map's slots.
    pub const ALL: [DropReason; 10] = [
        Self::RingBuf,
        Self::CgroupsFull,
        Self::ExecsFull,
        Self::BaselinesFull,
        Self::InflightFull,
        Self::ExecMissing,
        Self::IowaitFull,
        Self::NetFull,
        Self::CompletionUnseen,
        Self::IowaitEndUnseen,
    ];

    /// What the user is told when its counter goes up.
    pub const fn description(self) -> &'static str {
        match self {
            Self::RingBuf => "ring buffer full: process records lost",
            Self::CgroupsFull => "cgroup table full: cgroups not followed (raise --max-cgroups)",
            Self::ExecsFull => "exec table full: execs not followed (raise --max-execs)",
            Self::BaselinesFull => "baseline table full: running tasks counted from their start",
            Self::InflightFull => "in-flight IO table full: block requests not counted",
            Self::ExecMissing => "events for execs without a table entry",
            Self::IowaitFull => "IO-wait table full: IO waits of some tasks not counted",
            Self::NetFull => "network table full: some interfaces or namespaces not counted",
            Self::CompletionUnseen => {
                "block completions the kernel did not deliver to BPF: bytes counted, those \
                 requests' latency missing"
            }
            Self::IowaitEndUnseen => {
                "IO waits whose end the profiler did not see: those waits not counted"
            }
        }
    }
}

/// Slots of the `DROPS` map.
pub const DROP_COUNTERS: u32 = DropReason::ALL.len() as u32;
