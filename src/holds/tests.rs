//! Unit tests of the hold book on a real sled store.

use super::*;
use std::time::Duration as StdDuration;

fn new_hold(timeout: u64) -> NewHold {
    NewHold {
        token: ids::secret_token("hold", 32),
        tenant_id: "t1".into(),
        agent_id: "a1".into(),
        tool_name: "shell.exec".into(),
        session_id: "s1".into(),
        user_id: "u1".into(),
        step_up_timeout_seconds: timeout,
        authorization_decision: AuthorizationDecision::StepUp,
        decision_reason: "needs approval".into(),
        decision_reason_code: ReasonCode::RuleStepUp,
        risk_score: 55.0,
        tool_args: None,
        request_hash: "ab".repeat(32),
        policy_version: "1+abc".into(),
        enforcement_trace_id: None,
        created_at: ids::now(),
    }
}

async fn initial(receipts: &ReceiptLog, token: &str) -> Receipt {
    receipts
        .issue(ReceiptBody {
            kind: ReceiptKind::Decision,
            tenant_id: "t1".into(),
            subject_id: token.into(),
            request_hash: "ab".repeat(32),
            decision: Decision::StepUp,
            authorization_decision: AuthorizationDecision::StepUp,
            decision_reason_code: ReasonCode::RuleStepUp,
            policy_version: "1+abc".into(),
        })
        .await
        .unwrap()
}

struct Fixture {
    book: Arc<HoldBook>,
    receipts: Arc<ReceiptLog>,
    _shutdown: watch::Sender<bool>,
}

fn fixture_at(dir: &std::path::Path) -> Fixture {
    let store = crate::store::reopen_for_tests(dir);
    let receipts = Arc::new(ReceiptLog::open(&store, dir).unwrap());
    let (tx, rx) = watch::channel(false);
    let book = Arc::new(HoldBook::new(&store, receipts.clone(), 100, rx));
    Fixture {
        book,
        receipts,
        _shutdown: tx,
    }
}

async fn create(f: &Fixture, timeout: u64) -> HoldRecord {
    let n = new_hold(timeout);
    let r = initial(&f.receipts, &n.token).await;
    f.book.create(n, r).await.unwrap()
}

#[tokio::test]
async fn pending_view_leaves_out_resolver_fields_then_approval_fills_them() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture_at(dir.path());
    let rec = create(&f, 300).await;
    let pending = serde_json::to_value(f.book.get(&rec.call.token).unwrap().view()).unwrap();
    assert_eq!(pending["resolved"], false);
    for absent in [
        "resolution",
        "resolved_by",
        "resolved_at",
        "reason",
        "terminal_receipt",
    ] {
        assert!(pending.get(absent).is_none(), "{absent}");
    }
    let how = Resolution::Approve {
        approver: "alice@example.com".into(),
        reason: Some("ok".into()),
    };
    let done = f
        .book
        .resolve(&rec.call.token, Some("t1"), how)
        .await
        .unwrap();
    let v = serde_json::to_value(done.view()).unwrap();
    assert_eq!(v["resolution"], "ALLOW");
    assert_eq!(v["resolved_by"], "alice@example.com");
    assert!(v["terminal_receipt"].is_object() && v["resolved_at"].is_string());
    assert_eq!(f.book.pending_count(), 0);
}

#[tokio::test]
async fn a_hold_resolves_exactly_once_even_under_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture_at(dir.path());
    let rec = create(&f, 300).await;
    let deny = |who: &str| Resolution::Deny {
        approver: who.into(),
        reason: None,
    };
    let (a, b) = tokio::join!(
        f.book.resolve(&rec.call.token, Some("t1"), deny("a")),
        f.book.resolve(&rec.call.token, Some("t1"), deny("b"))
    );
    assert_eq!(a.is_ok() as u8 + b.is_ok() as u8, 1);
    let again = f
        .book
        .resolve(&rec.call.token, Some("t1"), Resolution::Timeout)
        .await;
    assert!(matches!(again, Err(HoldError::AlreadyResolved { .. })));
    assert_eq!(
        f.book.get(&rec.call.token).unwrap().resolution,
        Some(Decision::Block)
    );
}

