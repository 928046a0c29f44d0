//! `ApiJson<T>`: the request-body extractor every /v1 and control-plane handler uses.
//!
//! * `Content-Type` must be `application/json` (parameters such as `charset` allowed), else 400.
//! * Bodies over the configured limit (`max_body_bytes`, default 1 MiB) are refused with 413.
//! * Invalid JSON is 400 (`malformed JSON body: …`); valid JSON of the wrong shape is 422 naming
//!   the field path (`tool_args: invalid type: string "x", expected a map`).

use crate::api::error::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::FromRequest;
use axum::http::{header, HeaderMap, Request};
use serde::de::DeserializeOwned;

/// Default body limit in bytes, when the router has no [`BodyLimit`] extension.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Router extension carrying the body limit in bytes.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// A JSON body deserialized into `T` with SPEC.md's error statuses.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

/// The raw bytes of a JSON body, after the Content-Type and size checks (for handlers that
/// validate element by element, like POST /v1/events/batch).
#[derive(Debug)]
pub struct JsonBytes(pub Bytes);

/// Checks the Content-Type header: `application/json`, optionally with parameters.
pub fn require_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else if ct.is_empty() {
        Err(ApiError::BadRequest(
            "missing Content-Type header: request bodies must be sent with Content-Type: application/json".into(),
        ))
    } else {
        Err(ApiError::BadRequest(format!(
            "unsupported Content-Type `{ct}`: request bodies must be sent with Content-Type: application/json"
        )))
    }
}

/// Parses `bytes` as the JSON object `T`: 400 for invalid JSON, 422 naming the field for a wrong
/// shape, 422 when the top level is not an object (serde would otherwise accept `[]` for a
/// struct whose fields are all optional).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let is_object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if is_object {
        // Fast path: a valid body parses once, without path tracking. Only a failing body is
        // parsed again with serde_path_to_error, to name the field in the error.
        if let Ok(parsed) = serde_json::from_slice(bytes) {
            return Ok(parsed);
        }
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let parsed = serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data if !is_object => not_an_object(),
            serde_json::error::Category::Data => {
                let msg = strip_position(&inner.to_string());
                if path.is_empty() || path == "." {
                    ApiError::Unprocessable(msg)
                } else {
                    ApiError::Unprocessable(format!("{path}: {msg}"))
                }
            }
            _ => ApiError::BadRequest(format!("malformed JSON body: {inner}")),
        }
    })?;
    if is_object {
        Ok(parsed)
    } else {
        Err(not_an_object())
    }
}

fn not_an_object() -> ApiError {
    ApiError::Unprocessable("request body must be a JSON object".into())
}

/// serde_json appends " at line L column C"; for schema errors the field path says more.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

async fn read_body(req: Request<Body>) -> Result<Bytes, ApiError> {
    require_json_content_type(req.headers())?;
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .map(|l| l.0)
        .unwrap_or(DEFAULT_MAX_BODY_BYTES);
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| {
            ApiError::PayloadTooLarge(format!("request body is larger than {limit} bytes"))
        })
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
        read_body(req).await.map(JsonBytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Shape {
        name: String,
        inner: Inner,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: u32,
    }

    #[test]
    fn syntax_errors_are_400_and_shape_errors_are_422_naming_the_field() {
        assert!(matches!(
            parse_json::<Shape>(b"{nope"),
            Err(ApiError::BadRequest(_))
        ));
        match parse_json::<Shape>(br#"{"name":"x","inner":{"n":"7"}}"#) {
            Err(ApiError::Unprocessable(m)) => {
                assert!(m.starts_with("inner.n: invalid type"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        for not_object in [&b"[]"[..], b"null", b" 7"] {
            assert!(matches!(
                parse_json::<Option<Shape>>(not_object),
                Err(ApiError::Unprocessable(_))
            ));
        }
        match parse_json::<Shape>(br#"{"inner":{"n":7}}"#) {
            Err(ApiError::Unprocessable(m)) => assert!(m.contains("missing field `name`"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn content_type_must_be_json() {
        let mut h = HeaderMap::new();
        assert!(require_json_content_type(&h).is_err());
        h.insert(
            header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert!(require_json_content_type(&h).is_ok());
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(require_json_content_type(&h).is_err());
    }
}
