//! The lockrun run: real `lockrun` processes around commands that
//! record their spans (see the module docs).

use super::*;

/// The lockrun run's checker, on made-up runs: commands on one resource
/// whose beats overlap are found; back to back, or on two resources,
/// they are not.
#[test]
fn the_lockrun_checker_finds_commands_that_ran_at_once() {
    let run = |resource, beats: Option<(u64, u64, usize)>| LrRun {
        worker: 0,
        n: 0,
        resource,
        ttl: Duration::from_secs(1),
        run_ms: 100,
        ignores_term: false,
        wrapped: false,
        exit: Some(0),
        said: String::new(),
        path: PathBuf::new(),
        beats,
    };
    let (a, b) = (LR_RESOURCES[0], LR_RESOURCES[1]);
    let found = lr_overlaps(
        &[run(a, Some((0, 100, 20))), run(a, Some((90, 200, 20)))],
        0,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        lr_overlaps(
            &[run(a, Some((0, 100, 20))), run(a, Some((101, 200, 20)))],
            0
        )
        .is_empty()
    );
    assert!(
        lr_overlaps(
            &[run(a, Some((0, 100, 20))), run(b, Some((50, 200, 20)))],
            0
        )
        .is_empty()
    );
    // A command that never beat cannot overlap.
    assert!(lr_overlaps(&[run(a, Some((0, 100, 20))), run(a, None)], 0).is_empty());
}

// The lockrun run: real `lockrun` processes around commands that record
// their spans (see the module docs).

const LR_NODES: usize = 3;
const LR_WORKERS: usize = 3;
/// The resources the lockruns contend for (each run takes one).
const LR_RESOURCES: [&str; 2] = ["sched:lr-a", "sched:lr-b"];
/// A lockrun's TTL is drawn from this range (ms).
const LR_TTL_MS: (u64, u64) = (500, 1500);
/// How long a command runs, unless stopped (ms).
const LR_RUN_MS: (u64, u64) = (100, 3000);

/// The command under lockrun: `beat.py BEATS MS IGNORE STOP` appends
/// CLOCK_MONOTONIC in ns (`time.monotonic_ns()`, comparable across the
/// processes of one machine) as a line to BEATS every 5 ms for MS ms,
/// one write(2) per line; with IGNORE `1` it ignores SIGTERM (only
/// SIGKILL stops it early), with `0` SIGTERM ends it (the default
/// action). It also stops once the file STOP exists: the test's end, so
/// that no command outlives the test, not even one orphaned by a shell
/// that lockrun killed.
const BEAT_PY: &str = r#"import os, signal, sys, time
beats, ms, ignore, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd = os.open(beats, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
end = time.monotonic_ns() + ms * 1000000
while True:
    now = time.monotonic_ns()
    os.write(fd, b"%d\n" % now)
    if now >= end or os.path.exists(stop):
        break
    time.sleep(0.005)
"#;

/// Now on CLOCK_MONOTONIC, in ns: the clock the commands beat with.
fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// One lockrun of a worker and what its command recorded.
struct LrRun {
    worker: usize,
    n: usize,
    resource: &'static str,
    ttl: Duration,
    run_ms: u64,
    ignores_term: bool,
    /// Under `sh -c 'python3 ...; :'`: only a signal to the process group
    /// reaches the python.
    wrapped: bool,
    /// lockrun's exit status (`None`: ended by a signal).
    exit: Option<i32>,
    /// lockrun's stderr (`-q`: errors only).
    said: String,
    /// The command's beats file.
    path: PathBuf,
    /// The command's first and last beats (CLOCK_MONOTONIC ns) and their
    /// count, if it beat at all: read once every command has stopped (a
    /// python orphaned by a killed shell beats on after lockrun exits).
    beats: Option<(u64, u64, usize)>,
}

impl LrRun {
    fn show(&self, mono0: u64) -> String {
        let at = |ns: u64| (ns as f64 - mono0 as f64) / 1e6;
        let span = match self.beats {
            Some((first, last, count)) => {
                format!("[{:.1}ms, {:.1}ms] ({count} beats)", at(first), at(last))
            }
            None => "(no beat)".into(),
        };
        format!(
            "worker {} run {} {span}: ttl {:?}, runs {}ms, {} SIGTERM, {}; lockrun exit {:?}{}",
            self.worker,
            self.n,
            self.ttl,
            self.run_ms,
            if self.ignores_term {
                "ignores"
            } else {
                "dies of"
            },
            if self.wrapped { "under sh" } else { "direct" },
            self.exit,
            if self.said.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.said.trim().replace('\n', "; "))
            }
        )
    }
}

