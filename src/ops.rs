//! The operators' tools, on top of the shapes, never the other way
//! round. What each file holds is in the crate docs' table, [The source,
//! by layer](crate#the-source-by-layer).

pub(crate) mod check;
pub(crate) mod operator;

#[cfg(test)]
mod tests {
    /// Every room's scripts, together: each documents its keys, arguments
    /// and answers, and no two are the same script.
    #[test]
    fn every_script_documents_its_keys_and_arguments_and_is_distinct() {
        use crate::{engine, ops, shapes};
        let all = [
            engine::single::all(),
            engine::fair::all(),
            shapes::set::all(),
            shapes::rwlock::all(),
            shapes::semaphore::all(),
            shapes::election::all(),
            ops::operator::all(),
        ]
        .concat();
        assert_eq!(all.len(), 25);
        crate::members::script::check_all(&all);
    }
}
