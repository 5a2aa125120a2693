//! The control connection between client and server: one JSON object per line over
//! TCP, every read and write bounded by the run's timeout. It carries the version
//! handshake, the set-up (endpoint info and remote buffer descriptors, 24 bytes each,
//! as hex), and the start, end and verdict of every size.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Version of the control protocol; both ends must speak the same.
pub const PROTOCOL: u64 = 2;
/// What every hello starts with.
pub const MAGIC: &str = "efa-perf";
/// Longest line accepted from a peer.
pub const MAX_LINE: usize = 1 << 20;

/// Why a peer's bytes are not a valid control message. Every check on what a peer sends
/// ends in one of these (as the one-line error of the run), never in a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// More than [`MAX_LINE`] bytes without a newline.
    Oversized,
    /// A line that is not one JSON value: its first bytes.
    NotJson(String),
    /// Field `key` is missing or not of the type `want`.
    Field {
        /// The field.
        key: String,
        /// What it should be: "number", "string", "hex".
        want: &'static str,
    },
    /// Field `key` is a number outside `min..=max`.
    OutOfRange {
        /// The field.
        key: String,
        /// What was sent.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A test this end does not know.
    UnknownTest(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Oversized => write!(f, "an oversized message (over {MAX_LINE} bytes)"),
            WireError::NotJson(start) => write!(f, "unexpected bytes {start:?}"),
            WireError::Field { key, want } => write!(f, "no {want} {key:?}"),
            WireError::OutOfRange {
                key,
                value,
                min,
                max,
            } => {
                write!(f, "{key:?} is {value}, outside {min}..={max}")
            }
            WireError::UnknownTest(name) => write!(f, "unknown test {name:?}"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<WireError> for String {
    fn from(e: WireError) -> String {
        format!("malformed control message: {e}")
    }
}

/// Takes the first complete line out of `buf` and decodes it: `Ok(None)` while no
/// newline has arrived (and `buf` is within [`MAX_LINE`]).
pub fn decode_line(buf: &mut Vec<u8>) -> Result<Option<Value>, WireError> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE {
            return Err(WireError::Oversized);
        }
        return Ok(None);
    };
    let line: Vec<u8> = buf.drain(..=end).collect();
    serde_json::from_slice(&line[..end])
        .map(Some)
        .map_err(|_| WireError::NotJson(String::from_utf8_lossy(&line[..end.min(40)]).into_owned()))
}

/// `v` as one line of the protocol (what [`Ctl::send`] writes).
pub fn encode_line(v: &Value) -> Vec<u8> {
    let mut line = v.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// One end of the control connection.
pub struct Ctl {
    stream: TcpStream,
    buf: Vec<u8>,
    timeout: Duration,
    /// `HOST:PORT` of the other end, for messages.
    pub peer: String,
}

/// `HOST[:PORT]` with `default` when no port is given (IPv6 literals in brackets).
pub fn with_port(host: &str, default: u16) -> String {
    let bare_v6 = host.matches(':').count() > 1 && !host.starts_with('[');
    if bare_v6 {
        return format!("[{host}]:{default}");
    }
    match host.rsplit_once(':') {
        Some((_, p)) if !p.is_empty() && !host.ends_with(']') => host.to_string(),
        _ => format!("{host}:{default}"),
    }
}

impl Ctl {
    /// Connects to `addr` (`HOST:PORT`), trying each address it resolves to, each for at
    /// most `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Ctl, String> {
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {addr}: {e}"))?
            .collect();
        let mut last = format!("cannot resolve {addr}: no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => return Ctl::new(s, addr.to_string(), timeout),
                Err(e) if e.kind() == ErrorKind::TimedOut => {
                    last = format!(
                        "cannot connect to {addr}: no answer within {} s (host unreachable or port filtered)",
                        timeout.as_secs_f64()
                    )
                }
                Err(e) => last = format!("cannot connect to {addr}: {e}"),
            }
        }
        Err(last)
    }

    /// Wraps an accepted connection.
    pub fn new(stream: TcpStream, peer: String, timeout: Duration) -> Result<Ctl, String> {
        stream
            .set_write_timeout(Some(timeout))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| format!("control connection to {peer}: {e}"))?;
        Ok(Ctl {
            stream,
            buf: Vec::new(),
            timeout,
            peer,
        })
    }

    /// The run's timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one message.
    pub fn send(&mut self, v: &Value) -> Result<(), String> {
        self.stream
            .write_all(&encode_line(v))
            .map_err(|e| format!("lost the control connection to {}: {e}", self.peer))
    }

    /// Sends `{"error": msg}` (best effort: the run is failing anyway).
    pub fn send_error(&mut self, msg: &str) {
        let _ = self.send(&json!({ "error": msg }));
    }

    fn take_line(&mut self) -> Result<Option<Value>, String> {
        decode_line(&mut self.buf).map_err(|e| match e {
            WireError::Oversized => format!("{} sent {e}", self.peer),
            e => format!("{} does not speak efa-perf's protocol ({e})", self.peer),
        })
    }

    fn fill(&mut self) -> Result<usize, std::io::Error> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Waits up to the timeout for the next message.
    pub fn recv(&mut self) -> Result<Value, String> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(v) = self.take_line()? {
                return Ok(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no message from {} within {} s",
                    self.peer,
                    self.timeout.as_secs_f64()
                ));
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            match self.fill() {
                Ok(0) => return Err(format!("{} closed the control connection", self.peer)),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("lost the control connection to {}: {e}", self.peer)),
            }
        }
    }

    /// The next message if one has arrived, without waiting.
    pub fn try_recv(&mut self) -> Result<Option<Value>, String> {
        if let Some(v) = self.take_line()? {
            return Ok(Some(v));
        }
        self.stream
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let r = self.fill();
        self.stream
            .set_nonblocking(false)
            .map_err(|e| e.to_string())?;
        match r {
            Ok(0) => Err(format!("{} closed the control connection", self.peer)),
            Ok(_) => self.take_line(),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            Err(e) => Err(format!("lost the control connection to {}: {e}", self.peer)),
        }
    }

    /// Waits for a message, failing on the peer's `{"error": ...}` (named `who`) and on
    /// heartbeats (skipped).
    pub fn expect(&mut self, who: &str) -> Result<Value, String> {
        loop {
            let v = self.recv()?;
            if let Some(e) = v.get("error").and_then(Value::as_str) {
                return Err(format!("{who}: {e}"));
            }
            if v.get("beat").is_none() {
                return Ok(v);
            }
        }
    }
}

