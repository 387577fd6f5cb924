"""What only the benchmark and learning scripts use: MFU, interleaved rounds, sweeps."""
