//! What every older release shares with the newest, written once: the
//! records and enums unchanged from 0.1.0 to 0.3.0 ([`unchanged_since_0_1!`]),
//! the host imports unchanged since 0.1.0 ([`delegating_imports!`]), what
//! 0.2.0 and 0.3.0 share ([`since_0_2!`]) and the calls into an older
//! release's worlds ([`converting_exports!`]). A release
//! file invokes them with `types`, `ch` (its channel exports), `tn` (its
//! tunnel exports) and `new` (the newest release) in scope, and writes out
//! only what changed.

macro_rules! records_since_0_1 {
    () => {
        impl From<types::Header> for new::Header {
            fn from(h: types::Header) -> Self {
                Self {
                    name: h.name,
                    value: h.value,
                }
            }
        }

        impl From<new::Header> for types::Header {
            fn from(h: new::Header) -> Self {
                Self {
                    name: h.name,
                    value: h.value,
                }
            }
        }

        impl From<new::HttpResponse> for types::HttpResponse {
            fn from(r: new::HttpResponse) -> Self {
                Self {
                    status: r.status,
                    headers: r.headers.into_iter().map(Into::into).collect(),
                    body: r.body,
                }
            }
        }

        impl From<types::HttpResponse> for new::HttpResponse {
            fn from(r: types::HttpResponse) -> Self {
                Self {
                    status: r.status,
                    headers: r.headers.into_iter().map(Into::into).collect(),
                    body: r.body,
                }
            }
        }

        impl From<types::Message> for new::Message {
            fn from(m: types::Message) -> Self {
                Self {
                    id: m.id,
                    conversation: m.conversation,
                    thread: m.thread,
                    sender: m.sender,
                    sender_name: m.sender_name,
                    text: m.text,
                    timestamp_ms: m.timestamp_ms,
                    files: Vec::new(),
                }
            }
        }

        impl From<&new::Message> for types::Message {
            fn from(m: &new::Message) -> Self {
                Self {
                    id: m.id.clone(),
                    conversation: m.conversation.clone(),
                    thread: m.thread.clone(),
                    sender: m.sender.clone(),
                    sender_name: m.sender_name.clone(),
                    text: m.text.clone(),
                    timestamp_ms: m.timestamp_ms,
                }
            }
        }

        impl From<&new::WebhookRequest> for ch::WebhookRequest {
            fn from(r: &new::WebhookRequest) -> Self {
                Self {
                    method: r.method.clone(),
                    path: r.path.clone(),
                    query: r.query.clone(),
                    headers: r.headers.iter().cloned().map(Into::into).collect(),
                    body: r.body.clone(),
                }
            }
        }

        impl From<&new::Frame> for ch::Frame {
            fn from(f: &new::Frame) -> Self {
                match f {
                    new::Frame::Text(t) => Self::Text(t.clone()),
                    new::Frame::Binary(b) => Self::Binary(b.clone()),
                }
            }
        }

        impl From<ch::Frame> for new::Frame {
            fn from(f: ch::Frame) -> Self {
                match f {
                    ch::Frame::Text(t) => Self::Text(t),
                    ch::Frame::Binary(b) => Self::Binary(b),
                }
            }
        }

        impl From<ch::Delivery> for new::Delivery {
            fn from(d: ch::Delivery) -> Self {
                Self { id: d.id }
            }
        }

        impl From<types::ToolSpec> for new::ToolSpec {
            fn from(t: types::ToolSpec) -> Self {
                Self {
                    name: t.name,
                    description: t.description,
                    input_schema: t.input_schema,
                }
            }
        }

        impl From<types::ToolOutput> for new::ToolOutput {
            fn from(t: types::ToolOutput) -> Self {
                Self { json: t.json }
            }
        }

        impl From<types::ToolError> for new::ToolError {
            fn from(e: types::ToolError) -> Self {
                match e {
                    types::ToolError::UnknownTool(m) => Self::UnknownTool(m),
                    types::ToolError::InvalidArgs(m) => Self::InvalidArgs(m),
                    types::ToolError::Failed(m) => Self::Failed(m),
                    types::ToolError::Denied(m) => Self::Denied(m),
                }
            }
        }

        impl From<&new::Event> for types::Event {
            fn from(e: &new::Event) -> Self {
                use new::EventBody as B;
                Self {
                    timestamp_ms: e.timestamp_ms,
                    workspace: e.workspace.clone(),
                    session: e.session.clone(),
                    body: match &e.body {
                        B::MessageIn(m) => types::EventBody::MessageIn(m.into()),
                        B::MessageOut(o) => types::EventBody::MessageOut(o.into()),
                        B::ToolCall(c) => types::EventBody::ToolCall(types::ToolCall {
                            tool: c.tool.clone(),
                            args_json: c.args_json.clone(),
                            outcome: c.outcome.clone(),
                            duration_ms: c.duration_ms,
                        }),
                        B::LlmUsage(u) => types::EventBody::LlmUsage(types::LlmUsage {
                            model: u.model.clone(),
                            input_tokens: u.input_tokens,
                            output_tokens: u.output_tokens,
                            cost_usd: u.cost_usd,
                        }),
                        B::PluginFault(m) => types::EventBody::PluginFault(m.clone()),
                        B::Error(m) => types::EventBody::Error(m.clone()),
                    },
                }
            }
        }

        impl From<tn::TunnelError> for new::TunnelError {
            fn from(e: tn::TunnelError) -> Self {
                match e {
                    tn::TunnelError::Denied(m) => Self::Denied(m),
                    tn::TunnelError::BadRequest(m) => Self::BadRequest(m),
                    tn::TunnelError::Upstream(m) => Self::Upstream(m),
                }
            }
        }
    };
}
pub(crate) use records_since_0_1;

