//! What a `when_cel` expression is checked for when it is compiled, before any
//! call meets it: every name it reads is a variable of the environment (or one a
//! macro binds), every field it reads of `caller`, `tool`, `session` and
//! `request` exists, no comparison sets two types that can never be equal or
//! ordered, the whole gives a bool, and it stays within the size bounds.
//!
//! cel-rust has no type checker; this is a small one over what the environment
//! declares. `args` and what it holds are dynamic: they are the tool's to shape.

use super::{Position, MAX_COMPREHENSION_DEPTH, MAX_NODES};
use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue};

/// The static type of an expression, where it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    String,
    List,
    Map,
    Null,
    /// Known only at run time (`args`, a macro's variable, a function's result).
    Dyn,
}

impl Ty {
    pub(super) fn name(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::Uint => "uint",
            Ty::Double => "double",
            Ty::String => "string",
            Ty::List => "list",
            Ty::Map => "map",
            Ty::Null => "null",
            Ty::Dyn => "dyn",
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Uint | Ty::Double)
    }

    /// Two known types no value of which can ever be equal (numbers compare
    /// across int, uint and double).
    fn disjoint(self, other: Ty) -> bool {
        self != Ty::Dyn && other != Ty::Dyn && self != other && !(self.numeric() && other.numeric())
    }
}

/// The variables of the environment, and the fields of those that have fixed ones.
pub const VARIABLES: [&str; 5] = ["caller", "tool", "args", "session", "request"];

fn fields(var: &str) -> Option<&'static [(&'static str, Ty)]> {
    Some(match var {
        "caller" => &[
            ("name", Ty::String),
            ("groups", Ty::List),
            ("claims", Ty::Map),
        ],
        "tool" => &[
            ("name", Ty::String),
            ("upstream", Ty::String),
            ("labels", Ty::List),
        ],
        "session" => &[("labels", Ty::List), ("calls", Ty::Int)],
        "request" => &[
            ("time", Ty::Int),
            ("transport", Ty::String),
            ("revision", Ty::String),
        ],
        _ => return None,
    })
}

/// What an expression reads of one variable: only that is built for a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Need {
    /// Not named.
    #[default]
    Nothing,
    /// Only these fields (keys of `args`), each read as `var.field`.
    Fields(Vec<String>),
    /// The whole value (it is named other than as `var.field`).
    All,
}

impl Need {
    fn field(&mut self, name: &str) {
        match self {
            Need::Nothing => *self = Need::Fields(vec![name.to_owned()]),
            Need::Fields(f) if !f.iter().any(|x| x == name) => f.push(name.to_owned()),
            _ => {}
        }
    }

    /// Whether the value, or its field `name`, is wanted.
    pub fn wants(&self, name: &str) -> bool {
        match self {
            Need::Nothing => false,
            Need::Fields(f) => f.iter().any(|x| x == name),
            Need::All => true,
        }
    }
}

/// A problem found, and where.
pub(super) struct Problem {
    pub at: Option<Position>,
    pub what: String,
}

pub(super) struct Checker<'s> {
    source: &'s str,
    offsets: &'s dyn Fn(u64) -> Option<u32>,
    /// Names bound by the comprehensions around the node being checked.
    bound: Vec<String>,
    nodes: usize,
    depth: usize,
    /// What the expression reads of each of [`VARIABLES`], in that order.
    pub(super) needs: [Need; 5],
}

impl<'s> Checker<'s> {
    pub(super) fn new(source: &'s str, offsets: &'s dyn Fn(u64) -> Option<u32>) -> Self {
        Checker {
            source,
            offsets,
            bound: Vec::new(),
            nodes: 0,
            depth: 0,
            needs: Default::default(),
        }
    }

    fn problem(&self, e: &IdedExpr, what: String) -> Problem {
        Problem {
            at: (self.offsets)(e.id).map(|o| Position::of(self.source, o as usize)),
            what,
        }
    }

    /// Checks the whole expression: its parts, then that it gives a bool.
    pub(super) fn root(&mut self, e: &IdedExpr) -> Result<(), Problem> {
        let ty = self.ty(e)?;
        if ty != Ty::Bool && ty != Ty::Dyn {
            return Err(self.problem(e, format!("the expression gives {}, not a bool", ty.name())));
        }
        Ok(())
    }

