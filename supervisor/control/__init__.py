"""Operating a running supervisor: the control socket, its protocol, its client.

``protocol`` (stdlib only) is what both sides agree on: where the socket is
and what a request and an answer look like.  ``server`` (trio) runs inside
the orchestrator; ``client`` (stdlib only, so ``supervisor status`` starts in
milliseconds) is the CLI's side.  ``logs`` keeps the recent output lines.
"""
