//! The CEL environment rules compile against and the root context they run in, both built
//! once per snapshot (DESIGN.md: a fresh `Context::default()` per decision costs ~25 µs; an
//! inner scope of a prebuilt root costs nothing measurable).
//!
//! Functions: the CEL standard library, the `strings` extension (`lowerAscii`, `split`,
//! `indexOf`, `replace`, ...), and toolgate's `re.matches(text, pattern)`: the same test as
//! the standard `text.matches(pattern)` (an unanchored search, regex-crate syntax), but a
//! literal pattern is compiled once when the pack loads instead of on every evaluation (the
//! standard function costs ~50–100 µs per call for that compile).

use super::PolicyError;
use cel::{Context, Env, ExecutionError};
use regex::Regex;
use std::collections::HashMap;
use std::sync::Arc;

/// Name of the precompiled-regex function.
pub(crate) const RE_MATCHES: &str = "re.matches";

/// The environment: standard library plus the strings extension.
pub(crate) fn environment() -> Result<Arc<Env>, PolicyError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .map_err(|e| PolicyError::Invalid {
            path: "<cel environment>".into(),
            message: e.to_string(),
        })?;
    Ok(Arc::new(env))
}

/// The root context: `env` plus `re.matches` with `patterns` (already validated) compiled.
pub(crate) fn root_context(
    env: Arc<Env>,
    patterns: &[String],
) -> Result<Context<'static, 'static>, PolicyError> {
    let mut cache: HashMap<String, Regex> = HashMap::new();
    for p in patterns {
        let re = Regex::new(p).map_err(|e| invalid(e.to_string()))?;
        cache.insert(p.clone(), re);
    }
    let cache = Arc::new(cache);
    let mut root = Context::with_env(env);
    root.add_function(
        RE_MATCHES,
        move |text: Arc<String>, pattern: Arc<String>| -> Result<bool, ExecutionError> {
            match cache.get(pattern.as_str()) {
                Some(re) => Ok(re.is_match(&text)),
                // A pattern built at run time: compiled per call, like the standard `matches`.
                None => Regex::new(&pattern)
                    .map(|re| re.is_match(&text))
                    .map_err(|e| ExecutionError::function_error(RE_MATCHES, e)),
            }
        },
    )
    .map_err(|e| invalid(e.to_string()))?;
    Ok(root)
}

fn invalid(message: String) -> PolicyError {
    PolicyError::Invalid {
        path: "<cel environment>".into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_matches_uses_precompiled_and_runtime_patterns() {
        let env = environment().unwrap();
        let root = root_context(env.clone(), &[r"\brm\s+-rf\b".to_string()]).unwrap();
        let cases = [
            (r#"re.matches("sudo rm -rf /", r"\brm\s+-rf\b")"#, Ok(true)),
            (r#"re.matches("ls", r"\brm\s+-rf\b")"#, Ok(false)),
            (r#"re.matches("abc", "^a" + "b")"#, Ok(true)),
            (r#"re.matches("abc", "(")"#, Err("re.matches")),
            (r#"re.matches(1, "a")"#, Err("")),
            (r#""TacoCat".lowerAscii() == "tacocat""#, Ok(true)),
        ];
        for (expr, want) in cases {
            let program = env.compile(expr).unwrap();
            let got = program.execute(&root.new_inner_scope());
            match want {
                Ok(b) => assert_eq!(got, Ok(cel::Value::Bool(b)), "{expr}"),
                Err(text) => assert!(
                    got.as_ref().is_err_and(|e| e.to_string().contains(text)),
                    "{expr}: {got:?}"
                ),
            }
        }
    }
}
