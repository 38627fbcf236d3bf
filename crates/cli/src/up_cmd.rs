//! `islands up`: runs a deployment as processes, one `islands island` child
//! per island, until SIGINT or SIGTERM.
//!
//! Each child is this binary run as `islands island --id K`; it plans the
//! deployment itself and pins its own executors. `up` waits for every
//! child's ready line and then prints one line of its own. A child that
//! dies after it was ready is reported (island, exit status) and restarted
//! without `--init`: it recovers its directory and rejoins its peers. A
//! child that dies before it was ever ready (refused options, a directory
//! it cannot recover) stops them all. On SIGINT or SIGTERM every child gets
//! SIGTERM and `up` waits for all of them; its exit code is 0 only if each
//! stopped cleanly. Each child gets PR_SET_PDEATHSIG (SIGTERM), so a killed
//! `up` leaves no island behind.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::Duration;

use clap::Args;
use islands::Error;

use crate::serve_cmd::{self, DataSetArgs};

#[derive(Args, Clone)]
pub struct UpArgs {
    /// The deployment file; it must run islands as processes (`transport`, `id`
    /// and `secret_file` or `secret_env` in [deployment]).
    #[arg(long, value_name = "FILE.toml")]
    config: PathBuf,
    /// The deployment's data directory (served.toml and island-K/). Default:
    /// log_dir in --config, else ./islands-data.
    #[arg(long, visible_alias = "data-dir", value_name = "DIR")]
    data: Option<PathBuf>,
    /// The base address: island K listens on its port + K, unless the deployment
    /// file gives it its own (`listen` in its [[island]] entry).
    #[arg(long, default_value = islands::server::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Durability of every island: sync, async or off (default: the file's).
    #[arg(long)]
    durability: Option<String>,
    /// Plan for a described machine instead of this one (see `islands island
    /// --topology`); executors are not pinned.
    #[arg(long, value_name = "SPEC")]
    topology: Option<String>,
    #[command(flatten)]
    data_set: DataSetArgs,
    /// Further options for every `islands island` child, after `--` (server
    /// options: --password-file, --max-connections, --tls-cert, ...).
    #[arg(last = true, value_name = "ISLAND OPTIONS")]
    island_args: Vec<String>,
}

/// What the children's reader threads and the signal handler report.
enum Event {
    /// Child `island` of start `start` printed its ready line.
    Ready {
        island: usize,
        start: u64,
    },
    Signal,
}

/// One island's child process.
struct Island {
    child: Option<Child>,
    /// Counts the starts, so a ready line of an earlier start is not taken
    /// for the current one's.
    start: u64,
    ready: bool,
    addr: SocketAddr,
}

/// How long a stop waits for the children before it kills them.
const STOP_WAIT: Duration = Duration::from_secs(60);

