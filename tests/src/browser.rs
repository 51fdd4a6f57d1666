//! Headless Chromium (Debian's package) driven over the DevTools protocol, for tests that
//! look at a page in a real browser.
//!
//! The protocol runs over a pipe (`--remote-debugging-pipe`: the browser reads commands from
//! fd 3 and writes replies to fd 4, each message JSON ending in NUL), not a TCP port: no port
//! to pick or race for, no network at all, and the browser goes when the test drops it. A
//! page's contents are read through its DOM with `Runtime.evaluate`; mouse input is the
//! browser's own (`Input.dispatchMouseEvent`), so hover and click handlers run as for a user.

use std::{
    fs,
    io::{Read as _, Write as _},
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::secs;

/// Chromium: CHROMIUM_BIN, else Debian's /usr/bin/chromium. Fails, never skips, without it.
pub fn chromium_bin() -> PathBuf {
    let p = PathBuf::from(std::env::var("CHROMIUM_BIN").unwrap_or("/usr/bin/chromium".into()));
    assert!(
        p.is_file(),
        "{} missing: this test loads the page in headless Chromium; install Debian's package \
         (apt-get install chromium; cargo xtask test does) or set CHROMIUM_BIN",
        p.display()
    );
    p
}

/// Mermaid's browser bundle (dist/mermaid.min.js of the npm package), named by MERMAID_JS:
/// `cargo xtask test` installs the package in target/tools/mermaid. Fails, never skips,
/// without it.
pub fn mermaid_js() -> PathBuf {
    let p = PathBuf::from(std::env::var("MERMAID_JS").unwrap_or_else(|_| {
        panic!(
            "MERMAID_JS is unset: this test renders Markdown's Mermaid diagrams with the real \
             mermaid library; cargo xtask test installs it (npm install --prefix \
             target/tools/mermaid mermaid@VERSION) and sets MERMAID_JS to \
             target/tools/mermaid/node_modules/mermaid/dist/mermaid.min.js"
        )
    }));
    assert!(
        p.is_file(),
        "MERMAID_JS={} missing: cargo xtask test installs mermaid in target/tools/mermaid",
        p.display()
    );
    fs::canonicalize(&p).unwrap()
}

pub struct Browser {
    child: Child,
    to_browser: std::io::PipeWriter,
    replies: mpsc::Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    /// A fresh profile for this browser only, removed on drop.
    profile: PathBuf,
}

impl Browser {
    /// Start headless Chromium with a fresh profile under `dir` (removed on drop).
    pub fn start(dir: &Path) -> Self {
        let bin = chromium_bin();
        let profile = dir.join(format!("chromium-profile-{}", std::process::id()));
        let _ = fs::remove_dir_all(&profile);
        fs::create_dir_all(&profile).unwrap();
        let log = fs::File::create(profile.join("stderr.log")).unwrap();
        let (cmd_r, cmd_w) = std::io::pipe().unwrap();
        let (reply_r, reply_w) = std::io::pipe().unwrap();
        let (r_fd, w_fd) = (cmd_r.as_raw_fd(), reply_w.as_raw_fd());
        let mut cmd = Command::new(&bin);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            // Without these it tries to reach Google's servers.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        // SAFETY: only fcntl/dup2 between fork and exec. The pipe ends are close-on-exec;
        // copied above 10 first, so that neither is overwritten by the other's dup2.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::fcntl(r_fd, libc::F_DUPFD_CLOEXEC, 10);
                let w = libc::fcntl(w_fd, libc::F_DUPFD_CLOEXEC, 10);
                if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        // The browser's ends are its own now: EOF on the reply pipe means it is gone.
        drop(cmd_r);
        drop(reply_w);
        let (tx, replies) = mpsc::channel();
        let mut reply_r = reply_r;
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            while let Ok(n) = reply_r.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|&b| b == 0) {
                    let msg: Vec<u8> = buf.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&msg[..msg.len() - 1])
                        && tx.send(v).is_err()
                    {
                        return;
                    }
                }
            }
        });
        Self {
            child,
            to_browser: cmd_w,
            replies,
            next_id: 1,
            session: None,
            profile,
        }
    }

    /// What the browser printed (for failure messages).
    pub fn log(&self) -> String {
        fs::read_to_string(self.profile.join("stderr.log")).unwrap_or_default()
    }

    /// Send a command (to the attached page, if any) and wait for its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call_in(session.as_deref(), method, params)
    }

    fn call_in(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        if let Err(e) = self.to_browser.write_all(&bytes) {
            panic!("{method}: browser gone ({e}): {}", self.log());
        }
        let deadline = Instant::now() + secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .replies
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{method}: no reply ({e}): {}", self.log()));
            // Events have no id.
            if v["id"].as_u64() != Some(id) {
                continue;
            }
            if let Some(err) = v.get("error") {
                panic!("{method} failed: {err}");
            }
            return v["result"].clone();
        }
    }

    /// Open `file` in a new page of `width` x `height` CSS pixels, attach to it and wait
    /// until it has loaded.
    pub fn open(&mut self, file: &Path, width: u32, height: u32) {
        let t = self.call_in(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target = t["targetId"].as_str().unwrap().to_owned();
        let a = self.call_in(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        self.session = Some(a["sessionId"].as_str().unwrap().to_owned());
        self.resize(width, height);
        let url = format!("file://{}", fs::canonicalize(file).unwrap().display());
        self.call("Page.navigate", json!({ "url": url }));
        let deadline = Instant::now() + secs(30);
        while self.eval("document.readyState") != "complete"
            || self.eval("location.href") != url.as_str()
        {
            assert!(
                Instant::now() < deadline,
                "{url} did not load: {}",
                self.log()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Set the viewport to `width` x `height` CSS pixels (scale 1).
    pub fn resize(&mut self, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
    }

    /// Evaluate a JavaScript expression in the page; returns its value (JSON-serialisable).
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Centre of the first element matching `selector`, in CSS pixels of the viewport.
    pub fn centre(&mut self, selector: &str) -> (f64, f64) {
        let sel = serde_json::to_string(selector).unwrap();
        let v = self.eval(&format!(
            "(() => {{ const r = document.querySelector({sel}).getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
    }

    /// Move the mouse over the element matching `selector`.
    pub fn hover(&mut self, selector: &str) {
        let (x, y) = self.centre(selector);
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": "mouseMoved", "x": x, "y": y}),
        );
    }

    /// Click the element matching `selector` with the left button.
    pub fn click(&mut self, selector: &str) {
        let (x, y) = self.centre(selector);
        for t in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": t, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// A PNG of the viewport, written to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        fs::write(path, png).unwrap();
    }

    /// A PNG of the whole page at `width` CSS pixels (scale 1), written to `path`: the
    /// viewport is made as tall as the page first (and left so). Fonts are awaited, so the
    /// layout is the same from run to run.
    pub fn screenshot_page(&mut self, path: &Path, width: u32) {
        self.resize(width, 600);
        self.eval("document.fonts.ready.then(() => true)");
        let height = self
            .eval("Math.ceil(document.documentElement.scrollHeight)")
            .as_u64()
            .unwrap() as u32;
        self.resize(width, height);
        self.screenshot(path);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // No wait for the reply: a panic here would abort the test run.
        let msg = json!({"id": self.next_id, "method": "Browser.close", "params": {}});
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        let _ = self.to_browser.write_all(&bytes);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        // The browser this helper started, if it did not close.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.profile);
    }
}
