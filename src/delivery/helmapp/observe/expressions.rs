//! The CEL expressions of a HelmApp — `healthCheckExprs` and
//! `dependsOn[].readyExpr` (docs/dependencies.md) — compiled and evaluated
//! with bounds.
//!
//! - Compiled when a HelmApp is first seen: a syntax error names the field,
//!   line and column, and no helm runs.
//! - Before a run, its cost is bounded from the expression and the values it
//!   is given ([`cost`]): every function is charged the sizes of its
//!   arguments — measured on the input for a path from it
//!   (`dep.spec.items`), bounded for what the expression builds — since a
//!   comparison, `in` or a string function is linear in them; each step of
//!   a comprehension (`all`, `exists`, `map`, `filter`) is charged once per
//!   element of its range. Over [`COST_LIMIT`] steps the run does not start
//!   (`ExpressionCostExceeded`). CEL has no loops but comprehensions, so the
//!   bound holds; the inputs bound it, not a count of nodes.
//! - At most [`MAX_RUNNING`] evaluations run at once, each on a blocking
//!   thread holding its slot until it really ends; one that takes longer
//!   than [`DEADLINE`] is given up on (its result dropped, its slot held
//!   until its bounded work is done), so retries never start more.
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

/// What one `matches` call is charged besides the product of its
/// arguments' sizes: a regular expression is compiled at every call.
const MATCHES_COST: u64 = 100_000;

/// Evaluations running at once, at most (on blocking threads).
const MAX_RUNNING: usize = 2;

static RUNNING: LazyLock<Arc<tokio::sync::Semaphore>> =
    LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(MAX_RUNNING)));

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
    /// Every slot was taken for all of [`DEADLINE`]: others' expressions,
    /// not this one — it is tried again, never called too costly.
    #[error("{field}: not evaluated yet: every evaluation slot is busy; tried again shortly")]
    Busy { field: String },
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
    let scope: Scope = variables
        .iter()
        .map(|(name, v)| (name.to_string(), Bound::of(v)))
        .collect();
    let estimate = cost(program.expression(), &scope);
    if estimate > COST_LIMIT {
        return Err(ExprError::CostExceeded {
            field: field.to_string(),
            estimate,
            limit: COST_LIMIT,
        });
    }
    let name = field.to_string();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    // At most RUNNING evaluations at once, each holding its permit until
    // its thread really ends: one given up on at the deadline still counts,
    // so retries never pile threads up.
    // Waiting for a slot is not this expression's cost: a tenant whose
    // expressions keep the slots busy must not get another's refused.
    let Ok(Ok(permit)) = tokio::time::timeout_at(deadline, RUNNING.clone().acquire_owned()).await
    else {
        return Err(ExprError::Busy {
            field: field.to_string(),
        });
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let run = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        run(&name, &program, variables)
    });
    match tokio::time::timeout_at(deadline, run).await {
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

/// What is known of a value an expression yields, before it runs: its
/// size (nodes, string bytes and keys together — what a comparison, `in`
/// or a string function may touch), its length (what a comprehension over
/// it steps through) and its largest element's size. A path from an input
/// (`dep.status.conditions`) is measured on the input itself.
#[derive(Clone, Copy)]
struct Bound<'a> {
    json: Option<&'a Json>,
    size: u64,
    len: u64,
    elem: u64,
}

impl<'a> Bound<'a> {
    fn of(json: &'a Json) -> Self {
        let (len, elem) = match json {
            Json::Array(items) => (
                items.len() as u64,
                items.iter().map(size).max().unwrap_or(0),
            ),
            Json::Object(fields) => (
                fields.len() as u64,
                fields.values().map(size).max().unwrap_or(0),
            ),
            Json::String(s) => (s.len() as u64, 1),
            _ => (0, 0),
        };
        Bound {
            json: Some(json),
            size: size(json),
            len,
            elem,
        }
    }

    /// Not known from the input: everything at most `n`.
    fn at_most(n: u64) -> Self {
        Bound {
            json: None,
            size: n,
            len: n,
            elem: n,
        }
    }
}

/// The size of `value` ([`Bound`]).
fn size(value: &Json) -> u64 {
    match value {
        Json::Array(items) => items.iter().fold(1u64, |n, v| n.saturating_add(size(v))),
        Json::Object(fields) => fields.iter().fold(1u64, |n, (k, v)| {
            n.saturating_add(k.len() as u64).saturating_add(size(v))
        }),
        Json::String(s) => 1 + s.len() as u64,
        _ => 1,
    }
}

/// The variables an expression sees, by name, as [`Bound`]s.
type Scope<'a> = Vec<(String, Bound<'a>)>;

fn lookup<'a>(scope: &Scope<'a>, name: &str) -> Bound<'a> {
    scope
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, b)| *b)
        .unwrap_or(Bound::at_most(0))
}

