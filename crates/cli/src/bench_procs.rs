//! `islands bench --processes`: one OS process per island, joined by `uds`
//! or `shm`, and one report merged from theirs.
//!
//! The parent plans the run as an in-process run would, then writes a run
//! directory (private to its user): a deployment file naming the id, the
//! transport, the secret file (mode 0600, random) and the run directory
//! (sockets, shared memory, and the logs unless `--log-dir` says where),
//! and starts this program once per island with the same arguments and a
//! hidden `--island-process K --run-dir DIR`. Each child plans the same
//! deployment, opens its own island through the library (`api::open`, as
//! `islands island` does), joins its peers with
//! [`islands::transport::join::for_process`], loads its part of the data,
//! and prints its ready line once every peer's connection is up. Once every
//! child is ready the parent writes `go` on each one's stdin: each runs the
//! driver on its own island's executors (pinned to the island's CPUs) for
//! the same warm-up and measured time, and prints its report as one JSON
//! line. The parent merges them ([`Report::merge`]: counts and throughput
//! summed, latency histograms added, traffic summed then divided), prints
//! the merged table and writes `--json`. A child keeps its connections open
//! after its report until the parent closes its stdin, so that no peer still
//! in its measured phase sees an island go down.
//!
//! Children die with the parent (PR_SET_PDEATHSIG). A child that fails (exits
//! before its report) makes the parent stop the others and fail with that
//! child's stderr.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands::deploy::{DeploySpec, Processes};
use islands::executor::{Cluster, ClusterOptions, Member};
use islands::island::{Island, RecoveryReport};
use islands::proc::rng::FastRng;
use islands::proc::{Outcome, Suspend, Workload};
use islands::route::{IslandId, Router};
use islands::topology::CpuId;
use islands::transport::join::{self, Kind, Linked};
use islands::transport::peer::PeerState;
use islands::txn::Txn;
use islands::{Abort, Error};
use islands_bench::driver::{self, run_cluster, DriverConfig, RunError, WorkerSpec};
use islands_bench::ipc;
use islands_bench::progress::DisplayMode;
use islands_bench::report::{HostProbe, Report};

/// The deployment file a run directory holds.
const DEPLOYMENT_FILE: &str = "deployment.toml";
/// The secret file a run directory holds.
const SECRET_FILE: &str = "secret";
/// How long a child waits for its peers' connections once it is loaded.
const CONNECT_WAIT: Duration = Duration::from_secs(120);
/// How long the parent waits for the children to leave once they reported.
const EXIT_WAIT: Duration = Duration::from_secs(60);
/// Bytes of a child's stderr the parent keeps (the end) to show on failure.
const STDERR_KEPT: usize = 64 << 10;

/// A run of one process per island, seen from the parent or from a child.
pub(crate) enum Procs {
    Parent { dir: RunDir, kind: Kind },
    Child { island: usize, processes: Processes },
}

impl Procs {
    /// The deployment id every process of the run uses.
    pub(crate) fn deployment(&self) -> u128 {
        match self {
            Procs::Parent { dir, .. } => dir.deployment,
            Procs::Child { processes, .. } => processes.id,
        }
    }

    /// The run directory: the logs go under it unless `--log-dir` says.
    pub(crate) fn run_dir(&self) -> &Path {
        match self {
            Procs::Parent { dir, .. } => &dir.path,
            Procs::Child { processes, .. } => &processes.run_dir,
        }
    }
}

/// The parent's run directory (see the module documentation), removed with
/// everything in it when dropped.
pub(crate) struct RunDir {
    path: PathBuf,
    deployment: u128,
}

