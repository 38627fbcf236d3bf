//! Set-ups the tests of islands run as processes share: the deployment
//! file with its secret, free loopback ports for the islands' servers, and
//! an `islands island` child started and waited for.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::serve::Served;

/// Free loopback ports for the islands' servers (bound for a moment).
pub(super) fn free_ports(n: usize) -> Vec<u16> {
    let l: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    l.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Writes the deployment's secret (owner-only, as the handshake demands)
/// to `dir/secret`, and returns its path.
pub(super) fn write_secret(dir: &Path) -> PathBuf {
    let secret = dir.join("secret");
    std::fs::write(&secret, b"a secret of more than sixteen bytes").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    secret
}

/// Writes `dir/deployment.toml`: one island as a process per port in
/// `ports` (island `k` on cpu `k`, its PostgreSQL server on
/// `127.0.0.1:ports[k]`), joined by `transport` (`uds` or `shm`), one worker
/// each, logging under `dir/data` with `durability`; its secret in
/// `dir/secret` and its run directory `dir/run`. Returns the file's path.
pub(super) fn deployment_file(
    dir: &Path,
    ports: &[u16],
    transport: &str,
    durability: &str,
) -> PathBuf {
    let secret = write_secret(dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let mut text = format!(
        "[deployment]\nid = \"{:032x}\"\ntransport = \"{transport}\"\nsecret_file = \"{}\"\n\
         run_dir = \"{}\"\nlog_dir = \"{}\"\ndurability = \"{durability}\"\n\
         workers_per_island = 1\n",
        islands::wal::new_deployment_id(),
        secret.display(),
        dir.join("run").display(),
        dir.join("data").display(),
    );
    for (k, p) in ports.iter().enumerate() {
        text += &format!("[[island]]\ncpus = \"{k}\"\nlisten = \"127.0.0.1:{p}\"\n");
    }
    let path = dir.join("deployment.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `islands island --id k --config cfg` with `args` as a child, once it
/// printed its ready line; its stderr goes to `dir/island-k.log`
/// (appended, so that a restarted island's follows its predecessor's).
pub(super) fn spawn_island(cfg: &Path, dir: &Path, k: usize, args: &[&str]) -> Served {
    let log_path = dir.join(format!("island-{k}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["island", "--id", &k.to_string(), "--config"])
        .arg(cfg)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.contains(&format!("islands island {k}: ready on ")) {
        let _ = child.kill();
        let mut err = String::new();
        let _ = std::fs::File::open(&log_path).and_then(|mut f| f.read_to_string(&mut err));
        panic!("island {k} did not start: {line:?}\n{err}");
    }
    Served::new(child)
}

/// Column `col` of a `SHOW peers` row, a count: panics naming it if the
/// row lacks it or it is not one.
pub(super) fn peer_count(r: &tokio_postgres::SimpleQueryRow, col: &str) -> u64 {
    let v = r
        .get(col)
        .unwrap_or_else(|| panic!("SHOW peers has no {col}"));
    v.parse()
        .unwrap_or_else(|_| panic!("SHOW peers: {col} = {v:?}"))
}
