//! The proxy's local certificate authority: `<dir>/ca.pem` and `<dir>/ca-key.pem` (0600), created,
//! loaded, checked, and kept in memory ready to sign leaf certificates without re-parsing.

use super::files::{check_key_mode, ensure_dir, exists, read, write_file};
use super::{provider, TlsError};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::ServerCertVerifier;
use rustls_pki_types::{pem::PemObject, CertificateDer, ServerName, UnixTime};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// File name of the CA certificate inside the CA directory.
const CERT_FILE: &str = "ca.pem";
/// File name of the CA private key (PKCS#8 PEM) inside the CA directory.
const KEY_FILE: &str = "ca-key.pem";
/// Subject common name of the CA.
const CA_COMMON_NAME: &str = "toolgate local CA";
/// Subject organization of the CA.
const CA_ORGANIZATION: &str = "toolgate";
/// Host of the probe leaf minted by `load` to check that the two files belong together.
const PROBE_HOST: &str = "ca-check.toolgate.invalid";
const DAY: Duration = Duration::from_secs(86_400);
/// CA validity: ten years.
const CA_VALIDITY: Duration = Duration::from_secs(3_650 * 86_400);
/// Leaf validity: thirty days (backdated one day for clock skew).
const LEAF_VALIDITY: Duration = Duration::from_secs(30 * 86_400);

/// The proxy's local certificate authority: `<dir>/ca.pem` (certificate, what agents must trust)
/// and `<dir>/ca-key.pem` (PKCS#8 ECDSA P-256 private key, mode 0600; the directory is created
/// 0700 when missing). Subject CN "toolgate local CA", O "toolgate"; valid ten years.
///
/// Only CAs written by [`LocalCa::init`] can be loaded: the issuer name of minted leaves is
/// rebuilt from toolgate's fixed subject, and `load` checks with a probe leaf that it chains to
/// `ca.pem`.
pub struct LocalCa {
    cert_path: PathBuf,
    cert_pem: String,
    /// The certificate exactly as stored in `ca.pem` (what the presented chain carries).
    cert_der: CertificateDer<'static>,
    /// The CA re-signed in memory from the same subject and key: rcgen's handle for signing.
    issuer: rcgen::Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa")
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

impl LocalCa {
    /// Creates a new CA in `dir` (created 0700 if missing), writing `ca.pem` and `ca-key.pem`
    /// (0600). Errors: [`TlsError::CaExists`] if either file exists and `force` is false;
    /// [`TlsError::Io`] on a filesystem failure.
    pub fn init(dir: &Path, force: bool) -> Result<LocalCa, TlsError> {
        let (cert_path, key_path) = paths(dir);
        if !force {
            for path in [&cert_path, &key_path] {
                if exists(path)? {
                    return Err(TlsError::CaExists(path.clone()));
                }
            }
        }
        ensure_dir(dir)?;
        let generate = |source| TlsError::Generate {
            subject: format!("the CA in {}", dir.display()),
            source,
        };
        let key = KeyPair::generate().map_err(generate)?;
        let cert = ca_params().self_signed(&key).map_err(generate)?;
        let cert_pem = cert.pem();
        write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
        write_file(&cert_path, cert_pem.as_bytes(), 0o644)?;
        tracing::info!(cert = %cert_path.display(), "created the toolgate local CA");
        Ok(LocalCa {
            cert_path,
            cert_pem,
            cert_der: cert.der().clone(),
            issuer: cert,
            key,
        })
    }

