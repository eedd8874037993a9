//! Reading a crate's `CODES` table out of its `src/error.rs` source text.
//!
//! The table has the form
//!
//! ```text
//! pub const CODES: &[(&str, &str)] = &[
//!     ("NO_STEP_CONFIGURED", "`execute()` was called on a harness built without an agent graph."),
//!     ...
//! ];
//! ```
//!
//! xtask reads the source rather than linking the crates so that it stays dependency-free and works
//! even while a crate does not compile. The entries are read token by token, not line by line, because
//! rustfmt splits an entry that is too long over several lines.

/// One entry of a `CODES` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Code {
    /// The stable `SCREAMING_SNAKE` code.
    pub(crate) code: String,
    /// Its one-line meaning (markdown), with string escapes resolved.
    pub(crate) meaning: String,
}

/// The declaration that opens a table; anything else starting with `pub const CODES` is an error.
const TABLE_START: &str = "pub const CODES: &[(&str, &str)] = &[";

/// Parses the `CODES` table of an `error.rs` source.
///
/// Returns `Ok(None)` when the source declares no `pub const CODES`, and an error with a line number
/// when it declares one in another form, or an entry is malformed, or a code is invalid or repeated.
pub(crate) fn parse(source: &str) -> Result<Option<Vec<Code>>, String> {
    let Some(start) = table_start(source)? else {
        return Ok(None);
    };
    let mut cursor = Cursor { source, pos: start };
    let mut codes: Vec<Code> = Vec::new();
    while !cursor.eat(']') {
        cursor.expect('(')?;
        let entry_pos = cursor.pos;
        let code = cursor.string()?;
        cursor.expect(',')?;
        let meaning = cursor.string()?;
        cursor.eat(',');
        cursor.expect(')')?;
        cursor.eat(',');

        let valid = code.starts_with(|c: char| c.is_ascii_uppercase())
            && code
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(
                cursor.error_at(entry_pos, &format!("code `{code}` is not SCREAMING_SNAKE"))
            );
        }
        if codes.iter().any(|existing| existing.code == code) {
            return Err(cursor.error_at(entry_pos, &format!("code `{code}` is listed twice")));
        }
        codes.push(Code { code, meaning });
    }
    Ok(Some(codes))
}

/// The byte offset just after [`TABLE_START`], if the source declares a table.
fn table_start(source: &str) -> Result<Option<usize>, String> {
    let mut offset = 0;
    for (index, line) in source.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("pub const CODES") {
            return match trimmed.strip_prefix(TABLE_START) {
                Some(after) => Ok(Some(offset + line.len() - after.len())),
                None => Err(format!(
                    "line {}: expected the table to open with `{TABLE_START}`",
                    index + 1
                )),
            };
        }
        offset += line.len();
    }
    Ok(None)
}

