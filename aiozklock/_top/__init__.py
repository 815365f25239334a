"""``aiozklock top PREFIX``: a live view of the locks under a prefix, refreshed by watches.

``_screen`` decides what to draw (pure: a ``Snapshot`` in, lines out, for any size),
``_watch`` keeps a children watch on every node under the prefix, ``_live`` runs the view
(the watches, the doctor, the keys, the signals), ``_terminal`` draws on a terminal with
plain ANSI sequences. The command line is ``_cli/_top.py``."""
