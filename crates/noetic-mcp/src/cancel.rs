//! `notifications/cancelled` for a `tools/call` nobody waits for any more: its run was cancelled (the
//! call's future dropped) or it timed out.
//!
//! The notification goes out from a task of its own, tracked by the server's [`Cancels`], so that
//! [`crate::McpServer::shutdown`] waits for it to be written before it closes the connection: an abort
//! followed at once by a shutdown (a CLI stopped by SIGTERM) still tells the server which request to
//! stop. Each send, and that wait, is bounded by [`CANCEL_SEND_TIMEOUT`].

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CancelledNotificationParam, RequestId};
use rmcp::{Peer, RoleClient};
use tokio_util::task::TaskTracker;

/// How long sending one `notifications/cancelled` may take, and how long a shutdown waits for the
/// ones still being sent before it closes the connection.
pub const CANCEL_SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// The cancellations of one server still being sent.
#[derive(Clone, Default)]
pub(crate) struct Cancels {
    tracker: TaskTracker,
}

impl Cancels {
    /// Sends `peer` the cancellation of request `id`, from a tracked task (bounded by
    /// [`CANCEL_SEND_TIMEOUT`]). Without a tokio runtime (dropped outside one) nothing can be sent.
    pub(crate) fn send(
        &self,
        server: Arc<str>,
        peer: Peer<RoleClient>,
        id: RequestId,
        reason: String,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(server = %server, request = %id, "no runtime left to send notifications/cancelled");
            return;
        };
        let params = CancelledNotificationParam::new(Some(id.clone()), Some(reason));
        self.tracker.spawn_on(
            async move {
                match tokio::time::timeout(CANCEL_SEND_TIMEOUT, peer.notify_cancelled(params)).await
                {
                    Ok(Ok(())) => {
                        tracing::debug!(server = %server, request = %id, "sent notifications/cancelled");
                    }
                    // The connection is gone: the server has nothing left to stop for us.
                    Ok(Err(error)) => tracing::debug!(
                        server = %server,
                        request = %id,
                        %error,
                        "notifications/cancelled not sent"
                    ),
                    Err(_) => tracing::warn!(
                        server = %server,
                        request = %id,
                        "notifications/cancelled not sent within {} ms",
                        CANCEL_SEND_TIMEOUT.as_millis()
                    ),
                }
            },
            &runtime,
        );
    }

    /// Waits until every cancellation handed to [`Cancels::send`] so far was written (or gave up), at
    /// most [`CANCEL_SEND_TIMEOUT`].
    pub(crate) async fn flush(&self) {
        self.tracker.close();
        if tokio::time::timeout(CANCEL_SEND_TIMEOUT, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                pending = self.tracker.len(),
                "MCP cancellations still unsent after {} ms; closing anyway",
                CANCEL_SEND_TIMEOUT.as_millis()
            );
        }
        self.tracker.reopen();
    }
}

/// Armed while a call's response is awaited; dropped armed (the call's future was dropped, or it
/// timed out), it has the call cancelled through [`Cancels::send`].
pub(crate) struct CancelOnDrop {
    server: Arc<str>,
    peer: Peer<RoleClient>,
    cancels: Cancels,
    id: Option<RequestId>,
    reason: String,
}

impl CancelOnDrop {
    pub(crate) fn new(
        server: Arc<str>,
        peer: Peer<RoleClient>,
        cancels: Cancels,
        id: RequestId,
    ) -> Self {
        CancelOnDrop {
            server,
            peer,
            cancels,
            id: Some(id),
            reason: "the call's run was cancelled".to_owned(),
        }
    }

    /// The call was answered: nothing to cancel.
    pub(crate) fn disarm(&mut self) {
        self.id = None;
    }

    /// Cancels the call now, saying why.
    pub(crate) fn cancel(mut self, reason: String) {
        self.reason = reason;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.cancels.send(
                self.server.clone(),
                self.peer.clone(),
                id,
                std::mem::take(&mut self.reason),
            );
        }
    }
}
