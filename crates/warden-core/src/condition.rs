//! Conditions on a call's arguments (G6): what an access rule may require of the
//! values a tool will get (`amount` at most 100, `query` not matching `*DROP*`).
//!
//! A condition names an argument by a path (`amount`, `filters.owner`,
//! `items[*].id`, `items[0]`) and tests the values it reaches. A wildcard is read
//! the cautious way: a rule that lets a call through (`allow`) needs every element
//! to pass, a rule that stops or escalates it (`deny`, `ask`) is set off by any
//! element. A path that reaches nothing meets no test but `present = false`.
//! When a rule decides, the condition that decided is put into words a model can
//! act on ("must be at most 100").

use globset::{Glob, GlobMatcher};
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// One step of an argument path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
    /// `[*]`: every element of an array.
    Each,
}

/// An argument path as written in configuration, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPath {
    pub text: String,
    pub steps: Vec<Step>,
}

impl ArgPath {
    /// Parses `a.b[*].c[0]`; an error says what is wrong.
    pub fn parse(text: &str) -> Result<ArgPath, String> {
        let bad = |why: &str| Err(format!("'{text}' is not an argument path: {why}"));
        let mut steps = Vec::new();
        let mut rest = text;
        let mut expect_key = true;
        while !rest.is_empty() {
            if let Some(inner) = rest.strip_prefix('[') {
                let Some(end) = inner.find(']') else {
                    return bad("a '[' is not closed");
                };
                let index = &inner[..end];
                steps.push(if index == "*" {
                    Step::Each
                } else {
                    match index.parse::<usize>() {
                        Ok(i) => Step::Index(i),
                        Err(_) => return bad("write [*] or a number between brackets"),
                    }
                });
                rest = &inner[end + 1..];
                expect_key = false;
                continue;
            }
            if !expect_key {
                match rest.strip_prefix('.') {
                    Some(r) => rest = r,
                    None => return bad("after ']' comes '.', '[' or the end"),
                }
            }
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            if end == 0 {
                return bad("a name is empty");
            }
            steps.push(Step::Key(rest[..end].to_owned()));
            rest = &rest[end..];
            expect_key = false;
            if rest.starts_with('.') && rest.len() == 1 {
                return bad("a name is empty");
            }
        }
        match steps.first() {
            None => bad("it is empty"),
            Some(Step::Key(_)) => Ok(ArgPath {
                text: text.to_owned(),
                steps,
            }),
            Some(_) => bad("it starts with an argument name"),
        }
    }

    /// The argument (top-level key) the path starts from.
    pub fn root(&self) -> &str {
        match &self.steps[0] {
            Step::Key(k) => k,
            _ => unreachable!("parse makes the first step a key"),
        }
    }

    /// The values the path reaches in `args`, each with its own concrete path
    /// (`items[2].id`), in document order.
    pub fn values<'a>(&self, args: &'a Map<String, Value>) -> Vec<(String, &'a Value)> {
        let root = self.root();
        let Some(first) = args.get(root) else {
            return Vec::new();
        };
        let mut found = vec![(root.to_owned(), first)];
        for step in &self.steps[1..] {
            let mut next = Vec::new();
            for (at, v) in found {
                match (step, v) {
                    (Step::Key(k), Value::Object(o)) => {
                        if let Some(x) = o.get(k) {
                            next.push((format!("{at}.{k}"), x));
                        }
                    }
                    (Step::Index(i), Value::Array(a)) => {
                        if let Some(x) = a.get(*i) {
                            next.push((format!("{at}[{i}]"), x));
                        }
                    }
                    (Step::Each, Value::Array(a)) => {
                        for (i, x) in a.iter().enumerate() {
                            next.push((format!("{at}[{i}]"), x));
                        }
                    }
                    _ => {}
                }
            }
            found = next;
        }
        found
    }
}

/// What a condition asks of the values its path reaches.
#[derive(Debug, Clone)]
pub enum Test {
    Equals(Value),
    OneOf(Vec<Value>),
    Glob(String, GlobMatcher),
    Regex(regex::Regex),
    /// A number within the bounds (inclusive).
    Range {
        min: Option<f64>,
        max: Option<f64>,
    },
    /// A string's characters, an array's items or an object's entries, within the bounds.
    Length {
        min: Option<u64>,
        max: Option<u64>,
    },
    /// `true`: the path reaches a value; `false`: it reaches none.
    Present(bool),
}

