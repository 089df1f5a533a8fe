//! The trial run of [`LockManager::check`](crate::LockManager::check):
//! each command the lock sends, run on scratch keys, its refusals grouped.

use super::*;
use crate::members::member::Verbs;
use crate::members::script::Lua;

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
type Command = (String, Vec<u8>, Stops);

/// Where a script of the trial runs: the scratch key its key roles are
/// named after, the token, and the milliseconds of its TTL and keep roles
/// (5 s to take, 6 s to renew: the extend and keep scripts raise an
/// expiry only where it is shorter, and a script's command it never
/// calls is never checked against the user's rules).
#[derive(Clone, Copy)]
struct Scratch<'a> {
    key: &'a [u8],
    token: &'a [u8],
    ms: &'static [u8],
    /// The announcement's command: `PUBLISH`, or `SPUBLISH` on a Redis
    /// Cluster's master (see `Verbs`).
    publish: &'static [u8],
}

impl<'a> Scratch<'a> {
    /// The scratch values of a take (5 s) and of a renewal (6 s) on
    /// `key` by `token`.
    fn take_and_renew(
        key: &'a [u8],
        token: &'a [u8],
        publish: &'static [u8],
    ) -> (Scratch<'a>, Scratch<'a>) {
        let take = Scratch {
            key,
            token,
            ms: b"5000",
            publish,
        };
        (
            take,
            Scratch {
                ms: b"6000",
                ..take
            },
        )
    }

    /// The value of a role word of a script's declaration (see
    /// `members::script::Takes`); `None` for a word the trial does not
    /// know (a test checks that the trial knows every word of the
    /// scripts it runs).
    fn value(&self, role: &str) -> Option<Vec<u8>> {
        let key = self.key;
        Some(match role {
            "key" => key.to_vec(),
            "fence" | "companion" => fence_key(key),
            "readers" => readers_key(key),
            "writer" => writer_key(key),
            "record" => record_key(key),
            "queue" => queue_key(key),
            "tickets" => tickets_key(key),
            "channel" => release_channel(key),
            "token" => self.token.to_vec(),
            "ttl" | "keep" | "ticket" => self.ms.to_vec(),
            "start" | "term" | "seq" | "arrival" => b"1".to_vec(),
            "to" => b"2".to_vec(),
            "publish" => self.publish.to_vec(),
            "message" | "value" => b"check".to_vec(),
            "address" | "where" => Vec::new(),
            "reserve" => b"1000".to_vec(),
            _ => return None,
        })
    }

    /// `lua`'s call on this scratch key, its `KEYS` and `ARGV` as its
    /// declaration says, role by role: every word it always takes, and
    /// those optional or repeated ones named in `with` (once each).
    fn call(&self, lua: &Lua, with: &[&str]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let values = |words: &[&str]| -> Vec<Vec<u8>> {
            words
                .iter()
                .filter(|w| {
                    let base = w.trim_end_matches(['?', '*']);
                    base.len() == w.len() || with.contains(&base)
                })
                .filter_map(|w| self.value(w.trim_end_matches(['?', '*'])))
                .collect()
        };
        let takes = lua.takes();
        (values(takes.keys), values(takes.args))
    }

    /// The trial's command for `lua` (see [`call`](Self::call)), by
    /// `EVAL`, named after the script.
    fn eval(&self, lua: &Lua, with: &[&str], stops: Stops) -> Command {
        self.named(format!("EVAL ({})", lua.name()), lua, with, stops)
    }

    /// As [`eval`](Self::eval), under another name.
    fn named(&self, name: String, lua: &Lua, with: &[&str], stops: Stops) -> Command {
        let (keys, args) = self.call(lua, with);
        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        (name, lua.eval(&keys, &args), stops)
    }
}

/// A plain command of the trial.
fn plain(name: &str, args: &[&[u8]], stops: Stops) -> Command {
    (name.to_owned(), pack(args), stops)
}

/// The lock's own commands on `key` (its acquisition, fencing counter,
/// extend, release and announcement). The acquisition's are plain
/// commands; each script's `KEYS` and `ARGV` come from its declaration.
fn lock_commands(
    key: &[u8],
    token: &[u8],
    publish: &'static [u8],
    fencing: bool,
    wakes: bool,
) -> Vec<Command> {
    let channel = release_channel(key);
    let (take, renew) = Scratch::take_and_renew(key, token, publish);
    let mut commands: Vec<Command> = vec![
        plain("SET", &[b"SET", key, token, b"NX", b"PX", b"5000"], LOCK),
        renew.eval(&EXTEND, &[], LOCK),
    ];
    if fencing {
        commands.push(renew.eval(&COUNT, &[], LOCK));
        commands.push(renew.eval(&RAISE, &["key", "fence"], LOCK));
        commands.push(renew.eval(&EXTEND, &["companion", "keep"], LOCK));
    }
    if wakes {
        let name = String::from_utf8_lossy(publish);
        commands.push(plain(&name, &[publish, &channel, b"check"], WAKING));
    }
    let (keys, args) = take.call(&UNLOCK, &[]);
    let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
    commands.push(("EVALSHA".into(), UNLOCK.evalsha(&keys, &args), LOCK));
    let announced = ["publish", "message", "channel"];
    commands.push(take.named("EVAL (unlock, announced)".into(), &UNLOCK, &announced, LOCK));
    commands
}

