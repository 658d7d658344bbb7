"""What the fleet exports to Prometheus: a worker's own metrics (`prometheus`), the label rules apart from the
Prometheus client (`labels`, which the testing kit imports), and the cluster-wide exporter `claudeq exporter` serves
(`exporter`).

Imports from the worker: run.
"""
