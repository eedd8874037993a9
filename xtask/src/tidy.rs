//! Tidy checks over the workspace sources, run by `cargo test -p xtask` (and so by `cargo xtask ci`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::{Result, workspace_root};

/// Every `.rs` file under `crates/*/src` opens with a `//!` module doc, so that each module says what
/// it is for. All offenders are reported at once.
#[test]
fn every_source_file_starts_with_a_module_doc() -> Result {
    let root = workspace_root();
    let mut files = Vec::new();
    for entry in fs::read_dir(root.join("crates"))? {
        let src = entry?.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files)?;
        }
    }
    files.sort();

    let mut offenders = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file)?;
        let first = text.lines().map(str::trim).find(|line| !line.is_empty());
        if !first.is_some_and(|line| line.starts_with("//!")) {
            offenders.push(format!(
                "  {}",
                file.strip_prefix(root).unwrap_or(file).display()
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "these files do not start with a `//!` module doc comment:\n{}",
        offenders.join("\n")
    );
    Ok(())
}

/// Appends every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Crates that only adapter crates may pull in (DESIGN.md §1): `noetic-core` must build without them.
const ADAPTER_ONLY: &[&str] = &[
    "reqwest",
    "hyper",
    "sqlx",
    "nix",
    "opentelemetry",
    "opentelemetry_sdk",
];

/// `cargo tree -p noetic-core -e normal` names none of the adapter-only crates, so the core stays free
/// of network, database and OS-process dependencies.
#[test]
fn core_pulls_in_no_adapter_dependency() -> Result {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "noetic-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(root)
        .output()?;
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout)?;
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"noetic-core"),
        "unexpected cargo tree output:\n{tree}"
    );
    let found: Vec<&&str> = ADAPTER_ONLY
        .iter()
        .filter(|banned| names.contains(banned))
        .collect();
    assert!(
        found.is_empty(),
        "noetic-core depends on adapter-only crates {found:?}:\n{tree}"
    );
    Ok(())
}

/// The prefix of a code's meaning in a `CODES` table when nothing produces the code yet.
const RESERVED: &str = "*Reserved:";

