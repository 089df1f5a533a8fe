//! A hostile peer: a TCP server on a free loopback port that answers
//! every connection with bytes no Redis server sends, for the reader's
//! caps and the node timeout. Each connection gets its own thread; the
//! server stops (and closes every connection) when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// What the peer answers after reading the first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostility {
    /// Two million nested one-element arrays (`*1` lines).
    DeepNesting,
    /// `*2147483647`, then `:1` lines for as long as the client reads.
    AbsurdArray,
    /// `$` with a length of 100 GB.
    AbsurdBulk,
    /// `+` and then bytes without a line end, for as long as the client
    /// reads.
    EndlessLine,
    /// A byte of `+OK…` every 10 ms, never a line end.
    SlowDrip,
    /// Accepts, reads, says nothing.
    Silence,
    /// An HTTP answer, then closes.
    OtherProtocol,
    /// An empty line (`\r\n`).
    EmptyLine,
    /// Well-formed replies of the wrong shape to everything.
    WrongShape,
}

/// Every hostility, for tests that try each.
pub const ALL: [Hostility; 9] = [
    Hostility::DeepNesting,
    Hostility::AbsurdArray,
    Hostility::AbsurdBulk,
    Hostility::EndlessLine,
    Hostility::SlowDrip,
    Hostility::Silence,
    Hostility::OtherProtocol,
    Hostility::EmptyLine,
    Hostility::WrongShape,
];

pub struct HostilePeer {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Bytes sent, over every connection.
    sent: Arc<AtomicU64>,
}

impl HostilePeer {
    pub fn start(hostility: Hostility) -> HostilePeer {
        let listener = super::server::claimed_listener().unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (stopped, counted) = (stop.clone(), sent.clone());
        thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (stopped, counted) = (stopped.clone(), counted.clone());
                        thread::spawn(move || serve(stream, hostility, &stopped, &counted));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        HostilePeer { port, stop, sent }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn name(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Bytes sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }
}

impl Drop for HostilePeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(mut s: TcpStream, hostility: Hostility, stop: &AtomicBool, sent: &AtomicU64) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let mut request = [0u8; 4096];
    if !matches!(s.read(&mut request), Ok(n) if n > 0) {
        return;
    }
    let Ok(mut writer) = s.try_clone() else {
        return;
    };
    let mut send = |bytes: &[u8]| -> bool {
        let ok = writer.write_all(bytes).is_ok();
        if ok {
            sent.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        }
        ok && !stop.load(Ordering::SeqCst)
    };
    // Streams end after 30 s at most, or when the client goes away.
    let until = Instant::now() + Duration::from_secs(30);
    match hostility {
        Hostility::DeepNesting => {
            let chunk = b"*1\r\n".repeat(16_384);
            for _ in 0..(2_000_000 / 16_384 + 1) {
                if !send(&chunk) {
                    return;
                }
            }
        }
        Hostility::AbsurdArray => {
            let ones = b":1\r\n".repeat(16_384);
            if send(b"*2147483647\r\n") {
                while Instant::now() < until && send(&ones) {}
            }
        }
        Hostility::AbsurdBulk => {
            send(b"$100000000000\r\n");
        }
        Hostility::EndlessLine => {
            let bytes = vec![b'a'; 16_384];
            if send(b"+") {
                while Instant::now() < until && send(&bytes) {}
            }
        }
        Hostility::SlowDrip => {
            let mut first = true;
            while Instant::now() < until {
                if !send(if first { b"+" } else { b"O" }) {
                    return;
                }
                first = false;
                thread::sleep(Duration::from_millis(10));
            }
        }
        Hostility::Silence => {}
        Hostility::OtherProtocol => {
            send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            return;
        }
        Hostility::EmptyLine => {
            send(b"\r\n");
        }
        Hostility::WrongShape => {
            // Every command read gets a nested array, well-formed.
            let mut buf = [0u8; 4096];
            while Instant::now() < until && send(b"*2\r\n*1\r\n:7\r\n$1\r\nx\r\n") {
                if !matches!(s.read(&mut buf), Ok(n) if n > 0) {
                    break;
                }
            }
            return;
        }
    }
    // Keep the connection open (silent) until the client closes it.
    let mut buf = [0u8; 4096];
    while Instant::now() < until && !stop.load(Ordering::SeqCst) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return,
        }
    }
}
