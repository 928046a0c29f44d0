//! The CEL variables of a decision: every EnforcementRequest field under its own name, plus
//! `request`, a map of the fields the request carries (so `has(request.purpose)` can guard a
//! scalar optional field). Absent optional scalar fields are not declared, so referencing one
//! is an evaluation error. Absent object fields (tool_args, metadata, identity_binding,
//! auth_context, delegation_context) are bound to an empty map, so the guard DESIGN.md
//! recommends, `has(tool_args.x) && ...`, is simply false for them, while an unguarded
//! `tool_args.x` is still an evaluation error (no such key).
//!
//! Values are built straight into `cel` values that borrow the request's strings (no copies),
//! and only for the variables some rule of the snapshot references ([`VarSet`], computed at
//! load time).

use super::EnforcementRequest;
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::Context;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// JSON nested deeper than this becomes `null` in CEL (serde_json refuses deeper input anyway).
const MAX_DEPTH: usize = 128;

/// A CEL variable of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Var {
    AgentId,
    TenantId,
    ToolName,
    SessionId,
    UserId,
    ApprovedScope,
    SessionToolCalls,
    EnforcementMode,
    ToolArgs,
    Environment,
    SessionIntent,
    Purpose,
    DataClassification,
    EndpointId,
    FleetId,
    EnforcementTraceId,
    IdentityBinding,
    AuthContext,
    DelegationContext,
    ModelName,
    ModelProvider,
    TokenCount,
    EstimatedCostUsd,
    Metadata,
    Request,
}

impl Var {
    /// Every variable; the request fields in SPEC.md order, then `request`.
    pub const ALL: [Var; 25] = [
        Var::AgentId,
        Var::TenantId,
        Var::ToolName,
        Var::SessionId,
        Var::UserId,
        Var::ApprovedScope,
        Var::SessionToolCalls,
        Var::EnforcementMode,
        Var::ToolArgs,
        Var::Environment,
        Var::SessionIntent,
        Var::Purpose,
        Var::DataClassification,
        Var::EndpointId,
        Var::FleetId,
        Var::EnforcementTraceId,
        Var::IdentityBinding,
        Var::AuthContext,
        Var::DelegationContext,
        Var::ModelName,
        Var::ModelProvider,
        Var::TokenCount,
        Var::EstimatedCostUsd,
        Var::Metadata,
        Var::Request,
    ];

    /// The CEL name (the request's snake_case field name).
    pub fn name(self) -> &'static str {
        match self {
            Var::AgentId => "agent_id",
            Var::TenantId => "tenant_id",
            Var::ToolName => "tool_name",
            Var::SessionId => "session_id",
            Var::UserId => "user_id",
            Var::ApprovedScope => "approved_scope",
            Var::SessionToolCalls => "session_tool_calls",
            Var::EnforcementMode => "enforcement_mode",
            Var::ToolArgs => "tool_args",
            Var::Environment => "environment",
            Var::SessionIntent => "session_intent",
            Var::Purpose => "purpose",
            Var::DataClassification => "data_classification",
            Var::EndpointId => "endpoint_id",
            Var::FleetId => "fleet_id",
            Var::EnforcementTraceId => "enforcement_trace_id",
            Var::IdentityBinding => "identity_binding",
            Var::AuthContext => "auth_context",
            Var::DelegationContext => "delegation_context",
            Var::ModelName => "model_name",
            Var::ModelProvider => "model_provider",
            Var::TokenCount => "token_count",
            Var::EstimatedCostUsd => "estimated_cost_usd",
            Var::Metadata => "metadata",
            Var::Request => "request",
        }
    }

    /// The variable called `name`, if any.
    pub fn from_name(name: &str) -> Option<Var> {
        Var::ALL.into_iter().find(|v| v.name() == name)
    }

    /// True for JSON-object request fields (bound to an empty map when absent).
    pub fn object(self) -> bool {
        matches!(
            self,
            Var::ToolArgs
                | Var::Metadata
                | Var::IdentityBinding
                | Var::AuthContext
                | Var::DelegationContext
        )
    }

    /// True for optional request fields that may be undeclared in a decision (`environment`
    /// is optional in the request but always declared: it defaults to `prod`).
    pub fn optional(self) -> bool {
        !matches!(
            self,
            Var::Environment
                | Var::AgentId
                | Var::TenantId
                | Var::ToolName
                | Var::SessionId
                | Var::UserId
                | Var::ApprovedScope
                | Var::SessionToolCalls
                | Var::EnforcementMode
                | Var::Request
        )
    }

    /// The variable's bit in a [`VarSet`] (the enum has 25 variants, so it fits a u32).
    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of [`Var`]s (a bit mask).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct VarSet(u32);

