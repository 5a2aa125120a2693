//! `--mem gpu`: the RDMA buffers of `write_bw` and `read_bw` (the client's source or
//! destination, the server's target or source) in GPU memory, through `efa::cuda` (the
//! `cuda` feature, off by default: CUDA's `libcuda.so.1` is then loaded at run time, and
//! efa-sim's software GPU stands in for it where there is none). Each rail's buffer is
//! on the GPU nearest its device (by PCIe path, then NUMA node: `InstanceTopology`), GPU
//! 0 where the topology does not say. Verification reads the memory back through the
//! driver, after flushing the NIC's writes to it.

/// `--mem`'s value: where this end's RDMA buffers live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Memory {
    /// Host memory (the default).
    #[default]
    Host,
    /// GPU memory (`write_bw` and `read_bw`; the other tests stay in host memory).
    Gpu,
}

impl Memory {
    /// `--mem`'s value: `host`, or `gpu` where this build has the `cuda` feature.
    pub fn parse(v: &str) -> Result<Memory, String> {
        match v {
            "host" => Ok(Memory::Host),
            "gpu" if cfg!(feature = "cuda") => Ok(Memory::Gpu),
            "gpu" => Err(
                "--mem gpu: this efa-perf was built without GPU support (build it with --features cuda)"
                    .into(),
            ),
            _ => Err(format!("--mem {v:?}: must be host or gpu")),
        }
    }

    /// Its name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Memory::Host => "host",
            Memory::Gpu => "gpu",
        }
    }

    /// True where `test` puts its RDMA buffers in GPU memory with this choice.
    pub fn gpu_for(self, test: crate::test::Test) -> bool {
        use crate::test::Test;
        self == Memory::Gpu && matches!(test, Test::WriteBw | Test::ReadBw)
    }
}

#[cfg(feature = "cuda")]
pub use imp::GpuBufs;

/// Without the `cuda` feature there are no GPU buffers: a type with no value, so that
/// the code that would use them compiles to nothing.
#[cfg(not(feature = "cuda"))]
pub enum GpuBufs {}

#[cfg(not(feature = "cuda"))]
impl GpuBufs {
    /// Never: `--mem gpu` is refused on the command line of such a build.
    pub fn new(
        _pd: &crate::res::SharedPd,
        _device: &str,
        _bytes: usize,
        _roles: Roles,
    ) -> Result<GpuBufs, String> {
        Err("GPU memory needs efa-perf built with --features cuda".into())
    }
    /// The GPU's ordinal.
    pub fn ordinal(&self) -> i32 {
        match *self {}
    }
    /// An SGE of the first `len` bytes of the local buffer.
    pub fn src(&self, _len: u64) -> efa::Result<efa::Sge<'_>> {
        match *self {}
    }
    /// The buffer the peer may reach.
    pub fn remote(&self) -> Option<efa::RemoteBuffer> {
        match *self {}
    }
    /// Copies `bytes` to the start of the local buffer.
    pub fn load(&mut self, _bytes: &[u8]) -> Result<(), String> {
        match *self {}
    }
    /// Copies the start of the local buffer (or the target) into `dst`.
    pub fn read(&self, _target: bool, _dst: &mut [u8]) -> Result<(), String> {
        match *self {}
    }
    /// Zeroes the target.
    pub fn zero_target(&mut self) -> Result<(), String> {
        match *self {}
    }
}

/// Which GPU buffers one end of a test needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    /// A local buffer (a write source or read destination at the client; with
    /// `read_source`, the read source at the server).
    pub local: bool,
    /// The local buffer is the peer's RDMA-read source.
    pub read_source: bool,
    /// An RDMA-write target.
    pub target: bool,
}

#[cfg(feature = "cuda")]
mod imp {
    use efa::cuda::{register, Device, DeviceAlloc, FlushScope, GpuMr, InstanceTopology};
    use efa::{AccessFlags, RemoteBuffer, Sge};

    use super::Roles;
    use crate::res::SharedPd;

    type Buf = GpuMr<SharedPd, DeviceAlloc>;

    /// One rail's buffers in GPU memory.
    pub struct GpuBufs {
        ordinal: i32,
        local: Option<Buf>,
        target: Option<Buf>,
    }

