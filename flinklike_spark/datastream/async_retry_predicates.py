"""PyFlink's ``pyflink.datastream.async_retry_predicates``: ready-made retry predicates."""

from __future__ import annotations

__all__ = ["empty_result_predicate", "exception_type_predicate", "has_exception_predicate"]


def empty_result_predicate(result: list | None) -> bool:
    """Retry when ``async_invoke`` returned nothing."""
    return result is None or len(result) == 0


def has_exception_predicate(error: BaseException | None) -> bool:
    """Retry on any exception."""
    return error is not None


def exception_type_predicate(error: BaseException | None, expected_error_type: type) -> bool:
    """Retry on exceptions of ``expected_error_type`` (bind it with ``functools.partial``)."""
    return isinstance(error, expected_error_type)
