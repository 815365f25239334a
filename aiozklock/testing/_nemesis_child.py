"""Entry point of a nemesis child process (see :mod:`._nemesis_worker_child`).

``python -m aiozklock.testing._nemesis_child CONFIG_JSON``: a module of its own, so that the
worker module is imported once, as a module, and not run as ``__main__`` a second time.
"""

from aiozklock.testing._nemesis_worker_child import main

if __name__ == "__main__":
    main()