    /// Loads the CA in `dir`. Errors: [`TlsError::Io`] if a file is missing or unreadable,
    /// [`TlsError::KeyPermissions`] if the key is open to group/others (mode & 0o077 != 0),
    /// [`TlsError::Parse`] if a file is not the expected PEM, [`TlsError::CaUnusable`] if the
    /// certificate and key do not belong together, are not toolgate's, or have expired.
    pub fn load(dir: &Path) -> Result<LocalCa, TlsError> {
        let (cert_path, key_path) = paths(dir);
        let cert_pem = read(&cert_path)?;
        check_key_mode(&key_path)?;
        let key = KeyPair::from_pem(&read(&key_path)?).map_err(|e| TlsError::Parse {
            path: key_path.clone(),
            reason: format!("not a PKCS#8 PEM private key ({e})"),
        })?;
        let cert_der =
            CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| TlsError::Parse {
                path: cert_path.clone(),
                reason: format!("no PEM certificate ({e})"),
            })?;
        let issuer = ca_params()
            .self_signed(&key)
            .map_err(|source| TlsError::Generate {
                subject: format!("the CA in {}", dir.display()),
                source,
            })?;
        let ca = LocalCa {
            cert_path,
            cert_pem,
            cert_der,
            issuer,
            key,
        };
        ca.self_check(&key_path)?;
        Ok(ca)
    }

    /// Loads the CA in `dir`, or creates it when neither file exists; the flag is true when it
    /// was created. Errors: [`TlsError::CaIncomplete`] when exactly one of the two files exists
    /// (nothing is overwritten), else those of [`LocalCa::load`] / [`LocalCa::init`].
    pub fn load_or_init(dir: &Path) -> Result<(LocalCa, bool), TlsError> {
        let (cert_path, key_path) = paths(dir);
        match (exists(&cert_path)?, exists(&key_path)?) {
            (true, true) => Ok((Self::load(dir)?, false)),
            (false, false) => Ok((Self::init(dir, false)?, true)),
            (true, false) => Err(TlsError::CaIncomplete {
                present: cert_path,
                missing: key_path,
            }),
            (false, true) => Err(TlsError::CaIncomplete {
                present: key_path,
                missing: cert_path,
            }),
        }
    }

    /// PEM text of the CA certificate, as stored in `ca.pem` (what agents must trust).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Path of `ca.pem`.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// DER of the CA certificate exactly as stored in `ca.pem` (the last element of a chain).
    pub(crate) fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// Signs a fresh ECDSA P-256 leaf for `san` (CN `common_name`, EKU serverAuth, valid from
    /// now - 1 day to now + 30 days) and returns its DER with its key pair.
    pub(crate) fn sign_leaf(
        &self,
        san: SanType,
        common_name: &str,
    ) -> Result<(CertificateDer<'static>, KeyPair), rcgen::Error> {
        let now = SystemTime::now();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.subject_alt_names = vec![san];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = (now - DAY).into();
        params.not_after = (now + LEAF_VALIDITY).into();
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer, &self.key)?;
        Ok((cert.der().clone(), key))
    }

    /// Mints a probe leaf and verifies it against the stored `ca.pem` with webpki, so a
    /// mismatched key, a foreign or an expired CA fails at load rather than at every handshake.
    fn self_check(&self, key_path: &Path) -> Result<(), TlsError> {
        let unusable = |reason: String| TlsError::CaUnusable {
            cert: self.cert_path.clone(),
            key: key_path.to_path_buf(),
            reason,
        };
        let san = SanType::DnsName(
            PROBE_HOST
                .try_into()
                .map_err(|e| unusable(format!("{e}")))?,
        );
        let (leaf, _) = self
            .sign_leaf(san, PROBE_HOST)
            .map_err(|source| TlsError::Generate {
                subject: PROBE_HOST.to_string(),
                source,
            })?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.cert_der.clone())
            .map_err(|e| TlsError::Parse {
                path: self.cert_path.clone(),
                reason: e.to_string(),
            })?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .map_err(|e| unusable(e.to_string()))?;
        let name = ServerName::try_from(PROBE_HOST).map_err(|e| unusable(e.to_string()))?;
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .map_err(|e| unusable(format!("a test leaf does not verify against it ({e})")))?;
        Ok(())
    }
}

/// The CA's parameters: fixed subject, CA:TRUE pathlen 0, keyCertSign + cRLSign, ten years.
fn ca_params() -> CertificateParams {
    let now = SystemTime::now();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params
        .distinguished_name
        .push(DnType::OrganizationName, CA_ORGANIZATION);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = (now - DAY).into();
    params.not_after = (now + CA_VALIDITY).into();
    params
}

fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join(CERT_FILE), dir.join(KEY_FILE))
}
