//! Plugins published to and installed from an OCI registry.
//!
//! The artifact follows the CNCF "Wasm OCI artifact" layout that
//! `wkg`/wasm-pkg-tools use: an OCI image manifest whose config has the
//! media type `application/vnd.wasm.config.v0+json` and whose one layer is
//! the component (`application/wasm`). pincer's `plugin.toml` travels as the
//! manifest annotation [`MANIFEST_ANNOTATION`], beside the standard
//! `org.opencontainers.image.*` ones.
//!
//! Pulling checks everything before anything is written: the manifest's
//! digest (against the reference's when it names one), the media types,
//! sizes, the component's digest, and the signature ([`signing`]) against
//! `plugins.trusted_publishers`. Loopback registries may use plain HTTP;
//! any other needs HTTPS unless the caller says `insecure`.
//!
//! `oci-client` speaks the distribution protocol; this module is only
//! pincer's layer on it.

pub mod signing;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest as _, Sha256};

pub use signing::{KeyError, PublisherKey};

/// The config media type of a Wasm OCI artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of a Wasm component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The annotation carrying the plugin's `plugin.toml`.
pub const MANIFEST_ANNOTATION: &str = "dev.pincer.plugin.manifest";
/// cosign's media type of a signature's payload layer.
const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// cosign's annotation carrying the base64 signature.
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The publisher's public key, beside the signature.
const PUBLISHER_ANNOTATION: &str = "dev.pincer.publisher.key";

/// The largest component accepted (a Python component is tens of MB).
pub const MAX_COMPONENT_BYTES: i64 = 256 << 20;
const MAX_SMALL_BYTES: i64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "`{0}` is not a registry reference (e.g. localhost:5000/acme/skill-weather:1.2.0 or …@sha256:…): {1}"
    )]
    BadReference(String, String),
    #[error("the registry {registry} cannot be reached: {reason}")]
    Unreachable { registry: String, reason: String },
    #[error("{reference}: {reason}")]
    Registry { reference: String, reason: String },
    #[error("{0} is not a pincer plugin: {1}")]
    NotAPlugin(String, String),
    #[error(
        "a blob of {reference} does not match its digest ({detail}): tampered or corrupted; nothing was installed"
    )]
    Corrupt { reference: String, detail: String },
    #[error(
        "{what} of {reference} does not match its digest: expected {expected}, got {got} (tampered or corrupted; nothing was installed)"
    )]
    DigestMismatch {
        reference: String,
        what: String,
        expected: String,
        got: String,
    },
    #[error(
        "the signature of {0} does not verify (tampered, or signed for another artifact); nothing was installed"
    )]
    BadSignature(String),
}

/// How the package's signature stands against the trusted publishers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    /// No `sha256-<hex>.sig` beside it.
    Unsigned,
    /// Signed by a key of `plugins.trusted_publishers`, by this name.
    Trusted { publisher: String, key: String },
    /// Validly signed, by a key nobody listed.
    Untrusted { key: String },
}

/// A package fetched and checked, not yet installed.
#[derive(Debug)]
pub struct Pulled {
    /// The reference pinned to the manifest digest (`…@sha256:…`).
    pub pinned: String,
    pub digest: String,
    pub manifest_text: String,
    pub wasm: Vec<u8>,
    pub signature: Signature,
}

/// What `publish` pushed.
#[derive(Debug)]
pub struct Published {
    pub pinned: String,
    pub digest: String,
    /// The publisher key's public half, when signed.
    pub signed_by: Option<String>,
}

/// A trusted publisher: a name and an `ed25519:` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    pub name: String,
    pub key: String,
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Whether `registry` (`host[:port]`) is a loopback address.
fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => registry.rsplit_once(':').map_or(registry, |(h, _)| h),
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A registry client for `reference`'s registry: plain HTTP on loopback
/// or with `insecure`, HTTPS otherwise.
fn client(reference: &Reference, insecure: bool) -> Client {
    let registry = reference.resolve_registry().to_owned();
    let protocol = if is_loopback(&registry) || insecure {
        ClientProtocol::HttpsExcept(vec![registry])
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        ..ClientConfig::default()
    })
}

