//! Reading a pack directory into a [`PolicySnapshot`]: which files belong to the pack, the
//! content digest, TOML parsing with errors that name the file, line and field, and assembly
//! of the compiled parts.
//!
//! Digest (hex SHA-256, [`PolicyVersion::digest`]): over `pack.toml`, `rules/*.toml`,
//! `routes/*.toml`, `explanations/*` and `tests/*` (regular files directly in those
//! directories), sorted by pack-relative path (`/`-separated); for each file the hash takes
//! the path's UTF-8 bytes, a 0x00 byte, the content length as a big-endian u64, then the
//! content. Equal packs have equal digests on every machine; any byte changed, added, removed
//! or renamed changes it.

use super::controls::Controls;
use super::pack::PackFile;
use super::proxy::ProxyPolicy;
use super::risk::RiskModel;
use super::rules::Rules;
use super::{PolicyError, PolicySnapshot, PolicyVersion};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// One file of the pack.
struct PackEntry {
    /// Pack-relative, `/`-separated.
    rel: String,
    /// As opened, for messages.
    full: PathBuf,
    bytes: Vec<u8>,
}

/// Loads, validates and compiles the pack in `dir`.
pub(crate) fn load(dir: &Path) -> Result<PolicySnapshot, PolicyError> {
    let files = collect(dir)?;
    let digest = digest(&files);
    let pack_entry = files
        .iter()
        .find(|f| f.rel == "pack.toml")
        .ok_or_else(|| io_error(&dir.join("pack.toml"), "file not found"))?;
    let pack_path = display(&pack_entry.full);
    let pack: PackFile = parse_toml(&pack_path, utf8(pack_entry)?)?;
    let invalid = |message: String| PolicyError::Invalid {
        path: pack_path.clone(),
        message,
    };
    pack.validate().map_err(invalid)?;
    let controls = Controls::build(&pack).map_err(invalid)?;
    let rules = Rules::build(&toml_files(&files, "rules/")?)?;
    let proxy = ProxyPolicy::build(&pack.proxy, &pack_path, &toml_files(&files, "routes/")?)?;
    Ok(PolicySnapshot {
        version: PolicyVersion {
            name: pack.name.clone(),
            version: pack.version.clone(),
            digest,
        },
        risk: RiskModel::new(&pack),
        default_timeout: pack.holds.default_step_up_timeout_seconds,
        agents: pack.agents,
        controls,
        rules,
        proxy,
        files: std::sync::Arc::new(files.into_iter().map(|f| (f.rel, f.bytes)).collect()),
    })
}

/// (path as shown in messages, text) of the `.toml` files under `prefix`, in path order.
fn toml_files(files: &[PackEntry], prefix: &str) -> Result<Vec<(String, String)>, PolicyError> {
    files
        .iter()
        .filter(|f| f.rel.starts_with(prefix) && f.rel.ends_with(".toml"))
        .map(|f| Ok((display(&f.full), utf8(f)?.to_string())))
        .collect()
}

/// Parses `text` (the contents of `path`) as TOML into `T`. Errors name the file, the line
/// and the problem, on one line: `policy/pack.toml: line 4: unknown field `colour`, ...`.
pub(crate) fn parse_toml<T: DeserializeOwned>(path: &str, text: &str) -> Result<T, PolicyError> {
    toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text.get(..s.start).unwrap_or("").matches('\n').count() + 1);
        let message = e.message().trim().replace('\n', " ");
        PolicyError::Invalid {
            path: path.to_string(),
            message: match line {
                Some(n) => format!("line {n}: {message}"),
                None => message,
            },
        }
    })
}

/// Every pack file, sorted by relative path.
fn collect(dir: &Path) -> Result<Vec<PackEntry>, PolicyError> {
    let mut entries = Vec::new();
    let pack = dir.join("pack.toml");
    if pack.is_file() {
        entries.push(read(&pack, "pack.toml".into())?);
    }
    let parts = [
        ("rules", true),
        ("routes", true),
        ("explanations", false),
        ("tests", false),
    ];
    for (sub, toml_only) in parts {
        for path in list(&dir.join(sub))? {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !toml_only || name.ends_with(".toml") {
                entries.push(read(&path, format!("{sub}/{name}"))?);
            }
        }
    }
    entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(entries)
}

/// The regular files directly in `dir`; none when it does not exist.
fn list(dir: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, &e.to_string()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io_error(dir, &e.to_string()))?.path();
        if path.is_file() {
            files.push(path);
        }
    }
    Ok(files)
}

