//! The devices of a process ([`Sim`]) and one device ([`Device`]): its identity (name,
//! GID), profile and configuration, and the runtime started when it is first used.

use super::runtime::Runtime;
use super::{profile, Cq, CqOptions, Errno, Gid, Pd, Profile, Stats};
use crate::config::{Config, MAX_DEVICES};
use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

/// Process-global view of the configured devices (created on first use).
pub struct Sim {
    config: Arc<Config>,
    devices: Vec<Arc<Device>>,
    error: Option<String>,
}

impl Sim {
    /// The devices of this process, from the environment ([`Config::from_env`]). A
    /// malformed configuration yields zero devices and [`Sim::error`] says why (also
    /// printed once to stderr).
    pub fn get() -> &'static Sim {
        static SIM: OnceLock<Sim> = OnceLock::new();
        SIM.get_or_init(|| match Config::from_env() {
            Ok(c) => Sim::from_config(c),
            Err(msg) => {
                eprintln!("efa-sim: configuration error, no devices: {msg}");
                Sim {
                    config: Arc::new(Config::default()),
                    devices: Vec::new(),
                    error: Some(msg),
                }
            }
        })
    }

    /// The devices a configuration describes. Devices bind their UDP ports when first
    /// used, so two `Sim`s of one process must not use the same device indices.
    pub fn from_config(config: Config) -> Sim {
        let config = Arc::new(config);
        let devices = (0..config.devices())
            .map(|i| {
                let p = config.profiles[i as usize].clone();
                Arc::new(Device::new(i, config.addr, p, config.clone()))
            })
            .collect();
        Sim {
            config,
            devices,
            error: None,
        }
    }

    /// Builds devices from explicit values of `EFA_SIM_DEVICES`, `EFA_SIM_PROFILE`,
    /// `EFA_SIM_READ_OPCODE` and `EFA_SIM_ADDR` (`None` = unset; the rest default).
    pub fn build(
        devices: Option<&str>,
        profile: Option<&str>,
        read_opcode: Option<&str>,
        addr: Option<&str>,
    ) -> Result<Vec<Arc<Device>>, String> {
        let config = Config::from_vars(|k| {
            match k {
                "EFA_SIM_DEVICES" => devices,
                "EFA_SIM_PROFILE" => profile,
                "EFA_SIM_READ_OPCODE" => read_opcode,
                "EFA_SIM_ADDR" => addr,
                _ => None,
            }
            .map(str::to_string)
        })?;
        Ok(Sim::from_config(config).devices)
    }

    /// All devices of this process (empty when the configuration is malformed).
    pub fn devices(&self) -> &[Arc<Device>] {
        &self.devices
    }

    /// The configuration the devices were built from (the defaults when it was rejected).
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Why there are no devices, when the configuration was rejected.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// One device (`efa_0`, `efa_1`, ...).
pub struct Device {
    /// Index N of `efa_N`.
    pub index: u32,
    /// `efa_N`.
    pub name: String,
    /// The port's only GID.
    pub gid: Gid,
    /// Limits and capabilities.
    pub profile: Profile,
    /// IPv4 address the device's endpoint binds to (encoded in the GID).
    pub addr: Ipv4Addr,
    config: Arc<Config>,
    rt: OnceLock<Result<Arc<Runtime>, String>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Device {
    fn new(index: u32, addr: Ipv4Addr, profile: Profile, config: Arc<Config>) -> Device {
        Device {
            index,
            name: format!("efa_{index}"),
            gid: gid_for(addr, index),
            profile,
            addr,
            config,
            rt: OnceLock::new(),
        }
    }

    /// A device outside [`Sim::get`]'s list (tests with special profiles), configured
    /// like the process's devices. Opening two devices with the same `index` in one
    /// process fails with ENODEV (they would share a UDP port); pick indices above
    /// `EFA_SIM_DEVICES`.
    pub fn standalone(index: u32, addr: Ipv4Addr, profile: Profile) -> Result<Arc<Device>, String> {
        let config = Config {
            addr,
            ..(**Sim::get().config()).clone()
        };
        Device::standalone_in(index, profile, Arc::new(config))
    }

    /// A device with `profile` under an explicit configuration (its address, ports, lock
    /// directory, faults and switches; its `profiles` are not consulted).
    pub fn standalone_in(
        index: u32,
        profile: Profile,
        config: Arc<Config>,
    ) -> Result<Arc<Device>, String> {
        profile::validate(&profile)?;
        if index >= MAX_DEVICES {
            return Err(format!("device index {index} must be < {MAX_DEVICES}"));
        }
        Ok(Arc::new(Device::new(index, config.addr, profile, config)))
    }

    /// The configuration this device runs with.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// This device's runtime (endpoint, engine thread), started on first use.
    pub(crate) fn runtime(self: &Arc<Self>) -> Result<Arc<Runtime>, Errno> {
        let rt = self.rt.get_or_init(|| {
            Runtime::start(self).map_err(|m| {
                eprintln!("efa-sim: {}: cannot start: {m}", self.name);
                m
            })
        });
        rt.as_ref().cloned().map_err(|_| libc::ENODEV)
    }

    /// Strict mode (profile key `strict`): restarts the device's permutation stream as if
    /// it had started with `EFA_SIM_FAULTS` `seed=<seed>` (see
    /// `crate::model::runtime::strict`), so that one test process can run many seeds.
    /// Starts the runtime; ENODEV if it cannot start, EINVAL if the profile is not strict.
    pub fn reseed_strict(self: &Arc<Self>, seed: u64) -> Result<(), Errno> {
        let rt = self.runtime()?;
        let s = rt.strict.as_ref().ok_or(libc::EINVAL)?;
        s.reseed(seed, self.index);
        Ok(())
    }

    /// Counters of this device in this process (zero before first use).
    pub fn stats(self: &Arc<Self>) -> Stats {
        match self.rt.get() {
            Some(Ok(rt)) => rt.stats(),
            _ => Stats::default(),
        }
    }

    /// `ibv_alloc_pd`; ENOMEM beyond `max_pd`.
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>, Errno> {
        Pd::alloc(self.runtime()?)
    }

    /// `depth` = requested cqe; returns the CQ and the granted depth (power of two).
    pub fn create_cq(
        self: &Arc<Self>,
        depth: u32,
        opts: CqOptions,
    ) -> Result<(Arc<Cq>, u32), Errno> {
        Cq::create(self.runtime()?, depth, opts)
    }
}

/// GID layout: `fe80::efa5:` + IPv4 address + 16-bit device index, i.e.
/// `fe80:0000:0000:efa5:AABB:CCDD:0000:IIII` (link-local, like real EFA GIDs).
pub fn gid_for(addr: Ipv4Addr, index: u32) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[6] = 0xef;
    g[7] = 0xa5;
    g[8..12].copy_from_slice(&addr.octets());
    g[14..16].copy_from_slice(&(index as u16).to_be_bytes());
    g
}

