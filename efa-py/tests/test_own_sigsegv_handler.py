"""A program that installs its own SIGSEGV handler (Python's faulthandler, as crash
reporters and runtimes do) runs the direct data path to completion on efa-sim (issue 38):
efa-sim's doorbells need no signal unless its opt-in trap (`mmio_trap=1`) is asked for.
A real segmentation fault still kills the program with SIGSEGV."""

import os
import signal
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import faulthandler, sys, time
    import efa

    when = sys.argv[1]
    if when == "before":
        faulthandler.enable()
    ctx = efa.get_efa_device_list()[0].open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(1024)
    qkey = 0x1234
    qps = [pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=qkey)
           for _ in range(2)]
    a, b = qps
    if when == "after":
        # After opening the device and creating the QPs, whose rings the direct path
        # has been handed: the latest a program can install its handler.
        faulthandler.enable()
    to_b = efa.EndpointInfo.from_bytes(efa.local_endpoint_info(b, qkey=qkey).to_bytes()).peer(pd)
    efa.EndpointInfo.from_bytes(efa.local_endpoint_info(a, qkey=qkey).to_bytes()).peer(pd)
    all_access = (efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE
                  | efa.AccessFlags.REMOTE_READ)
    src, inbox, target = bytearray(64), bytearray(64), bytearray(4096)
    ms = efa.reg_tensor(pd, src, 0)
    mi = efa.reg_tensor(pd, inbox, all_access)
    mt = efa.reg_tensor(pd, target, all_access)
    taddr = mt.addr
    for i in range(200):
        src[:8] = i.to_bytes(8, "little")
        b.post_recv(efa.RecvWR(wr_id=1000 + i, sg_list=[mi.sge()]))
        a.post_send(efa.write_wrs(ms, to_b, taddr + 8 * (i % 64), mt.rkey, length=8, wr_id=i))
        a.post_send(efa.SendWR(wr_id=5000 + i, sg_list=[ms.sge(8)], dest=to_b,
                               send_flags=efa.SendFlags.SIGNALED))
        got, deadline = [], time.monotonic() + 10
        while len(got) < 3:
            got += cq.poll(3 - len(got))
            assert time.monotonic() < deadline, ("round", i, got)
        assert all(w.is_success for w in got), got
        assert bytes(inbox[:8]) == i.to_bytes(8, "little")
        assert bytes(target[8 * (i % 64):][:8]) == i.to_bytes(8, "little")
    print("completed 200 rounds", flush=True)
    if len(sys.argv) > 2 and sys.argv[2] == "crash":
        import ctypes
        print("reading address 0", flush=True)
        ctypes.string_at(0)
        print("survived", flush=True)
""")


def run(when, *extra, profile=None):
    env = dict(os.environ, EFA_RS_DIRECT="1")
    if profile is not None:
        env["EFA_SIM_PROFILE"] = profile
    return subprocess.run([sys.executable, "-c", PROGRAM, when, *extra], env=env,
                          capture_output=True, text=True, timeout=120)


def test_faulthandler_enabled_after_the_qps_were_made_runs_the_direct_path():
    r = run("after")
    assert r.returncode == 0, r.stderr
    assert "completed 200 rounds" in r.stdout


def test_faulthandler_enabled_before_opening_the_device_runs_the_direct_path():
    r = run("before")
    assert r.returncode == 0, r.stderr
    assert "completed 200 rounds" in r.stdout


def test_the_opt_in_trap_is_what_faulthandler_cannot_live_with():
    # The program above really rings direct doorbells: with the trap asked for, the
    # handler installed after efa-sim's takes the first one for a crash (the documented
    # limitation of `mmio_trap=1`).
    r = run("after", profile="mmio_trap=1")
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr)
    assert "Fatal Python error: Segmentation fault" in r.stderr
    assert "completed 200 rounds" not in r.stdout


def test_a_real_segmentation_fault_still_kills_the_program():
    r = run("after", "crash")
    assert "completed 200 rounds" in r.stdout, r.stderr
    assert "survived" not in r.stdout
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr)
    assert "Fatal Python error: Segmentation fault" in r.stderr
