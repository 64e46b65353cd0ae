//! The gateway's upstreams as one catalogue: starting them, their last good tool
//! listings, the catalogue built from those, restarts, and which upstream serves
//! a method the gateway does not govern.
//!
//! A listing replaces the cached one only when it succeeds; a `tools/list` while
//! an upstream has none to offer fails loudly instead of returning a shorter list.

mod catalogue;
mod serving;

pub use catalogue::Drifted;

use super::client_session::lock;
use super::settle::Settle;
use crate::config::{Config, ErrorData, UpstreamConfig};
use crate::logged::logged;
use crate::pins::{self, Lock};
use crate::upstream::{Declarations, Inbound, Upstream, SUPPORTED_VERSIONS};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;
use warden_core::{Catalogue, LayeredPolicy, Rules};

/// One upstream's state, for the operator console.
#[derive(Debug, Clone)]
pub struct UpstreamStatus {
    pub name: String,
    /// "stdio" (a child process) or "http".
    pub transport: &'static str,
    /// Connected now.
    pub running: bool,
    /// Tools in its last successful listing (`None`: never listed).
    pub listed_tools: Option<usize>,
    /// Why its last start or listing failed, escaped as the log has it.
    pub last_listing_error: Option<String>,
    /// For a child-process upstream with per-caller credentials: its callers'
    /// own children running now, and how many may run at once.
    pub caller_processes: Option<(usize, usize)>,
}

pub struct Upstreams {
    /// The configured upstreams in config order. A reload replaces the list
    /// whole; an upstream's `index` is its identity for as long as it runs and
    /// is never given to another one.
    list: RwLock<Arc<[Arc<Upstream>]>>,
    /// The index the next upstream a reload adds gets.
    next_index: AtomicUsize,
    /// What clients see of an upstream's JSON-RPC error `data` (E3).
    pub error_data: ErrorData,
    /// The argument policy and the access rules the catalogue is built with
    /// (the rules only to warn about argument conditions it can never meet, G6).
    settings: RwLock<Arc<(LayeredPolicy, Rules)>>,
    /// The pins lock beside the config (P2), read again on every catalogue build so a
    /// new one is picked up; the last good one stays when a read fails.
    lock_path: PathBuf,
    lock: Mutex<Option<Lock>>,
    /// By upstream index, how its tools differ from the lock now: the tool's name
    /// in the lock (its new name for an added one) → the drift as `pins diff`
    /// prints it. A drift is logged, counted and recorded when it appears or
    /// changes. An upstream a reload replaces hands its entry to its successor.
    drifts: Mutex<HashMap<usize, BTreeMap<String, String>>>,
    pub tool_drift: Arc<AtomicU64>,
    /// Where drift records go: the audit trail, unless the gateway only inspects.
    drift_audit: Mutex<Option<Arc<Settle>>>,
    /// By upstream index, its last successful tool listing (none until one succeeded).
    /// Each upstream's last good listing; the catalogue's entries share these
    /// declarations rather than copy them. Kept as text: a tree of values costs
    /// several times its text (issue 25).
    listings: RwLock<HashMap<usize, Declarations>>,
    /// By upstream index, why its last start or listing failed (cleared by a success).
    listing_errors: Mutex<HashMap<usize, String>>,
    catalogue: RwLock<Arc<Catalogue>>,
    /// A resource URI (`uri:…`) or prompt name (`prompt:…`) → the upstream that listed it.
    owners: Mutex<HashMap<String, usize>>,
    /// The initialize params sent to upstreams (replayed on restart).
    init: RwLock<Option<Value>>,
    /// Where the upstreams' own requests and notifications go.
    inbound: OnceLock<Weak<dyn Inbound>>,
    connected: tokio::sync::OnceCell<()>,
    /// The first start of the upstreams has begun (it may not be over).
    connecting: AtomicBool,
    shutting_down: AtomicBool,
    /// The upstreams (by index) a restart loop runs for. One at a time: a start
    /// that fails inside the loop ends its connection too, and that exit must not
    /// start a second loop beside the one already retrying.
    restarting: Mutex<HashSet<usize>>,
}

/// What a reload did to the upstreams, by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UpstreamChanges {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub restarted: Vec<String>,
}

/// A reload's upstreams, built and started but not yet in force.
pub struct Prepared {
    list: Vec<Arc<Upstream>>,
    /// The new upstreams' first listings, by index.
    listed: Vec<(usize, Result<Declarations, String>)>,
    settings: Arc<(LayeredPolicy, Rules)>,
    changes: UpstreamChanges,
}

