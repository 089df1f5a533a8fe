//! The schedule with every worker a process of its own.

use super::*;

/// The schedule with every worker a process of its own (this test binary
/// again, running [`schedule_worker_process`]), each through its own
/// forwarders as in [`run`]: every shape's cross-process witness. The
/// children say when they are ready (their managers know every server),
/// then the nemesis runs while they work; each prints its spans, on the
/// machine's monotonic clock, which all processes share.
fn run_processes(seed: u64, length: Duration) -> (Vec<Span>, Vec<String>, Instant) {
    use std::io::{BufRead, BufReader};
    let mut rig = Rig::start(NODES, false);
    // Spans are placed against a clock reading taken before any child
    // starts: a child works from its own READY on, which may come before
    // the last child's. (Placed against the nemesis's start, taken after
    // every READY, a child's early spans were clamped to 0.0 ms, and two
    // holders one after the other read as two at once: seed
    // 13569031855132003166, "worker 0 set a+b [0.0ms, 0.0ms] … and worker
    // 1 lock a [0.0ms, 0.0ms]", tokens in order.)
    let (base, base_ns) = (Instant::now(), crate::exclusion::mono_ns());
    let mut children: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..WORKERS)
        .map(|w| {
            let urls: Vec<String> = rig.proxies.iter().map(|p| p[w].url()).collect();
            let mut child = crate::exclusion::child(
                "schedule::processes::schedule_worker_process",
                &[
                    ("REDLOCK_SCHED_NODES", urls.join(",")),
                    ("REDLOCK_SCHED_WORKER", w.to_string()),
                    ("REDLOCK_SCHED_SEED", seed.to_string()),
                    ("REDLOCK_SCHED_MS", length.as_millis().to_string()),
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            (child, out)
        })
        .collect();
    for (_, out) in &mut children {
        let mut line = String::new();
        let ready = loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => break false,
                Ok(_) if line.trim_end() == "READY" => break true,
                Ok(_) => {}
            }
        };
        assert!(ready, "a schedule worker process never got ready");
    }
    let t0 = Instant::now();
    let mut log = Vec::new();
    nemesis(&mut rig, seed, length, t0, &mut log);
    // The nemesis counts from `t0`, the spans from `base`: each entry says
    // both, so that a violation's spans can be set beside the faults.
    let offset = t0.duration_since(base).as_secs_f64() * 1000.0;
    for entry in &mut log {
        if let Some((ms, rest)) = entry.split_once("ms: ")
            && let Ok(ms) = ms.parse::<f64>()
        {
            *entry = format!(
                "{ms:.0}ms ({:.0}ms on the spans' clock): {rest}",
                ms + offset
            );
        }
    }
    let at = |ns: u64| base + Duration::from_nanos(ns.saturating_sub(base_ns));
    let mut spans = Vec::new();
    for (mut child, out) in children {
        for line in out.lines().map_while(Result::ok) {
            if let Some(span) = line.strip_prefix("SPAN ") {
                spans.push(parse_span(span, at));
            }
        }
        assert!(
            child.wait().unwrap().success(),
            "a schedule worker process failed"
        );
    }
    (spans, log, base)
}

/// A span as a worker process prints it: worker, op, token (or -),
/// start and end (monotonic ns), and its holds (`E:a,b`, `P:sem`, `R:rw`,
/// separated by `;`).
fn show_span(s: &Span, ns: impl Fn(Instant) -> u64) -> String {
    let holds: Vec<String> = s
        .holds
        .iter()
        .map(|h| match h {
            Hold::Exclusive(cells) => format!("E:{}", cells.join(",")),
            Hold::Permit(c) => format!("P:{c}"),
            Hold::Read(c) => format!("R:{c}"),
        })
        .collect();
    let op = OPS.iter().position(|o| *o == s.what).unwrap();
    let token = s.token.map_or("-".to_owned(), |t| t.to_string());
    format!(
        "{} {op} {token} {} {} {}",
        s.worker,
        ns(s.start),
        ns(s.end),
        holds.join(";")
    )
}

fn parse_span(line: &str, at: impl Fn(u64) -> Instant) -> Span {
    let f: Vec<&str> = line.split(' ').collect();
    let holds = f[5]
        .split(';')
        .map(|h| match h.split_once(':').unwrap() {
            ("E", cells) => Hold::Exclusive(cells.split(',').map(str::to_owned).collect()),
            ("P", c) => Hold::Permit(c.to_owned()),
            (_, c) => Hold::Read(c.to_owned()),
        })
        .collect();
    Span {
        worker: f[0].parse().unwrap(),
        what: OPS[f[1].parse::<usize>().unwrap()],
        holds,
        token: f[2].parse().ok(),
        start: at(f[3].parse().unwrap()),
        end: at(f[4].parse().unwrap()),
    }
}

/// Child process entry of [`run_processes`]: one worker of the schedule,
/// as a thread of [`run`] does, for the parent's length; prints `READY`
/// once its manager knows every server, then a `SPAN` line per holder.
#[test]
#[ignore = "a child process of the cross-process schedule, run by it"]
fn schedule_worker_process() {
    use std::io::Write;
    let Ok(urls) = std::env::var("REDLOCK_SCHED_NODES") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap().parse::<u64>().unwrap();
    let (w, seed) = (
        var("REDLOCK_SCHED_WORKER") as usize,
        var("REDLOCK_SCHED_SEED"),
    );
    let length = Duration::from_millis(var("REDLOCK_SCHED_MS"));
    let dlm = Rig::manager_of(urls.split(','), w, None);
    for op in 0..OPS.len() {
        if let Some((guard, _)) = take(&dlm, op, Duration::from_millis(TTL_MS.1), Duration::ZERO) {
            guard.release();
        }
    }
    let (t0, t0_ns) = (Instant::now(), crate::exclusion::mono_ns());
    let ns = |i: Instant| t0_ns + i.duration_since(t0).as_nanos() as u64;
    let mut out = std::io::stdout().lock();
    // Start on a line of our own: the test runner's "test ... " precedes.
    writeln!(out, "\nREADY").unwrap();
    out.flush().unwrap();
    let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    while t0.elapsed() < length {
        let op = rng.below(OPS.len() as u64) as usize;
        let ttl = rng.ms(TTL_MS.0, TTL_MS.1);
        let wait = rng.ms(0, 2 * TTL_MS.1);
        match take(&dlm, op, ttl, wait) {
            Some((guard, holds)) => {
                if let Some(span) = hold(&mut rng, w, op, guard, holds) {
                    writeln!(out, "SPAN {}", show_span(&span, ns)).unwrap();
                }
            }
            None => thread::sleep(rng.ms(1, 20)),
        }
    }
    out.flush().unwrap();
}

/// Every shape across processes: locks, sets, permits, read and write
/// locks and leaderships, each worker a process of its own, under the
/// nemesis of [`no_schedule_breaks_the_promise`].
#[test]
fn no_schedule_breaks_the_promise_across_processes() {
    let _heavy = support::heavy();
    let (seed, length) = (seed(), seconds(8));
    eprintln!(
        "schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on 5 nodes, \
         {WORKERS} processes"
    );
    let (spans, log, t0) = run_processes(seed, length);
    judge(seed, &spans, &log, t0);
}
