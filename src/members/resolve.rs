//! Name resolution bounded by a deadline.
//!
//! The system resolver (`getaddrinfo`, through std's `ToSocketAddrs`)
//! cannot be interrupted and may take as long as it likes, so it runs on a
//! helper thread and the caller waits at most until its deadline. Callers
//! that need the same node's address while a resolution is under way wait
//! for that one instead of starting another, so a hung resolver costs one
//! thread per node, not one per call. Nothing is cached: every new
//! connection resolves again (an answer that came after its caller gave
//! up is not handed to the next caller, which asks anew), so a name that
//! moves to another address (a failover) is followed. A Sentinel group's
//! resolution begun before the group's last switch is not shared either
//! (see [`Resolver::following`]). IP addresses are used as they are.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// A resolver: host and port to addresses.
pub(crate) type ResolveFn = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// The system resolver.
pub(crate) fn system(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

/// `host` as an IP address (IPv6 with or without brackets), if it is one:
/// used as it is, never resolved.
pub(crate) fn literal(host: &str, port: u16) -> Option<SocketAddr> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, port))
}

/// A resolution's outcome, shareable between waiters (`io::Error` is not
/// `Clone`).
type Outcome = Result<Vec<SocketAddr>, (io::ErrorKind, String)>;

/// A resolution under way, and its outcome once done.
#[derive(Default)]
struct Pending {
    outcome: Mutex<Option<Outcome>>,
    done: Condvar,
    /// The switches counted when it began (see [`Resolver::following`]).
    switches: u64,
}

/// One node's host name and the resolution under way for it, if any.
pub(crate) struct Resolver {
    host: String,
    port: u16,
    resolve: Arc<ResolveFn>,
    pending: Mutex<Option<Arc<Pending>>>,
    /// A Sentinel group's switches (see [`following`](Self::following)).
    switches: Option<Arc<AtomicU64>>,
}

impl Resolver {
    pub(crate) fn new(host: &str, port: u16, resolve: Arc<ResolveFn>) -> Resolver {
        Resolver {
            host: host.to_owned(),
            port,
            resolve,
            pending: Mutex::new(None),
            switches: None,
        }
    }

    /// A resolver that shares no resolution begun before the last of
    /// `switches` (a Sentinel group's failovers as announced): one begun
    /// before may name the old master.
    pub(crate) fn following(self, switches: Arc<AtomicU64>) -> Resolver {
        Resolver {
            switches: Some(switches),
            ..self
        }
    }

    /// The node's addresses, by `deadline`.
    ///
    /// # Errors
    ///
    /// The resolver's error, or `TimedOut` when it has not answered by
    /// `deadline` (it goes on in the background, and the next call waits
    /// for the same answer).
    pub(crate) fn resolve(&self, deadline: Instant) -> io::Result<Vec<SocketAddr>> {
        if let Some(addr) = literal(&self.host, self.port) {
            return Ok(vec![addr]);
        }
        let switches = self
            .switches
            .as_ref()
            .map_or(0, |s| s.load(Ordering::Relaxed));
        let pending = {
            let mut slot = self.pending.lock();
            // Under way, of the same switch: shared. Done already (its
            // caller gave up before it came), or begun before a switch:
            // asked anew.
            let current = slot
                .as_ref()
                .filter(|p| p.switches == switches && p.outcome.lock().is_none());
            match current {
                Some(pending) => pending.clone(),
                None => {
                    let pending = Arc::new(Pending {
                        switches,
                        ..Pending::default()
                    });
                    let (task, resolve) = (pending.clone(), self.resolve.clone());
                    let (host, port) = (self.host.clone(), self.port);
                    thread::Builder::new()
                        .name("redlock-resolve".into())
                        .spawn(move || {
                            let outcome =
                                resolve(&host, port).map_err(|e| (e.kind(), e.to_string()));
                            *task.outcome.lock() = Some(outcome);
                            task.done.notify_all();
                        })?;
                    *slot = Some(pending.clone());
                    pending
                }
            }
        };
        let mut outcome = pending.outcome.lock();
        while outcome.is_none() {
            if pending.done.wait_until(&mut outcome, deadline).timed_out() {
                break;
            }
        }
        let Some(result) = outcome.clone() else {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("resolving {} took longer than the node timeout", self.host),
            ));
        };
        drop(outcome);
        // Done: the next connection resolves anew.
        let mut slot = self.pending.lock();
        if slot.as_ref().is_some_and(|p| Arc::ptr_eq(p, &pending)) {
            *slot = None;
        }
        result.map_err(|(kind, text)| io::Error::new(kind, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn a_slow_resolver_costs_the_deadline_and_is_shared_while_under_way() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let slow: Arc<ResolveFn> = Arc::new(move |_: &str, port: u16| {
            counted.fetch_add(1, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(300));
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
        });
        let r = Resolver::new("slow.test", 7000, slow);
        let start = Instant::now();
        let err = r.resolve(start + Duration::from_millis(50)).unwrap_err();
        let took = start.elapsed();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(took >= Duration::from_millis(50), "{took:?}");
        assert!(took < Duration::from_millis(250), "{took:?}");
        // A second call joins the resolution under way, and gets its answer.
        let addrs = r.resolve(Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(addrs, [SocketAddr::from(([127, 0, 0, 1], 7000))]);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Done: the next call resolves again.
        r.resolve(Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_answer_late_for_its_caller_or_older_than_a_switch_is_not_handed_on() {
        // Each call answers a port one higher: which call answered shows.
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let slow: Arc<ResolveFn> = Arc::new(move |_: &str, _: u16| {
            let n = counted.fetch_add(1, Ordering::SeqCst) as u16;
            thread::sleep(Duration::from_millis(100));
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], 7000 + n))])
        });
        let port =
            |r: &Resolver| r.resolve(Instant::now() + Duration::from_secs(5)).unwrap()[0].port();
        let r = Resolver::new("late.test", 1, slow.clone());
        assert!(
            r.resolve(Instant::now() + Duration::from_millis(10))
                .is_err()
        );
        thread::sleep(Duration::from_millis(300));
        // The first answer came after its caller left: asked anew.
        assert_eq!(port(&r), 7001);
        // Begun before a switch: not shared after it.
        let switches = Arc::new(AtomicU64::new(0));
        let r = Resolver::new("group.test", 1, slow).following(switches.clone());
        assert!(
            r.resolve(Instant::now() + Duration::from_millis(10))
                .is_err()
        );
        switches.fetch_add(1, Ordering::Relaxed);
        assert_eq!(port(&r), 7003);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn ip_addresses_are_not_resolved() {
        let never: Arc<ResolveFn> = Arc::new(|_: &str, _| panic!("asked to resolve an IP"));
        let r = Resolver::new("[::1]", 7000, never.clone());
        assert_eq!(
            r.resolve(Instant::now()).unwrap(),
            [SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 7000))]
        );
        let r = Resolver::new("127.0.0.1", 7000, never);
        assert_eq!(r.resolve(Instant::now()).unwrap().len(), 1);
    }

    #[test]
    fn resolver_errors_are_returned() {
        let failing: Arc<ResolveFn> =
            Arc::new(|_: &str, _| Err(io::Error::new(io::ErrorKind::NotFound, "no such host")));
        let r = Resolver::new("nowhere.test", 1, failing);
        let err = r
            .resolve(Instant::now() + Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("no such host"));
    }
}