impl Prepared {
    /// The upstreams as they will be once installed.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.list
    }
}

/// An upstream as its config says, its paths resolved against the config's folder.
fn build_upstream(config: &Config, u: &UpstreamConfig, index: usize) -> Arc<Upstream> {
    let mut up = u.clone();
    up.tls_ca_file = up
        .tls_ca_file
        .map(|p| config.resolve_path(&p.to_string_lossy()));
    for c in &mut up.credential {
        c.token_file = c
            .token_file
            .take()
            .map(|p| config.resolve_path(&p.to_string_lossy()));
    }
    Arc::new(Upstream::new(
        index,
        up,
        config.program(u),
        config.gateway.max_message_bytes,
    ))
}

/// Stops an upstream a reload removed, and its callers' own children, once
/// their calls in flight are over (or its call timeout passed: they then fail
/// as when an upstream ends, E2).
async fn retire(up: Arc<Upstream>) {
    let busy = |up: &Upstream| {
        up.conn().map_or(0, |c| c.in_flight()) + up.children.as_ref().map_or(0, |c| c.busy())
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(up.timeout_ms());
    while busy(&up) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(upstream = %up.name, "upstream stopped: the reloaded configuration no longer has it as it was");
    up.shutdown().await;
}

impl Upstreams {
    pub fn new(config: &Config) -> Upstreams {
        let list: Vec<Arc<Upstream>> = config
            .upstream
            .iter()
            .enumerate()
            .map(|(i, u)| build_upstream(config, u, i))
            .collect();
        let n = list.len();
        Upstreams {
            settings: RwLock::new(Arc::new((config.policy(), config.rules()))),
            lock_path: pins::lock_path(&config.path),
            lock: Mutex::new(None),
            drifts: Mutex::new(HashMap::new()),
            tool_drift: Arc::new(AtomicU64::new(0)),
            drift_audit: Mutex::new(None),
            list: RwLock::new(list.into()),
            next_index: AtomicUsize::new(n),
            error_data: config.gateway.upstream_error_data,
            listings: RwLock::new(HashMap::new()),
            listing_errors: Mutex::new(HashMap::new()),
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
            owners: Mutex::new(HashMap::new()),
            init: RwLock::new(None),
            inbound: OnceLock::new(),
            connected: tokio::sync::OnceCell::new(),
            connecting: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            restarting: Mutex::new(HashSet::new()),
        }
    }

    /// The configured upstreams now, in config order.
    pub fn list(&self) -> Arc<[Arc<Upstream>]> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The upstream with this index, while it is configured.
    pub fn get(&self, index: usize) -> Option<Arc<Upstream>> {
        self.list().iter().find(|u| u.index == index).cloned()
    }

    /// The name of the upstream with this index (empty once it is gone).
    pub fn name_of(&self, index: usize) -> String {
        self.get(index).map(|u| u.name.clone()).unwrap_or_default()
    }

    /// The first half of taking a reloaded config: upstreams named in `keep` go
    /// on running as they are; every other configured one is built anew and,
    /// when the upstreams run, started and listed here, before any call can
    /// reach it. Nothing changes for calls until [`Upstreams::install`].
    pub async fn prepare(&self, config: &Config, keep: &HashSet<String>) -> Prepared {
        // A first start under way started the list it saw: let it finish, so
        // the new upstreams are started here rather than never.
        if self.connecting.load(Ordering::SeqCst) {
            self.connect(None).await;
        }
        let old = self.list();
        let mut changes = UpstreamChanges::default();
        let mut fresh = Vec::new();
        let list: Vec<Arc<Upstream>> = config
            .upstream
            .iter()
            .map(|u| match old.iter().find(|o| o.name == u.name) {
                Some(o) if keep.contains(&u.name) => o.clone(),
                was => {
                    let index = self.next_index.fetch_add(1, Ordering::SeqCst);
                    let up = build_upstream(config, u, index);
                    match was {
                        Some(_) => changes.restarted.push(u.name.clone()),
                        None => changes.started.push(u.name.clone()),
                    }
                    fresh.push(up.clone());
                    up
                }
            })
            .collect();
        changes.stopped = old
            .iter()
            .filter(|o| !list.iter().any(|u| u.name == o.name))
            .map(|o| o.name.clone())
            .collect();
        let mut listed = Vec::new();
        if self.started() {
            let init = self.init.read().unwrap_or_else(|e| e.into_inner()).clone();
            let init = init.unwrap_or_else(|| upstream_init(None));
            let inbound = self.inbound();
            let tasks = fresh.into_iter().map(|up| {
                let (inbound, init) = (inbound.clone(), init.clone());
                async move { (up.index, up.connect(inbound, &init).await) }
            });
            listed = join_all(tasks).await;
        }
        Prepared {
            list,
            listed,
            settings: Arc::new((config.policy(), config.rules())),
            changes,
        }
    }

    /// The second half: the new list, argument policy and rules, and the
    /// catalogue built from them, in force at once. Upstreams no longer
    /// configured as they were stop once their calls in flight are over.
    /// Also returns the new upstreams that failed to start (to be restarted) and
    /// the drifts the new catalogue found, for [`Upstreams::record_drifts`] once
    /// the swap is over (this runs under the call policy's write lock).
    pub fn install(&self, prepared: Prepared) -> (UpstreamChanges, Vec<usize>, Vec<Drifted>) {
        let Prepared {
            list,
            listed,
            settings,
            changes,
        } = prepared;
        let old = std::mem::replace(
            &mut *self.list.write().unwrap_or_else(|e| e.into_inner()),
            list.into(),
        );
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = settings;
        let now = self.list();
        let retired: Vec<Arc<Upstream>> = old
            .iter()
            .filter(|o| !now.iter().any(|u| Arc::ptr_eq(u, o)))
            .cloned()
            .collect();
        {
            let mut listings = self.listings.write().unwrap_or_else(|e| e.into_inner());
            let mut errors = lock(&self.listing_errors);
            let mut drifts = lock(&self.drifts);
            for o in &retired {
                listings.remove(&o.index);
                errors.remove(&o.index);
                // A replacement compares with what its predecessor drifted by,
                // so a drift that stays is not recorded a second time.
                if let Some(d) = drifts.remove(&o.index) {
                    if let Some(u) = now.iter().find(|u| u.name == o.name) {
                        drifts.insert(u.index, d);
                    }
                }
            }
        }
        lock(&self.owners).retain(|_, i| !retired.iter().any(|o| o.index == *i));
        let mut failed = Vec::new();
        for (index, result) in listed {
            if !self.record_listing(index, result) {
                failed.push(index);
            }
        }
        let drifted = self.build_catalogue();
        for o in retired {
            tokio::spawn(retire(o));
        }
        (changes, failed, drifted)
    }

    /// Sends drift records (P2) to this audit trail (`None`: nowhere).
    pub fn record_drifts_in(&self, settle: Option<Arc<Settle>>) {
        *lock(&self.drift_audit) = settle.filter(|s| s.audit.on());
    }

    /// Names where upstream messages go; set once, before anything connects.
    pub fn set_inbound(&self, inbound: Weak<dyn Inbound>) {
        let _ = self.inbound.set(inbound);
    }

    fn inbound(&self) -> Weak<dyn Inbound> {
        match self.inbound.get() {
            Some(w) => w.clone(),
            None => Weak::<NoInbound>::new(),
        }
    }

    pub fn catalogue(&self) -> Arc<Catalogue> {
        self.catalogue
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn by_name(&self, name: &str) -> Option<Arc<Upstream>> {
        self.list().iter().find(|u| u.name == name).cloned()
    }

    /// Whether the upstreams were started (or are being started).
    pub fn started(&self) -> bool {
        self.connected.initialized()
    }

    /// Starts every upstream once (later calls wait for the first). `client_init` is
    /// the client's initialize params, whose version, capabilities and clientInfo the
    /// upstreams are offered; without one the gateway introduces itself. The
    /// upstreams start side by side, each within its own `timeout_ms` per step,
    /// and each is in the catalogue as soon as it listed its tools: a slow or
    /// stuck one delays no other.
    pub async fn connect(&self, client_init: Option<&Value>) {
        self.connected
            .get_or_init(|| async {
                self.connecting.store(true, Ordering::SeqCst);
                let init = upstream_init(client_init);
                *self.init.write().unwrap_or_else(|e| e.into_inner()) = Some(init.clone());
                let inbound = self.inbound();
                let list = self.list();
                let (tx, mut started) = tokio::sync::mpsc::unbounded_channel();
                for up in list.iter().cloned() {
                    let (inbound, init, tx) = (inbound.clone(), init.clone(), tx.clone());
                    tokio::spawn(async move {
                        let _ = tx.send((up.index, up.connect(inbound, &init).await));
                    });
                }
                drop(tx);
                let mut any = false;
                while let Some((index, result)) = started.recv().await {
                    if self.record_listing(index, result) {
                        any = true;
                        self.rebuild_catalogue().await;
                    }
                }
                if !any {
                    self.rebuild_catalogue().await;
                }
            })
            .await;
    }

    fn record_listing(&self, index: usize, result: Result<Declarations, String>) -> bool {
        let name = self.name_of(index);
        match result {
            Ok(tools) => {
                tracing::info!(upstream = %name, tools = tools.len(), "upstream ready");
                lock(&self.listing_errors).remove(&index);
                self.listings
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(index, tools);
                true
            }
            Err(e) => {
                // The cached listing stays: it is replaced only by a successful one.
                tracing::error!(upstream = %name, "upstream could not be started or listed: {}", logged(&e));
                lock(&self.listing_errors).insert(index, logged(&e).to_string());
                false
            }
        }
    }

    /// Each upstream's last successful listing, as the upstream sent it (for `pins`).
    pub fn listings(&self) -> Vec<(String, Option<Vec<Value>>)> {
        let listings = self.listings.read().unwrap_or_else(|e| e.into_inner());
        self.list()
            .iter()
            .map(|up| {
                let tools = listings.get(&up.index);
                let tools = tools.map(|t| {
                    t.iter()
                        .map(|d| serde_json::from_str(d.get()).unwrap_or(Value::Null))
                        .collect()
                });
                (up.name.clone(), tools)
            })
            .collect()
    }

    /// Each upstream as the operator console shows it.
    pub fn status(&self) -> Vec<UpstreamStatus> {
        let listings = self.listings.read().unwrap_or_else(|e| e.into_inner());
        let errors = self
            .listing_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.list()
            .iter()
            .map(|up| UpstreamStatus {
                name: up.name.clone(),
                transport: if up.config.url.is_some() {
                    "http"
                } else {
                    "stdio"
                },
                running: up.conn().is_some(),
                listed_tools: listings.get(&up.index).map(Vec::len),
                last_listing_error: errors.get(&up.index).cloned(),
                caller_processes: up.children.as_ref().map(|c| (c.running(), c.max())),
            })
            .collect()
    }

    /// Upstreams that have no listing to offer, or are not running now.
    pub fn unavailable(&self) -> Vec<String> {
        let listings = self.listings.read().unwrap_or_else(|e| e.into_inner());
        self.list()
            .iter()
            .filter(|up| !listings.contains_key(&up.index) || up.conn().is_none())
            .map(|up| up.name.clone())
            .collect()
    }

    /// Re-lists one upstream's tools after `list_changed`; the cached listing is
    /// replaced only when this succeeds.
    pub async fn refresh(&self, index: usize) -> bool {
        let Some(up) = self.get(index) else {
            return false;
        };
        let result = up.list_tools().await;
        let ok = self.record_listing(index, result);
        if ok {
            self.rebuild_catalogue().await;
        }
        ok
    }

    /// Whether an exit of generation `generation` of upstream `index` needs a restart:
    /// not while a restart loop runs for it, which retries by itself.
    pub fn needs_restart(&self, index: usize, generation: u64) -> bool {
        if self.shutting_down.load(Ordering::SeqCst) || lock(&self.restarting).contains(&index) {
            return false;
        }
        // An upstream a reload removed is not started again.
        let Some(up) = self.get(index) else {
            return false;
        };
        // An older child's exit, when a newer one already runs, needs nothing.
        let current = up.conn().map(|c| c.generation);
        current.is_none_or(|g| g == generation)
    }

    /// Starts upstream `index` again, with backoff, until it lists its tools; false
    /// when the gateway shuts down first, or when a restart of it is already under
    /// way (that one retries until it succeeds, and says so).
    pub async fn restart(&self, index: usize) -> bool {
        loop {
            if !lock(&self.restarting).insert(index) {
                return false;
            }
            let restarted = self.restart_loop(index).await;
            lock(&self.restarting).remove(&index);
            // The new connection may have ended before the flag was cleared, its
            // exit turned away as this loop's own: look again now it is cleared.
            if !restarted || self.get(index).is_none_or(|u| u.conn().is_some()) {
                return restarted;
            }
        }
    }

    async fn restart_loop(&self, index: usize) -> bool {
        let mut delay = Duration::from_millis(100);
        loop {
            tokio::time::sleep(delay).await;
            if self.shutting_down.load(Ordering::SeqCst) {
                return false;
            }
            // A reload may have removed or replaced it meanwhile.
            let Some(up) = self.get(index) else {
                return false;
            };
            let init = self.init.read().unwrap_or_else(|e| e.into_inner()).clone();
            let init = init.unwrap_or_else(|| upstream_init(None));
            tracing::info!(upstream = %up.name, "restarting upstream");
            match up.connect(self.inbound(), &init).await {
                Ok(tools) => {
                    self.record_listing(index, Ok(tools));
                    self.rebuild_catalogue().await;
                    return true;
                }
                Err(e) => {
                    tracing::error!(upstream = %up.name, "restart failed: {}; next try in {:?}", logged(&e), delay * 2);
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Stops every upstream; no restarts after this.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        join_all(
            self.list()
                .iter()
                .cloned()
                .map(|u| async move { u.shutdown().await }),
        )
        .await;
    }
}

/// Stands in for the router before it is named (nothing connects before then).
struct NoInbound;

impl Inbound for NoInbound {
    fn on_message(
        &self,
        _: usize,
        _: &Arc<crate::upstream::Conn>,
        _: Value,
        _: Option<u64>,
    ) -> crate::upstream::BoxedSend {
        Box::pin(async {})
    }
    fn on_exit(&self, _: usize, _: u64, _: crate::upstream::Exit) {}
}

/// The protocol version to answer an `initialize` with: the one asked for when
/// the gateway speaks it, else the newest it speaks.
pub fn negotiated_version(params: Option<&Value>) -> &'static str {
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    SUPPORTED_VERSIONS
        .iter()
        .find(|v| Some(**v) == requested)
        .copied()
        .unwrap_or(SUPPORTED_VERSIONS[0])
}

/// The initialize params sent upstream: the client's own where there is one.
fn upstream_init(client: Option<&Value>) -> Value {
    let version = negotiated_version(client);
    let capabilities = client
        .and_then(|p| p.get("capabilities"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let info = client
        .and_then(|p| p.get("clientInfo"))
        .cloned()
        .unwrap_or_else(|| json!({"name": "mcp-warden", "version": env!("CARGO_PKG_VERSION")}));
    json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": info})
}

/// Merges one upstream's capabilities into the set the gateway offers: objects are
/// merged key by key, a `true` flag wins, anything else keeps the first value.
fn merge_capabilities(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (None, v) => {
                into.insert(k.clone(), v.clone());
            }
            (Some(Value::Object(a)), Value::Object(b)) => merge_capabilities(a, b),
            (Some(a @ Value::Bool(false)), Value::Bool(true)) => *a = Value::Bool(true),
            _ => {}
        }
    }
}

/// Runs futures concurrently on the runtime and collects their outputs in order.
async fn join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(v) => out.push(v),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_merge() {
        let mut a = json!({"resources": {"subscribe": false}, "x-custom": {"a": 1}})
            .as_object()
            .unwrap()
            .clone();
        let b = json!({"resources": {"subscribe": true, "listChanged": true}, "logging": {}})
            .as_object()
            .unwrap()
            .clone();
        merge_capabilities(&mut a, &b);
        assert_eq!(
            Value::Object(a),
            json!({"resources": {"subscribe": true, "listChanged": true}, "x-custom": {"a": 1}, "logging": {}})
        );
    }

    #[test]
    fn upstream_init_offers_the_clients_terms() {
        let client = json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": {"name": "c"}});
        assert_eq!(
            upstream_init(Some(&client)),
            json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": {"name": "c"}})
        );
        assert_eq!(upstream_init(None)["protocolVersion"], "2025-11-25");
        let odd = json!({"protocolVersion": "1999-01-01"});
        assert_eq!(upstream_init(Some(&odd))["protocolVersion"], "2025-11-25");
    }

    #[tokio::test]
    async fn join_all_keeps_order() {
        let out = join_all((0..5u64).map(|i| async move {
            tokio::time::sleep(Duration::from_millis(50 - i * 10)).await;
            i
        }))
        .await;
        assert_eq!(out, [0, 1, 2, 3, 4]);
    }
}
