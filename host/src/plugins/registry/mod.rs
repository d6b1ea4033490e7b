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
//! `oci-client` pushes (`publish`). Pulling is this module's own small
//! client of the distribution protocol (anonymous bearer tokens, manifests,
//! blobs), because every byte a registry sends is read through a cap:
//! a declared `Content-Length` over the cap is refused before the body is
//! read, and a body without one is read only up to the cap (manifests,
//! signature payloads and token answers: 1 MiB; a component: its
//! descriptor's size, at most [`MAX_COMPONENT_BYTES`]).

pub mod signing;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest as _, Sha256};

pub use signing::PublisherKey;

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
/// The largest manifest, signature payload or token answer read.
const MAX_SMALL_BYTES: i64 = 1 << 20;
/// How much of an error answer is read (for its message).
const MAX_ERROR_BYTES: i64 = 16 << 10;

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
    #[error(
        "{reference}: {what} is larger than {limit} ({how}); it is not a pincer plugin, and nothing was installed"
    )]
    TooLarge {
        reference: String,
        what: String,
        limit: String,
        /// What the registry declared, or that reading stopped at the cap.
        how: String,
    },
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
    /// Signed by a trusted key whose `plugins` list names none matching
    /// this plugin: untrusted for this name.
    OutOfScope {
        publisher: String,
        key: String,
        plugin: String,
        may_sign: Vec<String>,
    },
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

/// A trusted publisher: a name, an `ed25519:` key and, when given, the
/// plugin names (globs) it may sign; `None`: any name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    pub name: String,
    pub key: String,
    pub plugins: Option<Vec<String>>,
}

