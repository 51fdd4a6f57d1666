//! Block IO (profiler-ebpf block.rs): each request is tied to the exec that caused it when it
//! starts, and its bytes and latency counted at completion.

use anyhow::Result;
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
};
use profiler_common::Inflight;

use super::{Program, Stage, p};
use crate::loader::take_map;

pub const PROGRAMS: &[Program] = &[
    p("block_rq_issue", "2.6.32", Stage::Task),
    p("block_rq_complete", "2.6.32", Stage::Task),
];

/// Where block requests are tied to the exec that caused them: block_io_start, else
/// block_getrq with the request's first issue. Attached with the task programs.
pub const START: Program = p("block_io_start", "6.5", Stage::Task);
pub const START_FALLBACK: &str = "block_getrq";

/// The program that ties a request to its exec on this kernel.
pub fn start_program(fallback: bool) -> &'static str {
    if fallback { START_FALLBACK } else { START.name }
}

/// The bios seen at block_getrq whose request has not been issued yet (kernels before 6.5).
pub struct BioOrigins(HashMap<MapData, u64, Inflight>);

impl BioOrigins {
    pub fn take(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(Self(HashMap::try_from(take_map(ebpf, "BIO_ORIGIN")?)?))
    }

    /// Remove the entries of bios whose request was never seen issued for longer than
    /// `max_age_ns`. A request's slot whose completion never came stays busy until the block
    /// layer reuses that request: the kernel programs count it then.
    pub fn expire(&mut self, now_ns: u64, max_age_ns: u64) {
        let entries: Vec<(u64, Inflight)> = self.0.iter().filter_map(|r| r.ok()).collect();
        for (k, v) in &entries {
            if now_ns.saturating_sub(v.start_ns) > max_age_ns {
                let _ = self.0.remove(k);
            }
        }
    }
}
