//! Hydrating `inParallel` nodes: static `paths`, or `each` over an array selected from the input, and
//! the `merge` strategies.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use super::document::{InParallelNode, MergeStrategy, ParallelMode};
use super::fields::{invalid, join};
use super::hydrate::{Hydrator, WorkflowStep, constant, erase, text_of};
use crate::Result;
use crate::context::Context;
use crate::step::{ParallelBuilder, Settled, in_parallel, run_code, sequence};

impl Hydrator {
    pub(super) fn in_parallel(
        self: &Arc<Self>,
        node: &InParallelNode,
        path: &str,
        refs: &mut Vec<String>,
    ) -> Result<WorkflowStep> {
        let strategy = node.merge.unwrap_or(MergeStrategy::Last);
        let concurrency = node
            .concurrency
            .map(|limit| usize::try_from(limit).unwrap_or(usize::MAX));
        let finish = |mut builder: ParallelBuilder<Value, Value>| {
            if let Some(limit) = concurrency {
                builder = builder.concurrency(limit);
            }
            match node.mode {
                ParallelMode::All => {
                    erase(builder.all(move |values: Vec<Value>| merge(strategy, values)))
                }
                ParallelMode::Race => erase(builder.race()),
                ParallelMode::Settle => {
                    erase(builder.settle(move |outcomes: Vec<Settled<Value>>| {
                        let fulfilled = outcomes
                            .into_iter()
                            .filter_map(|outcome| match outcome {
                                Settled::Fulfilled { value, .. } => Some(value),
                                Settled::Rejected { .. } => None,
                            })
                            .collect();
                        merge(strategy, fulfilled)
                    }))
                }
            }
        };
        if let Some(paths) = &node.paths {
            let paths_path = join(path, "paths");
            let mut builder = in_parallel::<Value, Value>(node.id.as_str());
            for (index, branch) in paths.iter().enumerate() {
                let step = self.node(branch, &join(&paths_path, &index.to_string()), refs)?;
                builder = builder.path(step);
            }
            return Ok(finish(builder));
        }
        let Some(template) = node.each.as_deref() else {
            return Err(invalid(path, "an inParallel needs `paths` or `each`"));
        };
        // Hydrate once now, so that errors surface before anything runs; each path then gets its own
        // copy (predicates may hold state), falling back to this one.
        let each_path = join(path, "each");
        let prototype = self.node(template, &each_path, refs)?;
        let id = node.id.clone();
        let over = node.over.clone();
        let select = run_code(format!("{id}/over"), move |input: Value, _: Context| {
            let over = over.clone();
            async move { select_array(input, over.as_deref()) }
        });
        let hydrator = Arc::clone(self);
        let template = template.clone();
        let ancestry = refs.clone();
        let paths_id = id.clone();
        let inner = in_parallel::<Value, Value>(format!("{id}/each")).paths(
            move |input: &Value, _: &Context| {
                let elements = input.as_array().map(Vec::as_slice).unwrap_or_default();
                elements
                    .iter()
                    .enumerate()
                    .map(|(index, element)| {
                        let body = hydrator
                            .node(&template, &each_path, &mut ancestry.clone())
                            .unwrap_or_else(|_| prototype.clone());
                        let path_id = format!("{paths_id}/each/{index}");
                        let item = constant(format!("{path_id}/item"), element.clone());
                        erase(sequence(path_id).step(item).step(body))
                    })
                    .collect()
            },
        );
        Ok(erase(sequence(id).step(select).step(finish(inner))))
    }
}

fn merge(strategy: MergeStrategy, values: Vec<Value>) -> Value {
    match strategy {
        MergeStrategy::First => values.into_iter().next().unwrap_or(Value::Null),
        MergeStrategy::Last => values.into_iter().last().unwrap_or(Value::Null),
        MergeStrategy::Concat => {
            let texts: Vec<Cow<'_, str>> = values.iter().map(text_of).collect();
            Value::String(texts.join("\n\n"))
        }
    }
}

/// The array an `each` runs over: `over` is a JSON pointer when it starts with `/`, else a field name;
/// without it the input itself. A string input is parsed as JSON first.
fn select_array(input: Value, over: Option<&str>) -> std::result::Result<Value, String> {
    let input = match input {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|source| format!("the input is a string that is not JSON: {source}"))?,
        other => other,
    };
    let selected = match over {
        None => Some(&input),
        Some(pointer) if pointer.starts_with('/') => input.pointer(pointer),
        Some(field) => input.get(field),
    };
    match selected {
        Some(array @ Value::Array(_)) => Ok(array.clone()),
        _ => Err(match over {
            Some(over) => format!("`over` ({over}) does not select an array in the input"),
            None => "the input is not an array (set `over` to select one)".to_owned(),
        }),
    }
}
