//! The handshake that opens every connection between two islands, before any
//! batch: who the peer is, whether it runs the same deployment, and proof
//! that it knows the deployment's secret.
//!
//! Each side sends a HELLO (its [`Hello`] and a fresh 32-byte nonce), then a
//! PROOF: HMAC-SHA256(secret, context ‖ role ‖ initiator's nonce ‖
//! responder's nonce ‖ its HELLO's bytes). The role byte keeps a peer from
//! reflecting our own proof back; the nonces make every proof fresh. Each
//! side checks the other's proof (in constant time) and then compares the
//! peer's [`Hello`] with what it [`Expect`]s; then each sends a VERDICT
//! (accepted, or refused with the reason) and reads the other's. A
//! connection is open only when both accepted: no batch is read before.
//!
//! Messages are `[kind u8][len u16][body]`, bodies at most [`MAX_MESSAGE`]
//! bytes, checked before anything is read into memory. The secret is never
//! written anywhere; [`Secret`]'s `Debug` does not show it.
//!
//! [`Refused`] names what differs, e.g. `deployment id: ours 3a…, theirs
//! 7f…`; the caller logs it once and counts it.

use super::join::Kind;
use crate::route::IslandId;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::Path;

/// The version of the handshake and of the stream format behind it (2: the
/// HELLO names the transport kind, and frames of kind 0x44 carry forwarded
/// blocks; 3: frames of kind 0x45 renew forwarded blocks' leases).
pub const WIRE_VERSION: u16 = 3;
/// Longest handshake message body.
pub const MAX_MESSAGE: usize = 8 << 10;
/// Longest build id carried.
pub const MAX_BUILD_ID: usize = 128;
/// Most islands a HELLO may list.
pub const MAX_ISLANDS: usize = 1024;
/// Shortest secret accepted.
pub const MIN_SECRET: usize = 16;

const NONCE: usize = 32;
const MAC: usize = 32;
const CONTEXT: &[u8] = b"islands handshake v1";
/// First bytes of a HELLO body.
const HELLO_MAGIC: &[u8; 4] = b"ISLH";

const K_HELLO: u8 = 1;
const K_PROOF: u8 = 2;
const K_ACCEPT: u8 = 3;
const K_REFUSE: u8 = 4;

/// This build: the crate version, and the commit when the build sets
/// `ISLANDS_GIT_COMMIT` in its environment.
pub fn build_id() -> String {
    match option_env!("ISLANDS_GIT_COMMIT") {
        Some(c) => format!("islands {} ({c})", env!("CARGO_PKG_VERSION")),
        None => format!("islands {}", env!("CARGO_PKG_VERSION")),
    }
}

/// What an island says about itself when it connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub wire_version: u16,
    /// The transport the island runs (`uds`, or `shm` whose rings are set
    /// up over the connection): both sides must run the same.
    pub transport: Kind,
    /// Informative (logged, not compared): builds of one wire version talk.
    pub build_id: String,
    pub deployment: u128,
    pub island: IslandId,
    /// Bumped at each open of the island (see its `CONTROL` file).
    pub incarnation: u64,
    pub schema: u64,
    pub catalog: u64,
    /// Workers of each island of the deployment.
    pub workers: Vec<u32>,
}

