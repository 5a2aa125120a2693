//! The ways the software GPU's memory reaches efa-sim, as environments of a child test
//! process (software GPU and efa-sim configuration) and what registrations then show.

use crate::transfers::Checks;
use efa_cuda::RegistrationPath;

/// How GPU memory is registered and reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// dma-buf export, mapped by efa-sim at its CUDA address.
    Mapped,
    /// dma-buf export that refuses mmap: efa-sim moves the bytes with the driver's copies
    /// (the emulated DMA it uses for NVIDIA's dma-bufs).
    Copies,
    /// The driver refuses exports: `ibv_reg_mr` on the CUDA address (emulated
    /// nvidia_peermem, through the copies).
    Peermem,
    /// The kernel refuses dma-buf MRs (efa-sim profile `dmabuf_mr=0`): the same fallback.
    KernelRefuses,
}

impl Backend {
    /// The child's environment (`extra_profile`: more efa-sim profile items).
    pub fn env(self, extra_profile: &str) -> Vec<(&'static str, String)> {
        let mut profile = extra_profile.to_string();
        let mut env = vec![("EFA_CUDA_TEST_BACKEND", format!("{self:?}"))];
        match self {
            Backend::Mapped => {}
            Backend::Copies => env.push(("EFA_SIM_GPU_DMABUF_MMAP", "0".into())),
            Backend::Peermem => env.push(("EFA_SIM_GPU_DMABUF", "0".into())),
            Backend::KernelRefuses => {
                profile = [profile.as_str(), "dmabuf_mr=0"]
                    .iter()
                    .filter(|s| !s.is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(",");
            }
        }
        if !profile.is_empty() {
            env.push(("EFA_SIM_PROFILE", profile));
        }
        env
    }

    /// The backend a child was started for.
    pub fn from_env() -> Backend {
        match std::env::var("EFA_CUDA_TEST_BACKEND").as_deref() {
            Ok("Mapped") => Backend::Mapped,
            Ok("Copies") => Backend::Copies,
            Ok("Peermem") => Backend::Peermem,
            Ok("KernelRefuses") => Backend::KernelRefuses,
            other => panic!("EFA_CUDA_TEST_BACKEND is {other:?}"),
        }
    }

    /// What every registration must show on the software GPU.
    pub fn checks(self) -> Checks {
        Checks {
            path: match self {
                Backend::Mapped | Backend::Copies => RegistrationPath::DmaBuf,
                Backend::Peermem | Backend::KernelRefuses => RegistrationPath::Peermem,
            },
            maps_per_mr: Some(usize::from(self == Backend::Mapped)),
            flushes: Some(|dev| crate::support::flush_count(dev).0),
        }
    }
}

/// Runs `body` in a child process of this test binary configured for `backend`.
pub fn with_backend(test: &str, backend: Backend, extra_profile: &str, body: impl FnOnce()) {
    let env = backend.env(extra_profile);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    crate::support::in_child(test, &env, body);
}

/// One `#[test]` per `name: Backend, Mem, "extra profile";` line, each calling the
/// including file's `run(name, backend, memory, extra_profile)`.
macro_rules! cases {
    ($($name:ident: $backend:ident, $mem:ident, $profile:literal;)*) => {$(
        #[test]
        fn $name() {
            run(stringify!($name), Backend::$backend, Mem::$mem, $profile);
        }
    )*};
}
pub(crate) use cases;
