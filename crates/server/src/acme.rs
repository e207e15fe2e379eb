//! Certificates that appear by themselves, as Caddy's do: an ACME CA
//! (RFC 8555; Let's Encrypt unless told otherwise) issues one certificate
//! for the `--acme` names, validated with TLS-ALPN-01 (RFC 8737) on the
//! HTTPS listener itself, so no other port is needed. The account and the
//! certificate are kept in the state directory, so a restart serves the
//! kept certificate at once; it is renewed when a third of its life is
//! left, and installed for new handshakes without touching open
//! connections. A CA that cannot be reached is retried with a growing
//! pause; the certificate in use stays meanwhile.

use crate::tls::{self, CertFiles, Certificates};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus,
    RetryPolicy,
};
use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

/// Let's Encrypt's production directory.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// What to ask which CA for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeConfig {
    /// The names of the certificate; none: ACME is off.
    pub domains: Vec<String>,
    /// The CA's directory URL.
    pub directory: String,
    /// Where the account and certificates are kept; `None`: see
    /// [`AcmeConfig::state_dir`].
    pub state: Option<PathBuf>,
    /// A contact address for the account (the CA's expiry warnings).
    pub email: Option<String>,
    /// A root (PEM) to trust for the directory instead of the system's
    /// (a test CA such as Pebble).
    pub directory_ca: Option<PathBuf>,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig { domains: Vec::new(), directory: LETS_ENCRYPT.into(), state: None, email: None, directory_ca: None }
    }
}

impl AcmeConfig {
    pub fn enabled(&self) -> bool {
        !self.domains.is_empty()
    }

