//! CPU time of the process and of the calling thread.
//!
//! Process time is user + system time of all threads, from
//! `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`: the same sum `getrusage(RUSAGE_SELF)`
//! gives (rustix 1.1 does not wrap getrusage), at nanosecond rather than
//! tick resolution. [`CpuTime::process_from_proc_stat`] reads the same figure
//! from `/proc/self/stat`, split into user and system, as a cross-check.

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId, Timespec};

/// Clock ticks per second of `/proc/*/stat`. This is USER_HZ, which Linux fixes
/// at 100 on every architecture as part of its ABI (sysconf(_SC_CLK_TCK)
/// returns it; rustix's `param` feature, not enabled here, would too).
pub const PROC_STAT_TICKS_PER_S: u64 = 100;

/// Namespace for the CPU-time readings.
pub struct CpuTime;

impl CpuTime {
    /// User + system CPU time of the whole process so far.
    pub fn process_now() -> Duration {
        to_duration(clock_gettime(ClockId::ProcessCPUTime))
    }

    /// User + system CPU time of the calling thread so far.
    pub fn thread_now() -> Duration {
        to_duration(clock_gettime(ClockId::ThreadCPUTime))
    }

    /// (user, system) CPU time of the process from `/proc/self/stat`, at
    /// 10 ms resolution.
    pub fn process_from_proc_stat() -> std::io::Result<(Duration, Duration)> {
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        let (user, system) = parse_proc_stat_ticks(&stat).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("/proc/self/stat has no utime/stime fields: {stat:?}"),
            )
        })?;
        Ok((ticks(user), ticks(system)))
    }

    /// CPU time and last CPU of thread `tid` of this process, from
    /// `/proc/self/task/<tid>/stat` (10 ms resolution). An error when the
    /// kernel does not list the thread (it has ended).
    pub fn task_from_proc_stat(tid: i32) -> std::io::Result<TaskCpu> {
        let path = format!("/proc/self/task/{tid}/stat");
        let stat = std::fs::read_to_string(&path)?;
        let bad = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{path} lacks utime, stime or processor: {stat:?}"),
            )
        };
        let (user, system) = parse_proc_stat_ticks(&stat).ok_or_else(bad)?;
        let last_cpu = parse_proc_stat_processor(&stat).ok_or_else(bad)?;
        Ok(TaskCpu {
            user: ticks(user),
            system: ticks(system),
            last_cpu,
        })
    }
}

/// One thread's CPU figures ([`CpuTime::task_from_proc_stat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskCpu {
    pub user: Duration,
    pub system: Duration,
    /// The CPU it last ran on.
    pub last_cpu: u32,
}

fn ticks(t: u64) -> Duration {
    Duration::from_millis(t * 1000 / PROC_STAT_TICKS_PER_S)
}

fn to_duration(t: Timespec) -> Duration {
    // CPU clocks start at 0 and never go negative; clamp rather than trust it.
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// utime and stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in ticks.
/// The command name (field 2) is in parentheses and may hold spaces or ')',
/// so fields are counted from the last ')'.
fn parse_proc_stat_ticks(stat: &str) -> Option<(u64, u64)> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    // After the comm come field 3 (state) ... field 13; utime is the 12th from here.
    let utime = fields.nth(11)?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The CPU a task last ran on (field 39 of a `/proc/<pid>/stat` line).
fn parse_proc_stat_processor(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after the comm.
    after_comm.split_whitespace().nth(39 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until this thread has used `d` of CPU (or 10 s of wall time pass:
    /// the machine is shared, so wall time says little). Returns the thread
    /// CPU time used.
    fn spin_cpu(d: Duration) -> Duration {
        let wall = std::time::Instant::now();
        let t0 = CpuTime::thread_now();
        let mut x = 0u64;
        while CpuTime::thread_now() - t0 < d && wall.elapsed() < Duration::from_secs(10) {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        CpuTime::thread_now() - t0
    }

    #[test]
    fn parse_proc_stat_handles_odd_command_names() {
        let line = "1234 (a b) c)) R 1 2 3 4 5 6 7 8 9 10 250 31 0 0 20 0 1 0";
        assert_eq!(parse_proc_stat_ticks(line), Some((250, 31)));
        assert_eq!(parse_proc_stat_ticks("1 (x) R 1 2"), None);
        assert_eq!(parse_proc_stat_ticks("no parenthesis"), None);
        assert_eq!(parse_proc_stat_processor(line), None);
        let fields: Vec<String> = (3..=52).map(|f| f.to_string()).collect();
        let full = format!("77 (w) x) {}", fields.join(" "));
        assert_eq!(parse_proc_stat_processor(&full), Some(39));
        assert_eq!(parse_proc_stat_ticks(&full), Some((14, 15)));
    }

    #[test]
    fn this_threads_task_stat_is_read() {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        spin_cpu(Duration::from_millis(30));
        let t = CpuTime::task_from_proc_stat(tid).unwrap();
        assert!(t.user + t.system >= Duration::from_millis(20), "{t:?}");
        assert!(CpuTime::task_from_proc_stat(-1).is_err());
    }

    #[test]
    fn thread_time_counts_spinning_not_sleeping() {
        let spun = spin_cpu(Duration::from_millis(30));
        assert!(spun >= Duration::from_millis(30), "spun {spun:?}");
        let t1 = CpuTime::thread_now();
        std::thread::sleep(Duration::from_millis(50));
        let slept = CpuTime::thread_now() - t1;
        assert!(slept < Duration::from_millis(20), "slept {slept:?}");
    }

    #[test]
    fn process_time_includes_this_thread_and_matches_proc_stat() {
        let p0 = CpuTime::process_now();
        let spun = spin_cpu(Duration::from_millis(30));
        let p1 = CpuTime::process_now();
        assert!(p1 - p0 >= spun, "process {:?} < thread {spun:?}", p1 - p0);
        let (user, system) = CpuTime::process_from_proc_stat().unwrap();
        let from_stat = user + system;
        let p2 = CpuTime::process_now();
        // /proc counts in 10 ms ticks, and other test threads run meanwhile.
        assert!(
            from_stat <= p2 + Duration::from_millis(20),
            "{from_stat:?} vs {p2:?}"
        );
        assert!(
            from_stat + Duration::from_millis(50) >= p1,
            "{from_stat:?} vs {p1:?}"
        );
    }
}
