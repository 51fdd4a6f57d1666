//! What the running kernel looks like, from its BTF: the offsets of the struct fields that the
//! programs read (Rust eBPF has no CO-RE, so they are resolved here and passed in as a
//! load-time global), and which tracepoints exist.

use std::path::Path;

use anyhow::{Context as _, Result, anyhow, bail};

use crate::sources;
use btf_rs::{Btf, Type};
use profiler_common::{ABSENT, FinalOffsets, KernelOffsets, Need, NetOffsets};

pub const DEFAULT_BTF: &str = "/sys/kernel/btf/vmlinux";

/// An enum's enumerators: (name, value).
pub type EnumNames = Vec<(String, u32)>;

/// The resolved layout plus what was found missing (optional fields degrade figures).
#[derive(Clone, Debug)]
pub struct KernelLayout {
    pub offsets: KernelOffsets,
    /// For the figures read when an exec's cgroup is removed.
    pub finals: FinalOffsets,
    /// psi_states index by name (PSI_IO_SOME, ...), and memcg_memory_event index by name.
    pub psi_states: Vec<(String, u32)>,
    pub memcg_events: Vec<(String, u32)>,
    /// Bit number of REQ_PREFLUSH in request cmd_flags.
    pub req_preflush_bit: u32,
    /// Bit number of QUEUE_FLAG_STATS in a request queue's flags (u32::MAX where it is not an
    /// enumerator, as on 6.1, where it is a #define: the programs then read the clock at each
    /// first issue).
    pub queue_stats_bit: u32,
    /// For the interface counters of the execs' own network namespaces; None (with the reason)
    /// when this kernel's layout lacks a field they need.
    pub net: Result<NetOffsets, String>,
    /// Optional fields that this kernel lacks, as "struct.field" (figures that need them are
    /// reported as unavailable).
    pub missing: Vec<String>,
}

/// A BTF type file, parsed.
pub struct KernelBtf {
    btf: Btf,
    pub path: String,
}

impl KernelBtf {
    pub fn open(path: &str) -> Result<Self> {
        if !Path::new(path).exists() {
            bail!(
                "kernel BTF not found at {path}; profiler needs a kernel built with \
                 CONFIG_DEBUG_INFO_BTF=y (or pass --btf FILE with the running kernel's BTF)"
            );
        }
        let btf = Btf::from_file(path).map_err(|e| {
            anyhow!(
                "cannot parse kernel BTF at {path}: {e}; pass --btf FILE with a valid vmlinux BTF"
            )
        })?;
        Ok(Self {
            btf,
            path: path.to_owned(),
        })
    }

    pub fn has_tracepoint(&self, tp: &str) -> bool {
        self.btf
            .resolve_ids_by_name(&format!("btf_trace_{tp}"))
            .map(|v| !v.is_empty())
            .unwrap_or(false)
    }

    /// The required tracepoints (of [`sources::programs`]) missing from this kernel, with the
    /// version they need.
    pub fn missing_tracepoints(&self) -> Vec<(&'static str, &'static str)> {
        sources::programs()
            .filter(|p| p.stage != sources::Stage::Interfaces && !self.has_tracepoint(p.name))
            .map(|p| (p.name, p.since))
            .collect()
    }

    /// What attaching needs of this kernel's tracepoints and iterators, checked before anything
    /// is loaded (by `attach` and by `check`): Ok(true) when block requests must be tied to
    /// their exec at block_getrq (no block_io_start), or why the profiler cannot attach.
    pub fn preflight(&self, release: &str) -> Result<bool> {
        if let Some((tp, since)) = self.missing_tracepoints().first() {
            bail!(
                "kernel {release} lacks the tracepoint {tp} (Linux {since} or later has it); \
                 profiler cannot attach here"
            );
        }
        let block_start = sources::block::START.name;
        let fallback = sources::block::START_FALLBACK;
        let block_getrq_fallback = !self.has_tracepoint(block_start);
        if block_getrq_fallback && !self.has_tracepoint(fallback) {
            bail!(
                "kernel {release} lacks the tracepoints {block_start} and {fallback}: profiler \
                 cannot attach here"
            );
        }
        if !self.has_func("bpf_iter_task") {
            bail!(
                "kernel {release} lacks BPF task iterators (Linux {} or later has them)",
                sources::ITERATORS_SINCE
            );
        }
        Ok(block_getrq_fallback)
    }

