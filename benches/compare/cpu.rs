//! CPU per cycle, the client's and the server's, and the probe that
//! instruction counts run.

use crate::common::*;

/// `--probe <impl> <cycles>`: one node, `cycles` lock + release cycles of
/// one implementation and nothing else, for an instruction count of the
/// client's own work (`valgrind --tool=callgrind` counts the bench
/// process only; the server is a child it does not follow). `impl` is
/// `library` (fencing and fair waiting off: the same commands as the
/// floor), `default` (default settings) or `floor` (the same commands on
/// one raw `redis` connection, written once and reused: `SET ... NX GET
/// PX`, then the server's compare-and-delete or the unlock script, with
/// the `PUBLISH` behind it). Give the server with `REDIS_SERVER_BIN`.
pub(crate) fn probe(args: &[String]) {
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
pub(crate) fn thread_cpu() -> u64 {
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
pub(crate) fn cpu_race(quick: bool) {
    let node = server::Server::start().expect("redis-server");
    let urls = [node.url()];
    let plain = Delete::of(&mut admin(&node));
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
        Floor::open(&node, plain, "cpu:floor", false, false, false),
        Floor::open(&node, plain, "cpu:floor-timed", false, true, false),
        Floor::open(&node, plain, "cpu:floor-fresh", false, true, true),
        Floor::open(&node, plain, "cpu:floor-default", true, false, false),
        Floor::open(&node, plain, "cpu:floor-default-timed", true, true, false),
        Floor::open(&node, plain, "cpu:floor-default-fresh", true, true, true),
    ];
    let [f0, f1, f2, f3, f4, f5] = &mut floors;
    let mut bare = Bare::open(&node, plain);
    let mut impls: Vec<(&str, Cycle<'_>)> = vec![
        ("floor: library's commands", Box::new(|| f0.cycle())),
        ("floor, timed", Box::new(|| f1.cycle())),
        ("floor, timed, fresh token", Box::new(|| f2.cycle())),
        ("bare socket, library's bytes", Box::new(|| bare.cycle())),
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
    let figures = measure_cpu(&node, &mut impls, rounds, batch);
    print_cpu(&impls, &figures, rounds, batch);
}

/// The token every floor and the bare socket write.
const CPU_TOKEN: &str = "0123456789abcdef0123456789abcdef@host/1234#1";

/// One implementation's lock + release cycle in [`cpu_race`].
type Cycle<'a> = Box<dyn FnMut() + 'a>;

/// A raw connection sending a cycle's two writes, `replies` each.
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
    /// A floor for `key` on `node`: with `fenced` the default's commands, else the library's.
    fn open(
        node: &server::Server,
        plain: Delete,
        key: &str,
        fenced: bool,
        timed: bool,
        fresh: bool,
    ) -> Floor {
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
        let (set, release, replies) =
            cycle_commands(key, CPU_TOKEN, fenced, plain, channel.as_bytes());
        // Its random part: the 32 hex digits before the `@`.
        let hex = &CPU_TOKEN.as_bytes()[..32];
        let fresh = fresh.then(|| (0, [token_at(&set, hex), token_at(&release, hex)]));
        Floor {
            con,
            set,
            release,
            replies,
            fresh,
            taken: taken_reply(),
        }
    }

    /// One lock + release cycle, writing a fresh token first where it takes one.
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

/// The library's own bytes from a bare socket with its settings
/// (TCP_NODELAY, a read timeout), read by a minimal reader: what the
/// server and the kernel cost for exactly those bytes, without either
/// client's work.
struct Bare {
    stream: std::net::TcpStream,
    set: Vec<u8>,
    release: Vec<u8>,
    buf: Vec<u8>,
}

impl Bare {
    /// Connects to `node` with the library's socket settings and packs the cycle's bytes.
    fn open(node: &server::Server, plain: Delete) -> Bare {
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
        let (set, release, _) = cycle_commands(key, CPU_TOKEN, false, plain, channel.as_bytes());
        Bare {
            stream,
            set,
            release,
            buf: vec![0u8; 512],
        }
    }

    /// One cycle: writes the `SET`, reads its reply, writes the release, reads its two.
    fn cycle(&mut self) {
        use std::io::Write;
        self.stream.write_all(&self.set).unwrap();
        read_lines(&mut self.stream, &mut self.buf, 1);
        self.stream.write_all(&self.release).unwrap();
        read_lines(&mut self.stream, &mut self.buf, 2);
    }
}

/// Reads until `lines` CRLF-ended lines have come.
fn read_lines(stream: &mut std::net::TcpStream, buf: &mut [u8], lines: usize) {
    use std::io::Read;
    let mut seen = 0;
    while seen < lines {
        let n = stream.read(buf).unwrap();
        assert!(n > 0);
        seen += buf[..n].windows(2).filter(|w| w == b"\r\n").count();
    }
}

/// Each implementation's medians per cycle, in µs.
struct CpuFigures {
    /// This thread's CPU time.
    cpu: Vec<f64>,
    /// The server's main thread's CPU time.
    served: Vec<f64>,
    /// The wall clock's time.
    wall: Vec<f64>,
}

/// Races `impls` in `rounds` of rotating batches of `batch` cycles, timing each batch three ways.
fn measure_cpu(
    node: &server::Server,
    impls: &mut [(&str, Cycle<'_>)],
    rounds: usize,
    batch: usize,
) -> CpuFigures {
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
    CpuFigures {
        cpu: cpu.iter_mut().map(median).collect(),
        wall: wall.iter_mut().map(median).collect(),
        served: served.iter_mut().map(median).collect(),
    }
}

/// Prints the CPU table, each row against its kind's floors, then each library's wall ratios.
fn print_cpu(impls: &[(&str, Cycle<'_>)], figures: &CpuFigures, rounds: usize, batch: usize) {
    let CpuFigures { cpu, served, wall } = figures;
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
