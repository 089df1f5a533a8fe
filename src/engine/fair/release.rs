//! The release side of fair waiting: a release's hand-off to the next
//! fair waiter ([`release`], [`release_or_unfair`]), a waiter's leave
//! ([`unclaim`]), and the messages and calls they send.

use super::*;

/// A script's keys and arguments, owned.
pub(crate) type Call = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// The message with which a waiter of `token` leaving the queues (it gave
/// up, or a majority granted it) announces what it passes on; it names
/// the leave as `left-by-<token>`, so that its own manager, which ignores
/// messages naming its acquisitions under way, hears it too (the next
/// waiter may be one of its threads).
pub(crate) fn leave_message(engine: &Engine, token: &[u8]) -> Option<Vec<u8>> {
    engine.message(&[b"left-by-", token].concat())
}

/// The message with which a claim of `token` tells the waiter ahead that
/// it reserved a free key for it (see [`handing_args`]); none when
/// waiters are not woken on release. It names the claim as
/// `ahead-of-<token>`: a manager ignores messages naming its own waiting
/// acquisitions (their clean-ups), and the waiter may be one of its own.
pub(crate) fn ahead_message(engine: &Engine, token: &[u8]) -> Option<Vec<u8>> {
    engine.message(&[b"ahead-of-", token].concat())
}

/// Appends to a claim's `args` (see [`Fair::claim_call`]; `fenced`: its
/// fencing arguments are there) what lets it hand the first key not its
/// to take, when that key is free but a live waiter ahead goes first, to
/// that waiter, told with `message` on the release channel of its name
/// in `wakes` (one per lock key of the call): the first waiter need not
/// be awake for a free key to reach it. Nothing without a message.
pub(crate) fn handing_args(
    engine: &Engine,
    args: &mut Vec<Vec<u8>>,
    fenced: bool,
    message: Option<&[u8]>,
    wakes: &[&[u8]],
) {
    let Some(message) = message else {
        return;
    };
    if !fenced {
        // No counters: the arguments keep their places.
        args.extend([Vec::new(), Vec::new()]);
    }
    args.push(reserve_ms(engine).into_bytes());
    args.extend(announce_args(Some(message)).into_iter().map(<[u8]>::to_vec));
    args.extend(wakes.iter().map(release_channel));
}

pub(super) fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|k| &k[..]).collect()
}

/// Runs a script of owned keys and arguments.
pub(super) fn run(
    engine: &Engine,
    lua: &Lua,
    only: Option<&[bool]>,
    call: Call,
    round: Round,
) -> Vec<Answer> {
    with_call(engine, lua, only, call, |script| script.run(round))
}

