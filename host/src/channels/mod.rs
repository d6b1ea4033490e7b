//! The host side of every channel: the loaded channel plugins (one per
//! configured channel, with its own state scope and credentials), the
//! webhook listener, the host-held connections with reconnect and a
//! quiet-socket watchdog, and the outbox. The WASM plugin owns the
//! platform's formats; everything that must survive it lives here.

mod bounds;
mod connection;
pub mod files;
mod inbound;
mod outbox;
pub mod rates;
mod split;
mod store;
mod webhook;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::config::{self, Config};
use crate::plugins::{LoadedPlugin, PluginHost, Scope, api};

pub use connection::hold as hold_connection;
pub use inbound::Unfinished;
pub use outbox::{deliver_due, run as run_outbox};
pub use store::{
    Button, ButtonStyle, ChannelStore, InboundRow, InboundState, OutboxFile, OutboxState, Pruned,
    Received, Reply, StoreError, StoredFile, refused_text,
};
pub use webhook::routes as webhook_routes;

/// Where inbound messages go once a channel has parsed them.
pub trait Inbox: Send + Sync {
    /// Stores and routes `messages` of `channel`. Returns once every one is
    /// durably stored, or recognised as one stored already (so the platform
    /// may be told it arrived: an ack, a 2xx), not when answered. An error
    /// means a message was not stored: the platform must not be told it
    /// arrived, so that it delivers it again. The messages after it are not
    /// stored either (the redelivery brings them back in their order).
    fn accept(&self, channel: &str, messages: Vec<api::Message>) -> Result<(), AcceptError>;

    /// Handles clicks on buttons of `channel`'s messages. Returns once each
    /// is recorded (a redelivered click is recognised and does nothing); an
    /// error means one was not, so the platform must not be told it arrived.
    fn clicked(&self, channel: &str, clicks: Vec<api::Interaction>) -> Result<(), AcceptError>;
}

/// Why [`Inbox::accept`] did not take a message.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error(
        "message {message_id} of channel `{channel}` was not stored, so the platform is not told it arrived and will deliver it again (check that the disk holding pincer.db has room and that nothing else holds its lock): {source}"
    )]
    NotStored {
        channel: String,
        message_id: String,
        #[source]
        source: store::StoreError,
    },
    #[error(
        "click {click_id} of channel `{channel}` was not recorded, so the platform is not told it arrived and will deliver it again: {source}"
    )]
    ClickNotStored {
        channel: String,
        click_id: String,
        #[source]
        source: store::StoreError,
    },
    #[error(
        "messages of channel `{channel}` were not stored ({reason}), so the platform is not told they arrived and will deliver them again"
    )]
    Interrupted { channel: String, reason: String },
}

/// Hands the messages and clicks of `channel` to `inbox`, bounded; a
/// failure is logged and counted (`pincer_channel_store_failures_total`).
/// `Ok` means the platform may be acked / answered 2xx.
///
/// Storing may wait for the database's lock ([`crate::db::LOCK_WAIT`]), so
/// it runs on a blocking thread: a store that refuses writes must not hold
/// the runtime every listener and the gateway answer on.
pub(crate) async fn store_inbound(
    host: &ChannelHost,
    inbox: &Arc<dyn Inbox>,
    channel: &str,
    messages: Vec<api::Message>,
    clicks: Vec<api::Interaction>,
) -> Result<(), AcceptError> {
    let messages = bounds::bounded(channel, messages);
    let clicks = bounds::bounded_interactions(channel, clicks);
    if messages.is_empty() && clicks.is_empty() {
        return Ok(());
    }
    if !messages.is_empty() {
        host.update_status(channel, |s| s.messages_in += messages.len() as u64);
    }
    let (inbox, name) = (inbox.clone(), channel.to_owned());
    let stored = tokio::task::spawn_blocking(move || {
        if !messages.is_empty() {
            inbox.accept(&name, messages)?;
        }
        if !clicks.is_empty() {
            inbox.clicked(&name, clicks)?;
        }
        Ok(())
    })
    .await
    .unwrap_or_else(|e| {
        Err(AcceptError::Interrupted {
            channel: channel.to_owned(),
            reason: e.to_string(),
        })
    });
    stored.inspect_err(|e| {
        tracing::error!(%channel, "{e}");
        crate::events::channel_store_failed(channel);
    })
}

