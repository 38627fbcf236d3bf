//! Message round trips between two pinned threads: the harness behind
//! `islands bench ipc`.
//!
//! A transport is a pair of [`Endpoint`]s. The client, on the first CPU, sends
//! `batch` messages and then waits for `batch` replies; the server, on the
//! second CPU, echoes every message it receives. One round trip is the time
//! from the first send to the last reply, recorded in a histogram.
//!
//! Transports measured here:
//! - `spin`: two `crossbeam_queue::ArrayQueue`s, both sides spinning (the floor:
//!   nothing but the cache-line transfers of the queue);
//! - `channel`: two `crossbeam_channel::bounded` channels with blocking `recv`;
//! - `mpsc`: two `std::sync::mpsc` channels, for reference.
//!
//! The island transport plugs in by implementing [`Endpoint`] for its two ends
//! and calling [`measure_round_trips`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::bench::driver::pin_to;
use crate::topology::CpuId;
use crate::Error;

/// The end-of-run message; a transport never sees it as a payload.
pub const STOP: u64 = u64::MAX;

/// One end of a two-way link carrying `u64` messages.
pub trait Endpoint: Send + 'static {
    /// Sends a message; may block or spin while the link is full.
    fn send(&mut self, msg: u64);
    /// Waits for the next message.
    fn recv(&mut self) -> u64;
}

/// How to measure.
#[derive(Clone, Debug)]
pub struct IpcConfig {
    /// Client and server CPUs; `None`: do not pin.
    pub cpus: Option<(CpuId, CpuId)>,
    /// Messages per round trip (1 or more).
    pub batch: usize,
    /// Unmeasured round trips first.
    pub warmup: Duration,
    /// Measure for this long, unless `round_trips` is given.
    pub duration: Duration,
    /// Measure exactly this many round trips instead.
    pub round_trips: Option<u64>,
}

/// What one transport did.
#[derive(Clone, Debug, Serialize)]
pub struct IpcResult {
    pub transport: String,
    pub batch: usize,
    /// Measured round trips.
    pub round_trips: u64,
    /// Messages the server echoed in the measured phase (= round_trips × batch).
    pub messages: u64,
    pub seconds: f64,
    pub round_trips_per_s: f64,
    pub median_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// Median round trip divided by the batch.
    pub median_ns_per_msg: f64,
}

/// Runs the client on `cfg.cpus.0` and the server (an echo loop) on `cfg.cpus.1`.
pub fn measure_round_trips<C: Endpoint, S: Endpoint>(
    name: &str,
    mut client: C,
    mut server: S,
    cfg: &IpcConfig,
) -> Result<IpcResult, Error> {
    if cfg.batch == 0 {
        return Err(Error::Config("--batch must be at least 1".into()));
    }
    if cfg.round_trips.is_none() && cfg.duration.is_zero() {
        return Err(Error::Config(
            "--duration must be more than 0 seconds".into(),
        ));
    }
    if let Some((a, b)) = cfg.cpus {
        if a == b {
            return Err(Error::Config(format!(
                "the two threads need two different CPUs, not {a} and {b}"
            )));
        }
    }
    let server_cpu = cfg.cpus.map(|(_, b)| b);
    let server = std::thread::Builder::new()
        .name("ipc-server".into())
        .spawn(move || -> Result<u64, Error> {
            if let Some(cpu) = server_cpu {
                if let Err(e) = pin_to(cpu as usize) {
                    // Unblock the client before failing.
                    server.send(STOP);
                    return Err(e);
                }
            }
            let mut echoed = 0u64;
            loop {
                let m = server.recv();
                server.send(m);
                if m == STOP {
                    return Ok(echoed);
                }
                echoed += 1;
            }
        })
        .map_err(|e| Error::Config(format!("cannot start the server thread: {e}")))?;

    let mut server_stopped = false;
    let run = client_loop(&mut client, cfg, &mut server_stopped);
    if !server_stopped {
        client.send(STOP);
        // The server echoes STOP last; drain until it arrives.
        while client.recv() != STOP {}
    }
    let echoed = server
        .join()
        .map_err(|_| Error::Config("the server thread panicked".into()))??;
    let (hist, rts, warm_msgs, secs) = run?;
    let messages = echoed - warm_msgs;
    Ok(IpcResult {
        transport: name.to_string(),
        batch: cfg.batch,
        round_trips: rts,
        messages,
        seconds: secs,
        round_trips_per_s: rts as f64 / secs.max(1e-9),
        median_ns: hist.value_at_quantile(0.5),
        p99_ns: hist.value_at_quantile(0.99),
        max_ns: hist.max(),
        mean_ns: hist.mean(),
        median_ns_per_msg: hist.value_at_quantile(0.5) as f64 / cfg.batch as f64,
    })
}

