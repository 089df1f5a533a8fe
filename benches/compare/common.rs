//! What every table shares: the raw floors, the managers, timing and
//! the report.

pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::thread;
pub(crate) use std::time::{Duration, Instant};

pub(crate) use redis::{ConnectionLike, Value};
pub(crate) use redlock_sync::LockManager;

pub(crate) use crate::{admin, server};

pub(crate) const TTL: Duration = Duration::from_secs(10);
pub(crate) const DELAY: Duration = Duration::from_micros(250);

pub(crate) const UNLOCK_SRC: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
"#;

/// Raw persistent connections: the floors.
pub(crate) struct Raw {
    pub(crate) cons: Vec<redis::Connection>,
    pub(crate) set: Vec<u8>,
    pub(crate) unlock: Vec<u8>,
    /// Replies to `set` and to `unlock`, per node.
    pub(crate) replies: (usize, usize),
}

impl Raw {
    pub(crate) fn new(urls: &[String], key: &str) -> Raw {
        let cons: Vec<redis::Connection> = urls
            .iter()
            .map(|u| {
                redis::Client::open(u.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap()
            })
            .collect();
        let token = "0123456789abcdef0123456789abcdef";
        let set = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .get_packed_command();
        let script = redis::Script::new(UNLOCK_SRC);
        let mut raw = Raw {
            cons,
            set,
            unlock: redis::cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(1)
                .arg(key)
                .arg(token)
                .get_packed_command(),
            replies: (1, 1),
        };
        for con in &mut raw.cons {
            // Its own unlock script (the `redlock` crate's), then the
            // library's (`same_as_default`'s, and the floors').
            script.load(con).unwrap();
            load_scripts(con);
        }
        raw
    }

    /// The commands the library's default lock cycle sends (fencing,
    /// fair waiting and waking on release on): `SET key token NX GET PX
    /// ttl` and the fencing counter's count script; then the unlock script
    /// with the queue's key and the release's `PUBLISH`: the floor of the
    /// default cycle, written once (before Redis 7.0, plain `NX`, as the
    /// library sends it there).
    pub(crate) fn same_as_default(urls: &[String], key: &str) -> Raw {
        let mut raw = Raw::new(urls, key);
        // A token as the library's names its holder and three servers.
        let token = "0123456789abcdef0123456789abcdef@host/1234!0a1b2c3d.4e5f6a7b.8c9d0e1f#1";
        let channel = format!("{key}:redlock-release{{1}}");
        (raw.set, raw.unlock, raw.replies) =
            cycle_commands(key, token, true, Delete::Script, channel.as_bytes());
        raw
    }

    /// SET NX PX to each node in turn, then the unlock script to each.
    pub(crate) fn sequential(&mut self) {
        for con in &mut self.cons {
            assert_eq!(con.req_packed_command(&self.set).unwrap(), Value::Okay);
        }
        for con in &mut self.cons {
            assert_eq!(con.req_packed_command(&self.unlock).unwrap(), Value::Int(1));
        }
    }

    /// SET to every node, then every reply; the same for the script.
    pub(crate) fn multiplexed(&mut self) {
        let (set_replies, unlock_replies) = self.replies;
        for con in &mut self.cons {
            con.send_packed_command(&self.set).unwrap();
        }
        for con in &mut self.cons {
            let first = con.recv_response().unwrap();
            assert!(matches!(first, Value::Okay | Value::Nil), "{first:?}");
            for _ in 1..set_replies {
                con.recv_response().unwrap();
            }
        }
        for con in &mut self.cons {
            con.send_packed_command(&self.unlock).unwrap();
        }
        for con in &mut self.cons {
            assert_eq!(con.recv_response().unwrap(), Value::Int(1));
            for _ in 1..unlock_replies {
                con.recv_response().unwrap();
            }
        }
    }
}

/// A release's delete: the unlock script, or the server's own
/// compare-and-delete where it has one.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Delete {
    Script,
    DelIfEq,
    DelEx,
}

impl Delete {
    /// The server's own compare-and-delete, if it takes one (asked on
    /// `con`, of a key nobody holds), else the script.
    pub(crate) fn of(con: &mut redis::Connection) -> Delete {
        [Delete::DelIfEq, Delete::DelEx]
            .into_iter()
            .find(|d| {
                d.cmd("bench:delete-probe", "v", &unlock_script())
                    .query::<i64>(con)
                    .is_ok()
            })
            .unwrap_or(Delete::Script)
    }

