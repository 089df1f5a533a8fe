//! Each read-write script model of `rw_server.rs` tied to its Lua:
//! random sequences of reads, releases of readers, writes and writers'
//! releases (three clients, two attempts each: the earlier ones late;
//! TTLs of 150 and 300 ms, so that readers and marks lapse between
//! requests and a read may find a mark that expires before it would) go
//! to a real server and to the model, which must give the same answers
//! and leave the same lock key, readers and expiries. Time is real, as in
//! `fair_scripts.rs` (the clock and guard band of `realtime.rs`). The server
//! is `redis-server`, or what `REDIS_SERVER_BIN` names.

use std::time::Duration;

use super::lock::{Answer, Value};
use super::realtime::{BAND, same_expiry, seed, time, timed};
use super::rw_server::{RwHeld, RwRequest, RwRules, RwServer};
use super::scripts::{Real, Rng};
use crate::engine::single::UNLOCK;
use crate::shapes::rwlock::{READ, UNREAD};

const KEY: &str = "model:rw";
const READERS: &str = "model:rw:redlock-readers";
const WRITER: &str = "model:rw:redlock-writer";
/// The TTLs a request asks, in ms.
const TTLS: [u64; 2] = [150, 300];

/// What `request` answers on the server, sent as the library sends it.
fn run(real: &mut Real, request: RwRequest, ttl: u64) -> Answer {
    match request {
        RwRequest::Write { value } => {
            let reply: redis::Value = redis::cmd("SET")
                .arg(KEY)
                .arg(value.bytes())
                .arg("NX")
                .arg("PX")
                .arg(ttl)
                .query(&mut real.con)
                .unwrap();
            Answer::Took {
                set: reply == redis::Value::Okay,
                count: 0,
                named: None,
            }
        }
        RwRequest::Unlock { value } => {
            Answer::Int(real.eval(UNLOCK.source(), &[KEY], &[value.bytes()]))
        }
        RwRequest::Read { value } => {
            let reply: redis::Value = redis::cmd("EVAL")
                .arg(READ.source())
                .arg(3)
                .arg(&[KEY, READERS, WRITER])
                .arg(value.bytes())
                .arg(ttl.to_string())
                .query(&mut real.con)
                .expect("the script ran");
            match reply {
                redis::Value::Int(n) => Answer::Int(n),
                // A writer's value, named.
                redis::Value::BulkString(b) => {
                    Answer::Held(Value::parse(&String::from_utf8_lossy(&b)))
                }
                other => panic!("unexpected reply {other:?}"),
            }
        }
        RwRequest::Unread { value } => Answer::Int(real.eval(
            UNREAD.source(),
            &[KEY, READERS],
            &[
                value.bytes(),
                b"PUBLISH".to_vec(),
                b"released".to_vec(),
                b"channel".to_vec(),
            ],
        )),
    }
}

/// A request: clients 0 and 1 read, client 2 writes; a third of the
/// time of the value of the request before (a read, then its release).
fn request(rng: &mut Rng, last: Option<Value>) -> RwRequest {
    let value = match last {
        Some(last) if rng.below(3) == 0 => last,
        _ => Value {
            client: rng.below(3) as u8,
            acquisition: 0,
            attempt: 1 + rng.below(2) as u8,
        },
    };
    let release = rng.below(5) < 2;
    match (value.client < 2, release) {
        (true, false) => RwRequest::Read { value },
        (true, true) => RwRequest::Unread { value },
        (false, false) => RwRequest::Write { value },
        (false, true) => RwRequest::Unlock { value },
    }
}

/// Every deadline and expiry the model holds (ms on its clock).
fn deadlines(model: &RwServer) -> Vec<u64> {
    let mut all: Vec<u64> = model.key.map(|(_, u)| u).into_iter().collect();
    all.extend(model.readers_until);
    all.extend(model.readers.iter().map(|&(_, d)| d));
    all
}

