use super::*;
use serde_json::Value;
use warden_core::UnknownMode;

const EXAMPLE: &str = r#"
[gateway]
stdio_caller = "local"

[defaults]
unknown_arguments = "warn"

[[upstream]]
name = "notes"
command = ["./notes-server", "--flag"]
unknown_arguments = "reject"
timeout_ms = 5000

[upstream.tools.create_note]
aliases = { body = "text" }
pin = { is_public = false }
close_schema = true
"#;

#[test]
fn parses_the_example_shape() {
    let c = Config::parse(EXAMPLE, "warden.toml").unwrap();
    assert_eq!(c.upstream[0].timeout_ms, 5000);
    let p = c.policy().resolve("notes", "create_note");
    assert_eq!(p.unknown, UnknownMode::Reject);
    assert_eq!(p.aliases, vec![("body".to_string(), "text".to_string())]);
    assert_eq!(p.pins.get("is_public"), Some(&Value::Bool(false)));
    assert!(p.close_schema);
    assert_eq!(
        c.policy().resolve("notes", "list_notes").unknown,
        UnknownMode::Reject
    );
}

#[test]
fn an_approval_waits_as_long_without_an_access_table() {
    let c = Config::parse(EXAMPLE, "warden.toml").unwrap();
    assert_eq!(c.access.approval_timeout_ms, 120_000);
    let with = format!("{EXAMPLE}\n[access]\ndefault = \"allow\"\n");
    assert_eq!(
        Config::parse(&with, "warden.toml")
            .unwrap()
            .access
            .approval_timeout_ms,
        120_000
    );
}

#[test]
fn http_upstreams_are_checked() {
    let e = Config::parse(
        "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\ntls_ca_file = \"ca.pem\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: upstream[0].tls_ca_file: is for https:// upstreams; this url is plain http"
    );
    let e = Config::parse(
        "[[upstream]]\nname = \"a\"\nurl = \"ftp://x/mcp\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: upstream[0].url: 'ftp://x/mcp' is not an http:// or https:// URL"
    );
    let e = Config::parse(
        "[[upstream]]\nname = \"a\"\nurl = \"http://x/mcp\"\ncommand = [\"y\"]\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: upstream[0].url: set command (a child process) or url (an HTTP server), not both"
    );
    assert!(Config::parse(
        "[[upstream]]\nname = \"a\"\nurl = \"https://mcp.example.com/mcp\"\n",
        "w.toml"
    )
    .is_ok());
    let e = Config::parse("[gateway]\ntls_cert = \"c.pem\"\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: gateway: tls_cert and tls_key go together: set both to serve https, or neither"
    );
}

