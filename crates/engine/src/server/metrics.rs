//! What `SHOW stats` and `SHOW threads` report, and the same figures in
//! Prometheus's text exposition format (version 0.0.4) over HTTP.
//!
//! Every figure is read when asked: the executors' counters are per worker
//! (each on its own cache line, written only by its worker) and summed per
//! island here; the server's own counters are per server thread (each
//! written only by its thread) and summed here;
//! the threads' CPU time comes from the kernel ([`crate::threads`]).
//!
//! The HTTP side answers `GET /metrics` (and `HEAD`) with HTTP/1.1 and
//! closes the connection; any other path is 404, any other method 405.
//! It is written here, in a few dozen lines on the server's tokio runtime:
//! a scrape needs no more than one request line and one response, and an
//! HTTP server crate would still need the limits kept here, which are
//! what keeps scrapes answered: at most [`MAX_SCRAPES`] connections, the
//! oldest idle one (no request head yet) closed to make room for a new
//! one, and [`HEAD_TIMEOUT`] for each connection in all.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::shared::Shared;
use super::State;
use crate::executor::IslandCounts;
use crate::threads::ThreadInfo;
use crate::wal::WalStats;
use crate::AbortReason;

/// One procedure's calls through the server.
pub(crate) struct ProcFigures {
    pub(crate) name: String,
    pub(crate) committed: u64,
    pub(crate) serialization: u64,
    pub(crate) rollbacks: u64,
    pub(crate) errors: u64,
}

/// One island's figures.
pub(crate) struct IslandFigures {
    /// The island's id in the deployment (a process may run only some).
    pub(crate) id: usize,
    /// Transactions its executors committed (published every 256).
    pub(crate) committed: u64,
    pub(crate) counts: IslandCounts,
    /// Its log's, if it has one.
    pub(crate) log: Option<WalStats>,
    pub(crate) checkpoints: u64,
}

/// Everything `SHOW stats` reports, read at one moment.
pub(crate) struct Figures {
    pub(crate) connections_open: u64,
    pub(crate) connections_accepted: u64,
    pub(crate) connections_refused: u64,
    /// Connections each server thread serves now.
    pub(crate) per_thread: Vec<u64>,
    pub(crate) procs: Vec<ProcFigures>,
    pub(crate) islands: Vec<IslandFigures>,
    /// The transport's system calls: (send, receive).
    pub(crate) syscalls: (u64, u64),
    /// The connections to the islands of other processes.
    pub(crate) peers: Vec<crate::transport::peer::PeerStats>,
    /// Why the deployment stopped, if it failed.
    pub(crate) failure: Option<String>,
}

