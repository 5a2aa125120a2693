//! What a client prints: the device line, notes, a table per test (size, iterations,
//! latency percentiles or GB/s and M msg/s), or with `--json` one object per line; and
//! on a terminal a progress line on stderr.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::gpu::Memory;
use crate::rails::{self, RailStat};
use crate::res::Device;
use crate::stats::{Measure, Row};
use crate::test::Test;

/// How a test was run (the table's header line, the JSON objects' fields).
#[derive(Clone, Copy, Debug)]
pub struct TestInfo {
    /// The test.
    pub test: Test,
    /// QPs.
    pub qps: u32,
    /// WRs in flight per QP (bandwidth).
    pub depth: u32,
    /// WRs per doorbell (bandwidth).
    pub batch: u32,
    /// Rails (devices on each end), each with `qps` QPs: 1 without `-d all` or a list.
    pub rails: usize,
    /// Where this end's RDMA buffers are.
    pub memory: Memory,
}

/// The client's output.
pub struct Output {
    json: bool,
    progress: Option<Progress>,
    rows: Vec<Row>,
    out: Box<dyn Write>,
    /// The first failed write to `out`: after it nothing more is written, and the
    /// client stops its run (a closed pipe, `efa-perf local | head -1`, ends it quietly).
    failed: Option<std::io::Error>,
}

/// The progress line: tests done, current size, elapsed.
struct Progress {
    start: Instant,
    last: Instant,
    shown: bool,
    text: String,
}

impl Output {
    /// Writes to stdout; the progress line only if asked for and stderr is a terminal.
    pub fn new(json: bool, progress: bool) -> Output {
        Output::to(Box::new(std::io::stdout()), json, progress)
    }

    /// Writes to `out`.
    pub fn to(out: Box<dyn Write>, json: bool, progress: bool) -> Output {
        let progress = (progress && std::io::stderr().is_terminal()).then(|| Progress {
            start: Instant::now(),
            last: Instant::now() - Duration::from_secs(1),
            shown: false,
            text: String::new(),
        });
        Output {
            json,
            progress,
            rows: Vec::new(),
            out,
            failed: None,
        }
    }

    fn line(&mut self, s: &str) {
        self.clear_progress();
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = writeln!(self.out, "{s}").and_then(|()| self.out.flush()) {
            self.failed = Some(e);
        }
    }

    /// True once a write failed (the reader went away): the run should stop.
    pub fn closed(&self) -> bool {
        self.failed.is_some()
    }

