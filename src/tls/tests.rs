//! Tests of the TLS module: CA files and permissions, leaf minting and caching, and real
//! handshakes (tokio-rustls over an in-memory duplex) against the CA and upstream configs.

use super::*;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::{pem::PemObject, CertificateDer, ServerName};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A client trusting only the certificates in `ca_pem`, offering `alpn`.
fn client_trusting(ca_pem: &Path, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_pem).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Completes a TLS handshake and a one-message exchange; returns the negotiated ALPN protocol.
async fn handshake(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    name: &str,
) -> Result<Option<Vec<u8>>, std::io::Error> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let server_task = tokio::spawn(async move {
        let mut tls = acceptor.accept(server_io).await?;
        tls.write_all(b"ok").await?;
        tls.flush().await?;
        Ok::<_, std::io::Error>(tls)
    });
    let name = ServerName::try_from(name.to_string()).unwrap();
    let connector = tokio_rustls::TlsConnector::from(client);
    let mut tls = connector.connect(name, client_io).await?;
    let mut buf = [0u8; 2];
    tls.read_exact(&mut buf).await?;
    assert_eq!(&buf, b"ok");
    let _server = server_task.await.unwrap()?;
    Ok(tls.get_ref().1.alpn_protocol().map(|p| p.to_vec()))
}

#[test]
fn init_writes_both_files_and_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("certs");
    let ca = LocalCa::init(&dir, false).unwrap();
    assert_eq!(ca.cert_path(), dir.join("ca.pem"));
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("ca-key.pem")), 0o600);
    let on_disk = std::fs::read_to_string(dir.join("ca.pem")).unwrap();
    assert_eq!(ca.cert_pem(), on_disk);
    assert!(on_disk.starts_with("-----BEGIN CERTIFICATE-----"));
    let key = std::fs::read_to_string(dir.join("ca-key.pem")).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));

    let err = LocalCa::init(&dir, false).unwrap_err();
    assert!(matches!(err, TlsError::CaExists(_)), "{err}");
    assert!(err.to_string().contains("ca.pem"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
        on_disk
    );

    let forced = LocalCa::init(&dir, true).unwrap();
    assert_ne!(forced.cert_pem(), on_disk);
    assert_eq!(mode(&dir.join("ca-key.pem")), 0o600);
}

#[tokio::test]
async fn leaf_minted_after_load_verifies_against_init_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let created = LocalCa::init(tmp.path(), false).unwrap();
    let pem = created.cert_pem().to_string();
    drop(created);
    let ca = LocalCa::load(tmp.path()).unwrap();
    assert_eq!(ca.cert_pem(), pem);
    let leaves = LeafCache::new(ca, DEFAULT_LEAF_CACHE);
    let server = leaves.server_config("API.Example.test").unwrap();
    let ca_pem = tmp.path().join("ca.pem");
    let alpn = handshake(
        server.clone(),
        client_trusting(&ca_pem, &[b"h2", b"http/1.1"]),
        "api.example.test",
    );
    assert_eq!(alpn.await.unwrap().as_deref(), Some(&b"h2"[..]));
    let alpn = handshake(
        server.clone(),
        client_trusting(&ca_pem, &[b"http/1.1"]),
        "api.example.test",
    );
    assert_eq!(alpn.await.unwrap().as_deref(), Some(&b"http/1.1"[..]));
    // The leaf is for its own host only.
    let wrong = handshake(server, client_trusting(&ca_pem, &[]), "other.example.test").await;
    assert!(wrong.is_err());
}

