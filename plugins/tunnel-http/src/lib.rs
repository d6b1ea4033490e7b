//! Tunnel `tunnel-http`: lets containers reach one named service on the
//! host's loopback. Requests must carry a relative URL, which is validated and
//! joined onto the configured `target`; hop-by-hop headers are dropped both ways.

mod route;

use pincer_plugin_sdk::tunnel::{Guest, TunnelError};
use pincer_plugin_sdk::types::{HttpError, HttpRequest, HttpResponse};
use pincer_plugin_sdk::{config, http, log};

struct HttpTunnel;

impl Guest for HttpTunnel {
    fn service() -> String {
        config::get("service").unwrap_or_else(|| {
            log::error("config key `service` is not set");
            "tunnel-http".into()
        })
    }

    fn forward(request: HttpRequest) -> Result<HttpResponse, TunnelError> {
        let target = target()?;
        let relative = route::relative_url(&request.url).map_err(TunnelError::BadRequest)?;
        let upstream = HttpRequest {
            url: route::join(&target, relative),
            headers: route::end_to_end(request.headers),
            // A container names no secrets and captures nothing.
            secrets: Vec::new(),
            capture: None,
            ..request
        };
        let mut response = http::fetch(&upstream).map_err(fetch_error)?;
        response.headers = route::end_to_end(response.headers);
        Ok(response)
    }
}

fn target() -> Result<String, TunnelError> {
    let configured = config::get("target").ok_or_else(|| {
        TunnelError::Upstream("tunnel-http: config key `target` is not set".into())
    })?;
    route::parse_target(&configured)
        .map_err(|reason| TunnelError::Upstream(format!("tunnel-http is misconfigured: {reason}")))
}

fn fetch_error(err: HttpError) -> TunnelError {
    match err {
        HttpError::Denied(msg) => TunnelError::Denied(msg),
        HttpError::InvalidRequest(msg) => TunnelError::Upstream(format!("invalid request: {msg}")),
        HttpError::Transport(msg) => TunnelError::Upstream(format!("transport error: {msg}")),
        HttpError::Timeout => TunnelError::Upstream("the service timed out".into()),
        HttpError::TooLarge => TunnelError::Upstream("the response is too large".into()),
    }
}

pincer_plugin_sdk::export_tunnel!(HttpTunnel);
