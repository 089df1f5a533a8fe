//! One connection to a node: a TCP or Unix socket of our own, replies
//! parsed with the `redis` crate's parser, and every wait bounded by a
//! deadline.
//!
//! Owning the socket lets a round read a reply that is already buffered
//! without waiting at all once its deadline has passed (a non-blocking
//! read), which `redis::Connection` cannot do: a hung node read first must
//! not make replies that came in time look late, nor let late ones in.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, RedisError, RedisResult, Value};

/// Socket timeouts are lowered to what is left of a deadline only when
/// they exceed it by more than this; spares system calls on the common
/// path.
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

enum Stream {
    Tcp(TcpStream),
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
            #[cfg(unix)]
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
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
    parser: redis::Parser,
    /// The read and write timeout currently set on the socket.
    timeout: Duration,
}

impl Conn {
    /// Connects to `addr` by `deadline`.
    pub(crate) fn open(addr: &ConnectionAddr, deadline: Instant) -> RedisResult<Conn> {
        let stream = match addr {
            ConnectionAddr::Tcp(host, port) => {
                let mut last = None;
                let mut stream = None;
                for sa in (host.as_str(), *port).to_socket_addrs()? {
                    let left = left(deadline).ok_or_else(timed_out)?;
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
                    (None, Some(e)) => return Err(e.into()),
                    (None, None) => {
                        return Err(io::Error::new(
                            io::ErrorKind::NotFound,
                            format!("{host} has no address"),
                        )
                        .into());
                    }
                };
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
            _ => {
                return Err(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "address type not supported",
                )));
            }
        };
        Ok(Conn {
            stream,
            parser: redis::Parser::new(),
            timeout: Duration::MAX,
        })
    }

    /// Sets the socket timeouts to `timeout` if they are not already.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        if self.timeout != timeout {
            self.stream.set_timeouts(timeout)?;
            self.timeout = timeout;
        }
        Ok(())
    }

    /// Lowers the socket timeouts to what is left until `deadline`.
    fn by(&mut self, deadline: Instant) -> RedisResult<()> {
        let left = left(deadline).ok_or_else(timed_out)?;
        if self.timeout > left + TIMEOUT_SLACK {
            self.stream.set_timeouts(left)?;
            self.timeout = left;
        }
        Ok(())
    }

    /// Writes a packed command by `deadline`.
    pub(crate) fn write(&mut self, packed: &[u8], deadline: Instant) -> RedisResult<()> {
        self.by(deadline)?;
        Ok(self.stream.write_all(packed)?)
    }

    /// Writes a packed command within the socket's current timeout.
    pub(crate) fn write_now(&mut self, packed: &[u8]) -> RedisResult<()> {
        Ok(self.stream.write_all(packed)?)
    }

    /// Reads one reply by `deadline`; an error reply becomes an error.
    /// Past the deadline, takes only a reply already received, without
    /// waiting.
    pub(crate) fn read(&mut self, deadline: Instant) -> RedisResult<Value> {
        let value = if left(deadline).is_some() {
            self.by(deadline)?;
            self.parser.parse_value(&mut self.stream)?
        } else {
            self.stream.set_nonblocking(true)?;
            let value = self.parser.parse_value(&mut self.stream);
            self.stream.set_nonblocking(false)?;
            value?
        };
        value.extract_error()
    }
}

/// What is left until `deadline`, if anything.
fn left(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

pub(crate) fn timed_out() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::TimedOut,
        "node timeout elapsed",
    ))
}
