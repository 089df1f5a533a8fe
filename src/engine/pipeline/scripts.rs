//! The pipeline's scripted rounds: one script call on every member
//! ([`ScriptCall`], made by [`Engine::script`]: sent by hash, its source
//! once more after `NOSCRIPT`, with keys or arguments of their own for
//! Redis Cluster members, a command behind it, replies kept whole), or
//! one request per slot group ([`script_groups`](Engine::script_groups)).

use parking_lot::Mutex;
use redis::Value;

use super::{Announce, Answer, Args, Engine, Round};
use crate::members::batch;
use crate::members::request::{FALLBACK, Forms, PlainDelete, Reply, Request};
use crate::members::script::Lua;

/// One slot group's keys and arguments.
pub(crate) type Group<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>);

/// Plain commands that servers taking them get in a script's place
/// (see [`Forms::ifeq`]): each form's, where some member takes it.
struct Plain<'a> {
    /// `DELIFEQ`'s.
    ifeq: Option<Form<'a>>,
    /// `DELEX ... IFEQ`'s.
    delex: Option<Form<'a>>,
    /// How their replies read.
    reply: Reply,
    /// They touch one key: a Redis Cluster member may follow an `ASK`.
    one_key: bool,
}

/// One form of plain commands.
#[derive(Clone, Copy)]
struct Form<'a> {
    /// Packed, for nodes.
    node: &'a [u8],
    /// Packed, for Redis Cluster members.
    cluster: &'a [u8],
    /// Names command `at` and its key, for messages.
    describe: &'a (dyn Fn(usize) -> String + Sync),
}

/// One script call on the members, in the spirit of redis-rs's
/// `ScriptInvocation`: made with its script, keys and arguments
/// ([`Engine::script`]), given only what differs from a plain call
/// (which members, Redis Cluster members' own keys or arguments, a
/// command behind it, a server's plain compare-and-delete in its place),
/// then run ([`run`](Self::run), [`read`](Self::read)). The script goes
/// by hash, its source once more after `NOSCRIPT`.
#[must_use = "a script call does nothing until it is run"]
pub(crate) struct ScriptCall<'a> {
    engine: &'a Engine,
    lua: &'a Lua,
    /// Keys and arguments as nodes take them.
    node: (&'a [&'a [u8]], Args<'a>),
    /// As Redis Cluster members take them, where they differ.
    cluster: Option<(&'a [&'a [u8]], Args<'a>)>,
    only: Option<&'a [bool]>,
    tail: Option<Announce<'a>>,
    /// The token of a release that servers with their own
    /// compare-and-delete run as that command.
    plain_delete: Option<&'a [u8]>,
}

