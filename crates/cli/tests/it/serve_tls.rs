//! TLS and failed logins: `--tls-cert`/`--tls-key` answer SSLRequest so that
//! `psql "sslmode=require"` connects over TLS; without them `sslmode=require`
//! fails cleanly; bad certificate or key files are refused at start, before
//! the data directory is touched; a failed password is answered with one
//! ErrorResponse `28P01` naming the login user, then the connection closes
//! with no ReadyForQuery.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use islands::server::{serve, ServerOptions};
use islands_workloads::served::Builtin;

use super::raw::startup;
use super::serve::{local, open, temp};

fn on_path(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A self-signed certificate for localhost and its key, made with openssl
/// in `dir`; `None` without openssl.
fn self_signed(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    if !on_path("openssl") {
        return None;
    }
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some((cert, key))
}

fn psql(port: u16, sslmode: &str, command: &str) -> (bool, String, String) {
    let out = Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={port} user=tls dbname=islands sslmode={sslmode} connect_timeout=5"
        ))
        .args(["-X", "-At", "-c", command])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn psql_connects_over_tls_with_sslmode_require() {
    if !on_path("psql") {
        println!("SKIPPED psql_connects_over_tls_with_sslmode_require: psql is not on PATH");
        return;
    }
    let dir = temp("tls");
    let Some((cert, key)) = self_signed(&dir, "server") else {
        println!("SKIPPED psql_connects_over_tls_with_sslmode_require: openssl is not on PATH");
        return;
    };
    let b = Builtin::Tpcb { scale: 1 };
    let opts = ServerOptions {
        tls_cert: Some(cert),
        tls_key: Some(key),
        ..local()
    };
    let server = serve(open(b.catalog(), Some(b), None), opts).unwrap();
    let port = server.local_addr().port();
    let (ok, out, err) = psql(port, "require", "CALL tpcb_balance(3)");
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "0");
    // psql says how it is connected: over TLS, and which version.
    let (ok, out, err) = psql(port, "require", "\\conninfo");
    assert!(ok, "{err}");
    assert!(out.contains("SSL connection (protocol: TLSv1."), "{out}");
    // A client that does not ask for TLS still connects in plain text.
    let (ok, out, err) = psql(port, "disable", "CALL tpcb_balance(3)");
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "0");
    // Bytes after SSLRequest, before the handshake, are refused: they
    // would otherwise be taken as sent over TLS.
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut m = 8u32.to_be_bytes().to_vec();
    m.extend_from_slice(&80877103u32.to_be_bytes());
    m.extend_from_slice(b"junk");
    s.write_all(&m).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert_eq!(answer.first(), Some(&b'E'), "{answer:?}");
    assert!(
        String::from_utf8_lossy(&answer).contains("after SSLRequest"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    server.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sslmode_require_fails_cleanly_without_tls() {
    if !on_path("psql") {
        println!("SKIPPED sslmode_require_fails_cleanly_without_tls: psql is not on PATH");
        return;
    }
    let b = Builtin::Tpcb { scale: 1 };
    let server = serve(open(b.catalog(), Some(b), None), local()).unwrap();
    let (ok, _, err) = psql(
        server.local_addr().port(),
        "require",
        "CALL tpcb_balance(3)",
    );
    assert!(!ok);
    assert!(err.contains("server does not support SSL"), "{err}");
    server.shutdown().unwrap();
}

#[test]
fn bad_certificate_or_key_files_are_refused_at_start() {
    let dir = temp("tls-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let check = |cert: &Path, key: &Path| {
        ServerOptions {
            tls_cert: Some(cert.to_path_buf()),
            tls_key: Some(key.to_path_buf()),
            ..local()
        }
        .check()
        .map_err(|e| e.to_string())
    };
    let missing = dir.join("missing.pem");
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let e = check(&missing, &junk).unwrap_err();
    assert!(e.contains("--tls-cert") && e.contains("missing.pem"), "{e}");
    let e = check(&junk, &junk).unwrap_err();
    assert!(e.contains("no PEM certificate"), "{e}");
    let one_only = ServerOptions {
        tls_cert: Some(junk.clone()),
        ..local()
    };
    let e = one_only.check().unwrap_err().to_string();
    assert!(e.contains("--tls-key"), "{e}");
    let Some((cert, key)) = self_signed(&dir, "a") else {
        println!(
            "SKIPPED the rest of bad_certificate_or_key_files_are_refused_at_start: no openssl"
        );
        return;
    };
    assert!(check(&cert, &key).is_ok());
    let e = check(&cert, &junk).unwrap_err();
    assert!(
        e.contains("--tls-key") && e.contains("no PEM private key"),
        "{e}"
    );
    // The key is read as a certificate file: it holds no certificate.
    let e = check(&key, &key).unwrap_err();
    assert!(e.contains("no PEM certificate"), "{e}");
    let (_, other_key) = self_signed(&dir, "b").unwrap();
    let e = check(&cert, &other_key).unwrap_err();
    assert!(e.contains("does not match"), "{e}");

    // `islands serve` refuses them before it makes the data directory.
    let data = dir.join("data");
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["serve", "--init", "tpcb", "--scale", "1", "--no-pin"])
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&other_key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("does not match"), "{err}");
    assert!(!data.exists(), "the data directory was made: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads one message: its type and body; `None` once the server closed.
fn read_message(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 5];
    s.read_exact(&mut h).ok()?;
    let len = u32::from_be_bytes(h[1..5].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len - 4];
    s.read_exact(&mut body).ok()?;
    Some((h[0], body))
}

fn send(s: &mut TcpStream, ty: u8, body: &[u8]) {
    let mut m = vec![ty];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    s.write_all(&m).unwrap();
}

/// The messages a SCRAM login with a wrong proof gets, after the server's
/// first SASL challenge: what the client reads until the server closes.
fn wrong_scram_login(addr: SocketAddr, user: &str) -> Vec<(u8, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&startup(196608, user)).unwrap();
    // AuthenticationSASL (R, code 10).
    let (ty, b) = read_message(&mut s).unwrap();
    assert_eq!((ty, &b[..4]), (b'R', &10u32.to_be_bytes()[..]));
    // SASLInitialResponse: the mechanism, then client-first-message; as
    // libpq does, the SCRAM user is empty (the login user counts).
    let first = b"n,,n=,r=clientnonceclientnonce";
    let mut b = b"SCRAM-SHA-256\0".to_vec();
    b.extend_from_slice(&(first.len() as u32).to_be_bytes());
    b.extend_from_slice(first);
    send(&mut s, b'p', &b);
    let (ty, b) = read_message(&mut s).unwrap();
    assert_eq!(
        (ty, &b[..4]),
        (b'R', &11u32.to_be_bytes()[..]),
        "SASLContinue"
    );
    let server_first = String::from_utf8_lossy(&b[4..]).to_string();
    let nonce = server_first
        .split(',')
        .find_map(|f| f.strip_prefix("r="))
        .unwrap()
        .to_string();
    // A proof of 32 zero bytes: wrong for any password.
    let last = format!("c=biws,r={nonce},p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    send(&mut s, b'p', last.as_bytes());
    let mut got = Vec::new();
    while let Some(m) = read_message(&mut s) {
        got.push(m);
    }
    got
}

#[test]
fn a_failed_password_is_one_error_naming_the_login_user_then_closed() {
    let b = Builtin::Tpcb { scale: 1 };
    let opts = ServerOptions {
        password: Some("s3cret".into()),
        ..local()
    };
    let server = serve(open(b.catalog(), Some(b), None), opts).unwrap();
    let got = wrong_scram_login(server.local_addr(), "alice");
    let types: Vec<char> = got.iter().map(|(t, _)| *t as char).collect();
    assert_eq!(
        types,
        vec!['E'],
        "one ErrorResponse, no ReadyForQuery: {got:?}"
    );
    let fields: Vec<String> = got[0]
        .1
        .split(|b| *b == 0)
        .map(|f| String::from_utf8_lossy(f).to_string())
        .collect();
    assert!(fields.iter().any(|f| f == "C28P01"), "{fields:?}");
    assert!(fields.iter().any(|f| f == "SFATAL"), "{fields:?}");
    assert!(
        fields
            .iter()
            .any(|f| f == "Mpassword authentication failed for user \"alice\""),
        "{fields:?}"
    );
    server.shutdown().unwrap();
}

/// psql's `\dt`, `\d TABLE` and `\df` against a served data set: the
/// tables, a table's columns and the procedures of its catalog.
#[test]
fn psql_describes_tables_and_procedures() {
    if !on_path("psql") {
        println!("SKIPPED psql_describes_tables_and_procedures: psql is not on PATH");
        return;
    }
    let b = Builtin::Bank { accounts: 100 };
    let catalog = b.catalog();
    let server = serve(open(b.catalog(), Some(b), None), local()).unwrap();
    let port = server.local_addr().port();
    let (ok, out, err) = psql(port, "disable", "\\dt");
    assert!(ok, "{err}");
    for t in catalog.tables() {
        assert!(
            out.contains(&format!("|{}|table|", t.name)),
            "{}: {out}",
            t.name
        );
    }
    // `\d` shows each column `SELECT *` shows, the key column `id` first,
    // with psql's type names.
    let first = &catalog.tables()[0];
    let (ok, out, err) = psql(port, "disable", &format!("\\d {}", first.name));
    assert!(ok, "{err}");
    let view = catalog.sql_view(0).unwrap();
    let shown: Vec<&str> = out
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            view.columns()
                .iter()
                .any(|c| c.name == cells[0])
                .then_some(cells[0])
        })
        .collect();
    let names: Vec<&str> = view.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(shown, names, "{out}");
    assert_eq!(names.first(), Some(&"id"));
    assert!(out.contains("id|bigint||not null|"), "{out}");
    let (ok, out, err) = psql(port, "disable", "\\df");
    assert!(ok, "{err}");
    for p in catalog.procedures() {
        assert!(
            out.contains(&format!("|{}|", p.name())),
            "{}: {out}",
            p.name()
        );
    }
    server.shutdown().unwrap();
}

