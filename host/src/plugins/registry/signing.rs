//! Publisher keys and signatures of published plugins (Ed25519, by `ring`).
//!
//! A signature signs a *payload* naming the artifact's manifest digest, in
//! the shape of cosign's "simple signing" payload, and is stored beside the
//! artifact under cosign's tag convention `sha256-<hex>.sig` (the registry
//! here, distribution 2.8, has no referrers API). The signature and the
//! publisher's public key travel as annotations of that tag's layer; trust
//! comes only from `plugins.trusted_publishers` in `pincer.yaml`.
//!
//! Key files are one line of text: `pincer-ed25519-private <base64 PKCS#8>`
//! (written 0600) and `ed25519:<base64 of the 32-byte public key>`, the
//! form `trusted_publishers` takes.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};

const PRIVATE_PREFIX: &str = "pincer-ed25519-private ";
const PUBLIC_PREFIX: &str = "ed25519:";

/// cosign's signature payload type.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a pincer publisher key (`pincer plugin key generate` writes one)")]
    NotAKey { path: String },
    #[error(
        "`{0}` is not a publisher key: write `ed25519:` and the base64 key `pincer plugin key generate` printed"
    )]
    BadPublicKey(String),
    #[error("cannot generate a key: the system's random source failed")]
    Random,
}

/// A publisher's signing key.
pub struct PublisherKey {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for PublisherKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherKey")
            .field("public", &self.public())
            .finish_non_exhaustive()
    }
}

impl PublisherKey {
    /// A new key, written to `path` (0600, refusing to overwrite) with its
    /// public half at `path.pub`.
    ///
    /// # Errors
    /// If `path` exists or cannot be written.
    pub fn generate(path: &Path) -> Result<PublisherKey, KeyError> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| KeyError::Random)?;
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| KeyError::Random)?;
        let key = PublisherKey { pair };
        let write_err = |source| KeyError::Write {
            path: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write_err)?;
        }
        {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(write_err)?;
            writeln!(file, "{PRIVATE_PREFIX}{}", STANDARD.encode(pkcs8.as_ref()))
                .map_err(write_err)?;
        }
        let public = path.with_extension("pub");
        std::fs::write(&public, format!("{}\n", key.public())).map_err(|source| {
            KeyError::Write {
                path: public.display().to_string(),
                source,
            }
        })?;
        Ok(key)
    }

    /// Reads a key `generate` wrote.
    ///
    /// # Errors
    /// If the file cannot be read or holds no key.
    pub fn load(path: &Path) -> Result<PublisherKey, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let not_a_key = || KeyError::NotAKey {
            path: path.display().to_string(),
        };
        let encoded = text
            .trim()
            .strip_prefix(PRIVATE_PREFIX)
            .ok_or_else(not_a_key)?;
        let der = STANDARD.decode(encoded).map_err(|_| not_a_key())?;
        let pair = Ed25519KeyPair::from_pkcs8(&der).map_err(|_| not_a_key())?;
        Ok(PublisherKey { pair })
    }

    /// `ed25519:<base64>`.
    pub fn public(&self) -> String {
        format!(
            "{PUBLIC_PREFIX}{}",
            STANDARD.encode(self.pair.public_key().as_ref())
        )
    }

    /// The signature of `payload`, base64.
    pub fn sign(&self, payload: &[u8]) -> String {
        STANDARD.encode(self.pair.sign(payload).as_ref())
    }
}

/// The 32 bytes of an `ed25519:<base64>` public key.
///
/// # Errors
/// [`KeyError::BadPublicKey`].
pub fn parse_public(text: &str) -> Result<Vec<u8>, KeyError> {
    let bad = || KeyError::BadPublicKey(text.to_owned());
    let encoded = text.trim().strip_prefix(PUBLIC_PREFIX).ok_or_else(bad)?;
    let bytes = STANDARD.decode(encoded).map_err(|_| bad())?;
    if bytes.len() != 32 {
        return Err(bad());
    }
    Ok(bytes)
}

/// Whether `signature` (base64) by `public` (`ed25519:<base64>`) signs
/// `payload`.
pub fn verify(public: &str, payload: &[u8], signature: &str) -> bool {
    let (Ok(key), Ok(sig)) = (parse_public(public), STANDARD.decode(signature.trim())) else {
        return false;
    };
    UnparsedPublicKey::new(&ED25519, key)
        .verify(payload, &sig)
        .is_ok()
}

/// The payload a signature signs: cosign's simple-signing JSON naming the
/// repository and the manifest digest.
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

/// The manifest digest a payload names, if it is one of ours.
pub fn payload_digest(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if value["critical"]["type"] != PAYLOAD_TYPE {
        return None;
    }
    value["critical"]["image"]["docker-manifest-digest"]
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_payload_and_key() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("publisher.key");
        let key = PublisherKey::generate(&path).expect("generate");
        let loaded = PublisherKey::load(&path).expect("load");
        assert_eq!(key.public(), loaded.public());
        let public_file = std::fs::read_to_string(path.with_extension("pub")).expect("pub");
        assert_eq!(public_file.trim(), key.public());
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            PublisherKey::generate(&path).is_err(),
            "never overwrites a key"
        );

        let payload = payload("acme/skill", "sha256:aa");
        let signature = loaded.sign(&payload);
        assert!(verify(&key.public(), &payload, &signature));
        assert!(!verify(
            &key.public(),
            &super::payload("acme/skill", "sha256:bb"),
            &signature
        ));
        let other = PublisherKey::generate(&dir.path().join("other.key")).expect("other");
        assert!(!verify(&other.public(), &payload, &signature));
        assert_eq!(payload_digest(&payload).as_deref(), Some("sha256:aa"));
        assert!(matches!(
            parse_public("ed25519:AAAA"),
            Err(KeyError::BadPublicKey(_))
        ));
        assert!(matches!(
            PublisherKey::load(&path.with_extension("pub")),
            Err(KeyError::NotAKey { .. })
        ));
    }
}
