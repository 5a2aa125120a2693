//! C conformance suite: each `tests/conformance/*.c` is compiled by gcc against the
//! system rdma-core 44 headers, linked `-libverbs -lefa`, and run on the software device.
//! A C test prints `FAIL <test> <file>:<line>: <what>` and exits non-zero on failure.

mod support;

/// Device list, context layout, queries, strings, EOPNOTSUPP verbs, efadv queries.
#[test]
fn api_device() {
    support::run_c("api_device", &[]);
}

/// Device paths and ibv_get_sysfs_path follow $SYSFS_PATH, as in libibverbs.
#[test]
fn api_device_with_sysfs_path() {
    support::run_c("api_device", &[("SYSFS_PATH", "/tmp/efa-sim-fake-sysfs//")]);
}

/// PD/TD/parent domain, MR, CQ and QP creation rules, state machine, query_qp.
#[test]
fn objects() {
    support::run_c("objects", &[]);
}

/// SEND/SEND_IMM/WRITE/WRITE_IMM/READ/inline/zero-size over SRD with ibv_wr_* + ibv_cq_ex.
#[test]
fn data_srd() {
    support::run_c("data_srd", &[]);
}

/// Same traffic with RDMA-read completions reported as IBV_WC_RDMA_READ.
#[test]
fn data_srd_read_opcode_rdma_read() {
    support::run_c("data_srd", &[("EFA_SIM_READ_OPCODE", "rdma_read")]);
}

/// CQ overflow: completions beyond the CQ's depth are lost, the CQ stays broken, no async
/// event and no poll error; polled in time, nothing is lost.
#[test]
fn cq_overflow() {
    support::run_c("cq_overflow", &[]);
}

/// Legacy ibv_post_send/ibv_post_recv/ibv_poll_cq on UD (and posting errors).
#[test]
fn data_legacy() {
    support::run_c("data_legacy", &[]);
}

/// Completion statuses, latched session errors, SQ full, unsolicited write, SGID, flush.
#[test]
fn errors() {
    support::run_c("errors", &[]);
}

/// Errors that take time or need a profile: Q_Key mismatch (dropped, sender 13), an
/// unreachable peer (15), a killed peer process (13, bounded), RDMA above
/// `max_rdma_size` (6, nothing written).
#[test]
fn errors_timed() {
    support::run_c("errors_timed", &[("EFA_SIM_PROFILE", "max_rdma_size=4096")]);
}

/// Device limits through the C ABI: CQ, SQ and RQ depths one beyond the profile's limits
/// (or rounded up past them) and PDs beyond max_pd fail with libefa's/the kernel's errno.
#[test]
fn limits() {
    support::run_c(
        "limits",
        &[(
            "EFA_SIM_PROFILE",
            "max_sq_wr=16,max_rq_wr=24,max_cqe=24,min_sq_wr=1,max_pd=2",
        )],
    );
}

/// Completion channels and RNR retry exhaustion.
#[test]
fn channel() {
    support::run_c("channel", &[]);
}

/// Two processes (fork) exchanging SEND and RDMA WRITE over the software device.
#[test]
fn two_process() {
    let out = support::run_c("two_process", &[]);
    assert!(out.contains("PASS two_process(child)"), "{out}");
}

/// Steady-state posting and polling allocate nothing on the caller's thread.
#[test]
fn no_alloc() {
    support::run_c("no_alloc", &[]);
}

/// ibv_copy_*_kern marshalling against the kernel ABI headers, dma-buf MRs, processing
/// hints, ibv_query_qp_data_in_order.
#[test]
fn marshall() {
    support::run_c("marshall", &[]);
}

/// A consumer compiled against the rdma-core 65 headers (newest struct layouts).
#[test]
fn v65_consumer() {
    match support::v65_headers() {
        Ok(include) => {
            let mut inc = std::ffi::OsString::from("-I");
            inc.push(&include);
            let bin = support::compile_c_with("v65_consumer", &[&inc]);
            support::run_compiled("v65_consumer", bin, &[]);
        }
        // Written to stderr so the reason shows without --nocapture.
        Err(reason) => eprintln!("v65_consumer: SKIPPED, no rdma-core 65 headers: {reason}"),
    }
}

/// Registration refused as the kernel refuses it, through all three registration verbs.
#[test]
fn registration() {
    support::run_c(
        "registration",
        &[("EFA_SIM_PROFILE", "efa_1.caps=-rdma_read-rdma_write")],
    );
}