impl RunDir {
    /// A new run directory with a fresh deployment id and secret; its
    /// deployment file comes once the run is planned
    /// ([`RunDir::write_deployment`]).
    pub(crate) fn create() -> Result<RunDir, Error> {
        let path = std::env::temp_dir().join(format!("islands-bench-{}-procs", std::process::id()));
        let io = |what: &str, p: &Path, e: std::io::Error| {
            Error::Io(format!("--processes: cannot {what} {}: {e}", p.display()))
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| io("create", &path, e))?;
        let dir = RunDir {
            path,
            deployment: islands::wal::new_deployment_id(),
        };
        let mut bytes = [0u8; 32];
        let urandom = Path::new("/dev/urandom");
        std::fs::File::open(urandom)
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|e| io("read", urandom, e))?;
        let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let secret_path = dir.path.join(SECRET_FILE);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret_path)
            .and_then(|mut f| f.write_all(secret.as_bytes()))
            .map_err(|e| io("write", &secret_path, e))?;
        Ok(dir)
    }

    /// Writes the deployment file of `islands` islands joined by `kind`.
    fn write_deployment(&self, kind: Kind, islands: usize) -> Result<(), Error> {
        let text = |p: &Path| {
            p.to_str().map(str::to_string).ok_or_else(|| {
                Error::Config(format!(
                    "--processes: the temporary directory {} is not UTF-8 (set TMPDIR)",
                    p.display()
                ))
            })
        };
        let mut d = toml::Table::new();
        d.insert("islands".into(), toml::Value::Integer(islands as i64));
        d.insert("id".into(), format!("{:032x}", self.deployment).into());
        d.insert("transport".into(), kind.name().into());
        d.insert(
            "secret_file".into(),
            text(&self.path.join(SECRET_FILE))?.into(),
        );
        d.insert("run_dir".into(), text(&self.path)?.into());
        let mut file = toml::Table::new();
        file.insert("deployment".into(), toml::Value::Table(d));
        let path = self.path.join(DEPLOYMENT_FILE);
        std::fs::write(&path, file.to_string())
            .map_err(|e| Error::Io(format!("--processes: cannot write {}: {e}", path.display())))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// What the hidden `--island-process K --run-dir DIR` of a child say: its
/// island and the deployment file its parent wrote.
pub(crate) fn child(island: usize, run_dir: &Path) -> Result<Procs, Error> {
    let spec = DeploySpec::from_toml_file(&run_dir.join(DEPLOYMENT_FILE))?;
    let processes = spec.processes.ok_or_else(|| {
        Error::Config(format!(
            "--run-dir {}: its deployment file does not run islands as processes",
            run_dir.display()
        ))
    })?;
    Ok(Procs::Child { island, processes })
}

/// Workers per island, from the run's worker list.
fn per_island(workers: &[WorkerSpec], islands: usize) -> Vec<usize> {
    let mut n = vec![0usize; islands];
    for w in workers {
        n[w.island] += 1;
    }
    n
}

/// A child's island joined to its peers' processes (the peers connect while
/// it loads).
pub(crate) fn link(
    island: usize,
    processes: &Processes,
    opened: &Island,
    workers: &[WorkerSpec],
    islands: usize,
    mailbox_depth: usize,
) -> Result<Linked, Error> {
    let me = IslandId::try_from(island)
        .map_err(|_| Error::Config(format!("--island-process {island} is out of range")))?;
    let w32: Vec<u32> = per_island(workers, islands)
        .iter()
        .map(|&w| w as u32)
        .collect();
    let id = join::Identity {
        deployment: processes.id,
        incarnations: (0..islands)
            .map(|i| if i == island { opened.incarnation() } else { 0 })
            .collect(),
        schema: opened.schema_fingerprint(),
        catalog: 0,
    };
    join::for_process(processes, &w32, id.hello(me, &w32), mailbox_depth)
}

/// Waits until every peer's connection is up (`island` is this child's).
fn wait_connected(linked: &Linked, island: usize) -> Result<(), Error> {
    let end = Instant::now() + CONNECT_WAIT;
    loop {
        let peers: Vec<_> = linked
            .peers()
            .into_iter()
            .filter(|p| usize::from(p.island) != island)
            .collect();
        if let Some(p) = peers.iter().find(|p| p.state == PeerState::Broken) {
            return Err(Error::Io(format!(
                "island {island}: the link to island {} broke: {}",
                p.island,
                p.error.as_deref().unwrap_or("no reason given")
            )));
        }
        let down: Vec<String> = peers
            .iter()
            .filter(|p| p.state != PeerState::Up)
            .map(|p| format!("island {} {:?}", p.island, p.state))
            .collect();
        if down.is_empty() {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(Error::Io(format!(
                "island {island}: peers not connected after {CONNECT_WAIT:?}: {}",
                down.join(", ")
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The line a child prints once it is loaded and connected.
fn ready_line(island: usize) -> String {
    format!("islands bench island {island}: ready")
}

/// What a child prints before its report's JSON, on the same line.
fn report_prefix(island: usize) -> String {
    format!("islands bench island {island}: report ")
}

/// A child's seed: its own, so that islands do not draw the same requests.
fn child_seed(seed: u64, island: usize) -> u64 {
    seed.wrapping_add(island as u64)
}

/// A child's run, once its island is opened, linked and loaded: builds the
/// cluster with the other islands as remote members, says it is ready,
/// waits for `go`, runs the driver on its island's workers, prints its
/// report and waits for the parent to close its stdin.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_child<W: Workload + 'static>(
    island: usize,
    opened: Vec<(Island, RecoveryReport)>,
    linked: Linked,
    workers: &[WorkerSpec],
    islands: usize,
    workload: W,
    dcfg: &DriverConfig,
    router: Arc<dyn Router>,
    mut opts: ClusterOptions,
) -> Result<(), RunError> {
    let counts = per_island(workers, islands);
    let mut opened = opened.into_iter();
    let (local, recovered) = opened
        .next()
        .ok_or_else(|| Error::Config(format!("island {island} was not opened")))?;
    opts.transports = vec![linked.transport(); islands];
    let mut members: Vec<Member> = counts
        .iter()
        .map(|&workers| Member::Remote { workers })
        .collect();
    let slot = members
        .get_mut(island)
        .ok_or_else(|| Error::Config(format!("no island {island} in {islands}")))?;
    *slot = Member::Local(local.clone(), recovered);
    let cl = Cluster::with_members(members, router, opts)?;
    wait_connected(&linked, island)?;
    // Not locked for longer than a line: another thread may print too.
    let said = |line: &str| {
        let mut out = std::io::stdout();
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(|e| Error::Io(format!("island {island}: cannot write to the parent: {e}")))
    };
    said(&ready_line(island))?;
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin
        .read_line(&mut line)
        .map_err(|e| Error::Io(format!("island {island}: cannot read the parent's go: {e}")))?;
    if line.trim() != "go" {
        return Err(Error::Config(format!(
            "island {island}: the parent said {:?} instead of go",
            line.trim()
        ))
        .into());
    }
    let mine: Vec<WorkerSpec> = workers
        .iter()
        .filter(|w| w.island == island)
        .copied()
        .collect();
    let first = workers.iter().position(|w| w.island == island).unwrap_or(0);
    let (cws, _) = driver::cluster_workers(&mine, islands);
    let cfg = DriverConfig {
        seed: child_seed(dcfg.seed, island),
        display: DisplayMode::Quiet,
        ..dcfg.clone()
    };
    let shifted = Shifted {
        inner: workload,
        first,
    };
    let report = run_cluster(&cl, &cws, Arc::new(shifted), &cfg)?;
    let json = serde_json::to_string(&report)
        .map_err(|e| Error::Config(format!("island {island}: its report as JSON: {e}")))?;
    said(&format!("{}{json}", report_prefix(island)))?;
    // The connections stay open until the parent has every report, so that
    // no peer still in its measured phase sees this island go down.
    let mut rest = Vec::new();
    let _ = stdin.read_to_end(&mut rest);
    drop(cl);
    linked.shutdown();
    local.shutdown();
    Ok(())
}

/// A child's events, as its stdout reader sees them.
enum Event {
    Ready(usize),
    Report(usize, String),
    /// Child `k` closed its stdout (it exited, or is about to).
    Closed(usize),
}

/// One child as the parent holds it.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Option<std::thread::JoinHandle<String>>,
    ready: bool,
    report: Option<String>,
    /// Its stdout is closed: it exited, or is about to.
    closed: bool,
}

/// What the parent runs once the run is planned: the children, their
/// barrier, the merge. `workers`: every worker of the deployment (the host
/// probe pairs two of their CPUs); `islands`: how many; `notes`: the
/// parent's notes for the merged report.
pub(crate) fn run_parent(
    dir: &RunDir,
    kind: Kind,
    islands: usize,
    probe_at: Option<(usize, usize)>,
    json: &Option<PathBuf>,
    quiet: bool,
    notes: Vec<String>,
) -> Result<(), RunError> {
    dir.write_deployment(kind, islands)?;
    let (tx, rx) = channel::<Event>();
    let mut procs: Vec<Proc> = Vec::with_capacity(islands);
    for k in 0..islands {
        match spawn(k, &dir.path, &tx) {
            Ok(p) => procs.push(p),
            Err(e) => {
                stop(&mut procs);
                return Err(e.into());
            }
        }
    }
    drop(tx);
    if !quiet {
        eprintln!("[processes] {islands} island processes started, joined by {kind}; loading");
    }
    let probe = || probe_at.and_then(|(a, b)| ipc::probe(a as CpuId, b as CpuId));
    let started = Instant::now();
    wait_for(&mut procs, &rx, |p| p.ready)?;
    if !quiet {
        eprintln!(
            "[processes] every island loaded and connected in {:.1}s: go",
            started.elapsed().as_secs_f64()
        );
    }
    let probe_before = probe();
    let refused = procs.iter_mut().enumerate().find_map(|(k, p)| {
        let s = p.stdin.as_mut()?;
        let e = s.write_all(b"go\n").and_then(|_| s.flush()).err()?;
        Some((k, format!("could not be told to go: {e}")))
    });
    if let Some((k, why)) = refused {
        return Err(fail(&mut procs, k, &why).into());
    }
    wait_for(&mut procs, &rx, |p| p.report.is_some())?;
    let probe_after = probe();
    // Every report is in: the children may leave.
    for p in procs.iter_mut() {
        p.stdin = None;
    }
    let deadline = Instant::now() + EXIT_WAIT;
    let unclean =
        procs
            .iter_mut()
            .enumerate()
            .find_map(|(k, p)| match wait_until(&mut p.child, deadline) {
                Some(s) if s.success() => None,
                Some(s) => Some((k, format!("exited with {} after its report", describe(s)))),
                None => Some((
                    k,
                    format!("did not exit within {EXIT_WAIT:?} after its report"),
                )),
            });
    if let Some((k, why)) = unclean {
        return Err(fail(&mut procs, k, &why).into());
    }
    let mut parts = Vec::with_capacity(islands);
    for (k, p) in procs.iter().enumerate() {
        let text = p.report.as_deref().unwrap_or_default();
        let r = Report::from_json(text).map_err(|e| {
            Error::Config(format!(
                "island {k}'s process reported something that is not a report: {e}"
            ))
        })?;
        parts.push(r);
    }
    let mut report = Report::merge(&parts).map_err(Error::Config)?;
    if let (Some((a, b)), Some(before)) = (probe_at, probe_before) {
        report.host = Some(HostProbe {
            cpus: [a, b],
            round_trip_ns_before: before,
            round_trip_ns_after: probe_after,
        });
    }
    report.notes.push(format!(
        "{islands} processes, one per island, joined by {kind}; each process's own figures are in per_process (--json)"
    ));
    report.notes.extend(notes);
    crate::bench_cmd::publish(&mut report, json.as_deref(), quiet)?;
    Ok(())
}

/// Starts island `k`'s child: this program with the parent's arguments and
/// the hidden child options. Reader threads pass its stdout's lines on as
/// events (others to stderr) and keep the end of its stderr.
fn spawn(k: usize, dir: &Path, tx: &std::sync::mpsc::Sender<Event>) -> Result<Proc, Error> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Config(format!("cannot find this program to run islands: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .arg("--island-process")
        .arg(k.to_string())
        .arg("--run-dir")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes one system call (prctl), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Config(format!("cannot start island {k}'s process: {e}")))?;
    let thread = |name: String| std::thread::Builder::new().name(name);
    let cannot = |e: std::io::Error| Error::Config(format!("cannot start a thread: {e}"));
    let stderr = match child.stderr.take() {
        Some(mut err) => Some(
            thread(format!("bench-island-{k}-err"))
                .spawn(move || {
                    let mut kept = Vec::new();
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = err.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        kept.extend_from_slice(&buf[..n]);
                        if kept.len() > 2 * STDERR_KEPT {
                            kept.drain(..kept.len() - STDERR_KEPT);
                        }
                    }
                    let from = kept.len().saturating_sub(STDERR_KEPT);
                    String::from_utf8_lossy(&kept[from..]).into_owned()
                })
                .map_err(cannot)?,
        ),
        None => None,
    };
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        let (ready, report) = (ready_line(k), report_prefix(k));
        thread(format!("bench-island-{k}-out"))
            .spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if line == ready {
                        let _ = tx.send(Event::Ready(k));
                    } else if let Some(json) = line.strip_prefix(&report) {
                        let _ = tx.send(Event::Report(k, json.to_string()));
                    } else {
                        eprintln!("[island {k}] {line}");
                    }
                }
                let _ = tx.send(Event::Closed(k));
            })
            .map_err(cannot)?;
    }
    let stdin = child.stdin.take();
    Ok(Proc {
        child,
        stdin,
        stderr,
        ready: false,
        report: None,
        closed: false,
    })
}

