"""The ``hopscore`` console script of the wheel is the CLI: same version, same exit
codes, same commands."""

import subprocess

import hopscore
from conftest import HOPSCORE, cli


def test_console_script_reports_the_package_version():
    assert cli("--version").stdout.split() == ["hopscore", hopscore.__version__]


def test_console_script_exits_2_on_bad_arguments():
    done = subprocess.run([str(HOPSCORE), "beam", "--beam-size", "0"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "--beam-size" in done.stderr


def test_console_script_exits_1_with_the_cause_on_a_missing_input(tmp_path):
    missing = tmp_path / "missing.parquet"
    done = subprocess.run(
        [str(HOPSCORE), "show", str(missing)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "missing.parquet" in done.stderr
