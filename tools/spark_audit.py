"""The audit as a spark-submit job: `spark-submit [--master URL] tools/spark_audit.py DIR... [--json OUT] [--html OUT]`.

The session spark-submit starts is reused (its master, its settings); the arguments and the
exit code are those of `replicaset audit`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replicaset.audit.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
