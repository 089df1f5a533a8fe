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
//! once (one thread each, each step within the node timeout), and the
//! address that a majority of the Sentinels given report is the master's,
//! taken as soon as a majority agrees (a silent Sentinel costs nothing
//! then). One
//! Sentinel cut off from the others keeps the address it last knew (an
//! old master, a replica since): a majority of the Sentinels is what
//! elects a failover's leader, so an address a majority reports is one
//! the group has agreed on. No majority (a failover under way, most
//! Sentinels unreachable): the connection fails with a resolution error,
//! the member misses that round (a vote missing, never a wrong one), and
//! the next connection asks again.
//!
//! The Sentinels are reached on the crate's own connections
//! ([`Conn`]): with their own credentials (the group URL's
//! `sentinel_password`, `sentinel_username`) and, for a
//! `rediss-sentinel://` group, TLS, each checked against its host as
//! given; the master's certificate is checked against the IP address
//! dialled (the one they announce, or one the name they announce
//! resolves to).
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

use redis::{ConnectionAddr, Value};

use crate::base::error::Error;
use crate::base::node_error::{CallStep, Cause};
#[cfg(feature = "tls")]
use crate::members::conn::Tls;
use crate::members::conn::{Conn, pack};
use crate::members::resolve::{ResolveFn, Resolver, literal};
use crate::members::restart::{config_pairs, text};
use crate::members::url::{GROUP_PARAMS, redact};

/// The URL schemes of a Sentinel group: plain, and over TLS (to the
/// Sentinels and to the master alike).
pub(crate) const SCHEMES: [&str; 4] = [
    "redis-sentinel",
    "valkey-sentinel",
    TLS_SCHEMES[0],
    TLS_SCHEMES[1],
];

/// Those of [`SCHEMES`] over TLS.
const TLS_SCHEMES: [&str; 2] = ["rediss-sentinel", "valkeys-sentinel"];

/// Whether `url` names a Sentinel group (see [`Group::parse`]).
pub(crate) fn is_group(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        SCHEMES
            .iter()
            .any(|known| known.eq_ignore_ascii_case(scheme))
    })
}

