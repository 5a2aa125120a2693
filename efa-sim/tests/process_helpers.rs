//! Helpers for the tests that run children (included with `#[path]`; as a test target of
//! its own it contains no tests): checksummed messages, and a child process that is this
//! test binary re-executed with `--ignored --exact child_entry` and `EFA_SIM_CHILD_ROLE`
//! set, talking over stdout lines and stdin.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const MSG: usize = 64;

pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Message `seq`: seq (8 bytes) + 48 pattern bytes + FNV checksum of the first 56.
pub fn message(seq: u64) -> [u8; MSG] {
    let mut m = [0u8; MSG];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in m[8..56].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(13).wrapping_add(i as u8);
    }
    let c = fnv(&m[..56]);
    m[56..].copy_from_slice(&c.to_le_bytes());
    m
}

pub fn env_u64(k: &str) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{k} missing"))
}

pub struct Kid {
    pub child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Kid {
    pub fn spawn(role: &str, env: &[(&str, String)], netns: Option<&str>) -> Kid {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        cmd.args([
            "--ignored",
            "--exact",
            "child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EFA_SIM_CHILD_ROLE", role)
        .env_remove("EFA_SIM_FAULTS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn child");
        let out = BufReader::new(child.stdout.take().unwrap());
        Kid { child, out }
    }

    /// Next stdout line starting with `prefix` (other lines are harness noise).
    pub fn line(&mut self, prefix: &str) -> String {
        let mut l = String::new();
        loop {
            l.clear();
            let n = self.out.read_line(&mut l).unwrap();
            assert!(n > 0, "child exited before printing {prefix}");
            // The harness may print "test child_entry ... " before our line.
            if let Some(at) = l.find(&format!("{prefix} ")) {
                return l[at + prefix.len()..].trim().to_string();
            }
        }
    }

    pub fn say(&mut self, s: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{s}").unwrap();
        stdin.flush().unwrap();
    }

    pub fn wait(mut self, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "child failed: {st}");
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("child did not finish within {secs} s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn field(s: &str, key: &str) -> u64 {
    s.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in `{s}`"))
}
