//! `[[quota]]`, `[[flow]]`, upstream tool labels and the HTTP per-caller request
//! budget, checked: rates parsed, globs compiled, once, when the file is loaded.
//! Counting happens in `gateway::quota`, session flow state in `gateway::flow`.

pub use super::file::FlowEffect;
use super::file::{FlowConfig, QuotaConfig, RuleMode, UpstreamConfig};
use globset::{Glob, GlobMatcher};
use std::fmt;
use warden_core::{Caller, CelCondition, CelInput, Effect, Rule};

/// The unit a rate counts calls over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    Second,
    Minute,
    Hour,
    Day,
}

impl Per {
    pub fn millis(self) -> u64 {
        match self {
            Per::Second => 1_000,
            Per::Minute => 60_000,
            Per::Hour => 3_600_000,
            Per::Day => 86_400_000,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Per::Second => "second",
            Per::Minute => "minute",
            Per::Hour => "hour",
            Per::Day => "day",
        }
    }
}

/// `N/second`, `N/minute`, `N/hour`, `N/day`, with a burst: a token bucket that
/// holds `burst` calls and refills `count` of them every `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Per,
    pub burst: u32,
}

impl Rate {
    /// Milliseconds between two calls at the steady rate.
    pub fn interval_ms(&self) -> f64 {
        self.per.millis() as f64 / f64::from(self.count)
    }

    /// How far ahead of the steady rate a caller may run: `burst - 1` intervals.
    pub fn tolerance_ms(&self) -> f64 {
        self.interval_ms() * f64::from(self.burst.saturating_sub(1))
    }

    /// Parses `30/minute`; `burst` defaults to the count.
    pub fn parse(text: &str, burst: Option<u32>) -> Result<Rate, String> {
        let bad = || {
            format!("'{text}' is not a rate; write calls per unit: 30/minute, 5/second, 1000/hour, 10000/day")
        };
        let (n, unit) = text.trim().split_once('/').ok_or_else(bad)?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Per::Second,
            "m" | "min" | "minute" => Per::Minute,
            "h" | "hour" => Per::Hour,
            "d" | "day" => Per::Day,
            _ => return Err(bad()),
        };
        if count == 0 {
            return Err(format!(
                "'{text}' allows no call at all; to refuse a tool, use a [[rule]] with effect = \"deny\""
            ));
        }
        let burst = burst.unwrap_or(count);
        if burst == 0 {
            return Err("burst must be at least 1".into());
        }
        Ok(Rate { count, per, burst })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.count == 1 { "" } else { "s" };
        write!(f, "{} call{s} per {}", self.count, self.per.word())
    }
}

/// One `[[quota]]`, checked.
#[derive(Debug, Clone)]
pub struct Quota {
    /// Who and which tools (its effect is unused).
    selects: Rule,
    pub rate: Option<Rate>,
    /// Calls of one caller in flight at once.
    pub concurrency: Option<u32>,
    /// When the shared store cannot answer: refuse the call (true) or let it
    /// through uncounted (false).
    pub strict: bool,
    /// It counts only the calls this holds for (X8).
    pub cel: Option<CelCondition>,
    /// Counted and audited, never refusing (X9).
    pub shadow: bool,
}

impl Quota {
    /// Whether the quota could count `caller`'s calls to `tool` (its
    /// `when_cel` aside).
    pub fn applies(&self, caller: &Caller, tool: &str) -> bool {
        self.selects.applies(caller, tool)
    }

    /// Whether the quota counts this call: it applies, and its `when_cel`
    /// holds. `Err`: the expression failed (X3), in words with no value.
    pub fn counts(&self, call: &CelInput<'_>) -> Result<bool, String> {
        if !self.applies(call.caller, call.tool) {
            return Ok(false);
        }
        holds(self.cel.as_ref(), call)
    }

    /// Whose calls to which tools it counts (for reports).
    pub fn selects(&self) -> &Rule {
        &self.selects
    }

