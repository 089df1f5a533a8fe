//! Restart-safe votes: a server that restarted without its data does not
//! vote until every lock it may have forgotten has expired.
//!
//! The hole it closes, the rule and why it is safe are in the crate docs
//! ("Restarts, and `lockrun --check`"); this module reads and applies it.
//!
//! # What is read, and when
//!
//! Every new connection (never a lock round) reads `INFO server`
//! (`run_id`, which is new at every start, and `uptime_in_seconds`),
//! `CONFIG GET append*` (`appendonly`, `appendfsync`) and `CONFIG GET
//! no-appendfsync-on-rewrite`, in the handshake's single write. From them a node knows the instant its server started
//! (on this machine's clock: the connect instant less the uptime, which is
//! whole seconds rounded down, so the latest possible start) and whether
//! it persists every write before answering (`appendonly yes` with
//! `appendfsync always` and `no-appendfsync-on-rewrite no`). The configuration is read, not `INFO
//! persistence`: while a server loads its append-only file at startup,
//! `INFO` says `aof_enabled:0`. `INFO` refused (an ACL user without it)
//! leaves a node as it was before this module: it votes; `CONFIG` refused
//! leaves durability unknown, taken as not durable (the safe side).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;

use crate::members::request::PlainDelete;

/// The settings every server of a manager shares.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    /// Strict mode: servers started less than this long ago do not vote.
    pub(crate) strict: Option<Duration>,
    /// The longest TTL this manager has used, in ms.
    longest_ttl_ms: AtomicU64,
    /// The drift factor: how far a clock's rate may be off, this
    /// machine's or a server's (see [`RunWatch::quarantine_now`]).
    drift: f64,
}

impl Policy {
    pub(crate) fn new(strict: Option<Duration>, drift: f64) -> Policy {
        Policy {
            strict,
            longest_ttl_ms: AtomicU64::new(0),
            drift,
        }
    }

    /// Notes a TTL this manager uses (acquire, extend).
    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        self.longest_ttl_ms.fetch_max(ttl_ms, Ordering::Relaxed);
    }

    /// How long a witnessed restart keeps a server out, on this
    /// machine's clock (see [`Policy::stretched`]).
    fn witnessed(&self) -> Duration {
        let longest = Duration::from_millis(self.longest_ttl_ms.load(Ordering::Relaxed));
        self.stretched(self.strict.map_or(longest, |q| q.max(longest)))
    }

    /// `period` measured on this machine's clock, which may run fast by
    /// the drift factor: the period and the factor more.
    fn stretched(&self, period: Duration) -> Duration {
        period.mul_f64(1.0 + self.drift)
    }
}

/// What one connection's handshake told about its server.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Identity {
    pub(crate) run_id: Option<String>,
    pub(crate) uptime: Option<Duration>,
    pub(crate) aof: bool,
    pub(crate) fsync_always: bool,
    /// `no-appendfsync-on-rewrite yes` (or unknown): the server skips the
    /// fsync while a rewrite runs.
    pub(crate) skips_fsync_on_rewrite: bool,
    /// `INFO` was refused (an ACL user without `+info`).
    pub(crate) info_refused: bool,
    /// The server runs in cluster mode (`redis_mode:cluster`, Valkey's
    /// `server_mode:cluster`).
    pub(crate) cluster_mode: bool,
    /// The server takes `SET ... NX GET` (Redis 7.0 and later; Valkey
    /// reports a `redis_version` of 7.2): false when unknown.
    pub(crate) set_nx_get: bool,
    /// The server's own compare-and-delete (`DELIFEQ` on Valkey 9.0 and
    /// later, `DELEX ... IFEQ` on Redis 8.4 and later): a release without
    /// a script. `None` when unknown.
    pub(crate) plain_delete: Option<PlainDelete>,
}