impl Engine {
    /// A call of `lua` with `keys` and `args` on every member; the round
    /// is routed by the first key's slot on Redis Cluster members.
    pub(crate) fn script<'a>(
        &'a self,
        lua: &'a Lua,
        keys: &'a [&'a [u8]],
        args: Args<'a>,
    ) -> ScriptCall<'a> {
        ScriptCall {
            engine: self,
            lua,
            node: (keys, args),
            cluster: None,
            only: None,
            tail: None,
            plain_delete: None,
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
        (node_keys, node): (&[&[u8]], Args<'_>),
        groups: &[Group<'_>],
        round: Round,
    ) -> Vec<Vec<Answer>> {
        let (wait, acks) = self.waits(round);
        let wait = &wait[..];
        let reply = if round.count {
            Reply::Count
        } else {
            Reply::One
        };
        let packed: Vec<Vec<u8>> = groups
            .iter()
            .map(|(keys, args)| [&lua.evalsha(keys, args)[..], wait].concat())
            .collect();
        let reloads: Vec<_> = groups
            .iter()
            .map(|(keys, args)| move || [&lua.eval(keys, args)[..], wait].concat())
            .collect();
        let describes: Vec<_> = groups
            .iter()
            .map(|(keys, _)| move |_: usize| lua.describe(keys[0]))
            .collect();
        let cluster_reqs: Vec<Request<'_>> = (0..groups.len())
            .map(|g| {
                let key = groups[g].0[0];
                scripted(
                    &packed[g],
                    key,
                    (round, acks, reply),
                    &describes[g],
                    &reloads[g],
                )
            })
            .collect();
        let node_packed = [&lua.evalsha(node_keys, node)[..], wait].concat();
        let node_reload = || [&lua.eval(node_keys, node)[..], wait].concat();
        let describe_node = |_: usize| lua.describe(node_keys[0]);
        let first = Request {
            packed: &node_packed,
            describe: &describe_node,
            reload: Some(&node_reload),
            forms: Forms::default().with_cluster(Some(&cluster_reqs[0])),
            ..cluster_reqs[0]
        };
        let reqs: Vec<&Request<'_>> = std::iter::once(&first)
            .chain(cluster_reqs[1..].iter())
            .collect();
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

    /// Redis Cluster members take these arguments (a release's `SPUBLISH`
    /// in place of `PUBLISH`).
    pub(crate) fn cluster_args(self, args: Args<'a>) -> ScriptCall<'a> {
        let keys = self.node.0;
        self.on_clusters(keys, args)
    }

    /// Redis Cluster members take these keys and arguments (a set's keys
    /// in one slot, where nodes take the whole set); the round is routed
    /// by their first key's slot.
    pub(crate) fn on_clusters(self, keys: &'a [&'a [u8]], args: Args<'a>) -> ScriptCall<'a> {
        ScriptCall {
            cluster: Some((keys, args)),
            ..self
        }
    }

    /// A command written right behind the script, whose answer is read
    /// and ignored: a release's `PUBLISH` (`SPUBLISH` on Redis Cluster
    /// members).
    pub(crate) fn tail(self, tail: Option<Announce<'a>>) -> ScriptCall<'a> {
        ScriptCall { tail, ..self }
    }

    /// On servers that have their own compare-and-delete
    /// ([`PlainDelete`]: `DELIFEQ`, `DELEX ... IFEQ`), that command on
    /// the one key, for `token`, in the script's place, with the same
    /// tail: a release without a script (see [`Reply::DelIfEq`]).
    pub(crate) fn or_plain_delete(self, token: &'a [u8]) -> ScriptCall<'a> {
        debug_assert_eq!(self.node.0.len(), 1, "a plain delete of one key");
        ScriptCall {
            plain_delete: Some(token),
            ..self
        }
    }

    /// Runs the call as `round` says: whether a yes counts only once
    /// replicas acknowledged it (`WAIT`), whether servers kept out after
    /// a restart answer, how replies read. One answer per member.
    pub(crate) fn run(self, round: Round) -> Vec<Answer> {
        let Some(token) = self.plain_delete else {
            return self.invoke(round, None, None);
        };
        // `Reply::DelIfEq` reads no `WAIT` reply: a release waits for none.
        debug_assert!(!round.replicated, "a plain delete with a WAIT");
        let (engine, lua, tail) = (self.engine, self.lua, self.tail);
        let key = self.node.0[0];
        // Only the forms some member was seen to take, and Redis Cluster
        // members' only when there are some: a release is on the hot
        // path.
        let seen = engine
            .members
            .iter()
            .fold(0, |seen, m| seen | m.plain_deletes());
        let delete = |form: PlainDelete, cluster: bool| {
            let mut out = Vec::with_capacity(128 + tail.map_or(0, |t| t.max_len()));
            form.pack_into(&mut out, key, token);
            if let Some(tail) = tail {
                tail.pack_into(&mut out, cluster);
            }
            out
        };
        let forms = |form: PlainDelete| {
            (seen & form.bit() != 0).then(|| {
                let cluster = match engine.has_clusters {
                    true => delete(form, true),
                    false => Vec::new(),
                };
                (delete(form, false), cluster)
            })
        };
        let (ifeq, delex) = (forms(PlainDelete::DelIfEq), forms(PlainDelete::DelEx));
        let describe = |form: PlainDelete, at: usize| match at {
            FALLBACK => lua.describe(key),
            _ => form.describe(key),
        };
        let describe_ifeq = |at: usize| describe(PlainDelete::DelIfEq, at);
        let describe_delex = |at: usize| describe(PlainDelete::DelEx, at);
        let plain = Plain {
            ifeq: form(&ifeq, &describe_ifeq),
            delex: form(&delex, &describe_delex),
            reply: Reply::DelIfEq(tail.is_some()),
            one_key: true,
        };
        self.invoke(round, None, Some(&plain))
    }

    /// Runs the call as a read: each reply is kept whole (not a number),
    /// and each member's answer is the index of its reply in the returned
    /// replies ([`Said::Kept`](crate::members::request::Said::Kept)).
    pub(crate) fn read(self, round: Round) -> (Vec<Answer>, Vec<Value>) {
        let kept = Mutex::new(Vec::new());
        let answers = self.invoke(round, Some(&kept), None);
        (answers, kept.into_inner())
    }

    /// Runs the call as a count (`round.count`) whose refusals may name
    /// who holds the key: each member's answer is a count, or
    /// [`Said::Held`](crate::members::request::Said::Held) with the
    /// holder's value at its index in the returned values.
    pub(crate) fn run_naming(self, round: Round) -> (Vec<Answer>, Vec<Value>) {
        debug_assert!(round.count, "a round naming holders answers counts");
        let kept = Mutex::new(Vec::new());
        let answers = self.invoke(round, Some(&kept), None);
        (answers, kept.into_inner())
    }

    /// The call's round: with `kept`, each reply is kept whole there
    /// ([`Reply::Kept`]), or with `round.count` each refusal's value
    /// ([`Reply::Count`]); with `plain`, servers that take those commands
    /// get them in place of the script.
    fn invoke<'p>(
        self,
        round: Round,
        kept: Option<&Mutex<Vec<Value>>>,
        plain: Option<&Plain<'p>>,
    ) -> Vec<Answer> {
        let ScriptCall {
            engine,
            lua,
            node: (node_keys, node),
            cluster,
            only,
            tail,
            ..
        } = self;
        let (cluster_keys, cluster) = cluster.unwrap_or((node_keys, node));
        let (wait, acks) = engine.waits(round);
        let packed = |eval: bool, keys: &[&[u8]], args: Args<'_>, cluster: bool| {
            packed(lua, eval, (keys, args), &wait, tail, cluster)
        };
        let reply = match tail {
            _ if round.count => Reply::Count,
            _ if kept.is_some() => Reply::Kept,
            Some(_) => Reply::OneThenAny,
            None => Reply::One,
        };
        let describe_node = |_: usize| lua.describe(node_keys[0]);
        let describe_cluster = |_: usize| lua.describe(cluster_keys[0]);
        let cluster_packed = if engine.has_clusters {
            packed(false, cluster_keys, cluster, true)
        } else {
            Vec::new()
        };
        let cluster_reload = || packed(true, cluster_keys, cluster, true);
        let node_reload = || packed(true, node_keys, node, false);
        // The plain commands, on nodes and on Redis Cluster members; the
        // script's source is their fallback (see `Reply::DelIfEq`).
        // They read no `WAIT` reply: they go where no write waits.
        debug_assert!(
            plain.is_none() || wait.is_empty(),
            "plain commands with a WAIT"
        );
        let key = cluster_keys[0];
        let (ifeq, delex) = (plain.and_then(|p| p.ifeq), plain.and_then(|p| p.delex));
        let on = |form: Option<Form<'p>>, cluster: bool| {
            let (p, form) = plain.zip(form)?;
            let reload: &(dyn Fn() -> Vec<u8> + Sync) = match cluster {
                true => &cluster_reload,
                false => &node_reload,
            };
            Some(plain_request(p, form, cluster, key, (round, acks), reload))
        };
        let (ifeq_node, delex_node) = (on(ifeq, false), on(delex, false));
        // Redis Cluster members' forms only where there are some.
        let clusters = engine.has_clusters;
        let ifeq_cluster = on(ifeq.filter(|_| clusters), true);
        let delex_cluster = on(delex.filter(|_| clusters), true);
        let cluster_req = clusters.then(|| Request {
            kept,
            forms: Forms::plain(ifeq_cluster.as_ref(), delex_cluster.as_ref()),
            ..scripted(
                &cluster_packed,
                cluster_keys[0],
                (round, acks, reply),
                &describe_cluster,
                &cluster_reload,
            )
        });
        // Where some member was seen to take a plain form, the script is
        // packed only for each member that turns out not to (see
        // `Request::lazy`): a release on the newest servers packs one form
        // (in a mixed deployment, each member without one packs the
        // script for itself).
        let lazy_script = ifeq_node.is_some() || delex_node.is_some();
        let node_packed = match lazy_script {
            true => Vec::new(),
            false => packed(false, node_keys, node, false),
        };
        let node_lazy = || packed(false, node_keys, node, false);
        // The slot routes the round to each cluster's master.
        let req = Request {
            kept,
            forms: Forms::plain(ifeq_node.as_ref(), delex_node.as_ref())
                .with_cluster(cluster_req.as_ref()),
            lazy: lazy_script.then_some(&node_lazy as &(dyn Fn() -> Vec<u8> + Sync)),
            ..scripted(
                &node_packed,
                cluster_keys[0],
                (round, acks, reply),
                &describe_node,
                &node_reload,
            )
        };
        crate::members::fanout::round(&engine.members, only, &req)
    }
}

/// A script sent by hash (or by its source, with `eval`), then `wait`,
/// then the tail (as nodes or, with `cluster`, Redis Cluster members take
/// it), in one buffer.
fn packed(
    lua: &Lua,
    eval: bool,
    (keys, args): (&[&[u8]], Args<'_>),
    wait: &[u8],
    tail: Option<Announce<'_>>,
    cluster: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + tail.map_or(0, |t| t.max_len()));
    match eval {
        true => lua.eval_into(&mut out, keys, args),
        false => lua.evalsha_into(&mut out, keys, args),
    }
    out.extend_from_slice(wait);
    if let Some(tail) = tail {
        tail.pack_into(&mut out, cluster);
    }
    out
}

/// A form of plain commands, where it was packed.
fn form<'a>(
    packed: &'a Option<(Vec<u8>, Vec<u8>)>,
    describe: &'a (dyn Fn(usize) -> String + Sync),
) -> Option<Form<'a>> {
    packed.as_ref().map(|(node, cluster)| Form {
        node,
        cluster,
        describe,
    })
}

