//! Side-by-side benchmark: redlock-sync against the `redlock` crate and two
//! raw floors on persistent `redis` connections, on 1, 3 and 5 local
//! `redis-server` nodes, directly and through a 250 µs-each-way delay
//! proxy; throughput with several threads; acquire latency with a hung
//! node.
//!
//! ```text
//! cargo bench --bench compare            # full run, a few minutes
//! cargo bench --bench compare -- --quick # fewer samples
//! cargo bench --bench compare --features tls # adds TLS against plain
//! cargo bench --bench compare -- --release   # release by DELIFEQ, DELEX or script
//! cargo bench --bench compare -- --extend    # extend by script (SET IFEQ raced)
//! ```
//!
//! Loopback figures depend on where the scheduler puts the processes;
//! BENCHMARKS.md names a layout for each row: `taskset -c 1 cargo bench
//! ...` (bench, client and servers on one core), and with
//! `REDLOCK_SERVER_CPUS=0` as well (the servers it starts pinned to core
//! 0, the client apart on core 1).
//!
//! Prints a table and writes the same figures to
//! `target/bench-compare.json`. Speed is compared as ratios within one run,
//! so the machine's noise mostly cancels.

#[path = "../tests/it/support/proxy.rs"]
mod proxy;
#[path = "../tests/it/support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../tests/it/support/server.rs"]
mod server;

/// A direct connection (what the cluster support module expects).
fn admin(server: &server::Server) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}
#[cfg(feature = "tls")]
#[path = "../tests/it/support/tls.rs"]
#[allow(dead_code)]
mod tls;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, Value};
use redlock_sync::LockManager;

const TTL: Duration = Duration::from_secs(10);
const DELAY: Duration = Duration::from_micros(250);

const UNLOCK_SRC: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
"#;

/// Raw persistent connections: the floors.
struct Raw {
    cons: Vec<redis::Connection>,
    set: Vec<u8>,
    unlock: Vec<u8>,
    /// Replies to `set` and to `unlock`, per node.
    replies: (usize, usize),
}

