//! A lab PKI made at test time (rcgen), files on disk for the server, and
//! rustls clients that speak the protocol over TLS.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject},
};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

use monolock_server::{ServerTls, TlsFiles};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Leaf {
    /// The private key, DER-encoded.
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).expect("key")
    }
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    fn leaf(
        &self,
        sans: Vec<SanType>,
        common_name: Option<&str>,
        usage: ExtendedKeyUsagePurpose,
    ) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.subject_alt_names = sans;
        // rcgen puts a default CN in every certificate; start from none.
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = common_name {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Leaf {
        self.leaf(
            vec![
                SanType::DnsName("localhost".try_into().expect("dns")),
                SanType::IpAddress("127.0.0.1".parse().expect("ip")),
            ],
            Some("monolock test server"),
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate with exactly these SANs and CN.
    pub fn client(&self, uris: &[&str], dns: &[&str], common_name: Option<&str>) -> Leaf {
        let mut sans = Vec::new();
        // A DNS name first, so "first URI SAN" is not just "first SAN".
        for name in dns {
            sans.push(SanType::DnsName((*name).try_into().expect("dns")));
        }
        for uri in uris {
            sans.push(SanType::URI((*uri).try_into().expect("uri")));
        }
        self.leaf(sans, common_name, ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A client certificate whose identity is `uri`.
    pub fn client_uri(&self, uri: &str) -> Leaf {
        self.client(&[uri], &[], Some("worker"))
    }
}

/// The server's TLS files in a temporary directory.
pub struct TlsDir {
    pub dir: TempDir,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

impl TlsDir {
    /// Writes `server` and `client_ca` (if any) to files.
    pub fn new(server: &Leaf, client_ca: Option<&Ca>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = write(dir.path(), "server.pem", &server.cert_pem);
        let key = write(dir.path(), "server.key", &server.key_pem);
        let client_ca = match client_ca {
            Some(ca) => write(dir.path(), "clients-ca.pem", &ca.pem()),
            None => dir.path().join("clients-ca.pem"),
        };
        Self {
            dir,
            cert,
            key,
            client_ca,
        }
    }

    pub fn files(&self, mutual: bool) -> TlsFiles {
        TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: mutual.then(|| self.client_ca.clone()),
        }
    }

    pub fn server_tls(&self, mutual: bool) -> Arc<ServerTls> {
        Arc::new(ServerTls::load(self.files(mutual)).expect("valid TLS files"))
    }

    /// Replaces the server certificate and key (as a rotation would).
    pub fn rotate(&self, server: &Leaf) {
        write(self.dir.path(), "server.pem", &server.cert_pem);
        write(self.dir.path(), "server.key", &server.key_pem);
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// PEM files in a temporary directory, removed on drop.
pub struct Files {
    dir: TempDir,
}

impl Files {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// The files another language's client suite reads (its TLS and mTLS
    /// tests): `ca.pem` and `server.{pem,key}` from one CA,
    /// `clients-ca.pem` and `client.{pem,key}` (whose identity is the URI
    /// `client_identity`) from another. `suite` names the CAs.
    pub fn for_client_suite(suite: &str, client_identity: &str) -> Self {
        let server_ca = Ca::new(&format!("{suite} test server CA"));
        let client_ca = Ca::new(&format!("{suite} test client CA"));
        let files = Self::new();
        files.ca("ca.pem", &server_ca);
        files.leaf("server", &server_ca.server());
        files.ca("clients-ca.pem", &client_ca);
        files.leaf("client", &client_ca.client_uri(client_identity));
        files
    }

    /// Writes `contents` to `name`.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("write file");
        path
    }

    /// A path in the directory (the file may not exist).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `ca`'s certificate as `name`.
    pub fn ca(&self, name: &str, ca: &Ca) -> PathBuf {
        self.write(name, &ca.pem())
    }

    /// Writes `leaf` as `name.pem` and `name.key`.
    pub fn leaf(&self, name: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
        (
            self.write(&format!("{name}.pem"), &leaf.cert_pem),
            self.write(&format!("{name}.key"), &leaf.key_pem),
        )
    }

    /// The server side: `server` as its identity and, for mTLS, `clients`
    /// as the CA client certificates must chain to.
    pub fn server_tls(&self, server: &Leaf, clients: Option<&Ca>) -> Arc<ServerTls> {
        let (cert, key) = self.leaf("server", server);
        let client_ca = clients.map(|ca| self.ca("clients-ca.pem", ca));
        Arc::new(
            ServerTls::load(TlsFiles {
                cert,
                key,
                client_ca,
            })
            .expect("valid TLS files"),
        )
    }
}

impl Default for Files {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes `contents` to `dir/name` through a temporary file and a rename, so
/// a reader never sees a half-written file.
pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    let partial = dir.join(format!(".{name}.partial"));
    std::fs::write(&partial, contents).expect("write file");
    std::fs::rename(&partial, &path).expect("rename file");
    path
}

/// A client configuration trusting `trusted` and presenting `identity`.
pub fn client_config(trusted: &[&Ca], identity: Option<&Leaf>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for ca in trusted {
        roots.add(ca.der()).expect("trust anchor");
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
    let config = match identity {
        Some(leaf) => builder
            .with_client_auth_cert(vec![leaf.der.clone()], leaf.key_der())
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Connects to `addr` and completes a TLS handshake as client of
/// `localhost`.
pub async fn connect_tls(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost").expect("server name");
    TlsConnector::from(config).connect(name, tcp).await
}

/// The leaf certificate the server presented on `stream`.
pub fn server_certificate(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .expect("server certificate")
        .clone()
}
