//! Tests that need what the VMs of `cargo xtask vmtest` have and the project's own machines
//! lack: pure cgroup v2 with the io and memory controllers (cgroup writeback, io.stat), and a
//! scratch block device the test may open. On other hosts they are listed as ignored, with
//! the reason.

use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use profiler_tests::*;

const MIB: u64 = 1024 * 1024;
const NEEDS: &str =
    "needs pure cgroup v2 with the io and memory controllers: run by cargo xtask vmtest";

/// Fail with the reason when this host cannot run these tests.
fn require_pure_v2(cg: &TestCgroup) {
    let have = fs::read_to_string(cg.path.join("cgroup.subtree_control")).unwrap_or_default();
    assert!(
        have.contains("io") && have.contains("memory"),
        "{NEEDS} (subtree_control here: {have:?})"
    );
}

/// (rbytes, wbytes) of `dev` ("maj:min") in a cgroup's io.stat.
fn io_stat(dir: &Path, dev: &str) -> (u64, u64) {
    let s = fs::read_to_string(dir.join("io.stat")).unwrap();
    let Some(line) = s.lines().find(|l| l.starts_with(&format!("{dev} "))) else {
        return (0, 0);
    };
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{k}=")))
            .map(|v| v.parse().unwrap())
            .unwrap_or(0)
    };
    (field("rbytes"), field("wbytes"))
}

