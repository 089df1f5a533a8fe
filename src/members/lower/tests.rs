//! The lowering's table (see the module docs): which form each server
//! takes, and what that form's bytes say.

use std::time::{Duration, Instant};

use crate::base::text::Decimal;
use crate::members::op::{Call, Fence, Op, PUBLISH, Reads, Take};
use crate::members::request::{Counter, Counts, PlainDelete, Replicas, Reply, Request, Routed};

use super::{Kind, Lowered};

use crate::members::script::scripts;

scripts! {
    /// A script for these tests.
    TEST_UNLOCK, "test-unlock", "lock/unlock.lua",
        keys ["key", "queue?"], args ["token", "publish?", "message?", "channel?"];
    /// A count script for these tests.
    TEST_COUNT, "test-count", "lock/count.lua" after "lock/counter.lua",
        keys ["fence"], args ["start", "keep"];
}

/// The commands in `packed` (RESP arrays of bulk strings), as text.
fn commands(packed: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let text = String::from_utf8_lossy(packed);
    let mut lines = text.split("\r\n");
    while let Some(head) = lines.next() {
        let Some(n) = head.strip_prefix('*') else {
            continue;
        };
        let n: usize = n.parse().unwrap();
        let mut words = Vec::new();
        for _ in 0..n {
            lines.next();
            let word = lines.next().unwrap_or_default();
            words.push(if word.len() > 40 { "<source>" } else { word }.to_owned());
        }
        out.push(words.join(" "));
    }
    out
}

fn take<'a>(fence: Option<Fence<'a>>, clean_up: Call<'a>) -> Op<'a> {
    Op::Take(Take {
        key: b"k",
        token: b"t",
        px: Decimal::of(30_000),
        fence,
        ahead: None,
        clean_up,
    })
}

fn fence(incr: bool) -> Fence<'static> {
    Fence {
        key: b"k:fence",
        count: &TEST_COUNT,
        start: Decimal::of(7),
        keep: "60000",
        keep_ms: Duration::from_secs(60),
        at: Instant::now(),
        incr,
    }
}

fn lowered<'r>(req: &'r Request<'r>, cluster: bool, asking: bool, as_: Kind) -> Lowered<'r> {
    let routed = Routed {
        asking,
        ..Routed::of(req, cluster)
    };
    let (legacy, plain) = match as_ {
        Kind::Legacy => (true, None),
        Kind::Plain(p) => (false, Some(p)),
        _ => (false, None),
    };
    routed.taken_as(legacy, plain, &Counts::default())
}

#[test]
fn a_take_is_set_nx_get_on_current_servers_and_set_nx_before_7() {
    let clean_up = Call::new(&TEST_UNLOCK, &[b"k"], &[b"t"]);
    let req = Request::new(take(None, clean_up), true, None, None);
    let current = lowered(&req, false, false, Kind::Current);
    assert_eq!(current.kind, Kind::Current);
    assert_eq!(commands(current.bytes()), ["SET k t NX GET PX 30000"]);
    assert!(matches!(current.reply(), Reply::SetGet(_)));
    let legacy = lowered(&req, false, false, Kind::Legacy);
    assert_eq!(legacy.kind, Kind::Legacy);
    assert_eq!(commands(legacy.bytes()), ["SET k t NX PX 30000"]);
    assert!(matches!(legacy.reply(), Reply::Set));
    // No count, no reload: nothing is sent by hash.
    assert_eq!(current.reload(), None);
}

