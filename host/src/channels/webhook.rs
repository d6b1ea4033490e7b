//! The daemon's webhook listener (`channels.listen`, loopback by default):
//! `ANY /channels/NAME/REST` goes to channel NAME's `handle-webhook` with
//! path `/REST`. The plugin checks the platform's signature (through the
//! host's `secrets` interface); its messages are stored before the answer
//! goes out (a store that fails is answered 503, never the plugin's 2xx, so
//! the platform retries), and the turn runs afterwards, so the platform is
//! answered within its limit (Slack: 3 s) whatever the agent does.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::plugins::api;

use super::{ChannelHost, Inbox};

/// Largest webhook body accepted.
pub const MAX_BODY_BYTES: usize = 1 << 20;

#[derive(Clone)]
struct Served {
    host: Arc<ChannelHost>,
    inbox: Arc<dyn Inbox>,
}

pub fn routes(host: Arc<ChannelHost>, inbox: Arc<dyn Inbox>) -> axum::Router {
    axum::Router::new()
        .route("/channels/{name}", any(root))
        .route("/channels/{name}/{*rest}", any(handle))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Served { host, inbox })
}

async fn root(
    state: State<Served>,
    Path(name): Path<String>,
    method: Method,
    query: RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(state.0, name, String::new(), method, query, headers, body).await
}

async fn handle(
    state: State<Served>,
    Path((name, rest)): Path<(String, String)>,
    method: Method,
    query: RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(state.0, name, rest, method, query, headers, body).await
}

fn plain(status: StatusCode, text: impl Into<String>) -> Response {
    (
        status,
        [("content-type", "text/plain; charset=utf-8")],
        text.into(),
    )
        .into_response()
}

async fn serve(
    served: Served,
    name: String,
    rest: String,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(channel) = served.host.get(&name) else {
        return plain(
            StatusCode::NOT_FOUND,
            format!("no channel named `{name}`\n"),
        );
    };
    served.host.update_status(&name, |s| s.webhooks += 1);
    let request = api::WebhookRequest {
        method: method.to_string(),
        path: format!("/{rest}"),
        query: query.unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(k, v)| api::Header {
                name: k.to_string(),
                value: String::from_utf8_lossy(v.as_bytes()).into_owned(),
            })
            .collect(),
        body: body.to_vec(),
    };
    let outcome = served
        .host
        .plugins
        .channel_webhook(&channel.plugin, &request)
        .await;
    use api::ChannelError as E;
    match outcome {
        Ok(Ok(outcome)) => {
            let stored = super::store_inbound(
                &served.host,
                &served.inbox,
                &name,
                outcome.messages,
                outcome.interactions,
            )
            .await;
            if stored.is_err() {
                return plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the message could not be stored, so it was not accepted; send it again (the pincer log says why)\n",
                );
            }
            let mut response = Response::builder().status(
                StatusCode::from_u16(outcome.response.status).unwrap_or(StatusCode::BAD_GATEWAY),
            );
            for h in &outcome.response.headers {
                response = response.header(h.name.as_str(), h.value.as_str());
            }
            response
                .body(axum::body::Body::from(outcome.response.body))
                .unwrap_or_else(|e| {
                    plain(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("the channel plugin answered with a bad response: {e}\n"),
                    )
                })
        }
        Ok(Err(E::Unauthorized(m))) => {
            tracing::warn!(channel = %name, "webhook refused: {m}");
            plain(StatusCode::UNAUTHORIZED, format!("unauthorized: {m}\n"))
        }
        Ok(Err(E::BadRequest(m))) => plain(StatusCode::BAD_REQUEST, format!("bad request: {m}\n")),
        Ok(Err(E::Unsupported(m))) => plain(
            StatusCode::NOT_IMPLEMENTED,
            format!("not supported by this channel: {m}\n"),
        ),
        Ok(Err(E::Rejected(m))) => plain(StatusCode::FORBIDDEN, format!("refused: {m}\n")),
        Ok(Err(E::Upstream(m))) => plain(StatusCode::BAD_GATEWAY, format!("{m}\n")),
        Ok(Err(E::RetryLater(r))) => {
            let secs = r.after_ms.div_ceil(1000).max(1);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [("retry-after", secs.to_string())],
                format!("{}\n", r.reason),
            )
                .into_response()
        }
        Err(e) => {
            tracing::error!(channel = %name, "webhook handling failed: {e}");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the channel plugin failed; see the pincer log\n",
            )
        }
    }
}
