//! The uncontended cycle: against the rivals and the floors, over TLS,
//! with waking, and on a Redis Cluster member.

use crate::common::*;
use crate::redis_cluster;
#[cfg(feature = "tls")]
use crate::tls;

pub(crate) fn cycles(
    report: &mut Report,
    urls: &[String],
    network: &str,
    n: usize,
    with_rival: bool,
) {
    let key = format!("bench:{network}:{}", urls.len());
    let dlm = manager(urls);
    let plain = manager_with(urls, false);
    let plain_key = format!("{key}:nofence");
    let mut raw_seq = Raw::new(urls, &format!("{key}:seq"));
    let mut raw_mux = Raw::new(urls, &format!("{key}:mux"));
    let mut raw_same = Raw::same_as_default(urls, &format!("{key}:same"));
    let rival = redlock::RedLock::new(urls.to_vec());
    let mut ours = || dlm.lock(&key, TTL).unwrap().release().unwrap();
    let mut ours_plain = || plain.lock(&plain_key, TTL).unwrap().release().unwrap();
    let silent = manager_waking(urls, false, Duration::from_millis(200));
    let silent_key = format!("{key}:nowake");
    let mut ours_silent = || silent.lock(&silent_key, TTL).unwrap().release().unwrap();
    let mut seq = || raw_seq.sequential();
    let mut mux = || raw_mux.multiplexed();
    let mut same = || raw_same.multiplexed();
    let rival_key = format!("{key}:rival");
    let mut theirs = || {
        let lock = rival
            .lock(rival_key.as_bytes(), TTL.as_millis() as usize)
            .unwrap()
            .unwrap();
        rival.unlock(&lock);
    };
    let mut impls: Vec<(&str, &mut dyn FnMut())> = vec![
        ("redlock-sync", &mut ours),
        ("multiplexed floor", &mut mux),
        ("floor, same commands", &mut same),
        ("sequential floor", &mut seq),
        ("fencing off", &mut ours_plain),
        ("wake on release off", &mut ours_silent),
    ];
    if with_rival {
        impls.push(("redlock 2.0", &mut theirs));
    }
    let results = race(n, &mut impls);
    let floor = results[1].1.median;
    for (name, s) in &results {
        report.line(format!(
            "| {network:<9} | {:>5} | {name:<19} | {:>9.1} | {:>9.1} | {:>6.2} |",
            urls.len(),
            us(s.median),
            us(s.p99),
            s.median.as_secs_f64() / floor.as_secs_f64()
        ));
        report.record(format!(
            "{{\"kind\":\"cycle\",\"network\":\"{network}\",\"nodes\":{},\"impl\":\"{name}\",\
             \"median_us\":{:.1},\"p99_us\":{:.1},\"vs_multiplexed\":{:.3}}},",
            urls.len(),
            us(s.median),
            us(s.p99),
            s.median.as_secs_f64() / floor.as_secs_f64()
        ));
    }
    // The default cycle against the same commands written raw.
    let same = results[2].1.median.as_secs_f64();
    report.record(format!(
        "{{\"kind\":\"cycle_vs_same\",\"network\":\"{network}\",\"nodes\":{},\"ratio\":{:.3}}},",
        urls.len(),
        results[0].1.median.as_secs_f64() / same
    ));
    report.line(format!(
        "|           | {:>5} | default / same floor|           |           | {:>6.3} |",
        urls.len(),
        results[0].1.median.as_secs_f64() / same
    ));
}

