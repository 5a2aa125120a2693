//! The command line: `efa-perf server|client|local ...`, in the spirit of perftest's
//! `ib_send_lat`/`ib_write_bw` (same short options where they exist).

use std::time::Duration;

pub use crate::gpu::Memory;
pub use crate::rails::DeviceSel;
pub use crate::size::{format_size, parse_size, size_option, SizeError, Sizes};
use crate::test::Test;

/// Default TCP port of the control connection (perftest's).
pub const DEFAULT_PORT: u16 = 18515;
/// Default sweep: 8 B ...
pub const DEFAULT_MIN_SIZE: usize = 8;
/// ... to 1 MiB, powers of two.
pub const DEFAULT_MAX_SIZE: usize = 1 << 20;
/// Default for every wait (connect, control messages, completions).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message size accepted on the command line (the control protocol's limit too).
pub const MAX_SIZE: usize = 1 << 30;

/// The usage text (`--help`).
pub const USAGE: &str = "\
usage: efa-perf server [-p PORT] [--bind ADDR] [--forever] [-d DEV] [--backend B] [--timeout SECS]
       efa-perf client HOST[:PORT] [TESTS...] [OPTIONS]
       efa-perf local [TESTS...] [OPTIONS]      (both ends on this machine, two processes)

tests: send_lat write_lat send_bw write_bw read_bw (default: all the device supports;
       perftest names such as ib_write_bw are accepted)

options:
  -s, --size BYTES       one message size instead of the sweep, 1 to 1G (K, M and G
                         suffixes: KiB, MiB, GiB)
  -a, --all              sweep powers of two from --min-size to --max-size (the default)
      --min-size BYTES   smallest size of the sweep (default 8)
      --max-size BYTES   largest size of the sweep (default 1M)
  -n, --iters N          iterations per size (default 1000 for latency, 5000 for bandwidth)
  -D, --duration SECS    run each size for SECS instead of a number of iterations
  -b, --batch N          work requests per doorbell, bandwidth tests (default 1)
  -t, --tx-depth N       work requests in flight per QP, bandwidth tests (default 128)
  -q, --qps N            queue pairs, bandwidth tests (default 1)
  -I, --inline-size N    largest SEND sent inline (default: the QP's inline size; 0: never)
  -c, --connection TYPE  transport: SRD (the only one)
  -d, --ib-dev DEVS      EFA device: a name (default: the first); or all, or names
                         separated by commas: bandwidth tests run over one rail per
                         device at once (its own PD, CQ, -q QPs and buffers, on both
                         ends; -n counts per rail), reported per rail and in total;
                         latency tests run on the first device only (a note says so)
      --mem M            host (the default) or gpu: write_bw's and read_bw's buffers
                         in GPU memory, each rail's on the GPU nearest its device (a
                         build with --features cuda; efa-sim's software GPU stands in
                         where there is none); each end chooses its own
      --backend B        data path: auto (the default: libefa's, or the direct path
                         where EFA_RS_DIRECT=1 and the device hands out its queues),
                         direct (this crate writes the queues; qualify it first:
                         scripts/qualify-direct.sh), or provider (libefa's); each end
                         chooses its own
  -p, --port PORT        TCP port of the server (default 18515)
      --timeout SECS     longest any single wait may take (default 10)
      --json             one JSON object per line (device, then one per test and size)
      --no-progress      no progress line (it is shown only on a terminal anyway)
  -h, --help             this text
  -V, --version          the version

exit status: 0 when every test ran and every transfer verified, 1 when a run failed,
2 for bad command-line input.
";

/// Options shared by every command.
#[derive(Clone, Debug, PartialEq)]
pub struct Common {
    /// `-d`: the device, or several (rails).
    pub devices: DeviceSel,
    /// `--timeout`.
    pub timeout: Duration,
    /// `--json`.
    pub json: bool,
    /// Not `--no-progress`.
    pub progress: bool,
    /// `--backend`.
    pub backend: efa::Backend,
    /// `--mem`.
    pub mem: Memory,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            devices: DeviceSel::First,
            timeout: DEFAULT_TIMEOUT,
            json: false,
            progress: true,
            backend: efa::Backend::Auto,
            mem: Memory::Host,
        }
    }
}

