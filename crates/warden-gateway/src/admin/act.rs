//! What an operator does in the console: POSTed forms (each with its CSRF token,
//! answered with a redirect back to the page, so reloading it posts nothing
//! again) and the same actions under `/api/` (JSON in and out, for scripts).
//!
//! The API takes only `Content-Type: application/json`, which no cross-site
//! form can send without a preflight the listener never grants; the forms take
//! `application/x-www-form-urlencoded` and must carry the token.

use super::csrf::FIELD;
use super::{html, json_reply, reply, Site, HTML};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::header::{HeaderValue, CONTENT_TYPE, LOCATION};
use hyper::{Request, StatusCode};
use serde_json::{json, Value};

/// A form or an API body is never larger than this.
const MAX_BODY: usize = 64 * 1024;

pub(super) const CSRF_REFUSED: &str =
    "Forbidden: this form's CSRF token is missing or not valid; reload the page and submit it again.";
const NOT_JSON: &str = "The admin API takes a JSON object (Content-Type: application/json).";
const TOO_LARGE: &str = "The request body is too large.";
const NO_ACTION: &str = "No such action.";

/// One POST, from an admin (`who`) the gate let through. `binding`: what its
/// pages' CSRF tokens were made for; `session`: the console session it came
/// with (O9).
pub(super) async fn act(
    site: &Site,
    who: &str,
    binding: &str,
    session: Option<&str>,
    req: Request<hyper::body::Incoming>,
) -> super::Reply {
    let headers = req.headers().clone();
    let path = req.uri().path().to_owned();
    let api = path.starts_with("/api/");
    let fields = match fields_of(site, binding, &path, req).await {
        Ok(fields) => fields,
        Err(r) => return r,
    };
    let get = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let action = path.strip_prefix("/api").unwrap_or(&path);
    match action {
        "/pins/approve" => pins(site, who, get("tool"), Pins::Approve, api).await,
        "/pins/reject" => pins(site, who, get("tool"), Pins::Reject, api).await,
        "/approvals/decide" => {
            let (id, decision) = (
                get("id").unwrap_or_default(),
                get("decision").unwrap_or_default(),
            );
            match super::approvals::decide(&site.gw, &id, &decision, get("note"), who).await {
                Ok(()) if api => json_reply(
                    StatusCode::OK,
                    &json!({"decided": id, "decision": decision}),
                ),
                Ok(()) => see_other("/approvals"),
                Err(text) if text == super::approvals::BAD_DECISION => {
                    failure(StatusCode::BAD_REQUEST, text, api)
                }
                Err(text) => failure(StatusCode::NOT_FOUND, text, api),
            }
        }
        "/logout" if !api => match (&site.login, session) {
            (Some(login), Some(sid)) => login.logout(sid, &headers),
            _ => see_other("/"),
        },
        _ => failure(StatusCode::NOT_FOUND, NO_ACTION, api),
    }
}

/// A POST's fields: a JSON object under `/api/`, else a form that carries a
/// valid CSRF token.
async fn fields_of(
    site: &Site,
    binding: &str,
    path: &str,
    req: Request<hyper::body::Incoming>,
) -> Result<Vec<(String, String)>, super::Reply> {
    let api = path.starts_with("/api/");
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(failure(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE, api)),
    };
    if api {
        return match (content_type.as_str(), fields_of_json(&body)) {
            ("application/json", Some(f)) => Ok(f),
            _ => Err(failure(StatusCode::UNSUPPORTED_MEDIA_TYPE, NOT_JSON, api)),
        };
    }
    let f = super::query_pairs(&String::from_utf8_lossy(&body));
    let token = f.iter().find(|(k, _)| k == FIELD).map(|(_, v)| v.as_str());
    if content_type != "application/x-www-form-urlencoded"
        || !token.is_some_and(|t| site.csrf.verify(binding, t))
    {
        tracing::warn!(path = %crate::logged::logged(path), "a console form was posted without a valid CSRF token (403)");
        return Err(failure(StatusCode::FORBIDDEN, CSRF_REFUSED, api));
    }
    Ok(f)
}

