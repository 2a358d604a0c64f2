"""Two-input operators (``connect``) and broadcast state, built on one-input keyed operators.

A connected stream's two inputs are unioned after a chained *side wrapper*
map turns each row into ``{"__key", "__side", "__record"}`` (the record pickled,
the key computed by that side's key selector). The union is partitioned by
``__key`` (keyed connect), broadcast (the broadcast side), or as given, and
the co-operator unwraps each row and calls the function of its side. That
way a two-input operator needs nothing new from the task, the network or the
checkpoint: its keyed state, timers and in-flight data are those of an
ordinary keyed operator, and the combined watermark is the minimum over
both inputs, as in Flink.

Broadcast state (``ctx.get_broadcast_state(descriptor)``) is operator state:
every subtask keeps and checkpoints its copy; on restore every subtask takes
the copy of old subtask 0 (all copies are equal when, as Flink requires,
``process_broadcast_element`` changes them the same way on every subtask).
"""

from __future__ import annotations

import dataclasses
import pickle
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import OperatorStateSnapshot
from flinklike_spark._runtime.operators.process_operators import (
    KeyedProcessOperator,
    ProcessContext,
    ProcessOperator,
)
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorSnapshot,
    RestoredState,
    describe_operator,
    extend_stamped,
)
from flinklike_spark._runtime.record_timestamps import Timestamps
from flinklike_spark._runtime.state.state_types import DeclaredStateType
from flinklike_spark.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
)
from flinklike_spark.datastream.state import BroadcastState, MapStateDescriptor, ReadOnlyBroadcastState

__all__ = [
    "BroadcastState",
    "CoOperatorDescriptor",
    "CoProcessOperator",
    "KeyedCoProcessOperator",
    "ReadOnlyBroadcastState",
    "SideWrapper",
]

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec

KEY, SIDE, RECORD = "__key", "__side", "__record"
_BROADCAST_PREFIX = "_broadcast/"


@dataclasses.dataclass(frozen=True)
class SideWrapper:
    """The map that tags a connected input's rows with its side (0 or 1) and key."""

    side: int
    key_field: str | None = None
    key_selector: Callable[[dict], Any] | None = None

    def __call__(self, row: dict) -> dict:
        if self.key_field is not None:
            key = row[self.key_field]
        elif self.key_selector is not None:
            key = self.key_selector(row)
        else:
            key = None
        return {KEY: key, SIDE: self.side, RECORD: pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL)}


@dataclasses.dataclass(kw_only=True)
class CoOperatorDescriptor:
    """The ``function`` of a co-operator spec: the user function and what each side needs."""

    function: Any
    broadcast_descriptors: tuple[MapStateDescriptor, ...] = ()


