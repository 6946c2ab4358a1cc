//! The management API's responses: JSON successes, problem documents and core's replies as
//! hyper responses, each with the request id in force and `Cache-Control: no-store` (C-MGMT-2).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use weir_core::mgmt::{FieldError, Reply};
use weir_core::request_id::X_REQUEST_ID;

/// A management API response.
pub(super) type MgmtResponse = Response<Full<Bytes>>;

pub(super) fn insert_rid(h: &mut HeaderMap, rid: &str) {
    if let Ok(v) = HeaderValue::from_str(rid) {
        h.insert(X_REQUEST_ID, v);
    }
}

/// A JSON success with `Cache-Control: no-store` (C-MGMT-2).
pub(super) fn json(status: StatusCode, body: Bytes, rid: &str) -> MgmtResponse {
    let mut resp = crate::control::console::json_response(status, body);
    insert_rid(resp.headers_mut(), rid);
    resp
}

/// A problem document (`{"code","message","request_id","errors"}`).
pub(super) fn problem(
    status: u16,
    message: &str,
    errors: Vec<FieldError>,
    rid: &str,
) -> MgmtResponse {
    reply(
        &Reply::Problem {
            status,
            message: message.to_owned(),
            errors,
        },
        rid,
    )
}

/// Core's reply as a hyper response.
pub(super) fn reply(r: &Reply, rid: &str) -> MgmtResponse {
    let (parts, body) = r.to_http(rid).into_parts();
    let mut resp = Response::from_parts(parts, Full::new(Bytes::from(body)));
    // Core names its headers; make sure the id is the one in force.
    insert_rid(resp.headers_mut(), rid);
    if !resp.headers().contains_key(http::header::CACHE_CONTROL) {
        resp.headers_mut().insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
    }
    resp
}