/// The other shapes' commands on `key`, free again: a set, a reader, an
/// election.
fn shape_commands(
    key: &[u8],
    token: &[u8],
    publish: &'static [u8],
    fencing: bool,
    commands: &mut Vec<Command>,
) {
    let fence = fence_key(key);
    let (take, renew) = Scratch::take_and_renew(key, token, publish);
    // The key is free again: a set of it, then a reader, each taken and
    // given back (every command inside their scripts runs).
    let counted: &[&str] = if fencing {
        &["key", "fence", "start", "keep"]
    } else {
        &["key"]
    };
    commands.push(take.eval(&LOCK_SET, counted, SETS));
    commands.push(take.eval(&UNLOCK_SET, &["key"], SETS));
    commands.push(take.eval(&READ, &[], READS));
    commands.push(renew.eval(&EXTEND_READ, &[], READS));
    commands.push(take.eval(&UNREAD, &[], READS));
    // An election on the free key: elected, claimed, renewed, read and
    // resigned (every command inside their scripts runs).
    commands.push(plain(
        "SET",
        &[b"SET", key, token, b"NX", b"PX", b"5000"],
        ELECTIONS,
    ));
    if !fencing {
        // The term counter (tried above with fencing on).
        commands.push(plain(
            "SET",
            &[b"SET", &fence, b"1", b"NX", b"PX", b"5000"],
            ELECTIONS,
        ));
        commands.push(plain("INCR", &[b"INCR", &fence], ELECTIONS));
    }
    commands.push(take.eval(&CLAIM, &[], ELECTIONS));
    commands.push(renew.eval(&EXTEND_LEADER, &[], ELECTIONS));
    commands.push(take.eval(&READ_LEADER, &[], ELECTIONS));
    commands.push(take.eval(&RESIGN, &[], ELECTIONS));
}

/// Runs each command the lock sends on the scratch key `key` and keys
/// derived from it (expiring in seconds, deleted at the end), noting
/// refusals: each distinct refusal once, naming the commands it stopped.
pub(super) fn trial(
    node: &Node,
    key: &[u8],
    cluster: bool,
    trying: Trying,
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
    // The announcement as this server takes it: SPUBLISH on a cluster.
    let publish = Verbs::of(cluster).publish;
    let mut commands = lock_commands(&key, token, publish, fencing, wakes);
    shape_commands(&key, token, publish, fencing, &mut commands);
    if fair {
        fair_trial(&key, publish, &mut commands);
    }
    // Failures grouped by what they say: (verdict, what it stops or the
    // cause) -> the commands, and the servers' words.
    let mut groups: Vec<(Verdict, String, Vec<&str>, Vec<String>)> = Vec::new();
    for (name, packed, then) in &commands {
        let name = &name[..];
        let e = match node.query(packed, deadline()) {
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
fn fair_trial(key: &[u8], publish: &'static [u8], commands: &mut Vec<Command>) {
    const FAIR: Stops = (
        Verdict::Warning,
        "a fair manager's waiters wait unfairly (Builder::fair)",
    );
    const RELEASE: Stops = (
        Verdict::Warning,
        "a fair manager's releases hand nothing on (Builder::fair)",
    );
    // A key of its own (in the same slot), which earlier trials refused
    // halfway cannot have left held.
    let key = &[key, b":fair"].concat()[..];
    let first = Scratch {
        key,
        token: b"redlock-check",
        ms: b"5000",
        publish,
    };
    let second = Scratch {
        token: b"redlock-check-2",
        ..first
    };
    let queues = ["queue", "tickets"];
    let locks = ["key", "queue", "tickets"];
    commands.push(first.eval(&JOIN, &queues, FAIR));
    commands.push(first.eval(&CLAIM_QUEUED, &locks, FAIR));
    commands.push(second.eval(&JOIN, &queues, FAIR));
    commands.push(first.eval(&HANDOFF, &locks, RELEASE));
    commands.push(second.eval(&LEAVE, &locks, FAIR));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fair::{CLAIM_QUEUED, HANDOFF, JOIN, LEAVE};

    /// Every role word of every script the trial runs has a scratch
    /// value, but for the optional ones it never passes: a script that
    /// takes a new role fails this until the trial knows it.
    #[test]
    fn the_trial_knows_every_role_its_scripts_take() {
        const UNTRIED: [&str; 2] = ["handed", "unused"];
        let scratch = Scratch {
            key: b"k",
            token: b"t",
            ms: b"5000",
            publish: b"PUBLISH",
        };
        let tried: [&Lua; 17] = [
            &EXTEND,
            &COUNT,
            &RAISE,
            &UNLOCK,
            &LOCK_SET,
            &UNLOCK_SET,
            &READ,
            &EXTEND_READ,
            &UNREAD,
            &CLAIM,
            &EXTEND_LEADER,
            &READ_LEADER,
            &RESIGN,
            &JOIN,
            &CLAIM_QUEUED,
            &HANDOFF,
            &LEAVE,
        ];
        for lua in tried {
            let takes = lua.takes();
            for word in takes.keys.iter().chain(takes.args) {
                let base = word.trim_end_matches(['?', '*']);
                assert!(
                    scratch.value(base).is_some() || UNTRIED.contains(&base),
                    "the trial has no value for {word:?} of the {} script",
                    lua.name()
                );
            }
        }
    }
}