/// A Sentinel group as given: its Sentinels, the master's name, and the
/// URL its data connections take (credentials and database).
#[derive(Clone)]
pub(crate) struct Group {
    /// Each Sentinel's host and port.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The master's name, as the Sentinels monitor it.
    pub(crate) master: String,
    /// The database selected on the master.
    pub(crate) db: i64,
    /// `redis://[userinfo@]<master>:1/<db>`: a node URL whose host the
    /// Sentinels resolve (its port is a placeholder); `rediss://` over
    /// TLS.
    pub(crate) data_url: String,
    /// Over TLS (`rediss-sentinel://`): the Sentinels and the master.
    pub(crate) tls: bool,
    /// The Sentinels' own credentials (`sentinel_username`,
    /// `sentinel_password`): user, if any, and password.
    pub(crate) auth: Option<(Option<String>, String)>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print credentials: the master's (in the data URL) or the
        // Sentinels'.
        f.debug_struct("Group")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .field("data_url", &redact(&self.data_url))
            .field("tls", &self.tls)
            .field("auth", &self.auth.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Group {
    /// Reads `redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/db][?query]#master`
    /// (the form Lettuce and Spring take; a port defaults to 26379;
    /// `rediss-sentinel://` over TLS). The credentials are the master's;
    /// the Sentinels' own are the query's `sentinel_username` and
    /// `sentinel_password` (percent-encoded), and without them the
    /// Sentinels are asked without.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming what is wrong: no master name, no
    /// Sentinel, a bad port, a path that is not a database number, a
    /// query parameter unknown or given twice.
    pub(crate) fn parse(url: &str) -> Result<Group, Error> {
        let bad = |why: &str| {
            Error::invalid_config(format!("Sentinel group URL {:?}: {why}", redact(url)))
        };
        if !is_group(url) {
            return Err(bad("the scheme is not redis-sentinel"));
        }
        let (_, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (rest, master) = rest
            .rsplit_once('#')
            .ok_or_else(|| bad("no master name: end it with #<master name>"))?;
        if master.is_empty() {
            return Err(bad("the master name after # is empty"));
        }
        if master.contains(['?', '&', '=', '@']) {
            // A query written after the `#` (the URL's order is
            // `...?query#master`): read as a name, shown in messages.
            return Err(bad(
                "the master name after # holds ?, &, = or @: the query comes before the #",
            ));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let auth = sentinel_auth(query).map_err(|why| bad(&why))?;
        let before_path = rest.find('/').unwrap_or(rest.len());
        let (userinfo, hosts) = match rest[..before_path].rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..before_path]),
            None => (None, &rest[..before_path]),
        };
        let db = match rest[before_path..].trim_start_matches('/') {
            "" => 0,
            db => db
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or_else(|| bad("the path is not a database number"))?,
        };
        let mut sentinels: Vec<(String, u16)> = Vec::new();
        for host in hosts.split(',') {
            let sentinel = host_port(host).map_err(|why| bad(&why))?;
            if sentinels.contains(&sentinel) {
                // Counted twice, one Sentinel could make a majority.
                return Err(bad(&format!("the Sentinel {host} is given twice")));
            }
            sentinels.push(sentinel);
        }
        // Lettuce's form: a lone token before `@` is the password.
        let creds = match userinfo {
            None => String::new(),
            Some(u) if u.contains(':') => format!("{u}@"),
            Some(password) => format!(":{password}@"),
        };
        // The host the node's messages show: the master's name where it is
        // a plain host name (never an IP address, which would be dialled
        // as it is), else a placeholder; the Sentinels resolve it.
        let plain = master
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            && master.parse::<std::net::IpAddr>().is_err()
            && !master.starts_with(['-', '.']);
        let host = if plain { master } else { "sentinel.invalid" };
        let tls = url.split_once("://").is_some_and(|(scheme, _)| {
            TLS_SCHEMES
                .iter()
                .any(|tls| tls.eq_ignore_ascii_case(scheme))
        });
        let scheme = if tls { "rediss" } else { "redis" };
        Ok(Group {
            sentinels,
            master: master.to_owned(),
            db,
            data_url: format!("{scheme}://{creds}{host}:1/{db}"),
            tls,
            auth,
        })
    }

    /// Whether `other` is the same group: the same master's name on a
    /// Sentinel they share (its database aside: one master, one vote).
    pub(crate) fn same_as(&self, other: &Group) -> bool {
        self.master == other.master && self.sentinels.iter().any(|s| other.sentinels.contains(s))
    }

    /// The member's name in messages: `<master> (sentinels h:p,h:p,...)`.
    pub(crate) fn name(&self) -> String {
        let sentinels: Vec<String> = self.sentinels.iter().map(|(h, p)| shown(h, *p)).collect();
        let db = match self.db {
            0 => String::new(),
            db => format!("/{db}"),
        };
        format!("{}{db} (sentinels {})", self.master, sentinels.join(","))
    }
}

/// The Sentinels' credentials in a group URL's query
/// (`sentinel_username=...&sentinel_password=...`), or what is wrong.
fn sentinel_auth(query: &str) -> Result<Option<(Option<String>, String)>, String> {
    let (mut user, mut password) = (None, None);
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        let known = GROUP_PARAMS
            .into_iter()
            .position(|known| known.eq_ignore_ascii_case(name));
        let slot = match known {
            Some(0) => &mut user,
            Some(_) => &mut password,
            // Not echoed unless it looks like a misspelt name: it may be
            // the tail of a password holding a raw `&`.
            None => {
                let shown = match name.to_ascii_lowercase().starts_with("sentinel_") {
                    true => format!(" {name:?}"),
                    false => String::new(),
                };
                return Err(format!(
                    "an unknown query parameter{shown} (known: {}; write a `&` inside a \
                     value as %26)",
                    GROUP_PARAMS.join(", ")
                ));
            }
        };
        if slot.is_some() {
            return Err(format!("the query parameter {name} is given twice"));
        }
        *slot = Some(percent_decoded(value).ok_or_else(|| {
            format!("the query parameter {name} is not valid percent-encoded UTF-8")
        })?);
    }
    match (user, password) {
        (Some(_), None) => Err("sentinel_username without sentinel_password".to_owned()),
        (user, Some(password)) => Ok(Some((user, password))),
        (None, None) => Ok(None),
    }
}

