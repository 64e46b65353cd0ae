//! Quotas (Q1-Q4): how many calls of one caller to some tools may run, how fast
//! and how many at once, with a refusal a model can act on.
//!
//! A rate is a token bucket kept as its next call's theoretical arrival time
//! (GCRA): `burst` calls at once, then one every `per / count`. Every quota that
//! applies to a call takes its call, or none does; when several refuse, the one
//! that makes the caller wait longest answers (the tightest). With a shared
//! PostgreSQL store, rates and concurrency (calls in flight) are counted in it,
//! so replicas stay within a limit together: a call in flight holds a slot under
//! a lease its gateway renews, so the slots of a replica that died free
//! themselves when their leases run out. Without one they are counted in this
//! process. A refused call never reaches approval, hooks or the ledger; it is
//! settled with its own decision (`rate_limited`) so the audit trail and the
//! metrics have it.
//!
//! A 2026-07-28 call that was counted and then paused (put to a human, or asked
//! for input by its upstream) ends its request; the client sends it again. So
//! that it counts once, the pause issues a credit, sealed into the state the
//! client brings back, and the retry redeems it instead of counting again. A
//! credit redeems once (in the shared store across replicas), so a replayed
//! state is counted like any call.

use crate::config::limits::{Quota, Rate};
use crate::logged::logged;
use crate::texts;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;
use warden_core::{Caller, CelInput, Shadowed};
use warden_store::{Postgres, QuotaTake};

/// The `_meta` key of a refusal's result that says when to retry, in milliseconds.
pub const RETRY_META_KEY: &str = "warden/retryAfterMs";

/// The key in a sealed 2026-07-28 state that carries a quota credit.
pub const CREDIT_KEY: &str = "q";

/// How long to wait before retrying a call refused for its concurrency, or for
/// a store that could not count it: no one can tell when a slot frees.
const UNKNOWN_WAIT_MS: f64 = 1_000.0;

/// A quota's decision about one call.
pub enum Admission {
    /// The call may go on; it holds these concurrency slots until it ends.
    /// `counted`: a rate counted it (now, or before it paused: a credit).
    /// `shadow`: the shadow quotas that would have refused it (X9).
    Admitted {
        slots: Slots,
        counted: bool,
        shadow: Vec<Shadowed>,
    },
    /// The call is refused: the text for the model, and when to retry.
    Refused { text: String, retry_ms: u64 },
    /// A quota's `when_cel` failed (X3): refused closed; the note is the operator's.
    Failed(String),
}

/// X9: a shadow quota that would have refused a call.
fn would_deny(i: usize) -> Shadowed {
    Shadowed {
        would: "would_deny",
        of: "quota",
        rule: Some(i),
    }
}

type Counts = Arc<Mutex<HashMap<(usize, String), u32>>>;

/// The quotas of one gateway and their counts.
pub struct Quotas {
    list: Vec<Quota>,
    /// Quota index and caller → the bucket's next theoretical arrival (ms since `base`).
    local: Mutex<HashMap<(usize, String), f64>>,
    base: Instant,
    inflight: Counts,
    /// Credits issued in this process (no shared store) → until when they redeem.
    credits: Mutex<HashMap<String, Instant>>,
    shared: Option<Postgres>,
}

/// The concurrency slots a call holds until it ends: freed by [`Slots::release`]
/// when the call settles, or when dropped should it never settle.
#[derive(Default)]
pub struct Slots {
    local: Vec<(Counts, (usize, String))>,
    shared: Option<Shared>,
    released: AtomicBool,
    /// Slots taken apart (shadow quotas', X9), freed with these.
    more: Vec<Slots>,
}

/// Slots in the shared store, and the task renewing their lease.
struct Shared {
    pg: Postgres,
    ids: Vec<String>,
    renewal: AbortHandle,
}

impl Slots {
    fn free_local(&self) {
        for (counts, key) in &self.local {
            let mut counts = lock(counts);
            if let Some(n) = counts.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    counts.remove(key);
                }
            }
        }
    }

    /// Frees the slots now (once; later calls do nothing), so the call's answer
    /// leaves only after its place is free again.
    pub async fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        for more in &self.more {
            Box::pin(more.release()).await;
        }
        self.free_local();
        if let Some(s) = &self.shared {
            s.renewal.abort();
            if let Err(e) = s.pg.release_slots(&s.ids).await {
                tracing::warn!("concurrency slots could not be freed in the store; they free when their lease runs out: {e}");
            }
        }
    }
}

