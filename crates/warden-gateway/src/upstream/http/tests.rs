use super::{stateless_headers, take_events, Head};

#[test]
fn a_2026_request_carries_its_routing_headers() {
    let line = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"caf\u00e9","arguments":{"big":[1,2,3]},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    assert_eq!(
        stateless_headers(line),
        [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?Y2Fmw6k=?="),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
    );
    let read = br#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"test://a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    assert_eq!(
        stateless_headers(read)[2],
        ("mcp-name".to_owned(), "test://a".to_owned())
    );
    // A message of an older revision, or one that is no request, gets none.
    assert!(stateless_headers(
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#
    )
    .is_empty());
    assert!(stateless_headers(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_empty());
    assert!(stateless_headers(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#).is_empty());
}

#[test]
fn a_requests_trace_context_is_read_from_params_of_any_shape() {
    let head = |line: &str| serde_json::from_slice::<Head>(line.as_bytes()).unwrap();
    let h = head(
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"_meta":1},"_meta":{"traceparent":"00-a","tracestate":"k=v","x":[1]}}}"#,
    );
    assert_eq!(h.id, Some(7));
    assert_eq!(
        h.params.unwrap().trace_headers(),
        [
            ("traceparent", "00-a".to_owned()),
            ("tracestate", "k=v".to_owned())
        ]
    );
    for params in [
        r#"[1,{"a":2}]"#,
        "1.5",
        r#""s""#,
        "null",
        "true",
        r#"{"_meta":{"traceparent":3}}"#,
    ] {
        let h = head(&format!(r#"{{"id":1,"method":"m","params":{params}}}"#));
        assert_eq!(h.id, Some(1), "{params}");
        assert!(h
            .params
            .map(|p| p.trace_headers())
            .unwrap_or_default()
            .is_empty());
    }
}

#[test]
fn sse_events_are_cut_at_blank_lines() {
    let mut b = b"id: 1-0\nretry: 1000\ndata: \n\nevent: message\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\ndata: {\"c\"".to_vec();
    let events = take_events(&mut b);
    let seen: Vec<(Option<&str>, &[u8])> = events
        .iter()
        .map(|e| (e.id.as_deref(), e.data.as_slice()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (Some("1-0"), &b""[..]),
            (None, &b"{\"a\":1}"[..]),
            (None, &b""[..]),
            (None, &b"{\"b\":\n2}"[..]),
        ]
    );
    let advised: Vec<Option<u64>> = events.iter().map(|e| e.retry).collect();
    assert_eq!(
        advised,
        vec![Some(1000), None, None, None],
        "retry: is read"
    );
    assert_eq!(b, b"data: {\"c\"".to_vec());
    b.extend_from_slice(b":3}\n\n");
    assert_eq!(take_events(&mut b)[0].data, b"{\"c\":3}".to_vec());
    assert!(b.is_empty());
}
