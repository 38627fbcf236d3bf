//! The server at the protocol level, from a raw TCP client: messages are
//! read by their length fields (nothing hides after a message's end, and
//! a header that lies is refused before its body is held), malformed
//! messages are answered FATAL `08P01` and never panic a thread, a
//! connection that does not log in is closed after the authentication
//! timeout, a refused one at once, and the answers follow PostgreSQL's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use islands::server::{serve, Server, ServerOptions};
use islands_workloads::served::Builtin;

use super::raw::{cstr, message, startup};
use super::serve::{local, open};

pub(super) fn start(opts: ServerOptions) -> Server {
    let b = Builtin::Tpcb { scale: 1 };
    serve(open(b.catalog(), Some(b), None), opts).unwrap()
}

/// A message as the test reads it: its type, and for an ErrorResponse its
/// severity, SQLSTATE and text; for a CommandComplete its tag; for a
/// DataRow its first value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Msg {
    pub ty: u8,
    pub severity: String,
    pub code: String,
    pub text: String,
}

/// A raw protocol connection.
pub(super) struct Wire {
    pub s: TcpStream,
}

impl Wire {
    pub(super) fn open(addr: SocketAddr) -> Wire {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Wire { s }
    }

    /// Connected and logged in (no password), at protocol 3.0.
    pub(super) fn login(addr: SocketAddr) -> Wire {
        let mut w = Wire::open(addr);
        w.raw(&startup(196608, "raw"));
        let msgs = w.until_ready();
        assert_eq!(msgs.last().map(|m| m.ty), Some(b'Z'), "{msgs:?}");
        w
    }

    pub(super) fn raw(&mut self, bytes: &[u8]) {
        // A server that closed may refuse the write; what it answered is
        // read next either way.
        let _ = self.s.write_all(bytes);
    }

    pub(super) fn send(&mut self, ty: u8, body: &[u8]) {
        self.raw(&message(ty, body));
    }

    /// The next message; `b'!'` when the stream ends.
    pub(super) fn next(&mut self) -> Msg {
        let mut m = Msg {
            ty: b'!',
            severity: String::new(),
            code: String::new(),
            text: String::new(),
        };
        let mut h = [0u8; 5];
        if self.s.read_exact(&mut h).is_err() {
            return m;
        }
        let len = u32::from_be_bytes(h[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if self.s.read_exact(&mut body).is_err() {
            return m;
        }
        m.ty = h[0];
        match h[0] {
            b'E' => {
                for f in body.split(|b| *b == 0) {
                    let v = String::from_utf8_lossy(f.get(1..).unwrap_or_default()).into_owned();
                    match f.first() {
                        Some(b'V' | b'S') => m.severity = v,
                        Some(b'C') => m.code = v,
                        Some(b'M') => m.text = v,
                        _ => {}
                    }
                }
            }
            b'C' => {
                m.text = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body)).into()
            }
            b'D' if body.len() >= 6 => {
                let n = i32::from_be_bytes(body[2..6].try_into().unwrap());
                if n >= 0 {
                    m.text = String::from_utf8_lossy(&body[6..6 + n as usize]).into();
                }
            }
            b'v' | b'R' => m.text = format!("{body:?}"),
            _ => {}
        }
        m
    }

    /// Messages up to ReadyForQuery or the end of the stream (`b'!'`).
    pub(super) fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self.next();
            let end = m.ty == b'Z' || m.ty == b'!';
            out.push(m);
            if end {
                return out;
            }
        }
    }

    pub(super) fn query(&mut self, sql: &str) -> Vec<Msg> {
        self.send(b'Q', &cstr(sql));
        self.until_ready()
    }

    /// Whether the server closed the connection within `t`, reading (and
    /// dropping) what it sends until then.
    pub(super) fn closed_within(&mut self, t: Duration) -> bool {
        self.s.set_read_timeout(Some(t)).unwrap();
        let at = Instant::now();
        let mut buf = [0u8; 256];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) if at.elapsed() < t => {}
                Ok(_) => return false,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

