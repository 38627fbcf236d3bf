//! Calls forwarded between the processes of a deployment: a call of a
//! procedure homed on an island that another process runs goes there over
//! the island transport, and its answer comes back.
//!
//! The caller's side: [`super::Client`] puts such a call in the `forwards`
//! queue of one of this process's mailboxes (spread as calls are); that
//! mailbox's executor, in its next round ([`Port::round`]), sends it as a
//! CALL frame to an executor of the home island and keeps it in `pending`
//! under an id of its own until the CALL_REPLY with that id comes back to it
//! (replies go to the endpoint that sent the CALL). A canceled call (its
//! [`CancelFlag`] set, or its future dropped) sends CALL_CANCEL; a call whose
//! home island goes down fails with [`CallError::IslandDown`] in the round
//! that sees it down, and a new one fails at once ([`super::Client`]).
//!
//! The home's side: the executor that receives a CALL pushes it into its own
//! mailbox's call queue, as a local caller would, with a cancel flag that a
//! CALL_CANCEL sets: it then runs, retries, cancels and fails exactly as a
//! local call. Its answer goes into the mailbox's `answers` queue (see
//! [`super::deployment::Reply`]), and the next round sends it back.
//!
//! Nothing here is on the path of a call that is not forwarded: a process
//! that runs every island has no port, and a port's round looks at two
//! empty queues and two empty maps.
//!
//! Ids: each port numbers its calls from a random start, so a reply that a
//! previous incarnation of this process was owed, delivered to this one,
//! matches no call (and a call whose island went down is forgotten, so a
//! late reply to it matches nothing either).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

use super::deployment::{Answer, Call, CancelFlag, Inner, Reply};
use super::value::Value;
use super::CallError;
use crate::coord::IslandSet;
use crate::executor::forward::{ForwardPort, Forwarding, Frames};
use crate::route::IslandId;
use crate::transport::wire::{self, ErrorParts, Frame};
use crate::transport::{Endpoint, MAX_FRAME};

/// How often (µs of the executor's clock) a port looks for canceled calls.
const CANCEL_SCAN_US: u64 = 100;

/// The deployment's [`Forwarding`]: made before the executors' cluster,
/// attached to the deployment once its mailboxes exist.
pub(crate) struct Forwarder {
    setup: OnceLock<Setup>,
}

struct Setup {
    inner: Arc<Inner>,
    /// Every island's executor endpoints, local or not.
    endpoints: Arc<Vec<Vec<Endpoint>>>,
}

impl Forwarder {
    pub(crate) fn new() -> Forwarder {
        Forwarder {
            setup: OnceLock::new(),
        }
    }

    /// Gives the forwarder the deployment it serves; before this, no
    /// executor gets a port (so it must come before the executors start).
    pub(crate) fn attach(&self, inner: Arc<Inner>, endpoints: Vec<Vec<Endpoint>>) {
        let _ = self.setup.set(Setup {
            inner,
            endpoints: Arc::new(endpoints),
        });
    }
}

impl Forwarding for Forwarder {
    fn port(&self, me: Endpoint) -> Option<Box<dyn ForwardPort>> {
        let s = self.setup.get()?;
        let (island, worker) = s
            .endpoints
            .iter()
            .enumerate()
            .find_map(|(i, eps)| Some((i, eps.iter().position(|&e| e == me)?)))?;
        let first = *s.inner.first.get(island)?;
        // The island has executors here (a remote island has none).
        if first + worker >= *s.inner.first.get(island + 1)? {
            return None;
        }
        Some(Box::new(Port {
            inner: Arc::clone(&s.inner),
            mailbox: first + worker,
            endpoints: Arc::clone(&s.endpoints),
            next_id: random_start(),
            spread: worker,
            pending: HashMap::new(),
            running: HashMap::new(),
            backlog: VecDeque::new(),
            scan_at_us: 0,
            scratch: Vec::new(),
        }))
    }
}

/// A random start for a port's call ids, leaving room below 2^64 for
/// more calls than a process ever makes.
fn random_start() -> u64 {
    (crate::wal::new_deployment_id() as u64) >> 1
}

