//! The CEL expressions of a HelmApp — `healthCheckExprs` and
//! `dependsOn[].readyExpr` (docs/dependencies.md) — compiled and evaluated
//! with bounds.
//!
//! - Compiled when a HelmApp is first seen: a syntax error names the field,
//!   line and column, and no helm runs.
//! - Before a run, its cost is bounded from the expression and the values it
//!   is given: each node costs one step, and each step of a comprehension
//!   (`all`, `exists`, `map`, `filter`) is multiplied by the largest list or
//!   map it can range over. Over [`COST_LIMIT`] steps the run does not
//!   start (`ExpressionCostExceeded`). CEL has no loops but comprehensions,
//!   so the bound holds.
//! - A run that still takes longer than [`DEADLINE`] is given up on (it runs
//!   on a blocking thread, bounded by the cost limit, and its result is
//!   dropped).
//! - A field the expression reads that the object does not have yet is
//!   not an error: the expression cannot say yes yet ([`Truth::NotYet`]), as
//!   Flux waits in that case. Any other runtime error is an
//!   [`ExprError::Runtime`], reported, never a crash.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, ExecutionError, Program, Value};
use serde_json::Value as Json;

/// Steps one evaluation may take (Kubernetes' per-expression limit for
/// validation rules is of this order).
pub const COST_LIMIT: u64 = 1_000_000;

/// Wall time one evaluation may take.
pub const DEADLINE: Duration = Duration::from_millis(500);

/// The standard environment, with optional fields (`a.?b.orValue(c)`).
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// Why an expression could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("{field}: syntax error at line {line}, column {column}: {message}")]
    Syntax {
        field: String,
        line: isize,
        column: isize,
        message: String,
    },
    #[error(
        "{field}: would take up to {estimate} steps on this object, over the limit of {limit}; make it range over less (a nested all/exists/map over a long list multiplies)"
    )]
    CostExceeded {
        field: String,
        estimate: u64,
        limit: u64,
    },
    #[error("{field}: took longer than {deadline:?}: given up")]
    Deadline { field: String, deadline: Duration },
    #[error("{field}: evaluation failed: {message}")]
    Runtime { field: String, message: String },
    #[error("{field}: evaluates to {got}, where a bool is needed")]
    NotBool { field: String, got: String },
}

impl ExprError {
    /// Whether the run was stopped by a bound (cost or deadline) rather
    /// than by what the expression says.
    pub fn is_bound(&self) -> bool {
        matches!(
            self,
            ExprError::CostExceeded { .. } | ExprError::Deadline { .. }
        )
    }
}

/// What a boolean expression said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Truth {
    Yes,
    No,
    /// It reads a field that is not there (yet): the name of the field.
    NotYet(String),
}

/// `source` compiled, or why it does not compile (`field`: where it was
/// written, for the message).
pub fn compile(field: &str, source: &str) -> Result<Program, ExprError> {
    ENV.compile(source).map_err(|errors| {
        let first = errors.errors.first();
        ExprError::Syntax {
            field: field.to_string(),
            line: first.map_or(0, |e| e.pos.0),
            column: first.map_or(0, |e| e.pos.1),
            message: first.map_or_else(
                || errors.to_string(),
                |e| e.msg.trim_start_matches("Syntax error: ").to_string(),
            ),
        }
    })
}

/// Evaluates the boolean expression `source` with `variables` (JSON
/// values, by name), bounded as the module docs say.
pub async fn evaluate(
    field: &str,
    source: &str,
    variables: Vec<(&'static str, Json)>,
) -> Result<Truth, ExprError> {
    let program = compile(field, source)?;
    let widest = variables.iter().map(|(_, v)| widest(v)).max().unwrap_or(0);
    let estimate = cost(program.expression(), widest.max(1));
    if estimate > COST_LIMIT {
        return Err(ExprError::CostExceeded {
            field: field.to_string(),
            estimate,
            limit: COST_LIMIT,
        });
    }
    let name = field.to_string();
    let run = tokio::task::spawn_blocking(move || run(&name, &program, variables));
    match tokio::time::timeout(DEADLINE, run).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => Err(ExprError::Runtime {
            field: field.to_string(),
            message: format!("the evaluation stopped: {e}"),
        }),
        Err(_) => Err(ExprError::Deadline {
            field: field.to_string(),
            deadline: DEADLINE,
        }),
    }
}

