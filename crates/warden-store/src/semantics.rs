//! The ledger's semantics, run by both stores' tests over two stores on the
//! same data (as two gateway processes): concurrent claims, leases, abandoned
//! keys and takeovers.

use crate::{Claim, Finish, OnAbandoned, Store};
use std::time::Duration;

/// For the stores' tests: 100 concurrent claims of one key, alternating between
/// two stores on the same data (as two gateway processes); how many got to run.
pub(crate) async fn concurrent_runs(a: &Store, b: &Store) -> usize {
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                s.claim("c", "same", "f", Duration::from_secs(86_400))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut runs = 0;
    for t in tasks {
        if t.await.unwrap() == Claim::Run {
            runs += 1;
        }
    }
    runs
}

/// For the stores' tests: leases across two stores on the same data (as two
/// gateway processes): a live lease holds the key, one that ran out is taken over,
/// the first owner can then neither renew nor finish over the new attempt, and
/// renewal keeps a claim alive past its first lease.
pub(crate) async fn lease_semantics(a: &Store, b: &Store) {
    use serde_json::json;
    const DAY: Duration = Duration::from_secs(86_400);
    const SHORT: Duration = Duration::from_millis(200);
    let run_out = || tokio::time::sleep(Duration::from_millis(400));
    assert_ne!(a.owner(), b.owner(), "each store is an owner of its own");
    assert_eq!(a.owner().len(), 32, "128 bits, hex");

    let claim = |s: &Store, key: &'static str, fp: &'static str, lease: Duration| {
        let s = s.clone();
        let rerun = OnAbandoned::Rerun;
        async move {
            s.claim_leased("c", key, fp, DAY, lease, rerun)
                .await
                .unwrap()
        }
    };
    assert_eq!(claim(a, "k", "f", SHORT).await, Claim::Run);
    assert_eq!(
        claim(b, "k", "f", SHORT).await,
        Claim::Running,
        "the lease holds"
    );
    run_out().await;
    assert_eq!(claim(b, "k", "f", DAY).await, Claim::TakenOver);
    assert_eq!(
        claim(a, "k", "f", SHORT).await,
        Claim::Running,
        "the new lease holds"
    );
    // The first owner comes back late: it neither renews nor records its end.
    assert!(!a.renew("c", "k", DAY).await.unwrap());
    assert!(!a
        .finish("c", "k", Finish::Completed(json!("first")))
        .await
        .unwrap());
    assert!(!a
        .finish("c", "k", Finish::Failed("first".into()))
        .await
        .unwrap());
    run_out().await;
    assert_eq!(
        claim(a, "k", "f", SHORT).await,
        Claim::Running,
        "the row is still the new attempt's"
    );
    assert!(b
        .finish("c", "k", Finish::Completed(json!("second")))
        .await
        .unwrap());
    assert_eq!(
        claim(a, "k", "f", SHORT).await,
        Claim::Replay(json!("second"))
    );

    // Renewed every 50 ms, a 400 ms lease outlives itself; unrenewed, it runs out.
    let lease = Duration::from_millis(400);
    assert_eq!(claim(a, "r", "f", lease).await, Claim::Run);
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(a.renew("c", "r", lease).await.unwrap());
    }
    assert_eq!(
        claim(b, "r", "f", SHORT).await,
        Claim::Running,
        "renewed past its first lease"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(claim(b, "r", "f", SHORT).await, Claim::TakenOver);

    // A finished claim has no lease to run out; an expired one is still not
    // another call's to take.
    assert_eq!(claim(a, "d", "f", SHORT).await, Claim::Run);
    assert!(a
        .finish("c", "d", Finish::Completed(json!("d")))
        .await
        .unwrap());
    assert_eq!(claim(a, "m", "f", SHORT).await, Claim::Run);
    run_out().await;
    assert_eq!(claim(b, "d", "f", SHORT).await, Claim::Replay(json!("d")));
    assert_eq!(claim(b, "m", "g", SHORT).await, Claim::Mismatch);
    assert_eq!(claim(b, "m", "f", SHORT).await, Claim::TakenOver);
}

