//! What each request costs: the extend, the release, permits, sets and
//! read-write locks.

use crate::common::*;

/// One extend of a held lock with fencing (one loopback node), against
/// the raw floor written both ways: the extend script by `EVALSHA`, and
/// the plain commands of servers that take `SET ... IFEQ` (Valkey 8.1+:
/// `SET key token IFEQ token PX ttl GET` and the counter's `PEXPIRE ...
/// GT`, pipelined). The library sends the second where the server takes
/// it, the first elsewhere (`REDIS_SERVER_BIN` picks the server).
pub(crate) fn extend_cost(report: &mut Report, urls: &[String], n: usize) {
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
    // The extend script after its prelude, as the library sends it.
    let script = redis::Script::new(concat!(
        include_str!("../../src/scripts/lock/expiry.lua"),
        "\n",
        include_str!("../../src/scripts/lock/extend.lua")
    ));
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
pub(crate) fn release_cost(report: &mut Report, urls: &[String], n: usize) {
    release_header(report, n);
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
    let floor = ReleaseFloor::open(urls, key);
    // The server's own compare-and-delete, if it has one.
    let plain = floor.plain;
    let delifeq_works = plain != Delete::Script;
    let plain_name = plain.raw_name();
    let raw = std::cell::RefCell::new(floor);
    let mut by_script = || raw.borrow_mut().cycle(Delete::Script, 0);
    let mut by_delifeq = || raw.borrow_mut().cycle(plain, 0);
    let mut timed_script = || raw.borrow_mut().cycle(Delete::Script, 1);
    let mut timed_plain = || raw.borrow_mut().cycle(plain, 1);
    let mut library = || unfair.lock(key, TTL).unwrap().release().unwrap();
    let mut library_fair = || fair.lock(key, TTL).unwrap().release().unwrap();
    // The default settings (fencing, fair waiting, waking on release)
    // against the same commands written raw (`Raw::same_as_default`).
    let default = LockManager::builder().nodes(urls).build().unwrap();
    let default_key = "bench:release:default";
    let mut library_default = || default.lock(default_key, TTL).unwrap().release().unwrap();
    let mut raw_same = Raw::same_as_default(urls, "bench:release:same");
    let mut same = || raw_same.multiplexed();
    let mut raw_packed = packed_floor(urls, plain);
    let mut packed = || raw_packed.multiplexed();
    // The floor of the library's own release, with a read timeout.
    let timed_name = if delifeq_works {
        format!("{plain_name}, timed")
    } else {
        "raw EVALSHA, timed".to_owned()
    };
    let mut impls: Vec<(&str, &mut dyn FnMut())> = vec![
        ("raw EVALSHA unlock", &mut by_script),
        ("library, fair(false)", &mut library),
    ];
    if delifeq_works {
        impls.push((plain_name, &mut by_delifeq));
    }
    impls.push(("library, fair (default)", &mut library_fair));
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
    release_ratios(
        report,
        &results,
        delifeq_works.then_some(plain_name),
        &timed_name,
    );
}

/// The release table's title and column heads.
fn release_header(report: &mut Report, n: usize) {
    report.line(String::new());
    report.line(format!(
        "Lock + release that hands nothing on, 1 loopback node ({n} each, raced)"
    ));
    report.line(String::new());
    report.line("| implementation          | median µs | p99 µs | × script |".into());
    report.line("|-------------------------|----------:|-------:|-------:|".into());
}

/// The raw floor of a release that hands nothing on, on the first node:
/// the acquisition's `SET` packed once, the release packed in each cycle
/// with a `PUBLISH` of its own.
struct ReleaseFloor {
    /// The connection without (0) and with (1) a read timeout.
    cons: [redis::Connection; 2],
    key: &'static str,
    token: &'static str,
    channel: Vec<u8>,
    set: Vec<u8>,
    script: redis::Script,
    /// The server's own compare-and-delete, if it has one.
    plain: Delete,
    /// How many releases it has announced.
    message: u64,
    /// What its `SET` answers when it takes the key.
    taken: Value,
}

impl ReleaseFloor {
    /// Opens both connections to `urls[0]`, loads the scripts, asks for a compare-and-delete.
    fn open(urls: &[String], key: &'static str) -> ReleaseFloor {
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
        let plain = Delete::of(&mut cons[0]);
        ReleaseFloor {
            cons,
            key,
            token,
            channel,
            set,
            script,
            plain,
            message: 0,
            taken: taken_reply(),
        }
    }

    /// A cycle releasing by `form`, on the connection without (0) or with (1) a read timeout.
    fn cycle(&mut self, form: Delete, timed: usize) {
        let con = &mut self.cons[timed];
        assert_eq!(con.req_packed_command(&self.set).unwrap(), self.taken);
        self.message += 1;
        let release = form.cmd(self.key, self.token, &self.script);
        let (deleted, _): (i64, i64) = redis::pipe()
            .add_command(release)
            .cmd("PUBLISH")
            .arg(&self.channel)
            .arg(format!("{}:{}", self.token, self.message))
            .query(con)
            .unwrap();
        assert_eq!(deleted, 1);
    }
}

/// The strict floor of `fair(false)`: its commands packed once, then only written and read.
fn packed_floor(urls: &[String], plain: Delete) -> Raw {
    // The table's other floors pack the release in each cycle, as a
    // client must for a message of its own.
    let mut raw = Raw::new(urls, "bench:release:packed");
    let token = "0123456789abcdef0123456789abcdef@host/1234#1";
    let channel = redlock_sync::release_channel("bench:release:packed");
    (raw.set, raw.unlock, raw.replies) =
        cycle_commands("bench:release:packed", token, false, plain, &channel);
    raw
}

/// The ratios under the release table: the library's rows' medians over their floors'.
fn release_ratios(
    report: &mut Report,
    results: &[(String, Stats)],
    plain: Option<&str>,
    timed_name: &str,
) {
    let ratio =
        |a: usize, b: usize| results[a].1.median.as_secs_f64() / results[b].1.median.as_secs_f64();
    let timed = results.len() - 4;
    if let Some(plain_name) = plain {
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
pub(crate) fn semaphore_cost(report: &mut Report, urls: &[String], n: usize, run: Duration) {
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
pub(crate) fn shape_rows(
    report: &mut Report,
    results: &[(String, Stats)],
    width: usize,
    json: &str,
) {
    let base = results[0].1.median.as_secs_f64();
    for (name, stats) in results {
        let ratio = stats.median.as_secs_f64() / base;
        report.line(format!(
            "| {name:<width$} | {:>9.1} | {:>6.1} | {ratio:>6.3} |",
            us(stats.median),
            us(stats.p99)
        ));
        report.record(format!(
            "{{{json},\"shape\":\"{name}\",\"median_us\":{:.1},\"ratio\":{ratio:.4}}},",
            us(stats.median)
        ));
    }
}

/// A set of 4 resources (`lock_all`), a read lock and a write lock, each
/// taken and released uncontended, against a lock cycle (raced alone, 3
/// nodes, fencing on as by default): on loopback, then through the
/// 250 µs-each-way delay.
pub(crate) fn shapes_cost(
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
