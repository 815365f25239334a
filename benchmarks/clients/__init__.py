"""One module per Python client library: ``SCENARIOS`` and ``run(scenario, params, gate)``."""
