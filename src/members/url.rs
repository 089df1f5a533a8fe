//! Node URLs: their form checked before the `redis` crate reads them,
//! split around the authority, TLS schemes, and redaction of credentials
//! for messages.

/// The schemes a node URL may have.
const SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "unix",
    "redis+unix",
    "valkey+unix",
];

/// A node URL split around its authority:
/// `scheme://[userinfo@]host_port[rest]`, `rest` being the path, query
/// and fragment (what starts with `/`, `?` or `#`).
pub(crate) struct UrlParts<'a> {
    pub(crate) scheme: &'a str,
    /// Everything before the last `@` that comes before the first `/`: a
    /// password holding `?` or `#` stays whole, so that it is never shown.
    pub(crate) userinfo: Option<&'a str>,
    pub(crate) host_port: &'a str,
    pub(crate) rest: &'a str,
}

impl UrlParts<'_> {
    /// The fragment (after `#`), if any.
    pub(crate) fn fragment(&self) -> Option<&str> {
        self.rest.split_once('#').map(|(_, f)| f)
    }
}

/// Splits a node URL (see [`UrlParts`]); `None` without `://`.
pub(crate) fn url_parts(url: &str) -> Option<UrlParts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    let before_path = rest.find('/').unwrap_or(rest.len());
    let (userinfo, tail) = match rest[..before_path].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let end = tail.find(['/', '?', '#']).unwrap_or(tail.len());
    Some(UrlParts {
        scheme,
        userinfo,
        host_port: &tail[..end],
        rest: &tail[end..],
    })
}

/// Says what is wrong with a node URL's form, before the `redis` crate
/// reads it: no scheme, an unknown one, no host, a bad port.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let Some(parts) = url_parts(url) else {
        if let Some(fixed) = misspelt_scheme(url) {
            return Err(format!("malformed scheme: write {fixed}"));
        }
        return Err(if url.starts_with('/') {
            format!("no scheme: write unix://{url} for a socket path")
        } else {
            format!("no scheme: write redis://{url} (or rediss:// for TLS)")
        });
    };
    let scheme = parts.scheme;
    if !SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "unknown scheme {scheme:?}: use redis://, rediss://, valkey://, valkeys:// or unix://"
        ));
    }
    if scheme.contains("unix") {
        return Ok(());
    }
    let host_port = parts.host_port;
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => return Err("an IPv6 address needs its closing ']'".into()),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    match port {
        Some(port) if !port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Err(format!("bad port {port:?}: a number from 1 to 65535"))
        }
        _ => Ok(()),
    }
}

/// A URL whose scheme is one of ours but not followed by `://` (`redis//h`,
/// `redis:/h`), written as meant. Not `redis:6379`: that is a host named
/// `redis`.
fn misspelt_scheme(url: &str) -> Option<String> {
    let (scheme, rest) = SCHEMES
        .iter()
        .filter_map(|s| {
            let head = url.get(..s.len())?;
            head.eq_ignore_ascii_case(s).then(|| (*s, &url[s.len()..]))
        })
        .max_by_key(|(s, _)| s.len())?;
    let after = rest.strip_prefix(':').unwrap_or(rest);
    if !after.starts_with('/') {
        return None;
    }
    let path = after.trim_start_matches('/');
    Some(match scheme.contains("unix") {
        true => format!("{scheme}:///{path}"),
        false => format!("{scheme}://{path}"),
    })
}

/// The query parameters a Sentinel group's URL takes (see
/// `sentinel::Group::parse`).
pub(crate) const GROUP_PARAMS: [&str; 2] = ["sentinel_username", "sentinel_password"];

/// The URL with any credentials replaced by `***`, for error messages:
/// its userinfo, and the value of any query parameter whose name ends in
/// `password`; in a Sentinel group's URL, every query value (see
/// [`redact_group`]).
pub(crate) fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && scheme.to_ascii_lowercase().ends_with("-sentinel")
    {
        return redact_group(scheme, rest);
    }
    let url = match url_parts(url) {
        Some(UrlParts {
            scheme,
            userinfo: Some(_),
            host_port,
            rest,
        }) => format!("{scheme}://***@{host_port}{rest}"),
        _ => url.to_owned(),
    };
    let Some((before, query)) = url.split_once('?') else {
        return url;
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, format!("#{fragment}")),
        None => (query, String::new()),
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if name.to_ascii_lowercase().ends_with("password") => {
                format!("{name}=***")
            }
            _ => param.to_owned(),
        })
        .collect();
    format!("{before}?{}{fragment}", params.join("&"))
}

/// A Sentinel group's URL (`rest` after `scheme://`) read as
/// `Group::parse` reads it (the master's name after the last `#`, the
/// query from the first `?` before it, the userinfo up to the last `@`
/// before the path), shown with the userinfo and every query value as
/// `***`, a parameter's name only where it is one the URL takes, and the
/// master's name only where it holds no `?`, `&`, `=` or `@`. An `@` in
/// the query may end a userinfo that holds a raw `?`: then the hosts are
/// hidden too.
fn redact_group(scheme: &str, rest: &str) -> String {
    let (body, master) = match rest.rsplit_once('#') {
        Some((body, master)) => (body, Some(master)),
        None => (rest, None),
    };
    let (pre, query) = match body.split_once('?') {
        Some((pre, query)) => (pre, Some(query)),
        None => (body, None),
    };
    let before_path = pre.find('/').unwrap_or(pre.len());
    let (creds, hosts) = match pre[..before_path].rfind('@') {
        Some(at) => (true, &pre[at + 1..]),
        None => (false, pre),
    };
    let mut out = format!("{scheme}://");
    if creds {
        out.push_str("***@");
    }
    match query.is_some_and(|q| q.contains('@')) {
        true => out.push_str("***"),
        false => out.push_str(hosts),
    }
    if let Some(query) = query {
        let params: Vec<&str> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) => GROUP_PARAMS
                    .into_iter()
                    .find(|known| known.eq_ignore_ascii_case(name))
                    .map_or("***", |_| name),
                None => "***",
            })
            .collect();
        let shown: Vec<String> = params
            .iter()
            .map(|name| match *name {
                "***" => "***".to_owned(),
                name => format!("{name}=***"),
            })
            .collect();
        out.push('?');
        out.push_str(&shown.join("&"));
    }
    if let Some(master) = master {
        out.push('#');
        out.push_str(match master.contains(['?', '&', '=', '@']) {
            true => "***",
            false => master,
        });
    }
    out
}

