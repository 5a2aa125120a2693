//! Run-time resolved efadv functions are available exactly when the loaded libefa.so.1
//! exports them, and report `NotProvided` (never an errno) otherwise.

use efa_sys::efadv::runtime::*;
use efa_sys::efadv::{NotProvided, NotProvidedReason};
use std::ffi::CStr;
use std::process::Command;
use std::ptr::null_mut;

/// Path of the libefa that defines the linked `efadv_query_device`.
fn loaded_libefa() -> String {
    // SAFETY: Dl_info holds only pointers (file/symbol names and addresses), for which
    // all-zero bytes (null) are valid values.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let address = efa_sys::efadv::efadv_query_device as *const libc::c_void;
    // SAFETY: dladdr only reads the address and writes `info`.
    let found = unsafe { libc::dladdr(address, &mut info) };
    assert_ne!(found, 0, "dladdr found no object for efadv_query_device");
    // SAFETY: dladdr set dli_fname to a NUL-terminated path owned by the loader.
    unsafe { CStr::from_ptr(info.dli_fname) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// Whether `library` defines `name` (with or without a version).
fn exports(dynsyms: &str, name: &str) -> bool {
    dynsyms.lines().any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        cols.len() >= 8 && cols[6] != "UND" && cols[7].split('@').next() == Some(name)
    })
}

#[test]
fn resolution_agrees_with_the_loaded_libefa_symbol_table() {
    let libefa = loaded_libefa();
    let out = Command::new("readelf")
        .args(["-W", "--dyn-syms", &libefa])
        .output()
        .unwrap();
    assert!(out.status.success(), "readelf failed on {libefa}");
    let dynsyms = String::from_utf8_lossy(&out.stdout);
    assert!(
        exports(&dynsyms, "efadv_query_device"),
        "{libefa} lacks efadv_query_device"
    );

    let statics: [(&str, &str, bool); 7] = [
        ("efadv_query_mr", "EFA_1.3", EFADV_QUERY_MR.is_provided()),
        (
            "efadv_query_qp_wqs",
            "EFA_1.4",
            EFADV_QUERY_QP_WQS.is_provided(),
        ),
        ("efadv_query_cq", "EFA_1.4", EFADV_QUERY_CQ.is_provided()),
        (
            "efadv_get_max_sq_depth",
            "EFA_1.5",
            EFADV_GET_MAX_SQ_DEPTH.is_provided(),
        ),
        (
            "efadv_get_max_rq_depth",
            "EFA_1.5",
            EFADV_GET_MAX_RQ_DEPTH.is_provided(),
        ),
        (
            "efadv_qp_from_ibv_qp_ex",
            "EFA_1.6",
            EFADV_QP_FROM_IBV_QP_EX.is_provided(),
        ),
        (
            "efadv_create_comp_cntr",
            "EFA_1.7",
            EFADV_CREATE_COMP_CNTR.is_provided(),
        ),
    ];
    for (name, _node, provided) in statics {
        assert_eq!(provided, exports(&dynsyms, name), "{name} in {libefa}");
    }
    println!("{libefa}: {statics:?}");
}

