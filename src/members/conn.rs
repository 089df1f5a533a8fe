//! One connection to a node: a TCP or Unix socket of our own, a small
//! RESP2 reply reader (the few reply types our commands get), and every
//! wait bounded by a deadline.
//!
//! Owning the socket lets a round read a reply that is already buffered
//! without waiting at all once its deadline has passed (a non-blocking
//! read), which `redis::Connection` cannot do: a hung node read first must
//! not make replies that came in time look late, nor let late ones in.

use std::io::{self, Read, Write};
use std::net::TcpStream;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, Value};

use crate::base::node_error::{CallStep, Cause};
use crate::base::text::Decimal;
use crate::members::resolve::Resolver;
use crate::members::resp::Reader;

/// What a TLS connection needs: the client configuration and the name to
/// verify; `None`, the IP address connected to (a Sentinel group's
/// master, whose address the Sentinels announce).
#[cfg(feature = "tls")]
pub(crate) struct Tls {
    pub(crate) config: std::sync::Arc<rustls::ClientConfig>,
    pub(crate) name: Option<rustls::pki_types::ServerName<'static>>,
}

/// Without the `tls` feature no node can ask for TLS.
#[cfg(not(feature = "tls"))]
pub(crate) enum Tls {}

/// Socket timeouts are lowered to what is left of a deadline only when
/// they exceed it by more than this; spares system calls on the common
/// path.
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

/// The kernel rounds socket timeouts up to its timer tick (4 ms at HZ=250,
/// 10 ms at HZ=100), so a read blocked until a deadline returns up to two
/// ticks late. Blocking reads therefore stop this long before a deadline
/// (or half the node timeout, if less), and the rest is waited out by
/// polling, so that a hung node costs the node timeout and not a tick more.
const TAIL_MAX: Duration = Duration::from_millis(10);

/// The pause between two polls in the tail before a deadline.
const POLL_STEP: Duration = Duration::from_micros(200);

/// How long past a deadline a reply still arriving is read (never waited
/// for): enough for one that came in time, however large, to be taken;
/// too short for a peer that keeps sending to hold the caller.
const LATE_GRACE: Duration = Duration::from_millis(10);

/// The least room a read is given in the input buffer: the buffer is
/// compacted, or grown, when less is left.
const READ_ROOM: usize = 512;

/// How many of the first bytes a peer sends are kept for messages.
const HEARD: usize = 64;

