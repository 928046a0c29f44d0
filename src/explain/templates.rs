//! The explanation templates (`policy/explanations/*.j2`): loading them once into a minijinja
//! environment, checking them at load time, choosing one per action_classification, rendering
//! once and splitting the output into the five explanation sections.
//!
//! File names: `default.j2` (required), `<action_classification>.j2` (optional, one per value of
//! [`ActionClassification`]), and `_<name>.j2` partials (imported or included, never selected).
//! Any other `.j2` name is a load error, so a misspelt file cannot be silently ignored.
//! Other files in the directory are ignored.

use super::context::TemplateContext;
use super::request::ExplainDecision;
use super::{ExplainError, Organization};
use crate::vocab::ActionClassification;
use minijinja::{
    AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior, Value,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The section names, in output order. A template line holding only `[name]` starts a section.
pub const SECTION_NAMES: [&str; 5] = [
    "what_happened",
    "why_it_was_blocked",
    "what_to_do_next",
    "business_impact",
    "regulatory_context",
];

/// What a marker line becomes in the loaded source. Request values cannot contain control
/// characters (validated), so rendered request text can never forge a section boundary.
const SENTINEL: char = '\u{1e}';

/// Name of the required fallback template.
pub const DEFAULT_TEMPLATE: &str = "default.j2";

/// The rendered sections, each trimmed with inner whitespace collapsed to single spaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sections {
    /// `[what_happened]`.
    pub what_happened: String,
    /// `[why_it_was_blocked]`.
    pub why_it_was_blocked: String,
    /// `[what_to_do_next]`.
    pub what_to_do_next: String,
    /// `[business_impact]`.
    pub business_impact: String,
    /// `[regulatory_context]` (used only when regimes apply).
    pub regulatory_context: String,
}

/// The loaded, checked templates.
pub struct Templates {
    env: Environment<'static>,
    /// Classifications that have their own file; the rest use `default.j2`.
    own_file: Vec<ActionClassification>,
}

impl Templates {
    /// Loads every `.j2` file of `dir` and checks each selectable template by rendering it for
    /// every decision with a full and an empty sample context.
    ///
    /// Errors ([`ExplainError::Template`], naming the file): unreadable directory or file, an
    /// unknown file name or section marker, a syntax error, a missing `default.j2`, or a
    /// template that fails to render or leaves a section out or empty.
    pub fn load(dir: &Path, org: &Organization) -> Result<Templates, ExplainError> {
        let mut env = new_environment();
        let mut own_file = Vec::new();
        let mut has_default = false;
        for path in template_files(dir)? {
            let name = file_name(&path);
            match kind_of(&name).map_err(|e| template_err(&path, e))? {
                Kind::Default => has_default = true,
                Kind::Classified(c) => own_file.push(c),
                Kind::Partial => {}
            }
            let source = std::fs::read_to_string(&path).map_err(|e| template_err(&path, e))?;
            let source = mark_sections(&source).map_err(|e| template_err(&path, e))?;
            env.add_template_owned(name, source)
                .map_err(|e| template_err(&path, e))?;
        }
        if !has_default {
            let path = dir.join(DEFAULT_TEMPLATE);
            return Err(template_err(
                &path,
                "missing: the default template is required",
            ));
        }
        let templates = Templates { env, own_file };
        templates.check(dir, org)?;
        Ok(templates)
    }

    /// The template file used for `classification`: its own file when present, else `default.j2`.
    pub fn name_for(&self, classification: Option<ActionClassification>) -> String {
        match classification {
            Some(c) if self.own_file.contains(&c) => format!("{}.j2", c.as_str()),
            _ => DEFAULT_TEMPLATE.to_string(),
        }
    }

    /// Renders the template chosen for `classification` once and splits it into sections.
    ///
    /// Errors: [`ExplainError::Template`] naming the template (render error, missing section).
    pub fn render(
        &self,
        classification: Option<ActionClassification>,
        ctx: &TemplateContext,
    ) -> Result<Sections, ExplainError> {
        let name = self.name_for(classification);
        self.render_named(&name, ctx)
            .map_err(|e| ExplainError::Template(format!("{name}: {e}")))
    }

    fn render_named(&self, name: &str, ctx: &TemplateContext) -> Result<Sections, String> {
        let rendered = self
            .env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .map_err(|e| e.to_string())?;
        split_sections(&rendered)
    }

    /// Renders every selectable template for every decision, with full and empty samples, under
    /// the configured organization and with and without a name and dashboard (both branches of
    /// the organization wording).
    fn check(&self, dir: &Path, org: &Organization) -> Result<(), ExplainError> {
        let sample_org = Organization {
            name: Some("Sample Org".into()),
            dashboard_url: Some("https://dashboard.invalid".into()),
        };
        let orgs = [org.clone(), sample_org, Organization::default()];
        let selectable = std::iter::once(None).chain(self.own_file.iter().copied().map(Some));
        for classification in selectable {
            let name = self.name_for(classification);
            for (org, decision, full) in sample_matrix(&orgs) {
                let ctx = TemplateContext::sample(org, decision, full);
                self.render_named(&name, &ctx)
                    .and_then(|sections| check_filled(&sections, full))
                    .map_err(|e| {
                        let e = format!("decision {}: {e}", decision.as_str());
                        template_err(&dir.join(&name), e)
                    })?;
            }
        }
        Ok(())
    }
}

