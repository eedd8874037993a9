//! Reading JSON values at a pointer: the helpers of `parse.rs`, each returning `WORKFLOW_INVALID`
//! with the pointer of the value it was given and what it expected.

use serde_json::{Map, Value};

use crate::{Error, Result};

/// The largest integer the schema allows (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// A `WORKFLOW_INVALID` error at `path`.
pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::WorkflowInvalid {
        path: path.into(),
        message: message.into(),
    }
}

/// `path` extended by one reference token, escaped per RFC 6901.
pub(crate) fn join(path: &str, token: &str) -> String {
    format!("{path}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// An object being read, with its pointer.
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    pub(crate) path: &'a str,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(value: &'a Value, path: &'a str, what: &str) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Fields { map, path }),
            other => Err(invalid(
                path,
                format!("expected {what}, got {}", type_name(other)),
            )),
        }
    }

    /// The `kind` field, which must be present and a string.
    pub(crate) fn kind(&self) -> Result<&'a str> {
        let (value, path) = self.required("kind")?;
        value
            .as_str()
            .ok_or_else(|| invalid(path, format!("expected a string, got {}", type_name(value))))
    }

    /// No fields beyond `allowed`; every field of `required` present.
    pub(crate) fn check(&self, allowed: &[&str], required: &[&str]) -> Result<()> {
        self.only(allowed)?;
        for key in required {
            self.required(key)?;
        }
        Ok(())
    }

    pub(crate) fn only(&self, allowed: &[&str]) -> Result<()> {
        match self.map.keys().find(|key| !allowed.contains(&key.as_str())) {
            Some(key) => Err(invalid(
                join(self.path, key),
                format!(
                    "unknown field `{key}`; expected one of {}",
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    pub(crate) fn required(&self, key: &str) -> Result<(&'a Value, String)> {
        match self.map.get(key) {
            Some(value) => Ok((value, join(self.path, key))),
            None => Err(invalid(
                self.path,
                format!("missing required field `{key}`"),
            )),
        }
    }

    pub(crate) fn get<T>(
        &self,
        key: &str,
        read: impl FnOnce(&'a Value, &str) -> Result<T>,
    ) -> Result<T> {
        let (value, path) = self.required(key)?;
        read(value, &path)
    }

    pub(crate) fn optional<T>(
        &self,
        key: &str,
        read: impl FnOnce(&'a Value, &str) -> Result<T>,
    ) -> Result<Option<T>> {
        match self.map.get(key) {
            Some(value) => read(value, &join(self.path, key)).map(Some),
            None => Ok(None),
        }
    }

    /// The `id` field: a non-blank string.
    pub(crate) fn id(&self) -> Result<String> {
        self.get("id", |value, path| {
            let id = string(value, path)?;
            if id.trim().is_empty() {
                return Err(invalid(path, "expected a non-blank step id"));
            }
            Ok(id)
        })
    }
}

/// A lower bound on a number.
#[derive(Clone, Copy)]
pub(crate) enum Min {
    /// `≥ bound`.
    AtLeast(f64),
    /// `> bound`.
    Above(f64),
}

pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn string(value: &Value, path: &str) -> Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(path, format!("expected a string, got {}", type_name(value))))
}

pub(crate) fn non_empty(value: &Value, path: &str) -> Result<String> {
    let text = string(value, path)?;
    if text.is_empty() {
        return Err(invalid(path, "expected a non-empty string"));
    }
    Ok(text)
}

pub(crate) fn object(value: &Value, path: &str) -> Result<Map<String, Value>> {
    match value {
        Value::Object(map) => Ok(map.clone()),
        other => Err(invalid(
            path,
            format!("expected an object, got {}", type_name(other)),
        )),
    }
}

pub(crate) fn choice<'v>(value: &'v Value, path: &str, options: &[&str]) -> Result<&'v str> {
    match value.as_str() {
        Some(text) if options.contains(&text) => Ok(text),
        _ => Err(invalid(
            path,
            format!("expected one of {}, got {value}", options.join(", ")),
        )),
    }
}

pub(crate) fn number(value: &Value, path: &str, min: Min) -> Result<f64> {
    let Some(number) = value.as_f64() else {
        return Err(invalid(
            path,
            format!("expected a number, got {}", type_name(value)),
        ));
    };
    match min {
        Min::AtLeast(bound) if number < bound => Err(invalid(
            path,
            format!("expected a number ≥ {bound}, got {number}"),
        )),
        Min::Above(bound) if number <= bound => Err(invalid(
            path,
            format!("expected a number > {bound}, got {number}"),
        )),
        _ => Ok(number),
    }
}

/// `true` or `false`.
pub(crate) fn boolean(value: &Value, path: &str) -> Result<bool> {
    value.as_bool().ok_or_else(|| {
        invalid(
            path,
            format!("expected a boolean, got {}", type_name(value)),
        )
    })
}

/// `value` as an integer in `0..=2^53 − 1`, when it is one (a float with no fraction counts, as in
/// JSON Schema).
fn safe_integer(value: &Value) -> Option<u64> {
    let integer = match value {
        Value::Number(number) => number.as_u64().or_else(|| {
            number
                .as_f64()
                .filter(|float| {
                    float.fract() == 0.0 && *float >= 0.0 && *float <= MAX_SAFE_INTEGER as f64
                })
                .map(|float| float as u64)
        }),
        _ => None,
    };
    integer.filter(|integer| *integer <= MAX_SAFE_INTEGER)
}

/// An integer in `1..=2^53 − 1` (a float with no fraction counts, as in JSON Schema).
pub(crate) fn positive_integer(value: &Value, path: &str) -> Result<u64> {
    match safe_integer(value) {
        Some(integer) if integer >= 1 => Ok(integer),
        _ => Err(invalid(
            path,
            format!("expected an integer ≥ 1, got {value}"),
        )),
    }
}

/// An integer in `0..=2^53 − 1` (a float with no fraction counts, as in JSON Schema).
pub(crate) fn non_negative_integer(value: &Value, path: &str) -> Result<u64> {
    safe_integer(value)
        .ok_or_else(|| invalid(path, format!("expected an integer ≥ 0, got {value}")))
}

/// An array of at least `min_items` items, each read by `read` at its own pointer.
pub(crate) fn items<T>(
    value: &Value,
    path: &str,
    min_items: usize,
    read: impl Fn(&Value, &str) -> Result<T>,
) -> Result<Vec<T>> {
    let Value::Array(values) = value else {
        return Err(invalid(
            path,
            format!("expected an array, got {}", type_name(value)),
        ));
    };
    if values.len() < min_items {
        return Err(invalid(
            path,
            format!("expected at least {min_items} item(s), got none"),
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(index, item)| read(item, &join(path, &index.to_string())))
        .collect()
}