pub(super) fn types(msgs: &[Msg]) -> String {
    msgs.iter().map(|m| m.ty as char).collect()
}

/// The (severity, SQLSTATE) of each error in `msgs`.
pub(super) fn errors(msgs: &[Msg]) -> Vec<(String, String)> {
    msgs.iter()
        .filter(|m| m.ty == b'E')
        .map(|m| (m.severity.clone(), m.code.clone()))
        .collect()
}

fn fatal(code: &str) -> Vec<(String, String)> {
    vec![("FATAL".into(), code.into())]
}

fn error(code: &str) -> Vec<(String, String)> {
    vec![("ERROR".into(), code.into())]
}

fn balance(addr: SocketAddr, aid: i64) -> String {
    let mut w = Wire::login(addr);
    let msgs = w.query(&format!("CALL tpcb_balance({aid})"));
    let row = msgs.iter().find(|m| m.ty == b'D').expect("a row");
    row.text.clone()
}

#[test]
fn a_statement_hidden_after_a_query_s_end_never_runs() {
    let server = start(local());
    let addr = server.local_addr();
    // What a proxy that frames by length sees: one Query, of
    // tpcb_balance. What follows its NUL, inside its stated length, is a
    // second Query.
    let mut body = cstr("CALL tpcb_balance(1)");
    body.extend(message(b'Q', &cstr("CALL tpcb(1, 1, 1, 424242)")));
    let mut w = Wire::login(addr);
    w.send(b'Q', &body);
    let msgs = w.until_ready();
    assert_eq!(errors(&msgs), fatal("08P01"), "{msgs:?}");
    assert_eq!(msgs.last().unwrap().ty, b'!', "{msgs:?}");
    assert_eq!(balance(addr, 1), "0", "the hidden statement ran");
    server.shutdown().unwrap();
}

#[test]
fn a_header_that_lies_is_refused_before_its_body_is_held() {
    let server = start(ServerOptions {
        password: Some("s3cret".into()),
        max_message_bytes: 1 << 30,
        ..local()
    });
    let addr = server.local_addr();
    // Before login: a Sync whose length covers the header of a 1 GiB
    // Query, then bytes of that Query. The server must refuse at the
    // Sync (a Sync is 4 bytes; before login only password messages pass),
    // not wait for a gigabyte.
    let mut w = Wire::open(addr);
    w.raw(&startup(196608, "u"));
    let first = w.next();
    assert_eq!(first.ty, b'R', "{first:?}");
    let mut lie = vec![b'S'];
    lie.extend_from_slice(&9u32.to_be_bytes());
    lie.push(b'Q');
    lie.extend_from_slice(&(1u32 << 30).to_be_bytes());
    w.raw(&lie);
    w.raw(&vec![b'x'; 64 * 1024]);
    let msgs = w.until_ready();
    assert_eq!(errors(&msgs), fatal("08P01"), "{msgs:?}");
    assert_eq!(msgs.last().unwrap().ty, b'!');
    // The same after login, on a server without a password.
    drop(server);
    let server = start(ServerOptions {
        max_message_bytes: 1 << 30,
        ..local()
    });
    let mut w = Wire::login(server.local_addr());
    w.raw(&lie);
    let msgs = w.until_ready();
    assert_eq!(errors(&msgs), fatal("08P01"), "{msgs:?}");
    server.shutdown().unwrap();
}

