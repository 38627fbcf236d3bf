//! TEMPORARY interface stand-in while the real log is written on its own branch.
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    Sync,
    Async,
    Off,
}
impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            "off" => Ok(Durability::Off),
            _ => Err(format!(
                "unknown durability '{s}' (valid: sync, async, off)"
            )),
        }
    }
}
impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::Off => "off",
        })
    }
}
pub struct WalConfig {
    pub dir: PathBuf,
    pub durability: Durability,
    pub segment_bytes: u64,
}
pub type BatchSeq = u64;
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct WalError(String);
impl From<WalError> for crate::Error {
    fn from(e: WalError) -> Self {
        crate::Error::LogFailed(e.0)
    }
}
#[derive(Default)]
pub struct LogBuffer {
    b: Vec<u8>,
    n: usize,
}
impl LogBuffer {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn commit_begin(&mut self, tid: u64) {
        self.b.extend_from_slice(&tid.to_le_bytes());
    }
    pub fn put(&mut self, table: u16, key: u64, row: &[u8]) {
        self.b.extend_from_slice(&table.to_le_bytes());
        self.b.extend_from_slice(&key.to_le_bytes());
        self.b.extend_from_slice(row);
    }
    pub fn delete(&mut self, table: u16, key: u64) {
        self.b.extend_from_slice(&table.to_le_bytes());
        self.b.extend_from_slice(&key.to_le_bytes());
    }
    pub fn record_end(&mut self) {
        self.n += 1;
    }
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    pub fn len_bytes(&self) -> usize {
        self.b.len()
    }
    pub fn records(&self) -> usize {
        self.n
    }
}
pub struct WriteEntry {
    pub table: u16,
    pub key: u64,
    pub row: Option<Vec<u8>>,
}
pub enum LogRecord {
    Commit {
        seq: BatchSeq,
        tid: u64,
        writes: Vec<WriteEntry>,
    },
}
pub struct CheckpointData {
    pub start_seq: BatchSeq,
    pub rows: Vec<(u16, u64, u64, Vec<u8>)>,
}
pub struct Recovery {
    pub checkpoint: Option<CheckpointData>,
    pub records: Vec<LogRecord>,
    pub truncated: Option<String>,
}
pub struct CheckpointInfo;
pub struct Wal {
    seq: AtomicU64,
}
impl Wal {
    pub fn open(_cfg: WalConfig) -> Result<(Arc<Wal>, Recovery), WalError> {
        Ok((
            Arc::new(Wal {
                seq: AtomicU64::new(0),
            }),
            Recovery {
                checkpoint: None,
                records: vec![],
                truncated: None,
            },
        ))
    }
    pub fn submit(&self, buf: &mut LogBuffer) -> Result<BatchSeq, WalError> {
        buf.b.clear();
        buf.n = 0;
        Ok(self.seq.fetch_add(1, Ordering::AcqRel) + 1)
    }
    pub fn durable_seq(&self) -> BatchSeq {
        self.seq.load(Ordering::Acquire)
    }
    pub fn wait_durable(&self, _seq: BatchSeq) -> Result<(), WalError> {
        Ok(())
    }
    pub fn failed(&self) -> Option<WalError> {
        None
    }
    pub fn next_seq(&self) -> BatchSeq {
        self.seq.load(Ordering::Acquire) + 1
    }
    pub fn write_checkpoint<'a>(
        &self,
        _start_seq: BatchSeq,
        rows: impl Iterator<Item = (u16, u64, u64, &'a [u8])>,
    ) -> Result<CheckpointInfo, WalError> {
        rows.for_each(drop);
        Ok(CheckpointInfo)
    }
    pub fn shutdown(&self) {}
}
