"""The ``pipeline`` option of the ``flinklike`` source and sink: ``module:function``, imported."""

from __future__ import annotations

import importlib
from typing import Any

from flinklike_spark.errors import ConfigurationError

__all__ = ["resolve_pipeline"]


def resolve_pipeline(pipeline: str) -> Any:
    """Import ``module:function`` and return the function.

    Raises:
        ConfigurationError: the spec is malformed, or the module or function cannot be imported.
    """
    module_name, sep, function_name = pipeline.partition(":")
    if not sep or not module_name or not function_name:
        raise ConfigurationError(
            f"option pipeline={pipeline!r}: expected 'module:function', e.g. 'my_jobs.fraud:build'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"option pipeline={pipeline!r}: cannot import module {module_name!r} ({exc}); it must be importable "
            f"by Spark's Python workers (on PYTHONPATH, or shipped with spark-submit --py-files)"
        ) from exc
    function = getattr(module, function_name, None)
    if function is None:
        raise ConfigurationError(
            f"option pipeline={pipeline!r}: module {module_name!r} has no attribute {function_name!r}; "
            f"expected 'module:function' naming a function that builds the job"
        )
    if not callable(function):
        raise ConfigurationError(
            f"option pipeline={pipeline!r}: {module_name}.{function_name} is a {type(function).__name__} "
            f"({function!r:.60}), not a function; expected 'module:function' naming a function that builds the job"
        )
    return function