pub fn run(a: &UpArgs) -> Result<bool, Error> {
    let (spec, named) = serve_cmd::process_spec(&a.config, a.data.as_ref(), a.durability.as_ref())?;
    let topology = match &a.topology {
        Some(t) => islands::topology::Topology::described(t)
            .map_err(|e| Error::Config(format!("--topology {t}: {e}")))?,
        None => {
            islands::topology::Topology::discover().map_err(|e| Error::Config(e.to_string()))?
        }
    };
    let n = islands::deploy::plan(&topology, &spec)?.islands().len();
    let dir = spec.log_dir.clone();
    if let Some(name) = &a.data_set.init {
        // Written once, before any child starts, so that the children only
        // read it; each child checks its own directory is empty.
        let b = serve_cmd::init_builtin(&a.data_set, name)?;
        for k in 0..n {
            let own = islands::api::open::island_dir(&dir, k);
            if !serve_cmd::is_empty_dir(&own)? {
                return Err(Error::Config(format!(
                    "--init {name}: island {k}'s directory {} is not empty; --init loads a new \
                     database into empty directories only (leave --init out to recover them)",
                    own.display()
                )));
            }
        }
        let mut placed = spec.clone();
        b.place(&mut placed)?;
        serve_cmd::record_data_set(&placed, &dir, &b, a.topology.as_deref())?;
    } else {
        serve_cmd::recorded_builtin(&a.data_set, &dir, "islands up --init")?;
    }
    let mut islands = Vec::with_capacity(n);
    for k in 0..n {
        let k16 = u16::try_from(k)
            .map_err(|_| Error::Config(format!("{n} islands: at most 65536 run as processes")))?;
        islands.push(Island {
            child: None,
            start: 0,
            ready: false,
            addr: serve_cmd::island_listen(&named, a.listen, k16)?,
        });
    }
    let (tx, rx) = channel::<Event>();
    let signal = tx.clone();
    ctrlc::set_handler(move || {
        let _ = signal.send(Event::Signal);
    })
    .map_err(|e| Error::Config(format!("cannot handle SIGINT/SIGTERM: {e}")))?;
    for k in 0..n {
        if let Err(e) = spawn(a, &mut islands, k, a.data_set.init.is_some(), &tx) {
            stop_all(&mut islands);
            return Err(e);
        }
    }
    let mut all_ready = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Signal) => break,
            Ok(Event::Ready { island, start }) => {
                if islands[island].start == start {
                    islands[island].ready = true;
                }
                if !all_ready && islands.iter().all(|i| i.ready) {
                    all_ready = true;
                    let addrs: Vec<String> = islands
                        .iter()
                        .enumerate()
                        .map(|(k, i)| format!("island {k} on {}", i.addr))
                        .collect();
                    println!(
                        "islands up: ready: {} ({n} islands; data {})",
                        addrs.join(", "),
                        dir.display()
                    );
                    let _ = std::io::stdout().flush();
                } else if all_ready {
                    eprintln!("islands up: island {island} is ready again");
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        for k in 0..n {
            let Some(status) = exited(&mut islands[k]) else {
                continue;
            };
            eprintln!("islands up: island {k} exited ({})", describe(status));
            if !islands[k].ready {
                eprintln!(
                    "islands up: island {k} stopped before it was ready: stopping every island"
                );
                stop_all(&mut islands);
                return Ok(false);
            }
            eprintln!("islands up: restarting island {k} (it recovers its directory)");
            islands[k].ready = false;
            if let Err(e) = spawn(a, &mut islands, k, false, &tx) {
                stop_all(&mut islands);
                return Err(e);
            }
        }
    }
    eprintln!("islands up: stopping every island");
    Ok(stop_all(&mut islands))
}

/// The exit status of island `i`'s child if it exited (and forgets it).
fn exited(i: &mut Island) -> Option<ExitStatus> {
    let status = i.child.as_mut()?.try_wait().ok()??;
    i.child = None;
    Some(status)
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => s.to_string(),
    }
}

/// Starts island `k`'s child; a thread reads its stdout, reports its ready
/// line and passes every other line on to stderr.
fn spawn(
    a: &UpArgs,
    islands: &mut [Island],
    k: usize,
    init: bool,
    tx: &Sender<Event>,
) -> Result<(), Error> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Config(format!("cannot find this program to run islands: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("island")
        .arg("--id")
        .arg(k.to_string())
        .arg("--config")
        .arg(&a.config)
        .arg("--listen")
        .arg(islands[k].addr.to_string());
    if let Some(d) = &a.data {
        cmd.arg("--data").arg(d);
    }
    if let Some(d) = &a.durability {
        cmd.arg("--durability").arg(d);
    }
    if let Some(t) = &a.topology {
        cmd.arg("--topology").arg(t);
    }
    if init {
        cmd.args(a.data_set.to_args());
    }
    cmd.args(&a.island_args);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes one system call (prctl), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Config(format!("cannot start island {k}: {e}")))?;
    islands[k].start += 1;
    let start = islands[k].start;
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        let ready = format!("islands island {k}: ready on ");
        std::thread::Builder::new()
            .name(format!("up-island-{k}"))
            .spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if line.starts_with(&ready) {
                        let _ = tx.send(Event::Ready { island: k, start });
                    }
                    eprintln!("{line}");
                }
            })
            .map_err(|e| Error::Config(format!("cannot start a thread: {e}")))?;
    }
    islands[k].child = Some(child);
    Ok(())
}

/// Sends SIGTERM to every child and waits for each (killing those that take
/// longer than [`STOP_WAIT`]); true if each stopped cleanly (exit code 0).
fn stop_all(islands: &mut [Island]) -> bool {
    for i in islands.iter() {
        if let Some(c) = &i.child {
            let pid = rustix::process::Pid::from_child(c);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    let deadline = std::time::Instant::now() + STOP_WAIT;
    let mut clean = true;
    for (k, i) in islands.iter_mut().enumerate() {
        let Some(mut c) = i.child.take() else {
            continue;
        };
        let status = loop {
            match c.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    eprintln!("islands up: island {k} did not stop in time: killing it");
                    let _ = c.kill();
                    break c.wait().ok();
                }
                Err(_) => break None,
            }
        };
        match status {
            Some(s) if s.success() => {}
            Some(s) => {
                eprintln!("islands up: island {k} stopped with {}", describe(s));
                clean = false;
            }
            None => clean = false,
        }
    }
    clean
}