/// `s` with its `%XX` escapes decoded, if that is UTF-8.
fn percent_decoded(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// `host[:port]`, an IPv6 address in brackets, the port 26379 by
/// default; what is wrong with it otherwise.
fn host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("{s:?}: an IPv6 address without its closing ]"))?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| format!("{s:?}: not host:port"))?,
                ),
            ),
        }
    } else {
        match s.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(format!(
                    "{s:?}: write an IPv6 address in brackets, [::1]:26379"
                ));
            }
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err(format!("a Sentinel's host is empty in {s:?}"));
    }
    let port = match port {
        None => 26379,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("a Sentinel's port is not a number from 1 to 65535 in {s:?}"))?,
    };
    Ok((host.to_owned(), port))
}

/// `host:port`, an IPv6 address in brackets.
fn shown(host: &str, port: u16) -> String {
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

/// The TLS client configuration of a `rediss-sentinel://` group.
#[cfg(feature = "tls")]
pub(crate) type TlsConfig = Arc<rustls::ClientConfig>;
/// Without the `tls` feature no group is over TLS.
#[cfg(not(feature = "tls"))]
pub(crate) type TlsConfig = std::convert::Infallible;

/// How a group's Sentinels are reached: each step's timeout, the
/// manager's resolver, TLS, and their own credentials.
#[derive(Clone)]
pub(crate) struct Reach {
    timeout: Duration,
    /// The manager's resolver (for the master's host, when the
    /// Sentinels announce a name).
    dns: Arc<ResolveFn>,
    tls: Option<TlsConfig>,
    /// `AUTH [user] password`, packed: sent first on every connection.
    auth: Option<Vec<u8>>,
    /// Each Sentinel (in the group's order) and its resolver: one per
    /// Sentinel, so that a name whose resolution hangs holds one thread
    /// however often it is asked (see `resolve.rs`).
    sentinels: Arc<[((String, u16), Resolver)]>,
}

impl Reach {
    /// How `group`'s Sentinels are reached, with `tls` its configuration
    /// if it is over TLS.
    pub(crate) fn new(
        group: &Group,
        timeout: Duration,
        dns: Arc<ResolveFn>,
        tls: Option<TlsConfig>,
    ) -> Reach {
        let auth = group.auth.as_ref().map(|(user, password)| match user {
            Some(user) => pack(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
            None => pack(&[b"AUTH", password.as_bytes()]),
        });
        let sentinels = group
            .sentinels
            .iter()
            .map(|(host, port)| {
                (
                    (host.clone(), *port),
                    Resolver::new(host, *port, dns.clone()),
                )
            })
            .collect();
        Reach {
            timeout,
            dns,
            tls,
            auth,
            sentinels,
        }
    }

    /// Sentinel `i` as messages show it.
    fn at(&self, i: usize) -> String {
        let (host, port) = &self.sentinels[i].0;
        shown(host, *port)
    }

    /// A connection to Sentinel `i`, authenticated, its every step within
    /// the timeout; what failed otherwise, for messages.
    fn connect(&self, i: usize) -> Result<Conn, String> {
        let ((host, port), resolver) = &self.sentinels[i];
        let at = self.at(i);
        let deadline = Instant::now() + self.timeout;
        let tls = match &self.tls {
            None => None,
            #[cfg(feature = "tls")]
            Some(config) => Some(Tls {
                config: config.clone(),
                name: Some(
                    crate::members::tls::server_name(host).map_err(|e| format!("{at}: {e}"))?,
                ),
            }),
            #[cfg(not(feature = "tls"))]
            Some(never) => match *never {},
        };
        let addr = ConnectionAddr::Tcp(host.clone(), *port);
        let mut con = Conn::open(&addr, Some(resolver), tls.as_ref(), deadline, self.timeout)
            .map_err(|(step, e)| match step {
                CallStep::Tls => format!("{at}: TLS: {e}"),
                _ => format!("{at}: {e}"),
            })?;
        if let Some(auth) = &self.auth {
            con.write(auth, deadline)
                .and_then(|()| con.read(deadline))
                .map_err(|e| format!("{at}: AUTH: {e}"))?;
        }
        Ok(con)
    }

    /// Sentinel `i`'s answer to the packed command `asked`, on a new
    /// connection: connecting takes at most the timeout, and so does the
    /// answer.
    fn query(&self, i: usize, asked: &[u8]) -> Result<Value, String> {
        let mut con = self.connect(i)?;
        let deadline = Instant::now() + self.timeout;
        con.write(asked, deadline)
            .and_then(|()| con.read(deadline))
            .map_err(|e| format!("{}: {e}", self.at(i)))
    }

    /// Asks every Sentinel at once, each on a thread of its own, what
    /// `ask` says of it (by its index); the answers come on the channel
    /// as they come, those of Sentinels no thread could be had for at
    /// once, as `failed` makes them.
    fn ask_all<T: Send + 'static>(
        &self,
        ask: impl Fn(&Reach, usize) -> T + Send + Sync + 'static,
        failed: impl Fn(usize, String) -> T,
    ) -> std::sync::mpsc::Receiver<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        let ask = Arc::new(ask);
        for i in 0..self.sentinels.len() {
            let (sender, reach, ask) = (tx.clone(), self.clone(), ask.clone());
            let spawned = thread::Builder::new()
                .name("redlock-sentinel-ask".into())
                .spawn(move || {
                    let _ = sender.send(ask(&reach, i));
                });
            if let Err(e) = spawned {
                let why = format!("{}: no thread to ask it ({e})", self.at(i));
                let _ = tx.send(failed(i, why));
            }
        }
        rx
    }
}

