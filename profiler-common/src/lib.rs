//! Types shared by the eBPF programs (profiler-ebpf) and the userspace loader (profiler), by
//! source: kernel field offsets, load-time settings, execs, tasks, block IO, network,
//! records, drop counters.
//!
//! Everything is `#[repr(C)]`, made of plain integers, with explicit padding, so both sides
//! agree on every byte. Counters are `u64` so that the kernel side can add to them atomically.
#![no_std]

mod block;
mod config;
mod drops;
mod events;
mod exec;
mod net;
mod offsets;
mod task;

pub use block::*;
pub use config::*;
pub use drops::*;
pub use events::*;
pub use exec::*;
pub use net::*;
pub use offsets::*;
pub use task::*;

/// Offset value meaning "this field does not exist on the running kernel".
pub const ABSENT: u32 = u32::MAX;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all are repr(C) plain integers with explicit padding.
    unsafe impl aya::Pod for KernelOffsets {}
    unsafe impl aya::Pod for Config {}
    unsafe impl aya::Pod for FinalOffsets {}
    unsafe impl aya::Pod for CgroupEntry {}
    unsafe impl aya::Pod for CgroupSlot {}
    unsafe impl aya::Pod for TaskCounters {}
    unsafe impl aya::Pod for ExecStats {}
    unsafe impl aya::Pod for TaskBaseline {}
    unsafe impl aya::Pod for Inflight {}
    unsafe impl aya::Pod for RequestSlot {}
    unsafe impl aya::Pod for IoWait {}
    unsafe impl aya::Pod for SockTraffic {}
    unsafe impl aya::Pod for NetnsEntry {}
    unsafe impl aya::Pod for IfaceKey {}
    unsafe impl aya::Pod for IfaceTraffic {}
    unsafe impl aya::Pod for NetOffsets {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lat_buckets_are_log2_microseconds() {
        assert_eq!(lat_bucket(0), 0);
        assert_eq!(lat_bucket(1_500), 0);
        assert_eq!(lat_bucket(2_048), 1);
        assert_eq!(lat_bucket(4_095), 1);
        assert_eq!(lat_bucket(4_096), 2);
        assert_eq!(lat_bucket(1_000_000), 9); // ~976 us
        assert_eq!(lat_bucket(u64::MAX), LAT_BUCKETS - 1);
        for i in 1..LAT_BUCKETS {
            assert_eq!(lat_bucket(lat_bucket_floor_ns(i)), i);
            assert_eq!(lat_bucket(lat_bucket_floor_ns(i) - 1), i - 1);
        }
    }

    #[test]
    fn counters_since_and_add() {
        let mut a = TaskCounters {
            oncpu_ns: 10,
            rchar: 5,
            ..Default::default()
        };
        let b = TaskCounters {
            oncpu_ns: 4,
            rchar: 5,
            ..Default::default()
        };
        let d = a.since(&b);
        assert_eq!((d.oncpu_ns, d.rchar), (6, 0));
        a.add(&d);
        assert_eq!(a.oncpu_ns, 16);
    }

    #[test]
    fn every_offset_field_fills_its_own_slot() {
        let mut o = KernelOffsets::ABSENT;
        for (i, f) in KernelOffsets::FIELDS.iter().enumerate() {
            let slot = o.slot_mut(f.slot).expect("a slot of the struct");
            assert_eq!(*slot, ABSENT, "{}", f.slot);
            *slot = i as u32;
            if let Some(dep) = f.after {
                assert!(o.slot_mut(dep).is_some(), "{} after {dep}", f.slot);
            }
        }
        assert_eq!(o.task_pid, 0);
        assert_eq!(o.task_in_iowait_mask, 0, "extra slots keep their defaults");
        let mut n = NetOffsets::ABSENT;
        assert!(
            NetOffsets::FIELDS
                .iter()
                .all(|f| n.slot_mut(f.slot).is_some())
        );
        let mut fin = FinalOffsets::ABSENT;
        for f in FinalOffsets::FIELDS {
            let slot = fin.slot_mut(f.slot).expect("a slot of the struct");
            assert_eq!(*slot, ABSENT, "{}", f.slot);
            *slot = 0;
        }
        assert_eq!(
            fin.runqueues_secoff,
            u64::MAX,
            "extra slots keep their defaults"
        );
        assert_eq!(DROP_COUNTERS as usize, DropReason::ALL.len());
        for (i, d) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i);
        }
    }
}
