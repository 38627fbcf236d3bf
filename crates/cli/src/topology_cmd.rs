//! `islands topology` and `islands plan`: show the machine and what a
//! deployment would do on it, without running anything.

use std::path::PathBuf;

use clap::Args;
use islands::cc::CcKind;
use islands::deploy::{self, DeploySpec, Islands, Placement};
use islands::topology::{CpuSet, Topology};
use islands::wal::Durability;

/// Options naming the machine, shared by both commands.
#[derive(Args, Debug, Clone)]
pub struct MachineArgs {
    /// Use a described machine instead of this one: SOCKETSxCORES (4x6),
    /// SOCKETSxCORESxTHREADS (2x12x2), or key=value pairs
    /// sockets=2,numa=1,l3=1,cores=12,threads=2 (numa and l3 per socket, cores
    /// per L3, threads per core; each defaults to 1).
    #[arg(long, value_name = "SPEC")]
    pub topology: Option<String>,

    /// Use only these CPUs (numactl syntax, e.g. 0-5,12-17), as if the process
    /// were started under `taskset -c`. Default: the CPUs this process may use.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
}

impl MachineArgs {
    fn load(&self) -> Result<Topology, String> {
        let t = match &self.topology {
            Some(spec) => Topology::described(spec),
            None => Topology::discover(),
        }
        .map_err(|e| e.to_string())?;
        match &self.cpus {
            Some(list) => {
                let set = CpuSet::parse(list).map_err(|e| e.to_string())?;
                if set.is_empty() {
                    return Err(format!("--cpus '{list}' names no CPU"));
                }
                t.with_allowed(&set).map_err(|e| e.to_string())
            }
            None => Ok(t),
        }
    }
}

/// Show the machine's topology as a tree (and optionally as an SVG picture).
#[derive(Args, Debug)]
pub struct TopologyArgs {
    #[command(flatten)]
    pub machine: MachineArgs,

    /// Also write an SVG picture of the machine to FILE (sockets, L3 domains,
    /// cores and CPU ids; islands coloured when --islands is given).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// Colour the islands of this deployment in the SVG and print its plan:
    /// 1, per-socket, per-numa, per-l3, per-core, a number N, or CPU lists
    /// such as "0-5;6-11".
    #[arg(long, value_name = "LABEL", allow_negative_numbers = true)]
    pub islands: Option<String>,

    /// Placement of the --islands deployment: grouped, spread or os.
    #[arg(long, value_name = "P", default_value = "grouped")]
    pub placement: String,
}

/// Print what a deployment would do (cores, NUMA node, sites, log per island)
/// without running it.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// How many islands, of what unit: 1 (shared-everything: one island for all
    /// allowed cores), per-socket, per-numa, per-l3, per-core, a number N (N
    /// islands of equal size, each as compact as possible), or explicit CPU
    /// lists, one per island, separated by ';' ("0-5;6-11"; a single CPU as a
    /// single island is "3;"). Required unless --config gives it.
    #[arg(long, value_name = "LABEL", allow_negative_numbers = true)]
    pub islands: Option<String>,

    /// grouped (topology-aware, the default): an island's cores as close as
    /// possible; spread: cores dealt round-robin across sockets; os: no pinning.
    #[arg(long, value_name = "P")]
    pub placement: Option<String>,

    /// Worker threads per island. Default: one per core of the island.
    #[arg(long, value_name = "N")]
    pub workers: Option<u32>,

    /// Number of sites (warehouses, key ranges) the data is divided into; each
    /// island gets a contiguous range. Default: one per core of the deployment.
    #[arg(long, value_name = "N")]
    pub sites: Option<u32>,

    #[command(flatten)]
    pub machine: MachineArgs,

    /// A TOML deployment file ([deployment] islands, placement,
    /// workers_per_island, sites, cc, durability, log_dir, and optional
    /// [[island]] cpus entries). Command-line options override it.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

    /// Concurrency control of every island. Default: none for a one-worker
    /// island (one owner, no locks), occ otherwise.
    #[arg(long, value_name = "NAME")]
    pub cc: Option<String>,

    /// Durability mode of every island's log: sync, async or off. Default: sync, or
    /// what --config says (`islands bench`, a benchmark, defaults to off: give the
    /// durability in the file or on both command lines for them to agree).
    #[arg(long, value_name = "NAME")]
    pub durability: Option<String>,

    /// Base directory of the logs; island i logs to DIR/island-i. Default: islands-data.
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
}

