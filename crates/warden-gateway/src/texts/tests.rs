use super::*;

#[test]
fn guard_texts() {
    assert_eq!(
        guard_blocked("crm.lookup", "cards", &["pii.card".into(), "pii.iban".into()]),
        "Error: The result of tool 'crm.lookup' was withheld: guard 'cards' found pii.card, pii.iban in it. Do not retry the same call; ask the user how to proceed."
    );
    assert_eq!(
        guard_blocked_arguments("mail.send", "no-keys-out", &["secrets.aws_access_key".into()]),
        "Error: Tool 'mail.send' was not called: guard 'no-keys-out' found secrets.aws_access_key in its arguments. Do not send it in another form; ask the user how to proceed."
    );
    assert_eq!(
        guard_label_unrecorded("web.fetch", "injected", 1),
        "Error: The result of tool 'web.fetch' was withheld: guard 'injected' labelled it, and what this session has touched could not be recorded. Retry in 1 s."
    );
    let card = ["pii.card".to_owned()];
    let r = "resource 'fx://a/r1'";
    assert_eq!(
        guard_withheld_read(r, "cards", &card, Withheld::Blocked),
        "The resource 'fx://a/r1' was withheld: guard 'cards' found pii.card in it. Do not retry the same request; ask the user how to proceed."
    );
    assert_eq!(
        guard_withheld_read("prompt 'p'", "cards", &card, Withheld::NotLetThrough),
        "The prompt 'p' was withheld: guard 'cards' found pii.card in it, and the user did not let it through. Do not retry the same request; ask the user how to proceed."
    );
    assert_eq!(
        guard_withheld_read(r, "cards", &card, Withheld::CannotAsk),
        "The resource 'fx://a/r1' was withheld: guard 'cards' found pii.card in it, and the client cannot ask the user to let it through. Do not retry the same request; ask the user how to proceed."
    );
    assert_eq!(
        guard_withheld_read(r, "taint", &[], Withheld::Unrecorded),
        "The resource 'fx://a/r1' was withheld: guard 'taint' labelled it, and what this session has touched could not be recorded. Retry in 1 s."
    );
    assert_eq!(
        guard_ask_read(r, "cards", &card, &["/contents/0/text".into()]),
        "Guard 'cards' found pii.card in the resource 'fx://a/r1' (at /contents/0/text). Pass it on to the model?"
    );
    let at = ["/content/0/text".to_owned()];
    assert_eq!(
        guard_ask_arguments("cards", &card, &["/text".into()]),
        "Guard 'cards' found pii.card in the arguments (at /text); the matches are hidden below."
    );
    assert_eq!(
        guard_ask_result("crm.lookup", "cards", &card, &at),
        "Guard 'cards' found pii.card in the result of tool 'crm.lookup' (at /content/0/text). Pass the result on to the model?"
    );
    assert_eq!(
        guard_ask_refused("crm.lookup", "cards", &card),
        "Error: The result of tool 'crm.lookup' was withheld: guard 'cards' found pii.card in it, and the user did not let it through. Do not retry the same call; ask the user how to proceed."
    );
    assert_eq!(
        guard_ask_unavailable("crm.lookup", "cards", &card),
        "Error: The result of tool 'crm.lookup' was withheld: guard 'cards' found pii.card in it, and the client cannot ask the user to let it through. Do not retry the same call; ask the user how to proceed."
    );
}

#[test]
fn pin_texts() {
    assert_eq!(
        pin_changed("fx.stamp", &["description", "inputSchema"]),
        "Tool 'fx.stamp' changed since it was reviewed (description, inputSchema); its new definition is not approved."
    );
    assert_eq!(
        pin_added("fx.extra"),
        "Tool 'fx.extra' was added since the tools were reviewed; it is not approved."
    );
    assert_eq!(
        pin_renamed("fx.new_name", "fx.old_name"),
        "Tool 'fx.new_name' is 'fx.old_name' renamed since it was reviewed; the new name is not approved."
    );
}