/// The [`Bound`] of what `expr` yields in `scope`.
fn bound<'a>(expr: &IdedExpr, scope: &Scope<'a>) -> Bound<'a> {
    match &expr.expr {
        Expr::Ident(name) => lookup(scope, name),
        Expr::Select(select) => {
            let operand = bound(&select.operand, scope);
            match operand.json {
                Some(Json::Object(fields)) => match fields.get(&select.field) {
                    Some(field) => Bound::of(field),
                    None => Bound::at_most(0),
                },
                Some(_) => Bound::at_most(0),
                None => Bound::at_most(operand.size),
            }
        }
        Expr::Literal(lit) => Bound::at_most(format!("{lit:?}").len() as u64),
        Expr::List(list) => {
            let items: Vec<Bound> = list.elements.iter().map(|e| bound(e, scope)).collect();
            Bound {
                json: None,
                size: items.iter().fold(1u64, |n, b| n.saturating_add(b.size)),
                len: items.len() as u64,
                elem: items.iter().map(|b| b.size).max().unwrap_or(0),
            }
        }
        Expr::Map(_) | Expr::Struct(_) => {
            let parts: Vec<Bound> = children(expr).map(|e| bound(e, scope)).collect();
            let total = parts.iter().fold(1u64, |n, b| n.saturating_add(b.size));
            Bound::at_most(total)
        }
        Expr::Call(call) if call.func_name == "_+_" => {
            let args: Vec<Bound> = call.args.iter().map(|a| bound(a, scope)).collect();
            Bound {
                json: None,
                size: args.iter().fold(0u64, |n, b| n.saturating_add(b.size)),
                len: args.iter().fold(0u64, |n, b| n.saturating_add(b.len)),
                elem: args.iter().map(|b| b.elem).max().unwrap_or(0),
            }
        }
        Expr::Call(call) if call.func_name == "_[_]" => {
            let operand = call.args.first().map(|a| bound(a, scope));
            Bound::at_most(operand.map_or(0, |b| b.elem))
        }
        // Any other function yields at most the largest of its inputs.
        Expr::Call(_) => {
            let most = children(expr).map(|e| bound(e, scope).size).max();
            Bound::at_most(most.unwrap_or(1).max(1))
        }
        Expr::Comprehension(c) => {
            let (range, inner) = comprehension_scope(c, scope);
            let init = bound(&c.accu_init, scope);
            // The accumulator grows by at most what one step adds.
            let mut once = inner.clone();
            once.push((c.accu_var.clone(), init));
            let step = bound(&c.loop_step, &once);
            let grows = step.size.saturating_sub(init.size);
            let accu = Bound::at_most(init.size.saturating_add(range.len.saturating_mul(grows)));
            let mut after = inner;
            after.push((c.accu_var.clone(), accu));
            bound(&c.result, &after)
        }
        Expr::Unspecified => Bound::at_most(0),
    }
}

/// The range of comprehension `c` and the scope of its body (its loop
/// variables bound to one element of the range).
fn comprehension_scope<'a>(
    c: &cel::common::ast::ComprehensionExpr,
    scope: &Scope<'a>,
) -> (Bound<'a>, Scope<'a>) {
    let range = bound(&c.iter_range, scope);
    let element = Bound::at_most(range.elem);
    let mut inner = scope.clone();
    inner.push((c.iter_var.clone(), element));
    if let Some(second) = &c.iter_var2 {
        inner.push((second.clone(), element));
    }
    (range, inner)
}

/// The direct sub-expressions of `expr`.
fn children(expr: &IdedExpr) -> Box<dyn Iterator<Item = &IdedExpr> + '_> {
    match &expr.expr {
        Expr::Call(call) => Box::new(call.target.iter().map(|t| t.as_ref()).chain(&call.args)),
        Expr::List(list) => Box::new(list.elements.iter()),
        Expr::Map(map) => Box::new(entries(&map.entries)),
        Expr::Struct(s) => Box::new(entries(&s.entries)),
        Expr::Select(select) => Box::new(std::iter::once(select.operand.as_ref())),
        _ => Box::new(std::iter::empty()),
    }
}

