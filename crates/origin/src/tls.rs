//! TLS to an `https://` origin (rustls): the server's certificate is
//! checked against the system's roots, or against the CA bundle given with
//! `--origin-ca` (a private CA) instead.

use crate::SetupError;
use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, pem::PemObject},
};
use std::{path::Path, sync::Arc};

/// The client configuration for `base`: for an https origin, trusting
/// `ca_file`'s certificates (PEM), or the system's roots without one; for
/// an http origin, trusting nothing (it is never used).
pub fn for_origin(base: &http::Uri, ca_file: Option<&Path>) -> Result<ClientConfig, SetupError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        _ if base.scheme_str() != Some("https") => {}
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| ca_error(path, e))?;
            if certs.is_empty() {
                return Err(ca_error(path, "no certificate in it"));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| ca_error(path, e))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(SetupError::NoSystemRoots);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SetupError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

fn ca_error(path: &Path, why: impl std::fmt::Display) -> SetupError {
    SetupError::CaFile { path: path.to_owned(), why: why.to_string() }
}
