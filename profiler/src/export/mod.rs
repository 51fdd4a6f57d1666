//! Publishing the per-exec records: OTLP push (opentelemetry-otlp) and a Prometheus text
//! endpoint. Both read one shared view: the running execs' figures so far, and the ended
//! execs' final figures until they have been delivered. Memory is bounded by the number of
//! running execs plus the bounded backlogs below, not by the number of execs seen.

mod http_client;
pub mod metrics;
mod otlp;
mod prometheus;
mod spans;

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

pub use self::metrics::ExecSeries;
use anyhow::Result;
pub use otlp::{OtlpConfig, Protocol, SpansConfig, TlsFiles, Transport, reqwest_identity};

use self::metrics::ExecAttributes;
use crate::record::{ExecRecord, ExecState};

/// Nanoseconds as the seconds OpenTelemetry's time units are in.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Most ended execs kept waiting for a successful OTLP export (an outage longer than this
/// many execs loses the oldest, with a warning).
const MAX_PENDING_FINALS: usize = 50_000;
/// Most ended execs one OTLP collection shows, oldest first: after an outage the backlog goes
/// out over several exports, each request of bounded size and each metric within the SDK's
/// series limit (set by a view in `Otlp::build`).
pub(crate) const FINALS_PER_EXPORT: usize = 250;
/// Most running execs one OTLP collection shows: each interval a round of collections shows
/// them all, this many at a time. The SDK keeps a collection's points until the next one and
/// the exporter copies them into one request (docs/cost.md, "Resident memory"), so memory follows
/// the size of one collection, not the number of running execs.
pub(crate) const LIVE_PER_EXPORT: usize = 100;
/// How long, and how many, ended execs the Prometheus endpoint keeps showing.
const PROMETHEUS_RETENTION: Duration = Duration::from_secs(300);
const PROMETHEUS_MAX_ENDED: usize = 10_000;
/// How long an exec no longer running may wait for its final figures while still shown.
const LEAVING_RETENTION: Duration = Duration::from_secs(300);

/// An ended exec waiting for delivery.
struct Final {
    series: Arc<ExecSeries>,
    /// The export attempt whose collection first showed its figures.
    first: Option<u64>,
    /// The export attempt whose collection carries its latency histogram: a delta, gone from
    /// the SDK once collected, so recorded again after an attempt that failed.
    histogram: Option<u64>,
}

#[derive(Default)]
pub(crate) struct Shared {
    live: HashMap<u64, Arc<ExecSeries>>,
    /// The running execs the current OTLP collection shows (None: all of them).
    showing: Option<Vec<u64>>,
    /// Execs no longer running and not yet among `finals`, as last seen running (and since
    /// when): shown until they join `finals`, so that no collection between misses them (with
    /// delta temporality the SDK would count a series that comes back from zero).
    leaving: HashMap<u64, (Instant, Arc<ExecSeries>)>,
    /// Ended execs waiting for an OTLP export that succeeds after they were first collected.
    finals: VecDeque<Final>,
    /// Ended since the last export attempt: they join `finals` between two collections, so
    /// that a collection shows an exec whole or not at all.
    incoming: Vec<Arc<ExecSeries>>,
    /// OTLP export attempts so far.
    attempt: u64,
    finals_dropped: u64,
    /// Ended execs still shown by the Prometheus endpoint, with when they ended.
    prom_ended: VecDeque<(Instant, Arc<ExecSeries>)>,
    otlp: bool,
    prometheus: bool,
}

impl Shared {
    /// Every series to show now: running execs, then the oldest ended ones not yet delivered.
    pub(crate) fn for_otlp(&mut self) -> Vec<Arc<ExecSeries>> {
        let attempt = self.attempt;
        let mut out: Vec<Arc<ExecSeries>> = match &self.showing {
            Some(ids) => ids
                .iter()
                .filter_map(|id| self.live.get(id).cloned())
                .collect(),
            None => self
                .live
                .values()
                .chain(
                    self.leaving
                        .iter()
                        .filter(|(id, _)| !self.live.contains_key(id))
                        .map(|(_, (_, s))| s),
                )
                .cloned()
                .collect(),
        };
        for f in self.finals.iter_mut().take(FINALS_PER_EXPORT) {
            f.first.get_or_insert(attempt);
            out.push(f.series.clone());
        }
        out
    }

