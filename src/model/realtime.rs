//! The clock of the real-time differential tests (`fair_scripts`,
//! `rw_scripts`, `el_scripts`): the model's clock is the server's `TIME`
//! less the sequence's start, no request runs within a guard band of a
//! deadline (where a few milliseconds would decide it), and one the test
//! was held up in is given up rather than compared.

use std::time::Duration;

use super::scripts::Real;

/// How near (ms) a request may run to a deadline, and how far the
/// server's and the model's readings may differ.
pub(super) const BAND: u64 = 25;

/// The server's clock, in ms.
pub(super) fn time(real: &mut Real) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut real.con).unwrap();
    secs * 1000 + micros / 1000
}

/// The run's seed: `MODEL_SEED` (which replays a run's requests, not its
/// timing), or the clock; printed.
pub(super) fn seed() -> u64 {
    let seed = std::env::var("MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("seed {seed}");
    seed
}

/// Whether `expiry` (the model's, `None`: none) matches the server's
/// `pttl` at `now`; `exists`: the model has the key.
pub(super) fn same_expiry(expiry: Option<u64>, exists: bool, pttl: i64, now: u64) -> bool {
    match (exists, expiry) {
        (false, _) => pttl == -2,
        (true, None) => pttl == -1,
        (true, Some(u)) => pttl >= 0 && (u as i64 - now as i64 - pttl).unsigned_abs() <= BAND,
    }
}

/// Sends `request` to the server, with `deadlines` (the model's, in ms
/// on its clock, which starts at the server's `offset`) more than a guard
/// band away: when it ran on the model's clock (given up: the reading
/// before it was sent), what it answered, and how far that time may be
/// off. The server ran it between two readings of
/// its clock: the model runs it halfway, so that what it sets is at most
/// half that far off. Held up longer, or a deadline passed meanwhile
/// (which side of it the server was on cannot be told): `None`, and the
/// sequence is given up.
pub(super) fn timed<T>(
    real: &mut Real,
    offset: u64,
    deadlines: &[u64],
    request: impl FnOnce(&mut Real) -> T,
) -> (u64, Option<(T, u64)>) {
    let now = loop {
        let now = time(real) - offset;
        if deadlines.iter().all(|&d| d.abs_diff(now) > BAND) {
            break now;
        }
        std::thread::sleep(Duration::from_millis(BAND + 5));
    };
    let answer = request(real);
    let after = time(real) - offset;
    let skew = (after - now) / 2;
    let passed = deadlines.iter().any(|&d| d > now && d <= after + BAND);
    match skew > 20 || passed {
        true => (now, None),
        false => (now + skew, Some((answer, skew))),
    }
}
