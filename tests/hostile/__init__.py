"""Hostile-input suite (issue 23): inputs an attacker controls (a checkpoint, a Hub, context values, request
bodies, streams), each refused with a clear message before anything is written. One module per area."""