impl Hello {
    /// Appends the encoding: `ISLH`, wire version u16, transport kind u8
    /// (see [`kind_code`]), build id (u8 length + bytes), deployment u128,
    /// island u16, incarnation u64, schema u64, catalog u64, island count
    /// u16, then a u32 per island.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), Refused> {
        if self.build_id.len() > MAX_BUILD_ID {
            return Err(Refused::Malformed(format!(
                "our build id is {} bytes, more than {MAX_BUILD_ID}",
                self.build_id.len()
            )));
        }
        if self.workers.len() > MAX_ISLANDS {
            return Err(Refused::Malformed(format!(
                "our hello lists {} islands, more than {MAX_ISLANDS}",
                self.workers.len()
            )));
        }
        out.extend_from_slice(HELLO_MAGIC);
        out.extend_from_slice(&self.wire_version.to_le_bytes());
        out.push(kind_code(self.transport));
        out.push(self.build_id.len() as u8);
        out.extend_from_slice(self.build_id.as_bytes());
        out.extend_from_slice(&self.deployment.to_le_bytes());
        out.extend_from_slice(&self.island.to_le_bytes());
        out.extend_from_slice(&self.incarnation.to_le_bytes());
        out.extend_from_slice(&self.schema.to_le_bytes());
        out.extend_from_slice(&self.catalog.to_le_bytes());
        out.extend_from_slice(&(self.workers.len() as u16).to_le_bytes());
        for w in &self.workers {
            out.extend_from_slice(&w.to_le_bytes());
        }
        Ok(())
    }

    /// Decodes a HELLO body; every length is checked before it is used. A
    /// HELLO of another wire version is refused as such before the rest is
    /// read (its layout may differ).
    pub fn decode(b: &[u8]) -> Result<Hello, Refused> {
        let mut r = Cursor { b, at: 0 };
        if r.take(4)? != HELLO_MAGIC {
            return Err(Refused::Malformed("hello magic".into()));
        }
        let wire_version = r.u16()?;
        if wire_version != WIRE_VERSION {
            return Err(Refused::WireVersion {
                ours: WIRE_VERSION,
                theirs: wire_version,
            });
        }
        let code = r.take(1)?[0];
        let transport = kind_of_code(code)
            .ok_or_else(|| Refused::Malformed(format!("transport kind {code}")))?;
        let n = r.take(1)?[0] as usize;
        if n > MAX_BUILD_ID {
            return Err(Refused::Malformed(format!("build id of {n} bytes")));
        }
        let build_id = String::from_utf8_lossy(r.take(n)?).into_owned();
        let deployment = u128::from_le_bytes(r.array()?);
        let island = r.u16()?;
        let incarnation = r.u64()?;
        let schema = r.u64()?;
        let catalog = r.u64()?;
        let islands = usize::from(r.u16()?);
        if islands > MAX_ISLANDS {
            return Err(Refused::Malformed(format!("{islands} islands")));
        }
        let mut workers = Vec::with_capacity(islands);
        for _ in 0..islands {
            workers.push(u32::from_le_bytes(r.array()?));
        }
        if r.at != b.len() {
            return Err(Refused::Malformed(format!(
                "{} bytes after the hello",
                b.len() - r.at
            )));
        }
        Ok(Hello {
            wire_version,
            transport,
            build_id,
            deployment,
            island,
            incarnation,
            schema,
            catalog,
            workers,
        })
    }
}

/// A transport kind's byte in a HELLO.
fn kind_code(k: Kind) -> u8 {
    match k {
        Kind::InProc => 0,
        Kind::Shm => 1,
        Kind::Uds => 2,
    }
}