impl Raw {
    fn new(urls: &[String], key: &str) -> Raw {
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
    fn same_as_default(urls: &[String], key: &str) -> Raw {
        let mut raw = Raw::new(urls, key);
        // A token as the library's names its holder and three servers.
        let token = "0123456789abcdef0123456789abcdef@host/1234!0a1b2c3d.4e5f6a7b.8c9d0e1f#1";
        let channel = format!("{key}:redlock-release{{1}}");
        (raw.set, raw.unlock, raw.replies) =
            cycle_commands(key, token, true, Delete::Script, channel.as_bytes());
        raw
    }

    /// SET NX PX to each node in turn, then the unlock script to each.
    fn sequential(&mut self) {
        for con in &mut self.cons {
            assert_eq!(con.req_packed_command(&self.set).unwrap(), Value::Okay);
        }
        for con in &mut self.cons {
            assert_eq!(con.req_packed_command(&self.unlock).unwrap(), Value::Int(1));
        }
    }

    /// SET to every node, then every reply; the same for the script.
    fn multiplexed(&mut self) {
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
enum Delete {
    Script,
    DelIfEq,
    DelEx,
}

impl Delete {
    /// The server's own compare-and-delete, if it takes one (asked on
    /// `con`, of a key nobody holds), else the script.
    fn of(con: &mut redis::Connection) -> Delete {
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
    fn cmd(self, key: &str, token: &str, script: &redis::Script) -> redis::Cmd {
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
    fn raw_name(self) -> &'static str {
        match self {
            Delete::DelIfEq => "raw DELIFEQ",
            Delete::DelEx => "raw DELEX IFEQ",
            Delete::Script => "raw EVALSHA unlock",
        }
    }
}

/// The library's unlock script.
fn unlock_script() -> redis::Script {
    redis::Script::new(include_str!("../src/scripts/lock/unlock.lua"))
}

/// The library's script that counts a fencing counter up for an attempt
/// (its source as the library sends it: the shared function, then the
/// script).
fn count_script() -> redis::Script {
    redis::Script::new(concat!(
        include_str!("../src/scripts/lock/counter.lua"),
        include_str!("../src/scripts/lock/count.lua")
    ))
}

/// Whether the server takes `SET ... NX GET` (Redis 7.0 and later,
/// Valkey): the library's acquisition on it, and so the raw floors',
/// uses it; before, plain `NX`.
fn modern() -> bool {
    server::server_at_least(7, 0)
}

/// The acquisition's `SET key token NX GET PX ttl` as the library sends
/// it to this server (plain `NX` before Redis 7.0, see [`modern`]).
fn lock_set(key: &str, token: &str) -> redis::Cmd {
    let mut set = redis::cmd("SET");
    set.arg(key).arg(token).arg("NX");
    if modern() {
        set.arg("GET");
    }
    set.arg("PX").arg(TTL.as_millis() as u64);
    set
}

/// Loads the scripts the raw floors send by hash.
fn load_scripts(con: &mut redis::Connection) {
    unlock_script().load(con).unwrap();
    count_script().load(con).unwrap();
}

/// What a lock key's `SET` answers when it takes the key: nil to `NX GET`
/// (Redis 7.0 and later), `OK` to plain `NX` (before; nil there is a
/// refusal).
fn taken_reply() -> Value {
    if modern() { Value::Nil } else { Value::Okay }
}

/// A lock + release cycle's two writes as the library sends them, packed
/// once for a raw connection, and how many replies each gets: `SET key
/// token NX GET PX ttl`, and with `fenced` the fencing counter's count
/// script; then the release (with `fenced` the default's, the script with
/// the queue's key; else `delete`) and its `PUBLISH` on `channel`. Before
/// Redis 7.0 (see [`modern`]), as the library sends them there: plain
/// `NX`.
fn cycle_commands(
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
struct Stats {
    median: Duration,
    p99: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort_unstable();
    Stats {
        median: samples[samples.len() / 2],
        p99: samples[(samples.len() * 99 / 100).min(samples.len() - 1)],
    }
}

/// Times `n` cycles of each implementation, interleaved in small batches
/// in a rotating order so that drift in the machine's load, and whatever
/// one implementation leaves behind for the next, hit them all alike.
fn race(n: usize, impls: &mut [(&str, &mut dyn FnMut())]) -> Vec<(String, Stats)> {
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

fn manager(urls: &[String]) -> LockManager {
    manager_with(urls, true)
}

fn manager_with(urls: &[String], fencing: bool) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(50))
        .fencing(fencing)
        .build()
        .unwrap()
}

/// A manager with the default settings but for waking on release.
fn manager_waking(urls: &[String], wake: bool, retry_delay: Duration) -> LockManager {
    manager_fair(urls, wake, retry_delay, Fair::Off)
}

/// How a bench manager waits: unfair, fair (the default, yields
/// included), or fair without yields (`fair_yield(None)`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fair {
    Off,
    On,
    NoYield,
}

impl Fair {
    /// As the fairness table's column says it.
    fn label(self) -> &'static str {
        match self {
            Fair::Off => "off",
            Fair::On => "on",
            Fair::NoYield => "on, no yield",
        }
    }

    /// As a child process is told (`REDLOCK_BENCH_FAIR`).
    fn env(self) -> &'static str {
        match self {
            Fair::Off => "0",
            Fair::On => "1",
            Fair::NoYield => "2",
        }
    }

    fn from_env() -> Fair {
        match std::env::var("REDLOCK_BENCH_FAIR").as_deref() {
            Ok("1") => Fair::On,
            Ok("2") => Fair::NoYield,
            _ => Fair::Off,
        }
    }
}

fn manager_fair(urls: &[String], wake: bool, retry_delay: Duration, fair: Fair) -> LockManager {
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

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Report {
    text: String,
    json: String,
}

impl Report {
    fn line(&mut self, s: String) {
        println!("{s}");
        self.text.push_str(&s);
        self.text.push('\n');
    }
}

fn cycles(report: &mut Report, urls: &[String], network: &str, n: usize, with_rival: bool) {
    let key = format!("bench:{network}:{}", urls.len());
    let dlm = manager(urls);
    let plain = manager_with(urls, false);
    let plain_key = format!("{key}:nofence");
    let mut raw_seq = Raw::new(urls, &format!("{key}:seq"));
    let mut raw_mux = Raw::new(urls, &format!("{key}:mux"));
    let mut raw_same = Raw::same_as_default(urls, &format!("{key}:same"));
    let rival = redlock::RedLock::new(urls.to_vec());
    let mut ours = || dlm.lock(&key, TTL).unwrap().release().unwrap();
    let mut ours_plain = || plain.lock(&plain_key, TTL).unwrap().release().unwrap();
    let silent = manager_waking(urls, false, Duration::from_millis(200));
    let silent_key = format!("{key}:nowake");
    let mut ours_silent = || silent.lock(&silent_key, TTL).unwrap().release().unwrap();
    let mut seq = || raw_seq.sequential();
    let mut mux = || raw_mux.multiplexed();
    let mut same = || raw_same.multiplexed();
    let rival_key = format!("{key}:rival");
    let mut theirs = || {
        let lock = rival
            .lock(rival_key.as_bytes(), TTL.as_millis() as usize)
            .unwrap()
            .unwrap();
        rival.unlock(&lock);
    };
    let mut impls: Vec<(&str, &mut dyn FnMut())> = vec![
        ("redlock-sync", &mut ours),
        ("multiplexed floor", &mut mux),
        ("floor, same commands", &mut same),
        ("sequential floor", &mut seq),
        ("fencing off", &mut ours_plain),
        ("wake on release off", &mut ours_silent),
    ];
    if with_rival {
        impls.push(("redlock 2.0", &mut theirs));
    }
    let results = race(n, &mut impls);
    let floor = results[1].1.median;
    for (name, s) in &results {
        report.line(format!(
            "| {network:<9} | {:>5} | {name:<19} | {:>9.1} | {:>9.1} | {:>6.2} |",
            urls.len(),
            us(s.median),
            us(s.p99),
            s.median.as_secs_f64() / floor.as_secs_f64()
        ));
        let _ = write!(
            report.json,
            "{{\"kind\":\"cycle\",\"network\":\"{network}\",\"nodes\":{},\"impl\":\"{name}\",\
             \"median_us\":{:.1},\"p99_us\":{:.1},\"vs_multiplexed\":{:.3}}},",
            urls.len(),
            us(s.median),
            us(s.p99),
            s.median.as_secs_f64() / floor.as_secs_f64()
        );
    }
    // The default cycle against the same commands written raw.
    let same = results[2].1.median.as_secs_f64();
    let _ = write!(
        report.json,
        "{{\"kind\":\"cycle_vs_same\",\"network\":\"{network}\",\"nodes\":{},\"ratio\":{:.3}}},",
        urls.len(),
        results[0].1.median.as_secs_f64() / same
    );
    report.line(format!(
        "|           | {:>5} | default / same floor|           |           | {:>6.3} |",
        urls.len(),
        results[0].1.median.as_secs_f64() / same
    ));
}

/// Cycles per second with `threads` threads, each running its own cycle
/// (made by `make(thread)`, returning whether it won) until `run` is over;
/// also each thread's wins.
fn throughput<F>(threads: usize, run: Duration, make: F) -> (f64, Vec<u64>)
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--contend-child") {
        return contend_child(&args[at + 1..]);
    }
    if let Some(at) = args.iter().position(|a| a == "--queue-child") {
        return queue_child(&args[at + 1..]);
    }
    if args.iter().any(|a| a == "--cpu") {
        return cpu_race(args.iter().any(|a| a == "--quick"));
    }
    if let Some(at) = args.iter().position(|a| a == "--probe") {
        return probe(&args[at + 1..]);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let only_contention = args.iter().any(|a| a == "--contention");
    let only_cycles = args.iter().any(|a| a == "--cycles");
    let only_cluster = args.iter().any(|a| a == "--cluster");
    let only_semaphore = args.iter().any(|a| a == "--semaphore");
    let only_shapes = args.iter().any(|a| a == "--shapes");
    let only_fair = args.iter().any(|a| a == "--fair");
    let samples = if quick { 300 } else { 2000 };
    let proxied_samples = if quick { 100 } else { 400 };
    let run = Duration::from_millis(if quick { 500 } else { 2000 });

    let mut cluster = server::Nodes::start(5).expect("redis-server nodes");
    let proxies: Vec<proxy::Proxy> = cluster
        .servers
        .iter()
        .map(|s| {
            let p = proxy::Proxy::start(SocketAddr::from(([127, 0, 0, 1], s.port()))).unwrap();
            p.set(proxy::Mode::Latency(DELAY));
            p
        })
        .collect();
    let direct = cluster.urls();
    let delayed: Vec<String> = proxies.iter().map(proxy::Proxy::url).collect();

    let mut report = Report {
        text: String::new(),
        json: String::from("["),
    };
    let contention_run = Duration::from_secs(if quick { 1 } else { 5 });
    if only_cluster {
        cluster_cost(&mut report, &direct[..1], samples * 2);
        return;
    }
    if args.iter().any(|a| a == "--release") {
        release_cost(&mut report, &direct[..1], samples * 2);
        report.json.push(']');
        return;
    }
    if args.iter().any(|a| a == "--extend") {
        extend_cost(&mut report, &direct[..1], samples * 2);
        report.json.push(']');
        return;
    }
    if only_semaphore {
        semaphore_cost(&mut report, &direct[..3], samples * 2, contention_run);
        return;
    }
    if only_shapes {
        shapes_cost(
            &mut report,
            &direct[..3],
            &delayed[..3],
            samples * 2,
            proxied_samples,
        );
        return;
    }
    if args.iter().any(|a| a == "--fair-uncontended") {
        uncontended_fair(&mut report, &direct[..3], samples * 2);
        report.json.push(']');
        return;
    }
    // One network's fairness table alone (REDLOCK_BENCH_ROWS picks rows).
    if args.iter().any(|a| a == "--fair-loopback") {
        fairness(&mut report, &direct[..3], "loopback", contention_run * 2);
        report.json.push(']');
        return;
    }
    if args.iter().any(|a| a == "--fair-delayed") {
        fairness(
            &mut report,
            &delayed[..3],
            "250µs each way",
            contention_run * 2,
        );
        report.json.push(']');
        return;
    }
    if only_fair {
        fairness(&mut report, &direct[..3], "loopback", contention_run * 2);
        // Through the delay proxy, the network sets the pace rather than
        // the 2 cores the servers, the proxy and every waiter share.
        fairness(
            &mut report,
            &delayed[..3],
            "250µs each way",
            contention_run * 2,
        );
        crashed_waiter(&mut report, &direct[..3], if quick { 4 } else { 10 });
        uncontended_fair(&mut report, &direct[..3], samples * 2);
        report.json.push(']');
        return;
    }
    if only_contention {
        contention(&mut report, &direct[..3], contention_run);
        report.json.push(']');
        return;
    }
    report.line(format!(
        "redlock-sync {} compare bench ({} samples per cell, {} through the proxy)",
        env!("CARGO_PKG_VERSION"),
        samples,
        proxied_samples
    ));
    report.line(String::new());
    report.line("Uncontended lock+release cycle".into());
    report.line(String::new());
    report.line(
        "| network   | nodes | implementation      | median µs | p99 µs    | × mux  |".into(),
    );
    report.line(
        "|-----------|------:|---------------------|----------:|----------:|-------:|".into(),
    );
    for n in [1, 3, 5] {
        cycles(&mut report, &direct[..n], "loopback", samples, true);
    }
    for n in [1, 3, 5] {
        cycles(&mut report, &delayed[..n], "250µs", proxied_samples, true);
    }
    wake_cost(&mut report, &direct, samples * 2);
    cluster_cost(&mut report, &direct[..1], samples * 2);
    semaphore_cost(&mut report, &direct[..3], samples * 2, contention_run);
    shapes_cost(
        &mut report,
        &direct[..3],
        &delayed[..3],
        samples * 2,
        proxied_samples,
    );
    if only_cycles {
        return;
    }

    report.line(String::new());
    report.line("Throughput on 5 loopback nodes (lock+release cycles per second)".into());
    report.line(String::new());
    report.line(
        "| threads | keys     | cycles/s | × 1 thread | floor cycles/s | × floor | wins per thread (min..max) |"
            .into(),
    );
    report.line(
        "|--------:|----------|---------:|-----------:|---------------:|--------:|----------------------------|"
            .into(),
    );
    let mut dlm = manager(&direct);
    dlm.set_retry(1, Duration::ZERO).unwrap();
    let mut single = 0.0;
    for (threads, contended) in [(1, false), (4, false), (16, false), (8, true)] {
        let key = |t: usize| {
            if contended {
                "bench:contended".to_owned()
            } else {
                format!("bench:thread:{t}")
            }
        };
        let (rate, per) = throughput(threads, run, |t| {
            let (dlm, key) = (dlm.clone(), key(t));
            Box::new(move || {
                dlm.try_lock(&key, TTL)
                    .map(|g| g.release().unwrap())
                    .is_ok()
            })
        });
        // The multiplexed floor, each thread on connections of its own.
        let (floor, _) = if contended {
            (f64::NAN, Vec::new())
        } else {
            throughput(threads, run, |t| {
                let mut raw = Raw::new(&direct, &format!("bench:floor:{t}"));
                Box::new(move || {
                    raw.multiplexed();
                    true
                })
            })
        };
        if threads == 1 {
            single = rate;
        }
        let (min, max) = (per.iter().min().unwrap(), per.iter().max().unwrap());
        let (floor_cell, ratio_cell) = if contended {
            ("-".to_owned(), "-".to_owned())
        } else {
            (format!("{floor:.0}"), format!("{:.2}", rate / floor))
        };
        report.line(format!(
            "| {threads:>7} | {:<8} | {rate:>8.0} | {:>10.2} | {floor_cell:>14} | {ratio_cell:>7} | {min}..{max} |",
            if contended { "one" } else { "distinct" },
            rate / single,
        ));
        let _ = write!(
            report.json,
            "{{\"kind\":\"throughput\",\"threads\":{threads},\"contended\":{contended},\
             \"per_second\":{rate:.0},\"vs_one_thread\":{:.3},\"floor_per_second\":{},\
             \"min_wins\":{min},\"max_wins\":{max}}},",
            rate / single,
            if floor.is_nan() {
                "null".to_owned()
            } else {
                format!("{floor:.0}")
            }
        );
    }

    // Acquire latency with one of five nodes hung (SIGSTOP).
    let healthy = {
        let dlm = manager(&direct);
        let mut v = Vec::new();
        for _ in 0..200 {
            let start = Instant::now();
            dlm.lock("bench:hung", TTL).unwrap().release().unwrap();
            v.push(start.elapsed());
        }
        stats(v).median
    };
    cluster.servers[4].pause();
    let dlm = manager(&direct);
    let mut acquires = Vec::new();
    for _ in 0..(if quick { 10 } else { 30 }) {
        let start = Instant::now();
        let guard = dlm.lock("bench:hung", TTL).unwrap();
        acquires.push(start.elapsed());
        drop(guard);
    }
    cluster.servers[4].resume();
    let hung = stats(acquires);
    let timeout = dlm.node_timeout();
    report.line(String::new());
    report.line(format!(
        "Acquire with 1 of 5 nodes hung: median {:.1} ms, p99 {:.1} ms \
         (node timeout {} ms; healthy cycle {:.0} µs; bound timeout + 2 × cycle = {:.1} ms)",
        hung.median.as_secs_f64() * 1e3,
        hung.p99.as_secs_f64() * 1e3,
        timeout.as_millis(),
        us(healthy),
        (timeout + 2 * healthy).as_secs_f64() * 1e3
    ));
    let _ = write!(
        report.json,
        "{{\"kind\":\"hung\",\"median_ms\":{:.2},\"p99_ms\":{:.2},\"timeout_ms\":{},\"healthy_cycle_us\":{:.1}}}",
        hung.median.as_secs_f64() * 1e3,
        hung.p99.as_secs_f64() * 1e3,
        timeout.as_millis(),
        us(healthy)
    );

    contention(&mut report, &direct[..3], contention_run);
    fairness(&mut report, &direct[..3], "loopback", contention_run * 2);
    crashed_waiter(&mut report, &direct[..3], if quick { 4 } else { 10 });
    uncontended_fair(&mut report, &direct[..3], samples * 2);

    #[cfg(feature = "tls")]
    tls_cycles(&mut report, samples);
    report.json.push(']');

    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = std::path::Path::new(&target).join("bench-compare.json");
    std::fs::write(&path, &report.json).unwrap();
    std::fs::write(path.with_extension("txt"), &report.text).unwrap();
    println!("\nwrote {}", path.display());
}

/// The cycle over TLS beside the plain one, on the same servers (each has
/// a plain and a TLS port), pooled connections on both.
#[cfg(feature = "tls")]
fn tls_cycles(report: &mut Report, samples: usize) {
    report.line(String::new());
    report.line("TLS against plain TCP on the same loopback servers (lock+release cycle)".into());
    report.line(String::new());
    let certs = tls::Certs::make();
    let Some((cluster, ports)) = tls::tls_cluster(&certs, 5, false) else {
        report.line("skipped: this redis-server has no TLS".into());
        return;
    };
    report.line(
        "| nodes | plain median µs | TLS median µs | plain p99 µs | TLS p99 µs | TLS × plain |"
            .into(),
    );
    report.line(
        "|------:|----------------:|--------------:|-------------:|-----------:|------------:|"
            .into(),
    );
    for n in [3, 5] {
        let plain = manager(&cluster.urls()[..n]);
        let secure = LockManager::builder()
            .nodes(ports[..n].iter().map(|p| tls::tls_url(*p)))
            .node_timeout(Duration::from_millis(50))
            .tls_root_cert(certs.read("ca.pem"))
            .build()
            .unwrap();
        let key = format!("bench:tls:{n}");
        let mut p = || plain.lock(&key, TTL).unwrap().release().unwrap();
        let tls_key = format!("{key}:tls");
        let mut t = || secure.lock(&tls_key, TTL).unwrap().release().unwrap();
        let results = race(samples, &mut [("plain", &mut p), ("tls", &mut t)]);
        let (plain_s, tls_s) = (&results[0].1, &results[1].1);
        let ratio = tls_s.median.as_secs_f64() / plain_s.median.as_secs_f64();
        report.line(format!(
            "| {n:>5} | {:>15.1} | {:>13.1} | {:>12.1} | {:>10.1} | {ratio:>11.2} |",
            us(plain_s.median),
            us(tls_s.median),
            us(plain_s.p99),
            us(tls_s.p99)
        ));
        let _ = write!(
            report.json,
            ",{{\"kind\":\"tls\",\"nodes\":{n},\"plain_median_us\":{:.1},\"tls_median_us\":{:.1},\"ratio\":{ratio:.3}}}",
            us(plain_s.median),
            us(tls_s.median)
        );
    }
}

/// The contended workload: waiters call `try_lock_for(resource, 2 s,
/// 10 s)` in a loop, hold the lock 1 ms, and pause 0.2 ms between
/// sections.
const SECTION: Duration = Duration::from_millis(1);
const BETWEEN: Duration = Duration::from_micros(200);

/// How waiters wait: the new waking, or plain polling with a retry delay.
const MODES: [(&str, bool, Duration); 3] = [
    ("woken on release", true, Duration::from_millis(200)),
    ("polling, 200 ms", false, Duration::from_millis(200)),
    ("polling, 10 ms", false, Duration::from_millis(10)),
];

/// Runs `threads` waiters until `end`; each thread's waits.
fn contend(dlm: &LockManager, resource: &str, threads: usize, end: Instant) -> Vec<Vec<Duration>> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut waits = Vec::new();
                    while Instant::now() < end {
                        let start = Instant::now();
                        let guard = dlm
                            .try_lock_for(resource, Duration::from_secs(2), Duration::from_secs(10))
                            .expect("a waiter waited 10 s");
                        waits.push(start.elapsed());
                        thread::sleep(SECTION);
                        drop(guard);
                        thread::sleep(BETWEEN);
                    }
                    waits
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The child side of the processes row: `--contend-child MODE THREADS
/// RESOURCE START_MS RUN_MS`, nodes in `REDLOCK_BENCH_NODES`; prints each
/// thread's waits in µs, one line per thread.
fn contend_child(args: &[String]) {
    let mode = MODES[args[0].parse::<usize>().unwrap()];
    let threads: usize = args[1].parse().unwrap();
    let resource = &args[2];
    let start_ms: u64 = args[3].parse().unwrap();
    let run_ms: u64 = args[4].parse().unwrap();
    let urls: Vec<String> = std::env::var("REDLOCK_BENCH_NODES")
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let dlm = manager_fair(&urls, mode.1, mode.2, Fair::from_env());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    thread::sleep(Duration::from_millis(start_ms.saturating_sub(now_ms)));
    let end = Instant::now() + Duration::from_millis(run_ms);
    for waits in contend(&dlm, resource, threads, end) {
        let line: Vec<String> = waits.iter().map(|w| w.as_micros().to_string()).collect();
        println!("{}", line.join(" "));
    }
}

/// Runs `procs` child processes of `threads` waiters each; each process's
/// waits.
fn contend_processes(
    urls: &[String],
    mode: usize,
    procs: usize,
    threads: usize,
    resource: &str,
    run: Duration,
) -> Vec<Vec<Duration>> {
    contend_processes_fair(urls, mode, procs, threads, resource, run, Fair::Off)
}

/// As [`contend_processes`], with every child's manager `fair` or not.
fn contend_processes_fair(
    urls: &[String],
    mode: usize,
    procs: usize,
    threads: usize,
    resource: &str,
    run: Duration,
    fair: Fair,
) -> Vec<Vec<Duration>> {
    let start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 500;
    let children: Vec<_> = (0..procs)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--contend-child", &mode.to_string(), &threads.to_string()])
                .args([
                    resource,
                    &start_ms.to_string(),
                    &run.as_millis().to_string(),
                ])
                .env("REDLOCK_BENCH_NODES", urls.join(","))
                .env("REDLOCK_BENCH_FAIR", fair.env())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "a contending child failed");
            String::from_utf8(out.stdout)
                .unwrap()
                .split_whitespace()
                .map(|w| Duration::from_micros(w.parse().unwrap()))
                .collect()
        })
        .collect()
}

