//! H1-H4: hooks around an accepted call.
//!
//! Before hooks run once a call is accepted and before the tool runs; each can
//! pass, deny with a reason, or answer with a result it already holds. Refusing
//! wins: one denial beats any number of answers. A hook that fails fails the call
//! (the tool is not run). After hooks run exactly once for every call past the
//! before hooks (and for calls refused because the grant source failed); they
//! cannot change the answer, and their failures are reported, never raised.
//!
//! Hooks are async so a host can make them do I/O (the gateway's webhooks), but
//! this module needs no runtime: it only awaits what it is given.

use crate::call::Caller;
use crate::meta::Meta;
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future, so hooks can be trait objects.
pub type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a hook sees of a call.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub caller: Option<Caller>,
    /// The tool as the caller named it.
    pub tool: String,
    pub upstream: String,
    /// The arguments as they go upstream (after every argument stage).
    pub arguments: Map<String, Value>,
    /// The bounded `_meta` (N3): check the type of every entry you read.
    pub meta: Meta,
    pub reason: Option<String>,
}

/// A denial reason: never empty, because it is all the model is told (H2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyReason(String);

/// An empty denial reason: a programming error, refused where the hook is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a denial reason must not be empty: it is the only thing the model is told")]
pub struct EmptyReason;

impl DenyReason {
    pub fn new(reason: impl Into<String>) -> Result<Self, EmptyReason> {
        let reason = reason.into();
        if reason.trim().is_empty() {
            Err(EmptyReason)
        } else {
            Ok(DenyReason(reason))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A before hook's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeDecision {
    Pass,
    Deny(DenyReason),
    /// A `CallToolResult` the hook already holds; the tool is not run.
    Answer(Value),
}

/// A hook that could not decide (an error, a timeout, an unreachable webhook).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

pub trait BeforeHook: Send + Sync {
    fn before<'a>(
        &'a self,
        ctx: &'a CallContext,
    ) -> HookFuture<'a, Result<BeforeDecision, HookError>>;
}

/// How a call ended, for the after hooks.
#[derive(Debug, Clone)]
pub struct CallEnd {
    /// The result the caller receives; `None` when the call failed.
    pub result: Option<Value>,
    /// What went wrong, when it failed (for logs and audit, never for the caller).
    pub failure: Option<String>,
    pub duration_ms: f64,
}

pub trait AfterHook: Send + Sync {
    fn after<'a>(
        &'a self,
        ctx: &'a CallContext,
        end: &'a CallEnd,
    ) -> HookFuture<'a, Result<(), HookError>>;
}

/// The combined verdict of the before hooks.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeOutcome {
    Pass,
    Deny(DenyReason),
    Answer(Value),
    /// A hook failed: the call fails with the internal-error answer (H3).
    Failed(HookError),
}

/// Runs the before hooks in order. A failure stops at once; otherwise the first
/// denial wins over any answer, and the first answer over passing.
pub async fn run_before(hooks: &[Arc<dyn BeforeHook>], ctx: &CallContext) -> BeforeOutcome {
    run_before_observed(hooks, ctx, |_| (), |(), _| ()).await
}

/// [`run_before`], telling `start` when each hook begins (its index in `hooks`)
/// and `end` how it ended, with what `start` returned: how a host times each hook
/// (the gateway's trace spans) without running them itself.
pub async fn run_before_observed<T>(
    hooks: &[Arc<dyn BeforeHook>],
    ctx: &CallContext,
    mut start: impl FnMut(usize) -> T,
    mut end: impl FnMut(T, &Result<BeforeDecision, HookError>),
) -> BeforeOutcome {
    let mut denied = None;
    let mut answered = None;
    for (i, hook) in hooks.iter().enumerate() {
        let watch = start(i);
        let decision = hook.before(ctx).await;
        end(watch, &decision);
        match decision {
            Err(e) => return BeforeOutcome::Failed(e),
            Ok(BeforeDecision::Pass) => {}
            Ok(BeforeDecision::Deny(r)) => {
                denied.get_or_insert(r);
            }
            Ok(BeforeDecision::Answer(v)) => {
                answered.get_or_insert(v);
            }
        }
    }
    match (denied, answered) {
        (Some(r), _) => BeforeOutcome::Deny(r),
        (None, Some(v)) => BeforeOutcome::Answer(v),
        (None, None) => BeforeOutcome::Pass,
    }
}

/// Runs every after hook once; returns their failures for the host to log.
pub async fn run_after(
    hooks: &[Arc<dyn AfterHook>],
    ctx: &CallContext,
    end: &CallEnd,
) -> Vec<HookError> {
    run_after_observed(hooks, ctx, end, |_| (), |(), _| ()).await
}

