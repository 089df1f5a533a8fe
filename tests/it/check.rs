//! `LockManager::check`: a typed report per server with a verdict, and
//! what to change, against servers set up the ways that break locks.

use crate::support;

use std::time::Duration;

use redlock_sync::{LockManager, Verdict};
use support::{Nodes, Server, admin};

fn manager(urls: Vec<String>) -> LockManager {
    support::manager_over(urls, Duration::from_millis(500))
}

#[test]
fn each_server_gets_a_verdict_and_what_to_change() {
    let durable = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let plain = Server::start().unwrap();
    let lru =
        Server::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]).unwrap();
    let volatile =
        Server::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"])
            .unwrap();
    let master_port = plain.port().to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &master_port]).unwrap();
    let mut dead = Server::start().unwrap();
    dead.kill();
    let everysec =
        Server::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]).unwrap();
    let servers = [
        &durable, &plain, &lru, &volatile, &replica, &dead, &everysec,
    ];
    let dlm = manager(servers.iter().map(|s| s.url()).collect());
    let reports = dlm.check_resource("lock:check");
    assert_eq!(reports.len(), servers.len());
    for r in &reports {
        eprintln!("{r}");
    }
    let [durable, plain, lru, volatile, replica, dead, everysec] = &reports[..] else {
        unreachable!()
    };

    assert_eq!(durable.verdict, Verdict::Ok, "{durable}");
    assert!(durable.reachable && durable.latency.is_some());
    assert!(
        durable.server.as_deref().is_some_and(|s| s.contains('.')),
        "{durable}"
    );
    assert_eq!(durable.role.as_deref(), Some("master"));
    assert_eq!(durable.appendfsync.as_deref(), Some("always"));
    assert!(durable.missing_permissions.is_empty());
    assert_eq!(durable.cluster_enabled, Some(false));

    assert_eq!(plain.verdict, Verdict::Warning, "{plain}");
    assert!(plain.to_string().contains("no persistence"), "{plain}");

    assert_eq!(lru.verdict, Verdict::Unsafe, "{lru}");
    assert!(
        lru.to_string()
            .contains("maxmemory-policy allkeys-lru may evict lock keys: set noeviction"),
        "{lru}"
    );
    assert_eq!(lru.maxmemory, Some(100 * 1024 * 1024));
    assert_eq!(volatile.verdict, Verdict::Unsafe, "{volatile}");
    assert!(
        volatile
            .to_string()
            .contains("evicts keys with a TTL first"),
        "{volatile}"
    );

    assert_eq!(replica.verdict, Verdict::Unsafe, "{replica}");
    assert_eq!(replica.role.as_deref(), Some("slave"));
    assert!(replica.to_string().contains("a replica"), "{replica}");
    // One line of about 200 characters at most per server, each problem
    // once (a replica's line repeated READONLY for every trial command).
    for r in &reports {
        assert!(
            r.to_string().len() <= 200,
            "{} characters: {r}",
            r.to_string().len()
        );
    }
    assert_eq!(replica.problems.len(), 2, "{replica:#}");

    assert_eq!(dead.verdict, Verdict::Unsafe, "{dead}");
    assert!(!dead.reachable);
    assert!(
        dead.to_string().contains("unreachable: connection refused"),
        "{dead}"
    );

    assert_eq!(everysec.verdict, Verdict::Warning, "{everysec}");
    assert!(
        everysec.to_string().contains("appendfsync everysec"),
        "{everysec}"
    );
    // The trial left nothing behind but keys that expire.
    assert_eq!(support::get(servers[1], b"lock:check:redlock-check"), None);
}

fn acl_user(server: &Server, name: &str, rule: &str) {
    let mut c = redis::cmd("ACL");
    c.arg("SETUSER").arg(name);
    for part in rule.split_whitespace() {
        c.arg(part);
    }
    let _: () = c.query(&mut admin(server)).unwrap();
}