/// The first and last beats of a beats file (complete lines only) and
/// their count.
fn read_beats(path: &Path) -> Option<(u64, u64, usize)> {
    let text = std::fs::read_to_string(path).ok()?;
    let complete = &text[..text.rfind('\n')? + 1];
    let beats: Vec<u64> = complete.lines().filter_map(|l| l.parse().ok()).collect();
    Some((*beats.first()?, *beats.last()?, beats.len()))
}

/// A lockrun child: killed (SIGKILL; its parent-death signal takes its
/// command along) and reaped if it is dropped still running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Creates its file when dropped: every command stops within a beat when
/// the run ends, and also when it fails.
struct StopFile<'a>(&'a Path);

impl Drop for StopFile<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0, b"stop");
    }
}

/// The lockrun run's scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lockrun run's nodes, each reached by each worker through a
/// forwarder of its own, and the nemesis's bookkeeping.
struct LrRig {
    servers: Vec<Server>,
    /// `proxies[i][w]`: worker `w`'s way to node `i`.
    proxies: Vec<Vec<Proxy>>,
    /// `cut[w][i]`: until when worker `w` cannot reach node `i`.
    cut: Vec<Vec<Instant>>,
    /// Until when each node is paused.
    paused: Vec<Instant>,
    /// The worker cut off a majority, and until when: one at a time.
    majority: Option<(usize, Instant)>,
}

impl LrRig {
    fn start() -> LrRig {
        let servers: Vec<Server> = (0..LR_NODES).map(|_| Server::start().unwrap()).collect();
        let proxies = servers
            .iter()
            .map(|s| {
                (0..LR_WORKERS)
                    .map(|_| Proxy::start(addr(s)).unwrap())
                    .collect()
            })
            .collect();
        let now = Instant::now();
        LrRig {
            servers,
            proxies,
            cut: vec![vec![now; LR_NODES]; LR_WORKERS],
            paused: vec![now; LR_NODES],
            majority: None,
        }
    }

    /// Worker `w`'s `--nodes`.
    fn urls(&self, w: usize) -> String {
        self.proxies
            .iter()
            .map(|p| p[w].url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How many nodes worker `w` cannot reach at `now`, with node `also`
    /// disturbed too.
    fn down(&self, w: usize, also: Option<usize>, now: Instant) -> usize {
        (0..LR_NODES)
            .filter(|&i| also == Some(i) || self.paused[i] > now || self.cut[w][i] > now)
            .count()
    }

    /// The worker cut off a majority at `now`, if any.
    fn cut_off(&self, now: Instant) -> Option<usize> {
        self.majority.filter(|m| m.1 > now).map(|m| m.0)
    }

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Resume(i) => self.servers[i].resume(),
            Undo::Heal(i, w) => self.proxies[i][w].set(Mode::Pass),
        }
    }
}

