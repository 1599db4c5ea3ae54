"""Health: checks repeated while the pod runs, the verdicts the kubelet's
probes ask for, and the probe listener (/livez, /readyz, /metrics).

``board`` holds every check's state and answers alive/ready; ``monitor``
runs the configured checks; ``listener`` and ``metrics`` serve HTTP.
"""
