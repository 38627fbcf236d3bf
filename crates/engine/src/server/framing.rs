//! How the server reads what a client sends: the byte stream is split into
//! messages by their length fields, exactly as PostgreSQL reads it, and
//! each message's type, length and layout are checked before `pgwire`
//! decodes it.
//!
//! Invariants this module keeps for the connection loop:
//! - a message's body is buffered only once its type is one the
//!   connection's [`Phase`] allows and its length is within that type's
//!   limit, so a client that has not logged in makes the server hold at
//!   most [`AUTH_MAX`] bytes (a startup message at most [`STARTUP_MAX`]);
//! - [`next_frame`] hands out exactly one message's bytes, so nothing
//!   after a message's stated end can be read as part of it;
//! - a message [`check`] passes has a layout `pgwire`'s decoder reads to
//!   its end without running past it (the decoder indexes and slices
//!   without bounds checks of its own).
//!
//! A message whose layout is broken is refused with a FATAL `08P01`; an
//! unsupported value in a well-formed message (a format code, a Describe
//! target, a string that is not UTF-8) with an ERROR, as PostgreSQL does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::BytesMut;

/// Where a connection is in the protocol, which decides what it may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before the startup message: untyped messages (SSLRequest,
    /// GSSENCRequest, CancelRequest, StartupMessage).
    Startup,
    /// After the startup message, before login: password messages (and
    /// Terminate) only. `first`: the next one is a SASLInitialResponse.
    Auth { first: bool },
    /// Logged in.
    Ready,
}

/// The longest startup message (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
pub(crate) const STARTUP_MAX: usize = 10_000;
/// The longest password message, its length field included (PostgreSQL's
/// `PG_MAX_AUTH_TOKEN_LENGTH` of body).
pub(crate) const AUTH_MAX: usize = 65_535 + 4;
/// The longest message of the types that carry no statement or data
/// (Execute, Describe, Close, CopyFail): PostgreSQL's
/// `PQ_SMALL_MESSAGE_LIMIT`.
pub(crate) const SMALL_MAX: usize = 10_000;
/// The longest cancel key of protocol 3.2, in bytes.
const CANCEL_KEY_MAX: usize = 256;

/// The request codes of the untyped messages.
pub(crate) const SSL_REQUEST: u32 = 80_877_103;
pub(crate) const GSS_REQUEST: u32 = 80_877_104;
pub(crate) const CANCEL_REQUEST: u32 = 80_877_102;

/// Why a message is refused, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// FATAL (the connection is closed after the error), or ERROR (it
    /// goes on; in the extended protocol, from the next Sync).
    pub fatal: bool,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    fn fatal(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            fatal: true,
            code,
            message: message.into(),
        }
    }

    fn error(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            fatal: false,
            code,
            message: message.into(),
        }
    }
}

/// One whole message taken off the input.
#[derive(Debug)]
pub(crate) struct Frame {
    /// Its type byte; 0 for the untyped messages of [`Phase::Startup`].
    pub ty: u8,
    /// The whole message: type byte (if any), length field and body.
    pub bytes: BytesMut,
}

impl Frame {
    /// The message after its type byte and length field.
    pub fn body(&self) -> &[u8] {
        let header = if self.ty == 0 { 4 } else { 5 };
        &self.bytes[header..]
    }

