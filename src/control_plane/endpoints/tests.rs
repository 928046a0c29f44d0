//! Unit tests of the endpoints module.

use super::*;
use chrono::Duration;

fn reg(id: &str) -> Registration {
    Registration {
        endpoint_id: id.into(),
        hostname: Some("host-1".into()),
        employee_email: None,
        enrollment: None,
        environment: Some("prod".into()),
        proxy_version: Some("1.0.0".into()),
        agent_ids: Some(vec!["a1".into()]),
    }
}

#[test]
fn validation_names_the_field() {
    let cases: Vec<(Registration, &str)> = vec![
        (reg(""), "endpoint_id must be 1 to 256"),
        (reg(&"x".repeat(257)), "endpoint_id must be 1 to 256"),
        (reg("a\u{1f}b"), "endpoint_id must not contain control"),
        (
            Registration {
                agent_ids: Some(vec!["ok".into(), String::new()]),
                ..reg("e")
            },
            "agent_ids[1] must be 1 to 256",
        ),
        (
            Registration {
                hostname: Some("h".repeat(MAX_TEXT_CHARS + 1)),
                ..reg("e")
            },
            "hostname is longer",
        ),
    ];
    for (r, needle) in cases {
        let err = r.validate().unwrap_err();
        assert!(err.contains(needle), "{err} lacks {needle}");
    }
    assert!(reg(&"x".repeat(256)).validate().is_ok());
    for bad in [-0.1, 100.5, f64::NAN] {
        let c = CheckIn {
            risk_score: Some(bad),
            ..CheckIn::default()
        };
        assert!(c.validate().unwrap_err().contains("risk_score"), "{bad}");
    }
}

#[tokio::test]
async fn reregistration_keeps_registered_at_and_checkin_needs_registration() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let eps = Endpoints::new(&store);
    let t0 = ids::now() - Duration::seconds(100);
    let (first, created) = eps.register("t", reg("e1"), t0).await.unwrap();
    assert!(created);
    let later = Registration {
        hostname: None,
        proxy_version: Some("1.1.0".into()),
        ..reg("e1")
    };
    let (second, created) = eps.register("t", later, ids::now()).await.unwrap();
    assert!(!created);
    assert_eq!(second.registered_at, first.registered_at);
    assert_eq!(second.hostname.as_deref(), Some("host-1"), "absent keeps");
    assert_eq!(second.proxy_version.as_deref(), Some("1.1.0"));
    assert!(eps
        .check_in("t", "e2", CheckIn::default(), ids::now())
        .unwrap()
        .is_none());
    assert!(eps
        .check_in("other", "e1", CheckIn::default(), ids::now())
        .unwrap()
        .is_none());
    let c = CheckIn {
        risk_score: Some(12.5),
        sessions_today: Some(3),
        ..CheckIn::default()
    };
    let rec = eps.check_in("t", "e1", c, ids::now()).unwrap().unwrap();
    assert_eq!(rec.risk_score, Some(12.5));
    assert!(rec.last_checkin_at.is_some());
    assert_eq!(eps.list("t").unwrap().len(), 1);
    assert!(eps.list("other").unwrap().is_empty());
    assert!(
        eps.list("").unwrap().is_empty(),
        "the empty tenant is not a prefix of all"
    );
}

#[test]
fn staleness_counts_from_the_last_sign_of_life() {
    let now = ids::now();
    let mut rec = EndpointRecord::new("t", "e", now - Duration::seconds(200));
    assert!(rec.is_stale(now, 90));
    assert_eq!(rec.seconds_silent(now), 200);
    rec.last_checkin_at = Some(now - Duration::seconds(10));
    assert!(!rec.is_stale(now, 90));
    let v = rec.view(now, 90);
    assert_eq!(v.seconds_since_checkin, 10);
    assert!(!v.stale);
}
