//! Serving a deployment over the PostgreSQL wire protocol (v3): `psql`,
//! `pgbench` and PostgreSQL drivers call its stored procedures.
//!
//! [`serve`] takes an open [`Deployment`] and listens on a TCP address. One
//! server thread runs a single-threaded tokio runtime: it accepts
//! connections and speaks the protocol (the `pgwire` crate) for all of
//! them; each call goes to the deployment's executors through
//! [`Client::call_async`](crate::api::Client::call_async), so the server
//! thread never runs a transaction and never blocks on one.
//!
//! What a connection may send is in [`sql`]: `CALL name(…)` or
//! `SELECT * FROM name(…)` (one procedure call, one transaction), `SHOW
//! procedures | islands | threads | stats`, and `BEGIN`/`COMMIT`/`ROLLBACK`/`SET`,
//! which are accepted and do nothing. The simple and the extended query
//! protocol both work, with `$n` placeholders in text or binary format.
//!
//! Errors carry SQLSTATEs drivers know: a conflict that outlasted the
//! retries `40001`, a procedure's own rollback `P0001` (its message), an
//! unknown procedure `42883`, wrong arguments `42804`, a syntax error
//! `42601`, a statement of SQL this server does not run `0A000`, too many
//! connections `53300`, shutting down `57P01`, an idle connection closed
//! `57P05`, a message over the size limit `54000`. After an ERROR the
//! connection goes on; after a FATAL one it is closed.
//!
//! [`Server::shutdown`] stops accepting, lets every connection finish the
//! message it is processing (a call in flight gets its answer), answers
//! the next one with `57P01` and closes it, then checkpoints every island
//! and shuts the deployment down (its logs flushed).
//!
//! A deployment that fails (a log that died) stops serving by itself: the
//! server stops accepting, answers each connection's next message with
//! `58030` and the cause, and closes it; [`Server::failure`] says why, and
//! [`Server::shutdown`] returns the log's error.
//!
//! With [`ServerOptions::metrics`], the same thread answers `GET /metrics`
//! over HTTP with the figures of `SHOW stats` and `SHOW threads` in
//! Prometheus's text format ([`metrics`]).

mod framing;
mod handler;
mod metrics;
pub(crate) mod pg_catalog;
mod session;
mod shared;
pub mod sql;
#[doc(hidden)]
pub mod tables;
mod tls;

#[doc(hidden)]
pub use self::framing::fuzz_frames;

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::BytesMut;
use crossbeam_utils::CachePadded;
use futures::{FutureExt, Sink, SinkExt};
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata, AuthSource,
    DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, DefaultClient, NoopHandler, PgWireConnectionState,
    PidSecretKeyGenerator, RandomPidSecretKeyGenerator, DEFAULT_NAME,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::response::{GssEncResponse, SslResponse};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{process_error, process_message, PgWireMessageServerCodec};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_util::codec::{Decoder, Framed};

use self::framing::{Phase, Refusal};
use self::handler::{fatal_info, Extended, Handler, Parser};
use self::shared::{CancelKey, ProcCounters, Shared};
use crate::api::Deployment;
use crate::deploy::Plan;
use crate::threads::Role;
use crate::topology::CpuSet;
use crate::Error;

/// How the server listens and what it allows.
#[derive(Clone)]
pub struct ServerOptions {
    /// The address to listen on. Any address other than a loopback one
    /// requires [`ServerOptions::password`].
    pub listen: SocketAddr,
    /// Connections served at once; one more is answered `53300` and closed.
    pub max_connections: usize,
    /// The largest message a client may send, in bytes (its 4-byte length
    /// field included); a larger one is answered `54000` and the
    /// connection closed.
    pub max_message_bytes: usize,
    /// A connection that sends nothing for this long is answered `57P05`
    /// and closed; `None`: never.
    pub idle_timeout: Option<Duration>,
    /// A connection idle this long inside a transaction block (status `T`
    /// or `E`) is answered `25P03` and closed, its block rolled back, so a
    /// client that went quiet holds no lock forever; `None`: never. A
    /// session's positive `idle_in_transaction_session_timeout` replaces it.
    pub idle_in_transaction_timeout: Option<Duration>,
    /// A connection that has not logged in this long after it was
    /// accepted is closed (PostgreSQL's `authentication_timeout`); `None`:
    /// never (the idle timeout still applies).
    pub auth_timeout: Option<Duration>,
    /// The password every client must give (SCRAM-SHA-256); `None`: no
    /// authentication, allowed on loopback addresses only.
    pub password: Option<String>,
    /// On shutdown, how long connections may take to finish what they are
    /// doing before they are dropped.
    pub shutdown_grace: Duration,
    /// Server threads, each with its own connections; `None`: one per four
    /// cores of the deployment ([`default_threads`]).
    pub threads: Option<usize>,
    /// CPUs the server threads are pinned to, thread `i` to the `i`-th
    /// (wrapping around); `None`: not pinned. A deployment's plan places
    /// its executors and gives the server no CPU of its own, so by default
    /// the system's scheduler places the server threads.
    pub cpus: Option<CpuSet>,
    /// Where to answer Prometheus scrapes (`GET /metrics` over HTTP);
    /// `None`: nowhere. Scrapes need no password, on any address.
    pub metrics: Option<SocketAddr>,
    /// The server's certificate chain (PEM, its own certificate first):
    /// with [`ServerOptions::tls_key`], SSLRequest is answered with TLS;
    /// without both, it is refused and the client goes on in plain text
    /// (or gives up, as `sslmode=require` does).
    pub tls_cert: Option<PathBuf>,
    /// The private key of [`ServerOptions::tls_cert`] (PEM).
    pub tls_key: Option<PathBuf>,
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("listen", &self.listen)
            .field("max_connections", &self.max_connections)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("idle_timeout", &self.idle_timeout)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .field("auth_timeout", &self.auth_timeout)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("shutdown_grace", &self.shutdown_grace)
            .field("threads", &self.threads)
            .field("cpus", &self.cpus)
            .field("metrics", &self.metrics)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .finish()
    }
}