/// Parses a reference that names a registry and a repository.
///
/// # Errors
/// [`RegistryError::BadReference`].
pub fn parse_reference(text: &str) -> Result<Reference, RegistryError> {
    let reference: Reference = text.parse().map_err(|e: oci_client::ParseError| {
        RegistryError::BadReference(text.into(), e.to_string())
    })?;
    if !text.contains('/') {
        return Err(RegistryError::BadReference(
            text.into(),
            "name the registry and the repository".into(),
        ));
    }
    Ok(reference)
}

/// Classifies an `oci-client` error: the registry could not be reached, or
/// it answered with an error.
fn oci_error(
    reference: &Reference,
    error: oci_client::errors::OciDistributionError,
) -> RegistryError {
    let reason = error.to_string();
    let unreachable = matches!(
        &error,
        oci_client::errors::OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout()
    );
    if unreachable {
        RegistryError::Unreachable {
            registry: reference.resolve_registry().to_owned(),
            reason,
        }
    } else if matches!(
        &error,
        oci_client::errors::OciDistributionError::DigestError(_)
    ) {
        RegistryError::Corrupt {
            reference: reference.whole(),
            detail: reason,
        }
    } else {
        RegistryError::Registry {
            reference: reference.whole(),
            reason,
        }
    }
}

fn is_not_found(error: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError as E;
    match error {
        E::ImageManifestNotFoundError(_) => true,
        E::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, oci_client::errors::OciErrorCode::ManifestUnknown)),
        E::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

/// What `publish` pushes.
pub struct Package<'a> {
    /// The `plugin.toml` text.
    pub manifest_text: &'a str,
    pub name: &'a str,
    pub version: &'a str,
    pub description: &'a str,
    /// The world it exports, e.g. `pincer:plugin/skill-plugin@0.3.0`.
    pub world: &'a str,
    pub wasm: &'a [u8],
}

/// Pushes `package` to `reference`, signed with `key` when given.
///
/// # Errors
/// [`RegistryError`].
pub async fn publish(
    reference: &str,
    package: &Package<'_>,
    key: Option<&PublisherKey>,
    insecure: bool,
) -> Result<Published, RegistryError> {
    let Package {
        manifest_text,
        name,
        version,
        description,
        world,
        wasm,
    } = *package;
    let reference = parse_reference(reference)?;
    let client = client(&reference, insecure);
    let auth = RegistryAuth::Anonymous;
    let layer_digest = sha256(wasm);
    let config = serde_json::json!({
        "created": chrono::Utc::now().to_rfc3339(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {"exports": [world], "imports": [], "target": null},
    })
    .to_string();
    let annotations: BTreeMap<String, String> = [
        ("org.opencontainers.image.title", name),
        ("org.opencontainers.image.version", version),
        ("org.opencontainers.image.description", description),
        (MANIFEST_ANNOTATION, manifest_text),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_owned()),
        config: OciDescriptor {
            media_type: WASM_CONFIG_MEDIA_TYPE.to_owned(),
            digest: sha256(config.as_bytes()),
            size: config.len() as i64,
            ..OciDescriptor::default()
        },
        layers: vec![OciDescriptor {
            media_type: WASM_LAYER_MEDIA_TYPE.to_owned(),
            digest: layer_digest.clone(),
            size: wasm.len() as i64,
            annotations: Some(BTreeMap::from([(
                "org.opencontainers.image.title".to_owned(),
                format!("{name}.wasm"),
            )])),
            ..OciDescriptor::default()
        }],
        subject: None,
        artifact_type: None,
        annotations: Some(annotations),
    };
    let body = serde_json::to_vec(&manifest).map_err(|e| RegistryError::Registry {
        reference: reference.whole(),
        reason: e.to_string(),
    })?;
    let digest = sha256(&body);
    client
        .store_auth_if_needed(reference.resolve_registry(), &auth)
        .await;
    client
        .push_blob(&reference, wasm.to_vec(), &layer_digest)
        .await
        .map_err(|e| oci_error(&reference, e))?;
    client
        .push_blob(&reference, config.into_bytes(), &manifest.config.digest)
        .await
        .map_err(|e| oci_error(&reference, e))?;
    client
        .push_manifest_raw(
            &reference,
            body,
            reqwest::header::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(|e| oci_error(&reference, e))?;

    let signed_by = match key {
        Some(key) => {
            sign(&client, &reference, &digest, key).await?;
            Some(key.public())
        }
        None => None,
    };
    Ok(Published {
        pinned: pinned(&reference, &digest),
        digest,
        signed_by,
    })
}

fn pinned(reference: &Reference, digest: &str) -> String {
    format!(
        "{}/{}@{digest}",
        reference.registry(),
        reference.repository()
    )
}

fn signature_tag(reference: &Reference, digest: &str) -> Reference {
    Reference::with_tag(
        reference.registry().to_owned(),
        reference.repository().to_owned(),
        format!("{}.sig", digest.replace(':', "-")),
    )
}

async fn sign(
    client: &Client,
    reference: &Reference,
    digest: &str,
    key: &PublisherKey,
) -> Result<(), RegistryError> {
    let tag = signature_tag(reference, digest);
    let payload = signing::payload(reference.repository(), digest);
    let signature = key.sign(&payload);
    let config = b"{}".to_vec();
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_owned()),
        config: OciDescriptor {
            media_type: "application/vnd.oci.image.config.v1+json".to_owned(),
            digest: sha256(&config),
            size: config.len() as i64,
            ..OciDescriptor::default()
        },
        layers: vec![OciDescriptor {
            media_type: SIGNATURE_MEDIA_TYPE.to_owned(),
            digest: sha256(&payload),
            size: payload.len() as i64,
            annotations: Some(BTreeMap::from([
                (SIGNATURE_ANNOTATION.to_owned(), signature),
                (PUBLISHER_ANNOTATION.to_owned(), key.public()),
            ])),
            ..OciDescriptor::default()
        }],
        subject: None,
        artifact_type: None,
        annotations: None,
    };
    let body = serde_json::to_vec(&manifest).map_err(|e| RegistryError::Registry {
        reference: tag.whole(),
        reason: e.to_string(),
    })?;
    let payload_digest = manifest.layers[0].digest.clone();
    client
        .push_blob(&tag, payload, &payload_digest)
        .await
        .map_err(|e| oci_error(&tag, e))?;
    client
        .push_blob(&tag, config, &manifest.config.digest)
        .await
        .map_err(|e| oci_error(&tag, e))?;
    client
        .push_manifest_raw(
            &tag,
            body,
            reqwest::header::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(|e| oci_error(&tag, e))?;
    Ok(())
}

