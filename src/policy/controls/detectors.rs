//! The DLP detectors: one regex per kind of sensitive value, compiled once per snapshot, plus
//! the checks a regex cannot express (Luhn for card numbers, SSN number ranges).
//!
//! [`DetectorSet::find`] returns non-overlapping matches in text order; a `RegexSet` prefilter
//! skips the (common) strings that hold nothing.

use regex::{Regex, RegexSet};
use serde::Deserialize;

/// A kind of sensitive value the DLP control looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detector {
    /// An e-mail address.
    Email,
    /// A 13–19 digit payment card number (spaces or dashes allowed) that passes the Luhn check.
    CreditCard,
    /// A US social security number `AAA-GG-SSSS` in the issued ranges.
    UsSsn,
    /// An AWS access key id (`AKIA…`, `ASIA…`, 20 characters).
    AwsAccessKey,
    /// A PEM private key block, `-----BEGIN … PRIVATE KEY-----` to its END line (or the end of
    /// the text when the END line is missing).
    PrivateKey,
    /// A JSON Web Token (`eyJ….eyJ….…`).
    Jwt,
}

impl Detector {
    /// Every detector, in the order overlapping matches are preferred.
    pub const ALL: &'static [Detector] = &[
        Detector::PrivateKey,
        Detector::Jwt,
        Detector::AwsAccessKey,
        Detector::CreditCard,
        Detector::UsSsn,
        Detector::Email,
    ];

    /// The name used in pack.toml and in `[REDACTED:<name>]`.
    pub fn name(self) -> &'static str {
        match self {
            Detector::Email => "email",
            Detector::CreditCard => "credit_card",
            Detector::UsSsn => "us_ssn",
            Detector::AwsAccessKey => "aws_access_key",
            Detector::PrivateKey => "private_key",
            Detector::Jwt => "jwt",
        }
    }

    fn pattern(self) -> &'static str {
        match self {
            Detector::Email => r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
            Detector::CreditCard => r"\b\d(?:[ -]?\d){12,18}\b",
            Detector::UsSsn => r"\b\d{3}-\d{2}-\d{4}\b",
            Detector::AwsAccessKey => r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
            Detector::PrivateKey => {
                r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)"
            }
            Detector::Jwt => r"\beyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
        }
    }

    /// Checks a regex cannot do; a match that fails them is not reported.
    fn confirms(self, text: &str) -> bool {
        match self {
            Detector::CreditCard => luhn_valid(text),
            Detector::UsSsn => ssn_in_issued_range(text),
            _ => true,
        }
    }
}

/// One match: byte range in the scanned text and the detector that found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// Start byte.
    pub start: usize,
    /// End byte (exclusive).
    pub end: usize,
    /// What was found.
    pub detector: Detector,
}

/// The enabled detectors, compiled.
#[derive(Debug)]
pub struct DetectorSet {
    prefilter: RegexSet,
    detectors: Vec<(Detector, Regex)>,
}

impl DetectorSet {
    /// Compiles `enabled` (duplicates ignored). The patterns are constants, so an error here is
    /// a programming error; it is still returned rather than panicking.
    pub fn new(enabled: &[Detector]) -> Result<DetectorSet, String> {
        let mut chosen: Vec<Detector> = Detector::ALL
            .iter()
            .copied()
            .filter(|d| enabled.contains(d))
            .collect();
        chosen.dedup();
        let patterns: Vec<&str> = chosen.iter().map(|d| d.pattern()).collect();
        let prefilter = RegexSet::new(&patterns).map_err(|e| e.to_string())?;
        let detectors = chosen
            .iter()
            .map(|d| Regex::new(d.pattern()).map(|re| (*d, re)))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        Ok(DetectorSet {
            prefilter,
            detectors,
        })
    }