enum Stream {
    Tcp(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<crate::members::tls::TlsStream>),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Stream {
    fn set_timeouts(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
            #[cfg(feature = "tls")]
            Stream::Tls(s) => {
                s.tcp.set_read_timeout(Some(timeout))?;
                s.tcp.set_write_timeout(Some(timeout))
            }
            #[cfg(unix)]
            Stream::Unix(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp.set_nonblocking(on),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An open connection to one node.
pub(crate) struct Conn {
    stream: Stream,
    /// Bytes received: `buf[start..end]` is not consumed by `reader` yet;
    /// reads land in the rest (zeroed once, when it grows), with no copy.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The reply being read (see `resp.rs`).
    reader: Reader,
    /// Some byte came since the last request was written: the request
    /// reached the server, which may have run it.
    answered: bool,
    /// The first bytes the peer sent (up to `HEARD`): what a peer that
    /// is not a Redis server said, for messages.
    heard: Vec<u8>,
    /// The read and write timeout currently set on the socket.
    timeout: Duration,
    /// How long before a deadline blocking reads stop (see `TAIL_MAX`).
    tail: Duration,
    /// The timeout a connection rests with in the pool: short enough that
    /// a round's reads never need to lower it (no system call), and long
    /// enough for a reply that comes.
    resting: Duration,
}

impl Conn {
    /// Connects to `addr` by `deadline` (name resolution, TCP connect and
    /// any TLS handshake included), for calls of `node_timeout`.
    ///
    /// A failure says how far it got: the TCP connect (or the name), or
    /// the TLS handshake.
    pub(crate) fn open(
        addr: &ConnectionAddr,
        resolver: Option<&Resolver>,
        tls: Option<&Tls>,
        deadline: Instant,
        node_timeout: Duration,
    ) -> Result<Conn, (CallStep, Cause)> {
        let at = |step| move |e| (step, e);
        let stream = match (addr, resolver) {
            (ConnectionAddr::Tcp(host, _), Some(resolver)) => {
                let mut last = None;
                let mut stream = None;
                let addrs = resolver
                    .resolve(deadline)
                    .map_err(|e| {
                        if e.kind() == io::ErrorKind::TimedOut {
                            from_io(e)
                        } else {
                            resolve_failure(format!("{host}: {e}"))
                        }
                    })
                    .map_err(at(CallStep::Connect))?;
                for sa in addrs {
                    let left = left(deadline)
                        .ok_or_else(timed_out)
                        .map_err(at(CallStep::Connect))?;
                    match TcpStream::connect_timeout(&sa, left) {
                        Ok(s) => {
                            stream = Some(s);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let stream = match (stream, last) {
                    (Some(s), _) => s,
                    (None, Some(e)) => return Err((CallStep::Connect, e.into())),
                    (None, None) => {
                        return Err((
                            CallStep::Connect,
                            resolve_failure(format!("{host} has no address")),
                        ));
                    }
                };
                stream
                    .set_nodelay(true)
                    .map_err(|e| (CallStep::Connect, e.into()))?;
                match tls {
                    None => Stream::Tcp(stream),
                    #[cfg(feature = "tls")]
                    Some(tls) => {
                        let name = match &tls.name {
                            Some(name) => name.clone(),
                            None => rustls::pki_types::ServerName::IpAddress(
                                stream
                                    .peer_addr()
                                    .map_err(|e| (CallStep::Connect, e.into()))?
                                    .ip()
                                    .into(),
                            ),
                        };
                        Stream::Tls(Box::new(
                            crate::members::tls::TlsStream::connect(
                                tls.config.clone(),
                                name,
                                stream,
                                deadline,
                            )
                            .map_err(|e| (CallStep::Tls, from_io(e)))?,
                        ))
                    }
                    #[cfg(not(feature = "tls"))]
                    Some(never) => match *never {},
                }
            }
            #[cfg(unix)]
            (ConnectionAddr::Unix(path), _) => {
                Stream::Unix(unix_connect(path, deadline).map_err(at(CallStep::Connect))?)
            }
            _ => {
                return Err((
                    CallStep::Connect,
                    Cause::Unsupported("address type not supported".to_owned()),
                ));
            }
        };
        let tail = (node_timeout / 2).min(TAIL_MAX);
        Ok(Conn {
            stream,
            buf: vec![0; 2 * READ_ROOM],
            start: 0,
            end: 0,
            reader: Reader::default(),
            answered: false,
            heard: Vec::new(),
            timeout: Duration::MAX,
            tail,
            resting: ((node_timeout - tail) / 2).max(Duration::from_micros(100)),
        })
    }

    /// Sets the socket timeouts to the resting value, if they are not
    /// already: before a connection goes back to the pool.
    pub(crate) fn rest(&mut self) -> io::Result<()> {
        if self.timeout != self.resting {
            self.stream.set_timeouts(self.resting)?;
            self.timeout = self.resting;
        }
        Ok(())
    }

    /// Lowers the socket timeouts to `cap` if they exceed it by more than
    /// `slack`.
    fn cap_timeout(&mut self, cap: Duration, slack: Duration) -> io::Result<()> {
        if self.timeout > cap + slack {
            self.stream.set_timeouts(cap)?;
            self.timeout = cap;
        }
        Ok(())
    }

    /// Writes a packed command by `deadline`.
    pub(crate) fn write(&mut self, packed: &[u8], deadline: Instant) -> Result<(), Cause> {
        let left = left(deadline).ok_or_else(timed_out)?;
        self.write_within(packed, left)
    }

    /// Writes a packed command with `left` until its deadline, as a clock
    /// read just before found (see [`write`](Self::write)).
    pub(crate) fn write_within(&mut self, packed: &[u8], left: Duration) -> Result<(), Cause> {
        self.answered = false;
        self.cap_timeout(left, TIMEOUT_SLACK)?;
        self.stream.write_all(packed).map_err(from_io)
    }

    /// Writes a packed command within the socket's current timeout.
    pub(crate) fn write_now(&mut self, packed: &[u8]) -> Result<(), Cause> {
        self.stream.write_all(packed).map_err(from_io)
    }

    /// Reads one reply by `deadline`; an error reply becomes an error.
    /// Past the deadline, takes only a reply already received, without
    /// waiting.
    pub(crate) fn read(&mut self, deadline: Instant) -> Result<Value, Cause> {
        loop {
            if let Some(reply) = self.take_parsed()? {
                return reply;
            }
            self.fill(deadline)?;
        }
    }

    /// Reads one reply if one is buffered or arrives within `wait` (one
    /// blocking read, no polling: for a connection that mostly waits, such
    /// as a subscriber's); `None` if nothing complete came. A partial reply
    /// stays buffered for the next call.
    pub(crate) fn read_within(&mut self, wait: Duration) -> Result<Option<Value>, Cause> {
        if let Some(reply) = self.take_parsed()? {
            return reply.map(Some);
        }
        if self.timeout != wait {
            self.stream.set_timeouts(wait)?;
            self.timeout = wait;
        }
        self.make_room();
        match self.stream.read(&mut self.buf[self.end..]) {
            Ok(0) => Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => {
                self.received(n);
                self.take_parsed()?.transpose()
            }
            Err(e) if is_would_block(&e) => Ok(None),
            Err(e) => Err(from_io(e)),
        }
    }

    /// The next complete reply in the input buffer, if any. What the
    /// reader consumed of an incomplete one is dropped from the buffer
    /// (it keeps its own state), so nothing is read twice.
    fn take_parsed(&mut self) -> Result<Option<Result<Value, Cause>>, Cause> {
        if self.start == self.end {
            // Nothing buffered: nothing can complete.
            return Ok(None);
        }
        let (used, reply) = self.reader.read(&self.buf[self.start..self.end])?;
        self.start += used;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(reply)
    }

    /// Leaves at least [`READ_ROOM`] bytes after `end`: the bytes not
    /// consumed move to the front, and the buffer grows (doubling) only
    /// when they fill it (a large reply, read whole).
    fn make_room(&mut self) {
        if self.buf.len() - self.end >= READ_ROOM {
            return;
        }
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        if self.buf.len() - self.end < READ_ROOM {
            let len = (self.buf.len() * 2).max(self.end + READ_ROOM);
            self.buf.resize(len, 0);
        }
    }

    /// Receives more bytes: waiting until `deadline`, or past it only
    /// taking what has arrived. Blocks in the socket until the tail before
    /// the deadline, then polls (see `TAIL_MAX`).
    fn fill(&mut self, deadline: Instant) -> Result<(), Cause> {
        self.make_room();
        // Past the deadline, what has arrived is taken only for a moment:
        // a peer that keeps sending cannot hold the reader.
        let now = Instant::now();
        if now > deadline + LATE_GRACE {
            return Err(timed_out());
        }
        // The first turn uses the time just read (one clock read per
        // wait: reads are on the hot path).
        let mut first =
            Some(Some(deadline.saturating_duration_since(now)).filter(|d| !d.is_zero()));
        let n = loop {
            match first.take().unwrap_or_else(|| left(deadline)) {
                Some(left) if left > self.tail => {
                    self.cap_timeout(left - self.tail, Duration::ZERO)?;
                    match self.stream.read(&mut self.buf[self.end..]) {
                        Err(e) if is_would_block(&e) => continue,
                        n => break n.map_err(from_io)?,
                    }
                }
                left => break self.poll_tail(deadline, left.is_some())?,
            }
        };
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        self.received(n);
        Ok(())
    }

    /// The tail before `deadline` (see `TAIL_MAX`), or a look past it:
    /// reads on a non-blocking socket, polling until `deadline` if
    /// `wait`, else once.
    #[cold]
    #[inline(never)]
    fn poll_tail(&mut self, deadline: Instant, wait: bool) -> Result<usize, Cause> {
        self.stream.set_nonblocking(true)?;
        let n = poll_until(&mut self.stream, &mut self.buf[self.end..], deadline, wait);
        self.stream.set_nonblocking(false)?;
        n
    }

    /// Takes in the `n` bytes just read after `end`, keeping the first few
    /// a connection hears apart.
    fn received(&mut self, n: usize) {
        self.answered = true;
        if self.heard.len() < HEARD {
            let more = (HEARD - self.heard.len()).min(n);
            self.heard
                .extend_from_slice(&self.buf[self.end..self.end + more]);
        }
        self.end += n;
    }

    /// Whether some reply (or part of one) came since the last request
    /// was written: a connection that then broke ran the request, at
    /// least in part, so the request must not be sent again.
    pub(crate) fn answered(&self) -> bool {
        self.answered
    }

    /// What the peer said first, if it is not RESP (an HTTP server, SSH,
    /// a TLS server spoken to in plain text), as text: for messages.
    pub(crate) fn foreign(&self) -> Option<String> {
        let first = *self.heard.first()?;
        if b"+-:$*_,#!=(%~>|".contains(&first) {
            return None;
        }
        let text: String = String::from_utf8_lossy(&self.heard)
            .chars()
            .take_while(|c| *c != '\r' && *c != '\n')
            .map(|c| if c.is_control() { '.' } else { c })
            .collect();
        // An empty line is RESP gone wrong, said by the reader.
        (!text.is_empty()).then_some(text)
    }
}

/// On a non-blocking socket: reads what has arrived, polling every
/// `POLL_STEP` until `deadline` if `wait`, else once.
fn poll_until(
    stream: &mut Stream,
    chunk: &mut [u8],
    deadline: Instant,
    wait: bool,
) -> Result<usize, Cause> {
    loop {
        match stream.read(chunk) {
            Err(e) if is_would_block(&e) => match left(deadline).filter(|_| wait) {
                Some(left) => std::thread::sleep(left.min(POLL_STEP)),
                None => return Err(timed_out()),
            },
            n => return n.map_err(from_io),
        }
    }
}

fn is_would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A socket's failure as the crate's cause (a TLS failure rides inside
/// the TLS stream's `io::Error`, and becomes [`Cause::Tls`]).
#[cold]
fn from_io(e: io::Error) -> Cause {
    e.into()
}

/// A name that did not resolve.
#[cold]
fn resolve_failure(why: String) -> Cause {
    Cause::Resolve(why)
}

/// Connects to a Unix socket by `deadline`. The standard library's
/// `connect` has no timeout, and a server that stopped accepting (paused,
/// its listen backlog full) blocks it indefinitely; so it runs on a
/// short-lived thread of its own, which is left to finish (and drop what
/// it got) when the deadline passes first. Connects are rare: a pooled
/// connection serves many pipeline.
#[cfg(unix)]
fn unix_connect(path: &std::path::Path, deadline: Instant) -> Result<UnixStream, Cause> {
    let left = left(deadline).ok_or_else(timed_out)?;
    let (sent, got) = std::sync::mpsc::sync_channel(1);
    let path = path.to_owned();
    std::thread::Builder::new()
        .name("redlock-unix-connect".into())
        .spawn(move || {
            let _ = sent.send(UnixStream::connect(path));
        })?;
    match got.recv_timeout(left) {
        Ok(connected) => Ok(connected?),
        Err(_) => Err(timed_out()),
    }
}

/// What is left until `deadline`, if anything.
fn left(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

#[cold]
pub(crate) fn timed_out() -> Cause {
    Cause::timed_out()
}

/// Encodes one command in RESP.
pub(crate) fn pack(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    pack_into(&mut out, &[args]);
    out
}

/// Appends one command to `out`, in RESP: its arguments are those of
/// `parts` in turn (a script's head, its keys, its arguments), so that no
/// caller joins them first. Reserves the whole length at once; allocates
/// nothing else.
pub(crate) fn pack_into(out: &mut Vec<u8>, parts: &[&[&[u8]]]) {
    let (mut count, mut bytes) = (0, 24);
    for part in parts {
        count += part.len();
        // Each argument's `$<len>\r\n` and `\r\n`: 5 bytes and the
        // length's digits (counted as 20 from 100 on): exact for the
        // short arguments of the hot path, so that a buffer sized for a
        // command is not grown again.
        bytes += part
            .iter()
            .map(|a| {
                a.len()
                    + 5
                    + if a.len() < 10 {
                        1
                    } else if a.len() < 100 {
                        2
                    } else {
                        20
                    }
            })
            .sum::<usize>();
    }
    out.reserve(bytes);
    length(out, b'*', count);
    for part in parts {
        for arg in *part {
            length(out, b'$', arg.len());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// A RESP length line: `mark`, `n` in decimal, CRLF.
fn length(out: &mut Vec<u8>, mark: u8, n: usize) {
    // Most arguments are shorter than 100 bytes: their lines are written
    // whole.
    let digit = |d: usize| b'0' + d as u8;
    match n {
        0..10 => out.extend_from_slice(&[mark, digit(n), b'\r', b'\n']),
        10..100 => out.extend_from_slice(&[mark, digit(n / 10), digit(n % 10), b'\r', b'\n']),
        _ => {
            out.push(mark);
            out.extend_from_slice(Decimal::of(n as u64).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests;