/// The cycle over TLS beside the plain one, on the same servers (each has
/// a plain and a TLS port), pooled connections on both.
#[cfg(feature = "tls")]
pub(crate) fn tls_cycles(report: &mut Report, samples: usize) {
    report.line(String::new());
    report.line("TLS against plain TCP on the same loopback servers (lock+release cycle)".into());
    report.line(String::new());
    let certs = tls::Certs::make();
    let Some((cluster, ports)) = tls::tls_cluster(&certs, 5, false) else {
        report.line("skipped: this redis-server has no TLS".into());
        return;
    };
    report.line(
        "| nodes | plain median µs | TLS median µs | plain p99 µs | TLS p99 µs | TLS × plain |"
            .into(),
    );
    report.line(
        "|------:|----------------:|--------------:|-------------:|-----------:|------------:|"
            .into(),
    );
    for n in [3, 5] {
        let plain = manager(&cluster.urls()[..n]);
        let secure = LockManager::builder()
            .nodes(ports[..n].iter().map(|p| tls::tls_url(*p)))
            .node_timeout(Duration::from_millis(50))
            .tls_root_cert(certs.read("ca.pem"))
            .build()
            .unwrap();
        let key = format!("bench:tls:{n}");
        let mut p = || plain.lock(&key, TTL).unwrap().release().unwrap();
        let tls_key = format!("{key}:tls");
        let mut t = || secure.lock(&tls_key, TTL).unwrap().release().unwrap();
        let results = race(samples, &mut [("plain", &mut p), ("tls", &mut t)]);
        let (plain_s, tls_s) = (&results[0].1, &results[1].1);
        let ratio = tls_s.median.as_secs_f64() / plain_s.median.as_secs_f64();
        report.line(format!(
            "| {n:>5} | {:>15.1} | {:>13.1} | {:>12.1} | {:>10.1} | {ratio:>11.2} |",
            us(plain_s.median),
            us(tls_s.median),
            us(plain_s.p99),
            us(tls_s.p99)
        ));
        report.record(format!(",{{\"kind\":\"tls\",\"nodes\":{n},\"plain_median_us\":{:.1},\"tls_median_us\":{:.1},\"ratio\":{ratio:.3}}}",
            us(plain_s.median),
            us(tls_s.median)
        ));
    }
}

