"""The registry of keyed state backends by name: Flink's ``state.backend.type``.

Built in: ``hashmap`` (:class:`~flinklike_spark._runtime.state.keyed_state.HeapKeyedStateBackend`,
the default) and ``rocksdb``
(:class:`~flinklike_spark._runtime.state.rocksdb_state.RocksDBKeyedStateBackend`,
imported only when chosen, as it needs the ``[rocksdb]`` extra). Another
backend is one module: a subclass of
:class:`~flinklike_spark._runtime.state.state_backend_base.KeyedStateBackend`
and one :func:`register_state_backend` call; an operator whose context names it
(``OperatorContext.state_backend_type``) then gets it from
:func:`create_keyed_state_backend`.
"""

from __future__ import annotations

from collections.abc import Callable

from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend
from flinklike_spark._runtime.state.state_backend_base import (
    KeyedStateBackend,
    OperatorStateSettings,
    StateBackendContext,
)
from flinklike_spark.config import StateBackendType
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "StateBackendFactory",
    "create_keyed_state_backend",
    "register_state_backend",
    "registered_state_backends",
    "unregister_state_backend",
]

#: Creates a backend for one operator subtask.
StateBackendFactory = Callable[[StateBackendContext], KeyedStateBackend]


def _rocksdb(context: StateBackendContext) -> KeyedStateBackend:
    from flinklike_spark._runtime.state.rocksdb_state import RocksDBKeyedStateBackend

    return RocksDBKeyedStateBackend.from_context(context)


_FACTORIES: dict[str, StateBackendFactory] = {
    StateBackendType.HASHMAP.value: HeapKeyedStateBackend.from_context,
    StateBackendType.ROCKSDB.value: _rocksdb,
}
_BUILT_IN = frozenset(_FACTORIES)


def register_state_backend(name: str, factory: StateBackendFactory) -> None:
    """Make ``factory`` the backend that ``state.backend.type`` ``name`` selects.

    Raises:
        ConfigurationError: ``name`` is empty or already registered (built-in
            names cannot be replaced).
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a state backend name must be a non-empty string, got {name!r}")
    if name in _FACTORIES:
        raise ConfigurationError(
            f"state backend {name!r} is already registered; registered: {', '.join(registered_state_backends())}"
        )
    if not callable(factory):
        raise ConfigurationError(f"state backend {name!r}: the factory must be callable, got {factory!r}")
    _FACTORIES[name] = factory


def unregister_state_backend(name: str) -> None:
    """Remove a backend registered with :func:`register_state_backend` (built-ins stay).

    Raises:
        ConfigurationError: ``name`` is built in or not registered.
    """
    if name in _BUILT_IN or name not in _FACTORIES:
        raise ConfigurationError(
            f"cannot unregister state backend {name!r}; registered by modules: {sorted(set(_FACTORIES) - _BUILT_IN)}"
        )
    del _FACTORIES[name]


def registered_state_backends() -> tuple[str, ...]:
    """The names ``state.backend.type`` may take, sorted."""
    return tuple(sorted(_FACTORIES))


def create_keyed_state_backend(
    context: OperatorStateSettings | StateBackendContext, *, owner: str = "keyed state"
) -> KeyedStateBackend:
    """The keyed state backend ``state.backend.type`` selects, for an operator subtask with ``context``;
    ``owner`` names the operator in its error messages (``operator 'count' (uid 'count')``).

    Raises:
        ConfigurationError: no backend of that name is registered (or the
            backend cannot start, e.g. a missing extra).
    """
    if not isinstance(context, StateBackendContext):
        context = StateBackendContext.of_operator(context)
    factory = _FACTORIES.get(context.backend_type)
    if factory is None:
        raise ConfigurationError(
            f"state.backend.type {context.backend_type!r} is not available; valid: "
            f"{', '.join(registered_state_backends())}"
        )
    backend = factory(context)
    backend.owner = owner
    return backend
