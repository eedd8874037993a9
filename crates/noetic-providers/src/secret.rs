//! Secrets that never reach `Debug` output, logs or errors: the API key, the values of headers that
//! carry credentials, and a base URL's userinfo.
//!
//! A provider collects every secret it was configured with into [`Secrets`] once, at `build()`, and
//! redacts them from any text a server sends back that ends up in an error or an error event (servers do
//! echo keys: "Incorrect API key provided: sk-…").

use std::borrow::Cow;
use std::sync::Arc;

/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "***";

/// The shortest start of a secret that [`Secrets::redact_cut`] hides at the end of a cut text.
const MIN_CUT_PREFIX: usize = 4;

/// An API key. Its `Debug` shows `ApiKey(***)`; read it only to build the request header.
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    pub(crate) fn new(key: String) -> Self {
        ApiKey(key)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// The secrets of one provider, longest first (so a secret that contains another is redacted whole).
/// Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Secrets(Arc<[Box<str>]>);

impl Secrets {
    /// The non-empty `secrets`, without duplicates.
    pub(crate) fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<Box<str>> = secrets
            .into_iter()
            .filter(|secret| !secret.is_empty())
            .map(String::into_boxed_str)
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Secrets(secrets.into())
    }

    /// `text` with every secret replaced by `***` (borrowed when it holds none, the usual case).
    pub(crate) fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(text);
        for secret in self.0.iter() {
            if text.contains(&**secret) {
                text = Cow::Owned(text.replace(&**secret, REDACTED));
            }
        }
        text
    }

    /// Whether a secret appears in the text of `error` or of any of its sources.
    pub(crate) fn appears_in_chain(&self, error: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(error);
        while let Some(error) = next {
            if matches!(self.redact(&error.to_string()), Cow::Owned(_)) {
                return true;
            }
            next = error.source();
        }
        false
    }

    /// Redacts `text` in place.
    pub(crate) fn redact_string(&self, text: &mut String) {
        if let Cow::Owned(redacted) = self.redact(text) {
            *text = redacted;
        }
    }

    /// Redacts a text that was cut short (a snippet): also the start of a secret at its very end (4
    /// characters or more), which the cut left behind.
    pub(crate) fn redact_cut(&self, text: &mut String) {
        self.redact_string(text);
        let cut = self.0.iter().find_map(|secret| {
            (MIN_CUT_PREFIX..secret.len())
                .rev()
                .filter(|&len| secret.is_char_boundary(len))
                .find(|&len| text.ends_with(&secret[..len]))
        });
        if let Some(len) = cut {
            text.truncate(text.len() - len);
            text.push_str(REDACTED);
        }
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

/// Whether a header with this (lowercase) name carries a credential: `authorization`, cookies, and
/// names with `key`, `token`, `secret`, `password`, `auth`, `session`, `signature` or `credential` in
/// them (`x-api-key`, `api-key`, `x-auth-token`, `x-goog-api-key`, …). Over-matching only hides a
/// harmless value from error texts.
pub(crate) fn is_sensitive_header(name: &str) -> bool {
    const MARKERS: [&str; 9] = [
        "auth",
        "cookie",
        "key",
        "token",
        "secret",
        "password",
        "session",
        "signature",
        "credential",
    ];
    MARKERS.iter().any(|marker| name.contains(marker))
}

/// `url` with any userinfo (`user:key@`) replaced by `***@`, for `Debug` output and error messages.
/// Works on the text, so it also hides the userinfo of a URL that does not parse.
pub(crate) fn redact_url(url: &str) -> Cow<'_, str> {
    let authority_start = url.find("://").map_or(0, |scheme_end| scheme_end + 3);
    let rest = &url[authority_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => Cow::Owned(format!(
            "{}{REDACTED}{}",
            &url[..authority_start],
            &rest[at..]
        )),
        None => Cow::Borrowed(url),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_every_secret_longest_first() {
        let secrets = Secrets::new(["abc".to_owned(), "abcdef".to_owned(), String::new()]);
        assert_eq!(secrets.redact("x abcdef y abc z"), "x *** y *** z");
        assert!(matches!(secrets.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(Secrets::default().redact("abc"), "abc");
    }

    #[test]
    fn redacts_the_start_of_a_secret_at_the_end_of_a_cut_text() {
        let secrets = Secrets::new(["sk-live-123456".to_owned()]);
        let mut snippet = "{\"bad\": sk-live-12".to_owned();
        secrets.redact_cut(&mut snippet);
        assert_eq!(snippet, "{\"bad\": ***");
        let mut snippet = "ends with sk-".to_owned();
        secrets.redact_cut(&mut snippet);
        assert_eq!(snippet, "ends with sk-", "three characters are no secret");
    }

    #[test]
    fn hides_userinfo_of_any_url() {
        assert_eq!(
            redact_url("https://user:key@host.example/v1"),
            "https://***@host.example/v1"
        );
        assert_eq!(
            redact_url("https://key@host/v1?q=a@b"),
            "https://***@host/v1?q=a@b"
        );
        assert_eq!(redact_url("https://host/v1?q=a@b"), "https://host/v1?q=a@b");
        assert_eq!(redact_url("user:pw@host"), "***@host");
    }

    #[test]
    fn knows_credential_headers() {
        for name in [
            "authorization",
            "x-api-key",
            "api-key",
            "x-auth-token",
            "cookie",
        ] {
            assert!(is_sensitive_header(name), "{name}");
        }
        for name in ["x-title", "http-referer", "openai-organization"] {
            assert!(!is_sensitive_header(name), "{name}");
        }
    }
}