#[test]
fn the_admin_listener_has_one_name_and_traces_a_usable_endpoint() {
    let c = Config::parse("[metrics]\nlisten = \"127.0.0.1:1\"\n", "w.toml").unwrap();
    assert_eq!(
        c.admin_listen(),
        Some("127.0.0.1:1"),
        "the older key still works"
    );
    let c = Config::parse(
        "[admin]\nlisten = \"127.0.0.1:2\"\ncallers = [\"group:ops\"]\n",
        "w.toml",
    )
    .unwrap();
    assert_eq!(c.admin_listen(), Some("127.0.0.1:2"));
    assert_eq!(Config::parse("", "w.toml").unwrap().admin_listen(), None);
    let e = Config::parse(
        "[admin]\nlisten = \"127.0.0.1:2\"\n[metrics]\nlisten = \"127.0.0.1:1\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "w.toml: metrics.listen: admin.listen already names the admin listener (which serves /metrics): remove metrics.listen");
    let e = Config::parse("[admin]\ncallers = [\"group:\"]\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: admin.callers[0]: name a caller or group:NAME"
    );
    let e = Config::parse("[traces]\nsampling_ratio = 1.5\n", "w.toml").unwrap_err();
    assert_eq!(e.to_string(), "w.toml: traces.sampling_ratio: must be between 0.0 (no new trace recorded) and 1.0 (every one)");
    let e = Config::parse("[traces]\nendpoint = \"grpc://c:4317\"\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: traces.endpoint: 'grpc://c:4317' is not an http:// or https:// URL"
    );
    let e = Config::parse("[audit]\notlp = \"grpc://c:4317\"\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: audit.otlp: 'grpc://c:4317' is not an http:// or https:// URL"
    );
    let e = Config::parse("[traces]\nendpont = \"x\"\n", "w.toml").unwrap_err();
    assert!(e.to_string().contains("Did you mean 'endpoint'?"), "{e}");
}

#[test]
fn unknown_key_names_file_key_and_fix() {
    let e = Config::parse("[gateway]\nstdio_caler = \"x\"\n", "w.toml").unwrap_err();
    assert_eq!(
            e.to_string(),
            "w.toml: gateway.stdio_caler: unknown key in [gateway]. Did you mean 'stdio_caller'? Known keys: front, stdio_caller, max_message_bytes, listen, anonymous_caller, allowed_origins, allowed_hosts, session_idle, max_sessions_per_caller, http_head_timeout, http_idle_timeout, http_body_timeout, max_connections, max_connections_per_client, drain_timeout, tls_cert, tls_key, state_secret_env, state_secret_previous_env, session_lifetime, upstream_error_data, http_caller_rate, http_caller_burst."
        );
    let e = Config::parse(
        "[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\n[upstream.tools.t]\npinn = {}\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(e.key, "upstream[0].tools.t.pinn");
    assert!(e.message.contains("Did you mean 'pin'?"), "{}", e.message);
    let e = Config::parse("[defaultz]\n", "w.toml").unwrap_err();
    assert!(e.message.contains("Did you mean 'defaults'?"));
}

#[test]
fn bad_values_are_named() {
    let e = Config::parse("[defaults]\nunknown_arguments = \"block\"\n", "w.toml").unwrap_err();
    assert_eq!(
            e.to_string(),
            "w.toml: defaults.unknown_arguments: 'block' is not an unknown-argument mode; use one of: warn, strip, reject"
        );
    let e = Config::parse("[[upstream]]\nname=\"a\"\ncommand=[]\n", "w.toml").unwrap_err();
    assert_eq!(e.key, "upstream[0].command");
    let e = Config::parse(
        "[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\n[[upstream]]\nname=\"a\"\ncommand=[\"y\"]\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(e.key, "upstream[1].name");
    let e = Config::parse("[gateway\n", "w.toml").unwrap_err();
    assert!(e.message.starts_with("not valid TOML"), "{}", e.message);
    let e = Config::parse("[[upstream]]\nname=\"a\"\ncommand=\"x\"\n", "w.toml").unwrap_err();
    assert!(
        e.message.contains("command") || e.message.contains("sequence"),
        "{}",
        e.message
    );
}

#[test]
fn serde_errors_read_as_the_key_table_did() {
    // serde words its list of known keys differently for one, two and more.
    let e = Config::parse("[store]\nurl_ = 1\n", "w.toml").unwrap_err();
    assert_eq!(
            e.to_string(),
            "w.toml: store.url_: unknown key in [store]. Did you mean 'url'? Known keys: url, url_env, connections."
        );
    let e = Config::parse("[idempotency]\nmeta = 1\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: idempotency.meta: unknown key in [idempotency]. Known keys: meta_key, retention."
    );
    let e = Config::parse(
        "[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\n[upstream.tools.\"a.b\"]\npinn = 1\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(e.key, "upstream[0].tools.a.b.pinn");
    assert!(
        e.message
            .starts_with("unknown key in [upstream.tools.*]. Did you mean 'pin'?"),
        "{}",
        e.message
    );
    // A word the field does not know names the key; a value of the wrong type
    // is serde's message for the whole file.
    let e = Config::parse("[gateway]\nfront = \"ftp\"\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: gateway.front: 'ftp' is not a front; use \"stdio\" or \"http\""
    );
    let e = Config::parse(
        "[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\npins = \"warn\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: upstream[0].pins: 'warn' is not a pins mode; use one of: hidden, ask, report"
    );
    let ask = "[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\npins = \"ask\"\n";
    let config = Config::parse(ask, "w.toml").unwrap();
    assert_eq!(config.upstream[0].pins, Some(PinMode::Ask));
    let e = Config::parse("[access]\ndefault = \"ask\"\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: access.default: 'ask' is not a default; use allow or deny"
    );
    let e = Config::parse("[gateway]\nfront = 1\n", "w.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: invalid type: integer `1`, expected a string"
    );
    let e = Config::parse("[[upstream]]\ncommand = [\"x\"]\n", "w.toml").unwrap_err();
    assert_eq!(e.to_string(), "w.toml: missing field `name`");
}

#[test]
fn the_store_url_may_come_from_the_environment_and_is_never_echoed() {
    let env = |var: &str| match var {
        "PG" => Some("postgres://warden:s3cret@db/warden\n".to_owned()),
        "BAD" => Some("mysql://warden:s3cret@db".to_owned()),
        _ => None,
    };
    let store = |url: Option<&str>, url_env: Option<&str>| StoreConfig {
        url: url.map(str::to_owned),
        url_env: url_env.map(str::to_owned),
        connections: None,
    };
    let url = check::store_url(&store(None, Some("PG")), env).unwrap();
    assert_eq!(url.as_deref(), Some("postgres://warden:s3cret@db/warden"));
    let fail = |s: StoreConfig| {
        let e = check::store_url(&s, env).unwrap_err();
        format!("{}: {}", e.key, e.message)
    };
    assert_eq!(
            fail(store(None, Some("BAD"))),
            "store.url_env: the environment variable 'BAD' holds no store URL; it must be sqlite://FILE or postgres://USER:PASSWORD@HOST/DB"
        );
    assert_eq!(
        fail(store(None, Some("UNSET"))),
        "store.url_env: the environment variable 'UNSET' is not set"
    );
    assert_eq!(
        fail(store(Some("sqlite://w.db"), Some("PG"))),
        "store: set url or url_env (the environment variable holding the URL), not both"
    );
    assert_eq!(check::store_url(&store(None, None), env).unwrap(), None);
    // Through a whole file, the variable's value becomes store.url.
    let e = Config::parse(
        "[store]\nurl_env = \"WARDEN_TEST_SURELY_UNSET_VAR\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: store.url_env: the environment variable 'WARDEN_TEST_SURELY_UNSET_VAR' is not set"
    );
}

#[test]
fn store_connections_are_for_postgres_and_bounded() {
    let parse = |text: &str| Config::parse(text, "w.toml").map_err(|e| e.to_string());
    let c = parse("[store]\nurl = \"postgres://w@db/w\"\nconnections = 3\n").unwrap();
    assert_eq!(c.store.connections, Some(3));
    assert_eq!(
            parse("[store]\nurl = \"sqlite://w.db\"\nconnections = 3\n").unwrap_err(),
            "w.toml: store.connections: applies to a PostgreSQL store only (a SQLite file is one connection); remove it or set a postgres:// url"
        );
    assert_eq!(
            parse("[store]\nconnections = 3\n").unwrap_err(),
            "w.toml: store.connections: applies to a PostgreSQL store only (a SQLite file is one connection); remove it or set a postgres:// url"
        );
    for n in [0, 257] {
        assert_eq!(
            parse(&format!(
                "[store]\nurl = \"postgres://w@db/w\"\nconnections = {n}\n"
            ))
            .unwrap_err(),
            format!("w.toml: store.connections: {n} is out of range; use 1 to 256")
        );
    }
}

#[test]
fn audit_durability_and_retention_are_read_and_nonsense_refused() {
    let refused = |toml: &str| Config::parse(toml, "w.toml").unwrap_err().to_string();
    let c = Config::parse(
        "[audit]\ndurability = \"async\"\nretention = \"90d\"\n",
        "w.toml",
    )
    .unwrap();
    assert_eq!(c.audit.durability, crate::config::Durability::Async);
    assert_eq!(c.audit.retention.as_deref(), Some("90d"));
    let c = Config::parse("", "w.toml").unwrap();
    assert_eq!(c.audit.durability, crate::config::Durability::Sync);
    assert_eq!(c.audit.retention, None);
    assert_eq!(
        refused("[audit]\ndurability = \"eventually\"\n"),
        "w.toml: audit.durability: 'eventually' is not a durability; use \"sync\" (an answer waits for its record) or \"async\" (it does not)"
    );
    assert_eq!(
        refused("[audit]\nretention = \"forever\"\n"),
        "w.toml: audit.retention: 'forever' is not a duration; write a number and a unit: 90s, 15m, 24h, 7d"
    );
    assert_eq!(
        refused("[audit]\nretention = \"0d\"\n"),
        "w.toml: audit.retention: must be at least 1s: a zero retention would delete every record as it is written"
    );
}

#[test]
fn http_limits_have_defaults_and_refuse_nonsense() {
    let c = Config::parse("", "w.toml").unwrap();
    // Without an [access] table an approval waits as long as with one.
    assert_eq!(c.access.approval_timeout_ms, 120_000);
    let g = &c.gateway;
    assert_eq!(
        (g.http_head_timeout.as_str(), g.http_idle_timeout.as_str()),
        ("10s", "60s")
    );
    assert_eq!(
        (
            g.max_connections,
            g.max_connections_per_client,
            g.max_sessions_per_caller
        ),
        (1024, 64, 100)
    );
    let refused = |toml: &str| Config::parse(toml, "w.toml").unwrap_err().to_string();
    assert_eq!(
        refused("[gateway]\nmax_connections = 0\n"),
        "w.toml: gateway.max_connections: must be at least 1: 0 would refuse everyone"
    );
    assert_eq!(
        refused("[gateway]\nmax_connections_per_client = 0\n"),
        "w.toml: gateway.max_connections_per_client: must be at least 1: 0 would refuse everyone"
    );
    assert_eq!(
        refused("[gateway]\nmax_sessions_per_caller = 0\n"),
        "w.toml: gateway.max_sessions_per_caller: must be at least 1: 0 would refuse everyone"
    );
    assert_eq!(
            refused("[gateway]\nhttp_head_timeout = \"soon\"\n"),
            "w.toml: gateway.http_head_timeout: 'soon' is not a duration; write a number and a unit: 90s, 15m, 24h, 7d"
        );
    assert_eq!(
            refused("[gateway]\nhttp_idle_timeout = \"0s\"\n"),
            "w.toml: gateway.http_idle_timeout: must be at least 1s: a zero timeout would close every connection at once"
        );
    assert!(refused("[gateway]\nmax_connections = -1\n").contains("invalid value"));
    assert_eq!(g.drain_timeout, "30s");
    assert_eq!(
            refused("[gateway]\ndrain_timeout = \"half a minute\"\n"),
            "w.toml: gateway.drain_timeout: 'half a minute' is not a duration; write a number and a unit: 90s, 15m, 24h, 7d"
        );
    for key in ["session_idle", "session_lifetime"] {
        assert_eq!(
            refused(&format!("[gateway]\n{key} = \"0d\"\n")),
            format!("w.toml: gateway.{key}: must be at least 1s: every HTTP session would end as it began")
        );
    }
    let zero = Config::parse("[gateway]\ndrain_timeout = \"0s\"\n", "w.toml").unwrap();
    assert_eq!(zero.gateway.drain_timeout, "0s");
}

#[test]
fn webhooks_are_parsed_once_when_checked() {
    let c = Config::parse(
        "[access]\ndefault = \"deny\"\nwebhook = { url = \"https://grant.example/g\" }\n\
             [[hook]]\nphase = \"after\"\nurl = \"http://127.0.0.1:9/a\"\n\
             [[hook]]\nphase = \"before\"\nurl = \"http://127.0.0.1:9/b\"\ntimeout_ms = 50\n",
        "w.toml",
    )
    .unwrap();
    assert_eq!(c.access.default, warden_core::Effect::Deny);
    let grant = c.access.webhook.as_ref().unwrap();
    assert_eq!(grant.url(), "https://grant.example/g");
    assert!(grant.is_tls());
    let hooks: Vec<(Phase, &str)> = c.hook.iter().map(|h| (h.phase, h.webhook.url())).collect();
    assert_eq!(
        hooks,
        [
            (Phase::After, "http://127.0.0.1:9/a"),
            (Phase::Before, "http://127.0.0.1:9/b")
        ]
    );
}

#[test]
fn oauth_and_credential_settings_that_cannot_work_are_errors() {
    let e = |t: &str| Config::parse(t, "w.toml").unwrap_err().to_string();
    assert_eq!(
            e("[oauth]\nrequired_scopes = [\"mcp\"]\n"),
            "w.toml: oauth.issuer: is required once [oauth] is used: the URL of the authorization server"
        );
    assert_eq!(
            e("[oauth]\nissuer = \"http://id.example.com\"\n"),
            "w.toml: oauth.issuer: 'http://id.example.com' is plain http: an issuer must be https (http is allowed for localhost, 127.0.0.1 and [::1] only, for tests)"
        );
    assert!(Config::parse("[oauth]\nissuer = \"http://127.0.0.1:9000\"\n", "w.toml").is_ok());
    assert_eq!(
        e("[oauth]\nissuer = \"https://id.example\"\nrequired_scopes = [\"a b\"]\n"),
        "w.toml: oauth: 'a b' is not a scope: printable ASCII without spaces, '\"' or '\\'"
    );
    assert_eq!(
            e("[oauth]\nissuer = \"https://id.example\"\nintrospection = true\n"),
            "w.toml: oauth.introspection: needs client_id and client_secret_env: the issuer only answers its registered clients"
        );
    let both = |auth_issuer: &str| {
        format!("[auth]\njwt_secret_env = \"S\"\nissuer = \"{auth_issuer}\"\n[oauth]\nissuer = \"https://id.example\"\n")
    };
    assert_eq!(
            e(&both("https://id.example")),
            "w.toml: auth.issuer: is also oauth.issuer: a JWT naming that issuer is checked with the [oauth] issuer's published keys only, so [auth] would never accept one; set auth.issuer to the issuer its own tokens name"
        );
    assert!(Config::parse(&both("https://legacy.example"), "w.toml").is_ok());
    assert!(Config::parse(&both("https://id.example/"), "w.toml").is_ok());
    assert_eq!(
            e("[oauth]\nissuer = \"https://id.example\"\njwks_min_interval = \"0s\"\n"),
            "w.toml: oauth.jwks_min_interval: must be at least 1s: the issuer's keys would be fetched for every token"
        );
    assert_eq!(
        e("[oauth]\nissuer = \"https://id.example\"\nintrospection_rate = 0\n"),
        "w.toml: oauth.introspection_rate: must be at least 1: no opaque token could ever be checked"
    );
    let up = "[[upstream]]\nname = \"u\"\nurl = \"http://127.0.0.1:1/mcp\"\n[[upstream.credential]]\ncallers = [\"alice\"]\n";
    assert_eq!(
        e(&format!("{up}token_env = \"A\"\ntoken_file = \"a\"\n")),
        "w.toml: upstream[0].credential[0]: set exactly one of token_env, token_file or exchange"
    );
    assert_eq!(
            e(&format!("{up}exchange = {{ audience = \"https://u.example\" }}\n")),
            "w.toml: upstream[0].credential[0].exchange: token exchange happens at [oauth] issuer as [oauth] client_id: set both (and client_secret_env)"
        );
    // A child-process upstream gives each caller with a credential a child of its own.
    let child = "[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\n";
    let entry = "[[upstream.credential]]\ncallers = [\"alice\"]\ntoken_env = \"A\"\n";
    assert_eq!(
            e(&format!("{child}{entry}")),
            "w.toml: upstream[0].credential_env: is required with [[upstream.credential]] on a child-process upstream: the variable each caller's own child gets its credential in"
        );
    assert!(Config::parse(&format!("{child}credential_env = \"T\"\nmax_caller_processes = 2\ncaller_process_idle_ms = 500\n{entry}"), "w.toml").is_ok());
    assert_eq!(
            e(&format!("{child}credential_env = \"T\"\n")),
            "w.toml: upstream[0].credential_env: names where a caller's credential goes ('T'), but no [[upstream.credential]] entry gives one"
        );
    assert_eq!(
            e(&format!("{up}token_env = \"A\"\n").replace("url = ", "credential_env = \"T\"\nurl = ")),
            "w.toml: upstream[0].credential_env: is for child-process upstreams (command); an HTTP upstream is shown a caller's credential as its bearer token"
        );
    assert_eq!(
            e(&format!("{child}max_caller_processes = 4\n")),
            "w.toml: upstream[0].max_caller_processes: is for a child-process upstream with [[upstream.credential]] entries (each such caller gets a child of its own)"
        );
    assert_eq!(
        e(&format!(
            "{child}credential_env = \"T\"\nmax_caller_processes = 0\n{entry}"
        )),
        "w.toml: upstream[0].max_caller_processes: must be at least 1"
    );
    assert_eq!(
            e(&format!("[oauth]\nissuer = \"https://id.example\"\nclient_id = \"gw\"\nclient_secret_env = \"S\"\n{child}credential_env = \"T\"\n[[upstream.credential]]\ncallers = [\"*\"]\nexchange = {{ audience = \"x\" }}\n")),
            "w.toml: upstream[0].credential[0].exchange: is for HTTP upstreams (url): a child process keeps the environment it started with, and an exchanged token expires; use token_env or token_file"
        );
    assert!(Config::parse(&format!("{up}token_env = \"A\"\n"), "w.toml").is_ok());
}

#[test]
fn warnings_for_risky_settings() {
    let c = Config::parse(
            "[defaults]\nvalidate=false\n[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\nprefix=false\n[[upstream]]\nname=\"b\"\ncommand=[\"y\"]\nprefix=false\n",
            "w.toml",
        )
        .unwrap();
    let w = c.warnings();
    assert!(w.iter().any(|w| w.contains("validate = false")));
    assert!(w.iter().any(|w| w.contains("not prefixed")));
}

#[test]
fn rules_are_checked_and_warned_about() {
    let e = Config::parse(
        "[[rule]]\ncallers = [\"*\"]\ntools = [\"a.[x\"]\neffect = \"allow\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: rule[0]: 'a.[x' is not a valid tool glob: unclosed character class; missing ']'"
    );
    let e = Config::parse(
        "[[rule]]\ncallers = [\"*\"]\ntools = [\"a\"]\neffect = \"permit\"\n",
        "w.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml: rule[0].effect: 'permit' is not an effect; use one of: allow, deny, ask"
    );
    let e = Config::parse("[access]\ndefault = \"ask\"\n", "w.toml").unwrap_err();
    assert_eq!(e.key, "access.default");
    let c = Config::parse(
            "[access]\ndefault = \"deny\"\n\
             [[rule]]\ncallers = [\"*\"]\ntools = [\"web.*\"]\neffect = \"allow\"\n\
             [[rule]]\ncallers = [\"alice\"]\ntools = [\"web.fetch\"]\neffect = \"deny\"\n\
             [[upstream]]\nname = \"web\"\ncommand = [\"x\"]\n[upstream.tools.fetch]\narbitrary_targets = true\n",
            "w.toml",
        )
        .unwrap();
    assert_eq!(
            c.warnings(),
            [
                "rule[1] never applies: rule[0] comes first and matches everything it does",
                "'web.fetch' reaches arbitrary targets (arbitrary_targets = true) and is granted: a caller who may call it reaches everything it can name (G5)"
            ]
        );
}

#[test]
fn flows_that_cannot_apply_or_cannot_be_shared_are_warned_about() {
    let flows = "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nlabels = { \"*\" = [\"private_data\"] }\n\
             [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"deny\"\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\nconcurrency = 2\n";
    let never = "flow[0] never applies: no upstream gives any tool the label 'external_sink' (F1)";
    let shared = format!("[store]\nurl = \"postgres://w@127.0.0.1/db\"\n[gateway]\nstate_secret_env = \"S\"\n{flows}");
    // Concurrency is counted in the shared store: nothing to say about it.
    assert_eq!(
        Config::parse(&shared, "w.toml").unwrap().warnings(),
        [never]
    );
    let unshared = format!("[gateway]\nstate_secret_env = \"S\"\n{flows}");
    assert_eq!(
            Config::parse(&unshared, "w.toml").unwrap().warnings(),
            [
                never,
            "flows: replicas sharing gateway.state_secret_env without a PostgreSQL store keep flow trails per process: an HTTP session is not taken up from its id (at another replica, after a restart or once idle it gets 404), and a 2026-07-28 client that drops its flow context and moves starts afresh (F3)"
            ]
        );
}

#[test]
fn rerun_abandoned_is_a_switch_per_upstream_and_tool_and_is_warned_about() {
    let toml = "[[upstream]]\nname = \"pay\"\ncommand = [\"x\"]\n[upstream.tools.refund]\nrerun_abandoned = false\n\
        [upstream.tools.lookup]\nrerun_abandoned = true\n\
        [[upstream]]\nname = \"search\"\ncommand = [\"x\"]\nrerun_abandoned = true\n[upstream.tools.index]\nrerun_abandoned = false\n";
    let c = Config::parse(toml, "w.toml").unwrap();
    let (pay, search) = (&c.upstream[0], &c.upstream[1]);
    assert!(pay.reruns_abandoned("lookup"));
    assert!(!pay.reruns_abandoned("refund") && !pay.reruns_abandoned("charge"));
    assert!(search.reruns_abandoned("query"), "the upstream's setting");
    assert!(!search.reruns_abandoned("index"), "the tool's wins");
    assert_eq!(
        c.warnings(),
        [
            "'pay.lookup': rerun_abandoned = true runs a keyed call again once the gateway that ran it stopped mid-call, so it may take effect twice; only for tools safe to repeat (I1)",
            "upstream 'search': rerun_abandoned = true runs a keyed call again once the gateway that ran it stopped mid-call, so it may take effect twice; only for tools safe to repeat (I1)"
        ]
    );
    let bad = "[[upstream]]\nname = \"pay\"\ncommand = [\"x\"]\nrerun_abandoned = \"yes\"\n";
    let err = Config::parse(bad, "w.toml").expect_err("a string is refused");
    assert!(err.to_string().contains("expected a boolean"), "{err}");
}

#[test]
fn relative_programs_resolve_against_the_config_folder() {
    let mut c = Config::parse(EXAMPLE, "w.toml").unwrap();
    c.path = PathBuf::from("/etc/warden/warden.toml");
    assert_eq!(
        c.program(&c.upstream[0]),
        PathBuf::from("/etc/warden/./notes-server")
    );
    c.upstream[0].command[0] = "npx".into();
    assert_eq!(c.program(&c.upstream[0]), PathBuf::from("npx"));
}

#[test]
fn secret_env_names_variables_for_a_child_only() {
    let up = |extra: &str| format!("[[upstream]]\nname = \"a\"\n{extra}\n");
    let c = Config::parse(
        &up("command = [\"x\"]\nsecret_env = { TOKEN = \"WARDEN_TEST_UNSET_VARIABLE\" }"),
        "w.toml",
    )
    .unwrap();
    assert_eq!(
        c.upstream[0].secret_env["TOKEN"],
        "WARDEN_TEST_UNSET_VARIABLE"
    );
    assert!(c.warnings().contains(&"upstream 'a': secret_env.TOKEN: the environment variable 'WARDEN_TEST_UNSET_VARIABLE' is not set, so the child starts without TOKEN".to_owned()));
    for (extra, message) in [
        (
            "url = \"http://127.0.0.1:1/mcp\"\nsecret_env = { T = \"V\" }",
            "w.toml: upstream[0].secret_env: is for child processes (command); an HTTP upstream's token is bearer_token_env",
        ),
        (
            "command = [\"x\"]\nenv = { T = \"1\" }\nsecret_env = { T = \"V\" }",
            "w.toml: upstream[0].secret_env: 'T' is also set in env; keep it in one of the two",
        ),
        (
            "command = [\"x\"]\nsecret_env = { T = \"\" }",
            "w.toml: upstream[0].secret_env: 'T' = '' is not a pair of variable names; write CHILD_VARIABLE = \"GATEWAY_VARIABLE\"",
        ),
    ] {
        let e = Config::parse(&up(extra), "w.toml").unwrap_err();
        assert_eq!(e.to_string(), message);
    }
}

#[test]
fn a_misspelt_word_gets_a_did_you_mean() {
    for (text, message) in [
        (
            "[[rule]]\ncallers = [\"*\"]\ntools = [\"*\"]\neffect = \"alow\"\n",
            "rule[0].effect: 'alow' is not an effect; use one of: allow, deny, ask (did you mean 'allow'?)",
        ),
        (
            "[gateway]\nfront = \"htp\"\n",
            "gateway.front: 'htp' is not a front; use \"stdio\" or \"http\" (did you mean 'http'?)",
        ),
        (
            "[defaults]\nunknown_arguments = \"block\"\n",
            "defaults.unknown_arguments: 'block' is not an unknown-argument mode; use one of: warn, strip, reject",
        ),
    ] {
        let e = Config::parse(text, "w.toml").unwrap_err();
        assert_eq!(format!("{}: {}", e.key, e.message), message);
    }
}