/// What is done to a drifted tool's definition (P3, P4).
#[derive(Clone, Copy)]
enum Pins {
    Approve,
    Reject,
}

/// Approves or rejects `tool`'s definition, as `pins approve` / `pins reject` do.
async fn pins(site: &Site, who: &str, tool: Option<String>, what: Pins, api: bool) -> super::Reply {
    let Some(tool) = tool else {
        let text = match what {
            Pins::Approve => "Name the tool to approve (tool).",
            Pins::Reject => "Name the tool to reject (tool).",
        };
        return failure(StatusCode::BAD_REQUEST, text, api);
    };
    let (done, verb, key, held) = match what {
        Pins::Approve => (
            super::pins::approve(&site.gw, &tool, who).await,
            "approve",
            "approved",
            "locked_tools",
        ),
        Pins::Reject => (
            super::pins::reject(&site.gw, &tool, who).await,
            "reject",
            "rejected",
            "rejected_tools",
        ),
    };
    match done {
        Ok(n) if api => json_reply(StatusCode::OK, &json!({key: tool, held: n})),
        Ok(_) => see_other("/pins"),
        Err(e) => {
            tracing::warn!(
                "the console could not {verb} a tool: {}",
                crate::logged::logged(&e)
            );
            failure(StatusCode::CONFLICT, &approve_failed(&e), api)
        }
    }
}

/// Why an approval or a rejection failed, for the operator: the names it cannot
/// take, said as `pins approve` says it; anything else (a file that cannot be read or written)
/// only as such, since its path is not the console's to show.
fn approve_failed(e: &str) -> String {
    if e.starts_with("no upstream lists or locks: ") || e.starts_with("nothing to reject under: ") {
        e.to_owned()
    } else {
        "the pins lock cannot be read or written (the log says why); it is unchanged".to_owned()
    }
}

/// A JSON object's members as (name, text) pairs; `None` for anything else.
fn fields_of_json(body: &Bytes) -> Option<Vec<(String, String)>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object()?;
    Some(
        o.iter()
            .map(|(k, v)| {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                (k.clone(), text)
            })
            .collect(),
    )
}

/// 303 to `to`: the page the form came from, read again.
fn see_other(to: &'static str) -> super::Reply {
    let mut r = reply(StatusCode::SEE_OTHER, HTML, String::new());
    r.headers_mut()
        .insert(LOCATION, HeaderValue::from_static(to));
    r
}

fn failure(status: StatusCode, text: &str, api: bool) -> super::Reply {
    if api {
        json_reply(status, &json!({"error": text}))
    } else {
        reply(status, HTML, html::message("Not done", text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_body_is_a_json_object() {
        let mut f = fields_of_json(&Bytes::from_static(br#"{"tool": "up.echo", "n": 2}"#)).unwrap();
        f.sort();
        assert_eq!(
            f,
            [
                ("n".to_owned(), "2".to_owned()),
                ("tool".to_owned(), "up.echo".to_owned())
            ]
        );
        assert_eq!(fields_of_json(&Bytes::from_static(b"tool=up.echo")), None);
        assert_eq!(fields_of_json(&Bytes::from_static(b"[1]")), None);
    }

    #[test]
    fn a_failed_approval_names_no_path() {
        assert_eq!(
            approve_failed("no upstream lists or locks: up.x; the lock is unchanged"),
            "no upstream lists or locks: up.x; the lock is unchanged"
        );
        assert_eq!(
            approve_failed(&crate::texts::pins_unrejectable(&["up.x".into()])),
            "nothing to reject under: up.x; only a tool listed now that differs from the lock can be rejected; the lock is unchanged"
        );
        assert_eq!(
            approve_failed("writing /etc/secret/warden.pins.json: denied"),
            "the pins lock cannot be read or written (the log says why); it is unchanged"
        );
    }
}
