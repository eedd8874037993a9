//! The wire between a host and its child: newline-delimited JSON over the child's Unix socket.
//!
//! The child sends [`Frame`]s, numbered from 1; the host acknowledges each ([`Control::Ack`]). The
//! child keeps every frame the host has not acknowledged, and a host that connects (a restarted one,
//! say) starts with [`Control::Hello`] naming the last frame it holds: the child sends what follows,
//! so across a reconnect nothing is lost, and a host drops any frame numbered at or below the last it
//! took, so nothing is doubled.

use noetic_core::adapter::ChildMessage;
use serde::{Deserialize, Serialize};

/// The variable naming the socket a child serves on; its presence makes a process a child.
pub(crate) const SOCKET_ENV: &str = "NOETIC_SUBPROCESS_SOCKET";
/// How long (milliseconds) a detached child that finished waits for a host to take its result.
pub(crate) const LINGER_ENV: &str = "NOETIC_SUBPROCESS_LINGER_MS";

/// One message of the child, numbered.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Frame {
    /// Its number: 1, 2, … in the order the child sent them.
    pub seq: u64,
    /// The message.
    pub msg: ChildMessage,
}

/// What a host sends its child.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Control {
    /// The first line on a connection: the host holds every frame up to `after` (0: none).
    Hello {
        /// The last frame the host holds.
        after: u64,
    },
    /// The host took every frame up to `seq`.
    Ack {
        /// The last frame taken.
        seq: u64,
    },
    /// Cancel the step.
    Cancel {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// `value` as one line of JSON, newline included.
pub(crate) fn line(value: &impl Serialize) -> Vec<u8> {
    // The frames and controls are plain data (strings, numbers, JSON values): they always encode.
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}
