//! TLS by rustls with the ring provider. Outgoing (webhooks, HTTP upstreams):
//! plain TCP, or TLS for `https://` URLs, with server certificates checked against
//! the Mozilla root set shipped in `webpki-roots` plus the CA file an upstream
//! names (`tls_ca_file`), never skipped. Incoming: the HTTP front serves https
//! when `gateway.tls_cert` and `gateway.tls_key` name a certificate and its key.

pub mod fetch;
pub mod target;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A byte stream to a server, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

pub type Stream = Box<dyn Io>;

/// How long connecting (and the TLS handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn provider() -> Arc<tokio_rustls::rustls::crypto::CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

fn roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots
}

fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, String> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The connector for `https://` URLs with the public roots only (webhooks).
pub fn public_tls() -> Result<TlsConnector, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| client_config(roots()))
        .clone()
        .map(TlsConnector::from)
}

/// The connector for an upstream: the public roots plus the CAs in `ca_file`.
pub fn tls_with(ca_file: Option<&Path>) -> Result<TlsConnector, String> {
    let Some(path) = ca_file else {
        return public_tls();
    };
    let shown = path.display();
    let mut roots = roots();
    let mut added = 0;
    for cert in CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("tls_ca_file: cannot read {shown}: {e}"))?
    {
        let cert = cert.map_err(|e| format!("tls_ca_file: {shown} is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("tls_ca_file: a certificate in {shown} is not usable: {e}"))?;
        added += 1;
    }
    if added == 0 {
        return Err(format!("tls_ca_file: {shown} holds no certificate"));
    }
    client_config(roots).map(TlsConnector::from)
}

/// The acceptor for the HTTP front: a PEM certificate chain and its private key.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("gateway.tls_cert: cannot read {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("gateway.tls_cert: {} is not PEM: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "gateway.tls_cert: {} holds no certificate",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "gateway.tls_key: {} holds no usable private key: {e}",
            key.display()
        )
    })?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("gateway.tls_cert / tls_key do not go together: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Connects to `host:port`, through TLS when `tls` is given (the certificate
/// must be valid for `host`).
pub async fn connect(host: &str, port: u16, tls: Option<&TlsConnector>) -> Result<Stream, String> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port)))
        .await
        .map_err(|_| "connecting timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = ServerName::try_from(host.to_owned())
        .map_err(|_| format!("'{host}' is not a name a TLS certificate can be checked against"))?;
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(name, tcp))
        .await
        .map_err(|_| "the TLS handshake timed out".to_owned())?
        .map_err(|e| format!("TLS: {e}"))?;
    Ok(Box::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_files_are_read_or_refused_clearly() {
        let dir = std::env::temp_dir().join(format!("warden-net-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        assert_eq!(
            tls_with(Some(&empty)).err().unwrap(),
            format!("tls_ca_file: {} holds no certificate", empty.display())
        );
        let missing = dir.join("missing.pem");
        assert!(tls_with(Some(&missing))
            .err()
            .unwrap()
            .starts_with("tls_ca_file: cannot read "));
        let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/tls/ca.pem");
        assert!(tls_with(Some(&ca)).is_ok());
        assert!(public_tls().is_ok());
    }
}
