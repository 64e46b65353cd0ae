//! One child process per caller, for a child-process upstream whose credential
//! depends on the caller (`[[upstream.credential]]` with `credential_env`).
//!
//! A child has one environment, so a secret meant for one caller cannot share a
//! process with another's. The upstream's own child (started with the gateway,
//! without any caller's secret) still answers the gateway's handshake, listings
//! and pings, and the calls of callers no credential entry is for; the catalogue
//! is its listing. A caller with a credential gets a child of its own, started
//! on its first request with the credential in `credential_env`, initialised and
//! listed exactly as the upstream's own child is, and used for every request of
//! that caller. At most `max_caller_processes` run at once: at the bound, the
//! idle child used longest ago is stopped to make room, and when every one is
//! busy the request is refused ([`CallError::Crowded`]) rather than queued, so
//! no caller waits on another's work without knowing. A child idle for
//! `caller_process_idle_ms` is stopped; one that exits is forgotten, and the
//! caller's next request starts a new one.

use super::{CallError, Conn, Exit, Inbound, Upstream};
use crate::config::UpstreamConfig;
use crate::logged::logged;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Per-caller children at once, when `max_caller_processes` is not set.
pub const DEFAULT_MAX: usize = 16;
/// How long a per-caller child may sit idle, when `caller_process_idle_ms` is not set.
pub const DEFAULT_IDLE_MS: u64 = 300_000;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One caller's child: the credential it was started with, and its use.
struct Slot {
    caller: String,
    token: Arc<str>,
    up: Arc<Upstream>,
    /// Its start (handshake and listing) finished.
    started: tokio::sync::OnceCell<()>,
    /// Requests on it now.
    busy: AtomicUsize,
    /// When its last request ended (or it was started).
    last: Mutex<Instant>,
    /// Where its connection reports: the router, and this pool for its exit.
    inbound: Arc<dyn Inbound>,
}

impl Slot {
    /// It was started and its process is gone (its exit may not be heard yet).
    fn dead(&self) -> bool {
        self.started.initialized() && self.up.conn().is_none()
    }

    fn idle_for(&self) -> Option<Duration> {
        (self.busy.load(Ordering::SeqCst) == 0).then(|| lock(&self.last).elapsed())
    }
}

/// A request's hold on a caller's child: while one is held, the child is not
/// stopped as idle or to make room.
pub struct Lease(Arc<Slot>);

impl Drop for Lease {
    fn drop(&mut self) {
        *lock(&self.0.last) = Instant::now();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.0.caller).finish()
    }
}

/// The per-caller children of one upstream.
pub struct CallerChildren {
    index: usize,
    name: String,
    /// The upstream's config without its credential entries, for each child.
    template: UpstreamConfig,
    program: PathBuf,
    max_message: usize,
    /// The variable a child gets its caller's credential in.
    env: String,
    max: usize,
    idle: Duration,
    /// The router and the initialize params, learnt when the upstream's own child starts.
    start: Mutex<Option<(Weak<dyn Inbound>, Value)>>,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    reaping: AtomicBool,
    stopping: AtomicBool,
    me: Weak<CallerChildren>,
}

impl CallerChildren {
    /// The pool for a child-process upstream with credential entries; `None` for
    /// any other upstream.
    pub fn for_upstream(
        index: usize,
        config: &UpstreamConfig,
        program: &std::path::Path,
        max_message: usize,
    ) -> Option<Arc<CallerChildren>> {
        if config.url.is_some() || config.credential.is_empty() {
            return None;
        }
        let env = config.credential_env.clone()?;
        let mut template = config.clone();
        template.credential.clear();
        Some(Arc::new_cyclic(|me| CallerChildren {
            index,
            name: config.name.clone(),
            template,
            program: program.to_path_buf(),
            max_message,
            env,
            max: config.max_caller_processes.unwrap_or(DEFAULT_MAX).max(1),
            idle: Duration::from_millis(
                config
                    .caller_process_idle_ms
                    .unwrap_or(DEFAULT_IDLE_MS)
                    .max(1),
            ),
            start: Mutex::new(None),
            slots: Mutex::new(HashMap::new()),
            reaping: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            me: me.clone(),
        }))
    }

