//! Real container runtimes for the tests, each started by the test itself with its state
//! under target/ and /run, and stopped and removed afterwards (also when the test fails):
//! dockerd (with its BuildKit and its own containerd), podman, containerd with ctr, runc.
//! No registry: images are imported from a root filesystem the tests make (Debian's static
//! busybox and the tests' own statically linked workloads). No network: dockerd runs with
//! `--iptables=false --ip-masq=false --bridge=none`, and every container runs with networking
//! off (its own namespace, loopback only).

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::{Value, require_root, secs, v2_mount};

/// The repository's target directory.
fn target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target")
}

/// A statically linked test workload (busy, netpeer), built by `cargo xtask test` into
/// PROFILER_STATIC_BINS: containers have no C library.
pub fn static_bin(name: &str) -> PathBuf {
    let dir = std::env::var("PROFILER_STATIC_BINS").unwrap_or_else(|_| {
        panic!(
            "PROFILER_STATIC_BINS is not set: run the runtime tests through `cargo xtask test`, \
             which builds the static workloads"
        )
    });
    let p = Path::new(&dir).join(name);
    assert!(p.is_file(), "{} missing", p.display());
    p
}

/// Prints the CPU time its container's cgroup has used so far, in ns, as `CPU_NS <n>`:
/// the kernel's own cgroup accounting, read from inside (cgroup v1's cpuacct where the
/// host is hybrid, else the cgroup namespace's own cpu.stat).
const CPUSTAT: &str = "#!/bin/sh
if [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then
  echo CPU_NS $(cat /sys/fs/cgroup/cpuacct/cpuacct.usage)
else
  echo CPU_NS $(awk '/^usage_usec/ {print $2 * 1000}' /sys/fs/cgroup/cpu.stat)
fi
";

/// A root filesystem tarball: busybox with its applets, `busy`, `netpeer` and `cpustat` in
/// /bin. Made once per test process.
pub fn base_image_tar() -> PathBuf {
    static TAR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TAR.get_or_init(make_base_image_tar).clone()
}

fn make_base_image_tar() -> PathBuf {
    let dir = target().join("runtimes/base");
    let _ = fs::remove_dir_all(&dir);
    let tar = dir.join("base.tar");
    let root = dir.join("rootfs");
    let bin = root.join("bin");
    fs::create_dir_all(&bin).unwrap();
    for d in ["etc", "tmp", "proc", "sys", "dev"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n").unwrap();
    fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.is_file(),
        "/bin/busybox missing: install busybox-static (cargo xtask test does)"
    );
    fs::copy(busybox, bin.join("busybox")).unwrap();
    let list = crate::sh(&["/bin/busybox", "--list"]);
    for applet in list.lines().map(str::trim).filter(|a| !a.is_empty()) {
        let _ = std::os::unix::fs::symlink("busybox", bin.join(applet));
    }
    for b in ["busy", "netpeer"] {
        fs::copy(static_bin(b), bin.join(b)).unwrap();
    }
    fs::write(bin.join("cpustat"), CPUSTAT).unwrap();
    fs::set_permissions(bin.join("cpustat"), fs::Permissions::from_mode(0o755)).unwrap();
    crate::sh(&[
        "tar",
        "-C",
        root.to_str().unwrap(),
        "-cf",
        tar.to_str().unwrap(),
        ".",
    ]);
    tar
}

/// The `CPU_NS <n>` values a workload printed, in order.
pub fn cpu_ns_lines(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.split("CPU_NS ").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .collect()
}

/// Cgroups a runtime makes for its containers (its cgroup parents, in v2 and in every v1
/// hierarchy): those that did not exist before the test are removed after it.
pub struct RuntimeCgroups {
    made: Vec<PathBuf>,
}

fn hierarchies() -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            let mount = pre.split_whitespace().nth(4)?;
            (fstype == "cgroup" || fstype == "cgroup2").then(|| PathBuf::from(mount))
        })
        .collect()
}

impl RuntimeCgroups {
    /// Note which of `relative` (e.g. "docker", "docker/buildkit") are missing now.
    pub fn watch(relative: &[&str]) -> Self {
        let mut made = Vec::new();
        for h in hierarchies() {
            for r in relative {
                let p = h.join(r);
                if !p.exists() {
                    made.push(p);
                }
            }
        }
        // Deepest first.
        made.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        Self { made }
    }
}

impl Drop for RuntimeCgroups {
    fn drop(&mut self) {
        for p in &self.made {
            if p.exists() {
                crate::remove_tree(p);
            }
        }
    }
}