/// What 0.1.0 to 0.3.0 share: [`records_since_0_1!`] and the outbound
/// message and webhook outcome before 0.4.0's buttons.
macro_rules! unchanged_since_0_1 {
    () => {
        $crate::plugins::wit::convert::records_since_0_1!();

        /// The host sends actions and `visible-to` only to interactive
        /// channels (0.4.0 and later), so nothing is lost here.
        impl From<&new::Outbound> for types::Outbound {
            fn from(o: &new::Outbound) -> Self {
                Self {
                    conversation: o.conversation.clone(),
                    thread: o.thread.clone(),
                    text: o.text.clone(),
                    reply_to: o.reply_to.clone(),
                }
            }
        }

        impl From<ch::WebhookOutcome> for new::WebhookOutcome {
            fn from(o: ch::WebhookOutcome) -> Self {
                Self {
                    response: o.response.into(),
                    messages: o.messages.into_iter().map(Into::into).collect(),
                    interactions: Vec::new(),
                }
            }
        }
    };
}
pub(crate) use unchanged_since_0_1;

/// The host's calls into an older release's worlds (`worlds.rs`): the
/// host's API values convert to the release's and the results back. Every
/// older release has the same four; a release whose channel world exports
/// more passes those methods of `ChannelExports` in.
macro_rules! converting_exports {
    ($($channel_extra:tt)*) => {

        impl ChannelExports for ChannelPlugin {
            fn handle_webhook<'a>(
                &'a self,
                store: &'a mut PluginStore,
                request: &'a new::WebhookRequest,
            ) -> Call<'a, Result<new::WebhookOutcome, new::ChannelError>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_channel()
                        .call_handle_webhook(store, &request.into())
                        .await?
                        .map(Into::into)
                        .map_err(Into::into))
                })
            }

            fn connect<'a>(
                &'a self,
                store: &'a mut PluginStore,
            ) -> Call<'a, Result<Option<new::ConnectionRequest>, new::ChannelError>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_channel()
                        .call_connect(store)
                        .await?
                        .map(|c| c.map(Into::into))
                        .map_err(Into::into))
                })
            }

            fn on_frame<'a>(
                &'a self,
                store: &'a mut PluginStore,
                frame: &'a new::Frame,
            ) -> Call<'a, Result<new::FrameOutcome, new::ChannelError>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_channel()
                        .call_on_frame(store, &frame.into())
                        .await?
                        .map(Into::into)
                        .map_err(Into::into))
                })
            }

            fn send<'a>(
                &'a self,
                store: &'a mut PluginStore,
                message: &'a new::Outbound,
            ) -> Call<'a, Result<new::Delivery, new::ChannelError>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_channel()
                        .call_send(store, &message.into())
                        .await?
                        .map(Into::into)
                        .map_err(Into::into))
                })
            }
                $($channel_extra)*
        }

        impl SkillExports for SkillPlugin {
            fn tools<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, Vec<new::ToolSpec>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_skill()
                        .call_tools(store)
                        .await?
                        .into_iter()
                        .map(Into::into)
                        .collect())
                })
            }

            fn invoke<'a>(
                &'a self,
                store: &'a mut PluginStore,
                tool: &'a str,
                args_json: &'a str,
            ) -> Call<'a, Result<new::ToolOutput, new::ToolError>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_skill()
                        .call_invoke(store, tool, args_json)
                        .await?
                        .map(Into::into)
                        .map_err(Into::into))
                })
            }
        }

        impl ObserverExports for ObserverPlugin {
            fn on_event<'a>(&'a self, store: &'a mut PluginStore, event: &'a new::Event) -> Call<'a, ()> {
                Box::pin(async move {
                    self.pincer_plugin_observer()
                        .call_on_event(store, &event.into())
                        .await
                })
            }
        }

        impl TunnelExports for TunnelPlugin {
            fn service<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, String> {
                Box::pin(self.pincer_plugin_tunnel().call_service(store))
            }

            fn forward<'a>(
                &'a self,
                store: &'a mut PluginStore,
                request: &'a new::HttpRequest,
            ) -> Call<'a, Result<new::HttpResponse, new::TunnelError>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_tunnel()
                        .call_forward(store, &request.into())
                        .await?
                        .map(Into::into)
                        .map_err(Into::into))
                })
            }
        }
    };
}
pub(crate) use converting_exports;

