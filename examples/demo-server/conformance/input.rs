//! How the fixture asks its client for input in the 2026-07-28 revision: instead of
//! sending the client a request while a call runs, it answers the call with an
//! `InputRequiredResult` (`resultType: "input_required"`, the requests by key in
//! `inputRequests`, and maybe a `requestState`), and the client calls again with
//! its answers in `inputResponses` and the state it was given. The state comes back
//! from the client, so the fixture seals it (HMAC-SHA256 under a key drawn when the
//! process starts) and names the tool it belongs to in it: a state that was changed,
//! that belongs to another tool or that expired is refused with -32602.
//!
//! The tools here are the ones the suite's `input-required-result-*` scenarios call,
//! `test_missing_capability` and `test_streaming_elicitation` of `server-stateless`,
//! and the 2026-07-28 form of the fixture's asking tools (`test_sampling`,
//! `test_elicitation`, …: see [`super::asking`]).

use super::{asked, asking, text};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// -32021: the call needs a capability the client did not declare on it.
pub const MISSING_CAPABILITY: i64 = -32021;
const INVALID_PARAMS: i64 = -32602;
/// How long a request state stays good.
const STATE_TTL_SECS: u64 = 600;

/// The prompt of the `input-required-result-non-tool-request` scenario.
pub const PROMPT: &str = "test_input_required_result_prompt";

/// The tools of this file, as `tools/list` shows them in 2026-07-28.
pub fn tools() -> Vec<Value> {
    let none = || json!({"type": "object", "properties": {}});
    [
        ("test_missing_capability", "Needs the client's sampling capability: without it, -32021."),
        ("test_streaming_elicitation", "Asks for input with an InputRequiredResult, never a request of its own."),
        ("test_input_required_result_elicitation", "Asks the user's name (elicitation)."),
        ("test_input_required_result_sampling", "Asks the client's model a question (sampling)."),
        ("test_input_required_result_list_roots", "Asks the client's roots."),
        ("test_input_required_result_request_state", "Asks for a confirmation and checks the request state it gave."),
        ("test_input_required_result_multiple_inputs", "Asks elicitation, sampling and roots at once."),
        ("test_input_required_result_multi_round", "Asks twice, one question per round."),
        ("test_input_required_result_tampered_state", "Refuses a request state that was changed."),
        ("test_input_required_result_capabilities", "Asks only what the client declared it can answer."),
    ]
    .into_iter()
    .map(|(name, description)| json!({"name": name, "description": description, "inputSchema": none()}))
    .collect()
}

/// A JSON-RPC error object.
pub fn error(code: i64, message: &str, data: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    e
}

fn invalid(message: &str) -> Value {
    error(INVALID_PARAMS, message, None)
}

/// The capability each kind of input request needs, and the one the client declared.
fn capability(method: &str) -> &'static str {
    match method {
        "sampling/createMessage" => "sampling",
        "roots/list" => "roots",
        _ => "elicitation",
    }
}

/// -32021 unless the client declared every capability in `needed`.
fn require(caps: &Value, needed: &[&str]) -> Result<(), Value> {
    let missing: Map<String, Value> = needed
        .iter()
        .filter(|c| !caps.get(**c).is_some_and(Value::is_object))
        .map(|c| ((*c).to_owned(), json!({})))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&String> = missing.keys().collect();
    Err(error(
        MISSING_CAPABILITY,
        &format!("This request needs the client capabilities {names:?}, which it did not declare."),
        Some(json!({"requiredCapabilities": missing})),
    ))
}

fn elicitation(message: &str, field: &str, kind: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"message": message, "requestedSchema": {
        "type": "object", "properties": {field: {"type": kind}}, "required": [field]}}})
}

fn sampling(question: &str, max_tokens: u64) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
        "maxTokens": max_tokens}})
}

fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

/// An input request by its key.
type Ask<'a> = (&'a str, Value);
/// Every answer, or the input requests still unanswered.
type Gathered<'a> = Result<Map<String, Value>, Vec<&'a Ask<'a>>>;

/// What a call brought back: its answers and the state it was given.
struct Retry<'a> {
    responses: Option<&'a Map<String, Value>>,
    state: Option<&'a str>,
}

fn retry(params: &Value) -> Result<Retry<'_>, Value> {
    let responses = match params.get("inputResponses") {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => {
            return Err(invalid(
                "inputResponses must be an object that maps each input request's key to the client's result.",
            ))
        }
    };
    let state = match params.get("requestState") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(invalid("requestState must be the string the server gave.")),
    };
    Ok(Retry { responses, state })
}