/// A code is marked reserved in its `CODES` table exactly when no source constructs its variant, so
/// docs/errors.md never lists a code as live that nothing produces, and a code gains its real meaning
/// in the same change that starts producing it.
///
/// The variant of each code comes from the `Enum::Variant { .. } => "CODE"` arms of `code()` in the
/// crate's `error.rs`; a variant counts as constructed when `Enum::Variant` (or `Self::Variant` in
/// `error.rs`) appears in any crate's `src` on a line where no `=>` follows it (so not as a match
/// pattern) and not inside `matches!`.
#[test]
fn reserved_codes_are_exactly_the_codes_nothing_produces() -> Result {
    let root = workspace_root();
    let mut sources = Vec::new();
    for entry in fs::read_dir(root.join("crates"))? {
        let src = entry?.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut sources)?;
        }
    }
    let texts: Vec<(PathBuf, String)> = sources
        .into_iter()
        .map(|path| fs::read_to_string(&path).map(|text| (path, text)))
        .collect::<std::io::Result<_>>()?;

    let mut wrong = Vec::new();
    for krate in crate::codegen::collect(root)? {
        let error_rs = root.join("crates").join(&krate.name).join("src/error.rs");
        let arms = code_arms(&fs::read_to_string(&error_rs)?);
        for code in &krate.codes {
            let Some((enum_name, variant, _)) = arms.iter().find(|arm| arm.2 == code.code) else {
                continue;
            };
            let variant = &variant[..];
            let produced = texts.iter().any(|(path, text)| {
                let self_too = *path == error_rs;
                text.lines().any(|line| {
                    constructs(line, &format!("{enum_name}::{variant}"))
                        || (self_too && constructs(line, &format!("Self::{variant}")))
                })
            });
            let reserved = code.meaning.starts_with(RESERVED);
            if produced == reserved {
                wrong.push(format!(
                    "  {}: `{}` is {} but its meaning {} `{RESERVED}`",
                    krate.name,
                    code.code,
                    if produced {
                        "produced"
                    } else {
                        "never produced"
                    },
                    if reserved {
                        "starts with"
                    } else {
                        "does not start with"
                    },
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "fix these CODES entries, then run `cargo xtask codegen`:\n{}",
        wrong.join("\n")
    );
    Ok(())
}

/// `(enum, variant, code)` for every `Enum::Variant ... => "CODE"` line of an `error.rs`.
fn code_arms(source: &str) -> Vec<(String, String, String)> {
    source
        .lines()
        .filter_map(|line| {
            let (pattern, code) = line.trim().split_once("=> \"")?;
            let code = code.strip_suffix("\",")?;
            let path = pattern.split_whitespace().next()?;
            let (enum_name, variant) = path.split_once("::")?;
            Some((enum_name.to_owned(), variant.to_owned(), code.to_owned()))
        })
        .collect()
}

/// Whether `line` builds `path` (an `Enum::Variant`) rather than matching on it.
fn constructs(line: &str, path: &str) -> bool {
    let mut rest = line;
    while let Some(at) = rest.find(path) {
        let after = &rest[at + path.len()..];
        let whole_word = !after.starts_with(|c: char| c.is_alphanumeric() || c == '_');
        if whole_word && !after.contains("=>") && !line.contains("matches!") {
            return true;
        }
        rest = after;
    }
    false
}

/// The folders of `noetic-core/src` that sit below the harness: they get what they need as
/// parameters (a `Runtime`, the sessions' task tracker), never an `AgentHarness`.
const BELOW_THE_HARNESS: &[&str] = &["session", "workflow", "step", "layer", "channel"];

/// The core's source files with their path relative to `crates/noetic-core/src` (`/`-separated).
fn core_sources() -> Result<Vec<(String, String)>> {
    let src = workspace_root().join("crates/noetic-core/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files)?;
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap_or(&file);
        let relative = relative
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        out.push((relative, fs::read_to_string(&file)?));
    }
    Ok(out)
}

/// The lines of `source` that are code, not comments (doc links may name anything).
fn code_lines(source: &str) -> impl Iterator<Item = (usize, &str)> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(number, line)| (number + 1, line))
}

/// The top-level module a core source file belongs to: `context/mod.rs` → `context`,
/// `exec.rs` → `exec`.
fn top_module(relative: &str) -> &str {
    let first = relative.split('/').next().unwrap_or(relative);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// Nothing below `harness/` names `AgentHarness` in code: running steps reach configuration only
/// through the `Runtime`.
#[test]
fn nothing_below_the_harness_names_agent_harness() -> Result {
    let mut offenders = Vec::new();
    for (relative, source) in core_sources()? {
        if !BELOW_THE_HARNESS.contains(&top_module(&relative)) {
            continue;
        }
        for (number, line) in code_lines(&source) {
            if line.contains("AgentHarness") {
                offenders.push(format!("  {relative}:{number}: {}", line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "these lines below harness/ name AgentHarness (pass a Runtime or what they need instead):\n{}",
        offenders.join("\n")
    );
    Ok(())
}

/// An inherent `impl Context` block lives only in `context/`, an `impl AgentHarness` block only in
/// `harness/`, so each type's surface is found in one place.
#[test]
fn impl_blocks_of_context_and_agent_harness_stay_in_their_home() -> Result {
    let homes = [("Context", "context"), ("AgentHarness", "harness")];
    let mut offenders = Vec::new();
    for (relative, source) in core_sources()? {
        for (number, line) in code_lines(&source) {
            let Some(rest) = line.trim_start().strip_prefix("impl") else {
                continue;
            };
            // `impl Foo {` or `impl<'a> Foo {`; trait impls (`impl X for Foo`) may live anywhere.
            let rest = match rest.strip_prefix('<') {
                Some(generic) => generic.split_once('>').map_or("", |(_, after)| after),
                None => rest,
            };
            let Some(name) = rest.trim_start().split([' ', '{', '<']).next() else {
                continue;
            };
            if rest.contains(" for ") {
                continue;
            }
            for (ty, home) in homes {
                if name == ty && top_module(&relative) != home {
                    offenders.push(format!(
                        "  {relative}:{number}: `impl {ty}` outside {home}/"
                    ));
                }
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
    Ok(())
}

/// The modules of noetic-core allowed to import one another in a cycle: the context, the runtime it
/// holds, the run protocol, the steps it runs (loop predicates included), and the layer and tool
/// hooks that take a context (ARCHITECTURE.md). Every other module — sessions included — is outside
/// every cycle.
const KERNEL: &[&str] = &["context", "runtime", "exec", "step", "layer", "tool"];

/// The import graph of noetic-core's top-level modules, from the `crate::…` paths in code: `use`
/// lines and inline paths, with the crate root's re-exports (`crate::{Context, Result}`) resolved to
/// their modules.
fn core_import_graph()
-> Result<std::collections::BTreeMap<String, std::collections::BTreeSet<String>>> {
    let sources = core_sources()?;
    let modules: std::collections::BTreeSet<String> = sources
        .iter()
        .filter(|(relative, _)| relative != "lib.rs")
        .map(|(relative, _)| top_module(relative).to_owned())
        .collect();
    let mut reexports = std::collections::BTreeMap::new();
    if let Some((_, lib)) = sources.iter().find(|(relative, _)| relative == "lib.rs") {
        for statement in lib.split(';') {
            let Some(path) = statement.trim().strip_prefix("pub use ") else {
                continue;
            };
            let Some((module, items)) = path.split_once("::") else {
                continue;
            };
            for item in items
                .trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace())
                .split(',')
            {
                let name = item.rsplit(" as ").next().unwrap_or(item).trim();
                if !name.is_empty() {
                    reexports.insert(name.to_owned(), module.trim().to_owned());
                }
            }
        }
    }
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = modules
        .iter()
        .map(|module| (module.clone(), Default::default()))
        .collect();
    for (relative, source) in &sources {
        if relative == "lib.rs" {
            continue;
        }
        let from = top_module(relative);
        let code: String = code_lines(source)
            .map(|(_, line)| format!("{line}\n"))
            .collect();
        for (start, _) in code.match_indices("crate::") {
            if code[..start].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue; // `noetic_crate::` or similar
            }
            let rest = &code[start + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => {
                    // The first segment of each top-level entry of the group.
                    let mut names = Vec::new();
                    let mut depth = 0usize;
                    let mut at_entry = true;
                    for (offset, c) in group.char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => break,
                            '}' => depth -= 1,
                            ',' if depth == 0 => at_entry = true,
                            c if at_entry && (c.is_alphanumeric() || c == '_') => {
                                let word = &group[offset..];
                                let end = word
                                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                                    .unwrap_or(word.len());
                                names.push(&word[..end]);
                                at_entry = false;
                            }
                            _ => {}
                        }
                    }
                    names
                }
                None => {
                    let end = rest
                        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    vec![&rest[..end]]
                }
            };
            for name in names {
                let to = if modules.contains(name) {
                    Some(name.to_owned())
                } else {
                    reexports.get(name).cloned()
                };
                if let Some(to) = to.filter(|to| to != from) {
                    graph.entry(from.to_owned()).or_default().insert(to);
                }
            }
        }
    }
    Ok(graph)
}

/// The strongly connected components of `graph` with more than one module (Tarjan).
fn cycles(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        index: std::collections::BTreeMap<&'g str, usize>,
        low: std::collections::BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(state: &mut State<'g>, node: &'g str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        let graph = state.graph;
        for to in graph.get(node).into_iter().flatten() {
            let to = to.as_str();
            if !state.index.contains_key(to) {
                visit(state, to);
                let low = state.low[node].min(state.low[to]);
                state.low.insert(node, low);
            } else if state.stack.contains(&to) {
                let low = state.low[node].min(state.index[to]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: Default::default(),
        low: Default::default(),
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// noetic-core's top-level modules import one another in a cycle only inside the named kernel:
/// the leaves (items, usage, errors, events, the model seam, steering vocabulary, step kinds,
/// connections, adapters, channels, ids) and everything above the kernel (harness, workflow) stay
/// out of every cycle.
#[test]
fn core_modules_form_no_cycle_outside_the_kernel() -> Result {
    let graph = core_import_graph()?;
    assert!(
        graph
            .get("context")
            .is_some_and(|to| to.contains("runtime")),
        "the graph must see `context` importing `runtime`: {graph:?}"
    );
    let outside: Vec<String> = cycles(&graph)
        .into_iter()
        .flat_map(|cycle| {
            let members = cycle.join(", ");
            cycle
                .into_iter()
                .filter(|module| !KERNEL.contains(&module.as_str()))
                .map(move |module| format!("  {module} (in the cycle {members})"))
        })
        .collect();
    assert!(
        outside.is_empty(),
        "these modules are in an import cycle outside the kernel {KERNEL:?}:\n{}",
        outside.join("\n")
    );
    Ok(())
}

#[test]
fn the_cycle_finder_sees_a_cycle_and_ignores_a_chain() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            Default::default();
        for (from, to) in edges {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
            graph.entry((*to).to_owned()).or_default();
        }
        graph
    };
    assert_eq!(
        cycles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        [["a", "b", "c"]]
    );
    assert!(cycles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
}