class _CoContext(ProcessContext):
    def __init__(self, operator: Any) -> None:
        super().__init__(operator)
        self.broadcast_side = False

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> ReadOnlyBroadcastState:
        entries = self._op.broadcast_states.get(state_descriptor.name)
        if entries is None:
            known = sorted(self._op.broadcast_states)
            raise KeyError(
                f"no broadcast state {state_descriptor.name!r}: pass its MapStateDescriptor to broadcast(...); "
                f"known: {known}"
            )
        cls = self._op.broadcast_classes[state_descriptor.name] if self.broadcast_side else ReadOnlyBroadcastState
        return cls(entries, state_descriptor.name)

    def apply_to_keyed_state(self, state_descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        """Call ``function(key, state)`` for every key with an entry of ``state_descriptor``'s keyed state
        (PyFlink's ``KeyedBroadcastProcessFunction.Context.apply_to_keyed_state``; broadcast side only).

        Raises:
            TypeError: not on the broadcast side of a KeyedBroadcastProcessFunction.
        """
        backend = self._op.backend
        if backend is None or not self.broadcast_side:
            raise TypeError(
                "apply_to_keyed_state is only available in process_broadcast_element of a KeyedBroadcastProcessFunction"
            )
        state = backend.get_state(state_descriptor, type(state_descriptor))
        previous = backend.current_key
        try:
            for key in backend.keys_of(state_descriptor.name):
                backend.current_key = key
                function(key, state)
        finally:
            backend.current_key = previous


# The context objects of (keyed) broadcast functions are the PyFlink context types their
# annotations name (isinstance holds; the ABCs document the methods).
for _context_type in (
    BroadcastProcessFunction.ReadOnlyContext,
    BroadcastProcessFunction.Context,
    KeyedBroadcastProcessFunction.ReadOnlyContext,
    KeyedBroadcastProcessFunction.Context,
    KeyedBroadcastProcessFunction.OnTimerContext,
):
    _context_type.register(_CoContext)


def _dispatch(function: Any) -> tuple[Callable, Callable, bool, tuple[str, str]]:
    """``(call for side 0, call for side 1, whether the calls take a context, method names)``."""
    if isinstance(function, CoMapFunction):
        return (lambda v: [function.map1(v)]), (lambda v: [function.map2(v)]), False, ("map1", "map2")
    if isinstance(function, CoFlatMapFunction):
        return function.flat_map1, function.flat_map2, False, ("flat_map1", "flat_map2")
    if isinstance(function, (CoProcessFunction, KeyedCoProcessFunction)):
        return function.process_element1, function.process_element2, True, ("process_element1", "process_element2")
    if isinstance(function, (BroadcastProcessFunction, KeyedBroadcastProcessFunction)):
        return (
            function.process_element,
            function.process_broadcast_element,
            True,
            ("process_element", "process_broadcast_element"),
        )
    raise TypeError(f"not a two-input function: {function!r}")


class _TwoInput:
    """process_rows / state of both co-operators (mixed into ProcessOperator / KeyedProcessOperator)."""

    def _init_two_input(self, spec: OperatorSpec) -> None:
        descriptor: CoOperatorDescriptor = spec.function
        self.function = descriptor.function
        self._calls = _dispatch(descriptor.function)
        self.broadcast_states: dict[str, dict] = {d.name: {} for d in descriptor.broadcast_descriptors}
        # The writable handle of each broadcast state: one checking its declared key and value types, if any.
        site = types.SimpleNamespace(owner=describe_operator(self), current_key=None)
        self.broadcast_classes: dict[str, type[BroadcastState]] = {}
        for d in descriptor.broadcast_descriptors:
            declared = DeclaredStateType.of(d, site)
            self.broadcast_classes[d.name] = (
                BroadcastState if declared is None else declared.typed_handle_class(BroadcastState)
            )
        self._ctx = _CoContext(self)

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        first, second, with_context, methods = self._calls
        ctx = self._ctx
        backend = self.backend
        out: list = []
        out_ts: list = []
        if backend is not None:
            backend.prefetch([row[KEY] for row in rows])
        for row, timestamp in zip(rows, timestamps or [None] * len(rows), strict=True):
            side = row[SIDE]
            value = pickle.loads(row[RECORD])
            if backend is not None:
                backend.current_key = row[KEY]
            ctx.current_timestamp = timestamp  # carried through the side wrapper from its input
            ctx.broadcast_side = side == 1
            call = second if side else first
            produced = call(value, ctx) if with_context else call(value)
            extend_stamped(out, out_ts, produced, timestamp, self, methods[side])
        ctx.current_timestamp = None
        self._emit(out, out_ts, "process_element")

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot | None:
        snapshot = super().snapshot_state(checkpoint_id)  # type: ignore[misc]
        if not self.broadcast_states:
            return snapshot
        snapshot = snapshot or OperatorSnapshot()
        for name, entries in self.broadcast_states.items():
            rows = [(key, value) for key, value in pickle.loads(pickle.dumps(entries)).items()]
            snapshot.operator.append(
                OperatorStateSnapshot(name=_BROADCAST_PREFIX + name, kind=StateKind.OPERATOR, entries=rows)
            )
        return snapshot

    def initialize_state(self, restored: RestoredState | None) -> None:
        super().initialize_state(restored)  # type: ignore[misc]
        if restored is None:
            return
        # Every old subtask holds its own copy; take that of old subtask i % old parallelism, whose
        # in-flight broadcast records (an unaligned checkpoint's channel state) this subtask replays.
        mine = [e for e in restored.operator if e.state_name.startswith(_BROADCAST_PREFIX)]
        if mine:
            old = restored.parallelism
            source = self.context.subtask_index % old if old else min(e.subtask for e in mine)
            for entry in mine:
                if entry.subtask == source:
                    name = entry.state_name[len(_BROADCAST_PREFIX) :]
                    self.broadcast_states.setdefault(name, {})[entry.key] = entry.value


class CoProcessOperator(_TwoInput, ProcessOperator):
    """CoMap / CoFlatMap / CoProcess / BroadcastProcess on a non-keyed connected stream."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self._init_two_input(spec)


class KeyedCoProcessOperator(_TwoInput, KeyedProcessOperator):
    """KeyedCoProcess / KeyedBroadcastProcess (and CoMap/CoFlatMap after key_by): keyed state and timers."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self._init_two_input(spec)