/// Takes the children's events until `done` holds for every child; a child
/// that closed its stdout before that has failed, and fails the run.
fn wait_for(
    procs: &mut [Proc],
    rx: &Receiver<Event>,
    done: impl Fn(&Proc) -> bool,
) -> Result<(), Error> {
    loop {
        if let Some(k) = procs.iter().position(|p| p.closed && !done(p)) {
            let status = wait_until(&mut procs[k].child, Instant::now() + EXIT_WAIT);
            let why = match status {
                Some(s) => format!("exited with {}", describe(s)),
                None => "closed its output and did not exit".to_string(),
            };
            return Err(fail(procs, k, &why));
        }
        if procs.iter().all(&done) {
            return Ok(());
        }
        match rx.recv() {
            Ok(Event::Ready(k)) => procs[k].ready = true,
            Ok(Event::Report(k, json)) => procs[k].report = Some(json),
            Ok(Event::Closed(k)) => procs[k].closed = true,
            Err(_) => {
                stop(procs);
                return Err(Error::Config(
                    "every island process closed its output before the run ended".into(),
                ));
            }
        }
    }
}

/// Stops every child and returns the error of child `k`'s failure, with its
/// stderr.
fn fail(procs: &mut [Proc], k: usize, why: &str) -> Error {
    stop(procs);
    let err = procs[k]
        .stderr
        .take()
        .and_then(|h| h.join().ok())
        .unwrap_or_default();
    let err = err.trim_end();
    Error::Config(format!(
        "island {k}'s process {why}{}",
        if err.is_empty() {
            String::new()
        } else {
            format!(":\n{err}")
        }
    ))
}