    /// The state directory: as given, else systemd's `$STATE_DIRECTORY/acme`,
    /// else `$XDG_STATE_HOME/circus/acme` or `~/.local/state/circus/acme`.
    pub fn state_dir(&self) -> PathBuf {
        if let Some(dir) = &self.state {
            return dir.clone();
        }
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(systemd) = var("STATE_DIRECTORY") {
            // systemd may list several, separated by colons: the first.
            let first = systemd.to_string_lossy().split(':').next().unwrap_or_default().to_owned();
            return PathBuf::from(first).join("acme");
        }
        let base = var("XDG_STATE_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".local/state")))
            .unwrap_or_else(|| PathBuf::from("."));
        base.join("circus/acme")
    }

    /// The certificate and key files of the `--acme` names.
    fn files(&self) -> CertFiles {
        let dir = self.state_dir();
        let stem = &self.domains[0];
        CertFiles { cert: dir.join(format!("{stem}.crt")), key: dir.join(format!("{stem}.key")) }
    }
}

/// Why no certificate was had this time.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("ACME: {0}")]
    Protocol(#[from] instant_acme::Error),
    #[error("{}: {source}", path.display())]
    State { path: PathBuf, source: std::io::Error },
    #[error("{}: {why}", path.display())]
    Stored { path: PathBuf, why: String },
    #[error("the CA left the authorization of {name} {status:?}")]
    Authorization { name: String, status: AuthorizationStatus },
    #[error("the CA offers no tls-alpn-01 validation for {0}")]
    NoChallenge(String),
    #[error("the CA left the order {0:?} (did its validation reach this server's HTTPS port?)")]
    Order(OrderStatus),
    #[error("challenge certificate: {0}")]
    ChallengeCertificate(#[from] rcgen::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// The pause after the first failure; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(5);
const MAX_PAUSE: Duration = Duration::from_secs(3600);
/// A kept certificate is looked at again at least this often.
const MAX_SLEEP: Duration = Duration::from_secs(12 * 3600);

/// Keeps a valid certificate for `cfg.domains` installed in `certs` until
/// `stopping` turns true.
pub async fn maintain(cfg: AcmeConfig, certs: Arc<Certificates>, mut stopping: tokio::sync::watch::Receiver<bool>) {
    let mut pause = FIRST_PAUSE;
    loop {
        let wait = match ensure(&cfg, &certs).await {
            Ok(renew_at) => {
                pause = FIRST_PAUSE;
                renew_at.duration_since(SystemTime::now()).unwrap_or_default().min(MAX_SLEEP)
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?pause, domains = ?cfg.domains, "no certificate from the ACME CA");
                let wait = pause;
                pause = (pause * 2).min(MAX_PAUSE);
                wait
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stopping.wait_for(|stop| *stop) => return,
        }
    }
}

/// Installs the kept certificate, or a new one when it is missing, does
/// not cover the names or is due; returns when to renew it.
async fn ensure(cfg: &AcmeConfig, certs: &Certificates) -> Result<SystemTime, AcmeError> {
    let files = cfg.files();
    if let Ok(kept) = Validity::of(&files.cert, &cfg.domains)
        && SystemTime::now() < kept.renew_at()
    {
        certs.install_issued(files)?;
        return Ok(kept.renew_at());
    }
    issue(cfg, certs, &files).await?;
    let fresh = Validity::of(&files.cert, &cfg.domains)?;
    certs.install_issued(files)?;
    tracing::info!(domains = ?cfg.domains, valid_until = %humantime::format_rfc3339_seconds(fresh.not_after), "certificate issued by the ACME CA");
    Ok(fresh.renew_at())
}

/// Orders a certificate, answers the validations and writes the chain
/// and its key to `files`.
async fn issue(cfg: &AcmeConfig, certs: &Certificates, files: &CertFiles) -> Result<(), AcmeError> {
    let challenges = certs.challenges().expect("ACME runs with challenges");
    let account = account(cfg).await?;
    let identifiers: Vec<_> = cfg.domains.iter().map(|d| Identifier::Dns(d.clone())).collect();
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let mut answering = Answering { challenges: &challenges, names: Vec::new() };
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        let name = authorization.identifier().to_string();
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            status => return Err(AcmeError::Authorization { name, status }),
        }
        let mut challenge =
            authorization.challenge(ChallengeType::TlsAlpn01).ok_or_else(|| AcmeError::NoChallenge(name.clone()))?;
        let key = challenge_certificate(&name, challenge.key_authorization().digest().as_ref())?;
        answering.challenges.insert(&name, Arc::new(key));
        answering.names.push(name);
        challenge.set_ready().await?;
    }
    let status = order.poll_ready(&RetryPolicy::new().timeout(Duration::from_secs(60))).await?;
    drop(answering);
    if status != OrderStatus::Ready {
        return Err(AcmeError::Order(status));
    }
    let key_pem = order.finalize().await?;
    let chain_pem = order.poll_certificate(&RetryPolicy::new().timeout(Duration::from_secs(60))).await?;
    // The key first: a certificate is never on disk without its key.
    write_private(&files.key, key_pem.as_bytes())?;
    write_private(&files.cert, chain_pem.as_bytes())?;
    Ok(())
}

/// The challenge certificates of an order, withdrawn when it is decided.
struct Answering<'a> {
    challenges: &'a tls::Challenges,
    names: Vec<String>,
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        for name in &self.names {
            self.challenges.remove(name);
        }
    }
}

/// The self-signed certificate for `name` carrying the key
/// authorization's digest in the critical acmeIdentifier extension.
fn challenge_certificate(name: &str, digest: &[u8]) -> Result<rustls::sign::CertifiedKey, AcmeError> {
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let der = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    // Not `CertifiedKey::from_der`: its consistency check parses the
    // certificate with webpki, which refuses the critical extension.
    let signing = provider.key_provider.load_private_key(der.into()).map_err(|e| AcmeError::Tls(e.into()))?;
    Ok(rustls::sign::CertifiedKey::new(vec![cert.der().clone()], signing))
}

