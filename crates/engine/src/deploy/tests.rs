//! Placement and planning on described machines: 4×6, 8×10, and 2×12 with SMT.

use std::path::PathBuf;

use super::*;
use crate::topology::{CostClass, CpuId, CpuSet, Topology};

const SMT: &str = "sockets=2,l3=1,cores=12,threads=2";
const MACHINES: [&str; 4] = ["4x6", "8x10", SMT, "sockets=2,numa=2,l3=2,cores=3"];

fn topo(spec: &str) -> Topology {
    Topology::described(spec).unwrap()
}

fn spec(label: &str, placement: Placement) -> DeploySpec {
    let mut s = DeploySpec::new(Islands::parse(label).unwrap());
    s.placement = placement;
    s
}

fn plan_of(machine: &str, label: &str, placement: Placement) -> Plan {
    plan(&topo(machine), &spec(label, placement)).unwrap()
}

fn pinned(i: &IslandPlan) -> &CpuSet {
    i.cpus.as_ref().expect("pinned")
}

/// Pinned islands are disjoint and cover exactly the allowed CPUs.
fn assert_partition(t: &Topology, p: &Plan) {
    let mut all = Vec::new();
    for i in p.islands() {
        all.extend(pinned(i).iter());
    }
    let n = all.len();
    let set = CpuSet::from_ids(all);
    assert_eq!(set.len(), n, "islands overlap");
    assert_eq!(
        set,
        t.allowed_cpus(),
        "islands do not cover the allowed CPUs"
    );
}

/// SMT siblings of every core are in the same island.
fn assert_cores_whole(t: &Topology, p: &Plan) {
    for i in p.islands() {
        for cpu in pinned(i).iter() {
            for sibling in t.core_of(cpu).unwrap().cpus.iter() {
                assert!(
                    pinned(i).contains(sibling),
                    "cpu {cpu} without its sibling {sibling}"
                );
            }
        }
    }
}

#[test]
fn grouped_islands_never_cross_a_socket_they_fit_in() {
    for machine in MACHINES {
        let t = topo(machine);
        let cores = t.cores().len();
        let per_socket = t.sockets()[0].cores.len();
        for n in 1..=cores {
            let p = plan(&t, &spec(&n.to_string(), Placement::Grouped)).unwrap();
            assert_eq!(p.islands().len(), n);
            assert_partition(&t, &p);
            assert_cores_whole(&t, &p);
            if !cores.is_multiple_of(n) {
                // Uneven sizes: packing the big islands whole can leave the
                // last one scattered (see grouped_islands_stay_in_one_l3_when_they_fit).
                continue;
            }
            let size = cores / n;
            let sockets = t.sockets().len();
            for i in p.islands() {
                assert_eq!(i.cores, size, "{machine} n={n}");
                // Islands that tile the sockets stay in one; larger ones use
                // whole sockets, as few as possible.
                if per_socket.is_multiple_of(size) {
                    assert_eq!(
                        i.sockets.len(),
                        1,
                        "{machine} n={n}: island {} on {:?}",
                        i.id,
                        i.sockets
                    );
                } else if size.is_multiple_of(per_socket) {
                    assert_eq!(i.sockets.len(), size / per_socket, "{machine} n={n}");
                }
            }
            // As many islands as can fit whole in a socket do.
            if size <= per_socket {
                let whole = p.islands().iter().filter(|i| i.sockets.len() == 1).count();
                assert!(
                    whole >= n.min(sockets * (per_socket / size)),
                    "{machine} n={n}: {}",
                    p.render()
                );
            }
        }
    }
}

#[test]
fn grouped_islands_stay_in_one_l3_when_they_fit() {
    let t = topo("sockets=2,numa=2,l3=2,cores=3");
    let p = plan(&t, &spec("4", Placement::Grouped)).unwrap();
    for i in p.islands() {
        let cpus: Vec<u32> = pinned(i).iter().collect();
        for &a in &cpus {
            for &b in &cpus {
                assert!(
                    t.cost(a, b).unwrap() <= CostClass::SameL3,
                    "island {}: {a},{b}",
                    i.id
                );
            }
        }
    }
    // 4x6 cut into 5: sizes 5,5,5,5,4; only one island can be forced across sockets.
    let p = plan_of("4x6", "5", Placement::Grouped);
    let crossing = p.islands().iter().filter(|i| i.sockets.len() > 1).count();
    assert_eq!(crossing, 1, "{}", p.render());
}

