//! Tool schemas made safe for OpenAI's strict function calling.
//!
//! Strict mode guarantees arguments match the schema, but only accepts a subset of JSON Schema: every
//! object must set `additionalProperties: false` and list *every* property in `required`. A property
//! that was optional therefore becomes required-but-nullable, which keeps its meaning (the model sends
//! `null` instead of leaving it out). Keywords strict mode rejects (`default`, `$schema`) are dropped.

use serde_json::{Map, Value, json};

/// A copy of `schema` that strict mode accepts, with the same meaning.
pub fn strict_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    make_strict(&mut schema);
    schema
}

fn make_strict(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    map.remove("default");
    map.remove("$schema");
    for key in ["anyOf", "allOf", "oneOf", "prefixItems"] {
        if let Some(Value::Array(branches)) = map.get_mut(key) {
            branches.iter_mut().for_each(make_strict);
        }
    }
    if let Some(items) = map.get_mut("items") {
        make_strict(items);
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(key) {
            defs.values_mut().for_each(make_strict);
        }
    }
    let is_object =
        map.get("type").and_then(Value::as_str) == Some("object") || map.contains_key("properties");
    if !is_object {
        return;
    }
    map.insert("additionalProperties".to_owned(), Value::Bool(false));
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Object(properties)) = map.get_mut("properties") else {
        map.insert("properties".to_owned(), Value::Object(Map::new()));
        map.insert("required".to_owned(), json!([]));
        return;
    };
    let mut all = Vec::with_capacity(properties.len());
    for (name, property) in properties.iter_mut() {
        make_strict(property);
        if !required.contains(name) {
            make_nullable(property);
        }
        all.push(Value::String(name.clone()));
    }
    map.insert("required".to_owned(), Value::Array(all));
}

fn make_nullable(property: &mut Value) {
    let Value::Object(map) = property else { return };
    match map.get_mut("type") {
        Some(Value::String(kind)) if kind != "null" => {
            let kind = std::mem::take(kind);
            map.insert("type".to_owned(), json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) => {
            if !kinds.iter().any(|kind| kind == "null") {
                kinds.push(json!("null"));
            }
        }
        Some(_) => {}
        None => {
            let original = std::mem::take(map);
            map.insert(
                "anyOf".to_owned(),
                json!([Value::Object(original), {"type": "null"}]),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_properties_become_required_and_nullable() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "default": 10},
                "tags": {"type": ["array", "null"], "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "mode": {"enum": ["a", "b"]}
            },
            "required": ["query"]
        });
        let strict = strict_schema(&schema);
        assert_eq!(strict["additionalProperties"], false);
        assert_eq!(
            strict["required"],
            json!(["limit", "mode", "query", "tags"])
        );
        assert_eq!(strict["properties"]["query"]["type"], "string");
        assert_eq!(
            strict["properties"]["limit"],
            json!({"type": ["integer", "null"]})
        );
        assert_eq!(
            strict["properties"]["tags"]["type"],
            json!(["array", "null"])
        );
        assert_eq!(
            strict["properties"]["tags"]["items"]["additionalProperties"],
            false
        );
        assert_eq!(
            strict["properties"]["tags"]["items"]["required"],
            json!(["name"])
        );
        assert_eq!(
            strict["properties"]["mode"],
            json!({"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]})
        );
        assert!(strict.get("$schema").is_none());
    }
}
