//! The lab PKI of the TLS and mTLS scenarios, made once per run with the
//! project's test PKI (`monolock-testkit`) and written to files that the
//! server and every driver read.

use std::path::PathBuf;

use monolock_testkit::pki::{Ca, Files};

/// The identity in the drivers' client certificate (a URI SAN): the admin
/// API shows it as the holder's identity under mTLS.
pub const CLIENT_IDENTITY: &str = "spiffe://conformance/driver";

/// The files: a server CA and the server's certificate for `localhost` and
/// 127.0.0.1, a client CA and one client certificate, and a CA that signed
/// nothing the server presents.
pub struct LabPki {
    /// The CA that signed the server's certificate (what clients trust).
    pub ca: PathBuf,
    /// The server's certificate chain.
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// The CA client certificates must chain to under mTLS.
    pub clients_ca: PathBuf,
    /// A client certificate whose identity is [`CLIENT_IDENTITY`].
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// A CA that did not sign the server's certificate.
    pub foreign_ca: PathBuf,
    // Removed on drop.
    _files: Files,
}

impl LabPki {
    /// Makes the CAs and certificates and writes them to a temporary
    /// directory.
    pub fn new() -> Self {
        let server_ca = Ca::new("conformance server CA");
        let client_ca = Ca::new("conformance client CA");
        let foreign = Ca::new("conformance foreign CA");
        let files = Files::new();
        let ca = files.ca("ca.pem", &server_ca);
        let (server_cert, server_key) = files.leaf("server", &server_ca.server());
        let clients_ca = files.ca("clients-ca.pem", &client_ca);
        let (client_cert, client_key) =
            files.leaf("client", &client_ca.client_uri(CLIENT_IDENTITY));
        let foreign_ca = files.ca("foreign-ca.pem", &foreign);
        Self {
            ca,
            server_cert,
            server_key,
            clients_ca,
            client_cert,
            client_key,
            foreign_ca,
            _files: files,
        }
    }
}

impl Default for LabPki {
    fn default() -> Self {
        Self::new()
    }
}