/// The transport kind of a HELLO's byte (`None`: no kind this build knows).
fn kind_of_code(code: u8) -> Option<Kind> {
    Kind::ALL.into_iter().find(|&k| kind_code(k) == code)
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Refused> {
        if self.b.len() - self.at < n {
            return Err(Refused::Malformed(format!(
                "hello truncated at byte {}",
                self.at
            )));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Refused> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn u16(&mut self) -> Result<u16, Refused> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, Refused> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// What this side requires of the peer's [`Hello`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub wire_version: u16,
    pub transport: Kind,
    pub deployment: u128,
    pub schema: u64,
    pub catalog: u64,
    pub workers: Vec<u32>,
    /// Our own island (a peer claiming it is a duplicate).
    pub me: IslandId,
    /// The island this connection must reach (the connecting side knows
    /// whom it dialled); `None` on the accepting side.
    pub peer: Option<IslandId>,
    /// Islands that already have a live connection here: a second one is
    /// refused as a duplicate.
    pub connected: Vec<IslandId>,
}

impl Expect {
    /// The peer must run what `me` runs.
    pub fn matching(me: &Hello) -> Expect {
        Expect {
            wire_version: me.wire_version,
            transport: me.transport,
            deployment: me.deployment,
            schema: me.schema,
            catalog: me.catalog,
            workers: me.workers.clone(),
            me: me.island,
            peer: None,
            connected: Vec::new(),
        }
    }

    /// The first difference between `peer` and what is expected.
    pub fn check(&self, peer: &Hello) -> Result<(), Refused> {
        if peer.wire_version != self.wire_version {
            return Err(Refused::WireVersion {
                ours: self.wire_version,
                theirs: peer.wire_version,
            });
        }
        if peer.transport != self.transport {
            return Err(Refused::Transport {
                ours: self.transport,
                theirs: peer.transport,
            });
        }
        if peer.deployment != self.deployment {
            return Err(Refused::Deployment {
                ours: self.deployment,
                theirs: peer.deployment,
            });
        }
        if peer.schema != self.schema {
            return Err(Refused::Schema {
                ours: self.schema,
                theirs: peer.schema,
            });
        }
        if peer.catalog != self.catalog {
            return Err(Refused::Catalog {
                ours: self.catalog,
                theirs: peer.catalog,
            });
        }
        if peer.workers != self.workers {
            return Err(Refused::Workers {
                ours: self.workers.clone(),
                theirs: peer.workers.clone(),
            });
        }
        if usize::from(peer.island) >= self.workers.len() {
            return Err(Refused::IslandOutOfRange {
                island: peer.island,
                islands: self.workers.len(),
            });
        }
        if let Some(want) = self.peer {
            if peer.island != want {
                return Err(Refused::WrongIsland {
                    expected: want,
                    theirs: peer.island,
                });
            }
        }
        if peer.island == self.me || self.connected.contains(&peer.island) {
            return Err(Refused::Duplicate {
                island: peer.island,
            });
        }
        Ok(())
    }
}

/// Why a handshake did not open a connection. Each variant names what
/// differs; none carries the secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    #[error("handshake i/o: {0}")]
    Io(#[from] io::Error),
    #[error("malformed handshake: {0}")]
    Malformed(String),
    #[error("wire version: ours {ours}, theirs {theirs}")]
    WireVersion { ours: u16, theirs: u16 },
    #[error("transport: ours {ours}, theirs {theirs} (both sides must run the same transport)")]
    Transport { ours: Kind, theirs: Kind },
    #[error("deployment id: ours {ours:032x}, theirs {theirs:032x}")]
    Deployment { ours: u128, theirs: u128 },
    #[error("schema fingerprint: ours {ours:016x}, theirs {theirs:016x}")]
    Schema { ours: u64, theirs: u64 },
    #[error("catalog fingerprint: ours {ours:016x}, theirs {theirs:016x}")]
    Catalog { ours: u64, theirs: u64 },
    #[error("workers per island: ours {ours:?}, theirs {theirs:?}")]
    Workers { ours: Vec<u32>, theirs: Vec<u32> },
    #[error("island id: {island} is out of range, the deployment has {islands} islands")]
    IslandOutOfRange { island: IslandId, islands: usize },
    #[error("island id: expected island {expected}, theirs is {theirs}")]
    WrongIsland {
        expected: IslandId,
        theirs: IslandId,
    },
    #[error("island id: island {island} is already connected here")]
    Duplicate { island: IslandId },
    #[error("authentication: the peer's proof does not match our secret")]
    BadMac,
    #[error("refused by the peer: {0}")]
    ByPeer(String),
}

impl Refused {
    /// Whether this is a refusal (counted) rather than a connection that
    /// failed underneath the handshake.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, Refused::Io(_))
    }
}

/// The deployment's shared secret. Never printed, never sent.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // Best effort: do not leave the key in freed memory.
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// Why a secret was not accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    #[error("secret file {path}: {err}")]
    Io { path: String, err: io::Error },
    #[error(
        "secret file {path} has mode {mode:o}: group and other must have no access (chmod 600)"
    )]
    Mode { path: String, mode: u32 },
    #[error("secret {what} is {len} bytes, shorter than {MIN_SECRET}")]
    Short { what: String, len: usize },
    #[error("secret environment variable {var} is not set or not valid text")]
    Env { var: String },
}

