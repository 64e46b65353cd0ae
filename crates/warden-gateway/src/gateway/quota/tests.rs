use super::*;
use crate::config::Config;
use serde_json::json;

const LEASE: Duration = Duration::from_secs(60);

fn quotas(toml: &str) -> Quotas {
    let c = Config::parse(toml, "w.toml").unwrap();
    Quotas::new(c.limits.quotas, None)
}

fn text(a: &Admission) -> Option<(&str, u64)> {
    match a {
        Admission::Refused { text, retry_ms } => Some((text.as_str(), *retry_ms)),
        Admission::Admitted { .. } => None,
        Admission::Failed(note) => panic!("failed: {note}"),
    }
}

impl Quotas {
    /// [`Quotas::admit`] for a call with no arguments and an empty scope.
    async fn admit_plain(
        &self,
        caller: Option<&Caller>,
        tool: &str,
        lease: Duration,
        credited: bool,
    ) -> Admission {
        let (args, scope) = (serde_json::Map::new(), warden_core::CallScope::default());
        let call = caller.map(|caller| CelInput {
            caller,
            tool,
            upstream: "",
            args: &args,
            scope: &scope,
        });
        self.admit(call.as_ref(), lease, credited).await
    }

    fn refund_plain(&self, caller: Option<&Caller>, tool: &str) {
        let (args, scope) = (serde_json::Map::new(), warden_core::CallScope::default());
        let call = caller.map(|caller| CelInput {
            caller,
            tool,
            upstream: "",
            args: &args,
            scope: &scope,
        });
        self.refund(call.as_ref())
    }
}

#[tokio::test]
async fn usage_shows_each_callers_bucket_and_calls_in_flight() {
    let q = quotas(
        "[[quota]]\ncallers = [\"*\"]\ntools = [\"s.*\"]\nrate = \"30/minute\"\nburst = 3\n\
         [[quota]]\ncallers = [\"*\"]\ntools = [\"s.*\"]\nconcurrency = 2\n",
    );
    assert_eq!(q.usage(), [], "nothing counted yet");
    let alice = Caller::new("alice");
    let lease = Duration::from_secs(60);
    let held = q.admit_plain(Some(&alice), "s.query", lease, false).await;
    let _second = q.admit_plain(Some(&alice), "s.query", lease, false).await;
    let bob = Caller::new("bob");
    let Admission::Admitted { .. } = q.admit_plain(Some(&bob), "s.query", lease, false).await
    else {
        panic!("bob is within his quota");
    };
    let usage = q.usage();
    let of = |quota: usize, caller: &str| {
        usage
            .iter()
            .find(|u| u.quota == quota && u.caller == caller)
            .cloned()
    };
    // Rates: 3 at once, one every 2 s; these calls took 2 of alice's, 1 of bob's.
    let a = of(0, "alice").unwrap();
    assert_eq!(
        (a.available, a.burst, a.in_flight),
        (Some(1), Some(3), None)
    );
    let b = of(0, "bob").unwrap();
    assert_eq!((b.available, b.burst), (Some(2), Some(3)));
    // Concurrency: alice still holds two slots; bob's ended with his record.
    assert_eq!(of(1, "alice").unwrap().in_flight, Some(2));
    assert_eq!(of(1, "bob"), None);
    drop(held);
    assert_eq!(
        q.usage().iter().find(|u| u.quota == 1).unwrap().in_flight,
        Some(1)
    );
}

#[test]
fn a_bucket_refills_one_call_per_interval() {
    let rate = Rate::parse("30/minute", Some(3)).unwrap();
    // Interval 2 s, tolerance 4 s.
    assert_eq!(available_now(&rate, 0.0, 10_000.0), 3, "full again");
    assert_eq!(available_now(&rate, 16_000.0, 10_000.0), 0);
    assert_eq!(available_now(&rate, 14_000.0, 10_000.0), 1);
    assert_eq!(available_now(&rate, 13_000.0, 10_000.0), 1);
    assert_eq!(available_now(&rate, 12_000.0, 10_000.0), 2);
}

