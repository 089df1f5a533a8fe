//! TLS for `rediss://` nodes (feature `tls`): the client configuration,
//! built once per manager, and a stream that drives a rustls
//! `ClientConnection` over our own TCP socket, so that the connection keeps
//! its deadlines and its non-blocking reads past a deadline.
//!
//! rustls with the `ring` provider, always passed explicitly
//! (`builder_with_provider`): the process-wide default provider is never
//! read nor installed, so an application that installed another one, or
//! links several, is not affected. Roots: Mozilla's (webpki-roots), or
//! only the PEM roots given to the builder.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};

use crate::base::error::Error;
use crate::base::node_error::TlsFailure;

/// What the builder was given: private roots and a client certificate.
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    pub(crate) roots: Vec<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("TlsOptions")
            .field("roots", &self.roots.len())
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}

/// The options, and the client configurations built from them when a
/// node first needs one: one verifying, one for `#insecure` URLs.
#[derive(Default)]
pub(crate) struct Configs {
    pub(crate) options: TlsOptions,
    secure: std::sync::OnceLock<Arc<ClientConfig>>,
    insecure: std::sync::OnceLock<Arc<ClientConfig>>,
}

impl Configs {
    pub(crate) fn new(options: TlsOptions) -> Configs {
        Configs {
            options,
            ..Configs::default()
        }
    }

    /// The configuration for a node, built once.
    pub(crate) fn config(&self, insecure: bool) -> Result<Arc<ClientConfig>, Error> {
        let slot = if insecure {
            &self.insecure
        } else {
            &self.secure
        };
        if let Some(config) = slot.get() {
            return Ok(config.clone());
        }
        let config = config(&self.options, insecure)?;
        Ok(slot.get_or_init(|| config).clone())
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The client configuration: verifying (against the given roots, else
/// Mozilla's) or, for `#insecure` URLs, accepting any certificate.
pub(crate) fn config(options: &TlsOptions, insecure: bool) -> Result<Arc<ClientConfig>, Error> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid_config(format!("TLS: {e}")))?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        if options.roots.is_empty() {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        for pem in &options.roots {
            let certs = certificates(pem, "tls_root_cert")?;
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    Error::invalid_config(format!("tls_root_cert: unusable certificate: {e}"))
                })?;
            }
        }
        builder.with_root_certificates(roots)
    };
    let config = match &options.client {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            let certs = certificates(cert_pem, "tls_client_cert")?;
            let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
                Error::invalid_config(format!("tls_client_cert: no usable private key: {e}"))
            })?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| Error::invalid_config(format!("tls_client_cert: {e}")))?
        }
    };
    Ok(Arc::new(config))
}

/// The certificates in a PEM text; at least one.
fn certificates(pem: &[u8], setting: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::invalid_config(format!("{setting}: cannot read the PEM: {e}")))?;
    if certs.is_empty() {
        return Err(Error::invalid_config(format!(
            "{setting}: no CERTIFICATE in the PEM given"
        )));
    }
    Ok(certs)
}

/// The server name to verify: the URL's host, a DNS name or an IP
/// address.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| {
        Error::invalid_config(format!("{host:?} is not a usable TLS server name: {e}"))
    })
}

/// A TLS session over a TCP socket, driven by hand so that the socket's
/// timeouts and non-blocking mode apply to every read and write.
pub(crate) struct TlsStream {
    session: ClientConnection,
    pub(crate) tcp: TcpStream,
}

impl TlsStream {
    /// Runs the handshake on `tcp` by `deadline`.
    pub(crate) fn connect(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        tcp: TcpStream,
        deadline: Instant,
    ) -> io::Result<TlsStream> {
        let session = ClientConnection::new(config, name).map_err(failure)?;
        let mut stream = TlsStream { session, tcp };
        // The server's first bytes, seen before TLS takes them: a plain
        // server answers the ClientHello with a RESP error.
        let mut first: Option<Vec<u8>> = None;
        while stream.session.is_handshaking() {
            let left = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                })?;
            stream.tcp.set_read_timeout(Some(left))?;
            stream.tcp.set_write_timeout(Some(left))?;
            if stream.session.wants_write() {
                stream.session.write_tls(&mut stream.tcp)?;
            } else if stream.session.wants_read() {
                if first.is_none() {
                    let mut peeked = [0u8; 48];
                    let n = stream.tcp.peek(&mut peeked)?;
                    first = Some(peeked[..n].to_vec());
                }
                if stream.session.read_tls(&mut stream.tcp)? == 0 {
                    // Ambiguous (a proxy whose server is down, a server
                    // that dropped us): a connection failure, not TLS's.
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed during the TLS handshake",
                    ));
                }
                if let Err(e) = stream.session.process_new_packets() {
                    // Tell the server why, best effort.
                    let _ = stream.send_pending();
                    return Err(match first.as_deref() {
                        Some(said @ [b'-' | b'+', ..]) => failure(format!(
                            "the server answered without TLS ({:?}): a plain server on this \
                             port? give it as redis://",
                            String::from_utf8_lossy(said)
                                .lines()
                                .next()
                                .unwrap_or_default()
                        )),
                        _ => failure(e),
                    });
                }
            }
        }
        stream.send_pending()?;
        Ok(stream)
    }

    /// Writes out whatever the session has queued.
    fn send_pending(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            self.session.write_tls(&mut self.tcp)?;
        }
        Ok(())
    }
}

impl Read for TlsStream {
    /// Plaintext already decrypted comes first; the socket is read only
    /// when there is none (so a reply received before a deadline is
    /// returned after it without waiting, as on plain TCP). A socket that
    /// would block or times out reports so, as the plain socket does.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.session.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.session.read_tls(&mut self.tcp)? == 0 {
                return Ok(0);
            }
            if let Err(e) = self.session.process_new_packets() {
                let _ = self.send_pending();
                return Err(failure(e));
            }
        }
    }
}

impl Write for TlsStream {
    /// Encrypts `buf` and sends it: rustls counts bytes as written once
    /// buffered, so every record is flushed to the socket before
    /// returning.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.session.writer().write(buf)?;
        self.send_pending()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_pending()
    }
}

/// A TLS failure as an I/O error that the connection layer recognises.
fn failure(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, TlsFailure(e.to_string()))
}

/// Accepts any server certificate (`#insecure` URLs). Signatures are
/// still checked, so the session is encrypted, but the server is not
/// authenticated: anyone in the path can impersonate it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