/// Splits a TLS URL (`rediss://`, `valkeys://`) into the plain URL the
/// `redis` crate reads and whether certificate checks are off
/// (`#insecure`); `None` for a plain URL.
pub(crate) fn tls_scheme(url: &str) -> (String, Option<bool>) {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => return (url.to_owned(), None),
    };
    let plain = match scheme {
        "rediss" => "redis",
        "valkeys" => "valkey",
        _ => return (url.to_owned(), None),
    };
    let (rest, insecure) = match rest.rsplit_once('#') {
        Some((rest, "insecure")) => (rest, true),
        _ => (rest, false),
    };
    (format!("{plain}://{rest}"), Some(insecure))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_mistakes_are_named() {
        let why = |url| check_url(url).unwrap_err();
        assert!(why("127.0.0.1:7000").contains("write redis://127.0.0.1:7000"));
        assert_eq!(
            why("redis//127.0.0.1:7101"),
            "malformed scheme: write redis://127.0.0.1:7101"
        );
        assert_eq!(why("rediss:/h:1"), "malformed scheme: write rediss://h:1");
        assert_eq!(
            why("unix//tmp/r.sock"),
            "malformed scheme: write unix:///tmp/r.sock"
        );
        assert!(why("redis:6379").contains("write redis://redis:6379"));
        assert!(why("/tmp/r.sock").contains("unix:///tmp/r.sock"));
        assert!(why("http://h:1").contains("unknown scheme \"http\""));
        assert!(why("redis://h:70000").contains("bad port \"70000\""));
        assert!(why("redis://h:x1").contains("bad port \"x1\""));
        assert!(why("redis://h:").contains("bad port \"\""));
        assert!(why("redis://:pw@").contains("no host"));
        assert!(why("redis://[::1").contains("']'"));
        for ok in [
            "redis://h",
            "redis://u:p@h:6379/2",
            "rediss://h:6380#insecure",
            "redis://[::1]:7000",
            "redis://[::1]",
            "unix:///tmp/r.sock",
            "redis+unix:///tmp/r.sock",
            "valkey://h:1",
        ] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn redact_hides_credentials_only() {
        assert_eq!(
            redact("redis://user:secret@host:6379/2"),
            "redis://***@host:6379/2"
        );
        assert_eq!(redact("redis://:pw@host"), "redis://***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("not a url"), "not a url");
        // A password holding `#` or `?` is hidden whole.
        assert_eq!(redact("redis://:p#w?x@host/1"), "redis://***@host/1");
        assert_eq!(
            redact("rediss://u:p@h:6380#insecure"),
            "rediss://***@h:6380#insecure"
        );
        // A Sentinel group's own credentials, in its query: every value
        // hidden, a name shown only where the URL takes it.
        assert_eq!(
            redact("redis-sentinel://:pw@s1,s2/1?sentinel_username=u&sentinel_password=top#m"),
            "redis-sentinel://***@s1,s2/1?sentinel_username=***&sentinel_password=***#m"
        );
        assert_eq!(
            redact("Redis-Sentinel://s1?SENTINEL_PASSWORD=top"),
            "Redis-Sentinel://s1?SENTINEL_PASSWORD=***"
        );
        for (url, hidden) in [
            // An `@` in the query: no userinfo to find, nothing shown.
            (
                "redis-sentinel://s1?sentinel_username=ops@corp&sentinel_password=pw#m",
                "pw",
            ),
            ("redis-sentinel://s1?sentinel_password=p@ss#m", "@ss"),
            // A raw `&` in a password, a misspelt name.
            ("redis-sentinel://s1?sentinel_password=ab&cd=ef#m", "cd"),
            ("redis-sentinel://s1?sentinel_pasword=secret#m", "secret"),
            // `#` inside the query's value, a query after the `#`.
            ("redis-sentinel://s1?sentinel_password=a#b#m", "#b"),
            ("redis-sentinel://s1#m?sentinel_password=secret", "secret"),
            // A raw `?` in the master's password, `@` after it.
            ("redis-sentinel://:p?w@s1#m", "p?w"),
        ] {
            let shown = redact(url);
            assert!(!shown.contains(hidden), "{url} -> {shown}");
        }
    }

    #[test]
    fn tls_urls_are_read_as_plain_ones_with_a_flag() {
        assert_eq!(tls_scheme("redis://h:1"), ("redis://h:1".into(), None));
        assert_eq!(
            tls_scheme("rediss://h:1/2"),
            ("redis://h:1/2".into(), Some(false))
        );
        assert_eq!(
            tls_scheme("rediss://u:p@h:1#insecure"),
            ("redis://u:p@h:1".into(), Some(true))
        );
        assert_eq!(
            tls_scheme("valkeys://h"),
            ("valkey://h".into(), Some(false))
        );
        assert_eq!(tls_scheme("unix:///tmp/s"), ("unix:///tmp/s".into(), None));
    }
}