/// [`run_after`], telling `start` when each hook begins (its index in `hooks`)
/// and `done` how it ended, with what `start` returned (as
/// [`run_before_observed`] does for the before hooks).
pub async fn run_after_observed<T>(
    hooks: &[Arc<dyn AfterHook>],
    ctx: &CallContext,
    end: &CallEnd,
    mut start: impl FnMut(usize) -> T,
    mut done: impl FnMut(T, &Result<(), HookError>),
) -> Vec<HookError> {
    let mut failures = Vec::new();
    for (i, hook) in hooks.iter().enumerate() {
        let watch = start(i);
        let ran = hook.after(ctx, end).await;
        done(watch, &ran);
        if let Err(e) = ran {
            failures.push(e);
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Waker};

    /// Drives a future that never waits on I/O (these hooks are all ready at once).
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    struct Fixed(Result<BeforeDecision, HookError>, AtomicUsize);
    impl BeforeHook for Fixed {
        fn before<'a>(
            &'a self,
            _: &'a CallContext,
        ) -> HookFuture<'a, Result<BeforeDecision, HookError>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            let d = self.0.clone();
            Box::pin(async move { d })
        }
    }

    fn hook(d: Result<BeforeDecision, HookError>) -> Arc<Fixed> {
        Arc::new(Fixed(d, AtomicUsize::new(0)))
    }

    fn ctx() -> CallContext {
        CallContext {
            caller: Some(Caller::new("a")),
            tool: "t".into(),
            upstream: "u".into(),
            arguments: Map::new(),
            meta: Meta::default(),
            reason: None,
        }
    }

    fn run(hooks: Vec<Arc<Fixed>>) -> BeforeOutcome {
        let hooks: Vec<Arc<dyn BeforeHook>> = hooks
            .into_iter()
            .map(|h| h as Arc<dyn BeforeHook>)
            .collect();
        block_on(run_before(&hooks, &ctx()))
    }

    #[test]
    fn an_observer_sees_each_hook_that_ran_and_how_it_ended() {
        let hooks: Vec<Arc<dyn BeforeHook>> = vec![
            hook(Ok(BeforeDecision::Pass)),
            hook(Err(HookError("down".into()))),
            hook(Ok(BeforeDecision::Pass)),
        ];
        let mut seen = Vec::new();
        let outcome = block_on(run_before_observed(
            &hooks,
            &ctx(),
            |i| i * 10,
            |started, ended| seen.push((started, ended.is_ok())),
        ));
        assert_eq!(outcome, BeforeOutcome::Failed(HookError("down".into())));
        assert_eq!(seen, [(0, true), (10, false)], "the third never ran");
    }

    #[test]
    fn deny_wins_over_answer_in_either_order() {
        let deny = || {
            hook(Ok(BeforeDecision::Deny(
                DenyReason::new("not today").unwrap(),
            )))
        };
        let answer = || hook(Ok(BeforeDecision::Answer(json!({"content": []}))));
        for hooks in [vec![answer(), deny()], vec![deny(), answer()]] {
            assert_eq!(
                run(hooks),
                BeforeOutcome::Deny(DenyReason::new("not today").unwrap())
            );
        }
        assert_eq!(
            run(vec![hook(Ok(BeforeDecision::Pass)), answer()]),
            BeforeOutcome::Answer(json!({"content": []}))
        );
        assert_eq!(run(vec![]), BeforeOutcome::Pass);
    }

    #[test]
    fn a_failing_hook_fails_the_call_and_stops() {
        let later = hook(Ok(BeforeDecision::Pass));
        let out = run(vec![
            hook(Err(HookError("webhook timed out".into()))),
            later.clone(),
        ]);
        assert_eq!(
            out,
            BeforeOutcome::Failed(HookError("webhook timed out".into()))
        );
        assert_eq!(later.1.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn empty_reasons_are_refused() {
        assert_eq!(DenyReason::new(""), Err(EmptyReason));
        assert_eq!(DenyReason::new("  \n"), Err(EmptyReason));
        assert_eq!(DenyReason::new("why").unwrap().as_str(), "why");
    }

    #[test]
    fn after_hooks_all_run_and_failures_are_returned() {
        struct Count(AtomicUsize, bool);
        impl AfterHook for Count {
            fn after<'a>(
                &'a self,
                _: &'a CallContext,
                _: &'a CallEnd,
            ) -> HookFuture<'a, Result<(), HookError>> {
                self.0.fetch_add(1, Ordering::SeqCst);
                let fail = self.1;
                Box::pin(async move {
                    if fail {
                        Err(HookError("disk full".into()))
                    } else {
                        Ok(())
                    }
                })
            }
        }
        let a = Arc::new(Count(AtomicUsize::new(0), true));
        let b = Arc::new(Count(AtomicUsize::new(0), false));
        let hooks: Vec<Arc<dyn AfterHook>> = vec![a.clone(), b.clone()];
        let end = CallEnd {
            result: None,
            failure: Some("crash".into()),
            duration_ms: 1.0,
        };
        let failures = block_on(run_after(&hooks, &ctx(), &end));
        assert_eq!(failures, vec![HookError("disk full".into())]);
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (1, 1)
        );
        // Observed: each hook's start and end, in order, with its own token.
        let seen = std::sync::Mutex::new(Vec::new());
        let failures = block_on(run_after_observed(
            &hooks,
            &ctx(),
            &end,
            |i| {
                seen.lock().unwrap().push(format!("start {i}"));
                i
            },
            |i, ran| {
                let how = if ran.is_ok() { "ok" } else { "failed" };
                seen.lock().unwrap().push(format!("end {i} {how}"));
            },
        ));
        assert_eq!(failures.len(), 1);
        assert_eq!(
            seen.into_inner().unwrap(),
            ["start 0", "end 0 failed", "start 1", "end 1 ok"]
        );
    }
}
