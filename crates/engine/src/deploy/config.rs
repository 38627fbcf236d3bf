//! The TOML deployment file. Unknown keys are errors, so a typo is not
//! silently ignored.
//!
//! ```toml
//! [deployment]
//! islands = "per-socket"      # or 1, 4, "per-l3", "per-core", "0-5;6-11"
//! placement = "grouped"       # grouped | spread | os
//! workers_per_island = 2      # default: one per core
//! sites = 240                 # default: one per core of the deployment
//! cc = "occ"                  # default: none for one worker, else occ
//! durability = "sync"
//! log_dir = "/var/lib/islands"
//! checkpoint_every_mb = 512   # periodic checkpoints by log growth; 0: not by size
//! checkpoint_every_s = 300    # and by time; 0: not by time
//!
//! # Islands as processes (`islands up`, `islands island`); leave out to run
//! # every island in one process:
//! id = "5f0c…"                # the deployment id: 32 hex digits
//! transport = "uds"           # uds | shm (inproc: one process)
//! secret_file = "/etc/islands/secret"  # readable by its owner only
//! # secret_env = "ISLANDS_SECRET"      # or: an environment variable of every island
//! run_dir = "/run/islands"    # island-K.sock and shared memory files; default log_dir
//!
//! # Instead of `islands`, one entry per island:
//! [[island]]
//! cpus = "0-5"
//! endpoint = "/run/islands/island-0.sock"  # default run_dir/island-K.sock
//! listen = "127.0.0.1:5433"   # its PostgreSQL address (`islands island`, `islands up`);
//!                             # default: the base address's port + K
//! ```

use std::path::PathBuf;

use serde::Deserialize;

use super::{DeployError, DeploySpec, Islands, Named, Processes, SecretSource};
use crate::transport::join::Kind;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    deployment: Deployment,
    #[serde(default)]
    island: Vec<IslandEntry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Deployment {
    islands: Option<Label>,
    placement: Option<String>,
    workers_per_island: Option<u32>,
    sites: Option<u32>,
    cc: Option<String>,
    durability: Option<String>,
    log_dir: Option<PathBuf>,
    checkpoint_every_mb: Option<u64>,
    checkpoint_every_s: Option<f64>,
    id: Option<String>,
    transport: Option<String>,
    secret_file: Option<PathBuf>,
    secret_env: Option<String>,
    run_dir: Option<PathBuf>,
}