/// What a client (or `local`) runs.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOpts {
    /// The tests, in order.
    pub tests: Vec<Test>,
    /// True if the tests were named (an unsupported named test is an error; an
    /// unsupported default one is skipped).
    pub tests_named: bool,
    /// Sizes.
    pub sizes: Sizes,
    /// `-n`.
    pub iters: Option<u64>,
    /// `-D`.
    pub duration: Option<Duration>,
    /// `-b`.
    pub batch: u32,
    /// `-t`.
    pub depth: u32,
    /// `-q`.
    pub qps: u32,
    /// `-I`.
    pub inline: Option<u32>,
    /// `-p`.
    pub port: u16,
    /// The rest.
    pub common: Common,
}

/// What a server does.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerOpts {
    /// `-p` (0: any free port).
    pub port: u16,
    /// `--bind`.
    pub bind: String,
    /// `--forever`: serve clients one after another until killed (default: one).
    pub forever: bool,
    /// `--announce`: print `listening on ADDR:PORT` as the first line of stdout.
    pub announce: bool,
    /// The rest.
    pub common: Common,
}

/// A parsed command line.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `server`.
    Server(ServerOpts),
    /// `client HOST[:PORT]`.
    Client {
        /// The server.
        host: String,
        /// What to run.
        run: RunOpts,
    },
    /// `local`.
    Local(RunOpts),
    /// `-h`.
    Help,
    /// `-V`.
    Version,
}

fn parse_secs(s: &str, name: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86_400.0 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!(
            "{name} needs a number of seconds in (0, 86400], got {s:?}"
        )),
    }
}

fn parse_num<T>(s: &str, name: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    match s.parse::<T>() {
        Ok(v) if v >= min && v <= max => Ok(v),
        _ => Err(format!(
            "{name} needs a number in [{min}, {max}], got {s:?}"
        )),
    }
}

/// Splits `--opt=value` and finds the value of options that take one.
struct Args {
    items: std::vec::IntoIter<String>,
}

impl Args {
    fn value(&mut self, name: &str, inline: Option<String>) -> Result<String, String> {
        inline
            .or_else(|| self.items.next())
            .ok_or_else(|| format!("{name} needs a value"))
    }
}

