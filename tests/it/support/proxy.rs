//! A TCP proxy between the client and one node whose behaviour can be
//! switched while it runs: pass, add latency, black-hole, refuse new
//! connections, reset connections, truncate replies; and a forwarder whose
//! target can be switched to another server, cutting live connections (an
//! address that moves in a failover).
//!
//! Plain std threads: one accepting, two per connection (one per
//! direction). Every socket read has a short timeout so the threads notice
//! a mode change or the proxy's end within a few milliseconds.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::Mutex;

/// What the proxy does to traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Forward both ways, each chunk held back this long (so a round trip
    /// takes twice as long more).
    Latency(Duration),
    /// Accept and read, never forward and never answer.
    Blackhole,
    /// Close the listening socket (new connections are refused by the
    /// kernel) and reset every open connection.
    Refuse,
    /// Reset (TCP RST) every connection at its next byte, new ones too.
    Reset,
    /// Forward requests; cut each connection's next reply after this many
    /// bytes and then stall it (nothing more either way).
    Truncate(usize),
    /// Once, on the next reply of any connection: forward this many bytes
    /// of it, then close that connection (the client reads some replies
    /// of a pipeline, then the end). Then as `Pass`.
    CutOnce(usize),
    /// Once, on the next request of any connection that runs a script
    /// (`EVAL`, `EVALSHA`), `DELIFEQ` or `SET ... IFEQ`: hold it back this long, then
    /// forward it, whatever the client did meanwhile (a request that the
    /// network delays past the client's timeout, executed after the
    /// client's later requests on other connections). Then as `Pass`.
    DelayScriptOnce(Duration),
    /// Once, on the next request of any connection that runs a script
    /// (as [`DelayScriptOnce`](Self::DelayScriptOnce) finds them): drop
    /// it (the client's read times out; the server never runs it). Then
    /// as `Pass`.
    DropScriptOnce,
    /// While set: every request that runs a script (as
    /// [`DelayScriptOnce`](Self::DelayScriptOnce) finds them), on any
    /// connection, is held back this long, then forwarded, whatever the
    /// client did meanwhile (each connection's requests stay in order).
    /// A waiter's claim and its clean-up, sent on two connections, both
    /// reach the server late, after the client's next attempt.
    DelayScripts(Duration),
    /// As [`DelayScripts`](Self::DelayScripts), for every request (a
    /// plain `SET ... NX` acquisition too).
    DelayAll(Duration),
}

const POLL: Duration = Duration::from_millis(2);

struct State {
    mode: Mutex<Mode>,
    /// Where new connections go, and how many times that changed (bumped
    /// by [`Proxy::retarget`]: connections made before are cut). One lock
    /// for both, so that a connection accepted while the target moves
    /// sees the upstream and the cut count of one moment: read apart, a
    /// connection could reach the old server with the new count and never
    /// be cut (the schedule checker then saw a worker vote with a server
    /// the others no longer reached).
    target: Mutex<(SocketAddr, u64)>,
    /// The cut count alone, for the pumps' polling: written under
    /// `target`'s lock, after it.
    cuts: AtomicU64,
    /// Armed by [`Proxy::repoint_after_reply`], with whether a request
    /// was forwarded since: once a connection then forwards a reply, this
    /// moves to `moved_to`.
    repoint: Mutex<Option<(SocketAddr, bool)>>,
    /// Where every live connection sends its later requests, once
    /// re-pointed (no handshake, nothing cut).
    moved_to: Mutex<Option<SocketAddr>>,
    /// How many requests [`Mode::DelayScripts`] held back.
    held: AtomicU64,
    /// Bumped on every mode change; connections compare to act once.
    epoch: AtomicU64,
    /// A `CutOnce` was done.
    cut_done: AtomicBool,
    stop: AtomicBool,
}