    fn ty(&mut self, e: &IdedExpr) -> Result<Ty, Problem> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.problem(e, format!("the expression has more than {MAX_NODES} parts")));
        }
        Ok(match &e.expr {
            Expr::Literal(l) => literal(l),
            Expr::Ident(name) => {
                let ty = self.ident(e, name)?;
                if !self.bound.iter().any(|b| b == name) {
                    if let Some(i) = VARIABLES.iter().position(|v| v == name) {
                        self.needs[i] = Need::All;
                    }
                }
                ty
            }
            Expr::Select(s) => {
                if let Expr::Ident(var) = &s.operand.expr {
                    if !self.bound.iter().any(|b| b == var) {
                        self.ident(&s.operand, var)?;
                        if let Some(i) = VARIABLES.iter().position(|v| v == var) {
                            self.needs[i].field(&s.field);
                        }
                        return self.field(e, var, &s.field, s.test);
                    }
                }
                self.ty(&s.operand)?;
                if s.test {
                    Ty::Bool
                } else {
                    Ty::Dyn
                }
            }
            Expr::Call(c) => {
                if let Some(t) = &c.target {
                    self.ty(t)?;
                }
                let mut args = Vec::with_capacity(c.args.len());
                for a in &c.args {
                    args.push(self.ty(a)?);
                }
                self.call(e, &c.func_name, c.target.is_some(), &args)?
            }
            Expr::List(l) => {
                for x in &l.elements {
                    self.ty(x)?;
                }
                Ty::List
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        self.ty(&me.key)?;
                        self.ty(&me.value)?;
                    }
                }
                Ty::Map
            }
            Expr::Comprehension(c) => self.comprehension(e, c)?,
            Expr::Struct(_) => {
                return Err(self.problem(e, "message literals are not available here".into()))
            }
            Expr::Unspecified => Ty::Dyn,
        })
    }

    fn comprehension(
        &mut self,
        e: &IdedExpr,
        c: &cel::common::ast::ComprehensionExpr,
    ) -> Result<Ty, Problem> {
        self.ty(&c.iter_range)?;
        self.depth += 1;
        if self.depth > MAX_COMPREHENSION_DEPTH {
            return Err(self.problem(
                e,
                format!("macros such as all() and exists() nest more than {MAX_COMPREHENSION_DEPTH} deep"),
            ));
        }
        self.ty(&c.accu_init)?;
        let before = self.bound.len();
        self.bound.push(c.iter_var.clone());
        if let Some(v2) = &c.iter_var2 {
            self.bound.push(v2.clone());
        }
        self.bound.push(c.accu_var.clone());
        self.ty(&c.loop_cond)?;
        self.ty(&c.loop_step)?;
        let ty = self.ty(&c.result)?;
        self.bound.truncate(before);
        self.depth -= 1;
        Ok(ty)
    }

    fn ident(&self, e: &IdedExpr, name: &str) -> Result<Ty, Problem> {
        if self.bound.iter().any(|b| b == name) {
            return Ok(Ty::Dyn);
        }
        if name == "args" {
            return Ok(Ty::Map);
        }
        if VARIABLES.contains(&name) {
            return Ok(Ty::Map);
        }
        let hint = crate::hint::near(name, &VARIABLES, &[])
            .map(|n| format!("{} ", n.did_you_mean()))
            .unwrap_or_default();
        Err(self.problem(
            e,
            format!(
                "unknown variable '{name}'; {hint}the variables are {}",
                VARIABLES.join(", ")
            ),
        ))
    }

    fn field(&self, e: &IdedExpr, var: &str, field: &str, test: bool) -> Result<Ty, Problem> {
        let Some(known) = fields(var) else {
            return Ok(if test { Ty::Bool } else { Ty::Dyn });
        };
        match known.iter().find(|(f, _)| *f == field) {
            Some((_, ty)) => Ok(if test { Ty::Bool } else { *ty }),
            None => {
                let names: Vec<&str> = known.iter().map(|(f, _)| *f).collect();
                let hint = crate::hint::near(field, &names, &[])
                    .map(|n| format!("{} ", n.did_you_mean()))
                    .unwrap_or_default();
                Err(self.problem(
                    e,
                    format!(
                        "'{var}' has no field '{field}'; {hint}it has {}",
                        names.join(", ")
                    ),
                ))
            }
        }
    }

    /// The type a call gives, and an error where its operand types can never fit.
    fn call(&self, e: &IdedExpr, name: &str, member: bool, args: &[Ty]) -> Result<Ty, Problem> {
        let never = |why: String| Err(self.problem(e, why));
        Ok(match name {
            operators::EQUALS | operators::NOT_EQUALS => {
                if args[0].disjoint(args[1]) {
                    return never(format!(
                        "this compares {} with {}: they are never equal",
                        args[0].name(),
                        args[1].name()
                    ));
                }
                Ty::Bool
            }
            operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS => {
                let orderable = |t: Ty| matches!(t, Ty::Dyn | Ty::String | Ty::Bool) || t.numeric();
                if !orderable(args[0]) || !orderable(args[1]) || args[0].disjoint(args[1]) {
                    return never(format!(
                        "{} and {} cannot be ordered",
                        args[0].name(),
                        args[1].name()
                    ));
                }
                Ty::Bool
            }
            operators::IN => {
                if !matches!(args[1], Ty::List | Ty::Map | Ty::Dyn) {
                    return never(format!(
                        "'in' needs a list or a map, not {}",
                        args[1].name()
                    ));
                }
                Ty::Bool
            }
            operators::LOGICAL_AND | operators::LOGICAL_OR | operators::LOGICAL_NOT => {
                if let Some(t) = args.iter().find(|t| !matches!(t, Ty::Bool | Ty::Dyn)) {
                    return never(format!("a logical operator needs bools, not {}", t.name()));
                }
                Ty::Bool
            }
            operators::NOT_STRICTLY_FALSE => Ty::Bool,
            "startsWith" | "endsWith" | "contains" | "matches" if member => Ty::Bool,
            "size" => Ty::Int,
            "int" => Ty::Int,
            "uint" => Ty::Uint,
            "double" => Ty::Double,
            "string" => Ty::String,
            operators::ADD if args[0] == args[1] && args[0] != Ty::Dyn => args[0],
            _ => Ty::Dyn,
        })
    }
}

fn literal(l: &LiteralValue) -> Ty {
    match l {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(_) => Ty::Dyn,
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::Null => Ty::Null,
        LiteralValue::String(_) => Ty::String,
        LiteralValue::UInt(_) => Ty::Uint,
    }
}