/// Parses everything after the program name.
pub fn parse(argv: Vec<String>) -> Result<Command, String> {
    let mut args = Args {
        items: argv.into_iter(),
    };
    let Some(cmd) = args.items.next() else {
        return Err("missing command: server, client HOST or local (see --help)".into());
    };
    let mut host = None;
    match cmd.as_str() {
        "-h" | "--help" | "help" => return Ok(Command::Help),
        "-V" | "--version" => return Ok(Command::Version),
        "client" => match args.items.next() {
            Some(h) if !h.starts_with('-') => host = Some(h),
            _ => return Err("client needs the server's HOST[:PORT]".into()),
        },
        "server" | "local" => {}
        other => {
            return Err(format!(
                "unknown command {other:?}: server, client HOST or local (see --help)"
            ))
        }
    }
    let mut common = Common::default();
    let mut run = RunOpts {
        tests: Vec::new(),
        tests_named: false,
        sizes: Sizes::Sweep {
            min: DEFAULT_MIN_SIZE,
            max: DEFAULT_MAX_SIZE,
        },
        iters: None,
        duration: None,
        batch: 1,
        depth: 128,
        qps: 1,
        inline: None,
        port: DEFAULT_PORT,
        common: Common::default(),
    };
    let (mut min, mut max, mut one) = (DEFAULT_MIN_SIZE, DEFAULT_MAX_SIZE, None);
    let (mut bind, mut forever, mut announce) = ("0.0.0.0".to_string(), false, false);
    let server = cmd == "server";
    while let Some(a) = args.items.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let size = |v: String, n: &str| size_option(n, &v);
        let run_only = |n: &str| -> Result<(), String> {
            if server {
                return Err(format!(
                    "{n} is an option of client and local, not of server"
                ));
            }
            Ok(())
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "-p" | "--port" => {
                let v = args.value(&name, inline)?;
                let min_port = if server { 0 } else { 1 };
                run.port = parse_num(&v, &name, min_port, u16::MAX)?;
            }
            "-d" | "--ib-dev" => common.devices = DeviceSel::parse(&args.value(&name, inline)?)?,
            "--timeout" => common.timeout = parse_secs(&args.value(&name, inline)?, &name)?,
            "--json" => common.json = true,
            "--no-progress" => common.progress = false,
            "--backend" => common.backend = parse_backend(&args.value(&name, inline)?)?,
            "--mem" => common.mem = Memory::parse(&args.value(&name, inline)?)?,
            "--bind" if server => bind = args.value(&name, inline)?,
            "--forever" if server => forever = true,
            "--announce" if server => announce = true,
            "-c" | "--connection" => {
                let v = args.value(&name, inline)?;
                if !v.eq_ignore_ascii_case("srd") {
                    return Err(format!(
                        "connection type {v:?} is not supported: EFA's reliable transport is SRD (-c SRD)"
                    ));
                }
            }
            "-s" | "--size" => {
                run_only(&name)?;
                one = Some(size(args.value(&name, inline)?, &name)?);
            }
            "-a" | "--all" => run_only(&name)?,
            "--min-size" => {
                run_only(&name)?;
                min = size(args.value(&name, inline)?, &name)?;
            }
            "--max-size" => {
                run_only(&name)?;
                max = size(args.value(&name, inline)?, &name)?;
            }
            "-n" | "--iters" => {
                run_only(&name)?;
                run.iters = Some(parse_num(
                    &args.value(&name, inline)?,
                    &name,
                    1u64,
                    1 << 32,
                )?);
            }
            "-D" | "--duration" => {
                run_only(&name)?;
                run.duration = Some(parse_secs(&args.value(&name, inline)?, &name)?);
            }
            "-b" | "--batch" | "--post_list" => {
                run_only(&name)?;
                run.batch = parse_num(&args.value(&name, inline)?, &name, 1, 256)?;
            }
            "-t" | "--tx-depth" => {
                run_only(&name)?;
                run.depth = parse_num(&args.value(&name, inline)?, &name, 1, 65536)?;
            }
            "-q" | "--qps" => {
                run_only(&name)?;
                run.qps = parse_num(&args.value(&name, inline)?, &name, 1, 64)?;
            }
            "-I" | "--inline-size" => {
                run_only(&name)?;
                run.inline = Some(parse_num(&args.value(&name, inline)?, &name, 0, 65536)?);
            }
            t if !t.starts_with('-') && !server => match Test::from_name(t) {
                Some(test) if !run.tests.contains(&test) => run.tests.push(test),
                Some(_) => {}
                None => {
                    let names: Vec<_> = Test::ALL.iter().map(|t| t.name()).collect();
                    return Err(format!("unknown test {t:?} (tests: {})", names.join(" ")));
                }
            },
            other => return Err(format!("unknown option {other:?} (see --help)")),
        }
    }
    if min > max {
        return Err(format!("--min-size {min} is larger than --max-size {max}"));
    }
    if run.iters.is_some() && run.duration.is_some() {
        return Err("-n and -D exclude each other: a number of iterations or a duration".into());
    }
    if run.batch > run.depth {
        return Err(format!(
            "--batch {} is larger than --tx-depth {}: a doorbell cannot carry more than the queue holds",
            run.batch, run.depth
        ));
    }
    run.sizes = match one {
        Some(s) => Sizes::One(s),
        None => Sizes::Sweep { min, max },
    };
    if run.sizes.list().is_empty() {
        return Err(format!(
            "no power of two between --min-size {min} and --max-size {max}"
        ));
    }
    run.tests_named = !run.tests.is_empty();
    if run.tests.is_empty() {
        run.tests = Test::ALL.to_vec();
    }
    if server {
        return Ok(Command::Server(ServerOpts {
            port: run.port,
            bind,
            forever,
            announce,
            common,
        }));
    }
    run.common = common;
    Ok(match host {
        Some(host) => Command::Client { host, run },
        None => Command::Local(run),
    })
}

