//! A member that is a Redis Sentinel group: one master (with its
//! replicas) whose address its Sentinels tell. The member is a node
//! ([`Node`](crate::members::node::Node)) whose host is resolved, on
//! every new connection, by asking the Sentinels instead of DNS
//! ([`resolver`]); everything else (the handshake, the restart rules,
//! the rounds) is a node's.
//!
//! # What is asked, and why
//!
//! Every Sentinel given is asked `SENTINEL get-master-addr-by-name`, at
//! once (one thread each, all within the node timeout), and the address
//! that a majority of the Sentinels given report is the master's. One
//! Sentinel cut off from the others keeps the address it last knew (an
//! old master, a replica since): a majority of the Sentinels is what
//! elects a failover's leader, so an address a majority reports is one
//! the group has agreed on. No majority (a failover under way, most
//! Sentinels unreachable): the connection fails with a resolution error,
//! the member misses that round (a vote missing, never a wrong one), and
//! the next connection asks again.
//!
//! # Following a failover
//!
//! Nothing is cached: each new connection asks again. An old master that
//! is still up keeps taking writes until the Sentinels reconfigure it
//! (seconds after the failover), so connections to it must not be used
//! once the group switched: a thread per Sentinel listens for its
//! `+switch-master` announcements of the master ([`watch`]), and each one
//! makes the node drop the connections it opened before (see
//! `Node::checkout`). A `READONLY` answer (a connection still open to a
//! demoted master, an announcement missed) drops them too (see
//! `Node::role_changed`), and so does any failure of a connection. A promoted replica may lack recent grants: it
//! is another server (its own `run_id`), so the restart rules keep it
//! from counting (the crate docs, "Restarts" and "A grant names its
//! servers").

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::base::error::Error;
use crate::members::resolve::ResolveFn;
use crate::members::url::redact;

/// The URL schemes of a Sentinel group.
pub(crate) const SCHEMES: [&str; 2] = ["redis-sentinel", "valkey-sentinel"];

/// Whether `url` names a Sentinel group (see [`Group::parse`]).
pub(crate) fn is_group(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| SCHEMES.contains(&scheme))
}

/// A Sentinel group as given: its Sentinels, the master's name, and the
/// URL its data connections take (credentials and database).
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// Each Sentinel's host and port.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The master's name, as the Sentinels monitor it.
    pub(crate) master: String,
    /// `redis://[userinfo@]<master>:0[/db]`: a node URL whose host the
    /// Sentinels resolve.
    pub(crate) data_url: String,
}

impl Group {
    /// Reads `redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/db]#master`
    /// (the form Lettuce and Spring take; a port defaults to 26379). The
    /// credentials are the master's; the Sentinels are asked without.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming what is wrong: no master name, no
    /// Sentinel, a bad port, a path that is not a database number.
    pub(crate) fn parse(url: &str) -> Result<Group, Error> {
        let bad = |why: &str| {
            Error::invalid_config(format!("Sentinel group URL {:?}: {why}", redact(url)))
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        if !SCHEMES.contains(&scheme) {
            return Err(bad("the scheme is not redis-sentinel"));
        }
        let (rest, master) = rest
            .rsplit_once('#')
            .ok_or_else(|| bad("no master name: end it with #<master name>"))?;
        if master.is_empty() {
            return Err(bad("the master name after # is empty"));
        }
        let before_path = rest.find('/').unwrap_or(rest.len());
        let (userinfo, hosts) = match rest[..before_path].rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..before_path]),
            None => (None, &rest[..before_path]),
        };
        let path = &rest[before_path..];
        let db = match path.trim_start_matches('/') {
            "" => None,
            db => Some(
                db.parse::<i64>()
                    .map_err(|_| bad("the path is not a database number"))?,
            ),
        };
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(bad("a Sentinel's address is empty"));
            }
            sentinels
                .push(host_port(host).ok_or_else(|| bad("a Sentinel's port is not a number"))?);
        }
        let creds = userinfo.map_or_else(String::new, |u| format!("{u}@"));
        let db = db.map_or_else(String::new, |db| format!("/{db}"));
        Ok(Group {
            sentinels,
            master: master.to_owned(),
            data_url: format!("redis://{creds}sentinel.invalid:1{db}"),
        })
    }

    /// The member's name in messages: `<master> (sentinels h:p,h:p,...)`.
    pub(crate) fn name(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        format!("{} (sentinels {})", self.master, sentinels.join(","))
    }
}