impl Figures {
    pub(crate) fn read(sh: &Shared) -> Figures {
        let committed = sh.client.committed_per_island();
        Figures {
            connections_open: sh.open.load(Ordering::Relaxed),
            connections_accepted: sh.accepted.load(Ordering::Relaxed),
            connections_refused: sh.refused.load(Ordering::Relaxed),
            per_thread: sh
                .per_thread
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect(),
            procs: sh
                .procs
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let [committed, serialization, rollbacks, errors] = sh.proc_totals(i);
                    ProcFigures {
                        name: p.name().to_string(),
                        committed,
                        serialization,
                        rollbacks,
                        errors,
                    }
                })
                .collect(),
            islands: sh
                .islands
                .iter()
                .map(|island| (island.config().island_id as usize, island))
                .map(|(i, island)| IslandFigures {
                    id: i,
                    committed: committed.get(i).copied().unwrap_or(0),
                    counts: sh.cluster.island_counts(i),
                    log: island.wal().map(|w| w.stats()),
                    checkpoints: island.checkpoint_stats().taken,
                })
                .collect(),
            syscalls: sh.cluster.syscalls(),
            peers: sh.view.peers(),
            failure: sh.client.failure(),
        }
    }

    /// The rows of `SHOW stats`: (scope, counter, value).
    pub(crate) fn rows(&self) -> Vec<(String, String, u64)> {
        let mut rows = Vec::new();
        let mut push = |scope: &str, counter: &str, v: u64| {
            rows.push((scope.to_string(), counter.to_string(), v));
        };
        push("server", "connections_open", self.connections_open);
        push("server", "connections_accepted", self.connections_accepted);
        push("server", "connections_refused", self.connections_refused);
        for (t, &n) in self.per_thread.iter().enumerate() {
            push(&format!("server-thread-{t}"), "connections_open", n);
        }
        for p in &self.procs {
            push(&p.name, "committed", p.committed);
            push(&p.name, "serialization_failures", p.serialization);
            push(&p.name, "rollbacks", p.rollbacks);
            push(&p.name, "errors", p.errors);
        }
        let sum = |f: fn(&IslandFigures) -> u64| self.islands.iter().map(f).sum::<u64>();
        push(
            "deployment",
            "distributed_commits",
            sum(|i| i.counts.distributed_commits),
        );
        push("deployment", "remote_ops", sum(|i| i.counts.remote_ops));
        let distributed = sum(|i| i.counts.distributed_commits);
        let frames = sum(|i| i.counts.frames_out);
        let batches = sum(|i| i.counts.batches_out);
        let bytes = sum(|i| i.counts.bytes_out);
        push("deployment", "frames_out", frames);
        push("deployment", "batches_out", batches);
        push("deployment", "bytes_out", bytes);
        push("deployment", "send_syscalls", self.syscalls.0);
        push("deployment", "recv_syscalls", self.syscalls.1);
        // Per distributed commit, in thousandths (the rows are integers).
        let milli = |n: u64| {
            (n.saturating_mul(1000))
                .checked_div(distributed)
                .unwrap_or(0)
        };
        push(
            "deployment",
            "frames_per_distributed_commit_x1000",
            milli(frames),
        );
        push(
            "deployment",
            "batches_per_distributed_commit_x1000",
            milli(batches),
        );
        push(
            "deployment",
            "bytes_per_distributed_commit",
            bytes.checked_div(distributed).unwrap_or(0),
        );
        push(
            "deployment",
            "syscalls_per_distributed_commit_x1000",
            milli(self.syscalls.0.saturating_add(self.syscalls.1)),
        );
        for f in &self.islands {
            let scope = format!("island-{}", f.id);
            push(&scope, "committed", f.committed);
            push(&scope, "distributed_commits", f.counts.distributed_commits);
            push(&scope, "remote_ops", f.counts.remote_ops);
            for r in AbortReason::ALL {
                push(
                    &scope,
                    &format!("aborts_{}", snake(r.name())),
                    f.counts.aborts[r.index()],
                );
            }
            push(&scope, "user_aborts", f.counts.user_aborts);
            push(&scope, "gave_up", f.counts.gave_up);
            push(&scope, "frames_out", f.counts.frames_out);
            push(&scope, "batches_out", f.counts.batches_out);
            push(&scope, "bytes_out", f.counts.bytes_out);
            push(&scope, "dropped_batches", f.counts.dropped_batches);
            if let Some(st) = &f.log {
                push(&scope, "log_bytes", st.bytes_written);
                push(&scope, "log_batches", st.batches_written);
                push(&scope, "log_syncs", st.syncs);
            }
            push(&scope, "checkpoints", f.checkpoints);
        }
        rows
    }
}

/// `lock-conflict` as `lock_conflict`.
fn snake(name: &str) -> String {
    name.replace('-', "_")
}

/// A label value, escaped as the text format requires.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Writes one metric family: its HELP and TYPE lines, then a sample per
/// (labels, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// Reads one counter of an island's figures (`None`: it has none, as an
/// island without a log has no log bytes).
type IslandFigure = fn(&IslandFigures) -> Option<u64>;

