//! The trial run of [`LockManager::check`](crate::LockManager::check):
//! each command the lock sends, run on scratch keys, its refusals grouped.

use super::*;

/// What a refusal stops, and how bad that is: the lock itself (unsafe),
/// or a feature (a warning).
type Stops = (Verdict, &'static str);
const LOCK: Stops = (Verdict::Unsafe, "the lock cannot work");
const WAKING: Stops = (Verdict::Warning, "waiters poll instead of being woken");
const SETS: Stops = (Verdict::Warning, "sets (lock_all) cannot work");
const READS: Stops = (Verdict::Warning, "read locks cannot work");
const ELECTIONS: Stops = (Verdict::Warning, "elections cannot work");

/// One command of the trial: its name, packed, and what its refusal
/// stops.
type Command = (&'static str, Vec<u8>, Stops);

/// The lock's own commands on `key` (its acquisition, fencing counter,
/// extend, release and announcement).
fn lock_commands(
    key: &[u8],
    token: &[u8],
    fencing: bool,
    wakes: bool,
    modern: bool,
) -> Vec<Command> {
    let fence = fence_key(key);
    let channel = release_channel(key);
    // The keys are set for 5 s and raised to 6 s: the extend and keep
    // scripts raise an expiry only where it is shorter, and a script's
    // command it never calls is never checked against the user's rules.
    let mut commands: Vec<Command> = vec![
        (
            "SET",
            pack(&[b"SET", key, token, b"NX", b"PX", b"5000"]),
            LOCK,
        ),
        (
            "EVAL (extend)",
            EXTEND.eval(&[key], &[token, b"6000"]),
            LOCK,
        ),
    ];
    if fencing {
        commands.push((
            "SET",
            pack(&[b"SET", &fence, b"1", b"NX", b"PX", b"5000"]),
            LOCK,
        ));
        commands.push(("INCR", pack(&[b"INCR", &fence]), LOCK));
        commands.push(if modern {
            (
                "PEXPIRE ... GT",
                pack(&[b"PEXPIRE", &fence, b"5000", b"GT"]),
                LOCK,
            )
        } else {
            ("EVAL (keep)", KEEP.eval(&[&fence], &[b"6000"]), LOCK)
        });
        commands.push((
            "EVAL (raise)",
            RAISE.eval(&[key, &fence], &[token, b"2", b"6000"]),
            LOCK,
        ));
        commands.push((
            "EVAL (extend)",
            EXTEND.eval(&[key, &fence], &[token, b"6000", b"6000"]),
            LOCK,
        ));
    }
    if wakes {
        commands.push(("PUBLISH", pack(&[b"PUBLISH", &channel, b"check"]), WAKING));
    }
    commands.push(("EVALSHA", UNLOCK.evalsha(&[key], &[token]), LOCK));
    commands.push((
        "EVAL (unlock, announced)",
        UNLOCK.eval(&[key], &[token, b"PUBLISH", b"check", &channel]),
        LOCK,
    ));
    commands
}

/// The other shapes' commands on `key`, free again: a set, a reader, an
/// election.
fn shape_commands(key: &[u8], token: &[u8], fencing: bool, commands: &mut Vec<Command>) {
    let fence = fence_key(key);
    // The key is free again: a set of it, then a reader, each taken and
    // given back (every command inside their scripts runs).
    let (set_keys, set_args): (Vec<&[u8]>, Vec<&[u8]>) = if fencing {
        (vec![&key, &fence], vec![token, b"5000", b"1", b"5000"])
    } else {
        (vec![&key], vec![token, b"5000"])
    };
    commands.push(("EVAL (lock-set)", LOCK_SET.eval(&set_keys, &set_args), SETS));
    commands.push(("EVAL (unlock-set)", UNLOCK_SET.eval(&[key], &[token]), SETS));
    let readers = readers_key(key);
    let flag = writer_key(key);
    commands.push((
        "EVAL (read)",
        READ.eval(&[key, &readers, &flag], &[token, b"5000", READERS_MARK]),
        READS,
    ));
    commands.push((
        "EVAL (extend-read)",
        EXTEND_READ.eval(&[key, &readers], &[token, b"6000", READERS_MARK]),
        READS,
    ));
    commands.push((
        "EVAL (unread)",
        UNREAD.eval(&[key, &readers], &[token, READERS_MARK]),
        READS,
    ));
    // An election on the free key: elected, claimed, renewed, read and
    // resigned (every command inside their scripts runs).
    let record = record_key(key);
    commands.push((
        "SET",
        pack(&[b"SET", key, token, b"NX", b"PX", b"5000"]),
        ELECTIONS,
    ));
    if !fencing {
        // The term counter (tried above with fencing on).
        commands.push((
            "SET",
            pack(&[b"SET", &fence, b"1", b"NX", b"PX", b"5000"]),
            ELECTIONS,
        ));
        commands.push(("INCR", pack(&[b"INCR", &fence]), ELECTIONS));
    }
    commands.push((
        "EVAL (claim)",
        CLAIM.eval(&[key, &record], &[token, b"1", b"1", b"check"]),
        ELECTIONS,
    ));
    commands.push((
        "EVAL (extend-leader)",
        EXTEND_LEADER.eval(&[key, &fence, &record], &[token, b"6000", b"6000"]),
        ELECTIONS,
    ));
    commands.push((
        "EVAL (read-leader)",
        READ_LEADER.eval(&[key, &record], &[]),
        ELECTIONS,
    ));
    commands.push((
        "EVAL (resign)",
        RESIGN.eval(&[key, &record], &[token]),
        ELECTIONS,
    ));
}

/// Runs each command the lock sends on the scratch key `key` and keys
/// derived from it (expiring in seconds, deleted at the end), noting
/// refusals: each distinct refusal once, naming the commands it stopped.
pub(super) fn trial(
    node: &Node,
    key: &[u8],
    trying: Trying,
    modern: bool,
    report: &mut NodeReport,
    deadline: impl Fn() -> Instant,
) {
    let Trying {
        fencing,
        wakes,
        fair,
    } = trying;
    let key = key.to_vec();
    let token = b"redlock-check";
    let mut commands = lock_commands(&key, token, fencing, wakes, modern);
    shape_commands(&key, token, fencing, &mut commands);
    if fair {
        fair_trial(&key, &mut commands);
    }
    // Failures grouped by what they say: (verdict, what it stops or the
    // cause) -> the commands, and the servers' words.
    let mut groups: Vec<(Verdict, String, Vec<&str>, Vec<String>)> = Vec::new();
    for (name, packed, then) in commands {
        let e = match node.query(&packed, deadline()) {
            Ok(_) => continue,
            // NOSCRIPT for the EVALSHA: the script cache is another matter.
            Err(e) if e.code() == Some("NOSCRIPT") => continue,
            Err(e) => e,
        };
        let problem = if e.kind() == NodeErrorKind::Permission {
            if !report.missing_permissions.iter().any(|m| m == name) {
                report.missing_permissions.push(name.to_owned());
            }
            (then.0, format!("refused: {}", then.1))
        } else {
            (Verdict::Warning, format!("failed: {}", e.short()))
        };
        group(&mut groups, problem, name, &e);
    }
    report_groups(groups, &key, report);
}

/// Reports each group of refusals: what it stops, the commands it
/// stopped and the servers' words.
fn report_groups(
    groups: Vec<(Verdict, String, Vec<&str>, Vec<String>)>,
    key: &[u8],
    report: &mut NodeReport,
) {
    for (verdict, text, names, words) in groups {
        let shown = match names.len() {
            0..=2 => names.join(", "),
            n => format!("{} and {} more", names[0], n - 1),
        };
        let key_refused = words.iter().any(|w| w.contains(" key"));
        let mut words = words.join("\n");
        if text.starts_with("refused") && key_refused {
            // Which key: an ACL that lets this user write only some keys
            // refuses a scratch key outside them (`check_resource` names one).
            words.push_str(&format!(
                "\n(tried on the key {:?}; LockManager::check_resource and lockrun --check NAME \
                 try keys named after a resource)",
                String::from_utf8_lossy(key)
            ));
        }
        if text.starts_with("refused") && text != "refused: the lock cannot work" {
            words.push_str("\n(the manual's Permissions section lists what each feature needs)");
        }
        report.problem_with(verdict, format!("{shown} {text}"), Some(words));
    }
}

/// A fair manager's queue beside the scratch `key`: a waiter joins and
/// claims it, a second joins, the first's release hands the key to the
/// second, which leaves (every command inside their scripts runs, and
/// everything is gone at the end). The queue's scripts refused, a fair
/// manager's waiters wait unfairly (a warning); the release refused (a key
/// pattern that misses the queue's keys, a command missing), its releases
/// go again as an unfair manager's, handing nothing on (a warning: the
/// lock still works).
fn fair_trial(key: &[u8], commands: &mut Vec<(&str, Vec<u8>, (Verdict, &'static str))>) {
    const FAIR: (Verdict, &str) = (
        Verdict::Warning,
        "a fair manager's waiters wait unfairly (Builder::fair)",
    );
    const RELEASE: (Verdict, &str) = (
        Verdict::Warning,
        "a fair manager's releases hand nothing on (Builder::fair)",
    );
    // A key of its own (in the same slot), which earlier trials refused
    // halfway cannot have left held.
    let key = &[key, b":fair"].concat()[..];
    let (queue, tickets) = (queue_key(key), tickets_key(key));
    let (first, second): (&[u8], &[u8]) = (b"redlock-check", b"redlock-check-2");
    let join = |token: &[u8]| JOIN.eval(&[&queue, &tickets], &[token, b"1", b"5000", b""]);
    let locks: [&[u8]; 3] = [key, &queue, &tickets];
    commands.push(("EVAL (join-queue)", join(first), FAIR));
    commands.push((
        "EVAL (claim-queued)",
        CLAIM_QUEUED.eval(&locks, &[first, b"5000", b"1", b"5000", b"", b""]),
        FAIR,
    ));
    commands.push(("EVAL (join-queue)", join(second), FAIR));
    commands.push((
        "EVAL (release)",
        HANDOFF.eval(&locks, &[first, b"1000"]),
        RELEASE,
    ));
    commands.push((
        "EVAL (leave-queue)",
        LEAVE.eval(&locks, &[second, b"1000"]),
        FAIR,
    ));
}

/// Adds a failed command to its group of like failures.
fn group<'a>(
    groups: &mut Vec<(Verdict, String, Vec<&'a str>, Vec<String>)>,
    (verdict, text): (Verdict, String),
    name: &'a str,
    e: &NodeError,
) {
    let at = match groups.iter().position(|g| g.0 == verdict && g.1 == text) {
        Some(at) => at,
        None => {
            groups.push((verdict, text, Vec::new(), Vec::new()));
            groups.len() - 1
        }
    };
    let group = &mut groups[at];
    if !group.2.contains(&name) {
        group.2.push(name);
    }
    let words = format!("{name}: {}", cause(e));
    if !group.3.contains(&words) {
        group.3.push(words);
    }
}

/// A node error's message without the node's name (the report names it).
pub(super) fn cause(e: &NodeError) -> String {
    let text = e.to_string();
    match text.strip_prefix(e.node()) {
        Some(rest) => rest.trim_start_matches(':').trim().to_owned(),
        None => text,
    }
}
