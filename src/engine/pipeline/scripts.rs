//! The pipeline's scripted rounds: one script call on every member
//! ([`ScriptCall`], made by [`Engine::script`]), or one call per slot
//! group ([`script_groups`](Engine::script_groups)). The engine states
//! the call (`members::op::Call`); the members' layer lowers it for each
//! server (by hash, its source once more after `NOSCRIPT`, a server's own
//! compare-and-delete in a release's place, `SPUBLISH` on a Redis
//! Cluster).

use parking_lot::Mutex;
use redis::Value;

use super::{Announce, Answer, Args, Engine, Round};
use crate::members::batch;
use crate::members::op::{Call, Keys, Op, Reads};
use crate::members::request::Request;
use crate::members::script::Lua;

/// One slot group's keys and arguments.
pub(crate) type Group<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>);

/// One script call on the members, in the spirit of redis-rs's
/// `ScriptInvocation`: made with its script, keys and arguments
/// ([`Engine::script`]), given only what differs from a plain call
/// (which members, Redis Cluster members' own keys or arguments, an
/// announcement behind it, a release a server may run as its own
/// compare-and-delete), then run ([`run`](Self::run), [`read`](Self::read),
/// [`run_naming`](Self::run_naming)).
#[must_use = "a script call does nothing until it is run"]
pub(crate) struct ScriptCall<'a> {
    engine: &'a Engine,
    call: Call<'a>,
    only: Option<&'a [bool]>,
}

impl Engine {
    /// A call of `lua` with `keys` and `args` on every member; the round
    /// is routed by the first key's slot on Redis Cluster members.
    pub(crate) fn script<'a>(
        &'a self,
        lua: &'a Lua,
        keys: Keys<'a>,
        args: Args<'a>,
    ) -> ScriptCall<'a> {
        ScriptCall {
            engine: self,
            call: Call::new(lua, keys, args),
            only: None,
        }
    }

    /// A script run once per slot group (a set spanning slots): group 0
    /// on every member `only` selects (nodes take the whole set, `node`),
    /// the other groups on Redis Cluster members only, each group's keys
    /// and arguments from `groups`. Each member's groups are pipelined
    /// (see `batch.rs`). Returns each group's answers, one per member.
    pub(crate) fn script_groups(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        node: (Keys<'_>, Args<'_>),
        groups: &[Group<'_>],
        round: Round,
    ) -> Vec<Vec<Answer>> {
        let reads = if round.count {
            Reads::Count
        } else {
            Reads::Verdict
        };
        let wait = self.waits(round);
        let reqs: Vec<Request<'_>> = groups
            .iter()
            .enumerate()
            .map(|(g, (keys, args))| {
                let group = (&keys[..], &args[..]);
                let call = Call {
                    node: if g == 0 { node } else { group },
                    cluster: Some(group),
                    reads,
                    ..Call::new(lua, keys, args)
                };
                Request::new(Op::Call(call), round.decides, wait, None)
            })
            .collect();
        let reqs: Vec<&Request<'_>> = reqs.iter().collect();
        let members = &self.members;
        let takes = |g: usize, i: usize| {
            only.is_none_or(|only| only[i]) && (g == 0 || members[i].is_cluster())
        };
        batch::round(members, &reqs, &takes)
    }
}

impl<'a> ScriptCall<'a> {
    /// Only on the members `only` selects (all when `None`).
    pub(crate) fn only(self, only: Option<&'a [bool]>) -> ScriptCall<'a> {
        ScriptCall { only, ..self }
    }

    /// Redis Cluster members take these keys and arguments (a set's keys
    /// in one slot, where nodes take the whole set); the round is routed
    /// by their first key's slot.
    pub(crate) fn on_clusters(self, keys: Keys<'a>, args: Args<'a>) -> ScriptCall<'a> {
        let call = Call {
            cluster: Some((keys, args)),
            ..self.call
        };
        ScriptCall { call, ..self }
    }

    /// An announcement written right behind the script, whose answer is
    /// read and ignored: a release's `PUBLISH` (`SPUBLISH` on Redis
    /// Cluster members).
    pub(crate) fn tail(self, tail: Option<Announce<'a>>) -> ScriptCall<'a> {
        let call = Call { tail, ..self.call };
        ScriptCall { call, ..self }
    }

    /// A release of the one key for `token`: servers that have their own
    /// compare-and-delete (`DELIFEQ`, `DELEX ... IFEQ`) run that command
    /// in the script's place, with the same tail (see
    /// `members::request::Reply::DelIfEq`).
    pub(crate) fn or_plain_delete(self, token: &'a [u8]) -> ScriptCall<'a> {
        debug_assert_eq!(self.call.node.0.len(), 1, "a plain delete of one key");
        let call = Call {
            release: Some(token),
            ..self.call
        };
        ScriptCall { call, ..self }
    }

    /// Runs the call as `round` says: whether a yes counts only once
    /// replicas acknowledged it (`WAIT`), whether servers kept out after
    /// a restart answer, how replies read. One answer per member.
    pub(crate) fn run(self, round: Round) -> Vec<Answer> {
        // A release waits for no replica.
        debug_assert!(
            self.call.release.is_none() || !round.replicated,
            "a plain delete with a WAIT"
        );
        self.invoke(round, None)
    }

    /// Runs the call as a read: each reply is kept whole (not a number),
    /// and each member's answer is the index of its reply in the returned
    /// replies ([`Said::Kept`](crate::members::request::Said::Kept)).
    pub(crate) fn read(self, round: Round) -> (Vec<Answer>, Vec<Value>) {
        let kept = Mutex::new(Vec::new());
        let answers = self.invoke(round, Some(&kept));
        (answers, kept.into_inner())
    }

    /// Runs the call as a count (`round.count`) whose refusals may name
    /// who holds the key: each member's answer is a count, or
    /// [`Said::Held`](crate::members::request::Said::Held) with the
    /// holder's value at its index in the returned values.
    pub(crate) fn run_naming(self, round: Round) -> (Vec<Answer>, Vec<Value>) {
        debug_assert!(round.count, "a round naming holders answers counts");
        let kept = Mutex::new(Vec::new());
        let answers = self.invoke(round, Some(&kept));
        (answers, kept.into_inner())
    }

    /// The call's round: with `kept`, each reply is kept whole there, or
    /// with `round.count` each refusal's value.
    fn invoke(self, round: Round, kept: Option<&Mutex<Vec<Value>>>) -> Vec<Answer> {
        let reads = match kept {
            _ if round.count => Reads::Count,
            Some(_) => Reads::Whole,
            None => Reads::Verdict,
        };
        let call = Call { reads, ..self.call };
        let wait = self.engine.waits(round);
        let req = Request::new(Op::Call(call), round.decides, wait, kept);
        crate::members::fanout::round(&self.engine.members, self.only, &req)
    }
}
