//! Each exec broken down by program: a build of the shape of a configure + make run, every
//! process under the program it ran, the parts summing to the exec's figures. Root and BPF
//! needed, and a C compiler and make (the host's; the VM guests have neither).

use std::{collections::HashMap, fs};

use profiler_tests::*;
use serde_json::Value;

/// Test: a configure-like script (50 one-millisecond processes) and a parallel make of six C
/// files, born in one exec: the programs' on-CPU, run-queue, IO-wait and bytes sum to the
/// exec's to the nanosecond and byte, their processes to the exec's, `true` ran 50 times, and
/// the compiler's cc1 and the assembler once per file.
#[test]
fn a_build_is_broken_down_by_program_and_sums_up() {
    let cg = TestCgroup::new("programs");
    let src = scratch_dir("programs");
    const FILES: usize = 6;
    let mut objects = Vec::new();
    for i in 0..FILES {
        fs::write(
            src.join(format!("f{i}.c")),
            format!("int f{i}(int x) {{ int s = 0; for (int j = 0; j < x; j++) s += j * {i}; return s; }}\n"),
        )
        .unwrap();
        objects.push(format!("f{i}.o"));
    }
    fs::write(
        src.join("Makefile"),
        format!(
            "all: {}\n%.o: %.c\n\tcc -O2 -c $< -o $@\n",
            objects.join(" ")
        ),
    )
    .unwrap();
    fs::write(
        src.join("configure"),
        "#!/bin/sh\ni=0\nwhile [ $i -lt 50 ]; do i=$((i+1)); /bin/true; done\n",
    )
    .unwrap();
    let p = Attached::start(&cg, &["--programs", "0", "--top", "0"]);
    let e = cg.child("build");
    let id = cgroup_id(&e);
    let script = format!("cd {} && sh ./configure && make -s -j2", src.display());
    run_born_in(&e, &["sh", "-c", &script]);
    rmdir(&e);
    let rec = p.wait_ended(id, secs(60));
    assert!(
        rec.get("other_programs").is_none(),
        "--programs 0 lists all: {rec}"
    );
    let programs = rec["programs"].as_array().unwrap();
    let by: HashMap<&str, &Value> = programs
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p))
        .collect();
    let sum = |k: &str| programs.iter().map(|p| u(&p[k])).sum::<u64>();
    for (k, whole) in [
        ("on_cpu_ns", u(&rec["cpu"]["on_cpu_ns"])),
        ("runq_delay_ns", u(&rec["cpu"]["runq_delay_ns"])),
        ("iowait_ns", u(&rec["cpu"]["iowait_ns"])),
        ("read_bytes", u(&rec["io"]["read_bytes"])),
        ("write_bytes", u(&rec["io"]["write_bytes"])),
        ("dirtied_bytes", u(&rec["io"]["dirtied_bytes"])),
    ] {
        assert_eq!(sum(k), whole, "programs' {k} vs the exec's: {rec}");
    }
    // Every process, the first sh too (born in the exec by clone3).
    assert_eq!(
        sum("processes"),
        u(&rec["tasks"]["processes_started"]),
        "{rec}"
    );
    assert_eq!(u(&by["true"]["processes"]), 50, "{rec}");
    assert_eq!(by["true"]["exits"]["exit 0"], 50, "{rec}");
    for program in ["cc1", "as"] {
        let p = by
            .get(program)
            .unwrap_or_else(|| panic!("no {program} among {:?}", by.keys()));
        assert_eq!(u(&p["processes"]), FILES as u64, "{program}: {rec}");
    }
    let top: Vec<String> = programs
        .iter()
        .take(5)
        .map(|p| format!("{} x{} {} ns", p["name"], p["processes"], p["on_cpu_ns"]))
        .collect();
    eprintln!("MEASURED build by program: {}", top.join(", "));
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
    let _ = fs::remove_dir_all(&src);
}
