//! `efa-info`: see the library docs (`efa_info`) or `efa-info --help`.
fn main() -> std::process::ExitCode {
    efa_info::main_with(std::env::args().skip(1).collect())
}
