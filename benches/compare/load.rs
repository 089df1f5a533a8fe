//! Under load: throughput with several threads, and the acquisition
//! with one of five nodes hung.

use crate::common::*;
use crate::server;

/// Cycles per second with 1, 4 and 16 threads on distinct keys and 8 on
/// one, against the multiplexed floor.
pub(crate) fn throughput_table(report: &mut Report, direct: &[String], run: Duration) {
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
    let mut dlm = manager(direct);
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
                let mut raw = Raw::new(direct, &format!("bench:floor:{t}"));
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
        report.record(format!(
            "{{\"kind\":\"throughput\",\"threads\":{threads},\"contended\":{contended},\
             \"per_second\":{rate:.0},\"vs_one_thread\":{:.3},\"floor_per_second\":{},\
             \"min_wins\":{min},\"max_wins\":{max}}},",
            rate / single,
            if floor.is_nan() {
                "null".to_owned()
            } else {
                format!("{floor:.0}")
            }
        ));
    }
}

/// The acquisition's latency with one of five nodes hung (SIGSTOP),
/// against the bound a node timeout and two cycles make.
pub(crate) fn hung_node(
    report: &mut Report,
    nodes: &mut server::Nodes,
    direct: &[String],
    quick: bool,
) {
    // Acquire latency with one of five nodes hung (SIGSTOP).
    let healthy = {
        let dlm = manager(direct);
        let mut v = Vec::new();
        for _ in 0..200 {
            let start = Instant::now();
            dlm.lock("bench:hung", TTL).unwrap().release().unwrap();
            v.push(start.elapsed());
        }
        stats(v).median
    };
    nodes.servers[4].pause();
    let dlm = manager(direct);
    let mut acquires = Vec::new();
    for _ in 0..(if quick { 10 } else { 30 }) {
        let start = Instant::now();
        let guard = dlm.lock("bench:hung", TTL).unwrap();
        acquires.push(start.elapsed());
        drop(guard);
    }
    nodes.servers[4].resume();
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
    report.record(format!("{{\"kind\":\"hung\",\"median_ms\":{:.2},\"p99_ms\":{:.2},\"timeout_ms\":{},\"healthy_cycle_us\":{:.1}}}",
        hung.median.as_secs_f64() * 1e3,
        hung.p99.as_secs_f64() * 1e3,
        timeout.as_millis(),
        us(healthy)
    ));
}