    /// The request code of an untyped message (its bytes 4 to 8).
    pub fn code(&self) -> u32 {
        be_u32(&self.bytes[4..8])
    }
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A printable name of a type byte.
fn type_name(ty: u8) -> String {
    if ty.is_ascii_graphic() {
        format!("'{}'", ty as char)
    } else {
        format!("{ty}")
    }
}

/// Takes the next whole message off `input`: `Ok(None)` while it is not
/// all there (then `input` has room reserved for the rest, so the next
/// read can take it whole); `Err` as soon as its header shows a type the
/// `phase` does not allow or a length over its limit (`max` for the
/// types that carry statements or data), before its body is read.
pub(crate) fn next_frame(
    input: &mut BytesMut,
    phase: Phase,
    max: usize,
) -> Result<Option<Frame>, Refusal> {
    let (ty, header, total) = if phase == Phase::Startup {
        if input.len() < 4 {
            return Ok(None);
        }
        let len = be_u32(&input[..4]) as usize;
        if !(8..=STARTUP_MAX).contains(&len) {
            return Err(Refusal::fatal(
                "08P01",
                format!("invalid length of startup packet: {len} bytes"),
            ));
        }
        (0, 4, len)
    } else {
        if input.len() < 5 {
            return Ok(None);
        }
        let ty = input[0];
        let len = be_u32(&input[1..5]) as usize;
        header_check(phase, ty, len, max)?;
        (ty, 5, 1 + len)
    };
    if input.len() < total {
        // Room for the rest, so it arrives in as few reads as it can.
        input.reserve(total - input.len());
        return Ok(None);
    }
    debug_assert!(total >= header);
    Ok(Some(Frame {
        ty,
        bytes: input.split_to(total),
    }))
}

/// The header check of a typed message of length field `len`.
fn header_check(phase: Phase, ty: u8, len: usize, max: usize) -> Result<(), Refusal> {
    // The limit of the type's length field, and whether it is exact.
    let (limit, exact) = match (phase, ty) {
        (Phase::Auth { .. }, b'p') => (AUTH_MAX.min(max), false),
        (Phase::Auth { .. }, b'X') => (4, true),
        (Phase::Auth { .. }, _) => {
            return Err(Refusal::fatal(
                "08P01",
                format!(
                    "expected a password message, got message type {}",
                    type_name(ty)
                ),
            ))
        }
        (_, b'Q' | b'P' | b'B' | b'd') => (max, false),
        (_, b'E' | b'D' | b'C' | b'f') => (SMALL_MAX.min(max), false),
        (_, b'S' | b'H' | b'X' | b'c') => (4, true),
        _ => {
            return Err(Refusal::fatal(
                "08P01",
                format!("invalid frontend message type {}", type_name(ty)),
            ))
        }
    };
    if len > max {
        return Err(Refusal::fatal(
            "54000",
            format!("a message of {len} bytes is larger than the server's limit of {max} bytes"),
        ));
    }
    if len < 4 || len > limit || (exact && len != limit) {
        return Err(Refusal::fatal(
            "08P01",
            format!(
                "invalid message length {len} for message type {}",
                type_name(ty)
            ),
        ));
    }
    Ok(())
}

/// Reads the fields of one message's body, every read bounds-checked.
struct Fields<'a> {
    body: &'a [u8],
    at: usize,
    what: &'static str,
    /// The first ERROR-level problem found (the layout is read on, so a
    /// broken layout still wins as FATAL).
    soft: Option<Refusal>,
}

impl<'a> Fields<'a> {
    fn new(body: &'a [u8], what: &'static str) -> Fields<'a> {
        Fields {
            body,
            at: 0,
            what,
            soft: None,
        }
    }

    fn broken(&self, why: &str) -> Refusal {
        Refusal::fatal("08P01", format!("invalid {} message: {why}", self.what))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Refusal> {
        if self.body.len() - self.at < n {
            return Err(self.broken(&format!(
                "{n} more bytes expected at byte {} of {}",
                self.at,
                self.body.len()
            )));
        }
        let b = &self.body[self.at..self.at + n];
        self.at += n;
        Ok(b)
    }

    fn u8(&mut self) -> Result<u8, Refusal> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Refusal> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, Refusal> {
        Ok(be_u32(self.take(4)?) as i32)
    }

    /// A NUL-terminated string; a soft error if it is not UTF-8.
    fn cstr(&mut self) -> Result<&'a [u8], Refusal> {
        let rest = &self.body[self.at..];
        let Some(n) = rest.iter().position(|&b| b == 0) else {
            return Err(self.broken("a string without its terminating NUL"));
        };
        self.at += n + 1;
        let s = &rest[..n];
        if let Err(e) = std::str::from_utf8(s) {
            let at = e.valid_up_to();
            let bad = s.get(at).copied().unwrap_or(0);
            self.soft_error(Refusal::error(
                "22021",
                format!("invalid byte sequence for encoding \"UTF8\": 0x{bad:02x}"),
            ));
        }
        Ok(s)
    }

    fn soft_error(&mut self, r: Refusal) {
        self.soft.get_or_insert(r);
    }

    /// The body must end here: nothing left over.
    fn end(self) -> Result<(), Refusal> {
        let left = self.body.len() - self.at;
        if left > 0 {
            return Err(self.broken(&format!(
                "{left} bytes after its last field (the message's length says {})",
                self.body.len() + 4
            )));
        }
        match self.soft {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }
}

