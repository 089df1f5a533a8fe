//! The pipeline's scripted rounds: a script on every member (sent by
//! hash, its source once more after `NOSCRIPT`), with arguments of its own
//! for Redis Cluster members, a command behind it, replies kept whole, or
//! one request per slot group ([`script_groups`](Engine::script_groups)).

use parking_lot::Mutex;
use redis::Value;

use super::{Announce, Answer, Args, Engine, Mode};
use crate::engine::batch;
use crate::engine::quorum;
use crate::members::member::Member;
use crate::members::request::{FALLBACK, PlainDelete, Reply, Request};
use crate::members::script::Lua;

/// One slot group's keys and arguments.
pub(crate) type Group<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>);

/// Plain commands that servers taking them get in a script's place
/// (see [`Request::ifeq`]): each form's, where some member takes it.
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

impl Engine {
    /// Runs a script on the members `only` selects: as `node` says on
    /// nodes, and as `cluster` says (when given) on Redis Cluster
    /// members. `mode` says whether a yes counts only
    /// once replicas acknowledged it (`WAIT`), and whether servers kept
    /// out after a restart answer.
    pub(crate) fn script_then(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        keys: &[&[u8]],
        node: Args<'_>,
        cluster: Option<Args<'_>>,
        mode: Mode,
    ) -> Vec<Answer> {
        self.script_split(
            lua,
            only,
            (keys, node),
            (keys, cluster.unwrap_or(node)),
            mode,
        )
    }