impl ServerOptions {
    /// Refuses options [`serve`] cannot serve with (all but the addresses,
    /// which are checked by binding them): a caller checks them before it
    /// opens or creates anything.
    pub fn check(&self) -> Result<(), Error> {
        if self.max_connections == 0 || self.max_message_bytes < 1024 {
            return Err(Error::Config(
                "the server needs max_connections >= 1 and max_message_bytes >= 1024".into(),
            ));
        }
        if !self.listen.ip().is_loopback() && self.password.is_none() {
            return Err(Error::Config(format!(
                "listening on {} (not a loopback address) requires a password: give one in a \
                 file (--password-file) or the ISLANDS_PASSWORD environment variable",
                self.listen
            )));
        }
        if self.password.as_deref() == Some("") {
            return Err(Error::Config("the password is empty".into()));
        }
        self.tls()?;
        if let Some(threads) = self.threads {
            if !(1..=MAX_THREADS).contains(&threads) {
                return Err(Error::Config(format!(
                    "{threads} server threads: a server runs 1 to {MAX_THREADS}"
                )));
            }
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return Err(Error::Config("the server's CPU list is empty".into()));
            }
            let allowed = crate::topology::allowed_cpus();
            if let Some(c) = cpus.iter().find(|&c| !allowed.contains(&(c as usize))) {
                return Err(Error::Config(format!(
                    "the server's CPU {c} is not one this process may run on"
                )));
            }
        }
        Ok(())
    }

    /// The TLS configuration of [`ServerOptions::tls_cert`] and
    /// [`ServerOptions::tls_key`] (both files read and checked now);
    /// `None` without TLS. One without the other is an error.
    fn tls(&self) -> Result<Option<Arc<tokio_rustls::rustls::ServerConfig>>, Error> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => tls::load(cert, key).map(Some),
            (Some(_), None) => Err(Error::Config(
                "--tls-cert needs --tls-key (the certificate's private key)".into(),
            )),
            (None, Some(_)) => Err(Error::Config(
                "--tls-key needs --tls-cert (the certificate it is the key of)".into(),
            )),
        }
    }

    /// Whether connections may use TLS (both files given).
    pub fn tls_enabled(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }
}

/// The default address: PostgreSQL's port plus one, on loopback.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:5433";

