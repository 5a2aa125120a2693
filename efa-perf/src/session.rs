//! The two ends of a run over the control connection: the client plans each test
//! (capabilities of both devices, sizes within both limits), sets it up with the server
//! (endpoints and remote buffers), and runs its sizes; the server answers.

use std::io::Write as _;
use std::net::TcpListener;

use serde_json::{json, Value};

use crate::cli::{RunOpts, ServerOpts, Sizes};
use crate::gpu::Memory;
use crate::output::{Output, TestInfo};
use crate::poll::{Amount, At};
use crate::res::{Device, Res, Setup};
use crate::test::{cap_name, Test};
use crate::wire::{self, Ctl};
use crate::{bw, lat, rails, stats};

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
    /// Devices on each end: `devs.len()` for bandwidth tests, 1 for latency tests.
    rails: usize,
}

/// The device a hello (or one of its `rails`) names.
fn device_of(p: &Value) -> &str {
    p.get("device").and_then(Value::as_str).unwrap_or("?")
}

/// The server's device of each rail (its hello's `rails`, or its one device).
fn peer_names(peer: &Value) -> Vec<String> {
    let each = rails::peer_rails(peer).into_iter();
    each.map(|p| device_of(p).to_string()).collect()
}

/// Decides whether and at which sizes `test` runs between `devs` and the server, and
/// over how many rails.
fn plan(
    test: Test,
    opts: &RunOpts,
    devs: &[Device],
    peer: &Value,
    out: &mut Output,
) -> Result<Option<Plan>, String> {
    let rails = if test.is_latency() { 1 } else { devs.len() };
    if rails < devs.len() {
        let msg = format!(
            "{} runs on {} only: latency tests use one device",
            test.name(),
            devs[0].name
        );
        out.note(Some(test), &msg);
    }
    let (mine, theirs) = (&devs[..rails], rails::peer_rails(peer));
    if theirs.len() < rails {
        return Err(format!(
            "{} over {rails} rails: the server has {} device(s) ({}); start it with -d all or a list of {rails}",
            test.name(),
            theirs.len(),
            peer_names(peer).join(", ")
        ));
    }
    let theirs = &theirs[..rails];
    if let Some(cap) = test.needs() {
        let key = if cap == efa::DeviceCaps::RDMA_WRITE {
            "rdma_write"
        } else {
            "rdma_read"
        };
        let has = |p: &Value| p.get(key).and_then(Value::as_bool).unwrap_or(false);
        let missing = match mine.iter().find(|d| !d.caps.contains(cap)) {
            Some(me) => Some(format!("{} (this end) has no {}", me.name, cap_name(cap))),
            None => theirs
                .iter()
                .find(|p| !has(p))
                .map(|p| format!("the server's {} has no {}", device_of(p), cap_name(cap))),
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
    let (key, what) = if test.uses_send() {
        ("max_msg", "max_msg_sz")
    } else {
        ("max_rdma", "max_rdma_size")
    };
    let mut limit = u32::MAX;
    for d in mine {
        limit = limit.min(if test.uses_send() {
            d.max_msg
        } else {
            d.max_rdma
        });
    }
    for p in theirs {
        let l = peer_limit(p, key).map_err(|e| format!("the server's hello: {e}"))?;
        limit = limit.min(l);
    }
    let limit = limit as usize;
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
    Ok(Some(Plan { test, sizes, rails }))
}

/// Runs every test of `opts` on `devs` (one, or one per rail) against the server at
/// `addr` (`HOST:PORT`).
pub fn run_client(
    addr: &str,
    opts: &RunOpts,
    out: &mut Output,
    devs: Vec<Device>,
) -> Result<(), String> {
    if devs.is_empty() {
        return Err("no device to run on".into());
    }
    let mut ctl = Ctl::connect(addr, opts.common.timeout)?;
    ctl.send(&wire::hello(rails::hello_json(&devs)))?;
    let peer = ctl.recv()?;
    if let Some(e) = peer.get("error").and_then(Value::as_str) {
        return Err(format!("server: {e}"));
    }
    wire::check_hello(&peer, &format!("the server at {addr}"))?;
    out.device(&devs, Some(&peer));
    let mut plans = Vec::new();
    for &t in &opts.tests {
        if let Some(p) = plan(t, opts, &devs, &peer, out)? {
            plans.push(p);
        }
    }
    for (i, p) in plans.iter().enumerate() {
        // Stdout closed (the reader went away): nothing more to show, say goodbye.
        if out.closed() {
            break;
        }
        let ends = Ends {
            devs: &devs[..p.rails],
            peers: &peer_names(&peer),
        };
        run_test(&mut ctl, &ends, p, opts, out, (i, plans.len()))?;
    }
    ctl.send(&json!({ "bye": true }))?;
    ctl.expect("server")?;
    out.finish();
    Ok(())
}

/// The devices of a test's rails: this end's, and the server's names.
struct Ends<'a> {
    devs: &'a [Device],
    peers: &'a [String],
}

fn run_test(
    ctl: &mut Ctl,
    ends: &Ends<'_>,
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
        rails: plan.rails as u32,
    };
    let mem = opts.common.mem;
    let mut rails = Vec::with_capacity(plan.rails);
    for dev in ends.devs {
        rails.push(Res::new(dev, &setup, false, mem)?);
    }
    if mem.gpu_for(test) {
        let each: Vec<String> = rails
            .iter()
            .zip(ends.devs)
            .filter_map(|(r, d)| Some(format!("{} on GPU {}", d.name, r.gpu.as_ref()?.ordinal())))
            .collect();
        let msg = format!(
            "{}: this end's buffers in GPU memory: {}",
            test.name(),
            each.join(", ")
        );
        out.note(Some(test), &msg);
    } else if mem == Memory::Gpu {
        let msg = format!(
            "{} uses host memory: --mem gpu covers write_bw and read_bw",
            test.name()
        );
        out.note(Some(test), &msg);
    }
    ctl.send(&setup.to_json())?;
    rails::connect(&mut rails, &ctl.expect("server")?)?;
    ctl.send(&rails::res_json(&rails))?;
    ctl.expect("server")?;
    let info = TestInfo {
        test,
        qps: setup.qps,
        depth: setup.depth,
        batch: opts.batch,
        rails: plan.rails,
        memory: if mem.gpu_for(test) {
            Memory::Gpu
        } else {
            Memory::Host
        },
    };
    let amount = match opts.duration {
        Some(d) => Amount::Duration(d),
        None => Amount::Count(opts.iters.unwrap_or(test.default_iters())),
    };
    // The smallest of every rail's QPs (rails of different devices may differ).
    let qp_inline = rails.iter().map(|r| r.qps[0].caps().max_inline_data).min();
    let qp_inline = qp_inline.unwrap_or(0);
    let inline_max = opts.inline.unwrap_or(qp_inline).min(qp_inline) as usize;
    let max_wr = rails.iter().map(|r| r.qps[0].limits().max_send_wr()).min();
    let depth = opts.depth.min(max_wr.unwrap_or(1));
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
            let res = &mut rails[0];
            res.zero_target().map_err(|e| at.err(e))?;
            let timeout = opts.common.timeout;
            let tick = || out.progress(nth, test, (k, n_sizes), size);
            let (rtts, sent) = lat::client(res, at, amount, inline_max, timeout, tick)?;
            ctl.send(&json!({ "done": sent }))?;
            ctl.expect("server")?;
            stats::latency(size, rtts)
        } else {
            for res in rails.iter_mut() {
                bw::prepare_client(res, at)?;
            }
            let tick = || out.progress(nth, test, (k, n_sizes), size);
            let (counts, elapsed) = bw::client(&mut rails, at, amount, &stream, ctl, tick)?;
            ctl.send(&rails::done_json(&counts))?;
            ctl.expect("server")?;
            let total = counts.iter().sum();
            let mut row = stats::bandwidth(size, total, elapsed);
            if plan.rails > 1 {
                let names = ends.devs.iter().map(|d| d.name.as_str());
                let per = names.zip(ends.peers).zip(&counts);
                row.rails = per
                    .map(|((dev, peer), &n)| stats::rail(dev, peer, size, n, elapsed))
                    .collect();
            }
            row
        };
        out.row(&info, row);
        if out.closed() {
            break;
        }
    }
    out.end_test(&info);
    Ok(())
}

