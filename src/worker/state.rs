//! Shared handler state: values handed to the runtime once (a database pool, an HTTP client, a
//! configuration) and read by any task from its context by type, as axum handlers read
//! `State<T>`, instead of an `Arc` cloned into every closure. One value per type; a new value
//! of a type replaces the old one for the tasks that ask after it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

/// The values by type.
#[derive(Default)]
pub(crate) struct StateMap(RwLock<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl StateMap {
    /// Stores `value` as the state of type `T`, replacing any earlier one.
    pub(crate) fn set<T: Send + Sync + 'static>(&self, value: T) {
        self.0.write().insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The state of type `T`, if one was set.
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let any = self.0.read().get(&TypeId::of::<T>())?.clone();
        any.downcast::<T>().ok()
    }
}

impl std::fmt::Debug for StateMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMap")
            .field("types", &self.0.read().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::StateMap;

    #[derive(Debug, PartialEq)]
    struct Pool(u32);

    #[test]
    fn one_value_per_type_and_a_new_one_replaces_it() {
        let m = StateMap::default();
        assert!(m.get::<Pool>().is_none());
        m.set(Pool(1));
        m.set("a string is another type");
        assert_eq!(*m.get::<Pool>().expect("set"), Pool(1));
        let held = m.get::<Pool>().expect("set");
        m.set(Pool(2));
        assert_eq!(*m.get::<Pool>().expect("replaced"), Pool(2));
        assert_eq!(*held, Pool(1), "a task holding the old value keeps it");
        assert_eq!(*m.get::<&str>().expect("set"), "a string is another type");
    }
}