/// Host imports unchanged since 0.1.0 (`types`, `logging`, `clock`, `kv`),
/// delegating to the newest release's implementation (`new`).
macro_rules! delegating_imports {
    () => {
        impl types::Host for PluginState {}

        impl logging::Host for PluginState {
            async fn log(
                &mut self,
                level: logging::Level,
                message: String,
            ) -> wasmtime::Result<()> {
                use new::logging::{Host, Level};
                let level = match level {
                    logging::Level::Trace => Level::Trace,
                    logging::Level::Debug => Level::Debug,
                    logging::Level::Info => Level::Info,
                    logging::Level::Warn => Level::Warn,
                    logging::Level::Error => Level::Error,
                };
                Host::log(self, level, message).await
            }
        }

        impl clock::Host for PluginState {
            async fn now_ms(&mut self) -> wasmtime::Result<u64> {
                new::clock::Host::now_ms(self).await
            }
        }

        fn kv_error(e: new::kv::KvError) -> kv::KvError {
            use new::kv::KvError as E;
            match e {
                E::Denied => kv::KvError::Denied,
                E::QuotaExceeded(m) => kv::KvError::QuotaExceeded(m),
                E::InvalidKey(m) => kv::KvError::InvalidKey(m),
                E::Storage(m) => kv::KvError::Storage(m),
            }
        }

        impl kv::Host for PluginState {
            async fn get(
                &mut self,
                key: String,
            ) -> wasmtime::Result<Result<Option<kv::Entry>, kv::KvError>> {
                Ok(new::kv::Host::get(self, key)
                    .await?
                    .map_err(kv_error)
                    .map(|e| {
                        e.map(|e| kv::Entry {
                            value: e.value,
                            version: e.version,
                        })
                    }))
            }

            async fn set(
                &mut self,
                key: String,
                value: Vec<u8>,
                ttl_ms: Option<u64>,
            ) -> wasmtime::Result<Result<u64, kv::KvError>> {
                Ok(new::kv::Host::set(self, key, value, ttl_ms)
                    .await?
                    .map_err(kv_error))
            }

            async fn compare_and_set(
                &mut self,
                key: String,
                expected: Option<u64>,
                value: Vec<u8>,
                ttl_ms: Option<u64>,
            ) -> wasmtime::Result<Result<Option<u64>, kv::KvError>> {
                Ok(
                    new::kv::Host::compare_and_set(self, key, expected, value, ttl_ms)
                        .await?
                        .map_err(kv_error),
                )
            }

            async fn delete(&mut self, key: String) -> wasmtime::Result<Result<bool, kv::KvError>> {
                Ok(new::kv::Host::delete(self, key).await?.map_err(kv_error))
            }

            async fn list_keys(
                &mut self,
                prefix: String,
                limit: u32,
            ) -> wasmtime::Result<Result<Vec<String>, kv::KvError>> {
                Ok(new::kv::Host::list_keys(self, prefix, limit)
                    .await?
                    .map_err(kv_error))
            }
        }
    };
}
pub(crate) use delegating_imports;

