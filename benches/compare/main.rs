//! Side-by-side benchmark: redlock-sync against the `redlock` crate and two
//! raw floors on persistent `redis` connections, on 1, 3 and 5 local
//! `redis-server` nodes, directly and through a 250 µs-each-way delay
//! proxy; throughput with several threads; acquire latency with a hung
//! node; waiting, fairness, and what each request costs.
//!
//! ```text
//! cargo bench --bench compare            # every table but the pinned ones
//! cargo bench --bench compare -- --quick # fewer samples
//! cargo bench --bench compare -- --help  # the sections that run alone
//! cargo bench --bench compare --features tls # adds TLS against plain
//! ```
//!
//! Each section that runs alone is a row of [`SECTIONS`]: its flag, what
//! it measures, and the tables it runs (`cycles.rs`, `load.rs`,
//! `waiting.rs`, `costs.rs`; `cpu.rs` for `--cpu` and `--probe`).
//!
//! Loopback figures depend on where the scheduler puts the processes;
//! BENCHMARKS.md names a layout for each row: `taskset -c 1 cargo bench
//! ...` (bench, client and servers on one core), and with
//! `REDLOCK_SERVER_CPUS=0` as well (the servers it starts pinned to core
//! 0, the client apart on core 1).
//!
//! Prints the tables and writes the same figures to
//! `target/bench-compare.json` (and the text beside it), whichever
//! section ran. Speed is compared as ratios within one run, so the
//! machine's noise mostly cancels.

#[path = "../../tests/it/support/proxy.rs"]
mod proxy;
#[path = "../../tests/it/support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/it/support/server.rs"]
mod server;
#[cfg(feature = "tls")]
#[path = "../../tests/it/support/tls.rs"]
#[allow(dead_code)]
mod tls;

mod common;
mod costs;
mod cpu;
mod cycles;
mod load;
mod waiting;

use std::net::SocketAddr;
use std::time::Duration;

use common::{DELAY, Report};

/// A direct connection (what the cluster support module expects).
fn admin(server: &server::Server) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// What a run's sections share: the servers (five, each also behind a
/// delay proxy), the sample sizes `--quick` sets, and the report.
pub(crate) struct Bench {
    report: Report,
    quick: bool,
    samples: usize,
    proxied_samples: usize,
    run: Duration,
    contention_run: Duration,
    nodes: server::Nodes,
    direct: Vec<String>,
    delayed: Vec<String>,
    _proxies: Vec<proxy::Proxy>,
}

/// A section that runs alone with its flag.
struct Section {
    flag: &'static str,
    measures: &'static str,
    run: fn(&mut Bench),
}

/// The sections that run alone; with none named, [`everything`] runs.
const SECTIONS: &[Section] = &[
    Section {
        flag: "--cycles",
        measures: "the uncontended tables (cycle, waking, cluster, permits, shapes)",
        run: uncontended,
    },
    Section {
        flag: "--contention",
        measures: "the waiting table",
        run: |b| waiting::contention(&mut b.report, &b.direct[..3], b.contention_run),
    },
    Section {
        flag: "--fair",
        measures: "fair waiting: loopback and delayed, a crashed waiter, the uncontended cost",
        run: |b| {
            fair_table(b, false);
            fair_table(b, true);
            waiting::crashed_waiter(&mut b.report, &b.direct[..3], if b.quick { 4 } else { 10 });
            waiting::uncontended_fair(&mut b.report, &b.direct[..3], b.samples * 2);
        },
    },
    Section {
        flag: "--fair-loopback",
        measures: "the fairness table on loopback (REDLOCK_BENCH_ROWS picks rows)",
        run: |b| fair_table(b, false),
    },
    Section {
        flag: "--fair-delayed",
        measures: "the fairness table through the delay proxy",
        run: |b| fair_table(b, true),
    },
    Section {
        flag: "--fair-uncontended",
        measures: "the uncontended fair cost",
        run: |b| waiting::uncontended_fair(&mut b.report, &b.direct[..3], b.samples * 2),
    },
    Section {
        flag: "--cluster",
        measures: "the cluster member and WAIT tables",
        run: |b| cycles::cluster_cost(&mut b.report, &b.direct[..1], b.samples * 2),
    },
    Section {
        flag: "--semaphore",
        measures: "permits against locks",
        run: |b| {
            let run = b.contention_run;
            costs::semaphore_cost(&mut b.report, &b.direct[..3], b.samples * 2, run);
        },
    },
    Section {
        flag: "--shapes",
        measures: "sets and read-write locks, also through the delay",
        run: shapes,
    },
    Section {
        flag: "--release",
        measures: "the release by DELIFEQ, DELEX or script against raw floors",
        run: |b| costs::release_cost(&mut b.report, &b.direct[..1], b.samples * 2),
    },
    Section {
        flag: "--extend",
        measures: "the extend by script (SET IFEQ raced)",
        run: |b| costs::extend_cost(&mut b.report, &b.direct[..1], b.samples * 2),
    },
];