/// A call this executor forwarded and waits the answer of.
struct Pending {
    reply: Reply,
    /// The executor it went to (where a cancel goes).
    to: Endpoint,
    cancel: Option<CancelFlag>,
    island: usize,
    proc: u32,
    cancel_sent: bool,
}

/// A call of another process that this executor runs.
struct Running {
    cancel: CancelFlag,
    island: IslandId,
    proc: u32,
}

/// One executor's forwarded calls (see the module documentation).
struct Port {
    inner: Arc<Inner>,
    /// Its executor's mailbox.
    mailbox: usize,
    endpoints: Arc<Vec<Vec<Endpoint>>>,
    next_id: u64,
    /// Spreads its calls over the home island's executors.
    spread: usize,
    pending: HashMap<u64, Pending>,
    running: HashMap<(Endpoint, u64), Running>,
    /// Calls of other processes waiting for room in the mailbox's queue.
    backlog: VecDeque<Call>,
    /// The clock at which it next looks for canceled calls.
    scan_at_us: u64,
    /// Where a frame is encoded before its size is checked.
    scratch: Vec<u8>,
}

impl Port {
    fn procedure(&self, proc: u32) -> String {
        self.inner
            .catalog
            .procs
            .get(proc as usize)
            .map_or_else(|| format!("#{proc}"), |d| d.name.clone())
    }

    /// Sends `call` (homed on `call.forward`) to its island, or answers it
    /// at once if it cannot go.
    fn send_call(&mut self, call: Call, down: IslandSet, out: &mut Frames<'_>) {
        let island = call.forward.unwrap_or_default();
        let mb = &self.inner.mailboxes[self.mailbox];
        let targets = self.endpoints.get(island).map_or(&[][..], |e| &e[..]);
        if targets.is_empty() || down.contains(island as IslandId) {
            let e = CallError::IslandDown {
                procedure: self.procedure(call.proc),
                island: island as u16,
            };
            return call.reply.send(mb, Err(e));
        }
        if call.cancel.as_ref().is_some_and(CancelFlag::is_canceled) || call.reply.is_closed() {
            // Canceled before it left: it never runs, as a local call
            // canceled in its queue.
            let e = CallError::Canceled {
                procedure: self.procedure(call.proc),
            };
            return call.reply.send(mb, Err(e));
        }
        let to = targets[self.spread % targets.len()];
        self.spread = self.spread.wrapping_add(1);
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.scratch.clear();
        if !wire::call(&mut self.scratch, id, call.proc, &call.args)
            || self.scratch.len() > MAX_FRAME
        {
            let e = CallError::BadArguments {
                procedure: self.procedure(call.proc),
                why: format!(
                    "the arguments are too large to forward to island {island} (at most \
                     {MAX_FRAME} bytes and 65535 values)"
                ),
            };
            return call.reply.send(mb, Err(e));
        }
        let frame = &self.scratch;
        out.push(to, |b| b.extend_from_slice(frame));
        self.pending.insert(
            id,
            Pending {
                reply: call.reply,
                to,
                cancel: call.cancel,
                island,
                proc: call.proc,
                cancel_sent: false,
            },
        );
    }

    /// Sends the answer of call `id` back to `to`.
    fn answer(&mut self, to: Endpoint, id: u64, proc: u32, r: &Answer, out: &mut Frames<'_>) {
        self.scratch.clear();
        let fits = match r {
            Ok(rows) => {
                wire::call_reply_rows(&mut self.scratch, id, rows)
                    && self.scratch.len() <= MAX_FRAME
            }
            Err(e) => {
                error_parts(e, |p| wire::call_reply_error(&mut self.scratch, id, p));
                self.scratch.len() <= MAX_FRAME
            }
        };
        if !fits {
            // Its transaction stands (it committed, or it failed); only its
            // answer is too large for a frame.
            let e = CallError::Failed {
                procedure: self.procedure(proc),
                error: format!(
                    "its answer is larger than the {MAX_FRAME} bytes a call forwarded between \
                     processes may return (call it at its home island's server)"
                ),
            };
            self.scratch.clear();
            error_parts(&e, |p| wire::call_reply_error(&mut self.scratch, id, p));
        }
        let frame = &self.scratch;
        out.push(to, |b| b.extend_from_slice(frame));
    }

