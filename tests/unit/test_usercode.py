"""relayrl.usercode: user modules import from the working folder; one message when they do not."""

from __future__ import annotations

import os
import sys

import pytest

from relayrl.errors import ConfigError, EnvError
from relayrl.usercode import add_working_folder, describe, import_module


def test_a_missing_module_names_the_module_the_folder_searched_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EnvError) as info:
        import_module("no_such_user_module", "env 'no_such_user_module:make'", EnvError)
    message = str(info.value)
    assert message.startswith("env 'no_such_user_module:make': cannot import module 'no_such_user_module' "
                              "(ModuleNotFoundError: No module named 'no_such_user_module'): no no_such_user_module.py")
    assert f"the working folder {tmp_path}" in message and "PYTHONPATH" in message


def test_a_module_whose_import_is_missing_names_that_import_and_the_line(tmp_path, monkeypatch):
    (tmp_path / "needs_a_dep.py").write_text("import os\nimport no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as info:
        import_module("needs_a_dep", "algorithm 'needs_a_dep:algo'")
    message = str(info.value)
    assert "(ModuleNotFoundError: No module named 'no_such_dependency_xyz'): install 'no_such_dependency_xyz' " \
           f"(imported at {tmp_path / 'needs_a_dep.py'}:2 in <module>)" in message


def test_a_module_that_raises_on_import_is_described_at_its_line(tmp_path, monkeypatch):
    (tmp_path / "raises_on_import.py").write_text("x = 1\nraise ValueError('bad setting')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"cannot import module 'raises_on_import' \(ValueError: bad setting\): fix "
                                          rf"the module at {tmp_path / 'raises_on_import.py'}:2 in <module>$"):
        import_module("raises_on_import", "ppo.network 'raises_on_import:net'")


def test_the_working_folder_goes_first_on_the_path_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    (tmp_path / "here_user_module.py").write_text("VALUE = 7\n")
    with pytest.raises(ConfigError, match="the working folder .* is not on it"):
        import_module("here_user_module", "env 'here_user_module:x'")
    add_working_folder()
    add_working_folder()
    assert sys.path.count(str(tmp_path)) == 1 and sys.path[0] == str(tmp_path)
    assert import_module("here_user_module", "env 'here_user_module:x'").VALUE == 7


def test_a_pettingzoo_mpe_module_is_told_the_mpe_extra_and_the_new_module():
    pytest.importorskip("pettingzoo")
    with pytest.raises(ConfigError) as info:
        import_module("pettingzoo.mpe.simple_spread_v3", "env id 'pettingzoo:pettingzoo.mpe.simple_spread_v3:env'")
    message = str(info.value)
    assert "install relayrl's mpe extra, python -m pip install -c constraints.txt -e '.[mpe]'" in message
    assert "name the module mpe2.simple_spread_v3" in message and "pip install mpe2" not in message


def test_describe_points_at_the_innermost_frame_of_user_code(tmp_path, monkeypatch):
    (tmp_path / "user_calls_numpy.py").write_text("import numpy as np\n\ndef f():\n    return np.zeros(-1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from user_calls_numpy import f

    with pytest.raises(ValueError) as info:
        f()
    assert describe(info.value).endswith(f"(at {tmp_path / 'user_calls_numpy.py'}:4 in f)")