    /// The command deleting `key` if it holds `token`.
    pub(crate) fn cmd(self, key: &str, token: &str, script: &redis::Script) -> redis::Cmd {
        match self {
            Delete::DelIfEq => redis::cmd("DELIFEQ").arg(key).arg(token).clone(),
            Delete::DelEx => redis::cmd("DELEX").arg(key).arg("IFEQ").arg(token).clone(),
            Delete::Script => redis::cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(1)
                .arg(key)
                .arg(token)
                .clone(),
        }
    }

    /// Its row's name.
    pub(crate) fn raw_name(self) -> &'static str {
        match self {
            Delete::DelIfEq => "raw DELIFEQ",
            Delete::DelEx => "raw DELEX IFEQ",
            Delete::Script => "raw EVALSHA unlock",
        }
    }
}

/// The library's unlock script.
pub(crate) fn unlock_script() -> redis::Script {
    redis::Script::new(include_str!("../../src/scripts/lock/unlock.lua"))
}

/// The library's script that counts a fencing counter up for an attempt
/// (its source as the library sends it: the shared function, then the
/// script).
pub(crate) fn count_script() -> redis::Script {
    redis::Script::new(concat!(
        include_str!("../../src/scripts/lock/counter.lua"),
        include_str!("../../src/scripts/lock/count.lua")
    ))
}

/// Whether the server takes `SET ... NX GET` (Redis 7.0 and later,
/// Valkey): the library's acquisition on it, and so the raw floors',
/// uses it; before, plain `NX`.
pub(crate) fn modern() -> bool {
    server::server_at_least(7, 0)
}

/// The acquisition's `SET key token NX GET PX ttl` as the library sends
/// it to this server (plain `NX` before Redis 7.0, see [`modern`]).
pub(crate) fn lock_set(key: &str, token: &str) -> redis::Cmd {
    let mut set = redis::cmd("SET");
    set.arg(key).arg(token).arg("NX");
    if modern() {
        set.arg("GET");
    }
    set.arg("PX").arg(TTL.as_millis() as u64);
    set
}

/// Loads the scripts the raw floors send by hash.
pub(crate) fn load_scripts(con: &mut redis::Connection) {
    unlock_script().load(con).unwrap();
    count_script().load(con).unwrap();
}

/// What a lock key's `SET` answers when it takes the key: nil to `NX GET`
/// (Redis 7.0 and later), `OK` to plain `NX` (before; nil there is a
/// refusal).
pub(crate) fn taken_reply() -> Value {
    if modern() { Value::Nil } else { Value::Okay }
}

/// A lock + release cycle's two writes as the library sends them, packed
/// once for a raw connection, and how many replies each gets: `SET key
/// token NX GET PX ttl`, and with `fenced` the fencing counter's count
/// script; then the release (with `fenced` the default's, the script with
/// the queue's key; else `delete`) and its `PUBLISH` on `channel`. Before
/// Redis 7.0 (see [`modern`]), as the library sends them there: plain
/// `NX`.
pub(crate) fn cycle_commands(
    key: &str,
    token: &str,
    fenced: bool,
    delete: Delete,
    channel: &[u8],
) -> (Vec<u8>, Vec<u8>, (usize, usize)) {
    let script = unlock_script();
    let fence = format!("{key}:redlock-fence{{1}}");
    let keep = 600_000u64;
    let mut set = redis::pipe();
    set.add_command(lock_set(key, token));
    if fenced {
        set.cmd("EVALSHA")
            .arg(count_script().get_hash())
            .arg(1)
            .arg(&fence)
            .arg(1_795_000_000_000_000u64)
            .arg(keep);
    }
    let mut release = redis::pipe();
    if fenced {
        release
            .cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(2)
            .arg(key)
            .arg(format!("{key}:redlock-queue{{1}}"))
            .arg(token);
    } else {
        release.add_command(delete.cmd(key, token, &script));
    }
    release
        .cmd("PUBLISH")
        .arg(channel)
        .arg(format!("{token}:1"));
    (
        set.get_packed_pipeline(),
        release.get_packed_pipeline(),
        (if fenced { 2 } else { 1 }, 2),
    )
}

#[derive(Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) median: Duration,
    pub(crate) p99: Duration,
}

pub(crate) fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort_unstable();
    Stats {
        median: samples[samples.len() / 2],
        p99: samples[(samples.len() * 99 / 100).min(samples.len() - 1)],
    }
}