    /// A CALL from `from`: queued on this executor as a local call.
    fn on_call(&mut self, from: Endpoint, island: IslandId, id: u64, proc: u32, args: Vec<Value>) {
        let key = (from, id);
        if self.running.contains_key(&key) {
            // A copy: the call runs once.
            return;
        }
        let cancel = CancelFlag::new();
        self.running.insert(
            key,
            Running {
                cancel: cancel.clone(),
                island,
                proc,
            },
        );
        let call = Call {
            proc,
            args,
            stmt: None,
            reply: Reply::Peer { to: from, id },
            cancel: Some(cancel),
            forward: None,
        };
        let mb = &self.inner.mailboxes[self.mailbox];
        if !self.inner.open.load(std::sync::atomic::Ordering::Acquire) {
            return call.reply.send(mb, Err(self.inner.closed_error()));
        }
        if !self.backlog.is_empty() {
            self.backlog.push_back(call);
        } else if let Err(call) = mb.queue.push(call) {
            self.backlog.push_back(call);
        }
    }
}

impl ForwardPort for Port {
    fn on_frame(
        &mut self,
        from: Endpoint,
        from_island: IslandId,
        frame: Frame<'_>,
        out: &mut Frames<'_>,
    ) {
        match frame {
            Frame::Call { id, proc, n, args } => {
                let checked = match self.inner.catalog.procs.get(proc as usize) {
                    None => Err(CallError::UnknownProcedure(format!("#{proc}"))),
                    Some(def) => match wire::call_args(n, args) {
                        Ok(args) => def.check_args(&args).map(|()| args),
                        Err(e) => Err(CallError::BadArguments {
                            procedure: def.name.clone(),
                            why: format!("forwarded arguments: {e}"),
                        }),
                    },
                };
                match checked {
                    Ok(args) => self.on_call(from, from_island, id, proc, args),
                    Err(e) => self.answer(from, id, proc, &Err(e), out),
                }
            }
            Frame::CallReply { id, answer } => {
                let Some(p) = self.pending.remove(&id) else {
                    // Canceled and forgotten, or for an earlier incarnation.
                    return;
                };
                let procedure = self.procedure(p.proc);
                let r = match answer {
                    wire::Answer::Rows { rows, body } => {
                        wire::call_rows(rows, body).map_err(|e| CallError::Failed {
                            procedure: procedure.clone(),
                            error: format!("a malformed answer from island {from_island}: {e}"),
                        })
                    }
                    wire::Answer::Error(parts) => Err(error_of(&parts, &procedure, p.island)),
                };
                p.reply.send(&self.inner.mailboxes[self.mailbox], r);
            }
            Frame::CallCancel { id } => {
                if let Some(r) = self.running.get(&(from, id)) {
                    r.cancel.cancel();
                }
            }
            _ => {}
        }
    }

