"""Every public module says what it exports, once; the package re-exports public names only (as trio checks).

Public modules are those of ``flinklike_spark`` outside ``_runtime`` and of
``connectors`` and ``checkpointing``. Their ``__all__`` must be free of
duplicates and name only attributes that exist (ruff's RUF022 keeps it sorted); ``flinklike_spark`` itself
re-exports no private name and no name it does not list.
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

pytestmark = pytest.mark.timeout(60)

_OPTIONAL = {"flinklike_spark.spark"}  # needs pyspark (the [spark] extra)


def public_modules() -> list[str]:
    names = []
    for package in ("flinklike_spark", "connectors", "checkpointing"):
        module = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if "._" in info.name or info.name.endswith("__main__"):
                continue
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", public_modules())
def test_all_is_unique_and_exists(name):  # sorted: ruff's RUF022 checks that in CI
    if any(name == opt or name.startswith(opt + ".") for opt in _OPTIONAL):
        pytest.importorskip("pyspark", reason="flinklike_spark.spark needs pyspark")
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ names something twice"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    private = [n for n in exported if n.startswith("_")]
    assert not private, f"{name}.__all__ exports private names {private}"


def test_the_package_exports_every_public_name_it_holds_and_nothing_else():
    import flinklike_spark

    public = {
        n for n, v in vars(flinklike_spark).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n != "annotations"
    }  # fmt: skip
    assert public == set(flinklike_spark.__all__), (
        f"defined but not in __all__: {sorted(public - set(flinklike_spark.__all__))}; "
        f"in __all__ but not defined: {sorted(set(flinklike_spark.__all__) - public)}"
    )
