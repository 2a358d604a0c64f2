"""PyFlink's pyflink.datastream.state: state handles, descriptors and TTL (one implementation:
flinklike_spark.state).
"""

from flinklike_spark._runtime.streaming.co_operators import BroadcastState, ReadOnlyBroadcastState
from flinklike_spark.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    AppendingState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    MergingState,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptor,
    StateTtlConfig,
    TtlValue,
    ValueState,
    ValueStateDescriptor,
)

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "AppendingState",
    "BroadcastState",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "MergingState",
    "ReadOnlyBroadcastState",
    "ReducingState",
    "ReducingStateDescriptor",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "TtlValue",
    "ValueState",
    "ValueStateDescriptor",
]