    /// Non-overlapping hits in `text`, in text order. Where matches overlap, the earlier one
    /// wins, and at the same start the detector listed first in [`Detector::ALL`].
    pub fn find(&self, text: &str) -> Vec<Hit> {
        let matched = self.prefilter.matches(text);
        if !matched.matched_any() {
            return Vec::new();
        }
        let mut hits = Vec::new();
        for (i, (detector, re)) in self.detectors.iter().enumerate() {
            if !matched.matched(i) {
                continue;
            }
            for m in re.find_iter(text) {
                if detector.confirms(m.as_str()) {
                    hits.push(Hit {
                        start: m.start(),
                        end: m.end(),
                        detector: *detector,
                    });
                }
            }
        }
        hits.sort_by_key(|h| (h.start, rank(h.detector)));
        let mut kept: Vec<Hit> = Vec::with_capacity(hits.len());
        for hit in hits {
            if kept.last().is_none_or(|last| hit.start >= last.end) {
                kept.push(hit);
            }
        }
        kept
    }
}

fn rank(d: Detector) -> usize {
    Detector::ALL
        .iter()
        .position(|x| *x == d)
        .unwrap_or(usize::MAX)
}

/// `text` with every hit replaced by `[REDACTED:<detector>]`. Hits must be sorted and
/// non-overlapping, as [`DetectorSet::find`] returns them.
pub fn redact(text: &str, hits: &[Hit]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for hit in hits {
        out.push_str(text.get(at..hit.start).unwrap_or(""));
        out.push_str("[REDACTED:");
        out.push_str(hit.detector.name());
        out.push(']');
        at = hit.end;
    }
    out.push_str(text.get(at..).unwrap_or(""));
    out
}

/// The Luhn checksum over the digits of `text` (separators skipped), for 13–19 digits.
fn luhn_valid(text: &str) -> bool {
    let digits: Vec<u32> = text.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| match (i % 2 == 1, d * 2) {
            (true, doubled) if doubled > 9 => doubled - 9,
            (true, doubled) => doubled,
            (false, _) => d,
        })
        .sum();
    sum % 10 == 0
}

/// SSNs never have area 000, 666 or 900–999, group 00 or serial 0000.
fn ssn_in_issued_range(text: &str) -> bool {
    let mut parts = text.split('-');
    let (Some(area), Some(group), Some(serial)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: &DetectorSet, text: &str) -> Vec<&'static str> {
        set.find(text).iter().map(|h| h.detector.name()).collect()
    }

    #[test]
    fn detector_table() {
        let set = DetectorSet::new(Detector::ALL).unwrap();
        let cases: &[(&str, &[&str])] = &[
            ("mail bob@example.com now", &["email"]),
            ("card 4111 1111 1111 1111", &["credit_card"]),
            ("card 4111-1111-1111-1112", &[]), // fails Luhn
            ("order 1234567890123", &[]),      // fails Luhn
            ("ssn 123-45-6789", &["us_ssn"]),
            ("ssn 666-45-6789 and 123-00-6789", &[]),
            ("key AKIAIOSFODNN7EXAMPLE", &["aws_access_key"]),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
                &["private_key"],
            ),
            (
                "-----BEGIN PRIVATE KEY-----\nMIIE truncated",
                &["private_key"],
            ),
            (
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
                &["jwt"],
            ),
            ("a@b.io and 4111111111111111", &["email", "credit_card"]),
            ("nothing to see here", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(names(&set, text), *want, "{text}");
        }
    }

    #[test]
    fn only_enabled_detectors_run_and_redaction_keeps_the_rest() {
        let set = DetectorSet::new(&[Detector::Email]).unwrap();
        let text = "to a@b.io, card 4111111111111111";
        let hits = set.find(text);
        assert_eq!(hits.len(), 1);
        assert_eq!(
            redact(text, &hits),
            "to [REDACTED:email], card 4111111111111111"
        );
    }

    #[test]
    fn overlapping_matches_keep_the_first() {
        let set = DetectorSet::new(Detector::ALL).unwrap();
        // An e-mail inside a private key block is part of the block.
        let text = "-----BEGIN PRIVATE KEY-----\nx a@b.io\n-----END PRIVATE KEY----- tail";
        let hits = set.find(text);
        assert_eq!(hits.len(), 1);
        assert_eq!(redact(text, &hits), "[REDACTED:private_key] tail");
    }
}