/// The imports that use secrets by name (`config` without secret keys,
/// `secrets`, `http`) and the requests both ways, as 0.2.0 to 0.4.0 have them.
macro_rules! imports_since_0_2 {
    () => {
        impl config::Host for PluginState {
            async fn get_json(&mut self) -> wasmtime::Result<String> {
                new::config::Host::get_json(self).await
            }

            async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
                new::config::Host::get(self, key).await
            }
        }

        fn secret_error(e: new::secrets::SecretError) -> secrets::SecretError {
            use new::secrets::SecretError as E;
            match e {
                E::Unknown(m) => secrets::SecretError::Unknown(m),
                E::Denied(m) => secrets::SecretError::Denied(m),
                E::Invalid(m) => secrets::SecretError::Invalid(m),
            }
        }

        impl secrets::Host for PluginState {
            async fn is_set(&mut self, secret: String) -> wasmtime::Result<bool> {
                new::secrets::Host::is_set(self, secret).await
            }

            async fn verify(
                &mut self,
                digest: secrets::Digest,
                key: Option<String>,
                parts: Vec<secrets::Part>,
                expected: Vec<u8>,
            ) -> wasmtime::Result<Result<bool, secrets::SecretError>> {
                let digest = match digest {
                    secrets::Digest::HmacSha256 => new::secrets::Digest::HmacSha256,
                    secrets::Digest::Sha256 => new::secrets::Digest::Sha256,
                };
                let parts = parts
                    .into_iter()
                    .map(|p| match p {
                        secrets::Part::Bytes(b) => new::secrets::Part::Bytes(b),
                        secrets::Part::Secret(s) => new::secrets::Part::Secret(s),
                    })
                    .collect();
                Ok(
                    new::secrets::Host::verify(self, digest, key, parts, expected)
                        .await?
                        .map_err(secret_error),
                )
            }

            async fn decrypt(
                &mut self,
                cipher: secrets::Cipher,
                key: String,
                data: Vec<u8>,
            ) -> wasmtime::Result<Result<Vec<u8>, secrets::SecretError>> {
                let cipher = match cipher {
                    secrets::Cipher::Aes256CbcSha256Key => new::secrets::Cipher::Aes256CbcSha256Key,
                };
                Ok(new::secrets::Host::decrypt(self, cipher, key, data)
                    .await?
                    .map_err(secret_error))
            }
        }

        impl http::Host for PluginState {
            async fn fetch(
                &mut self,
                request: types::HttpRequest,
            ) -> wasmtime::Result<Result<types::HttpResponse, types::HttpError>> {
                Ok(new::http::Host::fetch(self, request.into())
                    .await?
                    .map(Into::into)
                    .map_err(|e| {
                        use new::types::HttpError as E;
                        match e {
                            E::Denied(m) => types::HttpError::Denied(m),
                            E::InvalidRequest(m) => types::HttpError::InvalidRequest(m),
                            E::Transport(m) => types::HttpError::Transport(m),
                            E::Timeout => types::HttpError::Timeout,
                            E::TooLarge => types::HttpError::TooLarge,
                        }
                    }))
            }
        }

        // Requests, both as the plugin sends them (http.fetch) and as a
        // tunnel receives them (forward).

        impl From<types::HttpRequest> for new::HttpRequest {
            fn from(r: types::HttpRequest) -> Self {
                Self {
                    method: r.method,
                    url: r.url,
                    headers: r.headers.into_iter().map(Into::into).collect(),
                    body: r.body,
                    timeout_ms: r.timeout_ms,
                    secrets: r
                        .secrets
                        .into_iter()
                        .map(|u| new::SecretUse {
                            secret: u.secret,
                            place: secret_place(u.place),
                        })
                        .collect(),
                    capture: r.capture.map(|c| new::Capture {
                        pointer: c.pointer,
                        secret: c.secret,
                        expires_in_pointer: c.expires_in_pointer,
                    }),
                }
            }
        }

        /// A tunnel receives the request a client sent, which never names
        /// secrets; a use this release cannot express is dropped.
        impl From<&new::HttpRequest> for types::HttpRequest {
            fn from(r: &new::HttpRequest) -> Self {
                Self {
                    method: r.method.clone(),
                    url: r.url.clone(),
                    headers: r.headers.iter().cloned().map(Into::into).collect(),
                    body: r.body.clone(),
                    timeout_ms: r.timeout_ms,
                    secrets: r
                        .secrets
                        .iter()
                        .filter_map(|u| {
                            Some(types::SecretUse {
                                secret: u.secret.clone(),
                                place: secret_place_back(&u.place)?,
                            })
                        })
                        .collect(),
                    capture: r.capture.as_ref().map(|c| types::Capture {
                        pointer: c.pointer.clone(),
                        secret: c.secret.clone(),
                        expires_in_pointer: c.expires_in_pointer.clone(),
                    }),
                }
            }
        }
    };
}
pub(crate) use imports_since_0_2;