/// A consumer that drives the rings itself (efadv_query_qp_wqs / efadv_query_cq, WQEs,
/// RX descriptors and doorbells by hand, CQEs by phase bit) against a verbs peer.
#[test]
fn direct_rings() {
    match support::v65_headers() {
        Ok(include) => {
            let mut inc = std::ffi::OsString::from("-I");
            inc.push(&include);
            let bin = support::compile_c_with("direct_rings", &[&inc]);
            support::run_compiled("direct_rings", bin, &[]);
        }
        Err(reason) => eprintln!("direct_rings: SKIPPED, no rdma-core 65 headers: {reason}"),
    }
}

/// The direct consumer with a SIGSEGV handler of its own, installed before opening the
/// device and after its rings were handed out (issue 38): on the default device its
/// doorbells are plain stores, so the run cannot tell, and completes.
#[test]
fn direct_rings_with_the_programs_own_sigsegv_handler() {
    for when in ["before", "after"] {
        // run_compiled removes the binary it ran.
        let Some(bin) = direct_rings_binary() else {
            return;
        };
        let out = support::run_compiled("direct_rings", bin, &[("DIRECT_RINGS_SIGSEGV", when)]);
        assert!(
            out.contains(&format!("SIGSEGV handler installed {when}")),
            "{out}"
        );
    }
}

/// Strict mode holds a direct consumer to what a NIC's LLQ gives (issue 35): consumed
/// slots poisoned, a partial rewrite and a phase fixed after the doorbell are bad WQEs, a
/// doorbell the device sees may announce `max_batch` WQEs, no more.
#[test]
fn direct_rings_strict_rules() {
    let Some(bin) = direct_rings_binary() else {
        return;
    };
    let out = support::run_compiled(
        "direct_rings",
        bin,
        &[("DIRECT_RINGS_STRICT", "1"), ("EFA_SIM_PROFILE", "strict")],
    );
    assert!(out.contains("strict rules"), "{out}");
}

/// A real segmentation fault in a direct consumer kills it with SIGSEGV, on the default
/// device and with the opt-in trap (`mmio_trap=1`), which passes faults not its own on.
/// With the trap on, a handler the program installs after the rings were handed out takes
/// the doorbell store for a crash: the limitation that keeps the trap off by default.
#[test]
fn direct_rings_real_faults_kill_and_the_trap_is_opt_in() {
    use std::os::unix::process::ExitStatusExt;
    let Some(bin) = direct_rings_binary() else {
        return;
    };
    for profile in [None, Some("mmio_trap=1")] {
        let mut cmd = support::on_sim(&bin);
        cmd.env("DIRECT_RINGS_SIGSEGV", "crash");
        if let Some(p) = profile {
            cmd.env("EFA_SIM_PROFILE", p);
        }
        let out = support::run_with_timeout(&mut cmd, 120);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("storing through NULL"), "{profile:?}: {err}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSEGV),
            "{profile:?}: {err}"
        );
    }
    let mut cmd = support::on_sim(&bin);
    cmd.env("DIRECT_RINGS_SIGSEGV", "after")
        .env("EFA_SIM_PROFILE", "mmio_trap=1");
    let out = support::run_with_timeout(&mut cmd, 120);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(99), "{err}");
    assert!(err.contains("the program's SIGSEGV handler ran"), "{err}");
    let _ = std::fs::remove_file(&bin);
}

/// direct_rings.c built against the rdma-core 65 headers (None, said on stderr, without
/// them).
fn direct_rings_binary() -> Option<std::path::PathBuf> {
    match support::v65_headers() {
        Ok(include) => {
            let mut inc = std::ffi::OsString::from("-I");
            inc.push(&include);
            Some(support::compile_c_with("direct_rings", &[&inc]))
        }
        Err(reason) => {
            eprintln!("direct_rings: SKIPPED, no rdma-core 65 headers: {reason}");
            None
        }
    }
}

/// Four posting threads sharing one send CQ with a poller thread (both poll APIs).
#[test]
fn threads() {
    support::run_c("threads", &[]);
}

/// NULL/zero-length SGEs and overflowing inline lengths (no crash, EINVAL where invalid).
#[test]
fn null_sge() {
    support::run_c("null_sge", &[]);
}

/// A C test that fails must make the harness fail (the suite can fail).
#[test]
fn failing_c_program_is_reported() {
    let bin = support::compile_c("api_device");
    // No devices: the program must notice and exit non-zero with a FAIL line.
    let mut cmd = support::on_sim(&bin);
    cmd.env("EFA_SIM_DEVICES", "1");
    let out = support::run_with_timeout(&mut cmd, 60);
    assert!(
        !out.status.success(),
        "api_device must fail with only one device"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FAIL api_device"), "{stderr}");
}
