//! Block IO: latency buckets, an exec's block-layer figures, requests in flight.

/// Log2 latency buckets: bucket i counts latencies in [2^i, 2^(i+1)) microseconds; bucket 0
/// also holds everything under 1 us and the last bucket everything above.
pub const LAT_BUCKETS: usize = 24;

/// The latency bucket of a duration in nanoseconds.
#[inline(always)]
pub fn lat_bucket(ns: u64) -> usize {
    let mut us = ns >> 10; // ~microseconds; 1024 ns keeps it a shift
    let mut b = 0usize;
    // Unrolled binary search for floor(log2(us)): no loops, no clz needed in BPF.
    if us >= 1 << 16 {
        us >>= 16;
        b += 16;
    }
    if us >= 1 << 8 {
        us >>= 8;
        b += 8;
    }
    if us >= 1 << 4 {
        us >>= 4;
        b += 4;
    }
    if us >= 1 << 2 {
        us >>= 2;
        b += 2;
    }
    if us >= 1 << 1 {
        b += 1;
    }
    if b >= LAT_BUCKETS { LAT_BUCKETS - 1 } else { b }
}

/// Lower bound of latency bucket `i` in nanoseconds (bucket 0 starts at 0).
pub fn lat_bucket_floor_ns(i: usize) -> u64 {
    if i == 0 { 0 } else { 1024u64 << i }
}

/// Block-layer figures of an exec: each request counted once, at its first dispatch to the
/// driver; latency from its last issue to its completion. The counts (written at issue, on
/// the submitting CPU) and the latencies (written at completion, often on another CPU) are
/// on cache lines of their own.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskStats {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_reqs: u64,
    pub write_reqs: u64,
    pub discard_bytes: u64,
    pub discard_reqs: u64,
    pub flush_reqs: u64,
    pub _pad: u64,
    pub read_lat_sum_ns: u64,
    pub write_lat_sum_ns: u64,
    pub read_lat: [u64; LAT_BUCKETS],
    pub write_lat: [u64; LAT_BUCKETS],
}

impl Default for DiskStats {
    fn default() -> Self {
        Self {
            read_bytes: 0,
            write_bytes: 0,
            read_reqs: 0,
            write_reqs: 0,
            discard_bytes: 0,
            discard_reqs: 0,
            flush_reqs: 0,
            _pad: 0,
            read_lat_sum_ns: 0,
            write_lat_sum_ns: 0,
            read_lat: [0; LAT_BUCKETS],
            write_lat: [0; LAT_BUCKETS],
        }
    }
}

/// What is known of a block request from its start to its completion: in its slot of the
/// `REQUESTS` table (see [`RequestSlot`]), or for a bio before 6.5 in `BIO_ORIGIN`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inflight {
    pub exec_id: u64,
    /// When block_getrq saw the bio (BIO_ORIGIN, before 6.5): userspace removes the entries of
    /// bios whose request was never seen issued after a while. Not kept in REQUESTS slots,
    /// which stay with their request until its next use.
    pub start_ns: u64,
    pub issue_ns: u64,
    pub op: u32,
    /// 1 when the request carries a cache flush (REQ_PREFLUSH).
    pub preflush: u32,
    /// The exec's slot in `EXECS` and `DISK`.
    pub slot: u32,
    pub _pad: u32,
}

/// Slots of the `REQUESTS` table (a power of two) and how many consecutive slots a request
/// may take (from the one its pointer hashes to).
pub const REQUEST_SLOTS: u32 = 16384;
pub const REQUEST_PROBES: u32 = 4;
/// Low bit of [`RequestSlot::owner`]: the request is between its start and its completion.
pub const REQUEST_BUSY: u64 = 1;

/// A slot of the `REQUESTS` table, an array indexed by a hash of the request pointer: a hash
/// map lookup cost hundreds of ns per block program on the project's machines, an array
/// lookup is inlined. The block layer reuses its preallocated requests, so a request keeps its
/// slot: `owner` is its pointer, with [`REQUEST_BUSY`] while in flight; an idle slot can be
/// taken by another request (compare-and-swap). One cache line each, so that requests
/// completing on different CPUs do not share one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestSlot {
    pub owner: u64,
    pub info: Inflight,
    pub _pad: [u64; 2],
}

/// The first slot of a request pointer's probe sequence: nearby requests (the block layer
/// allocates them in arrays) stay in nearby slots.
#[inline(always)]
pub fn request_slot(rq: u64) -> u32 {
    ((rq >> 6) ^ (rq >> 20)) as u32 & (REQUEST_SLOTS - 1)
}

/// Request classes for [`Inflight::op`].
pub const OP_READ: u32 = 0;
pub const OP_WRITE: u32 = 1;
pub const OP_FLUSH: u32 = 2;
pub const OP_DISCARD: u32 = 3;
pub const OP_OTHER: u32 = 4;

const _: () = assert!(core::mem::size_of::<RequestSlot>() == 64);