/// Modifiers and the flags cargo passes: not sections.
const MODIFIERS: &[&str] = &["--quick", "--bench", "--help"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Entries of child processes and of the CPU measures, which start no
    // servers of the bench's own.
    let after = |flag: &str| {
        let at = args.iter().position(|a| a == flag)?;
        Some(&args[at + 1..])
    };
    if let Some(rest) = after("--contend-child") {
        return waiting::contend_child(rest);
    }
    if let Some(rest) = after("--queue-child") {
        return waiting::queue_child(rest);
    }
    if let Some(rest) = after("--probe") {
        return cpu::probe(rest);
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--cpu") {
        return cpu::cpu_race(quick);
    }
    let mut chosen = Vec::new();
    for arg in &args {
        match SECTIONS.iter().find(|s| s.flag == arg) {
            Some(section) => chosen.push(section),
            None if MODIFIERS.contains(&arg.as_str()) => {}
            None => {
                eprintln!("compare: unknown argument {arg:?}\n\n{}", usage());
                std::process::exit(2);
            }
        }
    }
    if args.iter().any(|a| a == "--help") {
        println!("{}", usage());
        return;
    }
    let mut bench = Bench::start(quick);
    if chosen.is_empty() {
        everything(&mut bench);
    }
    for section in chosen {
        (section.run)(&mut bench);
    }
    bench.report.finish();
}

/// The sections, as `--help` prints them.
fn usage() -> String {
    let mut out = String::from(
        "cargo bench --bench compare [-- [--quick] [SECTION...]]\n\n\
         With no section, every table but the pinned ones. Sections:\n",
    );
    for s in SECTIONS {
        out += &format!("  {:<20} {}\n", s.flag, s.measures);
    }
    out += "  --cpu                client and server CPU per cycle (no other section)\n";
    out
}

impl Bench {
    /// Five servers, each also behind a proxy that delays 250 µs each way.
    fn start(quick: bool) -> Bench {
        let nodes = server::Nodes::start(5).expect("redis-server nodes");
        let proxies: Vec<proxy::Proxy> = nodes
            .servers
            .iter()
            .map(|s| {
                let p = proxy::Proxy::start(SocketAddr::from(([127, 0, 0, 1], s.port()))).unwrap();
                p.set(proxy::Mode::Latency(DELAY));
                p
            })
            .collect();
        Bench {
            report: Report::new(),
            quick,
            samples: if quick { 300 } else { 2000 },
            proxied_samples: if quick { 100 } else { 400 },
            run: Duration::from_millis(if quick { 500 } else { 2000 }),
            contention_run: Duration::from_secs(if quick { 1 } else { 5 }),
            direct: nodes.urls(),
            delayed: proxies.iter().map(proxy::Proxy::url).collect(),
            nodes,
            _proxies: proxies,
        }
    }
}

/// The fairness table on loopback or, `delayed`, through the proxy (where
/// the network sets the pace rather than the 2 cores the servers, the
/// proxy and every waiter share).
fn fair_table(b: &mut Bench, delayed: bool) {
    let run = b.contention_run * 2;
    if delayed {
        waiting::fairness(&mut b.report, &b.delayed[..3], "250µs each way", run);
    } else {
        waiting::fairness(&mut b.report, &b.direct[..3], "loopback", run);
    }
}

fn shapes(b: &mut Bench) {
    costs::shapes_cost(
        &mut b.report,
        &b.direct[..3],
        &b.delayed[..3],
        b.samples * 2,
        b.proxied_samples,
    );
}

/// The uncontended tables: the cycle on 1, 3 and 5 nodes, loopback and
/// delayed, then waking, a cluster member, permits and shapes.
fn uncontended(b: &mut Bench) {
    let report = &mut b.report;
    report.line(format!(
        "redlock-sync {} compare bench ({} samples per cell, {} through the proxy)",
        env!("CARGO_PKG_VERSION"),
        b.samples,
        b.proxied_samples
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
        cycles::cycles(report, &b.direct[..n], "loopback", b.samples, true);
    }
    for n in [1, 3, 5] {
        cycles::cycles(report, &b.delayed[..n], "250µs", b.proxied_samples, true);
    }
    cycles::wake_cost(report, &b.direct, b.samples * 2);
    cycles::cluster_cost(report, &b.direct[..1], b.samples * 2);
    costs::semaphore_cost(report, &b.direct[..3], b.samples * 2, b.contention_run);
    shapes(b);
}

/// Every table but the pinned ones.
fn everything(b: &mut Bench) {
    uncontended(b);
    load::throughput_table(&mut b.report, &b.direct, b.run);
    load::hung_node(&mut b.report, &mut b.nodes, &b.direct, b.quick);
    waiting::contention(&mut b.report, &b.direct[..3], b.contention_run);
    fair_table(b, false);
    waiting::crashed_waiter(&mut b.report, &b.direct[..3], if b.quick { 4 } else { 10 });
    waiting::uncontended_fair(&mut b.report, &b.direct[..3], b.samples * 2);
    #[cfg(feature = "tls")]
    cycles::tls_cycles(&mut b.report, b.samples);
}
