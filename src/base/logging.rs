//! The crate's one logging macro.

/// Logs through the `log` facade with the `log` feature; compiles to
/// nothing (the arguments are not evaluated) without it. Targets are
/// written out (`"redlock_sync::node"`), so moving a file keeps them.
macro_rules! log {
    ($level:ident, $target:expr, $($arg:tt)+) => {{
        #[cfg(feature = "log")]
        ::log::$level!(target: $target, $($arg)+);
        #[cfg(not(feature = "log"))]
        if false {
            let _ = ($target, format_args!($($arg)+));
        }
    }};
}
pub(crate) use log;
