//! The receipt signing key on disk: `<data-dir>/receipt-signing.key` (Ed25519, PKCS#8 PEM,
//! mode 0600, created once) and `<data-dir>/receipt-signing.pub` (SubjectPublicKeyInfo PEM),
//! plus the key id printed in every receipt. Key material is never logged; errors name the
//! file only.

use super::LedgerError;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// File name of the private key inside the data dir.
pub const PRIVATE_KEY_FILE: &str = "receipt-signing.key";
/// File name of the public key inside the data dir.
pub const PUBLIC_KEY_FILE: &str = "receipt-signing.pub";

/// `signing_key_id`: the first 16 hex digits of SHA-256 over the 32 raw public key bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    digest[..16].to_string()
}

/// Loads `<data_dir>/receipt-signing.key`, or creates it (mode 0600, fsynced) when absent.
/// A key file readable by group or others is tightened to 0600 with a warning.
///
/// Errors: [`LedgerError::Key`] when the file cannot be read, parsed or created.
pub(crate) fn load_or_create(data_dir: &Path) -> Result<SigningKey, LedgerError> {
    fs::create_dir_all(data_dir)
        .map_err(|e| LedgerError::Key(format!("cannot create {}: {e}", data_dir.display())))?;
    let path = data_dir.join(PRIVATE_KEY_FILE);
    match fs::read_to_string(&path) {
        Ok(pem) => {
            tighten_mode(&path)?;
            SigningKey::from_pkcs8_pem(&pem).map_err(|_| {
                LedgerError::Key(format!(
                    "{} is not a PKCS#8 PEM Ed25519 key",
                    path.display()
                ))
            })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => create(data_dir, &path),
        Err(e) => Err(LedgerError::Key(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Generates a key from the OS RNG and writes it with `create_new` + mode 0600.
fn create(data_dir: &Path, path: &Path) -> Result<SigningKey, LedgerError> {
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let pem = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|_| LedgerError::Key("cannot encode a new key as PKCS#8".to_string()))?;
    let write_err =
        |e: std::io::Error| LedgerError::Key(format!("cannot write {}: {e}", path.display()));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(write_err)?;
    file.write_all(pem.as_bytes()).map_err(write_err)?;
    file.sync_all().map_err(write_err)?;
    sync_dir(data_dir);
    tracing::info!(path = %path.display(), key_id = %key_id(&key.verifying_key()), "created receipt signing key");
    Ok(key)
}

/// Makes a key file readable by its owner only, warning when it was not.
fn tighten_mode(path: &Path) -> Result<(), LedgerError> {
    let meta = fs::metadata(path)
        .map_err(|e| LedgerError::Key(format!("cannot stat {}: {e}", path.display())))?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "receipt signing key was readable by others; setting mode 0600");
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
            .map_err(|e| LedgerError::Key(format!("cannot chmod {}: {e}", path.display())))?;
    }
    Ok(())
}

/// Best-effort fsync of a directory so a newly created file's entry survives a crash.
fn sync_dir(dir: &Path) {
    if let Err(e) = fs::File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot fsync the data dir");
    }
}

/// The public key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
///
/// Errors: [`LedgerError::Key`] (encoding cannot fail for a valid key; kept for safety).
pub(crate) fn public_pem(key: &VerifyingKey) -> Result<String, LedgerError> {
    key.to_public_key_pem(LineEnding::LF)
        .map_err(|_| LedgerError::Key("cannot encode the public key as PEM".to_string()))
}

/// Writes `<data_dir>/receipt-signing.pub` (write to a temp file, then rename) unless it
/// already holds `pem`.
///
/// Errors: [`LedgerError::Key`] when the file cannot be written.
pub(crate) fn write_public(data_dir: &Path, pem: &str) -> Result<(), LedgerError> {
    let path = data_dir.join(PUBLIC_KEY_FILE);
    if fs::read_to_string(&path).is_ok_and(|current| current == pem) {
        return Ok(());
    }
    let tmp = data_dir.join(format!("{PUBLIC_KEY_FILE}.tmp"));
    let err = |e: std::io::Error| LedgerError::Key(format!("cannot write {}: {e}", path.display()));
    fs::write(&tmp, pem).map_err(err)?;
    fs::rename(&tmp, &path).map_err(err)?;
    Ok(())
}

/// Parses a SubjectPublicKeyInfo PEM Ed25519 public key (the `.pub` file's content).
///
/// Errors: [`LedgerError::Key`] when it is not one.
pub fn parse_public_pem(pem: &str) -> Result<VerifyingKey, LedgerError> {
    VerifyingKey::from_public_key_pem(pem).map_err(|_| {
        LedgerError::Key("the public key is not an Ed25519 public key in PEM form".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_created_0600_then_loaded_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path()).unwrap();
        let path = dir.path().join(PRIVATE_KEY_FILE);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let second = load_or_create(dir.path()).unwrap();
        assert_eq!(first.to_bytes(), second.to_bytes());
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"));
    }

    #[test]
    fn a_loose_key_file_is_tightened_and_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create(dir.path()).unwrap();
        let path = dir.path().join(PRIVATE_KEY_FILE);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        load_or_create(dir.path()).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::write(&path, "not a key").unwrap();
        let err = load_or_create(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is not a PKCS#8 PEM Ed25519 key"), "{err}");
    }

    #[test]
    fn public_pem_round_trips_and_key_id_is_16_hex() {
        let dir = tempfile::tempdir().unwrap();
        let key = load_or_create(dir.path()).unwrap();
        let pem = public_pem(&key.verifying_key()).unwrap();
        write_public(dir.path(), &pem).unwrap();
        let read = fs::read_to_string(dir.path().join(PUBLIC_KEY_FILE)).unwrap();
        let parsed = parse_public_pem(&read).unwrap();
        assert_eq!(parsed, key.verifying_key());
        let id = key_id(&parsed);
        assert!(id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(parse_public_pem("nope").is_err());
    }
}
