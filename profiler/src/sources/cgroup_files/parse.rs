//! Parsers of the cgroup files the profiler reads. Pure functions: text in, values or a clear
//! error out, never a panic. Formats: Documentation/admin-guide/cgroup-v2.rst ("Conventions",
//! "PSI") and cgroup-v1/blkio-controller.rst, memory.rst.

use std::collections::BTreeMap;

use serde::Serialize;

/// What is wrong with a file's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

type Result<T> = std::result::Result<T, ParseError>;

fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(ParseError(msg.into()))
}

fn num(key: &str, v: &str) -> Result<u64> {
    v.parse()
        .or_else(|_| err(format!("{key}: {v:?} is not a number")))
}

/// One line of a PSI file: "some avg10=0.00 avg60=0.00 avg300=0.00 total=0".
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Cumulative stall time in microseconds.
    pub total_us: u64,
}

/// A `*.pressure` file. `full` is absent from cpu.pressure before 5.13 and from
/// irq.pressure's "some" (irq has only "full").
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pressure {
    pub some: Option<PsiLine>,
    pub full: Option<PsiLine>,
}

pub fn pressure(text: &str) -> Result<Pressure> {
    let mut p = Pressure::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or("");
        let mut l = PsiLine::default();
        let mut seen = 0u8;
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                return err(format!("pressure line {line:?}: {w:?} is not key=value"));
            };
            let avg = || v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
            match k {
                "avg10" => l.avg10 = avg().ok_or_else(|| ParseError(format!("avg10={v:?}")))?,
                "avg60" => l.avg60 = avg().ok_or_else(|| ParseError(format!("avg60={v:?}")))?,
                "avg300" => l.avg300 = avg().ok_or_else(|| ParseError(format!("avg300={v:?}")))?,
                "total" => l.total_us = num("total", v)?,
                _ => continue, // newer kernels may add fields
            }
            seen |= match k {
                "avg10" => 1,
                "avg60" => 2,
                "avg300" => 4,
                _ => 8,
            };
        }
        if seen != 15 {
            return err(format!(
                "pressure line {line:?} lacks some of avg10, avg60, avg300, total"
            ));
        }
        match kind {
            "some" => p.some = Some(l),
            "full" => p.full = Some(l),
            _ => {
                return err(format!(
                    "pressure line {line:?}: expected \"some\" or \"full\""
                ));
            }
        }
    }
    if p.some.is_none() && p.full.is_none() {
        return err("empty pressure file");
    }
    Ok(p)
}

/// A flat keyed file: "key value" per line (cpu.stat, memory.stat, memory.events, ...).
pub fn flat_keyed(text: &str) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut w = line.split_whitespace();
        let (Some(k), Some(v), None) = (w.next(), w.next(), w.next()) else {
            return err(format!("line {line:?} is not \"key value\""));
        };
        out.insert(k.to_owned(), num(k, v)?);
    }
    if out.is_empty() {
        return err("empty file");
    }
    Ok(out)
}

/// A nested keyed file: "maj:min key=value key=value ..." per line (io.stat).
pub fn nested_keyed(text: &str) -> Result<BTreeMap<String, BTreeMap<String, u64>>> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut w = line.split_whitespace();
        let dev = w.next().unwrap_or("");
        if !is_dev(dev) {
            return err(format!(
                "line {line:?} does not start with a device maj:min"
            ));
        }
        let mut fields = BTreeMap::new();
        for kv in w {
            let Some((k, v)) = kv.split_once('=') else {
                return err(format!("line {line:?}: {kv:?} is not key=value"));
            };
            fields.insert(k.to_owned(), num(k, v)?);
        }
        out.insert(dev.to_owned(), fields);
    }
    // An empty io.stat is valid: no IO yet.
    Ok(out)
}

fn is_dev(s: &str) -> bool {
    matches!(s.split_once(':'), Some((a, b)) if !a.is_empty() && !b.is_empty()
        && a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit()))
}

/// A single value file (memory.current, memory.peak, pids.current, v1 memory.usage_in_bytes).
pub fn single(text: &str) -> Result<u64> {
    let t = text.trim();
    if t.is_empty() {
        return err("empty file");
    }
    num("value", t)
}