impl Secret {
    /// A secret of these bytes (at least [`MIN_SECRET`]).
    pub fn new(bytes: Vec<u8>) -> Result<Secret, SecretError> {
        Secret::checked(bytes, "given".into())
    }

    /// A fresh random secret, for islands that one process starts and
    /// connects itself (tests, benchmarks).
    pub fn random() -> Secret {
        Secret(rand::random::<[u8; 32]>().to_vec())
    }

    fn checked(bytes: Vec<u8>, what: String) -> Result<Secret, SecretError> {
        if bytes.len() < MIN_SECRET {
            return Err(SecretError::Short {
                what,
                len: bytes.len(),
            });
        }
        Ok(Secret(bytes))
    }

    /// Reads the secret from `path`, refusing a file that group or other
    /// may read or write. One trailing newline is not part of the secret.
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display().to_string();
        let io = |err| SecretError::Io {
            path: shown.clone(),
            err,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SecretError::Mode { path: shown, mode });
        }
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).map_err(io)?;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        Secret::checked(bytes, format!("file {shown}"))
    }

    /// Reads the secret from the environment variable `var`.
    pub fn from_env(var: &str) -> Result<Secret, SecretError> {
        let v = std::env::var(var).map_err(|_| SecretError::Env { var: var.into() })?;
        Secret::checked(v.into_bytes(), format!("in {var}"))
    }

    fn proof(&self, role: u8, nonces: (&[u8; NONCE], &[u8; NONCE]), hello: &[u8]) -> [u8; MAC] {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        m.update(CONTEXT);
        m.update(&[role]);
        m.update(nonces.0);
        m.update(nonces.1);
        m.update(hello);
        m.finalize().into_bytes().into()
    }

    fn verify(
        &self,
        role: u8,
        nonces: (&[u8; NONCE], &[u8; NONCE]),
        hello: &[u8],
        tag: &[u8],
    ) -> bool {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        m.update(CONTEXT);
        m.update(&[role]);
        m.update(nonces.0);
        m.update(nonces.1);
        m.update(hello);
        m.verify_slice(tag).is_ok()
    }
}

fn send(w: &mut impl Write, kind: u8, body: &[u8]) -> Result<(), Refused> {
    debug_assert!(body.len() <= MAX_MESSAGE);
    let mut m = Vec::with_capacity(3 + body.len());
    m.push(kind);
    m.extend_from_slice(&(body.len() as u16).to_le_bytes());
    m.extend_from_slice(body);
    w.write_all(&m)?;
    w.flush()?;
    Ok(())
}