/// `islands = 4` and `islands = "4"` mean the same. Deserialized by hand so
/// that a value of the wrong kind (`true`, `2.5`, `-1`) gets an error saying
/// what is expected, not serde's "did not match any variant of untagged enum".
#[derive(Debug)]
struct Label(String);

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Label;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a number of islands (1, 4, ...) or a label: \"per-socket\", \"per-numa\", \"per-l3\", \"per-core\" or CPU lists \"0-5;6-11\"",
                )
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Label, E> {
                Ok(Label(n.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Label, E> {
                if n < 0 {
                    return Err(E::custom(format!(
                        "islands = {n}: the number of islands must be at least 1"
                    )));
                }
                Ok(Label(n.to_string()))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Label, E> {
                Ok(Label(s.to_string()))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IslandEntry {
    cpus: String,
    endpoint: Option<PathBuf>,
    listen: Option<String>,
}

pub(super) fn parse(text: &str, path: &str) -> Result<DeploySpec, DeployError> {
    Ok(parse_named(text, path)?.0)
}

pub(super) fn parse_named(text: &str, path: &str) -> Result<(DeploySpec, Named), DeployError> {
    let err = |why: String| DeployError::Config {
        path: path.to_string(),
        why,
    };
    let file: File = toml::from_str(text).map_err(|e| err(e.to_string().trim_end().to_string()))?;
    let d = file.deployment;
    let islands = match (&d.islands, file.island.is_empty()) {
        (Some(_), false) => {
            return Err(err(
                "give either `islands` in [deployment] or [[island]] entries, not both".to_string(),
            ))
        }
        (None, true) => {
            return Err(err(
                "missing `islands` in [deployment] (e.g. islands = \"per-socket\") or [[island]] entries"
                    .to_string(),
            ))
        }
        (Some(Label(l)), true) => Islands::parse(l)?,
        (None, false) => {
            let lists: Vec<String> = file.island.iter().map(|i| i.cpus.clone()).collect();
            for (island, l) in lists.iter().enumerate() {
                if l.trim().is_empty() {
                    return Err(DeployError::EmptyIsland { island });
                }
                // Joined with ';' below: one in an entry would split it into
                // several islands without a word.
                if l.contains(';') {
                    return Err(err(format!(
                        "island {island}: cpus = \"{l}\" holds a ';', but an entry is one island \
                         (give each island its own [[island]] entry)"
                    )));
                }
            }
            // A trailing ';' keeps a one-CPU single island from reading as a count.
            Islands::parse(&format!("{};", lists.join(";")))?
        }
    };
    let mut spec = DeploySpec::new(islands);
    if let Some(p) = &d.placement {
        spec.placement = p.parse()?;
    }
    spec.workers_per_island = d.workers_per_island;
    spec.sites = d.sites;
    spec.cc = d.cc.clone();
    let mut listen = Vec::with_capacity(file.island.len());
    for (i, e) in file.island.iter().enumerate() {
        listen.push(
            e.listen
                .as_deref()
                .map(|a| {
                    a.parse::<std::net::SocketAddr>().map_err(|_| {
                        err(format!(
                            "island {i}: listen = \"{a}\" is not an address (127.0.0.1:5433)"
                        ))
                    })
                })
                .transpose()?,
        );
    }
    let named = Named {
        durability: d.durability.is_some(),
        log_dir: d.log_dir.is_some(),
        listen,
    };
    if let Some(dur) = d.durability.clone() {
        spec.durability = dur;
    }
    if let Some(dir) = &d.log_dir {
        spec.log_dir = dir.clone();
    }
    if let Some(mb) = d.checkpoint_every_mb {
        if mb > 1 << 30 {
            return Err(err(format!(
                "checkpoint_every_mb = {mb} is more than a petabyte (0 turns checkpoints by size off)"
            )));
        }
        spec.checkpoint_every_mb = Some(mb);
    }
    if let Some(s) = d.checkpoint_every_s {
        if !s.is_finite() || !(0.0..=1e9).contains(&s) {
            return Err(err(format!(
                "checkpoint_every_s = {s} is not a number of seconds between 0 and 1e9 (0 turns checkpoints by time off)"
            )));
        }
        spec.checkpoint_every = Some(std::time::Duration::from_secs_f64(s));
    }
    spec.processes = processes(&d, &file.island, &spec).map_err(err)?;
    // Every island's socket path fits, checked here when the file says how
    // many islands there are (else when the deployment is planned).
    let known = match &spec.islands {
        Islands::Explicit(lists) => Some(lists.len()),
        Islands::Count(n) => Some(*n as usize),
        _ => None,
    };
    if let (Some(p), Some(n)) = (&spec.processes, known) {
        p.check_endpoints(n)?;
    }
    Ok((spec, named))
}

/// The `[deployment]` settings of islands as processes, if the file runs them.
fn processes(
    d: &Deployment,
    entries: &[IslandEntry],
    spec: &DeploySpec,
) -> Result<Option<Processes>, String> {
    let named_endpoints = entries.iter().any(|e| e.endpoint.is_some());
    let transport = match d.transport.as_deref() {
        None | Some("inproc") => {
            if d.id.is_some()
                || d.secret_file.is_some()
                || d.secret_env.is_some()
                || d.run_dir.is_some()
                || named_endpoints
            {
                return Err(
                    "id, secret_file, secret_env, run_dir and endpoints are settings of islands \
                     as processes: give transport = \"uds\" or \"shm\" too"
                        .to_string(),
                );
            }
            return Ok(None);
        }
        Some(t) => t.parse::<Kind>()?,
    };
    let id = match &d.id {
        Some(hex) => parse_id(hex)?,
        None => {
            return Err(format!(
            "transport = \"{transport}\" runs islands as processes, which need the deployment's \
                 id in [deployment] (a new one: id = \"{:032x}\")",
            crate::wal::new_deployment_id()
        ))
        }
    };
    let secret = match (&d.secret_file, &d.secret_env) {
        (Some(f), None) => SecretSource::File(f.clone()),
        (None, Some(var)) if !var.is_empty() && !var.contains('=') && !var.contains('\0') => {
            SecretSource::Env(var.clone())
        }
        (None, Some(var)) => {
            return Err(format!(
                "secret_env = {var:?} is not the name of an environment variable"
            ))
        }
        (Some(_), Some(_)) => {
            return Err(
                "give secret_file or secret_env, not both: the secret has one source".to_string(),
            )
        }
        (None, None) => {
            return Err(format!(
                "transport = \"{transport}\" runs islands as processes, which authenticate each \
                 other with a secret: give secret_file (a file readable by its owner only) or \
                 secret_env (an environment variable of every island's process)"
            ))
        }
    };
    if named_endpoints && entries.iter().any(|e| e.endpoint.is_none()) {
        return Err(
            "give every [[island]] an endpoint, or none (then each is run_dir/island-K.sock)"
                .to_string(),
        );
    }
    let run_dir = d.run_dir.clone().unwrap_or_else(|| spec.log_dir.clone());
    Ok(Some(Processes {
        id,
        transport,
        secret,
        endpoints: entries.iter().filter_map(|e| e.endpoint.clone()).collect(),
        run_dir,
    }))
}

/// A deployment id written as 32 hex digits.
fn parse_id(hex: &str) -> Result<u128, String> {
    let bad = || format!("id = \"{hex}\" is not a deployment id: 32 hex digits");
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u128::from_str_radix(hex, 16).map_err(|_| bad())
}
