//! Each election script model of `el_server.rs` tied to its Lua: random
//! sequences of campaign attempts (the fenced `SET NX`), claims (terms
//! and claim numbers out of order: what a late claim carries),
//! resignations and reads (two candidates, two attempts each; TTLs of 150
//! and 300 ms, so that keys and records lapse between requests) go to a
//! real server and to the model, which must give the same answers and
//! leave the same key, counter, record and expiries. Time is real, as in
//! `fair_scripts.rs` (`realtime.rs`). The server is `redis-server`, or what
//! `REDIS_SERVER_BIN` names.

use std::time::Duration;

use redis::Value as Reply;

use super::el_server::{ElAnswer, ElRequest, ElRules, ElServer, Record};
use super::lock::Value;
use super::realtime::{BAND, same_expiry, seed, time, timed};
use super::scripts::{Real, Rng};
use crate::engine::single::COUNT;
use crate::shapes::election::{CLAIM, READ_LEADER, RESIGN};

const KEY: &str = "model:el";
const COUNTER: &str = "model:el:fence";
const RECORD: &str = "model:el:record";
/// Where the counter starts (set before each sequence, kept a minute):
/// above the model's clock readings (`1000 * (now + 1)`), so that both
/// count on from the counter (the count script's clock reading is sent
/// as 1).
const START: u64 = 1_000_000_000_000;
/// The TTLs a take asks, in ms.
const TTLS: [u64; 2] = [150, 300];

/// What `request` answers on the server, sent as the library sends it.
fn run(real: &mut Real, request: ElRequest, ttl: u64) -> ElAnswer {
    let num = |n: u64| n.to_string().into_bytes();
    match request {
        ElRequest::Take { value } => {
            let mut pipe = redis::pipe();
            pipe.cmd("SET")
                .arg(KEY)
                .arg(value.bytes())
                .arg("NX")
                .arg("PX")
                .arg(ttl);
            pipe.cmd("EVAL")
                .arg(COUNT.source())
                .arg(1)
                .arg(COUNTER)
                .arg(1)
                .arg(60_000);
            let (set, count): (Reply, u64) = pipe.query(&mut real.con).unwrap();
            ElAnswer::Took {
                set: set == Reply::Okay,
                count,
                named: None,
            }
        }
        ElRequest::Claim { value, term, seq } => {
            let args = [
                value.bytes(),
                num(term),
                num(u64::from(seq)),
                num(u64::from(seq)),
            ];
            ElAnswer::Int(real.eval(CLAIM.source(), &[KEY, RECORD], &args))
        }
        ElRequest::Resign { value } => {
            let args = [
                value.bytes(),
                b"PUBLISH".to_vec(),
                b"resigned".to_vec(),
                b"channel".to_vec(),
            ];
            ElAnswer::Int(real.eval(RESIGN.source(), &[KEY, RECORD], &args))
        }
        ElRequest::Read => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(READ_LEADER.source()).arg(2).arg(KEY).arg(RECORD);
            let reply: Vec<Reply> = cmd.query(&mut real.con).unwrap();
            let text = |r: &Reply| match r {
                Reply::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            let holder = text(&reply[0]).map(|t| parse(&t));
            let left = match reply[1] {
                Reply::Int(n) => u64::try_from(n).unwrap_or(0),
                _ => 0,
            };
            let record = text(&reply[2]).map(|token| Record {
                token: parse(&token),
                term: text(&reply[3]).unwrap().parse().unwrap(),
                seq: text(&reply[4]).unwrap().parse().unwrap(),
            });
            if let Some(r) = record {
                assert_eq!(
                    text(&reply[5]),
                    Some(r.seq.to_string()),
                    "the value claimed"
                );
            }
            ElAnswer::View {
                holder,
                left,
                record,
            }
        }
    }
}

/// A token back from its bytes (`c1/a0#2`).
fn parse(token: &str) -> Value {
    Value::parse(token)
}

/// A request: two candidates' attempts (the earlier ones late), terms
/// and claim numbers out of order; a third of the time of the value of
/// the request before (a take, then its claim).
fn request(rng: &mut Rng, last: Option<Value>) -> ElRequest {
    let value = match last {
        Some(last) if rng.below(3) == 0 => last,
        _ => Value {
            client: rng.below(2) as u8,
            acquisition: 0,
            attempt: 1 + rng.below(2) as u8,
        },
    };
    match rng.below(10) {
        0..=2 => ElRequest::Take { value },
        3..=6 => ElRequest::Claim {
            value,
            term: START + 1 + rng.below(4),
            seq: 1 + rng.below(3) as u8,
        },
        7 => ElRequest::Resign { value },
        _ => ElRequest::Read,
    }
}

/// The first sequence: a take, then claims that find a later claim of
/// their own token (a lower number, a lower term), reads and a
/// resignation, so that every run compares what the claim's order keeps.
const V: Value = Value {
    client: 0,
    acquisition: 0,
    attempt: 1,
};
const KEEPING: [ElRequest; 7] = [
    ElRequest::Take { value: V },
    ElRequest::Claim {
        value: V,
        term: START + 2,
        seq: 2,
    },
    ElRequest::Claim {
        value: V,
        term: START + 2,
        seq: 1,
    },
    ElRequest::Claim {
        value: V,
        term: START + 1,
        seq: 3,
    },
    ElRequest::Read,
    ElRequest::Resign { value: V },
    ElRequest::Read,
];

