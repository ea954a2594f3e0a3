//! TLS and mutual TLS: a [`Connector`] that dials TCP, keeps a handle on
//! the socket, and runs a rustls handshake over it.
//!
//! The crypto provider is rustls' `ring`, chosen explicitly rather than
//! through a process-wide default, as in the server.

use std::{
    fmt, io,
    net::IpAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{
        CertificateDer, InvalidDnsNameError, PrivateKeyDer, ServerName,
        pem::{self, PemObject},
    },
};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::{
    connector::{Connection, Connector, SocketShutdown},
    error::Error,
};

/// Why TLS settings could not be turned into a [`TlsConnector`]. Displays
/// as one line naming the file concerned; the cause is the
/// [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read the TLS {what} file {}", path.display())]
    Read {
        /// Which file: `CA`, `client certificate` or `client key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A file is not valid PEM, or holds no object of the expected kind.
    #[error("the TLS {what} file {} holds no valid PEM {expected}", path.display())]
    Pem {
        /// Which file: `CA`, `client certificate` or `client key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was looked for: `certificate` or `private key`.
        expected: &'static str,
        /// What is wrong with the file.
        #[source]
        source: pem::Error,
    },
    /// A trust root is not a certificate rustls can anchor a chain to.
    #[error("a certificate {} is not a usable trust anchor", Origin(.path.as_deref(), None))]
    TrustRoot {
        /// The CA file it came from; `None` if it was given as DER.
        path: Option<PathBuf>,
        /// rustls' reason.
        #[source]
        source: rustls::Error,
    },
    /// The client certificate and key do not make a usable identity (for
    /// example, the key does not belong to the certificate).
    #[error("the client certificate and key {} are not a usable identity", Origin(.cert.as_deref(), .key.as_deref()))]
    ClientIdentity {
        /// The certificate file; `None` if the identity was given as DER.
        cert: Option<PathBuf>,
        /// The key file; `None` if the identity was given as DER.
        key: Option<PathBuf>,
        /// rustls' reason.
        #[source]
        source: rustls::Error,
    },
    /// No trust roots were given, so no server could be verified.
    #[error(
        "no TLS trust roots: give a CA file (with_ca_file) or certificates (with_root_certificates)"
    )]
    NoTrustRoots,
    /// The server name is neither a DNS name nor an IP address.
    #[error("{name:?} is not a valid TLS server name (a DNS name or an IP address)")]
    ServerName {
        /// The name that was given.
        name: String,
        /// The parser's reason.
        #[source]
        source: InvalidDnsNameError,
    },
    /// The crypto provider cannot build a client configuration.
    #[error("the ring crypto provider cannot make a TLS client configuration")]
    Provider(#[source] rustls::Error),
}

/// Where certificates or keys came from: `from FILE`, `from FILE and
/// FILE`, or `given as DER`.
struct Origin<'a>(Option<&'a Path>, Option<&'a Path>);

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(first), Some(second)) => {
                write!(f, "from {} and {}", first.display(), second.display())
            }
            (Some(path), None) | (None, Some(path)) => write!(f, "from {}", path.display()),
            (None, None) => f.write_str("given as DER"),
        }
    }
}

