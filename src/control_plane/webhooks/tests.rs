//! Unit tests of the webhook settings, queue and backoff (real sled store in a tempdir).
//! Deliveries over HTTP are tested end to end in tests/control_plane.rs.

use super::*;

#[test]
fn urls_must_be_http_or_https_with_a_host() {
    for ok in [
        "https://hooks.example.com/toolgate",
        "http://127.0.0.1:9000/x?token=1",
    ] {
        assert!(validate_url(ok).is_ok(), "{ok}");
    }
    let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
    for (bad, needle) in [
        ("ftp://example.com/x", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("example.com/hook", "not a valid URL"),
        ("", "not a valid URL"),
        (long.as_str(), "longer than"),
    ] {
        let err = validate_url(bad).unwrap_err();
        assert!(err.starts_with("url"), "{err}");
        assert!(err.contains(needle), "{err} lacks {needle}");
    }
}

#[test]
fn backoff_doubles_from_one_second_with_jitter_up_to_five_minutes() {
    for _ in 0..50 {
        let first = backoff(1);
        assert!(first >= Duration::from_millis(800) && first < Duration::from_millis(1200));
        let fourth = backoff(4);
        assert!(fourth >= Duration::from_millis(6400) && fourth < Duration::from_millis(9600));
        assert!(backoff(9) <= MAX_BACKOFF);
        assert_eq!(backoff(30), MAX_BACKOFF);
    }
    assert!(
        backoff(10) >= Duration::from_secs(240),
        "capped near the maximum"
    );
}

#[tokio::test]
async fn deliveries_are_stored_only_for_configured_tenants_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let hooks = Webhooks::new(&store, None).unwrap();
        assert!(hooks.enqueue("t1", "hold.created", json!({})).is_none());
        let s = hooks
            .configure("t1", "http://127.0.0.1:9/hook", ids::now())
            .await
            .unwrap();
        assert!(s.secret.starts_with("whsec_") && s.secret.len() == 6 + 43);
        assert!(
            !format!("{s:?}").contains(&s.secret),
            "Debug redacts the secret"
        );
        let id = hooks
            .enqueue("t1", "hold.created", json!({"hold_token": "h"}))
            .unwrap();
        assert!(id.starts_with("whd_"));
        assert!(hooks.enqueue("t2", "hold.created", json!({})).is_none());
        assert_eq!(hooks.pending(), 1);
        store.flush().await.unwrap();
    }
    let store = crate::store::reopen_for_tests(dir.path());
    let hooks = Webhooks::new(&store, None).unwrap();
    let schedule = dispatch::resume(&hooks);
    assert_eq!(schedule.len(), 1, "a restart resumes stored deliveries");
    let (_, seq) = *schedule.first().unwrap();
    let d: Delivery = hooks.deliveries.get(&seq_key(seq)).unwrap().unwrap();
    let body: Value = serde_json::from_str(&d.body).unwrap();
    assert_eq!(body["type"], "hold.created");
    assert_eq!(body["tenant_id"], "t1");
    assert_eq!(body["delivery_id"], d.delivery_id.as_str());
    assert_eq!(body["data"]["hold_token"], "h");
    hooks
        .configure("t1", "http://127.0.0.1:9/hook", ids::now())
        .await
        .unwrap();
    hooks.enqueue("t1", "hold.resolved", json!({})).unwrap();
    assert_eq!(dispatch::resume(&hooks).len(), 2);
    let last: Vec<(Vec<u8>, Delivery)> = hooks.deliveries.scan(b"").unwrap();
    assert_eq!(
        last[1].1.seq,
        seq + 1,
        "sequence numbers continue after a reopen"
    );
    assert!(hooks.remove("t1").await.unwrap().is_some());
    assert!(hooks.remove("t1").await.unwrap().is_none());
    assert!(hooks.settings("t1").unwrap().is_none());
}

#[tokio::test]
async fn a_refused_connection_is_an_undelivered_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let hooks = Webhooks::new(&store, None).unwrap();
    // Bind then drop a listener: its port refuses connections.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    hooks
        .configure("t1", &format!("http://127.0.0.1:{port}/h"), ids::now())
        .await
        .unwrap();
    let (id, outcome) = hooks.test("t1").await.unwrap().unwrap();
    assert!(id.starts_with("whd_"));
    assert!(!outcome.delivered && outcome.status_code.is_none());
    let err = outcome.error.unwrap();
    assert!(
        !err.contains("127.0.0.1"),
        "errors leave out the URL: {err}"
    );
    assert!(hooks.test("t2").await.unwrap().is_none());
}
