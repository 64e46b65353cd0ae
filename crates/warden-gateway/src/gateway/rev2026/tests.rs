use super::*;
use crate::texts as answer;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Map, Value};

#[test]
fn a_rotated_key_still_opens_what_the_old_one_sealed() {
    let old = StateKey::from_secret(b"the old secret, 16+");
    let token = old.seal_value(&json!({"k": 1}));
    let rotated =
        StateKey::from_secret(b"the new secret, 16+").also_opening(b"the old secret, 16+");
    assert_eq!(rotated.open_value(&token), Some(json!({"k": 1})));
    // What the new key seals, the old one cannot read; nor can a stranger.
    let fresh = rotated.seal_value(&json!({"k": 2}));
    assert_eq!(old.open_value(&fresh), None);
    assert_eq!(StateKey::random().open_value(&token), None);
    // Without the old secret the token is gone.
    assert_eq!(
        StateKey::from_secret(b"the new secret, 16+").open_value(&token),
        None
    );
}

#[test]
fn the_envelope_is_read_and_taken_out() {
    let mut p = Some(
        json!({"name": "t", "arguments": {}, "inputResponses": {"k": {"action": "accept"}},
            "requestState": "s", "_meta": {PROTOCOL_VERSION_KEY: VERSION, CLIENT_CAPABILITIES_KEY: {"elicitation": {}},
            CLIENT_INFO_KEY: {"name": "c", "version": "1"}, "progressToken": 3}}),
    );
    let e = take_envelope(&mut p).unwrap().unwrap();
    assert!(e.can("elicitation") && !e.can("sampling"));
    assert_eq!(e.request_state.as_deref(), Some("s"));
    assert_eq!(e.input_responses.unwrap()["k"]["action"], "accept");
    assert_eq!(
        p.unwrap(),
        json!({"name": "t", "arguments": {}, "_meta": {"progressToken": 3}})
    );

    let mut legacy = Some(json!({"name": "t", "_meta": {"progressToken": 1}}));
    assert!(take_envelope(&mut legacy).unwrap().is_none());
    assert!(take_envelope(&mut None).unwrap().is_none());

    let mut old =
        Some(json!({"_meta": {PROTOCOL_VERSION_KEY: "2027-01-01", CLIENT_CAPABILITIES_KEY: {}}}));
    let err = take_envelope(&mut old).unwrap_err();
    assert_eq!(err["code"], -32022);
    assert_eq!(
        err["data"],
        json!({"supported": [VERSION], "requested": "2027-01-01"})
    );
    let mut nocaps = Some(json!({"_meta": {PROTOCOL_VERSION_KEY: VERSION}}));
    assert_eq!(take_envelope(&mut nocaps).unwrap_err()["code"], -32602);
    let mut numeric = Some(json!({"_meta": {PROTOCOL_VERSION_KEY: 2026}}));
    assert_eq!(
        take_envelope(&mut numeric).unwrap_err()["message"],
        "Invalid params: _meta[\"io.modelcontextprotocol/protocolVersion\"] must be a string."
    );
}

