//! `lockrun`'s command line: the options, `REDLOCK_NODES`, durations.

use std::process::ExitCode;
use std::time::Duration;

use crate::{ERROR, INFO, WARN};

/// `lockrun --help`: the command's manual.
const HELP: &str = include_str!("../lockrun-help.txt");

/// One quorum member from the command line or `REDLOCK_NODES`.
#[derive(Debug, PartialEq)]
pub(crate) enum MemberArg {
    Node(String),
    Cluster(Vec<String>),
}

pub(crate) struct Args {
    pub(crate) members: Vec<MemberArg>,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) fencing: bool,
    /// Waiters queue across hosts (`Builder::fair`); `--no-fair` turns
    /// it off (`--fair`, the default, is accepted).
    pub(crate) fair: bool,
    pub(crate) restart_quarantine: Option<Duration>,
    pub(crate) permits: Option<u32>,
    pub(crate) shared: bool,
    pub(crate) check: bool,
    /// `--min-hold`: the release leaves the keys until this long after
    /// the acquisition.
    pub(crate) min_hold: Option<Duration>,
    /// `--kill-after`: how long COMMAND gets between SIGTERM and SIGKILL
    /// when it must end (see `ending` in lockrun.rs); `None`: the default
    /// for the TTL ([`Args::kill_after`]).
    pub(crate) kill_after: Option<Duration>,
    /// The exit status when the lock is taken (`--conflict-exit-code`,
    /// like flock's `-E`).
    pub(crate) conflict_exit: u8,
    /// `--wait` was given (`--leader` waits without limit otherwise).
    pub(crate) wait_given: bool,
    /// `--leader`: run COMMAND while leader of RESOURCE.
    pub(crate) leader: bool,
    /// `--leader-value`: what the leader proclaims.
    pub(crate) leader_value: Option<String>,
    /// `--leader-of`: say who leads RESOURCE.
    pub(crate) leader_of: bool,
    /// `--inspect`: say who holds RESOURCE, member by member.
    pub(crate) inspect: bool,
    /// `--force-unlock`: remove the lock on RESOURCE, whoever holds it.
    pub(crate) force_unlock: bool,
    pub(crate) tls_ca: Option<String>,
    pub(crate) tls_cert: Option<String>,
    pub(crate) tls_key: Option<String>,
    /// The resources, for messages: `"a"`, or `"a", "b"`.
    pub(crate) resource: String,
    pub(crate) resources: Vec<String>,
    pub(crate) command: Vec<std::ffi::OsString>,
    /// `-q` ([`ERROR`]), `-v` ([`INFO`]), or neither ([`WARN`]).
    pub(crate) verbosity: u8,
}

/// See [`Args::kill_margin`].
fn kill_margin(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// How low a kept-alive lock's validity goes while one member takes the
/// whole node timeout `nt` and a majority answers: renewals are due TTL/3
/// after the last began, or while two node timeouts and the drift (at
/// most TTL/50) are left, but at least TTL/12 after the last began, and
/// not before it ended (see the keep-alive in `guard.rs`); the validity,
/// counted from a round's start, is lowest when the next round ends.
pub(crate) fn healthy_dip(ttl: Duration, nt: Duration) -> Duration {
    let drift = ttl / 50;
    let due = (ttl / 3).min(ttl.saturating_sub(2 * nt + drift));
    let next = due.max(ttl / 12).max(nt);
    ttl.saturating_sub(drift + next + nt)
}

impl Args {
    /// How long COMMAND gets between SIGTERM and SIGKILL: `--kill-after`,
    /// or a quarter of the TTL, at most 10 s.
    pub(crate) fn kill_after(&self) -> Duration {
        self.kill_after
            .unwrap_or_else(|| (self.ttl / 4).min(Duration::from_secs(10)))
    }

    /// How long before the end of the lock's validity COMMAND is killed at
    /// the latest: a twentieth of the TTL, from 50 ms to 1 s (lockrun's own
    /// delays: its 10 ms poll, being scheduled, the kill and the reaping).
    pub(crate) fn kill_margin(&self) -> Duration {
        kill_margin(self.ttl)
    }
}

pub(crate) enum Parsed {
    Run(Box<Args>),
    Exit(ExitCode),
}

/// Whether `url` names a Sentinel group: its scheme ends in `-sentinel`
/// (`redis-sentinel`, `rediss-sentinel`, `valkey-sentinel`...), in any
/// case; the library says whether it knows the scheme.
fn is_group(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| scheme.to_ascii_lowercase().ends_with("-sentinel"))
}

