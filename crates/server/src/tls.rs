//! TLS for the content listener (rustls): certificates and keys from PEM
//! files, the one to present chosen by the name the client asks for (SNI)
//! among the names each certificate is valid for, the first one for
//! clients that name none or an unknown name; ALPN offers h2 and
//! http/1.1. With ACME, certificates issued by the CA join those of the
//! files, and the CA's TLS-ALPN-01 validation (RFC 8737) is answered on
//! the same listener: a client offering only `acme-tls/1` gets the
//! challenge certificate for the name it asks for, and nothing else.

use rustls::{
    ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {why}", path.display())]
    File { path: PathBuf, why: String },
    #[error("{}: the key does not match the certificate ({why})", cert.display())]
    Mismatch { cert: PathBuf, why: String },
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("no certificate given")]
    NoCertificate,
}

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The server configuration for `pairs` (the first is the default), and
/// for answering ACME validations when `challenges` is given (then
/// `pairs` may be empty: until a certificate is issued, other handshakes
/// fail).
pub fn server_config(pairs: &[CertFiles], challenges: Option<&Arc<Challenges>>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let certs = match ByName::load(pairs, &provider) {
        Ok(certs) => Some(certs),
        Err(TlsError::NoCertificate) if challenges.is_some() => None,
        Err(e) => return Err(e),
    };
    let resolver = Resolver { certs, challenges: challenges.cloned() };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if challenges.is_some() {
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    Ok(Arc::new(config))
}

/// The certificates in use, replaced whole by [`Certificates::reload`]:
/// handshakes after a reload present the new ones, connections already
/// open keep theirs.
#[derive(Debug)]
pub struct Certificates {
    /// From `--tls-cert`/`--tls-key`.
    files: std::sync::Mutex<Vec<CertFiles>>,
    /// Issued by the ACME CA, served after the files' (by SNI, or as the
    /// default when there are no files).
    issued: std::sync::Mutex<Vec<CertFiles>>,
    /// With ACME: the validations being answered.
    challenges: Option<Arc<Challenges>>,
    /// The kernel takes over the record keys after each handshake (kTLS):
    /// rustls must let them be extracted.
    kernel_records: bool,
    current: std::sync::RwLock<Arc<ServerConfig>>,
}

impl Certificates {
    /// The certificates of `files`, and with `acme` the means to answer
    /// the CA's validations and to serve what it issues. With
    /// `kernel_records`, each connection's record keys may be handed to the
    /// kernel after its handshake (see `ktls_stream`).
    pub fn load(files: &[CertFiles], acme: bool, kernel_records: bool) -> Result<Self, TlsError> {
        let challenges = acme.then(|| Arc::new(Challenges::default()));
        let current = std::sync::RwLock::new(Self::config(files, challenges.as_ref(), kernel_records)?);
        Ok(Certificates {
            files: std::sync::Mutex::new(files.to_vec()),
            issued: std::sync::Mutex::new(Vec::new()),
            challenges,
            kernel_records,
            current,
        })
    }

    fn config(
        pairs: &[CertFiles],
        challenges: Option<&Arc<Challenges>>,
        kernel_records: bool,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = server_config(pairs, challenges)?;
        if kernel_records {
            Arc::get_mut(&mut config).expect("a configuration just built").enable_secret_extraction = true;
        }
        Ok(config)
    }

    /// Whether the record keys may go to the kernel after a handshake.
    pub fn kernel_records(&self) -> bool {
        self.kernel_records
    }

    /// Where ACME validations are answered from (with ACME only).
    pub fn challenges(&self) -> Option<Arc<Challenges>> {
        self.challenges.clone()
    }

    /// Serves `pair`, issued by the ACME CA, from now on in place of the
    /// one issued before; on any error the certificates in use stay.
    pub fn install_issued(&self, pair: CertFiles) -> Result<(), TlsError> {
        let files = self.files.lock().expect("certificate files lock").clone();
        let fresh = Self::config(&[files, vec![pair.clone()]].concat(), self.challenges.as_ref(), self.kernel_records)?;
        *self.issued.lock().expect("issued certificates lock") = vec![pair];
        *self.current.write().expect("certificates lock") = fresh;
        Ok(())
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.read().expect("certificates lock").clone()
    }

    /// Reads the files again; on any error the certificates in use stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        let files = self.files.lock().expect("certificate files lock").clone();
        self.replace(&files)
    }

    /// Serves `files` from now on (read now); on any error the
    /// certificates in use stay.
    pub fn replace(&self, files: &[CertFiles]) -> Result<(), TlsError> {
        let issued = self.issued.lock().expect("issued certificates lock").clone();
        let fresh = Self::config(&[files, &issued].concat(), self.challenges.as_ref(), self.kernel_records)?;
        *self.files.lock().expect("certificate files lock") = files.to_vec();
        *self.current.write().expect("certificates lock") = fresh;
        Ok(())
    }
}

