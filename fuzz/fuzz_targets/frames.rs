//! A batch's frames (`islands::transport::frames`) and each frame's payload
//! (`islands::transport::wire::decode`), as an executor reads what a peer
//! sent, with the nested decoders of calls, statements, blocks, replies and
//! lock entries: no panic, and no single allocation larger than a small
//! multiple of the input (a count in a frame never sizes an allocation by
//! itself).
//!
//! The input is one batch, as the stream layer hands it over.

#![no_main]

#[path = "largest.rs"]
mod largest;

use islands::transport::frames;
use islands::transport::wire::{self, Answer, BlockOp, Frame};
use libfuzzer_sys::fuzz_target;

/// Bytes a decoded value may take in memory per byte of input, at most.
const PER_BYTE: usize = 64;

fn payload(p: &[u8]) {
    let Ok(frame) = wire::decode(p) else {
        return;
    };
    match frame {
        Frame::Call { n, args, .. } => {
            let _ = wire::call_args(n, args);
        }
        Frame::Stmt { n, params, .. } => {
            let _ = wire::call_args(n, params);
        }
        Frame::Block { op, .. } => match op {
            BlockOp::Call { n, args, .. } => {
                let _ = wire::call_args(n, args);
            }
            BlockOp::Stmt { n, params, .. } => {
                let _ = wire::call_args(n, params);
            }
            BlockOp::Commit | BlockOp::Rollback => {}
        },
        Frame::CallReply {
            answer: Answer::Rows { rows, body },
            ..
        } => {
            let _ = wire::call_rows(rows, body);
        }
        Frame::Lock { entries, .. } => {
            for e in entries.chunks_exact(10) {
                let _ = wire::lock_entry_of(e);
            }
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    largest::reset();
    for f in frames(data) {
        match f {
            Ok(p) => payload(p),
            Err(_) => break,
        }
    }
    let bound = PER_BYTE * data.len() + 4096;
    assert!(
        largest::largest() <= bound,
        "allocation of {} for a batch of {} bytes",
        largest::largest(),
        data.len()
    );
});
