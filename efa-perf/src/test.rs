//! The tests efa-perf runs, and what each needs from the devices.

use efa::DeviceCaps;

/// One kind of measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Test {
    /// SEND ping-pong latency (perftest's `ib_send_lat`).
    SendLat,
    /// RDMA-write (with immediate) ping-pong latency (`ib_write_lat`).
    WriteLat,
    /// SEND bandwidth and message rate (`ib_send_bw`).
    SendBw,
    /// RDMA-write bandwidth and message rate (`ib_write_bw`).
    WriteBw,
    /// RDMA-read bandwidth and message rate (`ib_read_bw`).
    ReadBw,
}

impl Test {
    /// Every test, in the order a default run takes them.
    pub const ALL: [Test; 5] = [
        Test::SendLat,
        Test::WriteLat,
        Test::SendBw,
        Test::WriteBw,
        Test::ReadBw,
    ];

    /// Its name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Test::SendLat => "send_lat",
            Test::WriteLat => "write_lat",
            Test::SendBw => "send_bw",
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
        }
    }

    /// The test called `name` (or perftest's `ib_<name>`).
    pub fn from_name(name: &str) -> Option<Test> {
        let name = name.strip_prefix("ib_").unwrap_or(name);
        Test::ALL.into_iter().find(|t| t.name() == name)
    }

    /// True for the ping-pong tests.
    pub fn is_latency(self) -> bool {
        matches!(self, Test::SendLat | Test::WriteLat)
    }

    /// True for the tests that move data with SEND (sizes up to the port's `max_msg_sz`);
    /// the others use RDMA (up to the device's `max_rdma_size`).
    pub fn uses_send(self) -> bool {
        matches!(self, Test::SendLat | Test::SendBw)
    }

    /// The device capability the test needs on both ends, if any.
    pub fn needs(self) -> Option<DeviceCaps> {
        match self {
            Test::SendLat | Test::SendBw => None,
            Test::WriteLat | Test::WriteBw => Some(DeviceCaps::RDMA_WRITE),
            Test::ReadBw => Some(DeviceCaps::RDMA_READ),
        }
    }

    /// Iterations per size unless `-n` or `-D` says otherwise (perftest's defaults).
    pub fn default_iters(self) -> u64 {
        if self.is_latency() {
            1000
        } else {
            5000
        }
    }
}

/// The name of a capability, as the output says it.
pub fn cap_name(cap: DeviceCaps) -> &'static str {
    if cap == DeviceCaps::RDMA_WRITE {
        "RDMA write"
    } else if cap == DeviceCaps::RDMA_READ {
        "RDMA read"
    } else {
        "a capability"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_accept_perftest_names() {
        for t in Test::ALL {
            assert_eq!(Test::from_name(t.name()), Some(t));
        }
        assert_eq!(Test::from_name("ib_read_bw"), Some(Test::ReadBw));
        assert_eq!(Test::from_name("ib_atomic_bw"), None);
        assert_eq!(Test::WriteBw.needs(), Some(DeviceCaps::RDMA_WRITE));
        assert!(Test::SendLat.uses_send() && Test::SendLat.is_latency());
    }
}