#[test]
fn quota_and_flow_texts() {
    assert_eq!(
        rate_limited("search.query", "30 calls per minute", "alice", 12),
        "Error: Rate limit for tool 'search.query' reached (30 calls per minute for caller 'alice'). Retry in 12 s."
    );
    assert_eq!(
        concurrency_limited("s.q", 2, "bob", 1),
        "Error: Concurrency limit for tool 's.q' reached (2 calls at a time for caller 'bob'). Retry in 1 s."
    );
    assert_eq!(
        quota_unverifiable("rate limit", "s.q", 1),
        "Error: The rate limit for tool 's.q' could not be checked. Retry in 1 s."
    );
    assert_eq!(
        quota_unverifiable("concurrency limit", "s.q", 1),
        "Error: The concurrency limit for tool 's.q' could not be checked. Retry in 1 s."
    );
    assert_eq!(
        flow_unverifiable("mail.send", 1),
        "Error: Tool 'mail.send' cannot be called now: what this session has touched could not be checked. Retry in 1 s."
    );
    assert_eq!(
        flow_denied("mail.send", "Reason."),
        "Error: Tool 'mail.send' cannot be called at this point of the session. Reason."
    );
    assert_eq!(
        flow_not_approved("mail.send", "Reason.", "Error: This call needs approval, and approval was refused."),
        "Error: Tool 'mail.send' needs approval at this point of the session, and it was not given. Reason. (This call needs approval, and approval was refused.)"
    );
    assert_eq!(
        http_caller_rate(3),
        "Too many requests: this caller is over its request rate (gateway.http_caller_rate); retry in 3 s."
    );
    // A caller name from a token is echoed escaped: it cannot break the line.
    assert!(!rate_limited("t", "1 call per second", "a\nb", 1).contains('\n'));
}

#[test]
fn gateway_texts() {
    assert_eq!(
        listing_failed(&["bad".into()]),
        "Listing failed: upstream 'bad' is not available, so the list would be incomplete. Retry shortly."
    );
    assert_eq!(
        listing_failed(&["a".into(), "b".into()]),
        "Listing failed: upstream 'a', 'b' is not available, so the list would be incomplete. Retry shortly."
    );
    assert_eq!(
        UPSTREAM_NO_ANSWER,
        "Internal error: the server behind the gateway did not answer."
    );
    assert_eq!(
        UPSTREAM_EMPTY_ANSWER,
        "Internal error: the server behind the gateway sent an empty answer."
    );
    assert_eq!(NO_CLIENT, "No client is connected to the gateway.");
    assert_eq!(
        invalid_request(NOT_A_BATCH),
        "Invalid request: JSON-RPC batches are not supported by MCP; send one message per line."
    );
    assert_eq!(
        invalid_request(NO_VERSION),
        "Invalid request: the message must carry \"jsonrpc\": \"2.0\"."
    );
    assert_eq!(
        invalid_request(NOT_AN_OBJECT),
        "Invalid request: a JSON-RPC message must be an object."
    );
    assert_eq!(
        invalid_request(BAD_ID),
        "Invalid request: a request id must be a string or a number."
    );
    assert_eq!(
        invalid_request(BAD_METHOD),
        "Invalid request: \"method\" must be a string."
    );
    assert_eq!(
        invalid_request(NO_KIND),
        "Invalid request: the message is neither a request, a notification nor a response."
    );
    assert_eq!(
        invalid_request(ID_IN_USE),
        "Invalid request: a request with this id is still running in this session."
    );
    assert_eq!(
        parse_error("EOF while parsing"),
        "Parse error: EOF while parsing."
    );
    assert_eq!(
        request_too_large(70000, 65536),
        "Request too large: 70000 bytes; the gateway accepts at most 65536 (gateway.max_message_bytes)."
    );
    assert_eq!(method_not_found("x/y"), "Method not found: x/y");
}