impl Identity {
    /// Reads the replies of `INFO server`, `CONFIG GET append*` and
    /// `CONFIG GET no-appendfsync-on-rewrite` (each `None` when refused).
    pub(crate) fn read(
        server: Option<&Value>,
        config: Option<&Value>,
        rewrite: Option<&Value>,
    ) -> Identity {
        let server = server.and_then(text);
        let mut config = config.map(config_pairs).unwrap_or_default();
        config.extend(rewrite.map(config_pairs).unwrap_or_default());
        let setting = |name: &str| {
            config
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        // A version field's (major, minor).
        let version = |name: &str| {
            let v = field(server.as_deref()?, name)?;
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        };
        // Valkey's own version; Redis says none. A Valkey whose version
        // does not read is still no Redis (it never gets `DELEX`).
        let valkey = version("valkey_version");
        let is_valkey = server.as_deref().is_some_and(|s| {
            field(s, "valkey_version").is_some() || field(s, "server_name") == Some("valkey")
        });
        let redis = version("redis_version");
        Identity {
            run_id: server
                .as_deref()
                .and_then(|s| field(s, "run_id"))
                .map(str::to_owned),
            uptime: server
                .as_deref()
                .and_then(|s| field(s, "uptime_in_seconds"))
                .and_then(|u| u.parse().ok())
                .map(Duration::from_secs),
            aof: setting("appendonly") == Some("yes"),
            fsync_always: setting("appendfsync") == Some("always"),
            // Unknown is taken as skipping (the safe side).
            skips_fsync_on_rewrite: setting("no-appendfsync-on-rewrite") != Some("no"),
            info_refused: server.is_none(),
            cluster_mode: server.as_deref().is_some_and(|s| {
                field(s, "redis_mode").or_else(|| field(s, "server_mode")) == Some("cluster")
            }),
            set_nx_get: redis.is_some_and(|(major, _)| major >= 7),
            // Valkey says a `redis_version` of 7.2 (what it forked from).
            plain_delete: match (valkey, redis) {
                (Some(version), _) if version >= (9, 0) => Some(PlainDelete::DelIfEq),
                (_, Some(version)) if !is_valkey && version >= (8, 4) => Some(PlainDelete::DelEx),
                _ => None,
            },
        }
    }

    /// Every write is on disk before the server answers, rewrites
    /// included.
    pub(crate) fn durable(&self) -> bool {
        self.aof && self.fsync_always && !self.skips_fsync_on_rewrite
    }
}

/// The text of a bulk, verbatim or simple string reply.
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The name-value pairs of a `CONFIG GET` reply (an array of names and
/// values in RESP2, a map in RESP3).
pub(crate) fn config_pairs(reply: &Value) -> Vec<(String, String)> {
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?)?)))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The value of `name` in `INFO` text.
pub(crate) fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == name).then(|| v.trim())
    })
}

/// Why a server does not vote now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quarantine {
    /// How long ago its server started (strict mode), or this manager saw
    /// the change (witnessed).
    pub(crate) up: Duration,
    /// How long it is still kept out.
    pub(crate) left: Duration,
    /// Its restart was witnessed (else: strict mode).
    pub(crate) witnessed: bool,
}

/// What one server's connections have told, over time.
#[derive(Debug, Default)]
pub(crate) struct RunWatch {
    state: Mutex<State>,
    /// It runs in cluster mode: read on every answer of a plain node, so
    /// kept apart from `state` (one atomic load, no lock).
    cluster_mode: AtomicBool,
    /// The quarantine was found over for good (see
    /// [`quarantine_now`](Self::quarantine_now)) while the longest TTL was
    /// this less one; 0 while it is not.
    settled: AtomicU64,
    /// A connection's handshake told something (see [`met`](Self::met)).
    met: AtomicBool,
    /// How many times the `run_id` read changed (the first read counts).
    runs: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    run_id: Option<String>,
    /// When this manager last read the server's uptime (on this
    /// machine's clock), and the uptime read (on the server's clock).
    uptime: Option<(Instant, Duration)>,
    durable: bool,
    /// When this manager last saw the run_id change (on this machine's
    /// clock); `None` while it never did (a witnessed change).
    changed: Option<Instant>,
    /// `INFO` refusal already reported.
    refusal_noted: bool,
}

