//! Versioned exports. rustc cannot give a symbol an ELF version, so each exported
//! rdma-core function is a tiny assembly trampoline named e.g. `ibv_open_device@@IBVERBS_1.1`
//! (via `.symver`) that jumps to the Rust implementation (`jmp` on x86_64, `b` on aarch64;
//! `%`-prefixed section and symbol types, which both assemblers accept). The nodes themselves are
//! declared by the version script written in `build.rs`.

/// `export!(NODE, c_name => rust_fn)`: makes `c_name@@NODE` a global function that
/// tail-jumps to `rust_fn` (which must have the C signature of `c_name`).
macro_rules! export {
    ($node:literal, $name:ident => $imp:path) => {
        export!(@emit "@@", $node, $name => $imp);
    };
    // Non-default (compat-only) version, like `ibv_register_driver@IBVERBS_1.1`:
    // old binaries bind to it, new links cannot.
    (compat $node:literal, $name:ident => $imp:path) => {
        export!(@emit "@", $node, $name => $imp);
    };
    (@emit $at:literal, $node:literal, $name:ident => $imp:path) => {
        ::core::arch::global_asm!(
            ".pushsection .text.efa_sim_export,\"ax\",%progbits",
            concat!(".globl efa_sim_export_", stringify!($name)),
            concat!(".type efa_sim_export_", stringify!($name), ",%function"),
            ".p2align 4",
            concat!("efa_sim_export_", stringify!($name), ":"),
            tail_jump!(),
            concat!(".size efa_sim_export_", stringify!($name), ", . - efa_sim_export_", stringify!($name)),
            concat!(".symver efa_sim_export_", stringify!($name), ",", stringify!($name), $at, $node),
            ".popsection",
            f = sym $imp,
        );
    };
}

/// `export_data!(NODE, c_name, size)`: a zero-filled data object `c_name@@NODE` of `size`
/// bytes (rdma-core's private node has one: `verbs_allow_disassociate_destroy`).
macro_rules! export_data {
    ($node:literal, $name:ident, $size:literal) => {
        ::core::arch::global_asm!(
            ".pushsection .bss.efa_sim_export_data,\"aw\",%nobits",
            concat!(".globl efa_sim_export_", stringify!($name)),
            concat!(".type efa_sim_export_", stringify!($name), ",%object"),
            concat!(
                ".size efa_sim_export_",
                stringify!($name),
                ", ",
                stringify!($size)
            ),
            concat!("efa_sim_export_", stringify!($name), ":"),
            concat!(".skip ", stringify!($size)),
            concat!(
                ".symver efa_sim_export_",
                stringify!($name),
                ",",
                stringify!($name),
                "@@",
                $node
            ),
            ".popsection",
        );
    };
}

/// The trampoline's one instruction: a tail jump to operand `f`, leaving every argument
/// register and the return address as the caller set them.
#[cfg(target_arch = "x86_64")]
macro_rules! tail_jump {
    () => {
        "jmp {f}"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! tail_jump {
    () => {
        "b {f}"
    };
}
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "efa-sim's versioned-symbol trampolines exist for x86_64 and aarch64 only (the architectures of EFA instances)"
);
