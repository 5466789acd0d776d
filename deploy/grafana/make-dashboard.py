#!/usr/bin/python3
"""Writes rbridge-dashboard.json (run it after editing; the JSON is what Grafana imports). One unit per panel."""
import json
import os

ds = {"type": "prometheus", "uid": "${datasource}"}
panels = []
row_y = [0]


def panel(title, kind, targets, unit=None, desc="", right=False, extra=None):
    p = {"id": len(panels) + 1, "title": title, "type": kind, "datasource": ds, "description": desc,
         "gridPos": {"x": 12 if right else 0, "y": row_y[0], "w": 12, "h": 8},
         "targets": [dict(refId=chr(65 + i), datasource=ds, expr=e, legendFormat=l,
                          **({"format": "heatmap"} if kind == "heatmap" else {}))
                     for i, (e, l) in enumerate(targets)],
         "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []}, "options": {}}
    if extra:
        for k, v in extra.items():
            if k == "defaults":
                p["fieldConfig"]["defaults"].update(v)
            else:
                p[k] = v
    panels.append(p)
    if right:
        row_y[0] += 8


sel = 'instance=~"$bridge", export=~"$export"'
br = 'instance=~"$bridge"'
RI = "$__rate_interval"
panel("NBD requests/s", "timeseries",
      [(f'sum by (export, op) (rate(rbridge_nbd_requests_total{{{sel}}}[{RI}]))', "{{export}} {{op}}")],
      unit="reqps", desc="I/O rate as the NBD clients see it.")
panel("NBD throughput", "timeseries",
      [(f'sum by (export, op) (rate(rbridge_nbd_request_bytes_total{{{sel}}}[{RI}]))', "{{export}} {{op}}")],
      unit="Bps", right=True)
panel("NBD read/write latency (heat map)", "heatmap",
      [(f'sum by (le) (rate(rbridge_nbd_request_duration_seconds_bucket{{{sel}, op=~"read|write"}}[{RI}]))',
        "{{le}}")],
      desc="Buckets from 1 us to 10 s.",
      extra={"options": {"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1,
                         "color": {"mode": "scheme", "scheme": "Oranges"}}})
panel("NBD latency p50 / p99", "timeseries",
      [(f'histogram_quantile(0.5, sum by (op, le) (rate(rbridge_nbd_request_duration_seconds_bucket{{{sel}}}[{RI}])))',
        "p50 {{op}}"),
       (f'histogram_quantile(0.99, sum by (op, le) (rate(rbridge_nbd_request_duration_seconds_bucket{{{sel}}}[{RI}])))',
        "p99 {{op}}")], unit="s", right=True)
panel("NBD errors/s by errno", "timeseries",
      [(f'sum by (export, op, errno) (rate(rbridge_nbd_errors_total{{{sel}}}[{RI}]))', "{{export}} {{op}} {{errno}}"),
       (f'sum(rate(rbridge_nbd_protocol_violations_total{{{br}}}[{RI}]))', "protocol violations")],
      unit="reqps", desc="EIO: the bridge failed; EINVAL/ENOSPC/EPERM/EOVERFLOW: bad requests; ESHUTDOWN: a drain.")
panel("NBD in flight and connections", "timeseries",
      [(f'sum by (export) (rbridge_nbd_requests_in_flight{{{sel}}})', "in flight {{export}}"),
       (f'sum by (export) (rbridge_nbd_connections{{{sel}}})', "connections {{export}}")], unit="short", right=True)
panel("Slab replica health", "timeseries",
      [(f'sum by (export, state) (rbridge_volume_slabs{{{sel}, state!="unallocated"}})', "{{export}} {{state}}")],
      unit="short",
      desc="healthy: all replicas live; degraded: fewer than configured; rebuilding: a copy in progress; lost: none.",
      extra={"defaults": {"custom": {"stacking": {"mode": "normal"}, "fillOpacity": 60}}})
panel("Memserver reachability", "timeseries",
      [(f'rbridge_memserver_reachable{{{br}}}', "bridge -> {{memserver}}"),
       ('up{job="rbridge-memserver"}', "scrape {{instance}}")], unit="short", right=True,
      extra={"defaults": {"min": 0, "max": 1}})
panel("Rebuild: bytes still to copy", "timeseries",
      [(f'sum(rbridge_rebuild_remaining_bytes{{{br}}})', "remaining")], unit="bytes",
      desc="The rest of the slab being copied plus every queued slab: falls to 0 as the rebuild finishes.")
panel("Rebuild: copy rate", "timeseries",
      [(f'sum(rate(rbridge_rebuild_copied_bytes_total{{{br}}}[{RI}]))', "copied")], unit="Bps", right=True)
panel("Rebuild: queue, completions, failures", "timeseries",
      [(f'sum(rbridge_rebuild_queue_slabs{{{br}}})', "queued slabs"),
       (f'sum by (kind) (increase(rbridge_rebuild_completed_total{{{br}}}[{RI}]))', "completed {{kind}}"),
       (f'sum(increase(rbridge_rebuild_failed_total{{{br}}}[{RI}]))', "failed")], unit="short")
panel("Remote operation latency p99", "timeseries",
      [(f'histogram_quantile(0.99, sum by (memserver, op, le) (rate(rbridge_remote_op_duration_seconds_bucket{{{br}}}[{RI}])))',
        "{{memserver}} {{op}}")], unit="s", right=True)
panel("Remote operations/s and errors/s", "timeseries",
      [(f'sum by (memserver) (rate(rbridge_remote_ops_total{{{br}}}[{RI}]))', "ops {{memserver}}"),
       (f'sum by (memserver) (rate(rbridge_remote_errors_total{{{br}}}[{RI}]))', "errors {{memserver}}")],
      unit="ops")
panel("Memserver capacity", "timeseries",
      [('rbridge_memserver_capacity_bytes', "capacity {{instance}} {{memserver}}"),
       ('rbridge_memserver_granted_bytes', "granted {{instance}} {{memserver}}"),
       ('rbridge_memserver_resident_bytes', "resident {{instance}} {{memserver}}")], unit="bytes", right=True)
panel("Memserver clients and refused connections", "timeseries",
      [('rbridge_memserver_clients', "clients {{instance}} {{memserver}}"),
       (f'sum by (instance, reason) (increase(rbridge_memserver_refused_connections_total[{RI}]))',
        "refused {{reason}} {{instance}}")], unit="short")
panel("Memserver transport throughput", "timeseries",
      [(f'sum by (instance, transport) (rate(rbridge_transport_write_bytes_total[{RI}]))', "written {{instance}}"),
       (f'sum by (instance, transport) (rate(rbridge_transport_read_bytes_total[{RI}]))', "read {{instance}}")],
      unit="Bps", right=True)
panel("Process CPU", "timeseries",
      [(f'rate(process_cpu_seconds_total{{job=~"rbridge-.*"}}[{RI}])', "{{job}} {{instance}}")], unit="short",
      desc="CPU cores used.")
panel("JVM heap", "timeseries",
      [('sum by (job, instance) (jvm_memory_used_bytes{job=~"rbridge-.*", area="heap"})', "{{job}} {{instance}}")],
      unit="bytes", right=True)
panel("Open files and threads", "timeseries",
      [('process_files_open_files{job=~"rbridge-.*"}', "open files {{instance}}"),
       ('jvm_threads_live_threads{job=~"rbridge-.*"}', "threads {{instance}}")], unit="short")

dash = {
    "title": "rbridge", "uid": "rbridge-overview", "schemaVersion": 39, "version": 2, "editable": True,
    "tags": ["rbridge", "nbd", "rdma"], "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
    "description": "rbridge bridge and memservers: NBD I/O, latency, errors, replica health, rebuilds, memservers.",
    "templating": {"list": [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
        {"name": "bridge", "label": "Bridge", "type": "query", "datasource": ds, "includeAll": True, "multi": True,
         "query": {"query": "label_values(rbridge_nbd_requests_total, instance)", "refId": "bridge"},
         "definition": "label_values(rbridge_nbd_requests_total, instance)", "refresh": 2, "allValue": ".*"},
        {"name": "export", "label": "Export", "type": "query", "datasource": ds, "includeAll": True, "multi": True,
         "query": {"query": "label_values(rbridge_nbd_requests_total{instance=~\"$bridge\"}, export)",
                   "refId": "export"},
         "definition": "label_values(rbridge_nbd_requests_total{instance=~\"$bridge\"}, export)", "refresh": 2,
         "allValue": ".*"},
    ]},
    "panels": panels,
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rbridge-dashboard.json")
with open(out, "w") as f:
    json.dump(dash, f, indent=2)
    f.write("\n")
print("%s: %d panels" % (out, len(panels)))
