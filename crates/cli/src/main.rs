//! `islands`: the command-line tool of the islands OLTP engine.

mod args;
mod bench_cmd;
mod bench_procs;
mod calls_cmd;
mod check_cmd;
mod connect_cmd;
mod exp;
mod ipc_cmd;
mod rebuild_control;
mod recovery;
mod serve_cmd;
mod topology_cmd;
mod tpcc_cmd;
mod up_cmd;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use islands_bench::driver::RunError;

/// islands: an in-memory OLTP engine deployed as hardware islands.
///
/// Shared-nothing database instances (islands), each pinned to a group of cores
/// that communicate cheaply, with two-phase commit across them.
#[derive(Parser)]
#[command(name = "islands", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a benchmark (YCSB, the paper's microbenchmark, TPC-C, message round trips) and report throughput,
    /// latency percentiles, aborts by reason and CPU time.
    Bench(Box<bench_cmd::BenchArgs>),
    /// Serve a deployment over the PostgreSQL wire protocol (psql, pgbench, drivers):
    /// stored procedures of a built-in data set (tpcb, ycsb, tpcc, micro, bank), loaded with
    /// --init into an empty data directory and recovered from it on every later start.
    Serve(Box<serve_cmd::ServeArgs>),
    /// Serve one island of a deployment run as processes (the deployment file's
    /// transport, id and secret_file or secret_env) over the PostgreSQL wire protocol, beside the
    /// other islands' processes: `islands up` starts one per island, or start each
    /// by hand. The island listens on its [[island]] entry's `listen` address, else
    /// on --listen's port + K. With --init WORKLOAD (and its size) the island starts
    /// fresh: its directory DATA/island-K must be empty, it loads its part of the
    /// data set, and DATA/served.toml is written if no island wrote it yet (one
    /// there must name the same data set). Without --init the island recovers its
    /// directory and refuses to start if it holds no database: an island that lost
    /// its directory is never loaded afresh beside loaded peers. A call homed on
    /// another island is answered 0A000 naming that island. See docs/cli.md.
    Island(Box<serve_cmd::IslandArgs>),
    /// Run a deployment as processes: one `islands island` child per island (each
    /// pinned to its island's cores), one line printed once every island is ready,
    /// SIGINT/SIGTERM passed on to every island and waited for (exit code 0 only if
    /// each stopped cleanly). An island that dies after it was ready is reported and
    /// restarted (it recovers); one that dies before it was ever ready stops them
    /// all. With --init the data set is loaded fresh into every island. See docs/cli.md.
    Up(Box<up_cmd::UpArgs>),
    /// Show the machine's topology: sockets, NUMA nodes, L3 domains, cores, CPUs.
    Topology(topology_cmd::TopologyArgs),
    /// Print what a deployment would do, without running it.
    Plan(topology_cmd::PlanArgs),
    /// The seeds' experiments, each ending with the paper's claim and a verdict on this
    /// machine: counters, placement, and the sweeps (CSV, JSON, SVG and PNG) local-tpcc,
    /// multisite, cost, breakdown, scaling, skew, inserts; `all --quick` writes report.md.
    Experiment(exp::ExperimentArgs),
    /// TPC-C tools: check a recovered database's consistency conditions.
    Tpcc(tpcc_cmd::TpccArgs),
    /// Recover a deployment's logs into memory, writing nothing to them, and check the
    /// invariants of the workload that made it (named in its control files): TPC-C's
    /// consistency conditions, micro's and YCSB's rows and check words, every insert of
    /// inserts, and a served tpcb's or bank's sums. Exit code 1 when one fails; 2 when the
    /// log is damaged or not this deployment's.
    Check(check_cmd::CheckArgs),
    /// Repair damaged logs (--truncate-damaged-log): files that are not part of a log are
    /// set aside (moved into its set-aside/ directory), misnamed segments renamed back, and
    /// each island's log is truncated at its damage with later segments set aside; what was
    /// kept, set aside and dropped is listed. Exit code 3 when records were dropped, 0
    /// otherwise.
    Repair(check_cmd::RepairArgs),
}

/// An error's message, with what to do about a damaged log.
fn describe(e: &islands::Error) -> String {
    match e {
        islands::Error::Damaged(_) => format!(
            "{e}\n(`islands repair --log-dir DIR --truncate-damaged-log` cuts the log at the damage, \
             losing every transaction after it, acknowledged or not)"
        ),
        e => e.to_string(),
    }
}

fn main() -> ExitCode {
    // An experiment name that does not exist gets the list of valid ones.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("experiment") {
        if let Some(name) = args.get(2).filter(|n| !n.starts_with('-')) {
            if name != "help" && !exp::known(name) {
                eprintln!("error: {}", exp::unknown(name));
                return ExitCode::from(2);
            }
        }
    }
    let matches = match Cli::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // Clap prints the help alone; say what is wrong first.
            let (path, names) = missing_subcommand(&args);
            eprintln!("error: `{path}` needs a subcommand: {}\n", names.join(", "));
            eprint!("{}", e.render());
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let r = match &cli.command {
        Command::Bench(a) => match bench_cmd::run(a, matches.subcommand_matches("bench")) {
            // The run began and stopped on an error (a log that died): its
            // report is printed; exit 1, as bad input is 2.
            Err(RunError::Stopped { cause, .. }) => {
                eprintln!("error: {cause}");
                return ExitCode::from(1);
            }
            Err(RunError::Engine(e)) => Err(describe(&e)),
            Ok(()) => Ok(()),
        },
        Command::Serve(a) => match serve_cmd::run(a) {
            // The server ran and stopped because a log died: exit 1, as
            // bad input is 2.
            Err(e @ islands::Error::LogFailed(_)) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
            r => r.map_err(|e| describe(&e)),
        },
        Command::Island(a) => match serve_cmd::run_island(a) {
            Err(e @ islands::Error::LogFailed(_)) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
            r => r.map_err(|e| describe(&e)),
        },
        Command::Up(a) => match up_cmd::run(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(describe(&e)),
        },
        Command::Topology(a) => topology_cmd::run_topology(a),
        Command::Plan(a) => topology_cmd::run_plan(a),
        Command::Experiment(a) => exp::run_experiment(a),
        Command::Tpcc(a) => match tpcc_cmd::run(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(describe(&e)),
        },
        Command::Check(a) => match check_cmd::run_check(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(describe(&e)),
        },
        Command::Repair(a) => match check_cmd::run_repair(a) {
            Ok(false) => Ok(()),
            Ok(true) => return ExitCode::from(check_cmd::EXIT_LOG_CUT),
            Err(e) => Err(e.to_string()),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The command that lacks its subcommand (`islands tpcc`) and the names of
/// its subcommands, from the words given.
fn missing_subcommand(args: &[String]) -> (String, Vec<String>) {
    let mut cmd = Cli::command();
    let mut path = vec!["islands".to_string()];
    for word in args.iter().skip(1).filter(|a| !a.starts_with('-')) {
        match cmd.find_subcommand(word) {
            Some(sub) => {
                let sub = sub.clone();
                path.push(sub.get_name().to_string());
                cmd = sub;
            }
            None => break,
        }
    }
    let names = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    (path.join(" "), names)
}