/// The script call [`run`] makes, handed to `run` to run it as it will
/// (a claim's, naming the holders it found).
pub(super) fn with_call<R>(
    engine: &Engine,
    lua: &Lua,
    only: Option<&[bool]>,
    (keys, args): Call,
    run: impl FnOnce(ScriptCall<'_>) -> R,
) -> R {
    let (keys, args) = (refs(&keys), refs(&args));
    run(engine.script(lua, &keys, &args).only(only))
}

/// The lock keys `locks`, then their queues, then their tickets.
pub(super) fn queued_keys(locks: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = locks.iter().map(|k| k.to_vec()).collect();
    keys.extend(locks.iter().map(|k| queue_key(k)));
    keys.extend(locks.iter().map(|k| tickets_key(k)));
    keys
}

/// A lock's (or a leadership's) release on the members `only` selects:
/// the key deleted where it holds `token`, or handed to the first fair
/// waiter queued there (see the module docs), and a leadership's
/// `record` of ours deleted; with a `message`, the script announces it,
/// naming the waiter it was handed to, so that only that waiter is woken.
pub(crate) fn release(
    engine: &Engine,
    only: Option<&[bool]>,
    key: &[u8],
    record: Option<&[u8]>,
    wakes: &[u8],
    token: &[u8],
    message: Option<&[u8]>,
) -> Vec<Answer> {
    let call = handing_call(engine, &[key], record, &[wakes], token, message);
    run(engine, &HANDOFF, only, call, RELEASE)
}

/// A fair release's tally: its `answers`, and, on the members that
/// refused the queue (see [`refused`]), the answers of `unfair`, the
/// release an unfair manager sends, run there: fairness is a courtesy,
/// the release is not. The hand-off script runs every command a rule
/// can refuse before it writes, so a refused member still holds the
/// token for `unfair` to delete.
pub(crate) fn release_or_unfair(
    engine: &Engine,
    answers: Vec<Answer>,
    unfair: impl FnOnce(&[bool]) -> Tally,
) -> Tally {
    // The usual case, every member took the queue: nothing to redo.
    if !answers.iter().any(is_refusal) {
        return Tally::count(answers);
    }
    let refused = refused(engine, &answers);
    let mut tally = Tally::count(
        answers
            .into_iter()
            .zip(&refused)
            .map(|(a, r)| a.filter(|_| !r)),
    );
    if refused.contains(&true) {
        tally.add(unfair(&refused));
    }
    tally
}

/// An answer that refused the queue's keys or commands (see [`refused`]).
fn is_refusal(answer: &Answer) -> bool {
    matches!(answer, Some(Err(e)) if e.kind() == NodeErrorKind::Permission)
}

/// The members whose `answers` refused the queue's keys or commands
/// (`NOPERM`: an ACL rule without the fair additions, or a key pattern
/// that misses the queue's keys), where a release must go again as an
/// unfair one. A refusal is noted: this manager's waiters wait unfairly
/// for a while (see [`REFUSED_FOR`]), and the `log` feature warns.
fn refused(engine: &Engine, answers: &[Answer]) -> Vec<bool> {
    let refused: Vec<bool> = answers.iter().map(is_refusal).collect();
    if let Some(Some(Err(e))) = answers
        .iter()
        .zip(&refused)
        .find(|(_, r)| **r)
        .map(|(a, _)| a)
    {
        note_refusal(engine, e);
    }
    refused
}

/// Notes that a server refused the queue's commands to this manager (see
/// [`refused_lately`]); warns once a [`REFUSED_FOR`].
pub(super) fn note_refusal(engine: &Engine, e: &crate::base::node_error::NodeError) {
    let before = engine.fair_refused.lock().replace(Instant::now());
    if before.is_none_or(|at| at.elapsed() >= REFUSED_FOR) {
        crate::base::logging::log!(
            warn,
            "redlock_sync::fair",
            "fair waiting is off for {}s: the queue's commands were refused ({e}); \
             give the user the fair additions (see the manual's Permissions)",
            REFUSED_FOR.as_secs()
        );
        #[cfg(not(feature = "log"))]
        let _ = e;
    }
}

/// The keys and arguments of the release or the leave script (the same,
/// but a `record` for the release only; the leave never gives up a
/// token) for the lock keys `locks` (one lock, or a set's slot group),
/// each announced on the release channel of its name in `wakes`.
pub(crate) fn handing_call(
    engine: &Engine,
    locks: &[&[u8]],
    record: Option<&[u8]>,
    wakes: &[&[u8]],
    token: &[u8],
    message: Option<&[u8]>,
) -> Call {
    let mut keys = queued_keys(locks);
    keys.extend(record.map(<[u8]>::to_vec));
    let every = engine
        .fair_yield_ms
        .map_or_else(Vec::new, |ms| ms.to_string().into_bytes());
    let mut args = vec![token.to_vec(), reserve_ms(engine).into_bytes(), every];
    announce(&mut args, message, wakes);
    (keys, args)
}

/// The announcement's arguments, if any: the command, the message, and
/// the release channel of each name in `wakes`.
fn announce(args: &mut Vec<Vec<u8>>, message: Option<&[u8]>, wakes: &[&[u8]]) {
    let announce = announce_args(message);
    if !announce.is_empty() {
        args.extend(announce.into_iter().map(<[u8]>::to_vec));
        args.extend(wakes.iter().map(release_channel));
    }
}

/// The clean-up of a queued attempt that failed, on the members `only`
/// selects: where it replaced its reservation with its token, the
/// reservation goes back until the deadline it had; elsewhere the key is
/// deleted where it holds `token`, and that is announced, as any clean-up
/// does (see the unclaim script).
pub(crate) fn unclaim(
    engine: &Engine,
    only: Option<&[bool]>,
    key: &[u8],
    wakes: &[u8],
    token: &[u8],
    message: Option<&[u8]>,
) -> Tally {
    let call = unclaim_call(&[key], &[wakes], token, message);
    Tally::count(run(engine, &UNCLAIM, only, call, RELEASE))
}

/// The unclaim script's keys and arguments for the lock keys `locks`
/// (one lock, or a set's slot group), each announced on the release
/// channel of its name in `wakes`.
pub(crate) fn unclaim_call(
    locks: &[&[u8]],
    wakes: &[&[u8]],
    token: &[u8],
    message: Option<&[u8]>,
) -> Call {
    let mut keys: Vec<Vec<u8>> = locks.iter().map(|k| k.to_vec()).collect();
    keys.extend(locks.iter().map(|k| tickets_key(k)));
    let mut args = vec![token.to_vec()];
    announce(&mut args, message, wakes);
    (keys, args)
}
