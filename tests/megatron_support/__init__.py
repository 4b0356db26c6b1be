"""Test-only helpers that run megatron-core on the CPU (see cpu_shims)."""