/// Certificates by the DNS names they are valid for.
#[derive(Debug)]
struct ByName {
    by_name: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl ByName {
    fn load(pairs: &[CertFiles], provider: &CryptoProvider) -> Result<Self, TlsError> {
        let mut by_name = HashMap::new();
        let mut default = None;
        for pair in pairs {
            let (key, names) = certified_key(pair, provider)?;
            let key = Arc::new(key);
            for name in names {
                // The first certificate to name a host serves it.
                by_name.entry(name.to_ascii_lowercase()).or_insert_with(|| key.clone());
            }
            default.get_or_insert(key);
        }
        Ok(ByName { by_name, default: default.ok_or(TlsError::NoCertificate)? })
    }
}

impl ByName {
    fn pick(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        let named = name.and_then(|n| self.by_name.get(&n.to_ascii_lowercase()));
        named.unwrap_or(&self.default).clone()
    }
}

/// Challenge certificates of TLS-ALPN-01 validations in progress, by the
/// name validated.
#[derive(Debug, Default)]
pub struct Challenges(std::sync::RwLock<HashMap<String, Arc<CertifiedKey>>>);

impl Challenges {
    pub fn insert(&self, name: &str, key: Arc<CertifiedKey>) {
        self.0.write().expect("challenges lock").insert(name.to_ascii_lowercase(), key);
    }

    pub fn remove(&self, name: &str) {
        self.0.write().expect("challenges lock").remove(&name.to_ascii_lowercase());
    }

    fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.0.read().expect("challenges lock").get(&name.to_ascii_lowercase()).cloned()
    }
}

/// Picks the certificate of a handshake.
#[derive(Debug)]
struct Resolver {
    certs: Option<ByName>,
    challenges: Option<Arc<Challenges>>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(challenges) = &self.challenges {
            let validating = hello.alpn().is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN));
            if validating {
                // A validation gets the challenge certificate or nothing.
                return hello.server_name().and_then(|name| challenges.get(name));
            }
        }
        Some(self.certs.as_ref()?.pick(hello.server_name()))
    }
}

/// The chain and key of `pair`, checked to belong together, and the DNS
/// names the end certificate is valid for.
fn certified_key(pair: &CertFiles, provider: &CryptoProvider) -> Result<(CertifiedKey, Vec<String>), TlsError> {
    let file_error = |path: &Path, why: String| TlsError::File { path: path.to_owned(), why };
    let chain = CertificateDer::pem_file_iter(&pair.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(&pair.cert, e.to_string()))?;
    let Some(end) = chain.first() else {
        return Err(file_error(&pair.cert, "no certificate in it".into()));
    };
    let names = webpki::EndEntityCert::try_from(end)
        .map_err(|e| file_error(&pair.cert, format!("not a usable certificate: {e}")))?
        .valid_dns_names()
        .map(str::to_owned)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&pair.key).map_err(|e| file_error(&pair.key, e.to_string()))?;
    let certified = CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| TlsError::Mismatch { cert: pair.cert.clone(), why: e.to_string() })?;
    Ok((certified, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A self-signed certificate for `names` in `dir`, made with openssl.
    fn make(dir: &Path, stem: &str, names: &[&str]) -> CertFiles {
        let (cert, key) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        let san = names.iter().map(|n| format!("DNS:{n}")).collect::<Vec<_>>().join(",");
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-days", "2", "-subj", &format!("/CN={}", names[0]), "-addext", &format!("subjectAltName={san}")])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl (CI installs it)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        CertFiles { cert, key }
    }

    #[test]
    fn each_certificate_serves_the_names_it_is_valid_for_and_the_first_serves_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let a = make(dir.path(), "a", &["a.test", "www.a.test"]);
        let b = make(dir.path(), "b", &["b.test"]);
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let by_name = ByName::load(&[a.clone(), b.clone()], &provider).unwrap();
        let end = |k: &Arc<CertifiedKey>| k.cert[0].clone();
        let a_end = end(&by_name.by_name["a.test"]);
        assert_eq!(end(&by_name.by_name["www.a.test"]), a_end);
        assert_ne!(end(&by_name.by_name["b.test"]), a_end);
        assert_eq!(end(&by_name.default), a_end);
        assert!(server_config(&[a, b], None).is_ok());
    }

    #[test]
    fn a_key_of_another_certificate_or_a_missing_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let a = make(dir.path(), "a", &["a.test"]);
        let b = make(dir.path(), "b", &["b.test"]);
        let crossed = CertFiles { cert: a.cert.clone(), key: b.key.clone() };
        let e = server_config(&[crossed], None).unwrap_err();
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
        let missing = CertFiles { cert: dir.path().join("none.pem"), key: a.key };
        let e = server_config(&[missing], None).unwrap_err();
        assert!(e.to_string().contains("none.pem"), "{e}");
        assert!(matches!(server_config(&[], None), Err(TlsError::NoCertificate)));
        assert!(server_config(&[], Some(&Arc::default())).is_ok(), "with ACME, no file is needed");
    }
}
