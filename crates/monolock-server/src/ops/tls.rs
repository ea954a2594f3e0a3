//! TLS and mutual TLS for the protocol port, with reloadable files.
//!
//! Three modes: plaintext (no [`ServerTls`]), TLS (certificate and key), and
//! mTLS (plus a client CA pool: every client must present a certificate that
//! verifies against it, or the handshake fails). The crypto provider is
//! rustls' `ring`, chosen explicitly rather than through a process default.
//!
//! The files are re-read by [`ServerTls::reload`]: new connections use the
//! new configuration, open sessions keep the one they shook hands with, and a
//! reload that fails leaves the previous configuration in force.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, PoisonError, RwLock},
};

use rustls::{
    RootCertStore,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};
use tokio_rustls::TlsAcceptor;
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

/// Where the PEM files of the TLS configuration live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (leaf first).
    pub cert: PathBuf,
    /// The server's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA pool client certificates must chain to; `Some` enables mTLS.
    pub client_ca: Option<PathBuf>,
}

/// Why a TLS configuration could not be built. Displays as one line naming
/// the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read, or is over
    /// [`MAX_CONFIG_FILE_BYTES`](crate::MAX_CONFIG_FILE_BYTES).
    #[error("TLS {what} {}: {source}", path.display())]
    Read {
        /// Which file: `certificate`, `key` or `client CA`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid PEM, or holds no object of the expected kind.
    #[error("TLS {what} {}: {problem}", path.display())]
    Pem {
        /// Which file: `certificate`, `key` or `client CA`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The certificate and key do not make a usable server identity (for
    /// example, the key does not belong to the certificate).
    #[error("TLS certificate {} with key {}: {source}", cert.display(), key.display())]
    CertifiedKey {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls' reason.
        #[source]
        source: rustls::Error,
    },
    /// The client CA pool cannot verify client certificates.
    #[error("TLS client CA {}: {problem}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// The protocol port's TLS configuration, reloadable while serving.
///
/// ```no_run
/// use std::sync::Arc;
/// use monolock_server::{ServerConfig, ServerTls, TlsFiles};
///
/// let tls = ServerTls::load(TlsFiles {
///     cert: "/etc/monolock/server.pem".into(),
///     key: "/etc/monolock/server.key".into(),
///     client_ca: Some("/etc/monolock/clients-ca.pem".into()),
/// })
/// .expect("valid TLS files");
/// let config = ServerConfig::default().with_tls(Arc::new(tls));
/// # let _ = config;
/// ```
pub struct ServerTls {
    files: TlsFiles,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl crate::core::config::ProtocolTls for ServerTls {
    fn acceptor(&self) -> TlsAcceptor {
        ServerTls::acceptor(self)
    }

    fn identity_of_certificate(&self, der: &[u8]) -> String {
        identity_of_certificate(der)
    }
}

impl ServerTls {
    /// Reads the files and builds the configuration.
    ///
    /// # Errors
    /// A [`TlsError`] naming the file that is missing, unreadable or invalid.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let config = build(&files)?;
        Ok(Self {
            files,
            current: RwLock::new(Arc::new(config)),
        })
    }

    /// Re-reads the files. On success every new connection uses them; open
    /// sessions are untouched.
    ///
    /// # Errors
    /// As [`ServerTls::load`]; the previous configuration stays in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = build(&self.files)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        Ok(())
    }

    /// The files this configuration is read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// True when clients must present a certificate (mTLS).
    pub fn is_mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// An acceptor with the configuration currently in force.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(
            &self.current.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

fn build(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certs("certificate", &files.cert)?;
    let key_pem = read("key", &files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|err| TlsError::Pem {
        what: "key",
        path: files.key.clone(),
        problem: pem_problem(&err, "private key"),
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::CertifiedKey {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::CertifiedKey {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })
}

/// Every client must present a certificate chaining to the pool at `path`.
fn client_verifier(
    path: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs("client CA", path)? {
        roots.add(cert).map_err(|err| TlsError::ClientCa {
            path: path.to_owned(),
            problem: err.to_string(),
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|err| TlsError::ClientCa {
            path: path.to_owned(),
            problem: err.to_string(),
        })
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::ops::config_file::read_bounded(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Pem {
            what,
            path: path.to_owned(),
            problem: pem_problem(&err, "certificate"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.to_owned(),
            problem: "no PEM certificate found".to_owned(),
        });
    }
    Ok(certs)
}

fn pem_problem(err: &rustls::pki_types::pem::Error, kind: &str) -> String {
    match err {
        rustls::pki_types::pem::Error::NoItemsFound => format!("no PEM {kind} found"),
        other => format!("invalid PEM: {other}"),
    }
}

/// The identity of a client certificate (DER): its first URI SAN, else its
/// first DNS SAN, else its (first) subject Common Name, else empty.
///
/// This one string is what the ACL matches, the audit log records and the
/// admin API shows.
pub fn identity_of_certificate(der: &[u8]) -> String {
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return String::new();
    };
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let names = &san.value.general_names;
        let uri = names.iter().find_map(|name| match name {
            GeneralName::URI(uri) => Some(*uri),
            _ => None,
        });
        let dns = || {
            names.iter().find_map(|name| match name {
                GeneralName::DNSName(dns) => Some(*dns),
                _ => None,
            })
        };
        if let Some(name) = uri.or_else(dns) {
            return name.to_owned();
        }
    }
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_owned()
}