/// The figures and the threads in Prometheus's text format.
pub(crate) fn render(f: &Figures, threads: &[ThreadInfo]) -> String {
    let mut out = String::with_capacity(8192);
    let one = |v: u64| vec![(String::new(), v as f64)];
    family(
        &mut out,
        "islands_deployment_failed",
        "gauge",
        "1 once the deployment stopped on a failure (a log that died), else 0.",
        &one(u64::from(f.failure.is_some())),
    );
    family(
        &mut out,
        "islands_connections_open",
        "gauge",
        "Client connections open now.",
        &one(f.connections_open),
    );
    family(
        &mut out,
        "islands_connections_accepted_total",
        "counter",
        "Client connections accepted.",
        &one(f.connections_accepted),
    );
    family(
        &mut out,
        "islands_connections_refused_total",
        "counter",
        "Client connections refused: too many open.",
        &one(f.connections_refused),
    );
    let per_thread: Vec<(String, f64)> = f
        .per_thread
        .iter()
        .enumerate()
        .map(|(t, &n)| (format!("thread=\"{t}\""), n as f64))
        .collect();
    family(
        &mut out,
        "islands_server_thread_connections_open",
        "gauge",
        "Client connections each server thread serves now.",
        &per_thread,
    );
    let mut calls = Vec::new();
    for p in &f.procs {
        for (outcome, v) in [
            ("committed", p.committed),
            ("serialization_failure", p.serialization),
            ("rollback", p.rollbacks),
            ("error", p.errors),
        ] {
            calls.push((
                format!("procedure=\"{}\",outcome=\"{outcome}\"", label(&p.name)),
                v as f64,
            ));
        }
    }
    family(
        &mut out,
        "islands_procedure_calls_total",
        "counter",
        "Calls through the server by procedure and outcome.",
        &calls,
    );
    let per_island = |get: IslandFigure| -> Vec<(String, f64)> {
        f.islands
            .iter()
            .filter_map(|isl| get(isl).map(|v| (format!("island=\"{}\"", isl.id), v as f64)))
            .collect()
    };
    let island_families: [(&str, &str, IslandFigure); 13] = [
        (
            "islands_commits_total",
            "Transactions committed by the island's executors (published every 256 per executor).",
            |i| Some(i.committed),
        ),
        (
            "islands_distributed_commits_total",
            "Committed transactions the island coordinated with two-phase commit.",
            |i| Some(i.counts.distributed_commits),
        ),
        (
            "islands_remote_ops_total",
            "Operations of other islands' transactions the island served.",
            |i| Some(i.counts.remote_ops),
        ),
        (
            "islands_user_aborts_total",
            "Transactions homed on the island that their procedure rolled back.",
            |i| Some(i.counts.user_aborts),
        ),
        (
            "islands_gave_up_total",
            "Transactions homed on the island given up after their last attempt aborted.",
            |i| Some(i.counts.gave_up),
        ),
        (
            "islands_frames_out_total",
            "Frames (messages) the island's workers sent to other workers through the transport.",
            |i| Some(i.counts.frames_out),
        ),
        (
            "islands_batches_out_total",
            "Batches of frames the island's workers handed to the transport.",
            |i| Some(i.counts.batches_out),
        ),
        (
            "islands_bytes_out_total",
            "Bytes of the batches the island's workers sent (without transport headers).",
            |i| Some(i.counts.bytes_out),
        ),
        (
            "islands_dropped_batches_total",
            "Batches the island's workers dropped: their destination kept refusing them.",
            |i| Some(i.counts.dropped_batches),
        ),
        (
            "islands_log_bytes_total",
            "Bytes the island's log wrote.",
            |i| i.log.as_ref().map(|l| l.bytes_written),
        ),
        (
            "islands_log_batches_total",
            "Batches the island's log wrote.",
            |i| i.log.as_ref().map(|l| l.batches_written),
        ),
        (
            "islands_log_syncs_total",
            "fdatasyncs of the island's log.",
            |i| i.log.as_ref().map(|l| l.syncs),
        ),
        (
            "islands_checkpoints_total",
            "Checkpoints the island took.",
            |i| Some(i.checkpoints),
        ),
    ];
    for (name, help, get) in island_families {
        family(&mut out, name, "counter", help, &per_island(get));
    }
    let mut aborts = Vec::new();
    for isl in &f.islands {
        for r in AbortReason::ALL {
            aborts.push((
                format!("island=\"{}\",reason=\"{}\"", isl.id, snake(r.name())),
                isl.counts.aborts[r.index()] as f64,
            ));
        }
    }
    family(
        &mut out,
        "islands_aborts_total",
        "counter",
        "Attempts of transactions homed on the island aborted by the engine, by reason (each retry counts).",
        &aborts,
    );
    family(
        &mut out,
        "islands_transport_syscalls_total",
        "counter",
        "System calls of the transport between islands, by direction: writes and wake-ups that send, reads and wake-ups that receive (none in-process).",
        &[
            ("direction=\"send\"".to_string(), f.syscalls.0 as f64),
            ("direction=\"recv\"".to_string(), f.syscalls.1 as f64),
        ],
    );
    peer_families(&mut out, &f.peers);
    let thread_labels = |t: &ThreadInfo| {
        let island = t.island.map_or_else(String::new, |i| i.to_string());
        format!(
            "thread=\"{}\",role=\"{}\",island=\"{island}\"",
            label(&t.name),
            t.role.name()
        )
    };
    let mut cpu = Vec::new();
    let mut util = Vec::new();
    for t in threads {
        let l = thread_labels(t);
        if let (Some(u), Some(s)) = (t.user, t.system) {
            cpu.push((format!("{l},mode=\"user\""), u.as_secs_f64()));
            cpu.push((format!("{l},mode=\"system\""), s.as_secs_f64()));
        }
        if let Some(u) = t.utilisation() {
            util.push((l, u));
        }
    }
    family(
        &mut out,
        "islands_thread_cpu_seconds_total",
        "counter",
        "CPU time of each thread of the deployment since it started, by mode (10 ms resolution).",
        &cpu,
    );
    family(
        &mut out,
        "islands_thread_utilisation_ratio",
        "gauge",
        "Each thread's CPU time over its wall time since it started (1 is a core busy all along).",
        &util,
    );
    out
}