/// Checks the layout of `frame`, taken by [`next_frame`] in `phase`.
pub(crate) fn check(frame: &Frame, phase: Phase) -> Result<(), Refusal> {
    let body = frame.body();
    match (phase, frame.ty) {
        (Phase::Startup, _) => check_untyped(frame),
        (Phase::Auth { first: true }, b'p') => {
            // SASLInitialResponse: mechanism, then data of a stated length
            // (-1: none).
            let mut f = Fields::new(body, "SASLInitialResponse");
            f.cstr()?;
            let n = f.i32()?;
            if n < -1 {
                return Err(f.broken(&format!("data length {n}")));
            }
            if n >= 0 {
                f.take(n as usize)?;
            }
            f.end()
        }
        // SASLResponse: the mechanism's data, any bytes.
        (Phase::Auth { first: false }, b'p') => Ok(()),
        (_, b'Q') => {
            let mut f = Fields::new(body, "Query");
            f.cstr()?;
            f.end()
        }
        (_, b'P') => {
            let mut f = Fields::new(body, "Parse");
            f.cstr()?;
            f.cstr()?;
            let n = f.u16()? as usize;
            f.take(4 * n)?;
            f.end()
        }
        (_, b'B') => check_bind(body),
        (_, b'E') => {
            let mut f = Fields::new(body, "Execute");
            f.cstr()?;
            f.i32()?;
            f.end()
        }
        (_, ty @ (b'D' | b'C')) => {
            let what = if ty == b'D' { "Describe" } else { "Close" };
            let mut f = Fields::new(body, what);
            let target = f.u8()?;
            f.cstr()?;
            if target != b'S' && target != b'P' {
                f.soft_error(Refusal::error(
                    "08P01",
                    format!(
                        "invalid {} message subtype {target}",
                        what.to_ascii_uppercase()
                    ),
                ));
            }
            f.end()
        }
        (_, b'f') => {
            let mut f = Fields::new(body, "CopyFail");
            f.cstr()?;
            f.end()
        }
        // Sync, Flush, Terminate, CopyDone: empty (their length is checked
        // with the header); CopyData: any bytes.
        _ => Ok(()),
    }
}

/// SSLRequest, GSSENCRequest, CancelRequest or StartupMessage.
fn check_untyped(frame: &Frame) -> Result<(), Refusal> {
    let len = frame.bytes.len();
    let code = frame.code();
    match code {
        SSL_REQUEST | GSS_REQUEST if len != 8 => Err(Refusal::fatal(
            "08P01",
            format!("invalid length of an encryption request: {len} bytes"),
        )),
        SSL_REQUEST | GSS_REQUEST => Ok(()),
        CANCEL_REQUEST if !(16..=12 + CANCEL_KEY_MAX).contains(&len) => Err(Refusal::fatal(
            "08P01",
            format!("invalid length of a cancel request: {len} bytes"),
        )),
        CANCEL_REQUEST => Ok(()),
        _ => {
            let (major, minor) = (code >> 16, code & 0xffff);
            if major != 3 {
                return Err(Refusal::fatal(
                    "0A000",
                    format!(
                        "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.2"
                    ),
                ));
            }
            // Name and value pairs, ended by an empty name, which is the
            // message's last byte.
            let mut f = Fields::new(&frame.bytes[8..], "startup");
            loop {
                if f.cstr()?.is_empty() {
                    break;
                }
                f.cstr()?;
            }
            // Names and values are kept as given (lossily decoded), as
            // PostgreSQL does not refuse them here either.
            f.soft = None;
            f.end()
        }
    }
}

/// Bind: portal and statement names, parameter format codes, parameters,
/// result format codes.
fn check_bind(body: &[u8]) -> Result<(), Refusal> {
    let mut f = Fields::new(body, "Bind");
    f.cstr()?;
    f.cstr()?;
    let formats = f.u16()? as usize;
    let codes = f.take(2 * formats)?;
    let params = f.u16()? as usize;
    for _ in 0..params {
        let n = f.i32()?;
        if n < -1 {
            return Err(f.broken(&format!("parameter length {n}")));
        }
        if n >= 0 {
            f.take(n as usize)?;
        }
    }
    let results = f.u16()? as usize;
    let result_codes = f.take(2 * results)?;
    if formats > 1 && formats != params {
        f.soft_error(Refusal::error(
            "08P01",
            format!("bind message has {formats} parameter formats but {params} parameters"),
        ));
    }
    for c in codes.chunks_exact(2).chain(result_codes.chunks_exact(2)) {
        let c = i16::from_be_bytes([c[0], c[1]]);
        if c != 0 && c != 1 {
            f.soft_error(Refusal::error(
                "22023",
                format!("unsupported format code: {c}"),
            ));
        }
    }
    f.end()
}