/// TLS (and, with a client certificate, mutual TLS) to the server.
///
/// Each connection dials TCP with `TCP_NODELAY`, keeps a
/// [`SocketShutdown`] of the socket, so that dropping a guard still shuts
/// the socket down inside `Drop` and the server promotes the next waiter at
/// once, and then runs the handshake. The client's connect timeout covers
/// the handshake.
///
/// The server name checked against the server's certificate is the host
/// part of the client's address (an IP literal is checked against the
/// certificate's IP addresses), unless [`with_server_name`] overrides it.
///
/// ```no_run
/// # async fn demo() -> Result<(), monolock_client::Error> {
/// use std::time::Duration;
/// use monolock_client::{Client, TlsConnector};
///
/// let tls = TlsConnector::builder()
///     .with_ca_file("/etc/monolock/ca.pem")
///     // For mTLS: the identity the server's ACL and audit log see.
///     .with_client_cert_files("/etc/monolock/worker.pem", "/etc/monolock/worker.key")
///     .build()?;
/// let client = Client::new("locks.internal:7070").with_connector(tls);
/// let lock = client.acquire("nightly/import", Duration::from_secs(2)).await?;
/// # drop(lock);
/// # Ok(()) }
/// ```
///
/// # Errors
/// A failed handshake is an [`Error::Connect`] whose source is an
/// [`io::Error`] wrapping the [`rustls::Error`] (an untrusted server
/// certificate, say). It is permanent: the `*_retrying` forms return it at
/// once, since the same handshake fails the same way. Under TLS 1.3
/// a server refuses a client certificate (or its absence) only after the
/// client has finished its side of the handshake; that refusal, an alert
/// before the server's first reply, is reported as [`Error::Connect`] too.
///
/// [`with_server_name`]: TlsConnector::with_server_name
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl TlsConnector {
    /// Starts a configuration: trust roots, an optional client identity,
    /// an optional server name.
    pub fn builder() -> TlsConnectorBuilder {
        TlsConnectorBuilder::default()
    }

    /// A connector with a rustls configuration of your own (custom
    /// verifiers, resumption, ALPN, another provider). The crate re-exports
    /// the [`rustls`] it was built with.
    pub fn from_config(config: Arc<ClientConfig>) -> Self {
        Self {
            config,
            server_name: None,
        }
    }

    /// Checks the server's certificate against `name` (a DNS name or an IP
    /// address) instead of the host part of the address.
    ///
    /// # Errors
    /// [`Error::Tls`] with [`TlsError::ServerName`] if `name` is neither.
    pub fn with_server_name(mut self, name: impl Into<String>) -> Result<Self, Error> {
        self.server_name = Some(parse_server_name(name.into())?);
        Ok(self)
    }

    /// The rustls configuration.
    pub fn config(&self) -> &Arc<ClientConfig> {
        &self.config
    }

    /// The server name override, if any.
    pub fn server_name(&self) -> Option<&ServerName<'static>> {
        self.server_name.as_ref()
    }
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Connector for TlsConnector {
    type Stream = TlsStream<TcpStream>;

    async fn connect(&self, addr: &str) -> io::Result<Connection<Self::Stream>> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => server_name_of(addr)
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?,
        };
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        // Taken before the handshake: the stream moves into the TLS layer.
        let shutdown = SocketShutdown::new(&tcp)?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
            .connect(name, tcp)
            .await?;
        Ok(Connection {
            stream,
            shutdown: Some(shutdown),
        })
    }
}

/// Builds a [`TlsConnector`]; nothing is read before [`build`].
///
/// [`build`]: TlsConnectorBuilder::build
#[derive(Default)]
#[must_use = "call build() to get a connector"]
pub struct TlsConnectorBuilder {
    ca_files: Vec<PathBuf>,
    roots: Vec<CertificateDer<'static>>,
    identity: Option<Identity>,
    server_name: Option<String>,
}

enum Identity {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    Der {
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    },
}

impl TlsConnectorBuilder {
    /// Trusts the CA certificates in the PEM file at `path` (every
    /// certificate in it). May be given several times.
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_files.push(path.into());
        self
    }

    /// Trusts these CA certificates (DER).
    pub fn with_root_certificates(
        mut self,
        certs: impl IntoIterator<Item = CertificateDer<'static>>,
    ) -> Self {
        self.roots.extend(certs);
        self
    }

    /// Presents the certificate chain in the PEM file `cert` (leaf first)
    /// with the private key in the PEM file `key` (PKCS#8, PKCS#1 or SEC1):
    /// mutual TLS. The server takes the client's identity from the leaf.
    pub fn with_client_cert_files(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.identity = Some(Identity::Files {
            cert: cert.into(),
            key: key.into(),
        });
        self
    }

    /// Presents this certificate chain (DER, leaf first) and private key:
    /// mutual TLS.
    pub fn with_client_cert(
        mut self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Self {
        self.identity = Some(Identity::Der { chain, key });
        self
    }

    /// Checks the server's certificate against `name` (a DNS name or an IP
    /// address) instead of the host part of the client's address.
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Reads the files and builds the connector.
    ///
    /// # Errors
    /// [`Error::Tls`] naming what is wrong: a file that cannot be read or
    /// holds no valid PEM, a trust root rustls refuses, a key that does not
    /// match its certificate, no trust roots at all, an invalid server
    /// name. These are invalid input, never retried.
    pub fn build(self) -> Result<TlsConnector, Error> {
        let mut roots = RootCertStore::empty();
        for path in &self.ca_files {
            for cert in read_certs("CA", path)? {
                roots.add(cert).map_err(|source| TlsError::TrustRoot {
                    path: Some(path.clone()),
                    source,
                })?;
            }
        }
        for cert in self.roots {
            roots
                .add(cert)
                .map_err(|source| TlsError::TrustRoot { path: None, source })?;
        }
        if roots.is_empty() {
            return Err(TlsError::NoTrustRoots.into());
        }
        let server_name = self.server_name.map(parse_server_name).transpose()?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Provider)?
            .with_root_certificates(roots);
        let config = match self.identity {
            None => builder.with_no_client_auth(),
            Some(Identity::Der { chain, key }) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|source| TlsError::ClientIdentity {
                    cert: None,
                    key: None,
                    source,
                })?,
            Some(Identity::Files { cert, key }) => {
                let chain = read_certs("client certificate", &cert)?;
                let key_der = read_key(&key)?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|source| TlsError::ClientIdentity {
                        cert: Some(cert),
                        key: Some(key),
                        source,
                    })?
            }
        };
        Ok(TlsConnector {
            config: Arc::new(config),
            server_name,
        })
    }
}