/// "maj:min" of the block device holding `path`.
fn device_of(path: &Path) -> String {
    let dev = fs::metadata(path).unwrap().dev();
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

/// eBPF disk bytes agree with the exec's io.stat for direct IO (within 1%).
#[test]
#[ignore = "needs pure cgroup v2 with the io and memory controllers: run by cargo xtask vmtest"]
fn direct_io_agrees_with_io_stat() {
    let cg = TestCgroup::new("iostat");
    require_pure_v2(&cg);
    let scratch = scratch_dir("iostat");
    let dev = device_of(&scratch);
    let p = Attached::start(&cg, &[]);
    let e = cg.child("job");
    let f = scratch.join("data");
    let script = format!(
        "dd if=/dev/zero of={f} bs=1M count=32 oflag=direct status=none && \
         dd if={f} of=/dev/null bs=1M iflag=direct status=none",
        f = f.display()
    );
    run_in(&e, &["sh", "-c", &script]);
    let (rbytes, wbytes) = io_stat(&e, &dev);
    let id = cgroup_id(&e);
    rmdir(&e);
    let rec = p.wait_ended(id, secs(60));
    let w = u(&rec["disk"]["write_bytes"]);
    let r = u(&rec["disk"]["read_bytes"]);
    assert!(
        wbytes >= 32 * MIB && rbytes >= 32 * MIB,
        "io.stat {rbytes}/{wbytes}"
    );
    assert!(report("direct write bytes vs io.stat", w as f64, wbytes as f64) <= 0.01);
    assert!(report("direct read bytes vs io.stat", r as f64, rbytes as f64) <= 0.01);
    p.stop();
    let _ = fs::remove_dir_all(&scratch);
}

/// A buffered write that writeback flushes (here: a `sync` from outside the exec, not the
/// exec's own fsync) is charged to the exec that dirtied the pages, and agrees with io.stat.
#[test]
#[ignore = "needs pure cgroup v2 with the io and memory controllers: run by cargo xtask vmtest"]
fn writeback_is_charged_to_the_exec_that_dirtied() {
    let cg = TestCgroup::new("writeback");
    require_pure_v2(&cg);
    let scratch = scratch_dir("writeback");
    let dev = device_of(&scratch);
    let p = Attached::start(&cg, &[]);
    let writer = cg.child("writer");
    let syncer = cg.child("syncer");
    let f = scratch.join("data");
    // Dirty 32 MiB, then stay alive while writeback runs.
    let script = format!(
        "dd if=/dev/zero of={} bs=1M count=32 status=none && sleep 600",
        f.display()
    );
    let mut w = spawn_in(&writer, &["sh", "-c", &script]);
    let deadline = Instant::now() + secs(60);
    while fs::metadata(&f).map(|m| m.len()).unwrap_or(0) < 32 * MIB {
        assert!(Instant::now() < deadline, "the writer did not write");
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(200));
    // Another exec forces writeback: the flusher writes the writer's pages.
    run_in(&syncer, &["sync"]);
    let (_, wbytes) = io_stat(&writer, &dev);
    w.kill().unwrap();
    w.wait().unwrap();
    let (wid, sid) = (cgroup_id(&writer), cgroup_id(&syncer));
    rmdir(&writer);
    rmdir(&syncer);
    let wrec = p.wait_ended(wid, secs(60));
    let srec = p.wait_ended(sid, secs(60));
    let written = u(&wrec["disk"]["write_bytes"]);
    assert!(wbytes >= 32 * MIB, "io.stat charges the writer: {wbytes}");
    assert!(report("writeback bytes vs io.stat", written as f64, wbytes as f64) <= 0.01);
    assert!(
        written >= 32 * MIB,
        "writeback charged to the writer: {written}"
    );
    let synced = u(&srec["disk"]["write_bytes"]);
    assert!(synced < MIB, "the syncer did not dirty the data: {synced}");
    p.stop();
    let _ = fs::remove_dir_all(&scratch);
}

/// The device node of the disk under `path`, and whether it has a volatile write cache.
fn disk_of(path: &Path) -> (String, bool) {
    let dev = fs::metadata(path).unwrap().dev();
    let sys = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let uevent = fs::read_to_string(format!("{sys}/uevent")).unwrap();
    let name = uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .unwrap()
        .to_owned();
    // A partition's queue is its disk's.
    for q in [
        format!("{sys}/queue/write_cache"),
        format!("{sys}/../queue/write_cache"),
    ] {
        if let Ok(v) = fs::read_to_string(&q) {
            return (format!("/dev/{name}"), v.trim() == "write back");
        }
    }
    panic!("no write_cache for the disk under {}", path.display());
}

/// A cache flush is counted for the exec that asked for it. fsync of the disk's device node
/// flushes its cache from the exec's own context (a file's fsync may leave that to the
/// journal thread), when the disk says it has a volatile cache.
#[test]
#[ignore = "needs a scratch block device the test may open: run by cargo xtask vmtest"]
fn cache_flush_is_counted() {
    let cg = TestCgroup::new("flush");
    let scratch = scratch_dir("flush");
    let (node, cached) = disk_of(&scratch);
    let p = Attached::start(&cg, &[]);
    let e = cg.child("job");
    run_in(&e, &["sync", &node]);
    let id = cgroup_id(&e);
    rmdir(&e);
    let rec = p.wait_ended(id, secs(60));
    let flushes = u(&rec["disk"]["flush_requests"]);
    if cached {
        assert!(flushes >= 1, "fsync of {node} sends a cache flush: {rec}");
    } else {
        assert_eq!(flushes, 0, "no cache, no flush requests: {rec}");
    }
    eprintln!("MEASURED cache flushes of `sync {node}` (write cache: {cached}): {flushes}");
    p.stop();
    let _ = fs::remove_dir_all(&scratch);
}

/// The io.stat reader above copes with the format of the kernel's documentation.
#[test]
fn io_stat_lines_parse() {
    let dir = std::env::temp_dir().join(format!("profiler-test-iostat-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("io.stat"),
        "8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n\
         8:0 rbytes=90430464 wbytes=299008000 rios=8950 wios=1252 dbytes=50331648 dios=3021\n",
    )
    .unwrap();
    assert_eq!(io_stat(&dir, "8:0"), (90430464, 299008000));
    assert_eq!(io_stat(&dir, "8:1"), (0, 0));
    fs::remove_dir_all(&dir).unwrap();
}

/// A pure v2 cgroup with the cpu, io, memory and pids controllers offers every file the
/// profiler reads; their contents are printed (the parsers' unit tests hold copies).
#[test]
#[ignore = "needs pure cgroup v2 with the io and memory controllers: run by cargo xtask vmtest"]
fn pure_v2_cgroup_files_are_there() {
    let cg = TestCgroup::new("files");
    require_pure_v2(&cg);
    let scratch = scratch_dir("files");
    let e = cg.child("job");
    let f = scratch.join("data");
    let script = format!(
        "dd if=/dev/zero of={f} bs=1M count=8 oflag=direct status=none; sync; cat {f} > /dev/null",
        f = f.display()
    );
    run_in(&e, &["sh", "-c", &script]);
    for name in [
        "cpu.pressure",
        "io.pressure",
        "memory.pressure",
        "cpu.stat",
        "io.stat",
        "memory.current",
        "memory.peak",
        "memory.stat",
        "memory.events",
        "pids.current",
        "pids.peak",
        "cgroup.events",
    ] {
        let text = fs::read_to_string(e.join(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(!text.trim().is_empty(), "{name} is empty");
        eprintln!("CAPTURED {name}:\n{text}---");
    }
    if let Ok(irq) = fs::read_to_string(e.join("irq.pressure")) {
        eprintln!("CAPTURED irq.pressure:\n{irq}---");
    }
    rmdir(&e);
    let _ = fs::remove_dir_all(&scratch);
}
