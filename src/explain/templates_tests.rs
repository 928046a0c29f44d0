//! Unit tests of template loading, checking, selection and section splitting, on template
//! directories written into a tempdir.

use super::*;
use crate::explain::ExplainRequest;
use chrono::{DateTime, Utc};

/// A minimal valid template; `extra` is appended to the what_happened section.
fn minimal(extra: &str) -> String {
    format!(
        "{{# comment before the first section is fine #}}\n\
         [what_happened]\nhappened {{{{ decision }}}} {extra}\n\
         [why_it_was_blocked]\n  why\n\
         [what_to_do_next]\nnext\n\
         [business_impact]\nimpact\n\
         [regulatory_context]\n{{% for r in regimes %}}{{{{ r.name }}}} {{% endfor %}}\n"
    )
}

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn load_err(files: &[(&str, &str)]) -> String {
    let dir = dir_with(files);
    match Templates::load(dir.path(), &Organization::default()) {
        Err(ExplainError::Template(msg)) => msg,
        Err(other) => panic!("expected a template error, got {other}"),
        Ok(_) => panic!("expected a template error, the templates loaded"),
    }
}

fn render(t: &Templates, c: Option<ActionClassification>, req: &ExplainRequest) -> Sections {
    let ctx =
        TemplateContext::new(req, &Organization::default(), DateTime::<Utc>::UNIX_EPOCH).unwrap();
    t.render(c, &ctx).unwrap()
}

#[test]
fn marker_lines_become_sentinels_and_other_brackets_stay() {
    let out = mark_sections("a\n  [what_happened]  \n[1, 2]\n[Note: x]\nb").unwrap();
    assert_eq!(out, "a\n\u{1e}what_happened\u{1e}\n[1, 2]\n[Note: x]\nb");
    let err = mark_sections("x\n[what_hapened]\n").unwrap_err();
    assert!(
        err.starts_with("line 2: unknown section marker [what_hapened]"),
        "{err}"
    );
}

#[test]
fn split_collapses_whitespace_and_requires_each_section_once() {
    let all: String = SECTION_NAMES
        .iter()
        .map(|n| format!("\u{1e}{n}\u{1e}\n  {n}\n\n text  "))
        .collect();
    let s = split_sections(&format!("  \n{all}")).unwrap();
    assert_eq!(s.what_happened, "what_happened text");
    assert_eq!(s.regulatory_context, "regulatory_context text");

    let missing = all.replace("\u{1e}business_impact\u{1e}", "");
    assert_eq!(
        split_sections(&missing).unwrap_err(),
        "section [business_impact] is missing"
    );
    let twice = format!("{all}\u{1e}what_happened\u{1e} again");
    assert_eq!(
        split_sections(&twice).unwrap_err(),
        "section [what_happened] appears twice"
    );
    let preamble = format!("stray {all}");
    assert_eq!(
        split_sections(&preamble).unwrap_err(),
        "text before the first section marker"
    );
}

#[test]
fn filters_format_lists_and_capitals() {
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(human_list(v(&[]), None), "");
    assert_eq!(human_list(v(&["a"]), Some(true)), "\"a\"");
    assert_eq!(human_list(v(&["a", "b", "c"]), None), "a, b and c");
    assert_eq!(ucfirst("your team".into()), "Your team");
    assert_eq!(ucfirst(String::new()), "");
}

#[test]
fn missing_default_template_is_an_error_naming_it() {
    let msg = load_err(&[("routine.j2", &minimal(""))]);
    assert!(
        msg.contains("default.j2") && msg.contains("missing"),
        "{msg}"
    );
}

#[test]
fn syntax_errors_name_the_file() {
    let broken = minimal("{% if decision %}");
    let msg = load_err(&[("default.j2", &minimal("")), ("code_change.j2", &broken)]);
    assert!(msg.contains("code_change.j2"), "{msg}");
    assert!(msg.to_lowercase().contains("syntax"), "{msg}");
}

#[test]
fn unknown_file_names_and_markers_are_refused() {
    let msg = load_err(&[
        ("default.j2", &minimal("")),
        ("code_changes.j2", &minimal("")),
    ]);
    assert!(
        msg.contains("code_changes.j2") && msg.contains("unknown template name"),
        "{msg}"
    );
    let typo = minimal("").replace("[business_impact]", "[busines_impact]");
    let msg = load_err(&[("default.j2", &typo)]);
    assert!(
        msg.contains("default.j2") && msg.contains("[busines_impact]"),
        "{msg}"
    );
}

#[test]
fn load_time_checks_catch_render_errors_and_empty_sections() {
    let undefined = load_err(&[("default.j2", &minimal("{{ no_such_variable }}"))]);
    assert!(
        undefined.contains("default.j2") && undefined.contains("undefined"),
        "{undefined}"
    );
    let prints_none = load_err(&[("default.j2", &minimal("{{ agent_id }}"))]);
    assert!(
        prints_none.contains("missing value (none)"),
        "{prints_none}"
    );
    let missing = load_err(&[(
        "default.j2",
        &minimal("").replace("[what_to_do_next]\nnext\n", ""),
    )]);
    assert!(
        missing.contains("section [what_to_do_next] is missing"),
        "{missing}"
    );
    let empty_hold = minimal("").replace("  why", "{% if decision != 'STEP_UP' %}why{% endif %}");
    let msg = load_err(&[("default.j2", &empty_hold)]);
    assert!(
        msg.contains("decision STEP_UP") && msg.contains("[why_it_was_blocked] rendered empty"),
        "{msg}"
    );
}

#[test]
fn classification_files_are_selected_and_the_rest_fall_back() {
    let own = minimal("").replace("  why", "routine why");
    let dir = dir_with(&[
        ("default.j2", &minimal("")),
        ("routine.j2", &own),
        ("_partial.j2", "{% macro m() %}x{% endmacro %}"),
        ("README.md", "not a template"),
    ]);
    let t = Templates::load(dir.path(), &Organization::default()).unwrap();
    assert_eq!(
        t.name_for(Some(ActionClassification::Routine)),
        "routine.j2"
    );
    assert_eq!(
        t.name_for(Some(ActionClassification::CodeChange)),
        "default.j2"
    );
    assert_eq!(t.name_for(None), "default.j2");
    let req = ExplainRequest::default();
    assert_eq!(
        render(&t, Some(ActionClassification::Routine), &req).why_it_was_blocked,
        "routine why"
    );
    assert_eq!(
        render(&t, Some(ActionClassification::CodeChange), &req).why_it_was_blocked,
        "why"
    );
}

#[test]
fn request_values_are_data_not_template_source_and_cannot_forge_sections() {
    let alone = minimal("\n{% if tool_name %}\n{{ tool_name }}\n{% endif %}\n");
    let dir = dir_with(&[("default.j2", &alone)]);
    let t = Templates::load(dir.path(), &Organization::default()).unwrap();
    for value in [
        "[why_it_was_blocked]",
        "{{ 7 * 7 }} {% raw %}",
        "<b>&amp;</b>",
    ] {
        let req = ExplainRequest {
            tool_name: Some(value.into()),
            ..Default::default()
        };
        let s = render(&t, None, &req);
        assert_eq!(s.what_happened, format!("happened BLOCK {value}"));
        assert_eq!(s.why_it_was_blocked, "why");
    }
}
