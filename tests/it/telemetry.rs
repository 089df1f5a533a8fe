//! The `metrics` and `tracing` features, with recording backends
//! installed for the whole test binary: what an application's dashboard
//! and traces get. Other tests record too, so each check names something
//! of its own (a port, a resource) or counts what grew.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use support::{Nodes, resource};

#[cfg(feature = "metrics")]
mod recorder {
    use super::*;
    use metrics::{
        Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
        Unit,
    };
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Every counter and histogram, by name and sorted labels.
    #[derive(Default)]
    pub struct Recorded {
        counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
        histograms: Mutex<HashMap<String, Arc<Samples>>>,
    }

    #[derive(Default)]
    pub struct Samples(Mutex<Vec<f64>>);

    impl HistogramFn for Samples {
        fn record(&self, value: f64) {
            self.0.lock().unwrap().push(value);
        }
    }

    fn name(key: &Key) -> String {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    impl Recorder for Recorded {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let c = self
                .counters
                .lock()
                .unwrap()
                .entry(name(key))
                .or_default()
                .clone();
            Counter::from_arc(c)
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            let h = self
                .histograms
                .lock()
                .unwrap()
                .entry(name(key))
                .or_default()
                .clone();
            Histogram::from_arc(h)
        }
    }

    impl Recorded {
        pub fn counter(&self, name: &str) -> u64 {
            self.counters
                .lock()
                .unwrap()
                .get(name)
                .map_or(0, |c| c.load(Ordering::SeqCst))
        }
        /// A histogram's samples; `name` without labels.
        pub fn samples(&self, name: &str) -> Vec<f64> {
            let name = if name.contains('{') {
                name.to_owned()
            } else {
                format!("{name}{{}}")
            };
            self.histograms
                .lock()
                .unwrap()
                .get(&name)
                .map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
        }
    }

    pub fn installed() -> &'static Recorded {
        static RECORDED: OnceLock<&'static Recorded> = OnceLock::new();
        RECORDED.get_or_init(|| {
            let recorded: &'static Recorded = Box::leak(Box::default());
            metrics::set_global_recorder(recorded).unwrap();
            recorded
        })
    }
}

/// Acquisitions by outcome, attempts, wait and hold times, extends, a
/// lost lock, the quorum margin, and each node failure by node and kind.
///
/// The checks run in a process of their own ([`metrics_process`]): the
/// recorder is global and the metrics name no resource, so in this
/// binary, other tests running at the same time could make them pass.
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_outcomes_times_losses_and_node_failures() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "telemetry::metrics_process",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("REDLOCK_METRICS_PROCESS", "1")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 passed"), "the checks did not run: {said}");
}

/// Child process entry of the metrics test: no other test records here.
#[cfg(feature = "metrics")]
#[test]
#[ignore = "a child process of the metrics test, run by it"]
fn metrics_process() {
    if std::env::var("REDLOCK_METRICS_PROCESS").is_err() {
        return;
    }
    use redlock_sync::telemetry::*;
    let rec = recorder::installed();
    let mut cluster = Nodes::start(3).unwrap();
    cluster.servers[2].kill();
    let dead = format!("127.0.0.1:{}", cluster.servers[2].port());
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let r = resource("metrics");
    let acquired = format!("{ACQUIRES}{{outcome=acquired}}");
    let taken = format!("{ACQUIRES}{{outcome=taken}}");
    let failures = format!("{NODE_FAILURES}{{kind=connect,node={dead}}}");
    let (acq0, taken0, fail0) = (
        rec.counter(&acquired),
        rec.counter(&taken),
        rec.counter(&failures),
    );
    let margin0 = rec.samples(MARGIN).iter().filter(|m| **m == 0.0).count();
    let holds0 = rec.samples(HOLD).len();

    let mut guard = dlm.lock(&r, Duration::from_secs(5)).unwrap();
    assert!(rec.counter(&acquired) > acq0);
    assert!(
        rec.counter(&failures) > fail0,
        "the dead node's failure is not counted"
    );
    // Two of three agreed: no member to spare.
    assert!(rec.samples(MARGIN).iter().filter(|m| **m == 0.0).count() > margin0);
    assert!(matches!(
        dlm.try_lock(&r, Duration::from_secs(5)),
        Err(redlock_sync::Error::Taken { .. })
    ));
    assert!(rec.counter(&taken) > taken0);
    assert!(rec.counter(&format!("{ATTEMPTS}{{outcome=taken}}")) > 0);
    assert!(!rec.samples(&format!("{WAIT}{{outcome=taken}}")).is_empty());
    let extended0 = rec.counter(&format!("{EXTENDS}{{outcome=extended}}"));
    guard.extend(Duration::from_secs(5)).unwrap();
    assert!(rec.counter(&format!("{EXTENDS}{{outcome=extended}}")) > extended0);
    std::thread::sleep(Duration::from_millis(50));
    guard.release().unwrap();
    let holds = rec.samples(HOLD);
    assert!(holds.len() > holds0 && holds.iter().any(|h| *h >= 0.05));

    // A lock taken away: the holder's next extend finds it lost.
    let lost0 = rec.counter(&format!("{LOST}{{}}"));
    let mut guard = dlm.lock(&r, Duration::from_secs(5)).unwrap();
    dlm.force_unlock(&r).unwrap();
    assert!(guard.extend(Duration::from_secs(5)).is_err());
    assert!(rec.counter(&format!("{LOST}{{}}")) > lost0);
    assert!(rec.counter(&format!("{EXTENDS}{{outcome=not_held}}")) > 0);
}

