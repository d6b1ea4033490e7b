//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` ask in the
//! connection string, with rustls:
//! - `disable`: never;
//! - `prefer` (the default, as in libpq) and `require`: encrypted, the
//!   server's certificate not checked (`require` refuses a server without
//!   TLS; over a unix socket there is none, and `prefer` goes on without);
//! - `verify-ca`: the certificate chains to `sslrootcert` (a PEM file; left
//!   out or `system`: the system's roots);
//! - `verify-full`: that, and the certificate names the host.
//!
//! tokio-postgres knows only the first three modes and no `sslrootcert`,
//! so the string it parses carries `require` in place of the verifying
//! modes and no `sslrootcert`.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::DbError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The options pincer reads itself and tokio-postgres does not (or not
/// all their values).
const TLS_OPTIONS: [&str; 2] = ["sslmode", "sslrootcert"];

/// A connection string made ready for tokio-postgres, and the TLS it asks
/// for.
pub struct Tls {
    /// What tokio-postgres parses.
    url: String,
    /// `None` when every host is a unix socket, where there is no TLS (and
    /// where rustls, having no name to check, would refuse to start).
    connector: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl Tls {
    pub fn connect(&self) -> Result<::postgres::Client, ::postgres::Error> {
        match &self.connector {
            Some(tls) => ::postgres::Client::connect(&self.url, tls.clone()),
            None => ::postgres::Client::connect(&self.url, ::postgres::NoTls),
        }
    }
}

/// Reads `sslmode` and `sslrootcert` from `url` (a `postgres://` URL or
/// `key=value` pairs) and builds the connector they ask for.
///
/// # Errors
/// An unknown `sslmode`, or a root certificate file that cannot be read.
pub fn for_url(url: &str) -> Result<Tls, DbError> {
    let (url, options) = take_options(url, &TLS_OPTIONS)?;
    let mode = match options[0].as_deref() {
        None | Some("prefer") => Mode::Prefer,
        Some("disable") => Mode::Disable,
        Some("allow") | Some("require") => Mode::Require,
        Some("verify-ca") => Mode::VerifyCa,
        Some("verify-full") => Mode::VerifyFull,
        Some(other) => {
            return Err(DbError::Unsupported(format!(
                "state.url: sslmode `{other}` is not one of disable, allow, prefer, require, \
                 verify-ca, verify-full"
            )));
        }
    };
    let kept = match mode {
        Mode::Disable => "disable",
        Mode::Prefer => "prefer",
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => "require",
    };
    let sockets_only = url.parse::<::postgres::Config>().is_ok_and(|c| {
        !c.get_hosts().is_empty()
            && c.get_hosts()
                .iter()
                .all(|h| matches!(h, ::postgres::config::Host::Unix(_)))
    });
    if sockets_only {
        // libpq ignores sslmode on a unix socket; so does pincer.
        return Ok(Tls {
            url: with_option(&url, "sslmode", "disable"),
            connector: None,
        });
    }
    let url = with_option(&url, "sslmode", kept);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| DbError::Unsupported(format!("TLS: {e}")))?;
    let config = match mode {
        Mode::Disable | Mode::Prefer | Mode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
            .with_no_client_auth(),
        Mode::VerifyCa | Mode::VerifyFull => {
            let checked = chain_verifier(options[1].as_deref(), provider)?;
            let verifier: Arc<dyn ServerCertVerifier> = if mode == Mode::VerifyCa {
                Arc::new(AnyName(checked))
            } else {
                checked
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth()
        }
    };
    Ok(Tls {
        url,
        connector: Some(tokio_postgres_rustls::MakeRustlsConnect::new(config)),
    })
}

/// Checks a certificate's chain and name against `roots` (a PEM file, or
/// the system's roots when left out or `system`).
fn chain_verifier(
    roots: Option<&str>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, DbError> {
    let unusable = |what: String| DbError::Unsupported(format!("state.url: sslrootcert {what}"));
    match roots {
        None | Some("system") => Ok(Arc::new(
            rustls_platform_verifier::Verifier::new(provider)
                .map_err(|e| unusable(format!("(the system's roots): {e}")))?,
        )),
        Some(path) => {
            use rustls::pki_types::pem::PemObject as _;
            let path = PathBuf::from(path);
            let mut store = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| unusable(format!("{}: {e}", path.display())))?;
            for cert in certs {
                let cert = cert.map_err(|e| unusable(format!("{}: {e}", path.display())))?;
                store
                    .add(cert)
                    .map_err(|e| unusable(format!("{}: {e}", path.display())))?;
            }
            if store.is_empty() {
                return Err(unusable(format!(
                    "{}: no certificate in it",
                    path.display()
                )));
            }
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map(|v| v as Arc<dyn ServerCertVerifier>)
                .map_err(|e| unusable(format!("{}: {e}", path.display())))
        }
    }
}

/// `sslmode=prefer`/`require`: the connection is encrypted and the
/// handshake's signatures checked, but the certificate is taken as it is
/// (libpq does the same in these modes).
#[derive(Debug)]
struct EncryptOnly(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `sslmode=verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError;
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `url` as tokio-postgres reads it (hosts, ports, user…), `None` when it
/// does not parse.
pub fn parsed(url: &str) -> Option<::postgres::Config> {
    let (rest, _) = take_options(url, &TLS_OPTIONS).ok()?;
    rest.parse().ok()
}

/// `url` with its password shown as `***`, `None` when it does not parse.
pub fn without_password(url: &str) -> Option<String> {
    if is_url(url) {
        let mut parsed = url::Url::parse(url).ok()?;
        // libpq takes a password in the query too.
        let in_query = parsed.query_pairs().any(|(key, _)| key == "password");
        if parsed.password().is_none() && !in_query {
            return Some(url.to_owned());
        }
        if parsed.password().is_some() {
            parsed.set_password(Some("***")).ok()?;
        }
        if in_query {
            let pairs: Vec<(String, String)> = parsed
                .query_pairs()
                .map(|(key, value)| {
                    let value = if key == "password" {
                        "***".into()
                    } else {
                        value
                    };
                    (key.into_owned(), value.into_owned())
                })
                .collect();
            parsed.query_pairs_mut().clear().extend_pairs(pairs);
        }
        return Some(parsed.to_string());
    }
    let pairs = key_values(url).ok()?;
    Some(
        pairs
            .into_iter()
            .map(|(key, _, raw)| {
                if key == "password" {
                    "password=***".to_owned()
                } else {
                    raw
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// Removes the options `names` from a connection string; their values (in
/// the order of `names`) and the string without them.
fn take_options(url: &str, names: &[&str]) -> Result<(String, Vec<Option<String>>), DbError> {
    let mut found = vec![None; names.len()];
    let mut take = |key: &str, value: String| match names.iter().position(|n| *n == key) {
        Some(i) => {
            found[i] = Some(value);
            true
        }
        None => false,
    };
    if is_url(url) {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), found));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = url::form_urlencoded::parse(format!("v={value}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            if !take(key, value) {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, found));
    }
    let mut kept = Vec::new();
    for (key, value, raw) in key_values(url)? {
        if !take(&key, value) {
            kept.push(raw);
        }
    }
    Ok((kept.join(" "), found))
}

/// `key=value` pairs as libpq reads them (values in single quotes may hold
/// spaces; `\` escapes): (key, value, the pair as written).
fn key_values(s: &str) -> Result<Vec<(String, String, String)>, DbError> {
    let bad = |why: &str| DbError::Unsupported(format!("state.url: {why}"));
    let mut out = Vec::new();
    let mut chars = s.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            return Ok(out);
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next().map(|(_, c)| c) != Some('=') {
            return Err(bad(&format!("`{key}` has no `=value`")));
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(bad("a value ends in `\\`")),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err(bad(&format!("the quoted value of `{key}` is not closed"))),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(bad("a value ends in `\\`")),
                    }
                } else {
                    value.push(c);
                }
            }
        }
        let end = chars.peek().map_or(s.len(), |&(i, _)| i);
        out.push((key, value, s[start..end].trim_end().to_owned()));
    }
}

/// `url` with option `key` set to `value` (a plain word).
fn with_option(url: &str, key: &str, value: &str) -> String {
    if is_url(url) {
        let joiner = if url.contains('?') { '&' } else { '?' };
        format!("{url}{joiner}{key}={value}")
    } else if url.trim().is_empty() {
        format!("{key}={value}")
    } else {
        format!("{url} {key}={value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_read_from_both_forms_and_removed() {
        let (rest, found) = take_options(
            "postgres://u:p%40ss@db:5432/pincer?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20dir%2Fca.pem",
            &["sslmode", "sslrootcert"],
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p%40ss@db:5432/pincer?application_name=x"
        );
        assert_eq!(
            found,
            [
                Some("verify-full".to_owned()),
                Some("/etc/ca dir/ca.pem".to_owned())
            ]
        );
        let (rest, found) = take_options(
            "host=db user=pincer sslmode = verify-ca sslrootcert='/etc/ca dir/it\\'s.pem' password='a b'",
            &["sslmode", "sslrootcert"],
        )
        .unwrap();
        assert_eq!(rest, "host=db user=pincer password='a b'");
        assert_eq!(
            found,
            [
                Some("verify-ca".to_owned()),
                Some("/etc/ca dir/it's.pem".to_owned())
            ]
        );
        assert_eq!(
            take_options("postgres://db/pincer", &["sslmode"]).unwrap(),
            ("postgres://db/pincer".to_owned(), vec![None])
        );
    }

    #[test]
    fn the_string_tokio_postgres_reads_names_only_modes_it_knows() {
        for (given, kept) in [
            ("host=db user=u", "host=db user=u sslmode=prefer"),
            ("host=db sslmode=disable", "host=db sslmode=disable"),
            ("host=db sslmode=verify-ca", "host=db sslmode=require"),
            (
                "postgres://db/p?sslmode=verify-full",
                "postgres://db/p?sslmode=require",
            ),
            (
                "postgres://db/p?connect_timeout=5",
                "postgres://db/p?connect_timeout=5&sslmode=prefer",
            ),
            (
                "host=/run/postgresql sslmode=require",
                "host=/run/postgresql sslmode=disable",
            ),
        ] {
            let tls = for_url(given).unwrap();
            assert_eq!(tls.url, kept);
            tls.url
                .parse::<::postgres::Config>()
                .unwrap_or_else(|e| panic!("{kept}: {e}"));
        }
    }

    #[test]
    fn a_wrong_mode_or_root_file_is_a_clear_error() {
        let err = |url: &str| match for_url(url) {
            Ok(_) => panic!("{url} was taken"),
            Err(e) => e.to_string(),
        };
        assert!(err("host=db sslmode=verify").contains("sslmode `verify` is not one of"));
        assert!(
            err("host=db sslmode=verify-full sslrootcert=/nonexistent/ca.pem")
                .contains("sslrootcert /nonexistent/ca.pem")
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert!(
            err(&format!(
                "host=db sslmode=verify-ca sslrootcert={}",
                empty.display()
            ))
            .contains("no certificate in it")
        );
        assert!(err("host=db password='open").contains("is not closed"));
    }

    /// Whether the connection to `url` is encrypted, as the server sees it.
    fn encrypted(url: &str) -> Result<bool, String> {
        let url = url.to_owned();
        std::thread::spawn(move || {
            let mut client = super::super::postgres::connect(&url).map_err(|e| e.to_string())?;
            let row = client
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .map_err(|e| e.to_string())?;
            Ok(row.get::<_, bool>(0))
        })
        .join()
        .expect("connect thread")
    }

    /// Each mode against the test server over loopback TCP, its certificate
    /// made for `localhost` by the test CA: what connects, encrypted or
    /// not, and what is refused with a reason.
    #[test]
    fn each_sslmode_connects_as_libpq_would_or_says_why_not() {
        let (ca, other_ca) = crate::db::testing::test_cas();
        let (ca, other_ca) = (ca.display(), other_ca.display());
        let url = |tls: &str| crate::db::testing::tls_database(tls).1;
        assert_eq!(encrypted(&url("")), Ok(true), "prefer, the default");
        assert_eq!(encrypted(&url("sslmode=disable")), Ok(false));
        assert_eq!(encrypted(&url("sslmode=require")), Ok(true));
        assert_eq!(
            encrypted(&url(&format!("sslmode=verify-full sslrootcert={ca}"))),
            Ok(true)
        );
        let by_address = |tls: &str| url(tls).replace("host=localhost", "host=127.0.0.1");
        assert_eq!(
            encrypted(&by_address(&format!("sslmode=verify-ca sslrootcert={ca}"))),
            Ok(true),
            "verify-ca checks the chain, not the name"
        );
        let wrong_name = encrypted(&by_address(&format!(
            "sslmode=verify-full sslrootcert={ca}"
        )))
        .unwrap_err();
        assert!(wrong_name.contains("not valid for name"), "{wrong_name}");
        for mode in ["verify-ca", "verify-full"] {
            let stranger =
                encrypted(&url(&format!("sslmode={mode} sslrootcert={other_ca}"))).unwrap_err();
            assert!(stranger.contains("UnknownIssuer"), "{mode}: {stranger}");
        }
        // A store on a verified connection, through the URL form.
        let dbname = url("")
            .split("dbname=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_owned();
        let port = url("")
            .split("port=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_owned();
        let verified = crate::db::Location::Postgres(format!(
            "postgres://pincer@localhost:{port}/{dbname}?sslmode=verify-full&sslrootcert={}",
            url::form_urlencoded::byte_serialize(ca.to_string().as_bytes()).collect::<String>()
        ));
        let db = crate::db::Db::open(&verified).unwrap();
        let one: i64 = db.run(|c| c.query_one("SELECT 1", &[])?.get(0)).unwrap();
        assert_eq!(one, 1);
    }
}
