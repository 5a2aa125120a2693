//! SRD ping-pong between two processes, their endpoint info exchanged over TCP.
//!
//! ```text
//! cargo run --example srd_pingpong                      # both ends: starts its own server
//! cargo run --example srd_pingpong -- server [ADDR]     # one end (default 0.0.0.0:18600)
//! cargo run --example srd_pingpong -- client HOST:PORT  # the other
//! ```
//!
//! Each side sends its 24-byte [`EndpointInfo`] over the TCP connection and makes a
//! [`Peer`] of the other's. The client then sends `ROUNDS` 64-byte SENDs (immediate =
//! round number); the server answers each with the same bytes; the client checks every
//! answer and prints the mean round trip. Every wait has a timeout.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use efa::*;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const ROUNDS: u32 = 1000;
const MSG: u64 = 64;
const QKEY: u32 = 0x5eed;
const WAIT: Duration = Duration::from_secs(10);

/// Swaps endpoint info with the other side: ours out, theirs in.
fn exchange(tcp: &mut TcpStream, ours: &EndpointInfo) -> Res<EndpointInfo> {
    tcp.set_read_timeout(Some(WAIT))?;
    tcp.write_all(&ours.to_bytes())?;
    let mut theirs = [0u8; EndpointInfo::WIRE_SIZE];
    tcp.read_exact(&mut theirs)?;
    Ok(EndpointInfo::parse(&theirs)?)
}

/// Posts the one receive, into `inbox`.
fn post_inbox<C>(qp: &Qp<C, Rts>, inbox: &Mr<C, Vec<u8>>) -> Res<()> {
    let mut r = RecvBatch::<1>::new(qp);
    r.push(0, inbox.sge(0, MSG)?)?;
    // SAFETY: the inbox is read only after this receive completes, and posted again
    // only after that read.
    unsafe { qp.post_recv(&r)? };
    Ok(())
}

fn run(tcp: &mut TcpStream, client: bool) -> Res<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_ext_cq(CqOptions::new(512).waitable())?;
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd())?
        .prepare(QKEY, None)?;
    let peer = pd.connect(&exchange(tcp, &qp.endpoint())?)?;
    let mut out = pd.register(vec![0u8; MSG as usize], AccessFlags::empty())?;
    let inbox = pd.register(vec![0u8; MSG as usize], AccessFlags::LOCAL_WRITE)?;
    post_inbox(&qp, &inbox)?;
    // Both ends posted their receive before this byte: no SEND can find none.
    tcp.write_all(b"R")?;
    tcp.read_exact(&mut [0u8; 1])?;
    let start = Instant::now();
    // Whether our last send is still in flight (its buffer must not be rewritten).
    let mut sending = false;
    for round in 0..ROUNDS {
        if client {
            for (i, b) in out.as_mut_slice().iter_mut().enumerate() {
                *b = (round as u8).wrapping_mul(7).wrapping_add(i as u8);
            }
        } else {
            // Ping `round`, and our previous answer's completion, in either order.
            let mut ping = false;
            while !ping || sending {
                let c = *cq.wait(WAIT)?.result()?;
                if !c.opcode().is_recv() {
                    sending = false;
                } else if c.imm() == Some(round) {
                    ping = true;
                } else {
                    return Err(format!("round {round}: ping {:?}", c.imm()).into());
                }
            }
            out.as_mut_slice().copy_from_slice(inbox.as_slice());
            post_inbox(&qp, &inbox)?;
        }
        let mut s = SendBatch::<1>::new(&qp);
        s.send_imm(round as u64, &peer, out.sge(0, MSG)?, round)?;
        // SAFETY: `out` is rewritten only after this send's completion was polled.
        unsafe { qp.post_send(&s)? };
        sending = true;
        if client {
            // The answer and our own send's completion, in either order.
            let mut got = ArrayVec::<Completion, 2>::new();
            cq.poll_until(&mut got, 2, WAIT)?;
            for c in &got {
                c.result()?;
            }
            sending = false;
            if inbox.as_slice() != out.as_slice() {
                return Err(format!("round {round}: the answer differs from the ping").into());
            }
            post_inbox(&qp, &inbox)?;
        }
    }
    if sending {
        cq.wait(WAIT)?.result()?;
    }
    if client {
        let us = start.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
        println!("{ROUNDS} round trips of {MSG} bytes verified, {us:.1} us each on average");
    }
    Ok(())
}

fn serve(addr: &str, announce: bool) -> Res<()> {
    let listener = TcpListener::bind(addr)?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let (mut tcp, _) = listener.accept()?;
    run(&mut tcp, false)?;
    if !announce {
        println!("served {ROUNDS} rounds");
    }
    Ok(())
}

/// Both ends: this program again as the server (a child process), then the client.
fn both() -> Res<()> {
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["server", "127.0.0.1:0", "--announce"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or("the server did not start")?;
    let result = TcpStream::connect(addr)
        .map_err(Into::into)
        .and_then(|mut tcp| run(&mut tcp, true));
    if result.is_err() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    result?;
    if !status.success() {
        return Err(format!("the server process failed: {status}").into());
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => both(),
        ["server"] => serve("0.0.0.0:18600", false),
        ["server", addr] => serve(addr, false),
        ["server", addr, "--announce"] => serve(addr, true),
        ["client", addr] => TcpStream::connect(addr)
            .map_err(Into::into)
            .and_then(|mut tcp| run(&mut tcp, true)),
        _ => Err("usage: srd_pingpong [server [ADDR] | client HOST:PORT]".into()),
    };
    if let Err(e) = r {
        eprintln!("srd_pingpong: {e}");
        std::process::exit(1);
    }
}
