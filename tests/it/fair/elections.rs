//! Fair elections: candidates in arrival order, resignations handed on.

use super::*;

#[test]
fn candidates_of_separate_managers_are_elected_in_arrival_order() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-election");
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let lead = fair(nodes.urls())
        .election(&name)
        .unwrap()
        .campaign(TTL)
        .unwrap();
    let won = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..4 {
        let (dlm, won, mine) = (fair(nodes.urls()), won.clone(), name.clone());
        threads.push(thread::spawn(move || {
            let election = dlm.election(&mine).unwrap();
            let l = election
                .try_campaign_for(TTL, Duration::from_secs(30))
                .unwrap();
            won.lock().unwrap().push((i, l.term()));
            thread::sleep(Duration::from_millis(20));
            l.resign().unwrap();
        }));
        until_queued(&servers, &name, i + 1);
    }
    let first_term = lead.term();
    lead.resign().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let won = won.lock().unwrap().clone();
    let order: Vec<usize> = won.iter().map(|w| w.0).collect();
    assert_eq!(order, [0, 1, 2, 3], "elected out of arrival order");
    // Terms only grow, from the first leader's.
    let terms: Vec<u64> = won.iter().map(|w| w.1).collect();
    assert!(
        first_term < terms[0] && terms.is_sorted_by(|a, b| a < b),
        "{terms:?}"
    );
    for s in &nodes.servers {
        assert_eq!(queued(s, &name), 0);
        assert_eq!(beside(s, &name, "leader"), None, "a record is left");
    }
}

/// A fair leader resigns while a candidate that never claims (dead) is
/// queued: the leadership is handed to it. An observer of another
/// manager must still learn at once that the old leader is gone (before,
/// the hand-off was told to the candidate's manager only, and the
/// observer slept until its 10 s backstop).
#[test]
fn observers_learn_of_a_fair_resignation_handed_to_a_candidate() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-resign-observed");
    let election = fair(nodes.urls()).election(&name).unwrap();
    let lead = election.campaign(Duration::from_secs(30)).unwrap();
    a_dead_waiter_queued(&nodes, &name);
    let observer = fair(nodes.urls()).election(&name).unwrap();
    let seen = observer.leader().unwrap().expect("a leader");
    assert_eq!(seen.term(), lead.term());
    let watching = thread::spawn(move || {
        let changed = observer.wait_change(Some(&seen), Duration::from_secs(20));
        (changed, Instant::now())
    });
    // The observer listens before the resignation (its subscription is
    // confirmed once it reads again after the confirmation).
    thread::sleep(Duration::from_millis(300));
    let resigned = Instant::now();
    lead.resign().unwrap();
    assert_eq!(
        get(&nodes.servers[0], &name).as_deref(),
        Some(&b"redlock:next:dead"[..]),
        "the leadership was not handed to the queued candidate"
    );
    let (changed, at) = watching.join().unwrap();
    let changed = changed.unwrap();
    assert!(changed.is_none(), "{changed:?}");
    let took = at - resigned;
    assert!(
        took < Duration::from_secs(2),
        "the observer learned it after {took:?}"
    );
}