impl VarSet {
    /// Adds `var`.
    pub fn insert(&mut self, var: Var) {
        self.0 |= var.bit();
    }

    /// True when `var` is in the set.
    pub fn contains(self, var: Var) -> bool {
        self.0 & var.bit() != 0
    }

    /// Both sets.
    pub fn union(self, other: VarSet) -> VarSet {
        VarSet(self.0 | other.0)
    }
}

/// Declares the variables of `vars` in `scope`: those `req` carries, plus an empty map for
/// each absent object field.
pub(crate) fn bind<'r>(scope: &mut Context<'_, 'r>, req: &'r EnforcementRequest, vars: VarSet) {
    for var in Var::ALL {
        if !vars.contains(var) {
            continue;
        }
        match value_of(var, req) {
            Some(value) => scope.add_variable_as_val(var.name(), value),
            None if var.object() => {
                let empty: HashMap<CelMapKey<'r>, Box<dyn Val + 'r>> = HashMap::new();
                scope.add_variable_as_val(var.name(), Box::new(CelMap::from(empty)));
            }
            None => {}
        }
    }
}

/// The CEL value of `var`, or None when the request does not carry it.
fn value_of<'r>(var: Var, req: &'r EnforcementRequest) -> Option<Box<dyn Val + 'r>> {
    let opt_str = |s: &'r Option<String>| s.as_deref().map(string);
    let opt_map = |m: &'r Option<Map<String, Value>>| m.as_ref().map(|m| map(m, 0));
    match var {
        Var::AgentId => Some(string(&req.agent_id)),
        Var::TenantId => Some(string(&req.tenant_id)),
        Var::ToolName => Some(string(&req.tool_name)),
        Var::SessionId => Some(string(&req.session_id)),
        Var::UserId => Some(string(&req.user_id)),
        Var::ApprovedScope => Some(list(&req.approved_scope)),
        Var::SessionToolCalls => Some(list(&req.session_tool_calls)),
        Var::EnforcementMode => Some(string(req.enforcement_mode.as_str())),
        Var::ToolArgs => opt_map(&req.tool_args),
        Var::Environment => Some(string(req.environment())), // SPEC.md: default `prod`
        Var::SessionIntent => opt_str(&req.session_intent),
        Var::Purpose => opt_str(&req.purpose),
        Var::DataClassification => opt_str(&req.data_classification),
        Var::EndpointId => opt_str(&req.endpoint_id),
        Var::FleetId => opt_str(&req.fleet_id),
        Var::EnforcementTraceId => opt_str(&req.enforcement_trace_id),
        Var::IdentityBinding => opt_map(&req.identity_binding),
        Var::AuthContext => opt_map(&req.auth_context),
        Var::DelegationContext => opt_map(&req.delegation_context),
        Var::ModelName => opt_str(&req.model_name),
        Var::ModelProvider => opt_str(&req.model_provider),
        Var::TokenCount => req.token_count.map(double),
        Var::EstimatedCostUsd => req.estimated_cost_usd.map(double),
        Var::Metadata => opt_map(&req.metadata),
        Var::Request => Some(request_map(req)),
    }
}

/// `request`: every field the request carries, by name.
fn request_map<'r>(req: &'r EnforcementRequest) -> Box<dyn Val + 'r> {
    let mut fields: HashMap<CelMapKey<'r>, Box<dyn Val + 'r>> = HashMap::new();
    for var in Var::ALL.into_iter().filter(|v| *v != Var::Request) {
        if let Some(value) = value_of(var, req) {
            fields.insert(CelMapKey::from(var.name()), value);
        }
    }
    Box::new(CelMap::from(fields))
}

