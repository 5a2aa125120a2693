//! The receiver in a second process (this test binary re-run as `receiver_process`),
//! driven over its stdin and stdout: one command per line, one answer line (`@@ ...`)
//! each.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::plan::Plan;
use super::receiver::Receiver;
use super::{run, Outcome, Side};
use crate::common::*;
use efa_typestate::*;

/// Set in the receiver process: the backend's name.
pub const CHILD_VAR: &str = "EFA_DIFF_RECEIVER";
const SEED_VAR: &str = "EFA_DIFF_SEED";
const ANSWER: &str = "@@ ";

/// Runs `plan` with the receiver in a second process.
pub fn run_remote(plan: &Plan, backend: Backend) -> Outcome {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "receiver_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, format!("{backend:?}"))
        .env(SEED_VAR, plan.seed.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the receiver process");
    let mut peer = Remote {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        addresses: None,
    };
    let ready = peer.answer();
    let mut words = ready.split(' ').skip(1);
    let mut next = || unhex(words.next().expect("READY endpoint target readable"));
    peer.addresses = Some((
        EndpointInfo::parse(&next()).unwrap(),
        RemoteBuffer::parse(&next()).unwrap(),
        RemoteBuffer::parse(&next()).unwrap(),
    ));
    let ctx = open(0);
    let out = run(plan, backend, &ctx, &mut peer);
    finish(child);
    out
}

fn finish(mut child: Child) {
    let status = child.wait().unwrap();
    assert!(status.success(), "the receiver process failed: {status}");
}

struct Remote {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addresses: Option<(EndpointInfo, RemoteBuffer, RemoteBuffer)>,
}

impl Remote {
    /// The next answer line (test-harness lines are skipped).
    fn answer(&mut self) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the receiver process ended without answering");
            // The harness's "test receiver_process ... " has no newline before the
            // test's first output, so an answer may follow it on the same line.
            if let Some(at) = line.find(ANSWER) {
                return line[at + ANSWER.len()..].trim_end().to_string();
            }
        }
    }
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.answer()
    }
}

impl Side for Remote {
    fn addresses(&self) -> (EndpointInfo, RemoteBuffer, RemoteBuffer) {
        self.addresses.unwrap()
    }
    fn meet(&mut self, requester: &EndpointInfo) {
        assert_eq!(
            self.ask(&format!("MEET {}", hex(&requester.to_bytes()))),
            "OK"
        );
    }
    fn ensure(&mut self, k: usize) {
        assert_eq!(self.ask(&format!("ENSURE {k}")), "OK");
    }
    fn fill(&mut self) -> String {
        self.ask("FILL")
    }
    fn expect(&mut self, n: usize) {
        assert_eq!(self.ask(&format!("EXPECT {n}")), "OK");
    }
    fn finish(&mut self) -> String {
        self.ask("FINISH")
    }
}

/// The receiver process: serves commands until `FINISH`.
pub fn serve_remote() {
    let backend = match std::env::var(CHILD_VAR).unwrap().as_str() {
        "Direct" => Backend::Direct,
        "Provider" => Backend::Provider,
        other => panic!("{CHILD_VAR}={other}"),
    };
    let seed = std::env::var(SEED_VAR).unwrap().parse().unwrap();
    let plan = Plan::new(seed);
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(256).backend(backend).sender_gid())
        .unwrap();
    let mut b = Receiver::new(&pd, &cq, &plan, backend);
    assert_eq!(b.backends(), [backend; 2]);
    let (ep, target, readable) = b.addresses();
    let say = |s: &str| println!("{ANSWER}{s}");
    say(&format!(
        "READY {} {} {}",
        hex(&ep.to_bytes()),
        hex(&target.to_bytes()),
        hex(&readable.to_bytes())
    ));
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let (cmd, arg) = line.split_once(' ').unwrap_or((&line, ""));
        match cmd {
            "MEET" => {
                b.meet(&EndpointInfo::parse(&unhex(arg)).unwrap());
                say("OK");
            }
            "ENSURE" => {
                b.ensure(arg.parse().unwrap());
                say("OK");
            }
            "FILL" => say(&b.fill()),
            "EXPECT" => {
                b.expect(arg.parse().unwrap());
                say("OK");
            }
            "FINISH" => {
                say(&b.finish());
                return;
            }
            other => panic!("unknown command {other:?}"),
        }
    }
    panic!("stdin closed before FINISH");
}
