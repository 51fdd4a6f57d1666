//! Network namespaces, veth pairs and servers made for a test, removed on drop.

use std::{
    fs,
    io::{BufRead as _, BufReader},
    os::unix::fs::MetadataExt as _,
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
};

use crate::{Tcp, Value, netpeer, require_root, sh, spawn_in_piped, tcp_info, u};

/// A network namespace made for a test, with loopback up and IPv6 off (no router
/// solicitations or MLD reports to blur the counts). Deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Self {
        require_root();
        let name = format!("{name}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        sh(&["ip", "netns", "add", &name]);
        let ns = Self { name };
        ns.exec(&[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        sh(&["ip", "-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Run a command inside the namespace.
    pub fn exec(&self, argv: &[&str]) -> String {
        let mut a = vec!["ip", "netns", "exec", &self.name];
        a.extend_from_slice(argv);
        sh(&a)
    }

    /// The namespace's inode number (as /proc/PID/ns/net shows it).
    pub fn inum(&self) -> u64 {
        fs::metadata(format!("/run/netns/{}", self.name))
            .unwrap()
            .ino()
    }

    /// (rx bytes, rx packets, tx bytes, tx packets) of a device, as the kernel counts them.
    pub fn link_stats(&self, dev: &str) -> [u64; 4] {
        let out = sh(&[
            "ip", "-n", &self.name, "-s", "-j", "link", "show", "dev", dev,
        ]);
        let v: Value = serde_json::from_str(&out).unwrap();
        let s = &v[0]["stats64"];
        [
            u(&s["rx"]["bytes"]),
            u(&s["rx"]["packets"]),
            u(&s["tx"]["bytes"]),
            u(&s["tx"]["packets"]),
        ]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Connect two namespaces with a veth pair: `a_dev` in `a` with address `a_addr` (a /24),
/// `b_dev` in `b` with `b_addr`. The pair goes with either namespace.
pub fn veth(a: &Netns, a_dev: &str, a_addr: &str, b: &Netns, b_dev: &str, b_addr: &str) {
    sh(&[
        "ip", "link", "add", a_dev, "netns", &a.name, "type", "veth", "peer", "name", b_dev,
        "netns", &b.name,
    ]);
    for (ns, dev, addr) in [(a, a_dev, a_addr), (b, b_dev, b_addr)] {
        sh(&[
            "ip",
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            dev,
        ]);
        sh(&["ip", "-n", &ns.name, "link", "set", dev, "up"]);
    }
}

/// A `netpeer serve` running in a namespace (or the host's with None); killed on drop.
pub struct Server {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Server {
    pub fn start(ns: Option<&Netns>, addr: &str, cgroup: Option<&Path>) -> Self {
        let bin = netpeer();
        let mut argv: Vec<&str> = Vec::new();
        if let Some(ns) = ns {
            argv.extend(["ip", "netns", "exec", &ns.name]);
        }
        argv.extend([bin.as_str(), "serve", addr]);
        let mut child = match cgroup {
            Some(cg) => spawn_in_piped(cg, &argv),
            None => Command::new(argv[0])
                .args(&argv[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        };
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "netpeer serve {addr} did not start");
        Self { child, out }
    }

    /// What the server's socket of the next connection moved (TCP_INFO), written before it
    /// closed: a client that has returned has seen that close.
    pub fn tcp(&mut self) -> Tcp {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        tcp_info(&line)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
