//! The live dashboard: one page, embedded in the binary (no build step, no
//! CDN, works air-gapped), driven by `GET /api/events`.
//!
//! The page keeps its own model of the table: the `snapshot` event replaces
//! it, every later event is applied idempotently (see [`crate::EventHub`]),
//! and a dropped stream is reopened with a fresh snapshot. Only the rows in
//! view are in the DOM (a virtualised list), so a large table costs the
//! page no more rows than a small one (`tests/dashboard.rs` holds it to
//! that at 10,000 locks). With an admin token, the page asks for it once and keeps it in
//! the tab's session storage.

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

/// The page: HTML, CSS and JavaScript in one file.
const PAGE: &str = include_str!("dashboard.html");

/// `GET /`.
pub(crate) async fn page() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            // Everything the page needs is in it or on this origin.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
                ),
            ),
        ],
        PAGE,
    )
        .into_response()
}
