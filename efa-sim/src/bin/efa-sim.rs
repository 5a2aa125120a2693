fn main() {
    eprintln!("efa-sim: not built yet");
    std::process::exit(2);
}
