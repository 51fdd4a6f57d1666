//! The profiler's own diagnostics, on one path: the `log` macros everywhere, one format on
//! stderr (`profiler: warning: ...`, `profiler: error: ...`, `profiler: ...` for information),
//! a level set by `-v`/`-q` or RUST_LOG, and warnings counted and rate-limited per place in
//! the code, so that a steady fault cannot flood the terminal or a journal.

use std::{
    collections::HashMap,
    sync::{
        Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Messages shown per place in the code per window; the rest are counted, and said with the
/// next one shown.
const PER_PLACE: u32 = 10;
const WINDOW: Duration = Duration::from_secs(60);

struct Diagnostics {
    filter: RwLock<env_filter::Filter>,
    limits: Mutex<RateLimit>,
    warnings: AtomicU64,
    hidden: AtomicU64,
}

static DIAGNOSTICS: std::sync::OnceLock<&'static Diagnostics> = std::sync::OnceLock::new();

/// The filter for a verbosity (`-v` counts up, `-q` down): the profiler's own messages at
/// info by default, its dependencies' silent unless asked for; RUST_LOG, when set, wins.
fn filter(verbosity: i8, rust_log: Option<&str>) -> env_filter::Filter {
    let mut b = env_filter::Builder::new();
    match rust_log {
        Some(spec) if !spec.trim().is_empty() => {
            b.parse(spec);
        }
        _ => {
            let own = match verbosity {
                ..=-2 => LevelFilter::Error,
                -1 => LevelFilter::Warn,
                0 => LevelFilter::Info,
                1 => LevelFilter::Debug,
                _ => LevelFilter::Trace,
            };
            let others = match verbosity {
                ..=0 => LevelFilter::Off,
                1 => LevelFilter::Warn,
                _ => LevelFilter::Debug,
            };
            b.filter_level(others).filter_module("profiler", own);
        }
    }
    b.build()
}

fn rust_log() -> Option<String> {
    std::env::var("RUST_LOG").ok()
}

/// Install the logger at the default level (the command line may change it: [`set_verbosity`]).
pub fn init() {
    let d: &'static Diagnostics = Box::leak(Box::new(Diagnostics {
        filter: RwLock::new(filter(0, rust_log().as_deref())),
        limits: Mutex::new(RateLimit::default()),
        warnings: AtomicU64::new(0),
        hidden: AtomicU64::new(0),
    }));
    if log::set_logger(d).is_ok() {
        log::set_max_level(LevelFilter::Trace);
        let _ = DIAGNOSTICS.set(d);
    }
}

/// `-v` given `verbose` times, `-q` `quiet` times.
pub fn set_verbosity(verbose: u8, quiet: u8) {
    if let Some(d) = DIAGNOSTICS.get() {
        let v = (verbose as i16 - quiet as i16).clamp(-2, 2) as i8;
        *d.filter.write().unwrap_or_else(|e| e.into_inner()) = filter(v, rust_log().as_deref());
    }
}

/// Warnings so far, and how many of them were not shown (rate limit).
pub fn warnings() -> (u64, u64) {
    DIAGNOSTICS.get().map_or((0, 0), |d| {
        (
            d.warnings.load(Ordering::Relaxed),
            d.hidden.load(Ordering::Relaxed),
        )
    })
}