/// Reads one message; refuses a length over [`MAX_MESSAGE`] before reading
/// its body. A peer's REFUSE in place of the expected kind ends the handshake.
fn recv(r: &mut impl Read, want: u8) -> Result<Vec<u8>, Refused> {
    let mut h = [0u8; 3];
    r.read_exact(&mut h)?;
    let len = usize::from(u16::from_le_bytes([h[1], h[2]]));
    if len > MAX_MESSAGE {
        return Err(Refused::Malformed(format!(
            "message of {len} bytes, more than {MAX_MESSAGE}"
        )));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    match h[0] {
        k if k == want => Ok(body),
        K_REFUSE => Err(Refused::ByPeer(
            String::from_utf8_lossy(&body).chars().take(512).collect(),
        )),
        k => Err(Refused::Malformed(format!(
            "message kind {k} where {want} was expected"
        ))),
    }
}

/// Runs the handshake on a connected stream; returns the peer's [`Hello`]
/// once both sides accepted. `initiator`: this side connected. The caller
/// sets the stream's timeouts, logs a refusal once and counts it.
pub fn handshake<S: Read + Write>(
    stream: &mut S,
    me: &Hello,
    expect: &Expect,
    secret: &Secret,
    initiator: bool,
) -> Result<Hello, Refused> {
    let mut ours = Vec::with_capacity(64 + 4 * me.workers.len());
    me.encode(&mut ours)?;
    let nonce: [u8; NONCE] = rand::random();
    let mut hello_msg = ours.clone();
    hello_msg.extend_from_slice(&nonce);
    if hello_msg.len() > MAX_MESSAGE {
        return Err(Refused::Malformed("our hello is too long".into()));
    }
    send(stream, K_HELLO, &hello_msg)?;
    let theirs = recv(stream, K_HELLO)?;
    if theirs.len() < NONCE {
        return Err(Refused::Malformed("hello without a nonce".into()));
    }
    let (their_hello, their_nonce) = theirs.split_at(theirs.len() - NONCE);
    let their_nonce: &[u8; NONCE] = their_nonce.try_into().expect("NONCE bytes");
    // Both sides order the nonces the same way: the initiator's first.
    let nonces = if initiator {
        (&nonce, their_nonce)
    } else {
        (their_nonce, &nonce)
    };
    let (my_role, their_role) = if initiator { (0, 1) } else { (1, 0) };
    send(stream, K_PROOF, &secret.proof(my_role, nonces, &ours))?;
    let proof = recv(stream, K_PROOF)?;
    let verdict = if secret.verify(their_role, nonces, their_hello, &proof) {
        Hello::decode(their_hello).and_then(|h| expect.check(&h).map(|()| h))
    } else {
        Err(Refused::BadMac)
    };
    match verdict {
        Ok(peer) => {
            // A peer that refused may have closed before our ACCEPT went
            // out; its REFUSE is still readable, and names the reason.
            let sent = send(stream, K_ACCEPT, &[]);
            match recv(stream, K_ACCEPT) {
                Err(refused @ Refused::ByPeer(_)) => Err(refused),
                Err(e) => Err(sent.err().unwrap_or(e)),
                Ok(_) => sent.map(|()| peer),
            }
        }
        Err(why) => {
            // Tell the peer why, so it logs the same line; it may be gone.
            let _ = send(stream, K_REFUSE, why.to_string().as_bytes());
            Err(why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    fn hello(island: IslandId) -> Hello {
        Hello {
            wire_version: WIRE_VERSION,
            transport: Kind::Uds,
            build_id: build_id(),
            deployment: 0x3a00_0000_0000_0000_0000_0000_0000_0001,
            island,
            incarnation: 7,
            schema: 11,
            catalog: 13,
            workers: vec![2, 3, 1],
        }
    }

    fn secret(s: &str) -> Secret {
        Secret::new(s.as_bytes().to_vec()).unwrap()
    }

    type Outcome = Result<Hello, Refused>;

    /// Runs both sides over a socket pair: (initiator's result, responder's).
    fn run(
        a: Hello,
        ea: Expect,
        sa: Secret,
        b: Hello,
        eb: Expect,
        sb: Secret,
    ) -> (Outcome, Outcome) {
        let (mut x, mut y) = UnixStream::pair().unwrap();
        for s in [&x, &y] {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let t = std::thread::spawn(move || handshake(&mut y, &b, &eb, &sb, false));
        let ra = handshake(&mut x, &a, &ea, &sa, true);
        drop(x);
        (ra, t.join().unwrap())
    }

    fn pair_with(change: impl FnOnce(&mut Hello)) -> (Outcome, Outcome) {
        let a = hello(0);
        let mut b = hello(1);
        change(&mut b);
        let ea = Expect::matching(&a);
        let eb = Expect::matching(&b);
        run(
            a,
            ea,
            secret("0123456789abcdef"),
            b,
            eb,
            secret("0123456789abcdef"),
        )
    }

    #[test]
    fn a_round_trip_over_a_socket_pair() {
        let (ra, rb) = pair_with(|_| {});
        assert_eq!(ra.unwrap(), hello(1));
        assert_eq!(rb.unwrap(), hello(0));
    }

    #[test]
    fn every_mismatch_is_refused_with_its_name() {
        type Change = Box<dyn FnOnce(&mut Hello)>;
        let cases: Vec<(&str, Change)> = vec![
            (
                "wire version: ours 3, theirs 4",
                Box::new(|h| h.wire_version = 4),
            ),
            (
                "wire version: ours 3, theirs 2",
                Box::new(|h| h.wire_version = 2),
            ),
            (
                "transport: ours uds, theirs shm",
                Box::new(|h| h.transport = Kind::Shm),
            ),
            (
                "transport: ours uds, theirs inproc",
                Box::new(|h| h.transport = Kind::InProc),
            ),
            (
                "deployment id: ours 3a000000000000000000000000000001, theirs 7f",
                Box::new(|h| h.deployment = 0x7f << 120),
            ),
            ("schema fingerprint", Box::new(|h| h.schema = 99)),
            ("catalog fingerprint", Box::new(|h| h.catalog = 99)),
            (
                "workers per island: ours [2, 3, 1], theirs [2, 3, 2]",
                Box::new(|h| h.workers = vec![2, 3, 2]),
            ),
            // The same island twice: island 1 connecting as island 0.
            ("already connected", Box::new(|h| h.island = 0)),
        ];
        for (want, change) in cases {
            let (ra, rb) = pair_with(change);
            // The initiator (island 0) checks island 1's changed hello and
            // names the difference; the responder hears it from the peer.
            let ea = ra.unwrap_err();
            assert!(ea.is_refusal());
            assert!(ea.to_string().contains(want), "{want}: got '{ea}'");
            // The responder finds the same difference from its side.
            let field = want.split(':').next().unwrap();
            let eb = rb.unwrap_err();
            assert!(eb.to_string().contains(field), "{field}: got '{eb}'");
        }
    }

    #[test]
    fn an_island_out_of_range_a_wrong_one_and_a_duplicate_are_refused() {
        let a = hello(0);
        let b = hello(5);
        let s = || secret("0123456789abcdef");
        let (ra, _) = run(
            a.clone(),
            Expect::matching(&a),
            s(),
            b.clone(),
            Expect::matching(&b),
            s(),
        );
        assert!(
            matches!(
                ra,
                Err(Refused::IslandOutOfRange {
                    island: 5,
                    islands: 3
                })
            ),
            "{ra:?}"
        );
        let b = hello(2);
        let mut ea = Expect::matching(&a);
        ea.peer = Some(1);
        let (ra, _) = run(a.clone(), ea, s(), b.clone(), Expect::matching(&b), s());
        assert!(
            matches!(
                ra,
                Err(Refused::WrongIsland {
                    expected: 1,
                    theirs: 2
                })
            ),
            "{ra:?}"
        );
        let mut eb = Expect::matching(&b);
        eb.connected = vec![0];
        let (ra, rb) = run(a.clone(), Expect::matching(&a), s(), b, eb, s());
        assert!(
            matches!(rb, Err(Refused::Duplicate { island: 0 })),
            "{rb:?}"
        );
        assert!(matches!(ra, Err(Refused::ByPeer(_))), "{ra:?}");
    }

    /// A stream whose writes after the first `ok` fail as on a socket the
    /// peer closed.
    struct ClosedAfter {
        s: UnixStream,
        ok: usize,
    }
    impl Read for ClosedAfter {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.s.read(b)
        }
    }
    impl Write for ClosedAfter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.ok == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.ok -= 1;
            self.s.write_all(b).map(|()| b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_refusal_is_named_even_when_the_peer_closed_before_our_accept() {
        let a = hello(0);
        let b = hello(1);
        let mut eb = Expect::matching(&b);
        eb.connected = vec![0];
        let (x, mut y) = UnixStream::pair().unwrap();
        x.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let sb = secret("0123456789abcdef");
        let t = std::thread::spawn(move || handshake(&mut y, &b, &eb, &sb, false));
        // HELLO and PROOF go out; ACCEPT meets a closed socket.
        let mut x = ClosedAfter { s: x, ok: 2 };
        let ra = handshake(
            &mut x,
            &a,
            &Expect::matching(&a),
            &secret("0123456789abcdef"),
            true,
        );
        let rb = t.join().unwrap();
        assert!(
            matches!(rb, Err(Refused::Duplicate { island: 0 })),
            "{rb:?}"
        );
        assert!(
            matches!(&ra, Err(Refused::ByPeer(why)) if why.contains("already connected")),
            "{ra:?}"
        );
    }

    #[test]
    fn a_wrong_secret_is_refused_on_both_sides() {
        let a = hello(0);
        let b = hello(1);
        let (ra, rb) = run(
            a.clone(),
            Expect::matching(&a),
            secret("0123456789abcdef"),
            b.clone(),
            Expect::matching(&b),
            secret("0123456789abcdeX"),
        );
        // Each side checks the other's proof before it reads a verdict.
        assert!(matches!(ra, Err(Refused::BadMac)), "{ra:?}");
        assert!(matches!(rb, Err(Refused::BadMac)), "{rb:?}");
    }

    #[test]
    fn a_reflected_proof_is_refused() {
        // A peer that echoes every message back (it knows no secret) proves
        // nothing: the role byte makes our own proof wrong for the other side.
        let (mut x, mut y) = UnixStream::pair().unwrap();
        x.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let echo = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = y.read(&mut buf) {
                if n == 0 || y.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        let a = hello(1);
        let mut e = Expect::matching(&a);
        e.me = 0; // so that the echoed island 1 passes the duplicate check
        let r = handshake(&mut x, &a, &e, &secret("0123456789abcdef"), true);
        assert!(matches!(r, Err(Refused::BadMac)), "{r:?}");
        drop(x);
        echo.join().unwrap();
    }

    #[test]
    fn the_secret_is_never_shown_nor_sent() {
        let s = secret("very-secret-value-42");
        assert!(!format!("{s:?}").contains("very-secret"));
        // Record everything the initiator writes.
        struct Tap(UnixStream, Vec<u8>);
        impl Read for Tap {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                self.0.read(b)
            }
        }
        impl Write for Tap {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.1.extend_from_slice(b);
                self.0.write(b)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (x, mut y) = UnixStream::pair().unwrap();
        let b = hello(1);
        let eb = Expect::matching(&b);
        let t = std::thread::spawn(move || {
            handshake(&mut y, &b, &eb, &secret("very-secret-value-42"), false)
        });
        let a = hello(0);
        let mut tap = Tap(x, Vec::new());
        handshake(&mut tap, &a, &Expect::matching(&a), &s, true).unwrap();
        t.join().unwrap().unwrap();
        assert!(!tap.1.windows(11).any(|w| w == b"very-secret"));
    }

    #[test]
    fn secret_files_are_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("islands-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("secret");
        std::fs::write(&p, "0123456789abcdef\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = Secret::from_file(&p).unwrap_err();
            assert!(matches!(e, SecretError::Mode { .. }), "{mode:o}: {e}");
            assert!(e.to_string().contains("chmod 600"));
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = Secret::from_file(&p).unwrap();
        assert_eq!(s.0, b"0123456789abcdef", "the trailing newline is not kept");
        std::fs::write(&p, "short\n").unwrap();
        assert!(matches!(
            Secret::from_file(&p),
            Err(SecretError::Short { len: 5, .. })
        ));
        assert!(matches!(
            Secret::from_file(&dir.join("missing")),
            Err(SecretError::Io { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            Secret::from_env("ISLANDS_TEST_NO_SUCH_SECRET_VARIABLE"),
            Err(SecretError::Env { .. })
        ));
    }

    #[test]
    fn hello_round_trips() {
        for transport in Kind::ALL {
            let h = Hello {
                transport,
                ..hello(2)
            };
            let mut b = Vec::new();
            h.encode(&mut b).unwrap();
            assert_eq!(Hello::decode(&b).unwrap(), h);
            b.push(0);
            assert!(Hello::decode(&b).is_err(), "trailing bytes");
        }
    }

    #[test]
    fn a_hello_of_another_version_or_an_unknown_transport_is_refused_by_name() {
        let mut b = Vec::new();
        hello(2).encode(&mut b).unwrap();
        // A version-1 HELLO had no transport byte: refused by its version,
        // not read with this layout.
        let mut v1 = b.clone();
        v1[4..6].copy_from_slice(&1u16.to_le_bytes());
        v1.remove(6);
        assert!(
            matches!(
                Hello::decode(&v1),
                Err(Refused::WireVersion {
                    ours: WIRE_VERSION,
                    theirs: 1
                })
            ),
            "{:?}",
            Hello::decode(&v1)
        );
        let mut odd = b.clone();
        odd[6] = 9;
        let e = Hello::decode(&odd).unwrap_err();
        assert!(e.to_string().contains("transport kind 9"), "{e}");
        // Every cut of a HELLO is refused, never read past its end.
        for cut in 0..b.len() {
            assert!(Hello::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn every_transport_mismatch_is_refused_on_both_sides_naming_both_kinds() {
        for ours in Kind::ALL {
            for theirs in Kind::ALL.into_iter().filter(|&k| k != ours) {
                let a = Hello {
                    transport: ours,
                    ..hello(0)
                };
                let b = Hello {
                    transport: theirs,
                    ..hello(1)
                };
                let s = || secret("0123456789abcdef");
                let (ea, eb) = (Expect::matching(&a), Expect::matching(&b));
                let (ra, rb) = run(a, ea, s(), b, eb, s());
                let ra = ra.unwrap_err();
                assert!(ra.is_refusal(), "{ra}");
                assert!(
                    matches!(&ra, Refused::Transport { ours: o, theirs: t } if (*o, *t) == (ours, theirs)),
                    "{ours} meeting {theirs}: {ra}"
                );
                assert!(
                    ra.to_string()
                        .contains(&format!("transport: ours {ours}, theirs {theirs}")),
                    "{ra}"
                );
                // The responder finds the mirror image itself.
                let rb = rb.unwrap_err();
                assert!(rb.is_refusal(), "{rb}");
                assert!(
                    rb.to_string()
                        .contains(&format!("transport: ours {theirs}, theirs {ours}")),
                    "{rb}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn a_truncated_or_garbage_handshake_never_panics(
            garbage in proptest::collection::vec(any::<u8>(), 0..200),
            cut in 0usize..120,
            keep_prefix in any::<bool>(),
        ) {
            // What a peer sends: a real HELLO cut short then garbage, or garbage.
            let mut input = Vec::new();
            if keep_prefix {
                let mut body = Vec::new();
                hello(1).encode(&mut body).unwrap();
                body.extend_from_slice(&[9; NONCE]);
                let mut m = vec![K_HELLO];
                m.extend_from_slice(&(body.len() as u16).to_le_bytes());
                m.extend_from_slice(&body);
                m.truncate(cut.min(m.len()));
                input.extend_from_slice(&m);
            }
            input.extend_from_slice(&garbage);
            struct Fake(std::io::Cursor<Vec<u8>>);
            impl Read for Fake {
                fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                    self.0.read(b)
                }
            }
            impl Write for Fake {
                fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                    Ok(b.len())
                }
                fn flush(&mut self) -> io::Result<()> {
                    Ok(())
                }
            }
            let a = hello(0);
            let r = handshake(
                &mut Fake(std::io::Cursor::new(input)),
                &a,
                &Expect::matching(&a),
                &secret("0123456789abcdef"),
                true,
            );
            prop_assert!(r.is_err());
            let _ = Hello::decode(&garbage);
        }
    }
}