/// An `AsyncWrite` into memory that refuses more than `limit` bytes.
struct Capped {
    bytes: Vec<u8>,
    limit: usize,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.limit {
            return Poll::Ready(Err(std::io::Error::other(format!(
                "more than the {} bytes its manifest declares",
                self.limit
            ))));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

async fn blob(
    client: &Client,
    reference: &Reference,
    descriptor: &OciDescriptor,
    max: i64,
) -> Result<Vec<u8>, RegistryError> {
    if descriptor.size < 0 || descriptor.size > max {
        return Err(RegistryError::NotAPlugin(
            reference.whole(),
            format!("a layer of {} bytes (at most {max})", descriptor.size),
        ));
    }
    let mut out = Capped {
        bytes: Vec::new(),
        limit: usize::try_from(descriptor.size).unwrap_or(0),
    };
    client
        .pull_blob(reference, descriptor, &mut out)
        .await
        .map_err(|e| oci_error(reference, e))?;
    let got = sha256(&out.bytes);
    if got != descriptor.digest {
        return Err(RegistryError::DigestMismatch {
            reference: reference.whole(),
            what: format!("the blob {}", descriptor.digest),
            expected: descriptor.digest.clone(),
            got,
        });
    }
    Ok(out.bytes)
}

async fn manifest(
    client: &Client,
    reference: &Reference,
) -> Result<
    Result<(OciImageManifest, String), oci_client::errors::OciDistributionError>,
    RegistryError,
> {
    let raw = client
        .pull_manifest_raw(reference, &RegistryAuth::Anonymous, &[OCI_IMAGE_MEDIA_TYPE])
        .await;
    let (bytes, _) = match raw {
        Ok(raw) => raw,
        Err(e) => return Ok(Err(e)),
    };
    if bytes.len() as i64 > MAX_SMALL_BYTES {
        return Err(RegistryError::NotAPlugin(
            reference.whole(),
            "a manifest over 1 MiB".into(),
        ));
    }
    let digest = sha256(&bytes);
    if let Some(expected) = reference.digest()
        && expected != digest
    {
        return Err(RegistryError::DigestMismatch {
            reference: reference.whole(),
            what: "the manifest".into(),
            expected: expected.to_owned(),
            got: digest,
        });
    }
    let manifest: OciImageManifest = serde_json::from_slice(&bytes)
        .map_err(|e| RegistryError::NotAPlugin(reference.whole(), format!("its manifest: {e}")))?;
    Ok(Ok((manifest, digest)))
}

/// Fetches and checks the package at `reference` (nothing is written).
///
/// # Errors
/// [`RegistryError`]: unreachable, not found, not a plugin, a digest that
/// does not match, a signature that does not verify.
pub async fn pull(
    reference: &str,
    trusted: &[Trusted],
    insecure: bool,
) -> Result<Pulled, RegistryError> {
    let reference = parse_reference(reference)?;
    let client = client(&reference, insecure);
    client
        .store_auth_if_needed(reference.resolve_registry(), &RegistryAuth::Anonymous)
        .await;
    let (manifest, digest) = manifest(&client, &reference)
        .await?
        .map_err(|e| oci_error(&reference, e))?;
    let not_plugin = |why: String| RegistryError::NotAPlugin(reference.whole(), why);
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(not_plugin(format!(
            "its config is `{}`, not `{WASM_CONFIG_MEDIA_TYPE}`",
            manifest.config.media_type
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(not_plugin(format!(
            "{} layers, not one component",
            manifest.layers.len()
        )));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(not_plugin(format!(
            "its layer is `{}`, not `{WASM_LAYER_MEDIA_TYPE}`",
            layer.media_type
        )));
    }
    let manifest_text = manifest
        .annotations
        .as_ref()
        .and_then(|a| a.get(MANIFEST_ANNOTATION))
        .cloned()
        .ok_or_else(|| {
            not_plugin(format!(
                "no `{MANIFEST_ANNOTATION}` annotation (plugin.toml)"
            ))
        })?;

    let signature = check_signature(&client, &reference, &digest, trusted).await?;
    let wasm = blob(&client, &reference, layer, MAX_COMPONENT_BYTES).await?;
    Ok(Pulled {
        pinned: pinned(&reference, &digest),
        digest,
        manifest_text,
        wasm,
        signature,
    })
}

async fn check_signature(
    client: &Client,
    reference: &Reference,
    digest: &str,
    trusted: &[Trusted],
) -> Result<Signature, RegistryError> {
    let tag = signature_tag(reference, digest);
    let (manifest, _) = match manifest(client, &tag).await? {
        Ok(found) => found,
        Err(e) if is_not_found(&e) => return Ok(Signature::Unsigned),
        Err(e) => return Err(oci_error(&tag, e)),
    };
    let bad = || RegistryError::BadSignature(reference.whole());
    let layer = manifest
        .layers
        .iter()
        .find(|l| l.media_type == SIGNATURE_MEDIA_TYPE)
        .ok_or_else(bad)?;
    let annotations = layer.annotations.clone().unwrap_or_default();
    let (Some(signature), Some(key)) = (
        annotations.get(SIGNATURE_ANNOTATION),
        annotations.get(PUBLISHER_ANNOTATION),
    ) else {
        return Err(bad());
    };
    let payload = blob(client, &tag, layer, MAX_SMALL_BYTES).await?;
    if signing::payload_digest(&payload).as_deref() != Some(digest)
        || !signing::verify(key, &payload, signature)
    {
        return Err(bad());
    }
    Ok(match trusted.iter().find(|t| t.key.trim() == key.trim()) {
        Some(t) => Signature::Trusted {
            publisher: t.name.clone(),
            key: key.clone(),
        },
        None => Signature::Untrusted { key: key.clone() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_and_references() {
        for registry in [
            "localhost:5000",
            "127.0.0.1:5000",
            "[::1]:5000",
            "localhost",
        ] {
            assert!(is_loopback(registry), "{registry}");
        }
        for registry in [
            "registry.example.com",
            "10.0.0.1:5000",
            "localhost.evil.com:5000",
        ] {
            assert!(!is_loopback(registry), "{registry}");
        }
        assert!(parse_reference("localhost:5000/acme/skill-weather:1.2.0").is_ok());
        let err = parse_reference("skill-weather").unwrap_err().to_string();
        assert!(err.contains("not a registry reference"), "{err}");
    }
}
