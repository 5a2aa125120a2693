//! A completion-channel event loop: one thread sleeps in the kernel until a CQ it
//! watches has completions, instead of spinning.
//!
//! ```text
//! cargo run --example event_loop
//! ```
//!
//! Two CQs (sends, receives) share one [`CompChannel`]. The loop thread arms both
//! ([`CompletionQueue::request_notify`]), then repeats: poll every CQ until empty, sleep on
//! the channel (with a timeout), and for the CQ that fired, re-arm it *before* polling
//! it again, so that a completion arriving between the poll and the sleep still wakes
//! it. Meanwhile the main thread sends `MESSAGES` SENDs in bursts, pausing between them
//! so that the loop really goes to sleep; the loop checks that every message arrived
//! whole and once (in whichever order: SRD does not order them), and counts how often it
//! woke up.
use std::time::Duration;

use efa::*;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const MESSAGES: u64 = 64;
const BURST: u64 = 8;
const MSG: u64 = 32;
const WAIT: Duration = Duration::from_secs(10);

fn main() {
    if let Err(e) = run() {
        eprintln!("event_loop: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    // Sized for the QPs on them: a's 256 + 256 and b's 256 sends; b's 256 receives.
    let send_cq = ctx.create_ext_cq_with_channel(&channel, CqOptions::new(1024))?;
    let recv_cq = ctx.create_ext_cq_with_channel(&channel, CqOptions::new(256))?;
    let cfg = QpConfig::srd();
    let a = pd.create_qp(&send_cq, &send_cq, &cfg)?.prepare(1, None)?;
    let b = pd.create_qp(&send_cq, &recv_cq, &cfg)?.prepare(2, None)?;
    let to_b = pd.connect(&b.endpoint())?;
    let inbox = pd.register(
        vec![0u8; (MSG * MESSAGES) as usize],
        AccessFlags::LOCAL_WRITE,
    )?;
    let mut src = pd.register(vec![0u8; (MSG * MESSAGES) as usize], AccessFlags::empty())?;
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i / MSG as usize) as u8 ^ 0x5a;
    }
    for chunk in 0..MESSAGES / 16 {
        let mut r = RecvBatch::<16>::new(&b);
        for i in chunk * 16..chunk * 16 + 16 {
            r.push(i, inbox.sge(i * MSG, MSG)?)?;
        }
        // SAFETY: a slot of `inbox` is read only after its receive completed.
        unsafe { b.post_recv(&r)? };
    }
    send_cq.request_notify()?;
    recv_cq.request_notify()?;

    std::thread::scope(|s| -> Res<()> {
        // The loop: sleeps until a CQ has completions.
        let looper = s.spawn(|| -> Res<(u64, u64)> {
            let (mut sent, mut received, mut wakeups) = (0u64, 0u64, 0u64);
            let mut got = ArrayVec::<Completion, 32>::new();
            let mut seen = [false; MESSAGES as usize];
            while sent < MESSAGES || received < MESSAGES {
                for cq in [&send_cq, &recv_cq] {
                    loop {
                        got.clear();
                        if cq.poll(&mut got)? == 0 {
                            break;
                        }
                        for c in &got {
                            c.result()?;
                            if c.opcode().is_recv() {
                                // SRD does not order messages and receives are taken in
                                // posting order: receive k holds whichever message came
                                // k-th. Each must be whole, and each arrive once.
                                let at = (c.wr_id() * MSG) as usize;
                                let slot = &inbox.as_slice()[at..at + MSG as usize];
                                let id = u64::from(slot[0] ^ 0x5a);
                                if id >= MESSAGES
                                    || seen[id as usize]
                                    || slot.iter().any(|&x| x != slot[0])
                                {
                                    return Err(format!(
                                        "receive {} holds no whole, new message",
                                        c.wr_id()
                                    )
                                    .into());
                                }
                                seen[id as usize] = true;
                                received += 1;
                            } else {
                                sent += 1;
                            }
                        }
                    }
                }
                if sent == MESSAGES && received == MESSAGES {
                    break;
                }
                let ev = channel
                    .wait(Some(WAIT))?
                    .ok_or("no completion event within the timeout")?;
                wakeups += 1;
                // Re-arm the CQ that fired before polling it: nothing can slip through.
                for cq in [&send_cq, &recv_cq] {
                    if ev.is_for(cq) {
                        cq.request_notify()?;
                    }
                }
            }
            Ok((received, wakeups))
        });
        // The sender: bursts with pauses, so that the loop sleeps in between.
        for burst in 0..MESSAGES / BURST {
            let mut batch = SendBatch::<{ BURST as usize }>::new(&a);
            for i in burst * BURST..(burst + 1) * BURST {
                batch.send(i, &to_b, src.sge(i * MSG, MSG)?)?;
            }
            // SAFETY: `src` is not written after this point.
            unsafe { a.post_send(&batch)? };
            std::thread::sleep(Duration::from_millis(20));
        }
        let (received, wakeups) = looper.join().map_err(|_| "the loop thread panicked")??;
        println!(
            "{received} messages received and verified by a thread that woke up {wakeups} times"
        );
        // The bursts are 20 ms apart: the loop has to sleep for each (at least once even
        // on a machine too busy to run it between bursts), and only the channel wakes it.
        if wakeups == 0 {
            return Err("the loop never slept on the channel".into());
        }
        Ok(())
    })
}