/// Unmount everything mounted below `dir` (deepest first), then remove it.
fn unmount_and_remove(dir: &Path) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(PathBuf::from))
        .filter(|m| m.starts_with(dir))
        .collect();
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for m in mounts {
        let _ = Command::new("umount").arg("-l").arg(&m).status();
    }
    let _ = fs::remove_dir_all(dir);
}

/// A directory of the test's, removed on drop (also when the test fails).
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("profiler-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Self(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        unmount_and_remove(&self.0);
    }
}

/// Send SIGTERM to a daemon the test started, wait for it, SIGKILL after `patience`.
fn stop_daemon(child: &mut Child, patience: Duration) {
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Panics with the command's output unless it succeeded; returns stdout and stderr.
fn checked(cmd: &mut Command) -> String {
    let out: Output = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed: {text}");
    text
}

/// Wait until `socket` accepts connections, or panic with the daemon's log.
fn wait_for_socket(socket: &Path, child: &mut Child, log: &Path, what: &str) {
    let deadline = Instant::now() + secs(60);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "{what} exited ({st}): {}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not start: {}",
            fs::read_to_string(log).unwrap_or_default()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// `--no-pivot` where the tests run on an initramfs root (the VMs of `cargo xtask vmtest`),
/// on which pivot_root(2) cannot work.
pub fn no_pivot() -> Option<&'static str> {
    std::env::var_os("PROFILER_TEST_NO_PIVOT").map(|_| "--no-pivot")
}

/// Debian's docker client (its BuildKit session is built in; another docker CLI on PATH may
/// want a buildx plugin).
pub const DOCKER: &str = "/usr/bin/docker";

/// A dockerd of the test's own, with its own data root, exec root and socket.
pub struct Dockerd {
    child: Child,
    pub socket: PathBuf,
    data: PathBuf,
    exec: PathBuf,
    _cgroups: RuntimeCgroups,
}

impl Dockerd {
    pub fn start() -> Self {
        require_root();
        let cgroups = RuntimeCgroups::watch(&["docker/buildkit", "docker"]);
        let id = std::process::id();
        let data = target().join(format!("runtimes/docker-{id}"));
        // Short: containerd's socket below it must fit a unix socket path.
        let exec = PathBuf::from(format!("/run/pt-docker-{id}"));
        fs::create_dir_all(&data).unwrap();
        fs::create_dir_all(&exec).unwrap();
        let socket = exec.join("docker.sock");
        let log = data.join("dockerd.log");
        let mut child = Command::new("dockerd")
            .args([
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--userland-proxy=false",
                "--log-level=warn",
            ])
            .arg("--data-root")
            .arg(data.join("root"))
            .arg("--exec-root")
            .arg(&exec)
            .arg("--pidfile")
            .arg(exec.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}", socket.display()))
            // No registry is used; should anything try one, it fails here, on loopback.
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("NO_PROXY", "")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log).unwrap())
            .stderr(fs::File::create(data.join("dockerd.err")).unwrap())
            .spawn()
            .expect("start dockerd (install docker.io: cargo xtask test does)");
        wait_for_socket(&socket, &mut child, &data.join("dockerd.err"), "dockerd");
        let d = Self {
            child,
            socket,
            data,
            exec,
            _cgroups: cgroups,
        };
        // The API answers once the daemon is initialised.
        let deadline = Instant::now() + secs(60);
        while !d.docker(&["info"]).status.success() {
            assert!(Instant::now() < deadline, "dockerd does not answer");
            thread::sleep(Duration::from_millis(200));
        }
        d
    }

    pub fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Run Debian's docker client against this daemon.
    pub fn docker(&self, args: &[&str]) -> Output {
        Command::new(DOCKER)
            .args(args)
            .env("DOCKER_HOST", self.host())
            .env("DOCKER_BUILDKIT", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run docker (install docker.io: cargo xtask test does)")
    }

    /// `docker build` of `FROM pbase:1` and one `RUN step`, without network or cache: the
    /// step's command in the record is `/bin/sh -c STEP`, which this returns.
    pub fn build_step(&self, step: &str) -> String {
        let ctx = Scratch::new("build-step");
        fs::write(
            ctx.0.join("Dockerfile"),
            format!("FROM pbase:1\nRUN {step}\n"),
        )
        .unwrap();
        self.docker_ok(&[
            "build",
            "--network",
            "none",
            "--no-cache",
            ctx.0.to_str().unwrap(),
        ]);
        format!("/bin/sh -c {step}")
    }

    /// Stop the daemon now (as a crash would leave things: its containers' state stays).
    pub fn kill_daemon(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Like [`Self::docker`], panicking unless it succeeds; returns its output.
    pub fn docker_ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "docker {args:?} failed: {text}");
        text
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if let Ok(ids) = String::from_utf8(self.docker(&["ps", "-aq"]).stdout) {
            for id in ids.split_whitespace() {
                let _ = self.docker(&["rm", "-f", id]);
            }
        }
        stop_daemon(&mut self.child, Duration::from_secs(20));
        unmount_and_remove(&self.exec);
        unmount_and_remove(&self.data);
    }
}