    fn round(&mut self, now_us: u64, down: IslandSet, out: &mut Frames<'_>) {
        let idle = {
            let mb = &self.inner.mailboxes[self.mailbox];
            mb.forwards.is_empty()
                && mb.answers.is_empty()
                && self.backlog.is_empty()
                && self.pending.is_empty()
                && self.running.is_empty()
        };
        if idle {
            // The round of an executor that forwards nothing: no shared
            // count touched.
            return;
        }
        let inner = Arc::clone(&self.inner);
        let mb = &inner.mailboxes[self.mailbox];
        if !mb.forwards.is_empty() {
            while let Some(call) = mb.forwards.pop() {
                self.send_call(call, down, out);
            }
            mb.popped();
        }
        while let Some((to, id, r)) = mb.answers.pop() {
            let proc = self.running.remove(&(to, id)).map_or(u32::MAX, |r| r.proc);
            self.answer(to, id, proc, &r, out);
        }
        while let Some(call) = self.backlog.pop_front() {
            if let Err(call) = mb.queue.push(call) {
                self.backlog.push_front(call);
                break;
            }
        }
        if self.pending.is_empty() && self.running.is_empty() {
            return;
        }
        if !down.is_empty() {
            // Calls waiting on a down island fail now; a late answer from it
            // matches nothing. Calls it made here are canceled (their
            // transactions may still commit, as a local call whose caller
            // left does).
            let gone: Vec<u64> = self
                .pending
                .iter()
                .filter(|(_, p)| down.contains(p.island as IslandId))
                .map(|(&id, _)| id)
                .collect();
            for id in gone {
                if let Some(p) = self.pending.remove(&id) {
                    let e = CallError::IslandDown {
                        procedure: self.procedure(p.proc),
                        island: p.island as u16,
                    };
                    p.reply.send(mb, Err(e));
                }
            }
            for r in self.running.values().filter(|r| down.contains(r.island)) {
                r.cancel.cancel();
            }
        }
        if now_us >= self.scan_at_us && !self.pending.is_empty() {
            self.scan_at_us = now_us + CANCEL_SCAN_US;
            for (&id, p) in self.pending.iter_mut() {
                let canceled =
                    p.cancel.as_ref().is_some_and(CancelFlag::is_canceled) || p.reply.is_closed();
                if canceled && !p.cancel_sent {
                    p.cancel_sent = true;
                    out.push(p.to, |b| wire::call_cancel(b, id));
                }
            }
        }
    }
}

/// Codes of [`CallError`] kinds in a CALL_REPLY (see [`error_parts`]).
mod code {
    pub const UNKNOWN_PROCEDURE: u8 = 0;
    pub const BAD_ARGUMENTS: u8 = 1;
    pub const ROLLBACK: u8 = 2;
    pub const SERIALIZATION: u8 = 3;
    pub const OUT_OF_RANGE: u8 = 4;
    pub const ISLAND_DOWN: u8 = 5;
    pub const PANICKED: u8 = 6;
    pub const FAILED: u8 = 7;
    pub const CANCELED: u8 = 8;
    pub const DEADLOCK: u8 = 9;
    pub const TOO_MANY_BLOCKS: u8 = 10;
    pub const ELSEWHERE: u8 = 11;
    pub const SHUT_DOWN: u8 = 12;
    pub const STOPPED: u8 = 13;
}

