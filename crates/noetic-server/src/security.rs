//! What every request passes before a route sees it: the `Host` allow-list (DNS rebinding), the
//! `Origin` check (a web page the user visits must not drive a server that runs tools), and the
//! bearer token, compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::Token;
use crate::error::ApiError;
use crate::state::AppState;

/// The guard of every route (the page's static files included, so a rebinding page cannot read it).
pub(crate) async fn guard(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(error) = check(&state, &request) {
        return error.into_response();
    }
    next.run(request).await
}

fn check(state: &AppState, request: &Request) -> Result<(), ApiError> {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .or_else(|| {
            request
                .uri()
                .authority()
                .map(|authority| authority.as_str())
        })
        .unwrap_or("");
    let name = host_name(host);
    if !state.config.host_allowed(name) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "SERVER_HOST_FORBIDDEN",
            format!("the host `{name}` is not one this server answers to"),
        ));
    }
    if let Some(origin) = headers
        .get(header::ORIGIN)
        .and_then(|value| value.to_str().ok())
    {
        let same_origin = origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host));
        if !same_origin && !state.config.origin_allowed(origin) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "SERVER_ORIGIN_FORBIDDEN",
                format!("requests from the origin `{origin}` are not allowed"),
            ));
        }
    }
    let path = request.uri().path();
    // The page itself holds no data: it reads the token from its URL's fragment and sends it.
    let open = path == "/" || path == "/index.html" || path == "/v1/health";
    if let Some(token) = &state.config.token
        && !open
        && !presented(headers, request.uri().query())
            .is_some_and(|presented| token.matches(&presented))
    {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "SERVER_UNAUTHORIZED",
            "a bearer token is required: `Authorization: Bearer TOKEN` (or `?token=TOKEN`)",
        ));
    }
    Ok(())
}

/// The token a request presents: its `Authorization: Bearer` header, else its `token` query
/// parameter (EventSource cannot set headers).
fn presented(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    {
        return Some(bearer.trim().to_owned());
    }
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .and_then(percent_decode)
}

/// A query value with its `%XX` escapes (and `+` for a space) decoded; `None` if malformed.
fn percent_decode(value: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(value.len());
    let mut input = value.bytes();
    while let Some(byte) = input.next() {
        match byte {
            b'%' => {
                let high = char::from(input.next()?).to_digit(16)?;
                let low = char::from(input.next()?).to_digit(16)?;
                bytes.push(u8::try_from(high * 16 + low).ok()?);
            }
            b'+' => bytes.push(b' '),
            other => bytes.push(other),
        }
    }
    String::from_utf8(bytes).ok()
}

/// The host name of a `Host` value: without its port, IPv6 brackets kept off.
pub(crate) fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.bytes().all(|byte| byte.is_ascii_digit()) {
            name
        } else {
            host
        }
    })
}

impl Token {
    /// Whether `presented` is this token, in time that does not depend on where they differ.
    pub(crate) fn matches(&self, presented: &str) -> bool {
        constant_time_eq(self.expose().as_bytes(), presented.as_bytes())
    }
}

/// Equal bytes, compared without an early exit (the length is not secret: tokens have one length).
fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    if left.len() != right.len() {
        return false;
    }
    let difference = left
        .iter()
        .zip(right)
        .fold(0u8, |difference, (a, b)| difference | (a ^ b));
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("localhost:8080"), "localhost");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("[::1]:3000"), "::1");
        assert_eq!(host_name("example.com:x"), "example.com:x");
    }

    #[test]
    fn query_tokens_are_percent_decoded() {
        assert_eq!(percent_decode("a%2Bb%25c").as_deref(), Some("a+b%c"));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("bad%2"), None);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