/// The request of plain commands `p` in `form` (as Redis Cluster
/// members take them when `cluster`), routed by `key`, the script's
/// source its fallback (`reload`).
fn plain_request<'a>(
    p: &Plain<'a>,
    form: Form<'a>,
    cluster: bool,
    key: &'a [u8],
    (round, acks): (Round, Option<u32>),
    reload: &'a (dyn Fn() -> Vec<u8> + Sync),
) -> Request<'a> {
    let packed = if cluster { form.cluster } else { form.node };
    Request {
        follow_ask: p.one_key,
        ..scripted(packed, key, (round, acks, p.reply), form.describe, reload)
    }
}

/// How a script's reply reads: the round, the replicas a write waits for,
/// the reply's shape.
type Reading = (Round, Option<u32>, Reply);

/// A script sent by hash (`packed`), routed by `key`, read as `reading`
/// says, its source sent once more after `NOSCRIPT` (`reload`).
fn scripted<'a>(
    packed: &'a [u8],
    key: &'a [u8],
    (round, wait, reply): Reading,
    describe: &'a (dyn Fn(usize) -> String + Sync),
    reload: &'a (dyn Fn() -> Vec<u8> + Sync),
) -> Request<'a> {
    Request {
        packed,
        lazy: None,
        key,
        asking: false,
        check: None,
        follow_ask: true,
        decides: round.decides,
        wait,
        reply,
        describe,
        forms: Forms::default(),
        reload: Some(reload),
        on_timeout: None,
        kept: None,
        counter: None,
    }
}