    /// The GPU nearest `device`, or GPU 0 where the topology does not say.
    fn nearest_gpu(device: &str) -> i32 {
        let Ok(topo) = InstanceTopology::discover() else {
            return 0;
        };
        let near = topo
            .gpus
            .iter()
            .find(|g| g.nearest.iter().any(|n| n == device));
        near.map_or(0, |g| g.ordinal)
    }

    impl GpuBufs {
        /// `bytes` of GPU memory for each of `roles`, registered on `pd` (of `device`).
        pub fn new(
            pd: &SharedPd,
            device: &str,
            bytes: usize,
            roles: Roles,
        ) -> Result<GpuBufs, String> {
            let ordinal = nearest_gpu(device);
            let e =
                |what: &str, x: efa::cuda::Error| format!("{device}: GPU {ordinal}: {what}: {x}");
            let gpu = Device::get(ordinal).map_err(|x| e("opening it", x))?;
            let alloc = |access: AccessFlags, what: &str| -> Result<Buf, String> {
                let mem = DeviceAlloc::new(&gpu, bytes).map_err(|x| e(what, x))?;
                let mut mr = register(pd.clone(), mem, access).map_err(|x| e(what, x))?;
                mr.fill(0).map_err(|x| e(what, x))?;
                Ok(mr)
            };
            let local = if roles.local {
                let access = if roles.read_source {
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
                } else {
                    AccessFlags::LOCAL_WRITE
                };
                Some(alloc(access, "the local buffer")?)
            } else {
                None
            };
            let target = if roles.target {
                let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
                Some(alloc(access, "the RDMA-write target")?)
            } else {
                None
            };
            Ok(GpuBufs {
                ordinal,
                local,
                target,
            })
        }

        /// The GPU's ordinal.
        pub fn ordinal(&self) -> i32 {
            self.ordinal
        }

        /// An SGE of the first `len` bytes of the local buffer.
        pub fn src(&self, len: u64) -> efa::Result<Sge<'_>> {
            let local = self.local.as_ref().ok_or(efa::Error::NoSuchDevice)?;
            local.region().sge(0, len)
        }

        /// The buffer the peer may reach: the target, or the read source.
        pub fn remote(&self) -> Option<RemoteBuffer> {
            match (&self.target, &self.local) {
                (Some(t), _) => Some(t.remote()),
                (None, Some(l)) if l.access().contains(AccessFlags::REMOTE_READ) => {
                    Some(l.remote())
                }
                _ => None,
            }
        }

        /// Copies `bytes` to the start of the local buffer (before a size's first post).
        pub fn load(&mut self, bytes: &[u8]) -> Result<(), String> {
            let local = self.local.as_mut().ok_or("no local GPU buffer")?;
            local.copy_from_host(0, bytes).map_err(|e| e.to_string())
        }

        /// Copies the start of the target (or the local buffer) into `dst`, after
        /// flushing the NIC's writes to it (after the size's last completion).
        pub fn read(&self, target: bool, dst: &mut [u8]) -> Result<(), String> {
            let buf = if target { &self.target } else { &self.local };
            let buf = buf.as_ref().ok_or("no such GPU buffer")?;
            buf.flush_gpudirect_writes(FlushScope::ToOwner)
                .map_err(|e| e.to_string())?;
            buf.copy_to_host(0, dst).map_err(|e| e.to_string())
        }

        /// Zeroes the target (before a size).
        pub fn zero_target(&mut self) -> Result<(), String> {
            match self.target.as_mut() {
                Some(t) => t.fill(0).map_err(|e| e.to_string()),
                None => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test::Test;

    #[test]
    fn mem_parses_and_gpu_needs_the_feature() {
        assert_eq!(Memory::parse("host"), Ok(Memory::Host));
        assert!(Memory::parse("disk").unwrap_err().contains("host or gpu"));
        match Memory::parse("gpu") {
            Ok(m) => assert!(cfg!(feature = "cuda") && m == Memory::Gpu),
            Err(e) => assert!(
                !cfg!(feature = "cuda") && e.contains("--features cuda"),
                "{e}"
            ),
        }
        assert!(Memory::Gpu.gpu_for(Test::WriteBw) && Memory::Gpu.gpu_for(Test::ReadBw));
        assert!(!Memory::Gpu.gpu_for(Test::SendBw) && !Memory::Host.gpu_for(Test::WriteBw));
    }
}
