//! The profiler running `attach` in the background, its records and messages collected.

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    thread,
    time::{Duration, Instant},
};

use crate::{TestCgroup, Value, profiler_bin, require_root, secs};

/// The profiler running `attach` in the background with JSON output.
pub struct Attached {
    child: Child,
    records: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl Attached {
    /// Start `profiler attach --output json --cgroup <cg> <extra...>` and wait until it is
    /// attached.
    pub fn start(cg: &TestCgroup, extra: &[&str]) -> Self {
        let mut args = vec!["--cgroup".to_owned(), cg.arg()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_with(&args, &[])
    }

    /// Start `profiler attach --output json --top 0 <args...>` with extra environment
    /// variables, and wait until it is attached.
    pub fn start_with(args: &[String], env: &[(&str, &str)]) -> Self {
        require_root();
        let mut child = Command::new(profiler_bin())
            .args(["attach", "--output", "json", "--top", "0"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start profiler");
        let records = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let r = records.clone();
        let t1 = thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("bad JSON line {line:?}: {e}"));
                r.lock().unwrap().push(v);
            }
        });
        let e = stderr.clone();
        let t2 = thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if line.contains("profiler: attached to") {
                    let _ = ready_tx.send(());
                }
                eprintln!("[profiler] {line}");
                e.lock().unwrap().push(line);
            }
        });
        if ready_rx.recv_timeout(secs(60)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("profiler did not attach: {:?}", stderr.lock().unwrap());
        }
        Self {
            child,
            records,
            stderr,
            readers: vec![t1, t2],
        }
    }

    /// The profiler's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where `--prometheus 127.0.0.1:0` serves, as the profiler said when it bound the port
    /// (a port found free and released before the profiler binds it can be taken meanwhile).
    pub fn prometheus_addr(&self) -> String {
        let lines = self.stderr.lock().unwrap().clone();
        lines
            .iter()
            .find_map(|l| {
                l.split("serving Prometheus metrics at http://")
                    .nth(1)?
                    .strip_suffix("/metrics")
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("the profiler said no Prometheus address: {lines:?}"))
    }

    /// Records received so far.
    pub fn records(&self) -> Vec<Value> {
        self.records.lock().unwrap().clone()
    }

    /// Wait until a record for cgroup `id` with state "ended" arrives.
    pub fn wait_ended(&self, id: u64, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self
                .records()
                .into_iter()
                .find(|r| r["cgroup_id"].as_u64() == Some(id) && r["state"] == "ended")
            {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no final record for cgroup {id} within {timeout:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until an ended record for which `pred` holds arrives.
    pub fn wait_ended_where(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self
                .records()
                .into_iter()
                .find(|r| r["state"] == "ended" && pred(r))
            {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no final record of {what} within {timeout:?}; records: {:?}",
                self.records()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until `n` ended records have arrived.
    pub fn wait_ended_count(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let ended: Vec<Value> = self
                .records()
                .into_iter()
                .filter(|r| r["state"] == "ended")
                .collect();
            if ended.len() >= n || Instant::now() > deadline {
                return ended;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGINT, wait for exit; returns (exit code, all records, stderr lines).
    pub fn stop(self) -> (i32, Vec<Value>, Vec<String>) {
        self.stop_with(libc::SIGINT)
    }

    /// Send `signal`, wait for exit; returns (exit code, all records, stderr lines).
    pub fn stop_with(mut self, signal: i32) -> (i32, Vec<Value>, Vec<String>) {
        // SAFETY: signal the profiler this test started.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        // Its last export is bounded by the export timeout: a profiler that hangs on exit
        // fails the test instead of hanging it.
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the profiler did not exit within 60 s of signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for t in self.readers.drain(..) {
            t.join().unwrap();
        }
        let code = status.code().unwrap_or(-1);
        (code, self.records(), self.stderr.lock().unwrap().clone())
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if self.readers.is_empty() {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