/// Where a reply goes.
#[derive(Debug, Clone, Copy)]
pub struct Address<'a> {
    pub channel: &'a str,
    pub conversation: &'a str,
    pub thread: Option<&'a str>,
    /// The platform message it answers.
    pub reply_to: Option<&'a str>,
}

impl<'a> Address<'a> {
    /// The reply to a stored inbound message.
    pub fn of(row: &'a store::InboundRow) -> Self {
        Self {
            channel: &row.channel,
            conversation: &row.conversation,
            thread: row.thread.as_deref(),
            reply_to: Some(&row.message_id),
        }
    }
}

/// What a posted message has besides its text.
#[derive(Debug, Clone, Default)]
pub struct Post {
    /// Buttons under it (only for an [`ChannelHost::interactive`] channel).
    pub actions: Vec<Button>,
    /// Shown to this platform user only (best effort: a channel that
    /// cannot gives up on it).
    pub visible_to: Option<String>,
    /// The outbox row whose message it replaces.
    pub replaces: Option<i64>,
    /// A file sent with it (the text is its comment).
    pub file: Option<(OutboxFile, Vec<u8>)>,
}

/// One configured channel, loaded.
pub struct LoadedChannel {
    pub name: String,
    pub config: config::Channel,
    pub plugin: Arc<LoadedPlugin>,
    pub info: api::ChannelInfo,
}

impl LoadedChannel {
    /// Loads the plugin of channel `name` with its config, state scope and
    /// reach, and asks it for its limits.
    pub async fn load(
        name: &str,
        channel: &config::Channel,
        plugins: &PluginHost,
        catalog: &crate::plugins::Catalog,
        limits: crate::plugins::CallLimits,
    ) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let package = catalog
            .get(&channel.plugin)
            .with_context(|| format!("channels.{name}.plugin"))?;
        let manifest = crate::plugins::Manifest::parse(&package.manifest_text, name)?;
        if manifest.kind() != crate::plugins::PluginKind::Channel {
            anyhow::bail!(
                "channels.{name}.plugin: `{}` is a {} plugin, not a channel",
                channel.plugin,
                manifest.kind()
            );
        }
        let reach = crate::plugins::HttpReach::for_channel(&manifest, &channel.http);
        let plugin = plugins
            .load_in(
                package,
                Some(&channel.plugin_config()),
                limits,
                &Scope::channel(name),
                Some(reach),
            )
            .with_context(|| format!("loading channel `{name}` (plugin `{}`)", channel.plugin))?;
        let info = plugins
            .channel_describe(&plugin)
            .await
            .with_context(|| format!("asking channel `{name}` for its limits"))?;
        Ok(Self {
            name: name.to_string(),
            config: channel.clone(),
            plugin,
            info,
        })
    }
}

/// What `pincer status` shows of a channel's connection.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct ConnectionStatus {
    /// The plugin has a connection mode (Socket Mode, long connection).
    pub holds_connection: bool,
    pub connected: bool,
    /// Since when (ms since the epoch) it is connected, or was last tried.
    pub since_ms: Option<i64>,
    pub last_event_ms: Option<i64>,
    pub reconnects: u64,
    /// Reconnects because the socket went quiet.
    pub watchdog_reconnects: u64,
    pub last_error: Option<String>,
    pub webhooks: u64,
    pub messages_in: u64,
}

/// The shortest time between two progress updates of one turn.
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// What a running turn does, for [`ChannelHost::follow_progress`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// One line, e.g. "running `bash` …".
    Doing(String),
    Finished,
}

pub struct ChannelHost {
    plugins: Arc<PluginHost>,
    channels: BTreeMap<String, LoadedChannel>,
    store: Arc<ChannelStore>,
    status: Mutex<BTreeMap<String, ConnectionStatus>>,
    outbox_wake: tokio::sync::Notify,
    /// Per channel: no status update before this (the platform's last
    /// `Retry-After` on one).
    status_pauses: Mutex<BTreeMap<String, tokio::time::Instant>>,
}