/// Most metrics connections open at once.
const MAX_SCRAPES: usize = 16;
/// The longest request head read, and how long a connection may take to
/// send its head and take its answer.
const MAX_HEAD_BYTES: usize = 8192;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// A metrics connection being answered.
struct Scrape {
    task: AbortHandle,
    /// Set once its request head is read: it is answered, not idle.
    asked: Arc<AtomicBool>,
}

/// Answers scrapes on `listener` until the server stops.
///
/// At most [`MAX_SCRAPES`] connections are open at once. One more closes
/// the oldest that has not sent its request head yet (idle connections do
/// not starve scrapes), and is answered 503 only when all of them are
/// being answered. Each connection has [`HEAD_TIMEOUT`] in all.
pub(crate) async fn serve_metrics(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut state: watch::Receiver<State>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    // In the order they were accepted.
    let mut open: VecDeque<Scrape> = VecDeque::with_capacity(MAX_SCRAPES);
    loop {
        let accepted = tokio::select! {
            biased;
            changed = state.changed() => {
                if changed.is_err() || *state.borrow() != State::Running {
                    break;
                }
                continue;
            }
            a = listener.accept() => a,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let Ok((tcp, _)) = accepted else {
            // Out of file descriptors and the like: back off, go on.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        open.retain(|s| !s.task.is_finished());
        if open.len() >= MAX_SCRAPES {
            match open.iter().position(|s| !s.asked.load(Ordering::Relaxed)) {
                Some(i) => {
                    if let Some(idle) = open.remove(i) {
                        idle.task.abort();
                    }
                }
                None => {
                    // A fresh socket takes these few bytes without blocking.
                    let _ = tcp.try_write(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    continue;
                }
            }
        }
        let shared = Arc::clone(&shared);
        let asked = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&asked);
        let task = tasks.spawn(async move {
            let _ = tokio::time::timeout(HEAD_TIMEOUT, answer(tcp, &shared, &flag)).await;
        });
        open.push_back(Scrape { task, asked });
    }
    tasks.abort_all();
}

/// Reads one request head and answers it; sets `asked` once the head is
/// read.
async fn answer(mut tcp: TcpStream, shared: &Shared, asked: &AtomicBool) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tcp.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD_BYTES {
            return respond(&mut tcp, "431 Request Header Fields Too Large", "", false).await;
        }
    }
    asked.store(true, Ordering::Relaxed);
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let body = render(&Figures::read(shared), &shared.threads.snapshot());
            respond(&mut tcp, "200 OK", &body, method == "HEAD").await
        }
        ("GET" | "HEAD", _) => {
            respond(
                &mut tcp,
                "404 Not Found",
                "this server answers GET /metrics only\n",
                method == "HEAD",
            )
            .await
        }
        _ => {
            respond(
                &mut tcp,
                "405 Method Not Allowed",
                "this server answers GET /metrics only\n",
                false,
            )
            .await
        }
    }
}

async fn respond(
    tcp: &mut TcpStream,
    status: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    if !head_only {
        tcp.write_all(body.as_bytes()).await?;
    }
    tcp.shutdown().await
}