impl fmt::Debug for TlsConnectorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key material.
        let identity = self.identity.as_ref().map(|identity| match identity {
            Identity::Files { cert, .. } => cert.display().to_string(),
            Identity::Der { .. } => "DER".to_owned(),
        });
        f.debug_struct("TlsConnectorBuilder")
            .field("ca_files", &self.ca_files)
            .field("roots", &self.roots.len())
            .field("client_cert", &identity)
            .field("server_name", &self.server_name)
            .finish()
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |source| TlsError::Pem {
        what,
        path: path.to_owned(),
        expected: "certificate",
        source,
    };
    let certs = CertificateDer::pem_slice_iter(&read(what, path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error)?;
    if certs.is_empty() {
        return Err(pem_error(pem::Error::NoItemsFound));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let what = "client key";
    PrivateKeyDer::from_pem_slice(&read(what, path)?).map_err(|source| TlsError::Pem {
        what,
        path: path.to_owned(),
        expected: "private key",
        source,
    })
}

/// `name` as a server name: an IP address if it parses as one, else a DNS
/// name.
fn parse_server_name(name: String) -> Result<ServerName<'static>, TlsError> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    ServerName::try_from(name.clone()).map_err(|source| TlsError::ServerName { name, source })
}

/// The server name of `addr` (`host:port` or `[IPv6]:port`): its host.
fn server_name_of(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _port)| host);
    let host = host
        .strip_prefix('[')
        .and_then(|host| host.strip_suffix(']'))
        .unwrap_or(host);
    parse_server_name(host.to_owned())
}

/// The error to report as a failed connect if `err`, read before the
/// server's first reply, is the server refusing the handshake.
///
/// Under TLS 1.3 the client finishes its side of the handshake before the
/// server has checked the client's certificate; a server that refuses it
/// (or its absence) sends an alert, which the client reads in place of the
/// first reply.
pub(crate) fn refused_handshake(err: &io::Error) -> Option<io::Error> {
    match err.get_ref()?.downcast_ref::<rustls::Error>()? {
        alert @ rustls::Error::AlertReceived(_) => Some(io::Error::new(err.kind(), alert.clone())),
        _ => None,
    }
}

/// Whether a failed handshake was answered in plain text: the first
/// bytes back were no TLS record (a monolock port without TLS answers the
/// ClientHello with an ERROR frame).
pub(crate) fn answered_in_plain_text(err: &io::Error) -> bool {
    err.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| matches!(tls, rustls::Error::InvalidMessage(_)))
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use rustls::AlertDescription;

    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        let ip = |addr: &str| match server_name_of(addr).unwrap() {
            ServerName::IpAddress(ip) => IpAddr::from(ip),
            other => panic!("{addr}: expected an IP address, got {other:?}"),
        };
        assert_eq!(ip("127.0.0.1:7070"), IpAddr::from(Ipv4Addr::LOCALHOST));
        assert_eq!(ip("[::1]:7070"), IpAddr::from(Ipv6Addr::LOCALHOST));
        match server_name_of("locks.internal:7070").unwrap() {
            ServerName::DnsName(name) => assert_eq!(name.as_ref(), "locks.internal"),
            other => panic!("expected a DNS name, got {other:?}"),
        }
        assert!(matches!(
            server_name_of("not a host:7070"),
            Err(TlsError::ServerName { .. })
        ));
    }

    #[test]
    fn only_an_alert_is_a_refused_handshake() {
        let alert = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        let err = io::Error::new(io::ErrorKind::InvalidData, alert);
        let refused = refused_handshake(&err).expect("an alert");
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
        assert!(
            refused.to_string().contains("CertificateRequired"),
            "{refused}"
        );
        let other = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert!(refused_handshake(&other).is_none());
        assert!(refused_handshake(&io::ErrorKind::ConnectionReset.into()).is_none());
    }

    #[test]
    fn nothing_to_trust_is_refused() {
        let err = TlsConnector::builder().build().unwrap_err();
        assert!(matches!(err, Error::Tls(TlsError::NoTrustRoots)));
        assert!(!err.is_temporary());
    }
}
