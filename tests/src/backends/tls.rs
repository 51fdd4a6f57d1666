//! TLS: a private CA made with openssl, and socat as a TLS-terminating proxy in front of a
//! plain-text collector port (mutual TLS: it accepts only clients with a certificate of that CA).

use std::{
    fs,
    path::PathBuf,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use super::{accepts, free_ports, repo_root};
use crate::secs;

/// A private CA with a server certificate for 127.0.0.1 and a client certificate, in PEM
/// files of a directory of its own (removed on drop).
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = repo_root()
            .join("target")
            .join(format!("pki-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let pki = Pki { dir };
        // Arguments split at spaces: the paths must have none.
        let ssl = |args: String| {
            let argv: Vec<&str> = ["openssl"]
                .into_iter()
                .chain(args.split_whitespace())
                .collect();
            crate::sh(&argv);
        };
        let f = |name: &str| pki.file(name);
        let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
        ssl(format!(
            "req -x509 {key} -days 2 -subj /CN=profiler-test-ca -keyout {} -out {}",
            f("ca.key"),
            f("ca.pem")
        ));
        for (who, ext) in [
            (
                "server",
                "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth",
            ),
            ("client", "extendedKeyUsage=clientAuth"),
        ] {
            let (k, csr, pem, extf) = (
                f(&format!("{who}.key")),
                f(&format!("{who}.csr")),
                f(&format!("{who}.pem")),
                f(&format!("{who}.ext")),
            );
            fs::write(&extf, format!("{ext}\n")).unwrap();
            ssl(format!(
                "req {key} -subj /CN=profiler-test-{who} -keyout {k} -out {csr}"
            ));
            ssl(format!(
                "x509 -req -in {csr} -CA {} -CAkey {} -CAcreateserial -days 2 -extfile {extf} \
                 -out {pem}",
                f("ca.pem"),
                f("ca.key")
            ));
        }
        pki
    }

    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// socat: TLS (server certificate of `pki`, client certificate required) on a free loopback
/// port, relayed to plain TCP on `to_port`.
pub struct TlsProxy {
    pub port: u16,
    child: Child,
}

impl TlsProxy {
    pub fn start(pki: &Pki, to_port: u16) -> TlsProxy {
        let [port] = free_ports();
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},cafile={},verify=1",
            pki.file("server.pem"),
            pki.file("server.key"),
            pki.file("ca.pem")
        );
        let child = Command::new("socat")
            .args([&listen, &format!("TCP:127.0.0.1:{to_port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("socat: {e} (`cargo xtask test` installs Debian's socat)"));
        let mut proxy = TlsProxy { port, child };
        let deadline = Instant::now() + secs(10);
        while !accepts(port) {
            assert!(
                proxy.child.try_wait().unwrap().is_none() && Instant::now() < deadline,
                "socat did not listen on 127.0.0.1:{port}"
            );
            thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    /// "https://127.0.0.1:PORT"
    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        // Its per-connection children end with their connections.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