/// For the stores' tests: by default a key whose lease ran out is abandoned for
/// good, across two stores on the same data (as two gateway processes): the
/// claim that finds it so says so first, every later one after it, the first
/// owner can neither renew nor finish it, and only a claim that may rerun it
/// runs it again. It is forgotten with its retention like any key.
pub(crate) async fn abandon_semantics(a: &Store, b: &Store) {
    use serde_json::json;
    const DAY: Duration = Duration::from_secs(86_400);
    const SHORT: Duration = Duration::from_millis(200);
    let run_out = || tokio::time::sleep(Duration::from_millis(400));
    let claim = |s: &Store, fp: &'static str, then: OnAbandoned| {
        let s = s.clone();
        async move {
            s.claim_leased("c", "ab", fp, DAY, SHORT, then)
                .await
                .unwrap()
        }
    };
    use OnAbandoned::{Keep, Rerun};
    assert_eq!(claim(a, "f", Keep).await, Claim::Run);
    assert_eq!(claim(b, "f", Keep).await, Claim::Running, "the lease holds");
    run_out().await;
    assert_eq!(claim(b, "f", Keep).await, Claim::Abandoned { first: true });
    assert_eq!(claim(a, "f", Keep).await, Claim::Abandoned { first: false });
    assert_eq!(claim(b, "g", Keep).await, Claim::Mismatch);
    // The first owner comes back late: its end is not recorded over the mark.
    assert!(!a.renew("c", "ab", DAY).await.unwrap());
    let done = Finish::Completed(json!("late"));
    assert!(!a.finish("c", "ab", done).await.unwrap());
    assert!(!a
        .finish("c", "ab", Finish::Failed("late".into()))
        .await
        .unwrap());
    run_out().await;
    assert_eq!(claim(b, "f", Keep).await, Claim::Abandoned { first: false });
    // A claim that may rerun it runs it once more; then it is a key as any other.
    assert_eq!(claim(a, "f", Rerun).await, Claim::Run);
    assert_eq!(claim(b, "f", Rerun).await, Claim::Running);
    assert!(a
        .finish("c", "ab", Finish::Completed(json!(2)))
        .await
        .unwrap());
    assert_eq!(claim(b, "f", Keep).await, Claim::Replay(json!(2)));
    // Forgotten with its retention.
    let (key, fp) = ("ab-gone", "f");
    let first = a.claim_leased("c", key, fp, SHORT, Duration::from_millis(50), Keep);
    assert_eq!(first.await.unwrap(), Claim::Run);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let next = b.claim_leased("c", key, fp, DAY, SHORT, Keep);
    assert_eq!(next.await.unwrap(), Claim::Abandoned { first: true });
    run_out().await;
    let later = b.claim_leased("c", key, fp, SHORT, SHORT, Keep);
    assert_eq!(later.await.unwrap(), Claim::Run, "past its retention");
}

/// For the stores' tests: 100 concurrent claims of one key whose lease ran out,
/// alternating between two stores on the same data; how many took it over
/// (`Rerun`) or found it abandoned first (`Keep`).
pub(crate) async fn concurrent_takeovers(a: &Store, b: &Store, then: OnAbandoned) -> usize {
    const DAY: Duration = Duration::from_secs(86_400);
    let key = format!("expired-{then:?}");
    let lease = Duration::from_millis(100);
    let first = a.claim_leased("c", &key, "f", DAY, lease, then).await;
    assert_eq!(first.unwrap(), Claim::Run);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let key = key.clone();
            tokio::spawn(async move { s.claim_leased("c", &key, "f", DAY, DAY, then).await })
        })
        .collect();
    let mut firsts = 0;
    for t in tasks {
        match (t.await.unwrap().unwrap(), then) {
            (Claim::TakenOver, OnAbandoned::Rerun) => firsts += 1,
            (Claim::Running, OnAbandoned::Rerun) => {}
            (Claim::Abandoned { first: true }, OnAbandoned::Keep) => firsts += 1,
            (Claim::Abandoned { first: false }, OnAbandoned::Keep) => {}
            other => panic!("a claim of an expired running key got {other:?}"),
        }
    }
    firsts
}