/// Compares the server's keys with the model's (`offset`: the server's
/// ms at the model's 0); `Ok(false)`: read within a guard band of a
/// deadline, nothing compared.
fn compare(real: &mut Real, model: &RwServer, offset: u64) -> Result<bool, String> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME").cmd("GET").arg(KEY).cmd("PTTL").arg(KEY);
    pipe.cmd("ZRANGE")
        .arg(READERS)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe.cmd("PTTL").arg(READERS);
    #[allow(clippy::type_complexity)]
    let ((secs, micros), key, key_left, readers, readers_left): (
        (u64, u64),
        Option<Vec<u8>>,
        i64,
        Vec<(String, u64)>,
        i64,
    ) = pipe.query(&mut real.con).unwrap();
    let now = secs * 1000 + micros / 1000 - offset;
    if deadlines(model).iter().any(|&d| d.abs_diff(now) <= BAND) {
        return Ok(false);
    }
    let mut model = model.clone();
    model.expire(now);
    let want = model.key.map(|(h, _)| h.bytes());
    if key != want {
        return Err(format!("key {key:?}, model {want:?}"));
    }
    if !same_expiry(
        model.key.map(|(_, u)| u),
        model.key.is_some(),
        key_left,
        now,
    ) {
        return Err(format!("key's PTTL {key_left}, model {:?}", model.key));
    }
    let mut got = readers;
    got.sort();
    let want: Vec<(String, u64)> = model
        .readers
        .iter()
        .map(|(v, d)| (format!("{v:?}"), *d))
        .collect();
    let names = got.iter().map(|(v, _)| v);
    if !names.eq(want.iter().map(|(v, _)| v))
        || got
            .iter()
            .zip(&want)
            .any(|((_, g), (_, w))| (g - offset).abs_diff(*w) > BAND)
    {
        return Err(format!("readers {got:?} (- {offset}), model {want:?}"));
    }
    let exists = !model.readers.is_empty();
    if !same_expiry(model.readers_until, exists, readers_left, now) {
        return Err(format!(
            "readers' PTTL {readers_left}, model {:?}",
            model.readers_until
        ));
    }
    Ok(true)
}

#[test]
fn each_rwlock_script_model_answers_and_leaves_what_its_lua_does() {
    let mut real = Real::start();
    let seed = seed();
    let mut rng = Rng(seed);
    let (mut held_up, mut compared) = (0, 0);
    // Reads that found a mark expiring before their TTL (key_covers_readers).
    let mut raised = 0;
    // Releases of readers that left the mark to the others.
    let mut kept = 0;
    for sequence in 0..16 {
        let _: () = redis::cmd("FLUSHALL").query(&mut real.con).unwrap();
        let offset = time(&mut real);
        let mut model = RwServer::default();
        let mut done: Vec<(u64, RwRequest, u64)> = Vec::new();
        for _ in 0..14 {
            let request = request(&mut rng, done.last().map(|(_, r, _)| r.value()));
            let ttl = TTLS[rng.below(2) as usize];
            std::thread::sleep(Duration::from_millis(rng.below(120)));
            let (now, ran) = timed(&mut real, offset, &deadlines(&model), |real| {
                run(real, request, ttl)
            });
            done.push((now, request, ttl));
            let Some((want, _)) = ran else {
                held_up += 1;
                break;
            };
            let at = now;
            let short = matches!(request, RwRequest::Read { .. })
                && model
                    .key
                    .is_some_and(|(_, until)| until > at && until - at < ttl);
            let marked = |m: &RwServer| matches!(m.key, Some((RwHeld::Readers, _)));
            let was_marked = marked(&model);
            let got = model.run(request, at, ttl, RwRules::ALL);
            raised += usize::from(short && got == Answer::Int(1));
            // A reader out, others left: the mark shrunk to the longest.
            kept += usize::from(
                matches!(request, RwRequest::Unread { .. }) && was_marked && marked(&model),
            );
            let what = || format!("sequence {sequence} (seed {seed}): {done:?}");
            assert_eq!(got, want, "answers differ after {}", what());
            match compare(&mut real, &model, offset) {
                Ok(true) => compared += 1,
                Ok(false) => {}
                Err(why) => panic!("{why} after {}", what()),
            }
        }
    }
    eprintln!(
        "{held_up} of 16 sequences given up (the test was held up); {compared} steps compared; {raised} marks raised; {kept} marks kept for other readers"
    );
    assert!(held_up <= 8, "{held_up} of 16 sequences given up");
    assert!(compared >= 100, "only {compared} steps compared");
    assert!(raised > 0, "no read found a mark shorter than its TTL");
    assert!(kept > 0, "no reader's release left the mark to another");
}
