//! TLS for the forward proxy: the local CA (`certs/`), leaf certificates minted per host with a
//! bounded cache, and the upstream client configuration (system roots + `--upstream-ca`).
//!
//! Every rustls config built here uses the ring provider explicitly (never a process-default
//! provider) and advertises ALPN `["h2", "http/1.1"]`.

mod ca;
mod files;
mod leaf;
mod upstream;

#[cfg(test)]
mod tests;

pub use ca::LocalCa;
pub use leaf::{LeafCache, DEFAULT_LEAF_CACHE};
pub use upstream::upstream_client_config;

use std::path::PathBuf;
use std::sync::Arc;

/// Errors of the TLS module. Every message names the file or host involved.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file or directory operation failed (`action` says which, e.g. "read", "create").
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done ("read", "write", "create directory", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// `LocalCa::init` without `force` found an existing CA file.
    #[error("{} already exists; refusing to overwrite the CA (use force to replace it)", .0.display())]
    CaExists(PathBuf),
    /// Exactly one of `ca.pem` / `ca-key.pem` exists, so the CA is neither loadable nor safe to
    /// regenerate.
    #[error(
        "incomplete CA: {} exists but {} does not; restore the missing file, or remove the other one to create a new CA",
        present.display(),
        missing.display()
    )]
    CaIncomplete {
        /// The file that exists.
        present: PathBuf,
        /// The file that is missing.
        missing: PathBuf,
    },
    /// The CA private key file is readable or writable by group/others.
    #[error(
        "CA private key {} has mode {mode:o}, open to group/others; run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    KeyPermissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits (e.g. 0o644).
        mode: u32,
    },
    /// A PEM file's content could not be parsed.
    #[error("cannot parse {}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// `ca.pem` and `ca-key.pem` do not form a usable toolgate CA (mismatched key, a CA not
    /// created by toolgate, or an expired CA).
    #[error("{} cannot sign with {}: {reason}", cert.display(), key.display())]
    CaUnusable {
        /// The CA certificate file.
        cert: PathBuf,
        /// The CA key file.
        key: PathBuf,
        /// Why (the verification error of a probe leaf).
        reason: String,
    },
    /// A PEM file of extra roots holds no certificate.
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificates(PathBuf),
    /// Neither the system store nor an extra roots file supplied a trusted root.
    #[error(
        "no trusted root certificates: the system store has none and no extra CA file was given"
    )]
    NoRoots,
    /// The host is not a valid DNS name or IP address literal.
    #[error("invalid host {host:?} for a leaf certificate: {reason}")]
    InvalidHost {
        /// The host as given.
        host: String,
        /// Why it was rejected.
        reason: String,
    },
    /// rcgen failed to generate a key or sign a certificate.
    #[error("cannot generate certificate for {subject}: {source}")]
    Generate {
        /// The CA directory or the host the certificate was for.
        subject: String,
        /// The rcgen error.
        source: rcgen::Error,
    },
    /// rustls rejected a configuration.
    #[error("TLS configuration for {subject}: {source}")]
    Config {
        /// The host or file the configuration was for.
        subject: String,
        /// The rustls error.
        source: rustls::Error,
    },
}

/// The ring crypto provider every config of this module is built with.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// ALPN protocols offered by both the intercepting server and the upstream client.
fn alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), b"http/1.1".to_vec()]
}
