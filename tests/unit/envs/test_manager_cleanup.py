"""However the parent ends, no worker process and no shared-memory segment outlives it."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import json, signal, sys, time
    import numpy as np
    from relayrl.envs import make_vec

    if __name__ == "__main__":
        # Ctrl-C as in a terminal, even when the test suite runs as a background job (which starts
        # with SIGINT ignored, and Python then installs no KeyboardInterrupt handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        venv = make_vec("CartPole-v1", 4, manager="subproc", workers=2, seed=0)
        venv.step(np.zeros(4, np.int64))
        print(json.dumps({"pids": venv.pids, "shm": venv._shm.name}), flush=True)
        sys.stdin.readline()  # the test checks the workers are up first
        mode = sys.argv[1]
        if mode == "raise":
            raise RuntimeError("the training script crashed")
        if mode == "wait":
            while True:
                venv.step(np.zeros(4, np.int64))
                time.sleep(0.01)
        # mode "exit": leave without calling close()
""")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except (FileNotFoundError, ProcessLookupError):  # (gone before, or while, its status was read)
        return False


@pytest.mark.parametrize("mode, sig", [("exit", None), ("raise", None), ("wait", signal.SIGINT),
                                       ("wait", signal.SIGTERM), ("wait", signal.SIGKILL)])
def test_no_orphans_and_no_leaked_segments(tmp_path, mode, sig):
    script = tmp_path / "parent.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    info = json.loads(proc.stdout.readline())
    assert all(_alive(pid) for pid in info["pids"]) and os.path.exists(f"/dev/shm/{info['shm']}")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    if sig is not None:
        time.sleep(0.3)  # let it step a while
    if sig is not None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # say where it was stuck
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the parent did not exit within 30 s of {sig!r}; its stderr:\n{err[-3000:]}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (any(_alive(p) for p in info["pids"])
                                           or os.path.exists(f"/dev/shm/{info['shm']}")):
        time.sleep(0.1)
    assert not any(_alive(p) for p in info["pids"]), "worker processes outlived the parent"
    assert not os.path.exists(f"/dev/shm/{info['shm']}"), "shared memory outlived the parent"