/// An upper bound of the work evaluating `expr` in `scope` takes, in steps
/// of one node, one comparison or one byte: every function is charged the
/// sizes of its arguments (a comparison, `in`, a concatenation or a string
/// function is linear in them; `matches` their product), a comprehension
/// its range's size (its elements are copied) and its body once per
/// element. Sound for CEL's standard functions, which do no more.
fn cost(expr: &IdedExpr, scope: &Scope) -> u64 {
    let own = match &expr.expr {
        Expr::Comprehension(c) => {
            let (range, mut inner) = comprehension_scope(c, scope);
            let init = bound(&c.accu_init, scope);
            let accu = bound(expr, scope).size.max(init.size);
            inner.push((c.accu_var.clone(), Bound::at_most(accu)));
            let body = cost(&c.loop_cond, &inner).saturating_add(cost(&c.loop_step, &inner));
            cost(&c.iter_range, scope)
                .saturating_add(cost(&c.accu_init, scope))
                .saturating_add(range.size)
                .saturating_add(range.len.saturating_mul(body))
                .saturating_add(cost(&c.result, &inner))
        }
        Expr::Call(call) => {
            let args = children(expr).fold(0u64, |n, e| n.saturating_add(cost(e, scope)));
            let sizes: Vec<u64> = children(expr).map(|e| bound(e, scope).size).collect();
            let work = match call.func_name.as_str() {
                "_&&_" | "_||_" | "!_" | "_?_:_" => 0,
                // The pattern is compiled at each call, in time that is
                // not linear in its length (`\w{256}`): a large constant.
                "matches" => MATCHES_COST.saturating_add(
                    sizes
                        .iter()
                        .fold(1u64, |n, s| n.saturating_mul((*s).max(1))),
                ),
                _ => sizes.iter().fold(0u64, |n, s| n.saturating_add(*s)),
            };
            args.saturating_add(work)
        }
        _ => children(expr).fold(0u64, |n, e| n.saturating_add(cost(e, scope))),
    };
    own.saturating_add(1)
}

fn entries(entries: &[cel::common::ast::IdedEntryExpr]) -> impl Iterator<Item = &IdedExpr> {
    entries.iter().flat_map(|e| match &e.expr {
        EntryExpr::StructField(f) => vec![&f.value],
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
    })
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

    fn estimate(source: &str, dep: &Json) -> u64 {
        let program = compile("e", source).unwrap();
        cost(
            program.expression(),
            &vec![("dep".to_string(), Bound::of(dep))],
        )
    }

    #[test]
    fn the_bound_grows_with_lists_built_inside() {
        let dep = json!({"a": (0..100).collect::<Vec<i64>>()});
        let thrice = estimate("(dep.a + dep.a + dep.a).all(x, x > 0)", &dep);
        let once = estimate("dep.a.all(x, x > 0)", &dep);
        assert!(thrice > 2 * once, "{thrice} {once}");
    }

    #[tokio::test]
    async fn a_quadratic_in_over_a_long_list_is_refused_before_it_runs() {
        // Issue 57: one node per step would pass this; `in` is linear in
        // the list, so the loop is quadratic.
        let items: Vec<i64> = (0..20_000).collect();
        let dep = json!({"spec": {"values": {"a": items}}});
        let Err(ExprError::CostExceeded { estimate, .. }) = eval(
            "dep.spec.values.a.all(x, x in dep.spec.values.a)",
            dep.clone(),
        )
        .await
        else {
            panic!("not stopped at the cost limit");
        };
        assert!(estimate >= 20_000 * 20_000, "{estimate}");
        // String functions and equality on long strings are charged too.
        let long = json!({"s": "x".repeat(100_000), "l": (0..100).collect::<Vec<i64>>()});
        assert!(estimate_over("dep.l.all(i, dep.s.contains(dep.s))", &long) > COST_LIMIT);
    }

    #[test]
    fn a_regular_expression_in_a_loop_is_charged_its_compiles() {
        // Each call compiles its pattern: a few thousand of them pass a
        // per-byte estimate, and cost minutes of CPU.
        let dep = json!({"l": (0..15).collect::<Vec<i64>>()});
        let e = estimate(
            r"dep.l.exists(a, dep.l.exists(b, dep.l.exists(c, 'a'.matches('\\w{256}'))))",
            &dep,
        );
        assert!(e > COST_LIMIT, "{e}");
        assert!(estimate("'abc'.matches('^a')", &dep) <= COST_LIMIT);
    }

    fn estimate_over(source: &str, dep: &Json) -> u64 {
        estimate(source, dep)
    }

    #[test]
    fn a_usual_readiness_expression_on_a_large_object_stays_cheap() {
        // managedFields and a large spec do not count against a loop over
        // three conditions: only what the expression reads is measured.
        let managed: Vec<Json> = (0..200)
            .map(|i| json!({"manager": format!("m{i}"), "fieldsV1": {"f:spec": {}}}))
            .collect();
        let dep = json!({
            "metadata": {"managedFields": managed},
            "spec": {"blob": "y".repeat(200_000)},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"}, {"type": "A", "status": "False"}, {"type": "B", "status": "True"}
            ]}
        });
        let e = estimate(
            "dep.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
            &dep,
        );
        assert!(e < 10_000, "{e}");
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