/// The client's side: warm-up, then measured round trips. Returns the
/// histogram, the measured round trips, the messages sent in the warm-up and
/// the measured seconds. Sets `server_stopped` if the server sent STOP.
fn client_loop<C: Endpoint>(
    client: &mut C,
    cfg: &IpcConfig,
    server_stopped: &mut bool,
) -> Result<(Histogram<u64>, u64, u64, f64), Error> {
    if let Some((a, _)) = cfg.cpus {
        pin_to(a as usize)?;
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| Error::Config(format!("histogram: {e}")))?;
    let batch = cfg.batch as u64;
    let mut seq = 0u64;
    let mut round = |seq: u64, server_stopped: &mut bool| -> Result<u64, Error> {
        let t0 = Instant::now();
        for k in 0..batch {
            client.send(seq + k);
        }
        for k in 0..batch {
            let got = client.recv();
            if got != seq + k {
                if got == STOP {
                    *server_stopped = true;
                    return Err(Error::Config(
                        "the server thread stopped (could it not be pinned?)".into(),
                    ));
                }
                return Err(Error::Config(format!(
                    "reply {got} where {} was expected",
                    seq + k
                )));
            }
        }
        Ok((t0.elapsed().as_nanos() as u64).max(1))
    };
    let warm_until = Instant::now() + cfg.warmup;
    while Instant::now() < warm_until {
        round(seq, server_stopped)?;
        seq += batch;
    }
    let warm_msgs = seq;
    let start = Instant::now();
    let mut rts = 0u64;
    loop {
        match cfg.round_trips {
            Some(n) if rts >= n => break,
            None if start.elapsed() >= cfg.duration => break,
            _ => {}
        }
        let ns = round(seq, server_stopped)?;
        hist.saturating_record(ns);
        seq += batch;
        rts += 1;
    }
    Ok((hist, rts, warm_msgs, start.elapsed().as_secs_f64()))
}

/// One end of a spinning `ArrayQueue` pair.
pub struct SpinEnd {
    tx: Arc<ArrayQueue<u64>>,
    rx: Arc<ArrayQueue<u64>>,
}

impl Endpoint for SpinEnd {
    fn send(&mut self, mut msg: u64) {
        while let Err(m) = self.tx.push(msg) {
            msg = m;
            std::hint::spin_loop();
        }
    }
    fn recv(&mut self) -> u64 {
        loop {
            if let Some(m) = self.rx.pop() {
                return m;
            }
            std::hint::spin_loop();
        }
    }
}

/// Two spinning ends; each queue holds `cap` messages (at least 1).
pub fn spin_pair(cap: usize) -> (SpinEnd, SpinEnd) {
    let a = Arc::new(ArrayQueue::new(cap.max(1)));
    let b = Arc::new(ArrayQueue::new(cap.max(1)));
    (
        SpinEnd {
            tx: a.clone(),
            rx: b.clone(),
        },
        SpinEnd { tx: b, rx: a },
    )
}

/// One end of a `crossbeam_channel::bounded` pair.
pub struct ChannelEnd {
    tx: crossbeam_channel::Sender<u64>,
    rx: crossbeam_channel::Receiver<u64>,
}

impl Endpoint for ChannelEnd {
    fn send(&mut self, msg: u64) {
        // A gone peer reads as STOP on the other side; nothing to do here.
        let _ = self.tx.send(msg);
    }
    fn recv(&mut self) -> u64 {
        self.rx.recv().unwrap_or(STOP)
    }
}

pub fn channel_pair(cap: usize) -> (ChannelEnd, ChannelEnd) {
    let (atx, arx) = crossbeam_channel::bounded(cap.max(1));
    let (btx, brx) = crossbeam_channel::bounded(cap.max(1));
    (
        ChannelEnd { tx: atx, rx: brx },
        ChannelEnd { tx: btx, rx: arx },
    )
}