/// Whether `answer` has the shape of a result of `method`.
fn fits(method: &str, answer: &Value) -> bool {
    match method {
        "sampling/createMessage" => answer.get("content").is_some_and(Value::is_object),
        "roots/list" => answer.get("roots").is_some_and(Value::is_array),
        _ => answer.get("action").is_some_and(Value::is_string),
    }
}

impl Retry<'_> {
    /// The client's answer to the input request `key` (a request of `method`):
    /// `Ok(None)` when it gave none, an error when what it gave is not such a result.
    fn answer(&self, key: &str, method: &str) -> Result<Option<&Value>, Value> {
        match self.responses.and_then(|r| r.get(key)) {
            None => Ok(None),
            Some(a) if fits(method, a) => Ok(Some(a)),
            Some(_) => Err(invalid(&format!(
                "inputResponses[\"{key}\"] is not a result of {method}."
            ))),
        }
    }

    /// Every answer to `asks`, or the asks still unanswered.
    fn gather<'a>(&self, asks: &'a [Ask<'a>]) -> Result<Gathered<'a>, Value> {
        let mut answers = Map::new();
        let mut missing = Vec::new();
        for ask in asks {
            let method = ask.1["method"].as_str().unwrap_or_default();
            match self.answer(ask.0, method)? {
                Some(a) => {
                    answers.insert(ask.0.to_owned(), a.clone());
                }
                None => missing.push(ask),
            }
        }
        Ok(if missing.is_empty() {
            Ok(answers)
        } else {
            Err(missing)
        })
    }

    /// The opened state, which must belong to `tool`: `Ok(None)` when none came.
    fn opened(&self, tool: &str) -> Result<Option<Value>, Value> {
        let Some(token) = self.state else {
            return Ok(None);
        };
        match open(token) {
            Some(state) if state["tool"] == tool => Ok(Some(state)),
            _ => Err(invalid(
                "requestState failed its integrity check: it was changed, belongs to another request or expired.",
            )),
        }
    }
}

/// An `InputRequiredResult` asking `asks`, with a sealed `state` when given.
fn input_required<'a>(
    asks: impl IntoIterator<Item = &'a (&'a str, Value)>,
    state: Option<Value>,
) -> Value {
    let requests: Map<String, Value> = asks
        .into_iter()
        .map(|(k, r)| ((*k).to_owned(), r.clone()))
        .collect();
    let mut result = json!({"resultType": "input_required", "inputRequests": requests});
    if let Some(s) = state {
        result["requestState"] = Value::String(seal(&s));
    }
    result
}

fn complete(said: &str) -> Value {
    json!({"resultType": "complete", "content": [text(said)]})
}

fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).expect("the OS random source");
        k
    })
}

fn mac(payload: &str) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(key()).expect("HMAC takes any key length");
    m.update(payload.as_bytes());
    m
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `state` (with an expiry added) as `payload.mac`, both base64url.
fn seal(state: &Value) -> String {
    let mut state = state.clone();
    state["expires"] = json!(now() + STATE_TTL_SECS);
    let payload = URL_SAFE_NO_PAD.encode(state.to_string());
    let tag = URL_SAFE_NO_PAD.encode(mac(&payload).finalize().into_bytes());
    format!("{payload}.{tag}")
}

/// The state sealed in `token`, if its MAC holds and it has not expired.
fn open(token: &str) -> Option<Value> {
    let (payload, tag) = token.split_once('.')?;
    let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
    mac(payload).verify_slice(&tag).ok()?;
    let state: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    (state["expires"].as_u64()? >= now()).then_some(state)
}

/// The text an elicitation answer gave for `field` ("(declined)" when the user did not accept).
fn field(answer: &Value, name: &str) -> String {
    if answer["action"] != "accept" {
        return "(declined)".to_owned();
    }
    match &answer["content"][name] {
        Value::String(s) => s.clone(),
        Value::Null => "(nothing)".to_owned(),
        other => other.to_string(),
    }
}

fn sampled(answer: &Value) -> String {
    answer
        .pointer("/content/text")
        .and_then(Value::as_str)
        .unwrap_or("(no text)")
        .to_owned()
}