fn string(s: &str) -> Box<dyn Val + '_> {
    Box::new(CelString::from(s))
}

fn double<'r>(v: f64) -> Box<dyn Val + 'r> {
    Box::new(CelDouble::from(v))
}

fn list(items: &[String]) -> Box<dyn Val + '_> {
    Box::new(CelList::from(
        items.iter().map(|s| string(s)).collect::<Vec<_>>(),
    ))
}

fn map(m: &Map<String, Value>, depth: usize) -> Box<dyn Val + '_> {
    let entries: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = m
        .iter()
        .map(|(k, v)| (CelMapKey::from(k.as_str()), json(v, depth + 1)))
        .collect();
    Box::new(CelMap::from(entries))
}

/// A JSON value as CEL: integers as int (or uint above i64), other numbers as double.
fn json(v: &Value, depth: usize) -> Box<dyn Val + '_> {
    if depth > MAX_DEPTH {
        return Box::new(CelNull);
    }
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(s) => string(s),
        Value::Array(items) => Box::new(CelList::from(
            items.iter().map(|i| json(i, depth + 1)).collect::<Vec<_>>(),
        )),
        Value::Object(m) => map(m, depth),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;
    use serde_json::json;

    fn eval(expr: &str, req: &EnforcementRequest) -> Result<cel::Value, String> {
        let env = std::sync::Arc::new(cel::Env::stdlib());
        let program = env.compile(expr).map_err(|e| e.to_string())?;
        let root = Context::with_env(env);
        let mut all = VarSet::default();
        Var::ALL.into_iter().for_each(|v| all.insert(v));
        let mut scope = root.new_inner_scope();
        bind(&mut scope, req, all);
        program.execute(&scope).map_err(|e| e.to_string())
    }

    #[test]
    fn request_fields_are_variables() {
        let mut req = request("payments.charge");
        req.tool_args =
            json!({"amount": 1500, "cur": "USD", "items": [{"q": 2.5}], "big": u64::MAX})
                .as_object()
                .cloned();
        req.token_count = Some(1200.0);
        let cases = [
            "tool_name == 'payments.charge'",
            "tool_args.amount > 1000 && tool_args.cur == 'USD'",
            "tool_args.items[0].q == 2.5",
            "tool_args.big > 0u",
            "token_count > 1000",
            "enforcement_mode == 'block'",
            "'payments.charge' in approved_scope",
            "has(request.tool_args) && !has(request.purpose)",
            "size(session_tool_calls) == 0",
        ];
        for case in cases {
            assert_eq!(eval(case, &req), Ok(cel::Value::Bool(true)), "{case}");
        }
    }

    #[test]
    fn absent_fields_error_unless_guarded() {
        let req = request("crm.lookup");
        let cases = [
            ("purpose == 'x'", Err("Undeclared reference to 'purpose'")),
            ("tool_args.q == 1", Err("No such key: q")),
            ("has(tool_args.q)", Ok(false)),
            ("has(metadata.k) && metadata.k == 1", Ok(false)),
            ("has(request.purpose) && purpose == 'x'", Ok(false)),
            ("has(request.tool_args)", Ok(false)),
        ];
        for (case, want) in cases {
            let got = eval(case, &req);
            match want {
                Ok(b) => assert_eq!(got, Ok(cel::Value::Bool(b)), "{case}"),
                Err(text) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(text)),
                    "{case}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn var_metadata_is_consistent() {
        let optional: Vec<&str> = Var::ALL
            .into_iter()
            .filter(|v| v.optional())
            .map(Var::name)
            .collect();
        assert_eq!(
            optional.len(),
            15,
            "environment defaults to prod, so it is not optional in CEL"
        );
        assert!(optional.contains(&"tool_args") && optional.contains(&"metadata"));
        assert!(!optional.contains(&"tool_name") && !optional.contains(&"request"));
        assert_eq!(Var::from_name("fleet_id"), Some(Var::FleetId));
        assert_eq!(Var::from_name("nope"), None);
        let mut set = VarSet::default();
        set.insert(Var::Request);
        assert!(set.contains(Var::Request) && !set.contains(Var::ToolName));
    }
}