/// The URLs of a comma-separated list; an empty entry is an error (a
/// stray comma, or a variable that expanded to nothing). A Sentinel
/// group's URL lists its Sentinels with commas too
/// (`redis-sentinel://h1,h2,h3#master`): until its `#`, the entries that
/// follow it are its own.
fn split_urls(list: &str, name: &str) -> Result<Vec<String>, String> {
    let mut urls: Vec<String> = Vec::new();
    for entry in list.split(',').map(str::trim) {
        match urls.last_mut() {
            Some(group) if is_group(group) && !group.contains('#') && !entry.is_empty() => {
                group.push(',');
                group.push_str(entry);
            }
            _ => urls.push(entry.to_owned()),
        }
    }
    if urls.iter().any(String::is_empty) {
        return Err(format!(
            "{name}: empty entry in {list:?} (URLs are separated by single commas)"
        ));
    }
    Ok(urls)
}

pub(crate) fn parse() -> Result<Parsed, String> {
    use lexopt::prelude::*;
    // Everything after the first `--` is COMMAND; lexopt reads only the
    // options and RESOURCE before it.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let command = match argv.iter().position(|a| a == "--") {
        Some(at) => {
            let command = argv.split_off(at + 1);
            argv.pop();
            Some(command)
        }
        None => None,
    };
    let mut parser = lexopt::Parser::from_args(argv);
    let mut members: Vec<MemberArg> = Vec::new();
    let mut args = Args {
        members: Vec::new(),
        ttl: Duration::from_secs(30),
        wait: Duration::from_secs(10),
        node_timeout: Duration::from_millis(50),
        fencing: true,
        fair: true,
        restart_quarantine: None,
        permits: None,
        shared: false,
        check: false,
        conflict_exit: 75,
        min_hold: None,
        kill_after: None,
        wait_given: false,
        leader: false,
        leader_value: None,
        leader_of: false,
        inspect: false,
        force_unlock: false,
        tls_ca: None,
        tls_cert: None,
        tls_key: None,
        resource: String::new(),
        resources: Vec::new(),
        command: Vec::new(),
        verbosity: WARN,
    };
    let mut resources: Vec<String> = Vec::new();
    // The value of option `name`, as UTF-8 text.
    let value = |parser: &mut lexopt::Parser, name: &str| -> Result<String, String> {
        parser
            .value()
            .map_err(|_| format!("{name} needs a value"))?
            .into_string()
            .map_err(|_| format!("{name}: not valid UTF-8"))
    };
    let duration_of = |parser: &mut lexopt::Parser, name: &str| -> Result<Duration, String> {
        duration(&value(parser, name)?).map_err(|why| format!("{name}: {why}"))
    };
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Long("nodes") => members.extend(
                split_urls(&value(&mut parser, "--nodes")?, "--nodes")?
                    .into_iter()
                    .map(MemberArg::Node),
            ),
            Long("cluster") => members.push(MemberArg::Cluster(split_urls(
                &value(&mut parser, "--cluster")?,
                "--cluster",
            )?)),
            Long("ttl") => args.ttl = duration_of(&mut parser, "--ttl")?,
            Long("wait") => {
                args.wait = duration_of(&mut parser, "--wait")?;
                args.wait_given = true;
            }
            Long("leader") => args.leader = true,
            Long("leader-of") => args.leader_of = true,
            Long("inspect") => args.inspect = true,
            Long("force-unlock") => args.force_unlock = true,
            Long("leader-value") => args.leader_value = Some(value(&mut parser, "--leader-value")?),
            Long("node-timeout") => args.node_timeout = duration_of(&mut parser, "--node-timeout")?,
            Long("no-fencing") => args.fencing = false,
            Long("fair") => args.fair = true,
            Long("no-fair") => args.fair = false,
            Long("restart-quarantine") => {
                args.restart_quarantine = Some(duration_of(&mut parser, "--restart-quarantine")?)
            }
            Long("check") => args.check = true,
            Long("min-hold") => args.min_hold = Some(duration_of(&mut parser, "--min-hold")?),
            Long("kill-after") => args.kill_after = Some(duration_of(&mut parser, "--kill-after")?),
            Long("conflict-exit-code") => {
                let text = value(&mut parser, "--conflict-exit-code")?;
                args.conflict_exit = text.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("--conflict-exit-code: {text:?} is not an exit status from 1 to 255")
                })?
            }
            Long("permits") => {
                let text = value(&mut parser, "--permits")?;
                args.permits =
                    Some(text.parse().ok().filter(|k| *k > 0).ok_or_else(|| {
                        format!("--permits: {text:?} is not a count of 1 or more")
                    })?)
            }
            Long("tls-ca") => args.tls_ca = Some(value(&mut parser, "--tls-ca")?),
            Long("tls-cert") => args.tls_cert = Some(value(&mut parser, "--tls-cert")?),
            Long("tls-key") => args.tls_key = Some(value(&mut parser, "--tls-key")?),
            Short('q') | Long("quiet") => args.verbosity = ERROR,
            Short('v') | Long("verbose") => args.verbosity = INFO,
            Short('h') | Long("help") => {
                print!("{HELP}");
                return Ok(Parsed::Exit(ExitCode::SUCCESS));
            }
            Short('V') | Long("version") => {
                println!("lockrun (redlock-sync) {}", env!("CARGO_PKG_VERSION"));
                return Ok(Parsed::Exit(ExitCode::SUCCESS));
            }
            Long("shared") => args.shared = true,
            Value(v) => resources.push(
                v.into_string()
                    .map_err(|_| "RESOURCE: not valid UTF-8".to_owned())?,
            ),
            other => return Err(other.unexpected().to_string()),
        }
    }
    if let Some(grace) = args.kill_after
        && grace >= args.ttl
    {
        return Err(format!(
            "--kill-after {} must be shorter than --ttl {}: COMMAND is killed before \
             the lock's validity (less than the TTL) ends",
            human(grace),
            human(args.ttl)
        ));
    }
    // While one member takes the whole node timeout to answer and a
    // majority answers, the validity dips to `dip` before each renewal
    // lands: the kill margin must stay below that, or a command would be
    // killed while a majority answers. (A zero TTL too, with the same
    // words and the TTL that would do.)
    let dip = healthy_dip(args.ttl, args.node_timeout);
    if command.is_some() && dip <= args.kill_margin() {
        let enough = (1..=36_000u32)
            .map(|tenths| Duration::from_millis(100) * tenths)
            .find(|ttl| healthy_dip(*ttl, args.node_timeout) > kill_margin(*ttl))
            .unwrap_or(args.ttl);
        return Err(format!(
            "--ttl {} is too short for --node-timeout {}: while a member takes the node \
             timeout to answer, renewals leave {} of validity, and COMMAND is killed {} \
             before the validity ends; give a TTL of at least {}",
            human(args.ttl),
            human(args.node_timeout),
            human(dip),
            human(args.kill_margin()),
            human(enough)
        ));
    }
    if args.leader_value.is_some() && !args.leader {
        return Err("--leader-value goes with --leader".into());
    }
    if args.min_hold.is_some() && (args.shared || args.leader || args.leader_of || args.check) {
        return Err(
            "--min-hold goes with an exclusive lock (not --shared, --leader or --check)".into(),
        );
    }
    let modes = [
        args.check,
        args.leader,
        args.leader_of,
        args.inspect,
        args.force_unlock,
        args.shared,
        args.permits.is_some(),
    ];
    if modes.iter().filter(|m| **m).count() > 1 {
        return Err(
            "--check, --leader, --leader-of, --inspect, --force-unlock, --shared and \
                    --permits do not go together (give one)"
                .into(),
        );
    }
    let query = [
        (args.leader_of, "--leader-of", "the election"),
        (args.inspect, "--inspect", "the lock"),
        (args.force_unlock, "--force-unlock", "the lock"),
    ]
    .into_iter()
    .find(|(on, _, _)| *on);
    if let Some((_, flag, what)) = query {
        if command.is_some() {
            return Err(format!(
                "{flag} runs no COMMAND: drop `--` and what follows"
            ));
        }
        if resources.len() != 1 {
            return Err(format!("{flag} takes one RESOURCE ({what})"));
        }
    } else if args.check {
        if command.is_some() {
            return Err("--check runs no COMMAND: drop `--` and what follows".into());
        }
        if resources.len() > 1 {
            return Err("--check takes at most one RESOURCE".into());
        }
    } else {
        if resources.is_empty() {
            return Err("missing RESOURCE (lockrun [OPTIONS] RESOURCE... -- COMMAND)".into());
        }
        args.command = match command {
            Some(command) if !command.is_empty() => command,
            Some(_) => return Err("missing COMMAND after `--`".into()),
            None if resources.len() > 1 => {
                return Err(
                    "missing `--`: put `--` before COMMAND (lockrun [OPTIONS] RESOURCE... -- \
                     COMMAND)"
                        .into(),
                );
            }
            None => return Err("missing `--` and COMMAND after RESOURCE".into()),
        };
    }
    if resources.iter().any(String::is_empty) {
        return Err("RESOURCE is empty".into());
    }
    if resources.len() > 1 && (args.shared || args.permits.is_some() || args.leader) {
        return Err(format!(
            "{} takes one RESOURCE",
            if args.shared {
                "--shared"
            } else if args.leader {
                "--leader"
            } else {
                "--permits"
            }
        ));
    }
    args.resource = cut(resources
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join(", "));
    args.resources = resources;
    args.members = if members.is_empty() {
        match std::env::var("REDLOCK_NODES") {
            Ok(list) if !list.trim().is_empty() => env_members(&list)?,
            _ => Vec::new(),
        }
    } else {
        members
    };
    if args.members.is_empty() {
        return Err(
            "no nodes: give --nodes URL,... or --cluster URL,..., or set REDLOCK_NODES".into(),
        );
    }
    Ok(Parsed::Run(Box::new(args)))
}

