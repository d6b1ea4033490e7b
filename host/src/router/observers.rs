//! Observer plugins receive a workspace's events (message in, tool calls,
//! model usage, reply out, errors) on a task of their own: a slow or broken
//! observer can delay only its own queue, never the turn. When a queue is
//! full, events are dropped and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::plugins::PluginHost;
use crate::plugins::api::Event;
use crate::plugins::runtime::LoadedPlugin;

/// Events waiting for an observer before new ones are dropped.
pub const QUEUE: usize = 1024;

#[derive(Default)]
pub struct Observers {
    queue: Option<mpsc::Sender<Event>>,
    dropped: Arc<AtomicU64>,
}

impl Observers {
    /// Delivers every event to each of `plugins`, in order, on a task.
    pub fn start(host: Arc<PluginHost>, plugins: Vec<Arc<LoadedPlugin>>) -> Self {
        if plugins.is_empty() {
            return Observers::default();
        }
        let (queue, mut events) = mpsc::channel::<Event>(QUEUE);
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                for plugin in &plugins {
                    // Faults are already counted and audited by the plugin host.
                    if let Err(e) = host.observe(plugin, &event).await {
                        tracing::warn!("observer {}: {e}", plugin.name());
                    }
                }
            }
        });
        Observers {
            queue: Some(queue),
            dropped: Arc::default(),
        }
    }

    /// Queues an event without waiting.
    pub fn emit(&self, event: Event) {
        if let Some(queue) = &self.queue
            && queue.try_send(event).is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events dropped because an observer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
