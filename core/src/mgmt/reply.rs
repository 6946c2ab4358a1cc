//! The handler's answer ([`Reply`]) and a field's error in it ([`FieldError`]): every
//! management response is one (C-MGMT-2).

use http::{HeaderName, HeaderValue};

use crate::config::ConfigError;
use crate::response::{ManagementError, SyntheticResponse, header};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    /// Configuration path, e.g. `rate_limit.capacity` or `server.retry.max_attempts`.
    pub path: String,
    /// What is wrong (never a secret, C-CONF-3).
    pub message: String,
}

impl From<&ConfigError> for FieldError {
    fn from(e: &ConfigError) -> FieldError {
        FieldError {
            path: e.path.clone(),
            message: e.message.clone(),
        }
    }
}

/// A management response. Every one is JSON with `Cache-Control: no-store` (C-MGMT-2).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A refusal with the fixed answer of [`ManagementError`] (C-PATH-11 body).
    Refused(ManagementError),
    /// A refusal with a specific message and, for a rejected change, every error:
    /// `{"code", "message", "request_id", "errors": [{"path", "message"}]}`.
    Problem {
        /// `400` or `404`.
        status: u16,
        /// What is wrong.
        message: String,
        /// Field errors (may be empty).
        errors: Vec<FieldError>,
    },
    /// A success document.
    Json {
        /// `200` or `202`.
        status: u16,
        /// The body.
        body: serde_json::Value,
    },
}

impl Reply {
    pub(super) fn applied(status: u16, body: serde_json::Value) -> Reply {
        Reply::Json { status, body }
    }

    pub(super) fn invalid(message: impl Into<String>, errors: Vec<FieldError>) -> Reply {
        Reply::Problem {
            status: 400,
            message: message.into(),
            errors,
        }
    }

    /// The status.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Reply::Refused(e) => e.status(),
            Reply::Problem { status, .. } | Reply::Json { status, .. } => *status,
        }
    }

    /// The JSON body.
    #[must_use]
    pub fn body(&self, request_id: &str) -> String {
        match self {
            Reply::Refused(e) => SyntheticResponse::management(e, request_id).body(),
            Reply::Problem {
                status,
                message,
                errors,
            } => serde_json::json!({
                "code": status,
                "message": message,
                "request_id": request_id,
                "errors": errors,
            })
            .to_string(),
            Reply::Json { body, .. } => body.to_string(),
        }
    }

    /// The whole response: status, `Content-Type: application/json`, `Cache-Control: no-store`,
    /// `X-Request-ID`, and for refusals the headers of [`SyntheticResponse::management`]
    /// (`WWW-Authenticate`, `Allow`).
    #[must_use]
    pub fn to_http(&self, request_id: &str) -> http::Response<String> {
        if let Reply::Refused(e) = self {
            return SyntheticResponse::management(e, request_id).to_http();
        }
        let mut response = http::Response::new(self.body(request_id));
        *response.status_mut() = http::StatusCode::from_u16(self.status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        let h = response.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(crate::response::JSON),
        );
        h.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
        if let Ok(v) = HeaderValue::from_str(request_id) {
            h.insert(HeaderName::from_static(header::REQUEST_ID), v);
        }
        response
    }
}