/// Text to stderr, its errors ignored: a closed or full stderr (`2>&-`) loses the messages but
/// must not stop the profiler (eprintln! panics there).
pub fn write_stderr(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// One line as shown on stderr.
fn line(level: Level, message: &str) -> String {
    let tag = match level {
        Level::Error => "error: ",
        Level::Warn => "warning: ",
        Level::Info => "",
        Level::Debug | Level::Trace => "debug: ",
    };
    format!("profiler: {tag}{message}")
}

impl Log for Diagnostics {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter
            .read()
            .map(|f| f.enabled(metadata))
            .unwrap_or(true)
    }

    fn log(&self, record: &Record<'_>) {
        if !self
            .filter
            .read()
            .map(|f| f.matches(record))
            .unwrap_or(true)
        {
            return;
        }
        let mut message = record.args().to_string();
        if record.level() <= Level::Warn {
            self.warnings.fetch_add(1, Ordering::Relaxed);
            let place = (
                record.file_static().unwrap_or(""),
                record.line().unwrap_or(0),
            );
            let verdict = self
                .limits
                .lock()
                .map(|mut l| l.admit(place, Instant::now()))
                .unwrap_or(Admit::Show { hidden_before: 0 });
            match verdict {
                Admit::Hide => {
                    self.hidden.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Admit::Show { hidden_before: 0 } => {}
                Admit::Show { hidden_before: n } => {
                    message.push_str(&format!(" ({n} more like it not shown)"));
                }
            }
        }
        write_stderr(&format!("{}\n", line(record.level(), &message)));
    }

    fn flush(&self) {}
}

#[derive(Debug, PartialEq, Eq)]
enum Admit {
    Show { hidden_before: u64 },
    Hide,
}

/// At most [`PER_PLACE`] messages per place per [`WINDOW`].
#[derive(Default)]
struct RateLimit {
    places: HashMap<(&'static str, u32), Place>,
}

struct Place {
    window_start: Instant,
    shown: u32,
    hidden: u64,
}

impl RateLimit {
    fn admit(&mut self, place: (&'static str, u32), now: Instant) -> Admit {
        let p = self.places.entry(place).or_insert(Place {
            window_start: now,
            shown: 0,
            hidden: 0,
        });
        if now.duration_since(p.window_start) >= WINDOW {
            p.window_start = now;
            p.shown = 0;
        }
        if p.shown >= PER_PLACE {
            p.hidden += 1;
            return Admit::Hide;
        }
        p.shown += 1;
        Admit::Show {
            hidden_before: std::mem::take(&mut p.hidden),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_the_profilers_format() {
        assert_eq!(line(Level::Warn, "x"), "profiler: warning: x");
        assert_eq!(line(Level::Error, "x"), "profiler: error: x");
        assert_eq!(line(Level::Info, "note: x"), "profiler: note: x");
        assert_eq!(line(Level::Debug, "x"), "profiler: debug: x");
    }

    #[test]
    fn a_place_says_ten_per_minute_then_how_many_it_held_back() {
        let mut r = RateLimit::default();
        let t0 = Instant::now();
        let here = ("a.rs", 1);
        for i in 0..PER_PLACE {
            assert_eq!(
                r.admit(here, t0 + Duration::from_secs(i as u64)),
                Admit::Show { hidden_before: 0 }
            );
        }
        for _ in 0..5 {
            assert_eq!(r.admit(here, t0 + Duration::from_secs(30)), Admit::Hide);
        }
        // Another place is not held back by this one.
        assert_eq!(
            r.admit(("a.rs", 2), t0 + Duration::from_secs(30)),
            Admit::Show { hidden_before: 0 }
        );
        assert_eq!(r.admit(here, t0 + WINDOW), Admit::Show { hidden_before: 5 });
        assert_eq!(
            r.admit(here, t0 + WINDOW + Duration::from_secs(1)),
            Admit::Show { hidden_before: 0 }
        );
    }

    #[test]
    fn verbosity_sets_the_profilers_level_and_quiets_its_dependencies() {
        let meta =
            |target: &'static str, level| Metadata::builder().target(target).level(level).build();
        let f = filter(0, None);
        assert!(f.enabled(&meta("profiler::monitor", Level::Info)));
        assert!(!f.enabled(&meta("profiler::monitor", Level::Debug)));
        assert!(!f.enabled(&meta("aya::bpf", Level::Warn)));
        let f = filter(-1, None);
        assert!(!f.enabled(&meta("profiler", Level::Info)));
        assert!(f.enabled(&meta("profiler", Level::Warn)));
        assert!(!filter(-2, None).enabled(&meta("profiler", Level::Warn)));
        let f = filter(1, None);
        assert!(f.enabled(&meta("profiler::x", Level::Debug)));
        assert!(f.enabled(&meta("aya", Level::Warn)));
        assert!(filter(2, None).enabled(&meta("aya", Level::Debug)));
        // RUST_LOG wins over the flags.
        let f = filter(-2, Some("profiler::monitor=debug"));
        assert!(f.enabled(&meta("profiler::monitor", Level::Debug)));
        assert!(!f.enabled(&meta("profiler::export", Level::Error)));
        assert!(filter(0, Some(" ")).enabled(&meta("profiler", Level::Info)));
    }
}
