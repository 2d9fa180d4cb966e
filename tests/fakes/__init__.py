"""Local stand-ins for remote services, run as real HTTP servers by the tests and benchmarks."""
