//! `islands experiment counters` (the paper's Table 1 / Figure 2), the entry of
//! `islands experiment placement` (see [`crate::placement_cmd`]) and the
//! command-line side of `islands bench ipc` (message round trips).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use islands::deploy::Placement;
use islands::topology::{CpuId, CpuSet, Topology};
use islands_bench::counters::{self, CounterSetup, ExperimentConfig};
use islands_bench::ipc::{self, IpcConfig};

use crate::args::{list, seconds, write_file};

/// Experiments from Section 3 of the paper.
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    experiment: ExperimentCmd,
}

#[derive(Subcommand, Debug)]
enum ExperimentCmd {
    /// Threads increment lock-protected counters: one counter, one per socket or one
    /// per core, under spread, grouped and OS placement (Table 1 and Figure 2).
    Counters(CountersArgs),
    /// The paper's microbenchmark (read-only and update) on one shared-everything island
    /// whose workers are placed spread, grouped or by the OS: the counters experiment with
    /// real transactions.
    Placement(crate::placement_cmd::PlacementArgs),
    /// TPC-C Payment, local only: fine-grained islands vs shared-everything, by active cores
    /// (paper Fig. 7).
    #[command(name = "local-tpcc")]
    LocalTpcc(crate::exp::SweepArgs),
    /// Read / update 10 rows, throughput vs % multisite, for 1ISL … NISL (paper Fig. 9).
    Multisite(crate::exp::SweepArgs),
    /// Cost per transaction vs rows touched (2-100), local and multisite, read and update,
    /// per deployment (paper Fig. 10).
    Cost(crate::exp::SweepArgs),
    /// Time of a 4-row transaction split into execution, transaction management,
    /// communication, locking and logging at 0/50/100% multisite (paper Fig. 11).
    Breakdown(crate::exp::SweepArgs),
    /// 20% multisite, throughput vs active cores, FG / CG / SE (paper Fig. 12).
    Scaling(crate::exp::SweepArgs),
    /// Zipfian skew θ 0-0.99 at 0/20/50% multisite, read and update, fine / coarse / one
    /// island (paper Fig. 13).
    Skew(crate::exp::SweepArgs),
    /// Insert-only clients with private tables: one shared log vs a log per island, log on vs
    /// off, by clients (Xi et al.).
    Inserts(crate::exp::SweepArgs),
    /// The seven sweeps above, local-tpcc to inserts (use --quick for a few minutes), then
    /// report.md beside the results: each plot next to the paper's claim and whether this
    /// machine shows the trend. Run counters and placement on their own.
    All(crate::exp::SweepArgs),
}

#[derive(Args, Debug)]
#[command(
    after_help = "Thread i's counter is the counter of the socket (or core) where grouped \
placement puts thread i; spread runs the same groups scattered across the sockets, as in the \
paper's Figure 2. The lock is a parking_lot::Mutex, one counter per 4 KiB page."
)]
pub struct CountersArgs {
    /// Counter configurations, comma-separated: 1 (one shared counter), per-socket, per-core.
    #[arg(long, value_name = "LIST", default_value = "1,per-socket,per-core")]
    configs: String,
    /// Placements, comma-separated: spread, grouped, os (no pinning).
    #[arg(long, value_name = "LIST", default_value = "spread,grouped,os")]
    placements: String,
    /// Threads (default: one per allowed CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// Seconds per run.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Runs per configuration and placement.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Write the results as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Print which thread goes where (CPU, socket, core, counter) and do not run.
    #[arg(long)]
    plan: bool,
    /// Plan on a described machine (4x6, 2x12x2, sockets=…); only with --plan.
    #[arg(long, value_name = "SPEC")]
    topology: Option<String>,
    /// Use only these CPUs (numactl syntax, e.g. 0-5,12-17).
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// No per-run progress lines.
    #[arg(long)]
    quiet: bool,
}

pub fn run_experiment(args: &ExperimentArgs) -> Result<(), String> {
    match &args.experiment {
        ExperimentCmd::Counters(a) => run_counters(a),
        ExperimentCmd::Placement(a) => crate::placement_cmd::run_placement(a),
        ExperimentCmd::LocalTpcc(a) => crate::exp::run("local-tpcc", a).map(|_| ()),
        ExperimentCmd::Multisite(a) => crate::exp::run("multisite", a).map(|_| ()),
        ExperimentCmd::Cost(a) => crate::exp::run("cost", a).map(|_| ()),
        ExperimentCmd::Breakdown(a) => crate::exp::run("breakdown", a).map(|_| ()),
        ExperimentCmd::Scaling(a) => crate::exp::run("scaling", a).map(|_| ()),
        ExperimentCmd::Skew(a) => crate::exp::run("skew", a).map(|_| ()),
        ExperimentCmd::Inserts(a) => crate::exp::run("inserts", a).map(|_| ()),
        ExperimentCmd::All(a) => crate::exp::run_all(a),
    }
}

