use super::*;

/// A script to preload.
static SCRIPT: std::sync::LazyLock<Lua> = std::sync::LazyLock::new(|| {
    let takes = crate::members::script::Takes {
        keys: &[],
        args: &[],
    };
    Lua::new("test", "", "return 1", takes, &[])
});

fn setup() -> Setup {
    Setup {
        timeout: Duration::from_millis(50),
        max_idle: 1,
        resolve: Arc::new(crate::members::resolve::system),
        #[cfg(feature = "tls")]
        tls: Default::default(),
        restart: Default::default(),
        preload: Vec::new(),
    }
}

#[test]
fn names_carry_address_and_database_but_no_password() {
    let n = Node::open("redis://:pw@127.0.0.1:7000/3", &setup()).unwrap();
    assert_eq!(n.name(), "127.0.0.1:7000/3");
    let n = Node::open("redis://localhost:7001", &setup()).unwrap();
    assert_eq!(n.name(), "localhost:7001");
    let n = Node::open("unix:///tmp/r.sock", &setup()).unwrap();
    assert_eq!(n.name(), "unix:/tmp/r.sock");
    assert_eq!(n.idle_len(), 0);
}

#[test]
fn handshake_authenticates_and_selects() {
    let n = Node::open("redis://al:pw@127.0.0.1:7000/3", &setup()).unwrap();
    assert_eq!(
        n.handshake[0],
        b"*3\r\n$4\r\nAUTH\r\n$2\r\nal\r\n$2\r\npw\r\n"
    );
    assert_eq!(n.handshake[1], b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
    assert_eq!(n.required_names, ["AUTH", "SELECT"]);
    // AUTH, SELECT, INFO, 2 CONFIG GET, 2 CLIENT SETINFO (no script
    // to preload in this setup).
    assert_eq!(n.handshake.len(), 7);
    let preload = Setup {
        preload: vec![&*SCRIPT, &*SCRIPT],
        ..setup()
    };
    let n = Node::open("redis://al:pw@127.0.0.1:7000/3", &preload).unwrap();
    assert_eq!(n.handshake.len(), 9);
    assert!(n.handshake[5].starts_with(b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n"));
    let n = Node::open("redis://127.0.0.1:7000", &setup()).unwrap();
    assert!(n.required_names.is_empty());
    assert_eq!(n.handshake.len(), 5);
}