fn root_list(answer: &Value) -> String {
    let uris: Vec<&str> = answer["roots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    uris.join(", ")
}

/// Answers `tools/call` of the tools of this file and of [`asking`]; `None` for
/// other tools. `Err` is a JSON-RPC error object.
pub fn call(name: &str, params: &Value, caps: &Value) -> Option<Result<Value, Value>> {
    let args = params.get("arguments").cloned().unwrap_or(json!({}));
    if let Some((method, label, request)) = asking(name, &args) {
        if super::like_reference() {
            // The reference server's stateless side has no client to ask.
            let what = if method == "sampling/createMessage" {
                "Sampling"
            } else {
                "Elicitation"
            };
            return Some(Ok(complete(&format!(
                "{what} not supported or error: MCP error -32601: Method not found"
            ))));
        }
        return Some(asking_call(params, caps, method, label, request));
    }
    let run = match name {
        "test_missing_capability" => missing_capability,
        "test_streaming_elicitation" => streaming_elicitation,
        "test_input_required_result_elicitation" => ask_name,
        "test_input_required_result_sampling" => ask_model,
        "test_input_required_result_list_roots" => ask_roots,
        "test_input_required_result_request_state" => request_state,
        "test_input_required_result_multiple_inputs" => multiple_inputs,
        "test_input_required_result_multi_round" => multi_round,
        "test_input_required_result_tampered_state" => tampered_state,
        "test_input_required_result_capabilities" => capabilities,
        _ => return None,
    };
    Some(retry(params).and_then(|r| run(&r, caps)))
}

fn asking_call(
    params: &Value,
    caps: &Value,
    method: &str,
    label: &str,
    request: Value,
) -> Result<Value, Value> {
    require(caps, &[capability(method)])?;
    let r = retry(params)?;
    let asks = [("input", json!({"method": method, "params": request}))];
    Ok(match r.gather(&asks)? {
        Ok(answers) => {
            let mut result = asked(method, label, answers.get("input"));
            result["resultType"] = json!("complete");
            result
        }
        Err(missing) => input_required(missing, None),
    })
}

fn missing_capability(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["sampling"])?;
    let asks = [("sample", sampling("Say something.", 50))];
    Ok(match r.gather(&asks)? {
        Ok(a) => complete(&format!("Success: {}", sampled(&a["sample"]))),
        Err(missing) => input_required(missing, None),
    })
}

fn streaming_elicitation(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["elicitation"])?;
    let asks = [("value", elicitation("Type a value.", "value", "string"))];
    Ok(match r.gather(&asks)? {
        Ok(a) => complete(&format!(
            "Streaming complete: {}",
            field(&a["value"], "value")
        )),
        Err(missing) => input_required(missing, None),
    })
}

fn ask_name(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["elicitation"])?;
    let asks = [(
        "user_name",
        elicitation("What is your name?", "name", "string"),
    )];
    Ok(match r.gather(&asks)? {
        Ok(a) => complete(&format!("Hello, {}!", field(&a["user_name"], "name"))),
        Err(missing) => input_required(missing, None),
    })
}

fn ask_model(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["sampling"])?;
    let asks = [(
        "capital_question",
        sampling("What is the capital of France?", 100),
    )];
    Ok(match r.gather(&asks)? {
        Ok(a) => complete(&format!(
            "The model said: {}",
            sampled(&a["capital_question"])
        )),
        Err(missing) => input_required(missing, None),
    })
}

fn ask_roots(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["roots"])?;
    let asks = [("client_roots", roots())];
    Ok(match r.gather(&asks)? {
        Ok(a) => complete(&format!("Roots: {}", root_list(&a["client_roots"]))),
        Err(missing) => input_required(missing, None),
    })
}

const REQUEST_STATE: &str = "test_input_required_result_request_state";

fn request_state(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["elicitation"])?;
    let state = r.opened(REQUEST_STATE)?;
    let asks = [("confirm", elicitation("Please confirm", "ok", "boolean"))];
    Ok(match (r.gather(&asks)?, state) {
        (Ok(a), Some(_)) => complete(&format!(
            "state-ok: requestState validated; confirmed: {}",
            field(&a["confirm"], "ok")
        )),
        // Answers without the state they belong to are asked again, with one.
        _ => input_required(&asks, Some(json!({"tool": REQUEST_STATE}))),
    })
}

const MULTIPLE: &str = "test_input_required_result_multiple_inputs";