#[tokio::test]
async fn a_burst_then_the_steady_rate() {
    let q = quotas(
        "[[quota]]\ncallers = [\"*\"]\ntools = [\"s.*\"]\nrate = \"30/minute\"\nburst = 3\n",
    );
    let alice = Caller::new("alice");
    for _ in 0..3 {
        assert!(text(&q.admit_plain(Some(&alice), "s.query", LEASE, false).await).is_none());
    }
    let a = q.admit_plain(Some(&alice), "s.query", LEASE, false).await;
    let (t, ms) = text(&a).unwrap();
    assert_eq!(t, "Error: Rate limit for tool 's.query' reached (30 calls per minute for caller 'alice'). Retry in 2 s.");
    assert!(ms > 1900 && ms <= 2000, "{ms}");
    // Another caller has a bucket of its own; another tool matches no quota.
    assert!(text(
        &q.admit_plain(Some(&Caller::new("bob")), "s.query", LEASE, false)
            .await
    )
    .is_none());
    assert!(!q.any_for(Some(&alice), "t.other"));
}

#[tokio::test]
async fn a_refunded_call_leaves_its_place_for_the_retry() {
    let q = quotas("[[quota]]\ncallers = [\"*\"]\ntools = [\"fx.*\"]\nrate = \"1/minute\"\n");
    let alice = Caller::new("alice");
    let admit = || q.admit_plain(Some(&alice), "fx.echo", Duration::from_secs(30), false);
    assert!(text(&admit().await).is_none());
    assert!(
        text(&admit().await).is_some(),
        "the minute's one call is taken"
    );
    q.refund_plain(Some(&alice), "fx.echo");
    assert!(text(&admit().await).is_none(), "given back: the retry runs");
    assert!(text(&admit().await).is_some());
    // Another tool's refund gives nothing back to this quota.
    q.refund_plain(Some(&alice), "other.tool");
    assert!(text(&admit().await).is_some());
}

#[tokio::test]
async fn the_tightest_of_several_quotas_refuses() {
    let q = quotas(
        "[[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\nrate = \"100/hour\"\nburst = 1\n\
         [[quota]]\ncallers = [\"alice\"]\ntools = [\"s.*\"]\nrate = \"10/second\"\nburst = 1\n",
    );
    let alice = Caller::new("alice");
    assert!(text(&q.admit_plain(Some(&alice), "s.query", LEASE, false).await).is_none());
    let a = q.admit_plain(Some(&alice), "s.query", LEASE, false).await;
    assert_eq!(text(&a).unwrap().0, "Error: Rate limit for tool 's.query' reached (100 calls per hour for caller 'alice'). Retry in 36 s.");
}

#[tokio::test]
async fn concurrency_slots_free_when_the_call_ends() {
    let q = quotas("[[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\nconcurrency = 1\n");
    let alice = Caller::new("alice");
    let first = q.admit_plain(Some(&alice), "s.query", LEASE, false).await;
    let second = q.admit_plain(Some(&alice), "s.query", LEASE, false).await;
    assert_eq!(
        text(&second).unwrap(),
        ("Error: Concurrency limit for tool 's.query' reached (1 call at a time for caller 'alice'). Retry in 1 s.", 1000)
    );
    drop(first);
    assert!(text(&q.admit_plain(Some(&alice), "s.query", LEASE, false).await).is_none());
}

#[tokio::test]
async fn a_released_slot_is_free_before_the_record_goes() {
    let q = quotas("[[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\nconcurrency = 1\n");
    let alice = Caller::new("alice");
    let Admission::Admitted { slots, counted, .. } =
        q.admit_plain(Some(&alice), "s.q", LEASE, false).await
    else {
        panic!("refused")
    };
    assert!(!counted, "no rate counted the call");
    slots.release().await;
    let second = q.admit_plain(Some(&alice), "s.q", LEASE, false).await;
    assert!(text(&second).is_none());
    // Released once: dropping the first frees nothing more; the second holds.
    drop(slots);
    assert!(text(&q.admit_plain(Some(&alice), "s.q", LEASE, false).await).is_some());
}

#[tokio::test]
async fn a_credit_spares_one_retry_its_count_once() {
    let q = quotas("[[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\nrate = \"1/hour\"\nburst = 1\n");
    let alice = Caller::new("alice");
    let Admission::Admitted { counted, .. } =
        q.admit_plain(Some(&alice), "s.q", LEASE, false).await
    else {
        panic!("refused")
    };
    assert!(counted);
    q.issue_credit("c1", LEASE).await;
    assert!(q.redeem_credit("c1").await);
    let a = q.admit_plain(Some(&alice), "s.q", LEASE, true).await;
    assert!(matches!(a, Admission::Admitted { counted: true, .. }));
    // A replayed credit redeems nothing, and the call is counted: over the rate.
    assert!(!q.redeem_credit("c1").await);
    assert!(!q.redeem_credit("never-issued").await);
    assert!(text(&q.admit_plain(Some(&alice), "s.q", LEASE, false).await).is_some());
}