    pub fn has_func(&self, name: &str) -> bool {
        self.btf
            .resolve_types_by_name(name)
            .map(|v| v.iter().any(|t| matches!(t, Type::Func(_))))
            .unwrap_or(false)
    }

    fn struct_by_name(&self, name: &str) -> Option<btf_rs::Struct> {
        let types = self.btf.resolve_types_by_name(name).ok()?;
        // Prefer the definition with members over empty forward-like duplicates.
        types
            .into_iter()
            .filter_map(|t| match t {
                Type::Struct(s) => Some(s),
                _ => None,
            })
            .max_by_key(|s| s.members.len())
    }

    /// Strip typedefs and qualifiers.
    fn resolve(&self, mut t: Type) -> Option<Type> {
        for _ in 0..32 {
            t = match t {
                Type::Typedef(ref x) => self.btf.resolve_chained_type(x).ok()?,
                Type::Volatile(ref x) | Type::Const(ref x) | Type::Restrict(ref x) => {
                    self.btf.resolve_chained_type(x).ok()?
                }
                Type::TypeTag(ref x) => self.btf.resolve_chained_type(x).ok()?,
                other => return Some(other),
            };
        }
        None
    }

    fn size_of(&self, t: &Type) -> Option<usize> {
        match self.resolve(t.clone())? {
            Type::Int(i) => Some(i.size()),
            Type::Ptr(_) => Some(8),
            Type::Struct(s) | Type::Union(s) => Some(s.size()),
            Type::Enum(e) => Some(e.size()),
            Type::Enum64(e) => Some(e.size()),
            Type::Array(a) => {
                let elem = self.btf.resolve_chained_type(&a).ok()?;
                Some(self.size_of(&elem)? * a.len())
            }
            _ => None,
        }
    }

    /// Find member `name` in a struct or union, looking inside anonymous members. Returns its
    /// offset in bits, its bitfield width (0 for a plain member) and its type.
    fn member_bits(&self, s: &btf_rs::Struct, name: &str) -> Option<(u32, u32, Type)> {
        for m in &s.members {
            let mname = self.btf.resolve_name(m).unwrap_or_default();
            let bits = m.bit_offset();
            if mname == name {
                let width = m.bitfield_size().unwrap_or(0);
                return Some((bits, width, self.btf.resolve_chained_type(m).ok()?));
            }
            if mname.is_empty()
                && let Some(Type::Struct(inner) | Type::Union(inner)) = self
                    .btf
                    .resolve_chained_type(m)
                    .ok()
                    .and_then(|t| self.resolve(t))
                && let Some((off, w, t)) = self.member_bits(&inner, name)
            {
                return Some((bits + off, w, t));
            }
        }
        None
    }

    /// A plain (byte-aligned, non-bitfield) member: its byte offset and type.
    fn member(&self, s: &btf_rs::Struct, name: &str) -> Option<(u32, Type)> {
        match self.member_bits(s, name)? {
            (bits, 0, t) if bits % 8 == 0 => Some((bits / 8, t)),
            _ => None,
        }
    }

    /// A one-bit bitfield of a struct: the byte that holds it and the bit's mask in that byte
    /// (little-endian bit numbering, as BTF gives it on x86 and arm64).
    pub fn flag_bit(&self, root: &str, name: &str) -> Option<(u32, u32)> {
        let s = self.struct_by_name(root)?;
        match self.member_bits(&s, name)? {
            (bits, 1, _) => Some((bits / 8, 1 << (bits % 8))),
            _ => None,
        }
    }