impl ChannelHost {
    /// Loads the plugin of every channel in `config`.
    pub async fn load(
        config: &Config,
        plugins: Arc<PluginHost>,
        catalog: &crate::plugins::Catalog,
        limits: crate::plugins::CallLimits,
        store: Arc<ChannelStore>,
    ) -> anyhow::Result<Self> {
        let mut channels = BTreeMap::new();
        for (name, channel) in &config.channels {
            let loaded = LoadedChannel::load(name, channel, &plugins, catalog, limits).await?;
            channels.insert(name.clone(), loaded);
        }
        Ok(Self {
            plugins,
            channels,
            store,
            status: Mutex::default(),
            outbox_wake: tokio::sync::Notify::new(),
            status_pauses: Mutex::default(),
        })
    }

    pub fn plugins(&self) -> &Arc<PluginHost> {
        &self.plugins
    }

    pub fn store(&self) -> &Arc<ChannelStore> {
        &self.store
    }

    pub fn get(&self, name: &str) -> Option<&LoadedChannel> {
        self.channels.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.channels.keys().map(String::as_str)
    }

    /// Queues a reply (split to the channel's limit) and wakes the outbox;
    /// marks the inbound message `inbound_id` `state` in the same
    /// transaction. Returns the outbox rows of its parts.
    pub fn reply(
        &self,
        inbound_id: Option<i64>,
        state: InboundState,
        to: &Address<'_>,
        text: &str,
    ) -> Result<Vec<i64>, store::StoreError> {
        self.queue(inbound_id, state, to, text, Post::default())
    }

    /// Queues `text` with what [`Post`] adds (buttons, one reader, the
    /// message it replaces); the outbox rows of its parts.
    pub fn post(
        &self,
        to: &Address<'_>,
        text: &str,
        post: Post,
    ) -> Result<Vec<i64>, store::StoreError> {
        self.queue(None, InboundState::Running, to, text, post)
    }

    /// Whether channel `name` shows buttons, reports clicks and replaces
    /// sent messages (WIT 0.4.0 `channel-info.interactive`).
    pub fn interactive(&self, name: &str) -> bool {
        self.channels.get(name).is_some_and(|c| c.info.interactive)
    }

    fn queue(
        &self,
        inbound_id: Option<i64>,
        state: InboundState,
        to: &Address<'_>,
        text: &str,
        post: Post,
    ) -> Result<Vec<i64>, store::StoreError> {
        let max = self
            .channels
            .get(to.channel)
            .map_or(crate::plugins::V1_CHANNEL_MAX_TEXT_BYTES, |c| {
                c.info.max_text_bytes
            });
        let mut parts = split::split(text, max as usize);
        if post.replaces.is_some() {
            // One message replaces one: what does not fit in it is cut.
            parts.truncate(1);
        }
        if post.file.is_some() && parts.is_empty() {
            parts.push(String::new());
        }
        let reply = Reply {
            channel: to.channel.to_string(),
            conversation: to.conversation.to_string(),
            thread: to.thread.map(str::to_string),
            reply_to: to.reply_to.map(str::to_string),
            parts,
            actions: post.actions,
            visible_to: post.visible_to,
            replaces: post.replaces,
            file: post.file,
        };
        let ids = self.store.finish(inbound_id, state, &reply)?;
        self.outbox_wake.notify_one();
        Ok(ids)
    }

