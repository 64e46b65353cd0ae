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

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, ExecutionError, Program, Value as Cel};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The longest expression accepted, in bytes.
pub const MAX_SOURCE: usize = 4096;
/// The most parts (literals, names, operators, calls) an expression may have.
pub const MAX_NODES: usize = 256;
/// How deep macros that iterate (`all`, `exists`, `map`, `filter`) may nest: each
/// level multiplies the work by the size of what it ranges over.
pub const MAX_COMPREHENSION_DEPTH: usize = 2;

/// How long an evaluation may run: the clock is read whenever the expression
/// reads a variable; past this, once it has used the processor for half of a
/// further such span, every read fails, so the evaluation stops and fails
/// closed (X3).
pub const MAX_EVAL_TIME: Duration = Duration::from_millis(10);
/// The most items a list or map in the arguments an expression reads may hold.
pub const MAX_ARG_ITEMS: usize = 1024;
/// The most values (each scalar, list and map counts one) the arguments an
/// expression reads may hold in all.
pub const MAX_ARG_VALUES: usize = 16_384;

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

    /// Whether the expression holds for this call: within the size bounds
    /// (`MAX_ARG_ITEMS`, `MAX_ARG_VALUES`) and the time bound (`MAX_EVAL_TIME`).
    pub fn holds(&self, input: &CelInput<'_>) -> Result<bool, CelFailure> {
        self.holds_within(input, MAX_EVAL_TIME)
    }

    fn holds_within(&self, input: &CelInput<'_>, time: Duration) -> Result<bool, CelFailure> {
        if input.args_too_large(&self.uses[2], MAX_ARG_ITEMS, MAX_ARG_VALUES) {
            return Err(CelFailure::Error(TOO_LARGE));
        }
        let mut variables = Vec::with_capacity(5);
        for (name, value) in input.variables(&self.uses) {
            let value: Box<dyn Val> = value
                .try_into()
                .map_err(|_| CelFailure::Error("a value it reads cannot be built"))?;
            variables.push((name, value));
        }
        let timed = Timed {
            variables,
            bound: time,
            deadline: Instant::now() + time,
            expired: AtomicBool::new(false),
            window: Mutex::new(None),
        };
        let mut ctx = Context::with_env(Arc::clone(env()));
        ctx.set_variable_resolver(&timed);
        let result = self.program.execute(&ctx);
        if timed.expired.load(Ordering::Relaxed) {
            return Err(CelFailure::Error(OUT_OF_TIME));
        }
        match result {
            Ok(Cel::Bool(b)) => Ok(b),
            Ok(other) => Err(CelFailure::NotBool(other.type_of().to_string())),
            Err(e) => Err(CelFailure::Error(kind(&e))),
        }
    }
}

/// X3: the words for an evaluation stopped by the size bounds.
pub const TOO_LARGE: &str = "an argument it reads holds more than the bounds allow";
/// X3: the words for an evaluation stopped by the time bound.
pub const OUT_OF_TIME: &str = "it ran out of time";

/// The variables of one evaluation, read through the clock: once the
/// evaluation is past its bound, no variable is there, so what reads one
/// fails at once.
struct Timed {
    variables: Vec<(&'static str, Box<dyn Val>)>,
    bound: Duration,
    deadline: Instant,
    expired: AtomicBool,
    /// Past the deadline: when the window began, on the wall clock and the
    /// thread's processor clock.
    window: Mutex<Option<(Instant, Duration)>>,
}

impl Timed {
    /// Past the deadline, the evaluation stops once, in a window of `bound`,
    /// it used the processor half the time: time it spent waiting for the
    /// processor (a loaded machine) does not stop it. Where the processor
    /// clock cannot be read, the wall clock decides alone.
    fn past_bound(&self, now: Instant) -> bool {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let Some(cpu) = thread_cpu() else {
            return true;
        };
        match *window {
            None if !self.bound.is_zero() => {
                *window = Some((now, cpu));
                false
            }
            None => true,
            Some((since, _)) if now.duration_since(since) < self.bound => false,
            Some((_, used)) if cpu.saturating_sub(used) >= self.bound / 2 => true,
            Some(_) => {
                *window = Some((now, cpu));
                false
            }
        }
    }
}

impl VariableResolver for Timed {
    fn resolve<'b>(&'b self, name: &str) -> Option<CowVal<'b, 'b>> {
        if self.expired.load(Ordering::Relaxed) {
            return None;
        }
        let now = Instant::now();
        if now >= self.deadline && self.past_bound(now) {
            self.expired.store(true, Ordering::Relaxed);
            return None;
        }
        let (_, v) = self.variables.iter().find(|(n, _)| *n == name)?;
        Some(CowVal::Borrowed(v.as_ref()))
    }
}

/// The processor time the calling thread has used.
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly"
))]
fn thread_cpu() -> Option<Duration> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?;
    Some(Duration::from(t))
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly"
)))]
fn thread_cpu() -> Option<Duration> {
    None
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
