//! Every fault, on a minority and on a majority of 3 and of 5 nodes.
//! The scenarios and faults are in `support/faults.rs`.

use crate::support;

use support::faults::{Fault, majority, minority};

macro_rules! matrix {
    ($($name:ident => $fault:ident,)*) => {
        mod minority_of_3 { use super::*; $(#[test] fn $name() { minority(Fault::$fault, 3) })* }
        mod minority_of_5 { use super::*; $(#[test] fn $name() { minority(Fault::$fault, 5) })* }
        mod majority_of_3 { use super::*; $(#[test] fn $name() { majority(Fault::$fault, 3) })* }
        mod majority_of_5 { use super::*; $(#[test] fn $name() { majority(Fault::$fault, 5) })* }
    };
}

matrix! {
    killed => Kill,
    paused => Pause,
    debug_sleep => DebugSleep,
    client_pause_write => ClientPauseWrite,
    latency_below_timeout => LatencyBelow,
    latency_above_timeout => LatencyAbove,
    blackhole => Blackhole,
    refusing => Refuse,
    resetting => Reset,
    truncating => Truncate,
    loading => Loading,
    read_only => ReadOnly,
    out_of_memory => Oom,
    no_auth => NoAuth,
    wrong_password => WrongPass,
    wrong_type => WrongType,
}
