//! Asking instead of refusing (`workspaces.NAME.egress_ask`): the proxy
//! holds a connection to an unlisted host while the running turn of its
//! workspace asks a person, in that turn's conversation, through the
//! approvals every tool call uses.
//!
//! A connection carries no session, so it is put to a turn only when
//! exactly one turn of the workspace is running; with none or several,
//! nobody is asked and the connection is refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

/// One connection waiting on a person.
pub struct Question {
    pub host: String,
    pub port: u16,
    /// `Ok(how it was allowed)` or `Err(why not)`.
    pub reply: oneshot::Sender<Result<String, String>>,
}

type Listeners = HashMap<String, Vec<(u64, mpsc::Sender<Question>)>>;

/// The running turns that can ask, by workspace.
#[derive(Clone, Default)]
pub struct Asking {
    listeners: Arc<Mutex<Listeners>>,
    next: Arc<AtomicU64>,
}

/// A turn's ear for its workspace's questions; dropping it stops listening.
pub struct Listening {
    asking: Asking,
    workspace: String,
    id: u64,
    pub questions: mpsc::Receiver<Question>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let mut listeners = self.asking.lock();
        if let Some(list) = listeners.get_mut(&self.workspace) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                listeners.remove(&self.workspace);
            }
        }
    }
}

impl Asking {
    fn lock(&self) -> std::sync::MutexGuard<'_, Listeners> {
        self.listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Listens for questions about `workspace`'s connections while the
    /// returned value lives.
    pub fn listen(&self, workspace: &str) -> Listening {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (sender, questions) = mpsc::channel(8);
        self.lock()
            .entry(workspace.to_owned())
            .or_default()
            .push((id, sender));
        Listening {
            asking: self.clone(),
            workspace: workspace.to_owned(),
            id,
            questions,
        }
    }

    /// Asks the one running turn of `workspace` whether it may reach
    /// `host:port`, waiting at most `wait`.
    pub async fn ask(
        &self,
        workspace: &str,
        host: &str,
        port: u16,
        wait: Duration,
    ) -> Result<String, String> {
        let sender = {
            let listeners = self.lock();
            match listeners.get(workspace).map(Vec::as_slice) {
                None | Some([]) => {
                    return Err(format!(
                        "nobody could be asked (egress_ask): no turn of workspace `{workspace}` is running"
                    ));
                }
                Some([(_, sender)]) => sender.clone(),
                Some(several) => {
                    return Err(format!(
                        "nobody was asked (egress_ask): {} turns of workspace `{workspace}` are running and a connection does not say whose it is",
                        several.len()
                    ));
                }
            }
        };
        let (reply, answer) = oneshot::channel();
        let question = Question {
            host: host.to_owned(),
            port,
            reply,
        };
        if sender.try_send(question).is_err() {
            return Err(format!(
                "nobody was asked (egress_ask): the turn of workspace `{workspace}` has questions waiting already"
            ));
        }
        match tokio::time::timeout(wait, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err("the turn that was asked ended before a decision".to_owned()),
            Err(_) => Err(format!(
                "nobody decided within {} s (egress_ask)",
                wait.as_secs()
            )),
        }
    }
}
