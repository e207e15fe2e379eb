//! TLS to an `https://` origin (rustls): the server's certificate is
//! checked against the system's roots, or against the CA bundle given with
//! `--origin-ca` (a private CA) instead.

use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, pem::PemObject},
};
use std::{path::Path, sync::Arc};

/// The client configuration for `base`: for an https origin, trusting
/// `ca_file`'s certificates (PEM), or the system's roots without one; for
/// an http origin, trusting nothing (it is never used).
pub fn for_origin(base: &http::Uri, ca_file: Option<&Path>) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        _ if base.scheme_str() != Some("https") => {}
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--origin-ca {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("--origin-ca {}: no certificate in it", path.display()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| format!("--origin-ca {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err("no system CA certificates found for an https origin: give --origin-ca".into());
            }
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}