/// A password server; each case, sent before login, must be answered
/// FATAL 08P01 and closed, and the server must go on.
#[test]
fn malformed_messages_before_login_are_fatal_08p01_never_a_panic() {
    let server = start(ServerOptions {
        password: Some("s3cret".into()),
        ..local()
    });
    let addr = server.local_addr();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty Execute", message(b'E', b"")),
        ("empty Describe", message(b'D', b"")),
        ("empty Close", message(b'C', b"")),
        ("short Bind", message(b'B', b"\0\0\0")),
        ("short Parse", message(b'P', b"\0x\0")),
        ("cleartext password", message(b'p', &cstr("s3cret"))),
        (
            "short SASLInitialResponse",
            message(b'p', b"SCRAM-SHA-256\0\0\0"),
        ),
        ("a length under 4", vec![b'p', 0, 0, 0, 2]),
        ("a Query", message(b'Q', &cstr("CALL tpcb_balance(1)"))),
        ("unknown type", message(b'y', b"junk")),
    ];
    for (what, bytes) in cases {
        let mut w = Wire::open(addr);
        w.raw(&startup(196608, "u"));
        assert_eq!(w.next().ty, b'R', "{what}");
        w.raw(&bytes);
        let msgs = w.until_ready();
        assert_eq!(errors(&msgs), fatal("08P01"), "{what}: {msgs:?}");
        assert_eq!(types(&msgs), "E!", "{what}: {msgs:?}");
    }
    // Malformed startup messages.
    for (what, bytes) in [
        ("startup without its terminator", {
            let mut s = startup(196608, "u");
            let n = s.len();
            s.truncate(n - 1);
            s[3] -= 1;
            s
        }),
        ("a length of 4", vec![0, 0, 0, 4]),
        ("an SSLRequest of 12 bytes", {
            let mut s = 12u32.to_be_bytes().to_vec();
            s.extend_from_slice(&80_877_103u32.to_be_bytes());
            s.extend_from_slice(&[0; 4]);
            s
        }),
    ] {
        let mut w = Wire::open(addr);
        w.raw(&bytes);
        let msgs = w.until_ready();
        assert_eq!(errors(&msgs), fatal("08P01"), "{what}: {msgs:?}");
    }
    // Still serving: a driver logs in and calls.
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
    server.shutdown().unwrap();
}

#[test]
fn malformed_messages_after_login_are_fatal_08p01_never_a_panic() {
    let server = start(local());
    let addr = server.local_addr();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty Execute", message(b'E', b"")),
        ("Execute without max_rows", message(b'E', b"\0")),
        ("empty Describe", message(b'D', b"")),
        ("Describe without a name", message(b'D', b"S")),
        ("empty Close", message(b'C', b"")),
        ("short Bind", message(b'B', b"\0\0\0")),
        ("Bind with a parameter past its end", {
            let mut b = b"\0\0\0\0\0\x01".to_vec();
            b.extend_from_slice(&100i32.to_be_bytes());
            message(b'B', &b)
        }),
        ("Bind with a length of -2", {
            let mut b = b"\0\0\0\0\0\x01".to_vec();
            b.extend_from_slice(&(-2i32).to_be_bytes());
            b.extend_from_slice(&[0, 0]);
            message(b'B', &b)
        }),
        ("short Parse", message(b'P', b"\0x\0")),
        (
            "Parse with types past its end",
            message(b'P', b"\0x\0\0\x05\0\0"),
        ),
        (
            "Query without a NUL",
            message(b'Q', b"CALL tpcb_balance(1)"),
        ),
        (
            "Query with bytes after its NUL",
            message(b'Q', b"SHOW islands\0xx"),
        ),
        ("Sync with a body", message(b'S', b"x")),
        ("Terminate with a body", message(b'X', b"x")),
        ("a password message", message(b'p', &cstr("pw"))),
        ("a length under 4", vec![b'Q', 0, 0, 0, 3]),
    ];
    for (what, bytes) in cases {
        let mut w = Wire::login(addr);
        w.raw(&bytes);
        let msgs = w.until_ready();
        assert_eq!(errors(&msgs), fatal("08P01"), "{what}: {msgs:?}");
        assert_eq!(types(&msgs), "E!", "{what}: {msgs:?}");
    }
    assert_eq!(balance(addr, 2), "0");
    server.shutdown().unwrap();
}

