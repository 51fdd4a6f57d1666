//! Block IO: each request counted once, at its first issue, charged to the exec that caused
//! it; latency from its last issue to completion.

use core::{
    intrinsics::{AtomicOrdering, atomic_cxchg},
    ptr::{read_volatile, write_volatile},
};

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, PerCpuArray},
    programs::BtfTracePointContext,
};
use profiler_common::{
    DropReason, Inflight, LAT_BUCKETS, OP_DISCARD, OP_FLUSH, OP_OTHER, OP_READ, OP_WRITE,
    REQUEST_BUSY, REQUEST_PROBES, REQUEST_SLOTS, RequestSlot, lat_bucket, request_slot,
};

use crate::{
    config::{CONFIG, QUEUE_STATS_BIT, REQ_PREFLUSH_BIT, global},
    maps::{add, drop_count, entry_of, stats_of},
    read::{cgroup_id, ld, ld_ptr},
};

/// Block requests from their start to their completion, in slots by request pointer (see
/// RequestSlot). A request whose completion never came keeps its slot busy until the block
/// layer reuses the request (found then, and counted as unseen).
#[map]
pub(crate) static REQUESTS: Array<RequestSlot> = Array::with_max_entries(REQUEST_SLOTS, 0);

/// Bio pointer -> its origin, from block_getrq to the first issue of its request (kernels
/// before 6.5, which lack block_io_start).
#[map]
pub(crate) static BIO_ORIGIN: HashMap<u64, Inflight> = HashMap::with_max_entries(16384, 0);

/// Scratch words for `address`, one per program.
#[map]
static ADDRESS: PerCpuArray<u64> = PerCpuArray::with_max_entries(3, 0);

// Block IO: one count per request, at its first issue (dispatch to the driver), charged to the
// exec recorded when the request was created in the submitter's context; latency from the last
// issue to completion. Counting per issue would double-count requeued requests; the current task
// at issue or completion is often kblockd or an IRQ. Counting at completion is not exact either:
// the kernel skips programs silently at times (docs/figures.md, "Skipped BPF runs"), completions most:
// 0.03-0.2% of them on the 6.18 host under concurrent direct IO.

/// The exec that caused a bio, and the request class and flush flag of its op flags. Away from
/// the submitter (`by_task` false) only the bio's blkcg can tell. `bio` is BTF-typed.
#[inline(always)]
pub(crate) fn bio_origin(bio: *const u8, opf: u32, by_task: bool) -> Option<Inflight> {
    let exec_depth = global(&CONFIG.exec_depth);
    let mut exec = None;
    if global(&CONFIG.blkcg_attribution) != 0 {
        // cgroup writeback: the bio carries the blkcg of the cgroup that dirtied the pages.
        let blkg = ld_ptr(bio, off!(bio_blkg));
        let blkcg = ld_ptr(blkg, off!(blkg_blkcg));
        let cgrp = ld_ptr(blkcg, off!(blkcg_css_cgroup));
        if let Some(e) = entry_of(cgroup_id(cgrp)) {
            // A blkcg above exec depth only says the io controller is not delegated further.
            if e.depth >= exec_depth {
                exec = Some(e);
            }
        }
    }
    let e = match exec {
        Some(e) => e,
        None if by_task => {
            // SAFETY: helper without arguments.
            entry_of(unsafe { bpf_get_current_cgroup_id() })?
        }
        None => return None,
    };
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
        exec_id: e.exec_id,
        start_ns: 0,
        issue_ns: 0,
        op,
        preflush: preflush as u32,
        slot: e.slot,
        _pad: 0,
    })
}

/// A request pointer's address as a number. The verifier forbids arithmetic on a pointer,
/// but a pointer stored in a map value reads back as a number (a privileged program may store
/// pointers there). Each program has its own per-CPU word: a program never runs nested in
/// itself (the kernel skips such a run), while another may interrupt it between the store and
/// the load. A helper copy (bpf_probe_read_kernel) did the same for ~20% of each block
/// program's time.
#[inline(always)]
pub(crate) fn address(rq: *const u8, word: u32) -> u64 {
    let Some(w) = ADDRESS.get_ptr_mut(word) else {
        return 0;
    };
    // SAFETY: this program's own per-CPU word (see above).
    unsafe {
        write_volatile(w as *mut *const u8, rq);
        read_volatile(w)
    }
}

/// The words of ADDRESS, one per program that takes a request's address.
const ADDRESS_IO_START: u32 = 0;
const ADDRESS_ISSUE: u32 = 1;
const ADDRESS_COMPLETE: u32 = 2;

/// The `i`th slot of a request's probe sequence.
#[inline(always)]
fn probe(rq: u64, i: u32) -> Option<*mut RequestSlot> {
    REQUESTS.get_ptr_mut((request_slot(rq) + i) & (REQUEST_SLOTS - 1))
}

/// The slot of a request in flight (`key`: the request's address).
#[inline(always)]
pub(crate) fn find_request(key: u64) -> Option<*mut RequestSlot> {
    let busy = key | REQUEST_BUSY;
    for i in 0..REQUEST_PROBES {
        let s = probe(key, i)?;
        // SAFETY: a map value; owner is only changed whole.
        if unsafe { read_volatile(&(*s).owner) } == busy {
            return Some(s);
        }
    }
    None
}