/// A position in the source, with just enough lexing for the table's tokens.
struct Cursor<'a> {
    source: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        &self.source[self.pos..]
    }

    /// Skips whitespace and `//` comments (a code can be commented out).
    fn skip_trivia(&mut self) {
        loop {
            let rest = self.rest();
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            if !trimmed.starts_with("//") {
                return;
            }
            self.pos += trimmed.find('\n').unwrap_or(trimmed.len());
        }
    }

    /// Consumes `token` if it comes next.
    fn eat(&mut self, token: char) -> bool {
        self.skip_trivia();
        let found = self.rest().starts_with(token);
        if found {
            self.pos += token.len_utf8();
        }
        found
    }

    fn expect(&mut self, token: char) -> Result<(), String> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error_at(self.pos, &format!("expected `{token}`")))
        }
    }

    /// Reads a `"..."` literal, resolving `\"`, `\\`, `\'` and `\`-newline continuations.
    ///
    /// Other escapes (`\n`, `\u{..}`) are rejected: a meaning is one markdown table cell.
    fn string(&mut self) -> Result<String, String> {
        self.skip_trivia();
        let start = self.pos;
        if !self.rest().starts_with('"') {
            return Err(self.error_at(start, "expected a string literal"));
        }
        let mut value = String::new();
        let mut chars = self.rest().char_indices().skip(1).peekable();
        while let Some((index, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += index + 1;
                    return Ok(value);
                }
                '\\' => match chars.next() {
                    Some((_, '"')) => value.push('"'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '\'')) => value.push('\''),
                    // Rust drops the newline and the next line's leading whitespace.
                    Some((_, '\n' | '\r')) => {
                        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
                    }
                    other => {
                        let escape = other.map_or(String::new(), |(_, c)| c.to_string());
                        return Err(
                            self.error_at(start, &format!("unsupported escape `\\{escape}`"))
                        );
                    }
                },
                c => value.push(c),
            }
        }
        Err(self.error_at(start, "unterminated string literal"))
    }

    fn error_at(&self, pos: usize, message: &str) -> String {
        let line = self.source[..pos].matches('\n').count() + 1;
        format!("line {line}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::{Code, parse};

    fn code(code: &str, meaning: &str) -> Code {
        Code {
            code: code.to_owned(),
            meaning: meaning.to_owned(),
        }
    }

    #[test]
    fn reads_one_entry_per_line_with_backticks_and_escaped_quotes() {
        let source = r#"//! Errors.

/// Every code.
pub const CODES: &[(&str, &str)] = &[
    ("NO_STEP_CONFIGURED", "`execute()` was called on a harness built without an agent graph."),
    ("MISSING_MODEL", "Set `.model(\"vendor/model\")`; a \\ stays."),
];

pub enum Error {}
"#;
        assert_eq!(
            parse(source),
            Ok(Some(vec![
                code(
                    "NO_STEP_CONFIGURED",
                    "`execute()` was called on a harness built without an agent graph."
                ),
                code(
                    "MISSING_MODEL",
                    "Set `.model(\"vendor/model\")`; a \\ stays."
                ),
            ]))
        );
    }

    #[test]
    fn reads_entries_split_by_rustfmt_comments_and_continuations() {
        let source = "#[rustfmt::skip]\n    pub const CODES: &[(&str, &str)] = &[\n    (\n        \"LONG\",\n        \"A long meaning, \\\n         continued.\",\n    ),\n    // (\"RETIRED\", \"a comment, not a code\"),\n    (\"LAST\", \"no trailing comma\")\n];\n";
        assert_eq!(
            parse(source),
            Ok(Some(vec![
                code("LONG", "A long meaning, continued."),
                code("LAST", "no trailing comma")
            ]))
        );
    }

    #[test]
    fn a_source_without_a_table_has_no_codes() {
        assert_eq!(
            parse("//! No codes here.\n/// `pub const CODES` in a doc.\npub struct X;\n"),
            Ok(None)
        );
    }

    #[test]
    fn malformed_tables_are_errors_with_line_numbers() {
        let other_form = "pub const CODES: &[Code] = &[];\n";
        assert!(parse(other_form).is_err_and(|e| e.starts_with("line 1:")));

        let unterminated = "pub const CODES: &[(&str, &str)] = &[\n    (\"A\", \"oops),\n];\n";
        assert!(parse(unterminated).is_err_and(|e| e.contains("unterminated")));

        let newline_escape = "pub const CODES: &[(&str, &str)] = &[\n    (\"A\", \"x\\ny\"),\n];\n";
        assert_eq!(
            parse(newline_escape),
            Err("line 2: unsupported escape `\\n`".to_owned())
        );

        let missing_meaning = "pub const CODES: &[(&str, &str)] = &[\n    (\"A\"),\n];\n";
        assert_eq!(
            parse(missing_meaning),
            Err("line 2: expected `,`".to_owned())
        );
    }

    #[test]
    fn codes_must_be_screaming_snake_and_unique() {
        let lower = "pub const CODES: &[(&str, &str)] = &[\n    (\"lower\", \"x\"),\n];\n";
        assert!(parse(lower).is_err_and(|e| e.contains("SCREAMING_SNAKE")));

        let twice =
            "pub const CODES: &[(&str, &str)] = &[\n    (\"A\", \"x\"),\n    (\"A\", \"y\"),\n];\n";
        assert_eq!(
            parse(twice),
            Err("line 3: code `A` is listed twice".to_owned())
        );
    }
}