/// Whether plugin `name` matches `glob`, where `*` is any run of
/// characters (none included) and every other character is itself.
pub fn name_matches(glob: &str, name: &str) -> bool {
    let (g, n): (Vec<char>, Vec<char>) = (glob.chars().collect(), name.chars().collect());
    // Greedy wildcard matching with one backtrack point.
    let (mut gi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if gi < g.len() && g[gi] == '*' {
            star = Some((gi, ni));
            gi += 1;
        } else if gi < g.len() && g[gi] == n[ni] {
            gi += 1;
            ni += 1;
        } else if let Some((sg, sn)) = star {
            gi = sg + 1;
            ni = sn + 1;
            star = Some((sg, sn + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|c| *c == '*')
}

/// Checks one `plugins.trusted_publishers[].plugins` entry: a plugin name
/// in which `*` may stand for any run of characters.
///
/// # Errors
/// What is wrong with it.
pub fn check_name_glob(glob: &str) -> Result<(), crate::plugins::Invalid> {
    let ok = !glob.is_empty()
        && glob.len() <= 64
        && glob
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*');
    if ok {
        Ok(())
    } else {
        Err(crate::plugins::Invalid::from(format!(
            "`{glob}` is not a plugin name pattern: use a-z, 0-9, `-` and `*` (any run of characters), e.g. \"acme-*\""
        )))
    }
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

/// A registry answer's body, read through a cap.
enum Body {
    Read(Vec<u8>),
    /// Over the cap: `Some(n)` declared `Content-Length: n`, `None` sent
    /// more than the cap without saying so.
    TooLarge(Option<u64>),
}

/// A pull-only client of one registry, with the anonymous token it was
/// given (if it asks for one).
struct Fetcher {
    http: reqwest::Client,
    /// `scheme://registry`
    base: String,
    registry: String,
    token: Option<String>,
}

impl Fetcher {
    /// A client for `reference`'s registry: plain HTTP on loopback or with
    /// `insecure`, HTTPS otherwise; fetches an anonymous pull token when the
    /// registry asks for one.
    async fn new(reference: &Reference, insecure: bool) -> Result<Self, RegistryError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let registry = reference.resolve_registry().to_owned();
        let scheme = if is_loopback(&registry) || insecure {
            "http"
        } else {
            "https"
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RegistryError::Registry {
                reference: reference.whole(),
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        let mut fetcher = Fetcher {
            http,
            base: format!("{scheme}://{registry}"),
            registry,
            token: None,
        };
        fetcher.token = fetcher.anonymous_token(reference).await?;
        Ok(fetcher)
    }

    fn request_error(&self, reference: &Reference, e: &reqwest::Error) -> RegistryError {
        if e.is_connect() || e.is_timeout() {
            RegistryError::Unreachable {
                registry: self.registry.clone(),
                reason: e.to_string(),
            }
        } else {
            RegistryError::Registry {
                reference: reference.whole(),
                reason: e.to_string(),
            }
        }
    }

    async fn get(
        &self,
        reference: &Reference,
        url: &str,
        accept: &str,
        token: Option<&str>,
    ) -> Result<reqwest::Response, RegistryError> {
        let mut request = self.http.get(url).header(reqwest::header::ACCEPT, accept);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request
            .send()
            .await
            .map_err(|e| self.request_error(reference, &e))
    }

    /// Reads `response`'s body, at most `max` bytes.
    async fn read(
        &self,
        reference: &Reference,
        mut response: reqwest::Response,
        max: i64,
    ) -> Result<Body, RegistryError> {
        let max = u64::try_from(max).unwrap_or(0);
        if let Some(declared) = response.content_length()
            && declared > max
        {
            return Ok(Body::TooLarge(Some(declared)));
        }
        let mut bytes = Vec::with_capacity(
            usize::try_from(response.content_length().unwrap_or(0).min(max)).unwrap_or(0),
        );
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.request_error(reference, &e))?
        {
            if (bytes.len() + chunk.len()) as u64 > max {
                return Ok(Body::TooLarge(None));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Body::Read(bytes))
    }

    /// The error a non-success answer stands for, with the start of its
    /// body (the registry's error JSON).
    async fn failed(&self, reference: &Reference, response: reqwest::Response) -> RegistryError {
        let status = response.status();
        let detail = match self.read(reference, response, MAX_ERROR_BYTES).await {
            Ok(Body::Read(bytes)) if !bytes.is_empty() => {
                format!(": {}", String::from_utf8_lossy(&bytes).trim())
            }
            _ => String::new(),
        };
        RegistryError::Registry {
            reference: reference.whole(),
            reason: format!("the registry answered HTTP {status}{detail}"),
        }
    }

    /// The anonymous pull token of a registry that answers `/v2/` with a
    /// `Bearer` challenge; `None` when it asks for none.
    async fn anonymous_token(
        &self,
        reference: &Reference,
    ) -> Result<Option<String>, RegistryError> {
        let response = self
            .get(
                reference,
                &format!("{}/v2/", self.base),
                "application/json",
                None,
            )
            .await?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            return Ok(None);
        }
        let Some(challenge) = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_challenge)
        else {
            return Ok(None);
        };
        let Some(realm) = challenge.get("realm") else {
            return Ok(None);
        };
        let mut url = url::Url::parse(realm).map_err(|e| RegistryError::Registry {
            reference: reference.whole(),
            reason: format!("its token realm `{realm}` is not a URL: {e}"),
        })?;
        url.query_pairs_mut().append_pair(
            "scope",
            &format!("repository:{}:pull", reference.repository()),
        );
        if let Some(service) = challenge.get("service") {
            url.query_pairs_mut().append_pair("service", service);
        }
        let response = self
            .get(reference, url.as_str(), "application/json", None)
            .await?;
        if !response.status().is_success() {
            return Err(self.failed(reference, response).await);
        }
        let bytes = match self.read(reference, response, MAX_SMALL_BYTES).await? {
            Body::Read(bytes) => bytes,
            Body::TooLarge(declared) => {
                return Err(too_large(reference, "its token answer", declared));
            }
        };
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&bytes).map_err(|e| RegistryError::Registry {
            reference: reference.whole(),
            reason: format!("its token answer: {e}"),
        })?;
        Ok(token.token.or(token.access_token))
    }
}

/// The parameters of a `Bearer realm="…",service="…"` challenge.
fn bearer_challenge(header: &str) -> Option<BTreeMap<String, String>> {
    let rest = header.trim().strip_prefix("Bearer ")?;
    let mut out = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let value: String = if chars.peek() == Some(&'"') {
            chars.next();
            chars.by_ref().take_while(|c| *c != '"').collect()
        } else {
            chars.by_ref().take_while(|c| *c != ',').collect()
        };
        out.insert(key.trim().to_ascii_lowercase(), value);
    }
    Some(out)
}

fn too_large(reference: &Reference, what: &str, declared: Option<u64>) -> RegistryError {
    let limit = |max: i64| {
        if max >= 1 << 20 && max % (1 << 20) == 0 {
            format!("{} MiB", max >> 20)
        } else {
            format!("{max} bytes")
        }
    };
    RegistryError::TooLarge {
        reference: reference.whole(),
        what: what.to_owned(),
        limit: limit(MAX_SMALL_BYTES),
        how: match declared {
            Some(n) => format!("the registry declared {n} bytes; none were read"),
            None => "the registry sent more without declaring a length; reading stopped at the cap"
                .to_owned(),
        },
    }
}

async fn blob(
    fetcher: &Fetcher,
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
    let url = format!(
        "{}/v2/{}/blobs/{}",
        fetcher.base,
        reference.repository(),
        descriptor.digest
    );
    let response = fetcher
        .get(reference, &url, "*/*", fetcher.token.as_deref())
        .await?;
    if !response.status().is_success() {
        return Err(fetcher.failed(reference, response).await);
    }
    let bytes = match fetcher.read(reference, response, descriptor.size).await? {
        Body::Read(bytes) => bytes,
        Body::TooLarge(declared) => {
            return Err(RegistryError::Corrupt {
                reference: reference.whole(),
                detail: format!(
                    "the blob {} is larger than the {} bytes its manifest declares{}",
                    descriptor.digest,
                    descriptor.size,
                    declared.map_or(String::new(), |n| format!(" (the registry declared {n})"))
                ),
            });
        }
    };
    let got = sha256(&bytes);
    if got != descriptor.digest {
        return Err(RegistryError::DigestMismatch {
            reference: reference.whole(),
            what: format!("the blob {}", descriptor.digest),
            expected: descriptor.digest.clone(),
            got,
        });
    }
    Ok(bytes)
}

/// The image manifest at `reference` and its digest; `None` when the
/// registry has none there (HTTP 404).
async fn manifest(
    fetcher: &Fetcher,
    reference: &Reference,
) -> Result<Option<(OciImageManifest, String)>, RegistryError> {
    let at = reference.digest().or(reference.tag()).unwrap_or("latest");
    let url = format!(
        "{}/v2/{}/manifests/{at}",
        fetcher.base,
        reference.repository()
    );
    let response = fetcher
        .get(
            reference,
            &url,
            OCI_IMAGE_MEDIA_TYPE,
            fetcher.token.as_deref(),
        )
        .await?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !response.status().is_success() {
        return Err(fetcher.failed(reference, response).await);
    }
    let bytes = match fetcher.read(reference, response, MAX_SMALL_BYTES).await? {
        Body::Read(bytes) => bytes,
        Body::TooLarge(declared) => return Err(too_large(reference, "its manifest", declared)),
    };
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
    Ok(Some((manifest, digest)))
}

/// Fetches and checks the package at `reference` (nothing is written).
///
/// # Errors
/// [`RegistryError`]: unreachable, not found, not a plugin, a digest that
/// does not match, a signature that does not verify, an answer over its cap.
pub async fn pull(
    reference: &str,
    trusted: &[Trusted],
    insecure: bool,
) -> Result<Pulled, RegistryError> {
    let reference = parse_reference(reference)?;
    let fetcher = Fetcher::new(&reference, insecure).await?;
    let (manifest, digest) =
        manifest(&fetcher, &reference)
            .await?
            .ok_or_else(|| RegistryError::Registry {
                reference: reference.whole(),
                reason:
                    "the registry has no manifest there (HTTP 404): check the repository and tag"
                        .into(),
            })?;
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
    let plugin = crate::plugins::Manifest::parse(&manifest_text, &reference.whole())
        .map_err(|e| not_plugin(e.to_string()))?
        .name()
        .to_owned();

    let signature = check_signature(&fetcher, &reference, &digest, trusted, &plugin).await?;
    let wasm = blob(&fetcher, &reference, layer, MAX_COMPONENT_BYTES).await?;
    Ok(Pulled {
        pinned: pinned(&reference, &digest),
        digest,
        manifest_text,
        wasm,
        signature,
    })
}

async fn check_signature(
    fetcher: &Fetcher,
    reference: &Reference,
    digest: &str,
    trusted: &[Trusted],
    plugin: &str,
) -> Result<Signature, RegistryError> {
    let tag = signature_tag(reference, digest);
    let Some((manifest, _)) = manifest(fetcher, &tag).await? else {
        return Ok(Signature::Unsigned);
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
    let payload = blob(fetcher, &tag, layer, MAX_SMALL_BYTES).await?;
    if signing::payload_digest(&payload).as_deref() != Some(digest)
        || !signing::verify(key, &payload, signature)
    {
        return Err(bad());
    }
    Ok(trust(trusted, key, plugin))
}

/// How a valid signature by `key` on plugin `plugin` stands against the
/// trusted publishers: the first entry of that key whose `plugins` matches
/// (or that has none) makes it trusted.
fn trust(trusted: &[Trusted], key: &str, plugin: &str) -> Signature {
    let entries: Vec<&Trusted> = trusted
        .iter()
        .filter(|t| t.key.trim() == key.trim())
        .collect();
    let Some(first) = entries.first() else {
        return Signature::Untrusted {
            key: key.to_owned(),
        };
    };
    let allowing = entries.iter().find(|t| {
        t.plugins
            .as_ref()
            .is_none_or(|globs| globs.iter().any(|g| name_matches(g, plugin)))
    });
    match allowing {
        Some(t) => Signature::Trusted {
            publisher: t.name.clone(),
            key: key.to_owned(),
        },
        None => Signature::OutOfScope {
            publisher: first.name.clone(),
            key: key.to_owned(),
            plugin: plugin.to_owned(),
            may_sign: entries
                .iter()
                .flat_map(|t| t.plugins.iter().flatten().cloned())
                .collect(),
        },
    }
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

    #[test]
    fn name_globs() {
        for (glob, name, matches) in [
            ("acme-*", "acme-calc", true),
            ("acme-*", "acme-", true),
            ("acme-*", "acm-calc", false),
            ("acme-*", "evil-acme-calc", false),
            ("*-calc", "acme-calc", true),
            ("a*c*e", "abcde", true),
            ("a*c*e", "abcd", false),
            ("acme-calc", "acme-calc", true),
            ("acme-calc", "acme-calc2", false),
            ("*", "anything", true),
        ] {
            assert_eq!(name_matches(glob, name), matches, "{glob} ~ {name}");
        }
        assert!(check_name_glob("acme-*").is_ok());
        for bad in ["", "Acme", "acme/*", "a b"] {
            assert!(check_name_glob(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_scoped_key_is_trusted_only_for_its_names() {
        let acme = |plugins: Option<&[&str]>| Trusted {
            name: "acme".into(),
            key: "ed25519:K".into(),
            plugins: plugins.map(|p| p.iter().map(|s| (*s).to_owned()).collect()),
        };
        let trusted = |t: &[Trusted], plugin: &str| {
            matches!(trust(t, "ed25519:K", plugin), Signature::Trusted { .. })
        };
        assert!(trusted(&[acme(None)], "anything"));
        assert!(trusted(&[acme(Some(&["acme-*"]))], "acme-calc"));
        assert_eq!(
            trust(&[acme(Some(&["acme-*"]))], "ed25519:K", "weather"),
            Signature::OutOfScope {
                publisher: "acme".into(),
                key: "ed25519:K".into(),
                plugin: "weather".into(),
                may_sign: vec!["acme-*".into()],
            }
        );
        assert_eq!(
            trust(&[acme(None)], "ed25519:OTHER", "acme-calc"),
            Signature::Untrusted {
                key: "ed25519:OTHER".into()
            }
        );
    }

    #[test]
    fn bearer_challenges() {
        let c = bearer_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(c["realm"], "https://auth.docker.io/token");
        assert_eq!(c["service"], "registry.docker.io");
        assert!(bearer_challenge("Basic realm=\"x\"").is_none());
    }
}
