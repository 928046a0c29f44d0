//! Leaf certificates for intercepted hosts: host validation and normalization, minting from the
//! [`LocalCa`], and the bounded cache of ready rustls `ServerConfig`s.

use super::{alpn, provider, LocalCa, TlsError};
use rcgen::SanType;
use rustls::crypto::CryptoProvider;
use rustls::ServerConfig;
use rustls_pki_types::{DnsName, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// Default number of leaf configs kept by a [`LeafCache`].
pub const DEFAULT_LEAF_CACHE: usize = 1024;

/// Leaf certificates for intercepted hosts, minted on demand from a [`LocalCa`] and kept in a
/// bounded cache (quick_cache; least-recently/frequently used entries are evicted).
///
/// `Send + Sync`; share it through an `Arc`. Minting takes about a millisecond (P-256 key
/// generation + one signature) and runs synchronously in the caller; concurrent requests for
/// the same uncached host wait for a single mint.
pub struct LeafCache {
    ca: LocalCa,
    provider: Arc<CryptoProvider>,
    cache: quick_cache::sync::Cache<String, Arc<ServerConfig>>,
}

impl std::fmt::Debug for LeafCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeafCache")
            .field("ca", &self.ca)
            .field("len", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl LeafCache {
    /// A cache of at most `capacity` leaves (a capacity of 0 is treated as 1) signed by `ca`.
    pub fn new(ca: LocalCa, capacity: usize) -> LeafCache {
        LeafCache {
            ca,
            provider: provider(),
            cache: quick_cache::sync::Cache::new(capacity.max(1)),
        }
    }

    /// A rustls `ServerConfig` presenting a leaf for `host`: a DNS name (case-insensitive, one
    /// trailing dot ignored) or an IP address literal (IPv6 with or without brackets), which
    /// gets an IP SAN. Chain `[leaf, ca.pem]`, ALPN `["h2", "http/1.1"]`, no client auth.
    /// Cached per normalized host: repeated calls return the same `Arc` without minting.
    /// Errors: [`TlsError::InvalidHost`] for an empty or malformed host (a `host:port` too);
    /// [`TlsError::Generate`] / [`TlsError::Config`] if minting fails.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
        let (name, san) = normalize(host)?;
        self.cache
            .get_or_insert_with(name.as_str(), || self.mint(&name, san))
    }

    /// How many leaves are cached now (for tests and metrics).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether no leaf is cached.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// The CA the leaves are signed by.
    pub fn ca(&self) -> &LocalCa {
        &self.ca
    }

    fn mint(&self, name: &str, san: SanType) -> Result<Arc<ServerConfig>, TlsError> {
        let (leaf, key) = self
            .ca
            .sign_leaf(san, name)
            .map_err(|source| TlsError::Generate {
                subject: name.to_string(),
                source,
            })?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let chain = vec![leaf, self.ca.cert_der().clone()];
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|source| TlsError::Config {
                subject: name.to_string(),
                source,
            })?;
        config.alpn_protocols = alpn();
        tracing::debug!(host = name, "minted a leaf certificate");
        Ok(Arc::new(config))
    }
}

/// The cache key and SAN for `host`: IP literals in canonical form, DNS names lower-cased
/// without a trailing dot.
fn normalize(host: &str) -> Result<(String, SanType), TlsError> {
    let invalid = |reason: &str| TlsError::InvalidHost {
        host: host.to_string(),
        reason: reason.to_string(),
    };
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: Ipv6Addr = inner
            .parse()
            .map_err(|_| invalid("the bracketed part is not an IPv6 address"))?;
        return Ok((ip.to_string(), SanType::IpAddress(IpAddr::V6(ip))));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok((ip.to_string(), SanType::IpAddress(ip)));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if name.is_empty() {
        return Err(invalid("empty host name"));
    }
    DnsName::try_from(name.as_str()).map_err(|_| invalid("not a valid DNS name or IP address"))?;
    let ia5 = name
        .as_str()
        .try_into()
        .map_err(|_| invalid("not an ASCII DNS name"))?;
    Ok((name, SanType::DnsName(ia5)))
}
