//! Observer plugins receive a workspace's events (message in, tool calls,
//! model usage, reply out, errors), each on a task and queue of its own: a
//! slow or stuck observer delays only its own queue, never the turn nor the
//! other observers. When a queue is full, its new events are dropped and
//! counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::plugins::LoadedPlugin;
use crate::plugins::PluginHost;
use crate::plugins::api::Event;

/// Events waiting for one observer before new ones are dropped.
pub const QUEUE: usize = 1024;

#[derive(Default)]
pub struct Observers {
    queues: Mutex<Vec<mpsc::Sender<Event>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    dropped: Arc<AtomicU64>,
}

impl Observers {
    /// Delivers every event, in order, to each of `plugins`.
    pub fn start(host: Arc<PluginHost>, plugins: Vec<Arc<LoadedPlugin>>) -> Self {
        let mut queues = Vec::new();
        let mut tasks = Vec::new();
        for plugin in plugins {
            let (queue, mut events) = mpsc::channel::<Event>(QUEUE);
            let host = host.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(event) = events.recv().await {
                    // Faults are counted and audited by the plugin host.
                    if let Err(e) = host.observe(&plugin, &event).await {
                        tracing::warn!("observer {}: {e}", plugin.name());
                    }
                }
            }));
            queues.push(queue);
        }
        Observers {
            queues: Mutex::new(queues),
            tasks: Mutex::new(tasks),
            dropped: Arc::default(),
        }
    }

    /// Queues an event for every observer without waiting.
    pub fn emit(&self, event: Event) {
        let Ok(queues) = self.queues.lock() else {
            return;
        };
        for queue in queues.iter() {
            if queue.try_send(event.clone()).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Stops taking events and gives the observers up to `within` to
    /// deliver what is queued (a process about to exit calls this); what is
    /// still queued after that is abandoned. Returns whether all finished.
    pub async fn close(&self, within: Duration) -> bool {
        if let Ok(mut queues) = self.queues.lock() {
            queues.clear();
        }
        let tasks = match self.tasks.lock() {
            Ok(mut tasks) => std::mem::take(&mut *tasks),
            Err(_) => return false,
        };
        let all = futures_util::future::join_all(tasks);
        tokio::time::timeout(within, all).await.is_ok()
    }

    /// Events dropped because an observer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
