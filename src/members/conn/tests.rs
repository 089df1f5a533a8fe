use super::*;

#[test]
fn pack_is_resp() {
    assert_eq!(
        pack(&[b"SET", b"k", b"", b"NX"]),
        b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$2\r\nNX\r\n"
    );
    // Parts are one command's arguments in turn, appended.
    let mut out = b"x".to_vec();
    let long = vec![b'v'; 1234];
    pack_into(&mut out, &[&[b"EVALSHA", b"f00"], &[], &[b"k", &long]]);
    let mut want = b"x*4\r\n$7\r\nEVALSHA\r\n$3\r\nf00\r\n$1\r\nk\r\n$1234\r\n".to_vec();
    want.extend_from_slice(&long);
    want.extend_from_slice(b"\r\n");
    assert_eq!(out, want);
    // The same bytes as redis-rs packs.
    let mut cmd = redis::cmd("SET");
    cmd.arg("key")
        .arg(&long[..10])
        .arg("PX")
        .arg(1_000_000_007u64);
    assert_eq!(
        pack(&[b"SET", b"key", &long[..10], b"PX", b"1000000007"]),
        cmd.get_packed_command()
    );
}

proptest::proptest! {
    /// Any arguments, however split into parts and whatever is in
    /// the buffer before: the bytes redis-rs packs, appended.
    #[test]
    fn packs_as_redis_rs_does(
        args in proptest::collection::vec(
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
            1..14,
        ),
        cut in 0usize..14,
        before in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
    ) {
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        let cut = cut.min(args.len());
        let mut out = before.clone();
        pack_into(&mut out, &[&args[..cut], &[], &args[cut..]]);
        let mut cmd = redis::Cmd::new();
        for arg in &args {
            cmd.arg(*arg);
        }
        let mut want = before;
        want.extend_from_slice(&cmd.get_packed_command());
        proptest::prop_assert_eq!(out, want);
    }
}

#[test]
fn lengths_have_their_digits() {
    for n in [
        0,
        9,
        10,
        99,
        100,
        999,
        1000,
        9999,
        10_000,
        123_456_789,
        usize::MAX,
    ] {
        let mut out = Vec::new();
        length(&mut out, b'$', n);
        assert_eq!(out, format!("${n}\r\n").as_bytes());
    }
}

fn resolver(addr: &ConnectionAddr) -> Resolver {
    let ConnectionAddr::Tcp(host, port) = addr else {
        unreachable!()
    };
    Resolver::new(
        host,
        *port,
        std::sync::Arc::new(crate::members::resolve::system),
    )
}

/// A peer that accepts and never answers (a silent socket, not Redis).
fn silent_peer() -> (std::net::TcpListener, ConnectionAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, ConnectionAddr::Tcp("127.0.0.1".into(), port))
}

#[test]
fn a_read_with_no_reply_times_out_at_the_deadline_not_before() {
    let (_listener, addr) = silent_peer();
    let timeout = Duration::from_millis(40);
    let resolver = resolver(&addr);
    let mut con = Conn::open(
        &addr,
        Some(&resolver),
        None,
        Instant::now() + timeout,
        timeout,
    )
    .unwrap();
    let start = Instant::now();
    let err = con.read(start + timeout).unwrap_err();
    let took = start.elapsed();
    assert!(err.is_timeout(), "{err:?}");
    assert!(took >= timeout, "{took:?}");
    // Generous: the bench measures the precision (about 0.2 ms).
    assert!(took < timeout + Duration::from_millis(500), "{took:?}");
    // Past the deadline: no wait at all.
    let start = Instant::now();
    assert!(con.read(start).unwrap_err().is_timeout());
    assert!(start.elapsed() < Duration::from_millis(500));
}

/// A Unix socket whose listener never accepts, its backlog filled:
/// `connect` would block for ever; it ends at the deadline.
#[cfg(unix)]
#[test]
fn a_unix_connect_to_a_full_backlog_ends_at_the_deadline() {
    let dir = std::env::temp_dir().join(format!("redlock-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("full.sock");
    let _ = std::fs::remove_file(&path);
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // Fill the backlog (128 or the system's somaxconn) without accepting.
    let mut held = Vec::new();
    let addr = ConnectionAddr::Unix(path.clone());
    let timeout = Duration::from_millis(50);
    let mut blocked = None;
    for _ in 0..10_000 {
        let start = Instant::now();
        match Conn::open(&addr, None, None, start + timeout, timeout) {
            Ok(con) => held.push(con),
            Err(e) => {
                blocked = Some((e, start.elapsed()));
                break;
            }
        }
    }
    let ((step, e), took) = blocked.expect("the backlog never filled");
    assert!(e.is_timeout() && step == CallStep::Connect, "{e}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