/// The channel's records from 0.2.0 on that 0.4.0 did not change.
macro_rules! channel_records_since_0_2 {
    () => {
        // Exported types: the host calls with the newest release's values;
        // these turn them into this release's and the results back.

        impl From<ch::Keepalive> for new::Keepalive {
            fn from(k: ch::Keepalive) -> Self {
                Self {
                    frame: k.frame.into(),
                    interval_ms: k.interval_ms,
                }
            }
        }

        impl From<ch::ReconnectPolicy> for new::ReconnectPolicy {
            fn from(p: ch::ReconnectPolicy) -> Self {
                Self {
                    min_delay_ms: p.min_delay_ms,
                    max_delay_ms: p.max_delay_ms,
                    jitter_ms: p.jitter_ms,
                    max_attempts: p.max_attempts,
                }
            }
        }

        impl From<ch::ConnectionRequest> for new::ConnectionRequest {
            fn from(c: ch::ConnectionRequest) -> Self {
                Self {
                    url: c.url,
                    headers: c.headers.into_iter().map(Into::into).collect(),
                    idle_timeout_ms: c.idle_timeout_ms,
                    keepalive: c.keepalive.map(Into::into),
                    reconnect: c.reconnect.map(Into::into),
                }
            }
        }

        impl From<&new::StatusUpdate> for ch::StatusUpdate {
            fn from(u: &new::StatusUpdate) -> Self {
                Self {
                    conversation: u.conversation.clone(),
                    thread: u.thread.clone(),
                    message_id: u.message_id.clone(),
                    state: match u.state {
                        new::TurnState::Working => ch::TurnState::Working,
                        new::TurnState::Done => ch::TurnState::Done,
                        new::TurnState::Failed => ch::TurnState::Failed,
                    },
                    handle: u.handle.clone(),
                }
            }
        }

        impl From<ch::CheckItem> for new::CheckItem {
            fn from(c: ch::CheckItem) -> Self {
                Self {
                    name: c.name,
                    ok: c.ok,
                    detail: c.detail,
                }
            }
        }

        impl From<ch::ChannelError> for new::ChannelError {
            fn from(e: ch::ChannelError) -> Self {
                match e {
                    ch::ChannelError::Unauthorized(m) => Self::Unauthorized(m),
                    ch::ChannelError::BadRequest(m) => Self::BadRequest(m),
                    ch::ChannelError::Upstream(m) => Self::Upstream(m),
                    ch::ChannelError::Unsupported(m) => Self::Unsupported(m),
                    ch::ChannelError::Rejected(m) => Self::Rejected(m),
                    ch::ChannelError::RetryLater(r) => Self::RetryLater(new::RetryAfter {
                        after_ms: r.after_ms,
                        reason: r.reason,
                    }),
                }
            }
        }
    };
}
pub(crate) use channel_records_since_0_2;

