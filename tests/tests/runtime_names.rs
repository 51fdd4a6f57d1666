//! Container runtimes, how their execs are named and what is said when they cannot be read:
//! Kubernetes pod identity from CRI annotations and labels, bad runtime flags, unreadable
//! metadata and a dead daemon, and `attach` alone watching every runtime found. Each test
//! starts its own daemon (state under target/ and /run), as in runtimes.rs.

use std::fs;

use profiler_tests::{runtimes::*, *};

/// Test 5: Kubernetes containers as containerd runs them for kubelet (there is no kubelet
/// here: ctr starts them as kubelet's runtime would): the pod is read from the annotations
/// containerd's CRI plugin writes into the spec, or from kubelet's labels (`ctr run --label`
/// keeps them in containerd's metadata and copies them into the spec), and reaches the record
/// and the exported series as k8s.pod.name, k8s.namespace.name, k8s.pod.uid and
/// k8s.container.name.
#[test]
fn kubernetes_pods_are_named_from_cri_annotations_and_labels() {
    let c = Containerd::start();
    let rootfs = Scratch::new("k8s-rootfs");
    let rootfs = &rootfs.0;
    sh(&[
        "tar",
        "-C",
        rootfs.to_str().unwrap(),
        "-xf",
        base_image_tar().to_str().unwrap(),
    ]);
    let rotel = backends::Rotel::start();
    let p = Attached::start_with(
        &[
            "--runtime".into(),
            "containerd".into(),
            "--runtime-endpoint".into(),
            c.socket.display().to_string(),
            "--runtime-root".into(),
            c.state.display().to_string(),
            "--otlp-endpoint".into(),
            rotel.grpc_endpoint(),
            "--otlp-protocol".into(),
            "grpc".into(),
            "--export-interval".into(),
            "1s".into(),
        ],
        &[("CONTAINERD_NAMESPACE", &c.namespace)],
    );
    let pid = std::process::id();
    for how in ["annotations", "labels"] {
        let id = format!("pt-k8s-{how}-{pid}");
        let (pod, ns, uid, name) = (
            format!("web-{how}-7d9f"),
            "shop",
            format!("0d3c11ef-{pid}"),
            "app",
        );
        let keys: Vec<(&str, &str)> = if how == "annotations" {
            // What containerd's CRI plugin puts in a container's spec.
            vec![
                ("io.kubernetes.cri.container-type", "container"),
                ("io.kubernetes.cri.container-name", name),
                ("io.kubernetes.cri.sandbox-id", "4f1c"),
                ("io.kubernetes.cri.sandbox-name", &pod),
                ("io.kubernetes.cri.sandbox-namespace", ns),
                ("io.kubernetes.cri.sandbox-uid", &uid),
            ]
        } else {
            // kubelet's labels on each container.
            vec![
                ("io.kubernetes.pod.name", &pod),
                ("io.kubernetes.pod.namespace", ns),
                ("io.kubernetes.pod.uid", &uid),
                ("io.kubernetes.container.name", name),
            ]
        };
        let flag = if how == "annotations" {
            "--annotation"
        } else {
            "--label"
        };
        let pairs: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut run = vec!["run", "--env", "PATH=/bin"];
        for kv in &pairs {
            run.extend([flag, kv.as_str()]);
        }
        run.push("--rootfs");
        run.extend(no_pivot());
        run.extend([rootfs.to_str().unwrap(), &id, "/bin/sh", "-c", "busy 50000"]);
        c.ctr(&run);
        if how == "labels" {
            // Where kubelet's runtime keeps them: the container's labels in containerd's store.
            let info: Value = serde_json::from_str(&c.ctr(&["containers", "info", &id])).unwrap();
            assert_eq!(
                info["Labels"]["io.kubernetes.pod.name"],
                pod.as_str(),
                "{info}"
            );
        }
        let rec = p.wait_ended_where(&id, secs(30), |r| container(r, "id") == Some(&id));
        assert_eq!(
            rec["container"]["k8s"],
            serde_json::json!({"pod_name": pod, "namespace": ns, "pod_uid": uid,
                               "container_name": name}),
            "{how}: {rec}"
        );
        assert_eq!(container(&rec, "name"), Some(name), "{how}: {rec}");
        let points = rotel.wait_for(secs(30), |pt| {
            pt.metric == "container.cpu.time" && pt.attr("container.id") == Some(id.as_str())
        });
        let pt = &points[0];
        for (k, want) in [
            ("k8s.pod.name", pod.as_str()),
            ("k8s.namespace.name", ns),
            ("k8s.pod.uid", uid.as_str()),
            ("k8s.container.name", name),
            ("container.name", name),
            ("container.runtime.name", "containerd"),
        ] {
            assert_eq!(pt.attr(k), Some(want), "{how}: {k}: {pt:?}");
        }
    }
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// Test 6: a runtime that is not there, or a bad runtime flag: one clear line, non-zero exit,
/// before anything is attached.
#[test]
fn runtime_bad_inputs_give_one_clear_line() {
    require_root();
    let missing = "/run/profiler-test-no-such.sock";
    let (code, err) = fails(&[
        "attach",
        "--runtime",
        "docker",
        "--runtime-endpoint",
        missing,
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("docker is not running") && err.contains(missing),
        "{err}"
    );
    let (code, err) = fails_env(
        &["attach", "--runtime", "buildkit"],
        &[("DOCKER_HOST", "tcp://127.0.0.1:2375")],
    );
    assert_eq!(code, 1);
    assert!(err.contains("not a unix socket"), "{err}");
    let (code, err) = fails(&[
        "attach",
        "--runtime",
        "containerd",
        "--runtime-endpoint",
        missing,
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("containerd is not running"), "{err}");
    // A storage root that is not a directory.
    let file = std::env::temp_dir().join(format!("profiler-test-notdir-{}", std::process::id()));
    fs::write(&file, "").unwrap();
    let (code, err) = fails(&[
        "attach",
        "--runtime",
        "podman",
        "--runtime-root",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot be read"), "{err}");
    // podman absent: not on PATH, no storage.
    let (code, err) = fails_env(
        &[
            "attach",
            "--runtime",
            "podman",
            "--runtime-root",
            "/nonexistent-profiler-test-storage",
        ],
        &[("PATH", "/nonexistent-profiler-test-bin")],
    );
    assert_eq!(code, 1);
    assert!(err.contains("podman is not installed"), "{err}");
    // containerd's socket answers, but its state directory cannot be read.
    let sock = format!("/run/profiler-test-containerd-{}.sock", std::process::id());
    let _ = fs::remove_file(&sock);
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let (code, err) = fails(&[
        "attach",
        "--runtime",
        "containerd",
        "--runtime-endpoint",
        &sock,
        "--runtime-root",
        file.to_str().unwrap(),
    ]);
    drop(listener);
    let _ = fs::remove_file(&sock);
    let _ = fs::remove_file(&file);
    assert_eq!(code, 1);
    assert!(
        err.contains("state directory") && err.contains("cannot be read"),
        "{err}"
    );
    let (code, err) = fails(&["attach", "--runtime", "rkt"]);
    assert_eq!(code, 2);
    assert!(err.contains("--runtime"), "{err}");
    let (code, err) = fails(&["attach", "--cgroup", "x", "--runtime-endpoint", "/x.sock"]);
    assert_eq!(code, 2);
    assert!(err.contains("--runtime"), "{err}");
}

/// Test: metadata that cannot be read is a note on the exec's record, never a lost exec: a
/// BuildKit step whose bundle is not there, and a container once dockerd died mid-run; the
/// profiler goes on, and exits 0.
#[test]
fn unreadable_metadata_and_a_dead_daemon_leave_notes() {
    let mut d = Dockerd::start();
    let p = Attached::start_with(
        &[
            "--runtime".into(),
            "docker".into(),
            "--runtime-endpoint".into(),
            d.socket.display().to_string(),
        ],
        &[],
    );
    let pid = std::process::id();
    let note_of = |dir: &std::path::Path| -> String {
        fs::create_dir(dir).unwrap();
        let _cleanup = Removed(dir.to_path_buf());
        let id = cgroup_id(dir);
        run_in(dir, &["sleep", "0.05"]);
        rmdir(dir);
        let rec = p.wait_ended(id, secs(30));
        assert!(rec.get("container").is_none(), "{rec}");
        assert!(u(&rec["cpu"]["on_cpu_ns"]) > 0, "{rec}");
        rec["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .find(|n| n.starts_with("container metadata unavailable"))
            .unwrap_or_else(|| panic!("a note says why: {rec}"))
            .to_owned()
    };
    // A step id of BuildKit's form (25 characters of base 36) with no bundle.
    let step = v2_mount()
        .join("docker/buildkit")
        .join(format!("pt{pid:0>23}"));
    let note = note_of(&step);
    assert!(note.contains("buildkit"), "{note}");
    d.kill_daemon();
    let ghost = v2_mount().join("docker").join(format!("{pid:0>64x}"));
    let note = note_of(&ghost);
    assert!(note.contains("docker"), "{note}");
    eprintln!("MEASURED with dockerd gone: {note}");
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// Test: `attach` with neither --cgroup nor --runtime watches every runtime found running
/// here and says which: a container of dockerd ($DOCKER_HOST) and a RUN step of its BuildKit
/// are execs, named by docker and by BuildKit; nothing else on the host is.
#[test]
fn attach_alone_watches_every_runtime_found() {
    // The parents of the other runtimes installed here, which the profiler makes when they
    // are missing: removed afterwards when it did.
    let _others = RuntimeCgroups::watch(&["libpod_parent", "default"]);
    let d = Dockerd::start();
    d.docker_ok(&["import", base_image_tar().to_str().unwrap(), "pbase:1"]);
    let p = Attached::start_with(&[], &[("DOCKER_HOST", &d.host())]);
    let name = format!("pt-alone-{}", std::process::id());
    d.docker_ok(&[
        "run",
        "--rm",
        "--name",
        &name,
        "--network",
        "none",
        "pbase:1",
        "true",
    ]);
    let rec = p.wait_ended_where(&name, secs(30), |r| container(r, "name") == Some(&name));
    assert!(
        rec["exec"].as_str().unwrap().starts_with("docker/"),
        "named from the v2 root: {rec}"
    );
    let step = "busy 1000 && echo alone";
    let cmd = d.build_step(step);
    let rec = p.wait_ended_where(step, secs(60), |r| container(r, "command") == Some(&cmd));
    assert_eq!(container(&rec, "runtime"), Some("buildkit"), "{rec}");
    assert!(
        rec["exec"]
            .as_str()
            .unwrap()
            .starts_with("docker/buildkit/"),
        "{rec}"
    );
    // Work outside the runtimes' parents is no exec.
    let other = TestCgroup::new("alone-other");
    let e = other.child("job");
    let id = cgroup_id(&e);
    run_in(&e, &["true"]);
    rmdir(&e);
    let (code, recs, err) = p.stop();
    assert_eq!(code, 0);
    assert!(
        !recs.iter().any(|r| u(&r["cgroup_id"]) == id),
        "a cgroup outside the runtimes is not watched"
    );
    assert!(
        err.iter()
            .any(|l| l.starts_with("profiler: runtime docker via dockerd")),
        "{err:?}"
    );
}
