//! Each fair script model of `fair_server.rs` tied to its Lua: random
//! sequences of requests (two waiters, attempts out of order, late
//! claims and clean-ups among them, tickets and reservations that lapse
//! between them) go to a real server and to the model, which must give
//! the same answers and leave the same lock key, queue and tickets, with
//! the same deadlines and expiries. Time is real: the model's clock is
//! the server's `TIME`, and no request runs within a guard band of a
//! deadline (where a few milliseconds would decide it). The server is
//! `redis-server`, or what `REDIS_SERVER_BIN` names.

use std::time::Duration;

use redis::Value as Reply;

use super::fair_server::{FairRequest, FairServer, Lengths, ScriptRules};
use super::lock::{Answer, Value};
use super::scripts::{Real, Rng};
use crate::engine::fair::{CLAIM_QUEUED, HANDOFF, JOIN, LEAVE, UNCLAIM};
use crate::engine::single::UNLOCK;

const KEY: &str = "model:lock";
const QUEUE: &str = "model:lock:queue";
const TICKETS: &str = "model:lock:tickets";
/// Lengths in ms: short, so that tickets, offers, reservations and locks
/// lapse within a sequence.
const LEN: Lengths = Lengths {
    ttl: 300,
    ticket: 200,
    reserve: 100,
};
/// How near (ms) a request may run to a deadline, and how far the
/// server's and the model's readings may differ.
const BAND: u64 = 25;

/// The server's clock, in ms.
fn time(real: &mut Real) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut real.con).unwrap();
    secs * 1000 + micros / 1000
}

/// What `request` answers on the server, sent as the library sends it.
fn run(real: &mut Real, request: FairRequest) -> Answer {
    let num = |n: u64| n.to_string().into_bytes();
    let announce = || {
        [
            b"PUBLISH".to_vec(),
            b"released".to_vec(),
            b"channel".to_vec(),
        ]
    };
    let (value, lua, keys, mut args) = match request {
        FairRequest::Take { value } => {
            let reply: Reply = redis::cmd("SET")
                .arg(KEY)
                .arg(value.bytes())
                .arg("NX")
                .arg("PX")
                .arg(LEN.ttl)
                .query(&mut real.con)
                .unwrap();
            return Answer::Took {
                set: reply == Reply::Okay,
                count: 0,
            };
        }
        FairRequest::Unlock { value } => (value, &*UNLOCK, &[KEY][..], vec![]),
        FairRequest::Join { value, arrival } => (
            value,
            &*JOIN,
            &[QUEUE, TICKETS][..],
            vec![num(arrival), num(LEN.ticket), Vec::new()],
        ),
        FairRequest::Claim { value, arrival } => {
            let mut args = vec![
                num(LEN.ttl),
                num(arrival),
                num(LEN.ticket),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                num(LEN.reserve),
            ];
            args.extend(announce());
            (value, &*CLAIM_QUEUED, &[KEY, QUEUE, TICKETS][..], args)
        }
        FairRequest::Unclaim { value } => {
            (value, &*UNCLAIM, &[KEY, TICKETS][..], announce().to_vec())
        }
        FairRequest::Release { value } | FairRequest::Leave { value } => {
            let mut args = vec![num(LEN.reserve), Vec::new()];
            args.extend(announce());
            let lua = match request {
                FairRequest::Release { .. } => &*HANDOFF,
                _ => &*LEAVE,
            };
            (value, lua, &[KEY, QUEUE, TICKETS][..], args)
        }
    };
    args.insert(0, value.bytes());
    Answer::Int(real.eval(lua.source(), keys, &args))
}

/// A request drawn from two waiters' attempts (one acquisition each,
/// three attempts: the earlier ones late) and three arrivals (ties
/// included).
fn request(rng: &mut Rng) -> FairRequest {
    let value = Value {
        client: rng.below(2) as u8,
        acquisition: 0,
        attempt: 1 + rng.below(3) as u8,
    };
    let arrival = 1000 + rng.below(3);
    match rng.below(10) {
        0 => FairRequest::Take { value },
        1 => FairRequest::Join { value, arrival },
        2..=4 => FairRequest::Claim { value, arrival },
        5 => FairRequest::Unclaim { value },
        6 => FairRequest::Unlock { value },
        7 | 8 => FairRequest::Release { value },
        _ => FairRequest::Leave { value },
    }
}

/// Every deadline and expiry the model holds (ms on its clock).
fn deadlines(model: &FairServer) -> Vec<u64> {
    let mut all: Vec<u64> = model.key.map(|(_, u)| u).into_iter().collect();
    all.extend(model.queue_until);
    all.extend(model.tickets_until);
    for (_, n) in &model.tickets {
        all.extend([n.ticket, n.offer, n.next].into_iter().flatten());
    }
    all
}

