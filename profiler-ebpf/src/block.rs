//! Block IO: each request counted once, at its first issue, charged to the exec that caused
//! it; latency from its last issue to completion.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map},
    maps::HashMap,
    programs::BtfTracePointContext,
};
use profiler_common::*;

use crate::{config::*, maps::*, read::*};

/// Request pointer -> exec and issue time, from request start to completion. A plain hash:
/// an LRU hash was seen to evict live entries long before it was full (inserts and deletes
/// happen on different CPUs), losing a request's bytes. Entries of requests whose completion
/// is never seen are replaced when the request pointer is reused, or removed by userspace after
/// a minute (start_ns).
#[map]
pub(crate) static INFLIGHT: HashMap<u64, Inflight> = HashMap::with_max_entries(16384, 0);

/// Bio pointer -> its origin, from block_getrq to the first issue of its request (kernels
/// before 6.5, which lack block_io_start).
#[map]
pub(crate) static BIO_ORIGIN: HashMap<u64, Inflight> = HashMap::with_max_entries(16384, 0);

// Block IO: one count per request, at its first issue (dispatch to the driver), charged to the
// exec recorded when the request was created in the submitter's context; latency from the last
// issue to completion. Counting per issue would double-count requeued requests; the current task
// at issue or completion is often kblockd or an IRQ. Counting at completion is not exact either:
// the kernel skips programs silently at times (README, "Skipped BPF runs"), completions most:
// 0.03-0.2% of them on the 6.18 host under concurrent direct IO.

/// The exec that caused a bio, and the request class and flush flag of its op flags. Away from
/// the submitter (`by_task` false) only the bio's blkcg can tell. `bio` is BTF-typed.
#[inline(always)]
pub(crate) fn bio_origin(bio: *const u8, opf: u32, by_task: bool) -> Option<Inflight> {
    let exec_depth = global(&CONFIG.exec_depth);
    let mut exec_id = 0u64;
    if global(&CONFIG.blkcg_attribution) != 0 {
        // cgroup writeback: the bio carries the blkcg of the cgroup that dirtied the pages.
        let blkg = ld_ptr(bio, off!(bio_blkg));
        let blkcg = ld_ptr(blkg, off!(blkg_blkcg));
        let cgrp = ld_ptr(blkcg, off!(blkcg_css_cgroup));
        if let Some(e) = entry_of(cgroup_id(cgrp)) {
            // A blkcg above exec depth only says the io controller is not delegated further.
            if e.depth >= exec_depth {
                exec_id = e.exec_id;
            }
        }
    }
    if exec_id == 0 {
        if !by_task {
            return None;
        }
        // SAFETY: helper without arguments.
        exec_id = entry_of(unsafe { bpf_get_current_cgroup_id() })?.exec_id;
    }
    let preflush_bit = global(&REQ_PREFLUSH_BIT);
    let op = match opf & 0xff {
        0 => OP_READ,
        1 => OP_WRITE,
        2 => OP_FLUSH,
        3 | 5 | 9 => OP_DISCARD, // discard, secure erase, write zeroes
        _ => OP_OTHER,
    };
    let preflush = preflush_bit < 32 && opf & (1u32 << (preflush_bit & 31)) != 0;
    Some(Inflight {
        exec_id,
        start_ns: 0,
        issue_ns: 0,
        op,
        preflush: preflush as u32,
    })
}

