//! Unit tests of configuration layering and validation.
use super::*;
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn defaults_apply_when_nothing_is_given() {
    let c = Config::load_with(&Flags::default(), &env_of(&[])).unwrap();
    assert_eq!(c.admin_listen.to_string(), "127.0.0.1:8181");
    assert_eq!(c.data_dir, PathBuf::from("./toolgate-data"));
    assert!(c.replay_protection && c.admin_token.is_none());
}

#[test]
fn flag_beats_env_beats_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(
        &file,
        "admin_listen = \"127.0.0.1:1\"\nrate_limit_per_second = 7\nfleet_id = \"f-file\"\n",
    )
    .unwrap();
    let flags = Flags {
        config_file: Some(file),
        admin_listen: Some("127.0.0.1:3".into()),
        ..Flags::default()
    };
    let env = env_of(&[
        ("TOOLGATE_ADMIN_LISTEN", "127.0.0.1:2"),
        ("TOOLGATE_FLEET_ID", "f-env"),
    ]);
    let c = Config::load_with(&flags, &env).unwrap();
    assert_eq!(c.admin_listen.port(), 3);
    assert_eq!(c.fleet_id.as_deref(), Some("f-env"));
    assert_eq!(c.rate_limit_per_second, 7);
}

#[test]
fn the_shipped_example_config_loads() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/toolgate.example.toml");
    let flags = Flags {
        config_file: Some(file),
        ..Flags::default()
    };
    let c = Config::load_with(&flags, &env_of(&[])).unwrap();
    assert_eq!(c.fleet_id.as_deref(), Some("engineering"));
    assert_eq!(
        c.dashboard_url.as_deref(),
        Some("https://toolgate.example.com")
    );
}

#[test]
fn bad_values_name_the_field() {
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("TOOLGATE_ADMIN_LISTEN", "nope")], "admin_listen"),
        (
            &[("TOOLGATE_RATE_LIMIT_PER_SECOND", "-1")],
            "rate_limit_per_second",
        ),
        (&[("TOOLGATE_DASHBOARD_URL", "ftp://x")], "dashboard_url"),
    ];
    for (env, field) in cases {
        let err = Config::load_with(&Flags::default(), &env_of(env)).unwrap_err();
        assert_eq!(err.field, field);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(&file, "admn_listen = \"x\"\n").unwrap();
    let flags = Flags {
        config_file: Some(file),
        ..Flags::default()
    };
    let err = Config::load_with(&flags, &env_of(&[])).unwrap_err();
    assert!(err.to_string().contains("admn_listen"), "{err}");
}
