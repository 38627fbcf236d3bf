//! 2PC messages (signals, named like NDB's `…REQ` / `…CONF` / `…REF`) and their wire form.
//!
//! Fixed layout, little-endian: `[kind u8][gtid u64]`, and `PrepareConf` adds
//! `[flags u8]` (bit 0 = read-only, other bits must be zero). A message is exactly that long;
//! batching several messages per destination is the transport's business. Decoding checks
//! every byte and returns an error for anything malformed, never panics.

use super::Gtid;

const K_PREPARE_REQ: u8 = 1;
const K_PREPARE_CONF: u8 = 2;
const K_PREPARE_REF: u8 = 3;
const K_COMMIT_REQ: u8 = 4;
const K_COMMIT_CONF: u8 = 5;
const K_ABORT_REQ: u8 = 6;
const K_ABORT_CONF: u8 = 7;
const K_DECISION_REQ: u8 = 8;

const FLAG_READ_ONLY: u8 = 1;

/// A 2PC message. Coordinator → participant: `PrepareReq`, `CommitReq`, `AbortReq`.
/// Participant → coordinator: the others.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Msg {
    /// Phase 1: prepare your branch and vote.
    PrepareReq { gtid: Gtid },
    /// Vote yes. `read_only`: the branch wrote nothing and is already released; it takes
    /// no part in phase 2.
    PrepareConf { gtid: Gtid, read_only: bool },
    /// Vote no; the branch is already aborted.
    PrepareRef { gtid: Gtid },
    /// Phase 2: commit your prepared branch.
    CommitReq { gtid: Gtid },
    /// The commit is durable at the participant.
    CommitConf { gtid: Gtid },
    /// Abort your branch (prepared or not, known or not).
    AbortReq { gtid: Gtid },
    /// The branch is aborted.
    AbortConf { gtid: Gtid },
    /// A prepared (in-doubt) participant asks for the decision; answered by `CommitReq` or
    /// `AbortReq`.
    DecisionReq { gtid: Gtid },
}

/// Why bytes are not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("empty message")]
    Empty,
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("message kind {kind} must be {want} bytes, got {got}")]
    BadLength { kind: u8, want: usize, got: usize },
    #[error("unknown flag bits {0:#04x} in a PrepareConf")]
    BadFlags(u8),
}

impl Msg {
    pub fn gtid(&self) -> Gtid {
        match *self {
            Msg::PrepareReq { gtid }
            | Msg::PrepareConf { gtid, .. }
            | Msg::PrepareRef { gtid }
            | Msg::CommitReq { gtid }
            | Msg::CommitConf { gtid }
            | Msg::AbortReq { gtid }
            | Msg::AbortConf { gtid }
            | Msg::DecisionReq { gtid } => gtid,
        }
    }

    /// Whether the message goes to the participant (else to the coordinator).
    pub fn to_participant(&self) -> bool {
        matches!(
            self,
            Msg::PrepareReq { .. } | Msg::CommitReq { .. } | Msg::AbortReq { .. }
        )
    }

    fn kind(&self) -> u8 {
        match self {
            Msg::PrepareReq { .. } => K_PREPARE_REQ,
            Msg::PrepareConf { .. } => K_PREPARE_CONF,
            Msg::PrepareRef { .. } => K_PREPARE_REF,
            Msg::CommitReq { .. } => K_COMMIT_REQ,
            Msg::CommitConf { .. } => K_COMMIT_CONF,
            Msg::AbortReq { .. } => K_ABORT_REQ,
            Msg::AbortConf { .. } => K_ABORT_CONF,
            Msg::DecisionReq { .. } => K_DECISION_REQ,
        }
    }

    /// Bytes `encode` appends.
    pub fn encoded_len(&self) -> usize {
        match self {
            Msg::PrepareConf { .. } => 10,
            _ => 9,
        }
    }

    /// Appends the wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.kind());
        out.extend_from_slice(&self.gtid().to_le_bytes());
        if let Msg::PrepareConf { read_only, .. } = *self {
            out.push(if read_only { FLAG_READ_ONLY } else { 0 });
        }
    }

    /// Parses exactly one message.
    pub fn decode(b: &[u8]) -> Result<Msg, DecodeError> {
        let (&kind, rest) = b.split_first().ok_or(DecodeError::Empty)?;
        let want = match kind {
            K_PREPARE_CONF => 10,
            K_PREPARE_REQ..=K_DECISION_REQ => 9,
            _ => return Err(DecodeError::UnknownKind(kind)),
        };
        if b.len() != want {
            return Err(DecodeError::BadLength {
                kind,
                want,
                got: b.len(),
            });
        }
        let mut g = [0u8; 8];
        g.copy_from_slice(&rest[..8]);
        let gtid = u64::from_le_bytes(g);
        Ok(match kind {
            K_PREPARE_REQ => Msg::PrepareReq { gtid },
            K_PREPARE_CONF => {
                let flags = rest[8];
                if flags & !FLAG_READ_ONLY != 0 {
                    return Err(DecodeError::BadFlags(flags));
                }
                Msg::PrepareConf {
                    gtid,
                    read_only: flags & FLAG_READ_ONLY != 0,
                }
            }
            K_PREPARE_REF => Msg::PrepareRef { gtid },
            K_COMMIT_REQ => Msg::CommitReq { gtid },
            K_COMMIT_CONF => Msg::CommitConf { gtid },
            K_ABORT_REQ => Msg::AbortReq { gtid },
            K_ABORT_CONF => Msg::AbortConf { gtid },
            _ => Msg::DecisionReq { gtid },
        })
    }
}
