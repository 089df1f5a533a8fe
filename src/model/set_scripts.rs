//! The set's script models of `set_server.rs` tied to their Lua: random
//! sequences over two lock keys, `a` and `b`, of a set's requests (its
//! first attempt, its claims naming where it waits, clean-ups, releases,
//! leaves, joins at one key or at every key) and locks' requests on
//! either key, late attempts among them, claims with and without the
//! hand-off arguments, go to a real server and to the model, which must
//! give the same answers and leave the same keys, queues and tickets with
//! the same deadlines and expiries, in real time as in `fair_scripts`.
//! The first sequence is scripted: a holder of `a` asks for `b` behind a
//! set that was handed `b`, which gives it on. The server is
//! `redis-server`, or what `REDIS_SERVER_BIN` names.

use std::time::Duration;

use super::fair_scripts::{LEN, Names, compare, deadlines, run_on, same_answer};
use super::fair_server::{FairRequest, Held, ScriptRules};
use super::lock::{Answer, Value};
use super::realtime::{seed, time, timed};
use super::scripts::{Real, Rng};
use super::set_server::{On, SetRequest, SetRules, SetServer};

/// The two lock keys' names (one hash tag: a Redis Cluster would take
/// them in one script too).
const NAMES: [Names; 2] = [
    Names {
        key: "{model}:a",
        queue: "{model}:a:queue",
        tickets: "{model}:a:tickets",
    },
    Names {
        key: "{model}:b",
        queue: "{model}:b:queue",
        tickets: "{model}:b:tickets",
    },
];

/// The set of the tests: {b, a}.
const SET: On = On::Set([1, 0]);

/// What `r` answers on the server, sent as the library sends it.
fn run(real: &mut Real, r: SetRequest, handing: bool) -> Answer {
    let len = super::fair_server::Lengths { handing, ..LEN };
    match r.on {
        On::Key(k) => run_on(real, &[NAMES[usize::from(k)]], r.request, None, len),
        On::Set(keys) => run_on(
            real,
            &keys.map(|k| NAMES[usize::from(k)]),
            r.request,
            Some(r.named),
            len,
        ),
    }
}

fn value(client: u8, attempt: u8) -> Value {
    Value {
        client,
        acquisition: 0,
        attempt,
    }
}

/// A request: client 0 is the set's waiter, clients 1 and 2 lock either
/// key; three attempts each (the earlier ones late) and three arrivals.
/// A third of the time it is what the protocol sends next (a holder
/// releases, the waiter a reservation names claims, the first in a line
/// claims), so that hand-offs and the set's give-ons happen.
fn request(rng: &mut Rng, model: &SetServer) -> SetRequest {
    let client = rng.below(3) as u8;
    let attempt = 1 + rng.below(3) as u8;
    let arrival = 1000 + rng.below(3);
    let mut on = match client {
        0 => SET,
        _ => On::Key(rng.below(2) as u8),
    };
    let named = rng.below(3) as u8;
    let mut kind = rng.below(10);
    let mut who = value(client, attempt);
    if rng.below(3) == 0 {
        let k = rng.below(2) as usize;
        let lane = &model.lanes[k];
        let next = match lane.key.map(|(h, _)| h) {
            Some(Held::Token(holder)) => Some((holder.client, 7)),
            Some(Held::Next(w)) => Some((w.client, 2)),
            None => lane.queue.first().map(|&(_, w)| (w.client, 2)),
        };
        if let Some((c, k_kind)) = next {
            who = value(c, attempt);
            kind = k_kind;
            on = match c {
                0 => SET,
                _ => On::Key(k as u8),
            };
        }
    }
    let request = match kind {
        0 => FairRequest::Take { value: who },
        1 => FairRequest::Join {
            value: who,
            arrival,
        },
        2..=4 => FairRequest::Claim {
            value: who,
            arrival,
        },
        5 => FairRequest::Unclaim { value: who },
        6 => FairRequest::Unlock { value: who },
        7 | 8 => FairRequest::Release { value: who },
        _ => FairRequest::Leave { value: who },
    };
    // A set joins at one key (the library's), or at every key (as sets
    // did before issue 38).
    if matches!(request, FairRequest::Join { .. }) && on == SET && named > 0 {
        on = On::Key([1, 0][usize::from(named - 1)]);
    }
    SetRequest { on, request, named }
}

