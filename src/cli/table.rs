//! Table output of the operator CLI (comfy-table): list tables with one row per item, and
//! two-column field/value tables for one resource. Cells come from the control plane's JSON.

use comfy_table::{presets, ContentArrangement, Table};
use serde_json::Value;

/// A list table with `header`; it wraps long cells to the terminal's width (not when piped).
pub fn list(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    t
}

/// A field/value table for one resource. It never wraps, so values (an API key) copy whole.
pub fn pairs<S: AsRef<str>>(rows: &[(&str, S)]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled);
    for (k, v) in rows {
        t.add_row([k.to_string(), v.as_ref().to_string()]);
    }
    t
}

/// Prints a table on stdout.
pub fn print(table: &Table) {
    super::print_out(&table.to_string());
}

/// A JSON value as a cell: strings as they are, `null` or absent as `-`, whole floats without
/// `.0`, arrays joined with `, `, timestamps to the second.
pub fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => time(s),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Array(items)) if items.is_empty() => "-".into(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| text(Some(i)))
            .collect::<Vec<_>>()
            .join(", "),
        Some(other) => other.to_string(),
    }
}

/// `text(v[key])`.
pub fn field(v: &Value, key: &str) -> String {
    text(v.get(key))
}

/// `2026-01-02T03:04:05.678Z` → `2026-01-02T03:04:05Z`; anything else unchanged.
fn time(s: &str) -> String {
    let b = s.as_bytes();
    let looks_like_time = b.len() > 20
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && s.ends_with('Z')
        && s[20..s.len() - 1].bytes().all(|c| c.is_ascii_digit());
    if looks_like_time {
        format!("{}Z", &s[..19])
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells() {
        assert_eq!(text(None), "-");
        assert_eq!(text(Some(&json!(null))), "-");
        assert_eq!(text(Some(&json!(95.0))), "95");
        assert_eq!(text(Some(&json!(92.5))), "92.5");
        assert_eq!(text(Some(&json!(3))), "3");
        assert_eq!(text(Some(&json!(["a", "b"]))), "a, b");
        assert_eq!(text(Some(&json!([]))), "-");
        assert_eq!(text(Some(&json!(false))), "false");
        assert_eq!(
            text(Some(&json!("2026-01-02T03:04:05.678Z"))),
            "2026-01-02T03:04:05Z"
        );
        assert_eq!(text(Some(&json!("plain text"))), "plain text");
        assert_eq!(
            text(Some(&json!("2026-01-02T03:04:05Z"))),
            "2026-01-02T03:04:05Z"
        );
    }
}