#[test]
fn the_request_budget_refills() {
    let b = RequestBudget::new(Rate::parse("1/second", Some(2)).unwrap());
    assert!(b.take("a").is_ok() && b.take("a").is_ok());
    let wait = b.take("a").unwrap_err();
    assert!(wait > 900.0 && wait <= 1000.0, "{wait}");
    assert!(b.take("b").is_ok());
}

/// [`Quotas::admit`] for `alice`'s call of `s.q` with `args`.
async fn admit_args(q: &Quotas, args: serde_json::Value) -> Admission {
    let (alice, scope) = (Caller::new("alice"), warden_core::CallScope::default());
    let args = args.as_object().cloned().unwrap_or_default();
    let call = CelInput {
        caller: &alice,
        tool: "s.q",
        upstream: "s",
        args: &args,
        scope: &scope,
    };
    q.admit(Some(&call), LEASE, false).await
}

fn notes(a: &Admission) -> Vec<String> {
    match a {
        Admission::Admitted { shadow, .. } => shadow.iter().map(|s| s.to_string()).collect(),
        _ => panic!("not admitted"),
    }
}

#[tokio::test]
async fn when_cel_decides_which_calls_a_quota_counts_and_a_failure_refuses() {
    let q = quotas(
        "[[quota]]\ncallers = [\"*\"]\ntools = [\"s.*\"]\nrate = \"1/hour\"\nwhen_cel = \"args.n > 1\"\n",
    );
    for _ in 0..3 {
        assert!(text(&admit_args(&q, json!({"n": 1})).await).is_none());
    }
    assert!(text(&admit_args(&q, json!({"n": 2})).await).is_none());
    assert!(text(&admit_args(&q, json!({"n": 3})).await).is_some());
    // Refunded only where it counted: a call it does not count gives nothing back.
    let (alice, scope) = (Caller::new("alice"), warden_core::CallScope::default());
    let one = json!({"n": 1}).as_object().cloned().unwrap();
    let call = |args| CelInput {
        caller: &alice,
        tool: "s.q",
        upstream: "s",
        args,
        scope: &scope,
    };
    q.refund(Some(&call(&one)));
    assert!(text(&admit_args(&q, json!({"n": 3})).await).is_some());
    let three = json!({"n": 3}).as_object().cloned().unwrap();
    q.refund(Some(&call(&three)));
    assert!(text(&admit_args(&q, json!({"n": 3})).await).is_none());
    match admit_args(&q, json!({})).await {
        Admission::Failed(note) => assert_eq!(
            note,
            "quota[0].when_cel: it stopped: a key it reads is absent (guard it with has())"
        ),
        _ => panic!("a failed expression must refuse the call"),
    }
}

#[tokio::test]
async fn a_shadow_quota_counts_apart_and_notes_would_deny_without_refusing() {
    let q = quotas(
        "[[quota]]\ncallers = [\"*\"]\ntools = [\"s.*\"]\nrate = \"1/hour\"\nmode = \"shadow\"\n\
         [[quota]]\ncallers = [\"*\"]\ntools = [\"s.*\"]\nconcurrency = 1\nmode = \"shadow\"\nwhen_cel = \"args.n > 0\"\n",
    );
    let first = admit_args(&q, json!({"n": 1})).await;
    assert_eq!(notes(&first), Vec::<String>::new());
    // The first call still holds the shadow concurrency slot.
    let second = admit_args(&q, json!({"n": 1})).await;
    assert_eq!(
        notes(&second),
        ["would_deny by quota[0]", "would_deny by quota[1]"]
    );
    drop(first);
    assert_eq!(
        notes(&admit_args(&q, json!({"n": 1})).await),
        ["would_deny by quota[0]"]
    );
    // A shadow quota's failing expression would refuse, and never does.
    assert_eq!(
        notes(&admit_args(&q, json!({})).await),
        ["would_deny by quota[1]", "would_deny by quota[0]"]
    );
}
