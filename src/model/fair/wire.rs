//! The fair model's network: a request arriving at a server, its
//! answer read as the library reads it, and the wake on release.

use super::*;

impl Wired for FairModel {
    type State = FairState;
    type Request = SetRequest;

    fn net(s: &mut FairState) -> &mut Net<SetRequest> {
        &mut s.net
    }

    fn arrive(&self, s: &mut FairState, m: Msg<SetRequest>, reply: bool) {
        let n = usize::from(m.node);
        let now = u64::from(s.now);
        let lanes = Self::keys(m.request.on);
        let live = |lane: &FairServer| lane.key.filter(|&(_, until)| until > now);
        let before: Vec<_> = lanes
            .iter()
            .map(|&k| live(&s.servers[n].lanes[usize::from(k)]))
            .collect();
        let answer = s.servers[n].run(
            m.request,
            u64::from(s.now),
            self.lengths(),
            self.rules.scripts,
            self.rules.sets,
        );
        // `SET ... NX GET`'s refusal answers the value holding the key:
        // the servers it names.
        let answer = match (answer, before.first()) {
            (
                Answer::Took {
                    set: false, count, ..
                },
                Some(Some((Held::Token(v), _))),
            ) if !(usize::from(v.client) == usize::from(m.client)
                && v.acquisition == s.clients[usize::from(m.client)].done) =>
            {
                Answer::Took {
                    set: false,
                    count,
                    named: names_of(&s.named, *v),
                }
            }
            (answer, _) => answer,
        };
        self.wake(s, &m, lanes, before);
        let c = usize::from(m.client);
        if m.current
            && reply
            && s.clients[c].alive
            && let Phase::Taking { answers, .. } = &mut s.clients[c].phase
        {
            answers[n] = Some(answer);
            if answers.iter().all(Option::is_some) {
                self.conclude(s, c, 0);
            }
        }
    }
}

impl FairModel {
    /// The wake on release (`engine::wait`'s `heard`), after `m` ran on
    /// its server (`before`: what each of its `lanes` held before): each
    /// server's message is counted by the key and the request's value; a
    /// hand-off (a release's, a leave's, or a claim's for the waiter
    /// ahead) wakes its waiter once a majority announced it, a key
    /// deleted wakes the others at the first message and again at the
    /// majority's; they ask at once, again in this tick. Nobody hears a
    /// clean-up of its own, a yield (announced to nobody), a reservation
    /// put back or an expiry: waiters learn of those at their next claim.
    /// Without `wake_on_release` nobody hears anything. (Only the
    /// liveness run counts messages: elsewhere a waiter may ask at any
    /// moment, and the counts would only split states.)
    fn wake(
        &self,
        s: &mut FairState,
        m: &Msg<SetRequest>,
        lanes: &[u8],
        before: Vec<Option<(Held, u64)>>,
    ) {
        let n = usize::from(m.node);
        let now = u64::from(s.now);
        if !(self.size.synchronous && self.size.handing) {
            return;
        }
        let q = quorum::quorum(NODES) as u8;
        let value = m.request.request.value();
        for (&k, before) in lanes.iter().zip(before) {
            let lane = &s.servers[n].lanes[usize::from(k)];
            let yielded = lane.yielded.is_some_and(|y| y > now);
            let hear = |client: &mut FairClient, wakes: &dyn Fn(u8) -> bool| {
                let at = match client.heard.iter().position(|h| (h.0, h.1) == (value, k)) {
                    Some(at) => at,
                    None => {
                        client.heard.push((value, k, 0));
                        client.heard.len() - 1
                    }
                };
                client.heard[at].2 += 1;
                if wakes(client.heard[at].2) {
                    client.asked = false;
                }
            };
            match lane.key.map(|(h, _)| h) {
                Some(Held::Next(w))
                    if before.map(|(h, _)| h) != Some(Held::Next(w))
                        && !matches!(m.request.request, FairRequest::Unclaim { .. }) =>
                {
                    let woken = &mut s.clients[usize::from(w.client)];
                    if woken.done == w.acquisition {
                        hear(woken, &|count| count == q);
                    }
                }
                None if before.is_some() && !yielded => {
                    // Those who wait for this key (its channel).
                    for (d, client) in s.clients.iter_mut().enumerate() {
                        if d != usize::from(m.client) && Self::keys(self.size.wants[d]).contains(&k)
                        {
                            hear(client, &|count| count == 1 || count == q);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
