//! A lab PKI made at test time (rcgen), with its PEM files on disk.
#![allow(dead_code)] // each test binary uses a different subset

use std::{path::PathBuf, sync::Arc};

use monolock_client::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use monolock_server::{ServerTls, TlsFiles};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use tempfile::TempDir;

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
    /// The private key as DER.
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

    fn leaf(&self, sans: Vec<SanType>, common_name: &str, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.subject_alt_names = sans;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
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
            "monolock test server",
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate whose identity is the URI SAN `uri` (after a
    /// DNS SAN, so that "first URI SAN" is not just "first SAN").
    pub fn client(&self, uri: &str) -> Leaf {
        self.leaf(
            vec![
                SanType::DnsName("worker.internal".try_into().expect("dns")),
                SanType::URI(uri.try_into().expect("uri")),
            ],
            "worker",
            ExtendedKeyUsagePurpose::ClientAuth,
        )
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