/// [`ServerOptions::idle_in_transaction_timeout`] unless one is given.
pub const DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for ServerOptions {
    fn default() -> ServerOptions {
        ServerOptions {
            listen: DEFAULT_LISTEN.parse().expect("a valid address"),
            max_connections: 256,
            max_message_bytes: 1 << 20,
            idle_timeout: Some(Duration::from_secs(3600)),
            idle_in_transaction_timeout: Some(DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT),
            auth_timeout: Some(Duration::from_secs(60)),
            password: None,
            shutdown_grace: Duration::from_secs(10),
            threads: None,
            cpus: None,
            metrics: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// The most server threads a server runs.
pub const MAX_THREADS: usize = 256;

/// The server threads for a deployment of `plan` when none are asked for:
/// one per four of its cores (one on up to four cores). A call costs the
/// server a few system calls, several times what a short transaction costs
/// its executor, and each server thread serves thousands of connections.
pub fn default_threads(plan: &Plan) -> usize {
    let cores: usize = plan.islands().iter().map(|i| i.cores).sum();
    cores.div_ceil(4).clamp(1, MAX_THREADS)
}

/// A running server. [`Server::shutdown`] (or dropping it) stops it and
/// the deployment it serves.
pub struct Server {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    deployment: Option<Deployment>,
    stop: Arc<watch::Sender<State>>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

/// What the server is doing; its connections follow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Running,
    /// Shutting down: each connection is answered `57P01` and closed.
    Stopping,
    /// The deployment failed for this reason: each connection is answered
    /// `58030` and closed.
    Failed(String),
}

/// How often the server looks whether its deployment failed.
const FAILURE_POLL: Duration = Duration::from_millis(50);

/// Iterations of SCRAM's key derivation (PostgreSQL's default).
const SCRAM_ITERATIONS: usize = 4096;

/// Answers every login with the one password, salted once at start.
#[derive(Debug)]
struct OnePassword {
    salt: Vec<u8>,
    salted: Vec<u8>,
}

#[async_trait]
impl AuthSource for OnePassword {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Ok(Password::new(Some(self.salt.clone()), self.salted.clone()))
    }
}

/// No authentication (loopback only): the startup message is answered
/// with the server's parameters ([`session::parameters`]) and
/// ReadyForQuery.
struct NoAuth {
    parameters: DefaultServerParameterProvider,
    pids: RandomPidSecretKeyGenerator,
}

#[async_trait]
impl StartupHandler for NoAuth {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let PgWireFrontendMessage::Startup(ref startup) = message {
            protocol_negotiation(client, startup).await?;
            save_startup_parameters_to_metadata(client, startup);
            let (pid, secret_key) = self.pids.generate(client);
            client.set_pid_and_secret_key(pid, secret_key);
            finish_authentication(client, &self.parameters).await?;
        }
        Ok(())
    }
}

/// Starts serving `deployment` as `opts` say: binds the address (an error
/// if it cannot), then returns while a server thread accepts connections.
pub fn serve(deployment: Deployment, opts: ServerOptions) -> Result<Server, Error> {
    opts.check()?;
    let tls = opts.tls()?.map(tokio_rustls::TlsAcceptor::from);
    let listener = StdListener::bind(opts.listen)
        .map_err(|e| Error::Config(format!("cannot listen on {}: {e}", opts.listen)))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Config(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Config(format!("cannot listen on {}: {e}", opts.listen)))?;
    let threads = opts
        .threads
        .unwrap_or_else(|| default_threads(deployment.plan()));
    let scrapes = match opts.metrics {
        Some(m) => {
            let cannot = |e: io::Error| Error::Config(format!("cannot serve metrics on {m}: {e}"));
            let l = StdListener::bind(m).map_err(cannot)?;
            l.set_nonblocking(true).map_err(cannot)?;
            let a = l.local_addr().map_err(cannot)?;
            Some((l, a))
        }
        None => None,
    };
    let metrics_addr = scrapes.as_ref().map(|(_, a)| *a);
    // Statements other processes of the deployment forward here are
    // rebuilt from their SQL.
    deployment.set_statement_compiler(handler::statement_compiler(deployment.catalog().clone()));
    let procs = deployment.catalog().procedures().to_vec();
    let shared = Arc::new(Shared {
        client: deployment.client(),
        catalog: deployment.catalog().clone(),
        counters: (0..threads * procs.len())
            .map(|_| CachePadded::new(ProcCounters::default()))
            .collect(),
        procs,
        plan: deployment.plan().clone(),
        islands: deployment.islands().to_vec(),
        view: deployment.islands_view(),
        cluster: Arc::clone(deployment.cluster()),
        threads: deployment.threads().clone(),
        open: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        per_thread: (0..threads)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
        cancels: Default::default(),
    });
    let (stop, stop_rx) = watch::channel(State::Running);
    let stop = Arc::new(stop);
    let opts = Arc::new(opts);
    let auth = Auth::new(&opts);
    let (inboxes, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::unbounded_channel()).unzip();
    // Thread 0 also accepts, and hands each connection to a thread.
    let mut acceptor = Some(Acceptor {
        listener,
        inboxes,
        shared: Arc::clone(&shared),
        opts: Arc::clone(&opts),
        state: Arc::clone(&stop),
        stop: stop_rx.clone(),
    });
    // Thread 0 answers the metrics' scrapes too.
    let mut scrapes = Some(scrapes);
    let mut spawned = Vec::with_capacity(threads);
    for (i, rx) in rxs.into_iter().enumerate() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("cannot start a server runtime: {e}")))?;
        let thread = Thread {
            index: i,
            shared: Arc::clone(&shared),
            opts: Arc::clone(&opts),
            auth: auth.clone(),
            tls: tls.clone(),
            stop: stop_rx.clone(),
        };
        let cpu = opts.cpus.as_ref().map(|c| c.ids()[i % c.len()] as usize);
        let acceptor = acceptor.take();
        let scrapes = scrapes.take().flatten();
        let (registry, metrics_stop) = (shared.threads.clone(), stop_rx.clone());
        let metrics_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name(format!("islands-server-{i}"))
            .spawn(move || {
                if let Some(cpu) = cpu {
                    if let Err(e) = crate::topology::pin_to(cpu) {
                        eprintln!("islands server: {e}");
                    }
                }
                let _registered = registry.enter(Role::Server, None);
                runtime.block_on(async {
                    if let Some((l, _)) = scrapes {
                        match tokio::net::TcpListener::from_std(l) {
                            Ok(l) => {
                                tokio::spawn(metrics::serve_metrics(
                                    l,
                                    metrics_shared,
                                    metrics_stop,
                                ));
                            }
                            Err(e) => eprintln!("islands server: cannot serve metrics: {e}"),
                        }
                    }
                    thread.run(rx, acceptor).await
                });
            })
            .map_err(|e| Error::Config(format!("cannot start a server thread: {e}")))?;
        spawned.push(handle);
    }
    Ok(Server {
        addr,
        metrics_addr,
        deployment: Some(deployment),
        stop,
        threads: spawned,
        shared,
    })
}