/// The contention table: 2, 8 and 32 waiting threads and 3 processes x 2
/// threads on one lock, for each way of waiting.
fn contention(report: &mut Report, urls: &[String], run: Duration) {
    report.line(String::new());
    report.line(format!(
        "Waiting for a busy lock on {} loopback nodes: try_lock_for(2 s TTL, 10 s) in a loop, \
         1 ms sections, 0.2 ms between, {:.0} s per row",
        urls.len(),
        run.as_secs_f64()
    ));
    report.line(String::new());
    report.line(
        "| waiters        | waiting          | acquisitions/s | wait p50 ms | wait p99 ms | wait max ms | wins min..max | max/min |"
            .into(),
    );
    report.line(
        "|----------------|------------------|---------------:|------------:|------------:|------------:|---------------|--------:|"
            .into(),
    );
    for (who, procs, threads) in [
        ("2 threads", 0, 2),
        ("8 threads", 0, 8),
        ("32 threads", 0, 32),
        ("3 procs x 2", 3, 2),
    ] {
        for (mode, (name, wake, delay)) in MODES.iter().enumerate() {
            let resource = format!("bench:contention:{who}:{mode}");
            let per: Vec<Vec<Duration>> = if procs == 0 {
                let dlm = manager_waking(urls, *wake, *delay);
                contend(&dlm, &resource, threads, Instant::now() + run)
            } else {
                contend_processes(urls, mode, procs, threads, &resource, run)
            };
            let Waits {
                rate,
                p50,
                p99,
                max_wait,
                min,
                max,
            } = Waits::of(per, run);
            report.line(format!(
                "| {who:<14} | {name:<16} | {rate:>14.0} | {:>11.2} | {:>11.1} | {:>11.1} | {:<13} | {:>7.2} |",
                p50,
                p99,
                max_wait,
                format!("{min}..{max}"),
                max as f64 / min.max(1) as f64,
            ));
            let _ = write!(
                report.json,
                "{{\"kind\":\"contention\",\"waiters\":\"{who}\",\"waiting\":\"{name}\",\
                 \"per_second\":{rate:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\
                 \"min_wins\":{min},\"max_wins\":{max}}},",
                p50, p99, max_wait,
            );
        }
    }
}

