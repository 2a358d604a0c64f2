"""``pip install "flinklike-spark[spark]" boto3`` resolves, with the newest boto3, against the real index.

A Spark user on AWS has boto3. s3fs's aiobotocore pins botocore to a few patch
releases, so an extra that pulls s3fs cannot resolve next to a boto3 newer than
aiobotocore (``ResolutionImpossible``, or pip backtracking for many minutes);
the ``spark`` extra therefore leaves s3fs to the ``s3`` extra. pyspark 4.2
warns on pandas 3, so the extra keeps pandas below 3.

Resolution only (``--dry-run --ignore-installed``): nothing is installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def _pip(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _newest(package: str) -> str:
    done = _pip("index", "versions", package, timeout=120)
    match = re.match(rf"{package} \(([^)]+)\)", done.stdout)
    assert done.returncode == 0 and match, done.stdout + done.stderr
    return match.group(1)


def test_spark_extra_resolves_next_to_the_newest_boto3(tmp_path):
    try:
        urllib.request.urlopen("https://pypi.org/simple/boto3/", timeout=20).close()
    except OSError as exc:
        pytest.skip(f"PyPI is unreachable from here ({exc}); the resolution cannot be checked")
    boto3 = _newest("boto3")
    report = tmp_path / "report.json"
    try:
        done = _pip(
            "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
            f"{ROOT}[spark]", "boto3", timeout=780,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"pip did not resolve [spark] next to boto3 within {exc.timeout:.0f} s (backtracking)")
    assert done.returncode == 0, done.stderr[-5000:]
    chosen = {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert chosen["boto3"] == boto3, chosen
    assert chosen["pyspark"] == "4.2.0" and "delta-spark" in chosen, chosen
    assert int(chosen["pandas"].split(".")[0]) < 3, chosen["pandas"]  # pyspark 4.2's FutureWarning on pandas 3