/// The host's calls into a release of 0.2.0 or later: what `converting_exports!`
/// has, with `describe`, `status` and `check`, and what the release adds.
macro_rules! channel_calls_since_0_2 {
    ($($channel_extra:tt)*) => {
        // The host's calls into the worlds (`worlds.rs`): the host's API
        // values convert to this release's and the results back.

        use $crate::plugins::wit::worlds::{
            self, Call, ChannelExports, ObserverExports, PluginStore, SkillExports, TunnelExports,
        };

        worlds::release_worlds!(
            Channel => ChannelPluginPre,
            Skill => SkillPluginPre,
            Observer => ObserverPluginPre,
            Tunnel => TunnelPluginPre,
        );

        $crate::plugins::wit::convert::converting_exports!(
            fn describe<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, new::ChannelInfo> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_channel()
                        .call_describe(store)
                        .await?
                        .into())
                })
            }

            fn status<'a>(
                &'a self,
                store: &'a mut PluginStore,
                update: &'a new::StatusUpdate,
            ) -> Call<'a, Result<Option<String>, new::ChannelError>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_channel()
                        .call_status(store, &update.into())
                        .await?
                        .map_err(Into::into))
                })
            }

            fn check<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, Vec<new::CheckItem>> {
                Box::pin(async move {
                    Ok(self
                        .pincer_plugin_channel()
                        .call_check(store)
                        .await?
                        .into_iter()
                        .map(Into::into)
                        .collect())
                })
            }

            $($channel_extra)*
        );
    };
}
pub(crate) use channel_calls_since_0_2;

/// What 0.2.0 and 0.3.0 share and the newest release changed only around:
/// the imports that use secrets by name (`config` without secret keys,
/// `secrets`, `http`), the requests both ways, and the channel's records
/// from 0.2.0 on (with the calls `describe`, `status`, `check`). The
/// release file writes `secret_place` and `secret_place_back`, the one
/// place 0.2.0 and 0.3.0 differ (`query-param`).
macro_rules! since_0_2 {
    () => {
        $crate::plugins::wit::convert::imports_since_0_2!();
        $crate::plugins::wit::convert::channel_records_since_0_2!();

        impl From<ch::FrameOutcome> for new::FrameOutcome {
            fn from(o: ch::FrameOutcome) -> Self {
                Self {
                    replies: o.replies.into_iter().map(Into::into).collect(),
                    messages: o.messages.into_iter().map(Into::into).collect(),
                    interactions: Vec::new(),
                    reconnect: o.reconnect,
                    keepalive: o.keepalive.map(Into::into),
                    reconnect_policy: o.reconnect_policy.map(Into::into),
                }
            }
        }

        impl From<ch::ChannelInfo> for new::ChannelInfo {
            fn from(i: ch::ChannelInfo) -> Self {
                Self {
                    max_text_bytes: i.max_text_bytes,
                    interactive: false,
                    max_upload_bytes: 0,
                }
            }
        }

        // Records and enums unchanged since 0.1.0.
        $crate::plugins::wit::convert::unchanged_since_0_1!();

        $crate::plugins::wit::convert::channel_calls_since_0_2!();
    };
}
pub(crate) use since_0_2;
