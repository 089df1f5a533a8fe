//! Each script model of `lock.rs` ([`Server::run`]) tied to the Lua (and
//! the commands) it stands for: random sequences of requests, late and
//! out of order ones among them (values of earlier attempts, shorter
//! TTLs), go to a real server and to the model, which must give the same
//! answers and leave the same value, expiry and counter. The server is
//! `redis-server`, or what `REDIS_SERVER_BIN` names (CI runs it on each
//! server it tests).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::Value as Reply;

use super::lock::{Answer, Request, Rules, Server, Store, Value};
use crate::engine::single::{COUNT, EXTEND, RAISE, UNLOCK};

/// One model tick on the real server (long, so that the sequence's own
/// time does not count).
const TICK_MS: u64 = 1000;
const KEY: &str = "model:key";
const COUNTER: &str = "model:key:fence";
/// The counter's keep, and where a sequence starts it.
const KEEP_MS: u64 = 60_000;
const START: u64 = 1000;
/// The store's keys: the highest token seen, and the data.
const SEEN: &str = "model:data:seen";
const DATA: &str = "model:data";
/// The store's fenced write, as `fence::Fence` sends it.
const FENCE: &str = include_str!("../scripts/fence/set.lua");

/// A server of its own on a free port, killed when dropped.
pub(super) struct Real {
    _server: Reaped,
    pub(super) con: redis::Connection,
    client: redis::Client,
}

/// A child process killed and waited for when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Real {
    pub(super) fn start() -> Real {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Reaped(
            Command::new(&bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {bin:?}: {e}")),
        );
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut con) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut con).is_ok()
            {
                return Real {
                    _server: child,
                    con,
                    client,
                };
            }
            assert!(Instant::now() < deadline, "{bin:?} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A connection of its own subscribed to `channel` (a listener, as a
    /// waiting manager keeps one), for as long as it is kept.
    pub(super) fn listener(&self, channel: &str) -> redis::Connection {
        let mut con = self.client.get_connection().expect("a connection");
        redis::cmd("SUBSCRIBE")
            .arg(channel)
            .exec(&mut con)
            .expect("subscribed");
        con
    }

    pub(super) fn eval(&mut self, source: &[u8], keys: &[&str], args: &[Vec<u8>]) -> i64 {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(source).arg(keys.len()).arg(keys).arg(args);
        cmd.query(&mut self.con).expect("the script ran")
    }

    /// What `request` answers on the server, sent as the library sends it.
    fn run(&mut self, request: Request) -> Answer {
        let ms = |ticks: u16| (u64::from(ticks) * TICK_MS).to_string().into_bytes();
        match request {
            Request::Take {
                value,
                ttl,
                fenced,
                by_incr,
                ..
            } => {
                let mut pipe = redis::pipe();
                pipe.cmd("SET")
                    .arg(KEY)
                    .arg(value.bytes())
                    .arg("NX")
                    .arg("PX")
                    .arg(ms(ttl));
                if fenced && by_incr {
                    // A connection that counted the counter by the script
                    // (`members::request::Counts`).
                    pipe.cmd("INCR").arg(COUNTER);
                } else if fenced {
                    // The model's clock reading at tick 0 (see
                    // `Server::run`).
                    pipe.cmd("EVAL")
                        .arg(COUNT.source())
                        .arg(1)
                        .arg(COUNTER)
                        .arg(START)
                        .arg(KEEP_MS);
                }
                let replies: Vec<Reply> = pipe.query(&mut self.con).expect("the take ran");
                let set = replies[0] == Reply::Okay;
                let count = match replies.get(1) {
                    Some(Reply::Int(n)) => *n as u64,
                    _ => 0,
                };
                // The sequences' values name no server: a refusal finds
                // none named.
                let named = (!set).then_some([0; super::lock::NODES]);
                Answer::Took { set, count, named }
            }
            Request::Raise { value, to } => Answer::Int(self.eval(
                RAISE.source(),
                &[KEY, COUNTER],
                &[
                    value.bytes(),
                    to.to_string().into_bytes(),
                    KEEP_MS.to_string().into_bytes(),
                ],
            )),
            Request::Extend { value, ttl } => {
                Answer::Int(self.eval(EXTEND.source(), &[KEY], &[value.bytes(), ms(ttl)]))
            }
            Request::Unlock { value } => {
                Answer::Int(self.eval(UNLOCK.source(), &[KEY], &[value.bytes()]))
            }
            Request::Write { token, .. } => {
                let (wrote, _): (i64, String) = redis::cmd("EVAL")
                    .arg(FENCE)
                    .arg(2)
                    .arg(SEEN)
                    .arg(DATA)
                    .arg(token)
                    .arg("v")
                    .query(&mut self.con)
                    .expect("the write ran");
                Answer::Int(wrote)
            }
        }
    }

    /// The key's value and ms left, and the counter.
    fn read(&mut self) -> (Option<Vec<u8>>, i64, Option<u64>) {
        let value: Option<Vec<u8>> = redis::cmd("GET").arg(KEY).query(&mut self.con).unwrap();
        let left: i64 = redis::cmd("PTTL").arg(KEY).query(&mut self.con).unwrap();
        let counter: Option<u64> = redis::cmd("GET").arg(COUNTER).query(&mut self.con).unwrap();
        (value, left, counter)
    }
}

