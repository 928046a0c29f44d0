//! The tiny glob dialect the pack uses for tool names and model names: `*` matches any run of
//! characters (including none); every other character matches itself. `crm.*` is a prefix
//! wildcard, `claude-*-sonnet` has one in the middle, and a lone `*` matches everything.

/// True when `text` matches `pattern` (case-sensitive). Runs in O(len(pattern) × len(text)) at
/// worst, with no allocation and no recursion.
pub fn matches(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let mut parts = pattern.split('*');
    // `split` always yields at least one item; an empty first part means a leading `*`.
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut pieces: Vec<&str> = parts.collect();
    // The last piece must sit at the very end of the text (it is empty after a trailing `*`).
    let last = pieces.pop().unwrap_or("");
    for piece in pieces {
        match rest.find(piece) {
            // `find` returns a char boundary and `piece` is valid UTF-8, so the slice is too.
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// True when any of `patterns` matches `text`.
pub fn any_matches<S: AsRef<str>>(patterns: &[S], text: &str) -> bool {
    patterns.iter().any(|p| matches(p.as_ref(), text))
}

/// The most specific (longest) pattern of `entries` that matches `text`, with its value.
/// Ties on length go to the first entry in iteration order.
pub fn longest_match<'a, V>(
    entries: impl IntoIterator<Item = (&'a String, &'a V)>,
    text: &str,
) -> Option<(&'a str, &'a V)>
where
    V: 'a,
{
    let mut best: Option<(&'a str, &'a V)> = None;
    for (pattern, value) in entries {
        let longer = best.is_none_or(|(b, _)| pattern.len() > b.len());
        if longer && matches(pattern, text) {
            best = Some((pattern.as_str(), value));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn glob_table() {
        let cases = [
            ("crm.*", "crm.lookup", true),
            ("crm.*", "crm.", true),
            ("crm.*", "crmx.lookup", false),
            ("crm.lookup", "crm.lookup", true),
            ("crm.lookup", "crm.lookup2", false),
            ("*", "anything", true),
            ("*", "", true),
            ("claude-*-sonnet", "claude-3-5-sonnet", true),
            ("claude-*-sonnet", "claude-3-5-sonnet-x", false),
            ("*-mini", "gpt-4o-mini", true),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("a**b", "ab", true),
            ("", "", true),
            ("", "x", false),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(matches(pattern, text), want, "{pattern} vs {text}");
        }
    }

    #[test]
    fn longest_match_prefers_the_most_specific_pattern() {
        let map: BTreeMap<String, u32> = [("shell.*", 30), ("shell.exec", 40), ("*", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(longest_match(&map, "shell.exec"), Some(("shell.exec", &40)));
        assert_eq!(longest_match(&map, "shell.spawn"), Some(("shell.*", &30)));
        assert_eq!(longest_match(&map, "crm.lookup"), Some(("*", &1)));
        let empty: BTreeMap<String, u32> = BTreeMap::new();
        assert_eq!(longest_match(&empty, "x"), None);
        assert!(any_matches(&["a", "b*"], "bee"));
        assert!(!any_matches::<&str>(&[], "bee"));
    }
}