#[test]
fn spread_islands_span_sockets() {
    for machine in MACHINES {
        let t = topo(machine);
        let sockets = t.sockets().len();
        for label in ["per-socket", "1", "2"] {
            let p = plan(&t, &spec(label, Placement::Spread)).unwrap();
            assert_partition(&t, &p);
            assert_cores_whole(&t, &p);
            for i in p.islands() {
                assert_eq!(
                    i.sockets.len(),
                    i.cores.min(sockets),
                    "{machine} {label}: island {} on {:?}",
                    i.id,
                    i.sockets
                );
            }
        }
        // The same islands grouped cross nothing.
        let g = plan(&t, &spec("per-socket", Placement::Grouped)).unwrap();
        assert!(g.islands().iter().all(|i| i.sockets.len() == 1));
    }
}

#[test]
fn per_core_gives_one_core_each_and_covers_all() {
    for machine in MACHINES {
        let t = topo(machine);
        for placement in [Placement::Grouped, Placement::Spread] {
            let p = plan(&t, &spec("per-core", placement)).unwrap();
            assert_eq!(p.islands().len(), t.cores().len());
            assert_partition(&t, &p);
            assert_cores_whole(&t, &p);
            for i in p.islands() {
                assert_eq!(i.cores, 1);
                assert_eq!(pinned(i).len(), t.threads_per_core_max());
                assert_eq!(i.workers, 1);
                assert_eq!(
                    i.cc, "none",
                    "a one-worker island needs no concurrency control"
                );
            }
        }
    }
}

#[test]
fn per_socket_per_l3_per_numa() {
    for machine in MACHINES {
        let t = topo(machine);
        let p = plan(&t, &spec("per-socket", Placement::Grouped)).unwrap();
        assert_eq!(p.islands().len(), t.sockets().len());
        for (i, s) in p.islands().iter().zip(t.sockets()) {
            assert_eq!(pinned(i), &s.cpus);
            assert_eq!(i.workers as usize, s.cores.len());
            assert_eq!(i.cc, "occ");
        }
        let p = plan(&t, &spec("per-l3", Placement::Grouped)).unwrap();
        assert_eq!(p.islands().len(), t.l3_domains().len());
        let p = plan(&t, &spec("per-numa", Placement::Grouped)).unwrap();
        assert_eq!(p.islands().len(), t.numa_nodes().len());
        for (i, n) in p.islands().iter().zip(t.numa_nodes()) {
            assert_eq!(i.numa_node, Some(n.os_id));
            assert_eq!(pinned(i), &n.cpus);
        }
    }
}