/// Every (organization, decision, full sample?) combination the load-time check renders.
fn sample_matrix(
    orgs: &[Organization],
) -> impl Iterator<Item = (&Organization, ExplainDecision, bool)> {
    orgs.iter().flat_map(|org| {
        ExplainDecision::ALL
            .into_iter()
            .flat_map(move |d| [true, false].map(|full| (org, d, full)))
    })
}

enum Kind {
    Default,
    Classified(ActionClassification),
    Partial,
}

fn kind_of(name: &str) -> Result<Kind, String> {
    let stem = name.strip_suffix(".j2").unwrap_or(name);
    if stem == "default" {
        return Ok(Kind::Default);
    }
    if stem.starts_with('_') {
        return Ok(Kind::Partial);
    }
    stem.parse::<ActionClassification>()
        .map(Kind::Classified)
        .map_err(|_| {
            format!(
                "unknown template name; expected default.j2, _<partial>.j2 or <classification>.j2 \
                 with a classification among: {}",
                ActionClassification::allowed()
            )
        })
}

/// The `.j2` files directly in `dir`, sorted by name.
fn template_files(dir: &Path) -> Result<Vec<PathBuf>, ExplainError> {
    let entries = std::fs::read_dir(dir).map_err(|e| template_err(dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| template_err(dir, e))?.path();
        if path.is_file() && path.extension().is_some_and(|x| x == "j2") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn template_err(path: &Path, e: impl std::fmt::Display) -> ExplainError {
    ExplainError::Template(format!("{}: {e}", path.display()))
}

/// The environment: no auto-escaping, strict undefined variables, printing a missing value
/// (`none`) is an error, plus the `ucfirst` and `human_list` filters. Block tags keep the
/// whitespace around them (no trim/lstrip): every line break becomes one space after the
/// collapse, and `{%-` / `-%}` glue text where no space is wanted.
fn new_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_formatter(refuse_none);
    env.add_filter("ucfirst", ucfirst);
    env.add_filter("human_list", human_list);
    env
}

fn refuse_none(out: &mut Output, state: &State, value: &Value) -> Result<(), Error> {
    if value.is_none() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "a missing value (none) was printed; guard it with {% if ... %}",
        ));
    }
    minijinja::escape_formatter(out, state, value)
}

/// `"shell.exec" | ucfirst` → upper-cases the first character only.
fn ucfirst(s: String) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => s,
    }
}

/// `["a", "b", "c"] | human_list` → `a, b and c`; `| human_list(true)` → `"a", "b" and "c"`.
fn human_list(items: Vec<String>, quote: Option<bool>) -> String {
    let items: Vec<String> = match quote {
        Some(true) => items.iter().map(|i| format!("\"{i}\"")).collect(),
        _ => items,
    };
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Replaces each marker line (`[what_happened]`, surrounding spaces allowed) by a sentinel.
/// A line shaped like a marker with an unknown name is an error (a typo would lose a section).
fn mark_sections(source: &str) -> Result<String, String> {
    let mut out = String::with_capacity(source.len());
    for (n, line) in source.split_inclusive('\n').enumerate() {
        let t = line.trim();
        let inner = t.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        match inner {
            Some(name) if SECTION_NAMES.contains(&name) => {
                out.push(SENTINEL);
                out.push_str(name);
                out.push(SENTINEL);
                out.push('\n');
            }
            Some(name)
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') =>
            {
                return Err(format!(
                    "line {}: unknown section marker [{name}]; sections are {}",
                    n + 1,
                    SECTION_NAMES.join(", ")
                ));
            }
            _ => out.push_str(line),
        }
    }
    Ok(out)
}

/// Splits rendered output on the sentinels; every section exactly once, nothing before the first.
fn split_sections(rendered: &str) -> Result<Sections, String> {
    let mut parts = rendered.split(SENTINEL);
    if parts.next().is_some_and(|pre| !pre.trim().is_empty()) {
        return Err("text before the first section marker".into());
    }
    let mut found: BTreeMap<&str, String> = BTreeMap::new();
    while let Some(name) = parts.next() {
        let body = parts.next().ok_or("unterminated section marker")?;
        let collapsed = body.split_whitespace().collect::<Vec<_>>().join(" ");
        if found.insert(name, collapsed).is_some() {
            return Err(format!("section [{name}] appears twice"));
        }
    }
    let mut take = |name: &str| {
        found
            .remove(name)
            .ok_or_else(|| format!("section [{name}] is missing"))
    };
    Ok(Sections {
        what_happened: take("what_happened")?,
        why_it_was_blocked: take("why_it_was_blocked")?,
        what_to_do_next: take("what_to_do_next")?,
        business_impact: take("business_impact")?,
        regulatory_context: take("regulatory_context")?,
    })
}

/// The four always-shown sections must be non-empty; `regulatory_context` too when the sample
/// names regimes (`full`).
fn check_filled(s: &Sections, full: bool) -> Result<(), String> {
    let required = [
        ("what_happened", &s.what_happened),
        ("why_it_was_blocked", &s.why_it_was_blocked),
        ("what_to_do_next", &s.what_to_do_next),
        ("business_impact", &s.business_impact),
    ];
    for (name, text) in required {
        if text.is_empty() {
            return Err(format!("section [{name}] rendered empty"));
        }
    }
    if full && s.regulatory_context.is_empty() {
        return Err("section [regulatory_context] rendered empty although regimes apply".into());
    }
    Ok(())
}

#[cfg(test)]
#[path = "templates_tests.rs"]
mod tests;
