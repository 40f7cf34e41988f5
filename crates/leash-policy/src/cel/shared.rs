//! [`Shared`]: a map or list value whose copies share one allocation.
//!
//! cel 0.15 copies values deeply: concatenating lists clones their elements,
//! binding a variable clones its value, reading a borrowed value into an
//! owned one clones it. On Kubernetes objects (a container list concatenated
//! into a variable, as nearly every Pod Security policy does) that copying
//! was most of an evaluation's time. Values are immutable once built, so a
//! copy may as well be the same value: `Shared` wraps a map or list in an
//! `Arc` and delegates every capability to it; its `clone_as_boxed` is a
//! reference-count increment.
//!
//! It stays invisible to the interpreter: it reports the inner value's type
//! and hands out the inner built-in value for downcasts (`as_builtin`,
//! `as_any`), so functions, overloads and the conversion to
//! [`cel::Value`] see the map or list itself. The two methods that move the
//! value out of its box (`into_builtin`, `into_indexer`) take the inner
//! value when this is its last reference and copy it otherwise.
//!
//! `as_builtin`/`into_builtin` are hidden from cel's documentation but
//! public; they are what its built-in types answer downcasts with, and
//! `Shared` answers with the inner value's answer (pinned to cel 0.15).

use std::any::Any;
use std::sync::Arc;

use cel::common::traits::{
    Adder, Comparer, Container, Divider, Indexer, Iterable, Modder, Multiplier, Negator, Sizer,
    Subtractor, Zeroer,
};
use cel::common::types::Type;
use cel::common::value::{Builtin, BuiltinRef, Val};

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Shared<'v>(Arc<Box<dyn Val + 'v>>);

impl<'v> Shared<'v> {
    /// Wraps a value.
    pub(crate) fn boxed(v: Box<dyn Val + 'v>) -> Box<dyn Val + 'v> {
        Box::new(Shared(Arc::new(v)))
    }

    /// The inner value, moved out when this is its last reference.
    fn into_inner(self) -> Box<dyn Val + 'v> {
        match Arc::try_unwrap(self.0) {
            Ok(v) => v,
            Err(shared) => shared.as_ref().clone_as_boxed(),
        }
    }
}

impl<'w> Val for Shared<'w> {
    fn get_type(&self) -> &Type {
        self.0.get_type()
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        // The type is the inner value's (see `Val::cel_type`: a type whose
        // CEL type varies per value has no static one and is never named in
        // an overload).
        unreachable!("Shared has no static CEL type")
    }

    fn as_adder<'b, 'v>(&'b self) -> Option<&'b (dyn Adder + 'v)>
    where
        Self: 'v,
    {
        self.0.as_adder()
    }

    fn as_comparer(&self) -> Option<&dyn Comparer> {
        self.0.as_comparer()
    }

    fn as_container(&self) -> Option<&dyn Container> {
        self.0.as_container()
    }

    fn as_divider<'b, 'v>(&'b self) -> Option<&'b (dyn Divider + 'v)>
    where
        Self: 'v,
    {
        self.0.as_divider()
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        self.0.as_indexer()
    }

    fn into_indexer<'v>(self: Box<Self>) -> Option<Box<dyn Indexer + 'v>>
    where
        Self: 'v,
    {
        self.into_inner().into_indexer()
    }

    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        self.0.as_iterable()
    }

    fn as_modder<'b, 'v>(&'b self) -> Option<&'b (dyn Modder + 'v)>
    where
        Self: 'v,
    {
        self.0.as_modder()
    }

    fn as_multiplier<'b, 'v>(&'b self) -> Option<&'b (dyn Multiplier + 'v)>
    where
        Self: 'v,
    {
        self.0.as_multiplier()
    }

    fn as_negator<'b, 'v>(&'b self) -> Option<&'b (dyn Negator + 'v)>
    where
        Self: 'v,
    {
        self.0.as_negator()
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.0.as_sizer()
    }

    fn as_subtractor<'b, 'v>(&'b self) -> Option<&'b (dyn Subtractor + 'v)>
    where
        Self: 'v,
    {
        self.0.as_subtractor()
    }

    fn as_zeroer(&self) -> Option<&dyn Zeroer> {
        self.0.as_zeroer()
    }

    fn equals(&self, other: &dyn Val) -> bool {
        self.0.equals(other)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(Shared(self.0.clone()))
    }

    fn as_any(&self) -> Option<&dyn Any> {
        self.0.as_any()
    }

    fn as_builtin<'b, 'v>(&'b self) -> BuiltinRef<'b, 'v>
    where
        Self: 'v,
    {
        self.0.as_builtin()
    }

    fn into_builtin<'v>(self: Box<Self>) -> Option<Builtin<'v>>
    where
        Self: 'v,
    {
        self.into_inner().into_builtin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{from_json, to_val};
    use cel::Value;
    use cel::common::types::CelList;
    use serde_json::json;

    #[test]
    fn a_shared_value_is_its_inner_value_to_the_interpreter() {
        let v = json!({"a": [1, {"b": "c"}], "d": {"e": true}});
        let shared = Shared::boxed(to_val(&v));
        assert_eq!(Value::try_from(shared.as_ref()).unwrap(), from_json(&v));
        let copy = shared.clone();
        assert!(copy.equals(shared.as_ref()) && shared.equals(copy.as_ref()));
        assert_eq!(copy.get_type(), shared.get_type());
        let list = Shared::boxed(to_val(&json!([1, 2])));
        assert!(
            list.downcast_ref::<CelList>().is_some(),
            "downcasts reach the list"
        );
        assert!(list.into_builtin().is_some());
    }
}