/// What a contention row reports: acquisitions per second, the waits'
/// p50, p99 and max (ms), and the fewest and most wins of one waiter.
struct Waits {
    rate: f64,
    p50: f64,
    p99: f64,
    max_wait: f64,
    min: usize,
    max: usize,
}

impl Waits {
    /// From each waiter's waits over `run`.
    fn of(per: Vec<Vec<Duration>>, run: Duration) -> Waits {
        let wins: Vec<usize> = per.iter().map(Vec::len).collect();
        let mut all: Vec<Duration> = per.into_iter().flatten().collect();
        all.sort_unstable();
        let total = all.len();
        let at = |q: f64| all[((total as f64 * q) as usize).min(total - 1)].as_secs_f64() * 1e3;
        Waits {
            rate: total as f64 / run.as_secs_f64(),
            p50: at(0.5),
            p99: at(0.99),
            max_wait: at(1.0),
            min: *wins.iter().min().unwrap(),
            max: *wins.iter().max().unwrap(),
        }
    }
}

/// Eight waiters on one lock, woken on release: threads of one manager,
/// processes of one thread, managers of one thread in one process; fair
/// waiting off and on, in the same run.
fn fairness(report: &mut Report, urls: &[String], network: &str, run: Duration) {
    report.line(String::new());
    report.line(format!(
        "Eight waiters on one lock, {} nodes ({network}), woken on release: try_lock_for(2 s TTL, \
         10 s) in a loop, 1 ms sections, 0.2 ms between, {:.0} s per row",
        urls.len(),
        run.as_secs_f64()
    ));
    report.line(String::new());
    report.line(
        "| waiters          | fair         | acquisitions/s | × 8 threads, fair off | wait p50 ms | wait p99 ms | wait max ms | wins max/min |"
            .into(),
    );
    report.line(
        "|------------------|--------------|---------------:|----------------------:|------------:|------------:|------------:|-------------:|"
            .into(),
    );
    let mut base = None;
    for fair in [Fair::Off, Fair::On, Fair::NoYield] {
        for who in ["8 threads", "8 processes x 1", "8 managers x 1"] {
            // REDLOCK_BENCH_ROWS=on,processes: only the rows whose waiters
            // and setting contain these words (the first row, the base,
            // always runs; "yield" picks the rows without yields).
            let on = fair.label();
            let picked = std::env::var("REDLOCK_BENCH_ROWS").map_or(true, |rows| {
                rows.split(',')
                    .all(|w| who.contains(w) || on == w || (w == "yield" && fair == Fair::NoYield))
            });
            if base.is_some() && !picked {
                continue;
            }
            let resource = format!("bench:fair:{who}:{on}");
            let per: Vec<Vec<Duration>> = match who {
                "8 threads" => {
                    let dlm = manager_fair(urls, true, Duration::from_millis(200), fair);
                    contend(&dlm, &resource, 8, Instant::now() + run)
                }
                "8 processes x 1" => contend_processes_fair(urls, 0, 8, 1, &resource, run, fair),
                _ => {
                    let end = Instant::now() + run;
                    thread::scope(|s| {
                        let handles: Vec<_> = (0..8)
                            .map(|_| {
                                let resource = &resource;
                                s.spawn(move || {
                                    let dlm =
                                        manager_fair(urls, true, Duration::from_millis(200), fair);
                                    contend(&dlm, resource, 1, end).remove(0)
                                })
                            })
                            .collect();
                        handles.into_iter().map(|h| h.join().unwrap()).collect()
                    })
                }
            };
            let Waits {
                rate,
                p50,
                p99,
                max_wait,
                min,
                max,
            } = Waits::of(per, run);
            let threads = *base.get_or_insert(rate);
            report.line(format!(
                "| {who:<16} | {on:<12} | {rate:>14.0} | {:>21.2} | {:>11.2} | {:>11.1} | {:>11.1} | {:>12.2} |",
                rate / threads,
                p50,
                p99,
                max_wait,
                max as f64 / min.max(1) as f64,
            ));
            let _ = write!(
                report.json,
                "{{\"kind\":\"fairness\",\"network\":\"{network}\",\"waiters\":\"{who}\",\"fair\":\"{on}\",\
                 \"per_second\":{rate:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\
                 \"min_wins\":{min},\"max_wins\":{max}}},",
                p50, p99, max_wait,
            );
        }
    }
}

/// The child side of the crashed-waiter rows: `--queue-child RESOURCE
/// FAIR`, nodes in `REDLOCK_BENCH_NODES`: waits for the lock with the
/// default settings until it is killed.
fn queue_child(args: &[String]) {
    let urls: Vec<String> = std::env::var("REDLOCK_BENCH_NODES")
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let dlm = LockManager::builder()
        .nodes(urls)
        .fair(args[1] == "1")
        .build()
        .unwrap();
    let _ = dlm.try_lock_for(&args[0], TTL, Duration::from_secs(60));
}

