//! The two ends of a run over the control connection: the client plans each test
//! (capabilities of both devices, sizes within both limits), sets it up with the server
//! (endpoints and remote buffers), and runs its sizes; the server answers.

use std::io::Write as _;
use std::net::TcpListener;

use serde_json::{json, Value};

use crate::cli::{RunOpts, ServerOpts, Sizes};
use crate::output::{Output, TestInfo};
use crate::poll::{Amount, At};
use crate::res::{Device, Res, Setup};
use crate::test::{cap_name, Test};
use crate::wire::{self, Ctl};
use crate::{bw, lat, stats};

/// The message count of a `{"done": n}`.
pub fn done_count(v: &Value) -> Result<u64, String> {
    Ok(wire::u64_of(v, "done")?)
}

/// The peer's limit `key` (a u32 of its device; 0 when it does not say), or an error for
/// a number no device has (not truncated to 32 bits).
pub fn peer_limit(peer: &Value, key: &str) -> Result<u32, wire::WireError> {
    if peer.get(key).is_none() {
        return Ok(0);
    }
    let n = wire::u64_in(peer, key, 0, u64::from(u32::MAX))?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// One test as the client will run it.
struct Plan {
    test: Test,
    sizes: Vec<usize>,
}

/// Decides whether and at which sizes `test` runs between `me` and the server.
fn plan(
    test: Test,
    opts: &RunOpts,
    me: &Device,
    peer: &Value,
    out: &mut Output,
) -> Result<Option<Plan>, String> {
    if let Some(cap) = test.needs() {
        let key = if cap == efa::DeviceCaps::RDMA_WRITE {
            "rdma_write"
        } else {
            "rdma_read"
        };
        let theirs = peer.get(key).and_then(Value::as_bool).unwrap_or(false);
        let peer_dev = peer.get("device").and_then(Value::as_str).unwrap_or("?");
        let missing = if !me.caps.contains(cap) {
            Some(format!("{} (this end) has no {}", me.name, cap_name(cap)))
        } else if !theirs {
            Some(format!("the server's {peer_dev} has no {}", cap_name(cap)))
        } else {
            None
        };
        if let Some(m) = missing {
            let msg = format!("{m}: {} needs it on both ends", test.name());
            if opts.tests_named {
                return Err(msg);
            }
            out.note(Some(test), &format!("{msg}; skipped"));
            return Ok(None);
        }
    }
    let (mine, key, what) = if test.uses_send() {
        (me.max_msg, "max_msg", "max_msg_sz")
    } else {
        (me.max_rdma, "max_rdma", "max_rdma_size")
    };
    let theirs = peer_limit(peer, key).map_err(|e| format!("the server's hello: {e}"))?;
    let limit = mine.min(theirs) as usize;
    let (sizes, over): (Vec<usize>, Vec<usize>) =
        opts.sizes.list().into_iter().partition(|&s| s <= limit);
    if let (Sizes::One(s), false) = (opts.sizes, over.is_empty()) {
        let msg = format!(
            "-s {s} exceeds the {what} of {limit} B: {} cannot move it",
            test.name()
        );
        if opts.tests_named {
            return Err(msg);
        }
        out.note(Some(test), &format!("{msg}; skipped"));
        return Ok(None);
    }
    if !over.is_empty() {
        out.note(
            Some(test),
            &format!("{}: sizes above {limit} B ({what}) skipped", test.name()),
        );
    }
    if sizes.is_empty() {
        return Ok(None);
    }
    Ok(Some(Plan { test, sizes }))
}

/// Runs every test of `opts` on `dev` against the server at `addr` (`HOST:PORT`).
pub fn run_client(addr: &str, opts: &RunOpts, out: &mut Output, dev: Device) -> Result<(), String> {
    let mut ctl = Ctl::connect(addr, opts.common.timeout)?;
    ctl.send(&wire::hello(dev.to_json()))?;
    let peer = ctl.recv()?;
    if let Some(e) = peer.get("error").and_then(Value::as_str) {
        return Err(format!("server: {e}"));
    }
    wire::check_hello(&peer, &format!("the server at {addr}"))?;
    out.device(&dev, Some(&peer));
    let mut plans = Vec::new();
    for &t in &opts.tests {
        if let Some(p) = plan(t, opts, &dev, &peer, out)? {
            plans.push(p);
        }
    }
    for (i, p) in plans.iter().enumerate() {
        // Stdout closed (the reader went away): nothing more to show, say goodbye.
        if out.closed() {
            break;
        }
        run_test(&mut ctl, &dev, p, opts, out, (i, plans.len()))?;
    }
    ctl.send(&json!({ "bye": true }))?;
    ctl.expect("server")?;
    out.finish();
    Ok(())
}

fn run_test(
    ctl: &mut Ctl,
    dev: &Device,
    plan: &Plan,
    opts: &RunOpts,
    out: &mut Output,
    nth: (usize, usize),
) -> Result<(), String> {
    let test = plan.test;
    let setup = Setup {
        test,
        qps: if test.is_latency() { 1 } else { opts.qps },
        depth: opts.depth,
        max_size: *plan.sizes.last().expect("a planned test has sizes"),
    };
    let mut res = Res::new(dev, &setup, false)?;
    ctl.send(&setup.to_json())?;
    res.connect(&ctl.expect("server")?)?;
    ctl.send(&res.to_json())?;
    ctl.expect("server")?;
    let info = TestInfo {
        test,
        qps: setup.qps,
        depth: setup.depth,
        batch: opts.batch,
    };
    let amount = match opts.duration {
        Some(d) => Amount::Duration(d),
        None => Amount::Count(opts.iters.unwrap_or(test.default_iters())),
    };
    let qp_inline = res.qps[0].caps().max_inline_data;
    let inline_max = opts.inline.unwrap_or(qp_inline).min(qp_inline) as usize;
    let depth = opts.depth.min(res.qps[0].limits().max_send_wr());
    let stream = bw::Stream {
        batch: opts.batch.min(depth),
        depth,
        inline_max,
        timeout: opts.common.timeout,
    };
    for (k, &size) in plan.sizes.iter().enumerate() {
        let at = At { test, size };
        out.progress(nth, test, (k, plan.sizes.len()), size);
        ctl.send(&json!({ "size": size }))?;
        ctl.expect("server")?;
        let n_sizes = plan.sizes.len();
        let row = if test.is_latency() {
            res.zero_target().map_err(|e| at.err(e))?;
            let timeout = opts.common.timeout;
            let tick = || out.progress(nth, test, (k, n_sizes), size);
            let (rtts, sent) = lat::client(&mut res, at, amount, inline_max, timeout, tick)?;
            ctl.send(&json!({ "done": sent }))?;
            ctl.expect("server")?;
            stats::latency(size, rtts)
        } else {
            bw::prepare_client(&mut res, at);
            let tick = || out.progress(nth, test, (k, n_sizes), size);
            let (n, elapsed) = bw::client(&mut res, at, amount, &stream, ctl, tick)?;
            ctl.send(&json!({ "done": n }))?;
            ctl.expect("server")?;
            stats::bandwidth(size, n, elapsed)
        };
        out.row(&info, row);
        if out.closed() {
            break;
        }
    }
    out.end_test(&info);
    Ok(())
}

/// Listens, and serves one client (or, with `--forever`, one client after another).
pub fn run_server(opts: &ServerOpts) -> Result<(), String> {
    let dev = Device::open(opts.common.device.as_deref(), opts.common.backend)?;
    let listener = TcpListener::bind((opts.bind.as_str(), opts.port))
        .map_err(|e| format!("cannot listen on {}:{}: {e}", opts.bind, opts.port))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut text = String::new();
    if !opts.announce {
        text = format!("{}\n", dev.banner());
    }
    text += &format!("listening on {addr}\n");
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // Nobody reads the address any more (`efa-perf server | true`): stop quietly.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(format!("cannot write to stdout: {e}")),
        Ok(()) => {}
    }
    drop(stdout);
    loop {
        let (stream, peer) = listener
            .accept()
            .map_err(|e| format!("accepting a client on {addr}: {e}"))?;
        let result = Ctl::new(stream, peer.to_string(), opts.common.timeout)
            .and_then(|mut ctl| serve(&mut ctl, &dev));
        match result {
            Ok(()) if !opts.forever => return Ok(()),
            Err(e) if !opts.forever => return Err(format!("client {peer}: {e}")),
            Ok(()) => {}
            Err(e) => crate::say(&format!("client {peer}: {e}")),
        }
    }
}