/// The resolver of `group`'s master (see the module docs).
pub(crate) fn resolver(group: Group, reach: Reach) -> Arc<ResolveFn> {
    Arc::new(move |_: &str, _: u16| master_of(&group, &reach))
}

/// A group's Sentinels as its member keeps them: the group, how they are
/// reached, and their announcements, listened for while the member
/// lives (the threads end when this is dropped).
pub(crate) struct Sentinels {
    pub(crate) group: Group,
    reach: Reach,
    stop: Arc<AtomicBool>,
}

impl Drop for Sentinels {
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
pub(crate) fn watch(group: &Group, reach: &Reach, switches: Arc<AtomicU64>) -> Sentinels {
    let stop = Arc::new(AtomicBool::new(false));
    for i in 0..group.sentinels.len() {
        let master = group.master.clone();
        let (stop, switches, reach) = (stop.clone(), switches.clone(), reach.clone());
        // Without a thread to be had, failovers are followed by failures.
        let _ = thread::Builder::new()
            .name("redlock-sentinel".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let _ = listen(&reach, i, &master, &stop, &switches);
                    if let Some(left) = WATCH_POLL.checked_sub(began.elapsed()) {
                        thread::sleep(left);
                    }
                }
            });
    }
    Sentinels {
        group: group.clone(),
        reach: reach.clone(),
        stop,
    }
}