#[test]
fn a_request_sent_as_2026_needs_its_envelope() {
    let code = |p: Option<Value>| envelope_error(p.as_ref()).map(|e| e["code"].clone());
    let message = |p: Option<Value>| envelope_error(p.as_ref()).map(|e| e["message"].clone());
    assert_eq!(message(None), Some(json!(answer::ENVELOPE_NO_META)));
    assert_eq!(
        message(Some(json!({}))),
        Some(json!(answer::ENVELOPE_NO_META))
    );
    assert_eq!(
        message(Some(json!({"_meta": {CLIENT_CAPABILITIES_KEY: {}}}))),
        Some(json!(answer::ENVELOPE_NO_VERSION))
    );
    assert_eq!(
        message(Some(json!({"_meta": {PROTOCOL_VERSION_KEY: VERSION}}))),
        Some(json!(answer::ENVELOPE_NO_CAPABILITIES))
    );
    assert_eq!(
        message(Some(
            json!({"_meta": {PROTOCOL_VERSION_KEY: VERSION, CLIENT_CAPABILITIES_KEY: null}})
        )),
        Some(json!(answer::ENVELOPE_CAPABILITIES_NOT_OBJECT))
    );
    assert_eq!(
        code(Some(
            json!({"_meta": {PROTOCOL_VERSION_KEY: "2099-01-01", CLIENT_CAPABILITIES_KEY: {}}})
        )),
        Some(json!(UNSUPPORTED_VERSION))
    );
    assert_eq!(
        code(Some(
            json!({"_meta": {PROTOCOL_VERSION_KEY: VERSION, CLIENT_CAPABILITIES_KEY: {}}})
        )),
        None
    );
    // Only the shape is checked before the headers are compared with the body.
    assert!(envelope_shape_error(Some(
        &json!({"_meta": {PROTOCOL_VERSION_KEY: "2099-01-01"}})
    ))
    .is_none());
    // The same capabilities that are no object are refused where the
    // envelope is taken off, too (the stdio front).
    let mut p =
        Some(json!({"_meta": {PROTOCOL_VERSION_KEY: VERSION, CLIENT_CAPABILITIES_KEY: "all"}}));
    assert_eq!(
        take_envelope(&mut p).unwrap_err()["message"],
        answer::ENVELOPE_CAPABILITIES_NOT_OBJECT
    );
}

#[test]
fn error_codes_map_to_the_revisions_http_statuses() {
    assert_eq!(http_status(crate::jsonrpc::METHOD_NOT_FOUND), 404);
    assert_eq!(http_status(UNSUPPORTED_VERSION), 400);
    assert_eq!(http_status(HEADER_MISMATCH), 400);
    assert_eq!(http_status(MISSING_CAPABILITY), 400);
    // Errors of a request that was served (a tool's bad arguments, an
    // upstream's failure) are answers, not refusals of the request.
    assert_eq!(http_status(crate::jsonrpc::INVALID_PARAMS), 200);
    assert_eq!(http_status(crate::jsonrpc::INTERNAL_ERROR), 200);
}

#[test]
fn results_are_stamped() {
    let mut r = json!({"tools": []});
    stamp_result("tools/list", &mut r);
    assert_eq!(
        r,
        json!({"tools": [], "resultType": "complete", "ttlMs": 30000, "cacheScope": "private"})
    );
    // An upstream's shorter lifetime stands, a longer one is cut; the tool
    // list is the caller's whatever the upstream said.
    let mut r = json!({"tools": [], "ttlMs": 5000, "cacheScope": "public"});
    stamp_result("tools/list", &mut r);
    assert_eq!(
        (&r["ttlMs"], &r["cacheScope"]),
        (&json!(5000), &json!("private"))
    );
    let mut r = json!({"prompts": [], "ttlMs": 90000, "cacheScope": "public"});
    stamp_result("prompts/list", &mut r);
    assert_eq!(
        (&r["ttlMs"], &r["cacheScope"]),
        (&json!(30000), &json!("public"))
    );
    let mut hint = CacheHint::default();
    hint.absorb(&json!({"ttlMs": 9000, "cacheScope": "public"}));
    hint.absorb(&json!({"prompts": []}));
    hint.absorb(&json!({"ttlMs": 4000, "cacheScope": "private"}));
    hint.absorb(&json!({"ttlMs": 7000, "cacheScope": "public"}));
    assert_eq!(
        (hint.ttl_ms, hint.merged_scope()),
        (Some(4000), Some("private"))
    );
    // One upstream says public, one says nothing: the merged list is private.
    let mut hint = CacheHint::default();
    hint.absorb(&json!({"ttlMs": 9000, "cacheScope": "public"}));
    hint.absorb(&json!({"prompts": []}));
    assert_eq!(hint.merged_scope(), Some("private"));
    let mut hint = CacheHint::default();
    hint.absorb(&json!({"cacheScope": "public"}));
    hint.absorb(&json!({"cacheScope": "public"}));
    assert_eq!(hint.merged_scope(), Some("public"));
    // No upstream gave hints: the merged list gets none (a 2025-11-25 client's
    // list is as its upstreams made it; a 2026-07-28 one's is stamped private).
    let mut hint = CacheHint::default();
    hint.absorb(&json!({"prompts": []}));
    hint.absorb(&json!({"prompts": []}));
    let mut merged = Map::new();
    hint.apply(&mut merged);
    assert!(merged.is_empty(), "{merged:?}");
    let mut r = json!({"resultType": "input_required", "requestState": "x"});
    stamp_result("tools/call", &mut r);
    assert_eq!(r["resultType"], "input_required");
    assert!(r.get("ttlMs").is_none());
}