/// The scripted sequence: `c2` holds `b`, `c1` holds `a`; the set claims
/// (refused, in line at `b`), `c1` claims `b` behind it; `c2`'s release
/// hands `b` to the set, whose claim gives it on to `c1` (a holder keeps
/// `a`), and `c1` takes it.
fn giving_on() -> Vec<SetRequest> {
    let (set, c1, c2) = (value(0, 1), value(1, 1), value(2, 1));
    let key = |k: u8, request| SetRequest {
        on: On::Key(k),
        request,
        named: 0,
    };
    let claim = SetRequest {
        on: SET,
        request: FairRequest::Claim {
            value: set,
            arrival: 1000,
        },
        named: 1,
    };
    let c1_claims_b = key(
        1,
        FairRequest::Claim {
            value: c1,
            arrival: 1001,
        },
    );
    vec![
        key(1, FairRequest::Take { value: c2 }),
        key(0, FairRequest::Take { value: c1 }),
        claim,
        c1_claims_b,
        key(1, FairRequest::Release { value: c2 }),
        claim,
        c1_claims_b,
    ]
}

#[test]
fn each_set_script_model_answers_and_leaves_what_its_lua_does() {
    let mut real = Real::start();
    let seed = seed();
    let mut rng = Rng(seed);
    let (rules, set_rules) = (ScriptRules::ALL, SetRules::ALL);
    let (mut held_up, mut compared, mut granted, mut gave_on) = (0, 0, 0, 0);
    let mut scripted_given_up = false;
    for sequence in 0..17 {
        let _: () = redis::cmd("FLUSHALL").query(&mut real.con).unwrap();
        let offset = time(&mut real);
        let mut model = SetServer::default();
        let handing = sequence == 0 || rng.below(2) == 0;
        let mut done: Vec<(u64, SetRequest)> = Vec::new();
        let scripted = giving_on();
        for step in 0..16 {
            let (pause, request) = match sequence {
                0 => match scripted.get(step) {
                    Some(&r) => (0, r),
                    None => break,
                },
                _ => (rng.below(70), request(&mut rng, &model)),
            };
            std::thread::sleep(Duration::from_millis(pause));
            let near: Vec<u64> = model.lanes.iter().flat_map(deadlines).collect();
            let (now, ran) = timed(&mut real, offset, &near, |real| run(real, request, handing));
            done.push((now, request));
            let Some((want, skew)) = ran else {
                held_up += 1;
                scripted_given_up |= sequence == 0;
                break;
            };
            let before = model.clone();
            let len = super::fair_server::Lengths { handing, ..LEN };
            let got = model.run(request, now, len, rules, set_rules);
            if request.on == SET && matches!(request.request, FairRequest::Claim { .. }) {
                granted += usize::from(got == Answer::Int(1));
                // A reservation of the set's given on to another waiter.
                gave_on += (0..2)
                    .filter(|&k| {
                        let held = |s: &SetServer| s.lanes[k].key.map(|(h, _)| h);
                        matches!(held(&before), Some(Held::Next(w)) if w.client == 0)
                            && matches!(held(&model), Some(Held::Next(w)) if w.client != 0)
                    })
                    .count();
            }
            let what = || format!("sequence {sequence} (seed {seed}, handing {handing}): {done:?}");
            assert!(
                same_answer(got, want, skew),
                "answers differ ({got:?} in the model, {want:?} on the server) after {}",
                what()
            );
            let near: Vec<u64> = model.lanes.iter().flat_map(deadlines).collect();
            let mut all = true;
            for (lane, names) in model.lanes.iter().zip(NAMES) {
                match compare(&mut real, lane, offset, names, &near) {
                    Ok(true) => {}
                    Ok(false) => all = false,
                    Err(why) => panic!("{}: {why} after {}", names.key, what()),
                }
            }
            compared += usize::from(all);
        }
    }
    eprintln!(
        "{held_up} of 17 sequences given up; {compared} steps compared; {granted} set claims \
         granted; {gave_on} reservations given on"
    );
    assert!(held_up <= 8, "{held_up} of 17 sequences given up");
    assert!(compared >= 100, "only {compared} steps compared");
    assert!(granted > 0, "no set claim was granted");
    assert!(
        gave_on > 0 || scripted_given_up,
        "no set gave a reservation on"
    );
}
