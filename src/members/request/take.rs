//! Reading a take's replies (see `op::Take`): its `SET`, and the
//! fencing counter's count behind it, counted again by the script on the
//! same connection where an `INCR` was refused or went back (see
//! `Counts`).

use std::time::Instant;

use redis::Value;

use super::{Counter, Failure, Pooled, Said, held_by, is_noscript, out_of_step, unexpected};
use crate::base::node_error::Cause;
use crate::members::conn::pack;
use crate::members::lower::Lowered;

impl Pooled {
    /// Reads the two replies of the acquisition pipeline (its `SET` and
    /// the counter's count); the first error reply fails it. A count
    /// refused `NOSCRIPT` (the server lost the script since the
    /// handshake) runs once more, with its source ([`Lowered::reloads`]).
    /// With a shared holders' `mark`, the lock key's command was `SET ...
    /// NX GET` (see [`Reply::SetGetCount`](super::Reply::SetGetCount)).
    pub(crate) fn finish_set_count(
        &mut self,
        req: &Lowered<'_>,
        mark: Option<&[u8]>,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        let get = mark.is_some();
        let mut replies = [Value::Okay, Value::Nil];
        let mut refused = self.read_replies(&mut replies, deadline)?;
        // The count was made again by the script (see `count_again`).
        let mut recounted = false;
        if let Some(f) = &refused
            && f.at == 1
            && is_noscript(&f.error)
            && let Some(reload) = req.reloads()
        {
            if req.req().wait.is_some() {
                // The `WAIT` sent behind the refused script: the reload
                // sends one again, which `replicated` reads (a failure
                // here leaves no reply for it: out of step).
                self.con.read(deadline).map_err(out_of_step)?;
            }
            self.con.write(&reload, deadline)?;
            // The count's slot, read as the first read it (its index: 1).
            let second = |f: Failure| Failure { at: 1, ..f };
            refused = self
                .read_replies(&mut replies[1..], deadline)
                .map_err(second)?
                .map(second);
        }
        // `INCR` refused (an ACL rule without `+incr`, a counter that holds
        // no integer): the script counts in its place, on this connection.
        if let (Some(f), Some(counter)) = (&refused, req.counter())
            && counter.by_incr
            && f.at == 1
            && f.keep
        {
            self.counts
                .refused(&counter, f.error.code() == Some("NOPERM"));
            let why = format!("INCR was refused: {}", f.error);
            replies[1] = self.count_again(req, counter, why, false, deadline)?;
            refused = None;
            recounted = true;
        }
        match refused {
            // A key of another type holds the name: a no, as `SET NX`
            // without `GET` finds (its slot keeps the placeholder `OK`,
            // read below as taken).
            Some(refused)
                if get && refused.at == 0 && refused.error.code() == Some("WRONGTYPE") =>
            {
                replies[0] = Value::Int(0);
            }
            Some(refused) => return Err(refused),
            None => {}
        }
        if let (Some(counter), Value::Int(n)) = (req.counter(), &replies[1])
            && *n > 0
            && !recounted
            && let Err(last) = self.counts.read(&counter, *n as u64)
        {
            let why = format!(
                "its fencing counter went back on this connection, from {last} to {n} \
                 (deleted or flushed by hand, or another server behind the same \
                 connection)"
            );
            replies[1] = self.count_again(req, counter, why, true, deadline)?;
        }
        match (get, replies) {
            (false, [Value::Okay, Value::Int(n)]) if n > 0 => Ok(Said::Yes(n as u64)),
            (false, [Value::Nil, Value::Int(_)]) => Ok(Said::MaybeShared),
            (true, [Value::Nil, Value::Int(n)]) if n > 0 => Ok(Said::Yes(n as u64)),
            (true, [Value::Int(0), Value::Int(_)]) => Ok(Said::No),
            (true, [ref held, Value::Int(_)]) if !matches!(held, Value::Nil) => {
                held_by(held, mark.unwrap_or_default(), req.req().kept)
            }
            (_, [_, other]) => Err(unexpected(&other).into()),
        }
    }

    /// After an `INCR` that counted no higher than the last count this
    /// connection saw, or was refused (`why`; see [`Counts`](super::Counts)): reads the
    /// `WAIT` behind it, and counts by the script (`req`'s reload, sending
    /// its source) on the same connection, whose count replaces the
    /// `INCR`'s. With `expire` (the `INCR` went back: it may have made the
    /// counter anew, without an expiry), the counter is first given its
    /// keep where it has no expiry, so that the script keeps it (the
    /// script leaves a counter without an expiry without one: one made by
    /// hand).
    #[cold]
    #[inline(never)]
    fn count_again(
        &mut self,
        req: &Lowered<'_>,
        counter: Counter<'_>,
        why: String,
        expire: bool,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        crate::base::logging::log!(
            debug,
            "redlock_sync::node",
            "{}: counted by the script on the same connection",
            why
        );
        let Some(reload) = req.reloads() else {
            return Err(Failure {
                error: Cause::Restarted(why),
                at: 1,
                keep: true,
            });
        };
        if req.req().wait.is_some() {
            // The `WAIT` sent behind the `INCR`: the reload sends one
            // again, which `replicated` reads (a failure here leaves no
            // reply for it: out of step).
            self.con.read(deadline).map_err(out_of_step)?;
        }
        let keep = counter.keep.as_millis().to_string();
        let expiry = match expire {
            true => pack(&[b"PEXPIRE", counter.key, keep.as_bytes(), b"NX"]),
            false => Vec::new(),
        };
        self.con.write(&[&expiry[..], &reload].concat(), deadline)?;
        if expire {
            // Its answer, an error reply included, changes nothing.
            let mut expired = [Value::Nil];
            self.read_replies(&mut expired, deadline)?;
        }
        let mut slot = [Value::Nil];
        if let Some(f) = self.read_replies(&mut slot, deadline)? {
            return Err(Failure { at: 1, ..f });
        }
        let [count] = slot;
        if let Value::Int(m) = count
            && m > 0
        {
            let by_script = Counter {
                by_incr: false,
                ..counter
            };
            // A script's count is always one.
            let _ = self.counts.read(&by_script, m as u64);
        }
        Ok(count)
    }
}