/// Listens on `devs` (one, or one per rail), and serves one client (or, with
/// `--forever`, one client after another).
pub fn run_server(opts: &ServerOpts, devs: Vec<Device>) -> Result<(), String> {
    if devs.is_empty() {
        return Err("no device to serve on".into());
    }
    let listener = TcpListener::bind((opts.bind.as_str(), opts.port))
        .map_err(|e| format!("cannot listen on {}:{}: {e}", opts.bind, opts.port))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut text = String::new();
    if !opts.announce {
        text = format!("{}\n", rails::banner(&devs));
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
            .and_then(|mut ctl| serve(&mut ctl, &devs, opts.common.mem));
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

fn serve(ctl: &mut Ctl, devs: &[Device], mem: Memory) -> Result<(), String> {
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
    ctl.send(&wire::hello(rails::hello_json(devs)))?;
    let mut next = ctl.expect("client")?;
    loop {
        if next.get("bye").is_some() {
            return ctl.send(&json!({ "bye": true }));
        }
        if next.get("setup").is_none() {
            return tell(ctl, Err(format!("unexpected control message {next}")));
        }
        next = serve_test(ctl, devs, mem, &next)?;
    }
}

/// Serves one test on the first `rails` of `devs`, its RDMA buffers in `mem`; returns the
/// first message that is not one of its sizes.
fn serve_test(ctl: &mut Ctl, devs: &[Device], mem: Memory, v: &Value) -> Result<Value, String> {
    let s = tell(ctl, Setup::from_json(v).map_err(String::from))?;
    let n = s.rails as usize;
    if n > devs.len() {
        let e = format!(
            "the client asks for {n} rails, this server has {} device(s) ({}): start it with -d all or a list of {n}",
            devs.len(),
            rails::names(devs, ", ")
        );
        return tell(ctl, Err(e));
    }
    let mut rails = Vec::with_capacity(n);
    for dev in &devs[..n] {
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
        rails.push(tell(ctl, Res::new(dev, &s, true, mem))?);
    }
    ctl.send(&rails::res_json(&rails))?;
    let peer = ctl.expect("client")?;
    tell(ctl, rails::connect(&mut rails, &peer))?;
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
            rails[0].zero_target().map_err(|e| at.err(e))
        } else {
            rails.iter_mut().try_for_each(|r| bw::prepare_server(r, at))
        };
        tell(ctl, prepared)?;
        ctl.send(&json!({ "go": true }))?;
        let r = if s.test.is_latency() {
            lat::server(&mut rails[0], at, ctl)
        } else {
            bw::server(&mut rails, at, ctl)
        };
        tell(ctl, r)?;
        ctl.send(&json!({ "ok": true }))?;
    }
}