/// What a worker's lockrun is at: its command's beats file, its
/// resource, how long the command runs unless stopped (ms) and the TTL
/// (`None` between lockruns).
type Running = Mutex<Option<(PathBuf, &'static str, u64, Duration)>>;

/// A cut of a worker off a majority of nodes: the worker, from, to.
type MajorityCut = (usize, Instant, Instant);

/// The lockrun run's nemesis for `length` from `t0`: every 100-400 ms,
/// cuts a worker off a majority of nodes for 1-4 s (its renewals fail;
/// one such worker at a time, preferably one whose command has longer
/// left than its TTL and whose resource another worker waits for, as
/// `running` says), cuts a worker off one node for 50 ms-1.5 s, or
/// pauses a node for 50-500 ms, always leaving every other worker a
/// majority; all undone at the end. It runs on past `length` (up to
/// twice it) until a majority cut was aimed at a command that had more
/// left than its TTL. Returns the majority cuts.
fn lr_nemesis(
    rig: &mut LrRig,
    seed: u64,
    length: Duration,
    t0: Instant,
    running: &[Running],
    log: &mut Vec<String>,
) -> Vec<MajorityCut> {
    let mut rng = Rng(seed);
    let mut pending: Vec<(Instant, Undo)> = Vec::new();
    let mut cuts = Vec::new();
    // Whether a majority cut was aimed at a running command with more
    // left than its TTL: until one is, the run goes on (up to twice its
    // length), so that a schedule whose commands all happened to be short
    // when a cut came still exposes a lockrun.
    let mut aimed = false;
    while t0.elapsed() < length || (!aimed && t0.elapsed() < 2 * length) {
        thread::sleep(rng.ms(100, 400));
        let now = Instant::now();
        for undo in take_due(&mut pending, now) {
            rig.undo(undo);
        }
        let entry = format!("{:.0}ms: ", t0.elapsed().as_secs_f64() * 1000.0);
        let roll = rng.below(10);
        if roll < 5 {
            if rig.cut_off(now).is_some() {
                continue;
            }
            let free: Vec<usize> = (0..LR_WORKERS)
                .filter(|&w| rig.cut[w].iter().all(|&c| c <= now))
                .collect();
            // Preferably a worker whose command has more left to run than
            // its lockrun's TTL and a margin (it runs on past the lock's
            // loss unless lockrun stops it), on a resource another
            // worker's lockrun waits for (which takes it once the keys
            // expire); now and then one whose lockrun waits.
            let at = monotonic_ns();
            // Per worker: its resource, and if its command started, the ms
            // it has left beyond its TTL and a margin.
            let state: Vec<Option<(&str, Option<i64>)>> = running
                .iter()
                .map(|r| {
                    let (path, resource, run_ms, ttl) = r.lock().clone()?;
                    let left = read_beats(&path).map(|b| {
                        (b.0 / 1_000_000 + run_ms) as i64
                            - (at / 1_000_000) as i64
                            - ttl.as_millis() as i64
                            - 300
                    });
                    Some((resource, left))
                })
                .collect();
            let contended = |w: usize| {
                let mine = state[w].map(|s| s.0);
                (0..LR_WORKERS)
                    .any(|v| v != w && state[v].is_some_and(|s| s.1.is_none() && Some(s.0) == mine))
            };
            let left = |w: usize| state[w].and_then(|s| s.1);
            let long: Vec<usize> = free
                .iter()
                .copied()
                .filter(|&w| left(w).is_some_and(|l| l >= 0))
                .collect();
            let best: Vec<usize> = long.iter().copied().filter(|&w| contended(w)).collect();
            let from = if best.is_empty() { &long } else { &best };
            let w = match from.len() {
                0 if free.is_empty() || rng.below(6) != 0 => continue,
                0 => free[rng.below(free.len() as u64) as usize],
                n => from[rng.below(n as u64) as usize],
            };
            let what = match left(w) {
                Some(l) => format!(
                    "its command runs {l}ms past its TTL and 300ms{}",
                    if contended(w) {
                        ", another lockrun waits"
                    } else {
                        ""
                    }
                ),
                None => "no command running".into(),
            };
            let keep = rng.below(LR_NODES as u64) as usize;
            let d = rng.ms(1000, 4000);
            for i in (0..LR_NODES).filter(|&i| i != keep) {
                rig.proxies[i][w].set(Mode::Blackhole);
                rig.cut[w][i] = now + d;
                pending.push((now + d, Undo::Heal(i, w)));
            }
            rig.majority = Some((w, now + d));
            cuts.push((w, now, now + d));
            aimed |= left(w).is_some_and(|l| l >= 0);
            log.push(format!(
                "{entry}cut worker {w} off every node but {keep} for {d:?} ({what})"
            ));
        } else if roll < 8 {
            let w = rng.below(LR_WORKERS as u64) as usize;
            let i = rng.below(LR_NODES as u64) as usize;
            if rig.cut_off(now) == Some(w) || rig.down(w, Some(i), now) > 1 || rig.cut[w][i] > now {
                continue;
            }
            let d = rng.ms(50, 1500);
            rig.proxies[i][w].set(Mode::Blackhole);
            rig.cut[w][i] = now + d;
            pending.push((now + d, Undo::Heal(i, w)));
            log.push(format!("{entry}cut worker {w} off node {i} for {d:?}"));
        } else {
            let i = rng.below(LR_NODES as u64) as usize;
            let cut_off = rig.cut_off(now);
            if rig.paused[i] > now
                || (0..LR_WORKERS)
                    .filter(|&w| Some(w) != cut_off)
                    .any(|w| rig.down(w, Some(i), now) > 1)
            {
                continue;
            }
            let d = rng.ms(50, 500);
            rig.servers[i].pause();
            rig.paused[i] = now + d;
            pending.push((now + d, Undo::Resume(i)));
            log.push(format!("{entry}pause node {i} for {d:?}"));
        }
    }
    for (_, undo) in pending {
        rig.undo(undo);
    }
    cuts
}

/// A worker of the lockrun run: lockrun after lockrun until `stop`, each
/// on a random resource and TTL around a command of random length, kind
/// (ignoring SIGTERM or not) and shape (direct or under `sh`); while its
/// command may run, `running` names the command's beats file, its
/// resource, its length and the TTL.
fn lr_worker(
    w: usize,
    seed: u64,
    urls: &str,
    dir: &Path,
    stop_file: &Path,
    stop: &AtomicBool,
    running: &Running,
) -> Vec<LrRun> {
    let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let beat = dir.join("beat.py");
    let mut runs = Vec::new();
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let resource = LR_RESOURCES[rng.below(LR_RESOURCES.len() as u64) as usize];
        let ttl = rng.ms(LR_TTL_MS.0, LR_TTL_MS.1);
        let run_ms = rng.between(LR_RUN_MS.0, LR_RUN_MS.1);
        let ignores_term = rng.below(2) == 0;
        let wrapped = rng.below(2) == 0;
        let beats = dir.join(format!("w{w}-{n}.beats"));
        let err = dir.join(format!("w{w}-{n}.err"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockrun"));
        cmd.args(["--nodes", urls, "--node-timeout", "100ms", "--ttl"])
            .arg(format!("{}ms", ttl.as_millis()))
            .args(["--wait", "3s", "-q", resource, "--"]);
        if wrapped {
            cmd.args(["sh", "-c", "python3 \"$@\"; :", "sh"]);
        } else {
            cmd.arg("python3");
        }
        cmd.arg(&beat)
            .arg(&beats)
            .arg(run_ms.to_string())
            .arg(if ignores_term { "1" } else { "0" })
            .arg(stop_file)
            .env_remove("REDLOCK_NODES")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap());
        let mut child = Reaped(cmd.spawn().expect("lockrun starts"));
        *running.lock() = Some((beats.clone(), resource, run_ms, ttl));
        // Every lockrun ends by itself soon after `stop` (its command
        // sees the stop file, its wait is 3 s): one that does not is
        // killed, and shows as exit None.
        let mut stopped: Option<Instant> = None;
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break Some(status);
            }
            if stop.load(Ordering::Relaxed) {
                let since = *stopped.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(20) {
                    break None;
                }
            }
            thread::sleep(Duration::from_millis(10));
        };
        drop(child);
        *running.lock() = None;
        runs.push(LrRun {
            worker: w,
            n,
            resource,
            ttl,
            run_ms,
            ignores_term,
            wrapped,
            exit: status.and_then(|s| s.code()),
            said: std::fs::read_to_string(&err).unwrap_or_default(),
            path: beats,
            beats: None,
        });
        thread::sleep(rng.ms(1, 20));
    }
    runs
}

