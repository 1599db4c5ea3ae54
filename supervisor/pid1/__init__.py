"""The init layer: what runs as PID 1, in the standard library alone.

Nothing here imports the orchestrator's side of the package (trio, pluggy,
PyYAML, the configuration, the plugin host): PID 1 must start in a few
milliseconds, cost little memory, and keep running whatever a plugin or the
event loop does.  The orchestrator imports from here, never the reverse;
``tests/core/test_init_imports.py`` holds the line.
"""
