# 100 files of 1,000 execs each, from one real record: 40 steps, figures varied.
import json, random, sys
rec = json.loads(open('/tmp/one-record.json').read())
out = sys.argv[1]
random.seed(7)
cid = 1
for f in range(100):
    t0 = 1_796_000_000_000_000_000 + f * 3_600_000_000_000
    with open(f"{out}/run-{f:03}.jsonl", "w") as w:
        for i in range(1000):
            r = dict(rec)
            r.pop("step", None)
            step = i % 40
            r["cgroup_id"] = cid; cid += 1
            r["host"] = f"host-{f % 5}"
            r["command"] = f"sh -c make -C dir{step} -j2 TMP=/tmp/tmp.{random.randrange(10**6):06}"
            r["exec"] = f"ci/{f}/{i}"
            wall = random.randrange(1_000_000, 2_000_000_000)
            r["wall_ns"] = wall
            r["start_unix_ns"] = t0 + i * 1_000_000
            r["end_unix_ns"] = t0 + i * 1_000_000 + wall
            cpu = dict(r["cpu"]); cpu["on_cpu_ns"] = random.randrange(wall); cpu["task_time_ns"] = wall
            r["cpu"] = cpu
            disk = dict(r["disk"]); disk["write_bytes"] = random.randrange(1 << 30); r["disk"] = disk
            w.write(json.dumps(r, separators=(",", ":")) + "\n")