/// What one Sentinel says of its group's master (`SENTINEL MASTER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The master's address.
    pub(crate) addr: (String, u16),
    /// How many Sentinels must agree the master is down.
    pub(crate) quorum: Option<u32>,
    /// The master's replicas it knows.
    pub(crate) replicas: Option<u32>,
    /// The Sentinels it knows of the master, itself included.
    pub(crate) sentinels: Option<u32>,
}

impl Sentinels {
    /// Each Sentinel given (`host:port`), with what it says of the master
    /// or why it says nothing: all asked at once, each step within the
    /// timeout. For reports, never for a vote.
    pub(crate) fn survey(&self) -> Vec<(String, Result<Seen, String>)> {
        let master = self.group.master.clone();
        let rx = self.reach.ask_all(
            move |reach, i| (i, seen(reach, i, &master)),
            |i, why| (i, Err(why)),
        );
        let mut said: Vec<(usize, Result<Seen, String>)> = rx.iter().collect();
        said.sort_by_key(|(i, _)| *i);
        said.into_iter()
            .map(|(i, seen)| (self.reach.at(i), seen))
            .collect()
    }
}

/// Sentinel `i`'s `SENTINEL MASTER <master>`, read.
fn seen(reach: &Reach, i: usize, master: &str) -> Result<Seen, String> {
    let at = reach.at(i);
    let said = reach.query(i, &pack(&[b"SENTINEL", b"MASTER", master.as_bytes()]))?;
    // Field names and values, as `CONFIG GET` answers them.
    let fields = config_pairs(&said);
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let number = |name: &str| field(name).and_then(|v| v.parse::<u32>().ok());
    let addr = field("ip")
        .cloned()
        .zip(number("port").and_then(|p| u16::try_from(p).ok()))
        .ok_or_else(|| format!("{at}: no master address in {said:?}"))?;
    Ok(Seen {
        addr,
        quorum: number("quorum"),
        replicas: number("num-slaves"),
        sentinels: number("num-other-sentinels").map(|n| n + 1),
    })
}

/// A watcher's connection is opened anew this often, so that one that
/// went half-open (a NAT or a firewall that forgot it) misses
/// announcements for this long at most.
const WATCH_FOR: Duration = Duration::from_secs(30);

/// Sentinel `i`'s announcements, until it fails, [`WATCH_FOR`] passes or
/// `stop` is set.
fn listen(
    reach: &Reach,
    i: usize,
    master: &str,
    stop: &AtomicBool,
    switches: &AtomicU64,
) -> Result<(), String> {
    let mut con = reach.connect(i)?;
    let failed = |e: Cause| format!("{}: {e}", reach.at(i));
    let subscribe = pack(&[b"SUBSCRIBE", b"+switch-master"]);
    con.write(&subscribe, Instant::now() + reach.timeout)
        .map_err(failed)?;
    let opened = Instant::now();
    while !stop.load(Ordering::Relaxed) && opened.elapsed() < WATCH_FOR {
        // `message`, the channel, then `<master name> <old ip> <old port>
        // <new ip> <new port>`; the subscription's confirmation aside.
        if let Some(Value::Array(parts)) = con.read_within(WATCH_POLL).map_err(failed)?
            && let [Value::BulkString(kind), _, Value::BulkString(payload)] = &parts[..]
            && kind == b"message"
            && payload.split(|b| *b == b' ').next() == Some(master.as_bytes())
        {
            switches.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// What one Sentinel said of the master.
type Told = Result<Option<(String, u16)>, String>;

/// Asks every Sentinel of `group` at once, each on a thread of its own,
/// and answers the address a majority of them report as soon as one
/// does (or says why none can): a Sentinel that is silent, or whose name
/// does not resolve, costs nothing while the others agree.
fn master_of(group: &Group, reach: &Reach) -> io::Result<Vec<SocketAddr>> {
    let given = group.sentinels.len();
    let master = group.master.clone();
    let rx = reach.ask_all(move |reach, i| ask(reach, i, &master), |_, why| Err(why));
    let mut told: Vec<Told> = Vec::new();
    // Each ask takes a timeout to connect and one to answer; the answers
    // are awaited no longer.
    let deadline = Instant::now() + reach.timeout.saturating_mul(2);
    let decided = loop {
        match agreed(&told, given) {
            Ok(addr) => break Ok(addr),
            Err(why) if told.len() == given || !possible(&told, given) => break Err(why),
            Err(_) => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(answer) => told.push(answer),
            Err(_) => {
                while told.len() < given {
                    told.push(Err("no answer in time".into()));
                }
            }
        }
    };
    let (host, port) = decided
        .map_err(|why| io::Error::other(format!("the Sentinels of {}: {why}", group.master)))?;
    match literal(&host, port) {
        Some(addr) => Ok(vec![addr]),
        None => (reach.dns)(&host, port),
    }
}

/// Each address reported, with how many reported it, in the order first
/// reported.
pub(crate) fn counts<'a>(
    addrs: impl IntoIterator<Item = &'a (String, u16)>,
) -> Vec<(&'a (String, u16), usize)> {
    let mut counts: Vec<(&(String, u16), usize)> = Vec::new();
    for addr in addrs {
        match counts.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, n)) => *n += 1,
            None => counts.push((addr, 1)),
        }
    }
    counts
}

