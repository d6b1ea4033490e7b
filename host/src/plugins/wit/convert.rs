//! What every older release shares with the newest, written once: the
//! records and enums unchanged since 0.1.0 ([`unchanged_since_0_1!`]), the
//! host imports unchanged since 0.1.0 ([`delegating_imports!`]) and the
//! calls into an older release's worlds ([`converting_exports!`]). A release
//! file invokes them with `types`, `ch` (its channel exports), `tn` (its
//! tunnel exports) and `new` (the newest release) in scope, and writes out
//! only what changed.

macro_rules! unchanged_since_0_1 {
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

        impl From<ch::WebhookOutcome> for new::WebhookOutcome {
            fn from(o: ch::WebhookOutcome) -> Self {
                Self {
                    response: o.response.into(),
                    messages: o.messages.into_iter().map(Into::into).collect(),
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
