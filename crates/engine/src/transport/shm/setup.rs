//! Setting up the shared memory of two island processes over their Unix
//! socket, once the handshake has authenticated it: descriptors of sealed
//! memfds passed with `SCM_RIGHTS`.
//!
//! The accepting side offers (one message, two descriptors: the segment
//! holding the pair's two rings, and its own bells); the dialling side
//! answers (one message, one descriptor: its own bells). A message is
//! [`MESSAGE`] bytes: `magic u64, version u32, descriptors u32, ring
//! capacity u64, zero u64` (little endian). Anything else (another magic or
//! version, another number of descriptors, descriptors cut off because the
//! peer sent more than announced) refuses the connection.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use super::SHM_VERSION;

/// Bytes of one setup message.
pub const MESSAGE: usize = 32;
const MAGIC: u64 = u64::from_le_bytes(*b"ISLSHMUP");
/// Most descriptors one message carries.
const MAX_FDS: usize = 2;

/// A setup message: how many descriptors ride with it, and the capacity of
/// the rings (0 in an answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    pub fds: u32,
    pub ring_bytes: u64,
}

impl Setup {
    fn encode(self) -> [u8; MESSAGE] {
        let mut m = [0u8; MESSAGE];
        m[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        m[8..12].copy_from_slice(&SHM_VERSION.to_le_bytes());
        m[12..16].copy_from_slice(&self.fds.to_le_bytes());
        m[16..24].copy_from_slice(&self.ring_bytes.to_le_bytes());
        m
    }

    fn decode(m: &[u8; MESSAGE]) -> Result<Setup, String> {
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&m[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&m[at..at + 4]);
            u32::from_le_bytes(b)
        };
        if u64_at(0) != MAGIC {
            return Err(format!(
                "not a shared-memory setup message (magic {:#018x}): does the peer run transport = \"shm\"?",
                u64_at(0)
            ));
        }
        let version = u32_at(8);
        if version != SHM_VERSION {
            return Err(format!(
                "shared-memory layout version {version}, ours is {SHM_VERSION}"
            ));
        }
        if u64_at(24) != 0 {
            return Err("a setup message with its last word set".into());
        }
        Ok(Setup {
            fds: u32_at(12),
            ring_bytes: u64_at(16),
        })
    }
}

/// Sends `setup` with `fds` (which must number `setup.fds`).
pub fn send(s: &mut UnixStream, setup: Setup, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    if fds.len() != setup.fds as usize || fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} descriptors for a setup of {}", fds.len(), setup.fds),
        ));
    }
    let msg = setup.encode();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    let sent = loop {
        match rustix::net::sendmsg(
            s.as_fd(),
            &[IoSlice::new(&msg)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // The descriptors went with the first byte; the rest is plain bytes.
    s.write_all(&msg[sent..])
}

/// Receives one setup message and its descriptors (exactly `setup.fds` of
/// them, at most [`MAX_FDS`]).
pub fn recv(s: &mut UnixStream) -> Result<(Setup, Vec<OwnedFd>), String> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    let mut msg = [0u8; MESSAGE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            s.as_fd(),
            &mut [IoSliceMut::new(&mut msg)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(r) => break r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("receiving the shared-memory setup: {e}")),
        }
    };
    // Taken before anything can fail, so that every descriptor received is
    // owned (and closed if refused).
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if got.bytes == 0 {
        return Err("the peer closed the connection before the shared-memory setup".into());
    }
    if got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(format!(
            "the peer sent more than {MAX_FDS} descriptors with the setup"
        ));
    }
    s.read_exact(&mut msg[got.bytes..])
        .map_err(|e| format!("receiving the shared-memory setup: {e}"))?;
    let setup = Setup::decode(&msg)?;
    if setup.fds as usize != fds.len() {
        return Err(format!(
            "the setup announces {} descriptors and carried {}",
            setup.fds,
            fds.len()
        ));
    }
    Ok((setup, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Seek;

    fn memfd(tag: &[u8]) -> std::fs::File {
        let fd = rustix::fs::memfd_create("setup-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(tag).unwrap();
        f
    }

    fn content(fd: OwnedFd) -> Vec<u8> {
        let mut f = std::fs::File::from(fd);
        f.rewind().unwrap();
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn descriptors_cross_with_their_message_and_nothing_more_is_read() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let (x, y) = (memfd(b"segment"), memfd(b"bells"));
        let offer = Setup {
            fds: 2,
            ring_bytes: 1 << 16,
        };
        send(&mut a, offer, &[x.as_fd(), y.as_fd()]).unwrap();
        // What follows the message on the stream is left for the next reader.
        a.write_all(b"after").unwrap();
        let (got, fds) = recv(&mut b).unwrap();
        assert_eq!(got, offer);
        let fds: Vec<Vec<u8>> = fds.into_iter().map(content).collect();
        assert_eq!(fds, vec![b"segment".to_vec(), b"bells".to_vec()]);
        let mut rest = [0u8; 5];
        b.read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"after");
    }

    #[test]
    fn a_wrong_message_is_refused_naming_what_is_wrong() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        // A peer that speaks the stream layer instead (transport = "uds").
        a.write_all(&[7u8; MESSAGE]).unwrap();
        let e = recv(&mut b).unwrap_err();
        assert!(e.contains("transport = \"shm\""), "{e}");

        let x = memfd(b"one");
        let announced_two = Setup {
            fds: 2,
            ring_bytes: 0,
        };
        let e = send(&mut a, announced_two, &[x.as_fd()]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // Announcing one more than it carries, by hand.
        let mut m = Setup {
            fds: 1,
            ring_bytes: 0,
        }
        .encode();
        m[12] = 2;
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(&m).unwrap();
        let e = recv(&mut b).unwrap_err();
        assert!(e.contains("announces 2 descriptors and carried 0"), "{e}");
        let mut v = Setup {
            fds: 0,
            ring_bytes: 0,
        }
        .encode();
        v[8] = 99;
        a.write_all(&v).unwrap();
        let e = recv(&mut b).unwrap_err();
        assert!(e.contains("version 99"), "{e}");
        drop(a);
        let e = recv(&mut b).unwrap_err();
        assert!(e.contains("closed"), "{e}");
    }
}
