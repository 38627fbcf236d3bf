//! TLS for the server: loading the certificate chain and private key given
//! by [`ServerOptions::tls_cert`](super::ServerOptions::tls_cert) and
//! [`ServerOptions::tls_key`](super::ServerOptions::tls_key) (PEM files), and
//! the stream a connection speaks over once it asked for TLS (SSLRequest)
//! and the handshake succeeded.
//!
//! Both files are read and checked at start: missing, unreadable, not PEM,
//! no certificate, no private key, or a key that does not match the
//! certificate's public key are each refused with an error naming the file.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;

use crate::Error;

/// Reads `cert` (a PEM certificate chain, the server's own certificate
/// first) and `key` (its PEM private key: PKCS#8, PKCS#1 or SEC1) and
/// builds the TLS configuration the server answers SSLRequest with.
pub(crate) fn load(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, Error> {
    let cert_pem = read(cert, "--tls-cert")?;
    let key_pem = read(key, "--tls-key")?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| not_pem(cert, "--tls-cert", "certificate", e))?;
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "--tls-cert {}: no PEM certificate in the file (expected a \"BEGIN CERTIFICATE\" block)",
            cert.display()
        )));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        pem::Error::NoItemsFound => Error::Config(format!(
            "--tls-key {}: no PEM private key in the file (expected a \"BEGIN PRIVATE KEY\", \
             \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\" block)",
            key.display()
        )),
        e => not_pem(key, "--tls-key", "private key", e),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| {
            Error::Config(format!(
                "--tls-cert {} with --tls-key {}: {}",
                cert.display(),
                key.display(),
                match e {
                    rustls::Error::InconsistentKeys(_) => {
                        "the private key does not match the certificate's public key".to_string()
                    }
                    e => format!("not a usable certificate and key: {e}"),
                }
            ))
        })?;
    Ok(Arc::new(config))
}

fn read(path: &Path, option: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Config(format!("{option} {}: {e}", path.display())))
}

fn not_pem(path: &Path, option: &str, what: &str, e: pem::Error) -> Error {
    Error::Config(format!(
        "{option} {}: not a PEM {what}: {e}",
        path.display()
    ))
}

/// A connection's byte stream: plain TCP, or TLS over it after a
/// successful handshake.
pub(crate) enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Io {
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Io::Tls(_))
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