#[test]
fn request_states_are_bound_and_expire() {
    let key = StateKey::random();
    let mut args = Map::new();
    args.insert("x".into(), json!(1));
    let b = Binding::new("alice", "fx.echo", &args);
    let t = key.seal(&b, 1000);
    assert!(key.opens(&t, &b, 1000));
    assert!(key.opens(&t, &b, 1000 + STATE_TTL_SECS));
    assert!(!key.opens(&t, &b, 1001 + STATE_TTL_SECS), "expired");
    assert!(
        !key.opens(&t, &Binding::new("bob", "fx.echo", &args), 1000),
        "another caller"
    );
    assert!(
        !key.opens(&t, &Binding::new("alice", "fx.other", &args), 1000),
        "another tool"
    );
    args.insert("x".into(), json!(2));
    assert!(
        !key.opens(&t, &Binding::new("alice", "fx.echo", &args), 1000),
        "other arguments"
    );
    assert!(
        !StateKey::random().opens(&t, &b, 1000),
        "another gateway's key"
    );
    // Any byte changed, or anything appended, and the state no longer opens.
    let mut bytes = URL_SAFE_NO_PAD.decode(&t).unwrap();
    for i in [0, 12, bytes.len() / 2, bytes.len() - 1] {
        bytes[i] ^= 1;
        assert!(
            !key.opens(&URL_SAFE_NO_PAD.encode(&bytes), &b, 1000),
            "byte {i}"
        );
        bytes[i] ^= 1;
    }
    assert!(!key.opens(&format!("{t}-TAMPERED"), &b, 1000));
    // Nothing of the binding can be read off the token.
    let plain = String::from_utf8_lossy(&URL_SAFE_NO_PAD.decode(&t).unwrap()).into_owned();
    assert!(!plain.contains("alice") && !plain.contains("fx.echo"));
    assert!(!key.opens("garbage", &b, 1000));
    let parked = key.seal_parked(&b, 1000, Some("p-1"));
    assert_eq!(key.open(&parked, &b, 1000), Some(Some("p-1".to_owned())));
    assert_eq!(key.open(&t, &b, 1000), Some(None));
}

#[test]
fn a_binding_ignores_nothing_the_caller_sent() {
    let alice = warden_core::Caller::new("alice");
    let a = Binding::of_call(Some(&alice), "t", Some(&json!({"x": 1})));
    assert_eq!(
        a,
        Binding::of_call(Some(&alice), "t", Some(&json!({"x": 1})))
    );
    assert_ne!(
        a,
        Binding::of_call(Some(&alice), "t", Some(&json!({"x": 2})))
    );
    assert_ne!(
        a,
        Binding::of_call(Some(&alice), "u", Some(&json!({"x": 1})))
    );
    assert_ne!(a, Binding::of_call(None, "t", Some(&json!({"x": 1}))));
    assert_eq!(
        Binding::of_call(None, "t", None),
        Binding::of_call(None, "t", Some(&json!({})))
    );
}