/// A waiter killed (SIGKILL) while it waits ahead of a live one, with the
/// default settings: the time from the holder's release to the live
/// waiter's acquisition, against the same with no waiter ahead; fair
/// waiting off and on, `trials` each.
fn crashed_waiter(report: &mut Report, urls: &[String], trials: usize) {
    report.line(String::new());
    report.line(format!(
        "A waiter killed while it waits ahead of another, default settings, {} loopback nodes: \
         release to the live waiter's acquisition, {trials} trials per row",
        urls.len()
    ));
    report.line(String::new());
    report.line("| fair | ahead of it      | p50 ms | max ms |".into());
    report.line("|------|------------------|-------:|-------:|".into());
    let build = |fair: bool| {
        LockManager::builder()
            .nodes(urls)
            .fair(fair)
            .build()
            .unwrap()
    };
    for fair in [false, true] {
        for crashed in [false, true] {
            let mut took = Vec::new();
            for trial in 0..trials {
                let resource = format!("bench:crashed:{fair}:{crashed}:{trial}");
                let guard = build(fair).lock(&resource, TTL).unwrap();
                let child = crashed.then(|| {
                    let child = std::process::Command::new(std::env::current_exe().unwrap())
                        .args(["--queue-child", &resource, if fair { "1" } else { "0" }])
                        .env("REDLOCK_BENCH_NODES", urls.join(","))
                        .spawn()
                        .unwrap();
                    // Refused, it queues; then the live waiter comes.
                    thread::sleep(Duration::from_millis(300));
                    child
                });
                let live = build(fair);
                let mine = resource.clone();
                let waiting = thread::spawn(move || {
                    let g = live
                        .try_lock_for(&mine, TTL, Duration::from_secs(10))
                        .unwrap();
                    let at = Instant::now();
                    drop(g);
                    at
                });
                thread::sleep(Duration::from_millis(300));
                if let Some(mut child) = child {
                    child.kill().unwrap();
                    child.wait().unwrap();
                }
                let released = Instant::now();
                guard.release().unwrap();
                took.push(waiting.join().unwrap() - released);
            }
            took.sort_unstable();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let (p50, max) = (ms(took[took.len() / 2]), ms(took[took.len() - 1]));
            let on = if fair { "on" } else { "off" };
            let ahead = if crashed { "a killed waiter" } else { "nobody" };
            report.line(format!(
                "| {on:<4} | {ahead:<16} | {p50:>6.1} | {max:>6.1} |"
            ));
            let _ = write!(
                report.json,
                "{{\"kind\":\"crashed_waiter\",\"fair\":{fair},\"crashed\":{crashed},\
                 \"p50_ms\":{p50:.3},\"max_ms\":{max:.3}}},"
            );
        }
    }
}

/// An uncontended lock + release with fair waiting off and on (raced
/// alone, 3 loopback nodes, default settings): nobody waits, so a fair
/// manager writes no queue; its release is the hand-off script, which
/// finds no queue and deletes the key.
fn uncontended_fair(report: &mut Report, urls: &[String], n: usize) {
    report.line(String::new());
    report.line(format!(
        "Uncontended lock + release, fair off and on, 3 loopback nodes ({n} cycles each, raced \
         alone)"
    ));
    report.line(String::new());
    report.line("| fair | median µs | p99 µs | × off  |".into());
    report.line("|------|----------:|-------:|-------:|".into());
    let build = |fair: bool| {
        LockManager::builder()
            .nodes(urls)
            .fair(fair)
            .build()
            .unwrap()
    };
    let (off, on) = (build(false), build(true));
    let mut unfair = || {
        off.lock("bench:uncontended-off", TTL)
            .unwrap()
            .release()
            .unwrap()
    };
    let mut fair = || {
        on.lock("bench:uncontended-on", TTL)
            .unwrap()
            .release()
            .unwrap()
    };
    let results = race(n, &mut [("off", &mut unfair), ("on", &mut fair)]);
    shape_rows(report, &results, 4, "\"kind\":\"uncontended_fair\"");
}

/// One extend of a held lock with fencing (one loopback node), against
/// the raw floor written both ways: the extend script by `EVALSHA`, and
/// the plain commands of servers that take `SET ... IFEQ` (Valkey 8.1+:
/// `SET key token IFEQ token PX ttl GET` and the counter's `PEXPIRE ...
/// GT`, pipelined). The library sends the second where the server takes
/// it, the first elsewhere (`REDIS_SERVER_BIN` picks the server).
fn extend_cost(report: &mut Report, urls: &[String], n: usize) {
    report.line(String::new());
    report.line(format!(
        "Extend of a held lock with fencing, 1 loopback node ({n} each, raced)"
    ));
    report.line(String::new());
    report.line("| implementation        | median µs | p99 µs | × script |".into());
    report.line("|-----------------------|----------:|-------:|-------:|".into());
    let dlm = manager(urls);
    let key = "bench:extend";
    let mut guard = dlm.lock(key, TTL).unwrap();
    let token = guard.token().to_vec();
    let fence = redlock_sync::fence_key(key);
    let ttl = TTL.as_millis().to_string();
    let keep = (10 * 60 * 1000).to_string();
    let client = redis::Client::open(urls[0].as_str()).unwrap();
    let mut con = client.get_connection().unwrap();
    let script = redis::Script::new(include_str!("../src/scripts/lock/extend.lua"));
    let mut library = || guard.extend(TTL).unwrap();
    let mut by_script = || {
        let done: i64 = script
            .key(key)
            .key(&fence)
            .arg(&token)
            .arg(&ttl)
            .arg(&keep)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(done, 1);
    };
    let mut con2 = client.get_connection().unwrap();
    let ifeq_works = redis::cmd("SET")
        .arg(key)
        .arg(&token)
        .arg("IFEQ")
        .arg(&token)
        .arg("PX")
        .arg(&ttl)
        .arg("GET")
        .query::<Option<Vec<u8>>>(&mut con2)
        .is_ok();
    let mut by_ifeq = || {
        let (held, _): (Option<Vec<u8>>, i64) = redis::pipe()
            .cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("IFEQ")
            .arg(&token)
            .arg("PX")
            .arg(&ttl)
            .arg("GET")
            .cmd("PEXPIRE")
            .arg(&fence)
            .arg(&keep)
            .arg("GT")
            .query(&mut con2)
            .unwrap();
        assert_eq!(held.as_deref(), Some(&token[..]));
    };
    let mut impls: Vec<(&str, &mut dyn FnMut())> = vec![
        ("raw EVALSHA script", &mut by_script),
        ("library extend", &mut library),
    ];
    if ifeq_works {
        impls.push(("raw SET IFEQ + GT", &mut by_ifeq));
    }
    let results = race(n, &mut impls);
    shape_rows(report, &results, 21, "\"kind\":\"extend\"");
}

