"""Health: checks repeated while the pod runs, the verdicts the kubelet's
probes ask for, and the probe listener (/livez, /readyz, /metrics).

``board`` holds every check's state and answers alive/ready; ``monitor``
runs the configured checks; ``listener`` and ``metrics`` serve HTTP, reading
the pod through ``metrics.PodView``; ``accept`` is the accept loop the
listener shares with the control socket.  The control layer
(``supervisor.control``) builds on this package, never the reverse.
"""
