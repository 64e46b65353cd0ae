//! A POST's body: its headers (JSON in, JSON or an event stream back), read
//! whole within `gateway.max_body` and `gateway.http_body_timeout`, and parsed
//! as one JSON-RPC message.

use super::{BodyRead, Front};
use crate::front::http::reply::{accepts, header_str, message_reply, refuse, Reply};
use crate::jsonrpc::{self, Kind};
use crate::texts as answer;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderMap};
use hyper::StatusCode;
use serde_json::Value;
use std::sync::atomic::Ordering;

impl Front {
    /// Reads a POST's body whole, within `gateway.max_body` and
    /// `gateway.http_body_timeout`.
    pub(super) async fn read_body(
        &self,
        incoming: Incoming,
        extensions: &hyper::http::Extensions,
    ) -> Result<Bytes, Box<Reply>> {
        let too_large = || {
            Box::new(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                jsonrpc::INVALID_REQUEST,
                &answer::http_too_large(self.max_body),
            ))
        };
        if incoming
            .size_hint()
            .exact()
            .is_some_and(|n| n > self.max_body as u64)
        {
            return Err(too_large());
        }
        let collect = http_body_util::Limited::new(incoming, self.max_body).collect();
        let Ok(collected) = tokio::time::timeout(self.body_timeout, collect).await else {
            // A body that drips holds a connection, and a place under the caps.
            tracing::debug!("a request body did not come whole within gateway.http_body_timeout; 408, and the connection closes");
            self.gateway.metrics.http_connection_timed_out("body");
            return Err(Box::new(refuse(
                StatusCode::REQUEST_TIMEOUT,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_BODY_TIMEOUT,
            )));
        };
        match collected {
            Ok(b) => {
                if let Some(read) = extensions.get::<BodyRead>() {
                    read.0.store(true, Ordering::Relaxed);
                }
                Ok(b.to_bytes())
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Err(e) => {
                tracing::debug!("reading a request body failed: {e}");
                Err(Box::new(refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    &answer::invalid_request("the request body could not be read"),
                )))
            }
        }
    }

    /// A POST body as one JSON-RPC message: not a batch, and not a new request
    /// while the gateway drains.
    pub(super) fn message_of(&self, body: &[u8]) -> Result<Value, Box<Reply>> {
        let msg: Value = serde_json::from_slice(body).map_err(|e| {
            Box::new(refuse(
                StatusCode::BAD_REQUEST,
                jsonrpc::PARSE_ERROR,
                &answer::parse_error(&e.to_string()),
            ))
        })?;
        if msg.is_array() {
            return Err(Box::new(refuse(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                &answer::invalid_request(answer::HTTP_BATCH),
            )));
        }
        if self.gateway.health.draining() {
            // A new request would outlive the drain: refused unrun. Responses and
            // notifications still go to the calls in flight that wait for them.
            if let Kind::Request { id, .. } = jsonrpc::classify(&msg) {
                let body =
                    jsonrpc::error(id.clone(), jsonrpc::INTERNAL_ERROR, answer::HTTP_DRAINING);
                return Err(Box::new(message_reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &body,
                )));
            }
        }
        Ok(msg)
    }
}

/// A POST must send JSON and accept both JSON and an event stream back.
pub(super) fn check_post_headers(headers: &HeaderMap) -> Result<(), Box<Reply>> {
    let json_body = header_str(headers, header::CONTENT_TYPE).is_some_and(|ct| {
        ct.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json_body {
        return Err(Box::new(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            jsonrpc::INVALID_REQUEST,
            answer::HTTP_CONTENT_TYPE,
        )));
    }
    if !(accepts(headers, "application/json") && accepts(headers, "text/event-stream")) {
        return Err(Box::new(refuse(
            StatusCode::NOT_ACCEPTABLE,
            jsonrpc::INVALID_REQUEST,
            answer::HTTP_ACCEPT_POST,
        )));
    }
    Ok(())
}