    /// Offset and size of `root.a.b.c` where each step is an embedded member (not a pointer).
    pub fn field(&self, root: &str, path: &str) -> Option<(u32, usize)> {
        let mut s = self.struct_by_name(root)?;
        let mut off = 0u32;
        let parts: Vec<&str> = path.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let (o, t) = self.member(&s, part)?;
            off += o;
            if i + 1 == parts.len() {
                return Some((off, self.size_of(&t)?));
            }
            s = match self.resolve(t)? {
                Type::Struct(x) | Type::Union(x) => x,
                _ => return None,
            };
        }
        None
    }

    /// Value of an enumerator, e.g. `__REQ_PREFLUSH` of `enum req_flag_bits` (`""`: of any
    /// anonymous enum).
    pub fn enum_value(&self, enum_name: &str, member: &str) -> Option<u64> {
        for t in self.btf.resolve_types_by_name(enum_name).ok()? {
            match t {
                Type::Enum(e) => {
                    for m in &e.members {
                        if self.btf.resolve_name(m).ok()? == member {
                            return Some(m.val() as u64);
                        }
                    }
                }
                Type::Enum64(e) => {
                    for m in &e.members {
                        if self.btf.resolve_name(m).ok()? == member {
                            return Some(m.val());
                        }
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// Resolve every offset the programs need.
    pub fn layout(&self) -> Result<KernelLayout> {
        let mut missing = Vec::new();
        let mut o = KernelOffsets::ABSENT;
        for f in KernelOffsets::FIELDS {
            if f.after
                .and_then(|dep| o.slot_mut(dep).map(|v| *v))
                .is_some_and(|v| v == ABSENT)
            {
                continue;
            }
            let found = match self.field(f.ty, f.path) {
                Some((off, sz)) if sz == f.size => Ok(off),
                Some((_, sz)) => Err(format!(
                    "kernel struct field {}.{} has size {sz}, expected {}: this kernel's layout is not supported",
                    f.ty, f.path, f.size
                )),
                None => Err(format!(
                    "kernel struct field {}.{} not found in BTF: this kernel is not supported",
                    f.ty, f.path
                )),
            };
            match (found, f.need) {
                (Ok(off), _) => {
                    if let Some(slot) = o.slot_mut(f.slot) {
                        *slot = off;
                    }
                }
                (Err(why), Need::Required) => bail!("{why}"),
                (Err(_), Need::Optional) => missing.push(format!("{}.{}", f.ty, f.path)),
                (Err(_), Need::Quiet) => {}
            }
        }
        // IO wait is timed only with all it needs (the bit, and the clocks of its two ends).
        let iowait_clocks = [o.task_cfs_rq, o.cfs_rq_rq, o.rq_clock, o.task_last_queued];
        match self.flag_bit("task_struct", "in_iowait") {
            Some((byte, mask)) if !iowait_clocks.contains(&ABSENT) => {
                o.task_in_iowait_byte = byte;
                o.task_in_iowait_mask = mask;
            }
            Some(_) => {}
            None => missing.push("task_struct.in_iowait".into()),
        }
        let req_preflush_bit = self
            .enum_value("req_flag_bits", "__REQ_PREFLUSH")
            .map(|v| v as u32)
            .unwrap_or_else(|| {
                missing.push("enum req_flag_bits.__REQ_PREFLUSH".into());
                u32::MAX
            });
        // An enumerator of an anonymous enum.
        let queue_stats_bit = self
            .enum_value("", "QUEUE_FLAG_STATS")
            .map_or(u32::MAX, |v| v as u32);
        let (finals, psi_states, memcg_events) = self.final_offsets(&mut missing);
        Ok(KernelLayout {
            offsets: o,
            finals,
            psi_states,
            memcg_events,
            req_preflush_bit,
            queue_stats_bit,
            net: self.net_offsets(),
            missing,
        })
    }
}

impl KernelBtf {
    /// All enumerators of an enum, by name.
    pub fn enum_values(&self, enum_name: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for t in self
            .btf
            .resolve_types_by_name(enum_name)
            .unwrap_or_default()
        {
            match t {
                Type::Enum(e) => {
                    for m in &e.members {
                        out.push((self.btf.resolve_name(m).unwrap_or_default(), m.val() as u64));
                    }
                }
                Type::Enum64(e) => {
                    for m in &e.members {
                        out.push((self.btf.resolve_name(m).unwrap_or_default(), m.val()));
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Offset of a per-cpu variable in the per-cpu section (BTF DATASEC ".data..percpu").
    pub fn percpu_var(&self, name: &str) -> Option<u64> {
        let var_ids: Vec<u32> = self.btf.resolve_ids_by_name(name).ok()?;
        let secs = self.btf.resolve_types_by_name(".data..percpu").ok()?;
        for t in secs {
            if let Type::Datasec(d) = t {
                for v in &d.variables {
                    if let Some(id) = btf_rs::BtfType::get_type_id(v)
                        && var_ids.contains(&id)
                    {
                        return Some(v.offset() as u64);
                    }
                }
            }
        }
        None
    }

    /// Is the member a pointer?
    pub(crate) fn is_pointer(&self, root: &str, path: &str) -> bool {
        let Some(mut s) = self.struct_by_name(root) else {
            return false;
        };
        let parts: Vec<&str> = path.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let Some((_, t)) = self.member(&s, part) else {
                return false;
            };
            let t = match self.resolve(t) {
                Some(t) => t,
                None => return false,
            };
            if i + 1 == parts.len() {
                return matches!(t, Type::Ptr(_));
            }
            s = match t {
                Type::Struct(x) | Type::Union(x) => x,
                _ => return false,
            };
        }
        false
    }
}

/// Load the BTF that aya uses to find attach points (same file as [`KernelBtf`]).
pub fn aya_btf(path: &str) -> Result<aya::Btf> {
    aya::Btf::parse_file(path, aya::Endianness::default())
        .with_context(|| format!("cannot parse kernel BTF at {path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs against this machine's kernel BTF (every supported host has one).
    #[test]
    fn resolves_running_kernel_layout() {
        let btf = KernelBtf::open(DEFAULT_BTF).unwrap();
        let l = btf.layout().unwrap();
        assert_ne!(l.offsets.task_pid, ABSENT);
        assert_ne!(l.offsets.task_sum_exec_runtime, ABSENT);
        assert_eq!(l.offsets.task_tgid, l.offsets.task_pid + 4);
        assert!(l.req_preflush_bit < 32);
        assert!(l.queue_stats_bit < 64);
        // kernfs_node.id is a u64 and cgroup ids are inode numbers.
        assert_ne!(l.offsets.kernfs_node_id, ABSENT);
        assert!(btf.has_func("bpf_iter_task"));
        // The removal figures resolve on this kernel.
        assert_ne!(l.finals.cgroup_psi, ABSENT);
        assert_ne!(l.finals.task_se_cfs_rq, ABSENT);
        assert_ne!(l.finals.runqueues_secoff, u64::MAX);
        assert_ne!(l.finals.cgroup_rstat_cpu, ABSENT);
        assert!(l.psi_states.iter().any(|(n, _)| n == "PSI_IO_SOME"));
        assert_ne!(l.offsets.task_in_iowait_byte, ABSENT);
        assert_ne!(l.offsets.rq_clock, ABSENT);
        assert_ne!(l.offsets.task_last_queued, ABSENT);
        assert_eq!(l.offsets.cfs_rq_rq, l.finals.cfs_rq_rq);
        assert_eq!(l.offsets.task_in_iowait_mask.count_ones(), 1);
    }

    #[test]
    fn missing_btf_file_is_a_clear_error() {
        let err = KernelBtf::open("/nonexistent/vmlinux")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("CONFIG_DEBUG_INFO_BTF"), "{err}");
    }
}