/// `PTTL` of `key`.
fn pttl(real: &mut Real, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(&mut real.con).unwrap()
}

/// Whether `expiry` (the model's, `None`: none) matches the server's
/// `pttl` at `now`; `exists`: the model has the key.
fn same_expiry(expiry: Option<u64>, exists: bool, pttl: i64, now: u64) -> bool {
    match (exists, expiry) {
        (false, _) => pttl == -2,
        (true, None) => pttl == -1,
        (true, Some(u)) => pttl >= 0 && (u as i64 - now as i64 - pttl).unsigned_abs() <= BAND,
    }
}

/// Compares the server's keys with the model's at the model's `now`
/// (`offset`: the server's ms at the model's 0); `Err` says how they
/// differ.
fn compare(real: &mut Real, model: &FairServer, offset: u64) -> Result<(), String> {
    let now = time(real) - offset;
    let value: Option<Vec<u8>> = redis::cmd("GET").arg(KEY).query(&mut real.con).unwrap();
    let want = model.key.map(|(h, _)| h.bytes());
    if value != want {
        return Err(format!("key {value:?}, model {want:?}"));
    }
    let left = pttl(real, KEY);
    if !same_expiry(model.key.map(|(_, u)| u), model.key.is_some(), left, now) {
        return Err(format!("key's PTTL {left}, model {:?} at {now}", model.key));
    }
    let queue: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut real.con)
        .unwrap();
    let want: Vec<(String, u64)> = model
        .queue
        .iter()
        .map(|(a, w)| (format!("{w:?}"), *a))
        .collect();
    if queue != want {
        return Err(format!("queue {queue:?}, model {want:?}"));
    }
    let left = pttl(real, QUEUE);
    if !same_expiry(model.queue_until, !model.queue.is_empty(), left, now) {
        return Err(format!(
            "queue's PTTL {left}, model {:?}",
            model.queue_until
        ));
    }
    let mut fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(TICKETS)
        .query(&mut real.con)
        .unwrap();
    fields.sort();
    let mut want = Vec::new();
    for (w, n) in &model.tickets {
        for (prefix, at) in [("", n.ticket), ("offer:", n.offer), ("next:", n.next)] {
            if let Some(at) = at {
                want.push((format!("{prefix}{w:?}"), at));
            }
        }
    }
    want.sort();
    let names = fields.iter().map(|(f, _)| f);
    if !names.eq(want.iter().map(|(f, _)| f)) {
        return Err(format!("tickets {fields:?}, model {want:?}"));
    }
    for ((field, got), (_, at)) in fields.iter().zip(&want) {
        // A ticket reads "deadline:address" (no address here).
        let deadline: u64 = got.trim_end_matches(':').parse().unwrap();
        if (deadline as i64 - offset as i64 - *at as i64).unsigned_abs() > BAND {
            return Err(format!("{field}: {got} (- {offset}), model {at}"));
        }
    }
    let left = pttl(real, TICKETS);
    if !same_expiry(model.tickets_until, !model.tickets.is_empty(), left, now) {
        return Err(format!(
            "tickets' PTTL {left}, model {:?}",
            model.tickets_until
        ));
    }
    Ok(())
}

#[test]
fn each_fair_script_model_answers_and_leaves_what_its_lua_does() {
    let mut real = Real::start();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    eprintln!("seed {seed}");
    let mut rng = Rng(seed);
    let rules = ScriptRules { late_claims: true };
    for sequence in 0..16 {
        let _: () = redis::cmd("FLUSHALL").query(&mut real.con).unwrap();
        let offset = time(&mut real);
        let mut model = FairServer::default();
        let mut done = Vec::new();
        for _ in 0..14 {
            let request = request(&mut rng);
            std::thread::sleep(Duration::from_millis(rng.below(70)));
            // Not within a guard band of a deadline.
            let now = loop {
                let now = time(&mut real) - offset;
                if deadlines(&model).iter().all(|&d| d.abs_diff(now) > BAND) {
                    break now;
                }
                std::thread::sleep(Duration::from_millis(BAND + 5));
            };
            done.push((now, request));
            let want = run(&mut real, request);
            let got = model.run(request, now, LEN, rules);
            let what = || format!("sequence {sequence} (seed {seed}): {done:?}");
            let same = match (got, want) {
                (Answer::Int(g), Answer::Int(w)) if g <= -3 && w <= -3 => g.abs_diff(w) <= BAND,
                _ => got == want,
            };
            assert!(
                same,
                "answers differ ({got:?} in the model, {want:?} on the server) after {}",
                what()
            );
            if let Err(why) = compare(&mut real, &model, offset) {
                panic!("{why} after {}", what());
            }
        }
    }
}
