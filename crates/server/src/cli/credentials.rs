//! The credentials the command line names: `-Y`'s authfile, `-S`'s password database
//! (`$MEMCACHED_SASL_PWDB`, else the `-Y` file) and `-Z`'s certificates. Read after
//! [`parse`](super::parse), which reads no file, and before the process daemonizes, so
//! that a bad file is reported on the terminal that started it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::auth::{AuthSettings, SASL_PWDB_ENV};
use crate::tls::TlsContext;

use super::Config;

/// Reads the credentials (`-Y`, `-S` with `$MEMCACHED_SASL_PWDB`) the configuration names
/// into `config.auth`. Separate from [`parse`] so that parsing reads no file; a file that
/// is missing, unreadable, too large or malformed is a usage error naming the file.
pub fn load_security(config: &mut Config) -> Result<(), String> {
    let sasl_pwdb = std::env::var_os(SASL_PWDB_ENV)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    config.auth = AuthSettings::load(
        config.auth_file.as_deref(),
        config.sasl,
        sasl_pwdb.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    if config.tls.enabled {
        // `refresh_certs` reads the files again later, perhaps after -d moved to `/`.
        let mut options = config.tls.clone();
        if let Ok(cwd) = std::env::current_dir() {
            for path in [
                &mut options.chain_cert,
                &mut options.key,
                &mut options.ca_cert,
            ]
            .into_iter()
            .flatten()
            {
                if path.is_relative() {
                    *path = cwd.join(&*path);
                }
            }
        }
        config.tls_context = Some(Arc::new(TlsContext::load(options)?));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::test_support::{parse_ok, parse_usage};
    use super::*;

    #[test]
    fn tls_flag_and_suboptions() {
        let config = parse_ok(&[
            "-Z",
            "-o",
            "ssl_chain_cert=c.pem,ssl_key=k.pem,ssl_verify_mode=2,ssl_ca_cert=ca.pem",
        ]);
        assert!(config.tls.enabled);
        assert_eq!(config.tls.chain_cert.as_deref(), Some(Path::new("c.pem")));
        assert_eq!(config.tls.ca_cert.as_deref(), Some(Path::new("ca.pem")));
        assert!(config.tls_context.is_none(), "parsing reads no file");
        assert!(parse_usage(&["-Z"]).contains("ssl_chain_cert"));
        assert!(
            parse_usage(&["-Z", "-o", "ssl_chain_cert=c.pem", "-s", "/tmp/s"])
                .contains("unix socket")
        );
        assert!(parse_usage(&["-o", "ssl_min_version=1"]).contains("TLS 1.2"));
        assert!(parse_usage(&["-o", "ssl_nonsense=1"]).contains("Illegal suboption"));
        let without_z = parse_ok(&["-o", "ssl_chain_cert=c.pem"]);
        assert!(
            without_z.warnings.iter().any(|w| w.contains("without -Z")),
            "{:?}",
            without_z.warnings
        );
        let mut missing = parse_ok(&["-Z", "-o", "ssl_chain_cert=/nonexistent/fogcached.pem"]);
        let error = load_security(&mut missing).unwrap_err();
        assert!(
            error.starts_with("Error loading the certificate chain: /nonexistent/fogcached.pem"),
            "{error}"
        );
    }

    #[test]
    fn auth_flags_name_the_files_and_loading_checks_them() {
        let config = parse_ok(&["-Y", "users.txt", "-S"]);
        assert_eq!(config.auth_file.as_deref(), Some(Path::new("users.txt")));
        assert!(config.sasl);
        assert!(!config.auth.enabled(), "parsing reads no file");
        let mut sasl_only = parse_ok(&["-S"]);
        if std::env::var_os(SASL_PWDB_ENV).is_none() {
            let error = load_security(&mut sasl_only).unwrap_err();
            assert!(error.contains("-S needs a password file"), "{error}");
        }
        let mut missing = parse_ok(&["-Y", "/nonexistent/fogcached-users"]);
        let error = load_security(&mut missing).unwrap_err();
        assert!(error.contains("/nonexistent/fogcached-users"), "{error}");
        let mut none = parse_ok(&[]);
        assert_eq!(load_security(&mut none), Ok(()));
        assert!(!none.auth.enabled());
    }
}
