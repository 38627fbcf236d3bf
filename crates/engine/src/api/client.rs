//! Calling procedures: blocking and `async`.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::deployment::{Call, CancelFlag, Deployment, Inner, Reply};
use super::value::{Row, Value};
use super::CallError;

/// A handle that calls the deployment's procedures. Cheap to clone, usable
/// from any thread; many calls may be in flight at once (from several
/// threads, or as several futures of one). A call waits for room when its
/// executor's queue is full.
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("open", &self.inner.open.load(Ordering::Relaxed))
            .finish()
    }
}

/// How long a blocking call spins for its answer, and then polls it
/// yielding its core, before it parks.
const SPIN_FOR: Duration = Duration::from_micros(5);
const POLL_FOR: Duration = Duration::from_micros(50);

thread_local! {
    /// Spreads a thread's calls over the executors that may take them.
    static NEXT: Cell<usize> = const { Cell::new(0) };
}

/// A number that spreads the calling thread's calls and blocks over the
/// executors that may take them.
pub(super) fn next_spread() -> usize {
    NEXT.with(|c| {
        let v = c.get();
        c.set(v.wrapping_add(1));
        v
    })
}

impl Deployment {
    /// A client of this deployment.
    pub fn client(&self) -> Client {
        Client {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl Client {
    /// Calls procedure `name` with `args` and waits for its result rows,
    /// which come once its commit is acknowledged (durable in `sync` mode).
    pub fn call(&self, name: &str, args: &[Value]) -> Result<Vec<Row>, CallError> {
        let (tx, rx) = oneshot::channel();
        let (mut call, mailbox) = self.prepare(name, args.to_vec(), tx)?;
        if let Some(island) = call.forward {
            // Back-pressure: the forwarding executor's queue is full; this
            // thread sleeps until it takes calls, or fails past the forward
            // timeout.
            self.inner.forward(mailbox, call, island)?;
        } else {
            loop {
                match self.push(mailbox, call) {
                    Ok(()) => break,
                    Err(c) => {
                        call = c;
                        // Back-pressure: the executor's queue is full.
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
            }
        }
        // A short wait polls: most calls are answered within microseconds,
        // and parking the thread costs more than that on both sides. It
        // spins first, then yields the core (the executor may share it).
        let start = std::time::Instant::now();
        loop {
            match rx.try_recv() {
                Ok(r) => return r,
                Err(oneshot::TryRecvError::Disconnected) => return Err(self.inner.closed_error()),
                Err(oneshot::TryRecvError::Empty) => {
                    let waited = start.elapsed();
                    if waited < SPIN_FOR {
                        std::hint::spin_loop();
                    } else if waited < POLL_FOR {
                        std::thread::yield_now();
                    } else {
                        break;
                    }
                }
            }
        }
        rx.recv().unwrap_or_else(|_| Err(self.inner.closed_error()))
    }

    /// Calls procedure `name` with `args`: a future of its result rows, for
    /// any executor (tokio's included). The call is checked at once; it is
    /// queued when the future is first polled.
    pub fn call_async(&self, name: &str, args: Vec<Value>) -> CallFuture {
        self.call_future(name, args, None)
    }

    /// [`Client::call_async`], cancelled by `cancel` if it is set before the
    /// call's transaction commits (see [`CancelFlag`]).
    pub fn call_async_cancelable(
        &self,
        name: &str,
        args: Vec<Value>,
        cancel: &CancelFlag,
    ) -> CallFuture {
        self.call_future(name, args, Some(cancel.clone()))
    }

    /// Runs `stmt` as a transaction of its own on island `home` (`None`: any
    /// island), retried on conflicts as calls are, cancelled by `cancel` as
    /// [`Client::call_async_cancelable`] is; answered once durable, like
    /// [`Client::call_async`]. Errors name the statement by
    /// [`Statement::name`](super::Statement::name). A `home` that another
    /// process runs gets the statement forwarded if it has a
    /// [`Statement::source`](super::Statement::source) (else
    /// [`CallError::Elsewhere`]).
    pub fn run_async(
        &self,
        stmt: Arc<dyn super::Statement>,
        home: Option<usize>,
        cancel: Option<&CancelFlag>,
    ) -> CallFuture {
        let fail = |e| CallFuture {
            inner: Arc::clone(&self.inner),
            to_push: None,
            rx: None,
            failed: Some(e),
        };
        if !self.inner.open.load(Ordering::Acquire) {
            return fail(self.inner.closed_error());
        }
        let n = next_spread();
        let (mailbox, forward) = match self.inner.island_for(home, n, stmt.name()) {
            Ok(island) => {
                let first = &self.inner.first;
                (
                    first[island] + n % (first[island + 1] - first[island]),
                    None,
                )
            }
            // Homed on another process's island: a local executor forwards
            // it there, if it can be rebuilt there and the island is up.
            Err(CallError::Elsewhere { island })
                if self.inner.forwards && stmt.source().is_some() =>
            {
                let mailboxes = &self.inner.mailboxes;
                if mailboxes[0].island_down(island) {
                    return fail(CallError::IslandDown {
                        procedure: stmt.name().to_string(),
                        island: island as u16,
                    });
                }
                (n % mailboxes.len(), Some(island))
            }
            Err(e) => return fail(e),
        };
        let (tx, rx) = oneshot::channel();
        CallFuture {
            inner: Arc::clone(&self.inner),
            to_push: Some((
                Call {
                    proc: 0,
                    args: Vec::new(),
                    stmt: Some(stmt),
                    reply: Reply::Caller(tx),
                    cancel: cancel.cloned(),
                    forward,
                    block: None,
                },
                mailbox,
            )),
            rx: Some(std::future::IntoFuture::into_future(rx)),
            failed: None,
        }
    }

    fn call_future(&self, name: &str, args: Vec<Value>, cancel: Option<CancelFlag>) -> CallFuture {
        let (tx, rx) = oneshot::channel();
        match self.prepare(name, args, tx) {
            Ok((call, mailbox)) => CallFuture {
                inner: Arc::clone(&self.inner),
                to_push: Some((Call { cancel, ..call }, mailbox)),
                rx: Some(std::future::IntoFuture::into_future(rx)),
                failed: None,
            },
            Err(e) => CallFuture {
                inner: Arc::clone(&self.inner),
                to_push: None,
                rx: None,
                failed: Some(e),
            },
        }
    }

    /// Transactions committed by each island's executors since the
    /// deployment opened: the calls whose home it is. Each executor
    /// publishes its count every `PUBLISH_EVERY` (256) commits and when it
    /// stops, so a figure may lag by that much per executor.
    pub fn committed_per_island(&self) -> Vec<u64> {
        self.inner.committed_per_island()
    }

    /// Why the deployment stopped serving, if it failed (a log that died).
    pub fn failure(&self) -> Option<String> {
        self.inner.failure()
    }

    /// Looks the procedure up, checks the arguments and picks the executor;
    /// the call's answer goes to `reply`.
    fn prepare(
        &self,
        name: &str,
        args: Vec<Value>,
        reply: oneshot::Sender<Result<Vec<Row>, CallError>>,
    ) -> Result<(Call, usize), CallError> {
        if !self.inner.open.load(Ordering::Acquire) {
            return Err(self.inner.closed_error());
        }
        let Some((id, def)) = self.inner.catalog.lookup(name) else {
            return Err(CallError::UnknownProcedure(name.to_string()));
        };
        def.check_args(&args)?;
        let n = next_spread();
        let first = &self.inner.first;
        let (mailbox, forward) =
            match self
                .inner
                .island_for(self.inner.home_island(def, &args), n, name)
            {
                Ok(island) => {
                    let workers = first[island + 1] - first[island];
                    (first[island] + n % workers, None)
                }
                // Homed on another process's island: a local executor forwards
                // it there, unless that island is known to be down.
                Err(CallError::Elsewhere { island }) if self.inner.forwards => {
                    let mailboxes = &self.inner.mailboxes;
                    if mailboxes[0].island_down(island) {
                        return Err(CallError::IslandDown {
                            procedure: name.to_string(),
                            island: island as u16,
                        });
                    }
                    (n % mailboxes.len(), Some(island))
                }
                Err(e) => return Err(e),
            };
        Ok((
            Call {
                proc: id,
                args,
                stmt: None,
                reply: Reply::Caller(reply),
                cancel: None,
                forward,
                block: None,
            },
            mailbox,
        ))
    }

    /// Queues `call`; gives it back if the queue is full. A call queued
    /// while the deployment closes is answered with the closing error.
    fn push(&self, mailbox: usize, call: Call) -> Result<(), Call> {
        let mb = &self.inner.mailboxes[mailbox];
        match call.forward {
            None => mb.queue.push(call)?,
            Some(_) => mb.forwards.push(call)?,
        }
        mb.notify();
        // Closed meanwhile: its executors may be gone, so nobody would take it.
        if !self.inner.open.load(Ordering::SeqCst) {
            self.inner.drain();
        }
        Ok(())
    }
}

impl Inner {
    /// Queues `call`, homed on island `island` of another process, for the
    /// executor of `mailbox` to forward. A full queue is waited out, the
    /// thread asleep until the executor takes calls from it
    /// ([`super::deployment::Mailbox::push_forward_until`]), up to the
    /// forward timeout: then nothing was sent, and the call fails with
    /// [`CallError::Busy`].
    pub(crate) fn forward(
        &self,
        mailbox: usize,
        call: Call,
        island: usize,
    ) -> Result<(), CallError> {
        let mb = &self.mailboxes[mailbox];
        let start = std::time::Instant::now();
        if mb
            .push_forward_until(call, start + self.forward_timeout)
            .is_err()
        {
            return Err(CallError::Busy {
                island,
                waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        mb.notify();
        // Closed meanwhile: its executor may be gone, so nobody would take it.
        if !self.open.load(Ordering::SeqCst) {
            self.drain();
        }
        Ok(())
    }
}

/// The result of [`Client::call_async`]: the call is queued on its first
/// poll (or, when the executor's queue is full, on a later poll: the task is
/// woken once the executor takes a call from it).
///
/// Dropping the future cancels the call, as a [`super::CancelFlag`] would: a
/// call not yet begun never runs, and one whose procedure runs is rolled
/// back when it returns; once its procedure has returned, its commit goes on
/// (and stands; only its answer is lost).
pub struct CallFuture {
    inner: Arc<Inner>,
    to_push: Option<(Call, usize)>,
    rx: Option<oneshot::AsyncReceiver<Result<Vec<Row>, CallError>>>,
    failed: Option<CallError>,
}

impl Future for CallFuture {
    type Output = Result<Vec<Row>, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Err(e));
        }
        if let Some((call, mailbox)) = this.to_push.take() {
            let client = Client {
                inner: Arc::clone(&this.inner),
            };
            if let Err(call) = client.push(mailbox, call) {
                // Back-pressure: the executor wakes this task when it takes
                // a call from its queue, and the push is tried again then.
                this.inner.mailboxes[mailbox].wait_for_room(cx.waker());
                if let Err(call) = client.push(mailbox, call) {
                    this.to_push = Some((call, mailbox));
                    return Poll::Pending;
                }
            }
        }
        let Some(rx) = this.rx.as_mut() else {
            return Poll::Ready(Err(CallError::ShutDown));
        };
        match Pin::new(rx).poll(cx) {
            Poll::Ready(r) => {
                this.rx = None;
                Poll::Ready(r.unwrap_or_else(|_| Err(this.inner.closed_error())))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
