//! Request bodies: a wire's own fields and the caller's extra fields (`.body_field(..)`), merged
//! without duplicate keys. An extra field wins: it replaces the wire's field of the same name, so a
//! caller can override anything the provider would send (`max_output_tokens`, `store`, even `model`).
//! Duplicate keys are not an option: servers disagree on which one counts, and strict ones refuse them.

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Map, Value};

/// Writes one of the body's own fields, unless `extra` replaces it.
pub(crate) fn put<M: SerializeMap, V: Serialize + ?Sized>(
    map: &mut M,
    extra: &Map<String, Value>,
    key: &str,
    value: &V,
) -> Result<(), M::Error> {
    if extra.contains_key(key) {
        return Ok(());
    }
    map.serialize_entry(key, value)
}

/// Writes the extra fields, after the body's own.
pub(crate) fn put_extra<M: SerializeMap>(
    map: &mut M,
    extra: &Map<String, Value>,
) -> Result<(), M::Error> {
    for (key, value) in extra {
        map.serialize_entry(key, value)?;
    }
    Ok(())
}
