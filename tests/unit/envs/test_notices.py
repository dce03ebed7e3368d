"""What env libraries print on their own shows once per run, not once per env copy (envs/notices.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from relayrl.envs import make


def test_ale_prints_no_banner_per_game(capfd):
    pytest.importorskip("ale_py")
    for _ in range(2):
        make("ALE/Pong-v5").close()
    out, err = capfd.readouterr()
    assert "A.L.E" not in out + err and "Powered by Stella" not in out + err


def _run(script: str, cwd, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_a_mujoco_warning_shows_once_from_many_envs_and_worker_processes(tmp_path):
    pytest.importorskip("mujoco")
    run = _run("""
        import numpy as np
        from relayrl.envs import make, make_vec

        if __name__ == "__main__":
            for _ in range(3):
                make("HalfCheetah-v5").close()
            with make_vec("HalfCheetah-v5", 4, manager="subproc", workers=2, seed=0) as venv:
                venv.step(np.zeros((4, 6), np.float32))
    """, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    # HalfCheetah's XML uses an attribute MuJoCo 3.3+ deprecates: MuJoCo warns for every model it compiles
    assert run.stderr.count("settotalmass") == 1, run.stderr
    assert "MuJoCo warning (shown once)" in run.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()  # (MuJoCo's own handler writes one in the working folder)


def test_a_missing_mujoco_names_the_extra_with_the_constraints(tmp_path):
    fake = tmp_path / "nomujoco" / "mujoco"  # a mujoco that does not import: as on a machine without it
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no mujoco here')\n")
    run = _run("""
        from relayrl.envs import make
        from relayrl.errors import EnvError

        try:
            make("HalfCheetah-v5")
        except EnvError as exc:
            print(exc)
    """, tmp_path, PYTHONPATH=os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "environment 'HalfCheetah-v5' needs a package that is not installed: install relayrl's mujoco extra: " \
           "python -m pip install -c constraints.txt -e '.[mujoco]'" in run.stdout, run.stdout
    assert "gymnasium[mujoco]" not in run.stdout
