//! A live view of a running benchmark, on stderr.
//!
//! A monitor thread wakes about every 250 ms, sums the workers'
//! [`ProgressCounter`]s (relaxed loads only; workers never wait for it) and
//! shows the commit rate over the last second: an indicatif bar over the run
//! time on a terminal, otherwise a plain line per second such as
//! `[  3.0s/10.0s] ycsb measure  1,234,567 txn/s`, which reads well in a log.
//! The driver tells it the phase (`warm-up`, `measure`) by message.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::fmt::thousands;
use crate::stats::Progress;
use islands::proc::stats::ProgressCounter;

/// How often the monitor samples the counters.
pub const TICK: Duration = Duration::from_millis(250);
/// Plain lines are printed every this many ticks (once a second).
const PLAIN_EVERY_TICKS: u32 = 4;
/// The rate is measured over this many ticks (one second).
const RATE_WINDOW_TICKS: usize = 4;

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisplayMode {
    /// A bar if stderr is a terminal, plain lines otherwise.
    Auto,
    Bar,
    Plain,
    /// Nothing, and no monitor thread.
    Quiet,
}

enum Msg {
    Phase(String),
    Stop,
}

/// The running display. Stop it with [`ProgressDisplay::finish`] (dropping it
/// stops it too).
pub struct ProgressDisplay {
    tx: Option<Sender<Msg>>,
    monitor: Option<JoinHandle<()>>,
}

impl ProgressDisplay {
    /// Shows progress over a run of `total` (warm-up and measurement) in
    /// [`DisplayMode::Auto`].
    pub fn start(
        total: Duration,
        label: &str,
        counters: Vec<Arc<ProgressCounter>>,
    ) -> ProgressDisplay {
        ProgressDisplay::start_with(DisplayMode::Auto, total, label, counters)
    }

    /// A display that shows nothing.
    pub fn quiet() -> ProgressDisplay {
        ProgressDisplay {
            tx: None,
            monitor: None,
        }
    }

    pub fn start_with(
        mode: DisplayMode,
        total: Duration,
        label: &str,
        counters: Vec<Arc<ProgressCounter>>,
    ) -> ProgressDisplay {
        let mode = match mode {
            DisplayMode::Auto if std::io::stderr().is_terminal() => DisplayMode::Bar,
            DisplayMode::Auto => DisplayMode::Plain,
            m => m,
        };
        let sink = match mode {
            DisplayMode::Quiet => return ProgressDisplay::quiet(),
            DisplayMode::Bar => Sink::Bar(new_bar(total, label)),
            _ => Sink::Plain(Box::new(std::io::stderr())),
        };
        ProgressDisplay::spawn(sink, total, label, counters)
    }

    fn spawn(
        sink: Sink,
        total: Duration,
        label: &str,
        counters: Vec<Arc<ProgressCounter>>,
    ) -> ProgressDisplay {
        let (tx, rx) = mpsc::channel();
        let mut monitor = Monitor {
            sink,
            total,
            label: label.to_string(),
            phase: String::new(),
            progress: Progress::from_counters(counters),
            started: Instant::now(),
            window: VecDeque::with_capacity(RATE_WINDOW_TICKS + 1),
        };
        let spawned = std::thread::Builder::new()
            .name("bench-progress".to_string())
            .spawn(move || {
                let mut ticks = 0u32;
                let mut next = Instant::now() + TICK;
                loop {
                    match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                        Ok(Msg::Phase(p)) => monitor.phase = p,
                        Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                        Err(RecvTimeoutError::Timeout) => {
                            ticks += 1;
                            next += TICK;
                            monitor.tick(ticks.is_multiple_of(PLAIN_EVERY_TICKS));
                        }
                    }
                }
                monitor.finish();
            });
        match spawned {
            Ok(handle) => ProgressDisplay {
                tx: Some(tx),
                monitor: Some(handle),
            },
            // A display is a convenience: without a thread the run goes on unseen.
            Err(_) => ProgressDisplay::quiet(),
        }
    }

    /// Names the phase shown from now on, e.g. `"warm-up"` or `"measure"`.
    pub fn set_phase(&self, phase: &str) {
        if let Some(tx) = &self.tx {
            // The monitor only goes away in `finish`; a failed send loses a label.
            let _ = tx.send(Msg::Phase(phase.to_string()));
        }
    }

    /// Stops the monitor, clears the bar and waits for the thread.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Msg::Stop);
        }
        if let Some(handle) = self.monitor.take() {
            // A panic in the display must not take the benchmark's result with it.
            let _ = handle.join();
        }
    }
}

impl Drop for ProgressDisplay {
    fn drop(&mut self) {
        self.stop();
    }
}

enum Sink {
    Bar(ProgressBar),
    Plain(Box<dyn Write + Send>),
}

struct Monitor {
    sink: Sink,
    total: Duration,
    label: String,
    phase: String,
    progress: Progress,
    started: Instant,
    /// (time, summed commits) of the last few ticks, oldest first.
    window: VecDeque<(Instant, u64)>,
}

