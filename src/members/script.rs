//! A Lua script built once ([`Lua`]): its source (a file under
//! `src/scripts/`, named for the room it serves, whose header documents
//! its `KEYS`, `ARGV` and answers) and its SHA1, so that rounds send
//! `EVALSHA` and fall back to `EVAL` on `NOSCRIPT`; and the `scripts!`
//! macro with which each room declares its own (the lock's in
//! `engine/single.rs`, fair waiting's in `engine/fair.rs`, each shape's
//! in its room, the operator's in `ops/operator.rs`), each with what it
//! takes ([`Takes`]): its `KEYS` and `ARGV` by role, which calls are
//! checked against in debug builds, a test ties to its header, and
//! `LockManager::check` builds its trial calls from.

use crate::base::keys::{READERS_MARK, RESERVED_PREFIX};
use crate::base::text::Decimal;
use crate::members::conn::pack_into;

/// A Lua script: its name for messages, its source, and its SHA1 computed
/// once by `redis::Script`.
pub(crate) struct Lua {
    name: &'static str,
    /// The source sent: the marks and the room's codes, the prelude,
    /// then the script's own file.
    src: String,
    /// The script's own file, whose header documents it.
    #[cfg_attr(not(test), allow(dead_code))]
    own: &'static str,
    sha: String,
    /// What it takes, declared beside it (see [`Takes`]).
    takes: Takes,
}

/// A script's `KEYS` and `ARGV`, each named by a role word, in order, as
/// its room declares them (`scripts!`): the word alone, always passed;
/// with `?`, optional (from where a call stops passing them); with `*`,
/// any number (one per resource, say). Calls are checked against it in
/// debug builds, its header's `KEYS[n]`/`ARGV[n]` lines by a test, and
/// [`LockManager::check`](crate::LockManager::check) builds its trial
/// calls from it. The words mean something only to the rooms above.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Takes {
    pub(crate) keys: &'static [&'static str],
    pub(crate) args: &'static [&'static str],
}

/// Whether `n` values fit the role words `words` (see [`Takes`]).
fn fits(words: &[&str], n: usize) -> bool {
    let required = words.iter().filter(|w| !w.ends_with(['?', '*'])).count();
    let any = words.iter().any(|w| w.ends_with('*'));
    n >= required && (any || n <= words.len())
}

impl Lua {
    /// The script of the file `own`, after the functions of `prelude`
    /// (shared by several scripts; empty for most), with the marks (see
    /// [`marks`]) and the room's `codes` (answer codes its Rust reads
    /// back, each `local NAME = value`) ahead of them.
    pub(crate) fn new(
        name: &'static str,
        prelude: &'static str,
        own: &'static str,
        takes: Takes,
        codes: &[(&str, i64)],
    ) -> Lua {
        let codes: String = codes
            .iter()
            .map(|(name, value)| format!("local {name} = {value}\n"))
            .collect();
        let src = format!("{}{codes}{prelude}{own}", marks());
        Lua {
            name,
            sha: redis::Script::new(&src).get_hash().to_owned(),
            src,
            own,
            takes,
        }
    }

    /// Its name in messages.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// What it takes, as declared (see [`Takes`]).
    pub(crate) fn takes(&self) -> Takes {
        self.takes
    }

    /// The source, as `SCRIPT LOAD` takes it.
    pub(crate) fn source(&self) -> &[u8] {
        self.src.as_bytes()
    }

    /// What a failure of this script on `key` concerns, for messages.
    pub(crate) fn describe(&self, key: &[u8]) -> String {
        format!(
            "the {} script on {:?}",
            self.name,
            String::from_utf8_lossy(key)
        )
    }

    /// `EVALSHA sha numkeys keys... args...`.
    pub(crate) fn evalsha(&self, keys: &[&[u8]], args: &[&[u8]]) -> Vec<u8> {
        self.command(b"EVALSHA", self.sha.as_bytes(), keys, args)
    }

    /// `EVAL source numkeys keys... args...`: runs the script and caches it.
    pub(crate) fn eval(&self, keys: &[&[u8]], args: &[&[u8]]) -> Vec<u8> {
        self.command(b"EVAL", self.src.as_bytes(), keys, args)
    }

    fn command(&self, verb: &[u8], script: &[u8], keys: &[&[u8]], args: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        self.command_into(&mut out, verb, script, keys, args);
        out
    }

    /// `EVALSHA sha numkeys keys... args...`, appended to `out`.
    pub(crate) fn evalsha_into(&self, out: &mut Vec<u8>, keys: &[&[u8]], args: &[&[u8]]) {
        self.command_into(out, b"EVALSHA", self.sha.as_bytes(), keys, args);
    }

    /// `EVAL source numkeys keys... args...`, appended to `out`.
    pub(crate) fn eval_into(&self, out: &mut Vec<u8>, keys: &[&[u8]], args: &[&[u8]]) {
        self.command_into(out, b"EVAL", self.src.as_bytes(), keys, args);
    }

    fn command_into(
        &self,
        out: &mut Vec<u8>,
        verb: &[u8],
        script: &[u8],
        keys: &[&[u8]],
        args: &[&[u8]],
    ) {
        debug_assert!(
            fits(self.takes.keys, keys.len()) && fits(self.takes.args, args.len()),
            "the {} script called with {} keys and {} arguments, declared {:?}",
            self.name,
            keys.len(),
            args.len(),
            self.takes
        );
        let numkeys = Decimal::of(keys.len() as u64);
        pack_into(out, &[&[verb, script, numkeys.as_bytes()], keys, args]);
    }
}

