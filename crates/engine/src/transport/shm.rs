//! Islands of different processes on one machine, joined by shared memory.
//!
//! Between two island processes there is one mapped segment holding two
//! [`Ring`]s, one per direction; a batch to a remote endpoint is one record
//! pushed into the ring toward its island (no system call). See
//! `docs/architecture.md`, "Shared memory".

mod map;
mod ring;

pub use map::Mapping;
pub use ring::{
    record_bytes, Consumer, Producer, PushError, Record, Ring, RingError, MAX_CAP, MIN_CAP,
    RECORD_HEADER, RING_HEADER,
};
