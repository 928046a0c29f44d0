//! Unit tests of the governance feed.

use super::*;

fn meta(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn usage_reads_the_proxy_and_the_sdk_spellings() {
    let proxy = usage_of(&meta(json!({"provider": "openai", "model": "gpt-4.1",
        "input_tokens": 10, "output_tokens": 5, "total_tokens": 15})));
    assert_eq!(
        (
            proxy.provider.as_str(),
            proxy.model.as_str(),
            proxy.total_tokens
        ),
        ("openai", "gpt-4.1", 15)
    );
    let sdk = usage_of(&meta(
        json!({"provider": "anthropic", "model_name": "claude",
        "prompt_tokens": "7", "completion_tokens": 3.0}),
    ));
    assert_eq!(
        (
            sdk.model.as_str(),
            sdk.input_tokens,
            sdk.output_tokens,
            sdk.total_tokens
        ),
        ("claude", 7, 3, 10)
    );
    let none = usage_of(&Map::new());
    assert_eq!(
        (
            none.provider.as_str(),
            none.model.as_str(),
            none.total_tokens
        ),
        ("unknown", "unknown", 0)
    );
    assert_eq!(usage_of(&meta(json!({"input_tokens": -4}))).input_tokens, 0);
}

#[test]
fn cursors_round_trip_and_garbage_is_422() {
    let item = Item::new(ids::now(), "ledger:42".into(), "tool_call", Map::new());
    let (at, id) = decode_cursor(&encode_cursor(&item)).unwrap();
    assert_eq!((at, id.as_str()), (item.at_ms, "ledger:42"));
    for bad in ["", "!!", "bm9waXBl", &URL_SAFE_NO_PAD.encode("x|y")] {
        assert!(
            matches!(decode_cursor(bad), Err(ApiError::Unprocessable(_))),
            "{bad}"
        );
    }
}

#[test]
fn query_numbers_are_range_checked() {
    assert_eq!(number("limit", None, 50, 500).unwrap(), 50);
    assert_eq!(number("limit", Some("500"), 50, 500).unwrap(), 500);
    for bad in ["0", "501", "-1", "ten", "1.5"] {
        match number("limit", Some(bad), 50, 500) {
            Err(ApiError::Unprocessable(m)) => assert!(m.starts_with("limit"), "{m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn scanning_backwards_stops_after_the_window_and_skips_holes() {
    let now = ids::now();
    // Entry n is n minutes old for n in 1..=5000 (seq = 5001 - n).
    let at = |seq: u64| now - Duration::minutes(5001 - seq as i64);
    let read = |from: u64, n: usize| -> Result<Vec<u64>, LedgerError> {
        Ok((from..=5000).take(n).filter(|s| *s != 4990).collect())
    };
    let mut seen = Vec::new();
    let since = now - Duration::minutes(1500);
    scan_back(5000, since, read, |s| (*s, Some(at(*s))), |s| seen.push(*s)).unwrap();
    assert_eq!(seen.first(), Some(&5000));
    assert!(!seen.contains(&4990));
    assert!(
        seen.windows(2).all(|w| w[0] > w[1]),
        "newest first, no repeats"
    );
    assert!(
        seen.iter().any(|s| at(*s) < since),
        "the chunk that reaches past is read"
    );
    assert!(seen.len() < 3000, "and nothing older: {}", seen.len());
}