#[tokio::test]
async fn other_tenants_and_unknown_tokens_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture_at(dir.path());
    let rec = create(&f, 300).await;
    let how = Resolution::Approve {
        approver: "x".into(),
        reason: None,
    };
    assert!(matches!(
        f.book
            .resolve(&rec.call.token, Some("t2"), how.clone())
            .await,
        Err(HoldError::NotFound)
    ));
    assert!(matches!(
        f.book.resolve("hold_nope", None, how).await,
        Err(HoldError::NotFound)
    ));
    assert_eq!(f.book.pending_for("t1").unwrap().len(), 1);
    assert!(f.book.pending_for("t2").unwrap().is_empty());
}

#[tokio::test]
async fn timeout_resolves_as_block_by_timeout_and_wakes_waiters() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture_at(dir.path());
    let rec = create(&f, 0).await;
    let done = f
        .book
        .wait(&rec.call.token, StdDuration::from_secs(10))
        .await
        .unwrap();
    assert!(done.resolved);
    assert_eq!(done.resolved_by.as_deref(), Some("timeout"));
    assert_eq!(done.resolution, Some(Decision::Block));
    assert_eq!(done.reason.as_deref(), Some(record::TIMEOUT_REASON));
}

#[tokio::test]
async fn pending_holds_survive_a_reopen_and_their_timers_are_rearmed() {
    let dir = tempfile::tempdir().unwrap();
    let (long, short) = {
        let f = fixture_at(dir.path());
        (
            create(&f, 300).await.call.token,
            create(&f, 1).await.call.token,
        )
    }; // the fixture drops here: sled's lock on the directory is released
    let f = fixture_at(dir.path());
    assert_eq!(f.book.restore().unwrap(), 2);
    assert!(!f.book.get(&long).unwrap().resolved);
    let done = f
        .book
        .wait(&short, StdDuration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.resolved_by.as_deref(), Some("timeout"));
}

#[tokio::test]
async fn the_cap_on_pending_holds_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let receipts = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let (_tx, rx) = watch::channel(false);
    let book = Arc::new(HoldBook::new(&store, receipts.clone(), 1, rx));
    let n = new_hold(300);
    let r = initial(&receipts, &n.token).await;
    book.create(n, r).await.unwrap();
    let n = new_hold(300);
    let r = initial(&receipts, &n.token).await;
    assert!(matches!(
        book.create(n, r).await,
        Err(HoldError::TooManyPending(1))
    ));
}

#[tokio::test]
async fn recent_for_lists_a_tenants_holds_created_or_resolved_since() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture_at(dir.path());
    let before = ids::now() - chrono::Duration::seconds(1);
    let a = create(&f, 300).await;
    let b = create(&f, 300).await;
    f.book
        .resolve(&a.call.token, None, Resolution::Timeout)
        .await
        .unwrap();
    let recent = f.book.recent_for("t1", before).unwrap();
    let mut tokens: Vec<&str> = recent.iter().map(|r| r.call.token.as_str()).collect();
    tokens.sort();
    let mut expected = vec![a.call.token.as_str(), b.call.token.as_str()];
    expected.sort();
    assert_eq!(tokens, expected);
    assert!(recent
        .windows(2)
        .all(|w| w[0].call.created_at >= w[1].call.created_at));
    let timed_out = recent
        .iter()
        .find(|r| r.call.token == a.call.token)
        .unwrap();
    assert_eq!(timed_out.resolved_by.as_deref(), Some("timeout"));
    assert!(f.book.recent_for("t2", before).unwrap().is_empty());
    let later = ids::now() + chrono::Duration::seconds(1);
    assert!(f.book.recent_for("t1", later).unwrap().is_empty());
}