/// The last time (seconds since the epoch) a protocol violation was
/// logged, and how many went unlogged since.
static LOGGED_AT: AtomicU64 = AtomicU64::new(0);
static UNLOGGED: AtomicU64 = AtomicU64::new(0);

/// Logs one line on standard error, at most one a second across the
/// process; the next line says how many went unlogged in between.
pub(crate) fn log_limited(line: std::fmt::Arguments<'_>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LOGGED_AT.load(Ordering::Relaxed);
    if now <= last
        || LOGGED_AT
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        UNLOGGED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    match UNLOGGED.swap(0, Ordering::Relaxed) {
        0 => eprintln!("islands server: {line}"),
        n => eprintln!("islands server: {line} ({n} more not logged in the last seconds)"),
    }
}

/// For fuzzing only (the `framing` target of `fuzz/`), not a stable API:
/// runs `input` through the framing layer as a connection would, in
/// reads of at most `chunk` bytes, starting before login
/// (`logged_in == false`: the startup message, then password messages) or
/// after it, until a message is refused or the input ends. Each message
/// [`check`] passes after login is decoded by `pgwire`, which must read
/// exactly its bytes (or refuse it). Returns how many messages passed.
///
/// # Panics
/// If an invariant of this module breaks: the input buffer holds more
/// than its phase's limit (plus one read), or `pgwire` decodes a checked
/// message to anything but its end.
#[doc(hidden)]
pub fn fuzz_frames(input: &[u8], logged_in: bool, max: usize, chunk: usize) -> usize {
    let mut passed = 0;
    use pgwire::messages::{DecodeContext, PgWireFrontendMessage};
    let chunk = chunk.max(1);
    let mut phase = if logged_in {
        Phase::Ready
    } else {
        Phase::Startup
    };
    let mut buf = BytesMut::new();
    let mut ctx = DecodeContext::default();
    ctx.awaiting_frontend_ssl = false;
    ctx.awaiting_frontend_startup = false;
    for c in input.chunks(chunk) {
        buf.extend_from_slice(c);
        loop {
            // The most a message of this phase may hold, header included.
            let limit = match phase {
                Phase::Startup => STARTUP_MAX,
                Phase::Auth { .. } => AUTH_MAX.min(max) + 1,
                Phase::Ready => max + 1,
            };
            let frame = match next_frame(&mut buf, phase, max) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    // Room is reserved for one message, never more than
                    // the phase allows (`BytesMut` may round up to twice).
                    assert!(
                        buf.capacity() <= 2 * (limit + chunk),
                        "{phase:?}: {} bytes reserved for a limit of {limit}",
                        buf.capacity()
                    );
                    break;
                }
                Err(_) => return passed,
            };
            assert!(
                frame.bytes.len() <= limit,
                "{phase:?}: a frame over the limit"
            );
            if check(&frame, phase).is_err() {
                return passed;
            }
            passed += 1;
            match phase {
                Phase::Startup => {
                    let code = frame.code();
                    if code == CANCEL_REQUEST {
                        return passed;
                    }
                    if code != SSL_REQUEST && code != GSS_REQUEST {
                        phase = Phase::Auth { first: true };
                    }
                }
                Phase::Auth { .. } if frame.ty == b'X' => return passed,
                Phase::Auth { .. } => phase = Phase::Auth { first: false },
                Phase::Ready => {
                    let mut bytes = frame.bytes;
                    // A value pgwire refuses ends the connection with a
                    // FATAL, as the server does; a short or long read
                    // breaks this module's invariant.
                    match PgWireFrontendMessage::decode(&mut bytes, &ctx) {
                        Ok(Some(_)) => assert!(
                            bytes.is_empty(),
                            "pgwire left {} bytes of a checked message",
                            bytes.len()
                        ),
                        Ok(None) => panic!("pgwire found a checked message short"),
                        Err(_) => return passed,
                    }
                }
            }
        }
    }
    passed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![ty];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    /// Takes every frame off `bytes` fed in chunks of `chunk`.
    fn frames(bytes: &[u8], phase: Phase, chunk: usize) -> Result<Vec<Frame>, Refusal> {
        let mut input = BytesMut::new();
        let mut out = Vec::new();
        for c in bytes.chunks(chunk) {
            input.extend_from_slice(c);
            while let Some(f) = next_frame(&mut input, phase, 1 << 20)? {
                out.push(f);
            }
        }
        assert!(input.is_empty(), "bytes left: {input:?}");
        Ok(out)
    }

    /// The fuzzing entry walks a login and a session without tripping its
    /// own invariants, split anywhere (so the `framing` target starts from
    /// a harness that holds on valid input).
    #[test]
    fn the_fuzzing_entry_holds_on_valid_streams_in_both_phases() {
        let mut startup = 196_608u32.to_be_bytes().to_vec();
        startup.extend_from_slice(b"user\0u\0\0");
        let mut login = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
        login.extend(startup);
        let mut sasl = b"SCRAM-SHA-256\0".to_vec();
        sasl.extend_from_slice(&3i32.to_be_bytes());
        sasl.extend_from_slice(b"abc");
        login.extend(typed(b'p', &sasl));
        login.extend(typed(b'p', b"proof"));
        let mut session = typed(b'Q', b"CALL x(1)\0");
        session.extend(typed(b'P', b"s\0CALL x($1)\0\0\x01\0\0\0\x14"));
        session.extend(typed(b'B', b"\0s\0\0\0\0\x01\0\0\0\x011\0\0"));
        session.extend(typed(b'D', b"P\0"));
        session.extend(typed(b'E', b"\0\0\0\0\0"));
        session.extend(typed(b'S', b""));
        for chunk in [1, 3, 64, 4096] {
            assert_eq!(fuzz_frames(&login, false, 1 << 20, chunk), 3);
            assert_eq!(fuzz_frames(&session, true, 1 << 20, chunk), 6);
            assert_eq!(fuzz_frames(&session, true, 64, chunk), 6);
        }
    }

    #[test]
    fn frames_follow_the_length_fields_split_anywhere() {
        let mut s = typed(b'Q', b"CALL x(1)\0");
        s.extend(typed(b'S', b""));
        s.extend(typed(b'E', b"\0\0\0\0\0"));
        for chunk in [1, 2, 3, 7, 64] {
            let f = frames(&s, Phase::Ready, chunk).unwrap();
            let tys: Vec<u8> = f.iter().map(|f| f.ty).collect();
            assert_eq!(tys, b"QSE", "chunk {chunk}");
            assert_eq!(f[0].body(), b"CALL x(1)\0");
            assert!(f.iter().all(|f| check(f, Phase::Ready).is_ok()));
        }
    }

    #[test]
    fn a_statement_after_the_nul_is_refused_not_run() {
        // A Query whose stated length covers a second Query after its NUL:
        // one frame, refused for its leftover bytes.
        let mut body = b"CALL bank_balance(1)\0".to_vec();
        body.extend(typed(b'Q', b"CALL bank_transfer(424242)\0"));
        let f = frames(&typed(b'Q', &body), Phase::Ready, 4096).unwrap();
        assert_eq!(f.len(), 1);
        let r = check(&f[0], Phase::Ready).unwrap_err();
        assert!(r.fatal && r.code == "08P01", "{r:?}");
    }

    #[test]
    fn a_sync_that_claims_the_next_header_is_refused_before_any_body() {
        // A Sync of length 9 would swallow the next message's header.
        let mut s = typed(b'S', &[b'Q', 0x40, 0, 0, 0]);
        s.extend_from_slice(b"...");
        let mut input = BytesMut::from(&s[..]);
        let r = next_frame(&mut input, Phase::Ready, 1 << 30).unwrap_err();
        assert!(r.fatal && r.code == "08P01", "{r:?}");
        // Before login only password messages pass their header.
        let mut input = BytesMut::from(&typed(b'Q', b"x\0")[..]);
        let r = next_frame(&mut input, Phase::Auth { first: true }, 1 << 30).unwrap_err();
        assert!(r.fatal && r.message.contains("password"), "{r:?}");
        // A password message is capped whatever the server's limit.
        let mut h = vec![b'p'];
        h.extend_from_slice(&(AUTH_MAX as u32 + 1).to_be_bytes());
        let mut input = BytesMut::from(&h[..]);
        assert!(next_frame(&mut input, Phase::Auth { first: false }, 1 << 30).is_err());
        // Over the server's limit: 54000.
        let mut h = vec![b'Q'];
        h.extend_from_slice(&(1u32 << 30).to_be_bytes());
        let mut input = BytesMut::from(&h[..]);
        let r = next_frame(&mut input, Phase::Ready, 1 << 20).unwrap_err();
        assert_eq!(r.code, "54000");
    }

    #[test]
    fn short_and_malformed_messages_are_fatal_bad_values_are_errors() {
        let fatal = |ty: u8, body: &[u8], phase: Phase| {
            let f = frames(&typed(ty, body), phase, 4096).unwrap();
            let r = check(&f[0], phase).unwrap_err();
            assert!(r.fatal && r.code == "08P01", "{}: {r:?}", ty as char);
        };
        let error = |ty: u8, body: &[u8], code: &str| {
            let f = frames(&typed(ty, body), Phase::Ready, 4096).unwrap();
            let r = check(&f[0], Phase::Ready).unwrap_err();
            assert!(!r.fatal && r.code == code, "{}: {r:?}", ty as char);
        };
        fatal(b'E', b"", Phase::Ready);
        fatal(b'D', b"", Phase::Ready);
        fatal(b'C', b"", Phase::Ready);
        fatal(b'B', b"\0\0\0", Phase::Ready);
        fatal(b'P', b"\0x\0", Phase::Ready);
        fatal(b'Q', b"no nul", Phase::Ready);
        // A cleartext password where SCRAM's initial response is due.
        fatal(b'p', b"secret\0", Phase::Auth { first: true });
        // Format codes.
        let bind = |formats: &[i16], params: usize, results: &[i16]| {
            let mut b = b"\0\0".to_vec();
            b.extend_from_slice(&(formats.len() as u16).to_be_bytes());
            for c in formats {
                b.extend_from_slice(&c.to_be_bytes());
            }
            b.extend_from_slice(&(params as u16).to_be_bytes());
            for _ in 0..params {
                b.extend_from_slice(&1i32.to_be_bytes());
                b.push(b'1');
            }
            b.extend_from_slice(&(results.len() as u16).to_be_bytes());
            for c in results {
                b.extend_from_slice(&c.to_be_bytes());
            }
            b
        };
        for c in [2, -1, 7] {
            error(b'B', &bind(&[c], 1, &[]), "22023");
            error(b'B', &bind(&[], 1, &[c]), "22023");
        }
        error(b'B', &bind(&[0, 1], 1, &[]), "08P01");
        error(b'B', &bind(&[0, 1], 3, &[]), "08P01");
        assert!(check(
            &frames(&typed(b'B', &bind(&[0, 1, 1], 3, &[1])), Phase::Ready, 64).unwrap()[0],
            Phase::Ready
        )
        .is_ok());
        error(b'D', b"X\0", "08P01");
        error(b'C', b"X\0", "08P01");
        error(b'Q', b"CALL \xff(1)\0", "22021");
    }

    #[test]
    fn startup_messages_are_checked_by_kind() {
        let untyped = |code: u32, rest: &[u8]| {
            let mut v = ((8 + rest.len()) as u32).to_be_bytes().to_vec();
            v.extend_from_slice(&code.to_be_bytes());
            v.extend_from_slice(rest);
            v
        };
        let ok = |bytes: Vec<u8>| {
            let f = frames(&bytes, Phase::Startup, 3).unwrap();
            check(&f[0], Phase::Startup)
        };
        assert!(ok(untyped(SSL_REQUEST, b"")).is_ok());
        assert!(ok(untyped(SSL_REQUEST, b"x")).is_err());
        assert!(ok(untyped(CANCEL_REQUEST, &[0; 8])).is_ok());
        assert!(ok(untyped(CANCEL_REQUEST, &[0; 4])).is_err());
        assert!(ok(untyped(196608, b"user\0u\0\0")).is_ok());
        assert!(ok(untyped(196608, b"user\0u\0")).is_err());
        assert!(ok(untyped(196608, b"user\0u\0\0x")).is_err());
        assert_eq!(ok(untyped(2 << 16, b"\0")).unwrap_err().code, "0A000");
        let mut input = BytesMut::from(&[0u8, 0, 0, 4][..]);
        assert!(next_frame(&mut input, Phase::Startup, 1 << 20).is_err());
        let mut input = BytesMut::from(&(STARTUP_MAX as u32 + 1).to_be_bytes()[..]);
        assert!(next_frame(&mut input, Phase::Startup, 1 << 20).is_err());
    }
}
