"""Measure: from records to numbers. Takes request records and point rows; gives per-request and per-point
metrics, steady windows, intervals, frontiers and speedups, verdicts, the lossless and accuracy checks."""
