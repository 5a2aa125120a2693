//! `efa-perf`: see the library docs (`efa_perf`) or `efa-perf --help`.
fn main() -> std::process::ExitCode {
    efa_perf::main_with(std::env::args().skip(1).collect())
}
