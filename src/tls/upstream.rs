//! The client TLS configuration for upstream connections: system roots plus an optional PEM file
//! of extra roots (`--upstream-ca`), verification always on.

use super::{alpn, provider, TlsError};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{pem::PemObject, CertificateDer};
use std::path::Path;

/// The client TLS config for upstream connections: the system roots (rustls-native-certs;
/// unparseable ones are logged at warn and skipped) plus every certificate in the PEM file
/// `extra_roots` if given. ALPN `["h2", "http/1.1"]`; certificate verification is always on.
///
/// Reads the system store on every call (tens of milliseconds): build it once and share it.
/// hyper-rustls's `HttpsConnectorBuilder::with_tls_config` panics on a config with ALPN set:
/// clear `alpn_protocols` first and let `enable_http1()` / `enable_http2()` set them.
/// Errors: [`TlsError::Io`] if `extra_roots` cannot be read, [`TlsError::Parse`] if it is not
/// valid PEM or holds an unusable certificate, [`TlsError::NoCertificates`] if it holds none,
/// [`TlsError::NoRoots`] if there is no root at all.
pub fn upstream_client_config(extra_roots: Option<&Path>) -> Result<ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    add_system_roots(&mut roots);
    if let Some(path) = extra_roots {
        add_pem_roots(&mut roots, path)?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Config {
            subject: "upstream connections".to_string(),
            source,
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn();
    Ok(config)
}

fn add_system_roots(roots: &mut RootCertStore) {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "skipping part of the system certificate store");
    }
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "skipped system root certificates that failed to parse"
        );
    }
    tracing::debug!(added, "loaded system root certificates");
}

fn add_pem_roots(roots: &mut RootCertStore, path: &Path) -> Result<(), TlsError> {
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| pem_error(path, e))?;
    let mut count = 0usize;
    for cert in certs {
        let cert = cert.map_err(|e| pem_error(path, e))?;
        count += 1;
        roots.add(cert).map_err(|e| TlsError::Parse {
            path: path.to_path_buf(),
            reason: format!("certificate #{count} is not a usable root ({e})"),
        })?;
    }
    if count == 0 {
        return Err(TlsError::NoCertificates(path.to_path_buf()));
    }
    tracing::info!(count, path = %path.display(), "trusting extra upstream root certificates");
    Ok(())
}

fn pem_error(path: &Path, error: rustls_pki_types::pem::Error) -> TlsError {
    match error {
        rustls_pki_types::pem::Error::Io(source) => TlsError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        },
        other => TlsError::Parse {
            path: path.to_path_buf(),
            reason: format!("invalid PEM ({other})"),
        },
    }
}