#[test]
fn a_fenced_take_counts_by_script_then_by_incr_where_the_connection_knows_the_counter() {
    let clean_up = Call::new(&TEST_UNLOCK, &[b"k"], &[b"t"]);
    let wait = Some(Replicas { acks: 1, ms: "50" });
    let req = Request::new(take(Some(fence(true)), clean_up), true, wait, None);
    let routed = Routed::of(&req, false);
    let mut counts = Counts::default();
    let first = routed.taken_as(false, None, &counts);
    assert_eq!(first.kind, Kind::Current);
    let sha = TEST_COUNT.evalsha(&[b"k:fence"], &[b"7", b"60000"]);
    assert_eq!(
        commands(first.bytes()),
        [
            "SET k t NX GET PX 30000".to_owned(),
            commands(&sha)[0].clone(),
            "WAIT 1 50".to_owned(),
        ]
    );
    // Its reload is the count script's source, and the WAIT again.
    let reload = commands(&first.reload().unwrap());
    assert_eq!(reload.len(), 2);
    assert!(reload[0].starts_with("EVAL <source> 1 k:fence 7 60000"));
    assert_eq!(reload[1], "WAIT 1 50");
    // Counted by the script on this connection: an INCR counts next.
    let counter = first.counter().unwrap();
    counts.read(&counter, 9).unwrap();
    counts.settle();
    let next = routed.taken_as(false, None, &counts);
    assert_eq!(next.kind, Kind::Counted);
    assert_eq!(
        commands(next.bytes()),
        ["SET k t NX GET PX 30000", "INCR k:fence", "WAIT 1 50"]
    );
    assert!(next.counter().is_some_and(|c: Counter<'_>| c.by_incr));
    assert_eq!(next.describe(1), "INCR \"k:fence\"");
    // Strict mode: never an INCR, and no counter learned.
    let strict = Request::new(
        take(
            Some(fence(false)),
            Call::new(&TEST_UNLOCK, &[b"k"], &[b"t"]),
        ),
        true,
        None,
        None,
    );
    let strict = Routed::of(&strict, false).taken_as(false, None, &counts);
    assert_eq!(strict.kind, Kind::Current);
    assert!(strict.counter().is_none());
}

#[test]
fn a_release_is_the_servers_own_compare_and_delete_but_never_after_asking() {
    let call = Call {
        release: Some(b"t"),
        ..Call::new(&TEST_UNLOCK, &[b"k"], &[b"t"])
    };
    let req = Request::new(Op::Call(call), false, None, None);
    let ifeq = lowered(&req, false, false, Kind::Plain(PlainDelete::DelIfEq));
    assert_eq!(commands(ifeq.bytes()), ["DELIFEQ k t"]);
    assert!(matches!(ifeq.reply(), Reply::DelIfEq(false)));
    let delex = lowered(&req, true, false, Kind::Plain(PlainDelete::DelEx));
    assert_eq!(commands(delex.bytes()), ["DELEX k IFEQ t"]);
    // After an ASK: the script, whose keys the importing server checks.
    let asked = lowered(&req, true, true, Kind::Plain(PlainDelete::DelIfEq));
    assert_eq!(asked.kind, Kind::Current);
    let mut written = Vec::new();
    asked.write_into(&mut written);
    let written = commands(&written);
    assert_eq!(written[0], "ASKING");
    assert!(written[1].starts_with("EVALSHA "), "{written:?}");
    // Nor in a pipeline, or sent with the script's source.
    for routed in [
        Routed {
            reload: false,
            ..Routed::of(&req, false)
        },
        Routed {
            source: true,
            ..Routed::of(&req, false)
        },
    ] {
        let taken = routed.taken_as(false, Some(PlainDelete::DelIfEq), &Counts::default());
        assert_eq!(taken.kind, Kind::Current);
    }
    // A server without one: the script.
    let script = lowered(&req, false, false, Kind::Current);
    assert!(commands(script.bytes())[0].starts_with("EVALSHA "));
}

#[test]
fn the_publish_verb_is_each_servers_own_in_calls_and_in_a_takes_clean_up() {
    let args: [&[u8]; 4] = [b"t", PUBLISH, b"m", b"ch"];
    let call = Call {
        reads: Reads::Verdict,
        ..Call::new(&TEST_UNLOCK, &[b"k"], &args)
    };
    let req = Request::new(Op::Call(call), false, None, None);
    let node = commands(lowered(&req, false, false, Kind::Current).bytes());
    let cluster = commands(lowered(&req, true, false, Kind::Current).bytes());
    assert!(node[0].ends_with(" 1 k t PUBLISH m ch"), "{node:?}");
    assert!(cluster[0].ends_with(" 1 k t SPUBLISH m ch"), "{cluster:?}");
    let take = Request::new(take(None, call), true, None, None);
    let on_node = commands(
        &lowered(&take, false, false, Kind::Current)
            .on_timeout()
            .unwrap(),
    );
    let on_cluster = commands(
        &lowered(&take, true, false, Kind::Current)
            .on_timeout()
            .unwrap(),
    );
    assert!(on_node[0].starts_with("EVAL <source> 1 k t PUBLISH m ch"));
    assert!(on_cluster[0].starts_with("EVAL <source> 1 k t SPUBLISH m ch"));
    // Only in the argument the script declares as `publish`: the same
    // bytes elsewhere (a user's value) go as given.
    let args: [&[u8]; 2] = [PUBLISH, b"60000"];
    let call = Call::new(&TEST_COUNT, &[b"k:fence"], &args);
    let req = Request::new(Op::Call(call), false, None, None);
    let packed = lowered(&req, true, false, Kind::Current).bytes();
    assert!(packed.windows(PUBLISH.len()).any(|w| w == PUBLISH));
    let args: [&[u8]; 4] = [PUBLISH, PUBLISH, b"m", b"ch"];
    let call = Call::new(&TEST_UNLOCK, &[b"k"], &args);
    let req = Request::new(Op::Call(call), false, None, None);
    let packed = lowered(&req, false, false, Kind::Current).bytes();
    assert_eq!(
        packed
            .windows(PUBLISH.len())
            .filter(|w| *w == PUBLISH)
            .count(),
        1
    );
    assert!(commands(packed)[0].contains(" PUBLISH m ch"));
}

#[test]
fn each_form_is_packed_once_per_round() {
    for lua in all() {
        let keys = vec![&b"k"[..]; lua.takes().keys.len()];
        let args = vec![&b"1"[..]; lua.takes().args.len()];
        let call = Call::new(lua, &keys, &args);
        let req = Request::new(Op::Call(call), false, None, None);
        let a = lowered(&req, false, false, Kind::Current).bytes();
        let b = lowered(&req, false, false, Kind::Current).bytes();
        assert!(std::ptr::eq(a, b));
        let c = lowered(&req, true, false, Kind::Current).bytes();
        assert!(!std::ptr::eq(a, c));
    }
}