/// What a new connection's identity meant.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Noticed {
    /// Nothing new.
    Same,
    /// The server restarted since this manager last connected.
    Restarted,
    /// `INFO` was refused, for the first time.
    Unreadable,
}

impl RunWatch {
    /// Takes in what a connection made at `now` read.
    pub(crate) fn observe(&self, identity: &Identity, now: Instant) -> Noticed {
        self.met.store(true, Ordering::Relaxed);
        let mut state = self.state.lock();
        // What it tells may start a quarantine: looked at again.
        self.settled.store(0, Ordering::Release);
        if identity.info_refused {
            return if std::mem::replace(&mut state.refusal_noted, true) {
                Noticed::Same
            } else {
                Noticed::Unreadable
            };
        }
        let Some(run_id) = &identity.run_id else {
            return Noticed::Same;
        };
        let restarted = state.run_id.as_ref().is_some_and(|old| old != run_id);
        if state.run_id.as_ref() != Some(run_id) {
            state.run_id = Some(run_id.clone());
            self.runs.fetch_add(1, Ordering::Release);
            if restarted {
                state.changed = Some(now);
            }
        }
        state.uptime = identity.uptime.map(|up| (now, up));
        state.durable = identity.durable();
        self.cluster_mode
            .store(identity.cluster_mode, Ordering::Relaxed);
        if restarted {
            Noticed::Restarted
        } else {
            Noticed::Same
        }
    }

    /// Whether a connection to the server has been made (its handshake
    /// read what it could of the server's identity).
    pub(crate) fn met(&self) -> bool {
        self.met.load(Ordering::Relaxed)
    }