    /// The write error to report, if any: none for a closed pipe (the reader wanted no
    /// more, as with `head`), which ends the program quietly with status 0.
    pub fn write_error(&self) -> Option<String> {
        match &self.failed {
            Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Some(format!("cannot write to stdout: {e}"))
            }
            _ => None,
        }
    }

    fn json_line(&mut self, v: Value) {
        self.line(&v.to_string());
    }

    /// The first line: the device (or devices, one per rail), and whether it is the
    /// software one.
    pub fn device(&mut self, devs: &[Device], peer: Option<&Value>) {
        if self.json {
            let mut v = json!({ "type": "device", "version": env!("CARGO_PKG_VERSION") });
            if let (Some(m), Value::Object(d)) = (v.as_object_mut(), rails::hello_json(devs)) {
                m.extend(d);
                if let Some(p) = peer {
                    m.insert("peer".into(), p.clone());
                }
            }
            self.json_line(v);
        } else {
            self.line(&rails::banner(devs));
        }
    }

    /// A remark (skipped tests or sizes).
    pub fn note(&mut self, test: Option<Test>, msg: &str) {
        if self.json {
            self.json_line(json!({ "type": "note", "test": test.map(Test::name), "message": msg }));
        } else {
            self.line(&format!("note: {msg}"));
        }
    }

    /// One size measured: printed at once with `--json`, else kept for the table.
    pub fn row(&mut self, info: &TestInfo, row: Row) {
        if self.json {
            let mut v = json!({
                "type": "result",
                "test": info.test.name(),
                "size": row.size,
                "iterations": row.iters,
                "qps": info.qps,
                "verified": true,
            });
            let m = v.as_object_mut().expect("an object");
            match row.measure {
                Measure::Latency {
                    min,
                    p50,
                    p99,
                    p999,
                    max,
                    avg,
                } => {
                    for (k, x) in [
                        ("min_us", min),
                        ("p50_us", p50),
                        ("p99_us", p99),
                        ("p99_9_us", p999),
                        ("max_us", max),
                        ("avg_us", avg),
                    ] {
                        m.insert(k.into(), json!(x));
                    }
                }
                Measure::Bandwidth { secs, gbps, mmps } => {
                    m.insert("depth".into(), json!(info.depth));
                    m.insert("batch".into(), json!(info.batch));
                    m.insert("seconds".into(), json!(secs));
                    m.insert("gb_per_s".into(), json!(gbps));
                    m.insert("mmsg_per_s".into(), json!(mmps));
                    let bytes = (row.size as u64).saturating_mul(row.iters);
                    m.insert("bytes".into(), json!(bytes));
                    m.insert("memory".into(), json!(info.memory.name()));
                    if !row.rails.is_empty() {
                        let each: Vec<Value> = row.rails.iter().map(rail_json).collect();
                        m.insert("rails".into(), Value::Array(each));
                    }
                }
            }
            self.json_line(v);
        } else {
            self.rows.push(row);
        }
    }

    /// The end of a test: its table.
    pub fn end_test(&mut self, info: &TestInfo) {
        if self.json {
            return;
        }
        let rows = std::mem::take(&mut self.rows);
        if rows.is_empty() {
            return;
        }
        let qps = if info.qps == 1 {
            "1 QP".to_string()
        } else {
            format!("{} QPs", info.qps)
        };
        let gpu = if info.memory == Memory::Gpu {
            "  GPU memory"
        } else {
            ""
        };
        let rule = "-".repeat(92);
        self.line(&rule);
        if info.test.is_latency() {
            self.line(&format!(
                " {}  SRD  {qps}  latency = half the round trip, in microseconds",
                info.test.name()
            ));
            self.line(&format!(
                " {:>9} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                "bytes", "iterations", "min", "p50", "p99", "p99.9", "max", "avg"
            ));
        } else if info.rails > 1 {
            self.line(&format!(
                " {}  SRD  {} rails  {qps} per rail  {} in flight per QP  {} per doorbell{gpu}",
                info.test.name(),
                info.rails,
                info.depth,
                info.batch
            ));
            self.line(&format!(
                " {:>9} {:>11} {:>12} {:>12} {:>10}  {}",
                "bytes", "iterations", "GB/s", "M msg/s", "seconds", "rail"
            ));
        } else {
            self.line(&format!(
                " {}  SRD  {qps}  {} in flight per QP  {} per doorbell{gpu}",
                info.test.name(),
                info.depth,
                info.batch
            ));
            self.line(&format!(
                " {:>9} {:>11} {:>12} {:>12} {:>10}",
                "bytes", "iterations", "GB/s", "M msg/s", "seconds"
            ));
        }
        for r in rows {
            let text = match r.measure {
                Measure::Latency { min, p50, p99, p999, max, avg } => format!(
                    " {:>9} {:>11} {min:>9.2} {p50:>9.2} {p99:>9.2} {p999:>9.2} {max:>9.2} {avg:>9.2}",
                    r.size, r.iters
                ),
                Measure::Bandwidth { secs, gbps, mmps } => format!(
                    " {:>9} {:>11} {gbps:>12.3} {mmps:>12.4} {secs:>10.3}",
                    r.size, r.iters
                ),
            };
            if r.rails.is_empty() {
                self.line(&text);
                continue;
            }
            // The aggregate, then each rail's share of the same time.
            self.line(&format!("{text}  all"));
            let secs = match r.measure {
                Measure::Bandwidth { secs, .. } => secs,
                Measure::Latency { .. } => 0.0,
            };
            for x in &r.rails {
                self.line(&format!(
                    " {:>9} {:>11} {:>12.3} {:>12.4} {secs:>10.3}  {}",
                    r.size, x.msgs, x.gbps, x.mmps, x.device
                ));
            }
        }
        self.line(&rule);
    }

    /// Updates the progress line (at most five times a second).
    pub fn progress(
        &mut self,
        tests: (usize, usize),
        test: Test,
        sizes: (usize, usize),
        size: usize,
    ) {
        let Some(p) = self.progress.as_mut() else {
            return;
        };
        if p.last.elapsed() < Duration::from_millis(200) {
            return;
        }
        p.last = Instant::now();
        p.text = format!(
            "[{}/{} {}] size {size} B ({}/{}), {:.1} s",
            tests.0 + 1,
            tests.1,
            test.name(),
            sizes.0 + 1,
            sizes.1,
            p.start.elapsed().as_secs_f64()
        );
        p.shown = true;
        let _ = write!(std::io::stderr(), "\r\x1b[2K{}", p.text);
    }

    fn clear_progress(&mut self) {
        if let Some(p) = self.progress.as_mut() {
            if p.shown {
                let _ = write!(std::io::stderr(), "\r\x1b[2K");
                p.shown = false;
                p.last = Instant::now() - Duration::from_secs(1);
            }
        }
    }

    /// Removes the progress line (at the end, or before an error message).
    pub fn finish(&mut self) {
        self.clear_progress();
    }
}

/// One rail of a `--json` result.
fn rail_json(r: &RailStat) -> Value {
    json!({
        "device": r.device,
        "peer_device": r.peer_device,
        "bytes": r.bytes,
        "msgs": r.msgs,
        "gb_per_s": r.gbps,
        "mmsg_per_s": r.mmps,
    })
}
