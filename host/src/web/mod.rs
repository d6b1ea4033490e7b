//! The web console `pincer start` serves on `web.listen`: server-rendered
//! pages over the same stores and functions the CLI uses (nothing here
//! decides a rule of its own), behind a one-time sign-in
//! (`pincer web login`), CSRF tokens, an origin check and a strict CSP.

mod auth;
mod chat;
mod guard;
mod live;
mod pages;
mod templates;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;

pub use auth::{AuthError, LOGIN_TOKEN_TTL, WebAuth, WebSession};

use crate::audit::AuditLog;
use crate::daemon::context::Context;
use crate::turn::Agent;

/// The cookie that carries a signed-in session.
pub const SESSION_COOKIE: &str = "pincer_session";

/// What the console reads and acts on: the daemon's own services.
pub struct Console {
    ctx: Context,
    agent: Arc<Agent>,
    audit: Arc<AuditLog>,
    auth: WebAuth,
    templates: templates::Templates,
    /// `Host` header values answered.
    hosts: Vec<String>,
    secure: bool,
    ttl: std::time::Duration,
    streams: live::Streams,
    chat: chat::Feeds,
    /// Becomes true when the daemon stops: live streams end.
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Console {
    pub fn new(
        ctx: &Context,
        agent: Arc<Agent>,
        audit: Arc<AuditLog>,
        bound: SocketAddr,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Arc<Self>> {
        let web = &ctx.config.web;
        Ok(Arc::new(Self {
            ctx: ctx.clone(),
            agent,
            audit,
            auth: WebAuth::open_at(&ctx.state()?)?,
            templates: templates::Templates::new()?,
            hosts: allowed_hosts(bound, &web.hosts),
            secure: web.tls,
            ttl: web.session_ttl.0,
            streams: live::Streams::default(),
            chat: chat::Feeds::default(),
            stop,
        }))
    }

    /// The console's routes, guarded.
    pub fn router(self: &Arc<Self>) -> axum::Router {
        pages::routes()
            .merge(chat::routes())
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                guard::guard,
            ))
            .with_state(self.clone())
    }
}

/// The `Host` values a request may carry: the bound address, its
/// `localhost` spelling on loopback, and `web.hosts`.
fn allowed_hosts(bound: SocketAddr, extra: &[String]) -> Vec<String> {
    let port = bound.port();
    let mut hosts = vec![bound.to_string()];
    if bound.ip().is_loopback() {
        hosts.extend([
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ]);
    }
    hosts.extend(extra.iter().map(|h| h.to_ascii_lowercase()));
    hosts
}

/// Binds `web.listen`: `None` when the console is off, or when the default
/// port is busy (a warning); an explicit address that cannot be bound, or
/// one beyond loopback without `allow_remote`, is an error.
pub async fn bind(
    config: &crate::config::Config,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let web = &config.web;
    if !web.enabled {
        return Ok(None);
    }
    let at = web.address();
    if !web.allow_remote && !crate::config::is_loopback(&at) {
        anyhow::bail!("{}", crate::config::remote_refusal("web", &at));
    }
    match tokio::net::TcpListener::bind(at).await {
        Ok(listener) => Ok(Some(listener)),
        Err(e) if web.listen.is_none() => {
            say_err!(
                "pincer: warning: the web console is off: cannot listen on {at} ({e}); set `web.listen` to another address"
            );
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen on {at} (web.listen)")),
    }
}

/// The one-time sign-in URL `pincer web login` prints: at the address the
/// running daemon's console is bound to (`running`), else the configured one.
pub fn login_url(config: &crate::config::Config, running: Option<&str>, token: &str) -> String {
    let at = running.map_or_else(|| config.web.address().to_string(), str::to_owned);
    let scheme = if config.web.tls { "https" } else { "http" };
    format!("{scheme}://{at}/login?token={token}")
}