/// `host[:port]`, IPv6 in brackets, the port 26379 by default.
fn host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = match s.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ok()?),
        _ => (s, 26379),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port))
}

/// The resolver of `group`'s master (see the module docs): each Sentinel
/// asked within `timeout`, its host names resolved with `dns`.
pub(crate) fn resolver(group: Group, timeout: Duration, dns: Arc<ResolveFn>) -> Arc<ResolveFn> {
    Arc::new(move |_: &str, _: u16| master_of(&group, timeout, &*dns))
}

/// The Sentinels' announcements of a group, listened for while the
/// member lives: the threads end when this is dropped.
pub(crate) struct Watch {
    stop: Arc<AtomicBool>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How long a watcher waits for a message before it looks whether to
/// stop; and its pause before connecting again after a failure.
const WATCH_POLL: Duration = Duration::from_millis(500);

/// Listens on every Sentinel of `group` for `+switch-master` naming its
/// master, counting each in `switches` (the node's connection
/// generation). Best effort: a Sentinel unreachable is asked again every
/// [`WATCH_POLL`]; an announcement missed costs the `READONLY` (or
/// failure) that follows.
pub(crate) fn watch(group: &Group, timeout: Duration, switches: Arc<AtomicU64>) -> Watch {
    let stop = Arc::new(AtomicBool::new(false));
    for (host, port) in &group.sentinels {
        let (host, port, master) = (host.clone(), *port, group.master.clone());
        let (stop, switches) = (stop.clone(), switches.clone());
        // Without a thread to be had, failovers are followed by failures.
        let _ = thread::Builder::new()
            .name("redlock-sentinel".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let _ = listen(&host, port, &master, timeout, &stop, &switches);
                    if let Some(left) = WATCH_POLL.checked_sub(began.elapsed()) {
                        thread::sleep(left);
                    }
                }
            });
    }
    Watch { stop }
}

