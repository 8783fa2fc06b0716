"""Test support, not production: code that exists for conformance runs and tests.

``scripted_model`` is the offline scripted model (a local HTTP server in the
model provider's seat that speaks each vendor's wire API and issues planned
calls), and ``conformance_tools`` is the ``conformance`` tool set a turn file
may name for conformance runs. Nothing a user's real turn serves lives here.

Layer: beside ``bridge`` (``tests/test_layers.py``): ``conformance_tools``
uses the bridge's peer hook and ``bridge.stdio`` registers the tool set when a
turn file asks for it; the harness and conformance layers above use the
scripted model.
"""