/// Inverse of [`gid_for`]: the (address, device index) a GID names, if it is an efa-sim GID.
pub fn gid_endpoint(g: &Gid) -> Option<(Ipv4Addr, u32)> {
    if g[0] != 0xfe || g[1] != 0x80 || g[6] != 0xef || g[7] != 0xa5 {
        return None;
    }
    let ip = Ipv4Addr::new(g[8], g[9], g[10], g[11]);
    Some((ip, u16::from_be_bytes([g[14], g[15]]) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_default_devices() {
        let d = Sim::build(None, None, None, None).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].name, "efa_1");
        assert_eq!(gid_endpoint(&d[1].gid), Some((Ipv4Addr::LOCALHOST, 1)));
        assert!(d[0].profile.read_completes_as_send);
    }

    #[test]
    fn build_rejects_bad_config() {
        assert!(Sim::build(Some("x"), None, None, None)
            .unwrap_err()
            .contains("EFA_SIM_DEVICES"));
        assert!(Sim::build(None, Some("efa_5.max_qp=3"), None, None)
            .unwrap_err()
            .contains("efa_5"));
        assert!(Sim::build(None, None, Some("maybe"), None)
            .unwrap_err()
            .contains("EFA_SIM_READ_OPCODE"));
        assert!(Sim::build(None, None, None, Some("::1"))
            .unwrap_err()
            .contains("EFA_SIM_ADDR"));
        let d = Sim::build(
            Some("3"),
            Some("efa_2.max_rdma_size=7"),
            Some("rdma_read"),
            Some("10.0.0.2"),
        )
        .unwrap();
        assert_eq!(d[2].profile.max_rdma_size, 7);
        assert!(!d[2].profile.read_completes_as_send);
        assert_eq!(
            gid_endpoint(&d[0].gid).unwrap().0,
            Ipv4Addr::new(10, 0, 0, 2)
        );
    }
}
