//! An explicit-state model checker: breadth first over every action
//! enabled in every state reached, each distinct state explored once, up
//! to a depth. A property that fails comes back with the shortest
//! schedule that breaks it (breadth first finds no longer one first).

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

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
}

/// What a check found.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Distinct states reached.
    pub(crate) states: usize,
    /// The deepest level explored in full.
    pub(crate) depth: usize,
    /// Every state reachable was explored (none left past the depth or
    /// the state limit).
    pub(crate) complete: bool,
    /// A property broken: what, and the schedule from the start, one
    /// line per step.
    pub(crate) counterexample: Option<(String, Vec<String>)>,
}

/// Each state reached, with how it was reached: its parent's index and
/// the action (none for the first).
type Trail<M> = Vec<(<M as Model>::State, Option<(usize, <M as Model>::Action)>)>;

/// Explores `model` breadth first to `max_depth` steps, or until
/// `max_states` distinct states were reached (the level being explored is
/// then not counted as done).
pub(crate) fn check<M: Model>(model: &M, max_depth: usize, max_states: usize) -> Outcome {
    let init = model.init();
    let mut seen: HashMap<M::State, usize> = HashMap::new();
    let mut trail: Trail<M> = Vec::new();
    let found = |trail: &Trail<M>, at: usize, why: String| {
        let mut steps = Vec::new();
        let mut i = at;
        while let Some((parent, action)) = &trail[i].1 {
            steps.push(model.describe(&trail[*parent].0, action));
            i = *parent;
        }
        steps.reverse();
        Some((why, steps))
    };
    if let Some(why) = model.broken(&init) {
        return Outcome {
            states: 1,
            depth: 0,
            complete: false,
            counterexample: Some((why, Vec::new())),
        };
    }
    seen.insert(init.clone(), 0);
    trail.push((init, None));
    let mut level = vec![0usize];
    let mut depth = 0;
    let mut actions = Vec::new();
    while !level.is_empty() && depth < max_depth {
        let mut next_level = Vec::new();
        for &at in &level {
            actions.clear();
            model.actions(&trail[at].0, &mut actions);
            for action in actions.drain(..) {
                let Some(state) = model.next(&trail[at].0, &action) else {
                    continue;
                };
                if seen.contains_key(&state) {
                    continue;
                }
                let index = trail.len();
                let why = model.broken(&state);
                seen.insert(state.clone(), index);
                trail.push((state, Some((at, action))));
                if let Some(why) = why {
                    return Outcome {
                        states: trail.len(),
                        depth: depth + 1,
                        complete: false,
                        counterexample: found(&trail, index, why),
                    };
                }
                next_level.push(index);
                if trail.len() >= max_states {
                    return Outcome {
                        states: trail.len(),
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
        states: trail.len(),
        depth,
        complete: level.is_empty(),
        counterexample: None,
    }
}