/// v1 blkio.throttle.io_service_bytes / io_serviced: "maj:min Op value" lines and a final
/// "Total value". Returns per device the Read, Write, Discard (when present) values.
pub fn blkio_v1(text: &str) -> Result<BTreeMap<String, BTreeMap<String, u64>>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut total_seen = false;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["Total", v] => {
                num("Total", v)?;
                total_seen = true;
            }
            [dev, op, v] if is_dev(dev) => {
                let key = op.to_ascii_lowercase();
                out.entry((*dev).to_owned())
                    .or_default()
                    .insert(key, num(op, v)?);
            }
            _ => {
                return err(format!(
                    "line {line:?} is neither \"maj:min Op value\" nor \"Total value\""
                ));
            }
        }
    }
    if !total_seen {
        return err("no \"Total\" line (truncated?)");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on this project's machine (Linux 6.18, hybrid cgroups).
    const HOST_CPU_PRESSURE: &str = "some avg10=0.03 avg60=0.14 avg300=1.80 total=237575214\n\
                                     full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
    const HOST_CPU_STAT: &str =
        "usage_usec 4261937\nuser_usec 3095063\nsystem_usec 1166873\nnice_usec 0\n";
    const HOST_BLKIO_ROOT: &str = "Total 0\n";
    // Captured in the pure cgroup v2 VM of `cargo xtask vmtest` (Debian 6.12.95 kernel), from
    // an exec that wrote and read 8 MiB.
    const V2_CPU_PRESSURE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=3981\n\
                                   full avg10=0.00 avg60=0.00 avg300=0.00 total=2525\n";
    const V2_IO_STAT: &str = "254:0 rbytes=8388608 wbytes=8388608 rios=64 wios=8 dbytes=0 dios=0\n";
    const V2_CPU_STAT: &str = "usage_usec 142266\nuser_usec 4445\nsystem_usec 137821\nnice_usec 0\n\
        nr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n";
    const V2_MEMORY_EVENTS: &str = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n";
    const V2_MEMORY_STAT_HEAD: &str = "anon 0\nfile 8392704\nkernel 40960\nkernel_stack 0\n\
        file_dirty 0\nfile_writeback 0\npgfault 410\npgmajfault 1\n";
    // irq.pressure has only a "full" line (format of Documentation/accounting/psi.rst; the
    // Debian kernels of the matrix do not enable it).
    const IRQ_PRESSURE: &str = "full avg10=0.00 avg60=0.00 avg300=0.00 total=1283\n";
    // v1 blkio (format of Documentation/admin-guide/cgroup-v1/blkio-controller.rst).
    const V1_SERVICE_BYTES: &str = "254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 12288\n\
        254:0 Async 0\n254:0 Discard 0\n254:0 Total 12288\nTotal 12288\n";

    #[test]
    fn parses_captured_files() {
        let p = pressure(HOST_CPU_PRESSURE).unwrap();
        assert_eq!(p.some.unwrap().total_us, 237575214);
        assert_eq!(p.some.unwrap().avg300, 1.80);
        assert_eq!(p.full.unwrap().total_us, 0);
        let v2 = pressure(V2_CPU_PRESSURE).unwrap();
        assert_eq!(
            (v2.some.unwrap().total_us, v2.full.unwrap().total_us),
            (3981, 2525)
        );
        let irq = pressure(IRQ_PRESSURE).unwrap();
        assert!(irq.some.is_none());
        assert_eq!(irq.full.unwrap().total_us, 1283);
        assert_eq!(flat_keyed(HOST_CPU_STAT).unwrap()["usage_usec"], 4261937);
        let c = flat_keyed(V2_CPU_STAT).unwrap();
        assert_eq!((c["nr_periods"], c["usage_usec"]), (0, 142266));
        assert_eq!(flat_keyed(V2_MEMORY_EVENTS).unwrap()["oom_kill"], 0);
        assert_eq!(flat_keyed(V2_MEMORY_STAT_HEAD).unwrap()["file"], 8392704);
        let io = nested_keyed(V2_IO_STAT).unwrap();
        assert_eq!((io["254:0"]["wbytes"], io["254:0"]["rios"]), (8388608, 64));
        assert!(nested_keyed("").unwrap().is_empty());
        assert!(blkio_v1(HOST_BLKIO_ROOT).unwrap().is_empty());
        let b = blkio_v1(V1_SERVICE_BYTES).unwrap();
        assert_eq!((b["254:0"]["read"], b["254:0"]["write"]), (4096, 8192));
        assert_eq!(single("210403328\n").unwrap(), 210403328);
    }

    #[test]
    fn malformed_and_truncated_files_are_errors() {
        assert!(pressure("").is_err());
        assert!(
            pressure("some avg10=0.00 avg60=0.00").is_err(),
            "truncated line"
        );
        assert!(pressure("some avg10=x avg60=0 avg300=0 total=1").is_err());
        assert!(pressure("sum avg10=0 avg60=0 avg300=0 total=1").is_err());
        assert!(pressure("some avg10=0 avg60=0 avg300=0 total=-1").is_err());
        assert!(flat_keyed("usage_usec").is_err());
        assert!(flat_keyed("usage_usec 12 13").is_err());
        assert!(flat_keyed("usage_usec 1e9").is_err());
        assert!(nested_keyed("254:0 rbytes").is_err());
        assert!(nested_keyed("sda rbytes=1").is_err());
        assert!(single("max").is_err());
        assert!(single("").is_err());
        assert!(blkio_v1("254:0 Read 4096\n").is_err(), "no Total line");
        assert!(blkio_v1("254:0 Read\nTotal 0\n").is_err());
    }

    /// Random damage to real contents: every parser returns, never panics.
    #[test]
    fn fuzzed_inputs_never_panic() {
        let seeds = [
            HOST_CPU_PRESSURE,
            HOST_CPU_STAT,
            V2_CPU_PRESSURE,
            V2_IO_STAT,
            IRQ_PRESSURE,
            V2_CPU_STAT,
            V2_MEMORY_EVENTS,
            V2_MEMORY_STAT_HEAD,
            V1_SERVICE_BYTES,
        ];
        let mut x = 0x9e3779b97f4a7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet = b" \n=:.-0123456789abcdefghijklmnopqrstuvwxyzTRW\x00\xff";
        for i in 0..100_000 {
            let mut b = seeds[i % seeds.len()].as_bytes().to_vec();
            for _ in 0..(rnd() % 6) {
                let pos = (rnd() as usize) % (b.len() + 1);
                match rnd() % 4 {
                    0 if pos < b.len() => {
                        b.remove(pos);
                    }
                    1 => b.insert(pos, alphabet[(rnd() as usize) % alphabet.len()]),
                    2 => b.truncate(pos),
                    _ if pos < b.len() => b[pos] = alphabet[(rnd() as usize) % alphabet.len()],
                    _ => {}
                }
            }
            let t = String::from_utf8_lossy(&b);
            let _ = pressure(&t);
            let _ = flat_keyed(&t);
            let _ = nested_keyed(&t);
            let _ = single(&t);
            let _ = blkio_v1(&t);
        }
    }
}
