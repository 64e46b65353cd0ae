use super::*;
use crate::front::auth::Identity;

async fn table(idle: Duration, per_caller: usize) -> SessionTable {
    table_with("", idle, per_caller).await
}

async fn table_with(toml: &str, idle: Duration, per_caller: usize) -> SessionTable {
    let config = crate::config::Config::parse(toml, "w.toml").unwrap();
    let gateway = Gateway::new(config).await.unwrap();
    SessionTable::new(gateway, idle, per_caller)
}

#[tokio::test]
async fn a_caller_holds_at_most_its_share_and_gets_it_back_as_sessions_end() {
    let table = table(Duration::from_secs(60), 2).await;
    let alice = || Caller::new("alice");
    let first = table
        .open(alice(), &Holder::caller("alice"), None, None)
        .unwrap();
    table
        .open(alice(), &Holder::caller("alice"), None, None)
        .unwrap();
    match table
        .open(alice(), &Holder::caller("alice"), None, None)
        .err()
    {
        Some(Full::Caller { open, retry_after }) => {
            assert_eq!(open, 2);
            assert!(retry_after > Duration::from_secs(50), "{retry_after:?}");
        }
        other => panic!("a third session for alice: {other:?}"),
    }
    // Others are not held back by alice, and stateless sessions are not counted.
    table
        .open(Caller::new("bob"), &Holder::caller("bob"), None, None)
        .unwrap();
    let _stateless = table.open_stateless(alice());
    assert_eq!(
        (table.held_by(&Holder::caller("alice")), table.count()),
        (2, 3)
    );
    // DELETE, even twice, frees one place.
    table
        .end(&first, "the client ended the session", true)
        .await;
    table
        .end(&first, "the client ended the session", true)
        .await;
    assert_eq!(table.held_by(&Holder::caller("alice")), 1);
    table
        .open(alice(), &Holder::caller("alice"), None, None)
        .unwrap();
    // The gateway's end frees them all.
    table.end_all("the gateway is shutting down");
    assert_eq!(
        (
            table.count(),
            table.held_by(&Holder::caller("alice")),
            table.held_by(&Holder::caller("bob"))
        ),
        (0, 0, 0)
    );
}

#[tokio::test]
async fn the_idle_sweep_gives_a_caller_its_sessions_back() {
    let table = table(Duration::from_millis(1), 1).await;
    table
        .open(Caller::new("alice"), &Holder::caller("alice"), None, None)
        .unwrap();
    assert!(table
        .open(Caller::new("alice"), &Holder::caller("alice"), None, None)
        .is_err());
    tokio::time::sleep(Duration::from_millis(20)).await;
    table.sweep();
    assert_eq!(table.held_by(&Holder::caller("alice")), 0);
    table
        .open(Caller::new("alice"), &Holder::caller("alice"), None, None)
        .unwrap();
}

#[tokio::test]
async fn without_a_shared_secret_a_session_lives_and_dies_in_its_process() {
    let table = table(Duration::from_millis(1), 4).await;
    let s = table
        .open(Caller::new("alice"), &Holder::caller("alice"), None, None)
        .unwrap();
    assert!(table
        .find(&s.id, "alice", &Holder::caller("alice"), false)
        .await
        .is_ok());
    assert!(
        table
            .find(&s.id, "bob", &Holder::caller("bob"), false)
            .await
            .is_err(),
        "another caller's"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    table.sweep();
    assert!(
        table
            .find(&s.id, "alice", &Holder::caller("alice"), false)
            .await
            .is_err(),
        "idled out for good"
    );
}

#[tokio::test]
async fn replicas_sharing_the_secret_take_up_each_others_sessions() {
    std::env::set_var("WARDEN_TEST_SESSION_SECRET", "a secret the fleet shares");
    let toml = "[gateway]\nstate_secret_env = \"WARDEN_TEST_SESSION_SECRET\"\n";
    let a = table_with(toml, Duration::from_millis(1), 4).await;
    let b = table_with(toml, Duration::from_millis(1), 4).await;
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}});
    let s = a
        .open(
            Caller::new("alice"),
            &Holder::caller("alice"),
            Some(&init),
            Some("tiny".into()),
        )
        .unwrap();
    let Ok(taken) = b
        .find(&s.id, "alice", &Holder::caller("alice"), false)
        .await
    else {
        panic!("not found")
    };
    assert_eq!(
        (taken.sid.as_str(), taken.caller.as_str()),
        (s.sid.as_str(), "alice")
    );
    assert!(taken.client.client_can("sampling") && !taken.client.client_can("elicitation"));
    assert_eq!(taken.client.version(), Some("2025-06-18"));
    assert_eq!(taken.client.label, format!("http:{}", s.sid));
    // It stays on the virtual server it was opened on (V1).
    assert_eq!(taken.client.server(), Some("tiny"));
    assert!(
        b.find(&s.id, "bob", &Holder::caller("bob"), false)
            .await
            .is_err(),
        "bound to its caller"
    );
    // Idle here is not ended: it comes back from its id.
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.sweep();
    assert!(a
        .find(&s.id, "alice", &Holder::caller("alice"), false)
        .await
        .is_ok());
    // A DELETE ends it for good here (without a shared store, only here).
    let Ok(held) = a
        .find(&s.id, "alice", &Holder::caller("alice"), false)
        .await
    else {
        panic!("not found")
    };
    a.end(&held, "the client ended the session", true).await;
    assert!(a
        .find(&s.id, "alice", &Holder::caller("alice"), false)
        .await
        .is_err());
}

