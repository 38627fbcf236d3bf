//! A raw PostgreSQL protocol client for the server tests: messages written
//! by hand, answers read back as (type, text), for what drivers never send
//! or do not show.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A raw protocol connection. Each answer is read as its type and a text:
/// an error's SQLSTATE, a CommandComplete's tag, a DataRow's values joined
/// with `|` (`NULL` for a null), a ParameterStatus's `name=value`, a
/// RowDescription's column names joined with `,`.
pub(super) struct Raw {
    pub(super) s: TcpStream,
    /// The process id and secret key of BackendKeyData.
    pub(super) key: Option<(i32, Vec<u8>)>,
    /// What the server answered the startup message with.
    pub(super) startup: Vec<(u8, String)>,
}

/// A message of type `ty` with `body`.
pub(super) fn message(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![ty];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A startup message at protocol `version` for `user`, database `islands`.
pub(super) fn startup(version: u32, user: &str) -> Vec<u8> {
    let mut body = version.to_be_bytes().to_vec();
    for kv in ["user", user, "database", "islands"] {
        body.extend_from_slice(kv.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

/// `s` as a C string.
pub(super) fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn cstrs(body: &[u8]) -> Vec<String> {
    body.split(|b| *b == 0)
        .map(|f| String::from_utf8_lossy(f).to_string())
        .collect()
}

impl Raw {
    pub(super) fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut r = Raw {
            s,
            key: None,
            startup: Vec::new(),
        };
        r.s.write_all(&startup(196608, "raw")).unwrap();
        r.startup = r.until_ready();
        r
    }

    pub(super) fn send(&mut self, ty: u8, body: &[u8]) {
        self.s.write_all(&message(ty, body)).unwrap();
    }

    /// One message (see [`Raw`]); `!` once the stream ends.
    pub(super) fn next(&mut self) -> (u8, String) {
        let mut h = [0u8; 5];
        if self.s.read_exact(&mut h).is_err() {
            return (b'!', "closed".into());
        }
        let len = u32::from_be_bytes(h[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        self.s.read_exact(&mut body).unwrap();
        let what = match h[0] {
            b'C' => String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body)).into(),
            b'E' => body
                .split(|b| *b == 0)
                .find(|f| f.first() == Some(&b'C'))
                .map(|f| String::from_utf8_lossy(&f[1..]).into())
                .unwrap_or_default(),
            b'K' if body.len() >= 8 => {
                let pid = i32::from_be_bytes(body[..4].try_into().unwrap());
                self.key = Some((pid, body[4..].to_vec()));
                String::new()
            }
            b'S' => {
                let v = cstrs(&body);
                format!("{}={}", v[0], v.get(1).cloned().unwrap_or_default())
            }
            b'D' => {
                let n = u16::from_be_bytes(body[..2].try_into().unwrap()) as usize;
                let mut at = 2;
                let mut vals = Vec::with_capacity(n);
                for _ in 0..n {
                    let l = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
                    at += 4;
                    if l < 0 {
                        vals.push("NULL".to_string());
                    } else {
                        let l = l as usize;
                        vals.push(String::from_utf8_lossy(&body[at..at + l]).into());
                        at += l;
                    }
                }
                vals.join("|")
            }
            b'T' => {
                let n = u16::from_be_bytes(body[..2].try_into().unwrap()) as usize;
                let mut at = 2;
                let mut names = Vec::with_capacity(n);
                for _ in 0..n {
                    let end = at + body[at..].iter().position(|b| *b == 0).unwrap();
                    names.push(String::from_utf8_lossy(&body[at..end]).to_string());
                    at = end + 1 + 18;
                }
                names.join(",")
            }
            b't' => {
                let n = u16::from_be_bytes(body[..2].try_into().unwrap()) as usize;
                (0..n)
                    .map(|i| {
                        let at = 2 + 4 * i;
                        u32::from_be_bytes(body[at..at + 4].try_into().unwrap()).to_string()
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }
            b'Z' => (body[0] as char).to_string(),
            _ => String::new(),
        };
        (h[0], what)
    }

    /// Messages up to ReadyForQuery (or the end of the stream).
    pub(super) fn until_ready(&mut self) -> Vec<(u8, String)> {
        let mut out = Vec::new();
        loop {
            let m = self.next();
            let end = m.0 == b'Z' || m.0 == b'!';
            out.push(m);
            if end {
                return out;
            }
        }
    }

    pub(super) fn query(&mut self, sql: &str) -> Vec<(u8, String)> {
        let mut b = sql.as_bytes().to_vec();
        b.push(0);
        self.send(b'Q', &b);
        self.until_ready()
    }
}

/// The SQLSTATEs of the errors among `msgs`.
pub(super) fn errors(msgs: &[(u8, String)]) -> Vec<&str> {
    msgs.iter()
        .filter(|(t, _)| *t == b'E')
        .map(|(_, c)| c.as_str())
        .collect()
}

/// The texts of the messages of type `ty` among `msgs`.
pub(super) fn of(ty: u8, msgs: &[(u8, String)]) -> Vec<&str> {
    msgs.iter()
        .filter(|(t, _)| *t == ty)
        .map(|(_, c)| c.as_str())
        .collect()
}

/// Parse of statement `name`, no declared types.
pub(super) fn parse_msg(name: &str, sql: &str) -> Vec<u8> {
    let mut b = name.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(sql.as_bytes());
    b.extend_from_slice(&[0, 0, 0]);
    b
}

/// Bind of portal `portal` to statement `stmt`, text parameters and results.
pub(super) fn bind_msg(portal: &str, stmt: &str, params: &[&str]) -> Vec<u8> {
    let mut b = portal.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(stmt.as_bytes());
    b.push(0);
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&(params.len() as u16).to_be_bytes());
    for p in params {
        b.extend_from_slice(&(p.len() as u32).to_be_bytes());
        b.extend_from_slice(p.as_bytes());
    }
    b.extend_from_slice(&0u16.to_be_bytes());
    b
}

/// Execute of portal `portal`, all its rows.
pub(super) fn execute_msg(portal: &str) -> Vec<u8> {
    let mut b = portal.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(&0u32.to_be_bytes());
    b
}
