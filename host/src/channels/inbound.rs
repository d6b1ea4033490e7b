//! The life of one inbound message, as the drivers see it: received
//! (stored, or recognised as a redelivery), started (queued → running, at
//! most once), its turn recorded, answered (the reply queued in the same
//! transaction that ends it, then the working sign replaced). The drivers
//! call these instead of driving the store themselves.

use super::store::{InboundRow, StoreError};
use super::{Address, ChannelHost, InboundState, Received};
use crate::plugins::api;

/// The longest wait for a platform's `Retry-After` before the end of a
/// turn is shown once more.
const END_RETRY_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Messages a stop left behind, oldest first.
pub struct Unfinished {
    /// Their turn was under way.
    pub running: Vec<InboundRow>,
    /// Their turn had not started.
    pub queued: Vec<InboundRow>,
}

impl ChannelHost {
    /// Stores `received` for `workspace` in `state`: its row id, or `None`
    /// for a redelivery of a message already stored. Nothing may be acked
    /// before this returns `Ok`.
    pub fn receive(
        &self,
        received: &Received,
        workspace: &str,
        state: InboundState,
    ) -> Result<Option<i64>, StoreError> {
        self.store().receive(received, workspace, state)
    }

    /// Message `id` if it still waits for its turn.
    pub fn queued(&self, id: i64) -> Result<Option<InboundRow>, StoreError> {
        Ok(self
            .store()
            .inbound(id)?
            .filter(|row| row.state == InboundState::Queued))
    }

    /// Starts message `id`'s turn: `true` if it was queued and now runs,
    /// `false` if something else started or ended it first.
    pub fn start(&self, id: i64) -> Result<bool, StoreError> {
        self.store().start(id)
    }

    /// Remembers which turn answers message `id` (so a restart can send a
    /// reply that was stored just before the stop).
    pub fn record_turn(&self, id: i64, turn_id: &str) -> Result<(), StoreError> {
        self.store().set_turn(id, turn_id)
    }

    /// Ends `row` in `state` with `text` queued as its answer, then shows
    /// the turn's end on the platform (the working sign replaced).
    pub async fn answer(
        &self,
        row: &InboundRow,
        state: InboundState,
        text: &str,
    ) -> Result<(), StoreError> {
        self.reply(Some(row.id), state, &Address::of(row), text)?;
        // The status handle may have changed while the turn ran.
        let current = self.store().inbound(row.id)?;
        let shown = if state == InboundState::Done {
            api::TurnState::Done
        } else {
            api::TurnState::Failed
        };
        let row = current.as_ref().unwrap_or(row);
        // The working sign must come down, after what the platform asked
        // to wait (once more if it asks again); a wait longer than
        // END_RETRY_MAX_WAIT is not worth holding the session's next message.
        let paused = self.status_pause_left(&row.channel);
        if paused > END_RETRY_MAX_WAIT {
            return Ok(());
        }
        tokio::time::sleep(paused).await;
        if let Some(wait) = self.show_status(row, shown, None).await
            && wait <= END_RETRY_MAX_WAIT
        {
            tokio::time::sleep(wait).await;
            self.show_status(row, shown, None).await;
        }
        Ok(())
    }

    /// Ends `row` in `state` with `text` queued as its answer, showing
    /// nothing (a turn that never started: a restart's notice).
    pub fn answer_quietly(
        &self,
        row: &InboundRow,
        state: InboundState,
        text: &str,
    ) -> Result<(), StoreError> {
        self.reply(Some(row.id), state, &Address::of(row), text)
            .map(drop)
    }

    /// What a stop (of this daemon or of the one that ran `workspace`
    /// before) left behind in `workspace`, for the driver to finish.
    pub fn unfinished(&self, workspace: &str) -> Result<Unfinished, StoreError> {
        Ok(Unfinished {
            running: self.store().inbound_of(workspace, InboundState::Running)?,
            queued: self.queued_in(workspace)?,
        })
    }

    /// Messages of `workspace` still waiting for their turn, oldest first.
    pub fn queued_in(&self, workspace: &str) -> Result<Vec<InboundRow>, StoreError> {
        self.store().inbound_of(workspace, InboundState::Queued)
    }
}