#[test]
fn silent_and_refused_sockets_are_closed() {
    let server = start(ServerOptions {
        max_connections: 2,
        auth_timeout: Some(Duration::from_secs(3)),
        password: Some("s3cret".into()),
        ..local()
    });
    let addr = server.local_addr();
    // Two silent sockets take both slots ...
    let mut silent: Vec<Wire> = (0..2).map(|_| Wire::open(addr)).collect();
    std::thread::sleep(Duration::from_millis(100));
    // ... so more are refused: each is answered 53300 at once (without
    // sending a thing) and closed.
    let t = Instant::now();
    for _ in 0..10 {
        let mut w = Wire::open(addr);
        let m = w.next();
        assert_eq!(
            (m.severity.as_str(), m.code.as_str()),
            ("FATAL", "53300"),
            "{m:?}"
        );
        assert!(
            w.closed_within(Duration::from_secs(5)),
            "a refused socket stayed open"
        );
    }
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // The silent ones are closed after the authentication timeout, well
    // before the idle timeout (an hour).
    for w in &mut silent {
        assert!(
            w.closed_within(Duration::from_secs(15)),
            "a silent socket kept its slot"
        );
    }
    // So is one that starts and never gives its password.
    let mut w = Wire::open(addr);
    w.raw(&startup(196608, "u"));
    assert_eq!(w.next().ty, b'R');
    assert!(w.closed_within(Duration::from_secs(15)));
    // Slots are free again; a client that logs in in time is served past
    // the authentication timeout.
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
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(
            super::serve::simple_one(&c, "CALL tpcb_balance(3)").await,
            "0"
        );
    });
    server.shutdown().unwrap();
}

fn bind(stmt: &str, formats: &[i16], params: &[&str], results: &[i16]) -> Vec<u8> {
    let mut b = cstr("");
    b.extend(cstr(stmt));
    b.extend_from_slice(&(formats.len() as u16).to_be_bytes());
    for f in formats {
        b.extend_from_slice(&f.to_be_bytes());
    }
    b.extend_from_slice(&(params.len() as u16).to_be_bytes());
    for p in params {
        b.extend_from_slice(&(p.len() as i32).to_be_bytes());
        b.extend_from_slice(p.as_bytes());
    }
    b.extend_from_slice(&(results.len() as u16).to_be_bytes());
    for r in results {
        b.extend_from_slice(&r.to_be_bytes());
    }
    b
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut p = cstr(name);
    p.extend(cstr(sql));
    p.extend_from_slice(&0u16.to_be_bytes());
    p
}

#[test]
fn extended_protocol_answers_as_postgresql_does() {
    let server = start(local());
    let addr = server.local_addr();
    let mut w = Wire::login(addr);
    w.send(b'P', &parse("s1", "CALL tpcb_balance($1)"));
    w.send(b'S', b"");
    assert_eq!(types(&w.until_ready()), "1Z");
    // Format codes other than 0 and 1: 22023, for parameters and results.
    for (formats, results) in [
        (&[2i16][..], &[][..]),
        (&[-1], &[]),
        (&[7], &[]),
        (&[], &[2]),
    ] {
        w.send(b'B', &bind("s1", formats, &["1"], results));
        w.send(b'E', b"\0\0\0\0\0");
        w.send(b'S', b"");
        let msgs = w.until_ready();
        assert_eq!(
            errors(&msgs),
            error("22023"),
            "{formats:?} {results:?}: {msgs:?}"
        );
    }
    // Two format codes for one parameter: 08P01, and the connection goes on.
    w.send(b'B', &bind("s1", &[0, 0], &["1"], &[]));
    w.send(b'E', b"\0\0\0\0\0");
    w.send(b'S', b"");
    let msgs = w.until_ready();
    assert_eq!(errors(&msgs), error("08P01"), "{msgs:?}");
    // A Parse of a name in use: 42P05; the statement it names is kept.
    w.send(b'P', &parse("s1", "CALL tpcb(1, 1, 1, 5)"));
    w.send(b'S', b"");
    let msgs = w.until_ready();
    assert_eq!(errors(&msgs), error("42P05"), "{msgs:?}");
    w.send(b'B', &bind("s1", &[], &["1"], &[]));
    w.send(b'E', b"\0\0\0\0\0");
    w.send(b'S', b"");
    let msgs = w.until_ready();
    assert_eq!(types(&msgs), "2DCZ", "{msgs:?}");
    assert_eq!(msgs[1].text, "0", "s1 was replaced: {msgs:?}");
    // The unnamed statement may be replaced.
    for sql in ["CALL tpcb_balance(1)", "CALL tpcb_balance(2)"] {
        w.send(b'P', &parse("", sql));
        w.send(b'S', b"");
        assert_eq!(types(&w.until_ready()), "1Z");
    }
    // Describe of what does not exist: 26000 and 34000, then goes on.
    w.send(b'D', &[b"S".to_vec(), cstr("nope")].concat());
    w.send(b'S', b"");
    assert_eq!(errors(&w.until_ready()), error("26000"));
    w.send(b'D', &[b"P".to_vec(), cstr("nope")].concat());
    w.send(b'S', b"");
    assert_eq!(errors(&w.until_ready()), error("34000"));
    // A target type other than S and P: 08P01, an ERROR.
    for ty in [b'D', b'C'] {
        w.send(ty, &[b"X".to_vec(), cstr("s1")].concat());
        w.send(b'S', b"");
        let msgs = w.until_ready();
        assert_eq!(errors(&msgs), error("08P01"), "{}: {msgs:?}", ty as char);
    }
    // Close of a name that does not exist: CloseComplete.
    w.send(b'C', &[b"S".to_vec(), cstr("nope")].concat());
    w.send(b'S', b"");
    assert_eq!(types(&w.until_ready()), "3Z");
    // A query that is not UTF-8: 22021, and the connection goes on.
    w.send(b'Q', b"CALL tpcb_balance(\xff)\0");
    let msgs = w.until_ready();
    assert_eq!(errors(&msgs), error("22021"), "{msgs:?}");
    assert_eq!(types(&w.query("CALL tpcb_balance(1)")), "TDCZ");
    server.shutdown().unwrap();
}