fn multiple_inputs(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["elicitation", "sampling", "roots"])?;
    r.opened(MULTIPLE)?;
    let asks = [
        (
            "user_name",
            elicitation("What is your name?", "name", "string"),
        ),
        ("greeting", sampling("Generate a greeting", 50)),
        ("client_roots", roots()),
    ];
    Ok(match r.gather(&asks)? {
        Ok(a) => complete(&format!(
            "{} {}; roots: {}",
            sampled(&a["greeting"]),
            field(&a["user_name"], "name"),
            root_list(&a["client_roots"])
        )),
        Err(missing) => input_required(missing, Some(json!({"tool": MULTIPLE}))),
    })
}

const MULTI_ROUND: &str = "test_input_required_result_multi_round";

fn multi_round(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["elicitation"])?;
    let step1 = [(
        "step1",
        elicitation("Step 1: What is your name?", "name", "string"),
    )];
    let step2 = [(
        "step2",
        elicitation("Step 2: What is your favorite color?", "color", "string"),
    )];
    let state = r.opened(MULTI_ROUND)?;
    let round = state
        .as_ref()
        .and_then(|s| s["round"].as_u64())
        .unwrap_or(0);
    if round == 2 {
        if let Ok(a) = r.gather(&step2)? {
            let name = state
                .as_ref()
                .and_then(|s| s["name"].as_str())
                .unwrap_or_default();
            return Ok(complete(&format!(
                "{name} likes {}.",
                field(&a["step2"], "color")
            )));
        }
        return Ok(input_required(&step2, state));
    }
    if round == 1 {
        if let Ok(a) = r.gather(&step1)? {
            let name = field(&a["step1"], "name");
            return Ok(input_required(
                &step2,
                Some(json!({"tool": MULTI_ROUND, "round": 2, "name": name})),
            ));
        }
    }
    Ok(input_required(
        &step1,
        Some(json!({"tool": MULTI_ROUND, "round": 1})),
    ))
}

const TAMPERED: &str = "test_input_required_result_tampered_state";

fn tampered_state(r: &Retry, caps: &Value) -> Result<Value, Value> {
    require(caps, &["elicitation"])?;
    let state = r.opened(TAMPERED)?;
    let asks = [("confirm", elicitation("Please confirm", "ok", "boolean"))];
    Ok(match (r.gather(&asks)?, state) {
        (Ok(_), Some(_)) => {
            complete("integrity-ok: the request state is the one this server sealed.")
        }
        _ => input_required(&asks, Some(json!({"tool": TAMPERED}))),
    })
}

const CAPABILITIES: &str = "test_input_required_result_capabilities";

fn capabilities(r: &Retry, caps: &Value) -> Result<Value, Value> {
    r.opened(CAPABILITIES)?;
    let asks: Vec<(&str, Value)> = [
        (
            "elicit_input",
            elicitation("Elicitation input", "value", "string"),
        ),
        ("sample_input", sampling("Sample request", 50)),
    ]
    .into_iter()
    .filter(|(_, req)| {
        caps.get(capability(req["method"].as_str().unwrap_or_default()))
            .is_some_and(Value::is_object)
    })
    .collect();
    if asks.is_empty() {
        return Ok(complete(
            "No capability this tool can ask through was declared.",
        ));
    }
    Ok(match r.gather(&asks)? {
        Ok(a) => {
            let keys: Vec<&String> = a.keys().collect();
            complete(&format!("capabilities-ok: received {keys:?}"))
        }
        Err(missing) => input_required(missing, Some(json!({"tool": CAPABILITIES}))),
    })
}

/// Answers `prompts/get` of [`PROMPT`]: asks the context first.
pub fn prompt(params: &Value, caps: &Value) -> Result<Value, Value> {
    require(caps, &["elicitation"])?;
    let r = retry(params)?;
    let asks = [(
        "user_context",
        elicitation("What context should the prompt use?", "context", "string"),
    )];
    Ok(match r.gather(&asks)? {
        Ok(a) => json!({"resultType": "complete", "messages": [{"role": "user", "content": text(
            &format!("Answer with this context in mind: {}", field(&a["user_context"], "context")))}]}),
        Err(missing) => input_required(missing, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_state_opens_and_a_changed_one_does_not() {
        let token = seal(&json!({"tool": "t", "round": 1}));
        assert_eq!(open(&token).unwrap()["round"], 1);
        assert!(open(&format!("{token}-TAMPERED")).is_none());
        let (payload, tag) = token.split_once('.').unwrap();
        let other = URL_SAFE_NO_PAD
            .encode(json!({"tool": "t", "round": 2, "expires": now() + 60}).to_string());
        assert!(open(&format!("{other}.{tag}")).is_none());
        assert!(open(payload).is_none());
    }
}
