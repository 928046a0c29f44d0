//! A rule's tool-name precondition, found once at load time, so that `decide` can skip rules
//! that cannot match the call's tool without running the CEL interpreter.
//!
//! A rule's top-level `&&` chain often contains a conjunct such as `tool_name == "shell.exec"`,
//! `tool_name in ["db.execute", "db.query"]` or `tool_name.startsWith("payments.")`. When that
//! conjunct is false, the whole condition is false: CEL's `&&` is false as soon as one side is
//! false, even if the other side errors. Skipping the rule therefore gives exactly the same
//! result (no match, no evaluation error). Rules without such a conjunct are always evaluated.

use cel::common::ast::operators::{EQUALS, IN, LOGICAL_AND};
use cel::common::ast::{Expr, LiteralValue};
use cel::parser::Expression;

/// Which tool names a rule can match at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToolFilter {
    /// No precondition found: always evaluate.
    Any,
    /// tool_name must be one of these.
    Names(Vec<String>),
    /// tool_name must start with this.
    Prefix(String),
}

impl ToolFilter {
    /// The first tool-name conjunct of the top-level `&&` chain of `expr`, if any.
    pub fn of(expr: &Expression) -> ToolFilter {
        let mut conjuncts = Vec::new();
        flatten_and(expr, &mut conjuncts);
        conjuncts
            .into_iter()
            .find_map(conjunct_filter)
            .unwrap_or(ToolFilter::Any)
    }

    /// False when a rule with this filter cannot match `tool`.
    pub fn admits(&self, tool: &str) -> bool {
        match self {
            ToolFilter::Any => true,
            ToolFilter::Names(names) => names.iter().any(|n| n == tool),
            ToolFilter::Prefix(prefix) => tool.starts_with(prefix.as_str()),
        }
    }
}

/// Collects the operands of nested `_&&_` calls.
fn flatten_and<'e>(expr: &'e Expression, out: &mut Vec<&'e Expression>) {
    match &expr.expr {
        Expr::Call(call) if call.func_name == LOGICAL_AND && call.args.len() == 2 => {
            call.args.iter().for_each(|a| flatten_and(a, out));
        }
        _ => out.push(expr),
    }
}

/// `tool_name == "x"`, `"x" == tool_name`, `tool_name in ["x", ...]`,
/// `tool_name.startsWith("x")`.
fn conjunct_filter(expr: &Expression) -> Option<ToolFilter> {
    let Expr::Call(call) = &expr.expr else {
        return None;
    };
    match (
        call.func_name.as_str(),
        call.target.as_deref(),
        call.args.as_slice(),
    ) {
        (EQUALS, None, [a, b]) if is_tool_name(a) => literal(b).map(|s| ToolFilter::Names(vec![s])),
        (EQUALS, None, [a, b]) if is_tool_name(b) => literal(a).map(|s| ToolFilter::Names(vec![s])),
        (IN, None, [a, b]) if is_tool_name(a) => literal_list(b).map(ToolFilter::Names),
        ("startsWith", Some(t), [p]) if is_tool_name(t) => literal(p).map(ToolFilter::Prefix),
        _ => None,
    }
}

fn is_tool_name(e: &Expression) -> bool {
    matches!(&e.expr, Expr::Ident(name) if name == "tool_name")
}

fn literal(e: &Expression) -> Option<String> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
        _ => None,
    }
}

/// A list literal of string literals only.
fn literal_list(e: &Expression) -> Option<Vec<String>> {
    match &e.expr {
        Expr::List(list) if list.optional_indices.is_empty() => {
            list.elements.iter().map(literal).collect()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::cel_vars::{bind, Var, VarSet};
    use crate::policy::test_support::request;

    fn filter(expr: &str) -> ToolFilter {
        ToolFilter::of(cel::Env::stdlib().compile(expr).unwrap().expression())
    }

    #[test]
    fn filter_table() {
        let names = |n: &[&str]| ToolFilter::Names(n.iter().map(|s| s.to_string()).collect());
        let cases = [
            ("tool_name == 'a' && has(tool_args.x)", names(&["a"])),
            ("has(tool_args.x) && 'b' == tool_name", names(&["b"])),
            ("x && (y && tool_name in ['c', 'd'])", names(&["c", "d"])),
            (
                "tool_name.startsWith('pay.') && true",
                ToolFilter::Prefix("pay.".into()),
            ),
            ("tool_name == 'a' || tool_name == 'b'", ToolFilter::Any),
            ("tool_name != 'a'", ToolFilter::Any),
            ("tool_name in ['a', purpose]", ToolFilter::Any),
            ("!(tool_name == 'a')", ToolFilter::Any),
            ("true", ToolFilter::Any),
        ];
        for (expr, want) in cases {
            assert_eq!(filter(expr), want, "{expr}");
        }
        assert!(names(&["a"]).admits("a") && !names(&["a"]).admits("ab"));
        assert!(
            ToolFilter::Prefix("p.".into()).admits("p.x")
                && !ToolFilter::Prefix("p.".into()).admits("q")
        );
    }

    /// Skipping a rule its filter rejects gives what evaluating it gives: false, no error.
    #[test]
    fn rejected_rules_evaluate_to_false_without_error() {
        let exprs = [
            "tool_name == 'a' && purpose == 'x'",
            "purpose == 'x' && tool_name == 'a'",
            "1 && tool_name in ['a']",
            "tool_args.missing == 1 && tool_name.startsWith('a')",
        ];
        let env = std::sync::Arc::new(cel::Env::stdlib());
        let root = cel::Context::with_env(env.clone());
        let mut all = VarSet::default();
        Var::ALL.into_iter().for_each(|v| all.insert(v));
        for expr in exprs {
            let program = env.compile(expr).unwrap();
            let f = ToolFilter::of(program.expression());
            let req = request("zzz");
            assert!(!f.admits(&req.tool_name), "{expr}");
            let mut scope = root.new_inner_scope();
            bind(&mut scope, &req, all);
            assert_eq!(
                program.execute(&scope),
                Ok(cel::Value::Bool(false)),
                "{expr}"
            );
        }
    }
}