/// podman with the test's own storage and run root (cgroupfs manager: there is no systemd).
pub struct Podman {
    pub root: PathBuf,
    run: PathBuf,
    /// The OCI runtime podman runs containers with (runc, unless the test says crun).
    pub oci: &'static str,
    _cgroups: RuntimeCgroups,
}

impl Podman {
    #[allow(clippy::new_without_default)] // starts a runtime: not a default value
    pub fn new() -> Self {
        require_root();
        let cgroups = RuntimeCgroups::watch(&["libpod_parent"]);
        let id = std::process::id();
        let root = target().join(format!("runtimes/podman-{id}"));
        let run = PathBuf::from(format!("/run/pt-podman-{id}"));
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&run).unwrap();
        Self {
            root,
            run,
            oci: "runc",
            _cgroups: cgroups,
        }
    }

    /// buildah on the same storage (it sees podman's images), cgroupfs manager.
    pub fn buildah(&self) -> Command {
        // buildah makes each step's bundle in $TMPDIR.
        let _ = fs::create_dir_all(self.run.join("tmp"));
        let mut c = Command::new("buildah");
        c.arg("--root")
            .arg(&self.root)
            .arg("--runroot")
            .arg(&self.run)
            .args(["--storage-driver", "overlay"])
            .env("TMPDIR", self.run.join("tmp"));
        c
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(&self.root)
            .arg("--runroot")
            .arg(&self.run)
            .arg("--tmpdir")
            .arg(self.run.join("tmp"))
            .args([
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
                "--storage-driver",
                "overlay",
                "--runtime",
                self.oci,
            ]);
        c
    }

    pub fn ok(&self, args: &[&str]) -> String {
        checked(self.cmd().args(args))
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.cmd().args(["rm", "-a", "-f"]).output();
        let _ = self.buildah().args(["rm", "--all"]).output();
        unmount_and_remove(&self.run);
        unmount_and_remove(&self.root);
    }
}

/// A containerd of the test's own (no CRI plugin), driven with ctr in a namespace of the
/// test's own; its containers' cgroups are /<namespace>/<id>.
pub struct Containerd {
    child: Child,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub namespace: String,
    root: PathBuf,
    _cgroups: RuntimeCgroups,
}

impl Containerd {
    pub fn start() -> Self {
        require_root();
        let id = std::process::id();
        let namespace = format!("profiler-test-{id}");
        let cgroups = RuntimeCgroups::watch(&[namespace.as_str()]);
        let root = target().join(format!("runtimes/containerd-{id}"));
        let state = PathBuf::from(format!("/run/pt-containerd-{id}"));
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&state).unwrap();
        let socket = state.join("containerd.sock");
        let config = root.join("config.toml");
        fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{}\"\nstate = \"{}\"\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{}\"\n",
                root.join("root").display(),
                state.display(),
                socket.display()
            ),
        )
        .unwrap();
        let log = root.join("containerd.log");
        let mut child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("start containerd (it comes with docker.io: cargo xtask test installs it)");
        wait_for_socket(&socket, &mut child, &log, "containerd");
        Self {
            child,
            socket,
            state,
            namespace,
            root,
            _cgroups: cgroups,
        }
    }

    pub fn ctr(&self, args: &[&str]) -> String {
        checked(
            Command::new("ctr")
                .arg("--address")
                .arg(&self.socket)
                .args(["--namespace", &self.namespace])
                .args(args),
        )
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let ctr = |args: &[&str]| {
            Command::new("ctr")
                .arg("--address")
                .arg(&self.socket)
                .args(["--namespace", &self.namespace])
                .args(args)
                .output()
        };
        if let Ok(out) = ctr(&["containers", "ls", "-q"]) {
            for c in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = ctr(&["task", "kill", "-s", "KILL", c]);
                let _ = ctr(&["task", "rm", "-f", c]);
                let _ = ctr(&["containers", "rm", c]);
            }
        }
        stop_daemon(&mut self.child, Duration::from_secs(20));
        unmount_and_remove(&self.state);
        unmount_and_remove(&self.root);
    }
}

/// An OCI bundle for `runtime` (runc or crun): the base image's root filesystem and a spec
/// (runc's default) whose process is `args` and whose cgroup is `cgroup` (relative to the v2
/// root), with its own network namespace (loopback only). Its container (named with
/// [`Self::run`]) is deleted on drop.
pub struct OciBundle {
    pub dir: PathBuf,
    runtime: &'static str,
    id: Option<String>,
}