#[test]
fn workers_take_cores_in_placement_order() {
    let socket = |t: &Topology, c: CpuId| t.socket_of(c).unwrap();
    // Every pinned island lists each of its CPUs once for its workers.
    for machine in MACHINES {
        let t = topo(machine);
        for label in ["1", "per-socket", "3", "per-core"] {
            for placement in [Placement::Grouped, Placement::Spread] {
                let p = plan(&t, &spec(label, placement)).unwrap();
                for i in p.islands() {
                    let mut order = i.worker_cpus.clone();
                    order.sort_unstable();
                    assert_eq!(order, pinned(i).ids(), "{machine} {label} {placement}");
                }
            }
        }
    }
    // One island on 4x6: spread puts the first 4 workers on 4 sockets (the
    // paper's Figure 3), grouped fills socket 0 before socket 1.
    let t = topo("4x6");
    let spread = plan(&t, &spec("1", Placement::Spread)).unwrap();
    let spread = &spread.islands()[0];
    let sockets: Vec<usize> = (0..8)
        .map(|w| socket(&t, spread.worker_cpu(w).unwrap()))
        .collect();
    assert_eq!(sockets, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    let grouped = plan(&t, &spec("1", Placement::Grouped)).unwrap();
    let grouped = &grouped.islands()[0];
    let sockets: Vec<usize> = (0..8)
        .map(|w| socket(&t, grouped.worker_cpu(w).unwrap()))
        .collect();
    assert_eq!(sockets, vec![0, 0, 0, 0, 0, 0, 1, 1]);
    // More workers than CPUs wrap around.
    assert_eq!(grouped.worker_cpu(24), grouped.worker_cpu(0));
    // SMT: every core gets a worker before any core gets two.
    let smt = topo(SMT);
    let p = plan(&smt, &spec("1", Placement::Grouped)).unwrap();
    let i = &p.islands()[0];
    let core = |w: usize| smt.core_of(i.worker_cpu(w).unwrap()).unwrap().index;
    let mut first: Vec<usize> = (0..24).map(core).collect();
    assert!(first[..12].iter().all(|&c| smt.cores()[c].socket == 0));
    first.sort_unstable();
    assert_eq!(first, (0..24).collect::<Vec<_>>());
    assert_eq!(core(24), core(0), "worker 24 is worker 0's sibling");
    assert_ne!(i.worker_cpu(24), i.worker_cpu(0));
    // Explicit lists: the listed CPUs, cores in order; os: nothing.
    let p = plan(&t, &spec("12-13,20;3;", Placement::Grouped)).unwrap();
    assert_eq!(p.islands()[0].worker_cpus, vec![12, 13, 20]);
    assert_eq!(p.islands()[1].worker_cpus, vec![3]);
    let os = plan(&t, &spec("1", Placement::Os)).unwrap();
    assert!(os.islands()[0].worker_cpus.is_empty());
    assert_eq!(os.islands()[0].worker_cpu(0), None);
}

#[test]
fn os_placement_pins_nothing() {
    let p = plan_of("4x6", "per-socket", Placement::Os);
    assert_eq!(p.islands().len(), 4);
    for i in p.islands() {
        assert_eq!(i.cpus, None);
        assert_eq!(i.cores, 6);
        assert_eq!(i.workers, 6);
        assert_eq!(i.numa_node, None);
    }
    assert!(p.summary().contains("nothing pinned"), "{}", p.summary());
}

#[test]
fn sites_cover_all_contiguously_and_evenly() {
    let t = topo("4x6");
    for (label, sites) in [
        ("per-socket", 240),
        ("per-core", 240),
        ("5", 24),
        ("7", 100),
        ("24", 24),
    ] {
        let mut s = spec(label, Placement::Grouped);
        s.sites = Some(sites);
        let p = plan(&t, &s).unwrap();
        let mut next = 0;
        let lens: Vec<usize> = p.islands().iter().map(|i| i.sites.len()).collect();
        for i in p.islands() {
            assert_eq!(i.sites.start, next);
            assert_eq!(p.sites_of(i.id), i.sites);
            for site in i.sites.clone() {
                assert_eq!(p.island_of_site(site), i.id);
            }
            next = i.sites.end;
        }
        assert_eq!(next, sites);
        assert!(
            lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1,
            "{lens:?}"
        );
    }
    // Default: one site per core.
    assert_eq!(plan_of("4x6", "per-socket", Placement::Grouped).sites(), 24);
}

#[test]
fn explicit_lists() {
    let t = topo("4x6");
    let p = plan(&t, &spec("0-5;6-11;12-13,20", Placement::Grouped)).unwrap();
    assert_eq!(p.islands().len(), 3);
    assert_eq!(pinned(&p.islands()[2]).to_string(), "12-13,20");
    assert_eq!(p.islands()[2].sockets, vec![2, 3]);
    assert_eq!(p.islands()[2].numa_node, Some(2));
    assert_eq!(p.islands()[2].cores, 3);
    // One CPU as one island needs the trailing ';' (a bare "3" means 3 islands).
    assert_eq!(
        Islands::parse("3;").unwrap(),
        Islands::Explicit(vec![CpuSet::parse("3").unwrap()])
    );
    assert_eq!(Islands::parse("3").unwrap(), Islands::Count(3));
    assert!(matches!(
        plan(&t, &spec("0-5", Placement::Spread)),
        Err(DeployError::SpreadExplicit)
    ));
}

#[test]
fn errors() {
    let t = topo("4x6");
    let err = |label: &str| plan(&t, &spec(label, Placement::Grouped)).unwrap_err();
    assert!(matches!(
        err("25"),
        DeployError::TooManyIslands {
            islands: 25,
            cores: 24,
            ..
        }
    ));
    assert!(err("25").to_string().contains("only 24 cores"));
    match err("0-5;24-25") {
        DeployError::IslandCpus {
            island: 1,
            source: TopologyError::NoSuchCpu { cpu: 24, .. },
        } => {}
        e => panic!("{e:?}"),
    }
    match err("0-5;4-9") {
        DeployError::Overlap { a: 0, b: 1, cpus } => assert_eq!(cpus, "4-5"),
        e => panic!("{e:?}"),
    }
    assert!(err("0-5;4-9")
        .to_string()
        .contains("islands 0 and 1 overlap"));
    assert!(matches!(Islands::parse("0"), Err(DeployError::NoIslands)));
    // A negative count is not a CPU list with a missing number.
    for label in ["-1", "-42", " -3 "] {
        let e = Islands::parse(label).unwrap_err();
        assert!(
            matches!(e, DeployError::BadLabel { .. }) && e.to_string().contains("at least 1"),
            "{label}: {e}"
        );
    }
    assert!(matches!(
        Islands::parse("per-rack"),
        Err(DeployError::BadLabel { .. })
    ));
    assert!(matches!(
        Islands::parse("0-5;;6"),
        Err(DeployError::EmptyIsland { island: 1 })
    ));
    assert!(matches!(
        Islands::parse("0-5;x"),
        Err(DeployError::BadLabel { .. })
    ));
    assert!(matches!(
        Islands::parse("5-3;1"),
        Err(DeployError::IslandCpus { island: 0, .. })
    ));
    assert!(matches!(
        "scatter".parse::<Placement>(),
        Err(DeployError::BadPlacement(_))
    ));

    let mut s = spec("per-core", Placement::Grouped);
    s.sites = Some(10);
    assert_eq!(
        plan(&t, &s),
        Err(DeployError::MoreIslandsThanSites {
            islands: 24,
            sites: 10
        })
    );
    s.sites = Some(0);
    assert_eq!(plan(&t, &s), Err(DeployError::NoSites));
    s.sites = None;
    s.workers_per_island = Some(0);
    assert_eq!(plan(&t, &s), Err(DeployError::ZeroWorkers));

    // A CPU that exists but is not allowed.
    let limited = topo("4x6")
        .with_allowed(&CpuSet::parse("0-11").unwrap())
        .unwrap();
    match plan(&limited, &spec("0-5;12-13", Placement::Grouped)).unwrap_err() {
        DeployError::IslandCpus {
            island: 1,
            source: TopologyError::CpuNotAllowed { cpu: 12, .. },
        } => {}
        e => panic!("{e:?}"),
    }
    // Only allowed cores are planned.
    let p = plan(&limited, &spec("per-socket", Placement::Grouped)).unwrap();
    assert_eq!(p.islands().len(), 2);
    assert!(matches!(
        plan(&limited, &spec("13", Placement::Grouped)),
        Err(DeployError::TooManyIslands {
            islands: 13,
            cores: 12,
            ..
        })
    ));
    // Converts into the engine's error.
    let e: crate::Error = DeployError::NoSites.into();
    assert!(matches!(e, crate::Error::Config(_)));
}

#[test]
fn workers_cc_durability_log_dir() {
    let mut s = spec("per-socket", Placement::Grouped);
    s.workers_per_island = Some(2);
    s.cc = Some("2pl-no-wait".to_string());
    s.durability = "async".to_string();
    s.log_dir = PathBuf::from("/tmp/logs");
    let p = plan(&topo("4x6"), &s).unwrap();
    let i = &p.islands()[3];
    assert_eq!(i.workers, 2);
    assert_eq!(i.cc, "2pl-no-wait");
    assert_eq!(i.durability, "async");
    assert_eq!(i.log_dir, PathBuf::from("/tmp/logs/island-3"));
}

#[test]
fn toml_file() {
    let s = DeploySpec::from_toml_str(
        r#"
        [deployment]
        islands = "per-socket"
        placement = "spread"
        workers_per_island = 2
        sites = 240
        cc = "occ"
        durability = "sync"
        log_dir = "/data/islands"
        checkpoint_every_mb = 64
        checkpoint_every_s = 2.5
        "#,
    )
    .unwrap();
    assert_eq!(s.checkpoint_every_mb, Some(64));
    assert_eq!(
        s.checkpoint_every,
        Some(std::time::Duration::from_millis(2500))
    );
    assert_eq!(s.islands, Islands::PerSocket);
    assert_eq!(s.placement, Placement::Spread);
    assert_eq!(s.workers_per_island, Some(2));
    assert_eq!(s.sites, Some(240));
    assert_eq!(s.log_dir, PathBuf::from("/data/islands"));

    let s = DeploySpec::from_toml_str("[deployment]\nislands = 4\n").unwrap();
    assert_eq!(s.islands, Islands::Count(4));
    assert_eq!(s, DeploySpec::new(Islands::Count(4)));

    let s = DeploySpec::from_toml_str("[[island]]\ncpus = \"0-5\"\n[[island]]\ncpus = \"7\"\n")
        .unwrap();
    assert_eq!(s.islands, Islands::parse("0-5;7").unwrap());
    let p = plan(&topo("4x6"), &s).unwrap();
    assert_eq!(pinned(&p.islands()[1]).to_string(), "7");

    for (text, needle) in [
        (
            "[deployment]\nislands = 4\nworkers = 2\n",
            "unknown field `workers`",
        ),
        ("[deploy]\nislands = 4\n", "unknown field `deploy`"),
        (
            "[deployment]\nplacement = \"grouped\"\n",
            "missing `islands`",
        ),
        (
            "[deployment]\nislands = 2\n[[island]]\ncpus = \"0\"\n",
            "not both",
        ),
        ("[deployment]\nislands = 2\nsites = \"many\"\n", "sites"),
        (
            "[[island]]\ncpus = \"0-5\"\ncores = 3\n",
            "unknown field `cores`",
        ),
        ("[deployment\n", "deployment file"),
        (
            "[deployment]\nislands = 2\ncheckpoint_every_s = -1\n",
            "checkpoint_every_s = -1",
        ),
        (
            "[deployment]\nislands = 2\ncheckpoint_every_mb = -1\n",
            "checkpoint_every_mb",
        ),
    ] {
        let e = DeploySpec::from_toml_str(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
    assert!(matches!(
        DeploySpec::from_toml_str("[deployment]\nislands = 4\nplacement = \"x\"\n"),
        Err(DeployError::BadPlacement(_))
    ));
    assert!(matches!(
        DeploySpec::from_toml_str("[[island]]\ncpus = \"\"\n"),
        Err(DeployError::EmptyIsland { island: 0 })
    ));
}

#[test]
fn toml_islands_of_the_wrong_kind_say_what_is_expected() {
    for (value, needle) in [
        ("true", "boolean `true`"),
        ("2.5", "2.5"),
        ("-1", "-1"),
        ("99999999999", "too many islands"),
        ("[1, 2]", "sequence"),
        ("0", "at least 1 island"),
    ] {
        let text = format!("[deployment]\nislands = {value}\n");
        let e = DeploySpec::from_toml_str(&text).unwrap_err().to_string();
        assert!(e.contains(needle), "islands = {value}: {e}");
        assert!(!e.contains("untagged enum"), "islands = {value}: {e}");
    }
    let e = DeploySpec::from_toml_str("[deployment]\nislands = true\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("per-socket"), "names what is expected: {e}");
}

#[test]
fn a_toml_island_entry_is_one_island() {
    // ';' separates islands on the command line; inside one [[island]] entry
    // it would silently make two.
    let e = DeploySpec::from_toml_str("[[island]]\ncpus = \"0-1;2-3\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("island 0") && e.contains("0-1;2-3"), "{e}");
    let e = DeploySpec::from_toml_str("[[island]]\ncpus = \"0\"\n[[island]]\ncpus = \"1;\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("island 1"), "{e}");
}

#[test]
fn render_shows_every_island_and_the_summary() {
    let p = plan_of("4x6", "per-socket", Placement::Grouped);
    let r = p.render();
    let lines: Vec<&str> = r.lines().collect();
    assert_eq!(lines.len(), 6, "{r}");
    assert!(lines[0].starts_with("island  cpus"), "{r}");
    assert!(
        lines[1].starts_with("0       0-5    6      0     0        6        0-5 (6)"),
        "{r}"
    );
    assert_eq!(
        lines[5],
        "4 islands (per-socket) on 4x6 (24 allowed cores), grouped: no island crosses a socket"
    );
    let s = plan_of("4x6", "per-socket", Placement::Spread).summary();
    assert!(
        s.ends_with("every island spans several sockets (up to 4)"),
        "{s}"
    );
}

#[test]
fn plans_on_this_machine() {
    let t = Topology::discover().unwrap();
    for label in ["1", "per-socket", "per-l3", "per-core"] {
        let p = plan(&t, &spec(label, Placement::Grouped)).unwrap();
        assert_partition(&t, &p);
    }
}

#[test]
fn toml_islands_as_processes() {
    let s = DeploySpec::from_toml_str(
        "[deployment]\nid = \"000102030405060708090a0b0c0d0e0f\"\ntransport = \"uds\"\n\
         secret_file = \"/s\"\nrun_dir = \"/run/x\"\n\
         [[island]]\ncpus = \"0\"\n[[island]]\ncpus = \"1\"\n",
    )
    .unwrap();
    let p = s.processes.unwrap();
    assert_eq!(p.id, 0x000102030405060708090a0b0c0d0e0f);
    assert_eq!(p.transport, crate::transport::join::Kind::Uds);
    assert_eq!(
        p.endpoint(1),
        std::path::PathBuf::from("/run/x/island-1.sock")
    );
    let s = DeploySpec::from_toml_str(
        "[deployment]\nid = \"000102030405060708090a0b0c0d0e0f\"\ntransport = \"shm\"\n\
         secret_file = \"/s\"\n[[island]]\ncpus = \"0\"\nendpoint = \"/a.sock\"\n\
         [[island]]\ncpus = \"1\"\nendpoint = \"/b.sock\"\n",
    )
    .unwrap();
    let p = s.processes.unwrap();
    assert_eq!(p.endpoint(1), std::path::PathBuf::from("/b.sock"));
    assert_eq!(p.secret, super::SecretSource::File("/s".into()));
    // The secret from an environment variable of every island's process.
    let s = DeploySpec::from_toml_str(
        "[deployment]\nid = \"000102030405060708090a0b0c0d0e0f\"\ntransport = \"uds\"\n\
         secret_env = \"ISLANDS_TEST_DEPLOY_SECRET\"\n[[island]]\ncpus = \"0\"\n\
         [[island]]\ncpus = \"1\"\n",
    )
    .unwrap();
    let p = s.processes.unwrap();
    assert_eq!(
        p.secret,
        super::SecretSource::Env("ISLANDS_TEST_DEPLOY_SECRET".into())
    );
    let e = p.secret.read().unwrap_err().to_string();
    assert!(
        e.contains("ISLANDS_TEST_DEPLOY_SECRET"),
        "an unset variable is named: {e}"
    );
    std::env::set_var(
        "ISLANDS_TEST_DEPLOY_SECRET",
        "0123456789abcdef0123456789abcdef",
    );
    assert!(p.secret.read().is_ok(), "a set variable is read");
    // No run_dir: the log directory, which every process reading the file
    // agrees on (a process's own --data does not move it); no log_dir
    // either: the default log directory.
    for (log_dir, want) in [
        ("log_dir = \"/var/lib/x\"\n", "/var/lib/x/island-1.sock"),
        ("", "islands-data/island-1.sock"),
    ] {
        let s = DeploySpec::from_toml_str(&format!(
            "[deployment]\nid = \"000102030405060708090a0b0c0d0e0f\"\ntransport = \"uds\"\n\
             secret_file = \"/s\"\n{log_dir}[[island]]\ncpus = \"0\"\n[[island]]\ncpus = \"1\"\n"
        ))
        .unwrap();
        let p = s.processes.unwrap();
        assert_eq!(p.run_dir, s.log_dir, "{log_dir:?}");
        assert_eq!(p.endpoint(1), std::path::PathBuf::from(want), "{log_dir:?}");
    }
    // Left out: one process.
    assert!(DeploySpec::from_toml_str("[deployment]\nislands = 2\n")
        .unwrap()
        .processes
        .is_none());
    for (text, says) in [
        (
            "islands = 2\ntransport = \"uds\"\nsecret_file = \"/s\"\n",
            "id = \"",
        ),
        (
            "islands = 2\ntransport = \"uds\"\nid = \"00\"\nsecret_file = \"/s\"\n",
            "32 hex digits",
        ),
        (
            "islands = 2\ntransport = \"uds\"\nid = \"000102030405060708090a0b0c0d0e0f\"\n",
            "secret_file",
        ),
        ("islands = 2\ntransport = \"tcp\"\n", "inproc, shm or uds"),
        ("islands = 2\nsecret_file = \"/s\"\n", "give transport"),
        ("islands = 2\nsecret_env = \"S\"\n", "give transport"),
        (
            "islands = 2\ntransport = \"uds\"\nid = \"000102030405060708090a0b0c0d0e0f\"\n\
             secret_file = \"/s\"\nsecret_env = \"S\"\n",
            "not both",
        ),
        (
            "islands = 2\ntransport = \"uds\"\nid = \"000102030405060708090a0b0c0d0e0f\"\n\
             secret_env = \"A=B\"\n",
            "not the name of an environment variable",
        ),
    ] {
        let e = DeploySpec::from_toml_str(&format!("[deployment]\n{text}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
    let e = DeploySpec::from_toml_str(
        "[deployment]\nid = \"000102030405060708090a0b0c0d0e0f\"\ntransport = \"uds\"\n\
         secret_file = \"/s\"\n[[island]]\ncpus = \"0\"\nendpoint = \"/a.sock\"\n\
         [[island]]\ncpus = \"1\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("every [[island]] an endpoint"), "{e}");
}

#[test]
fn toml_island_listen_addresses() {
    let (_, named) = config::parse_named(
        "[[island]]\ncpus = \"0\"\nlisten = \"127.0.0.1:7000\"\n[[island]]\ncpus = \"1\"\n",
        "f.toml",
    )
    .unwrap();
    assert_eq!(
        named.listen,
        vec![Some("127.0.0.1:7000".parse().unwrap()), None]
    );
    let e = config::parse_named("[[island]]\ncpus = \"0\"\nlisten = \"7000\"\n", "f.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("island 0: listen = \"7000\" is not an address"),
        "{e}"
    );
}

#[test]
fn a_socket_path_too_long_for_its_island_is_refused_with_the_island_the_path_and_the_limit() {
    let head = "[deployment]\nid = \"000102030405060708090a0b0c0d0e0f\"\ntransport = \"uds\"\n\
                secret_file = \"/s\"\n";
    // `run_dir/island-1.sock` of exactly the limit fits; one byte more does
    // not, and the default path of each island is checked.
    let fits = format!(
        "/{}",
        "r".repeat(SOCKET_PATH_MAX - "/island-1.sock".len() - 1)
    );
    let two = "[[island]]\ncpus = \"0\"\n[[island]]\ncpus = \"1\"\n";
    let s = DeploySpec::from_toml_str(&format!("{head}run_dir = \"{fits}\"\n{two}")).unwrap();
    let p = s.processes.unwrap();
    assert_eq!(p.endpoint(1).as_os_str().len(), SOCKET_PATH_MAX);
    let over = format!("{fits}r");
    let e = DeploySpec::from_toml_str(&format!("{head}run_dir = \"{over}\"\n{two}"))
        .unwrap_err()
        .to_string();
    let want = format!(
        "island 0: its socket path {over}/island-0.sock is {} bytes, more than the {SOCKET_PATH_MAX}",
        SOCKET_PATH_MAX + 1
    );
    assert!(e.contains(&want), "{e}");
    // A named endpoint: the island that names it.
    let long = format!("/{}.sock", "e".repeat(SOCKET_PATH_MAX));
    let e = DeploySpec::from_toml_str(&format!(
        "{head}[[island]]\ncpus = \"0\"\nendpoint = \"/a.sock\"\n\
         [[island]]\ncpus = \"1\"\nendpoint = \"{long}\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(&format!("island 1: its socket path {long} is")),
        "{e}"
    );
    // Islands counted only on the machine: refused when planned.
    let s = DeploySpec::from_toml_str(&format!(
        "{head}islands = \"per-core\"\nrun_dir = \"{fits}rrrrrr\"\n"
    ))
    .unwrap();
    match plan(&topo("4x6"), &s) {
        Err(DeployError::SocketPathTooLong {
            island: 0,
            len,
            max,
            ..
        }) => {
            assert_eq!((len, max), (SOCKET_PATH_MAX + 6, SOCKET_PATH_MAX))
        }
        r => panic!("planned islands whose socket paths are too long: {r:?}"),
    }
    let s = DeploySpec::from_toml_str(&format!("{head}islands = \"per-core\"\nrun_dir = \"/r\"\n"))
        .unwrap();
    assert_eq!(plan(&topo("4x6"), &s).unwrap().islands().len(), 24);
}
