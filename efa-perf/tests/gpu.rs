//! `--mem gpu` (the `cuda` feature): write_bw's and read_bw's buffers in GPU memory on
//! efa-sim's software GPU (libcuda.so.1 of efa-sim-gpu, two GPUs by default), one rail or
//! several, every transfer verified through the driver's copies; the other tests stay in
//! host memory and say so.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_efa-perf");

fn perf(shape: &str, args: &[&str]) -> Output {
    // The software device and GPU: on hardware these tests fail here, they do not skip.
    assert!(
        std::hint::black_box(efa_sim_select::SOFTWARE_DEVICE && efa_sim_select::SOFTWARE_GPU),
        "needs efa-sim and efa-sim-gpu"
    );
    Command::new(EXE)
        .args(args)
        .env("EFA_SIM_SHAPE", shape)
        .stdin(Stdio::null())
        .output()
        .expect("run efa-perf")
}

fn json_lines(o: &Output) -> Vec<Value> {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

#[test]
fn write_and_read_bw_over_two_rails_in_gpu_memory() {
    let args = [
        "local",
        "-d",
        "all",
        "--mem",
        "gpu",
        "--json",
        "-n",
        "20",
        "--min-size",
        "4K",
        "--max-size",
        "64K",
        "write_bw",
        "read_bw",
        "send_bw",
    ];
    let lines = json_lines(&perf("2nic", &args));
    let notes: Vec<&str> = lines
        .iter()
        .filter(|v| v["type"] == "note")
        .map(|v| v["message"].as_str().unwrap())
        .collect();
    for t in ["write_bw", "read_bw"] {
        let want = format!("{t}: this end's buffers in GPU memory: efa_0 on GPU ");
        assert!(notes.iter().any(|n| n.starts_with(&want)), "{notes:?}");
    }
    assert!(
        notes.contains(&"send_bw uses host memory: --mem gpu covers write_bw and read_bw"),
        "{notes:?}"
    );
    let results: Vec<&Value> = lines.iter().filter(|v| v["type"] == "result").collect();
    // write_bw and read_bw: 5 sizes each (4K .. 64K); send_bw: 4K and 8K (max_msg_sz).
    assert_eq!(results.len(), 12, "{lines:?}");
    for r in results {
        let gpu = r["test"] != "send_bw";
        assert_eq!(r["memory"], if gpu { "gpu" } else { "host" }, "{r}");
        assert_eq!(r["verified"], true, "{r}");
        let rails = r["rails"].as_array().unwrap();
        assert_eq!(rails.len(), 2, "{r}");
        let size = r["size"].as_u64().unwrap();
        let sum: u64 = rails.iter().map(|x| x["bytes"].as_u64().unwrap()).sum();
        assert!(rails.iter().all(|x| x["msgs"] == 20), "{r}");
        assert_eq!(
            (r["bytes"].as_u64(), sum),
            (Some(40 * size), 40 * size),
            "{r}"
        );
    }
}

#[test]
fn one_device_in_gpu_memory_and_the_table_says_so() {
    let o = perf(
        "2nic",
        &[
            "local", "--mem", "gpu", "-n", "10", "-s", "1M", "write_bw", "read_bw",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for t in ["write_bw", "read_bw"] {
        let head = format!(" {t}  SRD  1 QP  128 in flight per QP  1 per doorbell  GPU memory");
        assert!(out.contains(&head), "{out}");
    }
    let rows = out
        .lines()
        .filter(|l| l.trim_start().starts_with("1048576 "))
        .count();
    assert_eq!(rows, 2, "{out}");
}