/// An uncontended lock + release that hands nothing on (fair waiting
/// off, fencing off, releases announced as by default; one loopback
/// node), against the raw floor written with the same commands: `SET
/// key token NX GET PX ttl`, then the unlock script by `EVALSHA` with the
/// release's `PUBLISH` behind it, or, where the server takes it (Valkey
/// 9+), `DELIFEQ key token` with the `PUBLISH`. The library sends the
/// second where the server takes it, the first elsewhere
/// (`REDIS_SERVER_BIN` picks the server). Then a fair manager's cycle
/// (fencing off), the timed floor, and the default settings' cycle
/// against the same commands written raw (the fencing counter's three
/// commands behind the `SET`, the unlock script with the queue's key).
fn release_cost(report: &mut Report, urls: &[String], n: usize) {
    report.line(String::new());
    report.line(format!(
        "Lock + release that hands nothing on, 1 loopback node ({n} each, raced)"
    ));
    report.line(String::new());
    report.line("| implementation          | median µs | p99 µs | × script |".into());
    report.line("|-------------------------|----------:|-------:|-------:|".into());
    let unfair = LockManager::builder()
        .nodes(urls)
        .fencing(false)
        .fair(false)
        .build()
        .unwrap();
    let fair = LockManager::builder()
        .nodes(urls)
        .fencing(false)
        .build()
        .unwrap();
    let key = "bench:release";
    let client = redis::Client::open(urls[0].as_str()).unwrap();
    // The second connection waits for each reply with a socket timeout,
    // as the library does (it never waits past the node timeout): the
    // kernel arms a timer for each blocking read.
    let mut cons = [
        client.get_connection().unwrap(),
        client.get_connection().unwrap(),
    ];
    cons[1]
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    cons[1]
        .set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let token = "0123456789abcdef0123456789abcdef";
    let channel = redlock_sync::release_channel(key);
    let set = lock_set(key, token).get_packed_command();
    let script = unlock_script();
    for con in &mut cons {
        load_scripts(con);
    }
    // The server's own compare-and-delete, if it has one.
    let plain = Delete::of(&mut cons[0]);
    let delifeq_works = plain != Delete::Script;
    let plain_name = plain.raw_name();
    let mut message = 0u64;
    let taken = taken_reply();
    // A cycle releasing by `form`, on the connection without (0) or with
    // (1) a read timeout.
    let mut raw = |form: Delete, timed: usize| {
        let con = &mut cons[timed];
        assert_eq!(con.req_packed_command(&set).unwrap(), taken);
        message += 1;
        let release = form.cmd(key, token, &script);
        let (deleted, _): (i64, i64) = redis::pipe()
            .add_command(release)
            .cmd("PUBLISH")
            .arg(&channel)
            .arg(format!("{token}:{message}"))
            .query(con)
            .unwrap();
        assert_eq!(deleted, 1);
    };
    let raw = std::cell::RefCell::new(&mut raw);
    let mut by_script = || (raw.borrow_mut())(Delete::Script, 0);
    let mut by_delifeq = || (raw.borrow_mut())(plain, 0);
    let mut timed_script = || (raw.borrow_mut())(Delete::Script, 1);
    let mut timed_plain = || (raw.borrow_mut())(plain, 1);
    let mut library = || unfair.lock(key, TTL).unwrap().release().unwrap();
    let mut library_fair = || fair.lock(key, TTL).unwrap().release().unwrap();
    // The default settings (fencing, fair waiting, waking on release)
    // against the same commands written raw (`Raw::same_as_default`).
    let default = LockManager::builder().nodes(urls).build().unwrap();
    let default_key = "bench:release:default";
    let mut library_default = || default.lock(default_key, TTL).unwrap().release().unwrap();
    let mut raw_same = Raw::same_as_default(urls, "bench:release:same");
    let mut same = || raw_same.multiplexed();
    // The strict floor of `fair(false)`: its commands packed once (the
    // rows above pack the release in each cycle, as a client must for a
    // message of its own), then only written and read.
    let mut raw_packed = {
        let mut raw = Raw::new(urls, "bench:release:packed");
        let token = "0123456789abcdef0123456789abcdef@host/1234#1";
        let channel = redlock_sync::release_channel("bench:release:packed");
        (raw.set, raw.unlock, raw.replies) =
            cycle_commands("bench:release:packed", token, false, plain, &channel);
        raw
    };
    let mut packed = || raw_packed.multiplexed();
    let mut impls: Vec<(&str, &mut dyn FnMut())> = vec![
        ("raw EVALSHA unlock", &mut by_script),
        ("library, fair(false)", &mut library),
    ];
    if delifeq_works {
        impls.push((plain_name, &mut by_delifeq));
    }
    impls.push(("library, fair (default)", &mut library_fair));
    // The floor of the library's own release, with a read timeout.
    let timed_name = if delifeq_works {
        format!("{plain_name}, timed")
    } else {
        "raw EVALSHA, timed".to_owned()
    };
    if delifeq_works {
        impls.push((&timed_name, &mut timed_plain));
    } else {
        impls.push((&timed_name, &mut timed_script));
    }
    impls.push(("raw, packed once", &mut packed));
    impls.push(("raw, default's commands", &mut same));
    impls.push(("library, default settings", &mut library_default));
    let results = race(n, &mut impls);
    shape_rows(report, &results, 23, "\"kind\":\"release\"");
    let ratio =
        |a: usize, b: usize| results[a].1.median.as_secs_f64() / results[b].1.median.as_secs_f64();
    let timed = results.len() - 4;
    if delifeq_works {
        report.line(format!(
            "library fair(false) / {plain_name}: {:.3}",
            ratio(1, 2)
        ));
    }
    report.line(format!(
        "library fair(false) / {timed_name}: {:.3}",
        ratio(1, timed)
    ));
    let last = results.len() - 1;
    report.line(format!(
        "library fair(false) / raw, packed once: {:.3}",
        ratio(1, last - 2)
    ));
    report.line(format!(
        "library default settings / raw, default's commands: {:.3}",
        ratio(last, last - 1)
    ));
}