/// The members named by `REDLOCK_NODES`: URLs separated by commas, an
/// entry `cluster:URL|URL...` being one Redis Cluster member.
fn env_members(list: &str) -> Result<Vec<MemberArg>, String> {
    split_urls(list, "REDLOCK_NODES")?
        .into_iter()
        .map(|entry| match entry.strip_prefix("cluster:") {
            Some(seeds) => {
                let seeds: Vec<String> = seeds.split('|').map(|s| s.trim().to_owned()).collect();
                if seeds.iter().any(String::is_empty) {
                    return Err(format!(
                        "REDLOCK_NODES: empty seed in {entry:?} (seeds are separated by |)"
                    ));
                }
                Ok(MemberArg::Cluster(seeds))
            }
            None => Ok(MemberArg::Node(entry)),
        })
        .collect()
}

/// `30s`, `500ms`, `2m`, `1h`, or plain (possibly fractional) seconds.
fn duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let number: f64 = number
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| format!("{text:?} is not a duration (try 30s or 500ms)"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        format!(
            "{text:?} is out of range: at most {}s",
            Duration::MAX.as_secs()
        )
    })
}

/// A duration as a person writes it: `10s`, `500ms`, `1.5s`, `2m`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 999.5 {
        format!("{}ms", ms.round())
    } else if ms < 120_000.0 {
        format!("{}s", (ms / 100.0).round() / 10.0)
    } else {
        format!("{}m", (ms / 6_000.0).round() / 10.0)
    }
}