/// One Sentinel's announcements, until it fails or `stop` is set.
fn listen(
    host: &str,
    port: u16,
    master: &str,
    timeout: Duration,
    stop: &AtomicBool,
    switches: &AtomicU64,
) -> redis::RedisResult<()> {
    let client = redis::Client::open((host, port))?;
    let mut con = client.get_connection_with_timeout(timeout)?;
    con.set_write_timeout(Some(timeout))?;
    con.set_read_timeout(Some(WATCH_POLL))?;
    let mut sub = con.as_pubsub();
    sub.subscribe("+switch-master")?;
    while !stop.load(Ordering::Relaxed) {
        match sub.get_message() {
            Ok(msg) => {
                // `<master name> <old ip> <old port> <new ip> <new port>`.
                let payload: String = msg.get_payload().unwrap_or_default();
                if payload.split(' ').next() == Some(master) {
                    switches.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.is_timeout() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What one Sentinel said of the master.
type Told = Result<Option<(String, u16)>, String>;

/// Asks every Sentinel of `group`, at once, and answers the address a
/// majority of them report.
fn master_of(group: &Group, timeout: Duration, dns: &ResolveFn) -> io::Result<Vec<SocketAddr>> {
    let told: Vec<Told> = std::thread::scope(|s| {
        let asks: Vec<_> = group
            .sentinels
            .iter()
            .map(|(host, port)| s.spawn(move || ask(host, *port, &group.master, timeout)))
            .collect();
        asks.into_iter()
            .map(|a| a.join().unwrap_or_else(|_| Err("the ask panicked".into())))
            .collect()
    });
    let (host, port) = agreed(&told, group.sentinels.len())
        .map_err(|why| io::Error::other(format!("the Sentinels of {}: {why}", group.master)))?;
    dns(&host, port)
}

/// The address that more than half of `given` Sentinels reported, or
/// why there is none.
fn agreed(told: &[Told], given: usize) -> Result<(String, u16), String> {
    let mut counts: Vec<(&(String, u16), usize)> = Vec::new();
    for addr in told.iter().filter_map(|t| t.as_ref().ok()?.as_ref()) {
        match counts.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, n)) => *n += 1,
            None => counts.push((addr, 1)),
        }
    }
    if let Some((addr, _)) = counts.iter().find(|(_, n)| *n > given / 2) {
        return Ok((*addr).clone());
    }
    let mut said: Vec<String> = counts
        .iter()
        .map(|((h, p), n)| format!("{h}:{p} ({n})"))
        .collect();
    let unknown = told.iter().filter(|t| matches!(t, Ok(None))).count();
    if unknown > 0 {
        said.push(format!("master unknown ({unknown})"));
    }
    let failed: Vec<&String> = told.iter().filter_map(|t| t.as_ref().err()).collect();
    if let Some(first) = failed.first() {
        said.push(format!("no answer ({}; {first})", failed.len()));
    }
    Err(format!(
        "no majority of the {given} agrees on the master's address: {}",
        said.join(", ")
    ))
}

/// One Sentinel's answer: the master's address, `None` when it does not
/// know the name.
fn ask(host: &str, port: u16, master: &str, timeout: Duration) -> Told {
    let fail = |e: redis::RedisError| format!("{host}:{port}: {e}");
    let client = redis::Client::open((host, port)).map_err(fail)?;
    let mut con = client.get_connection_with_timeout(timeout).map_err(fail)?;
    con.set_read_timeout(Some(timeout)).map_err(fail)?;
    con.set_write_timeout(Some(timeout)).map_err(fail)?;
    let said: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query(&mut con)
        .map_err(fail)?;
    match said {
        None => Ok(None),
        Some((ip, port)) => match port.parse() {
            Ok(port) => Ok(Some((ip, port))),
            Err(_) => Err(format!(
                "{host}:{port}: a port that is not a number: {port:?}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_urls_are_read_and_their_mistakes_named() {
        let g =
            Group::parse("redis-sentinel://:pw@10.0.0.1,10.0.0.2:26380,[::1]:5/2#cache").unwrap();
        assert_eq!(
            g.sentinels,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26380),
                ("::1".to_owned(), 5)
            ]
        );
        assert_eq!(g.master, "cache");
        assert_eq!(g.data_url, "redis://:pw@sentinel.invalid:1/2");
        for (url, says) in [
            ("redis-sentinel://h:26379", "no master name"),
            ("redis-sentinel://h:26379#", "is empty"),
            ("redis-sentinel://h:x#m", "port is not a number"),
            ("redis-sentinel://h,,g#m", "address is empty"),
            ("redis-sentinel://h/zero#m", "not a database number"),
            ("redis://h#m", "not redis-sentinel"),
        ] {
            let e = Group::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        let e = Group::parse("redis-sentinel://user:secret@h#m");
        assert!(e.is_ok());
        let e = Group::parse("redis-sentinel://user:secret@h:x#m").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn a_majority_of_the_sentinels_given_decides_the_address() {
        let a = || Ok(Some(("10.0.0.1".to_owned(), 6379)));
        let b = || Ok(Some(("10.0.0.2".to_owned(), 6379)));
        let down = || Err("h:1: refused".to_owned());
        assert_eq!(agreed(&[a(), a(), b()], 3).unwrap().0, "10.0.0.1");
        assert_eq!(agreed(&[a(), down(), a()], 3).unwrap().0, "10.0.0.1");
        // One Sentinel's word is not the group's.
        let e = agreed(&[a(), down(), down()], 3).unwrap_err();
        assert!(e.contains("no majority of the 3"), "{e}");
        assert!(
            e.contains("10.0.0.1:6379 (1)") && e.contains("no answer (2"),
            "{e}"
        );
        let e = agreed(&[a(), b(), Ok(None)], 3).unwrap_err();
        assert!(e.contains("master unknown (1)"), "{e}");
        // Half is not a majority.
        assert!(agreed(&[a(), a(), b(), b()], 4).is_err());
        assert!(agreed(&[a()], 1).is_ok());
    }
}