impl Test {
    pub fn glob(pattern: &str) -> Result<Test, String> {
        Glob::new(pattern)
            .map(|g| Test::Glob(pattern.to_owned(), g.compile_matcher()))
            .map_err(|e| format!("'{pattern}' is not a valid glob: {}", e.kind()))
    }

    pub fn regex(pattern: &str) -> Result<Test, String> {
        regex::Regex::new(pattern).map(Test::Regex).map_err(|e| {
            // The crate's message draws the pattern over several lines; its last says why.
            let full = e.to_string();
            let why = full
                .lines()
                .last()
                .unwrap_or_default()
                .trim_start_matches("error: ");
            format!("'{pattern}' is not a valid regex: {why}")
        })
    }

    /// Whether one value passes.
    fn passes(&self, v: &Value) -> bool {
        match self {
            Test::Equals(want) => same(v, want),
            Test::OneOf(wants) => wants.iter().any(|w| same(v, w)),
            Test::Glob(_, g) => v.as_str().is_some_and(|s| g.is_match(s)),
            Test::Regex(r) => v.as_str().is_some_and(|s| r.is_match(s)),
            Test::Range { min, max } => v
                .as_f64()
                .is_some_and(|n| min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m)),
            Test::Length { min, max } => {
                length(v).is_some_and(|n| min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m))
            }
            Test::Present(_) => true,
        }
    }

    /// The JSON types a value must have for this test to pass ("string", "number", …);
    /// empty: any.
    pub fn types(&self) -> &'static [&'static str] {
        match self {
            Test::Glob(..) | Test::Regex(_) => &["string"],
            Test::Range { .. } => &["number", "integer"],
            Test::Length { .. } => &["string", "array", "object"],
            _ => &[],
        }
    }

    /// What a value must be for the test to pass, in words ("must be at most 100").
    pub fn must(&self) -> String {
        match self {
            Test::Equals(v) => format!("must be {}", shown(v)),
            Test::OneOf(vs) => format!("must be one of: {}", listed(vs)),
            Test::Glob(g, _) => format!("must match '{g}'"),
            Test::Regex(r) => format!("must match the pattern '{}'", r.as_str()),
            Test::Range { min, max } => match (min, max) {
                (Some(a), Some(b)) => format!("must be between {} and {}", num(*a), num(*b)),
                (Some(a), None) => format!("must be at least {}", num(*a)),
                (None, Some(b)) => format!("must be at most {}", num(*b)),
                (None, None) => "must be a number".into(),
            },
            Test::Length { min, max } => match (min, max) {
                (Some(a), Some(b)) => format!("must have a length between {a} and {b}"),
                (Some(a), None) => format!("must have a length of at least {a}"),
                (None, Some(b)) => format!("must have a length of at most {b}"),
                (None, None) => "must have a length".into(),
            },
            Test::Present(true) => "must be given".into(),
            Test::Present(false) => "must not be given".into(),
        }
    }

    /// What a value must be to stay clear of the test ("must be more than 100").
    pub fn must_not(&self) -> String {
        match self {
            Test::Equals(v) => format!("must not be {}", shown(v)),
            Test::OneOf(vs) => format!("must not be one of: {}", listed(vs)),
            Test::Glob(g, _) => format!("must not match '{g}'"),
            Test::Regex(r) => format!("must not match the pattern '{}'", r.as_str()),
            Test::Range { min, max } => match (min, max) {
                (Some(a), Some(b)) => {
                    format!("must not be between {} and {}", num(*a), num(*b))
                }
                (Some(a), None) => format!("must be less than {}", num(*a)),
                (None, Some(b)) => format!("must be more than {}", num(*b)),
                (None, None) => "must not be a number".into(),
            },
            Test::Length { min, max } => match (min, max) {
                (Some(a), Some(b)) => format!("must not have a length between {a} and {b}"),
                (Some(a), None) => format!("must have a length of less than {a}"),
                (None, Some(b)) => format!("must have a length of more than {b}"),
                (None, None) => "must not have a length".into(),
            },
            Test::Present(true) => "must not be given".into(),
            Test::Present(false) => "must be given".into(),
        }
    }
}

/// Equality as JSON means it: numbers by value (1 = 1.0), the rest structurally.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn length(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => Some(s.chars().count() as u64),
        Value::Array(a) => Some(a.len() as u64),
        Value::Object(o) => Some(o.len() as u64),
        _ => None,
    }
}

fn num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("'{s}'"),
        other => other.to_string(),
    }
}

fn listed(vs: &[Value]) -> String {
    let mut out = String::new();
    for (i, v) in vs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}", shown(v));
    }
    out
}