/// A semaphore permit's acquire + release against a lock cycle (raced
/// alone, 3 loopback nodes), then K = 4 permits shared by 16 threads of
/// one manager: permits per second and the wait for one.
fn semaphore_cost(report: &mut Report, urls: &[String], n: usize, run: Duration) {
    report.line(String::new());
    report.line(format!(
        "Semaphore permit (K = 4) against a lock, uncontended acquire + release, 3 loopback \
         nodes ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| shape   | median µs | p99 µs | × lock |".into());
    report.line("|---------|----------:|-------:|-------:|".into());
    let dlm = LockManager::builder().nodes(urls).build().unwrap();
    let sem = dlm.semaphore("bench:sem", 4).unwrap();
    let mut lock = || dlm.lock("bench:sem-lock", TTL).unwrap().release().unwrap();
    let mut permit = || sem.acquire(TTL).unwrap().release().unwrap();
    let results = race(n, &mut [("lock", &mut lock), ("permit", &mut permit)]);
    shape_rows(report, &results, 7, "\"kind\":\"semaphore_cost\"");
    // K = 4, 16 threads, 1 ms holds.
    let sem = dlm.semaphore("bench:sem-contended", 4).unwrap();
    let stop = AtomicBool::new(false);
    let waits: Vec<Duration> = thread::scope(|s| {
        let workers: Vec<_> = (0..16)
            .map(|_| {
                let (sem, stop) = (&sem, &stop);
                s.spawn(move || {
                    let mut waits = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        if let Ok(p) = sem.try_acquire_for(TTL, Duration::from_secs(10)) {
                            waits.push(start.elapsed());
                            thread::sleep(Duration::from_millis(1));
                            p.release().unwrap();
                        }
                    }
                    waits
                })
            })
            .collect();
        thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let mut waits = waits;
    waits.sort();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    report.line(String::new());
    report.line(format!(
        "K = 4 permits, 16 threads of one manager, 1 ms holds, {run:?}: {:.0} permits/s, \
         wait p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        waits.len() as f64 / run.as_secs_f64(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        waits[waits.len() - 1].as_secs_f64() * 1e3
    ));
}

/// One row per raced shape (the first is the baseline): its name padded
/// to `width`, median, p99 and ratio to the first; and a JSON object with
/// the fields `json` and the same figures.
fn shape_rows(report: &mut Report, results: &[(String, Stats)], width: usize, json: &str) {
    let base = results[0].1.median.as_secs_f64();
    for (name, stats) in results {
        let ratio = stats.median.as_secs_f64() / base;
        report.line(format!(
            "| {name:<width$} | {:>9.1} | {:>6.1} | {ratio:>6.3} |",
            us(stats.median),
            us(stats.p99)
        ));
        let _ = write!(
            report.json,
            "{{{json},\"shape\":\"{name}\",\"median_us\":{:.1},\"ratio\":{ratio:.4}}},",
            us(stats.median)
        );
    }
}

/// A set of 4 resources (`lock_all`), a read lock and a write lock, each
/// taken and released uncontended, against a lock cycle (raced alone, 3
/// nodes, fencing on as by default): on loopback, then through the
/// 250 µs-each-way delay.
fn shapes_cost(
    report: &mut Report,
    direct: &[String],
    delayed: &[String],
    n: usize,
    n_delayed: usize,
) {
    for (urls, network, n) in [(direct, "loopback", n), (delayed, "250µs", n_delayed)] {
        report.line(String::new());
        report.line(format!(
            "Sets and read-write locks against a lock, uncontended take + release, 3 nodes, \
             {network} ({n} cycles each, raced alone)"
        ));
        report.line(String::new());
        report.line("| shape         | median µs | p99 µs | × lock |".into());
        report.line("|---------------|----------:|-------:|-------:|".into());
        let dlm = LockManager::builder().nodes(urls).build().unwrap();
        let rw = dlm.rwlock("bench:rw").unwrap();
        let set = ["bench:set:1", "bench:set:2", "bench:set:3", "bench:set:4"];
        let mut lock = || {
            dlm.lock("bench:shape-lock", TTL)
                .unwrap()
                .release()
                .unwrap()
        };
        let mut all = || dlm.lock_all(set, TTL).unwrap().release().unwrap();
        let mut read = || rw.read(TTL).unwrap().release().unwrap();
        let mut write = || rw.write(TTL).unwrap().release().unwrap();
        let results = race(
            n,
            &mut [
                ("lock", &mut lock),
                ("lock_all of 4", &mut all),
                ("read", &mut read),
                ("write", &mut write),
            ],
        );
        let json = format!("\"kind\":\"shape_cost\",\"network\":\"{network}\"");
        shape_rows(report, &results, 13, &json);
    }
}

/// A lock cycle on a Redis Cluster member (3 masters) against one
/// standalone node, raced alone, with fencing on and off; and what
/// replica acknowledgements (`WAIT 1`) cost a master with one replica.
fn cluster_cost(report: &mut Report, node: &[String], n: usize) {
    report.line(String::new());
    if let Some(why) = redis_cluster::unsupported() {
        report.line(format!("Redis Cluster member: {why}"));
        return;
    }
    let cluster = redis_cluster::RedisCluster::start(3, 0).expect("a Redis Cluster");
    report.line(format!(
        "Redis Cluster member (3 masters) against one standalone node, uncontended cycle \
         ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| fencing | node median µs | cluster median µs | cluster × node |".into());
    report.line("|---------|---------------:|------------------:|---------------:|".into());
    for fencing in [true, false] {
        let on_node = LockManager::builder()
            .nodes(node)
            .fencing(fencing)
            .build()
            .unwrap();
        let on_cluster = LockManager::builder()
            .cluster(cluster.seeds())
            .fencing(fencing)
            .build()
            .unwrap();
        let mut plain = || {
            on_node
                .lock("bench:member", TTL)
                .unwrap()
                .release()
                .unwrap()
        };
        let mut whole = || {
            on_cluster
                .lock("bench:member", TTL)
                .unwrap()
                .release()
                .unwrap()
        };
        let results = race(n, &mut [("node", &mut plain), ("cluster", &mut whole)]);
        let (a, b) = (results[0].1.median, results[1].1.median);
        let ratio = b.as_secs_f64() / a.as_secs_f64();
        let on = if fencing { "on" } else { "off" };
        report.line(format!(
            "| {on:<7} | {:>14.1} | {:>17.1} | {ratio:>14.3} |",
            us(a),
            us(b)
        ));
        let _ = write!(
            report.json,
            "{{\"kind\":\"cluster_cost\",\"fencing\":{fencing},\"node_us\":{:.1},\"cluster_us\":{:.1},\"ratio\":{ratio:.4}}},",
            us(a),
            us(b)
        );
    }
    span_cost(report, &cluster, n / 20);
    drop(cluster);

    let master = server::Server::start().unwrap();
    let port = master.port().to_string();
    let replica = server::Server::start_with(&["--replicaof", "127.0.0.1", &port]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut admin(&replica))
            .unwrap();
        if info.contains("master_link_status:up") || Instant::now() > deadline {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    report.line(String::new());
    report.line(format!(
        "Replica acknowledgements (WAIT 1) on a master with one replica, uncontended cycle \
         ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| replica_acks | median µs | p99 µs | × none |".into());
    report.line("|-------------:|----------:|-------:|-------:|".into());
    let none = LockManager::builder().node(master.url()).build().unwrap();
    let one = LockManager::builder()
        .node(master.url())
        .replica_acks(1)
        .build()
        .unwrap();
    let mut without = || none.lock("bench:acks", TTL).unwrap().release().unwrap();
    let mut with = || one.lock("bench:acks", TTL).unwrap().release().unwrap();
    let results = race(n, &mut [("0", &mut without), ("1", &mut with)]);
    let base = results[0].1.median.as_secs_f64();
    for (name, stats) in &results {
        report.line(format!(
            "| {name:>12} | {:>9.1} | {:>6.1} | {:>6.3} |",
            us(stats.median),
            us(stats.p99),
            stats.median.as_secs_f64() / base
        ));
    }
}

/// A set of 300 resources spanning the cluster's slots (one script per
/// slot, each master's pipelined on one connection) against 300 sharing
/// one hash tag (one script), on the same cluster member.
fn span_cost(report: &mut Report, cluster: &redis_cluster::RedisCluster, n: usize) {
    let dlm = LockManager::builder()
        .cluster(cluster.seeds())
        .build()
        .unwrap();
    let spread: Vec<String> = (0..300).map(|i| format!("bench:span:{i}")).collect();
    let tagged: Vec<String> = (0..300).map(|i| format!("{{bench:tag}}:{i}")).collect();
    let mut one = || dlm.lock_all(&tagged, TTL).unwrap().release().unwrap();
    let mut many = || dlm.lock_all(&spread, TTL).unwrap().release().unwrap();
    let results = race(n, &mut [("one slot", &mut one), ("spanning", &mut many)]);
    let (a, b) = (results[0].1.median, results[1].1.median);
    let ratio = b.as_secs_f64() / a.as_secs_f64();
    report.line(String::new());
    report.line(format!(
        "A set of 300 on the cluster member: one hash tag against spanning the slots \
         ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| one slot median µs | spanning median µs | spanning × one slot |".into());
    report.line("|-------------------:|-------------------:|--------------------:|".into());
    report.line(format!(
        "| {:>18.1} | {:>18.1} | {ratio:>19.3} |",
        us(a),
        us(b)
    ));
    let _ = write!(
        report.json,
        "{{\"kind\":\"span_cost\",\"one_slot_us\":{:.1},\"spanning_us\":{:.1},\"ratio\":{ratio:.4}}},",
        us(a),
        us(b)
    );
}

/// What waking on release costs an uncontended cycle (one `PUBLISH` per
/// node behind the unlock): the default raced against
/// `wake_on_release(false)` alone, two implementations only, so that the
/// few percent are not lost in the noise of the full table.
fn wake_cost(report: &mut Report, urls: &[String], n: usize) {
    report.line(String::new());
    report.line(format!(
        "Waking on release against off, uncontended cycle ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| network  | nodes | on median µs | off median µs | on × off |".into());
    report.line("|----------|------:|-------------:|--------------:|---------:|".into());
    for nodes in [3, 5] {
        let urls = &urls[..nodes];
        let on = manager_waking(urls, true, Duration::from_millis(200));
        let off = manager_waking(urls, false, Duration::from_millis(200));
        let mut with = || on.lock("bench:wake:on", TTL).unwrap().release().unwrap();
        let mut without = || off.lock("bench:wake:off", TTL).unwrap().release().unwrap();
        let results = race(n, &mut [("on", &mut with), ("off", &mut without)]);
        let (on, off) = (results[0].1.median, results[1].1.median);
        let ratio = on.as_secs_f64() / off.as_secs_f64();
        report.line(format!(
            "| loopback | {nodes:>5} | {:>12.1} | {:>13.1} | {ratio:>8.3} |",
            us(on),
            us(off)
        ));
        let _ = write!(
            report.json,
            "{{\"kind\":\"wake_cost\",\"nodes\":{nodes},\"on_us\":{:.1},\"off_us\":{:.1},\"ratio\":{ratio:.4}}},",
            us(on),
            us(off)
        );
    }
}

/// `--probe <impl> <cycles>`: one node, `cycles` lock + release cycles of
/// one implementation and nothing else, for an instruction count of the
/// client's own work (`valgrind --tool=callgrind` counts the bench
/// process only; the server is a child it does not follow). `impl` is
/// `library` (fencing and fair waiting off: the same commands as the
/// floor), `default` (default settings) or `floor` (the same commands on
/// one raw `redis` connection, written once and reused: `SET ... NX GET
/// PX`, then the server's compare-and-delete or the unlock script, with
/// the `PUBLISH` behind it). Give the server with `REDIS_SERVER_BIN`.
fn probe(args: &[String]) {
    let which = args.first().map(String::as_str).unwrap_or("library");
    let cycles: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let node = server::Server::start().expect("redis-server");
    let urls = [node.url()];
    let key = "bench:probe";
    match which {
        "floor" => {
            let mut con = admin(&node);
            let token = "0123456789abcdef0123456789abcdef";
            load_scripts(&mut con);
            // The release the library sends: the server's own
            // compare-and-delete where it has one, else the script.
            let delete = Delete::of(&mut con);
            let channel = redlock_sync::release_channel(key);
            let (set, release, _) = cycle_commands(key, token, false, delete, &channel);
            let taken = taken_reply();
            for _ in 0..cycles {
                assert_eq!(con.req_packed_command(&set).unwrap(), taken);
                let replies = con.req_packed_commands(&release, 0, 2).unwrap();
                assert_eq!(replies[0], Value::Int(1));
            }
        }
        "library" | "default" => {
            let mut builder = LockManager::builder().nodes(&urls);
            if which == "library" {
                builder = builder.fencing(false).fair(false);
            }
            let dlm = builder.build().unwrap();
            for _ in 0..cycles {
                dlm.lock(key, TTL).unwrap().release().unwrap();
            }
        }
        other => panic!("--probe: no implementation {other:?} (library, default, floor)"),
    }
}

/// The time this thread has run on a CPU (user and kernel), in ns.
fn thread_cpu() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// `--cpu`: the client's own CPU time per uncontended lock + release
/// cycle on one node (`REDIS_SERVER_BIN` picks the server), against raw
/// `redis` connections sending the same commands, raced in one process in
/// rotating batches: this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`:
/// its user-space work and the kernel's for its system calls), so that
/// the servers' work and the machine's other load drop out. The floors
/// are written once and reused; "timed" ones wait for each reply with a
/// read timeout, as the library does (a kernel timer per blocking read);
/// "fresh token" ones also write a new token into their bytes, in place,
/// in every cycle, as a lock client must (a server stores, compares and
/// publishes a new value each time): the least a client that keeps the
/// library's promises (a bounded wait, a value of its own) could do.
fn cpu_race(quick: bool) {
    let node = server::Server::start().expect("redis-server");
    let urls = [node.url()];
    let token = "0123456789abcdef0123456789abcdef@host/1234#1";
    // A raw connection sending a cycle's two writes, `replies` each.
    struct Floor {
        con: redis::Connection,
        set: Vec<u8>,
        release: Vec<u8>,
        replies: (usize, usize),
        /// A fresh token in every cycle: how many cycles so far, and
        /// where the token's bytes are in `set` and in `release`.
        fresh: Option<(u64, [Vec<usize>; 2])>,
        /// What its `SET` answers when it takes the key.
        taken: Value,
    }
    /// Where `token` is in `packed`.
    fn token_at(packed: &[u8], token: &[u8]) -> Vec<usize> {
        (0..packed.len().saturating_sub(token.len() - 1))
            .filter(|&i| packed[i..].starts_with(token))
            .collect()
    }
    impl Floor {
        fn cycle(&mut self) {
            // A lock client writes a value of its own in every
            // acquisition (the same value twice would let a late release
            // delete a later holder's key), and servers store, compare and
            // publish a new one each time: the count goes into the token's
            // first 16 hex digits, in place, in both writes.
            if let Some((n, [in_set, in_release])) = &mut self.fresh {
                *n += 1;
                for (buf, at) in [(&mut self.set, in_set), (&mut self.release, in_release)] {
                    for &i in at.iter() {
                        for (k, b) in buf[i..i + 16].iter_mut().enumerate() {
                            *b = b"0123456789abcdef"[((*n >> (4 * k)) & 15) as usize];
                        }
                    }
                }
            }
            let first = self
                .con
                .req_packed_commands(&self.set, 0, self.replies.0)
                .unwrap();
            assert_eq!(first[0], self.taken);
            let second = self
                .con
                .req_packed_commands(&self.release, 0, self.replies.1)
                .unwrap();
            assert_eq!(second[0], Value::Int(1));
        }
    }
    let plain = Delete::of(&mut admin(&node));
    let floor = |key: &str, fenced: bool, timed: bool, fresh: bool| {
        // A timed floor's socket is as the library's: TCP_NODELAY, and a
        // read timeout.
        let info = redis::IntoConnectionInfo::into_connection_info(node.url())
            .unwrap()
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(timed));
        let mut con = redis::Client::open(info).unwrap().get_connection().unwrap();
        if timed {
            con.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            con.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
        }
        load_scripts(&mut con);
        let channel = format!("{key}:redlock-release{{1}}");
        let (set, release, replies) = cycle_commands(key, token, fenced, plain, channel.as_bytes());
        // Its random part: the 32 hex digits before the `@`.
        let hex = &token.as_bytes()[..32];
        let fresh = fresh.then(|| (0, [token_at(&set, hex), token_at(&release, hex)]));
        Floor {
            con,
            set,
            release,
            replies,
            fresh,
            taken: taken_reply(),
        }
    };
    let unfair = LockManager::builder()
        .nodes(&urls)
        .fencing(false)
        .fair(false)
        .build()
        .unwrap();
    let default = LockManager::builder().nodes(&urls).build().unwrap();
    // Each kind of cycle's floors: untimed; timed; timed with a fresh
    // token in every cycle (what a lock client must do at least).
    let mut floors = [
        floor("cpu:floor", false, false, false),
        floor("cpu:floor-timed", false, true, false),
        floor("cpu:floor-fresh", false, true, true),
        floor("cpu:floor-default", true, false, false),
        floor("cpu:floor-default-timed", true, true, false),
        floor("cpu:floor-default-fresh", true, true, true),
    ];
    let [f0, f1, f2, f3, f4, f5] = &mut floors;
    // The library's own bytes from a bare socket with its settings
    // (TCP_NODELAY, a read timeout), read by a minimal reader: what the
    // server and the kernel cost for exactly those bytes, without either
    // client's work.
    let mut bare = {
        let key = "cpu:bare";
        let stream = std::net::TcpStream::connect(("127.0.0.1", node.port())).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let channel = format!("{key}:redlock-release{{1}}");
        let (set, release, _) = cycle_commands(key, token, false, plain, channel.as_bytes());
        (stream, set, release, vec![0u8; 512])
    };
    let mut bare_cycle = move || {
        use std::io::{Read, Write};
        let (stream, set, release, buf) = &mut bare;
        // Reads until `lines` CRLF-ended lines have come.
        let read_lines = |stream: &mut std::net::TcpStream, buf: &mut [u8], lines: usize| {
            let mut seen = 0;
            while seen < lines {
                let n = stream.read(buf).unwrap();
                assert!(n > 0);
                seen += buf[..n].windows(2).filter(|w| w == b"\r\n").count();
            }
        };
        stream.write_all(set).unwrap();
        read_lines(stream, buf, 1);
        stream.write_all(release).unwrap();
        read_lines(stream, buf, 2);
    };
    type Cycle<'a> = Box<dyn FnMut() + 'a>;
    let mut impls: Vec<(&str, Cycle<'_>)> = vec![
        ("floor: library's commands", Box::new(|| f0.cycle())),
        ("floor, timed", Box::new(|| f1.cycle())),
        ("floor, timed, fresh token", Box::new(|| f2.cycle())),
        ("bare socket, library's bytes", Box::new(&mut bare_cycle)),
        (
            "library, fair(false), fencing off",
            Box::new(|| unfair.lock("cpu:unfair", TTL).unwrap().release().unwrap()),
        ),
        ("floor: default's commands", Box::new(|| f3.cycle())),
        ("floor, timed ", Box::new(|| f4.cycle())),
        ("floor, timed, fresh token ", Box::new(|| f5.cycle())),
        (
            "library, default settings",
            Box::new(|| default.lock("cpu:default", TTL).unwrap().release().unwrap()),
        ),
    ];
    for (_, f) in impls.iter_mut() {
        for _ in 0..200 {
            f();
        }
    }
    let (rounds, batch) = if quick { (20, 100) } else { (60, 200) };
    // The server's main thread's CPU time (ns), from the scheduler.
    let server_stat = format!("/proc/{}/schedstat", node.pid().unwrap());
    let server_cpu = || -> u64 {
        std::fs::read_to_string(&server_stat)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let mut served: Vec<Vec<f64>> = impls.iter().map(|_| Vec::new()).collect();
    let mut cpu: Vec<Vec<f64>> = impls.iter().map(|_| Vec::new()).collect();
    let mut wall: Vec<Vec<f64>> = impls.iter().map(|_| Vec::new()).collect();
    let count = impls.len();
    for round in 0..rounds {
        for k in 0..count {
            let i = (round + k) % count;
            let f = &mut impls[i].1;
            let (s0, c0, w0) = (server_cpu(), thread_cpu(), Instant::now());
            for _ in 0..batch {
                f();
            }
            cpu[i].push((thread_cpu() - c0) as f64 / batch as f64 / 1000.0);
            served[i].push(server_cpu().saturating_sub(s0) as f64 / batch as f64 / 1000.0);
            wall[i].push(w0.elapsed().as_secs_f64() * 1e6 / batch as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let cpu: Vec<f64> = cpu.iter_mut().map(median).collect();
    let wall: Vec<f64> = wall.iter_mut().map(median).collect();
    let served: Vec<f64> = served.iter_mut().map(median).collect();
    let (name, version) = server::server_version();
    println!(
        "Client CPU per uncontended lock + release, 1 loopback node, {name} {version:?}, {rounds} rounds of {batch} (medians)"
    );
    println!();
    println!(
        "| implementation                     | CPU µs | × its floor | × timed floor | server CPU µs | wall µs |"
    );
    println!(
        "|------------------------------------|-------:|------------:|--------------:|--------------:|--------:|"
    );
    for (i, (name, _)) in impls.iter().enumerate() {
        let base = if i < 5 { 0 } else { 5 };
        println!(
            "| {name:<34} | {:>6.2} | {:>11.3} | {:>13.3} | {:>13.2} | {:>7.1} |",
            cpu[i],
            cpu[i] / cpu[base],
            cpu[i] / cpu[base + 1],
            served[i],
            wall[i]
        );
    }
    for (lib, base) in [(4, 0), (8, 5)] {
        println!(
            "{}: wall × floor {:.3}, × timed floor {:.3}, × timed floor with fresh tokens {:.3}",
            impls[lib].0,
            wall[lib] / wall[base],
            wall[lib] / wall[base + 1],
            wall[lib] / wall[base + 2]
        );
    }
}
