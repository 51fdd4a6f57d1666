//! Kernel side of the profiler.
//!
//! Data flow: cgroup lifecycle tracepoints keep `CGROUPS` (cgroup id -> exec) and `EXECS`
//! (exec id -> totals) in step with the watched subtree. CPU, run-queue, memory-stall, syscall
//! IO and context-switch figures are the kernel's own per-task counters, collected once per
//! task at its last context switch (when it dies): exact. IO-wait is timed from switch-out to
//! the wake-up's enqueue. Block requests are counted once each, at their first issue, and charged to the exec
//! that caused them. Lifecycle records go to a ring buffer without wake-ups; userspace drains it
//! on a timer.
#![no_std]
#![no_main]
// The BPF target has no atomic compare-and-swap, so core's AtomicU64 lacks fetch_add; the
// intrinsic lowers to the BPF atomic add instruction.
#![allow(internal_features)]
#![feature(core_intrinsics)]
// Map keys and values go to the helpers by reference: passed by value (as the lint would have
// it), rustc copies them to a fresh stack slot first, 18 more instructions in sched_switch and
// 11 in each network program.
#![allow(clippy::needless_borrows_for_generic_args)]

// Modules by source: each program lives with its source's maps; maps that several sources use
// are in `maps`, readers of kernel structures in `read`, load-time settings in `config`.
#[macro_use]
mod config;
mod block;
mod cgroup;
mod final_figures;
mod maps;
mod net;
mod read;
mod sched;
mod task;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
