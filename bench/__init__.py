"""The benchmarks: three entry scripts (`bench_single.py`, `bench_replicaset.py`,
`bench_audit.py`), the kit they share (`bench.kit`) and one module per scenario
(`bench.scenarios`). A package so that the entry scripts and the helper processes they start
import the same modules by the same names; nothing here is installed with the server."""
