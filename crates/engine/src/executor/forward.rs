//! The executor's side of calls forwarded between processes: a seam, so that
//! the executor knows frames and rounds and nothing of calls (the calls,
//! their queues and answers are `api/forward.rs`'s).
//!
//! A deployment that runs some of its islands in other processes gives its
//! cluster a [`Forwarding`] ([`super::ClusterOptions::forward`]); each
//! executor takes a [`ForwardPort`] of its own from it when it is made, and
//! hands the port the CALL, CALL_REPLY, CALL_CANCEL, STMT, BLOCK and RENEW
//! frames it receives and, once per round of its pump, the chance to send
//! what it has. An executor without a port (every island in one process)
//! pays one branch per round, and counts such frames as malformed.

use crate::coord::IslandSet;
use crate::route::IslandId;
use crate::transport::wire::Frame;
use crate::transport::{push_frame_with, Endpoint, Outbox, Transport};

/// Makes each executor's port.
pub trait Forwarding: Send + Sync {
    /// The port of the executor of endpoint `me`; `None`: it forwards
    /// nothing. A call it forwards that is not answered within `timeout`
    /// fails ([`super::ClusterOptions::forward_timeout`]).
    fn port(&self, me: Endpoint, timeout: std::time::Duration) -> Option<Box<dyn ForwardPort>>;
}

/// One executor's forwarded calls: it runs on the executor's thread only.
pub trait ForwardPort: Send {
    /// A CALL, CALL_REPLY, CALL_CANCEL, STMT, BLOCK or RENEW frame from
    /// `from` (of island `from_island`, as the transport authenticated it).
    fn on_frame(
        &mut self,
        from: Endpoint,
        from_island: IslandId,
        frame: Frame<'_>,
        out: &mut Frames<'_>,
    );

    /// Once per round, before the outbox is flushed: sends the calls
    /// queued for other processes, the answers of finished calls, and
    /// cancels; fails the calls that wait on an island of `down`, and those
    /// unanswered past their deadline. `now_us` is the executor's protocol
    /// clock.
    fn round(&mut self, now_us: u64, down: IslandSet, out: &mut Frames<'_>);
}

/// Where a port writes its frames: the executor's outbox.
pub struct Frames<'a> {
    pub(super) outbox: &'a mut Outbox,
    pub(super) transport: &'a dyn Transport,
}

impl Frames<'_> {
    /// Appends a frame for `to`, written in place by `write`.
    pub fn push(&mut self, to: Endpoint, write: impl FnOnce(&mut Vec<u8>)) {
        push_frame_with(self.outbox.batch(self.transport, to), write);
    }

    /// The transport the frames go out on (for what it knows of peers).
    pub fn transport(&self) -> &dyn Transport {
        self.transport
    }
}