/// Every two commands on one resource whose spans (first beat to last)
/// overlap, as readable lines.
fn lr_overlaps(runs: &[LrRun], mono0: u64) -> Vec<String> {
    let mut found = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let (Some(sa), Some(sb)) = (a.beats, b.beats) else {
                continue;
            };
            if a.resource == b.resource && sa.0 <= sb.1 && sb.0 <= sa.1 {
                let both = (sa.1.min(sb.1) - sa.0.max(sb.0)) as f64 / 1e6;
                found.push(format!(
                    "two commands on {} at once for {both:.1}ms: {} and {}",
                    a.resource,
                    a.show(mono0),
                    b.show(mono0)
                ));
            }
        }
    }
    found
}

/// The lockrun run for `length`: three workers, each running lockrun
/// after lockrun through forwarders of its own to three nodes, while
/// [`lr_nemesis`] disturbs them; asserts that no two commands on one
/// resource ever ran at once, and that the run checked something.
fn check_lockrun(seed: u64, length: Duration) {
    let _heavy = support::heavy();
    assert!(
        Command::new("python3")
            .args(["-c", ""])
            .status()
            .is_ok_and(|s| s.success()),
        "the lockrun run needs python3 (its commands record their spans)"
    );
    eprintln!(
        "lockrun schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on 3 nodes"
    );
    let scratch = Scratch(std::env::temp_dir().join(format!(
        "redlock-sync-schedule-lockrun-{}-{seed}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(&scratch.0).unwrap();
    std::fs::write(scratch.0.join("beat.py"), BEAT_PY).unwrap();
    let stop_file = scratch.0.join("stop");
    let mut rig = LrRig::start();
    let urls: Vec<String> = (0..LR_WORKERS).map(|w| rig.urls(w)).collect();
    let running: Vec<Running> = (0..LR_WORKERS).map(|_| Mutex::new(None)).collect();
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let mono0 = monotonic_ns();
    let mono = |i: Instant| mono0 + i.duration_since(t0).as_nanos() as u64;
    let mut log = Vec::new();
    let mut cuts = Vec::new();
    let mut runs: Vec<LrRun> = thread::scope(|scope| {
        let workers: Vec<_> = (0..LR_WORKERS)
            .map(|w| {
                let (urls, dir, stop_file) = (&urls[w], &scratch.0, &stop_file);
                let (stop, running) = (&stop, &running[w]);
                scope.spawn(move || lr_worker(w, seed, urls, dir, stop_file, stop, running))
            })
            .collect();
        {
            // The workers stop, and every command within a beat, when the
            // nemesis is done, and also when it fails.
            let _stop = Stop(&stop);
            let _stop_file = StopFile(&stop_file);
            cuts = lr_nemesis(&mut rig, seed, length, t0, &running, &mut log);
        }
        workers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Every command stopped within a beat of the stop file, orphans too;
    // a margin for a loaded machine, then the spans.
    thread::sleep(Duration::from_millis(300));
    for r in &mut runs {
        r.beats = read_beats(&r.path);
    }
    let ran: Vec<&LrRun> = runs.iter().filter(|r| r.beats.is_some()).collect();
    let mut exits: BTreeMap<Option<i32>, usize> = BTreeMap::new();
    for r in &runs {
        *exits.entry(r.exit).or_default() += 1;
    }
    // Majority cuts during which the cut worker's command beat, and of
    // those the ones that expose a lockrun which lets its command run on
    // past the lock: the command had started and would have run for
    // longer than the TTL after the cut began, and the cut outlasted the
    // TTL (so no renewal could succeed in time).
    let during = |&(w, from, to): &MajorityCut| -> Vec<&LrRun> {
        ran.iter()
            .copied()
            .filter(|r| {
                let (first, last, _) = r.beats.unwrap();
                r.worker == w && first <= mono(to) && mono(from) <= last
            })
            .collect()
    };
    let effective = cuts.iter().filter(|c| !during(c).is_empty()).count();
    let exposing = cuts
        .iter()
        .filter(|c| {
            let (from, to) = (c.1, c.2);
            during(c).iter().any(|r| {
                let first = r.beats.unwrap().0;
                let ttl = r.ttl.as_nanos() as u64;
                first <= mono(from)
                    && first + r.run_ms * 1_000_000 > mono(from) + ttl
                    && to.duration_since(from) > r.ttl
            })
        })
        .count();
    eprintln!(
        "{} lockruns, {} commands ran; lockrun exits {exits:?}; {} faults, {} majority cuts, \
         {effective} of them while the cut worker's command ran, {exposing} long enough to \
         expose it; {:.1}s in all",
        runs.len(),
        ran.len(),
        log.len(),
        cuts.len(),
        t0.elapsed().as_secs_f64()
    );
    let found = lr_overlaps(&runs, mono0);
    assert!(
        found.is_empty(),
        "seed {seed} (replay with SCHEDULE_SEED={seed}): {} overlaps:\n{}\nnemesis:\n{}\n\
         every lockrun, by its command's first beat:\n{}",
        found.len(),
        found
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        log.join("\n"),
        {
            let mut all: Vec<&LrRun> = runs.iter().collect();
            all.sort_by_key(|r| r.beats.map(|b| b.0));
            all.iter()
                .map(|r| format!("{} {}", r.resource, r.show(mono0)))
                .collect::<Vec<_>>()
                .join("\n")
        }
    );
    // A run that ran few commands, or never cut a running command's
    // lockrun off a majority long enough to lose its lock while the
    // command would run on, checked little.
    assert!(ran.len() >= 8, "only {} commands ran", ran.len());
    assert!(
        exposing >= 1,
        "no majority cut long enough while the cut worker's command would run on past \
         its TTL:\n{}",
        log.join("\n")
    );
}

/// lockrun: no two commands under one resource ever run at once, while
/// lockruns are cut off a majority of nodes (their renewals fail) and
/// their commands ignore SIGTERM or run under a shell (see the module
/// docs).
#[test]
fn lockruns_never_run_two_commands_at_once() {
    check_lockrun(seed(), seconds(15));
}
