"""The ``pipeline`` option of the ``flinklike`` source and sink: ``module:function``, imported."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from flinklike_spark.errors import ConfigurationError

__all__ = ["check_call", "resolve_pipeline"]


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


def check_call(pipeline: str, function: Callable[..., Any], how: str, *args: Any, **kwargs: Any) -> None:
    """Refuse a pipeline function that cannot be called with ``args`` and ``kwargs``, saying how it is called.

    Raises:
        ConfigurationError: naming the function's signature, ``how`` it is called and the keyword arguments given.
    """
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # no signature (a builtin): let the call tell
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = f"; option pipeline.args gave {sorted(kwargs)}" if kwargs else ""
        raise ConfigurationError(
            f"option pipeline={pipeline!r}: {how}, but {pipeline.partition(':')[2]}{signature} cannot take those "
            f"arguments ({exc}){given}"
        ) from None