/// Start following a request: take its slot, the one it had last time when it is still
/// there (the block layer reuses its requests, and a slot stays with its request while idle),
/// else the first idle one of its probe sequence. A slot of this request still busy means the
/// completion of its last use never reached the profiler.
#[inline(always)]
pub(crate) fn track_request(key: u64, v: &Inflight) {
    if key == 0 {
        return;
    }
    let busy = key | REQUEST_BUSY;
    for i in 0..REQUEST_PROBES {
        let Some(s) = probe(key, i) else { return };
        // SAFETY: a map value; owner changes by compare-and-swap, or by a plain store from
        // the request that holds the slot busy.
        unsafe {
            let o = read_volatile(&(*s).owner);
            if o == busy {
                if (*s).info.exec_id != 0 && (*s).info.issue_ns != 0 {
                    drop_count(DropReason::CompletionUnseen);
                }
                write_volatile(&mut (*s).info, *v);
                return;
            }
            if o == key
                && atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
                    &mut (*s).owner,
                    key,
                    busy,
                )
                .1
            {
                write_volatile(&mut (*s).info, *v);
                return;
            }
        }
    }
    for i in 0..REQUEST_PROBES {
        let Some(s) = probe(key, i) else { return };
        // SAFETY: as above.
        unsafe {
            let o = read_volatile(&(*s).owner);
            if o & REQUEST_BUSY == 0
                && atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
                    &mut (*s).owner,
                    o,
                    busy,
                )
                .1
            {
                write_volatile(&mut (*s).info, *v);
                return;
            }
        }
    }
    drop_count(DropReason::InflightFull);
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
    bio_origin(bio, ld::<u32>(rq, off!(rq_cmd_flags)), false)
}

/// Count a request once: its bytes and class, into its exec's totals.
#[inline(always)]
pub(crate) fn count_request(inf: &Inflight, bytes: u32) {
    let Some(stats) = stats_of(inf.slot) else {
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
    if let Some(v) = bio_origin(bio, ld::<u32>(rq, off!(rq_cmd_flags)), true) {
        track_request(address(rq, ADDRESS_IO_START), &v);
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

/// `Inflight::issue_ns` of a request whose queue stamps its issues itself.
const STAMPED_BY_QUEUE: u64 = 1;

/// When the request is issued, for its latency: the clock, unless its queue stamps each issue
/// itself right after this tracepoint (QUEUE_FLAG_STATS, on where writeback throttling or I/O
/// latency control is), whose stamp the completion takes.
#[inline(always)]
fn issue_time(rq: *const u8) -> u64 {
    let bit = global(&QUEUE_STATS_BIT);
    if bit < 64 {
        let flags = ld::<u64>(ld_ptr(rq, off!(rq_q)), off!(queue_flags));
        if flags & (1u64 << (bit & 63)) != 0 {
            return STAMPED_BY_QUEUE;
        }
    }
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    // Issued before and requeued: it was counted at its first issue, and the block layer
    // stamps each issue itself when the queue keeps I/O statistics (its stamp is 0 until the
    // first issue), which the completion then takes. Requeues are common under load (~0.85
    // per request of two concurrent direct-IO writers on virtio): one load each.
    if ld::<u64>(rq, off!(rq_io_start_time_ns)) != 0 {
        return 0;
    }
    let now = issue_time(rq);
    let key = address(rq, ADDRESS_ISSUE);
    if let Some(p) = find_request(key) {
        // SAFETY: the slot of this request in flight; only this request's events touch it.
        let v = unsafe { &mut (*p).info };
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
        track_request(key, &v);
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
    let key = address(rq, ADDRESS_COMPLETE);
    let inf = match find_request(key) {
        Some(p) => {
            // SAFETY: the slot of this request in flight; only its own events write it.
            unsafe {
                let v = (*p).info;
                if done {
                    // Idle again: the slot stays with the request (see track_request).
                    (*p).info.exec_id = 0;
                    (*p).info.issue_ns = 0;
                    write_volatile(&mut (*p).owner, key);
                }
                v
            }
        }
        // Without a slot: a request never issued (a cache flush that the flush machinery
        // carried out, known by its bio before 6.5), or one whose start and issue no program
        // saw.
        None => unseen_request(rq)?,
    };
    if inf.issue_ns == 0 {
        // Not seen issued: counted here, without a latency.
        if done {
            count_request(&inf, nr_bytes);
        }
        return Some(());
    }
    let d = &mut stats_of(inf.slot)?.disk;
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
    // From the last issue: the block layer's own stamp when it keeps one (see block_rq_issue).
    let issued = match ld::<u64>(rq, off!(rq_io_start_time_ns)) {
        0 => inf.issue_ns,
        t => t,
    };
    if issued == STAMPED_BY_QUEUE {
        // The queue stopped keeping statistics between the issue and its stamp.
        return Some(());
    }
    // SAFETY: helper without arguments.
    let lat = unsafe { bpf_ktime_get_ns() }.saturating_sub(issued);
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