/// Times `n` cycles of each implementation, interleaved in small batches
/// in a rotating order so that drift in the machine's load, and whatever
/// one implementation leaves behind for the next, hit them all alike.
pub(crate) fn race(n: usize, impls: &mut [(&str, &mut dyn FnMut())]) -> Vec<(String, Stats)> {
    for (_, f) in impls.iter_mut() {
        for _ in 0..20 {
            f();
        }
    }
    let mut samples: Vec<Vec<Duration>> = impls.iter().map(|_| Vec::with_capacity(n)).collect();
    let batch = 10;
    let count = impls.len();
    for round in 0..n.div_ceil(batch) {
        // Each round starts with another implementation, so that none
        // always follows the same one (the rival's many connections, say).
        for k in 0..count {
            let i = (round + k) % count;
            let f = &mut impls[i].1;
            for _ in 0..batch {
                let start = Instant::now();
                f();
                samples[i].push(start.elapsed());
            }
        }
    }
    impls
        .iter()
        .zip(samples)
        .map(|((name, _), s)| (name.to_string(), stats(s)))
        .collect()
}

pub(crate) fn manager(urls: &[String]) -> LockManager {
    manager_with(urls, true)
}

pub(crate) fn manager_with(urls: &[String], fencing: bool) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(50))
        .fencing(fencing)
        .build()
        .unwrap()
}

/// A manager with the default settings but for waking on release.
pub(crate) fn manager_waking(urls: &[String], wake: bool, retry_delay: Duration) -> LockManager {
    manager_fair(urls, wake, retry_delay, Fair::Off)
}

/// How a bench manager waits: unfair, fair (the default, yields
/// included), or fair without yields (`fair_yield(None)`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fair {
    Off,
    On,
    NoYield,
}

impl Fair {
    /// As the fairness table's column says it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Fair::Off => "off",
            Fair::On => "on",
            Fair::NoYield => "on, no yield",
        }
    }

    /// As a child process is told (`REDLOCK_BENCH_FAIR`).
    pub(crate) fn env(self) -> &'static str {
        match self {
            Fair::Off => "0",
            Fair::On => "1",
            Fair::NoYield => "2",
        }
    }

    pub(crate) fn from_env() -> Fair {
        match std::env::var("REDLOCK_BENCH_FAIR").as_deref() {
            Ok("1") => Fair::On,
            Ok("2") => Fair::NoYield,
            _ => Fair::Off,
        }
    }
}

pub(crate) fn manager_fair(
    urls: &[String],
    wake: bool,
    retry_delay: Duration,
    fair: Fair,
) -> LockManager {
    let builder = LockManager::builder()
        .nodes(urls)
        .retry(3, retry_delay)
        .wake_on_release(wake)
        .fair(fair != Fair::Off);
    match fair {
        Fair::NoYield => builder.fair_yield(None),
        _ => builder,
    }
    .build()
    .unwrap()
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) struct Report {
    pub(crate) text: String,
    pub(crate) json: String,
}

impl Report {
    pub(crate) fn new() -> Report {
        Report {
            text: String::new(),
            json: String::from("["),
        }
    }

    /// Adds one object to the JSON array (commas around it, as the
    /// tables wrote them, are the report's business).
    pub(crate) fn record(&mut self, item: String) {
        let item = item.trim_matches(',');
        if self.json.len() > 1 {
            self.json.push(',');
        }
        self.json.push_str(item);
    }

    /// Closes the JSON array and writes it to `target/bench-compare.json`,
    /// the text beside it (`.txt`): whichever sections ran.
    pub(crate) fn finish(mut self) {
        self.json.push(']');
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        let path = std::path::Path::new(&target).join("bench-compare.json");
        std::fs::write(&path, &self.json).unwrap();
        std::fs::write(path.with_extension("txt"), &self.text).unwrap();
        println!("\nwrote {}", path.display());
    }

    pub(crate) fn line(&mut self, s: String) {
        println!("{s}");
        self.text.push_str(&s);
        self.text.push('\n');
    }
}

/// Cycles per second with `threads` threads, each running its own cycle
/// (made by `make(thread)`, returning whether it won) until `run` is over;
/// also each thread's wins.
pub(crate) fn throughput<F>(threads: usize, run: Duration, make: F) -> (f64, Vec<u64>)
where
    F: Fn(usize) -> Box<dyn FnMut() -> bool + Send> + Sync,
{
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let per_thread: Vec<u64> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, total, make) = (&stop, &total, &make);
                s.spawn(move || {
                    let mut cycle = make(t);
                    let mut wins = 0;
                    while !stop.load(Ordering::Relaxed) {
                        if cycle() {
                            wins += 1;
                        }
                    }
                    total.fetch_add(wins, Ordering::Relaxed);
                    wins
                })
            })
            .collect();
        thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (
        total.load(Ordering::Relaxed) as f64 / run.as_secs_f64(),
        per_thread,
    )
}