/// Sends an error to the client too, so that its one line says what failed here.
fn tell<T>(ctl: &mut Ctl, r: Result<T, String>) -> Result<T, String> {
    if let Err(e) = &r {
        ctl.send_error(e);
    }
    r
}

fn serve(ctl: &mut Ctl, dev: &Device) -> Result<(), String> {
    let hello = ctl.recv()?;
    if let Err(e) = wire::check_hello(&hello, &format!("client {}", ctl.peer)) {
        let theirs = hello
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        let proto = hello.get("protocol").and_then(Value::as_u64).unwrap_or(0);
        ctl.send_error(&format!(
            "the server runs efa-perf {} (protocol {}), this client {theirs} (protocol {proto}): run the same version on both ends",
            env!("CARGO_PKG_VERSION"),
            wire::PROTOCOL
        ));
        return Err(e);
    }
    ctl.send(&wire::hello(dev.to_json()))?;
    let mut next = ctl.expect("client")?;
    loop {
        if next.get("bye").is_some() {
            return ctl.send(&json!({ "bye": true }));
        }
        if next.get("setup").is_none() {
            return tell(ctl, Err(format!("unexpected control message {next}")));
        }
        next = serve_test(ctl, dev, &next)?;
    }
}

/// Serves one test; returns the first message that is not one of its sizes.
fn serve_test(ctl: &mut Ctl, dev: &Device, v: &Value) -> Result<Value, String> {
    let s = tell(ctl, Setup::from_json(v).map_err(String::from))?;
    tell(ctl, s.check_limits(&dev.name, dev.max_msg, dev.max_rdma))?;
    if let Some(cap) = s.test.needs() {
        if !dev.caps.contains(cap) {
            let e = format!(
                "{} has no {}: {} needs it",
                dev.name,
                cap_name(cap),
                s.test.name()
            );
            return tell(ctl, Err(e));
        }
    }
    let mut res = tell(ctl, Res::new(dev, &s, true))?;
    ctl.send(&res.to_json())?;
    let peer = ctl.expect("client")?;
    tell(ctl, res.connect(&peer))?;
    ctl.send(&json!({ "connected": true }))?;
    loop {
        let v = ctl.expect("client")?;
        let Some(size) = v.get("size").and_then(Value::as_u64) else {
            return Ok(v);
        };
        if size == 0 || size > s.max_size as u64 {
            let e = format!("size {size} outside the set-up's 1..={}", s.max_size);
            return tell(ctl, Err(e));
        }
        let at = At {
            test: s.test,
            // At most max_size, a usize: exact.
            size: size as usize,
        };
        let prepared = if s.test.is_latency() {
            res.zero_target().map_err(|e| at.err(e))
        } else {
            bw::prepare_server(&mut res, at)
        };
        tell(ctl, prepared)?;
        ctl.send(&json!({ "go": true }))?;
        let r = if s.test.is_latency() {
            lat::server(&mut res, at, ctl)
        } else {
            bw::server(&mut res, at, ctl)
        };
        tell(ctl, r)?;
        ctl.send(&json!({ "ok": true }))?;
    }
}
