//! REST: arguments from path, body and query with their precedence and conflicts, and
//! writing modified arguments back.

use super::super::*;
use super::classify_req;
use serde_json::json;

fn rest(method: Method, target: &str, uri: &str, body: Option<&Value>) -> RestCall {
    match classify_req(method, target, uri, body) {
        Classified::Rest(r) => r,
        other => panic!("{uri}: not REST: {other:?}"),
    }
}

#[test]
fn arguments_merge_path_body_and_query() {
    let merge = "/repos/acme/app/pulls/7/merge";
    let cases = [
        (
            merge.to_string(),
            None,
            json!({"owner": "acme", "repo": "app", "number": "7"}),
            vec![],
        ),
        (
            format!("{merge}?merge_method=squash&owner=evil&a+b=c%20d&t=1&t=2&flag"),
            Some(json!({"commit_title": "x", "repo": "other", "merge_method": "rebase"})),
            json!({"owner": "acme", "repo": "app", "number": "7", "merge_method": "rebase",
                   "commit_title": "x", "a b": "c d", "t": ["1", "2"], "flag": ""}),
            vec!["merge_method", "owner", "repo"],
        ),
        // A body that is not an object adds nothing.
        (
            merge.to_string(),
            Some(json!(["x"])),
            json!({"owner": "acme", "repo": "app", "number": "7"}),
            vec![],
        ),
    ];
    for (uri, body, want, conflicts) in cases {
        let r = rest(Method::PUT, "api.github.com", &uri, body.as_ref());
        assert_eq!(r.route_id, "merge");
        assert_eq!(r.call.tool_name, "git.merge");
        assert_eq!(Value::Object(r.call.tool_args.clone()), want, "{uri}");
        assert_eq!(r.conflicts(), conflicts.as_slice(), "{uri}");
    }
    let r = rest(
        Method::PUT,
        "api.github.com",
        &format!("{merge}?q=1"),
        Some(&json!({"b": 1})),
    );
    assert_eq!(r.source("owner"), Some(ArgSource::Path));
    assert_eq!(r.source("b"), Some(ArgSource::Body));
    assert_eq!(r.source("q"), Some(ArgSource::Query));
    assert_eq!(r.source("zzz"), None);
}

#[test]
fn modified_arguments_are_written_back_where_they_came_from() {
    let body = json!({"amount": 100, "description": "card 4111 1111 1111 1111", "currency": "usd"});
    let query = "note=call%20a%40b.c&expand[]=x&note=second&keep=1";
    let r = rest(
        Method::POST,
        "api.stripe.com",
        &format!("/v1/transfers?{query}"),
        Some(&body),
    );
    assert_eq!(r.call.tool_args["note"], json!(["call a@b.c", "second"]));
    let mut args = r.call.tool_args.clone();
    args.insert("description".into(), json!("card [REDACTED:credit_card]"));
    args.insert("note".into(), json!(["call [REDACTED:email]", "second"]));
    args.insert("added".into(), json!("ignored"));
    args.remove("currency");
    let mut written = body.clone();
    let new_query = rewrite_rest(Some(&mut written), Some(query), &r, &args);
    assert_eq!(
        written,
        json!({"amount": 100, "description": "card [REDACTED:credit_card]", "currency": "usd"})
    );
    assert_eq!(
        new_query.as_deref(),
        Some("note=call%20%5BREDACTED%3Aemail%5D&note=second&expand[]=x&keep=1")
    );

    // Nothing from the query changed: no new query; the body is still written.
    let mut only_body = r.call.tool_args.clone();
    only_body.insert("amount".into(), json!(5));
    let mut written = body.clone();
    assert_eq!(
        rewrite_rest(Some(&mut written), Some(query), &r, &only_body),
        None
    );
    assert_eq!(written["amount"], json!(5));

    // Scalars and single values.
    let r = rest(
        Method::POST,
        "api.stripe.com",
        "/v1/transfers/tr_1?a=1&b=x&c=3",
        None,
    );
    let mut args = r.call.tool_args.clone();
    args.insert("a".into(), json!(2.5));
    args.insert("b".into(), json!(["y z", true]));
    args.insert("c".into(), Value::Null);
    assert_eq!(
        rewrite_rest(None, Some("a=1&b=x&c=3"), &r, &args).as_deref(),
        Some("a=2.5&b=y%20z&b=true&c=")
    );
}

#[test]
fn path_captures_are_not_rewritten() {
    let r = rest(
        Method::PUT,
        "api.github.com",
        "/repos/acme/app/pulls/7/merge",
        Some(&json!({"sha": "abc"})),
    );
    let mut args = r.call.tool_args.clone();
    args.insert("owner".into(), json!("other"));
    let mut body = json!({"sha": "abc"});
    assert_eq!(rewrite_rest(Some(&mut body), None, &r, &args), None);
    assert_eq!(body, json!({"sha": "abc"}));
}
