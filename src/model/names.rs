//! Restarts in the models, and the restart rule's evidence (issue 66):
//! a server restarts as a new run ([`restart`]); a value names
//! the servers its attempt met (`Names`: each server's run + 1, 0 for
//! none), and a client decides which yes votes count with the library's
//! `decide::forgetful`, fed as the library feeds it: each server by the
//! digest of the run the client last met there, and every refusal's
//! holder given to each no and failure (as `give_holders` does), as the
//! bytes of a value that names those servers.

use super::lock::{CLIENTS, NODES, Names, Value};
use super::net::Net;
use crate::engine::decide;

/// Server `n` of `servers` starts again as `server` (empty, or an older
/// copy of itself): a new run (`runs`), counted among `restarts`; what
/// was in flight to it dies with its connections (no reply comes).
pub(crate) fn restart<S, R: Copy + Ord>(
    (servers, runs, restarts): (&mut [S; NODES], &mut [u8; NODES], &mut u8),
    net: &mut Net<R>,
    n: usize,
    server: S,
) {
    servers[n] = server;
    runs[n] += 1;
    *restarts += 1;
    net.msgs.retain(|m| usize::from(m.node) != n);
}

/// A server's digest, as a token names a server by 8 hex digits of its
/// `run_id`.
fn digest(n: usize, run: u8) -> Vec<u8> {
    format!("{n:04x}{run:04x}").into_bytes()
}

/// The servers `names` names, as a token lists them (`!` and digests).
fn list(names: Names) -> Vec<u8> {
    let named: Vec<Vec<u8>> = (0..NODES)
        .filter(|&n| names[n] > 0)
        .map(|n| digest(n, names[n] - 1))
        .collect();
    crate::base::holder::server_names(named.iter().map(|d| &d[..]))
}

/// A value's bytes that name `names`, as a token does (after `!`).
fn value_naming(names: Names) -> Vec<u8> {
    [&b"v"[..], &list(names), b"#1"].concat()
}

/// Each server's digest as a client that last met the runs `seen` (+ 1;
/// 0: never) knows it (`Engine::servers_of`).
pub(crate) fn servers(seen: Names) -> Vec<Vec<Vec<u8>>> {
    (0..NODES)
        .map(|n| match seen[n] {
            0 => Vec::new(),
            run => vec![digest(n, run - 1)],
        })
        .collect()
}

/// `v`'s bytes as a token that names `names` has them (`c0/a1`, the
/// servers, then `#` and the attempt), or as a value that names none.
pub(crate) fn token(v: Value, names: Option<Names>) -> Vec<u8> {
    let list = names.map(list).unwrap_or_default();
    let head = format!("c{}/a{}", v.client, v.acquisition);
    [head.as_bytes(), &list, format!("#{}", v.attempt).as_bytes()].concat()
}

/// Which of the `yes` votes the restart rule does not count, for a
/// client that last met the runs `seen` (+ 1; 0: never), beside the
/// holders its round's refusals named (`holders`, each a value's names).
pub(crate) fn forgetful(seen: Names, yes: [bool; NODES], holders: &[Names]) -> [bool; NODES] {
    let servers = servers(seen);
    let values: Vec<Vec<u8>> = holders.iter().map(|&h| value_naming(h)).collect();
    let held: Vec<Vec<Vec<u8>>> = yes
        .iter()
        .map(|&y| if y { Vec::new() } else { values.clone() })
        .collect();
    let out = decide::forgetful(&yes, &servers, &held);
    std::array::from_fn(|n| out[n])
}

/// Acquisitions and attempts whose values' names a model keeps (a value
/// past them names nothing).
pub(crate) const NAMED: usize = 4;

/// The servers each value names, by client, acquisition and attempt
/// (all zero: unnamed), as the value's bytes do in the library.
pub(crate) type Named = [[[Names; NAMED]; NAMED]; CLIENTS];

/// The servers `v` names, if any.
pub(crate) fn names_of(named: &Named, v: Value) -> Option<Names> {
    let names = *named
        .get(usize::from(v.client))?
        .get(usize::from(v.acquisition))?
        .get(usize::from(v.attempt))?;
    (names != [0; NODES]).then_some(names)
}

/// Notes that `v` names `names` (the runs its client met as its attempt
/// started).
pub(crate) fn name(named: &mut Named, v: Value, names: Names) {
    let (c, a, t) = (
        usize::from(v.client),
        usize::from(v.acquisition),
        usize::from(v.attempt),
    );
    if c < CLIENTS && a < NAMED && t < NAMED {
        named[c][a][t] = names;
    }
}