/// `e` as the parts of a CALL_REPLY error, handed to `write`.
fn error_parts(e: &CallError, write: impl FnOnce(&ErrorParts<'_>)) {
    let (code, a, b, s0, s1): (u8, u64, u64, &str, &str) = match e {
        CallError::UnknownProcedure(name) => (code::UNKNOWN_PROCEDURE, 0, 0, name, ""),
        CallError::BadArguments { procedure, why } => (code::BAD_ARGUMENTS, 0, 0, procedure, why),
        CallError::Rollback { procedure, why } => (code::ROLLBACK, 0, 0, procedure, why),
        CallError::Serialization {
            procedure,
            attempts,
            last,
        } => (
            code::SERIALIZATION,
            u64::from(*attempts),
            0,
            procedure,
            last,
        ),
        CallError::OutOfRange { procedure, why } => (code::OUT_OF_RANGE, 0, 0, procedure, why),
        CallError::IslandDown { procedure, island } => {
            (code::ISLAND_DOWN, u64::from(*island), 0, procedure, "")
        }
        CallError::Panicked { procedure, message } => (code::PANICKED, 0, 0, procedure, message),
        CallError::Failed { procedure, error } => (code::FAILED, 0, 0, procedure, error),
        CallError::Canceled { procedure } => (code::CANCELED, 0, 0, procedure, ""),
        CallError::Deadlock { waited_ms } => (code::DEADLOCK, *waited_ms, 0, "", ""),
        CallError::TooManyBlocks { island, limit } => {
            (code::TOO_MANY_BLOCKS, *island as u64, *limit as u64, "", "")
        }
        CallError::Elsewhere { island } => (code::ELSEWHERE, *island as u64, 0, "", ""),
        CallError::ShutDown => (code::SHUT_DOWN, 0, 0, "", ""),
        CallError::Stopped(why) => (code::STOPPED, 0, 0, why, ""),
    };
    write(&ErrorParts {
        code,
        a,
        b,
        texts: [s0, s1],
    });
}

/// The error a CALL_REPLY carries, for a call of `procedure` forwarded to
/// `island`. A home that shut down or stopped is, to this process, an
/// island that is down.
fn error_of(p: &ErrorParts<'_>, procedure: &str, island: usize) -> CallError {
    let [s0, s1] = p.texts.map(str::to_string);
    match p.code {
        code::UNKNOWN_PROCEDURE => CallError::UnknownProcedure(s0),
        code::BAD_ARGUMENTS => CallError::BadArguments {
            procedure: s0,
            why: s1,
        },
        code::ROLLBACK => CallError::Rollback {
            procedure: s0,
            why: s1,
        },
        code::SERIALIZATION => CallError::Serialization {
            procedure: s0,
            attempts: u32::try_from(p.a).unwrap_or(u32::MAX),
            last: s1,
        },
        code::OUT_OF_RANGE => CallError::OutOfRange {
            procedure: s0,
            why: s1,
        },
        code::ISLAND_DOWN => CallError::IslandDown {
            procedure: s0,
            island: u16::try_from(p.a).unwrap_or(u16::MAX),
        },
        code::PANICKED => CallError::Panicked {
            procedure: s0,
            message: s1,
        },
        code::FAILED => CallError::Failed {
            procedure: s0,
            error: s1,
        },
        code::CANCELED => CallError::Canceled { procedure: s0 },
        code::DEADLOCK => CallError::Deadlock { waited_ms: p.a },
        code::TOO_MANY_BLOCKS => CallError::TooManyBlocks {
            island: p.a as usize,
            limit: p.b as usize,
        },
        code::ELSEWHERE => CallError::Elsewhere {
            island: p.a as usize,
        },
        code::SHUT_DOWN | code::STOPPED => CallError::IslandDown {
            procedure: procedure.to_string(),
            island: island as u16,
        },
        c => CallError::Failed {
            procedure: procedure.to_string(),
            error: format!("island {island} answered with an unknown error code {c}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_error_crosses_as_itself() {
        let p = || "transfer".to_string();
        let all = [
            CallError::UnknownProcedure("x".into()),
            CallError::BadArguments {
                procedure: p(),
                why: "w".into(),
            },
            CallError::Rollback {
                procedure: p(),
                why: "insufficient funds".into(),
            },
            CallError::Serialization {
                procedure: p(),
                attempts: 100,
                last: "lock".into(),
            },
            CallError::OutOfRange {
                procedure: p(),
                why: "w".into(),
            },
            CallError::IslandDown {
                procedure: p(),
                island: 2,
            },
            CallError::Panicked {
                procedure: p(),
                message: "m".into(),
            },
            CallError::Failed {
                procedure: p(),
                error: "e".into(),
            },
            CallError::Canceled { procedure: p() },
            CallError::Deadlock { waited_ms: 1000 },
            CallError::TooManyBlocks {
                island: 1,
                limit: 128,
            },
            CallError::Elsewhere { island: 3 },
        ];
        for e in all {
            let mut b = Vec::new();
            error_parts(&e, |parts| wire::call_reply_error(&mut b, 1, parts));
            let Ok(Frame::CallReply {
                answer: wire::Answer::Error(parts),
                ..
            }) = wire::decode(&b)
            else {
                panic!("{e:?} does not decode");
            };
            assert_eq!(error_of(&parts, "transfer", 1), e);
        }
        // The home's own ending is, here, an island that went down.
        let mut b = Vec::new();
        error_parts(&CallError::ShutDown, |parts| {
            wire::call_reply_error(&mut b, 1, parts)
        });
        let Ok(Frame::CallReply {
            answer: wire::Answer::Error(parts),
            ..
        }) = wire::decode(&b)
        else {
            panic!("no decode");
        };
        assert_eq!(
            error_of(&parts, "transfer", 1),
            CallError::IslandDown {
                procedure: "transfer".into(),
                island: 1
            }
        );
    }
}
