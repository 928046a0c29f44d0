//! Static analysis of a compiled CEL rule: which variables it reads, which it guards with
//! `has(...)`, and the literal regex patterns it passes to `matches` / `re.matches`. Loading
//! uses it to pick the variables to bind, to reject bad regexes and to precompile the
//! `re.matches` patterns; `toolgate policy check` uses it for warnings ([`warnings`]).

use super::cel_vars::{Var, VarSet};
use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, LiteralValue};
use cel::parser::Expression;
use std::collections::BTreeSet;

/// What a rule expression uses.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Usage {
    /// Free identifiers (comprehension variables excluded), sorted.
    pub idents: BTreeSet<String>,
    /// Variables guarded by `has(x.f)` (guards `x`) or `has(request.x)` (guards `x`).
    pub guarded: BTreeSet<String>,
    /// Literal patterns passed to `matches` or `re.matches`.
    pub regexes: Vec<String>,
    /// Calls to the standard `matches`, which compiles its pattern on every evaluation.
    pub slow_matches: usize,
}

impl Usage {
    /// Analyzes `expr`.
    pub fn of(expr: &Expression) -> Usage {
        let mut usage = Usage::default();
        let mut bound = Vec::new();
        usage.visit(expr, &mut bound);
        usage
    }

    /// The request variables used (unknown identifiers ignored).
    pub fn vars(&self) -> VarSet {
        let mut set = VarSet::default();
        self.idents
            .iter()
            .filter_map(|i| Var::from_name(i))
            .for_each(|v| set.insert(v));
        set
    }

