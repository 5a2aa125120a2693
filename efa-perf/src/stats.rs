//! Results: latency percentiles and bandwidth, one row per test and size.

use std::time::Duration;

pub use crate::rails::RailStat;

/// What one size measured.
#[derive(Clone, Debug, PartialEq)]
pub enum Measure {
    /// Ping-pong latency (half the round trip), microseconds.
    Latency {
        /// Smallest.
        min: f64,
        /// Median (perftest's "typical").
        p50: f64,
        /// 99th percentile.
        p99: f64,
        /// 99.9th percentile.
        p999: f64,
        /// Largest.
        max: f64,
        /// Mean.
        avg: f64,
    },
    /// Streaming.
    Bandwidth {
        /// Seconds from the first post to the last completion.
        secs: f64,
        /// Gigabytes (10^9 bytes) per second.
        gbps: f64,
        /// Million messages per second.
        mmps: f64,
    },
}

/// One test at one size.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Message size, bytes.
    pub size: usize,
    /// Messages measured.
    pub iters: u64,
    /// The numbers.
    pub measure: Measure,
    /// With several rails (bandwidth tests), each one's share; `measure` and `iters`
    /// are then their sum.
    pub rails: Vec<RailStat>,
}

/// The nearest-rank percentile of sorted `v`, given in per mille (990 for p99), in
/// integers so that p99.9 of 1000 samples is the 999th.
fn percentile(v: &[u64], per_mille: usize) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = (per_mille * v.len()).div_ceil(1000);
    v[rank.clamp(1, v.len()) - 1]
}

/// Latency row from round-trip times in nanoseconds (halved, as perftest reports).
pub fn latency(size: usize, mut rtt_ns: Vec<u64>) -> Row {
    rtt_ns.sort_unstable();
    let us = |ns: u64| ns as f64 / 2000.0;
    let sum: u128 = rtt_ns.iter().map(|&x| x as u128).sum();
    let n = rtt_ns.len().max(1) as f64;
    Row {
        size,
        iters: rtt_ns.len() as u64,
        measure: Measure::Latency {
            min: us(rtt_ns.first().copied().unwrap_or(0)),
            p50: us(percentile(&rtt_ns, 500)),
            p99: us(percentile(&rtt_ns, 990)),
            p999: us(percentile(&rtt_ns, 999)),
            max: us(rtt_ns.last().copied().unwrap_or(0)),
            avg: sum as f64 / n / 2000.0,
        },
        rails: Vec::new(),
    }
}

/// Bandwidth row: `count` messages of `size` bytes in `elapsed`.
pub fn bandwidth(size: usize, count: u64, elapsed: Duration) -> Row {
    let secs = elapsed.as_secs_f64().max(1e-9);
    Row {
        size,
        iters: count,
        measure: Measure::Bandwidth {
            secs,
            gbps: (size as f64 * count as f64) / secs / 1e9,
            mmps: count as f64 / secs / 1e6,
        },
        rails: Vec::new(),
    }
}

/// One rail's share of a bandwidth size: `count` messages of `size` bytes between
/// `device` and the server's `peer_device`, over the whole size's `elapsed` (the time
/// every rail shares, so that the rails' GB/s add up to the aggregate's).
pub fn rail(
    device: &str,
    peer_device: &str,
    size: usize,
    count: u64,
    elapsed: Duration,
) -> RailStat {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let bytes = (size as u64).saturating_mul(count);
    RailStat {
        device: device.to_string(),
        peer_device: peer_device.to_string(),
        msgs: count,
        bytes,
        gbps: bytes as f64 / secs / 1e9,
        mmps: count as f64 / secs / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_of_half_round_trips() {
        let rtt: Vec<u64> = (1..=1000).rev().map(|i| i * 2000).collect(); // 1..1000 us one way
        let Row { iters, measure, .. } = latency(8, rtt);
        assert_eq!(iters, 1000);
        let Measure::Latency {
            min,
            p50,
            p99,
            p999,
            max,
            avg,
        } = measure
        else {
            panic!()
        };
        assert_eq!(
            (min, p50, p99, p999, max),
            (1.0, 500.0, 990.0, 999.0, 1000.0)
        );
        assert!((avg - 500.5).abs() < 1e-9);
        let b = bandwidth(1 << 20, 1000, Duration::from_millis(500));
        let Measure::Bandwidth { gbps, mmps, .. } = b.measure else {
            panic!()
        };
        assert!((gbps - 2.097152).abs() < 1e-9 && (mmps - 0.002).abs() < 1e-12);
        let half = Duration::from_millis(500);
        let r = rail("efa_1", "efa_5", 1 << 20, 400, half);
        assert_eq!((r.msgs, r.bytes), (400, 400 << 20));
        assert!((r.gbps - 0.8388608).abs() < 1e-9 && (r.mmps - 0.0008).abs() < 1e-12);
        assert_eq!(
            (r.device.as_str(), r.peer_device.as_str()),
            ("efa_1", "efa_5")
        );
    }
}