/// splitmix64.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// A request drawn from a few values (two clients, two attempts: late
/// ones are those of an earlier attempt) and TTLs of one to five ticks.
fn request(rng: &mut Rng) -> Request {
    let value = Value {
        client: rng.below(2) as u8,
        acquisition: 0,
        attempt: 1 + rng.below(2) as u8,
    };
    let ttl = 1 + rng.below(5) as u16;
    match rng.below(4) {
        0 => Request::Take {
            value,
            ttl,
            fenced: rng.below(2) == 0,
            names: [0; super::lock::NODES],
            by_incr: rng.below(2) == 0,
        },
        1 => Request::Raise {
            value,
            to: START + rng.below(8),
        },
        2 => Request::Extend { value, ttl },
        _ => Request::Unlock { value },
    }
}

#[test]
fn each_script_model_answers_and_leaves_what_its_lua_does() {
    let mut real = Real::start();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    eprintln!("seed {seed}");
    let mut rng = Rng(seed);
    for sequence in 0..40 {
        let _: () = redis::cmd("FLUSHALL").query(&mut real.con).unwrap();
        // A counter behind the clock reading (a server restarted from an
        // older copy), at it, ahead of it, or none.
        let preset = [None, Some(START - 7), Some(START), Some(START + 5)][sequence % 4];
        if let Some(preset) = preset {
            let _: () = redis::cmd("SET")
                .arg(COUNTER)
                .arg(preset)
                .arg("PX")
                .arg(KEEP_MS)
                .query(&mut real.con)
                .unwrap();
        }
        let mut model = Server {
            counter: preset,
            ..Server::default()
        };
        let mut done = Vec::new();
        for _ in 0..12 {
            let request = request(&mut rng);
            done.push(request);
            let want = real.run(request);
            let got = model.run(request, 0, Rules::ALL);
            let (value, left, counter) = real.read();
            let what = || format!("sequence {sequence} (seed {seed}): {done:?}");
            assert_eq!(got, want, "answers differ after {}", what());
            assert_eq!(
                model.key.map(|(v, _)| v.bytes()),
                value,
                "values differ after {}",
                what()
            );
            if let Some((_, until)) = model.key {
                let model_ms = i64::from(until) * TICK_MS as i64;
                assert!(
                    (model_ms - left).abs() < 500,
                    "expiries differ ({model_ms} ms in the model, {left} ms left on the server) after {}",
                    what()
                );
            }
            assert_eq!(model.counter, counter, "counters differ after {}", what());
        }
    }
}

/// The store's fenced write (`fence/set.lua`) and its model
/// ([`Store::write`]): random tokens (equal ones, lower and higher among
/// them, of different lengths) give the same answers and leave the same
/// highest token seen.
#[test]
fn the_stores_model_answers_and_leaves_what_fence_set_lua_does() {
    let mut real = Real::start();
    let seed = super::realtime::seed();
    let mut rng = Rng(seed);
    for sequence in 0..20 {
        let _: () = redis::cmd("FLUSHALL").query(&mut real.con).unwrap();
        let mut store = Store::default();
        let mut done = Vec::new();
        for _ in 0..10 {
            // Tokens of different lengths too (the script compares
            // decimal digits, not Lua numbers).
            const TOKENS: [u64; 9] = [7, 9, 10, 99, 100, 101, START, 99_999, 100_000];
            let token = TOKENS[rng.below(TOKENS.len() as u64) as usize];
            let request = Request::Write { token, grant: 0 };
            done.push(token);
            let want = real.run(request);
            let got = store.write(token, Rules::ALL);
            let seen: Option<u64> = redis::cmd("GET").arg(SEEN).query(&mut real.con).unwrap();
            let what = || format!("sequence {sequence} (seed {seed}): tokens {done:?}");
            assert_eq!(got, want, "answers differ after {}", what());
            assert_eq!(
                store.seen,
                seen,
                "the highest tokens differ after {}",
                what()
            );
        }
    }
}
