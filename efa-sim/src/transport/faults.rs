//! Fault injection knobs (`EFA_SIM_FAULTS`), see the transport module docs.

use std::sync::atomic::{AtomicU64, Ordering};

/// The fault configuration (`EFA_SIM_FAULTS`), as parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultSpec {
    /// Probability a datagram is dropped.
    pub loss: f64,
    /// Probability a datagram is sent twice.
    pub dup: f64,
    /// Probability a datagram is held back 0..=1 ms.
    pub reorder: f64,
    /// Fixed extra delay of every datagram.
    pub delay_us: u64,
    /// Peer kill: this process SIGKILLs itself when it is about to send its
    /// `kill_after`-th datagram (0 = never), so a test can kill a peer in the
    /// middle of a transfer, at a reproducible point.
    pub kill_after: u64,
    /// Seed of the random stream.
    pub seed: u64,
}

/// Largest `delay_us`: every datagram is held back, so a request and its answer are
/// each delayed; the round trip (2 x `delay_us`, plus up to 2 ms of `reorder`) must stay
/// well inside the peer timeout, or every WR fails with a timeout.
pub const MAX_DELAY_US: u64 = crate::model::runtime::PEER_TIMEOUT.as_micros() as u64 * 2 / 5;

impl FaultSpec {
    /// Parses `seed=42,reorder=0.2,delay_us=50,loss=0.05,dup=0.05,kill_after=N`. An error
    /// names the item and what it must be: `` `loss=2`: must be a probability 0..=1 ``.
    pub fn parse(text: &str) -> Result<FaultSpec, String> {
        let mut f = FaultSpec {
            seed: 0x5eed,
            ..FaultSpec::default()
        };
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let shown = crate::config::shown(item);
            let fail = |allowed: &str| format!("`{shown}`: must be {allowed}");
            let (k, v) = item.split_once('=').ok_or_else(|| fail("key=value"))?;
            let prob = |v: &str| -> Result<f64, String> {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| fail("a probability 0..=1"))
            };
            let num = |v: &str| -> Result<u64, String> {
                v.trim()
                    .parse()
                    .map_err(|_| fail(&format!("a whole number 0..={}", u64::MAX)))
            };
            match k.trim() {
                "seed" => f.seed = num(v)?,
                "loss" => f.loss = prob(v)?,
                "dup" => f.dup = prob(v)?,
                "reorder" => f.reorder = prob(v)?,
                "delay_us" => {
                    f.delay_us = Some(num(v)?).filter(|d| *d <= MAX_DELAY_US).ok_or_else(|| {
                        fail(&format!(
                            "0..={MAX_DELAY_US} (request and answer are both delayed; \
                             longer makes every WR hit the {} ms peer timeout)",
                            crate::model::runtime::PEER_TIMEOUT.as_millis()
                        ))
                    })?
                }
                "kill_after" => f.kill_after = num(v)?,
                _ => {
                    return Err(format!(
                        "`{shown}`: unknown fault (known: seed, loss, dup, reorder, delay_us, kill_after)"
                    ))
                }
            }
        }
        Ok(f)
    }

    /// Whether any fault is configured.
    pub fn active(&self) -> bool {
        self.loss > 0.0
            || self.dup > 0.0
            || self.reorder > 0.0
            || self.delay_us > 0
            || self.kill_after > 0
    }
}

/// One endpoint's faults: the configuration plus its random stream and datagram count.
#[derive(Debug, Default)]
pub struct Faults {
    /// The configuration.
    pub spec: FaultSpec,
    sent: AtomicU64,
    state: AtomicU64,
    active: bool,
}

impl Faults {
    /// No faults.
    pub fn none() -> Faults {
        Faults::default()
    }

    /// Faults as `spec` configures them, the random stream seeded from it.
    pub fn new(spec: &FaultSpec) -> Faults {
        Faults {
            spec: spec.clone(),
            sent: AtomicU64::new(0),
            state: AtomicU64::new(spec.seed),
            active: spec.active(),
        }
    }

    /// Whether any fault is configured.
    pub fn active(&self) -> bool {
        self.active
    }

    /// Counts one outgoing datagram; the `kill_after`-th kills this process
    /// (SIGKILL: no unwinding, no goodbye, like a crash or `kill -9`).
    pub fn count_send(&self) {
        let kill = self.spec.kill_after;
        if kill > 0 && self.sent.fetch_add(1, Ordering::Relaxed) + 1 >= kill {
            // SAFETY: kill(2) on our own pid; it does not return for SIGKILL.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }

    /// Next pseudo-random number (splitmix64 over an atomic counter).
    pub fn next(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub fn roll(&self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_roll() {
        let f = Faults::new(&FaultSpec::parse("seed=1,loss=0.5").unwrap());
        assert!(f.active());
        let hits = (0..10_000).filter(|_| f.roll(f.spec.loss)).count();
        assert!((4000..6000).contains(&hits), "{hits}");
        assert!(FaultSpec::parse("loss=2").is_err());
        assert!(FaultSpec::parse("chaos=1").unwrap_err().contains("chaos"));
        assert!(!FaultSpec::parse("").unwrap().active());
        let k = FaultSpec::parse("kill_after=3").unwrap();
        assert!(k.active() && k.kill_after == 3 && k.loss == 0.0);
        assert!(FaultSpec::parse("kill_after=x")
            .unwrap_err()
            .contains("kill_after"));
    }
}
