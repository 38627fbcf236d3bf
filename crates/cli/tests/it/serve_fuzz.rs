//! A protocol fuzzer against `islands serve`, bounded in time: clients
//! send random and mutated messages (lengths that disagree with bodies,
//! every message type, in every phase: before the startup message,
//! before login on a password server, after login), while a probe client
//! keeps calling. The servers must never panic, must stay under a memory
//! bound, must answer the probe in time, and the data directory must pass
//! `islands check` afterwards. A second test runs a server under an
//! address-space cap while hostile clients send what used to make it
//! buffer a gigabyte.
//!
//! `ISLANDS_FUZZ_S=N` runs the fuzzer N seconds (20 by default);
//! `ISLANDS_SEED=N` replays its choices (the interleaving is the machine's).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::raw::{cstr, message, startup};
use super::serve::{sigterm, spawn_serve_env, temp, Served};
use super::serve_protocol::Wire;

/// A small generator for the fuzzer's choices (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Well-formed messages of every type a client may send, to mutate.
fn corpus() -> Vec<Vec<u8>> {
    let mut parse = cstr("s");
    parse.extend(cstr("CALL tpcb_balance($1)"));
    parse.extend_from_slice(&1u16.to_be_bytes());
    parse.extend_from_slice(&20u32.to_be_bytes());
    let mut bind = cstr("");
    bind.extend(cstr("s"));
    bind.extend_from_slice(&[0, 1, 0, 0, 0, 1, 0, 0, 0, 1, b'1', 0, 1, 0, 0]);
    let mut sasl = cstr("SCRAM-SHA-256");
    sasl.extend_from_slice(&24i32.to_be_bytes());
    sasl.extend_from_slice(b"n,,n=*,r=abcdefghijklmnop");
    vec![
        message(b'Q', &cstr("CALL tpcb_balance(1)")),
        message(b'Q', &cstr("SHOW stats")),
        message(b'P', &parse),
        message(b'B', &bind),
        message(b'E', b"\0\0\0\0\0"),
        message(b'D', b"Ss\0"),
        message(b'D', b"P\0"),
        message(b'C', b"Ss\0"),
        message(b'C', b"P\0"),
        message(b'S', b""),
        message(b'H', b""),
        message(b'd', b"data"),
        message(b'c', b""),
        message(b'f', &cstr("no")),
        message(b'p', &sasl),
        message(b'p', b"c=biws,r=abc,p=AAAA"),
        message(b'F', b"\0\0\0\0"),
        startup(196608, "fuzz"),
        startup(3 << 16 | 9, "fuzz"),
        {
            let mut c = 16u32.to_be_bytes().to_vec();
            c.extend_from_slice(&80_877_102u32.to_be_bytes());
            c.extend_from_slice(&[0; 8]);
            c
        },
        [8u32.to_be_bytes(), 80_877_103u32.to_be_bytes()].concat(),
        [8u32.to_be_bytes(), 80_877_104u32.to_be_bytes()].concat(),
    ]
}