/// This end's hello.
pub fn hello(extra: Value) -> Value {
    let mut v = json!({
        "hello": MAGIC,
        "protocol": PROTOCOL,
        "version": env!("CARGO_PKG_VERSION"),
    });
    if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
        m.extend(e);
    }
    v
}

/// Checks a peer's hello: ours, same protocol.
pub fn check_hello(v: &Value, peer: &str) -> Result<(), String> {
    if v.get("hello").and_then(Value::as_str) != Some(MAGIC) {
        return Err(format!(
            "{peer} is not an efa-perf peer (no efa-perf hello)"
        ));
    }
    let protocol = v.get("protocol").and_then(Value::as_u64).unwrap_or(0);
    if protocol != PROTOCOL {
        let version = v
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        return Err(format!(
            "{peer} runs efa-perf {version} (protocol {protocol}), this is efa-perf {} (protocol {PROTOCOL}): run the same version on both ends",
            env!("CARGO_PKG_VERSION")
        ));
    }
    Ok(())
}

/// A 24-byte wire value as hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex back to bytes, or `None` if malformed.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    // Hex digits only: from_str_radix alone would also take a sign ("+a").
    if s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn field(key: &str, want: &'static str) -> WireError {
    WireError::Field {
        key: key.to_string(),
        want,
    }
}

/// Field `key` of a message as a u64 (a non-negative integer), or an error naming it.
pub fn u64_of(v: &Value, key: &str) -> Result<u64, WireError> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| field(key, "number"))
}

/// Field `key` as a u64 within `min..=max`, or an error naming both.
pub fn u64_in(v: &Value, key: &str, min: u64, max: u64) -> Result<u64, WireError> {
    let value = u64_of(v, key)?;
    if (min..=max).contains(&value) {
        return Ok(value);
    }
    Err(WireError::OutOfRange {
        key: key.to_string(),
        value,
        min,
        max,
    })
}

/// Field `key` of a message as a string, or an error naming it.
pub fn str_of<'a>(v: &'a Value, key: &str) -> Result<&'a str, WireError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| field(key, "string"))
}

/// Field `key` as hex bytes.
pub fn bytes_of(v: &Value, key: &str) -> Result<Vec<u8>, WireError> {
    unhex(str_of(v, key)?).ok_or_else(|| field(key, "hex string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_get_the_default_port() {
        assert_eq!(with_port("10.0.0.1", 18515), "10.0.0.1:18515");
        assert_eq!(with_port("10.0.0.1:7", 18515), "10.0.0.1:7");
        assert_eq!(with_port("host", 1), "host:1");
        assert_eq!(with_port("::1", 9), "[::1]:9");
        assert_eq!(with_port("[::1]", 9), "[::1]:9");
        assert_eq!(with_port("[::1]:5", 9), "[::1]:5");
    }

    #[test]
    fn hellos_and_hex() {
        let h = hello(json!({"device": "efa_0"}));
        assert_eq!(h["device"], "efa_0");
        assert!(check_hello(&h, "p").is_ok());
        let mut old = h.clone();
        old["protocol"] = json!(PROTOCOL + 1);
        old["version"] = json!("9.9.9");
        let e = check_hello(&old, "peer").unwrap_err();
        assert!(e.contains("runs efa-perf 9.9.9 (protocol 3)"), "{e}");
        assert!(check_hello(&json!({"x": 1}), "p")
            .unwrap_err()
            .contains("not an efa-perf"));
        assert_eq!(
            unhex(&hex(&[0, 1, 0xab, 0xff])),
            Some(vec![0, 1, 0xab, 0xff])
        );
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("+a"), None);
    }
}
