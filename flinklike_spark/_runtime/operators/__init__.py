"""Stream operators.

The operator base and its context; the built-in operators (keyed, process,
co, window, async, vectorized aggregation, source, sink, watermarks); the
picklable operator specs and the kind -> class registry; row conversion.
"""