/// When the request was made, for the expiry of entries whose completion never comes: the
/// block layer's own stamp when it keeps one (I/O statistics on), else the clock.
#[inline(always)]
pub(crate) fn request_time(rq: *const u8) -> u64 {
    let t = ld::<u64>(rq, off!(rq_start_time_ns));
    if t != 0 {
        return t;
    }
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// Start following a request. Requests are preallocated by the block layer and reused, so
/// each request pointer keeps its INFLIGHT entry (exec_id 0 when idle), rewritten in place:
/// a lookup, where an insert and a delete per request each took the bucket lock and the
/// element free list. An entry still in flight and issued means the completion of the request
/// that last used the pointer never reached the profiler.
#[inline(always)]
pub(crate) fn track_request(rq: *const u8, v: &Inflight) {
    let key = rq as u64;
    if let Some(p) = INFLIGHT.get_ptr_mut(&key) {
        // SAFETY: this request's entry: only its own events (which do not overlap) write it.
        let e = unsafe { &mut *p };
        if e.exec_id != 0 && e.issue_ns != 0 {
            drop_count(DropReason::CompletionUnseen);
        }
        *e = *v;
        return;
    }
    if INFLIGHT.insert(&key, v, 0).is_err() {
        drop_count(DropReason::InflightFull);
    }
}

/// A request whose start no program saw: before 6.5 its bio as block_getrq saw it; otherwise
/// its bio's blkcg where cgroup writeback attributes IO (block_io_start was seen to miss 0.15%
/// of requests on the preemptible 7.3 kernel).
#[inline(always)]
pub(crate) fn unseen_request(rq: *const u8) -> Option<Inflight> {
    let bio = ld_ptr(rq, off!(rq_bio));
    if global(&CONFIG.block_getrq_fallback) != 0 {
        // SAFETY: plain data copied out.
        if let Some(v) = unsafe { BIO_ORIGIN.get(&(bio as u64)) }.copied() {
            let _ = BIO_ORIGIN.remove(&(bio as u64));
            return Some(v);
        }
    }
    let mut v = bio_origin(bio, ld::<u32>(rq, off!(rq_cmd_flags)), false)?;
    v.start_ns = request_time(rq);
    Some(v)
}

/// Count a request once: its bytes and class, into its exec's totals.
#[inline(always)]
pub(crate) fn count_request(inf: &Inflight, bytes: u32) {
    let Some(stats) = stats_of(inf.exec_id) else {
        return;
    };
    let d = &mut stats.disk;
    let bytes = bytes as u64;
    match inf.op {
        OP_READ => {
            add(&mut d.read_bytes, bytes);
            add(&mut d.read_reqs, 1);
        }
        // A write without data is the empty carrier of a cache flush.
        OP_WRITE if bytes > 0 => {
            add(&mut d.write_bytes, bytes);
            add(&mut d.write_reqs, 1);
        }
        OP_DISCARD => {
            add(&mut d.discard_bytes, bytes);
            add(&mut d.discard_reqs, 1);
        }
        _ => {}
    }
    if inf.op == OP_FLUSH || inf.preflush != 0 {
        add(&mut d.flush_reqs, 1);
    }
}

/// A request is created for a bio, in the submitter's context (Linux 6.5+).
#[btf_tracepoint(function = "block_io_start")]
pub fn block_io_start(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    let bio = ld_ptr(rq, off!(rq_bio));
    if let Some(mut v) = bio_origin(bio, ld::<u32>(rq, off!(rq_cmd_flags)), true) {
        v.start_ns = request_time(rq);
        track_request(rq, &v);
    }
    0
}

/// Before 6.5 (no block_io_start): the bio that a new request is made for, in the
/// submitter's context; the request is tracked from its first issue (see block_rq_issue).
#[btf_tracepoint(function = "block_getrq")]
pub fn block_getrq(ctx: BtfTracePointContext) -> i32 {
    let bio: *const u8 = ctx.arg(0);
    if let Some(mut v) = bio_origin(bio, ld::<u32>(bio, off!(bio_opf)), true) {
        // SAFETY: helper without arguments.
        v.start_ns = unsafe { bpf_ktime_get_ns() };
        if BIO_ORIGIN.insert(&(bio as u64), &v, 0).is_err() {
            drop_count(DropReason::InflightFull);
        }
    }
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    // SAFETY: helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(p) = INFLIGHT.get_ptr_mut(&(rq as u64)) {
        // SAFETY: map value of this request; only this request's events touch it.
        let v = unsafe { &mut *p };
        if v.exec_id != 0 {
            if v.issue_ns == 0 {
                // First issue: the request's size is final (no merge after dispatch).
                count_request(v, ld::<u32>(rq, off!(rq_data_len)));
            }
            // Latency is measured from the last issue (a requeued request is issued again).
            v.issue_ns = now;
            return 0;
        }
    }
    if let Some(mut v) = unseen_request(rq) {
        count_request(&v, ld::<u32>(rq, off!(rq_data_len)));
        v.issue_ns = now;
        track_request(rq, &v);
    }
    0
}

#[btf_tracepoint(function = "block_rq_complete")]
pub fn block_rq_complete(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    let error: u64 = ctx.arg(1);
    let nr_bytes: u32 = ctx.arg(2);
    let _ = try_rq_complete(rq, error as u8 != 0, nr_bytes);
    0
}

#[inline(always)]
pub(crate) fn try_rq_complete(rq: *const u8, error: bool, nr_bytes: u32) -> Option<()> {
    // A request may complete in parts; it is done when this part covers what is left.
    let done = nr_bytes >= ld::<u32>(rq, off!(rq_data_len));
    let entry = INFLIGHT.get_ptr_mut(&(rq as u64));
    // SAFETY: plain data copied out.
    let inf = match entry.map(|p| unsafe { *p }) {
        Some(v) if v.exec_id != 0 => {
            if done {
                if let Some(p) = entry {
                    // Idle again (see track_request).
                    // SAFETY: this request's entry: only its own events write it.
                    unsafe {
                        (*p).exec_id = 0;
                        (*p).issue_ns = 0;
                    }
                }
            }
            v
        }
        // Without an entry: a request never issued (a cache flush that the flush machinery
        // carried out, known by its bio before 6.5), or one whose start and issue no program
        // saw.
        _ => unseen_request(rq)?,
    };
    if inf.issue_ns == 0 {
        // Not seen issued: counted here, without a latency.
        if done {
            count_request(&inf, nr_bytes);
        }
        return Some(());
    }
    let d = &mut stats_of(inf.exec_id)?.disk;
    if error {
        // Counted at issue; these bytes were not transferred.
        let undo = 0u64.wrapping_sub(nr_bytes as u64);
        match inf.op {
            OP_READ => add(&mut d.read_bytes, undo),
            OP_WRITE => add(&mut d.write_bytes, undo),
            OP_DISCARD => add(&mut d.discard_bytes, undo),
            _ => {}
        }
    }
    if !done {
        return Some(());
    }
    // SAFETY: helper without arguments.
    let lat = unsafe { bpf_ktime_get_ns() }.saturating_sub(inf.issue_ns);
    let b = lat_bucket(lat);
    let (sum, buckets) = match inf.op {
        OP_READ => (&mut d.read_lat_sum_ns, &mut d.read_lat),
        OP_WRITE => (&mut d.write_lat_sum_ns, &mut d.write_lat),
        _ => return Some(()),
    };
    add(sum, lat);
    if b < LAT_BUCKETS {
        add(&mut buckets[b], 1);
    }
    Some(())
}
