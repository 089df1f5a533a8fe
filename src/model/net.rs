//! The network the models share (the fair lock's, the read-write lock's
//! and the election's): every request in flight at once, a multiset kept
//! sorted, each delivered in any order, also after its round ended, lost,
//! delivered with its reply lost, or delivered twice, within a fault
//! budget. A reply is not a message of its own: it reaches its sender at
//! once if the sender still waits for that round, or never.

use super::lock::NODES;

/// A request in flight to `node` from `client`, of its current round or
/// of one it ended (`current` false: late; its reply is never read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Msg<R> {
    pub(crate) node: u8,
    pub(crate) client: u8,
    pub(crate) current: bool,
    pub(crate) request: R,
}

/// What a step does with a message in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// It runs, and its reply reaches its sender.
    Deliver,
    /// It runs, and its reply is lost.
    Mute,
    /// It runs, and a copy stays in flight (late).
    Duplicate,
    /// It is lost.
    Lose,
}

impl Step {
    /// The step, for people (`late`: the message's round is over and it
    /// is a round's own request, not a clean-up sent as the round ended).
    pub(crate) fn says(self, late: bool) -> &'static str {
        match self {
            Step::Lose => "lost",
            Step::Mute => "runs, its reply is lost",
            Step::Duplicate => "runs (and again later)",
            Step::Deliver if late => "runs LATE (its round is over)",
            Step::Deliver => "runs",
        }
    }
}

/// The requests in flight, and the faults spent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Net<R> {
    pub(crate) msgs: Vec<Msg<R>>,
    pub(crate) duplicates: u8,
    pub(crate) losses: u8,
}

impl<R: Copy + Ord> Default for Net<R> {
    fn default() -> Self {
        Net {
            msgs: Vec::new(),
            duplicates: 0,
            losses: 0,
        }
    }
}

impl<R: Copy + Ord> Net<R> {
    /// Sends `request` from `client` to the servers in `to`.
    pub(crate) fn send(&mut self, client: usize, to: [bool; NODES], request: R) {
        for node in (0..NODES).filter(|&n| to[n]) {
            self.msgs.push(Msg {
                node: node as u8,
                client: client as u8,
                current: true,
                request,
            });
        }
        self.msgs.sort();
    }

    /// Where `client`'s current `request` to `node` is, if in flight.
    pub(crate) fn find(&self, node: usize, client: usize, request: R) -> Option<usize> {
        self.msgs.iter().position(|m| {
            usize::from(m.node) == node
                && usize::from(m.client) == client
                && m.current
                && m.request == request
        })
    }

    /// `client` stops waiting for its round: what it sent is late.
    pub(crate) fn end_round(&mut self, client: usize) {
        for m in self
            .msgs
            .iter_mut()
            .filter(|m| usize::from(m.client) == client)
        {
            m.current = false;
        }
        self.msgs.sort();
    }

    /// Takes message `i` off as `step` does: the message to run and
    /// whether its reply is read, or `None` (lost).
    pub(crate) fn take(&mut self, i: usize, step: Step) -> Option<(Msg<R>, bool)> {
        let m = self.msgs.remove(i);
        match step {
            Step::Deliver => Some((m, true)),
            Step::Mute => {
                self.losses += 1;
                Some((m, false))
            }
            Step::Duplicate => {
                self.duplicates += 1;
                self.msgs.push(Msg {
                    current: false,
                    ..m
                });
                self.msgs.sort();
                Some((m, true))
            }
            Step::Lose => {
                self.losses += 1;
                None
            }
        }
    }

    /// Every step enabled on the messages in flight (one per distinct
    /// message), within the budgets of `losses` and `duplicates`.
    pub(crate) fn steps(&self, losses: u8, duplicates: u8, mut out: impl FnMut(usize, Step)) {
        for (i, m) in self.msgs.iter().enumerate() {
            if i > 0 && self.msgs[i - 1] == *m {
                continue;
            }
            out(i, Step::Deliver);
            if self.losses < losses {
                out(i, Step::Lose);
                out(i, Step::Mute);
            }
            if self.duplicates < duplicates {
                out(i, Step::Duplicate);
            }
        }
    }

    /// A model's last actions: each step of [`steps`](Self::steps), made
    /// an action by `step`, then `tick` when time may pass.
    pub(crate) fn steps_then<A>(
        &self,
        (losses, duplicates): (u8, u8),
        out: &mut Vec<A>,
        step: impl Fn(usize, Step) -> A,
        tick: Option<A>,
    ) {
        self.steps(losses, duplicates, |i, s| out.push(step(i, s)));
        out.extend(tick);
    }
}

/// A model whose state carries a [`Net`]: how a request runs when it
/// arrives, and, from that, sending and the network's steps.
pub(crate) trait Wired {
    type State;
    type Request: Copy + Ord;

    /// The state's network.
    fn net(s: &mut Self::State) -> &mut Net<Self::Request>;

    /// `m` reaches its server and runs there; its reply reaches its
    /// sender if `reply`.
    fn arrive(&self, s: &mut Self::State, m: Msg<Self::Request>, reply: bool);

    /// Message `i` in flight takes `step`.
    fn step(&self, s: &mut Self::State, i: usize, step: Step) {
        if let Some((m, reply)) = Self::net(s).take(i, step) {
            self.arrive(s, m, reply);
        }
    }

    /// Sends `request` from `client` to the servers in `to`, and runs it
    /// at once on those whose bit is set in `now`.
    fn send(
        &self,
        s: &mut Self::State,
        client: usize,
        to: [bool; NODES],
        now: u8,
        request: Self::Request,
    ) {
        Self::net(s).send(client, to, request);
        for node in (0..NODES).filter(|&n| to[n] && now & (1 << n) != 0) {
            if let Some(i) = Self::net(s).find(node, client, request) {
                self.step(s, i, Step::Deliver);
            }
        }
    }
}