#[test]
fn absent_functions_return_not_provided_without_calling_anything() {
    let expected = |function, version_node| NotProvided {
        function,
        version_node,
        reason: NotProvidedReason::SymbolAbsent,
    };
    // Each call only happens when the symbol is absent, so the null arguments are never used.
    if !EFADV_QUERY_MR.is_provided() {
        // SAFETY: the symbol is absent (checked just above), so the wrapper's `resolve()?`
        // returns NotProvided before anything is called; the null arguments are never used.
        let r = unsafe { efadv_query_mr(null_mut(), null_mut(), 0) };
        assert_eq!(r, Err(expected("efadv_query_mr", "EFA_1.3")));
    }
    if !EFADV_QUERY_QP_WQS.is_provided() {
        // SAFETY: as above: symbol absent, so nothing is called with the null arguments.
        let r = unsafe { efadv_query_qp_wqs(null_mut(), null_mut(), null_mut(), 0) };
        assert_eq!(r, Err(expected("efadv_query_qp_wqs", "EFA_1.4")));
    }
    if !EFADV_QUERY_CQ.is_provided() {
        // SAFETY: as above: symbol absent, so nothing is called with the null arguments.
        let r = unsafe { efadv_query_cq(null_mut(), null_mut(), 0) };
        assert_eq!(r, Err(expected("efadv_query_cq", "EFA_1.4")));
    }
    if !EFADV_GET_MAX_SQ_DEPTH.is_provided() {
        // SAFETY: as above: symbol absent, so nothing is called with the null arguments.
        let r = unsafe { efadv_get_max_sq_depth(null_mut(), null_mut(), 0) };
        assert_eq!(r, Err(expected("efadv_get_max_sq_depth", "EFA_1.5")));
    }
    if !EFADV_GET_MAX_RQ_DEPTH.is_provided() {
        // SAFETY: as above: symbol absent, so nothing is called with the null arguments.
        let r = unsafe { efadv_get_max_rq_depth(null_mut(), null_mut(), 0) };
        assert_eq!(r, Err(expected("efadv_get_max_rq_depth", "EFA_1.5")));
    }
    if !EFADV_QP_FROM_IBV_QP_EX.is_provided() {
        // SAFETY: as above: symbol absent, so nothing is called with the null arguments.
        let r = unsafe { efadv_qp_from_ibv_qp_ex(null_mut()) };
        assert_eq!(r, Err(expected("efadv_qp_from_ibv_qp_ex", "EFA_1.6")));
    }
    if !EFADV_CREATE_COMP_CNTR.is_provided() {
        // SAFETY: as above: symbol absent, so nothing is called with the null arguments.
        let r = unsafe { efadv_create_comp_cntr(null_mut(), null_mut(), null_mut(), 0) };
        assert_eq!(r, Err(expected("efadv_create_comp_cntr", "EFA_1.7")));
    }
}

const CHILD_ENV: &str = "EFA_SYS_SYSTEM_RDMA_CORE_CHILD";

/// Tests run on the software device when it is selected; this re-runs the checks in a child
/// process without cargo's library path, i.e. against the system's libefa.
#[test]
fn system_libefa_checks_in_a_child_process() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "system_libefa_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("LD_LIBRARY_PATH")
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed") && stdout.contains("system libefa: "),
        "the child did not run the checks:\n{stdout}"
    );
    println!("{stdout}");
}

#[test]
#[ignore = "run by system_libefa_checks_in_a_child_process"]
fn system_libefa_child() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("1") {
        // `cargo test -- --ignored` outside the parent: the parent is what checks this.
        println!(
            "system_libefa_child: only meaningful under system_libefa_checks_in_a_child_process"
        );
        return;
    }
    let libefa = std::fs::canonicalize(loaded_libefa()).unwrap();
    println!("system libefa: {}", libefa.display());
    assert!(
        !libefa.to_string_lossy().contains("efa_sim"),
        "child still loaded the software device: {}",
        libefa.display()
    );
    resolution_agrees_with_the_loaded_libefa_symbol_table();
    absent_functions_return_not_provided_without_calling_anything();
    // rdma-core 44's libefa is 1.2.x: it has no node after EFA_1.2.
    if libefa.to_string_lossy().ends_with("libefa.so.1.2.44.0") {
        let provided = [
            EFADV_QUERY_MR.is_provided(),
            EFADV_QUERY_QP_WQS.is_provided(),
            EFADV_QUERY_CQ.is_provided(),
            EFADV_GET_MAX_SQ_DEPTH.is_provided(),
            EFADV_GET_MAX_RQ_DEPTH.is_provided(),
            EFADV_QP_FROM_IBV_QP_EX.is_provided(),
            EFADV_CREATE_COMP_CNTR.is_provided(),
        ];
        assert_eq!(provided, [false; 7]);
        println!("rdma-core 44 libefa: every EFA_1.3+ function reported NotProvided");
    }
}