impl Slots {
    /// These slots and `other`, held and freed together.
    fn join(&mut self, other: Slots) {
        if other.shared.is_some() || !other.more.is_empty() {
            self.more.push(other);
        } else {
            let mut other = other;
            self.local.append(&mut other.local);
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        self.free_local();
        if let Some(s) = self.shared.take() {
            s.renewal.abort();
            // Without a runtime the lease runs out instead.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = s.pg.release_slots(&s.ids).await;
                });
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Seconds to say in a refusal: whole, rounded up, at least 1.
fn seconds(ms: f64) -> u64 {
    ((ms / 1000.0).ceil() as u64).max(1)
}

impl Quotas {
    pub fn new(list: Vec<Quota>, shared: Option<Postgres>) -> Quotas {
        Quotas {
            list,
            local: Mutex::new(HashMap::new()),
            base: Instant::now(),
            inflight: Arc::new(Mutex::new(HashMap::new())),
            credits: Mutex::new(HashMap::new()),
            shared,
        }
    }

    /// Whether a quota has a `when_cel` (X8).
    pub fn has_cel(&self) -> bool {
        self.list.iter().any(|q| q.cel.is_some())
    }

    /// Whether any quota could apply to `tool` for `caller`.
    pub fn any_for(&self, caller: Option<&Caller>, tool: &str) -> bool {
        caller.is_some_and(|c| self.list.iter().any(|q| q.applies(c, tool)))
    }

    /// Counts one call (its caller, and the tool by the name the caller sees)
    /// against every quota that counts it (its `when_cel` holding, X8); the
    /// shadow quotas count it apart and never refuse it (X9). A slot it takes
    /// in the shared store is leased for `lease` and renewed until the call
    /// ends. `credited`: the call was counted before it paused; its rates are
    /// not counted again. `None`: a call without a caller, which no quota counts.
    pub async fn admit(
        &self,
        call: Option<&CelInput<'_>>,
        lease: Duration,
        credited: bool,
    ) -> Admission {
        let Some(call) = call else {
            return Admission::Admitted {
                slots: Slots::default(),
                counted: credited,
                shadow: Vec::new(),
            };
        };
        let (mut applying, mut shadows, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for (i, q) in self.list.iter().enumerate() {
            match (q.counts(call), q.shadow) {
                (Ok(false), _) => {}
                (Ok(true), false) => applying.push(i),
                (Ok(true), true) => shadows.push(i),
                (Err(m), false) => return Admission::Failed(format!("quota[{i}].{m}")),
                // A shadow quota's failure would refuse the call closed.
                (Err(_), true) => failed.push(would_deny(i)),
            }
        }
        let admitted = self
            .enforce(call.caller, call.tool, &applying, lease, credited)
            .await;
        match admitted {
            Admission::Admitted {
                mut slots,
                counted,
                mut shadow,
            } if !shadows.is_empty() || !failed.is_empty() => {
                shadow.append(&mut failed);
                for i in shadows {
                    match self
                        .shadow_take(i, &call.caller.name, lease, credited)
                        .await
                    {
                        Ok(held) => slots.join(held),
                        Err(s) => shadow.push(s),
                    }
                }
                Admission::Admitted {
                    slots,
                    counted,
                    shadow,
                }
            }
            other => other,
        }
    }

    /// X9: shadow quota `i` counts a call the enforced quotas let through, in
    /// its own buckets; `Err`: it would have refused it (and did not count it).
    async fn shadow_take(
        &self,
        i: usize,
        caller: &str,
        lease: Duration,
        credited: bool,
    ) -> Result<Slots, Shadowed> {
        let q = &self.list[i];
        let rated: Vec<(usize, Rate)> = q
            .rate
            .filter(|_| !credited)
            .map(|r| (i, r))
            .into_iter()
            .collect();
        let limited: Vec<(usize, u32)> = q.concurrency.map(|n| (i, n)).into_iter().collect();
        let Some(pg) = &self.shared else {
            let slots = self.take_slots(&limited, caller).map_err(would_deny)?;
            return match self.take_local(&rated, caller) {
                None => Ok(slots),
                Some(_) => Err(would_deny(i)),
            };
        };
        if rated.is_empty() && limited.is_empty() {
            return Ok(Slots::default());
        }
        let rates: Vec<(String, f64, f64)> = rated
            .iter()
            .map(|(i, r)| (bucket_key(*i, r, caller), r.interval_ms(), r.tolerance_ms()))
            .collect();
        let buckets: Vec<(String, u32)> = limited
            .iter()
            .map(|&(i, n)| (format!("{i}:c{n}:{caller}"), n))
            .collect();
        match pg.take_quota(&rates, &buckets, lease).await {
            Ok(QuotaTake::Admitted(ids)) => Ok(held(pg, ids, lease)),
            Ok(QuotaTake::Full(_) | QuotaTake::Wait(..)) => Err(would_deny(i)),
            Err(e) => {
                tracing::warn!("the store cannot count a shadow quota; it is passed over: {e}");
                Ok(Slots::default())
            }
        }
    }

    /// The enforced quotas `applying` (indices) take the call of `caller` to
    /// `tool`, all of them or none.
    async fn enforce(
        &self,
        caller: &Caller,
        tool: &str,
        applying: &[usize],
        lease: Duration,
        credited: bool,
    ) -> Admission {
        let rated: Vec<(usize, Rate)> = applying
            .iter()
            .filter(|_| !credited)
            .filter_map(|&i| Some((i, self.list[i].rate?)))
            .collect();
        let limited: Vec<(usize, u32)> = applying
            .iter()
            .filter_map(|&i| Some((i, self.list[i].concurrency?)))
            .collect();
        let counted = credited || !rated.is_empty();
        let concurrency_refusal = |i: usize| {
            let n = self.list[i].concurrency.unwrap_or_default();
            refused(
                texts::concurrency_limited(tool, n, &caller.name, seconds(UNKNOWN_WAIT_MS)),
                UNKNOWN_WAIT_MS,
            )
        };
        let rate_refusal = |rate: &Rate, wait_ms: f64| {
            refused(
                texts::rate_limited(tool, &rate.to_string(), &caller.name, seconds(wait_ms)),
                wait_ms,
            )
        };
        let Some(pg) = &self.shared else {
            // Concurrency first, all slots or none; a rate refusal then drops them.
            let slots = match self.take_slots(&limited, &caller.name) {
                Ok(slots) => slots,
                Err(i) => return concurrency_refusal(i),
            };
            return match self.take_local(&rated, &caller.name) {
                None => admitted(slots, counted),
                Some((k, wait_ms)) => rate_refusal(&rated[k].1, wait_ms),
            };
        };
        if rated.is_empty() && limited.is_empty() {
            return admitted(Slots::default(), counted);
        }
        let rates: Vec<(String, f64, f64)> = rated
            .iter()
            .map(|(i, r)| {
                (
                    bucket_key(*i, r, &caller.name),
                    r.interval_ms(),
                    r.tolerance_ms(),
                )
            })
            .collect();
        let buckets: Vec<(String, u32)> = limited
            .iter()
            .map(|&(i, n)| (format!("{i}:c{n}:{}", caller.name), n))
            .collect();
        match pg.take_quota(&rates, &buckets, lease).await {
            Ok(QuotaTake::Admitted(ids)) => admitted(held(pg, ids, lease), counted),
            Ok(QuotaTake::Full(k)) => concurrency_refusal(limited[k].0),
            Ok(QuotaTake::Wait(k, wait_ms)) => rate_refusal(&rated[k].1, wait_ms),
            Err(e) => {
                let strict = rated
                    .iter()
                    .map(|(i, _)| *i)
                    .chain(limited.iter().map(|(i, _)| *i))
                    .any(|i| self.list[i].strict);
                if strict {
                    tracing::error!(tool = %logged(tool), "the store cannot count a strict quota; the call is refused: {}", logged(&e));
                    let kind = if rated.is_empty() {
                        "concurrency limit"
                    } else {
                        "rate limit"
                    };
                    return refused(
                        texts::quota_unverifiable(kind, tool, seconds(UNKNOWN_WAIT_MS)),
                        UNKNOWN_WAIT_MS,
                    );
                }
                tracing::warn!(tool = %logged(tool), "the store cannot count a quota; the call goes through uncounted: {}", logged(&e));
                admitted(Slots::default(), credited)
            }
        }
    }

    /// Records a credit for a counted call that paused: its retry, bringing
    /// `id` back in its sealed state, is not counted again (once, within `ttl`,
    /// the state's lifetime). A credit the store cannot record is logged, and
    /// the retry is counted.
    pub async fn issue_credit(&self, id: &str, ttl: Duration) {
        match &self.shared {
            Some(pg) => {
                if let Err(e) = pg.issue_credit(id, ttl).await {
                    tracing::warn!("a paused call's quota credit could not be recorded; its retry will be counted again: {e}");
                }
            }
            None => {
                let now = Instant::now();
                let mut credits = lock(&self.credits);
                credits.retain(|_, until| *until > now);
                credits.insert(id.to_owned(), now + ttl);
            }
        }
    }

    /// Gives back what the rates counted for a call of `caller` to `tool` that
    /// then did not run (its idempotency key could not be recorded), so that the
    /// retry its answer advises is not charged twice. Counted in this process
    /// only: a shared store that counts rates is the store the key could not be
    /// recorded in, so it is not asked again (the count stands).
    /// The quotas refunded are those that counted it: their `when_cel` holds
    /// for the same call (X8), shadow quotas too.
    pub fn refund(&self, call: Option<&CelInput<'_>>) {
        let Some(call) = call else { return };
        if self.shared.is_some() {
            return;
        }
        let mut tats = lock(&self.local);
        for (i, q) in self.list.iter().enumerate() {
            let Some(rate) = q.rate.filter(|_| q.counts(call) == Ok(true)) else {
                continue;
            };
            if let Some(tat) = tats.get_mut(&(i, call.caller.name.clone())) {
                *tat -= rate.interval_ms();
            }
        }
    }

    /// Redeems a credit a retried call brought back: true once per credit. A
    /// store that cannot answer redeems nothing: the call is counted.
    pub async fn redeem_credit(&self, id: &str) -> bool {
        match &self.shared {
            Some(pg) => pg.redeem_credit(id).await.unwrap_or_else(|e| {
                tracing::warn!("a quota credit could not be redeemed; the call is counted: {e}");
                false
            }),
            None => lock(&self.credits)
                .remove(id)
                .is_some_and(|until| until > Instant::now()),
        }
    }

    /// One slot of every concurrency quota in `limited`, or the first that is full.
    fn take_slots(&self, limited: &[(usize, u32)], caller: &str) -> Result<Slots, usize> {
        let mut counts = lock(&self.inflight);
        for &(i, limit) in limited {
            let held = counts
                .get(&(i, caller.to_owned()))
                .copied()
                .unwrap_or_default();
            if held >= limit {
                return Err(i);
            }
        }
        let mut slots = Slots::default();
        for &(i, _) in limited {
            let key = (i, caller.to_owned());
            *counts.entry(key.clone()).or_default() += 1;
            slots.local.push((self.inflight.clone(), key));
        }
        Ok(slots)
    }

    /// GCRA in this process: `None` when every bucket took the call, else the
    /// position in `rated` of the bucket that makes the caller wait longest.
    fn take_local(&self, rated: &[(usize, Rate)], caller: &str) -> Option<(usize, f64)> {
        let now = self.base.elapsed().as_secs_f64() * 1e3;
        let mut tats = lock(&self.local);
        let mut worst: Option<(usize, f64)> = None;
        let mut next = Vec::with_capacity(rated.len());
        for (k, (i, rate)) in rated.iter().enumerate() {
            let tat = tats
                .get(&(*i, caller.to_owned()))
                .copied()
                .unwrap_or(now)
                .max(now);
            let wait = tat - now - rate.tolerance_ms();
            if wait > 0.0 && worst.is_none_or(|(_, w)| wait > w) {
                worst = Some((k, wait));
            }
            next.push(tat + rate.interval_ms());
        }
        if worst.is_none() {
            for ((i, _), tat) in rated.iter().zip(next) {
                tats.insert((*i, caller.to_owned()), tat);
            }
        }
        worst
    }
}

/// What one caller holds of one quota now, as this process counts it (the
/// operator console's view).
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaUse {
    /// The quota's place in the config (`[[quota]]` number, from 0).
    pub quota: usize,
    pub caller: String,
    /// Calls in flight against its concurrency (when it has one).
    pub in_flight: Option<u32>,
    /// Calls its rate would take at once now, of `burst` (when it has a rate
    /// and this process counts it: not with a shared store).
    pub available: Option<u32>,
    pub burst: Option<u32>,
}

impl Quotas {
    /// Every caller's use of every quota this process has counted, by quota then
    /// caller; a caller whose bucket is full again and who has no call in flight
    /// is left out.
    pub fn usage(&self) -> Vec<QuotaUse> {
        let now = self.base.elapsed().as_secs_f64() * 1e3;
        let mut out: BTreeMap<(usize, String), QuotaUse> = BTreeMap::new();
        for ((i, caller), n) in lock(&self.inflight).iter() {
            if *n > 0 && *i < self.list.len() {
                let u = out
                    .entry((*i, caller.clone()))
                    .or_insert_with(|| self.empty_use(*i, caller));
                u.in_flight = Some(*n);
            }
        }
        if self.shared.is_none() {
            for ((i, caller), tat) in lock(&self.local).iter() {
                let Some(rate) = self.list.get(*i).and_then(|q| q.rate) else {
                    continue;
                };
                let available = available_now(&rate, *tat, now);
                if available < rate.burst {
                    let u = out
                        .entry((*i, caller.clone()))
                        .or_insert_with(|| self.empty_use(*i, caller));
                    u.available = Some(available);
                }
            }
        }
        let mut out: Vec<QuotaUse> = out.into_values().collect();
        for u in &mut out {
            if let (Some(rate), None) = (self.list[u.quota].rate, &self.shared) {
                u.burst = Some(rate.burst);
                u.available.get_or_insert(rate.burst);
            }
        }
        out
    }

    fn empty_use(&self, i: usize, caller: &str) -> QuotaUse {
        QuotaUse {
            quota: i,
            caller: caller.to_owned(),
            in_flight: self.list[i].concurrency.map(|_| 0),
            available: None,
            burst: None,
        }
    }

    /// Whether rates are counted in the shared store (so not known here).
    pub fn shared(&self) -> bool {
        self.shared.is_some()
    }
}

/// Calls a bucket whose next theoretical arrival is `tat` takes at once at
/// `now` (GCRA: one more each interval the arrival lies within the tolerance).
fn available_now(rate: &Rate, tat: f64, now: f64) -> u32 {
    let room = (now + rate.tolerance_ms() - tat) / rate.interval_ms();
    if room < 0.0 {
        0
    } else {
        ((room.floor() as u64) + 1).min(u64::from(rate.burst)) as u32
    }
}

fn admitted(slots: Slots, counted: bool) -> Admission {
    Admission::Admitted {
        slots,
        counted,
        shadow: Vec::new(),
    }
}

fn refused(text: String, wait_ms: f64) -> Admission {
    Admission::Refused {
        text,
        retry_ms: wait_ms.ceil() as u64,
    }
}

/// Slots taken in the shared store, their lease renewed every third of it
/// until they are released.
fn held(pg: &Postgres, ids: Vec<String>, lease: Duration) -> Slots {
    if ids.is_empty() {
        return Slots::default();
    }
    let (store, renewed) = (pg.clone(), ids.clone());
    let renewal = tokio::spawn(async move {
        loop {
            tokio::time::sleep(lease / 3).await;
            if let Err(e) = store.renew_slots(&renewed, lease).await {
                // The next renewal may get through before the lease runs out.
                tracing::warn!("the lease of concurrency slots could not be renewed: {e}");
            }
        }
    })
    .abort_handle();
    Slots {
        local: Vec::new(),
        shared: Some(Shared {
            pg: pg.clone(),
            ids,
            renewal,
        }),
        released: AtomicBool::new(false),
        more: Vec::new(),
    }
}

/// A bucket's key in the shared store: the quota's place and rate (so replicas
/// with another config do not mix counts) and the caller.
fn bucket_key(i: usize, rate: &Rate, caller: &str) -> String {
    format!(
        "{i}:{}/{}:{}:{caller}",
        rate.count,
        rate.per.word(),
        rate.burst
    )
}

/// The HTTP front's per-caller request budget (Q5): one bucket per caller, in
/// this process, checked before a request is read.
pub struct RequestBudget {
    rate: Rate,
    tats: Mutex<HashMap<String, f64>>,
    base: Instant,
}

impl RequestBudget {
    pub fn new(rate: Rate) -> RequestBudget {
        RequestBudget {
            rate,
            tats: Mutex::new(HashMap::new()),
            base: Instant::now(),
        }
    }

    /// `Ok`: the request may go on; `Err(ms)`: the caller should wait this long.
    pub fn take(&self, caller: &str) -> Result<(), f64> {
        let now = self.base.elapsed().as_secs_f64() * 1e3;
        let mut tats = lock(&self.tats);
        // Buckets back at rest carry nothing: forget them so the map stays small.
        if tats.len() > 10_000 {
            tats.retain(|_, tat| *tat > now);
        }
        let tat = tats.get(caller).copied().unwrap_or(now).max(now);
        let wait = tat - now - self.rate.tolerance_ms();
        if wait > 0.0 {
            return Err(wait);
        }
        tats.insert(caller.to_owned(), tat + self.rate.interval_ms());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
