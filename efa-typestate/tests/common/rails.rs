//! Shared by the multi-rail tests: 4 efa-sim devices, host memory every rail registers
//! by address, and the rails and notices built over them.
use efa_typestate::*;

pub const RAILS: usize = 4;
pub const DEVICES: (&str, &str) = ("EFA_SIM_DEVICES", "4");

/// Host memory shared by the registrations of every rail: a leaked allocation named by
/// its address, which the tests read only after the transfers that write it returned.
#[derive(Clone, Copy, Debug)]
pub struct SharedHost {
    pub addr: u64,
    pub len: usize,
}

impl SharedHost {
    pub fn new(bytes: Vec<u8>) -> SharedHost {
        let leaked: &'static mut [u8] = Box::leak(bytes.into_boxed_slice());
        SharedHost {
            addr: leaked.as_mut_ptr() as u64,
            len: leaked.len(),
        }
    }
    pub fn read(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: the leaked allocation is never freed; the tests read it only after the
        // transfers writing it returned (no write in flight), and never through a reference.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr as *const u8, out.as_mut_ptr(), self.len)
        };
        out
    }
}

// SAFETY: a leaked allocation stays at its address forever (also if a registration is
// leaked) and no reference to it exists: the tests copy from it by raw pointer only.
unsafe impl DeviceAddressMemory for SharedHost {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 9) as u8 ^ seed)
        .collect()
}

/// `RAILS` devices, each with an initiator QP (`qa`) and a target QP (`qb`) connected
/// both ways, the source and target buffers registered on every PD, the initiator's
/// `rails` and the target's `notices`.
#[macro_export]
macro_rules! rails {
    ($backend:expr, $cfg:expr, $len:expr => $pds:ident, $qa:ident, $qb:ident, $cqb:ident, $notice_mrs:ident,
     $src:ident, $dst:ident, $dst_mrs:ident, $rails:ident, $srcs:ident, $remotes:ident) => {
        let ctxs: Vec<Context> = (0..RAILS).map(open).collect();
        let $pds: Vec<_> = ctxs.iter().map(|c| c.alloc_pd().unwrap()).collect();
        let cq_opts = CqOptions::new(1024).backend($backend);
        let cqa: Vec<_> = ctxs
            .iter()
            .map(|c| c.create_ext_cq(cq_opts).unwrap())
            .collect();
        let $cqb: Vec<_> = ctxs
            .iter()
            .map(|c| c.create_ext_cq(cq_opts).unwrap())
            .collect();
        let cfg: QpConfig = $cfg.backend($backend);
        let $qa: Vec<_> = (0..RAILS)
            .map(|i| rts_qp(&$pds[i], &cqa[i], &cfg, QKEY_A))
            .collect();
        #[allow(unused_mut)]
        let mut $qb: Vec<_> = (0..RAILS)
            .map(|i| rts_qp(&$pds[i], &$cqb[i], &cfg, QKEY_B))
            .collect();
        let to_b: Vec<_> = (0..RAILS)
            .map(|i| $pds[i].connect(&$qb[i].endpoint()).unwrap())
            .collect();
        // SRD: the target needs an AH for the initiator's RDMA.
        let _to_a: Vec<_> = (0..RAILS)
            .map(|i| $pds[i].connect(&$qa[i].endpoint()).unwrap())
            .collect();
        let $src = SharedHost::new(pattern($len, 0x5a));
        let $dst = SharedHost::new(vec![0u8; $len]);
        let src_mrs: Vec<_> = $pds
            .iter()
            .map(|pd| {
                pd.register_device_address($src, AccessFlags::empty())
                    .unwrap()
            })
            .collect();
        let $dst_mrs: Vec<_> = $pds
            .iter()
            .map(|pd| {
                pd.register_device_address(
                    $dst,
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                )
                .unwrap()
            })
            .collect();
        let $notice_mrs: Vec<_> = $pds
            .iter()
            .map(|pd| pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE).unwrap())
            .collect();
        let mut $rails = Rails::new();
        for i in 0..RAILS {
            $rails.push(&$qa[i], &cqa[i], &to_b[i]).unwrap();
        }
        let $srcs: Vec<&dyn MemoryRegion> =
            src_mrs.iter().map(|m| m as &dyn MemoryRegion).collect();
        let $remotes: Vec<RemoteBuffer> = $dst_mrs.iter().map(|m| m.remote()).collect();
    };
}

/// The target's notice counter over the rails' target QPs (4 receives each).
#[macro_export]
macro_rules! notices {
    ($qb:ident, $cqb:ident, $notice_mrs:ident => $notices:ident) => {
        let mut $notices = RailNotices::new();
        for i in 0..RAILS {
            $notices
                .push(&$qb[i], &$cqb[i], $notice_mrs[i].sge(0, 0).unwrap(), 4)
                .unwrap();
        }
    };
}