/// Kills every child that has not exited, and reaps them.
fn stop(procs: &mut [Proc]) {
    for p in procs.iter_mut() {
        p.stdin = None;
        if matches!(p.child.try_wait(), Ok(None)) {
            let _ = p.child.kill();
        }
        let _ = p.child.wait();
    }
}

/// The child's exit status once it exits, or `None` past `deadline` (it is
/// then killed).
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => s.to_string(),
    }
}

/// A workload seen by the executors of one island's process: its worker
/// `i` is worker `first + i` of the whole deployment, whose home sites (or
/// warehouses, or home island) the workload was made with.
struct Shifted<W> {
    inner: W,
    first: usize,
}

impl<W: Workload> Workload for Shifted<W> {
    type Req = W::Req;

    fn types(&self) -> Vec<&'static str> {
        self.inner.types()
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut Self::Req) -> usize {
        self.inner.next(self.first + worker, rng, req)
    }

    fn run<'a>(
        &'a self,
        tx: &'a mut Txn,
        req: &'a Self::Req,
    ) -> impl std::future::Future<Output = Result<(), Abort>> + 'a {
        self.inner.run(tx, req)
    }

    fn committed(&self, worker: usize, req: &Self::Req) {
        self.inner.committed(self.first + worker, req)
    }

    fn poll_next(&self, worker: usize, rng: &mut FastRng, req: &mut Self::Req) -> Option<usize> {
        self.inner.poll_next(self.first + worker, rng, req)
    }

    fn finished(&self, worker: usize, req: &mut Self::Req, outcome: Outcome) {
        self.inner.finished(self.first + worker, req, outcome)
    }

    fn max_attempts(&self, req: &Self::Req) -> Option<u32> {
        self.inner.max_attempts(req)
    }

    fn isolates_failures(&self, req: &Self::Req) -> bool {
        self.inner.isolates_failures(req)
    }

    fn idle(&self, worker: usize, waiting: bool) {
        self.inner.idle(self.first + worker, waiting)
    }

    fn busy_again(&self, worker: usize) {
        self.inner.busy_again(self.first + worker)
    }

    fn poll_suspending(&self, worker: usize, req: &mut Self::Req) -> Option<usize> {
        self.inner.poll_suspending(self.first + worker, req)
    }

    fn suspended(&self, req: &Self::Req) -> Option<Suspend> {
        self.inner.suspended(req)
    }

    fn resumable(&self, req: &Self::Req) -> bool {
        self.inner.resumable(req)
    }
}
