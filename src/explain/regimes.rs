//! Regulatory regimes named in `regulatory_context` (SPEC.md, "Explanation"): the short
//! plain-language descriptions of the common ones, and matching of the names callers send.

use serde::Serialize;

/// One regime as the templates see it (template variable `regimes`, a list of these).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Regime {
    /// Display name: the canonical name of a known regime (`PCI DSS`), else the text as sent.
    pub name: String,
    /// Short plain-language description of a known regime; `None` (template `none`) otherwise.
    pub description: Option<&'static str>,
}

/// Known regimes: (match keys, display name, description). A key is the name upper-cased with
/// everything but letters and digits removed, so `pci-dss`, `PCI DSS` and `pci_dss` all match.
const KNOWN: &[(&[&str], &str, &str)] = &[
    (
        &["GDPR"],
        "GDPR",
        "the EU General Data Protection Regulation, which protects the personal data of people in the EU",
    ),
    (
        &["HIPAA"],
        "HIPAA",
        "the US law that protects patients' health information",
    ),
    (
        &["PCIDSS", "PCI"],
        "PCI DSS",
        "the payment card industry standard for handling card numbers",
    ),
    (
        &["SOX", "SARBANESOXLEY"],
        "SOX",
        "the Sarbanes-Oxley Act, which requires controls over financial records and reporting",
    ),
    (
        &["SOC2"],
        "SOC 2",
        "the audit standard for how service providers protect customer data",
    ),
    (
        &["CCPA"],
        "CCPA",
        "the California Consumer Privacy Act, which gives California residents rights over their personal data",
    ),
    (
        &["EUAIACT", "AIACT"],
        "EU AI Act",
        "the EU law on the safe, transparent and supervised use of AI systems",
    ),
    (
        &["GLBA"],
        "GLBA",
        "the Gramm-Leach-Bliley Act, which protects customers' financial information",
    ),
];

/// Resolves the names a caller sent into display regimes, in the order sent, without
/// duplicates (two spellings of one known regime are named once).
pub fn resolve(names: &[String]) -> Vec<Regime> {
    let mut out: Vec<Regime> = Vec::with_capacity(names.len());
    for name in names {
        let regime = lookup(name);
        if !out.iter().any(|r| r.name == regime.name) {
            out.push(regime);
        }
    }
    out
}

fn lookup(name: &str) -> Regime {
    let key: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    KNOWN
        .iter()
        .find(|(keys, _, _)| keys.contains(&key.as_str()))
        .map(|(_, display, description)| Regime {
            name: (*display).to_string(),
            description: Some(description),
        })
        .unwrap_or_else(|| Regime {
            name: name.trim().to_string(),
            description: None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn spellings_of_known_regimes_resolve_to_one_name() {
        for (sent, want) in [
            ("gdpr", "GDPR"),
            ("pci-dss", "PCI DSS"),
            ("PCI_DSS", "PCI DSS"),
            ("soc2", "SOC 2"),
            ("SOC 2", "SOC 2"),
            ("eu ai act", "EU AI Act"),
            ("Sarbanes-Oxley", "SOX"),
            ("glba", "GLBA"),
            ("CCPA", "CCPA"),
            ("HIPAA", "HIPAA"),
        ] {
            let r = lookup(sent);
            assert_eq!(r.name, want, "{sent}");
            assert!(r.description.is_some(), "{sent}");
        }
    }

    #[test]
    fn unknown_regimes_are_named_as_sent_without_description() {
        let r = resolve(&names(&["ACME Internal Standard 7"]));
        assert_eq!(
            r,
            vec![Regime {
                name: "ACME Internal Standard 7".into(),
                description: None
            }]
        );
    }

    #[test]
    fn order_is_kept_and_duplicates_dropped() {
        let r = resolve(&names(&["HIPAA", "gdpr", "GDPR", "Local-1", "hipaa"]));
        let got: Vec<&str> = r.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(got, ["HIPAA", "GDPR", "Local-1"]);
    }
}