    /// How many times the `run_id` read changed: what a copy of
    /// [`run_digest`](Self::run_digest) is good for while it stays.
    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Acquire)
    }

    /// The first `digits` hex digits of the `run_id` the last connection
    /// read (none while none was read, or `INFO` is refused).
    pub(crate) fn run_digest(&self, digits: usize) -> Option<Vec<u8>> {
        let state = self.state.lock();
        let run = state.run_id.as_deref()?.as_bytes();
        Some(run[..digits.min(run.len())].to_vec())
    }

    /// Whether the server said it runs in cluster mode.
    pub(crate) fn cluster_mode(&self) -> bool {
        self.cluster_mode.load(Ordering::Relaxed)
    }

    /// Whether the server is kept out now, under `policy` (asked for each
    /// answer that decides a holder). A quarantine found over stays over
    /// while nothing changes: time only moves on, and what could start
    /// one again (a connection telling something new, a longer TTL
    /// lengthening a witnessed restart's) looks again. Until then, no
    /// lock and no clock read.
    pub(crate) fn quarantine_now(&self, policy: &Policy) -> Option<Quarantine> {
        let stamp = policy.longest_ttl_ms.load(Ordering::Relaxed) + 1;
        if self.settled.load(Ordering::Acquire) == stamp {
            return None;
        }
        let state = self.state.lock();
        let q = Self::kept_out(&state, policy, Instant::now());
        if q.is_none() {
            // Under the lock: an `observe` after this resets it.
            self.settled.store(stamp, Ordering::Release);
        }
        q
    }

    /// Whether the server is kept out at `now`, under `policy`.
    #[cfg(test)]
    pub(crate) fn quarantine(&self, policy: &Policy, now: Instant) -> Option<Quarantine> {
        Self::kept_out(&self.state.lock(), policy, now)
    }

    /// Whether a server of `state` is kept out at `now`, under `policy`.
    fn kept_out(state: &State, policy: &Policy, now: Instant) -> Option<Quarantine> {
        // A witnessed change counts from when it was seen, whatever the
        // server's uptime or durability (see the crate docs, "Restarts").
        if let Some(changed) = state.changed {
            let since = now.saturating_duration_since(changed);
            let period = policy.witnessed();
            if since < period {
                return Some(Quarantine {
                    up: since,
                    left: period - since,
                    witnessed: true,
                });
            }
        }
        let q = policy.stretched(policy.strict.filter(|_| !state.durable)?);
        // The uptime was counted on the server's clock, which may run fast
        // by the drift factor: at least the uptime less that much has
        // passed since it started (a server whose clock runs 1% fast
        // reports 10.1 s after 10 s: taken at its word, the quarantine
        // ended early by that much).
        let (seen, uptime) = state.uptime?;
        let up = now.saturating_duration_since(seen) + uptime.div_f64(1.0 + policy.drift);
        (up < q).then(|| Quarantine {
            up,
            left: q - up,
            witnessed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn id(run: &str, up_s: u64) -> Identity {
        Identity {
            run_id: Some(run.into()),
            uptime: Some(Duration::from_secs(up_s)),
            ..Identity::default()
        }
    }

    #[test]
    fn a_fresh_server_votes_and_a_witnessed_restart_is_kept_out_for_the_longest_ttl() {
        let policy = Policy::new(None, 0.0);
        policy.note_ttl(10_000);
        let w = RunWatch::default();
        let t0 = Instant::now();
        assert_eq!(w.observe(&id("a", 0), t0), Noticed::Same);
        assert_eq!(w.quarantine(&policy, t0), None, "a fresh deployment votes");
        // Restarted: a new run id, up 0 s when seen at t0 + 5 s.
        let t1 = t0 + 5 * S;
        assert_eq!(w.observe(&id("b", 0), t1), Noticed::Restarted);
        let q = w.quarantine(&policy, t1 + S).unwrap();
        assert_eq!((q.up, q.left, q.witnessed), (S, 9 * S, true));
        assert_eq!(w.quarantine(&policy, t1 + 10 * S), None);
        // Another connection to the same run later: still the same rule.
        assert_eq!(w.observe(&id("b", 3), t1 + 3 * S), Noticed::Same);
        assert!(w.quarantine(&policy, t1 + 4 * S).is_some());
    }

    #[test]
    fn a_quarantine_found_over_is_looked_at_again_when_a_restart_or_a_longer_ttl_comes() {
        let policy = Policy::new(None, 0.0);
        policy.note_ttl(100);
        let w = RunWatch::default();
        assert_eq!(w.observe(&id("a", 0), Instant::now()), Noticed::Same);
        assert_eq!(w.quarantine_now(&policy), None, "a fresh deployment votes");
        assert_eq!(w.observe(&id("b", 0), Instant::now()), Noticed::Restarted);
        assert!(w.quarantine_now(&policy).is_some(), "a witnessed restart");
        std::thread::sleep(150 * MS);
        assert_eq!(
            w.quarantine_now(&policy),
            None,
            "over after the longest TTL"
        );
        assert_eq!(w.quarantine_now(&policy), None, "and stays over");
        // A longer TTL lengthens the witnessed restart's quarantine.
        policy.note_ttl(60_000);
        assert!(w.quarantine_now(&policy).is_some(), "a longer TTL");
        // Over again (a short TTL does not shorten it back), then a restart.
        let short = Policy::new(None, 0.0);
        short.note_ttl(100);
        assert_eq!(w.quarantine_now(&short), None);
        assert_eq!(w.observe(&id("c", 0), Instant::now()), Noticed::Restarted);
        assert!(
            w.quarantine_now(&short).is_some(),
            "a restart after it settled"
        );
    }

    #[test]
    fn strict_mode_keeps_out_any_recent_start_and_the_longer_period_wins() {
        let policy = Policy::new(Some(20 * S), 0.0);
        policy.note_ttl(30_000);
        let w = RunWatch::default();
        let t0 = Instant::now() + 100 * S;
        w.observe(&id("a", 5), t0);
        let q = w.quarantine(&policy, t0).unwrap();
        assert_eq!((q.up, q.left, q.witnessed), (5 * S, 15 * S, false));
        assert_eq!(w.quarantine(&policy, t0 + 15 * S), None);
        // Witnessed: max(strict, longest TTL) = 30 s.
        w.observe(&id("b", 0), t0 + 20 * S);
        let q = w.quarantine(&policy, t0 + 40 * S).unwrap();
        assert_eq!(q.left, 10 * S);
    }

    /// Clocks that run fast by the drift factor (issue 41): a server
    /// whose clock is 1% fast reports 10 s of uptime after 9.9 s, and
    /// this machine's clock, 1% fast, counts 10 s in 9.9 s. With the
    /// factor, the quarantine counts the uptime as 10 s / 1.01 and lasts
    /// the period and 1% more; without it, a 10 s strict quarantine was
    /// over at once, and a witnessed one after 10 s.
    #[test]
    fn the_quarantine_allows_for_clocks_that_run_fast_by_the_drift_factor() {
        let t0 = Instant::now() + 100 * S;
        let w = RunWatch::default();
        w.observe(&id("a", 10), t0);
        assert_eq!(w.quarantine(&Policy::new(Some(10 * S), 0.0), t0), None);
        let policy = Policy::new(Some(10 * S), 0.01);
        let q = w.quarantine(&policy, t0).expect("still kept out");
        assert!(q.left > 190 * MS && q.left < 200 * MS, "{:?}", q.left);
        assert!(w.quarantine(&policy, t0 + 150 * MS).is_some());
        assert_eq!(w.quarantine(&policy, t0 + 200 * MS), None);
        // Witnessed: the longest TTL (10 s) and 1% more.
        policy.note_ttl(10_000);
        w.observe(&id("b", 0), t0 + S);
        assert!(w.quarantine(&policy, t0 + 11 * S + 50 * MS).is_some());
        assert_eq!(w.quarantine(&policy, t0 + 11 * S + 100 * MS), None);
    }

    const MS: Duration = Duration::from_millis(1);

    fn durable(run: &str, up_s: u64) -> Identity {
        Identity {
            aof: true,
            fsync_always: true,
            skips_fsync_on_rewrite: false,
            ..id(run, up_s)
        }
    }

    #[test]
    fn a_server_that_syncs_every_write_is_exempt_from_strict_mode_only() {
        let policy = Policy::new(Some(60 * S), 0.0);
        policy.note_ttl(10_000);
        let w = RunWatch::default();
        let t0 = Instant::now();
        w.observe(&durable("a", 0), t0);
        assert_eq!(w.quarantine(&policy, t0), None);
        // A witnessed change: the server now behind the address may not be
        // the one that wrote the file, so it is kept out all the same.
        w.observe(&durable("b", 0), t0 + S);
        assert!(w.quarantine(&policy, t0 + S).is_some());
        // Every second is not enough even for strict mode.
        let w = RunWatch::default();
        w.observe(
            &Identity {
                aof: true,
                ..id("c", 0)
            },
            t0,
        );
        assert!(w.quarantine(&policy, t0).is_some());
        // Nor is always, when rewrites skip the fsync.
        let w = RunWatch::default();
        w.observe(
            &Identity {
                skips_fsync_on_rewrite: true,
                ..durable("d", 0)
            },
            t0,
        );
        assert!(w.quarantine(&policy, t0).is_some());
    }

    #[test]
    fn a_witnessed_change_counts_from_when_it_was_seen_not_from_the_uptime() {
        let policy = Policy::new(None, 0.0);
        policy.note_ttl(10_000);
        let w = RunWatch::default();
        let t0 = Instant::now();
        w.observe(&id("a", 100), t0);
        // The address now reaches another server, up for a day.
        let seen = t0 + 5 * S;
        assert_eq!(w.observe(&id("b", 86_400), seen), Noticed::Restarted);
        let q = w.quarantine(&policy, seen + S).unwrap();
        assert_eq!((q.up, q.left, q.witnessed), (S, 9 * S, true));
        assert!(w.quarantine(&policy, seen + 9 * S).is_some());
        assert_eq!(w.quarantine(&policy, seen + 10 * S), None);
    }

    #[test]
    fn refused_info_is_noted_once_and_changes_nothing() {
        let w = RunWatch::default();
        let refused = Identity {
            info_refused: true,
            ..Identity::default()
        };
        assert_eq!(w.observe(&refused, Instant::now()), Noticed::Unreadable);
        assert_eq!(w.observe(&refused, Instant::now()), Noticed::Same);
        assert_eq!(
            w.quarantine(&Policy::new(Some(S), 0.0), Instant::now()),
            None
        );
    }

    #[test]
    fn identity_is_read_from_info_and_config() {
        let server = Value::BulkString(
            b"# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n"
                .to_vec(),
        );
        let config = |on: &str, fsync: &str| {
            Value::Array(
                [
                    "appendonly",
                    on,
                    "appendfilename",
                    "a.aof",
                    "appendfsync",
                    fsync,
                ]
                .iter()
                .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                .collect(),
            )
        };
        let rewrite = |skip: &str| {
            Value::Array(
                ["no-appendfsync-on-rewrite", skip]
                    .iter()
                    .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                    .collect(),
            )
        };
        let no = rewrite("no");
        let i = Identity::read(Some(&server), Some(&config("yes", "always")), Some(&no));
        assert_eq!(i.run_id.as_deref(), Some("abc123"));
        assert_eq!(i.uptime, Some(42 * S));
        assert!(i.durable());
        let read = |c: &Value, r: Option<&Value>| Identity::read(Some(&server), Some(c), r);
        assert!(!read(&config("yes", "everysec"), Some(&no)).durable());
        assert!(!read(&config("no", "always"), Some(&no)).durable());
        assert!(!read(&config("yes", "always"), Some(&rewrite("yes"))).durable());
        // Not known: taken as skipping.
        assert!(!read(&config("yes", "always"), None).durable());
        let i = Identity::read(Some(&server), None, None);
        assert!(!i.info_refused && !i.durable());
        assert!(Identity::read(None, None, None).info_refused);
    }

    #[test]
    fn plain_delete_is_valkey_9_or_redis_8_4_and_later_and_unknown_is_without() {
        let info = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let del = |text: &str| Identity::read(Some(&info(text)), None, None).plain_delete;
        let ifeq = Some(PlainDelete::DelIfEq);
        let delex = Some(PlainDelete::DelEx);
        let redis = "# Server\r\nredis_version:7.2.4\r\n";
        assert_eq!(del(redis), None);
        assert_eq!(del(&format!("{redis}valkey_version:8.1.1\r\n")), None);
        assert_eq!(del(&format!("{redis}valkey_version:9.0.0\r\n")), ifeq);
        assert_eq!(del(&format!("{redis}valkey_version:9.1.2\r\n")), ifeq);
        assert_eq!(del(&format!("{redis}valkey_version:10.0.0\r\n")), ifeq);
        assert_eq!(del(&format!("{redis}valkey_version:9\r\n")), ifeq);
        // Redis: DELEX from 8.4; a Valkey never gets it, whatever its
        // redis_version says.
        let redis_at = |v: &str| del(&format!("# Server\r\nredis_version:{v}\r\n"));
        assert_eq!(redis_at("8.2.3"), None);
        assert_eq!(redis_at("8.4.0"), delex);
        assert_eq!(redis_at("8.6.3"), delex);
        assert_eq!(redis_at("9.0.0"), delex);
        assert_eq!(redis_at("8"), None);
        assert_eq!(redis_at("eight"), None);
        assert_eq!(
            del("# Server\r\nredis_version:8.4.0\r\nvalkey_version:8.1.1\r\n"),
            None
        );
        assert_eq!(
            del("# Server\r\nredis_version:8.4.0\r\nvalkey_version:x\r\n"),
            None
        );
        assert_eq!(
            del("# Server\r\nredis_version:8.4.0\r\nserver_name:valkey\r\n"),
            None
        );
        assert_eq!(Identity::read(None, None, None).plain_delete, None);
    }
}