    /// The quota; `Err`: the key within it (`""`: the entry) and why.
    pub(super) fn build(q: &QuotaConfig) -> Result<Quota, (&'static str, String)> {
        let cel = compile(q.when_cel.as_deref())?;
        Quota::limits(q)
            .map(|mut quota| {
                quota.cel = cel;
                quota.shadow = q.mode == Some(RuleMode::Shadow);
                quota
            })
            .map_err(|m| ("", m))
    }

    fn limits(q: &QuotaConfig) -> Result<Quota, String> {
        let selects = Rule::new(&q.callers, &q.tools, Effect::Allow)?;
        let rate = match &q.rate {
            Some(r) => Some(Rate::parse(r, q.burst)?),
            None if q.burst.is_some() => return Err("burst needs a rate".into()),
            None => None,
        };
        if q.concurrency == Some(0) {
            return Err("concurrency must be at least 1: 0 would refuse every call".into());
        }
        if rate.is_none() && q.concurrency.is_none() {
            return Err("a quota needs a rate (\"30/minute\"), a concurrency, or both".into());
        }
        Ok(Quota {
            selects,
            rate,
            concurrency: q.concurrency,
            strict: q.strict,
            cel: None,
            shadow: false,
        })
    }
}

/// One `[[flow]]`, checked.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Labels the session must have touched, all of them (the call's own count).
    pub touched: Vec<String>,
    /// The label of the call the rule stops.
    pub calling: String,
    pub effect: FlowEffect,
    /// Why, in words for the model.
    pub reason: String,
    /// A CEL condition that must hold too (X1).
    pub cel: Option<CelCondition>,
    /// Judged and audited, never stopping a call (X9).
    pub shadow: bool,
    /// Who answers an `ask` (H6); `None`: `[access] approver`.
    pub approver: Option<super::Approver>,
}

impl Flow {
    /// The rule; `Err`: the key within it (`""`: the entry) and why.
    pub(super) fn build(f: &FlowConfig) -> Result<Flow, (&'static str, String)> {
        let cel = compile(f.when_cel.as_deref())?;
        Flow::rule(f)
            .map(|mut flow| {
                flow.cel = cel;
                flow.shadow = f.mode == Some(RuleMode::Shadow);
                flow
            })
            .map_err(|m| ("", m))
    }

    fn rule(f: &FlowConfig) -> Result<Flow, String> {
        if f.touched.is_empty() {
            return Err("touched needs at least one label (e.g. [\"private_data\"])".into());
        }
        for l in f.touched.iter().chain([&f.calling]) {
            label_ok(l)?;
        }
        let reason = match &f.reason {
            Some(r) if r.trim().is_empty() => {
                return Err("reason must say something: it is what the model reads".into())
            }
            Some(r) => r.trim().to_owned(),
            None => format!(
                "This session has already used tools labelled {}, and this tool is labelled '{}': together they could send what was read out of the session.",
                f.touched
                    .iter()
                    .map(|l| format!("'{l}'"))
                    .collect::<Vec<_>>()
                    .join(" and "),
                f.calling
            ),
        };
        if f.approver.is_some() && f.effect != FlowEffect::Ask {
            return Err(crate::texts::APPROVER_NOT_ASKING.replace("{what}", "flow rule"));
        }
        Ok(Flow {
            touched: f.touched.clone(),
            calling: f.calling.clone(),
            effect: f.effect,
            reason,
            cel: None,
            shadow: false,
            approver: f.approver,
        })
    }
}

/// `quota[2]`, or `quota[2].when_cel` for a key within it.
pub(super) fn entry_key(table: &str, i: usize, key: &str) -> String {
    match key {
        "" => format!("{table}[{i}]"),
        k => format!("{table}[{i}].{k}"),
    }
}

/// A `when_cel`, compiled (X2); `Err`: its key and what is wrong where.
pub(super) fn compile(
    source: Option<&str>,
) -> Result<Option<CelCondition>, (&'static str, String)> {
    source
        .map(CelCondition::compile)
        .transpose()
        .map_err(|m| ("when_cel", m))
}