/// The lines `islands serve` prints up to its ready line, listening on
/// every address (with a password, as any non-loopback address needs).
fn lines_before_ready(extra: &[&str]) -> Vec<String> {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["serve", "--init", "tpcb", "--scale", "1", "--no-pin"])
        .args(["--listen", "0.0.0.0:0"])
        .args(extra)
        .env("ISLANDS_PASSWORD", "s3cret")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let ready = line.contains("ready on");
        lines.push(line);
        if ready {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn a_non_loopback_listener_says_whether_its_traffic_is_encrypted() {
    let dir = temp("tls-say");
    let plain = lines_before_ready(&["--data-dir", dir.join("a").to_str().unwrap()]);
    assert!(
        plain
            .iter()
            .any(|l| l.contains("traffic is not encrypted: give --tls-cert and --tls-key")),
        "{plain:?}"
    );
    assert!(plain.last().unwrap().contains("ready on"), "{plain:?}");
    let Some((cert, key)) = self_signed(&dir, "say") else {
        println!("SKIPPED the TLS half: openssl is not on PATH");
        return;
    };
    let tls = lines_before_ready(&[
        "--data-dir",
        dir.join("b").to_str().unwrap(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert!(tls.iter().any(|l| l.contains("TLS on")), "{tls:?}");
    assert!(!tls.iter().any(|l| l.contains("not encrypted")), "{tls:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
