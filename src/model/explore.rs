//! An explicit-state model checker: breadth first over every action
//! enabled in every state reached, each distinct state explored once, up
//! to a depth. A property that fails comes back with the shortest
//! schedule that breaks it (breadth first finds no longer one first).
//!
//! States are told apart by a 64-bit fingerprint (as TLC and stateright
//! do): two distinct states share one with odds of about n²/2⁶⁵ for n
//! states, 3 in a million at ten million. Only the level being explored
//! is kept whole; a counterexample's states are rebuilt by replaying its
//! actions from the start.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};

/// A system to check: its states, the actions enabled in each, and what
/// must hold in every state reached.
pub(crate) trait Model {
    /// A state of the whole system.
    type State: Clone + Eq + Hash + Debug;
    /// One step of it.
    type Action: Clone + Debug;

    /// Where it starts.
    fn init(&self) -> Self::State;
    /// Every action enabled in `state`, into `out`.
    fn actions(&self, state: &Self::State, out: &mut Vec<Self::Action>);
    /// The state `action` leads to from `state` (`None`: it changes
    /// nothing).
    fn next(&self, state: &Self::State, action: &Self::Action) -> Option<Self::State>;
    /// The first property `state` breaks, if any, in words.
    fn broken(&self, state: &Self::State) -> Option<String>;
    /// One step of a schedule, for people.
    fn describe(&self, state: &Self::State, action: &Self::Action) -> String {
        let _ = state;
        format!("{action:?}")
    }
    /// Whether `to`, reached from `from` by `action`, was stored as the
    /// mirror of the state reached (a model that explores a state and its
    /// mirror once): the schedule's later steps then name its parts the
    /// other way round, and [`unmirror`](Self::unmirror) puts them back.
    fn mirrored(&self, from: &Self::State, action: &Self::Action, to: &Self::State) -> bool {
        let _ = (from, action, to);
        false
    }
    /// A step's description, its parts named the other way round.
    fn unmirror(&self, line: String) -> String {
        line
    }
}

/// What a check found.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Distinct states reached.
    pub(crate) states: usize,
    /// Every schedule of this many steps was explored.
    pub(crate) depth: usize,
    /// Every state reachable was explored (none left past the depth or
    /// the state limit).
    pub(crate) complete: bool,
    /// A property broken: what, and the schedule from the start, one
    /// line per step.
    pub(crate) counterexample: Option<(String, Vec<String>)>,
}

fn fingerprint<S: Hash>(state: &S) -> u64 {
    let mut h = DefaultHasher::new();
    state.hash(&mut h);
    h.finish()
}

/// Explores `model` breadth first to `max_depth` steps, or until
/// `max_states` distinct states were reached (the level being explored is
/// then not counted as done).
pub(crate) fn check<M: Model>(model: &M, max_depth: usize, max_states: usize) -> Outcome {
    let init = model.init();
    // How each state was reached: its parent's number and the action.
    let mut links: Vec<Option<(u32, M::Action)>> = vec![None];
    let mut seen: HashSet<u64> = HashSet::from([fingerprint(&init)]);
    if let Some(why) = model.broken(&init) {
        return Outcome {
            states: 1,
            depth: 0,
            complete: false,
            counterexample: Some((why, Vec::new())),
        };
    }
    let mut level = vec![(0u32, init)];
    let mut depth = 0;
    let mut actions = Vec::new();
    while !level.is_empty() && depth < max_depth {
        let mut next_level = Vec::new();
        for (at, state) in &level {
            actions.clear();
            model.actions(state, &mut actions);
            for action in actions.drain(..) {
                let Some(next) = model.next(state, &action) else {
                    continue;
                };
                if !seen.insert(fingerprint(&next)) {
                    continue;
                }
                let index = links.len() as u32;
                links.push(Some((*at, action)));
                if let Some(why) = model.broken(&next) {
                    return Outcome {
                        states: links.len(),
                        depth,
                        complete: false,
                        counterexample: Some((why, schedule(model, &links, index))),
                    };
                }
                next_level.push((index, next));
                if links.len() >= max_states {
                    return Outcome {
                        states: links.len(),
                        depth,
                        complete: false,
                        counterexample: None,
                    };
                }
            }
        }
        level = next_level;
        depth += 1;
    }
    Outcome {
        states: links.len(),
        depth,
        complete: level.is_empty(),
        counterexample: None,
    }
}

/// The schedule that reached state `at`, one line per step, its states
/// rebuilt by replaying its actions from the start.
fn schedule<M: Model>(model: &M, links: &[Option<(u32, M::Action)>], at: u32) -> Vec<String> {
    let mut path = Vec::new();
    let mut i = at as usize;
    while let Some((parent, action)) = &links[i] {
        path.push(action.clone());
        i = *parent as usize;
    }
    path.reverse();
    let mut state = model.init();
    let mut flipped = false;
    let mut steps = Vec::new();
    for action in path {
        let line = model.describe(&state, &action);
        steps.push(if flipped { model.unmirror(line) } else { line });
        let Some(next) = model.next(&state, &action) else {
            break;
        };
        flipped ^= model.mirrored(&state, &action, &next);
        state = next;
    }
    steps
}