#[tokio::test]
async fn a_session_taken_up_from_its_id_counts_against_the_callers_cap() {
    std::env::set_var("WARDEN_TEST_CAP_SECRET", "a secret the fleet shares");
    let toml = "[gateway]\nstate_secret_env = \"WARDEN_TEST_CAP_SECRET\"\n";
    let a = table_with(toml, Duration::from_secs(60), 2).await;
    let b = table_with(toml, Duration::from_secs(60), 2).await;
    let ids: Vec<String> = (0..2)
        .map(|_| {
            a.open(Caller::new("alice"), &Holder::caller("alice"), None, None)
                .unwrap()
                .id
                .clone()
        })
        .chain((0..2).map(|_| {
            b.open(Caller::new("alice"), &Holder::caller("alice"), None, None)
                .unwrap()
                .id
                .clone()
        }))
        .collect();
    // At a, alice holds her two: a third id, opened at b, is not taken up.
    assert!(
        a.find(&ids[0], "alice", &Holder::caller("alice"), false)
            .await
            .is_ok(),
        "held here"
    );
    match a
        .find(&ids[2], "alice", &Holder::caller("alice"), false)
        .await
        .err()
    {
        Some(Missing::Full(Full::Caller { open: 2, .. })) => {}
        other => panic!("a third of alice's sessions taken up: {other:?}"),
    }
    assert_eq!(a.held_by(&Holder::caller("alice")), 2);
    // A DELETE of it is taken up all the same, to end it.
    let Ok(ending) = a
        .find(&ids[2], "alice", &Holder::caller("alice"), true)
        .await
    else {
        panic!("not found")
    };
    a.end(&ending, "the client ended the session", true).await;
    assert_eq!(a.held_by(&Holder::caller("alice")), 2);
    // Once one of hers here ends, the other id is taken up.
    let Ok(first) = a
        .find(&ids[0], "alice", &Holder::caller("alice"), false)
        .await
    else {
        panic!("not found")
    };
    a.end(&first, "the client ended the session", true).await;
    assert!(a
        .find(&ids[3], "alice", &Holder::caller("alice"), false)
        .await
        .is_ok());
    assert_eq!(a.held_by(&Holder::caller("alice")), 2);
}

#[tokio::test]
async fn with_flow_rules_and_no_shared_store_a_session_is_not_taken_up_without_its_trail() {
    std::env::set_var("WARDEN_TEST_TRAIL_SECRET", "a secret the fleet shares");
    let toml = "[gateway]\nstate_secret_env = \"WARDEN_TEST_TRAIL_SECRET\"\n\
        [[upstream]]\nname = \"m\"\ncommand = [\"x\"]\nlabels = { send = [\"external_sink\"], read = [\"private_data\"] }\n\
        [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"deny\"\n";
    let a = table_with(toml, Duration::from_millis(1), 4).await;
    let b = table_with(toml, Duration::from_millis(1), 4).await;
    let s = a
        .open(Caller::new("alice"), &Holder::caller("alice"), None, None)
        .unwrap();
    assert!(
        a.find(&s.id, "alice", &Holder::caller("alice"), false)
            .await
            .is_ok(),
        "held here"
    );
    assert_eq!(
        b.find(&s.id, "alice", &Holder::caller("alice"), false)
            .await
            .err(),
        Some(Missing::NotFound),
        "its trail is at a only"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.sweep();
    assert_eq!(
        a.find(&s.id, "alice", &Holder::caller("alice"), false)
            .await
            .err(),
        Some(Missing::NotFound),
        "idle, its trail is gone: so is the session"
    );
}

#[tokio::test]
async fn anonymous_clients_hold_their_share_each_by_address() {
    let table = table(Duration::from_secs(60), 1).await;
    let anonymous = |ip: &str| {
        let who = Identity {
            caller: Caller::new("dev"),
            scopes: None,
            token: None,
            expires: None,
            anonymous: true,
            claims: None,
        };
        Holder::of(&who, ip.parse().unwrap())
    };
    let (a, b) = (anonymous("192.0.2.1"), anonymous("192.0.2.2"));
    table.open(Caller::new("dev"), &a, None, None).unwrap();
    assert!(
        table.open(Caller::new("dev"), &a, None, None).is_err(),
        "a second one for the same client"
    );
    table.open(Caller::new("dev"), &b, None, None).unwrap();
    // A caller with a credential counts as itself wherever it connects from.
    let keyed = Identity {
        anonymous: false,
        ..Identity {
            caller: Caller::new("dev"),
            scopes: None,
            token: None,
            expires: None,
            anonymous: true,
            claims: None,
        }
    };
    assert_eq!(
        Holder::of(&keyed, "192.0.2.1".parse().unwrap()),
        Holder::caller("dev")
    );
    assert_eq!((table.held_by(&a), table.held_by(&b)), (1, 1));
}