pub fn run_topology(args: &TopologyArgs) -> Result<(), String> {
    let t = args.machine.load()?;
    // Checked even without --islands, so a typo is not silently ignored.
    let placement: Placement = args
        .placement
        .parse()
        .map_err(|e: deploy::DeployError| e.to_string())?;
    print!("{}", t.render_tree());
    let plan = match &args.islands {
        Some(label) => {
            let mut spec = DeploySpec::new(Islands::parse(label).map_err(|e| e.to_string())?);
            spec.placement = placement;
            let p = deploy::plan(&t, &spec).map_err(|e| e.to_string())?;
            println!();
            print!("{}", p.render());
            Some(p)
        }
        None => None,
    };
    if let Some(path) = &args.svg {
        std::fs::write(
            path,
            t.render_svg(plan.as_ref().map(|p| p.marks()).as_ref()),
        )
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

pub fn run_plan(args: &PlanArgs) -> Result<(), String> {
    let t = args.machine.load()?;
    let spec = plan_spec(args)?;
    let p = deploy::plan(&t, &spec).map_err(|e| e.to_string())?;
    check_runnable(&p)?;
    print!("{}", p.render());
    Ok(())
}

/// The names a plan shows are the ones `islands bench` accepts: deploy keeps
/// them as text, so a typo (`--cc 2pl`, `durability = "sometimes"`) would
/// otherwise be printed as if it could run.
fn check_runnable(p: &deploy::Plan) -> Result<(), String> {
    for ip in p.islands() {
        let cc: CcKind = ip.cc.parse()?;
        ip.durability
            .parse::<Durability>()
            .map_err(|e| e.to_string())?;
        islands::island::check_cc_workers(cc, ip.workers as usize)
            .map_err(|e| format!("island {}: {e}", ip.id))?;
    }
    Ok(())
}

/// The spec from --config, overridden by the command-line options.
fn plan_spec(args: &PlanArgs) -> Result<DeploySpec, String> {
    let from_cli = args
        .islands
        .as_deref()
        .map(Islands::parse)
        .transpose()
        .map_err(|e| e.to_string())?;
    let mut spec = match (&args.config, from_cli) {
        (Some(path), islands) => {
            let mut s = DeploySpec::from_toml_file(path).map_err(|e| e.to_string())?;
            if let Some(i) = islands {
                s.islands = i;
            }
            s
        }
        (None, Some(islands)) => DeploySpec::new(islands),
        (None, None) => {
            return Err(
                "say how many islands: --islands 1|per-socket|per-l3|per-core|N|\"0-5;6-11\" (or --config FILE.toml)"
                    .to_string(),
            )
        }
    };
    if let Some(p) = &args.placement {
        spec.placement = p.parse::<Placement>().map_err(|e| e.to_string())?;
    }
    if args.workers.is_some() {
        spec.workers_per_island = args.workers;
    }
    if args.sites.is_some() {
        spec.sites = args.sites;
    }
    if args.cc.is_some() {
        spec.cc.clone_from(&args.cc);
    }
    if let Some(d) = &args.durability {
        spec.durability.clone_from(d);
    }
    if let Some(dir) = &args.log_dir {
        spec.log_dir.clone_from(dir);
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    /// The shape main.rs gives these commands.
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand, Debug)]
    enum Cmd {
        Topology(TopologyArgs),
        Plan(PlanArgs),
    }

    fn plan_args(argv: &[&str]) -> PlanArgs {
        let mut full = vec!["islands", "plan"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full).unwrap().command {
            Cmd::Plan(a) => a,
            Cmd::Topology(_) => unreachable!(),
        }
    }

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn options_override_the_config_file() {
        let path = std::env::temp_dir().join(format!("islands-plan-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[deployment]\nislands = \"per-socket\"\nplacement = \"spread\"\nsites = 240\ncc = \"occ\"\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let spec = plan_spec(&plan_args(&["--config", p])).unwrap();
        assert_eq!(spec.islands, Islands::PerSocket);
        assert_eq!(spec.placement, Placement::Spread);
        assert_eq!(spec.sites, Some(240));
        let spec = plan_spec(&plan_args(&[
            "--config",
            p,
            "--islands",
            "per-core",
            "--placement",
            "grouped",
            "--sites",
            "48",
            "--workers",
            "1",
            "--cc",
            "none",
            "--durability",
            "off",
            "--log-dir",
            "/x",
        ]))
        .unwrap();
        assert_eq!(spec.islands, Islands::PerCore);
        assert_eq!(spec.placement, Placement::Grouped);
        assert_eq!(spec.sites, Some(48));
        assert_eq!(spec.workers_per_island, Some(1));
        assert_eq!(spec.cc.as_deref(), Some("none"));
        assert_eq!(spec.durability, "off");
        assert_eq!(spec.log_dir, PathBuf::from("/x"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for argv in [
            &["--islands", "25", "--topology", "4x6"][..],
            &["--islands", "0-5;4-9", "--topology", "4x6"],
            &["--islands", "0-3", "--topology", "1x2"],
            &["--islands", "per-rack"],
            &["--islands", "2", "--topology", "4x"],
            &["--islands", "2", "--placement", "scatter"],
            &["--islands", "2", "--topology", "4x6", "--cpus", "30"],
            &["--islands", "2", "--sites", "0"],
            &["--islands", "2", "--workers", "0"],
            &["--config", "/nonexistent/islands.toml"],
            &[],
        ] {
            let err = run_plan(&plan_args(argv)).unwrap_err();
            assert!(!err.is_empty() && !err.contains('\n'), "{argv:?}: {err}");
        }
        assert!(Cli::try_parse_from(["islands", "plan", "--workers", "many"]).is_err());
    }

    #[test]
    fn a_plan_names_what_no_run_could_do() {
        // What `islands bench` refuses, a plan must not print as if it would run.
        for (argv, want) in [
            (
                &["--islands", "2", "--topology", "4x6", "--cc", "bogus"][..],
                "'bogus'",
            ),
            (
                &[
                    "--islands",
                    "2",
                    "--topology",
                    "4x6",
                    "--durability",
                    "sometimes",
                ],
                "'sometimes'",
            ),
            (
                &[
                    "--islands",
                    "2",
                    "--topology",
                    "4x6",
                    "--cc",
                    "none",
                    "--workers",
                    "2",
                ],
                "'none' needs exactly one worker",
            ),
            (
                &["--islands", "2", "--topology", "4x6", "--cpus", ""],
                "--cpus ''",
            ),
            (&["--islands=-1", "--topology", "4x6"], "at least 1"),
            (&["--islands", "-1", "--topology", "4x6"], "at least 1"),
        ] {
            let args = Cli::try_parse_from(["islands", "plan"].iter().chain(argv))
                .map_err(|e| e.to_string());
            let err = match args {
                Ok(Cli {
                    command: Cmd::Plan(a),
                }) => run_plan(&a).unwrap_err(),
                Ok(_) => unreachable!(),
                Err(e) => e,
            };
            assert!(err.contains(want), "{argv:?}: {err}");
        }
        // A config file's names are checked the same way.
        let path =
            std::env::temp_dir().join(format!("islands-plan-cc-{}.toml", std::process::id()));
        std::fs::write(&path, "[deployment]\nislands = 2\ncc = \"2pl\"\n").unwrap();
        let err = run_plan(&plan_args(&[
            "--topology",
            "4x6",
            "--config",
            path.to_str().unwrap(),
        ]))
        .unwrap_err();
        assert!(err.contains("'2pl'"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn topology_checks_the_placement_without_islands() {
        let args = match Cli::try_parse_from([
            "islands",
            "topology",
            "--topology",
            "2x2",
            "--placement",
            "wild",
        ])
        .unwrap()
        .command
        {
            Cmd::Topology(a) => a,
            Cmd::Plan(_) => unreachable!(),
        };
        let err = run_topology(&args).unwrap_err();
        assert!(err.contains("'wild'"), "{err}");
    }

    #[test]
    fn topology_writes_an_svg() {
        let path = std::env::temp_dir().join(format!("islands-topo-{}.svg", std::process::id()));
        let args = match Cli::try_parse_from([
            "islands",
            "topology",
            "--topology",
            "2x4",
            "--islands",
            "per-core",
            "--svg",
            path.to_str().unwrap(),
        ])
        .unwrap()
        .command
        {
            Cmd::Topology(a) => a,
            Cmd::Plan(_) => unreachable!(),
        };
        run_topology(&args).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("island 7: cpus 7"), "{svg}");
        std::fs::remove_file(&path).unwrap();
    }
}
