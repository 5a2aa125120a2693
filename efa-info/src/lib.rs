//! efa-info: what `ibv_devinfo -v` shows for each device, plus everything
//! `efadv_query_device` reports (queue depths and SGEs, inline buffer, largest RDMA, the
//! device capabilities by name, unsolicited write receive, the send queue's largest
//! batch), which library answered (rdma-core or efa-sim, and its version), and which
//! features of the `efa` crate the device supports, each tried through the safe API; then
//! the topology: NUMA nodes, each EFA device's PCI address, NUMA node and link speed, each
//! GPU's nearest devices, a devices × GPUs matrix and the devices' hardware counters.
//!
//! ```text
//! efa-info [-d NAME] [--json]
//! ```
//!
//! Exit status 0 when at least one device was reported, 1 when there is none (or the
//! named one does not exist) or stdout cannot be written, 2 for bad command-line input.
//! A closed stdout (`efa-info --json | head -1`) is not an error: the program stops
//! writing and exits 0 without a message, as `cat` or `ls` would after their SIGPIPE.

pub mod library;
pub mod probe;
pub mod report;
pub mod topology;

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use serde_json::json;

/// The usage text.
pub const USAGE: &str = "\
usage: efa-info [-d NAME] [--json]

  -d, --ib-dev NAME   only this device
      --json          one JSON object: the libraries, then every device
  -h, --help          this text
  -V, --version       the version

For each RDMA device: the verbs attributes, port 1, the GIDs, the EFA limits and
capabilities (efadv_query_device) in words, and which features of the efa crate work on
it (each tried through the safe API); first, which libraries answered (rdma-core or
efa-sim, the software EFA device, and their versions); last, the topology (NUMA nodes,
devices, GPUs and the devices nearest each, hardware counters).
";

/// Parsed options.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Opts {
    /// `-d`.
    pub device: Option<String>,
    /// `--json`.
    pub json: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Cmd {
    /// Report.
    Run(Opts),
    /// `-h`.
    Help,
    /// `-V`.
    Version,
}

/// Parses everything after the program name.
pub fn parse(argv: Vec<String>) -> Result<Cmd, String> {
    let mut o = Opts::default();
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(Cmd::Help),
            "-V" | "--version" => return Ok(Cmd::Version),
            "--json" => o.json = true,
            "-d" | "--ib-dev" => o.device = Some(it.next().ok_or("-d needs a device name")?),
            s if s.starts_with("--ib-dev=") => o.device = Some(s["--ib-dev=".len()..].to_string()),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(Cmd::Run(o))
}

/// Gathers the report, as the text to print.
fn run(o: &Opts) -> Result<String, String> {
    const HINT: &str =
        "on a machine without EFA, run it on the software device: `efa-sim run -- efa-info`";
    let verbs = || {
        library::loaded(None)
            .first()
            .map_or(String::new(), |l| format!(" from {}", l.origin()))
    };
    let list =
        efa::DeviceList::new().map_err(|e| format!("no RDMA devices ({e}){}; {HINT}", verbs()))?;
    let names: Vec<String> = list.iter().map(|d| d.name().to_string()).collect();
    let devices: Vec<_> = list
        .iter()
        .filter(|d| o.device.as_deref().map_or(true, |n| d.name() == n))
        .collect();
    if devices.is_empty() {
        return Err(match (&o.device, names.is_empty()) {
            (_, true) => format!("no RDMA devices{}; {HINT}", verbs()),
            (Some(n), false) => format!("no device named {n} (devices: {})", names.join(", ")),
            (None, false) => unreachable!("a device list with names has devices"),
        });
    }
    let mut reports = Vec::new();
    for d in devices {
        reports.push(report::collect(&d)?);
    }
    let fw = reports
        .iter()
        .find_map(|r| r.attr.as_ref().ok().map(|a| a.fw_ver().to_string()));
    let libs = library::loaded(fw.as_deref());
    let topo = topology::collect();
    if o.json {
        let v = json!({
            "efa_info": env!("CARGO_PKG_VERSION"),
            "libraries": libs.iter().map(library::Lib::to_json).collect::<Vec<_>>(),
            "devices": reports.iter().map(report::DeviceReport::to_json).collect::<Vec<_>>(),
            "topology": topo.to_json(),
        });
        return Ok(format!("{v:#}\n"));
    }
    let mut text = format!("efa-info {}\nlibraries\n", env!("CARGO_PKG_VERSION"));
    for l in &libs {
        text += &format!("  {}\n", l.describe());
    }
    for r in &reports {
        text.push('\n');
        text += &r.text();
    }
    text.push('\n');
    text += &topo.text();
    Ok(text)
}

/// Writes `text` to stdout: `SUCCESS` also when the reader went away (a closed pipe,
/// `efa-info | head -1`), `FAILURE` with a one-line message for any other write error.
/// Never `print!`, which panics on a closed pipe.
pub fn write_out(out: &mut dyn Write, text: &str) -> ExitCode {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("cannot write to stdout: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// One line on stderr (ignoring a closed stderr, where `eprintln!` would panic).
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "efa-info: {msg}");
}

/// Runs the command line `argv`; errors are one line on stderr.
pub fn main_with(argv: Vec<String>) -> ExitCode {
    match parse(argv) {
        Err(e) => {
            say(&e);
            ExitCode::from(2)
        }
        Ok(Cmd::Help) => write_out(&mut std::io::stdout().lock(), USAGE),
        Ok(Cmd::Version) => write_out(
            &mut std::io::stdout().lock(),
            &format!("efa-info {}\n", env!("CARGO_PKG_VERSION")),
        ),
        Ok(Cmd::Run(o)) => match run(&o) {
            Ok(text) => write_out(&mut std::io::stdout().lock(), &text),
            Err(e) => {
                say(&e);
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let p = |s: &str| parse(s.split_whitespace().map(String::from).collect());
        assert_eq!(p(""), Ok(Cmd::Run(Opts::default())));
        assert_eq!(
            p("-d efa_1 --json"),
            Ok(Cmd::Run(Opts {
                device: Some("efa_1".into()),
                json: true
            }))
        );
        assert_eq!(
            p("--ib-dev=efa_0"),
            Ok(Cmd::Run(Opts {
                device: Some("efa_0".into()),
                json: false
            }))
        );
        assert_eq!(p("-V"), Ok(Cmd::Version));
        assert!(p("-d").unwrap_err().contains("needs a device"));
        assert!(p("-v").unwrap_err().contains("unknown argument"));
    }
}