#[test]
fn load_refuses_a_key_open_to_others() {
    let tmp = tempfile::tempdir().unwrap();
    LocalCa::init(tmp.path(), false).unwrap();
    let key = tmp.path().join("ca-key.pem");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = LocalCa::load(tmp.path()).unwrap_err();
    assert!(
        matches!(err, TlsError::KeyPermissions { mode: 0o644, .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("chmod 600") && msg.contains("ca-key.pem"),
        "{msg}"
    );
}

#[test]
fn load_errors_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let err = LocalCa::load(tmp.path()).unwrap_err();
    assert!(err.to_string().contains("ca.pem"), "{err}");

    LocalCa::init(tmp.path(), false).unwrap();
    std::fs::write(tmp.path().join("ca.pem"), "not pem").unwrap();
    let err = LocalCa::load(tmp.path()).unwrap_err();
    assert!(
        matches!(err, TlsError::Parse { .. }) && err.to_string().contains("ca.pem"),
        "{err}"
    );

    // A certificate from another CA does not match the key.
    let other = tempfile::tempdir().unwrap();
    LocalCa::init(other.path(), false).unwrap();
    std::fs::copy(other.path().join("ca.pem"), tmp.path().join("ca.pem")).unwrap();
    let err = LocalCa::load(tmp.path()).unwrap_err();
    assert!(matches!(err, TlsError::CaUnusable { .. }), "{err}");
}

#[test]
fn load_or_init_creates_then_loads_the_same_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let (first, created) = LocalCa::load_or_init(tmp.path()).unwrap();
    assert!(created);
    let (second, created) = LocalCa::load_or_init(tmp.path()).unwrap();
    assert!(!created);
    assert_eq!(first.cert_pem(), second.cert_pem());

    std::fs::remove_file(tmp.path().join("ca.pem")).unwrap();
    let err = LocalCa::load_or_init(tmp.path()).unwrap_err();
    assert!(matches!(err, TlsError::CaIncomplete { .. }), "{err}");
    assert!(tmp.path().join("ca-key.pem").exists());
    assert!(!tmp.path().join("ca.pem").exists());
}

#[test]
fn leaf_cache_shares_per_host_and_stays_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let leaves = LeafCache::new(LocalCa::init(tmp.path(), false).unwrap(), 2);
    let a = leaves.server_config("a.example.test").unwrap();
    let again = leaves.server_config("A.EXAMPLE.test.").unwrap();
    assert!(Arc::ptr_eq(&a, &again));
    assert_eq!(leaves.len(), 1);
    for host in ["b.test", "c.test", "d.test", "e.test"] {
        leaves.server_config(host).unwrap();
        assert!(leaves.len() <= 2, "len {}", leaves.len());
    }
}

#[tokio::test]
async fn ip_literal_hosts_get_an_ip_san() {
    let tmp = tempfile::tempdir().unwrap();
    let leaves = LeafCache::new(LocalCa::init(tmp.path(), false).unwrap(), 8);
    let ca_pem = tmp.path().join("ca.pem");
    for (host, name) in [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("0:0::1", "::1"),
    ] {
        let server = leaves.server_config(host).unwrap();
        let alpn = handshake(server, client_trusting(&ca_pem, &[b"h2"]), name).await;
        assert_eq!(alpn.unwrap().as_deref(), Some(&b"h2"[..]), "{host}");
    }
    assert_eq!(leaves.len(), 2);
}

#[test]
fn invalid_hosts_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let leaves = LeafCache::new(LocalCa::init(tmp.path(), false).unwrap(), 8);
    for host in [
        "",
        ".",
        "exa mple.test",
        "bad_host!",
        "[not-an-ip]",
        "[127.0.0.1]",
        "a.test:443",
    ] {
        let err = leaves.server_config(host).unwrap_err();
        assert!(matches!(err, TlsError::InvalidHost { .. }), "{host}: {err}");
    }
    assert!(leaves.is_empty());
}

#[tokio::test]
async fn upstream_config_trusts_the_extra_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = LocalCa::init(tmp.path(), false).unwrap();
    let extra = ca.cert_path().to_path_buf();
    let leaves = LeafCache::new(ca, 8);
    let client = Arc::new(upstream_client_config(Some(&extra)).unwrap());
    let server = leaves.server_config("localhost").unwrap();
    let alpn = handshake(server, client, "localhost").await.unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));

    // Without the extra root the same server is not trusted (unless the system store is
    // empty, in which case building the config fails).
    if let Ok(plain) = upstream_client_config(None) {
        let server = leaves.server_config("localhost").unwrap();
        assert!(handshake(server, Arc::new(plain), "localhost")
            .await
            .is_err());
    }
}

#[test]
fn upstream_config_errors_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.pem");
    let err = upstream_client_config(Some(&missing)).unwrap_err();
    assert!(matches!(err, TlsError::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.pem"), "{err}");

    let empty = tmp.path().join("empty.pem");
    std::fs::write(&empty, "no certificates here\n").unwrap();
    let err = upstream_client_config(Some(&empty)).unwrap_err();
    assert!(matches!(err, TlsError::NoCertificates(_)), "{err}");
    assert!(err.to_string().contains("empty.pem"), "{err}");

    // A key alone is not a certificate either.
    LocalCa::init(tmp.path(), false).unwrap();
    let err = upstream_client_config(Some(&tmp.path().join("ca-key.pem"))).unwrap_err();
    assert!(matches!(err, TlsError::NoCertificates(_)), "{err}");
}