/// Spans for acquire, extend and release with their fields: the
/// resource, the outcome, members agreeing, attempts, the token.
#[cfg(feature = "tracing")]
#[test]
fn spans_say_what_each_acquire_extend_and_release_did() {
    let spans = spans::installed();
    let cluster = Nodes::start(3).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let r = resource("traced");
    let mut guard = dlm.lock(&r, Duration::from_secs(5)).unwrap();
    let token = guard.fencing_token().unwrap().to_string();
    guard.extend(Duration::from_secs(5)).unwrap();
    guard.release().unwrap();
    let other = dlm.lock(&r, Duration::from_secs(5)).unwrap();
    assert!(dlm.try_lock(&r, Duration::from_secs(5)).is_err());
    drop(other);
    let mine = spans.of(&r);
    let names: Vec<&str> = mine.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "redlock.acquire",
            "redlock.extend",
            "redlock.release",
            "redlock.acquire",
            "redlock.acquire",
            "redlock.release"
        ],
        "{mine:?}"
    );
    let field = |i: usize, f: &str| mine[i].1.get(f).cloned().unwrap_or_default();
    assert_eq!(field(0, "outcome"), "acquired");
    assert_eq!(field(0, "agreed"), "3");
    assert_eq!(field(0, "attempts"), "1");
    assert_eq!(field(0, "token"), token);
    assert_eq!(field(1, "outcome"), "extended");
    assert_eq!(field(2, "outcome"), "released");
    assert_eq!(field(2, "agreed"), "3");
    assert_eq!(field(4, "outcome"), "taken");
}

#[cfg(feature = "tracing")]
mod spans {
    use super::*;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing_subscriber::layer::{Context, Layer};
    use tracing_subscriber::prelude::*;

    type Fields = HashMap<String, String>;

    /// Closed spans in order: name and fields.
    #[derive(Default)]
    pub struct Spans {
        open: Mutex<HashMap<u64, (String, Fields)>>,
        closed: Mutex<Vec<(String, Fields)>>,
    }

    struct Visitor<'a>(&'a mut Fields);

    impl Visit for Visitor<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(
                field.name().to_owned(),
                format!("{value:?}").trim_matches('"').to_owned(),
            );
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }
    }

    struct Catcher(&'static Spans);

    impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S>
        for Catcher
    {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
            let mut fields = Fields::new();
            attrs.record(&mut Visitor(&mut fields));
            self.0
                .open
                .lock()
                .unwrap()
                .insert(id.into_u64(), (attrs.metadata().name().to_owned(), fields));
        }
        fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
            if let Some((_, fields)) = self.0.open.lock().unwrap().get_mut(&id.into_u64()) {
                values.record(&mut Visitor(fields));
            }
        }
        fn on_close(&self, id: Id, _: Context<'_, S>) {
            if let Some(span) = self.0.open.lock().unwrap().remove(&id.into_u64()) {
                self.0.closed.lock().unwrap().push(span);
            }
        }
    }

    impl Spans {
        /// The closed spans on `resource`, in order.
        pub fn of(&self, resource: &str) -> Vec<(String, Fields)> {
            self.closed
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, f)| f.get("resource").map(String::as_str) == Some(resource))
                .cloned()
                .collect()
        }
    }

    pub fn installed() -> &'static Spans {
        static SPANS: OnceLock<&'static Spans> = OnceLock::new();
        SPANS.get_or_init(|| {
            let spans: &'static Spans = Box::leak(Box::default());
            tracing_subscriber::registry().with(Catcher(spans)).init();
            spans
        })
    }
}