    /// As [`script_then`](Self::script_then), with keys of their own for
    /// Redis Cluster members (a set's keys in one slot, where nodes take
    /// the whole set). The round is routed by the cluster keys' slot.
    pub(crate) fn script_split(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        node: (&[&[u8]], Args<'_>),
        cluster: (&[&[u8]], Args<'_>),
        mode: Mode,
    ) -> Vec<Answer> {
        self.script_tailed(lua, only, node, cluster, None, mode)
    }

    /// As [`script_split`](Self::script_split), with a command written
    /// right behind the script whose answer is read and ignored (`tail`):
    /// a release's `PUBLISH` (`SPUBLISH` on Redis Cluster members).
    pub(crate) fn script_tailed(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        node: (&[&[u8]], Args<'_>),
        cluster: (&[&[u8]], Args<'_>),
        tail: Option<Announce<'_>>,
        mode: Mode,
    ) -> Vec<Answer> {
        self.script_kept(lua, only, node, cluster, tail, mode, None, None)
    }

    /// As [`script_tailed`](Self::script_tailed) (one key, the same on
    /// nodes and Redis Cluster members), and on servers that have their
    /// own compare-and-delete ([`PlainDelete`]: `DELIFEQ`, `DELEX ...
    /// IFEQ`) that command in the script's place, with the same tail: a
    /// release without a script (see [`Reply::DelIfEq`]).
    pub(crate) fn script_or_plain_delete(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        (key, args): (&[u8], Args<'_>),
        token: &[u8],
        tail: Option<Announce<'_>>,
        mode: Mode,
    ) -> Vec<Answer> {
        // `Reply::DelIfEq` reads no `WAIT` reply: a release waits for none.
        debug_assert!(!mode.replicated, "a plain delete with a WAIT");
        // Only the forms some member was seen to take, and Redis Cluster
        // members' only when there are some: a release is on the hot
        // path.
        let seen = self
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
                let cluster = match self.has_clusters {
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
        self.script_kept(
            lua,
            only,
            (&[key], args),
            (&[key], args),
            tail,
            mode,
            None,
            Some(&plain),
        )
    }

    /// A read on every member: a script whose replies are kept whole
    /// (not numbers), deciding a holder (servers kept out after a restart
    /// give none). Each member's answer is the index of its reply in the
    /// returned replies.
    pub(crate) fn read(
        &self,
        lua: &Lua,
        keys: &[&[u8]],
        args: Args<'_>,
    ) -> (Vec<Answer>, Vec<Value>) {
        let mode = Mode {
            count: false,
            replicated: false,
            decides: true,
        };
        self.read_split(lua, (keys, args), (keys, args), mode)
    }

    /// As [`read`](Self::read), with arguments of their own for Redis
    /// Cluster members, and `mode` (an operator's read or removal asks
    /// servers kept out after a restart too).
    pub(crate) fn read_split(
        &self,
        lua: &Lua,
        node: (&[&[u8]], Args<'_>),
        cluster: (&[&[u8]], Args<'_>),
        mode: Mode,
    ) -> (Vec<Answer>, Vec<Value>) {
        let kept = Mutex::new(Vec::new());
        let answers = self.script_kept(lua, None, node, cluster, None, mode, Some(&kept), None);
        (answers, kept.into_inner())
    }

    /// As [`script_tailed`](Self::script_tailed); with `kept`, each
    /// reply is kept whole there ([`Reply::Kept`]); with `plain`, servers
    /// that take those commands get them in place of the script.
    #[allow(clippy::too_many_arguments)]
    fn script_kept<'a>(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        (node_keys, node): (&[&[u8]], Args<'_>),
        (cluster_keys, cluster): (&[&[u8]], Args<'_>),
        tail: Option<Announce<'_>>,
        mode: Mode,
        kept: Option<&Mutex<Vec<Value>>>,
        plain: Option<&Plain<'a>>,
    ) -> Vec<Answer> {
        let replicated = mode.replicated;
        let wait = if replicated {
            self.wait_command()
        } else {
            Vec::new()
        };
        let acks = self
            .replica_acks
            .as_ref()
            .filter(|_| replicated)
            .map(|(n, _)| *n);
        // A script sent by hash (or by its source, `eval`), then any
        // `WAIT`, then the tail (as nodes or as Redis Cluster members take
        // it), in one buffer.
        let packed = |eval: bool, keys: &[&[u8]], args: Args<'_>, cluster: bool| {
            let mut out = Vec::with_capacity(256 + tail.map_or(0, |t| t.max_len()));
            match eval {
                true => lua.eval_into(&mut out, keys, args),
                false => lua.evalsha_into(&mut out, keys, args),
            }
            out.extend_from_slice(&wait);
            if let Some(tail) = tail {
                tail.pack_into(&mut out, cluster);
            }
            out
        };
        let reply = match tail {
            _ if kept.is_some() => Reply::Kept,
            _ if mode.count => Reply::Count,
            Some(_) => Reply::OneThenAny,
            None => Reply::One,
        };
        let describe_node = |_: usize| lua.describe(node_keys[0]);
        let describe_cluster = |_: usize| lua.describe(cluster_keys[0]);
        let cluster_packed = if self.has_clusters {
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
        let on = |form: Option<Form<'a>>, cluster: bool| {
            let (p, form) = plain.zip(form)?;
            let reload: &(dyn Fn() -> Vec<u8> + Sync) = match cluster {
                true => &cluster_reload,
                false => &node_reload,
            };
            Some(plain_request(p, form, cluster, key, (mode, acks), reload))
        };
        let (ifeq_node, delex_node) = (on(ifeq, false), on(delex, false));
        // Redis Cluster members' forms only where there are some.
        let clusters = self.has_clusters;
        let ifeq_cluster = on(ifeq.filter(|_| clusters), true);
        let delex_cluster = on(delex.filter(|_| clusters), true);
        let cluster_req = clusters.then(|| Request {
            kept,
            ifeq: ifeq_cluster.as_ref(),
            delex: delex_cluster.as_ref(),
            ..scripted(
                &cluster_packed,
                cluster_keys[0],
                (mode, acks, reply),
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
            alt: cluster_req.as_ref(),
            kept,
            ifeq: ifeq_node.as_ref(),
            delex: delex_node.as_ref(),
            lazy: lazy_script.then_some(&node_lazy as &(dyn Fn() -> Vec<u8> + Sync)),
            ..scripted(
                &node_packed,
                cluster_keys[0],
                (mode, acks, reply),
                &describe_node,
                &node_reload,
            )
        };
        quorum::round(&self.members, only, &req)
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
        mode: Mode,
    ) -> Vec<Vec<Answer>> {
        let wait = if mode.replicated {
            self.wait_command()
        } else {
            Vec::new()
        };
        let wait = &wait[..];
        let acks = self
            .replica_acks
            .as_ref()
            .filter(|_| mode.replicated)
            .map(|(n, _)| *n);
        let reply = if mode.count { Reply::Count } else { Reply::One };
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
                    (mode, acks, reply),
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
            alt: Some(&cluster_reqs[0]),
            ..cluster_reqs[0]
        };
        let reqs: Vec<&Request<'_>> = std::iter::once(&first)
            .chain(cluster_reqs[1..].iter())
            .collect();
        let members = &self.members;
        let takes = |g: usize, i: usize| {
            only.is_none_or(|only| only[i]) && (g == 0 || matches!(members[i], Member::Cluster(_)))
        };
        batch::round(members, &reqs, &takes)
    }
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
    (mode, acks): (Mode, Option<u32>),
    reload: &'a (dyn Fn() -> Vec<u8> + Sync),
) -> Request<'a> {
    let packed = if cluster { form.cluster } else { form.node };
    Request {
        follow_ask: p.one_key,
        ..scripted(packed, key, (mode, acks, p.reply), form.describe, reload)
    }
}

/// How a script's reply reads: the mode, the replicas a write waits for,
/// the reply's shape.
type Reading = (Mode, Option<u32>, Reply);

/// A script sent by hash (`packed`), routed by `key`, read as `reading`
/// says, its source sent once more after `NOSCRIPT` (`reload`).
fn scripted<'a>(
    packed: &'a [u8],
    key: &'a [u8],
    (mode, wait, reply): Reading,
    describe: &'a (dyn Fn(usize) -> String + Sync),
    reload: &'a (dyn Fn() -> Vec<u8> + Sync),
) -> Request<'a> {
    Request {
        packed,
        lazy: None,
        key,
        alt: None,
        asking: false,
        check: None,
        follow_ask: true,
        decides: mode.decides,
        wait,
        reply,
        describe,
        legacy: None,
        ifeq: None,
        delex: None,
        reload: Some(reload),
        on_timeout: None,
        kept: None,
    }
}
