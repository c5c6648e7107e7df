"""What every benchmark JSON records about where it ran, and how benchmark processes share the cores: the package's
agentgym_nb/host.py, imported by the bench scripts as `from _common import ...`.

It is loaded from its file, not imported with the package: a script may load another checkout's package after this
(bench/horizon_profile.py --package), and the package it gets must be that one."""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "_host", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agentgym_nb", "host.py"))
_host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_host)
commit, machine, priority, start_job, versions, yield_cpu = (
    _host.commit, _host.machine, _host.priority, _host.start_job, _host.versions, _host.yield_cpu)