    fn visit(&mut self, e: &Expression, bound: &mut Vec<String>) {
        match &e.expr {
            Expr::Ident(name)
                if !bound.contains(name) && !CEL_TYPE_NAMES.contains(&name.as_str()) =>
            {
                self.idents.insert(name.clone());
            }
            Expr::Select(select) => {
                if select.test {
                    self.guard(&select.operand, &select.field);
                }
                self.visit(&select.operand, bound);
            }
            Expr::Call(call) => {
                let namespaced = call.target.as_deref().is_some_and(is_re_namespace);
                if call.func_name == "matches" {
                    self.regex(call.args.last());
                    self.slow_matches += usize::from(!namespaced);
                }
                if let Some(target) = call.target.as_deref().filter(|_| !namespaced) {
                    self.visit(target, bound);
                }
                call.args.iter().for_each(|a| self.visit(a, bound));
            }
            Expr::List(list) => list.elements.iter().for_each(|x| self.visit(x, bound)),
            Expr::Map(map) => map.entries.iter().for_each(|x| self.entry(&x.expr, bound)),
            Expr::Struct(st) => st.entries.iter().for_each(|x| self.entry(&x.expr, bound)),
            Expr::Comprehension(c) => self.comprehension(c, bound),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    /// Visits a macro expansion (`all`, `exists`, `map`, ...) with its loop variables bound.
    fn comprehension(&mut self, c: &ComprehensionExpr, bound: &mut Vec<String>) {
        self.visit(&c.iter_range, bound);
        self.visit(&c.accu_init, bound);
        let before = bound.len();
        bound.push(c.iter_var.clone());
        bound.extend(c.iter_var2.iter().cloned());
        bound.push(c.accu_var.clone());
        self.visit(&c.loop_cond, bound);
        self.visit(&c.loop_step, bound);
        self.visit(&c.result, bound);
        bound.truncate(before);
    }

    fn entry(&mut self, entry: &EntryExpr, bound: &mut Vec<String>) {
        match entry {
            EntryExpr::MapEntry(m) => {
                self.visit(&m.key, bound);
                self.visit(&m.value, bound);
            }
            EntryExpr::StructField(f) => self.visit(&f.value, bound),
        }
    }

    /// Records what `has(operand.field)` guards.
    fn guard(&mut self, operand: &Expression, field: &str) {
        match root_ident(operand) {
            Some(("request", true)) => {
                self.guarded.insert(field.to_string());
            }
            Some((root, _)) => {
                self.guarded.insert(root.to_string());
            }
            None => {}
        }
    }

    fn regex(&mut self, arg: Option<&Expression>) {
        if let Some(Expression {
            expr: Expr::Literal(LiteralValue::String(s)),
            ..
        }) = arg
        {
            self.regexes.push(s.inner().to_string());
        }
    }
}

/// Identifiers CEL itself defines (type names), which are no variables.
const CEL_TYPE_NAMES: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// True for the `re` of `re.matches(...)` (a function namespace, not a variable).
fn is_re_namespace(target: &Expression) -> bool {
    matches!(&target.expr, Expr::Ident(name) if name == "re")
}

/// The identifier a select chain starts from, and whether the chain is that identifier alone.
fn root_ident(e: &Expression) -> Option<(&str, bool)> {
    let mut cur = e;
    let mut alone = true;
    loop {
        match &cur.expr {
            Expr::Ident(name) => return Some((name, alone)),
            Expr::Select(s) => {
                cur = &s.operand;
                alone = false;
            }
            Expr::Call(c) if c.func_name == "_[_]" => {
                cur = c.args.first()?;
                alone = false;
            }
            _ => return None,
        }
    }
}

/// `policy check` warnings for one rule: optional fields read without a `has()` guard,
/// identifiers that are no request field (always an evaluation error), and calls to the slow
/// standard `matches`.
pub(crate) fn warnings(usage: &Usage) -> Vec<String> {
    let mut out = Vec::new();
    if usage.slow_matches > 0 {
        out.push(
            "calls matches(), which compiles its regex on every evaluation (~50 µs); \
             use re.matches(text, pattern), compiled once at load"
                .to_string(),
        );
    }
    for ident in &usage.idents {
        match Var::from_name(ident) {
            None => out.push(format!(
                "references `{ident}`, which is no request field, so the rule can never match"
            )),
            Some(var) if var.optional() && !usage.guarded.contains(ident) => {
                let hint = if var.object() {
                    format!("has({ident}.<key>)")
                } else {
                    format!("has(request.{ident})")
                };
                out.push(format!(
                    "uses optional field `{ident}` without a has() guard; write `{hint} && ...`"
                ));
            }
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(expr: &str) -> Usage {
        Usage::of(cel::Env::stdlib().compile(expr).unwrap().expression())
    }

    #[test]
    fn usage_table() {
        let u = usage("tool_name == 'x' && has(tool_args.cmd) && tool_args.cmd.matches('rm\\\\s')");
        assert_eq!(
            u.idents,
            ["tool_args", "tool_name"].map(String::from).into()
        );
        assert_eq!(u.guarded, ["tool_args"].map(String::from).into());
        assert_eq!(u.regexes, vec!["rm\\s".to_string()]);
        let u = usage("has(request.purpose) && purpose == 'x'");
        assert_eq!(u.guarded, ["purpose"].map(String::from).into());
        let u = usage("session_tool_calls.exists(t, t.startsWith('shell.'))");
        assert_eq!(u.idents, ["session_tool_calls"].map(String::from).into());
        let u = usage("matches(tool_name, '^a')");
        assert_eq!(
            (u.regexes.clone(), u.slow_matches),
            (vec!["^a".to_string()], 1)
        );
        let u = usage("type(tool_name) == string && !(type(purpose) in [int, double])");
        assert_eq!(
            u.idents,
            ["purpose", "tool_name"].map(String::from).into(),
            "type names are no variables"
        );
        let u = usage("re.matches(tool_name, '^b')");
        assert_eq!(
            (u.regexes.clone(), u.slow_matches),
            (vec!["^b".to_string()], 0)
        );
        assert_eq!(
            u.idents,
            ["tool_name"].map(String::from).into(),
            "`re` is no variable"
        );
    }

    #[test]
    fn warnings_table() {
        let cases: &[(&str, &[&str])] = &[
            ("tool_name == 'x'", &[]),
            ("has(tool_args.cmd) && tool_args.cmd == 'x'", &[]),
            (
                "tool_args.cmd == 'x'",
                &["`tool_args` without a has() guard"],
            ),
            ("environment == 'prod'", &[]),
            ("purpose == 'billing'", &["has(request.purpose)"]),
            ("has(request.purpose) && purpose == 'billing'", &[]),
            (
                "tool_nmae == 'x'",
                &["`tool_nmae`, which is no request field"],
            ),
            ("tool_name.matches('x')", &["use re.matches"]),
            ("re.matches(tool_name, 'x')", &[]),
        ];
        for (expr, want) in cases {
            let got = warnings(&usage(expr));
            assert_eq!(got.len(), want.len(), "{expr}: {got:?}");
            for (g, w) in got.iter().zip(want.iter()) {
                assert!(g.contains(w), "{expr}: {g}");
            }
        }
    }
}