    /// Replace the running execs; those no longer running are shown as they were until their
    /// final figures are.
    fn set_live(&mut self, live: HashMap<u64, Arc<ExecSeries>>) {
        let old = std::mem::replace(&mut self.live, live);
        if self.otlp {
            let now = Instant::now();
            for (id, s) in old {
                if !self.live.contains_key(&id) {
                    self.leaving.insert(id, (now, s));
                }
            }
            // One that never ends (none should) is forgotten in the end.
            self.leaving
                .retain(|_, (t, _)| now.duration_since(*t) < LEAVING_RETENTION);
        }
    }

    /// The running execs in groups of at most `n`, for one round of OTLP collections.
    pub(crate) fn live_groups(&self, n: usize) -> Vec<Vec<u64>> {
        let mut ids: Vec<u64> = self.live.keys().copied().collect();
        ids.sort_unstable();
        ids.chunks(n).map(<[u64]>::to_vec).collect()
    }

    /// An OTLP export attempt ended: on success, forget the finals it carried. Returns the
    /// execs whose latency histograms are to be recorded now (see [`Self::next_histograms`]).
    #[must_use]
    pub(crate) fn exported(&mut self, ok: bool) -> Vec<Arc<ExecSeries>> {
        let attempt = self.attempt;
        self.attempt += 1;
        if ok {
            self.finals
                .retain(|f| !matches!(f.first, Some(a) if a <= attempt));
        }
        self.next_histograms()
    }

    /// Take in the execs that ended since the last attempt (between two collections, so that
    /// a collection shows an exec whole or not at all). Returns the execs whose latency
    /// histograms are to be recorded now, for the next collection: those that the next
    /// collection shows and whose histogram it would not carry otherwise (newly shown, or
    /// carried by an attempt that failed).
    #[must_use]
    pub(crate) fn next_histograms(&mut self) -> Vec<Arc<ExecSeries>> {
        for s in std::mem::take(&mut self.incoming) {
            self.leaving.remove(&s.cgroup_id);
            if self.finals.len() >= MAX_PENDING_FINALS {
                self.finals.pop_front();
                self.finals_dropped += 1;
                if self.finals_dropped.is_power_of_two() {
                    log::warn!(
                        "OTLP backlog full: {} ended execs' final records dropped so far",
                        self.finals_dropped
                    );
                }
            }
            self.finals.push_back(Final {
                series: s,
                first: None,
                histogram: None,
            });
        }
        let next = self.attempt;
        let mut record = Vec::new();
        for f in self.finals.iter_mut().take(FINALS_PER_EXPORT) {
            if f.histogram != Some(next) {
                f.histogram = Some(next);
                record.push(f.series.clone());
            }
        }
        record
    }

    pub(crate) fn for_prometheus(&mut self) -> Vec<Arc<ExecSeries>> {
        let now = Instant::now();
        while self
            .prom_ended
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > PROMETHEUS_RETENTION)
        {
            self.prom_ended.pop_front();
        }
        let mut out: Vec<Arc<ExecSeries>> = self.live.values().cloned().collect();
        out.extend(self.prom_ended.iter().map(|(_, s)| s.clone()));
        out
    }
}

pub struct Exporters {
    shared: Arc<Mutex<Shared>>,
    attrs: ExecAttributes,
    otlp: Option<otlp::Otlp>,
    prometheus: Option<prometheus::Server>,
}

