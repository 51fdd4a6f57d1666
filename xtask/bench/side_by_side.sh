#!/usr/bin/env bash
# One run, side by side: the standard workload (v2 only, in cgroup sbs/peerwl) alone, under
# the bpftrace floor (baseline.bt), and under `profiler attach`. Each phase runs the same
# workload for SECONDS and records every BPF program's run count and run time (bpf_cost.sh),
# the peer's userspace CPU and RSS (measure.sh) in OUTDIR/<phase>/.
# Usage: side_by_side.sh PROFILER_BIN OUTDIR [SECONDS]
# (From the project's shared bench harness; the bcc phase is left out: Debian names its tools
# differently and no target refers to it.)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$1; OUT=$2; D=${3:-20}
V2=$(awk '$9=="cgroup2"{print $5; exit}' /proc/self/mountinfo)
mkdir -p "$OUT" "$V2/sbs"
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing   # bpftrace classic tracepoints
export WL_ARGS="-N -n sbs/peerwl"   # measure.sh passes these to workload.sh
run_peer() { # name, then the command that starts the peer in background
  local name=$1; shift
  "$@" > "$OUT/$name.peer.out" 2> "$OUT/$name.peer.err" & local pid=$!
  sleep 4
  "$HERE/measure.sh" -o "$OUT/$name" -p $pid -d $D > "$OUT/$name.summary" 2>&1
  sleep 3; kill -INT $pid 2>/dev/null
  for i in $(seq 1 20); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
  sleep 2
}
"$HERE/measure.sh" -o "$OUT/none" -d $D > "$OUT/none.summary" 2>&1 ; sleep 2
run_peer bpftrace bpftrace "$HERE/baseline.bt"
run_peer profiler "$BIN" attach --cgroup "$V2/sbs" --output json
rmdir "$V2/sbs" 2>/dev/null
for n in none bpftrace profiler; do
  echo "== $n"; grep -E 'bpf_cpu_pct|bpf_total_run_cnt|bpf_mean_ns_all|peer_cpu_pct|peer_rss_kb_max' "$OUT/$n/usage.txt"
done
