//! `efa-perf local`: the server as a child process on this machine (the same
//! executable, `server --announce` on 127.0.0.1 and a free port), and the client here.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::RunOpts;
use crate::output::Output;
use crate::res::Device;
use crate::session;

/// Kills the child server if the client gives up early.
struct Server {
    child: Child,
    stderr: mpsc::Receiver<String>,
    said: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// What the server said on stderr (its error line, if it failed).
    fn said(&mut self) -> Option<String> {
        self.said.extend(self.stderr.try_iter());
        self.said
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim_start_matches("efa-perf: ").to_string())
    }

    /// Waits up to `limit` for the server to exit by itself.
    fn wait(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(()),
                Ok(Some(s)) => {
                    let why = self.said().unwrap_or_default();
                    return Err(format!("the server process exited with {s}: {why}"));
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                Ok(None) => {
                    return Err(format!(
                        "the server process did not exit within {} s",
                        limit.as_secs_f64()
                    ))
                }
                Err(e) => return Err(format!("waiting for the server process: {e}")),
            }
        }
    }
}

/// Starts the server child and returns it with the address it listens on.
fn start(opts: &RunOpts) -> Result<(Server, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let timeout = opts.common.timeout;
    let mut cmd = Command::new(exe);
    cmd.args([
        "server",
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--announce",
        "--no-progress",
    ])
    .arg(format!("--timeout={}", timeout.as_secs_f64()))
    .arg(format!(
        "--backend={}",
        crate::cli::backend_name(opts.common.backend)
    ))
    .arg(format!("--mem={}", opts.common.mem.name()));
    if let Some(d) = opts.common.devices.to_arg() {
        cmd.arg(format!("--ib-dev={d}"));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the server process: {e}"))?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let (line_tx, line_rx) = mpsc::channel();
    thread::spawn(move || {
        let mut first = String::new();
        if let Some(o) = out {
            let mut r = BufReader::new(o);
            let _ = r.read_line(&mut first);
            let _ = line_tx.send(first);
            // Keep draining so that the server never blocks on a full pipe.
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        }
    });
    let (err_tx, err_rx) = mpsc::channel();
    thread::spawn(move || {
        if let Some(e) = err {
            let mut text = String::new();
            let _ = BufReader::new(e).read_to_string(&mut text);
            for l in text.lines() {
                let _ = err_tx.send(l.to_string());
            }
        }
    });
    let mut server = Server {
        child,
        stderr: err_rx,
        said: Vec::new(),
    };
    let first = line_rx.recv_timeout(timeout).unwrap_or_default();
    match first.trim().strip_prefix("listening on ") {
        Some(addr) => Ok((server, addr.to_string())),
        None => {
            let _ = server.wait(Duration::from_millis(500));
            let why = server
                .said()
                .unwrap_or_else(|| "it printed no address".into());
            Err(format!("the server process did not start: {why}"))
        }
    }
}

/// Runs the client on `devs` (opened first: without them, nothing is started) against
/// a server child on this machine, which opens the same devices.
pub fn run_local(opts: &RunOpts, out: &mut Output, devs: Vec<Device>) -> Result<(), String> {
    let (mut server, addr) = start(opts)?;
    match session::run_client(&addr, opts, out, devs) {
        Ok(()) => server.wait(opts.common.timeout),
        Err(e) => {
            // The server's own line says more when it died without telling us.
            let _ = server.wait(Duration::from_millis(500));
            match server.said() {
                Some(s) if e.contains("closed the control connection") => Err(format!("{e} ({s})")),
                _ => Err(e),
            }
        }
    }
}
