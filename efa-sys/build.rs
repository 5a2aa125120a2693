// libefa is linked for the EFA_1.0..EFA_1.2 entry points; newer ones are resolved at run time.
fn main() {
    println!("cargo:rustc-link-lib=dylib=efa");
    println!("cargo:rustc-link-lib=dylib=dl");
}
