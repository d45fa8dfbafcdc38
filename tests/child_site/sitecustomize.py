"""Run at start-up by the Python processes the tests start (brokers, the CLI), which have this
folder first on PYTHONPATH (``tests.conftest.child_env``).

kio imports hypothesis whenever it is installed, only to register strategies for its types.
The test extra installs it, a broker or CLI install does not: a started process that imported it
would pay ~0.35 s of CPU at every start for nothing it uses. Blocking it makes the process import
what it imports in production. The test processes themselves (pytest and its workers, which do
use hypothesis) never have this folder on their path.
"""

import sys

sys.modules.setdefault("hypothesis", None)
