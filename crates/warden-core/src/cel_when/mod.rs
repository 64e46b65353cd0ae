//! `when_cel`: a condition written in CEL (the Common Expression Language) on a
//! rule, quota, flow or guard, over the variables `caller`, `tool`, `args`,
//! `session` and `request` (docs/behaviour.md, X1-X4).
//!
//! An expression is compiled once, when the configuration loads; what can be
//! known then is an error then (syntax, unknown variables and fields, types that
//! can never match, size), naming the line and column. At run time it reads only
//! the variables it names, and whatever goes wrong (an absent key, a type that
//! does not fit, a result that is not a bool) is a [`CelFailure`]: the caller of
//! [`CelCondition::holds`] fails closed on it.

mod check;
mod input;

pub use check::{Need, VARIABLES};
pub use input::{json, CelInput};

use cel::{Context, Env, ExecutionError, Program, Value as Cel};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The longest expression accepted, in bytes.
pub const MAX_SOURCE: usize = 4096;
/// The most parts (literals, names, operators, calls) an expression may have.
pub const MAX_NODES: usize = 256;
/// How deep macros that iterate (`all`, `exists`, `map`, `filter`) may nest: each
/// level multiplies the work by the size of what it ranges over.
pub const MAX_COMPREHENSION_DEPTH: usize = 2;

/// A place in an expression, counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    fn of(source: &str, offset: usize) -> Position {
        let before = &source[..offset.min(source.len())];
        let line = before.matches('\n').count() + 1;
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        Position {
            line,
            column: before[start..].chars().count() + 1,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// What an expression reads of each variable, in the order of [`VARIABLES`].
pub(crate) type Uses = [check::Need; 5];

/// A compiled `when_cel` expression.
#[derive(Clone)]
pub struct CelCondition {
    /// The expression as written.
    pub source: String,
    program: Arc<Program>,
    uses: Uses,
}

impl fmt::Debug for CelCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CelCondition")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Why an expression gave no answer for a call. The words name no value the
/// call carried: they go to the operator's log, never to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CelFailure {
    /// It gave a value that is not a bool (its type).
    NotBool(String),
    /// It stopped with an error (what kind).
    Error(&'static str),
}

impl fmt::Display for CelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CelFailure::NotBool(t) => write!(f, "it gave {t}, not a bool"),
            CelFailure::Error(kind) => write!(f, "it stopped: {kind}"),
        }
    }
}

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib()))
}

impl CelCondition {
    /// Compiles and checks `source`; an error says what is wrong and where.
    pub fn compile(source: &str) -> Result<CelCondition, String> {
        if source.trim().is_empty() {
            return Err("the expression is empty".into());
        }
        if source.len() > MAX_SOURCE {
            return Err(format!(
                "the expression is {} bytes long; at most {MAX_SOURCE} are allowed",
                source.len()
            ));
        }
        let program = env().compile(source).map_err(|errors| {
            let first = errors.errors.first();
            match first {
                Some(e) => format!(
                    "syntax error at line {}, column {}: {}",
                    e.pos.0,
                    e.pos.1,
                    e.msg.strip_prefix("Syntax error: ").unwrap_or(&e.msg)
                ),
                None => "syntax error".to_owned(),
            }
        })?;
        let info = program.source_info();
        let offsets = |id: u64| info.offset_for(id).map(|(start, _)| start);
        let mut checker = check::Checker::new(source, &offsets);
        checker.root(program.expression()).map_err(|p| match p.at {
            Some(at) => format!("{} (at {at})", p.what),
            None => p.what,
        })?;
        let uses = checker.needs;
        Ok(CelCondition {
            source: source.to_owned(),
            program: Arc::new(program),
            uses,
        })
    }

    /// Whether the expression reads the top-level argument `key`.
    pub fn reads_argument(&self, key: &str) -> bool {
        self.uses[2].wants(key)
    }

    /// Whether the expression holds for this call.
    pub fn holds(&self, input: &CelInput<'_>) -> Result<bool, CelFailure> {
        let mut ctx = Context::with_env(Arc::clone(env()));
        for (name, value) in input.variables(&self.uses) {
            ctx.add_variable_from_value(name, value);
        }
        match self.program.execute(&ctx) {
            Ok(Cel::Bool(b)) => Ok(b),
            Ok(other) => Err(CelFailure::NotBool(other.type_of().to_string())),
            Err(e) => Err(CelFailure::Error(kind(&e))),
        }
    }
}

/// What kind of error stopped an expression, in words that carry no value.
fn kind(e: &ExecutionError) -> &'static str {
    match e {
        ExecutionError::NoSuchKey(_) => "a key it reads is absent (guard it with has())",
        ExecutionError::NoSuchOverload(_)
        | ExecutionError::UnexpectedType { .. }
        | ExecutionError::ValuesNotComparable(..)
        | ExecutionError::UnsupportedBinaryOperator(..) => {
            "a value it reads has a type the expression does not handle"
        }
        ExecutionError::DivisionByZero(_) | ExecutionError::RemainderByZero(_) => {
            "division by zero"
        }
        ExecutionError::Overflow(..) => "a number overflowed",
        ExecutionError::IndexOutOfBounds(_) => "an index is out of bounds",
        _ => "an error while evaluating",
    }
}

#[cfg(test)]
mod tests;
