//! The web page at `/`: one HTML file with plain JavaScript, embedded in the binary, no build step.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

/// The page (`static/index.html`).
const PAGE: &str = include_str!("../static/index.html");

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(page))
        .route("/index.html", get(page))
}

async fn page() -> Response {
    let mut response = axum::response::Html(PAGE).into_response();
    let headers = response.headers_mut();
    // The page talks only to this server; nothing else may frame or feed it.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