/// The values scripts read and write that are no token, stated once
/// (`base::keys`) and given to every script as Lua constants ahead of its
/// prelude: `READERS_MARK` (the lock key while readers hold it) and
/// `RESERVED_PREFIX` (the lock key's reservation for a fair waiter,
/// before the waiter's token).
fn marks() -> String {
    let lua = |value: &[u8]| {
        let value = std::str::from_utf8(value).expect("an ASCII mark");
        debug_assert!(
            value
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        );
        format!("\"{value}\"")
    };
    format!(
        "local READERS_MARK = {}\nlocal RESERVED_PREFIX = {}\n",
        lua(READERS_MARK),
        lua(RESERVED_PREFIX)
    )
}

/// Declares a room's scripts: each one's static, its name in messages,
/// and its file under `src/scripts/` (after the files of its prelude, if
/// any), the `KEYS` and `ARGV` it takes, and the answer codes the room
/// gives it as Lua constants (`codes`, a `&[(name, value)]`: stated once,
/// in Rust, where the room reads them back). Also declares `all()`, every
/// script of the room, for tests.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident, $shown:literal, $file:literal $(after $($prelude:literal)+)?,
        keys [$($key:literal),*], args [$($arg:literal),*] $(, codes $codes:expr)?;)+) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: std::sync::LazyLock<$crate::members::script::Lua> =
                std::sync::LazyLock::new(|| {
                    $crate::members::script::Lua::new(
                        $shown,
                        concat!("", $($(include_str!(concat!(
                            env!("CARGO_MANIFEST_DIR"), "/src/scripts/", $prelude
                        )), "\n"),+)?),
                        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/", $file)),
                        $crate::members::script::Takes {
                            keys: &[$($key),*],
                            args: &[$($arg),*],
                        },
                        <[&[(&str, i64)]]>::first(&[$($codes)?])
                            .copied()
                            .unwrap_or(&[]),
                    )
                });
        )+
        /// Every script of this room, for tests.
        #[cfg(test)]
        pub(crate) fn all() -> Vec<&'static $crate::members::script::Lua> {
            vec![$(&*$name),+]
        }
    };
}
pub(crate) use scripts;

/// Checks the scripts of every room: each documents its keys, arguments
/// and answers in its header, and no two are the same.
#[cfg(test)]
pub(crate) fn check_all(all: &[&Lua]) {
    for (i, lua) in all.iter().enumerate() {
        let header: Vec<&str> = lua
            .own
            .lines()
            .take_while(|l| l.starts_with("--"))
            .collect();
        assert!(
            header.iter().any(|l| l.starts_with("-- KEYS")),
            "{}",
            lua.name
        );
        assert!(
            header.iter().any(|l| l.starts_with("-- ARGV")),
            "{}",
            lua.name
        );
        assert!(header.iter().any(|l| l.contains("nswer")), "{}", lua.name);
        let (keys, args) = declared(&header);
        for (what, words, (fixed, any)) in [
            ("KEYS", lua.takes.keys, keys),
            ("ARGV", lua.takes.args, args),
        ] {
            // Words after a repeated one have no fixed index to number.
            let single = words.iter().take_while(|w| !w.ends_with('*')).count();
            let many = words.iter().any(|w| w.ends_with('*'));
            assert_eq!(
                (single, many),
                (fixed, any),
                "{}: its header's {what} and its declaration {words:?} differ",
                lua.name
            );
        }
        assert_eq!(lua.sha.len(), 40);
        for other in &all[i + 1..] {
            assert_ne!(lua.sha, other.sha, "{} and {}", lua.name, other.name);
        }
    }
}

/// What a script's header declares, for `KEYS` then `ARGV`: how many
/// single entries (`-- KEYS[2]  ...`), and whether any stands for many
/// (`KEYS[2…]`, `ARGV[3+i]`, a bare `-- KEYS  the n lock keys`). Read from
/// its first block of such lines, up to an empty `--` line.
#[cfg(test)]
fn declared(header: &[&str]) -> ((usize, bool), (usize, bool)) {
    let mut found = [(Vec::new(), false), (Vec::new(), false)];
    let start = header
        .iter()
        .position(|l| l.starts_with("-- KEYS") || l.starts_with("-- ARGV"))
        .unwrap_or(header.len());
    for line in header[start..].iter().take_while(|l| **l != "--") {
        let Some((at, rest)) = [("-- KEYS", 0), ("-- ARGV", 1)]
            .iter()
            .find_map(|(p, at)| line.strip_prefix(p).map(|rest| (*at, rest)))
        else {
            continue;
        };
        let entry = &mut found[at];
        match rest.strip_prefix('[').and_then(|r| r.split_once(']')) {
            Some((index, _)) => match index.parse::<usize>() {
                Ok(n) if !entry.0.contains(&n) => entry.0.push(n),
                Ok(_) => {}
                Err(_) => entry.1 = true,
            },
            // `-- ARGV     none`, or a bare `-- KEYS  the n keys`.
            None if rest.trim() == "none" => {}
            None => entry.1 = true,
        }
    }
    let [keys, args] = found;
    ((keys.0.len(), keys.1), (args.0.len(), args.1))
}
