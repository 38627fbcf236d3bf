//! `islands`: the command-line tool.

mod topology_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// An in-memory OLTP engine deployed as hardware islands.
#[derive(Parser, Debug)]
#[command(name = "islands", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the machine's topology: sockets, NUMA nodes, L3 domains, cores, CPUs.
    Topology(topology_cmd::TopologyArgs),
    /// Print what a deployment would do, without running it.
    Plan(topology_cmd::PlanArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Topology(args) => topology_cmd::run_topology(args),
        Command::Plan(args) => topology_cmd::run_plan(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