/// One condition: a path and a test.
#[derive(Debug, Clone)]
pub struct Condition {
    pub path: ArgPath,
    pub test: Test,
}

/// Which condition decided, and in what words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The argument as the call has it (`items[2].id`), or the configured path
    /// when the call has no such value.
    pub argument: String,
    /// "must be at most 100", "must not match '*DROP*'".
    pub must: String,
}

impl Condition {
    /// Whether the condition holds; `every`: every value reached must pass (else any).
    /// The evidence names the value that decided: for a condition that fails, the
    /// one that did not pass (worded as what it must be); for one that holds, the
    /// one that passed (worded as what it must not be).
    pub fn check(&self, args: &Map<String, Value>, every: bool) -> (bool, Evidence) {
        let values = self.path.values(args);
        let evidence = |argument: &str, held: bool| Evidence {
            argument: argument.to_owned(),
            must: if held {
                self.test.must_not()
            } else {
                self.test.must()
            },
        };
        if let Test::Present(want) = self.test {
            let held = values.is_empty() != want;
            let at = values.first().map_or(self.path.text.as_str(), |(p, _)| p);
            return (held, evidence(at, held));
        }
        if values.is_empty() {
            return (false, evidence(&self.path.text, false));
        }
        if every {
            match values.iter().find(|(_, v)| !self.test.passes(v)) {
                Some((at, _)) => (false, evidence(at, false)),
                None => (true, evidence(&values[0].0, true)),
            }
        } else {
            match values.iter().find(|(_, v)| self.test.passes(v)) {
                Some((at, _)) => (true, evidence(at, true)),
                None => (false, evidence(&values[0].0, false)),
            }
        }
    }
}

/// A rule's conditions: all of `all` and, when `any` is not empty, one of `any`.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    pub all: Vec<Condition>,
    pub any: Vec<Condition>,
}