/// The account kept for this directory, or a new one (then kept).
async fn account(cfg: &AcmeConfig) -> Result<Account, AcmeError> {
    let builder = || match &cfg.directory_ca {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    // One account per CA: the file is named after the directory URL.
    let tag = blake3::hash(cfg.directory.as_bytes()).to_hex();
    let path = cfg.state_dir().join(format!("account-{}.json", &tag[..16]));
    match std::fs::read(&path) {
        Ok(bytes) => {
            let credentials: AccountCredentials = serde_json::from_slice(&bytes)
                .map_err(|e| AcmeError::Stored { path: path.clone(), why: e.to_string() })?;
            Ok(builder()?.from_credentials(credentials).await?)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let contact = cfg.email.as_ref().map(|e| format!("mailto:{e}"));
            let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
            let new = NewAccount { contact: &contacts, terms_of_service_agreed: true, only_return_existing: false };
            let (account, credentials) = builder()?.create(&new, cfg.directory.clone(), None).await?;
            let json = serde_json::to_vec_pretty(&credentials).expect("credentials serialize");
            write_private(&path, &json)?;
            tracing::info!(directory = %cfg.directory, "ACME account created");
            Ok(account)
        }
        Err(source) => Err(AcmeError::State { path, source }),
    }
}

/// Writes `bytes` to `path` whole or not at all, readable by the owner
/// only, creating the directory.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AcmeError> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let state = |source| AcmeError::State { path: path.to_owned(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(state)?;
    let partial = path.with_extension("partial");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(state)?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(state)?;
    std::fs::rename(&partial, path).map_err(state)
}

/// When a kept certificate starts and stops being valid.
#[derive(Debug, Clone, Copy)]
struct Validity {
    not_before: SystemTime,
    not_after: SystemTime,
}

impl Validity {
    /// The validity of the certificate in `path`, if it names every one
    /// of `domains`.
    fn of(path: &Path, domains: &[String]) -> Result<Validity, AcmeError> {
        let stored = |why: String| AcmeError::Stored { path: path.to_owned(), why };
        let pem = std::fs::read(path).map_err(|source| AcmeError::State { path: path.to_owned(), source })?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).map_err(|e| stored(e.to_string()))?;
        let cert = pem.parse_x509().map_err(|e| stored(e.to_string()))?;
        let names: Vec<String> = match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if let Some(missing) = domains.iter().find(|d| !names.contains(&d.to_ascii_lowercase())) {
            return Err(stored(format!("does not name {missing}")));
        }
        let at = |t: x509_parser::time::ASN1Time| {
            let secs = u64::try_from(t.timestamp()).unwrap_or(0);
            SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
        };
        Ok(Validity { not_before: at(cert.validity().not_before), not_after: at(cert.validity().not_after) })
    }

    /// When two thirds of the certificate's life have passed.
    fn renew_at(&self) -> SystemTime {
        let life = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + life * 2 / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_follows_systemd_then_xdg_then_home() {
        let given = AcmeConfig { state: Some("/srv/acme".into()), ..AcmeConfig::default() };
        assert_eq!(given.state_dir(), PathBuf::from("/srv/acme"));
        // The environment is read, not written: only the shape is checked.
        let default = AcmeConfig::default().state_dir();
        assert!(default.ends_with("acme"), "{}", default.display());
    }

    #[test]
    fn a_kept_certificate_is_renewed_at_two_thirds_of_its_life_and_must_name_every_domain() {
        let dir = tempfile::tempdir().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.test".into(), "b.test".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 4, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let path = dir.path().join("a.test.crt");
        std::fs::write(&path, params.self_signed(&key).unwrap().pem()).unwrap();
        let v = Validity::of(&path, &["a.test".into(), "B.test".into()]).unwrap();
        let life = v.not_after.duration_since(v.not_before).unwrap();
        assert_eq!(life, Duration::from_secs(90 * 86400));
        assert_eq!(v.renew_at(), v.not_before + Duration::from_secs(60 * 86400));
        let e = Validity::of(&path, &["c.test".into()]).unwrap_err();
        assert!(e.to_string().contains("does not name c.test"), "{e}");
        let e = Validity::of(&dir.path().join("none.crt"), &["a.test".into()]).unwrap_err();
        assert!(matches!(e, AcmeError::State { .. }), "{e}");
    }

    #[test]
    fn a_challenge_certificate_names_the_domain_and_carries_the_digest() {
        let key = challenge_certificate("a.test", &[7; 32]).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(key.cert[0].as_ref()).unwrap();
        // id-pe-acmeIdentifier, critical, an OCTET STRING of the digest.
        let ext = cert.extensions().iter().find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31").unwrap();
        assert!(ext.critical);
        assert_eq!(ext.value, [&[0x04, 32][..], &[7; 32]].concat());
    }
}