impl OciBundle {
    pub fn new(runtime: &'static str, name: &str, cgroup: &Path, args: &[&str]) -> Self {
        let dir = target().join(format!("runtimes/{runtime}-{name}-{}", std::process::id()));
        let rootfs = dir.join("rootfs");
        fs::create_dir_all(&rootfs).unwrap();
        crate::sh(&[
            "tar",
            "-C",
            rootfs.to_str().unwrap(),
            "-xf",
            base_image_tar().to_str().unwrap(),
        ]);
        checked(Command::new("runc").args(["spec", "--bundle", dir.to_str().unwrap()]));
        let spec_path = dir.join("config.json");
        let mut spec: serde_json::Value =
            serde_json::from_slice(&fs::read(&spec_path).unwrap()).unwrap();
        spec["process"]["terminal"] = false.into();
        spec["process"]["args"] = args.iter().map(|a| a.to_string()).collect();
        let rel = cgroup.strip_prefix(v2_mount()).unwrap_or(cgroup);
        spec["linux"]["cgroupsPath"] = format!("/{}", rel.display()).into();
        // runc spec's defaults: own pid, network, ipc, uts and mount namespaces.
        fs::write(&spec_path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
        Self {
            dir,
            runtime,
            id: None,
        }
    }

    /// `<runtime> run` the bundle as container `id`, to its end; returns its output.
    pub fn run(&mut self, id: &str) -> String {
        match self.try_run(id) {
            Ok(out) => out,
            Err(e) => panic!("{} run {id} failed: {e}", self.runtime),
        }
    }

    /// As [`Self::run`], the runtime's output as the error when it fails.
    pub fn try_run(&mut self, id: &str) -> Result<String, String> {
        self.id = Some(id.to_owned());
        let out = Command::new(self.runtime)
            .args(["run", "--bundle", self.dir.to_str().unwrap()])
            .args(no_pivot())
            .arg(id)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", self.runtime));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }
}

impl Drop for OciBundle {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            let _ = Command::new(self.runtime)
                .args(["delete", "-f", id])
                .output();
        }
        unmount_and_remove(&self.dir);
    }
}

/// The record's container field `k` (None when absent).
pub fn container<'a>(r: &'a Value, k: &str) -> Option<&'a str> {
    r["container"][k].as_str()
}

/// Removes a cgroup directory on drop (when a test fails before it does).
pub struct Removed(pub std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        if self.0.exists() {
            crate::remove_tree(&self.0);
        }
    }
}

/// On-CPU of an exec against the kernel's cgroup accounting of it. From below, the CPU time
/// its cgroup showed at the workload's end (`truth_ns`, read in the step: the tail and exit
/// come after), less 2% and 2 ms: the runtime's init process joins the cgroup already running
/// and is counted from the move, while the cgroup may be charged the slice it ran just before
/// (docs/figures.md, "Which exec is charged"); under emulation that slice is longer in the
/// guest's clock (a vCPU waits its turn while its task's runtime accrues): the 2 ms stretch
/// with the tests' time scale (in the 6.1 guest, 26 ms once). From above, the cgroup's whole
/// usage at its removal (cpu.stat, read by the kernel program then), plus 2% and 200 us of
/// rounding: relative, so that a step of 2 ms cannot be counted twice.
pub fn check_cpu(what: &str, rec: &Value, truth_ns: u64) {
    use crate::{report, stretched_ns, u};
    let oncpu = u(&rec["cpu"]["on_cpu_ns"]) as f64;
    let truth = truth_ns as f64;
    report(&format!("{what} on-CPU vs its cgroup"), oncpu, truth);
    let slice = stretched_ns(2_000_000) as f64;
    let whole = u(&rec["cgroup"]["cpu_usage_usec"]["value"]) as f64 * 1000.0;
    assert_eq!(
        rec["cgroup"]["cpu_usage_usec"]["when"], "final",
        "{what}: {rec}"
    );
    assert!(
        oncpu >= truth * 0.98 - slice && oncpu <= whole * 1.02 + 200e3,
        "{what}: on-CPU {oncpu} ns vs its cgroup's {truth_ns} ns at the workload's end and \
         {whole} ns at its removal: {rec}"
    );
}

/// Written bytes of a direct-IO workload: the size written, plus at most 1% (metadata).
pub fn check_written(what: &str, rec: &Value, n: u64) {
    use crate::{rel_err, report, u};
    let w = u(&rec["disk"]["write_bytes"]);
    report(&format!("{what} disk write bytes"), w as f64, n as f64);
    assert!(
        w >= n && rel_err(w as f64, n as f64) <= 0.01,
        "{what}: wrote {w} B for {n} B: {rec}"
    );
}