impl Server {
    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address metrics are served on ([`ServerOptions::metrics`],
    /// with the port the system chose for port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Connections open now.
    pub fn connections(&self) -> u64 {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// Connections each server thread serves now (refused ones included
    /// until they close).
    pub fn connections_per_thread(&self) -> Vec<u64> {
        self.shared
            .per_thread
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    /// Why the deployment stopped serving, if it failed (a log that died:
    /// the message names the island's log and the error). The server then
    /// accepts no more connections and closes the open ones;
    /// [`Server::shutdown`] returns the error.
    pub fn failure(&self) -> Option<String> {
        self.shared.client.failure()
    }

    /// Whether the server still accepts connections (it stops by itself
    /// when its deployment fails).
    pub fn is_serving(&self) -> bool {
        *self.stop.borrow() == State::Running
            && !self.threads.is_empty()
            && self.threads.iter().all(|t| !t.is_finished())
    }

    /// Stops accepting; lets each connection finish the message it is
    /// processing (calls in flight are answered), answers its next one
    /// with `57P01` and closes it (waiting at most the shutdown grace);
    /// writes a checkpoint of every island with a log; shuts the
    /// deployment down (its logs flushed). Returns the first error: a
    /// deployment that failed returns its log's error, and takes no
    /// checkpoint.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Result<(), Error> {
        self.stop.send_if_modified(|s| {
            let running = *s == State::Running;
            if running {
                *s = State::Stopping;
            }
            running
        });
        let mut panicked = false;
        for t in self.threads.drain(..) {
            panicked |= t.join().is_err();
        }
        if panicked {
            return Err(Error::Config("a server thread panicked".into()));
        }
        let Some(deployment) = self.deployment.take() else {
            return Ok(());
        };
        if let Some(cause) = deployment.failure() {
            // The log's own error, as the deployment has it; the cause
            // if it has none (an executor's error).
            return match deployment.shutdown() {
                Err(e) => Err(e),
                Ok(()) => Err(Error::LogFailed(cause)),
            };
        }
        let mut first = None;
        for island in deployment.islands() {
            if island.wal().is_some() {
                if let Err(e) = island.checkpoint() {
                    first.get_or_insert(e);
                }
            }
        }
        let shut = deployment.shutdown();
        match first {
            Some(e) => Err(e),
            None => shut,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop_all();
    }
}

/// How clients log in: every server thread shares one handler, so the
/// process ids it gives connections (their cancel keys) are unique.
#[derive(Clone)]
enum Auth {
    None(Arc<NoAuth>),
    Scram(Arc<SASLAuthStartupHandler<DefaultServerParameterProvider>>),
}

impl Auth {
    fn new(opts: &ServerOptions) -> Auth {
        match &opts.password {
            None => Auth::None(Arc::new(NoAuth {
                parameters: session::parameters(),
                pids: RandomPidSecretKeyGenerator::default(),
            })),
            Some(pw) => {
                let salt: Vec<u8> = (0..16).map(|_| rand::random::<u8>()).collect();
                let salted = gen_salted_password(pw, &salt, SCRAM_ITERATIONS);
                let mut auth = ScramAuth::new(Arc::new(OnePassword { salt, salted }));
                auth.set_iterations(SCRAM_ITERATIONS);
                Auth::Scram(Arc::new(
                    SASLAuthStartupHandler::new(Arc::new(session::parameters())).with_scram(auth),
                ))
            }
        }
    }
}

/// A connection handed to a server thread: its socket, its peer, and
/// whether it is refused (too many connections) or counted as open.
struct Handoff {
    tcp: std::net::TcpStream,
    peer: SocketAddr,
    refuse: Option<ErrorInfo>,
}

/// Accepts connections (on server thread 0) and hands each to the server
/// thread with the fewest open connections, the lowest index on a tie.
/// One acceptor keeps the connection limit in one place and the threads'
/// loads even whichever way connections come and go; `SO_REUSEPORT`
/// listeners would leave the spread to the kernel's hash of the client's
/// address, and drop the connections queued on a listener that closes.
struct Acceptor {
    listener: StdListener,
    inboxes: Vec<mpsc::UnboundedSender<Handoff>>,
    shared: Arc<Shared>,
    opts: Arc<ServerOptions>,
    /// Set to [`State::Failed`] when the deployment fails.
    state: Arc<watch::Sender<State>>,
    stop: watch::Receiver<State>,
}

impl Acceptor {
    /// Accepts until told to stop or the deployment fails; then closes the
    /// listener (and, on a failure, says so to every thread).
    async fn run(mut self) {
        let listener = match tokio::net::TcpListener::from_std(self.listener) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("islands server: cannot listen: {e}");
                return;
            }
        };
        let shared = &*self.shared;
        let mut poll = tokio::time::interval(FAILURE_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed = None;
        loop {
            let accepted = tokio::select! {
                biased;
                _ = self.stop.changed() => break,
                _ = poll.tick() => {
                    failed = shared.client.failure();
                    if failed.is_some() {
                        break;
                    }
                    continue;
                }
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: back off, go on.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let refuse = if shared.open.load(Ordering::Relaxed) >= self.opts.max_connections as u64
            {
                shared.refused.fetch_add(1, Ordering::Relaxed);
                Some(fatal_info(
                    "53300",
                    format!(
                        "sorry, too many clients already: this server serves at most {} connections",
                        self.opts.max_connections
                    ),
                ))
            } else {
                shared.open.fetch_add(1, Ordering::Relaxed);
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                None
            };
            let Ok(tcp) = tcp.into_std() else {
                if refuse.is_none() {
                    shared.open.fetch_sub(1, Ordering::Relaxed);
                }
                continue;
            };
            let to = (0..self.inboxes.len())
                .min_by_key(|&t| shared.per_thread[t].load(Ordering::Relaxed))
                .unwrap_or(0);
            shared.per_thread[to].fetch_add(1, Ordering::Relaxed);
            let counted = refuse.is_none();
            if self.inboxes[to]
                .send(Handoff { tcp, peer, refuse })
                .is_err()
            {
                // That thread has stopped: the server is stopping.
                shared.per_thread[to].fetch_sub(1, Ordering::Relaxed);
                if counted {
                    shared.open.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        drop(listener);
        // Closed before it is said: a server that is not serving accepts nothing.
        if let Some(cause) = failed {
            self.state.send_replace(State::Failed(cause));
        }
    }
}

/// One server thread: a current-thread runtime serving the connections
/// handed to it.
struct Thread {
    index: usize,
    shared: Arc<Shared>,
    opts: Arc<ServerOptions>,
    auth: Auth,
    /// Answers SSLRequest; `None`: refused.
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: watch::Receiver<State>,
}

impl Thread {
    /// Serves connections as they come until told to stop, then waits (at
    /// most the grace) for its open ones to close. Thread 0 accepts too.
    async fn run(
        mut self,
        mut inbox: mpsc::UnboundedReceiver<Handoff>,
        acceptor: Option<Acceptor>,
    ) {
        let accepting = acceptor.map(|a| tokio::spawn(a.run()));
        let parser = Arc::new(Parser {
            shared: Arc::clone(&self.shared),
        });
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let handoff = tokio::select! {
                biased;
                _ = self.stop.changed() => break,
                h = inbox.recv() => match h {
                    Some(h) => h,
                    None => break,
                },
                // Reap finished connections as they go.
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            };
            let Handoff { tcp, peer, refuse } = handoff;
            let open = Open {
                shared: Arc::clone(&self.shared),
                thread: self.index,
                counted: refuse.is_none(),
            };
            let Ok(tcp) = TcpStream::from_std(tcp) else {
                continue;
            };
            let handler = Arc::new(Handler::new(Arc::clone(&self.shared), self.index));
            let conn = Conn {
                opts: Arc::clone(&self.opts),
                tls: self.tls.clone(),
                extended: Arc::new(Extended {
                    handler: Arc::clone(&handler),
                    parser: Arc::clone(&parser),
                }),
                handler,
                stop: self.stop.clone(),
                refuse,
            };
            match &self.auth {
                Auth::Scram(a) => {
                    let a = Arc::clone(a);
                    tasks.spawn(async move {
                        conn.run(tcp, peer, a).await;
                        drop(open);
                    })
                }
                Auth::None(a) => {
                    let a = Arc::clone(a);
                    tasks.spawn(async move {
                        conn.run(tcp, peer, a).await;
                        drop(open);
                    })
                }
            };
        }
        drop(inbox);
        if let Some(a) = accepting {
            let _ = a.await;
        }
        let grace = self.opts.shutdown_grace;
        let _ =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        tasks.abort_all();
    }
}

/// A connection counted open on its thread (and in all, unless refused)
/// until this drops: when it ends, or is dropped at the end of the grace.
struct Open {
    shared: Arc<Shared>,
    thread: usize,
    counted: bool,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.shared.per_thread[self.thread].fetch_sub(1, Ordering::Relaxed);
        if self.counted {
            self.shared.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One connection's settings and handlers.
struct Conn {
    opts: Arc<ServerOptions>,
    /// Answers SSLRequest; `None`: refused.
    tls: Option<tokio_rustls::TlsAcceptor>,
    handler: Arc<Handler>,
    extended: Arc<Extended>,
    stop: watch::Receiver<State>,
    /// Answer at once with this error and close (too many connections).
    refuse: Option<ErrorInfo>,
}

type Socket = Framed<Batched, PgWireMessageServerCodec<Arc<handler::Prepared>>>;

/// How long a FATAL error may wait for a client that does not read.
const FATAL_WAIT: Duration = Duration::from_secs(1);

/// Room kept free in a connection's input buffer for the next read: a
/// pipeline of calls arrives in one read.
const INPUT_ROOM: usize = 8 * 1024;

/// Sends a FATAL error and closes the connection (a client that does not
/// read gets [`FATAL_WAIT`], then is dropped).
async fn send_fatal(socket: &mut Socket, info: ErrorInfo) {
    let _ = tokio::time::timeout(FATAL_WAIT, async {
        let _ = socket
            .send(PgWireBackendMessage::ErrorResponse(info.into()))
            .await;
        let _ = socket.close().await;
    })
    .await;
}

/// Refuses a connection before it has said anything: sends the FATAL
/// error, shuts its sending side, and drops what the client sends until
/// it closes, at most [`FATAL_WAIT`] (closing with its startup message
/// unread would make the kernel reset the connection, and the client
/// might lose the error).
async fn refuse_now(socket: &mut Socket, info: ErrorInfo) {
    let _ = tokio::time::timeout(FATAL_WAIT, async {
        let _ = socket
            .send(PgWireBackendMessage::ErrorResponse(info.into()))
            .await;
        let _ = socket.close().await;
        let mut sink = [0u8; 1024];
        while let Ok(1..) = socket.get_mut().io.read(&mut sink).await {}
    })
    .await;
}

/// Answers a message the protocol does not allow: FATAL (logged, at most
/// a line a second) and closed.
async fn violation(socket: &mut Socket, peer: SocketAddr, r: Refusal) {
    framing::log_limited(format_args!(
        "{peer}: closed on a protocol violation: {} {}",
        r.code, r.message
    ));
    send_fatal(socket, fatal_info(r.code, r.message)).await;
}

impl Conn {
    async fn run<A: StartupHandler>(mut self, tcp: TcpStream, peer: SocketAddr, auth: Arc<A>) {
        let _ = tcp.set_nodelay(true);
        let mut socket: Socket = Framed::new(
            Batched::new(tls::Io::Plain(tcp)),
            PgWireMessageServerCodec::new(DefaultClient::new(peer, false)),
        );
        if let Some(info) = self.refuse.take() {
            refuse_now(&mut socket, info).await;
            return;
        }
        let noop = Arc::new(NoopHandler);
        let mut cancel_key = None;
        let max = self.opts.max_message_bytes;
        let idle = self.opts.idle_timeout;
        // Bytes read and not yet taken as messages: at most one message
        // (within its phase's limit) and one read more.
        let mut input = BytesMut::with_capacity(INPUT_ROOM);
        // Login must be complete by then.
        let login_by = self.opts.auth_timeout.map(|t| Instant::now() + t);
        // The next message must be whole by then.
        let mut idle_by = idle.map(|t| Instant::now() + t);
        // When the last message was taken: a block's idle time runs from it.
        let mut last_message = Instant::now();
        // The next password message is SCRAM's first.
        let mut sasl_first = true;
        loop {
            let closing = match &*self.stop.borrow() {
                State::Running => None,
                State::Stopping => Some(fatal_info(
                    "57P01",
                    "terminating connection: the server is shutting down",
                )),
                State::Failed(cause) => Some(fatal_info(
                    "58030",
                    format!("terminating connection: the deployment stopped: {cause}"),
                )),
            };
            if let Some(info) = closing {
                send_fatal(&mut socket, info).await;
                return;
            }
            let phase = match socket.state() {
                PgWireConnectionState::AwaitingSslRequest
                | PgWireConnectionState::AwaitingStartup => Phase::Startup,
                PgWireConnectionState::AuthenticationInProgress => {
                    Phase::Auth { first: sasl_first }
                }
                _ => Phase::Ready,
            };
            let frame = match framing::next_frame(&mut input, phase, max) {
                Ok(Some(f)) => f,
                Err(r) => {
                    violation(&mut socket, peer, r).await;
                    return;
                }
                Ok(None) => {
                    let logged_in = phase == Phase::Ready;
                    let by = match (idle_by, login_by) {
                        (Some(i), Some(l)) if !logged_in => Some(i.min(l)),
                        (None, l) if !logged_in => l,
                        (i, _) => i,
                    };
                    // Inside a transaction block, the client has until
                    // then to go on with it.
                    let block_by = self
                        .handler
                        .idle_in_block_timeout(self.opts.idle_in_transaction_timeout)
                        .map(|t| last_message + t);
                    let by = match (by, block_by) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    if input.capacity() - input.len() < INPUT_ROOM / 2 {
                        input.reserve(INPUT_ROOM);
                    }
                    let read = socket.get_mut().read_buf(&mut input);
                    let read = async {
                        match by {
                            Some(t) => tokio::time::timeout_at(t.into(), read).await.ok(),
                            None => Some(read.await),
                        }
                    };
                    let got = tokio::select! {
                        biased;
                        _ = self.stop.changed() => continue,
                        r = read => r,
                    };
                    match got {
                        Some(Ok(1..)) => continue,
                        // Closed by the client, or broken.
                        Some(_) => return,
                        None if !logged_in && login_by.is_some_and(|t| Instant::now() >= t) => {
                            // As PostgreSQL: closed without a word (the
                            // client may not have sent a startup message).
                            framing::log_limited(format_args!(
                                "{peer}: closed: no login within the authentication timeout ({} s)",
                                self.opts.auth_timeout.map_or(0, |t| t.as_secs())
                            ));
                            return;
                        }
                        None if block_by.is_some_and(|t| Instant::now() >= t) => {
                            // Rolled back first: its locks go at once.
                            self.handler.end_block().await;
                            send_fatal(
                                &mut socket,
                                fatal_info(
                                    "25P03",
                                    "terminating connection due to idle-in-transaction timeout",
                                ),
                            )
                            .await;
                            return;
                        }
                        None => {
                            let secs = idle.map_or(0, |t| t.as_secs());
                            send_fatal(
                                &mut socket,
                                fatal_info(
                                    "57P05",
                                    format!(
                                        "terminating connection: idle for longer than the server's idle timeout ({secs} s)"
                                    ),
                                ),
                            )
                            .await;
                            return;
                        }
                    }
                }
            };
            match phase {
                Phase::Startup => {
                    let code = frame.code();
                    if code == framing::SSL_REQUEST && frame.bytes.len() == 8 {
                        if let Some(acceptor) = &self.tls {
                            let Some(s) = start_tls(socket, acceptor, &input, peer, login_by).await
                            else {
                                return;
                            };
                            socket = s;
                            continue;
                        }
                    }
                    if (code == framing::SSL_REQUEST || code == framing::GSS_REQUEST)
                        && frame.bytes.len() == 8
                    {
                        // No TLS here (or already on), no GSS encryption:
                        // the client goes on as it is or gives up.
                        let answer = if code == framing::SSL_REQUEST {
                            PgWireBackendMessage::SslResponse(SslResponse::Refuse)
                        } else {
                            PgWireBackendMessage::GssEncResponse(GssEncResponse::Refuse)
                        };
                        if socket.send(answer).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    // The startup message or a cancel request comes next.
                    socket.set_state(PgWireConnectionState::AwaitingStartup);
                }
                // As PostgreSQL: after an error in the extended protocol,
                // messages up to the next Sync are read and dropped; COPY
                // messages outside a COPY are dropped.
                Phase::Ready
                    if matches!(frame.ty, b'd' | b'c' | b'f')
                        || (matches!(socket.state(), PgWireConnectionState::AwaitingSync)
                            && !matches!(frame.ty, b'S' | b'X')) =>
                {
                    idle_by = idle.map(|t| Instant::now() + t);
                    last_message = Instant::now();
                    continue;
                }
                _ => {}
            }
            if let Err(r) = framing::check(&frame, phase) {
                if r.fatal {
                    violation(&mut socket, peer, r).await;
                    return;
                }
                let extended = matches!(frame.ty, b'P' | b'B' | b'E' | b'D' | b'C');
                let e = PgWireError::UserError(Box::new(ErrorInfo::new(
                    "ERROR".into(),
                    r.code.into(),
                    r.message,
                )));
                if process_error(&mut socket, e, extended).await.is_err() {
                    return;
                }
                idle_by = idle.map(|t| Instant::now() + t);
                last_message = Instant::now();
                continue;
            }
            // Decoded from exactly the message's bytes: whatever the
            // decoder leaves is a layout `check` should have refused.
            let mut bytes = frame.bytes;
            let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
                socket.codec_mut().decode(&mut bytes)
            }));
            let mut msg = match decoded {
                Ok(Ok(Some(m))) if bytes.is_empty() => m,
                Ok(Ok(Some(_))) => {
                    let r = fatal_refusal(format!(
                        "invalid message format: {} bytes after its last field",
                        bytes.len()
                    ));
                    violation(&mut socket, peer, r).await;
                    return;
                }
                Ok(Ok(None)) => {
                    let r = fatal_refusal("invalid message format: shorter than its fields");
                    violation(&mut socket, peer, r).await;
                    return;
                }
                Ok(Err(e)) => {
                    let r = fatal_refusal(format!("invalid message: {e}"));
                    violation(&mut socket, peer, r).await;
                    return;
                }
                Err(_) => {
                    let r = fatal_refusal("invalid message: it could not be decoded");
                    violation(&mut socket, peer, r).await;
                    return;
                }
            };
            match &mut msg {
                PgWireFrontendMessage::Terminate(_) => return,
                // On a connection of its own, answered with nothing (a
                // wrong key, as PostgreSQL does, also with nothing).
                PgWireFrontendMessage::CancelRequest(req) => {
                    self.handler.shared.cancel(req.pid, &req.secret_key);
                    return;
                }
                PgWireFrontendMessage::Startup(s) if s.protocol_number_minor == 1 => {
                    // 3.1 was never a protocol in use: served as 3.0, and
                    // not told of 3.2 (a NegotiateProtocolVersion answers
                    // only a minor version newer than the server's newest).
                    s.protocol_number_minor = 0;
                }
                PgWireFrontendMessage::PasswordMessageFamily(_) => sasl_first = false,
                _ => {}
            }
            if let Some(info) = name_error(&socket, &msg) {
                let e = PgWireError::UserError(Box::new(info));
                if process_error(&mut socket, e, true).await.is_err() {
                    return;
                }
                idle_by = idle.map(|t| Instant::now() + t);
                last_message = Instant::now();
                continue;
            }
            let extended = msg.is_extended_query();
            let flush = matches!(msg, PgWireFrontendMessage::Flush(_));
            let work = AssertUnwindSafe(async {
                process_message(
                    msg,
                    &mut socket,
                    Arc::clone(&auth),
                    Arc::clone(&self.handler),
                    Arc::clone(&self.extended),
                    Arc::clone(&noop),
                    Arc::clone(&noop),
                )
                .await?;
                if flush {
                    // A Flush sends what is answered so far now, not when
                    // the connection next reads: the messages pipelined
                    // after it may wait on a slow call.
                    std::future::poll_fn(|cx| socket.get_mut().poll_send(cx)).await?;
                }
                PgWireResult::Ok(())
            })
            .catch_unwind();
            // A message whose answer cannot be written for the idle timeout
            // (a client that stopped reading: the answers wait in a buffer
            // of `OUT_BATCH` bytes and one answer, then in the socket's)
            // closes the connection; a call in flight still finishes in the
            // deployment.
            let done = match idle {
                Some(t) => tokio::time::timeout(t, work).await.ok(),
                None => Some(work.await),
            };
            let Some(done) = done else {
                return;
            };
            let Ok(done) = done else {
                framing::log_limited(format_args!(
                    "{peer}: closed: processing its message panicked"
                ));
                let info = fatal_info(
                    "XX000",
                    "internal error while processing the message; the server's log says more",
                );
                send_fatal(&mut socket, info).await;
                return;
            };
            if let Err(e) = done {
                if e.is_fatal() {
                    // FATAL: the error, then closed (no ReadyForQuery).
                    let info = match e {
                        PgWireError::InvalidPassword(_) => {
                            let user = socket.metadata().get("user").cloned().unwrap_or_default();
                            fatal_info(
                                "28P01",
                                format!("password authentication failed for user \"{user}\""),
                            )
                        }
                        e => ErrorInfo::from(e),
                    };
                    send_fatal(&mut socket, info).await;
                    return;
                }
                if process_error(&mut socket, e, extended).await.is_err() {
                    return;
                }
            }
            idle_by = idle.map(|t| Instant::now() + t);
            last_message = Instant::now();
            // Logged in: its key (sent in BackendKeyData) now cancels its calls.
            if cancel_key.is_none()
                && matches!(socket.state(), PgWireConnectionState::ReadyForQuery)
            {
                let (pid, key) = socket.pid_and_secret_key();
                cancel_key = Some(CancelKey::register(
                    &self.handler.shared,
                    pid,
                    key,
                    &self.handler.cancel,
                ));
            }
        }
    }
}

/// Answers an SSLRequest with TLS: 'S', then the handshake (done by
/// the login deadline). Returns the connection over TLS, or `None` when it
/// is over: the handshake failed (logged), or the client sent bytes after
/// its SSLRequest before the handshake (they would be taken as sent over
/// TLS: refused as PostgreSQL does), or the connection already speaks TLS.
async fn start_tls(
    mut socket: Socket,
    acceptor: &tokio_rustls::TlsAcceptor,
    input: &BytesMut,
    peer: SocketAddr,
    login_by: Option<Instant>,
) -> Option<Socket> {
    if socket.get_ref().io.is_tls() {
        let r = fatal_refusal("SSLRequest over a connection that already speaks TLS");
        violation(&mut socket, peer, r).await;
        return None;
    }
    if !input.is_empty() {
        let r = fatal_refusal("bytes received after SSLRequest before the TLS handshake");
        violation(&mut socket, peer, r).await;
        return None;
    }
    socket
        .send(PgWireBackendMessage::SslResponse(SslResponse::Accept))
        .await
        .ok()?;
    std::future::poll_fn(|cx| socket.get_mut().poll_send(cx))
        .await
        .ok()?;
    let tcp = match socket.into_parts().io.io {
        tls::Io::Plain(tcp) => tcp,
        tls::Io::Tls(_) => return None,
    };
    let handshake = acceptor.accept(tcp);
    let done = match login_by {
        Some(t) => tokio::time::timeout_at(t.into(), handshake).await.ok(),
        None => Some(handshake.await),
    };
    match done {
        Some(Ok(stream)) => Some(Framed::new(
            Batched::new(tls::Io::Tls(Box::new(stream))),
            PgWireMessageServerCodec::new(DefaultClient::new(peer, true)),
        )),
        Some(Err(e)) => {
            framing::log_limited(format_args!("{peer}: closed: TLS handshake failed: {e}"));
            None
        }
        None => None,
    }
}

fn fatal_refusal(message: impl Into<String>) -> Refusal {
    Refusal {
        fatal: true,
        code: "08P01",
        message: message.into(),
    }
}

/// The ERROR PostgreSQL answers a Parse of a statement name in use (only
/// the unnamed statement may be replaced) or a Describe of a statement or
/// portal that does not exist with; `None` for any other message.
fn name_error(socket: &Socket, msg: &PgWireFrontendMessage) -> Option<ErrorInfo> {
    if !matches!(socket.state(), PgWireConnectionState::ReadyForQuery) {
        return None;
    }
    let error = |code: &str, message: String| ErrorInfo::new("ERROR".into(), code.into(), message);
    match msg {
        PgWireFrontendMessage::Parse(p) => {
            let name = p.name.as_deref().filter(|n| !n.is_empty())?;
            socket.portal_store().get_statement(name)?;
            Some(error(
                "42P05",
                format!("prepared statement \"{name}\" already exists"),
            ))
        }
        PgWireFrontendMessage::Describe(d) => {
            // pgwire keeps the unnamed statement and portal under its
            // default name.
            let key = d.name.as_deref().unwrap_or(DEFAULT_NAME);
            let name = d.name.as_deref().unwrap_or("");
            match d.target_type {
                b'S' if socket.portal_store().get_statement(key).is_none() => Some(error(
                    "26000",
                    format!("prepared statement \"{name}\" does not exist"),
                )),
                b'P' if socket.portal_store().get_portal(key).is_none() => {
                    Some(error("34000", format!("portal \"{name}\" does not exist")))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// A TCP stream whose writes wait in a buffer until the connection next
/// waits for input: the answers to every message the client sent together
/// (pgbench's Bind, Execute and Sync; a pipeline of calls) leave in one
/// `send`, not one per flush the protocol handlers ask for. The buffer is
/// sent on its own once it holds [`OUT_BATCH`] bytes, and before the
/// stream shuts down.
struct Batched {
    io: tls::Io,
    out: Vec<u8>,
    /// Bytes of `out` already sent.
    sent: usize,
}

/// Buffered answer bytes past which a write sends them at once.
const OUT_BATCH: usize = 16 * 1024;

impl Batched {
    fn new(io: tls::Io) -> Batched {
        Batched {
            io,
            out: Vec::with_capacity(1024),
            sent: 0,
        }
    }

    /// Sends what is buffered; pending while the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        // TLS holds written records until flushed; TCP sends at once.
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

impl AsyncRead for Batched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The client waits for these answers before it sends more.
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Batched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.out.len() >= OUT_BATCH {
            ready!(this.poll_send(cx))?;
        }
        this.out.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    /// Deferred: what is buffered goes when the connection next reads,
    /// or after a Flush message ([`Conn::run`]).
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
