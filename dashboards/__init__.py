"""Grafana dashboards for gpuscope, built from Python (see build.py) into JSON."""