fn run(field: &str, program: &Program, variables: Vec<(&str, Json)>) -> Result<Truth, ExprError> {
    let mut context = Context::with_env(ENV.clone());
    for (name, value) in variables {
        context.add_variable_from_value(name, to_cel(value));
    }
    match program.execute(&context) {
        Ok(Value::Bool(true)) => Ok(Truth::Yes),
        Ok(Value::Bool(false)) => Ok(Truth::No),
        Ok(other) => Err(ExprError::NotBool {
            field: field.to_string(),
            got: format!("{:?}", other.type_of()),
        }),
        Err(ExecutionError::NoSuchKey(key)) => Ok(Truth::NotYet(key.to_string())),
        Err(e) => Err(ExprError::Runtime {
            field: field.to_string(),
            message: e.to_string(),
        }),
    }
}

/// A JSON value as CEL sees it: integers as `int` (JSON has one number
/// type; `status.readyInstances >= 2` must compare), others as they are.
fn to_cel(value: Json) -> Value {
    match value {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(Arc::new(s)),
        Json::Array(items) => Value::List(Arc::new(items.into_iter().map(to_cel).collect())),
        Json::Object(fields) => {
            let map: HashMap<String, Value> =
                fields.into_iter().map(|(k, v)| (k, to_cel(v))).collect();
            Value::from(map)
        }
    }
}

/// The longest list, map or string anywhere in `value`: what one
/// comprehension over it can range over at most.
fn widest(value: &Json) -> u64 {
    match value {
        Json::Array(items) => (items.len() as u64).max(items.iter().map(widest).max().unwrap_or(0)),
        Json::Object(fields) => {
            (fields.len() as u64).max(fields.values().map(widest).max().unwrap_or(0))
        }
        Json::String(s) => s.len() as u64,
        _ => 0,
    }
}

/// An upper bound of the steps evaluating `expr` takes when no collection
/// it ranges over is longer than `width`: one per node, a comprehension's
/// loop body once per element. A list built inside (`map`, `+`) can be
/// longer than the inputs; its bound grows with it ([`length`]).
fn cost(expr: &IdedExpr, width: u64) -> u64 {
    let sum = |exprs: &mut dyn Iterator<Item = &IdedExpr>| {
        exprs.fold(0u64, |total, e| total.saturating_add(cost(e, width)))
    };
    let own = match &expr.expr {
        Expr::Call(call) => sum(&mut call.target.iter().map(|t| t.as_ref()).chain(&call.args)),
        Expr::Comprehension(c) => {
            let steps = length(&c.iter_range, width);
            let body = cost(&c.loop_cond, width).saturating_add(cost(&c.loop_step, width));
            cost(&c.iter_range, width)
                .saturating_add(cost(&c.accu_init, width))
                .saturating_add(steps.saturating_mul(body))
                .saturating_add(cost(&c.result, width))
        }
        Expr::List(list) => sum(&mut list.elements.iter()),
        Expr::Map(map) => sum(&mut entries(&map.entries)),
        Expr::Struct(s) => sum(&mut entries(&s.entries)),
        Expr::Select(select) => cost(&select.operand, width),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    };
    own.saturating_add(1)
}

fn entries(entries: &[cel::common::ast::IdedEntryExpr]) -> impl Iterator<Item = &IdedExpr> {
    entries.iter().flat_map(|e| match &e.expr {
        EntryExpr::StructField(f) => vec![&f.value],
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
    })
}