#[test]
fn an_acl_user_without_info_or_a_lock_command_is_reported() {
    let cluster = Nodes::start(2).unwrap();
    let base = "on >pw resetkeys ~lock:* resetchannels &lock:* -@all +set +pexpire +eval \
                +evalsha +get +mget +del +pttl +script|load +publish +subscribe +unsubscribe \
                +ping";
    let reads = "+time +zadd +zrem +zscore +zrange +zremrangebyscore";
    let elections = "+hset +hget +hmget";
    // Without +info (restart detection off) and the read locks' and
    // elections' commands, but every lock command.
    acl_user(&cluster.servers[0], "locker", base);
    // Without +pttl: fencing cannot count (the count script raises the
    // counter's expiry, never lowers it).
    acl_user(
        &cluster.servers[1],
        "locker",
        &format!("{} {reads} {elections}", base.replace(" +pttl", "")),
    );
    let urls = cluster
        .servers
        .iter()
        .map(|s| format!("redis://locker:pw@127.0.0.1:{}", s.port()))
        .collect();
    let dlm = manager(urls);
    let reports = dlm.check_resource("lock:check");
    for r in &reports {
        eprintln!("{r}");
    }
    assert_eq!(reports[0].verdict, Verdict::Warning, "{}", reports[0]);
    assert!(
        reports[0].to_string().contains("INFO refused"),
        "{}",
        reports[0]
    );
    assert!(reports[0].to_string().contains("+info"), "{}", reports[0]);
    assert_eq!(
        reports[0].missing_permissions,
        [
            "EVAL (read)",
            "EVAL (extend-read)",
            "EVAL (unread)",
            "EVAL (claim)",
            "EVAL (extend-leader)",
            "EVAL (read-leader)",
            "EVAL (resign)",
            "EVAL (join-queue)",
            "EVAL (claim-queued)",
            "EVAL (leave-queue)"
        ],
        "{}",
        reports[0]
    );
    // The line counts what does not fit; -v (the alternate form) says it.
    for what in ["read locks", "elections", "wait unfairly"] {
        assert!(
            format!("{:#}", reports[0]).contains(what),
            "{:#}",
            reports[0]
        );
    }
    assert_eq!(reports[1].verdict, Verdict::Unsafe, "{}", reports[1]);
    // Fair waiting (on by default) needs +hdel as well.
    assert_eq!(
        reports[1].missing_permissions,
        [
            "EVAL (extend)",
            "EVAL (count)",
            "EVAL (lock-set)",
            "EVAL (extend-read)",
            "EVAL (claim)",
            "EVAL (extend-leader)",
            "EVAL (read-leader)",
            "EVAL (join-queue)",
            "EVAL (claim-queued)",
            "EVAL (release)",
            "EVAL (leave-queue)"
        ],
        "{}",
        reports[1]
    );
    assert!(
        reports[1]
            .to_string()
            .contains("EVAL (extend), EVAL (count) refused: the lock cannot work"),
        "{}",
        reports[1]
    );
    // The server's words, with -v (the alternate form).
    assert!(
        format!("{:#}", reports[1]).contains("EVAL (count): permission denied"),
        "{:#}",
        reports[1]
    );
    // A user without +info still locks (restart detection is off for it).
    let one = manager(vec![format!(
        "redis://locker:pw@127.0.0.1:{}",
        cluster.servers[0].port()
    )]);
    one.lock("lock:no-info", Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn a_server_kept_out_after_a_restart_says_for_how_long() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(cluster.urls());
    dlm.lock("lock:seen", Duration::from_secs(30))
        .unwrap()
        .release()
        .unwrap();
    cluster.servers[1].restart().unwrap();
    let reports = dlm.check_resource("lock:check");
    let q = reports[1]
        .quarantine
        .as_deref()
        .unwrap_or_else(|| panic!("{}", reports[1]));
    assert!(q.contains("not voting for"), "{q}");
    assert!(reports[0].quarantine.is_none());
}

/// Issue 43: the report says which forms of the lock's commands each
/// server gets (and `{:#}` prints it): `DELIFEQ` releases on Valkey 9,
/// `DELEX ... IFEQ` on Redis 8.4, the script elsewhere; extends by script
/// everywhere (one that never lowers the expiry); `NX GET` from Redis 7.0.
#[test]
fn the_report_says_which_commands_a_server_gets() {
    let cluster = Nodes::start(1).unwrap();
    let dlm = manager(cluster.urls());
    let reports = dlm.check_resource("lock:check");
    let path = reports[0].path.clone().expect("asked");
    assert!(path.contains("extend by script"), "{path}");
    let plain = support::server::plain_delete();
    let says = |form: &str| path.contains(&format!("release by {form} (no script)"));
    assert_eq!(says("DELIFEQ"), plain == Some("delifeq"), "{path}");
    assert_eq!(says("DELEX ... IFEQ"), plain == Some("delex"), "{path}");
    assert_eq!(
        path.contains("release by script"),
        plain.is_none(),
        "{path}"
    );
    assert_eq!(
        path.contains("SET NX GET"),
        support::server::server_at_least(7, 0),
        "{path}"
    );
    assert!(format!("{:#}", reports[0]).contains(&format!("commands: {path}")));
}

/// Issue 56: a server reached through something that forwards (its
/// name's port is not the one it listens on) is warned of: a live
/// connection re-pointed to another server is not noticed, and the new
/// server is taken for the one that voted. A server reached directly is
/// not.
#[test]
fn a_server_behind_a_forwarder_is_warned_of() {
    let cluster = Nodes::start(2).unwrap();
    let forwarder = support::proxy::Proxy::start(cluster.servers[1].addr()).unwrap();
    let dlm = manager(vec![cluster.servers[0].url(), forwarder.url()]);
    let reports = dlm.check_resource("lock:check");
    let warned = |r: &redlock_sync::NodeReport| {
        r.problems.iter().any(|p| {
            p.text.contains("reached through a forwarder") && p.text.contains("replica_acks")
        })
    };
    assert!(!warned(&reports[0]), "{}", reports[0]);
    assert!(warned(&reports[1]), "{}", reports[1]);
    assert_eq!(reports[1].verdict, Verdict::Warning, "{}", reports[1]);
}