/// A lock cycle on a Redis Cluster member (3 masters) against one
/// standalone node, raced alone, with fencing on and off; and what
/// replica acknowledgements (`WAIT 1`) cost a master with one replica.
pub(crate) fn cluster_cost(report: &mut Report, node: &[String], n: usize) {
    report.line(String::new());
    if let Some(why) = redis_cluster::unsupported() {
        report.line(format!("Redis Cluster member: {why}"));
        return;
    }
    let cluster = redis_cluster::RedisCluster::start(3, 0).expect("a Redis Cluster");
    report.line(format!(
        "Redis Cluster member (3 masters) against one standalone node, uncontended cycle \
         ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| fencing | node median µs | cluster median µs | cluster × node |".into());
    report.line("|---------|---------------:|------------------:|---------------:|".into());
    for fencing in [true, false] {
        let on_node = LockManager::builder()
            .nodes(node)
            .fencing(fencing)
            .build()
            .unwrap();
        let on_cluster = LockManager::builder()
            .cluster(cluster.seeds())
            .fencing(fencing)
            .build()
            .unwrap();
        let mut plain = || {
            on_node
                .lock("bench:member", TTL)
                .unwrap()
                .release()
                .unwrap()
        };
        let mut whole = || {
            on_cluster
                .lock("bench:member", TTL)
                .unwrap()
                .release()
                .unwrap()
        };
        let results = race(n, &mut [("node", &mut plain), ("cluster", &mut whole)]);
        let (a, b) = (results[0].1.median, results[1].1.median);
        let ratio = b.as_secs_f64() / a.as_secs_f64();
        let on = if fencing { "on" } else { "off" };
        report.line(format!(
            "| {on:<7} | {:>14.1} | {:>17.1} | {ratio:>14.3} |",
            us(a),
            us(b)
        ));
        report.record(format!("{{\"kind\":\"cluster_cost\",\"fencing\":{fencing},\"node_us\":{:.1},\"cluster_us\":{:.1},\"ratio\":{ratio:.4}}},",
            us(a),
            us(b)
        ));
    }
    span_cost(report, &cluster, n / 20);
    drop(cluster);

    let master = server::Server::start().unwrap();
    let port = master.port().to_string();
    let replica = server::Server::start_with(&["--replicaof", "127.0.0.1", &port]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut admin(&replica))
            .unwrap();
        if info.contains("master_link_status:up") || Instant::now() > deadline {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    report.line(String::new());
    report.line(format!(
        "Replica acknowledgements (WAIT 1) on a master with one replica, uncontended cycle \
         ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| replica_acks | median µs | p99 µs | × none |".into());
    report.line("|-------------:|----------:|-------:|-------:|".into());
    let none = LockManager::builder().node(master.url()).build().unwrap();
    let one = LockManager::builder()
        .node(master.url())
        .replica_acks(1)
        .build()
        .unwrap();
    let mut without = || none.lock("bench:acks", TTL).unwrap().release().unwrap();
    let mut with = || one.lock("bench:acks", TTL).unwrap().release().unwrap();
    let results = race(n, &mut [("0", &mut without), ("1", &mut with)]);
    let base = results[0].1.median.as_secs_f64();
    for (name, stats) in &results {
        report.line(format!(
            "| {name:>12} | {:>9.1} | {:>6.1} | {:>6.3} |",
            us(stats.median),
            us(stats.p99),
            stats.median.as_secs_f64() / base
        ));
    }
}

/// A set of 300 resources spanning the cluster's slots (one script per
/// slot, each master's pipelined on one connection) against 300 sharing
/// one hash tag (one script), on the same cluster member.
pub(crate) fn span_cost(report: &mut Report, cluster: &redis_cluster::RedisCluster, n: usize) {
    let dlm = LockManager::builder()
        .cluster(cluster.seeds())
        .build()
        .unwrap();
    let spread: Vec<String> = (0..300).map(|i| format!("bench:span:{i}")).collect();
    let tagged: Vec<String> = (0..300).map(|i| format!("{{bench:tag}}:{i}")).collect();
    let mut one = || dlm.lock_all(&tagged, TTL).unwrap().release().unwrap();
    let mut many = || dlm.lock_all(&spread, TTL).unwrap().release().unwrap();
    let results = race(n, &mut [("one slot", &mut one), ("spanning", &mut many)]);
    let (a, b) = (results[0].1.median, results[1].1.median);
    let ratio = b.as_secs_f64() / a.as_secs_f64();
    report.line(String::new());
    report.line(format!(
        "A set of 300 on the cluster member: one hash tag against spanning the slots \
         ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| one slot median µs | spanning median µs | spanning × one slot |".into());
    report.line("|-------------------:|-------------------:|--------------------:|".into());
    report.line(format!(
        "| {:>18.1} | {:>18.1} | {ratio:>19.3} |",
        us(a),
        us(b)
    ));
    report.record(format!("{{\"kind\":\"span_cost\",\"one_slot_us\":{:.1},\"spanning_us\":{:.1},\"ratio\":{ratio:.4}}},",
        us(a),
        us(b)
    ));
}

/// What waking on release costs an uncontended cycle (one `PUBLISH` per
/// node behind the unlock): the default raced against
/// `wake_on_release(false)` alone, two implementations only, so that the
/// few percent are not lost in the noise of the full table.
pub(crate) fn wake_cost(report: &mut Report, urls: &[String], n: usize) {
    report.line(String::new());
    report.line(format!(
        "Waking on release against off, uncontended cycle ({n} cycles each, raced alone)"
    ));
    report.line(String::new());
    report.line("| network  | nodes | on median µs | off median µs | on × off |".into());
    report.line("|----------|------:|-------------:|--------------:|---------:|".into());
    for nodes in [3, 5] {
        let urls = &urls[..nodes];
        let on = manager_waking(urls, true, Duration::from_millis(200));
        let off = manager_waking(urls, false, Duration::from_millis(200));
        let mut with = || on.lock("bench:wake:on", TTL).unwrap().release().unwrap();
        let mut without = || off.lock("bench:wake:off", TTL).unwrap().release().unwrap();
        let results = race(n, &mut [("on", &mut with), ("off", &mut without)]);
        let (on, off) = (results[0].1.median, results[1].1.median);
        let ratio = on.as_secs_f64() / off.as_secs_f64();
        report.line(format!(
            "| loopback | {nodes:>5} | {:>12.1} | {:>13.1} | {ratio:>8.3} |",
            us(on),
            us(off)
        ));
        report.record(format!("{{\"kind\":\"wake_cost\",\"nodes\":{nodes},\"on_us\":{:.1},\"off_us\":{:.1},\"ratio\":{ratio:.4}}},",
            us(on),
            us(off)
        ));
    }
}