#[test]
fn startup_negotiates_only_newer_minors_and_a_bad_password_is_fatal_alone() {
    let server = start(local());
    let addr = server.local_addr();
    // 3.1 is served as is (no NegotiateProtocolVersion); 3.5 is told 3.2.
    for (minor, negotiated) in [(0u32, false), (1, false), (2, false), (5, true)] {
        let mut w = Wire::open(addr);
        w.raw(&startup(3 << 16 | minor, "raw"));
        let msgs = w.until_ready();
        assert_eq!(msgs.last().unwrap().ty, b'Z', "3.{minor}: {msgs:?}");
        assert_eq!(
            msgs.iter().any(|m| m.ty == b'v'),
            negotiated,
            "3.{minor}: {msgs:?}"
        );
    }
    drop(server);
    // A wrong password: FATAL 28P01 naming the startup's user, then closed
    // with no ReadyForQuery.
    let server = start(ServerOptions {
        password: Some("s3cret".into()),
        ..local()
    });
    let mut w = Wire::open(server.local_addr());
    w.raw(&startup(196608, "alice"));
    assert_eq!(w.next().ty, b'R');
    let mut init = cstr("SCRAM-SHA-256");
    let first = b"n,,n=*,r=abcdefghijklmnop";
    init.extend_from_slice(&(first.len() as i32).to_be_bytes());
    init.extend_from_slice(first);
    w.send(b'p', &init);
    let server_first = w.next();
    assert_eq!(server_first.ty, b'R', "{server_first:?}");
    // The server's nonce, from its first message (r=…,s=…,i=…).
    let raw: Vec<u8> = server_first
        .text
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .map(|b| b.parse().unwrap())
        .collect();
    let text = String::from_utf8_lossy(&raw[4..]).into_owned();
    let nonce = text.split(',').find_map(|f| f.strip_prefix("r=")).unwrap();
    let proof = "A".repeat(43) + "=";
    w.send(b'p', format!("c=biws,r={nonce},p={proof}").as_bytes());
    let msgs = w.until_ready();
    assert_eq!(types(&msgs), "E!", "{msgs:?}");
    assert_eq!(errors(&msgs), fatal("28P01"));
    assert!(msgs[0].text.contains("\"alice\""), "{msgs:?}");
    server.shutdown().unwrap();
}