fn read(path: &Path, rel: String) -> Result<PackEntry, PolicyError> {
    let bytes = std::fs::read(path).map_err(|e| io_error(path, &e.to_string()))?;
    Ok(PackEntry {
        rel,
        full: path.to_path_buf(),
        bytes,
    })
}

fn digest(files: &[PackEntry]) -> String {
    let mut hash = Sha256::new();
    for f in files {
        hash.update(f.rel.as_bytes());
        hash.update([0u8]);
        hash.update((f.bytes.len() as u64).to_be_bytes());
        hash.update(&f.bytes);
    }
    hex::encode(hash.finalize())
}

fn utf8(entry: &PackEntry) -> Result<&str, PolicyError> {
    std::str::from_utf8(&entry.bytes).map_err(|e| PolicyError::Invalid {
        path: display(&entry.full),
        message: format!("not UTF-8: {e}"),
    })
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

fn io_error(path: &Path, message: &str) -> PolicyError {
    PolicyError::Io {
        path: display(path),
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::{pack_dir, MINIMAL_PACK};

    #[test]
    fn digest_is_stable_and_covers_every_pack_file() {
        let a = pack_dir(MINIMAL_PACK, &[("r.toml", "")]);
        let b = pack_dir(MINIMAL_PACK, &[("r.toml", "")]);
        let d = |dir: &Path| load(dir).unwrap().version.digest;
        let first = d(a.path());
        assert_eq!(first.len(), 64);
        assert_eq!(first, d(a.path()), "same dir twice");
        assert_eq!(first, d(b.path()), "same content elsewhere");
        let changes: [(&str, &str); 6] = [
            ("rules/r.toml", "# comment\n"),
            ("rules/s.toml", ""),
            ("routes/a.toml", ""),
            ("routes/a.toml", "# comment\n"),
            ("tests/t.toml", ""),
            ("explanations/block.j2", "x"),
        ];
        for (rel, text) in changes {
            let dir = pack_dir(MINIMAL_PACK, &[("r.toml", "")]);
            std::fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
            std::fs::write(dir.path().join(rel), text).unwrap();
            assert_ne!(d(dir.path()), first, "{rel}");
        }
        // Files outside the pack's parts do not count.
        std::fs::write(a.path().join("README.md"), "notes").unwrap();
        assert_eq!(d(a.path()), first);
    }

    #[test]
    fn load_errors_name_the_file_and_field() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        const RULE: &str =
            "[[rule]]\nid = \"x\"\ndescription = \"d\"\nwhen = 'true'\neffect = \"block\"\n";
        const BAD_CEL: &str = "[[rule]]\nid = \"y\"\ndescription = \"d\"\nwhen = 'tool_name =='\neffect = \"block\"\n";
        let cases: [Case; 9] = [
            (
                "name = \"p\"\nversion = \"1\"\ncolour = 1\n",
                &[],
                "line 3: unknown field `colour`",
            ),
            ("name = \"p\"\nversion = ", &[], "pack.toml: line 2"),
            (
                "name = \"p\"\nversion = \"1\"\n[controls.dlp]\naction = \"shred\"\n",
                &[],
                "controls.dlp",
            ),
            (
                "name = \"p\"\nversion = \"1\"\n[controls.firewall]\n",
                &[],
                "controls.firewall",
            ),
            (
                MINIMAL_PACK,
                &[("bad.toml", "[[rule]]\nid = 1\n")],
                "bad.toml: line 2",
            ),
            (
                MINIMAL_PACK,
                &[("a.toml", RULE), ("b.toml", RULE)],
                "b.toml: rule[0] (x): duplicate rule id",
            ),
            (
                MINIMAL_PACK,
                &[("c.toml", BAD_CEL)],
                "c.toml: rule `y`: when:",
            ),
            (
                "name = \"p\"\nversion = \"1\"\n[controls.dlp]\nrisk = 101\n",
                &[],
                "controls.dlp.risk",
            ),
            (
                "name = \"p\"\nversion = \"1\"\n[controls.scope]\nenable = false\n",
                &[],
                "controls.scope: unknown field `enable`",
            ),
        ];
        for (pack, rules, needle) in cases {
            let dir = pack_dir(pack, rules);
            let err = load(dir.path()).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let empty = tempfile::tempdir().unwrap();
        let err = load(empty.path()).unwrap_err();
        assert!(matches!(err, PolicyError::Io { .. }), "{err}");
    }
}