fn machine(topology: Option<&str>, cpus: Option<&str>) -> Result<Topology, String> {
    let t = match topology {
        Some(spec) => Topology::described(spec),
        None => Topology::discover(),
    }
    .map_err(|e| e.to_string())?;
    match cpus {
        None => Ok(t),
        Some(list) => {
            let set = if topology.is_some() {
                CpuSet::parse(list).map_err(|e| e.to_string())?
            } else {
                t.parse_cpu_list(list).map_err(|e| e.to_string())?
            };
            if set.is_empty() {
                return Err(format!("--cpus '{list}' names no CPU"));
            }
            t.with_allowed(&set).map_err(|e| e.to_string())
        }
    }
}

fn run_counters(a: &CountersArgs) -> Result<(), String> {
    let setups = list("configs", &a.configs, |p| {
        p.parse::<CounterSetup>().map_err(|e| match e {
            islands::Error::Config(s) => s,
            e => e.to_string(),
        })
    })?;
    let placements = list("placements", &a.placements, |p| {
        p.parse::<Placement>().map_err(|e| e.to_string())
    })?;
    let duration = seconds("duration", a.duration)?;
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if a.topology.is_some() && !a.plan {
        return Err(
            "--topology describes a machine this process does not run on: add --plan to print \
             where the threads would go, or drop --topology to run here"
                .into(),
        );
    }
    let t = machine(a.topology.as_deref(), a.cpus.as_deref())?;
    let cfg = ExperimentConfig {
        setups,
        placements,
        threads: a.threads,
        duration,
        reps: a.reps,
    };
    cfg.validate().map_err(|e| e.to_string())?;
    if a.plan {
        for (i, &setup) in cfg.setups.iter().enumerate() {
            for (j, &placement) in cfg.placements.iter().enumerate() {
                let p =
                    counters::plan(&t, setup, placement, cfg.threads).map_err(|e| e.to_string())?;
                if i + j > 0 {
                    println!();
                }
                print!("{}", p.render(&t));
            }
        }
        for n in counters::machine_notes(&t, &cfg) {
            println!("\nnote: {n}");
        }
        return Ok(());
    }
    let quiet = a.quiet;
    let mut progress = |line: &str| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    let report = counters::run_experiment(&t, &cfg, &mut progress).map_err(|e| e.to_string())?;
    print!("{}", report.render_table());
    if let Some(p) = &a.csv {
        write_file(p, &report.to_csv())?;
    }
    if let Some(p) = &a.json {
        write_file(p, &report.to_json_pretty())?;
    }
    Ok(())
}

/// Message round trips between two pinned threads: a spinning ArrayQueue pair
/// (the floor), the islands' in-process transport (framed messages, batched per
/// destination), crossbeam bounded channels and std mpsc. Uses --duration,
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
    /// channel (crossbeam bounded, blocking), mpsc (std).
    #[arg(long, value_name = "LIST", default_value = "spin,inproc,channel,mpsc")]
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// The shape main.rs gives the command.
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand, Debug)]
    enum Cmd {
        Experiment(ExperimentArgs),
    }

    fn run(argv: &[&str]) -> Result<(), String> {
        let mut full = vec!["islands", "experiment", "counters", "--quiet"];
        full.extend_from_slice(argv);
        let Cmd::Experiment(a) = Cli::try_parse_from(full).unwrap().command;
        run_experiment(&a)
    }

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_input_is_one_error() {
        for (argv, want) in [
            (&["--configs", "per-rack"][..], "per-rack"),
            (&["--duration", "0"], "--duration"),
            (&["--reps", "0"], "--reps"),
            (&["--cpus", "9999"], "9999"),
            (&["--placements", "wild"], "wild"),
            (&["--topology", "4x6"], "--plan"),
            (&["--topology", "4x6", "--plan", "--cpus", "30"], "30"),
        ] {
            let e = run(argv).unwrap_err();
            assert!(e.contains(want), "{argv:?}: {e}");
            assert!(!e.contains('\n'), "{argv:?}: one line: {e}");
        }
    }

    #[test]
    fn plans_on_a_described_machine_and_runs_here() {
        run(&["--topology", "4x6", "--plan"]).unwrap();
        let dir = std::env::temp_dir().join(format!("islands-counters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (csv, json) = (dir.join("c.csv"), dir.join("c.json"));
        run(&[
            "--duration",
            "0.1",
            "--reps",
            "2",
            "--configs",
            "1,per-core",
            "--placements",
            "grouped",
            "--csv",
            csv.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        let csv = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(json["cells"].as_array().unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