/// A name for messages: whole up to 200 bytes, else its first 100 and
/// its length (the library cuts names in its errors the same way).
pub(crate) fn cut(shown: String) -> String {
    if shown.len() <= 200 {
        return shown;
    }
    let head: String = shown
        .char_indices()
        .take_while(|(i, c)| i + c.len_utf8() <= 100)
        .map(|(_, c)| c)
        .collect();
    format!("{head}... ({} bytes)", shown.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_nodes_names_nodes_and_clusters() {
        assert_eq!(
            env_members("redis://a,cluster:redis://c1:7000|redis://c2:7000,redis://b").unwrap(),
            [
                MemberArg::Node("redis://a".into()),
                MemberArg::Cluster(vec!["redis://c1:7000".into(), "redis://c2:7000".into()]),
                MemberArg::Node("redis://b".into()),
            ]
        );
        assert!(env_members("cluster:redis://c1||redis://c2").is_err());
        assert!(env_members("redis://a,,redis://b").is_err());
    }

    #[test]
    fn a_sentinel_groups_commas_stay_in_its_url() {
        assert_eq!(
            split_urls("redis://a,redis-sentinel://s1,s2:26380,s3#m,redis://b", "x").unwrap(),
            [
                "redis://a",
                "redis-sentinel://s1,s2:26380,s3#m",
                "redis://b"
            ]
        );
        // Its `#` ends it: what follows is the next member.
        assert_eq!(
            split_urls("redis-sentinel://s1#m,Redis-Sentinel://t1,t2#n", "x").unwrap(),
            ["redis-sentinel://s1#m", "Redis-Sentinel://t1,t2#n"]
        );
        assert!(split_urls("redis-sentinel://s1,,s2#m", "x").is_err());
    }

    #[test]
    fn a_silent_member_leaves_the_validity_well_above_the_kill_margin() {
        let ms = Duration::from_millis;
        // TTL 1 s, a member that takes the whole 400 ms node timeout:
        // rounds back to back, each 400 ms; the validity (less 20 ms of
        // drift) dips to 180 ms when the next round ends, 130 ms above the
        // 50 ms kill margin (counting TTL/12 from a round's end, 97 ms).
        assert_eq!(healthy_dip(ms(1000), ms(400)), ms(180));
        assert_eq!(kill_margin(ms(1000)), ms(50));
        // Healthy members (a round of about nothing): TTL/3 apart.
        assert_eq!(healthy_dip(Duration::from_secs(30), ms(1)), ms(19_399));
        // Too short: no validity left between rounds.
        assert_eq!(healthy_dip(ms(100), ms(50)), Duration::ZERO);
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert!(duration("-5s").is_err());
        assert!(duration("5parsecs").is_err());
        let far = duration("99999999999999999999999s").unwrap_err();
        assert!(
            far.ends_with("out of range: at most 18446744073709551615s"),
            "{far}"
        );
        assert_eq!(human(Duration::from_millis(999_600)), "16.7m");
        assert_eq!(human(Duration::from_millis(999)), "999ms");
        assert_eq!(human(Duration::from_millis(1000)), "1s");
        assert_eq!(human(Duration::from_millis(10_000)), "10s");
    }

    #[test]
    fn long_names_are_cut_for_messages() {
        assert_eq!(cut("\"a\"".into()), "\"a\"");
        let long = format!("{:?}", "é".repeat(200));
        let shown = cut(long.clone());
        assert!(shown.len() < 130, "{shown}");
        assert!(
            shown.ends_with(&format!("... ({} bytes)", long.len())),
            "{shown}"
        );
    }
}