/// A poisoned lock still holds usable figures.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Exporters {
    /// Start what is configured; None when nothing is. Fails (before anything is attached)
    /// on a bad endpoint, header or protocol, or a Prometheus address that cannot be bound.
    pub fn start(
        otlp: Option<OtlpConfig>,
        prometheus: Option<SocketAddr>,
        attrs: ExecAttributes,
        max_execs: usize,
    ) -> Result<Option<Self>> {
        if otlp.is_none() && prometheus.is_none() {
            return Ok(None);
        }
        let shared = Arc::new(Mutex::new(Shared {
            otlp: otlp.is_some(),
            prometheus: prometheus.is_some(),
            ..Default::default()
        }));
        let prometheus = prometheus
            .map(|a| prometheus::Server::start(a, shared.clone()))
            .transpose()?;
        let otlp = otlp
            .map(|c| otlp::Otlp::start(c, shared.clone(), max_execs))
            .transpose()?;
        Ok(Some(Self {
            shared,
            attrs,
            otlp,
            prometheus,
        }))
    }

    /// Where the exporters publish, for the start-up message.
    pub fn describe(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(o) = &self.otlp {
            v.push(o.describe());
        }
        if let Some(p) = &self.prometheus {
            v.push(format!(
                "serving Prometheus metrics at http://{}/metrics",
                p.addr
            ));
        }
        v
    }

    fn series(&self, r: &ExecRecord) -> Arc<ExecSeries> {
        Arc::new(ExecSeries::of(r, self.attrs.of(r)))
    }

    /// The running execs' figures so far, one record at a time, to [`Self::set_live`].
    pub fn add_live(&self, live: &mut HashMap<u64, Arc<ExecSeries>>, r: &ExecRecord) {
        if r.state == ExecState::Running {
            live.insert(r.cgroup_id, self.series(r));
        }
    }

    /// Replace the running execs' figures.
    pub fn set_live(&self, live: HashMap<u64, Arc<ExecSeries>>) {
        lock(&self.shared).set_live(live);
    }

    /// Execs whose figures are final (ended, or running at shutdown): exported once more
    /// with these values, then forgotten.
    pub fn ended(&self, reports: &[ExecRecord]) {
        if reports.is_empty() {
            return;
        }
        let series: Vec<Arc<ExecSeries>> = reports.iter().map(|r| self.series(r)).collect();
        if let Some(o) = &self.otlp {
            for (r, s) in reports.iter().zip(&series) {
                o.span(r, &s.attrs, !self.attrs.no_command_line);
            }
        }
        let mut sh = lock(&self.shared);
        let now = Instant::now();
        for s in series {
            if let Some(running) = sh.live.remove(&s.cgroup_id)
                && sh.otlp
            {
                sh.leaving.insert(s.cgroup_id, (now, running));
            }
            if sh.otlp {
                sh.incoming.push(s.clone());
            }
            if sh.prometheus {
                if sh.prom_ended.len() >= PROMETHEUS_MAX_ENDED {
                    sh.prom_ended.pop_front();
                }
                sh.prom_ended.push_back((now, s));
            }
        }
    }

    /// Final export (bounded by the exporter's timeout), then stop serving.
    pub fn shutdown(self) {
        if let Some(o) = self.otlp {
            o.shutdown();
        }
        if let Some(p) = self.prometheus {
            p.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(id: u64) -> Arc<ExecSeries> {
        Arc::new(ExecSeries {
            cgroup_id: id,
            attrs: vec![],
            kv: vec![],
            points: vec![],
            hists: vec![],
        })
    }

    #[test]
    fn finals_stay_until_an_export_that_carried_them_succeeds() {
        let mut s = Shared {
            otlp: true,
            ..Default::default()
        };
        let ids = |v: Vec<Arc<ExecSeries>>| v.iter().map(|x| x.cgroup_id).collect::<Vec<_>>();
        s.incoming.push(series(1));
        assert_eq!(s.for_otlp().len(), 0); // not before an attempt has ended
        assert_eq!(ids(s.exported(true)), vec![1]); // admitted: its histogram recorded
        assert_eq!(s.for_otlp().len(), 1); // attempt 1 carries exec 1
        s.incoming.push(series(2)); // ended during that collection
        // Attempt 1 failed: both stay; exec 1's histogram is recorded again, exec 2's first.
        assert_eq!(ids(s.exported(false)), vec![1, 2]);
        assert_eq!(s.finals.len(), 2);
        assert_eq!(s.for_otlp().len(), 2); // attempt 2 carries both
        s.incoming.push(series(3));
        assert_eq!(ids(s.exported(true)), vec![3]);
        let left: Vec<u64> = s.finals.iter().map(|f| f.series.cgroup_id).collect();
        assert_eq!(left, vec![3]);
    }

    #[test]
    fn an_ended_exec_is_shown_as_it_ran_until_its_final_figures_are() {
        let mut s = Shared {
            otlp: true,
            ..Default::default()
        };
        let running = series(1);
        s.live.insert(1, running.clone());
        assert!(s.exported(true).is_empty());
        // Ended during a collection: until the attempt ends, it is shown as it ran.
        s.leaving
            .insert(1, (Instant::now(), s.live.remove(&1).unwrap()));
        s.incoming.push(series(1));
        for _ in 0..2 {
            let shown = s.for_otlp();
            assert_eq!(shown.len(), 1);
            assert!(Arc::ptr_eq(&shown[0], &running));
        }
        // Between two collections it joins the finals: shown once, final.
        assert_eq!(s.exported(true).len(), 1);
        let shown = s.for_otlp();
        assert_eq!(shown.len(), 1);
        assert!(!Arc::ptr_eq(&shown[0], &running));
        assert!(s.leaving.is_empty());
        assert!(s.exported(true).is_empty());
        assert!(s.for_otlp().is_empty());
        // No longer running before its final figures come (its cgroup is gone, its last
        // tasks still exiting): shown as it ran through any number of attempts until then.
        let running = series(2);
        s.set_live(HashMap::from([(2, running.clone())]));
        s.set_live(HashMap::new());
        for _ in 0..3 {
            let shown = s.for_otlp();
            assert_eq!(shown.len(), 1);
            assert!(Arc::ptr_eq(&shown[0], &running));
            assert!(s.exported(true).is_empty());
        }
        s.incoming.push(series(2));
        assert_eq!(s.exported(true).len(), 1);
        let shown = s.for_otlp();
        assert!(shown.len() == 1 && !Arc::ptr_eq(&shown[0], &running));
        assert!(s.leaving.is_empty());
    }

    #[test]
    fn a_round_of_collections_shows_each_running_exec_once() {
        let mut s = Shared {
            otlp: true,
            ..Default::default()
        };
        s.live = (0..7u64).map(|i| (i, series(i))).collect();
        let groups = s.live_groups(3);
        assert_eq!(groups, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
        let mut shown = Vec::new();
        for g in groups {
            s.showing = Some(g);
            shown.extend(s.for_otlp().iter().map(|x| x.cgroup_id));
        }
        assert_eq!(shown, (0..7).collect::<Vec<_>>());
        // An exec that ended during the round is not shown as running.
        s.showing = Some(vec![5, 6]);
        s.live.remove(&6);
        assert_eq!(s.for_otlp().len(), 1);
        s.showing = None;
        assert_eq!(s.for_otlp().len(), 6);
    }

    #[test]
    fn a_backlog_goes_out_oldest_first_in_bounded_collections() {
        let mut s = Shared {
            otlp: true,
            ..Default::default()
        };
        let n = FINALS_PER_EXPORT + 5;
        s.incoming.extend((0..n as u64).map(series));
        assert_eq!(s.exported(false).len(), FINALS_PER_EXPORT);
        let shown = s.for_otlp();
        assert_eq!(shown.len(), FINALS_PER_EXPORT);
        assert_eq!(shown[0].cgroup_id, 0);
        // That attempt failed: the same execs again, their histograms recorded again.
        assert_eq!(s.exported(false).len(), FINALS_PER_EXPORT);
        assert_eq!(s.for_otlp().len(), FINALS_PER_EXPORT);
        // It succeeded: the rest, whose histograms are recorded for the first time.
        let next: Vec<u64> = s.exported(true).iter().map(|x| x.cgroup_id).collect();
        assert_eq!(
            next,
            (FINALS_PER_EXPORT as u64..n as u64).collect::<Vec<_>>()
        );
        assert_eq!(s.for_otlp().len(), 5);
        assert!(s.exported(true).is_empty());
        assert!(s.finals.is_empty());
    }
}
