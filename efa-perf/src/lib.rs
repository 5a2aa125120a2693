//! efa-perf: the perftest of this stack, on the safe `efa` API.
//!
//! ```text
//! efa-perf server [-p PORT]                 # on one machine
//! efa-perf client HOST[:PORT] [TESTS...]    # on another
//! efa-perf local [TESTS...]                 # both ends here, two processes
//! ```
//!
//! Tests: `send_lat` and `write_lat` (ping-pong; p50/p99/p99.9/max of half the round
//! trip), `send_bw`, `write_bw` and `read_bw` (streaming; GB/s and million messages per
//! second), over a sweep of message sizes (8 B to 1 MiB, powers of two; SEND sizes stop
//! at the port's `max_msg_sz`), with configurable iterations or duration, work requests
//! per doorbell, queue depth and number of QPs. With several devices (`-d all` or a
//! list), the bandwidth tests run over one rail per device at once (see [`rails`]). Server and client exchange endpoint info
//! and remote buffer descriptors over a TCP control connection (JSON lines).
//!
//! Every transfer is verified on its receiving side at least once per size (the
//! pattern of every byte, stamps and immediates of every ping-pong message, untouched
//! bytes after every RDMA range), a failed completion stops the run with its typed
//! error, and every wait has a timeout (`--timeout`). Exit status: 0 on success, 1
//! when a run fails or stdout cannot be written, 2 for bad command-line input (a `-d`
//! device that does not exist too); errors are one line on stderr. A closed stdout (`efa-perf local | head -1`) is not an error:
//! the client stops its run at the next line it would print (telling the server goodbye),
//! a server stops before serving, and both exit 0 without a message, as `cat` or `ls`
//! would after their SIGPIPE.
//!
//! On efa-sim, the software device, the first line says so: numbers measured there
//! describe the simulator, not EFA.

pub mod backend;
pub mod bw;
pub mod cli;
pub mod gpu;
pub mod lat;
pub mod local;
pub mod output;
pub mod pattern;
pub mod poll;
pub mod rails;
pub mod res;
pub mod session;
pub mod size;
pub mod stats;
pub mod test;
pub mod wire;

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use cli::Command;

/// Runs the command line `argv` (without the program name); prints errors as one line.
pub fn main_with(argv: Vec<String>) -> ExitCode {
    let cmd = match cli::parse(argv) {
        Ok(c) => c,
        Err(e) => {
            say(&e);
            return ExitCode::from(2);
        }
    };
    let result = match cmd {
        Command::Help => write_stdout(cli::USAGE),
        Command::Version => write_stdout(&format!(
            "efa-perf {} (protocol {})\n",
            env!("CARGO_PKG_VERSION"),
            wire::PROTOCOL
        )),
        Command::Server(opts) => match open(&opts.common) {
            Ok(devs) => session::run_server(&opts, devs),
            Err(code) => return code,
        },
        Command::Client { host, run } => {
            let devs = match open(&run.common) {
                Ok(d) => d,
                Err(code) => return code,
            };
            let mut out = output::Output::new(run.common.json, run.common.progress);
            let addr = wire::with_port(&host, run.port);
            let r = session::run_client(&addr, &run, &mut out, devs);
            out.finish();
            r.and_then(|()| out.write_error().map_or(Ok(()), Err))
        }
        Command::Local(run) => {
            // This end's devices first: without them, say so before starting anything.
            let devs = match open(&run.common) {
                Ok(d) => d,
                Err(code) => return code,
            };
            let mut out = output::Output::new(run.common.json, run.common.progress);
            let r = local::run_local(&run, &mut out, devs);
            out.finish();
            r.and_then(|()| out.write_error().map_or(Ok(()), Err))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say(&e);
            ExitCode::FAILURE
        }
    }
}

/// Opens the devices of `-d`, or says why not and gives the exit status: 2 for a device
/// name that does not exist (bad input), 1 for any other failure.
fn open(common: &cli::Common) -> Result<Vec<res::Device>, ExitCode> {
    rails::open(&common.devices, common.backend).map_err(|e| {
        say(&e.to_string());
        ExitCode::from(e.exit_code())
    })
}

/// Writes `text` to stdout (never `print!`, which panics on a closed pipe): `Ok` also
/// when the reader went away, an error line for any other failure.
pub fn write_stdout(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(format!("cannot write to stdout: {e}")),
        _ => Ok(()),
    }
}

/// One line on stderr (ignoring a closed stderr, where `eprintln!` would panic).
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "efa-perf: {msg}");
}