impl Conditions {
    pub fn is_empty(&self) -> bool {
        self.all.is_empty() && self.any.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Condition> {
        self.all.iter().chain(&self.any)
    }

    /// Whether the conditions hold, with the evidence of the condition that decided.
    pub fn check(&self, args: &Map<String, Value>, every: bool) -> (bool, Evidence) {
        let mut first_held = None;
        for c in &self.all {
            let (held, ev) = c.check(args, every);
            if !held {
                return (false, ev);
            }
            first_held.get_or_insert(ev);
        }
        if self.any.is_empty() {
            let ev = first_held.expect("conditions are not empty");
            return (true, ev);
        }
        let mut first_failed = None;
        for c in &self.any {
            let (held, ev) = c.check(args, every);
            if held {
                return (true, first_held.unwrap_or(ev));
            }
            first_failed.get_or_insert(ev);
        }
        (false, first_failed.expect("any is not empty"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn cond(path: &str, test: Test) -> Condition {
        Condition {
            path: ArgPath::parse(path).unwrap(),
            test,
        }
    }

    #[test]
    fn paths_parse_and_reach_nested_values() {
        assert_eq!(
            ArgPath::parse("items[*].id").unwrap().steps,
            [
                Step::Key("items".into()),
                Step::Each,
                Step::Key("id".into())
            ]
        );
        assert_eq!(
            ArgPath::parse("a.b[2]").unwrap().steps,
            [Step::Key("a".into()), Step::Key("b".into()), Step::Index(2)]
        );
        for (bad, why) in [
            ("", "it is empty"),
            ("a..b", "a name is empty"),
            ("a.", "a name is empty"),
            ("a[x]", "write [*] or a number between brackets"),
            ("a[1", "a '[' is not closed"),
            ("[*].a", "it starts with an argument name"),
            ("a[1]b", "after ']' comes '.', '[' or the end"),
        ] {
            assert_eq!(
                ArgPath::parse(bad).unwrap_err(),
                format!("'{bad}' is not an argument path: {why}")
            );
        }
        let a = args(json!({"filters":{"owner":"me"},"items":[{"id":1},{"x":2},{"id":3}]}));
        let got = |p: &str| {
            ArgPath::parse(p)
                .unwrap()
                .values(&a)
                .into_iter()
                .map(|(at, v)| format!("{at}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(got("filters.owner"), ["filters.owner=\"me\""]);
        assert_eq!(got("items[*].id"), ["items[0].id=1", "items[2].id=3"]);
        assert_eq!(got("items[1].x"), ["items[1].x=2"]);
        assert!(got("filters.nobody").is_empty());
        assert!(got("nothing[*]").is_empty());
    }

    #[test]
    fn every_operator() {
        let a = args(json!({"n": 50, "f": 1.0, "s": "select 1", "l": [1,2,3], "o": {"k": 1}}));
        let holds = |path: &str, test: Test| cond(path, test).check(&a, true).0;
        assert!(holds("f", Test::Equals(json!(1))));
        assert!(!holds("s", Test::Equals(json!("select"))));
        assert!(holds("n", Test::OneOf(vec![json!(10), json!(50)])));
        assert!(!holds("n", Test::OneOf(vec![json!("50")])));
        assert!(holds("s", Test::glob("select *").unwrap()));
        assert!(!holds("n", Test::glob("*").unwrap()));
        assert!(holds("s", Test::regex("^select\\s").unwrap()));
        assert!(!holds("s", Test::regex("(?i)drop").unwrap()));
        let range = |min, max| Test::Range { min, max };
        assert!(holds("n", range(Some(50.0), Some(100.0))));
        assert!(!holds("n", range(None, Some(49.5))));
        assert!(!holds("s", range(None, Some(100.0))));
        let len = |min, max| Test::Length { min, max };
        assert!(holds("s", len(Some(8), Some(8))));
        assert!(holds("l", len(None, Some(3))));
        assert!(!holds("o", len(Some(2), None)));
        assert!(!holds("n", len(None, None)));
        assert!(holds("o.k", Test::Present(true)));
        assert!(holds("o.x", Test::Present(false)));
        assert!(!holds("n", Test::Present(false)));
        assert!(!holds("missing", range(None, None)));
    }

    #[test]
    fn wildcards_are_read_the_cautious_way() {
        let a = args(json!({"items":[{"amount": 5}, {"amount": 500}]}));
        let c = cond(
            "items[*].amount",
            Test::Range {
                min: None,
                max: Some(100.0),
            },
        );
        let ev = |argument: &str, must: &str| Evidence {
            argument: argument.into(),
            must: must.into(),
        };
        assert_eq!(
            c.check(&a, true),
            (false, ev("items[1].amount", "must be at most 100"))
        );
        assert_eq!(
            c.check(&a, false),
            (true, ev("items[0].amount", "must be more than 100"))
        );
        let empty = args(json!({"items": []}));
        assert!(!c.check(&empty, true).0 && !c.check(&empty, false).0);
    }

    #[test]
    fn words_for_every_test() {
        let cases: Vec<(Test, &str, &str)> = vec![
            (
                Test::Equals(json!("usd")),
                "must be 'usd'",
                "must not be 'usd'",
            ),
            (
                Test::OneOf(vec![json!(1), json!("two")]),
                "must be one of: 1, 'two'",
                "must not be one of: 1, 'two'",
            ),
            (
                Test::glob("/srv/public/*").unwrap(),
                "must match '/srv/public/*'",
                "must not match '/srv/public/*'",
            ),
            (
                Test::regex("DROP").unwrap(),
                "must match the pattern 'DROP'",
                "must not match the pattern 'DROP'",
            ),
            (
                Test::Range {
                    min: Some(0.5),
                    max: Some(100.0),
                },
                "must be between 0.5 and 100",
                "must not be between 0.5 and 100",
            ),
            (
                Test::Range {
                    min: Some(1.0),
                    max: None,
                },
                "must be at least 1",
                "must be less than 1",
            ),
            (
                Test::Length {
                    min: None,
                    max: Some(80),
                },
                "must have a length of at most 80",
                "must have a length of more than 80",
            ),
            (
                Test::Length {
                    min: Some(1),
                    max: None,
                },
                "must have a length of at least 1",
                "must have a length of less than 1",
            ),
            (Test::Present(true), "must be given", "must not be given"),
            (Test::Present(false), "must not be given", "must be given"),
        ];
        for (test, must, must_not) in cases {
            assert_eq!(test.must(), must);
            assert_eq!(test.must_not(), must_not);
        }
    }

    #[test]
    fn all_and_any_combine() {
        let a = args(json!({"amount": 50, "currency": "eur"}));
        let c = Conditions {
            all: vec![cond(
                "amount",
                Test::Range {
                    min: None,
                    max: Some(100.0),
                },
            )],
            any: vec![
                cond("currency", Test::Equals(json!("usd"))),
                cond("currency", Test::Equals(json!("eur"))),
            ],
        };
        assert!(c.check(&a, true).0);
        let b = args(json!({"amount": 50, "currency": "gbp"}));
        assert_eq!(
            c.check(&b, true),
            (
                false,
                Evidence {
                    argument: "currency".into(),
                    must: "must be 'usd'".into()
                }
            )
        );
    }
}
