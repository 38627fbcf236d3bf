//! The command-line side of `islands bench ipc`: message round trips between
//! two pinned threads ([`islands_bench::ipc`]).

use std::path::Path;
use std::time::Duration;

use clap::Args;
use islands::topology::{CpuId, CpuSet, Topology};
use islands_bench::ipc::{self, IpcConfig};

use crate::args::{list, seconds, write_file};

/// Message round trips between two pinned threads: a spinning ArrayQueue pair
/// (the floor), the islands' in-process transport (framed messages, batched per
/// destination), crossbeam bounded channels, std mpsc, a bare shared-memory
/// ring and the shared-memory transport, a bare Unix socket pair (the floor
/// of sockets) and the islands' Unix-socket transport. Uses --duration,
/// --warmup and --json of `islands bench`.
#[derive(Args, Clone, Debug)]
pub struct IpcArgs {
    /// The two CPUs, client then server (default: the first two allowed CPUs).
    #[arg(long, value_name = "A,B")]
    cpus: Option<String>,
    /// Messages per round trip: the client sends N, then waits for N replies.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Transports, comma-separated: spin (two spinning ArrayQueues, the floor), inproc (the
    /// islands' transport: 16-byte frames, one batch per round each way, both sides spinning),
    /// channel (crossbeam bounded, blocking), mpsc (std), shm-ring (two bare rings in a shared
    /// mapping, one record per round, spinning: the floor of shm), shm (two islands joined by
    /// the shared-memory transport under /dev/shm, used as inproc is), socketpair (a bare
    /// UnixStream pair, one write per round each way), uds (the islands' Unix-socket transport:
    /// two islands of one worker in this process, I/O threads, stream headers; reported as a
    /// ratio to socketpair).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "spin,inproc,channel,mpsc,shm-ring,shm,socketpair,uds"
    )]
    transports: String,
    /// Measure exactly N round trips per transport instead of --duration.
    #[arg(long, value_name = "N")]
    round_trips: Option<u64>,
}

pub fn run_ipc(a: &IpcArgs, duration: f64, warmup: f64, json: Option<&Path>) -> Result<(), String> {
    let transports = list("transports", &a.transports, |p| {
        if ipc::TRANSPORTS.contains(&p) {
            Ok(p.to_string())
        } else {
            Err(format!(
                "unknown transport '{p}' (expected {})",
                ipc::TRANSPORTS.join(", ")
            ))
        }
    })?;
    if a.batch == 0 || a.batch > 1_000_000 {
        return Err(format!("--batch {} is outside 1..=1000000", a.batch));
    }
    if a.round_trips == Some(0) {
        return Err("--round-trips must be at least 1".into());
    }
    let duration = seconds("duration", duration)?;
    if !warmup.is_finite() || !(0.0..=1e6).contains(&warmup) {
        return Err(format!("--warmup {warmup} is not a number of seconds"));
    }
    let t = Topology::discover().map_err(|e| e.to_string())?;
    let (ca, cb) = match &a.cpus {
        Some(s) => {
            let ids = s
                .split(',')
                .map(|p| {
                    p.trim()
                        .parse::<CpuId>()
                        .map_err(|_| format!("--cpus '{s}': '{p}' is not a CPU number"))
                })
                .collect::<Result<Vec<CpuId>, String>>()?;
            if ids.len() != 2 {
                return Err(format!("--cpus '{s}' must name exactly two CPUs: A,B"));
            }
            if ids[0] == ids[1] {
                return Err(format!("--cpus '{s}' must name two different CPUs"));
            }
            let set: CpuSet = ids.iter().copied().collect();
            t.check_allowed(&set).map_err(|e| e.to_string())?;
            (ids[0], ids[1])
        }
        None => {
            let allowed = t.allowed_cpus();
            if allowed.len() < 2 {
                return Err(format!(
                    "bench ipc needs two CPUs; this process may use only {allowed}"
                ));
            }
            (allowed.ids()[0], allowed.ids()[1])
        }
    };
    let cfg = IpcConfig {
        cpus: Some((ca, cb)),
        batch: a.batch,
        warmup: Duration::from_secs_f64(warmup),
        duration,
        round_trips: a.round_trips,
    };
    let mut results = Vec::new();
    for name in &transports {
        results.push(ipc::measure(name, &cfg).map_err(|e| e.to_string())?);
    }
    let cost = t.cost(ca, cb).map_or("?", |c| c.name());
    let what = match a.round_trips {
        Some(n) => format!("{n} round trips"),
        None => format!("{} s", duration.as_secs_f64()),
    };
    let header = format!(
        "ipc round trips: client on CPU {ca}, server on CPU {cb} ({cost}); batch {}; {what} per transport after {warmup} s warm-up",
        a.batch
    );
    print!("{}", ipc::render_table(&results, &header));
    if let Some(p) = json {
        let doc = serde_json::json!({
            "client_cpu": ca,
            "server_cpu": cb,
            "cost_class": cost,
            "results": results,
        });
        write_file(
            p,
            &serde_json::to_string_pretty(&doc).expect("the results serialize"),
        )?;
    }
    Ok(())
}
