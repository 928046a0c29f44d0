//! The forward-proxy benchmark's upstream (`bench/proxy.sh`): a bare hyper 1 server on loopback
//! that answers `POST /tool` (any path, and GET too) with a small JSON body, over plain HTTP or TLS,
//! HTTP/1.1 keep-alive (and h2 when a TLS client offers it by ALPN). It does nothing else, so
//! "direct" calls measure the client, the kernel and hyper, and calls through a proxy measure
//! what the proxy adds.
//!
//! Usage:
//!
//! ```text
//! echo_upstream --gen-ca DIR                      # writes DIR/ca.pem, DIR/cert.pem, DIR/key.pem
//! echo_upstream [--listen 127.0.0.1:0]             # plain HTTP
//! echo_upstream --cert DIR/cert.pem --key DIR/key.pem   # TLS
//! ```
//!
//! `--gen-ca` makes a throwaway CA (rcgen) and a leaf for `127.0.0.1` and `localhost` signed by
//! it; pass `ca.pem` to toolgate with `--upstream-ca` and to `proxy_load --ca`. The server prints
//! `listening <addr>` once bound and serves until killed.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::convert::Infallible;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The answer to every `POST` (and `GET`): a tool result about the size of a small REST reply.
const REPLY: &[u8] = br#"{"ok":true,"tool":"bench.echo","result":{"id":"r-1","status":"done"}}"#;

#[derive(clap::Parser)]
#[command(about = "Plain or TLS echo upstream for bench/proxy.sh")]
struct Args {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Leaf certificate chain (PEM); with --key, serve TLS.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Private key of --cert (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Write a throwaway CA and a leaf for 127.0.0.1/localhost into DIR, then exit.
    #[arg(long, value_name = "DIR")]
    gen_ca: Option<PathBuf>,
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let answered = req.method() == Method::POST || req.method() == Method::GET;
    // Read the whole body, as a real tool endpoint would, before answering.
    let _ = req.into_body().collect().await;
    let resp = if answered {
        Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(REPLY)))
    } else {
        Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .body(Full::new(Bytes::new()))
    };
    Ok(resp.unwrap_or_default())
}

/// Writes `ca.pem`, `cert.pem` (leaf then CA) and `key.pem` (the leaf's key) into `dir`.
fn gen_ca(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    std::fs::create_dir_all(dir)?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "toolgate bench upstream CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key)?;

    let leaf_key = KeyPair::generate()?;
    let mut leaf_params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key)?;

    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(dir.join("cert.pem"), format!("{}{}", leaf.pem(), ca.pem()))?;
    std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem())?;
    Ok(())
}

fn tls_config(
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::ServerConfig>, Box<dyn std::error::Error>> {
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = <Args as clap::Parser>::parse();
    if let Some(dir) = &args.gen_ca {
        return gen_ca(dir);
    }
    let tls = match (&args.cert, &args.key) {
        (Some(c), Some(k)) => Some(tokio_rustls::TlsAcceptor::from(tls_config(c, k)?)),
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(handle);
            let builder = Builder::new(TokioExecutor::new());
            match tls {
                Some(acceptor) => {
                    if let Ok(s) = acceptor.accept(stream).await {
                        let _ = builder.serve_connection(TokioIo::new(s), service).await;
                    }
                }
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
    }
}