/// The addresses among answers.
fn addrs(told: &[Told]) -> impl Iterator<Item = &(String, u16)> {
    told.iter().filter_map(|t| t.as_ref().ok()?.as_ref())
}

/// `h:p (n), ...`: counted addresses, for messages.
pub(crate) fn counted(counts: &[(&(String, u16), usize)]) -> Vec<String> {
    counts
        .iter()
        .map(|((h, p), n)| format!("{} ({n})", shown(h, *p)))
        .collect()
}

/// Whether the answers not in yet could still make a majority.
fn possible(told: &[Told], given: usize) -> bool {
    let left = given.saturating_sub(told.len());
    let best = counts(addrs(told))
        .iter()
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0);
    best + left > given / 2
}

/// The address that more than half of `given` Sentinels reported, or
/// why there is none.
fn agreed(told: &[Told], given: usize) -> Result<(String, u16), String> {
    let counts = counts(addrs(told));
    if let Some((addr, _)) = counts.iter().find(|(_, n)| *n > given / 2) {
        return Ok((*addr).clone());
    }
    let mut said = counted(&counts);
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

/// Sentinel `i`'s answer: the master's address, `None` when it does not
/// know the name.
fn ask(reach: &Reach, i: usize, master: &str) -> Told {
    let at = reach.at(i);
    let asked = pack(&[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()]);
    match reach.query(i, &asked)? {
        Value::Nil => Ok(None),
        Value::Array(parts) => {
            let addr = match &parts[..] {
                [ip, port] => text(ip)
                    .filter(|ip| !ip.is_empty())
                    .zip(text(port).and_then(|p| p.parse::<u16>().ok())),
                _ => None,
            };
            addr.map(Some)
                .ok_or_else(|| format!("{at}: an address that is not host and port: {parts:?}"))
        }
        other => Err(format!("{at}: an answer that is not an address: {other:?}")),
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
        assert_eq!((g.master.as_str(), g.db), ("cache", 2));
        assert_eq!(g.data_url, "redis://:pw@cache:1/2");
        assert_eq!(
            g.name(),
            "cache/2 (sentinels 10.0.0.1:26379,10.0.0.2:26380,[::1]:5)"
        );
        // Lettuce's lone token is the password; a master's name that is
        // not a plain host name is never dialled as one.
        let g = Group::parse("REDIS-SENTINEL://secret@s1#10.0.0.9").unwrap();
        assert_eq!(g.data_url, "redis://:secret@sentinel.invalid:1/0");
        for (url, says) in [
            ("redis-sentinel://h:26379", "no master name"),
            ("redis-sentinel://h:26379#", "is empty"),
            ("redis-sentinel://h:x#m", "port is not a number"),
            ("redis-sentinel://h:0#m", "port is not a number"),
            ("redis-sentinel://h,,g#m", "host is empty"),
            ("redis-sentinel://:26379#m", "host is empty"),
            ("redis-sentinel://::1#m", "IPv6 address in brackets"),
            ("redis-sentinel://[::1#m", "without its closing ]"),
            ("redis-sentinel://h,h:26379#m", "given twice"),
            ("redis-sentinel://h/zero#m", "not a database number"),
            ("redis://h#m", "not redis-sentinel"),
        ] {
            let e = Group::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        let e = Group::parse("redis-sentinel://user:secret@h:x#m").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        let e = Group::parse("redis-sentinel://h:x?sentinel_password=secret#m").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        // Over TLS, to the Sentinels and to the master; plain otherwise.
        let g = Group::parse("rediss-sentinel://s1#m").unwrap();
        assert!(g.tls && g.data_url.starts_with("rediss://"), "{g:?}");
        let g = Group::parse("Valkeys-Sentinel://s1#m").unwrap();
        assert!(g.tls, "{g:?}");
        assert!(!Group::parse("redis-sentinel://s1#m").unwrap().tls);
        // The Sentinels' own credentials, percent-encoded in the query;
        // the master's stay in the userinfo.
        let g = Group::parse(
            "redis-sentinel://:data@s1,s2?sentinel_username=ops&sentinel_password=p%26w%23#m",
        )
        .unwrap();
        assert_eq!(g.auth, Some((Some("ops".to_owned()), "p&w#".to_owned())));
        assert_eq!(g.data_url, "redis://:data@m:1/0");
        assert_eq!(g.sentinels.len(), 2);
        let g = Group::parse("redis-sentinel://:data@s1?Sentinel_Password=pw#m").unwrap();
        assert_eq!(g.auth, Some((None, "pw".to_owned())));
        let shown = format!("{g:?}");
        assert!(!shown.contains("pw") && !shown.contains("data@"), "{shown}");
        let g = Group::parse("redis-sentinel://s1/3?sentinel_password=pw#m").unwrap();
        assert_eq!((g.auth, g.db), (Some((None, "pw".to_owned())), 3));
        for (url, says) in [
            (
                "redis-sentinel://s1?password=x#m",
                "an unknown query parameter (known",
            ),
            (
                "redis-sentinel://s1?sentinel_pasword=x#m",
                "parameter \"sentinel_pasword\"",
            ),
            (
                "redis-sentinel://s1#m?sentinel_password=x",
                "the query comes before",
            ),
            (
                "redis-sentinel://s1?sentinel_password=a&sentinel_password=b#m",
                "given twice",
            ),
            (
                "redis-sentinel://s1?sentinel_username=u#m",
                "without sentinel_password",
            ),
            (
                "redis-sentinel://s1?sentinel_password=%zz#m",
                "percent-encoded",
            ),
            (
                "redis-sentinel://s1?sentinel_password=%+1#m",
                "percent-encoded",
            ),
        ] {
            let e = Group::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        // One group under two spellings, or two databases of one master.
        let a = Group::parse("redis-sentinel://s1,s2#m").unwrap();
        assert!(a.same_as(&Group::parse("valkey-sentinel://s2:26379,s3/1#m").unwrap()));
        assert!(!a.same_as(&Group::parse("redis-sentinel://s1#n").unwrap()));
        assert!(!a.same_as(&Group::parse("redis-sentinel://t1#m").unwrap()));
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
        // Decided early: a majority in, or none possible any more.
        assert!(possible(&[a(), b()], 3));
        assert!(!possible(&[a(), b(), down()], 4));
        assert!(!possible(&[down(), down()], 3));
    }
}
