//! A Lua script built once ([`Lua`]): its source (a file under
//! `src/scripts/`, named for the room it serves, whose header documents
//! its `KEYS`, `ARGV` and answers) and its SHA1, so that rounds send
//! `EVALSHA` and fall back to `EVAL` on `NOSCRIPT`; and the `scripts!`
//! macro with which each room declares its own (the lock's in
//! `engine/single.rs`, fair waiting's in `engine/fair.rs`, each shape's
//! in its room, the operator's in `ops/operator.rs`).

use crate::base::text::Decimal;
use crate::members::conn::pack_into;

/// A Lua script: its name for messages, its source, and its SHA1 computed
/// once by `redis::Script`.
pub(crate) struct Lua {
    name: &'static str,
    /// The source sent: the prelude, then the script's own file.
    src: String,
    /// The script's own file, whose header documents it.
    #[cfg_attr(not(test), allow(dead_code))]
    own: &'static str,
    sha: String,
}

impl Lua {
    /// The script of the file `own`, after the functions of `prelude`
    /// (shared by several scripts; empty for most).
    pub(crate) fn new(name: &'static str, prelude: &'static str, own: &'static str) -> Lua {
        let src = format!("{prelude}{own}");
        Lua {
            name,
            sha: redis::Script::new(&src).get_hash().to_owned(),
            src,
            own,
        }
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
        let numkeys = Decimal::of(keys.len() as u64);
        pack_into(out, &[&[verb, script, numkeys.as_bytes()], keys, args]);
    }
}

/// Declares a room's scripts: each one's static, its name in messages,
/// and its file under `src/scripts/` (after the files of its prelude, if
/// any). Also declares `all()`, every script of the room, for tests.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident, $shown:literal, $file:literal $(after $($prelude:literal)+)?;)+) => {
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
        assert_eq!(lua.sha.len(), 40);
        for other in &all[i + 1..] {
            assert_ne!(lua.sha, other.sha, "{} and {}", lua.name, other.name);
        }
    }
}