/// One end of a `std::sync::mpsc` pair (unbounded).
pub struct MpscEnd {
    tx: std::sync::mpsc::Sender<u64>,
    rx: std::sync::mpsc::Receiver<u64>,
}

impl Endpoint for MpscEnd {
    fn send(&mut self, msg: u64) {
        // A gone peer reads as STOP on the other side; nothing to do here.
        let _ = self.tx.send(msg);
    }
    fn recv(&mut self) -> u64 {
        self.rx.recv().unwrap_or(STOP)
    }
}

pub fn mpsc_pair() -> (MpscEnd, MpscEnd) {
    let (atx, arx) = std::sync::mpsc::channel();
    let (btx, brx) = std::sync::mpsc::channel();
    (MpscEnd { tx: atx, rx: brx }, MpscEnd { tx: btx, rx: arx })
}

/// The built-in transports, by name.
pub const TRANSPORTS: [&str; 3] = ["spin", "channel", "mpsc"];

/// Measures a built-in transport by name.
pub fn measure(name: &str, cfg: &IpcConfig) -> Result<IpcResult, Error> {
    // Room for one batch plus the STOP echo.
    let cap = cfg.batch + 1;
    match name {
        "spin" => {
            let (c, s) = spin_pair(cap);
            measure_round_trips("spin (ArrayQueue)", c, s, cfg)
        }
        "channel" => {
            let (c, s) = channel_pair(cap);
            measure_round_trips("crossbeam bounded", c, s, cfg)
        }
        "mpsc" => {
            let (c, s) = mpsc_pair();
            measure_round_trips("std mpsc", c, s, cfg)
        }
        other => Err(Error::Config(format!(
            "unknown transport '{other}' (expected spin, channel or mpsc)"
        ))),
    }
}

/// A table of results.
pub fn render_table(results: &[IpcResult], header: &str) -> String {
    use std::fmt::Write as _;
    let mut out = format!("{header}\n\n");
    out.push_str(
        "transport             batch  round trips   rt/s        median ns   p99 ns      ns/msg (median)\n",
    );
    for r in results {
        let _ = writeln!(
            out,
            "{:<21} {:>5} {:>12} {:>10} {:>11} {:>8} {:>17.1}",
            r.transport,
            r.batch,
            crate::bench::fmt::thousands(r.round_trips),
            crate::bench::fmt::human_rate(r.round_trips_per_s),
            crate::bench::fmt::thousands(r.median_ns),
            crate::bench::fmt::thousands(r.p99_ns),
            r.median_ns_per_msg
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(batch: usize, n: u64) -> IpcConfig {
        IpcConfig {
            cpus: None,
            batch,
            warmup: Duration::from_millis(20),
            duration: Duration::from_secs(1),
            round_trips: Some(n),
        }
    }

    #[test]
    fn every_transport_round_trips_the_right_number_of_messages() {
        for name in TRANSPORTS {
            for batch in [1, 7] {
                let r = measure(name, &cfg(batch, 500)).unwrap();
                assert_eq!(r.round_trips, 500, "{name}");
                assert_eq!(r.messages, 500 * batch as u64, "{name} batch {batch}");
                assert!(r.median_ns > 0 && r.p99_ns >= r.median_ns, "{r:?}");
            }
        }
    }

    #[test]
    fn a_timed_run_and_pinning() {
        let cpus = crate::bench::driver::allowed_cpus();
        let mut c = cfg(2, 0);
        c.round_trips = None;
        c.duration = Duration::from_millis(100);
        if cpus.len() >= 2 {
            c.cpus = Some((cpus[0] as CpuId, cpus[1] as CpuId));
        }
        let r = measure("channel", &c).unwrap();
        assert!(r.round_trips > 0);
        assert_eq!(r.messages, r.round_trips * 2);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(measure("carrier-pigeon", &cfg(1, 1)).is_err());
        assert!(measure("spin", &cfg(0, 1)).is_err());
        let mut c = cfg(1, 1);
        c.cpus = Some((0, 0));
        assert!(measure("spin", &c).is_err());
    }
}