impl Monitor {
    fn tick(&mut self, plain_due: bool) {
        let now = Instant::now();
        self.window.push_back((now, self.progress.total()));
        if self.window.len() > RATE_WINDOW_TICKS + 1 {
            self.window.pop_front();
        }
        let rate = window_rate(&self.window);
        let elapsed = now - self.started;
        match &mut self.sink {
            Sink::Bar(bar) => {
                bar.set_position(elapsed.min(self.total).as_millis() as u64);
                bar.set_message(format!(
                    "{:>6.1}s/{:.1}s {} {} txn/s",
                    elapsed.as_secs_f64(),
                    self.total.as_secs_f64(),
                    self.phase,
                    thousands(rate.round() as u64)
                ));
            }
            Sink::Plain(out) if plain_due => {
                let line = plain_line(elapsed, self.total, &self.label, &self.phase, rate);
                // Progress lines are best effort: a closed stderr must not stop the run.
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            Sink::Plain(_) => {}
        }
    }

    fn finish(&mut self) {
        if let Sink::Bar(bar) = &self.sink {
            bar.finish_and_clear();
        }
    }
}

fn new_bar(total: Duration, label: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(total.as_millis() as u64),
        ProgressDrawTarget::stderr_with_hz(4),
    );
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(label.to_string());
    bar
}

/// Commits per second between the oldest and newest sample. Counters only
/// grow, but a saturating difference keeps a misuse from showing nonsense.
fn window_rate(window: &VecDeque<(Instant, u64)>) -> f64 {
    match (window.front(), window.back()) {
        (Some(&(t0, c0)), Some(&(t1, c1))) if t1 > t0 => {
            c1.saturating_sub(c0) as f64 / (t1 - t0).as_secs_f64()
        }
        _ => 0.0,
    }
}

/// `[  3.0s/10.0s] ycsb measure  1,234,567 txn/s`
fn plain_line(elapsed: Duration, total: Duration, label: &str, phase: &str, rate: f64) -> String {
    let mut line = format!(
        "[{:>5.1}s/{:.1}s]",
        elapsed.as_secs_f64(),
        total.as_secs_f64()
    );
    for word in [label, phase] {
        if !word.is_empty() {
            line.push(' ');
            line.push_str(word);
        }
    }
    line.push_str(&format!("  {} txn/s", thousands(rate.round() as u64)));
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A `Write` whose bytes the test can read afterwards.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_line_format() {
        let l = plain_line(
            Duration::from_millis(3_000),
            Duration::from_secs(10),
            "",
            "measure",
            1_234_567.4,
        );
        assert_eq!(l, "[  3.0s/10.0s] measure  1,234,567 txn/s");
        let l = plain_line(Duration::ZERO, Duration::from_secs(5), "ycsb", "", 0.0);
        assert_eq!(l, "[  0.0s/5.0s] ycsb  0 txn/s");
    }

    #[test]
    fn window_rate_is_commits_over_time() {
        let t0 = Instant::now();
        let mut w = VecDeque::new();
        assert_eq!(window_rate(&w), 0.0);
        w.push_back((t0, 1_000));
        assert_eq!(window_rate(&w), 0.0);
        w.push_back((t0 + Duration::from_millis(500), 6_000));
        assert_eq!(window_rate(&w), 10_000.0);
    }

    #[test]
    fn plain_display_reports_phase_and_rate_then_stops_promptly() {
        let out = Shared::default();
        let counter = ProgressCounter::new();
        let display = ProgressDisplay::spawn(
            Sink::Plain(Box::new(out.clone())),
            Duration::from_secs(3),
            "test",
            vec![Arc::clone(&counter)],
        );
        display.set_phase("warm-up");
        // A worker committing steadily.
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < Duration::from_millis(2_200) {
            n += 1_000;
            counter.publish(n);
            std::thread::sleep(Duration::from_millis(1));
            if n == 1_000_000 {
                display.set_phase("measure");
            }
        }
        let stop = Instant::now();
        display.finish();
        assert!(
            stop.elapsed() < Duration::from_millis(200),
            "finish took too long"
        );
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() >= 2, "{text}");
        // The first line comes after four ticks, about a second in (later on a busy machine).
        assert!(lines[0].starts_with("[  1."), "{text}");
        assert!(lines[0].contains("s/3.0s] test "), "{text}");
        assert!(lines.iter().all(|l| l.ends_with(" txn/s")), "{text}");
        // Some commits were seen: a non-zero rate.
        assert!(lines.iter().any(|l| !l.ends_with("  0 txn/s")), "{text}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("warm-up") || l.contains("measure")),
            "{text}"
        );
    }

    #[test]
    fn quiet_shows_nothing_and_finishes() {
        let d = ProgressDisplay::start_with(
            DisplayMode::Quiet,
            Duration::from_secs(1),
            "q",
            vec![ProgressCounter::new()],
        );
        assert!(d.monitor.is_none());
        d.set_phase("measure");
        d.finish();
    }

    #[test]
    fn bar_mode_runs_and_stops() {
        // Not a terminal under test, so indicatif draws nothing; this checks
        // the bar path ticks and shuts down cleanly.
        let d = ProgressDisplay::start_with(
            DisplayMode::Bar,
            Duration::from_secs(1),
            "bar",
            vec![ProgressCounter::new()],
        );
        d.set_phase("measure");
        std::thread::sleep(Duration::from_millis(600));
        let t = Instant::now();
        d.finish();
        assert!(t.elapsed() < Duration::from_millis(200));
    }
}