/// The figures of `SHOW peers`: one sample per island of another process.
fn peer_families(out: &mut String, peers: &[crate::transport::peer::PeerStats]) {
    use crate::transport::peer::{PeerState, PeerStats};
    let each = |get: fn(&PeerStats) -> f64| -> Vec<(String, f64)> {
        peers
            .iter()
            .map(|p| (format!("island=\"{}\"", p.island), get(p)))
            .collect()
    };
    let both = |get_in: fn(&PeerStats) -> u64, get_out: fn(&PeerStats) -> u64| {
        peers
            .iter()
            .flat_map(|p| {
                [
                    (
                        format!("island=\"{}\",direction=\"in\"", p.island),
                        get_in(p) as f64,
                    ),
                    (
                        format!("island=\"{}\",direction=\"out\"", p.island),
                        get_out(p) as f64,
                    ),
                ]
            })
            .collect::<Vec<_>>()
    };
    family(
        out,
        "islands_peer_up",
        "gauge",
        "1 while the connection to the island (run by another process) is up, else 0.",
        &each(|p| f64::from(u8::from(p.state == PeerState::Up))),
    );
    family(
        out,
        "islands_peer_bytes_total",
        "counter",
        "Bytes received from and sent to the island's process, stream headers included.",
        &both(|p| p.bytes_in, |p| p.bytes_out),
    );
    family(
        out,
        "islands_peer_batches_total",
        "counter",
        "Batches received from and sent to the island's process.",
        &both(|p| p.batches_in, |p| p.batches_out),
    );
    family(
        out,
        "islands_peer_dropped_batches_total",
        "counter",
        "Batches for the island dropped (its connection down or broken).",
        &each(|p| p.dropped as f64),
    );
    family(
        out,
        "islands_peer_dropped_unlinked_batches_total",
        "counter",
        "Of the dropped batches, those sent (shm) while the island was not linked yet, with as many batches as may wait for it already waiting.",
        &each(|p| p.dropped_unlinked as f64),
    );
    family(
        out,
        "islands_peer_dropped_stale_batches_total",
        "counter",
        "Of the dropped batches, those that waited (shm) for the island's link and were meant for an incarnation of it that is gone.",
        &each(|p| p.dropped_stale as f64),
    );
    family(
        out,
        "islands_peer_parked_batches",
        "gauge",
        "Batches waiting (shm) for the island's link now.",
        &each(|p| p.parked as f64),
    );
    family(
        out,
        "islands_peer_reconnects_total",
        "counter",
        "Connections to the island established after the first.",
        &each(|p| p.reconnects as f64),
    );
    family(
        out,
        "islands_peer_refusals_total",
        "counter",
        "Handshakes refused and connections closed for breaking the stream's rules.",
        &each(|p| p.refusals as f64),
    );
    family(
        out,
        "islands_peer_goodbyes_total",
        "counter",
        "Times the island's process said goodbye: it stopped cleanly, its two-phase commits drained, rather than being lost.",
        &each(|p| p.goodbyes as f64),
    );
    family(
        out,
        "islands_peer_incarnation",
        "gauge",
        "The island's incarnation from its last handshake (0: never connected).",
        &each(|p| p.incarnation as f64),
    );
    let heard: Vec<(String, f64)> = peers
        .iter()
        .filter_map(|p| {
            p.last_heard.map(|t| {
                (
                    format!("island=\"{}\"", p.island),
                    t.elapsed().as_secs_f64(),
                )
            })
        })
        .collect();
    family(
        out,
        "islands_peer_last_heard_seconds",
        "gauge",
        "Seconds since a batch or a heartbeat last came from the island.",
        &heard,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label("x\ny"), "x\\ny");
    }

    #[test]
    fn peer_figures_carry_each_island_s_goodbyes_refusals_reconnects_and_parked_batches() {
        use crate::transport::peer::{PeerState, PeerStats};
        let peer = |island, goodbyes, refusals| PeerStats {
            island,
            state: PeerState::Up,
            bytes_in: 10,
            bytes_out: 20,
            batches_in: 1,
            batches_out: 2,
            dropped: 9 * u64::from(island),
            dropped_unlinked: 5 * u64::from(island),
            dropped_stale: 4 * u64::from(island),
            parked: 3 * u64::from(island),
            reconnects: goodbyes,
            goodbyes,
            refusals,
            last_heard: None,
            incarnation: 4,
            error: None,
        };
        let mut out = String::new();
        peer_families(&mut out, &[peer(1, 3, 0), peer(2, 0, 5)]);
        for line in [
            "# TYPE islands_peer_goodbyes_total counter",
            "islands_peer_goodbyes_total{island=\"1\"} 3",
            "islands_peer_goodbyes_total{island=\"2\"} 0",
            "islands_peer_refusals_total{island=\"2\"} 5",
            "islands_peer_reconnects_total{island=\"1\"} 3",
            "islands_peer_dropped_batches_total{island=\"2\"} 18",
            "# TYPE islands_peer_dropped_unlinked_batches_total counter",
            "islands_peer_dropped_unlinked_batches_total{island=\"2\"} 10",
            "islands_peer_dropped_stale_batches_total{island=\"1\"} 4",
            "# TYPE islands_peer_parked_batches gauge",
            "islands_peer_parked_batches{island=\"2\"} 6",
        ] {
            assert!(out.lines().any(|l| l == line), "no '{line}' in:\n{out}");
        }
    }

    #[test]
    fn families_have_help_type_and_samples() {
        let mut out = String::new();
        family(
            &mut out,
            "islands_x_total",
            "counter",
            "X.",
            &[("island=\"0\"".into(), 3.0), (String::new(), 1.5)],
        );
        assert_eq!(
            out,
            "# HELP islands_x_total X.\n# TYPE islands_x_total counter\n\
             islands_x_total{island=\"0\"} 3\nislands_x_total 1.5\n"
        );
    }
}