/// Every deadline and expiry the model holds (ms on its clock).
fn deadlines(model: &ElServer) -> Vec<u64> {
    let mut all: Vec<u64> = model.key.map(|(_, u)| u).into_iter().collect();
    all.extend(model.record.and_then(|(_, u)| u));
    all
}

/// Compares the server's keys with the model's (`offset`: the server's
/// ms at the model's 0); `Ok(false)`: read within a guard band of a
/// deadline, nothing compared.
fn compare(real: &mut Real, model: &ElServer, offset: u64) -> Result<bool, String> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME").cmd("GET").arg(KEY).cmd("PTTL").arg(KEY);
    pipe.cmd("GET").arg(COUNTER);
    pipe.cmd("HMGET")
        .arg(RECORD)
        .arg("token")
        .arg("term")
        .arg("seq")
        .arg("value");
    pipe.cmd("PTTL").arg(RECORD);
    #[allow(clippy::type_complexity)]
    let ((secs, micros), key, key_left, counter, fields, record_left): (
        (u64, u64),
        Option<String>,
        i64,
        Option<u64>,
        Vec<Option<String>>,
        i64,
    ) = pipe.query(&mut real.con).unwrap();
    let now = secs * 1000 + micros / 1000 - offset;
    if deadlines(model).iter().any(|&d| d.abs_diff(now) <= BAND) {
        return Ok(false);
    }
    let mut model = model.clone();
    model.expire(now);
    let want = model.key.map(|(v, _)| format!("{v:?}"));
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
    if counter != model.counter {
        return Err(format!("counter {counter:?}, model {:?}", model.counter));
    }
    let want: Vec<Option<String>> = match model.record {
        Some((r, _)) => vec![
            Some(format!("{:?}", r.token)),
            Some(r.term.to_string()),
            Some(r.seq.to_string()),
            Some(r.seq.to_string()),
        ],
        None => vec![None; 4],
    };
    if fields != want {
        return Err(format!("record {fields:?}, model {want:?}"));
    }
    let until = model.record.and_then(|(_, u)| u);
    if !same_expiry(until, model.record.is_some(), record_left, now) {
        return Err(format!(
            "record's PTTL {record_left}, model {:?}",
            model.record
        ));
    }
    Ok(true)
}

/// Whether two answers agree: a view's time left as far apart as the
/// two clocks' readings.
fn same(got: ElAnswer, want: ElAnswer, skew: u64) -> bool {
    match (got, want) {
        (
            ElAnswer::View {
                holder,
                left,
                record,
            },
            ElAnswer::View {
                holder: h,
                left: l,
                record: r,
            },
        ) => holder == h && record == r && left.abs_diff(l) <= 5 + skew,
        _ => got == want,
    }
}

#[test]
fn each_election_script_model_answers_and_leaves_what_its_lua_does() {
    let mut real = Real::start();
    let seed = seed();
    let mut rng = Rng(seed);
    let (mut held_up, mut compared) = (0, 0);
    // Claims that found a later claim of their own token and kept it.
    let mut kept = 0;
    let mut keeping_given_up = false;
    for sequence in 0..16 {
        let _: () = redis::cmd("FLUSHALL").query(&mut real.con).unwrap();
        let _: () = redis::cmd("SET")
            .arg(COUNTER)
            .arg(START)
            .arg("PX")
            .arg(60_000)
            .query(&mut real.con)
            .unwrap();
        let offset = time(&mut real);
        let mut model = ElServer {
            counter: Some(START),
            ..ElServer::default()
        };
        let mut done: Vec<(u64, ElRequest, u64)> = Vec::new();
        for step in 0..14 {
            let last = done.last().and_then(|(_, r, _)| match *r {
                ElRequest::Take { value }
                | ElRequest::Claim { value, .. }
                | ElRequest::Resign { value } => Some(value),
                ElRequest::Read => None,
            });
            let (request, ttl) = match sequence {
                0 => match KEEPING.get(step) {
                    Some(&request) => (request, TTLS[1]),
                    None => break,
                },
                _ => (request(&mut rng, last), TTLS[rng.below(2) as usize]),
            };
            // The first sequence at once (its key must not lapse).
            let pause = if sequence == 0 { 0 } else { rng.below(100) };
            std::thread::sleep(Duration::from_millis(pause));
            let (now, ran) = timed(&mut real, offset, &deadlines(&model), |real| {
                run(real, request, ttl)
            });
            done.push((now, request, ttl));
            let Some((want, skew)) = ran else {
                held_up += 1;
                keeping_given_up |= sequence == 0;
                break;
            };
            let before = model.record;
            let got = model.run(request, now, ttl, ElRules::ALL);
            kept += usize::from(
                matches!(request, ElRequest::Claim { .. })
                    && got == ElAnswer::Int(1)
                    && before.is_some()
                    && model.record == before,
            );
            let what = || format!("sequence {sequence} (seed {seed}): {done:?}");
            assert!(
                same(got, want, skew),
                "answers differ ({got:?} in the model, {want:?} on the server) after {}",
                what()
            );
            match compare(&mut real, &model, offset) {
                Ok(true) => compared += 1,
                Ok(false) => {}
                Err(why) => panic!("{why} after {}", what()),
            }
        }
    }
    eprintln!(
        "{held_up} of 16 sequences given up (the test was held up); {compared} steps compared; {kept} later claims kept"
    );
    assert!(held_up <= 8, "{held_up} of 16 sequences given up");
    assert!(compared >= 100, "only {compared} steps compared");
    assert!(
        kept > 0 || keeping_given_up,
        "no claim found a later one of its token"
    );
}