/// One message, mutated or not.
fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut m = corpus[rng.below(corpus.len() as u64) as usize].clone();
    match rng.below(9) {
        0 => {}
        1 => {
            // Flip a few bytes anywhere (type, length, body).
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(m.len() as u64) as usize;
                m[i] = rng.next() as u8;
            }
        }
        2 => m.truncate(rng.below(m.len() as u64) as usize),
        3 => {
            let n = rng.below(64) as usize;
            m.extend(rng.bytes(n));
        }
        4 => {
            // A length field that disagrees with the body, by a little.
            let at = if m[0].is_ascii_alphabetic() { 1 } else { 0 };
            let len = u32::from_be_bytes(m[at..at + 4].try_into().unwrap());
            let d = rng.below(16) as u32;
            let len = if rng.below(2) == 0 {
                len.wrapping_add(d)
            } else {
                len.wrapping_sub(d)
            };
            m[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        5 => {
            // A huge length, and part of a body.
            let at = if m[0].is_ascii_alphabetic() { 1 } else { 0 };
            let len = (rng.next() as u32) | 1 << 20;
            m[at..at + 4].copy_from_slice(&len.to_be_bytes());
            let n = rng.below(4096) as usize;
            m.extend(rng.bytes(n));
        }
        6 => {
            // Another message's body after this one's end.
            let other = &corpus[rng.below(corpus.len() as u64) as usize];
            m.extend_from_slice(other);
            let at = if m[0].is_ascii_alphabetic() { 1 } else { 0 };
            let len = (m.len() - at) as u32;
            m[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        7 => {
            let n = 1 + rng.below(32) as usize;
            m = rng.bytes(n);
        }
        _ => m[0] = rng.next() as u8,
    }
    m
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Collects a child's standard error on a thread.
fn stderr_of(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut e = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = e.read_to_string(&mut s);
        s
    })
}

/// One fuzz connection: a phase to reach, then messages.
fn fuzz_one(addr: SocketAddr, password: bool, rng: &mut Rng, corpus: &[Vec<u8>]) {
    let Ok(s) = std::net::TcpStream::connect(addr) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mut w = Wire { s };
    // 0: from the first byte; 1: after a valid startup (logged in, or
    // asked for a password).
    if rng.below(3) != 0 {
        w.raw(&startup(196608, "fuzz"));
        if password && rng.below(2) == 0 {
            let mut sasl = cstr("SCRAM-SHA-256");
            sasl.extend_from_slice(&24i32.to_be_bytes());
            sasl.extend_from_slice(b"n,,n=*,r=abcdefghijklmnop");
            w.send(b'p', &sasl);
        }
    }
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(12) {
        out.extend(mutate(rng, corpus));
    }
    // All at once, or in pieces.
    if rng.below(2) == 0 {
        w.raw(&out);
    } else {
        for c in out.chunks(1 + rng.below(16) as usize) {
            w.raw(c);
        }
    }
    let mut buf = [0u8; 4096];
    let _ = w.s.read(&mut buf);
}

struct Fuzzed {
    served: Served,
    addr: SocketAddr,
    err: std::thread::JoinHandle<String>,
}

fn start(dir: &str, password: bool) -> Fuzzed {
    let env: &[(&str, &str)] = if password {
        &[("ISLANDS_PASSWORD", "s3cret")]
    } else {
        &[]
    };
    let (mut served, addr, _) = spawn_serve_env(
        &[
            "--islands",
            "1",
            "--data-dir",
            dir,
            "--init",
            "tpcb",
            "--scale",
            "1",
            "--auth-timeout-s",
            "2",
            "--max-connections",
            "64",
        ],
        env,
    );
    let err = stderr_of(served.child());
    Fuzzed { served, addr, err }
}

#[test]
fn random_and_mutated_messages_never_panic_bloat_or_stall_the_server() {
    let seconds: u64 = std::env::var("ISLANDS_FUZZ_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = match std::env::var("ISLANDS_SEED") {
        Ok(s) => s.parse().expect("ISLANDS_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    println!("protocol fuzzer: seed {seed} (ISLANDS_SEED={seed} replays), {seconds} s");
    let dirs = [temp("fuzz-open"), temp("fuzz-password")];
    let mut servers: Vec<Fuzzed> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| start(d.to_str().unwrap(), i == 1))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let pids: Vec<u32> = servers.iter_mut().map(|s| s.served.child().id()).collect();
    let base: Vec<u64> = pids.iter().map(|&p| rss_kb(p)).collect();
    // The bound: what the server held at start and 256 MiB, far below
    // what a buffered gigabyte-message would take.
    let bound_kb: Vec<u64> = base.iter().map(|b| b + 256 * 1024).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let corpus = Arc::new(corpus());
    let mut fuzzers = Vec::new();
    for k in 0..4u64 {
        let (stop, corpus) = (Arc::clone(&stop), Arc::clone(&corpus));
        let targets: Vec<(SocketAddr, bool)> =
            vec![(servers[0].addr, false), (servers[1].addr, true)];
        fuzzers.push(std::thread::spawn(move || {
            let mut rng = Rng((seed ^ (k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (addr, password) = targets[rng.below(2) as usize];
                fuzz_one(addr, password, &mut rng, &corpus);
                n += 1;
            }
            n
        }));
    }
    // The probe: a call every 100 ms on a connection of its own (opened
    // again if it goes), each answered within 5 s.
    let t = Instant::now();
    let mut worst = Duration::ZERO;
    let mut peak = vec![0u64; 2];
    let mut probe = Wire::login(servers[0].addr);
    while t.elapsed() < Duration::from_secs(seconds) {
        let at = Instant::now();
        let msgs = probe.query("CALL tpcb_balance(1)");
        let took = at.elapsed();
        assert!(
            msgs.iter().any(|m| m.ty == b'D'),
            "the probe's call was not answered: {msgs:?}"
        );
        worst = worst.max(took);
        assert!(took < Duration::from_secs(5), "the probe waited {took:?}");
        for (i, &p) in pids.iter().enumerate() {
            peak[i] = peak[i].max(rss_kb(p));
            assert!(
                peak[i] < bound_kb[i],
                "server {i}: {} kB resident, bound {} kB",
                peak[i],
                bound_kb[i]
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let sent: u64 = fuzzers.into_iter().map(|f| f.join().unwrap()).sum();
    println!(
        "protocol fuzzer: {sent} connections; probe worst {worst:?}; resident peak {peak:?} kB (start {base:?})"
    );
    for (s, d) in servers.iter_mut().zip(&dirs) {
        sigterm(&mut s.served);
        let status = s.served.child().wait().unwrap();
        assert!(status.success(), "{}: {status}", d.display());
    }
    for (s, d) in servers.into_iter().zip(&dirs) {
        let err = s.err.join().unwrap();
        assert!(
            !err.contains("panicked"),
            "{}: a panic:\n{err}",
            d.display()
        );
        let out = Command::new(env!("CARGO_BIN_EXE_islands"))
            .args(["check", "--log-dir", d.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "islands check {}: {}{}",
            d.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `islands serve` of tpcb under an address-space cap (`prlimit --as`),
/// with a password; its address from the ready line. `None` without
/// `prlimit`.
fn spawn_capped(dir: &str, cap_bytes: u64) -> Option<(Killed, SocketAddr)> {
    let mut child = Command::new("prlimit")
        .arg(format!("--as={cap_bytes}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_islands"))
        .args([
            "serve",
            "--islands",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--no-pin",
        ])
        .args(["--data-dir", dir, "--init", "tpcb", "--scale", "1"])
        .env("ISLANDS_PASSWORD", "s3cret")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    let child = Killed(child);
    let addr = line
        .split("ready on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())?;
    Some((child, addr))
}

/// Writes `n` bytes of `b'x'` after `head`, stopping at the first write
/// the server refuses (it closed); whether all went.
fn stream(addr: SocketAddr, head: &[u8], n: usize) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    if s.write_all(head).is_err() {
        return false;
    }
    let chunk = vec![b'x'; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        if s.write_all(&chunk[..k]).is_err() {
            return false;
        }
        left -= k;
    }
    true
}

#[test]
fn hostile_clients_cannot_abort_a_server_under_a_memory_cap() {
    let dir = temp("capped");
    // 2 GiB of address space: room for the server's threads and its
    // data, not for three buffered gigabyte messages.
    let Some((mut server, addr)) = spawn_capped(dir.to_str().unwrap(), 2 << 30) else {
        println!("skipped: prlimit could not start a capped server");
        return;
    };
    // Before login, a Sync whose length covers a 1 GiB Query's header,
    // then (up to) the Query's gigabyte; three clients at once.
    let mut lie = startup(196608, "u");
    lie.push(b'S');
    lie.extend_from_slice(&9u32.to_be_bytes());
    lie.push(b'Q');
    lie.extend_from_slice(&(1u32 << 30).to_be_bytes());
    let hostile: Vec<_> = (0..3)
        .map(|_| {
            let lie = lie.clone();
            std::thread::spawn(move || stream(addr, &lie, 1 << 30))
        })
        .collect();
    // And many large password messages, each held up to its limit.
    let mut big = startup(196608, "u");
    big.push(b'p');
    big.extend_from_slice(&(65_000u32 + 4).to_be_bytes());
    let many: Vec<_> = (0..32)
        .map(|_| {
            let big = big.clone();
            std::thread::spawn(move || stream(addr, &big, 60_000))
        })
        .collect();
    for h in hostile {
        assert!(
            !h.join().unwrap(),
            "the server took a gigabyte after a 4-byte Sync"
        );
    }
    for h in many {
        h.join().unwrap();
    }
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "the capped server died"
    );
    // It still serves.
    super::serve::runtime().block_on(async {
        let (c, conn) = tokio_postgres::connect(
            &format!(
                "host=127.0.0.1 port={} user=u dbname=d password=s3cret",
                addr.port()
            ),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        assert_eq!(
            super::serve::simple_one(&c, "CALL tpcb_balance(3)").await,
            "0"
        );
    });
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