pub use crate::backend::{backend_name, parse_backend};

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, String> {
        parse(s.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn sizes_and_sweeps() {
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("x"), Err(SizeError::Malformed));
        assert_eq!(parse_size(""), Err(SizeError::Malformed));
        assert_eq!(parse_size("K"), Err(SizeError::Malformed));
        assert_eq!(parse_size("+5"), Err(SizeError::Malformed));
        assert_eq!(
            parse_size("99999999999999999999G"),
            Err(SizeError::Overflow)
        );
        assert_eq!(parse_size("18014398509481984K"), Err(SizeError::Overflow));
        assert_eq!(format_size(1 << 30), "1G");
        assert_eq!(format_size(3 << 10), "3K");
        assert_eq!(format_size(1000), "1000");
        let s = Sizes::Sweep {
            min: 8,
            max: 1 << 20,
        }
        .list();
        assert_eq!((s.len(), s[0], *s.last().unwrap()), (18, 8, 1 << 20));
        assert_eq!(Sizes::Sweep { min: 3, max: 16 }.list(), vec![4, 8, 16]);
    }

    #[test]
    fn client_and_local_options() {
        let Command::Client { host, run } =
            p("client 10.0.0.2:7000 ib_write_bw send_lat -s 4K -q 2 -t 64 -b 8 --json").unwrap()
        else {
            panic!("not a client")
        };
        assert_eq!(host, "10.0.0.2:7000");
        assert_eq!(run.tests, vec![Test::WriteBw, Test::SendLat]);
        assert!(run.tests_named && run.common.json);
        assert_eq!(
            (run.sizes, run.qps, run.depth, run.batch),
            (Sizes::One(4096), 2, 64, 8)
        );
        let Command::Local(run) = p("local -n 50 --max-size=64K --timeout 2.5").unwrap() else {
            panic!("not local")
        };
        assert_eq!(run.tests, Test::ALL.to_vec());
        assert!(!run.tests_named);
        assert_eq!(run.iters, Some(50));
        assert_eq!(run.sizes.list().last(), Some(&65536));
        assert_eq!(run.common.timeout, Duration::from_millis(2500));
        assert_eq!(run.common.devices, DeviceSel::First);
        let Command::Local(run) = p("local -d efa_1,efa_3 write_bw").unwrap() else {
            panic!("not local")
        };
        let two = vec!["efa_1".to_string(), "efa_3".to_string()];
        assert_eq!(run.common.devices, DeviceSel::Named(two));
        // The largest size is in the range: -s 1G, --max-size 1G and --min-size 1G work.
        let Command::Local(run) = p("local -s 1G").unwrap() else {
            panic!("not local")
        };
        assert_eq!(run.sizes, Sizes::One(1 << 30));
        let Command::Local(run) = p("local --min-size 1G --max-size 1g").unwrap() else {
            panic!("not local")
        };
        assert_eq!(run.sizes.list(), vec![1 << 30]);
        let Command::Server(s) = p("server -p 0 --bind 127.0.0.1 --announce").unwrap() else {
            panic!("not a server")
        };
        assert_eq!(
            (s.port, s.bind.as_str(), s.announce),
            (0, "127.0.0.1", true)
        );
    }

    #[test]
    fn bad_input_is_one_clear_message() {
        let e = |s: &str| p(s).unwrap_err();
        assert!(e("").contains("missing command"));
        assert!(e("frob").contains("unknown command"));
        assert!(e("client").contains("needs the server"));
        let range = "sizes go from 1 to 1G (1073741824) bytes, both included";
        assert_eq!(e("local -s 0"), format!("-s 0 is out of range: {range}"));
        assert_eq!(e("local -s 2G"), format!("-s 2G is out of range: {range}"));
        assert_eq!(
            e("local -s 1073741825"),
            format!("-s 1073741825 is out of range: {range}")
        );
        assert_eq!(
            e("local -s 99999999999999999999G"),
            format!("-s 99999999999999999999G is out of range: {range}")
        );
        assert_eq!(
            e("local --max-size 99999999999999999999"),
            format!("--max-size 99999999999999999999 is out of range: {range}")
        );
        assert_eq!(
            e("local --min-size=1025M"),
            format!("--min-size 1025M is out of range: {range}")
        );
        assert!(e("local -s 1T").starts_with("-s needs a size in bytes from 1 to 1G"));
        assert!(e("local -s 1T").ends_with("got \"1T\""));
        assert!(e("local -n 99999999999999999999").contains("-n needs a number in [1, 4294967296]"));
        assert!(e("local -q 65").contains("-q needs a number in [1, 64]"));
        assert!(e("local -n 10 -D 1").contains("exclude each other"));
        assert!(e("local -c UD").contains("SRD"));
        assert!(e("local ib_atomic_bw").contains("unknown test"));
        assert!(e("local --min-size 64 --max-size 8").contains("larger than --max-size"));
        assert!(e("local -b 16 -t 8").contains("--batch 16 is larger"));
        assert!(e("local -p 0").contains("-p needs a number in [1, 65535]"));
        assert!(e("server -s 8").contains("not of server"));
        assert!(e("local --timeout -1").contains("seconds"));
        assert!(e("local --bogus").contains("unknown option"));
        assert!(e("local -d efa_0,").contains("an empty device name"));
    }
}