/// Whether an entry's `when_cel` holds for a call (none: it does). `Err`: it
/// failed (X3), in words with no value of the call.
pub fn holds(cel: Option<&CelCondition>, call: &CelInput<'_>) -> Result<bool, String> {
    match cel {
        None => Ok(true),
        Some(c) => c.holds(call).map_err(|e| format!("when_cel: {e}")),
    }
}

fn label_ok(l: &str) -> Result<(), String> {
    if l.is_empty()
        || !l
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        return Err(format!(
            "'{l}' is not a usable label; use letters, digits, '_' and '-'"
        ));
    }
    Ok(())
}

/// The labels of every upstream's tools, by glob over the upstream's own names.
/// Globs over one upstream's tool names, each with its labels.
type LabelGlobs = Vec<(GlobMatcher, Vec<String>)>;

#[derive(Debug, Clone, Default)]
pub struct Labels {
    by_upstream: Vec<(String, LabelGlobs)>,
}

impl Labels {
    pub(super) fn build(upstreams: &[UpstreamConfig]) -> Result<Labels, (String, String)> {
        let mut by_upstream = Vec::new();
        for (i, up) in upstreams.iter().enumerate() {
            if up.labels.is_empty() {
                continue;
            }
            let mut globs: Vec<(&String, &Vec<String>)> = up.labels.iter().collect();
            globs.sort();
            let mut compiled = Vec::new();
            for (glob, labels) in globs {
                let key = format!("upstream[{i}].labels.{glob}");
                let m = Glob::new(glob).map(|g| g.compile_matcher()).map_err(|e| {
                    (
                        key.clone(),
                        format!("'{glob}' is not a valid tool glob: {}", e.kind()),
                    )
                })?;
                for l in labels {
                    label_ok(l).map_err(|m| (key.clone(), m))?;
                }
                compiled.push((m, labels.clone()));
            }
            by_upstream.push((up.name.clone(), compiled));
        }
        Ok(Labels { by_upstream })
    }

    /// The labels of `tool` (the upstream's own name) on `upstream`, sorted, once each.
    pub fn of(&self, upstream: &str, tool: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_upstream
            .iter()
            .filter(|(u, _)| u == upstream)
            .flat_map(|(_, globs)| globs.iter())
            .filter(|(g, _)| g.is_match(tool))
            .flat_map(|(_, l)| l.iter().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn is_empty(&self) -> bool {
        self.by_upstream.is_empty()
    }
}

/// Quotas, flows and labels, as the gateway runs them.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub quotas: Vec<Quota>,
    pub flows: Vec<Flow>,
    pub labels: Labels,
    /// The HTTP front's budget of requests per caller, before any work.
    pub http_caller_rate: Option<Rate>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_say_what_they_are() {
        let r = Rate::parse("30/minute", None).unwrap();
        assert_eq!((r.count, r.per, r.burst), (30, Per::Minute, 30));
        assert_eq!(r.to_string(), "30 calls per minute");
        assert_eq!(r.interval_ms(), 2000.0);
        assert_eq!(r.tolerance_ms(), 58_000.0);
        let r = Rate::parse("1/s", Some(5)).unwrap();
        assert_eq!(r.to_string(), "1 call per second");
        assert_eq!(r.tolerance_ms(), 4000.0);
        assert_eq!(
            Rate::parse("30 per minute", None).unwrap_err(),
            "'30 per minute' is not a rate; write calls per unit: 30/minute, 5/second, 1000/hour, 10000/day"
        );
        assert!(Rate::parse("0/minute", None)
            .unwrap_err()
            .contains("allows no call"));
        assert!(Rate::parse("3/week", None).is_err());
        assert_eq!(
            Rate::parse("3/day", Some(0)).unwrap_err(),
            "burst must be at least 1"
        );
    }
}
