//! TLS for `https://` downloads (rustls): the server's certificate must
//! chain to the system's roots, or, with `--cacert FILE`, to that file's
//! certificates only (as curl's `--cacert`).

use crate::GetError;
use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, pem::PemObject},
};
use std::{path::Path, sync::Arc};

/// The client configuration trusting `ca_file` (PEM) or the system roots.
pub(crate) fn client_config(ca_file: Option<&Path>) -> Result<ClientConfig, GetError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let bad = |why: String| GetError::Usage(format!("CA file {}: {why}", path.display()));
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("no certificate in it".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| GetError::Usage(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}
