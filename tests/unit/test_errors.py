"""Install hints: relayrl is installed from a checkout, pinned to constraints.txt, never from PyPI; every
package an extra names is pinned there."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from relayrl.errors import install_hint

ROOT = Path(__file__).resolve().parents[2]


def test_install_hints_name_the_checkout_form_with_the_constraints():
    assert install_hint("mujoco") == "python -m pip install -c constraints.txt -e '.[mujoco]'"
    wrong = re.compile(r"pip install ['\"]?relayrl\[|pip install -e ['\"]?\.\[|pip install ['\"]?gymnasium\[")
    files = [*ROOT.glob("relayrl/**/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md"]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in files
             for n, line in enumerate(path.read_text().splitlines(), 1) if wrong.search(line)]
    assert not found, found


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_package_of_every_extra_is_pinned_and_mpe_and_pistonball_have_theirs():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pinned = {_name(line) for line in (ROOT / "constraints.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    unpinned = {f"{extra}: {req}" for extra, reqs in extras.items() for req in reqs if _name(req) not in pinned}
    assert not unpinned, unpinned
    assert {"pettingzoo", "mpe2"} <= {_name(r) for r in extras["mpe"]}  # PettingZoo's MPE envs moved to mpe2
    assert {"pettingzoo", "pymunk"} <= {_name(r) for r in extras["butterfly"]}  # pistonball's physics