#[test]
fn http_front_texts() {
    assert_eq!(
        http_bad_version("1999-01-01", &["2025-11-25", "2025-06-18"]),
        "Bad request: unsupported MCP-Protocol-Version '1999-01-01'; this gateway speaks 2025-11-25, 2025-06-18."
    );
    assert_eq!(
        http_too_large(1024),
        "Request too large: the gateway accepts bodies of at most 1024 bytes (gateway.max_message_bytes)."
    );
    assert_eq!(
        HTTP_UNKNOWN_SESSION,
        "Session not found: it ended or expired. Start a new one with initialize."
    );
    assert_eq!(
        HTTP_NO_CREDENTIAL,
        "Unauthorized: send 'Authorization: Bearer <API key or token>'."
    );
}

#[test]
fn http_limit_texts() {
    assert_eq!(
        http_caller_sessions(2),
        "Too many requests: this caller already has 2 open sessions; end unused ones with DELETE or let them expire."
    );
    assert_eq!(
        http_caller_sessions(1),
        "Too many requests: this caller already has 1 open session; end unused ones with DELETE or let them expire."
    );
    assert_eq!(
        HTTP_TOO_MANY_CONNECTIONS,
        "Service unavailable: too many open connections; retry later."
    );
    assert_eq!(
        HTTP_TOO_MANY_CLIENT_CONNECTIONS,
        "Service unavailable: too many open connections from this address; close idle ones or retry later."
    );
    assert_eq!(
        HTTP_BODY_TIMEOUT,
        "Request timeout: the request body did not arrive in time; nothing was run. Send the whole body at once and retry."
    );
}

#[test]
fn token_time_and_claim_texts() {
    assert_eq!(
        HTTP_TOKEN_NOT_YET_VALID,
        "Unauthorized: the token is not valid yet."
    );
    assert_eq!(
        HTTP_TOKEN_ISSUED_IN_FUTURE,
        "Unauthorized: the token says it was issued in the future."
    );
    assert_eq!(
        HTTP_TOKEN_NO_AUDIENCE,
        "Unauthorized: the token does not name an audience."
    );
    assert_eq!(
        HTTP_TOKEN_NO_ISSUER,
        "Unauthorized: the token does not name an issuer."
    );
}

#[test]
fn oauth_texts() {
    assert_eq!(
        http_insufficient_scope("mcp notes:write"),
        "Forbidden: the token lacks a scope this request needs; ask for: mcp notes:write."
    );
    assert_eq!(
        HTTP_TOKEN_UNKNOWN_KEY,
        "Unauthorized: the token is signed with a key the issuer does not publish."
    );
}

#[test]
fn envelope_texts() {
    assert_eq!(
        unsupported_version("2027-01-01", "2026-07-28"),
        "Unsupported protocol version '2027-01-01'; this gateway speaks 2026-07-28 (or the initialize handshake for 2025-11-25 and earlier)."
    );
    assert_eq!(
        header_mismatch("Mcp-Method"),
        "Bad request: the Mcp-Method header does not match the request body."
    );
    assert_eq!(
        ENVELOPE_VERSION_NOT_STRING,
        "Invalid params: _meta[\"io.modelcontextprotocol/protocolVersion\"] must be a string."
    );
    assert_eq!(
        ENVELOPE_CAPABILITIES_NOT_OBJECT,
        "Invalid params: _meta[\"io.modelcontextprotocol/clientCapabilities\"] must be an object."
    );
    assert_eq!(
        ENVELOPE_NO_META,
        "Invalid params: a 2026-07-28 request carries _meta with \"io.modelcontextprotocol/protocolVersion\" and \"io.modelcontextprotocol/clientCapabilities\"; this one has no _meta object."
    );
    assert_eq!(
        ENVELOPE_NO_VERSION,
        "Invalid params: _meta is missing \"io.modelcontextprotocol/protocolVersion\"; a 2026-07-28 request names its protocol version."
    );
}
