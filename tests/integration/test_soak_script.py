"""benchmarks/soak.py for a few seconds, so the 10-minute soak (run by hand) keeps working."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_soak_script_runs_and_writes_its_csv_and_chart(tmp_path):
    out_csv, out_png = tmp_path / "rss.csv", tmp_path / "rss.png"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--minutes", "0.05", "--workers", "2",
                           "--sample-s", "0.5", "--warmup-s", "1", "--csv", str(out_csv), "--png", str(out_png)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "drops: relay 0 (0 bytes), worker backlogs 0" in proc.stdout
    for role in ("relay", "trainer", "median worker"):
        assert f"RSS {role}:" in proc.stdout
    rows = list(csv.DictReader(out_csv.open()))
    assert {r["role"] for r in rows} == {"relay", "trainer", "worker"}
    assert len({r["pid"] for r in rows if r["role"] == "worker"}) == 2
    assert all(float(r["rss_mb"]) > 0 for r in rows)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