/// An upper bound of the length of the collection `expr` yields: a
/// literal's own, a concatenation's sum, a `map`/`filter`'s range's; any
/// other (a field of the input) `width`.
fn length(expr: &IdedExpr, width: u64) -> u64 {
    match &expr.expr {
        Expr::List(list) => list.elements.len() as u64,
        Expr::Map(map) => map.entries.len() as u64,
        Expr::Call(call) if call.func_name == "_+_" => call
            .args
            .iter()
            .fold(0u64, |n, a| n.saturating_add(length(a, width))),
        Expr::Comprehension(c) => length(&c.iter_range, width),
        _ => width,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn eval(source: &str, dep: Json) -> Result<Truth, ExprError> {
        evaluate("readyExpr", source, vec![("dep", dep), ("self", json!({}))]).await
    }

    #[tokio::test]
    async fn a_true_false_or_missing_field_is_told_apart() {
        let dep = json!({"status": {"phase": "Running", "readyInstances": 2}});
        let ready = "dep.status.phase == 'Running' && dep.status.readyInstances >= 2";
        assert_eq!(eval(ready, dep.clone()).await, Ok(Truth::Yes));
        assert_eq!(
            eval("dep.status.readyInstances > 2", dep).await,
            Ok(Truth::No)
        );
        assert_eq!(
            eval("dep.status.phase == 'Running'", json!({"spec": {}})).await,
            Ok(Truth::NotYet("status".into()))
        );
        assert_eq!(
            eval("dep.?status.?phase.orValue('') == 'Running'", json!({})).await,
            Ok(Truth::No),
            "optional fields as Flux users write them"
        );
    }

    #[test]
    fn a_syntax_error_names_its_line_and_column() {
        let Err(ExprError::Syntax { line, column, .. }) =
            compile("readyExpr", "dep.status.phase ==")
        else {
            panic!("not a syntax error");
        };
        assert_eq!(
            (line, column),
            (1, 20),
            "1-based: the end, after 19 characters"
        );
        let Err(ExprError::Syntax { line, column, .. }) = compile("readyExpr", "a ) b") else {
            panic!("not a syntax error");
        };
        assert_eq!((line, column), (1, 3));
        let Err(ExprError::Syntax { line, column, .. }) =
            compile("readyExpr", "dep.a &&\n  (dep.b ==")
        else {
            panic!("not a syntax error");
        };
        assert_eq!((line, column), (2, 12));
    }

    #[tokio::test]
    async fn a_nested_loop_over_a_long_list_stops_at_the_cost_limit_before_it_runs() {
        let items: Vec<i64> = (0..2_000).collect();
        let dep = json!({"spec": {"items": items}});
        let nested = "dep.spec.items.all(x, dep.spec.items.exists(y, y == x))";
        let Err(ExprError::CostExceeded {
            estimate, limit, ..
        }) = eval(nested, dep.clone()).await
        else {
            panic!("not stopped at the cost limit");
        };
        assert!(estimate > limit);
        // One loop over the same list is well within the limit.
        assert_eq!(
            eval("dep.spec.items.all(x, x >= 0)", dep).await,
            Ok(Truth::Yes)
        );
    }

    #[test]
    fn the_bound_grows_with_lists_built_inside() {
        let program = compile("e", "(dep.a + dep.a + dep.a).all(x, x > 0)").unwrap();
        let once = compile("e", "dep.a.all(x, x > 0)").unwrap();
        assert!(cost(program.expression(), 100) > 2 * cost(once.expression(), 100));
    }

    #[tokio::test]
    async fn a_type_error_is_a_runtime_error_and_a_non_bool_is_named() {
        assert!(matches!(
            eval("dep.status.phase > 3", json!({"status": {"phase": "x"}})).await,
            Err(ExprError::Runtime { .. })
        ));
        assert!(matches!(
            eval("dep.status.phase", json!({"status": {"phase": "x"}})).await,
            Err(ExprError::NotBool { .. })
        ));
    }
}