/// A running proxy on 127.0.0.1; stops when dropped.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy in front of `upstream` on a free port.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = super::server::claimed_listener()?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            mode: Mutex::new(Mode::Pass),
            target: Mutex::new((upstream, 0)),
            cuts: AtomicU64::new(0),
            repoint: Mutex::new(None),
            moved_to: Mutex::new(None),
            held: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            cut_done: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let state = state.clone();
            thread::spawn(move || accept_loop(Some(listener), port, &state))
        };
        Ok(Proxy {
            port,
            state,
            acceptor: Some(acceptor),
        })
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`, optionally with a password.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Switches the mode; it applies to open connections at their next
    /// chunk of data, and to new connections.
    pub fn set(&self, mode: Mode) {
        *self.state.mode.lock() = mode;
        self.state.cut_done.store(false, Ordering::SeqCst);
        self.state.epoch.fetch_add(1, Ordering::SeqCst);
        // Let the acceptor close or reopen the listener.
        thread::sleep(POLL * 5);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.state.mode.lock()
    }

    /// Sends new connections to `upstream` from now on, and cuts every
    /// open one (closed both ways): the address now reaches another
    /// server, as after a failover behind a name or virtual IP.
    pub fn retarget(&self, upstream: SocketAddr) {
        let mut target = self.state.target.lock();
        target.0 = upstream;
        target.1 += 1;
        self.state.cuts.store(target.1, Ordering::SeqCst);
    }

    /// Once the next request forwarded after this call is answered (its
    /// reply forwarded: not the late reply of an earlier one, such as a
    /// release's pipelined `PUBLISH` held in a loaded forwarder), every
    /// live connection sends its later requests to `spare` instead, on
    /// the same client connection (an L4 proxy or managed endpoint that
    /// re-points its upstream after a failover and keeps its clients'
    /// connections up). The client sees no close, no handshake: only
    /// other answers.
    pub fn repoint_after_reply(&self, spare: SocketAddr) {
        *self.state.repoint.lock() = Some((spare, false));
    }

    /// How many requests [`Mode::DelayScripts`] has held back so far.
    pub fn held(&self) -> u64 {
        self.state.held.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(mut listener: Option<TcpListener>, port: u16, state: &Arc<State>) {
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    while !state.stop.load(Ordering::SeqCst) {
        let refuse = *state.mode.lock() == Mode::Refuse;
        match (&listener, refuse) {
            (Some(_), true) => listener = None,
            (None, false) => {
                listener = TcpListener::bind(("127.0.0.1", port)).ok();
            }
            _ => {}
        }
        let Some(l) = &listener else {
            thread::sleep(POLL);
            continue;
        };
        l.set_nonblocking(true).expect("nonblocking listener");
        match l.accept() {
            Ok((client, _)) => {
                let state = state.clone();
                let (upstream, cuts) = *state.target.lock();
                connections.push(thread::spawn(move || serve(client, upstream, cuts, &state)));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(_) => thread::sleep(POLL),
        }
        connections.retain(|c| !c.is_finished());
    }
    for c in connections {
        let _ = c.join();
    }
}

/// One proxied connection: pumps both ways until either side closes, the
/// mode ends it, or the proxy stops.
fn serve(client: TcpStream, upstream: SocketAddr, cuts: u64, state: &Arc<State>) {
    let epoch = state.epoch.load(Ordering::SeqCst);
    if state.cuts.load(Ordering::SeqCst) != cuts {
        // Moved since it was accepted: cut at once, as a connection open
        // at the move would be.
        let _ = client.shutdown(std::net::Shutdown::Both);
        return;
    }
    let mode = *state.mode.lock();
    if matches!(mode, Mode::Refuse | Mode::Reset) {
        reset(&client);
        return;
    }
    if mode == Mode::Blackhole {
        // Swallow what comes, with no connection to the node (many
        // clients time out and reconnect here: each upstream connection
        // would leave a port in TIME_WAIT), until the mode changes.
        let _ = client.set_read_timeout(Some(POLL));
        let mut buf = [0u8; 4096];
        let mut client = client;
        while !state.stop.load(Ordering::SeqCst)
            && state.epoch.load(Ordering::SeqCst) == epoch
            && state.cuts.load(Ordering::SeqCst) == cuts
        {
            match client.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
        let _ = client.shutdown(std::net::Shutdown::Both);
        return;
    }
    let server = match TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) {
        Ok(s) => s,
        Err(_) => return, // the node is down: the client sees the close
    };
    for s in [&client, &server] {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(POLL));
    }
    let conn = Conn {
        client,
        server,
        done: AtomicBool::new(false),
        stalled: AtomicBool::new(false),
        moved: Mutex::new(None),
        start_epoch: epoch,
        start_cuts: cuts,
    };
    thread::scope(|scope| {
        scope.spawn(|| conn.pump(true, state));
        conn.pump(false, state);
    });
}

struct Conn {
    client: TcpStream,
    server: TcpStream,
    done: AtomicBool,
    stalled: AtomicBool,
    /// Re-pointed (see [`Proxy::repoint_after_reply`]): the server later
    /// requests go to, each answered in turn.
    moved: Mutex<Option<TcpStream>>,
    start_epoch: u64,
    start_cuts: u64,
}

impl Conn {
    /// Moves bytes one way: `up` is client to server.
    fn pump(&self, up: bool, state: &State) {
        let (mut from, mut to) = if up {
            (&self.client, &self.server)
        } else {
            (&self.server, &self.client)
        };
        let mut buf = [0u8; 16 * 1024];
        let mut truncated = false;
        loop {
            if self.done.load(Ordering::SeqCst) || state.stop.load(Ordering::SeqCst) {
                break;
            }
            if state.cuts.load(Ordering::SeqCst) != self.start_cuts {
                self.end(false);
                break;
            }
            let mode = *state.mode.lock();
            if mode == Mode::Refuse && state.epoch.load(Ordering::SeqCst) != self.start_epoch {
                self.end(true);
                break;
            }
            let n = match from.read(&mut buf) {
                Ok(0) => {
                    self.end(false);
                    break;
                }
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue;
                }
                Err(_) => {
                    self.end(false);
                    break;
                }
            };
            // Nothing read after a cut crosses it.
            if state.cuts.load(Ordering::SeqCst) != self.start_cuts {
                self.end(false);
                break;
            }
            if self.stalled.load(Ordering::SeqCst) {
                continue;
            }
            let mode = *state.mode.lock();
            let out: &[u8] = match mode {
                Mode::Pass => &buf[..n],
                // Bytes that raced the switch to Refuse are not forwarded:
                // the connection is reset, as the mode says, without the
                // node executing what it carried.
                Mode::Refuse => {
                    self.end(true);
                    break;
                }
                Mode::Latency(d) => {
                    thread::sleep(d);
                    &buf[..n]
                }
                Mode::Blackhole => continue,
                Mode::Reset => {
                    self.end(true);
                    break;
                }
                Mode::Truncate(keep) if !up && !truncated => {
                    truncated = true;
                    self.stalled.store(true, Ordering::SeqCst);
                    &buf[..n.min(keep)]
                }
                Mode::Truncate(_) => &buf[..n],
                Mode::CutOnce(keep) if !up && !state.cut_done.swap(true, Ordering::SeqCst) => {
                    let _ = to.write_all(&buf[..n.min(keep)]);
                    self.end(false);
                    break;
                }
                Mode::CutOnce(_) => &buf[..n],
                Mode::DelayScriptOnce(d)
                    if up
                        && runs_script(&buf[..n])
                        && !state.cut_done.swap(true, Ordering::SeqCst) =>
                {
                    thread::sleep(d);
                    &buf[..n]
                }
                Mode::DelayScriptOnce(_) => &buf[..n],
                Mode::DropScriptOnce
                    if up
                        && runs_script(&buf[..n])
                        && !state.cut_done.swap(true, Ordering::SeqCst) =>
                {
                    continue;
                }
                Mode::DropScriptOnce => &buf[..n],
                Mode::DelayScripts(d) | Mode::DelayAll(d)
                    if up && (mode == Mode::DelayAll(d) || runs_script(&buf[..n])) =>
                {
                    state.held.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(d);
                    &buf[..n]
                }
                Mode::DelayScripts(_) | Mode::DelayAll(_) => &buf[..n],
            };
            if up && self.forward_moved(out, state) {
                continue;
            }
            // Re-pointed before the reply is passed on: the client's next
            // request, sent as soon as it reads it, goes to the spare.
            {
                let mut repoint = state.repoint.lock();
                match *repoint {
                    Some((_, ref mut asked)) if up => *asked = true,
                    Some((spare, true)) => {
                        *repoint = None;
                        *state.moved_to.lock() = Some(spare);
                    }
                    _ => {}
                }
            }
            if to.write_all(out).is_err() {
                self.end(false);
                break;
            }
        }
    }

    /// Once re-pointed, sends `request` to the new server (connecting on
    /// the first) and relays its answer (what it sends until it has been
    /// quiet for a few polls); false when not re-pointed.
    fn forward_moved(&self, request: &[u8], state: &State) -> bool {
        let mut moved = self.moved.lock();
        if moved.is_none() {
            let Some(spare) = *state.moved_to.lock() else {
                return false;
            };
            match TcpStream::connect_timeout(&spare, Duration::from_secs(2)) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let _ = s.set_read_timeout(Some(POLL));
                    *moved = Some(s);
                }
                Err(_) => {
                    self.end(false);
                    return true;
                }
            }
        }
        let Some(server) = moved.as_mut() else {
            return false;
        };
        if server.write_all(request).is_err() {
            self.end(false);
            return true;
        }
        let mut buf = [0u8; 16 * 1024];
        let (mut got, mut quiet) = (false, 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while quiet < 5 && std::time::Instant::now() < deadline {
            match server.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    got = true;
                    quiet = 0;
                    if (&self.client).write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if got {
                        quiet += 1;
                    }
                }
                Err(_) => break,
            }
        }
        true
    }

    /// Ends the connection: with `rst`, the client gets a TCP reset.
    fn end(&self, rst: bool) {
        if !self.done.swap(true, Ordering::SeqCst) {
            if rst {
                reset(&self.client);
            } else {
                let _ = self.client.shutdown(std::net::Shutdown::Both);
            }
            let _ = self.server.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Whether a chunk of requests runs a script, `DELIFEQ` or `SET ...
/// IFEQ` (the commands that stand for scripts on Valkey).
fn runs_script(chunk: &[u8]) -> bool {
    [&b"EVAL"[..], b"DELIFEQ", b"IFEQ"]
        .iter()
        .any(|p| chunk.windows(p.len()).any(|w| w.eq_ignore_ascii_case(p)))
}

/// Makes the kernel answer with RST: linger 0, then shut the socket.
fn reset(stream: &TcpStream) {
    let sock = socket2::SockRef::from(stream);
    let _ = sock.set_linger(Some(Duration::ZERO));
    // Closing happens when the last handle drops; shutting down the read
    // side makes the peer's next send be answered with RST too.
    let _ = stream.shutdown(std::net::Shutdown::Read);
}