    /// Learns where children report and how they are initialised (from the
    /// upstream's own start), and starts stopping idle children.
    pub fn remember(&self, inbound: Weak<dyn Inbound>, init: &Value) {
        *lock(&self.start) = Some((inbound, init.clone()));
        if !self.reaping.swap(true, Ordering::SeqCst) {
            let me = self.me.clone();
            let tick = (self.idle / 4).clamp(Duration::from_millis(20), Duration::from_secs(10));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(tick).await;
                    let Some(pool) = me.upgrade() else { return };
                    if pool.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    pool.stop_idle();
                }
            });
        }
    }

    /// The connection of `caller`'s child, started with `token` in the
    /// credential variable if it does not run yet, and a lease on it.
    pub async fn conn_for(
        &self,
        caller: &str,
        token: Arc<str>,
    ) -> Result<(Arc<Conn>, Lease), CallError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(CallError::Gone);
        }
        let Some((router, init)) = lock(&self.start).clone() else {
            return Err(CallError::Gone);
        };
        let slot = {
            let mut slots = lock(&self.slots);
            let current = slots
                .get(caller)
                .filter(|s| s.token == token && !s.dead())
                .cloned();
            let slot = match current {
                Some(s) => s,
                None => {
                    // A child started with another credential, or one that ended.
                    if let Some(old) = slots.remove(caller) {
                        self.retire(old, "its caller's credential changed or it ended");
                    }
                    if slots.len() >= self.max {
                        let oldest = slots
                            .values()
                            .filter_map(|s| Some((s.idle_for()?, s.caller.clone())))
                            .max_by_key(|(idle, _)| *idle)
                            .map(|(_, c)| c);
                        let Some(victim) = oldest.and_then(|c| slots.remove(&c)) else {
                            return Err(CallError::Crowded(self.max));
                        };
                        self.retire(
                            victim,
                            "it was the idle one used longest ago, and another caller needed room",
                        );
                    }
                    let slot = self.new_slot(caller, token, router);
                    slots.insert(caller.to_owned(), slot.clone());
                    slot
                }
            };
            // Taken under the lock, so the reaper cannot stop it in between.
            slot.busy.fetch_add(1, Ordering::SeqCst);
            slot
        };
        let lease = Lease(slot.clone());
        let started = slot
            .started
            .get_or_try_init(|| async {
                tracing::info!(upstream = %self.name, caller = %logged(caller), "starting the caller's own process");
                slot.up
                    .connect(Arc::downgrade(&slot.inbound), &init)
                    .await
                    .map(|_| ())
            })
            .await;
        if let Err(why) = started {
            tracing::warn!(upstream = %self.name, caller = %logged(caller), "the caller's own process did not start: {}", logged(&why));
            self.forget(&slot);
            return Err(CallError::Gone);
        }
        let conn = slot.up.conn().ok_or(CallError::Gone)?;
        Ok((conn, lease))
    }

    fn new_slot(&self, caller: &str, token: Arc<str>, router: Weak<dyn Inbound>) -> Arc<Slot> {
        let mut config = self.template.clone();
        config.env.insert(self.env.clone(), token.to_string());
        let up = Arc::new(Upstream::new(
            self.index,
            config,
            self.program.clone(),
            self.max_message,
        ));
        Arc::new_cyclic(|me: &Weak<Slot>| Slot {
            caller: caller.to_owned(),
            token,
            up,
            started: tokio::sync::OnceCell::new(),
            busy: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            inbound: Arc::new(ChildInbound {
                router,
                pool: self.me.clone(),
                slot: me.clone(),
            }),
        })
    }

    /// Stops children idle for longer than allowed.
    fn stop_idle(&self) {
        let mut slots = lock(&self.slots);
        let idle: Vec<String> = slots
            .values()
            .filter(|s| s.idle_for().is_some_and(|d| d >= self.idle))
            .map(|s| s.caller.clone())
            .collect();
        for caller in idle {
            if let Some(s) = slots.remove(&caller) {
                self.retire(s, "it was idle");
            }
        }
    }

    /// Ends a child that is no longer in the pool, once the requests still on
    /// it (a caller whose credential changed mid-call) are over.
    fn retire(&self, slot: Arc<Slot>, why: &'static str) {
        tracing::info!(upstream = %self.name, caller = %logged(&slot.caller), "stopping the caller's own process: {why}");
        tokio::spawn(async move {
            while slot.busy.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            slot.up.stop().await
        });
    }

    /// A child's process ended or did not start: its caller gets a new one next time.
    fn forget(&self, slot: &Arc<Slot>) {
        let mut slots = lock(&self.slots);
        if slots
            .get(&slot.caller)
            .is_some_and(|s| Arc::ptr_eq(s, slot))
        {
            slots.remove(&slot.caller);
        }
    }

    /// Children running now (started or starting, and not known to have exited).
    pub fn running(&self) -> usize {
        lock(&self.slots).values().filter(|s| !s.dead()).count()
    }

    /// The most that may run at once (`max_caller_processes`).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Requests on the children now.
    pub fn busy(&self) -> usize {
        lock(&self.slots)
            .values()
            .map(|s| s.busy.load(Ordering::SeqCst))
            .sum()
    }

    /// Stops every child (the gateway shuts down, or a reload removed the upstream).
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let all: Vec<_> = lock(&self.slots)
            .drain()
            .map(|(_, s)| tokio::spawn(async move { s.up.stop().await }))
            .collect();
        for stopped in all {
            let _ = stopped.await;
        }
    }
}

/// Where a caller's child reports: its messages go to the router like the
/// upstream's own child's (they belong to that caller's requests); its exit
/// only takes it out of the pool (the upstream itself did not stop).
struct ChildInbound {
    router: Weak<dyn Inbound>,
    pool: Weak<CallerChildren>,
    slot: Weak<Slot>,
}

impl Inbound for ChildInbound {
    fn on_message(
        &self,
        upstream: usize,
        conn: &Arc<Conn>,
        msg: Value,
        related: Option<u64>,
    ) -> super::BoxedSend {
        match self.router.upgrade() {
            Some(r) => r.on_message(upstream, conn, msg, related),
            None => Box::pin(async {}),
        }
    }

    fn on_exit(&self, _upstream: usize, _generation: u64, exit: Exit) {
        let (Some(pool), Some(slot)) = (self.pool.upgrade(), self.slot.upgrade()) else {
            return;
        };
        tracing::info!(upstream = %pool.name, caller = %logged(&slot.caller), reason = exit.as_str(), "the caller's own process ended");
        pool.forget(&slot);
    }
}