    /// Shows the state of the turn answering `row` (a reaction, a typing
    /// sign, with `detail`: what it does now). Failures are logged: a
    /// missing reaction never stops a turn. Returns how long the platform
    /// asked to wait before the next update, if it did.
    pub async fn show_status(
        &self,
        row: &store::InboundRow,
        state: api::TurnState,
        detail: Option<String>,
    ) -> Option<std::time::Duration> {
        let channel = self.channels.get(&row.channel)?;
        let update = api::StatusUpdate {
            conversation: row.conversation.clone(),
            thread: row.thread.clone(),
            message_id: row.message_id.clone(),
            state,
            handle: row.status_handle.clone(),
            detail,
        };
        match self.plugins.channel_status(&channel.plugin, &update).await {
            Ok(Ok(handle)) => {
                if let Err(e) = self.store.set_status_handle(row.id, handle.as_deref()) {
                    tracing::warn!(channel = %row.channel, "cannot store the status handle: {e}");
                }
            }
            Ok(Err(api::ChannelError::RetryLater(r))) => {
                tracing::debug!(channel = %row.channel, "status update rate limited: {}", r.reason);
                let wait = std::time::Duration::from_millis(r.after_ms.into());
                if let Ok(mut pauses) = self.status_pauses.lock() {
                    pauses.insert(row.channel.clone(), tokio::time::Instant::now() + wait);
                }
                return Some(wait);
            }
            Ok(Err(e)) => tracing::warn!(channel = %row.channel, "status update refused: {e:?}"),
            Err(e) => tracing::warn!(channel = %row.channel, "status update failed: {e}"),
        }
        None
    }

    /// How long channel `name` asked status updates to wait still.
    pub fn status_pause_left(&self, name: &str) -> std::time::Duration {
        self.status_pauses
            .lock()
            .ok()
            .and_then(|p| p.get(name).copied())
            .map_or_else(Default::default, |until| {
                until.saturating_duration_since(tokio::time::Instant::now())
            })
    }

    /// The earlier messages `request` asks channel `name` for; why not,
    /// in words, when it cannot give them.
    pub async fn history(
        &self,
        name: &str,
        request: &api::HistoryRequest,
    ) -> Result<Vec<api::PastMessage>, String> {
        let channel = self
            .channels
            .get(name)
            .ok_or_else(|| format!("channel `{name}` is not loaded"))?;
        match self.plugins.channel_history(&channel.plugin, request).await {
            Ok(Ok(messages)) => Ok(bounds::bounded_past(name, messages, request.limit)),
            Ok(Err(e)) => Err(format!("{e:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Shows `row`'s turn working, then (from [`PROGRESS_EVERY`] after its
    /// start) what it does as `progress` says, at most once every
    /// [`PROGRESS_EVERY`] (longer when the platform
    /// asks to slow down); returns once `progress` says the turn finished.
    pub async fn follow_progress(
        &self,
        row: &store::InboundRow,
        mut progress: tokio::sync::watch::Receiver<Progress>,
    ) {
        let started = tokio::time::Instant::now();
        let pause = self.show_status(row, api::TurnState::Working, None).await;
        // A short turn shows its working sign only: the first line comes
        // once the turn has run for PROGRESS_EVERY.
        let mut not_before =
            (started + PROGRESS_EVERY).max(tokio::time::Instant::now() + pause.unwrap_or_default());
        loop {
            if progress.changed().await.is_err() {
                return;
            }
            // What happens meanwhile is coalesced; the turn's end stops it.
            let finished = progress.wait_for(|p| *p == Progress::Finished);
            tokio::select! {
                _ = finished => return,
                () = tokio::time::sleep_until(not_before) => {}
            }
            let detail = match &*progress.borrow_and_update() {
                Progress::Finished => return,
                Progress::Doing(detail) => detail.clone(),
            };
            let current = self.store.inbound(row.id).ok().flatten();
            let pause = self
                .show_status(
                    current.as_ref().unwrap_or(row),
                    api::TurnState::Working,
                    Some(detail),
                )
                .await;
            not_before =
                tokio::time::Instant::now() + pause.unwrap_or_default().max(PROGRESS_EVERY);
        }
    }

    pub fn status(&self) -> BTreeMap<String, ConnectionStatus> {
        let mut out = self.status.lock().map(|s| s.clone()).unwrap_or_default();
        for name in self.channels.keys() {
            out.entry(name.clone()).or_default();
        }
        out
    }

    pub(crate) fn update_status(&self, channel: &str, update: impl FnOnce(&mut ConnectionStatus)) {
        if let Ok(mut status) = self.status.lock() {
            update(status.entry(channel.to_string()).or_default());
        }
    }
}
