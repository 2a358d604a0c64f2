"""Translation of a program's transformations into a :class:`JobGraph`.

The public API (:mod:`flinklike_spark.datastream`) only records
:class:`Transformation` s; :class:`JobGraphBuilder` chains them into job
vertices (operators chained over forward edges of equal parallelism), checks
what they ship to the TaskExecutors pickles, and :func:`bind_storage` gives
connectors the job's storage settings before submission.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle
import pyarrow as pa

from flinklike_spark._runtime.graph.job_graph import JobGraph, JobVertex, PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.operators.operator_spec import OperatorKind, OperatorSpec, operator_kind
from flinklike_spark.common.watermark_strategy import WatermarkStrategy
from flinklike_spark.config import Configuration, PipelineOptions
from flinklike_spark.connector_api import SubmissionChecked
from flinklike_spark.errors import ConfigurationError, InvalidProgramError
from flinklike_spark.storage import UsesStorage

__all__ = [
    "JobGraphBuilder",
    "Transformation",
    "bind_storage",
    "check_connectors",
    "execution_plan",
    "upstream_closure",
]


@dataclasses.dataclass(eq=False, kw_only=True)
class Transformation:
    """One operation of a program (Flink's ``Transformation``): what the API records and translation reads.

    ``inputs`` pairs each upstream transformation with the partitioner of the
    edge (None: forward, or rebalance between different parallelisms).
    """

    id: int
    kind: OperatorKind
    name: str
    function: Any = None
    inputs: list[tuple[Transformation, PartitionerSpec | None]] = dataclasses.field(default_factory=list)
    parallelism: int | None = None
    uid: str | None = None
    output_schema: pa.Schema | None = None
    input_schema: pa.Schema | None = None
    key_field: str | None = None
    key_selector: Callable[[dict], Any] | None = None
    timestamp_strategy: WatermarkStrategy | None = None
    # declared schemas of side outputs (tag id -> schema, or None to infer)
    side_output_schemas: dict[str, pa.Schema | None] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kind = operator_kind(self.kind)  # DataStream.transform takes a kind's string value too


def upstream_closure(transformations: list[Transformation], pending: Iterable[Transformation]) -> list[Transformation]:
    """``pending`` and, as in Flink, every transformation they read from, in definition order."""
    needed: set[int] = set()
    stack = list(pending)
    while stack:
        t = stack.pop()
        if t.id not in needed:
            needed.add(t.id)
            stack.extend(upstream for upstream, _ in t.inputs)
    return [t for t in transformations if t.id in needed]


def execution_plan(transformations: list[Transformation], default_parallelism: int) -> str:
    """The job of ``transformations`` as JSON in Flink's execution-plan format.

    ``{"nodes": [{"id", "type", "pact", "contents", "parallelism", "predecessors":
    [{"id", "ship_strategy", "side"}]}]}``, one node per operator in definition order.
    """
    default = default_parallelism
    nodes = []
    for t in transformations:
        parallelism = t.parallelism or default
        node: dict[str, Any] = {
            "id": t.id,
            "type": t.name,
            "pact": {OperatorKind.SOURCE: "Data Source", OperatorKind.SINK: "Data Sink"}.get(t.kind, "Operator"),
            "contents": t.name,
            "parallelism": parallelism,
        }
        predecessors = []
        for upstream, spec in t.inputs:
            if spec is not None:
                strategy = spec.kind.name
            else:
                same = (upstream.parallelism or default) == parallelism
                strategy = "FORWARD" if same else "REBALANCE"
            predecessors.append({"id": upstream.id, "ship_strategy": strategy, "side": "second"})
        if predecessors:
            node["predecessors"] = predecessors
        nodes.append(node)
    return json.dumps({"nodes": nodes}, indent=2)


def bind_storage(job_graph: JobGraph, config: Configuration) -> None:
    """Check every storage URL of the job on the client, then give its connectors the job's storage settings.

    A URL whose filesystem package is missing fails here, naming the URL and
    the extra to install, before any task is deployed (a task would fail with
    an ImportError on every restart). Connectors that implement
    :class:`~flinklike_spark.storage.UsesStorage` are replaced in the graph by
    copies bound to ``config.storage``, which travel to the TaskExecutors.
    """
    storage = config.storage
    options = config.checkpointing
    if options.directory is not None:
        storage.check_available(options.directory, what="execution.checkpointing.dir")
    if options.recovery_path is not None:
        storage.check_available(options.recovery_path, what="execution.state-recovery.path")
    for vertex in job_graph:
        for op in vertex.operators:
            if isinstance(op.function, UsesStorage):
                for url in op.function.storage_urls():
                    storage.check_available(url, what=f"{op.name} ({type(op.function).__name__}) path")
                op.function = op.function.with_storage(storage)


def check_connectors(job_graph: JobGraph) -> None:
    """Let every connector that checks its external system at submission do so (see ``SubmissionChecked``)."""
    for vertex in job_graph:
        for op in vertex.operators:
            if isinstance(op.function, SubmissionChecked):
                op.function = op.function.checked_for_submission()


def check_picklable(t: Transformation, uid: str) -> None:
    """Raise InvalidProgramError unless what ``t`` ships to the TaskExecutors pickles.

    Functions, sources and sinks travel cloudpickled inside the task deployment;
    without this check a function holding a lock or a client failed the job at
    deployment with only "cannot pickle '_thread.lock' object".
    """
    role = {OperatorKind.SOURCE: "source", OperatorKind.SINK: "sink"}.get(t.kind, "function")
    parts = [(role, t.function), ("key selector", t.key_selector), ("watermark strategy", t.timestamp_strategy)]
    parts += [("key selector", spec.key_selector) for _, spec in t.inputs if spec is not None]
    for what, value in parts:
        if value is None:
            continue
        try:
            cloudpickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - pickling raises TypeError, PicklingError, AttributeError, ...
            raise InvalidProgramError(
                f"the {what} of operator {t.name!r} (uid {uid!r}), {_short_repr(value)}, cannot be pickled: "
                f"{type(exc).__name__}: {exc}. It is pickled (cloudpickle) to run in the TaskExecutors: create "
                f"locks, connections, clients and open files in open(), not in __init__ or a closure"
            ) from exc


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


class JobGraphBuilder:
    """Chains transformations into job vertices.

    A transformation is chained to its single upstream when the edge is FORWARD
    (explicitly or by default), the parallelism matches, and chaining is on.
    A default edge between different parallelisms becomes REBALANCE (as in Flink).

    Args:
        transformations: the job's transformations in definition order (with
            every transformation they read from).
        pipeline: the ``pipeline.*`` / ``parallelism.default`` options.
        chaining: whether operators may be chained (``disable_operator_chaining``).
    """

    def __init__(self, transformations: list[Transformation], pipeline: PipelineOptions, *, chaining: bool) -> None:
        self._transformations = transformations
        self._pipeline = pipeline
        self._chaining = chaining

    def build(self, job_name: str) -> JobGraph:
        transformations = self._transformations
        if not transformations:  # as in Flink, a job of operators without a sink runs (for their side effects)
            raise ValueError("No operators defined in streaming topology. Cannot execute.")
        self._check_sink_names(transformations)
        default_parallelism = self._pipeline.parallelism
        max_parallelism = self._pipeline.max_parallelism
        parallelism = {t.id: t.parallelism or default_parallelism for t in transformations}
        for t in transformations:  # a side-output stream runs beside (chained to) its producer
            if t.kind is OperatorKind.SIDE_OUTPUT:
                parallelism[t.id] = parallelism[t.inputs[0][0].id]
        for t in transformations:
            if parallelism[t.id] > max_parallelism:
                source = "set_parallelism()" if t.parallelism else "parallelism.default"
                raise ConfigurationError(
                    f"operator {t.name!r} has parallelism {parallelism[t.id]} ({source}), above "
                    f"pipeline.max-parallelism {max_parallelism}: key groups cannot be spread over more "
                    f"subtasks than there are; lower the parallelism or raise pipeline.max-parallelism"
                )
        uids = self._uids(transformations)

        def edge_spec(upstream: Transformation, t: Transformation, spec: PartitionerSpec | None):
            if spec is None:
                kind = (
                    PartitionerKind.FORWARD
                    if parallelism[upstream.id] == parallelism[t.id]
                    else (PartitionerKind.REBALANCE)
                )
                return PartitionerSpec(kind=kind)
            if spec.kind is PartitionerKind.FORWARD and parallelism[upstream.id] != parallelism[t.id]:
                raise ValueError(
                    f"forward() between {upstream.name!r} (parallelism {parallelism[upstream.id]}) and "
                    f"{t.name!r} (parallelism {parallelism[t.id]}) needs equal parallelism"
                )
            return spec

        head_of: dict[int, Transformation] = {}
        for t in transformations:
            chained = (
                self._chaining
                and len(t.inputs) == 1
                and t.kind is not OperatorKind.SOURCE
                and edge_spec(t.inputs[0][0], t, t.inputs[0][1]).kind is PartitionerKind.FORWARD
            )
            head_of[t.id] = head_of[t.inputs[0][0].id] if chained else t

        members: dict[int, list[Transformation]] = {}
        for t in transformations:
            members.setdefault(head_of[t.id].id, []).append(t)

        for t in transformations:
            check_picklable(t, uids[t.id])
        graph = JobGraph(job_id=uuid.uuid4().hex, name=job_name)
        index_in_vertex: dict[int, int] = {}
        specs: dict[int, OperatorSpec] = {}
        for head_id, chain in members.items():
            head = chain[0]
            names = " -> ".join(t.name for t in chain)
            vertex = JobVertex(
                id=uids[head_id],
                name=names,
                parallelism=parallelism[head_id],
                max_parallelism=max_parallelism,
                is_source=head.kind is OperatorKind.SOURCE,
            )
            for position, t in enumerate(chain):
                index_in_vertex[t.id] = position
                upstream_name = t.inputs[0][0].name if t.inputs else None
                spec = OperatorSpec(
                    uid=uids[t.id],
                    name=t.name,
                    kind=t.kind,
                    function=t.function,
                    input_schema=t.input_schema,
                    input_name=upstream_name,
                    output_schema=t.output_schema,
                    key_field=t.key_field,
                    key_selector=t.key_selector,
                    timestamp_strategy=t.timestamp_strategy,
                )
                specs[t.id] = spec
                vertex.operators.append(spec)
            graph.add_vertex(vertex)

        for t in transformations:
            for upstream, spec in t.inputs:
                tag = t.function.tag_id if t.kind is OperatorKind.SIDE_OUTPUT else None
                if tag is not None:
                    specs[upstream.id].side_output_schemas[tag] = t.output_schema
                if head_of[t.id] is head_of[upstream.id]:
                    specs[upstream.id].chained_outputs.append(index_in_vertex[t.id])
                    if tag is not None:
                        specs[upstream.id].chained_output_tags[index_in_vertex[t.id]] = tag
                    continue
                source_vertex = uids[head_of[upstream.id].id]
                edge = graph.connect(source_vertex, uids[head_of[t.id].id], edge_spec(upstream, t, spec))
                # Only the head of a vertex has network inputs.
                if head_of[t.id] is not t:
                    raise AssertionError("a chained operator cannot have a network input")
                edge_index = graph.vertices[source_vertex].outputs.index(edge)
                specs[upstream.id].network_outputs.append(edge_index)
                if tag is not None:
                    specs[upstream.id].network_output_tags[edge_index] = tag
        return graph

    @staticmethod
    def _check_sink_names(transformations: list[Transformation]) -> None:
        """Sinks report results under their ``name`` (CollectSink): two with one name would overwrite."""
        seen: dict[str, str] = {}
        for t in transformations:
            name = getattr(t.function, "name", None) if t.kind is OperatorKind.SINK else None
            if not isinstance(name, str):
                continue
            if name in seen:
                raise ConfigurationError(
                    f"two sinks named {name!r} in one job ({seen[name]!r} and {t.name!r}): their results would "
                    f"overwrite each other; give each {type(t.function).__name__} a distinct name"
                )
            seen[name] = t.name

    @staticmethod
    def _uids(transformations: list[Transformation]) -> dict[int, str]:
        uids: dict[int, str] = {}
        seen: set[str] = set()
        for t in transformations:
            uid = t.uid or f"{t.kind.replace('_', '-')}-{t.id}"
            if uid in seen:
                raise ValueError(f"duplicate operator uid {uid!r}: uids must be unique within a job")
            seen.add(uid)
            uids[t.id] = uid
        return uids
