//! Compiles the C baseline (csrc/vs_c.c) against the system's rdma-core headers
//! (libibverbs-dev, installed by scripts/setup.sh). The C code uses only rdma-core's
//! inline helpers and `ibv_post_recv`, whose symbols the `efa` crate already links.
fn main() {
    println!("cargo:rerun-if-changed=csrc/vs_c.c");
    println!("cargo:rerun-if-changed=csrc/vs_c.h");
    cc::Build::new()
        .file("csrc/vs_c.c")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-std=gnu11")
        .compile("vs_c");
}
